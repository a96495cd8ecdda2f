//! Fingerprints in virtual time: endpoints of known choices (hello size, first flights, initial
//! window, pacing, acknowledgement frequency, first retransmission timers) talk over the link
//! emulator itself, and what the wire shows must give those choices back. The event log goes
//! through its JSON lines as a trial writes it.

use std::time::Duration;

use quiclab_explain::fingerprint::{
    FirstLossPlan, Framing, LossPlan, NO_CUT, PACED_BELOW, SlowStartEnd, TAIL_PACKETS, TailPlan,
    deep_queue, first_timeout, response, response_at, tail_timeout, wire,
};
use quiclab_explain::{Fate, LinkLog, PathFacts};
use quiclab_link::config::LinkConfig;
use quiclab_link::pipeline::Pipeline;
use quiclab_link::stage::Payload;
use quiclab_link::{Direction, event::Event};

#[derive(Clone, Copy, Debug, PartialEq)]
enum Msg {
    Hello,
    Flight,
    /// The client's answer to the server's flight of handshake round `n` (1-based).
    Answer(u32),
    /// A handshake flight of the server's after round `n`.
    More(u32),
    /// Data packet `seq` (a retransmission keeps its number).
    Data(u32),
    /// Packets received in all, and the highest number among them.
    Ack(u32, u32),
    /// A small packet of the server's that is no data (an acknowledgement of the client's
    /// packets, a flow-control frame).
    Control,
}

#[derive(Clone, Debug)]
struct Wire(Msg, usize);

impl Payload for Wire {
    fn wire_len(&self) -> usize {
        self.1
    }
}

/// The choices of the endpoints, as IP packet sizes and times.
#[derive(Clone, Copy, Debug)]
struct Choices {
    /// The client's hello: datagrams, IP bytes each.
    hello: (u32, usize),
    /// The server's first flight: datagrams, IP bytes each.
    flight: (u32, usize),
    client_pto: Duration,
    server_pto: Duration,
    handshake_rtts: u32,
    iw: u32,
    data: usize,
    /// Between two data packets (a microsecond: the window goes out in one burst).
    pace: Duration,
    ack_every: u32,
    body: u32,
    /// The window's factor when a loss is declared (three later packets acknowledged).
    beta: f64,
    /// The server's retransmission timer once data flows, from its last data packet (doubling
    /// each time it fires unanswered): on it, the server sends again what the client lacks.
    data_pto: Option<Duration>,
    /// A delay-based exit from slow start (HyStart's): once an acknowledgement's RTT exceeds
    /// the least seen by this much, the window stops doubling.
    ss_exit_delay: Option<Duration>,
    /// Past slow start, the window grows by this share of itself a round trip (instead of a
    /// packet, Reno's).
    ca_growth: Option<f64>,
    /// Once the recovery is over, the window before the loss again (quiche's Cubic rolls a
    /// congestion event back when its recovery lost fewer packets than a fifth of its window's).
    rollback: bool,
    /// The server writes an 80-byte packet that is no data after every this many
    /// acknowledgements it takes in (0: never).
    small_every: u32,
}

const QUIC_LIKE: Choices = Choices {
    hello: (1, 1228),
    flight: (2, 1228),
    client_pto: Duration::from_millis(999),
    server_pto: Duration::from_millis(999),
    handshake_rtts: 1,
    iw: 10,
    data: 1228,
    pace: Duration::from_micros(1),
    ack_every: 2,
    body: 400,
    beta: 0.5,
    data_pto: None,
    ss_exit_delay: None,
    ca_growth: None,
    rollback: false,
    small_every: 0,
};

fn ns(d: Duration) -> u64 {
    d.as_nanos() as u64
}

/// Runs one transfer over a 50 ms + 50 ms path with `keys` planted: the log as a trial writes
/// it, read back.
fn run(c: Choices, keys: &[(&str, &str)]) -> (LinkLog, PathFacts) {
    let mut all = vec![("delay", "50ms")];
    all.extend_from_slice(keys);
    let cfg = LinkConfig::from_keys(7, &all, &|_| Err("no traces".into())).unwrap();
    let mut up: Pipeline<Wire> = Pipeline::new(Direction::Up, &cfg.up, 7, true).unwrap();
    let mut down: Pipeline<Wire> = Pipeline::new(Direction::Down, &cfg.down, 7, true).unwrap();
    let t = |n: u64| Duration::from_nanos(n);
    let mut now = 1_000_000u64;
    for _ in 0..c.hello.0 {
        up.push(t(now), Wire(Msg::Hello, c.hello.1));
    }
    // the client
    let mut client_timer = Some(now + ns(c.client_pto));
    let mut client_backoff = 1u64;
    let mut last_answer: Option<Msg> = None;
    let (mut hellos_in, mut done) = (0u32, false);
    // the server
    let mut server_timer: Option<u64> = None;
    let mut server_backoff = 1u64;
    let mut flight_sent = false;
    let (mut sending, mut sent, mut acked) = (false, 0u32, 0u32);
    let (mut cwnd, mut ssthresh) = (c.iw as f64, f64::MAX);
    let (mut lost, mut resend): (u32, Option<u32>) = (0, None);
    let mut received = std::collections::BTreeSet::new();
    let mut declared = std::collections::BTreeSet::new();
    let mut recovery_until = 0u32;
    let mut prior: Option<f64> = None;
    let mut next_send = 0u64;
    let (mut last_data, mut data_backoff) = (0u64, 1u64);
    let mut sent_at = vec![0u64; c.body as usize];
    let mut min_rtt = u64::MAX;
    let mut acks_in = 0u32;
    // packets in flight: sent, less acknowledged, less declared lost
    let can_send = |sent: u32, acked: u32, lost: u32, cwnd: f64, resend: Option<u32>| {
        (resend.is_some() || sent < c.body)
            && (sent.saturating_sub(acked + lost) as f64) < cwnd.floor()
    };
    for _ in 0..1_000_000 {
        // the server sends what its window allows, paced
        while sending && can_send(sent, acked, lost, cwnd, resend) && now >= next_send {
            let seq = match resend.take() {
                Some(seq) => {
                    lost -= 1;
                    seq
                }
                None => sent,
            };
            down.push(t(now), Wire(Msg::Data(seq), c.data));
            sent_at[seq as usize] = now;
            if seq == sent {
                sent += 1;
            }
            next_send = now + ns(c.pace);
            last_data = now;
        }
        while let Some(d) = up.poll_transmit(t(now)) {
            match d.data.0 {
                Msg::Hello => {
                    hellos_in += 1;
                    if hellos_in >= c.hello.0 && !flight_sent {
                        flight_sent = true;
                        for _ in 0..c.flight.0 {
                            down.push(t(now), Wire(Msg::Flight, c.flight.1));
                        }
                        server_timer = Some(now + ns(c.server_pto));
                    } else if hellos_in > c.hello.0 {
                        // a retransmitted hello: the server answers it at once
                        down.push(t(now), Wire(Msg::Flight, c.flight.1));
                    }
                }
                Msg::Answer(n) => {
                    server_timer = None;
                    if n < c.handshake_rtts {
                        down.push(t(now), Wire(Msg::More(n), 1100));
                    } else if !sending {
                        sending = true;
                        next_send = now;
                    }
                }
                Msg::Ack(n, largest) => {
                    acks_in += 1;
                    if c.small_every > 0 && acks_in.is_multiple_of(c.small_every) {
                        down.push(t(now), Wire(Msg::Control, 80));
                    }
                    let newly = n.saturating_sub(acked) as f64;
                    if newly > 0.0 {
                        data_backoff = 1;
                    }
                    let rtt = now - sent_at[largest as usize];
                    min_rtt = min_rtt.min(rtt);
                    if let Some(d) = c.ss_exit_delay
                        && cwnd < ssthresh
                        && rtt >= min_rtt + ns(d)
                    {
                        ssthresh = cwnd;
                    }
                    acked = acked.max(n);
                    if let Some(w) = prior.filter(|_| acked >= recovery_until) {
                        cwnd = w;
                        ssthresh = w;
                        prior = None;
                    }
                    // no growth in recovery: until what was sent before the reduction is
                    // acknowledged
                    if acked < recovery_until {
                    } else if cwnd < ssthresh {
                        cwnd += newly;
                    } else if let Some(g) = c.ca_growth {
                        cwnd += newly * g;
                    } else {
                        cwnd += newly / cwnd;
                    }
                    // a hole with three later packets acknowledged: lost (the model's
                    // acknowledgement names the hole as a SACK block would)
                    let hole = (0..largest).find(|s| !received.contains(s));
                    if let Some(h) = hole.filter(|&h| largest >= h + 3 && declared.insert(h)) {
                        if c.rollback {
                            prior = Some(cwnd);
                        }
                        cwnd *= c.beta;
                        ssthresh = cwnd;
                        recovery_until = sent;
                        lost += 1;
                        resend = Some(h);
                    }
                }
                _ => {}
            }
        }
        while let Some(d) = down.poll_transmit(t(now)) {
            match d.data.0 {
                Msg::Flight | Msg::More(_) => {
                    let round = match d.data.0 {
                        Msg::More(n) => n + 1,
                        _ => 1,
                    };
                    let answer = Msg::Answer(round);
                    if last_answer.is_none_or(|a| a != answer) {
                        last_answer = Some(answer);
                        up.push(t(now), Wire(answer, 120));
                        client_backoff = 1;
                        client_timer = Some(now + ns(c.client_pto));
                    }
                }
                Msg::Data(seq) => {
                    client_timer = None;
                    received.insert(seq);
                    let got = received.len() as u32;
                    if got.is_multiple_of(c.ack_every) || got == c.body {
                        let largest = *received.last().unwrap();
                        up.push(t(now), Wire(Msg::Ack(got, largest), 60));
                    }
                    done = got == c.body;
                }
                _ => {}
            }
        }
        if done {
            break;
        }
        if client_timer.is_some_and(|x| x <= now) {
            // the client's retransmission: its hello, or its last answer
            let m = last_answer.unwrap_or(Msg::Hello);
            let size = if m == Msg::Hello { c.hello.1 } else { 120 };
            up.push(t(now), Wire(m, size));
            client_backoff *= 2;
            client_timer = Some(now + client_backoff * ns(c.client_pto));
        }
        if server_timer.is_some_and(|x| x <= now) {
            down.push(t(now), Wire(Msg::Flight, c.flight.1));
            server_backoff *= 2;
            server_timer = Some(now + server_backoff * ns(c.server_pto));
        }
        let data_timer = c
            .data_pto
            .filter(|_| sending && acked < sent)
            .map(|pto| last_data + data_backoff * ns(pto));
        if data_timer.is_some_and(|x| x <= now) {
            for seq in (0..sent).filter(|s| !received.contains(s)) {
                down.push(t(now), Wire(Msg::Data(seq), c.data));
            }
            last_data = now;
            data_backoff *= 2;
            continue;
        }
        let next = [
            data_timer,
            up.poll_timeout().map(ns),
            down.poll_timeout().map(ns),
            client_timer,
            server_timer,
            (sending && can_send(sent, acked, lost, cwnd, resend)).then_some(next_send.max(now)),
        ]
        .into_iter()
        .flatten()
        .min()
        .expect("the transfer stalled");
        now = next.max(now);
    }
    assert!(done, "the transfer did not end");
    let mut events: Vec<Event> = up.take_events();
    events.extend(down.take_events());
    events.sort_by_key(|e| e.t);
    let text: String = events
        .iter()
        .map(|e| serde_json::to_string(e).unwrap() + "\n")
        .collect();
    let path = PathFacts {
        down_delay_ns: ns(cfg.down.delay),
        up_delay_ns: ns(cfg.up.delay),
        down_rate_bps: None,
        up_rate_bps: None,
    };
    (LinkLog::parse(text.as_bytes()).unwrap(), path)
}

#[test]
fn a_burst_sender_shows_its_hello_first_flight_window_and_ack_frequency() {
    let (log, path) = run(QUIC_LIKE, &[]);
    let card = wire(&log, &path, &Framing::QUIC).unwrap();
    assert_eq!(card.client_first_flight.packets, 1);
    assert_eq!(card.client_first_payload, 1200, "1228 IP bytes less 28");
    assert_eq!(card.server_first_flight.packets, 2);
    assert_eq!(card.server_first_flight.bytes, 2400);
    let f = card.first_data_flight.expect("a data flight");
    assert_eq!(f.packets, 10, "the initial window of ten packets");
    assert_eq!(f.bytes, 12_000);
    assert_eq!(f.largest_burst, 10, "written together");
    assert_eq!(f.span_us, 9);
    // every second data packet acknowledged: 400 data packets, 200 acknowledgements
    assert_eq!(card.data_per_ack, Some(2.0));
    // unpaced: each round trip's data leaves as the acknowledgements of the one before come,
    // and they come as close together as it left (on a link without a rate limit)
    let (share, packets) = card.busiest_tenth.expect("a whole round trip of data");
    assert!(share >= PACED_BELOW, "{share} of {packets}");
}

#[test]
fn a_paced_sender_spreads_its_window_and_a_lazier_receiver_acknowledges_less() {
    let c = Choices {
        pace: Duration::from_millis(2),
        ack_every: 5,
        iw: 32,
        data: 1480,
        ..QUIC_LIKE
    };
    let (log, path) = run(c, &[]);
    let card = wire(&log, &path, &Framing::QUIC).unwrap();
    let f = card.first_data_flight.unwrap();
    assert_eq!(f.packets, 32);
    assert_eq!(f.bytes, 32 * 1452);
    assert_eq!(f.largest_burst, 1, "one packet every 2 ms");
    assert_eq!(f.span_us, 31 * 2000);
    assert_eq!(card.largest_burst, Some(1));
    assert_eq!(card.typical_burst, Some(1));
    // one packet every 2 ms is 50 a round trip, five of them in a tenth of one
    let (share, packets) = card.busiest_tenth.expect("a whole round trip of data");
    assert_eq!(packets, 50);
    assert!((share - 0.1).abs() <= 1.0 / 50.0, "{share}");
    assert_eq!(card.data_per_ack, Some(5.0));
    assert_eq!(card.server_largest_payload, 1452);
}

#[test]
fn two_handshake_round_trips_are_skipped_before_the_window_is_read() {
    let c = Choices {
        handshake_rtts: 2,
        hello: (1, 300),
        flight: (1, 80),
        iw: 10,
        data: 1500,
        ..QUIC_LIKE
    };
    let (log, path) = run(c, &[]);
    let card = wire(&log, &path, &Framing::TCP_TLS).unwrap();
    let f = card.first_data_flight.unwrap();
    assert_eq!(f.packets, 10, "the second handshake flight is not data");
    assert_eq!(f.bytes, 10 * 1448);
    // read as one round trip, the window would be the server's second handshake flight
    let wrong = wire(&log, &path, &Framing::QUIC).unwrap();
    assert_eq!(wrong.first_data_flight.unwrap().packets, 1);
}

#[test]
fn the_first_timers_are_read_with_the_first_flights_lost() {
    for (client, server) in [(999, 999), (30, 30), (60, 200)] {
        let c = Choices {
            hello: (2, 1228),
            flight: (3, 1228),
            client_pto: Duration::from_millis(client),
            server_pto: Duration::from_millis(server),
            ..QUIC_LIKE
        };
        let (clean, path) = run(c, &[]);
        let plan = FirstLossPlan::of(&wire(&clean, &path, &Framing::QUIC).unwrap());
        assert_eq!((plan.client_flight, plan.server_flight), (2, 3));
        let keys = plan.link_keys();
        let keys: Vec<(&str, &str)> = keys.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let (lost, _) = run(c, &keys);
        assert_eq!(
            FirstLossPlan::of_log(&lost),
            plan,
            "its own first flights, read back"
        );
        let got = first_timeout(&lost, &plan);
        assert_eq!(got.client_ms, Some(client as f64), "{got:?}");
        assert_eq!(got.server_ms, Some(server as f64), "{got:?}");
    }
}

#[test]
fn a_server_answering_the_client_is_not_read_as_its_timer() {
    // the server's flight lost, the client's retransmission not: the server answers it before
    // its own (longer) timer fires, and that answer is not a timer's
    let c = Choices {
        client_pto: Duration::from_millis(100),
        server_pto: Duration::from_millis(900),
        ..QUIC_LIKE
    };
    let plan = FirstLossPlan {
        server_flight: 2,
        client_flight: 1,
    };
    let (log, _) = run(c, &[("down-drop-packets", "0-1")]);
    let got = first_timeout(&log, &plan);
    assert_eq!(got.client_ms, Some(100.0));
    assert_eq!(got.server_ms, None);
    assert!(got.server_why.unwrap().contains("answered"));
}

/// The sender's clean transfer, and the same with the first loss planted from it, as the
/// congestion-response probe plants it: the two logs, the path and the plan.
fn one_loss(c: Choices) -> (LinkLog, LinkLog, PathFacts, LossPlan) {
    let (clean, path) = run(c, &[]);
    let first = LossPlan::first_of(&clean, &path, &Framing::QUIC).unwrap();
    let keys = first.link_keys();
    let (once, _) = run(c, &[(keys[0].0, keys[0].1.as_str())]);
    (clean, once, path, first)
}

#[test]
fn the_window_after_one_planted_loss_gives_the_multiplicative_decrease() {
    // and a sender that rolls its cut back once its recovery is over: the cut it held then
    for (beta, iw, ack_every, rollback) in [
        (0.5, 10, 2, false),
        (0.7, 10, 1, false),
        (0.7, 32, 2, false),
        (0.85, 10, 2, false),
        (0.7, 10, 2, true),
    ] {
        let c = Choices {
            beta,
            iw,
            ack_every,
            body: 4000,
            rollback,
            ..QUIC_LIKE
        };
        let (_, once, path, first) = one_loss(c);
        let plan = first.then(&once, &path, &Framing::QUIC).unwrap();
        let keys = plan.link_keys();
        let (lost, _) = run(c, &[(keys[0].0, keys[0].1.as_str())]);
        let r = response(&lost, &path, &Framing::QUIC, &plan).unwrap();
        eprintln!("planted {beta} (iw {iw}, ack every {ack_every}, rolled back {rollback}): {r:?}");
        // what the window grows by in the round trip after the recovery: a packet (the
        // controller's additive increase), and the rounding of the window to packets
        let packet = 1200.0 / r.before_bytes as f64;
        assert!(
            (r.beta - beta).abs() <= 1.5 * packet + 0.005,
            "planted {beta} (iw {iw}, ack every {ack_every}, rolled back {rollback}): {r:?}"
        );
        // a transfer where the packet was not lost is not read as a response
        assert!(response(&once, &path, &Framing::QUIC, &plan).is_err());
    }
}

#[test]
fn planted_losses_land_on_the_same_data_wherever_the_senders_small_packets_fall() {
    // planned from transfers without small packets, planted in one whose server writes an
    // 80-byte packet after every third acknowledgement it takes in: counted among the large
    // packets, the drops fall on data all the same, and the window reads as it does without
    let c = Choices {
        beta: 0.7,
        body: 4000,
        ..QUIC_LIKE
    };
    let (_, once, path, first) = one_loss(c);
    let plan = first.then(&once, &path, &Framing::QUIC).unwrap();
    let keys = plan.link_keys();
    let keys = [(keys[0].0, keys[0].1.as_str())];
    let (quiet, _) = run(c, &keys);
    let (chatty, _) = run(
        Choices {
            small_every: 3,
            ..c
        },
        &keys,
    );
    let second = plan.second.unwrap();
    let (at_quiet, at_chatty) = (
        plan.index_in(&quiet, second).unwrap() as usize,
        plan.index_in(&chatty, second).unwrap() as usize,
    );
    // the small packets moved the data: the link's own count would have dropped another
    assert!(at_chatty > at_quiet, "{at_quiet} {at_chatty}");
    assert!(!matches!(chatty.down[at_quiet].fate, Fate::Dropped(_)));
    for (log, at) in [(&quiet, at_quiet), (&chatty, at_chatty)] {
        assert!(matches!(log.down[at].fate, Fate::Dropped(_)));
        assert_eq!(log.down[at].size, 1228);
    }
    let (a, b) = (
        response(&quiet, &path, &Framing::QUIC, &plan).unwrap(),
        response(&chatty, &path, &Framing::QUIC, &plan).unwrap(),
    );
    // the 80-byte packets are in flight too: a packet's worth of the flight, each way
    let packet = 1200.0 / a.before_bytes as f64;
    assert!((a.beta - 0.7).abs() <= 1.5 * packet + 0.005, "{a:?}");
    assert!((b.beta - a.beta).abs() <= packet, "{a:?} {b:?}");
}

#[test]
fn a_loss_in_slow_start_tells_a_sender_that_cuts_from_one_that_does_not() {
    // a cut by Reno's, Cubic's or Chromium's factor (and one rolled back after its recovery)
    // reads below NO_CUT; a sender that keeps its flight through the loss (BBR's packet
    // conservation, then its model) reads about 1
    for (beta, rollback) in [
        (0.5, false),
        (0.7, false),
        (0.85, false),
        (0.7, true),
        (1.0, false),
    ] {
        let c = Choices {
            beta,
            body: 4000,
            rollback,
            ..QUIC_LIKE
        };
        let (clean, once, path, first) = one_loss(c);
        let lost = first.index_in(&once, first.first).unwrap();
        let r = response_at(&once, &path, &Framing::QUIC, lost).unwrap();
        eprintln!("planted {beta} (rolled back {rollback}), at the first loss: {r:?}");
        // the rounding of the window to packets (a packet and a half each way); and in slow
        // start the window grows by a packet for each packet acknowledged until the loss is
        // noticed: the three after it (the packet threshold) and the acknowledgement's batch
        // (two), so the window cut is up to five packets more than the flight read before
        let packet = 1200.0 / r.before_bytes as f64;
        let (low, high) = (
            beta - 1.5 * packet - 0.005,
            beta + beta * 5.0 * packet + 1.5 * packet + 0.005,
        );
        if beta < 1.0 {
            assert!(
                r.beta <= NO_CUT && r.beta >= low && r.beta <= high,
                "planted {beta} (rolled back {rollback}): {r:?}"
            );
        } else {
            assert!(
                r.beta > NO_CUT && r.beta <= 1.0 + 1.5 * packet,
                "no cut: {r:?}"
            );
        }
        // the clean transfer lost nothing there: no reading
        assert!(response_at(&clean, &path, &Framing::QUIC, lost).is_err());
    }
}

#[test]
fn the_timer_with_the_tail_lost_is_read_from_the_last_packet_to_the_probe() {
    // a burst sender whose timer is quinn's on this path (100 ms + 25 ms + 1 ms), and a paced
    // one whose timer is twice the round trip (TCP's tail-loss probe)
    for (pace, pto, body) in [(1, 126, 400), (2_000, 200, 400), (1, 126, 403)] {
        let c = Choices {
            pace: Duration::from_micros(pace),
            data_pto: Some(Duration::from_millis(pto)),
            body,
            ..QUIC_LIKE
        };
        let (clean, path) = run(c, &[]);
        let plan = TailPlan::of(&clean, &path, &Framing::QUIC).unwrap();
        assert_eq!(plan.packets as usize, TAIL_PACKETS, "{plan:?}");
        // every payload until the last data packet: the hello's answer (two datagrams) and
        // the body's
        assert_eq!(plan.bytes, u64::from(body + 2) * 1200, "{plan:?}");
        // nothing dropped on the clean probe: no reading
        let none = tail_timeout(&clean, &plan, &Framing::QUIC);
        assert!(none.ms.is_none() && none.why.is_some(), "{none:?}");
        assert_eq!(none.data_dropped, 0, "{none:?}");
        let keys = plan.link_keys();
        let (lost, _) = run(c, &[(keys[0].0, keys[0].1.as_str())]);
        let t = tail_timeout(&lost, &plan, &Framing::QUIC);
        eprintln!("pace {pace} us, timer {pto} ms, {body} packets: {plan:?} {t:?}");
        assert_eq!(t.dropped as usize, TAIL_PACKETS, "{t:?}");
        assert_eq!(t.data_dropped as usize, TAIL_PACKETS, "{t:?}");
        assert_eq!(t.ms, Some(pto as f64), "{t:?}");
    }
}

#[test]
fn a_blackout_that_ended_before_the_last_round_trip_is_not_read_as_the_tails_timer() {
    // an unpaced sender falls silent between its round trips: a blackout planted a flight
    // before the last ends in that silence, and the next round trip's data is no timer's
    let c = Choices {
        data_pto: Some(Duration::from_millis(126)),
        ..QUIC_LIKE
    };
    let (clean, path) = run(c, &[]);
    let mut plan = TailPlan::of(&clean, &path, &Framing::QUIC).unwrap();
    plan.after_bytes /= 2;
    let keys = plan.link_keys();
    let (lost, _) = run(c, &[(keys[0].0, keys[0].1.as_str())]);
    let t = tail_timeout(&lost, &plan, &Framing::QUIC);
    assert!(t.dropped > 0, "{t:?}");
    assert!(t.ms.is_none(), "{t:?}");
    assert!(
        t.why
            .as_deref()
            .unwrap()
            .contains("before the transfer's end"),
        "{t:?}"
    );
}

#[test]
fn a_deep_queue_is_filled_by_slow_start_and_spared_by_a_delay_based_exit() {
    // 20 Mbit/s with a 200 ms drop-tail queue: 500 kB of queue on a 250 kB path. Slow start
    // without an exit doubles its window into it until it overflows; queueing then reaches the
    // queue's limit (less what is in serialisation: a 1228-byte packet takes 0.49 ms)
    let keys = [("down-rate", "20mbit"), ("down-queue", "200ms")];
    let c = Choices {
        body: 3000,
        data_pto: Some(Duration::from_millis(400)),
        ..QUIC_LIKE
    };
    let (filled, path) = run(c, &keys);
    let q = deep_queue(&filled, &path, &Framing::QUIC).unwrap();
    eprintln!("no exit: {q:?}");
    assert!((q.peak_ms - 200.0).abs() <= 1.0, "{q:?}");
    assert!(q.ended == SlowStartEnd::Overflow && q.lost > 0, "{q:?}");
    // a transfer too short to reach the queue's limit ends in slow start
    let (short, path) = run(Choices { body: 300, ..c }, &keys);
    let q = deep_queue(&short, &path, &Framing::QUIC).unwrap();
    assert!(
        q.ended == SlowStartEnd::TransferEnded && q.lost == 0,
        "{q:?}"
    );
    // leaving slow start once an RTT sample is 10 ms above the least (here a burst of its slow
    // start queues that long before the flight reaches the path's 250 kB), it keeps its queue
    // far below the limit and loses nothing. At worst, the window doubles once more after the
    // standing queue reaches 10 ms (25 kB) before a sample shows it: 2 x 275 kB - 250 kB is
    // 300 kB of queue, 120 ms
    let c = Choices {
        ss_exit_delay: Some(Duration::from_millis(10)),
        ..c
    };
    let (spared, path) = run(c, &keys);
    let reno = deep_queue(&spared, &path, &Framing::QUIC).unwrap();
    eprintln!("exit at 10 ms, then a packet a round trip: {reno:?}");
    assert!(reno.peak_ms < 120.0, "{reno:?}");
    assert_eq!(reno.ended, SlowStartEnd::Left, "{reno:?}");
    assert_eq!(reno.lost, 0, "{reno:?}");
    // the same exit, then a window growing 10 % a round trip (Linux's Cubic grows 5 % before
    // its first loss): the queue keeps growing over the rest of the transfer, but its slow
    // start ended where it did
    let c = Choices {
        ca_growth: Some(0.1),
        ..c
    };
    let (creeping, path) = run(c, &keys);
    let q = deep_queue(&creeping, &path, &Framing::QUIC).unwrap();
    eprintln!("exit at 10 ms, then 10 % a round trip: {q:?}");
    assert_eq!((q.ended, q.round), (reno.ended, reno.round), "{q:?}");
    assert!((q.peak_ms - reno.peak_ms).abs() < 5.0, "{q:?} {reno:?}");
    // what the whole transfer met: well beyond, which is why it is not what is read
    let later = creeping
        .down
        .iter()
        .filter_map(|p| match p.fate {
            Fate::Departed(d) => Some(d.saturating_sub(p.arrive_ns + path.down_delay_ns)),
            _ => None,
        })
        .max()
        .unwrap();
    assert!(later as f64 / 1e6 > q.peak_ms + 30.0, "{later} {q:?}");
}
