//! Request/response streams carried in the coded byte stream.
//!
//! Each direction of a connection is one ordered byte stream cut into source blocks; a block
//! holds whole STREAM records (`0x08 | stream id | flags (bit 0: fin) | length | data`) and ends
//! with a PAD byte (0x00) when records do not fill it. Records never span blocks, so a block
//! can be parsed as soon as its symbols are in order, and a receiver never waits on the next
//! block to finish one.

use std::collections::{BTreeMap, VecDeque};

use crate::error::WireError;
use crate::wire::{Reader, put_varint, record, varint_len};

#[derive(Default)]
struct SendStream {
    buf: VecDeque<u8>,
    fin: bool,
    fin_sent: bool,
}

/// The sending half of every stream of a connection.
#[derive(Default)]
pub struct SendStreams {
    streams: BTreeMap<u64, SendStream>,
    /// Streams with something to send, first come first served.
    ready: VecDeque<u64>,
    pending_bytes: u64,
}

impl SendStreams {
    pub fn open(&mut self, id: u64) {
        self.streams.entry(id).or_default();
    }

    pub fn exists(&self, id: u64) -> bool {
        self.streams.contains_key(&id)
    }

    pub fn is_finished(&self, id: u64) -> bool {
        self.streams.get(&id).is_some_and(|s| s.fin)
    }

    fn mark_ready(&mut self, id: u64) {
        if !self.ready.contains(&id) {
            self.ready.push_back(id);
        }
    }

    /// Queues `data` (the stream must be open and not finished).
    pub fn write(&mut self, id: u64, data: &[u8]) {
        let s = self.streams.entry(id).or_default();
        s.buf.extend(data);
        self.pending_bytes += data.len() as u64;
        if !data.is_empty() {
            self.mark_ready(id);
        }
    }

    pub fn finish(&mut self, id: u64) {
        let s = self.streams.entry(id).or_default();
        s.fin = true;
        self.mark_ready(id);
    }

    /// Bytes written and not yet put in a block.
    pub fn pending_bytes(&self) -> u64 {
        self.pending_bytes
    }

    pub fn has_pending(&self) -> bool {
        !self.ready.is_empty()
    }

    /// Builds a block's content of at most `max` bytes from the queued records. A record ends
    /// at the end of the `symbol`-byte source symbol it starts in (or of the next one, when
    /// too little is left of its own), so that a receiver hands each symbol's data to the
    /// application as soon as that symbol and those before it are in: a record as long as the
    /// block would hold its first byte back until the whole block had arrived.
    pub fn fill_block(&mut self, max: usize, symbol: usize) -> Vec<u8> {
        let symbol = symbol.max(1);
        let mut out = Vec::with_capacity(max);
        while let Some(&id) = self.ready.front() {
            let s = self.streams.get_mut(&id).expect("ready streams exist");
            let head = 1 + varint_len(id) + 1;
            // where this record ends: a symbol boundary, leaving room for some data
            let mut end = (out.len() / symbol + 1) * symbol;
            if end - out.len() < head + 3 {
                end += symbol;
            }
            let room = end.min(max).saturating_sub(out.len() + head);
            if room < 2 {
                break;
            }
            // the length varint takes up to 4 bytes for any block this size
            let take = s
                .buf
                .len()
                .min(room.saturating_sub(varint_len(room as u64)));
            let fin_owed = s.fin && !s.fin_sent;
            if take == 0 && !fin_owed {
                self.ready.pop_front();
                continue;
            }
            let fin = s.fin && take == s.buf.len();
            out.push(record::STREAM);
            put_varint(&mut out, id);
            out.push(u8::from(fin));
            put_varint(&mut out, take as u64);
            out.extend(s.buf.drain(..take));
            self.pending_bytes -= take as u64;
            if fin {
                s.fin_sent = true;
            }
            if s.buf.is_empty() && (fin || !s.fin) {
                self.ready.pop_front();
            }
        }
        out
    }
}

/// One record read from a block.
#[derive(Debug, PartialEq, Eq)]
pub struct StreamRecord<'a> {
    pub id: u64,
    pub fin: bool,
    pub data: &'a [u8],
}

/// Parses the records at the start of `buf` (a prefix of a block, delivered in order).
/// Returns the records, the bytes consumed, and whether a PAD ended the block.
pub fn parse_records(buf: &[u8]) -> Result<(Vec<StreamRecord<'_>>, usize, bool), WireError> {
    let mut out = Vec::new();
    let mut consumed = 0;
    loop {
        let mut r = Reader::new(&buf[consumed..]);
        let Ok(t) = r.u8("record type") else {
            return Ok((out, consumed, false));
        };
        match t {
            record::PAD => return Ok((out, consumed, true)),
            record::STREAM => {
                let parsed = (|| {
                    let id = r.varint("stream id")?;
                    let flags = r.u8("stream flags")?;
                    let len = r.varint("stream length")?;
                    let len = usize::try_from(len).map_err(|_| WireError::Truncated {
                        what: "stream data",
                    })?;
                    let data = r.bytes(len, "stream data")?;
                    Ok::<_, WireError>((id, flags, data))
                })();
                match parsed {
                    Ok((id, flags, data)) => {
                        out.push(StreamRecord {
                            id,
                            fin: flags & 1 != 0,
                            data,
                        });
                        consumed = buf.len() - r.remaining();
                    }
                    // an incomplete record waits for more symbols
                    Err(WireError::Truncated { .. }) => return Ok((out, consumed, false)),
                    Err(e) => return Err(e),
                }
            }
            other => {
                return Err(WireError::Invalid {
                    field: "record type",
                    value: u64::from(other),
                    allowed: "0x00 (pad) or 0x08 (stream)",
                });
            }
        }
    }
}

/// The receiving half of one stream.
#[derive(Default)]
pub struct RecvStream {
    pub buf: Vec<u8>,
    pub fin: bool,
    pub read_fin: bool,
    pub received: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_fill_blocks_and_parse_back_with_fin() {
        let mut tx = SendStreams::default();
        let a: Vec<u8> = (0..5000).map(|i| (i % 251) as u8).collect();
        tx.write(0, &a);
        tx.finish(0);
        tx.write(1, b"second");
        tx.finish(1);
        let mut got: BTreeMap<u64, (Vec<u8>, bool)> = BTreeMap::new();
        let mut blocks = 0;
        while tx.has_pending() {
            let block = tx.fill_block(1400, 1400);
            assert!(block.len() <= 1400, "{}", block.len());
            blocks += 1;
            let mut padded = block.clone();
            padded.resize(1400, 0);
            let (recs, used, pad) = parse_records(&padded).unwrap();
            assert_eq!(used, block.len());
            assert!(pad || used == 1400);
            for r in recs {
                let e = got.entry(r.id).or_default();
                assert!(!e.1, "data after fin");
                e.0.extend_from_slice(r.data);
                e.1 |= r.fin;
            }
        }
        assert_eq!(blocks, 4);
        assert_eq!(got[&0], (a, true));
        assert_eq!(got[&1], (b"second".to_vec(), true));
        assert_eq!(tx.pending_bytes(), 0);
    }

    #[test]
    fn records_end_at_symbol_boundaries_so_each_symbol_parses_alone() {
        let mut tx = SendStreams::default();
        tx.write(1, b"short");
        let a: Vec<u8> = (0..5_000).map(|i| (i % 251) as u8).collect();
        tx.write(0, &a);
        tx.finish(0);
        let block = tx.fill_block(64 * 100, 100);
        // the short record and the start of stream 0 share symbol 0; every later symbol is
        // one record of its own, parsed as soon as it (and those before) are in
        let mut got = Vec::new();
        for sym in block.chunks(100) {
            let (recs, used, _) = parse_records(sym).unwrap();
            assert_eq!(used, sym.len(), "a record runs past its symbol");
            got.extend(
                recs.iter()
                    .filter(|r| r.id == 0)
                    .flat_map(|r| r.data.to_vec()),
            );
        }
        assert_eq!(got.len(), a.len());
        assert_eq!(got, a);
    }

    #[test]
    fn a_record_cut_by_the_delivered_prefix_waits() {
        let mut tx = SendStreams::default();
        tx.write(3, b"hello world");
        let block = tx.fill_block(100, 100);
        for cut in 0..block.len() {
            let (recs, used, pad) = parse_records(&block[..cut]).unwrap();
            assert!(recs.is_empty() && used == 0 && !pad, "{cut}");
        }
        let (recs, used, _) = parse_records(&block).unwrap();
        assert_eq!(used, block.len());
        assert_eq!(recs[0].data, b"hello world");
        assert!(parse_records(&[0x42]).is_err());
    }

    #[test]
    fn an_empty_fin_is_sent() {
        let mut tx = SendStreams::default();
        tx.open(0);
        tx.finish(0);
        let block = tx.fill_block(100, 100);
        let (recs, _, _) = parse_records(&block).unwrap();
        assert_eq!(
            recs,
            vec![StreamRecord {
                id: 0,
                fin: true,
                data: &[]
            }]
        );
        assert!(!tx.has_pending());
    }
}
