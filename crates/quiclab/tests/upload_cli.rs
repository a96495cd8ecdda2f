//! The `upload` workload in a campaign (as root: trials need namespaces): every stack that
//! uploads POSTs the trial's size to /upload; the bytes go client to server, so the up
//! direction's rate bounds the time, however fast the way back is.

mod common;
use quiclab_store::Store;

const RTT_MS: f64 = 50.0;
const UP_BPS: f64 = 20e6;
const SIZE: u64 = 500_000;

#[test]
fn uploads_are_timed_by_the_up_direction() {
    common::assert_root();
    let (dir, out) = common::run_plan(
        "upload-cli",
        r#"name = "up"
iterations = 2
[workload]
kind = "upload"
sizes = ["500kb"]
[network]
up-rate = "20mbit"
down-rate = "200mbit"
delay = "25ms"
[arms.h2]
http = "2"
tcp-cc = "cubic"
[arms.h3]
http = "3"
[arms.plain]
stack = "tcp-plain"
tcp-cc = "cubic"
"#,
        &[],
    );
    let trials = Store::open_existing(&out).unwrap().trials().unwrap();
    assert_eq!(trials.len(), 6);
    // the upload's serialisation on the up link, and the round trip of its answer at least
    let floor_ms = SIZE as f64 * 8.0 / UP_BPS * 1000.0 + RTT_MS;
    for t in &trials {
        let m = t
            .outcome
            .as_ref()
            .unwrap_or_else(|e| panic!("{}: {e}", t.arm));
        eprintln!("{}: TTLB {:.1} ms", t.arm, m.ttlb_ms);
        let rec = &t.requests[0];
        assert_eq!(rec["method"], "POST", "{}", t.arm);
        assert_eq!(rec["sent_bytes"], SIZE, "{}", t.arm);
        // up to three round trips of handshakes and slow start's ramp to the link's
        // bandwidth-delay product (125 kB) in a few more: twelve round trips bound it all
        assert!(
            m.ttlb_ms > floor_ms && m.ttlb_ms < floor_ms + 12.0 * RTT_MS,
            "{}: TTLB {:.1} ms against a floor of {floor_ms:.0} ms",
            t.arm,
            m.ttlb_ms
        );
    }
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(html.contains("one POST of each size per trial"));
    let _ = std::fs::remove_dir_all(&dir);
}
