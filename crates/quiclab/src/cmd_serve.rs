//! `quiclab serve`: the HTTP/1.1 + HTTP/2 over TCP+TLS server and the HTTP/3 over QUIC server on
//! the same port, for use as `quiclab link`'s server command or on its own.

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use clap::Args;
use quiclab_coded_udp::{self as coded, CodedServer, CodedServerOptions};
use quiclab_quic::{self as quic, QuicServer, QuicServerOptions, QuicService};

use crate::quicargs::QuicArgs;
use crate::recordargs::RecordArgs;
use crate::usage::{Usage, usage};
use quiclab_endpoint::timeline::TimelineWriter;
use quiclab_endpoint::tls::{self, Identity, KxGroup};
use quiclab_tcp::server::{DYNAMIC_FIRST_WRITE, Server, ServerOptions, TlsService};
use quiclab_telemetry::RecordLog;
use quiclab_telemetry::receiver::Receiver;
use tokio::signal::unix::{SignalKind, signal};

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
    #[arg(long, value_name = "LIST", default_value = "x25519,p256")]
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
    #[arg(long, value_name = "N", default_value = "1024", value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
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

/// What the QUIC server buffers for telemetry datagrams when --quic-datagrams does not say.
const TELEMETRY_DATAGRAM_BUFFER: u64 = 1_000_000;

/// A timeline file, created now (so that a bad path fails before the server listens).
fn timeline_file(path: Option<&PathBuf>, what: &str) -> anyhow::Result<Option<TimelineWriter>> {
    let Some(path) = path else { return Ok(None) };
    let file = quiclab_store::output::create(path)
        .with_context(|| format!("creating the {what} timeline"))?;
    Ok(Some(TimelineWriter::new(Box::new(
        std::io::BufWriter::new(file),
    ))))
}

pub(crate) fn on_off(s: &str) -> Result<bool, String> {
    match s {
        "on" => Ok(true),
        "off" => Ok(false),
        _ => Err(format!("{s:?}: allowed: on, off")),
    }
}

pub fn serve(c: ServeCmd) -> anyhow::Result<i32> {
    let groups = KxGroup::parse_list(&c.groups).map_err(|e| Usage(format!("--groups: {e}")))?;
    if let Some(root) = &c.root
        && !root.is_dir()
    {
        usage!("--root {}: not a directory", root.display());
    }
    let identity = match (&c.cert, &c.key) {
        (Some(cert), Some(key)) => Identity::from_pem_files(cert, key)?,
        _ => Identity::self_signed()?,
    };
    let tls = tls::server_config(&identity, &groups)?;
    let tls = match c.tls_max_record {
        Some(n) => {
            let mut config = (*tls).clone();
            config.max_fragment_size = Some(usize::from(n));
            std::sync::Arc::new(config)
        }
        None => tls,
    };
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
    let quic_options = if c.no_quic {
        None
    } else {
        let mut o = c.quic.options()?;
        if c.telemetry_log.is_some() && o.datagram_buffer.is_none() {
            o.datagram_buffer = Some(TELEMETRY_DATAGRAM_BUFFER);
        }
        Some(o)
    };
    let telemetry = match &c.telemetry_log {
        Some(path) => {
            let file = quiclab_store::output::create(path)
                .with_context(|| "creating the telemetry log".to_string())?;
            let log = RecordLog::new(Box::new(std::io::BufWriter::new(file)))
                .context("starting the telemetry log's writer")?;
            Some(log)
        }
        None => None,
    };
    // Written before the socket exists: `quiclab link` starts the client once it sees a listening
    // socket, and the client needs the certificate by then.
    if let Some(path) = &c.write_cert {
        // into a directory only this user (or root) controls, as every output
        let parent = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => std::path::Path::new("."),
        };
        quiclab_store::output::check_dir(parent).context("--write-cert")?;
        quiclab_store::output::write_atomic(path, identity.chain_pem().as_bytes())
            .context("writing the certificate")?;
    }

    // Set before the runtime starts: its threads inherit the policy.
    let realtime = c.realtime.unwrap_or(c.telemetry_log.is_some())
        && match quiclab_telemetry::use_realtime_priority() {
            Ok(()) => true,
            Err(e) => {
                eprintln!("quiclab serve: warning: cannot run at a real-time priority ({e})");
                false
            }
        };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the tokio runtime")?;
    runtime.block_on(async {
        // Installed before listening, so that a signal right after the ready line stops cleanly.
        let mut sigint = signal(SignalKind::interrupt()).context("handling SIGINT")?;
        let mut sigterm = signal(SignalKind::terminate()).context("handling SIGTERM")?;
        let quic_tls = std::sync::Arc::new(quic::server_tls(&tls));
        // Bound first: `quiclab link` starts its client once any socket is open.
        let coded_server = match c.coded_listen {
            Some(listen) => Some(
                CodedServer::bind(CodedServerOptions {
                    listen,
                    tls: std::sync::Arc::new(coded::server_tls(&tls)),
                    config: coded::Config::default(),
                    timeline: timeline_file(c.coded_timeline.as_ref(), "coded")?,
                    root: c.root.clone(),
                })
                .context("--coded-listen")?,
            ),
            None => None,
        };
        let server = Server::bind(ServerOptions {
            listen: c.listen,
            tls: (!c.plain).then_some(tls),
            tcp_congestion: c.tcp_cc.clone(),
            first_write: c.dynamic_records.then_some(DYNAMIC_FIRST_WRITE),
            timeline: timeline_file(c.tcp_timeline.as_ref(), "TCP")?,
            path_min_rtt_us: c.record.path_min_rtt_us(),
            root: c.root.clone(),
            service: telemetry
                .clone()
                .map(|log| Arc::new(Receiver::new(log)) as Arc<dyn TlsService>),
            fast_open: c.tfo,
            limits: quiclab_tcp::server::Limits {
                handshake_timeout: c.handshake_timeout,
                max_connections: c.max_connections as usize,
            },
        })?;
        // The same port as TCP (the one the kernel chose if it was 0): Alt-Svc advertises it.
        let quic_server = match quic_options.clone() {
            Some(quic) => {
                Some(QuicServer::bind(QuicServerOptions {
                    listen: server.local_addr(),
                    tls: quic_tls,
                    quic,
                    timeline: timeline_file(c.quic_timeline.as_ref(), "QUIC")?,
                    path_min_rtt_us: c.record.path_min_rtt_us(),
                    qlog_dir: c.record.qlog_dir()?,
                    root: c.root.clone(),
                    service: telemetry
                        .clone()
                        .map(|log| Arc::new(Receiver::new(log)) as Arc<dyn QuicService>),
                })?)
            }
            None => None,
        };
        let cert = match &c.write_cert {
            Some(p) => format!("written to {}", p.display()),
            None => match &c.cert {
                Some(p) => format!("from {}", p.display()),
                None => "self-signed".to_string(),
            },
        };
        let groups: Vec<&str> = groups.iter().map(|g| g.name()).collect();
        let record = format!(
            "tls records up to {} bytes{}",
            c.tls_max_record.unwrap_or(16384),
            if c.dynamic_records { ", dynamic" } else { "" }
        );
        let mut quic = match &quic_options {
            Some(o) => format!("; UDP HTTP/3: {}", o.summary()),
            None => "; no QUIC".to_string(),
        };
        if let Some(s) = &coded_server {
            quic += &format!(
                "; coded transport on UDP {} (RaptorQ, {} rate)",
                s.local_addr(),
                coded::RATE_CONTROL
            );
        }
        let tele = match &c.telemetry_log {
            Some(p) => format!("; telemetry logged to {}", p.display()),
            None => String::new(),
        } + if realtime {
            "; real-time priority"
        } else {
            ""
        };
        let tcp = if c.plain {
            "TCP without TLS, HTTP/1.1".to_string()
        } else {
            format!("TCP, TLS 1.3, HTTP/2 and HTTP/1.1; groups {}", groups.join(","))
        };
        println!(
            "quiclab serve: listening on {} ({tcp}; tcp congestion {}; {record}{quic}{tele}; certificate sha256 {} {cert})",
            server.local_addr(),
            server.congestion(),
            identity.fingerprint_sha256(),
        );
        std::io::stdout().flush().context("writing to standard output")?;

        // One signal stops both servers.
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        let stopped = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
            let _ = rx.wait_for(|&s| s).await;
        };
        let quic_task = quic_server.map(|q| {
            tokio::spawn(q.run_until(stopped(stop_rx.clone()), |e| {
                eprintln!("quiclab serve: {:#}", anyhow::Error::new(e))
            }))
        });
        let coded_stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let coded_thread = coded_server.map(|s| {
            let stop = coded_stop.clone();
            std::thread::spawn(move || s.run_until(&stop))
        });
        let tcp_task = tokio::spawn(server.run_until(stopped(stop_rx), |e| {
            eprintln!("quiclab serve: {:#}", anyhow::Error::new(e))
        }));
        tokio::select! {
            _ = sigint.recv() => {}
            _ = sigterm.recv() => {}
        }
        let _ = stop_tx.send(true);
        coded_stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let stats = tcp_task.await.context("the TCP server task")?;
        eprintln!(
            "quiclab serve: stopped after {} TCP connections ({} failed)",
            stats.connections, stats.failed
        );
        if let Some(t) = quic_task {
            let stats = t.await.context("the QUIC server task")?;
            eprintln!(
                "quiclab serve: stopped after {} QUIC connections ({} failed)",
                stats.connections, stats.failed
            );
        }
        if let Some(log) = &telemetry {
            log.flush().context("writing the telemetry log")?;
        }
        if let Some(t) = coded_thread {
            let stats = t
                .join()
                .map_err(|_| anyhow::anyhow!("the coded server thread panicked"))?
                .context("the coded server")?;
            eprintln!(
                "quiclab serve: stopped after {} coded connections ({} failed)",
                stats.connections, stats.failed
            );
        }
        Ok(0)
    })
}
