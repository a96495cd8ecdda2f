//! The HTTP/3 client ([`get`], [`QuicClient`]): connections, 0-RTT resumption, requests checked
//! byte for byte.

use super::*;

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
