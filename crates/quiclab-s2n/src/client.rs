//! The HTTP/3 client over s2n-quic: a [`Connector`] of quiclab's one request loop, so its
//! records are those of every other client (byte times, handshake, the body checked against
//! the pattern).

use std::net::SocketAddr;

use bytes::{Buf, Bytes};
use http::Uri;
use quiclab_endpoint::requests::{Connector, Requests};
use quiclab_endpoint::routes::{expected_bytes, first_mismatch};
use quiclab_endpoint::url::Url;
use quiclab_model::record::{HttpVersion, RequestRecord, now_us};
use s2n_quic::client::Connect;
use s2n_quic::provider::congestion_controller::{Bbr, Cubic};

use crate::{ALPN_H3, Congestion, Error};

/// What the client is and does.
#[derive(Debug, Clone)]
pub struct ClientOptions {
    /// PEM certificates it trusts.
    pub ca_pem: String,
    pub congestion: Congestion,
    /// One connection per server for all requests (otherwise a new one each).
    pub reuse_connection: bool,
}

/// GETs `urls` in order: a record per request.
pub async fn get(urls: &[String], opts: &ClientOptions) -> Result<Vec<RequestRecord>, Error> {
    let client = S2nClient::new(opts.clone())?;
    Ok(Requests::new(client, opts.reuse_connection, None)
        .run(urls)
        .await)
}

/// quiclab's HTTP/3 client over s2n-quic.
pub struct S2nClient {
    opts: ClientOptions,
    /// One endpoint per address family (IPv6 or not), made when first needed.
    endpoints: Vec<(bool, s2n_quic::Client)>,
}

impl S2nClient {
    pub fn new(opts: ClientOptions) -> Result<S2nClient, Error> {
        // the trusted certificates are read now, so that a bad one fails before any request
        tls(&opts.ca_pem)?;
        Ok(S2nClient {
            opts,
            endpoints: Vec::new(),
        })
    }

    fn endpoint_for(&mut self, addr: SocketAddr) -> Result<s2n_quic::Client, Error> {
        let v6 = addr.is_ipv6();
        if let Some((_, c)) = self.endpoints.iter().find(|(f, _)| *f == v6) {
            return Ok(c.clone());
        }
        let bind = if v6 { "[::]:0" } else { "0.0.0.0:0" };
        let tls = tls(&self.opts.ca_pem)?;
        let builder = s2n_quic::Client::builder().with_tls(tls)?.with_io(bind)?;
        let client = match self.opts.congestion {
            Congestion::Cubic => builder
                .with_congestion_controller(Cubic::default())?
                .start()?,
            Congestion::Bbr => builder
                .with_congestion_controller(Bbr::default())?
                .start()?,
        };
        self.endpoints.push((v6, client.clone()));
        Ok(client)
    }
}

fn tls(ca_pem: &str) -> Result<s2n_quic::provider::tls::rustls::Client, Error> {
    s2n_quic::provider::tls::rustls::Client::builder()
        .with_certificate(ca_pem)?
        .with_application_protocols([ALPN_H3].iter())?
        .build()
}

/// Where a URL points.
pub struct Target {
    addr: SocketAddr,
    server_name: String,
    uri: Uri,
}

/// An open HTTP/3 connection.
pub struct Conn {
    handle: s2n_quic::connection::Handle,
    send: h3::client::SendRequest<crate::h3::OpenStreams, Bytes>,
    driver: tokio::task::JoinHandle<()>,
    addr: SocketAddr,
    server_name: String,
    handshake_done_us: u64,
    alpn: Option<String>,
    closed: bool,
}

impl Connector for S2nClient {
    type Target = Target;
    type Conn = Conn;
    type Error = Error;

    fn http(&self) -> HttpVersion {
        HttpVersion::Http3
    }

    fn target(&self, url: &str) -> Result<Target, Error> {
        let u = Url::parse_tls(url, "HTTP/3")?;
        Ok(Target {
            addr: u.resolve()?,
            server_name: u.host,
            uri: u.uri,
        })
    }

    fn can_reuse(&self, c: &Conn, t: &Target) -> bool {
        !c.closed && c.addr == t.addr && c.server_name == t.server_name
    }

    async fn connect(
        &mut self,
        t: &Target,
        _index: u32,
        _rec: &mut RequestRecord,
    ) -> Result<Conn, Error> {
        let endpoint = self.endpoint_for(t.addr)?;
        let connect = Connect::new(t.addr).with_server_name(t.server_name.as_str());
        // resolves once the handshake is complete
        let conn = endpoint.connect(connect).await?;
        let handshake_done_us = now_us();
        let alpn = conn
            .application_protocol()
            .ok()
            .map(|p| String::from_utf8_lossy(&p).into_owned());
        let conn = crate::h3::Connection::new(conn);
        let handle = conn.handle();
        let (mut driver, send) = h3::client::new(conn).await?;
        let driver = tokio::spawn(async move {
            let _ = std::future::poll_fn(|cx| driver.poll_close(cx)).await;
        });
        Ok(Conn {
            handle,
            send,
            driver,
            addr: t.addr,
            server_name: t.server_name.clone(),
            handshake_done_us,
            alpn,
            closed: false,
        })
    }

    async fn fetch(
        &mut self,
        c: &mut Conn,
        t: &Target,
        rec: &mut RequestRecord,
    ) -> Result<(), Error> {
        let result = fetch(c, t, rec).await;
        if result.is_err() {
            // a connection that failed a request carries no other
            c.closed = true;
        }
        if rec.new_connection {
            rec.handshake_done_us = Some(c.handshake_done_us);
        }
        rec.handshake.alpn = c.alpn.clone();
        rec.transport_stats.congestion_control = Some(self.opts.congestion.name().to_string());
        result
    }

    async fn close(&mut self, c: Conn) {
        c.handle.close(
            s2n_quic::application::Error::new(u64::from(h3::error::Code::H3_NO_ERROR))
                .expect("a small code"),
        );
        drop(c.send);
        c.driver.abort();
    }

    /// Lets the closes leave before the run ends.
    async fn finish(&mut self) {
        for (_, c) in &mut self.endpoints {
            let _ = c.wait_idle().await;
        }
    }
}

/// GETs `t` on `c` and receives the body, checking a `/bytes/N` body against the pattern.
async fn fetch(c: &mut Conn, t: &Target, rec: &mut RequestRecord) -> Result<(), Error> {
    if rec.sent_bytes > 0 {
        return Err("s2n-quic's client here only downloads".into());
    }
    let req = http::Request::get(t.uri.clone()).body(())?;
    let mut stream = c.send.send_request(req).await?;
    stream.finish().await?;
    let response = stream.recv_response().await?;
    rec.status = response.status().as_u16();
    let expected = expected_bytes(t.uri.path()).filter(|_| rec.status == 200);
    let mut mismatch = None;
    while let Some(mut chunk) = stream.recv_data().await? {
        if rec.first_byte_us.is_none() {
            rec.first_byte_us = Some(now_us());
        }
        while chunk.has_remaining() {
            let part = chunk.chunk();
            if expected.is_some() && mismatch.is_none() {
                mismatch = first_mismatch(rec.bytes, part);
            }
            let n = part.len();
            rec.bytes += n as u64;
            chunk.advance(n);
        }
    }
    rec.last_byte_us = Some(now_us());
    if let Some(m) = mismatch {
        return Err(format!(
            "body differs from the pattern at byte {}: got {}, expected {}",
            m.offset, m.got, m.expected
        )
        .into());
    }
    if let Some(n) = expected
        && n != rec.bytes
    {
        return Err(format!("body of {} bytes, expected {n}", rec.bytes).into());
    }
    Ok(())
}
