//! `quiclab serve`: the HTTP/1.1 + HTTP/2 over TCP+TLS server and the HTTP/3 over QUIC server on
//! the same port, for use as `quiclab link`'s server command or on its own.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Args;
use quiclab_endpoint::tls::KxGroup;
use quiclab_stacks::serve::{self, Certificate, Serve};

use crate::quicargs::QuicArgs;
use crate::recordargs::RecordArgs;
use crate::usage::{Usage, usage};

/// Serve HTTP/1.1, HTTP/2 and HTTP/3 (and the coded transport) to get, page and browse
///
/// Serve HTTP/1.1 and HTTP/2 over TCP and TLS 1.3 (rustls with ring, hyper), and HTTP/3 over
/// QUIC (quinn, h3) on the same UDP port unless --no-quic.
///
/// Routes (the same over every protocol): GET /bytes/N sends N bytes (byte i is i mod 251; N in decimal, at most 1 TB);
/// POST /upload reads the body and answers with its length; anything else is 404. Every
/// response advertises HTTP/3 on the same port with Alt-Svc. With --coded-listen the same
/// routes are also served over the network-coded transport (`quiclab get --http coded`).
///
/// With --telemetry-log it also receives telemetry from `quiclab telemetry` (ALPN
/// quiclab-telemetry, over TCP and QUIC) and logs every unit with its receive time.
///
/// Without --cert/--key a self-signed certificate is made for this run, valid for localhost,
/// 198.18.0.2, fd51:c1ab::2 and 127.0.0.1; --write-cert saves it for clients to trust.
/// One line goes to standard output once the server listens. SIGINT or SIGTERM stops it.
///
/// Example:
///   quiclab link --rate 10mbit --delay 25ms \
///     --server 'quiclab serve --write-cert /tmp/cert.pem --tcp-cc cubic' \
///     --client 'curl --cacert /tmp/cert.pem -o /dev/null https://$QUICLAB_SERVER/bytes/1000000'
#[derive(Args)]
#[command(verbatim_doc_comment)]
pub struct ServeCmd {
    /// Address to listen on; the IPv6 any address (the default) also accepts IPv4.
    #[arg(long, value_name = "ADDR", default_value = "[::]:443")]
    listen: SocketAddr,
    /// PEM certificate chain, leaf first (default: a self-signed certificate made now).
    #[arg(long, value_name = "FILE", requires = "key")]
    cert: Option<PathBuf>,
    /// PEM private key of --cert.
    #[arg(long, value_name = "FILE", requires = "cert")]
    key: Option<PathBuf>,
    /// Key-exchange groups the server accepts, in order of preference (x25519, p256, p384).
    #[arg(long, value_name = "LIST", default_value = serve::DEFAULT_SERVER_GROUPS)]
    groups: String,
    /// TCP congestion controller (one of /proc/sys/net/ipv4/tcp_available_congestion_control,
    /// e.g. cubic, bbr, reno); default: the kernel's, which is reported.
    #[arg(long, value_name = "NAME")]
    tcp_cc: Option<String>,
    /// Write the certificate chain (PEM) to this file before listening, for clients to trust.
    #[arg(long, value_name = "FILE")]
    write_cert: Option<PathBuf>,
    /// Largest TLS record payload over TCP (64-16384; default 16384). A record is decrypted only
    /// once all of it has arrived, so records larger than TCP's initial window (10 segments,
    /// about 14.5 kB) delay the first byte of a response by a round trip; servers that size
    /// records dynamically start small. QUIC has no records and is not affected.
    #[arg(long, value_name = "BYTES", value_parser = clap::value_parser!(u16).range(64..=16384))]
    tls_max_record: Option<u16>,
    /// Start every HTTP/2 response with a small DATA frame (1200 bytes: one packet) and double
    /// each frame after it, as servers with dynamic record sizing do; `off` sends 16 kB frames
    /// from the start, so the first frame exceeds TCP's initial window and holds the first byte
    /// back by a round trip. HTTP/1.1 writes are coalesced into TLS records: their size is set
    /// by --tls-max-record.
    #[arg(long, value_name = "on|off", default_value = "on", value_parser = on_off, action = clap::ArgAction::Set)]
    dynamic_records: bool,
    /// Serve HTTP/1.1 over plain TCP on --listen, without TLS (for `http://` URLs: a baseline
    /// without encryption). HTTP/2 and telemetry need TLS and are not offered then.
    #[arg(long, conflicts_with_all = ["telemetry_log", "tls_max_record"])]
    plain: bool,
    /// Do not serve HTTP/3 over QUIC.
    #[arg(long)]
    no_quic: bool,
    #[command(flatten)]
    quic: QuicArgs,
    /// Write each QUIC connection's timeline here as JSON lines, from this sending side, every
    /// 5 ms and when it closes: congestion window, bytes in flight, bytes acknowledged, RTT,
    /// packets lost, congestion events.
    #[arg(long, value_name = "FILE", conflicts_with = "no_quic")]
    quic_timeline: Option<PathBuf>,
    /// Write each TCP connection's timeline here as JSON lines, from the server socket's
    /// TCP_INFO every 4 ms and when it closes: congestion window, bytes in flight, bytes
    /// acknowledged, RTT, delivery rate, retransmissions.
    #[arg(long, value_name = "FILE")]
    tcp_timeline: Option<PathBuf>,
    /// Serve GET requests for other paths as files under this directory (a directory serves
    /// its index.html); paths never lead outside it (.. and links out are refused with 403).
    #[arg(long, value_name = "DIR")]
    root: Option<PathBuf>,
    /// Also accept telemetry (ALPN quiclab-telemetry, sent by `quiclab telemetry`) over TCP and
    /// QUIC, and write every unit received here as a JSON line: {"record":"unit", "connection",
    /// "gen_us", "recv_us", "stream" or "datagram"}, CLOCK_MONOTONIC microseconds, and one
    /// {"record":"connection", ...} line per connection when it ends. Turns QUIC datagrams on
    /// (1 MB buffered) unless --quic-datagrams sets them.
    #[arg(long, value_name = "FILE")]
    telemetry_log: Option<PathBuf>,
    /// Run at a real-time priority (SCHED_FIFO 5, below the link emulator's), so that a busy
    /// host does not delay reading what arrives; default: on with --telemetry-log (a unit's
    /// receive time is the measurement), off otherwise. Needs root.
    #[arg(long, value_name = "on|off", value_parser = on_off, action = clap::ArgAction::Set)]
    realtime: Option<bool>,
    /// Accept TCP Fast Open (a request in the client's SYN, with a cookie from an earlier
    /// connection, saves a round trip). Needs the server bit of net.ipv4.tcp_fastopen in this
    /// network namespace (e.g. `sysctl -w net.ipv4.tcp_fastopen=3`); the campaign runner sets it
    /// in its server namespace for arms with `tfo = true`.
    #[arg(long)]
    tfo: bool,
    /// Over TCP: how long a connection may take to finish its TLS handshake, and an HTTP/1.1
    /// request to send its header; an HTTP/2 connection that answers no ping for as long is
    /// closed. Idle connections cannot hold the server.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = crate::cmd_link::parse_time)]
    handshake_timeout: std::time::Duration,
    /// Over TCP: the most connections open at once, so idle sockets cannot use up its file
    /// descriptors. At the limit a new connection closes the oldest one still in its
    /// handshake (a connect flood cannot delay real clients); when every open one is past its
    /// handshake, the next is accepted when one ends (the kernel queues up to 1024 meanwhile).
    #[arg(long, value_name = "N", default_value_t = serve::DEFAULT_MAX_CONNECTIONS, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    max_connections: u32,
    #[command(flatten)]
    record: RecordArgs,
    /// Also serve the same routes over the network-coded transport (RaptorQ-coded data over TLS
    /// 1.3-protected UDP, one request per stream; `quiclab get --http coded`) on this UDP
    /// address, e.g. `[::]:4433`, or the --listen port with --no-quic. Off by default.
    #[arg(long, value_name = "ADDR", help_heading = "Coded transport")]
    coded_listen: Option<SocketAddr>,
    /// Write each coded connection's timeline here as JSON lines, from this sending side,
    /// every 4 ms and when it closes: bytes the client reported receiving, bytes in flight and
    /// their cap, pacing rate, RTT, repair symbols sent, congestion events.
    #[arg(
        long,
        value_name = "FILE",
        requires = "coded_listen",
        help_heading = "Coded transport"
    )]
    coded_timeline: Option<PathBuf>,
}

pub(crate) fn on_off(s: &str) -> Result<bool, String> {
    match s {
        "on" => Ok(true),
        "off" => Ok(false),
        _ => Err(format!("{s:?}: allowed: on, off")),
    }
}

/// The front-end: `quiclab serve`'s flags become the server's run ([`serve::Serve`]), and the
/// stacks' server code runs it.
pub fn serve(c: ServeCmd) -> anyhow::Result<i32> {
    serve::run(run_of(c)?)?;
    Ok(0)
}

/// The server's run that the flags ask for, checked as a command line (a bad value is a usage
/// error).
pub(crate) fn run_of(c: ServeCmd) -> anyhow::Result<Serve> {
    let groups = KxGroup::parse_list(&c.groups).map_err(|e| Usage(format!("--groups: {e}")))?;
    if let Some(root) = &c.root
        && !root.is_dir()
    {
        usage!("--root {}: not a directory", root.display());
    }
    if let Some(coded) = c.coded_listen
        && !c.no_quic
        && coded.port() != 0
        && coded.port() == c.listen.port()
    {
        usage!(
            "--coded-listen {coded}: UDP port {} is HTTP/3's (the --listen port); allowed: \
             another port, or the same with --no-quic",
            coded.port()
        );
    }
    let quic = if c.no_quic {
        None
    } else {
        Some(c.quic.options()?)
    };
    let run = Serve {
        listen: c.listen,
        certificate: match (c.cert, c.key) {
            (Some(cert), Some(key)) => Certificate::Files { cert, key },
            _ => Certificate::SelfSigned,
        },
        write_cert: c.write_cert,
        groups,
        tcp_cc: c.tcp_cc,
        tls_max_record: c.tls_max_record,
        dynamic_records: c.dynamic_records,
        plain: c.plain,
        quic: None,
        quic_timeline: c.quic_timeline,
        tcp_timeline: c.tcp_timeline,
        root: c.root,
        telemetry_log: c.telemetry_log,
        realtime: c.realtime,
        tfo: c.tfo,
        handshake_timeout: c.handshake_timeout,
        max_connections: c.max_connections,
        path_min_rtt_us: c.record.path_min_rtt_us(),
        qlog_dir: c.record.qlog_dir,
        coded_listen: c.coded_listen,
        coded_timeline: c.coded_timeline,
    };
    Ok(match quic {
        Some(options) => run.with_quic(options),
        None => run,
    })
}
