//! A real browser as quiclab's client: Chromium, headless, driven over the DevTools protocol.
//!
//! - [`cdp`]: the browser process and its DevTools pipe (a small client of the protocol: the
//!   dozen commands and events a page load needs, over `--remote-debugging-pipe`, so no port is
//!   opened and the browser ends with the pipe).
//! - [`load`]: one page load in a fresh profile, recorded as quiclab's page records (every
//!   resource's request, first and last byte and protocol from the network events) with the
//!   browser's own metrics: load event, first and largest contentful paint, Speed Index.
//! - [`object`]: one object fetched on a new connection, recorded as `quiclab get` records a
//!   request (the single-object workload's browser arm).
//! - [`visual`]: Speed Index from a filmstrip of screenshots (WebPageTest's histogram
//!   progress); pure arithmetic, tested on synthetic frames.
//! - [`spki`]: the certificate pin the browser trusts the lab's certificate by.
//!
//! Must never: know about plans, trials or the store; print.

pub mod cdp;
pub mod load;
pub mod object;
pub mod spki;
pub mod visual;
