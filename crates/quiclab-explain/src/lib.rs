//! Where a transfer lost its time: the time budget of one request on a new connection, the same
//! for every stack, from the link's per-packet log, the client's record and, where it gives
//! them, the sender's congestion window and congestion events.
//!
//! Sans-IO: every time is passed in, on the link's clock (ns from its epoch). The runner reads
//! the files a trial kept and calls [`budget`]; the tests drive the link emulator itself in
//! virtual time with a sender of known behaviour and check that the planted cause is named.
//!
//! The method (docs/explain.md says it for readers):
//! - the **handshake phase** runs from the request's start to the client's handshake
//!   completion: its floor is the design's round trips, the serialisation of its packets is
//!   overhead, and the rest is **handshake**;
//! - after it, the request needs one round trip (floor), and the bottleneck towards the client
//!   is watched from the moment the request can reach the server until the packet with the
//!   last byte leaves the link. Its busy time is the body's serialisation (floor) and
//!   **overhead** (every other byte it carried). Its idle time is split by gap: the first, while
//!   the server had the request and sent nothing, is **endpoint** time (or a **loss recovery
//!   wait** if the request was lost); a later gap longer than a round trip (nothing in flight)
//!   after a loss is a **loss recovery wait**, and without one **flow control or
//!   sender-limited**; a shorter one is **ramp-up** before the first congestion signal and
//!   **window after loss** after it (and within two round trips of a drop, while the sender
//!   responds to it), unless the sender's window was not what held it back (then **flow
//!   control** where the sender's record counts the peer's limits it reached in that time,
//!   **sender-limited** where it counts and they did not grow, and flow control or
//!   sender-limited where it does not count), or the sender gives no window (then window or
//!   sender-limited);
//! - in a page load, an idle bottleneck with no requested byte left to send is **waiting for
//!   requests** until the next request can arrive; in a sequence of requests, so is the time
//!   between one's last byte and the next one's start;
//! - the client's time from the last packet's delivery to its last byte read is **endpoint**.
//!
//! The parts partition the TTLB; what they leave (`residual_ms`) is where the client's clock
//! and the link's disagree, which a trial's check holds within 2 % or 2 ms.

pub mod fingerprint;
pub mod hello;
pub mod link_log;
pub mod one_rtt;
pub mod server_hello;

use quiclab_model::budget::{Budget, Charge, Component, Floor};

pub use link_log::{Fate, LinkLog, Packet};

/// The emulated path, as its configuration gives it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PathFacts {
    /// Propagation delay towards the client and towards the server, ns.
    pub down_delay_ns: u64,
    pub up_delay_ns: u64,
    /// The bottleneck's rate each way, bits per second (`None`: unlimited).
    pub down_rate_bps: Option<u64>,
    pub up_rate_bps: Option<u64>,
}

impl PathFacts {
    /// The propagation round trip, ns.
    pub fn rtt_ns(&self) -> u64 {
        self.down_delay_ns + self.up_delay_ns
    }
}

/// One request on a new connection, as the client recorded it (times on the link's clock).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transfer {
    /// The client's first packet.
    pub start_ns: u64,
    pub handshake_done_ns: u64,
    pub first_byte_ns: u64,
    pub last_byte_ns: u64,
    /// Response body bytes.
    pub body_bytes: u64,
    /// Round trips the handshake takes by design: 1 for QUIC, 2 for TCP with TLS 1.3, 1 for
    /// TCP alone.
    pub design_rtts: u32,
}

/// One request of a page, as the client recorded it (times on the link's clock): when it was
/// asked for and when its last byte was read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Asked {
    pub sent_ns: u64,
    pub done_ns: u64,
}

/// One sample of the sender's record (its time on the link's clock).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SenderSample {
    pub t_ns: u64,
    pub cwnd_bytes: Option<u64>,
    pub srtt_ns: Option<u64>,
    pub congestion_event: bool,
    /// A count that grows while the peer's flow control holds the sender back (TCP's receive
    /// window chronograph, QUIC's DATA_BLOCKED and STREAM_DATA_BLOCKED frames sent).
    pub flow_blocked: Option<u64>,
}

/// A full-size packet, bytes: the least a window grows by in a round trip when it limits.
const PACKET: u64 = 1200;

/// How far a handshake may fall short of its design's round trips before its record is
/// refused (the client's clock and the link's disagree by less).
const HANDSHAKE_SLACK_NS: u64 = 2_000_000;

/// How many spans a charge keeps (the longest).
const MAX_SPANS: usize = 64;

fn ser_ns(size: u64, rate: Option<u64>) -> u64 {
    match rate {
        Some(bps) if bps > 0 => (size as u128 * 8 * 1_000_000_000 / bps as u128) as u64,
        _ => 0,
    }
}

fn ms(ns: i128) -> f64 {
    ns as f64 / 1e6
}

/// The time budget of `t` over the link whose log is `log`, with the sender's record where it
/// has one (`sender`, in time order; empty when none). `Err` says why the log and the record
/// cannot be a budget (a record out of order, no packet reaching the client after the
/// handshake).
pub fn budget(
    log: &LinkLog,
    path: &PathFacts,
    t: &Transfer,
    sender: &[SenderSample],
) -> Result<Budget, String> {
    budget_of(log, path, t, &[], sender, 0)
}

/// The time budget of a page load: `t` from the first connection's start to the page's last
/// byte (its body the bytes of every resource), with each resource's request in `asked`. Where
/// the bottleneck went idle with no requested byte left to send, the time until the next
/// request could arrive is charged to **waiting for requests** (the client discovering the
/// page's next resources), and from then until the server answered to **endpoint**.
///
/// A browser's record starts at its navigation's start, taken from its own clocks, and the
/// link may see the page's first packet (a page's trial carries no other) up to a few
/// milliseconds before that: then the part of the handshake's design round trips before the
/// record's start is not in the budget's floor (Chromium's first SYN reached the link before
/// its `timeOrigin`, mapped onto the monotonic clock, in 24 of 30 HTTP/2 loads measured, by up
/// to 5.7 ms).
pub fn page_budget(
    log: &LinkLog,
    path: &PathFacts,
    t: &Transfer,
    asked: &[Asked],
    sender: &[SenderSample],
) -> Result<Budget, String> {
    if asked.is_empty() {
        return Err("the page's record lists no request".into());
    }
    let lead = log
        .up
        .first()
        .map_or(0, |p| t.start_ns.saturating_sub(p.arrive_ns));
    budget_of(log, path, t, asked, sender, lead)
}

/// The time budget of requests made one after another, each on its own connection: each
/// request's budget (with its start on the link's clock, and its last byte's), their floors and
/// charges added up, and the time between one request's last byte and the next one's start
/// charged to **waiting for requests** (the client's own time).
pub fn sequence_budget(parts: &[(u64, u64, Budget)]) -> Result<Budget, String> {
    let Some((first, _, b0)) = parts.first() else {
        return Err("no request to add up".into());
    };
    let (Some(last), true) = (
        parts.last().map(|p| p.1),
        parts.windows(2).all(|w| w[0].1 <= w[1].0),
    ) else {
        return Err("the requests overlap: they were not made one after another".into());
    };
    let mut b = Budget {
        ttlb_ms: ms((last - first) as i128),
        floor: Floor::default(),
        charges: Vec::new(),
        residual_ms: 0.0,
        overhead_bytes: 0,
        drops_to_client: 0,
        congestion_events: b0.congestion_events.map(|_| 0),
        unread: Vec::new(),
        reads: Vec::new(),
    };
    let mut spans: Vec<(Component, f64, Vec<[f64; 2]>)> = Vec::new();
    let mut add = |c: Component, v: f64, s: &mut dyn Iterator<Item = [f64; 2]>| match spans
        .iter_mut()
        .find(|x| x.0 == c)
    {
        Some(x) => {
            x.1 += v;
            x.2.extend(s);
        }
        None => spans.push((c, v, s.collect())),
    };
    let mut prev_end = None;
    for (start, end, p) in parts {
        let off = ms((start - first) as i128);
        if let Some(e) = prev_end
            && *start > e
        {
            let from = ms((e - first) as i128);
            add(
                Component::Requests,
                ms((start - e) as i128),
                &mut std::iter::once([from, off]),
            );
        }
        prev_end = Some(*end);
        b.floor.handshake_ms += p.floor.handshake_ms;
        b.floor.request_ms += p.floor.request_ms;
        b.floor.serialisation_ms += p.floor.serialisation_ms;
        for c in &p.charges {
            add(
                c.component,
                c.ms,
                &mut c.spans.iter().map(|s| [s[0] + off, s[1] + off]),
            );
        }
        b.overhead_bytes += p.overhead_bytes;
        b.drops_to_client += p.drops_to_client;
        b.congestion_events = b
            .congestion_events
            .zip(p.congestion_events)
            .map(|(x, y)| x + y);
        for r in &p.reads {
            if !b.reads.contains(r) {
                b.reads.push(r.clone());
            }
        }
    }
    b.charges = spans
        .into_iter()
        .map(|(component, ms, s)| Charge {
            component,
            ms,
            spans: merge_spans(s, 0.0),
        })
        .collect();
    b.charges.sort_by_key(|c| c.component);
    b.residual_ms = b.ttlb_ms - b.accounted_ms();
    Ok(b)
}

fn budget_of(
    log: &LinkLog,
    path: &PathFacts,
    t: &Transfer,
    asked: &[Asked],
    sender: &[SenderSample],
    lead_ns: u64,
) -> Result<Budget, String> {
    let (start, h, fb, lb) = (
        t.start_ns,
        t.handshake_done_ns,
        t.first_byte_ns,
        t.last_byte_ns,
    );
    if !(start <= h && h <= fb && fb <= lb) {
        return Err(format!(
            "the record's times are out of order: start {start}, handshake {h}, first byte \
             {fb}, last byte {lb} ns"
        ));
    }
    let r = path.rtt_ns();
    let (down, up) = (path.down_delay_ns, path.up_delay_ns);
    let sd = |size: u64| ser_ns(size, path.down_rate_bps);
    let su = |size: u64| ser_ns(size, path.up_rate_bps);
    let rel = |ns: u64| ms(ns as i128 - start as i128);
    let mut charges: Vec<(Component, i128, Vec<[f64; 2]>)> = Vec::new();
    let mut charge = |c: Component, ns: i128, span: Option<[f64; 2]>| {
        if ns <= 0 {
            return;
        }
        match charges.iter_mut().find(|x| x.0 == c) {
            Some(x) => {
                x.1 += ns;
                x.2.extend(span);
            }
            None => charges.push((c, ns, span.into_iter().collect())),
        }
    };

    // the handshake phase: design round trips, the serialisation of its packets, the rest;
    // those round trips counted from the client's first packet where it came `lead_ns` before
    // the record's start (at most all of them)
    let hs = (h - start) as i128;
    let design_hs = t.design_rtts as i128 * r as i128;
    let lead = (lead_ns as i128).min(design_hs);
    let floor_hs = design_hs - lead;
    if hs + (HANDSHAKE_SLACK_NS as i128) < floor_hs {
        let before = if lead > 0 {
            format!(
                " less the {:.3} ms its first packet came before the start",
                ms(lead)
            )
        } else {
            String::new()
        };
        return Err(format!(
            "the handshake completed {:.3} ms after the start, under its design's {} round \
             trips ({:.3} ms){before}: the record's start or handshake time is not its \
             connection's",
            ms(hs),
            t.design_rtts,
            ms(design_hs)
        ));
    }
    let excess = (hs - floor_hs).max(0);
    let hs_ser: u64 = log
        .up
        .iter()
        .filter(|p| (start..h).contains(&p.arrive_ns))
        .map(|p| su(p.size as u64))
        .sum::<u64>()
        + log
            .down
            .iter()
            .filter(|p| matches!(p.fate, Fate::Departed(d) if (start..=h).contains(&d)))
            .map(|p| sd(p.size as u64))
            .sum::<u64>();
    let overhead_hs = (hs_ser as i128).min(excess);
    charge(Component::Overhead, overhead_hs, None);
    charge(
        Component::Handshake,
        excess - overhead_hs,
        Some([rel(start) + ms(floor_hs), rel(h)]),
    );

    // after it: the bottleneck towards the client, from when the request can reach the server
    // to the departure of the packet with the last byte
    let delivered: Vec<(u64, &Packet)> = log
        .down
        .iter()
        .filter_map(|p| match p.fate {
            Fate::Departed(d) if d > h && d <= lb => Some((d, p)),
            _ => None,
        })
        .collect();
    let Some(d_last) = delivered.iter().map(|(d, _)| *d).max() else {
        return Err("no packet reached the client after the handshake".into());
    };
    let w0 = h + up;
    let w1 = d_last.saturating_sub(down);
    if w1 < w0 {
        return Err(format!(
            "the last byte left the link {:.3} ms after the handshake, within a round trip: \
             a response sent before the request could arrive",
            ms((d_last - h) as i128)
        ));
    }
    // busy intervals at the transmitter, clipped to the window, with each one's queueing delay
    let mut busy: Vec<(u64, u64, u64)> = delivered
        .iter()
        .map(|&(d, p)| {
            let end = d.saturating_sub(down);
            let s = sd(p.size as u64);
            let queued = d.saturating_sub(p.arrive_ns + down + s);
            (end.saturating_sub(s).max(w0), end.min(w1), queued)
        })
        .filter(|(a, b, _)| b > a)
        .collect();
    busy.sort_unstable();
    let mut merged: Vec<(u64, u64, u64)> = Vec::new();
    for (a, b, q) in busy {
        match merged.last_mut() {
            Some(m) if a <= m.1 => {
                if b >= m.1 {
                    m.2 = q;
                }
                m.1 = m.1.max(b);
            }
            _ => merged.push((a, b, q)),
        }
    }
    let busy_ns: u64 = merged.iter().map(|(a, b, _)| b - a).sum();
    let body_ser = sd(t.body_bytes);
    let delivered_bytes: u64 = delivered.iter().map(|(_, p)| p.size as u64).sum();
    charge(
        Component::Overhead,
        busy_ns as i128 - body_ser as i128,
        None,
    );

    // the congestion signals: drops towards the client, the sender's congestion events
    let drops = drop_times(&log.down, start, d_last);
    let up_drops = drop_times(&log.up, start, d_last);
    let events: Vec<u64> = sender
        .iter()
        .filter(|s| s.congestion_event && (start..=lb).contains(&s.t_ns))
        .map(|s| s.t_ns)
        .collect();
    let first_signal = drops.iter().chain(&events).copied().min();
    let has_cwnd = sender.iter().any(|s| s.cwnd_bytes.is_some());
    let slack = (r / 4).max(2_000_000);
    // the path's bandwidth-delay product towards the client, bytes (none without a rate)
    let bdp = path
        .down_rate_bps
        .map(|bps| (bps as u128 * r as u128 / 8 / 1_000_000_000) as u64);

    // the gaps, each charged to one component
    let mut gaps = Vec::new();
    let mut at = w0;
    let mut q_before = 0;
    for &(a, b, q) in &merged {
        if a > at {
            gaps.push((at, a, q_before));
        }
        at = b;
        q_before = q;
    }
    if w1 > at {
        gaps.push((at, w1, q_before));
    }
    // the transmitter's time when the packet with the first byte left it: the last packet to
    // reach the client by the first byte's read
    let first_byte_sent = delivered
        .iter()
        .map(|(d, _)| *d)
        .filter(|&d| d <= fb)
        .max()
        .map_or(w0, |d| d.saturating_sub(down));
    // a request is left to send at the transmitter from its arrival at the server until its
    // last byte left: in the last packet to reach the client by the client's read of it
    let left_until: Vec<(u64, u64)> = asked
        .iter()
        .map(|q| {
            let last = delivered
                .iter()
                .map(|(d, _)| *d)
                .filter(|&d| d <= q.done_ns)
                .max()
                .unwrap_or(q.done_ns);
            (q.sent_ns + up, last.saturating_sub(down))
        })
        .collect();
    let waiting = |x: u64| left_until.iter().any(|&(from, to)| from <= x && x < to);
    // the server had a request (or would have) and had not answered: its own time, unless the
    // request or the answer was lost
    let answering = |from: u64, to: u64| {
        if up_drops.iter().any(|&d| d >= from && d <= to)
            || drops.iter().any(|&d| d >= from && d <= to)
        {
            Component::LossRecoveryWait
        } else {
            Component::Endpoint
        }
    };
    for &(a, b, q) in &gaps {
        if b <= first_byte_sent {
            // (after the handshake's last packets, as TLS's session tickets)
            charge(
                answering(h, b),
                (b - a) as i128,
                Some([rel(a + down), rel(b + down)]),
            );
            continue;
        }
        if !asked.is_empty() && !waiting(a) {
            // nothing left to send: until the next request arrives, the client's; from then, the
            // server's answer
            let next = asked
                .iter()
                .map(|q| q.sent_ns + up)
                .filter(|&x| x > a)
                .min()
                .unwrap_or(b)
                .min(b);
            charge(
                Component::Requests,
                (next - a) as i128,
                Some([rel(a + down), rel(next + down)]),
            );
            charge(
                answering(next.saturating_sub(up), b),
                (b - next) as i128,
                Some([rel(next + down), rel(b + down)]),
            );
            continue;
        }
        let len = (b - a) as i128;
        let span = Some([rel(a + down), rel(b + down)]);
        let round = r + q + sd(1500);
        let near = |d: &u64| *d + round >= a && *d <= b;
        let lost_near = drops.iter().any(near);
        let c = if len as u64 > round + slack {
            if lost_near || up_drops.iter().any(near) {
                Component::LossRecoveryWait
            } else {
                flow_or_sender(sender, a, b, round)
            }
        } else if let Some(room) = window_room(
            sender,
            log,
            a,
            round,
            bdp,
            // before the first congestion signal (a window that limits grows every round
            // trip then); after it, Cubic's window may rest near its last maximum for many
            first_signal
                .is_none_or(|s| s > a)
                .then_some(first_byte_sent),
        ) {
            // within two round trips of a drop, the sender is responding to it (detecting the
            // loss, recovering: its window then says little of what it may send)
            let recovering = drops.iter().any(|&d| d + 2 * round >= a && d <= b);
            if recovering {
                Component::WindowAfterLoss
            } else if room {
                flow_or_sender(sender, a, b, round)
            } else if lost_near || first_signal.is_some_and(|s| s <= a) {
                Component::WindowAfterLoss
            } else {
                Component::RampUp
            }
        } else {
            Component::WindowOrSender
        };
        charge(c, len, span);
    }
    // the client's time from the last packet's delivery to the last byte read
    charge(
        Component::Endpoint,
        (lb - d_last) as i128,
        Some([rel(d_last), rel(lb)]),
    );

    let floor = Floor {
        handshake_ms: ms(floor_hs),
        request_ms: ms(r as i128),
        serialisation_ms: ms(body_ser as i128),
    };
    let mut out: Vec<Charge> = charges
        .into_iter()
        .map(|(component, ns, spans)| Charge {
            component,
            ms: ms(ns),
            spans: merge_spans(spans, ms(slack as i128) / 2.0),
        })
        .collect();
    out.sort_by_key(|c| c.component);
    let ttlb_ms = ms((lb - start) as i128);
    let mut b = Budget {
        ttlb_ms,
        floor,
        charges: out,
        residual_ms: 0.0,
        overhead_bytes: delivered_bytes.saturating_sub(t.body_bytes),
        drops_to_client: drops.len() as u32,
        congestion_events: (!sender.is_empty()).then_some(events.len() as u32),
        unread: Vec::new(),
        reads: [
            has_cwnd.then_some("cwnd"),
            sender
                .iter()
                .any(|s| s.flow_blocked.is_some())
                .then_some("flow-blocked"),
        ]
        .into_iter()
        .flatten()
        .map(String::from)
        .collect(),
    };
    b.residual_ms = ttlb_ms - b.accounted_ms();
    Ok(b)
}

/// Whether the sender's window had room at `at` (the bottleneck just went idle), so that the
/// window was not what held it back. Either of:
/// - its window covers the path's BDP and the bytes it sent within the last round trip are
///   under half of it (a window below the BDP is the limit by itself, however a pacer spreads
///   it);
/// - before the transfer's first congestion signal (`ramping`: since when the first byte
///   left), its window has not grown by a packet over the last two round trips: a sender held
///   back by its window in slow start grows it every round trip, one held back by anything
///   else does not (RFC 7661).
///
/// `None` where the sender's record gives no window by then.
fn window_room(
    sender: &[SenderSample],
    log: &LinkLog,
    at: u64,
    round: u64,
    bdp: Option<u64>,
    ramping: Option<u64>,
) -> Option<bool> {
    let i = sender.partition_point(|s| s.t_ns <= at);
    let s = sender[..i].iter().rev().find(|s| s.cwnd_bytes.is_some())?;
    let cwnd = s.cwnd_bytes?;
    let before = at.saturating_sub(2 * round);
    if ramping.is_some_and(|since| before >= since) {
        let j = sender.partition_point(|s| s.t_ns <= before);
        let then = sender[..j].iter().rev().find_map(|s| s.cwnd_bytes);
        if then.is_some_and(|then| cwnd < then + PACKET) {
            return Some(true);
        }
    }
    if bdp.is_none_or(|bdp| cwnd < bdp) {
        return Some(false);
    }
    let rtt = s.srtt_ns.unwrap_or(round).max(round);
    let from = at.saturating_sub(rtt);
    let sent: u64 = log
        .down
        .iter()
        .filter(|p| p.arrive_ns > from && p.arrive_ns <= at)
        .map(|p| p.size as u64)
        .sum();
    Some(sent * 2 < cwnd)
}

/// A gap from `a` to `b` (at the transmitter) while the sender's window had room: flow
/// control where its record's flow-control count grew from a round trip before the gap to a
/// round trip after it (it stops before the bottleneck idles, and a count is sampled), the
/// sender's own limit where it did not, not told apart where the record has no such count.
fn flow_or_sender(sender: &[SenderSample], a: u64, b: u64, round: u64) -> Component {
    let count = |at: u64| {
        let i = sender.partition_point(|s| s.t_ns <= at);
        sender[..i].iter().rev().find_map(|s| s.flow_blocked)
    };
    if !sender.iter().any(|s| s.flow_blocked.is_some()) {
        return Component::FlowOrSender;
    }
    let before = count(a.saturating_sub(round)).unwrap_or(0);
    match count(b + round) {
        Some(after) if after > before => Component::FlowControl,
        _ => Component::SenderLimited,
    }
}

/// When the link dropped `packets` of one direction, from `from` to `to`.
fn drop_times(packets: &[Packet], from: u64, to: u64) -> Vec<u64> {
    packets
        .iter()
        .filter_map(|p| match p.fate {
            Fate::Dropped(at) if (from..=to).contains(&at) => Some(at),
            _ => None,
        })
        .collect()
}

/// Spans merged where closer than `join_ms`, the longest [`MAX_SPANS`] kept, in time order.
fn merge_spans(mut spans: Vec<[f64; 2]>, join_ms: f64) -> Vec<[f64; 2]> {
    spans.sort_by(|a, b| a[0].total_cmp(&b[0]));
    let mut out: Vec<[f64; 2]> = Vec::new();
    for s in spans {
        match out.last_mut() {
            Some(l) if s[0] - l[1] <= join_ms => l[1] = l[1].max(s[1]),
            _ => out.push(s),
        }
    }
    if out.len() > MAX_SPANS {
        out.sort_by(|a, b| (b[1] - b[0]).total_cmp(&(a[1] - a[0])));
        out.truncate(MAX_SPANS);
        out.sort_by(|a, b| a[0].total_cmp(&b[0]));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(ttlb: f64, hs: f64, c: Component, ms: f64) -> Budget {
        let floor = Floor {
            handshake_ms: hs,
            request_ms: 20.0,
            serialisation_ms: ttlb - hs - 20.0 - ms,
        };
        Budget {
            ttlb_ms: ttlb,
            floor,
            charges: vec![Charge {
                component: c,
                ms,
                spans: vec![[1.0, 1.0 + ms]],
            }],
            residual_ms: 0.0,
            overhead_bytes: 100,
            drops_to_client: 1,
            congestion_events: Some(2),
            unread: Vec::new(),
            reads: vec!["cwnd".into()],
        }
    }

    #[test]
    fn a_sequence_adds_its_requests_up_and_charges_the_time_between_them_to_the_client() {
        // 0-100 ms, then 130-200 ms (0-RTT: no handshake floor), then 200-260 ms
        let parts = [
            (0, 100_000_000, one(100.0, 20.0, Component::Overhead, 10.0)),
            (
                130_000_000,
                200_000_000,
                one(70.0, 0.0, Component::Endpoint, 5.0),
            ),
            (
                200_000_000,
                260_000_000,
                one(60.0, 0.0, Component::Overhead, 4.0),
            ),
        ];
        let b = sequence_budget(&parts).unwrap();
        assert_eq!(b.ttlb_ms, 260.0);
        assert_eq!(b.floor.handshake_ms, 20.0);
        assert_eq!(b.floor.request_ms, 60.0);
        assert_eq!(b.ms(Component::Overhead), 14.0);
        assert_eq!(b.ms(Component::Endpoint), 5.0);
        assert_eq!(b.ms(Component::Requests), 30.0);
        assert!(b.residual_ms.abs() < 1e-9, "{b:?}");
        assert_eq!((b.overhead_bytes, b.drops_to_client), (300, 3));
        assert_eq!(b.congestion_events, Some(6));
        assert_eq!(b.reads, vec!["cwnd".to_string()]);
        // spans move to the first request's clock
        let spans = |c| {
            b.charges
                .iter()
                .find(|x| x.component == c)
                .unwrap()
                .spans
                .clone()
        };
        assert_eq!(spans(Component::Endpoint), vec![[131.0, 136.0]]);
        assert_eq!(spans(Component::Requests), vec![[100.0, 130.0]]);
        assert_eq!(
            spans(Component::Overhead),
            vec![[1.0, 11.0], [201.0, 205.0]]
        );
        // requests that overlap are not a sequence
        let overlapping = [
            parts[0].clone(),
            (90_000_000, 150_000_000, parts[1].2.clone()),
        ];
        assert!(sequence_budget(&overlapping).is_err());
        assert!(sequence_budget(&[]).is_err());
    }

    /// A 20 ms round trip at 10 Mbit/s each way, and a log of the client's first packet (a
    /// SYN at `syn_ns`) and ten 1500-byte packets towards it from 60 ms.
    fn handshake_path(syn_ns: u64) -> (PathFacts, LinkLog) {
        let path = PathFacts {
            down_delay_ns: 10_000_000,
            up_delay_ns: 10_000_000,
            down_rate_bps: Some(10_000_000),
            up_rate_bps: Some(10_000_000),
        };
        let packet = |at: u64| Packet {
            arrive_ns: at,
            size: 1500,
            fate: Fate::Departed(at + 11_200_000),
        };
        let log = LinkLog {
            down: (0..10)
                .map(|i| packet(60_000_000 + i * 1_200_000))
                .collect(),
            up: vec![packet(syn_ns)],
        };
        (path, log)
    }

    #[test]
    fn a_handshake_shorter_than_its_design_is_refused_not_charged() {
        // 20 ms round trip; TCP with TLS takes two: a record saying 18 ms cannot be the
        // connection's (its floor would count 22 ms that never passed)
        let (path, log) = handshake_path(0);
        let t = |h_ms: u64| Transfer {
            start_ns: 0,
            handshake_done_ns: h_ms * 1_000_000,
            first_byte_ns: 75_000_000,
            last_byte_ns: 90_000_000,
            body_bytes: 12_000,
            design_rtts: 2,
        };
        let e = budget(&log, &path, &t(18), &[]).unwrap_err();
        assert!(e.contains("under its design's 2 round trips"), "{e}");
        // within the clocks' slack of the floor, and beyond it, it is a budget
        assert!(budget(&log, &path, &t(39), &[]).is_ok());
        assert!(budget(&log, &path, &t(45), &[]).is_ok());
    }

    /// A page whose record starts after its first packet reached the link (a browser's
    /// navigation start on its own clocks): the handshake's round trips before the start are
    /// not in the floor, and a handshake shorter than the rest is still refused.
    #[test]
    fn a_page_s_handshake_counts_from_its_first_packet_where_that_came_before_its_start() {
        // the SYN at 0, the record's start 3 ms later; TCP with TLS: 40 ms of design
        let (path, log) = handshake_path(0);
        let start = 3_000_000;
        let t = |h_ms: u64| Transfer {
            start_ns: start,
            handshake_done_ns: h_ms * 1_000_000,
            first_byte_ns: 75_000_000,
            last_byte_ns: 90_000_000,
            body_bytes: 12_000,
            design_rtts: 2,
        };
        let asked = [Asked {
            sent_ns: 41_000_000,
            done_ns: 90_000_000,
        }];
        // done 37 ms after the start, 40 after the SYN: all of it floor
        let b = page_budget(&log, &path, &t(40), &asked, &[]).unwrap();
        assert!((b.floor.handshake_ms - 37.0).abs() < 1e-9, "{b:?}");
        assert_eq!(b.ms(Component::Handshake), 0.0, "{b:?}");
        assert!((b.accounted_ms() - b.ttlb_ms).abs() < 1e-6, "{b:?}");
        // 30 ms after the SYN: refused, the message naming the lead
        let e = page_budget(&log, &path, &t(33), &asked, &[]).unwrap_err();
        assert!(e.contains("less the 3.000 ms its first packet came"), "{e}");
        // the same record whose first packet is at its start has the whole design as floor
        let (_, at_start) = handshake_path(start);
        let e = page_budget(&at_start, &path, &t(40), &asked, &[]).unwrap_err();
        assert!(
            e.contains("under its design's 2 round trips (40.000 ms)"),
            "{e}"
        );
        let b = page_budget(&at_start, &path, &t(45), &asked, &[]).unwrap();
        assert!((b.floor.handshake_ms - 40.0).abs() < 1e-9, "{b:?}");
    }
}
