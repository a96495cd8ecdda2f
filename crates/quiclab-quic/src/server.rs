//! The HTTP/3 server ([`QuicServer`]): quiclab's routes, a [`QuicService`] by ALPN, per-connection
//! timelines and qlogs.

use super::*;

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
            flow_blocked: Some(stats.frame_tx.data_blocked + stats.frame_tx.stream_data_blocked),
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
            // a think time the request asks for, before the response's head
            if let Some(d) = held(req.uri().query()) {
                tokio::time::sleep(d).await;
            }
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
