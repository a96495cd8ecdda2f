//! The client options `quiclab get` and `quiclab page` share: whom the client trusts, which
//! key-exchange groups it offers, and its TCP settings.

use std::path::PathBuf;

use clap::Args;
use quiclab_endpoint::tls::KxGroup;

use crate::usage::{Usage, usage};

#[derive(Args)]
pub struct TrustArgs {
    /// PEM certificates to trust (e.g. the file `quiclab serve --write-cert` wrote); the only
    /// trust anchors.
    #[arg(long, value_name = "FILE")]
    pub cacert: Option<PathBuf>,
    /// Key-exchange groups in order of preference (x25519, p256, p384); the ClientHello carries
    /// a key share for the first only.
    #[arg(long, value_name = "LIST", default_value = quiclab_stacks::own::DEFAULT_GROUPS)]
    pub groups: String,
}

impl TrustArgs {
    /// The trusted certificates (PEM text) and the groups; errors name the option at fault.
    pub fn load(&self) -> anyhow::Result<(String, Vec<KxGroup>)> {
        let groups =
            KxGroup::parse_list(&self.groups).map_err(|e| Usage(format!("--groups: {e}")))?;
        let cacert = self.cacert.as_ref().ok_or_else(|| {
            Usage("--cacert is required: give the PEM certificate of the server (or its CA)".into())
        })?;
        let ca_pem = std::fs::read_to_string(cacert)
            .map_err(|e| Usage(format!("--cacert {}: {e}", cacert.display())))?;
        Ok((ca_pem, groups))
    }

    /// As [`TrustArgs::load`], but with no certificate needed (none loaded unless given) when
    /// every URL is `http://`: nothing is encrypted, so nothing is trusted.
    pub fn load_for(&self, urls: &[String]) -> anyhow::Result<(String, Vec<KxGroup>)> {
        if self.cacert.is_some() || !urls.iter().all(|u| u.starts_with("http://")) {
            return self.load();
        }
        let groups =
            KxGroup::parse_list(&self.groups).map_err(|e| Usage(format!("--groups: {e}")))?;
        Ok((String::new(), groups))
    }
}

/// TCP settings of a client (HTTP/1.1 and HTTP/2).
#[derive(Args)]
pub struct TcpArgs {
    /// TCP congestion controller (one of /proc/sys/net/ipv4/tcp_available_congestion_control);
    /// default: the kernel's (`quiclab get` reports the one in use). HTTP/1.1 and HTTP/2 only.
    #[arg(long, value_name = "NAME")]
    pub tcp_cc: Option<String>,
    /// Ask for TCP Fast Open on every connection (TCP_FASTOPEN_CONNECT). HTTP/1.1 and HTTP/2 only.
    #[arg(long)]
    pub tfo: bool,
}

impl TcpArgs {
    /// The settings as the knobs of a client task (`tcp-cc`, `tfo`).
    pub fn knobs(&self) -> Vec<(String, String)> {
        let mut out = Vec::new();
        if let Some(cc) = &self.tcp_cc {
            out.push(("tcp-cc".to_string(), cc.clone()));
        }
        if self.tfo {
            out.push(("tfo".to_string(), "true".to_string()));
        }
        out
    }

    /// Whether any TCP setting was given.
    pub fn any(&self) -> bool {
        self.tcp_cc.is_some() || self.tfo
    }

    /// Refuses TCP settings for an HTTP/3 client.
    pub fn refuse_for_quic(&self) -> anyhow::Result<()> {
        if self.any() {
            usage!(
                "--tcp-cc and --tfo apply to HTTP/1.1 and HTTP/2 (TCP); use --quic-cc for HTTP/3"
            );
        }
        Ok(())
    }
}
