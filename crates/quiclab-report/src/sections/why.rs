//! Why: where the time went. For each compared pair and each cell whose TTLB differs
//! significantly, the parts of the trials' time budgets that account for the median paired
//! difference ([`crate::explain`]); then, cell by cell, the budget of each arm's median trial as
//! a stacked bar, the floor first.

use crate::analysis::{Analysis, Change};
use crate::chart;
use crate::explain::{self, ACCOUNTS, Explanation, Part};
use crate::figures::{Figure, csv_if, slug};
use crate::html::esc;
use crate::model::Trial;
use crate::units;
use quiclab_model::budget::Budget;
use quiclab_model::csv::Table;
use std::fmt::Write;

/// Colours of the parts, in [`Part::ALL`]'s order.
const COLOURS: [&str; 12] = [
    "#b0b0b0", "#d62728", "#1f77b4", "#ff7f0e", "#9467bd", "#393b79", "#ad494a", "#8c564b",
    "#e377c2", "#bcbd22", "#2ca02c", "#17becf",
];

fn colour(p: Part) -> &'static str {
    COLOURS[Part::ALL.iter().position(|&x| x == p).unwrap_or(0)]
}

pub fn render(an: &Analysis) -> Option<String> {
    let c = an.campaign;
    let any = c
        .trials
        .iter()
        .any(|t| t.outcome.as_ref().is_ok_and(|m| m.detail.budget.is_some()));
    if !any {
        return None;
    }
    let mut out = format!(
        "<p class=\"caption\">Each trial's time to last byte split into a floor (the handshake's \
         round trips by its protocol's design, one round trip for the request, the body at the \
         bottleneck rate) and named components measured from the link's own packet log and the \
         sender's record: handshake round trips beyond the design, ramp-up (the window below \
         the path's BDP before the first congestion signal), the window after a loss, waits \
         for loss recovery, flow control or the sender's own limits, overhead (bytes beyond the \
         body) and the endpoints' own time (docs/explain.md defines each). For a significant \
         difference, the parts named are the fewest, largest first, whose medians of the paired \
         differences (iteration by iteration: the arms of an iteration share the link's seed) \
         reach {} of the median difference, each with its 95 % interval from the order \
         statistics of the paired differences (the sign test's: with 6 to 8 pairs, their \
         range).</p>\n",
        units::abs_pct(ACCOUNTS)
    );
    out.push_str(&planted(an));
    let mut said = 0;
    for cmp in &an.comparisons {
        let (a, b) = (&c.arms[cmp.a].name, &c.arms[cmp.b].name);
        let mut items = String::new();
        for (ci, cond) in c.conditions.iter().enumerate() {
            for (si, &size) in c.sizes.iter().enumerate() {
                let Some(ch) = cmp.cell(ci, si).change.as_ref() else {
                    continue;
                };
                if !ch.significant {
                    continue;
                }
                let (ca, cb) = (an.cell(ci, si, cmp.a), an.cell(ci, si, cmp.b));
                let e = explain::explain(&ca.ok, &cb.ok);
                let _ = write!(
                    items,
                    "<li>{}</li>",
                    sentence(a, b, &units::size(size), &cond.name, ch, e.as_ref())
                );
                said += 1;
            }
        }
        if !items.is_empty() {
            let _ = write!(
                out,
                "<h3>{} vs {}</h3>\n<ul class=\"why\">{items}</ul>\n",
                esc(b),
                esc(a)
            );
        }
    }
    if said == 0 {
        out.push_str(
            "<p>No compared pair differs significantly in any cell: there is no difference to \
             explain.</p>\n",
        );
    }
    out.push_str(
        "<details><summary>The budgets of each arm's median trial, cell by cell</summary>\n",
    );
    out.push_str(&legend());
    for (title, f) in budget_figures(an, false) {
        let _ = write!(out, "<h4>{}</h4>{}", esc(&title), f.html());
    }
    out.push_str("</details>\n");
    Some(out)
}

/// Every cell's budgets chart (the cells whose median trials have budgets), with the cell's
/// title, in the page's order; each with its parts as CSV when `with_csv`.
fn budget_figures(an: &Analysis, with_csv: bool) -> Vec<(String, Figure)> {
    let c = an.campaign;
    let mut out = Vec::new();
    for (ci, cond) in c.conditions.iter().enumerate() {
        for (si, &size) in c.sizes.iter().enumerate() {
            let bars: Vec<(&str, usize, &Trial, &Budget)> = (0..c.arms.len())
                .filter_map(|arm| {
                    let t = an.cell(ci, si, arm).median_trial?;
                    let b = t.outcome.as_ref().ok()?.detail.budget.as_ref()?;
                    Some((c.arms[arm].name.as_str(), arm, t, b))
                })
                .collect();
            if bars.is_empty() {
                continue;
            }
            let title = format!("{} / {}", cond.name, units::size(size));
            let drawn: Vec<(&str, usize, &Budget)> =
                bars.iter().map(|&(n, a, _, b)| (n, a, b)).collect();
            let figure = Figure {
                name: format!(
                    "budgets-{}-{}",
                    slug(&cond.name),
                    slug(&super::size_label(c, size))
                ),
                title: format!("Time budgets, {title}"),
                svg: stacked(&title, &drawn),
                caption: "Each arm's median trial: its TTLB split into the floor and the \
                          components it was charged to (colours as in the legend above), the \
                          TTLB written after the bar."
                    .into(),
                csv: csv_if(with_csv, || {
                    let mut t = Table::new(&["arm", "trial_id", "ttlb_ms", "part", "ms"]);
                    for (name, _, trial, b) in &bars {
                        for p in Part::ALL {
                            t.row(&[
                                name.to_string(),
                                trial.id.clone(),
                                b.ttlb_ms.to_string(),
                                p.title().to_string(),
                                p.ms(b).to_string(),
                            ]);
                        }
                    }
                    t
                }),
            };
            out.push((title, figure));
        }
    }
    out
}

/// Every cell's budgets chart, in the page's order.
pub(crate) fn figures(an: &Analysis, with_csv: bool) -> Vec<Figure> {
    budget_figures(an, with_csv)
        .into_iter()
        .map(|(_, f)| f)
        .collect()
}

/// One significant cell's sentence: how much b differs from a, and why.
fn sentence(
    a: &str,
    b: &str,
    size: &str,
    cond: &str,
    ch: &Change,
    e: Option<&Explanation>,
) -> String {
    let Some(e) = e else {
        return format!(
            "At {}, {}: {} against {}; fewer than {} iterations have budgets in both arms, \
             so no cause is named.",
            esc(size),
            esc(cond),
            esc(&units::signed_pct(ch.rel)),
            esc(a),
            explain::MIN_PAIRS
        );
    };
    let longer = if e.diff_ms >= 0.0 { "longer" } else { "less" };
    let parts: Vec<String> = e
        .named
        .iter()
        .map(|p| {
            let ci =
                p.ci.map(|ci| format!(" (CI {})", units::ms_range(ci.lo, ci.hi)))
                    .unwrap_or_default();
            let mut s = format!(
                "{} ms{ci} {}",
                units::signed(p.median_ms, 1),
                p.part.title()
            );
            if p.part == Part::Named(quiclab_model::budget::Component::Overhead)
                && e.overhead_bytes.abs() >= 1.0
            {
                let _ = write!(
                    s,
                    ", {} bytes beyond the body",
                    units::signed(e.overhead_bytes, 0)
                );
            }
            s
        })
        .collect();
    let why = if e.accounts {
        parts.join("; ")
    } else {
        format!(
            "no part reaches {} of it; the largest: {}",
            units::abs_pct(ACCOUNTS),
            parts.join("; ")
        )
    };
    format!(
        "<b>{}</b> took {} ms ({}) {longer} than <b>{}</b> at {}, {}: {} (median of {} \
         paired iterations).",
        esc(b),
        units::number(e.diff_ms.abs(), 1),
        esc(&units::abs_pct(e.diff_ms / ch.median_a_ms)),
        esc(a),
        esc(size),
        esc(cond),
        esc(&why),
        e.pairs
    )
}

fn legend() -> String {
    let mut out = String::from("<p class=\"legend\">");
    for p in Part::ALL {
        let _ = write!(
            out,
            "<span class=\"swatch\" style=\"background:{}\"></span>{} ",
            colour(p),
            esc(p.title())
        );
    }
    out.push_str("</p>\n");
    out
}

/// Room left of the bars for the arms' names: a swatch, the longest name at the charts' 11 px,
/// and a gap; at least `min` px.
fn label_room<'a>(names: impl Iterator<Item = &'a str>, min: f64) -> f64 {
    names
        .map(|n| 14.0 + chart::text_width(n, 11.0) + 8.0)
        .fold(min, f64::max)
}

/// Horizontal stacked bars, one per arm, on one scale.
fn stacked(title: &str, bars: &[(&str, usize, &Budget)]) -> String {
    const ROW: f64 = 22.0;
    let max = bars
        .iter()
        .map(|(_, _, b)| b.ttlb_ms.max(b.accounted_ms()))
        .fold(1.0, f64::max);
    let label = label_room(bars.iter().map(|b| b.0), 150.0);
    // 340 px of bars and 70 for the TTLB written after them
    let width = label + 410.0;
    let scale = 340.0 / max;
    let height = ROW * bars.len() as f64 + 8.0;
    let mut out = String::new();
    chart::svg_open(&mut out, width, height, &format!("time budgets: {title}"));
    for (row, (name, arm, b)) in bars.iter().enumerate() {
        let y = 4.0 + row as f64 * ROW;
        let _ = write!(
            out,
            r#"<rect x="2" y="{}" width="8" height="12" fill="{}"/><text x="14" y="{}">{}</text>"#,
            chart::c(y + 3.0),
            chart::arm_colour(*arm),
            chart::c(y + 14.0),
            esc(name)
        );
        let mut x = label;
        for p in Part::ALL {
            let ms = p.ms(b);
            if ms <= 0.0 {
                continue;
            }
            let w = ms * scale;
            // a part narrower than the coordinates' tenth of a pixel would be written as
            // width 0, which SVG renderers reject (resvg skips it with a warning)
            if w < 0.05 {
                x += w;
                continue;
            }
            let _ = write!(
                out,
                r#"<rect x="{}" y="{}" width="{}" height="16" fill="{}"><title>{}: {} ms</title></rect>"#,
                chart::c(x),
                chart::c(y + 1.0),
                chart::c(w),
                colour(p),
                esc(p.title()),
                units::number(ms, 1)
            );
            x += w;
        }
        let _ = write!(
            out,
            r#"<text x="{}" y="{}">{} ms</text>"#,
            chart::c(x + 4.0),
            chart::c(y + 14.0),
            units::number(b.ttlb_ms, 0)
        );
    }
    chart::svg_close(&mut out);
    out
}

/// When each arm's budget charged its time: one row per arm (its median trial), each charge's
/// spans shaded in its component's colour on the time axis of the trial (ms from the request's
/// start, as the ACKed-bytes chart beside it), up to `x_max` ms. `None` when no arm's median
/// trial has a budget with spans.
pub(crate) fn spans_chart(
    title: &str,
    rows: &[(&str, usize, &Budget)],
    x_max: f64,
) -> Option<String> {
    // the time axis' length, and room right of it for half of its last label ("1,500")
    const PLOT: f64 = 280.0;
    const ROW: f64 = 18.0;
    if rows
        .iter()
        .all(|(_, _, b)| b.charges.iter().all(|c| c.spans.is_empty()))
    {
        return None;
    }
    let x_max = rows
        .iter()
        .map(|(_, _, b)| b.ttlb_ms)
        .fold(x_max, f64::max)
        .max(1.0);
    let ticks = chart::Ticks::new(0.0, x_max, 5);
    let label = label_room(rows.iter().map(|r| r.0), 110.0);
    let width = label + PLOT + 22.0;
    let scale = PLOT / ticks.hi;
    let axis = 6.0 + ROW * rows.len() as f64;
    let height = axis + 30.0;
    let mut out = String::new();
    chart::svg_open(
        &mut out,
        width,
        height,
        &format!("when the time went: {title}"),
    );
    for (row, (name, arm, b)) in rows.iter().enumerate() {
        let y = 4.0 + row as f64 * ROW;
        let _ = write!(
            out,
            r##"<rect x="2" y="{}" width="8" height="10" fill="{}"/><text x="14" y="{}">{}</text><rect x="{}" y="{}" width="{}" height="12" fill="none" stroke="#ccc"/>"##,
            chart::c(y + 2.0),
            chart::arm_colour(*arm),
            chart::c(y + 11.0),
            esc(name),
            chart::c(label),
            chart::c(y),
            chart::c(b.ttlb_ms * scale)
        );
        for ch in &b.charges {
            let p = Part::Named(ch.component);
            for s in &ch.spans {
                let w = ((s[1] - s[0]) * scale).max(0.8);
                let _ = write!(
                    out,
                    r#"<rect x="{}" y="{}" width="{}" height="12" fill="{}"><title>{}: {} to {} ms</title></rect>"#,
                    chart::c(label + s[0] * scale),
                    chart::c(y),
                    chart::c(w),
                    colour(p),
                    esc(p.title()),
                    units::number(s[0], 1),
                    units::number(s[1], 1)
                );
            }
        }
    }
    for v in &ticks.values {
        let x = label + v * scale;
        let _ = write!(
            out,
            r##"<line x1="{x}" y1="{axis}" x2="{x}" y2="{}" stroke="#888"/><text x="{x}" y="{}" text-anchor="middle">{}</text>"##,
            chart::c(axis + 4.0),
            chart::c(axis + 15.0),
            units::number(*v, 0),
            x = chart::c(x),
            axis = chart::c(axis),
        );
    }
    let _ = write!(
        out,
        r#"<text x="{}" y="{}" text-anchor="middle">time since the client's first packet (ms)</text>"#,
        chart::c(label + PLOT / 2.0),
        chart::c(axis + 27.0)
    );
    chart::svg_close(&mut out);
    Some(out)
}

/// The planted causes checked, cell by cell (nothing when the plan plants none).
fn planted(an: &Analysis) -> String {
    let c = an.campaign;
    if c.planted.is_empty() {
        return String::new();
    }
    let checks = explain::checks(an);
    let passed = checks.iter().filter(|k| k.pass).count();
    let mut out = format!(
        "<h3>Planted causes: is the explanation right?</h3>\n<p>The plan planted causes on \
         purpose; each is checked in every cell against its control in the same iterations \
         (the same link). A cause passes where the paired TTLB difference is significant, the \
         planted components take at least {} of it beyond the floor's difference and no other \
         part more than {}; where nothing was planted, where the difference's interval \
         includes 0 or its median is within {} of the control's median TTLB. \
         <b>{passed} of {} checks pass.</b></p>\n<table class=\"planted\"><thead><tr>\
         <th>planted</th><th>cell</th><th class=\"num\">pairs</th><th class=\"num\">TTLB \
         difference (95 % CI)</th><th class=\"num\">planted share</th><th>largest other \
         part</th><th>verdict</th></tr></thead><tbody>\n",
        units::abs_pct(explain::PLANTED_SHARE),
        units::abs_pct(explain::OTHER_SHARE),
        units::abs_pct(explain::NOTHING_MARGIN),
        checks.len()
    );
    for k in &checks {
        let p = &c.planted[k.planted];
        let causes = if p.causes.is_empty() {
            "nothing".to_string()
        } else {
            p.causes
                .iter()
                .map(|x| x.title())
                .collect::<Vec<_>>()
                .join(" + ")
        };
        // what was planted against what, and in which cell
        let (planted, control, other) = if p.condition.is_some() {
            (
                &c.conditions[k.conditions.1].name,
                &c.conditions[k.conditions.0].name,
                &c.arms[k.arms.1].name,
            )
        } else {
            (
                &c.arms[k.arms.1].name,
                &c.arms[k.arms.0].name,
                &c.conditions[k.conditions.1].name,
            )
        };
        let what = format!("{planted} against {control}: {causes}");
        let cell = format!("{other} / {}", units::size(c.sizes[k.size]));
        let ci = k
            .diff_ci
            .map(|ci| format!(" ({})", units::ms_range(ci.lo, ci.hi)))
            .unwrap_or_default();
        let share = if p.causes.is_empty() {
            "\u{2013}".to_string()
        } else {
            units::abs_pct(k.share)
        };
        let other = k
            .other
            .map(|(part, s)| format!("{} {}", part.title(), units::signed_pct(s)))
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "<tr><td>{}</td><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{} ms{}</td>\
             <td class=\"num\">{}</td><td>{}</td><td>{}</td></tr>",
            esc(&what),
            esc(&cell),
            k.pairs,
            units::signed(k.diff_ms, 1),
            esc(&ci),
            esc(&share),
            esc(&other),
            if k.pass {
                "named"
            } else {
                "<span class=\"flag\">not named</span>"
            }
        );
    }
    out.push_str("</tbody></table>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use quiclab_model::budget::{Charge, Component, Floor};

    #[test]
    fn a_part_too_narrow_to_draw_leaves_no_rectangle_of_width_zero() {
        // 1000 ms on 340 px: 0.1 ms is 0.034 px, written as width 0 if it were drawn; 50 ms
        // is 17 px
        let budget = Budget {
            ttlb_ms: 1000.0,
            floor: Floor {
                handshake_ms: 20.0,
                request_ms: 20.0,
                serialisation_ms: 909.9,
            },
            charges: vec![
                Charge {
                    component: Component::Handshake,
                    ms: 0.1,
                    spans: Vec::new(),
                },
                Charge {
                    component: Component::RampUp,
                    ms: 50.0,
                    spans: Vec::new(),
                },
            ],
            residual_ms: 0.0,
            overhead_bytes: 0,
            drops_to_client: 0,
            congestion_events: None,
            reads: Vec::new(),
            unread: Vec::new(),
        };
        let svg = stacked("t", &[("arm", 0, &budget)]);
        let widths: Vec<&str> = svg
            .split("<rect ")
            .skip(1)
            .filter_map(|r| r.split("width=\"").nth(1)?.split('"').next())
            .filter(|w| !w.ends_with('%'))
            .collect();
        assert!(!widths.is_empty(), "{svg}");
        assert!(
            widths
                .iter()
                .all(|w| w.parse::<f64>().is_ok_and(|w| w > 0.0)),
            "{widths:?}: {svg}"
        );
        // the drawn parts still line up: the ramp-up's 50 ms (17 px) right after the floor's
        // 949.9 ms (323 px from the labels' 150)
        assert!(
            svg.contains(r##"<rect x="473" y="5" width="17" height="16" fill="#1f77b4"><title>ramp-up: 50.0 ms</title>"##),
            "{svg}"
        );
    }
}
