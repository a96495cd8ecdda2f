//! Telemetry trials: what the client sent and what the server received, joined into every
//! unit's latency against the model, and the stalls, each traced to the packet the emulator
//! dropped that caused it.
//!
//! Contract:
//! - A unit's latency is its receive time minus its generation time (both on the host's
//!   CLOCK_MONOTONIC); the model's is the path's one-way delay client to server plus the unit's
//!   wait in its flush ([`quiclab_telemetry`]).
//! - A **stall** is a run of consecutive units, each later than the model by more than the
//!   path's minimum RTT (a repair takes at least a round trip, so no unit gets that late
//!   without a loss or a stalled host). It lasted from when its first unit should have arrived
//!   to when its last one did. Its **cause** is the client-to-server packet the emulator dropped
//!   that carried the stall's first flush: the first client-to-server drop from
//!   [`CAUSE_SLACK_US`] before the flush was sent until one flush interval after (the packet
//!   enters the link after the send call, usually within tens of microseconds, a few
//!   milliseconds on a busy host; the next flush's packet comes an interval later). A stall
//!   with no such drop has no cause: its first flush was held back by something else (a sender
//!   still recovering from an earlier loss, a host delay).
//! - A stall's **host** share is the longest the host held one of the emulator's departures
//!   back (its `late` events, either direction) while the stall lasted, from its first flush's
//!   send to its last unit's arrival. A machine paused for longer than a round trip stalls
//!   every transport without any loss; this tells such stalls apart.
//! - Units that never arrived (lost datagrams) have no latency and end a run.
//! - Reading is lenient about lines it does not know (other records, partial lines), strict
//!   about the schedule: units outside it are ignored.

use std::io::BufRead;
use std::path::Path;

use quiclab_model::campaign::{LossDetection, LostPacket, Stall, TelemetryDetail};
use quiclab_telemetry::{
    ClientRecord, ConnectionEnd, ReceivedUnit, Schedule, SenderSummary, SentFlush, ServerRecord,
    UnitOutcome, outcomes,
};

/// How long before a flush's recorded send time a drop may be and still have carried it: the
/// send time is read just before the send call, so only rounding separates the two.
pub const CAUSE_SLACK_US: u64 = 200;

/// A packet the emulator dropped, on the endpoints' clock.
#[derive(Debug, Clone, PartialEq)]
pub struct Dropped {
    /// CLOCK_MONOTONIC microseconds.
    pub t_us: u64,
    pub up: bool,
    pub index: u64,
    pub size: u32,
    pub reason: String,
}

/// A departure the emulator handed over late (its `late` event), on the endpoints' clock.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HeldBack {
    /// When it was due, CLOCK_MONOTONIC microseconds.
    pub due_us: u64,
    /// How much later it left, microseconds.
    pub by_us: u64,
}

/// What the emulator's event log says about a telemetry run: the packets it dropped and the
/// departures the host held back, each in time order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LinkEvents {
    pub drops: Vec<Dropped>,
    pub held: Vec<HeldBack>,
}

impl LinkEvents {
    /// The longest the host held a departure back while any of it overlapped `[from, to]`
    /// (microseconds; 0 if never beyond the log's threshold).
    pub fn held_us(&self, from: u64, to: u64) -> u64 {
        self.held
            .iter()
            .filter(|h| h.due_us <= to && h.due_us + h.by_us >= from)
            .map(|h| h.by_us)
            .max()
            .unwrap_or(0)
    }
}

/// The drops and late departures in an event log (`events.jsonl`), whose times count from
/// `epoch_ns` on CLOCK_MONOTONIC.
/// The losses the client's QUIC stack declared, from its qlog files in the trial's folder
/// (`*client*.sqlog` / `.qlog`: quiclab's own client and external clients name them so), in file
/// name order; none over TCP or when no file can be read.
pub fn read_client_losses(dir: &Path) -> Vec<LossDetection> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut files: Vec<_> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name().and_then(|n| n.to_str()).is_some_and(|n| {
                n.contains("client") && (n.ends_with(".sqlog") || n.ends_with(".qlog"))
            })
        })
        .collect();
    files.sort();
    files
        .iter()
        .filter_map(|f| std::fs::read(f).ok())
        .filter_map(|text| quiclab_external::qlog::losses(&text).ok())
        .flatten()
        .map(|l| LossDetection {
            sent_ms: l.sent_ms,
            declared_after_ms: l.lost_ms - l.sent_ms,
            repaired_after_ms: l.next_sent_ms.map(|n| n - l.sent_ms),
            trigger: l.trigger,
        })
        .collect()
}

pub fn read_link_events(path: &Path, epoch_ns: u64) -> LinkEvents {
    let mut out = LinkEvents::default();
    let Ok(f) = std::fs::File::open(path) else {
        return out;
    };
    let lines = std::io::BufReader::new(f).lines().map_while(Result::ok);
    // most lines are arrivals and departures: skip them before parsing
    for l in lines.filter(|l| l.contains("\"drop\"") || l.contains("\"late\"")) {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(&l) else {
            continue;
        };
        let (Some(t_ns), Some(event)) = (v["t_ns"].as_u64(), v["event"].as_str()) else {
            continue;
        };
        let t_us = (epoch_ns + t_ns) / 1000;
        match event {
            "drop" => {
                let (Some(dir), Some(index), Some(size)) =
                    (v["dir"].as_str(), v["index"].as_u64(), v["size"].as_u64())
                else {
                    continue;
                };
                out.drops.push(Dropped {
                    t_us,
                    up: dir == "up",
                    index,
                    size: size as u32,
                    reason: v["reason"].as_str().unwrap_or("").to_string(),
                });
            }
            "late" => {
                if let Some(by_ns) = v["by_ns"].as_u64() {
                    out.held.push(HeldBack {
                        due_us: t_us,
                        by_us: by_ns / 1000,
                    });
                }
            }
            _ => {}
        }
    }
    out.drops.sort_by_key(|d| d.t_us);
    out.held.sort_by_key(|h| h.due_us);
    out
}

/// The client's records: its flushes and its summary (`None` if it wrote none).
pub fn read_client(path: &Path) -> (Vec<SentFlush>, Option<SenderSummary>) {
    let (mut flushes, mut summary) = (Vec::new(), None);
    if let Ok(f) = std::fs::File::open(path) {
        for line in std::io::BufReader::new(f).lines().map_while(Result::ok) {
            match serde_json::from_str::<ClientRecord>(&line) {
                Ok(ClientRecord::Flush(fl)) => flushes.push(fl),
                Ok(ClientRecord::Summary(s)) => summary = Some(*s),
                Err(_) => {}
            }
        }
    }
    (flushes, summary)
}

/// The server's log: the units it received and how its connections ended.
pub fn read_server(path: &Path) -> (Vec<ReceivedUnit>, Vec<ConnectionEnd>) {
    let (mut units, mut ends) = (Vec::new(), Vec::new());
    if let Ok(f) = std::fs::File::open(path) {
        for line in std::io::BufReader::new(f).lines().map_while(Result::ok) {
            match serde_json::from_str::<ServerRecord>(&line) {
                Ok(ServerRecord::Unit(u)) => units.push(u),
                Ok(ServerRecord::Connection(c)) => ends.push(c),
                Err(_) => {}
            }
        }
    }
    (units, ends)
}

/// What the path was.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PathModel {
    /// One-way delay client to server, microseconds (the model's).
    pub one_way_us: u64,
    /// Minimum round-trip time, microseconds (the stall threshold).
    pub rtt_us: u64,
    pub loss_up: f64,
    pub loss_down: f64,
}

/// The stalls of a run (see the module's contract). `outcomes` are in unit order.
pub fn stalls(
    schedule: &Schedule,
    outcomes: &[UnitOutcome],
    link: &LinkEvents,
    rtt_us: u64,
) -> Vec<Stall> {
    let drops = &link.drops;
    let late = |o: &UnitOutcome| o.excess_us().is_some_and(|e| e > rtt_us as i64);
    let mut out = Vec::new();
    let mut i = 0;
    while i < outcomes.len() {
        if !late(&outcomes[i]) {
            i += 1;
            continue;
        }
        let start = i;
        while i < outcomes.len()
            && late(&outcomes[i])
            && outcomes[i].index == outcomes[start].index + (i - start) as u64
        {
            i += 1;
        }
        let run = &outcomes[start..i];
        let first = &run[0];
        let due = run
            .iter()
            .map(|o| o.gen_us + o.model_us)
            .min()
            .unwrap_or(first.gen_us);
        let end = run.iter().filter_map(|o| o.recv_us).max().unwrap_or(due);
        let sent = first.send_us.unwrap_or(first.gen_us);
        let interval = schedule.flush_due_us(first.flush + 1) - schedule.flush_due_us(first.flush);
        let from = sent.saturating_sub(CAUSE_SLACK_US);
        let cause = drops
            .iter()
            .find(|d| d.up && d.t_us >= from && d.t_us < sent + interval.max(1));
        let during = drops
            .iter()
            .filter(|d| d.t_us >= from && d.t_us <= end)
            .count();
        let mut flushes: Vec<u64> = run.iter().map(|o| o.flush).collect();
        flushes.dedup();
        let ms = |us: u64| us.saturating_sub(schedule.epoch_us) as f64 / 1000.0;
        out.push(Stall {
            first_unit: first.index,
            units: run.len() as u64,
            flushes: flushes.len() as u64,
            start_ms: ms(first.gen_us),
            duration_ms: end.saturating_sub(due) as f64 / 1000.0,
            cause: cause.map(|d| LostPacket {
                direction: if d.up { "up" } else { "down" }.into(),
                index: d.index,
                size: d.size,
                reason: d.reason.clone(),
                at_ms: d.t_us as f64 / 1000.0 - schedule.epoch_us as f64 / 1000.0,
            }),
            drops: during as u32,
            host_ms: link.held_us(from, end) as f64 / 1000.0,
        });
    }
    out
}

/// A trial's telemetry detail from both ends' records and the emulator's drops.
pub fn detail(
    summary: &SenderSummary,
    flushes: &[SentFlush],
    received: &[ReceivedUnit],
    link: &LinkEvents,
    path: PathModel,
    server_realtime: bool,
) -> (TelemetryDetail, Vec<UnitOutcome>) {
    let schedule = &summary.schedule;
    let out = outcomes(schedule, flushes, received, path.one_way_us);
    let detail = TelemetryDetail {
        mode: summary.mode.name().to_string(),
        units_per_second: schedule.units_per_second,
        flush_units: schedule.flush_units,
        one_way_ms: path.one_way_us as f64 / 1000.0,
        loss_up: path.loss_up,
        loss_down: path.loss_down,
        latency_us: out
            .iter()
            .map(|o| o.latency_us().map(|l| u32::try_from(l).unwrap_or(u32::MAX)))
            .collect(),
        stalls: stalls(schedule, &out, link, path.rtt_us),
        send_late_p99_us: summary.send_late_p99_us,
        send_late_max_us: summary.send_late_max_us,
        realtime: summary.realtime && server_realtime,
        loss_detection: Vec::new(),
    };
    (detail, out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use quiclab_model::record::TransportStats;
    use quiclab_telemetry::Mode;

    fn summary(schedule: Schedule) -> SenderSummary {
        SenderSummary {
            mode: Mode::QuicStream,
            schedule,
            connect_us: schedule.epoch_us - 60_000,
            handshake_done_us: Some(schedule.epoch_us - 5_000),
            end_us: schedule.epoch_us + 2_000_000,
            flushes_sent: schedule.flushes(),
            units_sent: schedule.units,
            send_late_p50_us: 50,
            send_late_p99_us: 120,
            send_late_max_us: 300,
            realtime: true,
            alpn: None,
            group: None,
            transport_stats: TransportStats::default(),
            error: None,
        }
    }

    /// A single ordered stream at 25 ms one way: flush 20's packet is dropped when sent, its
    /// repair arrives 61 ms late and releases it with the five flushes sent meanwhile.
    #[test]
    fn a_stall_spans_the_units_over_one_rtt_late_and_is_traced_to_the_drop() {
        let sch = Schedule::new(10_000_000, 1000, 10, 1000).unwrap();
        let flushes: Vec<SentFlush> = (0..sch.flushes())
            .map(|k| SentFlush {
                flush: k,
                gen_us: sch.gen_us(k * 10),
                units: 10,
                send_us: sch.flush_due_us(k) + 40,
                stream: Some(2),
            })
            .collect();
        let repair_us = sch.flush_due_us(20) + 25_000 + 61_000;
        let mut received = Vec::new();
        for i in 0..sch.units {
            let k = sch.flush_of(i);
            let on_time = sch.flush_due_us(k) + 25_300;
            received.push(ReceivedUnit {
                connection: 0,
                gen_us: sch.gen_us(i),
                recv_us: on_time.max(if k >= 20 { repair_us } else { 0 }),
                stream: Some(2),
                datagram: None,
            });
        }
        let drops = vec![
            // an acknowledgement lost long before: not the cause
            Dropped {
                t_us: sch.flush_due_us(3),
                up: false,
                index: 5,
                size: 60,
                reason: "random".into(),
            },
            Dropped {
                t_us: flushes[20].send_us + 30,
                up: true,
                index: 23,
                size: 131,
                reason: "random".into(),
            },
        ];
        let path = PathModel {
            one_way_us: 25_000,
            rtt_us: 50_000,
            loss_up: 0.02,
            loss_down: 0.02,
        };
        let link = LinkEvents {
            drops: drops.clone(),
            held: vec![],
        };
        let (d, out) = detail(&summary(sch), &flushes, &received, &link, path, true);
        assert_eq!(out.len(), 1000);
        assert_eq!(d.latency_us.len(), 1000);
        assert_eq!(d.latency_us[0], Some(34_300));
        assert_eq!(d.mode, "quic-stream");
        // flush 20 waits 61 ms over the model, flush 21 51 ms; flush 22's 41 ms is under an RTT
        assert_eq!(d.stalls.len(), 1, "{:?}", d.stalls);
        let s = &d.stalls[0];
        assert_eq!((s.first_unit, s.units, s.flushes), (200, 20, 2));
        assert!((s.start_ms - 200.0).abs() < 1e-9);
        assert!((s.duration_ms - 61.0).abs() < 1e-9, "{s:?}");
        let cause = s.cause.as_ref().unwrap();
        assert_eq!((cause.direction.as_str(), cause.index), ("up", 23));
        assert!((cause.at_ms - (209.0 + 0.07)).abs() < 1e-9, "{cause:?}");
        assert_eq!(s.drops, 1);
        // the model of the report agrees with the stack's
        for i in [0, 5, 9, 10, 999] {
            assert!((d.model_ms(i) - out[i].model_us as f64 / 1000.0).abs() < 1e-9);
        }

        // the same delay without a drop near the flush: a stall without a cause
        let mut link = LinkEvents {
            drops: drops[..1].to_vec(),
            held: vec![],
        };
        let (d, _) = detail(&summary(sch), &flushes, &received, &link, path, true);
        assert_eq!(d.stalls[0].cause, None);
        assert_eq!(d.stalls[0].drops, 0);
        assert_eq!(d.stalls[0].host_ms, 0.0);

        // ... held back by the host instead: departures due while flush 20 was in flight left
        // 58 ms late; a late departure long before the stall is not counted
        link.held = vec![
            HeldBack {
                due_us: sch.flush_due_us(2),
                by_us: 90_000,
            },
            HeldBack {
                due_us: flushes[20].send_us + 20_000,
                by_us: 58_000,
            },
            HeldBack {
                due_us: flushes[20].send_us + 21_000,
                by_us: 57_000,
            },
        ];
        let (d, _) = detail(&summary(sch), &flushes, &received, &link, path, true);
        assert_eq!(d.stalls[0].cause, None);
        assert!(
            (d.stalls[0].host_ms - 58.0).abs() < 1e-9,
            "{:?}",
            d.stalls[0]
        );
    }

    #[test]
    fn lost_units_end_a_run_and_have_no_latency() {
        let sch = Schedule::new(0, 1000, 10, 30).unwrap();
        let flushes: Vec<SentFlush> = (0..3)
            .map(|k| SentFlush {
                flush: k,
                gen_us: sch.gen_us(k * 10),
                units: 10,
                send_us: sch.flush_due_us(k),
                stream: None,
            })
            .collect();
        // flush 1 lost, flushes 0 and 2 very late
        let received: Vec<ReceivedUnit> = (0..10)
            .chain(20..30)
            .map(|i| ReceivedUnit {
                connection: 0,
                gen_us: sch.gen_us(i),
                recv_us: sch.flush_due_us(sch.flush_of(i)) + 200_000,
                stream: None,
                datagram: Some(i / 10),
            })
            .collect();
        let path = PathModel {
            one_way_us: 25_000,
            rtt_us: 50_000,
            loss_up: 0.0,
            loss_down: 0.0,
        };
        let (d, _) = detail(
            &summary(sch),
            &flushes,
            &received,
            &LinkEvents::default(),
            path,
            false,
        );
        assert!(!d.realtime);
        assert!(d.latency_us[10..20].iter().all(Option::is_none));
        let runs: Vec<(u64, u64)> = d.stalls.iter().map(|s| (s.first_unit, s.units)).collect();
        assert_eq!(runs, [(0, 10), (20, 10)]);
    }
}
