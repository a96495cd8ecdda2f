//! `quiclab pcapng`: a capture and its TLS key logs as one pcapng file that opens decrypted.

use std::path::PathBuf;

use anyhow::Context;
use clap::Args;

use crate::usage::usage;

/// Make a capture one file that opens decrypted: its packets and the TLS key logs in pcapng (a
/// Decryption Secrets Block before the packets), for Wireshark or tshark without a key log
/// option.
///
/// INPUT is a trial's folder (its capture.pcap and keys.log: `quiclab run --keep-artifacts`
/// keeps them; the result is capture.pcapng beside them) or a pcap file (`quiclab link
/// --pcap`), with --keys naming its key logs. e.g. `quiclab pcapng results/www21/trials/ID &&
/// wireshark results/www21/trials/ID/capture.pcapng`.
#[derive(Args)]
pub struct PcapngCmd {
    /// A trial's folder, or a pcap file.
    #[arg(value_name = "INPUT")]
    input: PathBuf,
    /// A key log (SSLKEYLOGFILE's format) to embed (may be repeated; a trial's folder's
    /// keys.log is taken when none is given).
    #[arg(long = "keys", value_name = "FILE")]
    keys: Vec<PathBuf>,
    /// Where the pcapng goes (default: capture.pcapng in a trial's folder, or the pcap's name
    /// with .pcapng).
    #[arg(short, long, value_name = "FILE")]
    out: Option<PathBuf>,
}

pub fn pcapng(c: PcapngCmd) -> anyhow::Result<i32> {
    let (pcap, mut keys, default_out) = if c.input.is_dir() {
        let keys = c.input.join("keys.log");
        (
            c.input.join("capture.pcap"),
            if keys.exists() {
                vec![keys]
            } else {
                Vec::new()
            },
            c.input.join("capture.pcapng"),
        )
    } else {
        (
            c.input.clone(),
            Vec::new(),
            c.input.with_extension("pcapng"),
        )
    };
    if !c.keys.is_empty() {
        keys = c.keys;
    }
    if keys.is_empty() {
        usage!(
            "{}: no key log to embed (a trial's folder holds keys.log; name one with --keys FILE)",
            c.input.display()
        );
    }
    let bytes = std::fs::read(&pcap).with_context(|| format!("reading {}", pcap.display()))?;
    let mut keylog = Vec::new();
    for k in &keys {
        let text = std::fs::read(k).with_context(|| format!("reading {}", k.display()))?;
        keylog.extend_from_slice(&text);
        if !keylog.ends_with(b"\n") {
            keylog.push(b'\n');
        }
    }
    let ng = quiclab_netns::pcap::to_pcapng(&bytes, &keylog)
        .map_err(|e| crate::usage::Usage(format!("{}: {e}", pcap.display())))?;
    let out = c.out.unwrap_or(default_out);
    quiclab_store::output::write_atomic(&out, &ng)?;
    let lines = keylog.iter().filter(|b| **b == b'\n').count();
    eprintln!(
        "quiclab: {} ({} bytes of capture, {lines} key log line{} embedded)",
        out.display(),
        bytes.len(),
        if lines == 1 { "" } else { "s" }
    );
    Ok(crate::usage::OK)
}
