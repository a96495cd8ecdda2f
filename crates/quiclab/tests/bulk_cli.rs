//! The `bulk` workload end to end (as root: trials need namespaces): study S2's shape on a
//! direct veth pair. At MTU 9000 a QUIC connection with path MTU discovery (starting from
//! quinn's 1200-byte minimum, bounded by a jumbo frame's 8972) finds the large payload by itself
//! and beats one whose payload is fixed at 1252 bytes; at MTU 1500 the same arm stops at the
//! standard frame. The report shows the table.

use quiclab_model::campaign::BulkDetail;
use quiclab_store::Store;

mod common;

const PLAN: &str = r#"name = "bulk"
iterations = 1
[workload]
kind = "bulk"
connections = [1]
duration = "2s"
[conditions."veth 1500"]
direct = true
mtu = 1500
[conditions."veth 9000"]
direct = true
mtu = 9000
[arms.h2]
http = "2"
tcp-cc = "cubic"
[arms.fixed]
http = "3"
quic-mtu-discovery = "off"
quic-initial-mtu = 1252
quic-max-udp-payload = 1252
quic-gso = "off"
[arms.pmtud]
http = "3"
quic-mtu-discovery = "on"
quic-max-udp-payload = 8972
quic-gso = "off"
[arms.pmtud-gso]
http = "3"
quic-mtu-discovery = "on"
quic-max-udp-payload = 8972
quic-gso = "on"
"#;

#[test]
fn path_mtu_discovery_finds_the_jumbo_payload_and_beats_a_fixed_small_one() {
    common::assert_root();
    let (dir, out) = common::run_plan("bulk", PLAN, &[]);
    let trials = Store::open_existing(&out).unwrap().trials().unwrap();
    assert_eq!(trials.len(), 8);
    let get = |cond: &str, arm: &str| -> BulkDetail {
        let t = trials
            .iter()
            .find(|t| t.condition == cond && t.arm == arm)
            .unwrap();
        let m = t
            .outcome
            .as_ref()
            .unwrap_or_else(|e| panic!("{cond} / {arm}: {e}"));
        m.detail.bulk.clone().expect("a bulk detail")
    };
    for cond in ["veth 1500", "veth 9000"] {
        for arm in ["h2", "fixed", "pmtud", "pmtud-gso"] {
            let b = get(cond, arm);
            eprintln!(
                "{cond} / {arm}: {:.2} Gbit/s, payload {:?} after {:?} ms, CPU s/GB {:?}",
                b.bps() / 1e9,
                b.udp_payload,
                b.udp_payload_reached_ms,
                b.cpu_per_gb()
            );
            // the measured interval is the plan's, and something moved in it
            assert!(
                (b.seconds - 2.0).abs() < 0.1,
                "{cond} / {arm}: {}",
                b.seconds
            );
            assert!(b.bytes > 0 && b.server_cpu_s > 0.0 && b.client_cpu_s > 0.0);
            assert_eq!(b.udp_payload.is_none(), arm == "h2", "{cond} / {arm}");
        }
        // the fixed payload is what it was set to, from the first packet on
        assert_eq!(get(cond, "fixed").udp_payload, Some(1252));
    }
    // Discovery starts at quinn's 1200 bytes (nothing sets it higher) and binary-searches up to
    // the bound, MTU - 28 (IPv4 and UDP headers) = 8972: probes of 5086, 7029, 8000, 8486, ...
    // until the step is under 20 bytes. A probe lost to congestion (the bulk flow fills the
    // queues) counts as too big and caps the search below it: with the first two probes
    // through, the payload is at least 7029 bytes, 4.7x the standard frame's.
    let jumbo = get("veth 9000", "pmtud");
    let p = jumbo.udp_payload.unwrap();
    assert!((7029..=8972).contains(&p), "payload {p} at MTU 9000");
    assert!(jumbo.udp_payload_reached_ms.unwrap() > 0.0);
    // With GSO on as well: quinn batches up to 10 datagrams per send, and 10 jumbo ones exceed
    // the 65,507 bytes of one UDP send; the kernel would refuse every batch, and black-hole
    // detection would fall back to 1200 bytes. The endpoints' sockets cap a batch at what fits
    // (7 at 8952 bytes), so the payload found stays in use to the end.
    let gso = get("veth 9000", "pmtud-gso").udp_payload.unwrap();
    assert!(
        (7029..=8972).contains(&gso),
        "payload {gso} at MTU 9000, GSO on"
    );
    let standard = get("veth 1500", "pmtud").udp_payload.unwrap();
    assert!(
        (1452..=1472).contains(&standard),
        "payload {standard} at MTU 1500"
    );
    // Per-packet costs dominate on a host path: 7x fewer packets for the same bytes is far
    // more than 1.5x the goodput, with every other setting equal.
    let (large, small) = (jumbo.bps(), get("veth 9000", "fixed").bps());
    assert!(
        large > 1.5 * small,
        "payload {p}: {:.2} Gbit/s; 1252: {:.2} Gbit/s",
        large / 1e9,
        small / 1e9
    );

    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(html.contains("Bulk throughput and packet size"));
    let names = common::assert_figures_exported(&out);
    assert!(
        names
            .iter()
            .any(|n| n.starts_with("bulk-") && n.ends_with("-goodput")),
        "{names:?}"
    );
    assert!(html.contains("server CPU s/GB") && html.contains("QUIC/TCP"));
    assert!(html.contains("path MTU discovery: pmtud settled on"));
    assert!(!html.contains("Median TTLB change"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bench_stacks_refuses_a_quinn_perf_that_is_not_there_before_building_anything() {
    let out = common::quiclab()
        .args(["bench", "stacks", "--quinn-perf", "/nonexistent/quinn-perf"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("--quinn-perf /nonexistent/quinn-perf: no such executable"),
        "{stderr}"
    );
    // the plans it would run give jumbo payloads GSO too (a batch is capped to one UDP send)
    let out = common::quiclab()
        .args(["bench", "stacks", "--print-plans"])
        .output()
        .unwrap();
    let plans = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success());
    assert!(plans.contains("[arms.h3-8972-gso-on]"), "{plans}");
}
