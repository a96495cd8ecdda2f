//! One direction of a link: filters, then a bottleneck, then the delay line.

use std::collections::VecDeque;
use std::time::Duration;

use crate::Direction;
use crate::config::{ConfigError, DEFAULT_REORDER_DELAY, DirectionConfig};
use crate::event::{Counters, Event, EventKind, LATE_EVENT, Recorder};
use crate::stage::delay::{DelayLine, DelaySpec};
use crate::stage::filter::{self, Filter, Verdict};
use crate::stage::queue::{RateQueue, TraceQueue};
use crate::stage::{Packet, Payload, Stage};

/// A packet leaving the link.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Departure<D = Vec<u8>> {
    /// When it was scheduled to leave (time since the link's epoch). A runtime that writes it
    /// later than this is late by the difference.
    pub at: Duration,
    pub index: u64,
    pub data: D,
}

/// One direction of an emulated link, driven by its caller's clock:
/// `push(now, packet)`, `poll_transmit(now)`, `poll_timeout()`. It carries plain bytes unless
/// its runtime chooses another [`Payload`].
pub struct Pipeline<D: Payload = Vec<u8>> {
    filters: Vec<Box<dyn Filter>>,
    stages: Vec<Box<dyn Stage<D>>>,
    rec: Recorder,
    next_index: u64,
    ready: VecDeque<(Duration, Packet<D>)>,
}

impl<D: Payload> Pipeline<D> {
    /// Builds the stages that `cfg` asks for, in the order they act: MTU, outages, listed drops
    /// (by index, then among the large packets), an isolated loss, a blackout, loss (i.i.d. or
    /// bursts), duplication, bottleneck (rate or trace, with its queue), delay.
    /// `log` turns the per-packet event log on.
    pub fn new(
        dir: Direction,
        cfg: &DirectionConfig,
        seed: u64,
        log: bool,
    ) -> Result<Self, ConfigError> {
        cfg.validate()?;
        let mut filters: Vec<Box<dyn Filter>> = Vec::new();
        if let Some(mtu) = cfg.mtu {
            filters.push(Box::new(filter::Mtu(mtu)));
        }
        if !cfg.outages.is_empty() {
            filters.push(Box::new(filter::Outages(cfg.outages.clone())));
        }
        if !cfg.drop_packets.is_empty() {
            filters.push(Box::new(filter::Listed(cfg.drop_packets.clone())));
        }
        if let Some((min_bytes, list)) = &cfg.drop_large {
            filters.push(Box::new(filter::LargeListed::new(*min_bytes, list.clone())));
        }
        if let Some(plan) = cfg.isolated_loss {
            filters.push(Box::new(filter::IsolatedLoss::new(plan)));
        }
        if let Some((after, length)) = cfg.blackout {
            filters.push(Box::new(filter::Blackout::new(after, length)));
        }
        match cfg.burst() {
            Some(model) => filters.push(Box::new(filter::GilbertElliott::new(seed, dir, model))),
            None if cfg.loss > 0.0 => {
                filters.push(Box::new(filter::Random::new(seed, dir, cfg.loss)))
            }
            None => {}
        }
        if cfg.duplicate > 0.0 {
            filters.push(Box::new(filter::Duplicate::new(seed, dir, cfg.duplicate)));
        }
        let mut stages: Vec<Box<dyn Stage<D>>> = Vec::new();
        if let Some(rate) = cfg.rate {
            stages.push(Box::new(RateQueue::new(rate, cfg.queue_limit())));
        } else if let Some(trace) = &cfg.trace {
            stages.push(Box::new(TraceQueue::new(trace.clone(), cfg.queue_limit())));
        }
        let spec = DelaySpec {
            delay: cfg.delay,
            jitter: cfg.jitter,
            jitter_reorders: cfg.jitter_reorders,
            reorder: cfg.reorder,
            reorder_delay: cfg.reorder_delay.unwrap_or(DEFAULT_REORDER_DELAY),
        };
        if !spec.delay.is_zero() || !spec.jitter.is_zero() || spec.reorder > 0.0 {
            stages.push(Box::new(DelayLine::new(seed, dir, spec)));
        }
        Ok(Self::from_parts(dir, filters, stages, log))
    }

    /// A pipeline of hand-picked stages (for custom compositions and tests).
    pub fn from_parts(
        dir: Direction,
        filters: Vec<Box<dyn Filter>>,
        stages: Vec<Box<dyn Stage<D>>>,
        log: bool,
    ) -> Self {
        Pipeline {
            filters,
            stages,
            rec: Recorder::new(dir, log),
            next_index: 0,
            ready: VecDeque::new(),
        }
    }

    /// A packet enters the link at `now`. Returns its index. `now` must not decrease.
    pub fn push(&mut self, now: Duration, data: D) -> u64 {
        let index = self.next_index;
        self.next_index += 1;
        let size = data.wire_len();
        self.rec.counters.packets_in += 1;
        self.rec.counters.bytes_in += size as u64;
        self.rec.event(now, index, size, EventKind::Arrive);
        let mut duplicate = false;
        for f in &mut self.filters {
            match f.decide(now, index, size) {
                Verdict::Pass => {}
                Verdict::Drop(reason) => {
                    self.rec.drop(now, index, size, reason);
                    return index;
                }
                Verdict::Duplicate => duplicate = true,
            }
        }
        let original = Packet {
            index,
            copy: false,
            data,
        };
        if duplicate {
            self.rec.counters.duplicated += 1;
            self.rec.event(now, index, size, EventKind::Duplicate);
            let copy = Packet {
                copy: true,
                ..original.clone()
            };
            self.enter(now, original);
            self.enter(now, copy);
        } else {
            self.enter(now, original);
        }
        index
    }

    fn enter(&mut self, now: Duration, pkt: Packet<D>) {
        match self.stages.first_mut() {
            Some(s) => s.push(now, pkt, &mut self.rec),
            None => self.ready.push_back((now, pkt)),
        }
    }

    /// The next packet due by `now`, if any. Call until it returns `None`. A packet returned
    /// more than [`LATE_EVENT`] after it was due is logged as late by the difference.
    pub fn poll_transmit(&mut self, now: Duration) -> Option<Departure<D>> {
        if self.ready.is_empty() {
            self.cascade(now);
        }
        let (at, pkt) = self.ready.pop_front()?;
        self.rec.counters.packets_out += 1;
        self.rec.counters.bytes_out += pkt.size() as u64;
        self.rec.event(at, pkt.index, pkt.size(), EventKind::Depart);
        let late = now.saturating_sub(at);
        if late > LATE_EVENT {
            let by_ns = u64::try_from(late.as_nanos()).unwrap_or(u64::MAX);
            self.rec
                .event(at, pkt.index, pkt.size(), EventKind::Late { by_ns });
        }
        Some(Departure {
            at,
            index: pkt.index,
            data: pkt.data,
        })
    }

    /// Moves every packet due by `now` through the stages, each at its exact exit time.
    fn cascade(&mut self, now: Duration) {
        let n = self.stages.len();
        for i in 0..n {
            while let Some((t, pkt)) = self.stages[i].pop(now) {
                match self.stages.get_mut(i + 1) {
                    Some(next) => next.push(t, pkt, &mut self.rec),
                    None => self.ready.push_back((t, pkt)),
                }
            }
        }
    }

    /// When `poll_transmit` should next be called, if anything is held.
    pub fn poll_timeout(&self) -> Option<Duration> {
        if let Some(&(t, _)) = self.ready.front() {
            return Some(t);
        }
        self.stages.iter().filter_map(|s| s.next_exit()).min()
    }

    pub fn counters(&self) -> &Counters {
        &self.rec.counters
    }

    /// Events logged and not yet taken.
    pub fn events_held(&self) -> usize {
        self.rec.log.as_ref().map_or(0, Vec::len)
    }

    /// Takes the events logged so far (empty when logging is off).
    pub fn take_events(&mut self) -> Vec<Event> {
        self.rec
            .log
            .as_mut()
            .map(std::mem::take)
            .unwrap_or_default()
    }

    /// Packets pushed so far.
    pub fn packets_in(&self) -> u64 {
        self.next_index
    }
}
