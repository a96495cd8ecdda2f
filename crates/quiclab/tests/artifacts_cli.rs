//! Artifacts of a run (as root, over `quiclab link`): key logs from SSLKEYLOGFILE on both ends,
//! one qlog per QUIC connection (`--qlog-dir`), and a packet capture of the link (`--pcap`)
//! that tshark decrypts with the key log.

use std::collections::BTreeSet;
use std::path::Path;

use serde_json::Value;

mod common;
use common::{QUICLAB, assert_root, link, tshark};

/// The secrets of a key log (NSS format) with the given label, as (client random, secret).
fn secrets(path: &Path, label: &str) -> BTreeSet<String> {
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .lines()
        .filter(|l| l.starts_with(&format!("{label} ")))
        .map(str::to_string)
        .collect()
}

/// The records of a JSON-SEQ qlog file.
fn qlog(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .split('\x1e')
        .map(str::trim)
        .filter(|r| !r.is_empty())
        .map(|r| serde_json::from_str(r).unwrap_or_else(|e| panic!("{r}: {e}")))
        .collect()
}

#[test]
fn key_logs_qlogs_and_a_capture_that_tshark_decrypts() {
    assert_root();
    let d = common::TempDir::new("artifacts");
    let p = |name: &str| d.join(name);
    let server = format!(
        "SSLKEYLOGFILE={} exec {QUICLAB} serve --listen '[::]:443' --write-cert {} \
         --quic-cc newreno --qlog-dir {}",
        p("server.keys").display(),
        p("cert.pem").display(),
        p("qlog").display()
    );
    let get = format!(
        "{QUICLAB} get --cacert {} --qlog-dir {}",
        p("cert.pem").display(),
        p("qlog").display()
    );
    let url = "https://$QUICLAB_SERVER/bytes/30000";
    let client = format!(
        "set -e\nexport SSLKEYLOGFILE={}\n{get} --http 2 {url}\n{get} --http 3 --quic-cc cubic {url}\n",
        p("client.keys").display()
    );
    let pcap_arg = format!("--pcap={}", p("link.pcap").display());
    link(
        &["--rate", "50mbit", "--delay", "10ms", &pcap_arg],
        &server,
        &client,
    );

    // Both ends log the same traffic secrets: one per connection, TCP and QUIC.
    let label = "CLIENT_TRAFFIC_SECRET_0";
    let (c, s) = (
        secrets(&p("client.keys"), label),
        secrets(&p("server.keys"), label),
    );
    assert_eq!(c.len(), 2, "{c:?}");
    assert_eq!(c, s);

    // One qlog per QUIC connection on each side, JSON-SEQ qlog 0.3, each naming its
    // controller and holding packets, metrics and congestion states.
    for (file, cc) in [("server-0.sqlog", "newreno"), ("client-0.sqlog", "cubic")] {
        let records = qlog(&p("qlog").join(file));
        let head = &records[0];
        assert_eq!(
            (&head["qlog_version"], &head["qlog_format"]),
            (&Value::from("0.3"), &Value::from("JSON-SEQ")),
            "{head}"
        );
        let description = head["description"].as_str().unwrap();
        assert!(
            description.contains(&format!("quic congestion {cc};")),
            "{description}"
        );
        let names: BTreeSet<&str> = records[1..]
            .iter()
            .map(|r| r["name"].as_str().unwrap())
            .collect();
        for wanted in [
            "transport:packet_sent",
            "transport:packet_received",
            "recovery:metrics_updated",
            "recovery:congestion_state_updated",
        ] {
            assert!(names.contains(wanted), "{file}: no {wanted} in {names:?}");
        }
        assert!(
            records
                .iter()
                .any(|r| r["data"]["congestion_window"].is_u64()),
            "{file}: no congestion window"
        );
    }

    // Without the key log, the capture shows neither HTTP/2 frames nor QUIC stream frames;
    // with it, the response's HTTP/2 DATA frames and the QUIC stream carrying the response.
    let pcap = p("link.pcap");
    let keys = p("client.keys");
    let h2_filter = "http2.type == 0";
    let quic_filter = "quic.frame_type >= 8 && quic.frame_type <= 15 && quic.stream.stream_id == 0";
    // the file keeps cause before effect: no ACK of a segment the capture has not shown yet
    // (the downlink's packets are taken before they are written; taken after, a loaded host
    // put the client's ACK first in 7 of 30 captures, and TLS reassembly then failed)
    let inverted = tshark(&pcap, None, "tcp.analysis.ack_lost_segment", "frame.number");
    assert!(
        inverted.is_empty(),
        "ACKs ahead of their segments in frames {inverted:?}"
    );
    assert!(tshark(&pcap, None, h2_filter, "http2.type").is_empty());
    assert!(tshark(&pcap, None, quic_filter, "quic.stream.stream_id").is_empty());
    let data = tshark(&pcap, Some(&keys), h2_filter, "http2.length");
    let h2_bytes: u64 = data
        .iter()
        .flat_map(|l| l.split(','))
        .map(|n| n.parse::<u64>().unwrap())
        .sum();
    assert!(
        h2_bytes >= 30_000,
        "HTTP/2 DATA bytes decrypted: {h2_bytes}; the capture's TCP packets (time, ports, \
         flags, length, TLS record types):\n{}",
        tshark(
            &pcap,
            Some(&keys),
            "tcp",
            "frame.time_relative tcp.srcport tcp.flags.str tcp.len tls.record.content_type"
        )
        .join("\n")
    );
    assert!(!tshark(&pcap, Some(&keys), quic_filter, "quic.stream.stream_id").is_empty());
    // one pcapng with the key log embedded opens decrypted with no key log given: the same
    // HTTP/2 DATA bytes and the same QUIC stream frames
    let st = std::process::Command::new(QUICLAB)
        .args([
            "pcapng",
            pcap.to_str().unwrap(),
            "--keys",
            keys.to_str().unwrap(),
        ])
        .status()
        .unwrap();
    assert!(st.success(), "{st}");
    let ng = p("link.pcapng");
    assert_eq!(tshark(&ng, None, h2_filter, "http2.length"), data);
    assert_eq!(
        tshark(&ng, None, quic_filter, "quic.stream.stream_id"),
        tshark(&pcap, Some(&keys), quic_filter, "quic.stream.stream_id")
    );
    // its packets keep the capture's times to the nanosecond
    assert_eq!(
        tshark(&ng, None, "frame", "frame.time_epoch"),
        tshark(&pcap, None, "frame", "frame.time_epoch")
    );
    let _ = std::fs::remove_dir_all(&d);
}
