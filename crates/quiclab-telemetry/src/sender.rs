//! The client's side of telemetry: units generated on a [`Schedule`] and sent in flushes.
//!
//! Contract:
//! - [`run`] connects with ALPN [`ALPN_TELEMETRY`]: TLS 1.3 over TCP (TCP_NODELAY on, the
//!   congestion controller given, read back), or QUIC with the given [`QuicOptions`]. A server
//!   that does not speak telemetry fails the handshake.
//! - The schedule's epoch is [`LEAD`] after the handshake completes, so the connection is idle
//!   and ready when the first unit is generated.
//! - A thread of its own wakes at each flush's due time (an absolute sleep on CLOCK_MONOTONIC
//!   with 1 ns timer slack, then a spin of the last [`SPIN`]; tokio's timers have a 1 ms
//!   granularity) and hands the flush to the connection's task, which writes it at once and
//!   records when ([`SentFlush::send_us`]). A late sender therefore shows as send lateness and
//!   as latency, never as a shifted generation time.
//! - At the end it waits, at most the drain time given, until the server has everything: over
//!   TCP the server closes once it read the client's close; over QUIC every stream's data is
//!   acknowledged; in datagram mode an empty stream sent after the last datagram is (the link
//!   keeps packet order, so by then every datagram arrived or was lost). Then it closes.
//! - Whatever goes wrong after the options were accepted (connection refused, handshake,
//!   writes, drain timeout, a stop request) ends the run early and is reported in
//!   [`SenderSummary::error`], with everything sent until then.

use std::net::SocketAddr;
use std::os::fd::AsFd;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bytes::Bytes;
use rustls::pki_types::ServerName;
use socket2::Socket;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

use super::{
    ALPN_TELEMETRY, ClientRecord, InvalidSetting, Mode, Schedule, SenderSummary, SentFlush,
};
use crate::client::{ClientError, tcp_connect, tls_client_config};
use crate::errors::error_chain;
use crate::quic::{self, Instrumented, QuicClientOptions, QuicError, QuicOptions};
use crate::tcpinfo::{CongestionError, TcpInfo, apply_congestion, impossible_min_rtt};
use crate::tls::{KxGroup, KxLog};
use crate::url::Url;
use quiclab_model::record::{TransportStats, now_us};

/// Time from the end of the handshake to the schedule's epoch.
pub const LEAD: Duration = Duration::from_millis(5);

/// How long before a flush is due the clock thread stops sleeping and spins: enough to cover
/// a virtual machine's wake-up latency.
pub const SPIN: Duration = Duration::from_micros(200);

/// How long a QUIC client waits after the server acknowledged everything before it closes the
/// connection, so that the server's tasks have read what its stack acknowledged.
const CLOSE_DELAY: Duration = Duration::from_millis(20);

/// The datagram buffer of a client in datagram mode whose QUIC options have none.
pub const DATAGRAM_BUFFER: u64 = 1_000_000;

/// What a telemetry client needs.
#[derive(Clone, Debug)]
pub struct SenderOptions {
    pub mode: Mode,
    pub units_per_second: u32,
    /// Units per flush.
    pub flush_units: u32,
    /// Units in the whole run.
    pub units: u64,
    /// PEM certificates to trust (the only trust anchors).
    pub ca_pem: String,
    /// Key-exchange groups, in order (a key share goes for the first only).
    pub groups: Vec<KxGroup>,
    /// TCP congestion controller (TCP mode); `None` keeps the kernel's default.
    pub tcp_congestion: Option<String>,
    /// QUIC settings (QUIC modes).
    pub quic: QuicOptions,
    /// The emulated path's minimum RTT in microseconds: smaller RTT samples are impossible and
    /// counted.
    pub path_min_rtt_us: Option<u64>,
    /// A directory for the QUIC connection's qlog (`client-0.sqlog`).
    pub qlog_dir: Option<PathBuf>,
    /// How long to wait at the end for the server to have everything.
    pub drain: Duration,
}

/// Mistakes in the options: nothing was sent.
#[derive(Debug, thiserror::Error)]
pub enum SenderError {
    #[error(transparent)]
    Setting(#[from] InvalidSetting),
    #[error(transparent)]
    Url(#[from] crate::url::UrlError),
    #[error("TLS configuration")]
    Tls(#[source] ClientError),
    #[error(transparent)]
    Quic(#[from] QuicError),
    #[error(transparent)]
    Congestion(#[from] CongestionError),
    #[error("opening a socket to check the TCP congestion controller")]
    Probe(#[source] std::io::Error),
    #[error("starting the clock thread")]
    Clock(#[source] std::io::Error),
}

/// Why the connection failed or a flush could not be handed over; the summary keeps it with its
/// causes.
#[derive(Debug, thiserror::Error)]
pub enum LinkError {
    #[error(transparent)]
    Tcp(#[from] ClientError),
    #[error("{name:?} is not a TLS server name")]
    ServerName {
        name: String,
        #[source]
        source: rustls::pki_types::InvalidDnsNameError,
    },
    #[error("TLS handshake with {addr} (a server needs --telemetry-log to speak {ALPN})")]
    TlsHandshake {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Endpoint(#[from] quic::RequestError),
    #[error(transparent)]
    Options(#[from] QuicError),
    #[error("connecting to {addr}")]
    Connect {
        addr: SocketAddr,
        #[source]
        source: quinn::ConnectError,
    },
    #[error("QUIC handshake with {addr} (a server needs --telemetry-log to speak {ALPN})")]
    Handshake {
        addr: SocketAddr,
        #[source]
        source: quinn::ConnectionError,
    },
    #[error(
        "a flush of {flush_bytes} bytes exceeds the largest datagram the path takes now ({max} bytes)"
    )]
    FlushTooLarge { flush_bytes: usize, max: usize },
    #[error("the server does not accept QUIC datagrams (serve with --quic-datagrams on)")]
    NoDatagrams,
    #[error("opening the stream")]
    OpenStream(#[source] quinn::ConnectionError),
    #[error(transparent)]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    Connection(#[from] quinn::ConnectionError),
    #[error(transparent)]
    Write(#[from] quinn::WriteError),
    #[error(transparent)]
    ClosedStream(#[from] quinn::ClosedStream),
    #[error(transparent)]
    Datagram(#[from] quinn::SendDatagramError),
    #[error(transparent)]
    Stopped(#[from] quinn::StoppedError),
    #[error("the server stopped stream {stream} ({code})")]
    StoppedByServer { stream: u64, code: quinn::VarInt },
}

/// [`ALPN_TELEMETRY`] as text, for messages.
const ALPN: &str = match std::str::from_utf8(ALPN_TELEMETRY) {
    Ok(s) => s,
    Err(_) => panic!("the telemetry ALPN is ASCII"),
};

/// What a run sent.
#[derive(Debug, Clone)]
pub struct SendOutcome {
    pub flushes: Vec<SentFlush>,
    pub summary: SenderSummary,
}

impl SendOutcome {
    /// The run as records: one per flush, then the summary.
    pub fn records(&self) -> impl Iterator<Item = ClientRecord> + '_ {
        self.flushes
            .iter()
            .map(|f| ClientRecord::Flush(*f))
            .chain(std::iter::once(ClientRecord::Summary(Box::new(
                self.summary.clone(),
            ))))
    }
}

/// Where the URL points.
struct Target {
    server_name: String,
    addr: SocketAddr,
}

async fn target(url: &str) -> Result<Target, SenderError> {
    let u = Url::parse_tls(url, "telemetry")?;
    Ok(Target {
        addr: u.resolve()?,
        server_name: u.host,
    })
}

/// Sends `opts.units` units to the server at `url` (`https://HOST` or `https://HOST:PORT`), until done or until
/// `stop` completes.
pub async fn run(
    url: &str,
    opts: &SenderOptions,
    stop: impl Future<Output = ()>,
) -> Result<SendOutcome, SenderError> {
    // Checked now, with the epoch set later.
    Schedule::new(0, opts.units_per_second, opts.flush_units, opts.units)?;
    let mut with_datagrams;
    let opts = if opts.mode == Mode::QuicDatagrams && opts.quic.datagram_buffer.is_none() {
        // quinn sends datagrams only from a connection that accepts them too
        with_datagrams = opts.clone();
        with_datagrams.quic.datagram_buffer = Some(DATAGRAM_BUFFER);
        &with_datagrams
    } else {
        opts
    };
    let t = target(url).await?;
    let setup = if opts.mode.is_quic() {
        let q = QuicClientOptions {
            quic: opts.quic.clone(),
            ca_pem: opts.ca_pem.clone(),
            groups: opts.groups.clone(),
            reuse_connection: true,
            resume: false,
            path_min_rtt_us: opts.path_min_rtt_us,
            qlog_dir: opts.qlog_dir.clone(),
            upload: None,
        };
        let tls = quic::client_tls(&q)?;
        Setup::Quic(Box::new((q, tls)))
    } else {
        if let Some(name) = &opts.tcp_congestion {
            // A misspelt controller is a mistake in the options: refuse it before connecting.
            let probe = Socket::new(
                socket2::Domain::for_address(t.addr),
                socket2::Type::STREAM,
                None,
            )
            .map_err(SenderError::Probe)?;
            apply_congestion(&probe, Some(name))?;
        }
        Setup::Tcp(
            tls_client_config(&opts.ca_pem, &opts.groups, &[ALPN_TELEMETRY], false)
                .map_err(SenderError::Tls)?,
        )
    };

    let mut stop = std::pin::pin!(stop);
    let connect_us = now_us();
    let connected = tokio::select! {
        c = connect(&setup, &t, opts, url) => c.map_err(|e| error_chain(&e)),
        () = &mut stop => Err("stopped before the connection was up".to_string()),
    };
    let mut summary = SenderSummary {
        mode: opts.mode,
        schedule: Schedule::new(
            connect_us,
            opts.units_per_second,
            opts.flush_units,
            opts.units,
        )?,
        connect_us,
        handshake_done_us: None,
        end_us: connect_us,
        flushes_sent: 0,
        units_sent: 0,
        send_late_p50_us: 0,
        send_late_p99_us: 0,
        send_late_max_us: 0,
        // SAFETY: sched_getscheduler only reads the calling thread's policy.
        realtime: unsafe { libc::sched_getscheduler(0) } == libc::SCHED_FIFO,
        alpn: None,
        group: None,
        transport_stats: TransportStats::default(),
        error: None,
    };
    let mut link = match connected {
        Ok(l) => l,
        Err(e) => {
            summary.end_us = now_us();
            summary.error = Some(e);
            return Ok(SendOutcome {
                flushes: Vec::new(),
                summary,
            });
        }
    };
    let done_us = now_us();
    summary.handshake_done_us = Some(done_us);
    let schedule = Schedule::new(
        done_us + LEAD.as_micros() as u64,
        opts.units_per_second,
        opts.flush_units,
        opts.units,
    )?;
    summary.schedule = schedule;

    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let halt = Arc::new(AtomicBool::new(false));
    spawn_clock(schedule, tx, halt.clone()).map_err(SenderError::Clock)?;
    let mut flushes: Vec<SentFlush> = Vec::with_capacity(schedule.flushes() as usize);
    let sending = async {
        while let Some(k) = rx.recv().await {
            let send_us = now_us();
            let bytes = schedule.flush_bytes(k);
            match link.send(&bytes).await {
                Ok(stream) => flushes.push(SentFlush {
                    flush: k,
                    gen_us: schedule.gen_us(schedule.flush_range(k).start),
                    units: (bytes.len() / super::UNIT_BYTES) as u32,
                    send_us,
                    stream,
                }),
                Err(e) => return Some(format!("sending flush {k}: {}", error_chain(&e))),
            }
        }
        None
    };
    let mut error = tokio::select! {
        e = sending => e,
        () = &mut stop => Some("stopped by a signal".to_string()),
    };
    halt.store(true, Ordering::Relaxed);
    if error.is_none() {
        error = tokio::select! {
            r = tokio::time::timeout(opts.drain, link.drain()) => match r {
                Ok(Ok(())) => None,
                Ok(Err(e)) => Some(format!(
                    "waiting for the server to have everything: {}",
                    error_chain(&e)
                )),
                Err(_) => Some(format!(
                    "the server did not have everything within {:.1} s of the last flush",
                    opts.drain.as_secs_f64()
                )),
            },
            () = &mut stop => Some("stopped by a signal while draining".to_string()),
        };
    }
    summary.end_us = now_us();
    let closed = link.close(opts).await;
    summary.alpn = closed.alpn;
    summary.group = closed.group;
    summary.transport_stats = closed.stats;
    summary.error = error;
    summary.flushes_sent = flushes.len() as u64;
    summary.units_sent = flushes.iter().map(|f| u64::from(f.units)).sum();
    let mut late: Vec<u64> = flushes
        .iter()
        .map(|f| f.send_us.saturating_sub(schedule.flush_due_us(f.flush)))
        .collect();
    late.sort_unstable();
    let pick = |p: f64| {
        late.get(((late.len() as f64 - 1.0) * p).round() as usize)
            .copied()
            .unwrap_or(0)
    };
    summary.send_late_p50_us = pick(0.5);
    summary.send_late_p99_us = pick(0.99);
    summary.send_late_max_us = late.last().copied().unwrap_or(0);
    Ok(SendOutcome { flushes, summary })
}

/// The TLS configuration made before connecting.
enum Setup {
    Tcp(Arc<rustls::ClientConfig>),
    Quic(Box<(QuicClientOptions, quic::ClientTls)>),
}

/// An open connection, in one of the modes.
enum Link {
    Tcp {
        tls: Box<TlsStream<TcpStream>>,
        /// A duplicate of the socket, for TCP_INFO.
        socket: Socket,
        congestion: String,
    },
    Quic(Box<QuicLink>),
}

struct QuicLink {
    mode: Mode,
    /// The connection's endpoint, kept for as long as the connection.
    _endpoint: quinn::Endpoint,
    conn: quinn::Connection,
    inst: Instrumented,
    kx: Arc<KxLog>,
    /// The one stream (quic-stream).
    stream: Option<quinn::SendStream>,
    /// Finished streams whose data may not be acknowledged yet (quic-streams).
    finished: Vec<quinn::SendStream>,
}

/// What a closed connection tells.
struct Closed {
    alpn: Option<String>,
    group: Option<String>,
    stats: TransportStats,
}

async fn connect(
    setup: &Setup,
    t: &Target,
    opts: &SenderOptions,
    url: &str,
) -> Result<Link, LinkError> {
    match setup {
        Setup::Tcp(config) => {
            let (tcp, socket, congestion) =
                tcp_connect(t.addr, opts.tcp_congestion.as_deref(), false, None).await?;
            let name = ServerName::try_from(t.server_name.clone()).map_err(|source| {
                LinkError::ServerName {
                    name: t.server_name.clone(),
                    source,
                }
            })?;
            let tls = TlsConnector::from(config.clone())
                .connect(name, tcp)
                .await
                .map_err(|source| LinkError::TlsHandshake {
                    addr: t.addr,
                    source,
                })?;
            Ok(Link::Tcp {
                tls: Box::new(tls),
                socket,
                congestion,
            })
        }
        Setup::Quic(q) => {
            let (q, tls) = &**q;
            let mut endpoints = Vec::new();
            let endpoint = quic::endpoint_for(&mut endpoints, t.addr, &opts.quic)?;
            let qlog = opts.qlog_dir.as_ref().map(|d| quic::qlog::QlogTarget {
                path: d.join("client-0.sqlog"),
                title: format!("quiclab telemetry, QUIC connection 0 to {url}"),
                vantage: quic::qlog::Vantage::Client,
            });
            let inst = opts
                .quic
                .instrumented(opts.path_min_rtt_us.map(Duration::from_micros), qlog)?;
            let kx = Arc::new(KxLog::default());
            let mut config = quic::client_config(q, tls, &kx, ALPN_TELEMETRY)?;
            config.transport_config(inst.transport.clone());
            let conn = endpoint
                .connect_with(config, t.addr, &t.server_name)
                .map_err(|source| LinkError::Connect {
                    addr: t.addr,
                    source,
                })?
                .await
                .map_err(|source| LinkError::Handshake {
                    addr: t.addr,
                    source,
                })?;
            let mode = opts.mode;
            let flush_bytes = opts.flush_units as usize * super::UNIT_BYTES;
            if mode == Mode::QuicDatagrams {
                match conn.max_datagram_size() {
                    Some(n) if n >= flush_bytes => {}
                    Some(max) => return Err(LinkError::FlushTooLarge { flush_bytes, max }),
                    None => return Err(LinkError::NoDatagrams),
                }
            }
            let stream = if mode == Mode::QuicStream {
                Some(conn.open_uni().await.map_err(LinkError::OpenStream)?)
            } else {
                None
            };
            Ok(Link::Quic(Box::new(QuicLink {
                mode,
                _endpoint: endpoint,
                conn,
                inst,
                kx,
                stream,
                finished: Vec::new(),
            })))
        }
    }
}

impl Link {
    /// Hands one flush to the transport; returns the QUIC stream it went on, if any.
    async fn send(&mut self, bytes: &[u8]) -> Result<Option<u64>, LinkError> {
        match self {
            Link::Tcp { tls, .. } => {
                tls.write_all(bytes).await?;
                tls.flush().await?;
                Ok(None)
            }
            Link::Quic(q) => match q.mode {
                Mode::QuicStream => {
                    // Opened at connection time in this mode.
                    let s = q.stream.as_mut().expect("the stream is open");
                    s.write_all(bytes).await?;
                    Ok(Some(u64::from(s.id())))
                }
                Mode::QuicStreams => {
                    let mut s = q.conn.open_uni().await?;
                    s.write_all(bytes).await?;
                    s.finish()?;
                    let id = u64::from(s.id());
                    q.finished.push(s);
                    Ok(Some(id))
                }
                _ => {
                    q.conn.send_datagram(Bytes::copy_from_slice(bytes))?;
                    Ok(None)
                }
            },
        }
    }

    /// Waits until the server has everything (see the module's contract).
    async fn drain(&mut self) -> Result<(), LinkError> {
        match self {
            Link::Tcp { tls, .. } => {
                tls.shutdown().await?;
                // The server closes once it has read everything up to our close; an abrupt
                // end (no close_notify) after that is just as good.
                let mut buf = [0u8; 64];
                loop {
                    match tls.read(&mut buf).await {
                        Ok(0) | Err(_) => return Ok(()),
                        Ok(_) => {}
                    }
                }
            }
            Link::Quic(q) => {
                if let Some(mut s) = q.stream.take() {
                    s.finish()?;
                    q.finished.push(s);
                }
                if q.mode == Mode::QuicDatagrams {
                    let mut end = q.conn.open_uni().await?;
                    end.finish()?;
                    q.finished.push(end);
                }
                for s in &mut q.finished {
                    match s.stopped().await {
                        Ok(None) => {}
                        Ok(Some(code)) => {
                            return Err(LinkError::StoppedByServer {
                                stream: u64::from(s.id()),
                                code,
                            });
                        }
                        Err(e) => return Err(e.into()),
                    }
                }
                tokio::time::sleep(CLOSE_DELAY).await;
                Ok(())
            }
        }
    }

    /// Reads the transport's statistics and closes the connection.
    async fn close(self, opts: &SenderOptions) -> Closed {
        match self {
            Link::Tcp {
                tls,
                socket,
                congestion,
            } => {
                let session = tls.get_ref().1;
                let mut stats = TransportStats {
                    congestion_control: Some(congestion),
                    ..TransportStats::default()
                };
                if let Ok(info) = TcpInfo::read(socket.as_fd()) {
                    stats.min_rtt_us = info.min_rtt_us.map(u64::from);
                    stats.smoothed_rtt_us = info.rtt_us.map(u64::from);
                    stats.packets_lost = info.total_retrans.map(u64::from);
                    stats.bytes_retransmitted = info.bytes_retrans;
                    stats.cwnd_final_bytes = info.cwnd_bytes();
                    stats.impossible_rtt_samples = opts
                        .path_min_rtt_us
                        .map(|floor| impossible_min_rtt(&info, floor));
                }
                Closed {
                    alpn: session
                        .alpn_protocol()
                        .map(|p| String::from_utf8_lossy(p).into_owned()),
                    group: session
                        .negotiated_key_exchange_group()
                        .and_then(|g| KxGroup::of(g.name()))
                        .map(|g| g.name().to_string()),
                    stats,
                }
            }
            Link::Quic(q) => {
                let stats = quic::transport_stats(&q.conn, opts.quic.congestion, &q.inst.recorder);
                let alpn = q
                    .conn
                    .handshake_data()
                    .and_then(|d| d.downcast::<quinn::crypto::rustls::HandshakeData>().ok())
                    .and_then(|d| d.protocol)
                    .map(|p| String::from_utf8_lossy(&p).into_owned());
                quic::close_sent(&q.conn, 0u32.into(), b"done").await;
                if let Err(e) = q.inst.flush() {
                    log::warn!("writing a qlog file: {e}");
                }
                Closed {
                    alpn,
                    group: q.kx.group(),
                    stats,
                }
            }
        }
    }
}

/// Starts the thread that hands each flush to the sender when it is due.
fn spawn_clock(
    schedule: Schedule,
    tx: tokio::sync::mpsc::UnboundedSender<u64>,
    halt: Arc<AtomicBool>,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name("telemetry-clock".into())
        .spawn(move || {
            // SAFETY: PR_SET_TIMERSLACK changes only this thread's timer slack (default 50 us,
            // which would make every wake-up that much late).
            unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0) };
            for k in 0..schedule.flushes() {
                sleep_until_us(schedule.flush_due_us(k));
                if halt.load(Ordering::Relaxed) || tx.send(k).is_err() {
                    return;
                }
            }
        })
}

/// Sleeps until `deadline_us` on CLOCK_MONOTONIC: an absolute sleep to [`SPIN`] before it, then
/// a spin.
fn sleep_until_us(deadline_us: u64) {
    let wake = deadline_us.saturating_sub(SPIN.as_micros() as u64);
    if quiclab_model::record::now_us() < wake {
        let ts = libc::timespec {
            tv_sec: (wake / 1_000_000) as libc::time_t,
            tv_nsec: ((wake % 1_000_000) * 1000) as libc::c_long,
        };
        loop {
            // SAFETY: clock_nanosleep reads the timespec we own; no remainder is asked for with
            // TIMER_ABSTIME.
            let r = unsafe {
                libc::clock_nanosleep(
                    libc::CLOCK_MONOTONIC,
                    libc::TIMER_ABSTIME,
                    &ts,
                    std::ptr::null_mut(),
                )
            };
            if r != libc::EINTR {
                break;
            }
        }
    }
    while quiclab_model::record::now_us() < deadline_us {
        std::hint::spin_loop();
    }
}
