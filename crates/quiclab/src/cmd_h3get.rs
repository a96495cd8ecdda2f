//! `quiclab h3-get` (hidden): fetch URLs over HTTP/3 and print one request record per line.
//! A test and diagnosis path for the QUIC client until `quiclab get` speaks HTTP/3.

use std::io::Write;
use std::path::PathBuf;

use anyhow::Context;
use clap::Args;
use quiclab_stack::quic::{self, QuicClientOptions, QuicCongestion, QuicOptions};
use quiclab_stack::tls::KxGroup;

/// Fetch URLs over HTTP/3 (quinn, h3) and print one JSON request record per URL.
///
/// Exits 1 if any request failed (its record says why), 2 on bad options.
#[derive(Args)]
pub struct H3GetCmd {
    /// https URLs, fetched in order.
    #[arg(required = true, value_name = "URL")]
    urls: Vec<String>,
    /// PEM certificates to trust (and nothing else).
    #[arg(long, value_name = "FILE")]
    cacert: PathBuf,
    /// Key-exchange groups offered, in order (a key share goes only with the first).
    #[arg(long, value_name = "LIST", default_value = "x25519,p256")]
    groups: String,
    /// Keep session tickets across this run's connections and send later requests as 0-RTT.
    #[arg(long)]
    resume: bool,
    /// One connection for every URL instead of a new one per URL.
    #[arg(long)]
    reuse: bool,
    /// QUIC congestion controller: newreno, cubic or bbr (quinn's BBR is experimental).
    #[arg(long, value_name = "NAME", default_value = "cubic")]
    quic_cc: String,
    /// RTT QUIC assumes before its first sample (e.g. 100ms).
    #[arg(long, value_name = "DURATION", default_value = "333ms")]
    quic_initial_rtt: String,
    /// QUIC path MTU discovery: on or off.
    #[arg(long, value_name = "on|off", default_value = "on")]
    quic_mtu_discovery: String,
    /// Largest UDP payload QUIC sends (at most 6550 with GSO on).
    #[arg(long, value_name = "BYTES", default_value_t = 1452)]
    quic_max_udp_payload: u16,
    /// QUIC generic segmentation offload: on or off.
    #[arg(long, value_name = "on|off", default_value = "on")]
    quic_gso: String,
}

pub fn h3_get(c: H3GetCmd) -> anyhow::Result<i32> {
    let quic = QuicOptions {
        congestion: c.quic_cc.parse::<QuicCongestion>().context("--quic-cc")?,
        initial_rtt_us: quic::parse_duration_us("initial_rtt", &c.quic_initial_rtt)
            .context("--quic-initial-rtt")?,
        mtu_discovery: quic::parse_on_off("mtu_discovery", &c.quic_mtu_discovery)
            .context("--quic-mtu-discovery")?,
        max_udp_payload: c.quic_max_udp_payload,
        gso: quic::parse_on_off("gso", &c.quic_gso).context("--quic-gso")?,
        ..QuicOptions::default()
    };
    quic.validate().context("QUIC options")?;
    let opts = QuicClientOptions {
        quic,
        ca_pem: std::fs::read_to_string(&c.cacert)
            .with_context(|| format!("reading --cacert {}", c.cacert.display()))?,
        groups: KxGroup::parse_list(&c.groups).context("--groups")?,
        reuse_connection: c.reuse,
        resume: c.resume,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the tokio runtime")?;
    let records = runtime.block_on(quic::get(&c.urls, &opts))?;
    let mut out = std::io::stdout().lock();
    for r in &records {
        serde_json::to_writer(&mut out, r).context("writing a record")?;
        writeln!(out).context("writing to standard output")?;
    }
    out.flush().context("writing to standard output")?;
    Ok(if records.iter().any(|r| r.error.is_some()) {
        1
    } else {
        0
    })
}
