//! The sender's timelines of `quiclab serve` (`--tcp-timeline`, `--quic-timeline`) and the
//! impossible-RTT counts of `--path-min-rtt`, over `quiclab link` (as root).

use std::path::Path;

use serde_json::Value;

mod common;
use common::{QUICLAB, assert_root, json_lines, link};

const SIZE: u64 = 1_000_000;
/// The link: 10 Mbit/s, 25 ms each way.
const RTT_MS: f64 = 50.0;
const LINK: &[&str] = &["--rate", "10mbit", "--delay", "25ms"];

/// Serves with both timelines and `floor` as the path's minimum RTT; fetches SIZE bytes once
/// over HTTP/2 and once over HTTP/3 on new connections. Returns the two records and the TCP
/// and QUIC timelines.
fn run(dir: &Path, floor: &str) -> (Value, Value, Vec<Value>, Vec<Value>) {
    let cert = dir.join("cert.pem");
    let (tcp_tl, quic_tl) = (dir.join("tcp.jsonl"), dir.join("quic.jsonl"));
    let server = format!(
        "exec {QUICLAB} serve --listen '[::]:443' --write-cert {} --tcp-cc cubic --quic-cc cubic \
         --tcp-timeline {} --quic-timeline {} --path-min-rtt {floor}",
        cert.display(),
        tcp_tl.display(),
        quic_tl.display()
    );
    let get = format!(
        "{QUICLAB} get --json --connection new --path-min-rtt {floor} --cacert {}",
        cert.display()
    );
    let url = format!("https://$QUICLAB_SERVER/bytes/{SIZE}");
    let client = format!("set -e\n{get} --http 2 --tcp-cc cubic {url}\n{get} --http 3 {url}\n");
    let stdout = link(LINK, &server, &client);
    let recs = json_lines(&stdout);
    assert_eq!(recs.len(), 2, "{stdout}");
    for r in &recs {
        assert_eq!(r["error"], Value::Null, "{r}");
        assert_eq!(r["bytes"], SIZE, "{r}");
    }
    let read = |p: &Path| -> Vec<Value> {
        std::fs::read_to_string(p)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    };
    (
        recs[0].clone(),
        recs[1].clone(),
        read(&tcp_tl),
        read(&quic_tl),
    )
}

fn u(v: &Value, key: &str) -> u64 {
    v[key].as_u64().unwrap_or_else(|| panic!("no {key} in {v}"))
}

/// Checks what every timeline must be: one connection numbered 0, samples every 5 ms (at
/// least 80 % of them over the transfer), cumulative counts that never decrease.
fn check_timeline(samples: &[Value], transport: &str, ttlb_ms: f64) {
    assert!(!samples.is_empty(), "no {transport} samples");
    assert!(
        samples
            .iter()
            .all(|s| s["transport"] == transport && s["connection"] == 0)
    );
    assert!(
        samples.len() as f64 >= ttlb_ms / 5.0 * 0.8,
        "{transport}: {} samples over {ttlb_ms} ms",
        samples.len()
    );
    for key in ["t_us", "acked_bytes", "retransmits"] {
        let v: Vec<u64> = samples.iter().map(|s| u(s, key)).collect();
        assert!(
            v.windows(2).all(|w| w[0] <= w[1]),
            "{transport} {key}: {v:?}"
        );
    }
    assert!(samples.iter().all(|s| s["bytes_in_flight"].is_u64()));
    let peak_flight = samples.iter().map(|s| u(s, "bytes_in_flight")).max();
    // A 10-packet initial window is in flight at least once.
    assert!(
        peak_flight.unwrap() >= 10 * 1200,
        "{transport}: {peak_flight:?}"
    );
}

#[test]
fn final_acked_bytes_equal_the_object_and_its_overhead_for_tcp_and_quic() {
    assert_root();
    let d = common::TempDir::new("timeline");
    let (h2, h3, tcp, quic) = run(&d, "50ms");

    check_timeline(&tcp, "tcp", h2["ttlb_ms"].as_f64().unwrap());
    check_timeline(&quic, "quic", h3["ttlb_ms"].as_f64().unwrap());

    // TCP: bytes_acked counts TCP payload: the body, TLS records (22 bytes per record of up to
    // 16 kB), HTTP/2 frames (9 bytes each), the server's handshake flight and headers: a few
    // kB, well under 1 %.
    let tcp_acked = u(tcp.last().unwrap(), "acked_bytes");
    let over = tcp_acked as f64 / SIZE as f64 - 1.0;
    eprintln!(
        "TCP acked {tcp_acked} bytes for {SIZE}: overhead {:.3} %",
        over * 100.0
    );
    assert!((0.0..0.01).contains(&over), "TCP acked {tcp_acked}");

    // QUIC counts whole packets: each carries about 34 bytes of its own (1-byte short header,
    // 8-byte connection ID, 2-byte packet number, 16-byte AEAD tag, STREAM frame type, stream
    // ID, offset and length) besides body bytes. Expected: SIZE * P / (P - 34) at the UDP
    // payload P in use, plus the handshake and MTU probes (a few kB): within 1 %. What the
    // last sample has not seen acknowledged is still in flight there (a connection that ended
    // before the last acknowledgements came back leaves them in flight): both add up to it.
    let p = u(&h3["transport_stats"], "max_udp_payload") as f64;
    let expected = SIZE as f64 * p / (p - 34.0);
    let last = quic.last().unwrap();
    let (quic_acked, quic_flight) = (u(last, "acked_bytes"), u(last, "bytes_in_flight"));
    let err = (quic_acked + quic_flight) as f64 / expected - 1.0;
    eprintln!(
        "QUIC acked {quic_acked} bytes for {SIZE} at payload {p}, {quic_flight} still in \
         flight at the end: {:.3} % off {expected:.0}",
        err * 100.0
    );
    assert!(
        err.abs() < 0.01,
        "QUIC acked {quic_acked} and had {quic_flight} in flight, expected {expected:.0}"
    );

    // No RTT below the path's own on a clean link, on either side.
    for s in [tcp.last().unwrap(), quic.last().unwrap()] {
        assert_eq!(s["impossible_rtt_samples"], 0, "{s}");
    }
    for r in [&h2, &h3] {
        assert_eq!(r["transport_stats"]["impossible_rtt_samples"], 0, "{r}");
    }
    // The client's own QUIC controller: its window grew past the initial 10 packets or not,
    // but its peak is known and at least its final window.
    let ts = &h3["transport_stats"];
    assert!(
        u(ts, "cwnd_peak_bytes") >= u(ts, "cwnd_final_bytes"),
        "{ts}"
    );
    assert!(
        ts["packets_lost"].is_u64() && ts["bytes_retransmitted"].is_u64(),
        "{ts}"
    );
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn rtt_samples_below_the_path_minimum_are_counted_as_impossible() {
    assert_root();
    let d = common::TempDir::new("timeline-floor");
    // A floor of 1 s on a 50 ms path: every sample is below it. QUIC takes at least one
    // sample per round trip of the transfer; TCP reports its minimum, which counts as one.
    let (h2, h3, tcp, quic) = run(&d, "1s");
    let round_trips = h3["ttlb_ms"].as_f64().unwrap() / RTT_MS;
    let quic_impossible = u(quic.last().unwrap(), "impossible_rtt_samples");
    eprintln!("QUIC: {quic_impossible} impossible samples over {round_trips:.1} round trips");
    assert!(
        quic_impossible as f64 >= round_trips.floor(),
        "{quic_impossible}"
    );
    assert_eq!(u(tcp.last().unwrap(), "impossible_rtt_samples"), 1);
    assert_eq!(h2["transport_stats"]["impossible_rtt_samples"], 1, "{h2}");
    assert!(
        u(&h3["transport_stats"], "impossible_rtt_samples") >= 1,
        "{h3}"
    );
    let _ = std::fs::remove_dir_all(&d);
}
