//! A trial's time budget (`quiclab-explain`) from the files it kept: the link's event log, the
//! client's record and the sender's timeline, on the link's clock.

use std::path::Path;

use quiclab_explain::{LinkLog, PathFacts, SenderSample, Transfer};
use quiclab_link::LinkConfig;
use quiclab_model::budget::Budget;
use quiclab_model::record::{RequestRecord, Transport};

use crate::outputs::Sample;

/// Round trips a new connection's handshake takes by design: QUIC 1, TCP with TLS 1.3 2, TCP
/// alone 1, the coded transport 1.
pub fn design_rtts(transport: Transport, tls: bool) -> u32 {
    match transport {
        Transport::Tcp if tls => 2,
        Transport::Tcp | Transport::Quic | Transport::Coded => 1,
    }
}

/// The budget of a trial's one request, on a new connection and without 0-RTT, over a link of
/// constant rates. `Ok(None)` where a budget does not apply (a trace, a resumed or early
/// request, no event log kept); `Err` says why the files could not make one.
pub fn of_trial(
    dir: &Path,
    link: &LinkConfig,
    epoch_ns: u64,
    rec: &RequestRecord,
    tls: bool,
    timeline: &[Sample],
) -> Result<Option<Budget>, String> {
    if link.up.trace.is_some() || link.down.trace.is_some() {
        return Ok(None);
    }
    if !rec.new_connection || rec.handshake.zero_rtt_accepted || epoch_ns == 0 {
        return Ok(None);
    }
    let (Some(h), Some(fb), Some(lb)) =
        (rec.handshake_done_us, rec.first_byte_us, rec.last_byte_us)
    else {
        return Ok(None);
    };
    let path = dir.join("events.jsonl");
    let Ok(f) = std::fs::File::open(&path) else {
        return Ok(None);
    };
    let log = LinkLog::parse(std::io::BufReader::new(f))
        .map_err(|e| format!("{}: {e}", path.display()))?;
    let on_link = |us: u64| (us * 1000).saturating_sub(epoch_ns);
    let start = on_link(rec.start_us);
    let sender: Vec<SenderSample> = timeline
        .iter()
        .map(|s| SenderSample {
            t_ns: (start as f64 + s.t_ms * 1e6).max(0.0) as u64,
            cwnd_bytes: s.cwnd_bytes,
            srtt_ns: s.rtt_ms.map(|r| (r * 1e6) as u64),
            congestion_event: s.congestion_event,
        })
        .collect();
    let facts = PathFacts {
        down_delay_ns: link.down.delay.as_nanos() as u64,
        up_delay_ns: link.up.delay.as_nanos() as u64,
        down_rate_bps: link.down.rate.map(|r| r.bps()),
        up_rate_bps: link.up.rate.map(|r| r.bps()),
    };
    let transfer = Transfer {
        start_ns: start,
        handshake_done_ns: on_link(h),
        first_byte_ns: on_link(fb),
        last_byte_ns: on_link(lb),
        body_bytes: rec.bytes,
        design_rtts: design_rtts(rec.transport, tls),
    };
    quiclab_explain::budget(&log, &facts, &transfer, &sender).map(Some)
}
