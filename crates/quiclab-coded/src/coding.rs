//! Source blocks and their RaptorQ symbols (RFC 6330, the `raptorq` crate).
//!
//! A [`SendBlock`] holds `k` source symbols of `T` bytes (the block's content, padded); its
//! encoding symbol ids `0..k` are the source symbols themselves (the code is systematic) and ids
//! from `k` on are repair symbols, generated on demand and without limit. A [`RecvBlock`] keeps
//! what arrived; once `k` distinct symbols are in, it decodes (RaptorQ decodes from `k` symbols
//! with probability about 99 %, from `k + 2` with about 99.9999 %; a failed attempt is retried
//! with each further symbol). Source symbols are usable as soon as they arrive, so an unharmed
//! block costs no decoding at all.

use raptorq::{
    EncodingPacket, ObjectTransmissionInformation, PayloadId, SourceBlockDecoder,
    SourceBlockEncoder,
};

fn oti(k: u16, symbol_size: usize) -> ObjectTransmissionInformation {
    // One source block, no sub-blocking, byte alignment: the framing decides sizes.
    ObjectTransmissionInformation::new(
        u64::from(k) * symbol_size as u64,
        symbol_size as u16,
        1,
        1,
        1,
    )
}

/// Repair symbols to send with a block of `k` source symbols before any feedback, for a random
/// loss rate `p`: the expected losses plus one standard deviation (so most blocks decode
/// without waiting for feedback; the rest are topped up after feedback), and at least two for
/// blocks of one or two symbols (short messages such as requests must not need a timer).
pub fn proactive_repair(k: u16, p: f64) -> u32 {
    let k = f64::from(k);
    let p = p.clamp(0.0, 0.5);
    let expected = k * p + (k * p * (1.0 - p)).sqrt();
    let mut r = if p > 0.0 { expected.ceil() as u32 } else { 0 };
    if k <= 2.0 {
        r = r.max(2);
    }
    r
}

/// The sender's copy of one block.
pub struct SendBlock {
    pub id: u64,
    pub k: u16,
    symbol_size: usize,
    data: Vec<u8>,
    encoder: Option<SourceBlockEncoder>,
    /// Next source symbol to send (all sent when it equals `k`).
    pub next_source: u16,
    next_repair: u32,
    /// Repair symbols still to send without waiting for feedback.
    pub proactive_left: u32,
    /// Repair symbols still to send because feedback showed a deficit.
    pub reactive_left: u32,
    /// Packet numbers that carried this block's symbols, in sending order.
    pub sent_pns: Vec<u64>,
}

impl SendBlock {
    /// `data` is padded here to a whole number of symbols.
    pub fn new(id: u64, mut data: Vec<u8>, symbol_size: usize, repair: u32) -> Self {
        let k = data.len().div_ceil(symbol_size).max(1);
        data.resize(k * symbol_size, 0);
        SendBlock {
            id,
            k: k as u16,
            symbol_size,
            data,
            encoder: None,
            next_source: 0,
            next_repair: 0,
            proactive_left: repair,
            reactive_left: 0,
            sent_pns: Vec::new(),
        }
    }

    /// Whether there is something to send for this block without new feedback.
    pub fn has_pending(&self) -> bool {
        self.next_source < self.k || self.proactive_left > 0 || self.reactive_left > 0
    }

    /// Symbols still queued for this block (sources not yet sent and planned repairs).
    pub fn queued(&self) -> u32 {
        u32::from(self.k - self.next_source) + self.proactive_left + self.reactive_left
    }

    /// The next symbol to send: reactive repair first (it is late already), then sources, then
    /// proactive repair. `None` when nothing is queued.
    pub fn next_symbol(&mut self) -> Option<(u32, Vec<u8>)> {
        if self.reactive_left > 0 {
            self.reactive_left -= 1;
            return Some(self.repair());
        }
        if self.next_source < self.k {
            let i = usize::from(self.next_source);
            self.next_source += 1;
            let s = &self.data[i * self.symbol_size..(i + 1) * self.symbol_size];
            return Some((i as u32, s.to_vec()));
        }
        if self.proactive_left > 0 {
            self.proactive_left -= 1;
            return Some(self.repair());
        }
        None
    }

    /// A new repair symbol (never sent before for this block).
    pub fn repair(&mut self) -> (u32, Vec<u8>) {
        let (k, t) = (self.k, self.symbol_size);
        let encoder = self
            .encoder
            .get_or_insert_with(|| SourceBlockEncoder::new(0, &oti(k, t), &self.data));
        let p = encoder
            .repair_packets(self.next_repair, 1)
            .pop()
            .expect("repair_packets(_, 1) yields one packet");
        self.next_repair += 1;
        let (id, data) = p.split();
        (id.encoding_symbol_id(), data)
    }
}

/// The receiver's state of one block.
pub struct RecvBlock {
    pub k: u16,
    symbol_size: usize,
    source: Vec<Option<Vec<u8>>>,
    repair: Vec<(u32, Vec<u8>)>,
    seen: std::collections::BTreeSet<u32>,
    pub decoded: bool,
    /// Decoding needed repair symbols (some source symbol was lost).
    pub recovered: bool,
    attempted_at: usize,
}

impl RecvBlock {
    pub fn new(k: u16, symbol_size: usize) -> Self {
        RecvBlock {
            k,
            symbol_size,
            source: vec![None; usize::from(k)],
            repair: Vec::new(),
            seen: Default::default(),
            decoded: false,
            recovered: false,
            attempted_at: 0,
        }
    }

    pub fn symbol_size(&self) -> usize {
        self.symbol_size
    }

    /// Distinct symbols received.
    pub fn received(&self) -> u64 {
        self.seen.len() as u64
    }

    /// Adds a symbol; returns whether the block became decoded with it.
    pub fn add(&mut self, esi: u32, data: &[u8]) -> bool {
        if self.decoded || data.len() != self.symbol_size || !self.seen.insert(esi) {
            return false;
        }
        match self.source.get_mut(esi as usize) {
            Some(slot) => *slot = Some(data.to_vec()),
            None => self.repair.push((esi, data.to_vec())),
        }
        self.try_decode()
    }

    fn try_decode(&mut self) -> bool {
        if self.source.iter().all(Option::is_some) {
            self.decoded = true;
            self.repair.clear();
            return true;
        }
        let n = self.seen.len();
        if n < usize::from(self.k) || n == self.attempted_at {
            return false;
        }
        self.attempted_at = n;
        let mut dec = SourceBlockDecoder::new(
            0,
            &oti(self.k, self.symbol_size),
            u64::from(self.k) * self.symbol_size as u64,
        );
        let packets = self
            .source
            .iter()
            .enumerate()
            .filter_map(|(i, s)| {
                s.as_ref()
                    .map(|d| EncodingPacket::new(PayloadId::new(0, i as u32), d.clone()))
            })
            .chain(
                self.repair
                    .iter()
                    .map(|(esi, d)| EncodingPacket::new(PayloadId::new(0, *esi), d.clone())),
            );
        let Some(block) = dec.decode(packets) else {
            return false;
        };
        for (i, slot) in self.source.iter_mut().enumerate() {
            if slot.is_none() {
                *slot = Some(block[i * self.symbol_size..(i + 1) * self.symbol_size].to_vec());
            }
        }
        self.decoded = true;
        self.recovered = true;
        self.repair.clear();
        true
    }

    /// Source symbol `i`, when it arrived or was decoded.
    pub fn source(&self, i: usize) -> Option<&[u8]> {
        self.source.get(i).and_then(|s| s.as_deref())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn content(n: usize) -> Vec<u8> {
        (0..n).map(|i| (i * 7 % 253) as u8).collect()
    }

    #[test]
    fn any_k_symbols_mostly_decode_and_k_plus_two_always_did_here() {
        let t = 64;
        let data = content(40 * t - 10);
        let mut failures_at_k = 0;
        for trial in 0..50u32 {
            let mut tx = SendBlock::new(1, data.clone(), t, 0);
            assert_eq!(tx.k, 40);
            let mut symbols: Vec<(u32, Vec<u8>)> =
                std::iter::from_fn(|| tx.next_symbol()).collect();
            symbols.extend((0..12).map(|_| tx.repair()));
            // drop a pseudo-random subset of 10 sources and keep k + 2 symbols in all
            symbols.retain(|(esi, _)| *esi >= 40 || (esi * 31 + trial * 17) % 4 != 0);
            let mut rx = RecvBlock::new(tx.k, t);
            let mut decoded_at = None;
            for (n, (esi, s)) in symbols.iter().enumerate() {
                if rx.add(*esi, s) {
                    decoded_at = Some(n + 1);
                    break;
                }
            }
            let at = decoded_at.expect("decodes");
            assert!(at <= 42, "needed {at} symbols for k = 40");
            failures_at_k += usize::from(at > 40);
            let got: Vec<u8> = (0..40)
                .flat_map(|i| rx.source(i).unwrap().to_vec())
                .collect();
            assert_eq!(&got[..data.len()], &data[..]);
            assert!(got[data.len()..].iter().all(|&b| b == 0), "padding");
            assert!(rx.recovered);
        }
        // RFC 6330 promises failure at k received below 1 % for random loss; allow 5 of 50
        assert!(failures_at_k <= 5, "{failures_at_k} of 50 failed at k");
    }

    #[test]
    fn an_unharmed_block_needs_no_decoding_and_duplicates_are_ignored() {
        let mut tx = SendBlock::new(0, content(300), 100, 1);
        let mut rx = RecvBlock::new(tx.k, 100);
        let (esi0, s0) = tx.next_symbol().unwrap();
        assert!(!rx.add(esi0, &s0));
        assert!(!rx.add(esi0, &s0));
        assert_eq!(rx.received(), 1);
        let (e1, s1) = tx.next_symbol().unwrap();
        let (e2, s2) = tx.next_symbol().unwrap();
        assert!(!rx.add(e1, &s1));
        assert!(rx.add(e2, &s2));
        assert!(rx.decoded && !rx.recovered);
        // the proactive repair comes after the sources, then nothing
        assert!(tx.next_symbol().unwrap().0 >= 3);
        assert!(tx.next_symbol().is_none());
        // a symbol of the wrong size is refused
        let mut rx = RecvBlock::new(3, 100);
        assert!(!rx.add(0, &[0; 99]));
        assert_eq!(rx.received(), 0);
    }

    #[test]
    fn proactive_repair_covers_the_mean_loss_plus_one_deviation() {
        assert_eq!(proactive_repair(64, 0.0), 0);
        // 64 * 0.02 = 1.28, sd = 1.12
        assert_eq!(proactive_repair(64, 0.02), 3);
        // 64 * 0.1 = 6.4, sd = 2.4
        assert_eq!(proactive_repair(64, 0.1), 9);
        assert_eq!(proactive_repair(1, 0.0), 2);
        assert_eq!(proactive_repair(2, 0.0), 2);
        assert_eq!(proactive_repair(3, 0.0), 0);
    }
}
