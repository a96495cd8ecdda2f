//! A QUIC congestion controller that records what quinn does not expose: quinn 0.11 reports a
//! connection's congestion window and RTT, but not the bytes acknowledged, the bytes in flight
//! or the RTT samples themselves. [`RecordingFactory`] wraps any of quinn's controllers; the
//! wrapper delegates every call unchanged (the connection behaves exactly as with the bare
//! controller, and reading the controller back by type still finds the inner one) and counts
//! into a [`Recorder`] that a sampler reads while the connection runs.
//!
//! What is counted, from the controller's callbacks:
//! - acknowledged bytes: the size of every acknowledged ack-eliciting packet (UDP payload,
//!   QUIC headers and padding included), handshake packets too;
//! - bytes in flight, as quinn reported them after the last batch of acknowledgements;
//! - RTT samples: one per batch of acknowledgements, `now` minus the send time of the newest
//!   packet the batch acknowledges (quinn's raw sample, before ack-delay correction); a sample
//!   below the path's minimum RTT is impossible and counted as such, unless the host explains
//!   it: quinn reads its clock once and then a batch of datagrams, so on a busy host an
//!   acknowledgement read late is stamped with a time before it arrived. A low sample that the
//!   clock read when the batch is recorded brings back to the path's minimum is counted as a
//!   busy-host sample instead (a fault of the timing, not of the stack);
//! - congestion events, lost bytes, the current and peak congestion window;
//! - the packet bytes sent before the first packet later declared lost (from a trail of sent
//!   totals kept, one point per millisecond, until the first loss).
//!
//! Optionally each batch of acknowledgements and each congestion event is also reported to a
//! [`CcObserver`] (the qlog writer).

use std::any::Any;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use quinn::congestion::{Controller, ControllerFactory, ControllerMetrics};
use quinn_proto::RttEstimator;

/// What a [`Recorder`] has counted so far.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CcSnapshot {
    /// Bytes of acknowledged ack-eliciting packets, cumulative.
    pub acked_bytes: u64,
    /// Bytes in flight after the last batch of acknowledgements.
    pub in_flight: u64,
    pub cwnd: u64,
    pub peak_cwnd: u64,
    /// The controller's slow-start threshold, if it has one.
    pub ssthresh: Option<u64>,
    pub congestion_events: u64,
    pub lost_bytes: u64,
    pub rtt_samples: u64,
    /// RTT samples below the path's minimum RTT (only counted when a floor is set).
    pub impossible_rtt_samples: u64,
    /// RTT samples below the floor that the stamping delay explains (see the module's
    /// contract): the host was busy, the stack is not at fault.
    pub busy_rtt_samples: u64,
    pub min_rtt_sample: Option<Duration>,
    pub latest_rtt_sample: Option<Duration>,
    /// Packet bytes sent before the first packet declared lost.
    pub first_loss_offset: Option<u64>,
}

/// Hears about congestion-control events as they happen (e.g. to log them).
pub trait CcObserver: Send + Sync {
    /// After a batch of acknowledgements, the newest of them sent at `newest_sent`.
    fn on_acks(&self, now: Instant, newest_sent: Option<Instant>, snap: &CcSnapshot, rtt: RttFacts);
    /// At a congestion event (loss or ECN), with the window after the controller's reaction.
    fn on_congestion(&self, now: Instant, lost_bytes: u64, persistent: bool, snap: &CcSnapshot);
}

/// quinn's RTT estimate at the time of an event.
#[derive(Clone, Copy, Debug)]
pub struct RttFacts {
    pub smoothed: Duration,
    pub min: Duration,
    /// This batch's own sample, if it had one.
    pub latest: Option<Duration>,
}

/// The longest trail of sent totals kept while waiting for a first loss (one point per
/// millisecond: about 17 minutes).
const TRAIL_MAX: usize = 1_000_000;
const TRAIL_STEP: Duration = Duration::from_millis(1);

#[derive(Default)]
struct State {
    snap: CcSnapshot,
    /// The newest send time among the current batch's acknowledged packets.
    batch_newest_sent: Option<Instant>,
    /// quinn's (smoothed, minimum) RTT as the batch's acknowledgements saw it.
    batch_rtt: (Duration, Duration),
    /// (time, packet bytes sent so far), while no packet has been lost.
    trail: Vec<(Instant, u64)>,
}

/// The counts of one connection, shared between its controller and whoever samples it.
pub struct Recorder {
    state: Mutex<State>,
    floor: Option<Duration>,
    observer: Option<Arc<dyn CcObserver>>,
}

impl Recorder {
    /// A recorder counting RTT samples below `path_min_rtt` as impossible.
    pub fn new(path_min_rtt: Option<Duration>) -> Arc<Recorder> {
        Self::with_observer(path_min_rtt, None)
    }

    pub fn with_observer(
        path_min_rtt: Option<Duration>,
        observer: Option<Arc<dyn CcObserver>>,
    ) -> Arc<Recorder> {
        Arc::new(Recorder {
            state: Mutex::new(State::default()),
            floor: path_min_rtt,
            observer,
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // Counters are consistent after every statement: a panicked holder leaves them usable.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The counts now.
    pub fn snapshot(&self) -> CcSnapshot {
        self.lock().snap.clone()
    }

    /// The path's minimum RTT this recorder was given.
    pub fn path_min_rtt(&self) -> Option<Duration> {
        self.floor
    }
}

impl Recorder {
    fn window(&self, st: &mut State, m: ControllerMetrics) {
        st.snap.cwnd = m.congestion_window;
        st.snap.peak_cwnd = st.snap.peak_cwnd.max(m.congestion_window);
        st.snap.ssthresh = m.ssthresh;
    }

    /// One acknowledged ack-eliciting packet, sent at `sent`.
    fn acked(&self, sent: Instant, bytes: u64, rtt: (Duration, Duration)) {
        let mut st = self.lock();
        st.snap.acked_bytes += bytes;
        st.batch_newest_sent = Some(st.batch_newest_sent.map_or(sent, |s| s.max(sent)));
        st.batch_rtt = rtt;
    }

    /// The end of a batch of acknowledgements received at `now`.
    fn end_acks(&self, now: Instant, in_flight: u64, m: ControllerMetrics) {
        let mut st = self.lock();
        st.snap.in_flight = in_flight;
        self.window(&mut st, m);
        let newest_sent = st.batch_newest_sent.take();
        let sample = newest_sent.map(|sent| now.saturating_duration_since(sent));
        // the latest the batch can have arrived: when it is recorded (after `now`)
        let latest = Instant::now().max(now);
        if let (Some(s), Some(sent)) = (sample, newest_sent) {
            let snap = &mut st.snap;
            snap.rtt_samples += 1;
            snap.latest_rtt_sample = Some(s);
            snap.min_rtt_sample = Some(snap.min_rtt_sample.map_or(s, |m| m.min(s)));
            if let Some(f) = self.floor.filter(|&f| s < f) {
                if latest.saturating_duration_since(sent) >= f {
                    snap.busy_rtt_samples += 1;
                } else {
                    snap.impossible_rtt_samples += 1;
                }
            }
        }
        if st.snap.first_loss_offset.is_none() && st.trail.len() < TRAIL_MAX {
            let total = st.snap.acked_bytes + st.snap.in_flight + st.snap.lost_bytes;
            if st.trail.last().is_none_or(|&(t, _)| now >= t + TRAIL_STEP) {
                st.trail.push((now, total));
            }
        }
        if let Some(o) = &self.observer {
            let (smoothed, min) = st.batch_rtt;
            o.on_acks(
                now,
                newest_sent,
                &st.snap,
                RttFacts {
                    smoothed,
                    min,
                    latest: sample,
                },
            );
        }
    }

    /// A congestion event at `now` for packets up to one sent at `sent`.
    fn congestion(
        &self,
        now: Instant,
        sent: Instant,
        persistent: bool,
        lost: u64,
        m: ControllerMetrics,
    ) {
        let mut st = self.lock();
        st.snap.congestion_events += 1;
        st.snap.lost_bytes += lost;
        st.snap.in_flight = st.snap.in_flight.saturating_sub(lost);
        self.window(&mut st, m);
        if lost > 0 && st.snap.first_loss_offset.is_none() {
            // The newest sent total known before the lost packet went out.
            let i = st.trail.partition_point(|&(t, _)| t <= sent);
            st.snap.first_loss_offset = Some(if i == 0 { 0 } else { st.trail[i - 1].1 });
            st.trail = Vec::new();
        }
        if let Some(o) = &self.observer {
            o.on_congestion(now, lost, persistent, &st.snap);
        }
    }
}

/// Wraps a controller factory so that every controller it builds records into `recorder`.
pub struct RecordingFactory {
    inner: Arc<dyn ControllerFactory + Send + Sync>,
    recorder: Arc<Recorder>,
}

impl RecordingFactory {
    pub fn new(
        inner: Arc<dyn ControllerFactory + Send + Sync>,
        recorder: Arc<Recorder>,
    ) -> Arc<RecordingFactory> {
        Arc::new(RecordingFactory { inner, recorder })
    }
}

impl ControllerFactory for RecordingFactory {
    fn build(self: Arc<Self>, now: Instant, current_mtu: u16) -> Box<dyn Controller> {
        let inner = self.inner.clone().build(now, current_mtu);
        self.recorder
            .window(&mut self.recorder.lock(), inner.metrics());
        Box::new(Recording {
            inner,
            recorder: self.recorder.clone(),
        })
    }
}

struct Recording {
    inner: Box<dyn Controller>,
    recorder: Arc<Recorder>,
}

impl Controller for Recording {
    fn on_sent(&mut self, now: Instant, bytes: u64, last_packet_number: u64) {
        self.inner.on_sent(now, bytes, last_packet_number);
    }

    fn on_ack(
        &mut self,
        now: Instant,
        sent: Instant,
        bytes: u64,
        app_limited: bool,
        rtt: &RttEstimator,
    ) {
        self.inner.on_ack(now, sent, bytes, app_limited, rtt);
        self.recorder.acked(sent, bytes, (rtt.get(), rtt.min()));
    }

    fn on_end_acks(
        &mut self,
        now: Instant,
        in_flight: u64,
        app_limited: bool,
        largest_packet_num_acked: Option<u64>,
    ) {
        self.inner
            .on_end_acks(now, in_flight, app_limited, largest_packet_num_acked);
        self.recorder.end_acks(now, in_flight, self.inner.metrics());
    }

    fn on_congestion_event(
        &mut self,
        now: Instant,
        sent: Instant,
        is_persistent_congestion: bool,
        lost_bytes: u64,
    ) {
        self.inner
            .on_congestion_event(now, sent, is_persistent_congestion, lost_bytes);
        self.recorder.congestion(
            now,
            sent,
            is_persistent_congestion,
            lost_bytes,
            self.inner.metrics(),
        );
    }

    fn on_mtu_update(&mut self, new_mtu: u16) {
        self.inner.on_mtu_update(new_mtu);
        self.recorder
            .window(&mut self.recorder.lock(), self.inner.metrics());
    }

    fn window(&self) -> u64 {
        self.inner.window()
    }

    fn metrics(&self) -> ControllerMetrics {
        self.inner.metrics()
    }

    fn clone_box(&self) -> Box<dyn Controller> {
        Box::new(Recording {
            inner: self.inner.clone_box(),
            recorder: self.recorder.clone(),
        })
    }

    fn initial_window(&self) -> u64 {
        self.inner.initial_window()
    }

    fn into_any(self: Box<Self>) -> Box<dyn Any> {
        // The wrapper is transparent: whoever asks which controller runs finds the inner one.
        self.inner.into_any()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use quinn::congestion::NewRenoConfig;

    fn window(cwnd: u64) -> ControllerMetrics {
        let mut m = ControllerMetrics::default();
        m.congestion_window = cwnd;
        m
    }

    #[test]
    fn a_low_sample_the_stamping_delay_explains_is_the_hosts_not_the_stacks() {
        let rec = Recorder::new(Some(Duration::from_millis(50)));
        let real = Instant::now();
        // sent 60 ms ago on a 50 ms path; the driver stamped the acknowledgement 20 ms before
        // it recorded the batch: a 40 ms sample, but the batch may have arrived as late as now
        rec.acked(
            real - Duration::from_millis(60),
            1200,
            (Duration::ZERO, Duration::ZERO),
        );
        rec.end_acks(real - Duration::from_millis(20), 0, window(20_000));
        let s = rec.snapshot();
        assert_eq!((s.busy_rtt_samples, s.impossible_rtt_samples), (1, 0));
        // sent 30 ms ago: too soon even for now, whatever the stamping delay
        rec.acked(
            real - Duration::from_millis(30),
            1200,
            (Duration::ZERO, Duration::ZERO),
        );
        rec.end_acks(real - Duration::from_millis(5), 0, window(20_000));
        let s = rec.snapshot();
        assert_eq!((s.busy_rtt_samples, s.impossible_rtt_samples), (1, 1));
    }

    #[test]
    fn counts_acks_samples_losses_and_the_first_loss_offset() {
        let rec = Recorder::new(Some(Duration::from_millis(50)));
        let t0 = Instant::now();
        let ms = |n: u64| t0 + Duration::from_millis(n);
        let rtt = (Duration::from_millis(55), Duration::from_millis(52));
        // Ten packets sent at 0..9 ms, acknowledged in two batches at 60 and 61 ms.
        for i in 0..5 {
            rec.acked(ms(i), 1200, rtt);
        }
        rec.end_acks(ms(60), 6000, window(20_000));
        for i in 5..10 {
            rec.acked(ms(i), 1200, rtt);
        }
        rec.end_acks(ms(61), 0, window(30_000));
        let s = rec.snapshot();
        assert_eq!(s.acked_bytes, 12_000);
        assert_eq!(s.rtt_samples, 2);
        // The newest packet of each batch: 60 - 4 = 56 ms, 61 - 9 = 52 ms.
        assert_eq!(s.latest_rtt_sample, Some(Duration::from_millis(52)));
        assert_eq!(s.min_rtt_sample, Some(Duration::from_millis(52)));
        assert_eq!(s.impossible_rtt_samples, 0);
        assert_eq!((s.cwnd, s.peak_cwnd), (30_000, 30_000));

        // A packet sent at 9 ms acknowledged at 20 ms: an 11 ms sample on a 50 ms path.
        rec.acked(ms(9), 1200, rtt);
        rec.end_acks(ms(20), 0, window(30_000));
        assert_eq!(rec.snapshot().impossible_rtt_samples, 1);
        assert_eq!(rec.snapshot().busy_rtt_samples, 0);

        // The first loss: a packet sent at 60.5 ms, when the sent total known was 12,000.
        rec.end_acks(ms(70), 2400, window(30_000));
        rec.congestion(
            ms(80),
            t0 + Duration::from_micros(60_500),
            false,
            1200,
            window(15_000),
        );
        let s = rec.snapshot();
        assert_eq!(s.first_loss_offset, Some(12_000));
        assert_eq!(
            (s.congestion_events, s.lost_bytes, s.in_flight),
            (1, 1200, 1200)
        );
        assert_eq!((s.cwnd, s.peak_cwnd), (15_000, 30_000));
        // Later losses do not move it.
        rec.congestion(ms(90), ms(85), false, 1200, window(7_500));
        assert_eq!(rec.snapshot().first_loss_offset, Some(12_000));
    }

    #[test]
    fn the_wrapper_is_transparent_to_a_read_back_by_type() {
        let rec = Recorder::new(None);
        let factory = RecordingFactory::new(Arc::new(NewRenoConfig::default()), rec.clone());
        let cc = factory.build(Instant::now(), 1200);
        assert_eq!(rec.snapshot().cwnd, cc.window());
        assert!(cc.clone_box().into_any().is::<quinn::congestion::NewReno>());
    }
}
