//! What the workloads of HTTP requests share (single object, repeated GETs, segments): the
//! client's records checked against what was asked, and the trial's metrics from them, the
//! sender's timeline and the link.

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
