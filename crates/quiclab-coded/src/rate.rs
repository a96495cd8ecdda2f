//! Rate control: the sending rate follows the goodput the receiver reports, inflated by the
//! random loss the sender has measured; a gap between sending and receiving that this loss
//! explains is not congestion, a larger gap while the queue is high is.
//!
//! The model (per round trip, a "round", ended by the first feedback that covers a packet sent
//! after the round began):
//! - `bw`: the largest goodput the receiver reported over the last 10 rounds (its own clock,
//!   bytes received over time), so it measures the bottleneck when the sender exceeds it.
//! - `q`: queueing delay, the round's smallest RTT sample minus the path's smallest.
//! - `loss_base`: the loss rate of rounds whose queue was not near its recent maximum, where
//!   drops cannot be a drop-tail queue's overflow: the random (e.g. wireless) loss. It sets the
//!   code's proactive redundancy as well.
//! - Pacing rate = gain x min(bw, bw_hi) / (1 - loss_base). The gain starts at 2/ln 2 (doubling
//!   per round), then cycles 1.25 (probe), 0.75 (drain what the probe queued), 1 x 6 (cruise).
//! - Congestion, any of:
//!   - *overflow*: the round lost packets while `q` was at least 3/4 of its maximum over the
//!     last 10 rounds (and at least max(5 ms, min RTT / 4)), more than `loss_base` explains by
//!     chance (Poisson tail below 0.5 %; with no random loss, a single packet), once 500
//!     packets have taught `loss_base`. A window-based flow beside this one (Cubic) overflows
//!     the queue every few seconds and this flow, paced, loses only one or two packets of each
//!     overflow: it must back off on those.
//!   - *excess*: more loss than `loss_base` explains (mean + 3 standard deviations + 1) while
//!     `q` was at least half its recent maximum and at least max(5 ms, min RTT / 4);
//!   - *severe*: over 30 % + 2 x `loss_base` lost (at least 8 packets) whatever the delay (a
//!     policer, an outage).
//!
//!   Then `bw_hi` becomes 0.7 x the round's goodput (at most once per two rounds); it grows by
//!   one packet per RTT each round while no congestion is seen. These are Cubic's own decrease
//!   and its TCP-friendly increase (about 0.5 packet per RTT for a decrease to 0.7) within a
//!   factor of two: flows cut on the same events converge (additive increase, multiplicative
//!   decrease), each difference shrinking by 0.7 per congestion epoch, and share a bottleneck
//!   with Cubic (45-64 % for the coded flow at 10-200 ms RTT and 10 Mbit/s, in namespaces).
//! - A growing gap: in a cruise round whose goodput fell below 85 % of `bw` while `q` rose, the
//!   capacity has shrunk (another flow or a slower link): `bw` is reset to that goodput instead
//!   of waiting for the maximum to age out.
//! - Bytes in flight (sent after the last packet the receiver reported) are capped at
//!   2 x bw x srtt / (1 - loss_base) (in startup 2.89 x bw x min RTT, which bounds its
//!   overshoot): if feedback stops, sending stops. The smoothed RTT, not the minimum, so that a
//!   queue another flow keeps full does not hold this flow to cap / RTT.
//!
//! Time is an argument; nothing here reads a clock.

use std::collections::VecDeque;
use std::time::Duration;

const STARTUP_GAIN: f64 = 2.885;
const CYCLE: [f64; 8] = [1.25, 0.75, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0];
const BW_WINDOW_ROUNDS: u64 = 10;
const BETA: f64 = 0.7;
const HI_GROWTH_PACKETS: f64 = 1.0;
/// Chance of a round's loss under the random rate below which it is taken as an overflow.
const OVERFLOW_P: f64 = 0.005;
/// The random loss rate is known well enough to call one lost packet an overflow after this
/// many packets (a 1 % rate has then shown about 5 losses).
const LOSS_MATURE_PACKETS: f64 = 500.0;

/// P(X >= k) for X Poisson with mean `mean`.
fn poisson_tail(mean: f64, k: u64) -> f64 {
    if k == 0 {
        return 1.0;
    }
    if mean <= 0.0 {
        return 0.0;
    }
    let mut term = (-mean).exp();
    let mut below = term;
    for i in 1..k {
        term *= mean / i as f64;
        below += term;
    }
    (1.0 - below).max(0.0)
}

/// What one feedback adds to the sender's knowledge.
#[derive(Debug, Clone, Copy, Default)]
pub struct FeedbackSample {
    /// Largest packet number the receiver has seen.
    pub largest_pn: u64,
    /// Packet numbers newly covered by this feedback (the increase of `largest_pn`).
    pub covered: u64,
    /// Packets newly received (the increase of the receiver's count).
    pub received: u64,
    /// Bytes newly received.
    pub bytes: u64,
    /// Time between the receiver's previous feedback and this one, on its clock.
    pub recv_time: Duration,
    /// RTT sample (ack delay removed), when `largest_pn` is a packet whose send time is known.
    pub rtt: Option<Duration>,
    /// The packet number the sender will use next (a new round ends when it is covered).
    pub next_pn: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Startup,
    Drain,
    ProbeBw,
}

#[derive(Default)]
struct Round {
    covered: u64,
    received: u64,
    bytes: u64,
    recv_time: Duration,
    min_rtt: Option<Duration>,
    app_limited: bool,
}

/// Counters for reports and tests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RateStats {
    pub rounds: u64,
    pub congestion_events: u64,
    pub gap_events: u64,
}

pub struct RateControl {
    mss: f64,
    initial_window: f64,
    mode: Mode,
    phase: usize,
    drain_rounds: u32,
    bw_samples: VecDeque<(u64, f64)>,
    bw_hi: f64,
    loss_base: f64,
    /// Packets of the rounds `loss_base` was learned from.
    loss_packets: f64,
    min_rtt: Option<Duration>,
    srtt: Duration,
    rttvar: Duration,
    round: Round,
    round_end_pn: u64,
    q_history: VecDeque<Duration>,
    prev_q: Duration,
    full_bw: f64,
    full_bw_rounds: u32,
    last_congestion: Option<u64>,
    stats: RateStats,
}

impl RateControl {
    /// `mss`: bytes of a full packet; `initial_window`: packets per RTT to start with.
    pub fn new(mss: usize, initial_window: u32, initial_rtt: Duration) -> Self {
        RateControl {
            mss: mss as f64,
            initial_window: f64::from(initial_window),
            mode: Mode::Startup,
            phase: 2,
            drain_rounds: 0,
            bw_samples: VecDeque::new(),
            bw_hi: f64::INFINITY,
            loss_base: 0.0,
            loss_packets: 0.0,
            min_rtt: None,
            srtt: initial_rtt,
            rttvar: initial_rtt / 2,
            round: Round::default(),
            round_end_pn: 0,
            q_history: VecDeque::new(),
            prev_q: Duration::ZERO,
            full_bw: 0.0,
            full_bw_rounds: 0,
            last_congestion: None,
            stats: RateStats::default(),
        }
    }

    pub fn mode(&self) -> Mode {
        self.mode
    }

    pub fn stats(&self) -> RateStats {
        self.stats
    }

    pub fn srtt(&self) -> Duration {
        self.srtt
    }

    pub fn rttvar(&self) -> Duration {
        self.rttvar
    }

    pub fn min_rtt(&self) -> Option<Duration> {
        self.min_rtt
    }

    /// The random loss rate measured so far.
    pub fn loss_base(&self) -> f64 {
        self.loss_base
    }

    /// Goodput the path is believed to deliver, bytes per second.
    pub fn bandwidth(&self) -> f64 {
        let measured = self.bw_samples.iter().map(|&(_, b)| b).fold(0.0, f64::max);
        let initial = self.initial_window * self.mss / self.srtt.as_secs_f64().max(1e-3);
        let bw = if self.bw_samples.is_empty() {
            initial
        } else {
            measured.max(if self.mode == Mode::Startup {
                initial
            } else {
                0.0
            })
        };
        bw.min(self.bw_hi).max(self.mss / 1.0)
    }

    fn gain(&self) -> f64 {
        match self.mode {
            Mode::Startup => STARTUP_GAIN,
            Mode::Drain => 1.0 / STARTUP_GAIN,
            Mode::ProbeBw => CYCLE[self.phase],
        }
    }

    /// Pacing rate in bytes per second.
    pub fn pacing_rate(&self) -> f64 {
        self.gain() * self.bandwidth() / (1.0 - self.loss_base)
    }

    /// Largest number of bytes that may be sent beyond the last packet the receiver reported.
    pub fn inflight_cap(&self) -> f64 {
        let gain = if self.mode == Mode::Startup {
            STARTUP_GAIN
        } else {
            2.0
        };
        // After startup, the smoothed RTT, queueing included: when another flow keeps a queue
        // full, a cap on the empty path's BDP would hold this flow to a fraction of its rate
        // (cap / RTT). In startup, the empty path's: the queue startup itself builds must not
        // raise the cap that bounds its overshoot.
        let min_rtt = self.min_rtt.unwrap_or(self.srtt);
        let rtt = if self.mode == Mode::Startup {
            min_rtt
        } else {
            self.srtt.max(min_rtt)
        }
        .as_secs_f64();
        (gain * self.bandwidth() * rtt / (1.0 - self.loss_base)).max(4.0 * self.mss)
    }

    /// An RTT measured outside feedback (the handshake).
    pub fn on_rtt(&mut self, rtt: Duration) {
        self.min_rtt = Some(self.min_rtt.map_or(rtt, |m| m.min(rtt)));
        if self.stats.rounds == 0 && self.round.min_rtt.is_none() {
            self.srtt = rtt;
            self.rttvar = rtt / 2;
        } else {
            let diff = self.srtt.abs_diff(rtt);
            self.rttvar = (self.rttvar * 3 + diff) / 4;
            self.srtt = (self.srtt * 7 + rtt) / 8;
        }
    }

    /// The sender had room to send and nothing to send.
    pub fn on_app_limited(&mut self) {
        self.round.app_limited = true;
    }

    pub fn on_feedback(&mut self, s: FeedbackSample) {
        if let Some(rtt) = s.rtt {
            self.on_rtt(rtt);
            self.round.min_rtt = Some(self.round.min_rtt.map_or(rtt, |m| m.min(rtt)));
        }
        self.round.covered += s.covered;
        self.round.received += s.received;
        self.round.bytes += s.bytes;
        self.round.recv_time += s.recv_time;
        if s.largest_pn >= self.round_end_pn && self.round.covered > 0 {
            self.end_round();
            self.round_end_pn = s.next_pn;
        }
    }

    fn end_round(&mut self) {
        let r = std::mem::take(&mut self.round);
        self.stats.rounds += 1;
        let round = self.stats.rounds;
        let n = r.covered as f64;
        let lost = r.covered.saturating_sub(r.received) as f64;
        let frac = lost / n;
        let min_rtt = self.min_rtt.unwrap_or(self.srtt);
        let q = r.min_rtt.map_or(self.prev_q, |m| m.saturating_sub(min_rtt));
        self.q_history.push_back(q);
        if self.q_history.len() > BW_WINDOW_ROUNDS as usize {
            self.q_history.pop_front();
        }
        let q_max = self.q_history.iter().copied().max().unwrap_or_default();
        let q_low = (min_rtt / 4).max(Duration::from_millis(5));
        let q_high = q >= q_low.max(q_max / 2);
        let expected = self.loss_base * n;
        let excess = lost > expected + 3.0 * expected.max(0.5).sqrt() + 1.0;
        // A drop-tail queue overflows at its fullest: loss the random rate does not explain
        // (less likely than OVERFLOW_P by chance; with no random loss, any loss) while the queue
        // is near the highest seen is an overflow, even of one or two packets (all a paced flow
        // loses when a window-based flow beside it overflows the queue). The exact Poisson tail
        // keeps false alarms equally rare for flows of few and of many packets per round.
        let q_full = q >= q_low.max(q_max * 3 / 4);
        let overflow = q_full
            && self.loss_packets >= LOSS_MATURE_PACKETS
            && poisson_tail(expected, lost as u64) < OVERFLOW_P;
        let severe = frac > 2.0 * self.loss_base + 0.3 && lost >= 8.0;
        let congested = (excess && q_high) || overflow || severe;
        if !q_full && !congested {
            self.loss_packets += n;
            let w = (n / 500.0).min(1.0);
            self.loss_base += (frac - self.loss_base) * w;
            self.loss_base = self.loss_base.clamp(0.0, 0.5);
        }
        let goodput = (r.recv_time > Duration::from_micros(500))
            .then(|| r.bytes as f64 / r.recv_time.as_secs_f64());
        let bw_before = self.bandwidth();
        if let Some(d) = goodput
            && (!r.app_limited || d > bw_before)
        {
            self.bw_samples.push_back((round, d));
        }
        while self
            .bw_samples
            .front()
            .is_some_and(|&(at, _)| at + BW_WINDOW_ROUNDS <= round)
        {
            self.bw_samples.pop_front();
        }
        let cooled = self.last_congestion.is_none_or(|at| at + 2 <= round);
        if congested && cooled {
            self.stats.congestion_events += 1;
            self.last_congestion = Some(round);
            if let Some(d) = goodput {
                self.bw_hi = (BETA * d).max(4.0 * self.mss / min_rtt.as_secs_f64());
            }
            if self.mode == Mode::Startup {
                self.mode = Mode::Drain;
                self.drain_rounds = 0;
            }
        } else if !congested && !r.app_limited && self.bw_hi.is_finite() {
            // additive, so that flows cut by the same factor converge (AIMD)
            self.bw_hi += HI_GROWTH_PACKETS * self.mss / self.srtt.as_secs_f64();
        }
        let rising = q > self.prev_q + q_low / 2;
        if self.mode == Mode::ProbeBw
            && self.phase >= 2
            && rising
            && let Some(d) = goodput
            && d < 0.85 * bw_before
            && !r.app_limited
        {
            self.stats.gap_events += 1;
            self.bw_samples.clear();
            self.bw_samples.push_back((round, d));
        }
        self.prev_q = q;
        match self.mode {
            Mode::Startup => {
                let bw = self.bandwidth();
                if bw >= self.full_bw * 1.25 {
                    self.full_bw = bw;
                    self.full_bw_rounds = 0;
                } else if !r.app_limited {
                    self.full_bw_rounds += 1;
                }
                if self.full_bw_rounds >= 3 || q > q_low.max(min_rtt / 2) {
                    self.mode = Mode::Drain;
                    self.drain_rounds = 0;
                }
            }
            Mode::Drain => {
                self.drain_rounds += 1;
                if q <= q_low || self.drain_rounds >= 3 {
                    self.mode = Mode::ProbeBw;
                    self.phase = 2;
                }
            }
            Mode::ProbeBw => self.phase = (self.phase + 1) % CYCLE.len(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MSS: usize = 1400;

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    /// One round of feedback: `sent` packets of which `lost` were lost, delivered at `goodput`
    /// bytes/s over `rtt`.
    fn round(
        rc: &mut RateControl,
        pn: &mut u64,
        sent: u64,
        lost: u64,
        goodput: f64,
        rtt: Duration,
    ) {
        *pn += sent;
        let received = sent - lost;
        rc.on_feedback(FeedbackSample {
            largest_pn: *pn - 1,
            covered: sent,
            received,
            bytes: (goodput * rtt.as_secs_f64()) as u64,
            recv_time: rtt,
            rtt: Some(rtt),
            next_pn: *pn,
        });
    }

    #[test]
    fn random_loss_at_an_empty_queue_is_learned_not_punished() {
        let mut rc = RateControl::new(MSS, 10, ms(50));
        rc.on_rtt(ms(50));
        let mut pn = 0;
        let c = 1_250_000.0; // 10 Mbit/s
        // 40 rounds of 45 packets losing 1 or 2 (2-4 %), queue empty
        for i in 0..40 {
            round(&mut rc, &mut pn, 45, 1 + i % 2, c, ms(50));
        }
        assert_eq!(rc.stats().congestion_events, 0);
        let lb = rc.loss_base();
        assert!((0.02..0.04).contains(&lb), "loss base {lb}");
        // pacing in cruise stays at the measured goodput inflated by the loss, not below it
        let r = rc.pacing_rate();
        assert!(r >= 0.75 * c / (1.0 - lb), "{r}");
    }

    #[test]
    fn excess_loss_at_a_full_queue_is_congestion_and_cuts_the_rate() {
        let mut rc = RateControl::new(MSS, 10, ms(50));
        rc.on_rtt(ms(50));
        let mut pn = 0;
        let c = 1_250_000.0;
        for _ in 0..12 {
            round(&mut rc, &mut pn, 45, 0, c, ms(50));
        }
        assert_eq!(rc.mode(), Mode::ProbeBw);
        // queue fills (RTT 50 -> 150 ms), then 6 of 45 lost: an overflow
        round(&mut rc, &mut pn, 45, 0, c, ms(150));
        round(&mut rc, &mut pn, 45, 6, c, ms(150));
        assert_eq!(rc.stats().congestion_events, 1);
        // bw_hi = 0.7 x goodput: the pacing rate cannot exceed 1.25 x 0.7 x c
        assert!(
            rc.pacing_rate() <= 1.25 * BETA * c + 1.0,
            "{}",
            rc.pacing_rate()
        );
        // the same loss with an empty queue is not congestion (after the cool-down)
        let before = rc.stats().congestion_events;
        for _ in 0..3 {
            round(&mut rc, &mut pn, 45, 0, c, ms(50));
        }
        round(&mut rc, &mut pn, 45, 3, c, ms(50));
        assert_eq!(rc.stats().congestion_events, before);
    }

    #[test]
    fn one_loss_at_the_fullest_queue_is_an_overflow_once_the_random_rate_is_known() {
        let c = 1_250_000.0;
        // 45 packets a round, no random loss, then a queue rising 50 -> 150 ms and one loss
        // at its top: before 500 packets it is tolerated, after it is an overflow
        let run = |clean_rounds: u64| {
            let mut rc = RateControl::new(MSS, 10, ms(50));
            rc.on_rtt(ms(50));
            let mut pn = 0;
            for _ in 0..clean_rounds {
                round(&mut rc, &mut pn, 45, 0, c, ms(50));
            }
            for rtt in [90, 120, 150] {
                round(&mut rc, &mut pn, 45, 0, c, ms(rtt));
            }
            let before = rc.stats().congestion_events;
            round(&mut rc, &mut pn, 45, 1, c, ms(150));
            rc.stats().congestion_events - before
        };
        assert_eq!(
            run(8),
            0,
            "8 x 45 = 360 packets: the random rate is not known yet"
        );
        assert_eq!(
            run(12),
            1,
            "12 x 45 = 540 packets of no loss: one loss is an overflow"
        );
        // with 2 % random loss learned (0.9 a round expected), one or two losses at the top
        // are chance, five are an overflow (P(X >= 5 | 0.9) = 0.2 %)
        let with_loss = |lost: u64| {
            let mut rc = RateControl::new(MSS, 10, ms(50));
            rc.on_rtt(ms(50));
            let mut pn = 0;
            for i in 0..40 {
                round(&mut rc, &mut pn, 45, u64::from(i % 10 < 9), c, ms(50));
            }
            for rtt in [90, 120, 150] {
                round(&mut rc, &mut pn, 45, 0, c, ms(rtt));
            }
            let before = rc.stats().congestion_events;
            round(&mut rc, &mut pn, 45, lost, c, ms(150));
            rc.stats().congestion_events - before
        };
        assert_eq!(with_loss(2), 0);
        assert_eq!(with_loss(5), 1);
    }

    #[test]
    fn poisson_tails() {
        assert_eq!(poisson_tail(0.0, 1), 0.0);
        assert_eq!(poisson_tail(3.0, 0), 1.0);
        // P(X >= 1) = 1 - e^-m; P(X >= 2 | 1) = 1 - 2/e
        assert!((poisson_tail(0.5, 1) - (1.0 - (-0.5f64).exp())).abs() < 1e-12);
        assert!((poisson_tail(1.0, 2) - (1.0 - 2.0 / std::f64::consts::E)).abs() < 1e-12);
    }

    #[test]
    fn startup_doubles_then_leaves_when_the_queue_grows() {
        let mut rc = RateControl::new(MSS, 10, ms(50));
        rc.on_rtt(ms(50));
        let r0 = rc.pacing_rate();
        // 10 packets per 50 ms x 2.885
        assert!((r0 - 2.885 * 10.0 * 1400.0 / 0.05).abs() < 1.0, "{r0}");
        let mut pn = 0;
        let mut goodput = 10.0 * 1400.0 / 0.05;
        for _ in 0..3 {
            round(&mut rc, &mut pn, 40, 0, goodput, ms(50));
            goodput = rc.pacing_rate();
        }
        assert_eq!(rc.mode(), Mode::Startup);
        assert!(rc.pacing_rate() > 8.0 * r0, "{}", rc.pacing_rate());
        round(&mut rc, &mut pn, 40, 0, goodput, ms(80));
        assert_eq!(rc.mode(), Mode::Drain);
    }
}
