//! Packet captures in the classic pcap format (nanosecond timestamps, LINKTYPE_RAW: each record
//! is an IPv4 or IPv6 packet without a link-layer header), as Wireshark and tshark read them.

use std::io::{self, Write};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// pcap's magic number for nanosecond timestamps.
const MAGIC_NANOS: u32 = 0xa1b2_3c4d;
/// LINKTYPE_RAW: raw IPv4/IPv6 packets.
const LINKTYPE_RAW: u32 = 101;
/// Largest packet recorded whole.
const SNAPLEN: u32 = 65_536;

/// Writes a pcap file: the header first, then one record per packet.
pub struct PcapWriter<W: Write> {
    w: W,
}

impl<W: Write> PcapWriter<W> {
    pub fn new(mut w: W) -> io::Result<Self> {
        let mut h = Vec::with_capacity(24);
        h.extend_from_slice(&MAGIC_NANOS.to_ne_bytes());
        h.extend_from_slice(&2u16.to_ne_bytes());
        h.extend_from_slice(&4u16.to_ne_bytes());
        h.extend_from_slice(&0i32.to_ne_bytes()); // time zone: UTC
        h.extend_from_slice(&0u32.to_ne_bytes()); // accuracy
        h.extend_from_slice(&SNAPLEN.to_ne_bytes());
        h.extend_from_slice(&LINKTYPE_RAW.to_ne_bytes());
        w.write_all(&h)?;
        Ok(PcapWriter { w })
    }

    /// One packet seen at `at` (since the Unix epoch).
    pub fn packet(&mut self, at: Duration, packet: &[u8]) -> io::Result<()> {
        let caplen = packet.len().min(SNAPLEN as usize);
        let mut h = [0u8; 16];
        h[0..4].copy_from_slice(&(at.as_secs() as u32).to_ne_bytes());
        h[4..8].copy_from_slice(&at.subsec_nanos().to_ne_bytes());
        h[8..12].copy_from_slice(&(caplen as u32).to_ne_bytes());
        h[12..16].copy_from_slice(&(packet.len() as u32).to_ne_bytes());
        self.w.write_all(&h)?;
        self.w.write_all(&packet[..caplen])
    }

    pub fn into_inner(mut self) -> io::Result<W> {
        self.w.flush()?;
        Ok(self.w)
    }
}

/// The real-time clock now, for capture timestamps.
pub fn wall_clock() -> Duration {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_and_records_follow_the_pcap_layout() {
        let mut p = PcapWriter::new(Vec::new()).unwrap();
        p.packet(Duration::new(1_700_000_000, 123_456_789), &[0x45, 0, 0, 20])
            .unwrap();
        let b = p.into_inner().unwrap();
        assert_eq!(b.len(), 24 + 16 + 4);
        let u32_at = |o: usize| u32::from_ne_bytes(b[o..o + 4].try_into().unwrap());
        assert_eq!(u32_at(0), MAGIC_NANOS);
        assert_eq!(u32_at(20), LINKTYPE_RAW);
        assert_eq!(u32_at(24), 1_700_000_000);
        assert_eq!(u32_at(28), 123_456_789);
        assert_eq!((u32_at(32), u32_at(36)), (4, 4));
        assert_eq!(b[40], 0x45);
    }
}
