//! One connection: handshake, packet protection, coded data in both directions, feedback, rate
//! control and the application's streams. Sans-IO: every call that depends on time takes `now`
//! (a [`Duration`] since any epoch the caller keeps fixed), datagrams go in through
//! [`Connection::handle_datagram`] and come out of [`Connection::poll_transmit`], and the caller
//! wakes the connection at [`Connection::poll_timeout`] through [`Connection::handle_timeout`].

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use rustls::Side;
use rustls::pki_types::ServerName;
use rustls::quic::{KeyChange, Keys, Version};

use crate::coding::{RecvBlock, SendBlock, proactive_repair};
use crate::crypto::TransportParams;
use crate::error::{ConfigError, ConnectionError, StreamError};
use crate::packet::{self, Cid, Level};
use crate::rate::{FeedbackSample, RateControl, RateStats};
use crate::stream::{RecvStream, SendStreams, parse_records};
use crate::wire::{self, BlockReport, Feedback, Frame, Reader};

/// Tunables of a connection. `Default` suits paths of 1-100 Mbit/s and 1-300 ms.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// Largest UDP payload sent (1452 fits a 1500-byte MTU over IPv6).
    pub max_datagram: usize,
    /// Largest number of source symbols in a block (the generation size).
    pub max_block_symbols: u16,
    /// Blocks sent but not yet decoded by the receiver, at most.
    pub max_blocks_in_flight: usize,
    /// The receiver sends feedback after this many data packets...
    pub feedback_every: u32,
    /// ...or this long after the first packet it has not reported, whichever comes first.
    pub feedback_delay: Duration,
    /// RTT assumed before the first sample.
    pub initial_rtt: Duration,
    /// Packets per RTT at the start.
    pub initial_window: u32,
    pub idle_timeout: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            max_datagram: 1452,
            max_block_symbols: 64,
            max_blocks_in_flight: 256,
            feedback_every: 16,
            feedback_delay: Duration::from_millis(10),
            initial_rtt: Duration::from_millis(100),
            initial_window: 10,
            idle_timeout: Duration::from_secs(30),
        }
    }
}

impl Config {
    /// Checks every field against what the protocol can carry.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let bad = |field, value: String, allowed: &str| ConfigError {
            field,
            value,
            allowed: allowed.to_string(),
        };
        if !(1200..=65_507).contains(&self.max_datagram) {
            return Err(bad(
                "max_datagram",
                self.max_datagram.to_string(),
                "1200 to 65507 bytes",
            ));
        }
        if !(1..=MAX_BLOCK_SYMBOLS).contains(&self.max_block_symbols) {
            return Err(bad(
                "max_block_symbols",
                self.max_block_symbols.to_string(),
                "1 to 8192 (RaptorQ handles 56403; larger blocks cost latency)",
            ));
        }
        if !(1..=4096).contains(&self.max_blocks_in_flight) {
            return Err(bad(
                "max_blocks_in_flight",
                self.max_blocks_in_flight.to_string(),
                "1 to 4096",
            ));
        }
        if self.feedback_every == 0 {
            return Err(bad("feedback_every", "0".into(), "1 or more packets"));
        }
        if self.feedback_delay.is_zero() || self.feedback_delay > Duration::from_secs(1) {
            return Err(bad(
                "feedback_delay",
                format!("{:?}", self.feedback_delay),
                "above 0 and at most 1 s",
            ));
        }
        if self.initial_rtt.is_zero() || self.idle_timeout.is_zero() || self.initial_window == 0 {
            return Err(bad(
                "initial_rtt/idle_timeout/initial_window",
                format!(
                    "{:?}/{:?}/{}",
                    self.initial_rtt, self.idle_timeout, self.initial_window
                ),
                "non-zero values",
            ));
        }
        Ok(())
    }

    /// Bytes of one encoding symbol: what is left of a datagram after the 1-RTT header, the
    /// SYMBOL frame's header and the AEAD tag.
    pub fn symbol_size(&self) -> usize {
        self.max_datagram - packet::overhead(Level::OneRtt) - wire::SYMBOL_HEADER_MAX
    }
}

/// Something the application should look at.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// The handshake completed: streams can carry data.
    Connected,
    /// The peer opened a stream (servers see the client's requests this way).
    StreamOpened(u64),
    /// New bytes (or the end) are ready on a stream.
    StreamReadable(u64),
    /// The connection is over.
    Closed(ConnectionError),
}

/// Counters of one connection.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    pub packets_sent: u64,
    pub bytes_sent: u64,
    pub packets_received: u64,
    pub bytes_received: u64,
    /// Packets whose authentication failed (tampered, forged, or keys not matching).
    pub rejected: u64,
    /// Packets for which no keys were available yet (or any more).
    pub undecryptable: u64,
    pub source_symbols_sent: u64,
    /// Repair symbols sent with their block, before any feedback.
    pub repair_proactive: u64,
    /// Repair symbols sent because feedback showed a block short of symbols.
    pub repair_reactive: u64,
    /// Repair symbols sent because no feedback came in time (timer-driven).
    pub probes: u64,
    /// Handshake retransmission timeouts.
    pub handshake_timeouts: u64,
    pub feedback_sent: u64,
    pub feedback_received: u64,
    pub blocks_sent: u64,
    pub blocks_decoded: u64,
    /// Received blocks that needed repair symbols to decode.
    pub blocks_recovered: u64,
    /// When the handshake completed (on the caller's clock).
    pub established_at: Option<Duration>,
    /// Bytes of this side's 1-RTT packets the peer has received, as of its latest feedback
    /// (datagram bytes, repair symbols and control packets included: what QUIC would count as
    /// acknowledged).
    pub peer_received_bytes: u64,
    /// This side's 1-RTT packets the peer had not received, below the largest it had, as of its
    /// latest feedback (lost, or still reordered).
    pub peer_missing_packets: u64,
    /// The peer's 1-RTT packets not received here, below the largest received.
    pub missing_packets: u64,
}

const CLOSE_COPIES: u32 = 3;
/// Largest block a connection accepts (and [`Config::max_block_symbols`] may ask for).
const MAX_BLOCK_SYMBOLS: u16 = 8192;
/// Handshake bytes a level buffers beyond what is in order, at most.
const CRYPTO_WINDOW: u64 = 64 * 1024;
const EARLY_1RTT_MAX: usize = 32;
const FEEDBACK_MAX_BLOCKS: usize = 64;
/// Copies of the final feedback when the receiver has everything, against its loss.
const FINAL_FEEDBACK_REPEATS: u32 = 2;
/// Client Initials are padded to this many bytes (as in QUIC).
const MIN_INITIAL: usize = 1200;

#[derive(Default)]
struct CryptoSpace {
    send: Vec<u8>,
    send_acked: u64,
    send_next: u64,
    recv_offset: u64,
    recv_pending: BTreeMap<u64, Vec<u8>>,
    ack_pending: bool,
}

#[derive(Debug, Clone, PartialEq)]
enum State {
    Handshaking,
    Established,
    Closing { sends_left: u32, code: u64 },
    Closed(ConnectionError),
}

/// A connection of either side.
pub struct Connection {
    side: Side,
    config: Config,
    symbol_size: usize,
    tls: rustls::quic::Connection,
    local_cid: Cid,
    remote_cid: Cid,
    /// The destination id of the client's first Initial (it keys the Initial packets).
    initial_dcid: Cid,
    keys: [Option<Keys>; 3],
    next_pn: [u64; 3],
    largest_rx: [Option<u64>; 3],
    crypto: [CryptoSpace; 2],
    write_level: Level,
    state: State,
    handshake_confirmed: bool,
    send_handshake_done: bool,
    hs_pto_at: Option<Duration>,
    hs_pto_count: u32,
    hs_rtt_probe: Option<Duration>,
    hs_retransmitted: bool,
    hs_rtt_armed: bool,
    early_1rtt: Vec<Vec<u8>>,
    peer_params: Option<TransportParams>,
    // sending data
    tx_streams: SendStreams,
    tx_blocks: VecDeque<SendBlock>,
    next_block: u64,
    sent_log: VecDeque<(u64, Duration, usize)>,
    inflight: u64,
    last_fb: Option<Feedback>,
    last_progress_at: Option<Duration>,
    probe_backoff: u32,
    probe_credit: u32,
    next_send_at: Duration,
    rate: RateControl,
    // receiving data
    rx_blocks: BTreeMap<u64, RecvBlock>,
    rx_block_first_at: BTreeMap<u64, Duration>,
    complete_below: u64,
    deliver_esi: usize,
    parse_buf: Vec<u8>,
    pad_seen: bool,
    rx_packets: u64,
    rx_bytes: u64,
    rx_largest_at: Duration,
    unreported: u32,
    fb_due_at: Option<Duration>,
    fb_repeats_left: u32,
    fb_last_sent: Option<Duration>,
    fb_idle_backoff: u32,
    rx_streams: BTreeMap<u64, RecvStream>,
    next_stream: u64,
    // application
    events: VecDeque<Event>,
    readable: BTreeSet<u64>,
    stats: Stats,
    recovery_delays: Vec<Duration>,
    last_activity: Duration,
}

fn random_cid() -> Cid {
    use ring::rand::SecureRandom;
    let mut cid = [0u8; packet::CID_LEN];
    // The system RNG fails only if the OS has no entropy source at all.
    ring::rand::SystemRandom::new()
        .fill(&mut cid)
        .expect("system random number generator");
    cid
}

impl Connection {
    /// Starts a client connection to `server_name` (checked against the server's certificate).
    pub fn connect(
        now: Duration,
        config: Config,
        tls: Arc<rustls::ClientConfig>,
        server_name: &str,
    ) -> Result<Self, ConnectionError> {
        config
            .validate()
            .map_err(|e| ConnectionError::Protocol(e.to_string()))?;
        let name = ServerName::try_from(server_name.to_string())
            .map_err(|e| ConnectionError::Tls(format!("server name {server_name:?}: {e}")))?;
        let params = Self::params(&config).encode();
        let tls = rustls::quic::ClientConnection::new(tls, Version::V1, name, params)
            .map_err(|e| ConnectionError::Tls(e.to_string()))?;
        let initial_dcid = random_cid();
        let mut c = Self::new(
            Side::Client,
            now,
            config,
            tls.into(),
            random_cid(),
            initial_dcid,
            initial_dcid,
        );
        c.drive_tls(now)?;
        Ok(c)
    }

    /// Accepts a client's first datagram (an Initial packet of at least 1200 bytes).
    pub fn accept(
        now: Duration,
        config: Config,
        tls: Arc<rustls::ServerConfig>,
        datagram: &[u8],
    ) -> Result<Self, ConnectionError> {
        config
            .validate()
            .map_err(|e| ConnectionError::Protocol(e.to_string()))?;
        let h = packet::parse_header(datagram)
            .map_err(|e| ConnectionError::Protocol(format!("first datagram: {e}")))?;
        let (Level::Initial, Some(scid)) = (h.level, h.scid) else {
            return Err(ConnectionError::Protocol(
                "first datagram: not an Initial packet".into(),
            ));
        };
        if datagram.len() < MIN_INITIAL {
            return Err(ConnectionError::Protocol(format!(
                "first datagram: {} bytes; allowed: at least {MIN_INITIAL}",
                datagram.len()
            )));
        }
        let params = Self::params(&config).encode();
        let tls = rustls::quic::ServerConnection::new(tls, Version::V1, params)
            .map_err(|e| ConnectionError::Tls(e.to_string()))?;
        let mut c = Self::new(
            Side::Server,
            now,
            config,
            tls.into(),
            random_cid(),
            scid,
            h.dcid,
        );
        c.handle_datagram(now, datagram);
        if let State::Closed(e) = &c.state {
            return Err(e.clone());
        }
        Ok(c)
    }

    fn params(config: &Config) -> TransportParams {
        TransportParams {
            idle_timeout_ms: config.idle_timeout.as_millis() as u64,
            max_datagram: config.max_datagram as u64,
        }
    }

    fn new(
        side: Side,
        now: Duration,
        config: Config,
        tls: rustls::quic::Connection,
        local_cid: Cid,
        remote_cid: Cid,
        initial_dcid: Cid,
    ) -> Self {
        let suite = crate::crypto::initial_suite();
        let initial = Keys::initial(Version::V1, suite.suite, suite.quic, &initial_dcid, side);
        let symbol_size = config.symbol_size();
        let rate = RateControl::new(
            config.max_datagram,
            config.initial_window,
            config.initial_rtt,
        );
        Connection {
            side,
            symbol_size,
            tls,
            local_cid,
            remote_cid,
            initial_dcid,
            keys: [Some(initial), None, None],
            next_pn: [0; 3],
            largest_rx: [None; 3],
            crypto: Default::default(),
            write_level: Level::Initial,
            state: State::Handshaking,
            handshake_confirmed: false,
            send_handshake_done: false,
            hs_pto_at: None,
            hs_pto_count: 0,
            hs_rtt_probe: None,
            hs_retransmitted: false,
            hs_rtt_armed: false,
            early_1rtt: Vec::new(),
            peer_params: None,
            tx_streams: SendStreams::default(),
            tx_blocks: VecDeque::new(),
            next_block: 0,
            sent_log: VecDeque::new(),
            inflight: 0,
            last_fb: None,
            last_progress_at: None,
            probe_backoff: 0,
            probe_credit: 0,
            next_send_at: now,
            rate,
            rx_blocks: BTreeMap::new(),
            rx_block_first_at: BTreeMap::new(),
            complete_below: 0,
            deliver_esi: 0,
            parse_buf: Vec::new(),
            pad_seen: false,
            rx_packets: 0,
            rx_bytes: 0,
            rx_largest_at: now,
            unreported: 0,
            fb_due_at: None,
            fb_repeats_left: 0,
            fb_last_sent: None,
            fb_idle_backoff: 0,
            rx_streams: BTreeMap::new(),
            next_stream: 0,
            events: VecDeque::new(),
            readable: BTreeSet::new(),
            stats: Stats::default(),
            recovery_delays: Vec::new(),
            last_activity: now,
            config,
        }
    }

    // ----- accessors -----

    pub fn side(&self) -> Side {
        self.side
    }

    /// The id peers put in packets for this connection.
    pub fn local_cid(&self) -> Cid {
        self.local_cid
    }

    /// The destination id of the client's first Initial (servers also answer to it).
    pub fn initial_cid(&self) -> Cid {
        self.initial_dcid
    }

    pub fn is_established(&self) -> bool {
        matches!(self.state, State::Established)
    }

    pub fn is_closed(&self) -> bool {
        matches!(self.state, State::Closed(_))
    }

    /// Why the connection closed, once it has.
    pub fn close_reason(&self) -> Option<&ConnectionError> {
        match &self.state {
            State::Closed(e) => Some(e),
            _ => None,
        }
    }

    pub fn stats(&self) -> Stats {
        let mut s = self.stats;
        s.missing_packets = self.largest_rx[Level::OneRtt.index()]
            .map_or(0, |l| (l + 1).saturating_sub(self.rx_packets));
        s
    }

    pub fn rate_stats(&self) -> RateStats {
        self.rate.stats()
    }

    /// Current pacing rate in bytes per second.
    pub fn pacing_rate(&self) -> f64 {
        self.rate.pacing_rate()
    }

    /// The random loss rate the sender has measured (it sets the redundancy).
    pub fn loss_estimate(&self) -> f64 {
        self.rate.loss_base()
    }

    pub fn srtt(&self) -> Duration {
        self.rate.srtt()
    }

    /// The smallest RTT measured (handshake or feedback), if any.
    pub fn min_rtt(&self) -> Option<Duration> {
        self.rate.min_rtt()
    }

    /// Bytes of data packets sent after the last one the peer reported (or counted lost).
    pub fn bytes_in_flight(&self) -> u64 {
        self.inflight
    }

    /// The in-flight cap of the rate control, bytes (the counterpart of a congestion window).
    pub fn inflight_cap(&self) -> u64 {
        self.rate.inflight_cap() as u64
    }

    /// For each received block that needed repair symbols: the time from its first symbol's
    /// arrival to its decoding.
    pub fn recovery_delays(&self) -> &[Duration] {
        &self.recovery_delays
    }

    /// The ALPN protocol agreed in the handshake.
    pub fn alpn(&self) -> Option<&[u8]> {
        match &self.tls {
            rustls::quic::Connection::Client(c) => c.alpn_protocol(),
            rustls::quic::Connection::Server(s) => s.alpn_protocol(),
        }
    }

    /// The peer's transport parameters, once the handshake delivered them.
    pub fn peer_params(&self) -> Option<TransportParams> {
        self.peer_params
    }

    pub fn poll_event(&mut self) -> Option<Event> {
        if let Some(e) = self.events.pop_front() {
            return Some(e);
        }
        let id = self.readable.pop_first()?;
        Some(Event::StreamReadable(id))
    }

    // ----- application API -----

    /// Opens a request stream (clients only; the server answers on it).
    pub fn open_stream(&mut self) -> Result<u64, StreamError> {
        if self.side == Side::Server {
            return Err(StreamError::ServerCannotOpen);
        }
        if matches!(self.state, State::Closing { .. } | State::Closed(_)) {
            return Err(StreamError::Closed);
        }
        let id = self.next_stream;
        self.next_stream += 1;
        self.tx_streams.open(id);
        self.rx_streams.entry(id).or_default();
        Ok(id)
    }

    fn check_writable(&self, id: u64) -> Result<(), StreamError> {
        if matches!(self.state, State::Closing { .. } | State::Closed(_)) {
            return Err(StreamError::Closed);
        }
        if !self.tx_streams.exists(id) && !self.rx_streams.contains_key(&id) {
            return Err(StreamError::Unknown { id });
        }
        if self.tx_streams.is_finished(id) {
            return Err(StreamError::Finished { id });
        }
        Ok(())
    }

    /// Queues `data` on stream `id`. Data written before the handshake completes waits for it.
    pub fn write(&mut self, id: u64, data: &[u8]) -> Result<(), StreamError> {
        self.check_writable(id)?;
        self.tx_streams.write(id, data);
        Ok(())
    }

    /// Ends the sending side of stream `id` after what was written.
    pub fn finish(&mut self, id: u64) -> Result<(), StreamError> {
        self.check_writable(id)?;
        self.tx_streams.finish(id);
        Ok(())
    }

    /// Takes the bytes received on stream `id`; the flag says the peer finished it and
    /// everything has been read.
    pub fn read(&mut self, id: u64) -> Result<(Vec<u8>, bool), StreamError> {
        let s = self
            .rx_streams
            .get_mut(&id)
            .ok_or(StreamError::Unknown { id })?;
        let data = std::mem::take(&mut s.buf);
        let fin = s.fin;
        s.read_fin |= fin;
        Ok((data, fin))
    }

    /// Bytes written but not yet sent in a block, plus blocks the peer has not yet decoded.
    pub fn unacknowledged(&self) -> (u64, usize) {
        (self.tx_streams.pending_bytes(), self.tx_blocks.len())
    }

    /// Closes the connection: a CLOSE frame goes out (three times, against loss) and the
    /// connection is closed after that.
    pub fn close(&mut self, code: u64) {
        if !matches!(self.state, State::Closed(_) | State::Closing { .. }) {
            self.state = State::Closing {
                sends_left: CLOSE_COPIES,
                code,
            };
        }
    }

    fn fail(&mut self, e: ConnectionError) {
        if !matches!(self.state, State::Closed(_)) {
            self.events.push_back(Event::Closed(e.clone()));
            self.state = State::Closed(e);
        }
    }

    // ----- timers -----

    fn hs_pto(&self) -> Duration {
        let base = if self.rate.min_rtt().is_some() {
            self.rate.srtt() + 4 * self.rate.rttvar() + Duration::from_millis(10)
        } else {
            3 * self.config.initial_rtt
        };
        base * (1 << self.hs_pto_count.min(6))
    }

    /// Longer than the receiver's longest wait between reports on an unfinished block (two
    /// RTTs) plus a round trip's variation: it fires on silence, not on a slow tail.
    fn probe_timeout(&self) -> Duration {
        let base = 3 * self.rate.srtt() + 4 * self.rate.rttvar() + 2 * self.config.feedback_delay;
        base * (1 << self.probe_backoff.min(3))
    }

    fn probe_at(&self) -> Option<Duration> {
        if self.tx_blocks.is_empty() || self.keys[Level::OneRtt.index()].is_none() {
            return None;
        }
        Some(self.last_progress_at? + self.probe_timeout())
    }

    /// How long after sending a packet its absence from feedback means it was lost.
    fn loss_delay(&self, latest: Option<Duration>) -> Duration {
        let rtt = latest.map_or(self.rate.srtt(), |l| l.max(self.rate.srtt()));
        rtt * 9 / 8 + Duration::from_millis(1)
    }

    fn has_data_to_send(&self) -> bool {
        self.tx_blocks.iter().any(SendBlock::has_pending)
            || (self.tx_streams.has_pending()
                && self.tx_blocks.len() < self.config.max_blocks_in_flight)
    }

    fn data_allowed(&self) -> bool {
        (self.inflight as f64)
            < self.rate.inflight_cap()
                + f64::from(self.config.feedback_every) * self.config.max_datagram as f64
    }

    /// When to call [`Connection::handle_timeout`] (or `poll_transmit`) next, if ever.
    pub fn poll_timeout(&self) -> Option<Duration> {
        if matches!(self.state, State::Closed(_)) {
            return None;
        }
        let mut t: Option<Duration> = Some(self.last_activity + self.idle_timeout());
        let mut min = |x: Option<Duration>| {
            if let Some(x) = x {
                t = Some(t.map_or(x, |t| t.min(x)));
            }
        };
        min(self.hs_pto_at);
        min(self.fb_due_at);
        min(self.probe_at());
        if self.keys[Level::OneRtt.index()].is_some()
            && self.can_send_1rtt()
            && self.has_data_to_send()
        {
            if self.probe_credit > 0 {
                min(Some(self.last_activity)); // due at once
            } else if self.data_allowed() {
                min(Some(self.next_send_at));
            }
        }
        t
    }

    fn idle_timeout(&self) -> Duration {
        let peer = self
            .peer_params
            .map(|p| Duration::from_millis(p.idle_timeout_ms.max(1)))
            .unwrap_or(self.config.idle_timeout);
        self.config.idle_timeout.min(peer)
    }

    /// Runs the timers due at `now`.
    pub fn handle_timeout(&mut self, now: Duration) {
        if matches!(self.state, State::Closed(_)) {
            return;
        }
        if now >= self.last_activity + self.idle_timeout() {
            let idle_ms = (now - self.last_activity).as_millis() as u64;
            self.fail(ConnectionError::IdleTimeout { idle_ms });
            return;
        }
        if self.hs_pto_at.is_some_and(|t| now >= t) {
            self.stats.handshake_timeouts += 1;
            self.hs_pto_count += 1;
            self.hs_retransmitted = true;
            for space in &mut self.crypto {
                space.send_next = space.send_acked;
            }
            self.hs_pto_at = None;
            self.arm_hs_pto(now);
        }
        if self.probe_at().is_some_and(|t| now >= t) {
            // No feedback for a whole timeout: one more repair symbol for the oldest block
            // makes the receiver answer.
            if let Some(b) = self.tx_blocks.front_mut() {
                b.reactive_left += 1;
                self.stats.probes += 1;
                // a probe goes out even when the in-flight cap is reached
                self.probe_credit += 1;
            }
            self.probe_backoff += 1;
            self.last_progress_at = Some(now);
        }
    }

    fn arm_hs_pto(&mut self, now: Duration) {
        let unacked = self
            .crypto
            .iter()
            .any(|s| s.send_acked < s.send.len() as u64);
        if !unacked || self.handshake_confirmed {
            self.hs_pto_at = None;
        } else if self.hs_pto_at.is_none() {
            self.hs_pto_at = Some(now + self.hs_pto());
        }
    }

    // ----- TLS -----

    fn drive_tls(&mut self, now: Duration) -> Result<(), ConnectionError> {
        loop {
            let mut buf = Vec::new();
            let change = self.tls.write_hs(&mut buf);
            if !buf.is_empty() && self.write_level != Level::OneRtt {
                self.crypto[self.write_level.index()].send.extend(buf);
            }
            match change {
                None => break,
                Some(KeyChange::Handshake { keys }) => {
                    self.keys[Level::Handshake.index()] = Some(keys);
                    self.write_level = Level::Handshake;
                }
                Some(KeyChange::OneRtt { keys, .. }) => {
                    self.keys[Level::OneRtt.index()] = Some(keys);
                    self.write_level = Level::OneRtt;
                }
            }
        }
        if self.peer_params.is_none()
            && let Some(p) = self.tls.quic_transport_parameters()
        {
            self.peer_params =
                Some(TransportParams::decode(p).map_err(|e| {
                    ConnectionError::Protocol(format!("transport parameters: {e}"))
                })?);
        }
        if self.state == State::Handshaking && !self.tls.is_handshaking() {
            if self.keys[Level::OneRtt.index()].is_none() {
                return Err(ConnectionError::Tls(
                    "handshake ended without 1-RTT keys".into(),
                ));
            }
            self.state = State::Established;
            self.stats.established_at = Some(now);
            self.events.push_back(Event::Connected);
            if self.side == Side::Server {
                self.send_handshake_done = true;
                self.handshake_confirmed = true;
                self.hs_pto_at = None;
                for p in std::mem::take(&mut self.early_1rtt) {
                    self.handle_datagram(now, &p);
                }
            }
        }
        Ok(())
    }

    fn on_crypto(&mut self, now: Duration, level: Level, offset: u64, data: &[u8]) {
        let space = &mut self.crypto[level.index()];
        space.ack_pending = true;
        let end = offset.saturating_add(data.len() as u64);
        if end <= space.recv_offset {
            return;
        }
        let limit = space.recv_offset + CRYPTO_WINDOW;
        if end > limit {
            self.fail(ConnectionError::Protocol(format!(
                "{level:?} handshake data up to offset {end}; allowed: up to {limit}"
            )));
            return;
        }
        let skip = space.recv_offset.saturating_sub(offset) as usize;
        space
            .recv_pending
            .insert(offset + skip as u64, data[skip..].to_vec());
        let mut contiguous = Vec::new();
        while let Some(entry) = space.recv_pending.first_entry() {
            let at = *entry.key();
            if at > space.recv_offset {
                break;
            }
            let chunk = entry.remove();
            let skip = (space.recv_offset - at) as usize;
            if skip < chunk.len() {
                contiguous.extend_from_slice(&chunk[skip..]);
                space.recv_offset += (chunk.len() - skip) as u64;
            }
        }
        if contiguous.is_empty() {
            return;
        }
        let result = self
            .tls
            .read_hs(&contiguous)
            .map_err(|e| ConnectionError::Tls(e.to_string()))
            .and_then(|()| self.drive_tls(now));
        if let Err(e) = result {
            self.fail(e);
        }
    }

    // ----- receiving -----

    /// Processes one received datagram. Packets that fail authentication are dropped and
    /// counted ([`Stats::rejected`]); they change nothing else.
    pub fn handle_datagram(&mut self, now: Duration, datagram: &[u8]) {
        if matches!(self.state, State::Closed(_)) {
            return;
        }
        let Ok(h) = packet::parse_header(datagram) else {
            self.stats.rejected += 1;
            return;
        };
        if h.dcid != self.local_cid && !(self.side == Side::Server && h.dcid == self.initial_dcid) {
            self.stats.rejected += 1;
            return;
        }
        let level = h.level;
        if level == Level::OneRtt && self.side == Side::Server && self.tls.is_handshaking() {
            // 1-RTT packets wait until the client's Finished is in (RFC 9001 section 5.7).
            if self.keys[level.index()].is_some() && self.early_1rtt.len() < EARLY_1RTT_MAX {
                self.early_1rtt.push(datagram.to_vec());
            } else {
                self.stats.undecryptable += 1;
            }
            return;
        }
        let Some(keys) = &self.keys[level.index()] else {
            self.stats.undecryptable += 1;
            return;
        };
        let mut buf = datagram.to_vec();
        let Ok((pn, range)) =
            packet::open(&keys.remote, &h, self.largest_rx[level.index()], &mut buf)
        else {
            self.stats.rejected += 1;
            return;
        };
        self.stats.packets_received += 1;
        self.stats.bytes_received += datagram.len() as u64;
        self.last_activity = now;
        if self.side == Side::Client
            && level != Level::OneRtt
            && let Some(scid) = h.scid
        {
            self.remote_cid = scid;
        }
        // The handshake's round trip: the client's first Initial to the server's, the server's
        // first flight to the client's first Handshake packet (not after a retransmission).
        let answer = match self.side {
            Side::Client => Level::Initial,
            Side::Server => Level::Handshake,
        };
        if level == answer
            && let Some(sent) = self.hs_rtt_probe.take()
            && !self.hs_retransmitted
        {
            self.rate.on_rtt(now.saturating_sub(sent));
        }
        let largest = &mut self.largest_rx[level.index()];
        let newest = largest.is_none_or(|l| pn > l);
        if newest {
            *largest = Some(pn);
        }
        if level == Level::OneRtt {
            self.rx_packets += 1;
            self.rx_bytes += datagram.len() as u64;
            if newest {
                self.rx_largest_at = now;
            }
        }
        let payload = buf[range].to_vec();
        let mut r = Reader::new(&payload);
        let mut data_packet = false;
        loop {
            let frame = match wire::read_frame(&mut r) {
                Ok(Some(f)) => f,
                Ok(None) => break,
                Err(e) => {
                    self.fail(ConnectionError::Protocol(format!("{e}")));
                    return;
                }
            };
            match (level, frame) {
                (_, Frame::Padding | Frame::Ping) => {}
                (Level::Initial | Level::Handshake, Frame::Crypto { offset, data }) => {
                    self.on_crypto(now, level, offset, data)
                }
                (Level::Initial | Level::Handshake, Frame::CryptoAck { offset }) => {
                    let s = &mut self.crypto[level.index()];
                    s.send_acked = s.send_acked.max(offset.min(s.send.len() as u64));
                    s.send_next = s.send_next.max(s.send_acked);
                    if self
                        .crypto
                        .iter()
                        .all(|s| s.send_acked >= s.send.len() as u64)
                    {
                        self.hs_pto_at = None;
                        self.hs_pto_count = 0;
                    }
                }
                (
                    Level::OneRtt,
                    Frame::Symbol {
                        block,
                        k,
                        esi,
                        data,
                    },
                ) => {
                    data_packet = true;
                    self.on_symbol(now, block, k, esi, data);
                }
                (Level::OneRtt, Frame::Feedback(fb)) => self.on_feedback(now, fb),
                (Level::OneRtt, Frame::HandshakeDone) => {
                    self.handshake_confirmed = true;
                    self.hs_pto_at = None;
                    for s in &mut self.crypto {
                        s.send_acked = s.send.len() as u64;
                        s.send_next = s.send_acked;
                    }
                }
                (_, Frame::Close { code, reason }) => {
                    let reason = String::from_utf8_lossy(reason).into_owned();
                    self.fail(ConnectionError::PeerClosed { code, reason });
                    return;
                }
                (level, frame) => {
                    self.fail(ConnectionError::Protocol(format!(
                        "frame {frame:?} is not allowed in {level:?} packets"
                    )));
                    return;
                }
            }
        }
        if data_packet {
            self.unreported += 1;
            self.fb_idle_backoff = 0;
            if self.unreported >= self.config.feedback_every {
                self.fb_due_at = Some(now);
            } else if self.fb_due_at.is_none() {
                self.fb_due_at = Some(now + self.config.feedback_delay);
            }
        }
    }

    fn on_symbol(&mut self, now: Duration, block: u64, k: u16, esi: u32, data: &[u8]) {
        // RFC 6330 allows 56403 source symbols and 24-bit symbol ids; this protocol's senders
        // stay within MAX_BLOCK_SYMBOLS, and anything beyond is dropped, not decoded.
        if k > MAX_BLOCK_SYMBOLS || esi >= 1 << 24 {
            return;
        }
        if block < self.complete_below
            || block >= self.complete_below + 2 * self.config.max_blocks_in_flight as u64
        {
            return;
        }
        let size = data.len();
        let b = self.rx_blocks.entry(block).or_insert_with(|| {
            self.rx_block_first_at.insert(block, now);
            RecvBlock::new(k, size)
        });
        if b.k != k || b.symbol_size() != size {
            return;
        }
        if b.add(esi, data) {
            self.stats.blocks_decoded += 1;
            if b.recovered {
                self.stats.blocks_recovered += 1;
                if let Some(first) = self.rx_block_first_at.get(&block) {
                    self.recovery_delays.push(now - *first);
                }
            }
        }
        if block == self.complete_below {
            self.deliver();
        }
    }

    /// Moves in-order source symbols into the streams.
    fn deliver(&mut self) {
        loop {
            let cur = self.complete_below;
            let Some(b) = self.rx_blocks.get(&cur) else {
                return;
            };
            while self.deliver_esi < usize::from(b.k) {
                let Some(s) = b.source(self.deliver_esi) else {
                    break;
                };
                if !self.pad_seen {
                    self.parse_buf.extend_from_slice(s);
                }
                self.deliver_esi += 1;
            }
            let all_in = self.deliver_esi == usize::from(b.k);
            if !self.pad_seen {
                let records = match parse_records(&self.parse_buf) {
                    Ok((recs, used, pad)) => {
                        let owned: Vec<(u64, bool, Vec<u8>)> = recs
                            .into_iter()
                            .map(|r| (r.id, r.fin, r.data.to_vec()))
                            .collect();
                        self.pad_seen = pad;
                        self.parse_buf.drain(..used);
                        owned
                    }
                    Err(e) => {
                        self.fail(ConnectionError::Protocol(format!("block {cur}: {e}")));
                        return;
                    }
                };
                for (id, fin, data) in records {
                    self.on_stream_record(id, fin, data);
                }
            }
            if !all_in {
                return;
            }
            if !self.pad_seen && !self.parse_buf.is_empty() {
                self.fail(ConnectionError::Protocol(format!(
                    "block {cur}: a record runs past the end of the block"
                )));
                return;
            }
            self.rx_blocks.remove(&cur);
            self.rx_block_first_at.remove(&cur);
            self.complete_below += 1;
            self.deliver_esi = 0;
            self.parse_buf.clear();
            self.pad_seen = false;
        }
    }

    fn on_stream_record(&mut self, id: u64, fin: bool, data: Vec<u8>) {
        let new = !self.rx_streams.contains_key(&id);
        if new && self.side == Side::Client {
            self.fail(ConnectionError::Protocol(format!(
                "stream {id}: the server cannot open streams"
            )));
            return;
        }
        let s = self.rx_streams.entry(id).or_default();
        if s.fin {
            return;
        }
        s.received += data.len() as u64;
        s.buf.extend_from_slice(&data);
        s.fin = fin;
        if new {
            self.tx_streams.open(id);
            self.events.push_back(Event::StreamOpened(id));
        }
        self.readable.insert(id);
    }

    fn on_feedback(&mut self, now: Duration, fb: Feedback) {
        self.stats.feedback_received += 1;
        if let Some(last) = &self.last_fb
            && (fb.packets < last.packets || fb.time_us < last.time_us)
        {
            return; // an older report overtaken by a newer one
        }
        let (covered, received, bytes, recv_time) = match &self.last_fb {
            Some(last) => (
                fb.largest_pn.saturating_sub(last.largest_pn),
                fb.packets - last.packets,
                fb.bytes.saturating_sub(last.bytes),
                Duration::from_micros(fb.time_us - last.time_us),
            ),
            None => (fb.largest_pn + 1, fb.packets, 0, Duration::ZERO),
        };
        self.stats.peer_received_bytes = fb.bytes;
        self.stats.peer_missing_packets = (fb.largest_pn + 1).saturating_sub(fb.packets);
        let mut rtt = None;
        if covered > 0
            && let Ok(i) = self.sent_log.binary_search_by_key(&fb.largest_pn, |e| e.0)
        {
            let raw = now.saturating_sub(self.sent_log[i].1);
            let delay = Duration::from_micros(fb.ack_delay_us);
            rtt = Some(if raw > delay { raw - delay } else { raw });
        }
        // Packets the receiver would have seen by now (sent over 9/8 RTT ago), yet not reported
        // by the time it wrote this, are lost: QUIC's time threshold, applied on feedback.
        let lost_before = now.saturating_sub(self.loss_delay(rtt));
        while self
            .sent_log
            .front()
            .is_some_and(|e| e.0 <= fb.largest_pn || e.1 < lost_before)
        {
            let (_, _, size) = self.sent_log.pop_front().expect("front exists");
            self.inflight -= size as u64;
        }
        self.rate.on_feedback(FeedbackSample {
            largest_pn: fb.largest_pn,
            covered,
            received,
            bytes,
            recv_time,
            rtt,
            next_pn: self.next_pn[Level::OneRtt.index()],
        });
        let decoded: BTreeSet<u64> = fb
            .blocks
            .iter()
            .filter(|b| b.decoded)
            .map(|b| b.block)
            .collect();
        self.tx_blocks
            .retain(|b| b.id >= fb.complete_below && !decoded.contains(&b.id));
        // Any current report shows the receiver alive and reachable: the probe timer is for
        // silence only (top-ups below act on what the report says).
        self.last_progress_at = Some(now);
        self.probe_backoff = 0;
        // Top up blocks whose symbols, counting those still in flight or queued, fall short.
        let p = self.rate.loss_base();
        let listed_to = fb.blocks.last().map(|b| b.block);
        let truncated = fb.blocks.len() >= FEEDBACK_MAX_BLOCKS;
        // sent_log now holds exactly the packets that may still arrive
        let oldest_live = self.sent_log.front().map_or(u64::MAX, |e| e.0);
        for blk in self.tx_blocks.iter_mut() {
            if blk.next_source < blk.k {
                continue;
            }
            let report = fb.blocks.iter().find(|r| r.block == blk.id);
            let received = match report {
                Some(r) => r.received,
                // not listed below the last listed block: nothing of it arrived
                None if listed_to.is_some_and(|to| blk.id < to) => 0,
                None if !truncated && blk.sent_pns.iter().all(|&pn| pn <= fb.largest_pn) => 0,
                None => continue,
            };
            let mut need = u64::from(blk.k).saturating_sub(received);
            if need == 0 && report.is_some_and(|r| !r.decoded) {
                need = 1; // k symbols in and the decoder still short: one more
            }
            let in_flight = blk
                .sent_pns
                .iter()
                .filter(|&&pn| pn > fb.largest_pn && pn >= oldest_live)
                .count() as u32;
            let expected = f64::from(in_flight + blk.queued()) * (1.0 - p);
            let missing = need as f64 - expected;
            if missing > 0.0 {
                blk.reactive_left += (missing / (1.0 - p)).ceil() as u32;
            }
        }
        self.last_fb = Some(fb);
    }

    // ----- sending -----

    fn can_send_1rtt(&self) -> bool {
        match self.side {
            Side::Client => self.keys[Level::OneRtt.index()].is_some(),
            Side::Server => matches!(self.state, State::Established | State::Closing { .. }),
        }
    }

    /// The next datagram to send at `now`, if any. Call until it returns `None`.
    pub fn poll_transmit(&mut self, now: Duration) -> Option<Vec<u8>> {
        match self.state {
            State::Closed(_) => return None,
            State::Closing { sends_left, code } => {
                let level = if self.can_send_1rtt() {
                    Level::OneRtt
                } else if self.keys[Level::Handshake.index()].is_some() {
                    Level::Handshake
                } else {
                    Level::Initial
                };
                let mut payload = Vec::new();
                // A receiver that closes reports what it got first, so that the sender's
                // counts (and timeline) end complete.
                if level == Level::OneRtt
                    && sends_left == CLOSE_COPIES
                    && self.rx_packets > 0
                    && (self.fb_last_sent.is_none() || self.unreported > 0)
                {
                    wire::put_feedback(&mut payload, &self.current_feedback(now));
                    self.stats.feedback_sent += 1;
                }
                wire::put_close(&mut payload, code, b"");
                let p = self.seal_packet(level, payload);
                if sends_left <= 1 {
                    self.fail(ConnectionError::LocallyClosed { code });
                } else {
                    self.state = State::Closing {
                        sends_left: sends_left - 1,
                        code,
                    };
                }
                return Some(p);
            }
            _ => {}
        }
        for level in [Level::Initial, Level::Handshake] {
            if let Some(p) = self.crypto_packet(now, level) {
                return Some(p);
            }
        }
        if !self.can_send_1rtt() {
            return None;
        }
        if self.next_pn[Level::OneRtt.index()] >= self.key_limit() {
            self.fail(ConnectionError::KeyLimit {
                limit: self.key_limit(),
            });
            return None;
        }
        if self.send_handshake_done {
            self.send_handshake_done = false;
            return Some(self.seal_packet(Level::OneRtt, vec![wire::frame_type::HANDSHAKE_DONE]));
        }
        if self.fb_due_at.is_some_and(|t| now >= t) {
            return Some(self.feedback_packet(now));
        }
        self.data_packet(now)
    }

    fn key_limit(&self) -> u64 {
        self.keys[Level::OneRtt.index()]
            .as_ref()
            .map_or(u64::MAX, |k| k.local.packet.confidentiality_limit())
    }

    fn crypto_packet(&mut self, now: Duration, level: Level) -> Option<Vec<u8>> {
        self.keys[level.index()].as_ref()?;
        let room = self.config.max_datagram - packet::overhead(level) - 16;
        let space = &mut self.crypto[level.index()];
        let unsent = space.send_next < space.send.len() as u64;
        if !unsent && !space.ack_pending {
            return None;
        }
        let mut payload = Vec::new();
        if space.ack_pending {
            wire::put_crypto_ack(&mut payload, space.recv_offset);
            space.ack_pending = false;
        }
        if unsent {
            let from = space.send_next as usize;
            let n = (space.send.len() - from).min(room - payload.len());
            let chunk = space.send[from..from + n].to_vec();
            wire::put_crypto(&mut payload, from as u64, &chunk);
            space.send_next += n as u64;
            if !self.hs_rtt_armed {
                self.hs_rtt_armed = true;
                self.hs_rtt_probe = Some(now);
            }
        }
        if self.side == Side::Client && level == Level::Initial {
            let min = MIN_INITIAL - packet::overhead(level);
            payload.resize(payload.len().max(min), wire::frame_type::PADDING);
        }
        let p = self.seal_packet(level, payload);
        self.arm_hs_pto(now);
        Some(p)
    }

    /// What the receiver has got, as a FEEDBACK frame's content.
    fn current_feedback(&self, now: Duration) -> Feedback {
        let largest = self.largest_rx[Level::OneRtt.index()].unwrap_or(0);
        Feedback {
            largest_pn: largest,
            ack_delay_us: now.saturating_sub(self.rx_largest_at).as_micros() as u64,
            packets: self.rx_packets,
            bytes: self.rx_bytes,
            time_us: now.as_micros() as u64,
            complete_below: self.complete_below,
            blocks: self
                .rx_blocks
                .iter()
                .take(FEEDBACK_MAX_BLOCKS)
                .map(|(&block, b)| BlockReport {
                    block,
                    received: b.received(),
                    decoded: b.decoded,
                })
                .collect(),
        }
    }

    fn feedback_packet(&mut self, now: Duration) -> Vec<u8> {
        let fb = self.current_feedback(now);
        let mut payload = Vec::new();
        wire::put_feedback(&mut payload, &fb);
        self.stats.feedback_sent += 1;
        self.unreported = 0;
        self.fb_last_sent = Some(now);
        let incomplete = self.rx_blocks.values().any(|b| !b.decoded);
        self.fb_due_at = if incomplete {
            // The tail of a block may be lost with nothing behind it: keep reporting, slower
            // and slower, while a block is unfinished.
            // (half an RTT, then one, then two: the sender's probe timer waits longer)
            let wait = (self.rate.srtt() / 2).max(self.config.feedback_delay)
                * (1 << self.fb_idle_backoff.min(2));
            self.fb_idle_backoff += 1;
            Some(now + wait)
        } else if self.fb_repeats_left > 0 {
            self.fb_repeats_left -= 1;
            Some(now + self.config.feedback_delay)
        } else {
            None
        };
        if !incomplete && self.fb_idle_backoff == 0 && self.fb_repeats_left == 0 {
            // everything is in: say so a few more times, since nothing else will
            self.fb_repeats_left = FINAL_FEEDBACK_REPEATS;
            self.fb_idle_backoff = 1;
            self.fb_due_at = Some(now + self.config.feedback_delay);
        }
        self.seal_packet(Level::OneRtt, payload)
    }

    fn data_packet(&mut self, now: Duration) -> Option<Vec<u8>> {
        if self.probe_credit > 0 {
            self.probe_credit -= 1;
        } else if now < self.next_send_at || !self.data_allowed() {
            return None;
        }
        let idx = match self.tx_blocks.iter().position(|b| b.reactive_left > 0) {
            Some(i) => Some(i),
            None => self.tx_blocks.iter().position(SendBlock::has_pending),
        };
        let idx = match idx {
            Some(i) => i,
            None if self.tx_streams.has_pending()
                && self.tx_blocks.len() < self.config.max_blocks_in_flight =>
            {
                let max = usize::from(self.config.max_block_symbols) * self.symbol_size;
                let data = self.tx_streams.fill_block(max, self.symbol_size);
                let k = data.len().div_ceil(self.symbol_size).max(1) as u16;
                let repair = proactive_repair(k, self.rate.loss_base());
                self.tx_blocks.push_back(SendBlock::new(
                    self.next_block,
                    data,
                    self.symbol_size,
                    repair,
                ));
                self.next_block += 1;
                self.stats.blocks_sent += 1;
                self.tx_blocks.len() - 1
            }
            None => {
                self.rate.on_app_limited();
                return None;
            }
        };
        let pn = self.next_pn[Level::OneRtt.index()];
        let blk = &mut self.tx_blocks[idx];
        let reactive = blk.reactive_left > 0;
        let (esi, symbol) = blk.next_symbol()?;
        blk.sent_pns.push(pn);
        let (id, k) = (blk.id, blk.k);
        if esi < u32::from(k) {
            self.stats.source_symbols_sent += 1;
        } else if reactive {
            self.stats.repair_reactive += 1;
        } else {
            self.stats.repair_proactive += 1;
        }
        let mut payload = Vec::with_capacity(symbol.len() + wire::SYMBOL_HEADER_MAX);
        wire::put_symbol(&mut payload, id, k, esi, &symbol);
        let p = self.seal_packet(Level::OneRtt, payload);
        // only data packets count in flight: feedback and control packets are not reported on
        self.sent_log.push_back((pn, now, p.len()));
        self.inflight += p.len() as u64;
        let interval = Duration::from_secs_f64(p.len() as f64 / self.rate.pacing_rate());
        let base = self.next_send_at.max(now.saturating_sub(interval));
        self.next_send_at = base + interval;
        if self.last_progress_at.is_none() {
            self.last_progress_at = Some(now);
        }
        Some(p)
    }

    fn seal_packet(&mut self, level: Level, payload: Vec<u8>) -> Vec<u8> {
        let pn = self.next_pn[level.index()];
        self.next_pn[level.index()] += 1;
        let mut p = Vec::with_capacity(payload.len() + packet::overhead(level));
        packet::write_header(&mut p, level, &self.remote_cid, &self.local_cid, pn);
        let hdr_len = p.len();
        p.extend_from_slice(&payload);
        let keys = self.keys[level.index()]
            .as_ref()
            .expect("a packet is only built at a level whose keys exist");
        packet::seal(&keys.local, pn, &mut p, hdr_len);
        self.stats.packets_sent += 1;
        self.stats.bytes_sent += p.len() as u64;
        p
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_errors_name_the_field_the_value_and_what_is_allowed() {
        let bad = Config {
            max_datagram: 500,
            ..Config::default()
        };
        let e = bad.validate().unwrap_err().to_string();
        assert!(
            e.starts_with("max_datagram = 500: allowed: 1200 to 65507"),
            "{e}"
        );
        let bad = Config {
            max_block_symbols: 9000,
            ..Config::default()
        };
        assert!(
            bad.validate()
                .unwrap_err()
                .to_string()
                .contains("max_block_symbols")
        );
        Config::default().validate().unwrap();
        // a full symbol packet fits the datagram exactly at most
        let c = Config::default();
        assert!(
            c.symbol_size() + wire::SYMBOL_HEADER_MAX + packet::overhead(Level::OneRtt)
                <= c.max_datagram
        );
    }
}
