//! TLS 1.3 through rustls's QUIC API (ring provider): configurations with this protocol's ALPN,
//! the Initial keys' suite, and the transport parameters carried in the handshake.

use std::sync::Arc;

use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use crate::error::{ConfigError, WireError};
use crate::wire::{Reader, put_varint};

/// The ALPN protocol both sides must agree on.
pub const ALPN: &[u8] = b"quiclab-coded";

/// The suite of the Initial keys (TLS_AES_128_GCM_SHA256, as QUIC's Initial packets).
pub fn initial_suite() -> rustls::quic::Suite {
    match rustls::crypto::ring::cipher_suite::TLS13_AES_128_GCM_SHA256 {
        rustls::SupportedCipherSuite::Tls13(s) => s
            .quic_suite()
            .expect("ring's AES-128-GCM suite supports QUIC"),
        #[allow(unreachable_patterns)]
        _ => unreachable!("TLS13_AES_128_GCM_SHA256 is a TLS 1.3 suite"),
    }
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn config_error(field: &'static str, e: rustls::Error) -> ConfigError {
    ConfigError {
        field,
        value: e.to_string(),
        allowed: "a TLS 1.3 configuration rustls accepts".into(),
    }
}

/// A client configuration that trusts `roots` (DER certificates) and offers [`ALPN`].
pub fn client_config(
    roots: &[CertificateDer<'static>],
) -> Result<Arc<rustls::ClientConfig>, ConfigError> {
    let mut store = rustls::RootCertStore::empty();
    for cert in roots {
        store
            .add(cert.clone())
            .map_err(|e| config_error("root certificate", e))?;
    }
    let mut config = rustls::ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| config_error("client protocol versions", e))?
        .with_root_certificates(store)
        .with_no_client_auth();
    config.alpn_protocols = vec![ALPN.to_vec()];
    Ok(Arc::new(config))
}

/// A server configuration with one certificate chain and key, offering [`ALPN`] only.
pub fn server_config(
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
) -> Result<Arc<rustls::ServerConfig>, ConfigError> {
    let mut config = rustls::ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| config_error("server protocol versions", e))?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(|e| config_error("server certificate", e))?;
    config.alpn_protocols = vec![ALPN.to_vec()];
    // QUIC-style handshakes require 0 or 2^32-1 here; this protocol has no 0-RTT.
    config.max_early_data_size = 0;
    Ok(Arc::new(config))
}

/// What each side announces in the handshake.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TransportParams {
    /// Idle timeout in milliseconds (the smaller of both sides applies).
    pub idle_timeout_ms: u64,
    /// Largest UDP payload the sender of these parameters accepts.
    pub max_datagram: u64,
}

const PARAMS_FORMAT: u64 = 1;

impl TransportParams {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        put_varint(&mut out, PARAMS_FORMAT);
        put_varint(&mut out, self.idle_timeout_ms);
        put_varint(&mut out, self.max_datagram);
        out
    }

    pub fn decode(buf: &[u8]) -> Result<Self, WireError> {
        let mut r = Reader::new(buf);
        let format = r.varint("transport parameters format")?;
        if format != PARAMS_FORMAT {
            return Err(WireError::Invalid {
                field: "transport parameters format",
                value: format,
                allowed: "1",
            });
        }
        Ok(TransportParams {
            idle_timeout_ms: r.varint("idle timeout")?,
            max_datagram: r.varint("max datagram")?,
        })
    }
}
