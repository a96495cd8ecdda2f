//! What a report is made from: a campaign's arms, conditions, workload sizes, comparisons and
//! every trial with its outcome. Filled by the results store; read-only here.

use serde::{Deserialize, Serialize};

pub use crate::page::{BrowserDetail, PageDetail, PageInfo, ResourceTimes};

/// One campaign, as stored.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Campaign {
    /// The plan's name (e.g. "www21").
    pub name: String,
    /// One-paragraph description from the plan.
    pub description: String,
    /// Where the plan came from (a path, or "built-in www21").
    pub plan_source: String,
    /// The profile the campaign ran with ("full" or "quick").
    pub profile: String,
    /// Facts about the machine and the build: (key, value), e.g. ("kernel", "6.18.0"),
    /// ("quiclab", "0.1.0 abc1234"), ("net.ipv4.tcp_wmem", "4096 16384 4194304").
    pub provenance: Vec<(String, String)>,
    /// Arms in plan order; colours follow this order.
    pub arms: Vec<Arm>,
    /// Network conditions in plan order (the heatmap's rows).
    pub conditions: Vec<Condition>,
    /// The baseline condition run just before every trial of the other conditions (same arm,
    /// iteration and size), so that each impaired trial has a normal one next to it in time;
    /// `None` when conditions simply follow each other. See [`Trial::before`].
    #[serde(default)]
    pub interleave: Option<String>,
    /// What every trial does (the kind decides which sections the report shows).
    #[serde(default)]
    pub workload: Workload,
    /// Object sizes in bytes, ascending (the heatmap's columns).
    pub sizes: Vec<u64>,
    /// Pairs (a, b) of arm names: each is shown as the change of b relative to a.
    pub comparisons: Vec<Comparison>,
    pub trials: Vec<Trial>,
    /// Seconds the hosts' CPUs were nearly saturated while the campaign ran (summed over its
    /// runs and shards); `None` when not measured.
    #[serde(default)]
    pub busy_seconds: Option<u64>,
    /// When they were, host by host.
    #[serde(default)]
    pub busy: Vec<BusySpell>,
    /// Adaptive iterations: each condition and size stops once every compared difference in
    /// it is known well enough; `None` for a fixed number of iterations.
    #[serde(default)]
    pub adaptive: Option<AdaptiveIterations>,
    /// Causes planted on purpose (a plan's `[[planted]]`), against which the time budgets'
    /// explanations are checked.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub planted: Vec<Planted>,
}

/// A plan's `iterations = { min, max, ci }`: at least `min` and at most `max` iterations of
/// each condition and size, stopping once the 95 % interval of every compared difference in it
/// is at most `ci` wide on each side (a fraction: 0.02 is ±2 %).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct AdaptiveIterations {
    pub min: u32,
    pub max: u32,
    pub ci: f64,
}

/// A stretch of time during which a host's CPUs were nearly saturated: trials that ran then may
/// have measured the machine as well as the network.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BusySpell {
    /// The machine, when known.
    #[serde(default)]
    pub host: Option<String>,
    /// From and to, ms since the Unix epoch.
    pub from_unix_ms: u64,
    pub to_unix_ms: u64,
}

impl BusySpell {
    /// Whether a trial on `host` from `started_unix_ms` for `wall_ms` overlaps this spell (a
    /// host unknown on either side counts as the same).
    pub fn overlaps(&self, host: Option<&str>, started_unix_ms: u64, wall_ms: f64) -> bool {
        let same_host = match (self.host.as_deref(), host) {
            (Some(a), Some(b)) => a == b,
            _ => true,
        };
        let end = started_unix_ms + wall_ms.max(0.0).round() as u64;
        same_host && started_unix_ms < self.to_unix_ms && self.from_unix_ms < end
    }
}

/// What one trial does, after a plan's profile is applied.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Workload {
    /// One GET of the trial's size on a new connection; the server holds its response
    /// `response_delay_us` after the request arrives (0: not at all).
    SingleObject {
        #[serde(default, skip_serializing_if = "is_zero")]
        response_delay_us: u64,
    },
    /// `requests` GETs of the trial's size one after another, each on a new connection; every
    /// connection after the first resumes the TLS session of an earlier one (over QUIC the
    /// request then goes as 0-RTT data).
    Repeat { requests: u32 },
    /// `count` GETs one after another on one connection, of sizes drawn uniformly from
    /// `min_bytes..=max_bytes` by the iteration's seed (so every arm and condition of an
    /// iteration fetches the same sizes), like a video player fetching segments.
    Segments {
        count: u32,
        min_bytes: u64,
        max_bytes: u64,
        /// The video's bit rate: a segment of `b` bytes plays for `b * 8 / stream_rate_bps`
        /// seconds. Used by the report's playback estimate only (not part of a trial's identity).
        #[serde(default = "default_stream_rate_bps")]
        stream_rate_bps: u64,
        /// Seconds of video a player buffers before it starts playing, in ms. Report only too.
        #[serde(default = "default_player_buffer_ms")]
        player_buffer_ms: u64,
    },
    /// 8-byte timestamped units from client to server, `units_per_second` of them, sent in
    /// flushes of `flush_units`, for `duration_ms`; each arm says how flushes travel (its
    /// telemetry mode). Measured per unit: one-way latency (study S5, head-of-line blocking).
    Telemetry {
        units_per_second: u32,
        flush_units: u32,
        duration_ms: u64,
    },
    /// Downloads as much as the path carries for `duration_ms` (after a warm-up) over the
    /// trial's number of parallel connections, which is the trial's **size**: aggregate goodput
    /// and CPU per byte of both ends (study S2, bulk throughput and packet size).
    Bulk { duration_ms: u64 },
    /// A web page loaded like a browser loads it (see `quiclab page`), one page per size: each
    /// page's total bytes are its trial size. TTLB is the page load time.
    Pages { pages: Vec<PageInfo> },
    /// HTTP requests timed by their TTLB, of a kind with no report section of its own (the
    /// TTLB sections show it): the kind as plans name it, and the line the report's header
    /// gives it.
    Requests { name: String, description: String },
}

impl Default for Workload {
    fn default() -> Workload {
        Workload::SingleObject {
            response_delay_us: 0,
        }
    }
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// The stream rate of a segments workload when the plan names none: 6 Mbit/s, HD video as in
/// the HLS study.
pub const DEFAULT_STREAM_RATE_BPS: u64 = 6_000_000;
/// The player buffer of a segments workload when the plan names none: 10 s.
pub const DEFAULT_PLAYER_BUFFER_MS: u64 = 10_000;

fn default_stream_rate_bps() -> u64 {
    DEFAULT_STREAM_RATE_BPS
}

fn default_player_buffer_ms() -> u64 {
    DEFAULT_PLAYER_BUFFER_MS
}

impl Workload {
    /// The kind's name as plans spell it.
    pub fn kind(&self) -> &str {
        match self {
            Workload::Requests { name, .. } => name,
            Workload::SingleObject { .. } => "single-object",
            Workload::Repeat { .. } => "repeat",
            Workload::Segments { .. } => "segments",
            Workload::Telemetry { .. } => "telemetry",
            Workload::Bulk { .. } => "bulk",
            Workload::Pages { .. } => "pages",
        }
    }

    /// One line for the report's header.
    pub fn describe(&self) -> String {
        match self {
            Workload::SingleObject {
                response_delay_us: 0,
            } => "one GET per trial, on a new connection".into(),
            Workload::SingleObject { response_delay_us } => format!(
                "one GET per trial, on a new connection, its response held {} by the server",
                crate::units::ms(*response_delay_us as f64 / 1000.0)
            ),
            Workload::Repeat { requests } => {
                format!("{requests} GETs per trial, each on a new connection resuming a session")
            }
            Workload::Segments {
                count,
                min_bytes,
                max_bytes,
                ..
            } => format!(
                "{count} GETs per trial on one connection, of {} to {}",
                crate::units::size(*min_bytes),
                crate::units::size(*max_bytes)
            ),
            Workload::Telemetry {
                units_per_second,
                flush_units,
                duration_ms,
            } => format!(
                "telemetry: {units_per_second} units of 8 bytes per second from client to server, \
                 sent in flushes of {flush_units}, for {} s per trial",
                crate::units::number(*duration_ms as f64 / 1000.0, 1)
            ),
            Workload::Bulk { duration_ms } => format!(
                "bulk: as much as the path carries for {} s per trial over 1 or more parallel \
                 connections (one GET of a huge object each)",
                crate::units::number(*duration_ms as f64 / 1000.0, 1)
            ),
            Workload::Requests { description, .. } => description.clone(),
            Workload::Pages { pages } => format!(
                "one page load per trial ({}), every resource requested as a browser discovers it",
                pages
                    .iter()
                    .map(|p| format!("{}: {} resources", p.name, p.resources))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        }
    }

    /// True for workloads made of HTTP GETs timed from the first request to the last byte (the
    /// TTLB sections apply).
    pub fn is_requests(&self) -> bool {
        matches!(
            self,
            Workload::SingleObject { .. }
                | Workload::Repeat { .. }
                | Workload::Segments { .. }
                | Workload::Pages { .. }
                | Workload::Requests { .. }
        )
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Arm {
    /// Short name from the plan, e.g. "h3-cubic".
    pub name: String,
    /// Human description, e.g. "HTTP/3 over QUIC (quinn), cubic".
    pub label: String,
    /// Labels that must appear next to results, e.g. "quinn's BBR is experimental".
    pub caveats: Vec<String>,
    /// The stacks that served and fetched (e.g. "ngtcp2", "quinn"); empty in campaigns
    /// recorded before arms named them.
    #[serde(default)]
    pub server_stack: String,
    #[serde(default)]
    pub client_stack: String,
    /// The client is a real browser (its page loads are the browser's own measurements).
    #[serde(default)]
    pub client_browser: bool,
    /// The transport its trials run over, as its stacks say; `None` in campaigns recorded
    /// before arms said.
    #[serde(default)]
    pub transport: Option<crate::record::Transport>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Condition {
    /// Short name, e.g. "loss-1%" or "rtt+50ms".
    pub name: String,
    /// Human description, e.g. "10 Mbit/s, 20 ms RTT, 1 % loss each way".
    pub label: String,
    /// The path's minimum round-trip time in ms (propagation only, no queueing): the unit in
    /// which time differences are explained ("one RTT").
    pub rtt_ms: f64,
    /// Bottleneck rate in bits per second, if any.
    pub rate_bps: Option<u64>,
    /// The condition this one impairs: the same path (rate, queue, MTU...) without its loss,
    /// extra delay, jitter or reordering. Each arm's change under the impairment is measured
    /// against its own trials there. `None` for an unimpaired condition, or one whose plan has
    /// no such condition.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base: Option<String>,
}

/// A cause planted on purpose: a planted arm against its control arm (every condition), or a
/// planted condition against its base (every arm), and the budget components that must account
/// for what it costs (none: nothing was planted, and no difference may be found).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Planted {
    /// The control arm and the arm with the cause.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arms: Option<Comparison>,
    /// The condition with the cause (its control is its base).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub condition: Option<String>,
    /// For planted arms: the one condition they are checked in (every one when `None`).
    #[serde(default, rename = "in", skip_serializing_if = "Option::is_none")]
    pub within: Option<String>,
    /// For a planted condition: the arms it is checked for (every arm when empty).
    #[serde(default, rename = "for", skip_serializing_if = "Vec::is_empty")]
    pub for_arms: Vec<String>,
    pub causes: Vec<crate::budget::Component>,
}

impl Planted {
    /// The cells it is checked in, as ((control arm, arm), (control condition, condition))
    /// indices, given the campaign's arm names and each condition's name and base (by name):
    /// a pair of arms in every condition or the one `in` names; a planted condition against its
    /// base for every arm or those listed. Names not among them give no cell.
    pub fn cells(
        &self,
        arms: &[&str],
        conditions: &[(&str, Option<&str>)],
    ) -> Vec<((usize, usize), (usize, usize))> {
        let arm = |name: &str| arms.iter().position(|a| *a == name);
        let cond = |name: &str| conditions.iter().position(|c| c.0 == name);
        let mut cells = Vec::new();
        if let Some(pair) = &self.arms {
            let (Some(a), Some(b)) = (arm(&pair.a), arm(&pair.b)) else {
                return cells;
            };
            for (ci, c) in conditions.iter().enumerate() {
                if self.within.as_deref().is_none_or(|w| w == c.0) {
                    cells.push(((a, b), (ci, ci)));
                }
            }
        } else if let Some(ci) = self.condition.as_deref().and_then(cond)
            && let Some(base) = conditions[ci].1.and_then(cond)
        {
            for (a, name) in arms.iter().enumerate() {
                if self.for_arms.is_empty() || self.for_arms.iter().any(|f| f == name) {
                    cells.push(((a, a), (base, ci)));
                }
            }
        }
        cells
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Comparison {
    /// Baseline arm.
    pub a: String,
    /// Arm compared against the baseline: the change shown is (b - a) / a.
    pub b: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Trial {
    /// Stable identifier (hash of the resolved configuration).
    pub id: String,
    pub arm: String,
    pub condition: String,
    /// Object size in bytes.
    pub size: u64,
    pub iteration: u32,
    /// Seed of the link emulator; arms of one iteration share it (same packet fates).
    pub seed: u64,
    /// For a trial of the campaign's interleaved baseline condition: the condition whose trial
    /// (same arm, iteration and size) ran right after it.
    #[serde(default)]
    pub before: Option<String>,
    /// `Err(reason)` for a failed trial.
    pub outcome: Result<Metrics, String>,
    /// Folder of this trial's artifacts (qlog, keylog, events), if kept.
    pub artifacts: Option<String>,
    /// The machine that ran it, if known (a merged campaign's shards ran on several).
    #[serde(default)]
    pub host: Option<String>,
    /// When it started, ms since the Unix epoch, and how long it took (set-up to teardown), ms;
    /// 0 when not known.
    #[serde(default)]
    pub started_unix_ms: u64,
    #[serde(default)]
    pub wall_ms: f64,
}

/// What a successful trial measured (one request on a new connection).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Metrics {
    /// Time to last byte from the client's first packet, ms.
    pub ttlb_ms: f64,
    /// Time to first byte of the body from the client's first packet, ms.
    pub ttfb_ms: f64,
    /// Handshake duration (first packet to handshake complete) in ms.
    pub handshake_ms: Option<f64>,
    /// Handshake duration in round trips of the condition's minimum RTT.
    pub handshake_rtts: Option<f64>,
    /// The server asked for another key share: one extra round trip.
    pub hello_retry: bool,
    /// Packets the sender declared lost: TCP segments it retransmitted (each one it took for
    /// lost), QUIC packets its loss detection declared lost. `None` where the stack does not
    /// tell (quiche's qlog logs no loss; the coded transport repairs without retransmitting).
    #[serde(alias = "retransmissions")]
    pub packets_lost: Option<u64>,
    /// Payload bytes the sender sent a second time: TCP's `tcpi_bytes_retrans`; QUIC's STREAM
    /// bytes at an offset already sent, from the sender's qlog. `None` where not known.
    #[serde(default)]
    pub bytes_resent: Option<u64>,
    /// Offset of the first data sent a second time (TCP: bytes acknowledged when it was; QUIC:
    /// its stream offset, HTTP/3 framing included), if any was.
    pub first_retransmit_offset: Option<u64>,
    /// RTT samples below the path's minimum RTT (physically impossible).
    pub impossible_rtt_samples: Option<u64>,
    /// Packets the emulator dropped (both directions) in this trial.
    pub link_drops: u64,
    /// The sender's timeline (time from the client's first packet); may be empty when not kept.
    pub timeline: Vec<TimelinePoint>,
    /// What a workload measures beyond one TTLB (stored as JSON).
    #[serde(default)]
    pub detail: Detail,
}

/// Workload-specific measurements of a trial.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Detail {
    /// Every request of the trial in order (workloads of several requests).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub requests: Vec<RequestMetrics>,
    /// Every unit's latency and the stalls (the telemetry workload).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub telemetry: Option<TelemetryDetail>,
    /// Goodput, CPU and packet size (the bulk workload).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bulk: Option<BulkDetail>,
    /// Every resource's times (the pages workload).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub page: Option<PageDetail>,
    /// How late the emulator handed a packet over (ms), when later than the runner's limit: the
    /// host stalled the link, so the trial's times include the host's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub emulator_late_ms: Option<f64>,
    /// Where the transfer's time went (one request on a new connection, where the link's log
    /// was kept).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<crate::budget::Budget>,
    /// Why a trial that should have a budget has none (its files did not make one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget_error: Option<String>,
    /// Why the sender's timeline of a completed transfer cannot be trusted (empty where its
    /// stack offers one, fewer bytes acknowledged than the body, no window or no RTT where its
    /// stack offers them), one reason each; empty where nothing is in doubt.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sender_doubts: Vec<String>,
}

impl Detail {
    pub fn is_empty(&self) -> bool {
        self.requests.is_empty()
            && self.telemetry.is_none()
            && self.bulk.is_none()
            && self.page.is_none()
            && self.emulator_late_ms.is_none()
            && self.budget.is_none()
            && self.budget_error.is_none()
    }
}

/// A bulk trial over the measured interval (after the warm-up).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct BulkDetail {
    /// Parallel connections (one client process each).
    pub connections: u32,
    /// Length of the measured interval, s.
    pub seconds: f64,
    /// Bytes the server's connections had acknowledged over the interval (QUIC counts packet
    /// bytes, TCP payload bytes).
    pub bytes: u64,
    /// CPU time (user + system) over the interval: the server process, and all clients.
    pub server_cpu_s: f64,
    pub client_cpu_s: f64,
    /// QUIC: the largest UDP payload the server's connections used at the end (path MTU
    /// discovery's result, or the fixed payload), and how long after its connection started the
    /// first connection reached it, ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub udp_payload: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub udp_payload_reached_ms: Option<f64>,
}

impl BulkDetail {
    /// Aggregate goodput, bit/s.
    pub fn bps(&self) -> f64 {
        if self.seconds > 0.0 {
            self.bytes as f64 * 8.0 / self.seconds
        } else {
            0.0
        }
    }

    /// CPU seconds per GB (10^9 bytes) of the server and of the clients.
    pub fn cpu_per_gb(&self) -> (f64, f64) {
        let gb = self.bytes as f64 / 1e9;
        if gb > 0.0 {
            (self.server_cpu_s / gb, self.client_cpu_s / gb)
        } else {
            (f64::NAN, f64::NAN)
        }
    }
}

/// A telemetry trial: what was sent, every unit's latency, and the stalls.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TelemetryDetail {
    /// How flushes travelled: "tcp", "quic-stream", "quic-streams" or "quic-datagrams".
    pub mode: String,
    pub units_per_second: u32,
    pub flush_units: u32,
    /// The path's one-way delay client to server (the model's), ms.
    pub one_way_ms: f64,
    /// The condition's loss rates (fractions), client to server and back.
    pub loss_up: f64,
    pub loss_down: f64,
    /// Latency of every unit the client sent, in generation order (unit i was generated
    /// i / units_per_second s after the first), microseconds; `None` for a unit that never
    /// arrived (a lost datagram).
    pub latency_us: Vec<Option<u32>>,
    /// Runs of consecutive units each later than the model by more than one RTT.
    pub stalls: Vec<Stall>,
    /// How late the client handed flushes to its transport, p99 and max, microseconds.
    pub send_late_p99_us: u64,
    pub send_late_max_us: u64,
    /// Both endpoints ran at a real-time priority.
    pub realtime: bool,
    /// Every packet the client's QUIC stack declared lost, from its qlog: how its loss
    /// detection timed the repair (empty over TCP or without a qlog).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub loss_detection: Vec<LossDetection>,
}

/// One packet a sender declared lost, as its qlog tells.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LossDetection {
    /// When it was sent, ms from the connection's start.
    pub sent_ms: f64,
    /// From sending it to declaring it lost, ms.
    pub declared_after_ms: f64,
    /// From sending it to sending the next packet (which carries the repair first), ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repaired_after_ms: Option<f64>,
    /// What declared it lost, in the implementation's words (`time_threshold`,
    /// `reordering_threshold`, `pto_expired`, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trigger: Option<String>,
}

impl TelemetryDetail {
    /// Latencies of the units that arrived, in unit order, ms.
    pub fn latencies_ms(&self) -> Vec<f64> {
        self.latency_us
            .iter()
            .flatten()
            .map(|&l| f64::from(l) / 1000.0)
            .collect()
    }

    /// Units that never arrived.
    pub fn lost(&self) -> usize {
        self.latency_us.iter().filter(|l| l.is_none()).count()
    }

    /// The model's latency of unit `i`: the one-way delay plus its wait in the flush, ms.
    pub fn model_ms(&self, i: usize) -> f64 {
        let n = self.flush_units.max(1) as usize;
        let last = ((i / n + 1) * n - 1).min(self.latency_us.len().saturating_sub(1));
        let at =
            |k: usize| (k as u128 * 1_000_000 / u128::from(self.units_per_second.max(1))) as f64;
        self.one_way_ms + (at(last) - at(i)) / 1000.0
    }
}

/// Units held back together, and the lost packet that did it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Stall {
    /// Index of its first unit, and how many units and flushes it spans.
    pub first_unit: u64,
    pub units: u64,
    pub flushes: u64,
    /// When its first unit was generated, ms after the trial's first unit.
    pub start_ms: f64,
    /// From when its first unit should have arrived (the model) to when its last arrived, ms.
    pub duration_ms: f64,
    /// The client-to-server packet the emulator dropped that carried its first unit, if found.
    pub cause: Option<LostPacket>,
    /// Packets dropped (both directions) while it lasted, the cause included.
    pub drops: u32,
    /// The longest the host held one of the emulator's departures back while it lasted, ms
    /// (0 when none was over the event log's threshold): a stalled or overloaded machine, not
    /// the transport. A stall no longer than this plus a round trip is the host's doing.
    #[serde(default)]
    pub host_ms: f64,
}

/// A packet the emulator dropped.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LostPacket {
    /// "up" (client to server) or "down".
    pub direction: String,
    /// Its arrival index in that direction (from 0).
    pub index: u64,
    /// IP packet size, bytes.
    pub size: u32,
    /// Why: "random", "burst", "listed", "outage", "queue", "mtu".
    pub reason: String,
    /// When it was dropped, ms after the trial's first unit was generated.
    pub at_ms: f64,
}

/// One request of a trial.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RequestMetrics {
    /// Body bytes received.
    pub bytes: u64,
    /// When the request started (its connection attempt if it opened one), ms after the trial's
    /// first request started.
    pub start_ms: f64,
    /// Time to first and last body byte from the request's start, ms.
    pub ttfb_ms: f64,
    pub ttlb_ms: f64,
    /// The request opened its own connection (its times include the handshake).
    pub new_connection: bool,
    /// Handshake duration from the request's start, ms (new connections).
    pub handshake_ms: Option<f64>,
    /// The TLS session was resumed from a ticket.
    pub resumed: bool,
    /// The request was sent as 0-RTT early data, and whether the server accepted it.
    pub zero_rtt_attempted: bool,
    pub zero_rtt_accepted: bool,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TimelinePoint {
    /// Milliseconds since the client's first packet.
    pub t_ms: f64,
    /// Cumulative bytes acknowledged by the receiver.
    pub acked_bytes: u64,
    pub cwnd_bytes: Option<u64>,
    /// Bytes sent and not yet acknowledged or declared lost, as the sender counts them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes_in_flight: Option<u64>,
    pub rtt_ms: Option<f64>,
    /// Sample taken at a congestion event.
    pub congestion_event: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_single_object_workload_without_a_delay_reads_and_writes_as_before_the_delay() {
        let plain = Workload::default();
        let json = serde_json::to_string(&plain).unwrap();
        assert_eq!(json, r#"{"kind":"single-object"}"#);
        assert_eq!(serde_json::from_str::<Workload>(&json).unwrap(), plain);
        let held = Workload::SingleObject {
            response_delay_us: 50_000,
        };
        let json = serde_json::to_string(&held).unwrap();
        assert_eq!(
            json,
            r#"{"kind":"single-object","response_delay_us":50000}"#
        );
        assert_eq!(serde_json::from_str::<Workload>(&json).unwrap(), held);
        assert!(
            held.describe().contains("held 50 ms"),
            "{}",
            held.describe()
        );
        assert_eq!(held.kind(), "single-object");
    }
}
