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
    /// Its random: what names its connection's secrets in a key log.
    #[serde(skip)]
    pub random: [u8; 32],
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
    /// initial_max_stream_data_bidi_remote: the limit on each stream its peer opens, bytes (a
    /// server's: on each request, its body included).
    pub max_stream_data_bidi_remote: u64,
    /// initial_max_streams_bidi: how many streams its peer may open (a server's: how many
    /// requests a client may have open at once).
    pub max_streams_bidi: u64,
    /// max_ack_delay, ms (25 when absent).
    pub max_ack_delay_ms: u64,
    /// max_idle_timeout, ms (0: none).
    pub idle_timeout_ms: u64,
    /// max_udp_payload_size: the largest UDP payload it takes, bytes (65527 when absent).
    pub max_udp_payload: u64,
}

impl TransportParams {
    /// Reads an encoded quic_transport_parameters extension (a list of ID, length, value).
    pub fn parse(b: &[u8]) -> Result<TransportParams, String> {
        let mut p = TransportParams {
            max_data: 0,
            max_stream_data_bidi_local: 0,
            max_stream_data_bidi_remote: 0,
            max_streams_bidi: 0,
            max_ack_delay_ms: 25,
            idle_timeout_ms: 0,
            max_udp_payload: 65527,
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
                0x03 => &mut p.max_udp_payload,
                0x05 => &mut p.max_stream_data_bidi_local,
                0x06 => &mut p.max_stream_data_bidi_remote,
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

pub(crate) fn be16(b: &[u8], at: usize) -> Result<u16, String> {
    b.get(at..at + 2)
        .map(|s| u16::from_be_bytes([s[0], s[1]]))
        .ok_or_else(|| format!("truncated at byte {at}"))
}

pub(crate) fn be32(b: &[u8], at: usize) -> Result<u32, String> {
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
        _ => from_tls(&tcp_stream(packets, &client, &server)?),
    }
}

/// The bytes one end of a capture's TCP connection sent, from its SYN's sequence number on,
/// in order and without a gap (a retransmitted segment is read once).
pub(crate) fn tcp_stream(
    packets: &[Captured],
    src: &(Vec<u8>, u16),
    dst: &(Vec<u8>, u16),
) -> Result<Vec<u8>, String> {
    let from = |p: &&Captured| &p.src == src && &p.dst == dst;
    let syn = packets
        .iter()
        .filter(from)
        .find(|p| p.syn)
        .ok_or("the capture holds no SYN of the connection")?;
    let base = syn.seq.wrapping_add(1);
    let mut segments: BTreeMap<u32, &[u8]> = BTreeMap::new();
    for p in packets.iter().filter(from) {
        if !p.payload.is_empty() {
            segments
                .entry(p.seq.wrapping_sub(base))
                .or_insert(p.payload.as_slice());
        }
    }
    Ok(contiguous(
        segments.into_iter().map(|(off, d)| (u64::from(off), d)),
    ))
}

/// The bytes from offset 0 that `pieces` (offset, bytes; in offset order, overlapping or
/// repeated) hold without a gap.
pub(crate) fn contiguous<'a>(pieces: impl IntoIterator<Item = (u64, &'a [u8])>) -> Vec<u8> {
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
            let long = open_long(packet, &|kind, dcid| {
                (kind == 0).then(|| Keys::initial(dcid, false))
            })?;
            if let Some(plain) = long.plain {
                initials += 1;
                crypto_frames(&plain, &mut crypto)?;
            }
            at += long.len;
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
pub(crate) fn varint(b: &[u8], at: &mut usize) -> Result<u64, String> {
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

/// HKDF-Expand-Label (RFC 8446 §7.1) with an empty context, over HKDF-SHA256.
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
        .expect("lengths HKDF allows");
    out
}

fn initial_secret(dcid: &[u8], label: &[u8]) -> Vec<u8> {
    let initial = hkdf::Salt::new(hkdf::HKDF_SHA256, &INITIAL_SALT_V1).extract(dcid);
    expand_label(&initial, label, 32)
}

/// The client's Initial secret for a Destination Connection ID (RFC 9001 §5.2).
pub fn client_initial_secret(dcid: &[u8]) -> Vec<u8> {
    initial_secret(dcid, b"client in")
}

/// The server's Initial secret for the Destination Connection ID of the client's Initial
/// packets (RFC 9001 §5.2).
pub fn server_initial_secret(dcid: &[u8]) -> Vec<u8> {
    initial_secret(dcid, b"server in")
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

/// The keys that open one packet number space's packets of one direction.
pub(crate) struct Keys {
    aead: aead::LessSafeKey,
    iv: [u8; 12],
    hp: aead::quic::HeaderProtectionKey,
}

impl Keys {
    /// The keys of a traffic secret under a TLS 1.3 cipher suite (RFC 9001 §5.1).
    pub(crate) fn of(secret: &[u8], suite: u16) -> Result<Keys, String> {
        let (hash, aead_alg, hp_alg, len) = match suite {
            0x1301 => (
                hkdf::HKDF_SHA256,
                &aead::AES_128_GCM,
                &aead::quic::AES_128,
                16,
            ),
            0x1302 => (
                hkdf::HKDF_SHA384,
                &aead::AES_256_GCM,
                &aead::quic::AES_256,
                32,
            ),
            0x1303 => (
                hkdf::HKDF_SHA256,
                &aead::CHACHA20_POLY1305,
                &aead::quic::CHACHA20,
                32,
            ),
            other => {
                return Err(format!(
                    "cipher suite 0x{other:04x}, which QUIC does not use"
                ));
            }
        };
        let prk = hkdf::Prk::new_less_safe(hash, secret);
        let mut iv = [0u8; 12];
        iv.copy_from_slice(&expand_label(&prk, b"quic iv", 12));
        Ok(Keys {
            aead: aead::LessSafeKey::new(
                aead::UnboundKey::new(aead_alg, &expand_label(&prk, b"quic key", len))
                    .map_err(|_| "an AEAD key")?,
            ),
            iv,
            hp: aead::quic::HeaderProtectionKey::new(hp_alg, &expand_label(&prk, b"quic hp", len))
                .map_err(|_| "a header-protection key")?,
        })
    }

    /// Opens the packet at the start of `p` whose packet number starts at byte `pn_at` and
    /// whose protected payload ends at `end`: its packet number (the full one, from the
    /// largest opened before in its space, RFC 9000 §A.3) and plaintext; `Err` when it does not
    /// open. A long header protects the first byte's low four bits, a short one five.
    pub(crate) fn open(
        &self,
        p: &[u8],
        pn_at: usize,
        end: usize,
        largest: Option<u64>,
    ) -> Result<(u64, Vec<u8>), ()> {
        self.open_as(self, p, pn_at, end, largest)
    }

    /// [`Keys::open`] with the header protection of `hp` (after a key update, the first
    /// generation's: RFC 9001 §6 leaves it unchanged).
    pub(crate) fn open_as(
        &self,
        hp: &Keys,
        p: &[u8],
        pn_at: usize,
        end: usize,
        largest: Option<u64>,
    ) -> Result<(u64, Vec<u8>), ()> {
        // header protection: a sample 4 bytes after the packet number's start
        let sample = p.get(pn_at + 4..pn_at + 20).ok_or(())?;
        let mask = hp.hp.new_mask(sample).map_err(|_| ())?;
        let mut header = p.get(..pn_at).ok_or(())?.to_vec();
        header[0] ^= mask[0] & if header[0] & 0x80 != 0 { 0x0f } else { 0x1f };
        let pn_len = usize::from(header[0] & 0x03) + 1;
        let mut truncated: u64 = 0;
        for i in 0..pn_len {
            let b = p.get(pn_at + i).ok_or(())? ^ mask[1 + i];
            header.push(b);
            truncated = (truncated << 8) | u64::from(b);
        }
        let pn = full_packet_number(largest, truncated, pn_len);
        let mut nonce = self.iv;
        for (n, b) in nonce[4..].iter_mut().zip(pn.to_be_bytes()) {
            *n ^= b;
        }
        let mut payload = p.get(pn_at + pn_len..end).ok_or(())?.to_vec();
        let plain = self
            .aead
            .open_in_place(
                aead::Nonce::assume_unique_for_key(nonce),
                aead::Aad::from(&header),
                &mut payload,
            )
            .map_err(|_| ())?;
        Ok((pn, plain.to_vec()))
    }

    /// The secret of the next key phase (RFC 9001 §6.1: "quic ku", with the suite's hash).
    pub(crate) fn next_secret(secret: &[u8], suite: u16) -> Vec<u8> {
        let hash = if suite == 0x1302 {
            hkdf::HKDF_SHA384
        } else {
            hkdf::HKDF_SHA256
        };
        expand_label(
            &hkdf::Prk::new_less_safe(hash, secret),
            b"quic ku",
            secret.len(),
        )
    }

    /// The first byte of the packet at the start of `p` with its header protection removed
    /// (its packet number starting at byte `pn_at`).
    pub(crate) fn first_byte(&self, p: &[u8], pn_at: usize) -> Option<u8> {
        let mask = self.hp.new_mask(p.get(pn_at + 4..pn_at + 20)?).ok()?;
        let b = *p.first()?;
        Some(b ^ (mask[0] & if b & 0x80 != 0 { 0x0f } else { 0x1f }))
    }

    /// The Initial keys of a direction: the client's, or the server's, for the Destination
    /// Connection ID the client's Initial packets carry.
    pub(crate) fn initial(dcid: &[u8], server: bool) -> Keys {
        let secret = if server {
            server_initial_secret(dcid)
        } else {
            client_initial_secret(dcid)
        };
        Keys::of(&secret, 0x1301).expect("AES-128-GCM")
    }
}

/// The packet number whose low `len` bytes are `truncated`, nearest the one after `largest`
/// (RFC 9000 §A.3).
fn full_packet_number(largest: Option<u64>, truncated: u64, len: usize) -> u64 {
    let expected = largest.map_or(0, |l| l + 1);
    let win = 1u64 << (8 * len);
    let half = win / 2;
    let candidate = (expected & !(win - 1)) | truncated;
    if candidate + half <= expected && candidate < (1 << 62) - win {
        candidate + win
    } else if candidate > expected + half && candidate >= win {
        candidate - win
    } else {
        candidate
    }
}

/// One long-header packet read: its length in the datagram, its type (0 Initial, 1 0-RTT,
/// 2 Handshake, 3 Retry), its Destination Connection ID and, where keys were given for it, its plaintext.
pub(crate) struct Long {
    pub len: usize,
    pub kind: u8,
    pub dcid: Vec<u8>,
    pub plain: Option<Vec<u8>>,
}

/// The QUIC v1 long-header packet at the start of `p`, opened with the keys `keys` gives for
/// its type and Destination Connection ID (none: it is skipped).
pub(crate) fn open_long(
    p: &[u8],
    keys: &dyn Fn(u8, &[u8]) -> Option<Keys>,
) -> Result<Long, String> {
    let version = be32(p, 1)?;
    let mut at = 5;
    let dcid_len = usize::from(*p.get(at).ok_or("a truncated long header")?);
    let dcid = p
        .get(at + 1..at + 1 + dcid_len)
        .ok_or("a truncated long header")?
        .to_vec();
    at += 1 + dcid_len;
    let scid_len = usize::from(*p.get(at).ok_or("a truncated long header")?);
    at += 1 + scid_len;
    let kind = (p[0] & 0x30) >> 4;
    if version != 1 {
        return Err(format!(
            "QUIC version 0x{version:08x}: only version 1's long-header packets are read"
        ));
    }
    if kind == 3 {
        // Retry: the rest of the datagram (a token and its integrity tag)
        return Ok(Long {
            len: p.len(),
            kind,
            dcid,
            plain: None,
        });
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
    let Some(keys) = keys(kind, &dcid) else {
        return Ok(Long {
            len: end,
            kind,
            dcid,
            plain: None,
        });
    };
    let (_, plain) = keys.open(p, at, end, None).map_err(|()| {
        if kind == 0 {
            "an Initial packet that its Destination Connection ID's keys do not open".to_string()
        } else {
            "a Handshake packet that the key log's secret does not open".to_string()
        }
    })?;
    Ok(Long {
        len: end,
        kind,
        dcid,
        plain: Some(plain),
    })
}

/// The CRYPTO frames of an Initial packet's payload, by offset.
pub(crate) fn crypto_frames(b: &[u8], out: &mut BTreeMap<u64, Vec<u8>>) -> Result<(), String> {
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
                return Err("a CONNECTION_CLOSE before the handshake was read".into());
            }
            other => {
                return Err(format!(
                    "frame type 0x{other:x} in an Initial or Handshake packet"
                ));
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
        random: body
            .get(2..34)
            .and_then(|r| r.try_into().ok())
            .ok_or("a truncated ClientHello")?,
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
    fn packet_numbers_are_decoded_as_rfc_9000s_appendix_a3_does() {
        // its example: the largest 0xa82f30ea, two bytes 0x9b32 received
        assert_eq!(full_packet_number(Some(0xa82f30ea), 0x9b32, 2), 0xa82f9b32);
        // the first packet, and one byte past a wrap of its window
        assert_eq!(full_packet_number(None, 0, 1), 0);
        assert_eq!(full_packet_number(Some(0xff), 0x01, 1), 0x101);
        // a late packet from before the window's start
        assert_eq!(full_packet_number(Some(0x101), 0xfe, 1), 0xfe);
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
