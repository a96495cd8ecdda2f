//! What every quiclab endpoint shares, whatever protocol carries it.
//!
//! - [`routes`]: what every server answers to which request, the `/bytes` pattern and
//!   [`routes::PatternBody`], the body made of it.
//! - [`url`]: the request URL every client parses.
//! - [`requests`]: the one request loop every client runs: a stack's client is a
//!   [`requests::Connector`].
//! - [`tls`]: certificates and rustls configurations (ring provider, TLS 1.3, chosen key-exchange
//!   groups, key logs).
//! - [`files`]: static files under a root directory, served without escaping it.
//! - [`timeline`]: the file servers write their connections' timelines to.
//! - [`priority`]: RFC 9218 priorities.
//! - [`errors`]: errors as record text, with their causes.
//!
//! The protocol crates build on it: `quiclab-tcp` (HTTP/1.1 and HTTP/2 over kernel TCP),
//! `quiclab-quic` (HTTP/3 over quinn), `quiclab-coded-udp` (the coded transport), and the
//! workload endpoints `quiclab-telemetry` and `quiclab-pages`.
//!
//! Must never: know about a particular transport's sockets, plans, trials or the store; print
//! (libraries warn through `log`).

pub mod errors;
pub mod files;
pub mod priority;
pub mod requests;
pub mod routes;
pub mod timeline;
pub mod tls;
pub mod url;

/// Counts of what a server did, returned when it stops.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ServeStats {
    pub connections: u64,
    pub failed: u64,
}
