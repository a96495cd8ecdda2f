//! quiclab's transport stacks: the endpoints whose behaviour quiclab measures.
//!
//! - [`tls`]: certificates and rustls configurations (ring provider, TLS 1.3, chosen key-exchange
//!   groups).
//! - [`client`]: an HTTP/1.1 and HTTP/2 over TCP and TLS client that fills request records (`quiclab_model::record`).
//! - [`coded`]: the network-coded transport (`quiclab-coded`) with the same routes and
//!   records: a server and a client.
//! - [`requests`]: the one request loop every client runs: a stack's client is a
//!   [`requests::Connector`].
//! - [`routes`]: what every server answers to which request, and the `/bytes` pattern.
//! - [`url`]: the request URL every client parses.
//! - [`files`]: static files under a root directory, served without escaping it.
//! - [`tcpinfo`]: TCP_INFO of a socket, once or sampled as a timeline.
//! - [`qlog`]: one qlog file per QUIC connection.
//! - [`recording`]: a QUIC congestion controller wrapper that counts what quinn does not
//!   expose (acknowledged bytes, bytes in flight, RTT samples).
//! - [`timeline`]: the file servers write their connections' timelines to.
//! - [`server`]: an HTTP/1.1 and HTTP/2 server over TCP and TLS with fixed-size downloads and
//!   uploads.
//! - [`quic`]: HTTP/3 over QUIC (quinn, h3): options, a server with the same routes, a client that
//!   fills request records (`quiclab_model::record`).
//! - [`telemetry`]: timestamped units sent at a constant rate in flushes over TLS/TCP, one QUIC
//!   stream, a QUIC stream per flush or QUIC datagrams, and received with their latency (the
//!   head-of-line blocking workload).

pub mod client;
pub mod coded;
pub mod errors;
pub mod files;
pub mod h3prio;
pub mod har;
pub mod page;
pub mod page_client;
pub mod qlog;
pub mod quic;
pub mod recording;
pub mod requests;
pub mod routes;
pub mod server;
pub mod tcpinfo;
pub mod telemetry;
pub mod timeline;
pub mod tls;
pub mod url;
