//! `quiclab get`: fetch URLs over HTTP/1.1 or HTTP/2 (TCP+TLS) or HTTP/3 (QUIC) and report every
//! request as a record.

use anyhow::Context;
use clap::{Args, ValueEnum};
use quiclab_model::record::RequestRecord;
use quiclab_model::task::{Ask, Connection, Get, Request};

use crate::quicargs::QuicArgs;
use crate::recordargs::RecordArgs;
use crate::trustargs::{TcpArgs, TrustArgs};
use crate::usage::usage;

/// Fetch URLs over HTTP/1.1, HTTP/2, HTTP/3 or the coded transport, timing each request
///
/// Fetch URLs over HTTP/1.1 or HTTP/2 on TCP and TLS 1.3 (rustls with ring, hyper), over
/// HTTP/3 on QUIC (quinn, h3), or over the network-coded transport (--http coded: RaptorQ-coded
/// data over TLS 1.3-protected UDP, one request per stream), timing every request.
///
/// Each request reports status, body bytes, time to first and last body byte (from the
/// connection attempt for a new connection, from sending the request otherwise), the TLS
/// handshake (key-exchange group, HelloRetryRequest, resumption, ALPN) and TCP_INFO of the
/// connection at the end (RTT, retransmissions, congestion controller read back). Over HTTP/3,
/// --resume sends requests on later connections as 0-RTT and reports whether it was accepted.
/// The coded transport has no resumption and no 0-RTT (every connection makes a full
/// handshake; --resume is refused) and serves on UDP (`quiclab serve --coded-listen`). Bodies of
/// /bytes/N are checked byte by byte against the server's pattern.
///
/// With --upload N every request is a POST of N bytes (the server's pattern) instead of a GET,
/// e.g. to /upload, which answers with the count it received; its time to last byte is the
/// upload's, ending when that answer arrives. A count other than N fails the request.
///
/// http:// URLs go over plain TCP, HTTP/1.1 only, without TLS (`quiclab serve --plain`).
///
/// The URLs are fetched in order, --repeat times. Exits with 1 if any request failed (an error,
/// or a status other than 2xx).
///
/// Example (inside `quiclab link`, with `quiclab serve --write-cert /tmp/cert.pem`):
///   quiclab get --http 2 --cacert /tmp/cert.pem --tcp-cc cubic --json \
///     https://$QUICLAB_SERVER/bytes/1000000
#[derive(Args)]
#[command(verbatim_doc_comment)]
pub struct GetCmd {
    /// https:// URLs to fetch (http:// for HTTP/1.1 without TLS).
    #[arg(required = true, value_name = "URL")]
    urls: Vec<String>,
    /// HTTP version, or `coded` for the network-coded transport.
    #[arg(long, default_value = "2", value_parser = http_values())]
    http: String,
    /// Keep one connection per server for all requests (reuse) or open one per request (new).
    #[arg(long, value_enum, default_value = "reuse")]
    connection: ConnectionArg,
    /// Fetch the list of URLs this many times.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    repeat: u32,
    #[command(flatten)]
    trust: TrustArgs,
    #[command(flatten)]
    tcp: TcpArgs,
    /// Resume TLS sessions with tickets from earlier connections of this run.
    #[arg(long)]
    resume: bool,
    /// POST this many bytes (e.g. 1mb) to each URL instead of a GET; HTTP/1.1, 2 and 3.
    #[arg(long, value_name = "BYTES", value_parser = parse_upload)]
    upload: Option<u64>,
    /// Print one JSON record per request instead of a summary.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    quic: QuicArgs,
    #[command(flatten)]
    record: RecordArgs,
}

#[derive(Clone, Copy, ValueEnum)]
enum ConnectionArg {
    Reuse,
    New,
}

/// quiclab's own clients, one per `--http` value: each refuses the flags that do not apply to
/// it, before anything is read or opened. The client itself is the HTTP version's stack in the
/// registry, which runs the task these flags make (as a trial's `quiclab endpoint` does).
struct OwnClient {
    http: &'static str,
    help: &'static str,
    check: fn(&GetCmd) -> anyhow::Result<()>,
}

const CLIENTS: &[OwnClient] = &[
    OwnClient {
        http: "1.1",
        help: "HTTP/1.1 over TCP (TLS 1.3, or plain for http:// URLs)",
        check: |_| Ok(()),
    },
    OwnClient {
        http: "2",
        help: "HTTP/2 over TCP and TLS 1.3",
        check: |_| Ok(()),
    },
    OwnClient {
        http: "3",
        help: "HTTP/3 over QUIC (quinn)",
        check: |c| c.tcp.refuse_for_quic(),
    },
    OwnClient {
        http: "coded",
        help: "the network-coded transport (not HTTP: its own one-line request and status framing)",
        check: refuse_for_coded,
    },
];

fn http_values() -> clap::builder::PossibleValuesParser {
    CLIENTS
        .iter()
        .map(|c| clap::builder::PossibleValue::new(c.http).help(c.help))
        .collect::<Vec<_>>()
        .into()
}

pub fn get(c: GetCmd) -> anyhow::Result<i32> {
    let client = CLIENTS
        .iter()
        .find(|k| k.http == c.http)
        .expect("clap accepts only the values of CLIENTS");
    (client.check)(&c)?;
    // whom it trusts and what it offers, refused here as called wrongly
    c.trust.load_for(&c.urls)?;
    let to = Get {
        urls: c.urls.clone(),
        connection: match c.connection {
            ConnectionArg::Reuse => Connection::Reuse,
            ConnectionArg::New => Connection::New,
        },
        repeat: c.repeat,
        resume: c.resume,
    };
    let ask = match c.upload {
        Some(bytes) => Ask::Upload { to, bytes },
        None => Ask::Get(to),
    };
    let request = Request::new(ask, c.json);
    let task = crate::cmd_endpoint::front_end_task(
        &c.http, &c.trust, &c.tcp, &c.quic, &c.record, request,
    )?;
    crate::cmd_endpoint::run(&task)
}

fn refuse_for_coded(c: &GetCmd) -> anyhow::Result<()> {
    if c.tcp.any() || c.resume {
        usage!(
            "--tcp-cc, --tfo and --resume do not apply to the coded transport (it has its \
             own rate control, and no session resumption or 0-RTT)"
        );
    }
    if c.upload.is_some() {
        usage!(
            "--upload: the coded transport's client only downloads; allowed with --http 1.1, 2 or 3"
        );
    }
    Ok(())
}

/// Prints the records (JSON lines or readable lines); exit code 1 if any request failed (an
/// error, or a status other than 2xx).
pub(crate) fn report(records: &[RequestRecord], json: bool) -> anyhow::Result<i32> {
    let mut failed = false;
    for r in records {
        failed |= r.error.is_some() || !(200..300).contains(&r.status);
        if json {
            println!("{}", serde_json::to_string(r).context("encoding a record")?);
        } else {
            println!("{}", summary(r));
        }
    }
    Ok(i32::from(failed))
}

/// `--upload`'s size: a number of bytes, or a size such as 1mb (1 byte to 10 GB).
fn parse_upload(s: &str) -> Result<u64, String> {
    let n = match s.parse::<u64>() {
        Ok(n) => Ok(n),
        Err(_) => quiclab_link::units::parse_bytes(s),
    };
    match n {
        Ok(n) if (1..=10_000_000_000).contains(&n) => Ok(n),
        Ok(_) => Err("allowed: 1 byte to 10 GB".into()),
        Err(e) => Err(e.to_string()),
    }
}

/// One readable line for a request.
fn summary(r: &RequestRecord) -> String {
    let ms = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.1} ms"));
    let http = r.http.title();
    let mut s = format!(
        "{} {}: status {}, {} bytes, {http}, connection {}{}",
        r.method,
        r.url,
        r.status,
        r.bytes,
        r.connection,
        if r.new_connection {
            " (new)"
        } else {
            " (reused)"
        },
    );
    if let Some(done) = r.handshake_done_us {
        let h = &r.handshake;
        s += &format!(
            ", handshake {:.1} ms ({}{}{}{})",
            done.saturating_sub(r.start_us) as f64 / 1000.0,
            h.group.as_deref().unwrap_or("-"),
            if h.hello_retry { ", HRR" } else { "" },
            if h.resumed { ", resumed" } else { "" },
            h.alpn
                .as_deref()
                .map_or(String::new(), |a| format!(", alpn {a}")),
        );
    }
    s += &format!(", TTFB {}, TTLB {}", ms(r.ttfb_ms), ms(r.ttlb_ms));
    if let Some(g) = r.goodput_bps {
        s += &format!(", goodput {:.2} Mbit/s", g / 1e6);
    }
    let t = &r.transport_stats;
    if let Some(cc) = &t.congestion_control {
        s += &format!(", cc {cc}");
    }
    if let Some(rtt) = t.smoothed_rtt_us {
        s += &format!(", srtt {:.1} ms", rtt as f64 / 1000.0);
    }
    if let Some(e) = &r.error {
        s += &format!(", FAILED: {e}");
    }
    s
}
