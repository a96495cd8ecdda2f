//! Measurement probes that run in this process with sockets created inside a topology's
//! namespaces: UDP round trips, TCP bulk goodput, UDP loss patterns and MTU enforcement.
//!
//! Every probe is bounded in packet count and in time, and sends only between the topology's
//! client and server addresses, so its traffic never leaves the namespaces.
//!
//! Timing-sensitive waits busy-poll non-blocking sockets instead of sleeping in `recv`: on
//! virtual machines a sleeping thread can wake tens of microseconds late, and that delay would
//! be measured as if the link had caused it. Busy-polling threads run in the SCHED_IDLE class and
//! yield on every turn, so they never keep the emulator's forwarding threads from a CPU.

use std::io::{self, Read};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use socket2::{Domain, Protocol, SockRef, Socket, Type};

use crate::error::{Context, Error, Result};
use crate::topology::{CLIENT_V4, CLIENT_V6, SERVER_V4, SERVER_V6, Side, Topology};

/// Which IP version a probe uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Family {
    #[default]
    V4,
    V6,
}

impl Family {
    /// Address of one end of the topology.
    pub fn addr(self, side: Side) -> IpAddr {
        match (self, side) {
            (Family::V4, Side::Client) => CLIENT_V4.into(),
            (Family::V4, Side::Server) => SERVER_V4.into(),
            (Family::V6, Side::Client) => CLIENT_V6.into(),
            (Family::V6, Side::Server) => SERVER_V6.into(),
        }
    }

    /// Bytes of IP plus UDP header in front of a datagram's payload.
    pub fn udp_overhead(self) -> usize {
        match self {
            Family::V4 => 20 + 8,
            Family::V6 => 40 + 8,
        }
    }

    fn domain(self) -> Domain {
        match self {
            Family::V4 => Domain::IPV4,
            Family::V6 => Domain::IPV6,
        }
    }
}

/// Probe datagrams start with this and a per-run token, then a sequence number.
const MAGIC: u32 = 0x7163_6c62;
const HEADER: usize = 16;

fn run_token() -> u32 {
    // distinguishes this run's datagrams from a late one of an earlier probe on a reused port
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    t ^ std::process::id().rotate_left(16)
}

fn encode(buf: &mut [u8], token: u32, seq: u64) {
    buf[..4].copy_from_slice(&MAGIC.to_be_bytes());
    buf[4..8].copy_from_slice(&token.to_be_bytes());
    buf[8..16].copy_from_slice(&seq.to_be_bytes());
}

fn decode(buf: &[u8], token: u32) -> Option<u64> {
    if buf.len() < HEADER || buf[..4] != MAGIC.to_be_bytes() || buf[4..8] != token.to_be_bytes() {
        return None;
    }
    let mut seq = [0u8; 8];
    seq.copy_from_slice(&buf[8..16]);
    Some(u64::from_be_bytes(seq))
}

/// A UDP socket bound inside `side`'s namespace on an ephemeral port.
fn udp_socket(topo: &Topology, side: Side, family: Family) -> Result<UdpSocket> {
    let addr = SocketAddr::new(family.addr(side), 0);
    topo.ns(side).run_in(|| UdpSocket::bind(addr))
}

fn local_addr(s: &UdpSocket) -> Result<SocketAddr> {
    s.local_addr()
        .context(|| "cannot read a probe socket's address".into())
}

/// Receives without blocking until a datagram arrives or `deadline` passes, spinning on the CPU
/// meanwhile. The socket must be non-blocking.
fn spin_recv(sock: &UdpSocket, buf: &mut [u8], deadline: Instant) -> io::Result<Option<usize>> {
    loop {
        match sock.recv(buf) {
            Ok(n) => return Ok(Some(n)),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                if Instant::now() >= deadline {
                    return Ok(None);
                }
                yield_cpu();
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

/// One turn of a busy-wait: gives the CPU to any runnable thread (the emulator's forwarding
/// threads above all) and returns at once when there is none. A plain spin would hold the CPU
/// until the scheduler preempts it, which delays the link by milliseconds on a small machine.
/// A receive that simply found nothing yet (or was interrupted).
fn is_transient(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted
    )
}

fn yield_cpu() {
    // SAFETY: sched_yield has no arguments and cannot fail on Linux.
    unsafe { libc::sched_yield() };
}

// ---------------------------------------------------------------------------------------------
// Round-trip time

/// Settings of [`udp_rtt`].
#[derive(Debug, Clone)]
pub struct RttConfig {
    /// Probes to send, one at a time.
    pub count: usize,
    /// Time from one probe's send to the next (a probe whose reply is slower is followed at once).
    pub interval: Duration,
    /// How long to wait for each reply before counting the probe as lost.
    pub timeout: Duration,
    /// UDP payload bytes (at least 16: the probe header).
    pub payload: usize,
    pub family: Family,
}

impl Default for RttConfig {
    fn default() -> Self {
        RttConfig {
            count: 20,
            interval: Duration::from_millis(10),
            timeout: Duration::from_secs(1),
            payload: 32,
            family: Family::V4,
        }
    }
}

/// Round-trip times, one per probe in sending order; `None` for a probe without a reply.
#[derive(Debug, Clone, Default)]
pub struct RttResult {
    pub rtts: Vec<Option<Duration>>,
}

impl RttResult {
    /// The round trips that completed, sorted.
    pub fn sorted(&self) -> Vec<Duration> {
        let mut v: Vec<Duration> = self.rtts.iter().flatten().copied().collect();
        v.sort_unstable();
        v
    }

    /// Median of the completed round trips (mean of the middle two for an even count).
    pub fn median(&self) -> Option<Duration> {
        let v = self.sorted();
        match v.len() {
            0 => None,
            n if n % 2 == 1 => Some(v[n / 2]),
            n => Some((v[n / 2 - 1] + v[n / 2]) / 2),
        }
    }

    pub fn lost(&self) -> usize {
        self.rtts.iter().filter(|r| r.is_none()).count()
    }
}

/// Hand-shake between the prober and the echo thread, which spins only while a probe is out.
/// Probes are numbered from 1 so that the echo can confirm it spins for this very probe.
#[derive(Default)]
struct EchoControl {
    /// The probe about to be sent or in flight (the echo must spin on its socket), or 0.
    armed: AtomicU64,
    /// The probe the echo is spinning for, or 0.
    spinning: AtomicU64,
    stop: AtomicBool,
}

/// Stops the echo thread when the prober leaves, however it leaves.
struct StopEcho<'a> {
    ctl: &'a EchoControl,
    echo: &'a std::thread::Thread,
}

impl Drop for StopEcho<'_> {
    fn drop(&mut self) {
        self.ctl.armed.store(0, Ordering::SeqCst);
        self.ctl.stop.store(true, Ordering::SeqCst);
        self.echo.unpark();
    }
}

fn echo_loop(sock: &UdpSocket, ctl: &EchoControl) -> io::Result<()> {
    let mut buf = vec![0u8; 65_536];
    loop {
        if ctl.stop.load(Ordering::SeqCst) {
            return Ok(());
        }
        let probe = ctl.armed.load(Ordering::SeqCst);
        ctl.spinning.store(probe, Ordering::SeqCst);
        if probe == 0 {
            std::thread::park_timeout(Duration::from_millis(50));
            continue;
        }
        match sock.recv_from(&mut buf) {
            Ok((n, from)) => {
                sock.send_to(&buf[..n], from)?;
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => yield_cpu(),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

/// Sends `cfg.count` small UDP datagrams from the client to an echo in the server namespace, one
/// at a time, and returns each round trip. Both ends busy-poll while a probe is out, so the
/// result is the link's round trip plus the kernel's UDP path, without thread wake-up delays.
/// Takes at most `count * max(interval, timeout)`.
pub fn udp_rtt(topo: &Topology, cfg: &RttConfig) -> Result<RttResult> {
    let payload = cfg.payload.clamp(HEADER, 65_000);
    let echo = udp_socket(topo, Side::Server, cfg.family)?;
    let echo_addr = local_addr(&echo)?;
    let sock = udp_socket(topo, Side::Client, cfg.family)?;
    let setup = || -> io::Result<()> {
        echo.set_nonblocking(true)?;
        sock.set_nonblocking(true)?;
        sock.connect(echo_addr)
    };
    setup().context(|| "cannot set up the round-trip probe sockets".into())?;
    let token = run_token();
    let ctl = EchoControl::default();
    std::thread::scope(|s| {
        let spawn_err = |e| Error::Io {
            what: "cannot start a round-trip probe thread".into(),
            source: e,
        };
        let echo_thread = std::thread::Builder::new()
            .name("quiclab-echo".into())
            .spawn_scoped(s, || {
                idle_priority()?;
                echo_loop(&echo, &ctl)
            })
            .map_err(spawn_err)?;
        let echo_handle = echo_thread.thread().clone();
        let prober = std::thread::Builder::new()
            .name("quiclab-rtt".into())
            .spawn_scoped(s, {
                let (ctl, sock, echo) = (&ctl, &sock, echo_handle.clone());
                move || {
                    let _stop = StopEcho { ctl, echo: &echo };
                    idle_priority()?;
                    probe_loop(sock, ctl, &echo, cfg, payload, token)
                }
            });
        let rtts = match prober {
            Ok(p) => p
                .join()
                .unwrap_or_else(|_| Err(io::Error::other("prober thread panicked"))),
            Err(e) => {
                // the echo must stop before the scope can end
                drop(StopEcho {
                    ctl: &ctl,
                    echo: &echo_handle,
                });
                Err(e)
            }
        };
        let echoed = echo_thread
            .join()
            .unwrap_or_else(|_| Err(io::Error::other("echo thread panicked")));
        echoed.context(|| "UDP echo in the server namespace".into())?;
        rtts.context(|| "UDP round-trip probe".into())
    })
}

/// Puts the calling thread in the SCHED_IDLE class, so that a thread busy-waiting for a probe
/// gives way at once to any other thread that wakes up, the emulator's forwarding threads
/// included, instead of delaying them until the scheduler preempts it.
fn idle_priority() -> io::Result<()> {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: pid 0 is the calling thread; param is valid for the call.
    if unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &param) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

fn probe_loop(
    sock: &UdpSocket,
    ctl: &EchoControl,
    echo: &std::thread::Thread,
    cfg: &RttConfig,
    payload: usize,
    token: u32,
) -> io::Result<RttResult> {
    let mut out = vec![0u8; payload];
    let mut buf = vec![0u8; 65_536];
    let mut rtts = Vec::with_capacity(cfg.count);
    let mut next = Instant::now();
    for seq in 0..cfg.count as u64 {
        if let Some(wait) = next.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        // drop anything left over (a reply that came after its probe timed out)
        while sock.recv(&mut buf).is_ok() {}
        ctl.armed.store(seq + 1, Ordering::SeqCst);
        echo.unpark();
        let ready_by = Instant::now() + cfg.timeout;
        while ctl.spinning.load(Ordering::SeqCst) != seq + 1 {
            if Instant::now() >= ready_by {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "the echo thread did not start polling",
                ));
            }
            yield_cpu();
        }
        encode(&mut out, token, seq);
        let sent = Instant::now();
        next = sent + cfg.interval;
        sock.send(&out)?;
        let deadline = sent + cfg.timeout;
        let rtt = loop {
            match spin_recv(sock, &mut buf, deadline)? {
                Some(n) if decode(&buf[..n], token) == Some(seq) => break Some(sent.elapsed()),
                Some(_) => {}
                None => break None,
            }
        };
        ctl.armed.store(0, Ordering::SeqCst);
        rtts.push(rtt);
    }
    Ok(RttResult { rtts })
}

// ---------------------------------------------------------------------------------------------
// TCP goodput

/// Which way bulk data flows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Flow {
    /// Server to client.
    #[default]
    Download,
    /// Client to server.
    Upload,
}

/// Settings of [`tcp_goodput`].
#[derive(Debug, Clone)]
pub struct GoodputConfig {
    pub flow: Flow,
    /// Congestion controller of both sockets (TCP_CONGESTION), e.g. "cubic", "bbr".
    pub congestion: String,
    /// How long the sender writes.
    pub duration: Duration,
    /// How long the receiver may take beyond `duration` to receive what was sent (and the
    /// connection set-up time limit).
    pub grace: Duration,
    pub family: Family,
}

impl Default for GoodputConfig {
    fn default() -> Self {
        GoodputConfig {
            flow: Flow::Download,
            congestion: "cubic".into(),
            duration: Duration::from_secs(5),
            grace: Duration::from_secs(10),
            family: Family::V4,
        }
    }
}

/// What the receiver of a bulk transfer saw.
#[derive(Debug, Clone)]
pub struct Goodput {
    /// Application bytes received after the first read.
    pub bytes: u64,
    /// From the first read to the last.
    pub seconds: f64,
    pub bits_per_sec: f64,
    /// Congestion controller of the sending socket, as read back from the kernel.
    pub congestion: String,
    /// Application bytes received in all, first read included.
    pub total_bytes: u64,
}

/// Unsent bytes the sender may queue in its socket: enough to keep the link busy between
/// writes, small enough that the transfer ends soon after the sender stops.
const NOTSENT_LOWAT: u32 = 256 * 1024;
const CHUNK: usize = 128 * 1024;

fn available_congestion() -> String {
    std::fs::read_to_string("/proc/sys/net/ipv4/tcp_available_congestion_control")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|e| format!("unknown ({e})"))
}

/// Sets the congestion controller of `sock` and returns it as read back.
fn set_congestion(sock: SockRef<'_>, name: &str) -> Result<String> {
    let unavailable = |source: io::Error| Error::Io {
        what: format!(
            "TCP congestion controller {name:?} is not available (available: {})",
            available_congestion()
        ),
        source,
    };
    sock.set_tcp_congestion(name.as_bytes())
        .map_err(unavailable)?;
    let got = sock
        .tcp_congestion()
        .context(|| "cannot read TCP_CONGESTION back".into())?;
    let got = String::from_utf8_lossy(&got)
        .trim_end_matches('\0')
        .to_string();
    if got != name {
        return Err(unavailable(io::Error::other(format!(
            "the kernel reports {got:?} after setting it"
        ))));
    }
    Ok(got)
}

/// Runs a bulk TCP transfer between the namespaces for `cfg.duration` and returns the goodput
/// seen by the receiver: bytes received after its first read, over the time from that read to
/// its last. Takes at most `duration + 2 * grace`.
pub fn tcp_goodput(topo: &Topology, cfg: &GoodputConfig) -> Result<Goodput> {
    let server_addr = SocketAddr::new(cfg.family.addr(Side::Server), 0);
    let listener = topo.ns(Side::Server).run_in(|| {
        let s = Socket::new(cfg.family.domain(), Type::STREAM, Some(Protocol::TCP))?;
        s.set_reuse_address(true)?;
        s.bind(&server_addr.into())?;
        Ok(s)
    })?;
    set_congestion(SockRef::from(&listener), &cfg.congestion)?;
    listener
        .listen(1)
        .context(|| "cannot listen in the server namespace".into())?;
    let listener: TcpListener = listener.into();
    let target = listener
        .local_addr()
        .context(|| "cannot read the listener's address".into())?;
    let client = topo
        .ns(Side::Client)
        .run_in(|| Socket::new(cfg.family.domain(), Type::STREAM, Some(Protocol::TCP)))?;
    set_congestion(SockRef::from(&client), &cfg.congestion)?;
    client
        .connect_timeout(&target.into(), cfg.grace)
        .context(|| format!("cannot connect to {target} across the link"))?;
    let client: TcpStream = client.into();
    // the server side completes when the client's ACK has crossed the link
    listener
        .set_nonblocking(true)
        .context(|| "cannot set up the listener".into())?;
    let accept_by = Instant::now() + cfg.grace;
    let server = loop {
        match listener.accept() {
            Ok((s, _)) => break s,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock && Instant::now() < accept_by => {
                std::thread::sleep(Duration::from_millis(1));
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => {
                return Err(Error::Io {
                    what: "the connection did not reach the server's accept queue".into(),
                    source: e,
                });
            }
        }
    };
    server
        .set_nonblocking(false)
        .context(|| "cannot set up the accepted connection".into())?;
    let (sender, receiver) = match cfg.flow {
        Flow::Download => (server, client),
        Flow::Upload => (client, server),
    };
    let congestion = set_congestion(SockRef::from(&sender), &cfg.congestion)?;
    let setup = || -> io::Result<()> {
        SockRef::from(&sender).set_tcp_notsent_lowat(NOTSENT_LOWAT)?;
        sender.set_write_timeout(Some(cfg.grace))?;
        receiver.set_read_timeout(Some(cfg.grace))
    };
    setup().context(|| "cannot set up the bulk transfer".into())?;

    let (sent, received) = std::thread::scope(|s| {
        let send = s.spawn(|| bulk_send(sender, cfg.duration));
        let received = bulk_receive(receiver, Instant::now() + cfg.duration + 2 * cfg.grace);
        let sent = send
            .join()
            .unwrap_or_else(|_| Err(io::Error::other("sender thread panicked")));
        (sent, received)
    });
    let sent = sent.context(|| "TCP bulk sender".into())?;
    let r = received.context(|| "TCP bulk receiver".into())?;
    if r.total != sent {
        return Err(Error::Io {
            what: "TCP bulk transfer".into(),
            source: io::Error::other(format!("received {} bytes of {sent} sent", r.total)),
        });
    }
    let seconds = r.last.saturating_duration_since(r.first).as_secs_f64();
    let bytes = r.total - r.first_read;
    let bits_per_sec = if seconds > 0.0 {
        bytes as f64 * 8.0 / seconds
    } else {
        0.0
    };
    Ok(Goodput {
        bytes,
        seconds,
        bits_per_sec,
        congestion,
        total_bytes: r.total,
    })
}

fn bulk_send(sock: TcpStream, duration: Duration) -> io::Result<u64> {
    let chunk = vec![0x5a_u8; CHUNK];
    let end = Instant::now() + duration;
    let mut sent = 0u64;
    // socket2's send passes MSG_NOSIGNAL: a receiver that gave up is an error, not a SIGPIPE
    let sock2 = SockRef::from(&sock);
    while Instant::now() < end {
        match sock2.send(&chunk) {
            Ok(n) => sent += n as u64,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    sock.shutdown(std::net::Shutdown::Write)?;
    Ok(sent)
}

struct Received {
    total: u64,
    first_read: u64,
    first: Instant,
    last: Instant,
}

fn bulk_receive(mut sock: TcpStream, deadline: Instant) -> io::Result<Received> {
    let mut buf = vec![0u8; CHUNK];
    let mut r: Option<Received> = None;
    loop {
        if Instant::now() > deadline {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the transfer did not finish in time",
            ));
        }
        let n = match sock.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n as u64,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        let now = Instant::now();
        match &mut r {
            Some(r) => {
                r.total += n;
                r.last = now;
            }
            None => {
                r = Some(Received {
                    total: n,
                    first_read: n,
                    first: now,
                    last: now,
                })
            }
        }
    }
    r.ok_or_else(|| io::Error::new(io::ErrorKind::UnexpectedEof, "no data arrived"))
}

// ---------------------------------------------------------------------------------------------
// Loss pattern

/// Settings of [`udp_loss`].
#[derive(Debug, Clone)]
pub struct LossConfig {
    /// Datagrams to send, client to server.
    pub count: usize,
    /// Sending pace, datagrams per second.
    pub rate: u32,
    /// UDP payload bytes (at least 16).
    pub payload: usize,
    /// How long the receiver keeps listening after the last datagram was sent; must exceed the
    /// link's one-way delay and queueing, or late datagrams count as lost.
    pub drain: Duration,
    pub family: Family,
}

impl Default for LossConfig {
    fn default() -> Self {
        LossConfig {
            count: 50_000,
            rate: 20_000,
            payload: 32,
            drain: Duration::from_millis(500),
            family: Family::V4,
        }
    }
}

/// A fixed-size set of bits.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Bitmap {
    words: Vec<u64>,
    len: usize,
}

impl Bitmap {
    pub fn new(len: usize) -> Self {
        Bitmap {
            words: vec![0; len.div_ceil(64)],
            len,
        }
    }
    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// Sets bit `i`; returns whether it was already set. Out-of-range bits are ignored.
    pub fn set(&mut self, i: usize) -> bool {
        if i >= self.len {
            return false;
        }
        let (w, b) = (i / 64, 1u64 << (i % 64));
        let was = self.words[w] & b != 0;
        self.words[w] |= b;
        was
    }
    pub fn get(&self, i: usize) -> bool {
        i < self.len && self.words[i / 64] & (1 << (i % 64)) != 0
    }
    pub fn count_ones(&self) -> usize {
        self.words.iter().map(|w| w.count_ones() as usize).sum()
    }
}

/// Which datagrams of a [`udp_loss`] run arrived.
#[derive(Debug, Clone, Default)]
pub struct LossResult {
    /// Bit `i` is set when datagram `i` arrived.
    pub arrived: Bitmap,
    /// Copies of datagrams that had already arrived.
    pub duplicates: u64,
    /// Datagrams the server namespace's UDP stack dropped (receive buffer full, bad checksum)
    /// during the run; non-zero means some losses were not the link's.
    pub receiver_drops: u64,
}

impl LossResult {
    pub fn sent(&self) -> usize {
        self.arrived.len()
    }
    pub fn received(&self) -> usize {
        self.arrived.count_ones()
    }
    pub fn lost(&self) -> usize {
        self.sent() - self.received()
    }
    pub fn loss_fraction(&self) -> f64 {
        if self.sent() == 0 {
            0.0
        } else {
            self.lost() as f64 / self.sent() as f64
        }
    }
    /// Lengths of the runs of consecutive missing datagrams, in sending order.
    pub fn bursts(&self) -> Vec<u64> {
        let mut out = Vec::new();
        let mut run = 0;
        for i in 0..self.sent() {
            if self.arrived.get(i) {
                if run > 0 {
                    out.push(run);
                }
                run = 0;
            } else {
                run += 1;
            }
        }
        if run > 0 {
            out.push(run);
        }
        out
    }
}

/// UDP receive errors (`InErrors`, which includes `RcvbufErrors`) of the calling thread's
/// network namespace.
fn udp_in_errors() -> io::Result<u64> {
    let snmp = std::fs::read_to_string("/proc/thread-self/net/snmp")?;
    let mut lines = snmp.lines().filter(|l| l.starts_with("Udp: "));
    let (Some(names), Some(values)) = (lines.next(), lines.next()) else {
        return Err(io::Error::other("no Udp lines in /proc/net/snmp"));
    };
    names
        .split_whitespace()
        .zip(values.split_whitespace())
        .find(|(n, _)| *n == "InErrors")
        .and_then(|(_, v)| v.parse().ok())
        .ok_or_else(|| io::Error::other("no Udp InErrors in /proc/net/snmp"))
}

/// Receive buffer of the loss receiver: at the default pace it holds several seconds of
/// datagrams, so a slow reader cannot cause losses.
const LOSS_RCVBUF: usize = 32 << 20;

/// A receive buffer of `bytes`: past net.core.rmem_max where permitted (SO_RCVBUFFORCE, root's
/// on the host), else up to it (a run without root: the probe's receiver-drop count still
/// tells a loss the buffer caused from the link's).
fn force_rcvbuf(sock: &UdpSocket, bytes: usize) -> io::Result<()> {
    match forced_rcvbuf(sock, bytes) {
        Err(e) if e.raw_os_error() == Some(libc::EPERM) => {
            socket2::SockRef::from(sock).set_recv_buffer_size(bytes)
        }
        r => r,
    }
}

/// SO_RCVBUFFORCE alone: refused (EPERM) without the host's CAP_NET_ADMIN.
pub(crate) fn forced_rcvbuf(sock: &UdpSocket, bytes: usize) -> io::Result<()> {
    let v = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
    // SAFETY: setsockopt with a c_int option value that lives for the call. SO_RCVBUFFORCE
    // (root only) ignores net.core.rmem_max.
    let r = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVBUFFORCE,
            (&v as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Sends `cfg.count` sequence-numbered datagrams client to server at `cfg.rate` per second and
/// records which arrived. The receiver has a large buffer and the sender is paced, so every
/// loss is the link's; `receiver_drops` confirms it. Takes about `count / rate + drain`.
pub fn udp_loss(topo: &Topology, cfg: &LossConfig) -> Result<LossResult> {
    let payload = cfg.payload.clamp(HEADER, 65_000);
    let rx = udp_socket(topo, Side::Server, cfg.family)?;
    let rx_addr = local_addr(&rx)?;
    let tx = udp_socket(topo, Side::Client, cfg.family)?;
    let setup = || -> io::Result<()> {
        force_rcvbuf(&rx, LOSS_RCVBUF)?;
        rx.set_read_timeout(Some(Duration::from_millis(20)))?;
        tx.connect(rx_addr)
    };
    setup().context(|| "cannot set up the loss probe sockets".into())?;
    let errors_before = topo.ns(Side::Server).run_in(udp_in_errors)?;
    let token = run_token();
    let sent_at = std::sync::Mutex::new(None::<Instant>);
    let (sent, received) = std::thread::scope(|s| {
        let send = s.spawn(|| {
            let r = paced_send(&tx, cfg, payload, token);
            // the receiver's drain period starts now, also after a failure
            *sent_at.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now());
            r
        });
        let received = loss_receive(&rx, cfg, token, &sent_at);
        let sent = send
            .join()
            .unwrap_or_else(|_| Err(io::Error::other("sender thread panicked")));
        (sent, received)
    });
    sent.context(|| "UDP loss probe sender".into())?;
    let (arrived, duplicates) = received.context(|| "UDP loss probe receiver".into())?;
    let errors_after = topo.ns(Side::Server).run_in(udp_in_errors)?;
    Ok(LossResult {
        arrived,
        duplicates,
        receiver_drops: errors_after.saturating_sub(errors_before),
    })
}

fn paced_send(tx: &UdpSocket, cfg: &LossConfig, payload: usize, token: u32) -> io::Result<()> {
    let mut out = vec![0u8; payload];
    let gap = Duration::from_secs(1) / cfg.rate.max(1);
    let mut due = Instant::now();
    for seq in 0..cfg.count as u64 {
        // Absolute schedule: after a late wake-up the overdue datagrams go back to back, but
        // never more than 32 of them, which the device queue and the link easily absorb.
        let now = Instant::now();
        if due > now {
            std::thread::sleep(due - now);
        } else if now - due > gap * 32 {
            due = now - gap * 32;
        }
        due += gap;
        encode(&mut out, token, seq);
        loop {
            match tx.send(&out) {
                Ok(_) => break,
                // a full device queue: wait for it instead of losing the datagram here
                Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => {
                    std::thread::sleep(Duration::from_micros(100))
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }
    Ok(())
}

fn loss_receive(
    rx: &UdpSocket,
    cfg: &LossConfig,
    token: u32,
    sent_at: &std::sync::Mutex<Option<Instant>>,
) -> io::Result<(Bitmap, u64)> {
    let mut arrived = Bitmap::new(cfg.count);
    let mut duplicates = 0;
    let mut buf = vec![0u8; 65_536];
    // hard stop in case the sender never finishes
    let limit = Instant::now()
        + Duration::from_secs_f64(cfg.count as f64 / f64::from(cfg.rate.max(1)) * 2.0 + 10.0)
        + cfg.drain;
    loop {
        match rx.recv(&mut buf) {
            Ok(n) => {
                if let Some(seq) = decode(&buf[..n], token)
                    && let Ok(i) = usize::try_from(seq)
                    && i < cfg.count
                    && arrived.set(i)
                {
                    duplicates += 1;
                }
                continue;
            }
            Err(e) if is_transient(&e) => {}
            Err(e) => return Err(e),
        }
        let done = *sent_at.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        if done.is_some_and(|t| now >= t + cfg.drain) || now >= limit {
            return Ok((arrived, duplicates));
        }
    }
}

// ---------------------------------------------------------------------------------------------
// MTU

/// Sends one client-to-server UDP datagram whose IP packet is `ip_size` bytes, with Don't
/// Fragment set (IP_PMTUDISC_PROBE: sent even above a cached path MTU, never fragmented), and
/// returns whether it arrived within `timeout`. Fails if the client's device refuses the size.
pub fn udp_mtu(topo: &Topology, ip_size: usize, family: Family, timeout: Duration) -> Result<bool> {
    let payload = ip_size
        .checked_sub(family.udp_overhead())
        .filter(|p| *p >= HEADER)
        .ok_or_else(|| Error::Io {
            what: format!("MTU probe of {ip_size} bytes"),
            source: io::Error::other(format!(
                "too small: at least {} bytes",
                family.udp_overhead() + HEADER
            )),
        })?;
    let rx = udp_socket(topo, Side::Server, family)?;
    let rx_addr = local_addr(&rx)?;
    let tx = udp_socket(topo, Side::Client, family)?;
    let setup = || -> io::Result<()> {
        let (level, opt, val) = match family {
            Family::V4 => (
                libc::IPPROTO_IP,
                libc::IP_MTU_DISCOVER,
                libc::IP_PMTUDISC_PROBE,
            ),
            Family::V6 => (
                libc::IPPROTO_IPV6,
                libc::IPV6_MTU_DISCOVER,
                libc::IPV6_PMTUDISC_PROBE,
            ),
        };
        // SAFETY: setsockopt with a c_int option value that lives for the call.
        let r = unsafe {
            libc::setsockopt(
                tx.as_raw_fd(),
                level,
                opt,
                (&val as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if r != 0 {
            return Err(io::Error::last_os_error());
        }
        tx.connect(rx_addr)
    };
    setup().context(|| "cannot set up the MTU probe sockets".into())?;
    let token = run_token();
    let mut out = vec![0u8; payload];
    encode(&mut out, token, ip_size as u64);
    tx.send(&out)
        .context(|| format!("cannot send a {ip_size}-byte IP packet from the client"))?;
    let deadline = Instant::now() + timeout;
    let mut buf = vec![0u8; 65_536];
    loop {
        let Some(left) = deadline
            .checked_duration_since(Instant::now())
            .filter(|d| !d.is_zero())
        else {
            return Ok(false);
        };
        rx.set_read_timeout(Some(left))
            .context(|| "MTU probe receiver".into())?;
        match rx.recv(&mut buf) {
            Ok(n) if n == payload && decode(&buf[..n], token) == Some(ip_size as u64) => {
                return Ok(true);
            }
            Ok(_) => {}
            Err(e) if is_transient(&e) => {}
            Err(e) => {
                return Err(Error::Io {
                    what: "MTU probe receiver".into(),
                    source: e,
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probe_header_round_trips_and_rejects_foreign_datagrams() {
        let mut b = [0u8; 20];
        encode(&mut b, 7, 123_456);
        assert_eq!(decode(&b, 7), Some(123_456));
        assert_eq!(decode(&b, 8), None);
        assert_eq!(decode(&b[..15], 7), None);
    }

    #[test]
    fn bursts_are_runs_of_missing_sequence_numbers() {
        let mut r = LossResult {
            arrived: Bitmap::new(12),
            ..Default::default()
        };
        // arrived: 0 1 . . 4 . 6 7 8 . . .
        for i in [0, 1, 4, 6, 7, 8] {
            assert!(!r.arrived.set(i));
        }
        assert!(r.arrived.set(4), "second set reports a duplicate");
        assert_eq!(r.received(), 6);
        assert_eq!(r.lost(), 6);
        assert_eq!(r.bursts(), vec![2, 1, 3]);
        assert!((r.loss_fraction() - 0.5).abs() < 1e-12);
    }

    #[test]
    fn median_of_even_and_odd_counts() {
        let ms = |v: u64| Some(Duration::from_millis(v));
        let r = RttResult {
            rtts: vec![ms(3), None, ms(1), ms(2)],
        };
        assert_eq!(r.median(), Some(Duration::from_millis(2)));
        assert_eq!(r.lost(), 1);
        let r = RttResult {
            rtts: vec![ms(4), ms(1), ms(2), ms(3)],
        };
        assert_eq!(r.median(), Some(Duration::from_micros(2500)));
    }
}
