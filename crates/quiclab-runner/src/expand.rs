//! A plan's trials: condition x size x arm x iteration, with seeds and a stable identity.
//!
//! - Iteration `i` has one seed, derived from (plan seed, i) and shared by every condition, size
//!   and arm of that iteration: arms compared within an iteration see the same packet fates.
//! - Trials run iteration by iteration, so a campaign stopped early has every cell at roughly
//!   the same depth; within a (condition, size) the arms run in an order shuffled per iteration
//!   (seeded), so no arm always goes first.
//! - A trial's id is a hash of its resolved configuration (arm knobs, condition keys, size,
//!   iteration, seed): the same plan run again finds its finished trials, and a changed knob
//!   makes a new trial.
//! - With an interleaved baseline (`interleave` in the plan), every trial of another condition
//!   is preceded by a trial of the baseline with the same arm, iteration and size: baseline,
//!   impaired, baseline, impaired, ... Each such baseline trial names the condition it precedes
//!   in its configuration (`before`), so it has an id of its own that stays the same from run
//!   to run; plans without `interleave` expand exactly as before.

use quiclab_link::rng::mix;
use serde_json::json;

use quiclab_store::CONFIG_BEFORE;

use crate::plan::Plan;
use crate::workloads;

/// One trial to run.
#[derive(Debug, Clone)]
pub struct TrialSpec {
    /// Position in execution order.
    pub seq: u64,
    pub id: String,
    /// Indices into the plan's arms and conditions.
    pub arm: usize,
    pub condition: usize,
    /// For a trial of the interleaved baseline: the condition whose trial follows it.
    pub before: Option<usize>,
    pub size: u64,
    pub iteration: u32,
    pub seed: u64,
    /// Body sizes of the trial's requests, in order (none for telemetry, which sends units).
    pub requests: Vec<u64>,
}

impl TrialSpec {
    /// The resolved configuration, as stored and hashed (built when asked, not kept: a large
    /// campaign holds many specs).
    pub fn config(&self, plan: &Plan) -> serde_json::Value {
        let (_, workload) =
            workloads::of(&plan.workload).trial(&plan.workload, self.size, self.seed);
        config(
            plan,
            &workload,
            self.arm,
            self.condition,
            self.before,
            self.iteration,
            self.seed,
        )
    }
}

fn config(
    plan: &Plan,
    workload: &serde_json::Value,
    arm: usize,
    condition: usize,
    before: Option<usize>,
    iteration: u32,
    seed: u64,
) -> serde_json::Value {
    let cond = &plan.conditions[condition];
    let mut config = json!({
        "workload": workload,
        "arm": plan.arms[arm].config(),
        "condition": {"name": cond.name, "keys": cond.keys},
        "iteration": iteration,
        "seed": seed,
    });
    if let Some(b) = before {
        config[CONFIG_BEFORE] = json!(plan.conditions[b].name);
    }
    config
}

/// The link seed of iteration `i`: 63 bits, so that it reads the same in the results
/// database (SQLite's integers are signed) as in the CSV export and the trial's configuration.
pub fn iteration_seed(plan_seed: u64, i: u32) -> u64 {
    mix(mix(plan_seed) ^ u64::from(i)) >> 1
}

/// Every trial of the plan, in execution order.
pub fn expand(plan: &Plan) -> Vec<TrialSpec> {
    let mut out = Vec::with_capacity(usize::try_from(plan.trial_count()).unwrap_or(0));
    for it in 0..plan.iterations {
        let seed = iteration_seed(plan.seed, it);
        for ci in 0..plan.conditions.len() {
            if plan.interleave == Some(ci) {
                // its trials come with the others'
                continue;
            }
            for (si, &size) in plan.sizes.iter().enumerate() {
                let mut order: Vec<usize> = (0..plan.arms.len()).collect();
                // Fisher-Yates from a stream seeded by (seed, condition, size)
                let mut state = mix(seed ^ mix((ci as u64) << 32 | si as u64));
                for k in (1..order.len()).rev() {
                    state = mix(state);
                    order.swap(k, (state % (k as u64 + 1)) as usize);
                }
                let (requests, workload) =
                    workloads::of(&plan.workload).trial(&plan.workload, size, seed);
                for ai in order.into_iter().filter(|&a| plan.runs(a, ci)) {
                    let mut push = |condition: usize, before: Option<usize>| {
                        let config = config(plan, &workload, ai, condition, before, it, seed);
                        out.push(TrialSpec {
                            seq: out.len() as u64,
                            id: hash_id(&config),
                            arm: ai,
                            condition,
                            before,
                            size,
                            iteration: it,
                            seed,
                            requests: requests.clone(),
                        });
                    };
                    if let Some(base) = plan.interleave {
                        push(base, Some(ci));
                    }
                    push(ci, None);
                }
            }
        }
    }
    out
}

/// First 16 hex digits of the SHA-256 of the configuration's JSON (serde_json writes object
/// keys in sorted order, so equal configurations hash equally).
fn hash_id(config: &serde_json::Value) -> String {
    let d = ring::digest::digest(&ring::digest::SHA256, config.to_string().as_bytes());
    d.as_ref()[..8].iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{Profile, parse};
    use crate::workloads::segment_sizes;

    const PLAN: &str = r#"
name = "t"
iterations = 6
seed = 3
[workload]
kind = "single-object"
sizes = ["100kb", "1mb"]
[network]
delay = "10ms"
[conditions.a]
[conditions.b]
loss = "1%"
[arms.x]
http = "2"
[arms.y]
http = "3"
[arms.z]
http = "1.1"
"#;

    #[test]
    fn segment_sizes_are_seeded_in_range_and_shared_by_the_iteration() {
        let a = segment_sizes(7, 15, 3_600_000, 5_000_000);
        assert_eq!(a, segment_sizes(7, 15, 3_600_000, 5_000_000));
        assert_ne!(a, segment_sizes(8, 15, 3_600_000, 5_000_000));
        assert_eq!(a.len(), 15);
        assert!(a.iter().all(|s| (3_600_000..=5_000_000).contains(s)));
        // spread over the range, not bunched at one end: 15 uniform draws all in one half of
        // the range happen with probability 2 * 2^-15
        let mid = 4_300_000;
        assert!(
            a.iter().any(|&s| s < mid) && a.iter().any(|&s| s > mid),
            "{a:?}"
        );
        assert_eq!(segment_sizes(1, 3, 10, 10), vec![10, 10, 10]);

        let plan = parse(
            &PLAN.replace(
                "kind = \"single-object\"\nsizes = [\"100kb\", \"1mb\"]",
                "kind = \"segments\"\nsegments = 4\nsegment-min = 1000\nsegment-max = 2000",
            ),
            "t.toml",
            Profile::Full,
        )
        .unwrap();
        let trials = expand(&plan);
        for t in &trials {
            assert_eq!(t.requests, segment_sizes(t.seed, 4, 1000, 2000));
            assert_eq!(
                t.config(&plan)["workload"]["sizes"]
                    .as_array()
                    .unwrap()
                    .len(),
                4
            );
        }
        // every arm and condition of an iteration fetches the same sizes
        let first: Vec<_> = trials.iter().filter(|t| t.iteration == 0).collect();
        assert!(first.iter().all(|t| t.requests == first[0].requests));
    }

    #[test]
    fn telemetry_trials_name_their_mode_and_send_units_not_requests() {
        let plan = parse(
            &PLAN
                .replace(
                    "kind = \"single-object\"\nsizes = [\"100kb\", \"1mb\"]",
                    "kind = \"telemetry\"\nunits-per-second = 1000\nflush = 10\nduration = \"2s\"",
                )
                .replace("http = \"2\"", "telemetry = \"tcp\"")
                .replace("http = \"3\"", "telemetry = \"quic-streams\"")
                .replace("http = \"1.1\"", "telemetry = \"quic-datagrams\""),
            "t.toml",
            Profile::Full,
        )
        .unwrap();
        let trials = expand(&plan);
        assert_eq!(trials.len(), 6 * 2 * 3);
        for t in &trials {
            assert!(t.requests.is_empty());
            assert_eq!(t.size, 16_000);
            assert_eq!(t.config(&plan)["workload"]["kind"], "telemetry");
            assert_eq!(t.config(&plan)["workload"]["duration_ms"], 2000);
            let mode = plan.arms[t.arm].telemetry.unwrap();
            assert_eq!(t.config(&plan)["arm"]["telemetry"], mode.name());
            assert!(t.config(&plan)["arm"].get("http").is_none());
        }
    }

    #[test]
    fn every_cell_gets_every_iteration_and_arms_share_the_iteration_seed() {
        let p = parse(PLAN, "t", Profile::Full).unwrap();
        let t = expand(&p);
        assert_eq!(t.len(), 6 * 2 * 2 * 3);
        for (i, s) in t.iter().enumerate() {
            assert_eq!(s.seq, i as u64);
            assert_eq!(s.seed, iteration_seed(3, s.iteration));
            assert!(i64::try_from(s.seed).is_ok(), "{}", s.seed);
        }
        let seeds: std::collections::HashSet<u64> = t.iter().map(|s| s.seed).collect();
        assert_eq!(seeds.len(), 6, "one seed per iteration, distinct");
        let ids: std::collections::HashSet<&str> = t.iter().map(|s| s.id.as_str()).collect();
        assert_eq!(ids.len(), t.len(), "ids are unique");
        // iteration-major order: all of iteration 0 before any of iteration 1
        assert!(t.windows(2).all(|w| w[0].iteration <= w[1].iteration));
    }

    #[test]
    fn arm_order_is_shuffled_but_reproducible() {
        let p = parse(PLAN, "t", Profile::Full).unwrap();
        let a = expand(&p);
        let b = expand(&p);
        assert_eq!(
            a.iter().map(|s| &s.id).collect::<Vec<_>>(),
            b.iter().map(|s| &s.id).collect::<Vec<_>>()
        );
        let orders: std::collections::HashSet<Vec<usize>> = a
            .chunks(3)
            .map(|c| c.iter().map(|s| s.arm).collect())
            .collect();
        // 24 groups of 3 arms: with uniform shuffles, seeing fewer than 3 of the 6 orders has
        // probability below 1e-9
        assert!(orders.len() >= 3, "{orders:?}");
        for c in a.chunks(3) {
            let mut arms: Vec<_> = c.iter().map(|s| s.arm).collect();
            arms.sort();
            assert_eq!(arms, [0, 1, 2]);
        }
    }

    #[test]
    fn an_interleaved_baseline_runs_before_every_other_trial_with_an_id_of_its_own() {
        let plain = parse(PLAN, "t", Profile::Full).unwrap();
        let text = PLAN
            .replace("seed = 3", "seed = 3\ninterleave = \"a\"")
            .replace(
                "[conditions.b]",
                "[conditions.c]\ndelay = \"60ms\"\n[conditions.b]",
            );
        let p = parse(&text, "t", Profile::Full).unwrap();
        let t = expand(&p);
        // 6 iterations x 2 other conditions x 2 sizes x 3 arms, each with its baseline
        assert_eq!(t.len(), 6 * 2 * 2 * 3 * 2);
        for pair in t.chunks(2) {
            let (base, other) = (&pair[0], &pair[1]);
            assert_eq!((base.condition, base.before), (0, Some(other.condition)));
            assert_eq!(other.before, None);
            assert_ne!(other.condition, 0);
            assert_eq!(
                (
                    base.arm,
                    base.size,
                    base.iteration,
                    base.seed,
                    &base.requests
                ),
                (
                    other.arm,
                    other.size,
                    other.iteration,
                    other.seed,
                    &other.requests
                )
            );
            assert_eq!(
                base.config(&p)[CONFIG_BEFORE],
                p.conditions[other.condition].name
            );
        }
        assert!(t.iter().enumerate().all(|(i, s)| s.seq == i as u64));
        let ids: std::collections::HashSet<&str> = t.iter().map(|s| s.id.as_str()).collect();
        assert_eq!(
            ids.len(),
            t.len(),
            "every baseline run is a trial of its own"
        );
        // stable: the same plan gives the same ids
        let again: Vec<String> = expand(&p).into_iter().map(|s| s.id).collect();
        assert_eq!(
            t.iter().map(|s| &s.id).collect::<Vec<_>>(),
            again.iter().collect::<Vec<_>>()
        );
        // the other conditions' trials are those of the plan without interleaving (condition b
        // has the same configuration in both plans)
        let plain_ids: std::collections::HashSet<String> =
            expand(&plain).into_iter().map(|s| s.id).collect();
        let b = p.conditions.iter().position(|c| c.name == "b").unwrap();
        let of_b: Vec<_> = t.iter().filter(|s| s.condition == b).collect();
        assert_eq!(of_b.len(), 6 * 2 * 3);
        assert!(of_b.iter().all(|s| plain_ids.contains(&s.id)));
        // and without interleave the configuration has no `before`: ids of earlier campaigns
        // stay what they were
        assert!(
            expand(&plain)
                .iter()
                .all(|s| s.config(&plain).get(CONFIG_BEFORE).is_none())
        );
    }

    #[test]
    fn identity_follows_the_configuration() {
        let p = parse(PLAN, "t", Profile::Full).unwrap();
        let base = expand(&p);
        // more iterations keep the first ones' ids: a longer campaign extends a shorter one
        let longer = parse(
            &PLAN.replace("iterations = 6", "iterations = 8"),
            "t",
            Profile::Full,
        )
        .unwrap();
        let ids: std::collections::HashSet<String> =
            expand(&longer).into_iter().map(|s| s.id).collect();
        assert!(base.iter().all(|s| ids.contains(&s.id)));
        // a changed knob is a different trial
        let changed = parse(
            &PLAN.replace(
                "[arms.y]\nhttp = \"3\"",
                "[arms.y]\nhttp = \"3\"\nquic-cc = \"newreno\"",
            ),
            "t",
            Profile::Full,
        )
        .unwrap();
        let ids: std::collections::HashSet<String> =
            expand(&changed).into_iter().map(|s| s.id).collect();
        let y: Vec<_> = base.iter().filter(|s| s.arm == 1).collect();
        assert!(y.iter().all(|s| !ids.contains(&s.id)));
        let x: Vec<_> = base.iter().filter(|s| s.arm == 0).collect();
        assert!(x.iter().all(|s| ids.contains(&s.id)));
    }
}
