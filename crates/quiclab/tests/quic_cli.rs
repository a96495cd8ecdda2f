//! HTTP/3 over QUIC as a user runs it: `quiclab serve` behind `quiclab link`, fetched by the
//! `quiclab get --http 3` (as root: namespaces need it).

use serde_json::Value;

mod common;
use common::{QUICLAB, assert_root, quiclab};

/// Runs `quiclab serve` (with `server_args`) and `quiclab get --http 3` (with `client_args`) over a
/// link; returns the server's ready line, the client's records and the directory holding the
/// certificate (`{dir}` in `server_args` stands for it), for the caller to remove.
fn run(
    link_args: &[&str],
    server_args: &str,
    client_args: &str,
    name: &str,
) -> (String, Vec<Value>, std::path::PathBuf) {
    let d = std::env::temp_dir().join(format!("quiclab-test-quic-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    let cert = d.join("cert.pem");
    let bin = env!("CARGO_BIN_EXE_quiclab");
    let server = format!(
        "exec {bin} serve --listen '[::]:443' --write-cert {} {server_args}",
        cert.display()
    )
    .replace("{dir}", &d.display().to_string());
    let client = format!(
        "exec {bin} get --http 3 --json --connection new --cacert {} {client_args}",
        cert.display()
    );
    let out = quiclab()
        .arg("link")
        .args(link_args)
        .args(["--wait", "10s", "--server", &server, "--client", &client])
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
    // the server's lines come on link's standard error
    let ready = stderr
        .lines()
        .find(|l| l.starts_with("quiclab serve: listening on "))
        .unwrap_or_else(|| panic!("no ready line:\n{stderr}"))
        .to_string();
    let records = stdout
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    (ready, records, d)
}

fn ms(r: &Value, field: &str) -> f64 {
    r[field]
        .as_f64()
        .unwrap_or_else(|| panic!("no {field}: {r}"))
}

#[test]
fn h3_downloads_are_exact_and_resumed_connections_answer_in_one_round_trip() {
    assert_root();
    // the server's 5 ms timeline samples are counted: not beside the qlog test's transfer on
    // two cores (a run beside it once saw 75 where 95 are due; alone, 109 to 117)
    let _turn = common::one_at_a_time();

    // Bodies: the client checks every byte against the pattern and reports a mismatch or a
    // short body as an error.
    let (ready, recs, dir) = run(
        &["--rate", "100mbit", "--delay", "5ms"],
        "--quic-cc cubic --quic-timeline {dir}/timeline.jsonl",
        "--quic-cc newreno https://$QUICLAB_SERVER/bytes/100000 https://$QUICLAB_SERVER/bytes/5000000",
        "bodies",
    );
    assert!(
        ready.contains("UDP HTTP/3: quic congestion cubic;") && ready.contains("gso on"),
        "{ready}"
    );
    assert_eq!(recs.len(), 2);
    for (r, n) in recs.iter().zip([100_000u64, 5_000_000]) {
        assert_eq!(r["error"], Value::Null, "{r}");
        assert_eq!(r["status"], 200, "{r}");
        assert_eq!(r["http"], "3", "{r}");
        assert_eq!(r["transport"], "quic", "{r}");
        assert_eq!(r["bytes"], n, "{r}");
        assert_eq!(r["handshake"]["alpn"], "h3", "{r}");
        assert_eq!(r["transport_stats"]["congestion_control"], "newreno", "{r}");
        assert_eq!(
            r["transport_stats"]["congestion_control_experimental"],
            false
        );
    }
    // 5 MB at 100 Mbit/s takes at least 0.4 s.
    assert!(ms(&recs[1], "ttlb_ms") >= 400.0, "{}", recs[1]);

    // The server samples the sending side every 5 ms: the 5 MB connection (the second) spans
    // its transfer time with samples.
    let timeline = std::fs::read_to_string(dir.join("timeline.jsonl")).unwrap();
    let samples: Vec<Value> = timeline
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .filter(|s: &Value| s["connection"] == 1)
        .collect();
    let transfer_ms = ms(&recs[1], "ttlb_ms");
    // what a timeline needs: samples across the whole transfer, none missing for long. A
    // loaded host makes the 5 ms ticks late (one run alone saw 72 where 99 were due, others
    // 109 to 117; a CI run held one hole of 67 ms among 64 samples), so the count is held to
    // half the ticks and the gaps to twenty of them: a fifth of this transfer's time
    let mut at: Vec<f64> = samples
        .iter()
        .filter_map(|s| s["t_us"].as_u64())
        .map(|us| us as f64 / 1000.0)
        .collect();
    at.sort_by(f64::total_cmp);
    let span = at.last().copied().unwrap_or(0.0) - at.first().copied().unwrap_or(0.0);
    let gap = at.windows(2).map(|w| w[1] - w[0]).fold(0.0, f64::max);
    eprintln!(
        "timeline: {} samples over {transfer_ms} ms, spanning {span:.1} ms, largest gap {gap:.1} ms",
        samples.len()
    );
    assert!(
        samples.len() as f64 >= transfer_ms / 5.0 * 0.5
            && span >= 0.8 * transfer_ms
            && gap <= 100.0,
        "{} samples over {transfer_ms} ms, spanning {span:.1} ms, largest gap {gap:.1} ms",
        samples.len()
    );
    assert!(samples.iter().all(|s| s["transport"] == "quic"));
    let peak = samples
        .iter()
        .filter_map(|s| s["cwnd_bytes"].as_u64())
        .max();
    assert!(peak.unwrap_or(0) > 12_000 * 4, "cwnd never grew: {peak:?}");
    let _ = std::fs::remove_dir_all(&dir);

    // RTT 50 ms: a full handshake costs a round trip before the request's own; a resumed
    // connection sends the request as 0-RTT with its first flight.
    let rtt = 50.0;
    let (_, recs, dir) = run(
        &["--rate", "100mbit", "--delay", "25ms"],
        "",
        "--resume https://$QUICLAB_SERVER/bytes/100000 https://$QUICLAB_SERVER/bytes/100000",
        "resume",
    );
    assert_eq!(recs.len(), 2);
    let _ = std::fs::remove_dir_all(&dir);
    let (full, resumed) = (&recs[0], &recs[1]);
    for r in &recs {
        assert_eq!(r["error"], Value::Null, "{r}");
        assert_eq!(r["bytes"], 100_000, "{r}");
        assert_eq!(r["new_connection"], true, "{r}");
    }
    assert_eq!(full["handshake"]["zero_rtt_attempted"], false, "{full}");
    assert_eq!(resumed["handshake"]["resumed"], true, "{resumed}");
    assert_eq!(
        resumed["handshake"]["zero_rtt_attempted"], true,
        "{resumed}"
    );
    assert_eq!(resumed["handshake"]["zero_rtt_accepted"], true, "{resumed}");
    let (t_full, t_resumed) = (ms(full, "ttfb_ms"), ms(resumed, "ttfb_ms"));
    eprintln!("ttfb: full handshake {t_full} ms, 0-RTT {t_resumed} ms (RTT {rtt} ms)");
    assert!(t_full >= 1.9 * rtt, "full handshake ttfb {t_full} ms");
    assert!(
        (0.5 * rtt..=1.6 * rtt).contains(&t_resumed),
        "0-RTT ttfb {t_resumed} ms"
    );
}

#[test]
fn bad_quic_options_say_what_is_allowed() {
    let out = quiclab()
        .args(["serve", "--listen", "127.0.0.1:0", "--quic-cc", "vegas"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(
            "--quic-cc: QUIC option congestion = vegas is not allowed (allowed: newreno, cubic, bbr)"
        ),
        "{stderr}"
    );
    let out = quiclab()
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--quic-max-udp-payload",
            "65528",
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(
            "QUIC option max_udp_payload = 65528 is not allowed (allowed: 1200 to 65527)"
        ),
        "{stderr}"
    );
}

/// Every qlog file quiclab's QUIC endpoints write follows the qlog 0.3 JSON-SEQ schema that
/// qvis reads: a header record (version, format, a trace whose vantage point is the file's
/// side), then events with a time, a `category:event` name and data, all with the one group id
/// of the connection, each of which reads as the qlog crate's typed event of its name; sent and
/// received packets have their type, number, size (`raw.length`) and frames, lost ones their
/// type and number (and size, unless they only acknowledged), and RTTs are milliseconds (at
/// 20 ms each way, the smoothed RTT lies between the path's 40 ms and 40 ms plus the link's
/// queue and the endpoints' delays, well under a second). The frames are the connection's: the
/// acknowledgements one side receives name only packets it sent, and the server's STREAM
/// frames carry at least the 500 kB body.
/// A packet event's frames: a non-empty list, each frame with its type.
fn frames_of(e: &serde_json::Value) -> &Vec<serde_json::Value> {
    let frames = e["data"]["frames"]
        .as_array()
        .unwrap_or_else(|| panic!("no frames: {e}"));
    assert!(!frames.is_empty(), "{e}");
    assert!(frames.iter().all(|f| f["frame_type"].is_string()), "{e}");
    frames
}

#[test]
fn qlog_files_follow_the_schema_qvis_reads() {
    assert_root();
    let _turn = common::one_at_a_time();
    let d = common::TempDir::new("qlog-schema");
    let cert = d.join("cert.pem");
    let qlogs = d.join("qlog");
    common::link(
        &[
            "--rate", "10mbit", "--delay", "20ms", "--loss", "2%", "--seed", "5",
        ],
        &format!(
            "exec {QUICLAB} serve --listen '[::]:443' --write-cert {} --qlog-dir {}",
            cert.display(),
            qlogs.display()
        ),
        &format!(
            "{QUICLAB} get --http 3 --cacert {} --qlog-dir {} https://$QUICLAB_SERVER/bytes/500000",
            cert.display(),
            qlogs.display()
        ),
    );
    let mut files = 0;
    let (mut sent, mut lost, mut rtts) = (0, 0, 0);
    let mut server_stream_bytes = 0;
    for entry in std::fs::read_dir(&qlogs).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_str().unwrap().to_string();
        let side = if name.starts_with("server") {
            "server"
        } else {
            "client"
        };
        let text = std::fs::read(&path).unwrap();
        let records: Vec<serde_json::Value> = text
            .split(|&b| b == b'\n')
            .filter(|l| !l.is_empty())
            .map(|l| {
                assert_eq!(l[0], 0x1e, "{name}: a JSON-SEQ record starts with RS");
                serde_json::from_slice(&l[1..])
                    .unwrap_or_else(|e| panic!("{name}: {e}: {}", String::from_utf8_lossy(l)))
            })
            .collect();
        let header = &records[0];
        serde_json::from_value::<qlog::QlogSeq>(header.clone())
            .unwrap_or_else(|e| panic!("{name}: {e}: {header}"));
        assert_eq!(header["qlog_version"], "0.3", "{name}");
        assert_eq!(header["qlog_format"], "JSON-SEQ", "{name}");
        assert_eq!(header["trace"]["vantage_point"]["type"], side, "{name}");
        let group = records[1]["group_id"].clone();
        assert!(group.is_string(), "{name}: {}", records[1]);
        // 1-RTT packet numbers this side sent, and those the other side acknowledged
        let (mut numbers, mut acked) = (std::collections::BTreeSet::new(), Vec::new());
        let mut acks_sent = 0;
        for e in &records[1..] {
            serde_json::from_value::<qlog::events::Event>(e.clone())
                .unwrap_or_else(|err| panic!("{name}: {err}: {e}"));
            assert!(e["time"].as_f64().is_some_and(|t| t >= 0.0), "{name}: {e}");
            let ev = e["name"].as_str().unwrap();
            assert!(ev.split_once(':').is_some(), "{name}: {ev}");
            assert!(e["data"].is_object(), "{name}: {e}");
            assert_eq!(e["group_id"], group, "{name}: one connection, one id: {e}");
            let data = &e["data"];
            match ev {
                "transport:packet_sent" | "recovery:packet_lost" => {
                    assert!(data["header"]["packet_type"].is_string(), "{e}");
                    assert!(data["header"]["packet_number"].is_u64(), "{e}");
                    let size = data["raw"]["length"].as_u64();
                    if ev.ends_with("sent") {
                        assert!(
                            size.is_some_and(|s| (20..=1500).contains(&s)),
                            "{name}: packet size {e}"
                        );
                        let frames = frames_of(e);
                        if data["header"]["packet_type"] == "1RTT" {
                            numbers.insert(data["header"]["packet_number"].as_u64().unwrap());
                        }
                        for f in frames {
                            match f["frame_type"].as_str() {
                                Some("ack") => acks_sent += 1,
                                Some("stream") if side == "server" => {
                                    server_stream_bytes += f["length"].as_u64().unwrap();
                                }
                                _ => {}
                            }
                        }
                        sent += 1;
                    } else {
                        // a lost packet that only acknowledged has no size of quinn's
                        assert!(size.is_none_or(|s| (20..=1500).contains(&s)), "{e}");
                        lost += 1;
                    }
                }
                "transport:packet_received" => {
                    let size = data["raw"]["length"].as_u64();
                    assert!(
                        size.is_some_and(|s| (20..=1500).contains(&s)),
                        "{name}: packet size {e}"
                    );
                    for f in frames_of(e) {
                        if f["frame_type"] == "ack" && data["header"]["packet_type"] == "1RTT" {
                            for r in f["acked_ranges"].as_array().unwrap() {
                                let (lo, hi) = (r[0].as_u64().unwrap(), r[1].as_u64().unwrap());
                                assert!(lo <= hi, "{name}: {f}");
                                acked.push(lo..=hi);
                            }
                        }
                    }
                }
                "recovery:metrics_updated" => {
                    if let Some(rtt) = data["smoothed_rtt"].as_f64() {
                        // the first value is the configured initial RTT (333 ms)
                        assert!((40.0..=400.0).contains(&rtt), "{name}: RTT in ms {e}");
                        rtts += 1;
                    }
                    assert!(
                        data.get("ssthresh")
                            .is_none_or(|s| s.as_u64() < Some(u64::MAX))
                    );
                }
                _ => {}
            }
        }
        // an endpoint acknowledges every other packet or so: hundreds of ACK frames for the
        // server's 370 packets, some for the client's few
        assert!(acks_sent > 0, "{name}: no ACK frame sent");
        assert!(!acked.is_empty(), "{name}: no ACK frame received");
        for r in acked {
            assert!(
                r.clone().all(|n| numbers.contains(&n)),
                "{name}: acknowledged {r:?}, not all of it sent"
            );
        }
        files += 1;
    }
    assert!(server_stream_bytes >= 500_000, "{server_stream_bytes}");
    assert_eq!(files, 2, "a server and a client file");
    // 500 kB is some 370 packets; 2 % loss makes several of them lost
    assert!(sent > 300, "{sent}");
    assert!(lost > 0, "{lost}");
    assert!(rtts > 10, "{rtts}");
}
