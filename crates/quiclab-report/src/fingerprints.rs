//! Fingerprint cards side by side (`quiclab fingerprint --report FILE`): one self-contained HTML
//! page, a table per role with an item per row and a stack per column. A cell whose answer
//! differs from the row's median by more than the item's tolerance is highlighted (a choice
//! that sets the stack apart); a cell whose runs disagreed is marked, its runs in its title.

use std::fmt::Write;

use quiclab_model::fingerprint::{Card, Item, Role};

use crate::html::esc;
use crate::sections;

fn number(v: f64) -> String {
    if v.fract() == 0.0 {
        format!("{v:.0}")
    } else if v.abs() < 10.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.1}")
    }
}

/// The middle of the answers given (the lower of two middles).
fn median(mut v: Vec<f64>) -> Option<f64> {
    v.sort_by(f64::total_cmp);
    v.get(v.len().saturating_sub(1) / 2).copied()
}

/// Whether `item`'s answer differs from `reference` beyond its tolerance.
fn differs(item: &Item, reference: f64) -> bool {
    item.value()
        .is_some_and(|v| !item.tolerance.holds(v.min(reference), v.max(reference)))
}

fn table(out: &mut String, cards: &[&Card]) {
    // the rows: every item key in the order the cards give them
    let mut keys: Vec<(&str, &str, &str)> = Vec::new();
    for c in cards {
        for i in &c.items {
            if !keys.iter().any(|k| k.0 == i.key) {
                keys.push((&i.key, &i.label, &i.unit));
            }
        }
    }
    out.push_str("<table class=\"fp\"><thead><tr><th>item</th>");
    for c in cards {
        let knobs: Vec<String> = c.knobs.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let _ = write!(
            out,
            "<th title=\"{}\">{}{}</th>",
            esc(&c.implementation),
            esc(&c.stack),
            if knobs.is_empty() {
                String::new()
            } else {
                format!("<br><small>{}</small>", esc(&knobs.join(" ")))
            }
        );
    }
    out.push_str("</tr></thead><tbody>");
    for (key, label, unit) in keys {
        let items: Vec<Option<&Item>> = cards
            .iter()
            .map(|c| c.items.iter().find(|i| i.key == key))
            .collect();
        let reference = median(items.iter().flatten().filter_map(|i| i.value()).collect());
        let _ = write!(
            out,
            "<tr><th>{} <small>({})</small></th>",
            esc(label),
            esc(unit)
        );
        for item in items {
            let Some(item) = item else {
                out.push_str("<td class=\"none\">–</td>");
                continue;
            };
            let runs: Vec<String> = (0..item.runs.len())
                .map(|k| item.shown(k, number))
                .collect();
            let mut class = Vec::new();
            if reference.is_some_and(|r| differs(item, r)) {
                class.push("differs");
            }
            if !item.reproducible {
                class.push("unsure");
            }
            let title = format!(
                "runs: {}; tolerance {}{}",
                runs.join(", "),
                item.tolerance_text,
                item.why
                    .as_deref()
                    .map(|w| format!("; {w}"))
                    .unwrap_or_default()
            );
            let _ = write!(
                out,
                "<td class=\"{}\" title=\"{}\">{}{}</td>",
                class.join(" "),
                esc(&title),
                esc(&item.shown_value(number)),
                if item.reproducible { "" } else { " †" }
            );
        }
        out.push_str("</tr>");
    }
    out.push_str("</tbody></table>\n");
}

/// The page of `cards`.
pub fn render(cards: &[Card]) -> String {
    let mut out = String::with_capacity(1 << 16);
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>quiclab fingerprints</title>\n<style>{}\n\
         table.fp td {{ text-align: right; font-variant-numeric: tabular-nums; }}\n\
         table.fp td.differs {{ background: #fde9c8; font-weight: 600; }}\n\
         table.fp td.unsure {{ color: #8a1c1c; }}\n\
         table.fp th small {{ font-weight: normal; color: #555; }}\n\
         </style>\n</head>\n<body>\n<main>\n<h1>Fingerprints</h1>\n",
        sections::CSS
    );
    out.push_str(
        "<p>Each implementation's choices, read from the link's per-packet log of probes \
         quiclab planted (docs/fingerprint.md). Highlighted: an answer that differs from the \
         row's median by more than the item's tolerance. †: the runs disagreed beyond it (a \
         cell's title gives each run's answer and why a run could not tell).</p>\n",
    );
    for role in [Role::Server, Role::Client] {
        let of_role: Vec<&Card> = cards.iter().filter(|c| c.role == role).collect();
        let Some(first) = of_role.first() else {
            continue;
        };
        let peers: Vec<&str> = {
            let mut p: Vec<&str> = of_role.iter().map(|c| c.peer.as_str()).collect();
            p.dedup();
            p
        };
        let _ = write!(
            out,
            "<h2>As {}</h2>\n<p>{}; peer {}.</p>\n",
            role.name(),
            esc(&first.path),
            esc(&peers.join(", "))
        );
        table(&mut out, &of_role);
    }
    out.push_str("</main>\n</body>\n</html>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use quiclab_model::fingerprint::Tolerance;

    fn card(stack: &str, iw: f64, pto: Vec<Option<f64>>) -> Card {
        Card {
            stack: stack.into(),
            implementation: format!("{stack} 1.0"),
            role: Role::Server,
            peer: "ref".into(),
            http: "HTTP/3".into(),
            knobs: Vec::new(),
            path: "50 ms each way".into(),
            items: vec![
                Item::new(
                    "initial_window",
                    "initial window",
                    "bytes",
                    Tolerance::Bytes(1452.0),
                    vec![Some(iw), Some(iw)],
                    None,
                ),
                Item::new(
                    "first_pto",
                    "first timer",
                    "ms",
                    Tolerance::Share(0.1),
                    pto,
                    Some("planted event missed".into()),
                ),
            ],
            runs: Vec::new(),
        }
    }

    #[test]
    fn a_stack_apart_is_highlighted_and_disagreeing_runs_are_marked() {
        let cards = vec![
            card("a<b>", 12_000.0, vec![Some(999.0), Some(1000.0)]),
            card("c", 12_500.0, vec![Some(999.0), Some(1001.0)]),
            card("d", 41_800.0, vec![Some(200.0), None]),
        ];
        let html = render(&cards);
        assert!(html.contains("a&lt;b&gt;"), "names are escaped");
        assert!(!html.contains("<b>"));
        // one differing cell per row: d's window and d's timer
        assert_eq!(html.matches("class=\"differs\"").count(), 1, "{html}");
        assert_eq!(
            html.matches("class=\"differs unsure\"").count(),
            1,
            "{html}"
        );
        assert!(html.contains(">41800</td>"));
        assert!(html.contains("runs: 200, –; tolerance ±10 %; planted event missed"));
        assert!(html.contains("<h2>As server</h2>") && !html.contains("<h2>As client</h2>"));
    }
}
