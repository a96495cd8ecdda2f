//! Instantaneous stages: they decide a packet's fate on arrival and hold nothing.

use std::time::Duration;

use crate::Direction;
use crate::config::Burst;
use crate::event::DropReason;
use crate::rng::{Draws, Stream};

/// What a filter decides for one packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Pass,
    Drop(DropReason),
    /// Pass, and pass a copy too.
    Duplicate,
}

/// An instantaneous stage. Called once per packet in arrival order; `index` is the packet's
/// arrival index in its direction, `at` its arrival time.
pub trait Filter: Send {
    fn decide(&mut self, at: Duration, index: u64, size: usize) -> Verdict;
}

/// Drops packets larger than the link MTU.
pub struct Mtu(pub u32);

impl Filter for Mtu {
    fn decide(&mut self, _: Duration, _: u64, size: usize) -> Verdict {
        if size > self.0 as usize {
            Verdict::Drop(DropReason::Mtu)
        } else {
            Verdict::Pass
        }
    }
}

/// Drops everything during scheduled outages `[from, to)`.
pub struct Outages(pub Vec<(Duration, Duration)>);

impl Filter for Outages {
    fn decide(&mut self, at: Duration, _: u64, _: usize) -> Verdict {
        if self.0.iter().any(|&(a, b)| a <= at && at < b) {
            Verdict::Drop(DropReason::Outage)
        } else {
            Verdict::Pass
        }
    }
}

/// Drops an explicit, sorted list of packet indices.
pub struct Listed(pub Vec<u64>);

impl Filter for Listed {
    fn decide(&mut self, _: Duration, index: u64, _: usize) -> Verdict {
        if self.0.binary_search(&index).is_ok() {
            Verdict::Drop(DropReason::Listed)
        } else {
            Verdict::Pass
        }
    }
}

/// Drops counted among the packets of at least `min_bytes` only: the listed indices (sorted)
/// of those, whatever smaller packets fall between them. Planted, as the listed drops are.
pub struct LargeListed {
    min_bytes: u32,
    list: Vec<u64>,
    seen: u64,
}

impl LargeListed {
    pub fn new(min_bytes: u32, list: Vec<u64>) -> LargeListed {
        LargeListed {
            min_bytes,
            list,
            seen: 0,
        }
    }
}

impl Filter for LargeListed {
    fn decide(&mut self, _: Duration, _: u64, size: usize) -> Verdict {
        if size < self.min_bytes as usize {
            return Verdict::Pass;
        }
        let n = self.seen;
        self.seen += 1;
        if self.list.binary_search(&n).is_ok() {
            Verdict::Drop(DropReason::Listed)
        } else {
            Verdict::Pass
        }
    }
}

/// An isolated loss ([`crate::config::IsolatedLoss`]): the `index`th packet of at least
/// `min_bytes` dropped, the `keep` packets after it passed, and every packet for `blackout`
/// after the last of them dropped; all planted, as the listed drops are.
pub struct IsolatedLoss {
    plan: crate::config::IsolatedLoss,
    seen: u64,
    state: Isolation,
}

enum Isolation {
    Before,
    Behind(u32),
    Blackout(Duration),
    Done,
}

impl IsolatedLoss {
    pub fn new(plan: crate::config::IsolatedLoss) -> IsolatedLoss {
        IsolatedLoss {
            plan,
            seen: 0,
            state: Isolation::Before,
        }
    }
}

impl Filter for IsolatedLoss {
    fn decide(&mut self, at: Duration, _: u64, size: usize) -> Verdict {
        match self.state {
            Isolation::Before => {
                if size < self.plan.min_bytes as usize {
                    return Verdict::Pass;
                }
                self.seen += 1;
                if self.seen <= self.plan.index {
                    return Verdict::Pass;
                }
                self.state = Isolation::Behind(self.plan.keep);
                Verdict::Drop(DropReason::Listed)
            }
            Isolation::Behind(left) => {
                self.state = if left > 1 {
                    Isolation::Behind(left - 1)
                } else {
                    Isolation::Blackout(at + self.plan.blackout)
                };
                Verdict::Pass
            }
            Isolation::Blackout(until) if at < until => Verdict::Drop(DropReason::Listed),
            Isolation::Blackout(_) | Isolation::Done => {
                self.state = Isolation::Done;
                Verdict::Pass
            }
        }
    }
}

/// A tail's blackout: from the packet that takes the bytes offered past `after`, every packet
/// is dropped for `length`; all later pass. Whatever a transfer's packet count, its last flight
/// is lost whole if it leaves within `length`, and the first packet the sender writes after its
/// timer (longer than `length`) gets through. Counted with the listed drops: both are planted.
pub struct Blackout {
    after: u64,
    length: Duration,
    offered: u64,
    until: Option<Duration>,
}

impl Blackout {
    pub fn new(after: u64, length: Duration) -> Blackout {
        Blackout {
            after,
            length,
            offered: 0,
            until: None,
        }
    }
}

impl Filter for Blackout {
    fn decide(&mut self, at: Duration, _: u64, size: usize) -> Verdict {
        if let Some(until) = self.until {
            return if at < until {
                Verdict::Drop(DropReason::Listed)
            } else {
                Verdict::Pass
            };
        }
        self.offered += size as u64;
        if self.offered > self.after {
            self.until = Some(at + self.length);
            Verdict::Drop(DropReason::Listed)
        } else {
            Verdict::Pass
        }
    }
}

/// Independent (Bernoulli) loss.
pub struct Random {
    draws: Draws,
    p: f64,
}

impl Random {
    pub fn new(seed: u64, dir: Direction, p: f64) -> Self {
        Random {
            draws: Draws::new(seed, dir, Stream::Loss),
            p,
        }
    }
}

impl Filter for Random {
    fn decide(&mut self, _: Duration, index: u64, _: usize) -> Verdict {
        if self.draws.bernoulli(index, 0, self.p) {
            Verdict::Drop(DropReason::Random)
        } else {
            Verdict::Pass
        }
    }
}

/// Gilbert-Elliott burst loss. The chain steps once per packet index, including indices that an
/// earlier stage removed, so the state at index `i` depends only on `(seed, direction, i)`.
pub struct GilbertElliott {
    draws: Draws,
    p_enter: f64,
    p_leave: f64,
    bad: bool,
    next_index: u64,
}

impl GilbertElliott {
    pub fn new(seed: u64, dir: Direction, model: Burst) -> Self {
        GilbertElliott {
            draws: Draws::new(seed, dir, Stream::Burst),
            p_enter: model.p_enter(),
            p_leave: model.p_leave(),
            bad: false,
            next_index: 0,
        }
    }

    fn step(&mut self, index: u64) {
        let u = self.draws.uniform(index, 0);
        self.bad = if self.bad {
            u >= self.p_leave
        } else {
            u < self.p_enter
        };
    }
}

impl Filter for GilbertElliott {
    fn decide(&mut self, _: Duration, index: u64, _: usize) -> Verdict {
        while self.next_index <= index {
            self.step(self.next_index);
            self.next_index += 1;
        }
        if self.bad {
            Verdict::Drop(DropReason::Burst)
        } else {
            Verdict::Pass
        }
    }
}

/// Duplicates a share of packets.
pub struct Duplicate {
    draws: Draws,
    p: f64,
}

impl Duplicate {
    pub fn new(seed: u64, dir: Direction, p: f64) -> Self {
        Duplicate {
            draws: Draws::new(seed, dir, Stream::Duplicate),
            p,
        }
    }
}

impl Filter for Duplicate {
    fn decide(&mut self, _: Duration, index: u64, _: usize) -> Verdict {
        if self.draws.bernoulli(index, 0, self.p) {
            Verdict::Duplicate
        } else {
            Verdict::Pass
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_blackout_drops_from_its_byte_for_its_length() {
        let ms = Duration::from_millis;
        let mut b = Blackout::new(3000, ms(60));
        // 1000-byte packets 1 ms apart: the third ends at 3000 bytes and passes, the fourth
        // takes the direction past them and starts 60 ms of drops
        let fates: Vec<Verdict> = (0..6).map(|i| b.decide(ms(i), i, 1000)).collect();
        assert_eq!(&fates[..3], &[Verdict::Pass; 3]);
        assert_eq!(&fates[3..], &[Verdict::Drop(DropReason::Listed); 3]);
        // small packets inside it are dropped too; the first at 3 + 60 ms passes
        assert_eq!(b.decide(ms(62), 6, 60), Verdict::Drop(DropReason::Listed));
        assert_eq!(b.decide(ms(63), 7, 60), Verdict::Pass);
        // and it never starts again
        assert_eq!(b.decide(ms(64), 8, 1000), Verdict::Pass);
    }
}
