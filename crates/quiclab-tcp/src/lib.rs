//! quiclab's HTTP/1.1 and HTTP/2 endpoints over kernel TCP (tokio, hyper, rustls with *ring*),
//! and plain HTTP/1.1 without TLS.
//!
//! - [`client`]: a client that fills request records (`quiclab_model::record`) through the one
//!   request loop (`quiclab_endpoint::requests`).
//! - [`server`]: a server with quiclab's routes (`quiclab_endpoint::routes`), fixed-size downloads
//!   and uploads, and a plug-in for one more TLS protocol ([`server::TlsService`]).
//! - [`tcpinfo`]: TCP socket options (congestion controller, Fast Open) and TCP_INFO, once or
//!   sampled as a timeline.
//!
//! Must never: know about plans, trials or the store, or about a workload's own protocol (that
//! plugs in as a service); print (warnings go through `log`).

pub mod client;
pub mod server;
pub mod tcpinfo;

use quiclab_endpoint::{files, requests, routes, timeline, tls, url};
