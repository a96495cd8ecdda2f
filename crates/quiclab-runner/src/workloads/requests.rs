//! What the workloads of HTTP requests share (single object, repeated GETs, segments): the
//! client's records checked against what was asked, and the trial's metrics from them, the
//! sender's timeline and the link.

use quiclab_model::budget::SenderRecord;
use quiclab_model::campaign::{Detail, Metrics, RequestMetrics, TimelinePoint};
use quiclab_model::record::RequestRecord;
use quiclab_netns::DirectionReport;

use super::{Ran, TrialCtx, exited_ok, finished, host_kept_up, link_ok};
use crate::outputs::{Sample, losses, read_records, read_timeline, server_resent, tail};
use quiclab_external::qlog::Resent;

/// A request of `size` bytes came back whole: status 200 and the bytes asked for.
pub(crate) fn downloaded(rec: &RequestRecord, size: u64) -> Result<(), String> {
    if rec.status != 200 || rec.bytes != size {
        return Err(format!(
            "status {} with {} of {size} bytes",
            rec.status, rec.bytes
        ));
    }
    Ok(())
}

/// A request trial's metrics: every request must have succeeded (no error, and `check` of the
/// record against its size), the client must have ended well and the host kept up. The records
/// go to `requests_out` either way.
pub(crate) fn trial_metrics(
    t: &TrialCtx,
    ran: &Ran,
    requests_out: &mut serde_json::Value,
    check: fn(&RequestRecord, u64) -> Result<(), String>,
) -> Result<Metrics, String> {
    let records = checked_records(t, ran, requests_out, check)?;
    Ok(records_metrics(t, ran, &records))
}

/// The client's records (at least one), checked as [`trial_metrics`] says.
pub(crate) fn checked_records(
    t: &TrialCtx,
    ran: &Ran,
    requests_out: &mut serde_json::Value,
    check: fn(&RequestRecord, u64) -> Result<(), String>,
) -> Result<Vec<RequestRecord>, String> {
    let records = read_records(ran.client_out);
    *requests_out = serde_json::Value::Array(
        records
            .iter()
            .filter_map(|r| serde_json::to_value(r).ok())
            .collect(),
    );
    link_ok(ran.reports)?;
    let status = finished(ran)?;
    if records.is_empty() {
        return Err(format!(
            "the client ({status}) wrote no record: {}",
            tail(ran.client_log, 3)
        ));
    }
    let many = t.requests.len() > 1;
    for (i, (rec, &size)) in records.iter().zip(t.requests).enumerate() {
        let which = if many {
            format!("request {} of {}: ", i + 1, t.requests.len())
        } else {
            String::new()
        };
        if let Some(e) = &rec.error {
            return Err(format!("{which}request failed: {e}"));
        }
        check(rec, size).map_err(|e| format!("{which}{e}"))?;
    }
    if records.len() != t.requests.len() {
        return Err(format!(
            "the client reported {} of {} requests: {}",
            records.len(),
            t.requests.len(),
            tail(ran.client_log, 3)
        ));
    }
    exited_ok(status, ran)?;
    host_kept_up(ran.reports)?;
    Ok(records)
}

/// A trial's metrics from its checked records (at least one) and the sender's timeline.
pub(crate) fn records_metrics(t: &TrialCtx, ran: &Ran, records: &[RequestRecord]) -> Metrics {
    records_timeline_metrics(t, ran, records, &timeline(ran, records))
}

/// The sender's timeline of a trial whose first request is `records[0]`, from that request's
/// start.
pub(crate) fn timeline(ran: &Ran, records: &[RequestRecord]) -> Vec<Sample> {
    read_timeline(ran.server_output, records[0].start_us)
}

/// [`records_metrics`] with the sender's timeline already read.
pub(crate) fn records_timeline_metrics(
    t: &TrialCtx,
    ran: &Ran,
    records: &[RequestRecord],
    timeline: &[Sample],
) -> Metrics {
    metrics(
        records,
        timeline,
        server_resent(ran.dir),
        ran.reports,
        t.min_rtt_ms(),
    )
}

/// The time budget of a trial's requests (each on a new connection, one after another) into
/// `m`'s detail, or why it could not be made.
pub(crate) fn budget(
    t: &TrialCtx,
    ran: &Ran,
    records: &[RequestRecord],
    timeline: &[Sample],
    m: &mut Metrics,
) {
    match crate::budget::of_requests(
        ran.dir,
        t.link,
        ran.link_epoch_ns,
        records,
        t.scheme == "https",
        crate::budget::SenderLog {
            timeline,
            offers: t.sender_record,
        },
    ) {
        Ok(b) => m.detail.budget = b,
        Err(e) => m.detail.budget_error = Some(e),
    }
}

/// The bytes a whole transfer's sender record may leave unacknowledged, at the least: RFC
/// 9002's initial window (ten 1472-byte datagrams' worth, 14,720 bytes).
pub(crate) const LAST_FLIGHT_FLOOR: u64 = 14_720;

/// Why the sender's timeline of a download whose bodies came back whole (`body` bytes in all,
/// over one connection) cannot be trusted: what its stack `offers` is missing from it, or it
/// acknowledges too little of the body. A stack that offers nothing and wrote nothing is not in
/// doubt (it never claimed a record); one that wrote a timeline is held to it.
///
/// The acknowledged bytes count what the sender sent (HTTP and TLS framing included), but a
/// sender's own log may end before its last flight's acknowledgement: the client closes once it
/// has the last byte, and a server may log no ACK that came with the close, or stop first
/// (ngtcp2's, quiche's, quic-go's, aioquic's and tquic's logs were measured 0.02 to 0.64 % short
/// of a 1 MB body at 1 % loss). So the record is in doubt only when it is short by more than one
/// flight: its last congestion window, or [`LAST_FLIGHT_FLOOR`] if that is more (or it has none).
pub(crate) fn sender_doubts(
    offers: &[SenderRecord],
    timeline: &[Sample],
    body: u64,
) -> Vec<String> {
    let mut out = Vec::new();
    if timeline.is_empty() {
        if !offers.is_empty() {
            let names: Vec<&str> = offers.iter().map(|r| r.name()).collect();
            out.push(format!(
                "the sender's timeline is empty (its stack offers {})",
                names.join(", ")
            ));
        }
        return out;
    }
    let acked = timeline
        .iter()
        .filter_map(|s| s.acked_bytes)
        .max()
        .unwrap_or(0);
    let last_window = timeline
        .iter()
        .rev()
        .find_map(|s| s.cwnd_bytes)
        .unwrap_or(0);
    let flight = last_window.max(LAST_FLIGHT_FLOOR);
    if acked + flight < body {
        out.push(format!(
            "its sender's timeline acknowledges {acked} of the body's {body} bytes (more than \
             a last flight of {flight} bytes short)"
        ));
    }
    if offers.contains(&SenderRecord::Cwnd) && !timeline.iter().any(|s| s.cwnd_bytes.is_some()) {
        out.push("its sender's timeline has no congestion window (its stack offers one)".into());
    }
    if offers.contains(&SenderRecord::Rtt) && !timeline.iter().any(|s| s.rtt_ms.is_some()) {
        out.push("its sender's timeline has no RTT sample (its stack offers them)".into());
    }
    out
}

/// [`sender_doubts`] of a trial whose requests each came back whole on one connection, into
/// `m`'s detail; a trial of several connections is not judged (its timeline is one of them).
pub(crate) fn doubt_sender(
    t: &TrialCtx,
    records: &[RequestRecord],
    timeline: &[Sample],
    m: &mut Metrics,
) {
    let connections = records.iter().filter(|r| r.new_connection).count();
    if connections == 1 {
        let body = records.iter().map(|r| r.bytes).sum();
        m.detail.sender_doubts = sender_doubts(t.sender_record, timeline, body);
    }
}

/// A trial's metrics from the client's records (at least one, in order), the sender's
/// timeline and the link's reports. The trial's TTLB runs from the first request's start to the
/// last request's last byte; its TTFB, handshake and TLS facts are the first request's.
pub fn metrics(
    records: &[RequestRecord],
    timeline: &[Sample],
    resent: Option<Resent>,
    reports: &[DirectionReport],
    min_rtt_ms: f64,
) -> Metrics {
    let rec = &records[0];
    let last_rec = records.last().unwrap_or(rec);
    let ms = |t: Option<u64>| t.map(|t| t.saturating_sub(rec.start_us) as f64 / 1000.0);
    let handshake_ms = ms(rec.handshake_done_us);
    let last = timeline.last();
    let mut lost = losses(timeline, resent);
    if timeline.is_empty() && resent.is_none() {
        // no sender's timeline: the client's own count (what it took for lost itself)
        lost.packets_lost = records
            .iter()
            .map(|r| r.transport_stats.packets_lost)
            .sum::<Option<u64>>();
    }
    let impossible = last
        .and_then(|s| s.impossible_rtt_samples)
        .or(rec.transport_stats.impossible_rtt_samples);
    let detail = if records.len() > 1 {
        detail(records)
    } else {
        Detail::default()
    };
    Metrics {
        ttlb_ms: ms(last_rec.last_byte_us).unwrap_or(f64::NAN),
        ttfb_ms: ms(rec.first_byte_us).unwrap_or(f64::NAN),
        handshake_ms,
        handshake_rtts: handshake_ms
            .filter(|_| min_rtt_ms > 0.0)
            .map(|h| h / min_rtt_ms),
        hello_retry: rec.handshake.hello_retry,
        packets_lost: lost.packets_lost,
        bytes_resent: lost.bytes_resent,
        first_retransmit_offset: lost.first_retransmit_offset,
        impossible_rtt_samples: impossible,
        link_drops: reports.iter().map(|r| r.counters.dropped_total()).sum(),
        timeline: timeline
            .iter()
            .filter_map(|s| {
                Some(TimelinePoint {
                    t_ms: s.t_ms,
                    acked_bytes: s.acked_bytes?,
                    cwnd_bytes: s.cwnd_bytes,
                    bytes_in_flight: s.bytes_in_flight,
                    rtt_ms: s.rtt_ms,
                    congestion_event: s.congestion_event,
                })
            })
            .collect(),
        detail,
    }
}

/// Every request of a trial (at least one record) with its times from its own start, and its
/// start from the first request's.
pub fn detail(records: &[RequestRecord]) -> Detail {
    let first = records.first().map_or(0, |r| r.start_us);
    Detail {
        requests: records
            .iter()
            .map(|r| {
                let own = |t: Option<u64>| {
                    t.map_or(f64::NAN, |t| t.saturating_sub(r.start_us) as f64 / 1000.0)
                };
                RequestMetrics {
                    bytes: r.bytes,
                    start_ms: r.start_us.saturating_sub(first) as f64 / 1000.0,
                    ttfb_ms: own(r.first_byte_us),
                    ttlb_ms: own(r.last_byte_us),
                    new_connection: r.new_connection,
                    handshake_ms: r
                        .handshake_done_us
                        .map(|t| t.saturating_sub(r.start_us) as f64 / 1000.0),
                    resumed: r.handshake.resumed,
                    zero_rtt_attempted: r.handshake.zero_rtt_attempted,
                    zero_rtt_accepted: r.handshake.zero_rtt_accepted,
                }
            })
            .collect(),
        ..Detail::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(acked: u64, cwnd: Option<u64>, rtt: Option<f64>) -> Sample {
        Sample {
            acked_bytes: Some(acked),
            cwnd_bytes: cwnd,
            rtt_ms: rtt,
            ..Sample::default()
        }
    }

    #[test]
    fn a_whole_timeline_of_what_its_stack_offers_is_not_in_doubt() {
        let t = [
            sample(0, Some(14_720), None),
            sample(500_000, Some(40_000), Some(51.0)),
            sample(1_000_123, Some(60_000), Some(50.5)),
        ];
        assert!(sender_doubts(&SenderRecord::ALL, &t, 1_000_000).is_empty());
        // a stack that offers nothing and wrote nothing claimed nothing
        assert!(sender_doubts(&[], &[], 1_000_000).is_empty());
    }

    #[test]
    fn a_timeline_short_of_the_body_or_without_what_its_stack_offers_is_named() {
        // aioquic's qlog without acknowledgements: flat lines, nothing acknowledged
        let flat = [
            sample(0, Some(14_720), Some(50.0)),
            sample(0, Some(14_720), Some(50.0)),
        ];
        let d = sender_doubts(&SenderRecord::ALL, &flat, 1_000_000);
        assert_eq!(
            d,
            vec![
                "its sender's timeline acknowledges 0 of the body's 1000000 bytes (more than \
                 a last flight of 14720 bytes short)"
                    .to_string()
            ]
        );
        // short by its last window is a log that ended before the last acknowledgement; by a
        // byte more, in doubt
        let window = 40_000;
        let ended = [sample(1_000_000 - window, Some(window), Some(50.0))];
        assert!(sender_doubts(&SenderRecord::ALL, &ended, 1_000_000).is_empty());
        let short = [sample(1_000_000 - window - 1, Some(window), Some(50.0))];
        assert_eq!(
            sender_doubts(&SenderRecord::ALL, &short, 1_000_000).len(),
            1
        );
        // a small last window still allows an initial window's worth
        let small = [sample(1_000_000 - 14_720, Some(2_400), Some(50.0))];
        assert!(sender_doubts(&SenderRecord::ALL, &small, 1_000_000).is_empty());
        let small = [sample(1_000_000 - 14_721, Some(2_400), Some(50.0))];
        assert_eq!(
            sender_doubts(&SenderRecord::ALL, &small, 1_000_000).len(),
            1
        );
        // a window and an RTT the stack offers but no sample carries
        let bare = [sample(1_000_000, None, None)];
        let d = sender_doubts(&[SenderRecord::Cwnd, SenderRecord::Rtt], &bare, 1_000_000);
        assert_eq!(d.len(), 2, "{d:?}");
        assert!(
            d[0].contains("no congestion window") && d[1].contains("no RTT"),
            "{d:?}"
        );
        // what the stack does not offer is not asked of it
        assert!(sender_doubts(&[SenderRecord::FlowBlocked], &bare, 1_000_000).is_empty());
        // an empty timeline where the stack offers one
        let d = sender_doubts(&[SenderRecord::Cwnd, SenderRecord::Rtt], &[], 10);
        assert_eq!(
            d,
            vec!["the sender's timeline is empty (its stack offers cwnd, rtt)".to_string()]
        );
    }
}
