//! A virtual-time driver for pipelines, shared by the integration tests.

#![allow(dead_code)]

use std::collections::BTreeSet;
use std::time::Duration;

use quiclab_link::{Counters, Direction, DirectionConfig, DropReason, Event, EventKind, Pipeline};

pub fn ms(v: u64) -> Duration {
    Duration::from_millis(v)
}

pub fn us(v: u64) -> Duration {
    Duration::from_micros(v)
}

pub fn ns(v: u64) -> Duration {
    Duration::from_nanos(v)
}

/// A packet to push: arrival time and size in bytes.
#[derive(Debug, Clone, Copy)]
pub struct Arrival {
    pub at: Duration,
    pub size: usize,
}

/// `n` packets of `size` bytes, the first at `start`, then every `gap`.
pub fn periodic(n: usize, start: Duration, gap: Duration, size: usize) -> Vec<Arrival> {
    (0..n)
        .map(|i| Arrival {
            at: start + gap * i as u32,
            size,
        })
        .collect()
}

/// `n` packets of `size` bytes, all at `at`.
pub fn burst(n: usize, at: Duration, size: usize) -> Vec<Arrival> {
    periodic(n, at, Duration::ZERO, size)
}

/// Packet contents that identify the packet: its push order in the first 8 bytes (as far as
/// they fit), then a byte pattern.
pub fn payload(push_order: u64, size: usize) -> Vec<u8> {
    let mut data: Vec<u8> = (0..size).map(|i| (i % 251) as u8).collect();
    let tag = push_order.to_le_bytes();
    let n = size.min(8);
    data[..n].copy_from_slice(&tag[..n]);
    data
}

/// A departure as seen by the test: index, scheduled time, size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dep {
    pub index: u64,
    pub at: Duration,
    pub size: usize,
}

/// A drop as logged by the pipeline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DropEv {
    pub index: u64,
    pub t: Duration,
    pub reason: DropReason,
}

/// Everything a run produced.
#[derive(Debug, Clone)]
pub struct Run {
    /// Arrival time of each index (index = push order).
    pub arrivals: Vec<Arrival>,
    /// Departures in the order `poll_transmit` returned them.
    pub deps: Vec<Dep>,
    /// Drops from the event log (empty when logging is off).
    pub drops: Vec<DropEv>,
    /// The whole event log (empty when logging is off).
    pub events: Vec<Event>,
    pub counters: Counters,
}

impl Run {
    /// Departure time of each index's first copy, `None` if it never left.
    pub fn departure_of(&self) -> Vec<Option<Duration>> {
        let mut out = vec![None; self.arrivals.len()];
        for d in &self.deps {
            let slot = &mut out[d.index as usize];
            if slot.is_none() {
                *slot = Some(d.at);
            }
        }
        out
    }

    /// Indices that never left the link.
    pub fn lost(&self) -> BTreeSet<u64> {
        let left: BTreeSet<u64> = self.deps.iter().map(|d| d.index).collect();
        (0..self.arrivals.len() as u64)
            .filter(|i| !left.contains(i))
            .collect()
    }

    /// Indices dropped for `reason`, from the event log.
    pub fn dropped(&self, reason: DropReason) -> BTreeSet<u64> {
        self.drops
            .iter()
            .filter(|d| d.reason == reason)
            .map(|d| d.index)
            .collect()
    }

    /// Departure times in departure order, one entry per copy.
    pub fn times(&self) -> Vec<Duration> {
        self.deps.iter().map(|d| d.at).collect()
    }

    /// `(index, at)` pairs in departure order.
    pub fn schedule(&self) -> Vec<(u64, Duration)> {
        self.deps.iter().map(|d| (d.index, d.at)).collect()
    }
}

/// When the driver wakes the pipeline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wake {
    /// At every arrival and at every `poll_timeout`; at an instant with both, packets are pushed
    /// before polling.
    PushFirst,
    /// Like `PushFirst`, but at an instant with both, the pipeline is drained before the
    /// arrivals are pushed (and drained again after).
    PollFirst,
    /// Late: only at arrivals and on a coarse grid of ticks, never at `poll_timeout`.
    Ticks(Duration),
}

/// Pushes `arrivals` (sorted by time) and drives the pipeline until it holds nothing, checking
/// the driving contract on the way: departures are due (`at <= now`), come out in time order,
/// and `poll_timeout` never names a time at or before the instant just drained.
pub fn drive(p: &mut Pipeline, arrivals: &[Arrival], wake: Wake) -> Run {
    assert!(
        arrivals.windows(2).all(|w| w[0].at <= w[1].at),
        "arrivals must be sorted by time"
    );
    let first_index = p.packets_in();
    let mut deps = Vec::new();
    let mut events = Vec::new();
    let mut last_at = Duration::ZERO;
    let mut next = 0usize;
    let mut now = Duration::ZERO;

    let mut drain = |p: &mut Pipeline, now: Duration, deps: &mut Vec<Dep>| {
        while let Some(d) = p.poll_transmit(now) {
            assert!(d.at <= now, "departure at {:?} returned at {now:?}", d.at);
            assert!(
                d.at >= last_at,
                "departure at {:?} after one at {last_at:?}",
                d.at
            );
            last_at = d.at;
            let push_order = d.index - first_index;
            assert_eq!(
                d.data,
                payload(push_order, d.data.len()),
                "contents of packet {} changed",
                d.index
            );
            deps.push(Dep {
                index: d.index,
                at: d.at,
                size: d.data.len(),
            });
        }
        if let Some(t) = p.poll_timeout() {
            assert!(t > now, "poll_timeout {t:?} after draining at {now:?}");
        }
    };
    let mut steps = 0u64;
    loop {
        steps += 1;
        assert!(steps < 100_000_000, "driver does not make progress");
        let next_push = arrivals.get(next).map(|a| a.at);
        let next_wake = match wake {
            Wake::PushFirst | Wake::PollFirst => p.poll_timeout(),
            // the first tick at or after the timeout (the timeout is after `now`, see `drain`)
            Wake::Ticks(tick) => p.poll_timeout().map(|t| {
                let k = t.as_nanos().div_ceil(tick.as_nanos());
                Duration::from_nanos((k * tick.as_nanos()) as u64)
            }),
        };
        let t = match (next_push, next_wake) {
            (None, None) => break,
            (Some(a), None) => a,
            (None, Some(b)) => b,
            (Some(a), Some(b)) => a.min(b),
        };
        assert!(t >= now, "time went backwards: {t:?} < {now:?}");
        now = t;
        if wake == Wake::PollFirst {
            drain(p, now, &mut deps);
        }
        while next < arrivals.len() && arrivals[next].at == now {
            let a = arrivals[next];
            let push_order = next as u64;
            let index = p.push(now, payload(push_order, a.size));
            assert_eq!(index, first_index + push_order);
            next += 1;
        }
        drain(p, now, &mut deps);
        events.extend(p.take_events());
    }
    let drops = events
        .iter()
        .filter_map(|e| match e.kind {
            EventKind::Drop { reason } => Some(DropEv {
                index: e.index,
                t: e.t,
                reason,
            }),
            _ => None,
        })
        .collect();
    Run {
        arrivals: arrivals.to_vec(),
        deps,
        drops,
        events,
        counters: p.counters().clone(),
    }
}

/// A trace loader for `DirectionConfig::set` that serves `text` for any path.
pub fn serve(text: &'static str) -> impl Fn(&str) -> Result<quiclab_link::Trace, String> {
    move |_| quiclab_link::Trace::parse(text).map_err(|e| e.to_string())
}

/// A direction config from `key=value` pairs (a trace key reads `trace` as the file's text).
pub fn config(pairs: &[(&str, &str)], trace: &'static str) -> DirectionConfig {
    let mut cfg = DirectionConfig::default();
    let load = serve(trace);
    for (k, v) in pairs {
        cfg.set(k, v, &load)
            .unwrap_or_else(|e| panic!("setting {k}={v}: {e}"));
    }
    cfg
}

/// A pipeline for one direction of a config.
pub fn pipeline(pairs: &[(&str, &str)], seed: u64, log: bool) -> Pipeline {
    pipeline_dir(pairs, "", Direction::Up, seed, log)
}

pub fn pipeline_dir(
    pairs: &[(&str, &str)],
    trace: &'static str,
    dir: Direction,
    seed: u64,
    log: bool,
) -> Pipeline {
    Pipeline::new(dir, &config(pairs, trace), seed, log).expect("valid config")
}

/// A pipeline with a trace-driven bottleneck.
pub fn trace_pipeline(trace: &'static str, pairs: &[(&str, &str)], log: bool) -> Pipeline {
    let mut all = vec![("trace", "trace.txt")];
    all.extend_from_slice(pairs);
    pipeline_dir(&all, trace, Direction::Up, 1, log)
}

/// Runs `arrivals` through a fresh pipeline with every wake-up strategy and checks that the
/// departure schedule and the drops do not depend on it; returns the exactly woken run.
pub fn run_all_ways(make: impl Fn() -> Pipeline, arrivals: &[Arrival]) -> Run {
    let exact = drive(&mut make(), arrivals, Wake::PushFirst);
    for wake in [Wake::PollFirst, Wake::Ticks(us(300)), Wake::Ticks(ms(7))] {
        let other = drive(&mut make(), arrivals, wake);
        assert_same(
            &other.schedule(),
            &exact.schedule(),
            &format!("schedule with {wake:?}"),
        );
        // a late wake-up logs a drop inside the link later, after drops at arrival
        assert_same(
            &sorted_drops(&other),
            &sorted_drops(&exact),
            &format!("drops with {wake:?}"),
        );
        assert_same(
            &enqueues(&other),
            &enqueues(&exact),
            &format!("enqueue events with {wake:?}"),
        );
        assert_eq!(other.counters, exact.counters, "counters with {wake:?}");
    }
    exact
}

/// Asserts two sequences are equal, showing the first difference with a little context.
pub fn assert_same<T: PartialEq + std::fmt::Debug>(got: &[T], want: &[T], what: &str) {
    if let Some(i) = (0..got.len().max(want.len())).find(|&i| got.get(i) != want.get(i)) {
        let lo = i.saturating_sub(3);
        let show = |v: &[T]| format!("{:?}", &v[lo.min(v.len())..(i + 4).min(v.len())]);
        panic!(
            "{what}: first difference at position {i} (of {} and {}):\n  got  [{lo}..]: {}\n  want [{lo}..]: {}",
            got.len(),
            want.len(),
            show(got),
            show(want)
        );
    }
}

fn sorted_drops(run: &Run) -> Vec<(Duration, u64, &'static str)> {
    let mut v: Vec<_> = run
        .drops
        .iter()
        .map(|d| (d.t, d.index, d.reason.as_str()))
        .collect();
    v.sort();
    v
}

/// The enqueue events: `(t, index, backlog bytes, backlog packets)`.
pub fn enqueues(run: &Run) -> Vec<(Duration, u64, u64, u64)> {
    run.events
        .iter()
        .filter_map(|e| match e.kind {
            EventKind::Enqueue {
                backlog_bytes,
                backlog_packets,
            } => Some((e.t, e.index, backlog_bytes, backlog_packets)),
            _ => None,
        })
        .collect()
}

/// Half-width of a two-sided binomial interval: `z * sqrt(n p (1 - p))`.
pub fn binomial_tolerance(n: u64, p: f64, z: f64) -> f64 {
    z * (n as f64 * p * (1.0 - p)).sqrt()
}

/// z for a two-sided 99.9 % normal interval.
pub const Z999: f64 = 3.2905;
