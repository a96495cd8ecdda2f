//! The page's header: what the campaign is, where its plan came from, how many trials succeeded,
//! its arms with their colours and caveats, and the provenance of the machine and build (folded).

use crate::analysis::{Analysis, metrics};
use crate::chart::arm_colour;
use crate::html::esc;
use crate::model::Workload;
use crate::stats;
use crate::units;
use std::collections::BTreeMap;
use std::fmt::Write;

pub fn render(an: &Analysis) -> String {
    let c = an.campaign;
    let mut out = String::new();
    let _ = write!(out, "<header>\n<h1>{}</h1>\n", esc(&c.name));
    if !c.description.is_empty() {
        let _ = writeln!(out, "<p class=\"desc\">{}</p>", esc(&c.description));
    }
    let (ok, failed) = an.counts();
    out.push_str("<dl class=\"meta\">");
    let mut row = |k: &str, v: String| {
        let _ = write!(out, "<dt>{}</dt><dd>{v}</dd>", esc(k));
    };
    row("plan", esc(&c.plan_source));
    row("profile", esc(&c.profile));
    row(
        "trials",
        format!(
            "{} ok, {}{} failed{}",
            ok,
            if failed > 0 {
                "<span class=\"flag\">"
            } else {
                ""
            },
            failed,
            if failed > 0 { "</span>" } else { "" },
        ),
    );
    if !an.unmatched.is_empty() {
        row(
            "not in the plan",
            format!(
                "<span class=\"flag\">{} trials name an arm, condition or size the campaign does \
                 not list; they are left out</span>",
                an.unmatched.len()
            ),
        );
    }
    row("workload", esc(&c.workload.describe()));
    let grid = if c.workload.is_requests() || matches!(c.workload, Workload::Bulk { .. }) {
        format!(
            "{} conditions × {} {} ({}) × {} arms",
            c.conditions.len(),
            c.sizes.len(),
            if matches!(c.workload, Workload::Bulk { .. }) {
                "connection counts"
            } else {
                "sizes"
            },
            esc(&c
                .sizes
                .iter()
                .map(|&s| super::size_label(c, s))
                .collect::<Vec<_>>()
                .join(", ")),
            c.arms.len()
        )
    } else {
        // the one size is the workload's own (e.g. every unit's bytes), not a dimension
        format!("{} conditions × {} arms", c.conditions.len(), c.arms.len())
    };
    row("grid", grid);
    if let Some(it) = iterations(an) {
        row("iterations", it);
    }
    if let Some(h) = hosts(an) {
        row("hosts", h);
    }
    if let Some(busy) = c.busy_seconds {
        let (n, cells) = (an.busy.trials, super::busy_cells(an));
        row(
            "host load",
            if busy == 0 {
                "the CPUs were never over 90 % busy for a whole second".to_string()
            } else {
                format!(
                    "<span class=\"flag\">the CPUs were over 90 % busy for {busy} s</span>; \
                     {n} trials ran then{}",
                    if cells.is_empty() {
                        String::new()
                    } else {
                        format!(
                            " ({})",
                            cells
                                .iter()
                                .map(|(cell, k)| format!("{cell}: {k}"))
                                .collect::<Vec<_>>()
                                .join(", ")
                        )
                    }
                )
            },
        );
    }
    out.push_str("</dl>\n");

    out.push_str(
        "<table class=\"arms\"><thead><tr><th>arm</th><th>what it is</th>\
         <th class=\"num\">ok</th><th class=\"num\">failed</th><th>caveats</th></tr></thead><tbody>",
    );
    for (i, arm) in c.arms.iter().enumerate() {
        let (ok, failed) = an.arm_cells(i).fold((0, 0), |(o, f), cell| {
            (o + cell.ok.len(), f + cell.failed.len())
        });
        let _ = write!(
            out,
            "<tr><td><span class=\"swatch\" style=\"background:{}\"></span>{}</td><td>{}</td>\
             <td class=\"num\">{ok}</td><td class=\"num\">{failed}</td><td>{}</td></tr>",
            arm_colour(i),
            esc(&arm.name),
            esc(&arm.label),
            arm.caveats
                .iter()
                .map(|s| format!("<span class=\"flag\">{}</span>", esc(s)))
                .collect::<Vec<_>>()
                .join("; ")
        );
    }
    out.push_str("</tbody></table>\n");

    out.push_str(
        "<table class=\"conditions\"><thead><tr><th>condition</th><th>what it is</th>\
         <th class=\"num\">min. RTT</th><th class=\"num\">rate</th></tr></thead><tbody>",
    );
    for cond in &c.conditions {
        let _ = write!(
            out,
            "<tr><td>{}</td><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td></tr>",
            esc(&cond.name),
            esc(&cond.label),
            esc(&units::ms(cond.rtt_ms)),
            cond.rate_bps
                .map(|r| esc(&rate(r)))
                .unwrap_or_else(|| "—".into())
        );
    }
    out.push_str("</tbody></table>\n");

    if !c.provenance.is_empty() {
        out.push_str(
            "<details class=\"provenance\"><summary>Provenance (machine, build, settings)</summary>\
             <table><tbody>",
        );
        for (k, v) in &c.provenance {
            let _ = write!(out, "<tr><th>{}</th><td>{}</td></tr>", esc(k), esc(v));
        }
        out.push_str("</tbody></table></details>\n");
    }
    out.push_str("</header>\n");
    out
}

/// The trials of a cell on each host, fewer than which no host effect is looked for.
const HOST_EFFECT_MIN_TRIALS: usize = 5;

/// The machines that ran the trials, each with its number of trials, when any is known; with
/// several, the cells whose successful trials' TTLBs differ by host beyond their bootstrap 95 %
/// interval (each other host against the one that ran most of the cell), and how many such
/// cells chance alone would give.
/// How a group (condition, size) of an adaptive campaign ended.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct GroupIterations {
    pub condition: String,
    pub size: u64,
    /// Iterations whose every arm has a trial.
    pub complete: usize,
    pub precision: crate::adaptive::Precision,
    /// The target met (with at least the minimum of iterations).
    pub met: bool,
}

/// Each condition and size of an adaptive campaign: its complete iterations and the precision
/// of its compared differences over them, by the rule the campaign stopped with.
pub(crate) fn adaptive_groups(an: &Analysis) -> Vec<GroupIterations> {
    let c = an.campaign;
    let Some(rule) = c.adaptive else {
        return Vec::new();
    };
    let arms = c.arms.len();
    let mut out = Vec::new();
    for cond in &c.conditions {
        for &size in &c.sizes {
            let mut by_it: BTreeMap<u32, Vec<&crate::model::Trial>> = BTreeMap::new();
            for t in c
                .trials
                .iter()
                .filter(|t| t.condition == cond.name && t.size == size)
            {
                by_it.entry(t.iteration).or_default().push(t);
            }
            // complete iterations in order, the rule asked after each from the minimum on, as
            // the campaign asked it: the first that met the target is where it stopped (trials
            // a worker had already started may have run beyond it)
            let complete: Vec<&Vec<&crate::model::Trial>> =
                by_it.values().filter(|ts| ts.len() >= arms).collect();
            let size_text = size.to_string();
            let ask = |k: usize| {
                let mut samples: BTreeMap<String, Vec<f64>> = BTreeMap::new();
                for t in complete[..k].iter().flat_map(|ts| ts.iter()) {
                    if let Ok(m) = &t.outcome {
                        samples.entry(t.arm.clone()).or_default().push(m.ttlb_ms);
                    }
                }
                crate::adaptive::precision(&samples, &c.comparisons, &[&cond.name, &size_text])
            };
            let first = (rule.min as usize).max(1);
            let settled = (first..=complete.len())
                .map(|k| (k, ask(k)))
                .find(|(_, p)| p.within(rule.ci));
            let (k, precision, met) = match settled {
                Some((k, p)) => (k, p, true),
                None => (complete.len(), ask(complete.len()), false),
            };
            out.push(GroupIterations {
                condition: cond.name.clone(),
                size,
                complete: k,
                precision,
                met,
            });
        }
    }
    out
}

/// The header's row on adaptive iterations: the rule, what the groups needed, and a table of
/// each group's iterations and why it stopped (folded).
fn iterations(an: &Analysis) -> Option<String> {
    let c = an.campaign;
    let rule = c.adaptive?;
    let groups = adaptive_groups(an);
    let needed: Vec<f64> = groups.iter().map(|g| g.complete as f64).collect();
    let met = groups.iter().filter(|g| g.met).count();
    let at_max = groups
        .iter()
        .filter(|g| !g.met && g.complete as u32 >= rule.max)
        .count();
    let mut s = format!(
        "adaptive: {} to {} per condition and size, until every compared difference is known \
         to ±{} (95 % interval); they needed {} to {} (median {}): {met} of {} met the target{}",
        rule.min,
        rule.max,
        esc(&units::abs_pct(rule.ci)),
        needed.iter().copied().fold(f64::INFINITY, f64::min),
        needed.iter().copied().fold(0.0, f64::max),
        stats::median(&needed).unwrap_or(f64::NAN),
        groups.len(),
        if at_max > 0 {
            format!(
                ", <span class=\"flag\">{at_max} ran to {} without meeting it</span>",
                rule.max
            )
        } else {
            String::new()
        }
    );
    s.push_str(
        "<details><summary>each condition and size</summary><table class=\"iterations\">\
         <thead><tr><th>condition</th><th>size</th><th class=\"num\">iterations</th>\
         <th>widest difference</th><th class=\"num\">± (95 %)</th><th>why it stopped</th>\
         </tr></thead><tbody>",
    );
    for g in &groups {
        let why = if g.met {
            "the target was met".to_string()
        } else if g.complete as u32 >= rule.max {
            format!(
                "<span class=\"flag\">the most iterations ({})</span>",
                rule.max
            )
        } else {
            "not finished: the campaign stopped first".to_string()
        };
        let _ = write!(
            s,
            "<tr><td>{}</td><td>{}</td><td class=\"num\">{}</td><td>{}</td>\
             <td class=\"num\">{}</td><td>{why}</td></tr>",
            esc(&g.condition),
            esc(&super::size_label(c, g.size)),
            g.complete,
            esc(&g.precision.widest),
            g.precision
                .half_width
                .map_or("-".to_string(), |h| esc(&units::abs_pct(h))),
        );
    }
    s.push_str("</tbody></table></details>");
    Some(s)
}

fn hosts(an: &Analysis) -> Option<String> {
    let c = an.campaign;
    let mut count: BTreeMap<&str, usize> = BTreeMap::new();
    for t in &c.trials {
        if let Some(h) = &t.host {
            *count.entry(h.as_str()).or_default() += 1;
        }
    }
    if count.is_empty() {
        return None;
    }
    let mut text = count
        .iter()
        .map(|(h, n)| format!("{} ({n} trials)", esc(h)))
        .collect::<Vec<_>>()
        .join(", ");
    if count.len() < 2 {
        return Some(text);
    }
    // successful trials' TTLBs per cell and host
    let mut cells: BTreeMap<(&str, &str, u64), BTreeMap<&str, Vec<f64>>> = BTreeMap::new();
    for t in &c.trials {
        if let (Some(h), Some(m)) = (&t.host, metrics(t)) {
            cells
                .entry((t.arm.as_str(), t.condition.as_str(), t.size))
                .or_default()
                .entry(h.as_str())
                .or_default()
                .push(m.ttlb_ms);
        }
    }
    let (mut tested, mut effects) = (0, Vec::new());
    for ((arm, cond, size), by_host) in &cells {
        let mut hosts: Vec<(&&str, &Vec<f64>)> = by_host
            .iter()
            .filter(|(_, v)| v.len() >= HOST_EFFECT_MIN_TRIALS)
            .collect();
        // the reference: the host with most trials (ties: the first by name)
        hosts.sort_by_key(|(_, v)| std::cmp::Reverse(v.len()));
        let Some(((ref_host, reference), others)) = hosts.split_first() else {
            continue;
        };
        for (host, v) in others {
            tested += 1;
            let seed = stats::seed_from(&["host", arm, cond, host, &size.to_string()]);
            let (Some(ci), Some(change)) = (
                stats::bootstrap_relative_change_ci(reference, v, seed),
                stats::relative_change(reference, v),
            ) else {
                continue;
            };
            if !ci.contains(0.0) {
                effects.push(format!(
                    "{} / {} / {}: {} {:+.1} % against {} [{:+.1}, {:+.1}]",
                    esc(arm),
                    esc(cond),
                    esc(&super::size_label(c, *size)),
                    esc(host),
                    change * 100.0,
                    esc(ref_host),
                    ci.lo * 100.0,
                    ci.hi * 100.0
                ));
            }
        }
    }
    if tested > 0 {
        let chance = tested as f64 * 0.05;
        if effects.is_empty() {
            let _ = write!(
                text,
                "; no host effect: in each of the {tested} cells run on several hosts, the \
                 median TTLB on each host lies within the others' 95 % interval"
            );
        } else {
            let _ = write!(
                text,
                "; <span class=\"flag\">host effect in {} of {tested} cells run on several \
                 hosts</span> (about {chance:.1} expected by chance at 95 %): {}",
                effects.len(),
                effects.join("; ")
            );
        }
    }
    Some(text)
}

/// A rate in bits per second, in powers of 1000: "10 Mbit/s".
fn rate(bps: u64) -> String {
    let s = units::size(bps);
    // `size` writes bytes; the same digits with "bit/s" in place of "B".
    match s.strip_suffix('B') {
        Some(prefix) => format!("{}bit/s", prefix.replace('K', "k")),
        None => s,
    }
}
