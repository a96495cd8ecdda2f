//! `quiclab bench link`: the emulator's forwarding capacity next to a direct veth pair, and its
//! departure-time precision, measured side by side in one run.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::{Args, Subcommand};
use quiclab_link::{Direction, LinkConfig};
use quiclab_netns::topology::SERVER_V4;
use quiclab_netns::{DirectionReport, Mode, Netns, Process, Side, Topology, TopologyConfig};

use crate::cmd_link::parse_time;
use crate::signals::Signals;

/// Benchmarks that print figures.
#[derive(Args)]
pub struct BenchCmd {
    #[command(subcommand)]
    what: BenchWhat,
}

#[derive(Subcommand)]
enum BenchWhat {
    Link(LinkBench),
    Stacks(crate::bench_stacks::StacksBench),
}

/// Forwarding capacity and timer precision of the link emulator.
///
/// Capacity: one TCP flow (iperf3, cubic) through the emulator with no impairment at MTU 1500
/// and 9000, next to the same namespaces joined directly by a veth pair (offloads on, and off
/// where ethtool is available), with the emulator/veth ratio. Precision: actual minus scheduled
/// departure time of every packet while a TCP flow fills a 10 Mbit/s and a 1 Gbit/s link.
#[derive(Args)]
pub struct LinkBench {
    /// Length of each measurement.
    #[arg(long, value_name = "TIME", default_value = "5s", value_parser = parse_time)]
    duration: Duration,
}

pub fn bench(c: BenchCmd) -> anyhow::Result<i32> {
    match c.what {
        BenchWhat::Link(b) => link(b),
        BenchWhat::Stacks(b) => crate::bench_stacks::stacks(b),
    }
}

/// What one iperf3 run measured.
struct Flow {
    gbps: f64,
    retransmits: u64,
    secs: f64,
}

/// Runs an iperf3 server and client across `server`/`client` namespaces.
fn iperf(client: &Netns, server: &Netns, d: Duration, signals: &Signals) -> anyhow::Result<Flow> {
    let dir = std::env::temp_dir().join(format!("quiclab-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let log = dir.join("iperf3.json");
    let _ = std::fs::remove_file(&log);
    let mut srv = Process::spawn(
        server,
        "iperf3 server",
        "exec iperf3 -s -1 >/dev/null",
        &[],
        Mode::Background,
    )?;
    std::thread::sleep(Duration::from_millis(300));
    let cmd = format!(
        "exec iperf3 -c {SERVER_V4} -C cubic -t {} -J --logfile {}",
        d.as_secs_f64(),
        log.display()
    );
    let mut cli = Process::spawn(client, "iperf3 client", &cmd, &[], Mode::Background)?;
    let deadline = Instant::now() + d + Duration::from_secs(10);
    let st = loop {
        if let Some(st) = cli.try_wait()? {
            break st;
        }
        if signals.any() {
            bail!("interrupted");
        }
        if Instant::now() > deadline {
            bail!("iperf3 did not finish in time");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    srv.stop(Duration::from_millis(200));
    let flow = parse_iperf(&log);
    let _ = std::fs::remove_dir_all(&dir);
    if !st.success() {
        bail!("iperf3 failed ({st}); is iperf3 installed? (.ci/setup installs it)");
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
    })
}

fn emulated(
    cfg: LinkConfig,
    mtu: u32,
    d: Duration,
    s: &Signals,
) -> anyhow::Result<(Flow, Vec<DirectionReport>)> {
    let mut topo = Topology::start(TopologyConfig {
        link: cfg,
        device_mtu: Some(mtu),
        events: None,
        pcap: None,
    })?;
    let flow = iperf(topo.ns(Side::Client), topo.ns(Side::Server), d, s)?;
    let reports = topo.finish()?;
    Ok((flow, reports))
}

fn up(reports: &[DirectionReport]) -> anyhow::Result<&DirectionReport> {
    quiclab_netns::topology::report(reports, Direction::Up).context("no uplink report")
}

fn link(b: LinkBench) -> anyhow::Result<i32> {
    let signals = Signals::install()?;
    let d = b.duration;
    let has_ethtool = std::process::Command::new("ethtool")
        .arg("--version")
        .output()
        .is_ok();
    println!(
        "Forwarding capacity: one TCP flow (iperf3, cubic, {:.0} s each)",
        d.as_secs_f64()
    );
    println!(
        "{:<44} {:>10} {:>12} {:>10} {:>12}",
        "path", "Gbit/s", "packets/s", "retrans", "kernel drops"
    );
    let mut emu = Vec::new();
    for mtu in [1500u32, 9000] {
        let (flow, reports) = emulated(LinkConfig::default(), mtu, d, &signals)?;
        let r = up(&reports)?;
        let pps = r.counters.packets_out as f64 / flow.secs.max(1e-9);
        println!(
            "{:<44} {:>10.2} {:>12.0} {:>10} {:>12}",
            format!("emulator, no impairment, MTU {mtu}"),
            flow.gbps,
            pps,
            flow.retransmits,
            r.device_drops
        );
        emu.push((mtu, flow.gbps));
    }
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
        println!(
            "{label:<44} {:>10.2} {:>12} {:>10} {:>12}",
            flow.gbps, "-", flow.retransmits, "-"
        );
        refs.push((mtu, offloads, flow.gbps));
    }
    println!();
    for (mtu, g) in &emu {
        for (rm, off, rg) in &refs {
            if rm == mtu {
                println!(
                    "emulator / veth (offloads {}) at MTU {mtu}: {:.2}",
                    if *off { "on" } else { "off" },
                    g / rg
                );
            }
        }
    }

    println!(
        "\nDeparture precision: actual minus scheduled departure, one TCP flow filling the link"
    );
    println!(
        "{:<30} {:>10} {:>10} {:>10} {:>10} {:>10}",
        "link", "packets", "p50 us", "p99 us", "max us", "Gbit/s"
    );
    for rate in ["10mbit", "1gbit"] {
        let mut cfg = LinkConfig::default();
        let load = |_: &str| -> Result<quiclab_link::Trace, String> { Err("no files".into()) };
        for dir in [&mut cfg.up, &mut cfg.down] {
            dir.set("rate", rate, &load)?;
            dir.set("delay", "5ms", &load)?;
        }
        let (flow, reports) = emulated(cfg, 1500, d, &signals)?;
        let r = up(&reports)?;
        println!(
            "{:<30} {:>10} {:>10.1} {:>10.1} {:>10.1} {:>10.3}",
            format!("{rate}, 5 ms delay, MTU 1500"),
            r.lateness_ns.len(),
            r.lateness_us(0.5),
            r.lateness_us(0.99),
            r.lateness_ns.max() as f64 / 1000.0,
            flow.gbps
        );
    }
    Ok(0)
}
