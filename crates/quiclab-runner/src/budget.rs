//! A trial's time budget (`quiclab-explain`) from the files it kept: the link's event log, the
//! client's records and the sender's timeline, on the link's clock.

use std::path::Path;

use quiclab_explain::{Asked, LinkLog, PathFacts, SenderSample, Transfer};
use quiclab_link::LinkConfig;
use quiclab_model::budget::{Budget, SenderRecord};
use quiclab_model::record::{Handshake, RequestRecord, Transport};
use quiclab_pages::page_client::PageRecord;

use crate::outputs::Sample;

/// Round trips a new connection's handshake takes by design: QUIC 1, TCP with TLS 1.3 2 (1
/// with the ClientHello in a Fast Open SYN), TCP alone 1, the coded transport 1; none where the
/// request went as 0-RTT data and was accepted.
pub fn design_rtts(transport: Transport, tls: bool, hs: &Handshake) -> u32 {
    match transport {
        _ if hs.zero_rtt_accepted => 0,
        Transport::Tcp if tls && !hs.fast_open => 2,
        Transport::Tcp | Transport::Quic | Transport::Coded => 1,
    }
}

/// What every budget of a trial reads: the link's log, the path's facts and the link's epoch.
struct Link {
    log: LinkLog,
    path: PathFacts,
    epoch_ns: u64,
}

impl Link {
    /// The trial's link, where a budget applies: `Ok(None)` over a trace (rates that change)
    /// or without an event log; `Err` for a log that cannot be read.
    fn read(dir: &Path, link: &LinkConfig, epoch_ns: u64) -> Result<Option<Link>, String> {
        if link.up.trace.is_some() || link.down.trace.is_some() || epoch_ns == 0 {
            return Ok(None);
        }
        let path = dir.join("events.jsonl");
        let Ok(f) = std::fs::File::open(&path) else {
            return Ok(None);
        };
        let log = LinkLog::parse(std::io::BufReader::new(f))
            .map_err(|e| format!("{}: {e}", path.display()))?;
        Ok(Some(Link {
            log,
            path: PathFacts {
                down_delay_ns: link.down.delay.as_nanos() as u64,
                up_delay_ns: link.up.delay.as_nanos() as u64,
                down_rate_bps: link.down.rate.map(|r| r.bps()),
                up_rate_bps: link.up.rate.map(|r| r.bps()),
            },
            epoch_ns,
        }))
    }

    /// A monotonic-clock time (µs) on the link's clock (ns).
    fn ns(&self, us: u64) -> u64 {
        (us * 1000).saturating_sub(self.epoch_ns)
    }

    /// One request's transfer, where the record has its times.
    fn transfer(&self, rec: &RequestRecord, tls: bool) -> Option<Transfer> {
        let zero_rtt = rec.handshake.zero_rtt_accepted;
        let start = self.ns(rec.start_us);
        Some(Transfer {
            start_ns: start,
            // 0-RTT: the request could go with the first flight
            handshake_done_ns: if zero_rtt {
                start
            } else {
                self.ns(rec.handshake_done_us?)
            },
            first_byte_ns: self.ns(rec.first_byte_us?),
            last_byte_ns: self.ns(rec.last_byte_us?),
            body_bytes: rec.bytes,
            design_rtts: design_rtts(rec.transport, tls, &rec.handshake),
        })
    }
}

/// The sender's samples from `from` to `to` (link's clock), its timeline starting at
/// `timeline_start` (link's clock), with only what its stack `offers`.
fn sender(
    timeline: &[Sample],
    timeline_start: u64,
    from: u64,
    to: u64,
    offers: &[SenderRecord],
) -> Vec<SenderSample> {
    let has = |r: SenderRecord| offers.contains(&r);
    timeline
        .iter()
        .map(|s| SenderSample {
            t_ns: (timeline_start as f64 + s.t_ms * 1e6).max(0.0) as u64,
            cwnd_bytes: s.cwnd_bytes.filter(|_| has(SenderRecord::Cwnd)),
            srtt_ns: s
                .rtt_ms
                .filter(|_| has(SenderRecord::Rtt))
                .map(|r| (r * 1e6) as u64),
            congestion_event: s.congestion_event && has(SenderRecord::CongestionEvents),
            flow_blocked: s.flow_blocked.filter(|_| has(SenderRecord::FlowBlocked)),
        })
        .filter(|s| (from..=to).contains(&s.t_ns))
        .collect()
}

/// The sender's own record of a trial: its timeline's samples, and what its stack says they
/// offer the budget (read for that only).
#[derive(Clone, Copy)]
pub struct SenderLog<'a> {
    pub timeline: &'a [Sample],
    pub offers: &'a [SenderRecord],
}

/// What the sender's stack `offers` that no sample the budget read carried: a window, an RTT
/// or a flow-control count (whether the window was ever cut cannot be missing: none is an
/// answer).
fn unread(offers: &[SenderRecord], read: &[SenderSample]) -> Vec<String> {
    offers
        .iter()
        .filter(|r| match r {
            SenderRecord::Cwnd => !read.iter().any(|s| s.cwnd_bytes.is_some()),
            SenderRecord::Rtt => !read.iter().any(|s| s.srtt_ns.is_some()),
            SenderRecord::FlowBlocked => !read.iter().any(|s| s.flow_blocked.is_some()),
            SenderRecord::CongestionEvents => read.is_empty(),
        })
        .map(|r| r.name().to_string())
        .collect()
}

/// The budget of a trial's requests, made one after another each on a new connection (one
/// request, or a sequence: [`quiclab_explain::sequence_budget`]), over a link of constant
/// rates, the sender's record read for what its stack offers only. `Ok(None)` where a budget
/// does not apply (a trace, a request on a connection opened before, no event log kept); `Err`
/// says why the files could not make one.
pub fn of_requests(
    dir: &Path,
    link: &LinkConfig,
    epoch_ns: u64,
    records: &[RequestRecord],
    tls: bool,
    log: SenderLog,
) -> Result<Option<Budget>, String> {
    let (timeline, offers) = (log.timeline, log.offers);
    let Some(l) = Link::read(dir, link, epoch_ns)? else {
        return Ok(None);
    };
    if records.is_empty() || records.iter().any(|r| !r.new_connection) {
        return Ok(None);
    }
    let timeline_start = l.ns(records[0].start_us);
    let mut parts = Vec::with_capacity(records.len());
    let mut read = Vec::new();
    for (i, rec) in records.iter().enumerate() {
        let which = |e: String| {
            if records.len() > 1 {
                format!("request {} of {}: {e}", i + 1, records.len())
            } else {
                e
            }
        };
        let Some(t) = l.transfer(rec, tls) else {
            return Err(which(
                "the record lacks its handshake, first or last byte time".into(),
            ));
        };
        let sender = sender(timeline, timeline_start, t.start_ns, t.last_byte_ns, offers);
        let b = quiclab_explain::budget(&l.log, &l.path, &t, &sender).map_err(which)?;
        parts.push((t.start_ns, t.last_byte_ns, b));
        read.extend(sender);
    }
    let mut b = if parts.len() == 1 {
        parts.pop().map(|p| p.2).expect("one part")
    } else {
        quiclab_explain::sequence_budget(&parts)?
    };
    b.unread = unread(offers, &read);
    Ok(Some(b))
}

/// The budget of a page load ([`quiclab_explain::page_budget`]): from the first connection's
/// start to the page's load time, its body every resource's bytes. The sender's record is read
/// (for what its stack offers) only where one connection carried the page (a window is one
/// connection's).
pub fn of_page(
    dir: &Path,
    link: &LinkConfig,
    epoch_ns: u64,
    rec: &PageRecord,
    plt_ms: f64,
    tls: bool,
    log: SenderLog,
) -> Result<Option<Budget>, String> {
    let (timeline, offers) = (log.timeline, log.offers);
    let Some(l) = Link::read(dir, link, epoch_ns)? else {
        return Ok(None);
    };
    let start = l.ns(rec.start_us);
    let at = |ms: f64| start + (ms * 1e6).max(0.0) as u64;
    let (Some(h), Some(fb)) = (
        rec.handshake_ms,
        rec.resources.first().and_then(|r| r.first_byte_ms),
    ) else {
        return Err("the page's record lacks its handshake or its document's first byte".into());
    };
    let asked: Vec<Asked> = rec
        .resources
        .iter()
        .filter_map(|r| {
            Some(Asked {
                sent_ns: at(r.start_ms?),
                done_ns: at(r.last_byte_ms?),
            })
        })
        .collect();
    let transport = rec.http.transport();
    let t = Transfer {
        start_ns: start,
        handshake_done_ns: at(h),
        first_byte_ns: at(fb),
        last_byte_ns: at(plt_ms),
        body_bytes: rec.bytes,
        design_rtts: design_rtts(transport, tls, &rec.handshake),
    };
    let one = rec.connections <= 1;
    let sender = if one {
        sender(timeline, start, start, t.last_byte_ns, offers)
    } else {
        Vec::new()
    };
    let mut b = quiclab_explain::page_budget(&l.log, &l.path, &t, &asked, &sender)?;
    if one {
        b.unread = unread(offers, &sender);
    }
    Ok(Some(b))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(t_ms: f64) -> Sample {
        Sample {
            t_ms,
            acked_bytes: None,
            cwnd_bytes: Some(12_000),
            bytes_in_flight: Some(6_000),
            rtt_ms: Some(20.5),
            congestion_event: true,
            retransmits: None,
            impossible_rtt_samples: None,
            first_loss_offset: None,
            resent_bytes: None,
            transport: None,
            flow_blocked: Some(3),
        }
    }

    /// The budget reads of the sender's record what its stack offers and no more, within the
    /// transfer; what the stack offers but no sample carried is named.
    #[test]
    fn the_sender_s_record_is_read_for_what_its_stack_offers() {
        let timeline = [sample(0.0), sample(10.0), sample(30.0)];
        // the timeline starts at 1 ms on the link's clock; the transfer runs from 5 to 20 ms
        let all = sender(
            &timeline,
            1_000_000,
            5_000_000,
            20_000_000,
            &SenderRecord::ALL,
        );
        assert_eq!(all.len(), 1);
        assert_eq!(all[0].t_ns, 11_000_000);
        assert_eq!(
            (all[0].cwnd_bytes, all[0].srtt_ns, all[0].flow_blocked),
            (Some(12_000), Some(20_500_000), Some(3))
        );
        assert!(all[0].congestion_event);
        assert!(unread(&SenderRecord::ALL, &all).is_empty());
        // a stack that offers its window only: the rest is not read, whatever the record holds
        let cwnd = [SenderRecord::Cwnd];
        let s = sender(&timeline, 1_000_000, 5_000_000, 20_000_000, &cwnd);
        assert_eq!(
            (s[0].cwnd_bytes, s[0].srtt_ns, s[0].flow_blocked),
            (Some(12_000), None, None)
        );
        assert!(!s[0].congestion_event);
        // a promise the record did not keep: a window and a count offered, neither in it
        let bare = Sample {
            cwnd_bytes: None,
            flow_blocked: None,
            ..sample(10.0)
        };
        let s = sender(
            &[bare],
            1_000_000,
            5_000_000,
            20_000_000,
            &SenderRecord::ALL,
        );
        assert_eq!(unread(&SenderRecord::ALL, &s), vec!["cwnd", "flow-blocked"]);
        assert_eq!(
            unread(&SenderRecord::ALL, &[]),
            vec!["cwnd", "rtt", "congestion-events", "flow-blocked"]
        );
    }
}
