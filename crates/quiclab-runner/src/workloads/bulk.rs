//! `bulk`: as much as the path carries for a set time, after a warm-up, over the trial's number
//! of parallel connections (its size), one client process and one GET of a huge object each:
//! aggregate goodput from what the server's connections had acknowledged, CPU per byte of both
//! ends, and the UDP payload QUIC settled on (study S2).

use std::time::Duration;

use quiclab_model::campaign::{BulkDetail, Detail, Metrics, Workload};
use quiclab_model::task::{Ask, Connection, Get, Request};
use serde_json::json;

use super::{ClientPhase, Ran, TrialCtx, WorkloadKind, link_drops, link_ok};
use crate::bulk as measure;
use crate::keys::{PlanError, WorkloadKeys};

pub struct Bulk;

/// The most parallel connections a bulk trial may open (one client process each).
pub const MAX_CONNECTIONS: i64 = 256;

impl WorkloadKind for Bulk {
    fn kind(&self) -> &'static str {
        "bulk"
    }

    fn keys(&self) -> &'static [&'static str] {
        &["connections", "duration"]
    }

    fn parse(&self, keys: &WorkloadKeys) -> Result<(Workload, Vec<u64>), PlanError> {
        let (d, d_at) = keys.duration()?;
        if d < Duration::from_secs(1) {
            return Err(keys.err(Some(d_at), "duration: allowed: from 1s to 1 hour"));
        }
        let Some(v) = keys.get("connections") else {
            return Err(keys.missing("connections, e.g. [1, 8, 64]"));
        };
        let toml::Value::Array(items) = v.get_ref() else {
            return Err(keys.err(
                Some(v.span()),
                "connections: allowed: a list of connection counts, e.g. [1, 8, 64]",
            ));
        };
        let mut counts = Vec::new();
        for item in items {
            match item {
                toml::Value::Integer(n) if (1..=MAX_CONNECTIONS).contains(n) => {
                    if counts.contains(&(*n as u64)) {
                        return Err(
                            keys.err(Some(v.span()), format!("connections: {n} is listed twice"))
                        );
                    }
                    counts.push(*n as u64);
                }
                other => {
                    return Err(keys.err(
                        Some(v.span()),
                        format!(
                            "connections: {other}: allowed: whole numbers from 1 to \
                             {MAX_CONNECTIONS}"
                        ),
                    ));
                }
            }
        }
        if counts.is_empty() {
            return Err(keys.err(Some(v.span()), "connections: give at least one count"));
        }
        Ok((
            Workload::Bulk {
                duration_ms: d.as_millis() as u64,
            },
            counts,
        ))
    }

    fn grid(&self, w: &Workload, sizes: &[u64]) -> String {
        let duration_ms = match w {
            Workload::Bulk { duration_ms } => *duration_ms,
            _ => 0,
        };
        format!(
            "{} connection counts ({} s each)",
            sizes.len(),
            quiclab_model::units::number(duration_ms as f64 / 1000.0, 1)
        )
    }

    fn trial(&self, w: &Workload, size: u64, _seed: u64) -> (Vec<u64>, serde_json::Value) {
        let duration_ms = match w {
            Workload::Bulk { duration_ms } => *duration_ms,
            _ => 0,
        };
        // the trial's size is its connection count; each connection makes one GET
        (
            Vec::new(),
            json!({"kind": "bulk", "connections": size, "duration_ms": duration_ms}),
        )
    }

    fn keeps_packets(&self) -> bool {
        // it moves gigabytes: no packet capture, event log or qlog
        false
    }

    fn client(&self, t: &TrialCtx) -> ClientPhase {
        let measured = match t.workload {
            Workload::Bulk { duration_ms } => Duration::from_millis(*duration_ms),
            _ => Duration::ZERO,
        };
        ClientPhase::Timed {
            request: Request::unrecorded(Ask::Get(Get {
                urls: vec![t.bytes_url(quiclab_model::task::MAX_BYTES)],
                connection: Connection::Reuse,
                repeat: 1,
                resume: false,
            })),
            connections: u32::try_from(t.size).unwrap_or(u32::MAX),
            measured,
        }
    }

    fn metrics(
        &self,
        t: &TrialCtx,
        ran: &Ran,
        _requests_out: &mut serde_json::Value,
    ) -> Result<Metrics, String> {
        let Some(run) = ran.timed else {
            return Err("the bulk clients did not run".into());
        };
        link_ok(ran.reports)?;
        let device_drops: u64 = ran.reports.iter().map(|r| r.device_drops).sum();
        let text = std::fs::read_to_string(ran.server_output)
            .map_err(|e| format!("reading {}: {e}", ran.server_output.display()))?;
        let samples = measure::samples(&text)?;
        let bytes = measure::acked_between(&samples, run.t0_us, run.t1_us);
        if bytes == 0 {
            return Err("nothing was acknowledged over the measured interval".into());
        }
        let (udp_payload, udp_payload_reached_ms) = measure::udp_payload(&samples);
        let b = BulkDetail {
            connections: u32::try_from(t.size).unwrap_or(u32::MAX),
            seconds: (run.t1_us - run.t0_us) as f64 / 1e6,
            bytes,
            server_cpu_s: run.server_cpu_s,
            client_cpu_s: run.client_cpu_s,
            udp_payload,
            udp_payload_reached_ms,
        };
        Ok(Metrics {
            ttlb_ms: b.seconds * 1000.0,
            ttfb_ms: f64::NAN,
            handshake_ms: None,
            handshake_rtts: None,
            hello_retry: false,
            packets_lost: None,
            bytes_resent: None,
            first_retransmit_offset: None,
            impossible_rtt_samples: None,
            // the kernel's own drops count too: at these rates the host is part of the path
            link_drops: link_drops(ran.reports) + device_drops,
            timeline: Vec::new(),
            detail: Detail {
                bulk: Some(b),
                ..Detail::default()
            },
        })
    }
}
