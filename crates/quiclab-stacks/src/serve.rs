//! quiclab's own server, run in this process: HTTP/1.1 and HTTP/2 over TCP and TLS 1.3 (or
//! plain TCP), HTTP/3 over QUIC (quinn) on the same port, and the coded transport, each when
//! asked. A trial's server task ([`Serve::of_task`], refined by each own stack's module) and
//! `quiclab serve`'s flags both become a [`Serve`], so both run the same code.

use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::Context;
use quiclab_coded_udp::{self as coded, CodedServer, CodedServerOptions};
use quiclab_endpoint::timeline::TimelineWriter;
use quiclab_endpoint::tls::{self, Identity, KxGroup};
use quiclab_model::task::{ServerTask, ServerWrites};

use crate::own::Settings;
use quiclab_quic::{self as quic, QuicOptions, QuicServer, QuicServerOptions, QuicService};
use quiclab_tcp::server::{DYNAMIC_FIRST_WRITE, Server, ServerOptions, TlsService};
use quiclab_telemetry::RecordLog;
use quiclab_telemetry::receiver::Receiver;
use tokio::signal::unix::{SignalKind, signal};

/// The server's key-exchange groups when nothing names them.
pub const DEFAULT_SERVER_GROUPS: &str = "x25519,p256";

/// What the QUIC server buffers for telemetry datagrams when no knob says.
const TELEMETRY_DATAGRAM_BUFFER: u64 = 1_000_000;

/// The most TCP connections open at once when nothing says (idle sockets cannot use up the
/// server's file descriptors).
pub const DEFAULT_MAX_CONNECTIONS: u32 = 1024;

/// Where the server's certificate comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Certificate {
    /// Made for this run (valid for localhost and the lab's addresses).
    SelfSigned,
    /// A PEM chain (leaf first) and its key.
    Files { cert: PathBuf, key: PathBuf },
}

/// One run of quiclab's own server: what it listens on, speaks, records and writes.
#[derive(Debug, Clone, PartialEq)]
pub struct Serve {
    /// TCP (and QUIC on the same UDP port unless `quic` is `None`).
    pub listen: SocketAddr,
    pub certificate: Certificate,
    /// Written (PEM) before the server listens, for clients to trust.
    pub write_cert: Option<PathBuf>,
    pub groups: Vec<KxGroup>,
    /// The TCP congestion controller; `None`: the kernel's default.
    pub tcp_cc: Option<String>,
    pub tls_max_record: Option<u16>,
    /// HTTP/2 responses start with a small DATA frame and grow (dynamic record sizing).
    pub dynamic_records: bool,
    /// HTTP/1.1 over plain TCP, without TLS.
    pub plain: bool,
    /// HTTP/3 over QUIC with these options; `None`: no QUIC.
    pub quic: Option<QuicOptions>,
    pub quic_timeline: Option<PathBuf>,
    pub tcp_timeline: Option<PathBuf>,
    pub root: Option<PathBuf>,
    /// Accept telemetry and log every unit here.
    pub telemetry_log: Option<PathBuf>,
    /// Run at a real-time priority; `None`: with a telemetry log only.
    pub realtime: Option<bool>,
    pub tfo: bool,
    pub handshake_timeout: Duration,
    pub max_connections: u32,
    pub path_min_rtt_us: Option<u64>,
    pub qlog_dir: Option<PathBuf>,
    /// The coded transport on this UDP address.
    pub coded_listen: Option<SocketAddr>,
    pub coded_timeline: Option<PathBuf>,
}

impl Serve {
    /// The server a trial's task asks of every own stack: TCP with TLS 1.3 on the task's
    /// address, with the TCP and TLS settings the task carries (`tcp-cc`, `server-groups`,
    /// `tls-max-record`, `dynamic-records`, `tfo`: [`Settings`]), a certificate made now and written where
    /// the task says, and telemetry received when the task asks for units. No QUIC: a stack
    /// that serves it says so ([`Serve::with_quic`]), as it sets its own timeline.
    pub fn of_task(task: &ServerTask) -> anyhow::Result<Serve> {
        let settings = Settings::of_task(&task.settings)?;
        let groups = match settings.server_groups {
            Some(g) => g,
            None => KxGroup::parse_list(DEFAULT_SERVER_GROUPS).expect("the default groups parse"),
        };
        Ok(Serve {
            listen: task.listen,
            certificate: Certificate::SelfSigned,
            write_cert: Some(task.write_cert.clone()),
            groups,
            tcp_cc: settings.tcp_cc,
            tls_max_record: settings.tls_max_record,
            dynamic_records: settings.dynamic_records.unwrap_or(true),
            plain: false,
            quic: None,
            quic_timeline: None,
            tcp_timeline: None,
            root: task.root.clone(),
            telemetry_log: match &task.writes {
                ServerWrites::Units(p) => Some(p.clone()),
                ServerWrites::Timeline(_) => None,
            },
            realtime: None,
            tfo: settings.tfo,
            handshake_timeout: Duration::from_micros(task.handshake_timeout_us),
            max_connections: DEFAULT_MAX_CONNECTIONS,
            path_min_rtt_us: task.recording.path_min_rtt_us,
            qlog_dir: None,
            coded_listen: None,
            coded_timeline: None,
        })
    }

    /// HTTP/3 over QUIC on the same port too, with `options`; a server that receives telemetry
    /// buffers datagrams unless the options say.
    pub fn with_quic(mut self, mut options: QuicOptions) -> Serve {
        if self.telemetry_log.is_some() && options.datagram_buffer.is_none() {
            options.datagram_buffer = Some(TELEMETRY_DATAGRAM_BUFFER);
        }
        self.quic = Some(options);
        self
    }
}

/// The timeline file of a task that asks for one.
pub(crate) fn timeline_of(task: &ServerTask) -> Option<PathBuf> {
    match &task.writes {
        ServerWrites::Timeline(p) => Some(p.clone()),
        ServerWrites::Units(_) => None,
    }
}

/// A timeline file, created now (so that a bad path fails before the server listens).
fn timeline_file(path: Option<&PathBuf>, what: &str) -> anyhow::Result<Option<TimelineWriter>> {
    path.map(|p| timeline_writer(p, what)).transpose()
}

/// Writes `identity`'s certificate chain (PEM) to `path`, for clients to trust: into a
/// directory only this user (or root) controls, as every output, and whole or not at all.
pub(crate) fn write_certificate(path: &Path, identity: &Identity) -> anyhow::Result<()> {
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    quiclab_store::output::check_dir(parent).context("--write-cert")?;
    quiclab_store::output::write_atomic(path, identity.chain_pem().as_bytes())
        .context("writing the certificate")?;
    Ok(())
}

/// A timeline file, created now (so that a bad path fails before the server listens).
pub(crate) fn timeline_writer(path: &Path, what: &str) -> anyhow::Result<TimelineWriter> {
    let file = quiclab_store::output::create(path)
        .with_context(|| format!("creating the {what} timeline"))?;
    Ok(TimelineWriter::new(Box::new(std::io::BufWriter::new(file))))
}

/// Runs the server until SIGINT or SIGTERM: one line on standard output once it listens, one
/// line per protocol on standard error when it stops.
pub fn run(s: Serve) -> anyhow::Result<()> {
    let identity = match &s.certificate {
        Certificate::Files { cert, key } => Identity::from_pem_files(cert, key)?,
        Certificate::SelfSigned => Identity::self_signed()?,
    };
    let tls = tls::server_config(&identity, &s.groups)?;
    let tls = match s.tls_max_record {
        Some(n) => {
            let mut config = (*tls).clone();
            config.max_fragment_size = Some(usize::from(n));
            Arc::new(config)
        }
        None => tls,
    };
    let telemetry = match &s.telemetry_log {
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
    if let Some(path) = &s.write_cert {
        write_certificate(path, &identity)?;
    }

    // Set before the runtime starts: its threads inherit the policy.
    let realtime = s.realtime.unwrap_or(s.telemetry_log.is_some())
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
        let quic_tls = Arc::new(quic::server_tls(&tls));
        // Bound first: `quiclab link` starts its client once any socket is open.
        let coded_server = match s.coded_listen {
            Some(listen) => Some(
                CodedServer::bind(CodedServerOptions {
                    listen,
                    tls: Arc::new(coded::server_tls(&tls)),
                    config: coded::Config::default(),
                    timeline: timeline_file(s.coded_timeline.as_ref(), "coded")?,
                    root: s.root.clone(),
                })
                .context("--coded-listen")?,
            ),
            None => None,
        };
        let server = Server::bind(ServerOptions {
            listen: s.listen,
            tls: (!s.plain).then_some(tls),
            tcp_congestion: s.tcp_cc.clone(),
            first_write: s.dynamic_records.then_some(DYNAMIC_FIRST_WRITE),
            timeline: timeline_file(s.tcp_timeline.as_ref(), "TCP")?,
            path_min_rtt_us: s.path_min_rtt_us,
            root: s.root.clone(),
            service: telemetry
                .clone()
                .map(|log| Arc::new(Receiver::new(log)) as Arc<dyn TlsService>),
            fast_open: s.tfo,
            limits: quiclab_tcp::server::Limits {
                handshake_timeout: s.handshake_timeout,
                max_connections: s.max_connections as usize,
            },
        })?;
        // The same port as TCP (the one the kernel chose if it was 0): Alt-Svc advertises it.
        let quic_server = match s.quic.clone() {
            Some(quic) => Some(QuicServer::bind(QuicServerOptions {
                listen: server.local_addr(),
                tls: quic_tls,
                quic,
                timeline: timeline_file(s.quic_timeline.as_ref(), "QUIC")?,
                path_min_rtt_us: s.path_min_rtt_us,
                qlog_dir: crate::own::create_qlog_dir(s.qlog_dir.as_deref())?,
                root: s.root.clone(),
                service: telemetry
                    .clone()
                    .map(|log| Arc::new(Receiver::new(log)) as Arc<dyn QuicService>),
            })?),
            None => None,
        };
        let cert = match &s.write_cert {
            Some(p) => format!("written to {}", p.display()),
            None => match &s.certificate {
                Certificate::Files { cert, .. } => format!("from {}", cert.display()),
                Certificate::SelfSigned => "self-signed".to_string(),
            },
        };
        let groups: Vec<&str> = s.groups.iter().map(|g| g.name()).collect();
        let record = format!(
            "tls records up to {} bytes{}",
            s.tls_max_record.unwrap_or(16384),
            if s.dynamic_records { ", dynamic" } else { "" }
        );
        let mut quic = match &s.quic {
            Some(o) => format!("; UDP HTTP/3: {}", o.summary()),
            None => "; no QUIC".to_string(),
        };
        if let Some(c) = &coded_server {
            quic += &format!(
                "; coded transport on UDP {} (RaptorQ, {} rate)",
                c.local_addr(),
                coded::RATE_CONTROL
            );
        }
        let tele = match &s.telemetry_log {
            Some(p) => format!("; telemetry logged to {}", p.display()),
            None => String::new(),
        } + if realtime {
            "; real-time priority"
        } else {
            ""
        };
        let tcp = if s.plain {
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

        // One signal stops every server.
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        let stopped = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
            let _ = rx.wait_for(|&s| s).await;
        };
        let quic_task = quic_server.map(|q| {
            tokio::spawn(q.run_until(stopped(stop_rx.clone()), |e| {
                eprintln!("quiclab serve: {:#}", anyhow::Error::new(e))
            }))
        });
        let coded_stop = Arc::new(AtomicBool::new(false));
        let coded_thread = coded_server.map(|c| {
            let stop = coded_stop.clone();
            std::thread::spawn(move || c.run_until(&stop))
        });
        let tcp_task = tokio::spawn(server.run_until(stopped(stop_rx), |e| {
            eprintln!("quiclab serve: {:#}", anyhow::Error::new(e))
        }));
        tokio::select! {
            _ = sigint.recv() => {}
            _ = sigterm.recv() => {}
        }
        let _ = stop_tx.send(true);
        coded_stop.store(true, Ordering::Relaxed);
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
        Ok(())
    })
}
