//! `quiclab serve` as a user runs it: behind `quiclab link`, fetched by curl over HTTP/1.1 and
//! HTTP/2 (as root: namespaces need it).

use std::path::Path;

mod common;
use common::{assert_root, json_lines, quiclab};

/// Checks that `file` holds exactly `len` bytes of the /bytes pattern (byte i = i mod 251).
fn assert_pattern(file: &Path, len: usize) {
    let body = std::fs::read(file).unwrap();
    assert_eq!(body.len(), len, "{}", file.display());
    if let Some(i) = body
        .iter()
        .enumerate()
        .position(|(i, &b)| b != (i % 251) as u8)
    {
        panic!("{}: byte {i} is {}", file.display(), body[i]);
    }
}

#[test]
fn curl_downloads_exact_bodies_over_http1_and_http2_through_the_link() {
    assert_root();
    let d = common::TempDir::new("serve");
    let cert = d.join("cert.pem");
    let server = format!(
        "exec {} serve --listen '[::]:443' --groups x25519,p256 --tcp-cc cubic --write-cert {}",
        env!("CARGO_BIN_EXE_quiclab"),
        cert.display()
    );
    let sizes = [100_000usize, 5_000_000];
    let mut client = String::from("set -e\n");
    for version in ["http1.1", "http2"] {
        for n in sizes {
            client += &format!(
                "curl -sS --fail --{version} --cacert {cert} -o {out} \
                 -w '{version} {n} %{{http_version}} %{{time_total}}\\n' \
                 https://$QUICLAB_SERVER/bytes/{n}\n",
                cert = cert.display(),
                out = d.join(format!("{version}-{n}.bin")).display(),
            );
        }
    }
    client += &format!(
        "curl -sS --fail --cacert {} -o /dev/null -D {} https://$QUICLAB_SERVER/bytes/1\n",
        cert.display(),
        d.join("headers").display()
    );
    // The 100 kB body goes back up: POST /upload answers with the byte count.
    client += &format!(
        "echo upload $(curl -sS --fail --http2 --cacert {} --data-binary @{} https://$QUICLAB_SERVER/upload)\n",
        cert.display(),
        d.join("http2-100000.bin").display()
    );

    let out = quiclab()
        .args([
            "link", "--rate", "100mbit", "--delay", "5ms", "--wait", "10s",
        ])
        .args(["--server", &server, "--client", &client])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(0),
        "stdout:\n{stdout}\nstderr:\n{stderr}"
    );
    eprintln!("{stdout}");

    // the server's output goes to link's standard error, the client's to its standard output
    assert!(
        stderr.contains("quiclab serve: listening on [::]:443 (")
            && stderr.contains("groups x25519,p256; tcp congestion cubic;"),
        "{stderr}"
    );
    assert!(!stdout.contains("quiclab serve:"), "{stdout}");
    for version in ["http1.1", "http2"] {
        let expected = if version == "http2" { "2" } else { "1.1" };
        for n in sizes {
            let line = stdout
                .lines()
                .find(|l| l.starts_with(&format!("{version} {n} ")))
                .unwrap_or_else(|| panic!("no curl line for {version} {n}:\n{stdout}"));
            let fields: Vec<&str> = line.split_whitespace().collect();
            assert_eq!(fields[2], expected, "negotiated version: {line}");
            assert_pattern(&d.join(format!("{version}-{n}.bin")), n);
        }
    }
    assert!(stdout.lines().any(|l| l == "upload 100000"), "{stdout}");
    let headers = std::fs::read_to_string(d.join("headers")).unwrap();
    assert!(
        headers
            .lines()
            .any(|l| l.trim_end() == "alt-svc: h3=\":443\""),
        "{headers}"
    );
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn bad_groups_and_congestion_controllers_say_what_is_allowed() {
    let out = quiclab()
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--groups",
            "x25519,x448",
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(
            "--groups: unknown key-exchange group \"x448\" (allowed: x25519, p256, p384)"
        ),
        "{stderr}"
    );

    let out = quiclab()
        .args(["serve", "--listen", "127.0.0.1:0", "--tcp-cc", "nosuchcc"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("TCP congestion controller \"nosuchcc\" is not available (available: ")
            && stderr.contains("reno"),
        "{stderr}"
    );
}

#[test]
fn static_files_over_every_version_stay_under_the_root_and_quic_knobs_are_reported() {
    assert_root();
    let d = common::TempDir::new("serve-root");
    let root = d.join("www");
    std::fs::create_dir_all(root.join("css")).unwrap();
    std::fs::write(root.join("index.html"), "<p>hello</p>\n").unwrap();
    let big: Vec<u8> = (0..300_000u32).map(|i| (i * 7 % 256) as u8).collect();
    std::fs::write(root.join("css/big.bin"), &big).unwrap();
    std::fs::write(d.join("secret"), "outside").unwrap();
    let cert = d.join("cert.pem");
    let q = env!("CARGO_BIN_EXE_quiclab");
    let server = format!(
        "exec {q} serve --listen '[::]:443' --write-cert {} --root {} \
         --quic-stream-window 2mib --quic-conn-window 8mb --quic-scheduling fifo \
         --quic-datagrams 64kb",
        cert.display(),
        root.display()
    );
    let c = cert.display();
    let client = format!(
        "set -e\n\
         curl -sS --http2 --cacert {c} -o {out2} https://$QUICLAB_SERVER/css/big.bin\n\
         curl -sS --http1.1 --cacert {c} https://$QUICLAB_SERVER/\n\
         echo status $(curl -s --path-as-is --cacert {c} -o /dev/null -w '%{{http_code}}' https://$QUICLAB_SERVER/../secret)\n\
         {q} get --http 3 --json --cacert {c} --quic-stream-window 2mib --quic-scheduling fifo \
            https://$QUICLAB_SERVER/css/big.bin https://$QUICLAB_SERVER/nothing\n",
        out2 = d.join("big-h2.bin").display(),
    );
    // `get` exits 1 for the 404, which the link reports as the client's exit code; the
    // server's lines come on link's standard error
    let (stdout, stderr) = common::link_output(&["--delay", "5ms"], &server, &client, 1);
    assert!(
        stderr.contains(
            "stream window 2097152; connection window 8000000; scheduling fifo; datagrams on, 64000 bytes buffered"
        ),
        "{stderr}"
    );
    assert_eq!(std::fs::read(d.join("big-h2.bin")).unwrap(), big);
    assert!(stdout.lines().any(|l| l == "<p>hello</p>"), "{stdout}");
    assert!(stdout.lines().any(|l| l == "status 403"), "{stdout}");
    let recs = json_lines(&stdout);
    assert_eq!(recs.len(), 2, "{stdout}");
    assert_eq!(
        (&recs[0]["status"], &recs[0]["bytes"]),
        (&200.into(), &300_000.into())
    );
    assert_eq!(recs[1]["status"], 404);
    let _ = std::fs::remove_dir_all(&d);

    let out = quiclab()
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--quic-stream-window",
            "5",
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("'5' for '--quic-stream-window <SIZE>'") && stderr.contains("has no unit"),
        "{stderr}"
    );
}
