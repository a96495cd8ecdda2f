//! A sender timeline from s2n-quic's own events: its recovery metrics (congestion window,
//! bytes in flight, RTTs), its pacing rate, the packet bytes the peer acknowledged (each packet
//! sent, matched to the acknowledgements that cover it), its losses, congestion events and MTU;
//! one sample per connection at most every [`SAMPLE_EVERY_US`] and at every congestion event
//! and close.

use std::collections::BTreeMap;
use std::sync::Arc;

use quiclab_endpoint::timeline::TimelineWriter;
use quiclab_model::record::{TimelineSample, Transport, now_us};
use s2n_quic::provider::event::events::PacketHeader;
use s2n_quic::provider::event::{ConnectionInfo, ConnectionMeta, Subscriber, events};

/// The spacing of samples between events that always make one (quinn's timeline samples
/// every 5 ms too).
pub const SAMPLE_EVERY_US: u64 = 5_000;

/// Writes every connection's samples to one timeline.
pub struct Timeline {
    /// `None`: nothing is written (the events are still counted).
    pub writer: Option<Arc<TimelineWriter>>,
    /// The path's minimum RTT, µs: RTT samples below it are impossible and counted.
    pub path_min_rtt_us: Option<u64>,
}

/// What one connection's sender has told so far.
#[derive(Debug, Default)]
pub struct Sender {
    connection: u32,
    cwnd: u64,
    in_flight: u64,
    rtt_us: Option<u64>,
    latest_rtt_us: Option<u64>,
    rate_bps: Option<u64>,
    lost_packets: u64,
    impossible: u64,
    udp_payload: Option<u32>,
    last_sample_us: Option<u64>,
    /// Packets sent and neither acknowledged nor declared lost: (space, number) to bytes.
    unacked: BTreeMap<(u8, u64), u64>,
    /// Packet bytes the peer acknowledged (an acknowledged packet that carried only
    /// acknowledgements counts too: a few dozen bytes each).
    acked_bytes: u64,
}

/// A packet's number space and number (none for packets without one).
fn numbered(h: &PacketHeader) -> Option<(u8, u64)> {
    match *h {
        PacketHeader::Initial { number, .. } => Some((0, number)),
        PacketHeader::Handshake { number, .. } => Some((1, number)),
        PacketHeader::ZeroRtt { number, .. } | PacketHeader::OneRtt { number, .. } => {
            Some((2, number))
        }
        _ => None,
    }
}

impl Sender {
    /// Packet `key` (space, number) of `len` bytes sent.
    fn sent(&mut self, key: (u8, u64), len: usize) {
        self.unacked.insert(key, len as u64);
    }

    /// The packets `range` of number space `space` acknowledged.
    fn acked(&mut self, space: u8, range: &std::ops::RangeInclusive<u64>) {
        let keys: Vec<(u8, u64)> = self
            .unacked
            .range((space, *range.start())..=(space, *range.end()))
            .map(|(k, _)| *k)
            .collect();
        for k in keys {
            self.acked_bytes += self.unacked.remove(&k).unwrap_or(0);
        }
    }
}

impl Sender {
    /// The sample of what it has told, at `t_us`.
    fn sample(&self, t_us: u64, congestion_event: bool, floor: Option<u64>) -> TimelineSample {
        TimelineSample {
            transport: Transport::Quic,
            connection: self.connection,
            t_us,
            cwnd_bytes: Some(self.cwnd),
            bytes_in_flight: Some(self.in_flight),
            acked_bytes: Some(self.acked_bytes),
            rtt_us: self.rtt_us,
            rate_bps: self.rate_bps,
            congestion_event,
            retransmits: Some(self.lost_packets),
            impossible_rtt_samples: floor.map(|_| self.impossible),
            busy_rtt_samples: None,
            first_loss_offset: None,
            resent_bytes: None,
            udp_payload: self.udp_payload,
            flow_blocked: None,
        }
    }

    /// Notes a sample taken now if one is due (or `always`).
    fn note(&mut self, always: bool, congestion_event: bool, t: &Timeline) {
        let Some(writer) = &t.writer else { return };
        let now = now_us();
        let due = match self.last_sample_us {
            Some(last) => now >= last + SAMPLE_EVERY_US,
            None => true,
        };
        if always || due {
            self.last_sample_us = Some(now);
            // a failed write is the writer's to report when it is flushed
            let _ = writer.write(&self.sample(now, congestion_event, t.path_min_rtt_us));
        }
    }
}

impl Subscriber for Timeline {
    type ConnectionContext = Sender;

    fn create_connection_context(
        &mut self,
        meta: &ConnectionMeta,
        _info: &ConnectionInfo,
    ) -> Sender {
        Sender {
            connection: meta.id as u32,
            ..Sender::default()
        }
    }

    fn on_recovery_metrics(
        &mut self,
        s: &mut Sender,
        _meta: &ConnectionMeta,
        e: &events::RecoveryMetrics,
    ) {
        s.cwnd = u64::from(e.congestion_window);
        s.in_flight = u64::from(e.bytes_in_flight);
        s.rtt_us = Some(e.smoothed_rtt.as_micros() as u64);
        let latest = e.latest_rtt.as_micros() as u64;
        // a new sample (the metrics are published for other changes too)
        if s.latest_rtt_us != Some(latest) {
            s.latest_rtt_us = Some(latest);
            if self
                .path_min_rtt_us
                .is_some_and(|floor| latest > 0 && latest < floor)
            {
                s.impossible += 1;
            }
        }
        s.note(false, false, self);
    }

    fn on_pacing_rate_updated(
        &mut self,
        s: &mut Sender,
        _meta: &ConnectionMeta,
        e: &events::PacingRateUpdated,
    ) {
        s.rate_bps = Some(e.bytes_per_second.saturating_mul(8));
    }

    fn on_packet_sent(&mut self, s: &mut Sender, _meta: &ConnectionMeta, e: &events::PacketSent) {
        if let Some(key) = numbered(&e.packet_header) {
            s.sent(key, e.packet_len);
        }
    }

    fn on_ack_range_received(
        &mut self,
        s: &mut Sender,
        _meta: &ConnectionMeta,
        e: &events::AckRangeReceived,
    ) {
        // an acknowledgement covers packets of the space of the packet that carried it
        if let Some((space, _)) = numbered(&e.packet_header) {
            s.acked(space, &e.ack_range);
        }
    }

    fn on_packet_lost(&mut self, s: &mut Sender, _meta: &ConnectionMeta, e: &events::PacketLost) {
        if let Some(key) = numbered(&e.packet_header) {
            s.unacked.remove(&key);
        }
        if !e.is_mtu_probe {
            s.lost_packets += 1;
        }
    }

    fn on_congestion(&mut self, s: &mut Sender, _meta: &ConnectionMeta, _e: &events::Congestion) {
        s.note(true, true, self);
    }

    fn on_mtu_updated(&mut self, s: &mut Sender, _meta: &ConnectionMeta, e: &events::MtuUpdated) {
        s.udp_payload = Some(u32::from(e.mtu));
    }

    fn on_connection_closed(
        &mut self,
        s: &mut Sender,
        _meta: &ConnectionMeta,
        _e: &events::ConnectionClosed,
    ) {
        s.note(true, false, self);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sample_says_what_the_sender_told_and_counts_impossible_rtts_only_against_a_floor() {
        let s = Sender {
            connection: 3,
            cwnd: 12_000,
            in_flight: 4_800,
            rtt_us: Some(20_500),
            rate_bps: Some(8_000_000),
            lost_packets: 2,
            impossible: 1,
            udp_payload: Some(1_472),
            ..Sender::default()
        };
        let with_floor = s.sample(10, true, Some(20_000));
        assert_eq!(with_floor.connection, 3);
        assert_eq!(with_floor.cwnd_bytes, Some(12_000));
        assert_eq!(with_floor.bytes_in_flight, Some(4_800));
        assert_eq!(with_floor.retransmits, Some(2));
        assert_eq!(with_floor.impossible_rtt_samples, Some(1));
        assert!(with_floor.congestion_event);
        assert_eq!(with_floor.udp_payload, Some(1_472));
        assert_eq!(s.sample(10, false, None).impossible_rtt_samples, None);
    }

    #[test]
    fn acknowledged_bytes_are_the_packets_an_acknowledgement_covers_in_its_own_space() {
        let mut s = Sender::default();
        s.sent((0, 0), 1_200);
        for n in 0..10 {
            s.sent((2, n), 1_000 + n as usize);
        }
        // packets 2 to 4 of the application space: 1002 + 1003 + 1004
        s.acked(2, &(2..=4));
        assert_eq!(s.acked_bytes, 3_009);
        // again (a later ACK repeats its ranges): only what is new
        s.acked(2, &(0..=4));
        assert_eq!(s.acked_bytes, 3_009 + 1_000 + 1_001);
        // an Initial ACK acknowledges the Initial packet 0 only
        s.acked(0, &(0..=0));
        assert_eq!(s.acked_bytes, 3_009 + 2_001 + 1_200);
        assert_eq!(s.unacked.len(), 5);
    }
}
