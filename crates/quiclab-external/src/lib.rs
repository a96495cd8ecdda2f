//! External stacks: transport stacks whose endpoints are other programs (ngtcp2's examples, a
//! user's own build), described as data in a stack file (docs/stacks.md) and run by quiclab's
//! `external serve` and `external get` commands in a trial's namespaces.
//!
//! Contract:
//! - [`def`] parses and checks a stack file: programs, argument templates with placeholders,
//!   knobs and the arguments they become, the client's output lines that mark its times.
//!   Every error names the file, line and column and what is allowed.
//! - [`server`] prepares what a server needs (certificate and key, quiclab's byte pattern as
//!   documents), starts the program and reports it ready once it holds its UDP port.
//! - [`client`] runs the client once per URL and turns its output and download into quiclab's
//!   request records, the body checked byte for byte.
//! - A program started here never outlives the process that started it (parent-death signal),
//!   and is stopped by its own pid only.
//! - Nothing here knows plans, trials or the store.

pub mod client;
pub mod def;
pub mod qlog;
pub mod server;

pub use def::{DefError, Source, StackDef};
