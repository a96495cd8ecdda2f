//! CPU cost of the code alone, per MB of data, on this machine: systematic blocks of 64
//! symbols of 1406 bytes, with repair symbols for 10 % loss, decoded after losing 10 % of the
//! source symbols. `cargo run --release -p quiclab-coded --example coding_cost`

use std::time::Instant;

use quiclab_coded::coding::{RecvBlock, SendBlock, proactive_repair};

fn main() {
    let (k, t) = (64usize, 1406usize);
    let blocks = 200;
    let data: Vec<u8> = (0..k * t).map(|i| (i % 251) as u8).collect();
    let repair = proactive_repair(k as u16, 0.1);
    let mut encode = std::time::Duration::ZERO;
    let mut decode = std::time::Duration::ZERO;
    for b in 0..blocks {
        let start = Instant::now();
        let mut tx = SendBlock::new(b, data.clone(), t, repair);
        let symbols: Vec<(u32, Vec<u8>)> = std::iter::from_fn(|| tx.next_symbol()).collect();
        encode += start.elapsed();
        let start = Instant::now();
        let mut rx = RecvBlock::new(k as u16, t);
        let mut done = false;
        // lose every tenth source symbol, then feed the rest and the repair symbols
        for (esi, s) in symbols
            .iter()
            .filter(|(esi, _)| *esi as usize >= k || esi % 10 != 3)
        {
            done |= rx.add(*esi, s);
        }
        decode += start.elapsed();
        assert!(done && rx.recovered, "block {b} did not decode");
    }
    let mb = (blocks as usize * k * t) as f64 / 1e6;
    println!(
        "k = {k}, T = {t}, {repair} repair symbols per block: encode {:.2} ms/MB ({:.0} Mbit/s), decode after 10 % loss {:.2} ms/MB ({:.0} Mbit/s)",
        encode.as_secs_f64() * 1e3 / mb,
        mb * 8.0 / encode.as_secs_f64(),
        decode.as_secs_f64() * 1e3 / mb,
        mb * 8.0 / decode.as_secs_f64()
    );
}
