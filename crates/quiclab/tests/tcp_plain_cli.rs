//! The `tcp-plain` stack in a campaign (as root: trials need namespaces): HTTP/1.1 without TLS
//! beside HTTP/1.1 over TLS 1.3 on the same link. Without TLS the connection is ready after the
//! TCP handshake, one round trip, against two with TLS 1.3; the response's first byte comes one
//! round trip earlier.

mod common;
use common::median;
use quiclab_store::Store;

const RTT_MS: f64 = 50.0;

#[test]
fn http11_without_tls_saves_the_tls_round_trip() {
    common::assert_root();
    // 25 ms each way; a 10 kB object fits in TCP's initial window (10 segments) in one TLS
    // record, so its first byte comes a fixed number of round trips after the start (a 16 kB
    // record would hold the TLS arm's first byte back by one more round trip)
    let (dir, out) = common::run_plan(
        "tcp-plain-cli",
        r#"name = "plain"
iterations = 3
[workload]
kind = "single-object"
sizes = ["10kb"]
[network]
rate = "50mbit"
delay = "25ms"
[arms.plain]
stack = "tcp-plain"
tcp-cc = "cubic"
[arms.tls]
http = "1.1"
tcp-cc = "cubic"
"#,
        &[],
    );
    let trials = Store::open_existing(&out).unwrap().trials().unwrap();
    assert_eq!(trials.len(), 6);
    assert_eq!(common::assert_budgets_add_up(&trials), 6);
    let medians = |arm: &str| -> (f64, f64) {
        let (mut hs, mut ttfb) = (Vec::new(), Vec::new());
        for t in trials.iter().filter(|t| t.arm == arm) {
            let m = t.outcome.as_ref().unwrap_or_else(|e| panic!("{arm}: {e}"));
            assert!(!m.hello_retry, "{arm}");
            hs.push(m.handshake_rtts.expect("a handshake time"));
            ttfb.push(m.ttfb_ms);
        }
        assert_eq!(hs.len(), 3, "{arm}");
        let (hs, ttfb) = (median(hs), median(ttfb));
        eprintln!("{arm}: handshake {hs:.2} RTT, TTFB {ttfb:.1} ms (medians)");
        (hs, ttfb)
    };
    let (plain_hs, plain_ttfb) = medians("plain");
    let (tls_hs, tls_ttfb) = medians("tls");
    // a few ms of processing and serialisation: 0.15 RTT = 7.5 ms of tolerance
    assert!(
        (plain_hs - 1.0).abs() < 0.15,
        "plain handshake {plain_hs:.2} RTT"
    );
    assert!((tls_hs - 2.0).abs() < 0.15, "TLS handshake {tls_hs:.2} RTT");
    let saved = (tls_ttfb - plain_ttfb) / RTT_MS;
    assert!(
        (saved - 1.0).abs() < 0.15,
        "no TLS saved {saved:.2} RTT of TTFB"
    );
    // the report labels the arm by its stack
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(html.contains("HTTP/1.1 over TCP without TLS, cubic"));
    let _ = std::fs::remove_dir_all(&dir);
}
