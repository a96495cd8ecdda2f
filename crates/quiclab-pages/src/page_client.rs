//! Loads a [`Page`] like a browser: the IO around [`Loader`].
//!
//! Contract:
//! - Every resource is fetched as `GET {base}/bytes/{size}` from one origin: over HTTP/2 and
//!   HTTP/3 on one connection, over HTTP/1.1 on up to [`H1_CONNECTIONS`] connections (one request
//!   at a time each, opened as requests need them). A resource is requested as soon as the
//!   loader discovers it; with priorities on, each request carries its RFC 9218 `priority`
//!   header (HTTP/2 and HTTP/3 alike; which server honours it is the server's business).
//! - [`load`] never fails: a failure ends the load and is the record's `error`. A body whose
//!   length differs from the manifest's is a failure.
//! - Times are the host's monotonic clock ([`now_us`]); the record keeps them in milliseconds
//!   from the start of the load (the first connection attempt).

use std::sync::Arc;

use bytes::{Buf, Bytes};
use http_body_util::{BodyExt, Empty};
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use crate::client::{Client, ClientOptions, Connection, Sender};
use crate::page::{Kind, Loader, Page, PageMetrics};
use crate::quic::{self, QuicClientOptions};
use quiclab_model::record::{Handshake, HttpVersion, now_us};

/// Connections per origin a browser opens over HTTP/1.1.
pub const H1_CONNECTIONS: usize = 6;

/// One resource of a page load, times in milliseconds from the start of the load.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ResourceRecord {
    pub id: String,
    pub kind: Kind,
    pub bytes: u64,
    /// Index of the resource that discovered this one.
    pub parent: Option<usize>,
    pub critical: bool,
    pub above_fold: f64,
    pub main_image: bool,
    pub urgency: u8,
    pub incremental: bool,
    /// The connection that carried it (numbered from 0 in the order they were opened).
    pub connection: u32,
    pub discovered_ms: Option<f64>,
    pub start_ms: Option<f64>,
    pub first_byte_ms: Option<f64>,
    pub last_byte_ms: Option<f64>,
    /// The protocol that carried it as the client saw it ("h2", "h3"), where the client says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol: Option<String>,
}

/// What `quiclab page` reports for one page load.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PageRecord {
    pub page: String,
    pub http: HttpVersion,
    /// Whether requests carried RFC 9218 priorities.
    pub priorities_sent: bool,
    /// The load's start (first connection attempt), microseconds on the monotonic clock.
    pub start_us: u64,
    /// The first connection's handshake, milliseconds from the start.
    pub handshake_ms: Option<f64>,
    pub handshake: Handshake,
    pub connections: u32,
    pub bytes: u64,
    pub resources: Vec<ResourceRecord>,
    /// Present when every resource arrived.
    pub metrics: Option<PageMetrics>,
    pub error: Option<String>,
    /// What a real browser measured besides the network (a browser client's loads only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub browser: Option<BrowserMetrics>,
}

impl PageRecord {
    /// A load of `page` over `http` starting at `start_us`, before anything happened.
    pub fn new(page: &str, http: HttpVersion, priorities_sent: bool, start_us: u64) -> PageRecord {
        PageRecord {
            page: page.to_string(),
            http,
            priorities_sent,
            start_us,
            handshake_ms: None,
            handshake: Handshake::default(),
            connections: 0,
            bytes: 0,
            resources: Vec::new(),
            metrics: None,
            error: None,
            browser: None,
        }
    }
}

/// A real browser's own view of a page load, milliseconds from the navigation's start.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct BrowserMetrics {
    /// The browser and its version.
    pub browser: String,
    /// The load event (what S1 called page load time).
    pub load_event_ms: Option<f64>,
    pub dom_content_loaded_ms: Option<f64>,
    pub first_paint_ms: Option<f64>,
    pub first_contentful_paint_ms: Option<f64>,
    pub largest_contentful_paint_ms: Option<f64>,
    /// From the filmstrip of screenshots (WebPageTest's histogram progress).
    pub speed_index_ms: Option<f64>,
    pub visually_complete_ms: Option<f64>,
    pub first_visual_change_ms: Option<f64>,
    /// Screenshots the filmstrip had.
    pub frames: u32,
    /// (ms, visual completeness 0-1) per screenshot.
    pub visual_progress: Vec<(f64, f64)>,
    /// quiclab's page model applied to the browser's own arrival times: what the built-in
    /// loader would have computed from this load's network.
    pub model: Option<PageMetrics>,
    /// Every protocol the page's resources came over.
    pub protocols: Vec<String>,
    /// Scripts that ran, images decoded of those in the document, fonts loaded of those
    /// declared: the content was real.
    pub scripts_run: u32,
    pub images_decoded: u32,
    pub images: u32,
    pub fonts_loaded: u32,
    pub fonts: u32,
    /// Requests for what the page does not list (e.g. a favicon).
    pub extra_requests: u32,
}

/// Why a page load failed; the record keeps it with its causes.
#[derive(Debug, thiserror::Error)]
pub enum PageError {
    #[error(transparent)]
    Client(#[from] crate::client::ClientError),
    #[error(transparent)]
    Url(#[from] crate::url::UrlError),
    #[error(transparent)]
    Quic(#[from] quic::QuicError),
    #[error(transparent)]
    QuicRequest(#[from] quic::RequestError),
    #[error("bad URL from {base:?}")]
    BadUrl {
        base: String,
        #[source]
        source: http::uri::InvalidUri,
    },
    #[error("the request tasks ended early")]
    TasksEnded,
    #[error("resource {id:?} ({bytes} bytes): the body had {got} bytes")]
    BodyLength { id: String, bytes: u64, got: u64 },
    #[error("resource {id:?} ({bytes} bytes)")]
    Resource {
        id: String,
        bytes: u64,
        #[source]
        source: Box<PageError>,
    },
    #[error("building the request")]
    Request(#[source] http::Error),
    #[error("sending the request")]
    H3Send(#[source] h3::error::StreamError),
    #[error("receiving the response head")]
    H3ResponseHead(#[source] h3::error::StreamError),
    #[error("receiving the body after {received} bytes")]
    H3Body {
        received: u64,
        #[source]
        source: h3::error::StreamError,
    },
    #[error("status {0}")]
    Status(http::StatusCode),
    #[error("sending the request")]
    Send(#[source] hyper::Error),
    #[error("receiving the body after {received} bytes")]
    Body {
        received: u64,
        #[source]
        source: hyper::Error,
    },
    #[error("{version}")]
    NotReady {
        version: &'static str,
        #[source]
        source: hyper::Error,
    },
    #[error("an HTTP/1.1 connection was expected")]
    NotHttp11,
}

/// The transport to load a page over.
pub enum Stack {
    /// HTTP/1.1 or HTTP/2 over TCP and TLS (the options' `connection` mode is not used).
    Tcp(ClientOptions),
    /// HTTP/3 over QUIC (resumption and connection reuse settings are not used).
    Quic(QuicClientOptions),
}

enum Event {
    /// An HTTP/1.1 connection finished its handshake.
    Connected(u64),
    FirstByte(usize, u64),
    Done {
        i: usize,
        at_us: u64,
        result: Result<u64, Box<PageError>>,
        /// An HTTP/1.1 connection handed back for the next request.
        conn: Option<Connection>,
    },
}

/// Loads `page` from `base` (`https://host[:port]`) and reports it.
pub async fn load(page: &Page, base: &str, stack: &Stack, send_priorities: bool) -> PageRecord {
    let http = match stack {
        Stack::Tcp(o) => o.http,
        Stack::Quic(_) => HttpVersion::Http3,
    };
    let start_us = now_us();
    let mut record = PageRecord::new(&page.name, http, send_priorities, start_us);
    let limit = (http == HttpVersion::Http11).then_some(H1_CONNECTIONS);
    let mut loader = Loader::new(page.clone(), limit, start_us);
    let mut carried = vec![0u32; page.resources.len()];
    let base = base.trim_end_matches('/').to_string();
    let run = match stack {
        Stack::Quic(o) => run_h3(&mut loader, &base, o, send_priorities, &mut record).await,
        Stack::Tcp(o) => {
            run_tcp(
                &mut loader,
                &base,
                o,
                send_priorities,
                &mut record,
                &mut carried,
            )
            .await
        }
    };
    if let Err(e) = run {
        record.error = Some(crate::errors::error_chain(&e));
    }
    let ms = |t: Option<u64>| t.map(|t| t.saturating_sub(start_us) as f64 / 1000.0);
    record.resources = page
        .resources
        .iter()
        .zip(loader.timings())
        .zip(&carried)
        .map(|((r, t), &c)| ResourceRecord {
            id: r.id.clone(),
            kind: r.kind,
            bytes: r.bytes,
            parent: r.parent,
            critical: r.critical,
            above_fold: r.above_fold,
            main_image: r.main_image,
            urgency: r.priority.urgency,
            incremental: r.priority.incremental,
            connection: c,
            discovered_ms: ms(t.discovered_us),
            start_ms: ms(t.request_us),
            first_byte_ms: ms(t.first_byte_us),
            last_byte_ms: ms(t.last_byte_us),
            protocol: None,
        })
        .collect();
    record.bytes = page
        .resources
        .iter()
        .zip(loader.timings())
        .filter(|(_, t)| t.last_byte_us.is_some())
        .map(|(r, _)| r.bytes)
        .sum();
    record.metrics = PageMetrics::compute(page, loader.timings(), start_us);
    record
}

fn url(base: &str, bytes: u64) -> String {
    format!("{base}/bytes/{bytes}")
}

/// Feeds an event to the loader; an error ends the load.
fn apply(loader: &mut Loader, ev: Event) -> Result<Option<Connection>, PageError> {
    match ev {
        Event::FirstByte(i, t) => {
            loader.first_byte(i, t);
            Ok(None)
        }
        Event::Connected(_) => Ok(None),
        Event::Done {
            i,
            at_us,
            result,
            conn,
        } => {
            let r = &loader.page().resources[i];
            let (id, bytes) = (r.id.clone(), r.bytes);
            match result {
                Ok(n) if n == bytes => {
                    loader.complete(i, at_us);
                    Ok(conn)
                }
                Ok(got) => Err(PageError::BodyLength { id, bytes, got }),
                Err(e) => Err(PageError::Resource {
                    id,
                    bytes,
                    source: e,
                }),
            }
        }
    }
}

async fn run_h3(
    loader: &mut Loader,
    base: &str,
    opts: &QuicClientOptions,
    send_priorities: bool,
    record: &mut PageRecord,
) -> Result<(), PageError> {
    let tls = quic::client_tls(opts)?;
    let t = quic::target(base)?;
    let mut endpoints = Vec::new();
    let endpoint = quic::endpoint_for(&mut endpoints, t.addr, &opts.quic)?;
    let conn = quic::connect(&endpoint, &tls, opts, &t, 0).await?;
    record.connections = 1;
    record.handshake = conn.handshake.clone();
    record.handshake_ms = conn
        .handshake_done_us
        .map(|d| d.saturating_sub(record.start_us) as f64 / 1000.0);
    let (tx, mut rx) = mpsc::unbounded_channel();
    let mut tasks = JoinSet::new();
    let result = loop {
        while let Some(i) = loader.next_request(now_us()) {
            let r = &loader.page().resources[i];
            let uri: http::Uri = match url(base, r.bytes).parse() {
                Ok(u) => u,
                Err(source) => {
                    return Err(PageError::BadUrl {
                        base: base.to_string(),
                        source,
                    });
                }
            };
            let prio = send_priorities.then(|| r.priority.header());
            // opened here, one after another, so that streams are numbered in request order
            // as a browser's are (spawned tasks would open them in whatever order they run)
            let mut send = conn.send.clone();
            let stream = h3_request(&mut send, uri, prio).await;
            let tx = tx.clone();
            tasks.spawn(async move {
                let result = match stream {
                    Ok(stream) => h3_response(stream, i, &tx).await,
                    Err(e) => Err(e),
                };
                let _ = tx.send(Event::Done {
                    i,
                    at_us: now_us(),
                    result: result.map_err(Box::new),
                    conn: None,
                });
            });
        }
        if loader.done() {
            break Ok(());
        }
        let Some(ev) = rx.recv().await else {
            break Err(PageError::TasksEnded);
        };
        if let Err(e) = apply(loader, ev) {
            break Err(e);
        }
    };
    tasks.shutdown().await;
    quic::close(conn).await;
    result
}

type H3Stream = h3::client::RequestStream<h3_quinn::BidiStream<Bytes>, Bytes>;

/// Opens a request stream and sends the request on it.
async fn h3_request(
    send: &mut h3::client::SendRequest<h3_quinn::OpenStreams, Bytes>,
    uri: http::Uri,
    priority: Option<String>,
) -> Result<H3Stream, PageError> {
    let mut req = http::Request::get(uri);
    if let Some(p) = priority {
        req = req.header("priority", p);
    }
    let req = req.body(()).map_err(PageError::Request)?;
    let mut stream = send.send_request(req).await.map_err(PageError::H3Send)?;
    // a server may stop reading a request it has whole; the response still counts
    let _ = stream.finish().await;
    Ok(stream)
}

/// Receives a response, reporting its first byte; the body's length.
async fn h3_response(
    mut stream: H3Stream,
    i: usize,
    tx: &mpsc::UnboundedSender<Event>,
) -> Result<u64, PageError> {
    let response = stream
        .recv_response()
        .await
        .map_err(PageError::H3ResponseHead)?;
    if response.status() != http::StatusCode::OK {
        return Err(PageError::Status(response.status()));
    }
    let mut n = 0u64;
    while let Some(chunk) = stream
        .recv_data()
        .await
        .map_err(|source| PageError::H3Body {
            received: n,
            source,
        })?
    {
        if n == 0 && chunk.has_remaining() {
            let _ = tx.send(Event::FirstByte(i, now_us()));
        }
        n += chunk.remaining() as u64;
    }
    Ok(n)
}

async fn run_tcp(
    loader: &mut Loader,
    base: &str,
    opts: &ClientOptions,
    send_priorities: bool,
    record: &mut PageRecord,
    carried: &mut [u32],
) -> Result<(), PageError> {
    let client = Arc::new(Client::new(opts.clone())?);
    let target = crate::url::Url::parse(base)?;
    let h2 = opts.http == HttpVersion::Http2;
    // HTTP/2: one connection, opened before the document's request; HTTP/1.1: opened on demand
    let mut shared: Option<Connection> = None;
    let mut idle: Vec<Connection> = Vec::new();
    let mut opened = 0u32;
    if h2 {
        let c = client.open(&target, 0).await?;
        opened = 1;
        record.handshake = c.handshake.clone();
        record.handshake_ms = Some(now_us().saturating_sub(record.start_us) as f64 / 1000.0);
        shared = Some(c);
    }
    let (tx, mut rx) = mpsc::unbounded_channel();
    let mut tasks = JoinSet::new();
    let result = loop {
        while let Some(i) = loader.next_request(now_us()) {
            let r = &loader.page().resources[i];
            let path = format!("{}/bytes/{}", target.path.trim_end_matches('/'), r.bytes);
            let uri = url(base, r.bytes);
            let prio = send_priorities.then(|| r.priority.header());
            let tx = tx.clone();
            if let Some(c) = &shared {
                let Sender::H2(s) = &c.sender else {
                    unreachable!("the shared connection is HTTP/2")
                };
                carried[i] = c.index;
                // queued on the connection here, in request order; answered in a task
                let response = h2_send(&mut s.clone(), uri, prio).await;
                tasks.spawn(async move {
                    let result = match response {
                        Ok(response) => match response.await {
                            Ok(r) => read_body(r, i, &tx).await,
                            Err(e) => Err(PageError::Send(e)),
                        },
                        Err(e) => Err(e),
                    };
                    let _ = tx.send(Event::Done {
                        i,
                        at_us: now_us(),
                        result: result.map_err(Box::new),
                        conn: None,
                    });
                });
                continue;
            }
            // HTTP/1.1: an idle connection, or a new one (the loader keeps at most
            // H1_CONNECTIONS requests out, so there is always one or the other)
            let reuse = idle.pop();
            let index = match &reuse {
                Some(c) => c.index,
                None => {
                    opened += 1;
                    opened - 1
                }
            };
            carried[i] = index;
            let (client, target_authority) = (client.clone(), target.authority.clone());
            let base = base.to_string();
            tasks.spawn(async move {
                let conn = match reuse {
                    Some(c) => Ok(c),
                    None => match crate::url::Url::parse(&base) {
                        Ok(t) => client
                            .open(&t, index)
                            .await
                            .inspect(|_| {
                                let _ = tx.send(Event::Connected(now_us()));
                            })
                            .map_err(PageError::from),
                        Err(e) => Err(PageError::from(e)),
                    },
                };
                let (result, conn) = match conn {
                    Ok(mut c) => {
                        let r = h1_get(&mut c, &target_authority, &path, prio, i, &tx).await;
                        (r, Some(c))
                    }
                    Err(e) => (Err(e), None),
                };
                let _ = tx.send(Event::Done {
                    i,
                    at_us: now_us(),
                    result: result.map_err(Box::new),
                    conn,
                });
            });
        }
        if loader.done() {
            break Ok(());
        }
        let Some(ev) = rx.recv().await else {
            break Err(PageError::TasksEnded);
        };
        // a connection of HTTP/1.1 finished its handshake (the first one times the record's)
        if let Event::Connected(t) = ev {
            if record.handshake_ms.is_none() {
                record.handshake_ms = Some(t.saturating_sub(record.start_us) as f64 / 1000.0);
            }
            continue;
        }
        match apply(loader, ev) {
            Ok(Some(c)) => {
                if record.handshake.alpn.is_none() {
                    record.handshake = c.handshake.clone();
                }
                idle.push(c);
            }
            Ok(None) => {}
            Err(e) => break Err(e),
        }
    };
    record.connections = opened;
    tasks.shutdown().await;
    result
}

async fn read_body(
    response: hyper::Response<hyper::body::Incoming>,
    i: usize,
    tx: &mpsc::UnboundedSender<Event>,
) -> Result<u64, PageError> {
    if response.status() != hyper::StatusCode::OK {
        return Err(PageError::Status(response.status()));
    }
    let mut body = response.into_body();
    let mut n = 0u64;
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|source| PageError::Body {
            received: n,
            source,
        })?;
        if let Some(d) = frame.data_ref() {
            if n == 0 && !d.is_empty() {
                let _ = tx.send(Event::FirstByte(i, now_us()));
            }
            n += d.len() as u64;
        }
    }
    Ok(n)
}

/// Queues a request on an HTTP/2 connection; the future resolves to its response.
async fn h2_send(
    s: &mut hyper::client::conn::http2::SendRequest<crate::client::ReqBody>,
    uri: String,
    priority: Option<String>,
) -> Result<
    impl Future<Output = hyper::Result<hyper::Response<hyper::body::Incoming>>> + use<>,
    PageError,
> {
    let mut req = hyper::Request::get(uri.as_str());
    if let Some(p) = priority {
        req = req.header("priority", p);
    }
    let req = req
        .body(http_body_util::Either::Left(Empty::new()))
        .map_err(PageError::Request)?;
    s.ready().await.map_err(|source| PageError::NotReady {
        version: "HTTP/2",
        source,
    })?;
    Ok(s.send_request(req))
}

async fn h1_get(
    c: &mut Connection,
    authority: &str,
    path: &str,
    priority: Option<String>,
    i: usize,
    tx: &mpsc::UnboundedSender<Event>,
) -> Result<u64, PageError> {
    let Sender::H1(s) = &mut c.sender else {
        return Err(PageError::NotHttp11);
    };
    let mut req = hyper::Request::get(path).header(hyper::header::HOST, authority);
    if let Some(p) = priority {
        req = req.header("priority", p);
    }
    let req = req
        .body(http_body_util::Either::Left(Empty::new()))
        .map_err(PageError::Request)?;
    s.ready().await.map_err(|source| PageError::NotReady {
        version: "HTTP/1.1",
        source,
    })?;
    let response = s.send_request(req).await.map_err(PageError::Send)?;
    read_body(response, i, tx).await
}
