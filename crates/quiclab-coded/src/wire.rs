//! Byte-level encoding: QUIC-style variable-length integers, frames, and the records of the coded
//! byte stream. Decoding never panics on hostile input: a short or malformed buffer is a
//! [`WireError`] naming what was being read.

use crate::error::WireError;

/// Largest value a variable-length integer can hold (2^62 - 1).
pub const VARINT_MAX: u64 = (1 << 62) - 1;

/// Bytes that `v` takes as a variable-length integer.
pub fn varint_len(v: u64) -> usize {
    match v {
        0..=63 => 1,
        64..=16_383 => 2,
        16_384..=1_073_741_823 => 4,
        _ => 8,
    }
}

/// Appends `v` (at most [`VARINT_MAX`]; larger values are clamped, which callers never produce:
/// packet numbers, offsets and counts stay far below 2^62).
pub fn put_varint(out: &mut Vec<u8>, v: u64) {
    let v = v.min(VARINT_MAX);
    match varint_len(v) {
        1 => out.push(v as u8),
        2 => out.extend_from_slice(&((v as u16) | 0x4000).to_be_bytes()),
        4 => out.extend_from_slice(&((v as u32) | 0x8000_0000).to_be_bytes()),
        _ => out.extend_from_slice(&(v | 0xc000_0000_0000_0000).to_be_bytes()),
    }
}

/// A cursor over received bytes.
pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        Reader { buf, pos: 0 }
    }

    pub fn is_empty(&self) -> bool {
        self.pos >= self.buf.len()
    }

    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    pub fn u8(&mut self, what: &'static str) -> Result<u8, WireError> {
        let b = *self
            .buf
            .get(self.pos)
            .ok_or(WireError::Truncated { what })?;
        self.pos += 1;
        Ok(b)
    }

    pub fn bytes(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], WireError> {
        if self.remaining() < n {
            return Err(WireError::Truncated { what });
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    pub fn rest(&mut self) -> &'a [u8] {
        let s = &self.buf[self.pos..];
        self.pos = self.buf.len();
        s
    }

    pub fn varint(&mut self, what: &'static str) -> Result<u64, WireError> {
        let first = self.u8(what)?;
        let len = 1usize << (first >> 6);
        let mut v = u64::from(first & 0x3f);
        for _ in 1..len {
            v = (v << 8) | u64::from(self.u8(what)?);
        }
        Ok(v)
    }
}

/// Frame type bytes (inside an AEAD-protected packet payload).
pub mod frame_type {
    pub const PADDING: u8 = 0x00;
    pub const PING: u8 = 0x01;
    pub const CRYPTO: u8 = 0x06;
    pub const CRYPTO_ACK: u8 = 0x07;
    pub const SYMBOL: u8 = 0x10;
    pub const FEEDBACK: u8 = 0x11;
    pub const CLOSE: u8 = 0x1c;
    pub const HANDSHAKE_DONE: u8 = 0x1e;
}

/// The state of one block that the receiver has not finished, as reported in feedback.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockReport {
    pub block: u64,
    /// Distinct encoding symbols received for the block.
    pub received: u64,
    pub decoded: bool,
}

/// What a receiver tells the sender, cumulatively, a few times per round trip.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Feedback {
    /// Largest 1-RTT packet number received.
    pub largest_pn: u64,
    /// Time between receiving `largest_pn` and sending this feedback, in microseconds.
    pub ack_delay_us: u64,
    /// 1-RTT packets received so far (cumulative).
    pub packets: u64,
    /// Bytes of 1-RTT datagrams received so far (cumulative).
    pub bytes: u64,
    /// The receiver's clock when it wrote this, in microseconds since its epoch; only
    /// differences between two reports are meaningful.
    pub time_us: u64,
    /// Every block below this one is decoded.
    pub complete_below: u64,
    /// Blocks at or above `complete_below` that the receiver has seen, oldest first.
    pub blocks: Vec<BlockReport>,
}

/// A decoded frame, borrowing from the packet.
#[derive(Debug, PartialEq, Eq)]
pub enum Frame<'a> {
    Padding,
    Ping,
    Crypto {
        offset: u64,
        data: &'a [u8],
    },
    CryptoAck {
        offset: u64,
    },
    Symbol {
        block: u64,
        k: u16,
        esi: u32,
        data: &'a [u8],
    },
    Feedback(Feedback),
    Close {
        code: u64,
        reason: &'a [u8],
    },
    HandshakeDone,
}

pub fn put_crypto(out: &mut Vec<u8>, offset: u64, data: &[u8]) {
    out.push(frame_type::CRYPTO);
    put_varint(out, offset);
    put_varint(out, data.len() as u64);
    out.extend_from_slice(data);
}

pub fn put_crypto_ack(out: &mut Vec<u8>, offset: u64) {
    out.push(frame_type::CRYPTO_ACK);
    put_varint(out, offset);
}

/// Bytes a SYMBOL frame adds before the symbol itself, at most.
pub const SYMBOL_HEADER_MAX: usize = 1 + 8 + 4 + 4;

/// A SYMBOL frame always ends the packet: the symbol runs to the end of the payload.
pub fn put_symbol(out: &mut Vec<u8>, block: u64, k: u16, esi: u32, data: &[u8]) {
    out.push(frame_type::SYMBOL);
    put_varint(out, block);
    put_varint(out, u64::from(k));
    put_varint(out, u64::from(esi));
    out.extend_from_slice(data);
}

pub fn put_feedback(out: &mut Vec<u8>, f: &Feedback) {
    out.push(frame_type::FEEDBACK);
    put_varint(out, f.largest_pn);
    put_varint(out, f.ack_delay_us);
    put_varint(out, f.packets);
    put_varint(out, f.bytes);
    put_varint(out, f.time_us);
    put_varint(out, f.complete_below);
    put_varint(out, f.blocks.len() as u64);
    for b in &f.blocks {
        put_varint(out, b.block - f.complete_below);
        put_varint(out, b.received);
        out.push(u8::from(b.decoded));
    }
}

pub fn put_close(out: &mut Vec<u8>, code: u64, reason: &[u8]) {
    out.push(frame_type::CLOSE);
    put_varint(out, code);
    put_varint(out, reason.len() as u64);
    out.extend_from_slice(reason);
}

/// Reads the next frame. `Ok(None)` at the end of the payload.
pub fn read_frame<'a>(r: &mut Reader<'a>) -> Result<Option<Frame<'a>>, WireError> {
    if r.is_empty() {
        return Ok(None);
    }
    let t = r.u8("frame type")?;
    let f = match t {
        frame_type::PADDING => {
            r.rest();
            Frame::Padding
        }
        frame_type::PING => Frame::Ping,
        frame_type::CRYPTO => {
            let offset = r.varint("crypto offset")?;
            let len = r.varint("crypto length")?;
            let len = usize::try_from(len).map_err(|_| WireError::Truncated {
                what: "crypto data",
            })?;
            Frame::Crypto {
                offset,
                data: r.bytes(len, "crypto data")?,
            }
        }
        frame_type::CRYPTO_ACK => Frame::CryptoAck {
            offset: r.varint("crypto ack offset")?,
        },
        frame_type::SYMBOL => {
            let block = r.varint("symbol block")?;
            let k = r.varint("symbol source count")?;
            let k = u16::try_from(k)
                .ok()
                .filter(|&k| k > 0)
                .ok_or(WireError::Invalid {
                    field: "symbol source count",
                    value: k,
                    allowed: "1 to 65535",
                })?;
            let esi = r.varint("symbol id")?;
            let esi = u32::try_from(esi).map_err(|_| WireError::Invalid {
                field: "symbol id",
                value: esi,
                allowed: "below 2^32",
            })?;
            let data = r.rest();
            if data.is_empty() {
                return Err(WireError::Truncated {
                    what: "symbol data",
                });
            }
            Frame::Symbol {
                block,
                k,
                esi,
                data,
            }
        }
        frame_type::FEEDBACK => {
            let mut f = Feedback {
                largest_pn: r.varint("feedback largest packet")?,
                ack_delay_us: r.varint("feedback ack delay")?,
                packets: r.varint("feedback packets")?,
                bytes: r.varint("feedback bytes")?,
                time_us: r.varint("feedback time")?,
                complete_below: r.varint("feedback complete blocks")?,
                blocks: Vec::new(),
            };
            let n = r.varint("feedback block count")?;
            if n > 1024 {
                return Err(WireError::Invalid {
                    field: "feedback block count",
                    value: n,
                    allowed: "at most 1024",
                });
            }
            for _ in 0..n {
                let delta = r.varint("feedback block")?;
                let received = r.varint("feedback block received")?;
                let decoded = r.u8("feedback block decoded")? != 0;
                f.blocks.push(BlockReport {
                    block: f.complete_below.saturating_add(delta),
                    received,
                    decoded,
                });
            }
            Frame::Feedback(f)
        }
        frame_type::CLOSE => {
            let code = r.varint("close code")?;
            let len = r.varint("close reason length")?;
            let len = usize::try_from(len).map_err(|_| WireError::Truncated {
                what: "close reason",
            })?;
            Frame::Close {
                code,
                reason: r.bytes(len, "close reason")?,
            }
        }
        frame_type::HANDSHAKE_DONE => Frame::HandshakeDone,
        other => {
            return Err(WireError::Invalid {
                field: "frame type",
                value: u64::from(other),
                allowed: "0x00, 0x01, 0x06, 0x07, 0x10, 0x11, 0x1c, 0x1e",
            });
        }
    };
    Ok(Some(f))
}

/// Records of the coded byte stream (the content of source blocks).
pub mod record {
    /// The rest of the block is padding.
    pub const PAD: u8 = 0x00;
    /// Stream data: stream id, flags (bit 0: fin), length, data.
    pub const STREAM: u8 = 0x08;
    /// Bytes a STREAM record adds before its data, at most.
    pub const STREAM_HEADER_MAX: usize = 1 + 8 + 1 + 8;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_round_trip_at_every_length_boundary() {
        for v in [
            0,
            63,
            64,
            16_383,
            16_384,
            1_073_741_823,
            1_073_741_824,
            VARINT_MAX,
        ] {
            let mut out = Vec::new();
            put_varint(&mut out, v);
            assert_eq!(out.len(), varint_len(v), "{v}");
            assert_eq!(Reader::new(&out).varint("v").unwrap(), v);
        }
    }

    #[test]
    fn frames_round_trip_and_truncation_is_an_error() {
        let fb = Feedback {
            largest_pn: 70_000,
            ack_delay_us: 1234,
            packets: 69_000,
            bytes: 99_000_000,
            time_us: 5_000_000,
            complete_below: 40,
            blocks: vec![
                BlockReport {
                    block: 40,
                    received: 63,
                    decoded: false,
                },
                BlockReport {
                    block: 42,
                    received: 64,
                    decoded: true,
                },
            ],
        };
        let mut out = Vec::new();
        put_crypto(&mut out, 5, b"hello");
        put_crypto_ack(&mut out, 77);
        put_feedback(&mut out, &fb);
        put_close(&mut out, 3, b"bye");
        put_symbol(&mut out, 9, 64, 70, &[7; 100]);
        let mut r = Reader::new(&out);
        assert_eq!(
            read_frame(&mut r).unwrap(),
            Some(Frame::Crypto {
                offset: 5,
                data: b"hello"
            })
        );
        assert_eq!(
            read_frame(&mut r).unwrap(),
            Some(Frame::CryptoAck { offset: 77 })
        );
        assert_eq!(read_frame(&mut r).unwrap(), Some(Frame::Feedback(fb)));
        assert_eq!(
            read_frame(&mut r).unwrap(),
            Some(Frame::Close {
                code: 3,
                reason: b"bye"
            })
        );
        assert_eq!(
            read_frame(&mut r).unwrap(),
            Some(Frame::Symbol {
                block: 9,
                k: 64,
                esi: 70,
                data: &[7; 100]
            })
        );
        assert_eq!(read_frame(&mut r).unwrap(), None);
        // every strict prefix of a CRYPTO frame is rejected, never misread
        let mut c = Vec::new();
        put_crypto(&mut c, 1, b"abc");
        for n in 1..c.len() {
            assert!(read_frame(&mut Reader::new(&c[..n])).is_err(), "{n}");
        }
        let e = read_frame(&mut Reader::new(&[0x55])).unwrap_err();
        assert!(e.to_string().contains("frame type"), "{e}");
    }
}
