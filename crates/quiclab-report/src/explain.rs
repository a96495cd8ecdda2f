//! Why a compared pair differs in a cell: the paired differences of their trials' time budgets
//! (docs/explain.md), iteration by iteration (the arms of an iteration share the link's seed),
//! and the parts that account for the median TTLB difference.
//!
//! A part is the floor (what the protocols' designs force: a handshake round trip more or
//! fewer) or one named component. The parts named are the fewest, largest first and in the
//! difference's direction, whose medians reach [`ACCOUNTS`] of the median TTLB difference, at
//! most [`MAX_PARTS`]; each comes with a bootstrap 95 % interval of its median paired difference
//! (whole iterations resampled).

use crate::model::Trial;
use crate::stats::{self, Interval};
use quiclab_model::budget::{Budget, Component};
use std::collections::BTreeMap;

/// The share of the median TTLB difference the parts named must reach.
pub const ACCOUNTS: f64 = 0.8;
/// At most this many parts are named.
pub const MAX_PARTS: usize = 3;
/// Fewest pairs of budgets for an explanation.
pub const MIN_PAIRS: usize = 3;

/// One part of a budget: the floor, or a component.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Part {
    Floor,
    Named(Component),
}

impl Part {
    pub const ALL: [Part; 9] = [
        Part::Floor,
        Part::Named(Component::Handshake),
        Part::Named(Component::RampUp),
        Part::Named(Component::WindowAfterLoss),
        Part::Named(Component::LossRecoveryWait),
        Part::Named(Component::FlowOrSender),
        Part::Named(Component::WindowOrSender),
        Part::Named(Component::Overhead),
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

/// The explanation of b against a from their successful trials in one cell (`seed` for the
/// intervals); `None` below [`MIN_PAIRS`] pairs of budgets.
pub fn explain(a: &[&Trial], b: &[&Trial], seed: u64) -> Option<Explanation> {
    let (ba, bb) = (budgets(a), budgets(b));
    let pairs: Vec<(&Budget, &Budget)> = bb
        .iter()
        .filter_map(|(i, y)| Some((*ba.get(i)?, *y)))
        .collect();
    if pairs.len() < MIN_PAIRS {
        return None;
    }
    let diffs = |f: &dyn Fn(&Budget) -> f64| -> Vec<f64> {
        pairs.iter().map(|(x, y)| f(y) - f(x)).collect()
    };
    let diff_ms = stats::median(&diffs(&|b| b.ttlb_ms))?;
    let mut parts: Vec<PartDiff> = Part::ALL
        .iter()
        .enumerate()
        .filter_map(|(k, &part)| {
            let d = diffs(&|b| part.ms(b));
            Some(PartDiff {
                part,
                median_ms: stats::median(&d)?,
                ci: stats::bootstrap_median_ci(&d, seed.wrapping_add(k as u64)),
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
    let overhead_bytes = stats::median(
        &pairs
            .iter()
            .map(|(x, y)| y.overhead_bytes as f64 - x.overhead_bytes as f64)
            .collect::<Vec<_>>(),
    )
    .unwrap_or(0.0);
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
        let e = explain(&refs(&a), &refs(&b), 1).unwrap();
        assert_eq!(e.pairs, 6);
        assert!((e.diff_ms - 22.5).abs() < 1e-9, "{e:?}");
        assert!(e.accounts);
        assert_eq!(e.named.len(), 1, "{e:?}");
        assert_eq!(e.named[0].part, Part::Named(Handshake));
        let ci = e.named[0].ci.unwrap();
        assert!(ci.lo <= 20.0 && ci.hi >= 20.0, "{ci:?}");
        // the other way round: a is faster, and the handshake is named again (its sign too)
        let e = explain(&refs(&b), &refs(&a), 1).unwrap();
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
        let e = explain(&refs(&d), &refs(&c), 1).unwrap();
        assert!(!e.accounts, "{e:?}");
        assert_eq!(e.named.len(), MAX_PARTS);
        // too few pairs: nothing said
        assert_eq!(explain(&refs(&a[..2]), &refs(&b[..2]), 1), None);
    }
}
