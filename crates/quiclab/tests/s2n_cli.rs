//! The s2n-quic stack in a campaign, as a user runs it (as root: trials need namespaces): GETs
//! over its Cubic and its BBRv2, each server's sender timeline stored with the trial.

use quiclab_store::Store;

mod common;

#[test]
fn s2n_quic_serves_and_fetches_a_campaign_over_both_of_its_controllers() {
    common::assert_root();
    let dir = common::TempDir::new("s2n-run");
    let plan = dir.join("s2n.toml");
    std::fs::write(
        &plan,
        r#"name = "s2n"
iterations = 2
[workload]
kind = "single-object"
sizes = ["1mb"]
[network]
rate = "10mbit"
delay = "10ms"
[arms.s2n-cubic]
stack = "s2n-quic"
quic-cc = "cubic"
[arms.s2n-bbr]
stack = "s2n-quic"
quic-cc = "bbr"
"#,
    )
    .unwrap();
    let out_dir = dir.join("out");
    let out = common::quiclab()
        .args(["run", plan.to_str().unwrap(), "--out"])
        .arg(&out_dir)
        .args(["--jobs", "1"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let trials = Store::open_existing(&out_dir).unwrap().trials().unwrap();
    assert_eq!(trials.len(), 4);
    assert_eq!(common::assert_budgets_add_up(&trials), 4);
    for t in &trials {
        let m = t
            .outcome
            .as_ref()
            .unwrap_or_else(|e| panic!("{}: {e}", t.arm));
        // 1 MB at 10 Mbit/s is 800 ms of serialisation, and a handshake and a request take a
        // round trip (20 ms) each at least; slow start over a 20 ms path adds less than a second
        assert!(
            m.ttlb_ms > 840.0 && m.ttlb_ms < 2_000.0,
            "{}: TTLB {} ms",
            t.arm,
            m.ttlb_ms
        );
        // the sender's timeline, from s2n-quic's own events: a window and a round trip that the
        // path allows (at least its 20 ms)
        assert!(m.timeline.len() >= 20, "{}: {:?}", t.arm, m.timeline);
        assert!(m.timeline.iter().all(|p| p.cwnd_bytes.unwrap_or(0) > 0));
        let rtt = m.timeline.iter().rev().find_map(|p| p.rtt_ms).unwrap();
        assert!((20.0..1_000.0).contains(&rtt), "{}: RTT {rtt} ms", t.arm);
    }
    let html = std::fs::read_to_string(out_dir.join("report.html")).unwrap();
    assert!(html.contains("HTTP/3 over QUIC (s2n-quic), bbr (BBRv2)"));
}
