//! What the harness must not add to a verdict (as root: trials need namespaces): a stack's
//! driver sends what its implementation sends, and the lab's own checks do not flag what the
//! emulated link can deliver.

use std::path::Path;

use quiclab_store::{Store, TrialRecord};

mod common;
use common::tshark;

/// HTTP/2 over kernel TCP and HTTP/3 from each of the four QUIC implementations.
const EVERY_STACK: &str = "[arms.h2]\nhttp = \"2\"\ntcp-cc = \"cubic\"\n[arms.quinn]\nhttp = \"3\"\n\
                           [arms.ngtcp2]\nstack = \"ngtcp2\"\n[arms.quiche]\nstack = \"quiche\"\n\
                           [arms.quic-go]\nstack = \"quic-go\"\n";

/// A campaign run one trial at a time, artifacts kept, and its trials.
fn campaign(name: &str, plan: &str) -> (common::TempDir, Vec<TrialRecord>) {
    let (dir, out) = common::run_plan(name, plan, &["--keep-artifacts", "--jobs", "1"]);
    let trials = Store::open_existing(&out).unwrap().trials().unwrap();
    (dir, trials)
}

/// The trial's artifacts folder.
fn artifacts(dir: &Path, t: &TrialRecord) -> std::path::PathBuf {
    dir.join("out")
        .join(t.artifacts.as_ref().expect("artifacts kept"))
}

#[test]
fn quiche_sends_full_packets_and_acknowledges_every_second_one() {
    let _turn = common::one_at_a_time();
    common::assert_root();
    // S1's link: 10 Mbit/s, here 20 ms RTT, no loss; quinn beside as the reference
    let plan = "name = \"quiche-wire\"\niterations = 1\nseed = 5\n[workload]\n\
                kind = \"single-object\"\nsizes = [\"1mb\", \"5mb\"]\n[network]\n\
                rate = \"10mbit\"\ndelay = \"10ms\"\n\
                [arms.quiche]\nstack = \"quiche\"\n[arms.quinn]\nhttp = \"3\"\n";
    let (dir, trials) = campaign("quiche-wire", plan);
    assert_eq!(trials.len(), 4);
    for size in [1_000_000u64, 5_000_000] {
        let of = |arm: &str| {
            trials
                .iter()
                .find(|t| t.arm == arm && t.size == size)
                .unwrap_or_else(|| panic!("no {arm} trial of {size} bytes"))
        };
        let t = of("quiche");
        let a = artifacts(&dir, t);
        let (pcap, keys) = (a.join("capture.pcap"), a.join("keys.log"));
        // the server's datagrams, from the link's capture: their UDP payloads
        let payloads: Vec<u64> = tshark(&pcap, None, "udp.srcport == 443", "udp.length")
            .iter()
            .map(|l| l.parse::<u64>().unwrap() - 8)
            .collect();
        let sent = payloads.len() as u64;
        let mean = payloads.iter().sum::<u64>() as f64 / sent as f64;
        // at least the body's bytes went down, in packets of at most 1350 bytes
        assert!(sent * 1350 >= size, "{size}: {sent} packets");
        assert!(mean >= 1200.0, "{size}: mean UDP payload {mean:.0} bytes");
        // the client's datagrams that carry an acknowledgement (frame types 2 and 3), decrypted
        // with the trial's key log: at most one for every two the server sent
        let acks = tshark(
            &pcap,
            Some(&keys),
            "udp.dstport == 443 && (quic.frame_type == 2 || quic.frame_type == 3)",
            "frame.number",
        )
        .len() as u64;
        assert!(acks > 0, "{size}: no acknowledgement decrypted");
        assert!(
            2 * acks <= sent,
            "{size}: the client acknowledged in {acks} packets of {sent} received"
        );
        // on a loss-free link quiche's download takes as long as quinn's, within 3 %
        let ttlb = |t: &TrialRecord| t.outcome.as_ref().expect("trial ok").ttlb_ms;
        let (q, r) = (ttlb(t), ttlb(of("quinn")));
        assert!(
            q <= r * 1.03,
            "{size}: quiche {q:.1} ms against quinn {r:.1} ms"
        );
        eprintln!(
            "{size} bytes: {sent} packets of {mean:.0} bytes on average, {acks} acknowledging; \
             TTLB quiche {q:.1} ms, quinn {r:.1} ms"
        );
    }
}

#[test]
fn jitter_and_reordering_raise_no_impossible_rtt_sample_on_any_stack() {
    let _turn = common::one_at_a_time();
    common::assert_root();
    // 50 ms nominal RTT, each direction 25 ms +- 5 ms: round trips of 40 ms are possible, and
    // every stack sees samples under 50 ms (with the nominal RTT as the floor, 18 of these 20
    // trials were flagged)
    let plan = "name = \"jitter\"\niterations = 2\nseed = 11\n[workload]\n\
                kind = \"single-object\"\nsizes = [\"100kb\"]\n[network]\n\
                rate = \"100mbit\"\ndelay = \"25ms\"\njitter = \"5ms\"\n\
                [conditions.jitter]\n\
                [conditions.\"jitter and reordering\"]\njitter-reorders = \"true\"\n\
                reorder = \"2%\"\n";
    let (_dir, trials) = campaign("jitter", &format!("{plan}{EVERY_STACK}"));
    assert_eq!(trials.len(), 20);
    for t in &trials {
        let m = t
            .outcome
            .as_ref()
            .unwrap_or_else(|e| panic!("{} / {}: {e}", t.condition, t.arm));
        assert_eq!(
            m.impossible_rtt_samples,
            Some(0),
            "{} / {} #{}",
            t.condition,
            t.arm,
            t.iteration
        );
    }
}

#[test]
fn every_stack_reports_what_it_re_sent_at_one_percent_loss_and_unknown_is_not_zero() {
    let _turn = common::one_at_a_time();
    common::assert_root();
    let plan = "name = \"resent\"\niterations = 1\nseed = 7\n[workload]\n\
                kind = \"single-object\"\nsizes = [\"1mb\"]\n[network]\n\
                rate = \"10mbit\"\ndelay = \"10ms\"\nloss = \"1%\"\n";
    let (_dir, trials) = campaign("resent", &format!("{plan}{EVERY_STACK}"));
    assert_eq!(trials.len(), 5);
    for t in &trials {
        let m = t
            .outcome
            .as_ref()
            .unwrap_or_else(|e| panic!("{}: {e}", t.arm));
        // the link's random drops on the way down (the data's direction)
        let down = t.link.as_array().unwrap()[1]["counters"]["dropped_random"]
            .as_u64()
            .unwrap();
        assert!(down >= 3, "{}: only {down} packets dropped: no test", t.arm);
        let resent = m
            .bytes_resent
            .unwrap_or_else(|| panic!("{}: bytes re-sent unknown", t.arm));
        // every data packet dropped is sent again: a packet's worth of stream bytes (at least
        // 1,000) for each, but for at most two drops that carried no stream data (a handshake
        // packet, a control frame)
        assert!(
            resent >= 1_000 * (down - 2),
            "{}: {resent} bytes re-sent for {down} packets dropped",
            t.arm
        );
        assert!(
            m.first_retransmit_offset.is_some_and(|o| o < 1_000_100),
            "{}: first retransmission at {:?}",
            t.arm,
            m.first_retransmit_offset
        );
        // quiche's qlog declares no loss: its count is unknown, never 0
        match t.arm.as_str() {
            "quiche" => assert_eq!(m.packets_lost, None, "quiche"),
            arm => assert!(
                m.packets_lost.is_some_and(|n| n >= down - 2),
                "{arm}: {:?} packets lost for {down} dropped",
                m.packets_lost
            ),
        }
        eprintln!(
            "{}: {down} dropped, {:?} declared lost, {resent} bytes re-sent, first at {:?}",
            t.arm, m.packets_lost, m.first_retransmit_offset
        );
    }
}
