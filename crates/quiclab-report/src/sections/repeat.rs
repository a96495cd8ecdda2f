//! Repeated requests (the `repeat` workload, after the S4 benchmark): every trial is N GETs of
//! one size, each on a new connection, the later ones resuming the first's TLS session (0-RTT
//! over QUIC). Shows per size the mean per-request throughput of every arm under every
//! condition (the study's charts, as bars and a table), what resumption and 0-RTT did to the
//! time to first byte (first request against the later ones, in round trips of the condition),
//! and the distributions of the later requests' TTFB and TTLB; it closes with where each
//! compared arm was faster and slower than its baseline, condition by condition, with figures.
//!
//! Contract: renders only for `repeat` campaigns; reads the per-request metrics of successful
//! trials ([`crate::model::Detail::requests`]) and nothing else, so failed trials count in the
//! failure section, not here. A request's throughput is its body bits over its TTLB (handshake
//! included, as a user sees it).

use crate::analysis::{Analysis, metrics};
use crate::chart::{
    Bar, BarGroup, BarSpec, Mark, Series, Ticks, arm_colour, arm_legend, cdf, cdf_csv, grouped_bars,
};
use crate::figures::{Figure, csv_if, slug};
use crate::html::esc;
use crate::model::{RequestMetrics, Workload};
use crate::stats;
use crate::units;
use std::fmt::Write;

/// What one arm's requests did in one (condition, size) cell.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RepeatCell {
    /// Per-request throughput in Mbit/s, every request of every successful trial.
    pub throughput_mbps: Vec<f64>,
    /// TTFB of each trial's first request (full handshake) and of the later ones, ms.
    pub first_ttfb_ms: Vec<f64>,
    pub later_ttfb_ms: Vec<f64>,
    /// TTLB of the later requests, ms.
    pub later_ttlb_ms: Vec<f64>,
    /// Later requests: how many, how many resumed, sent 0-RTT data, had it accepted.
    pub later: usize,
    pub resumed: usize,
    pub zero_rtt_attempted: usize,
    pub zero_rtt_accepted: usize,
}

impl RepeatCell {
    pub fn add_trial(&mut self, requests: &[RequestMetrics]) {
        for (i, r) in requests.iter().enumerate() {
            if r.ttlb_ms > 0.0 {
                self.throughput_mbps
                    .push(r.bytes as f64 * 8.0 / (r.ttlb_ms * 1000.0));
            }
            if i == 0 {
                self.first_ttfb_ms.push(r.ttfb_ms);
                continue;
            }
            self.later_ttfb_ms.push(r.ttfb_ms);
            self.later_ttlb_ms.push(r.ttlb_ms);
            self.later += 1;
            self.resumed += usize::from(r.resumed);
            self.zero_rtt_attempted += usize::from(r.zero_rtt_attempted);
            self.zero_rtt_accepted += usize::from(r.zero_rtt_accepted);
        }
    }

    pub fn mean_throughput(&self) -> Option<f64> {
        (!self.throughput_mbps.is_empty())
            .then(|| self.throughput_mbps.iter().sum::<f64>() / self.throughput_mbps.len() as f64)
    }

    /// Median TTFB of the first requests minus that of the later ones, ms.
    pub fn ttfb_saved_ms(&self) -> Option<f64> {
        Some(stats::median(&self.first_ttfb_ms)? - stats::median(&self.later_ttfb_ms)?)
    }
}

/// Every (condition, size, arm) cell: `cells[condition][size][arm]`.
pub fn cells(an: &Analysis) -> Vec<Vec<Vec<RepeatCell>>> {
    let camp = an.campaign;
    (0..camp.conditions.len())
        .map(|ci| {
            (0..camp.sizes.len())
                .map(|si| {
                    (0..camp.arms.len())
                        .map(|ai| {
                            let mut cell = RepeatCell::default();
                            for t in &an.cell(ci, si, ai).ok {
                                if let Some(m) = metrics(t) {
                                    cell.add_trial(&m.detail.requests);
                                }
                            }
                            cell
                        })
                        .collect()
                })
                .collect()
        })
        .collect()
}

const W: f64 = 860.0;
const H: f64 = 300.0;

pub fn render(an: &Analysis) -> Option<String> {
    let camp = an.campaign;
    let Workload::Repeat { requests } = camp.workload else {
        return None;
    };
    if camp.arms.is_empty() || camp.conditions.is_empty() {
        return None;
    }
    let cells = cells(an);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "<p class=\"desc\">Each trial is {requests} GETs one after another, each on a new \
         connection; every connection after the first resumes the TLS session (over QUIC the \
         request then goes as 0-RTT data; a stack without resumption, such as the coded \
         transport, makes a full handshake each time). Throughput of a request = its body over its time to \
         last byte, handshake included; bars show the mean over every request of every trial, \
         as in the study's charts.</p>"
    );
    findings(&mut out, an, &cells);
    for (si, &size) in camp.sizes.iter().enumerate() {
        let _ = writeln!(out, "<h3>{} per request</h3>", esc(&units::size(size)));
        out.push_str(&throughput_figure(an, &cells, si, false).html());
        throughput_table(&mut out, an, &cells, si);
        handshake_table(&mut out, an, &cells, si);
        ttlb_cdfs(&mut out, an, &cells, si);
    }
    wins_and_losses(&mut out, an, &cells);
    Some(out)
}

/// The chart of the mean throughput per request at size `si`, by condition and arm.
fn throughput_figure(
    an: &Analysis,
    cells: &[Vec<Vec<RepeatCell>>],
    si: usize,
    with_csv: bool,
) -> Figure {
    let camp = an.campaign;
    let size = camp.sizes[si];
    let groups: Vec<BarGroup> = camp
        .conditions
        .iter()
        .enumerate()
        .map(|(ci, cond)| BarGroup {
            label: cond.name.clone(),
            bars: camp
                .arms
                .iter()
                .enumerate()
                .map(|(ai, arm)| {
                    let cell = &cells[ci][si][ai];
                    let mean = cell.mean_throughput();
                    Bar {
                        value: mean,
                        colour: arm_colour(ai).to_string(),
                        hollow: false,
                        whisker: None,
                        title: format!(
                            "{}, {}: {}",
                            arm.name,
                            cond.name,
                            mean.map_or("no request".into(), |m| format!(
                                "{} Mbit/s mean over {} requests",
                                units::number(m, 2),
                                cell.throughput_mbps.len()
                            ))
                        ),
                    }
                })
                .collect(),
        })
        .collect();
    let max = groups
        .iter()
        .flat_map(|g| g.bars.iter().filter_map(|b| b.value))
        .fold(0.0, f64::max);
    let spec = BarSpec {
        width: W,
        height: H,
        title: format!("Mean throughput per request, {}", units::size(size)),
        y_label: "Mbit/s".into(),
        y: Ticks::new(0.0, max.max(1e-3) * 1.05, 5),
        groups,
        legend: arm_legend(camp, Mark::Dot),
        references: camp.conditions[0]
            .rate_bps
            .filter(|&r| camp.conditions.iter().all(|c| c.rate_bps == Some(r)))
            .map(|r| {
                (
                    r as f64 / 1e6,
                    "#888888".to_string(),
                    "link rate".to_string(),
                )
            })
            .into_iter()
            .collect(),
    };
    Figure {
        name: format!("repeat-{}-throughput", slug(&units::size(size))),
        title: spec.title.clone(),
        svg: grouped_bars(&spec),
        caption: "Mean throughput of a request (body bits over TTLB) per condition and arm.".into(),
        csv: csv_if(with_csv, || spec.csv("condition", "arm")),
    }
}

/// How arm b's requests compare with arm a's in one cell.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Verdict {
    /// b's mean throughput per request is higher, and the difference is significant.
    Faster,
    Slower,
    /// Means within [`MIN_DIFFERENCE`] of each other, or a Mann-Whitney p of at least 0.05
    /// over the per-request throughputs.
    NoClearDifference,
}

/// The smallest relative difference of mean throughputs that counts as a win or a loss: the
/// requests of one trial share a connection's fate and are not independent, so a test over
/// them finds tiny differences "significant".
pub const MIN_DIFFERENCE: f64 = 0.05;

/// Compares the per-request throughputs of two cells: (mean of a, mean of b, verdict), `None`
/// when either has no request. A difference counts when the means differ by at least
/// [`MIN_DIFFERENCE`] and a two-sided Mann-Whitney test over the requests gives p < 0.05.
pub fn compare(a: &RepeatCell, b: &RepeatCell) -> Option<(f64, f64, Verdict)> {
    let (ma, mb) = (a.mean_throughput()?, b.mean_throughput()?);
    let p = stats::mann_whitney(&a.throughput_mbps, &b.throughput_mbps).map_or(1.0, |t| t.p);
    let verdict = if p >= 0.05 || (mb / ma - 1.0).abs() < MIN_DIFFERENCE {
        Verdict::NoClearDifference
    } else if mb > ma {
        Verdict::Faster
    } else {
        Verdict::Slower
    };
    Some((ma, mb, verdict))
}

/// The closing note: per compared pair and size, the conditions where the compared arm's
/// requests were faster and where slower, with their mean throughputs.
fn wins_and_losses(out: &mut String, an: &Analysis, cells: &[Vec<Vec<RepeatCell>>]) {
    let camp = an.campaign;
    let arm = |name: &str| camp.arms.iter().position(|a| a.name == name);
    let mut items = String::new();
    for cmp in &camp.comparisons {
        let (Some(ai), Some(bi)) = (arm(&cmp.a), arm(&cmp.b)) else {
            continue;
        };
        for (si, &size) in camp.sizes.iter().enumerate() {
            let (mut faster, mut slower, mut even, mut n) = (Vec::new(), Vec::new(), 0, 0);
            for (ci, cond) in camp.conditions.iter().enumerate() {
                let Some((ma, mb, v)) = compare(&cells[ci][si][ai], &cells[ci][si][bi]) else {
                    continue;
                };
                n += 1;
                let fig = format!(
                    "{} ({} against {} Mbit/s, {})",
                    esc(&cond.name),
                    units::number(mb, 2),
                    units::number(ma, 2),
                    units::signed_pct(mb / ma - 1.0)
                );
                match v {
                    Verdict::Faster => faster.push(fig),
                    Verdict::Slower => slower.push(fig),
                    Verdict::NoClearDifference => even += 1,
                }
            }
            if n == 0 {
                continue;
            }
            let list = |v: &[String]| {
                if v.is_empty() {
                    String::new()
                } else {
                    format!(": {}", v.join("; "))
                }
            };
            let _ = writeln!(
                items,
                "<li><strong>{b}</strong> against <strong>{a}</strong>, {size} per request: \
                 faster in {} of {n} conditions{}; slower in {}{}; no clear difference in \
                 {even}.</li>",
                faster.len(),
                list(&faster),
                slower.len(),
                list(&slower),
                b = esc(&cmp.b),
                a = esc(&cmp.a),
                size = esc(&units::size(size)),
            );
        }
    }
    if !items.is_empty() {
        let _ = write!(
            out,
            "<h3>Where each compared arm wins and where it loses</h3>\n<p class=\"desc\">Mean \
             throughput per request of the compared arm against the baseline's; a condition \
             counts when the means differ by 5 % or more and a Mann-Whitney test over the \
             requests gives p &lt; 0.05.</p>\n\
             <ul class=\"findings\">\n{items}</ul>\n"
        );
    }
}

fn throughput_table(out: &mut String, an: &Analysis, cells: &[Vec<Vec<RepeatCell>>], si: usize) {
    let camp = an.campaign;
    out.push_str("<table><thead><tr><th>condition</th><th>RTT</th>");
    for arm in &camp.arms {
        let _ = write!(
            out,
            "<th>{}<br><span class=\"muted\">mean (p10–p90)</span></th>",
            esc(&arm.name)
        );
    }
    out.push_str("</tr></thead><tbody>\n");
    for (ci, cond) in camp.conditions.iter().enumerate() {
        let _ = write!(
            out,
            "<tr><td title=\"{}\">{}</td><td>{}</td>",
            esc(&cond.label),
            esc(&cond.name),
            units::ms(cond.rtt_ms)
        );
        for cell in &cells[ci][si] {
            match cell.mean_throughput() {
                Some(mean) => {
                    let q = |p| stats::quantile(&cell.throughput_mbps, p).unwrap_or(f64::NAN);
                    let _ = write!(
                        out,
                        "<td>{} Mbit/s <span class=\"muted\">({}–{}, n = {})</span></td>",
                        units::number(mean, 2),
                        units::number(q(0.1), 2),
                        units::number(q(0.9), 2),
                        cell.throughput_mbps.len()
                    );
                }
                None => out.push_str("<td class=\"muted\">no request</td>"),
            }
        }
        out.push_str("</tr>\n");
    }
    out.push_str("</tbody></table>\n");
}

fn handshake_table(out: &mut String, an: &Analysis, cells: &[Vec<Vec<RepeatCell>>], si: usize) {
    let camp = an.campaign;
    out.push_str(
        "<h4>Time to first byte: the first request against the later ones</h4>\n\
         <table><thead><tr><th>condition</th><th>arm</th>\
         <th>TTFB first (median)</th><th>TTFB later (median)</th><th>saved</th>\
         <th>resumed</th><th>0-RTT accepted / sent</th></tr></thead><tbody>\n",
    );
    for (ci, cond) in camp.conditions.iter().enumerate() {
        for (ai, cell) in cells[ci][si].iter().enumerate() {
            let med = |xs: &[f64]| stats::median(xs).map_or("–".to_string(), units::ms);
            let saved = cell.ttfb_saved_ms().map_or("–".to_string(), |d| {
                if cond.rtt_ms > 0.0 {
                    format!("{} ({})", units::ms(d), units::rtts(d / cond.rtt_ms))
                } else {
                    units::ms(d)
                }
            });
            let _ = writeln!(
                out,
                "<tr><td>{}</td><td><span class=\"swatch\" style=\"background:{}\"></span>{}</td>\
                 <td>{}</td><td>{}</td><td>{}</td><td>{} of {}</td><td>{} / {}</td></tr>",
                esc(&cond.name),
                arm_colour(ai),
                esc(&camp.arms[ai].name),
                med(&cell.first_ttfb_ms),
                med(&cell.later_ttfb_ms),
                saved,
                cell.resumed,
                cell.later,
                cell.zero_rtt_accepted,
                cell.zero_rtt_attempted,
            );
        }
    }
    out.push_str("</tbody></table>\n");
}

fn ttlb_cdfs(out: &mut String, an: &Analysis, cells: &[Vec<Vec<RepeatCell>>], si: usize) {
    let camp = an.campaign;
    let _ = writeln!(
        out,
        "<details><summary>TTFB and TTLB distributions of the later requests, {}</summary>",
        esc(&units::size(camp.sizes[si]))
    );
    for (ci, cond) in camp.conditions.iter().enumerate() {
        let _ = writeln!(
            out,
            "<h4>{} <span class=\"muted\">{}</span></h4><div class=\"charts\">",
            esc(&cond.name),
            esc(&cond.label)
        );
        for f in cdf_figures(an, cells, ci, si, false) {
            out.push_str(&f.html());
        }
        out.push_str("</div>\n");
    }
    out.push_str("</details>\n");
}

/// The TTFB and TTLB CDFs of the later requests under condition `ci` at size `si`.
fn cdf_figures(
    an: &Analysis,
    cells: &[Vec<Vec<RepeatCell>>],
    ci: usize,
    si: usize,
    with_csv: bool,
) -> Vec<Figure> {
    let camp = an.campaign;
    let cond = &camp.conditions[ci];
    type Pick = fn(&RepeatCell) -> &Vec<f64>;
    let charts: [(&str, &str, &str, Pick); 2] = [
        ("TTFB", "time to first byte (ms)", "ttfb_ms", |c| {
            &c.later_ttfb_ms
        }),
        ("TTLB", "time to last byte (ms)", "ttlb_ms", |c| {
            &c.later_ttlb_ms
        }),
    ];
    charts
        .into_iter()
        .map(|(what, x_label, column, pick)| {
            let series: Vec<Series> = cells[ci][si]
                .iter()
                .enumerate()
                .map(|(ai, cell)| Series {
                    label: camp.arms[ai].name.clone(),
                    colour: arm_colour(ai),
                    values: pick(cell).clone(),
                })
                .collect();
            let title = format!("{what} CDF, {}", cond.name);
            Figure {
                name: format!(
                    "repeat-{}-{}-{}-cdf",
                    slug(&units::size(camp.sizes[si])),
                    slug(&cond.name),
                    what.to_lowercase()
                ),
                svg: cdf(&title, 400.0, 260.0, x_label, &series),
                title: format!("{title}, {}", units::size(camp.sizes[si])),
                caption: format!(
                    "{what} of the requests after the first: the fraction finished by each time."
                ),
                csv: csv_if(with_csv, || cdf_csv(&series, "arm", column)),
            }
        })
        .collect()
}

/// Every chart of the section, in the page's order, with the values drawn as CSV when
/// `with_csv`.
pub(crate) fn figures(an: &Analysis, with_csv: bool) -> Vec<Figure> {
    let camp = an.campaign;
    if !matches!(camp.workload, Workload::Repeat { .. })
        || camp.arms.is_empty()
        || camp.conditions.is_empty()
    {
        return Vec::new();
    }
    let cells = cells(an);
    let mut out = Vec::new();
    for si in 0..camp.sizes.len() {
        out.push(throughput_figure(an, &cells, si, with_csv));
        for ci in 0..camp.conditions.len() {
            out.extend(cdf_figures(an, &cells, ci, si, with_csv));
        }
    }
    out
}

/// Sentences: per arm, how many later requests resumed and went 0-RTT, and how much earlier
/// their first byte came, in round trips, across conditions.
fn findings(out: &mut String, an: &Analysis, cells: &[Vec<Vec<RepeatCell>>]) {
    let camp = an.campaign;
    out.push_str("<ul class=\"findings\">\n");
    for (ai, arm) in camp.arms.iter().enumerate() {
        let mut total = RepeatCell::default();
        let mut saved_rtts = Vec::new();
        for (ci, by_size) in cells.iter().enumerate() {
            for by_arm in by_size {
                let cell = &by_arm[ai];
                total.later += cell.later;
                total.resumed += cell.resumed;
                total.zero_rtt_attempted += cell.zero_rtt_attempted;
                total.zero_rtt_accepted += cell.zero_rtt_accepted;
                let rtt = camp.conditions[ci].rtt_ms;
                if let (Some(d), true) = (cell.ttfb_saved_ms(), rtt > 0.0) {
                    saved_rtts.push(d / rtt);
                }
            }
        }
        if total.later == 0 {
            continue;
        }
        let mut s = format!(
            "<li><strong>{}</strong>: {} of {} later requests resumed their TLS session",
            esc(&arm.name),
            total.resumed,
            total.later
        );
        if total.zero_rtt_attempted > 0 {
            let _ = write!(
                s,
                "; {} sent their request as 0-RTT data and {} of those were accepted",
                total.zero_rtt_attempted, total.zero_rtt_accepted
            );
        }
        if let (Some(lo), Some(hi)) = (
            saved_rtts.iter().copied().reduce(f64::min),
            saved_rtts.iter().copied().reduce(f64::max),
        ) {
            let _ = write!(
                s,
                ". Their median first byte came {} earlier than the first request's \
                 (full handshake), over {} condition{} and size{}",
                if (hi - lo).abs() < 0.05 {
                    units::rtts(lo)
                } else {
                    format!("{}–{}", units::number(lo, 2), units::rtts(hi))
                },
                camp.conditions.len(),
                if camp.conditions.len() == 1 { "" } else { "s" },
                if camp.sizes.len() == 1 { "" } else { "s" },
            );
        }
        s.push_str(".</li>\n");
        out.push_str(&s);
    }
    out.push_str("</ul>\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(ttfb: f64, ttlb: f64, later: bool) -> RequestMetrics {
        RequestMetrics {
            bytes: 250_000,
            ttfb_ms: ttfb,
            ttlb_ms: ttlb,
            new_connection: true,
            resumed: later,
            zero_rtt_attempted: later,
            zero_rtt_accepted: later,
            ..Default::default()
        }
    }

    #[test]
    fn comparisons_need_a_significant_difference() {
        let cell = |mbps: &[f64]| RepeatCell {
            throughput_mbps: mbps.to_vec(),
            ..Default::default()
        };
        let a = cell(&[10.0, 11.0, 12.0, 10.5, 11.5, 10.2]);
        let b = cell(&[14.0, 15.0, 16.0, 14.5, 15.5, 14.2]);
        // every b above every a: exact p = 2 / C(12, 6) = 0.002
        assert_eq!(compare(&a, &b).unwrap().2, Verdict::Faster);
        assert_eq!(compare(&b, &a).unwrap().2, Verdict::Slower);
        let (ma, mb, _) = compare(&a, &b).unwrap();
        assert!((ma - 10.866).abs() < 0.01 && (mb - 14.866).abs() < 0.01);
        // interleaved samples: no clear difference
        let c = cell(&[10.1, 11.1, 12.1, 10.4, 11.6, 10.3]);
        assert_eq!(compare(&a, &c).unwrap().2, Verdict::NoClearDifference);
        // every one above, but by 1 %: too small to count
        let d = cell(
            &a.throughput_mbps
                .iter()
                .map(|v| v * 1.01)
                .collect::<Vec<_>>(),
        );
        assert_eq!(compare(&a, &d).unwrap().2, Verdict::NoClearDifference);
        assert_eq!(compare(&a, &RepeatCell::default()), None);
    }

    #[test]
    fn a_cell_separates_first_and_later_requests() {
        let mut cell = RepeatCell::default();
        // 250 kB in 200 ms = 10 Mbit/s; 250 kB in 100 ms = 20 Mbit/s
        cell.add_trial(&[req(100.0, 200.0, false), req(50.0, 100.0, true)]);
        cell.add_trial(&[req(102.0, 200.0, false), req(52.0, 100.0, true)]);
        assert_eq!(cell.throughput_mbps, vec![10.0, 20.0, 10.0, 20.0]);
        assert_eq!(cell.mean_throughput(), Some(15.0));
        assert_eq!(cell.first_ttfb_ms, vec![100.0, 102.0]);
        assert_eq!(cell.later_ttlb_ms, vec![100.0, 100.0]);
        assert_eq!(cell.ttfb_saved_ms(), Some(50.0));
        assert_eq!(
            (
                cell.later,
                cell.resumed,
                cell.zero_rtt_attempted,
                cell.zero_rtt_accepted
            ),
            (2, 2, 2, 2)
        );
        assert_eq!(RepeatCell::default().mean_throughput(), None);
        assert_eq!(RepeatCell::default().ttfb_saved_ms(), None);
    }
}
