//! The network-coded transport ([`quiclab_coded`]: RaptorQ-coded data over TLS 1.3-protected
//! UDP, goodput-following rate control) as a third stack beside TCP and QUIC: a server with the
//! routes of [`crate::routes`] and a client ([`CodedClient`], a `Connector` of the one request
//! loop) that fills the same [`RequestRecord`]s, so every workload runs over it unchanged.
//!
//! The protocol itself (sans-IO, virtual time) is `quiclab-coded`; this crate is only its
//! adapter to sockets and to quiclab's routes and records. Must never: know about plans, trials
//! or the store; print.
//!
//! Contract:
//! - **Framing.** Each request is one stream of a coded connection, opened by the client: a
//!   head line `METHOD SP PATH LF` (e.g. `GET /bytes/1000\n`), then the request body, to the end
//!   of the stream. The answer travels on the same stream: a status line of three digits and
//!   `LF` (`200\n`), then the body, to the end of the stream. This is not HTTP (no headers, no
//!   content length): the end of a body is the end of its stream. Records call it
//!   [`HttpVersion::Coded`].
//! - **Routes** (as over TCP and QUIC): `GET /bytes/N` answers with exactly N bytes of the
//!   pattern [`crate::routes::pattern_byte`] (N at most [`crate::routes::MAX_BYTES`]), written to
//!   the connection as it drains, so no body is held whole; `POST /upload` reads the body and
//!   answers with its length in bytes; other `GET` paths are files under the server's root if
//!   it has one; anything else is 404, a malformed head 400.
//! - **Timeline** ([`CodedServerOptions::timeline`]): per connection (numbered from 0 in order
//!   of arrival) a [`TimelineSample`] every [`TIMELINE_INTERVAL`] while it is open and one when
//!   it closes, from the sender's own counters: `acked_bytes` = bytes of its packets the client
//!   reported receiving (whole datagrams, repair symbols included: QUIC's count), `bytes_in_flight`,
//!   `cwnd_bytes` = the in-flight cap of the rate control, `rate_bps` = the pacing rate,
//!   `rtt_us` = the smoothed RTT, `retransmits` = repair symbols sent (with blocks, after
//!   feedback and on the probe timer: every packet that repeats information), and
//!   `congestion_event` on a sample that follows a congestion event of the rate control.
//! - **No resumption, no 0-RTT.** The core has neither: every connection makes a full
//!   handshake (data flows after one round trip), and records say `resumed = false`,
//!   `zero_rtt_attempted = false`.
//! - **Blocking.** Both ends run on the calling thread through the core's UDP driver
//!   ([`quiclab_coded::udp`]); nothing here spawns. The server stops when its stop flag is set
//!   (within the driver's longest wait, 20 ms).

use std::collections::{BTreeMap, HashMap};
use std::net::{SocketAddr, UdpSocket};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

pub use quiclab_coded::Config;
use quiclab_coded::udp::{Clock, run_connection, run_endpoint};
use quiclab_coded::{ConnectionError, Endpoint, Event};
use rustls::RootCertStore;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;

use quiclab_endpoint::{ServeStats, files, requests, routes, timeline, tls, url};

use crate::files::Lookup;
use crate::requests::{Connector, Requests};
use crate::routes::{Route, fill_pattern};
use crate::timeline::{TIMELINE_INTERVAL, TimelineWriter};
use crate::tls::{KxGroup, KxLog, logged_provider};
use crate::url::{Url, UrlError};
use quiclab_model::record::{
    Handshake, HttpVersion, RequestRecord, TimelineSample, Transport, TransportStats, now_us,
};

/// The name records and timelines give the rate control of the coded transport.
pub const RATE_CONTROL: &str = "goodput-following";

/// A body is written to the connection in pieces of this size...
const FEED_CHUNK: usize = 256 * 1024;
/// ...while less than this is waiting to be put in blocks.
const FEED_LOW: u64 = 2 * 1024 * 1024;
/// How long a stopping server waits for its open connections to close.
pub const STOP_LINGER: Duration = Duration::from_millis(500);
/// The longest request head a server reads before answering 400.
const MAX_HEAD: usize = 8 * 1024;

/// Errors in a coded server's or client's set-up (a failed request is a record, not an error).
#[derive(Debug, thiserror::Error)]
pub enum CodedError {
    #[error("binding UDP {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("reading trusted certificates (PEM): {0}")]
    CaPem(rustls::pki_types::pem::Error),
    #[error("no certificate found in the trusted certificates (PEM)")]
    NoCaCertificate,
    #[error("no key-exchange group given; allowed: x25519, p256, p384")]
    NoGroups,
    #[error("TLS configuration: {0}")]
    Tls(rustls::Error),
    #[error("coded transport configuration: {0}")]
    Config(#[from] quiclab_coded::ConfigError),
    #[error("the coded server's socket: {0}")]
    Io(#[from] std::io::Error),
}

/// Why a request over the coded transport failed; a record keeps it with its causes.
#[derive(Debug, thiserror::Error)]
pub enum RequestError {
    #[error(transparent)]
    Url(#[from] UrlError),
    #[error(transparent)]
    Setup(#[from] CodedError),
    #[error("binding UDP {addr}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("connecting UDP to {addr}")]
    ConnectUdp {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Connection(#[from] quiclab_coded::ConnectionError),
    #[error(transparent)]
    Stream(#[from] quiclab_coded::StreamError),
    #[error("connection closed: {0}")]
    Closed(quiclab_coded::ConnectionError),
    #[error("the answer ended before its status line")]
    NoStatusLine,
    #[error("bad status line {0:?}")]
    BadStatusLine(String),
    #[error("the UDP socket")]
    Socket(#[source] std::io::Error),
    #[error("the answer did not complete")]
    Incomplete,
    #[error("body of {got} bytes; expected {expected}")]
    BodyLength { expected: u64, got: u64 },
    #[error("body byte {offset} is {got}, the pattern has {expected}")]
    BodyMismatch { offset: u64, got: u8, expected: u8 },
}

/// The server configuration of the coded transport from the TCP server's (same certificate,
/// groups and key log): ALPN [`quiclab_coded::crypto::ALPN`] only, no early data (the
/// protocol has no 0-RTT; QUIC-style handshakes require 0 here).
pub fn server_tls(tcp_config: &rustls::ServerConfig) -> rustls::ServerConfig {
    crate::tls::udp_server_config(tcp_config, quiclab_coded::crypto::ALPN, 0)
}

/// What a coded server needs to start.
pub struct CodedServerOptions {
    pub listen: SocketAddr,
    /// From [`server_tls`].
    pub tls: Arc<rustls::ServerConfig>,
    pub config: Config,
    /// Where to write each connection's timeline (see the module documentation).
    pub timeline: Option<TimelineWriter>,
    /// Serve other GET paths as files under this directory (see [`crate::files`]).
    pub root: Option<PathBuf>,
}

/// A bound coded server.
pub struct CodedServer {
    socket: UdpSocket,
    local_addr: SocketAddr,
    opts: CodedServerOptions,
}

/// One request being answered.
enum Exchange {
    /// Reading the head line.
    Head(Vec<u8>),
    /// `POST /upload`: counting the body until the stream ends.
    Upload { received: u64 },
    /// `GET /bytes/N`: `remaining` pattern bytes from `offset` still to write.
    Pattern { offset: u64, remaining: u64 },
    /// A static file: `remaining` bytes still to read from it and write (in chunks, as the
    /// pattern: a large file never sits in memory whole).
    File { file: std::fs::File, remaining: u64 },
    /// Answered; anything more the client sends on the stream is ignored.
    Done,
}

struct ServerConn {
    index: u32,
    exchanges: HashMap<u64, Exchange>,
    last_sample: Option<Duration>,
    congestion_events: u64,
}

impl CodedServer {
    /// Binds the UDP socket (an IPv6 unspecified address also accepts IPv4) and checks the
    /// configuration.
    pub fn bind(opts: CodedServerOptions) -> Result<CodedServer, CodedError> {
        opts.config.validate()?;
        let socket = UdpSocket::bind(opts.listen).map_err(|source| CodedError::Bind {
            addr: opts.listen,
            source,
        })?;
        let local_addr = socket.local_addr()?;
        Ok(CodedServer {
            socket,
            local_addr,
            opts,
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Serves until `stop` is set, then waits up to [`STOP_LINGER`] for open connections to
    /// close (their clients' last packets may be on the way); returns the counts. Connections
    /// still open then are dropped, their timelines ending with a sample taken at that moment.
    pub fn run_until(self, stop: &AtomicBool) -> Result<ServeStats, CodedError> {
        let CodedServer { socket, opts, .. } = self;
        let clock = Clock::start();
        let mut endpoint = Endpoint::server(opts.config.clone(), opts.tls.clone());
        let mut conns: BTreeMap<quiclab_coded::Handle, ServerConn> = BTreeMap::new();
        let mut stats = ServeStats::default();
        let mut next_index = 0u32;
        let mut stopping_since: Option<Duration> = None;
        let result = run_endpoint(&socket, &mut endpoint, &clock, Duration::MAX, |ep| {
            let now = clock.now();
            for h in ep.handles().collect::<Vec<_>>() {
                let state = conns.entry(h).or_insert_with(|| {
                    stats.connections += 1;
                    next_index += 1;
                    ServerConn {
                        index: next_index - 1,
                        exchanges: HashMap::new(),
                        last_sample: None,
                        congestion_events: 0,
                    }
                });
                let conn = ep.connection(h).expect("listed handles exist");
                serve_connection(conn, state, opts.root.as_ref());
                let closed = conn.is_closed();
                if closed
                    && !matches!(
                        conn.close_reason(),
                        Some(
                            ConnectionError::PeerClosed { code: 0, .. }
                                | ConnectionError::LocallyClosed { .. }
                        )
                    )
                {
                    stats.failed += 1;
                }
                if let Some(w) = &opts.timeline
                    && (closed
                        || state
                            .last_sample
                            .is_none_or(|t| now >= t + TIMELINE_INTERVAL))
                {
                    state.last_sample = Some(now);
                    let _ = w.write(&sample(conn, state));
                }
                if closed {
                    conns.remove(&h);
                }
            }
            // connections the endpoint dropped without showing them closed
            conns.retain(|h, _| ep.connection(*h).is_some());
            if !stop.load(Ordering::Relaxed) {
                return true;
            }
            // Stopping: the clients' last packets (their final report and CLOSE) may still be
            // on the way; wait for them a little, then end each open timeline with a sample.
            let since = *stopping_since.get_or_insert(now);
            if !conns.is_empty() && now < since + STOP_LINGER {
                return true;
            }
            if let Some(w) = &opts.timeline {
                for (h, state) in conns.iter_mut() {
                    if let Some(conn) = ep.connection(*h) {
                        let _ = w.write(&sample(conn, state));
                    }
                }
            }
            false
        });
        if let Some(w) = &opts.timeline {
            let _ = w.flush();
        }
        result?;
        Ok(stats)
    }
}

/// The sender's view of a connection now.
fn sample(conn: &quiclab_coded::Connection, state: &mut ServerConn) -> TimelineSample {
    let s = conn.stats();
    let events = conn.rate_stats().congestion_events;
    let congestion_event = events > state.congestion_events;
    state.congestion_events = events;
    TimelineSample {
        transport: Transport::Coded,
        connection: state.index,
        t_us: now_us(),
        cwnd_bytes: Some(conn.inflight_cap()),
        bytes_in_flight: Some(conn.bytes_in_flight()),
        acked_bytes: Some(s.peer_received_bytes),
        rtt_us: Some(conn.srtt().as_micros() as u64),
        rate_bps: Some((conn.pacing_rate() * 8.0) as u64),
        congestion_event,
        retransmits: Some(s.repair_proactive + s.repair_reactive + s.probes),
        impossible_rtt_samples: None,
        busy_rtt_samples: None,
        first_loss_offset: None,
        resent_bytes: None,
        udp_payload: None,
        flow_blocked: None,
    }
}

/// Reads what the client sent and answers, then feeds pattern bodies while the connection
/// drains.
fn serve_connection(
    conn: &mut quiclab_coded::Connection,
    state: &mut ServerConn,
    root: Option<&PathBuf>,
) {
    while let Some(ev) = conn.poll_event() {
        let Event::StreamReadable(id) = ev else {
            continue;
        };
        let Ok((data, fin)) = conn.read(id) else {
            continue;
        };
        let ex = state
            .exchanges
            .entry(id)
            .or_insert_with(|| Exchange::Head(Vec::new()));
        let rest = match ex {
            Exchange::Head(head) => {
                head.extend_from_slice(&data);
                let Some(end) = head
                    .iter()
                    .position(|&b| b == b'\n')
                    .or(fin.then_some(head.len()))
                else {
                    if head.len() > MAX_HEAD {
                        answer(conn, id, 400, b"request head too long\n");
                        *ex = Exchange::Done;
                    }
                    continue;
                };
                let line = String::from_utf8_lossy(&head[..end]).trim_end().to_string();
                let body = head.get(end + 1..).unwrap_or_default().len() as u64;
                *ex = route(conn, id, &line, root);
                body
            }
            _ => data.len() as u64,
        };
        if let Exchange::Upload { received } = ex {
            *received += rest;
            if fin {
                answer(conn, id, 200, format!("{received}\n").as_bytes());
                *ex = Exchange::Done;
            }
        }
    }
    for (&id, ex) in state.exchanges.iter_mut() {
        let remaining = match ex {
            Exchange::Pattern { remaining, .. } | Exchange::File { remaining, .. } => remaining,
            _ => continue,
        };
        let mut left = *remaining;
        while left > 0 && conn.unacknowledged().0 < FEED_LOW {
            let n = left.min(FEED_CHUNK as u64) as usize;
            let mut buf = vec![0u8; n];
            let n = match ex {
                Exchange::Pattern { offset, .. } => {
                    fill_pattern(*offset, &mut buf);
                    *offset += n as u64;
                    n
                }
                // a read error or a file that shrank ends the answer early
                Exchange::File { file, .. } => std::io::Read::read(file, &mut buf).unwrap_or(0),
                _ => 0,
            };
            if n == 0 || conn.write(id, &buf[..n]).is_err() {
                left = 0;
                break;
            }
            left -= n as u64;
        }
        if let Exchange::Pattern { remaining, .. } | Exchange::File { remaining, .. } = ex {
            *remaining = left;
        }
        if left == 0 {
            let _ = conn.finish(id);
            *ex = Exchange::Done;
        }
    }
    state
        .exchanges
        .retain(|_, ex| !matches!(ex, Exchange::Done));
}

/// Starts the answer to a request head.
fn route(
    conn: &mut quiclab_coded::Connection,
    id: u64,
    line: &str,
    root: Option<&PathBuf>,
) -> Exchange {
    let (method, target) = line.split_once(' ').unwrap_or((line, ""));
    let path = target.split('?').next().unwrap_or_default();
    if method != "GET" && method != "POST" {
        // not a request head of this framing at all
        return answer(
            conn,
            id,
            400,
            format!("bad request head {line:?}; allowed: GET PATH or POST /upload\n").as_bytes(),
        );
    }
    match crate::routes::route(method, path, root.is_some()) {
        Route::Bytes(n) => {
            let _ = conn.write(id, b"200\n");
            Exchange::Pattern {
                offset: 0,
                remaining: n,
            }
        }
        Route::BadRequest(msg) => answer(conn, id, 400, msg.as_bytes()),
        Route::Upload => Exchange::Upload { received: 0 },
        Route::File => match root {
            Some(root) if path.starts_with('/') => match crate::files::lookup(root, path) {
                Lookup::Found { file, len, .. } => {
                    let _ = conn.write(id, b"200\n");
                    Exchange::File {
                        file,
                        remaining: len,
                    }
                }
                Lookup::Forbidden => answer(conn, id, 403, b"forbidden\n"),
                Lookup::NotFound => answer(conn, id, 404, b"not found\n"),
            },
            _ => answer(conn, id, 404, b"not found\n"),
        },
        Route::NotFound => answer(conn, id, 404, b"not found\n"),
    }
}

/// A whole answer: status line, body, end of stream.
fn answer(conn: &mut quiclab_coded::Connection, id: u64, status: u16, body: &[u8]) -> Exchange {
    let _ = conn.write(id, format!("{status}\n").as_bytes());
    let _ = conn.write(id, body);
    let _ = conn.finish(id);
    Exchange::Done
}

/// What the client needs.
#[derive(Debug, Clone)]
pub struct CodedClientOptions {
    /// PEM certificates to trust (the only trust anchors).
    pub ca_pem: String,
    /// Key-exchange groups in order of preference; a key share for the first only.
    pub groups: Vec<KxGroup>,
    /// One connection per server for all requests (true) or one per request.
    pub reuse_connection: bool,
    pub config: Config,
}

/// An open connection of the client.
pub struct ClientConn {
    socket: UdpSocket,
    conn: quiclab_coded::Connection,
    addr: SocketAddr,
    server_name: String,
    kx: Arc<KxLog>,
    handshake_done_us: Option<u64>,
}

pub struct Target {
    server_name: String,
    addr: SocketAddr,
    path: String,
}

fn target(url: &str) -> Result<Target, RequestError> {
    let u = Url::parse_tls(url, "the coded transport")?;
    let addr = u.resolve()?;
    Ok(Target {
        server_name: u.host,
        addr,
        path: u.path,
    })
}

/// The verifier and trust anchors shared by every connection of a run.
struct ClientTls {
    verifier: Arc<rustls::client::WebPkiServerVerifier>,
}

fn client_tls(opts: &CodedClientOptions) -> Result<ClientTls, CodedError> {
    let mut roots = RootCertStore::empty();
    let mut any = false;
    for cert in CertificateDer::pem_slice_iter(opts.ca_pem.as_bytes()) {
        roots
            .add(cert.map_err(CodedError::CaPem)?)
            .map_err(CodedError::Tls)?;
        any = true;
    }
    if !any {
        return Err(CodedError::NoCaCertificate);
    }
    if opts.groups.is_empty() {
        return Err(CodedError::NoGroups);
    }
    let verifier = rustls::client::WebPkiServerVerifier::builder_with_provider(
        Arc::new(roots),
        logged_provider(&opts.groups, &Arc::default()),
    )
    .build()
    .map_err(|e| CodedError::Tls(rustls::Error::General(e.to_string())))?;
    let shared = ClientTls { verifier };
    client_config(opts, &shared, &Arc::default())?;
    Ok(shared)
}

/// One connection's TLS configuration, with its own provider so that its key shares (and a
/// HelloRetryRequest) are noted in `kx`; no resumption.
fn client_config(
    opts: &CodedClientOptions,
    shared: &ClientTls,
    kx: &Arc<KxLog>,
) -> Result<Arc<rustls::ClientConfig>, CodedError> {
    let mut tls = rustls::ClientConfig::builder_with_provider(logged_provider(&opts.groups, kx))
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(CodedError::Tls)?
        .with_webpki_verifier(shared.verifier.clone())
        .with_no_client_auth();
    tls.alpn_protocols = vec![quiclab_coded::crypto::ALPN.to_vec()];
    tls.key_log = crate::tls::key_log();
    tls.resumption = rustls::client::Resumption::disabled();
    Ok(Arc::new(tls))
}

fn connect(
    opts: &CodedClientOptions,
    shared: &ClientTls,
    clock: &Clock,
    t: &Target,
) -> Result<ClientConn, RequestError> {
    let kx: Arc<KxLog> = Arc::default();
    let tls = client_config(opts, shared, &kx)?;
    let local: SocketAddr = if t.addr.is_ipv6() {
        "[::]:0".parse().expect("a valid address")
    } else {
        "0.0.0.0:0".parse().expect("a valid address")
    };
    let socket = UdpSocket::bind(local).map_err(|source| RequestError::Bind {
        addr: local,
        source,
    })?;
    socket
        .connect(t.addr)
        .map_err(|source| RequestError::ConnectUdp {
            addr: t.addr,
            source,
        })?;
    let conn =
        quiclab_coded::Connection::connect(clock.now(), opts.config.clone(), tls, &t.server_name)?;
    Ok(ClientConn {
        socket,
        conn,
        addr: t.addr,
        server_name: t.server_name.clone(),
        kx,
        handshake_done_us: None,
    })
}

/// Sends the CLOSE and lets it leave.
fn close(mut c: ClientConn, clock: &Clock) {
    c.conn.close(0);
    let _ = run_connection(
        &c.socket,
        &mut c.conn,
        clock,
        clock.now() + Duration::from_secs(1),
        |_| true,
    );
}

/// Fetches each URL over the coded transport, in order, and returns one record per URL (a
/// failure is a record with `error` set). Errors in the options fail the whole run.
///
/// `transport_stats` are the client's end: its RTT estimate (from the handshake), its UDP
/// payload, and as `packets_lost` the server's packets that never reached it (gaps in the
/// packet numbers it received; the server's repair symbols made up for them). The sender's view
/// is the server's timeline.
///
/// Its futures never yield (the client's I/O blocks on its own socket), so any executor drives
/// it, a current-thread runtime as well as `block_on`.
pub async fn get(
    urls: &[String],
    opts: &CodedClientOptions,
) -> Result<Vec<RequestRecord>, CodedError> {
    let client = CodedClient::new(opts.clone())?;
    let requests = Requests::new(client, opts.reuse_connection, None);
    Ok(requests.run(urls).await)
}

/// The coded transport's client: a [`Connector`] for the one request loop. Its I/O blocks (one
/// UDP socket per connection, driven until the answer is complete), so its futures finish
/// without yielding.
pub struct CodedClient {
    opts: CodedClientOptions,
    tls: ClientTls,
    clock: Clock,
}

impl CodedClient {
    /// Checks the options and builds the TLS configuration.
    pub fn new(opts: CodedClientOptions) -> Result<CodedClient, CodedError> {
        opts.config.validate()?;
        let tls = client_tls(&opts)?;
        Ok(CodedClient {
            opts,
            tls,
            clock: Clock::start(),
        })
    }
}

impl Connector for CodedClient {
    type Target = Target;
    type Conn = ClientConn;
    type Error = RequestError;

    fn http(&self) -> HttpVersion {
        HttpVersion::Coded
    }

    fn target(&self, url: &str) -> Result<Target, RequestError> {
        target(url)
    }

    fn can_reuse(&self, c: &ClientConn, t: &Target) -> bool {
        c.addr == t.addr && c.server_name == t.server_name && !c.conn.is_closed()
    }

    async fn connect(
        &mut self,
        t: &Target,
        _index: u32,
        _rec: &mut RequestRecord,
    ) -> Result<ClientConn, RequestError> {
        connect(&self.opts, &self.tls, &self.clock, t)
    }

    /// The request, then the connection's TLS facts and statistics.
    async fn fetch(
        &mut self,
        c: &mut ClientConn,
        t: &Target,
        rec: &mut RequestRecord,
    ) -> Result<(), RequestError> {
        let result = fetch(c, &self.clock, t, rec);
        if rec.new_connection {
            rec.handshake_done_us = c.handshake_done_us;
        }
        rec.handshake = Handshake {
            group: c.kx.group(),
            hello_retry: c.kx.hello_retry(),
            resumed: false,
            zero_rtt_attempted: false,
            zero_rtt_accepted: false,
            fast_open: false,
            alpn: c
                .conn
                .alpn()
                .map(|p| String::from_utf8_lossy(p).into_owned()),
        };
        let s = c.conn.stats();
        rec.transport_stats = TransportStats {
            congestion_control: Some(RATE_CONTROL.to_string()),
            packets_lost: Some(s.missing_packets),
            min_rtt_us: c.conn.min_rtt().map(|r| r.as_micros() as u64),
            smoothed_rtt_us: Some(c.conn.srtt().as_micros() as u64),
            max_udp_payload: Some(self.opts.config.max_datagram as u64),
            ..TransportStats::default()
        };
        result
    }

    async fn close(&mut self, c: ClientConn) {
        close(c, &self.clock);
    }
}

/// Sends one request on `c` and reads its answer into `rec`; checks `/bytes/N` bodies against
/// the pattern and their length.
fn fetch(
    c: &mut ClientConn,
    clock: &Clock,
    t: &Target,
    rec: &mut RequestRecord,
) -> Result<(), RequestError> {
    let expected = crate::routes::expected_bytes(&t.path);
    let id = c.conn.open_stream()?;
    c.conn
        .write(id, format!("GET {}\n", t.path).as_bytes())
        .and_then(|()| c.conn.finish(id))?;
    let mut head: Option<Vec<u8>> = Some(Vec::new());
    let mut done = false;
    let mut failure: Option<RequestError> = None;
    let mut handshake_done = c.handshake_done_us;
    run_connection(&c.socket, &mut c.conn, clock, Duration::MAX, |conn| {
        while let Some(ev) = conn.poll_event() {
            match ev {
                Event::Connected => handshake_done = Some(now_us()),
                Event::Closed(e) => {
                    failure.get_or_insert(RequestError::Closed(e));
                }
                Event::StreamReadable(s) if s == id => {
                    let Ok((mut data, fin)) = conn.read(id) else {
                        continue;
                    };
                    if let Some(h) = &mut head {
                        h.extend_from_slice(&data);
                        let Some(end) = h.iter().position(|&b| b == b'\n') else {
                            if fin {
                                failure = Some(RequestError::NoStatusLine);
                                done = true;
                            }
                            continue;
                        };
                        let line = String::from_utf8_lossy(&h[..end]).into_owned();
                        match line.trim().parse::<u16>() {
                            Ok(s) if (100..=599).contains(&s) => rec.status = s,
                            _ => {
                                failure = Some(RequestError::BadStatusLine(line));
                                done = true;
                                return false;
                            }
                        }
                        data = h.split_off(end + 1);
                        head = None;
                    }
                    if !data.is_empty() {
                        let at = now_us();
                        rec.first_byte_us.get_or_insert(at);
                        if expected.is_some() && rec.status == 200 && failure.is_none() {
                            failure = check_pattern(rec.bytes, &data);
                        }
                        rec.bytes += data.len() as u64;
                        rec.last_byte_us = Some(at);
                    }
                    if fin {
                        if rec.first_byte_us.is_none() {
                            let at = now_us();
                            (rec.first_byte_us, rec.last_byte_us) = (Some(at), Some(at));
                        }
                        done = true;
                    }
                }
                _ => {}
            }
        }
        !done && failure.is_none()
    })
    .map_err(RequestError::Socket)?;
    c.handshake_done_us = handshake_done;
    if let Some(f) = failure {
        return Err(f);
    }
    if !done {
        return Err(match c.conn.close_reason() {
            Some(e) => RequestError::Closed(e.clone()),
            None => RequestError::Incomplete,
        });
    }
    if let Some(n) = expected
        && rec.status == 200
        && rec.bytes != n
    {
        return Err(RequestError::BodyLength {
            expected: n,
            got: rec.bytes,
        });
    }
    Ok(())
}

/// Compares `data`, found at body offset `offset`, with the pattern; says where it first
/// differs.
fn check_pattern(offset: u64, data: &[u8]) -> Option<RequestError> {
    crate::routes::first_mismatch(offset, data).map(|m| RequestError::BodyMismatch {
        offset: m.offset,
        got: m.got,
        expected: m.expected,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tls::{Identity, server_config};

    /// A server on loopback in a thread; returns its address, stop flag, thread and the
    /// certificate to trust.
    fn server(
        timeline: Option<TimelineWriter>,
    ) -> (
        SocketAddr,
        Arc<AtomicBool>,
        std::thread::JoinHandle<ServeStats>,
        String,
    ) {
        let id = Identity::self_signed().unwrap();
        let tcp = server_config(&id, &[KxGroup::X25519, KxGroup::P256]).unwrap();
        let s = CodedServer::bind(CodedServerOptions {
            listen: "127.0.0.1:0".parse().unwrap(),
            tls: Arc::new(server_tls(&tcp)),
            config: Config::default(),
            timeline,
            root: None,
        })
        .unwrap();
        let addr = s.local_addr();
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let t = std::thread::spawn(move || s.run_until(&flag).unwrap());
        (addr, stop, t, id.chain_pem().to_string())
    }

    fn options(ca_pem: String, reuse: bool) -> CodedClientOptions {
        CodedClientOptions {
            ca_pem,
            groups: vec![KxGroup::P256, KxGroup::X25519],
            reuse_connection: reuse,
            config: Config::default(),
        }
    }

    #[derive(Clone, Default)]
    struct Shared(Arc<std::sync::Mutex<Vec<u8>>>);

    impl std::io::Write for Shared {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn gets_are_exact_on_new_and_reused_connections_and_the_sender_keeps_a_timeline() {
        let out = Shared::default();
        let (addr, stop, server, ca) = server(Some(TimelineWriter::new(Box::new(out.clone()))));
        let url = |n: u64| format!("https://127.0.0.1:{}/bytes/{n}", addr.port());
        let urls = vec![
            url(300_000),
            url(0),
            url(1),
            format!("https://127.0.0.1:{}/x", addr.port()),
        ];
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let recs = rt
            .block_on(get(&urls, &options(ca.clone(), false)))
            .unwrap();
        assert_eq!(recs.len(), 4);
        for (r, n) in recs.iter().zip([300_000u64, 0, 1]) {
            assert_eq!(r.error, None, "{r:?}");
            assert_eq!((r.status, r.bytes), (200, n));
            assert!(r.new_connection);
            assert_eq!(r.http, HttpVersion::Coded);
            assert_eq!(r.transport, Transport::Coded);
            // the first of the client's groups, no HelloRetryRequest, no resumption
            assert_eq!(r.handshake.group.as_deref(), Some("p256"));
            assert!(!r.handshake.hello_retry && !r.handshake.resumed);
            assert_eq!(r.handshake.alpn.as_deref(), Some("quiclab-coded"));
            let (s, h, f, l) = (
                r.start_us,
                r.handshake_done_us.unwrap(),
                r.first_byte_us.unwrap(),
                r.last_byte_us.unwrap(),
            );
            assert!(s <= h && h <= f && f <= l, "{r:?}");
        }
        assert_eq!(recs[3].status, 404);
        // connections are numbered in order
        let conns: Vec<u32> = recs.iter().map(|r| r.connection).collect();
        assert_eq!(conns, [0, 1, 2, 3]);
        // one connection for three requests
        let recs = rt
            .block_on(get(
                &[url(70_000), url(5), url(2_000_000)],
                &options(ca, true),
            ))
            .unwrap();
        assert!(recs.iter().all(|r| r.error.is_none() && r.connection == 0));
        assert_eq!(
            recs.iter().map(|r| r.new_connection).collect::<Vec<_>>(),
            [true, false, false]
        );
        assert_eq!(recs[2].bytes, 2_000_000);
        // the server sees the close of every connection before it stops
        std::thread::sleep(Duration::from_millis(100));
        stop.store(true, Ordering::Relaxed);
        let stats = server.join().unwrap();
        assert_eq!(
            stats,
            ServeStats {
                connections: 5,
                failed: 0
            }
        );
        let text = String::from_utf8(out.0.lock().unwrap().clone()).unwrap();
        let samples: Vec<TimelineSample> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        // The reused connection (index 4) carried 2,070,005 body bytes, sent in datagrams of
        // 1452 bytes per 1406 of data (3.3 % more); the client's last report may miss up to 15
        // packets (22 kB, it reports every 16), less than those headers: at least the bodies,
        // and at most 10 % more (loopback loses nothing, so no repair beyond short blocks').
        let last = samples.iter().rfind(|s| s.connection == 4).unwrap();
        assert_eq!(last.transport, Transport::Coded);
        let acked = last.acked_bytes.unwrap();
        assert!(
            (2_070_005..2_070_005 * 11 / 10).contains(&acked),
            "acked {acked}"
        );
    }

    #[test]
    fn uploads_are_counted_and_bad_heads_answered_with_400() {
        let (addr, stop, server, ca) = server(None);
        let clock = Clock::start();
        let opts = options(ca, true);
        let tls = client_tls(&opts).unwrap();
        let t = target(&format!("https://localhost:{}/", addr.port())).unwrap();
        let mut c = connect(&opts, &tls, &clock, &t).unwrap();
        let body = vec![7u8; 123_456];
        let up = c.conn.open_stream().unwrap();
        c.conn.write(up, b"POST /upload\n").unwrap();
        c.conn.write(up, &body).unwrap();
        c.conn.finish(up).unwrap();
        let bad = c.conn.open_stream().unwrap();
        c.conn.write(bad, b"PUT /x\n").unwrap();
        c.conn.finish(bad).unwrap();
        let mut answers: BTreeMap<u64, (Vec<u8>, bool)> = BTreeMap::new();
        run_connection(
            &c.socket,
            &mut c.conn,
            &clock,
            Duration::from_secs(10),
            |conn| {
                while let Some(ev) = conn.poll_event() {
                    if let Event::StreamReadable(id) = ev {
                        let (d, fin) = conn.read(id).unwrap();
                        let a = answers.entry(id).or_default();
                        a.0.extend(d);
                        a.1 |= fin;
                    }
                }
                answers.values().filter(|a| a.1).count() < 2
            },
        )
        .unwrap();
        assert_eq!(answers[&up].0, b"200\n123456\n");
        let bad = String::from_utf8(answers[&bad].0.clone()).unwrap();
        assert!(bad.starts_with("400\nbad request head \"PUT /x\""), "{bad}");
        close(c, &clock);
        stop.store(true, Ordering::Relaxed);
        server.join().unwrap();
    }

    #[test]
    fn a_wrong_byte_is_found_and_named() {
        let mut body = vec![0u8; 1000];
        fill_pattern(500, &mut body);
        assert!(check_pattern(500, &body).is_none());
        body[17] ^= 1;
        let e = check_pattern(500, &body).unwrap();
        assert!(
            matches!(e, RequestError::BodyMismatch { offset: 517, .. }),
            "{e}"
        );
        assert!(e.to_string().starts_with("body byte 517 is"), "{e}");
    }
}
