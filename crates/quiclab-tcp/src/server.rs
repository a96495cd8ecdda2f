//! An HTTP/1.1 and HTTP/2 server over TCP and TLS (tokio, rustls, hyper).
//!
//! Contract:
//! - [`Server::bind`] opens one listening TCP socket. An IPv6 unspecified address (`[::]`) also
//!   accepts IPv4. If a congestion controller is given it is set on the listening socket (accepted
//!   connections inherit it) and read back; an unknown one is an error that lists the kernel's
//!   available controllers. Without one the kernel's default stays, and [`Server::congestion`]
//!   reports which it is.
//! - [`Server::run_until`] accepts connections until the shutdown future completes, then closes
//!   the listener and every open connection and returns. Each connection does a TLS handshake and
//!   is served as HTTP/2 if ALPN chose `h2`, otherwise as HTTP/1.1.
//! - Routes as [`crate::routes`] decides them: `GET /bytes/N` answers with exactly N bytes of
//!   the pattern, streamed in chunks without holding N bytes; `POST /upload` reads the whole
//!   body and answers with its length in bytes; anything else is 404. Without TLS
//!   ([`ServerOptions::tls`] `None`) it serves HTTP/1.1 over plain TCP. Every response carries `Alt-Svc: h3=":PORT"` with the listening port, where an HTTP/3
//!   server can be found.
//! - With a [`TlsService`] (e.g. the telemetry receiver), connections that negotiate its ALPN
//!   are handed to it instead of HTTP.
//! - [`Limits`]: a connection must finish its TLS handshake, and an HTTP/1.1 request its
//!   header, within `handshake_timeout`; an HTTP/2 connection that stops answering pings for as
//!   long is closed. At most `max_connections` are open at once, so idle sockets cannot
//!   exhaust the descriptors: at the limit, a new connection closes the oldest one still in its
//!   handshake (a TCP connect that sent nothing holds no place a real client needs), and when
//!   every open connection is past its handshake the listener waits for one to end.

use std::io;
use std::net::SocketAddr;
use std::os::fd::AsFd;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;

use std::time::Duration;

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::header::{ALT_SVC, CONTENT_TYPE, HeaderValue};
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo};
use socket2::{Domain, Protocol, Socket, Type};
use std::sync::atomic::{AtomicBool, Ordering};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::{AbortHandle, JoinSet};
use tokio_rustls::TlsAcceptor;

use crate::files::Lookup;
pub use crate::routes::MAX_BYTES;
use crate::routes::{PatternBody, Route, held, pattern_chunk, route};
use crate::tcpinfo::{
    CongestionError, FASTOPEN_SYSCTL, Sampler, apply_congestion, fast_open_enabled, set_tcp_option,
};
use crate::timeline::{TIMELINE_INTERVAL, TimelineWriter};
use crate::tls::ALPN_H2;
use quiclab_endpoint::ServeStats;

/// Errors from setting up a server.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error(
        "TCP Fast Open is off for servers in this network namespace ({FASTOPEN_SYSCTL} is \
         {value}; bit 2 enables servers, e.g. `sysctl -w net.ipv4.tcp_fastopen=3`)"
    )]
    FastOpenDisabled { value: String },
    #[error("enabling TCP Fast Open (TCP_FASTOPEN) on the listening socket")]
    FastOpen(#[source] io::Error),
    #[error("opening a TCP socket for {addr}")]
    Socket {
        addr: SocketAddr,
        #[source]
        source: io::Error,
    },
    #[error("binding to {addr}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: io::Error,
    },
    #[error(transparent)]
    Congestion(#[from] CongestionError),
}

/// Something that went wrong with one connection; the server goes on.
#[derive(Debug, thiserror::Error)]
pub enum ConnectionError {
    #[error("accepting a connection")]
    Accept(#[source] io::Error),
    #[error("TLS handshake with {peer}")]
    Handshake {
        peer: SocketAddr,
        #[source]
        source: io::Error,
    },
    #[error("HTTP with {peer}")]
    Http {
        peer: SocketAddr,
        #[source]
        source: hyper::Error,
    },
    #[error("{service} from {peer}: {message}")]
    Service {
        service: &'static str,
        peer: SocketAddr,
        message: String,
    },
    #[error("writing the TCP timeline of connection {connection}")]
    Timeline {
        connection: u32,
        #[source]
        source: io::Error,
    },
}

/// What a server needs to start.
pub struct ServerOptions {
    pub listen: SocketAddr,
    /// TLS for every connection (HTTP/2 or HTTP/1.1 by ALPN); `None` serves HTTP/1.1 over plain
    /// TCP.
    pub tls: Option<Arc<rustls::ServerConfig>>,
    /// TCP congestion controller for every connection (e.g. "cubic", "bbr", "reno"); `None`
    /// keeps the kernel's default.
    pub tcp_congestion: Option<String>,
    /// Size of a response body's first write, doubling with every write after it (`None`: every
    /// write as large as possible). HTTP/2 sends each write as its own DATA frames, and a frame
    /// is delivered only once complete, so a first frame larger than TCP's initial window (about
    /// 14.5 kB) holds the first byte back by a round trip; servers that size records dynamically
    /// start with about one packet's worth. HTTP/1.1 coalesces writes into TLS records, whose
    /// size is the TLS configuration's `max_fragment_size`. See [`DYNAMIC_FIRST_WRITE`].
    pub first_write: Option<usize>,
    /// Where to write each connection's timeline ([`TimelineSample`] JSON lines from the
    /// server socket's TCP_INFO every [`TIMELINE_INTERVAL`] and when the connection ends;
    /// connections numbered from 0 in the order they are accepted).
    ///
    /// [`TimelineSample`]: quiclab_model::record::TimelineSample
    pub timeline: Option<TimelineWriter>,
    /// The emulated path's minimum RTT in microseconds: a smaller RTT is impossible and counted.
    pub path_min_rtt_us: Option<u64>,
    /// Serve other GET paths as files under this directory (see [`crate::files`]).
    pub root: Option<PathBuf>,
    /// Also speak this protocol, to connections that negotiate its ALPN (offered after HTTP/2
    /// and HTTP/1.1).
    pub service: Option<Arc<dyn TlsService>>,
    /// Accept TCP Fast Open: data in a client's SYN (with a cookie from an earlier connection)
    /// reaches the server before the handshake completes. Needs the server bit of
    /// `net.ipv4.tcp_fastopen` in the server's network namespace; an error otherwise.
    pub fast_open: bool,
    pub limits: Limits,
}

/// What one client may hold of the server (see the module's contract).
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub handshake_timeout: Duration,
    pub max_connections: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            handshake_timeout: Duration::from_secs(10),
            max_connections: 1024,
        }
    }
}

/// Pending Fast Open requests the listener queues (the `TCP_FASTOPEN` option's value).
const FASTOPEN_QUEUE: libc::c_int = 256;

fn enable_fast_open(socket: &Socket) -> Result<(), ServerError> {
    let (value, on) = fast_open_enabled(2).map_err(ServerError::FastOpen)?;
    if !on {
        return Err(ServerError::FastOpenDisabled { value });
    }
    set_tcp_option(socket, libc::TCP_FASTOPEN, FASTOPEN_QUEUE).map_err(ServerError::FastOpen)
}

/// First write of a response when frames are sized dynamically: with TLS and HTTP/2 framing it
/// fits in one 1500-byte packet.
pub const DYNAMIC_FIRST_WRITE: usize = 1200;

/// A protocol other than HTTP that a server also speaks: a TLS connection that negotiates its
/// ALPN is handed to it whole (the telemetry receiver is one).
pub trait TlsService: Send + Sync + 'static {
    /// What it is called in errors.
    fn name(&self) -> &'static str;
    /// Its ALPN.
    fn alpn(&self) -> &'static [u8];
    /// Serves connection number `index` (numbered with the HTTP ones) from `peer` to its end;
    /// the text says why it failed.
    fn serve(
        &self,
        tls: tokio_rustls::server::TlsStream<TcpStream>,
        index: u32,
        peer: SocketAddr,
    ) -> ServiceFuture;
}

/// What a [`TlsService`] or a QUIC one returns: the end of a connection.
pub type ServiceFuture = Pin<Box<dyn Future<Output = Result<(), String>> + Send>>;

/// A bound, listening server.
pub struct Server {
    listener: TcpListener,
    local_addr: SocketAddr,
    congestion: String,
    /// `None`: plain HTTP/1.1.
    acceptor: Option<TlsAcceptor>,
    state: Arc<State>,
}

/// What every request handler shares.
struct State {
    alt_svc: HeaderValue,
    /// `CHUNK` bytes of the pattern from offset 0.
    pattern: Bytes,
    first_write: Option<usize>,
    timeline: Option<TimelineWriter>,
    path_min_rtt_us: Option<u64>,
    root: Option<PathBuf>,
    service: Option<Arc<dyn TlsService>>,
    limits: Limits,
}

impl Server {
    /// Opens the listening socket (must be called inside a tokio runtime).
    pub fn bind(opts: ServerOptions) -> Result<Server, ServerError> {
        let addr = opts.listen;
        let socket_err = |source| ServerError::Socket { addr, source };
        let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))
            .map_err(socket_err)?;
        if addr.is_ipv6() && addr.ip().is_unspecified() {
            // `[::]` means every address, IPv4 included, whatever net.ipv6.bindv6only says.
            socket.set_only_v6(false).map_err(socket_err)?;
        }
        // A restarted server must not wait for the previous run's TIME_WAIT sockets.
        socket.set_reuse_address(true).map_err(socket_err)?;
        let congestion = apply_congestion(&socket, opts.tcp_congestion.as_deref())?;
        let bind_err = |source| ServerError::Bind { addr, source };
        socket.bind(&addr.into()).map_err(bind_err)?;
        if opts.fast_open {
            enable_fast_open(&socket)?;
        }
        socket.listen(1024).map_err(bind_err)?;
        socket.set_nonblocking(true).map_err(socket_err)?;
        let listener = TcpListener::from_std(socket.into()).map_err(socket_err)?;
        let local_addr = listener.local_addr().map_err(socket_err)?;

        // Digits, a colon and quotes only: always a valid header value.
        let alt_svc = HeaderValue::from_str(&format!("h3=\":{}\"", local_addr.port()))
            .expect("a port number is a valid header value");
        let tls = match (opts.tls, &opts.service) {
            (Some(tls), Some(service)) => {
                let mut tls = (*tls).clone();
                tls.alpn_protocols.push(service.alpn().to_vec());
                Some(Arc::new(tls))
            }
            (tls, _) => tls,
        };
        Ok(Server {
            listener,
            local_addr,
            congestion,
            acceptor: tls.map(TlsAcceptor::from),
            state: Arc::new(State {
                alt_svc,
                pattern: pattern_chunk(),
                first_write: opts.first_write,
                timeline: opts.timeline,
                path_min_rtt_us: opts.path_min_rtt_us,
                root: opts.root,
                service: opts.service,
                limits: opts.limits,
            }),
        })
    }

    /// The address the server listens on (with the port the kernel chose if it was 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The TCP congestion controller the listening socket reports, inherited by every
    /// connection.
    pub fn congestion(&self) -> &str {
        &self.congestion
    }

    /// Serves until `shutdown` completes, then drops the listener and every open connection.
    /// `on_error` hears about each connection that failed (the server goes on).
    pub async fn run_until(
        self,
        shutdown: impl Future<Output = ()>,
        on_error: impl Fn(ConnectionError) + Send + Sync + 'static,
    ) -> ServeStats {
        let on_error = Arc::new(on_error);
        let mut stats = ServeStats::default();
        let mut conns: JoinSet<bool> = JoinSet::new();
        let mut shutdown = std::pin::pin!(shutdown);
        let max = self.state.limits.max_connections.max(1);
        // the connections still in their handshake, oldest first: each one's flag is set once
        // its handshake is done
        let mut opening: std::collections::VecDeque<(Arc<AtomicBool>, AbortHandle)> =
            std::collections::VecDeque::new();
        loop {
            opening
                .retain(|(started, task)| !started.load(Ordering::Relaxed) && !task.is_finished());
            tokio::select! {
                () = &mut shutdown => break,
                Some(done) = conns.join_next(), if !conns.is_empty() => {
                    // A task that panicked counts as failed too.
                    if !done.unwrap_or(false) {
                        stats.failed += 1;
                    }
                }
                accepted = self.listener.accept(), if conns.len() < max || !opening.is_empty() => match accepted {
                    Ok((tcp, peer)) => {
                        if conns.len() >= max
                            && let Some((_, oldest)) = opening.pop_front()
                        {
                            // counted as failed when its task ends
                            oldest.abort();
                        }
                        let index = stats.connections as u32;
                        stats.connections += 1;
                        let started = Arc::new(AtomicBool::new(false));
                        let (acceptor, state, on_error, flag) =
                            (self.acceptor.clone(), self.state.clone(), on_error.clone(), started.clone());
                        let task = conns.spawn(async move {
                            match serve_connection(tcp, peer, index, acceptor, state, flag).await {
                                Ok(()) => true,
                                Err(e) => {
                                    on_error(e);
                                    false
                                }
                            }
                        });
                        opening.push_back((started, task));
                    }
                    Err(e) => {
                        on_error(ConnectionError::Accept(e));
                        // Out of file descriptors or memory: give connections time to end
                        // instead of spinning on the same error.
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                },
            }
        }
        conns.shutdown().await;
        if let Some(w) = &self.state.timeline
            && let Err(source) = w.flush()
        {
            on_error(ConnectionError::Timeline {
                connection: stats.connections as u32,
                source,
            });
        }
        stats
    }
}

/// Serves one connection and, with a timeline, samples its socket meanwhile; the last sample
/// is taken once the connection is done, before the socket closes.
async fn serve_connection(
    tcp: TcpStream,
    peer: SocketAddr,
    index: u32,
    acceptor: Option<TlsAcceptor>,
    state: Arc<State>,
    started: Arc<AtomicBool>,
) -> Result<(), ConnectionError> {
    let Some(w) = state.timeline.clone() else {
        return serve_tls(tcp, peer, index, acceptor, state, started).await;
    };
    let sampler = Sampler::new(tcp.as_fd(), index)
        .map_err(|source| ConnectionError::Timeline {
            connection: index,
            source,
        })?
        .with_path_min_rtt(state.path_min_rtt_us);
    let (done_tx, done_rx) = tokio::sync::oneshot::channel::<()>();
    let sampling = tokio::spawn(async move {
        let mut failed = None;
        sampler
            .run_each(
                TIMELINE_INTERVAL,
                async {
                    let _ = done_rx.await;
                },
                |s| {
                    if failed.is_none() {
                        failed = w.write(&s).err();
                    }
                },
            )
            .await;
        failed
    });
    let served = serve_tls(tcp, peer, index, acceptor, state, started).await;
    let _ = done_tx.send(());
    let failed = sampling.await.ok().flatten();
    served?;
    match failed {
        Some(source) => Err(ConnectionError::Timeline {
            connection: index,
            source,
        }),
        None => Ok(()),
    }
}

async fn serve_tls(
    tcp: TcpStream,
    peer: SocketAddr,
    index: u32,
    acceptor: Option<TlsAcceptor>,
    state: Arc<State>,
    started: Arc<AtomicBool>,
) -> Result<(), ConnectionError> {
    // Responses are written whole by hyper; Nagle would only hold back the tail of each.
    let _ = tcp.set_nodelay(true);
    let limit = state.limits.handshake_timeout;
    let http1 = || {
        let mut b = hyper::server::conn::http1::Builder::new();
        // a client that opens a connection and sends nothing (or a header slowly) is dropped
        b.timer(hyper_util::rt::TokioTimer::new())
            .header_read_timeout(limit);
        b
    };
    let Some(acceptor) = acceptor else {
        // plain HTTP/1.1: the handshake is done once a request's header has arrived
        let service = service_fn(move |req| {
            started.store(true, Ordering::Relaxed);
            handle(req, state.clone())
        });
        return http1()
            .serve_connection(TokioIo::new(tcp), service)
            .await
            .map_err(|source| ConnectionError::Http { peer, source });
    };
    let tls = match tokio::time::timeout(limit, acceptor.accept(tcp)).await {
        Ok(tls) => tls.map_err(|source| ConnectionError::Handshake { peer, source })?,
        Err(_) => {
            return Err(ConnectionError::Handshake {
                peer,
                source: io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("not completed within {limit:?}"),
                ),
            });
        }
    };
    started.store(true, Ordering::Relaxed);
    let alpn = tls.get_ref().1.alpn_protocol();
    if let Some(service) = &state.service
        && alpn == Some(service.alpn())
    {
        let name = service.name();
        return service
            .serve(tls, index, peer)
            .await
            .map_err(|message| ConnectionError::Service {
                service: name,
                peer,
                message,
            });
    }
    let h2 = alpn == Some(ALPN_H2);
    let io = TokioIo::new(tls);
    let service = service_fn(move |req| handle(req, state.clone()));
    let served = if h2 {
        hyper::server::conn::http2::Builder::new(TokioExecutor::new())
            // a peer that stops answering pings (or never sent its preface) is dropped
            .timer(hyper_util::rt::TokioTimer::new())
            .keep_alive_interval(limit)
            .keep_alive_timeout(limit)
            .serve_connection(io, service)
            .await
    } else {
        http1().serve_connection(io, service).await
    };
    served.map_err(|source| ConnectionError::Http { peer, source })
}

/// A body's error, whatever the body (the pattern's, a file's read error).
type BoxError = Box<dyn std::error::Error + Send + Sync>;
type ResponseBody = BoxBody<Bytes, BoxError>;

async fn handle(
    req: Request<Incoming>,
    state: Arc<State>,
) -> Result<Response<ResponseBody>, hyper::Error> {
    let path = req.uri().path().to_string();
    let mut response = match route(req.method().as_str(), &path, state.root.is_some()) {
        Route::Bytes(n) => {
            // a think time the request asks for, before the response's head
            if let Some(d) = held(req.uri().query()) {
                tokio::time::sleep(d).await;
            }
            Response::new(
                PatternBody::new(n, state.pattern.clone(), state.first_write)
                    .map_err(BoxError::from)
                    .boxed(),
            )
        }
        Route::BadRequest(msg) => text(StatusCode::BAD_REQUEST, msg),
        Route::Upload => {
            let mut body = req.into_body();
            let mut received: u64 = 0;
            while let Some(frame) = body.frame().await {
                if let Some(data) = frame?.data_ref() {
                    received += data.len() as u64;
                }
            }
            text(StatusCode::OK, format!("{received}\n"))
        }
        Route::File => {
            let root = state.root.clone();
            let found =
                tokio::task::spawn_blocking(move || root.map(|r| crate::files::lookup(&r, &path)))
                    .await;
            match found {
                Ok(Some(Lookup::Found {
                    file,
                    len,
                    content_type,
                })) => {
                    // a read error ends the body early: the client sees it short of its length
                    let body = crate::files::FileBody::new(file, len)
                        .map_err(|e| {
                            log::warn!("reading a served file: {e}");
                            BoxError::from(e)
                        })
                        .boxed();
                    let mut r = Response::new(body);
                    r.headers_mut()
                        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
                    r
                }
                Ok(Some(Lookup::Forbidden)) => text(StatusCode::FORBIDDEN, "forbidden\n".into()),
                _ => text(StatusCode::NOT_FOUND, "not found\n".to_string()),
            }
        }
        Route::NotFound => text(StatusCode::NOT_FOUND, "not found\n".to_string()),
    };
    response
        .headers_mut()
        .insert(ALT_SVC, state.alt_svc.clone());
    Ok(response)
}

fn text(status: StatusCode, body: String) -> Response<ResponseBody> {
    let mut r = Response::new(Full::new(Bytes::from(body)).map_err(|e| match e {}).boxed());
    *r.status_mut() = status;
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("text/plain"));
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_congestion_controller_lists_the_available_ones() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let _guard = rt.enter();
        let id = crate::tls::Identity::self_signed().unwrap();
        let tls = crate::tls::server_config(&id, &[crate::tls::KxGroup::X25519]).unwrap();
        let opts = |cc: &str| ServerOptions {
            listen: "127.0.0.1:0".parse().unwrap(),
            tls: Some(tls.clone()),
            tcp_congestion: Some(cc.to_string()),
            first_write: None,
            timeline: None,
            path_min_rtt_us: None,
            root: None,
            service: None,
            fast_open: false,
            limits: Limits::default(),
        };
        let e = Server::bind(opts("nosuchcc")).err().unwrap();
        let msg = e.to_string();
        assert!(
            msg.starts_with("TCP congestion controller \"nosuchcc\" is not available (available: "),
            "{msg}"
        );
        assert!(msg.contains("reno"), "{msg}");
        let server = Server::bind(opts("reno")).unwrap();
        assert_eq!(server.congestion(), "reno");
        assert_ne!(server.local_addr().port(), 0);
    }
}
