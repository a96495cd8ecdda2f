//! Bottlenecks: a drop-tail queue drained at a constant rate or by a Mahimahi trace.

use std::collections::VecDeque;
use std::time::Duration;

use super::{Packet, Payload, Stage};
use crate::event::{DropReason, EventKind, Recorder};
use crate::trace::{OPPORTUNITY_BYTES, Trace};
use crate::units::{QueueLimit, Rate};

/// A queue limit resolved to bytes and packets.
#[derive(Debug, Clone, Copy)]
struct Limit {
    bytes: u64,
    packets: u64,
}

impl Limit {
    /// `bytes_in(d)`: the bytes the link carries in `d`, for a limit given as time.
    fn new(q: QueueLimit, bytes_in: impl Fn(Duration) -> u64) -> Self {
        match q {
            QueueLimit::Bytes(b) => Limit {
                bytes: b,
                packets: u64::MAX,
            },
            QueueLimit::Packets(p) => Limit {
                bytes: u64::MAX,
                packets: p,
            },
            QueueLimit::Time(d) => Limit {
                bytes: bytes_in(d),
                packets: u64::MAX,
            },
            QueueLimit::Unlimited => Limit {
                bytes: u64::MAX,
                packets: u64::MAX,
            },
        }
    }
    fn admits(&self, bytes: u64, packets: u64) -> bool {
        bytes <= self.bytes && packets <= self.packets
    }
}

struct Slot<D> {
    start: Duration,
    finish: Duration,
    pkt: Packet<D>,
}

/// A constant-rate link behind a drop-tail queue. The queue is the buffer in front of the
/// transmitter: the packet being serialised does not count against the limit, and a packet that
/// finds the transmitter idle is always accepted.
pub struct RateQueue<D = Vec<u8>> {
    rate: Rate,
    limit: Limit,
    q: VecDeque<Slot<D>>,
    /// When the transmitter is free again.
    free_at: Duration,
    /// Index in `q` of the first packet that has not started serialisation.
    first_waiting: usize,
    waiting_bytes: u64,
    waiting_packets: u64,
}

impl<D: Payload> RateQueue<D> {
    pub fn new(rate: Rate, limit: QueueLimit) -> Self {
        RateQueue {
            rate,
            limit: Limit::new(limit, |d| rate.bytes_in(d)),
            q: VecDeque::new(),
            free_at: Duration::ZERO,
            first_waiting: 0,
            waiting_bytes: 0,
            waiting_packets: 0,
        }
    }

    /// Moves packets whose serialisation has started by `t` out of the waiting count.
    fn advance(&mut self, t: Duration) {
        while let Some(s) = self.q.get(self.first_waiting) {
            if s.start > t {
                break;
            }
            self.waiting_bytes -= s.pkt.size() as u64;
            self.waiting_packets -= 1;
            self.first_waiting += 1;
        }
    }
}

impl<D: Payload> Stage<D> for RateQueue<D> {
    fn push(&mut self, at: Duration, pkt: Packet<D>, rec: &mut Recorder) {
        self.advance(at);
        let size = pkt.size() as u64;
        let idle = self.free_at <= at;
        if !idle
            && !self
                .limit
                .admits(self.waiting_bytes + size, self.waiting_packets + 1)
        {
            rec.drop(at, pkt.index, pkt.size(), DropReason::Queue);
            return;
        }
        let start = self.free_at.max(at);
        let finish = start + self.rate.serialisation(size);
        self.free_at = finish;
        // bytes in the bottleneck after this arrival: waiting, in service, and this packet
        let in_service = match self
            .first_waiting
            .checked_sub(1)
            .and_then(|i| self.q.get(i))
        {
            Some(s) if s.finish > at => s.pkt.size() as u64,
            _ => 0,
        };
        if idle {
            self.first_waiting = self.q.len() + 1;
        } else {
            self.waiting_bytes += size;
            self.waiting_packets += 1;
        }
        let backlog_bytes = self.waiting_bytes + in_service + if idle { size } else { 0 };
        rec.counters.max_backlog_bytes = rec.counters.max_backlog_bytes.max(backlog_bytes);
        let backlog_packets = self.waiting_packets + u64::from(in_service > 0 || idle);
        rec.event(
            at,
            pkt.index,
            pkt.size(),
            EventKind::Enqueue {
                backlog_bytes,
                backlog_packets,
            },
        );
        self.q.push_back(Slot { start, finish, pkt });
    }

    fn pop(&mut self, now: Duration) -> Option<(Duration, Packet<D>)> {
        if self.q.front()?.finish > now {
            return None;
        }
        self.advance(now);
        let s = self.q.pop_front()?;
        self.first_waiting -= 1;
        Some((s.finish, s.pkt))
    }

    fn next_exit(&self) -> Option<Duration> {
        self.q.front().map(|s| s.finish)
    }
}

/// A trace-driven link (Mahimahi semantics): at each delivery opportunity up to 1500 bytes leave
/// the queue, possibly several small packets or part of a large one; an opportunity that finds
/// the queue empty is lost. An opportunity at time T serves packets that arrived at or before T,
/// so a packet arriving at T still finds the packets served at T in the queue. None of this
/// depends on whether the caller polls before or after pushing at T.
pub struct TraceQueue<D = Vec<u8>> {
    trace: Trace,
    limit: Limit,
    /// Queued packets with the bytes of each still to deliver.
    q: VecDeque<(Packet<D>, u32)>,
    queued_bytes: u64,
    next: Option<(u64, usize)>,
    /// The last opportunity run and the bytes it left unused because the queue ran dry. A
    /// packet arriving at that same instant may still use them, and never the opportunity again.
    spent: Option<((u64, usize), u32)>,
    /// The time of the last opportunity run, and the bytes and packets delivered at that time.
    delivered: (Duration, u64, u64),
    out: VecDeque<(Duration, Packet<D>)>,
}

impl<D: Payload> TraceQueue<D> {
    pub fn new(trace: Trace, limit: QueueLimit) -> Self {
        TraceQueue {
            limit: Limit::new(limit, |d| trace.bytes_in(d)),
            trace,
            q: VecDeque::new(),
            queued_bytes: 0,
            next: None,
            spent: None,
            delivered: (Duration::ZERO, 0, 0),
            out: VecDeque::new(),
        }
    }

    /// Runs the opportunities before `t` (or up to and including it).
    fn advance(&mut self, t: Duration, inclusive: bool) {
        while let Some((cycle, pos)) = self.next {
            let at = self.trace.at(cycle, pos);
            if at > t || (at == t && !inclusive) {
                break;
            }
            let mut budget = OPPORTUNITY_BYTES;
            while budget > 0 {
                let Some((_, left)) = self.q.front_mut() else {
                    break;
                };
                let take = budget.min(*left);
                *left -= take;
                budget -= take;
                if *left == 0
                    && let Some((pkt, _)) = self.q.pop_front()
                {
                    self.queued_bytes -= pkt.size() as u64;
                    if self.delivered.0 != at {
                        self.delivered = (at, 0, 0);
                    }
                    self.delivered.1 += pkt.size() as u64;
                    self.delivered.2 += 1;
                    self.out.push_back((at, pkt));
                }
            }
            self.spent = Some(((cycle, pos), budget));
            self.next = (!self.q.is_empty()).then(|| self.trace.next(cycle, pos));
        }
    }
}

impl<D: Payload> Stage<D> for TraceQueue<D> {
    fn push(&mut self, at: Duration, pkt: Packet<D>, rec: &mut Recorder) {
        self.advance(at, false);
        let size = pkt.size() as u64;
        // what the opportunities at `at` already delivered still counts: the arrival comes first
        let (gone_bytes, gone_packets) = match self.delivered {
            (t, bytes, packets) if t == at => (bytes, packets),
            _ => (0, 0),
        };
        let queued_bytes = self.queued_bytes + gone_bytes;
        let queued_packets = self.q.len() as u64 + gone_packets;
        if queued_packets > 0 && !self.limit.admits(queued_bytes + size, queued_packets + 1) {
            rec.drop(at, pkt.index, pkt.size(), DropReason::Queue);
            return;
        }
        let backlog_bytes = queued_bytes + size;
        rec.counters.max_backlog_bytes = rec.counters.max_backlog_bytes.max(backlog_bytes);
        let kind = EventKind::Enqueue {
            backlog_bytes,
            backlog_packets: queued_packets + 1,
        };
        rec.event(at, pkt.index, pkt.size(), kind);
        let mut left = pkt.size() as u32;
        if self.q.is_empty() {
            let mut next = self.trace.first_at_or_after(at);
            // Opportunities at `at` may have run already (the caller polled at `at` before
            // pushing): the packet gets what the last one left over, then the one after it.
            if let Some((done, unused)) = self.spent
                && next <= done
            {
                next = self.trace.next(done.0, done.1);
                if unused > 0 {
                    let take = unused.min(left);
                    left -= take;
                    self.spent = Some((done, unused - take));
                    if left == 0 {
                        self.delivered.1 += size;
                        self.delivered.2 += 1;
                        self.out.push_back((self.trace.at(done.0, done.1), pkt));
                        return;
                    }
                }
            }
            self.next = Some(next);
        }
        self.queued_bytes += size;
        self.q.push_back((pkt, left));
    }

    fn pop(&mut self, now: Duration) -> Option<(Duration, Packet<D>)> {
        self.advance(now, true);
        self.out.pop_front()
    }

    fn next_exit(&self) -> Option<Duration> {
        match self.out.front() {
            Some(&(t, _)) => Some(t),
            None => self.next.map(|(c, p)| self.trace.at(c, p)),
        }
    }
}
