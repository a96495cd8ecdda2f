//! The per-packet event log and the counters that are always kept.

use serde::Serialize;
use std::time::Duration;

use crate::Direction;

/// Why a packet was dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DropReason {
    /// Larger than the link MTU.
    Mtu,
    /// Scheduled outage (blackhole).
    Outage,
    /// Planted: listed explicitly by index, or in a tail's blackout.
    Listed,
    /// Independent (Bernoulli) loss.
    Random,
    /// Gilbert-Elliott burst loss.
    Burst,
    /// Drop-tail queue full.
    Queue,
}

impl DropReason {
    pub const ALL: [DropReason; 6] = [
        DropReason::Mtu,
        DropReason::Outage,
        DropReason::Listed,
        DropReason::Random,
        DropReason::Burst,
        DropReason::Queue,
    ];
    pub fn as_str(self) -> &'static str {
        match self {
            DropReason::Mtu => "mtu",
            DropReason::Outage => "outage",
            DropReason::Listed => "listed",
            DropReason::Random => "random",
            DropReason::Burst => "burst",
            DropReason::Queue => "queue",
        }
    }
}

/// What happened to a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum EventKind {
    /// Entered the link.
    Arrive,
    /// A copy was made (duplication); the copy carries the same index.
    Duplicate,
    /// Admitted to the bottleneck queue; backlog counts what waits ahead of it, itself included.
    Enqueue {
        backlog_bytes: u64,
        backlog_packets: u64,
    },
    /// Dropped.
    Drop { reason: DropReason },
    /// Left the link (scheduled departure time).
    Depart,
    /// Handed over later than its scheduled departure (the event's time) by `by_ns`, more than
    /// [`LATE_EVENT`]: the host held the runtime back (a stalled or busy machine). Logged
    /// after the packet's `Depart`; the link's own fates are unchanged by it.
    Late { by_ns: u64 },
}

/// How late a departure must be handed over to be logged as [`EventKind::Late`]: far above a
/// timer wake-up's lateness (tens of microseconds), far below what a transport would notice.
pub const LATE_EVENT: Duration = Duration::from_millis(2);

/// One line of the event log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Event {
    /// Time since the link's epoch, nanoseconds.
    #[serde(rename = "t_ns", serialize_with = "ser_nanos")]
    pub t: Duration,
    pub dir: Direction,
    /// Arrival index of the packet in its direction (0-based).
    pub index: u64,
    /// IP packet size in bytes.
    pub size: u32,
    #[serde(flatten)]
    pub kind: EventKind,
}

fn ser_nanos<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_u64(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

/// Counters of one direction.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Counters {
    pub packets_in: u64,
    pub bytes_in: u64,
    pub packets_out: u64,
    pub bytes_out: u64,
    pub duplicated: u64,
    pub dropped_mtu: u64,
    pub dropped_outage: u64,
    pub dropped_listed: u64,
    pub dropped_random: u64,
    pub dropped_burst: u64,
    pub dropped_queue: u64,
    /// Largest backlog seen in the bottleneck queue, bytes.
    pub max_backlog_bytes: u64,
}

impl Counters {
    pub fn dropped(&self, reason: DropReason) -> u64 {
        match reason {
            DropReason::Mtu => self.dropped_mtu,
            DropReason::Outage => self.dropped_outage,
            DropReason::Listed => self.dropped_listed,
            DropReason::Random => self.dropped_random,
            DropReason::Burst => self.dropped_burst,
            DropReason::Queue => self.dropped_queue,
        }
    }
    pub(crate) fn count_drop(&mut self, reason: DropReason) {
        *match reason {
            DropReason::Mtu => &mut self.dropped_mtu,
            DropReason::Outage => &mut self.dropped_outage,
            DropReason::Listed => &mut self.dropped_listed,
            DropReason::Random => &mut self.dropped_random,
            DropReason::Burst => &mut self.dropped_burst,
            DropReason::Queue => &mut self.dropped_queue,
        } += 1;
    }
    pub fn dropped_total(&self) -> u64 {
        DropReason::ALL.iter().map(|&r| self.dropped(r)).sum()
    }

    /// Packets still inside the link (queued, being serialised or delayed): every packet in,
    /// and every duplicate made, either left, was dropped, or is still there.
    pub fn in_flight(&self) -> u64 {
        (self.packets_in + self.duplicated).saturating_sub(self.packets_out + self.dropped_total())
    }
}

/// Where stages report what they did. Counters are always kept; events only when logging is on.
#[derive(Debug)]
pub struct Recorder {
    pub(crate) dir: Direction,
    pub(crate) counters: Counters,
    pub(crate) log: Option<Vec<Event>>,
}

impl Recorder {
    pub(crate) fn new(dir: Direction, log: bool) -> Self {
        Recorder {
            dir,
            counters: Counters::default(),
            log: log.then(Vec::new),
        }
    }

    #[inline]
    pub(crate) fn event(&mut self, t: Duration, index: u64, size: usize, kind: EventKind) {
        if let Some(log) = &mut self.log {
            log.push(Event {
                t,
                dir: self.dir,
                index,
                size: size as u32,
                kind,
            });
        }
    }

    pub(crate) fn drop(&mut self, t: Duration, index: u64, size: usize, reason: DropReason) {
        self.counters.count_drop(reason);
        self.event(t, index, size, EventKind::Drop { reason });
    }
}
