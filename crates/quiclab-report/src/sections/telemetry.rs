//! Telemetry and head-of-line blocking (the `telemetry` workload, study S5): every unit's
//! one-way latency per arm and condition, against the model (one-way delay plus the unit's wait
//! in its flush) and against the same arm without loss.
//!
//! Its sentences ([`sentences`], shown among the findings): each arm's p50 and p98 against the
//! model without loss; per lossy condition, how much each arm's p90 grew over its loss-free
//! baseline, comparing the arm with a stream per flush to the single-stream arms. The section
//! shows the study's percentile table (p50,
//! p90, p95, p97, p98, p99, p99.9, max) per condition and arm with the difference to the
//! baseline, units lost, the share of units more than one RTT late and the stalls; then per
//! condition the median trial's latency of every unit over time (one colour per arm), the
//! latency CDFs and the median trials' stalls with the dropped packet that caused each.
//!
//! Contract: renders only for `telemetry` campaigns, from the telemetry detail of successful
//! trials ([`crate::model::TelemetryDetail`]); percentiles pool every unit of every successful
//! trial of a cell. A condition's **baseline** is the condition with the same one-way delay,
//! RTT and rate and no loss either way. The **median trial** of a cell is the one whose p90
//! is the cell's median (the lower one for an even count; ties by iteration, then id).
//! A single-stream arm's p90 grew more than the per-flush arm's when it grew by more than
//! [`MODEL_TOLERANCE_MS`] beyond it (less is within the measurement's noise).
//! Charts are thinned to what a pixel can show (points in one pixel column that touch are drawn
//! as one stroke), so a page of many 10,000-unit trials stays small; nothing is dropped that
//! would be visible.

use std::collections::BTreeMap;
use std::fmt::Write;

use quiclab_model::csv::Table;

use crate::analysis::{Analysis, metrics};
use crate::chart::{
    LegendEntry, Mark, Ticks, XySpec, arm_colour, c, empty_chart, polyline, svg_close, xy_frame,
};
use crate::figures::{Figure, csv_if, slug};
use crate::html::esc;
use crate::model::{TelemetryDetail, Trial, Workload};
use crate::stats;
use crate::units;

use crate::stats::LATENCY_PERCENTILES as PERCENTILES;

/// How close to the model p50 and p98 must be without loss (the acceptance check of S5).
pub const MODEL_TOLERANCE_MS: f64 = 1.0;

/// How much p90 may grow over the baseline and still count as unchanged.
pub const P90_TOLERANCE_MS: f64 = 5.0;

/// One arm under one condition: every unit of every successful trial.
#[derive(Debug, Clone, Default)]
pub struct TelemetryCell<'a> {
    pub trials: Vec<&'a Trial>,
    /// Latencies of the units that arrived, sorted, ms.
    pub latency_ms: Vec<f64>,
    /// Units sent, and those that never arrived.
    pub units: usize,
    pub lost: usize,
    /// Units later than the model by more than the condition's RTT.
    pub late: usize,
    /// Stall durations of every trial, ms, and how many were traced to a dropped packet.
    pub stall_ms: Vec<f64>,
    pub stalls_caused: usize,
    /// Trials whose endpoints did not run at a real-time priority.
    pub not_realtime: usize,
    /// The trial whose p90 is the median of the cell's.
    pub median: Option<&'a Trial>,
    /// The arm's mode ("tcp", "quic-stream", "quic-streams", "quic-datagrams").
    pub mode: Option<String>,
}

impl TelemetryCell<'_> {
    pub fn pct(&self, p: f64) -> Option<f64> {
        stats::quantile_sorted(&self.latency_ms, p)
    }
}

fn detail(t: &Trial) -> Option<&TelemetryDetail> {
    metrics(t).and_then(|m| m.detail.telemetry.as_ref())
}

/// p90 of one trial's units, ms.
fn trial_p90(d: &TelemetryDetail) -> f64 {
    stats::quantile(&d.latencies_ms(), 0.9).unwrap_or(f64::NAN)
}

/// What a condition was, as its trials recorded it.
#[derive(Debug, Clone, PartialEq)]
pub struct ConditionFacts {
    pub one_way_ms: f64,
    pub loss_up: f64,
    pub loss_down: f64,
    /// The model's latency of every unit of a trial, sorted, ms.
    pub model_ms: Vec<f64>,
}

impl ConditionFacts {
    pub fn lossless(&self) -> bool {
        self.loss_up == 0.0 && self.loss_down == 0.0
    }

    pub fn model_pct(&self, p: f64) -> Option<f64> {
        stats::quantile_sorted(&self.model_ms, p)
    }
}

/// The cells and the conditions' facts of a telemetry campaign.
pub struct Tables<'a> {
    /// `cells[condition][arm]`.
    pub cells: Vec<Vec<TelemetryCell<'a>>>,
    pub facts: Vec<Option<ConditionFacts>>,
}

impl<'a> Tables<'a> {
    pub fn new(an: &Analysis<'a>) -> Tables<'a> {
        let camp = an.campaign;
        let mut facts = Vec::new();
        let cells = (0..camp.conditions.len())
            .map(|ci| {
                let rtt_ms = camp.conditions[ci].rtt_ms;
                let mut fact = None;
                let row = (0..camp.arms.len())
                    .map(|ai| {
                        let mut cell = TelemetryCell::default();
                        for si in 0..camp.sizes.len() {
                            for &t in &an.cell(ci, si, ai).ok {
                                let Some(d) = detail(t) else { continue };
                                if fact.is_none() {
                                    let mut model: Vec<f64> =
                                        (0..d.latency_us.len()).map(|i| d.model_ms(i)).collect();
                                    model.sort_by(f64::total_cmp);
                                    fact = Some(ConditionFacts {
                                        one_way_ms: d.one_way_ms,
                                        loss_up: d.loss_up,
                                        loss_down: d.loss_down,
                                        model_ms: model,
                                    });
                                }
                                cell.add(t, d, rtt_ms);
                            }
                        }
                        cell.latency_ms.sort_by(f64::total_cmp);
                        let mut ranked: Vec<(f64, &Trial)> = cell
                            .trials
                            .iter()
                            .filter_map(|&t| detail(t).map(|d| (trial_p90(d), t)))
                            .collect();
                        ranked.sort_by(|a, b| {
                            a.0.total_cmp(&b.0)
                                .then(a.1.iteration.cmp(&b.1.iteration))
                                .then(a.1.id.cmp(&b.1.id))
                        });
                        cell.median =
                            (!ranked.is_empty()).then(|| ranked[(ranked.len() - 1) / 2].1);
                        cell
                    })
                    .collect();
                facts.push(fact);
                row
            })
            .collect();
        Tables { cells, facts }
    }

    /// The loss-free condition a lossy one is compared with (see the module's contract).
    pub fn baseline(&self, an: &Analysis, ci: usize) -> Option<usize> {
        let conds = &an.campaign.conditions;
        let f = self.facts[ci].as_ref()?;
        if f.lossless() {
            return None;
        }
        (0..conds.len()).find(|&bi| {
            self.facts[bi].as_ref().is_some_and(|b| {
                b.lossless()
                    && b.one_way_ms == f.one_way_ms
                    && conds[bi].rtt_ms == conds[ci].rtt_ms
                    && conds[bi].rate_bps == conds[ci].rate_bps
            })
        })
    }
}

impl<'a> TelemetryCell<'a> {
    fn add(&mut self, t: &'a Trial, d: &TelemetryDetail, rtt_ms: f64) {
        self.trials.push(t);
        self.units += d.latency_us.len();
        self.lost += d.lost();
        for (i, l) in d.latency_us.iter().enumerate() {
            if let Some(l) = l {
                let ms = f64::from(*l) / 1000.0;
                self.latency_ms.push(ms);
                if ms - d.model_ms(i) > rtt_ms {
                    self.late += 1;
                }
            }
        }
        self.stall_ms.extend(d.stalls.iter().map(|s| s.duration_ms));
        self.stalls_caused += d.stalls.iter().filter(|s| s.cause.is_some()).count();
        self.not_realtime += usize::from(!d.realtime);
        if self.mode.is_none() {
            self.mode = Some(d.mode.clone());
        }
    }
}

/// A latency with two decimals, as the study gave them.
fn lat(v: f64) -> String {
    units::number(v, 2)
}

fn signed(v: f64) -> String {
    let s = units::number(v, 1);
    if v >= 0.05 { format!("+{s}") } else { s }
}

fn b(s: &str) -> String {
    format!("<strong>{}</strong>", esc(s))
}

fn join_and(items: &[String]) -> String {
    match items.len() {
        0 => String::new(),
        1 => items[0].clone(),
        n => format!("{} and {}", items[..n - 1].join(", "), items[n - 1]),
    }
}

/// What a condition is, in words: "50 ms RTT, 2 % loss each way".
fn condition_words(an: &Analysis, tables: &Tables, ci: usize) -> String {
    let cond = &an.campaign.conditions[ci];
    let loss = match &tables.facts[ci] {
        Some(f) if f.lossless() => "no loss".to_string(),
        Some(f) if f.loss_up == f.loss_down => {
            format!("{} loss each way", units::abs_pct(f.loss_up))
        }
        Some(f) => format!(
            "{} loss up, {} down",
            units::abs_pct(f.loss_up),
            units::abs_pct(f.loss_down)
        ),
        None => "no data".into(),
    };
    format!("{} RTT, {loss}", units::ms(cond.rtt_ms))
}

/// The section's sentences, most important first: without loss, the arms against the model;
/// with loss, each arm's p90 against its baseline.
pub fn sentences(an: &Analysis) -> Vec<String> {
    let Workload::Telemetry { .. } = an.campaign.workload else {
        return Vec::new();
    };
    let tables = Tables::new(an);
    sentences_of(an, &tables)
}

fn sentences_of(an: &Analysis, tables: &Tables) -> Vec<String> {
    let camp = an.campaign;
    let mut out = Vec::new();
    // Without loss: p50 and p98 against the model.
    let mut worst: Option<(f64, String, String, &str)> = None;
    let mut off = Vec::new();
    let mut checked = 0;
    for (ci, cond) in camp.conditions.iter().enumerate() {
        let Some(f) = tables.facts[ci].as_ref().filter(|f| f.lossless()) else {
            continue;
        };
        for (ai, arm) in camp.arms.iter().enumerate() {
            let cell = &tables.cells[ci][ai];
            for (label, p) in [("p50", 0.5), ("p98", 0.98)] {
                let (Some(got), Some(want)) = (cell.pct(p), f.model_pct(p)) else {
                    continue;
                };
                checked += 1;
                let d = got - want;
                if worst.as_ref().is_none_or(|w| d.abs() > w.0.abs()) {
                    worst = Some((d, arm.name.clone(), cond.name.clone(), label));
                }
                if d.abs() > MODEL_TOLERANCE_MS {
                    off.push(format!(
                        "{} of {} under {} ({} ms against {} ms)",
                        label,
                        b(&arm.name),
                        esc(&cond.name),
                        lat(got),
                        lat(want)
                    ));
                }
            }
        }
    }
    if let Some((d, arm, cond, label)) = worst {
        if off.is_empty() {
            out.push(format!(
                "Without loss, every arm's p50 and p98 lie within {} of the model (one-way delay \
                 plus the unit's wait in its flush) under every condition ({checked} checks): the \
                 farthest is {label} of {} under {}, {} ms from the model.",
                units::ms(MODEL_TOLERANCE_MS),
                b(&arm),
                esc(&cond),
                signed(d)
            ));
        } else {
            out.push(format!(
                "<span class=\"flag\">Off the model without loss:</span> {} lie more than {} \
                 from the model (one-way delay plus the wait in the flush); the endpoints or the \
                 host delayed units (see the flushes' send lateness in the trials' records).",
                join_and(&off),
                units::ms(MODEL_TOLERANCE_MS)
            ));
        }
    }
    // With loss: p90 against the baseline.
    for ci in 0..camp.conditions.len() {
        let Some(bi) = tables.baseline(an, ci) else {
            continue;
        };
        let growth = |ai: usize| -> Option<(f64, f64, f64)> {
            let now = tables.cells[ci][ai].pct(0.9)?;
            let base = tables.cells[bi][ai].pct(0.9)?;
            Some((now - base, base, now))
        };
        let mode_of = |ai: usize| tables.cells[ci][ai].mode.as_deref().unwrap_or("");
        let per_flush: Vec<usize> = (0..camp.arms.len())
            .filter(|&ai| mode_of(ai) == "quic-streams" && growth(ai).is_some())
            .collect();
        let single: Vec<usize> = (0..camp.arms.len())
            .filter(|&ai| matches!(mode_of(ai), "tcp" | "quic-stream") && growth(ai).is_some())
            .collect();
        let words = condition_words(an, tables, ci);
        let grew = |ai: usize| {
            let (g, base, now) = growth(ai).unwrap_or_default();
            format!(
                "{} by {} ms ({} → {} ms)",
                b(&camp.arms[ai].name),
                signed(g),
                lat(base),
                lat(now)
            )
        };
        let mut s = format!("At {} ({}): ", esc(&words), esc(&camp.conditions[ci].name));
        if per_flush.is_empty() || single.is_empty() {
            let all: Vec<String> = (0..camp.arms.len())
                .filter(|&ai| growth(ai).is_some())
                .map(grew)
                .collect();
            if all.is_empty() {
                continue;
            }
            let _ = write!(
                s,
                "p90 grew over the loss-free baseline for {}.",
                join_and(&all)
            );
        } else {
            let pf_max = per_flush
                .iter()
                .filter_map(|&ai| growth(ai))
                .map(|g| g.0)
                .fold(f64::NEG_INFINITY, f64::max);
            let pf: Vec<String> = per_flush.iter().map(|&ai| grew(ai)).collect();
            let within = pf_max.abs() <= P90_TOLERANCE_MS;
            let _ = write!(
                s,
                "over the loss-free baseline, p90 grew with a stream per flush for {} ({} {})",
                join_and(&pf),
                if within { "within" } else { "more than" },
                units::ms(P90_TOLERANCE_MS)
            );
            // growth within the model's tolerance of the per-flush arm's is noise, not more
            let more: Vec<usize> = single
                .iter()
                .copied()
                .filter(|&ai| growth(ai).is_some_and(|g| g.0 > pf_max + MODEL_TOLERANCE_MS))
                .collect();
            let not_more: Vec<usize> = single
                .iter()
                .copied()
                .filter(|ai| !more.contains(ai))
                .collect();
            if !more.is_empty() {
                let _ = write!(
                    s,
                    "; on a single ordered stream it grew more, for {}",
                    join_and(&more.iter().map(|&ai| grew(ai)).collect::<Vec<_>>())
                );
            }
            if !not_more.is_empty() {
                let _ = write!(
                    s,
                    "; on a single ordered stream it did not grow more (by over {}) for {}",
                    units::ms(MODEL_TOLERANCE_MS),
                    join_and(&not_more.iter().map(|&ai| grew(ai)).collect::<Vec<_>>())
                );
            }
            s.push_str(if !more.is_empty() && not_more.is_empty() {
                ". A lost packet holds back only its own flush when every flush has a stream of \
                 its own, but every unit behind it on a single stream."
            } else {
                "."
            });
        }
        let lost: Vec<String> = (0..camp.arms.len())
            .filter(|&ai| tables.cells[ci][ai].lost > 0)
            .map(|ai| {
                let cell = &tables.cells[ci][ai];
                format!(
                    "{} lost {} of its units instead ({} of {})",
                    b(&camp.arms[ai].name),
                    units::abs_pct(cell.lost as f64 / cell.units.max(1) as f64),
                    cell.lost,
                    cell.units
                )
            })
            .collect();
        if !lost.is_empty() {
            let _ = write!(s, " {}.", join_and(&lost));
        }
        out.push(s);
    }
    if let Some(s) = study_sentence(an, tables) {
        out.push(s);
    }
    let slow: usize = tables.cells.iter().flatten().map(|c| c.not_realtime).sum();
    if slow > 0 {
        out.push(format!(
            "<span class=\"flag\">{slow} trials</span> ran their endpoints without a real-time \
             priority: their latencies include this host's scheduling delays."
        ));
    }
    out
}

const W: f64 = 760.0;
const H: f64 = 320.0;
const CDF_W: f64 = 440.0;

pub fn render(an: &Analysis) -> Option<String> {
    let camp = an.campaign;
    let Workload::Telemetry {
        units_per_second,
        flush_units,
        duration_ms,
    } = camp.workload
    else {
        return None;
    };
    if camp.arms.is_empty() || camp.conditions.is_empty() {
        return None;
    }
    let tables = Tables::new(an);
    let mut out = String::new();
    let interval_ms = 1000.0 / f64::from(units_per_second.max(1));
    let _ = writeln!(
        out,
        "<p class=\"desc\">The client generates {units_per_second} units of 8 bytes a second, \
         each holding the time it was generated, and sends them in flushes of {flush_units} \
         (one every {} ms) for {} s per trial; the server notes when each arrives (both ends read \
         one clock). Without loss a unit's latency is the one-way delay plus its wait in the \
         flush, from {} ms for the first unit of a flush down to none for the last: the \
         <em>model</em>. A lost packet is repaired at the earliest a round trip later; on a \
         single ordered stream (TCP, one QUIC stream) every unit behind it waits for the \
         repair, with a stream per flush only its own flush does, and a lost datagram is never \
         repaired.</p>",
        units::number(interval_ms * f64::from(flush_units), 1),
        units::number(duration_ms as f64 / 1000.0, 1),
        units::number(interval_ms * f64::from(flush_units.saturating_sub(1)), 1)
    );
    percentile_table(&mut out, an, &tables);
    study_table(&mut out, an, &tables);
    for (ci, cond) in camp.conditions.iter().enumerate() {
        let _ = writeln!(
            out,
            "<details class=\"condition\" open><summary><h3>{}</h3> <span class=\"muted\">{}</span>\
             </summary>",
            esc(&cond.name),
            esc(&condition_words(an, &tables, ci))
        );
        let Some(facts) = &tables.facts[ci] else {
            out.push_str("<p class=\"muted\">No successful trial.</p></details>\n");
            continue;
        };
        out.push_str("<div class=\"charts\">");
        for f in charts(an, &tables, ci, facts, units_per_second, false) {
            out.push_str(&f.html());
        }
        out.push_str("</div>\n");
        stall_table(&mut out, an, &tables, ci);
        out.push_str("</details>\n");
    }
    Some(out)
}

fn percentile_table(out: &mut String, an: &Analysis, tables: &Tables) {
    let camp = an.campaign;
    out.push_str(
        "<h4>Latency percentiles (ms), with the change from the loss-free baseline</h4>\n\
         <table><thead><tr><th>condition</th><th>arm</th><th class=\"num\">units</th>\
         <th class=\"num\">lost</th>",
    );
    for (label, _) in PERCENTILES {
        let _ = write!(out, "<th class=\"num\">{label}</th>");
    }
    out.push_str(
        "<th class=\"num\" title=\"units later than the model by more than one RTT\">\
         &gt; 1 RTT late</th><th class=\"num\">stalls</th>\
         <th class=\"num\">stall, median</th></tr></thead><tbody>\n",
    );
    for (ci, cond) in camp.conditions.iter().enumerate() {
        let base = tables.baseline(an, ci);
        let rows = camp.arms.len() + 1;
        let _ = write!(
            out,
            "<tr><td rowspan=\"{rows}\" title=\"{}\">{}<br><span class=\"muted\">{}</span></td>",
            esc(&cond.label),
            esc(&cond.name),
            esc(&condition_words(an, tables, ci))
        );
        // the model's row
        out.push_str("<td class=\"muted\"><em>model</em></td><td></td><td></td>");
        for (_, p) in PERCENTILES {
            let v = tables.facts[ci].as_ref().and_then(|f| f.model_pct(p));
            let _ = write!(
                out,
                "<td class=\"num muted\">{}</td>",
                v.map_or("–".into(), lat)
            );
        }
        out.push_str("<td></td><td></td><td></td></tr>\n");
        for (ai, arm) in camp.arms.iter().enumerate() {
            let cell = &tables.cells[ci][ai];
            let _ = write!(
                out,
                "<tr><td><span class=\"swatch\" style=\"background:{}\"></span>{}</td>\
                 <td class=\"num\">{}</td><td class=\"num\">{}</td>",
                arm_colour(ai),
                esc(&arm.name),
                units::number(cell.units as f64, 0),
                if cell.lost > 0 {
                    units::number(cell.lost as f64, 0)
                } else {
                    "–".into()
                }
            );
            for (_, p) in PERCENTILES {
                match cell.pct(p) {
                    Some(v) => {
                        let delta = base
                            .and_then(|bi| tables.cells[bi][ai].pct(p))
                            .map(|b| format!("<br><span class=\"muted\">{}</span>", signed(v - b)))
                            .unwrap_or_default();
                        let _ = write!(out, "<td class=\"num\">{}{delta}</td>", lat(v));
                    }
                    None => out.push_str("<td class=\"num muted\">–</td>"),
                }
            }
            let received = cell.latency_ms.len();
            let _ = writeln!(
                out,
                "<td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td></tr>",
                if received > 0 {
                    units::abs_pct(cell.late as f64 / received as f64)
                } else {
                    "–".into()
                },
                cell.stall_ms.len(),
                stats::median(&cell.stall_ms).map_or("–".into(), units::ms)
            );
        }
    }
    out.push_str("</tbody></table>\n");
}

/// S5's published percentiles (aptpod 2020, quic-go with a stream per flush, 50 ms RTT, 10 s
/// of 1000 units a second in flushes of 10), ms: (label, quantile, without loss, at 2 % loss).
pub const APTPOD: [(&str, f64, f64, f64); 5] = [
    ("p50", 0.50, 31.11, 32.63),
    ("p90", 0.90, 35.10, 38.31),
    ("p95", 0.95, 35.53, 43.10),
    ("p97", 0.97, 35.66, 49.50),
    ("p98", 0.98, 35.83, 85.81),
];

/// The study's conditions among the campaign's: 25 ms each way with no loss, and with 2 %
/// loss (each way or client to server).
fn study_conditions(tables: &Tables) -> Option<(usize, usize)> {
    let find = |loss: f64| {
        tables.facts.iter().position(|f| {
            f.as_ref().is_some_and(|f| {
                (f.one_way_ms - 25.0).abs() < 1e-9
                    && (f.loss_up - loss).abs() < 1e-9
                    && (f.loss_down == 0.0 || (f.loss_down - loss).abs() < 1e-9)
            })
        })
    };
    Some((find(0.0)?, find(0.02)?))
}

/// How a cell's client stacks detected their losses: the median time from sending a lost
/// packet to declaring it lost and to sending again, and what declared them.
fn loss_detection(cell: &TelemetryCell) -> Option<(f64, Option<f64>, String)> {
    let all: Vec<&crate::model::LossDetection> = cell
        .trials
        .iter()
        .filter_map(|t| detail(t))
        .flat_map(|d| &d.loss_detection)
        .collect();
    if all.is_empty() {
        return None;
    }
    let declared: Vec<f64> = all.iter().map(|l| l.declared_after_ms).collect();
    let repaired: Vec<f64> = all.iter().filter_map(|l| l.repaired_after_ms).collect();
    let mut triggers: BTreeMap<&str, usize> = BTreeMap::new();
    for l in &all {
        *triggers
            .entry(l.trigger.as_deref().unwrap_or("unnamed"))
            .or_default() += 1;
    }
    let mut triggers: Vec<(&str, usize)> = triggers.into_iter().collect();
    triggers.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    let words = triggers
        .iter()
        .map(|(t, n)| format!("{t} {}", units::abs_pct(*n as f64 / all.len() as f64)))
        .collect::<Vec<_>>()
        .join(", ");
    Some((
        stats::median(&declared)?,
        stats::median(&repaired),
        format!("{} losses: {words}", all.len()),
    ))
}

/// At the study's conditions, each QUIC arm with a stream per flush against the published p98
/// at 2 % loss, and how its stack declared its losses.
fn study_sentence(an: &Analysis, tables: &Tables) -> Option<String> {
    let (_, lossy) = study_conditions(tables)?;
    let (_, _, _, published) = APTPOD[APTPOD.len() - 1];
    let arms: Vec<String> = (0..an.campaign.arms.len())
        .filter(|&ai| tables.cells[lossy][ai].mode.as_deref() == Some("quic-streams"))
        .filter_map(|ai| {
            let cell = &tables.cells[lossy][ai];
            let p98 = cell.pct(0.98)?;
            let how = loss_detection(cell)
                .map(|(d, _, _)| format!(" (losses declared {} after sending)", units::ms(d)))
                .unwrap_or_default();
            Some(format!(
                "{} {} ms{how}",
                b(&an.campaign.arms[ai].name),
                lat(p98)
            ))
        })
        .collect();
    (!arms.is_empty()).then(|| {
        format!(
            "At the study's conditions (50 ms RTT, 2 % loss), a stream per flush gave p98 {} \
             against the {} ms aptpod published for quic-go.",
            join_and(&arms),
            lat(published)
        )
    })
}

/// The study's table beside this campaign's QUIC arms at the study's conditions, with each
/// arm's stall of a lost flush explained by its stack's loss detection.
fn study_table(out: &mut String, an: &Analysis, tables: &Tables) {
    let Some((clean, lossy)) = study_conditions(tables) else {
        return;
    };
    let camp = an.campaign;
    out.push_str(
        "<h4>Beside the study (aptpod 2020: quic-go, a stream per flush, 50 ms RTT)</h4>\n\
         <p class=\"caption\">Percentiles of every unit (ms) without loss and at 2 % loss, the \
         published ones first. A lost flush waits for its repair: the sender declares the \
         packet lost (by time: 9/8 of an RTT after a later packet was acknowledged, or by \
         reordering: three later packets acknowledged, RFC 9002), then sends it again, and the \
         repair takes one more one-way trip. The last columns time that from the client's \
         qlog: from sending the lost packet to declaring it lost and to sending the next packet \
         (the repair goes first), medians over every loss of the 2 % trials, with what \
         declared them.</p>\n<table><thead><tr><th rowspan=\"2\">stack and mode</th>",
    );
    let _ = write!(
        out,
        "<th colspan=\"{n}\">no loss</th><th colspan=\"{n}\">2 % loss</th>\
         <th class=\"num\" rowspan=\"2\">stall, median</th>\
         <th class=\"num\" rowspan=\"2\">declared lost after</th>\
         <th class=\"num\" rowspan=\"2\">sent again after</th>\
         <th rowspan=\"2\">declared by</th></tr><tr>",
        n = APTPOD.len()
    );
    for _ in 0..2 {
        for (label, ..) in APTPOD {
            let _ = write!(out, "<th class=\"num\">{label}</th>");
        }
    }
    out.push_str("</tr></thead><tbody>\n<tr><td><em>aptpod, published</em></td>");
    for (_, _, v, _) in APTPOD {
        let _ = write!(out, "<td class=\"num muted\">{}</td>", lat(v));
    }
    for (_, _, _, v) in APTPOD {
        let _ = write!(out, "<td class=\"num muted\">{}</td>", lat(v));
    }
    out.push_str("<td class=\"num muted\">~100 ms</td><td></td><td></td><td></td></tr>\n");
    for (ai, arm) in camp.arms.iter().enumerate() {
        let (c0, c2) = (&tables.cells[clean][ai], &tables.cells[lossy][ai]);
        if c2
            .mode
            .as_deref()
            .or(c0.mode.as_deref())
            .is_none_or(|m| m == "tcp")
        {
            continue;
        }
        let _ = write!(
            out,
            "<tr><td><span class=\"swatch\" style=\"background:{}\"></span>{}<br>\
             <span class=\"muted\">{}</span></td>",
            arm_colour(ai),
            esc(&arm.name),
            esc(&arm.label)
        );
        for cell in [c0, c2] {
            for (_, p, ..) in APTPOD {
                let _ = write!(
                    out,
                    "<td class=\"num\">{}</td>",
                    cell.pct(p).map_or("–".into(), lat)
                );
            }
        }
        let (declared, repaired, words) = match loss_detection(c2) {
            Some((d, r, w)) => (units::ms(d), r.map_or("–".into(), units::ms), w),
            None => ("–".into(), "–".into(), "no qlog".into()),
        };
        let _ = writeln!(
            out,
            "<td class=\"num\">{}</td><td class=\"num\">{declared}</td>\
             <td class=\"num\">{repaired}</td><td>{}</td></tr>",
            stats::median(&c2.stall_ms).map_or("–".into(), units::ms),
            esc(&words)
        );
    }
    out.push_str("</tbody></table>\n");
}

/// Unit latencies of each arm's median trial over time, arms overlaid in plan order.
/// Every chart of the section, in the page's order, with the values drawn as CSV when
/// `with_csv`.
pub(crate) fn figures(an: &Analysis, with_csv: bool) -> Vec<Figure> {
    let camp = an.campaign;
    let Workload::Telemetry {
        units_per_second, ..
    } = camp.workload
    else {
        return Vec::new();
    };
    if camp.arms.is_empty() {
        return Vec::new();
    }
    let tables = Tables::new(an);
    (0..camp.conditions.len())
        .filter_map(|ci| Some((ci, tables.facts[ci].as_ref()?)))
        .flat_map(|(ci, facts)| charts(an, &tables, ci, facts, units_per_second, with_csv))
        .collect()
}

/// The scatter and the CDF of condition `ci`.
fn charts(
    an: &Analysis,
    tables: &Tables,
    ci: usize,
    facts: &ConditionFacts,
    units_per_second: u32,
    with_csv: bool,
) -> [Figure; 2] {
    let cond = slug(&an.campaign.conditions[ci].name);
    let (title, svg, csv) = scatter(an, tables, ci, facts, units_per_second, with_csv);
    let scatter = Figure {
        name: format!("telemetry-{cond}-latency"),
        title,
        svg,
        caption: "Latency of every unit of each arm's median trial against when it was \
                  generated. Grey band: the model (one-way delay plus the wait in the flush)."
            .into(),
        csv,
    };
    let (title, svg, csv) = cdf(an, tables, ci, facts, with_csv);
    let cdf = Figure {
        name: format!("telemetry-{cond}-cdf"),
        title,
        svg,
        caption: "Latency CDF of every unit of every trial; the dashed line is the model.".into(),
        csv,
    };
    [scatter, cdf]
}

/// (title, SVG, CSV when `with_csv`: every unit of the trials drawn, lost ones with no latency).
fn scatter(
    an: &Analysis,
    tables: &Tables,
    ci: usize,
    facts: &ConditionFacts,
    units_per_second: u32,
    with_csv: bool,
) -> (String, String, Option<String>) {
    let camp = an.campaign;
    let title = format!("Unit latency over time, {}", camp.conditions[ci].name);
    let drawn: Vec<(usize, &TelemetryDetail)> = (0..camp.arms.len())
        .filter_map(|ai| Some((ai, detail(tables.cells[ci][ai].median?)?)))
        .collect();
    let csv = csv_if(with_csv, || {
        let mut t = Table::new(&[
            "arm",
            "trial_id",
            "unit",
            "generated_s",
            "latency_ms",
            "model_ms",
        ]);
        for &(ai, d) in &drawn {
            let id = tables.cells[ci][ai].median.map_or("", |t| t.id.as_str());
            for (i, l) in d.latency_us.iter().enumerate() {
                t.row(&[
                    camp.arms[ai].name.clone(),
                    id.to_string(),
                    i.to_string(),
                    (i as f64 / f64::from(d.units_per_second.max(1))).to_string(),
                    l.map(|l| (f64::from(l) / 1000.0).to_string())
                        .unwrap_or_default(),
                    d.model_ms(i).to_string(),
                ]);
            }
        }
        t
    });
    let max_units = drawn
        .iter()
        .map(|(_, d)| d.latency_us.len())
        .max()
        .unwrap_or(0);
    let max_ms = drawn
        .iter()
        .flat_map(|(_, d)| d.latencies_ms())
        .fold(f64::NEG_INFINITY, f64::max);
    if drawn.is_empty() || max_units == 0 || !max_ms.is_finite() {
        let svg = empty_chart(&title, W, H, "no successful trial");
        return (title, svg, csv);
    }
    let seconds = max_units as f64 / f64::from(units_per_second.max(1));
    let spec = XySpec {
        width: W,
        height: H,
        title: title.clone(),
        x_label: "time the unit was generated (s)".into(),
        y_label: "latency (ms)".into(),
        x: Ticks::new(0.0, seconds, 10),
        y: Ticks::new(0.0, max_ms, 6),
        legend: drawn
            .iter()
            .map(|&(ai, d)| LegendEntry {
                label: if d.lost() > 0 {
                    format!("{} ({} lost)", camp.arms[ai].name, d.lost())
                } else {
                    camp.arms[ai].name.clone()
                },
                colour: arm_colour(ai).to_string(),
                mark: Mark::Dot,
            })
            .collect(),
        right_band: 0.0,
    };
    let mut out = String::new();
    let frame = xy_frame(&mut out, &spec);
    // the model's band: from the last unit of a flush (one-way delay) to the first
    let (lo, hi) = (
        facts.model_ms.first().copied().unwrap_or(facts.one_way_ms),
        facts.model_ms.last().copied().unwrap_or(facts.one_way_ms),
    );
    let _ = write!(
        out,
        r##"<rect x="{}" y="{}" width="{}" height="{}" fill="#000000" fill-opacity="0.08"/>"##,
        c(frame.left),
        c(frame.py(hi) - 1.0),
        c(frame.width),
        c(frame.py(lo) - frame.py(hi) + 2.0)
    );
    for &(ai, d) in &drawn {
        // pixel column -> pixel rows of its points
        let mut columns: BTreeMap<i64, Vec<i64>> = BTreeMap::new();
        for (i, l) in d.latency_us.iter().enumerate() {
            let Some(l) = l else { continue };
            let x = frame.px(i as f64 / f64::from(d.units_per_second.max(1)));
            let y = frame.py(f64::from(*l) / 1000.0);
            columns
                .entry(x.round() as i64)
                .or_default()
                .push(y.round() as i64);
        }
        let mut path = String::new();
        for (x, mut rows) in columns {
            rows.sort_unstable();
            rows.dedup();
            let mut k = 0;
            while k < rows.len() {
                let start = rows[k];
                while k + 1 < rows.len() && rows[k + 1] - rows[k] <= 1 {
                    k += 1;
                }
                let _ = write!(path, "M{x} {start}V{}", rows[k]);
                k += 1;
            }
        }
        let _ = write!(
            out,
            r#"<path d="{path}" fill="none" stroke="{}" stroke-width="2" stroke-linecap="round" stroke-opacity="0.8"/>"#,
            arm_colour(ai)
        );
    }
    svg_close(&mut out);
    (title, out, csv)
}

/// Quantile curves of every arm's pooled latencies (a CDF), thinned to a few hundred points,
/// finer in the tail: (title, SVG, CSV of the quantiles drawn, the model's as series "model").
fn cdf(
    an: &Analysis,
    tables: &Tables,
    ci: usize,
    facts: &ConditionFacts,
    with_csv: bool,
) -> (String, String, Option<String>) {
    let camp = an.campaign;
    let title = format!("Latency CDF, {}", camp.conditions[ci].name);
    let drawn: Vec<usize> = (0..camp.arms.len())
        .filter(|&ai| !tables.cells[ci][ai].latency_ms.is_empty())
        .collect();
    let all = || {
        drawn
            .iter()
            .flat_map(|&ai| tables.cells[ci][ai].latency_ms.iter().copied())
            .chain(facts.model_ms.iter().copied())
    };
    let fractions: Vec<f64> = (0..=400)
        .map(|k| f64::from(k) / 400.0 * 0.95)
        .chain((1..=250).map(|k| 0.95 + f64::from(k) / 250.0 * 0.05))
        .collect();
    let csv = csv_if(with_csv, || {
        let mut t = Table::new(&["series", "fraction", "latency_ms"]);
        let curves = drawn
            .iter()
            .map(|&ai| {
                (
                    camp.arms[ai].name.as_str(),
                    &tables.cells[ci][ai].latency_ms,
                )
            })
            .chain(std::iter::once(("model", &facts.model_ms)));
        for (name, sorted) in curves {
            for &f in &fractions {
                if let Some(v) = stats::quantile_sorted(sorted, f) {
                    t.row(&[name.to_string(), f.to_string(), v.to_string()]);
                }
            }
        }
        t
    });
    let (Some(lo), Some(hi)) = (all().reduce(f64::min), all().reduce(f64::max)) else {
        let svg = empty_chart(&title, CDF_W, H, "no successful trial");
        return (title, svg, csv);
    };
    let spec = XySpec {
        width: CDF_W,
        height: H,
        title: title.clone(),
        x_label: "latency (ms)".into(),
        y_label: "fraction of units".into(),
        x: Ticks::new(lo, hi, 5),
        y: Ticks::new(0.0, 1.0, 5),
        legend: drawn
            .iter()
            .map(|&ai| LegendEntry {
                label: camp.arms[ai].name.clone(),
                colour: arm_colour(ai).to_string(),
                mark: Mark::Line,
            })
            .collect(),
        right_band: 0.0,
    };
    let mut out = String::new();
    let frame = xy_frame(&mut out, &spec);
    let curve = |sorted: &[f64]| -> Vec<(f64, f64)> {
        fractions
            .iter()
            .filter_map(|&f| {
                let v = stats::quantile_sorted(sorted, f)?;
                Some((frame.px(v), frame.py(f)))
            })
            .collect()
    };
    let model = curve(&facts.model_ms);
    let mut d = String::new();
    for (i, (x, y)) in model.iter().enumerate() {
        let _ = write!(d, "{}{} {}", if i == 0 { "M" } else { "L" }, c(*x), c(*y));
    }
    let _ = write!(
        out,
        r##"<path d="{d}" fill="none" stroke="#555" stroke-width="1.2" stroke-dasharray="4 3"/>"##
    );
    for &ai in &drawn {
        polyline(
            &mut out,
            &curve(&tables.cells[ci][ai].latency_ms),
            arm_colour(ai),
            2.0,
        );
    }
    svg_close(&mut out);
    (title, out, csv)
}

/// The stalls of every arm's median trial (the trials the scatter shows).
fn stall_table(out: &mut String, an: &Analysis, tables: &Tables, ci: usize) {
    const MAX_ROWS: usize = 40;
    let camp = an.campaign;
    let mut rows = Vec::new();
    for (ai, arm) in camp.arms.iter().enumerate() {
        let Some(d) = tables.cells[ci][ai].median.and_then(detail) else {
            continue;
        };
        for s in &d.stalls {
            rows.push((ai, arm, s));
        }
    }
    if rows.is_empty() {
        out.push_str(
            "<p class=\"muted\">No stall (no unit more than one RTT later than the model) in \
             the median trials.</p>\n",
        );
        return;
    }
    out.push_str(
        "<h4>Stalls of the median trials</h4>\n<p class=\"caption\">A stall is a run of \
         consecutive units each more than one RTT later than the model; it lasts from when its \
         first unit should have arrived to when its last one did. The lost packet is the \
         client-to-server packet the emulator dropped that carried its first flush (by \
         arrival index in that direction); \"drops\" counts every packet dropped, either way, \
         while it lasted.</p>\n<table><thead><tr><th>arm</th><th class=\"num\">at</th>\
         <th class=\"num\">units</th><th class=\"num\">flushes</th>\
         <th class=\"num\">lasted</th><th>lost packet</th><th class=\"num\">drops</th>\
         </tr></thead><tbody>\n",
    );
    for (ai, arm, s) in rows.iter().take(MAX_ROWS) {
        let mut cause = match &s.cause {
            Some(p) => format!(
                "{} #{}, {} B, {} at {} s",
                esc(&p.direction),
                p.index,
                p.size,
                esc(&p.reason),
                units::number(p.at_ms / 1000.0, 3)
            ),
            None if s.host_ms > 0.0 => "<span class=\"muted\">none found</span>".into(),
            None => "<span class=\"muted\">none found: the flush was held back by an earlier \
                     loss or the host</span>"
                .into(),
        };
        if s.host_ms > 0.0 {
            let _ = write!(
                cause,
                "; <span class=\"flag\">the host held the emulator's packets up to {}</span>",
                units::ms(s.host_ms)
            );
        }
        let _ = writeln!(
            out,
            "<tr><td><span class=\"swatch\" style=\"background:{}\"></span>{}</td>\
             <td class=\"num\">{} s</td><td class=\"num\">{}</td><td class=\"num\">{}</td>\
             <td class=\"num\">{}</td><td>{cause}</td><td class=\"num\">{}</td></tr>",
            arm_colour(*ai),
            esc(&arm.name),
            units::number(s.start_ms / 1000.0, 3),
            s.units,
            s.flushes,
            units::ms(s.duration_ms),
            s.drops
        );
    }
    out.push_str("</tbody></table>\n");
    if rows.len() > MAX_ROWS {
        let _ = writeln!(
            out,
            "<p class=\"muted\">… and {} more stalls.</p>",
            rows.len() - MAX_ROWS
        );
    }
}
