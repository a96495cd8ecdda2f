//! Runs the two pipelines of a link on the real clock: a thread per direction reads its TUN
//! device, pushes packets into its pipeline, and writes departures to the other device at their
//! scheduled time. (A thread per direction, because a write into a TUN device runs the receiving
//! endpoint's network stack in the writer's context: one direction must not wait for the other's.)
//!
//! Offloads: a device made with them (`IFF_VNET_HDR`, TSO and USO) hands over a sender's
//! segmentation-offload super-packets (up to 64 KiB of TCP or UDP); each of the wire-size
//! segments the sender's kernel would have sent enters the pipeline on its own, so every decision
//! (MTU, loss by packet index, queue, serialisation, delay, capture, events) is per wire packet
//! as without offloads. The bytes are cut only when the segments part ways (see
//! `segments.rs`): all the segments of a super-packet leaving together, in order, are
//! written as read; other departures due together are coalesced again (GRO) and written as one
//! super-packet, so the receiving kernel's work is per super-packet too.
//!
//! Timing: the threads sleep in epoll with an absolute CLOCK_MONOTONIC timerfd (1 ns timer
//! slack) and wake early by a learned margin, spinning the last stretch before a departure.
//! They never spin while idle, and a duty budget keeps each under 80 % of a core in the long
//! run, with CPU left for the endpoints.
//!
//! Scheduling class (`ThreadClass`): the threads of a link that leaves them idle most of the
//! time (a rate under [`FAST_LINK_BPS`]) run at a real-time priority (SCHED_FIFO), so that the
//! endpoints sharing their CPU never delay a departure; those of a fast link (at or above it, or
//! unlimited with offloads), which spin before nearly every departure, at the highest ordinary
//! priority (nice -20). A real-time thread that keeps a CPU busy starves the ordinary threads on
//! it, and the kernel's fair server (Linux 6.12 and later) then runs them ahead of every
//! real-time thread for up to 50 ms. Measured on a 2-core virtual machine, one TCP flow through
//! 1 Gbit/s and 5 ms: in the real-time class departures were up to 50 ms late (p99 35 ms,
//! 900 Mbit/s of goodput), at nice -20 at most 3-6 ms (p99 0.1-0.5 ms, 945 Mbit/s). At campaign
//! rates the real-time class stays: while concurrent trials kept both cores busy, nice -20
//! threads were held up to 7 ms (an ordinary thread runs out its slice before a woken one takes
//! the CPU). A link with offloads that holds no packet at all (no rate, trace, delay, jitter or
//! reordering: every departure is due as it arrives, so none can be late) keeps the endpoints'
//! own class: its threads do much of the endpoints' work (a TUN write runs the receiver's
//! network stack), and at nice -20 they took the CPU from the sender. One TCP flow at MTU 9000
//! carried 25.1-26.0 Gbit/s so against 20.3-21.1 at nice -20 (nice -5: 22.9-25.6, with a 1 Gbit/s
//! link's p99 lateness at 110-152 us against 73-89 at nice -20).

use std::io::{self, Write};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use hdrhistogram::Histogram;
use quiclab_link::{Counters, Direction, Event, Pipeline};
use tun_rs::{GROTable, IDEAL_BATCH_SIZE, SyncDevice, VIRTIO_NET_HDR_LEN};

use crate::pcap::{PcapWriter, wall_clock};
use crate::segments::{self, Frame, GSO_NONE, Pools, Read};
use crate::sys::{self, Clock, Epoll, EventFd, TimerFd};

const TOKEN_TIMER: u64 = 0;
const TOKEN_STOP: u64 = 1;
const TOKEN_DEVICE: u64 = 2;
/// Packets read per turn before departures are served again.
const READ_BATCH: usize = 64;
/// Largest IP packet a TUN device hands us.
const MAX_PACKET: usize = 65_536;
/// Share of a core a forwarding thread may use in the long run: leaves CPU time to the
/// endpoints (and to the kernel's threads pinned to that core).
const DUTY: f64 = 0.8;
/// Longest continuous busy period the duty budget allows (then it yields in short sleeps).
const BURST: Duration = Duration::from_millis(10);
/// Length of one forced sleep.
const YIELD: Duration = Duration::from_micros(10);
/// SCHED_FIFO priority of the forwarding threads of a link slower than [`FAST_LINK_BPS`].
const REALTIME_PRIORITY: i32 = 10;
/// From this rate on, a link's forwarding threads run in the ordinary class (see the module's
/// notes): at 100 Mbit/s they already spin most of the time, at 500 Mbit/s without pause.
pub const FAST_LINK_BPS: u64 = 500_000_000;

/// How a link's forwarding threads are scheduled (see the module's notes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ThreadClass {
    /// SCHED_FIFO at [`REALTIME_PRIORITY`] (nice -20 where that is refused): a slow link.
    RealTime,
    /// The ordinary class at nice -20: a fast link with departures to keep on time.
    Urgent,
    /// The ordinary class at the endpoints' own nice value: a link that holds no packet.
    Shared,
}

/// What one direction did.
#[derive(Debug)]
pub struct DirectionReport {
    pub dir: Direction,
    pub counters: Counters,
    /// Actual minus scheduled departure time, nanoseconds.
    pub lateness_ns: Histogram<u64>,
    /// Writes the kernel refused (counted, not retried): a packet each without offloads, a batch
    /// of departures with them.
    pub write_errors: u64,
    /// First I/O error that stopped the thread, if any.
    pub error: Option<String>,
    /// Packets the sending namespace's kernel dropped because the TUN device's queue was full
    /// before the emulator could read them (loss the link configuration did not ask for; seen
    /// only when the endpoints outrun the emulator).
    pub device_drops: u64,
    /// Super-packets from the device that could not be split into segments (malformed offload
    /// metadata; dropped and counted).
    pub split_errors: u64,
    /// Reads that held a super-packet of several segments (0 without offloads).
    pub super_packets: u64,
    /// Super-packets written: departures of one flow coalesced, or a super-packet's segments
    /// leaving together and written as read (0 without offloads).
    pub super_packets_out: u64,
    /// Of those, the super-packets written as read (all their segments left together, in
    /// order, and no capture wanted their bytes).
    pub written_as_read: u64,
    /// CPU time (user and system) of the direction's forwarding thread, the receiving
    /// endpoint's network stack that its writes run included.
    pub cpu: Duration,
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
    writer: Option<JoinHandle<(io::Result<u64>, Duration)>>,
    capture: Option<JoinHandle<(io::Result<()>, Duration)>>,
    /// The capture's packets not yet handed to its writer (the last of them, once the
    /// threads have stopped).
    capture_held: Option<CaptureSink>,
    /// CPU time of the event and capture writer threads, once they have ended.
    writers_cpu: Duration,
    clock: Clock,
    /// The TUN devices, closed off the caller's path once the threads have stopped (see
    /// [`close_later`]).
    devices: Vec<Arc<SyncDevice>>,
    /// Per direction (uplink first), whether its thread last saw its pipeline empty (see
    /// [`Forwarder::drained`]).
    idle: Vec<Arc<AtomicBool>>,
    /// Dropped after the threads have stopped (fields drop after `Drop::drop`).
    _count: LinkCount,
}

/// Sends events to the writer thread in chunks.
type EventSink = Option<mpsc::Sender<Vec<Event>>>;

/// Captured packets (wall-clock time, bytes) as the pcap writer takes them.
type Captured = Vec<(Duration, Vec<u8>)>;

/// Packets taken for the capture by both directions' threads, stamped in the order they are
/// taken (the file's order) and handed to the pcap writer [`CAPTURE_BATCH`] at a time: a
/// wake-up of the writer per batch, not per packet.
struct Capture {
    tx: mpsc::Sender<Captured>,
    held: Mutex<Captured>,
}

/// Packets a capture holds before its writer is woken.
const CAPTURE_BATCH: usize = 256;
/// Events a direction holds before its writer is woken.
const EVENT_BATCH: usize = 512;

impl Capture {
    fn take(&self, packet: Vec<u8>) {
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        // stamped under the lock: the two directions' packets reach the file in time order
        held.push((wall_clock(), packet));
        if held.len() >= CAPTURE_BATCH {
            let _ = self.tx.send(std::mem::replace(
                &mut *held,
                Vec::with_capacity(CAPTURE_BATCH),
            ));
        }
    }

    /// Hands what it holds to the writer.
    fn flush(&self) {
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        if !held.is_empty() {
            let _ = self.tx.send(std::mem::take(&mut *held));
        }
    }
}

type CaptureSink = Arc<Capture>;

impl Forwarder {
    /// Starts forwarding `client -> up -> server` and `server -> down -> client`. With `events`,
    /// every packet event is written there as a JSON line. With `pcap`, a capture as the client
    /// sees it is written there: uplink packets as they leave the client (dropped ones too),
    /// downlink packets as they reach it (taken just before they are written, so that nothing
    /// the client sends in answer comes first in the file), stamped with the real-time clock.
    /// `class`: how the threads are scheduled.
    pub(crate) fn start(
        [client, server]: [SyncDevice; 2],
        [up, down]: [Pipeline<Frame>; 2],
        events: Option<Box<dyn Write + Send>>,
        pcap: Option<Box<dyn Write + Send>>,
        class: ThreadClass,
    ) -> io::Result<Self> {
        client.set_nonblocking(true)?;
        server.set_nonblocking(true)?;
        let stop = Arc::new(EventFd::new()?);
        let clock = Clock::start();
        let (sink, writer) = match events {
            Some(w) => {
                let (tx, rx) = mpsc::channel::<Vec<Event>>();
                let h = std::thread::Builder::new()
                    .name("quiclab-events".into())
                    .spawn(move || (write_events(w, rx), sys::thread_cpu()))?;
                (Some(tx), Some(h))
            }
            None => (None, None),
        };
        let (capture_tx, capture) = match pcap {
            Some(w) => {
                let (tx, rx) = mpsc::channel::<Captured>();
                let h = std::thread::Builder::new()
                    .name("quiclab-pcap".into())
                    .spawn(move || (write_pcap(w, rx), sys::thread_cpu()))?;
                let held = Mutex::new(Vec::with_capacity(CAPTURE_BATCH));
                (Some(Arc::new(Capture { tx, held })), Some(h))
            }
            None => (None, None),
        };
        let count = LinkCount::new();
        let (client, server) = (Arc::new(client), Arc::new(server));
        let devices = vec![client.clone(), server.clone()];
        let mut up = Way::new(Direction::Up, up, client.clone(), server.clone());
        let mut down = Way::new(Direction::Down, down, server, client);
        let idle = vec![up.idle.clone(), down.idle.clone()];
        // The client's view: what it sends as it is read, what it receives as it is written.
        up.capture_read = capture_tx.clone();
        down.capture_write = capture_tx.clone();
        // A thread per direction: a departure never waits for the other direction's write, which
        // runs the receiving endpoint's network stack in the writer's context.
        let mut threads = Vec::new();
        for way in [up, down] {
            let stop = stop.clone();
            let sink = sink.clone();
            threads.push(
                std::thread::Builder::new()
                    .name(format!("quiclab-{}", way.dir.as_str()))
                    .spawn(move || run(way, clock, &stop, sink, class))?,
            );
        }
        Ok(Forwarder {
            stop,
            threads,
            writer,
            capture,
            capture_held: capture_tx,
            writers_cpu: Duration::ZERO,
            clock,
            devices,
            idle,
            _count: count,
        })
    }

    /// A bare copy between the devices, for benchmarks: each direction's thread writes what it
    /// reads at once, as read (offload headers and super-packets included), with no pipeline,
    /// timing or capture; the floor of the emulator's device I/O. Its reports count packets
    /// (reads) and bytes.
    pub fn start_copy([client, server]: [SyncDevice; 2]) -> io::Result<Self> {
        client.set_nonblocking(true)?;
        server.set_nonblocking(true)?;
        let stop = Arc::new(EventFd::new()?);
        let (client, server) = (Arc::new(client), Arc::new(server));
        let devices = vec![client.clone(), server.clone()];
        let mut threads = Vec::new();
        for (dir, rx, tx) in [
            (Direction::Up, client.clone(), server.clone()),
            (Direction::Down, server, client),
        ] {
            let stop = stop.clone();
            threads.push(
                std::thread::Builder::new()
                    .name(format!("quiclab-copy-{}", dir.as_str()))
                    .spawn(move || copy(dir, &rx, &tx, &stop))?,
            );
        }
        Ok(Forwarder {
            stop,
            threads,
            writer: None,
            capture: None,
            capture_held: None,
            writers_cpu: Duration::ZERO,
            clock: Clock::start(),
            devices,
            idle: Vec::new(),
            _count: LinkCount::new(),
        })
    }

    /// Time since forwarding started (the epoch of event timestamps).
    pub fn elapsed(&self) -> Duration {
        self.clock.now()
    }

    /// The epoch of event timestamps as an absolute CLOCK_MONOTONIC time, nanoseconds: an
    /// event's `t_ns` plus this is when it happened on the clock the endpoints' records use.
    pub fn epoch_ns(&self) -> u64 {
        self.clock.absolute_ns(Duration::ZERO)
    }

    /// Whether direction `dir` holds no packet: none waits in its sending device, none is in
    /// its pipeline (every packet it took has been delivered or dropped). A packet is never
    /// missed between the two: the thread marks its direction busy when it wakes, before it
    /// reads, and idle only once its pipeline is empty.
    pub fn drained(&self, dir: Direction) -> bool {
        let i = match dir {
            Direction::Up => 0,
            Direction::Down => 1,
        };
        let Some(device) = self.devices.get(i) else {
            return true;
        };
        let mut fd = libc::pollfd {
            fd: device.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one pollfd we own, no wait.
        let waiting = unsafe { libc::poll(&mut fd, 1, 0) } > 0 && fd.revents & libc::POLLIN != 0;
        !waiting && self.idle.get(i).is_none_or(|f| f.load(Ordering::SeqCst))
    }

    /// Stops both directions and returns what they did, uplink first, with the CPU time of
    /// the writer threads of its events and capture.
    pub fn finish(mut self) -> io::Result<(Vec<DirectionReport>, Duration)> {
        let reports = self.finish_inner()?;
        Ok((reports, self.writers_cpu))
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
        close_later(std::mem::take(&mut self.devices));
        if let Some(w) = self.writer.take() {
            let (written, cpu) = w
                .join()
                .map_err(|_| io::Error::other("event writer panicked"))?;
            self.writers_cpu += cpu;
            written?;
        }
        // The ways (and their shares of the capture) are gone with their threads: the last
        // packets go to the writer, which ends as the capture goes.
        if let Some(c) = self.capture_held.take() {
            c.flush();
        }
        if let Some(w) = self.capture.take() {
            let (written, cpu) = w
                .join()
                .map_err(|_| io::Error::other("pcap writer panicked"))?;
            self.writers_cpu += cpu;
            written?;
        }
        Ok(reports)
    }
}

/// Closes TUN devices on a thread of their own. Closing one unregisters its network device,
/// which waits for the kernel's RCU grace periods: 30 to 60 ms a device pair here, all of it
/// waiting, none of it work. The devices carry nothing once their threads have stopped, so the
/// caller goes on (a trial's teardown, the next trial) while they close; should the thread not
/// start, they close here.
fn close_later(devices: Vec<Arc<SyncDevice>>) {
    if devices.is_empty() {
        return;
    }
    let _ = std::thread::Builder::new()
        .name("quiclab-close".into())
        .spawn(move || drop(devices));
}

impl Drop for Forwarder {
    fn drop(&mut self) {
        if !self.threads.is_empty() {
            let _ = self.finish_inner();
        }
    }
}

fn copy(dir: Direction, rx: &SyncDevice, tx: &SyncDevice, stop: &EventFd) -> DirectionReport {
    let mut counters = Counters::default();
    let mut write_errors = 0;
    let result = (|| -> io::Result<()> {
        let epoll = Epoll::new()?;
        epoll.add(rx.as_raw_fd(), TOKEN_DEVICE)?;
        epoll.add(stop.as_raw_fd(), TOKEN_STOP)?;
        let mut buf = vec![0u8; VIRTIO_NET_HDR_LEN + MAX_PACKET];
        loop {
            match rx.recv(&mut buf) {
                Ok(n) => {
                    counters.packets_in += 1;
                    counters.bytes_in += n as u64;
                    match tx.send(&buf[..n]) {
                        Ok(_) => {
                            counters.packets_out += 1;
                            counters.bytes_out += n as u64;
                        }
                        Err(_) => write_errors += 1,
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    if epoll.wait()? & (1 << TOKEN_STOP) != 0 {
                        return Ok(());
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    })();
    DirectionReport {
        dir,
        counters,
        lateness_ns: Histogram::new(3).expect("valid histogram"),
        write_errors,
        error: result
            .err()
            .map(|e| format!("copy ({}): {e}", dir.as_str())),
        device_drops: 0,
        split_errors: 0,
        super_packets: 0,
        super_packets_out: 0,
        written_as_read: 0,
        cpu: sys::thread_cpu(),
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

fn write_pcap(w: Box<dyn Write + Send>, rx: mpsc::Receiver<Captured>) -> io::Result<()> {
    let mut p = PcapWriter::new(io::BufWriter::with_capacity(1 << 20, w))?;
    for (at, packet) in rx.into_iter().flatten() {
        p.packet(at, &packet)?;
    }
    p.into_inner()?;
    Ok(())
}

/// The next departure due by `now`, its lateness (the clock now, against when it was due)
/// recorded.
fn depart(
    pipe: &mut Pipeline<Frame>,
    lateness: &mut Histogram<u64>,
    now: Duration,
    clock: Clock,
) -> Option<Frame> {
    let d = pipe.poll_transmit(now)?;
    lateness.saturating_record(clock.now().saturating_sub(d.at).as_nanos().max(1) as u64);
    Some(d.data)
}

/// One direction as a forwarding thread sees it.
struct Way {
    dir: Direction,
    pipe: Pipeline<Frame>,
    rx: Arc<SyncDevice>,
    tx: Arc<SyncDevice>,
    lateness: Histogram<u64>,
    write_errors: u64,
    split_errors: u64,
    super_packets: u64,
    super_packets_out: u64,
    written_as_read: u64,
    /// Where packets read from `rx`, or written to `tx`, are captured.
    capture_read: Option<CaptureSink>,
    capture_write: Option<CaptureSink>,
    /// The devices carry offload headers (see the module's notes), and the buffers for them.
    offload: Option<Offload>,
    /// False from each wake-up until the pipeline is found empty before the next wait.
    idle: Arc<AtomicBool>,
}

/// Buffers of a direction whose devices carry offload headers.
struct Offload {
    /// A read: offload header, then a packet or a super-packet.
    read: Vec<u8>,
    /// Departures due now, in order.
    due: Vec<Frame>,
    /// Departures of one write, each after room for the header (reused: [`Offload::used`] of
    /// them are this write's).
    batch: Vec<Vec<u8>>,
    used: usize,
    pools: Pools,
    gro: GROTable,
}

impl Offload {
    fn new() -> Self {
        Offload {
            read: vec![0; VIRTIO_NET_HDR_LEN + MAX_PACKET],
            due: Vec::with_capacity(2 * IDEAL_BATCH_SIZE),
            batch: Vec::with_capacity(IDEAL_BATCH_SIZE),
            used: 0,
            pools: Pools::default(),
            gro: GROTable::default(),
        }
    }
}

/// Departures collected for one round of writes; more while the last one is a super-packet's
/// segment whose next segments may be due too (up to this many more).
const DUE_BATCH: usize = IDEAL_BATCH_SIZE;
const DUE_STRETCH: usize = 64;

impl Way {
    fn new(
        dir: Direction,
        pipe: Pipeline<Frame>,
        rx: Arc<SyncDevice>,
        tx: Arc<SyncDevice>,
    ) -> Self {
        // both devices of a link are made alike; a device reports offloads when it has them
        let offload = (rx.tcp_gso() && tx.tcp_gso()).then(Offload::new);
        Way {
            dir,
            pipe,
            rx,
            tx,
            lateness: Histogram::new_with_bounds(1, 60_000_000_000, 3)
                .expect("valid histogram bounds"),
            write_errors: 0,
            split_errors: 0,
            super_packets: 0,
            super_packets_out: 0,
            written_as_read: 0,
            capture_read: None,
            capture_write: None,
            offload,
            idle: Arc::new(AtomicBool::new(true)),
        }
    }

    /// Reads up to a batch of packets into the pipeline; true if any arrived.
    fn read(&mut self, clock: Clock, buf: &mut [u8]) -> io::Result<bool> {
        if self.offload.is_some() {
            return self.read_offload(clock);
        }
        for i in 0..READ_BATCH {
            match self.rx.recv(buf) {
                Ok(n) => {
                    if let Some(c) = &self.capture_read {
                        c.take(buf[..n].to_vec());
                    }
                    self.pipe.push(clock.now(), Frame::Bytes(buf[..n].to_vec()));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(i > 0),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(true)
    }

    /// [`Way::read`] from a device with offloads: each read is a packet or a super-packet,
    /// whose wire-size segments arrive together.
    fn read_offload(&mut self, clock: Clock) -> io::Result<bool> {
        let o = self.offload.as_mut().expect("called with offloads");
        for i in 0..READ_BATCH {
            let n = match self.rx.recv(&mut o.read) {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(i > 0),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            let now = clock.now();
            match segments::take(&mut o.read, n, &mut o.pools) {
                Ok(Read::Packet(p)) => {
                    if let Some(c) = &self.capture_read {
                        c.take(p.clone());
                    }
                    self.pipe.push(now, Frame::Bytes(p));
                }
                Ok(Read::Super(sp)) => {
                    self.super_packets += 1;
                    let sp = Arc::new(sp);
                    if let Some(c) = &self.capture_read {
                        match sp.segment_copies(&mut o.pools) {
                            Ok(copies) => copies.into_iter().for_each(|p| {
                                c.take(p);
                            }),
                            Err(_) => {
                                self.split_errors += 1;
                                continue;
                            }
                        }
                    }
                    for seq in 0..sp.count() {
                        self.pipe.push(now, Frame::Segment(sp.clone(), seq));
                    }
                }
                // not the device's error but the packet's: that super-packet is lost
                Err(_) => self.split_errors += 1,
            }
        }
        Ok(true)
    }

    /// Writes every departure due by now.
    fn transmit(&mut self, clock: Clock) {
        if self.offload.is_some() {
            return self.transmit_offload(clock);
        }
        let now = clock.now();
        while let Some(frame) = depart(&mut self.pipe, &mut self.lateness, now, clock) {
            let Frame::Bytes(data) = frame else {
                unreachable!("super-packets come only from devices with offloads")
            };
            // taken before it is written: the client's answer to it, read by the other
            // direction's thread, must not reach the capture first
            if let Some(c) = &self.capture_write {
                c.take(data.clone());
            }
            if self.tx.send(&data).is_err() {
                self.write_errors += 1;
            }
        }
    }

    /// [`Way::transmit`] to a device with offloads: a super-packet whose segments all leave
    /// together is written as read; the other departures due are written in batches, those of
    /// one flow coalesced into super-packets.
    fn transmit_offload(&mut self, clock: Clock) {
        let now = clock.now();
        loop {
            let o = self.offload.as_mut().expect("called with offloads");
            o.due.clear();
            while o.due.len() < DUE_BATCH + DUE_STRETCH {
                // past the batch, only the rest of a super-packet whose segments are leaving
                let unfinished = matches!(o.due.last(),
                    Some(Frame::Segment(sp, seq)) if seq + 1 < sp.count());
                if o.due.len() >= DUE_BATCH && !unfinished {
                    break;
                }
                let Some(frame) = depart(&mut self.pipe, &mut self.lateness, now, clock) else {
                    break;
                };
                o.due.push(frame);
            }
            let more = o.due.len() >= DUE_BATCH;
            let mut due = std::mem::take(&mut o.due);
            let mut i = 0;
            while i < due.len() {
                if let Some(n) = self.whole_at(&due[i..]) {
                    self.flush();
                    let Frame::Segment(sp, _) = &due[i] else {
                        unreachable!("a whole super-packet starts with its first segment")
                    };
                    if sp.with_raw(|raw| self.tx.send(raw)).is_err() {
                        self.write_errors += 1;
                    }
                    self.super_packets_out += 1;
                    self.written_as_read += 1;
                    let o = self.offload.as_mut().expect("called with offloads");
                    for f in due.drain(i..i + n) {
                        if let Frame::Segment(sp, _) = f {
                            o.pools.reclaim(sp);
                        }
                    }
                    continue;
                }
                let frame = std::mem::replace(&mut due[i], Frame::Bytes(Vec::new()));
                i += 1;
                let o = self.offload.as_mut().expect("called with offloads");
                let data = match frame {
                    Frame::Bytes(b) => b,
                    Frame::Segment(sp, seq) => {
                        let cut = sp.take_segment(seq, &mut o.pools);
                        o.pools.reclaim(sp);
                        match cut {
                            Ok(b) => b,
                            Err(_) => {
                                self.split_errors += 1;
                                continue;
                            }
                        }
                    }
                };
                if o.used == o.batch.len() {
                    // room to coalesce a flow's segments into one super-packet in place (GRO
                    // does not grow a buffer: it leaves the segments apart instead)
                    o.batch
                        .push(Vec::with_capacity(2 * VIRTIO_NET_HDR_LEN + MAX_PACKET));
                }
                let b = &mut o.batch[o.used];
                b.clear();
                b.resize(VIRTIO_NET_HDR_LEN, 0);
                b.extend_from_slice(&data);
                o.used += 1;
                match &self.capture_write {
                    Some(c) => c.take(data),
                    None => o.pools.give_segment(data),
                }
                if o.used == IDEAL_BATCH_SIZE {
                    self.flush();
                }
            }
            self.flush();
            due.clear();
            self.offload.as_mut().expect("called with offloads").due = due;
            if !more {
                return;
            }
        }
    }

    /// When `due` starts with every segment of a super-packet, in order, and no capture wants
    /// their bytes: how many.
    fn whole_at(&self, due: &[Frame]) -> Option<usize> {
        if self.capture_write.is_some() {
            return None;
        }
        let Some(Frame::Segment(first, 0)) = due.first() else {
            return None;
        };
        let n = usize::from(first.count());
        let run = due.get(..n)?;
        run.iter()
            .enumerate()
            .all(|(k, f)| {
                matches!(f, Frame::Segment(sp, seq)
                    if usize::from(*seq) == k && Arc::ptr_eq(sp, first))
            })
            .then_some(n)
    }

    /// Writes the batch of departures collected so far.
    fn flush(&mut self) {
        let o = self.offload.as_mut().expect("called with offloads");
        let written = match o.used {
            0 => return,
            // a packet alone goes as it is (its header says: no offload); the coalescing
            // path would mark even a single datagram a super-packet, for the receiving
            // kernel to take apart
            1 => self.tx.send(&o.batch[0]),
            n => self
                .tx
                .send_multiple(&mut o.gro, &mut o.batch[..n], VIRTIO_NET_HDR_LEN),
        };
        if written.is_err() {
            self.write_errors += 1;
        }
        // a coalesced buffer carries a segmentation type in its header
        self.super_packets_out += o.batch[..o.used]
            .iter()
            .filter(|b| b.len() > 1 && b[1] != GSO_NONE)
            .count() as u64;
        o.used = 0;
    }

    fn report(self, error: Option<String>, cpu: Duration) -> DirectionReport {
        DirectionReport {
            dir: self.dir,
            counters: self.pipe.counters().clone(),
            lateness_ns: self.lateness,
            write_errors: self.write_errors,
            error,
            device_drops: 0,
            split_errors: self.split_errors,
            super_packets: self.super_packets,
            super_packets_out: self.super_packets_out,
            written_as_read: self.written_as_read,
            cpu,
        }
    }
}

/// Forwards one direction until `stop`, its thread scheduled as `class` says.
fn run(
    mut way: Way,
    clock: Clock,
    stop: &EventFd,
    sink: EventSink,
    class: ThreadClass,
) -> DirectionReport {
    sys::tight_timer_slack();
    match class {
        ThreadClass::RealTime if sys::realtime_priority(REALTIME_PRIORITY) => {}
        ThreadClass::RealTime | ThreadClass::Urgent => {
            sys::highest_ordinary_priority();
        }
        ThreadClass::Shared => {}
    }
    let error = forward_loop(&mut way, clock, stop, &sink)
        .err()
        .map(|e| format!("link emulator ({}): {e}", way.dir.as_str()));
    if let Some(s) = &sink {
        let _ = s.send(way.pipe.take_events());
    }
    way.report(error, sys::thread_cpu())
}

fn forward_loop(way: &mut Way, clock: Clock, stop: &EventFd, sink: &EventSink) -> io::Result<()> {
    let epoll = Epoll::new()?;
    let timer = TimerFd::new()?;
    epoll.add(way.rx.as_raw_fd(), TOKEN_DEVICE)?;
    epoll.add(timer.as_raw_fd(), TOKEN_TIMER)?;
    epoll.add(stop.as_raw_fd(), TOKEN_STOP)?;
    let mut buf = vec![0u8; MAX_PACKET];
    let mut armed: Option<u64> = None;
    let mut wake = WakeEstimate::new();
    let mut budget = DutyBudget::new(clock.now());
    loop {
        way.idle.store(false, Ordering::SeqCst);
        way.read(clock, &mut buf)?;
        way.transmit(clock);
        if let Some(s) = sink
            && way.pipe.events_held() >= EVENT_BATCH
        {
            let _ = s.send(way.pipe.take_events());
        }
        let deadline = way.pipe.poll_timeout();
        let now = clock.now();
        if budget.spent(now) {
            // Busy for too long (spinning, or work always due): give the CPU away briefly.
            sys::sleep_until(clock.absolute_ns(now + YIELD));
            budget.slept(now, clock.now());
            continue;
        }
        let mut target = deadline.map(|t| t - wake.margin());
        if let Some(t) = deadline {
            if t <= now {
                continue;
            }
            if t - now <= wake.margin() {
                match SpinPermit::take() {
                    Some(_permit) => {
                        // closer than a wake-up takes: wait on the CPU, stamping arrivals exactly
                        while clock.now() < t && !budget.spent(clock.now()) {
                            if !way.read(clock, &mut buf)? {
                                std::hint::spin_loop();
                            }
                        }
                        continue;
                    }
                    // other links are spinning on every core that may spin: sleep to the
                    // departure itself and accept a wake-up's lateness
                    None => target = Some(t),
                }
            }
        }
        let want = target.map(|t| clock.absolute_ns(t));
        if want != armed {
            timer.set_absolute(want)?;
            armed = want;
        }
        way.idle.store(deadline.is_none(), Ordering::SeqCst);
        let before = clock.now();
        let ready = epoll.wait()?;
        let after = clock.now();
        if ready & (1 << TOKEN_STOP) != 0 {
            return Ok(());
        }
        budget.slept(before, after);
        if ready & (1 << TOKEN_TIMER) != 0 {
            timer.clear();
            armed = None;
            if let Some(t) = target {
                wake.observe(after.saturating_sub(t));
            }
        }
    }
}

/// Spinning before a departure is worth it only while a core is free for it. Several links in
/// one process (concurrent trials) would otherwise spin on every core at once, at real-time
/// priority, and starve the endpoints they measure; so while several links run, at most half
/// the cores (at least one) spin at a time, and a forwarding thread without a permit sleeps
/// instead. A link alone in its process (`quiclab link`, benchmarks) spins freely.
struct SpinPermit;

static SPINNING: AtomicUsize = AtomicUsize::new(0);
/// Links forwarding in this process.
static LINKS: AtomicUsize = AtomicUsize::new(0);

/// Counts a link in [`LINKS`] for as long as it lives.
struct LinkCount;

impl LinkCount {
    fn new() -> Self {
        LINKS.fetch_add(1, Ordering::AcqRel);
        LinkCount
    }
}

impl Drop for LinkCount {
    fn drop(&mut self) {
        LINKS.fetch_sub(1, Ordering::AcqRel);
    }
}

impl SpinPermit {
    fn take() -> Option<SpinPermit> {
        static LIMIT: OnceLock<usize> = OnceLock::new();
        let limit = *LIMIT.get_or_init(|| {
            std::thread::available_parallelism().map_or(1, |n| (n.get() / 2).max(1))
        });
        let limit = if LINKS.load(Ordering::Acquire) <= 1 {
            usize::MAX
        } else {
            limit
        };
        SPINNING
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < limit).then_some(n + 1)
            })
            .ok()
            .map(|_| SpinPermit)
    }
}

impl Drop for SpinPermit {
    fn drop(&mut self) {
        SPINNING.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Limits a thread's long-run CPU share to [`DUTY`]: credit grows by `DUTY` per nanosecond
/// slept and shrinks by `1 - DUTY` per nanosecond busy, capped so that at most [`BURST`] of
/// continuous work is allowed; at zero the thread must sleep.
struct DutyBudget {
    credit_ns: f64,
    /// Time accounted up to.
    mark: Duration,
}

impl DutyBudget {
    fn cap() -> f64 {
        BURST.as_nanos() as f64 * (1.0 - DUTY)
    }

    fn new(now: Duration) -> Self {
        DutyBudget {
            credit_ns: Self::cap(),
            mark: now,
        }
    }

    /// Accounts the time since the last call as busy; true when the budget is used up.
    fn spent(&mut self, now: Duration) -> bool {
        self.credit_ns -= (now.saturating_sub(self.mark)).as_nanos() as f64 * (1.0 - DUTY);
        self.mark = self.mark.max(now);
        self.credit_ns <= 0.0
    }

    /// Accounts `from..to` as asleep (and what came before `from` as busy).
    fn slept(&mut self, from: Duration, to: Duration) {
        self.spent(from);
        self.credit_ns =
            (self.credit_ns + to.saturating_sub(from).as_nanos() as f64 * DUTY).min(Self::cap());
        self.mark = self.mark.max(to);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_duty_budget_runs_out_after_a_burst_and_sleep_refills_it() {
        let t0 = Duration::from_secs(1);
        let mut b = DutyBudget::new(t0);
        assert!(!b.spent(t0 + Duration::from_millis(5)));
        // a burst longer than BURST spends the credit
        assert!(b.spent(t0 + BURST + Duration::from_millis(1)));
        // a millisecond asleep gives back 0.8 ms of credit (80 % duty)
        b.slept(
            t0 + BURST + Duration::from_millis(1),
            t0 + BURST + Duration::from_millis(2),
        );
        assert!(!b.spent(t0 + BURST + Duration::from_millis(2)));
    }
}
