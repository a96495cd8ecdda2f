//! The server's side of the handshake read from the wire: the group and cipher suite its
//! ServerHello chose, whether it first asked for another key share (a HelloRetryRequest), and
//! over QUIC the transport parameters of its EncryptedExtensions.
//!
//! Sans-IO: a capture's packets ([`crate::hello::capture`]) and a key log in, answers out.
//! - Over QUIC the ServerHello travels in the server's Initial packets, opened with the keys
//!   RFC 9001 §5.2 derives from the Destination Connection ID of the client's Initial packets
//!   (after a Retry, the new one the client uses). The EncryptedExtensions travel in its
//!   Handshake packets, opened with the `SERVER_HANDSHAKE_TRAFFIC_SECRET` an endpoint wrote to
//!   the key log (SSLKEYLOGFILE's format) for the ClientHello's random, under the chosen suite.
//! - Over TCP the ServerHello (and a HelloRetryRequest) are the server's first TLS records, in
//!   the clear; what follows is encrypted and carries no transport parameters.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::hello::{
    Captured, Keys, TransportParams, be16, client_hello, contiguous, crypto_frames, open_long,
    tcp_stream,
};

/// A HelloRetryRequest's random: SHA-256 of "HelloRetryRequest" (RFC 8446 §4.1.3).
const RETRY_RANDOM: [u8; 32] = [
    0xcf, 0x21, 0xad, 0x74, 0xe5, 0x9a, 0x61, 0x11, 0xbe, 0x1d, 0x8c, 0x02, 0x1e, 0x65, 0xb8, 0x91,
    0xc2, 0xa2, 0x11, 0x16, 0x7a, 0xbb, 0x8c, 0x5e, 0x07, 0x9e, 0x09, 0xe2, 0xc8, 0xa8, 0x33, 0x9c,
];

/// What the server's handshake chose.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ServerHandshake {
    /// The group of its key share (TLS NamedGroup code).
    pub group: u16,
    /// The group a HelloRetryRequest asked the client for, if it sent one.
    pub retry_group: Option<u16>,
    /// The cipher suite (TLS 1.3 code: 0x1301 AES-128-GCM, 0x1302 AES-256-GCM, 0x1303
    /// ChaCha20-Poly1305).
    pub cipher_suite: u16,
    /// Over QUIC: its transport parameters, when the key log opened its Handshake packets.
    pub quic: Option<TransportParams>,
    /// Over QUIC, why its transport parameters were not read.
    pub quic_why: Option<String>,
}

/// A TLS 1.3 cipher suite's name, or its code.
pub fn suite_name(code: u16) -> String {
    match code {
        0x1301 => "TLS_AES_128_GCM_SHA256".into(),
        0x1302 => "TLS_AES_256_GCM_SHA384".into(),
        0x1303 => "TLS_CHACHA20_POLY1305_SHA256".into(),
        c => format!("0x{c:04x}"),
    }
}

/// One ServerHello message read: a HelloRetryRequest's or the real one's.
struct Answer {
    retry: bool,
    suite: u16,
    group: u16,
}

/// The ServerHello messages at the start of a handshake stream (a HelloRetryRequest, then the
/// ServerHello), as far as the stream holds whole messages; `Err` for another message first.
fn server_hellos(b: &[u8]) -> Result<Vec<Answer>, String> {
    let mut out = Vec::new();
    let mut at = 0;
    while at + 4 <= b.len() {
        let kind = b[at];
        let len =
            (usize::from(b[at + 1]) << 16) | (usize::from(b[at + 2]) << 8) | usize::from(b[at + 3]);
        let Some(body) = b.get(at + 4..at + 4 + len) else {
            break;
        };
        if kind != 2 {
            if out.is_empty() {
                return Err(format!(
                    "the server's first handshake message is of type {kind}, not a ServerHello (2)"
                ));
            }
            break;
        }
        let hello = parse_server_hello(body)?;
        let last = !hello.retry;
        out.push(hello);
        if last {
            break;
        }
        at += 4 + len;
    }
    Ok(out)
}

fn parse_server_hello(body: &[u8]) -> Result<Answer, String> {
    let truncated = || "a truncated ServerHello".to_string();
    let random = body.get(2..34).ok_or_else(truncated)?;
    let retry = random == RETRY_RANDOM;
    let mut at = 34;
    at += 1 + usize::from(*body.get(at).ok_or_else(truncated)?);
    let suite = be16(body, at)?;
    // the suite and the compression method
    at += 3;
    let ext_end = (at + 2 + usize::from(be16(body, at)?)).min(body.len());
    at += 2;
    let mut group = None;
    while at + 4 <= ext_end {
        let (kind, len) = (be16(body, at)?, usize::from(be16(body, at + 2)?));
        if kind == 0x0033 {
            // key_share: the server's share (a group and its key), or in a HelloRetryRequest
            // the group it asks for
            group = Some(be16(body, at + 4)?);
        }
        at += 4 + len;
    }
    let group = group.ok_or("a ServerHello without a key share (not TLS 1.3)")?;
    Ok(Answer {
        retry,
        suite,
        group,
    })
}

/// The transport parameters of an EncryptedExtensions message at the start of `b`, or `None`
/// while `b` does not hold it whole.
fn encrypted_extensions(b: &[u8]) -> Result<Option<TransportParams>, String> {
    if b.len() < 4 {
        return Ok(None);
    }
    if b[0] != 8 {
        return Err(format!(
            "the server's first Handshake message is of type {}, not EncryptedExtensions (8)",
            b[0]
        ));
    }
    let len = (usize::from(b[1]) << 16) | (usize::from(b[2]) << 8) | usize::from(b[3]);
    let Some(body) = b.get(4..4 + len) else {
        return Ok(None);
    };
    let end = (2 + usize::from(be16(body, 0)?)).min(body.len());
    let mut at = 2;
    while at + 4 <= end {
        let (kind, len) = (be16(body, at)?, usize::from(be16(body, at + 2)?));
        if kind == 0x0039 {
            let data = body
                .get(at + 4..at + 4 + len)
                .ok_or("a truncated extension")?;
            return TransportParams::parse(data).map(Some);
        }
        at += 4 + len;
    }
    Err("the server's EncryptedExtensions carry no quic_transport_parameters".into())
}

/// The `label` secret a key log holds for the connection whose ClientHello had `random`.
pub(crate) fn logged_secret(keylog: &[u8], label: &str, random: &[u8; 32]) -> Option<Vec<u8>> {
    let random: String = random.iter().map(|b| format!("{b:02x}")).collect();
    String::from_utf8_lossy(keylog).lines().find_map(|line| {
        let mut f = line.split_whitespace();
        if f.next() != Some(label) || !f.next()?.eq_ignore_ascii_case(&random) {
            return None;
        }
        let hex = f.next()?;
        (0..hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok())
            .collect()
    })
}

fn choose(hellos: &[Answer]) -> Result<(&Answer, Option<u16>), String> {
    let last = hellos.last().ok_or("the capture holds no ServerHello")?;
    if last.retry {
        return Err("the server's HelloRetryRequest had no ServerHello after it".into());
    }
    Ok((last, hellos.iter().find(|h| h.retry).map(|h| h.group)))
}

/// The server's handshake in the capture's first connection (the first packet's sender is
/// the client), with `keylog` to open its Handshake packets (empty: over QUIC, the transport
/// parameters are said not read).
pub fn server_hello(packets: &[Captured], keylog: &[u8]) -> Result<ServerHandshake, String> {
    let first = packets
        .first()
        .ok_or("the capture holds no UDP or TCP packet")?;
    let (client, server) = (first.src.clone(), first.dst.clone());
    if first.protocol != 17 {
        let stream = tcp_stream(packets, &server, &client)?;
        // handshake records (a ChangeCipherSpec between two hellos is skipped) until the
        // first encrypted one
        let mut handshake = Vec::new();
        let mut at = 0;
        while at + 5 <= stream.len() {
            let (kind, len) = (stream[at], usize::from(be16(&stream, at + 3)?));
            let end = (at + 5 + len).min(stream.len());
            match kind {
                22 => handshake.extend_from_slice(&stream[at + 5..end]),
                20 => {}
                _ => break,
            }
            at = end;
        }
        let hellos = server_hellos(&handshake)?;
        let (hello, retry_group) = choose(&hellos)?;
        return Ok(ServerHandshake {
            group: hello.group,
            retry_group,
            cipher_suite: hello.suite,
            quic: None,
            quic_why: None,
        });
    }
    let random = client_hello(packets)?.random;
    let mut dcid: Option<Vec<u8>> = None;
    let mut retried = false;
    let mut initial: BTreeMap<u64, Vec<u8>> = BTreeMap::new();
    let mut handshake: BTreeMap<u64, Vec<u8>> = BTreeMap::new();
    let mut hellos: Vec<Answer> = Vec::new();
    // the Handshake packets' secret and suite, once the ServerHello is read
    let mut secret: Option<(Vec<u8>, u16)> = None;
    let mut no_secret = false;
    let mut params = None;
    for p in packets.iter().filter(|p| p.protocol == 17) {
        let from_server = p.src == server && p.dst == client;
        let from_client = p.src == client && p.dst == server;
        if !from_server && !from_client {
            continue;
        }
        let d = &p.payload;
        let mut at = 0;
        while at < d.len() && d[at] & 0x80 != 0 {
            let long = if from_server {
                let Some(cid) = dcid.as_deref() else {
                    return Err("the server sent before the client's first Initial".into());
                };
                open_long(&d[at..], &|kind, _| match kind {
                    0 => Some(Keys::initial(cid, true)),
                    2 => secret
                        .as_ref()
                        .and_then(|(s, suite)| Keys::of(s, *suite).ok()),
                    _ => None,
                })?
            } else {
                open_long(&d[at..], &|_, _| None)?
            };
            at += long.len;
            if !from_server {
                // the Initial keys are the first Initial's (after the server's first packet
                // the client addresses it by its own ID), or after a Retry the next one's
                if long.kind == 0 && (dcid.is_none() || retried) {
                    dcid = Some(long.dcid);
                    retried = false;
                }
                continue;
            }
            retried |= long.kind == 3;
            let Some(plain) = long.plain else { continue };
            match long.kind {
                0 => {
                    crypto_frames(&plain, &mut initial)?;
                    hellos = server_hellos(&contiguous(
                        initial.iter().map(|(o, b)| (*o, b.as_slice())),
                    ))?;
                    if secret.is_none() && hellos.last().is_some_and(|h| !h.retry) {
                        let suite = hellos.last().map_or(0, |h| h.suite);
                        match logged_secret(keylog, "SERVER_HANDSHAKE_TRAFFIC_SECRET", &random) {
                            Some(s) => {
                                Keys::of(&s, suite)?;
                                secret = Some((s, suite));
                            }
                            None => no_secret = true,
                        }
                    }
                }
                _ => {
                    crypto_frames(&plain, &mut handshake)?;
                    params = encrypted_extensions(&contiguous(
                        handshake.iter().map(|(o, b)| (*o, b.as_slice())),
                    ))?;
                }
            }
        }
        if params.is_some() || no_secret {
            break;
        }
    }
    let (hello, retry_group) = choose(&hellos)?;
    let quic_why = match (&params, no_secret) {
        (Some(_), _) => None,
        (None, true) => Some(
            "the key log holds no SERVER_HANDSHAKE_TRAFFIC_SECRET for the connection: its \
             Handshake packets stay closed"
                .to_string(),
        ),
        (None, false) => {
            Some("the capture holds no whole EncryptedExtensions from the server".to_string())
        }
    };
    Ok(ServerHandshake {
        group: hello.group,
        retry_group,
        cipher_suite: hello.suite,
        quic: params,
        quic_why,
    })
}
