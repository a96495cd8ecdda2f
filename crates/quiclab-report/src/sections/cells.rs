//! Every (condition, size) cell in detail, grouped under its condition in a `<details>` (the
//! first open): the ACKed bytes over time of each arm's median trial (the study's Figures 5/7)
//! with its congestion window and bytes in flight beside it, every iteration's ACKed bytes, the
//! TTLB CDF of each arm, TTLB against the offset of the first retransmission (Figure 6), and
//! tables of per-arm statistics and of the comparisons in that cell.

use crate::analysis::{Analysis, ArmCell, metrics};
use crate::chart::{
    LegendEntry, LineStyle, Mark, Series, Ticks, XySpec, Zoom, ZoomLine, arm_colour, c, cdf,
    cdf_csv, empty_chart, styled_line, svg_close, xy_frame, zoomable,
};
use crate::figures::{Figure, slug};
use crate::html::esc;
use crate::stats;
use crate::units;
use quiclab_model::csv::Table;
use std::fmt::Write;

const W: f64 = 400.0;
const H: f64 = 280.0;

pub fn render(an: &Analysis) -> Option<String> {
    let camp = an.campaign;
    // TTLBs of GETs: other workloads have their own sections
    if !camp.workload.is_requests()
        || camp.conditions.is_empty()
        || camp.sizes.is_empty()
        || camp.arms.is_empty()
    {
        return None;
    }
    let mut out = super::ttlb_note(camp);
    out.push_str(
        "<p class=\"muted\">One panel per condition (open one to see its object sizes). Colours \
         follow the arms in the header throughout.</p>\n",
    );
    for (ci, cond) in camp.conditions.iter().enumerate() {
        let _ = write!(
            out,
            "<details class=\"condition\" id=\"cond-{ci}\"{}>\n<summary><h3>{}</h3> \
             <span class=\"muted\">{}</span></summary>\n",
            if ci == 0 { " open" } else { "" },
            esc(&cond.name),
            esc(&cond.label)
        );
        for s in 0..camp.sizes.len() {
            cell(&mut out, an, ci, s);
        }
        out.push_str("</details>\n");
    }
    Some(out)
}

fn cell(out: &mut String, an: &Analysis, ci: usize, s: usize) {
    let camp = an.campaign;
    let title = format!(
        "{} · {}",
        camp.conditions[ci].name,
        super::size_label(camp, camp.sizes[s])
    );
    let _ = write!(
        out,
        "<section class=\"cell\" id=\"cell-{ci}-{s}\">\n<h4>{}</h4>\n<div class=\"charts\">\n",
        esc(&title)
    );
    for f in figures(an, ci, s, false) {
        out.push_str(&f.html());
    }
    let arms: Vec<&ArmCell> = (0..camp.arms.len()).map(|a| an.cell(ci, s, a)).collect();
    out.push_str("</div>\n");
    arm_table(out, an, &arms, ci);
    comparison_table(out, an, ci, s);
    out.push_str("</section>\n");
}

/// The figures of the cell under condition `ci` at size `s`, in the report's order, with their
/// data as CSV when `with_csv` (the export's; the page needs none).
pub(crate) fn figures(an: &Analysis, ci: usize, s: usize, with_csv: bool) -> Vec<Figure> {
    let camp = an.campaign;
    let title = format!(
        "{} · {}",
        camp.conditions[ci].name,
        super::size_label(camp, camp.sizes[s])
    );
    let arms: Vec<&ArmCell> = (0..camp.arms.len()).map(|a| an.cell(ci, s, a)).collect();
    let name = |kind: &str| {
        format!(
            "{}-{}-{kind}",
            slug(&camp.conditions[ci].name),
            slug(&super::size_label(camp, camp.sizes[s]))
        )
    };
    let csv = |make: &dyn Fn() -> Table| with_csv.then(|| make().into_string());
    // a figure of this cell: its file name's kind, its title's head, the chart and its data
    let fig =
        |kind: &str, head: &str, (svg, caption): (String, String), csv: Option<String>| Figure {
            name: name(kind),
            title: format!("{head}, {title}"),
            svg,
            caption,
            csv,
        };
    // the median trials' timelines: the data of both the ACKed-bytes and the window chart
    let medians = csv(&|| timeline_csv(an, &arms, false));
    let mut out = vec![
        fig(
            "acked",
            "ACKed bytes over time",
            acked_chart(an, &arms, &title),
            medians.clone(),
        ),
        fig(
            "window",
            "Congestion window and bytes in flight",
            window_chart(an, &arms, &title),
            medians,
        ),
        fig(
            "iterations",
            "ACKed bytes of every iteration",
            iterations_chart(an, &arms, &title),
            csv(&|| timeline_csv(an, &arms, true)),
        ),
    ];
    let budgets: Vec<(&str, usize, &quiclab_model::budget::Budget)> = arms
        .iter()
        .filter_map(|a| {
            let b = metrics(a.median_trial?)?.detail.budget.as_ref()?;
            Some((camp.arms[a.arm].name.as_str(), a.arm, b))
        })
        .collect();
    if let Some(svg) = super::why::spans_chart(&title, &budgets, 0.0) {
        let caption = "When each arm's median trial lost its time beyond the floor: the \
                       intervals its time budget charged, shaded in their component's colour \
                       (the legend is in <a href=\"#why\">Why</a>; point at one to read it); \
                       the grey outline is the TTLB.";
        let spans = csv(&|| {
            let mut t = Table::new(&["arm", "ttlb_ms", "component", "from_ms", "to_ms"]);
            for (arm, _, b) in &budgets {
                for ch in &b.charges {
                    let component = serde_json::to_value(ch.component)
                        .ok()
                        .and_then(|v| v.as_str().map(str::to_string))
                        .unwrap_or_default();
                    for sp in &ch.spans {
                        t.row(&[
                            arm.to_string(),
                            b.ttlb_ms.to_string(),
                            component.clone(),
                            sp[0].to_string(),
                            sp[1].to_string(),
                        ]);
                    }
                }
            }
            t
        });
        out.push(fig(
            "spans",
            "When the time went",
            (svg, caption.into()),
            spans,
        ));
    }
    out.push(fig(
        "cdf",
        "TTLB CDF",
        cdf_chart(an, &arms, &title),
        csv(&|| cdf_csv(&ttlb_series(an, &arms), "arm", "ttlb_ms")),
    ));
    let retransmits = csv(&|| {
        let mut t = Table::new(&[
            "arm",
            "iteration",
            "trial_id",
            "ttlb_ms",
            "first_retransmit_offset",
            "bytes_resent",
            "packets_lost",
        ]);
        for a in &arms {
            for tr in &a.ok {
                let Some(m) = metrics(tr) else { continue };
                t.row(&[
                    camp.arms[a.arm].name.clone(),
                    tr.iteration.to_string(),
                    tr.id.clone(),
                    m.ttlb_ms.to_string(),
                    opt(m.first_retransmit_offset),
                    opt(m.bytes_resent),
                    opt(m.packets_lost),
                ]);
            }
        }
        t
    });
    out.push(fig(
        "retransmit",
        "TTLB against first retransmission offset",
        retransmit_chart(an, &arms, &title, camp.sizes[s]),
        retransmits,
    ));
    out
}

fn opt<T: ToString>(v: Option<T>) -> String {
    v.map(|v| v.to_string()).unwrap_or_default()
}

/// The timelines a cell's figures draw: each arm's median trial, or every successful trial
/// with `every` (a `median` column says which is the median).
fn timeline_csv(an: &Analysis, arms: &[&ArmCell], every: bool) -> Table {
    let mut t = Table::new(&[
        "arm",
        "iteration",
        "trial_id",
        "median",
        "t_ms",
        "acked_bytes",
        "cwnd_bytes",
        "bytes_in_flight",
        "rtt_ms",
        "congestion_event",
    ]);
    for a in arms {
        let median = a.median_trial.map(|m| m.id.as_str());
        let trials: Vec<&crate::model::Trial> = if every {
            a.ok.clone()
        } else {
            a.median_trial.into_iter().collect()
        };
        for tr in trials {
            for p in points(tr) {
                t.row(&[
                    an.campaign.arms[a.arm].name.clone(),
                    tr.iteration.to_string(),
                    tr.id.clone(),
                    (median == Some(tr.id.as_str())).to_string(),
                    p.t_ms.to_string(),
                    p.acked_bytes.to_string(),
                    opt(p.cwnd_bytes),
                    opt(p.bytes_in_flight),
                    opt(p.rtt_ms),
                    p.congestion_event.to_string(),
                ]);
            }
        }
    }
    t
}

fn arm_legend(
    an: &Analysis,
    arms: &[&ArmCell],
    label: impl Fn(&ArmCell) -> Option<String>,
    mark: Mark,
) -> Vec<LegendEntry> {
    arms.iter()
        .filter_map(|cell| {
            label(cell).map(|l| LegendEntry {
                label: format!("{} {l}", an.campaign.arms[cell.arm].name),
                colour: arm_colour(cell.arm).to_string(),
                mark,
            })
        })
        .map(|mut e| {
            e.label = e.label.trim_end().to_string();
            e
        })
        .collect()
}

/// Cumulative ACKed bytes of each arm's median trial, with congestion events as rings.
fn acked_chart(an: &Analysis, arms: &[&ArmCell], title: &str) -> (String, String) {
    let chart_title = format!("ACKed bytes over time, {title}");
    let series: Vec<(&ArmCell, &crate::model::Trial)> = arms
        .iter()
        .filter_map(|a| a.median_trial.map(|t| (*a, t)))
        .collect();
    if series.is_empty() {
        return (
            empty_chart(&chart_title, W, H, "no sender timeline recorded"),
            "ACKed bytes over time: no successful trial kept a timeline.".into(),
        );
    }
    let timelines: Vec<_> = series
        .iter()
        .filter_map(|(a, t)| metrics(t).map(|m| (*a, *t, &m.timeline)))
        .collect();
    let x_max = timelines
        .iter()
        .flat_map(|(_, _, tl)| tl.iter().map(|p| p.t_ms))
        .fold(0.0, f64::max);
    let y_max = timelines
        .iter()
        .flat_map(|(_, _, tl)| tl.iter().map(|p| p.acked_bytes as f64))
        .fold(0.0, f64::max);
    let (div, unit) = units::byte_unit(y_max);
    let mut legend: Vec<LegendEntry> = timelines
        .iter()
        .map(|(a, t, _)| LegendEntry {
            label: format!(
                "{} (it. {}, {})",
                an.campaign.arms[a.arm].name,
                t.iteration,
                metrics(t).map(|m| units::ms(m.ttlb_ms)).unwrap_or_default()
            ),
            colour: arm_colour(a.arm).to_string(),
            mark: Mark::Line,
        })
        .collect();
    let any_events = timelines
        .iter()
        .any(|(_, _, tl)| tl.iter().any(|p| p.congestion_event));
    if any_events {
        legend.push(LegendEntry {
            label: "congestion event".into(),
            colour: "#333333".into(),
            mark: Mark::Ring,
        });
    }
    let spec = XySpec {
        width: W,
        height: H,
        title: chart_title,
        x_label: "time since the client's first packet (ms)".into(),
        y_label: format!("ACKed data ({unit})"),
        x: Ticks::new(0.0, x_max, 5),
        y: Ticks::new(0.0, y_max / div, 5),
        legend,
        right_band: 0.0,
    };
    let zoom = Zoom {
        x_unit: "ms".into(),
        y_unit: unit.into(),
        ring_label: "congestion event".into(),
        lines: timelines
            .iter()
            .map(|(a, _, tl)| ZoomLine {
                label: an.campaign.arms[a.arm].name.clone(),
                colour: arm_colour(a.arm).into(),
                points: tl
                    .iter()
                    .map(|p| (p.t_ms, p.acked_bytes as f64 / div))
                    .collect(),
                rings: tl
                    .iter()
                    .filter(|p| p.congestion_event)
                    .map(|p| (p.t_ms, p.acked_bytes as f64 / div))
                    .collect(),
            })
            .collect(),
    };
    let mut out = String::new();
    let frame = xy_frame(&mut out, &spec);
    zoomable(&mut out, &frame, &zoom);
    svg_close(&mut out);
    let missing: Vec<&str> = arms
        .iter()
        .filter(|a| a.median_trial.is_none())
        .map(|a| an.campaign.arms[a.arm].name.as_str())
        .collect();
    let mut caption = "Cumulative bytes acknowledged, as the sender saw them, in each arm's \
                       median trial (the successful trial with the median TTLB among those with \
                       a timeline); rings mark congestion events (the study's Figures 5/7). \
                       Point at the plot to read each line; drag across it to zoom in, \
                       double-click to zoom out."
        .to_string();
    if !missing.is_empty() {
        let _ = write!(caption, " No timeline for {}.", esc(&missing.join(", ")));
    }
    (out, caption)
}

/// The congestion window (solid) and bytes in flight (dashed) of each arm's median trial, on
/// the time axis of the ACKed-bytes chart beside it.
pub(crate) fn window_chart(an: &Analysis, arms: &[&ArmCell], title: &str) -> (String, String) {
    let chart_title = format!("Congestion window and bytes in flight, {title}");
    let timelines: Vec<(&ArmCell, &crate::model::Trial)> = arms
        .iter()
        .filter_map(|a| a.median_trial.map(|t| (*a, t)))
        .filter(|(_, t)| {
            metrics(t).is_some_and(|m| {
                m.timeline
                    .iter()
                    .any(|p| p.cwnd_bytes.is_some() || p.bytes_in_flight.is_some())
            })
        })
        .collect();
    if timelines.is_empty() {
        return (
            empty_chart(&chart_title, W, H, "no window or bytes in flight recorded"),
            "Congestion window and bytes in flight: no median trial's sender recorded them.".into(),
        );
    }
    let x_max = timelines
        .iter()
        .flat_map(|(_, t)| points(t).iter().map(|p| p.t_ms))
        .fold(0.0, f64::max);
    let y_max = timelines
        .iter()
        .flat_map(|(_, t)| {
            points(t)
                .iter()
                .flat_map(|p| [p.cwnd_bytes, p.bytes_in_flight])
                .flatten()
        })
        .fold(0.0, |m, v| f64::max(m, v as f64));
    let (div, unit) = units::byte_unit(y_max);
    let mut legend: Vec<LegendEntry> = timelines
        .iter()
        .map(|(a, _)| LegendEntry {
            label: an.campaign.arms[a.arm].name.clone(),
            colour: arm_colour(a.arm).to_string(),
            mark: Mark::Line,
        })
        .collect();
    legend.push(LegendEntry {
        label: "window".into(),
        colour: "#333333".into(),
        mark: Mark::Line,
    });
    legend.push(LegendEntry {
        label: "in flight".into(),
        colour: "#333333".into(),
        mark: Mark::Dashed,
    });
    let spec = XySpec {
        width: W,
        height: H,
        title: chart_title,
        x_label: "time since the client's first packet (ms)".into(),
        y_label: format!("bytes ({unit})"),
        x: Ticks::new(0.0, x_max, 5),
        y: Ticks::new(0.0, y_max / div, 5),
        legend,
        right_band: 0.0,
    };
    let mut out = String::new();
    let frame = xy_frame(&mut out, &spec);
    for (a, t) in &timelines {
        let colour = arm_colour(a.arm);
        let series = |f: fn(&crate::model::TimelinePoint) -> Option<u64>| -> Vec<(f64, f64)> {
            points(t)
                .iter()
                .filter_map(|p| Some((frame.px(p.t_ms), frame.py(f(p)? as f64 / div))))
                .collect()
        };
        styled_line(
            &mut out,
            &series(|p| p.cwnd_bytes),
            colour,
            2.0,
            LineStyle::default(),
        );
        styled_line(
            &mut out,
            &series(|p| p.bytes_in_flight),
            colour,
            1.5,
            LineStyle {
                dashed: true,
                ..LineStyle::default()
            },
        );
    }
    svg_close(&mut out);
    let missing: Vec<&str> = arms
        .iter()
        .filter(|a| !timelines.iter().any(|(b, _)| b.arm == a.arm))
        .map(|a| an.campaign.arms[a.arm].name.as_str())
        .collect();
    let mut caption = "The sender's congestion window (solid) and the bytes it had in flight \
                       (dashed: sent, neither acknowledged nor declared lost), in the same \
                       median trials as the ACKed bytes beside it. Flight below the window is \
                       a sender held back by something else: pacing, flow control, or the \
                       application."
        .to_string();
    if !missing.is_empty() {
        let _ = write!(
            caption,
            " No window or flight recorded for {}.",
            esc(&missing.join(", "))
        );
    }
    (out, caption)
}

/// A trial's timeline (none for a failed one).
fn points(t: &crate::model::Trial) -> &[crate::model::TimelinePoint] {
    metrics(t).map(|m| &m.timeline[..]).unwrap_or(&[])
}

/// Every successful iteration's ACKed bytes, faint, each arm's median trial drawn over them.
pub(crate) fn iterations_chart(an: &Analysis, arms: &[&ArmCell], title: &str) -> (String, String) {
    let chart_title = format!("ACKed bytes of every iteration, {title}");
    let with_timeline: Vec<(&ArmCell, Vec<&crate::model::Trial>)> = arms
        .iter()
        .map(|a| {
            let ts: Vec<&crate::model::Trial> =
                a.ok.iter()
                    .copied()
                    .filter(|t| metrics(t).is_some_and(|m| !m.timeline.is_empty()))
                    .collect();
            (*a, ts)
        })
        .filter(|(_, ts)| !ts.is_empty())
        .collect();
    if with_timeline.is_empty() {
        return (
            empty_chart(&chart_title, W, H, "no sender timeline recorded"),
            "ACKed bytes of every iteration: no successful trial kept a timeline.".into(),
        );
    }
    let all = || {
        with_timeline
            .iter()
            .flat_map(|(_, ts)| ts.iter())
            .flat_map(|t| metrics(t).map(|m| &m.timeline[..]).unwrap_or(&[]))
    };
    let x_max = all().map(|p| p.t_ms).fold(0.0, f64::max);
    let y_max = all().map(|p| p.acked_bytes as f64).fold(0.0, f64::max);
    let (div, unit) = units::byte_unit(y_max);
    let legend: Vec<LegendEntry> = with_timeline
        .iter()
        .map(|(a, ts)| LegendEntry {
            label: format!(
                "{} ({} iteration{})",
                an.campaign.arms[a.arm].name,
                ts.len(),
                if ts.len() == 1 { "" } else { "s" }
            ),
            colour: arm_colour(a.arm).to_string(),
            mark: Mark::Line,
        })
        .collect();
    let spec = XySpec {
        width: W,
        height: H,
        title: chart_title,
        x_label: "time since the client's first packet (ms)".into(),
        y_label: format!("ACKed data ({unit})"),
        x: Ticks::new(0.0, x_max, 5),
        y: Ticks::new(0.0, y_max / div, 5),
        legend,
        right_band: 0.0,
    };
    let mut out = String::new();
    let frame = xy_frame(&mut out, &spec);
    let line = |t: &crate::model::Trial| -> Vec<(f64, f64)> {
        metrics(t)
            .map(|m| &m.timeline[..])
            .unwrap_or(&[])
            .iter()
            .map(|p| (frame.px(p.t_ms), frame.py(p.acked_bytes as f64 / div)))
            .collect()
    };
    for (a, ts) in &with_timeline {
        for t in ts
            .iter()
            .filter(|t| a.median_trial.map(|m| m.id.as_str()) != Some(&t.id))
        {
            styled_line(
                &mut out,
                &line(t),
                arm_colour(a.arm),
                1.0,
                LineStyle {
                    opacity: 0.35,
                    ..LineStyle::default()
                },
            );
        }
    }
    for (a, _) in &with_timeline {
        if let Some(m) = a.median_trial {
            styled_line(
                &mut out,
                &line(m),
                arm_colour(a.arm),
                2.0,
                LineStyle::default(),
            );
        }
    }
    svg_close(&mut out);
    (
        out,
        "Cumulative bytes acknowledged in every successful iteration with a timeline (faint), \
         each arm's median trial drawn over them: how far the median stands for the rest."
            .into(),
    )
}

/// Each arm's successful TTLBs as a series: what the CDF draws and its CSV holds.
fn ttlb_series(an: &Analysis, arms: &[&ArmCell]) -> Vec<Series<'static>> {
    arms.iter()
        .map(|a| Series {
            label: an.campaign.arms[a.arm].name.clone(),
            colour: arm_colour(a.arm),
            values: a.ttlb_ms.clone(),
        })
        .collect()
}

/// Step curves of the TTLB distribution per arm.
fn cdf_chart(an: &Analysis, arms: &[&ArmCell], title: &str) -> (String, String) {
    let chart_title = format!("TTLB CDF, {title}");
    if arms.iter().all(|a| a.ttlb_ms.is_empty()) {
        return (
            empty_chart(&chart_title, W, H, "no successful trial"),
            "TTLB CDF: no successful trial.".into(),
        );
    }
    (
        cdf(
            &chart_title,
            W,
            H,
            "time to last byte (ms)",
            &ttlb_series(an, arms),
        ),
        "Distribution of the time to last byte per arm: the fraction of successful trials that \
         had finished by each time (the dashed line marks the median)."
            .into(),
    )
}

/// TTLB against the byte offset of the first retransmission, trials without one in a band.
fn retransmit_chart(an: &Analysis, arms: &[&ArmCell], title: &str, size: u64) -> (String, String) {
    let chart_title = format!("TTLB against first retransmission offset, {title}");
    enum Place {
        At(u64),
        None,
    }
    let mut points = Vec::new();
    let mut unknown = 0usize;
    for a in arms {
        for t in &a.ok {
            let Some(m) = metrics(t) else { continue };
            // nothing re-sent is known only from a count of re-sent bytes (or, in a campaign
            // recorded before they were kept, of losses); an unknown count is no "none"
            let resent = m.bytes_resent.or(m.packets_lost);
            let place = match (m.first_retransmit_offset, resent) {
                (Some(o), _) => Place::At(o),
                (None, Some(0)) => Place::None,
                _ => {
                    unknown += 1;
                    continue;
                }
            };
            points.push((a.arm, *t, m.ttlb_ms, place));
        }
    }
    if points.is_empty() {
        return (
            empty_chart(&chart_title, W, H, "no retransmission data"),
            "TTLB against the first retransmission: no trial recorded where its first \
             retransmission was."
                .into(),
        );
    }
    let x_max = points
        .iter()
        .filter_map(|p| match p.3 {
            Place::At(o) => Some(o as f64),
            Place::None => None,
        })
        .fold(size as f64, f64::max);
    let (div, unit) = units::byte_unit(x_max);
    let (lo, hi) = points
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), p| {
            (l.min(p.2), h.max(p.2))
        });
    let any_none = points.iter().any(|p| matches!(p.3, Place::None));
    let band = if any_none { 58.0 } else { 0.0 };
    let spec = XySpec {
        width: W,
        height: H,
        title: chart_title,
        x_label: format!("offset of the first retransmitted byte ({unit})"),
        y_label: "time to last byte (ms)".into(),
        x: Ticks::new(0.0, x_max / div, 5),
        y: Ticks::new(lo, hi, 5),
        legend: arm_legend(
            an,
            arms,
            |a| (!a.ok.is_empty()).then(String::new),
            Mark::Dot,
        ),
        right_band: band,
    };
    let mut out = String::new();
    let frame = xy_frame(&mut out, &spec);
    let band_left = frame.right() + 14.0;
    if any_none {
        let _ = write!(
            out,
            r##"<rect x="{}" y="{}" width="{}" height="{}" fill="#f4f4f4"/><text x="{}" y="{}" text-anchor="middle" font-size="10.5" fill="#333">none</text>"##,
            c(band_left),
            c(frame.top),
            c(band - 14.0),
            c(frame.height),
            c(band_left + (band - 14.0) / 2.0),
            c(frame.bottom() + 14.0)
        );
    }
    for (arm, t, ttlb, place) in &points {
        let (x, what) = match place {
            Place::At(o) => (
                frame.px(*o as f64 / div),
                format!(
                    "first retransmission at byte {}",
                    units::number(*o as f64, 0)
                ),
            ),
            Place::None => {
                // Spread the band's points sideways by a hash of the trial, so equal TTLBs do
                // not hide each other and the placement never changes between renders.
                let frac = (stats::seed_from(&[&t.id]) % 1000) as f64 / 1000.0;
                (
                    band_left + 6.0 + frac * (band - 26.0),
                    "no retransmission".to_string(),
                )
            }
        };
        let _ = write!(
            out,
            r##"<circle cx="{}" cy="{}" r="3.5" fill="{}" fill-opacity="0.75" stroke="#ffffff" stroke-width="0.6"><title>{} iteration {}: TTLB {}, {}</title></circle>"##,
            c(x),
            c(frame.py(*ttlb)),
            arm_colour(*arm),
            esc(&an.campaign.arms[*arm].name),
            t.iteration,
            esc(&units::ms(*ttlb)),
            esc(&what)
        );
    }
    svg_close(&mut out);
    let mut caption = "Time to last byte against the offset of the first retransmitted byte \
                       (the study's Figure 6: with Cubic an early loss caps the window and the \
                       transfer takes longer). Trials without any retransmission are in the \
                       \"none\" band."
        .to_string();
    let mut rhos = Vec::new();
    for a in arms {
        let (offsets, ttlbs): (Vec<f64>, Vec<f64>) = points
            .iter()
            .filter_map(|(arm, _, ttlb, place)| match place {
                Place::At(o) if *arm == a.arm => Some((*o as f64, *ttlb)),
                _ => None,
            })
            .unzip();
        let name = esc(&an.campaign.arms[a.arm].name);
        let n = offsets.len();
        let rho = stats::spearman(&offsets, &ttlbs);
        rhos.push(match (rho, rho.and_then(|r| stats::spearman_ci(r, n))) {
            (Some(r), Some(ci)) => format!(
                "{name} {} (95 % CI {} to {}, {n} trials)",
                units::signed(r, 2),
                units::signed(ci.lo, 2),
                units::signed(ci.hi, 2)
            ),
            _ => format!("{name}: too few trials with a retransmission ({n}) for a correlation"),
        });
    }
    let _ = write!(
        caption,
        " Spearman's rank correlation of TTLB with the offset, over each arm's trials that \
         retransmitted (negative: the earlier the first loss, the longer the transfer): {}.",
        rhos.join("; ")
    );
    if unknown > 0 {
        let _ = write!(
            caption,
            " {unknown} trial{} that retransmitted without recording where (or recorded \
             nothing) {} not shown.",
            if unknown == 1 { "" } else { "s" },
            if unknown == 1 { "is" } else { "are" }
        );
    }
    (out, caption)
}

fn opt_ms(v: Option<f64>) -> String {
    v.map(units::ms).unwrap_or_else(|| "—".into())
}

fn arm_table(out: &mut String, an: &Analysis, arms: &[&ArmCell], ci: usize) {
    let camp = an.campaign;
    let rtt = camp.conditions[ci].rtt_ms;
    out.push_str(
        "<table class=\"arms-cell\"><thead><tr><th>arm</th><th class=\"num\">ok</th>\
         <th class=\"num\">failed</th><th class=\"num\">median TTLB</th>\
         <th class=\"num\">p25 – p75</th><th class=\"num\">95 % CI of median</th>\
         <th class=\"num\">min – max</th><th class=\"num\">median TTFB</th>\
         <th class=\"num\">packets lost</th><th class=\"num\">bytes re-sent</th>\
         <th class=\"num\">handshake</th><th>flags</th>\
         </tr></thead><tbody>",
    );
    for a in arms {
        let arm = &camp.arms[a.arm];
        let sm = a.summary.as_ref();
        let mut flags: Vec<String> = Vec::new();
        if a.hello_retries > 0 {
            flags.push(format!(
                "<span class=\"flag\">HelloRetryRequest in {} of {} trials</span>",
                a.hello_retries,
                a.ok.len()
            ));
        }
        if a.impossible_rtt_trials > 0 {
            flags.push(format!(
                "<span class=\"flag\">{} RTT sample{} below the path minimum ({} ms) in {} \
                 trial{}</span>",
                a.impossible_rtt_samples,
                if a.impossible_rtt_samples == 1 {
                    ""
                } else {
                    "s"
                },
                units::number(rtt, 1),
                a.impossible_rtt_trials,
                if a.impossible_rtt_trials == 1 {
                    ""
                } else {
                    "s"
                }
            ));
        }
        if a.emulator_late_trials > 0 {
            flags.push(format!(
                "<span class=\"flag\">the host held the emulator's packets up to {} ms in {} \
                 trial{}: their times include that hold as well as the network's</span>",
                units::number(a.emulator_late_max_ms, 1),
                a.emulator_late_trials,
                if a.emulator_late_trials == 1 { "" } else { "s" }
            ));
        }
        if let Some(why) = &a.doubt {
            flags.push(format!(
                "<span class=\"flag\">sender's record in doubt in {} of {} trials: {}</span>",
                a.doubted_trials,
                a.ok.len(),
                esc(why)
            ));
        }
        for (reason, n) in &a.failure_reasons {
            flags.push(format!(
                "<span class=\"flag\">failed: {} ×{n}</span>",
                esc(reason)
            ));
        }
        for cav in &arm.caveats {
            flags.push(format!("<span class=\"muted\">{}</span>", esc(cav)));
        }
        let hs = a
            .handshake_rtts_median
            .map(units::rtts)
            .unwrap_or_else(|| "—".into());
        let _ = write!(
            out,
            "<tr><td><span class=\"swatch\" style=\"background:{}\"></span>{}</td>\
             <td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\"><strong>{}</strong></td>\
             <td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td>\
             <td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td>\
             <td class=\"num\">{}</td><td>{}</td></tr>",
            arm_colour(a.arm),
            esc(&arm.name),
            a.ok.len(),
            a.failed.len(),
            opt_ms(sm.map(|s| s.median_ms)),
            sm.map(|s| units::ms_range(s.p25_ms, s.p75_ms))
                .unwrap_or_else(|| "—".into()),
            sm.and_then(|s| s.median_ci)
                .map(|ci| units::ms_range(ci.lo, ci.hi))
                .unwrap_or_else(|| "—".into()),
            sm.map(|s| units::ms_range(s.min_ms, s.max_ms))
                .unwrap_or_else(|| "—".into()),
            opt_ms(a.ttfb_median_ms),
            a.packets_lost_median
                .map(|r| units::number(r, if r.fract() == 0.0 { 0 } else { 1 }))
                .unwrap_or_else(|| "unknown".into()),
            a.bytes_resent_median
                .map(|b| units::size(b.round() as u64))
                .unwrap_or_else(|| "unknown".into()),
            esc(&hs),
            flags.join("<br>")
        );
    }
    out.push_str("</tbody></table>\n");
}

fn comparison_table(out: &mut String, an: &Analysis, ci: usize, s: usize) {
    if an.comparisons.is_empty() {
        return;
    }
    let camp = an.campaign;
    out.push_str(
        "<table class=\"comparisons-cell\"><thead><tr><th>comparison</th>\
         <th class=\"num\">n (a / b)</th><th class=\"num\">pairs</th>\
         <th class=\"num\">median a</th>\
         <th class=\"num\">median b</th><th class=\"num\">difference</th>\
         <th class=\"num\">change</th><th class=\"num\">95 % CI</th>\
         <th class=\"num\" title=\"two-sided: Wilcoxon signed-rank of the paired differences \
         (Mann-Whitney where the arms are not paired), then adjusted by Benjamini-Hochberg \
         across every compared cell\">p (adjusted)</th><th>verdict</th></tr></thead><tbody>",
    );
    for cmp in &an.comparisons {
        let cell = cmp.cell(ci, s);
        let (a, b) = (&camp.arms[cmp.a].name, &camp.arms[cmp.b].name);
        let _ = write!(
            out,
            "<tr><td><a href=\"#heatmap-{}\">{} vs {}</a></td><td class=\"num\">{} / {}</td>",
            cmp.index,
            esc(b),
            esc(a),
            cell.n_a,
            cell.n_b
        );
        match &cell.change {
            Some(ch) => {
                let diff = match ch.diff_rtts {
                    Some(r) => format!(
                        "{} ({})",
                        units::signed_ms(ch.diff_ms),
                        units::signed_rtts(r)
                    ),
                    None => units::signed_ms(ch.diff_ms),
                };
                let verdict = if ch.pairs < crate::stats::paired::MIN_PAIRS {
                    format!(
                        "<span class=\"muted\">too few {} for a verdict ({} of the {} needed)\
                         </span>",
                        if ch.paired { "pairs" } else { "trials" },
                        ch.pairs,
                        crate::stats::paired::MIN_PAIRS
                    )
                } else if !ch.significant {
                    "<span class=\"muted\">no significant difference</span>".to_string()
                } else if ch.rel < 0.0 {
                    format!("{} faster", esc(b))
                } else {
                    format!("{} slower", esc(b))
                };
                let _ = write!(
                    out,
                    "<td class=\"num\">{}</td>\
                     <td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td>\
                     <td class=\"num\"><strong>{}</strong></td><td class=\"num\">{}</td>\
                     <td class=\"num\">{}</td><td>{verdict}</td></tr>",
                    if ch.paired {
                        ch.pairs.to_string()
                    } else {
                        "unpaired".into()
                    },
                    esc(&units::ms(ch.median_a_ms)),
                    esc(&units::ms(ch.median_b_ms)),
                    esc(&diff),
                    esc(&units::signed_pct(ch.rel)),
                    ch.ci
                        .map(|ci| esc(&format!("{} %", units::signed_pct_range(ci.lo, ci.hi))))
                        .unwrap_or_else(|| "—".into()),
                    match (ch.p, ch.p_adjusted) {
                        (Some(p), Some(adj)) => esc(&format!(
                            "{}, adjusted {}",
                            units::p_value(p),
                            units::p_value(adj).trim_start_matches("p = ")
                        )),
                        (Some(p), None) => esc(&units::p_value(p)),
                        _ => "—".into(),
                    },
                );
            }
            None => {
                let _ = write!(
                    out,
                    "<td colspan=\"8\" class=\"muted\">n/a: fewer than {} successful trials in \
                     an arm</td></tr>",
                    crate::analysis::MIN_TRIALS
                );
            }
        }
    }
    out.push_str("</tbody></table>\n");
}
