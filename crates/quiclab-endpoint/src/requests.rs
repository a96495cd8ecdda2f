//! The one request loop of every client stack: a run fetches URLs in order, one request at a
//! time, and each request becomes exactly one [`RequestRecord`], a failure included.
//!
//! The loop owns what is the same for every stack: parsing the target, deciding whether the
//! open connection can carry the next request (`reuse`, same origin, still open), closing a
//! connection before the next one opens (two never compete), numbering connections, stating
//! the method and the bytes an upload sends, turning a failure into the record's `error` (the
//! error and its causes), and deriving the record's durations. A stack says how to connect,
//! how to fetch on a connection, and how to close one: that is a [`Connector`].
//!
//! Times: a request on a new connection counts from just before the connection opens (the
//! handshake is part of its time); on a reused connection from when the request is about to be
//! sent, which the connector may set more precisely (e.g. after waiting for the connection to
//! be ready).

use quiclab_model::record::{HttpVersion, RequestRecord, now_us};

use crate::errors::error_chain;

/// An error as a record states it.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// How one stack's client connects and fetches; [`Requests`] does the rest.
pub trait Connector {
    /// Where a URL points, as the stack needs it (address, TLS server name, path).
    type Target;
    /// An open connection.
    type Conn;
    /// A failure: of the URL, the connection or the request.
    type Error: Into<BoxError>;

    /// The protocol the records name.
    fn http(&self) -> HttpVersion;

    /// Parses and resolves `url`.
    fn target(&self, url: &str) -> Result<Self::Target, Self::Error>;

    /// Whether `conn`, opened earlier, can carry a request to `target`.
    fn can_reuse(&self, conn: &Self::Conn, target: &Self::Target) -> bool;

    /// Opens connection number `index` to `target`, handshakes included; may note the
    /// handshake's completion in `rec`.
    fn connect(
        &mut self,
        target: &Self::Target,
        index: u32,
        rec: &mut RequestRecord,
    ) -> impl Future<Output = Result<Self::Conn, Self::Error>>;

    /// Sends the request `rec` describes (a GET, or a POST of `rec.sent_bytes` bytes) on `conn`
    /// and fills in the rest of `rec`: status, bytes, byte times, handshake and transport facts.
    fn fetch(
        &mut self,
        conn: &mut Self::Conn,
        target: &Self::Target,
        rec: &mut RequestRecord,
    ) -> impl Future<Output = Result<(), Self::Error>>;

    /// Closes `conn`.
    fn close(&mut self, conn: Self::Conn) -> impl Future<Output = ()>;

    /// Called once after the last request: what the stack does before the run ends (e.g. let
    /// its closes leave).
    fn finish(&mut self) -> impl Future<Output = ()> {
        async {}
    }
}

/// A run of requests over one stack's client.
pub struct Requests<C: Connector> {
    connector: C,
    /// Keep a connection open between requests (otherwise every request opens its own).
    reuse: bool,
    /// POST this many bytes instead of a GET.
    upload: Option<u64>,
    open: Option<(u32, C::Conn)>,
    next_connection: u32,
}

impl<C: Connector> Requests<C> {
    pub fn new(connector: C, reuse: bool, upload: Option<u64>) -> Requests<C> {
        Requests {
            connector,
            reuse,
            upload,
            open: None,
            next_connection: 0,
        }
    }

    /// Fetches `url` and reports how it went.
    pub async fn fetch(&mut self, url: &str) -> RequestRecord {
        let http = self.connector.http();
        let target = match self.connector.target(url) {
            Ok(t) => t,
            Err(e) => {
                let mut rec = RequestRecord::get(http, url, self.next_connection, false, now_us());
                fail(&mut rec, e);
                return rec;
            }
        };
        let reusable = self.reuse
            && self
                .open
                .as_ref()
                .is_some_and(|(_, c)| self.connector.can_reuse(c, &target));
        if !reusable && let Some((_, old)) = self.open.take() {
            self.connector.close(old).await;
        }
        let mut rec = RequestRecord::get(http, url, self.next_connection, !reusable, now_us());
        if let Some(n) = self.upload {
            rec.method = "POST".into();
            rec.sent_bytes = n;
        }
        if !reusable {
            let index = self.next_connection;
            self.next_connection += 1;
            match self.connector.connect(&target, index, &mut rec).await {
                Ok(c) => self.open = Some((index, c)),
                Err(e) => {
                    fail(&mut rec, e);
                    return rec;
                }
            }
        }
        let Some((index, conn)) = self.open.as_mut() else {
            unreachable!("a connection was just opened or reused");
        };
        rec.connection = *index;
        let result = self.connector.fetch(conn, &target, &mut rec).await;
        match result {
            Ok(()) => rec.derive(),
            Err(e) => fail(&mut rec, e),
        }
        if !self.reuse
            && let Some((_, old)) = self.open.take()
        {
            self.connector.close(old).await;
        }
        rec
    }

    /// Fetches every URL in order, then closes.
    pub async fn run(mut self, urls: &[String]) -> Vec<RequestRecord> {
        let mut records = Vec::with_capacity(urls.len());
        for url in urls {
            records.push(self.fetch(url).await);
        }
        self.close().await;
        records
    }

    /// Closes the open connection and ends the run.
    pub async fn close(mut self) {
        if let Some((_, c)) = self.open.take() {
            self.connector.close(c).await;
        }
        self.connector.finish().await;
    }
}

fn fail(rec: &mut RequestRecord, e: impl Into<BoxError>) {
    let e: BoxError = e.into();
    rec.error = Some(error_chain(&*e));
    rec.derive();
}
