//! The page's header: what the campaign is, where its plan came from, how many trials succeeded,
//! its arms with their colours and caveats, and the provenance of the machine and build (folded).

use crate::analysis::Analysis;
use crate::chart::arm_colour;
use crate::html::esc;
use crate::model::Workload;
use crate::units;
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

/// A rate in bits per second, in powers of 1000: "10 Mbit/s".
fn rate(bps: u64) -> String {
    let s = units::size(bps);
    // `size` writes bytes; the same digits with "bit/s" in place of "B".
    match s.strip_suffix('B') {
        Some(prefix) => format!("{}bit/s", prefix.replace('K', "k")),
        None => s,
    }
}
