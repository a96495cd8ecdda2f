//! The built-in `clients` plan (S1's client consistency) in its quick profile, as a user runs it
//! (as root: trials need namespaces): every client implementation against every server
//! implementation (a real browser among the clients), and a HelloRetryRequest's cost measured
//! per client.

use std::collections::BTreeMap;

use quiclab_model::budget::Component;
use quiclab_store::Store;

mod common;

fn median(mut v: Vec<f64>) -> f64 {
    assert!(!v.is_empty());
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

#[test]
fn a_hello_retry_costs_every_client_one_round_trip_and_the_report_compares_clients_per_server() {
    common::assert_root();
    common::keep_cpus_awake();
    let dir = common::TempDir::new("clients-quick");
    let out = dir.join("out");
    let st = common::quiclab()
        .args(["run", "clients", "--quick", "--out"])
        .arg(&out)
        .status()
        .unwrap();
    // 1: some trials failed (counted below, and bounded)
    assert!(matches!(st.code(), Some(0 | 1)), "{st}");
    let trials = Store::open_existing(&out).unwrap().trials().unwrap();
    // handshake round trips per (arm, condition), successful trials only
    let mut hs: BTreeMap<(String, String), Vec<f64>> = BTreeMap::new();
    let mut failed: BTreeMap<String, usize> = BTreeMap::new();
    for t in &trials {
        match &t.outcome {
            Ok(m) => hs
                .entry((t.arm.clone(), t.condition.clone()))
                .or_default()
                .push(m.handshake_rtts.expect("handshake round trips")),
            Err(_) => *failed.entry(t.arm.clone()).or_default() += 1,
        }
    }
    // the exit code says whether any trial failed
    assert_eq!(st.code() == Some(1), !failed.is_empty(), "{st}: {failed:?}");
    let delta = |arm: &str, base: &str, cond: &str| {
        let get = |a: &str| median(hs[&(a.to_string(), cond.to_string())].clone());
        get(arm) - get(base)
    };
    for server in ["quinn", "ngtcp2"] {
        for client in ["quinn", "ngtcp2"] {
            let pair = format!("{server}/{client}");
            for arm in [
                pair.clone(),
                format!("{pair} p256-p384"),
                format!("{pair} p384"),
                format!("{pair} x25519-p256"),
            ] {
                assert_eq!(failed.get(&arm), None, "{arm} failed");
            }
            for (cond, rtt_ms) in [("base", 20.0), ("rtt +100ms", 120.0)] {
                // A retry costs one round trip plus the serialisation of its two extra packets
                // (the HelloRetryRequest and the second ClientHello, each at most a full
                // 1200-byte Initial, at 10 Mbit/s): 0.1 RTT at 20 ms, 0.02 at 120 ms.
                let retry = 1.0 + 2.0 * 1200.0 * 8.0 / 10e6 * 1000.0 / rtt_ms;
                // P-256 first against a P-384-only server: every client sends one P-256 share,
                // is asked to retry, and pays that; against the same P-384 key exchange without
                // a retry (P-384's computation, a few milliseconds, is not the retry's)
                // Above it, the retry's own work lies on the critical path (the client's P-384
                // share computed only once the HelloRetryRequest arrives, a second ClientHello
                // parsed): on a loaded 2-core VM up to 9 ms more at 20 ms (+0.43 RTT, three
                // runs of two builds); 0.5 RTT still tells one round trip from none and from two.
                let arm = format!("{pair} p256-p384");
                let d = delta(&arm, &format!("{pair} p384"), cond);
                eprintln!("{arm} / {cond}: +{d:.2} RTT (physics {retry:.2})");
                assert!(
                    (-0.2..=0.5).contains(&(d - retry)),
                    "{arm} / {cond}: {d:.2} RTT more"
                );
                // x25519 first against a P-256-only server, and the reverse: quinn's client sent
                // one share and retries; ngtcp2's (GnuTLS) sent an x25519 and a P-256 share and
                // does not
                for mismatch in ["x25519-p256", "p256-x25519"] {
                    let arm = format!("{pair} {mismatch}");
                    let d = delta(&arm, &pair, cond);
                    eprintln!("{arm} / {cond}: +{d:.2} RTT");
                    // a retry's own work lies on the critical path as above; without one, the
                    // two arms do the same work and differ by noise only. Above a retry, 0.75
                    // RTT (15 ms at 20 ms: a median of six read +0.50 once on a loaded 2-core
                    // VM) still tells one retry (1.1 RTT) from two (2.2) and from none.
                    let (want, above) = if client == "quinn" {
                        (retry, 0.75)
                    } else {
                        (0.0, 0.2)
                    };
                    assert!(
                        (-0.2..=above).contains(&(d - want)),
                        "{arm} / {cond}: {d:.2} RTT more"
                    );
                }
                // the records say so for both clients
                for (mismatch, retried) in [
                    ("p256-p384", true),
                    ("x25519-p256", client == "quinn"),
                    ("", false),
                ] {
                    let arm = format!("{pair} {mismatch}").trim_end().to_string();
                    let flags: Vec<bool> = trials
                        .iter()
                        .filter(|t| t.arm == arm)
                        .map(|t| t.requests[0]["handshake"]["hello_retry"] == true)
                        .collect();
                    assert!(!flags.is_empty());
                    assert!(flags.iter().all(|f| *f == retried), "{arm}: {flags:?}");
                }
            }
        }
    }
    // a real browser against each server: over HTTP/3 with the server's first group, and its
    // handshake within a round trip of the other clients' (it is not asked to retry; what it
    // costs more is its own set-up and a ClientHello of two datagrams, a few milliseconds)
    for server in ["quinn", "ngtcp2"] {
        let arm = format!("{server}/chrome");
        assert_eq!(failed.get(&arm), None, "{arm} failed");
        let recs: Vec<_> = trials
            .iter()
            .filter(|t| t.arm == arm)
            .map(|t| &t.requests[0])
            .collect();
        assert_eq!(
            recs.len(),
            12,
            "{arm}: 6 iterations of 1 size in 2 conditions"
        );
        for r in &recs {
            assert_eq!(r["handshake"]["alpn"], "h3", "{arm}: {r}");
            assert_eq!(r["handshake"]["group"], "x25519", "{arm}: {r}");
            assert_eq!(r["handshake"]["hello_retry"], false, "{arm}: {r}");
        }
        for (cond, rtt_ms) in [("base", 20.0), ("rtt +100ms", 120.0)] {
            let d = delta(&arm, &format!("{server}/quinn"), cond);
            eprintln!(
                "{arm} / {cond}: handshake {d:+.2} RTT ({:+.1} ms) against quinn's client",
                d * rtt_ms
            );
            // no round trip more or fewer than quinn's client: its second 1250-byte datagram
            // costs 1 ms of serialisation at 10 Mbit/s, but the two clients' own processing
            // differs by a few ms either way (measured -0.2 to +5 ms), so only the round trip
            // is asserted: more than half a round trip less, or 0.6 more, would be one
            assert!(
                d > -0.5 && d < 0.6,
                "{arm} / {cond}: {d:.2} RTT more than quinn's client"
            );
        }
    }
    // every trial's time budget adds up, and a HelloRetryRequest is named as the cause of
    // what it costs: P-256 then P-384 against P-384 alone (the same key exchange, without the
    // retry), paired by iteration
    let checked = common::assert_budgets_add_up(&trials);
    // 264 trials: a few may lack a budget (a failed trial, a record without what it needs)
    assert!(checked >= 240, "{checked} budgets");
    for server in ["quinn", "ngtcp2"] {
        for client in ["quinn", "ngtcp2"] {
            let (arm, control) = (
                format!("{server}/{client} p256-p384"),
                format!("{server}/{client} p384"),
            );
            for (cond, rtt_ms) in [("base", 20.0), ("rtt +100ms", 120.0)] {
                // the quick profile's one size: 100 KB, where every part is checked (at 1 MB
                // the later parts move by more than a fifth of a round trip from trial to
                // trial, so only the handshake's part could be)
                for size in [100_000] {
                    let of = |part| {
                        common::paired_budget_median(&trials, &arm, &control, cond, size, part, 4)
                    };
                    let total = of(None);
                    let named: Vec<(Component, f64)> =
                        Component::ALL.iter().map(|&c| (c, of(Some(c)))).collect();
                    let why = format!("{arm} / {cond} / {size}: TTLB {total:+.1} ms, {named:?}");
                    // the retry is one round trip, and its two hellos' serialisation (2 ms at
                    // 10 Mbit/s) is overhead: the handshake's part is that round trip and the
                    // endpoints' processing of a second hello (a few ms). A busy host moves the
                    // control's handshake as well, either way by a few ms (16.7 ms read at 20 ms
                    // once beside a compiler on both cores)
                    let hs = of(Some(Component::Handshake));
                    assert!(
                        hs > rtt_ms - 5.0 && hs < rtt_ms + 15.0,
                        "{why}: handshake {hs:+.1} ms for one round trip of {rtt_ms} ms"
                    );
                    // the retry also hands the server an RTT sample before its first data: a
                    // server that paces its first window by its RTT estimate then sends it
                    // sooner, and the ramp-up saves up to a quarter of a round trip (measured:
                    // -30.2 ms of +100.3 at 120 ms, ngtcp2's server to quinn's client; -5.3 ms
                    // at 20 ms). The handshake must take at least 80 % of the difference; no
                    // other part may add more than a fifth of it, nor save more than 0.4 RTT
                    assert!(hs >= 0.8 * total, "{why}");
                    for &(c, ms) in &named {
                        if c != Component::Handshake {
                            let saves = (0.2 * total).max(0.4 * rtt_ms);
                            assert!(ms <= 0.2 * total && ms >= -saves, "{why}: {c:?}");
                        }
                    }
                }
            }
        }
    }
    // the report compares the clients of each server
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(html.contains("Clients against servers"));
    for server in ["quinn", "ngtcp2"] {
        assert!(
            html.contains(&format!("<h3>Served by {server}</h3>")),
            "{server}"
        );
        assert!(
            html.contains(&format!("{server}/chrome")),
            "{server}/chrome"
        );
    }
}
