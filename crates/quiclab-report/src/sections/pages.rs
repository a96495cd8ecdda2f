//! Web pages (the `pages` workload, after Yu & Benson's multi-object pages): per condition a
//! table of every page and arm with the median page load time, first render, visual-progress
//! index and main-image time, the compared arms' changes in those, and a waterfall per arm (each
//! resource's request, first byte and last byte, from the arm's median trial) so that the order in
//! which a server's stream scheduler delivered the resources can be seen.
//!
//! Contract: renders only for `pages` campaigns; reads the page detail of successful trials
//! ([`crate::model::Detail::page`]). The page-load-time heatmaps are the TTLB heatmaps (TTLB is
//! the page load time for this workload); this section does not repeat them.

use std::fmt::Write;

use quiclab_model::csv::Table;

use crate::analysis::{Analysis, metrics};
use crate::chart::{Ticks, arm_colour, c, svg_close, svg_open};
use crate::figures::{Figure, csv_if, slug};
use crate::html::esc;
use crate::model::{PageDetail, PageInfo, Trial, Workload};
use crate::stats;
use crate::units;

/// The label of a page's column: "medium (59 resources, 1.6 MB)".
pub fn label(pages: &[PageInfo], bytes: u64) -> String {
    match pages.iter().find(|p| p.bytes == bytes) {
        Some(p) => format!(
            "{} ({} resources, {})",
            p.name,
            p.resources,
            units::size(p.bytes)
        ),
        None => units::size(bytes),
    }
}

/// The medians of one arm's trials in one (condition, page) cell.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PageCell {
    pub trials: usize,
    pub plt_ms: Option<f64>,
    pub render_ms: Option<f64>,
    pub speed_index_ms: Option<f64>,
    pub main_image_ms: Option<f64>,
    /// A browser arm's: quiclab's page model on the browser's own arrival times.
    pub model_speed_index_ms: Option<f64>,
}

fn page_of(t: &Trial) -> Option<&PageDetail> {
    metrics(t).and_then(|m| m.detail.page.as_ref())
}

/// Medians over the trials that have a page detail.
pub fn cell(trials: &[&Trial]) -> PageCell {
    let details: Vec<&PageDetail> = trials.iter().filter_map(|t| page_of(t)).collect();
    let med = |f: &dyn Fn(&PageDetail) -> Option<f64>| {
        let v: Vec<f64> = details.iter().filter_map(|d| f(d)).collect();
        stats::median(&v)
    };
    PageCell {
        trials: details.len(),
        plt_ms: med(&|d| Some(d.plt_ms)),
        render_ms: med(&|d| Some(d.render_ms)),
        speed_index_ms: med(&|d| Some(d.speed_index_ms)),
        main_image_ms: med(&|d| d.main_image_ms),
        model_speed_index_ms: med(&|d| d.browser.as_ref()?.model_speed_index_ms),
    }
}

/// How far quiclab's model may stray from the browser before the check flags it.
const MODEL_TOLERANCE: f64 = 0.10;

/// `model` relative to `browser`, flagged (bold) beyond [`MODEL_TOLERANCE`].
fn model_vs(browser: Option<f64>, model: Option<f64>) -> String {
    match (browser, model) {
        (Some(b), Some(m)) if b > 0.0 => {
            let x = (m - b) / b;
            let text = units::signed_pct(x);
            if x.abs() > MODEL_TOLERANCE {
                format!("<strong>{text}</strong>")
            } else {
                text
            }
        }
        _ => "–".into(),
    }
}

/// The model check of one condition: every compared pair of a built-in loader's arm and a
/// browser's arm, page by page (empty without such pairs).
fn model_check(an: &Analysis, ci: usize, pages: &[PageInfo]) -> String {
    let camp = an.campaign;
    // a real browser's arms: their page load time is the load event, their visual progress the
    // Speed Index of screenshots
    let browser = |i: usize| camp.arms[i].client_browser;
    let pairs: Vec<(usize, usize)> = an
        .comparisons
        .iter()
        .filter_map(|cmp| match (browser(cmp.a), browser(cmp.b)) {
            (false, true) => Some((cmp.a, cmp.b)),
            (true, false) => Some((cmp.b, cmp.a)),
            _ => None,
        })
        .collect();
    if pairs.is_empty() {
        return String::new();
    }
    let mut out = String::from(
        "<table>\n<tr><th>page</th><th>model vs browser</th><th class=\"num\">page load: model</th>\
         <th class=\"num\">browser</th><th class=\"num\">model − browser</th>\
         <th class=\"num\">visual progress: model</th><th class=\"num\">browser</th>\
         <th class=\"num\">model − browser</th><th class=\"num\">model on the browser's arrivals</th></tr>\n",
    );
    for (si, &size) in camp.sizes.iter().enumerate() {
        for &(own, real) in &pairs {
            let m = cell(&an.cell(ci, si, own).ok);
            let b = cell(&an.cell(ci, si, real).ok);
            let _ = writeln!(
                out,
                "<tr><td>{}</td><td>{} vs {}</td><td class=\"num\">{}</td><td class=\"num\">{}</td>\
                 <td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td>\
                 <td class=\"num\">{}</td><td class=\"num\">{}</td></tr>",
                esc(&label(pages, size)),
                esc(&camp.arms[own].name),
                esc(&camp.arms[real].name),
                opt_ms(m.plt_ms),
                opt_ms(b.plt_ms),
                model_vs(b.plt_ms, m.plt_ms),
                opt_ms(m.speed_index_ms),
                opt_ms(b.speed_index_ms),
                model_vs(b.speed_index_ms, m.speed_index_ms),
                model_vs(b.speed_index_ms, b.model_speed_index_ms),
            );
        }
    }
    let _ = write!(
        out,
        "</table>\n<p class=\"caption\"><strong>Model check</strong>: quiclab's loader and page \
         model (page load: last byte; visual progress: arrivals weighted above the fold) against \
         a real browser loading the same page's real content from the same server (page load: \
         its load event; visual progress: the Speed Index of its screenshots). Medians; \
         differences beyond {:.0} % in bold. The last column applies the model to the browser's \
         own arrival times: it measures the visual model alone, without the loader's \
         scheduling.</p>\n",
        MODEL_TOLERANCE * 100.0
    );
    out
}

/// The trial with the median page load time (the lower median), the waterfall's trial.
fn median_page_trial<'a>(trials: &[&'a Trial]) -> Option<&'a Trial> {
    let mut with: Vec<&Trial> = trials
        .iter()
        .copied()
        .filter(|t| page_of(t).is_some())
        .collect();
    with.sort_by(|a, b| {
        let (pa, pb) = (
            page_of(a).map_or(0.0, |d| d.plt_ms),
            page_of(b).map_or(0.0, |d| d.plt_ms),
        );
        pa.total_cmp(&pb).then(a.iteration.cmp(&b.iteration))
    });
    let n = with.len();
    (n > 0).then(|| with[(n - 1) / 2])
}

fn opt_ms(v: Option<f64>) -> String {
    v.map_or("–".to_string(), units::ms)
}

fn change(a: Option<f64>, b: Option<f64>) -> String {
    match (a, b) {
        (Some(a), Some(b)) if a > 0.0 => units::signed_pct((b - a) / a),
        _ => "–".into(),
    }
}

pub fn render(an: &Analysis) -> Option<String> {
    let camp = an.campaign;
    let Workload::Pages { pages } = &camp.workload else {
        return None;
    };
    let mut out = String::new();
    out.push_str(
        "<p class=\"caption\">Each trial loads one page as a browser does: the document first, \
         then every resource as soon as the resource naming it has arrived, over one connection \
         (HTTP/2, HTTP/3) or up to six (HTTP/1.1), each request carrying its RFC 9218 priority. \
         <strong>Page load</strong>: the last byte of the last resource, from the first \
         connection attempt. <strong>First render</strong>: every render-blocking resource \
         (document, stylesheets, blocking scripts) has arrived. <strong>Visual progress \
         index</strong>: the mean time at which the above-the-fold weight became visible, a \
         resource being visible once it has arrived and the page has first rendered \
         (Σ w<sub>i</sub>·max(arrival<sub>i</sub>, first render) / Σ w<sub>i</sub>, the \
         integral of 1 − visual completeness, like WebPageTest's Speed Index with resource \
         arrivals standing in for screenshots). <strong>Main image</strong>: the last byte of the \
         page's main image. Arms whose client is a real browser (Chromium) load the page's real \
         content: for them page load is the load event, first render the first contentful paint \
         and visual progress the Speed Index of screenshots. Medians over the successful trials; \
         the heatmaps of the page load time change are in the TTLB section below.</p>\n",
    );
    for (ci, cond) in camp.conditions.iter().enumerate() {
        let _ = write!(
            out,
            "<h3>{}</h3>\n<table>\n<tr><th>page</th><th>arm</th><th class=\"num\">trials</th>\
             <th class=\"num\">page load</th><th class=\"num\">first render</th>\
             <th class=\"num\">visual progress</th><th class=\"num\">main image</th></tr>\n",
            esc(&format!("{} — {}", cond.name, cond.label))
        );
        for (si, &size) in camp.sizes.iter().enumerate() {
            for (ai, arm) in camp.arms.iter().enumerate() {
                let k = cell(&an.cell(ci, si, ai).ok);
                let _ = writeln!(
                    out,
                    "<tr><td>{}</td><td><span class=\"swatch\" style=\"background:{}\"></span>{}\
                     </td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}\
                     </td><td class=\"num\">{}</td><td class=\"num\">{}</td></tr>",
                    esc(&label(pages, size)),
                    arm_colour(ai),
                    esc(&arm.name),
                    k.trials,
                    opt_ms(k.plt_ms),
                    opt_ms(k.render_ms),
                    opt_ms(k.speed_index_ms),
                    opt_ms(k.main_image_ms),
                );
            }
        }
        out.push_str("</table>\n");
        if !an.comparisons.is_empty() {
            out.push_str(
                "<table>\n<tr><th>page</th><th>b vs a</th><th class=\"num\">page load</th>\
                 <th class=\"num\">first render</th><th class=\"num\">visual progress</th>\
                 <th class=\"num\">main image</th></tr>\n",
            );
            for (si, &size) in camp.sizes.iter().enumerate() {
                for cmp in &an.comparisons {
                    let a = cell(&an.cell(ci, si, cmp.a).ok);
                    let b = cell(&an.cell(ci, si, cmp.b).ok);
                    let _ = writeln!(
                        out,
                        "<tr><td>{}</td><td>{} vs {}</td><td class=\"num\">{}</td>\
                         <td class=\"num\">{}</td><td class=\"num\">{}</td>\
                         <td class=\"num\">{}</td></tr>",
                        esc(&label(pages, size)),
                        esc(&camp.arms[cmp.b].name),
                        esc(&camp.arms[cmp.a].name),
                        change(a.plt_ms, b.plt_ms),
                        change(a.render_ms, b.render_ms),
                        change(a.speed_index_ms, b.speed_index_ms),
                        change(a.main_image_ms, b.main_image_ms),
                    );
                }
            }
            out.push_str(
                "</table>\n<p class=\"caption\">Change of b's median relative to a's: negative \
                 is b sooner.</p>\n",
            );
            out.push_str(&model_check(an, ci, pages));
        }
        // waterfalls of this condition, one per page and arm, on one time scale per page
        let _ = writeln!(
            out,
            "<details class=\"condition\"{}><summary>Waterfalls under {}</summary>",
            if ci == 0 { " open" } else { "" },
            esc(&cond.name)
        );
        for (si, &size) in camp.sizes.iter().enumerate() {
            let figs = waterfalls(an, ci, si, false);
            if figs.is_empty() {
                continue;
            }
            let _ = write!(
                out,
                "<h4>{}</h4>\n<div class=\"charts\">\n",
                esc(&label(pages, size))
            );
            for f in figs {
                out.push_str(&f.html());
            }
            out.push_str("</div>\n");
        }
        out.push_str(
            "<p class=\"caption\">One row per resource in request order: a thin grey line \
             from the request to the first byte, a bar from the first to the last byte, \
             coloured by type (document, stylesheet, script, font, image, other); the main \
             image has a black outline. Dashed: first render; solid: page load. Hover over a \
             bar for the resource, its size, priority and times.</p>\n</details>\n",
        );
    }
    Some(out)
}

/// The waterfalls of each arm's median trial under condition `ci` for page `si`, on one time
/// scale, with every resource's times as CSV when `with_csv`.
fn waterfalls(an: &Analysis, ci: usize, si: usize, with_csv: bool) -> Vec<Figure> {
    let camp = an.campaign;
    let Workload::Pages { pages } = &camp.workload else {
        return Vec::new();
    };
    let chosen: Vec<(usize, &PageDetail, &Trial)> = (0..camp.arms.len())
        .filter_map(|ai| {
            let t = median_page_trial(&an.cell(ci, si, ai).ok)?;
            Some((ai, page_of(t)?, t))
        })
        .collect();
    let span = chosen.iter().map(|(_, d, _)| d.plt_ms).fold(0.0, f64::max);
    let page = label(pages, camp.sizes[si]);
    chosen
        .into_iter()
        .map(|(ai, d, t)| {
            let arm = &camp.arms[ai].name;
            let title = format!("{arm} — iteration {}", t.iteration);
            Figure {
                name: format!(
                    "pages-{}-{}-{}-waterfall",
                    slug(&camp.conditions[ci].name),
                    slug(&page),
                    slug(arm)
                ),
                svg: waterfall(&title, d, span),
                title: format!("Waterfall of {page}, {arm}, {}", camp.conditions[ci].name),
                caption: format!(
                    "{}: the median trial (page load {}, main image {}).",
                    esc(arm),
                    units::ms(d.plt_ms),
                    opt_ms(d.main_image_ms)
                ),
                csv: csv_if(with_csv, || {
                    let mut tab = Table::new(&[
                        "trial_id",
                        "resource",
                        "kind",
                        "bytes",
                        "urgency",
                        "incremental",
                        "critical",
                        "main_image",
                        "connection",
                        "start_ms",
                        "first_byte_ms",
                        "last_byte_ms",
                    ]);
                    for r in &d.resources {
                        tab.row(&[
                            t.id.clone(),
                            r.id.clone(),
                            r.kind.clone(),
                            r.bytes.to_string(),
                            r.urgency.to_string(),
                            r.incremental.to_string(),
                            r.critical.to_string(),
                            r.main_image.to_string(),
                            r.connection.to_string(),
                            r.start_ms.to_string(),
                            r.first_byte_ms.to_string(),
                            r.last_byte_ms.to_string(),
                        ]);
                    }
                    tab
                }),
            }
        })
        .collect()
}

/// Every waterfall of the section, in the page's order.
pub(crate) fn figures(an: &Analysis, with_csv: bool) -> Vec<Figure> {
    let camp = an.campaign;
    (0..camp.conditions.len())
        .flat_map(|ci| (0..camp.sizes.len()).map(move |si| (ci, si)))
        .flat_map(|(ci, si)| waterfalls(an, ci, si, with_csv))
        .collect()
}

/// Colour of a resource type.
fn kind_colour(kind: &str) -> &'static str {
    match kind {
        "html" => "#0072B2",
        "css" => "#CC79A7",
        "js" => "#E69F00",
        "font" => "#009E73",
        "image" => "#56B4E9",
        _ => "#999999",
    }
}

/// A waterfall of one page load on a time axis of `span_ms`.
pub fn waterfall(title: &str, d: &PageDetail, span_ms: f64) -> String {
    let n = d.resources.len().max(1);
    let row = if n <= 40 { 8.0 } else { 5.0 };
    let (left, right, top, bottom) = (12.0, 14.0, 40.0, 30.0);
    let width = 400.0;
    let plot_w = width - left - right;
    let height = top + bottom + row * n as f64;
    let ticks = Ticks::new(0.0, span_ms.max(1.0), 5);
    let px = |ms: f64| left + plot_w * (ms / ticks.hi).clamp(0.0, 1.0);
    let mut out = String::new();
    svg_open(&mut out, width, height, title);
    let _ = write!(
        out,
        r##"<text x="{}" y="16" font-weight="600">{}</text>"##,
        c(left),
        esc(title)
    );
    for &v in &ticks.values {
        let x = px(v);
        let _ = write!(
            out,
            r##"<line x1="{x}" y1="{t}" x2="{x}" y2="{b}" stroke="#e4e4e4"/><text x="{x}" y="{ty}" text-anchor="middle" fill="#555">{}</text>"##,
            esc(&ticks.label(v)),
            x = c(x),
            t = c(top - 4.0),
            b = c(height - bottom + 2.0),
            ty = c(top - 8.0),
        );
    }
    let _ = write!(
        out,
        r##"<text x="{}" y="{}" text-anchor="middle" fill="#555">ms from the first connection attempt</text>"##,
        c(left + plot_w / 2.0),
        c(height - 8.0)
    );
    let mut order: Vec<usize> = (0..d.resources.len()).collect();
    order.sort_by(|&a, &b| {
        d.resources[a]
            .start_ms
            .total_cmp(&d.resources[b].start_ms)
            .then(a.cmp(&b))
    });
    for (k, &i) in order.iter().enumerate() {
        let r = &d.resources[i];
        let y = top + row * k as f64;
        let mid = y + row / 2.0;
        let _ = write!(
            out,
            r##"<g><title>{}</title><line x1="{}" y1="{m}" x2="{}" y2="{m}" stroke="#aaaaaa"/><rect x="{}" y="{}" width="{}" height="{}" fill="{}"{}/></g>"##,
            esc(&format!(
                "{} ({}, {}, u={}{}{}): requested {}, first byte {}, last byte {}; connection {}",
                r.id,
                r.kind,
                units::size(r.bytes),
                r.urgency,
                if r.incremental { ", i" } else { "" },
                if r.critical { ", render-blocking" } else { "" },
                units::ms(r.start_ms),
                units::ms(r.first_byte_ms),
                units::ms(r.last_byte_ms),
                r.connection
            )),
            c(px(r.start_ms)),
            c(px(r.first_byte_ms)),
            c(px(r.first_byte_ms)),
            c(y + 0.5),
            c((px(r.last_byte_ms) - px(r.first_byte_ms)).max(1.0)),
            c(row - 1.0),
            kind_colour(&r.kind),
            if r.main_image {
                r##" stroke="#000000" stroke-width="1""##
            } else {
                ""
            },
            m = c(mid),
        );
    }
    for (v, dash) in [
        (d.render_ms, r##" stroke-dasharray="4 3""##),
        (d.plt_ms, ""),
    ] {
        let _ = write!(
            out,
            r##"<line x1="{x}" y1="{}" x2="{x}" y2="{}" stroke="#333333"{dash}/>"##,
            c(top - 4.0),
            c(height - bottom + 2.0),
            x = c(px(v)),
        );
    }
    svg_close(&mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ResourceTimes;

    fn detail() -> PageDetail {
        let r = |id: &str, kind: &str, s: f64, f: f64, l: f64| ResourceTimes {
            id: id.into(),
            kind: kind.into(),
            bytes: 1000,
            start_ms: s,
            first_byte_ms: f,
            last_byte_ms: l,
            main_image: kind == "image",
            ..Default::default()
        };
        PageDetail {
            page: "p".into(),
            plt_ms: 300.0,
            render_ms: 120.0,
            speed_index_ms: 200.0,
            main_image_ms: Some(300.0),
            connections: 1,
            resources: vec![
                r("hero <1>", "image", 50.0, 100.0, 300.0),
                r("index.html", "html", 0.0, 40.0, 50.0),
            ],
            browser: None,
        }
    }

    #[test]
    fn waterfalls_draw_rows_in_request_order_with_escaped_names() {
        let svg = waterfall("arm & co", &detail(), 300.0);
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>"), "{svg}");
        assert!(svg.contains("arm &amp; co") && svg.contains("hero &lt;1&gt;"));
        // the document was requested first: its row comes first
        assert!(svg.find("index.html").unwrap() < svg.find("hero &lt;1&gt;").unwrap());
        // one bar per resource, the main image outlined
        assert_eq!(svg.matches("<g><title>").count(), 2);
        assert_eq!(svg.matches(r##"stroke="#000000""##).count(), 1);
    }

    #[test]
    fn labels_name_the_page_by_its_bytes() {
        let pages = vec![PageInfo {
            name: "small".into(),
            source: "small".into(),
            resources: 18,
            bytes: 566_000,
        }];
        assert!(label(&pages, 566_000).starts_with("small (18 resources, "));
        assert_eq!(label(&pages, 1), units::size(1));
    }

    /// Two arms, three trials each, one page: medians, changes and a waterfall per arm.
    #[test]
    fn the_section_tabulates_medians_and_draws_each_arms_median_trial() {
        use crate::model::{Arm, Campaign, Comparison, Condition, Metrics};
        let page = PageInfo {
            name: "p".into(),
            source: "p".into(),
            resources: 2,
            bytes: 2000,
        };
        let mut trials = Vec::new();
        for (arm, plts) in [("h2", [300.0, 400.0, 500.0]), ("h3", [200.0, 250.0, 900.0])] {
            for (it, plt) in plts.into_iter().enumerate() {
                let mut d = detail();
                d.plt_ms = plt;
                d.main_image_ms = Some(plt / 2.0);
                trials.push(Trial {
                    id: format!("{arm}-{it}"),
                    arm: arm.into(),
                    condition: "base".into(),
                    size: 2000,
                    iteration: it as u32,
                    seed: 1,
                    before: None,
                    outcome: Ok(Metrics {
                        ttlb_ms: plt,
                        detail: crate::model::Detail {
                            page: Some(d),
                            ..Default::default()
                        },
                        ..Default::default()
                    }),
                    artifacts: None,
                    host: None,
                    started_unix_ms: 0,
                    wall_ms: 0.0,
                });
            }
        }
        let arm = |n: &str| Arm {
            name: n.into(),
            label: n.into(),
            caveats: Vec::new(),
            ..Default::default()
        };
        let camp = Campaign {
            workload: Workload::Pages { pages: vec![page] },
            arms: vec![arm("h2"), arm("h3")],
            conditions: vec![Condition {
                name: "base".into(),
                label: "10 Mbit/s".into(),
                rtt_ms: 20.0,
                rate_bps: Some(10_000_000),
                base: None,
            }],
            sizes: vec![2000],
            comparisons: vec![Comparison {
                a: "h2".into(),
                b: "h3".into(),
            }],
            trials,
            ..Default::default()
        };
        let an = Analysis::new(&camp);
        let html = render(&an).unwrap();
        // medians: h2 400 ms, h3 250 ms (main image half of each trial's)
        assert!(html.contains("<td class=\"num\">400 ms</td>"), "{html}");
        assert!(html.contains("<td class=\"num\">250 ms</td>"), "{html}");
        assert!(html.contains(&units::signed_pct(-0.375)), "{html}");
        // one waterfall per arm, each of its median trial
        assert_eq!(html.matches("<svg").count(), 2);
        assert!(html.contains("h2 — iteration 1") && html.contains("h3 — iteration 1"));
        // every chart of the page exported; each waterfall's CSV holds its trial's resources
        let figs = crate::figures::assert_exported(&camp);
        let falls: Vec<_> = figs
            .iter()
            .filter(|f| f.name.ends_with("-waterfall"))
            .collect();
        assert_eq!(falls.len(), 2);
        for (f, trial) in falls.iter().zip(["h2-1", "h3-1"]) {
            let csv = f.csv.as_ref().unwrap();
            let rows: Vec<&str> = csv.lines().skip(1).collect();
            assert_eq!(rows.len(), detail().resources.len(), "{csv}");
            assert!(
                rows.iter().all(|r| r.starts_with(&format!("{trial},"))),
                "{csv}"
            );
        }
        // other workloads: nothing
        let other = Campaign {
            workload: Workload::default(),
            ..camp.clone()
        };
        assert!(render(&Analysis::new(&other)).is_none());
    }

    /// A built-in loader's arm against a browser's: the model check puts their medians side by
    /// side and flags what strays beyond the tolerance.
    #[test]
    fn the_model_check_sets_the_loader_against_the_browser() {
        use crate::model::{Arm, BrowserDetail, Campaign, Comparison, Condition, Metrics};
        let trial = |arm: &str, it: u32, plt: f64, si: f64, browser: Option<BrowserDetail>| {
            let mut d = detail();
            d.plt_ms = plt;
            d.speed_index_ms = si;
            d.browser = browser;
            Trial {
                id: format!("{arm}-{it}"),
                arm: arm.into(),
                condition: "base".into(),
                size: 2000,
                iteration: it,
                seed: 1,
                before: None,
                outcome: Ok(Metrics {
                    ttlb_ms: plt,
                    detail: crate::model::Detail {
                        page: Some(d),
                        ..Default::default()
                    },
                    ..Default::default()
                }),
                artifacts: None,
                host: None,
                started_unix_ms: 0,
                wall_ms: 0.0,
            }
        };
        let real = |model_si: f64| {
            Some(BrowserDetail {
                model_speed_index_ms: Some(model_si),
                ..Default::default()
            })
        };
        let trials = vec![
            trial("h3", 0, 400.0, 200.0, None),
            trial("chrome-h3", 0, 500.0, 210.0, real(205.0)),
        ];
        let arm = |n: &str, browser: bool| Arm {
            name: n.into(),
            label: n.into(),
            client_browser: browser,
            ..Default::default()
        };
        let camp = Campaign {
            workload: Workload::Pages {
                pages: vec![PageInfo {
                    name: "p".into(),
                    source: "p".into(),
                    resources: 2,
                    bytes: 2000,
                }],
            },
            arms: vec![arm("h3", false), arm("chrome-h3", true)],
            conditions: vec![Condition {
                name: "base".into(),
                label: "10 Mbit/s".into(),
                rtt_ms: 20.0,
                rate_bps: Some(10_000_000),
                base: None,
            }],
            sizes: vec![2000],
            comparisons: vec![Comparison {
                a: "chrome-h3".into(),
                b: "h3".into(),
            }],
            trials,
            ..Default::default()
        };
        let html = render(&Analysis::new(&camp)).unwrap();
        let check = &html[html.find("model vs browser").expect("a model check")..];
        // whichever side of the comparison the browser is on, the model is set against it
        assert!(check.contains("<td>h3 vs chrome-h3</td>"), "{check}");
        // page load 400 against 500: 20 % short, beyond the tolerance
        assert!(check.contains(&format!("<strong>{}</strong>", units::signed_pct(-0.2))));
        // visual progress 200 against 210, and the model on the browser's arrivals 205: within
        assert!(check.contains(&format!(">{}<", units::signed_pct((200.0 - 210.0) / 210.0))));
        assert!(check.contains(&format!(">{}<", units::signed_pct((205.0 - 210.0) / 210.0))));
        // without a browser arm among the comparisons: no model check
        let plain = Campaign {
            arms: vec![arm("h3", false), arm("chrome-h3", false)],
            ..camp.clone()
        };
        assert!(
            !render(&Analysis::new(&plain))
                .unwrap()
                .contains("model vs browser")
        );
    }
}
