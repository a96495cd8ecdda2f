//! The HLS study's view of a segments campaign (S3, after Akamai 2017): per arm and impairment
//! pattern, the mean throughput per segment in normal and in impaired runs and the drop ratio
//! `1 - impaired / normal`; bar charts of the same; the throughput of every segment of each
//! arm's median trial; and a playback estimate (start-up delay, stalls) for a stream at the
//! plan's rate with the plan's player buffer.
//!
//! Contract: renders only for `Workload::Segments` campaigns, as a pure function of the
//! analysis. A segment's throughput is its bytes x 8 over its download time, from sending its
//! request to its last byte on the reused connection. "Normal" is the campaign's interleaved
//! baseline condition, or its first condition when none is interleaved; every other condition is
//! a pattern. An impaired trial's partner is the normal trial of the same arm, iteration and size
//! that ran just before it (interleaved) or in the same iteration; intervals resample these
//! pairs, so a round's drift affects both sides of its pair.

use std::collections::BTreeMap;
use std::fmt::Write;

use quiclab_model::csv::Table;

use crate::analysis::{Analysis, MIN_TRIALS, metrics};
use crate::chart::{
    self, Bar, BarGroup, BarSpec, LegendEntry, Mark, Ticks, XySpec, arm_colour, arm_legend, c,
    empty_chart, polyline, reference_line, svg_close, xy_frame,
};
use crate::figures::{Figure, csv_if, slug};
use crate::html::esc;
use crate::model::{Campaign, Trial, Workload};
use crate::playback::{self, Arrival, Playback};
use crate::stats::{self, Interval};
use crate::units;

const W: f64 = 400.0;
const H: f64 = 270.0;

/// A successful trial's segments.
#[derive(Debug, Clone)]
pub struct Segments<'a> {
    pub trial: &'a Trial,
    /// Throughput of each segment in order, Mbit/s.
    pub mbps: Vec<f64>,
    /// Their mean.
    pub mean_mbps: f64,
    /// Each segment's size and arrival, for the playback estimate.
    pub arrivals: Vec<Arrival>,
}

/// The segments of a trial, if it succeeded and recorded every request with a download time.
pub fn segments(t: &Trial) -> Option<Segments<'_>> {
    let reqs = &metrics(t)?.detail.requests;
    if reqs.is_empty() || reqs.iter().any(|r| r.ttlb_ms.is_nan() || r.ttlb_ms <= 0.0) {
        return None;
    }
    let mbps: Vec<f64> = reqs
        .iter()
        .map(|r| r.bytes as f64 * 8.0 / r.ttlb_ms / 1000.0)
        .collect();
    Some(Segments {
        trial: t,
        mean_mbps: mbps.iter().sum::<f64>() / mbps.len() as f64,
        mbps,
        arrivals: reqs
            .iter()
            .map(|r| Arrival {
                bytes: r.bytes,
                done_ms: r.start_ms + r.ttlb_ms,
            })
            .collect(),
    })
}

/// Mean throughput over every segment of `trials`, Mbit/s.
fn pooled_mean(trials: &[Segments]) -> Option<f64> {
    let n: usize = trials.iter().map(|s| s.mbps.len()).sum();
    (n > 0).then(|| trials.iter().flat_map(|s| &s.mbps).sum::<f64>() / n as f64)
}

/// The normal condition: the interleaved baseline, else the first.
pub fn baseline(c: &Campaign) -> Option<usize> {
    match &c.interleave {
        Some(name) => c.conditions.iter().position(|k| &k.name == name),
        None => (!c.conditions.is_empty()).then_some(0),
    }
}

/// One arm under one impairment pattern.
#[derive(Debug, Clone)]
pub struct PatternRow<'a> {
    pub condition: usize,
    pub arm: usize,
    /// Successful normal and impaired trials.
    pub normal: Vec<Segments<'a>>,
    pub impaired: Vec<Segments<'a>>,
    pub normal_mbps: Option<f64>,
    pub impaired_mbps: Option<f64>,
    /// `1 - impaired / normal`.
    pub drop: Option<f64>,
    /// (normal, impaired) mean throughput of each round in which both succeeded.
    pub pairs: Vec<(f64, f64)>,
    /// Bootstrap 95 % interval of the drop, resampling rounds ([`MIN_TRIALS`] or more).
    pub ci: Option<Interval>,
    /// Smallest and largest drop of a single round (2 rounds or more).
    pub spread: Option<(f64, f64)>,
}

/// Seed of the interval of an arm's drop under a pattern.
fn drop_seed(arm: &str, condition: &str) -> u64 {
    stats::seed_from(&["segments-drop", arm, condition])
}

/// Successful trials of `arm` under `condition`, all sizes, with their segments.
fn trials_of<'a>(an: &Analysis<'a>, condition: usize, arm: usize) -> Vec<Segments<'a>> {
    (0..an.campaign.sizes.len())
        .flat_map(|s| an.cell(condition, s, arm).ok.clone())
        .filter_map(segments)
        .collect()
}

/// Every (pattern, arm) row, patterns in plan order.
pub fn rows<'a>(an: &Analysis<'a>) -> Vec<PatternRow<'a>> {
    let camp = an.campaign;
    let Some(base) = baseline(camp) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for (ci, cond) in camp.conditions.iter().enumerate() {
        if ci == base {
            continue;
        }
        for arm in 0..camp.arms.len() {
            let normal: Vec<Segments> = trials_of(an, base, arm)
                .into_iter()
                .filter(|s| {
                    camp.interleave.is_none() || s.trial.before.as_ref() == Some(&cond.name)
                })
                .collect();
            let impaired = trials_of(an, ci, arm);
            let by_round: BTreeMap<(u32, u64), f64> = normal
                .iter()
                .map(|s| ((s.trial.iteration, s.trial.size), s.mean_mbps))
                .collect();
            let pairs: Vec<(f64, f64)> = impaired
                .iter()
                .filter_map(|s| {
                    by_round
                        .get(&(s.trial.iteration, s.trial.size))
                        .map(|&n| (n, s.mean_mbps))
                })
                .collect();
            let (normal_mbps, impaired_mbps) = (pooled_mean(&normal), pooled_mean(&impaired));
            let drop = match (normal_mbps, impaired_mbps) {
                (Some(n), Some(i)) if n > 0.0 => Some(1.0 - i / n),
                _ => None,
            };
            let interval = (pairs.len() >= MIN_TRIALS)
                .then(|| {
                    let (a, b): (Vec<f64>, Vec<f64>) = pairs.iter().copied().unzip();
                    stats::bootstrap_paired_ratio_ci(
                        &a,
                        &b,
                        drop_seed(&camp.arms[arm].name, &cond.name),
                    )
                })
                .flatten()
                .map(|r| Interval {
                    lo: 1.0 - r.hi,
                    hi: 1.0 - r.lo,
                });
            let round_drops: Vec<f64> = pairs
                .iter()
                .filter(|(n, _)| *n > 0.0)
                .map(|(n, i)| 1.0 - i / n)
                .collect();
            let spread = (round_drops.len() >= 2).then(|| {
                round_drops
                    .iter()
                    .fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), &d| {
                        (l.min(d), h.max(d))
                    })
            });
            out.push(PatternRow {
                condition: ci,
                arm,
                normal,
                impaired,
                normal_mbps,
                impaired_mbps,
                drop,
                pairs,
                ci: interval,
                spread,
            });
        }
    }
    out
}

/// Smallest drop of the baseline arm for which a ratio of drops is given: below it, the ratio
/// of two small numbers says more about run-to-run noise than about the transports (the study's
/// heatmaps leave changes within 5 % blank for the same reason).
pub const MIN_DROP_FOR_RATIO: f64 = 0.05;

/// `drop_b / drop_a` when a's drop is at least [`MIN_DROP_FOR_RATIO`] and told apart from 0 (its
/// interval, or with fewer rounds its range, above 0).
pub fn drop_ratio(a: &PatternRow, b: &PatternRow) -> Option<f64> {
    let (da, db) = (a.drop?, b.drop?);
    let above_zero = match (a.ci, a.spread) {
        (Some(ci), _) => ci.lo > 0.0,
        (None, Some((lo, _))) => lo > 0.0,
        (None, None) => true,
    };
    (above_zero && da >= MIN_DROP_FOR_RATIO).then(|| db / da)
}

/// The trial whose mean throughput is the (lower) median, ties by iteration then id.
fn median_trial<'s, 'a>(trials: &'s [Segments<'a>]) -> Option<&'s Segments<'a>> {
    let mut v: Vec<&Segments> = trials.iter().collect();
    v.sort_by(|x, y| {
        x.mean_mbps
            .total_cmp(&y.mean_mbps)
            .then(x.trial.iteration.cmp(&y.trial.iteration))
            .then(x.trial.id.cmp(&y.trial.id))
    });
    (!v.is_empty()).then(|| v[(v.len() - 1) / 2])
}

/// A throughput, e.g. "34.2".
fn mbps(v: f64) -> String {
    units::number(v, 1)
}

/// A drop ratio as a percentage, e.g. "47 %", "−2.1 %".
fn pct(v: f64) -> String {
    let p = v * 100.0;
    format!("{} %", units::number(p, if p.abs() < 10.0 { 1 } else { 0 }))
}

fn interval_text(r: &PatternRow) -> String {
    match (r.ci, r.spread) {
        (Some(ci), _) => format!("{} to {} (95 % CI)", pct(ci.lo), pct(ci.hi)),
        (None, Some((lo, hi))) => format!("{} to {} (rounds)", pct(lo), pct(hi)),
        _ => "—".into(),
    }
}

fn swatch(arm: usize) -> String {
    format!(
        "<span class=\"swatch\" style=\"background:{}\"></span>",
        arm_colour(arm)
    )
}

pub fn render(an: &Analysis) -> Option<String> {
    let camp = an.campaign;
    let Workload::Segments {
        count,
        min_bytes,
        max_bytes,
        stream_rate_bps,
        player_buffer_ms,
    } = camp.workload
    else {
        return None;
    };
    let base = baseline(camp)?;
    let rows = rows(an);
    let rate = camp.conditions[base]
        .rate_bps
        .map(|r| format!(" on a {} Mbit/s link", units::number(r as f64 / 1e6, 0)))
        .unwrap_or_default();
    let mut out = String::new();
    let _ = writeln!(
        out,
        "<p class=\"caption\">Each trial fetches {count} segments of {} to {} one after another \
         on one connection{rate}. A segment's throughput is its size over its download time \
         (request sent to last byte); the table gives the mean over every segment of the \
         successful trials, as the study did. <em>Normal</em> is condition <strong>{}</strong>{}. \
         Drop ratio = 1 − impaired / normal. The interval resamples rounds (a normal trial \
         with its impaired partner) when there are {MIN_TRIALS} or more (a rough interval with \
         few rounds), else it is the range of single rounds' drops.</p>",
        esc(&units::size(min_bytes)),
        esc(&units::size(max_bytes)),
        esc(&camp.conditions[base].name),
        if camp.interleave.is_some() {
            ", run just before every impaired trial with the same arm and segment sizes \
             (normal, impaired, normal, impaired, ...): each pattern is compared with its own \
             normal runs"
        } else {
            ", run in the same iterations as the others"
        },
    );
    if rows.is_empty() {
        out.push_str("<p class=\"muted\">The campaign has no condition besides normal.</p>\n");
        return Some(out);
    }
    study_table(&mut out, an, &rows);
    let mut figs = figures_of(an, &rows, base, stream_rate_bps, false).into_iter();
    out.push_str("<div class=\"charts\">\n");
    for f in figs.by_ref().take(2) {
        out.push_str(&f.html());
    }
    out.push_str("</div>\n");
    detail_table(&mut out, an, &rows);
    out.push_str("<h3>Throughput per segment</h3>\n<div class=\"charts\">\n");
    for f in figs {
        out.push_str(&f.html());
    }
    out.push_str("</div>\n");
    playback_table(&mut out, an, base, stream_rate_bps, player_buffer_ms);
    Some(out)
}

/// Every chart of the section, in the page's order, with the values drawn as CSV when
/// `with_csv`; none when the section is not shown or has no impaired pattern.
pub(crate) fn figures(an: &Analysis, with_csv: bool) -> Vec<Figure> {
    let camp = an.campaign;
    let Workload::Segments {
        stream_rate_bps, ..
    } = camp.workload
    else {
        return Vec::new();
    };
    let Some(base) = baseline(camp) else {
        return Vec::new();
    };
    let rows = rows(an);
    if rows.is_empty() {
        return Vec::new();
    }
    figures_of(an, &rows, base, stream_rate_bps, with_csv)
}

/// The throughput and drop charts, then each condition's series (normal first).
fn figures_of(
    an: &Analysis,
    rows: &[PatternRow],
    base: usize,
    stream_rate_bps: u64,
    with_csv: bool,
) -> Vec<Figure> {
    let camp = an.campaign;
    let mut out = vec![
        throughput_chart(an, rows, with_csv),
        drop_chart(an, rows, with_csv),
    ];
    for ci in std::iter::once(base).chain((0..camp.conditions.len()).filter(|&c| c != base)) {
        out.push(series_chart(an, ci, base, stream_rate_bps, with_csv));
    }
    out
}

fn row_for<'r, 'a>(
    rows: &'r [PatternRow<'a>],
    ci: usize,
    arm: usize,
) -> Option<&'r PatternRow<'a>> {
    rows.iter().find(|r| r.condition == ci && r.arm == arm)
}

fn patterns(rows: &[PatternRow]) -> Vec<usize> {
    let mut v: Vec<usize> = rows.iter().map(|r| r.condition).collect();
    v.dedup();
    v
}

/// The study's table: a row per pattern, the drop of every arm, and per comparison the ratio
/// of the drops.
fn study_table(out: &mut String, an: &Analysis, rows: &[PatternRow]) {
    let camp = an.campaign;
    let cmps: Vec<(usize, usize)> = an.comparisons.iter().map(|c| (c.a, c.b)).collect();
    out.push_str("<table class=\"segments-study\"><thead><tr><th>pattern</th>");
    for (i, a) in camp.arms.iter().enumerate() {
        let _ = write!(
            out,
            "<th class=\"num\">{}{} drop</th>",
            swatch(i),
            esc(&a.name)
        );
    }
    for (a, b) in &cmps {
        let _ = write!(
            out,
            "<th class=\"num\">{} drop / {} drop</th>",
            esc(&camp.arms[*b].name),
            esc(&camp.arms[*a].name)
        );
    }
    out.push_str("</tr></thead><tbody>");
    // (computed ratios, those of a third or less as "pattern (b / a)")
    let (mut computed, mut third): (usize, Vec<String>) = (0, Vec::new());
    for ci in patterns(rows) {
        let cond = &camp.conditions[ci];
        let _ = write!(out, "<tr><td>{}</td>", esc(&cond.name));
        for arm in 0..camp.arms.len() {
            let cell = row_for(rows, ci, arm)
                .and_then(|r| r.drop.map(|d| (d, interval_text(r))))
                .map(|(d, i)| {
                    format!(
                        "<strong>{}</strong><br><span class=\"muted\">{i}</span>",
                        pct(d)
                    )
                })
                .unwrap_or_else(|| "—".into());
            let _ = write!(out, "<td class=\"num\">{cell}</td>");
        }
        for (a, b) in &cmps {
            let ratio = row_for(rows, ci, *a)
                .zip(row_for(rows, ci, *b))
                .and_then(|(ra, rb)| drop_ratio(ra, rb));
            let _ = write!(
                out,
                "<td class=\"num\">{}</td>",
                ratio
                    .map(|r| units::number(r, 2))
                    .unwrap_or_else(|| "—".into())
            );
            if let Some(r) = ratio {
                computed += 1;
                if r <= 1.0 / 3.0 {
                    third.push(format!(
                        "{} ({} / {})",
                        esc(&cond.name),
                        esc(&camp.arms[*b].name),
                        esc(&camp.arms[*a].name)
                    ));
                }
            }
        }
        out.push_str("</tr>");
    }
    out.push_str("</tbody></table>\n");
    if !cmps.is_empty() {
        let _ = writeln!(
            out,
            "<p class=\"caption\">The study found QUIC's drop one third or less of TCP's in every \
             pattern except inbound loss. The ratio columns give b's drop over a's where a's drop \
             is {} or more and above 0 beyond its interval; {}.</p>",
            pct(MIN_DROP_FOR_RATIO),
            match (computed, third.len()) {
                (0, _) => "none could be computed here".to_string(),
                (m, 0) => format!("none of the {m} computed here is a third or less"),
                (m, k) => format!(
                    "{k} of the {m} computed here {} a third or less: {}",
                    if k == 1 { "is" } else { "are" },
                    third.join(", ")
                ),
            }
        );
    }
}

fn detail_table(out: &mut String, an: &Analysis, rows: &[PatternRow]) {
    let camp = an.campaign;
    out.push_str(
        "<table class=\"segments-detail\"><thead><tr><th>pattern</th><th>arm</th>\
         <th class=\"num\">normal trials</th><th class=\"num\">normal Mbit/s</th>\
         <th class=\"num\">impaired trials</th><th class=\"num\">impaired Mbit/s</th>\
         <th class=\"num\">drop</th><th class=\"num\">interval</th><th class=\"num\">rounds</th>\
         </tr></thead><tbody>",
    );
    for r in rows {
        let opt = |v: Option<f64>| v.map(mbps).unwrap_or_else(|| "—".into());
        let _ = write!(
            out,
            "<tr><td>{}</td><td>{}{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td>\
             <td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\"><strong>{}</strong></td>\
             <td class=\"num\">{}</td><td class=\"num\">{}</td></tr>",
            esc(&camp.conditions[r.condition].name),
            swatch(r.arm),
            esc(&camp.arms[r.arm].name),
            r.normal.len(),
            opt(r.normal_mbps),
            r.impaired.len(),
            opt(r.impaired_mbps),
            r.drop.map(pct).unwrap_or_else(|| "—".into()),
            interval_text(r),
            r.pairs.len(),
        );
    }
    out.push_str("</tbody></table>\n");
}

/// The largest link rate among the conditions, Mbit/s.
fn link_mbps(camp: &Campaign) -> Option<f64> {
    camp.conditions
        .iter()
        .filter_map(|c| c.rate_bps)
        .max()
        .map(|r| r as f64 / 1e6)
}

fn throughput_chart(an: &Analysis, rows: &[PatternRow], with_csv: bool) -> Figure {
    let camp = an.campaign;
    let pats = patterns(rows);
    let top = rows
        .iter()
        .flat_map(|r| [r.normal_mbps, r.impaired_mbps])
        .flatten()
        .chain(link_mbps(camp))
        .fold(0.0, f64::max);
    let groups = pats
        .iter()
        .map(|&ci| BarGroup {
            label: camp.conditions[ci].name.clone(),
            bars: (0..camp.arms.len())
                .flat_map(|arm| {
                    let r = row_for(rows, ci, arm);
                    let name = &camp.arms[arm].name;
                    [
                        Bar {
                            value: r.and_then(|r| r.normal_mbps),
                            colour: arm_colour(arm).into(),
                            hollow: true,
                            whisker: None,
                            title: format!(
                                "{name}, normal before {}: {} Mbit/s",
                                camp.conditions[ci].name,
                                r.and_then(|r| r.normal_mbps).map(mbps).unwrap_or_default()
                            ),
                        },
                        Bar {
                            value: r.and_then(|r| r.impaired_mbps),
                            colour: arm_colour(arm).into(),
                            hollow: false,
                            whisker: None,
                            title: format!(
                                "{name}, {}: {} Mbit/s",
                                camp.conditions[ci].name,
                                r.and_then(|r| r.impaired_mbps)
                                    .map(mbps)
                                    .unwrap_or_default()
                            ),
                        },
                    ]
                })
                .collect(),
        })
        .collect();
    let references = link_mbps(camp)
        .map(|l| {
            vec![(
                l,
                "#888888".to_string(),
                format!("link {} Mbit/s", units::number(l, 0)),
            )]
        })
        .unwrap_or_default();
    let spec = BarSpec {
        width: (160.0 * pats.len() as f64).clamp(W, 900.0),
        height: H + 20.0,
        title: "Mean throughput per segment, normal and impaired".into(),
        y_label: "Mbit/s (mean per segment)".into(),
        y: Ticks::new(0.0, top * 1.05, 5),
        groups,
        legend: arm_legend(camp, Mark::Dot),
        references,
    };
    Figure {
        name: "segments-throughput".into(),
        title: spec.title.clone(),
        svg: chart::grouped_bars(&spec),
        caption: "Mean throughput per segment per pattern: for each arm its normal runs (pale) \
                  and its impaired runs (solid); dashed, the link's rate."
            .into(),
        csv: csv_if(with_csv, || {
            let mut t = Table::new(&["pattern", "arm", "normal_mbps", "impaired_mbps"]);
            for &ci in &pats {
                for (arm, a) in camp.arms.iter().enumerate() {
                    let Some(r) = row_for(rows, ci, arm) else {
                        continue;
                    };
                    let v = |x: Option<f64>| x.map(|x| x.to_string()).unwrap_or_default();
                    t.row(&[
                        camp.conditions[ci].name.clone(),
                        a.name.clone(),
                        v(r.normal_mbps),
                        v(r.impaired_mbps),
                    ]);
                }
            }
            t
        }),
    }
}

fn drop_chart(an: &Analysis, rows: &[PatternRow], with_csv: bool) -> Figure {
    let camp = an.campaign;
    let pats = patterns(rows);
    let ends = rows.iter().flat_map(|r| {
        let w = r.ci.map(|i| (i.lo, i.hi)).or(r.spread);
        [r.drop, w.map(|w| w.0), w.map(|w| w.1)]
    });
    let (lo, hi) = ends
        .flatten()
        .fold((0.0f64, 0.0f64), |(l, h), v| (l.min(v), h.max(v)));
    let groups = pats
        .iter()
        .map(|&ci| BarGroup {
            label: camp.conditions[ci].name.clone(),
            bars: (0..camp.arms.len())
                .map(|arm| {
                    let r = row_for(rows, ci, arm);
                    Bar {
                        value: r.and_then(|r| r.drop).map(|d| d * 100.0),
                        colour: arm_colour(arm).into(),
                        hollow: false,
                        whisker: r.and_then(|r| {
                            r.ci.map(|i| (i.lo * 100.0, i.hi * 100.0))
                                .or(r.spread.map(|(l, h)| (l * 100.0, h * 100.0)))
                        }),
                        title: format!(
                            "{}, {}: drop {}{}",
                            camp.arms[arm].name,
                            camp.conditions[ci].name,
                            r.and_then(|r| r.drop)
                                .map(pct)
                                .unwrap_or_else(|| "—".into()),
                            r.map(|r| format!(", {}", interval_text(r)))
                                .unwrap_or_default()
                        ),
                    }
                })
                .collect(),
        })
        .collect();
    let spec = BarSpec {
        width: (110.0 * pats.len() as f64).clamp(W, 900.0),
        height: H + 20.0,
        title: "Throughput drop ratio per pattern".into(),
        y_label: "drop: 1 − impaired / normal (%)".into(),
        y: Ticks::new(lo * 100.0, (hi * 100.0).max(10.0), 5),
        groups,
        legend: arm_legend(camp, Mark::Dot),
        references: Vec::new(),
    };
    Figure {
        name: "segments-drop".into(),
        title: spec.title.clone(),
        svg: chart::grouped_bars(&spec),
        caption: "Drop ratio per pattern and arm (the study's table as bars); whiskers: the 95 % \
                  interval over rounds, or the range of single rounds' drops when there are too \
                  few for one."
            .into(),
        csv: csv_if(with_csv, || spec.csv("pattern", "arm")),
    }
}

/// An axis from segment 1 to segment `n` with ticks on whole segments, at most about 8.
fn segment_ticks(n: usize) -> Ticks {
    let n = n.max(2);
    let step = match (n - 1).div_ceil(8) {
        0 | 1 => 1,
        2 => 2,
        3..=5 => 5,
        k => k.div_ceil(10) * 10,
    };
    Ticks {
        lo: 1.0,
        hi: n as f64,
        step: step as f64,
        values: (1..=n).step_by(step).map(|i| i as f64).collect(),
    }
}

/// Throughput per segment index of each arm's median trial under one condition.
fn series_chart(
    an: &Analysis,
    ci: usize,
    base: usize,
    stream_rate_bps: u64,
    with_csv: bool,
) -> Figure {
    let camp = an.campaign;
    let cond = &camp.conditions[ci];
    let title = format!("Throughput per segment, {}", cond.name);
    let name = format!("segments-{}-series", slug(&cond.name));
    let chosen: Vec<(usize, Vec<Segments>)> = (0..camp.arms.len())
        .map(|arm| (arm, trials_of(an, ci, arm)))
        .collect();
    let medians: Vec<(usize, &Segments)> = chosen
        .iter()
        .filter_map(|(arm, ts)| median_trial(ts).map(|m| (*arm, m)))
        .collect();
    let csv = csv_if(with_csv, || {
        let mut t = Table::new(&["arm", "iteration", "trial_id", "segment", "mbps"]);
        for (arm, m) in &medians {
            for (i, v) in m.mbps.iter().enumerate() {
                t.row(&[
                    camp.arms[*arm].name.clone(),
                    m.trial.iteration.to_string(),
                    m.trial.id.clone(),
                    (i + 1).to_string(),
                    v.to_string(),
                ]);
            }
        }
        t
    });
    if medians.is_empty() {
        return Figure {
            name,
            svg: empty_chart(&title, W, H, "no successful trial"),
            title,
            caption: format!("{}: no successful trial.", esc(&cond.name)),
            csv,
        };
    }
    let n = medians.iter().map(|(_, m)| m.mbps.len()).max().unwrap_or(1);
    let top = medians
        .iter()
        .flat_map(|(_, m)| m.mbps.iter().copied())
        .chain(link_mbps(camp))
        .fold(0.0, f64::max);
    let legend = medians
        .iter()
        .map(|(arm, m)| LegendEntry {
            label: format!(
                "{} (it. {}, mean {})",
                camp.arms[*arm].name,
                m.trial.iteration,
                mbps(m.mean_mbps)
            ),
            colour: arm_colour(*arm).to_string(),
            mark: Mark::Line,
        })
        .collect();
    let spec = XySpec {
        width: W,
        height: H,
        title: title.clone(),
        x_label: "segment".into(),
        y_label: "Mbit/s".into(),
        x: segment_ticks(n),
        y: Ticks::new(0.0, top * 1.05, 5),
        legend,
        right_band: 0.0,
    };
    let mut out = String::new();
    let frame = xy_frame(&mut out, &spec);
    if let Some(l) = link_mbps(camp) {
        reference_line(&mut out, &frame, l, "#888888", "link");
    }
    let stream = stream_rate_bps as f64 / 1e6;
    reference_line(
        &mut out,
        &frame,
        stream,
        "#a33333",
        &format!("stream {}", units::number(stream, 1)),
    );
    for (arm, m) in &medians {
        let pts: Vec<(f64, f64)> = m
            .mbps
            .iter()
            .enumerate()
            .map(|(i, v)| (frame.px((i + 1) as f64), frame.py(*v)))
            .collect();
        polyline(&mut out, &pts, arm_colour(*arm), 2.0);
        for (i, (x, y)) in pts.iter().enumerate() {
            let _ = write!(
                out,
                r#"<circle cx="{}" cy="{}" r="2.5" fill="{}"><title>{} segment {}: {} Mbit/s</title></circle>"#,
                c(*x),
                c(*y),
                arm_colour(*arm),
                esc(&camp.arms[*arm].name),
                i + 1,
                mbps(m.mbps[i])
            );
        }
    }
    svg_close(&mut out);
    let which = if ci == base && camp.interleave.is_some() {
        " (all normal runs, whichever pattern they preceded)"
    } else {
        ""
    };
    Figure {
        name,
        title,
        svg: out,
        caption: format!(
            "{}{which}: throughput of each segment in each arm's median trial (by mean \
             throughput); dashed, the link's rate and the stream's.",
            esc(&cond.name)
        ),
        csv,
    }
}

/// The playback estimate of every trial, summarised per condition and arm.
fn playback_table(
    out: &mut String,
    an: &Analysis,
    base: usize,
    stream_rate_bps: u64,
    player_buffer_ms: u64,
) {
    let camp = an.campaign;
    let _ = write!(
        out,
        "<h3>Playback estimate</h3>\n<p class=\"caption\">A player of a {} Mbit/s stream (a \
         segment of <em>b</em> bytes holds <em>b</em> × 8 / {} Mbit/s of video) fetching the \
         segments as the trial did, which starts playing once it holds {} of video and stalls \
         whenever the next segment has not fully arrived when the previous one has played out, \
         resuming as soon as it has. Start-up is from the first request; medians over trials, \
         maxima in brackets. The stream rate and the buffer are the plan's <code>stream-rate</code> \
         and <code>player-buffer</code>.</p>\n\
         <table class=\"segments-playback\"><thead><tr><th>condition</th><th>arm</th>\
         <th class=\"num\">trials</th><th class=\"num\">start-up</th>\
         <th class=\"num\">trials that stalled</th><th class=\"num\">stalls</th>\
         <th class=\"num\">stall time</th></tr></thead><tbody>",
        units::number(stream_rate_bps as f64 / 1e6, 1),
        units::number(stream_rate_bps as f64 / 1e6, 1),
        esc(&format!(
            "{} s",
            units::number(player_buffer_ms as f64 / 1000.0, 1)
        )),
    );
    let order = std::iter::once(base).chain((0..camp.conditions.len()).filter(|&c| c != base));
    for ci in order {
        for arm in 0..camp.arms.len() {
            let plays: Vec<Playback> = trials_of(an, ci, arm)
                .iter()
                .filter_map(|s| {
                    playback::simulate(&s.arrivals, stream_rate_bps, player_buffer_ms as f64)
                })
                .collect();
            let med = |f: fn(&Playback) -> f64| {
                let v: Vec<f64> = plays.iter().map(f).collect();
                stats::median(&v)
            };
            let max = |f: fn(&Playback) -> f64| plays.iter().map(f).fold(f64::NAN, f64::max);
            let stalled = plays.iter().filter(|p| p.stalls > 0).count();
            let cell = |m: Option<f64>, x: f64, fmt: fn(f64) -> String| match m {
                Some(m) => format!("{} ({})", fmt(m), fmt(x)),
                None => "—".into(),
            };
            let secs = |v: f64| format!("{} s", units::number(v / 1000.0, 1));
            let count = |v: f64| units::number(v, if v.fract() == 0.0 { 0 } else { 1 });
            let _ = write!(
                out,
                "<tr><td>{}</td><td>{}{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td>\
                 <td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td></tr>",
                esc(&camp.conditions[ci].name),
                swatch(arm),
                esc(&camp.arms[arm].name),
                plays.len(),
                cell(med(|p| p.startup_ms), max(|p| p.startup_ms), secs),
                if plays.is_empty() {
                    "—".into()
                } else {
                    format!("{stalled} of {}", plays.len())
                },
                cell(
                    med(|p| f64::from(p.stalls)),
                    max(|p| f64::from(p.stalls)),
                    count
                ),
                cell(med(|p| p.stall_ms), max(|p| p.stall_ms), secs),
            );
        }
    }
    out.push_str("</tbody></table>\n");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Arm, Comparison, Condition, Detail, Metrics, RequestMetrics};

    /// A trial of `n` segments of 4 MB, each downloaded at `mbps`, back to back.
    fn trial(arm: &str, cond: &str, it: u32, before: Option<&str>, mbps: f64, n: usize) -> Trial {
        let bytes = 4_000_000u64;
        let each_ms = bytes as f64 * 8.0 / mbps / 1000.0;
        Trial {
            id: format!("{arm}-{cond}-{it}-{before:?}"),
            arm: arm.into(),
            condition: cond.into(),
            size: bytes,
            iteration: it,
            seed: 0,
            before: before.map(str::to_string),
            outcome: Ok(Metrics {
                ttlb_ms: each_ms * n as f64,
                detail: Detail {
                    requests: (0..n)
                        .map(|i| RequestMetrics {
                            bytes,
                            start_ms: i as f64 * each_ms,
                            ttlb_ms: each_ms,
                            ..Default::default()
                        })
                        .collect(),
                    ..Detail::default()
                },
                ..Default::default()
            }),
            artifacts: None,
            host: None,
            started_unix_ms: 0,
            wall_ms: 0.0,
        }
    }

    fn campaign(trials: Vec<Trial>, interleave: bool) -> Campaign {
        let cond = |n: &str| Condition {
            name: n.into(),
            label: n.into(),
            rtt_ms: 20.0,
            rate_bps: Some(38_000_000),
            base: None,
        };
        let arm = |n: &str| Arm {
            name: n.into(),
            ..Default::default()
        };
        Campaign {
            arms: vec![arm("tcp"), arm("quic")],
            conditions: vec![cond("normal"), cond("in loss"), cond("out delay")],
            interleave: interleave.then(|| "normal".to_string()),
            workload: Workload::Segments {
                count: 4,
                min_bytes: 4_000_000,
                max_bytes: 4_000_000,
                stream_rate_bps: 6_000_000,
                player_buffer_ms: 10_000,
            },
            sizes: vec![4_000_000],
            comparisons: vec![Comparison {
                a: "tcp".into(),
                b: "quic".into(),
            }],
            trials,
            ..Default::default()
        }
    }

    #[test]
    fn drops_pair_each_pattern_with_the_normal_runs_before_it() {
        let mut ts = Vec::new();
        for it in 0..4 {
            // drift: normal runs get slower round by round, and the ones before "out delay"
            // are slower still; each impaired run is a fixed fraction of its own normal run
            let drift = 1.0 - 0.05 * f64::from(it);
            for (arm, in_frac, out_frac) in [("tcp", 0.2, 0.5), ("quic", 0.3, 0.9)] {
                ts.push(trial(arm, "normal", it, Some("in loss"), 36.0 * drift, 4));
                ts.push(trial(arm, "in loss", it, None, 36.0 * drift * in_frac, 4));
                ts.push(trial(arm, "normal", it, Some("out delay"), 30.0 * drift, 4));
                ts.push(trial(
                    arm,
                    "out delay",
                    it,
                    None,
                    30.0 * drift * out_frac,
                    4,
                ));
            }
        }
        let c = campaign(ts, true);
        let an = Analysis::new(&c);
        let rows = rows(&an);
        assert_eq!(rows.len(), 2 * 2, "two patterns x two arms");
        let get = |cond: usize, arm: usize| row_for(&rows, cond, arm).unwrap();
        for (cond, arm, frac) in [(1, 0, 0.2), (1, 1, 0.3), (2, 0, 0.5), (2, 1, 0.9)] {
            let r = get(cond, arm);
            assert_eq!((r.normal.len(), r.impaired.len(), r.pairs.len()), (4, 4, 4));
            assert!(
                (r.drop.unwrap() - (1.0 - frac)).abs() < 1e-9,
                "{:?}",
                r.drop
            );
            // every round has the same drop: the interval and the spread collapse onto it
            let ci = r.ci.unwrap();
            assert!((ci.lo - (1.0 - frac)).abs() < 1e-9 && (ci.hi - ci.lo).abs() < 1e-9);
            let (lo, hi) = r.spread.unwrap();
            assert!((hi - lo).abs() < 1e-9);
        }
        // the normal throughput of a pattern is that of its own normal runs
        let n = get(1, 0).normal_mbps.unwrap();
        assert!((n - 36.0 * (1.0 - 0.05 * 1.5)).abs() < 1e-9, "{n}");
        // quic's drop relative to tcp's: 0.7 / 0.8 and 0.1 / 0.5
        assert!((drop_ratio(get(1, 0), get(1, 1)).unwrap() - 0.7 / 0.8).abs() < 1e-9);
        assert!((drop_ratio(get(2, 0), get(2, 1)).unwrap() - 0.2).abs() < 1e-9);

        let html = render(&an).unwrap();
        for name in ["in loss", "out delay", "tcp drop", "quic drop / tcp drop"] {
            assert!(html.contains(name), "{name}");
        }
        assert!(
            html.contains("80 %") && html.contains("10 %"),
            "drops are printed"
        );
        assert_eq!(render(&an), Some(html), "deterministic");
        // every chart exported: the drop chart's values are the table's, in per cent
        let figs = crate::figures::assert_exported(&c);
        let drop = figs.iter().find(|f| f.name == "segments-drop").unwrap();
        let csv = drop.csv.as_ref().unwrap();
        let row = csv
            .lines()
            .find(|l| l.starts_with("in loss,tcp,"))
            .unwrap_or_else(|| panic!("{csv}"));
        let v: f64 = row.split(',').nth(2).unwrap().parse().unwrap();
        assert!((v - 80.0).abs() < 1e-9, "{row}");
        let series: Vec<&str> = figs
            .iter()
            .filter(|f| f.name.ends_with("-series"))
            .map(|f| f.name.as_str())
            .collect();
        assert_eq!(
            series,
            [
                "segments-normal-series",
                "segments-in-loss-series",
                "segments-out-delay-series"
            ]
        );
    }

    #[test]
    fn without_interleaving_the_first_condition_is_normal_and_rounds_pair_by_iteration() {
        let mut ts = Vec::new();
        for it in 0..2 {
            let f = if it == 0 { 0.5 } else { 0.7 };
            ts.push(trial("tcp", "normal", it, None, 30.0, 3));
            ts.push(trial("tcp", "in loss", it, None, 30.0 * f, 3));
        }
        let c = campaign(ts, false);
        let an = Analysis::new(&c);
        let rows = rows(&an);
        let r = row_for(&rows, 1, 0).unwrap();
        assert_eq!(r.pairs.len(), 2);
        assert!((r.drop.unwrap() - 0.4).abs() < 1e-9);
        // two rounds: no interval, the range of the two
        assert!(r.ci.is_none());
        let (lo, hi) = r.spread.unwrap();
        assert!((lo - 0.3).abs() < 1e-9 && (hi - 0.5).abs() < 1e-9);
        // no quic trials: its rows have nothing, and no ratio
        let q = row_for(&rows, 1, 1).unwrap();
        assert_eq!((q.drop, drop_ratio(r, q)), (None, None));
        // "out delay" has no trials at all
        assert!(row_for(&rows, 2, 0).unwrap().drop.is_none());
    }

    #[test]
    fn no_ratio_of_drops_over_a_drop_too_small_to_mean_anything() {
        let mut ts = Vec::new();
        for it in 0..3 {
            ts.push(trial("tcp", "normal", it, None, 30.0, 3));
            ts.push(trial("quic", "normal", it, None, 30.0, 3));
            // tcp loses 2 % in every round: above 0 beyond doubt, but small
            ts.push(trial("tcp", "in loss", it, None, 29.4, 3));
            ts.push(trial("quic", "in loss", it, None, 15.0, 3));
            ts.push(trial("tcp", "out delay", it, None, 15.0, 3));
            ts.push(trial("quic", "out delay", it, None, 27.0, 3));
        }
        let c = campaign(ts, false);
        let an = Analysis::new(&c);
        let rows = rows(&an);
        let (t, q) = (row_for(&rows, 1, 0).unwrap(), row_for(&rows, 1, 1).unwrap());
        assert!(t.ci.unwrap().lo > 0.0 && t.drop.unwrap() < MIN_DROP_FOR_RATIO);
        assert_eq!(drop_ratio(t, q), None);
        // the other way round the baseline's drop is 50 %: 10 % / 50 %
        let ratio = drop_ratio(q, t).unwrap();
        assert!((ratio - 0.04).abs() < 1e-9, "{ratio}");
        let (t, q) = (row_for(&rows, 2, 0).unwrap(), row_for(&rows, 2, 1).unwrap());
        assert!((drop_ratio(t, q).unwrap() - 0.2).abs() < 1e-9);
    }

    #[test]
    fn segment_axes_tick_whole_segments_from_the_first_to_the_last() {
        for n in [1, 2, 5, 9, 15, 40, 200] {
            let t = segment_ticks(n);
            assert_eq!(t.lo, 1.0);
            assert_eq!(t.hi, n.max(2) as f64);
            assert_eq!(t.values[0], 1.0);
            assert!(t.values.len() <= 9, "{n}: {:?}", t.values);
            assert!(t.values.iter().all(|v| v.fract() == 0.0 && *v <= t.hi));
        }
        assert_eq!(segment_ticks(15).values.len(), 8, "1, 3, ..., 15");
    }

    #[test]
    fn other_workloads_have_no_segments_section() {
        let mut c = campaign(Vec::new(), false);
        c.workload = Workload::default();
        assert_eq!(render(&Analysis::new(&c)), None);
    }
}
