//! A sending side's timeline from a qlog file (JSON-SEQ, the draft schema 0.3 that ngtcp2,
//! quiche and others write, or 0.4, whose transport events tquic names `quic:`): what every
//! report section reads from quiclab's own QUIC server, rebuilt from the implementation's own
//! log.
//!
//! Contract:
//! - Input: the records of one connection, each a JSON object after an RS (0x1E) byte; the
//!   first is the header (`qlog_format`, `trace.common_fields.time_format` "relative"); events
//!   carry `time` in milliseconds from the connection's start. A truncated last record (a
//!   process killed mid-write) is ignored.
//! - `acked_bytes` counts the STREAM payload of acknowledged packets, each stream byte once
//!   (what the peer's application got, HTTP/3 framing included); `bytes_in_flight`, `cwnd_bytes`
//!   and the RTT (`latest_rtt`) are the implementation's own values from `recovery:metrics_updated`;
//!   `retransmits` counts `recovery:packet_lost` events.
//! - A sample is emitted per distinct event time that changed something (the log's resolution
//!   is the implementation's: ngtcp2 writes whole milliseconds), marked a congestion event when
//!   the congestion window shrank.
//! - An RTT sample is one acknowledgement's `latest_rtt` (logged with the acknowledgement, or a
//!   value other than the last); it is impossible when it is below the
//!   path's minimum RTT by more than the log's resolution (1 ms).
//! - Times become CLOCK_MONOTONIC microseconds by adding the connection's start (`anchor_us`),
//!   which the caller knows (when the file was created).

use std::collections::BTreeMap;

use quiclab_model::record::{TimelineSample, Transport};
use serde_json::Value;

/// What a qlog file could not give.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QlogError {
    #[error("no qlog header (the first record must name qlog_format JSON-SEQ)")]
    NoHeader,
    #[error("time_format {0:?}: only \"relative\" is read")]
    TimeFormat(String),
}

/// Byte ranges acknowledged on one stream, merged.
#[derive(Default)]
struct Ranges(BTreeMap<u64, u64>);

impl Ranges {
    /// Adds `[start, end)`; the bytes not already in.
    fn add(&mut self, start: u64, end: u64) -> u64 {
        if end <= start {
            return 0;
        }
        let (mut s, mut e) = (start, end);
        let mut covered = 0;
        let overlapping: Vec<(u64, u64)> = self
            .0
            .range(..=end)
            .filter(|(a, b)| **b >= start && **a <= end)
            .map(|(a, b)| (*a, *b))
            .collect();
        for (a, b) in overlapping {
            covered += b.min(end).saturating_sub(a.max(start));
            s = s.min(a);
            e = e.max(b);
            self.0.remove(&a);
        }
        self.0.insert(s, e);
        (end - start) - covered
    }
}

/// Stream id, first byte, end (exclusive).
type StreamRange = (u64, u64, u64);

/// The state the log describes, as it goes.
#[derive(Default)]
struct State {
    cwnd: Option<u64>,
    in_flight: Option<u64>,
    rtt_ms: Option<f64>,
    acked: u64,
    lost: u64,
    impossible: u64,
    /// DATA_BLOCKED and STREAM_DATA_BLOCKED frames sent.
    blocked: u64,
}

/// An event's name, the transport's packets by the draft 0.3 schema's names: the draft-07
/// schema (qlog 0.4, as tquic writes) calls them `quic:packet_sent` and `quic:packet_received`.
fn name(ev: &Value) -> Option<&str> {
    Some(match ev["name"].as_str()? {
        "quic:packet_sent" => "transport:packet_sent",
        "quic:packet_received" => "transport:packet_received",
        other => other,
    })
}

/// The events of a JSON-SEQ qlog file after its header, checked (see the module's contract).
fn events(text: &[u8]) -> Result<impl Iterator<Item = Value> + '_, QlogError> {
    Ok(header_and_events(text)?.1)
}

/// The header of a JSON-SEQ qlog file, checked, and its events.
fn header_and_events(text: &[u8]) -> Result<(Value, impl Iterator<Item = Value> + '_), QlogError> {
    let mut records = text
        .split(|b| *b == 0x1e)
        .filter(|r| !r.iter().all(u8::is_ascii_whitespace))
        .filter_map(|r| serde_json::from_slice::<Value>(r).ok());
    let header = records.next().ok_or(QlogError::NoHeader)?;
    if header["qlog_format"] != "JSON-SEQ" {
        return Err(QlogError::NoHeader);
    }
    let format = &header["trace"]["common_fields"]["time_format"];
    if let Some(f) = format.as_str()
        && f != "relative"
    {
        return Err(QlogError::TimeFormat(f.to_string()));
    }
    Ok((header, records))
}

/// What one connection's sender re-sent, from its qlog's `packet_sent` STREAM frames, and the
/// losses it declared: the same account for every implementation whose qlog lists the frames
/// of the packets it sends (quinn's, ngtcp2's, quiche's and quic-go's do).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Resent {
    /// The log's vantage point is the server (`trace.vantage_point.type`).
    pub server: bool,
    /// STREAM bytes sent at an offset of their stream already sent once (every stream).
    pub bytes: u64,
    /// The stream offset (HTTP/3 framing included) of the first byte re-sent on a
    /// bidirectional stream (a request's or its response's); `None` if none was.
    pub first_offset: Option<u64>,
    /// Packets declared lost (`recovery:packet_lost`). `None` when the log shows data re-sent
    /// but no loss declared: the implementation does not log its losses (quiche 0.24), and a
    /// 0 would be a count it never gave.
    pub packets_lost: Option<u64>,
}

/// The [`Resent`] account of one connection's qlog.
pub fn resent(text: &[u8]) -> Result<Resent, QlogError> {
    let (header, records) = header_and_events(text)?;
    let mut out = Resent {
        server: header["trace"]["vantage_point"]["type"] == "server",
        ..Resent::default()
    };
    let mut sent: BTreeMap<u64, Ranges> = BTreeMap::new();
    let mut lost = 0;
    for ev in records {
        match name(&ev) {
            Some("transport:packet_sent") => {
                for f in frames(&ev["data"]).filter(|f| f["frame_type"] == "stream") {
                    let (Some(id), Some(len)) = (f["stream_id"].as_u64(), f["length"].as_u64())
                    else {
                        continue;
                    };
                    let off = f["offset"].as_u64().unwrap_or(0);
                    let again = len - sent.entry(id).or_default().add(off, off + len);
                    out.bytes += again;
                    // bit 1 of a stream id marks a unidirectional stream (RFC 9000 s2.1)
                    if again > 0 && id & 2 == 0 && out.first_offset.is_none() {
                        out.first_offset = Some(off);
                    }
                }
            }
            Some("recovery:packet_lost") => lost += 1,
            _ => {}
        }
    }
    out.packets_lost = (lost > 0 || out.bytes == 0).then_some(lost);
    Ok(out)
}

/// A packet the sender declared lost (`recovery:packet_lost`), with when it was sent.
#[derive(Debug, Clone, PartialEq)]
pub struct Loss {
    /// Packet number space (`packet_type`) and number.
    pub space: String,
    pub number: u64,
    /// When it was sent and when it was declared lost, ms from the connection's start.
    pub sent_ms: f64,
    pub lost_ms: f64,
    /// When the sender next sent a packet (its repair goes first), ms; `None` if it sent none.
    pub next_sent_ms: Option<f64>,
    /// What declared it lost, as the implementation says (e.g. `time_threshold`,
    /// `reordering_threshold`, `pto_expired`).
    pub trigger: Option<String>,
}

/// Every packet one connection's sender declared lost, in the order it did (a loss of a packet
/// the log never showed sent is left out: the log began later or was cut).
pub fn losses(text: &[u8]) -> Result<Vec<Loss>, QlogError> {
    let mut sent: BTreeMap<(String, u64), f64> = BTreeMap::new();
    let mut out: Vec<Loss> = Vec::new();
    // losses still waiting for the next packet sent
    let mut waiting = 0;
    for ev in events(text)? {
        let (Some(time), Some(name)) = (ev["time"].as_f64(), name(&ev)) else {
            continue;
        };
        let header = &ev["data"]["header"];
        let (Some(space), Some(number)) = (
            header["packet_type"].as_str(),
            header["packet_number"].as_u64(),
        ) else {
            continue;
        };
        match name {
            "transport:packet_sent" => {
                for l in &mut out[waiting..] {
                    l.next_sent_ms = Some(time);
                }
                waiting = out.len();
                sent.insert((space.to_string(), number), time);
            }
            "recovery:packet_lost" => {
                if let Some(&sent_ms) = sent.get(&(space.to_string(), number)) {
                    out.push(Loss {
                        space: space.to_string(),
                        number,
                        sent_ms,
                        lost_ms: time,
                        next_sent_ms: None,
                        trigger: ev["data"]["trigger"].as_str().map(str::to_string),
                    });
                }
            }
            _ => {}
        }
    }
    Ok(out)
}

/// The sender's timeline of one connection.
pub fn timeline(
    text: &[u8],
    anchor_us: u64,
    connection: u32,
    path_min_rtt_us: Option<u64>,
) -> Result<Vec<TimelineSample>, QlogError> {
    let records = events(text)?;
    // per packet number space: packet number -> the stream ranges it carried
    let mut sent: BTreeMap<(String, u64), Vec<StreamRange>> = BTreeMap::new();
    let mut acked: BTreeMap<u64, Ranges> = BTreeMap::new();
    let mut st = State::default();
    let mut out: Vec<TimelineSample> = Vec::new();
    let mut last_ack_at: Option<f64> = None;
    for ev in records {
        let (Some(time), Some(name)) = (ev["time"].as_f64(), name(&ev)) else {
            continue;
        };
        let data = &ev["data"];
        let space = data["header"]["packet_type"]
            .as_str()
            .map(|t| if t == "0RTT" { "1RTT" } else { t }.to_string());
        let before = (st.cwnd, st.in_flight, st.acked, st.lost, st.blocked);
        let mut congestion = false;
        match name {
            "transport:packet_sent" => {
                let (Some(space), Some(pn)) = (space, data["header"]["packet_number"].as_u64())
                else {
                    continue;
                };
                let streams: Vec<StreamRange> = frames(data)
                    .filter(|f| f["frame_type"] == "stream")
                    .filter_map(|f| {
                        let id = f["stream_id"].as_u64()?;
                        let off = f["offset"].as_u64().unwrap_or(0);
                        Some((id, off, off + f["length"].as_u64().unwrap_or(0)))
                    })
                    .collect();
                if !streams.is_empty() {
                    sent.insert((space, pn), streams);
                }
                st.blocked += blocked_frames(data);
            }
            "transport:packet_received" => {
                let Some(space) = space else { continue };
                for f in frames(data).filter(|f| f["frame_type"] == "ack") {
                    last_ack_at = Some(time);
                    for range in f["acked_ranges"].as_array().into_iter().flatten() {
                        let lo = range[0].as_u64();
                        let hi = range.get(1).and_then(Value::as_u64).or(lo);
                        let (Some(lo), Some(hi)) = (lo, hi) else {
                            continue;
                        };
                        let keys: Vec<(String, u64)> = sent
                            .range((space.clone(), lo)..=(space.clone(), hi))
                            .map(|(k, _)| k.clone())
                            .collect();
                        for k in keys {
                            for (id, a, b) in sent.remove(&k).unwrap_or_default() {
                                st.acked += acked.entry(id).or_default().add(a, b);
                            }
                        }
                    }
                }
            }
            "recovery:metrics_updated" => {
                if let Some(c) = data["congestion_window"].as_u64() {
                    congestion = st.cwnd.is_some_and(|old| c < old);
                    st.cwnd = Some(c);
                }
                if let Some(f) = data["bytes_in_flight"].as_u64() {
                    st.in_flight = Some(f);
                }
                if let Some(r) = data["latest_rtt"].as_f64().filter(|r| *r > 0.0) {
                    // A new sample follows an acknowledgement at the same time (ngtcp2,
                    // quiche), or is logged just before it (quic-go): a value other than the
                    // last one is new too. Implementations repeat the last sample in later
                    // updates; those are not counted again.
                    if last_ack_at == Some(time) || st.rtt_ms != Some(r) {
                        last_ack_at = None;
                        if let Some(floor) = path_min_rtt_us
                            && (r + 1.0) * 1000.0 < floor as f64
                        {
                            st.impossible += 1;
                        }
                    }
                    st.rtt_ms = Some(r);
                }
            }
            "recovery:packet_lost" => st.lost += 1,
            _ => continue,
        }
        if before == (st.cwnd, st.in_flight, st.acked, st.lost, st.blocked) && !congestion {
            continue;
        }
        let sample = TimelineSample {
            transport: Transport::Quic,
            connection,
            t_us: anchor_us + (time * 1000.0) as u64,
            cwnd_bytes: st.cwnd,
            bytes_in_flight: st.in_flight,
            acked_bytes: Some(st.acked),
            rtt_us: st.rtt_ms.map(|r| (r * 1000.0) as u64),
            rate_bps: None,
            congestion_event: congestion,
            retransmits: Some(st.lost),
            impossible_rtt_samples: path_min_rtt_us.map(|_| st.impossible),
            busy_rtt_samples: None,
            first_loss_offset: None,
            resent_bytes: None,
            udp_payload: None,
            flow_blocked: Some(st.blocked),
        };
        // one sample per time unless this one is a congestion event
        match out.last_mut() {
            Some(prev) if prev.t_us == sample.t_us && !prev.congestion_event => *prev = sample,
            _ => out.push(sample),
        }
    }
    Ok(out)
}

/// What one connection's qlog gives the sender's timeline, item by item (the module's
/// contract; `quiclab external check-qlog`).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct QlogCheck {
    /// `trace.vantage_point.type` of the header.
    pub vantage_point: Option<String>,
    /// Events after the header with a `time` and a `name`.
    pub events: u64,
    /// The last event's `time`, ms from the connection's start.
    pub last_ms: Option<f64>,
    /// `packet_sent` events carrying a STREAM frame.
    pub stream_packets_sent: u64,
    /// ACK frames in `packet_received` events.
    pub acks_received: u64,
    /// STREAM bytes those ACK frames acknowledge (the timeline's last `acked_bytes`).
    pub acked_bytes: u64,
    /// `recovery:metrics_updated` events with a `congestion_window`, with a `latest_rtt`.
    pub cwnd_updates: u64,
    pub rtt_updates: u64,
    /// `recovery:packet_lost` events, and DATA_BLOCKED / STREAM_DATA_BLOCKED frames sent.
    pub losses: u64,
    pub blocked_frames: u64,
}

impl QlogCheck {
    /// What the file lacks that a sender's timeline needs, each in words: what is missing and
    /// what it costs. Losses and flow-control frames may rightly be absent; they are not asked.
    pub fn missing(&self) -> Vec<String> {
        let mut out = Vec::new();
        if self.vantage_point.as_deref() != Some("server") {
            out.push(format!(
                "the header's trace.vantage_point.type is {}, not \"server\": quiclab reads a \
                 server's qlog as the sender's record (and its re-sent bytes from a server's only)",
                self.vantage_point
                    .as_deref()
                    .map_or("absent".to_string(), |v| format!("{v:?}"))
            ));
        }
        if self.events == 0 {
            out.push("no event with a time and a name after the header".into());
            return out;
        }
        if self.stream_packets_sent == 0 {
            out.push(
                "no transport:packet_sent event with a STREAM frame (data.frames[] with \
                 frame_type \"stream\", stream_id, offset, length, and data.header's \
                 packet_type and packet_number): nothing sent can be acknowledged"
                    .into(),
            );
        }
        if self.acks_received == 0 {
            out.push(
                "no transport:packet_received event with an ACK frame (frame_type \"ack\", \
                 acked_ranges): acked_bytes stays 0 and the transfer looks stalled"
                    .into(),
            );
        } else if self.stream_packets_sent > 0 && self.acked_bytes == 0 {
            out.push(
                "its ACK frames acknowledge none of the packets that carried STREAM frames \
                 (acked_ranges must name the packet_number of packet_sent events of the same \
                 packet_type)"
                    .into(),
            );
        }
        if self.cwnd_updates == 0 {
            out.push(
                "no recovery:metrics_updated event with a congestion_window: the timeline has \
                 no window (\"cwnd\" of [records] server-qlog cannot be offered)"
                    .into(),
            );
        }
        if self.rtt_updates == 0 {
            out.push(
                "no recovery:metrics_updated event with a latest_rtt: the timeline has no RTT \
                 (\"rtt\" of [records] server-qlog cannot be offered)"
                    .into(),
            );
        }
        out
    }
}

/// Checks one connection's qlog against the module's contract: [`QlogCheck`].
pub fn check(text: &[u8]) -> Result<QlogCheck, QlogError> {
    let (header, records) = header_and_events(text)?;
    let mut c = QlogCheck {
        vantage_point: header["trace"]["vantage_point"]["type"]
            .as_str()
            .map(str::to_string),
        ..QlogCheck::default()
    };
    for ev in records {
        let (Some(time), Some(name)) = (ev["time"].as_f64(), name(&ev)) else {
            continue;
        };
        c.events += 1;
        c.last_ms = Some(c.last_ms.map_or(time, |t: f64| t.max(time)));
        let data = &ev["data"];
        match name {
            "transport:packet_sent" => {
                if frames(data).any(|f| f["frame_type"] == "stream") {
                    c.stream_packets_sent += 1;
                }
                c.blocked_frames += blocked_frames(data);
            }
            "transport:packet_received" => {
                c.acks_received += frames(data).filter(|f| f["frame_type"] == "ack").count() as u64;
            }
            "recovery:metrics_updated" => {
                c.cwnd_updates += u64::from(data["congestion_window"].is_u64());
                c.rtt_updates += u64::from(data["latest_rtt"].is_number());
            }
            "recovery:packet_lost" => c.losses += 1,
            _ => {}
        }
    }
    c.acked_bytes = timeline(text, 0, 0, None)?
        .last()
        .and_then(|s| s.acked_bytes)
        .unwrap_or(0);
    Ok(c)
}

/// DATA_BLOCKED and STREAM_DATA_BLOCKED frames in one packet's frames.
fn blocked_frames(data: &Value) -> u64 {
    frames(data)
        .filter(|f| f["frame_type"] == "data_blocked" || f["frame_type"] == "stream_data_blocked")
        .count() as u64
}

fn frames(data: &Value) -> impl Iterator<Item = &Value> {
    data["frames"].as_array().into_iter().flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seq(records: &[&str]) -> Vec<u8> {
        let mut out = Vec::new();
        for r in records {
            out.push(0x1e);
            out.extend_from_slice(r.as_bytes());
            out.push(b'\n');
        }
        out
    }

    const HEADER: &str = r#"{"qlog_format":"JSON-SEQ","qlog_version":"0.3","trace":{"vantage_point":{"type":"server"},"common_fields":{"time_format":"relative","reference_time":0}}}"#;

    fn sent(t: u64, pn: u64, off: u64, len: u64) -> String {
        format!(
            r#"{{"time":{t},"name":"transport:packet_sent","data":{{"frames":[{{"frame_type":"stream","stream_id":0,"offset":{off},"length":{len}}}],"header":{{"packet_type":"1RTT","packet_number":{pn}}},"raw":{{"length":{}}}}}}}"#,
            len + 40
        )
    }

    fn ack(t: u64, ranges: &str) -> String {
        format!(
            r#"{{"time":{t},"name":"transport:packet_received","data":{{"frames":[{{"frame_type":"ack","acked_ranges":{ranges}}}],"header":{{"packet_type":"1RTT","packet_number":9}}}}}}"#
        )
    }

    fn metrics(t: u64, cwnd: u64, flight: u64, rtt: u64) -> String {
        format!(
            r#"{{"time":{t},"name":"recovery:metrics_updated","data":{{"latest_rtt":{rtt},"congestion_window":{cwnd},"bytes_in_flight":{flight}}}}}"#
        )
    }

    #[test]
    fn a_whole_qlog_lacks_nothing_and_one_without_acknowledgements_says_so() {
        let whole = seq(&[
            HEADER,
            &sent(0, 0, 0, 1000),
            &metrics(1, 14_000, 1000, 0),
            &ack(50, "[[0]]"),
            &metrics(50, 16_000, 0, 50),
        ]);
        let c = check(&whole).unwrap();
        assert_eq!(c.vantage_point.as_deref(), Some("server"));
        assert_eq!(
            (c.events, c.stream_packets_sent, c.acks_received),
            (4, 1, 1)
        );
        assert_eq!((c.acked_bytes, c.cwnd_updates, c.rtt_updates), (1000, 2, 2));
        assert_eq!(c.last_ms, Some(50.0));
        assert!(c.missing().is_empty(), "{:?}", c.missing());
        // aioquic's first driver: packets sent and metrics, no acknowledgement logged
        let hollow = seq(&[HEADER, &sent(0, 0, 0, 1000), &metrics(1, 14_000, 1000, 50)]);
        let m = check(&hollow).unwrap().missing();
        assert_eq!(m.len(), 1, "{m:?}");
        assert!(
            m[0].contains("no transport:packet_received event with an ACK frame"),
            "{m:?}"
        );
        // acknowledgements of packets that carried no STREAM frame the log showed
        let elsewhere = seq(&[
            HEADER,
            &sent(0, 0, 0, 1000),
            &ack(50, "[[7]]"),
            &metrics(50, 1, 0, 50),
        ]);
        let m = check(&elsewhere).unwrap().missing();
        assert!(m.len() == 1 && m[0].contains("acknowledge none"), "{m:?}");
        // a client's log, with only a header: every item named
        let client = seq(&[&HEADER.replace("\"server\"", "\"client\"")]);
        let m = check(&client).unwrap().missing();
        assert_eq!(m.len(), 2, "{m:?}");
        assert!(
            m[0].contains("\"client\", not \"server\"") && m[1].contains("no event"),
            "{m:?}"
        );
        assert_eq!(check(b"not json"), Err(QlogError::NoHeader));
    }

    #[test]
    fn acknowledged_stream_bytes_count_once_and_a_shrinking_window_is_an_event() {
        let text = seq(&[
            HEADER,
            &sent(0, 0, 0, 1000),
            &sent(0, 1, 1000, 1000),
            &sent(1, 2, 2000, 1000),
            &metrics(1, 14_000, 3000, 0),
            &ack(50, "[[0,1]]"),
            &metrics(50, 16_000, 1000, 50),
            // packet 2 lost, its bytes sent again in packet 3
            r#"{"time":60,"name":"recovery:packet_lost","data":{"header":{"packet_type":"1RTT","packet_number":2}}}"#,
            &metrics(60, 8_000, 0, 50),
            &sent(61, 3, 2000, 1000),
            &ack(111, "[[3]]"),
            &metrics(111, 8_500, 0, 50),
            // a late acknowledgement of the lost packet adds nothing new
            &ack(112, "[[2]]"),
            // a truncated record at the end is ignored
            "{\"time\":113,\"name\":\"recov",
        ]);
        let t = timeline(&text, 1_000_000, 3, Some(49_000)).unwrap();
        let last = t.last().unwrap();
        assert_eq!(last.acked_bytes, Some(3000));
        assert_eq!(last.retransmits, Some(1));
        assert_eq!(last.cwnd_bytes, Some(8_500));
        assert_eq!(last.connection, 3);
        assert_eq!(last.impossible_rtt_samples, Some(0));
        let events: Vec<u64> = t
            .iter()
            .filter(|s| s.congestion_event)
            .map(|s| s.t_us)
            .collect();
        assert_eq!(events, vec![1_060_000]);
        // one sample per millisecond at most (but the event): times only grow
        assert!(
            t.windows(2)
                .all(|w| w[0].t_us < w[1].t_us || w[1].congestion_event)
        );
        let at50 = t.iter().find(|s| s.t_us == 1_050_000).unwrap();
        assert_eq!((at50.acked_bytes, at50.rtt_us), (Some(2000), Some(50_000)));
        // the draft-07 schema's names (qlog 0.4, tquic's; no time_format: relative) read alike
        let header_04 = r#"{"qlog_format":"JSON-SEQ","qlog_version":"0.4","trace":{"vantage_point":{"type":"server"}}}"#;
        let text_04 = String::from_utf8(text.clone())
            .unwrap()
            .replacen(HEADER, header_04, 1)
            .replace("transport:packet_", "quic:packet_");
        assert!(text_04.contains("quic:packet_sent") && !text_04.contains("transport:"));
        assert_eq!(
            timeline(text_04.as_bytes(), 1_000_000, 3, Some(49_000)).unwrap(),
            t
        );
        let r = resent(text_04.as_bytes()).unwrap();
        assert_eq!(r, resent(&text).unwrap());
        assert_eq!(r.bytes, 1000);
    }

    #[test]
    fn an_rtt_sample_below_the_path_floor_is_impossible() {
        // the impossible samples counted in two packets' log (samples as `metrics`) above a floor
        let impossible = |events: &[String], floor_us: u64| {
            let mut records = vec![HEADER.to_string(), sent(0, 0, 0, 100), sent(0, 1, 100, 100)];
            records.extend(events.iter().cloned());
            let records: Vec<&str> = records.iter().map(String::as_str).collect();
            let t = timeline(&seq(&records), 0, 0, Some(floor_us)).unwrap();
            t.last().unwrap().impossible_rtt_samples
        };
        // 20 ms is impossible on a 50 ms path; 49 ms is within the log's millisecond
        let ngtcp2 = [
            ack(20, "[[0]]"),
            metrics(20, 14_000, 100, 20),
            ack(70, "[[1]]"),
            metrics(70, 14_000, 0, 49),
        ];
        assert_eq!(impossible(&ngtcp2, 50_000), Some(1));
        // quic-go logs the sample just before the acknowledgement, and repeats it in later
        // updates: counted once
        let quic_go = [
            metrics(20, 14_000, 100, 20),
            ack(21, "[[0]]"),
            metrics(22, 14_000, 100, 20),
            metrics(69, 14_000, 0, 49),
            ack(70, "[[1]]"),
        ];
        assert_eq!(impossible(&quic_go, 50_000), Some(1));
        // with jitter the floor is lower (both delays less their jitter): 44 ms is possible on
        // a path of 25 ms +- 5 ms each way, 38 ms is not
        let jittered = [
            ack(44, "[[0]]"),
            metrics(44, 14_000, 100, 44),
            ack(60, "[[1]]"),
            metrics(60, 14_000, 0, 38),
        ];
        assert_eq!(impossible(&jittered, 40_000), Some(1));
        assert!(timeline(b"\x1e{\"x\":1}", 0, 0, None).is_err());
    }

    #[test]
    fn bytes_sent_again_are_counted_from_the_stream_frames_and_an_unlogged_loss_is_unknown() {
        // stream 0: 0-1000 and 1000-2000 sent, then 500-1500 again (1000 bytes re-sent, the
        // first at offset 500); stream 3 (unidirectional): 0-10 twice (10 bytes, no offset)
        let uni = |t: u64, pn: u64| {
            format!(
                r#"{{"time":{t},"name":"transport:packet_sent","data":{{"frames":[{{"frame_type":"stream","stream_id":3,"offset":0,"length":10}}],"header":{{"packet_type":"1RTT","packet_number":{pn}}}}}}}"#
            )
        };
        let lost = r#"{"time":30,"name":"recovery:packet_lost","data":{"header":{"packet_type":"1RTT","packet_number":1}}}"#;
        let records = [
            HEADER,
            &uni(0, 0),
            &sent(1, 1, 0, 1000),
            &sent(2, 2, 1000, 1000),
            &uni(3, 3),
            &sent(40, 4, 500, 1000),
        ];
        let r = resent(&seq(&records)).unwrap();
        assert_eq!(
            r,
            Resent {
                server: true,
                bytes: 1010,
                first_offset: Some(500),
                // data re-sent, no loss declared: the log does not say
                packets_lost: None
            }
        );
        let mut with_loss = records.to_vec();
        with_loss.insert(5, lost);
        let r = resent(&seq(&with_loss)).unwrap();
        assert_eq!((r.bytes, r.packets_lost), (1010, Some(1)));
        // nothing re-sent and nothing declared lost: a count of 0; a client's log is no server's
        let client = HEADER.replace("server", "client");
        let r = resent(&seq(&[&client, &sent(1, 1, 0, 1000)])).unwrap();
        assert_eq!(
            (r.server, r.bytes, r.first_offset, r.packets_lost),
            (false, 0, None, Some(0))
        );
    }

    #[test]
    fn a_loss_is_timed_from_its_sending_to_its_declaration_and_the_next_packet() {
        let lost = |t: u64, pn: u64, trigger: &str| {
            format!(
                r#"{{"time":{t},"name":"recovery:packet_lost","data":{{"header":{{"packet_type":"1RTT","packet_number":{pn}}},"trigger":"{trigger}"}}}}"#
            )
        };
        let text = seq(&[
            HEADER,
            &sent(10, 0, 0, 80),
            &sent(20, 1, 80, 80),
            &sent(30, 2, 160, 80),
            // packet 0 declared lost by time (9/8 of an RTT after a later packet's ack)
            &lost(86, 0, "time_threshold"),
            &sent(87, 3, 0, 80),
            // a packet never seen sent (the log began later) is left out
            &lost(90, 77, "time_threshold"),
            &lost(95, 1, "pto_expired"),
        ]);
        let l = losses(&text).unwrap();
        assert_eq!(l.len(), 2, "{l:?}");
        assert_eq!((l[0].number, l[0].sent_ms, l[0].lost_ms), (0, 10.0, 86.0));
        assert_eq!(l[0].next_sent_ms, Some(87.0));
        assert_eq!(l[0].trigger.as_deref(), Some("time_threshold"));
        // nothing was sent after the second loss
        assert_eq!((l[1].number, l[1].next_sent_ms), (1, None));
        assert_eq!(l[1].trigger.as_deref(), Some("pto_expired"));
        assert_eq!(losses(b"not a qlog"), Err(QlogError::NoHeader));
    }
}
