//! `quiclab fingerprint` as a user runs it (as root: the probes make namespaces). quinn is the
//! stack whose answers are known: its constants (a 12,000-byte initial window, an initial RTT of
//! 333 ms so a first timer of three times that, 1200-byte Initial datagrams, path MTU discovery
//! up to 1452 even on a 9000-byte link, Cubic's β of 0.7, RFC 9002's loss thresholds) and its knobs (the initial window, the initial RTT, the packet
//! size, NewReno's β of 0.5, the loss thresholds) must come
//! back from the wire within each item's tolerance; every other stack of the registry gets a card
//! in each role it has, every item answered.

use serde_json::Value;

mod common;

/// The cards of `quiclab fingerprint ARGS --json`, which must succeed.
fn cards(args: &[&str]) -> Vec<Value> {
    let out = common::quiclab()
        .arg("fingerprint")
        .args(args)
        .arg("--json")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{:?}: {}\n{stderr}",
        out.status,
        args.join(" ")
    );
    eprintln!("{stderr}");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["failed"].as_array().unwrap().len(), 0, "{v}");
    v["cards"].as_array().unwrap().clone()
}

fn card<'a>(cards: &'a [Value], stack: &str, role: &str) -> &'a Value {
    cards
        .iter()
        .find(|c| c["stack"] == stack && c["role"] == role)
        .unwrap_or_else(|| panic!("no card of {stack} as {role}"))
}

/// Every run's answer of `key` in words is `want` (before the condition it was read in, where
/// its words give one after a comma: an urgent response's time).
fn assert_words(card: &Value, key: &str, want: &str) {
    let item = card["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["key"] == key)
        .unwrap_or_else(|| panic!("no item {key} in {card}"));
    let words = item["words"].as_array().unwrap_or_else(|| panic!("{item}"));
    assert!(!words.is_empty(), "{item}");
    for w in words {
        let w = w
            .as_str()
            .unwrap_or_else(|| panic!("{key}: a run could not tell: {item}"));
        assert!(
            w == want
                || w.strip_prefix(want)
                    .is_some_and(|rest| rest.starts_with(", ")),
            "{key}: {w:?}, not {want:?}: {item}"
        );
    }
}

/// Each run's reading at `pointer` (a JSON pointer into the card's runs, which hold what each
/// probe read, beyond the items: an item's condition, such as an urgent response's time).
fn run_readings(card: &Value, pointer: &str) -> Vec<f64> {
    card["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            r.pointer(pointer)
                .and_then(Value::as_f64)
                .unwrap_or_else(|| panic!("{pointer}: a run could not tell: {r}"))
        })
        .collect()
}

/// Each run's answer of `key` (every run must have answered).
fn runs(card: &Value, key: &str) -> Vec<f64> {
    let item = card["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["key"] == key)
        .unwrap_or_else(|| panic!("no item {key} in {card}"));
    item["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            r.as_f64()
                .unwrap_or_else(|| panic!("{key}: a run could not tell: {item}"))
        })
        .collect()
}

fn assert_each_within(card: &Value, key: &str, want: f64, tolerance: f64) {
    for got in runs(card, key) {
        assert!(
            (got - want).abs() <= tolerance,
            "{} as {}: {key} {got}, want {want} ± {tolerance}",
            card["stack"],
            card["role"]
        );
    }
}

#[test]
fn quinns_constants_and_knobs_come_back_from_the_wire() {
    common::assert_root();
    let _turn = common::one_at_a_time();
    let plain = cards(&["quinn", "--runs", "2"]);
    let server = card(&plain, "quinn", "server");
    // Initial datagrams padded to 1200; discovery grows the packets to its upper bound, 1452
    assert_each_within(server, "first_payload", 1200.0, 0.0);
    assert_each_within(server, "largest_payload", 1452.0, 0.0);
    // and no further where the link takes 9000-byte packets: 1452 is the bound it searches to
    assert_each_within(server, "jumbo_largest_payload", 1452.0, 0.0);
    // 12,000 bytes (ten 1200-byte packets) before any acknowledgement: within one packet
    assert_each_within(server, "initial_window", 12_000.0, 1452.0);
    // no RTT sample yet: 333 ms + 4 × 166.5 ms = 999 ms, within 10 %
    assert_each_within(server, "first_pto", 999.0, 99.9);
    // its Cubic's multiplicative decrease
    assert_each_within(server, "beta", 0.7, 0.05);
    // its pacer spreads each round trip's data over it, in bursts of ten
    assert_each_within(server, "paces", 1.0, 0.0);
    // with its tail lost, RFC 9002's timer once the path is measured: the smoothed RTT (the
    // path's 100 ms), max(4 × its variance, 1 ms) and the peer's max_ack_delay (25 ms), within
    // 10 % (the variance is a fraction of a millisecond after a transfer's samples)
    assert_each_within(server, "tail_pto", 126.0, 12.6);
    // its side of the handshake, from the clean probe's capture: rustls takes the client's
    // x25519 share without a HelloRetryRequest and its first suite (AES-256-GCM, the ring
    // provider's first); its Handshake packets, opened with the trial's key log, carry
    // quiclab's stream window (1.25 MB) on each request, quinn's unlimited connection window,
    // quinn's defaults of 100 concurrent requests and a 30 s idle timeout, and no
    // max_ack_delay (25 ms)
    assert_words(server, "server_group", "x25519");
    assert_words(server, "hello_retry", "none");
    assert_words(server, "cipher_suite", "TLS_AES_256_GCM_SHA384");
    // offered one P-256 share (x25519 listed second), rustls takes it rather than spend a
    // round trip on a HelloRetryRequest for its preferred x25519
    assert_words(server, "retry_to_p256", "takes secp256r1");
    // an urgent stylesheet asked for while a least urgent 800 kB response is being sent at
    // 10 Mbit/s: quinn's server (RFC 9218 urgencies, as quiclab configures it) sends it first,
    // nearly all the bytes meanwhile its own, and it arrives a round trip after its request
    // and its 24 ms of sending at least, and no later than the 100 ms bottleneck queue ahead of
    // it allows (and 25 ms for the host)
    assert_each_within(server, "priorities", 2.0, 0.0);
    for got in run_readings(server, "/priorities/urgent_ms") {
        assert!(
            (124.0..=249.0).contains(&got),
            "quinn's urgent response took {got} ms"
        );
    }
    // its peer's second connection resumes the first's session with the request as 0-RTT
    // data, which quinn's server takes: the first byte one round trip after the start
    assert_words(server, "zero_rtt", "accepts 0-RTT");
    assert_each_within(server, "resumed_ttfb", 1.0, 0.1);
    assert_each_within(server, "max_stream_data", 1_250_000.0, 0.0);
    assert_each_within(server, "max_data", ((1u64 << 62) - 1) as f64, 0.0);
    assert_each_within(server, "max_streams_bidi", 100.0, 0.0);
    assert_each_within(server, "max_ack_delay", 25.0, 0.0);
    assert_each_within(server, "idle_timeout", 30_000.0, 0.0);
    // a loss that one packet shows, with nothing more to send, is declared by quinn's time
    // threshold, 9/8 of max(smoothed RTT, latest RTT) after the sending: at least 9/8 of the
    // path's 100 ms and within 10 % of it, some 12.5 ms after the acknowledgement of the packet
    // behind it; one that three packets show, by its packet threshold (3) as their
    // acknowledgement arrives, a round trip after the sending: well short of the 12.5 ms a time
    // threshold would wait after it (the host's scheduling once added 2.8 ms). A probe whose
    // client answered the third packet only with its own ACK delay is refused and run again
    for got in runs(server, "lone_loss_retransmit") {
        assert!(
            (112.5..=123.75).contains(&got),
            "quinn's time threshold: {got} ms after the loss"
        );
    }
    for got in run_readings(server, "/isolated/0/read/detection/after_first_ms") {
        assert!(
            (got - 12.5).abs() <= 5.0,
            "quinn's lone loss: {got} ms after the acknowledgement of the packet behind it"
        );
    }
    // a round trip after the sending, and within 10 ms of it (a time threshold's 112.5 ms is
    // beyond); at the third's acknowledgement, within 5 ms. Or, in a run, the time threshold
    // (112.5 ms, 12.5 ms after that acknowledgement): the client's first packet after the
    // third's delivery need not acknowledge the third, and the reader does not open the
    // client's packets to tell (quinn read so once in a clean checkout's test, quic-go once in
    // 12 runs of a sitting, each 13.3 to 13.6 ms after). At least one run reads the packet
    // threshold: with it broken, both would read the time threshold
    let totals = runs(server, "three_behind_retransmit");
    let after = run_readings(server, "/isolated/1/read/detection/after_third_ms");
    let packet = |t: f64, a: f64| (t - 105.0).abs() <= 5.0 && a.abs() <= 5.0;
    let timer = |t: f64, a: f64| (112.5..=123.75).contains(&t) && (a - 12.5).abs() <= 5.0;
    assert!(
        totals
            .iter()
            .zip(&after)
            .all(|(&t, &a)| packet(t, a) || timer(t, a))
            && totals.iter().zip(&after).any(|(&t, &a)| packet(t, a)),
        "quinn's loss three packets show: {totals:?} ms after the loss, {after:?} after the \
         third's acknowledgement"
    );
    let client = card(&plain, "quinn", "client");
    assert_each_within(client, "first_payload", 1200.0, 0.0);
    assert_each_within(client, "first_flight_packets", 1.0, 0.0);
    assert_each_within(client, "first_pto", 999.0, 99.9);
    // an acknowledgement every second ack-eliciting packet (its default ACK frequency), the
    // data spaced 1.2 ms apart at 10 Mbit/s; a few acknowledge other packets or a timer's
    assert_each_within(client, "data_per_ack", 1.85, 0.25);
    // its hello, read from the capture (Initial packets opened with their public keys): rustls
    // sends one key share, for its first group, and lists every group quiclab gives it (by
    // default x25519 and P-256)
    assert_words(client, "key_shares", "x25519");
    assert_words(client, "groups", "x25519 + secp256r1");
    // its transport parameters, from the same hello: quiclab's stream window (1.25 MB) and
    // quinn's connection window (unlimited: the largest variable-length integer), and no
    // max_ack_delay, which means 25 ms
    assert_each_within(client, "max_stream_data", 1_250_000.0, 0.0);
    assert_each_within(client, "max_data", ((1u64 << 62) - 1) as f64, 0.0);
    assert_each_within(client, "max_ack_delay", 25.0, 0.0);
    let p256 = cards(&[
        "quinn",
        "--role",
        "client",
        "--runs",
        "1",
        "--knob",
        "groups=p256,p384",
        "--knob",
        "quic-stream-window=300kb",
        "--knob",
        "quic-conn-window=2mb",
    ]);
    let c = card(&p256, "quinn", "client");
    assert_words(c, "key_shares", "secp256r1");
    assert_words(c, "groups", "secp256r1 + secp384r1");
    assert_each_within(c, "max_stream_data", 300_000.0, 0.0);
    assert_each_within(c, "max_data", 2_000_000.0, 0.0);

    let knobs = cards(&[
        "quinn",
        "--runs",
        "2",
        "--knob",
        "quic-initial-window=20000b",
        "--knob",
        "quic-initial-rtt=50ms",
        "--knob",
        "quic-initial-mtu=1350",
        "--knob",
        "quic-mtu-discovery=off",
        "--knob",
        "quic-cc=newreno",
        "--knob",
        "server-groups=x25519",
    ]);
    let server = card(&knobs, "quinn", "server");
    // a server that takes x25519 only asks the P-256 share's client for it
    assert_words(server, "retry_to_p256", "asks for x25519");
    assert_each_within(server, "initial_window", 20_000.0, 1350.0);
    // 50 ms + 4 × 25 ms, within 10 %: a timer long enough that the host's scheduling of the
    // endpoint (a 30 ms timer once fired 5.3 ms late on two busy cores) stays inside the 10 %
    assert_each_within(server, "first_pto", 150.0, 15.0);
    assert_each_within(server, "largest_payload", 1350.0, 0.0);
    assert_each_within(server, "jumbo_largest_payload", 1350.0, 0.0);
    assert_each_within(server, "beta", 0.5, 0.05);
    // the initial RTT no longer counts once the path is measured
    assert_each_within(server, "tail_pto", 126.0, 12.6);
    // and slow start fills the deep queue: quinn has no delay-based exit (HyStart), so its
    // packets meet the 300 ms queue's whole length before it overflows
    assert_each_within(server, "slow_start_exit", 0.0, 0.0);
    assert_each_within(server, "deep_queue_exit", 300.0, 30.0);
    let client = card(&knobs, "quinn", "client");
    assert_each_within(client, "first_pto", 150.0, 15.0);
    // its time threshold as a knob: 1.5 RTT repairs a loss one packet shows 1.5 × 100 ms after
    // the sending (within 10 %). (With a packet threshold of 4 as well, a loss three packets
    // show read 151.7 ms once and 100.3 ms once: quinn skips a packet number now and then, and
    // three packets past the gap may then be four packet numbers)
    let thresholds = cards(&[
        "quinn",
        "--role",
        "server",
        "--runs",
        "1",
        "--knob",
        "quic-time-threshold=1.5",
        "--knob",
        "quic-packet-threshold=4",
    ]);
    let server = card(&thresholds, "quinn", "server");
    for got in runs(server, "lone_loss_retransmit") {
        assert!(
            (150.0..=165.0).contains(&got),
            "quinn's lone loss with a 1.5 RTT time threshold: {got} ms"
        );
    }
    // the same answers twice, within each item's tolerance, for every item the check rests on
    for c in [&plain, &knobs] {
        for card in c.iter() {
            for item in card["items"].as_array().unwrap() {
                let key = item["key"].as_str().unwrap();
                if key == "first_burst" {
                    // the first burst is shown, not checked here: a busy host splits a burst
                    // that an idle one sees whole (quinn's first round trip with a 20 KB window
                    // read 14 and 10 packets on a loaded host, 8 and 8 with its default window
                    // on an idle one); every other item is
                    continue;
                }
                assert_eq!(item["reproducible"], true, "{item}");
            }
        }
    }
}

#[test]
fn every_stack_gets_a_card_in_each_role_it_has() {
    common::assert_root();
    let _turn = common::one_at_a_time();
    let stacks = [
        "s2n-quic", "ngtcp2", "quiche", "quic-go", "aioquic", "tquic", "msquic",
    ];
    let dir = common::TempDir::new("fingerprints");
    let report = dir.join("cards.html");
    let mut args: Vec<&str> = stacks.to_vec();
    args.extend(["--runs", "1", "--report", report.to_str().unwrap()]);
    let mut all = cards(&args);
    // the page sets the cards side by side: a column per stack in each role, and quic-go's
    // 32-packet initial window and 200 ms first timer set it apart
    let html = std::fs::read_to_string(&report).unwrap();
    for s in stacks {
        assert_eq!(
            html.matches(&format!(">{s}</th>")).count(),
            2,
            "{s}: {html}"
        );
    }
    assert!(html.matches("class=\"differs").count() >= 2, "{html}");
    // kernel TCP with Cubic (the host's default is BBR, which cuts no window at a loss); its β
    // is not checked: the client's receive window, not the sender's, holds its flight near
    // 85-90 KB at the second loss, so what the wire shows is 0.68 to 0.88 (docs/fingerprint.md)
    let tcp = cards(&["tcp", "--runs", "2", "--knob", "tcp-cc=cubic"]);
    // Linux's Cubic leaves slow start on delay (HyStart) before the deep queue overflows, where
    // quinn, without it, fills all 300 ms. Its delay signal, the least of a round trip's first
    // eight RTT samples, can miss the queue's growth for a round trip, and the window doubles
    // once more (2 of 16 runs here, some on a busy host: 155 and 156 ms queued by then, against
    // 54.6 ms in the 14 others; all 16 left before the overflow): of two runs one at least
    // leaves, well short of the limit. The other items are checked on the first run, as every
    // stack's are
    let tcp_server = card(&tcp, "tcp", "server");
    let left = runs(tcp_server, "slow_start_exit");
    let queued = runs(tcp_server, "deep_queue_exit");
    assert!(
        left.iter()
            .zip(&queued)
            .any(|(l, q)| *l == 1.0 && *q < 180.0),
        "{tcp_server}"
    );
    // TLS 1.3 over TCP resumes without early data: the SYN's round trip, the hello's, the
    // request's
    assert_words(tcp_server, "zero_rtt", "resumes, without 0-RTT");
    // hyper's HTTP/2 server has no priorities: it interleaves its streams, and the urgent
    // stylesheet arrives before the 800 kB response, behind the kernel's send buffer of it
    assert_words(
        tcp_server,
        "priorities",
        "before the least urgent one (its share not read)",
    );
    assert_each_within(tcp_server, "resumed_ttfb", 3.0, 0.1);
    // its tail-loss probe (RFC 8985), timed from the last acknowledgement that re-armed it:
    // 2 × its smoothed RTT (the path's 100 ms, and what the client's acknowledgements add) +
    // two jiffies (8 ms at 250 Hz), where its retransmission timeout (smoothed RTT + at least
    // 200 ms) would read 300 ms or more. With BBR it read 208.7 to 218.0 ms
    assert_each_within(tcp_server, "tail_pto", 220.0, 20.0);
    // Linux paces TCP itself only for a controller that asks it to (BBR), and no fq qdisc
    // paces it here: Cubic's round trips leave as their acknowledgements come (90 to 97 % of
    // the fullest within a tenth of it, in two runs)
    assert_each_within(tcp_server, "paces", 0.0, 0.0);
    all.extend(tcp);
    for s in stacks.iter().chain(&["tcp"]) {
        let s = *s;
        for role in ["server", "client"] {
            let c = card(&all, s, role);
            for item in c["items"].as_array().unwrap() {
                // msquic's peer is its own hq-interop client, which sets no key-exchange groups
                // and resumes no session
                let key = item["key"].as_str().unwrap();
                let peer_lacks_it = s == "msquic"
                    && ["retry_to_p256", "zero_rtt", "resumed_ttfb", "priorities"].contains(&key);
                // s2n-quic's server here serves no pages
                let serves_no_pages = s == "s2n-quic" && key == "priorities";
                assert!(
                    item["runs"][0].is_number()
                        || ((peer_lacks_it || serves_no_pages) && item["why"].is_string()),
                    "{s} as {role}: {item}"
                );
            }
            if s != "tcp" {
                // RFC 9000 §14.1: a client's datagrams carrying Initial packets are at least
                // 1200 bytes, and the server's answer to them is padded likewise by all here
                assert!(runs(c, "first_payload")[0] >= 1200.0, "{c}");
            }
            // a timer, not a round trip: beyond the path's 100 ms RTT
            assert!(runs(c, "first_pto")[0] > 100.0, "{c}");
            if role == "client" {
                // every client's hello is read, over QUIC and over TCP
                assert!(runs(c, "key_shares")[0] > 0.0, "{c}");
                assert!(runs(c, "hello_bytes")[0] > 100.0, "{c}");
            }
        }
    }
    // Chromium as a client: its hello read out of its Initial packets. Two measurements that
    // do not share a byte must agree: a hello larger than one datagram (a post-quantum key
    // share) is what makes its first flight more than one packet on the link's log
    let chrome = cards(&["chrome", "--role", "client", "--runs", "1"]);
    let c = card(&chrome, "chrome", "client");
    let shares = c["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["key"] == "key_shares")
        .map(|i| i["words"][0].as_str().unwrap_or("").to_string())
        .unwrap_or_default();
    assert!(
        shares.contains("x25519"),
        "Chromium's key shares {shares:?}: {c}"
    );
    let hello = runs(c, "hello_bytes")[0];
    let datagram = runs(c, "first_payload")[0];
    let packets = runs(c, "first_flight_packets")[0];
    assert_eq!(
        packets > 1.0,
        hello > datagram,
        "a {hello}-byte hello in {packets} datagrams of {datagram}: {c}"
    );
    // a second implementation's documented constants (aioquic 1.7.2's source): NewReno halves
    // its window at a loss (K_LOSS_REDUCTION_FACTOR 0.5), its datagrams stay at 1200 bytes
    // (max_datagram_size's default, no path MTU discovery), and its first timer is twice its
    // 100 ms initial RTT (get_probe_timeout before any RTT sample)
    let aioquic = card(&all, "aioquic", "server");
    let beta = runs(aioquic, "beta")[0];
    assert!((beta - 0.5).abs() <= 0.05, "β {beta}: {aioquic}");
    assert_eq!(runs(aioquic, "largest_payload")[0], 1200.0, "{aioquic}");
    assert_eq!(
        runs(aioquic, "jumbo_largest_payload")[0],
        1200.0,
        "{aioquic}"
    );
    // quic-go 0.65's path-MTU search (its mtu_discoverer.go): from 1280 to 1452 bytes, each
    // probe halfway between the largest acknowledged and the limit, one every 5 smoothed RTTs,
    // until the two are less than 20 apart: 1366, 1409, 1430 and 1441, the last 3.3 to 3.4 s
    // into a client's 5 MB download at 10 Mbit/s, and as long into a server's long and jumbo
    // probes
    for role in ["server", "client"] {
        let quic_go = card(&all, "quic-go", role);
        for key in ["largest_payload", "jumbo_largest_payload"] {
            assert_eq!(runs(quic_go, key)[0], 1441.0, "{key}: {quic_go}");
        }
    }
    // tquic's default controller, BBR, does not cut its flight at a loss in its startup
    // (packet conservation through the recovery, then its model): its flight a round trip
    // after the first planted loss read 0.994 of the flight before in eleven runs (a cut by a
    // factor reads 0.43 to 0.81), and its window outgrows the object by the second loss
    // quiche says when each packet should leave (SendInfo::at) and leaves pacing to its
    // application, which its driver here, like quiche's own apps by default, does not do: its
    // round trips leave as their acknowledgements come (89 to 100 % of the fullest within a
    // tenth of it, in four runs)
    assert_each_within(card(&all, "quiche", "server"), "paces", 0.0, 0.0);
    let tquic = card(&all, "tquic", "server");
    assert_words(tquic, "beta", "no cut at a loss in slow start");
    assert_each_within(tquic, "beta", 1.0, 0.0);
    for role in ["server", "client"] {
        let pto = runs(card(&all, "aioquic", role), "first_pto")[0];
        assert!(
            (pto - 200.0).abs() <= 20.0,
            "aioquic as {role}: first timer {pto} ms"
        );
    }
}

#[test]
fn a_bad_knob_or_stack_or_output_is_refused_before_any_probe() {
    // no root needed to be refused: the plan is checked first (as root it must still refuse)
    let out = common::quiclab()
        .args(["fingerprint", "quinn", "--knob", "quic-initial-rtt=soon"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("quic-initial-rtt") && err.contains("soon"),
        "{err}"
    );
    let out = common::quiclab()
        .args(["fingerprint", "quiche-typo"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("unknown stack \"quiche-typo\""), "{err}");
    let out = common::quiclab()
        .args(["fingerprint", "quinn", "--knob", "nothing"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("KEY=VALUE"), "{err}");
    // the probes' folders are kept only where no other user can redirect them
    common::assert_root();
    let dir = common::TempDir::new("fingerprint-keep");
    let open = dir.join("open");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    let out = common::quiclab()
        .args(["fingerprint", "quinn", "--keep"])
        .arg(&open)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("any user may write"), "{err}");
    assert_eq!(
        std::fs::read_dir(&open).unwrap().count(),
        0,
        "nothing was written"
    );
}
