//! Why a compared pair differs in a cell: the paired differences of their trials' time budgets
//! (docs/explain.md), iteration by iteration (the arms of an iteration share the link's seed),
//! and the parts that account for the median TTLB difference.
//!
//! A part is the floor (what the protocols' designs force: a handshake round trip more or
//! fewer) or one named component. The parts named are the fewest, largest first and in the
//! difference's direction, whose medians reach [`ACCOUNTS`] of the median TTLB difference, at
//! most [`MAX_PARTS`]; each comes with a 95 % interval of its median paired difference from the
//! order statistics of the differences ([`sign_interval`]: the sign test's, exact and free of
//! any assumption about their distribution, and honest with a few pairs, where a bootstrap's
//! is too narrow).

use crate::model::Trial;
use crate::stats::{self, Interval};
use quiclab_model::budget::{Budget, Component};
use std::collections::BTreeMap;

/// The share of the median TTLB difference the parts named must reach.
pub const ACCOUNTS: f64 = 0.8;
/// At most this many parts are named.
pub const MAX_PARTS: usize = 3;
/// Fewest pairs of budgets for an explanation.
pub const MIN_PAIRS: usize = 6;
/// Where nothing was planted, a median difference below this share of the control's median
/// TTLB is no difference, whatever the interval says.
pub const NOTHING_MARGIN: f64 = 0.01;

/// One part of a budget: the floor, or a component.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Part {
    Floor,
    Named(Component),
}

impl Part {
    pub const ALL: [Part; 12] = [
        Part::Floor,
        Part::Named(Component::Handshake),
        Part::Named(Component::RampUp),
        Part::Named(Component::WindowAfterLoss),
        Part::Named(Component::LossRecoveryWait),
        Part::Named(Component::FlowControl),
        Part::Named(Component::SenderLimited),
        Part::Named(Component::FlowOrSender),
        Part::Named(Component::WindowOrSender),
        Part::Named(Component::Overhead),
        Part::Named(Component::Requests),
        Part::Named(Component::Endpoint),
    ];

    pub fn ms(self, b: &Budget) -> f64 {
        match self {
            Part::Floor => b.floor.total_ms(),
            Part::Named(c) => b.ms(c),
        }
    }

    /// As the report writes it.
    pub fn title(self) -> &'static str {
        match self {
            Part::Floor => "floor (the protocols' round trips by design)",
            Part::Named(c) => c.title(),
        }
    }
}

/// One part's paired difference.
#[derive(Debug, Clone, PartialEq)]
pub struct PartDiff {
    pub part: Part,
    /// The median over iterations of (b's part - a's part), ms.
    pub median_ms: f64,
    pub ci: Option<Interval>,
}

/// Why b differs from a in one cell.
#[derive(Debug, Clone, PartialEq)]
pub struct Explanation {
    /// Iterations where both arms have a budget.
    pub pairs: usize,
    /// The median over iterations of (b's TTLB - a's TTLB), ms.
    pub diff_ms: f64,
    /// The parts named, largest first.
    pub named: Vec<PartDiff>,
    /// Whether they reach [`ACCOUNTS`] of the difference; if not, `named` holds the largest.
    pub accounts: bool,
    /// The median over iterations of b's overhead bytes less a's.
    pub overhead_bytes: f64,
}

/// The distribution-free 95 % interval of the median of `xs` (at least 6 values; `None` with
/// fewer): the k-th smallest and the k-th largest, for the largest k whose two-sided binomial
/// tail, 2 P(B(n, 1/2) < k), is at most 5 %. With 6 to 8 values it is their whole range, so a
/// difference is significant only where every pair agrees on its sign.
pub fn sign_interval(xs: &[f64]) -> Option<Interval> {
    let n = xs.len();
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    // P(B(n, 1/2) <= j), by the binomial coefficients
    let tail = |j: usize| -> f64 {
        let mut c = 1.0f64;
        let mut sum = 0.0;
        for i in 0..=j {
            if i > 0 {
                c = c * (n + 1 - i) as f64 / i as f64;
            }
            sum += c;
        }
        sum / 2f64.powi(n as i32)
    };
    let k = (1..=n / 2)
        .take_while(|&k| 2.0 * tail(k - 1) <= 0.05)
        .last()?;
    Some(Interval {
        lo: v[k - 1],
        hi: v[n - k],
    })
}

fn budgets<'a>(trials: &[&'a Trial]) -> BTreeMap<u32, &'a Budget> {
    trials
        .iter()
        .filter_map(|t| {
            Some((
                t.iteration,
                t.outcome.as_ref().ok()?.detail.budget.as_ref()?,
            ))
        })
        .collect()
}

/// The budgets of a's and b's trials of the same iterations, as (a's, b's); `None` below
/// [`MIN_PAIRS`] pairs.
fn paired<'a>(a: &[&'a Trial], b: &[&'a Trial]) -> Option<Vec<(&'a Budget, &'a Budget)>> {
    let (ba, bb) = (budgets(a), budgets(b));
    let pairs: Vec<(&Budget, &Budget)> = bb
        .iter()
        .filter_map(|(i, y)| Some((*ba.get(i)?, *y)))
        .collect();
    (pairs.len() >= MIN_PAIRS).then_some(pairs)
}

/// b's less a's of what `f` reads from a budget, pair by pair.
fn diffs(pairs: &[(&Budget, &Budget)], f: impl Fn(&Budget) -> f64) -> Vec<f64> {
    pairs.iter().map(|(x, y)| f(y) - f(x)).collect()
}

/// The explanation of b against a from their successful trials in one cell; `None` below
/// [`MIN_PAIRS`] pairs of budgets.
pub fn explain(a: &[&Trial], b: &[&Trial]) -> Option<Explanation> {
    let pairs = paired(a, b)?;
    let diff_ms = stats::median(&diffs(&pairs, |b| b.ttlb_ms))?;
    let mut parts: Vec<PartDiff> = Part::ALL
        .iter()
        .filter_map(|&part| {
            let d = diffs(&pairs, |b| part.ms(b));
            Some(PartDiff {
                part,
                median_ms: stats::median(&d)?,
                ci: sign_interval(&d),
            })
        })
        .collect();
    // largest first in the difference's direction
    let sign = if diff_ms < 0.0 { -1.0 } else { 1.0 };
    parts.sort_by(|x, y| (sign * y.median_ms).total_cmp(&(sign * x.median_ms)));
    let mut named = Vec::new();
    let mut sum = 0.0;
    for p in parts.iter().filter(|p| sign * p.median_ms > 0.0) {
        if named.len() == MAX_PARTS || sum >= ACCOUNTS * diff_ms.abs() {
            break;
        }
        sum += sign * p.median_ms;
        named.push(p.clone());
    }
    let accounts = diff_ms != 0.0 && sum >= ACCOUNTS * diff_ms.abs();
    let overhead_bytes = stats::median(&diffs(&pairs, |b| b.overhead_bytes as f64)).unwrap_or(0.0);
    Some(Explanation {
        pairs: pairs.len(),
        diff_ms,
        named,
        accounts,
        overhead_bytes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Detail, Metrics};
    use quiclab_model::budget::{Charge, Floor};

    fn trial(iteration: u32, floor: f64, parts: &[(Component, f64)]) -> Trial {
        let charges: Vec<Charge> = parts
            .iter()
            .map(|&(component, ms)| Charge {
                component,
                ms,
                spans: Vec::new(),
            })
            .collect();
        let ttlb = floor + parts.iter().map(|p| p.1).sum::<f64>();
        let budget = Budget {
            ttlb_ms: ttlb,
            floor: Floor {
                handshake_ms: floor,
                request_ms: 0.0,
                serialisation_ms: 0.0,
            },
            charges,
            residual_ms: 0.0,
            overhead_bytes: 1000 * iteration as u64,
            drops_to_client: 0,
            congestion_events: None,
            unread: Vec::new(),
            reads: Vec::new(),
        };
        Trial {
            id: format!("t{iteration}"),
            arm: "x".into(),
            condition: "c".into(),
            size: 1,
            iteration,
            seed: 1,
            before: None,
            outcome: Ok(Metrics {
                ttlb_ms: ttlb,
                ttfb_ms: 0.0,
                handshake_ms: None,
                handshake_rtts: None,
                hello_retry: false,
                packets_lost: None,
                bytes_resent: None,
                first_retransmit_offset: None,
                impossible_rtt_samples: None,
                link_drops: 0,
                timeline: Vec::new(),
                detail: Detail {
                    budget: Some(budget),
                    ..Detail::default()
                },
            }),
            artifacts: None,
            host: None,
            started_unix_ms: 0,
            wall_ms: 0.0,
        }
    }

    fn refs(v: &[Trial]) -> Vec<&Trial> {
        v.iter().collect()
    }

    #[test]
    fn the_sign_interval_is_the_order_statistics_the_binomial_allows() {
        // 6 to 8 values: their range (2 P(B <= 0) = 3.1 %, 1.6 %, 0.8 %; k = 2 would be 22 %,
        // 12.5 %, 7 %)
        for n in 6..=8 {
            let v: Vec<f64> = (1..=n).map(f64::from).collect();
            let ci = sign_interval(&v).unwrap();
            assert_eq!((ci.lo, ci.hi), (1.0, f64::from(n)), "{n}");
        }
        // 9 values: the 2nd to the 8th (2 P(B(9) <= 1) = 3.9 %)
        let v: Vec<f64> = (1..=9).rev().map(f64::from).collect();
        let ci = sign_interval(&v).unwrap();
        assert_eq!((ci.lo, ci.hi), (2.0, 8.0));
        // 20 values: the 6th to the 15th (2 P(B(20) <= 5) = 4.1 %, <= 6 would be 11.5 %)
        let v: Vec<f64> = (1..=20).map(f64::from).collect();
        let ci = sign_interval(&v).unwrap();
        assert_eq!((ci.lo, ci.hi), (6.0, 15.0));
        // below 6 values no interval reaches 95 %
        assert_eq!(sign_interval(&[1.0, 2.0, 3.0, 4.0, 5.0]), None);
    }

    #[test]
    fn the_parts_that_account_for_the_difference_are_named_largest_first() {
        use Component::*;
        // b: 20 ms more handshake, 3 ms more overhead, ramp-up jitter of a millisecond
        let a: Vec<Trial> = (0..6)
            .map(|i| {
                trial(
                    i,
                    120.0,
                    &[(RampUp, 10.0 + i as f64 % 2.0), (Overhead, 5.0)],
                )
            })
            .collect();
        let b: Vec<Trial> = (0..6)
            .map(|i| {
                trial(
                    i,
                    120.0,
                    &[(Handshake, 20.0), (RampUp, 10.0), (Overhead, 8.0)],
                )
            })
            .collect();
        let e = explain(&refs(&a), &refs(&b)).unwrap();
        assert_eq!(e.pairs, 6);
        assert!((e.diff_ms - 22.5).abs() < 1e-9, "{e:?}");
        assert!(e.accounts);
        assert_eq!(e.named.len(), 1, "{e:?}");
        assert_eq!(e.named[0].part, Part::Named(Handshake));
        let ci = e.named[0].ci.unwrap();
        assert!(ci.lo <= 20.0 && ci.hi >= 20.0, "{ci:?}");
        // the other way round: a is faster, and the handshake is named again (its sign too)
        let e = explain(&refs(&b), &refs(&a)).unwrap();
        assert!(e.diff_ms < 0.0 && e.accounts);
        assert_eq!(e.named[0].part, Part::Named(Handshake));
        assert!((e.named[0].median_ms + 20.0).abs() < 1e-9);
        // a difference spread over many parts: none reaches 80 % within three
        let spread = |i| {
            trial(
                i,
                100.0,
                &[
                    (Handshake, 4.0),
                    (RampUp, 4.0),
                    (Overhead, 4.0),
                    (Endpoint, 4.0),
                    (WindowAfterLoss, 4.0),
                ],
            )
        };
        let c: Vec<Trial> = (0..6).map(spread).collect();
        let d: Vec<Trial> = (0..6).map(|i| trial(i, 100.0, &[])).collect();
        let e = explain(&refs(&d), &refs(&c)).unwrap();
        assert!(!e.accounts, "{e:?}");
        assert_eq!(e.named.len(), MAX_PARTS);
        // too few pairs: nothing said
        assert_eq!(explain(&refs(&a[..5]), &refs(&b[..5])), None);
    }
}

/// The share of the difference the planted parts must take, and the most any other may.
pub const PLANTED_SHARE: f64 = 0.8;
pub const OTHER_SHARE: f64 = 0.2;

/// One planted cause checked in one cell: is the explanation right?
#[derive(Debug, Clone)]
pub struct Check {
    /// Index into the campaign's `planted`.
    pub planted: usize,
    /// The control and the planted arm (indices), and the control's and the planted
    /// condition's (equal for an arm's cause).
    pub arms: (usize, usize),
    pub conditions: (usize, usize),
    pub size: usize,
    pub pairs: usize,
    /// The median paired TTLB difference and its 95 % interval ([`sign_interval`]).
    pub diff_ms: f64,
    pub diff_ci: Option<Interval>,
    /// The median paired difference of the floor (a condition that changes the path moves it).
    pub floor_ms: f64,
    /// What the planted components took of the difference beyond the floor.
    pub share: f64,
    /// The largest share any other part took, and which.
    pub other: Option<(Part, f64)>,
    pub pass: bool,
}

/// Every planted cause of the campaign checked in every cell it applies to: an arm's in every
/// condition (or the one it names) and size, a condition's for every arm and size, each
/// against its control in the same iterations. A cause passes where the difference is
/// significant (its paired interval, [`sign_interval`], excludes 0), the planted components
/// take at least [`PLANTED_SHARE`] of it beyond the floor's and no other part more than
/// [`OTHER_SHARE`]; nothing planted passes where the interval includes 0 or the median
/// difference is within [`NOTHING_MARGIN`] of the control's median TTLB.
pub fn checks(an: &crate::analysis::Analysis) -> Vec<Check> {
    let c = an.campaign;
    let arms: Vec<&str> = c.arms.iter().map(|a| a.name.as_str()).collect();
    let conditions: Vec<(&str, Option<&str>)> = c
        .conditions
        .iter()
        .map(|x| (x.name.as_str(), x.base.as_deref()))
        .collect();
    let mut out = Vec::new();
    for (k, p) in c.planted.iter().enumerate() {
        let cells = p.cells(&arms, &conditions);
        for ((a, b), (ca, cb)) in cells {
            for si in 0..c.sizes.len() {
                out.extend(check_cell(an, k, &p.causes, (a, b), (ca, cb), si));
            }
        }
    }
    out
}

/// The check of a planted cause in one cell: arm `arms.1` under condition `conditions.1`
/// against arm `arms.0` under `conditions.0`, at size `size`.
fn check_cell(
    an: &crate::analysis::Analysis,
    planted: usize,
    causes: &[Component],
    arms: (usize, usize),
    conditions: (usize, usize),
    size: usize,
) -> Option<Check> {
    let pairs = paired(
        &an.cell(conditions.0, size, arms.0).ok,
        &an.cell(conditions.1, size, arms.1).ok,
    )?;
    let median_of = |f: &dyn Fn(&Budget) -> f64| stats::median(&diffs(&pairs, f)).unwrap_or(0.0);
    let ttlb = diffs(&pairs, |b| b.ttlb_ms);
    let diff_ms = stats::median(&ttlb)?;
    let diff_ci = sign_interval(&ttlb);
    let control_ms = stats::median(&pairs.iter().map(|(x, _)| x.ttlb_ms).collect::<Vec<_>>())?;
    let floor_ms = median_of(&|b| b.floor.total_ms());
    let net = diff_ms - floor_ms;
    let planted_ms: f64 = causes.iter().map(|&c| median_of(&|b| b.ms(c))).sum();
    let share = if net.abs() > 0.0 {
        planted_ms / net
    } else {
        0.0
    };
    let other = Component::ALL
        .into_iter()
        .filter(|c| !causes.contains(c))
        .map(|c| {
            let ms = median_of(&|b| b.ms(c));
            (
                Part::Named(c),
                if net.abs() > 0.0 { ms / net.abs() } else { 0.0 },
            )
        })
        .max_by(|x, y| x.1.abs().total_cmp(&y.1.abs()));
    let significant = diff_ci.is_some_and(|ci| !ci.contains(0.0));
    let pass = if causes.is_empty() {
        !significant || diff_ms.abs() < NOTHING_MARGIN * control_ms
    } else {
        significant && share >= PLANTED_SHARE && other.is_none_or(|(_, s)| s.abs() <= OTHER_SHARE)
    };
    Some(Check {
        planted,
        arms,
        conditions,
        size,
        pairs: pairs.len(),
        diff_ms,
        diff_ci,
        floor_ms,
        share,
        other,
        pass,
    })
}
