//! A campaign reduced to what the report shows: per (condition, size, arm) cell the successful
//! and failed trials with their summary statistics, and per comparison (a, b) and cell the change
//! of b's median TTLB relative to a's with its confidence interval and p-value.
//!
//! Contract: computed once per render from the campaign alone; every section reads it instead of
//! recomputing, so a number printed twice is the same number. Bootstrap seeds come from the
//! cell's identity ([`median_seed`], [`change_seed`]), never from its position, so adding an arm
//! or a condition to a plan does not change the intervals of the others. Trials whose arm,
//! condition or size is not in the campaign's lists are set aside ([`Analysis::unmatched`]),
//! never silently merged.

use crate::model::{Campaign, Metrics, Trial};
use crate::stats::{self, Interval};
use std::collections::BTreeMap;

/// Fewest successful trials per arm for a comparison to be computed.
pub const MIN_TRIALS: usize = 3;

/// Seed of the bootstrap interval of an arm's median TTLB in one cell.
pub fn median_seed(arm: &str, condition: &str, size: u64) -> u64 {
    stats::seed_from(&["median", arm, condition, &size.to_string()])
}

/// Seed of the bootstrap interval of the change of `b` relative to `a` in one cell.
pub fn change_seed(a: &str, b: &str, condition: &str, size: u64) -> u64 {
    stats::seed_from(&["change", a, b, condition, &size.to_string()])
}

/// Summary of the successful TTLBs of one arm in one cell.
#[derive(Debug, Clone, PartialEq)]
pub struct Summary {
    pub n: usize,
    pub median_ms: f64,
    pub p25_ms: f64,
    pub p75_ms: f64,
    pub min_ms: f64,
    pub max_ms: f64,
    /// Bootstrap 95 % interval of the median; `None` below 2 trials.
    pub median_ci: Option<Interval>,
}

/// One arm in one (condition, size) cell.
#[derive(Debug, Clone)]
pub struct ArmCell<'a> {
    pub arm: usize,
    pub condition: usize,
    pub size: usize,
    /// Successful trials, by ascending TTLB (ties by iteration, then id).
    pub ok: Vec<&'a Trial>,
    /// Their TTLBs in the same order.
    pub ttlb_ms: Vec<f64>,
    /// Failed trials by iteration.
    pub failed: Vec<&'a Trial>,
    pub summary: Option<Summary>,
    pub ttfb_median_ms: Option<f64>,
    /// Medians over the trials that know them (a stack that does not tell is left out).
    pub packets_lost_median: Option<f64>,
    pub bytes_resent_median: Option<f64>,
    pub handshake_rtts_median: Option<f64>,
    /// Successful trials whose handshake needed a HelloRetryRequest.
    pub hello_retries: usize,
    /// Successful trials with at least one RTT sample below the path's minimum, and the samples.
    pub impossible_rtt_trials: usize,
    pub impossible_rtt_samples: u64,
    /// Successful trials whose emulator fell behind (the host stalled it), and the worst
    /// lateness (ms).
    pub emulator_late_trials: usize,
    pub emulator_late_max_ms: f64,
    /// Successful trials whose sender's record is in doubt, and the first one's reasons.
    pub doubted_trials: usize,
    pub doubt: Option<String>,
    /// Distinct failure reasons with their counts, in order of first appearance.
    pub failure_reasons: Vec<(String, usize)>,
    /// The trial whose timeline represents the arm: see [`median_trial`].
    pub median_trial: Option<&'a Trial>,
}

/// The change of b relative to a in one cell, when both arms have [`MIN_TRIALS`] successes.
#[derive(Debug, Clone, PartialEq)]
pub struct Change {
    pub median_a_ms: f64,
    pub median_b_ms: f64,
    /// `median_b - median_a`.
    pub diff_ms: f64,
    /// The same in round trips of the condition's minimum RTT; `None` if that RTT is not positive.
    pub diff_rtts: Option<f64>,
    /// `(median_b - median_a) / median_a`.
    pub rel: f64,
    /// Bootstrap 95 % interval of `rel`: resampling whole pairs where the arms are paired,
    /// each arm on its own where they are not.
    pub ci: Option<Interval>,
    /// The iterations both arms completed on the same link seed: the pairs the test uses. When
    /// it is below [`stats::paired::MIN_PAIRS`] nothing is called significant.
    pub pairs: usize,
    /// Whether the arms were paired (every trial of each shares its iteration's seed with one
    /// of the other); otherwise the test is Mann-Whitney's on the two samples.
    pub paired: bool,
    /// Two-sided p-value: the Wilcoxon signed-rank test of the paired TTLB differences, or
    /// Mann-Whitney's where the arms are not paired.
    pub p: Option<f64>,
    /// `p` adjusted by Benjamini–Hochberg across every compared cell of the report.
    pub p_adjusted: Option<f64>,
    /// Enough pairs, the adjusted p at most [`stats::paired::FDR`], and the interval excluding 0.
    pub significant: bool,
}

#[derive(Debug, Clone)]
pub struct ChangeCell {
    pub condition: usize,
    pub size: usize,
    pub n_a: usize,
    pub n_b: usize,
    pub change: Option<Change>,
}

/// One comparison of the campaign with its arms resolved to indices.
#[derive(Debug, Clone)]
pub struct ComparisonAnalysis {
    /// Index of the comparison in `Campaign::comparisons`.
    pub index: usize,
    pub a: usize,
    pub b: usize,
    /// Row-major: `cells[condition * sizes + size]`.
    pub cells: Vec<ChangeCell>,
    n_sizes: usize,
}

impl ComparisonAnalysis {
    /// The cell under `condition` at `size` (indices into the campaign's lists).
    pub fn cell(&self, condition: usize, size: usize) -> &ChangeCell {
        &self.cells[condition * self.n_sizes + size]
    }
}

#[derive(Debug, Clone)]
pub struct Analysis<'a> {
    pub campaign: &'a Campaign,
    /// `cells[(condition * sizes + size) * arms + arm]`.
    cells: Vec<ArmCell<'a>>,
    pub comparisons: Vec<ComparisonAnalysis>,
    /// Comparisons naming an arm the campaign does not have, as "a vs b".
    pub unresolved_comparisons: Vec<String>,
    /// Trials whose arm, condition or size is not in the campaign's lists.
    pub unmatched: Vec<&'a Trial>,
    /// The trials that ran while their host's CPUs were nearly saturated.
    pub busy: Busy<'a>,
}

/// The trials that overlap a spell of [`Campaign::busy`] on their own host.
#[derive(Debug, Clone, Default)]
pub struct Busy<'a> {
    pub trials: usize,
    /// (arm, condition, size) with its count of such trials, most first (then in cell order).
    pub cells: Vec<((&'a str, &'a str, u64), usize)>,
}

impl<'a> Busy<'a> {
    fn of(campaign: &'a Campaign) -> Self {
        let mut cells: BTreeMap<(&str, &str, u64), usize> = BTreeMap::new();
        let mut trials = 0;
        for t in &campaign.trials {
            if t.started_unix_ms > 0
                && campaign
                    .busy
                    .iter()
                    .any(|s| s.overlaps(t.host.as_deref(), t.started_unix_ms, t.wall_ms))
            {
                trials += 1;
                *cells
                    .entry((t.arm.as_str(), t.condition.as_str(), t.size))
                    .or_default() += 1;
            }
        }
        let mut cells: Vec<_> = cells.into_iter().collect();
        cells.sort_by_key(|(_, k)| std::cmp::Reverse(*k));
        Busy { trials, cells }
    }
}

/// The metrics of a successful trial.
pub fn metrics(t: &Trial) -> Option<&Metrics> {
    t.outcome.as_ref().ok()
}

fn ttlb(t: &Trial) -> Option<f64> {
    metrics(t).map(|m| m.ttlb_ms)
}

/// Orders trials by TTLB, then iteration, then id, so every choice among equal TTLBs is fixed.
fn by_ttlb(a: &&Trial, b: &&Trial) -> std::cmp::Ordering {
    let ka = ttlb(a).unwrap_or(f64::INFINITY);
    let kb = ttlb(b).unwrap_or(f64::INFINITY);
    ka.total_cmp(&kb)
        .then(a.iteration.cmp(&b.iteration))
        .then(a.id.cmp(&b.id))
}

/// The trial whose TTLB is the median among the successful trials with a non-empty timeline:
/// the lower median for an even count (so it is a real trial), ties broken by iteration then id.
pub fn median_trial<'a>(trials: impl IntoIterator<Item = &'a Trial>) -> Option<&'a Trial> {
    let mut with_timeline: Vec<&Trial> = trials
        .into_iter()
        .filter(|t| metrics(t).is_some_and(|m| !m.timeline.is_empty()))
        .collect();
    with_timeline.sort_by(by_ttlb);
    let n = with_timeline.len();
    (n > 0).then(|| with_timeline[(n - 1) / 2])
}

fn median_of(values: impl Iterator<Item = f64>) -> Option<f64> {
    let v: Vec<f64> = values.collect();
    stats::median(&v)
}

impl<'a> Analysis<'a> {
    pub fn new(campaign: &'a Campaign) -> Self {
        let (n_arms, n_sizes) = (campaign.arms.len(), campaign.sizes.len());
        let n_cells = campaign.conditions.len() * n_sizes * n_arms;
        let arm_ix: BTreeMap<&str, usize> = index_by(campaign.arms.iter().map(|a| &a.name[..]));
        let cond_ix: BTreeMap<&str, usize> =
            index_by(campaign.conditions.iter().map(|c| &c.name[..]));
        let size_ix: BTreeMap<u64, usize> = campaign
            .sizes
            .iter()
            .enumerate()
            .rev()
            .map(|(i, &s)| (s, i))
            .collect();

        let mut buckets: Vec<Vec<&Trial>> = vec![Vec::new(); n_cells];
        let mut unmatched = Vec::new();
        for t in &campaign.trials {
            let found = (
                arm_ix.get(t.arm.as_str()),
                cond_ix.get(t.condition.as_str()),
                size_ix.get(&t.size),
            );
            match found {
                (Some(&a), Some(&c), Some(&s)) => buckets[(c * n_sizes + s) * n_arms + a].push(t),
                _ => unmatched.push(t),
            }
        }

        let mut cells = Vec::with_capacity(n_cells);
        for (i, trials) in buckets.into_iter().enumerate() {
            let arm = i % n_arms;
            let size = (i / n_arms) % n_sizes;
            let condition = i / (n_arms * n_sizes);
            cells.push(arm_cell(campaign, arm, condition, size, trials));
        }

        let mut comparisons = Vec::new();
        let mut unresolved_comparisons = Vec::new();
        for (index, cmp) in campaign.comparisons.iter().enumerate() {
            let (Some(&a), Some(&b)) = (arm_ix.get(cmp.a.as_str()), arm_ix.get(cmp.b.as_str()))
            else {
                unresolved_comparisons.push(format!("{} vs {}", cmp.b, cmp.a));
                continue;
            };
            let mut ccells = Vec::with_capacity(campaign.conditions.len() * n_sizes);
            for condition in 0..campaign.conditions.len() {
                for size in 0..n_sizes {
                    let ca = &cells[(condition * n_sizes + size) * n_arms + a];
                    let cb = &cells[(condition * n_sizes + size) * n_arms + b];
                    ccells.push(change_cell(campaign, ca, cb));
                }
            }
            comparisons.push(ComparisonAnalysis {
                index,
                a,
                b,
                cells: ccells,
                n_sizes,
            });
        }

        decide(&mut comparisons);
        Analysis {
            campaign,
            cells,
            comparisons,
            unresolved_comparisons,
            unmatched,
            busy: Busy::of(campaign),
        }
    }

    /// How many compared cells have a p-value: the family the Benjamini-Hochberg adjustment
    /// covers.
    pub fn tested_cells(&self) -> usize {
        self.changes().filter(|c| c.p.is_some()).count()
    }

    /// How many compared cells differ significantly.
    pub fn significant_cells(&self) -> usize {
        self.changes().filter(|c| c.significant).count()
    }

    fn changes(&self) -> impl Iterator<Item = &Change> {
        self.comparisons
            .iter()
            .flat_map(|c| c.cells.iter())
            .filter_map(|c| c.change.as_ref())
    }

    /// The cell of `arm` under `condition` at `size` (indices into the campaign's lists).
    pub fn cell(&self, condition: usize, size: usize, arm: usize) -> &ArmCell<'a> {
        let c = self.campaign;
        &self.cells[(condition * c.sizes.len() + size) * c.arms.len() + arm]
    }

    /// Every cell of one arm, in condition then size order.
    pub fn arm_cells(&self, arm: usize) -> impl Iterator<Item = &ArmCell<'a>> {
        self.cells.iter().filter(move |c| c.arm == arm)
    }

    /// Successful and failed trials among those matched to the plan.
    pub fn counts(&self) -> (usize, usize) {
        self.cells.iter().fold((0, 0), |(ok, failed), c| {
            (ok + c.ok.len(), failed + c.failed.len())
        })
    }
}

/// First index of each name (a duplicated name keeps its first position).
fn index_by<'s>(
    names: impl DoubleEndedIterator<Item = &'s str> + ExactSizeIterator,
) -> BTreeMap<&'s str, usize> {
    names.enumerate().rev().map(|(i, n)| (n, i)).collect()
}

fn arm_cell<'a>(
    campaign: &Campaign,
    arm: usize,
    condition: usize,
    size: usize,
    trials: Vec<&'a Trial>,
) -> ArmCell<'a> {
    let (mut ok, mut failed): (Vec<&Trial>, Vec<&Trial>) =
        trials.into_iter().partition(|t| t.outcome.is_ok());
    ok.sort_by(by_ttlb);
    failed.sort_by(|a, b| a.iteration.cmp(&b.iteration).then(a.id.cmp(&b.id)));
    let ttlb_ms: Vec<f64> = ok.iter().filter_map(|t| ttlb(t)).collect();
    let summary = (!ttlb_ms.is_empty()).then(|| {
        let q = |p| stats::quantile_sorted(&ttlb_ms, p).unwrap_or(f64::NAN);
        Summary {
            n: ttlb_ms.len(),
            median_ms: q(0.5),
            p25_ms: q(0.25),
            p75_ms: q(0.75),
            min_ms: ttlb_ms[0],
            max_ms: ttlb_ms[ttlb_ms.len() - 1],
            median_ci: stats::bootstrap_median_ci(
                &ttlb_ms,
                median_seed(
                    &campaign.arms[arm].name,
                    &campaign.conditions[condition].name,
                    campaign.sizes[size],
                ),
            ),
        }
    });
    let ms: Vec<&Metrics> = ok.iter().filter_map(|t| metrics(t)).collect();
    let mut failure_reasons: Vec<(String, usize)> = Vec::new();
    for t in &failed {
        if let Err(reason) = &t.outcome {
            match failure_reasons.iter_mut().find(|(r, _)| r == reason) {
                Some((_, n)) => *n += 1,
                None => failure_reasons.push((reason.clone(), 1)),
            }
        }
    }
    ArmCell {
        arm,
        condition,
        size,
        ttfb_median_ms: median_of(ms.iter().map(|m| m.ttfb_ms)),
        packets_lost_median: median_of(ms.iter().filter_map(|m| m.packets_lost.map(|r| r as f64))),
        bytes_resent_median: median_of(ms.iter().filter_map(|m| m.bytes_resent.map(|r| r as f64))),
        handshake_rtts_median: median_of(ms.iter().filter_map(|m| m.handshake_rtts)),
        hello_retries: ms.iter().filter(|m| m.hello_retry).count(),
        impossible_rtt_trials: ms
            .iter()
            .filter(|m| m.impossible_rtt_samples.unwrap_or(0) > 0)
            .count(),
        impossible_rtt_samples: ms.iter().filter_map(|m| m.impossible_rtt_samples).sum(),
        emulator_late_trials: ms
            .iter()
            .filter(|m| m.detail.emulator_late_ms.is_some())
            .count(),
        emulator_late_max_ms: ms
            .iter()
            .filter_map(|m| m.detail.emulator_late_ms)
            .fold(0.0, f64::max),
        doubted_trials: ms
            .iter()
            .filter(|m| !m.detail.sender_doubts.is_empty())
            .count(),
        doubt: ms
            .iter()
            .find(|m| !m.detail.sender_doubts.is_empty())
            .map(|m| m.detail.sender_doubts.join("; ")),
        median_trial: median_trial(ok.iter().copied()),
        failure_reasons,
        summary,
        ttlb_ms,
        ok,
        failed,
    }
}

/// Decides which compared cells differ: Benjamini–Hochberg across every cell with a p-value,
/// at [`stats::paired::FDR`], on at least [`stats::paired::MIN_PAIRS`] pairs, with the interval
/// of the change excluding 0.
fn decide(comparisons: &mut [ComparisonAnalysis]) {
    let mut changes: Vec<&mut Change> = comparisons
        .iter_mut()
        .flat_map(|c| c.cells.iter_mut())
        .filter_map(|c| c.change.as_mut())
        .collect();
    let ps: Vec<Option<f64>> = changes.iter().map(|c| c.p).collect();
    for (ch, adj) in changes.iter_mut().zip(stats::paired::bh_adjust_some(&ps)) {
        ch.p_adjusted = adj;
        ch.significant = stats::paired::significant(ch.pairs, stats::paired::MIN_PAIRS, adj, ch.ci);
    }
}

/// The TTLBs of the iterations both arms completed, in iteration order, and whether the arms
/// are paired: no iteration of both has two seeds, and no arm has an iteration twice. An
/// iteration one arm lacks (failed, or not run yet) is no pair; arms of different seeds (a
/// merged campaign's, say) are not paired.
fn pairs(a: &ArmCell, b: &ArmCell) -> (Vec<f64>, Vec<f64>, bool) {
    let by_iteration = |c: &ArmCell| -> BTreeMap<u32, (u64, f64)> {
        c.ok.iter()
            .zip(&c.ttlb_ms)
            .map(|(t, ms)| (t.iteration, (t.seed, *ms)))
            .collect()
    };
    let (ia, ib) = (by_iteration(a), by_iteration(b));
    let mut paired = ia.len() == a.ok.len() && ib.len() == b.ok.len();
    let (mut xa, mut xb) = (Vec::new(), Vec::new());
    for (it, (seed, ms)) in &ia {
        match ib.get(it) {
            Some((s, other)) if s == seed => {
                xa.push(*ms);
                xb.push(*other);
            }
            Some(_) => paired = false,
            None => {}
        }
    }
    (xa, xb, paired)
}

fn change_cell(campaign: &Campaign, a: &ArmCell, b: &ArmCell) -> ChangeCell {
    let cond = &campaign.conditions[a.condition];
    let (n_a, n_b) = (a.ttlb_ms.len(), b.ttlb_ms.len());
    let change = (n_a >= MIN_TRIALS && n_b >= MIN_TRIALS)
        .then(|| {
            let ma = stats::quantile_sorted(&a.ttlb_ms, 0.5)?;
            let mb = stats::quantile_sorted(&b.ttlb_ms, 0.5)?;
            if ma == 0.0 {
                return None;
            }
            let seed = change_seed(
                &campaign.arms[a.arm].name,
                &campaign.arms[b.arm].name,
                &cond.name,
                campaign.sizes[a.size],
            );
            let (pa, pb, paired) = pairs(a, b);
            let (ci, p) = if paired {
                (
                    stats::paired::bootstrap_paired_change_ci(&pa, &pb, seed),
                    stats::paired::signed_rank(&pa, &pb).map(|t| t.p),
                )
            } else {
                (
                    stats::bootstrap_relative_change_ci(&a.ttlb_ms, &b.ttlb_ms, seed),
                    stats::mann_whitney(&b.ttlb_ms, &a.ttlb_ms).map(|r| r.p),
                )
            };
            Some(Change {
                median_a_ms: ma,
                median_b_ms: mb,
                diff_ms: mb - ma,
                diff_rtts: (cond.rtt_ms > 0.0).then(|| (mb - ma) / cond.rtt_ms),
                rel: (mb - ma) / ma,
                // decided once every cell's p is known (Analysis::new)
                significant: false,
                ci,
                pairs: if paired { pa.len() } else { n_a.min(n_b) },
                paired,
                p,
                p_adjusted: None,
            })
        })
        .flatten();
    ChangeCell {
        condition: a.condition,
        size: a.size,
        n_a,
        n_b,
        change,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Arm, Comparison, Condition, TimelinePoint};

    fn trial(arm: &str, iteration: u32, ttlb: f64, timeline: bool) -> Trial {
        Trial {
            id: format!("{arm}-{iteration}"),
            arm: arm.into(),
            condition: "c".into(),
            size: 1000,
            iteration,
            seed: u64::from(iteration),
            before: None,
            outcome: Ok(Metrics {
                ttlb_ms: ttlb,
                ttfb_ms: ttlb / 2.0,
                timeline: if timeline {
                    vec![TimelinePoint {
                        t_ms: ttlb,
                        acked_bytes: 1000,
                        ..Default::default()
                    }]
                } else {
                    Vec::new()
                },
                ..Default::default()
            }),
            artifacts: None,
            host: None,
            started_unix_ms: 0,
            wall_ms: 0.0,
        }
    }

    #[test]
    fn median_trial_is_the_lower_median_among_trials_with_timelines() {
        let ts = [
            trial("x", 0, 50.0, true),
            trial("x", 1, 10.0, true),
            trial("x", 2, 40.0, true),
            trial("x", 3, 30.0, false), // would be the median of all, but has no timeline
            trial("x", 4, 20.0, true),
        ];
        // With timelines: 10, 20, 40, 50 -> lower median 20 (iteration 4).
        assert_eq!(median_trial(&ts).map(|t| t.iteration), Some(4));
        // Odd count: 10, 20, 40 -> 20.
        assert_eq!(median_trial(&ts[1..]).map(|t| t.iteration), Some(4));
        let mut failed = trial("x", 9, 1.0, true);
        failed.outcome = Err("boom".into());
        assert_eq!(median_trial([&failed]).map(|t| t.iteration), None);
        // Equal TTLBs: the earlier iteration wins, whatever the input order.
        let tie = [trial("x", 7, 5.0, true), trial("x", 6, 5.0, true)];
        assert_eq!(median_trial(&tie).map(|t| t.iteration), Some(6));
    }

    #[test]
    fn cells_group_trials_and_set_aside_strangers() {
        let mut c = Campaign {
            arms: vec![
                Arm {
                    name: "a".into(),
                    ..Default::default()
                },
                Arm {
                    name: "b".into(),
                    ..Default::default()
                },
            ],
            conditions: vec![Condition {
                name: "c".into(),
                rtt_ms: 20.0,
                ..Default::default()
            }],
            sizes: vec![1000],
            comparisons: vec![
                Comparison {
                    a: "a".into(),
                    b: "b".into(),
                },
                Comparison {
                    a: "a".into(),
                    b: "nope".into(),
                },
            ],
            ..Default::default()
        };
        for i in 0..5 {
            c.trials.push(trial("a", i, 100.0 + f64::from(i), true));
            c.trials
                .push(trial("b", i, 60.0 + 2.0 * f64::from(i), true));
        }
        c.trials.push(trial("zz", 0, 1.0, true));
        let mut f = trial("a", 5, 0.0, false);
        f.outcome = Err("timeout".into());
        c.trials.push(f);
        let an = Analysis::new(&c);
        assert_eq!(an.unmatched.len(), 1);
        assert_eq!(an.unresolved_comparisons, vec!["nope vs a".to_string()]);
        assert_eq!(an.counts(), (10, 1));
        let cell = an.cell(0, 0, 0);
        assert_eq!(cell.failure_reasons, vec![("timeout".to_string(), 1)]);
        assert_eq!(cell.summary.as_ref().map(|s| s.median_ms), Some(102.0));
        let ch = an.comparisons[0].cell(0, 0).change.clone().unwrap();
        assert_eq!(ch.median_a_ms, 102.0);
        assert_eq!(ch.median_b_ms, 64.0);
        assert_eq!(ch.diff_rtts, Some(-1.9));
        assert!((ch.rel + 38.0 / 102.0).abs() < 1e-12);
        // five pairs, every one faster (by 40, 39, ... ms: no ties): the signed-rank test's
        // least p, 2/32, and too few pairs to call it significant
        assert!(ch.paired);
        assert_eq!(ch.pairs, 5);
        assert_eq!(ch.p, Some(2.0 / 32.0));
        assert!(!ch.significant);
        // seven pairs: p = 2/128, the only tested cell, so adjusted alike; and the interval is
        // the paired bootstrap's over the pairs in iteration order
        c.trials.retain(|t| t.iteration != 5);
        for i in 5..7 {
            c.trials.push(trial("a", i, 100.0 + f64::from(i), true));
            c.trials
                .push(trial("b", i, 60.0 + 2.0 * f64::from(i), true));
        }
        let an = Analysis::new(&c);
        let ch = an.comparisons[0].cell(0, 0).change.clone().unwrap();
        assert_eq!(
            (ch.pairs, ch.p, ch.p_adjusted),
            (7, Some(2.0 / 128.0), Some(2.0 / 128.0))
        );
        assert!(ch.significant);
        let (xa, xb): (Vec<f64>, Vec<f64>) = (0..7)
            .map(|i| (100.0 + f64::from(i), 60.0 + 2.0 * f64::from(i)))
            .unzip();
        let ci =
            stats::paired::bootstrap_paired_change_ci(&xa, &xb, change_seed("a", "b", "c", 1000));
        assert_eq!(ch.ci, ci);
        assert_eq!((an.tested_cells(), an.significant_cells()), (1, 1));
        // a trial of b on another seed: the arms are no longer paired, the test is
        // Mann-Whitney's over the two samples
        let i = c
            .trials
            .iter()
            .position(|t| t.arm == "b" && t.iteration == 6)
            .unwrap();
        c.trials[i].seed = 99;
        let an = Analysis::new(&c);
        let ch = an.comparisons[0].cell(0, 0).change.clone().unwrap();
        assert!(!ch.paired);
        let mw = stats::mann_whitney(&an.cell(0, 0, 1).ttlb_ms, &an.cell(0, 0, 0).ttlb_ms);
        assert_eq!(ch.p, mw.map(|m| m.p));
    }

    /// Cells of three pairs, b about ten times faster in every one (by 900, 899 and 898 ms: no
    /// ties): the most a signed-rank test can say of three pairs is p = 2/8, and the cell is
    /// below the minimum of pairs; none is called significant, and the page says why.
    #[test]
    fn three_pair_cells_are_never_significant_however_far_apart() {
        let mut c = Campaign {
            arms: vec![
                Arm {
                    name: "a".into(),
                    ..Default::default()
                },
                Arm {
                    name: "b".into(),
                    ..Default::default()
                },
            ],
            conditions: vec![Condition {
                name: "c".into(),
                rtt_ms: 20.0,
                ..Default::default()
            }],
            sizes: vec![1000],
            comparisons: vec![Comparison {
                a: "a".into(),
                b: "b".into(),
            }],
            ..Default::default()
        };
        for i in 0..3 {
            c.trials.push(trial("a", i, 1000.0 + f64::from(i), true));
            c.trials
                .push(trial("b", i, 100.0 + 2.0 * f64::from(i), true));
        }
        let an = Analysis::new(&c);
        let ch = an.comparisons[0].cell(0, 0).change.clone().unwrap();
        assert!(ch.paired);
        assert_eq!((ch.pairs, ch.p), (3, Some(0.25)));
        assert!(!ch.significant);
        assert_eq!(an.significant_cells(), 0);
        let page = crate::render(&c);
        assert!(
            page.contains(&format!(
                "too few pairs for a verdict (3 of the {} needed)",
                stats::paired::MIN_PAIRS
            )),
            "the cell says why"
        );
    }

    #[test]
    fn many_cells_are_adjusted_together_so_chance_alone_flags_few() {
        // 40 comparisons of two arms drawn alike (a fixed scramble of the same values): each
        // cell's p is what chance gives, and after Benjamini-Hochberg none is flagged
        let mut c = Campaign {
            arms: (0..41)
                .map(|i| Arm {
                    name: format!("x{i}"),
                    ..Default::default()
                })
                .collect(),
            conditions: vec![Condition {
                name: "c".into(),
                rtt_ms: 20.0,
                ..Default::default()
            }],
            sizes: vec![1000],
            comparisons: (1..41)
                .map(|i| Comparison {
                    a: "x0".into(),
                    b: format!("x{i}"),
                })
                .collect(),
            ..Default::default()
        };
        let mut rng = stats::Rng::new(5);
        for arm in 0..41 {
            for it in 0..10 {
                let v = 100.0 + 10.0 * rng.unit();
                c.trials.push(trial(&format!("x{arm}"), it, v, false));
            }
        }
        let an = Analysis::new(&c);
        assert_eq!(an.tested_cells(), 40);
        let raw = an
            .comparisons
            .iter()
            .filter_map(|k| k.cell(0, 0).change.as_ref()?.p)
            .filter(|p| *p <= 0.05)
            .count();
        eprintln!("{raw} of 40 cells at p <= 0.05 before the adjustment");
        assert_eq!(an.significant_cells(), 0);
    }
}
