//! QUIC options on the command line, shared by `quiclab serve` and `quiclab get --http 3`.

use clap::Args;
use quiclab_quic::QuicOptions;

#[derive(Args, Clone, Debug)]
#[command(next_help_heading = "QUIC (HTTP/3)")]
pub struct QuicArgs {
    /// QUIC congestion controller: newreno, cubic or bbr (quinn's BBR is experimental).
    #[arg(long, value_name = "NAME", default_value_t = DEFAULT.congestion.name().to_string())]
    quic_cc: String,
    /// The QUIC sender's congestion window before any feedback (e.g. 14480b, TCP's ten
    /// segments); default: quinn's, 12,000 bytes for newreno and cubic, 240,000 for bbr.
    #[arg(long, value_name = "SIZE", value_parser = size)]
    quic_initial_window: Option<u64>,
    /// RTT QUIC assumes before its first sample (e.g. 100ms).
    #[arg(long, value_name = "DURATION", default_value_t = duration(DEFAULT.initial_rtt_us))]
    quic_initial_rtt: String,
    /// QUIC loss detection's packet threshold: a packet is lost once one this many packets
    /// after it is acknowledged (RFC 9002: 3).
    #[arg(long, value_name = "PACKETS", default_value_t = DEFAULT.packet_threshold)]
    quic_packet_threshold: u32,
    /// QUIC loss detection's time threshold: a packet is lost this many RTTs after it was sent,
    /// once a later one is acknowledged (RFC 9002: 1.125).
    #[arg(long, value_name = "RTTS", default_value_t = DEFAULT.time_threshold)]
    quic_time_threshold: f64,
    /// QUIC path MTU discovery: on or off.
    #[arg(long, value_name = "on|off", default_value_t = on_off(DEFAULT.mtu_discovery))]
    quic_mtu_discovery: String,
    /// UDP payload QUIC starts with, before path MTU discovery raises it (1200 to
    /// --quic-max-udp-payload).
    #[arg(long, value_name = "BYTES", default_value_t = DEFAULT.initial_mtu)]
    quic_initial_mtu: u16,
    /// Largest UDP payload QUIC sends (the upper bound of MTU discovery). With GSO on, a batch
    /// holds as many datagrams as fit one 65,507-byte UDP send (10 up to 6550, 7 at 8952).
    #[arg(long, value_name = "BYTES", default_value_t = DEFAULT.max_udp_payload)]
    quic_max_udp_payload: u16,
    /// QUIC generic segmentation offload: on or off.
    #[arg(long, value_name = "on|off", default_value_t = on_off(DEFAULT.gso))]
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
    #[arg(long, value_name = "round-robin|fifo", default_value_t = scheduling(DEFAULT.round_robin), value_parser = ["round-robin", "fifo"])]
    quic_scheduling: String,
    /// Whether an HTTP/3 server honours RFC 9218 `priority` request headers (e.g. `u=1` before
    /// `u=5, i`): on sends more urgent responses first and, with round-robin, non-incremental
    /// responses of one urgency one by one before sharing the link between the incremental ones
    /// (`i`); off treats every request alike (as --quic-scheduling says).
    #[arg(long, value_name = "on|off", default_value_t = on_off(DEFAULT.priorities))]
    quic_priorities: String,
    /// Unreliable QUIC datagrams (RFC 9221): off, or the bytes buffered for sending and for
    /// receiving them (e.g. 1mb); a datagram is at most one packet.
    #[arg(long, value_name = "off|SIZE", default_value_t = DEFAULT.datagram_buffer.map_or("off".into(), |b| b.to_string()))]
    quic_datagrams: String,
}

/// The options' defaults, which are the flags' (stated once, in `quiclab-quic`).
const DEFAULT: QuicOptions = QuicOptions::DEFAULT;

/// A duration as the flags write it: whole milliseconds where it has them.
fn duration(us: u64) -> String {
    if us.is_multiple_of(1000) {
        format!("{}ms", us / 1000)
    } else {
        format!("{us}us")
    }
}

fn on_off(on: bool) -> String {
    if on { "on" } else { "off" }.to_string()
}

fn scheduling(round_robin: bool) -> String {
    if round_robin { "round-robin" } else { "fifo" }.to_string()
}

fn size(s: &str) -> Result<u64, String> {
    quiclab_link::units::parse_bytes(s).map_err(|e| e.to_string())
}

impl QuicArgs {
    /// The flags as the knobs of a task (every one, defaults included), keyed by the flag's
    /// name without its dashes.
    pub fn knobs(&self) -> Vec<(String, String)> {
        let mut out: Vec<(String, String)> = [
            ("quic-cc", self.quic_cc.clone()),
            ("quic-initial-rtt", self.quic_initial_rtt.clone()),
            (
                "quic-packet-threshold",
                self.quic_packet_threshold.to_string(),
            ),
            ("quic-time-threshold", self.quic_time_threshold.to_string()),
            ("quic-mtu-discovery", self.quic_mtu_discovery.clone()),
            ("quic-initial-mtu", self.quic_initial_mtu.to_string()),
            (
                "quic-max-udp-payload",
                self.quic_max_udp_payload.to_string(),
            ),
            ("quic-gso", self.quic_gso.clone()),
            (
                "quic-stream-window",
                format!("{}b", self.quic_stream_window),
            ),
            ("quic-scheduling", self.quic_scheduling.clone()),
            ("quic-priorities", self.quic_priorities.clone()),
            ("quic-datagrams", self.quic_datagrams.clone()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        if let Some(w) = self.quic_conn_window {
            out.push(("quic-conn-window".to_string(), format!("{w}b")));
        }
        if let Some(w) = self.quic_initial_window {
            out.push(("quic-initial-window".to_string(), format!("{w}b")));
        }
        out
    }

    /// The options, validated; errors name the flag.
    pub fn options(&self) -> anyhow::Result<QuicOptions> {
        quiclab_stacks::quic_options(&self.knobs())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Wrap {
        #[command(flatten)]
        quic: QuicArgs,
    }

    fn options(args: &[&str]) -> anyhow::Result<QuicOptions> {
        let w = Wrap::try_parse_from(std::iter::once("t").chain(args.iter().copied()))?;
        w.quic.options()
    }

    /// The flags' defaults are the options' defaults, and each flag reaches its option through
    /// the knobs a task carries.
    #[test]
    fn flags_become_options_through_the_task_s_knobs() {
        assert_eq!(options(&[]).unwrap(), QuicOptions::default());
        let o = options(&[
            "--quic-cc",
            "bbr",
            "--quic-stream-window",
            "16mib",
            "--quic-conn-window",
            "10mb",
            "--quic-datagrams",
            "1mb",
            "--quic-scheduling",
            "fifo",
            "--quic-initial-rtt",
            "100ms",
            "--quic-initial-window",
            "14480b",
        ])
        .unwrap();
        assert_eq!(o.initial_window, Some(14_480));
        assert_eq!(o.congestion, quiclab_quic::QuicCongestion::Bbr);
        assert_eq!(o.stream_receive_window, 16 << 20);
        assert_eq!(o.receive_window, 10_000_000);
        assert_eq!(o.datagram_buffer, Some(1_000_000));
        assert!(!o.round_robin);
        assert_eq!(o.initial_rtt_us, 100_000);
        let e = options(&["--quic-gso", "maybe"]).unwrap_err();
        assert!(e.to_string().starts_with("--quic-gso"), "{e:#}");
        let e = options(&[
            "--quic-initial-mtu",
            "1500",
            "--quic-max-udp-payload",
            "1400",
        ])
        .unwrap_err();
        assert!(format!("{e:#}").contains("initial_mtu"), "{e:#}");
        let e = options(&["--quic-initial-window", "1kb"]).unwrap_err();
        assert!(format!("{e:#}").contains("initial_window"), "{e:#}");
    }
}
