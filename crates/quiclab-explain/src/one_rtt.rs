//! A QUIC server's stream data read from its 1-RTT packets in a capture: which stream bytes
//! each of its datagrams carried, so that a retransmission is told apart from new data.
//!
//! Sans-IO: a capture's packets ([`crate::hello::capture`]) and a key log in. The packets are
//! opened with the `SERVER_TRAFFIC_SECRET_0` an endpoint wrote to the key log (SSLKEYLOGFILE's
//! format) for the connection's ClientHello random, under the suite its ServerHello chose;
//! their Destination Connection ID is as long as the Source Connection ID of the client's
//! first Initial. Key updates (RFC 9001 §6) are followed: a packet of the other key phase opens
//! with the next generation's keys, or with the previous one's if it was sent before the update.

use crate::hello::{Captured, Keys, client_hello, open_long, varint};
use crate::server_hello::{logged_secret, server_hello};

/// Stream bytes one packet carried: its stream ID, offset and length.
pub type Span = (u64, u64, u64);

/// The STREAM frames of a 1-RTT packet's plaintext; `Err` names a frame it cannot read past.
pub fn stream_frames(b: &[u8]) -> Result<Vec<Span>, String> {
    let mut out = Vec::new();
    let mut at = 0;
    let skip = |at: &mut usize, n: usize| -> Result<(), String> {
        for _ in 0..n {
            varint(b, at)?;
        }
        Ok(())
    };
    let bytes = |at: &mut usize, n: usize| -> Result<(), String> {
        if *at + n > b.len() {
            return Err("a truncated frame".into());
        }
        *at += n;
        Ok(())
    };
    while at < b.len() {
        let kind = varint(b, &mut at)?;
        match kind {
            0x00 | 0x01 | 0x1e | 0x1f => {} // PADDING, PING, HANDSHAKE_DONE, IMMEDIATE_ACK
            0x02 | 0x03 => {
                skip(&mut at, 2)?;
                let ranges = varint(b, &mut at)? as usize;
                skip(&mut at, 1 + 2 * ranges + if kind == 0x03 { 3 } else { 0 })?;
            }
            0x04 => skip(&mut at, 3)?,
            0x05 | 0x11 | 0x15 => skip(&mut at, 2)?,
            0x06 => {
                skip(&mut at, 1)?;
                let len = varint(b, &mut at)? as usize;
                bytes(&mut at, len)?;
            }
            0x07 => {
                let len = varint(b, &mut at)? as usize;
                bytes(&mut at, len)?;
            }
            0x08..=0x0f => {
                let id = varint(b, &mut at)?;
                let offset = if kind & 0x04 != 0 {
                    varint(b, &mut at)?
                } else {
                    0
                };
                let len = if kind & 0x02 != 0 {
                    varint(b, &mut at)? as usize
                } else {
                    b.len() - at
                };
                bytes(&mut at, len)?;
                out.push((id, offset, len as u64));
            }
            0x10 | 0x12 | 0x13 | 0x14 | 0x16 | 0x17 | 0x19 => skip(&mut at, 1)?,
            0x18 => {
                skip(&mut at, 2)?;
                let len = usize::from(*b.get(at).ok_or("a truncated frame")?);
                bytes(&mut at, 1 + len + 16)?;
            }
            0x1a | 0x1b => bytes(&mut at, 8)?,
            0x1c | 0x1d => {
                skip(&mut at, if kind == 0x1c { 2 } else { 1 })?;
                let len = varint(b, &mut at)? as usize;
                bytes(&mut at, len)?;
            }
            0x30 => at = b.len(),
            0x31 => {
                let len = varint(b, &mut at)? as usize;
                bytes(&mut at, len)?;
            }
            other => return Err(format!("frame type 0x{other:x}, which is not read")),
        }
    }
    Ok(out)
}

/// The stream bytes each of the server's datagrams in the capture carried (in the capture's
/// order; empty for a datagram of long-header packets only or of no stream data), for the
/// capture's first connection (its first packet's sender is the client).
pub fn server_stream_data(packets: &[Captured], keylog: &[u8]) -> Result<Vec<Vec<Span>>, String> {
    let first = packets
        .first()
        .ok_or("the capture holds no UDP or TCP packet")?;
    if first.protocol != 17 {
        return Err("the capture is of TCP: its data are not read".into());
    }
    let (client, server) = (first.src.clone(), first.dst.clone());
    let suite = server_hello(packets, keylog)?.cipher_suite;
    let random = client_hello(packets)?.random;
    let secret = logged_secret(keylog, "SERVER_TRAFFIC_SECRET_0", &random).ok_or(
        "the key log holds no SERVER_TRAFFIC_SECRET_0 for the connection: its 1-RTT packets \
         stay closed",
    )?;
    // the first generation's keys (whose header protection every generation keeps), the
    // current generation's and its key phase bit, and the one before it (a packet sent before
    // the update may arrive after the first of the next phase)
    let first_keys = Keys::of(&secret, suite)?;
    let mut current = (Keys::of(&secret, suite)?, secret);
    let mut previous: Option<Keys> = None;
    let mut phase = 0u8;
    // the server addresses the client by the Source Connection ID of its first Initial
    let p = &first.payload;
    let dcid_len = usize::from(*p.get(5).ok_or("a truncated first Initial")?);
    let cid_len = usize::from(*p.get(6 + dcid_len).ok_or("a truncated first Initial")?);
    let mut largest = None;
    let mut out = Vec::new();
    for d in packets
        .iter()
        .filter(|p| p.protocol == 17 && p.src == server && p.dst == client)
    {
        let d = &d.payload;
        let mut spans = Vec::new();
        let mut at = 0;
        while at < d.len() && d[at] & 0x80 != 0 {
            at += open_long(&d[at..], &|_, _| None)?.len;
        }
        // what follows the long packets: a 1-RTT packet, or zeros a sender padded its datagram
        // with (quiche pads its Initial and Handshake datagrams to 1200 bytes so)
        if d[at..].iter().any(|&b| b != 0) {
            let short = &d[at..];
            let key_phase = first_keys
                .first_byte(short, 1 + cid_len)
                .ok_or("a 1-RTT packet too short to sample")?
                & 0x04;
            let open = |k: &Keys| k.open_as(&first_keys, short, 1 + cid_len, short.len(), largest);
            let opened = if key_phase == phase {
                open(&current.0)
            } else {
                // the next phase (a key update, RFC 9001 §6), or a late packet of the one before
                match previous.as_ref().and_then(|k| open(k).ok()) {
                    Some(o) => Ok(o),
                    None => {
                        let next = Keys::next_secret(&current.1, suite);
                        let keys = Keys::of(&next, suite)?;
                        let o = open(&keys);
                        if o.is_ok() {
                            previous = Some(std::mem::replace(&mut current, (keys, next)).0);
                            phase = key_phase;
                        }
                        o
                    }
                }
            };
            let (pn, plain) = opened.map_err(|()| {
                "a 1-RTT packet that the key log's SERVER_TRAFFIC_SECRET_0 (or its updates) does not open"
                    .to_string()
            })?;
            largest = Some(largest.map_or(pn, |l: u64| l.max(pn)));
            spans = stream_frames(&plain)?;
        }
        out.push(spans);
    }
    Ok(out)
}
