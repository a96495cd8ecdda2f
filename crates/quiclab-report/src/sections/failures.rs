//! Every failed trial: which, where and why. Failed trials are left out of all statistics, so
//! this list is where they stay visible.

use crate::analysis::Analysis;
use crate::chart::arm_colour;
use crate::html::esc;
use crate::model::Trial;
use std::fmt::Write;

pub fn render(an: &Analysis) -> Option<String> {
    let camp = an.campaign;
    // Plan order (condition, size, arm, iteration), then trials outside the plan as stored.
    let mut rows: Vec<(Option<usize>, &Trial)> = Vec::new();
    for ci in 0..camp.conditions.len() {
        for s in 0..camp.sizes.len() {
            for a in 0..camp.arms.len() {
                rows.extend(an.cell(ci, s, a).failed.iter().map(|t| (Some(a), *t)));
            }
        }
    }
    rows.extend(
        an.unmatched
            .iter()
            .filter(|t| t.outcome.is_err())
            .map(|t| (None, *t)),
    );
    if rows.is_empty() {
        return None;
    }
    let mut out = format!(
        "<p>{} failed trial{}, left out of every statistic above.</p>\n\
         <table class=\"failures\"><thead><tr><th>trial</th><th>arm</th><th>condition</th>\
         <th class=\"num\">size</th><th class=\"num\">iteration</th><th class=\"num\">seed</th>\
         <th>reason</th></tr></thead><tbody>",
        rows.len(),
        if rows.len() == 1 { "" } else { "s" }
    );
    for (arm, t) in rows {
        let swatch = arm
            .map(|a| {
                format!(
                    "<span class=\"swatch\" style=\"background:{}\"></span>",
                    arm_colour(a)
                )
            })
            .unwrap_or_default();
        let reason = t.outcome.as_ref().err().map(String::as_str).unwrap_or("");
        let _ = write!(
            out,
            "<tr><td><code>{}</code></td><td>{swatch}{}</td><td>{}</td><td class=\"num\">{}</td>\
             <td class=\"num\">{}</td><td class=\"num\">{}</td><td>{}</td></tr>",
            esc(&t.id),
            esc(&t.arm),
            esc(&t.condition),
            esc(&super::size_label(an.campaign, t.size)),
            t.iteration,
            t.seed,
            esc(reason)
        );
    }
    out.push_str("</tbody></table>\n");
    Some(out)
}
