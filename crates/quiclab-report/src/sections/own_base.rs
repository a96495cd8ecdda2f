//! Each arm against its own base: what an impairment does to each arm of a compared pair,
//! measured against that arm's own trials on the unimpaired path (the condition's `base`), and
//! the difference of the two changes. Where two arms already differ without any impairment (a
//! stack's packetisation, its handshake), the heatmap's difference under loss mixes that
//! difference with the loss's effect; this table separates them: a loss response shows as a
//! difference of changes, a base difference does not.

use crate::analysis::{Analysis, MIN_TRIALS};
use crate::chart;
use crate::html::esc;
use crate::stats;
use crate::units;
use std::fmt::Write;

pub fn render(an: &Analysis) -> Option<String> {
    let c = an.campaign;
    if !c.workload.is_requests() || an.comparisons.is_empty() {
        return None;
    }
    // (impaired condition, its base), in plan order
    let rows: Vec<(usize, usize)> = c
        .conditions
        .iter()
        .enumerate()
        .filter_map(|(i, cond)| {
            let base = cond.base.as_ref()?;
            Some((i, c.conditions.iter().position(|b| &b.name == base)?))
        })
        .collect();
    if rows.is_empty() {
        return None;
    }
    let mut out = format!(
        "<p class=\"caption\">What each impairment does to each arm, against the arm's own \
         trials on the same path without it (its base): the change of its median TTLB, \
         median<sub>impaired</sub> / median<sub>base</sub> − 1. The difference of the two \
         arms' changes (b − a, in percentage points, with its 95 % bootstrap interval, each of \
         the four cells resampled on its own) is the impairment's own effect on their \
         comparison: an arm that is slower already at its base (its packets, its handshake) is \
         not charged for it here. A difference whose interval includes 0, or that rests on \
         fewer than {MIN_TRIALS} trials in a cell, is not told apart (grey).</p>\n"
    );
    for cmp in &an.comparisons {
        let (a, b) = (cmp.a, cmp.b);
        let _ = write!(
            out,
            "<h3><span class=\"swatch\" style=\"background:{}\"></span>{} vs <span \
             class=\"swatch\" style=\"background:{}\"></span>{}</h3>\n<table \
             class=\"own-base\"><thead><tr><th>condition (base)</th>",
            chart::arm_colour(b),
            esc(&c.arms[b].name),
            chart::arm_colour(a),
            esc(&c.arms[a].name),
        );
        for size in &c.sizes {
            let _ = write!(out, "<th class=\"num\">{}</th>", units::size(*size));
        }
        out.push_str("</tr></thead><tbody>\n");
        for &(ci, bi) in &rows {
            let _ = write!(
                out,
                "<tr><td>{} <span class=\"muted\">({})</span></td>",
                esc(&c.conditions[ci].name),
                esc(&c.conditions[bi].name)
            );
            for si in 0..c.sizes.len() {
                out.push_str(&cell(an, a, b, ci, bi, si));
            }
            out.push_str("</tr>\n");
        }
        out.push_str("</tbody></table>\n");
    }
    Some(out)
}

/// One condition and size: both arms' changes and their difference.
fn cell(an: &Analysis, a: usize, b: usize, ci: usize, bi: usize, si: usize) -> String {
    let c = an.campaign;
    let ttlb = |cond: usize, arm: usize| an.cell(cond, si, arm).ttlb_ms.as_slice();
    let (a0, a1, b0, b1) = (ttlb(bi, a), ttlb(ci, a), ttlb(bi, b), ttlb(ci, b));
    let n = [a0.len(), a1.len(), b0.len(), b1.len()];
    let change = |base: &[f64], imp: &[f64]| {
        stats::relative_change(base, imp).map_or_else(|| "—".to_string(), units::signed_pct)
    };
    let (ca, cb) = (change(a0, a1), change(b0, b1));
    let diff = stats::relative_change(a0, a1).zip(stats::relative_change(b0, b1));
    let seed = stats::seed_from(&[
        "own-base",
        &c.arms[a].name,
        &c.arms[b].name,
        &c.conditions[ci].name,
        &c.sizes[si].to_string(),
    ]);
    let interval = (n.iter().all(|k| *k >= MIN_TRIALS))
        .then(|| stats::bootstrap_change_difference_ci(a0, a1, b0, b1, seed))
        .flatten();
    let counts = format!("n = {} / {} / {} / {}", n[0], n[1], n[2], n[3]);
    let (value, class) = match (diff, interval) {
        (Some((da, db)), Some(iv)) => (
            format!(
                "<strong>b − a: {} pp</strong> ({} pp)",
                pp(db - da),
                units::signed_pct_range(iv.lo, iv.hi)
            ),
            if iv.contains(0.0) { "muted" } else { "" },
        ),
        (Some((da, db)), None) => (
            format!("b − a: {} pp, too few trials for an interval", pp(db - da)),
            "muted",
        ),
        _ => ("no trials".to_string(), "muted"),
    };
    format!(
        "<td class=\"num {class}\">a {ca} · b {cb}<br>{value}<br><span class=\"muted\" \
         title=\"trials: a at base / a impaired / b at base / b impaired\">{counts}</span></td>"
    )
}

/// A difference of two fractions in signed percentage points: 0.43 -> "+43".
fn pp(frac: f64) -> String {
    let p = frac * 100.0;
    units::signed(p, if p.abs() < 10.0 { 1 } else { 0 })
}
