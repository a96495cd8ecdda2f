//! A client and a server namespace joined by the link emulator ([`Topology::start`]), or
//! directly by a veth pair ([`Topology::direct`]).
//!
//! ```text
//!  client ns                                             server ns
//!  198.18.0.1 fd51:c1ab::1                               198.18.0.2 fd51:c1ab::2
//!  quiclab0 (TUN) <-> [up pipeline  -> ] <-> quiclab0 (TUN)
//!                     [<- down pipeline]
//! ```
//! Everything is owned by [`Topology`]: dropping it stops the forwarding threads, kills any
//! process left in the namespaces, deletes them, and releases the run's lock file. The lock file
//! (`/run/quiclab/ID.lock`, held with `flock` while the run lives) lets `quiclab clean` tell a
//! crashed run's leftovers from a live run.

use std::fs::File;
use std::io::Write;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::sync::atomic::{AtomicU32, Ordering};

use quiclab_link::{Direction, LinkConfig, Pipeline};
use tun_rs::{DeviceBuilder, SyncDevice};

use crate::error::{Context, Error, Result};
use crate::forward::{self, DirectionReport, Forwarder, ThreadClass};
use crate::ns::{Netns, PREFIX};
use crate::segments::Frame;
use crate::sys;

pub const CLIENT_V4: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);
pub const SERVER_V4: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 2);
pub const CLIENT_V6: Ipv6Addr = Ipv6Addr::new(0xfd51, 0xc1ab, 0, 0, 0, 0, 0, 1);
pub const SERVER_V6: Ipv6Addr = Ipv6Addr::new(0xfd51, 0xc1ab, 0, 0, 0, 0, 0, 2);
/// Name of the TUN device inside each namespace.
pub const TUN_NAME: &str = "quiclab0";
/// Packets a TUN device queues before the kernel drops (the emulator's own queue is separate and
/// normally keeps this one empty).
const TUN_QUEUE: u32 = 1000;
/// Where run lock files live.
pub fn lock_dir() -> &'static str {
    crate::rootless::lock_dir()
}

/// How to build a topology.
#[derive(Default)]
pub struct TopologyConfig {
    pub link: LinkConfig,
    /// MTU of the TUN devices; defaults to the largest link MTU, or 1500. A device MTU above the
    /// link MTU lets oversized packets reach the emulator, which drops and counts them.
    pub device_mtu: Option<u32>,
    /// Write every packet event here as JSON lines.
    pub events: Option<Box<dyn Write + Send>>,
    /// Write a packet capture (pcap, the client's view) here.
    pub pcap: Option<Box<dyn Write + Send>>,
    /// The TUN devices take segmentation offloads (see forward.rs): the kernels hand over and
    /// take super-packets, split and coalesced by the emulator, which then carries several
    /// times more at high rates. Off by default: every decision is per wire packet either way,
    /// but the round trip of a lone small packet is not yet shown to be as exact with them.
    pub offloads: bool,
}

/// Which end of the link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Client,
    Server,
}

static SEQ: AtomicU32 = AtomicU32::new(0);

/// A run's identifier: unique among live runs on this host.
pub(crate) fn new_id() -> String {
    format!(
        "{}-{}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    )
}

/// The id the next topology of this process will take, if no other is made first (tests use
/// it to stage a dead run's leftovers under that name).
#[doc(hidden)]
pub fn next_id() -> String {
    format!("{}-{}", std::process::id(), SEQ.load(Ordering::Relaxed))
}

/// Creates the namespace `name` of the run whose lock we hold. A namespace of that name already
/// there belongs to a dead run (a crash left it, and its pid has been reused by this process:
/// the lock proves no live run has the id), so it is reclaimed rather than failing with "File
/// exists".
fn create_ns(name: &str) -> Result<Netns> {
    crate::reaper::ensure();
    if std::path::Path::new(crate::ns::netns_dir())
        .join(name)
        .exists()
    {
        crate::ns::destroy(name)?;
    }
    Netns::create(name)
}

/// The lock that marks a run as alive.
pub(crate) struct RunLock {
    path: String,
    _file: File,
}

impl RunLock {
    pub(crate) fn take(id: &str) -> Result<Self> {
        let dir = lock_dir();
        std::fs::create_dir_all(dir).context(|| format!("cannot create {dir}"))?;
        let path = format!("{dir}/{id}.lock");
        // `clean` unlinks a lock file only while holding its lock; if that happened between our
        // open and our flock, we hold a lock on a file nobody can find: start again.
        loop {
            let file = File::create(&path).context(|| format!("cannot create {path}"))?;
            // SAFETY: flock on a file we own; released when the fd closes, including on SIGKILL.
            if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
                return Err(Error::Io {
                    what: format!("run {id} is already locked"),
                    source: std::io::Error::last_os_error(),
                });
            }
            let held = file.metadata().context(|| format!("cannot stat {path}"))?;
            match std::fs::metadata(&path) {
                Ok(m) if (m.dev(), m.ino()) == (held.dev(), held.ino()) => {
                    return Ok(RunLock { path, _file: file });
                }
                _ => continue,
            }
        }
    }
}

impl Drop for RunLock {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// How a link's forwarding threads are scheduled (see `forward`'s notes): the endpoints' own
/// class for a link with offloads that holds no packet; nice -20 for a link whose threads are
/// busy most of the time, a rate of [`forward::FAST_LINK_BPS`] or more either way, or no rate
/// (nor trace) with offloads on, the devices' way to carry gigabits; the real-time class for
/// the others.
fn thread_class(link: &LinkConfig, offloads: bool) -> ThreadClass {
    let dirs = [&link.up, &link.down];
    if offloads && !dirs.iter().any(|d| d.holds_packets()) {
        return ThreadClass::Shared;
    }
    let fast = dirs.iter().any(|d| match d.rate {
        Some(r) => r.bps() >= forward::FAST_LINK_BPS,
        None => d.trace.is_none() && offloads,
    });
    if fast {
        ThreadClass::Urgent
    } else {
        ThreadClass::RealTime
    }
}

/// The two namespaces and what joins them: TUN devices and the emulator, or a veth pair.
pub struct Topology {
    id: String,
    forwarder: Option<Forwarder>,
    // Field order is drop order: forwarder (closes the TUN devices), namespaces, then the lock.
    client: Netns,
    server: Netns,
    _lock: RunLock,
    mtu: u32,
    /// CPU time of the emulator's event and capture writers, once [`finish`](Self::finish)ed.
    writers_cpu: std::time::Duration,
}

impl Topology {
    /// Builds the namespaces and devices and starts forwarding.
    pub fn start(cfg: TopologyConfig) -> Result<Self> {
        if !sys::is_root() {
            return Err(Error::NotRoot);
        }
        let up = Pipeline::<Frame>::new(
            Direction::Up,
            &cfg.link.up,
            cfg.link.seed,
            cfg.events.is_some(),
        )?;
        let down = Pipeline::new(
            Direction::Down,
            &cfg.link.down,
            cfg.link.seed,
            cfg.events.is_some(),
        )?;
        let class = thread_class(&cfg.link, cfg.offloads);
        let link_mtu = cfg.link.up.mtu.into_iter().chain(cfg.link.down.mtu).max();
        let mtu = cfg.device_mtu.or(link_mtu).unwrap_or(1500);
        Self::with_tuns(mtu, cfg.offloads, |devices| {
            Forwarder::start(devices, [up, down], cfg.events, cfg.pcap, class)
        })
    }

    /// The two namespaces joined by TUN devices of `mtu` (with offloads or not) and a bare
    /// copy between them (no emulator: see [`Forwarder::start_copy`]), for benchmarks.
    pub fn bare_copy(mtu: u32, offloads: bool) -> Result<Self> {
        if !sys::is_root() {
            return Err(Error::NotRoot);
        }
        Self::with_tuns(mtu, offloads, Forwarder::start_copy)
    }

    /// Namespaces with a TUN device each, joined by what `start` makes of the two devices.
    fn with_tuns(
        mtu: u32,
        offloads: bool,
        start: impl FnOnce([SyncDevice; 2]) -> std::io::Result<Forwarder>,
    ) -> Result<Self> {
        crate::rootless::tun_accessible()?;
        let id = new_id();
        let lock = RunLock::take(&id)?;
        let client = create_ns(&format!("{PREFIX}{id}-client"))?;
        let server = create_ns(&format!("{PREFIX}{id}-server"))?;
        let client_tun = make_tun(&client, mtu, offloads, CLIENT_V4, CLIENT_V6)?;
        let server_tun = make_tun(&server, mtu, offloads, SERVER_V4, SERVER_V6)?;
        let forwarder =
            start([client_tun, server_tun]).context(|| "cannot start the link emulator".into())?;
        Ok(Topology {
            id,
            forwarder: Some(forwarder),
            client,
            server,
            _lock: lock,
            mtu,
            writers_cpu: std::time::Duration::ZERO,
        })
    }

    /// The two namespaces joined directly by a veth pair of the given MTU (no emulator: the
    /// kernel's own path, offloads as given); [`finish`](Self::finish) reports nothing.
    pub fn direct(mtu: u32, offloads: bool) -> Result<Self> {
        if !sys::is_root() {
            return Err(Error::NotRoot);
        }
        let id = new_id();
        let lock = RunLock::take(&id)?;
        let client = create_ns(&format!("{PREFIX}{id}-client"))?;
        let server = create_ns(&format!("{PREFIX}{id}-server"))?;
        crate::veth::join(&client, &server, mtu, offloads)?;
        Ok(Topology {
            id,
            forwarder: None,
            client,
            server,
            _lock: lock,
            mtu,
            writers_cpu: std::time::Duration::ZERO,
        })
    }

    /// Whether the emulator joins the namespaces (false for a direct veth pair).
    pub fn emulated(&self) -> bool {
        self.forwarder.is_some()
    }

    pub fn id(&self) -> &str {
        &self.id
    }

    pub fn ns(&self, side: Side) -> &Netns {
        match side {
            Side::Client => &self.client,
            Side::Server => &self.server,
        }
    }

    /// MTU of the devices (TUN or veth).
    pub fn device_mtu(&self) -> u32 {
        self.mtu
    }

    /// The epoch of the emulator's event timestamps on CLOCK_MONOTONIC, nanoseconds (see
    /// [`Forwarder::epoch_ns`](crate::forward::Forwarder::epoch_ns)); `None` once finished.
    pub fn link_epoch_ns(&self) -> Option<u64> {
        self.forwarder.as_ref().map(|f| f.epoch_ns())
    }

    /// Environment variables for commands run in the topology.
    pub fn env(&self) -> Vec<(String, String)> {
        vec![
            ("QUICLAB_SERVER".into(), SERVER_V4.to_string()),
            ("QUICLAB_SERVER6".into(), SERVER_V6.to_string()),
            ("QUICLAB_CLIENT".into(), CLIENT_V4.to_string()),
            ("QUICLAB_CLIENT6".into(), CLIENT_V6.to_string()),
            ("QUICLAB_RUN".into(), self.id.clone()),
        ]
    }

    /// Waits until direction `dir` of the emulator holds no packet (see
    /// [`Forwarder::drained`]), at most `timeout`; whether it did. A direct path holds nothing
    /// of its own: true at once.
    pub fn wait_drained(&self, dir: Direction, timeout: std::time::Duration) -> bool {
        let Some(f) = &self.forwarder else {
            return true;
        };
        let until = std::time::Instant::now() + timeout;
        loop {
            if f.drained(dir) {
                return true;
            }
            if std::time::Instant::now() >= until {
                return false;
            }
            std::thread::sleep(std::time::Duration::from_micros(500));
        }
    }

    /// Stops the emulator and returns what each direction did (uplink first). The namespaces
    /// stay until the topology is dropped.
    pub fn finish(&mut self) -> Result<Vec<DirectionReport>> {
        let Some(f) = self.forwarder.take() else {
            return Ok(Vec::new());
        };
        // read while the devices exist: they vanish with the forwarder's file descriptors
        let (up_drops, down_drops) = (tx_dropped(&self.client)?, tx_dropped(&self.server)?);
        let (mut reports, writers_cpu) =
            f.finish().context(|| "stopping the link emulator".into())?;
        self.writers_cpu = writers_cpu;
        for r in &mut reports {
            r.device_drops = match r.dir {
                Direction::Up => up_drops,
                Direction::Down => down_drops,
            };
        }
        Ok(reports)
    }

    /// CPU time (user and system) the writer threads of the link's events and capture used,
    /// once [`finish`](Self::finish)ed (zero before, and without them).
    pub fn writers_cpu(&self) -> std::time::Duration {
        self.writers_cpu
    }
}

/// Creates the TUN device inside `ns` and gives it its addresses and route.
fn make_tun(
    ns: &Netns,
    mtu: u32,
    offloads: bool,
    v4: Ipv4Addr,
    v6: Ipv6Addr,
) -> Result<SyncDevice> {
    let mtu16 = u16::try_from(mtu).map_err(|_| Error::Io {
        what: format!("device MTU {mtu}"),
        source: std::io::Error::other("must be at most 65535"),
    })?;
    let dev = ns.run_in(|| {
        DeviceBuilder::new()
            .name(TUN_NAME)
            .mtu(mtu16)
            // segmentation offloads: the kernel hands over super-packets, which the emulator
            // splits into wire-size segments (see forward.rs)
            .offload(offloads)
            .enable(false)
            .build_sync()
    })?;
    // Link-local traffic and router solicitations would otherwise cross the emulator and shift
    // packet indices; the link carries only what the endpoints send.
    ns.run_in(|| {
        for (key, value) in [
            ("accept_ra", "0"),
            ("router_solicitations", "0"),
            ("addr_gen_mode", "1"),
        ] {
            std::fs::write(format!("/proc/sys/net/ipv6/conf/{TUN_NAME}/{key}"), value)?;
        }
        Ok(())
    })?;
    {
        let mut rtnl = ns.rtnl();
        let what = || format!("setting {TUN_NAME}'s queue length in {}", ns.name());
        let index = rtnl.index(TUN_NAME).context(what)?;
        rtnl.set_tx_queue_len(index, TUN_QUEUE).context(what)?;
    }
    address(ns, TUN_NAME, v4, v6)?;
    Ok(dev)
}

/// Gives `dev` in `ns` its addresses (IPv6 without duplicate address detection, which would
/// delay its use) and brings it up.
pub(crate) fn address(ns: &Netns, dev: &str, v4: Ipv4Addr, v6: Ipv6Addr) -> Result<()> {
    let mut rtnl = ns.rtnl();
    let what = || format!("configuring {dev} in {}", ns.name());
    let index = rtnl.index(dev).context(what)?;
    rtnl.add_address(index, v4.into(), 24).context(what)?;
    rtnl.add_address(index, v6.into(), 64).context(what)?;
    rtnl.up(index).context(what)
}

/// Packets the kernel dropped on the TUN device of `ns` for want of queue space.
fn tx_dropped(ns: &Netns) -> Result<u64> {
    ns.rtnl()
        .tx_dropped(TUN_NAME)
        .context(|| format!("reading device statistics in {}", ns.name()))
}

impl Drop for Topology {
    fn drop(&mut self) {
        if let Some(f) = self.forwarder.take() {
            let _ = f.finish();
        }
    }
}

/// The report of one direction.
pub fn report(reports: &[DirectionReport], dir: Direction) -> Option<&DirectionReport> {
    reports.iter().find(|r| r.dir == dir)
}

#[cfg(test)]
mod speed_tests {
    use super::*;

    fn link(up: Option<&str>, down: Option<&str>) -> LinkConfig {
        let mut l = LinkConfig::default();
        let none = |_: &str| -> std::result::Result<quiclab_link::Trace, String> {
            Err("no files".into())
        };
        for (d, r) in [(&mut l.up, up), (&mut l.down, down)] {
            if let Some(r) = r {
                d.set("rate", r, &none).unwrap();
            }
        }
        l
    }

    #[test]
    fn thread_class_follows_rate_offloads_and_what_the_link_holds() {
        use ThreadClass::*;
        // campaign rates keep the real-time class, whatever the devices
        assert_eq!(
            thread_class(&link(Some("10mbit"), Some("10mbit")), true),
            RealTime
        );
        assert_eq!(thread_class(&link(Some("100mbit"), None), false), RealTime);
        // a gigabit either way, or no rate with offloads (the devices' way to carry gigabits)
        assert_eq!(
            thread_class(&link(Some("1gbit"), Some("1gbit")), false),
            Urgent
        );
        assert_eq!(
            thread_class(&link(Some("10mbit"), Some("5gbit")), false),
            Urgent
        );
        let mut delayed = link(None, None);
        delayed
            .down
            .set("delay", "1ms", &|_| Err("no files".into()))
            .unwrap();
        assert_eq!(thread_class(&delayed, true), Urgent);
        // no rate without offloads: the real-time class, as for a plain wire in a campaign
        assert_eq!(thread_class(&link(None, None), false), RealTime);
        // offloads and nothing held: every departure is due on arrival, none can be late
        let mut lossy = link(None, None);
        lossy
            .up
            .set("loss", "1%", &|_| Err("no files".into()))
            .unwrap();
        assert_eq!(thread_class(&link(None, None), true), Shared);
        assert_eq!(thread_class(&lossy, true), Shared);
    }
}
