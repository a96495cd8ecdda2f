//! Client consistency (S1's clients-against-servers figure): for each server stack that served
//! two or more client stacks, a table of its arms (rows) by condition and size (columns), each
//! cell the arm's median TTLB relative to the best arm of that server in the column, with the
//! median handshake in round trips below it (a HelloRetryRequest shows as one more).
//!
//! Shown only when the campaign's arms name their stacks and some server met several clients.

use std::fmt::Write;

use crate::analysis::Analysis;
use crate::chart::diverging;
use crate::html::esc;
use crate::stats;
use crate::units;

/// Relative slowdown at which a cell's colour saturates.
const SATURATE: f64 = 0.5;

pub fn render(an: &Analysis) -> Option<String> {
    let c = an.campaign;
    if !c.workload.is_requests() {
        return None;
    }
    let mut servers: Vec<&str> = Vec::new();
    for a in &c.arms {
        if !a.server_stack.is_empty() && !servers.contains(&a.server_stack.as_str()) {
            servers.push(&a.server_stack);
        }
    }
    let mut out = String::new();
    for server in servers {
        let arms: Vec<usize> = (0..c.arms.len())
            .filter(|&i| c.arms[i].server_stack == server)
            .collect();
        let mut clients: Vec<&str> = arms
            .iter()
            .map(|&i| c.arms[i].client_stack.as_str())
            .collect();
        clients.sort_unstable();
        clients.dedup();
        if clients.len() < 2 {
            continue;
        }
        table(&mut out, an, server, &arms);
    }
    if out.is_empty() {
        return None;
    }
    Some(format!(
        "<p class=\"caption\">Per server stack, every arm it served (client stack and knobs), \
         per condition and object size: the arm's median TTLB relative to the best arm of that \
         server in the column (0 % is the best; red is slower, saturating at +{} %), and below \
         it the median handshake in round trips of the condition's minimum RTT (a \
         HelloRetryRequest costs one more). A client that is fast with one server and slow with \
         another shows that results from one implementation pair do not generalise.</p>\n{out}",
        SATURATE * 100.0
    ))
}

fn table(out: &mut String, an: &Analysis, server: &str, arms: &[usize]) {
    let c = an.campaign;
    let _ = write!(
        out,
        "<h3>Served by {}</h3>\n<table><thead><tr><th>arm (client)</th>",
        esc(server)
    );
    for cond in &c.conditions {
        for &size in &c.sizes {
            let _ = write!(
                out,
                "<th class=\"num\">{}<br>{}</th>",
                esc(&cond.name),
                esc(&super::size_label(c, size))
            );
        }
    }
    out.push_str("</tr></thead><tbody>\n");
    // the best median of each column among this server's arms
    let columns: Vec<(usize, usize)> = (0..c.conditions.len())
        .flat_map(|ci| (0..c.sizes.len()).map(move |s| (ci, s)))
        .collect();
    let median =
        |ci: usize, s: usize, arm: usize| an.cell(ci, s, arm).summary.as_ref().map(|m| m.median_ms);
    let best: Vec<Option<f64>> = columns
        .iter()
        .map(|&(ci, s)| {
            arms.iter()
                .filter_map(|&a| median(ci, s, a))
                .min_by(f64::total_cmp)
        })
        .collect();
    for &arm in arms {
        let a = &c.arms[arm];
        let _ = write!(
            out,
            "<tr><td>{} <span class=\"muted\">({})</span></td>",
            esc(&a.name),
            esc(&a.client_stack)
        );
        for (k, &(ci, s)) in columns.iter().enumerate() {
            let (Some(m), Some(b)) = (median(ci, s, arm), best[k]) else {
                out.push_str("<td class=\"num muted\">n/a</td>");
                continue;
            };
            let rel = (m - b) / b;
            let (fill, white) = diverging(rel, SATURATE);
            let hs: Vec<f64> = an
                .cell(ci, s, arm)
                .ok
                .iter()
                .filter_map(|t| t.outcome.as_ref().ok().and_then(|m| m.handshake_rtts))
                .collect();
            let hs = stats::median(&hs)
                .map(|r| format!("<br><small>handshake {}</small>", esc(&units::rtts(r))))
                .unwrap_or_default();
            let _ = write!(
                out,
                "<td class=\"num\" style=\"background:{fill}{}\" title=\"median {}\">{}{hs}</td>",
                if white { ";color:#fff" } else { "" },
                esc(&units::ms(m)),
                esc(&units::signed_pct(rel)),
            );
        }
        out.push_str("</tr>\n");
    }
    out.push_str("</tbody></table>\n");
}
