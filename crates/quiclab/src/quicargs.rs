//! QUIC options on the command line, shared by `quiclab serve` and `quiclab get --http 3`.

use anyhow::Context;
use clap::Args;
use quiclab_quic::{self as quic, QuicCongestion, QuicOptions};

use crate::usage::Usage;

#[derive(Args, Clone, Debug)]
#[command(next_help_heading = "QUIC (HTTP/3)")]
pub struct QuicArgs {
    /// QUIC congestion controller: newreno, cubic or bbr (quinn's BBR is experimental).
    #[arg(long, value_name = "NAME", default_value = "cubic")]
    quic_cc: String,
    /// RTT QUIC assumes before its first sample (e.g. 100ms).
    #[arg(long, value_name = "DURATION", default_value = "333ms")]
    quic_initial_rtt: String,
    /// QUIC path MTU discovery: on or off.
    #[arg(long, value_name = "on|off", default_value = "on")]
    quic_mtu_discovery: String,
    /// UDP payload QUIC starts with, before path MTU discovery raises it (1200 to
    /// --quic-max-udp-payload).
    #[arg(long, value_name = "BYTES", default_value_t = 1200)]
    quic_initial_mtu: u16,
    /// Largest UDP payload QUIC sends (the upper bound of MTU discovery). With GSO on, a batch
    /// holds as many datagrams as fit one 65,507-byte UDP send (10 up to 6550, 7 at 8952).
    #[arg(long, value_name = "BYTES", default_value_t = 1452)]
    quic_max_udp_payload: u16,
    /// QUIC generic segmentation offload: on or off.
    #[arg(long, value_name = "on|off", default_value = "on")]
    quic_gso: String,
    /// Flow-control window of each QUIC stream (e.g. 1250kb, 16mib): how much a peer may send
    /// on one stream ahead of what the application has read.
    #[arg(long, value_name = "SIZE", default_value = "1250kb", value_parser = size)]
    quic_stream_window: u64,
    /// Flow-control window of a whole QUIC connection (e.g. 10mb); default: unlimited (only
    /// the stream windows apply).
    #[arg(long, value_name = "SIZE", value_parser = size)]
    quic_conn_window: Option<u64>,
    /// How QUIC shares the sending side between streams with data: round-robin (quinn's
    /// default) or fifo (one stream after another, in the order they were opened).
    #[arg(long, value_name = "round-robin|fifo", default_value = "round-robin", value_parser = ["round-robin", "fifo"])]
    quic_scheduling: String,
    /// Whether an HTTP/3 server honours RFC 9218 `priority` request headers (e.g. `u=1` before
    /// `u=5, i`): on sends more urgent responses first and, with round-robin, non-incremental
    /// responses of one urgency one by one before sharing the link between the incremental ones
    /// (`i`); off treats every request alike (as --quic-scheduling says).
    #[arg(long, value_name = "on|off", default_value = "on")]
    quic_priorities: String,
    /// Unreliable QUIC datagrams (RFC 9221): off, or the bytes buffered for sending and for
    /// receiving them (e.g. 1mb); a datagram is at most one packet.
    #[arg(long, value_name = "off|SIZE", default_value = "off")]
    quic_datagrams: String,
}

fn size(s: &str) -> Result<u64, String> {
    quiclab_link::units::parse_bytes(s).map_err(|e| e.to_string())
}

impl QuicArgs {
    /// The options, validated; errors name the flag.
    pub fn options(&self) -> anyhow::Result<QuicOptions> {
        let o = QuicOptions {
            congestion: self
                .quic_cc
                .parse::<QuicCongestion>()
                .context("--quic-cc")?,
            initial_rtt_us: quic::parse_duration_us("initial_rtt", &self.quic_initial_rtt)
                .context("--quic-initial-rtt")?,
            mtu_discovery: quic::parse_on_off("mtu_discovery", &self.quic_mtu_discovery)
                .context("--quic-mtu-discovery")?,
            initial_mtu: self.quic_initial_mtu,
            max_udp_payload: self.quic_max_udp_payload,
            gso: quic::parse_on_off("gso", &self.quic_gso).context("--quic-gso")?,
            stream_receive_window: self.quic_stream_window,
            receive_window: self
                .quic_conn_window
                .unwrap_or(QuicOptions::default().receive_window),
            round_robin: self.quic_scheduling == "round-robin",
            priorities: quic::parse_on_off("priorities", &self.quic_priorities)
                .context("--quic-priorities")?,
            datagram_buffer: match self.quic_datagrams.as_str() {
                "off" => None,
                s => Some(size(s).map_err(|e| Usage(format!("--quic-datagrams: {e}")))?),
            },
            ..QuicOptions::default()
        };
        o.validate().context("QUIC options")?;
        Ok(o)
    }
}
