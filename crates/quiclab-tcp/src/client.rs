//! An HTTP/1.1 and HTTP/2 client over TCP and TLS 1.3 (tokio, rustls with ring, hyper) that
//! reports every request as a [`RequestRecord`].
//!
//! Contract:
//! - [`Client::new`] builds the TLS configuration once per run: ring provider, TLS 1.3 only,
//!   exactly the key-exchange groups given (the ClientHello carries a key share for the first
//!   one only, so a server that accepts only a later one answers with a HelloRetryRequest), the
//!   certificates of a PEM file as the only trust anchors, ALPN offering only the chosen HTTP
//!   version. With resumption on, session tickets go to an in-memory store that belongs to this
//!   client alone, so a run never resumes a session from an earlier run.
//! - [`Client`] is a [`Connector`]: [`Client::requests`] runs it in the one request loop
//!   ([`crate::requests`]), where nothing fails: whatever goes wrong ends up in
//!   [`RequestRecord::error`]. With [`ConnectionMode::Reuse`] a request goes over the previous
//!   request's connection when it is to the same host and port and still open; with
//!   [`ConnectionMode::New`] every request opens (and afterwards closes) its own connection.
//! - Each TCP socket gets the chosen congestion controller before it connects, and the record
//!   carries the name the socket reports back; an unknown controller is an error naming the
//!   available ones. TCP Fast Open (`TCP_FASTOPEN_CONNECT`) is requested only when asked for, and
//!   is an error where the kernel does not offer it to clients.
//! - An `http://` URL is fetched over plain TCP, HTTP/1.1 only (no TLS: the record's handshake
//!   is the TCP connection alone).
//! - Bodies of `/bytes/N` are checked against the server's pattern ([`routes::fill_pattern`])
//!   and their length against N; a difference is recorded as an error.
//!
//! [`routes::fill_pattern`]: crate::routes::fill_pattern

use std::io;
use std::net::SocketAddr;
use std::os::fd::AsFd;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt, Either, Empty};
use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::client::Resumption;
use rustls::crypto::{CryptoProvider, ring as ring_provider};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{HandshakeKind, NamedGroup, RootCertStore};
use socket2::{Domain, Protocol, Socket, Type};
use tokio::net::{TcpSocket, TcpStream};
use tokio::task::JoinHandle;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

use crate::requests::{Connector, Requests};
use crate::routes::PatternBody;
use crate::routes::first_mismatch;
use crate::tcpinfo::{
    CongestionError, FASTOPEN_SYSCTL, TcpInfo, apply_congestion, fast_open_enabled,
    impossible_min_rtt, set_tcp_option,
};
use crate::tls::{ALPN_H2, ALPN_HTTP11, KxGroup};
use crate::url::{Url, UrlError};
use quiclab_model::record::{Handshake, HttpVersion, RequestRecord, now_us};

/// Errors from setting up a client or from one request.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("{} is not spoken over TCP; this client does HTTP/1.1 and HTTP/2", protocol_name(*.0))]
    NotTcp(HttpVersion),
    #[error("no key-exchange group given")]
    NoGroups,
    #[error("reading trusted certificates (PEM)")]
    CaPem(#[source] rustls::pki_types::pem::Error),
    #[error("no certificate to trust in the given PEM text")]
    NoCa,
    #[error("trusting certificate {index} of the PEM text")]
    CaCert {
        index: usize,
        #[source]
        source: rustls::Error,
    },
    #[error("building the TLS client configuration")]
    Config(#[source] rustls::Error),
    #[error("URL {url:?}: {reason}")]
    BadUrl { url: String, reason: String },
    #[error(transparent)]
    Url(#[from] UrlError),
    #[error("resolving {authority}")]
    Resolve {
        authority: String,
        #[source]
        source: io::Error,
    },
    #[error("opening a TCP socket for {addr}")]
    Socket {
        addr: SocketAddr,
        #[source]
        source: io::Error,
    },
    #[error(transparent)]
    Congestion(#[from] CongestionError),
    #[error(
        "TCP Fast Open is off for clients in this network namespace ({FASTOPEN_SYSCTL} is {value}; bit 1 enables clients)"
    )]
    FastOpenDisabled { value: String },
    #[error("enabling TCP Fast Open (TCP_FASTOPEN_CONNECT) on the socket")]
    FastOpen(#[source] io::Error),
    #[error("connecting to {addr}")]
    Connect {
        addr: SocketAddr,
        #[source]
        source: io::Error,
    },
    #[error("TLS handshake with {addr}")]
    Tls {
        addr: SocketAddr,
        #[source]
        source: io::Error,
    },
    #[error("an http:// URL (no TLS) is HTTP/1.1 only, not HTTP/{}; allowed: --http 1.1, or an https:// URL", version_name(*version))]
    PlainNotHttp11 { version: HttpVersion },
    #[error("the server chose ALPN {got:?}, not {wanted:?}")]
    Alpn { wanted: String, got: Option<String> },
    #[error("HTTP/{} handshake", version_name(*version))]
    HttpHandshake {
        version: HttpVersion,
        #[source]
        source: hyper::Error,
    },
    #[error("sending the request")]
    Request(#[source] hyper::Error),
    #[error("reading the response body")]
    Body(#[source] hyper::Error),
    #[error("body byte {offset} is {got}, the pattern says {expected}")]
    BodyMismatch { offset: u64, expected: u8, got: u8 },
    #[error("body has {got} bytes, expected {expected}")]
    BodyLength { expected: u64, got: u64 },
    #[error("uploaded {sent} bytes, the server answered that it received {}", .received.map_or("an unreadable count".to_string(), |r| r.to_string()))]
    UploadCount { sent: u64, received: Option<u64> },
}

fn version_name(v: HttpVersion) -> &'static str {
    v.name()
}

fn protocol_name(v: HttpVersion) -> String {
    match v {
        HttpVersion::Coded | HttpVersion::Hq => v.title().to_string(),
        v => format!("HTTP/{}", v.name()),
    }
}

/// Whether requests share a connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConnectionMode {
    /// One connection per host and port, kept open between requests.
    Reuse,
    /// A new connection for every request, closed after it.
    New,
}

/// What a client needs.
#[derive(Clone, Debug)]
pub struct ClientOptions {
    /// HTTP/1.1 or HTTP/2.
    pub http: HttpVersion,
    pub connection: ConnectionMode,
    /// Key-exchange groups in the client's order of preference (a key share goes only for the
    /// first).
    pub groups: Vec<KxGroup>,
    /// PEM certificates to trust (the only trust anchors); empty for a client of `http://`
    /// URLs only.
    pub ca_pem: String,
    /// Keep TLS session tickets (in memory, for this client only) and resume with them.
    pub resume: bool,
    /// TCP congestion controller for every connection; `None` keeps the kernel's default.
    pub tcp_congestion: Option<String>,
    /// Request TCP Fast Open on every connection.
    pub fast_open: bool,
    /// The socket's receive buffer (SO_RCVBUF), bytes: it caps the window the server may
    /// fill. `None`: the kernel's own, which grows with the transfer.
    pub receive_buffer: Option<u32>,
    /// The emulated path's minimum RTT in microseconds: a smaller minimum RTT is impossible and
    /// counted.
    pub path_min_rtt_us: Option<u64>,
    /// POST this many bytes of the pattern to every URL instead of a GET (to `/upload`, which
    /// answers with the count it received; a different count is an error).
    pub upload: Option<u64>,
}

/// A rustls client configuration: ring provider, TLS 1.3 only, exactly `groups` in that order,
/// the certificates in `ca_pem` as the only trust anchors, the given ALPN protocols, and either
/// a fresh in-memory session store or no resumption at all.
pub fn tls_client_config(
    ca_pem: &str,
    groups: &[KxGroup],
    alpn: &[&[u8]],
    resume: bool,
) -> Result<Arc<rustls::ClientConfig>, ClientError> {
    if groups.is_empty() {
        return Err(ClientError::NoGroups);
    }
    let mut roots = RootCertStore::empty();
    for (index, cert) in CertificateDer::pem_slice_iter(ca_pem.as_bytes()).enumerate() {
        let cert = cert.map_err(ClientError::CaPem)?;
        roots
            .add(cert)
            .map_err(|source| ClientError::CaCert { index, source })?;
    }
    if roots.is_empty() {
        return Err(ClientError::NoCa);
    }
    let provider = CryptoProvider {
        kx_groups: groups.iter().map(|g| g.rustls()).collect(),
        ..ring_provider::default_provider()
    };
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(provider))
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(ClientError::Config)?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    config.key_log = crate::tls::key_log();
    config.resumption = if resume {
        // A handful of servers per run at most; 64 entries never evicts one that matters.
        Resumption::in_memory_sessions(64)
    } else {
        Resumption::disabled()
    };
    Ok(Arc::new(config))
}

/// The command-line name of a negotiated group (as [`KxGroup`] spells them).
fn group_name(g: NamedGroup) -> String {
    match g {
        NamedGroup::X25519 => "x25519".to_string(),
        NamedGroup::secp256r1 => "p256".to_string(),
        NamedGroup::secp384r1 => "p384".to_string(),
        other => format!("{other:?}"),
    }
}

/// A request's body: none (GET), or an upload of the pattern (POST).
pub type ReqBody = Either<Empty<Bytes>, PatternBody>;

pub enum Sender {
    H1(hyper::client::conn::http1::SendRequest<ReqBody>),
    H2(hyper::client::conn::http2::SendRequest<ReqBody>),
}

/// An open connection.
pub struct Connection {
    authority: String,
    /// Over TLS (an `https://` origin), or plain TCP.
    tls: bool,
    pub index: u32,
    pub sender: Sender,
    /// A duplicate of the TCP socket, for TCP_INFO while hyper owns the stream.
    socket: Socket,
    pub handshake: Handshake,
    congestion: String,
    driver: JoinHandle<()>,
}

impl Drop for Connection {
    fn drop(&mut self) {
        // The driver task owns the TLS stream: ending it closes the connection.
        self.driver.abort();
    }
}

impl Connection {
    fn is_open(&self) -> bool {
        match &self.sender {
            Sender::H1(s) => !s.is_closed(),
            Sender::H2(s) => !s.is_closed(),
        }
    }
}

/// An HTTP/1.1 or HTTP/2 client for one run.
pub struct Client {
    opts: ClientOptions,
    /// `None` without certificates to trust: `http://` URLs only.
    tls: Option<TlsConnector>,
}

/// The most of an answer kept for reading (an upload's count is a few digits).
const KEPT_ANSWER: usize = 64;

impl Client {
    /// Checks the options and builds the TLS configuration (with a fresh session store).
    pub fn new(opts: ClientOptions) -> Result<Client, ClientError> {
        let alpn: &[u8] = match opts.http {
            HttpVersion::Http11 => ALPN_HTTP11,
            HttpVersion::Http2 => ALPN_H2,
            HttpVersion::Http3 | HttpVersion::Coded | HttpVersion::Hq => {
                return Err(ClientError::NotTcp(opts.http));
            }
        };
        if opts.fast_open {
            check_fast_open_sysctl()?;
        }
        if let Some(name) = &opts.tcp_congestion {
            // A misspelt controller is a mistake in the command, not a failed request: refuse it
            // before any request is made.
            let probe =
                Socket::new(Domain::IPV4, Type::STREAM, Some(Protocol::TCP)).map_err(|source| {
                    ClientError::Socket {
                        addr: SocketAddr::from(([0, 0, 0, 0], 0)),
                        source,
                    }
                })?;
            apply_congestion(&probe, Some(name))?;
        }
        // no certificate, no TLS: the client then fetches http:// URLs only
        let tls = if opts.ca_pem.is_empty() {
            None
        } else {
            let config = tls_client_config(&opts.ca_pem, &opts.groups, &[alpn], opts.resume)?;
            Some(TlsConnector::from(config))
        };
        Ok(Client { opts, tls })
    }

    /// A run of requests with this client, as its options say (connection reuse, upload).
    pub fn requests(self) -> Requests<Client> {
        let reuse = self.opts.connection == ConnectionMode::Reuse;
        let upload = self.opts.upload;
        Requests::new(self, reuse, upload)
    }

    /// Sends the request `record` describes on `conn` and reads the answer into it.
    async fn fetch_on(
        &self,
        conn: &mut Connection,
        target: &Url,
        record: &mut RequestRecord,
    ) -> Result<(), ClientError> {
        record.handshake = conn.handshake.clone();
        record.transport_stats.congestion_control = Some(conn.congestion.clone());

        let upload = (record.sent_bytes > 0).then_some(record.sent_bytes);
        let (method, body) = match upload {
            Some(n) => (hyper::Method::POST, Either::Right(PatternBody::of_len(n))),
            None => (hyper::Method::GET, Either::Left(Empty::new())),
        };
        let response = match &mut conn.sender {
            Sender::H1(s) => {
                let req = Request::builder()
                    .method(method)
                    .uri(target.path.as_str())
                    .header(hyper::header::HOST, target.authority.as_str())
                    .body(body)
                    .expect("a path from a parsed URI and its authority make a valid request");
                s.ready().await.map_err(ClientError::Request)?;
                if !record.new_connection {
                    record.start_us = now_us();
                }
                s.send_request(req).await
            }
            Sender::H2(s) => {
                let req = Request::builder()
                    .method(method)
                    .uri(target.uri.clone())
                    .body(body)
                    .expect("a parsed URI makes a valid request");
                s.ready().await.map_err(ClientError::Request)?;
                if !record.new_connection {
                    record.start_us = now_us();
                }
                s.send_request(req).await
            }
        };
        let response = response.map_err(ClientError::Request)?;
        record.status = response.status().as_u16();
        let ok = response.status() == hyper::StatusCode::OK;
        let expected = ok
            .then(|| crate::routes::expected_bytes(target.uri.path()))
            .flatten();
        let upload = upload.filter(|_| ok);
        let body = self
            .read_body(response, record, expected, upload.is_some())
            .await
            .and_then(|answer| match upload {
                // `/upload` answers with the count it received
                Some(sent) => {
                    let received = String::from_utf8_lossy(&answer).trim().parse().ok();
                    match received {
                        Some(r) if r == sent => Ok(()),
                        _ => Err(ClientError::UploadCount { sent, received }),
                    }
                }
                None => Ok(()),
            });
        if let Ok(info) = TcpInfo::read(conn.socket.as_fd()) {
            let stats = &mut record.transport_stats;
            stats.min_rtt_us = info.min_rtt_us.map(u64::from);
            stats.smoothed_rtt_us = info.rtt_us.map(u64::from);
            // The client's own retransmissions (requests, handshake): a download's losses are
            // the server's to see. TCP_INFO counts retransmitted segments, the nearest it has to
            // packets lost. The client's congestion window says nothing about a download, so it
            // is left out.
            stats.bytes_retransmitted = info.bytes_retrans;
            stats.packets_lost = info.total_retrans.map(u64::from);
            stats.impossible_rtt_samples = self
                .opts
                .path_min_rtt_us
                .map(|floor| impossible_min_rtt(&info, floor));
        }
        body
    }

    /// Reads the body to its end, timing the first and last byte and checking `/bytes/N`
    /// against the pattern; with `keep`, returns its first bytes (a short answer's text).
    async fn read_body(
        &self,
        response: Response<Incoming>,
        record: &mut RequestRecord,
        pattern_len: Option<u64>,
        keep: bool,
    ) -> Result<Vec<u8>, ClientError> {
        let mut body = response.into_body();
        let mut mismatch = None;
        let mut kept = Vec::new();
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(ClientError::Body)?;
            let Some(data) = frame.data_ref() else {
                continue;
            };
            if data.is_empty() {
                continue;
            }
            if record.first_byte_us.is_none() {
                record.first_byte_us = Some(now_us());
            }
            if pattern_len.is_some() && mismatch.is_none() {
                mismatch = first_mismatch(record.bytes, data).map(|m| ClientError::BodyMismatch {
                    offset: m.offset,
                    expected: m.expected,
                    got: m.got,
                });
            }
            if keep && kept.len() < KEPT_ANSWER {
                kept.extend_from_slice(&data[..data.len().min(KEPT_ANSWER - kept.len())]);
            }
            record.bytes += data.len() as u64;
        }
        record.last_byte_us = Some(now_us());
        if let Some(e) = mismatch {
            return Err(e);
        }
        match pattern_len {
            Some(n) if n != record.bytes => Err(ClientError::BodyLength {
                expected: n,
                got: record.bytes,
            }),
            _ => Ok(kept),
        }
    }

    /// Opens a TCP connection, does the TLS and HTTP handshakes.
    pub async fn open(&self, target: &Url, index: u32) -> Result<Connection, ClientError> {
        let addr = tokio::net::lookup_host((target.host.as_str(), target.port))
            .await
            .and_then(|mut a| {
                a.next()
                    .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "no address"))
            })
            .map_err(|source| ClientError::Resolve {
                authority: target.authority.clone(),
                source,
            })?;
        let (tcp, socket, congestion) = self.tcp_connect(addr).await?;
        let version = self.opts.http;
        if !target.tls {
            if version != HttpVersion::Http11 {
                return Err(ClientError::PlainNotHttp11 { version });
            }
            let (sender, driver) = http_handshake(TokioIo::new(tcp), version).await?;
            return Ok(Connection {
                authority: target.authority.clone(),
                tls: false,
                index,
                sender,
                socket,
                handshake: Handshake::default(),
                congestion,
                driver,
            });
        }
        let server_name =
            ServerName::try_from(target.host.clone()).map_err(|e| ClientError::BadUrl {
                url: target.uri.to_string(),
                reason: format!("not a TLS server name: {e}"),
            })?;
        let Some(connector) = &self.tls else {
            return Err(ClientError::NoCa);
        };
        let tls: TlsStream<TcpStream> = connector
            .connect(server_name, tcp)
            .await
            .map_err(|source| ClientError::Tls { addr, source })?;
        let session = tls.get_ref().1;
        let kind = session.handshake_kind();
        let handshake = Handshake {
            group: session
                .negotiated_key_exchange_group()
                .map(|g| group_name(g.name())),
            hello_retry: kind == Some(HandshakeKind::FullWithHelloRetryRequest),
            resumed: kind == Some(HandshakeKind::Resumed),
            zero_rtt_attempted: false,
            zero_rtt_accepted: false,
            fast_open: TcpInfo::read(socket.as_fd()).is_ok_and(|i| i.syn_data_acked),
            alpn: session
                .alpn_protocol()
                .map(|p| String::from_utf8_lossy(p).into_owned()),
        };
        let wanted = match version {
            HttpVersion::Http2 => ALPN_H2,
            _ => ALPN_HTTP11,
        };
        if session.alpn_protocol() != Some(wanted) {
            return Err(ClientError::Alpn {
                wanted: String::from_utf8_lossy(wanted).into_owned(),
                got: handshake.alpn,
            });
        }
        let (sender, driver) = http_handshake(TokioIo::new(tls), version).await?;
        Ok(Connection {
            authority: target.authority.clone(),
            tls: true,
            index,
            sender,
            socket,
            handshake,
            congestion,
            driver,
        })
    }

    async fn tcp_connect(
        &self,
        addr: SocketAddr,
    ) -> Result<(TcpStream, Socket, String), ClientError> {
        tcp_connect(
            addr,
            self.opts.tcp_congestion.as_deref(),
            self.opts.fast_open,
            self.opts.receive_buffer,
        )
        .await
    }
}

impl Connector for Client {
    type Target = Url;
    type Conn = Connection;
    type Error = ClientError;

    fn http(&self) -> HttpVersion {
        self.opts.http
    }

    fn target(&self, url: &str) -> Result<Url, ClientError> {
        Ok(Url::parse(url)?)
    }

    fn can_reuse(&self, c: &Connection, target: &Url) -> bool {
        c.authority == target.authority && c.tls == target.tls && c.is_open()
    }

    async fn connect(
        &mut self,
        target: &Url,
        index: u32,
        rec: &mut RequestRecord,
    ) -> Result<Connection, ClientError> {
        let c = self.open(target, index).await?;
        rec.handshake_done_us = Some(now_us());
        Ok(c)
    }

    async fn fetch(
        &mut self,
        conn: &mut Connection,
        target: &Url,
        rec: &mut RequestRecord,
    ) -> Result<(), ClientError> {
        self.fetch_on(conn, target, rec).await
    }

    /// Dropping the connection ends its driver task, which closes it.
    async fn close(&mut self, conn: Connection) {
        drop(conn);
    }
}

/// The HTTP handshake over an open connection (TLS or plain), and the task that drives the
/// connection; its errors surface in the requests it carries.
async fn http_handshake<I>(
    io: TokioIo<I>,
    version: HttpVersion,
) -> Result<(Sender, JoinHandle<()>), ClientError>
where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let hs_err = |source| ClientError::HttpHandshake { version, source };
    Ok(match version {
        HttpVersion::Http2 => {
            let (s, conn) = hyper::client::conn::http2::handshake(TokioExecutor::new(), io)
                .await
                .map_err(hs_err)?;
            (
                Sender::H2(s),
                tokio::spawn(async move {
                    let _ = conn.await;
                }),
            )
        }
        _ => {
            let (s, conn) = hyper::client::conn::http1::handshake(io)
                .await
                .map_err(hs_err)?;
            (
                Sender::H1(s),
                tokio::spawn(async move {
                    let _ = conn.await;
                }),
            )
        }
    })
}

/// Connects a TCP socket with the chosen congestion controller (and Fast Open) and TCP_NODELAY
/// on: writes are whole messages, and Nagle would only hold them back behind unacknowledged
/// data. Returns the stream, a duplicate of its socket (for TCP_INFO), and the controller the
/// socket reports.
pub async fn tcp_connect(
    addr: SocketAddr,
    congestion: Option<&str>,
    fast_open: bool,
    receive_buffer: Option<u32>,
) -> Result<(TcpStream, Socket, String), ClientError> {
    let socket_err = |source| ClientError::Socket { addr, source };
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))
        .map_err(socket_err)?;
    let congestion = apply_congestion(&socket, congestion)?;
    if fast_open {
        set_fast_open_connect(&socket)?;
    }
    if let Some(n) = receive_buffer {
        // before connecting: the window scale offered in the SYN follows from it
        socket
            .set_recv_buffer_size(n as usize)
            .map_err(socket_err)?;
    }
    socket.set_tcp_nodelay(true).map_err(socket_err)?;
    socket.set_nonblocking(true).map_err(socket_err)?;
    let dup = socket.try_clone().map_err(socket_err)?;
    let std_stream: std::net::TcpStream = socket.into();
    let tcp = TcpSocket::from_std_stream(std_stream)
        .connect(addr)
        .await
        .map_err(|source| ClientError::Connect { addr, source })?;
    Ok((tcp, dup, congestion))
}

/// Fails unless net.ipv4.tcp_fastopen lets clients use Fast Open (bit 1); otherwise the socket
/// option would be accepted and silently do nothing.
fn check_fast_open_sysctl() -> Result<(), ClientError> {
    match fast_open_enabled(1).map_err(ClientError::FastOpen)? {
        (_, true) => Ok(()),
        (value, false) => Err(ClientError::FastOpenDisabled { value }),
    }
}

fn set_fast_open_connect(socket: &Socket) -> Result<(), ClientError> {
    set_tcp_option(socket, libc::TCP_FASTOPEN_CONNECT, 1).map_err(ClientError::FastOpen)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::{Server, ServerOptions};
    use crate::tls::{Identity, server_config};

    fn options(id: &Identity, http: HttpVersion, connection: ConnectionMode) -> ClientOptions {
        ClientOptions {
            http,
            connection,
            groups: vec![KxGroup::X25519, KxGroup::P256],
            ca_pem: id.chain_pem().to_string(),
            resume: false,
            tcp_congestion: Some("reno".to_string()),
            fast_open: false,
            receive_buffer: None,
            path_min_rtt_us: None,
            upload: None,
        }
    }

    /// Runs `f` against a loopback server accepting `groups`.
    fn with_server<F, Fut>(groups: &[KxGroup], f: F)
    where
        F: FnOnce(Arc<Identity>, SocketAddr) -> Fut,
        Fut: Future<Output = ()>,
    {
        serve(Some(groups), f)
    }

    /// Runs `f` against a loopback server: TLS accepting `groups`, or plain HTTP/1.1 without.
    fn serve<F, Fut>(groups: Option<&[KxGroup]>, f: F)
    where
        F: FnOnce(Arc<Identity>, SocketAddr) -> Fut,
        Fut: Future<Output = ()>,
    {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let id = Arc::new(Identity::self_signed().unwrap());
            let server = Server::bind(ServerOptions {
                listen: "127.0.0.1:0".parse().unwrap(),
                tls: groups.map(|g| server_config(&id, g).unwrap()),
                tcp_congestion: None,
                first_write: None,
                timeline: None,
                path_min_rtt_us: None,
                root: None,
                service: None,
                fast_open: false,
                limits: Default::default(),
            })
            .unwrap();
            let addr = server.local_addr();
            let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
            let task = tokio::spawn(server.run_until(
                async {
                    let _ = stop_rx.await;
                },
                |e| panic!("server: {e}"),
            ));
            f(id, addr).await;
            let _ = stop_tx.send(());
            task.await.unwrap();
        });
    }

    #[test]
    fn http_urls_go_over_plain_tcp_as_http11_only() {
        serve(None, |_, addr| async move {
            let mut opts = options(
                &Identity::self_signed().unwrap(),
                HttpVersion::Http11,
                ConnectionMode::Reuse,
            );
            // nothing to trust without TLS
            opts.ca_pem = String::new();
            let mut c = Client::new(opts.clone()).unwrap().requests();
            let a = c.fetch(&format!("http://{addr}/bytes/300000")).await;
            assert_eq!(a.error, None, "{a:?}");
            assert_eq!((a.status, a.bytes), (200, 300_000));
            // no TLS: no group, no ALPN, and the handshake is the TCP connection's
            assert_eq!(a.handshake, Handshake::default());
            assert!(a.new_connection && a.handshake_done_us.is_some());
            let b = c.fetch(&format!("http://{addr}/bytes/10")).await;
            assert_eq!((b.status, b.bytes, b.new_connection), (200, 10, false));
            // an https URL needs certificates this client was not given
            let e = c.fetch(&format!("https://{addr}/bytes/10")).await;
            assert!(e.error.unwrap().contains("no certificate to trust"));
            // HTTP/2 needs TLS here
            opts.http = HttpVersion::Http2;
            let e = Client::new(opts)
                .unwrap()
                .requests()
                .fetch(&format!("http://{addr}/bytes/10"))
                .await;
            assert!(e.error.unwrap().contains("HTTP/1.1 only"));
        });
    }

    #[test]
    fn downloads_verify_over_both_versions_and_connection_modes() {
        with_server(&[KxGroup::X25519, KxGroup::P256], |id, addr| async move {
            for http in [HttpVersion::Http11, HttpVersion::Http2] {
                for mode in [ConnectionMode::Reuse, ConnectionMode::New] {
                    let mut c = Client::new(options(&id, http, mode)).unwrap().requests();
                    let url = format!("https://{addr}/bytes/300000");
                    let a = c.fetch(&url).await;
                    let b = c.fetch(&url).await;
                    for r in [&a, &b] {
                        assert_eq!(r.error, None, "{r:?}");
                        assert_eq!((r.status, r.bytes, r.http), (200, 300_000, http));
                        assert_eq!(
                            r.transport_stats.congestion_control.as_deref(),
                            Some("reno")
                        );
                        assert_eq!(r.handshake.group.as_deref(), Some("x25519"));
                        assert!(!r.handshake.hello_retry && !r.handshake.resumed);
                        assert!(r.ttlb_ms.unwrap() >= r.ttfb_ms.unwrap());
                        assert!(r.transport_stats.smoothed_rtt_us.is_some());
                    }
                    assert!(a.new_connection && a.handshake_done_us.is_some());
                    assert_eq!(b.new_connection, mode == ConnectionMode::New, "{mode:?}");
                    assert_eq!(b.connection, u32::from(mode == ConnectionMode::New));
                    let nf = c.fetch(&format!("https://{addr}/nothing")).await;
                    assert_eq!((nf.status, nf.error), (404, None));
                    // an upload: every byte reaches /upload, whose answer counts them
                    let mut up = options(&id, http, mode);
                    up.upload = Some(300_000);
                    let r = Client::new(up)
                        .unwrap()
                        .requests()
                        .fetch(&format!("https://{addr}/upload"))
                        .await;
                    assert_eq!(r.error, None, "{r:?}");
                    assert_eq!(
                        (r.method.as_str(), r.status, r.sent_bytes),
                        ("POST", 200, 300_000)
                    );
                    assert!(r.ttlb_ms.unwrap() >= r.ttfb_ms.unwrap());
                }
            }
        });
    }

    #[test]
    fn hello_retry_and_resumption_are_reported() {
        with_server(&[KxGroup::P256], |id, addr| async move {
            let mut opts = options(&id, HttpVersion::Http2, ConnectionMode::New);
            opts.resume = true;
            let mut c = Client::new(opts).unwrap().requests();
            let url = format!("https://{addr}/bytes/10");
            let first = c.fetch(&url).await;
            assert_eq!(first.error, None);
            assert!(first.handshake.hello_retry && !first.handshake.resumed);
            assert_eq!(first.handshake.group.as_deref(), Some("p256"));
            assert_eq!(first.handshake.alpn.as_deref(), Some("h2"));
            let second = c.fetch(&url).await;
            assert_eq!(second.error, None);
            assert!(second.handshake.resumed, "{second:?}");
        });
    }

    #[test]
    fn wrong_trust_bad_urls_and_unknown_controllers_are_errors() {
        with_server(&[KxGroup::X25519], |id, addr| async move {
            let other = Identity::self_signed().unwrap();
            let mut c = Client::new(options(&other, HttpVersion::Http11, ConnectionMode::Reuse))
                .unwrap()
                .requests();
            let r = c.fetch(&format!("https://{addr}/bytes/1")).await;
            let e = r.error.unwrap();
            assert!(e.starts_with(&format!("TLS handshake with {addr}")), "{e}");

            let mut opts = options(&id, HttpVersion::Http11, ConnectionMode::Reuse);
            opts.tcp_congestion = Some("nosuchcc".into());
            let e = Client::new(opts.clone()).err().unwrap().to_string();
            assert!(
                e.contains("\"nosuchcc\" is not available (available: "),
                "{e}"
            );
            opts.tcp_congestion = None;
            let mut c = Client::new(opts).unwrap().requests();
            let e = c.fetch(&format!("ftp://{addr}/")).await.error.unwrap();
            assert!(e.contains("allowed: https:// URLs"), "{e}");
        });
        let id = Identity::self_signed().unwrap();
        let e = Client::new(options(&id, HttpVersion::Http3, ConnectionMode::New))
            .err()
            .unwrap();
        assert!(
            e.to_string().contains("HTTP/3 is not spoken over TCP"),
            "{e}"
        );
    }

    #[test]
    fn fast_open_connections_work_where_the_kernel_offers_it() {
        if check_fast_open_sysctl().is_err() {
            // the kernel keeps it from clients here: the client refuses before connecting
            let id = Identity::self_signed().unwrap();
            let mut opts = options(&id, HttpVersion::Http11, ConnectionMode::New);
            opts.fast_open = true;
            let e = Client::new(opts).err().expect("refused");
            assert!(e.to_string().contains("TCP Fast Open is off"), "{e}");
            return;
        }
        with_server(&[KxGroup::X25519], |id, addr| async move {
            let mut opts = options(&id, HttpVersion::Http11, ConnectionMode::New);
            opts.fast_open = true;
            let mut c = Client::new(opts).unwrap().requests();
            for _ in 0..2 {
                let r = c.fetch(&format!("https://{addr}/bytes/5000")).await;
                assert_eq!((r.error, r.status, r.bytes), (None, 200, 5000));
            }
        });
    }
}
