//! A campaign split into shards, one per machine (`quiclab run --shard K/N`), merged back by
//! `quiclab merge`.
//!
//! Contract: the split is a function of the plan alone, so every machine that expands the same
//! plan computes the same one; every trial is in exactly one shard; the trials of one *pairing
//! group* (every arm of one condition, size and iteration, with the interleaved baseline run
//! before that condition) share a shard, so that the arms a comparison pairs ran on one host;
//! and the shards' expected durations are balanced: groups are placed longest first, each on
//! the shard with the least expected time so far (within one group's duration of even).

use std::collections::BTreeMap;
use std::fmt;

use crate::expand::TrialSpec;
use crate::plan::Plan;

/// Shard `index` (1-based) of `count`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    pub index: usize,
    pub count: usize,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("--shard {given:?}: {why} (K/N: shard K of N, 1 <= K <= N, e.g. 2/4)")]
pub struct ShardError {
    given: String,
    why: &'static str,
}

impl std::str::FromStr for Shard {
    type Err = ShardError;

    fn from_str(s: &str) -> Result<Shard, ShardError> {
        let err = |why| ShardError {
            given: s.to_string(),
            why,
        };
        let (k, n) = s.split_once('/').ok_or_else(|| err("no '/'"))?;
        let index: usize = k.trim().parse().map_err(|_| err("K is not a number"))?;
        let count: usize = n.trim().parse().map_err(|_| err("N is not a number"))?;
        if count == 0 {
            return Err(err("N is 0"));
        }
        if index == 0 || index > count {
            return Err(err("K is outside 1..=N"));
        }
        Ok(Shard { index, count })
    }
}

impl fmt::Display for Shard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

/// What a trial is expected to take, in ms: a fixed cost (namespaces, link, processes), then
/// per request a few round trips and the body's serialisation at the bottleneck rate (a link
/// without one counted at 1 Gbit/s); for a workload without requests (telemetry), its
/// configured duration when it has one. An estimate for balancing, not a prediction.
pub fn expected_ms(plan: &Plan, spec: &TrialSpec) -> f64 {
    const FIXED_MS: f64 = 250.0;
    const ROUND_TRIPS: f64 = 4.0;
    let cond = &plan.conditions[spec.condition];
    let rtt_ms = cond.link.min_rtt().as_secs_f64() * 1000.0;
    let rate = cond.rate_bps().unwrap_or(1_000_000_000).max(1) as f64;
    let requests: f64 = spec
        .requests
        .iter()
        .map(|&bytes| ROUND_TRIPS * rtt_ms + bytes as f64 * 8.0 / rate * 1000.0)
        .sum();
    FIXED_MS + requests
}

/// The pairing group of a trial: the trials a comparison pairs, which must share a host.
fn group_key(spec: &TrialSpec) -> (u32, usize, u64) {
    (
        spec.iteration,
        spec.before.unwrap_or(spec.condition),
        spec.size,
    )
}

/// How many pairing groups `specs` make: no split into more shards than this gives every
/// shard a trial.
pub fn groups(specs: &[TrialSpec]) -> usize {
    specs
        .iter()
        .map(group_key)
        .collect::<std::collections::BTreeSet<_>>()
        .len()
}

/// The shard (0-based) of each of `specs` when the plan is split into `count` shards.
pub fn assign(plan: &Plan, specs: &[TrialSpec], count: usize) -> Vec<usize> {
    let count = count.max(1);
    // groups in a fixed order (their key), each with its members and expected time
    let mut groups: BTreeMap<(u32, usize, u64), (Vec<usize>, f64)> = BTreeMap::new();
    for (i, s) in specs.iter().enumerate() {
        let g = groups.entry(group_key(s)).or_default();
        g.0.push(i);
        g.1 += expected_ms(plan, s);
    }
    let mut order: Vec<&(Vec<usize>, f64)> = groups.values().collect();
    // longest first; ties keep the key order (the sort is stable)
    order.sort_by(|a, b| b.1.total_cmp(&a.1));
    let mut load = vec![0.0_f64; count];
    let mut shard_of = vec![0; specs.len()];
    for (members, ms) in order {
        let (least, _) = load
            .iter()
            .enumerate()
            .min_by(|a, b| a.1.total_cmp(b.1))
            .expect("at least one shard");
        load[least] += ms;
        for &i in members {
            shard_of[i] = least;
        }
    }
    shard_of
}

/// The trials of `shard`, in the plan's order.
pub fn select(plan: &Plan, specs: Vec<TrialSpec>, shard: Shard) -> Vec<TrialSpec> {
    let of = assign(plan, &specs, shard.count);
    specs
        .into_iter()
        .zip(of)
        .filter(|(_, s)| *s == shard.index - 1)
        .map(|(spec, _)| spec)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::expand::expand;
    use crate::plan::{Profile, parse};

    fn www21() -> Plan {
        let text = crate::plan::BUILT_IN
            .iter()
            .find(|(n, _)| *n == "www21")
            .unwrap()
            .1;
        parse(text, "built-in www21", Profile::Full).unwrap()
    }

    #[test]
    fn shards_are_parsed_with_what_is_allowed_on_error() {
        assert_eq!("2/4".parse(), Ok(Shard { index: 2, count: 4 }));
        assert_eq!("1/1".parse::<Shard>().unwrap().to_string(), "1/1");
        for bad in ["0/4", "5/4", "2", "a/4", "2/0", "2/b"] {
            let e = bad.parse::<Shard>().unwrap_err().to_string();
            assert!(e.contains(bad) && e.contains("1 <= K <= N"), "{e}");
        }
    }

    #[test]
    fn every_trial_is_in_one_shard_with_its_pairing_group_and_the_shards_balance() {
        let plan = www21();
        let specs = expand(&plan);
        for count in [1, 2, 4, 7] {
            let of = assign(&plan, &specs, count);
            // the same split every time (a function of the plan)
            assert_eq!(of, assign(&plan, &expand(&plan), count));
            // the shards' selections partition the trials
            let mut ids: Vec<&str> = Vec::new();
            let mut loads = Vec::new();
            for k in 1..=count {
                let sel = select(&plan, specs.clone(), Shard { index: k, count });
                assert!(!sel.is_empty(), "shard {k}/{count} is empty");
                loads.push(sel.iter().map(|s| expected_ms(&plan, s)).sum::<f64>());
                ids.extend(
                    specs
                        .iter()
                        .zip(&of)
                        .filter(|(_, s)| **s == k - 1)
                        .map(|(s, _)| s.id.as_str()),
                );
                assert_eq!(sel.len(), of.iter().filter(|s| **s == k - 1).count());
            }
            ids.sort_unstable();
            let mut all: Vec<&str> = specs.iter().map(|s| s.id.as_str()).collect();
            all.sort_unstable();
            assert_eq!(ids, all, "{count} shards");
            // a pairing group never straddles two shards
            let mut shard_of_group = BTreeMap::new();
            for (s, k) in specs.iter().zip(&of) {
                let prev = shard_of_group.insert(group_key(s), *k);
                assert!(prev.is_none_or(|p| p == *k), "{s:?} split from its group");
            }
            // greedy longest-first: no shard ends more than one group's time above another
            let biggest_group = specs
                .iter()
                .fold(BTreeMap::new(), |mut m, s| {
                    *m.entry(group_key(s)).or_insert(0.0) += expected_ms(&plan, s);
                    m
                })
                .into_values()
                .fold(0.0, f64::max);
            let (lo, hi) = loads
                .iter()
                .fold((f64::MAX, 0.0_f64), |(a, b), &l| (a.min(l), b.max(l)));
            assert!(hi - lo <= biggest_group, "{count} shards: {loads:?}");
        }
    }

    #[test]
    fn shards_beyond_the_groups_are_empty_and_those_within_are_not() {
        let plan = www21();
        let specs = expand(&plan);
        let g = groups(&specs);
        // an iteration's arms pair within a condition and size
        let arms = plan.arms.len();
        assert_eq!(g * arms, specs.len(), "{g} groups of {arms} arms");
        // take the first two groups only: a split into 3 leaves one shard empty
        let keys: Vec<_> = specs.iter().map(group_key).collect();
        let mut firsts = keys.clone();
        firsts.sort_unstable();
        firsts.dedup();
        let two: Vec<TrialSpec> = specs
            .iter()
            .filter(|s| firsts[..2].contains(&group_key(s)))
            .cloned()
            .collect();
        assert_eq!(groups(&two), 2);
        let sizes: Vec<usize> = (1..=3)
            .map(|k| select(&plan, two.clone(), Shard { index: k, count: 3 }).len())
            .collect();
        assert_eq!(sizes.iter().filter(|n| **n == 0).count(), 1, "{sizes:?}");
        assert_eq!(sizes.iter().sum::<usize>(), two.len());
    }

    #[test]
    fn a_trial_is_expected_to_take_its_serialisation_and_round_trips() {
        let plan = www21();
        let specs = expand(&plan);
        // 1 MB at 10 Mbit/s is 800 ms of serialisation, plus round trips and the fixed cost
        let s = specs.iter().find(|s| s.size == 1_000_000).unwrap();
        let cond = &plan.conditions[s.condition];
        assert_eq!(cond.rate_bps(), Some(10_000_000));
        let rtt = cond.link.min_rtt().as_secs_f64() * 1000.0;
        let want = 250.0 + 4.0 * rtt + 800.0;
        assert!(
            (expected_ms(&plan, s) - want).abs() < 1e-6,
            "{}",
            expected_ms(&plan, s)
        );
    }
}
