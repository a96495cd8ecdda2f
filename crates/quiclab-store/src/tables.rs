//! The export's tables beside `trials.csv` (see `docs/data.md`): what the plan's arms and
//! conditions were, and the per-trial summaries of the page, telemetry and bulk workloads.
//! Every table is written whole or not at all; a workload's table only when some trial has it.

use std::io::Write;
use std::path::{Path, PathBuf};

use quiclab_model::campaign::{Campaign, Metrics};

use crate::{Result, TrialRecord, output, pairs};

/// The one CSV writer of the export: `header`, then each row's fields, quoted where they need
/// to be, one line each; the file written whole or not at all (see [`output::write_atomic`]).
/// Rows are written as they come, never all held at once.
pub(crate) fn write_csv(
    path: &Path,
    header: &str,
    rows: impl IntoIterator<Item = Vec<String>>,
) -> Result<()> {
    output::write_atomic_with(path, |w: &mut dyn Write| {
        writeln!(w, "{header}")?;
        for row in rows {
            let mut first = true;
            for field in &row {
                if !first {
                    w.write_all(b",")?;
                }
                first = false;
                w.write_all(quiclab_model::csv::field(field).as_bytes())?;
            }
            w.write_all(b"\n")?;
        }
        Ok(())
    })?;
    Ok(())
}

/// A table's header and rows (each a row's fields).
struct Table {
    file: &'static str,
    header: &'static str,
    rows: Vec<Vec<String>>,
}

/// An optional number as a CSV field (empty when absent).
pub(crate) fn num(v: Option<f64>) -> String {
    v.map(|v| v.to_string()).unwrap_or_default()
}

/// The trial's identity columns every per-trial table starts with (id, arm, condition, size,
/// iteration).
pub(crate) fn who(t: &TrialRecord) -> Vec<String> {
    vec![
        String::from(&t.id),
        String::from(&t.arm),
        String::from(&t.condition),
        t.size.to_string(),
        t.iteration.to_string(),
    ]
}

/// The ok trials with their measurements.
fn measured(trials: &[TrialRecord]) -> impl Iterator<Item = (&TrialRecord, &Metrics)> {
    trials
        .iter()
        .filter_map(|t| t.outcome.as_ref().ok().map(|m| (t, m)))
}

fn arms(c: &Campaign, trials: &[TrialRecord]) -> Table {
    let rows = c
        .arms
        .iter()
        .map(|a| {
            let config = trials.iter().find(|t| t.arm == a.name).map(|t| &t.config);
            vec![
                String::from(&a.name),
                String::from(&a.label),
                String::from(&a.server_stack),
                String::from(&a.client_stack),
                String::from(config.and_then(|c| c["arm"]["http"].as_str()).unwrap_or("")),
                String::from(
                    config
                        .and_then(|c| c["arm"]["telemetry"].as_str())
                        .unwrap_or(""),
                ),
                String::from(
                    &config
                        .map(|c| pairs(&c["arm"]["knobs"]))
                        .unwrap_or_default(),
                ),
                String::from(&a.caveats.join("; ")),
            ]
        })
        .collect();
    Table {
        file: "arms.csv",
        header: "arm,label,server_stack,client_stack,http,telemetry_mode,knobs,caveats",
        rows,
    }
}

fn conditions(c: &Campaign, trials: &[TrialRecord]) -> Table {
    let rows = c
        .conditions
        .iter()
        .map(|cond| {
            let keys = trials
                .iter()
                .find(|t| t.condition == cond.name)
                .map(|t| pairs(&t.config["condition"]["keys"]))
                .unwrap_or_default();
            vec![
                String::from(&cond.name),
                String::from(&cond.label),
                cond.rtt_ms.to_string(),
                cond.rate_bps.map(|r| r.to_string()).unwrap_or_default(),
                String::from(&keys),
            ]
        })
        .collect();
    Table {
        file: "conditions.csv",
        header: "condition,label,rtt_ms,rate_bps,link_keys",
        rows,
    }
}

fn pages(trials: &[TrialRecord]) -> (Table, Table) {
    let mut pages = Vec::new();
    let mut resources = Vec::new();
    for (t, m) in measured(trials) {
        let Some(p) = &m.detail.page else { continue };
        let b = p.browser.as_ref();
        let mut row = who(t);
        row.extend([
            String::from(&p.page),
            p.plt_ms.to_string(),
            p.render_ms.to_string(),
            p.speed_index_ms.to_string(),
            num(p.main_image_ms),
            p.connections.to_string(),
            p.resources.len().to_string(),
            String::from(b.map_or("", |b| b.browser.as_str())),
            num(b.and_then(|b| b.load_event_ms)),
            num(b.and_then(|b| b.first_contentful_paint_ms)),
            num(b.and_then(|b| b.largest_contentful_paint_ms)),
            num(b.and_then(|b| b.speed_index_ms)),
            num(b.and_then(|b| b.visually_complete_ms)),
        ]);
        pages.push(row);
        for r in &p.resources {
            let mut row = who(t);
            row.extend([
                String::from(&r.id),
                String::from(&r.kind),
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
            resources.push(row);
        }
    }
    (
        Table {
            file: "pages.csv",
            header: "trial_id,arm,condition,size_bytes,iteration,page,plt_ms,render_ms,\
                     speed_index_ms,main_image_ms,connections,resources,browser,\
                     browser_load_event_ms,browser_fcp_ms,browser_lcp_ms,\
                     browser_speed_index_ms,browser_visually_complete_ms",
            rows: pages,
        },
        Table {
            file: "resources.csv",
            header: "trial_id,arm,condition,size_bytes,iteration,resource,kind,bytes,urgency,\
                     incremental,critical,main_image,connection,start_ms,first_byte_ms,\
                     last_byte_ms",
            rows: resources,
        },
    )
}

/// The `q` quantile (nearest rank) of sorted values.
fn quantile(sorted: &[f64], q: f64) -> Option<f64> {
    let last = sorted.len().checked_sub(1)?;
    Some(sorted[((last as f64 * q).round() as usize).min(last)])
}

fn telemetry(trials: &[TrialRecord]) -> Table {
    let mut rows = Vec::new();
    for (t, m) in measured(trials) {
        let Some(d) = &m.detail.telemetry else {
            continue;
        };
        let mut ms: Vec<f64> = d
            .latency_us
            .iter()
            .flatten()
            .map(|&l| f64::from(l) / 1000.0)
            .collect();
        ms.sort_by(f64::total_cmp);
        let stalled_ms = d.stalls.iter().fold(0.0, |sum, s| sum + s.duration_ms);
        let mut row = who(t);
        row.extend([
            String::from(&d.mode),
            d.units_per_second.to_string(),
            d.flush_units.to_string(),
            d.latency_us.len().to_string(),
            ms.len().to_string(),
            num(quantile(&ms, 0.5)),
            num(quantile(&ms, 0.99)),
            num(ms.last().copied()),
            d.stalls.len().to_string(),
            stalled_ms.to_string(),
            d.send_late_p99_us.to_string(),
            d.realtime.to_string(),
        ]);
        rows.push(row);
    }
    Table {
        file: "telemetry.csv",
        header: "trial_id,arm,condition,size_bytes,iteration,mode,units_per_second,flush_units,\
                 units_sent,units_arrived,latency_p50_ms,latency_p99_ms,latency_max_ms,stalls,\
                 stalled_ms,send_late_p99_us,realtime",
        rows,
    }
}

fn bulk(trials: &[TrialRecord]) -> Table {
    let mut rows = Vec::new();
    for (t, m) in measured(trials) {
        let Some(b) = &m.detail.bulk else { continue };
        let (server_cpu, client_cpu) = b.cpu_per_gb();
        let mut row = who(t);
        row.extend([
            b.connections.to_string(),
            b.seconds.to_string(),
            b.bytes.to_string(),
            b.bps().to_string(),
            server_cpu.to_string(),
            client_cpu.to_string(),
            b.udp_payload.map(|p| p.to_string()).unwrap_or_default(),
        ]);
        rows.push(row);
    }
    Table {
        file: "bulk.csv",
        header: "trial_id,arm,condition,size_bytes,iteration,connections,seconds,acked_bytes,\
                 acked_bps,server_cpu_s_per_gb,client_cpu_s_per_gb,udp_payload_bytes",
        rows,
    }
}

/// Writes the tables into `out`: arms and conditions always, a workload's tables when some
/// trial has its measurements. Returns the files written.
pub(crate) fn write(out: &Path, c: &Campaign, trials: &[TrialRecord]) -> Result<Vec<PathBuf>> {
    let (pages, resources) = pages(trials);
    let mut files = Vec::new();
    for (table, always) in [
        (arms(c, trials), true),
        (conditions(c, trials), true),
        (pages, false),
        (resources, false),
        (telemetry(trials), false),
        (bulk(trials), false),
    ] {
        if !always && table.rows.is_empty() {
            continue;
        }
        let path = out.join(table.file);
        write_csv(&path, table.header, table.rows)?;
        files.push(path);
    }
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_by_nearest_rank() {
        let v = [1.0, 2.0, 3.0, 4.0, 5.0];
        assert_eq!(quantile(&v, 0.5), Some(3.0));
        assert_eq!(quantile(&v, 0.99), Some(5.0));
        assert_eq!(quantile(&v, 0.0), Some(1.0));
        assert_eq!(quantile(&[], 0.5), None);
    }
}
