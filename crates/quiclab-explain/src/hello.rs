//! The client's hello read from the wire: the TLS ClientHello's key shares and supported
//! groups, out of a packet capture of the client's first flight.
//!
//! Sans-IO: bytes in, answers out.
//! - [`capture`] reads a classic pcap file of raw IP packets (LINKTYPE_RAW, as quiclab's link
//!   writes `capture.pcap`): each IPv4 or IPv6 UDP or TCP packet with its addresses, ports and
//!   payload.
//! - [`client_hello`] takes the client's first flight from those packets (the first packet's
//!   sender is the client) and reads its ClientHello:
//!   - over QUIC, from the CRYPTO frames of its Initial packets, decrypted with the keys RFC
//!     9001 §5.2 derives from the client's Destination Connection ID (keys any observer can
//!     derive: Initial packets are protected, not secret). Only QUIC version 1 is read.
//!   - over TCP, from the TLS records the client sent first.
//! - A ClientHello split over several datagrams or segments (a post-quantum key share is larger
//!   than one) is put together before it is read.

use std::collections::BTreeMap;

use ring::aead;
use ring::hkdf;
use serde::Serialize;

/// A transport packet of a capture.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Captured {
    /// 17 for UDP, 6 for TCP.
    pub protocol: u8,
    /// Source and destination: address bytes (4 or 16) and port.
    pub src: (Vec<u8>, u16),
    pub dst: (Vec<u8>, u16),
    /// TCP only: the segment's sequence number and whether it is a SYN.
    pub seq: u32,
    pub syn: bool,
    pub payload: Vec<u8>,
}

/// What the ClientHello offered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Hello {
    /// The groups of its key shares, in order (TLS NamedGroup codes).
    pub key_shares: Vec<u16>,
    /// Its supported_groups extension, in order.
    pub groups: Vec<u16>,
    /// The ClientHello message's length (handshake header included), bytes.
    pub bytes: usize,
    /// Over QUIC: the transport parameters it carries (RFC 9000 §18).
    pub quic: Option<TransportParams>,
}

/// The transport parameters of a QUIC ClientHello that bound what its peer may send, each as
/// sent or RFC 9000 §18.2's default when absent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct TransportParams {
    /// initial_max_data: the connection's flow-control limit, bytes.
    pub max_data: u64,
    /// initial_max_stream_data_bidi_local: the limit on each stream it opens, i.e. on each
    /// response to its requests, bytes.
    pub max_stream_data_bidi_local: u64,
    /// initial_max_streams_bidi: how many streams the server may open.
    pub max_streams_bidi: u64,
    /// max_ack_delay, ms (25 when absent).
    pub max_ack_delay_ms: u64,
    /// max_idle_timeout, ms (0: none).
    pub idle_timeout_ms: u64,
}

impl TransportParams {
    /// Reads an encoded quic_transport_parameters extension (a list of ID, length, value).
    pub fn parse(b: &[u8]) -> Result<TransportParams, String> {
        let mut p = TransportParams {
            max_data: 0,
            max_stream_data_bidi_local: 0,
            max_streams_bidi: 0,
            max_ack_delay_ms: 25,
            idle_timeout_ms: 0,
        };
        let mut at = 0;
        while at < b.len() {
            let id = varint(b, &mut at)?;
            let len = varint(b, &mut at)? as usize;
            let value = b
                .get(at..at + len)
                .ok_or("a truncated transport parameter")?;
            at += len;
            let field = match id {
                0x01 => &mut p.idle_timeout_ms,
                0x04 => &mut p.max_data,
                0x05 => &mut p.max_stream_data_bidi_local,
                0x08 => &mut p.max_streams_bidi,
                0x0b => &mut p.max_ack_delay_ms,
                _ => continue,
            };
            let mut i = 0;
            *field = varint(value, &mut i)?;
        }
        Ok(p)
    }
}

/// A TLS NamedGroup's name (RFC 8446 §4.2.7, RFC 8422, draft-ietf-tls-ecdhe-mlkem), or its code.
pub fn group_name(code: u16) -> String {
    match code {
        0x0017 => "secp256r1".into(),
        0x0018 => "secp384r1".into(),
        0x0019 => "secp521r1".into(),
        0x001d => "x25519".into(),
        0x001e => "x448".into(),
        0x0100 => "ffdhe2048".into(),
        0x0101 => "ffdhe3072".into(),
        0x0102 => "ffdhe4096".into(),
        0x0103 => "ffdhe6144".into(),
        0x0104 => "ffdhe8192".into(),
        0x11eb => "SecP256r1MLKEM768".into(),
        0x11ec => "X25519MLKEM768".into(),
        0x11ed => "SecP384r1MLKEM1024".into(),
        0x6399 => "X25519Kyber768Draft00".into(),
        c if c & 0x0f0f == 0x0a0a => "GREASE".into(),
        c => format!("0x{c:04x}"),
    }
}

/// Names of `codes`, joined by " + ".
pub fn group_names(codes: &[u16]) -> String {
    codes
        .iter()
        .map(|&c| group_name(c))
        .collect::<Vec<_>>()
        .join(" + ")
}

/// A number that is the same for the same list of groups and differs otherwise (FNV-1a over the
/// codes): what a card compares between runs.
pub fn groups_code(codes: &[u16]) -> f64 {
    let mut h: u32 = 0x811c_9dc5;
    for c in codes {
        for b in c.to_be_bytes() {
            h ^= u32::from(b);
            h = h.wrapping_mul(0x0100_0193);
        }
    }
    f64::from(h)
}

fn be16(b: &[u8], at: usize) -> Result<u16, String> {
    b.get(at..at + 2)
        .map(|s| u16::from_be_bytes([s[0], s[1]]))
        .ok_or_else(|| format!("truncated at byte {at}"))
}

fn be32(b: &[u8], at: usize) -> Result<u32, String> {
    b.get(at..at + 4)
        .map(|s| u32::from_be_bytes([s[0], s[1], s[2], s[3]]))
        .ok_or_else(|| format!("truncated at byte {at}"))
}

/// The transport packets of a classic pcap file (either byte order, micro- or nanosecond
/// stamps) whose records are raw IP packets; packets of other protocols are left out.
pub fn capture(pcap: &[u8]) -> Result<Vec<Captured>, String> {
    let magic = pcap
        .get(..4)
        .ok_or("not a pcap file: shorter than its header")?;
    let little = match magic {
        [0xd4, 0xc3, 0xb2, 0xa1] | [0x4d, 0x3c, 0xb2, 0xa1] => true,
        [0xa1, 0xb2, 0xc3, 0xd4] | [0xa1, 0xb2, 0x3c, 0x4d] => false,
        _ => return Err("not a pcap file (its magic number is not pcap's)".into()),
    };
    let u32_at = |at: usize| -> Result<u32, String> {
        let s = pcap
            .get(at..at + 4)
            .ok_or_else(|| format!("the capture is truncated at byte {at}"))?;
        let a = [s[0], s[1], s[2], s[3]];
        Ok(if little {
            u32::from_le_bytes(a)
        } else {
            u32::from_be_bytes(a)
        })
    };
    let link = u32_at(20)?;
    // LINKTYPE_RAW, and the IPv4 / IPv6 link types that carry the same
    if ![101, 228, 229].contains(&link) {
        return Err(format!(
            "link type {link}: only raw IP packets (101, as quiclab captures) are read"
        ));
    }
    let mut out = Vec::new();
    let mut at = 24;
    while at + 16 <= pcap.len() {
        let caplen = u32_at(at + 8)? as usize;
        let start = at + 16;
        let Some(packet) = pcap.get(start..start + caplen) else {
            break; // a record cut short by a process that stopped writing
        };
        if let Some(p) = ip_packet(packet) {
            out.push(p);
        }
        at = start + caplen;
    }
    Ok(out)
}

/// A UDP or TCP packet out of an IPv4 or IPv6 packet, if it is one.
fn ip_packet(p: &[u8]) -> Option<Captured> {
    let (protocol, src, dst, body) = match p.first()? >> 4 {
        4 => {
            let ihl = usize::from(p[0] & 0x0f) * 4;
            let total = usize::from(be16(p, 2).ok()?).min(p.len());
            (p[9], p.get(12..16)?, p.get(16..20)?, p.get(ihl..total)?)
        }
        6 => {
            let len = usize::from(be16(p, 4).ok()?);
            (
                p[6],
                p.get(8..24)?,
                p.get(24..40)?,
                p.get(40..(40 + len).min(p.len()))?,
            )
        }
        _ => return None,
    };
    let ports = (be16(body, 0).ok()?, be16(body, 2).ok()?);
    let (seq, syn, payload) = match protocol {
        17 => (0, false, body.get(8..)?),
        6 => {
            let off = usize::from(body.get(12)? >> 4) * 4;
            (
                be32(body, 4).ok()?,
                body.get(13)? & 0x02 != 0,
                body.get(off..)?,
            )
        }
        _ => return None,
    };
    Some(Captured {
        protocol,
        src: (src.to_vec(), ports.0),
        dst: (dst.to_vec(), ports.1),
        seq,
        syn,
        payload: payload.to_vec(),
    })
}

/// The ClientHello of the capture's first connection: the first packet's sender is the client.
/// Over UDP its datagrams before the server's first are read as QUIC; over TCP its first bytes
/// as TLS records.
pub fn client_hello(packets: &[Captured]) -> Result<Hello, String> {
    let first = packets
        .first()
        .ok_or("the capture holds no UDP or TCP packet")?;
    let client = first.src.clone();
    let server = first.dst.clone();
    let from_client = |p: &&Captured| p.src == client && p.dst == server;
    match first.protocol {
        17 => {
            let flight: Vec<&[u8]> = packets
                .iter()
                .take_while(|p| p.src == client || p.dst != client)
                .filter(from_client)
                .map(|p| p.payload.as_slice())
                .collect();
            from_quic(&flight)
        }
        _ => {
            // the client's stream from its SYN's sequence number on, in order
            let syn = packets
                .iter()
                .filter(from_client)
                .find(|p| p.syn)
                .ok_or("the capture holds no SYN from the client")?;
            let base = syn.seq.wrapping_add(1);
            let mut segments: BTreeMap<u32, &[u8]> = BTreeMap::new();
            for p in packets.iter().filter(from_client) {
                if !p.payload.is_empty() {
                    segments
                        .entry(p.seq.wrapping_sub(base))
                        .or_insert(p.payload.as_slice());
                }
            }
            from_tls(&contiguous(
                segments.into_iter().map(|(off, d)| (u64::from(off), d)),
            ))
        }
    }
}

/// The bytes from offset 0 that `pieces` (offset, bytes; in offset order, overlapping or
/// repeated) hold without a gap.
fn contiguous<'a>(pieces: impl IntoIterator<Item = (u64, &'a [u8])>) -> Vec<u8> {
    let mut stream: Vec<u8> = Vec::new();
    for (off, data) in pieces {
        let off = off as usize;
        if off > stream.len() {
            break;
        }
        if off + data.len() > stream.len() {
            stream.extend_from_slice(&data[stream.len() - off..]);
        }
    }
    stream
}

/// The ClientHello in the TLS records at the start of a client's TCP stream.
pub fn from_tls(stream: &[u8]) -> Result<Hello, String> {
    let mut handshake = Vec::new();
    let mut at = 0;
    while at + 5 <= stream.len() {
        let (kind, len) = (stream[at], usize::from(be16(stream, at + 3)?));
        if kind != 22 {
            return Err(format!(
                "the client's first TLS record is of type {kind}, not a handshake (22)"
            ));
        }
        // a record cut short gives what it holds (the hello is then said to be incomplete)
        let end = (at + 5 + len).min(stream.len());
        handshake.extend_from_slice(&stream[at + 5..end]);
        if let Ok(h) = parse_client_hello(&handshake) {
            return Ok(h);
        }
        at = end;
    }
    parse_client_hello(&handshake)
}

/// The ClientHello in a client's first QUIC datagrams.
pub fn from_quic(datagrams: &[&[u8]]) -> Result<Hello, String> {
    let mut crypto: BTreeMap<u64, Vec<u8>> = BTreeMap::new();
    let mut initials = 0;
    for d in datagrams {
        let mut at = 0;
        while at < d.len() {
            let packet = &d[at..];
            if packet[0] & 0x80 == 0 {
                break; // a short header: the rest of the datagram is one packet
            }
            let (len, payload) = open_long(packet)?;
            if let Some(plain) = payload {
                initials += 1;
                crypto_frames(&plain, &mut crypto)?;
            }
            at += len;
        }
    }
    if initials == 0 {
        return Err("the client's first datagrams hold no QUIC v1 Initial packet".into());
    }
    parse_client_hello(&contiguous(
        crypto.iter().map(|(off, d)| (*off, d.as_slice())),
    ))
}

/// A QUIC variable-length integer at `*at`, advancing it.
fn varint(b: &[u8], at: &mut usize) -> Result<u64, String> {
    let first = *b.get(*at).ok_or("a truncated variable-length integer")?;
    let len = 1usize << (first >> 6);
    let bytes = b
        .get(*at..*at + len)
        .ok_or("a truncated variable-length integer")?;
    let mut v = u64::from(first & 0x3f);
    for x in &bytes[1..] {
        v = (v << 8) | u64::from(*x);
    }
    *at += len;
    Ok(v)
}

/// The initial salt of QUIC version 1 (RFC 9001 §5.2).
const INITIAL_SALT_V1: [u8; 20] = [
    0x38, 0x76, 0x2c, 0xf7, 0xf5, 0x59, 0x34, 0xb3, 0x4d, 0x17, 0x9a, 0xe6, 0xa4, 0xc8, 0x0c, 0xad,
    0xcc, 0xbb, 0x7f, 0x0a,
];

struct Len(usize);

impl hkdf::KeyType for Len {
    fn len(&self) -> usize {
        self.0
    }
}

/// HKDF-Expand-Label (RFC 8446 §7.1) with an empty context.
fn expand_label(prk: &hkdf::Prk, label: &[u8], len: usize) -> Vec<u8> {
    let full_len = (6 + label.len()) as u8;
    let info = [
        &(len as u16).to_be_bytes()[..],
        &[full_len],
        b"tls13 ",
        label,
        &[0],
    ];
    let mut out = vec![0; len];
    prk.expand(&info, Len(len))
        .and_then(|okm| okm.fill(&mut out))
        .expect("lengths HKDF-SHA256 allows");
    out
}

/// The client's Initial secret for a Destination Connection ID (RFC 9001 §5.2).
pub fn client_initial_secret(dcid: &[u8]) -> Vec<u8> {
    let initial = hkdf::Salt::new(hkdf::HKDF_SHA256, &INITIAL_SALT_V1).extract(dcid);
    expand_label(&initial, b"client in", 32)
}

/// The AEAD key, IV and header-protection key of a secret (RFC 9001 §5.1, AES-128-GCM).
pub fn packet_keys(secret: &[u8]) -> (Vec<u8>, Vec<u8>, Vec<u8>) {
    let prk = hkdf::Prk::new_less_safe(hkdf::HKDF_SHA256, secret);
    (
        expand_label(&prk, b"quic key", 16),
        expand_label(&prk, b"quic iv", 12),
        expand_label(&prk, b"quic hp", 16),
    )
}

/// One long-header packet at the start of `p`: its length, and its plaintext payload when it
/// is a QUIC v1 Initial (other long-header packets are skipped).
fn open_long(p: &[u8]) -> Result<(usize, Option<Vec<u8>>), String> {
    let version = be32(p, 1)?;
    let mut at = 5;
    let dcid_len = usize::from(*p.get(at).ok_or("a truncated long header")?);
    let dcid = p
        .get(at + 1..at + 1 + dcid_len)
        .ok_or("a truncated long header")?;
    at += 1 + dcid_len;
    let scid_len = usize::from(*p.get(at).ok_or("a truncated long header")?);
    at += 1 + scid_len;
    let kind = (p[0] & 0x30) >> 4;
    if version != 1 {
        return Err(format!(
            "QUIC version 0x{version:08x}: only version 1's Initial packets are read"
        ));
    }
    if kind == 0 {
        let token = varint(p, &mut at)? as usize;
        at += token;
    }
    let length = varint(p, &mut at)? as usize;
    let end = at + length;
    if end > p.len() {
        return Err(format!(
            "a packet of {length} bytes after its header, in {} bytes",
            p.len() - at
        ));
    }
    if kind != 0 {
        return Ok((end, None));
    }
    let (key, iv, hp) = packet_keys(&client_initial_secret(dcid));
    // header protection: a sample 4 bytes after the packet number's start
    let sample = p
        .get(at + 4..at + 20)
        .ok_or("an Initial packet too short to sample")?;
    let hp = aead::quic::HeaderProtectionKey::new(&aead::quic::AES_128, &hp)
        .map_err(|_| "a header-protection key")?;
    let mask = hp
        .new_mask(sample)
        .map_err(|_| "a header-protection mask")?;
    let mut header = p[..at].to_vec();
    header[0] ^= mask[0] & 0x0f;
    let pn_len = usize::from(header[0] & 0x03) + 1;
    let mut pn: u64 = 0;
    for i in 0..pn_len {
        let b = p[at + i] ^ mask[1 + i];
        header.push(b);
        pn = (pn << 8) | u64::from(b);
    }
    let mut nonce = [0u8; 12];
    nonce.copy_from_slice(&iv);
    for (n, b) in nonce[4..].iter_mut().zip(pn.to_be_bytes()) {
        *n ^= b;
    }
    let key = aead::LessSafeKey::new(
        aead::UnboundKey::new(&aead::AES_128_GCM, &key).map_err(|_| "an AEAD key")?,
    );
    let mut payload = p[at + pn_len..end].to_vec();
    let plain = key
        .open_in_place(
            aead::Nonce::assume_unique_for_key(nonce),
            aead::Aad::from(&header),
            &mut payload,
        )
        .map_err(|_| {
            "an Initial packet that its Destination Connection ID's keys do not open".to_string()
        })?;
    Ok((end, Some(plain.to_vec())))
}

/// The CRYPTO frames of an Initial packet's payload, by offset.
fn crypto_frames(b: &[u8], out: &mut BTreeMap<u64, Vec<u8>>) -> Result<(), String> {
    let mut at = 0;
    while at < b.len() {
        let kind = varint(b, &mut at)?;
        match kind {
            0x00 | 0x01 => {} // PADDING, PING
            0x02 | 0x03 => {
                // ACK: largest, delay, range count, first range, then the ranges
                let _ = varint(b, &mut at)?;
                let _ = varint(b, &mut at)?;
                let ranges = varint(b, &mut at)?;
                let _ = varint(b, &mut at)?;
                for _ in 0..ranges * 2 {
                    let _ = varint(b, &mut at)?;
                }
                if kind == 0x03 {
                    for _ in 0..3 {
                        let _ = varint(b, &mut at)?;
                    }
                }
            }
            0x06 => {
                let offset = varint(b, &mut at)?;
                let len = varint(b, &mut at)? as usize;
                let data = b.get(at..at + len).ok_or("a truncated CRYPTO frame")?;
                out.entry(offset).or_insert_with(|| data.to_vec());
                at += len;
            }
            0x1c => {
                // CONNECTION_CLOSE: the client gave up before its hello was read
                return Err("the client's Initial closes the connection".into());
            }
            other => {
                return Err(format!("frame type 0x{other:x} in an Initial packet"));
            }
        }
    }
    Ok(())
}

/// The key shares and groups of a ClientHello handshake message at the start of `b`.
fn parse_client_hello(b: &[u8]) -> Result<Hello, String> {
    let kind = *b.first().ok_or("no handshake message")?;
    if kind != 1 {
        return Err(format!(
            "the first handshake message is of type {kind}, not a ClientHello (1)"
        ));
    }
    let len = b
        .get(1..4)
        .map(|s| (usize::from(s[0]) << 16) | (usize::from(s[1]) << 8) | usize::from(s[2]))
        .ok_or("a truncated handshake header")?;
    let body = b.get(4..4 + len).ok_or_else(|| {
        format!(
            "the ClientHello is incomplete: {} of its {len} bytes in the flight read",
            b.len().saturating_sub(4)
        )
    })?;
    // legacy_version, random, session id, cipher suites, compression methods
    let mut at = 2 + 32;
    at += 1 + usize::from(*body.get(at).ok_or("a truncated ClientHello")?);
    at += 2 + usize::from(be16(body, at)?);
    at += 1 + usize::from(*body.get(at).ok_or("a truncated ClientHello")?);
    let ext_end = at + 2 + usize::from(be16(body, at)?);
    at += 2;
    let mut hello = Hello {
        key_shares: Vec::new(),
        groups: Vec::new(),
        bytes: 4 + len,
        quic: None,
    };
    while at + 4 <= ext_end.min(body.len()) {
        let (kind, len) = (be16(body, at)?, usize::from(be16(body, at + 2)?));
        let data = body
            .get(at + 4..at + 4 + len)
            .ok_or("a truncated extension")?;
        match kind {
            // supported_groups
            0x000a => {
                let n = usize::from(be16(data, 0)?);
                for i in (0..n).step_by(2) {
                    hello.groups.push(be16(data, 2 + i)?);
                }
            }
            // key_share: the client's shares, each a group and its key
            0x0033 => {
                let n = usize::from(be16(data, 0)?);
                let mut i = 2;
                while i < 2 + n {
                    hello.key_shares.push(be16(data, i)?);
                    i += 4 + usize::from(be16(data, i + 2)?);
                }
            }
            // quic_transport_parameters (RFC 9001 §8.2)
            0x0039 => hello.quic = Some(TransportParams::parse(data)?),
            _ => {}
        }
        at += 4 + len;
    }
    Ok(hello)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    #[test]
    fn transport_parameters_are_read_by_id_and_absent_ones_take_rfc_9000_defaults() {
        // initial_max_data 1,048,576 (a 4-byte varint), max_ack_delay 20 ms, a GREASE
        // parameter (ID 0x2ab2 as a 2-byte varint, 3 bytes) that is skipped, then
        // initial_max_stream_data_bidi_local 65,536
        let b = [
            0x04, 0x04, 0x80, 0x10, 0x00, 0x00, 0x0b, 0x01, 0x14, 0x6a, 0xb2, 0x03, 1, 2, 3, 0x05,
            0x04, 0x80, 0x01, 0x00, 0x00,
        ];
        let p = TransportParams::parse(&b).unwrap();
        assert_eq!(
            (p.max_data, p.max_ack_delay_ms, p.max_stream_data_bidi_local),
            (1_048_576, 20, 65_536)
        );
        assert_eq!((p.max_streams_bidi, p.idle_timeout_ms), (0, 0));
        assert_eq!(TransportParams::parse(&[]).unwrap().max_ack_delay_ms, 25);
        let e = TransportParams::parse(&b[..b.len() - 1]).unwrap_err();
        assert!(e.contains("truncated"), "{e}");
    }

    #[test]
    fn the_initial_keys_are_rfc_9001s() {
        // RFC 9001 Appendix A.1: the client's keys for Destination Connection ID
        // 0x8394c8f03e515708
        let secret = client_initial_secret(&hex("8394c8f03e515708"));
        assert_eq!(
            secret,
            hex("c00cf151ca5be075ed0ebfb5c80323c42d6b7db67881289af4008f1f6c357aea")
        );
        let (key, iv, hp) = packet_keys(&secret);
        assert_eq!(key, hex("1f369613dd76d5467730efcbe3b1a22d"));
        assert_eq!(iv, hex("fa044b2f42a3fd3b46fb255c"));
        assert_eq!(hp, hex("9f50449e04a0e810283a1e9933adedd2"));
    }

    #[test]
    fn group_codes_differ_by_list_and_names_are_tls_names() {
        assert_eq!(group_name(0x001d), "x25519");
        assert_eq!(group_name(0x11ec), "X25519MLKEM768");
        assert_eq!(group_name(0x2a2a), "GREASE");
        assert_eq!(group_names(&[0x11ec, 0x001d]), "X25519MLKEM768 + x25519");
        assert_ne!(
            groups_code(&[0x001d, 0x0017]),
            groups_code(&[0x0017, 0x001d])
        );
        assert_eq!(groups_code(&[0x001d]), groups_code(&[0x001d]));
    }
}
