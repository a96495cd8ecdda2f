//! What the clients report, one JSON line per record, the same for every stack so that TCP and
//! QUIC results land in one table and their timelines on one chart.
//!
//! Times are microseconds on the host's CLOCK_MONOTONIC (shared by every namespace), so records
//! written by a client and a server can be aligned. `*_ms` fields relative to a request are
//! derived from those and kept for readers.

use serde::{Deserialize, Serialize};

/// Which HTTP version carried a request (or, for `Coded`, the network-coded transport's own
/// request/response framing, see the quiclab-coded-udp crate).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum HttpVersion {
    #[serde(rename = "1.1")]
    Http11,
    #[serde(rename = "2")]
    Http2,
    #[serde(rename = "3")]
    Http3,
    /// One request per stream of the coded transport: not HTTP, but the same routes.
    #[serde(rename = "coded")]
    Coded,
    /// HTTP/0.9 over QUIC as the QUIC interop runner's `hq-interop` ALPN has it: `GET /PATH`
    /// on a bidirectional stream, answered by the bytes alone (no status, no header), for
    /// implementations without HTTP/3 (msquic).
    #[serde(rename = "hq")]
    Hq,
}

impl HttpVersion {
    pub const ALL: [HttpVersion; 5] = [
        HttpVersion::Http11,
        HttpVersion::Http2,
        HttpVersion::Http3,
        HttpVersion::Coded,
        HttpVersion::Hq,
    ];

    /// The version a plan or `--http` names ("1" is HTTP/1.1 too).
    pub fn from_name(name: &str) -> Option<HttpVersion> {
        match name {
            "1" => Some(HttpVersion::Http11),
            _ => Self::ALL.into_iter().find(|h| h.name() == name),
        }
    }

    /// How people write it: "HTTP/1.1", "HTTP/2", "HTTP/3", "coded transport", "HTTP/0.9 over
    /// QUIC (hq-interop)".
    pub fn title(self) -> &'static str {
        match self {
            HttpVersion::Http11 => "HTTP/1.1",
            HttpVersion::Http2 => "HTTP/2",
            HttpVersion::Http3 => "HTTP/3",
            HttpVersion::Coded => "coded transport",
            HttpVersion::Hq => "HTTP/0.9 over QUIC (hq-interop)",
        }
    }

    pub fn transport(self) -> Transport {
        match self {
            HttpVersion::Http11 | HttpVersion::Http2 => Transport::Tcp,
            HttpVersion::Http3 | HttpVersion::Hq => Transport::Quic,
            HttpVersion::Coded => Transport::Coded,
        }
    }

    /// The name plans and `quiclab get --http` use: "1.1", "2", "3", "coded" or "hq".
    pub fn name(self) -> &'static str {
        match self {
            HttpVersion::Http11 => "1.1",
            HttpVersion::Http2 => "2",
            HttpVersion::Http3 => "3",
            HttpVersion::Coded => "coded",
            HttpVersion::Hq => "hq",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Transport {
    Tcp,
    Quic,
    /// RaptorQ-coded data over UDP (the quiclab-coded-udp crate).
    Coded,
}

impl Transport {
    /// As data names it: "tcp", "quic", "coded".
    pub fn name(self) -> &'static str {
        match self {
            Transport::Tcp => "tcp",
            Transport::Quic => "quic",
            Transport::Coded => "coded",
        }
    }

    /// How people write it: "TCP", "QUIC", "coded UDP".
    pub fn title(self) -> &'static str {
        match self {
            Transport::Tcp => "TCP",
            Transport::Quic => "QUIC",
            Transport::Coded => "coded UDP",
        }
    }
}

/// How the TLS handshake went.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Handshake {
    /// Key-exchange group finally used (e.g. "x25519").
    pub group: Option<String>,
    /// The server asked for another key share (HelloRetryRequest): one extra round trip.
    pub hello_retry: bool,
    /// The session was resumed from a ticket.
    pub resumed: bool,
    pub zero_rtt_attempted: bool,
    pub zero_rtt_accepted: bool,
    /// TCP Fast Open: the SYN carried the ClientHello and the server acknowledged it, so the
    /// TLS handshake began with the TCP one (one round trip less).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub fast_open: bool,
    /// ALPN protocol negotiated.
    pub alpn: Option<String>,
}

/// Transport-level facts about the connection that carried a request (sender side where the
/// client can see it; `None` where the stack does not expose a value).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TransportStats {
    /// Congestion controller as read back from the stack (e.g. "cubic", "bbr").
    pub congestion_control: Option<String>,
    /// True for controllers their implementation labels experimental (quinn's BBR).
    pub congestion_control_experimental: bool,
    pub packets_lost: Option<u64>,
    pub bytes_retransmitted: Option<u64>,
    /// Byte offset in the response body of the first retransmitted data, if any.
    pub first_retransmit_offset: Option<u64>,
    pub congestion_events: Option<u64>,
    pub cwnd_final_bytes: Option<u64>,
    pub cwnd_peak_bytes: Option<u64>,
    pub min_rtt_us: Option<u64>,
    pub smoothed_rtt_us: Option<u64>,
    /// RTT samples below the emulated path's minimum RTT: physically impossible, a sign of a
    /// mis-attributed acknowledgement.
    pub impossible_rtt_samples: Option<u64>,
    /// Largest UDP payload in use at the end (QUIC).
    pub max_udp_payload: Option<u64>,
}

/// One request, as the client saw it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RequestRecord {
    pub http: HttpVersion,
    pub transport: Transport,
    pub url: String,
    pub method: String,
    pub status: u16,
    /// Index of the connection within this client run (0-based).
    pub connection: u32,
    /// True when this request opened its connection (its times include the handshake).
    pub new_connection: bool,
    /// When the client sent its first packet for this request: the connection attempt for a new
    /// connection, the request itself otherwise.
    pub start_us: u64,
    /// Handshake complete (TCP connected and TLS finished; QUIC handshake confirmed).
    pub handshake_done_us: Option<u64>,
    pub first_byte_us: Option<u64>,
    pub last_byte_us: Option<u64>,
    /// Response body bytes received.
    pub bytes: u64,
    /// Request body bytes sent (an upload's), 0 for a GET.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub sent_bytes: u64,
    /// Time to first byte of the body, from `start_us`.
    pub ttfb_ms: Option<f64>,
    /// Time to last byte, from `start_us` (the WWW'21 study's TTLB).
    pub ttlb_ms: Option<f64>,
    /// Body bytes over the whole request (its start to the body's last byte: the time to last
    /// byte, with the handshake when the request opened its connection), bits per second.
    /// Over the whole request, so that a small body's few packets arriving together never read
    /// as a huge rate.
    pub goodput_bps: Option<f64>,
    pub handshake: Handshake,
    pub transport_stats: TransportStats,
    /// Why the request failed, if it did.
    pub error: Option<String>,
}

impl RequestRecord {
    /// A GET of `url` that starts at `start_us` and has not happened yet: no status, no bytes,
    /// no times.
    pub fn get(
        http: HttpVersion,
        url: &str,
        connection: u32,
        new_connection: bool,
        start_us: u64,
    ) -> Self {
        RequestRecord {
            http,
            transport: http.transport(),
            url: url.to_string(),
            method: "GET".to_string(),
            status: 0,
            connection,
            new_connection,
            start_us,
            handshake_done_us: None,
            first_byte_us: None,
            last_byte_us: None,
            bytes: 0,
            sent_bytes: 0,
            ttfb_ms: None,
            ttlb_ms: None,
            goodput_bps: None,
            handshake: Handshake::default(),
            transport_stats: TransportStats::default(),
            error: None,
        }
    }

    /// Fills the derived fields (`ttfb_ms`, `ttlb_ms`, `goodput_bps`) from the timestamps.
    pub fn derive(&mut self) {
        let ms = |t: Option<u64>| t.map(|t| t.saturating_sub(self.start_us) as f64 / 1000.0);
        self.ttfb_ms = ms(self.first_byte_us);
        self.ttlb_ms = ms(self.last_byte_us);
        self.goodput_bps = match self.last_byte_us {
            Some(b) if b > self.start_us => {
                Some(self.bytes as f64 * 8.0 / ((b - self.start_us) as f64 / 1e6))
            }
            _ => None,
        };
    }
}

/// One point of a connection's timeline (sampled at least every 5 ms and at congestion
/// events), from whichever end sends the data.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TimelineSample {
    pub transport: Transport,
    /// Which connection (matches `RequestRecord::connection` on the client; a server uses its own
    /// numbering plus the peer address).
    pub connection: u32,
    pub t_us: u64,
    pub cwnd_bytes: Option<u64>,
    pub bytes_in_flight: Option<u64>,
    /// Cumulative bytes acknowledged by the peer.
    pub acked_bytes: Option<u64>,
    pub rtt_us: Option<u64>,
    /// Delivery rate (TCP) or pacing rate (QUIC), bits per second.
    pub rate_bps: Option<u64>,
    /// True for a sample taken at a congestion event.
    pub congestion_event: bool,
    /// Cumulative retransmissions so far: TCP segments retransmitted (`tcpi_total_retrans`),
    /// QUIC packets declared lost, repair symbols sent by the coded transport.
    #[serde(default)]
    pub retransmits: Option<u64>,
    /// Cumulative RTT samples below the emulated path's minimum RTT (physically impossible: a
    /// mis-attributed acknowledgement). QUIC counts every sample; TCP only sees its minimum RTT,
    /// so a minimum below the floor counts as one. `None` without a floor (`--path-min-rtt`).
    #[serde(default)]
    pub impossible_rtt_samples: Option<u64>,
    /// Cumulative RTT samples below the floor that the endpoint's late reading of its clock
    /// explains (QUIC: the host was busy; not counted as impossible). `None` where not told.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub busy_rtt_samples: Option<u64>,
    /// Bytes of the connection's stream the sender had sent before the first data it later
    /// retransmitted (TCP: the cumulative ACK point at the first retransmission; QUIC: packet
    /// bytes, headers included, sent before the first packet declared lost). `None` until a
    /// loss.
    #[serde(default)]
    pub first_loss_offset: Option<u64>,
    /// Cumulative payload bytes sent a second time (TCP: `tcpi_bytes_retrans`). `None` where
    /// the sender does not count them itself (QUIC's come from its qlog, after the trial).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resent_bytes: Option<u64>,
    /// QUIC: the largest UDP payload the connection sends now (path MTU discovery's current
    /// value, or the fixed payload). `None` for other transports.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub udp_payload: Option<u32>,
    /// Cumulative signs that the peer's flow control held the sender back: TCP the time the
    /// receive window limited it (`tcpi_rwnd_limited`, µs), QUIC the DATA_BLOCKED and
    /// STREAM_DATA_BLOCKED frames it sent. `None` where the sender does not tell.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flow_blocked: Option<u64>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// CLOCK_MONOTONIC now in microseconds (the clock of every record).
pub fn now_us() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the timespec we own; CLOCK_MONOTONIC always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000 + ts.tv_nsec as u64 / 1000
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn derived_times_and_goodput() {
        let mut r = RequestRecord {
            http: HttpVersion::Http2,
            transport: Transport::Tcp,
            url: "https://198.18.0.2/bytes/1000000".into(),
            method: "GET".into(),
            status: 200,
            connection: 0,
            new_connection: true,
            start_us: 1_000_000,
            handshake_done_us: Some(1_040_000),
            first_byte_us: Some(1_060_000),
            last_byte_us: Some(1_860_000),
            bytes: 1_000_000,
            sent_bytes: 0,
            ttfb_ms: None,
            ttlb_ms: None,
            goodput_bps: None,
            handshake: Handshake::default(),
            transport_stats: TransportStats::default(),
            error: None,
        };
        r.derive();
        assert_eq!(r.ttfb_ms, Some(60.0));
        assert_eq!(r.ttlb_ms, Some(860.0));
        // 8 Mbit over the whole request's 0.86 s
        assert_eq!(r.goodput_bps, Some(8_000_000.0 / 0.86));
        // a small body whose bytes came in one burst: over the request, not over the burst
        r.bytes = 2_000;
        r.first_byte_us = Some(1_859_999);
        r.derive();
        assert_eq!(r.goodput_bps, Some(16_000.0 / 0.86));
        let line = serde_json::to_string(&r).unwrap();
        assert!(
            line.contains("\"http\":\"2\"") && line.contains("\"transport\":\"tcp\""),
            "{line}"
        );
        let back: RequestRecord = serde_json::from_str(&line).unwrap();
        assert_eq!(back, r);
    }
}
