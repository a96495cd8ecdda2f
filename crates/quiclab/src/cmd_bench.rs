//! `quiclab bench link` (the others: `bench_stacks.rs`, `bench_trials.rs`): the emulator's forwarding capacity next to a direct veth pair, and its
//! departure-time precision, measured side by side in one run.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::{Args, Subcommand};
use quiclab_link::{Direction, LinkConfig};
use quiclab_netns::topology::SERVER_V4;
use quiclab_netns::{DirectionReport, Mode, Netns, Process, Side, Topology, TopologyConfig};
use serde_json::{Value, json};

use crate::cmd_link::parse_time;
use crate::out::Out;
use crate::signals::Signals;

/// Benchmarks that print figures.
#[derive(Args)]
pub struct BenchCmd {
    #[command(subcommand)]
    what: BenchWhat,
    /// Print the figures as one JSON object on standard output when the benchmark ends (the
    /// readable table goes to standard error as it is measured).
    #[arg(long, global = true)]
    json: bool,
}

#[derive(Subcommand)]
enum BenchWhat {
    Link(LinkBench),
    Stacks(crate::bench_stacks::StacksBench),
    Trials(crate::bench_trials::TrialsBench),
}

/// Forwarding capacity and timer precision of the link emulator.
///
/// Capacity: one TCP flow (iperf3, cubic) through the emulator with no impairment at MTU 1500
/// and 9000, without and with segmentation offloads on its devices (quiclab link --offloads);
/// through a bare copy between the same TUN devices (no emulator: the floor of its device
/// I/O); through the emulator (offloads on) behind a rate limit at half its measured capacity
/// (the rate it delivers against the limit); and over the same namespaces joined directly by a veth
/// pair (offloads on, and off where ethtool is available), with the emulator/veth ratio. Each
/// row gives Gbit/s, the emulator's packets per second, and the CPU seconds the whole machine
/// spent per GB carried. Precision: actual minus scheduled departure time of every packet while
/// a TCP flow fills a 10 Mbit/s and a 1 Gbit/s link.
#[derive(Args)]
pub struct LinkBench {
    /// Length of each measurement.
    #[arg(long, value_name = "TIME", default_value = "5s", value_parser = parse_time)]
    duration: Duration,
}

pub fn bench(c: BenchCmd) -> anyhow::Result<i32> {
    let out = Out::new(c.json);
    match c.what {
        BenchWhat::Link(b) => link(b, out),
        BenchWhat::Stacks(b) => crate::bench_stacks::stacks(b, out),
        BenchWhat::Trials(b) => crate::bench_trials::trials(b, out),
    }
}

/// What one iperf3 run measured.
struct Flow {
    gbps: f64,
    retransmits: u64,
    secs: f64,
    /// Bytes received.
    bytes: f64,
    /// CPU time the whole machine spent over the run, s.
    cpu_s: f64,
}

impl Flow {
    /// CPU seconds per GB carried.
    fn cpu_per_gb(&self) -> f64 {
        self.cpu_s / (self.bytes / 1e9).max(1e-9)
    }
}

/// CPU time the machine has spent busy since boot, s (/proc/stat: every state but idle, iowait
/// and steal, the time the hypervisor gave to others).
pub(crate) fn busy_cpu_s() -> f64 {
    let text = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let Some(line) = text.lines().find(|l| l.starts_with("cpu ")) else {
        return 0.0;
    };
    let v: Vec<f64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal ...
    let busy: f64 = v
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != 3 && *i != 4 && *i < 7)
        .map(|(_, x)| x)
        .sum();
    // SAFETY: sysconf has no preconditions.
    let tick = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    busy / tick
}

/// Waits for a benchmark's client to exit: its status, or an error on a signal or past
/// `deadline`.
pub(crate) fn wait_for_exit(
    p: &mut Process,
    deadline: Instant,
    signals: &Signals,
) -> anyhow::Result<std::process::ExitStatus> {
    loop {
        if let Some(st) = p.try_wait()? {
            return Ok(st);
        }
        if signals.any() {
            bail!("interrupted");
        }
        if Instant::now() > deadline {
            bail!("did not finish in time");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// What a benchmark made of campaign trials needs to run them one at a time: the stop that
/// Ctrl-C sets and a scratch directory for their files (removed when dropped).
pub(crate) struct TrialBench {
    pub(crate) signals: crate::signals::Signals,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    env: quiclab_runner::trial::TrialEnv,
    _scratch: Option<ScratchDir>,
}

impl TrialBench {
    /// For `quiclab bench WHAT`: refuses without root (trials make namespaces).
    pub(crate) fn new(what: &str) -> anyhow::Result<TrialBench> {
        Self::for_command(&format!("bench {what}"), None)
    }

    /// For `quiclab COMMAND`: the trials' folders go to `keep` (kept), or to a scratch
    /// directory removed at the end. Refuses without root (trials make namespaces).
    pub(crate) fn for_command(command: &str, keep: Option<&Path>) -> anyhow::Result<TrialBench> {
        if !quiclab_netns::sys::is_root() {
            crate::usage::usage!("quiclab {command} creates network namespaces: run it as root");
        }
        let (dir, scratch) = match keep {
            Some(k) => {
                // an output directory like any other: never one another user controls
                quiclab_store::output::check_dir(k)?;
                std::fs::create_dir_all(k).with_context(|| format!("creating {}", k.display()))?;
                (k.to_path_buf(), None)
            }
            None => {
                let s = ScratchDir::new(&command.replace(' ', "-"))?;
                (s.path().to_path_buf(), Some(s))
            }
        };
        Ok(TrialBench {
            signals: crate::signals::Signals::install()?,
            stop: Default::default(),
            env: quiclab_runner::trial::TrialEnv {
                bin: std::env::current_exe().context("finding the quiclab binary")?,
                shown: dir.clone(),
                dir,
                events: false,
            },
            _scratch: scratch,
        })
    }

    /// The directory the trials' folders go to.
    pub(crate) fn dir(&self) -> &Path {
        &self.env.dir
    }

    /// Whether trials write their link's events (`events.jsonl`), as campaigns do; not by
    /// default.
    pub(crate) fn record_events(&mut self, events: bool) {
        self.env.events = events;
    }

    /// Runs one trial of `plan`, or fails as interrupted once a signal came.
    pub(crate) fn run(
        &self,
        plan: &quiclab_runner::plan::Plan,
        spec: &quiclab_runner::expand::TrialSpec,
    ) -> anyhow::Result<Box<quiclab_store::TrialRecord>> {
        use quiclab_runner::trial::TrialEnd;
        if self.signals.any() {
            self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
            bail!("interrupted");
        }
        match quiclab_runner::trial::run(&self.env, plan, spec, &self.stop) {
            TrialEnd::Done(r) => Ok(r),
            TrialEnd::Interrupted => bail!("interrupted"),
        }
    }
}

/// A benchmark's scratch directory under the system's temporary one, removed when dropped
/// (on errors and panics too, e.g. a closed stdout).
pub(crate) struct ScratchDir(std::path::PathBuf);

impl ScratchDir {
    /// Creates `quiclab-{what}-{pid}` (`what`: `bench-trials`, `fingerprint`).
    pub(crate) fn new(what: &str) -> anyhow::Result<ScratchDir> {
        let dir = std::env::temp_dir().join(format!("quiclab-{what}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        Ok(ScratchDir(dir))
    }

    pub(crate) fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Runs an iperf3 server and client across `server`/`client` namespaces.
fn iperf(client: &Netns, server: &Netns, d: Duration, signals: &Signals) -> anyhow::Result<Flow> {
    let dir = ScratchDir::new("bench-iperf3")?;
    let log = dir.path().join("iperf3.json");
    let _ = std::fs::remove_file(&log);
    // the server's messages go to a file (stopping it makes it say it was interrupted), read
    // back only if the flow fails
    let server_log = dir.path().join("server.log");
    let mut srv = Process::spawn(
        server,
        "iperf3 server",
        &format!("exec iperf3 -s -1 >/dev/null 2>{}", server_log.display()),
        &[],
        Mode::Background,
    )?;
    std::thread::sleep(Duration::from_millis(300));
    let cmd = format!(
        "exec iperf3 -c {SERVER_V4} -C cubic -t {} -J --logfile {}",
        d.as_secs_f64(),
        log.display()
    );
    let cpu0 = busy_cpu_s();
    let mut cli = Process::spawn(client, "iperf3 client", &cmd, &[], Mode::Background)?;
    let st = wait_for_exit(
        &mut cli,
        Instant::now() + d + Duration::from_secs(10),
        signals,
    )
    .context("iperf3's client")?;
    let cpu_s = busy_cpu_s() - cpu0;
    srv.stop(Duration::from_millis(200));
    let flow = parse_iperf(&log).map(|f| Flow { cpu_s, ..f });
    if !st.success() {
        let said = std::fs::read_to_string(&server_log).unwrap_or_default();
        bail!(
            "iperf3 failed ({st}); is iperf3 installed? (.ci/setup installs it){}",
            match said.trim() {
                "" => String::new(),
                s => format!("; its server said: {s}"),
            }
        );
    }
    flow
}

fn parse_iperf(path: &Path) -> anyhow::Result<Flow> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let v: serde_json::Value = serde_json::from_str(&text).context("iperf3 wrote invalid JSON")?;
    if let Some(e) = v["error"].as_str() {
        bail!("iperf3: {e}");
    }
    let recv = &v["end"]["sum_received"];
    Ok(Flow {
        gbps: recv["bits_per_second"]
            .as_f64()
            .context("iperf3 JSON has no end.sum_received")?
            / 1e9,
        retransmits: v["end"]["sum_sent"]["retransmits"].as_u64().unwrap_or(0),
        secs: recv["seconds"].as_f64().unwrap_or(0.0),
        bytes: recv["bytes"].as_f64().unwrap_or(0.0),
        cpu_s: 0.0,
    })
}

fn emulated(
    cfg: LinkConfig,
    mtu: u32,
    offloads: bool,
    d: Duration,
    s: &Signals,
) -> anyhow::Result<(Flow, Vec<DirectionReport>)> {
    let mut topo = Topology::start(TopologyConfig {
        link: cfg,
        device_mtu: Some(mtu),
        events: None,
        pcap: None,
        offloads,
    })?;
    let flow = iperf(topo.ns(Side::Client), topo.ns(Side::Server), d, s)?;
    let reports = topo.finish()?;
    Ok((flow, reports))
}

fn up(reports: &[DirectionReport]) -> anyhow::Result<&DirectionReport> {
    quiclab_netns::topology::report(reports, Direction::Up).context("no uplink report")
}

fn link(b: LinkBench, out: Out) -> anyhow::Result<i32> {
    let signals = Signals::install()?;
    let d = b.duration;
    let has_ethtool = std::process::Command::new("ethtool")
        .arg("--version")
        .output()
        .is_ok();
    out.line(format!(
        "Forwarding capacity: one TCP flow (iperf3, cubic, {:.0} s each)",
        d.as_secs_f64()
    ));
    out.line(format!(
        "{:<48} {:>8} {:>11} {:>8} {:>9} {:>12}",
        "path", "Gbit/s", "packets/s", "retrans", "CPU s/GB", "kernel drops"
    ));
    let mut capacity_rows: Vec<Value> = Vec::new();
    let mut row = |label: &str, flow: &Flow, pps: Option<f64>, drops: Option<u64>| {
        let opt = |v: Option<String>| v.unwrap_or_else(|| "-".into());
        out.line(format!(
            "{label:<48} {:>8.2} {:>11} {:>8} {:>9.2} {:>12}",
            flow.gbps,
            opt(pps.map(|p| format!("{p:.0}"))),
            flow.retransmits,
            flow.cpu_per_gb(),
            opt(drops.map(|n| n.to_string()))
        ));
        capacity_rows.push(json!({
            "path": label,
            "gbps": flow.gbps,
            "packets_per_s": pps,
            "retransmits": flow.retransmits,
            "cpu_s_per_gb": flow.cpu_per_gb(),
            "kernel_drops": drops,
        }));
    };
    let on_off = |o: bool| if o { "on" } else { "off" };
    let mut emu = Vec::new();
    for offloads in [false, true] {
        for mtu in [1500u32, 9000] {
            let (flow, reports) = emulated(LinkConfig::default(), mtu, offloads, d, &signals)?;
            let r = up(&reports)?;
            let pps = r.counters.packets_out as f64 / flow.secs.max(1e-9);
            row(
                &format!("emulator, offloads {}, MTU {mtu}", on_off(offloads)),
                &flow,
                Some(pps),
                Some(r.device_drops),
            );
            emu.push((mtu, offloads, flow.gbps));
        }
    }
    for offloads in [false, true] {
        for mtu in [1500u32, 9000] {
            let mut topo = Topology::bare_copy(mtu, offloads)?;
            let flow = iperf(topo.ns(Side::Client), topo.ns(Side::Server), d, &signals)?;
            let reports = topo.finish()?;
            let r = up(&reports)?;
            row(
                &format!("bare TUN copy, offloads {}, MTU {mtu}", on_off(offloads)),
                &flow,
                Some(r.counters.packets_out as f64 / flow.secs.max(1e-9)),
                Some(r.device_drops),
            );
        }
    }
    // accuracy: a rate limit at half the emulator's capacity at MTU 1500 with offloads, on
    // whole megabits
    let capacity = emu
        .iter()
        .find(|(mtu, o, _)| *mtu == 1500 && *o)
        .map_or(1.0, |e| e.2);
    let half_mbit = (capacity * 1000.0 / 2.0).floor().max(1.0);
    let mut cfg = LinkConfig::default();
    let load = |_: &str| -> Result<quiclab_link::Trace, String> { Err("no files".into()) };
    for dir in [&mut cfg.up, &mut cfg.down] {
        dir.set("rate", &format!("{half_mbit}mbit"), &load)?;
    }
    let (flow, reports) = emulated(cfg, 1500, true, d, &signals)?;
    let r = up(&reports)?;
    row(
        &format!("emulator, offloads on, rate {half_mbit} Mbit/s, MTU 1500"),
        &flow,
        Some(r.counters.packets_out as f64 / flow.secs.max(1e-9)),
        Some(r.device_drops),
    );
    // the rate applies to whole IP packets: what the link carried over the transfer
    let carried_gbps = r.counters.bytes_out as f64 * 8.0 / flow.secs.max(1e-9) / 1e9;
    let mut refs = Vec::new();
    let mut variants = vec![(1500u32, true), (9000, true)];
    if has_ethtool {
        variants.insert(0, (1500, false));
    }
    for (mtu, offloads) in variants {
        let veth = Topology::direct(mtu, offloads)?;
        let flow = iperf(veth.ns(Side::Client), veth.ns(Side::Server), d, &signals)?;
        let label = format!(
            "direct veth, offloads {}, MTU {mtu}",
            if offloads { "on" } else { "off" }
        );
        row(&label, &flow, None, None);
        refs.push((mtu, offloads, flow.gbps));
    }
    let limit_error = (carried_gbps * 1000.0 / half_mbit - 1.0) * 100.0;
    out.line("");
    out.line(format!(
        "rate limit {half_mbit} Mbit/s: the link carried {carried_gbps:.3} Gbit/s of IP packets \
         ({limit_error:+.1} % of the limit; TCP goodput {:.3})",
        flow.gbps
    ));
    let mut ratios = Vec::new();
    for (mtu, offloads, g) in &emu {
        for (rm, off, rg) in &refs {
            if rm == mtu && off == offloads {
                out.line(format!(
                    "emulator / veth, both with offloads {} at MTU {mtu}: {:.2}",
                    on_off(*off),
                    g / rg
                ));
                ratios.push(json!({"mtu": mtu, "offloads": off, "emulator_over_veth": g / rg}));
            }
        }
    }

    out.line(
        "\nDeparture precision: actual minus scheduled departure, one TCP flow filling the link",
    );
    out.line(format!(
        "{:<30} {:>10} {:>10} {:>10} {:>10} {:>10}",
        "link", "packets", "p50 us", "p99 us", "max us", "Gbit/s"
    ));
    let mut precision = Vec::new();
    for rate in ["10mbit", "1gbit"] {
        let mut cfg = LinkConfig::default();
        let load = |_: &str| -> Result<quiclab_link::Trace, String> { Err("no files".into()) };
        for dir in [&mut cfg.up, &mut cfg.down] {
            dir.set("rate", rate, &load)?;
            dir.set("delay", "5ms", &load)?;
        }
        let (flow, reports) = emulated(cfg, 1500, false, d, &signals)?;
        let r = up(&reports)?;
        let link = format!("{rate}, 5 ms delay, MTU 1500");
        let max_us = r.lateness_ns.max() as f64 / 1000.0;
        out.line(format!(
            "{link:<30} {:>10} {:>10.1} {:>10.1} {max_us:>10.1} {:>10.3}",
            r.lateness_ns.len(),
            r.lateness_us(0.5),
            r.lateness_us(0.99),
            flow.gbps
        ));
        precision.push(json!({
            "link": link,
            "packets": r.lateness_ns.len(),
            "lateness_us": {"p50": r.lateness_us(0.5), "p99": r.lateness_us(0.99), "max": max_us},
            "gbps": flow.gbps,
        }));
    }
    out.summary(|| {
        json!({
            "duration_s": d.as_secs_f64(),
            "capacity": capacity_rows,
            "rate_limit": {
                "limit_mbit": half_mbit,
                "carried_gbps": carried_gbps,
                "error_percent": limit_error,
                "goodput_gbps": flow.gbps,
            },
            "emulator_over_veth": ratios,
            "precision": precision,
        })
    });
    Ok(0)
}
