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

/// A pcap file (as [`PcapWriter`] writes it, or any classic pcap of either byte order and
/// either timestamp resolution) as pcapng with `keylog` (an NSS key log, SSLKEYLOGFILE's
/// format) in a Decryption Secrets Block before its packets, so that Wireshark and tshark open
/// it decrypted with no key log option. Timestamps stay to the nanosecond (`if_tsresol` 9).
pub fn to_pcapng(pcap: &[u8], keylog: &[u8]) -> Result<Vec<u8>, String> {
    if pcap.len() < 24 {
        return Err(format!("{} bytes: too short for a pcap header", pcap.len()));
    }
    let magic = u32::from_le_bytes(pcap[0..4].try_into().expect("4 bytes"));
    let (little, nanos) = match magic {
        0xa1b2_3c4d => (true, true),
        0xa1b2_c3d4 => (true, false),
        0x4d3c_b2a1 => (false, true),
        0xd4c3_b2a1 => (false, false),
        m => return Err(format!("not a pcap file (magic {m:#010x})")),
    };
    let u32_at = |b: &[u8], o: usize| {
        let a: [u8; 4] = b[o..o + 4].try_into().expect("4 bytes");
        if little {
            u32::from_le_bytes(a)
        } else {
            u32::from_be_bytes(a)
        }
    };
    let snaplen = u32_at(pcap, 16);
    let linktype = u32_at(pcap, 20);
    let mut out = Vec::with_capacity(pcap.len() + keylog.len() + 256);
    // Section Header Block: byte-order magic, version 1.0, section length unknown
    let mut body = Vec::new();
    body.extend_from_slice(&0x1a2b_3c4du32.to_le_bytes());
    body.extend_from_slice(&1u16.to_le_bytes());
    body.extend_from_slice(&0u16.to_le_bytes());
    body.extend_from_slice(&(-1i64).to_le_bytes());
    block(&mut out, 0x0a0d_0d0a, &body);
    // Interface Description Block: the capture's link type and snap length, nanoseconds
    let mut body = Vec::new();
    body.extend_from_slice(&(linktype as u16).to_le_bytes());
    body.extend_from_slice(&0u16.to_le_bytes());
    body.extend_from_slice(&snaplen.to_le_bytes());
    body.extend_from_slice(&9u16.to_le_bytes()); // if_tsresol
    body.extend_from_slice(&1u16.to_le_bytes());
    body.extend_from_slice(&[9, 0, 0, 0]); // 10^-9 s, padded
    body.extend_from_slice(&[0, 0, 0, 0]); // opt_endofopt
    block(&mut out, 1, &body);
    // Decryption Secrets Block: the TLS key log
    if !keylog.is_empty() {
        let mut body = Vec::new();
        body.extend_from_slice(&0x544c_534bu32.to_le_bytes()); // "TLSK"
        body.extend_from_slice(&(keylog.len() as u32).to_le_bytes());
        body.extend_from_slice(keylog);
        pad4(&mut body);
        block(&mut out, 0x0000_000a, &body);
    }
    // an Enhanced Packet Block per record
    let mut at = 24;
    while at < pcap.len() {
        if pcap.len() - at < 16 {
            return Err(format!("a record header cut short at byte {at}"));
        }
        let (secs, frac) = (u32_at(pcap, at) as u64, u32_at(pcap, at + 4) as u64);
        let (caplen, len) = (u32_at(pcap, at + 8) as usize, u32_at(pcap, at + 12));
        let data = pcap
            .get(at + 16..at + 16 + caplen)
            .ok_or_else(|| format!("a record of {caplen} bytes cut short at byte {at}"))?;
        let ns = secs * 1_000_000_000 + if nanos { frac } else { frac * 1000 };
        let mut body = Vec::with_capacity(20 + caplen + 3);
        body.extend_from_slice(&0u32.to_le_bytes()); // interface 0
        body.extend_from_slice(&((ns >> 32) as u32).to_le_bytes());
        body.extend_from_slice(&(ns as u32).to_le_bytes());
        body.extend_from_slice(&(caplen as u32).to_le_bytes());
        body.extend_from_slice(&len.to_le_bytes());
        body.extend_from_slice(data);
        pad4(&mut body);
        block(&mut out, 6, &body);
        at += 16 + caplen;
    }
    Ok(out)
}

/// One pcapng block: type, total length, body (a multiple of 4 bytes), total length again.
fn block(out: &mut Vec<u8>, kind: u32, body: &[u8]) {
    let total = (12 + body.len()) as u32;
    out.extend_from_slice(&kind.to_le_bytes());
    out.extend_from_slice(&total.to_le_bytes());
    out.extend_from_slice(body);
    out.extend_from_slice(&total.to_le_bytes());
}

fn pad4(b: &mut Vec<u8>) {
    while !b.len().is_multiple_of(4) {
        b.push(0);
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

    #[test]
    fn pcapng_holds_the_key_log_before_the_packets_and_each_packet_to_the_nanosecond() {
        let mut p = PcapWriter::new(Vec::new()).unwrap();
        p.packet(
            Duration::new(1_700_000_000, 123_456_789),
            &[0x45, 0, 0, 20, 1],
        )
        .unwrap();
        p.packet(Duration::new(1_700_000_001, 0), &[0x60; 8])
            .unwrap();
        let pcap = p.into_inner().unwrap();
        let keys = b"CLIENT_RANDOM 00 11\n";
        let ng = to_pcapng(&pcap, keys).unwrap();
        let u32_at = |o: usize| u32::from_le_bytes(ng[o..o + 4].try_into().unwrap());
        // walk the blocks: each one's two lengths agree and blocks tile the file
        let mut blocks = Vec::new();
        let mut at = 0;
        while at < ng.len() {
            let (kind, len) = (u32_at(at), u32_at(at + 4) as usize);
            assert!(len.is_multiple_of(4));
            assert_eq!(u32_at(at + len - 4) as usize, len);
            blocks.push((kind, at));
            at += len;
        }
        assert_eq!(at, ng.len());
        let kinds: Vec<u32> = blocks.iter().map(|b| b.0).collect();
        assert_eq!(kinds, vec![0x0a0d_0d0a, 1, 0x0a, 6, 6]);
        assert_eq!(u32_at(8), 0x1a2b_3c4d);
        // the interface: raw IP, nanoseconds
        let idb = blocks[1].1;
        assert_eq!(u32_at(idb + 8) & 0xffff, LINKTYPE_RAW);
        assert_eq!(u32_at(idb + 16), 0x0001_0009);
        assert_eq!(ng[idb + 20], 9);
        // the secrets, whole
        let dsb = blocks[2].1;
        assert_eq!(u32_at(dsb + 8), 0x544c_534b);
        assert_eq!(u32_at(dsb + 12) as usize, keys.len());
        assert_eq!(&ng[dsb + 16..dsb + 16 + keys.len()], keys);
        // the first packet: its time in nanoseconds, its five bytes
        let epb = blocks[3].1;
        let ns = ((u32_at(epb + 12) as u64) << 32) | u32_at(epb + 16) as u64;
        assert_eq!(ns, 1_700_000_000_123_456_789);
        assert_eq!((u32_at(epb + 20), u32_at(epb + 24)), (5, 5));
        assert_eq!(&ng[epb + 28..epb + 33], &[0x45, 0, 0, 20, 1]);
        // a microsecond pcap of the other byte order reads the same
        let mut be = Vec::new();
        for v in [0xa1b2_c3d4u32, 0x0002_0004, 0, 0, SNAPLEN, LINKTYPE_RAW] {
            be.extend_from_slice(&v.to_be_bytes());
        }
        for v in [1_700_000_000u32, 123_456, 1, 1] {
            be.extend_from_slice(&v.to_be_bytes());
        }
        be.push(0x45);
        let other = to_pcapng(&be, b"").unwrap();
        let at = |o: usize| u32::from_le_bytes(other[o..o + 4].try_into().unwrap());
        // no secrets: no block for them; the packet right after the interface
        let epb = 28 + 32;
        assert_eq!(at(epb), 6);
        let ns = ((at(epb + 12) as u64) << 32) | at(epb + 16) as u64;
        assert_eq!(ns, 1_700_000_000_123_456_000);
        assert!(to_pcapng(b"nonsense but long enough to be read", b"").is_err());
        assert!(to_pcapng(&pcap[..pcap.len() - 2], b"").is_err());
    }
}
