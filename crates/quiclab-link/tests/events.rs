//! The event log and the counters.

mod util;

use std::collections::BTreeMap;
use std::time::Duration;

use quiclab_link::{DropReason, EventKind};

use util::*;

/// Irregular traffic: bursts of mixed sizes (some over a 1400 B MTU) with quiet gaps.
fn traffic() -> Vec<Arrival> {
    let sizes = [1500, 40, 1200, 1400, 1401, 576, 9000, 1500, 80, 1000];
    let mut out = Vec::new();
    for round in 0..200u64 {
        let start = ms(round * 7);
        for k in 0..(round % 13) {
            out.push(Arrival {
                at: start + us(k * 37),
                size: sizes[((round + k) % sizes.len() as u64) as usize],
            });
        }
    }
    out
}

#[test]
fn the_log_and_the_counters_agree() {
    let arrivals = traffic();
    let cfg: &[(&str, &str)] = &[
        ("mtu", "1400"),
        ("outage", "300ms-350ms"),
        ("drop-packets", "5,50-59"),
        ("loss", "3%"),
        ("duplicate", "10%"),
        ("rate", "4mbit"),
        ("queue", "4kb"),
        ("delay", "15ms"),
        ("jitter", "2ms"),
    ];
    let run = run_all_ways(|| pipeline(cfg, 99, true), &arrivals);
    let c = &run.counters;
    let n = arrivals.len() as u64;

    // one Arrive per push, in order, at its time and size
    let arrive: Vec<_> = run
        .events
        .iter()
        .filter(|e| e.kind == EventKind::Arrive)
        .map(|e| (e.index, e.t, e.size as usize))
        .collect();
    let want: Vec<_> = arrivals
        .iter()
        .enumerate()
        .map(|(i, a)| (i as u64, a.at, a.size))
        .collect();
    assert_eq!(arrive, want);
    // one Depart per departure, in the order they were returned, stamped with `at`
    let depart: Vec<_> = run
        .events
        .iter()
        .filter(|e| e.kind == EventKind::Depart)
        .map(|e| (e.index, e.t, e.size as usize))
        .collect();
    let want: Vec<_> = run.deps.iter().map(|d| (d.index, d.at, d.size)).collect();
    assert_eq!(depart, want);

    // counters against the log and the traffic
    assert_eq!(c.packets_in, n);
    assert_eq!(
        c.bytes_in,
        arrivals.iter().map(|a| a.size as u64).sum::<u64>()
    );
    assert_eq!(c.packets_out, run.deps.len() as u64);
    assert_eq!(
        c.bytes_out,
        run.deps.iter().map(|d| d.size as u64).sum::<u64>()
    );
    let dup_events = run
        .events
        .iter()
        .filter(|e| e.kind == EventKind::Duplicate)
        .count() as u64;
    assert_eq!(c.duplicated, dup_events);
    let mut per_reason: BTreeMap<&str, u64> = BTreeMap::new();
    for d in &run.drops {
        *per_reason.entry(d.reason.as_str()).or_default() += 1;
    }
    for reason in DropReason::ALL {
        assert_eq!(
            c.dropped(reason),
            per_reason.get(reason.as_str()).copied().unwrap_or(0),
            "{reason:?}"
        );
    }
    assert_eq!(c.dropped_total(), run.drops.len() as u64);
    // every packet and copy is accounted for once the link is empty
    assert_eq!(
        c.packets_in + c.duplicated,
        c.packets_out + c.dropped_total()
    );
    // everything that passed the filters reached the queue: admitted or dropped there
    let enq = enqueues(&run);
    let filtered = c.dropped_total() - c.dropped_queue;
    assert_eq!(
        enq.len() as u64 + c.dropped_queue,
        n - filtered + c.duplicated
    );
    assert_eq!(
        c.max_backlog_bytes,
        enq.iter().map(|e| e.2).max().unwrap_or(0)
    );
    // the configuration exercises every stage
    for reason in [
        DropReason::Mtu,
        DropReason::Outage,
        DropReason::Listed,
        DropReason::Random,
        DropReason::Queue,
    ] {
        assert!(c.dropped(reason) > 0, "no {reason:?} drops: {c:?}");
    }
    assert!(c.duplicated > 0);

    // every index's first event is its arrival
    let mut first: BTreeMap<u64, EventKind> = BTreeMap::new();
    for e in &run.events {
        first.entry(e.index).or_insert(e.kind);
    }
    assert!(first.values().all(|k| *k == EventKind::Arrive));
    assert_eq!(first.len() as u64, n);
}

#[test]
fn logging_off_keeps_the_counters() {
    let arrivals = traffic();
    let cfg: &[(&str, &str)] = &[
        ("loss", "5%"),
        ("rate", "4mbit"),
        ("queue", "8kb"),
        ("delay", "5ms"),
    ];
    let mut on = pipeline(cfg, 3, true);
    let mut off = pipeline(cfg, 3, false);
    let a = drive(&mut on, &arrivals, Wake::PushFirst);
    let b = drive(&mut off, &arrivals, Wake::PushFirst);
    assert!(!a.events.is_empty());
    assert!(b.events.is_empty());
    assert!(on.take_events().is_empty(), "take_events drains the log");
    assert_eq!(a.counters, b.counters);
    assert_eq!(a.schedule(), b.schedule());
}

/// For each enqueue at t of index i, the backlog is the accepted packets up to i that are still
/// in the bottleneck at t, according to `inside(t, departure)`.
fn expected_backlog(
    run: &Run,
    delay: Duration,
    inside: impl Fn(Duration, Duration) -> bool,
) -> Vec<(Duration, u64, u64, u64)> {
    let dep = run.departure_of();
    let accepted: Vec<u64> = enqueues(run).iter().map(|e| e.1).collect();
    accepted
        .iter()
        .map(|&i| {
            let t = run.arrivals[i as usize].at;
            let (bytes, packets) = accepted
                .iter()
                .filter(|&&j| j <= i && inside(t, dep[j as usize].unwrap() - delay))
                .fold((0, 0), |(b, p), &j| {
                    (b + run.arrivals[j as usize].size as u64, p + 1)
                });
            (t, i, bytes, packets)
        })
        .collect()
}

#[test]
fn enqueue_events_carry_the_backlog_of_a_rate_queue() {
    // a packet is in the rate queue (waiting or on the wire) until its last bit is sent; one
    // finishing exactly at t has left
    let arrivals = traffic();
    let delay = ms(15);
    let run = run_all_ways(
        || {
            pipeline(
                &[("rate", "6mbit"), ("queue", "12kb"), ("delay", "15ms")],
                1,
                true,
            )
        },
        &arrivals,
    );
    assert!(run.counters.dropped_queue > 0);
    let want = expected_backlog(&run, delay, |t, finish| finish > t);
    assert_same(&enqueues(&run), &want, "rate queue backlog");
    assert_eq!(
        run.counters.max_backlog_bytes,
        want.iter().map(|e| e.2).max().unwrap()
    );
}

#[test]
fn enqueue_events_carry_the_backlog_of_a_trace_queue() {
    // a packet is in the trace queue until the opportunity that delivers its last byte; one
    // delivered at the instant t still counts for an arrival at t
    let arrivals = traffic();
    let run = run_all_ways(
        || {
            trace_pipeline(
                "1\n2\n2\n5\n",
                &[("queue", "10pkt"), ("delay", "3ms")],
                true,
            )
        },
        &arrivals,
    );
    assert!(run.counters.dropped_queue > 0);
    let want = expected_backlog(&run, ms(3), |t, out| out >= t);
    assert_same(&enqueues(&run), &want, "trace queue backlog");
}

#[test]
fn a_departure_handed_over_late_is_logged_with_how_late_and_only_past_the_threshold() {
    let mut p = pipeline(&[("delay", "10ms")], 1, true);
    let packet = || vec![0x45u8; 100];
    // due at 10 ms, taken 1 ms late: under the threshold, only its Depart
    p.push(ms(0), packet());
    let d = p.poll_transmit(ms(11)).expect("due");
    assert_eq!(d.at, ms(10));
    // due at 30 ms, taken at 35 ms: late by 5 ms
    p.push(ms(20), packet());
    assert_eq!(p.poll_transmit(ms(35)).expect("due").at, ms(30));
    // due at 50 ms, taken exactly at the threshold past it: not logged
    p.push(ms(40), packet());
    assert!(p.poll_transmit(ms(50) + quiclab_link::LATE_EVENT).is_some());
    let late: Vec<_> = p
        .take_events()
        .into_iter()
        .filter_map(|e| match e.kind {
            EventKind::Late { by_ns } => Some((e.index, e.t, by_ns)),
            _ => None,
        })
        .collect();
    assert_eq!(late, vec![(1, ms(30), 5_000_000)]);
}
