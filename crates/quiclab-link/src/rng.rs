//! Counter-based randomness: every draw is a pure function of
//! `(seed, direction, stage, packet index, draw number)`.
//!
//! This is what makes a packet's fate independent of what else crossed the link: two trials with
//! the same seed drop the same packet indices whatever protocol they carry, and adding or removing
//! a stage does not shift the draws of another stage. The mixer is SplitMix64's finaliser
//! (Steele, Lea, Flood 2014), which passes BigCrush when fed a counter; a stateful generator from
//! a crate would make fates depend on the order of earlier draws.

use crate::Direction;

/// Which stage draws: each has its own stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u64)]
pub enum Stream {
    Loss = 1,
    Burst = 2,
    Duplicate = 3,
    Jitter = 4,
    Reorder = 5,
}

/// splitmix64's finaliser: a well-mixed 64-bit value from any 64-bit input.
#[inline]
pub fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Draws for one stage of one direction of a seeded link.
#[derive(Debug, Clone, Copy)]
pub struct Draws {
    key: u64,
}

impl Draws {
    pub fn new(seed: u64, direction: Direction, stream: Stream) -> Self {
        let dir = match direction {
            Direction::Up => 0x5550,
            Direction::Down => 0x444f,
        };
        Draws {
            key: mix(mix(seed) ^ mix(dir) ^ mix(stream as u64).rotate_left(17)),
        }
    }

    /// A uniform number in `[0, 1)` for draw `k` of packet `index`.
    #[inline]
    pub fn uniform(&self, index: u64, k: u64) -> f64 {
        let x = mix(self.key ^ mix(index.wrapping_mul(4).wrapping_add(k)));
        // 53 random mantissa bits
        (x >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// True with probability `p`.
    #[inline]
    pub fn bernoulli(&self, index: u64, k: u64, p: f64) -> bool {
        p > 0.0 && self.uniform(index, k) < p
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uniform_is_uniform_and_reproducible() {
        let d = Draws::new(7, Direction::Up, Stream::Loss);
        let n = 200_000;
        let mut buckets = [0u32; 10];
        for i in 0..n {
            let u = d.uniform(i, 0);
            assert!((0.0..1.0).contains(&u));
            buckets[(u * 10.0) as usize] += 1;
            assert_eq!(u, d.uniform(i, 0));
        }
        // each bucket ~ Binomial(n, 0.1): sd = sqrt(n*0.09) ~ 134; 5 sd = 670
        for b in buckets {
            assert!((b as i64 - 20_000).abs() < 670, "{buckets:?}");
        }
    }

    #[test]
    fn streams_and_directions_are_independent() {
        let a = Draws::new(7, Direction::Up, Stream::Loss);
        let b = Draws::new(7, Direction::Down, Stream::Loss);
        let c = Draws::new(7, Direction::Up, Stream::Burst);
        let same_ab = (0..1000)
            .filter(|&i| a.uniform(i, 0) == b.uniform(i, 0))
            .count();
        let same_ac = (0..1000)
            .filter(|&i| a.uniform(i, 0) == c.uniform(i, 0))
            .count();
        assert_eq!(same_ab + same_ac, 0);
    }
}
