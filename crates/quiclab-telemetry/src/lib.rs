//! Telemetry: a steady stream of small timestamped units from client to server, the workload
//! that shows head-of-line blocking (study S5).
//!
//! Contract:
//! - A **unit** is [`UNIT_BYTES`] bytes: its generation time in microseconds of the host's
//!   CLOCK_MONOTONIC ([`quiclab_model::record::now_us`], shared by every namespace), as a big-endian
//!   `u64`. Generation times are the [`Schedule`]'s times, never the moment the code ran: unit
//!   `i` is generated at `epoch_us + floor(i * 1e6 / units_per_second)`, so generation times are
//!   unique and a unit's index follows from its time ([`Schedule::unit_index`]).
//! - Units go out in **flushes** of `flush_units` (the last may be shorter): flush `k` holds units
//!   `k * flush_units ..` and is due when its last unit is generated ([`Schedule::flush_due_us`]).
//! - The **model**: with no loss, a flush arrives one one-way delay after it is due, so unit `j`
//!   of a flush of `n` waits `n - 1 - j` intervals in its flush and its latency is the one-way
//!   delay plus that wait ([`Schedule::model_latency_us`]).
//! - **Modes** ([`Mode`]) say how flushes travel: one TLS-over-TCP byte stream, one QUIC stream,
//!   one new QUIC stream per flush, or one QUIC datagram per flush (unreliable: a lost datagram's
//!   units never arrive and are counted as lost, not delayed). Every mode uses the ALPN
//!   [`ALPN_TELEMETRY`] and raw bytes, with no HTTP framing.
//! - **Records** are JSON lines. The receiving server writes one [`ServerRecord::Unit`] per unit
//!   (generation and receive time, the stream or datagram that carried it) and one
//!   [`ServerRecord::Connection`] per connection when it ends; the sending client writes one
//!   [`ClientRecord::Flush`] per flush (when it was handed to the transport) and one
//!   [`ClientRecord::Summary`] (the schedule, what was sent, the sender's transport statistics).
//!   [`outcomes`] joins the two into per-unit latencies against the model.
//!
//! - **Timing is the measurement**: a unit's latency includes how late its sender and receiver
//!   ran. On a busy host ordinary threads wake milliseconds late, so the endpoints can run at a
//!   real-time priority ([`use_realtime_priority`], [`REALTIME_PRIORITY`]), below the link
//!   emulator's, which keeps the link's departures on time.
//!
//! Apart from [`use_realtime_priority`], this module reads no clock and touches no socket:
//! [`sender`] (the client, over `quiclab-tcp`'s and `quiclab-quic`'s connections) and
//! [`receiver`] (the server's side: a [`receiver::Receiver`] plugs into the TCP and QUIC
//! servers as the protocol of ALPN [`ALPN_TELEMETRY`]) do the I/O.
//!
//! Must never: know about plans, trials or the store; print.

pub mod receiver;
pub mod sender;

use quiclab_endpoint::{errors, tls, url};
use quiclab_quic as quic;
use quiclab_tcp::{client, tcpinfo};

use std::collections::HashMap;
use std::fmt;
use std::io::Write;
use std::str::FromStr;
use std::sync::{Arc, Mutex, mpsc};

use serde::{Deserialize, Serialize};

use quiclab_model::record::TransportStats;

/// ALPN protocol identifier of the telemetry workload, over TLS/TCP and QUIC alike.
pub const ALPN_TELEMETRY: &[u8] = b"quiclab-telemetry";

/// Bytes per unit: one big-endian `u64`, the unit's generation time in microseconds.
pub const UNIT_BYTES: usize = 8;

/// The most units per second a schedule allows: one per microsecond keeps generation times
/// unique.
pub const MAX_UNITS_PER_SECOND: u32 = 1_000_000;

/// The largest flush: it must fit in one QUIC datagram of a 1200-byte packet (RFC 9000's
/// minimum), with room for the packet's headers and tag.
pub const MAX_FLUSH_UNITS: u32 = 128;

/// The SCHED_FIFO priority of telemetry endpoints: above every ordinary thread, below the link
/// emulator's forwarding threads (10, while their link is not busy; a busy one leaves the
/// real-time class, see `quiclab_netns::forward`).
pub const REALTIME_PRIORITY: i32 = 5;

/// Puts the calling thread in the SCHED_FIFO class at [`REALTIME_PRIORITY`]; threads it starts
/// afterwards inherit that. Needs root (or CAP_SYS_NICE). The endpoints' work is small (a
/// flush every few milliseconds), so they cannot starve the host; without it, a unit's
/// latency on a busy host includes the scheduler's delays.
pub fn use_realtime_priority() -> std::io::Result<()> {
    let p = libc::sched_param {
        sched_priority: REALTIME_PRIORITY,
    };
    // SAFETY: pid 0 is the calling thread; p is a valid sched_param.
    if unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &p) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Errors in telemetry settings; each names the field, the value and what is allowed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("telemetry {field} = {value} is not allowed (allowed: {allowed})")]
pub struct InvalidSetting {
    pub field: &'static str,
    pub value: String,
    pub allowed: String,
}

/// How flushes travel from client to server.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// TLS 1.3 over TCP: one ordered byte stream (TCP_NODELAY on).
    Tcp,
    /// One QUIC unidirectional stream for every flush: ordered, like TCP.
    QuicStream,
    /// A new QUIC unidirectional stream per flush, finished after it: a loss delays only the
    /// flush it hit.
    QuicStreams,
    /// One QUIC datagram (RFC 9221) per flush: a loss is never repaired.
    QuicDatagrams,
}

impl Mode {
    pub const ALL: [Mode; 4] = [
        Mode::Tcp,
        Mode::QuicStream,
        Mode::QuicStreams,
        Mode::QuicDatagrams,
    ];

    /// The mode's name on the command line and in records.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Tcp => "tcp",
            Mode::QuicStream => "quic-stream",
            Mode::QuicStreams => "quic-streams",
            Mode::QuicDatagrams => "quic-datagrams",
        }
    }

    /// The names of every mode, for messages.
    pub fn allowed() -> String {
        Self::ALL.map(Self::name).join(", ")
    }

    pub fn is_quic(self) -> bool {
        self != Mode::Tcp
    }

    /// True where every unit arrives in order behind every earlier one (a loss delays all
    /// units after it until it is repaired).
    pub fn single_ordered_stream(self) -> bool {
        matches!(self, Mode::Tcp | Mode::QuicStream)
    }

    /// True where a lost flush is not repaired.
    pub fn unreliable(self) -> bool {
        self == Mode::QuicDatagrams
    }
}

impl FromStr for Mode {
    type Err = InvalidSetting;

    fn from_str(s: &str) -> Result<Self, InvalidSetting> {
        Self::ALL
            .into_iter()
            .find(|m| m.name().eq_ignore_ascii_case(s.trim()))
            .ok_or_else(|| InvalidSetting {
                field: "mode",
                value: s.to_string(),
                allowed: Self::allowed(),
            })
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Encodes a unit.
pub fn encode_unit(gen_us: u64) -> [u8; UNIT_BYTES] {
    gen_us.to_be_bytes()
}

/// Decodes a unit.
pub fn decode_unit(bytes: [u8; UNIT_BYTES]) -> u64 {
    u64::from_be_bytes(bytes)
}

/// Cuts a byte stream into units, whatever the pieces it arrives in.
#[derive(Debug, Default, Clone)]
pub struct UnitDecoder {
    partial: [u8; UNIT_BYTES],
    have: usize,
}

impl UnitDecoder {
    /// Feeds received bytes; calls `unit` with the generation time of every unit they complete.
    pub fn feed(&mut self, mut bytes: &[u8], mut unit: impl FnMut(u64)) {
        while !bytes.is_empty() {
            let take = (UNIT_BYTES - self.have).min(bytes.len());
            self.partial[self.have..self.have + take].copy_from_slice(&bytes[..take]);
            self.have += take;
            bytes = &bytes[take..];
            if self.have == UNIT_BYTES {
                unit(decode_unit(self.partial));
                self.have = 0;
            }
        }
    }

    /// Bytes of an incomplete unit held back (non-zero at the end of a stream means the
    /// stream was cut short).
    pub fn pending(&self) -> usize {
        self.have
    }
}

/// When units are generated and flushes are due.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Schedule {
    /// Generation time of unit 0, CLOCK_MONOTONIC microseconds.
    pub epoch_us: u64,
    pub units_per_second: u32,
    /// Units per flush (the last flush may hold fewer).
    pub flush_units: u32,
    /// Units in the whole run.
    pub units: u64,
}

impl Schedule {
    /// A schedule, checked: 1 to [`MAX_UNITS_PER_SECOND`] units per second, 1 to
    /// [`MAX_FLUSH_UNITS`] units per flush, at least one unit.
    pub fn new(
        epoch_us: u64,
        units_per_second: u32,
        flush_units: u32,
        units: u64,
    ) -> Result<Schedule, InvalidSetting> {
        check_rate(units_per_second)?;
        check_flush(flush_units)?;
        if units == 0 {
            return Err(InvalidSetting {
                field: "units",
                value: "0".into(),
                allowed: "at least 1 (a duration of at least one unit interval)".into(),
            });
        }
        Ok(Schedule {
            epoch_us,
            units_per_second,
            flush_units,
            units,
        })
    }

    /// Generation time of unit `i`.
    pub fn gen_us(&self, i: u64) -> u64 {
        let offset = u128::from(i) * 1_000_000 / u128::from(self.units_per_second);
        self.epoch_us + offset as u64
    }

    /// The index of the unit generated at `gen_us`, if one of this schedule's units was.
    pub fn unit_index(&self, gen_us: u64) -> Option<u64> {
        let d = u128::from(gen_us.checked_sub(self.epoch_us)?);
        // gen = floor(i * 1e6 / u)  <=>  i = ceil(gen * u / 1e6), as u <= 1e6.
        let i = (d * u128::from(self.units_per_second)).div_ceil(1_000_000) as u64;
        (i < self.units && self.gen_us(i) == gen_us).then_some(i)
    }

    /// Number of flushes.
    pub fn flushes(&self) -> u64 {
        self.units.div_ceil(u64::from(self.flush_units))
    }

    /// The flush unit `i` belongs to.
    pub fn flush_of(&self, i: u64) -> u64 {
        i / u64::from(self.flush_units)
    }

    /// The units of flush `k`.
    pub fn flush_range(&self, k: u64) -> std::ops::Range<u64> {
        let n = u64::from(self.flush_units);
        (k * n).min(self.units)..((k + 1) * n).min(self.units)
    }

    /// When flush `k` is due: the generation time of its last unit.
    pub fn flush_due_us(&self, k: u64) -> u64 {
        let r = self.flush_range(k);
        self.gen_us(r.end.max(1) - 1)
    }

    /// The bytes of flush `k`: its units, in order.
    pub fn flush_bytes(&self, k: u64) -> Vec<u8> {
        self.flush_range(k)
            .flat_map(|i| encode_unit(self.gen_us(i)))
            .collect()
    }

    /// How long unit `i` waits in its flush before the flush is due.
    pub fn wait_us(&self, i: u64) -> u64 {
        self.flush_due_us(self.flush_of(i)) - self.gen_us(i)
    }

    /// The model's latency of unit `i` on a loss-free path of one-way delay `one_way_us`: the
    /// delay plus its wait in the flush.
    pub fn model_latency_us(&self, i: u64, one_way_us: u64) -> u64 {
        one_way_us + self.wait_us(i)
    }

    /// The time the run takes from the epoch to its last flush.
    pub fn span_us(&self) -> u64 {
        self.flush_due_us(self.flushes().saturating_sub(1)) - self.epoch_us
    }
}

/// Checks a unit rate (1 to [`MAX_UNITS_PER_SECOND`]).
pub fn check_rate(units_per_second: u32) -> Result<(), InvalidSetting> {
    if (1..=MAX_UNITS_PER_SECOND).contains(&units_per_second) {
        Ok(())
    } else {
        Err(InvalidSetting {
            field: "units_per_second",
            value: units_per_second.to_string(),
            allowed: format!("1 to {MAX_UNITS_PER_SECOND}"),
        })
    }
}

/// Checks a flush size (1 to [`MAX_FLUSH_UNITS`] units).
pub fn check_flush(flush_units: u32) -> Result<(), InvalidSetting> {
    if (1..=MAX_FLUSH_UNITS).contains(&flush_units) {
        Ok(())
    } else {
        Err(InvalidSetting {
            field: "flush",
            value: flush_units.to_string(),
            allowed: format!(
                "1 to {MAX_FLUSH_UNITS} units (a flush of {UNIT_BYTES}-byte units must fit one QUIC datagram)"
            ),
        })
    }
}

/// What the receiving server writes, one JSON line each.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "record", rename_all = "snake_case")]
pub enum ServerRecord {
    /// One unit received.
    Unit(ReceivedUnit),
    /// A connection ended.
    Connection(ConnectionEnd),
}

/// One unit as the server received it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReceivedUnit {
    /// The server's connection number (from 0, per transport, in the order they arrived).
    pub connection: u32,
    /// The unit's content: its generation time.
    pub gen_us: u64,
    /// When the server read it (the last of its bytes), CLOCK_MONOTONIC microseconds.
    pub recv_us: u64,
    /// The QUIC stream that carried it (its id); `None` over TCP or in a datagram.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream: Option<u64>,
    /// The QUIC datagram that carried it (the connection's n-th datagram received, from 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub datagram: Option<u64>,
}

/// What the server saw of one connection.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConnectionEnd {
    pub connection: u32,
    /// "tcp" or "quic".
    pub transport: String,
    pub peer: String,
    pub units: u64,
    pub streams: u64,
    pub datagrams: u64,
    /// Bytes of a unit cut short at the end of a stream (0 when every stream ended cleanly).
    pub partial_bytes: u64,
    /// Why the connection failed, if it did (a peer closing normally is no error).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// What the sending client writes, one JSON line each.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "record", rename_all = "snake_case")]
pub enum ClientRecord {
    Flush(SentFlush),
    Summary(Box<SenderSummary>),
}

/// One flush as the client handed it to the transport.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SentFlush {
    pub flush: u64,
    /// Generation time of its first unit.
    pub gen_us: u64,
    pub units: u32,
    /// When it was handed to the transport (due time plus the sender's lateness).
    pub send_us: u64,
    /// The QUIC stream it went on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream: Option<u64>,
}

/// The client's account of a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SenderSummary {
    pub mode: Mode,
    pub schedule: Schedule,
    /// When the connection attempt started and the handshake completed.
    pub connect_us: u64,
    pub handshake_done_us: Option<u64>,
    /// When the last flush was acknowledged by the peer (all data delivered; for datagrams,
    /// an end marker sent after them) or the run ended otherwise.
    pub end_us: u64,
    pub flushes_sent: u64,
    pub units_sent: u64,
    /// How late flushes were handed to the transport after they were due, microseconds.
    pub send_late_p50_us: u64,
    pub send_late_p99_us: u64,
    pub send_late_max_us: u64,
    /// The sender ran at a real-time priority ([`use_realtime_priority`]).
    #[serde(default)]
    pub realtime: bool,
    /// ALPN and key-exchange group of the handshake.
    pub alpn: Option<String>,
    pub group: Option<String>,
    /// The sender's transport: congestion controller, packets lost (QUIC) or segments
    /// retransmitted (TCP), RTTs.
    pub transport_stats: TransportStats,
    /// Why the run stopped early, if it did.
    pub error: Option<String>,
}

/// One unit of a run, joined from both ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UnitOutcome {
    pub index: u64,
    pub flush: u64,
    pub gen_us: u64,
    /// When the flush was handed to the transport (`None` if it never was).
    pub send_us: Option<u64>,
    /// When the server read it (`None`: never arrived).
    pub recv_us: Option<u64>,
    /// The model's latency on a loss-free path.
    pub model_us: u64,
}

impl UnitOutcome {
    pub fn latency_us(&self) -> Option<u64> {
        self.recv_us.map(|r| r.saturating_sub(self.gen_us))
    }

    /// Latency beyond the model (negative when early), microseconds.
    pub fn excess_us(&self) -> Option<i64> {
        self.latency_us().map(|l| l as i64 - self.model_us as i64)
    }
}

/// Joins what the client sent with what the server received: one outcome per unit the client
/// sent (units of flushes never sent are left out), in order. Received units that are not in
/// the schedule (another run's) are ignored; a unit received twice keeps its first arrival.
pub fn outcomes(
    schedule: &Schedule,
    sent: &[SentFlush],
    received: &[ReceivedUnit],
    one_way_us: u64,
) -> Vec<UnitOutcome> {
    let mut recv: HashMap<u64, u64> = HashMap::with_capacity(received.len());
    for r in received {
        if let Some(i) = schedule.unit_index(r.gen_us) {
            recv.entry(i)
                .and_modify(|t| *t = (*t).min(r.recv_us))
                .or_insert(r.recv_us);
        }
    }
    let mut out = Vec::with_capacity(schedule.units as usize);
    for f in sent {
        for i in schedule.flush_range(f.flush) {
            out.push(UnitOutcome {
                index: i,
                flush: f.flush,
                gen_us: schedule.gen_us(i),
                send_us: Some(f.send_us),
                recv_us: recv.get(&i).copied(),
                model_us: schedule.model_latency_us(i, one_way_us),
            });
        }
    }
    out.sort_by_key(|o| o.index);
    out
}

/// The model's latencies of every unit of `schedule`, milliseconds: what a loss-free path of
/// one-way delay `one_way_us` gives.
pub fn model_latencies_ms(schedule: &Schedule, one_way_us: u64) -> Vec<f64> {
    (0..schedule.units)
        .map(|i| schedule.model_latency_us(i, one_way_us) as f64 / 1000.0)
        .collect()
}

/// A JSON-lines file shared by a server's connections, written by a thread of its own.
///
/// The receiving threads stamp a unit when they read it and hand the record over here, so a
/// write that blocks (a file system committing its journal can hold a writer for tens of
/// milliseconds) never holds back the reading of the next flush. Records are written in the
/// order they are handed over, each whole on its line.
#[derive(Clone)]
pub struct RecordLog {
    tx: mpsc::Sender<LogMessage>,
    /// The first write error; once set, later records are dropped.
    failed: Arc<Mutex<Option<std::io::Error>>>,
}

enum LogMessage {
    Records(Vec<ServerRecord>),
    /// Write out everything handed over so far, then answer with the first error, if any.
    Flush(mpsc::SyncSender<std::io::Result<()>>),
}

impl RecordLog {
    /// Starts the writer thread; it ends when every clone of the log is dropped.
    pub fn new(w: Box<dyn Write + Send>) -> std::io::Result<RecordLog> {
        let (tx, rx) = mpsc::channel();
        let failed = Arc::new(Mutex::new(None));
        let shared = failed.clone();
        std::thread::Builder::new()
            .name("quiclab-records".into())
            .spawn(move || write_records(w, rx, &shared))?;
        Ok(RecordLog { tx, failed })
    }

    fn error(&self) -> Option<std::io::Error> {
        let failed = self.failed.lock().unwrap_or_else(|e| e.into_inner());
        failed.as_ref().map(copy_error)
    }

    /// Hands records over to be written, one line each, together; fails once a write has
    /// failed.
    pub fn write_all(&self, records: Vec<ServerRecord>) -> std::io::Result<()> {
        if let Some(e) = self.error() {
            return Err(e);
        }
        self.tx
            .send(LogMessage::Records(records))
            .map_err(|_| std::io::Error::other("the record writer has stopped"))
    }

    /// Waits until every record handed over so far is written and flushed.
    pub fn flush(&self) -> std::io::Result<()> {
        let (tx, rx) = mpsc::sync_channel(1);
        let stopped = || std::io::Error::other("the record writer has stopped");
        self.tx.send(LogMessage::Flush(tx)).map_err(|_| stopped())?;
        rx.recv().map_err(|_| stopped())?
    }
}

fn write_records(
    mut w: Box<dyn Write + Send>,
    rx: mpsc::Receiver<LogMessage>,
    failed: &Mutex<Option<std::io::Error>>,
) {
    let mut first_error: Option<std::io::Error> = None;
    for m in rx {
        match m {
            LogMessage::Records(records) if first_error.is_none() => {
                let written = records.iter().try_for_each(|r| {
                    let line = serde_json::to_string(r).map_err(std::io::Error::other)?;
                    writeln!(w, "{line}")
                });
                if let Err(e) = written {
                    *failed.lock().unwrap_or_else(|e| e.into_inner()) = Some(copy_error(&e));
                    first_error = Some(e);
                }
            }
            LogMessage::Records(_) => {}
            LogMessage::Flush(answer) => {
                let result = match &first_error {
                    Some(e) => Err(copy_error(e)),
                    None => w.flush(),
                };
                let _ = answer.send(result);
            }
        }
    }
    // Every handle is gone: write out what is buffered; nobody is left to hear an error.
    let _ = w.flush();
}

/// An I/O error again, for a second reader (`io::Error` is not `Clone`).
fn copy_error(e: &std::io::Error) -> std::io::Error {
    std::io::Error::new(e.kind(), e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use quiclab_report::stats::{LATENCY_PERCENTILES as PERCENTILES, quantile_sorted};

    fn s(units_per_second: u32, flush: u32, units: u64) -> Schedule {
        Schedule::new(1_000_000, units_per_second, flush, units).unwrap()
    }

    #[test]
    fn units_are_generated_on_the_schedule_and_their_index_follows_from_their_time() {
        let sch = s(1000, 10, 10_000);
        assert_eq!(sch.gen_us(0), 1_000_000);
        assert_eq!(sch.gen_us(1), 1_001_000);
        assert_eq!(sch.gen_us(9_999), 1_000_000 + 9_999_000);
        assert_eq!(sch.flushes(), 1000);
        assert_eq!(sch.flush_range(3), 30..40);
        // flush k is due with its last unit: every 10 ms, 9 ms after the epoch first
        assert_eq!(sch.flush_due_us(0), 1_009_000);
        assert_eq!(sch.flush_due_us(999), 1_000_000 + 9_999_000);
        assert_eq!(sch.span_us(), 9_999_000);
        for i in [0, 1, 9, 10, 4_321, 9_999] {
            assert_eq!(sch.unit_index(sch.gen_us(i)), Some(i));
        }
        assert_eq!(sch.unit_index(1_000_500), None, "between two units");
        assert_eq!(sch.unit_index(999_999), None, "before the epoch");
        assert_eq!(sch.unit_index(sch.gen_us(10_000)), None, "after the last");

        // A rate that does not divide a second: times are floored, still unique and invertible.
        let odd = s(3000, 7, 3_000);
        let mut last = None;
        for i in 0..odd.units {
            let g = odd.gen_us(i);
            assert!(last.is_none_or(|l| g > l));
            last = Some(g);
            assert_eq!(odd.unit_index(g), Some(i));
        }
        assert_eq!(odd.gen_us(3) - odd.gen_us(0), 1000);
        // 3000 units in flushes of 7: 428 full flushes and one of 4
        assert_eq!(odd.flushes(), 429);
        assert_eq!(odd.flush_range(428), 2996..3000);
        assert_eq!(odd.flush_due_us(428), odd.gen_us(2999));
        assert_eq!(odd.flush_bytes(428).len(), 4 * UNIT_BYTES);
    }

    #[test]
    fn the_model_adds_the_wait_in_the_flush_to_the_one_way_delay() {
        let sch = s(1000, 10, 10_000);
        // units 0..9 of a flush wait 9..0 ms for the flush
        let lat: Vec<u64> = (20..30).map(|i| sch.model_latency_us(i, 25_000)).collect();
        assert_eq!(
            lat,
            [
                34_000, 33_000, 32_000, 31_000, 30_000, 29_000, 28_000, 27_000, 26_000, 25_000
            ]
        );
        // the whole run: 1000 units at each of 25..34 ms
        let mut m = model_latencies_ms(&sch, 25_000);
        m.sort_by(f64::total_cmp);
        let p: Vec<f64> = PERCENTILES
            .iter()
            .filter_map(|&(_, q)| quantile_sorted(&m, q))
            .collect();
        assert_eq!(p.len(), PERCENTILES.len());
        // type 7: p50 between the 5000th (29 ms) and 5001st (30 ms) order statistics, p90 a
        // tenth of the way from the 9000th (33 ms) to the 9001st (34 ms); p95 and above in the
        // top millisecond
        assert!((p[0] - 29.5).abs() < 1e-9, "{p:?}");
        assert!((p[1] - 33.1).abs() < 1e-9, "{p:?}");
        assert_eq!(&p[2..], &[34.0; 6], "{p:?}");
        // the study's published no-loss latencies ran from ~27 to ~35.8 ms at 25 ms one way:
        // within a few ms of this model, the rest being its stack's processing
    }

    #[test]
    fn flush_bytes_decode_into_their_units_however_the_bytes_are_split() {
        let sch = s(1000, 10, 100);
        let bytes: Vec<u8> = (0..sch.flushes())
            .flat_map(|k| sch.flush_bytes(k))
            .collect();
        assert_eq!(bytes.len(), 100 * UNIT_BYTES);
        for piece in [1, 3, 8, 13, 800] {
            let mut d = UnitDecoder::default();
            let mut got = Vec::new();
            for chunk in bytes.chunks(piece) {
                d.feed(chunk, |g| got.push(g));
            }
            assert_eq!(d.pending(), 0);
            let want: Vec<u64> = (0..100).map(|i| sch.gen_us(i)).collect();
            assert_eq!(got, want, "pieces of {piece}");
        }
        let mut d = UnitDecoder::default();
        d.feed(&bytes[..12], |_| {});
        assert_eq!(d.pending(), 4);
    }

    #[test]
    fn outcomes_join_both_ends_and_leave_lost_units_without_a_time() {
        let sch = s(1000, 10, 30);
        let sent: Vec<SentFlush> = (0..3)
            .map(|k| SentFlush {
                flush: k,
                gen_us: sch.gen_us(k * 10),
                units: 10,
                send_us: sch.flush_due_us(k) + 50,
                stream: None,
            })
            .collect();
        // flush 1 lost, flush 2 late by 100 ms, one unit of flush 0 twice, one foreign unit
        let mut received = Vec::new();
        for i in (0..10).chain(20..30) {
            let k = sch.flush_of(i);
            let extra = if k == 2 { 100_000 } else { 0 };
            received.push(ReceivedUnit {
                connection: 0,
                gen_us: sch.gen_us(i),
                recv_us: sch.flush_due_us(k) + 25_000 + 200 + extra,
                stream: Some(4 * k + 2),
                datagram: None,
            });
        }
        received.push(ReceivedUnit {
            recv_us: received[0].recv_us + 5,
            ..received[0]
        });
        received.push(ReceivedUnit {
            gen_us: 7,
            ..received[0]
        });
        let out = outcomes(&sch, &sent, &received, 25_000);
        assert_eq!(out.len(), 30);
        assert!(out.iter().enumerate().all(|(i, o)| o.index == i as u64));
        assert_eq!(out[0].latency_us(), Some(34_200));
        assert_eq!(out[0].excess_us(), Some(200));
        assert_eq!(out[9].latency_us(), Some(25_200));
        assert!(out[10..20].iter().all(|o| o.recv_us.is_none()));
        assert!(out[20..].iter().all(|o| o.excess_us() == Some(100_200)));
    }

    #[test]
    fn settings_are_checked_with_field_value_and_allowed() {
        assert_eq!("QUIC-Streams".parse::<Mode>().unwrap(), Mode::QuicStreams);
        assert_eq!(
            "udp".parse::<Mode>().unwrap_err().to_string(),
            "telemetry mode = udp is not allowed (allowed: tcp, quic-stream, quic-streams, quic-datagrams)"
        );
        assert!(
            Schedule::new(0, 0, 10, 1)
                .unwrap_err()
                .to_string()
                .contains("units_per_second = 0")
        );
        let e = Schedule::new(0, 1000, 129, 1).unwrap_err().to_string();
        assert!(
            e.contains("flush = 129") && e.contains("1 to 128 units"),
            "{e}"
        );
        assert!(Schedule::new(0, 1000, 10, 0).is_err());
        assert_eq!(
            serde_json::to_string(&Mode::QuicDatagrams).unwrap(),
            "\"quic-datagrams\""
        );
        // records carry their kind
        let line = serde_json::to_string(&ServerRecord::Unit(ReceivedUnit {
            connection: 1,
            gen_us: 2,
            recv_us: 3,
            stream: None,
            datagram: Some(4),
        }))
        .unwrap();
        assert_eq!(
            line,
            r#"{"record":"unit","connection":1,"gen_us":2,"recv_us":3,"datagram":4}"#
        );
        assert_eq!(
            serde_json::from_str::<ServerRecord>(&line).unwrap(),
            ServerRecord::Unit(ReceivedUnit {
                connection: 1,
                gen_us: 2,
                recv_us: 3,
                stream: None,
                datagram: Some(4),
            })
        );
    }

    fn unit(gen_us: u64) -> ServerRecord {
        ServerRecord::Unit(ReceivedUnit {
            connection: 0,
            gen_us,
            recv_us: gen_us + 1,
            stream: None,
            datagram: None,
        })
    }

    /// A writer whose every write fails after `ok` bytes.
    struct Breaks(Arc<Mutex<Vec<u8>>>, usize);

    impl Write for Breaks {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            let mut v = self.0.lock().unwrap();
            if v.len() + b.len() > self.1 {
                return Err(std::io::Error::other("disk full"));
            }
            v.extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn the_record_log_writes_lines_in_hand_over_order_and_reports_its_first_error() {
        let out = Arc::new(Mutex::new(Vec::new()));
        let log = RecordLog::new(Box::new(Breaks(out.clone(), 10_000))).unwrap();
        let other = log.clone();
        log.write_all(vec![unit(1), unit(2)]).unwrap();
        other.write_all(vec![unit(3)]).unwrap();
        log.flush().unwrap();
        let text = String::from_utf8(out.lock().unwrap().clone()).unwrap();
        let read: Vec<ServerRecord> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(read, vec![unit(1), unit(2), unit(3)]);

        // past the writer's capacity: the flush reports the write's error, and so does every
        // later hand-over
        let many: Vec<ServerRecord> = (0..200).map(unit).collect();
        log.write_all(many).unwrap();
        let e = log.flush().unwrap_err();
        assert_eq!(e.to_string(), "disk full");
        assert_eq!(
            log.write_all(vec![unit(9)]).unwrap_err().to_string(),
            "disk full"
        );
    }
}
