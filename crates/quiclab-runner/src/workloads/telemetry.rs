//! `telemetry`: 8-byte timestamped units from client to server at a constant rate, in flushes,
//! for a set time; each arm says how flushes travel (its telemetry mode). Measured per unit:
//! one-way latency, and the stalls traced to the packets the emulator dropped (study S5,
//! head-of-line blocking).

use std::time::Duration;

use quiclab_model::campaign::{Detail, Metrics, Workload};
use quiclab_model::task::{self, Ask, Request};
use quiclab_telemetry::{MAX_FLUSH_UNITS, MAX_UNITS_PER_SECOND, UNIT_BYTES};
use serde_json::json;

use super::{
    ClientPhase, Ran, ServerWrites, TrialCtx, WorkloadKind, exited_ok, finished, host_kept_up,
    link_drops,
};
use crate::keys::{PlanError, WorkloadKeys};
use crate::outputs::tail;
use crate::stacks::Capability;
use crate::telemetry as units;

pub struct Telemetry;

/// The workload's numbers (or zeros for another kind, which never reaches here).
fn params(w: &Workload) -> (u32, u32, u64) {
    match *w {
        Workload::Telemetry {
            units_per_second,
            flush_units,
            duration_ms,
        } => (units_per_second, flush_units, duration_ms),
        _ => (0, 0, 0),
    }
}

impl WorkloadKind for Telemetry {
    fn kind(&self) -> &'static str {
        "telemetry"
    }

    fn keys(&self) -> &'static [&'static str] {
        &["units-per-second", "flush", "duration"]
    }

    fn needs(&self) -> Capability {
        Capability::Telemetry
    }

    fn parse(&self, keys: &WorkloadKeys) -> Result<(Workload, Vec<u64>), PlanError> {
        let units_per_second =
            keys.int("units-per-second", (1, i64::from(MAX_UNITS_PER_SECOND)))?;
        let flush_units = keys.int("flush", (1, i64::from(MAX_FLUSH_UNITS)))?;
        let (d, d_at) = keys.duration()?;
        let units = (d.as_secs_f64() * f64::from(units_per_second)).round() as u64;
        if units == 0 {
            return Err(keys.err(
                Some(d_at),
                "duration: allowed: from one unit interval to 1 hour",
            ));
        }
        Ok((
            Workload::Telemetry {
                units_per_second,
                flush_units,
                duration_ms: d.as_millis() as u64,
            },
            // the trial's bytes: every unit's
            vec![units * UNIT_BYTES as u64],
        ))
    }

    fn grid(&self, w: &Workload, _sizes: &[u64]) -> String {
        let (units_per_second, flush_units, duration_ms) = params(w);
        format!(
            "{} units ({units_per_second}/s in flushes of {flush_units})",
            u64::from(units_per_second) * duration_ms / 1000
        )
    }

    fn trial(&self, w: &Workload, _size: u64, _seed: u64) -> (Vec<u64>, serde_json::Value) {
        let (units_per_second, flush_units, duration_ms) = params(w);
        // no requests: units, whose bytes are the trial's size
        (
            Vec::new(),
            json!({"kind": "telemetry", "units_per_second": units_per_second,
                   "flush_units": flush_units, "duration_ms": duration_ms}),
        )
    }

    fn server_writes(&self) -> ServerWrites {
        // the server receives: its own sending side (acknowledgements) says nothing
        ServerWrites::Units
    }

    fn timing_sensitive(&self) -> bool {
        true
    }

    fn client(&self, t: &TrialCtx) -> ClientPhase {
        let (units_per_second, flush_units, duration_ms) = params(t.workload);
        ClientPhase::Once(Request::recorded(Ask::Telemetry(task::Telemetry {
            url: t.url(""),
            units_per_second,
            flush_units,
            duration_us: duration_ms * 1000,
            drain_us: task::Telemetry::DEFAULT_DRAIN_US,
            realtime: true,
        })))
    }

    fn timeout(&self, t: &TrialCtx) -> Duration {
        // the units' own time, then the client's drain (10 s at most) and set-up
        t.trial_timeout
            .unwrap_or(Duration::from_millis(params(t.workload).2) + Duration::from_secs(40))
    }

    /// Fails if the run was cut short or a reliable mode lost units.
    fn metrics(
        &self,
        t: &TrialCtx,
        ran: &Ran,
        requests_out: &mut serde_json::Value,
    ) -> Result<Metrics, String> {
        let (flushes, summary) = units::read_client(ran.client_out);
        if let Some(s) = &summary {
            // the summary only: the flushes are in the trial's folder
            *requests_out = json!([s]);
        }
        let status = finished(ran)?;
        let Some(summary) = summary else {
            return Err(format!(
                "the client ({status}) wrote no summary: {}",
                tail(ran.client_log, 3)
            ));
        };
        if let Some(e) = &summary.error {
            return Err(format!("telemetry: {e}"));
        }
        exited_ok(status, ran)?;
        host_kept_up(ran.reports)?;
        let (received, ends) = units::read_server(ran.server_output);
        if let Some(e) = ends.iter().find_map(|c| c.error.clone()) {
            return Err(format!("the server's telemetry connection failed: {e}"));
        }
        let link = units::read_link_events(&ran.dir.join("events.jsonl"), ran.link_epoch_ns);
        let server_realtime =
            std::fs::read_to_string(ran.server_log).is_ok_and(|t| t.contains("real-time priority"));
        let path = units::PathModel {
            one_way_us: t.link.up.delay.as_micros() as u64,
            rtt_us: t.link.min_rtt().as_micros() as u64,
            loss_up: t.link.up.loss,
            loss_down: t.link.down.loss,
        };
        let (mut detail, outcomes) =
            units::detail(&summary, &flushes, &received, &link, path, server_realtime);
        detail.loss_detection = units::read_client_losses(ran.dir);
        let missing = outcomes.iter().filter(|o| o.recv_us.is_none()).count();
        if missing > 0 && !summary.mode.unreliable() {
            return Err(format!(
                "{missing} of {} units never arrived over {}, a reliable mode",
                outcomes.len(),
                summary.mode
            ));
        }
        if outcomes.is_empty() {
            return Err("the client sent no unit".into());
        }
        let since_connect = |t: u64| t.saturating_sub(summary.connect_us) as f64 / 1000.0;
        let recv = || outcomes.iter().filter_map(|o| o.recv_us);
        let handshake_ms = summary.handshake_done_us.map(since_connect);
        let min_rtt_ms = path.rtt_us as f64 / 1000.0;
        let stats = &summary.transport_stats;
        Ok(Metrics {
            // the whole run, from the connection attempt to the first and the last unit received
            ttlb_ms: recv().max().map_or(f64::NAN, since_connect),
            ttfb_ms: recv().min().map_or(f64::NAN, since_connect),
            handshake_ms,
            handshake_rtts: handshake_ms
                .filter(|_| min_rtt_ms > 0.0)
                .map(|h| h / min_rtt_ms),
            hello_retry: false,
            // the client sends: its own count (the bytes it re-sent are not kept)
            packets_lost: stats.packets_lost,
            bytes_resent: None,
            first_retransmit_offset: None,
            impossible_rtt_samples: stats.impossible_rtt_samples,
            link_drops: link_drops(ran.reports),
            timeline: Vec::new(),
            detail: Detail {
                telemetry: Some(detail),
                ..Detail::default()
            },
        })
    }
}
