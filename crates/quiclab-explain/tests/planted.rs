//! Planted causes in virtual time: a sender of known behaviour (a window, slow start, a
//! multiplicative decrease, packet-threshold loss detection, a retransmission timer, a peer's
//! flow-control limit) talks to its client over the link emulator itself; each scenario plants
//! one cause against an otherwise identical control on the same seeded link, and the budget of
//! the difference must name that cause: at least 80 % of the TTLB difference, and no other
//! component more than 20 %. The event log goes through its JSON lines as a trial writes it.

use std::collections::BTreeMap;
use std::time::Duration;

use quiclab_explain::{Asked, LinkLog, PathFacts, SenderSample, Transfer, budget, page_budget};
use quiclab_link::config::LinkConfig;
use quiclab_link::pipeline::Pipeline;
use quiclab_link::stage::Payload;
use quiclab_link::{Direction, event::Event};
use quiclab_model::budget::{Budget, Component};

#[derive(Clone, Debug)]
enum Msg {
    Hello,
    Retry,
    Flight,
    Request,
    Data { pn: u64, off: u64, len: u64 },
    Ack { pn: u64, max_data: u64 },
}

#[derive(Clone, Debug)]
struct Wire(Msg, usize);

impl Payload for Wire {
    fn wire_len(&self) -> usize {
        self.1
    }
}

/// The sender's and the client's behaviour.
#[derive(Clone, Copy, Debug)]
struct Knobs {
    body: u64,
    /// Payload bytes per data packet, and header bytes on each.
    mss: u64,
    hdr: u64,
    /// Initial window, packets.
    iw: u64,
    /// The window's factor at a congestion response.
    beta: f64,
    /// The server asks for another hello first (one more round trip).
    retry: bool,
    /// The server's wait between the request and its first byte.
    think: Duration,
    /// The client's flow-control window, bytes beyond what it has read.
    flow: u64,
    /// The window grows only while it is what holds the sender back (RFC 7661), as quinn's
    /// and most controllers' do.
    validated: bool,
    /// Objects of `body` bytes the client asks for one after another on the connection, each
    /// once it has read the last (a page's chain of dependencies), and its time from reading one
    /// to asking for the next.
    chain: u64,
    discover: Duration,
    /// The sender's record counts its blocked signals (as a QUIC sender's DATA_BLOCKED frames:
    /// one each time it reaches a new limit of the peer's).
    tells_flow: bool,
    /// The application hands the sender data at this rate, bytes a second (`None`: all at once).
    app_rate: Option<u64>,
}

const BASE: Knobs = Knobs {
    body: 1_000_000,
    mss: 1400,
    hdr: 52,
    iw: 10,
    beta: 0.5,
    retry: false,
    think: Duration::ZERO,
    flow: u64::MAX / 4,
    validated: false,
    chain: 1,
    discover: Duration::ZERO,
    tells_flow: false,
    app_rate: None,
};

/// The server's handshake flight: three packets.
const FLIGHT: u32 = 3;

struct Sent {
    off: u64,
    len: u64,
    size: u64,
    at: u64,
    done: bool,
}

struct Trial {
    log: String,
    transfer: Transfer,
    /// Each object's request and last byte read.
    asked: Vec<Asked>,
    sender: Vec<SenderSample>,
    path: PathFacts,
}

fn ns(d: Duration) -> u64 {
    d.as_nanos() as u64
}

/// Runs one transfer over a link of `keys`, seeded with `seed`.
fn run(k: Knobs, keys: &[(&str, &str)], seed: u64) -> Trial {
    let cfg = LinkConfig::from_keys(seed, keys, &|_| Err("no traces".into())).unwrap();
    let mut up: Pipeline<Wire> = Pipeline::new(Direction::Up, &cfg.up, seed, true).unwrap();
    let mut down: Pipeline<Wire> = Pipeline::new(Direction::Down, &cfg.down, seed, true).unwrap();
    let rtt = ns(cfg.min_rtt());
    let start = 1_000_000u64;
    let t = |n: u64| Duration::from_nanos(n);
    up.push(t(start), Wire(Msg::Hello, 1250));
    // the client
    let (mut flights, mut h, mut fb, mut lb) = (0, None, None, None);
    let mut got: BTreeMap<u64, u64> = BTreeMap::new();
    let mut read = 0u64;
    let mut asked: Vec<Asked> = Vec::new();
    let mut ask_at: Option<u64> = None;
    // the server
    let mut requested = 0u64;
    let mut retried = false;
    let mut send_from: Option<u64> = None;
    let mut sent: BTreeMap<u64, Sent> = BTreeMap::new();
    let mut resend: Vec<(u64, u64)> = Vec::new();
    let (mut next_pn, mut next_off, mut inflight) = (0u64, 0u64, 0u64);
    let mut cwnd = (k.iw * (k.mss + k.hdr)) as f64;
    let mut ssthresh = f64::MAX;
    let mut recovery_end = 0u64;
    let mut max_data = k.flow;
    let mut srtt = rtt;
    let mut backoff = 0u32;
    let mut timer: Option<u64> = None;
    // whether the window stopped the sender the last time it sent
    let mut window_bound = true;
    // the peer's limits the sender reached (each counted once), and when the application
    // hands it the next packet's data
    let (mut blocked, mut blocked_at) = (0u64, 0u64);
    let mut app_next: Option<u64> = None;
    let mut samples = Vec::new();
    let mut now = start;
    for _ in 0..10_000_000 {
        // the server sends what its window, the peer's limit and its data allow
        if send_from.is_some_and(|s| now >= s) {
            loop {
                let (off, len, again) = if let Some(&(off, len)) = resend.last() {
                    (off, len, true)
                } else if next_off < requested {
                    let len = k.mss.min(requested - next_off);
                    if next_off + len > max_data {
                        window_bound = false;
                        if blocked_at != max_data {
                            blocked_at = max_data;
                            blocked += 1;
                        }
                        break;
                    }
                    if let Some(rate) = k.app_rate {
                        let at = *app_next.get_or_insert(now);
                        if now < at {
                            window_bound = false;
                            break;
                        }
                        app_next = Some(at + len * 1_000_000_000 / rate);
                    }
                    (next_off, len, false)
                } else {
                    window_bound = false;
                    break;
                };
                let size = len + k.hdr;
                if inflight + size > cwnd as u64 && inflight > 0 {
                    window_bound = true;
                    break;
                }
                if again {
                    resend.pop();
                } else {
                    next_off += len;
                }
                let pn = next_pn;
                next_pn += 1;
                inflight += size;
                sent.insert(
                    pn,
                    Sent {
                        off,
                        len,
                        size,
                        at: now,
                        done: false,
                    },
                );
                down.push(t(now), Wire(Msg::Data { pn, off, len }, size as usize));
                timer = Some(now + ((3 * srtt) << backoff.min(6)));
            }
        }
        if lb.is_some() {
            break;
        }
        // the next thing to happen
        let mut next = [
            up.poll_timeout().map(ns),
            down.poll_timeout().map(ns),
            timer,
            ask_at,
            app_next.filter(|&x| x > now && next_off < requested),
            send_from.filter(|&s| s > now),
        ]
        .into_iter()
        .flatten()
        .min()
        .expect("the transfer stalled");
        next = next.max(now);
        now = next;
        if timer.is_some_and(|x| x <= now) {
            // the retransmission timer: everything outstanding is lost, the window collapses
            timer = None;
            for s in sent.values_mut().filter(|s| !s.done) {
                s.done = true;
                inflight -= s.size;
                resend.push((s.off, s.len));
            }
            resend.sort_by_key(|r| std::cmp::Reverse(r.0));
            ssthresh = (cwnd * k.beta).max(2.0 * (k.mss + k.hdr) as f64);
            cwnd = (k.mss + k.hdr) as f64;
            recovery_end = next_pn;
            backoff += 1;
            samples.push(SenderSample {
                t_ns: now,
                cwnd_bytes: Some(cwnd as u64),
                srtt_ns: Some(srtt),
                congestion_event: true,
                flow_blocked: k.tells_flow.then_some(blocked),
            });
        }
        if ask_at.is_some_and(|x| x <= now) {
            ask_at = None;
            asked.push(Asked {
                sent_ns: now,
                done_ns: 0,
            });
            up.push(t(now), Wire(Msg::Request, 120));
        }
        while let Some(d) = up.poll_transmit(t(now)) {
            match d.data.0 {
                Msg::Hello if k.retry && !retried => {
                    retried = true;
                    down.push(t(now), Wire(Msg::Retry, 200));
                }
                Msg::Hello => {
                    for _ in 0..FLIGHT {
                        down.push(t(now), Wire(Msg::Flight, 1250));
                    }
                }
                Msg::Request => {
                    requested += k.body;
                    if send_from.is_some() {
                        continue;
                    }
                    // the sender records its initial window
                    send_from = Some(now + ns(k.think));
                    samples.push(SenderSample {
                        t_ns: now,
                        cwnd_bytes: Some(cwnd as u64),
                        srtt_ns: None,
                        congestion_event: false,
                        flow_blocked: k.tells_flow.then_some(blocked),
                    });
                }
                Msg::Ack { pn, max_data: m } => {
                    max_data = max_data.max(m);
                    backoff = 0;
                    let Some(s) = sent.get_mut(&pn) else { continue };
                    if !s.done {
                        s.done = true;
                        inflight -= s.size;
                        srtt = (7 * srtt + (now - s.at)) / 8;
                        if k.validated && !window_bound {
                            // held back by something else: the window keeps its size
                        } else if cwnd < ssthresh {
                            cwnd += s.size as f64;
                        } else {
                            cwnd += (s.size * s.size) as f64 / cwnd;
                        }
                    }
                    // packet threshold: three later packets acknowledged
                    let lost: Vec<u64> = sent
                        .range(..pn.saturating_sub(2))
                        .filter(|(_, s)| !s.done)
                        .map(|(&p, _)| p)
                        .collect();
                    let mut event = false;
                    for p in lost {
                        let s = sent.get_mut(&p).unwrap();
                        s.done = true;
                        inflight -= s.size;
                        resend.push((s.off, s.len));
                        if p >= recovery_end {
                            event = true;
                        }
                    }
                    resend.sort_by_key(|r| std::cmp::Reverse(r.0));
                    if event {
                        cwnd = (cwnd * k.beta).max(2.0 * (k.mss + k.hdr) as f64);
                        ssthresh = cwnd;
                        recovery_end = next_pn;
                    }
                    timer = (inflight > 0).then_some(now + (3 * srtt));
                    samples.push(SenderSample {
                        t_ns: now,
                        cwnd_bytes: Some(cwnd as u64),
                        srtt_ns: Some(srtt),
                        congestion_event: event,
                        flow_blocked: k.tells_flow.then_some(blocked),
                    });
                }
                _ => {}
            }
        }
        while let Some(d) = down.poll_transmit(t(now)) {
            match d.data.0 {
                Msg::Retry => {
                    up.push(t(now), Wire(Msg::Hello, 1250));
                }
                Msg::Flight => {
                    flights += 1;
                    if flights == FLIGHT {
                        h = Some(now);
                        ask_at = Some(now);
                    }
                }
                Msg::Data { pn, off, len } => {
                    fb.get_or_insert(now);
                    got.insert(off, len);
                    while let Some(len) = got.get(&read) {
                        read += len;
                    }
                    let want = asked.len() as u64 * k.body;
                    if read >= want && asked.last().is_some_and(|a| a.done_ns == 0) {
                        asked.last_mut().unwrap().done_ns = now;
                        if asked.len() as u64 == k.chain {
                            lb = Some(now);
                        } else {
                            ask_at = Some(now + ns(k.discover));
                        }
                    }
                    up.push(
                        t(now),
                        Wire(
                            Msg::Ack {
                                pn,
                                max_data: read.saturating_add(k.flow),
                            },
                            60,
                        ),
                    );
                }
                _ => {}
            }
        }
    }
    let mut events: Vec<Event> = up.take_events();
    events.extend(down.take_events());
    events.sort_by_key(|e| e.t);
    let log = events
        .iter()
        .map(|e| serde_json::to_string(e).unwrap() + "\n")
        .collect();
    Trial {
        log,
        transfer: Transfer {
            start_ns: start,
            handshake_done_ns: h.expect("no handshake"),
            first_byte_ns: fb.expect("no first byte"),
            last_byte_ns: lb.expect("the transfer did not end"),
            body_bytes: k.body * k.chain,
            design_rtts: 1,
        },
        asked,
        sender: samples,
        path: PathFacts {
            down_delay_ns: ns(cfg.down.delay),
            up_delay_ns: ns(cfg.up.delay),
            down_rate_bps: cfg.down.rate.map(|r| r.bps()),
            up_rate_bps: cfg.up.rate.map(|r| r.bps()),
        },
    }
}

fn budget_of(tr: &Trial) -> Budget {
    let log = LinkLog::parse(tr.log.as_bytes()).unwrap();
    let b = page_budget(&log, &tr.path, &tr.transfer, &tr.asked, &tr.sender).unwrap();
    if tr.asked.len() == 1 {
        // one object: a page of one request is the single request's budget
        let one = budget(&log, &tr.path, &tr.transfer, &tr.sender).unwrap();
        assert_eq!(b, one);
    }
    // the parts partition the TTLB
    assert!(b.residual_ms.abs() < 1e-6, "{b:?}");
    assert!(b.charges.iter().all(|c| c.ms > 0.0), "{b:?}");
    b
}

const LINK: &[(&str, &str)] = &[("rate", "10mbit"), ("delay", "10ms"), ("queue", "100ms")];

/// Runs control and planted on the same link and checks the difference names `cause`; the
/// time charged to it, ms, by seed.
fn check(
    name: &str,
    control: Knobs,
    planted: Knobs,
    keys: &[(&str, &str)],
    cause: Component,
) -> Vec<f64> {
    let mut out = Vec::new();
    for seed in [1, 2, 3] {
        let (c, p) = (run(control, LINK, seed), run(planted, keys, seed));
        let (bc, bp) = (budget_of(&c), budget_of(&p));
        let diff = bp.ttlb_ms - bc.ttlb_ms;
        let floor = bp.floor.total_ms() - bc.floor.total_ms();
        let named = |x: Component| bp.ms(x) - bc.ms(x);
        let table: Vec<String> = Component::ALL
            .iter()
            .map(|&x| format!("{} {:+.1}", x.name(), named(x)))
            .collect();
        let why = format!(
            "{name}, seed {seed}: TTLB {:.1} -> {:.1} ms (floor {floor:+.1}): {}",
            bc.ttlb_ms,
            bp.ttlb_ms,
            table.join(", ")
        );
        eprintln!("{why}");
        assert!(diff > 5.0, "{why}: the planted cause made no difference");
        assert!(named(cause) >= 0.8 * (diff - floor), "{why}");
        for x in Component::ALL.into_iter().filter(|&x| x != cause) {
            assert!(named(x).abs() <= 0.2 * (diff - floor), "{why}");
        }
        out.push(named(cause));
    }
    out
}

#[test]
fn a_second_hello_is_charged_to_the_handshake() {
    let charged = check(
        "retry",
        BASE,
        Knobs {
            retry: true,
            ..BASE
        },
        LINK,
        Component::Handshake,
    );
    // one more round trip of 20 ms; the second hello's and the retry's bytes are overhead
    for ms in charged {
        assert!((ms - 20.0).abs() < 0.01, "{ms}");
    }
}

#[test]
fn a_server_that_waits_is_charged_to_the_endpoint() {
    let charged = check(
        "think 50 ms",
        BASE,
        Knobs {
            think: Duration::from_millis(50),
            ..BASE
        },
        LINK,
        Component::Endpoint,
    );
    for ms in charged {
        assert!((ms - 50.0).abs() < 0.01, "{ms}");
    }
}

#[test]
fn a_small_flow_control_window_is_charged_to_flow_control_or_the_sender() {
    check(
        "flow 16 KB",
        BASE,
        Knobs {
            flow: 16_000,
            ..BASE
        },
        LINK,
        Component::FlowOrSender,
    );
}

#[test]
fn a_flow_control_limit_is_told_from_the_window_when_the_window_stops_growing() {
    // the sender's window stays below the BDP (it grows only while it limits), so only its
    // not growing tells that something else held the sender back
    let validated = Knobs {
        validated: true,
        ..BASE
    };
    check(
        "flow 16 KB, validated window",
        validated,
        Knobs {
            flow: 16_000,
            ..validated
        },
        LINK,
        Component::FlowOrSender,
    );
}

#[test]
fn an_outage_is_charged_to_the_loss_recovery_wait() {
    let mut keys = LINK.to_vec();
    keys.push(("down-outage", "400ms-700ms"));
    check("outage", BASE, BASE, &keys, Component::LossRecoveryWait);
}

#[test]
fn smaller_packets_are_charged_to_overhead() {
    // the same initial window in bytes, so that only the headers differ
    let big = Knobs {
        body: 3_000_000,
        ..BASE
    };
    let charged = check(
        "packets of 700 bytes",
        big,
        Knobs {
            mss: 700,
            iw: 20,
            ..big
        },
        LINK,
        Component::Overhead,
    );
    // each packet of 700 bytes more carries 52 bytes of header, at 10 Mbit/s
    let more = 3_000_000u64.div_ceil(700) - 3_000_000u64.div_ceil(1400);
    let headers_ms = (more * 52 * 8) as f64 / 10e6 * 1e3;
    for ms in charged {
        assert!((ms - headers_ms).abs() < 0.5, "{ms} against {headers_ms}");
    }
}

#[test]
fn a_small_initial_window_is_charged_to_ramp_up() {
    check(
        "initial window 2",
        BASE,
        Knobs { iw: 2, ..BASE },
        LINK,
        Component::RampUp,
    );
}

#[test]
fn a_deeper_cut_after_loss_is_charged_to_the_window_after_loss() {
    // a queue of one BDP at 1 % loss: a cut to 0.3 of the window empties the link for longer
    // than one to 0.7 of it
    let keys: &[(&str, &str)] = &[
        ("rate", "10mbit"),
        ("delay", "10ms"),
        ("queue", "20ms"),
        ("down-loss", "1%"),
    ];
    let gentle = Knobs { beta: 0.7, ..BASE };
    for seed in [1, 2, 3] {
        let (c, p) = (
            run(gentle, keys, seed),
            run(Knobs { beta: 0.3, ..BASE }, keys, seed),
        );
        let (bc, bp) = (budget_of(&c), budget_of(&p));
        let diff = bp.ttlb_ms - bc.ttlb_ms;
        let named = |x: Component| bp.ms(x) - bc.ms(x);
        let why = format!(
            "seed {seed}: {:.1} -> {:.1} ms, {:?} -> {:?}",
            bc.ttlb_ms, bp.ttlb_ms, bc.charges, bp.charges
        );
        eprintln!("{why}");
        assert!(diff > 5.0, "{why}");
        assert!(named(Component::WindowAfterLoss) >= 0.8 * diff, "{why}");
    }
}

#[test]
fn a_client_that_asks_for_the_next_object_late_is_charged_to_waiting_for_requests() {
    // three objects asked for one after another on the connection, as a page's chain of
    // dependencies: each next request costs one round trip at least, and the planted 30 ms
    // between reading an object and asking for the next is the client's
    let chain = Knobs {
        body: 200_000,
        chain: 3,
        ..BASE
    };
    let charged = check(
        "discover 30 ms",
        chain,
        Knobs {
            discover: Duration::from_millis(30),
            ..chain
        },
        LINK,
        Component::Requests,
    );
    for ms in charged {
        assert!((ms - 60.0).abs() < 0.01, "{ms}");
    }
    // without the wait, each next request's propagation round trip (20 ms); the request's and
    // the last acknowledgement's serialisation towards the server (180 bytes at 10 Mbit/s,
    // 0.144 ms) is the server's wait for it, with the endpoints' time
    for seed in [1, 2, 3] {
        let b = budget_of(&run(chain, LINK, seed));
        let per = b.ms(Component::Requests) / 2.0;
        assert!(
            (per - 20.0).abs() < 0.01,
            "seed {seed}: {per} ms a request: {b:?}"
        );
        assert!(
            b.ms(Component::Endpoint) < 3.0 * 0.144 + 0.01,
            "seed {seed}: {b:?}"
        );
    }
}

#[test]
fn a_sender_that_says_when_flow_control_blocked_it_is_told_from_one_the_application_held_back() {
    // the same 16 KB window, now with a sender that counts the limits it reached (as QUIC's
    // DATA_BLOCKED frames, TCP's receive window chronograph): flow control by name
    let telling = Knobs {
        tells_flow: true,
        ..BASE
    };
    check(
        "flow 16 KB, told",
        telling,
        Knobs {
            flow: 16_000,
            ..telling
        },
        LINK,
        Component::FlowControl,
    );
    // an application that hands over its data at 5 Mbit/s on a 10 Mbit/s link: the window
    // has room, no limit of the peer's was reached, so the sender held itself back
    check(
        "application at 5 Mbit/s, told",
        telling,
        Knobs {
            app_rate: Some(625_000),
            ..telling
        },
        LINK,
        Component::SenderLimited,
    );
}
