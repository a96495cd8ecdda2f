//! Packet headers and their protection: AEAD over the payload (header as associated data) and
//! header protection over the packet number, both with keys from rustls's QUIC API. Nothing here
//! is a cipher of our own: [`seal`] and [`open`] only lay out bytes and call rustls.
//!
//! Layouts (all integers big-endian):
//!
//! ```text
//! long  (Initial, Handshake): 0b11TT0011 | version u32 | 8 | dcid[8] | 8 | scid[8] | pn u32 | payload+tag
//! short (1-RTT):              0b01000011 | dcid[8] | pn u32 | payload+tag
//! ```
//!
//! `TT` is 0 for Initial and 2 for Handshake; the low bits of the first byte (the packet number
//! length minus one, always 3 here) and the packet number are masked by header protection, as
//! in QUIC (RFC 9001 section 5.4), with the sample taken 4 bytes after the packet number's start.

use rustls::quic::DirectionalKeys;

use crate::error::WireError;

/// This protocol's version number (in long headers); not a QUIC version.
pub const VERSION: u32 = 0x51c0_de01;
/// Connection ids are always this long.
pub const CID_LEN: usize = 8;
/// Bytes of the packet number on the wire.
const PN_LEN: usize = 4;
/// The AEAD tag (AES-GCM and ChaCha20-Poly1305 alike).
pub const TAG_LEN: usize = 16;
const SAMPLE_LEN: usize = 16;

/// A connection id.
pub type Cid = [u8; CID_LEN];

/// Which keys protect a packet (and which packet number space it belongs to).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Level {
    Initial,
    Handshake,
    OneRtt,
}

impl Level {
    pub fn index(self) -> usize {
        self as usize
    }
}

/// A parsed, still protected header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    pub level: Level,
    pub dcid: Cid,
    /// Present in long headers only.
    pub scid: Option<Cid>,
    pn_offset: usize,
}

/// Bytes of header before the payload.
pub fn header_len(level: Level) -> usize {
    match level {
        Level::OneRtt => 1 + CID_LEN + PN_LEN,
        _ => 1 + 4 + 1 + CID_LEN + 1 + CID_LEN + PN_LEN,
    }
}

/// Bytes a packet adds around its plaintext payload.
pub fn overhead(level: Level) -> usize {
    header_len(level) + TAG_LEN
}

/// Reads the unprotected part of a header: enough to route the packet and find its keys.
pub fn parse_header(buf: &[u8]) -> Result<Header, WireError> {
    let first = *buf.first().ok_or(WireError::Truncated { what: "header" })?;
    if first & 0x40 == 0 {
        return Err(WireError::Invalid {
            field: "first byte",
            value: u64::from(first),
            allowed: "the fixed bit 0x40 set",
        });
    }
    let mut dcid = [0; CID_LEN];
    if first & 0x80 == 0 {
        let end = 1 + CID_LEN;
        dcid.copy_from_slice(buf.get(1..end).ok_or(WireError::Truncated {
            what: "destination connection id",
        })?);
        return Ok(Header {
            level: Level::OneRtt,
            dcid,
            scid: None,
            pn_offset: end,
        });
    }
    let level = match (first >> 4) & 0x3 {
        0 => Level::Initial,
        2 => Level::Handshake,
        t => {
            return Err(WireError::Invalid {
                field: "long header type",
                value: u64::from(t),
                allowed: "0 (Initial) or 2 (Handshake)",
            });
        }
    };
    if buf.len() < header_len(level) {
        return Err(WireError::Truncated {
            what: "long header",
        });
    }
    let version = u32::from_be_bytes([buf[1], buf[2], buf[3], buf[4]]);
    if version != VERSION {
        return Err(WireError::Invalid {
            field: "version",
            value: u64::from(version),
            allowed: "0x51c0de01",
        });
    }
    for (at, what) in [(5, "destination cid length"), (14, "source cid length")] {
        if usize::from(buf[at]) != CID_LEN {
            return Err(WireError::Invalid {
                field: what,
                value: u64::from(buf[at]),
                allowed: "8",
            });
        }
    }
    dcid.copy_from_slice(&buf[6..14]);
    let mut scid = [0; CID_LEN];
    scid.copy_from_slice(&buf[15..23]);
    Ok(Header {
        level,
        dcid,
        scid: Some(scid),
        pn_offset: 23,
    })
}

/// Writes the header of a packet (packet number unprotected) into `out`.
pub fn write_header(out: &mut Vec<u8>, level: Level, dcid: &Cid, scid: &Cid, pn: u64) {
    match level {
        Level::OneRtt => {
            out.push(0x40 | (PN_LEN as u8 - 1));
            out.extend_from_slice(dcid);
        }
        Level::Initial | Level::Handshake => {
            let t = if level == Level::Initial { 0 } else { 2 };
            out.push(0xc0 | (t << 4) | (PN_LEN as u8 - 1));
            out.extend_from_slice(&VERSION.to_be_bytes());
            out.push(CID_LEN as u8);
            out.extend_from_slice(dcid);
            out.push(CID_LEN as u8);
            out.extend_from_slice(scid);
        }
    }
    out.extend_from_slice(&(pn as u32).to_be_bytes());
}

/// Encrypts `packet` in place: `packet[..hdr_len]` is the header written by [`write_header`],
/// the rest the plaintext payload. Appends the tag and applies header protection.
pub fn seal(keys: &DirectionalKeys, pn: u64, packet: &mut Vec<u8>, hdr_len: usize) {
    // Short payloads are padded so that the header-protection sample exists.
    let min = PN_LEN + SAMPLE_LEN - TAG_LEN;
    let pn_offset = hdr_len - PN_LEN;
    while packet.len() - hdr_len < min {
        packet.push(crate::wire::frame_type::PADDING);
    }
    let (header, payload) = packet.split_at_mut(hdr_len);
    // rustls's ring keys fail only on a wrong-size buffer, which this layout never produces.
    let tag = keys
        .packet
        .encrypt_in_place(pn, header, payload)
        .expect("AEAD encryption of a well-formed packet");
    packet.extend_from_slice(tag.as_ref());
    let mut sample = [0u8; SAMPLE_LEN];
    sample.copy_from_slice(&packet[pn_offset + PN_LEN..pn_offset + PN_LEN + SAMPLE_LEN]);
    let (first, rest) = packet.split_at_mut(1);
    keys.header
        .encrypt_in_place(
            &sample,
            &mut first[0],
            &mut rest[pn_offset - 1..pn_offset - 1 + PN_LEN],
        )
        .expect("header protection with a sample of the right size");
}

/// Recovers a full packet number from its low `bits` bits (RFC 9000 appendix A.3).
pub fn decode_pn(largest: Option<u64>, truncated: u64, bits: u32) -> u64 {
    let expected = largest.map_or(0, |l| l + 1);
    let win = 1u64 << bits;
    let hwin = win / 2;
    let mask = win - 1;
    let candidate = (expected & !mask) | truncated;
    if candidate + hwin <= expected && candidate < (1u64 << 62) - win {
        candidate + win
    } else if candidate > expected + hwin && candidate >= win {
        candidate - win
    } else {
        candidate
    }
}

/// Why [`open`] refused a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum OpenError {
    #[error("packet too short to carry a sample and a tag")]
    TooShort,
    #[error("authentication failed (tampered, forged, or wrong keys)")]
    Auth,
}

/// Removes header protection and decrypts `packet` in place. Returns the packet number and the
/// plaintext's range in `packet`. Nothing is trusted before the tag verifies.
pub fn open(
    keys: &DirectionalKeys,
    header: &Header,
    largest: Option<u64>,
    packet: &mut [u8],
) -> Result<(u64, std::ops::Range<usize>), OpenError> {
    let pn_offset = header.pn_offset;
    if packet.len() < pn_offset + PN_LEN + SAMPLE_LEN || packet.len() < pn_offset + PN_LEN + TAG_LEN
    {
        return Err(OpenError::TooShort);
    }
    let mut sample = [0u8; SAMPLE_LEN];
    sample.copy_from_slice(&packet[pn_offset + PN_LEN..pn_offset + PN_LEN + SAMPLE_LEN]);
    let (first, rest) = packet.split_at_mut(1);
    keys.header
        .decrypt_in_place(
            &sample,
            &mut first[0],
            &mut rest[pn_offset - 1..pn_offset - 1 + PN_LEN],
        )
        .map_err(|_| OpenError::Auth)?;
    let pn_len = usize::from(packet[0] & 0x03) + 1;
    if pn_len != PN_LEN {
        // Our peers always use 4 bytes: anything else is a forgery that would fail anyway.
        return Err(OpenError::Auth);
    }
    let mut truncated = 0u64;
    for b in &packet[pn_offset..pn_offset + PN_LEN] {
        truncated = (truncated << 8) | u64::from(*b);
    }
    let pn = decode_pn(largest, truncated, 32);
    let hdr_len = pn_offset + PN_LEN;
    let (h, payload) = packet.split_at_mut(hdr_len);
    let plain_len = keys
        .packet
        .decrypt_in_place(pn, h, payload)
        .map_err(|_| OpenError::Auth)?
        .len();
    Ok((pn, hdr_len..hdr_len + plain_len))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls::Side;
    use rustls::quic::{Keys, Version};

    fn initial_keys(side: Side) -> Keys {
        let suite = crate::crypto::initial_suite();
        Keys::initial(Version::V1, suite.suite, suite.quic, &[9; 8], side)
    }

    #[test]
    fn packet_numbers_are_recovered_across_the_32_bit_wrap() {
        assert_eq!(decode_pn(None, 0, 32), 0);
        assert_eq!(decode_pn(Some(0xffff_fffe), 0xffff_ffff, 32), 0xffff_ffff);
        assert_eq!(decode_pn(Some(0xffff_ffff), 0, 32), 0x1_0000_0000);
        assert_eq!(decode_pn(Some(0x1_0000_0005), 0xffff_fff0, 32), 0xffff_fff0);
        // RFC 9000 A.3's example, with 16 bits
        assert_eq!(decode_pn(Some(0xa82f30ea), 0x9b32, 16), 0xa82f9b32);
    }

    #[test]
    fn sealed_packets_open_and_any_flipped_bit_is_rejected() {
        let (client, server) = (initial_keys(Side::Client), initial_keys(Side::Server));
        for level in [Level::Initial, Level::OneRtt] {
            let mut p = Vec::new();
            write_header(&mut p, level, &[1; 8], &[2; 8], 300);
            let hdr_len = p.len();
            assert_eq!(hdr_len, header_len(level));
            p.extend_from_slice(b"payload bytes");
            seal(&client.local, 300, &mut p, hdr_len);
            let h = parse_header(&p).unwrap();
            assert_eq!((h.level, h.dcid), (level, [1; 8]));
            let mut ok = p.clone();
            let (pn, range) = open(&server.remote, &h, Some(299), &mut ok).unwrap();
            assert_eq!(pn, 300);
            assert_eq!(&ok[range], b"payload bytes");
            // the packet number is masked on the wire
            assert_ne!(&p[hdr_len - 4..hdr_len], &300u32.to_be_bytes());
            for i in 0..p.len() {
                for bit in [0x01, 0x80] {
                    let mut bad = p.clone();
                    bad[i] ^= bit;
                    let opened = parse_header(&bad)
                        .ok()
                        .filter(|h| h.level == level)
                        .map(|h| open(&server.remote, &h, Some(299), &mut bad));
                    assert!(
                        !matches!(opened, Some(Ok(_))),
                        "flipping bit {bit:#x} of byte {i} went unnoticed"
                    );
                }
            }
            // the sender's own keys do not open its packets (directions are separate)
            let mut own = p.clone();
            assert_eq!(
                open(&client.remote, &h, Some(299), &mut own),
                Err(OpenError::Auth)
            );
        }
    }
}
