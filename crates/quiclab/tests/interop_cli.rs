//! The interop matrix: every client stack fetches 1 MB from every server stack that speaks its
//! HTTP version (HTTP/3, or HTTP/0.9 over QUIC as the interop runner's hq-interop) through the
//! emulated link with 1 % loss, byte for byte (as the QUIC Interop Runner's transfer test does).
//! A failing pair is named with its reason. Also: an external stack's 0-RTT. As root: trials
//! need namespaces.

use quiclab_store::Store;

mod common;

/// The HTTP/3 stacks: quiclab's own (quinn, s2n-quic) and the external ones that serve and fetch.
const STACKS: &[&str] = &[
    "quinn", "s2n-quic", "ngtcp2", "quic-go", "quiche", "aioquic", "tquic",
];

/// The stacks of HTTP/0.9 over QUIC (hq-interop): msquic, which has no HTTP/3.
const HQ_STACKS: &[&str] = &["msquic"];

#[test]
fn every_client_fetches_1mb_byte_exact_from_every_server_of_its_version_at_1_percent_loss() {
    common::assert_root();
    let _turn = common::one_at_a_time();
    let mut arms = String::new();
    for group in [STACKS, HQ_STACKS] {
        for server in group {
            for client in group {
                arms += &format!(
                    "[arms.\"{client}-from-{server}\"]\nserver-stack = \"{server}\"\n\
                     client-stack = \"{client}\"\n"
                );
            }
        }
    }
    let plan = format!(
        "name = \"interop\"\niterations = 1\nseed = 11\n[workload]\nkind = \"single-object\"\n\
         sizes = [\"1MB\"]\n[network]\nrate = \"20mbit\"\ndelay = \"10ms\"\nloss = \"1%\"\n{arms}"
    );
    let (_dir, out) = common::run_plan("interop", &plan, &[]);
    let trials = Store::open_existing(&out).unwrap().trials().unwrap();
    let pairs = STACKS.len().pow(2) + HQ_STACKS.len().pow(2);
    assert_eq!(trials.len(), pairs);
    let mut failures = Vec::new();
    for t in &trials {
        let rec = &t.requests[0];
        match &t.outcome {
            // the client's body was checked against the pattern: its count is whole
            Ok(m) if rec["bytes"] == 1_000_000 && rec["error"].is_null() => eprintln!(
                "{}: TTLB {:.1} ms, {} link drops",
                t.arm, m.ttlb_ms, m.link_drops
            ),
            Ok(_) => failures.push(format!("{}: {rec}", t.arm)),
            Err(e) => failures.push(format!("{}: {e}", t.arm)),
        }
    }
    assert!(
        failures.is_empty(),
        "pairs that failed:\n{}",
        failures.join("\n")
    ); // every pair's time budget adds up
    assert_eq!(common::assert_budgets_add_up(&trials), trials.len());
    // and no server's own record of its whole transfer is in doubt: every timeline
    // acknowledges the body, with the window and the RTT its stack offers
    let doubted: Vec<String> = trials
        .iter()
        .filter_map(|t| {
            let m = t.outcome.as_ref().ok()?;
            (!m.detail.sender_doubts.is_empty())
                .then(|| format!("{}: {}", t.arm, m.detail.sender_doubts.join("; ")))
        })
        .collect();
    assert!(doubted.is_empty(), "{}", doubted.join("\n"));
}

/// quiche's client resumes its session with 0-RTT, as quinn's does: the first request pays the
/// handshake's round trip before its own (TTFB at least 2 RTTs), every later one goes with the
/// first flight (one RTT, well under one and a half).
#[test]
fn quiche_resumes_with_0rtt_and_saves_a_round_trip() {
    common::assert_root();
    let _turn = common::one_at_a_time();
    const RTT_MS: f64 = 50.0;
    let plan = "name = \"zero-rtt\"\niterations = 1\nseed = 3\n[workload]\nkind = \"repeat\"\n\
                requests = 4\nsizes = [\"10kb\"]\n[network]\ndelay = \"25ms\"\n\
                [arms.quiche]\nstack = \"quiche\"\n";
    let (_dir, out) = common::run_plan("zero-rtt", plan, &[]);
    let trials = Store::open_existing(&out).unwrap().trials().unwrap();
    let requests = trials[0].requests.as_array().unwrap();
    assert_eq!(requests.len(), 4);
    let ttfb = |r: &serde_json::Value| r["ttfb_ms"].as_f64().unwrap();
    assert!(ttfb(&requests[0]) >= 2.0 * RTT_MS, "{}", requests[0]);
    assert_eq!(requests[0]["handshake"]["resumed"], false);
    for r in &requests[1..] {
        assert_eq!(r["handshake"]["zero_rtt_accepted"], true, "{r}");
        let t = ttfb(r);
        assert!((RTT_MS..1.5 * RTT_MS).contains(&t), "TTFB {t} ms: {r}");
    }
}

/// A pair that shares no version is refused before anything runs, with what each side speaks:
/// msquic speaks only HTTP/0.9 over QUIC (hq-interop), quinn HTTP/3.
#[test]
fn a_client_and_a_server_of_different_versions_are_refused_by_name() {
    let dir = common::TempDir::new("interop-mixed");
    let plan = dir.join("mixed.toml");
    std::fs::write(
        &plan,
        "name = \"mixed\"\niterations = 1\n[workload]\nkind = \"single-object\"\nsizes = [\"1MB\"]\n\
         [network]\nrate = \"20mbit\"\n[arms.quinn-from-msquic]\nserver-stack = \"msquic\"\n\
         client-stack = \"quinn\"\n",
    )
    .unwrap();
    let out = common::quiclab()
        .args(["run", "--dry-run"])
        .arg(&plan)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("stack \"quinn\" does not carry HTTP/0.9 over QUIC (hq-interop)")
            && err.contains("mixed.toml:"),
        "{err}"
    );
}
