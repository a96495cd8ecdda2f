//! Figure-4-style heatmaps, one per comparison (a, b): rows are conditions in plan order,
//! columns are sizes, a cell is the change of b's median TTLB relative to a's. Blue means b
//! finished sooner, red later; a cell whose 95 % interval includes 0 is grey whatever its value,
//! so colour always means "significant". Each cell carries a tooltip with the numbers behind it
//! and links to the cell's details.

use crate::analysis::{Analysis, ChangeCell, ComparisonAnalysis, MIN_TRIALS};
use crate::chart::{self, MUTED_TEXT, NEUTRAL_FILL, c, diverging, svg_close, svg_open, text_width};
use crate::html::esc;
use crate::units;
use std::fmt::Write;

/// |change| at which the colour reaches full intensity.
pub const SATURATE: f64 = 0.5;

/// Smallest |change| used for the colour of a significant cell.
const MIN_TINT: f64 = 0.06;

const CELL_W: f64 = 132.0;
const CELL_H: f64 = 46.0;
const HEAD_H: f64 = 26.0;

pub fn render(an: &Analysis) -> Option<String> {
    let c = an.campaign;
    // TTLBs of GETs: other workloads have their own sections
    if !c.workload.is_requests()
        || c.comparisons.is_empty()
        || c.conditions.is_empty()
        || c.sizes.is_empty()
    {
        return None;
    }
    let mut out = super::ttlb_note(c);
    let _ = write!(
        out,
        "<p class=\"caption\">Each map shows the change of the median TTLB of one arm (b) \
         relative to another (a), (median<sub>b</sub> − median<sub>a</sub>) / \
         median<sub>a</sub>, per condition (rows) and object size (columns). Blue: b finished \
         sooner; red: later; the colour saturates at ±{sat} %. Grey: not told apart. Arms of \
         one iteration share the link's seed, so a cell's trials are pairs, and a cell is \
         coloured only when it has at least {min} pairs, the Wilcoxon signed-rank test of the \
         paired differences gives p at most {fdr} after the Benjamini-Hochberg adjustment \
         across all {cells} compared cells of this report (a false-discovery rate of {fdr_pct} \
         %: of {flagged} coloured cells, about {chance:.1} may differ by chance alone), and the \
         95 % bootstrap interval of the change over the pairs (second line of a cell) excludes \
         0. Hover over a cell for the trial and pair counts, both medians, the difference in \
         ms and in round trips, and the p-values; click it for the cell's details.</p>\n\
         <div class=\"heatmaps\">\n",
        sat = SATURATE * 100.0,
        min = crate::stats::paired::MIN_PAIRS,
        fdr = crate::stats::paired::FDR,
        fdr_pct = crate::stats::paired::FDR * 100.0,
        cells = an.tested_cells(),
        flagged = an.significant_cells(),
        chance = an.significant_cells() as f64 * crate::stats::paired::FDR,
    );
    for cmp in &an.comparisons {
        let (a, b) = (&c.arms[cmp.a].name, &c.arms[cmp.b].name);
        let _ = write!(
            out,
            "<figure class=\"heatmap\" id=\"heatmap-{}\">\n<h3><span class=\"swatch\" \
             style=\"background:{}\"></span>{} vs <span class=\"swatch\" \
             style=\"background:{}\"></span>{}</h3>\n{}\n<figcaption>b = {}, a = {}: blue \
             where {} was faster.</figcaption>\n</figure>\n",
            cmp.index,
            chart::arm_colour(cmp.b),
            esc(b),
            chart::arm_colour(cmp.a),
            esc(a),
            svg(an, cmp),
            esc(b),
            esc(a),
            esc(b),
        );
    }
    out.push_str("</div>\n");
    for u in &an.unresolved_comparisons {
        let _ = writeln!(
            out,
            "<p class=\"flag\">Comparison {} names an arm that is not in the campaign.</p>",
            esc(u)
        );
    }
    Some(out)
}

/// The tooltip of one cell: counts, medians, difference and test, one fact per line.
pub fn tooltip(an: &Analysis, cmp: &ComparisonAnalysis, cell: &ChangeCell) -> String {
    let camp = an.campaign;
    let cond = &camp.conditions[cell.condition];
    let (a, b) = (&camp.arms[cmp.a].name, &camp.arms[cmp.b].name);
    let mut t = format!(
        "{} · {}\n",
        cond.name,
        super::size_label(camp, camp.sizes[cell.size])
    );
    let median = |arm: usize| {
        an.cell(cell.condition, cell.size, arm)
            .summary
            .as_ref()
            .map(|s| units::ms(s.median_ms))
            .unwrap_or_else(|| "—".into())
    };
    let _ = writeln!(t, "{a}: n = {}, median {}", cell.n_a, median(cmp.a));
    let _ = writeln!(t, "{b}: n = {}, median {}", cell.n_b, median(cmp.b));
    match &cell.change {
        Some(ch) => {
            let _ = write!(t, "difference {}", units::signed_ms(ch.diff_ms));
            if let Some(r) = ch.diff_rtts {
                let _ = write!(t, " ({})", units::signed_rtts(r));
            }
            let _ = write!(t, "\nchange {}", units::signed_pct(ch.rel));
            if let Some(ci) = ch.ci {
                let _ = write!(t, " (95 % CI {} %)", units::signed_pct_range(ci.lo, ci.hi));
            }
            let _ = write!(
                t,
                "\n{}",
                if ch.paired {
                    format!("{} pairs", ch.pairs)
                } else {
                    "unpaired (different seeds)".into()
                }
            );
            if let Some(p) = ch.p {
                let test = if ch.paired {
                    "signed-rank"
                } else {
                    "Mann-Whitney"
                };
                let _ = write!(t, ", {test} {}", units::p_value(p));
                if let Some(adj) = ch.p_adjusted {
                    let _ = write!(t, " (adjusted {})", units::p_value(adj));
                }
            }
        }
        None => {
            let _ = write!(
                t,
                "n/a: fewer than {MIN_TRIALS} successful trials in an arm"
            );
        }
    }
    t
}

/// The text of a cell: its change and the interval line below it.
pub fn cell_text(cell: &ChangeCell) -> (String, String) {
    match &cell.change {
        Some(ch) => (
            units::signed_pct(ch.rel),
            ch.ci
                .map(|ci| format!("CI {} %", units::signed_pct_range(ci.lo, ci.hi)))
                .unwrap_or_default(),
        ),
        None => ("n/a".into(), String::new()),
    }
}

fn svg(an: &Analysis, cmp: &ComparisonAnalysis) -> String {
    let camp = an.campaign;
    let label_w = camp
        .conditions
        .iter()
        .map(|c| text_width(&c.name, 12.0))
        .fold(60.0, f64::max)
        + 16.0;
    let grid_w = label_w + CELL_W * camp.sizes.len() as f64;
    let grid_h = HEAD_H + CELL_H * camp.conditions.len() as f64;
    let b_name = &camp.arms[cmp.b].name;
    let faster = format!("← {b_name} faster");
    let slower = format!("{b_name} slower →");
    let bar_w = 11.0 * 24.0;
    let legend_w = (text_width(&faster, 11.0) + text_width(&slower, 11.0) + 24.0).max(bar_w);
    let width = grid_w.max(label_w + legend_w + 8.0).max(420.0) + 4.0;
    let height = grid_h + 108.0;
    let mut out = String::new();
    svg_open(
        &mut out,
        width,
        height,
        &format!(
            "Heatmap: median TTLB change of {} relative to {}",
            b_name, camp.arms[cmp.a].name
        ),
    );
    // Column heads.
    for (s, &size) in camp.sizes.iter().enumerate() {
        let _ = write!(
            out,
            r##"<text x="{}" y="{}" text-anchor="middle" font-weight="600" font-size="12">{}</text>"##,
            c(label_w + CELL_W * (s as f64 + 0.5)),
            c(HEAD_H - 9.0),
            esc(&super::size_label(camp, size))
        );
    }
    for (ci, cond) in camp.conditions.iter().enumerate() {
        let y = HEAD_H + CELL_H * ci as f64;
        let _ = write!(
            out,
            r##"<text x="{}" y="{}" text-anchor="end" dominant-baseline="central" font-size="12"><title>{}</title>{}</text>"##,
            c(label_w - 8.0),
            c(y + CELL_H / 2.0),
            esc(&cond.label),
            esc(&cond.name)
        );
        for s in 0..camp.sizes.len() {
            let cell = cmp.cell(ci, s);
            let x = label_w + CELL_W * s as f64;
            let (class, fill, text_fill, weight) = match &cell.change {
                Some(ch) if ch.significant => {
                    // A floor on the intensity keeps a small but significant change visibly
                    // tinted, apart from the grey of "no significant difference".
                    let (fill, dark) =
                        diverging(ch.rel.signum() * ch.rel.abs().max(MIN_TINT), SATURATE);
                    let class = if ch.rel < 0.0 {
                        "cell faster"
                    } else {
                        "cell slower"
                    };
                    (class, fill, if dark { "#ffffff" } else { "#1d1d1f" }, "700")
                }
                Some(_) => ("cell ns", NEUTRAL_FILL.to_string(), MUTED_TEXT, "400"),
                None => ("cell na", "#ffffff".to_string(), "#9a9a9a", "400"),
            };
            let (main, sub) = cell_text(cell);
            let _ = write!(
                out,
                r##"<a href="#cell-{ci}-{s}"><g id="hm-{}-{ci}-{s}" class="{class}"><title>{}</title><rect x="{}" y="{}" width="{}" height="{}" fill="{fill}" stroke="#ffffff" stroke-width="2"/><text x="{}" y="{}" text-anchor="middle" font-size="14" font-weight="{weight}" fill="{text_fill}">{}</text><text x="{}" y="{}" text-anchor="middle" font-size="10" fill="{text_fill}">{}</text></g></a>"##,
                cmp.index,
                esc(&tooltip(an, cmp, cell)),
                c(x),
                c(y),
                c(CELL_W),
                c(CELL_H),
                c(x + CELL_W / 2.0),
                c(y + if sub.is_empty() { 28.0 } else { 21.0 }),
                esc(&main),
                c(x + CELL_W / 2.0),
                c(y + 36.0),
                esc(&sub),
            );
        }
    }
    legend(&mut out, label_w, grid_h + 18.0, &faster, &slower);
    svg_close(&mut out);
    out
}

fn legend(out: &mut String, left: f64, top: f64, faster: &str, slower: &str) {
    let step = 24.0;
    let bar_w = 11.0 * step;
    // Both ends name the arm when they fit over the bar side by side; otherwise the right end
    // says "slower" alone (read on from the left end's name).
    let slower = if text_width(faster, 11.0) + text_width(slower, 11.0) + 12.0 > bar_w {
        "slower \u{2192}"
    } else {
        slower
    };
    let _ = write!(
        out,
        r##"<text x="{}" y="{}" font-size="11">{}</text><text x="{}" y="{}" font-size="11" text-anchor="end">{}</text>"##,
        c(left),
        c(top + 9.0),
        esc(faster),
        c(left + bar_w),
        c(top + 9.0),
        esc(slower)
    );
    for k in 0..11 {
        let v = (k as f64 - 5.0) / 5.0 * SATURATE;
        let (fill, _) = diverging(v, SATURATE);
        let _ = write!(
            out,
            r##"<rect x="{}" y="{}" width="{}" height="14" fill="{fill}"/>"##,
            c(left + k as f64 * step),
            c(top + 16.0),
            c(step)
        );
    }
    for (k, label) in [
        (0.0, format!("{}{:.0} %", units::MINUS, SATURATE * 100.0)),
        (5.5, "0".to_string()),
        (11.0, format!("+{:.0} %", SATURATE * 100.0)),
    ] {
        let anchor = if k == 0.0 {
            "start"
        } else if k == 11.0 {
            "end"
        } else {
            "middle"
        };
        let _ = write!(
            out,
            r##"<text x="{}" y="{}" font-size="10" fill="#333" text-anchor="{anchor}">{}</text>"##,
            c(left + k * step),
            c(top + 43.0),
            esc(&label)
        );
    }
    let y2 = top + 56.0;
    let _ = write!(
        out,
        r##"<rect x="{}" y="{}" width="14" height="14" fill="{NEUTRAL_FILL}"/><text x="{}" y="{}" font-size="11" dominant-baseline="central">not told apart: too few pairs, or no significant difference</text>"##,
        c(left),
        c(y2),
        c(left + 20.0),
        c(y2 + 7.0),
    );
    let _ = write!(
        out,
        r##"<rect x="{}" y="{}" width="14" height="14" fill="#ffffff" stroke="#bbb"/><text x="{}" y="{}" font-size="11" dominant-baseline="central">n/a: fewer than {MIN_TRIALS} successful trials in an arm</text>"##,
        c(left),
        c(y2 + 18.0),
        c(left + 20.0),
        c(y2 + 25.0),
    );
}

/// Each comparison's map as a figure, with the change in every cell as CSV when `with_csv`.
pub(crate) fn figures(an: &Analysis, with_csv: bool) -> Vec<crate::figures::Figure> {
    let c = an.campaign;
    if !c.workload.is_requests() || c.conditions.is_empty() || c.sizes.is_empty() {
        return Vec::new();
    }
    let num = |v: Option<f64>| v.map(|v| v.to_string()).unwrap_or_default();
    an.comparisons
        .iter()
        .map(|cmp| {
            let (a, b) = (&c.arms[cmp.a].name, &c.arms[cmp.b].name);
            let csv = with_csv.then(|| {
                let mut t = quiclab_model::csv::Table::new(&[
                    "a",
                    "b",
                    "condition",
                    "size_bytes",
                    "trials_a",
                    "trials_b",
                    "pairs",
                    "median_a_ms",
                    "median_b_ms",
                    "diff_ms",
                    "diff_rtts",
                    "change",
                    "ci_low",
                    "ci_high",
                    "p",
                    "p_adjusted",
                    "significant",
                ]);
                for cell in &cmp.cells {
                    let ch = cell.change.as_ref();
                    t.row(&[
                        a.clone(),
                        b.clone(),
                        c.conditions[cell.condition].name.clone(),
                        c.sizes[cell.size].to_string(),
                        cell.n_a.to_string(),
                        cell.n_b.to_string(),
                        ch.map(|ch| ch.pairs.to_string()).unwrap_or_default(),
                        num(ch.map(|ch| ch.median_a_ms)),
                        num(ch.map(|ch| ch.median_b_ms)),
                        num(ch.map(|ch| ch.diff_ms)),
                        num(ch.and_then(|ch| ch.diff_rtts)),
                        num(ch.map(|ch| ch.rel)),
                        num(ch.and_then(|ch| ch.ci.map(|i| i.lo))),
                        num(ch.and_then(|ch| ch.ci.map(|i| i.hi))),
                        num(ch.and_then(|ch| ch.p)),
                        num(ch.and_then(|ch| ch.p_adjusted)),
                        ch.map(|ch| ch.significant.to_string()).unwrap_or_default(),
                    ]);
                }
                t.into_string()
            });
            crate::figures::Figure {
                name: format!(
                    "heatmap-{}-{}",
                    crate::figures::slug(b),
                    crate::figures::slug(a)
                ),
                title: format!("Median TTLB change of {b} relative to {a}"),
                svg: svg(an, cmp),
                caption: format!(
                    "b = {}, a = {}: blue where {} was faster.",
                    esc(b),
                    esc(a),
                    esc(b)
                ),
                csv,
            }
        })
        .collect()
}
