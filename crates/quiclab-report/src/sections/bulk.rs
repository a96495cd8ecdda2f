//! Bulk throughput and packet size (the `bulk` workload, study S2): per condition, the study's
//! table (goodput per arm and number of connections, with CPU seconds per GB of the server and
//! of the clients and the QUIC/TCP ratio), a bar chart of goodput, and the UDP payload path MTU
//! discovery settled on and when.
//!
//! Contract: renders only for `bulk` campaigns, from the bulk detail of successful trials
//! ([`crate::model::BulkDetail`]). A cell's figures are medians over its trials (goodput with
//! its range). The **TCP arm** a ratio divides by is the first arm of the plan whose trials
//! report no UDP payload (a TCP stack), in the same condition and connection count; the ratio
//! is omitted where it has no trial. The payload of a cell is its trials' most common settled
//! payload, reached after the median of their times.

use crate::analysis::{Analysis, metrics};
use crate::chart::{Bar, BarGroup, BarSpec, Mark, Ticks, arm_colour, arm_legend, grouped_bars};
use crate::figures::{Figure, csv_if, slug};
use crate::html::esc;
use crate::model::Workload;
use crate::stats;
use crate::units;
use std::fmt::Write;

/// What one arm did in one (condition, connection count) cell.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BulkCell {
    /// Per successful trial: goodput (Gbit/s), server and client CPU seconds per GB.
    pub gbps: Vec<f64>,
    pub server_cpu_per_gb: Vec<f64>,
    pub client_cpu_per_gb: Vec<f64>,
    /// Settled UDP payloads and when they were reached (QUIC trials only).
    pub payloads: Vec<u32>,
    pub reached_ms: Vec<f64>,
}

impl BulkCell {
    pub fn median_gbps(&self) -> Option<f64> {
        stats::median(&self.gbps)
    }

    /// The most common settled payload (the larger one on a tie).
    pub fn payload(&self) -> Option<u32> {
        let mut counts: Vec<(u32, usize)> = Vec::new();
        for &p in &self.payloads {
            match counts.iter_mut().find(|(q, _)| *q == p) {
                Some(c) => c.1 += 1,
                None => counts.push((p, 1)),
            }
        }
        counts.into_iter().max_by_key(|&(p, n)| (n, p)).map(|c| c.0)
    }
}

/// `cells[condition][size][arm]` (the size is the connection count).
pub fn cells(an: &Analysis) -> Vec<Vec<Vec<BulkCell>>> {
    let camp = an.campaign;
    (0..camp.conditions.len())
        .map(|ci| {
            (0..camp.sizes.len())
                .map(|si| {
                    (0..camp.arms.len())
                        .map(|ai| {
                            let mut cell = BulkCell::default();
                            for t in &an.cell(ci, si, ai).ok {
                                let Some(b) = metrics(t).and_then(|m| m.detail.bulk.as_ref())
                                else {
                                    continue;
                                };
                                let (s, c) = b.cpu_per_gb();
                                cell.gbps.push(b.bps() / 1e9);
                                cell.server_cpu_per_gb.push(s);
                                cell.client_cpu_per_gb.push(c);
                                if let Some(p) = b.udp_payload {
                                    cell.payloads.push(p);
                                    if let Some(r) = b.udp_payload_reached_ms {
                                        cell.reached_ms.push(r);
                                    }
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

/// The first arm with goodput and no UDP payload anywhere: the TCP reference.
pub fn tcp_arm(cells: &[Vec<Vec<BulkCell>>]) -> Option<usize> {
    let arms = cells.first()?.first()?.len();
    (0..arms).find(|&ai| {
        let all = || cells.iter().flat_map(|c| c.iter().map(move |s| &s[ai]));
        all().any(|c| !c.gbps.is_empty()) && all().all(|c| c.payloads.is_empty())
    })
}

const W: f64 = 860.0;
const H: f64 = 300.0;

pub fn render(an: &Analysis) -> Option<String> {
    let camp = an.campaign;
    let Workload::Bulk { duration_ms } = camp.workload else {
        return None;
    };
    if camp.arms.is_empty() || camp.conditions.is_empty() {
        return None;
    }
    let cells = cells(an);
    let tcp = tcp_arm(&cells);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "<p class=\"desc\">Each trial downloads for {} s (after a warm-up) over its number of \
         parallel connections, one client process each. Goodput = bytes the server's \
         connections had acknowledged over that interval (QUIC counts packet bytes); CPU = user \
         + system seconds of the server and of all clients over the same interval, per GB \
         acknowledged. Figures are medians over iterations; the QUIC/TCP ratio divides by {} in \
         the same condition and connection count, measured in the same run.</p>",
        units::number(duration_ms as f64 / 1000.0, 1),
        tcp.map_or("the TCP arm (none here)".to_string(), |a| format!(
            "<strong>{}</strong>",
            esc(&camp.arms[a].name)
        )),
    );
    for (ci, cond) in camp.conditions.iter().enumerate() {
        let _ = writeln!(out, "<h3>{}</h3>", esc(&cond.name));
        out.push_str(&chart(an, &cells, ci, false).html());
        table(&mut out, an, &cells, ci, tcp);
    }
    Some(out)
}

/// The findings of a bulk campaign (shown in the findings section), per condition: the best
/// QUIC/TCP ratio, and what path MTU discovery found. Empty for other workloads.
pub fn sentences(an: &Analysis) -> Vec<String> {
    let camp = an.campaign;
    let mut items = Vec::new();
    if !matches!(camp.workload, Workload::Bulk { .. }) {
        return items;
    }
    let cells = cells(an);
    let tcp = tcp_arm(&cells);
    for (ci, cond) in camp.conditions.iter().enumerate() {
        if let Some(t) = tcp {
            // the fastest QUIC cell relative to TCP at the same connection count
            let best = (0..camp.sizes.len())
                .flat_map(|si| (0..camp.arms.len()).map(move |ai| (si, ai)))
                .filter(|&(_, ai)| ai != t)
                .filter_map(|(si, ai)| {
                    let q = cells[ci][si][ai].median_gbps()?;
                    let r = cells[ci][si][t].median_gbps()?;
                    (r > 0.0).then_some((q / r, si, ai, q, r))
                })
                .max_by(|a, b| a.0.total_cmp(&b.0));
            if let Some((ratio, si, ai, q, r)) = best {
                items.push(format!(
                    "<strong>{}</strong>: the fastest QUIC arm against TCP is <strong>{}</strong> \
                     with {}: {} Gbit/s, {}x TCP's {} Gbit/s.",
                    esc(&cond.name),
                    esc(&camp.arms[ai].name),
                    esc(&super::size_label(camp, camp.sizes[si])),
                    units::number(q, 2),
                    units::number(ratio, 2),
                    units::number(r, 2)
                ));
            }
        }
        let discovered: Vec<String> = (0..camp.arms.len())
            .filter_map(|ai| {
                let all: Vec<&BulkCell> =
                    (0..camp.sizes.len()).map(|si| &cells[ci][si][ai]).collect();
                let payload = all.iter().filter_map(|c| c.payload()).max()?;
                let reached: Vec<f64> = all
                    .iter()
                    .flat_map(|c| c.reached_ms.iter().copied())
                    .collect();
                let when = stats::median(&reached)?;
                // a fixed payload is in use from the first packet on
                (when > 0.0).then(|| {
                    format!(
                        "{} settled on {} bytes ({} ms after its connection started, median)",
                        esc(&camp.arms[ai].name),
                        payload,
                        units::number(when, 1)
                    )
                })
            })
            .collect();
        if !discovered.is_empty() {
            items.push(format!(
                "<strong>{}</strong>: path MTU discovery: {}.",
                esc(&cond.name),
                discovered.join("; ")
            ));
        }
    }
    items
}

/// Each condition's goodput chart, with the values drawn as CSV when `with_csv`.
pub(crate) fn figures(an: &Analysis, with_csv: bool) -> Vec<Figure> {
    let camp = an.campaign;
    if !matches!(camp.workload, Workload::Bulk { .. }) || camp.arms.is_empty() {
        return Vec::new();
    }
    let cells = cells(an);
    (0..camp.conditions.len())
        .map(|ci| chart(an, &cells, ci, with_csv))
        .collect()
}

fn chart(an: &Analysis, cells: &[Vec<Vec<BulkCell>>], ci: usize, with_csv: bool) -> Figure {
    let camp = an.campaign;
    let groups: Vec<BarGroup> = camp
        .sizes
        .iter()
        .enumerate()
        .map(|(si, &size)| BarGroup {
            label: super::size_label(camp, size),
            bars: camp
                .arms
                .iter()
                .enumerate()
                .map(|(ai, arm)| {
                    let c = &cells[ci][si][ai];
                    let lo = c.gbps.iter().copied().fold(f64::INFINITY, f64::min);
                    let hi = c.gbps.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                    Bar {
                        value: c.median_gbps(),
                        colour: arm_colour(ai).to_string(),
                        hollow: false,
                        whisker: (c.gbps.len() > 1).then_some((lo, hi)),
                        title: format!(
                            "{}, {}: {}",
                            arm.name,
                            super::size_label(camp, size),
                            c.median_gbps().map_or("no trial".into(), |g| format!(
                                "{} Gbit/s (median of {})",
                                units::number(g, 2),
                                c.gbps.len()
                            ))
                        ),
                    }
                })
                .collect(),
        })
        .collect();
    let max = groups
        .iter()
        .flat_map(|g| {
            g.bars
                .iter()
                .flat_map(|b| b.value.into_iter().chain(b.whisker.map(|w| w.1)))
        })
        .fold(0.0, f64::max);
    let spec = BarSpec {
        width: W,
        height: H,
        title: format!("Goodput, {}", camp.conditions[ci].name),
        y_label: "Gbit/s".into(),
        y: Ticks::new(0.0, max.max(1e-3) * 1.05, 5),
        groups,
        legend: arm_legend(camp, Mark::Dot),
        references: camp.conditions[ci]
            .rate_bps
            .map(|r| (r as f64 / 1e9, "#888".to_string(), "link rate".to_string()))
            .into_iter()
            .collect(),
    };
    Figure {
        name: format!("bulk-{}-goodput", slug(&camp.conditions[ci].name)),
        title: spec.title.clone(),
        svg: grouped_bars(&spec),
        caption: "Median goodput of each arm over its iterations, by number of connections; \
                  the whisker spans the iterations' lowest to highest."
            .into(),
        csv: csv_if(with_csv, || spec.csv("connections", "arm")),
    }
}

fn table(
    out: &mut String,
    an: &Analysis,
    cells: &[Vec<Vec<BulkCell>>],
    ci: usize,
    tcp: Option<usize>,
) {
    let camp = an.campaign;
    out.push_str(
        "<table class=\"data\"><thead><tr><th>arm</th><th>connections</th><th>Gbit/s</th>\
         <th>range</th><th>QUIC/TCP</th><th>server CPU s/GB</th><th>client CPU s/GB</th>\
         <th>UDP payload</th><th>trials</th></tr></thead><tbody>\n",
    );
    for (ai, arm) in camp.arms.iter().enumerate() {
        for (si, &size) in camp.sizes.iter().enumerate() {
            let c = &cells[ci][si][ai];
            let num =
                |v: Option<f64>, d: usize| v.map_or("–".to_string(), |v| units::number(v, d));
            let g = c.median_gbps();
            let range = if c.gbps.len() > 1 {
                let lo = c.gbps.iter().copied().fold(f64::INFINITY, f64::min);
                let hi = c.gbps.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                format!("{}–{}", units::number(lo, 2), units::number(hi, 2))
            } else {
                "–".into()
            };
            let ratio = match (tcp, g) {
                (Some(t), Some(q)) if t != ai => cells[ci][si][t]
                    .median_gbps()
                    .filter(|&r| r > 0.0)
                    .map_or("–".into(), |r| units::number(q / r, 2)),
                _ => "–".into(),
            };
            let payload = match (c.payload(), stats::median(&c.reached_ms)) {
                (Some(p), Some(ms)) if ms > 0.0 => {
                    format!("{p} B after {} ms", units::number(ms, 1))
                }
                (Some(p), _) => format!("{p} B (from the start)"),
                (None, _) => "–".into(),
            };
            let _ = writeln!(
                out,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>\
                 <td>{}</td><td>{}</td><td>{}</td></tr>",
                esc(&arm.name),
                size,
                num(g, 2),
                range,
                ratio,
                num(stats::median(&c.server_cpu_per_gb), 2),
                num(stats::median(&c.client_cpu_per_gb), 2),
                esc(&payload),
                c.gbps.len()
            );
        }
    }
    out.push_str("</tbody></table>\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cell(gbps: &[f64], payloads: &[u32]) -> BulkCell {
        BulkCell {
            gbps: gbps.to_vec(),
            payloads: payloads.to_vec(),
            ..BulkCell::default()
        }
    }

    #[test]
    fn the_tcp_reference_is_the_first_arm_without_a_payload() {
        // arms: QUIC, TCP, another TCP; one condition, two connection counts
        let cells = vec![vec![
            vec![cell(&[3.0], &[1252]), cell(&[9.0], &[]), cell(&[8.0], &[])],
            vec![cell(&[4.0], &[1252]), cell(&[9.5], &[]), cell(&[], &[])],
        ]];
        assert_eq!(tcp_arm(&cells), Some(1));
        let quic_only = vec![vec![vec![cell(&[3.0], &[1252])]]];
        assert_eq!(tcp_arm(&quic_only), None);
    }

    #[test]
    fn a_cell_s_payload_is_its_most_common_then_the_larger() {
        assert_eq!(cell(&[], &[8972, 1200, 8972]).payload(), Some(8972));
        assert_eq!(cell(&[], &[1452, 1472]).payload(), Some(1472));
        assert_eq!(cell(&[], &[]).payload(), None);
        assert_eq!(cell(&[1.0, 3.0, 2.0], &[]).median_gbps(), Some(2.0));
    }
}
