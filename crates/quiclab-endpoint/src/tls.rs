//! TLS for quiclab's servers.
//!
//! Contract:
//! - [`Identity`] is a certificate chain with its private key: either a fresh self-signed
//!   certificate made for one run ([`Identity::self_signed`], valid for the names and addresses
//!   in [`SELF_SIGNED_NAMES`]) or PEM files given by the user ([`Identity::from_pem_files`]). Its
//!   PEM text can be handed to clients so that they trust it.
//! - [`server_config`] builds a rustls server configuration that always uses the *ring* crypto
//!   provider, offers TLS 1.3 only, and accepts exactly the key-exchange groups given, in that
//!   order of preference. Nothing is left to rustls's defaults that would change what goes on the
//!   wire between builds (the default provider, aws-lc-rs, puts a post-quantum hybrid group
//!   first, which makes handshakes larger).
//! - ALPN offers HTTP/2 first, then HTTP/1.1.

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;

use rustls::crypto::{CryptoProvider, SupportedKxGroup, ring as ring_provider};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

/// The names and addresses a self-signed certificate is valid for: the server's name and
/// addresses on a quiclab link (see `quiclab link`) and the loopback ones.
pub const SELF_SIGNED_NAMES: &[&str] = &["localhost", "198.18.0.2", "fd51:c1ab::2", "127.0.0.1"];

/// ALPN protocol identifier of HTTP/2.
pub const ALPN_H2: &[u8] = b"h2";
/// ALPN protocol identifier of HTTP/1.1.
pub const ALPN_HTTP11: &[u8] = b"http/1.1";

/// Errors from building TLS identities and configurations.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error(
        "unknown key-exchange group {name:?} (allowed: {})",
        KxGroup::allowed()
    )]
    UnknownGroup { name: String },
    #[error("no key-exchange group given (allowed: {})", KxGroup::allowed())]
    NoGroups,
    #[error("key-exchange group {0} is listed twice")]
    DuplicateGroup(KxGroup),
    #[error("generating a self-signed certificate")]
    Generate(#[source] rcgen::Error),
    #[error("reading the {what} from {}", path.display())]
    Pem {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: rustls::pki_types::pem::Error,
    },
    #[error("{} holds no certificate", .0.display())]
    NoCertificate(PathBuf),
    #[error("building the TLS server configuration")]
    Config(#[source] rustls::Error),
}

/// A key-exchange group the server can accept, named as on the command line (and in a task).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum KxGroup {
    X25519,
    P256,
    P384,
}

impl KxGroup {
    /// Every group, in the order they are listed in messages.
    pub const ALL: [KxGroup; 3] = [KxGroup::X25519, KxGroup::P256, KxGroup::P384];

    /// The group's command-line name.
    pub fn name(self) -> &'static str {
        match self {
            KxGroup::X25519 => "x25519",
            KxGroup::P256 => "p256",
            KxGroup::P384 => "p384",
        }
    }

    fn allowed() -> String {
        Self::ALL.map(Self::name).join(", ")
    }

    pub fn rustls(self) -> &'static dyn SupportedKxGroup {
        match self {
            KxGroup::X25519 => ring_provider::kx_group::X25519,
            KxGroup::P256 => ring_provider::kx_group::SECP256R1,
            KxGroup::P384 => ring_provider::kx_group::SECP384R1,
        }
    }

    /// Parses a comma-separated list such as `x25519,p256`, keeping its order (the server's
    /// preference). The list must be non-empty and name each group once.
    pub fn parse_list(list: &str) -> Result<Vec<KxGroup>, TlsError> {
        let mut groups = Vec::new();
        for name in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let g: KxGroup = name.parse()?;
            if groups.contains(&g) {
                return Err(TlsError::DuplicateGroup(g));
            }
            groups.push(g);
        }
        if groups.is_empty() {
            return Err(TlsError::NoGroups);
        }
        Ok(groups)
    }
}

impl FromStr for KxGroup {
    type Err = TlsError;

    fn from_str(s: &str) -> Result<Self, TlsError> {
        Self::ALL
            .into_iter()
            .find(|g| g.name().eq_ignore_ascii_case(s))
            .ok_or_else(|| TlsError::UnknownGroup {
                name: s.to_string(),
            })
    }
}

impl fmt::Display for KxGroup {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl KxGroup {
    /// The group of a rustls group name, if it is one of ours.
    pub fn of(named: rustls::NamedGroup) -> Option<KxGroup> {
        Self::ALL.into_iter().find(|g| g.rustls().name() == named)
    }
}

/// The key-exchange groups a TLS client started, in order. The first is the key share of its
/// ClientHello; a second means the server asked for another (a HelloRetryRequest, one more round
/// trip); the last is the group the handshake used. QUIC stacks do not expose the handshake
/// kind, so this is how a QUIC client learns it.
#[derive(Debug, Default)]
pub struct KxLog(std::sync::Mutex<Vec<rustls::NamedGroup>>);

impl KxLog {
    pub fn started(&self) -> Vec<rustls::NamedGroup> {
        self.0.lock().map(|v| v.clone()).unwrap_or_default()
    }

    /// True when more than one key share was made: the server sent a HelloRetryRequest.
    pub fn hello_retry(&self) -> bool {
        self.started().len() > 1
    }

    /// The group finally used, by its command-line name.
    pub fn group(&self) -> Option<String> {
        let last = *self.started().last()?;
        Some(KxGroup::of(last).map_or_else(|| format!("{last:?}"), |g| g.name().to_string()))
    }
}

/// A group that notes each key share it makes in a [`KxLog`].
#[derive(Debug)]
struct LoggedGroup {
    inner: &'static dyn SupportedKxGroup,
    log: Arc<KxLog>,
}

impl SupportedKxGroup for LoggedGroup {
    fn start(&self) -> Result<Box<dyn rustls::crypto::ActiveKeyExchange>, rustls::Error> {
        if let Ok(mut v) = self.log.0.lock() {
            v.push(self.inner.name());
        }
        self.inner.start()
    }
    fn ffdhe_group(&self) -> Option<rustls::ffdhe_groups::FfdheGroup<'static>> {
        self.inner.ffdhe_group()
    }
    fn name(&self) -> rustls::NamedGroup {
        self.inner.name()
    }
    fn fips(&self) -> bool {
        self.inner.fips()
    }
    fn usable_for_version(&self, version: rustls::ProtocolVersion) -> bool {
        self.inner.usable_for_version(version)
    }
}

/// A client's crypto provider for one connection (ring, `groups` in order), whose key shares
/// are noted in `log`.
pub fn logged_provider(groups: &[KxGroup], log: &Arc<KxLog>) -> Arc<CryptoProvider> {
    let kx_groups = groups
        .iter()
        .map(|g| {
            // rustls holds groups by 'static reference. One small wrapper per group and
            // connection is leaked; a client run makes a bounded number of connections.
            let logged: &'static LoggedGroup = Box::leak(Box::new(LoggedGroup {
                inner: g.rustls(),
                log: log.clone(),
            }));
            logged as &'static dyn SupportedKxGroup
        })
        .collect();
    Arc::new(CryptoProvider {
        kx_groups,
        ..ring_provider::default_provider()
    })
}

/// Where TLS secrets go: the file named by the environment variable SSLKEYLOGFILE (NSS key log
/// format, which Wireshark reads to decrypt TLS over TCP and QUIC), appended to; nowhere when
/// it is unset. Every configuration quiclab builds, client and server, TCP and QUIC, uses it.
pub fn key_log() -> Arc<dyn rustls::KeyLog> {
    Arc::new(rustls::KeyLogFile::new())
}

/// A certificate chain (leaf first) with its private key.
pub struct Identity {
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
    chain_pem: String,
    key_pem: String,
}

impl Identity {
    /// A fresh self-signed certificate (ECDSA P-256) for [`SELF_SIGNED_NAMES`].
    pub fn self_signed() -> Result<Self, TlsError> {
        let names: Vec<String> = SELF_SIGNED_NAMES.iter().map(|s| s.to_string()).collect();
        let rcgen::CertifiedKey { cert, signing_key } =
            rcgen::generate_simple_self_signed(names).map_err(TlsError::Generate)?;
        Ok(Identity {
            chain_pem: cert.pem(),
            chain: vec![cert.der().clone()],
            key: PrivatePkcs8KeyDer::from(signing_key.serialize_der()).into(),
            key_pem: signing_key.serialize_pem(),
        })
    }

    /// Reads a PEM certificate chain (leaf first) and a PEM private key (PKCS#8, PKCS#1 or
    /// SEC1).
    pub fn from_pem_files(cert: &Path, key: &Path) -> Result<Self, TlsError> {
        let pem_err = |what, path: &Path| {
            let path = path.to_path_buf();
            move |source| TlsError::Pem { what, path, source }
        };
        let chain_pem = std::fs::read_to_string(cert)
            .map_err(|e| pem_err("certificate", cert)(rustls::pki_types::pem::Error::Io(e)))?;
        let chain = CertificateDer::pem_slice_iter(chain_pem.as_bytes())
            .collect::<Result<Vec<_>, _>>()
            .map_err(pem_err("certificate", cert))?;
        if chain.is_empty() {
            return Err(TlsError::NoCertificate(cert.to_path_buf()));
        }
        let key_pem = std::fs::read_to_string(key)
            .map_err(|e| pem_err("private key", key)(rustls::pki_types::pem::Error::Io(e)))?;
        let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes())
            .map_err(pem_err("private key", key))?;
        Ok(Identity {
            chain,
            key,
            chain_pem,
            key_pem,
        })
    }

    /// The certificate chain as PEM text, for clients to trust (e.g. `curl --cacert`).
    pub fn chain_pem(&self) -> &str {
        &self.chain_pem
    }

    /// The private key as PEM text, for a server program that reads its key from a file.
    pub fn key_pem(&self) -> &str {
        &self.key_pem
    }

    /// SHA-256 of the leaf certificate's DER encoding, as colon-separated upper-case hex (the
    /// form `openssl x509 -fingerprint -sha256` prints).
    pub fn fingerprint_sha256(&self) -> String {
        // chain[0] exists: both constructors refuse an empty chain.
        let digest = ring::digest::digest(&ring::digest::SHA256, &self.chain[0]);
        digest
            .as_ref()
            .iter()
            .map(|b| format!("{b:02X}"))
            .collect::<Vec<_>>()
            .join(":")
    }
}

/// `tcp_config` (from [`server_config`]: the same certificate, provider, groups and key log)
/// for a protocol over UDP: ALPN `alpn` only, and early data of at most `max_early_data` bytes
/// (QUIC-style handshakes allow only 0 or `u32::MAX`).
pub fn udp_server_config(
    tcp_config: &rustls::ServerConfig,
    alpn: &[u8],
    max_early_data: u32,
) -> rustls::ServerConfig {
    let mut config = tcp_config.clone();
    config.alpn_protocols = vec![alpn.to_vec()];
    config.max_early_data_size = max_early_data;
    config
}

/// A rustls server configuration: ring provider, TLS 1.3 only, exactly `groups` (in that order
/// of preference), ALPN h2 then http/1.1, no client authentication.
pub fn server_config(
    identity: &Identity,
    groups: &[KxGroup],
) -> Result<Arc<rustls::ServerConfig>, TlsError> {
    if groups.is_empty() {
        return Err(TlsError::NoGroups);
    }
    let provider = CryptoProvider {
        kx_groups: groups.iter().map(|g| g.rustls()).collect(),
        ..ring_provider::default_provider()
    };
    let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(provider))
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(TlsError::Config)?
        .with_no_client_auth()
        .with_single_cert(identity.chain.clone(), identity.key.clone_key())
        .map_err(TlsError::Config)?;
    config.alpn_protocols = vec![ALPN_H2.to_vec(), ALPN_HTTP11.to_vec()];
    config.key_log = key_log();
    Ok(Arc::new(config))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn group_lists_keep_order_and_reject_unknown_or_repeated_names() {
        assert_eq!(
            KxGroup::parse_list("p256, x25519").unwrap(),
            [KxGroup::P256, KxGroup::X25519]
        );
        assert_eq!(KxGroup::parse_list("P384").unwrap(), [KxGroup::P384]);

        let e = KxGroup::parse_list("x25519,x448").unwrap_err();
        assert_eq!(
            e.to_string(),
            "unknown key-exchange group \"x448\" (allowed: x25519, p256, p384)"
        );
        let e = KxGroup::parse_list(" , ").unwrap_err();
        assert_eq!(
            e.to_string(),
            "no key-exchange group given (allowed: x25519, p256, p384)"
        );
        let e = KxGroup::parse_list("p256,x25519,p256").unwrap_err();
        assert_eq!(e.to_string(), "key-exchange group p256 is listed twice");
    }

    #[test]
    fn self_signed_identity_and_pem_files_make_a_tls13_config() {
        let id = Identity::self_signed().unwrap();
        assert!(id.chain_pem().starts_with("-----BEGIN CERTIFICATE-----"));
        assert_eq!(id.fingerprint_sha256().len(), 32 * 3 - 1);

        let dir = std::env::temp_dir().join(format!("quiclab-stack-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
        let made = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
        std::fs::write(&cert, made.cert.pem()).unwrap();
        std::fs::write(&key, made.signing_key.serialize_pem()).unwrap();
        let loaded = Identity::from_pem_files(&cert, &key).unwrap();
        assert_eq!(loaded.chain_pem(), made.cert.pem());

        let config = server_config(&loaded, &[KxGroup::X25519, KxGroup::P384]).unwrap();
        assert_eq!(
            config.alpn_protocols,
            [b"h2".to_vec(), b"http/1.1".to_vec()]
        );
        let groups: Vec<_> = config
            .crypto_provider()
            .kx_groups
            .iter()
            .map(|g| g.name())
            .collect();
        assert_eq!(
            groups,
            [rustls::NamedGroup::X25519, rustls::NamedGroup::secp384r1]
        );

        let e = Identity::from_pem_files(&key, &key).err().unwrap();
        assert!(matches!(e, TlsError::NoCertificate(_)), "{e}");
        let e = Identity::from_pem_files(&dir.join("missing.pem"), &key)
            .err()
            .unwrap();
        assert!(
            e.to_string().starts_with("reading the certificate from "),
            "{e}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
