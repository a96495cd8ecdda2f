//! Propagation delay with optional jitter and reordering.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::time::Duration;

use super::{Packet, Payload, Stage};
use crate::Direction;
use crate::event::Recorder;
use crate::rng::{Draws, Stream};

/// Settings of a [`DelayLine`].
#[derive(Debug, Clone, Copy, Default)]
pub struct DelaySpec {
    pub delay: Duration,
    /// Each packet's delay is `delay + U(-jitter, +jitter)`, never below zero.
    pub jitter: Duration,
    /// Without this, a packet never leaves before the one ahead of it (jitter keeps order).
    pub jitter_reorders: bool,
    /// Share of packets held back by `reorder_delay`, letting later packets overtake them.
    pub reorder: f64,
    pub reorder_delay: Duration,
}

struct Held<D> {
    exit: Duration,
    seq: u64,
    pkt: Packet<D>,
}

impl<D> PartialEq for Held<D> {
    fn eq(&self, o: &Self) -> bool {
        (self.exit, self.seq) == (o.exit, o.seq)
    }
}
impl<D> Eq for Held<D> {}
impl<D> PartialOrd for Held<D> {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl<D> Ord for Held<D> {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        (self.exit, self.seq).cmp(&(o.exit, o.seq))
    }
}

/// A delay line. Packets stay in order (a FIFO) unless jitter may reorder them or explicit
/// reordering is on (then a heap ordered by exit time, ties by arrival).
pub struct DelayLine<D = Vec<u8>> {
    spec: DelaySpec,
    jitter: Draws,
    reorder: Draws,
    last_exit: Duration,
    seq: u64,
    fifo: VecDeque<(Duration, Packet<D>)>,
    heap: BinaryHeap<Reverse<Held<D>>>,
    ordered: bool,
}

impl<D: Payload> DelayLine<D> {
    pub fn new(seed: u64, dir: Direction, spec: DelaySpec) -> Self {
        DelayLine {
            spec,
            jitter: Draws::new(seed, dir, Stream::Jitter),
            reorder: Draws::new(seed, dir, Stream::Reorder),
            last_exit: Duration::ZERO,
            seq: 0,
            fifo: VecDeque::new(),
            heap: BinaryHeap::new(),
            ordered: (spec.jitter.is_zero() || !spec.jitter_reorders) && spec.reorder == 0.0,
        }
    }
}

impl<D: Payload> Stage<D> for DelayLine<D> {
    fn push(&mut self, at: Duration, pkt: Packet<D>, _: &mut Recorder) {
        let k = u64::from(pkt.copy);
        let mut exit = at + self.spec.delay;
        if !self.spec.jitter.is_zero() {
            let j =
                self.spec.jitter.as_secs_f64() * (2.0 * self.jitter.uniform(pkt.index, k) - 1.0);
            let secs = (exit.as_secs_f64() + j).max(at.as_secs_f64());
            exit = Duration::from_secs_f64(secs);
            if !self.spec.jitter_reorders {
                exit = exit.max(self.last_exit);
            }
        }
        self.last_exit = self.last_exit.max(exit);
        if self.ordered {
            self.fifo.push_back((exit, pkt));
            return;
        }
        if self.reorder.bernoulli(pkt.index, k, self.spec.reorder) {
            exit += self.spec.reorder_delay;
        }
        self.seq += 1;
        self.heap.push(Reverse(Held {
            exit,
            seq: self.seq,
            pkt,
        }));
    }

    fn pop(&mut self, now: Duration) -> Option<(Duration, Packet<D>)> {
        if self.ordered {
            if self.fifo.front()?.0 > now {
                return None;
            }
            return self.fifo.pop_front();
        }
        if self.heap.peek()?.0.exit > now {
            return None;
        }
        self.heap.pop().map(|Reverse(h)| (h.exit, h.pkt))
    }

    fn next_exit(&self) -> Option<Duration> {
        if self.ordered {
            self.fifo.front().map(|(t, _)| *t)
        } else {
            self.heap.peek().map(|Reverse(h)| h.exit)
        }
    }
}
