//! Whom a client trusts and which key-exchange groups it offers: the options `quiclab get` and
//! `quiclab page` share.

use std::path::PathBuf;

use anyhow::Context;
use clap::Args;
use quiclab_stack::tls::KxGroup;

#[derive(Args)]
pub struct TrustArgs {
    /// PEM certificates to trust (e.g. the file `quiclab serve --write-cert` wrote); the only
    /// trust anchors.
    #[arg(long, value_name = "FILE")]
    pub cacert: Option<PathBuf>,
    /// Key-exchange groups in order of preference (x25519, p256, p384); the ClientHello carries
    /// a key share for the first only.
    #[arg(long, value_name = "LIST", default_value = "x25519,p256")]
    pub groups: String,
}

impl TrustArgs {
    /// The trusted certificates (PEM text) and the groups; errors name the option at fault.
    pub fn load(&self) -> anyhow::Result<(String, Vec<KxGroup>)> {
        let groups = KxGroup::parse_list(&self.groups).context("--groups")?;
        let cacert = self
            .cacert
            .as_ref()
            .context("--cacert is required: give the PEM certificate of the server (or its CA)")?;
        let ca_pem = std::fs::read_to_string(cacert)
            .with_context(|| format!("reading --cacert {}", cacert.display()))?;
        Ok((ca_pem, groups))
    }
}
