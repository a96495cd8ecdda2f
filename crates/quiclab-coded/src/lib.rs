//! A network-coded transport (study S4, after Codavel's Bolina): a sans-IO core.
//!
//! Instead of retransmitting what a receiver reports missing, the sender emits RaptorQ-coded
//! symbols of each block of data, so that any `k` (rarely `k + 1` or `k + 2`) of them decode the
//! block's `k` source symbols; it sends enough extra symbols to cover the random loss it has
//! measured, tops a block up when feedback shows it short, and paces at the goodput the receiver
//! reports. Random loss then costs a few percent of redundancy, not a halved window.
//!
//! # Contract
//!
//! - **Sans-IO.** Nothing here but [`udp`] reads a clock or touches a socket, and nothing opens
//!   a file or spawns; [`udp`] is a thin driver over a socket the caller opened. Time is a
//!   [`Duration`](std::time::Duration) since an epoch the caller keeps fixed, passed into every
//!   call that needs it: [`Connection::handle_datagram`]`(now, bytes)`,
//!   [`Connection::poll_transmit`]`(now)`, [`Connection::poll_timeout`]`()`,
//!   [`Connection::handle_timeout`]`(now)`. After any `handle_*` call or application write, the
//!   caller drains `poll_transmit` and sleeps until `poll_timeout`. The only ambient input is
//!   randomness (connection ids and TLS's own), from the system's secure generator. An
//!   [`Endpoint`] routes datagrams of many connections sharing one socket by connection id.
//! - **Every packet is authenticated and encrypted** with keys from a real TLS 1.3 handshake
//!   (rustls's QUIC API, ring provider, ALPN [`crypto::ALPN`]); a packet that fails
//!   authentication changes nothing but a counter ([`Stats::rejected`]). No cryptography is
//!   implemented here: this crate lays out bytes and calls rustls.
//! - **Byte-exact, ordered streams.** Each direction is one ordered byte stream of records;
//!   streams are request/response pairs opened by the client.
//! - It never must: retransmit on a timer to repair random loss (repair symbols go out with the
//!   block, and top-ups follow feedback); block on the application; grow memory without bound
//!   for the sender's in-flight state (at most [`Config::max_blocks_in_flight`] blocks).
//!
//! # Packets
//!
//! One packet per UDP datagram, QUIC-shaped so that rustls's QUIC key schedule and header
//! protection apply unchanged ([`packet`]):
//!
//! ```text
//! long  (Initial, Handshake): 0b11TT0011 | version 0x51c0de01 | 8 | dcid | 8 | scid | pn (4) | AEAD payload
//! short (1-RTT):              0b01000011 | dcid (8) | pn (4) | AEAD payload
//! ```
//!
//! Connection ids are 8 random bytes; each side picks its own and the peer writes it as the
//! destination. Packet numbers count per level (Initial, Handshake, 1-RTT) from 0, travel as
//! 32 bits and are reconstructed as in QUIC; the AEAD nonce is derived from them, and header
//! protection masks them. The payload is a sequence of frames ([`wire`]):
//!
//! | type | frame | levels | content |
//! |---|---|---|---|
//! | 0x00 | PADDING | all | to the end of the packet |
//! | 0x01 | PING | all | nothing |
//! | 0x06 | CRYPTO | Initial, Handshake | offset, length, TLS handshake bytes |
//! | 0x07 | CRYPTO_ACK | Initial, Handshake | handshake bytes received in order so far |
//! | 0x10 | SYMBOL | 1-RTT | block id, source symbol count `k`, encoding symbol id, symbol (to the end) |
//! | 0x11 | FEEDBACK | 1-RTT | largest packet number, ack delay, packets and bytes received, receiver time, blocks below which all are decoded, then per later block: received symbols, decoded |
//! | 0x1c | CLOSE | all | code, reason |
//! | 0x1e | HANDSHAKE_DONE | 1-RTT | nothing (server to client) |
//!
//! **Handshake.** The client's Initial (ClientHello, padded to 1200 bytes) is answered by the
//! server's Initial (ServerHello) and Handshake packets (the rest of its flight); the client
//! then has 1-RTT keys and sends its Finished and its request at once: data flows after one
//! round trip, as with QUIC or TCP Fast Open with TLS 1.3 (there is no 0-RTT yet). Handshake
//! bytes are acknowledged cumulatively per level and retransmitted on a timeout (QUIC's PTO);
//! this timer exists for the handshake only. The server buffers 1-RTT packets that arrive
//! before the client's Finished (RFC 9001 section 5.7). Keys are never updated: a connection
//! stops at the AEAD's confidentiality limit (2^23 packets for AES-GCM, about 12 GB). There is
//! no address validation (Retry) nor anti-amplification limit: this is a lab's transport, used
//! between endpoints it starts itself.
//!
//! **Streams** ([`stream`]). The data of each direction is one ordered byte stream of records,
//! `0x08 | stream id | flags (bit 0: fin) | length | data`, cut into blocks; a block holds
//! whole records and ends with a 0x00 pad byte when they do not fill it. A record ends at the
//! end of a source symbol, so the receiver delivers each symbol's data as soon as it and the
//! symbols before it have arrived, not once the whole block has. The client opens
//! streams 0, 1, 2, ...; the server answers on the same id. A GET is a stream carrying
//! `GET /bytes/N` and fin; the answer carries the body and fin. There is no flow control: the
//! receiver buffers what the application has not read.
//!
//! # Coding ([`coding`])
//!
//! Blocks of up to [`Config::max_block_symbols`] (64) source symbols of
//! [`Config::symbol_size`] bytes (1406 at the default 1452-byte datagram), coded with RaptorQ
//! (RFC 6330, the `raptorq` crate). Why RaptorQ rather than Reed-Solomon:
//! - *Rateless.* Repair symbols are generated on demand, as many as needed, with fresh ids:
//!   a block topped up twice after feedback never runs out of new symbols. Reed-Solomon
//!   (`reed-solomon-erasure` over GF(2^8), at most 256 shards; `reed-solomon-simd` over
//!   GF(2^16)) fixes the number of recovery shards when the block is encoded, so top-ups
//!   beyond it would repeat symbols the receiver may already hold.
//! - *Systematic.* Symbol ids `0..k` are the data: an unharmed block is delivered as it arrives
//!   and never decoded; only blocks that lost something pay for decoding.
//! - *Cost.* RaptorQ needs `k` symbols with probability about 99 % and `k + 2` with about
//!   99.9999 % (an MDS Reed-Solomon code needs exactly `k`): the rare extra symbol is one more
//!   top-up, not a stall. For `k` = 64 the crate encodes at about 1.3 ms per MB with 9 repair
//!   symbols a block, and decodes a block that lost 10 % of its sources at about 3 ms per MB,
//!   on one core of the lab's 2-core machine (`examples/coding_cost.rs`): Gbit/s, far above
//!   the tens of Mbit/s studied here.
//! - *Generation size vs latency.* A lost symbol is repaired when its block's repair symbols
//!   arrive, one block time later at most: 64 symbols are 75 ms at 10 Mbit/s, 8 ms at
//!   100 Mbit/s. Smaller blocks repair sooner but need relatively more redundancy (the
//!   standard deviation of losses per block grows as `k` shrinks); a block is also cut short
//!   when the application has nothing more to send, so requests travel in blocks of one symbol.
//!
//! **Redundancy** ([`coding::proactive_repair`]). With each block the sender sends
//! `ceil(k p + sqrt(k p (1 - p)))` repair symbols, `p` being the random loss rate it has
//! measured (at least 2 for blocks of 1-2 symbols, so a lost request needs no timer). A block
//! still short after that is topped up on feedback: symbols needed, less those queued or still
//! in flight (expected to arrive at `1 - p`), divided by `1 - p`. A symbol counts as lost when
//! the receiver has reported a later packet, or it was sent more than 9/8 RTT before the
//! feedback arrived (QUIC's thresholds, applied when feedback arrives, not on a timer).
//!
//! # Feedback
//!
//! The receiver reports after every [`Config::feedback_every`] (16) data packets or
//! [`Config::feedback_delay`] (10 ms) after the first unreported one; while a block is
//! unfinished and nothing arrives, it repeats its report after half an RTT, then one, then
//! every two; once every
//! block is decoded it repeats its last report twice, against its loss; a receiver that
//! closes puts a last report in front of its CLOSE. Each report is cumulative, so losing one
//! costs nothing but time. The sender keeps a probe timer only for
//! silence (no report for 3 RTT + 4 RTT variations + 20 ms, doubling up to 8 times): it then
//! sends one repair symbol even beyond the in-flight cap ([`Stats::probes`] counts them).
//!
//! # Rate control ([`rate`])
//!
//! The sending rate follows the receiver's goodput: the largest goodput reported over ten
//! rounds, scaled by a gain that probes (1.25) and drains (0.75) once every 8 rounds, divided by
//! `1 - p` so that random loss does not drag the rate down. Loss within what `p` explains is
//! not congestion; loss beyond it while the queue is near its fullest (a drop-tail queue
//! overflowing), or a goodput gap that grows with the delay, is: the rate is cut to 0.7 x the
//! goodput and regrows by one packet per RTT each round, as a TCP-friendly Cubic would. Backing
//! off on the same overflow events as a loss-based TCP, by as much, is what keeps a Cubic flow
//! from starving beside it, and this flow from starving beside Cubic.

pub mod coding;
pub mod connection;
pub mod crypto;
pub mod endpoint;
pub mod error;
pub mod packet;
pub mod rate;
pub mod stream;
pub mod udp;
pub mod wire;

pub use connection::{Config, Connection, Event, Stats};
pub use endpoint::{Endpoint, Handle, Routed};
pub use error::{ConfigError, ConnectionError, StreamError};
