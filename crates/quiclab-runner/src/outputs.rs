//! Reading back what a trial's endpoints wrote: request records, the sender's timeline (one
//! timeline from several connections), the tail of a log for failure reasons.

use std::io::BufRead;
use std::path::Path;

use quiclab_external::qlog::{self, Resent};
use quiclab_model::record::{RequestRecord, Transport};

/// The last lines of a log, for failure reasons.
pub fn tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    all[all.len().saturating_sub(lines)..].join(" | ")
}

/// The request records a quiclab client wrote (JSON lines); lines that are not records are
/// skipped.
pub fn read_records(path: &Path) -> Vec<RequestRecord> {
    let Ok(f) = std::fs::File::open(path) else {
        return Vec::new();
    };
    std::io::BufReader::new(f)
        .lines()
        .map_while(Result::ok)
        .filter_map(|l| serde_json::from_str(&l).ok())
        .collect()
}

/// A timeline sample with what the runner uses of it (read leniently: fields a stack does not
/// fill are absent or null).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Sample {
    pub t_ms: f64,
    pub acked_bytes: Option<u64>,
    pub cwnd_bytes: Option<u64>,
    pub bytes_in_flight: Option<u64>,
    pub rtt_ms: Option<f64>,
    pub congestion_event: bool,
    pub retransmits: Option<u64>,
    pub impossible_rtt_samples: Option<u64>,
    /// Where the sender's first lost data was, in bytes of the stream (as the stack reports it).
    pub first_loss_offset: Option<u64>,
    /// Payload bytes sent a second time, as the sender counts them (TCP).
    pub resent_bytes: Option<u64>,
    /// The connection's transport (`None` in a sample that does not say).
    pub transport: Option<Transport>,
    /// The connection's count of signs that flow control held the sender back.
    pub flow_blocked: Option<u64>,
}

/// What the trial's QUIC servers re-sent and declared lost, from every server qlog under the
/// trial's directory (`*.sqlog` whose vantage point is the server: quiclab's own server
/// writes them there, an external stack's under `server/qlog/`), added up over connections; the
/// first offset re-sent is the smallest. `None` without a server qlog (TCP, or a workload that
/// keeps none).
pub fn server_resent(dir: &Path) -> Option<Resent> {
    let mut files = Vec::new();
    let mut dirs = vec![(dir.to_path_buf(), 0)];
    while let Some((d, depth)) = dirs.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let Ok(kind) = e.file_type() else { continue };
            let path = e.path();
            if kind.is_dir() && depth < 2 {
                dirs.push((path, depth + 1));
            } else if kind.is_file() && path.extension().is_some_and(|x| x == "sqlog") {
                files.push(path);
            }
        }
    }
    files
        .iter()
        .filter_map(|p| std::fs::read(p).ok())
        .filter_map(|text| qlog::resent(&text).ok())
        .filter(|r| r.server)
        .reduce(|a, b| Resent {
            server: true,
            bytes: a.bytes + b.bytes,
            first_offset: match (a.first_offset, b.first_offset) {
                (Some(x), Some(y)) => Some(x.min(y)),
                (x, y) => x.or(y),
            },
            packets_lost: a.packets_lost.zip(b.packets_lost).map(|(x, y)| x + y),
        })
}

/// What a trial's sender lost and sent again, each in its own unit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Losses {
    pub packets_lost: Option<u64>,
    pub bytes_resent: Option<u64>,
    pub first_retransmit_offset: Option<u64>,
}

/// The sender's losses: a QUIC server's from its qlogs ([`server_resent`]), the same for every
/// implementation; otherwise the sender's timeline: TCP counts the segments it retransmitted
/// and their bytes itself, and gives the offset of its first loss (failing that, the bytes
/// acknowledged when a retransmission was first seen, within one sampling period of it). The
/// coded transport sends repair symbols, not retransmissions: nothing is known of it here.
pub fn losses(timeline: &[Sample], resent: Option<Resent>) -> Losses {
    if let Some(r) = resent {
        return Losses {
            packets_lost: r.packets_lost,
            bytes_resent: Some(r.bytes),
            first_retransmit_offset: r.first_offset,
        };
    }
    let last = timeline.last();
    if last.is_some_and(|s| s.transport == Some(Transport::Coded)) {
        return Losses::default();
    }
    Losses {
        packets_lost: last.and_then(|s| s.retransmits),
        bytes_resent: last.and_then(|s| s.resent_bytes),
        first_retransmit_offset: timeline
            .iter()
            .find_map(|s| s.first_loss_offset)
            .or_else(|| {
                timeline
                    .iter()
                    .find(|s| s.retransmits.unwrap_or(0) > 0)
                    .and_then(|s| s.acked_bytes)
            }),
    }
}

/// The sender's timeline, times relative to the client's first packet (`start_us`). A trial
/// of several connections gets one timeline: its cumulative counts (acknowledged bytes,
/// retransmissions, impossible RTT samples, bytes re-sent) add up every connection's latest value, and the
/// first loss is the first connection's that had one.
pub fn read_timeline(path: &Path, start_us: u64) -> Vec<Sample> {
    let Ok(f) = std::fs::File::open(path) else {
        return Vec::new();
    };
    let mut raw: Vec<(u64, Sample)> = std::io::BufReader::new(f)
        .lines()
        .map_while(Result::ok)
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(&l).ok())
        .filter_map(|v| {
            let t_us = v["t_us"].as_u64()?;
            Some((
                v["connection"].as_u64().unwrap_or(0),
                Sample {
                    t_ms: (t_us as f64 - start_us as f64) / 1000.0,
                    acked_bytes: v["acked_bytes"].as_u64(),
                    cwnd_bytes: v["cwnd_bytes"].as_u64(),
                    bytes_in_flight: v["bytes_in_flight"].as_u64(),
                    rtt_ms: v["rtt_us"].as_u64().map(|r| r as f64 / 1000.0),
                    congestion_event: v["congestion_event"].as_bool().unwrap_or(false),
                    retransmits: v["retransmits"].as_u64(),
                    impossible_rtt_samples: v["impossible_rtt_samples"].as_u64(),
                    first_loss_offset: v["first_loss_offset"].as_u64(),
                    resent_bytes: v["resent_bytes"].as_u64(),
                    transport: serde_json::from_value(v["transport"].clone()).ok(),
                    flow_blocked: v["flow_blocked"].as_u64(),
                },
            ))
        })
        .collect();
    raw.sort_by(|a, b| a.1.t_ms.total_cmp(&b.1.t_ms));
    if raw.iter().all(|(c, _)| *c == raw[0].0) {
        return raw.into_iter().map(|(_, s)| s).collect();
    }
    // latest cumulative values per connection
    let mut latest: std::collections::BTreeMap<u64, [Option<u64>; 4]> = Default::default();
    let mut first_loss = None;
    raw.into_iter()
        .map(|(conn, mut s)| {
            let slot = latest.entry(conn).or_default();
            for (i, v) in [
                s.acked_bytes,
                s.retransmits,
                s.impossible_rtt_samples,
                s.resent_bytes,
            ]
            .into_iter()
            .enumerate()
            {
                if v.is_some() {
                    slot[i] = v;
                }
            }
            let total = |i: usize| -> Option<u64> {
                let vals: Vec<u64> = latest.values().filter_map(|v| v[i]).collect();
                (!vals.is_empty()).then(|| vals.iter().sum())
            };
            s.acked_bytes = s.acked_bytes.and(total(0));
            s.retransmits = s.retransmits.and(total(1));
            s.impossible_rtt_samples = s.impossible_rtt_samples.and(total(2));
            s.resent_bytes = s.resent_bytes.and(total(3));
            first_loss = first_loss.or(s.first_loss_offset);
            s.first_loss_offset = first_loss;
            s
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_timeline_of_several_connections_adds_their_counts() {
        let dir = std::env::temp_dir().join(format!("quiclab-timeline-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("t.jsonl");
        // connection 0 finishes with 1000 bytes and one retransmission, then connection 1 starts
        let lines = [
            r#"{"connection":0,"t_us":1000,"acked_bytes":400,"retransmits":0}"#,
            r#"{"connection":0,"t_us":3000,"acked_bytes":1000,"retransmits":1,"first_loss_offset":600}"#,
            r#"{"connection":1,"t_us":2000,"acked_bytes":0,"retransmits":0}"#,
            r#"{"connection":1,"t_us":5000,"acked_bytes":700,"retransmits":2,"first_loss_offset":100}"#,
        ];
        std::fs::write(&p, lines.join("\n")).unwrap();
        let t = read_timeline(&p, 1000);
        let acked: Vec<_> = t.iter().map(|s| s.acked_bytes.unwrap()).collect();
        // in time order: 400 (c0), 400 + 0 (c1), 1000 + 0, 1000 + 700
        assert_eq!(acked, [400, 400, 1000, 1700]);
        assert_eq!(t.last().unwrap().retransmits, Some(3));
        assert_eq!(t[0].t_ms, 0.0);
        // the first loss in time is connection 0's
        assert_eq!(t.last().unwrap().first_loss_offset, Some(600));
        // one connection: the samples as written
        std::fs::write(&p, lines[..2].join("\n")).unwrap();
        let one = read_timeline(&p, 0);
        assert_eq!(one[1].acked_bytes, Some(1000));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
