//! quiclab's HTTP/3 endpoints: quinn for the transport, h3 for HTTP, rustls with *ring* for
//! TLS.
//!
//! Modules: [`socket`] (the endpoint's UDP socket), [`h3prio`] (the server's response scheduler: RFC 9218 priorities, FIFO or
//! round-robin), [`qlog`] (one qlog file per connection), [`recording`] (a congestion
//! controller wrapper that counts what quinn does not expose). Routes, URLs, TLS and the
//! request loop come from `quiclab-endpoint`.
//!
//! Must never: know about plans, trials or the store; print (warnings go through `log`).
//!
//! Contract:
//! - [`QuicOptions`] is every transport setting quiclab varies, shared by servers and clients.
//!   [`QuicOptions::validate`] refuses a value quinn would reject or silently misuse, naming the
//!   field, the value and what is allowed.
//! - Every endpoint's UDP socket comes from [`socket::open`]: 8 MiB kernel buffers, and GSO
//!   batches held to what fits one UDP send at the largest payload (7 × 8952 bytes at jumbo
//!   frames, 10 up to 6550), so any payload works with GSO on.
//! - [`QuicServer`] serves the routes of [`crate::routes`] (`GET /bytes/N`, `POST /upload`, 404
//!   otherwise) over HTTP/3 on a UDP socket, TLS 1.3 with ALPN `h3`, accepting 0-RTT requests
//!   (they are idempotent downloads or counted uploads, so a replay does no harm).
//!   Optionally it writes each connection's timeline (the sender's view, every 5 ms). Responses
//!   are scheduled by [`crate::h3prio`]: RFC 9218 priorities, FIFO or round-robin.
//! - [`get`] fetches URLs over HTTP/3 and returns one [`RequestRecord`] per URL, checking
//!   `/bytes/N` bodies byte for byte against the pattern. With resumption, later connections of
//!   a run send their request as 0-RTT; if the server refuses the early data, the request is
//!   repeated on the same connection.
//! - With a [`QuicService`] (e.g. the telemetry receiver), connections that negotiate its ALPN
//!   are handed to it instead of HTTP/3.
//! - Congestion control is read back from the connection (by type), and quinn's BBR is flagged
//!   experimental in records: it is BBRv1 and quinn's pacer does not apply its pacing rate.

use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf, Bytes};
use http::{Request, Response, StatusCode, Uri};
use quinn::congestion::{self, ControllerFactory};
use quinn::crypto::rustls::{QuicClientConfig, QuicServerConfig};
use quinn::{MtuDiscoveryConfig, TransportConfig, VarInt};
use rustls::RootCertStore;

use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use serde::{Deserialize, Serialize};
use socket2::{Domain, Protocol, Socket, Type};
use tokio::task::JoinSet;

pub mod h3prio;
pub mod qlog;
pub mod recording;
pub mod socket;

use quiclab_endpoint::{files, priority, requests, routes, timeline, tls, url};

use crate::files::Lookup;
use crate::qlog::{QlogFile, QlogTarget, Vantage};
use crate::recording::{CcObserver, Recorder, RecordingFactory};
use crate::requests::{Connector, Requests};
use crate::routes::PatternBody;
use crate::routes::{Route, first_mismatch, pattern_chunk, route};
use crate::timeline::{TIMELINE_INTERVAL, TimelineWriter};
use crate::tls::{KxGroup, KxLog, logged_provider};
use crate::url::{Url, UrlError};
use http_body_util::BodyExt;
use quiclab_endpoint::ServeStats;
use quiclab_model::record::{
    Handshake, HttpVersion, RequestRecord, TimelineSample, Transport, TransportStats, now_us,
};

/// ALPN protocol identifier of HTTP/3.
pub const ALPN_H3: &[u8] = b"h3";

/// HTTP/3's "no error" code (RFC 9114, section 8.1), for closing a connection that is done.
const H3_NO_ERROR: VarInt = VarInt::from_u32(0x100);

/// The largest UDP payload the kernel sends in one datagram (65,535 - 8 UDP - 20 IPv4 header).
pub const MAX_UDP_DATAGRAM: u32 = 65_507;

/// The smallest datagram size QUIC allows (RFC 9000, section 14).
const MIN_QUIC_PAYLOAD: u16 = 1200;

/// The largest value of a QUIC variable-length integer (flow-control windows are such values).
const VARINT_MAX: u64 = (1 << 62) - 1;

/// Errors from QUIC options, configurations and servers.
#[derive(Debug, thiserror::Error)]
pub enum QuicError {
    #[error("QUIC option {field} = {value} is not allowed (allowed: {allowed})")]
    InvalidOption {
        field: &'static str,
        value: String,
        allowed: String,
    },
    #[error("TLS configuration for QUIC")]
    Tls(#[source] rustls::Error),
    #[error(
        "the TLS configuration lacks TLS_AES_128_GCM_SHA256, which QUIC's initial packets need"
    )]
    NoInitialCipherSuite(#[source] quinn::crypto::rustls::NoInitialCipherSuite),
    #[error("reading the CA certificates to trust")]
    CaPem(#[source] rustls::pki_types::pem::Error),
    #[error("the CA certificate PEM holds no certificate")]
    NoCaCertificate,
    #[error("creating the qlog file {}", path.display())]
    Qlog {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("opening a UDP socket for {addr}")]
    Socket {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
}

/// A QUIC congestion controller as quinn implements it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum QuicCongestion {
    NewReno,
    #[default]
    Cubic,
    /// quinn's BBRv1, experimental (see the module documentation).
    Bbr,
}

impl QuicCongestion {
    pub const ALL: [QuicCongestion; 3] = [
        QuicCongestion::NewReno,
        QuicCongestion::Cubic,
        QuicCongestion::Bbr,
    ];

    pub fn name(self) -> &'static str {
        match self {
            QuicCongestion::NewReno => "newreno",
            QuicCongestion::Cubic => "cubic",
            QuicCongestion::Bbr => "bbr",
        }
    }

    /// The name, with "(experimental)" where results must be labelled so.
    pub fn label(self) -> String {
        if self.experimental() {
            format!("{} (experimental)", self.name())
        } else {
            self.name().to_string()
        }
    }

    /// True for controllers whose results must be labelled experimental.
    pub fn experimental(self) -> bool {
        self == QuicCongestion::Bbr
    }

    fn factory(self) -> Arc<dyn ControllerFactory + Send + Sync> {
        match self {
            QuicCongestion::NewReno => Arc::new(congestion::NewRenoConfig::default()),
            QuicCongestion::Cubic => Arc::new(congestion::CubicConfig::default()),
            QuicCongestion::Bbr => Arc::new(congestion::BbrConfig::default()),
        }
    }

    /// Which controller a connection actually runs, told by the controller's type.
    pub fn of_connection(conn: &quinn::Connection) -> Option<QuicCongestion> {
        let any = conn.congestion_state().into_any();
        if any.is::<congestion::Cubic>() {
            Some(QuicCongestion::Cubic)
        } else if any.is::<congestion::NewReno>() {
            Some(QuicCongestion::NewReno)
        } else if any.is::<congestion::Bbr>() {
            Some(QuicCongestion::Bbr)
        } else {
            None
        }
    }
}

impl FromStr for QuicCongestion {
    type Err = QuicError;

    fn from_str(s: &str) -> Result<Self, QuicError> {
        Self::ALL
            .into_iter()
            .find(|c| c.name().eq_ignore_ascii_case(s))
            .ok_or_else(|| QuicError::InvalidOption {
                field: "congestion",
                value: s.to_string(),
                allowed: Self::ALL.map(Self::name).join(", "),
            })
    }
}

impl fmt::Display for QuicCongestion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// QUIC transport settings, the same for servers and clients. Defaults are quinn's, except
/// datagrams (off: HTTP/3 downloads do not use them). The server reaches quinn's per-stream
/// priorities through its own h3 transport ([`crate::h3prio`]): h3-quinn does not expose them,
/// and h3 has no RFC 9218 support.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct QuicOptions {
    pub congestion: QuicCongestion,
    /// RTT assumed before the first sample, in microseconds.
    pub initial_rtt_us: u64,
    /// Path MTU discovery (DPLPMTUD) between `initial_mtu` and `max_udp_payload`.
    pub mtu_discovery: bool,
    /// UDP payload size used from the start.
    pub initial_mtu: u16,
    /// Upper bound of MTU discovery (the largest UDP payload ever sent).
    pub max_udp_payload: u16,
    /// Generic segmentation offload (several datagrams per `sendmsg`).
    pub gso: bool,
    /// Flow-control window of each stream, bytes.
    pub stream_receive_window: u64,
    /// Flow-control window of the whole connection, bytes.
    pub receive_window: u64,
    /// Data buffered for sending across all streams, bytes.
    pub send_window: u64,
    /// Unreliable datagrams (RFC 9221): `None` off; `Some(n)` on, with n bytes buffered for
    /// receiving and for sending (workloads send and read them on the `quinn::Connection`).
    pub datagram_buffer: Option<u64>,
    /// Round-robin between streams with data to send (quinn's default); `false` sends them one
    /// after another in the order they were opened (FIFO).
    pub round_robin: bool,
    /// The server honours RFC 9218 `priority` request headers (urgency first; see
    /// [`crate::h3prio`]); `false`: every response at the default urgency.
    pub priorities: bool,
}

impl Default for QuicOptions {
    fn default() -> Self {
        QuicOptions {
            congestion: QuicCongestion::Cubic,
            initial_rtt_us: 333_000,
            mtu_discovery: true,
            initial_mtu: 1200,
            max_udp_payload: 1452,
            gso: true,
            stream_receive_window: 1_250_000,
            receive_window: VARINT_MAX,
            send_window: 10_000_000,
            datagram_buffer: None,
            round_robin: true,
            priorities: true,
        }
    }
}

impl QuicOptions {
    /// Checks every field; the error names the first bad one.
    pub fn validate(&self) -> Result<(), QuicError> {
        let bad = |field, value: String, allowed: String| {
            Err(QuicError::InvalidOption {
                field,
                value,
                allowed,
            })
        };
        if self.initial_rtt_us == 0 || self.initial_rtt_us > 60_000_000 {
            return bad(
                "initial_rtt",
                format!("{} us", self.initial_rtt_us),
                "1 us to 60 s".into(),
            );
        }
        if !(MIN_QUIC_PAYLOAD..=u16::MAX - 8).contains(&self.max_udp_payload) {
            return bad(
                "max_udp_payload",
                self.max_udp_payload.to_string(),
                format!("{MIN_QUIC_PAYLOAD} to {}", u16::MAX - 8),
            );
        }
        if !(MIN_QUIC_PAYLOAD..=self.max_udp_payload).contains(&self.initial_mtu) {
            return bad(
                "initial_mtu",
                self.initial_mtu.to_string(),
                format!(
                    "{MIN_QUIC_PAYLOAD} to max_udp_payload ({})",
                    self.max_udp_payload
                ),
            );
        }
        for (field, v) in [
            ("stream_receive_window", self.stream_receive_window),
            ("receive_window", self.receive_window),
            ("send_window", self.send_window),
            ("datagram_buffer", self.datagram_buffer.unwrap_or(1)),
        ] {
            if v == 0 || v > VARINT_MAX {
                return bad(field, v.to_string(), format!("1 to {VARINT_MAX} bytes"));
            }
        }
        Ok(())
    }

    /// quinn's transport configuration for these options (validated first).
    pub fn transport_config(&self) -> Result<TransportConfig, QuicError> {
        self.validate()?;
        Ok(self.build_transport(self.congestion.factory()))
    }

    /// The endpoint configuration: it advertises `max_udp_payload` as the largest UDP payload
    /// this end accepts (quinn's default, 1472, would cap the peer's packets whatever its own
    /// settings).
    pub fn endpoint_config(&self) -> quinn::EndpointConfig {
        let mut c = quinn::EndpointConfig::default();
        // validate() keeps max_udp_payload at 1200 or more, which quinn accepts.
        let _ = c.max_udp_payload_size(self.max_udp_payload);
        c
    }

    /// One connection's transport: [`QuicOptions::transport_config`] with the controller
    /// wrapped to record into a recorder of its own (RTT samples under `path_min_rtt` counted
    /// as impossible), and with a qlog file when `qlog` says where.
    pub fn instrumented(
        &self,
        path_min_rtt: Option<Duration>,
        qlog: Option<QlogTarget>,
    ) -> Result<Instrumented, QuicError> {
        self.validate()?;
        let (qlog, stream) = match qlog {
            Some(target) => {
                let description = format!("quiclab; {}", self.summary());
                let (file, stream) =
                    QlogFile::create(&target, description).map_err(|source| QuicError::Qlog {
                        path: target.path,
                        source,
                    })?;
                (Some(file), Some(stream))
            }
            None => (None, None),
        };
        let observer = qlog.clone().map(|q| q as Arc<dyn CcObserver>);
        let recorder = Recorder::with_observer(path_min_rtt, observer);
        let mut transport = self.build_transport(RecordingFactory::new(
            self.congestion.factory(),
            recorder.clone(),
        ));
        transport.qlog_stream(stream);
        Ok(Instrumented {
            recorder,
            qlog,
            transport: Arc::new(transport),
        })
    }

    /// The transport for valid options with the given controller factory.
    fn build_transport(
        &self,
        factory: Arc<dyn ControllerFactory + Send + Sync>,
    ) -> TransportConfig {
        let mut t = TransportConfig::default();
        t.congestion_controller_factory(factory)
            .initial_rtt(Duration::from_micros(self.initial_rtt_us))
            .initial_mtu(self.initial_mtu)
            .enable_segmentation_offload(self.gso)
            // validate() keeps the windows within VarInt's range.
            .stream_receive_window(
                VarInt::from_u64(self.stream_receive_window).unwrap_or(VarInt::MAX),
            )
            .receive_window(VarInt::from_u64(self.receive_window).unwrap_or(VarInt::MAX))
            .send_window(self.send_window);
        if self.mtu_discovery {
            let mut mtu = MtuDiscoveryConfig::default();
            mtu.upper_bound(self.max_udp_payload);
            t.mtu_discovery_config(Some(mtu));
        } else {
            t.mtu_discovery_config(None);
        }
        match self.datagram_buffer {
            Some(n) => {
                // validate() keeps n within a VarInt, far below usize::MAX on 64-bit hosts.
                let n = usize::try_from(n).unwrap_or(usize::MAX);
                t.datagram_receive_buffer_size(Some(n))
                    .datagram_send_buffer_size(n);
            }
            None => {
                t.datagram_receive_buffer_size(None);
            }
        }
        t.send_fairness(self.round_robin);
        t
    }

    /// A one-line summary for ready lines and logs.
    pub fn summary(&self) -> String {
        format!(
            "quic congestion {}; initial rtt {} ms; mtu discovery {}; initial mtu {}; max udp payload {}; gso {}; stream window {}; connection window {}; scheduling {}; datagrams {}; priorities {}",
            self.congestion.label(),
            self.initial_rtt_us as f64 / 1000.0,
            on_off(self.mtu_discovery),
            self.initial_mtu,
            self.max_udp_payload,
            on_off(self.gso),
            self.stream_receive_window,
            if self.receive_window == VARINT_MAX {
                "unlimited".to_string()
            } else {
                self.receive_window.to_string()
            },
            if self.round_robin {
                "round-robin"
            } else {
                "fifo"
            },
            self.datagram_buffer
                .map_or("off".to_string(), |n| format!("on, {n} bytes buffered")),
            on_off(self.priorities),
        )
    }
}

/// What [`QuicOptions::instrumented`] made for one connection.
pub struct Instrumented {
    pub recorder: Arc<Recorder>,
    pub qlog: Option<Arc<QlogFile>>,
    pub transport: Arc<TransportConfig>,
}

impl Instrumented {
    /// Writes out the qlog, if there is one (once the connection is over).
    pub fn flush(&self) -> std::io::Result<()> {
        self.qlog.as_ref().map_or(Ok(()), |q| q.flush())
    }
}

fn on_off(b: bool) -> &'static str {
    if b { "on" } else { "off" }
}

/// Parses `on`/`off` (also `true`/`false`, `yes`/`no`, `1`/`0`) for a named field.
pub fn parse_on_off(field: &'static str, s: &str) -> Result<bool, QuicError> {
    match s.to_ascii_lowercase().as_str() {
        "on" | "true" | "yes" | "1" => Ok(true),
        "off" | "false" | "no" | "0" => Ok(false),
        _ => Err(QuicError::InvalidOption {
            field,
            value: s.to_string(),
            allowed: "on, off".into(),
        }),
    }
}

/// Parses a duration such as `100ms`, `1.5s` or `250us` (a bare number is milliseconds) into
/// microseconds.
pub fn parse_duration_us(field: &'static str, s: &str) -> Result<u64, QuicError> {
    let t = s.trim();
    let (num, scale) = if let Some(n) = t.strip_suffix("us") {
        (n, 1.0)
    } else if let Some(n) = t.strip_suffix("ms") {
        (n, 1e3)
    } else if let Some(n) = t.strip_suffix('s') {
        (n, 1e6)
    } else {
        (t, 1e3)
    };
    match num.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok((v * scale).round() as u64),
        _ => Err(QuicError::InvalidOption {
            field,
            value: s.to_string(),
            allowed: "a duration such as 100ms, 1.5s or 250us".into(),
        }),
    }
}

/// The QUIC server's TLS configuration: `tcp_config` (from [`crate::tls::server_config`], so the
/// same certificate, provider and groups) with ALPN `h3` only and 0-RTT accepted (QUIC allows
/// only 0 or `u32::MAX` as early-data size).
pub fn server_tls(tcp_config: &rustls::ServerConfig) -> rustls::ServerConfig {
    crate::tls::udp_server_config(tcp_config, ALPN_H3, u32::MAX)
}

/// What a QUIC server needs to start.
pub struct QuicServerOptions {
    pub listen: SocketAddr,
    /// From [`server_tls`].
    pub tls: Arc<rustls::ServerConfig>,
    pub quic: QuicOptions,
    /// Where to write each connection's timeline ([`TimelineSample`] JSON lines, every
    /// [`TIMELINE_INTERVAL`] while the connection is open and once when it closes,
    /// connections numbered from 0 in the order they arrive).
    pub timeline: Option<TimelineWriter>,
    /// The emulated path's minimum RTT in microseconds: smaller RTT samples are impossible and
    /// counted.
    pub path_min_rtt_us: Option<u64>,
    /// A directory for one qlog file per connection (`server-N.sqlog`, N as in the timeline).
    pub qlog_dir: Option<PathBuf>,
    /// Serve other GET paths as files under this directory (see [`crate::files`]).
    pub root: Option<PathBuf>,
    /// Also speak this protocol, to connections that negotiate its ALPN. Datagrams are
    /// accepted only when `quic.datagram_buffer` is on.
    pub service: Option<Arc<dyn QuicService>>,
}

/// A protocol other than HTTP/3 that a QUIC server also speaks: a connection that negotiates
/// its ALPN is handed to it whole (the telemetry receiver is one).
pub trait QuicService: Send + Sync + 'static {
    /// What it is called in errors.
    fn name(&self) -> &'static str;
    /// Its ALPN.
    fn alpn(&self) -> &'static [u8];
    /// Serves connection number `index` (numbered with the HTTP/3 ones) to its end; the text
    /// says why it failed.
    fn serve(&self, conn: quinn::Connection, index: u32) -> ServiceFuture;
}

/// What a [`QuicService`] returns: the end of a connection.
pub type ServiceFuture =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), String>> + Send>>;

/// A bound QUIC server.
pub struct QuicServer {
    endpoint: quinn::Endpoint,
    local_addr: SocketAddr,
    routes: Arc<Routes>,
    timeline: Option<TimelineWriter>,
    /// What each connection's own configuration is made from.
    crypto: Arc<QuicServerConfig>,
    quic: QuicOptions,
    path_min_rtt: Option<Duration>,
    qlog_dir: Option<PathBuf>,
}

/// Something that went wrong with one QUIC connection or request; the server goes on.
#[derive(Debug, thiserror::Error)]
pub enum QuicConnectionError {
    #[error("QUIC handshake with {peer}")]
    Handshake {
        peer: SocketAddr,
        #[source]
        source: quinn::ConnectionError,
    },
    #[error("HTTP/3 with {peer}")]
    Http {
        peer: SocketAddr,
        #[source]
        source: h3::error::ConnectionError,
    },
    #[error("writing the QUIC timeline")]
    Timeline(#[source] std::io::Error),
    #[error("setting up a QUIC connection")]
    Setup(#[source] QuicError),
    #[error("writing a qlog file")]
    QlogWrite(#[source] std::io::Error),
    #[error("{service} from {peer}: {message}")]
    Service {
        service: &'static str,
        peer: SocketAddr,
        message: String,
    },
    #[error("HTTP/3 request from {peer}")]
    Stream {
        peer: SocketAddr,
        #[source]
        source: h3::error::StreamError,
    },
}

impl QuicServer {
    /// Opens the UDP socket (inside a tokio runtime). `[::]` also accepts IPv4.
    pub fn bind(opts: QuicServerOptions) -> Result<QuicServer, QuicError> {
        let addr = opts.listen;
        let socket_err = |source| QuicError::Socket { addr, source };
        let transport = opts.quic.transport_config()?;
        let tls = match &opts.service {
            Some(service) => {
                let mut tls = (*opts.tls).clone();
                tls.alpn_protocols.push(service.alpn().to_vec());
                Arc::new(tls)
            }
            None => opts.tls,
        };
        let crypto =
            Arc::new(QuicServerConfig::try_from(tls).map_err(QuicError::NoInitialCipherSuite)?);
        let mut server_config = quinn::ServerConfig::with_crypto(crypto.clone());
        server_config.transport_config(Arc::new(transport));

        let socket = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))
            .map_err(socket_err)?;
        if addr.is_ipv6() && addr.ip().is_unspecified() {
            socket.set_only_v6(false).map_err(socket_err)?;
        }
        socket.bind(&addr.into()).map_err(socket_err)?;
        let endpoint = socket::open(
            socket.into(),
            opts.quic.max_udp_payload,
            opts.quic.endpoint_config(),
            Some(server_config),
        )
        .map_err(socket_err)?;
        let local_addr = endpoint.local_addr().map_err(socket_err)?;
        // Digits, a colon and quotes only: always a valid header value.
        let alt_svc = http::HeaderValue::from_str(&format!("h3=\":{}\"", local_addr.port()))
            .expect("a port number is a valid header value");
        Ok(QuicServer {
            endpoint,
            local_addr,
            routes: Arc::new(Routes {
                pattern: pattern_chunk(),
                alt_svc,
                root: opts.root,
                service: opts.service,
                scheduling: h3prio::Scheduling {
                    round_robin: opts.quic.round_robin,
                    priorities: opts.quic.priorities,
                },
            }),
            timeline: opts.timeline,
            crypto,
            quic: opts.quic,
            path_min_rtt: opts.path_min_rtt_us.map(Duration::from_micros),
            qlog_dir: opts.qlog_dir,
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Serves until `shutdown` completes, then closes every connection.
    pub async fn run_until(
        self,
        shutdown: impl Future<Output = ()>,
        on_error: impl Fn(QuicConnectionError) + Send + Sync + 'static,
    ) -> ServeStats {
        let on_error = Arc::new(on_error);
        let mut stats = ServeStats::default();
        let mut conns: JoinSet<bool> = JoinSet::new();
        let mut shutdown = std::pin::pin!(shutdown);
        loop {
            tokio::select! {
                () = &mut shutdown => break,
                Some(done) = conns.join_next(), if !conns.is_empty() => {
                    if !done.unwrap_or(false) {
                        stats.failed += 1;
                    }
                }
                incoming = self.endpoint.accept() => {
                    let Some(incoming) = incoming else { break };
                    let index = stats.connections as u32;
                    stats.connections += 1;
                    let (routes, on_error) = (self.routes.clone(), on_error.clone());
                    let timeline = self.timeline.clone();
                    // Each connection gets its own controller recorder.
                    let (config, inst) = match self.connection_config(index) {
                        Ok(c) => c,
                        Err(e) => {
                            on_error(QuicConnectionError::Setup(e));
                            incoming.refuse();
                            continue;
                        }
                    };
                    conns.spawn(async move {
                        let served = serve_connection(
                            incoming,
                            index,
                            config,
                            inst,
                            routes,
                            timeline,
                            on_error.clone(),
                        );
                        match served.await {
                            Ok(()) => true,
                            Err(e) => {
                                on_error(e);
                                false
                            }
                        }
                    });
                }
            }
        }
        self.endpoint.close(H3_NO_ERROR, b"server stopping");
        conns.shutdown().await;
        if let Some(w) = &self.timeline
            && let Err(e) = w.flush()
        {
            on_error(QuicConnectionError::Timeline(e));
        }
        stats
    }

    /// A server configuration for connection `index`: the options' transport with a
    /// controller recorder and a qlog of its own.
    fn connection_config(
        &self,
        index: u32,
    ) -> Result<(Arc<quinn::ServerConfig>, Instrumented), QuicError> {
        let qlog = self.qlog_dir.as_ref().map(|d| QlogTarget {
            path: d.join(format!("server-{index}.sqlog")),
            title: format!("quiclab serve, QUIC connection {index}"),
            vantage: Vantage::Server,
        });
        let inst = self.quic.instrumented(self.path_min_rtt, qlog)?;
        let mut config = quinn::ServerConfig::with_crypto(self.crypto.clone());
        config.transport_config(inst.transport.clone());
        Ok((Arc::new(config), inst))
    }
}

/// What requests are answered from: the `/bytes` pattern, the Alt-Svc value, static files;
/// and the other protocol spoken, if any.
struct Routes {
    pattern: Bytes,
    alt_svc: http::HeaderValue,
    root: Option<PathBuf>,
    service: Option<Arc<dyn QuicService>>,
    /// How response streams share the connection.
    scheduling: h3prio::Scheduling,
}

type H3ServerStream = h3::server::RequestStream<h3prio::BidiStream<Bytes>, Bytes>;

async fn serve_connection(
    incoming: quinn::Incoming,
    index: u32,
    config: Arc<quinn::ServerConfig>,
    inst: Instrumented,
    routes: Arc<Routes>,
    timeline: Option<TimelineWriter>,
    on_error: Arc<impl Fn(QuicConnectionError) + Send + Sync + 'static>,
) -> Result<(), QuicConnectionError> {
    let peer = incoming.remote_address();
    let mut connecting = incoming
        .accept_with(config)
        .map_err(|source| QuicConnectionError::Handshake { peer, source })?;
    // The ClientHello names the application: HTTP/3 or the other protocol.
    let other = match (&routes.service, connecting.handshake_data().await) {
        (Some(service), Ok(d)) => d
            .downcast::<quinn::crypto::rustls::HandshakeData>()
            .ok()
            .and_then(|d| d.protocol)
            .is_some_and(|p| p == service.alpn())
            .then(|| service.clone()),
        // the handshake's failure is reported below
        _ => None,
    };
    // Accepting before the handshake completes lets 0-RTT requests be answered at once (0.5-RTT
    // data); a server always can, so the error arm only hands the handshake back.
    let (conn, mut handshake_done) = match connecting.into_0rtt() {
        Ok((conn, accepted)) => (conn, Some(accepted)),
        Err(connecting) => (
            connecting
                .await
                .map_err(|source| QuicConnectionError::Handshake { peer, source })?,
            None,
        ),
    };
    // HTTP/3 starts before the handshake completes only for a client that opened a request in
    // 0-RTT; any other waits for the handshake, so that nothing of HTTP/3 is sent as 0.5-RTT
    // data. (ngtcp2's client, asked to retry its ClientHello, never completed a request when
    // SETTINGS came before its Finished.)
    let mut early_request = None;
    if other.is_none()
        && let Some(done) = handshake_done.as_mut()
    {
        tokio::select! {
            biased;
            _ = done => {}
            stream = conn.accept_bi() => {
                early_request = Some(stream.map_err(|source| QuicConnectionError::Handshake {
                    peer,
                    source,
                })?);
            }
        }
    }
    let sampler = timeline.map(|w| {
        AbortOnDrop(tokio::spawn(sample_timeline(
            conn.clone(),
            inst.recorder.clone(),
            index,
            w,
            on_error.clone(),
        )))
    });
    let served = match other {
        Some(service) => {
            let name = service.name();
            service.serve(conn.clone(), index).await.map_err(|message| {
                QuicConnectionError::Service {
                    service: name,
                    peer,
                    message,
                }
            })
        }
        None => serve_h3(&conn, early_request, peer, routes, on_error).await,
    };
    // The connection is over (the client closed it, or it failed): the sampler takes its last
    // sample once quinn says so.
    conn.close(H3_NO_ERROR, b"done");
    if let Some(mut s) = sampler {
        let _ = tokio::time::timeout(Duration::from_secs(1), &mut s.0).await;
    }
    inst.flush().map_err(QuicConnectionError::QlogWrite)?;
    served
}

async fn serve_h3(
    conn: &quinn::Connection,
    early_request: Option<(quinn::SendStream, quinn::RecvStream)>,
    peer: SocketAddr,
    routes: Arc<Routes>,
    on_error: Arc<impl Fn(QuicConnectionError) + Send + Sync + 'static>,
) -> Result<(), QuicConnectionError> {
    let urgencies = h3prio::Urgencies::default();
    let mut transport = h3prio::Connection::new(conn.clone(), routes.scheduling, urgencies.clone())
        .with_shared_payload(routes.pattern.clone());
    if let Some(first) = early_request {
        transport = transport.with_first_stream(first);
    }
    let mut h3conn: h3::server::Connection<h3prio::Connection, Bytes> =
        h3::server::Connection::new(transport)
            .await
            .map_err(|source| QuicConnectionError::Http { peer, source })?;
    let mut requests = JoinSet::new();
    loop {
        match h3conn.accept().await {
            Ok(Some(resolver)) => {
                let (routes, on_error) = (routes.clone(), on_error.clone());
                let urgencies = urgencies.clone();
                requests.spawn(async move {
                    let served = async {
                        let (req, stream) = resolver.resolve_request().await?;
                        // before the response's first byte: it decides the stream's priority
                        // and its place in line
                        let priority = req
                            .headers()
                            .get("priority")
                            .and_then(|v| v.to_str().ok())
                            .map(crate::priority::Priority::parse_header);
                        urgencies.request(stream.id().into_inner(), priority);
                        let mut stream = stream;
                        handle(req, &mut stream, routes).await?;
                        // what the client sent after its request is read too: a frame that
                        // must not be there (RFC 9114 7.2.8: HTTP/2's PING, ...) is a
                        // connection error, which h3 raises as it reads it
                        let rest = async {
                            while stream.recv_data().await?.is_some() {}
                            Ok::<(), h3::error::StreamError>(())
                        };
                        match tokio::time::timeout(REQUEST_REST, rest).await {
                            Ok(read) => read,
                            // a client that never ends its side: nothing more to check
                            Err(_) => Ok(()),
                        }
                    };
                    if let Err(source) = served.await
                        && !source.is_h3_no_error()
                    {
                        on_error(QuicConnectionError::Stream { peer, source });
                    }
                });
            }
            Ok(None) => break,
            Err(e) if e.is_h3_no_error() => break,
            // The client closing or abandoning the connection after its last request is the
            // normal end of a connection, whatever code it closes with.
            Err(h3::error::ConnectionError::Remote {
                0:
                    h3::quic::ConnectionErrorIncoming::ApplicationClose { .. }
                    | h3::quic::ConnectionErrorIncoming::Timeout,
                ..
            })
            | Err(h3::error::ConnectionError::Timeout { .. }) => break,
            Err(source) => return Err(QuicConnectionError::Http { peer, source }),
        }
    }
    while requests.join_next().await.is_some() {}
    Ok(())
}

/// How long after its response the server reads what a request stream still carries.
const REQUEST_REST: Duration = Duration::from_secs(2);

/// Aborts a task when dropped, so a connection's sampler ends with the connection's task.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Writes a [`TimelineSample`] of `conn` every [`TIMELINE_INTERVAL`] and once more when it
/// closes. The server sends the downloads, so its view is the sender's: congestion window,
/// RTT and losses from quinn's statistics; acknowledged bytes, bytes in flight, congestion
/// events and impossible RTT samples from the connection's [`Recorder`].
async fn sample_timeline(
    conn: quinn::Connection,
    recorder: Arc<Recorder>,
    index: u32,
    w: TimelineWriter,
    on_error: Arc<impl Fn(QuicConnectionError) + Send + Sync + 'static>,
) {
    let mut tick = tokio::time::interval(TIMELINE_INTERVAL);
    // Stay on the 5 ms grid: a late tick fires once and the next keeps its time, so lateness
    // under load does not add up (rescheduling from each late tick stretched the period to 7 ms).
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut events = 0;
    let closed = conn.closed();
    let mut closed = std::pin::pin!(closed);
    loop {
        let last = tokio::select! {
            _ = tick.tick() => false,
            _ = &mut closed => true,
        };
        let stats = conn.stats();
        let cc = recorder.snapshot();
        let sample = TimelineSample {
            transport: Transport::Quic,
            connection: index,
            t_us: now_us(),
            cwnd_bytes: Some(stats.path.cwnd),
            bytes_in_flight: Some(cc.in_flight),
            acked_bytes: Some(cc.acked_bytes),
            rtt_us: Some(stats.path.rtt.as_micros() as u64),
            rate_bps: None,
            congestion_event: cc.congestion_events > events,
            retransmits: Some(stats.path.lost_packets),
            impossible_rtt_samples: recorder.path_min_rtt().map(|_| cc.impossible_rtt_samples),
            busy_rtt_samples: recorder.path_min_rtt().map(|_| cc.busy_rtt_samples),
            first_loss_offset: cc.first_loss_offset,
            resent_bytes: None,
            udp_payload: Some(u32::from(stats.path.current_mtu)),
        };
        events = cc.congestion_events;
        if let Err(e) = w.write(&sample) {
            on_error(QuicConnectionError::Timeline(e));
            return;
        }
        if last {
            return;
        }
    }
}

async fn handle(
    req: Request<()>,
    stream: &mut H3ServerStream,
    routes: Arc<Routes>,
) -> Result<(), h3::error::StreamError> {
    let Routes {
        pattern,
        alt_svc,
        root,
        ..
    } = &*routes;
    let path = req.uri().path().to_string();
    let respond = |status: StatusCode| {
        Response::builder()
            .status(status)
            .header(http::header::ALT_SVC, alt_svc.clone())
    };
    match route(req.method().as_str(), &path, root.is_some()) {
        Route::Bytes(n) => {
            // A builder from valid parts only: status, a valid header value, a number.
            let head = respond(StatusCode::OK)
                .header(http::header::CONTENT_LENGTH, n)
                .body(())
                .expect("valid response head");
            stream.send_response(head).await?;
            let mut remaining = n;
            while remaining > 0 {
                // Every chunk but the last is whole, so each one starts at pattern phase 0.
                let k = remaining.min(pattern.len() as u64) as usize;
                stream.send_data(pattern.slice(..k)).await?;
                remaining -= k as u64;
            }
            stream.finish().await
        }
        Route::BadRequest(msg) => send_text(stream, respond(StatusCode::BAD_REQUEST), msg).await,
        Route::Upload => {
            let mut received: u64 = 0;
            while let Some(chunk) = stream.recv_data().await? {
                received += chunk.remaining() as u64;
            }
            send_text(stream, respond(StatusCode::OK), format!("{received}\n")).await
        }
        Route::File => {
            let root = root.clone();
            let found =
                tokio::task::spawn_blocking(move || root.map(|r| crate::files::lookup(&r, &path)))
                    .await;
            let (status, msg) = match found {
                Ok(Some(Lookup::Found {
                    file,
                    len,
                    content_type,
                })) => {
                    // A status, a valid header value, a number and a static type.
                    let head = respond(StatusCode::OK)
                        .header(http::header::CONTENT_TYPE, content_type)
                        .header(http::header::CONTENT_LENGTH, len)
                        .body(())
                        .expect("valid response head");
                    stream.send_response(head).await?;
                    // streamed: a large file never sits in memory whole
                    let mut file = tokio::fs::File::from_std(file);
                    let mut buf = vec![0; crate::files::CHUNK];
                    let mut remaining = len;
                    while remaining > 0 {
                        match crate::files::next_chunk(&mut file, remaining, &mut buf).await {
                            Ok(chunk) if chunk.is_empty() => break,
                            Ok(chunk) => {
                                remaining -= chunk.len() as u64;
                                stream.send_data(chunk).await?;
                            }
                            Err(e) => {
                                log::warn!("reading a served file: {e}");
                                stream.stop_stream(h3::error::Code::H3_INTERNAL_ERROR);
                                return Ok(());
                            }
                        }
                    }
                    return stream.finish().await;
                }
                Ok(Some(Lookup::Forbidden)) => (StatusCode::FORBIDDEN, "forbidden\n"),
                _ => (StatusCode::NOT_FOUND, "not found\n"),
            };
            send_text(stream, respond(status), msg.into()).await
        }
        Route::NotFound => {
            send_text(stream, respond(StatusCode::NOT_FOUND), "not found\n".into()).await
        }
    }
}

async fn send_text(
    stream: &mut H3ServerStream,
    head: http::response::Builder,
    body: String,
) -> Result<(), h3::error::StreamError> {
    // A status, a valid header value and a static content type: always a valid head.
    let head = head
        .header(http::header::CONTENT_TYPE, "text/plain")
        .body(())
        .expect("valid response head");
    stream.send_response(head).await?;
    stream.send_data(Bytes::from(body)).await?;
    stream.finish().await
}

/// What [`get`] needs.
#[derive(Clone, Debug)]
pub struct QuicClientOptions {
    pub quic: QuicOptions,
    /// PEM certificates to trust (and nothing else).
    pub ca_pem: String,
    /// Key-exchange groups offered, in order (a key share is sent for the first only).
    pub groups: Vec<KxGroup>,
    /// One connection for every request instead of a new connection per request.
    pub reuse_connection: bool,
    /// Keep session tickets across this run's connections and send requests as 0-RTT when a
    /// ticket allows it.
    pub resume: bool,
    /// The emulated path's minimum RTT in microseconds: smaller RTT samples are impossible and
    /// counted.
    pub path_min_rtt_us: Option<u64>,
    /// A directory for one qlog file per connection (`client-N.sqlog`, N as in the records).
    pub qlog_dir: Option<PathBuf>,
    /// POST this many bytes of the pattern to every URL instead of a GET (to `/upload`, which
    /// answers with the count it received; a different count is an error).
    pub upload: Option<u64>,
}

/// What every connection of a client run shares: the trust anchors and, with resumption, one
/// ticket store (so later connections find the tickets of earlier ones).
pub struct ClientTls {
    /// One verifier for every connection: rustls resumes a session only under the verifier
    /// that checked it.
    verifier: Arc<rustls::client::WebPkiServerVerifier>,
    /// Likewise one (empty) client-certificate resolver.
    no_client_cert: Arc<dyn rustls::client::ResolvesClientCert>,
    store: Option<Arc<dyn rustls::client::ClientSessionStore>>,
}

pub fn client_tls(opts: &QuicClientOptions) -> Result<ClientTls, QuicError> {
    let mut roots = RootCertStore::empty();
    let mut any = false;
    for cert in CertificateDer::pem_slice_iter(opts.ca_pem.as_bytes()) {
        roots
            .add(cert.map_err(QuicError::CaPem)?)
            .map_err(QuicError::Tls)?;
        any = true;
    }
    if !any {
        return Err(QuicError::NoCaCertificate);
    }
    if opts.groups.is_empty() {
        return Err(QuicError::InvalidOption {
            field: "groups",
            value: "(none)".into(),
            allowed: KxGroup::ALL.map(KxGroup::name).join(", "),
        });
    }
    let store = opts.resume.then(|| {
        Arc::new(rustls::client::ClientSessionMemoryCache::new(256))
            as Arc<dyn rustls::client::ClientSessionStore>
    });
    let verifier = rustls::client::WebPkiServerVerifier::builder_with_provider(
        Arc::new(roots),
        logged_provider(&opts.groups, &Arc::default()),
    )
    .build()
    .map_err(|e| QuicError::Tls(rustls::Error::General(e.to_string())))?;
    let no_client_cert =
        rustls::ClientConfig::builder_with_provider(logged_provider(&opts.groups, &Arc::default()))
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(QuicError::Tls)?
            .with_webpki_verifier(verifier.clone())
            .with_no_client_auth()
            .client_auth_cert_resolver;
    let shared = ClientTls {
        verifier,
        no_client_cert,
        store,
    };
    // fail now, not at the first connection, if the options cannot make a configuration
    client_config(opts, &shared, &Arc::default(), ALPN_H3)?;
    Ok(shared)
}

/// The configuration of one connection: its own provider, so that its key shares (and with
/// them a HelloRetryRequest) are noted in `kx`.
pub fn client_config(
    opts: &QuicClientOptions,
    shared: &ClientTls,
    kx: &Arc<KxLog>,
    alpn: &[u8],
) -> Result<quinn::ClientConfig, QuicError> {
    let mut tls = rustls::ClientConfig::builder_with_provider(logged_provider(&opts.groups, kx))
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(QuicError::Tls)?
        .with_webpki_verifier(shared.verifier.clone())
        .with_no_client_auth();
    tls.client_auth_cert_resolver = shared.no_client_cert.clone();
    tls.alpn_protocols = vec![alpn.to_vec()];
    tls.key_log = crate::tls::key_log();
    match &shared.store {
        Some(store) => {
            tls.resumption = rustls::client::Resumption::store(store.clone());
            tls.enable_early_data = true;
        }
        None => tls.resumption = rustls::client::Resumption::disabled(),
    }
    let crypto = QuicClientConfig::try_from(tls).map_err(QuicError::NoInitialCipherSuite)?;
    let mut config = quinn::ClientConfig::new(Arc::new(crypto));
    config.transport_config(Arc::new(opts.quic.transport_config()?));
    Ok(config)
}

/// Why an HTTP/3 request failed; a record keeps it with its causes.
#[derive(Debug, thiserror::Error)]
pub enum RequestError {
    #[error(transparent)]
    Url(#[from] UrlError),
    #[error("opening a UDP socket")]
    Socket(#[source] std::io::Error),
    #[error("opening a QUIC endpoint")]
    Endpoint(#[source] std::io::Error),
    #[error(transparent)]
    Options(#[from] QuicError),
    #[error("connecting to {addr}")]
    Connect {
        addr: SocketAddr,
        #[source]
        source: quinn::ConnectError,
    },
    #[error("QUIC handshake with {addr}")]
    Handshake {
        addr: SocketAddr,
        #[source]
        source: quinn::ConnectionError,
    },
    #[error("HTTP/3 with {addr}")]
    Http3 {
        addr: SocketAddr,
        #[source]
        source: h3::error::ConnectionError,
    },
    #[error("building the request")]
    Request(#[source] http::Error),
    #[error("sending the request")]
    Send(#[source] h3::error::StreamError),
    #[error("sending the body after {sent} bytes")]
    SendBody {
        sent: u64,
        #[source]
        source: h3::error::StreamError,
    },
    #[error("receiving the response head")]
    ResponseHead(#[source] h3::error::StreamError),
    #[error("finishing the request: {finish}; receiving the response head")]
    FinishAndResponseHead {
        finish: h3::error::StreamError,
        #[source]
        source: h3::error::StreamError,
    },
    #[error("receiving the body after {received} bytes")]
    Body {
        received: u64,
        #[source]
        source: h3::error::StreamError,
    },
    #[error("body byte {offset} is {got}, the pattern says {expected}")]
    BodyMismatch { offset: u64, got: u8, expected: u8 },
    #[error("body has {got} bytes, /bytes/{expected} asked for {expected}")]
    BodyLength { expected: u64, got: u64 },
    #[error("uploaded {sent} bytes, the server answered {answer:?}")]
    UploadCount { sent: u64, answer: String },
}

/// Where a URL points: the name for TLS, the address to connect to.
pub struct Target {
    server_name: String,
    pub addr: SocketAddr,
    pub uri: Uri,
}

pub fn target(url: &str) -> Result<Target, RequestError> {
    let u = Url::parse_tls(url, "HTTP/3")?;
    let addr = u.resolve()?;
    Ok(Target {
        server_name: u.host,
        addr,
        uri: u.uri,
    })
}

/// An open HTTP/3 connection of the client.
pub struct ClientConn {
    conn: quinn::Connection,
    pub send: h3::client::SendRequest<h3_quinn::OpenStreams, Bytes>,
    driver: tokio::task::JoinHandle<()>,
    /// The name the connection was made for (TLS verified the certificate for it).
    server_name: String,
    pub handshake: Handshake,
    /// When the handshake completed, if the connection waited for it.
    pub handshake_done_us: Option<u64>,
    /// With 0-RTT: resolves to (0-RTT accepted, when the handshake completed).
    zero_rtt: Option<tokio::task::JoinHandle<(bool, u64)>>,
    /// What the connection's congestion controller saw, and its qlog.
    inst: Instrumented,
    /// The key shares its TLS handshake made.
    kx: Arc<KxLog>,
    /// The request sender of an HTTP/3 session the server refused as 0-RTT, kept until the
    /// connection closes: dropping h3's last sender of a session closes the QUIC connection
    /// under it, which the repeated request then runs on.
    refused_session: Option<h3::client::SendRequest<h3_quinn::OpenStreams, Bytes>>,
}

pub async fn connect(
    endpoint: &quinn::Endpoint,
    tls: &ClientTls,
    opts: &QuicClientOptions,
    t: &Target,
    index: u32,
) -> Result<ClientConn, RequestError> {
    let try_0rtt = opts.resume;
    // A configuration of its own, for a recorder of its own.
    let qlog = opts.qlog_dir.as_ref().map(|d| QlogTarget {
        path: d.join(format!("client-{index}.sqlog")),
        title: format!("quiclab get, QUIC connection {index} to {}", t.uri),
        vantage: Vantage::Client,
    });
    let inst = opts
        .quic
        .instrumented(opts.path_min_rtt_us.map(Duration::from_micros), qlog)?;
    let kx = Arc::new(KxLog::default());
    let mut config = client_config(opts, tls, &kx, ALPN_H3)?;
    config.transport_config(inst.transport.clone());
    let connecting = endpoint
        .connect_with(config, t.addr, &t.server_name)
        .map_err(|source| RequestError::Connect {
            addr: t.addr,
            source,
        })?;
    let mut handshake = Handshake::default();
    let (conn, zero_rtt) = if try_0rtt {
        match connecting.into_0rtt() {
            Ok((conn, accepted)) => {
                handshake.zero_rtt_attempted = true;
                let done = tokio::spawn(async move {
                    let ok = accepted.await;
                    (ok, now_us())
                });
                (conn, Some(done))
            }
            Err(connecting) => (
                connecting.await.map_err(|source| RequestError::Handshake {
                    addr: t.addr,
                    source,
                })?,
                None,
            ),
        }
    } else {
        (
            connecting.await.map_err(|source| RequestError::Handshake {
                addr: t.addr,
                source,
            })?,
            None,
        )
    };
    let handshake_done_us = zero_rtt.is_none().then(now_us);
    let (send, driver) = open_h3(&conn, t).await?;
    Ok(ClientConn {
        conn,
        send,
        driver,
        server_name: t.server_name.clone(),
        handshake,
        handshake_done_us,
        zero_rtt,
        inst,
        kx,
        refused_session: None,
    })
}

/// Starts HTTP/3 on `conn`: its request sender and the task driving its control streams.
async fn open_h3(
    conn: &quinn::Connection,
    t: &Target,
) -> Result<
    (
        h3::client::SendRequest<h3_quinn::OpenStreams, Bytes>,
        tokio::task::JoinHandle<()>,
    ),
    RequestError,
> {
    let (mut driver, send) = h3::client::new(h3_quinn::Connection::new(conn.clone()))
        .await
        .map_err(|source| RequestError::Http3 {
            addr: t.addr,
            source,
        })?;
    let driver = tokio::spawn(async move {
        let _ = std::future::poll_fn(|cx| driver.poll_close(cx)).await;
    });
    Ok((send, driver))
}

/// Sends one request on `c` (a GET, or a POST of `rec.sent_bytes` pattern bytes when that is
/// set) and receives the body, checking a `/bytes/N` body against the pattern and an upload's
/// answer against the count sent.
async fn fetch(
    c: &mut ClientConn,
    t: &Target,
    rec: &mut RequestRecord,
) -> Result<(), RequestError> {
    let upload = (rec.sent_bytes > 0).then_some(rec.sent_bytes);
    let req = match upload {
        Some(_) => Request::post(t.uri.clone()),
        None => Request::get(t.uri.clone()),
    }
    .body(())
    .map_err(RequestError::Request)?;
    let mut stream = c.send.send_request(req).await.map_err(RequestError::Send)?;
    if let Some(n) = upload {
        send_pattern(&mut stream, n).await?;
    }
    // A server may stop reading a request it has enough of, and the FIN then fails; a client
    // must not discard the response for that (RFC 9114, 4.1.2), so this only explains a response
    // that fails too.
    let finished = stream.finish().await;
    let response = stream
        .recv_response()
        .await
        .map_err(|source| match finished {
            Ok(()) => RequestError::ResponseHead(source),
            Err(finish) => RequestError::FinishAndResponseHead { finish, source },
        })?;
    rec.status = response.status().as_u16();
    let expected = crate::routes::expected_bytes(t.uri.path()).filter(|_| rec.status == 200);
    let mut mismatch: Option<RequestError> = None;
    let mut answer = Vec::new();
    while let Some(mut chunk) = stream
        .recv_data()
        .await
        .map_err(|source| RequestError::Body {
            received: rec.bytes,
            source,
        })?
    {
        if rec.first_byte_us.is_none() {
            rec.first_byte_us = Some(now_us());
        }
        while chunk.has_remaining() {
            let part = chunk.chunk();
            if expected.is_some() && mismatch.is_none() {
                mismatch = first_mismatch(rec.bytes, part).map(|m| RequestError::BodyMismatch {
                    offset: m.offset,
                    got: m.got,
                    expected: m.expected,
                });
            }
            if upload.is_some() && answer.len() < 64 {
                answer.extend_from_slice(&part[..part.len().min(64 - answer.len())]);
            }
            let n = part.len();
            rec.bytes += n as u64;
            chunk.advance(n);
        }
    }
    rec.last_byte_us = Some(now_us());
    if let Some(m) = mismatch {
        return Err(m);
    }
    if let Some(n) = expected
        && n != rec.bytes
    {
        return Err(RequestError::BodyLength {
            expected: n,
            got: rec.bytes,
        });
    }
    if let Some(sent) = upload.filter(|_| rec.status == 200) {
        // `/upload` answers with the count it received
        let text = String::from_utf8_lossy(&answer);
        if text.trim().parse::<u64>().ok() != Some(sent) {
            return Err(RequestError::UploadCount {
                sent,
                answer: text.trim().to_string(),
            });
        }
    }
    Ok(())
}

/// Sends `n` bytes of the pattern on a request stream: the frames of the body an HTTP/1.1 or
/// HTTP/2 client uploads ([`PatternBody`]), as slices of one shared chunk.
async fn send_pattern(stream: &mut H3ClientStream, n: u64) -> Result<(), RequestError> {
    let mut body = PatternBody::of_len(n);
    let mut sent = 0;
    while let Some(frame) = body.frame().await {
        // a pattern body yields data frames and never an error
        let Some(data) = frame.ok().and_then(|f| f.into_data().ok()) else {
            break;
        };
        let len = data.len() as u64;
        stream
            .send_data(data)
            .await
            .map_err(|source| RequestError::SendBody { sent, source })?;
        sent += len;
    }
    Ok(())
}

type H3ClientStream = h3::client::RequestStream<h3_quinn::BidiStream<Bytes>, Bytes>;

pub fn transport_stats(
    conn: &quinn::Connection,
    configured: QuicCongestion,
    recorder: &Recorder,
) -> TransportStats {
    let stats = conn.stats();
    let recorded = recorder.snapshot();
    let cc = QuicCongestion::of_connection(conn).unwrap_or(configured);
    TransportStats {
        congestion_control: Some(cc.name().to_string()),
        congestion_control_experimental: cc.experimental(),
        packets_lost: Some(stats.path.lost_packets),
        // The bytes of the packets lost: QUIC retransmits their frames, not the packets.
        bytes_retransmitted: Some(stats.path.lost_bytes),
        // The client's own stream is the request: a download's first loss is the server's to
        // see (its timeline has it).
        first_retransmit_offset: None,
        congestion_events: Some(stats.path.congestion_events),
        cwnd_final_bytes: Some(stats.path.cwnd),
        cwnd_peak_bytes: Some(recorded.peak_cwnd),
        min_rtt_us: Some(stats.path.min_rtt.as_micros() as u64),
        smoothed_rtt_us: Some(stats.path.rtt.as_micros() as u64),
        impossible_rtt_samples: recorder
            .path_min_rtt()
            .map(|_| recorded.impossible_rtt_samples),
        max_udp_payload: Some(u64::from(stats.path.current_mtu)),
    }
}

/// Fetches each URL over HTTP/3, in order, and returns one record per URL (a failure is a
/// record with `error` set). Errors in the options themselves fail the whole run.
///
/// `transport_stats` are the client's end of the connection (its congestion controller, the
/// packets it lost, its RTT estimate, its current UDP payload); for downloads the sender's
/// view is the server's timeline (see [`QuicServerOptions::timeline`]).
///
/// Handshake facts: `alpn` from the handshake; `zero_rtt_attempted` when a ticket allowed
/// sending the request as 0-RTT; `zero_rtt_accepted` when the server took it; `resumed` is
/// true when 0-RTT was accepted (quinn does not report a resumption without 0-RTT, and with
/// `resume` every resumed connection tries 0-RTT). The key-exchange group is not reported by
/// quinn and stays `None`.
pub async fn get(
    urls: &[String],
    opts: &QuicClientOptions,
) -> Result<Vec<RequestRecord>, QuicError> {
    let client = QuicClient::new(opts.clone())?;
    let reuse = opts.reuse_connection;
    Ok(Requests::new(client, reuse, opts.upload).run(urls).await)
}

/// quiclab's HTTP/3 client (quinn, h3): a [`Connector`] for the one request loop.
pub struct QuicClient {
    opts: QuicClientOptions,
    tls: ClientTls,
    /// One endpoint per address family, kept for the run so that resumption tickets and
    /// tokens stay with it.
    endpoints: Vec<quinn::Endpoint>,
}

impl QuicClient {
    /// Checks the options and builds the TLS configuration (with a fresh session store).
    pub fn new(opts: QuicClientOptions) -> Result<QuicClient, QuicError> {
        let tls = client_tls(&opts)?;
        Ok(QuicClient {
            opts,
            tls,
            endpoints: Vec::new(),
        })
    }
}

impl Connector for QuicClient {
    type Target = Target;
    type Conn = ClientConn;
    type Error = RequestError;

    fn http(&self) -> HttpVersion {
        HttpVersion::Http3
    }

    fn target(&self, url: &str) -> Result<Target, RequestError> {
        target(url)
    }

    fn can_reuse(&self, c: &ClientConn, t: &Target) -> bool {
        c.conn.remote_address() == t.addr
            && c.server_name == t.server_name
            && c.conn.close_reason().is_none()
    }

    async fn connect(
        &mut self,
        t: &Target,
        index: u32,
        _rec: &mut RequestRecord,
    ) -> Result<ClientConn, RequestError> {
        let endpoint = endpoint_for(&mut self.endpoints, t.addr, &self.opts.quic)?;
        connect(&endpoint, &self.tls, &self.opts, t, index).await
    }

    /// The request, then what the connection knows after it: when its handshake completed
    /// (with 0-RTT, whether the server took the early data), its TLS facts and its statistics.
    async fn fetch(
        &mut self,
        c: &mut ClientConn,
        t: &Target,
        rec: &mut RequestRecord,
    ) -> Result<(), RequestError> {
        let mut result = fetch(c, t, rec).await;
        if rec.new_connection {
            rec.handshake_done_us = c.handshake_done_us;
            if let Some(done) = c.zero_rtt.take()
                && let Ok((accepted, at)) = done.await
            {
                c.handshake.zero_rtt_accepted = accepted;
                c.handshake.resumed = accepted;
                rec.handshake_done_us = Some(at);
                if !accepted && result.is_err() {
                    // The server refused the early data (e.g. it no longer knows the ticket):
                    // what was sent in 0-RTT, HTTP/3's control streams included, is lost, but
                    // the connection itself is up. Start HTTP/3 again and repeat the request;
                    // its times still count from the first attempt, as a browser's would.
                    result = retry_after_0rtt_rejected(c, t, rec).await;
                }
            }
        }
        c.handshake.alpn = c
            .conn
            .handshake_data()
            .and_then(|d| d.downcast::<quinn::crypto::rustls::HandshakeData>().ok())
            .and_then(|d| d.protocol)
            .map(|p| String::from_utf8_lossy(&p).into_owned());
        rec.handshake = c.handshake.clone();
        rec.handshake.hello_retry = c.kx.hello_retry();
        rec.handshake.group = c.kx.group();
        rec.transport_stats = transport_stats(&c.conn, self.opts.quic.congestion, &c.inst.recorder);
        result
    }

    async fn close(&mut self, c: ClientConn) {
        close(c).await;
    }

    /// Every connection was closed by [`close`], which saw its CONNECTION_CLOSE leave; the
    /// draining period after it (three PTOs) concerns nobody once the results are in, and would
    /// add hundreds of ms to every run.
    async fn finish(&mut self) {
        self.endpoints.clear();
    }
}

/// The longest a closing connection waits for its CONNECTION_CLOSE to leave.
pub const CLOSE_LINGER: Duration = Duration::from_millis(10);

/// Closes `conn` and waits until the datagram carrying its CONNECTION_CLOSE has been sent (it
/// is the connection's next one, normally within a millisecond), at most [`CLOSE_LINGER`]: the
/// peer learns at once that the connection is over, and nobody waits out the draining period.
pub async fn close_sent(conn: &quinn::Connection, code: quinn::VarInt, reason: &[u8]) {
    let sent = conn.stats().udp_tx.datagrams;
    conn.close(code, reason);
    let until = tokio::time::Instant::now() + CLOSE_LINGER;
    while conn.stats().udp_tx.datagrams == sent && tokio::time::Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

async fn retry_after_0rtt_rejected(
    c: &mut ClientConn,
    t: &Target,
    rec: &mut RequestRecord,
) -> Result<(), RequestError> {
    c.driver.abort();
    let (send, driver) = open_h3(&c.conn, t).await?;
    c.refused_session = Some(std::mem::replace(&mut c.send, send));
    c.driver = driver;
    (rec.status, rec.bytes, rec.first_byte_us, rec.last_byte_us) = (0, 0, None, None);
    fetch(c, t, rec).await
}

pub async fn close(c: ClientConn) {
    close_sent(&c.conn, H3_NO_ERROR, b"done").await;
    c.driver.abort();
    // The qlog gets the close too when it is flushed after it.
    c.conn.closed().await;
    if let Err(e) = c.inst.flush() {
        log::warn!("writing a qlog file: {e}");
    }
}

/// The client endpoint for the address family of `addr` (one per family per run, so that
/// resumption tickets and tokens stay with the endpoint).
pub fn endpoint_for(
    endpoints: &mut Vec<quinn::Endpoint>,
    addr: SocketAddr,
    quic: &QuicOptions,
) -> Result<quinn::Endpoint, RequestError> {
    if let Some(e) = endpoints
        .iter()
        .find(|e| e.local_addr().is_ok_and(|l| l.is_ipv6() == addr.is_ipv6()))
    {
        return Ok(e.clone());
    }
    let bind: SocketAddr = if addr.is_ipv6() {
        (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
    } else {
        (std::net::Ipv4Addr::UNSPECIFIED, 0).into()
    };
    let socket = std::net::UdpSocket::bind(bind).map_err(RequestError::Socket)?;
    let e = socket::open(socket, quic.max_udp_payload, quic.endpoint_config(), None)
        .map_err(RequestError::Endpoint)?;
    endpoints.push(e.clone());
    Ok(e)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_are_validated_with_field_value_and_allowed() {
        QuicOptions::default().validate().unwrap();
        let e = "vegas".parse::<QuicCongestion>().unwrap_err();
        assert_eq!(
            e.to_string(),
            "QUIC option congestion = vegas is not allowed (allowed: newreno, cubic, bbr)"
        );
        // jumbo payloads are fine with GSO on: the socket caps the batch (see `socket`)
        let o = QuicOptions {
            max_udp_payload: 8952,
            ..Default::default()
        };
        o.validate().unwrap();
        let e = QuicOptions {
            max_udp_payload: 65_528,
            ..o
        }
        .validate()
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("max_udp_payload = 65528") && e.contains("1200 to 65527"),
            "{e}"
        );
        let e = QuicOptions {
            initial_mtu: 1500,
            ..Default::default()
        }
        .validate()
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "QUIC option initial_mtu = 1500 is not allowed (allowed: 1200 to max_udp_payload (1452))"
        );
        let e = QuicOptions {
            stream_receive_window: 0,
            ..Default::default()
        }
        .validate()
        .unwrap_err();
        assert!(
            e.to_string()
                .starts_with("QUIC option stream_receive_window = 0"),
            "{e}"
        );
        assert_eq!(parse_duration_us("x", "100ms").unwrap(), 100_000);
        assert_eq!(parse_duration_us("x", "1.5s").unwrap(), 1_500_000);
        assert_eq!(parse_duration_us("x", "40").unwrap(), 40_000);
        assert!(parse_duration_us("x", "fast").is_err());
        assert!(parse_on_off("gso", "maybe").is_err());
        let json = serde_json::to_string(&QuicOptions::default()).unwrap();
        let back: QuicOptions = serde_json::from_str(&json).unwrap();
        assert_eq!(back, QuicOptions::default());
        let partial: QuicOptions = serde_json::from_str(r#"{"congestion":"bbr"}"#).unwrap();
        assert_eq!(partial.congestion, QuicCongestion::Bbr);
    }

    /// A QUIC server of `id` with default options on an ephemeral loopback port (started inside
    /// a tokio runtime): its address, what stops it, and its task.
    fn loopback_server(
        id: &crate::tls::Identity,
    ) -> (
        SocketAddr,
        tokio::sync::oneshot::Sender<()>,
        tokio::task::JoinHandle<ServeStats>,
    ) {
        let tcp = crate::tls::server_config(id, &[KxGroup::X25519]).unwrap();
        let server = QuicServer::bind(QuicServerOptions {
            listen: "127.0.0.1:0".parse().unwrap(),
            tls: Arc::new(server_tls(&tcp)),
            quic: QuicOptions::default(),
            timeline: None,
            path_min_rtt_us: None,
            qlog_dir: None,
            root: None,
            service: None,
        })
        .unwrap();
        let addr = server.local_addr();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let served = tokio::spawn(server.run_until(
            async {
                let _ = stop_rx.await;
            },
            |e| eprintln!("server error: {e}"),
        ));
        (addr, stop_tx, served)
    }

    /// RFC 9114 7.2.8: an HTTP/2 frame type (here PING, 0x06) on a request stream, first or
    /// after the request's HEADERS, is a connection error of type H3_FRAME_UNEXPECTED.
    #[test]
    fn a_reserved_http2_frame_on_a_request_stream_closes_the_connection_as_unexpected() {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let id = crate::tls::Identity::self_signed().unwrap();
            let (addr, stop_tx, served) = loopback_server(&id);
            let opts = QuicClientOptions {
                quic: QuicOptions::default(),
                ca_pem: id.chain_pem().to_string(),
                groups: vec![KxGroup::X25519],
                reuse_connection: false,
                resume: false,
                path_min_rtt_us: None,
                qlog_dir: None,
                upload: None,
            };
            let tls = client_tls(&opts).unwrap();
            let endpoint = quinn::Endpoint::client("127.0.0.1:0".parse().unwrap()).unwrap();
            // a GET of /bytes/1 as QPACK with the static table only: required insert count 0,
            // base 0, :method GET (17), :scheme https (23), :authority "x" (0, a literal), and
            // :path "/bytes/1" (1, a literal)
            let mut headers = vec![0x00, 0x00, 0xd1, 0xd7, 0x50, 0x01, b'x', 0x51, 0x08];
            headers.extend_from_slice(b"/bytes/1");
            let mut request = vec![0x01, headers.len() as u8];
            request.extend_from_slice(&headers);
            let ping = [0x06u8, 0x00];
            for (what, frames) in [
                ("first", ping.to_vec()),
                (
                    "after the headers",
                    [request.clone(), ping.to_vec()].concat(),
                ),
            ] {
                let kx = Arc::new(KxLog::default());
                let config = client_config(&opts, &tls, &kx, ALPN_H3).unwrap();
                let conn = endpoint
                    .connect_with(config, addr, "localhost")
                    .unwrap()
                    .await
                    .unwrap();
                let (mut send, _recv) = conn.open_bi().await.unwrap();
                send.write_all(&frames).await.unwrap();
                send.finish().unwrap();
                let closed = tokio::time::timeout(Duration::from_secs(5), conn.closed())
                    .await
                    .unwrap_or_else(|_| panic!("{what}: the connection stayed open"));
                match closed {
                    quinn::ConnectionError::ApplicationClosed(c) => assert_eq!(
                        c.error_code.into_inner(),
                        0x105,
                        "{what}: H3_FRAME_UNEXPECTED, not {c:?}"
                    ),
                    other => panic!("{what}: {other}"),
                }
            }
            stop_tx.send(()).unwrap();
            served.await.unwrap();
        });
    }

    #[test]
    fn loopback_download_and_zero_rtt_resumption() {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let id = crate::tls::Identity::self_signed().unwrap();
            let (addr, stop_tx, served) = loopback_server(&id);
            let port = addr.port();
            let urls: Vec<String> = [100_000, 1, 0, 300_000]
                .iter()
                .map(|n| format!("https://127.0.0.1:{port}/bytes/{n}"))
                .chain([format!("https://127.0.0.1:{port}/nothing")])
                .collect();
            let opts = QuicClientOptions {
                quic: QuicOptions {
                    congestion: QuicCongestion::NewReno,
                    ..Default::default()
                },
                ca_pem: id.chain_pem().to_string(),
                groups: vec![KxGroup::X25519],
                reuse_connection: false,
                resume: true,
                path_min_rtt_us: None,
                qlog_dir: None,
                upload: None,
            };
            let recs = get(&urls, &opts).await.unwrap();
            for (r, n) in recs.iter().zip([100_000, 1, 0, 300_000]) {
                assert_eq!(r.error, None, "{r:?}");
                assert_eq!((r.status, r.bytes), (200, n));
                assert_eq!(r.handshake.alpn.as_deref(), Some("h3"));
                assert_eq!(
                    r.transport_stats.congestion_control.as_deref(),
                    Some("newreno")
                );
            }
            assert_eq!(recs[4].status, 404);
            assert!(!recs[0].handshake.zero_rtt_attempted);
            assert!(recs[1].handshake.zero_rtt_attempted && recs[1].handshake.zero_rtt_accepted);
            assert_eq!(
                recs.iter().map(|r| r.connection).collect::<Vec<_>>(),
                [0, 1, 2, 3, 4]
            );
            // uploads: every byte reaches /upload, whose answer counts them
            let upload = QuicClientOptions {
                upload: Some(300_000),
                ..opts.clone()
            };
            let up = get(&[format!("https://127.0.0.1:{port}/upload")], &upload)
                .await
                .unwrap();
            assert_eq!(up[0].error, None, "{:?}", up[0]);
            assert_eq!((up[0].method.as_str(), up[0].status), ("POST", 200));
            assert_eq!(up[0].sent_bytes, 300_000);
            // a path that counts nothing answers with no count: refused by the check
            let wrong = get(&[format!("https://127.0.0.1:{port}/bytes/10")], &upload)
                .await
                .unwrap();
            assert!(
                wrong[0].status != 200 || wrong[0].error.is_some(),
                "{:?}",
                wrong[0]
            );

            // A second server (its own session cache) behind the same name: the ticket from the
            // first is offered, 0-RTT is refused, and the request is repeated in 1-RTT.
            let (other_addr, other_stop, other_served) = loopback_server(&id);
            let other_port = other_addr.port();
            let urls2 = [
                format!("https://127.0.0.1:{port}/bytes/1000"),
                format!("https://127.0.0.1:{other_port}/bytes/70000"),
            ];
            let recs = get(&urls2, &opts).await.unwrap();
            assert_eq!(recs[1].error, None, "{:?}", recs[1]);
            assert_eq!(recs[1].bytes, 70_000);
            assert!(recs[1].handshake.zero_rtt_attempted, "{:?}", recs[1]);
            assert!(!recs[1].handshake.zero_rtt_accepted && !recs[1].handshake.resumed);
            other_stop.send(()).unwrap();
            other_served.await.unwrap();

            let recs = get(
                &urls[..2],
                &QuicClientOptions {
                    reuse_connection: true,
                    resume: false,
                    ..opts
                },
            )
            .await
            .unwrap();
            assert_eq!(recs[0].error, None);
            assert_eq!(recs[1].error, None);
            assert_eq!((recs[1].connection, recs[1].new_connection), (0, false));
            stop_tx.send(()).unwrap();
            let stats = served.await.unwrap();
            // five downloads, two uploads, the 0-RTT pair
            assert_eq!((stats.connections, stats.failed), (9, 0));
        });
    }
}
