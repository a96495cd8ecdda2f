//! Adaptive iterations: when a cell group (one condition and size, every arm) has enough
//! iterations. The campaign asks it after each completed iteration to decide whether to stop;
//! the report asks it again of the stored trials to say how many each group needed and why it
//! stopped. Both ask the same function, so they agree.
//!
//! The rule: a group has enough once the 95 % bootstrap interval of every compared difference
//! in it (the relative change of medians, `(b - a) / a`, as the report shows it) is at most the
//! target wide on each side; with no comparisons in the plan, once every arm's median is known
//! that well (its interval's half-width relative to the median).

use std::collections::BTreeMap;

use quiclab_model::campaign::Comparison;

use crate as stats;

/// What a group's samples say.
#[derive(Debug, Clone, PartialEq)]
pub struct Precision {
    /// The widest half-width, as a fraction (0.02 is ±2 %), over the group's compared
    /// differences; `None` when one of them cannot be estimated yet (fewer than 2 samples).
    pub half_width: Option<f64>,
    /// Which difference (or arm) that is: "a vs b", or the arm's name.
    pub widest: String,
}

impl Precision {
    /// Whether the group is known to within `target` (a fraction).
    pub fn within(&self, target: f64) -> bool {
        self.half_width.is_some_and(|h| h <= target)
    }
}

/// The precision of a group from its samples per arm (the compared figure of each successful
/// trial of its completed iterations) and the plan's comparisons. `seed_parts` name the group
/// (its condition and size): the bootstrap's seed, so the answer is reproducible.
pub fn precision(
    samples: &BTreeMap<String, Vec<f64>>,
    comparisons: &[Comparison],
    seed_parts: &[&str],
) -> Precision {
    // the bootstrap draws by position: in order of value, the answer does not depend on the
    // order the trials were recorded in (the campaign's) or stored in (the report's)
    let samples: BTreeMap<String, Vec<f64>> = samples
        .iter()
        .map(|(arm, xs)| (arm.clone(), stats::sorted(xs)))
        .collect();
    let samples = &samples;
    let empty = Vec::new();
    let get = |arm: &str| samples.get(arm).unwrap_or(&empty);
    let mut widest: Option<(f64, String)> = None;
    let mut unknown: Option<String> = None;
    let mut consider = |h: Option<f64>, what: String| match h {
        Some(h) => {
            if widest.as_ref().is_none_or(|(w, _)| h > *w) {
                widest = Some((h, what));
            }
        }
        None => {
            unknown.get_or_insert(what);
        }
    };
    if comparisons.is_empty() {
        for (arm, xs) in samples {
            let mut parts = seed_parts.to_vec();
            parts.extend(["adaptive", arm]);
            let h = stats::bootstrap_median_ci(xs, stats::seed_from(&parts)).and_then(|ci| {
                let m = stats::median(xs)?;
                (m != 0.0).then(|| (ci.hi - ci.lo) / 2.0 / m.abs())
            });
            consider(h, arm.clone());
        }
    } else {
        for c in comparisons {
            let mut parts = seed_parts.to_vec();
            parts.extend(["adaptive", &c.a, &c.b]);
            let h =
                stats::bootstrap_relative_change_ci(get(&c.a), get(&c.b), stats::seed_from(&parts))
                    .map(|ci| (ci.hi - ci.lo) / 2.0);
            consider(h, format!("{} vs {}", c.a, c.b));
        }
    }
    match (unknown, widest) {
        (Some(what), _) => Precision {
            half_width: None,
            widest: what,
        },
        (None, Some((h, what))) => Precision {
            half_width: Some(h),
            widest: what,
        },
        (None, None) => Precision {
            half_width: None,
            widest: String::new(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Rng;

    fn cmp(a: &str, b: &str) -> Comparison {
        Comparison {
            a: a.into(),
            b: b.into(),
        }
    }

    /// `n` samples around `mean` with a relative spread of `spread` (uniform).
    fn noisy(rng: &mut Rng, n: usize, mean: f64, spread: f64) -> Vec<f64> {
        (0..n)
            .map(|_| {
                let u = rng.next_u64() as f64 / u64::MAX as f64;
                mean * (1.0 + spread * (2.0 * u - 1.0))
            })
            .collect()
    }

    #[test]
    fn the_interval_narrows_with_more_samples_and_a_steady_pair_meets_its_target_early() {
        let mut rng = Rng::new(7);
        let comparisons = [cmp("h2", "h3")];
        let at = |n: usize, spread: f64, rng: &mut Rng| {
            let mut s = BTreeMap::new();
            s.insert("h2".to_string(), noisy(rng, n, 100.0, spread));
            s.insert("h3".to_string(), noisy(rng, n, 90.0, spread));
            precision(&s, &comparisons, &["base", "100000"])
        };
        // ±1 % samples: their medians' change is known to about ±1 % from 10 samples on
        let steady = at(10, 0.01, &mut rng);
        assert!(steady.within(0.02), "{steady:?}");
        assert_eq!(steady.widest, "h2 vs h3");
        // ±30 % samples: not at 10, and 4 times the samples halve the interval (1/sqrt(n))
        let (few, many) = (at(10, 0.3, &mut rng), at(40, 0.3, &mut rng));
        let (hf, hm) = (few.half_width.unwrap(), many.half_width.unwrap());
        assert!(!few.within(0.02), "{few:?}");
        assert!(hm < 0.75 * hf, "10 samples ±{hf}, 40 samples ±{hm}");
    }

    #[test]
    fn the_widest_comparison_decides_and_a_missing_arm_keeps_the_group_running() {
        let mut rng = Rng::new(3);
        let mut s = BTreeMap::new();
        s.insert("a".to_string(), noisy(&mut rng, 20, 100.0, 0.01));
        s.insert("b".to_string(), noisy(&mut rng, 20, 100.0, 0.01));
        s.insert("c".to_string(), noisy(&mut rng, 20, 100.0, 0.4));
        let p = precision(&s, &[cmp("a", "b"), cmp("a", "c")], &["g"]);
        assert_eq!(p.widest, "a vs c");
        assert!(!p.within(0.05), "{p:?}");
        // an arm with one success (its others failed): nothing can be said yet
        s.insert("d".to_string(), vec![100.0]);
        let p = precision(&s, &[cmp("a", "b"), cmp("a", "d")], &["g"]);
        assert_eq!((p.half_width, p.widest.as_str()), (None, "a vs d"));
        assert!(!p.within(1.0));
    }

    #[test]
    fn without_comparisons_each_arms_median_must_be_known() {
        let mut rng = Rng::new(5);
        let mut s = BTreeMap::new();
        s.insert("only".to_string(), noisy(&mut rng, 12, 200.0, 0.01));
        let p = precision(&s, &[], &["g"]);
        assert_eq!(p.widest, "only");
        assert!(p.within(0.02), "{p:?}");
        // the same answer every time: the seed comes from the group's name, and the order of
        // the samples does not matter
        assert_eq!(p, precision(&s, &[], &["g"]));
        s.get_mut("only").unwrap().reverse();
        assert_eq!(p, precision(&s, &[], &["g"]));
    }
}
