//! quiclab's transport stacks: the endpoints whose behaviour quiclab measures.
//!
//! - [`tls`]: certificates and rustls configurations (ring provider, TLS 1.3, chosen key-exchange
//!   groups).
//! - [`record`]: the JSON-lines records every client writes (requests, timeline samples).
//! - [`server`]: an HTTP/1.1 and HTTP/2 server over TCP and TLS with fixed-size downloads and
//!   uploads.

pub mod record;
pub mod server;
pub mod tls;
