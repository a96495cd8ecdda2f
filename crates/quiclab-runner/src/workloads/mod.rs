//! The workload registry: every kind a plan's `[workload]` can name, one module each behind
//! [`WorkloadKind`], and one line in [`WORKLOADS`].
//!
//! A workload owns its plan keys and their checks, what a trial of it is (its requests and the
//! configuration hashed into the trial's id), what the client is asked to do, how long that may
//! take, and the trial's metrics from the files the endpoints wrote. The trial only orchestrates:
//! topology, processes, timing and the store. The stored shape of a workload is its variant of
//! [`Workload`] (quiclab-model), and its report section lives in quiclab-report.

mod bulk;
mod pages;
mod repeat;
pub(crate) mod requests;
mod segments;
mod single_object;
mod telemetry;
mod upload;

use std::path::Path;
use std::process::ExitStatus;
use std::time::Duration;

use quiclab_link::LinkConfig;
use quiclab_model::campaign::{Metrics, Workload};
use quiclab_netns::DirectionReport;

use crate::keys::{PlanError, Table, WorkloadKeys};
use crate::stacks::Capability;
use quiclab_model::task::Request;

pub use bulk::MAX_CONNECTIONS as MAX_BULK_CONNECTIONS;
pub use segments::segment_sizes;

/// Every workload kind, in the order help texts list them.
pub static WORKLOADS: &[&dyn WorkloadKind] = &[
    &single_object::SingleObject,
    &repeat::Repeat,
    &segments::Segments,
    &telemetry::Telemetry,
    &bulk::Bulk,
    &pages::Pages,
    &upload::Upload,
];

/// The workload kind called `kind`.
pub fn find(kind: &str) -> Option<&'static dyn WorkloadKind> {
    WORKLOADS.iter().copied().find(|w| w.kind() == kind)
}

/// The module of a parsed workload.
pub fn of(w: &Workload) -> &'static dyn WorkloadKind {
    // every kind the model knows is registered (tested below)
    find(w.kind()).unwrap_or(WORKLOADS[0])
}

/// Every kind's name, for messages.
pub fn kinds() -> String {
    WORKLOADS
        .iter()
        .map(|w| format!("{:?}", w.kind()))
        .collect::<Vec<_>>()
        .join(", ")
}

/// What one trial is, for the workload's functions: the plan's workload, the trial's size and
/// requests, its path, and what its arm says about resumption.
#[derive(Debug, Clone, Copy)]
pub struct TrialCtx<'a> {
    pub workload: &'a Workload,
    /// The trial's size (bytes, a page's bytes, or a bulk trial's connection count).
    pub size: u64,
    /// Body sizes of its requests, in order (from [`WorkloadKind::trial`]).
    pub requests: &'a [u64],
    /// The condition's link (seed aside).
    pub link: &'a LinkConfig,
    /// The plan's `trial-timeout`, if it sets one.
    pub trial_timeout: Option<Duration>,
    /// The client resumes sessions unless told otherwise: the arm sets no `resume` and its
    /// client stack resumes.
    pub resume_by_default: bool,
    /// The scheme of the client stack's URLs ("https", or "http" without TLS).
    pub scheme: &'static str,
    /// What the server stack's record of its sending side offers the time budget.
    pub sender_record: &'a [quiclab_model::budget::SenderRecord],
}

impl TrialCtx<'_> {
    /// The path's bottleneck rate (the slower direction's), bit/s.
    pub fn rate_bps(&self) -> Option<u64> {
        self.link.bottleneck_bps()
    }

    /// The URL of `path` (e.g. "/bytes/1000", or "" for the origin) on the trial's server.
    pub fn url(&self, path: &str) -> String {
        format!(
            "{}://{}{path}",
            self.scheme,
            quiclab_netns::topology::SERVER_V4
        )
    }

    /// The URL of `size` bytes on the trial's server.
    pub fn bytes_url(&self, size: u64) -> String {
        self.url(&format!("/bytes/{size}"))
    }

    /// The path's minimum RTT, ms.
    pub fn min_rtt_ms(&self) -> f64 {
        self.link.min_rtt().as_secs_f64() * 1000.0
    }
}

/// How the client side of a trial runs.
#[derive(Debug, Clone)]
pub enum ClientPhase {
    /// One client, run to its end.
    Once(Request),
    /// `connections` clients (one process each) that keep going: measured for `measured`
    /// after a warm-up, then stopped.
    Timed {
        request: Request,
        connections: u32,
        measured: Duration,
    },
}

/// What a timed client phase measured.
#[derive(Debug, Clone, Copy)]
pub struct TimedRun {
    /// The measured interval, on the records' clock (µs).
    pub t0_us: u64,
    pub t1_us: u64,
    /// CPU time over it: the server process and all clients, s.
    pub server_cpu_s: f64,
    pub client_cpu_s: f64,
}

/// What a trial left behind, for its metrics.
#[derive(Debug, Clone, Copy)]
pub struct Ran<'a> {
    /// The trial's folder.
    pub dir: &'a Path,
    /// The client's standard output (records) and log.
    pub client_out: &'a Path,
    pub client_log: &'a Path,
    pub server_log: &'a Path,
    /// What the server wrote: its sending side's timeline, or the telemetry units it received.
    pub server_output: &'a Path,
    /// How the client ended: `None` if it hit `timeout` (a timed phase has none).
    pub status: Option<ExitStatus>,
    pub timeout: Duration,
    /// A timed phase's measurements.
    pub timed: Option<TimedRun>,
    /// The link's reports, both directions.
    pub reports: &'a [DirectionReport],
    /// The emulator's clock origin, ns (event log times are relative to it).
    pub link_epoch_ns: u64,
}

/// What the server writes for a workload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerWrites {
    /// Its sending side's timeline.
    Timeline,
    /// The telemetry units it received.
    Units,
}

/// A workload kind.
pub trait WorkloadKind: Sync {
    /// The kind as plans write it (`kind = "..."`), and as [`Workload::kind`] names it.
    fn kind(&self) -> &'static str;
    /// Its `[workload]` keys besides `kind`.
    fn keys(&self) -> &'static [&'static str];
    /// What it needs the client stack to do: stacks without it cannot run it.
    fn needs(&self) -> Capability {
        Capability::Get
    }
    /// What else both stacks must do for the workload as the plan set it (a key that asks the
    /// server for something), if anything.
    fn needs_also(&self, _w: &Workload) -> Option<Capability> {
        None
    }
    /// The workload and the trial sizes from `[workload]`.
    fn parse(&self, keys: &WorkloadKeys) -> Result<(Workload, Vec<u64>), PlanError>;
    /// Whether a trial connects more than once from one client, so that a session can be
    /// resumed (the arm key `resume`).
    fn resumes(&self) -> bool {
        false
    }
    /// Refuses an arm's keys the workload cannot honour (by default `resume` where nothing
    /// could be resumed: it would silently do nothing).
    fn check_arm(&self, keys: &WorkloadKeys, arm: &str, t: &Table) -> Result<(), PlanError> {
        match t.iter().find(|(k, _)| k.get_ref() == "resume") {
            Some((_, v)) if !self.resumes() => Err(keys.err(
                Some(v.span()),
                format!(
                    "arm {arm:?}: resume: the {} workload connects once per client, with no \
                     session to resume; allowed with the repeat workload (each request on a \
                     new connection)",
                    self.kind()
                ),
            )),
            _ => Ok(()),
        }
    }
    /// What the plan's sizes are, for the line `quiclab run` starts with ("3 sizes").
    fn grid(&self, _w: &Workload, sizes: &[u64]) -> String {
        format!("{} sizes", sizes.len())
    }
    /// A trial of `size` in the iteration of `seed`: its requests' body sizes (what a server of
    /// static files must hold: a page's resources, each size once), and how the
    /// trial's configuration (hashed into its id) names the workload.
    fn trial(&self, w: &Workload, size: u64, seed: u64) -> (Vec<u64>, serde_json::Value);
    /// The page whose real web content the server serves (under `site/`, for a browser).
    fn site(&self, _t: &TrialCtx) -> Option<quiclab_pages::page::Page> {
        None
    }
    /// What the server writes.
    fn server_writes(&self) -> ServerWrites {
        ServerWrites::Timeline
    }
    /// Trials keep their packet capture, event log and qlogs (not when they are gigabytes).
    fn keeps_packets(&self) -> bool {
        true
    }
    /// Its endpoints' timing is the measurement: no more trials at once than cores.
    fn timing_sensitive(&self) -> bool {
        false
    }
    /// How the client runs.
    fn client(&self, t: &TrialCtx) -> ClientPhase;
    /// The longest the client may run: generous against the ideal transfer time of all its
    /// requests and their round trips, so only a stuck transfer hits it.
    fn timeout(&self, t: &TrialCtx) -> Duration {
        if let Some(d) = t.trial_timeout {
            return d;
        }
        let bytes: u64 = t.requests.iter().sum::<u64>().max(t.size);
        let ideal = match t.rate_bps() {
            Some(bps) => bytes as f64 * 8.0 / bps as f64,
            None => bytes as f64 * 8.0 / 1e9,
        };
        // a handshake and a request round trip or two per request, many times over
        let rtts = 50.0 + 10.0 * t.requests.len().saturating_sub(1) as f64;
        Duration::from_secs_f64(30.0 + 20.0 * ideal + rtts * t.link.min_rtt().as_secs_f64())
    }
    /// The trial's metrics from what it left; `Err` says why it failed. What the client
    /// reported goes to `requests_out` either way (stored with the trial).
    fn metrics(
        &self,
        t: &TrialCtx,
        ran: &Ran,
        requests_out: &mut serde_json::Value,
    ) -> Result<Metrics, String>;
}

// ---- checks every workload makes ----

/// The emulator did not fail.
pub(crate) fn link_ok(reports: &[DirectionReport]) -> Result<(), String> {
    match reports.iter().find_map(|r| r.error.clone()) {
        Some(err) => Err(format!("the link emulator failed: {err}")),
        None => Ok(()),
    }
}

/// The client finished before its timeout.
pub(crate) fn finished(ran: &Ran) -> Result<ExitStatus, String> {
    ran.status
        .ok_or_else(|| format!("the client did not finish within {:?}", ran.timeout))
}

/// The client exited successfully.
pub(crate) fn exited_ok(status: ExitStatus, ran: &Ran) -> Result<(), String> {
    if status.success() {
        Ok(())
    } else {
        Err(format!(
            "the client exited with {status}: {}",
            crate::outputs::tail(ran.client_log, 3)
        ))
    }
}

/// The kernel dropped nothing before the emulator: loss the condition did not ask for means the
/// measurement is not of this condition.
pub(crate) fn host_kept_up(reports: &[DirectionReport]) -> Result<(), String> {
    let device_drops: u64 = reports.iter().map(|r| r.device_drops).sum();
    if device_drops > 0 {
        return Err(format!(
            "{device_drops} packets were dropped by the kernel before reaching the emulator \
             (the host could not keep up)"
        ));
    }
    Ok(())
}

/// Packets the emulator dropped, both directions.
pub(crate) fn link_drops(reports: &[DirectionReport]) -> u64 {
    reports.iter().map(|r| r.counters.dropped_total()).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_the_model_knows_is_registered_once() {
        let model_kinds = [
            Workload::default(),
            Workload::Repeat { requests: 1 },
            Workload::Segments {
                count: 1,
                min_bytes: 1,
                max_bytes: 1,
                stream_rate_bps: 1,
                player_buffer_ms: 1,
            },
            Workload::Telemetry {
                units_per_second: 1,
                flush_units: 1,
                duration_ms: 1,
            },
            Workload::Bulk { duration_ms: 1 },
            Workload::Pages { pages: Vec::new() },
        ];
        for w in &model_kinds {
            assert_eq!(of(w).kind(), w.kind());
        }
        for (i, w) in WORKLOADS.iter().enumerate() {
            assert!(WORKLOADS[..i].iter().all(|o| o.kind() != w.kind()));
        }
        assert!(find("nope").is_none());
    }
}
