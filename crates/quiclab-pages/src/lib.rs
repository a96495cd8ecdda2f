//! Web pages as quiclab loads them: manifests and a browser-like loader.
//!
//! - [`page`]: page manifests (built-in and from TOML), the loader's discovery and scheduling
//!   rules, and the page metrics (load time, visual progress).
//! - [`har`]: importing a manifest from a browser's HAR file.
//! - [`page_client`]: loads a page over HTTP/1.1 or HTTP/2 (`quiclab-tcp`) or HTTP/3
//!   (`quiclab-quic`), with or without RFC 9218 priorities, and reports every resource.
//! - [`site`]: a page as real web content (HTML, CSS, scripts, fonts, images) for a browser.
//!
//! Must never: know about plans, trials or the store; print.

pub mod har;
pub mod page;
pub mod page_client;
pub mod site;

use quiclab_endpoint::{errors, url};
use quiclab_quic as quic;
use quiclab_tcp::client;
