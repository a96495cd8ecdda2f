//! The network-coded transport as a user runs it (as root: namespaces need it): `quiclab serve
//! --coded-listen` behind `quiclab link`, fetched by `quiclab get --http coded`; byte-exact
//! under random loss, and sharing a bottleneck with a Cubic TCP flow.

use std::path::Path;

use serde_json::Value;

mod common;
use common::{QUICLAB, assert_root, json_lines, quiclab};

/// `quiclab link` with `args` and a client that must succeed: its standard output and the
/// link's report lines (standard error).
fn link(args: &[&str], server: &str, client: &str) -> (String, String) {
    common::link_output(args, server, client, 0)
}

/// Packets the link dropped at random in one direction ("up" or "down"), from its report.
fn random_drops(report: &str, dir: &str) -> u64 {
    let line = report
        .lines()
        .find(|l| l.starts_with(&format!("quiclab: {dir} ")))
        .unwrap_or_else(|| panic!("no {dir} line in:\n{report}"));
    line.split("random ").nth(1).map_or(0, |rest| {
        rest.split(|c: char| !c.is_ascii_digit())
            .next()
            .unwrap()
            .parse()
            .unwrap()
    })
}

/// The last sample of each connection in a timeline file.
fn last_samples(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap();
    let mut last: std::collections::BTreeMap<u64, Value> = Default::default();
    for l in text.lines() {
        let v: Value = serde_json::from_str(l).unwrap();
        last.insert(v["connection"].as_u64().unwrap(), v);
    }
    last.into_values().collect()
}

fn us(r: &Value, field: &str) -> u64 {
    r[field]
        .as_u64()
        .unwrap_or_else(|| panic!("no {field}: {r}"))
}

#[test]
fn gets_are_byte_exact_through_2_and_5_percent_loss() {
    assert_root();
    for (loss, seed) in [("2%", "11"), ("5%", "12")] {
        let d = common::TempDir::new(&format!("coded-loss-{}", loss.trim_end_matches('%')));
        let timeline = d.join("timeline.jsonl");
        let server = format!(
            "exec {QUICLAB} serve --listen '[::]:443' --no-quic --coded-listen '[::]:443' \
             --coded-timeline {} --write-cert {}",
            timeline.display(),
            d.join("cert.pem").display()
        );
        let sizes = [2_000_000u64, 250_000];
        let client = format!(
            "exec {QUICLAB} get --http coded --json --connection new --repeat 2 --cacert {} \
             https://$QUICLAB_SERVER/bytes/{} https://$QUICLAB_SERVER/bytes/{}",
            d.join("cert.pem").display(),
            sizes[0],
            sizes[1]
        );
        let (stdout, report) = link(
            &[
                "--rate", "20mbit", "--delay", "25ms", "--loss", loss, "--seed", seed,
            ],
            &server,
            &client,
        );
        let recs = json_lines(&stdout);
        assert_eq!(recs.len(), 4, "{stdout}");
        for (i, r) in recs.iter().enumerate() {
            let what = format!("loss {loss}, request {i}");
            // the client compares every byte with the pattern and reports a difference or a
            // short body as an error
            assert_eq!(r["error"], Value::Null, "{what}: {r}");
            assert_eq!(r["status"], 200, "{what}");
            assert_eq!(r["bytes"].as_u64(), Some(sizes[i % 2]), "{what}");
            assert_eq!(
                (&r["http"], &r["transport"]),
                (&"coded".into(), &"coded".into())
            );
            assert_eq!(r["handshake"]["resumed"], false, "no resumption: {what}");
            // one round trip (50 ms) for the handshake, a second for the request; a lost
            // handshake packet costs more, never less
            let start = us(r, "start_us");
            assert!(us(r, "handshake_done_us") - start >= 50_000, "{what}: {r}");
            assert!(us(r, "first_byte_us") - start >= 100_000, "{what}: {r}");
        }
        // Every lost packet that carried a source symbol is made up by a repair symbol (blocks
        // decode from any k symbols): the server sent at least as many repair symbols as the
        // link dropped on the way down, less the few packets per connection that carry no
        // symbol (handshake flight, HANDSHAKE_DONE, feedback on the request: at most 6).
        let samples = last_samples(&timeline);
        assert_eq!(samples.len(), 4, "one timeline per connection");
        let repairs: u64 = samples.iter().map(|s| us(s, "retransmits")).sum();
        let dropped = random_drops(&report, "down");
        assert!(dropped > 0, "loss {loss}: nothing dropped\n{report}");
        println!(
            "loss {loss}: {dropped} packets dropped on the way down, {repairs} repair symbols"
        );
        assert!(
            repairs + 6 * 4 >= dropped,
            "loss {loss}: {repairs} repair symbols for {dropped} packets dropped"
        );
        // and the client reported (at least) the bodies received
        let acked: u64 = samples.iter().map(|s| us(s, "acked_bytes")).sum();
        assert!(acked >= 2 * (sizes[0] + sizes[1]), "acked {acked}");
        let _ = std::fs::remove_dir_all(&d);
    }
}

/// Bytes of IP packets to `dst` per IP protocol (6 TCP, 17 UDP) between `from` and `to`
/// seconds after the first packet of a nanosecond pcap of raw IPv4 packets.
fn delivered(pcap: &Path, dst: [u8; 4], from: f64, to: f64) -> std::collections::BTreeMap<u8, u64> {
    let f = std::fs::read(pcap).unwrap();
    assert_eq!(&f[..4], &[0x4d, 0x3c, 0xb2, 0xa1], "a nanosecond pcap");
    let mut out = std::collections::BTreeMap::new();
    let (mut off, mut t0) = (24, None);
    while off + 16 <= f.len() {
        let word = |i: usize| u32::from_le_bytes(f[off + i..off + i + 4].try_into().unwrap());
        let t = f64::from(word(0)) + f64::from(word(4)) * 1e-9;
        let (incl, orig) = (word(8) as usize, u64::from(word(12)));
        let p = &f[off + 16..off + 16 + incl];
        off += 16 + incl;
        let t = t - *t0.get_or_insert(t);
        if p[0] >> 4 == 4 && p[16..20] == dst && (from..to).contains(&t) {
            *out.entry(p[9]).or_insert(0) += orig;
        }
    }
    out
}

#[test]
fn a_coded_flow_and_a_cubic_flow_share_a_10_mbit_bottleneck() {
    assert_root();
    let d = common::TempDir::new("coded-fair");
    let cert = d.join("cert.pem");
    let pcap = d.join("link.pcap");
    let server = format!(
        "exec {QUICLAB} serve --listen '[::]:443' --no-quic --coded-listen '[::]:4433' \
         --tcp-cc cubic --write-cert {}",
        cert.display()
    );
    // Two downloads too large to finish, started together; after 34 s the client stops them
    // (their own processes, by pid).
    let client = format!(
        "{QUICLAB} get --http 2 --tcp-cc cubic --cacert {c} https://$QUICLAB_SERVER/bytes/200000000 \
           >{d}/tcp.log 2>&1 & T=$!\n\
         {QUICLAB} get --http coded --cacert {c} https://$QUICLAB_SERVER:4433/bytes/200000000 \
           >{d}/coded.log 2>&1 & C=$!\n\
         sleep 34\nkill $T $C\nexit 0\n",
        c = cert.display(),
        d = d.display()
    );
    let pcap_arg = format!("--pcap={}", pcap.display());
    link(
        &[
            "--rate", "10mbit", "--queue", "100ms", "--delay", "25ms", "--seed", "1", &pcap_arg,
        ],
        &server,
        &client,
    );
    // What reached the client over the same 30 s, once both flows have started (IP bytes: the
    // bottleneck's own measure).
    let secs = 30.0;
    let got = delivered(&pcap, [198, 18, 0, 1], 3.0, 3.0 + secs);
    let rate = |proto: u8| got.get(&proto).copied().unwrap_or(0) as f64 * 8.0 / secs;
    let (tcp, coded) = (rate(6), rate(17));
    let link_bps = 10e6;
    println!(
        "over {secs} s: TCP (Cubic) {:.2} Mbit/s, coded {:.2} Mbit/s",
        tcp / 1e6,
        coded / 1e6
    );
    assert!(tcp >= 0.25 * link_bps, "TCP got {tcp} bit/s");
    assert!(coded >= 0.25 * link_bps, "the coded flow got {coded} bit/s");
    // together they keep the bottleneck busy (a drop-tail queue of 100 ms never empties
    // for long with two flows)
    assert!(tcp + coded >= 0.9 * link_bps, "{tcp} + {coded} bit/s");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_campaign_runs_a_coded_arm_with_records_timelines_and_a_closing_note() {
    assert_root();
    // 25 ms each way, no loss: every coded request is a full handshake (one round trip) and
    // the request (a second), whatever came before; HTTP/3 resumes and sends 0-RTT
    let (dir, out) = common::run_plan(
        "coded-run",
        r#"name = "coded-run"
iterations = 1
[workload]
kind = "repeat"
requests = 4
sizes = ["20kb"]
[network]
rate = "50mbit"
delay = "25ms"
[arms.h3]
http = "3"
quic-initial-mtu = 1452
[arms.coded]
http = "coded"
[[compare]]
a = "h3"
b = "coded"
"#,
        &[],
    );
    let trials = quiclab_store::Store::open_existing(&out)
        .unwrap()
        .trials()
        .unwrap();
    let t = trials.iter().find(|t| t.arm == "coded").unwrap();
    let m = t.outcome.as_ref().unwrap_or_else(|e| panic!("coded: {e}"));
    let reqs = &m.detail.requests;
    assert_eq!(reqs.len(), 4);
    let rtt = 50.0;
    // time the host held the emulator's packets back (its own `late` events) delays a
    // request by that much more, and the trial says so
    let late = m.detail.emulator_late_ms.unwrap_or(0.0);
    for r in reqs {
        assert!(r.new_connection && r.bytes == 20_000);
        assert!(!r.resumed && !r.zero_rtt_attempted, "no resumption");
        // two round trips, plus a few ms of processing and serialisation (0.15 RTT, as for
        // the other stacks), plus what the host held back
        assert!(
            r.ttfb_ms >= 2.0 * rtt && r.ttfb_ms < 2.15 * rtt + late,
            "TTFB {} ms (host held packets up to {late} ms)",
            r.ttfb_ms
        );
    }
    let h = m.handshake_rtts.unwrap();
    assert!((1.0..1.15).contains(&h), "handshake {h} RTT");
    // the server's timeline came through: the client reported at least the four bodies
    let acked = m.timeline.last().unwrap().acked_bytes;
    assert!(acked >= 4 * 20_000, "acked {acked}");
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(html.contains("network-coded transport (RaptorQ, goodput-following rate)"));
    assert!(html.contains(
        "<strong>coded</strong> against <strong>h3</strong>, 20 KB per request: faster in"
    ));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn options_that_do_not_apply_are_refused_with_what_is_allowed() {
    let stderr = |args: &[&str]| {
        let out = quiclab().args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let e = stderr(&[
        "serve",
        "--listen",
        "127.0.0.1:14433",
        "--coded-listen",
        "127.0.0.1:14433",
    ]);
    assert!(
        e.contains("--coded-listen 127.0.0.1:14433: UDP port 14433 is HTTP/3's")
            && e.contains("allowed: another port, or the same with --no-quic"),
        "{e}"
    );
    for flag in [&["--resume"][..], &["--tfo"], &["--tcp-cc", "cubic"]] {
        let mut args = vec!["get", "--http", "coded", "--cacert", "/dev/null"];
        args.extend_from_slice(flag);
        args.push("https://127.0.0.1/bytes/1");
        let e = stderr(&args);
        assert!(
            e.contains("--tcp-cc, --tfo and --resume do not apply to the coded transport"),
            "{flag:?}: {e}"
        );
    }
}
