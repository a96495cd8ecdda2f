//! Findings: short sentences generated from the analysis, the most important first.
//!
//! Order: failures that undermine an arm (a fifth or more of its trials), then the comparisons
//! (per comparison and size: one sentence when b is faster, or slower, under every condition,
//! otherwise one per direction naming the significant cells, larger changes first), then what
//! explains or qualifies them: handshake round trips, HelloRetryRequests, impossible RTT samples,
//! other failures, arm caveats. Time differences are given in ms and in round trips of the
//! condition's minimum RTT. Only significant changes (95 % interval excluding 0) are called
//! faster or slower.

use crate::analysis::{Analysis, Change, ChangeCell, ComparisonAnalysis, MIN_TRIALS};
use crate::html::esc;
use crate::stats;
use crate::units;
use std::fmt::Write;

struct Finding {
    /// Lower tiers come first.
    tier: u8,
    /// Within a tier, larger weights come first.
    weight: f64,
    html: String,
}

const TIER_SEVERE: u8 = 0;
const TIER_COMPARISON: u8 = 1;
const TIER_EXPLAIN: u8 = 2;
const TIER_FLAG: u8 = 3;
const TIER_FAILURES: u8 = 4;
const TIER_CAVEAT: u8 = 5;
const TIER_NOTE: u8 = 6;

/// At most this many cells are named in one sentence.
const MAX_NAMED: usize = 4;

pub fn render(an: &Analysis) -> Option<String> {
    let mut f = Vec::new();
    // telemetry: the model check first, then each lossy condition in plan order
    for (i, html) in super::telemetry::sentences(an).into_iter().enumerate() {
        f.push(Finding {
            tier: TIER_COMPARISON,
            weight: -(i as f64),
            html,
        });
    }
    for (i, html) in super::bulk::sentences(an).into_iter().enumerate() {
        f.push(Finding {
            tier: TIER_COMPARISON,
            weight: -(i as f64),
            html,
        });
    }
    for cmp in &an.comparisons {
        comparison(an, cmp, &mut f);
    }
    shared_baselines(an, &mut f);
    failures(an, &mut f);
    handshakes(an, &mut f);
    flags(an, &mut f);
    notes(an, &mut f);
    if f.is_empty() {
        f.push(Finding {
            tier: TIER_NOTE,
            weight: 0.0,
            html: "No successful trials to compare.".into(),
        });
    }
    // Stable: equal keys keep the order in which they were generated (plan order).
    f.sort_by(|x, y| x.tier.cmp(&y.tier).then(y.weight.total_cmp(&x.weight)));
    let mut out = String::from("<ul class=\"findings\">\n");
    for x in f {
        let _ = writeln!(out, "<li>{}</li>", x.html);
    }
    out.push_str("</ul>\n");
    Some(out)
}

fn b(s: &str) -> String {
    format!("<strong>{}</strong>", esc(s))
}

/// "41–95" from formatted ends, or one value when they read the same.
fn span(lo: String, hi: String) -> String {
    if lo == hi { lo } else { format!("{lo}–{hi}") }
}

fn range_of(values: impl Iterator<Item = f64>) -> (f64, f64) {
    values.fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), v| {
        (l.min(v), h.max(v))
    })
}

/// Unsigned magnitude of a change's interval, for sentences that already say the direction:
/// "9–27 %".
fn ci_magnitude(ch: &Change) -> Option<String> {
    let ci = ch.ci?;
    let (lo, hi) = (ci.lo.abs().min(ci.hi.abs()), ci.lo.abs().max(ci.hi.abs()));
    // The same digits as the heatmap's signed interval, without the signs.
    let signed = units::signed_pct_range(lo, hi);
    let (l, h) = signed.split_once(" to ")?;
    let unsign = |s: &str| s.trim_start_matches(['+', units::MINUS]).to_string();
    Some(format!("{}–{} %", unsign(l), unsign(h)))
}

/// "812 ms, 16 RTT" (unsigned) for a change.
fn time_magnitude(ch: &Change) -> String {
    match ch.diff_rtts {
        Some(r) => format!("{}, {}", units::ms(ch.diff_ms.abs()), units::rtts(r.abs())),
        None => units::ms(ch.diff_ms.abs()),
    }
}

fn comparison(an: &Analysis, cmp: &ComparisonAnalysis, out: &mut Vec<Finding>) {
    let camp = an.campaign;
    let (a, bn) = (&camp.arms[cmp.a].name, &camp.arms[cmp.b].name);
    let n_sizes = camp.sizes.len();
    let mut any_valid = false;
    let mut any_significant = false;
    let mut most_pairs = 0;
    for s in 0..n_sizes {
        let valid: Vec<(&ChangeCell, &Change)> = (0..camp.conditions.len())
            .filter_map(|c| {
                let cell = cmp.cell(c, s);
                cell.change.as_ref().map(|ch| (cell, ch))
            })
            .collect();
        if valid.is_empty() {
            continue;
        }
        any_valid = true;
        most_pairs = valid
            .iter()
            .map(|(_, ch)| ch.pairs)
            .max()
            .unwrap_or(0)
            .max(most_pairs);
        let size = super::size_label(camp, camp.sizes[s]);
        let mut faster: Vec<_> = valid
            .iter()
            .filter(|(_, ch)| ch.significant && ch.rel < 0.0)
            .copied()
            .collect();
        let mut slower: Vec<_> = valid
            .iter()
            .filter(|(_, ch)| ch.significant && ch.rel > 0.0)
            .copied()
            .collect();
        any_significant |= !faster.is_empty() || !slower.is_empty();
        for (group, all_same) in [
            (&faster, faster.len() == valid.len()),
            (&slower, slower.len() == valid.len()),
        ] {
            if all_same {
                out.push(uniform(an, a, bn, &size, group, camp.conditions.len()));
            }
        }
        if faster.len() == valid.len() || slower.len() == valid.len() {
            continue;
        }
        for (group, sooner) in [(&mut slower, false), (&mut faster, true)] {
            if group.is_empty() {
                continue;
            }
            group.sort_by(|x, y| y.1.rel.abs().total_cmp(&x.1.rel.abs()));
            out.push(mixed(an, a, bn, &size, group, valid.len(), sooner));
        }
    }
    if !any_valid {
        out.push(Finding {
            tier: TIER_NOTE,
            weight: 0.0,
            html: format!(
                "{} vs {}: no cell has {MIN_TRIALS} successful trials in both arms.",
                b(bn),
                b(a)
            ),
        });
    } else if most_pairs < crate::stats::paired::MIN_PAIRS {
        out.push(Finding {
            tier: TIER_NOTE,
            weight: 0.0,
            html: format!(
                "{} vs {}: too few pairs for a verdict. A cell has at most {most_pairs} \
                 iterations both arms completed; a paired test needs {} to tell a difference at \
                 5 % at all (more iterations: the plan's <code>iterations</code>).",
                b(bn),
                b(a),
                crate::stats::paired::MIN_PAIRS
            ),
        });
    } else if !any_significant {
        out.push(Finding {
            tier: TIER_COMPARISON,
            weight: -1.0,
            html: format!(
                "{} and {} were indistinguishable: no significant difference in the median TTLB \
                 in any cell (paired signed-rank tests on up to {most_pairs} pairs, adjusted \
                 across the report's cells).",
                b(bn),
                b(a)
            ),
        });
    }
}

/// b faster (or slower) than a under every condition at one size.
fn uniform(
    an: &Analysis,
    a: &str,
    bn: &str,
    size: &str,
    cells: &[(&ChangeCell, &Change)],
    n_conditions: usize,
) -> Finding {
    let sooner = cells[0].1.rel < 0.0;
    let (ms_lo, ms_hi) = range_of(cells.iter().map(|c| c.1.diff_ms.abs()));
    let (pct_lo, pct_hi) = range_of(cells.iter().map(|c| c.1.rel.abs()));
    let ms_text = span(
        units::number(ms_lo, if ms_hi < 10.0 { 1 } else { 0 }),
        units::number(ms_hi, if ms_hi < 10.0 { 1 } else { 0 }),
    );
    let mut detail = format!("{ms_text} ms");
    if cells.iter().all(|c| c.1.diff_rtts.is_some()) {
        let (r_lo, r_hi) = range_of(cells.iter().filter_map(|c| c.1.diff_rtts.map(f64::abs)));
        let _ = write!(
            detail,
            " ({} RTT)",
            span(units::number(r_lo, 1), units::number(r_hi, 1))
        );
    }
    let where_ = if cells.len() == 1 {
        format!(
            "under {}",
            b(&an.campaign.conditions[cells[0].0.condition].name)
        )
    } else if cells.len() == n_conditions {
        "under every condition".to_string()
    } else {
        format!("under all {} conditions with enough trials", cells.len())
    };
    let pct = span(
        units::abs_pct(pct_lo).trim_end_matches(" %").to_string(),
        units::abs_pct(pct_hi).trim_end_matches(" %").to_string(),
    );
    let (p_lo, p_hi) = range_of(cells.iter().map(|c| c.1.pairs as f64));
    Finding {
        tier: TIER_COMPARISON,
        weight: pct_hi + 1.0,
        html: format!(
            "At {}, {} finished {detail} {} than {} in the median {where_} ({pct} %; {} of {} \
             cells significant, on {} pairs each).",
            esc(size),
            b(bn),
            if sooner { "sooner" } else { "later" },
            b(a),
            cells.len(),
            cells.len(),
            span(units::number(p_lo, 0), units::number(p_hi, 0)),
        ),
    }
}

/// Significant cells of one direction at one size, when the other cells differ.
fn mixed(
    an: &Analysis,
    a: &str,
    bn: &str,
    size: &str,
    cells: &[(&ChangeCell, &Change)],
    n_valid: usize,
    faster: bool,
) -> Finding {
    let word = if faster { "faster" } else { "slower" };
    let detail = |ch: &Change| match ci_magnitude(ch) {
        Some(m) => format!("95 % CI {m}; {}", time_magnitude(ch)),
        None => time_magnitude(ch),
    };
    let weight = cells[0].1.rel.abs();
    let html = if cells.len() == 1 {
        let (cell, ch) = cells[0];
        format!(
            "Under {}, at {} {} was {} {word} than {} ({}; 1 of {n_valid} conditions).",
            b(&an.campaign.conditions[cell.condition].name),
            esc(size),
            b(bn),
            esc(&units::abs_pct(ch.rel)),
            b(a),
            esc(&detail(ch)),
        )
    } else {
        let named: Vec<String> = cells
            .iter()
            .take(MAX_NAMED)
            .map(|(cell, ch)| {
                format!(
                    "{} by {} ({})",
                    b(&an.campaign.conditions[cell.condition].name),
                    esc(&units::abs_pct(ch.rel)),
                    esc(&detail(ch))
                )
            })
            .collect();
        let more = cells.len().saturating_sub(MAX_NAMED);
        format!(
            "At {}, {} was {word} than {} under {} of {n_valid} conditions: {}{}.",
            esc(size),
            b(bn),
            b(a),
            cells.len(),
            named.join(", "),
            if more > 0 {
                format!(" and {more} more")
            } else {
                String::new()
            }
        )
    };
    Finding {
        tier: TIER_COMPARISON,
        weight,
        html,
    }
}

/// Two comparisons against the same arm (e.g. HTTP/3 with Cubic, then with BBR, both against
/// HTTP/2 with BBR), cell by cell where the first one's change is significant: whether the
/// second arm keeps that change or removes it (its interval includes 0). This is how a plan
/// separates the protocol from the congestion controller.
fn shared_baselines(an: &Analysis, out: &mut Vec<Finding>) {
    let camp = an.campaign;
    let change = |ch: &Change| match ch.ci {
        Some(ci) => format!(
            "{} (95 % CI {})",
            units::signed_pct(ch.rel),
            units::signed_pct_range(ci.lo, ci.hi)
        ),
        None => units::signed_pct(ch.rel),
    };
    for (i, first) in an.comparisons.iter().enumerate() {
        for second in an.comparisons.iter().skip(i + 1) {
            if first.a != second.a || first.b == second.b {
                continue;
            }
            let (a, b1, b2) = (
                &camp.arms[first.a].name,
                &camp.arms[first.b].name,
                &camp.arms[second.b].name,
            );
            let mut cells = Vec::new();
            let (mut removed, mut kept, mut reversed) = (0, 0, 0);
            for c in 0..camp.conditions.len() {
                for s in 0..camp.sizes.len() {
                    let (Some(x), Some(y)) = (
                        first.cell(c, s).change.as_ref(),
                        second.cell(c, s).change.as_ref(),
                    ) else {
                        continue;
                    };
                    if !x.significant {
                        continue;
                    }
                    match (y.significant, y.rel.signum() == x.rel.signum()) {
                        (false, _) => removed += 1,
                        (true, true) => kept += 1,
                        (true, false) => reversed += 1,
                    }
                    cells.push(format!(
                        "{}, {}: {} {}, {} {}",
                        b(&camp.conditions[c].name),
                        esc(&super::size_label(camp, camp.sizes[s])),
                        b(b1),
                        esc(&change(x)),
                        b(b2),
                        esc(&change(y))
                    ));
                }
            }
            if cells.is_empty() {
                continue;
            }
            out.push(Finding {
                tier: TIER_EXPLAIN,
                weight: (removed + kept + reversed) as f64,
                html: format!(
                    "Against {} in the cells where {} differed significantly, {} removed the \
                     difference in {removed} (its interval includes 0), kept it in {kept} and \
                     reversed it in {reversed}: {}.",
                    b(a),
                    b(b1),
                    b(b2),
                    cells.join("; ")
                ),
            });
        }
    }
}

fn failures(an: &Analysis, out: &mut Vec<Finding>) {
    let camp = an.campaign;
    let (ok, failed) = an.counts();
    if failed == 0 {
        return;
    }
    let mut worst: f64 = 0.0;
    let mut parts = Vec::new();
    for (i, arm) in camp.arms.iter().enumerate() {
        let (mut n_ok, mut n_failed) = (0, 0);
        let mut reasons: Vec<(String, usize)> = Vec::new();
        for cell in an.arm_cells(i) {
            n_ok += cell.ok.len();
            n_failed += cell.failed.len();
            for (r, n) in &cell.failure_reasons {
                match reasons.iter_mut().find(|(x, _)| x == r) {
                    Some((_, k)) => *k += n,
                    None => reasons.push((r.clone(), *n)),
                }
            }
        }
        if n_failed == 0 {
            continue;
        }
        worst = worst.max(n_failed as f64 / (n_ok + n_failed) as f64);
        reasons.sort_by_key(|r| std::cmp::Reverse(r.1));
        let listed: Vec<String> = reasons
            .iter()
            .take(3)
            .map(|(r, n)| format!("“{}” ×{n}", esc(&shorten(r, 80))))
            .collect();
        let more = reasons.len().saturating_sub(3);
        parts.push(format!(
            "{} {} of {} ({}{})",
            b(&arm.name),
            n_failed,
            n_ok + n_failed,
            listed.join(", "),
            if more > 0 {
                format!(", {more} other reasons")
            } else {
                String::new()
            }
        ));
    }
    let severe = worst >= 0.2;
    out.push(Finding {
        tier: if severe { TIER_SEVERE } else { TIER_FAILURES },
        weight: worst,
        html: format!(
            "{}{failed} of {} trials failed and are left out of every statistic: {}. See \
             <a href=\"#failures\">the list</a>.",
            if severe {
                "<span class=\"flag\">Many trials failed.</span> "
            } else {
                ""
            },
            ok + failed,
            parts.join("; ")
        ),
    });
}

fn shorten(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_string()
    } else {
        let mut t: String = s.chars().take(max - 1).collect();
        t.push('…');
        t
    }
}

fn handshakes(an: &Analysis, out: &mut Vec<Finding>) {
    let camp = an.campaign;
    // (formatted median, arm names) in arm order, arms with equal medians merged.
    let mut groups: Vec<(String, f64, Vec<String>)> = Vec::new();
    for (i, arm) in camp.arms.iter().enumerate() {
        let all: Vec<f64> = an
            .arm_cells(i)
            .flat_map(|c| c.ok.iter())
            .filter_map(|t| crate::analysis::metrics(t).and_then(|m| m.handshake_rtts))
            .collect();
        let Some(m) = stats::median(&all) else {
            continue;
        };
        let text = units::rtts(m);
        match groups.iter_mut().find(|g| g.0 == text) {
            Some(g) => g.2.push(b(&arm.name)),
            None => groups.push((text, m, vec![b(&arm.name)])),
        }
    }
    if groups.is_empty() {
        return;
    }
    let spread = groups.iter().map(|g| g.1).fold(f64::NEG_INFINITY, f64::max)
        - groups.iter().map(|g| g.1).fold(f64::INFINITY, f64::min);
    let parts: Vec<String> = groups
        .iter()
        .map(|(t, _, names)| format!("{} for {}", esc(t), join_and(names)))
        .collect();
    out.push(Finding {
        tier: TIER_EXPLAIN,
        weight: spread,
        html: format!(
            "Handshakes (first packet to handshake complete) took a median of {} over all \
             conditions; every round trip of difference is paid again by each new connection.",
            parts.join("; ")
        ),
    });
}

fn join_and(items: &[String]) -> String {
    match items {
        [] => String::new(),
        [one] => one.clone(),
        [init @ .., last] => format!("{} and {last}", init.join(", ")),
    }
}

fn flags(an: &Analysis, out: &mut Vec<Finding>) {
    let camp = an.campaign;
    for (i, arm) in camp.arms.iter().enumerate() {
        let (mut n_ok, mut hrr, mut imp_trials, mut imp_samples) = (0, 0, 0, 0u64);
        let (mut doubted, mut doubt) = (0, None);
        let mut conds: Vec<String> = Vec::new();
        for cell in an.arm_cells(i) {
            n_ok += cell.ok.len();
            doubted += cell.doubted_trials;
            doubt = doubt.or(cell.doubt.as_deref());
            hrr += cell.hello_retries;
            imp_trials += cell.impossible_rtt_trials;
            imp_samples += cell.impossible_rtt_samples;
            let name = &camp.conditions[cell.condition].name;
            if cell.impossible_rtt_trials > 0 && !conds.contains(name) {
                conds.push(name.clone());
            }
        }
        if let Some(why) = doubt {
            out.push(Finding {
                tier: TIER_FLAG,
                weight: doubted as f64 / n_ok.max(1) as f64 + 1.0,
                html: format!(
                    "<span class=\"flag\">Sender's record in doubt:</span> {} completed \
                     {doubted} of {n_ok} transfers whose sender's own record does not add up \
                     (e.g. {}). Their timelines and time budgets show what the record says, \
                     not what happened: check the stack's qlog with `quiclab external \
                     check-qlog`.",
                    b(&arm.name),
                    esc(why)
                ),
            });
        }
        if imp_trials > 0 {
            let names: Vec<String> = conds.iter().map(|c| esc(c)).collect();
            out.push(Finding {
                tier: TIER_FLAG,
                weight: imp_trials as f64 / n_ok.max(1) as f64 + 1.0,
                html: format!(
                    "<span class=\"flag\">Impossible RTT samples:</span> {} measured round \
                     trips shorter than the smallest round trip the link can deliver (its delays \
                     less their jitter) in {imp_trials} of {n_ok} \
                     trials ({imp_samples} sample{}; under {}). Such a sample is wrong (e.g. an \
                     acknowledgement matched to the wrong transmission), and a controller that \
                     trusts it, such as BBR's minimum-RTT filter, may pace too slowly.",
                    b(&arm.name),
                    if imp_samples == 1 { "" } else { "s" },
                    join_and(&names)
                ),
            });
        }
        if hrr > 0 {
            out.push(Finding {
                tier: TIER_FLAG,
                weight: hrr as f64 / n_ok.max(1) as f64,
                html: format!(
                    "{} needed a HelloRetryRequest in {hrr} of {n_ok} successful trials: the \
                     server wanted a key share the client did not send first, which costs one \
                     extra round trip before any data.",
                    b(&arm.name)
                ),
            });
        }
        for cav in &arm.caveats {
            out.push(Finding {
                tier: TIER_CAVEAT,
                weight: 0.0,
                html: format!(
                    "Caveat for {}: {}.",
                    b(&arm.name),
                    esc(cav.trim_end_matches('.'))
                ),
            });
        }
    }
}

fn notes(an: &Analysis, out: &mut Vec<Finding>) {
    let camp = an.campaign;
    let (busy_trials, busy_cells) = (an.busy.trials, super::busy_cells(an));
    if busy_trials > 0 {
        let named: Vec<String> = busy_cells
            .iter()
            .take(MAX_NAMED)
            .map(|(cell, k)| format!("{cell} ({k})"))
            .collect();
        let more = busy_cells.len().saturating_sub(MAX_NAMED);
        out.push(Finding {
            tier: TIER_FLAG,
            weight: busy_trials as f64 / camp.trials.len().max(1) as f64,
            html: format!(
                "<span class=\"flag\">A busy host:</span> {busy_trials} of {} trials ran while \
                 their host's CPUs were over 90 % busy ({} s in all), in {}{}. Their timings may \
                 include the machine's load: fewer --jobs, or a quieter machine, give cleaner \
                 results.",
                camp.trials.len(),
                camp.busy_seconds.unwrap_or(0),
                named.join(", "),
                if more > 0 {
                    format!(" and {more} more cells")
                } else {
                    String::new()
                }
            ),
        });
    }
    let na = an
        .comparisons
        .iter()
        .flat_map(|c| c.cells.iter())
        .filter(|c| c.change.is_none())
        .count();
    let total: usize = an.comparisons.iter().map(|c| c.cells.len()).sum();
    if na > 0 && na < total {
        out.push(Finding {
            tier: TIER_FAILURES,
            weight: 0.0,
            html: format!(
                "{na} of {total} compared cells have fewer than {MIN_TRIALS} successful trials in \
                 an arm and are shown as n/a."
            ),
        });
    }
    if !an.unmatched.is_empty() {
        out.push(Finding {
            tier: TIER_NOTE,
            weight: 0.0,
            html: format!(
                "<span class=\"flag\">{} trials</span> name an arm, condition or size that \
                 campaign {} does not list and are left out.",
                an.unmatched.len(),
                b(&camp.name)
            ),
        });
    }
    for u in &an.unresolved_comparisons {
        out.push(Finding {
            tier: TIER_NOTE,
            weight: 0.0,
            html: format!(
                "<span class=\"flag\">Comparison {} was skipped:</span> it names an arm the \
                 campaign does not have.",
                esc(u)
            ),
        });
    }
}
