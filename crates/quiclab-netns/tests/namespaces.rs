//! The emulator measured from inside real namespaces with the probes: round trips, TCP goodput,
//! loss, MTU. Needs root (CI runs these as root); without it they fail, never skip.
//!
//! The tests share the machine's CPUs with the forwarding threads they measure, so they run one
//! at a time, and each checks that its namespaces are gone once its topology is dropped.

use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use quiclab_link::LinkConfig;
use quiclab_netns::probe::{self, Family, Flow, GoodputConfig, LossConfig, RttConfig};
use quiclab_netns::selftest::{self, binomial_99, burst_tolerance, symmetric_link, uplink};
use quiclab_netns::{DirectionReport, Side, Topology, TopologyConfig};

static SERIAL: Mutex<()> = Mutex::new(());

/// Takes the machine for one test; a test that panicked while holding it does not block others.
fn exclusive() -> MutexGuard<'static, ()> {
    assert!(
        quiclab_netns::sys::is_root(),
        "these tests create network namespaces and TUN devices and must run as root \
         (e.g. sudo -E cargo test -p quiclab-netns)"
    );
    SERIAL
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Starts a topology, runs `f` on it, drops it, and checks that its namespaces are gone.
fn with_topology<T>(
    link: LinkConfig,
    device_mtu: Option<u32>,
    f: impl FnOnce(&mut Topology) -> T,
) -> T {
    let mut topo = Topology::start(TopologyConfig {
        link,
        device_mtu,
        events: None,
        pcap: None,
        offloads: false,
    })
    .expect("topology starts");
    let names = [Side::Client, Side::Server].map(|s| topo.ns(s).name().to_string());
    let out = f(&mut topo);
    drop(topo);
    let left = quiclab_netns::clean::namespaces();
    for name in &names {
        assert!(
            !left.contains(name),
            "namespace {name} is still there after its topology was dropped"
        );
    }
    out
}

/// Stops the emulator and returns the uplink's report.
fn uplink_report(topo: &mut Topology) -> DirectionReport {
    let reports = topo.finish().expect("the emulator stops");
    for r in &reports {
        assert!(r.error.is_none(), "forwarding failed: {:?}", r.error);
    }
    reports
        .into_iter()
        .find(|r| r.dir == quiclab_link::Direction::Up)
        .expect("an uplink report")
}

#[test]
fn round_trip_is_twice_the_one_way_delay() {
    let _machine = exclusive();
    let tolerance = selftest::RTT_TOLERANCE.as_secs_f64();
    let mut failures = Vec::new();
    for (ms, family) in [
        (0, Family::V4),
        (10, Family::V4),
        (50, Family::V4),
        (100, Family::V4),
        (10, Family::V6),
    ] {
        let cfg = RttConfig {
            family,
            ..RttConfig::default()
        };
        // The error is the endpoints' UDP path and the wake-ups of threads that slept for up to
        // a delay; on a virtual machine the latter vary from run to run (a vCPU idle for 100 ms
        // wakes later than one idle for 10), so a row that misses is measured again, up to
        // three runs: a systematic error misses in all of them.
        let mut errors = Vec::new();
        for _ in 0..3 {
            let link = symmetric_link(&[("delay", &format!("{ms}ms"))]).expect("valid link");
            let r = with_topology(link, None, |topo| {
                probe::udp_rtt(topo, &cfg).expect("round-trip probe runs")
            });
            assert_eq!(r.lost(), 0, "delay {ms} ms ({family:?}): lost probes");
            let median = r.median().expect("replies").as_secs_f64();
            let err = median - 2.0 * ms as f64 / 1e3;
            eprintln!(
                "delay {ms} ms ({family:?}): median RTT {:.3} ms, error {:+.3} ms",
                median * 1e3,
                err * 1e3
            );
            errors.push(err);
            if err.abs() <= tolerance {
                break;
            }
        }
        if errors.iter().all(|e| e.abs() > tolerance) {
            let list: Vec<String> = errors.iter().map(|e| format!("{:+.3}", e * 1e3)).collect();
            failures.push(format!(
                "delay {ms} ms ({family:?}): errors {} ms in {} runs",
                list.join(", "),
                errors.len()
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "median RTT off by more than {} ms: {failures:?}",
        tolerance * 1e3
    );
}

fn goodput_at_10mbit(congestion: &str) {
    let _machine = exclusive();
    let link = symmetric_link(&[("rate", "10mbit"), ("delay", "10ms")]).expect("valid link");
    let g = with_topology(link, None, |topo| {
        probe::tcp_goodput(
            topo,
            &GoodputConfig {
                flow: Flow::Download,
                congestion: congestion.into(),
                duration: Duration::from_secs(8),
                ..GoodputConfig::default()
            },
        )
        .expect("bulk transfer runs")
    });
    let share = g.bits_per_sec / 10e6;
    eprintln!(
        "{congestion}: {:.3} Mbit/s ({:.1}% of 10 Mbit/s): {} bytes in {:.2} s",
        g.bits_per_sec / 1e6,
        share * 100.0,
        g.bytes,
        g.seconds
    );
    assert_eq!(g.congestion, congestion, "congestion controller read back");
    assert!(
        (selftest::GOODPUT_MIN..=1.0).contains(&share),
        "{congestion} goodput {:.2} Mbit/s is {:.1}% of 10 Mbit/s, outside 90%..100%",
        g.bits_per_sec / 1e6,
        share * 100.0
    );
}

#[test]
fn cubic_fills_a_10mbit_link() {
    goodput_at_10mbit("cubic");
}

#[test]
fn bbr_fills_a_10mbit_link() {
    goodput_at_10mbit("bbr");
}

#[test]
fn iid_loss_is_within_its_binomial_interval_and_counted_by_the_link() {
    let _machine = exclusive();
    let p = 0.01;
    let cfg = LossConfig {
        count: 50_000,
        ..LossConfig::default()
    };
    let link = uplink(&[("loss", "1%")], selftest::SEED).expect("valid link");
    let (r, rep) = with_topology(link, None, |topo| {
        let r = probe::udp_loss(topo, &cfg).expect("loss probe runs");
        (r, uplink_report(topo))
    });
    let (lo, hi) = binomial_99(p, cfg.count);
    let f = r.loss_fraction();
    eprintln!(
        "loss {:.3}% ({} of {}), 99% interval {:.3}%..{:.3}%, link dropped {}",
        f * 100.0,
        r.lost(),
        r.sent(),
        lo * 100.0,
        hi * 100.0,
        rep.counters.dropped_random
    );
    assert_eq!(
        r.receiver_drops, 0,
        "the receiving socket dropped datagrams"
    );
    assert_eq!(
        rep.device_drops, 0,
        "the client's TUN device dropped datagrams"
    );
    assert_eq!(r.duplicates, 0);
    assert_eq!(
        rep.counters.packets_in, cfg.count as u64,
        "the link saw every datagram"
    );
    assert_eq!(
        r.lost() as u64,
        rep.counters.dropped_random,
        "every loss is one the emulator counted"
    );
    assert_eq!(rep.counters.dropped_total(), rep.counters.dropped_random);
    assert!(
        (lo..=hi).contains(&f),
        "loss {:.3}% outside the 99% interval {:.3}%..{:.3}%",
        f * 100.0,
        lo * 100.0,
        hi * 100.0
    );
}

#[test]
fn burst_loss_has_the_configured_mean_burst() {
    let _machine = exclusive();
    let mean = 4.0;
    let cfg = LossConfig {
        count: 100_000,
        rate: 25_000,
        ..LossConfig::default()
    };
    let link = uplink(&[("loss", "2%"), ("loss-burst", "4")], selftest::SEED).expect("valid link");
    let (r, rep) = with_topology(link, None, |topo| {
        let r = probe::udp_loss(topo, &cfg).expect("loss probe runs");
        (r, uplink_report(topo))
    });
    let bursts = r.bursts();
    assert!(!bursts.is_empty(), "no losses at 2%");
    let observed = bursts.iter().sum::<u64>() as f64 / bursts.len() as f64;
    let tol = burst_tolerance(mean, bursts.len());
    eprintln!(
        "mean burst {observed:.3} over {} bursts (tolerance +-{tol:.3}), loss {:.3}%",
        bursts.len(),
        r.loss_fraction() * 100.0
    );
    assert_eq!(
        r.receiver_drops, 0,
        "the receiving socket dropped datagrams"
    );
    assert_eq!(
        rep.device_drops, 0,
        "the client's TUN device dropped datagrams"
    );
    assert_eq!(
        rep.counters.packets_in, cfg.count as u64,
        "the link saw every datagram"
    );
    assert_eq!(r.lost() as u64, rep.counters.dropped_burst);
    assert!(
        (observed - mean).abs() <= tol,
        "mean burst {observed:.3} not within {mean} +-{tol:.3}"
    );
}

#[test]
fn packets_above_the_link_mtu_never_arrive() {
    let _machine = exclusive();
    let link = uplink(&[("mtu", "1400")], selftest::SEED).expect("valid link");
    let wait = Duration::from_millis(300);
    let (fits, over, over_v6, rep) = with_topology(link, Some(1500), |topo| {
        let fits = probe::udp_mtu(topo, 1400, Family::V4, wait).expect("probe runs");
        let over = probe::udp_mtu(topo, 1401, Family::V4, wait).expect("probe runs");
        let over_v6 = probe::udp_mtu(topo, 1401, Family::V6, wait).expect("probe runs");
        (fits, over, over_v6, uplink_report(topo))
    });
    assert!(fits, "a 1400-byte packet must cross a 1400-byte link");
    assert!(!over, "a 1401-byte IPv4 packet crossed a 1400-byte link");
    assert!(!over_v6, "a 1401-byte IPv6 packet crossed a 1400-byte link");
    assert_eq!(
        rep.counters.dropped_mtu, 2,
        "both oversized packets counted"
    );
}

#[test]
fn a_dead_runs_namespaces_under_a_reused_pid_are_reclaimed() {
    let _machine = exclusive();
    // a crashed run with this process's pid left its namespaces (and no live lock) under the
    // very id the next topology takes
    let id = quiclab_netns::topology::next_id();
    let stale: Vec<String> = ["client", "server"]
        .iter()
        .map(|side| format!("quiclab-{id}-{side}"))
        .collect();
    for name in &stale {
        let st = std::process::Command::new("ip")
            .args(["netns", "add", name])
            .status()
            .unwrap();
        assert!(st.success(), "ip netns add {name}");
    }
    // a process of the dead run still inside one of them
    let mut sleeper = std::process::Command::new("ip")
        .args(["netns", "exec", &stale[0], "sleep", "30"])
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(100));
    let link = symmetric_link(&[("delay", "5ms")]).expect("valid link");
    let r = with_topology(link, None, |topo| {
        assert_eq!(topo.id(), id, "the topology took the dead run's id");
        probe::udp_rtt(topo, &RttConfig::default()).expect("the reclaimed namespaces work")
    });
    // the dead run's process went with its namespace
    let status = sleeper.wait().unwrap();
    assert!(!status.success(), "the stale process was killed: {status}");
    assert_eq!(r.lost(), 0);
    let median = r.median().expect("replies");
    assert!(median >= Duration::from_millis(10), "{median:?}");
}

/// A one-second cubic upload through `link` between devices of MTU 1500 with offloads, and the
/// uplink's report.
fn offloaded_upload(
    link: LinkConfig,
    events: Option<Box<dyn std::io::Write + Send>>,
    pcap: Option<Box<dyn std::io::Write + Send>>,
) -> (probe::Goodput, DirectionReport) {
    let mut topo = Topology::start(TopologyConfig {
        link,
        device_mtu: Some(1500),
        events,
        pcap,
        offloads: true,
    })
    .expect("topology starts");
    let g = probe::tcp_goodput(
        &topo,
        &GoodputConfig {
            flow: Flow::Upload,
            congestion: "cubic".into(),
            duration: Duration::from_secs(1),
            ..GoodputConfig::default()
        },
    )
    .expect("bulk transfer runs");
    (g, uplink_report(&mut topo))
}

#[test]
fn a_senders_super_packets_cross_as_wire_size_segments() {
    let _machine = exclusive();
    let dir = std::env::temp_dir().join(format!("quiclab-segments-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let pcap = dir.join("link.pcap");
    // no impairment: the sender's kernel sends as fast as it can, in super-packets
    let (g, up) = offloaded_upload(
        LinkConfig::default(),
        None,
        Some(Box::new(std::fs::File::create(&pcap).unwrap())),
    );
    assert!(g.bytes > 10_000_000, "{} bytes", g.bytes);
    // the kernel handed the emulator super-packets (offloads are on) ...
    assert!(up.super_packets > 0, "no super-packet read: {up:?}");
    assert_eq!(up.split_errors, 0);
    // and, departing together, they were coalesced again: at least a few segments a write
    assert!(
        up.super_packets_out > 0 && up.super_packets_out * 4 < up.counters.packets_out,
        "{} super-packets written of {} packets",
        up.super_packets_out,
        up.counters.packets_out
    );
    // ... which it counted, queued and captured as the wire packets the sender's kernel would
    // have sent: none above the MTU, most data packets full
    assert!(
        up.counters.bytes_in <= up.counters.packets_in * 1500,
        "{:?}",
        up.counters
    );
    let bytes = std::fs::read(&pcap).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let (mut at, mut lengths, mut stamps) = (24, Vec::new(), Vec::new());
    let word = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap());
    // a pcap of nanosecond stamps (or microsecond ones)
    let per_second = if word(0) == 0xa1b2_3c4d { 1e9 } else { 1e6 };
    while at + 16 <= bytes.len() {
        stamps.push(word(at) as f64 + word(at + 4) as f64 / per_second);
        let len = word(at + 8) as usize;
        lengths.push(len);
        at += 16 + len;
    }
    // both directions' threads capture into one file, in the order the packets were taken
    let behind = stamps.windows(2).filter(|w| w[1] < w[0]).count();
    assert_eq!(
        behind,
        0,
        "of {} packets, {behind} stamped before the one before",
        stamps.len()
    );
    let full = lengths.iter().filter(|&&l| l == 1500).count();
    assert!(
        lengths.iter().all(|&l| l <= 1500),
        "a captured packet above the MTU: {:?}",
        lengths.iter().max()
    );
    assert!(
        full * 2 > lengths.len() / 2,
        "{full} full-size packets of {}",
        lengths.len()
    );
}

#[test]
fn super_packets_leaving_together_are_written_as_read_and_a_loss_cuts_them() {
    let _machine = exclusive();
    let dir = std::env::temp_dir().join(format!("quiclab-as-read-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let events = dir.join("events.jsonl");
    // 1 % loss on the way up and nothing else: a super-packet none of whose segments is lost
    // leaves whole, one with a loss must be cut into its segments and the rest coalesced
    let (g, up) = offloaded_upload(
        selftest::uplink(&[("loss", "1%")], 11).unwrap(),
        Some(Box::new(std::fs::File::create(&events).unwrap())),
        None,
    );
    let log = std::fs::read_to_string(&events).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    // TCP delivered in spite of the loss: the cut segments' checksums held
    assert!(g.bytes > 1_000_000, "{} bytes", g.bytes);
    assert_eq!(up.split_errors, 0);
    assert!(
        up.written_as_read > 0,
        "no super-packet written as read: {up:?}"
    );
    assert!(
        up.written_as_read < up.super_packets,
        "every super-packet was written whole in spite of 1 % loss: {up:?}"
    );
    // every decision was a wire packet's: one arrival per packet pushed, none above the MTU,
    // and the drops are the configured 1 % of those packets
    let (mut arrivals, mut over, mut drops) = (0u64, 0u64, 0u64);
    for line in log.lines().filter(|l| l.contains("\"dir\":\"up\"")) {
        if line.contains("\"event\":\"arrive\"") {
            arrivals += 1;
            let size: u64 = line
                .split("\"size\":")
                .nth(1)
                .and_then(|s| s.split([',', '}']).next())
                .and_then(|s| s.parse().ok())
                .expect("an arrival has a size");
            over += u64::from(size > 1500);
        } else if line.contains("\"event\":\"drop\"") {
            drops += 1;
        }
    }
    assert_eq!(arrivals, up.counters.packets_in);
    assert_eq!(over, 0, "arrivals above the MTU");
    assert_eq!(drops, up.counters.dropped_random);
    let (lo, hi) = binomial_99(0.01, arrivals as usize);
    let f = drops as f64 / arrivals as f64;
    assert!(
        (lo..=hi).contains(&f),
        "{drops} drops of {arrivals} packets ({f:.4}), expected {lo:.4}..{hi:.4}"
    );
}

#[test]
fn namespaces_are_ip_netns_namespaces_configured_and_gone_with_their_topology() {
    let _machine = exclusive();
    let ip = |args: &[&str]| {
        let out = std::process::Command::new("ip")
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "ip {args:?}: {out:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    let link = symmetric_link(&[("delay", "1ms")]).expect("valid link");
    let names = with_topology(link, None, |topo| {
        let names = [Side::Client, Side::Server].map(|s| topo.ns(s).name().to_string());
        let listed = ip(&["netns", "list"]);
        for (side, name, v4, v6) in [
            (Side::Client, &names[0], "198.18.0.1/24", "fd51:c1ab::1/64"),
            (Side::Server, &names[1], "198.18.0.2/24", "fd51:c1ab::2/64"),
        ] {
            assert!(listed.contains(name.as_str()), "{name} not in {listed}");
            // the device's addresses, usable at once (no duplicate address detection), and
            // both devices up
            let addrs = ip(&["-n", name, "-o", "addr", "show", "dev", "quiclab0"]);
            assert!(addrs.contains(v4), "{name}: {addrs}");
            assert!(addrs.contains(v6), "{name}: {addrs}");
            assert!(!addrs.contains("tentative"), "{name}: {addrs}");
            for dev in ["lo", "quiclab0"] {
                let state = ip(&["-n", name, "-o", "link", "show", "dev", dev]);
                assert!(state.contains(",UP"), "{name} {dev}: {state}");
            }
            // a process started inside is found there by `ip netns pids` and by the topology
            let mut p = quiclab_netns::Process::spawn(
                topo.ns(side),
                "sleeper",
                "exec sleep 30",
                &[],
                quiclab_netns::Mode::Background,
            )
            .unwrap();
            let pid = p.pid().unwrap() as i32;
            std::thread::sleep(Duration::from_millis(50));
            let theirs: Vec<i32> = ip(&["netns", "pids", name])
                .split_whitespace()
                .map(|p| p.parse().unwrap())
                .collect();
            assert_eq!(theirs, vec![pid], "ip netns pids {name}");
            assert_eq!(topo.ns(side).pids(), vec![pid]);
            p.stop(Duration::from_secs(1));
        }
        // the endpoints reach each other across the emulator
        let r = probe::udp_rtt(topo, &RttConfig::default()).expect("round trips");
        assert_eq!(r.lost(), 0);
        names
    });
    let listed = ip(&["netns", "list"]);
    for name in &names {
        assert!(!listed.contains(name.as_str()), "{name} left in {listed}");
    }
}

#[test]
fn the_uplink_is_drained_once_its_packets_have_crossed() {
    let _machine = exclusive();
    let delay = Duration::from_millis(50);
    let link = symmetric_link(&[("delay", "50ms")]).expect("valid link");
    with_topology(link, None, |topo| {
        assert!(
            topo.wait_drained(quiclab_link::Direction::Up, Duration::ZERO),
            "nothing sent yet"
        );
        let socket = topo
            .ns(Side::Client)
            .run_in(|| std::net::UdpSocket::bind("198.18.0.1:0"))
            .unwrap();
        let sent = std::time::Instant::now();
        socket
            .send_to(b"the last acknowledgement", "198.18.0.2:9")
            .unwrap();
        // held for the one-way delay: not drained a millisecond after it was sent, nor at
        // half the delay
        std::thread::sleep(Duration::from_millis(1));
        assert!(!topo.wait_drained(quiclab_link::Direction::Up, Duration::ZERO));
        assert!(!topo.wait_drained(quiclab_link::Direction::Up, delay / 2));
        assert!(topo.wait_drained(quiclab_link::Direction::Up, 2 * delay));
        let took = sent.elapsed();
        // drained when the delay is over, seen within the wait's 0.5 ms step and a wake-up
        assert!(
            took >= delay,
            "drained after {took:?}, before the {delay:?} delay"
        );
        assert!(
            took <= delay + Duration::from_millis(5),
            "drained only after {took:?}"
        );
    });
}

#[test]
fn commands_started_by_a_bound_thread_run_on_its_cores_only() {
    let _machine = exclusive();
    let link = symmetric_link(&[("delay", "1ms")]).expect("valid link");
    let cores = std::thread::available_parallelism().unwrap().get();
    with_topology(link, None, |topo| {
        let allowed = |topo: &Topology| {
            let p = quiclab_netns::Process::spawn_with_stdout(
                topo.ns(Side::Client),
                "status",
                "grep Cpus_allowed_list /proc/self/status",
                &[],
                quiclab_netns::Mode::Background,
                std::process::Stdio::piped(),
            )
            .unwrap();
            let mut out = String::new();
            let mut p = p;
            std::io::Read::read_to_string(&mut p.take_stdout().unwrap(), &mut out).unwrap();
            p.wait_timeout(Duration::from_secs(5)).unwrap();
            out.split_whitespace().last().unwrap().to_string()
        };
        let last = cores - 1;
        quiclab_netns::process::bind_children_of_this_thread(Some(&[last]));
        assert_eq!(allowed(topo), last.to_string());
        quiclab_netns::process::bind_children_of_this_thread(None);
        let all = if cores == 1 {
            "0".to_string()
        } else {
            format!("0-{last}")
        };
        assert_eq!(allowed(topo), all);
    });
}

#[test]
fn a_started_program_gets_its_namespaces_sysctls_and_the_descriptors_it_keeps() {
    use std::io::Read;
    use std::os::fd::AsRawFd;
    let _machine = exclusive();
    let link = symmetric_link(&[("delay", "1ms")]).expect("valid link");
    let host = || std::fs::read_to_string("/proc/sys/net/ipv4/tcp_fastopen").unwrap();
    let before = host();
    // neither a new namespace's default (1) nor the host's value
    let other = if before.trim() == "3" { "2" } else { "3" };
    with_topology(link, None, |topo| {
        // a pipe whose write end the program inherits, another that it must not (named by
        // their paths: the shell redirects single-digit descriptors only)
        let (mut kept_r, kept_w) = std::io::pipe().unwrap();
        let (_other_r, other_w) = std::io::pipe().unwrap();
        let (kw, ow) = (kept_w.as_raw_fd(), other_w.as_raw_fd());
        let mut cmd = std::process::Command::new("sh");
        cmd.arg("-c").arg(format!(
            "cat /proc/sys/net/ipv4/tcp_fastopen > /proc/self/fd/{kw}; \
             if [ -e /proc/self/fd/{ow} ]; then echo leaked > /proc/self/fd/{kw}; fi"
        ));
        let setup = quiclab_netns::Setup {
            keep: vec![kw],
            sysctls: vec![(
                "/proc/sys/net/ipv4/tcp_fastopen".to_string(),
                other.to_string(),
            )],
        };
        let mut p = quiclab_netns::Process::start(
            topo.ns(Side::Server),
            "sysctl reader",
            cmd,
            quiclab_netns::Mode::Background,
            &setup,
        )
        .unwrap();
        let status = p.wait_timeout(Duration::from_secs(5)).unwrap().unwrap();
        assert!(status.success(), "{status}");
        drop(kept_w);
        let mut out = String::new();
        kept_r.read_to_string(&mut out).unwrap();
        // written in the program's namespace before it ran, read through the kept pipe; the
        // descriptor not asked for is closed at its exec
        assert_eq!(out.trim(), other, "{out:?}");
        // the host's own namespace is untouched
        assert_eq!(host(), before);
        // a sysctl that cannot be written fails the start, naming it
        let e = quiclab_netns::Process::start(
            topo.ns(Side::Server),
            "bad",
            std::process::Command::new("true"),
            quiclab_netns::Mode::Background,
            &quiclab_netns::Setup {
                keep: Vec::new(),
                sysctls: vec![("/proc/sys/net/ipv4/no_such_sysctl".into(), "1".into())],
            },
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("no_such_sysctl"), "{e}");
    });
}
