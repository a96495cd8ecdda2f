//! `quiclab get` as a user runs it: against `quiclab serve` behind `quiclab link` (as root:
//! namespaces need it), with h2load as an independent HTTP/2 peer of the server.

use std::process::Command;
use std::sync::Mutex;

use serde_json::Value;

mod common;
use common::{QUICLAB, assert_root};

/// The timing assertions compare round trips: runs must not compete for the two cores.
static SERIAL: Mutex<()> = Mutex::new(());

/// Runs `quiclab link` with the link options, a `quiclab serve` with `serve_args` writing its
/// certificate to `cert`, and `client` (a shell script). Returns the standard output, after
/// checking that the client succeeded.
fn link(link_args: &[&str], serve_args: &str, cert: &std::path::Path, client: &str) -> String {
    let server = format!(
        "exec {QUICLAB} serve --listen '[::]:443' --write-cert {} {serve_args}",
        cert.display()
    );
    let out = Command::new(QUICLAB)
        .arg("link")
        .args(link_args)
        .args(["--wait", "10s", "--server", &server, "--client", client])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(0),
        "stdout:\n{stdout}\nstderr:\n{stderr}"
    );
    eprintln!("{stdout}");
    stdout
}

/// The JSON records printed after the line `marker`, up to the next line that is not JSON.
fn records(stdout: &str, marker: &str) -> Vec<Value> {
    stdout
        .lines()
        .skip_while(|l| *l != marker)
        .skip(1)
        .take_while(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn f(r: &Value, key: &str) -> f64 {
    r[key]
        .as_f64()
        .unwrap_or_else(|| panic!("{key} missing: {r}"))
}

/// Handshake time in ms: TCP connect plus TLS.
fn handshake_ms(r: &Value) -> f64 {
    (f(r, "handshake_done_us") - f(r, "start_us")) / 1000.0
}

#[test]
fn get_downloads_exact_bodies_over_http1_and_http2_with_the_chosen_controller() {
    assert_root();
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let d = common::TempDir::new("get");
    let cert = d.join("cert.pem");
    let mut client = String::from("set -e\n");
    for (http, cc) in [("1.1", "reno"), ("2", "cubic")] {
        client += &format!(
            "echo 'records {http}'\n{QUICLAB} get --json --http {http} --tcp-cc {cc} --cacert {} \
             https://$QUICLAB_SERVER/bytes/100000 https://$QUICLAB_SERVER/bytes/5000000\n",
            cert.display()
        );
    }
    client += "h2load -n 4 -c 1 https://$QUICLAB_SERVER/bytes/100000\n";
    let stdout = link(
        &["--rate", "100mbit", "--delay", "5ms"],
        "--tcp-cc cubic",
        &cert,
        &client,
    );

    for (http, cc) in [("1.1", "reno"), ("2", "cubic")] {
        let recs = records(&stdout, &format!("records {http}"));
        assert_eq!(recs.len(), 2, "{stdout}");
        for (r, n) in recs.iter().zip([100_000, 5_000_000]) {
            assert_eq!(r["error"], Value::Null, "{r}");
            assert_eq!(r["status"], 200, "{r}");
            assert_eq!(r["bytes"], n, "{r}");
            assert_eq!(r["http"], http, "{r}");
            assert_eq!(r["transport"], "tcp", "{r}");
            assert_eq!(r["transport_stats"]["congestion_control"], cc, "{r}");
            let alpn = if http == "2" { "h2" } else { "http/1.1" };
            assert_eq!(r["handshake"]["alpn"], alpn, "{r}");
            // 10 ms of emulated RTT at least.
            assert!(f(&r["transport_stats"], "min_rtt_us") >= 9_000.0, "{r}");
        }
        // One connection for both requests by default.
        assert_eq!(recs[0]["new_connection"], true);
        assert_eq!(recs[1]["new_connection"], false);
        assert_eq!(recs[1]["connection"], 0);
    }

    let summary = stdout
        .lines()
        .find(|l| l.starts_with("requests: "))
        .unwrap_or_else(|| panic!("no h2load summary:\n{stdout}"));
    assert!(
        summary.contains("4 succeeded, 0 failed, 0 errored"),
        "{summary}"
    );
    let _ = std::fs::remove_dir_all(&d);
}

/// HTTP/3 after a HelloRetryRequest: the handshake takes one round trip more and the request
/// is answered in full, byte for byte (the pattern is checked by the client).
#[test]
fn http3_after_a_hello_retry_gets_its_whole_answer_one_round_trip_later() {
    assert_root();
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let d = common::TempDir::new("get-h3-hrr");
    let cert = d.join("cert.pem");
    let get = format!(
        "{QUICLAB} get --json --http 3 --cacert {} --connection new",
        cert.display()
    );
    let url = "https://$QUICLAB_SERVER/bytes/100000";
    let client = format!(
        "set -e\n\
         echo records hrr\n{get} --repeat 3 --groups x25519,p256 {url}\n\
         echo records match\n{get} --repeat 3 --groups p256,x25519 {url}\n"
    );
    let stdout = link(&["--delay", "25ms"], "--groups p256", &cert, &client);
    const RTT: f64 = 50.0;

    let hrr = records(&stdout, "records hrr");
    let matching = records(&stdout, "records match");
    assert_eq!((hrr.len(), matching.len()), (3, 3), "{stdout}");
    for (rs, retried) in [(&hrr, true), (&matching, false)] {
        for r in rs {
            assert_eq!(r["error"], Value::Null, "{r}");
            assert_eq!(
                (r["status"].as_u64(), r["bytes"].as_u64()),
                (Some(200), Some(100_000))
            );
            assert_eq!(r["handshake"]["hello_retry"], retried, "{r}");
            assert_eq!(r["handshake"]["group"], "p256", "{r}");
        }
    }
    // The least disturbed of each: QUIC's handshake takes 1 RTT, a HelloRetryRequest one more.
    let min = |rs: &[Value]| rs.iter().map(handshake_ms).fold(f64::INFINITY, f64::min);
    let (with, without) = (min(&hrr), min(&matching));
    eprintln!("QUIC handshake: {with:.1} ms with HelloRetryRequest, {without:.1} ms without");
    assert!((RTT * 0.95..RTT * 1.5).contains(&without), "{without}");
    assert!(
        (0.5 * RTT..1.5 * RTT).contains(&(with - without)),
        "with {with} ms, without {without} ms"
    );
}

#[test]
fn hello_retry_costs_a_round_trip_and_resumed_tcp_still_needs_two_before_data() {
    assert_root();
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let d = common::TempDir::new("get-hrr");
    let cert = d.join("cert.pem");
    let get = format!(
        "{QUICLAB} get --json --tcp-cc cubic --cacert {} --connection new",
        cert.display()
    );
    let url = "https://$QUICLAB_SERVER/bytes/1000";
    let client = format!(
        "set -e\n\
         echo records hrr\n{get} --repeat 3 --groups x25519,p256 {url}\n\
         echo records match\n{get} --repeat 3 --groups p256,x25519 {url}\n\
         echo records resume\n{get} --repeat 2 --groups p256 --resume {url}\n"
    );
    let stdout = link(&["--delay", "25ms"], "--groups p256", &cert, &client);
    const RTT: f64 = 50.0;

    let hrr = records(&stdout, "records hrr");
    let matching = records(&stdout, "records match");
    assert_eq!((hrr.len(), matching.len()), (3, 3), "{stdout}");
    for r in &hrr {
        assert_eq!(r["error"], Value::Null, "{r}");
        assert_eq!(r["handshake"]["hello_retry"], true, "{r}");
        assert_eq!(r["handshake"]["group"], "p256", "{r}");
    }
    for r in &matching {
        assert_eq!(r["error"], Value::Null, "{r}");
        assert_eq!(r["handshake"]["hello_retry"], false, "{r}");
        assert_eq!(r["handshake"]["group"], "p256", "{r}");
    }
    // The least disturbed of each: TCP and TLS take 2 RTT, a HelloRetryRequest one more.
    let min = |rs: &[Value]| rs.iter().map(handshake_ms).fold(f64::INFINITY, f64::min);
    let (with, without) = (min(&hrr), min(&matching));
    eprintln!("handshake: {with:.1} ms with HelloRetryRequest, {without:.1} ms without");
    assert!(
        (2.0 * RTT * 0.95..2.0 * RTT * 1.5).contains(&without),
        "{without}"
    );
    assert!(
        (0.5 * RTT..1.5 * RTT).contains(&(with - without)),
        "with {with} ms, without {without} ms"
    );

    let resume = records(&stdout, "records resume");
    assert_eq!(resume.len(), 2, "{stdout}");
    assert_eq!(resume[0]["handshake"]["resumed"], false);
    assert_eq!(resume[1]["handshake"]["resumed"], true, "{}", resume[1]);
    for r in &resume {
        assert_eq!(r["error"], Value::Null, "{r}");
        assert_eq!(r["new_connection"], true, "{r}");
        // TCP's handshake, then TLS's (resumed or not) before the request can go.
        assert!(f(r, "ttfb_ms") >= 2.0 * RTT * 0.95, "{r}");
    }
    eprintln!(
        "TTFB: {:.1} ms full handshake, {:.1} ms resumed",
        f(&resume[0], "ttfb_ms"),
        f(&resume[1], "ttfb_ms")
    );
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn tcp_options_with_http3_and_bad_groups_fail_with_clear_messages() {
    let out = Command::new(QUICLAB)
        .args([
            "get",
            "--http",
            "3",
            "--tcp-cc",
            "cubic",
            "https://127.0.0.1/bytes/1",
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("--tcp-cc and --tfo apply to HTTP/1.1 and HTTP/2"),
        "{stderr}"
    );

    let out = Command::new(QUICLAB)
        .args(["get", "--groups", "x448", "https://127.0.0.1/bytes/1"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("--groups: unknown key-exchange group"),
        "{stderr}"
    );
}

/// TLS records and HTTP/2 DATA frames are delivered only once complete, so a first one larger
/// than TCP's initial window (10 segments, about 14.5 kB) holds the first byte back by a round
/// trip. With small first frames (HTTP/2, the server's default) or small TLS records (HTTP/1.1,
/// --tls-max-record) the first byte of a 100 kB response arrives three round trips after the
/// connection attempt (TCP, TLS 1.3, request); with 16 kB frames or records, four.
#[test]
fn small_first_records_and_frames_keep_the_first_byte_at_three_round_trips() {
    assert_root();
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let d = common::TempDir::new("get-records");
    let cert = d.join("cert.pem");
    const RTT: f64 = 50.0;
    for (http, serve_args, round_trips) in [
        ("2", "", 3.0),
        ("2", "--dynamic-records off", 4.0),
        ("1.1", "--tls-max-record 1400", 3.0),
        ("1.1", "", 4.0),
    ] {
        {
            let client = format!(
                "set -e\necho records\n{QUICLAB} get --json --http {http} --tcp-cc cubic \
                 --cacert {} --connection new --repeat 3 https://$QUICLAB_SERVER/bytes/100000\n",
                cert.display()
            );
            let stdout = link(
                &["--delay", "25ms"],
                &format!("--tcp-cc cubic {serve_args}"),
                &cert,
                &client,
            );
            let rs = records(&stdout, "records");
            assert_eq!(rs.len(), 3, "{stdout}");
            let mut ttfb: Vec<f64> = rs
                .iter()
                .map(|r| {
                    assert_eq!(r["error"], Value::Null, "{r}");
                    f(r, "ttfb_ms")
                })
                .collect();
            ttfb.sort_by(f64::total_cmp);
            let median = ttfb[1];
            assert!(
                (median - round_trips * RTT).abs() < RTT / 2.0,
                "HTTP/{http} {serve_args:?}: median TTFB {median:.1} ms, expected {round_trips} RTT = {:.0} ms",
                round_trips * RTT
            );
        }
    }
    let _ = std::fs::remove_dir_all(&d);
}
