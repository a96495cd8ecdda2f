//! An implementation's choices read from the wire: what its first flights carry, how much it
//! sends before any feedback (its initial window), whether it paces, how often its receiver
//! acknowledges and when its first retransmission timer fires. Every answer comes from the
//! link's own per-packet log of a probe whose path quiclab set (a known delay, no rate limit)
//! and, for the timers, whose losses it planted; nothing the stack says of itself is read.
//!
//! Sans-IO: the log's times are on the link's clock, the path's facts are passed in. The tests
//! drive the link emulator itself in virtual time with endpoints of known behaviour.

use serde::Serialize;

use crate::{Fate, LinkLog, Packet, PathFacts};

/// Packets arriving this close to each other were written together (one burst): far below
/// any pacer's gap at the rates a fingerprint's probe allows, far above a burst's own spacing
/// (a few microseconds per packet through the kernel).
pub const BURST_GAP_NS: u64 = 50_000;

/// Why a congestion response cannot be read when the object was too small for the window the
/// sender reached (a sender that did not cut it at the first loss, such as BBR's).
pub const ENDED_TOO_SOON: &str = "the transfer ended within two round trips of the loss";

/// A handshake flight is written at once: a gap this long ends it. A retransmission timer fires
/// later than this (three times an initial RTT of 10 ms, the shortest a stack here takes); a
/// flight's datagrams leave within a millisecond of each other, and a busy host has been seen to
/// hold the second of one by 2 ms.
pub const HANDSHAKE_GAP_NS: u64 = 10_000_000;

/// A data packet: a transport payload at least this large (an acknowledgement is far smaller).
pub const DATA_PAYLOAD: u32 = 1000;

/// What a probe's packets carry beyond the transport's payload: the IP header, and UDP's or
/// TCP's (with timestamps).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Framing {
    /// Bytes of each IP packet that are not the transport's payload.
    pub header_bytes: u32,
    /// Round trips the handshake takes by design before the request can reach the server
    /// (QUIC 1, TCP with TLS 1.3 2).
    pub handshake_rtts: u32,
}

impl Framing {
    /// QUIC over UDP over IPv4.
    pub const QUIC: Framing = Framing {
        header_bytes: 28,
        handshake_rtts: 1,
    };
    /// TLS 1.3 over TCP over IPv4 with timestamps.
    pub const TCP_TLS: Framing = Framing {
        header_bytes: 52,
        handshake_rtts: 2,
    };

    fn payload(&self, p: &Packet) -> u32 {
        p.size.saturating_sub(self.header_bytes)
    }

    /// The least IP size of a packet the planted losses count as large: a data packet's
    /// payload ([`DATA_PAYLOAD`]) and the framing.
    fn large_bytes(&self) -> u32 {
        DATA_PAYLOAD + self.header_bytes
    }
}

/// A run of packets one endpoint sent together.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Flight {
    pub packets: u32,
    /// Transport payload bytes (UDP datagrams' payloads, TCP segments').
    pub bytes: u64,
    /// From its first packet's arrival at the link to its last's, µs.
    pub span_us: u64,
    /// The most packets in it written together (gaps of at most [`BURST_GAP_NS`]).
    pub largest_burst: u32,
}

fn flight(packets: &[Packet], f: &Framing) -> Flight {
    let (first, last) = match (packets.first(), packets.last()) {
        (Some(a), Some(b)) => (a.arrive_ns, b.arrive_ns),
        _ => (0, 0),
    };
    Flight {
        packets: packets.len() as u32,
        bytes: packets.iter().map(|p| f.payload(p) as u64).sum(),
        span_us: (last - first) / 1000,
        largest_burst: largest_burst(packets),
    }
}

/// The runs of packets each arriving within [`BURST_GAP_NS`] of the one before: each burst's
/// packet count, in order.
fn bursts(packets: &[Packet]) -> Vec<u32> {
    let mut out: Vec<u32> = Vec::new();
    let mut prev: Option<u64> = None;
    for p in packets {
        match (prev, out.last_mut()) {
            (Some(t), Some(run)) if p.arrive_ns - t <= BURST_GAP_NS => *run += 1,
            _ => out.push(1),
        }
        prev = Some(p.arrive_ns);
    }
    out
}

/// The longest burst.
fn largest_burst(packets: &[Packet]) -> u32 {
    bursts(packets).into_iter().max().unwrap_or(0)
}

/// The burst a typical packet leaves in, of the bursts' lengths ([`bursts`]): the least burst
/// length such that half the packets leave in bursts no longer (the packet-weighted median).
/// Unlike the longest burst, an extreme, it stays put when the acknowledgements' timing lets a
/// few large bursts out: an unpaced quiche's longest read 156 to 298 packets in four
/// transfers, this 125 to 131.
fn typical_burst(mut runs: Vec<u32>) -> u32 {
    runs.sort_unstable();
    let total: u32 = runs.iter().sum();
    let mut seen = 0;
    for r in runs {
        seen += r;
        if 2 * seen >= total {
            return r;
        }
    }
    0
}

/// A sender whose fullest round trip of data left less than this share of it within its
/// busiest tenth of a round trip spreads its data over the round trip: it paces. An unpaced
/// sender, on a link without a rate limit, sends each round trip's data as the previous one's
/// acknowledgements arrive, and they arrive as close together as that data left: quiche's
/// fullest round trip read 0.98 to 1.00 in four runs (and 0.89 to 0.95 in every whole round
/// trip of two runs before), Linux TCP's with Cubic 0.90 and 0.97, where every paced stack's
/// read 0.14 to 0.29 in four runs (ngtcp2's, in GSO batches of up to 45 packets, 0.17 to
/// 0.29).
pub const PACED_BELOW: f64 = 0.5;

/// The least data packets a round trip needs to be read for pacing: a tenth of it then holds
/// two of a paced sender's at least.
const PACING_ROUND_PACKETS: usize = 20;

/// Of the fullest whole round trip of data (`rtt_ns` each from the first data packet's
/// arrival; the last, cut short by the transfer's end, is not whole), the share of its packets
/// that arrived within its busiest tenth of a round trip, and how many packets it held. `None`
/// when no whole round trip held [`PACING_ROUND_PACKETS`]. `times`: the data packets' arrivals,
/// in order.
fn busiest_tenth(times: &[u64], rtt_ns: u64) -> Option<(f64, u32)> {
    let (&t0, &end) = (times.first()?, times.last()?);
    let whole = (end - t0) / rtt_ns;
    let round = |k: u64| {
        let from = times.partition_point(|&t| t < t0 + k * rtt_ns);
        let to = times.partition_point(|&t| t < t0 + (k + 1) * rtt_ns);
        &times[from..to]
    };
    let fullest = (0..whole).map(round).max_by_key(|r| r.len())?;
    if fullest.len() < PACING_ROUND_PACKETS {
        return None;
    }
    let tenth = rtt_ns / 10;
    let mut from = 0;
    let mut most = 0;
    for (i, &t) in fullest.iter().enumerate() {
        while t - fullest[from] >= tenth {
            from += 1;
        }
        most = most.max(i + 1 - from);
    }
    Some((most as f64 / fullest.len() as f64, fullest.len() as u32))
}

/// The packets from the first to the first gap longer than `gap_ns`.
fn first_flight(packets: &[Packet], gap_ns: u64) -> &[Packet] {
    let end = packets
        .windows(2)
        .position(|w| w[1].arrive_ns - w[0].arrive_ns > gap_ns)
        .map_or(packets.len(), |i| i + 1);
    &packets[..end]
}

/// The client's first packet sent at or after `t` (the link's log keeps each direction in the
/// order packets reached it): its answer to a packet delivered to it then.
fn client_after(log: &LinkLog, t: u64) -> Option<&Packet> {
    log.up.iter().find(|p| p.arrive_ns >= t)
}

/// The client's first acknowledgement sent at or after `t`, once the data flow: its first
/// packet then smaller than a data packet. After the handshake a downloading client sends a
/// datagram that large only as a path-MTU probe (quinn's: PING and PADDING, 1312 bytes, which
/// it sent within 0.1 ms of a delivery in 9 of 24 isolated-loss probes), and that answers
/// nothing.
fn client_ack_after(log: &LinkLog, t: u64) -> Option<&Packet> {
    log.up
        .iter()
        .find(|p| p.arrive_ns >= t && p.size < DATA_PAYLOAD)
}

fn delivered(p: &Packet) -> Option<u64> {
    match p.fate {
        Fate::Departed(t) => Some(t),
        _ => None,
    }
}

/// What the wire shows of one clean transfer (a probe without loss or rate limit, over a path
/// whose delays are known): the client is the side that sends upwards.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct WireCard {
    /// The client's first flight (until it hears from the server): its hello.
    pub client_first_flight: Flight,
    /// The first datagram's (or segment's) payload, bytes.
    pub client_first_payload: u32,
    /// The largest payload the client sent, bytes.
    pub client_largest_payload: u32,
    /// The server's first flight, in answer to the client's.
    pub server_first_flight: Flight,
    pub server_first_payload: u32,
    pub server_largest_payload: u32,
    /// The server's first round trip of data: what it sent from the moment the request could
    /// reach it until the first acknowledgement of that data could (one path RTT later).
    pub first_data_flight: Option<Flight>,
    /// The most packets the server wrote together from its first data on.
    pub largest_burst: Option<u32>,
    /// The burst its typical packet left in from its first data on (the packet-weighted
    /// median): its pacer's burst, or an unpaced sender's answer to the acknowledgements.
    pub typical_burst: Option<u32>,
    /// Of its fullest whole round trip of data, the share that left within the busiest tenth
    /// of a round trip (below [`PACED_BELOW`]: it paces), and that round trip's data packets.
    pub busiest_tenth: Option<(f64, u32)>,
    /// Data packets delivered to the client per packet the client sent while they arrived:
    /// how many ack-eliciting packets its acknowledgements cover.
    pub data_per_ack: Option<f64>,
}

/// Reads a clean probe's log. `Err` when a direction has no packet; without a data flight after
/// the handshake (no answer to the hello), the items that need one are `None`.
pub fn wire(log: &LinkLog, path: &PathFacts, f: &Framing) -> Result<WireCard, String> {
    if log.up.is_empty() || log.down.is_empty() {
        return Err("the log has no packet in one direction".into());
    }
    let c1 = first_flight(&log.up, HANDSHAKE_GAP_NS);
    let s1 = first_flight(&log.down, HANDSHAKE_GAP_NS);
    let largest = |ps: &[Packet]| ps.iter().map(|p| f.payload(p)).max().unwrap_or(0);

    let data_start = data_start(log, path, f);
    // the bursts from the first data on
    let later_bursts = data_start.map(|i| bursts(&log.down[i..]));
    let first_data_flight = data_start.map(|start| {
        let t0 = log.down[start].arrive_ns;
        let end = log.down[start..]
            .iter()
            .position(|p| p.arrive_ns >= t0 + path.rtt_ns())
            .map_or(log.down.len(), |i| start + i);
        flight(&log.down[start..end], f)
    });

    let data_packets = || {
        log.down[data_start.unwrap_or(log.down.len())..]
            .iter()
            .filter(|p| f.payload(p) >= DATA_PAYLOAD)
    };
    // when the sender wrote its data (the link takes a packet as it is written)
    let written: Vec<u64> = data_packets().map(|p| p.arrive_ns).collect();
    // acknowledgements: the client's packets sent while the response's data reached it
    let data: Vec<u64> = data_packets().filter_map(delivered).collect();
    let data_per_ack = match (data.first(), data.last()) {
        (Some(&a), Some(&b)) if b > a => {
            let acks = log
                .up
                .iter()
                .filter(|p| p.arrive_ns >= a && p.arrive_ns <= b)
                .count();
            (acks > 0).then(|| data.len() as f64 / acks as f64)
        }
        _ => None,
    };

    Ok(WireCard {
        client_first_flight: flight(c1, f),
        client_first_payload: f.payload(&log.up[0]),
        client_largest_payload: largest(&log.up),
        server_first_flight: flight(s1, f),
        server_first_payload: f.payload(&log.down[0]),
        server_largest_payload: largest(&log.down),
        first_data_flight,
        largest_burst: later_bursts
            .as_ref()
            .map(|b| b.iter().copied().max().unwrap_or(0)),
        typical_burst: later_bursts.map(typical_burst),
        busiest_tenth: busiest_tenth(&written, path.rtt_ns()),
        data_per_ack,
    })
}

/// The drops of the first-timeout probe, planted from a clean probe's first flights: the
/// server's first flight, and the client's first retransmission and the packet after it (so
/// that the server hears nothing more until its own timer fires, whether the client probes with
/// one datagram or two).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct FirstLossPlan {
    /// Downlink packets 0 to `server_flight - 1` are dropped.
    pub server_flight: u32,
    /// Uplink packets `client_flight` and `client_flight + 1` are dropped.
    pub client_flight: u32,
}

impl FirstLossPlan {
    /// The plan for a stack whose clean probe showed `card`.
    pub fn of(card: &WireCard) -> FirstLossPlan {
        FirstLossPlan {
            server_flight: card.server_first_flight.packets,
            client_flight: card.client_first_flight.packets,
        }
    }

    /// The plan the first flights of `log` call for (each side's packets until a gap of
    /// [`HANDSHAKE_GAP_NS`]): for a probe whose first flight differed from the clean probe's,
    /// the plan of its next attempt.
    pub fn of_log(log: &LinkLog) -> FirstLossPlan {
        FirstLossPlan {
            server_flight: first_flight(&log.down, HANDSHAKE_GAP_NS).len() as u32,
            client_flight: first_flight(&log.up, HANDSHAKE_GAP_NS).len() as u32,
        }
    }

    /// The link keys that plant it (`down-drop-packets`, `up-drop-packets`).
    pub fn link_keys(&self) -> [(&'static str, String); 2] {
        [
            (
                "down-drop-packets",
                format!("0-{}", self.server_flight.saturating_sub(1)),
            ),
            (
                "up-drop-packets",
                format!("{}-{}", self.client_flight, self.client_flight + 1),
            ),
        ]
    }
}

/// When each side's first retransmission timer fired, with the first flights lost: from the
/// first datagram of its first flight (the one carrying its Initial packet, whose space's timer
/// is the earliest; a busy host has been seen to hold a flight's second datagram 3 ms) to its
/// next packet.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FirstTimeout {
    /// The client's, ms (`None` with `client_why`).
    pub client_ms: Option<f64>,
    pub client_why: Option<String>,
    pub server_ms: Option<f64>,
    pub server_why: Option<String>,
}

fn ms(ns: u64) -> f64 {
    (ns as f64 / 1e3).round() / 1e3
}

/// Reads the first-timeout probe's log, planted as `plan` says.
pub fn first_timeout(log: &LinkLog, plan: &FirstLossPlan) -> FirstTimeout {
    let (c, s) = (plan.client_flight as usize, plan.server_flight as usize);
    let dropped = |p: &Packet| matches!(p.fate, Fate::Dropped(_));
    let mut out = FirstTimeout {
        client_ms: None,
        client_why: None,
        server_ms: None,
        server_why: None,
    };
    // the client: its retransmission must come before anything reached it
    let first_heard = log.down.iter().filter_map(delivered).min();
    match (c.checked_sub(1).and_then(|i| log.up.get(i)), log.up.get(c)) {
        (Some(_), Some(probe)) => {
            if first_heard.is_some_and(|h| h <= probe.arrive_ns) {
                out.client_why = Some("the server's packets reached the client first".into());
            } else {
                out.client_ms = Some(ms(probe.arrive_ns - log.up[0].arrive_ns));
            }
        }
        _ => out.client_why = Some("the client sent no second flight".into()),
    }
    // the server: its first flight all dropped, and its next packet sent before any of the
    // client's later packets reached it
    let flight_lost = log.down.len() > s && log.down[..s].iter().all(dropped);
    match (
        s.checked_sub(1).and_then(|i| log.down.get(i)),
        log.down.get(s),
    ) {
        (Some(last), Some(probe))
            if flight_lost && probe.arrive_ns - last.arrive_ns > HANDSHAKE_GAP_NS =>
        {
            let answered = log
                .up
                .iter()
                .skip(c)
                .filter_map(delivered)
                .any(|t| t <= probe.arrive_ns);
            if answered {
                out.server_why =
                    Some("the server's next packet answered one of the client's (no timer)".into());
            } else {
                out.server_ms = Some(ms(probe.arrive_ns - log.down[0].arrive_ns));
            }
        }
        (Some(_), Some(_)) => {
            out.server_why = Some(format!(
                "the server's first flight was not the {s} packets planted"
            ))
        }
        _ => out.server_why = Some("the server sent nothing after its first flight".into()),
    }
    out
}

/// The drops of the congestion-response probe: two data packets. The first, in the fourth round
/// trip of data of a clean probe, ends slow start; the second, four round trips after the first
/// in the log of a probe with the first alone, falls where the sender has settled into
/// congestion avoidance, sending its window each round trip, so that the wire shows the window
/// before it and after it as bytes in flight. Both are counted among the large downlink packets
/// (`drop-large`): the trials a plan is planted in send the same data packets, but not the same
/// small ones around them (aioquic's acknowledgements and stream frames of 80 bytes fall
/// differently from trial to trial, and a plan by the link's own count landed on one).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct LossPlan {
    /// The downlink packets dropped, counted among those of at least `min_bytes` (0-based).
    pub first: u32,
    pub second: Option<u32>,
    /// A large packet's least IP size: a data packet's payload and the framing.
    pub min_bytes: u32,
}

/// The round trip of data the first planted loss falls in (0: the first).
pub const LOSS_ROUND: u64 = 3;
/// Round trips from the first planted loss to the second.
pub const SETTLE_ROUNDS: u64 = 4;

/// The data packets on either side of a planted loss that must be data of its size.
const PLANT_MARGIN: usize = 2;

/// The first data packet arriving at or after `at`, from `from` on, with [`PLANT_MARGIN`] data
/// packets of its own size on either side: a round trip's first packet may be no data of the
/// transfer's at all (msquic sends its path-MTU probes there, each larger than the packets
/// before it, and a lost probe is no congestion signal), and a probe's data packets may shift
/// by one from its plan's. Without such a packet, the first data packet from `at` on.
fn data_at(log: &LinkLog, f: &Framing, from: usize, at: u64) -> Option<usize> {
    let down = &log.down;
    let data = |i: usize| {
        down.get(i)
            .filter(|p| f.payload(p) >= DATA_PAYLOAD)
            .map(|p| p.size)
    };
    let candidates = (from..down.len()).filter(|&i| down[i].arrive_ns >= at);
    // the margin counts data packets only: the small packets between them do not break it
    let is_data = |p: &&Packet| f.payload(p) >= DATA_PAYLOAD;
    let around = |i: usize| {
        let size = down[i].size;
        let like = |p: &&Packet| p.size == size;
        let before = down[..i].iter().rev().filter(is_data).take(PLANT_MARGIN);
        let after = down[i + 1..].iter().filter(is_data).take(PLANT_MARGIN);
        before.filter(like).count() == PLANT_MARGIN && after.filter(like).count() == PLANT_MARGIN
    };
    candidates
        .clone()
        .find(|&i| data(i).is_some() && around(i))
        .or_else(|| candidates.into_iter().find(|&i| data(i).is_some()))
}

impl LossPlan {
    /// How many packets of at least `min_bytes` come before downlink packet `i`.
    fn large_before(log: &LinkLog, min_bytes: u32, i: usize) -> u32 {
        log.down[..i].iter().filter(|p| p.size >= min_bytes).count() as u32
    }

    /// The index in `log` (as the link counts its downlink packets, 0-based) of the `large`th
    /// large packet: where a loss planted as `large` fell.
    pub fn index_in(&self, log: &LinkLog, large: u32) -> Result<u32, String> {
        log.down
            .iter()
            .enumerate()
            .filter(|(_, p)| p.size >= self.min_bytes)
            .nth(large as usize)
            .map(|(i, _)| i as u32)
            .ok_or_else(|| {
                format!(
                    "the probe sent fewer than {} packets of {} bytes or more",
                    large + 1,
                    self.min_bytes
                )
            })
    }

    /// The first loss, planted from a clean probe's log, or why its transfer is too short.
    pub fn first_of(log: &LinkLog, path: &PathFacts, f: &Framing) -> Result<LossPlan, String> {
        let start = data_start(log, path, f).ok_or("no data after the handshake")?;
        let at = log.down[start].arrive_ns + LOSS_ROUND * path.rtt_ns();
        let first = data_at(log, f, start, at)
            .ok_or("the transfer ended before its fourth round trip of data")?;
        let min_bytes = f.large_bytes();
        Ok(LossPlan {
            first: Self::large_before(log, min_bytes, first),
            second: None,
            min_bytes,
        })
    }

    /// The second loss, planted from the log of a probe with the first alone.
    pub fn then(self, log: &LinkLog, path: &PathFacts, f: &Framing) -> Result<LossPlan, String> {
        let i = self
            .index_in(log, self.first)
            .map_err(|_| "the first planted loss was never sent")? as usize;
        let at = log.down[i].arrive_ns + SETTLE_ROUNDS * path.rtt_ns();
        let second = data_at(log, f, i + 1, at).ok_or(
            "the transfer ended within four round trips of the first loss: a larger object is needed",
        )?;
        Ok(LossPlan {
            second: Some(Self::large_before(log, self.min_bytes, second)),
            ..self
        })
    }

    /// The link keys that plant it.
    pub fn link_keys(&self) -> [(&'static str, String); 1] {
        let list = match self.second {
            Some(s) => format!("{},{s}", self.first),
            None => self.first.to_string(),
        };
        [("down-drop-large", format!("{}/{list}", self.min_bytes))]
    }
}

/// The index of the server's first packet of data: the first that leaves once the request can
/// have reached it, after the handshake's round trips.
fn data_start(log: &LinkLog, path: &PathFacts, f: &Framing) -> Option<usize> {
    let mut heard = delivered(log.down.first()?);
    let mut request_at = None;
    for _ in 0..f.handshake_rtts {
        let h = heard?;
        let answer = client_after(log, h)?;
        let reaches = answer.arrive_ns + path.up_delay_ns;
        request_at = Some(reaches);
        heard = log
            .down
            .iter()
            .find(|p| p.arrive_ns >= reaches)
            .and_then(delivered);
    }
    let at = request_at?;
    log.down.iter().position(|p| p.arrive_ns >= at)
}

/// The sender's window before and after one loss, as the wire shows it: the bytes in flight
/// (sent, less what the client's acknowledgements reaching the sender had seen delivered).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Response {
    /// The most bytes in flight within a round trip and a half of the lost packet's sending:
    /// the window when the loss was noticed (in congestion avoidance, the flight is the
    /// window).
    pub before_bytes: u64,
    /// The most bytes in flight over the half round trip that starts one round trip after that
    /// peak: the window the sender settled on once its recovery (a round trip) ended, and
    /// a sender that cuts its flight gradually (TCP's proportional rate reduction) reached it;
    /// or over the second half of the recovery's round trip (from when the loss could first
    /// be noticed), where less: a sender that rolls its cut back once its recovery is over
    /// holds it only that long.
    pub after_bytes: u64,
    /// `after / before`: the multiplicative decrease.
    pub beta: f64,
}

/// The bytes in flight just after each downlink packet the sender sent, as the sender sees
/// them: what it sent (dropped packets left out, but for `counted`, which stays in flight) less
/// the most the client had seen delivered when it sent the acknowledgements that had reached
/// the sender by then. One sample (the packet's index in the log, its arrival at the link, the
/// flight) per packet counted.
fn in_flight(log: &LinkLog, f: &Framing, counted: Option<usize>) -> Vec<(usize, u64, u64)> {
    // what the client had seen delivered when it sent each of its packets, in the order they
    // reach the sender
    let mut deliveries: Vec<(u64, u64)> = log
        .down
        .iter()
        .filter_map(|p| delivered(p).map(|t| (t, f.payload(p) as u64)))
        .collect();
    deliveries.sort_unstable();
    let mut cum = 0;
    let delivered_by: Vec<(u64, u64)> = deliveries
        .iter()
        .map(|&(t, b)| {
            cum += b;
            (t, cum)
        })
        .collect();
    let seen = |t: u64| match delivered_by.partition_point(|&(d, _)| d <= t) {
        0 => 0,
        n => delivered_by[n - 1].1,
    };
    let mut acks: Vec<(u64, u64)> = log
        .up
        .iter()
        .filter_map(|p| delivered(p).map(|reach| (reach, seen(p.arrive_ns))))
        .collect();
    acks.sort_unstable();
    // the most the sender has seen acknowledged, as the acknowledgements reach it in turn
    let (mut best, mut reached) = (0, 0);
    let mut sent = 0u64;
    let mut samples = Vec::new();
    for (j, p) in log.down.iter().enumerate() {
        if Some(j) != counted && matches!(p.fate, Fate::Dropped(_)) {
            continue;
        }
        sent += f.payload(p) as u64;
        while let Some(&(_, seen)) = acks.get(reached).filter(|a| a.0 <= p.arrive_ns) {
            best = best.max(seen);
            reached += 1;
        }
        samples.push((j, p.arrive_ns, sent.saturating_sub(best)));
    }
    samples
}

/// Reads the congestion-response probe's log, planted as `plan` says (both losses): the window
/// before and after the second.
pub fn response(
    log: &LinkLog,
    path: &PathFacts,
    f: &Framing,
    plan: &LossPlan,
) -> Result<Response, String> {
    let second = plan.second.ok_or("the plan has no second loss")?;
    response_at(log, path, f, plan.index_in(log, second)?)
}

/// The flight before and after the planted loss of downlink packet `lost` (0-based, as the
/// link counts them), read as [`response`] reads the second loss's. Read at the first loss, in
/// slow start, it tells a sender that cuts its window at a loss (the flight after is its cut
/// window) from one that does not (BBR's flight after a loss in its startup is what its model
/// says, as large as before or larger, and its later flight follows its gain cycle's phase,
/// not the loss).
pub fn response_at(
    log: &LinkLog,
    path: &PathFacts,
    f: &Framing,
    lost: u32,
) -> Result<Response, String> {
    let i = lost as usize;
    let lost = log.down.get(i).ok_or("the planted packet was never sent")?;
    if !matches!(lost.fate, Fate::Dropped(_)) {
        return Err("the planted packet was not dropped".into());
    }
    if f.payload(lost) < DATA_PAYLOAD {
        return Err(format!(
            "the planted loss fell on a {}-byte packet, not data (the probe's packets were not \
             the same as its plan's)",
            f.payload(lost)
        ));
    }
    let rtt = path.rtt_ns();
    // the packet planted counts as in flight, as the sender sees it, until it is noticed
    // (below); earlier drops (the first planted loss) were noticed long before
    let samples: Vec<(u64, u64)> = in_flight(log, f, Some(i))
        .into_iter()
        .map(|(_, t, b)| (t, b))
        .collect();
    let last = samples.last().map_or(0, |s| s.0);
    let (peak_t, before) = samples
        .iter()
        .filter(|(t, _)| *t >= lost.arrive_ns && *t <= lost.arrive_ns + rtt * 3 / 2)
        .max_by_key(|(_, b)| *b)
        .copied()
        .ok_or("nothing was sent after the planted loss")?;
    let (from, to) = (peak_t + rtt, peak_t + rtt * 3 / 2);
    if to + rtt > last {
        return Err(ENDED_TOO_SOON.into());
    }
    // by then the planted packet was noticed lost: out of the flight
    let noticed = f.payload(lost) as u64;
    let most = |from: u64, to: u64| {
        samples
            .iter()
            .filter(|(t, _)| *t >= from && *t < to)
            .map(|s| s.1.saturating_sub(noticed))
            .max()
    };
    // and the recovery's round trip: a sender that rolls its cut back once its recovery is
    // over (quiche's Cubic, when its recovery lost fewer packets than a fifth of its window's,
    // a round trip after its cut: its qlog showed 905 and 1005 ms in seven probes; tquic's BBR
    // keeps its flight in recovery and then its model) holds the cut window only until then, and the later half
    // round trip may fall after it. The recovery starts when the loss can first be noticed:
    // when the client's first packet after the third delivered behind the lost one reaches
    // the sender (RFC 9002's packet threshold); the rollback needs the acknowledgement of a
    // packet sent after that, a path RTT later at the soonest. It is read from the least
    // flight in its first half on: until the sender has taken in the acknowledgements of what
    // it sent before, its flight falls; a sender held to its cut sends nothing until its
    // flight is below the cut, and an unpaced one takes a burst of acknowledgements in at once
    // and sends its cut window in a burst, as quiche's did within a millisecond, after packets
    // sent at the window before while the burst was being read (and then nothing until the
    // rollback: a half round trip later found no packet of it). The less of the two: a
    // gradual reduction (TCP's PRR) is done only by the later one
    let late = most(from, to);
    let noticed_at = log.down[i + 1..]
        .iter()
        .filter_map(delivered)
        .nth(2)
        .and_then(|third| client_ack_after(log, third))
        .and_then(delivered);
    let recovery = noticed_at.and_then(|n| {
        // from the least flight of its first half (the acknowledgements of what was sent
        // before taken in) to the round trip's end
        let (from, _) = samples
            .iter()
            .filter(|(t, _)| *t >= n && *t < n + rtt / 2)
            .min_by_key(|(_, b)| *b)?;
        most(*from, n + rtt)
    });
    // an unpaced sender may send nothing in one of the two (quiche's bursts come a round trip
    // apart)
    let after = match (late, recovery) {
        (Some(l), Some(r)) => l.min(r),
        (Some(x), None) | (None, Some(x)) => x,
        (None, None) => {
            return Err("the sender sent nothing in the round trip after the loss's".into());
        }
    };
    Ok(Response {
        before_bytes: before,
        after_bytes: after,
        beta: (after as f64 / before.max(1) as f64 * 1000.0).round() / 1000.0,
    })
}

/// The data packets at the end of a clean probe's transfer that the tail probe loses: few
/// enough to lie in its last flight, enough that a sender probing with one or two packets
/// probes for lost data.
pub const TAIL_PACKETS: usize = 5;

/// How long the tail's blackout lasts: longer than a gap within a flight (a receiver's
/// acknowledgement delay, 25 ms by default, is the longest), shorter than any retransmission
/// timer (at least the round trip), so that the tail is lost whole and the timer's probe passes.
pub fn tail_blackout_ns(path: &PathFacts) -> u64 {
    path.rtt_ns() * 3 / 5
}

/// The tail probe's plan, made from a clean probe's log: the server's downlink is blacked out
/// for [`tail_blackout_ns`] from the byte its last [`TAIL_PACKETS`] data packets start at (fewer
/// when its last flight, the packets after its last silence that long, holds fewer, or when they
/// spread over more than half the blackout).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct TailPlan {
    /// IP bytes of the downlink packets before the tail.
    pub after_bytes: u64,
    /// The data packets planted as the tail.
    pub packets: u32,
    /// Payload bytes the clean probe's server sent until its last data packet and what followed
    /// it within the blackout's length (what the tail probe must have sent by the blackout's
    /// end: a TCP stream's bytes exactly, QUIC's with its packets' own framing).
    pub bytes: u64,
    /// The blackout's length, ns.
    pub length_ns: u64,
}

impl TailPlan {
    pub fn of(clean: &LinkLog, path: &PathFacts, f: &Framing) -> Result<TailPlan, String> {
        let down = &clean.down;
        let length_ns = tail_blackout_ns(path);
        let is_data = bulk(down, f);
        let last = down
            .iter()
            .rposition(&is_data)
            .ok_or("the clean probe's server sent no data")?;
        // the last flight: the packets after the last silence before the last data packet
        let flight_start = (1..=last)
            .rev()
            .find(|&i| down[i].arrive_ns - down[i - 1].arrive_ns >= length_ns)
            .unwrap_or(0);
        let end = down[last].arrive_ns;
        let data: Vec<usize> = (flight_start..=last)
            .filter(|&i| is_data(&down[i]))
            .filter(|&i| end - down[i].arrive_ns < length_ns / 2)
            .collect();
        let tail = &data[data.len().saturating_sub(TAIL_PACKETS)..];
        Ok(TailPlan {
            after_bytes: down[..tail[0]].iter().map(|p| u64::from(p.size)).sum(),
            packets: tail.len() as u32,
            bytes: down
                .iter()
                .take_while(|p| p.arrive_ns < end + length_ns)
                .map(|p| u64::from(f.payload(p)))
                .sum(),
            length_ns,
        })
    }

    /// The link key that plants it (`down-blackout`).
    pub fn link_keys(&self) -> [(&'static str, String); 1] {
        [(
            "down-blackout",
            format!("{}b/{}us", self.after_bytes, self.length_ns / 1000),
        )]
    }
}

/// The downlink's bulk data: packets at least [`DATA_PAYLOAD`] and at most the payload its data
/// packets carry most often. A larger one is a path-MTU probe (quic-go's 1394-byte ones come
/// after its transfer), no part of the transfer's tail.
fn bulk(down: &[Packet], f: &Framing) -> impl Fn(&Packet) -> bool + use<> {
    let mut counts = std::collections::BTreeMap::new();
    for p in down.iter().filter(|p| f.payload(p) >= DATA_PAYLOAD) {
        *counts.entry(f.payload(p)).or_insert(0u32) += 1;
    }
    // the most frequent payload; of equally frequent ones, the largest
    let modal = counts
        .iter()
        .max_by_key(|&(size, n)| (*n, *size))
        .map_or(u32::MAX, |(&size, _)| size);
    let f = *f;
    move |p| (DATA_PAYLOAD..=modal).contains(&f.payload(p))
}

/// A window after a loss above this share of the one before was not cut: what one round trip
/// of additive increase and the reading's 0.05 leave of a cut. A controller that cuts by a
/// factor (Reno's 0.5, Cubic's 0.7) reads below; one that keeps its model of the path through
/// a loss (BBR) reads about 1, higher or lower by what its pacing gain does in that round trip,
/// and is said to make no cut, as 1. At a first loss, in slow start, tquic's BBR and Linux's
/// read 0.97 to 0.99, and the senders that cut 0.43 to 0.81 (the window grown, until the
/// loss was noticed, by the packets acknowledged), but ngtcp2's once 0.94 (a paced flight
/// lagging its window): there it only backs a second loss that gives no reading.
pub const NO_CUT: f64 = 0.9;

/// A probe is answered at once (an ack-eliciting packet after a gap in packet numbers): the
/// client's next packet reaches the link within this of the probe's delivery.
pub const ANSWER_NS: u64 = 5_000_000;

/// An acknowledgement of data leaves the client within this of the data's delivery: four
/// times QUIC's default max_ack_delay (25 ms), over twice the 40 ms Linux's TCP delays its
/// acknowledgements by here. A client packet later than that acknowledges nothing new: it is
/// the client's own retransmission (an HTTP/2 WINDOW_UPDATE whose acknowledgement the tail's
/// blackout took, sent again 324 ms after the server's last packet) or a keep-alive, which
/// re-arms no sender's timer.
pub const ACK_AFTER_DATA_NS: u64 = 100_000_000;

/// When the server's timer fired with its tail lost: from the last data packet of the blackout
/// (the last the server sent before falling silent; an acknowledgement of the client's packets
/// may follow it, and arms no timer) to its next packet that is a probe (data, or a packet the
/// client answers at once, as quinn's IMMEDIATE_ACK probes are; an acknowledgement is neither,
/// nor is a path-MTU probe, larger than the data's packets, on a timer of its own).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TailTimeout {
    pub ms: Option<f64>,
    /// From the client's last acknowledgement that reached the server before the probe (its
    /// last packet sent within [`ACK_AFTER_DATA_NS`] of the last data delivered to it): a
    /// timer re-armed at each acknowledgement (RFC 8985's tail-loss probe, Linux TCP's) reads
    /// the same here whenever that came; one armed at the last packet sent (RFC 9002's) reads
    /// what the acknowledgements' delay left of it.
    pub after_ack_ms: Option<f64>,
    pub why: Option<String>,
    /// Downlink packets the blackout dropped.
    pub dropped: u32,
    /// Of them, data packets: none when the server sent less than the clean probe's bytes
    /// before the tail (so the probe was a clean transfer, from which a tail can be planned).
    pub data_dropped: u32,
}

/// Reads the tail probe's log, planted as `plan` says.
pub fn tail_timeout(log: &LinkLog, plan: &TailPlan, f: &Framing) -> TailTimeout {
    let down = &log.down;
    let dropped_at: Vec<usize> = (0..down.len())
        .filter(|&i| matches!(down[i].fate, Fate::Dropped(_)))
        .collect();
    let is_data = bulk(down, f);
    let out = |ms, why: Option<String>| TailTimeout {
        ms,
        after_ack_ms: None,
        why,
        dropped: dropped_at.len() as u32,
        data_dropped: dropped_at.iter().filter(|&&i| is_data(&down[i])).count() as u32,
    };
    // the timer runs from the last data packet lost (an acknowledgement the blackout caught
    // after it arms no timer)
    let Some(&j) = dropped_at.iter().rev().find(|&&i| is_data(&down[i])) else {
        return out(
            None,
            Some(format!(
                "no data was dropped: the server sent no more than the {} bytes before the tail",
                plan.after_bytes
            )),
        );
    };
    // the blackout must have held the transfer's end, not ended before its last round trip of
    // data (a last flight later or longer than the clean probe's): by its end the server had
    // sent what the clean transfer held, less at most three packets' difference in framing
    // (QUIC's acknowledgements and packing vary a little between runs)
    let last_dropped = dropped_at[dropped_at.len() - 1];
    let sent: u64 = down[..=last_dropped]
        .iter()
        .map(|p| u64::from(f.payload(p)))
        .sum();
    let largest = down.iter().map(|p| f.payload(p)).max().unwrap_or(0);
    if sent + 3 * u64::from(largest) < plan.bytes {
        return out(
            None,
            Some(format!(
                "the blackout ended before the transfer's end ({sent} of its {} bytes sent by \
                 then): it held a flight before the last, not the tail",
                plan.bytes
            )),
        );
    }
    let answered = |p: &Packet| {
        delivered(p)
            .is_some_and(|t| client_ack_after(log, t).is_some_and(|u| u.arrive_ns <= t + ANSWER_NS))
    };
    // a datagram larger than the data's is a path-MTU probe, sent on a timer of its own
    let mtu_probe = |p: &Packet| f.payload(p) >= DATA_PAYLOAD && !is_data(p);
    match (j + 1..down.len())
        .filter(|&k| !mtu_probe(&down[k]))
        .find(|&k| is_data(&down[k]) || answered(&down[k]))
    {
        Some(k) => {
            let probe = &down[k];
            // the last data delivered to the client before the probe, and the client's last
            // packet that can acknowledge it
            let last_data = down[..k]
                .iter()
                .filter(|p| is_data(p))
                .filter_map(delivered)
                .filter(|&t| t <= probe.arrive_ns)
                .max();
            let after_ack_ms = last_data.and_then(|d| {
                log.up
                    .iter()
                    .filter(|u| u.arrive_ns <= d + ACK_AFTER_DATA_NS)
                    .filter_map(delivered)
                    .filter(|&t| t <= probe.arrive_ns)
                    .max()
                    .map(|t| ms(probe.arrive_ns - t))
            });
            TailTimeout {
                after_ack_ms,
                ..out(Some(ms(probe.arrive_ns - down[j].arrive_ns)), None)
            }
        }
        None => out(
            None,
            Some("the server sent no probe after its tail was lost".into()),
        ),
    }
}

/// How a server shared its sending between two responses on one connection: of the stream
/// bytes its datagrams carried from the first to the last with the urgent response's data (in
/// the order the client received them), the urgent response's share. The least urgent response
/// is the stream that carried the most bytes, the urgent one the stream that carried the next
/// most (the priorities probe's page: 800 kB and 30 kB, the others 5 and 1 kB). A server that
/// sends the urgent response before the rest reads 1, one that shares its sending evenly about
/// 0.5; one that answers in order reads 1 too, its urgent response coming after the other
/// (which the page record tells).
pub fn urgent_share(carried: &[Vec<crate::one_rtt::Span>]) -> Result<f64, String> {
    let mut per_stream = std::collections::BTreeMap::<u64, u64>::new();
    for &(s, _, l) in carried.iter().flatten() {
        *per_stream.entry(s).or_default() += l;
    }
    let mut by_size: Vec<(u64, u64)> = per_stream.into_iter().map(|(s, b)| (b, s)).collect();
    by_size.sort_unstable_by(|a, b| b.cmp(a));
    let (&(_, bulk), &(_, urgent)) = match (by_size.first(), by_size.get(1)) {
        (Some(a), Some(b)) => (a, b),
        _ => return Err("the server's packets carry fewer than two responses".into()),
    };
    let has = |k: usize, s: u64| carried[k].iter().any(|sp| sp.0 == s && sp.2 > 0);
    let first = (0..carried.len()).find(|&k| has(k, urgent));
    let last = (0..carried.len()).rev().find(|&k| has(k, urgent));
    let (Some(first), Some(last)) = (first, last) else {
        return Err("no packet carried the urgent response".into());
    };
    let bytes = |s: u64| -> u64 {
        carried[first..=last]
            .iter()
            .flatten()
            .filter(|sp| sp.0 == s)
            .map(|sp| sp.2)
            .sum()
    };
    let (u, b) = (bytes(urgent), bytes(bulk));
    Ok(u as f64 / (u + b) as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Twenty 1000-byte data packets 1 ms apart over 50 ms each way, the sixth dropped, each
    /// acknowledged 0.1 ms after its delivery, and the lost bytes sent again at `retx_ns`.
    fn one_loss(retx_ns: u64) -> (LinkLog, Vec<Vec<crate::one_rtt::Span>>) {
        let mut log = LinkLog::default();
        let mut carried = Vec::new();
        for i in 0..20u64 {
            let fate = if i == 5 {
                Fate::Dropped(i * MS)
            } else {
                Fate::Departed(i * MS + 50 * MS)
            };
            log.down.push(Packet {
                arrive_ns: i * MS,
                size: 1028,
                fate,
            });
            if i != 5 {
                carried.push(vec![(0, i * 1000, 1000)]);
                let t = i * MS + 50 * MS + MS / 10;
                log.up.push(Packet {
                    arrive_ns: t,
                    size: 60,
                    fate: Fate::Departed(t + 50 * MS),
                });
            }
        }
        log.down.push(Packet {
            arrive_ns: retx_ns,
            size: 1028,
            fate: Fate::Departed(retx_ns + 50 * MS),
        });
        carried.push(vec![(0, 5000, 1000)]);
        (log, carried)
    }

    #[test]
    fn a_loss_is_planted_among_data_packets_of_one_size_not_on_a_probe() {
        // 1 ms apart: an acknowledgement-sized packet, a larger packet (a path-MTU probe), then
        // data of one size
        let sizes = [1028u32, 1028, 60, 1228, 1100, 1100, 1100, 1100, 1100, 1100];
        let log = LinkLog {
            down: sizes
                .iter()
                .enumerate()
                .map(|(i, &size)| Packet {
                    arrive_ns: i as u64 * MS,
                    size,
                    fate: Fate::Departed(i as u64 * MS + 50 * MS),
                })
                .collect(),
            ..LinkLog::default()
        };
        let f = Framing::QUIC;
        // from 2 ms: not the probe at 3, nor the first data packets after it (a shift of one
        // or two would plant the loss on the probe), but the first two deep into the run
        assert_eq!(data_at(&log, &f, 0, 2 * MS), Some(6));
        // where no packet has such neighbours, the first data packet from `at` on
        assert_eq!(data_at(&log, &f, 0, 8 * MS), Some(8));
        assert_eq!(data_at(&log, &f, 0, 10 * MS), None);
    }

    #[test]
    fn a_loss_declared_on_the_third_packets_acknowledgement_reads_zero_after_it() {
        // the ACK sent after packet 8 (the third behind) reaches the server at 108.1 ms
        let (log, carried) = one_loss(108_100_000);
        let d = loss_detection(&log, 5, &carried).unwrap();
        assert!((d.ms - 103.1).abs() < 1e-9, "{d:?}");
        assert!(d.after_third_ms.is_some_and(|a| a.abs() < 1e-9), "{d:?}");
        assert_eq!(d.sent_between, 14);
        // a time threshold of 9/8 of the 100 ms RTT from the sending: 9.4 ms after that ACK
        let (log, carried) = one_loss(117_500_000);
        let d = loss_detection(&log, 5, &carried).unwrap();
        assert!((d.ms - 112.5).abs() < 1e-9, "{d:?}");
        assert!(
            d.after_third_ms.is_some_and(|a| (a - 9.4).abs() < 1e-9),
            "{d:?}"
        );
        // a capture that does not match the link's log is refused, and so is a loss that
        // was delivered
        let e = loss_detection(&log, 5, &carried[1..]).unwrap_err();
        assert!(e.contains("the link delivered 20"), "{e}");
        let e = loss_detection(&log, 4, &carried).unwrap_err();
        assert!(e.contains("was delivered"), "{e}");
        // bytes never sent again
        let mut none = carried.clone();
        none.last_mut().unwrap()[0] = (0, 20_000, 1000);
        let e = loss_detection(&log, 5, &none).unwrap_err();
        assert!(e.contains("never sent again"), "{e}");
    }

    const MS: u64 = 1_000_000;

    #[test]
    fn an_urgent_response_s_share_is_of_the_bytes_sent_while_it_was_sent() {
        // stream 0 the least urgent (10 × 1000 bytes), stream 4 the urgent (4 × 1000), 8 a
        // small one: first the urgent whole, then shared one packet each, then after the other
        let bulk = |k: u64| vec![(0u64, k * 1000, 1000u64)];
        let urgent = |k: u64| vec![(4u64, k * 1000, 1000u64)];
        let first: Vec<Vec<crate::one_rtt::Span>> = [vec![(8, 0, 200)], bulk(0), bulk(1)]
            .into_iter()
            .chain((0..4).map(urgent))
            .chain((2..10).map(bulk))
            .collect();
        assert_eq!(urgent_share(&first), Ok(1.0));
        let shared: Vec<Vec<crate::one_rtt::Span>> = (0..4)
            .flat_map(|k| [urgent(k), bulk(k)])
            .chain((4..10).map(bulk))
            .collect();
        // from the first urgent packet to the last: 4 urgent, 3 of the other's
        assert!((urgent_share(&shared).unwrap() - 4.0 / 7.0).abs() < 1e-9);
        let in_order: Vec<Vec<crate::one_rtt::Span>> =
            (0..10).map(bulk).chain((0..4).map(urgent)).collect();
        assert_eq!(urgent_share(&in_order), Ok(1.0));
        let e = urgent_share(&(0..10).map(bulk).collect::<Vec<_>>()).unwrap_err();
        assert!(e.contains("fewer than two responses"), "{e}");
    }

    /// A small response over 50 ms each way, unlimited: the server's Initial at 50 ms, the
    /// client's handshake's end at 100 ms, and the response from 150 ms, 0.1 ms apart: HTTP/3's
    /// control stream, five data packets, and `after` (packets behind the data, as their IP
    /// size and whether they carry stream data). `dropped`: the packets the link dropped, by
    /// index in the log; the fourth data packet's bytes (index 5) are sent again at `retx_ms`.
    fn small_response(
        after: &[(u32, bool)],
        dropped: &[usize],
        retx_ms: f64,
    ) -> (LinkLog, Vec<Vec<crate::one_rtt::Span>>) {
        let path_ns = 50 * MS;
        let mut log = LinkLog::default();
        let mut carried = Vec::new();
        let mut down = |log: &mut LinkLog, at: u64, size: u32, spans: Vec<crate::one_rtt::Span>| {
            let fate = if dropped.contains(&log.down.len()) {
                Fate::Dropped(at)
            } else {
                carried.push(spans);
                Fate::Departed(at + path_ns)
            };
            log.down.push(Packet {
                arrive_ns: at,
                size,
                fate,
            });
        };
        down(&mut log, 50 * MS, 1228, vec![]);
        let mut at = 150 * MS;
        down(&mut log, at, 247, vec![(3, 0, 200)]);
        for k in 0..5u64 {
            at += MS / 10;
            let len = if k == 4 { 900 } else { 1000 };
            down(&mut log, at, 128 + len as u32, vec![(0, k * 1000, len)]);
        }
        for &(size, stream) in after {
            at += MS / 10;
            down(
                &mut log,
                at,
                size,
                if stream { vec![(0, 4900, 0)] } else { vec![] },
            );
        }
        // the first loss's bytes (data packet k is at index k + 2)
        let retx = (retx_ms * 1000.0).round() as u64 * 1000;
        let k = dropped.first().map_or(0, |d| d.saturating_sub(2)) as u64;
        down(&mut log, retx, 1128, vec![(0, k * 1000, 1000)]);
        let up = |at: u64| Packet {
            arrive_ns: at,
            size: 62,
            fate: Fate::Departed(at + path_ns),
        };
        // the client's Initial, its handshake's end, and an acknowledgement 0.05 ms after the
        // delivery of each packet behind the first loss
        log.up = vec![up(0), up(100 * MS)];
        let acks: Vec<Packet> = dropped.first().map_or(vec![], |&l| {
            log.down[l + 1..log.down.len() - 1]
                .iter()
                .filter_map(|p| delivered(p).map(|t| up(t + MS / 20)))
                .collect()
        });
        log.up.extend(acks);
        (log, carried)
    }

    const FIFTY_MS: PathFacts = PathFacts {
        down_delay_ns: 50 * MS,
        up_delay_ns: 50 * MS,
        down_rate_bps: None,
        up_rate_bps: None,
    };

    #[test]
    fn an_isolated_loss_is_planted_on_the_last_data_packet_with_enough_right_behind_it() {
        let plan = |after: &[(u32, bool)], behind| {
            let (log, _) = small_response(after, &[], 400.0);
            IsolatedPlan::of(&log, &FIFTY_MS, &Framing::QUIC, behind)
        };
        // large packets: the Initial (0), then the data (1 to 5): with one behind, the fourth
        // data packet, whatever small packets follow the fifth; with three, the second; a
        // blackout of half the round trip
        let one = IsolatedPlan {
            large: 4,
            min_bytes: 1028,
            behind: 1,
            blackout_us: 50_000,
        };
        assert_eq!(plan(&[], 1), Ok(one));
        assert_eq!(plan(&[(74, true), (59, false)], 1), Ok(one));
        let three = plan(&[(74, true)], 3).unwrap();
        assert_eq!((three.large, three.behind), (2, 3));
        assert_eq!(
            three.link_keys(),
            [("down-isolated-loss", "2/1028/3/50000us".to_string())]
        );
        // five data packets have no five behind any of them
        let e = plan(&[], 5).unwrap_err();
        assert!(e.contains("no 6 data packets"), "{e}");
    }

    #[test]
    fn an_isolated_loss_reads_its_repair_from_the_acknowledgements_behind_it() {
        // the fourth data packet (index 5) lost at 150.4 ms, the fifth behind it; its bytes sent
        // again 9/8 of the 100 ms RTT later, at 262.9 ms: 12.35 ms after the acknowledgement of
        // the fifth (sent at 200.55 ms) reached the server, at 250.55 ms
        let (log, carried) = small_response(&[], &[5], 262.9);
        let l = isolated_loss(&log, &FIFTY_MS, &carried, 1).unwrap();
        assert_eq!(l.blacked_out, 0);
        assert!((l.detection.ms - 112.5).abs() < 1e-6, "{l:?}");
        assert!(
            l.detection
                .after_first_ms
                .is_some_and(|a| (a - 12.35).abs() < 1e-6),
            "{l:?}"
        );
        // a stream's end and an acknowledgement behind the fifth, both blacked out: the same
        let (log, carried) = small_response(&[(74, true), (59, false)], &[5, 7, 8], 262.9);
        let l = isolated_loss(&log, &FIFTY_MS, &carried, 1).unwrap();
        assert_eq!(l.blacked_out, 2);
        assert!((l.detection.ms - 112.5).abs() < 1e-6, "{l:?}");
        // the second data packet (3, sent at 150.2 ms) lost, three let through behind it and the
        // stream's end blacked out: a sender at the packet threshold sends its bytes again as
        // the acknowledgement of the third (sent at 200.55 ms) reaches it, at 250.55 ms, 0.2 ms
        // after the first's
        let (log, carried) = small_response(&[(74, true)], &[3, 7], 250.55);
        let l = isolated_loss(&log, &FIFTY_MS, &carried, 3).unwrap();
        assert_eq!(l.blacked_out, 1);
        assert!((l.detection.ms - 100.35).abs() < 1e-6, "{l:?}");
        assert!(
            l.detection.after_third_ms.is_some_and(|a| a.abs() < 1e-6),
            "{l:?}"
        );
        assert!(
            l.detection
                .after_first_ms
                .is_some_and(|a| (a - 0.2).abs() < 1e-6),
            "{l:?}"
        );
        // a packet of the client's, sent `after` the third's delivery, `size` bytes on the link
        let (clean, carried) = small_response(&[(74, true)], &[3, 7], 250.55);
        let third = delivered(&clean.down[6]).unwrap();
        let sent = |log: &mut LinkLog, after: u64, size: u32| {
            log.up.push(Packet {
                arrive_ns: third + after,
                size,
                fate: Fate::Departed(third + after + 50 * MS),
            });
            log.up.sort_by_key(|p| p.arrive_ns);
        };
        // the client answering the third only with its ACK delay (it read the first two
        // together): the sender's threshold was not asked
        let mut log = clean.clone();
        log.up
            .retain(|p| p.arrive_ns < third || p.arrive_ns > third + MS);
        sent(&mut log, 25 * MS, 62);
        let e = isolated_loss(&log, &FIFTY_MS, &carried, 3).unwrap_err();
        assert!(e.contains("25.0 ms after its delivery"), "{e}");
        // and with the client's path-MTU probe (1378 bytes: PING and PADDING) sent at once:
        // that answers nothing
        sent(&mut log, MS / 10, 1378);
        let e = isolated_loss(&log, &FIFTY_MS, &carried, 3).unwrap_err();
        assert!(e.contains("25.0 ms after its delivery"), "{e}");
        // the client answering at once, but before it read the third: its acknowledgement of
        // the third comes with its ACK delay, nothing new delivered meanwhile
        let mut late = clean.clone();
        sent(&mut late, 26 * MS, 74);
        let e = isolated_loss(&late, &FIFTY_MS, &carried, 3).unwrap_err();
        assert!(
            e.contains(
                "acknowledged again 26.0 ms after the last of the 3 packets behind the lost one \
                 reached it, with nothing new delivered"
            ),
            "{e}"
        );
        // with one of the three an acknowledgement, it cannot be read
        let (log, mut carried) = small_response(&[(74, true)], &[3, 7], 250.55);
        // (the capture's fourth datagram: the first behind the loss)
        carried[3].clear();
        let e = isolated_loss(&log, &FIFTY_MS, &carried, 3).unwrap_err();
        assert!(e.contains("1 of the 3 packets behind"), "{e}");
        // the last data packet lost, only an acknowledgement behind it: the client need not
        // answer that
        let (log, carried) = small_response(&[(59, false)], &[6], 262.9);
        let e = isolated_loss(&log, &FIFTY_MS, &carried, 1).unwrap_err();
        assert!(
            e.contains("1 of the 1 packets behind the lost one carried no stream data"),
            "{e}"
        );
        // nothing behind it: a tail's loss; nothing lost
        let (log, carried) = small_response(&[], &[6], 262.9);
        let e = isolated_loss(&log, &FIFTY_MS, &carried, 1).unwrap_err();
        assert!(e.contains("a tail's loss"), "{e}");
        let (log, carried) = small_response(&[], &[], 262.9);
        let e = isolated_loss(&log, &FIFTY_MS, &carried, 1).unwrap_err();
        assert!(e.contains("none of the server's packets was lost"), "{e}");
    }

    fn packet(at_ms: u64, size: u32, fate: Fate) -> Packet {
        Packet {
            arrive_ns: at_ms * MS,
            size,
            fate,
        }
    }

    /// Bursts of the given lengths, a millisecond apart, their packets 10 µs apart.
    fn in_bursts(lengths: &[u32]) -> Vec<Packet> {
        let mut out = Vec::new();
        for (k, &n) in lengths.iter().enumerate() {
            for i in 0..u64::from(n) {
                out.push(Packet {
                    arrive_ns: k as u64 * MS + i * 10_000,
                    size: 1228,
                    fate: Fate::Departed(0),
                });
            }
        }
        out
    }

    #[test]
    fn pacing_is_read_as_the_share_of_the_fullest_round_trip_in_its_busiest_tenth() {
        let rtt = 100 * MS;
        // an unpaced sender: each round trip's packets written within 2 ms of its start,
        // twice as many each round trip; the last (cut short) holds the most, and is not whole
        let mut unpaced = Vec::new();
        for (k, n) in [10u64, 20, 40, 80, 160].into_iter().enumerate() {
            unpaced.extend((0..n).map(|i| k as u64 * rtt + i * 2 * MS / n));
        }
        unpaced.push(4 * rtt + 3 * MS);
        // whole round trips are 0 to 3: the fullest is the 80-packet one, all in 2 ms
        assert_eq!(busiest_tenth(&unpaced, rtt), Some((1.0, 80)));
        // a paced sender: 100 packets a round trip, one every millisecond, in bursts of one:
        // a tenth of a round trip (10 ms) holds ten of them
        let paced: Vec<u64> = (0..300).map(|i| i * MS).collect();
        assert_eq!(busiest_tenth(&paced, rtt), Some((0.1, 100)));
        // in bursts of ten every 10 ms, the same: a burst is not a round trip's share
        let bursts: Vec<u64> = (0..300).map(|i| (i / 10) * 10 * MS + i % 10).collect();
        let (share, n) = busiest_tenth(&bursts, rtt).unwrap();
        assert_eq!(n, 100);
        assert!(share <= 0.2, "{share}");
        // too few packets in every whole round trip to tell (17 at most, one every 6 ms)
        let few: Vec<u64> = (0..40).map(|i| i * 6 * MS).collect();
        assert_eq!(busiest_tenth(&few, rtt), None);
        assert_eq!(busiest_tenth(&[], rtt), None);
    }

    #[test]
    fn a_typical_burst_is_where_half_the_packets_leave_and_one_long_burst_does_not_move_it() {
        // twelve bursts of five and one of forty: 60 of the 100 packets leave in bursts of five
        let ps = in_bursts(&[5, 5, 5, 5, 5, 5, 40, 5, 5, 5, 5, 5, 5]);
        assert_eq!(bursts(&ps).len(), 13);
        assert_eq!(largest_burst(&ps), 40);
        assert_eq!(typical_burst(bursts(&ps)), 5);
        // a longer extreme moves the longest, not the typical
        let ps = in_bursts(&[5, 5, 5, 5, 5, 5, 55, 5, 5, 5, 5, 5, 5]);
        assert_eq!((largest_burst(&ps), typical_burst(bursts(&ps))), (55, 5));
        // but where most packets leave in long bursts, the typical one is long
        let ps = in_bursts(&[2, 2, 2, 2, 2, 20, 40]);
        assert_eq!(typical_burst(bursts(&ps)), 40);
        // 50 µs apart is one burst, more is two
        let mut ps = in_bursts(&[2]);
        ps[1].arrive_ns = ps[0].arrive_ns + BURST_GAP_NS;
        assert_eq!(bursts(&ps), vec![2]);
        ps[1].arrive_ns += 1;
        assert_eq!(bursts(&ps), vec![1, 1]);
        assert_eq!(typical_burst(Vec::new()), 0);
    }

    #[test]
    fn a_clients_own_retransmission_after_the_tail_is_no_acknowledgement_that_rearms_a_timer() {
        // TCP: data until 2 ms (the last two lost), the client's acknowledgement of the data
        // delivered at 50 ms, its WINDOW_UPDATE sent again at 324 ms (its acknowledgement was
        // lost), and the server's probe at 400 ms
        let us = |t: u64| t * 1000;
        let down = vec![
            Packet {
                arrive_ns: 0,
                size: 1500,
                fate: Fate::Departed(50 * MS),
            },
            packet(1, 1500, Fate::Dropped(MS)),
            packet(2, 1500, Fate::Dropped(2 * MS)),
            packet(400, 1500, Fate::Departed(450 * MS)),
        ];
        let up = vec![
            Packet {
                arrive_ns: us(50_500),
                size: 52,
                fate: Fate::Departed(us(100_500)),
            },
            packet(324, 87, Fate::Departed(374 * MS)),
        ];
        let log = LinkLog { down, up };
        let plan = TailPlan {
            after_bytes: 1500,
            packets: 2,
            bytes: 3 * 1448,
            length_ns: 60 * MS,
        };
        let t = tail_timeout(&log, &plan, &Framing::TCP_TLS);
        assert_eq!(t.ms, Some(398.0), "{t:?}");
        // from the acknowledgement at 100.5 ms, not the retransmission at 374 ms
        assert_eq!(t.after_ack_ms, Some(299.5), "{t:?}");
        // a packet sent within the bound is one
        let mut log = log;
        log.up[1] = packet(150, 52, Fate::Departed(200 * MS));
        let t = tail_timeout(&log, &plan, &Framing::TCP_TLS);
        assert_eq!(t.after_ack_ms, Some(200.0), "{t:?}");
    }

    #[test]
    fn the_tails_timer_runs_from_its_last_data_to_a_probe_the_client_answers() {
        // quinn's tail as a probe showed it: data until 100 ms (the last two lost), an
        // acknowledgement of the client's caught 20 ms later, another delivered at 150 ms that
        // the client does not answer, and two small probes at 228 ms it answers at once
        let sent = |t| Fate::Departed(t * MS + 50 * MS);
        let lost = |t| Fate::Dropped(t * MS);
        let down = vec![
            packet(0, 1480, sent(0)),
            packet(98, 1480, sent(98)),
            packet(99, 1480, lost(99)),
            packet(100, 1480, lost(100)),
            packet(120, 69, lost(120)),
            packet(150, 66, sent(150)),
            packet(228, 58, sent(228)),
            packet(228, 58, sent(228)),
        ];
        let up = vec![
            packet(60, 68, Fate::Departed(110 * MS)),
            packet(279, 66, Fate::Departed(329 * MS)),
        ];
        let log = LinkLog { down, up };
        let plan = TailPlan {
            after_bytes: 2960,
            packets: 2,
            bytes: 4 * 1452 + 41,
            length_ns: 60 * MS,
        };
        let t = tail_timeout(&log, &plan, &Framing::QUIC);
        assert_eq!(t.ms, Some(128.0), "{t:?}");
        // the client's packet that reached the server last before the probe: at 110 ms
        assert_eq!(t.after_ack_ms, Some(118.0), "{t:?}");
        assert_eq!(t.dropped, 3);
        // of them, the two data packets (the 69-byte one is no data)
        assert_eq!(t.data_dropped, 2);
        // unanswered, the small packets are no probe
        let log = LinkLog {
            up: log.up[..1].to_vec(),
            ..log
        };
        let t = tail_timeout(&log, &plan, &Framing::QUIC);
        assert!(t.ms.is_none() && t.why.is_some(), "{t:?}");
        // nor are they when what the client sent at once is a path-MTU probe (PING and
        // PADDING, larger than the data's packets), which answers nothing
        let mut log = log;
        log.up.push(packet(279, 1312, Fate::Departed(329 * MS)));
        let t = tail_timeout(&log, &plan, &Framing::QUIC);
        assert!(t.ms.is_none() && t.why.is_some(), "{t:?}");
    }
}

/// A round trip of data "grew as slow start grows" when its flight was at least this many times
/// the round before's: slow start doubles it each round trip (a little less with delayed
/// acknowledgements and a window counted in whole packets); once a sender leaves it, its flight
/// grows by a packet a round trip (Reno), 5 % (Linux's Cubic before any loss), a quarter
/// (HyStart++'s conservative slow start), or shrinks (BBR's drain).
pub const SLOW_START_GROWTH: f64 = 1.5;

/// What a sender does to a deep drop-tail queue in slow start: the queueing delay its packets
/// met by the time its slow start ended, the round trip it ended in, and the packets the queue
/// dropped. The transfer is cut into round trips of data as a sender counts them: one ends when
/// the acknowledgement of its first packet can reach the sender. Slow start ends with the first
/// round trip whose flight grew less than [`SLOW_START_GROWTH`] times the one before's, or with
/// the queue's first overflow. A sender without a delay-based exit (HyStart) fills the queue to
/// its limit; one with it leaves slow start once the queue adds a few milliseconds to its RTT:
/// at worst one round trip later, with its window doubled once more. What the queue meets after
/// the exit (a window growing in congestion avoidance over the rest of the transfer) is not
/// counted.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct DeepQueue {
    /// The most queueing (and the packet's own serialisation) a downlink packet met up to the
    /// end of the round trip slow start ended in, ms.
    pub peak_ms: f64,
    /// How slow start ended.
    pub ended: SlowStartEnd,
    /// The round trip of data (0: the first) it ended in.
    pub round: u32,
    /// Downlink packets dropped over the whole transfer.
    pub lost: u32,
}

/// How a sender's slow start ended on the deep queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SlowStartEnd {
    /// Its flight stopped growing as slow start grows it before the queue overflowed.
    Left,
    /// The queue overflowed while it still grew so.
    Overflow,
    /// The transfer ended while it still grew so, the queue never full.
    TransferEnded,
}

/// Reads the deep-queue probe's log (its only drops are the queue's).
pub fn deep_queue(log: &LinkLog, path: &PathFacts, f: &Framing) -> Result<DeepQueue, String> {
    let down = &log.down;
    let dropped = |p: &Packet| matches!(p.fate, Fate::Dropped(_));
    let first_drop = down.iter().position(dropped).unwrap_or(down.len());
    let start = down[..first_drop]
        .iter()
        .position(|p| f.payload(p) >= DATA_PAYLOAD)
        .ok_or("no data packet crossed the link before its first drop")?;
    // per round trip of data: the most bytes in flight, the most queueing
    let mut rounds: Vec<(u64, u64)> = Vec::new();
    let mut ends = 0u64;
    for (j, t, flight) in in_flight(log, f, None) {
        if j < start || j >= first_drop {
            continue;
        }
        let p = &down[j];
        let Some(d) = delivered(p) else { continue };
        if rounds.is_empty() || t >= ends {
            rounds.push((0, 0));
            ends = d + path.up_delay_ns;
        }
        let r = rounds.last_mut().expect("a round was pushed");
        r.0 = r.0.max(flight);
        r.1 = r.1.max(d.saturating_sub(p.arrive_ns + path.down_delay_ns));
    }
    let overflow = first_drop < down.len();
    // the round a drop cut short is no measure of growth
    let whole = if overflow {
        rounds.len().saturating_sub(1)
    } else {
        rounds.len()
    };
    let exit =
        (1..whole).find(|&k| (rounds[k].0 as f64) < SLOW_START_GROWTH * rounds[k - 1].0 as f64);
    let (ended, round) = match exit {
        Some(k) => (SlowStartEnd::Left, k),
        None if overflow => (SlowStartEnd::Overflow, rounds.len() - 1),
        None => (SlowStartEnd::TransferEnded, rounds.len() - 1),
    };
    let peak = rounds[..=round].iter().map(|r| r.1).max().unwrap_or(0);
    Ok(DeepQueue {
        peak_ms: ms(peak),
        ended,
        round: round as u32,
        lost: down.iter().filter(|p| dropped(p)).count() as u32,
    })
}

/// When a server sent one lost data packet's bytes again (the one-loss probe's loss), told from
/// the wire with its 1-RTT packets opened: the first packet after it that carries a byte of the
/// hole it left in the response's stream is its retransmission. Once the loss is declared, the
/// retransmission waits for the window the cut left, so this is the loss's repair time, which
/// the detection threshold starts.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct LossDetection {
    /// From the lost packet's sending to its retransmission's, ms.
    pub ms: f64,
    /// From the moment the server had the client's first acknowledgement sent after the third
    /// packet behind the lost one reached it (RFC 9002's packet threshold, 3) to the
    /// retransmission, ms: about 0 for a sender that declares the loss on that acknowledgement
    /// and has room in its window, more for one that waits for its time threshold (9/8 of an
    /// RTT from the sending) or for its window,
    /// negative for one that declared it earlier.
    pub after_third_ms: Option<f64>,
    /// The same from the client's first packet sent after the first packet behind the lost one
    /// (the acknowledgement that shows the gap first).
    pub after_first_ms: Option<f64>,
    /// Packets the server sent between the lost one and its retransmission.
    pub sent_between: u32,
}

/// The downlink's delivered packets in the order they left the link, each with its departure
/// and its index: the order of a capture of the client's side, whose datagrams `carried`
/// lists (`Err` when their counts differ).
fn delivered_order(
    log: &LinkLog,
    carried: &[Vec<crate::one_rtt::Span>],
) -> Result<Vec<(u64, usize)>, String> {
    let mut order: Vec<(u64, usize)> = log
        .down
        .iter()
        .enumerate()
        .filter_map(|(i, p)| delivered(p).map(|t| (t, i)))
        .collect();
    order.sort();
    if order.len() != carried.len() {
        return Err(format!(
            "the capture holds {} of the server's datagrams, the link delivered {}",
            carried.len(),
            order.len()
        ));
    }
    Ok(order)
}

/// Reads a one-loss probe: `lost`, the downlink packet the link dropped (0-based); `carried`,
/// the stream bytes of each packet the link delivered to the client, in the order it delivered
/// them (the capture of the client's side, [`crate::one_rtt::server_stream_data`]).
pub fn loss_detection(
    log: &LinkLog,
    lost: usize,
    carried: &[Vec<crate::one_rtt::Span>],
) -> Result<LossDetection, String> {
    let dropped = log
        .down
        .get(lost)
        .ok_or("the planted loss was never sent")?;
    if delivered(dropped).is_some() {
        return Err("the planted loss was delivered".into());
    }
    let order = delivered_order(log, carried)?;
    // the response: the stream that carried the most bytes
    let mut per_stream = std::collections::BTreeMap::<u64, u64>::new();
    for &(s, _, l) in carried.iter().flatten() {
        *per_stream.entry(s).or_default() += l;
    }
    let stream = per_stream
        .iter()
        .max_by_key(|(_, b)| **b)
        .map(|(s, _)| *s)
        .ok_or("the server's packets carry no stream data")?;
    let spans = |k: usize| carried[k].iter().filter(move |sp| sp.0 == stream);
    // the hole: from the end of what was sent before the loss to the start of what came next
    let before_end = order
        .iter()
        .enumerate()
        .filter(|(_, (_, i))| *i < lost)
        .flat_map(|(k, _)| spans(k).map(|&(_, o, l)| o + l))
        .max()
        .unwrap_or(0);
    let next_start = order
        .iter()
        .enumerate()
        .filter(|(_, (_, i))| *i > lost)
        .find_map(|(k, _)| spans(k).map(|&(_, o, _)| o).min())
        .ok_or("no stream data after the planted loss")?;
    if next_start <= before_end {
        return Err("the planted loss carried none of the response's bytes".into());
    }
    // the retransmission: the first packet after the loss with a byte of the hole
    let retx = order
        .iter()
        .enumerate()
        .filter(|(_, (_, i))| *i > lost)
        .find(|(k, _)| spans(*k).any(|&(_, o, l)| o < next_start && o + l > before_end))
        .map(|(_, &(_, i))| i)
        .ok_or("the lost bytes were never sent again")?;
    let sent = log.down[retx].arrive_ns;
    // the third packet delivered behind the lost one, and the client's first packet after it
    let after: Vec<usize> = order
        .iter()
        .map(|&(_, i)| i)
        .filter(|&i| i > lost)
        .collect();
    let after_kth = |k: usize| {
        let t = delivered(&log.down[*after.get(k)?])?;
        let ack = client_ack_after(log, t)?;
        let heard = delivered(ack)?;
        Some((sent as f64 - heard as f64) / 1e6)
    };
    Ok(LossDetection {
        ms: (sent - dropped.arrive_ns) as f64 / 1e6,
        after_third_ms: after_kth(2),
        after_first_ms: after_kth(0),
        sent_between: (retx - lost - 1) as u32,
    })
}

/// The drop of an isolated-loss probe: in a transfer whose whole response leaves in its first
/// round trip of data (an object within every initial window), so that the sender has nothing
/// more to send, the last data packet with `behind` more right behind it. The link drops it,
/// lets those pass and drops whatever the sender writes for half a round trip after them
/// (`down-isolated-loss`, [`IsolatedPlan::link_keys`]): the client sees exactly `behind`
/// packets past the gap. With one, too few for RFC 9002's packet threshold (3), the time
/// threshold (9/8 of an RTT from the sending, RFC 9002 §6.1.2), or whatever the sender uses
/// instead, declares the loss; with three, a sender at RFC 9002's packet threshold declares it
/// on their acknowledgement, a round trip after the sending. Without the blackout, the
/// acknowledgements and stream ends some stacks write behind their data (ngtcp2's and quic-go's
/// three or more in a round trip, quinn's two in some trials) take packet numbers enough for
/// the packet threshold. The packet is counted among the packets of at least a data packet's
/// size: small packets fall around a response differently from one trial to the next, and its
/// large ones do not.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct IsolatedPlan {
    /// The packet dropped, counted among the large downlink packets (0-based).
    pub large: u32,
    /// A large packet's least IP size: a data packet's payload and the framing.
    pub min_bytes: u32,
    /// The packets let through behind it.
    pub behind: u32,
    /// The blackout after them, µs: half the path's round trip.
    pub blackout_us: u64,
}

impl IsolatedPlan {
    /// Planted from a probe's log (a clean one, or an earlier isolated-loss probe's: its
    /// dropped packets are in the log as sent), with `behind` packets let through.
    pub fn of(
        log: &LinkLog,
        path: &PathFacts,
        f: &Framing,
        behind: u32,
    ) -> Result<IsolatedPlan, String> {
        let min_bytes = f.large_bytes();
        let start = data_start(log, path, f).ok_or("no data after the handshake")?;
        let until = log.down[start].arrive_ns + path.rtt_ns();
        let large = |i: usize| {
            log.down
                .get(i)
                .is_some_and(|p| p.size >= min_bytes && p.arrive_ns < until)
        };
        let k = behind as usize;
        let i = (start..log.down.len())
            .take_while(|&i| log.down[i].arrive_ns < until)
            .filter(|&i| (i..=i + k).all(large))
            .last()
            .ok_or_else(|| {
                format!(
                    "no {} data packets left one after the other in the response's first round \
                     trip of data",
                    k + 1
                )
            })?;
        Ok(IsolatedPlan {
            large: log.down[..i].iter().filter(|p| p.size >= min_bytes).count() as u32,
            min_bytes,
            behind,
            blackout_us: path.rtt_ns() / 2 / 1000,
        })
    }

    /// The link keys that plant it.
    pub fn link_keys(&self) -> [(&'static str, String); 1] {
        [(
            "down-isolated-loss",
            format!(
                "{}/{}/{}/{}us",
                self.large, self.min_bytes, self.behind, self.blackout_us
            ),
        )]
    }
}

/// An isolated loss (an isolated-loss probe's, [`IsolatedPlan`]) as the wire shows it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct IsolatedLoss {
    /// When its bytes went out again, and from which acknowledgement (`after_first_ms`: the
    /// one the first packet behind it drew; `after_third_ms`: the one after the third).
    pub detection: LossDetection,
    /// Packets the server wrote in the blackout behind the ones let through (dropped).
    pub blacked_out: u32,
}

/// Reads an isolated-loss probe of `behind` packets: `carried` as for [`loss_detection`].
/// `Err` says why it cannot be read as one (the plan counted data packets, and a trial's may
/// fall otherwise): nothing dropped; fewer than `behind` packets right behind the lost one in
/// its round trip (a tail's loss, which a timer repairs), or any of them without stream data
/// (an acknowledgement, which the client need not answer).
pub fn isolated_loss(
    log: &LinkLog,
    path: &PathFacts,
    carried: &[Vec<crate::one_rtt::Span>],
    behind: u32,
) -> Result<IsolatedLoss, String> {
    let dropped: Vec<usize> = (0..log.down.len())
        .filter(|&i| matches!(log.down[i].fate, Fate::Dropped(_)))
        .collect();
    let &lost = dropped
        .first()
        .ok_or("none of the server's packets was lost, where one was planted")?;
    let at = log.down[lost].arrive_ns;
    let kept = lost + 1..=lost + behind as usize;
    let in_round = kept.clone().all(|i| {
        log.down
            .get(i)
            .is_some_and(|p| p.arrive_ns < at + path.rtt_ns())
    });
    if !in_round {
        return Err(format!(
            "fewer than {behind} packets followed the lost one in its round trip: a tail's loss"
        ));
    }
    let order = delivered_order(log, carried)?;
    let streamed = order
        .iter()
        .zip(carried)
        .filter(|((_, i), spans)| kept.contains(i) && !spans.is_empty())
        .count();
    if streamed != behind as usize {
        return Err(format!(
            "{} of the {behind} packets behind the lost one carried no stream data: an \
             acknowledgement, which the client need not answer",
            behind as usize - streamed
        ));
    }
    // the client's answer to the last packet let through must be at once: the sender's
    // threshold is asked only by an acknowledgement that shows all of them. RFC 9000 §13.2.1
    // wants one at once for a packet after a gap, but the third behind follows no gap of its
    // own; a client that read the first two together and answered them both waits for its ACK
    // delay (quinn's client did so in 1 of 16 probes, and its 25 ms came after the sender's
    // 112.5 ms time threshold)
    let last = lost + behind as usize;
    let delivered_at = delivered(&log.down[last]).ok_or("a packet behind the lost one was lost")?;
    match client_ack_after(log, delivered_at) {
        Some(p) if p.arrive_ns - delivered_at <= ANSWER_NS => {}
        Some(p) => {
            return Err(format!(
                "the client answered the last of the {behind} packets behind the lost one \
                 {:.1} ms after its delivery (its own ACK delay), so no acknowledgement showed \
                 them all at once",
                (p.arrive_ns - delivered_at) as f64 / 1e6
            ));
        }
        None => {
            return Err(format!(
                "the client never answered the last of the {behind} packets behind the lost one"
            ));
        }
    }
    // and that answer must have shown it: a client that answered the first two as the third
    // reached it, before it read the third, acknowledges the third only with its ACK delay,
    // with nothing new delivered (quinn's at 26.3 and 26.4 ms in 2 probes of 12, and quiche
    // then sent the lost bytes at its time threshold, 120 ms, not at 100)
    let next_delivery = log
        .down
        .iter()
        .filter_map(delivered)
        .filter(|&t| t > delivered_at)
        .min()
        .unwrap_or(u64::MAX);
    if let Some(p) = log.up.iter().find(|p| {
        p.arrive_ns > delivered_at + ANSWER_NS
            && p.arrive_ns < next_delivery
            && p.size < DATA_PAYLOAD
    }) {
        return Err(format!(
            "the client acknowledged again {:.1} ms after the last of the {behind} packets \
             behind the lost one reached it, with nothing new delivered (its ACK delay): its \
             answer at once had not shown them all",
            (p.arrive_ns - delivered_at) as f64 / 1e6
        ));
    }
    Ok(IsolatedLoss {
        detection: loss_detection(log, lost, carried)?,
        blacked_out: (dropped.len() - 1) as u32,
    })
}
