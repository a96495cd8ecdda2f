//! Errors: what was wrong, with the field, the value and what is allowed.

/// A received byte sequence that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    #[error("truncated {what}")]
    Truncated { what: &'static str },
    #[error("{field} = {value}: allowed: {allowed}")]
    Invalid {
        field: &'static str,
        value: u64,
        allowed: &'static str,
    },
}

/// A rejected configuration value.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{field} = {value}: allowed: {allowed}")]
pub struct ConfigError {
    pub field: &'static str,
    pub value: String,
    pub allowed: String,
}

/// Why a connection ended or could not be used.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ConnectionError {
    #[error("tls: {0}")]
    Tls(String),
    #[error("protocol violation: {0}")]
    Protocol(String),
    #[error("closed by the peer with code {code}: {reason}")]
    PeerClosed { code: u64, reason: String },
    #[error("closed locally with code {code}")]
    LocallyClosed { code: u64 },
    #[error("idle for {idle_ms} ms (idle timeout)")]
    IdleTimeout { idle_ms: u64 },
    #[error(
        "packet number limit of the AEAD key reached ({limit} packets); key update is not supported"
    )]
    KeyLimit { limit: u64 },
}

/// A misuse of the application API.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StreamError {
    #[error("stream {id}: unknown stream")]
    Unknown { id: u64 },
    #[error("stream {id}: already finished for sending")]
    Finished { id: u64 },
    #[error("the connection is not established yet (handshake in progress)")]
    NotEstablished,
    #[error("the connection is closed")]
    Closed,
    #[error("only a client opens streams (a server answers on the client's stream)")]
    ServerCannotOpen,
}
