//! The HTTP/3 server over s2n-quic: quiclab's routes (`GET /bytes/N` sends N pattern bytes, held
//! as long as its `delay-us` asks; `POST /upload` answers with the count it read; anything else
//! is 404), and its sending side's timeline from s2n-quic's events.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use bytes::{Buf, Bytes};
use http::{Request, Response, StatusCode};
use quiclab_endpoint::routes::{Route, held, pattern_chunk, route};
use quiclab_endpoint::timeline::TimelineWriter;
use s2n_quic::provider::congestion_controller::{self, Bbr, Cubic};
use tokio::task::JoinSet;

use crate::timeline::Timeline;
use crate::{ALPN_H3, Congestion, Error};

/// What the server is.
pub struct ServerOptions {
    /// UDP address to listen on.
    pub listen: SocketAddr,
    /// PEM certificate chain (leaf first) and its private key.
    pub cert_pem: String,
    pub key_pem: String,
    pub congestion: Congestion,
    /// Where every connection's sending side is sampled.
    pub timeline: Option<TimelineWriter>,
    /// The path's minimum RTT, µs: RTT samples below it are counted as impossible.
    pub path_min_rtt_us: Option<u64>,
}

/// What a run of the server served.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ServeStats {
    pub connections: u64,
    /// Connections that ended in an error other than a clean close.
    pub failed: u64,
}

/// A bound server, listening.
pub struct Bound {
    server: s2n_quic::Server,
    timeline: Option<Arc<TimelineWriter>>,
}

/// Binds the server: it listens once this returns.
pub fn bind(opts: ServerOptions) -> Result<Bound, Error> {
    let tls = s2n_quic::provider::tls::rustls::Server::builder()
        .with_certificate(opts.cert_pem.as_str(), opts.key_pem.as_str())?
        .with_application_protocols([ALPN_H3].iter())?
        .build()?;
    let timeline = opts.timeline.map(Arc::new);
    let events = Timeline {
        writer: timeline.clone(),
        path_min_rtt_us: opts.path_min_rtt_us,
    };
    let server = match opts.congestion {
        Congestion::Cubic => start(Cubic::default(), tls, opts.listen, events)?,
        Congestion::Bbr => start(Bbr::default(), tls, opts.listen, events)?,
    };
    Ok(Bound { server, timeline })
}

fn start(
    cc: impl congestion_controller::Provider,
    tls: s2n_quic::provider::tls::rustls::Server,
    listen: SocketAddr,
    events: Timeline,
) -> Result<s2n_quic::Server, Error> {
    Ok(s2n_quic::Server::builder()
        .with_tls(tls)?
        .with_io(listen)?
        .with_congestion_controller(cc)?
        .with_event(events)?
        .start()?)
}

impl Bound {
    /// The address it listens on.
    pub fn local_addr(&self) -> Result<SocketAddr, Error> {
        Ok(self.server.local_addr()?)
    }

    /// Serves until `stop` resolves, then lets every connection's requests end; `on_error` hears
    /// of every connection that failed.
    pub async fn run_until(
        mut self,
        stop: impl Future<Output = ()>,
        on_error: impl Fn(Error) + Send + Sync + 'static,
    ) -> ServeStats {
        let on_error = Arc::new(on_error);
        let mut stats = ServeStats::default();
        let mut connections = JoinSet::new();
        tokio::pin!(stop);
        loop {
            tokio::select! {
                _ = &mut stop => break,
                conn = self.server.accept() => {
                    let Some(conn) = conn else { break };
                    stats.connections += 1;
                    connections.spawn(serve_connection(conn));
                }
                Some(done) = connections.join_next(), if !connections.is_empty() => {
                    if let Ok(Err(e)) = done {
                        stats.failed += 1;
                        on_error(e);
                    }
                }
            }
        }
        connections.abort_all();
        while let Some(done) = connections.join_next().await {
            if let Ok(Err(e)) = done {
                stats.failed += 1;
                on_error(e);
            }
        }
        // the closes sampled last are written before the run ends
        if let Some(t) = &self.timeline
            && let Err(e) = t.flush()
        {
            on_error(format!("writing the timeline: {e}").into());
        }
        stats
    }
}

/// Serves one connection's requests until the client closes it.
async fn serve_connection(conn: s2n_quic::Connection) -> Result<(), Error> {
    let mut h3conn: h3::server::Connection<crate::h3::Connection, Bytes> =
        h3::server::Connection::new(crate::h3::Connection::new(conn)).await?;
    let mut requests = JoinSet::new();
    let result = loop {
        match h3conn.accept().await {
            Ok(Some(resolver)) => {
                requests.spawn(async move {
                    let (req, mut stream) = resolver.resolve_request().await?;
                    handle(req, &mut stream).await
                });
            }
            Ok(None) => break Ok(()),
            Err(e) if e.is_h3_no_error() => break Ok(()),
            // the client closing or abandoning the connection after its last request is the
            // normal end, whatever code it closes with
            Err(h3::error::ConnectionError::Remote {
                0:
                    h3::quic::ConnectionErrorIncoming::ApplicationClose { .. }
                    | h3::quic::ConnectionErrorIncoming::Timeout,
                ..
            })
            | Err(h3::error::ConnectionError::Timeout { .. }) => break Ok(()),
            Err(e) => break Err(Error::from(e)),
        }
    };
    while requests.join_next().await.is_some() {}
    result
}

type Stream = h3::server::RequestStream<crate::h3::BidiStream<Bytes>, Bytes>;

async fn handle(req: Request<()>, stream: &mut Stream) -> Result<(), h3::error::StreamError> {
    let head = |status: StatusCode| Response::builder().status(status);
    match route(req.method().as_str(), req.uri().path(), false) {
        Route::Bytes(n) => {
            // a think time the request asks for, before the response's head
            if let Some(d) = held(req.uri().query()) {
                tokio::time::sleep(d).await;
            }
            // a status and a number: always a valid head
            let response = head(StatusCode::OK)
                .header(http::header::CONTENT_LENGTH, n)
                .body(())
                .expect("valid response head");
            stream.send_response(response).await?;
            let pattern = pattern_chunk();
            let mut remaining = n;
            while remaining > 0 {
                // every chunk but the last is whole, so each one starts at pattern phase 0
                let k = remaining.min(pattern.len() as u64) as usize;
                stream.send_data(pattern.slice(..k)).await?;
                remaining -= k as u64;
            }
            stream.finish().await
        }
        Route::Upload => {
            let mut received: u64 = 0;
            while let Some(chunk) = stream.recv_data().await? {
                received += chunk.remaining() as u64;
            }
            send_text(stream, StatusCode::OK, format!("{received}\n")).await
        }
        Route::BadRequest(msg) => send_text(stream, StatusCode::BAD_REQUEST, msg).await,
        Route::File | Route::NotFound => {
            send_text(stream, StatusCode::NOT_FOUND, "not found\n".into()).await
        }
    }
}

async fn send_text(
    stream: &mut Stream,
    status: StatusCode,
    body: String,
) -> Result<(), h3::error::StreamError> {
    // a status and a static content type: always a valid head
    let response = Response::builder()
        .status(status)
        .header(http::header::CONTENT_TYPE, "text/plain")
        .body(())
        .expect("valid response head");
    stream.send_response(response).await?;
    stream.send_data(Bytes::from(body)).await?;
    stream.finish().await
}

/// Runs the server until `stop` resolves: a [`bind`] and its [`Bound::run_until`].
pub async fn serve(
    opts: ServerOptions,
    stop: impl Future<Output = ()>,
    on_error: impl Fn(Error) + Send + Sync + 'static,
) -> Result<ServeStats, Error> {
    Ok(bind(opts)?.run_until(stop, on_error).await)
}
