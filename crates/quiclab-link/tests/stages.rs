//! Deterministic stages in virtual time: delay, serialisation, drop-tail queues, trace-driven
//! links, outages, listed drops, MTU, and hand-built pipelines.

mod util;

use std::collections::BTreeSet;
use std::time::Duration;

use quiclab_link::stage::Stage;
use quiclab_link::stage::delay::{DelayLine, DelaySpec};
use quiclab_link::stage::filter::{Filter, Mtu};
use quiclab_link::stage::queue::RateQueue;
use quiclab_link::{Direction, DropReason, Pipeline, QueueLimit, Rate};

use util::*;

/// Serialisation time of `size` bytes at `bps`, which the test requires to be a whole number of
/// nanoseconds.
fn tx_exact(size: u64, bps: u64) -> Duration {
    let bits_ns = u128::from(size) * 8 * 1_000_000_000;
    assert_eq!(bits_ns % u128::from(bps), 0, "{size} B at {bps} bit/s");
    Duration::from_nanos((bits_ns / u128::from(bps)) as u64)
}

fn set(v: impl IntoIterator<Item = u64>) -> BTreeSet<u64> {
    v.into_iter().collect()
}

fn mixed_arrivals() -> Vec<Arrival> {
    [
        (Duration::ZERO, 1500),
        (us(1), 40),
        (us(1), 1200),
        (ms(3), 576),
        (ns(3_000_007), 1500),
        (ms(250), 9000),
        (ms(2000), 1),
    ]
    .into_iter()
    .map(|(at, size)| Arrival { at, size })
    .collect()
}

#[test]
fn delay_adds_exactly_the_configured_time() {
    let arrivals = mixed_arrivals();
    for (text, delay) in [
        ("0", Duration::ZERO),
        ("1ns", ns(1)),
        ("333us", us(333)),
        ("25ms", ms(25)),
        ("100ms", ms(100)),
        ("1.5s", ms(1500)),
    ] {
        let run = run_all_ways(|| pipeline(&[("delay", text)], 1, true), &arrivals);
        let got: Vec<(u64, Duration)> = run.schedule();
        let want: Vec<(u64, Duration)> = arrivals
            .iter()
            .enumerate()
            .map(|(i, a)| (i as u64, a.at + delay))
            .collect();
        assert_eq!(got, want, "delay {text}");
        assert!(run.drops.is_empty());
    }
}

#[test]
fn a_lone_packet_takes_size_times_eight_over_rate() {
    // (rate, size, serialisation computed by hand)
    for (rate, size, expect) in [
        ("10mbit", 1500, us(1200)),
        ("8mbit", 1000, ms(1)),
        ("1gbit", 1500, us(12)),
        ("100kbit", 125, ms(10)),
        ("100mbit", 40, ns(3200)),
    ] {
        let bps: u64 = rate.parse::<Rate>().unwrap().bps();
        assert_eq!(tx_exact(size as u64, bps), expect);
        // far enough apart that each finds the transmitter idle
        let arrivals = periodic(10, us(7), ms(50), size);
        let run = run_all_ways(
            || pipeline(&[("rate", rate), ("queue", "unlimited")], 1, true),
            &arrivals,
        );
        assert_eq!(run.deps.len(), 10);
        for d in &run.deps {
            assert_eq!(
                d.at,
                arrivals[d.index as usize].at + expect,
                "{rate} {size}"
            );
        }
    }
}

#[test]
fn back_to_back_packets_leave_one_serialisation_time_apart() {
    for (rate, size) in [("10mbit", 1500u64), ("8mbit", 1000), ("1gbit", 1250)] {
        let bps = rate.parse::<Rate>().unwrap().bps();
        let tx = tx_exact(size, bps);
        let start = ms(5);
        let run = run_all_ways(
            || pipeline(&[("rate", rate), ("queue", "unlimited")], 1, true),
            &burst(50, start, size as usize),
        );
        let times = run.times();
        assert_eq!(times.len(), 50);
        for (i, d) in run.deps.iter().enumerate() {
            assert_eq!(d.index, i as u64);
            assert_eq!(d.at, start + tx * (i as u32 + 1), "{rate}: packet {i}");
        }
    }
}

#[test]
fn serialisation_that_is_not_a_whole_nanosecond_stays_within_a_nanosecond() {
    // 1000 B at 3 Mbit/s is 8000/3 us = 2666666.67 ns
    let exact_ns = 8_000.0 * 1e9 / 3e6;
    let run = run_all_ways(
        || pipeline(&[("rate", "3mbit"), ("queue", "unlimited")], 1, true),
        &burst(100, Duration::ZERO, 1000),
    );
    let mut prev = Duration::ZERO;
    for (i, d) in run.deps.iter().enumerate() {
        let gap = (d.at - prev).as_nanos() as f64;
        assert!((gap - exact_ns).abs() < 1.0, "gap {gap} ns for packet {i}");
        // each packet's own serialisation is off by less than 1 ns, so after k packets the
        // schedule is off by less than k ns
        let ideal = exact_ns * (i + 1) as f64;
        assert!(
            (d.at.as_nanos() as f64 - ideal).abs() < (i + 1) as f64,
            "packet {i} at {:?}, ideal {ideal} ns",
            d.at
        );
        prev = d.at;
    }
}

#[test]
fn mixed_sizes_and_gaps_follow_the_transmitter() {
    // 10 Mbit/s: 1500 B = 1.2 ms, 40 B = 32 us, 600 B = 480 us
    let arrivals = vec![
        Arrival {
            at: ms(0),
            size: 1500,
        },
        Arrival {
            at: us(500),
            size: 40,
        },
        Arrival {
            at: us(600),
            size: 600,
        },
        Arrival {
            at: ms(5),
            size: 1500,
        },
        Arrival {
            at: us(6200),
            size: 40,
        },
    ];
    let run = run_all_ways(
        || pipeline(&[("rate", "10mbit"), ("queue", "unlimited")], 1, true),
        &arrivals,
    );
    let want = vec![
        (0, us(1200)),
        // waits for packet 0, starts at 1.2 ms
        (1, us(1232)),
        (2, us(1712)),
        // idle link again
        (3, us(6200)),
        // arrives just as packet 3 finishes: starts at once
        (4, us(6232)),
    ];
    assert_eq!(run.schedule(), want);
}

#[test]
fn rate_and_delay_compose() {
    let tx = us(1200);
    for delay in [Duration::ZERO, ms(30), ms(100)] {
        let delay_text = format!("{}ns", delay.as_nanos());
        let arrivals: Vec<Arrival> = burst(5, ms(1), 1500)
            .into_iter()
            .chain(periodic(3, ms(40), ms(10), 1500))
            .collect();
        let run = run_all_ways(
            || {
                pipeline(
                    &[
                        ("rate", "10mbit"),
                        ("queue", "unlimited"),
                        ("delay", &delay_text),
                    ],
                    1,
                    true,
                )
            },
            &arrivals,
        );
        let mut free = Duration::ZERO;
        let want: Vec<(u64, Duration)> = arrivals
            .iter()
            .enumerate()
            .map(|(i, a)| {
                let finish = free.max(a.at) + tx;
                free = finish;
                (i as u64, finish + delay)
            })
            .collect();
        assert_eq!(run.schedule(), want, "delay {delay:?}");
    }
}

/// Checks a burst against a drop-tail queue that admits the first `accepted` indices.
fn assert_tail_drop(run: &Run, accepted: u64, n: u64, at: Duration) {
    let want_dropped = set(accepted..n);
    assert_eq!(run.dropped(DropReason::Queue), want_dropped);
    assert_eq!(run.lost(), want_dropped);
    assert!(
        run.drops
            .iter()
            .all(|d| d.reason == DropReason::Queue && d.t == at)
    );
    assert_eq!(run.counters.dropped_queue, n - accepted);
    assert_eq!(run.counters.dropped_total(), n - accepted);
    assert_eq!(run.counters.packets_out, accepted);
}

#[test]
fn a_packet_limit_drops_the_tail_of_a_burst() {
    // 5 packets wait while packet 0 is on the wire: indices 1..=5 are kept, 6..12 dropped
    let k = 5;
    let n = 12;
    let mut arrivals = burst(n, Duration::ZERO, 1500);
    // at 1.2 ms packet 1 starts serialisation, so one place frees up: the first of two
    // packets arriving then is kept, the second dropped
    arrivals.extend(burst(2, us(1200), 1500));
    // long after the queue drained, a packet is accepted again
    arrivals.push(Arrival {
        at: ms(100),
        size: 1500,
    });
    let run = run_all_ways(
        || pipeline(&[("rate", "10mbit"), ("queue", "5pkt")], 1, true),
        &arrivals,
    );
    let mut dropped = set(k + 1..n as u64);
    dropped.insert(13);
    assert_eq!(run.dropped(DropReason::Queue), dropped);
    assert_eq!(run.lost(), dropped);
    assert_eq!(run.counters.dropped_queue, dropped.len() as u64);
    assert_eq!(
        run.drops.iter().map(|d| (d.index, d.t)).collect::<Vec<_>>(),
        (6..12)
            .map(|i| (i, Duration::ZERO))
            .chain([(13, us(1200))])
            .collect::<Vec<_>>()
    );
    let tx = us(1200);
    let want: Vec<(u64, Duration)> = (0..=5)
        .map(|i| (i, tx * (i as u32 + 1)))
        .chain([(12, tx * 7), (14, ms(100) + tx)])
        .collect();
    assert_eq!(run.schedule(), want);
}

#[test]
fn a_zero_packet_queue_only_takes_packets_that_find_the_link_idle() {
    let mut arrivals = burst(4, Duration::ZERO, 1500);
    arrivals.push(Arrival {
        at: us(1200),
        size: 1500,
    });
    let run = run_all_ways(
        || pipeline(&[("rate", "10mbit"), ("queue", "0pkt")], 1, true),
        &arrivals,
    );
    assert_eq!(run.dropped(DropReason::Queue), set([1, 2, 3]));
    assert_eq!(run.schedule(), vec![(0, us(1200)), (4, us(2400))]);
}

#[test]
fn a_byte_limit_drops_the_tail_of_a_burst() {
    // 8 Mbit/s: 1000 B take 1 ms. 6000 B of queue hold six waiting packets.
    let n = 15;
    let run = run_all_ways(
        || pipeline(&[("rate", "8mbit"), ("queue", "6000b")], 1, true),
        &burst(n, Duration::ZERO, 1000),
    );
    assert_tail_drop(&run, 7, n as u64, Duration::ZERO);
    for d in &run.deps {
        assert_eq!(d.at, ms(d.index + 1));
    }

    // drop-tail decides packet by packet: a packet that does not fit is dropped, a smaller one
    // after it may still fit
    let sizes = [1000, 1000, 1000, 1000, 1000, 1000, 1500, 1000, 1];
    let arrivals: Vec<Arrival> = sizes
        .iter()
        .map(|&size| Arrival {
            at: Duration::ZERO,
            size,
        })
        .collect();
    let run = run_all_ways(
        || pipeline(&[("rate", "8mbit"), ("queue", "6000b")], 1, true),
        &arrivals,
    );
    assert_eq!(run.dropped(DropReason::Queue), set([6, 8]));
}

#[test]
fn a_time_limit_is_the_bytes_the_rate_carries_in_that_time() {
    // 10 ms at 8 Mbit/s = 10000 B: ten 1000 B packets wait behind the one on the wire
    let n = 20;
    let run = run_all_ways(
        || pipeline(&[("rate", "8mbit"), ("queue", "10ms")], 1, true),
        &burst(n, Duration::ZERO, 1000),
    );
    assert_tail_drop(&run, 11, n as u64, Duration::ZERO);

    // without a queue key the default is 100 ms: at 10 Mbit/s that is 125000 B, which holds
    // 83 packets of 1500 B (124500 B) but not 84 (126000 B)
    let n = 100;
    let run = run_all_ways(
        || pipeline(&[("rate", "10mbit")], 1, true),
        &burst(n, Duration::ZERO, 1500),
    );
    assert_tail_drop(&run, 84, n as u64, Duration::ZERO);
}

/// A burst at t=0 whose first packet (1500 B, on the wire) is followed by packets adding up to
/// exactly `limit` waiting bytes, then a 1-byte packet. Returns the arrivals and the index of the
/// 1-byte packet.
fn fill_exactly(limit: u64, first_counts: bool) -> (Vec<Arrival>, u64) {
    let mut sizes = vec![1500usize];
    let mut left = if first_counts { limit - 1500 } else { limit };
    while left > 0 {
        let s = left.min(1500);
        sizes.push(s as usize);
        left -= s;
    }
    sizes.push(1);
    let last = sizes.len() as u64 - 1;
    let arrivals = sizes
        .into_iter()
        .map(|size| Arrival {
            at: Duration::ZERO,
            size,
        })
        .collect();
    (arrivals, last)
}

#[test]
fn time_limits_are_exact_to_the_byte() {
    // bytes = rate * time / 8, exactly, for rates and times whose product is a whole number of
    // bytes (and rounded down otherwise)
    for (rate, time) in [
        ("3mbit", "72ms"),
        ("3mbit", "9ms"),
        ("3mbit", "141ms"),
        ("7009kbit", "72ms"),
        ("10mbit", "100ms"),
        ("1gbit", "1ms"),
        ("24mbit", "50ms"),
        ("1mbit", "333us"),
    ] {
        let bps = rate.parse::<Rate>().unwrap().bps();
        let d = match time.parse::<QueueLimit>().unwrap() {
            QueueLimit::Time(d) => d,
            q => panic!("{q:?}"),
        };
        let limit = (u128::from(bps) * d.as_nanos() / 8_000_000_000) as u64;
        let (arrivals, last) = fill_exactly(limit, false);
        let run = run_all_ways(
            || pipeline(&[("rate", rate), ("queue", time)], 1, true),
            &arrivals,
        );
        assert_eq!(
            run.dropped(DropReason::Queue),
            set([last]),
            "{rate} with {time} of queue ({limit} B)"
        );
    }
}

const TRACE: &str = "1\n2\n2\n5\n";

/// The k-th delivery opportunity of a trace with timestamps `ms` (in ms), repeating with the
/// last timestamp as period.
fn opportunity(ms_list: &[u64], k: usize) -> Duration {
    let period = *ms_list.last().unwrap();
    let cycle = (k / ms_list.len()) as u64;
    ms(cycle * period + ms_list[k % ms_list.len()])
}

#[test]
fn a_saturated_trace_link_delivers_at_each_opportunity() {
    assert_eq!(
        (0..12)
            .map(|k| opportunity(&[1, 2, 2, 5], k))
            .collect::<Vec<_>>(),
        [1, 2, 2, 5, 6, 7, 7, 10, 11, 12, 12, 15].map(ms)
    );
    let n = 41;
    let run = run_all_ways(
        || trace_pipeline(TRACE, &[("queue", "unlimited")], true),
        &burst(n, Duration::ZERO, 1500),
    );
    let want: Vec<(u64, Duration)> = (0..n)
        .map(|k| (k as u64, opportunity(&[1, 2, 2, 5], k)))
        .collect();
    assert_eq!(run.schedule(), want);

    // the same with a delay: each departure is its opportunity plus the delay
    let run = run_all_ways(
        || trace_pipeline(TRACE, &[("queue", "unlimited"), ("delay", "20ms")], true),
        &burst(n, Duration::ZERO, 1500),
    );
    let want: Vec<(u64, Duration)> = (0..n)
        .map(|k| (k as u64, opportunity(&[1, 2, 2, 5], k) + ms(20)))
        .collect();
    assert_eq!(run.schedule(), want);
}

#[test]
fn a_trace_starting_at_zero_repeats_onto_its_period() {
    // "0, 5" with period 5: opportunities at 0, 5, 5, 10, 10, 15, ...
    let run = run_all_ways(
        || trace_pipeline("0\n5\n", &[("queue", "unlimited")], true),
        &burst(7, Duration::ZERO, 1500),
    );
    assert_eq!(run.times(), [0, 5, 5, 10, 10, 15, 15].map(ms).to_vec());
    // arriving at 5 ms finds both opportunities stamped 5 ms
    let run = run_all_ways(
        || trace_pipeline("0\n5\n", &[("queue", "unlimited")], true),
        &burst(3, ms(5), 1500),
    );
    assert_eq!(run.times(), [5, 5, 10].map(ms).to_vec());
}

#[test]
fn small_packets_share_an_opportunity_and_large_ones_span_several() {
    let trace = || trace_pipeline(TRACE, &[("queue", "unlimited")], true);
    // three 500 B packets fill one 1500 B opportunity; a fourth takes the next
    let run = run_all_ways(trace, &burst(4, Duration::ZERO, 500));
    assert_eq!(run.times(), [1, 1, 1, 2].map(ms).to_vec());
    // 1000 + 1000 B: the second is half delivered at 1 ms, finished at 2 ms
    let run = run_all_ways(trace, &burst(2, Duration::ZERO, 1000));
    assert_eq!(run.times(), [1, 2].map(ms).to_vec());
    // 3000 B need two opportunities (1 ms and the first at 2 ms); 1500 B behind take the second
    // at 2 ms
    let arrivals = vec![
        Arrival {
            at: Duration::ZERO,
            size: 3000,
        },
        Arrival {
            at: Duration::ZERO,
            size: 1500,
        },
        Arrival {
            at: Duration::ZERO,
            size: 4500,
        },
    ];
    let run = run_all_ways(trace, &arrivals);
    // 4500 B need the opportunities at 5, 6 and 7 ms
    assert_eq!(run.times(), [2, 2, 7].map(ms).to_vec());
}

#[test]
fn an_opportunity_that_finds_the_queue_empty_is_lost() {
    let trace = || trace_pipeline(TRACE, &[("queue", "unlimited")], true);
    let one = |at: Duration| {
        run_all_ways(trace, &[Arrival { at, size: 1500 }])
            .times()
            .to_vec()
    };
    // arriving at 3 ms: the opportunities at 1 and 2 ms went unused; the next is at 5 ms
    assert_eq!(one(ms(3)), vec![ms(5)]);
    // an opportunity at T serves a packet arriving at T
    assert_eq!(one(ms(5)), vec![ms(5)]);
    assert_eq!(one(ms(2)), vec![ms(2)]);
    assert_eq!(one(Duration::ZERO), vec![ms(1)]);
    // past the end of the first period
    assert_eq!(one(us(5500)), vec![ms(6)]);
    assert_eq!(one(ms(13)), vec![ms(15)]);
    // three arrivals at 2 ms: two opportunities at 2 ms, the third waits for 5 ms
    let run = run_all_ways(trace, &burst(3, ms(2), 1500));
    assert_eq!(run.times(), [2, 2, 5].map(ms).to_vec());
}

#[test]
fn an_opportunity_is_used_once() {
    let trace = || trace_pipeline(TRACE, &[("queue", "unlimited")], true);
    let two = |a: usize, b: usize| {
        let arrivals = vec![
            Arrival {
                at: Duration::ZERO,
                size: a,
            },
            Arrival { at: ms(1), size: b },
        ];
        run_all_ways(trace, &arrivals).schedule()
    };
    // the opportunity at 1 ms carries packet 0 entirely; packet 1, arriving at 1 ms, waits
    assert_eq!(two(1500, 1500), vec![(0, ms(1)), (1, ms(2))]);
    // 500 + 500 B fit in the one opportunity at 1 ms
    assert_eq!(two(500, 500), vec![(0, ms(1)), (1, ms(1))]);
    // 500 + 1500 B: 1000 B of packet 1 go at 1 ms, the rest at 2 ms
    assert_eq!(two(500, 1500), vec![(0, ms(1)), (1, ms(2))]);
    // 500 + 1000 B: exactly one opportunity
    assert_eq!(two(500, 1000), vec![(0, ms(1)), (1, ms(1))]);
}

#[test]
fn an_arrival_at_an_opportunity_finds_what_it_serves_still_queued() {
    // queue of 1 packet: packet 0 waits for the opportunity at 1 ms; packet 1 arrives at 1 ms,
    // before that opportunity serves packet 0, so the queue is full
    let arrivals = vec![
        Arrival {
            at: Duration::ZERO,
            size: 1500,
        },
        Arrival {
            at: ms(1),
            size: 1500,
        },
        Arrival {
            at: us(1001),
            size: 1500,
        },
    ];
    let run = run_all_ways(
        || trace_pipeline(TRACE, &[("queue", "1pkt")], true),
        &arrivals,
    );
    assert_eq!(run.dropped(DropReason::Queue), set([1]));
    assert_eq!(run.schedule(), vec![(0, ms(1)), (2, ms(2))]);
    assert_eq!(
        enqueues(&run),
        vec![(Duration::ZERO, 0, 1500, 1), (us(1001), 2, 1500, 1)]
    );
    // unlimited: packet 1's backlog counts packet 0, which leaves at that very instant
    let run = run_all_ways(
        || trace_pipeline(TRACE, &[("queue", "unlimited")], true),
        &arrivals,
    );
    assert_eq!(
        enqueues(&run),
        vec![
            (Duration::ZERO, 0, 1500, 1),
            (ms(1), 1, 3000, 2),
            (us(1001), 2, 3000, 2)
        ]
    );
    assert_eq!(run.schedule(), vec![(0, ms(1)), (1, ms(2)), (2, ms(2))]);
}

#[test]
fn trace_queue_limits_count_every_undelivered_packet() {
    // a trace queue holds whole packets until their last byte is delivered, so a limit of 5
    // packets keeps indices 0..5 of a burst
    let n = 9;
    let run = run_all_ways(
        || trace_pipeline(TRACE, &[("queue", "5pkt")], true),
        &burst(n, Duration::ZERO, 1500),
    );
    assert_tail_drop(&run, 5, n as u64, Duration::ZERO);
    assert_eq!(
        run.times(),
        (0..5)
            .map(|k| opportunity(&[1, 2, 2, 5], k))
            .collect::<Vec<_>>()
    );

    // time limits use the trace's mean rate: 3 opportunities every 9 ms carry 500 B/ms, so
    // 10 ms of queue are 5000 B
    let (arrivals, last) = fill_exactly(5000, true);
    let run = run_all_ways(
        || trace_pipeline("3\n6\n9\n", &[("queue", "10ms")], true),
        &arrivals,
    );
    assert_eq!(run.dropped(DropReason::Queue), set([last]));
    // 4 opportunities every 5 ms carry 1200 B/ms: 9 ms of queue are 10800 B
    let (arrivals, last) = fill_exactly(10_800, true);
    let run = run_all_ways(
        || trace_pipeline(TRACE, &[("queue", "9ms")], true),
        &arrivals,
    );
    assert_eq!(run.dropped(DropReason::Queue), set([last]));
}

#[test]
fn outages_drop_exactly_what_arrives_inside_them() {
    let gap = us(100);
    let arrivals = periodic(1000, Duration::ZERO, gap, 200);
    let windows = [(ms(20), ms(50)), (ms(70), us(70_500))];
    let run = run_all_ways(
        || {
            pipeline(
                &[
                    ("outage", "20ms-50ms"),
                    ("outage", "70ms-70.5ms"),
                    ("delay", "1ms"),
                ],
                1,
                true,
            )
        },
        &arrivals,
    );
    let want: BTreeSet<u64> = arrivals
        .iter()
        .enumerate()
        .filter(|(_, a)| windows.iter().any(|&(s, e)| s <= a.at && a.at < e))
        .map(|(i, _)| i as u64)
        .collect();
    assert_eq!(want.len(), 300 + 5);
    // the start of an outage is inside it, the end is not
    assert!(want.contains(&200) && !want.contains(&199));
    assert!(want.contains(&499) && !want.contains(&500));
    assert_eq!(run.dropped(DropReason::Outage), want);
    assert_eq!(run.lost(), want);
    assert_eq!(run.counters.dropped_outage, want.len() as u64);
    for d in &run.drops {
        assert_eq!(d.reason, DropReason::Outage);
        assert_eq!(d.t, arrivals[d.index as usize].at);
    }
    for d in &run.deps {
        assert_eq!(d.at, arrivals[d.index as usize].at + ms(1));
    }
}

#[test]
fn listed_drops_remove_exactly_those_indices() {
    let arrivals = periodic(30, Duration::ZERO, ms(1), 100);
    let run = run_all_ways(
        || pipeline(&[("drop-packets", "3,7,10-12,29,40")], 1, true),
        &arrivals,
    );
    let want = set([3, 7, 10, 11, 12, 29]);
    assert_eq!(run.dropped(DropReason::Listed), want);
    assert_eq!(run.lost(), want);
    assert_eq!(run.counters.dropped_listed, 6);
    assert_eq!(run.counters.dropped_total(), 6);
}

/// Packets of these sizes, 1 ms apart from 0.
fn one_a_millisecond(sizes: &[usize]) -> Vec<Arrival> {
    sizes
        .iter()
        .enumerate()
        .map(|(i, &size)| Arrival {
            at: ms(i as u64),
            size,
        })
        .collect()
}

#[test]
fn drops_among_large_packets_count_those_only() {
    // the second and fifth packets of at least 1028 bytes (indices 2 and 7), whatever small
    // packets fall between them; a packet of 1027 bytes is not counted
    let sizes = [1228, 60, 1228, 1027, 1228, 80, 1028, 1228, 90, 1228];
    let arrivals = one_a_millisecond(&sizes);
    let run = run_all_ways(
        || pipeline(&[("drop-large", "1028/1,4")], 1, true),
        &arrivals,
    );
    let want = set([2, 7]);
    assert_eq!(run.dropped(DropReason::Listed), want);
    assert_eq!(run.lost(), want);
    assert_eq!(run.counters.dropped_listed, 2);
}

#[test]
fn an_isolated_loss_drops_its_large_packet_and_all_but_the_kept_for_its_length() {
    // data packets of 1228 bytes with small ones between, 1 ms apart: the fourth large one (5)
    // goes; with one kept, the small one after it (6) passes and 7 to 9 (within 3.5 ms of 6)
    // go; with three kept, 6 to 8 pass and 9 to 11 go
    let sizes = [
        1228, 60, 1228, 1228, 80, 1228, 90, 1228, 60, 1228, 1228, 70, 1228,
    ];
    let arrivals = one_a_millisecond(&sizes);
    for (keep, want) in [(1, set([5, 7, 8, 9])), (3, set([5, 9, 10, 11]))] {
        let key = format!("3/1028/{keep}/3500us");
        let run = run_all_ways(
            || pipeline(&[("isolated-loss", key.as_str())], 1, true),
            &arrivals,
        );
        assert_eq!(run.dropped(DropReason::Listed), want, "{key}");
        assert_eq!(run.lost(), want, "{key}");
        assert_eq!(run.counters.dropped_listed, want.len() as u64, "{key}");
    }
}

#[test]
fn the_mtu_drops_larger_packets_only() {
    let sizes = [1499, 1500, 1501, 9000, 68, 1500, 1501];
    let arrivals = one_a_millisecond(&sizes);
    let run = run_all_ways(|| pipeline(&[("mtu", "1500")], 1, true), &arrivals);
    let want = set([2, 3, 6]);
    assert_eq!(run.dropped(DropReason::Mtu), want);
    assert_eq!(run.lost(), want);
    assert_eq!(run.counters.dropped_mtu, 3);
    for d in &run.drops {
        let ev = run
            .events
            .iter()
            .find(|e| e.index == d.index && matches!(e.kind, quiclab_link::EventKind::Drop { .. }))
            .unwrap();
        assert_eq!(ev.size as usize, sizes[d.index as usize]);
    }
    for d in &run.deps {
        assert_eq!(d.size, sizes[d.index as usize]);
    }
}

#[test]
fn filters_act_in_their_documented_order() {
    // MTU, then outages, then listed drops, then the bottleneck queue
    let arrivals = vec![
        Arrival {
            at: ms(0),
            size: 1200,
        }, // 0: too large and in the outage and listed
        Arrival {
            at: ms(0),
            size: 100,
        }, // 1: in the outage and listed
        Arrival {
            at: ms(20),
            size: 100,
        }, // 2: listed
        Arrival {
            at: ms(20),
            size: 2000,
        }, // 3: too large and listed
        Arrival {
            at: ms(20),
            size: 1000,
        }, // 4: finds the link idle
        Arrival {
            at: ms(20),
            size: 1000,
        }, // 5: queue of 0 packets is full
    ];
    let run = run_all_ways(
        || {
            pipeline(
                &[
                    ("mtu", "1000"),
                    ("outage", "0-10ms"),
                    ("drop-packets", "0-3"),
                    ("rate", "8mbit"),
                    ("queue", "0pkt"),
                ],
                1,
                true,
            )
        },
        &arrivals,
    );
    let reasons: Vec<(u64, DropReason)> = run.drops.iter().map(|d| (d.index, d.reason)).collect();
    assert_eq!(
        reasons,
        vec![
            (0, DropReason::Mtu),
            (1, DropReason::Outage),
            (2, DropReason::Listed),
            (3, DropReason::Mtu),
            (5, DropReason::Queue),
        ]
    );
    assert_eq!(run.schedule(), vec![(4, ms(21))]);
}

#[test]
fn hand_built_pipelines_run_their_stages_in_order() {
    // delay first, then a 10 Mbit/s link with room for 2 waiting packets: the burst reaches the
    // queue at 10 ms, where packets 3 and 4 are dropped
    let make = || {
        let filters: Vec<Box<dyn Filter>> = vec![Box::new(Mtu(1500))];
        let stages: Vec<Box<dyn Stage>> = vec![
            Box::new(DelayLine::new(
                1,
                Direction::Up,
                DelaySpec {
                    delay: ms(10),
                    ..DelaySpec::default()
                },
            )),
            Box::new(RateQueue::new(
                Rate::from_bps(10_000_000),
                QueueLimit::Packets(2),
            )),
        ];
        Pipeline::from_parts(Direction::Up, filters, stages, true)
    };
    let mut arrivals = burst(5, Duration::ZERO, 1500);
    arrivals.push(Arrival {
        at: ms(1),
        size: 1501,
    });
    let run = run_all_ways(make, &arrivals);
    assert_eq!(
        run.drops
            .iter()
            .map(|d| (d.index, d.t, d.reason))
            .collect::<Vec<_>>(),
        vec![
            (5, ms(1), DropReason::Mtu),
            (3, ms(10), DropReason::Queue),
            (4, ms(10), DropReason::Queue),
        ]
    );
    assert_eq!(
        run.schedule(),
        vec![(0, us(11_200)), (1, us(12_400)), (2, us(13_600))]
    );
}

#[test]
fn schedules_do_not_depend_on_when_the_runtime_wakes() {
    // irregular traffic from a fixed linear congruential sequence: gaps of 0 to 2 ms, sizes of
    // 40 to 1500 B
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    let mut next = move || {
        x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
        x >> 33
    };
    let mut t = Duration::ZERO;
    let arrivals: Vec<Arrival> = (0..3000)
        .map(|_| {
            let gap = next() % 4;
            t += us(gap * 500 + next() % 3);
            Arrival {
                at: t,
                size: 40 + (next() % 1461) as usize,
            }
        })
        .collect();
    let configs: [&[(&str, &str)]; 4] = [
        &[("rate", "5mbit"), ("queue", "30kb"), ("delay", "10ms")],
        &[
            ("rate", "5mbit"),
            ("queue", "20pkt"),
            ("delay", "10ms"),
            ("jitter", "3ms"),
            ("duplicate", "5%"),
            ("loss", "2%"),
        ],
        &[
            ("rate", "4mbit"),
            ("queue", "20ms"),
            ("delay", "5ms"),
            ("jitter", "3ms"),
            ("jitter-reorders", "true"),
            ("reorder", "5%"),
            ("loss", "3%"),
            ("loss-burst", "4"),
        ],
        &[
            ("trace", "t"),
            ("queue", "25pkt"),
            ("delay", "7ms"),
            ("duplicate", "3%"),
        ],
    ];
    for cfg in configs {
        let run = run_all_ways(
            || pipeline_dir(cfg, TRACE, Direction::Down, 11, true),
            &arrivals,
        );
        let c = &run.counters;
        assert!(c.packets_out > 1000, "{cfg:?}: {c:?}");
        assert_eq!(
            c.packets_in + c.duplicated,
            c.packets_out + c.dropped_total()
        );
    }
}

#[test]
fn a_direction_that_holds_no_packet_sends_each_as_it_arrives() {
    let arrivals = periodic(400, Duration::ZERO, us(100), 1000);
    // every stage but the holding ones: each packet not dropped leaves at its arrival
    let passing: &[(&str, &str)] = &[
        ("mtu", "1500"),
        ("loss", "5%"),
        ("duplicate", "3%"),
        ("outage", "10ms-20ms"),
        ("drop-packets", "2,4"),
    ];
    assert!(!config(passing, "").holds_packets());
    let run = run_all_ways(|| pipeline(passing, 7, true), &arrivals);
    // the outage alone drops the 100 packets in its 10 ms; loss and the listed drops some more
    assert!(
        run.deps.len() > 200 && run.deps.len() < 300,
        "{}",
        run.deps.len()
    );
    for d in &run.deps {
        assert_eq!(
            d.at, arrivals[d.index as usize].at,
            "packet {} held",
            d.index
        );
    }
    // each holding key alone makes a direction hold packets, and then some packet is held
    for pair in [
        ("rate", "10mbit"),
        ("delay", "1ms"),
        ("jitter", "1ms"),
        ("reorder", "50%"),
    ] {
        let pairs = [pair];
        assert!(config(&pairs, "").holds_packets(), "{pair:?}");
        let run = run_all_ways(|| pipeline(&pairs, 7, true), &arrivals);
        assert!(
            run.deps
                .iter()
                .any(|d| d.at > arrivals[d.index as usize].at),
            "{pair:?} held nothing"
        );
    }
}

#[test]
fn packets_in_flight_are_what_neither_left_nor_was_dropped() {
    // 10 Mbit/s, 20 ms, a 20-packet queue, loss and duplicates: 100 packets of 1000 bytes
    // arrive in a burst at t = 0; each takes 800 us to serialise.
    let mut p = pipeline(
        &[
            ("rate", "10mbit"),
            ("delay", "20ms"),
            ("queue", "20pkt"),
            ("loss", "10%"),
            ("duplicate", "10%"),
        ],
        3,
        false,
    );
    for i in 0..100 {
        p.push(Duration::ZERO, payload(i, 1000));
    }
    let c = p.counters().clone();
    // nothing has left yet: every packet not dropped is inside
    assert_eq!(c.packets_out, 0);
    assert!(c.dropped_total() > 0);
    assert_eq!(c.in_flight(), 100 + c.duplicated - c.dropped_total());
    // at 10 ms the first packet is still in its 20 ms delay: still none out
    while p.poll_transmit(ms(10)).is_some() {}
    assert_eq!(p.counters().in_flight(), c.in_flight());
    // after the queue drained (at most 21 x 800 us) and the delay passed: all out
    let mut out = 0;
    while p.poll_transmit(ms(100)).is_some() {
        out += 1;
    }
    let end = p.counters();
    assert_eq!(out, end.packets_out);
    assert_eq!(end.in_flight(), 0);
    assert_eq!(
        end.packets_in + end.duplicated,
        end.packets_out + end.dropped_total()
    );
}
