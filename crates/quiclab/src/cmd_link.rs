//! `quiclab link` and `quiclab clean`.

use std::os::fd::AsFd;
use std::os::unix::process::ExitStatusExt;
use std::process::{ExitStatus, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Args;
use quiclab_link::{Counters, DropReason, units};
use quiclab_netns::topology::{CLIENT_V4, SERVER_V4};
use quiclab_netns::{DirectionReport, Mode, Process, Side, Topology, TopologyConfig};
use serde_json::{Value, json};

use crate::linkargs::LinkArgs;
use crate::signals::Signals;
use crate::usage;

/// Run a server command and a client command on either side of an emulated link.
///
/// Both commands run under `sh -c`, the server in the server namespace and the client in the
/// client namespace, with QUICLAB_SERVER, QUICLAB_SERVER6, QUICLAB_CLIENT and QUICLAB_CLIENT6 in
/// their environment. quiclab waits (up to --wait) for the server to open a socket, runs the
/// client to completion and exits with the client's exit code. Without --client, an interactive
/// shell opens in the client namespace.
///
/// Output: quiclab's standard output carries the client's output only (and, with --json, a
/// summary of the link as its last line); the server's output goes to standard error or to
/// --server-output, and quiclab's own messages to standard error. So a client's JSON can be
/// piped on: quiclab link ... --client 'quiclab get --json URL' | jq .
///
/// Example:
///   quiclab link --rate 10mbit --delay 25ms --loss 1% --seed 7 \
///     --server 'iperf3 -s' --client 'iperf3 -c $QUICLAB_SERVER'
#[derive(Args)]
#[command(verbatim_doc_comment)]
pub struct LinkCmd {
    /// Command to run in the server namespace (under sh -c).
    #[arg(long, value_name = "CMD")]
    server: Option<String>,
    /// Command to run in the client namespace (under sh -c); default: an interactive shell.
    #[arg(long, value_name = "CMD")]
    client: Option<String>,
    /// Write every packet event (arrive, enqueue with backlog, drop with reason, depart) as JSON
    /// lines, in the order the emulator handled them; sort by t_ns (nanoseconds since the link
    /// started) for a timeline.
    #[arg(long, value_name = "FILE")]
    events: Option<std::path::PathBuf>,
    /// Write a packet capture here (pcap, raw IP): the client's view, every packet it sends
    /// (including those the link drops) and every packet it receives, with real-time
    /// timestamps. With SSLKEYLOGFILE set for the endpoints, Wireshark decrypts TLS and QUIC.
    #[arg(long, value_name = "FILE")]
    pcap: Option<std::path::PathBuf>,
    /// Where the server command's standard output goes (default: quiclab's standard error).
    #[arg(long, value_name = "FILE")]
    server_output: Option<std::path::PathBuf>,
    /// How long to wait for the server command to open a socket before starting the client; a
    /// server that opens none by then is an error (exit 1). 0s: start the client at once.
    #[arg(long, value_name = "TIME", default_value = "3s", value_parser = parse_time)]
    wait: Duration,
    /// After the client's output, print a summary of the link as one JSON object on the last
    /// line of standard output: the link's id and seed, the client's exit code, and per
    /// direction the packets in, out, dropped (by reason), duplicated and still in flight, the
    /// largest backlog and the departure lateness.
    #[arg(long)]
    json: bool,
    /// MTU of the namespaces' devices (default: the link MTU, or 1500). Set it above --mtu to
    /// let oversized packets reach the link, which drops and counts them.
    #[arg(long, value_name = "BYTES")]
    device_mtu: Option<u32>,
    /// Segmentation offloads on the devices: the endpoints' kernels hand over and take TCP and
    /// UDP super-packets of up to 64 KiB, which the emulator splits into wire-size packets for
    /// every decision and coalesces again when they leave together. Several times faster above
    /// a few Gbit/s (see quiclab bench link).
    #[arg(long)]
    offloads: bool,
    #[command(flatten)]
    link: LinkArgs,
}

/// A duration argument (`25ms`, `1.5s`), for every command's flags.
pub(crate) fn parse_time(s: &str) -> Result<Duration, String> {
    units::parse_duration(s).map_err(|e| e.to_string())
}

/// Remove namespaces and processes left behind by a quiclab run that crashed or was killed.
///
/// Only namespaces named quiclab-* are touched, and only those whose run is no longer alive
/// (its lock in /run/quiclab is free); every process inside them is killed.
#[derive(Args)]
pub struct CleanCmd {
    /// Also remove the namespaces of runs that are still alive.
    #[arg(long)]
    force: bool,
}

pub fn clean(c: CleanCmd) -> anyhow::Result<i32> {
    if !quiclab_netns::sys::is_root() {
        // a run without root leaves no namespace: its user namespace ends with it
        for d in quiclab_netns::rootless::clean_stale() {
            println!("removed {}", d.display());
        }
        println!(
            "0 namespace(s) removed: runs without root keep their namespaces in a user \
             namespace of their own, which ends with them (root's are root's to clean)"
        );
        return Ok(0);
    }
    let r = quiclab_netns::clean::clean(c.force)?;
    for n in &r.namespaces {
        println!("removed namespace {n}");
    }
    for n in &r.skipped_live {
        println!("kept namespace {n}: its run is alive (use --force to remove it anyway)");
    }
    println!(
        "{} namespace(s) removed, {} process(es) killed",
        r.namespaces.len(),
        r.processes
    );
    Ok(0)
}

pub fn link(c: LinkCmd) -> anyhow::Result<i32> {
    let cfg = c.link.config()?;
    let signals = Signals::install()?;
    let events: Option<Box<dyn std::io::Write + Send>> = match &c.events {
        Some(p) => Some(Box::new(
            quiclab_store::output::create(p).context("--events: cannot create the file")?,
        )),
        None => None,
    };
    let pcap: Option<Box<dyn std::io::Write + Send>> = match &c.pcap {
        Some(p) => Some(Box::new(
            quiclab_store::output::create(p).context("--pcap: cannot create the file")?,
        )),
        None => None,
    };
    let mut topo = Topology::start(TopologyConfig {
        link: cfg.clone(),
        device_mtu: c.device_mtu,
        events,
        pcap,
        offloads: c.offloads,
    })?;
    eprintln!(
        "quiclab: link {}: client {CLIENT_V4} <-> server {SERVER_V4}, seed {}",
        topo.id(),
        cfg.seed
    );
    let env = topo.env();
    let mut server = match &c.server {
        Some(cmd) => {
            let stdout = match &c.server_output {
                Some(p) => Stdio::from(
                    quiclab_store::output::create(p)
                        .context("--server-output: cannot create the file")?,
                ),
                None => Stdio::from(
                    std::io::stderr()
                        .as_fd()
                        .try_clone_to_owned()
                        .context("cannot pass standard error to the server")?,
                ),
            };
            Some(Process::spawn_with_stdout(
                topo.ns(Side::Server),
                "server",
                cmd,
                &env,
                Mode::Background,
                stdout,
            )?)
        }
        None => None,
    };
    if let Some(s) = &mut server {
        wait_for_socket(s, c.wait, &signals)?;
    }
    let status = match &c.client {
        Some(cmd) => {
            let mut client =
                Process::spawn(topo.ns(Side::Client), "client", cmd, &env, Mode::Foreground)?;
            loop {
                if let Some(st) = client.try_wait()? {
                    break Some(st);
                }
                if signals.any() {
                    eprintln!("quiclab: interrupted; stopping");
                    client.stop(Duration::from_millis(500));
                    break None;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        None => {
            eprintln!(
                "quiclab: shell in the client namespace; the server is $QUICLAB_SERVER. Exit the shell to stop."
            );
            let shell = "exec ${SHELL:-/bin/sh} -i";
            let mut sh = Process::spawn(
                topo.ns(Side::Client),
                "shell",
                shell,
                &env,
                Mode::Interactive,
            )?;
            // Ctrl-C belongs to the shell here; only SIGTERM/SIGHUP stop quiclab.
            loop {
                if let Some(st) = sh.try_wait()? {
                    break Some(st);
                }
                if signals.terminated() {
                    sh.stop(Duration::from_millis(500));
                    break None;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    };
    if let Some(mut s) = server.take() {
        s.stop(Duration::from_millis(500));
    }
    let reports = topo.finish()?;
    for r in &reports {
        eprintln!("quiclab: {}", summary(r));
        if r.device_drops > 0 {
            eprintln!(
                "quiclab: warning: {} packets ({}) were dropped by the kernel before reaching the emulator \
                 (TUN queue full: the endpoints outran it)",
                r.device_drops,
                r.dir.as_str()
            );
        }
        if let Some(e) = &r.error {
            eprintln!("quiclab: error: {e}");
        }
    }
    let id = topo.id().to_string();
    drop(topo);
    let code = match status {
        Some(st) => exit_code(st),
        None => usage::INTERRUPTED,
    };
    if c.json {
        println!("{}", summary_json(&id, cfg.seed, code, &reports));
    }
    Ok(code)
}

/// `--json`'s summary object.
fn summary_json(id: &str, seed: u64, client_exit: i32, reports: &[DirectionReport]) -> Value {
    let directions: Vec<Value> = reports
        .iter()
        .map(|r| {
            let c = &r.counters;
            let dropped: serde_json::Map<String, Value> = DropReason::ALL
                .iter()
                .map(|&d| (d.as_str().to_string(), c.dropped(d).into()))
                .collect();
            let lateness = (!r.lateness_ns.is_empty()).then(|| {
                json!({
                    "p50": r.lateness_us(0.5),
                    "p99": r.lateness_us(0.99),
                    "max": r.lateness_ns.max() as f64 / 1000.0,
                })
            });
            json!({
                "direction": r.dir.as_str(),
                "packets_in": c.packets_in,
                "bytes_in": c.bytes_in,
                "packets_out": c.packets_out,
                "bytes_out": c.bytes_out,
                "dropped": dropped,
                "duplicated": c.duplicated,
                "in_flight": c.in_flight(),
                "max_backlog_bytes": c.max_backlog_bytes,
                "lateness_us": lateness,
                "device_drops": r.device_drops,
                "write_errors": r.write_errors,
                "error": r.error,
            })
        })
        .collect();
    json!({
        "link": id,
        "seed": seed,
        "client_exit": client_exit,
        "directions": directions,
    })
}

fn exit_code(st: ExitStatus) -> i32 {
    st.code().unwrap_or_else(|| 128 + st.signal().unwrap_or(0))
}

/// Waits until the server's namespace has a listening TCP socket or a bound UDP socket.
fn wait_for_socket(server: &mut Process, wait: Duration, signals: &Signals) -> anyhow::Result<()> {
    let Some(pid) = server.pid() else {
        return Ok(());
    };
    if wait.is_zero() {
        return Ok(());
    }
    let deadline = Instant::now() + wait;
    while Instant::now() < deadline && !signals.any() {
        if let Some(st) = server.try_wait()? {
            bail!("the server command exited ({st}) before the client started");
        }
        if has_socket(pid) {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    if signals.any() {
        return Ok(());
    }
    bail!(
        "the server command opened no socket within --wait {}: give it longer (e.g. --wait 10s), \
         or --wait 0s to start the client without waiting",
        units::format_duration(wait)
    )
}

/// Any listening TCP or bound UDP socket in the network namespace of `pid`.
fn has_socket(pid: u32) -> bool {
    let listening = |file: &str, udp: bool| {
        std::fs::read_to_string(format!("/proc/{pid}/net/{file}"))
            .map(|t| {
                t.lines()
                    .skip(1)
                    .any(|l| udp || l.split_whitespace().nth(3) == Some("0A"))
            })
            .unwrap_or(false)
    };
    listening("tcp", false)
        || listening("tcp6", false)
        || listening("udp", true)
        || listening("udp6", true)
}

fn summary(r: &DirectionReport) -> String {
    let c: &Counters = &r.counters;
    let drops: Vec<String> = DropReason::ALL
        .iter()
        .filter(|&&d| c.dropped(d) > 0)
        .map(|&d| format!("{} {}", d.as_str(), c.dropped(d)))
        .collect();
    let name = match r.dir {
        quiclab_link::Direction::Up => "up   (client -> server)",
        quiclab_link::Direction::Down => "down (server -> client)",
    };
    let late = if !r.lateness_ns.is_empty() {
        format!(
            "; departure lateness p50 {:.0} us, p99 {:.0} us, max {:.0} us",
            r.lateness_us(0.5),
            r.lateness_us(0.99),
            r.lateness_ns.max() as f64 / 1000.0
        )
    } else {
        String::new()
    };
    format!(
        "{name}: {} packets in, {} out, {} dropped{}{}{}, max backlog {} bytes{late}",
        c.packets_in,
        c.packets_out,
        c.dropped_total(),
        if drops.is_empty() {
            String::new()
        } else {
            format!(" ({})", drops.join(", "))
        },
        if c.duplicated > 0 {
            format!(", {} duplicated", c.duplicated)
        } else {
            String::new()
        },
        match c.in_flight() {
            0 => String::new(),
            n => format!(", {n} still in flight when the link stopped"),
        },
        c.max_backlog_bytes,
    )
}
