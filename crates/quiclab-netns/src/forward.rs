//! Runs the two pipelines of a link on the real clock: one thread per direction reads its TUN
//! device, pushes packets into the pipeline, and writes departures to the other TUN device at
//! their scheduled time.
//!
//! Waiting uses epoll on the TUN fd plus an absolute CLOCK_MONOTONIC timerfd with 1 ns timer
//! slack: hrtimer precision without a 1 ms timer wheel, and no CPU burnt while idle.

use std::io::{self, Write};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::Duration;

use hdrhistogram::Histogram;
use quiclab_link::{Counters, Direction, Event, Pipeline};
use tun_rs::SyncDevice;

use crate::sys::{self, Clock, Epoll, EventFd, TimerFd};

const TOKEN_TUN: u64 = 0;
const TOKEN_TIMER: u64 = 1;
const TOKEN_STOP: u64 = 2;
/// Packets read per wake-up before departures are served again.
const READ_BATCH: usize = 64;
/// Largest IP packet a TUN device hands us.
const MAX_PACKET: usize = 65_536;

/// What one direction did.
#[derive(Debug)]
pub struct DirectionReport {
    pub dir: Direction,
    pub counters: Counters,
    /// Actual minus scheduled departure time, nanoseconds.
    pub lateness_ns: Histogram<u64>,
    /// Packets the kernel refused on write (counted, not retried).
    pub write_errors: u64,
    /// First I/O error that stopped the thread, if any.
    pub error: Option<String>,
    /// Packets the sending namespace's kernel dropped because the TUN device's queue was full
    /// before the emulator could read them (loss the link configuration did not ask for; seen
    /// only when the endpoints outrun the emulator).
    pub device_drops: u64,
}

impl DirectionReport {
    /// Lateness percentile in microseconds.
    pub fn lateness_us(&self, q: f64) -> f64 {
        self.lateness_ns.value_at_quantile(q) as f64 / 1000.0
    }
}

/// The forwarding threads of one link; stops them when dropped.
pub struct Forwarder {
    stop: Arc<EventFd>,
    threads: Vec<JoinHandle<DirectionReport>>,
    writer: Option<JoinHandle<io::Result<u64>>>,
    clock: Clock,
}

/// Sends events to the writer thread in chunks.
type EventSink = Option<mpsc::Sender<Vec<Event>>>;

impl Forwarder {
    /// Starts forwarding `client -> up -> server` and `server -> down -> client`. With `events`,
    /// every packet event is written there as a JSON line.
    pub fn start(
        client: SyncDevice,
        server: SyncDevice,
        up: Pipeline,
        down: Pipeline,
        events: Option<Box<dyn Write + Send>>,
    ) -> io::Result<Self> {
        client.set_nonblocking(true)?;
        server.set_nonblocking(true)?;
        let (client, server) = (Arc::new(client), Arc::new(server));
        let stop = Arc::new(EventFd::new()?);
        let clock = Clock::start();
        let (sink, writer) = match events {
            Some(w) => {
                let (tx, rx) = mpsc::channel::<Vec<Event>>();
                let h = std::thread::Builder::new()
                    .name("quiclab-events".into())
                    .spawn(move || write_events(w, rx))?;
                (Some(tx), Some(h))
            }
            None => (None, None),
        };
        let mut threads = Vec::new();
        for (dir, pipe, rx, tx) in [
            (Direction::Up, up, client.clone(), server.clone()),
            (Direction::Down, down, server, client),
        ] {
            let stop = stop.clone();
            let sink = sink.clone();
            threads.push(
                std::thread::Builder::new()
                    .name(format!("quiclab-{}", dir.as_str()))
                    .spawn(move || run(dir, pipe, &rx, &tx, clock, &stop, sink))?,
            );
        }
        Ok(Forwarder {
            stop,
            threads,
            writer,
            clock,
        })
    }

    /// Time since forwarding started (the epoch of event timestamps).
    pub fn elapsed(&self) -> Duration {
        self.clock.now()
    }

    /// Stops both directions and returns what they did, uplink first.
    pub fn finish(mut self) -> io::Result<Vec<DirectionReport>> {
        self.finish_inner()
    }

    fn finish_inner(&mut self) -> io::Result<Vec<DirectionReport>> {
        self.stop.signal();
        let reports: Vec<_> = self
            .threads
            .drain(..)
            .map(|h| {
                h.join()
                    .map_err(|_| io::Error::other("forwarding thread panicked"))
            })
            .collect::<io::Result<_>>()?;
        if let Some(w) = self.writer.take() {
            w.join()
                .map_err(|_| io::Error::other("event writer panicked"))??;
        }
        Ok(reports)
    }
}

impl Drop for Forwarder {
    fn drop(&mut self) {
        if !self.threads.is_empty() {
            let _ = self.finish_inner();
        }
    }
}

fn write_events(w: Box<dyn Write + Send>, rx: mpsc::Receiver<Vec<Event>>) -> io::Result<u64> {
    let mut w = io::BufWriter::with_capacity(1 << 20, w);
    let mut n = 0;
    for chunk in rx {
        for e in chunk {
            serde_json::to_writer(&mut w, &e)?;
            w.write_all(b"\n")?;
            n += 1;
        }
    }
    w.flush()?;
    Ok(n)
}

fn run(
    dir: Direction,
    mut pipe: Pipeline,
    rx: &SyncDevice,
    tx: &SyncDevice,
    clock: Clock,
    stop: &EventFd,
    sink: EventSink,
) -> DirectionReport {
    sys::tight_timer_slack();
    let mut lateness =
        Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3).expect("valid histogram bounds");
    let mut write_errors = 0;
    let error = forward_loop(
        &mut pipe,
        rx,
        tx,
        clock,
        stop,
        &sink,
        &mut lateness,
        &mut write_errors,
    )
    .err()
    .map(|e| format!("{} link: {e}", dir.as_str()));
    if let Some(s) = &sink {
        let _ = s.send(pipe.take_events());
    }
    DirectionReport {
        dir,
        counters: pipe.counters().clone(),
        lateness_ns: lateness,
        write_errors,
        error,
        device_drops: 0,
    }
}

#[allow(clippy::too_many_arguments)]
fn forward_loop(
    pipe: &mut Pipeline,
    rx: &SyncDevice,
    tx: &SyncDevice,
    clock: Clock,
    stop: &EventFd,
    sink: &EventSink,
    lateness: &mut Histogram<u64>,
    write_errors: &mut u64,
) -> io::Result<()> {
    let epoll = Epoll::new()?;
    let timer = TimerFd::new()?;
    epoll.add(rx.as_raw_fd(), TOKEN_TUN)?;
    epoll.add(timer.as_raw_fd(), TOKEN_TIMER)?;
    epoll.add(stop.as_raw_fd(), TOKEN_STOP)?;
    let mut buf = vec![0u8; MAX_PACKET];
    let mut armed: Option<u64> = None;
    let mut wake = WakeEstimate::new();
    loop {
        for _ in 0..READ_BATCH {
            match rx.recv(&mut buf) {
                Ok(n) => {
                    pipe.push(clock.now(), buf[..n].to_vec());
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
        let now = clock.now();
        while let Some(d) = pipe.poll_transmit(now) {
            let t = clock.now();
            lateness.saturating_record(t.saturating_sub(d.at).as_nanos().max(1) as u64);
            if tx.send(&d.data).is_err() {
                *write_errors += 1;
            }
        }
        if let Some(s) = sink {
            let ev = pipe.take_events();
            if !ev.is_empty() {
                let _ = s.send(ev);
            }
        }
        let Some(deadline) = pipe.poll_timeout() else {
            if armed.take().is_some() {
                timer.set_absolute(None)?;
            }
            if epoll.wait()? & (1 << TOKEN_STOP) != 0 {
                return Ok(());
            }
            continue;
        };
        let now = clock.now();
        if deadline <= now {
            continue;
        }
        if deadline - now <= wake.margin() {
            // close enough: wait on the CPU, still taking arrivals with exact timestamps
            while clock.now() < deadline {
                match rx.recv(&mut buf) {
                    Ok(n) => {
                        pipe.push(clock.now(), buf[..n].to_vec());
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => std::hint::spin_loop(),
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(e),
                }
            }
            continue;
        }
        let target = deadline - wake.margin();
        let want = Some(clock.absolute_ns(target));
        if want != armed {
            timer.set_absolute(want)?;
            armed = want;
        }
        let ready = epoll.wait()?;
        if ready & (1 << TOKEN_STOP) != 0 {
            return Ok(());
        }
        if ready & (1 << TOKEN_TIMER) != 0 {
            timer.clear();
            armed = None;
            wake.observe(clock.now().saturating_sub(target));
        }
    }
}

/// How late this machine wakes a sleeping thread at a timer expiry, learned from observation.
/// The forwarding thread sleeps until `deadline - margin` and spins the rest, so that departures
/// are on time even where waking takes tens of microseconds (virtual machines, deep C-states).
struct WakeEstimate {
    /// Decaying maximum of observed wake-up delays.
    late: Duration,
}

impl WakeEstimate {
    const MIN: Duration = Duration::from_micros(20);
    const MAX: Duration = Duration::from_micros(300);

    fn new() -> Self {
        WakeEstimate {
            late: Duration::from_micros(50),
        }
    }

    fn observe(&mut self, late: Duration) {
        // decays by 1/64 per wake-up, jumps to any larger observation
        self.late = late.max(self.late - self.late / 64);
    }

    fn margin(&self) -> Duration {
        (self.late + self.late / 4 + Duration::from_micros(5)).clamp(Self::MIN, Self::MAX)
    }
}
