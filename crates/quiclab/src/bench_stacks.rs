//! `quiclab bench stacks`: bulk throughput and CPU cost per byte of HTTP/2 over TLS/TCP and
//! HTTP/3 over QUIC on a direct veth pair, the NTT study's comparison on one machine.

use std::time::Duration;

use anyhow::{Context, bail};
use clap::Args;
use quiclab_runner::plan::{self, Profile};
use serde_json::{Value, json};

use crate::bench_perf;
use crate::out::Out;
use crate::usage::usage;

/// Bulk download throughput and CPU per GB: HTTP/2 over TLS/TCP against HTTP/3 over QUIC.
///
/// Runs bulk trials, as a `bulk` campaign does (a plan per MTU, printed with --print-plans).
/// On a direct veth pair (no emulator, offloads on) at MTU 1500 and 9000, `quiclab serve` sends
/// a huge object to 1 and N `quiclab get` clients (one connection each) for --duration: H2
/// over TLS/TCP (cubic), and H3 (quinn, cubic) with the UDP payload fixed at 1252 bytes and at
/// the MTU's maximum (1472 or 8972), GSO on and off. Throughput is the bytes the server's
/// connections had acknowledged (from its timelines; QUIC counts packet bytes) after a
/// warm-up, per second;
/// CPU is user + system time of the server and of the clients over the same interval, per GB
/// acknowledged. The QUIC/TCP ratio compares each QUIC row with TCP at the same MTU and number
/// of connections, measured in the same run.
///
/// quinn's own perf tool (`quinn-perf`, built from quinn's repository: `cargo install --git
/// https://github.com/quinn-rs/quinn perf`) is the ceiling of the QUIC implementation: when it
/// is found (--quinn-perf, else on PATH), each MTU starts with its rows (one connection, GSO on,
/// each payload of the H3 rows, and at jumbo frames also 6550 bytes, the largest the tool's own
/// batches of 10 datagrams can send), and the "of perf" column gives each one-connection H3 row
/// with GSO on as a share of the tool's best row at that MTU.
#[derive(Args)]
pub struct StacksBench {
    /// Length of each measurement (after a warm-up of a fifth of it, at most 1 s).
    #[arg(long, value_name = "TIME", default_value = "10s", value_parser = crate::recordargs::duration)]
    duration: Duration,
    /// N, the number of parallel connections of the multi-connection rows.
    #[arg(long, value_name = "N", default_value_t = 4, value_parser = clap::value_parser!(u32).range(2..=64))]
    connections: u32,
    /// Print the plans the benchmark runs (TOML, one per MTU) and stop.
    #[arg(long)]
    print_plans: bool,
    /// quinn's perf tool (default: `quinn-perf` on PATH); without it its rows are left out,
    /// saying how to build it.
    #[arg(long, value_name = "PATH")]
    quinn_perf: Option<std::path::PathBuf>,
}

/// The UDP payloads the H3 rows of an MTU use: 1252 bytes and the MTU's largest.
fn payloads(mtu: u32) -> [u16; 2] {
    [1252, (mtu - 28) as u16]
}

/// Whether an arm is an H3 arm with GSO on, from its knobs.
fn arm_gso(knobs: &[(String, String)]) -> bool {
    knobs.iter().any(|(k, v)| k == "quic-gso" && v == "on")
}

/// The bulk plan of one MTU: H2 over TLS/TCP, then H3 with the payload fixed at 1252 bytes and
/// at the MTU's largest, GSO on and off (a GSO batch holds as many datagrams as fit one
/// 65,507-byte send: 7 at 8972 bytes).
fn plan_text(mtu: u32, duration: Duration, connections: u32) -> String {
    let mut s = format!(
        "name = \"bench-stacks-{mtu}\"\niterations = 1\n[workload]\nkind = \"bulk\"\n\
         connections = [1, {connections}]\nduration = \"{}ms\"\n[conditions.mtu{mtu}]\n\
         direct = true\nmtu = {mtu}\n[arms.h2]\nhttp = \"2\"\ntcp-cc = \"cubic\"\n\
         label = \"H2, TLS/TCP\"\n",
        duration.as_millis()
    );
    for p in payloads(mtu) {
        for gso in [true, false] {
            let on = if gso { "on" } else { "off" };
            s += &format!(
                "[arms.h3-{p}-gso-{on}]\nhttp = \"3\"\nquic-cc = \"cubic\"\n\
                 quic-mtu-discovery = \"off\"\nquic-initial-mtu = {p}\n\
                 quic-max-udp-payload = {p}\nquic-gso = \"{on}\"\n\
                 label = \"H3, payload {p}, GSO {on}\"\n"
            );
        }
    }
    s
}

pub fn stacks(b: StacksBench, out: Out) -> anyhow::Result<i32> {
    let plans = [1500u32, 9000].map(|mtu| (mtu, plan_text(mtu, b.duration, b.connections)));
    if b.print_plans {
        for (_, text) in &plans {
            println!("{text}");
        }
        return Ok(0);
    }
    let perf = bench_perf::locate(b.quinn_perf.as_deref());
    if let (None, Some(p)) = (&perf, &b.quinn_perf) {
        usage!("--quinn-perf {}: no such executable", p.display());
    }
    let bench = crate::cmd_bench::TrialBench::new("stacks")?;
    let signals = &bench.signals;
    out.line(format!(
        "Bulk download on a direct veth pair, {:.1} s per row (H2: TLS 1.3 over TCP, cubic; H3: quinn, cubic)",
        b.duration.as_secs_f64()
    ));
    match &perf {
        Some(p) => out.line(format!("quinn's perf tool: {}", p.display())),
        None => out.line(format!(
            "quinn's perf tool: not measured ({} is not on PATH; build it with `{}`, or give --quinn-perf PATH)",
            bench_perf::PROGRAM,
            bench_perf::HOW_TO_GET
        )),
    }
    out.line(format!(
        "{:<6} {:<34} {:>6} {:>9} {:>15} {:>15} {:>10} {:>8}",
        "MTU",
        "stack",
        "conns",
        "Gbit/s",
        "server CPU s/GB",
        "client CPU s/GB",
        "QUIC/TCP",
        "of perf"
    ));
    let mut rows: Vec<Value> = Vec::new();
    let result = (|| {
        for (mtu, text) in &plans {
            let plan = plan::parse(text, &format!("bench stacks (MTU {mtu})"), Profile::Full)?;
            let specs = quiclab_runner::expand::expand(&plan);
            // quinn's perf tool at each payload of the plan's H3 arms, GSO on, one connection
            let mut ceiling: Vec<f64> = Vec::new();
            if let Some(program) = &perf {
                for payload in bench_perf::payloads(payloads(*mtu)) {
                    if signals.any() {
                        bail!("interrupted");
                    }
                    let r = bench_perf::run(program, *mtu, payload, b.duration, signals)
                        .with_context(|| format!("quinn-perf at MTU {mtu}, payload {payload}"))?;
                    let label = format!("quinn perf, payload {payload}, GSO on");
                    out.line(format!(
                        "{mtu:<6} {label:<34} {:>6} {:>9.2} {:>15.2} {:>15.2} {:>10} {:>8}",
                        1, r.gbps, r.server_cpu_s_per_gb, r.client_cpu_s_per_gb, "", ""
                    ));
                    rows.push(json!({
                        "mtu": mtu,
                        "stack": label,
                        "connections": 1,
                        "gbps": r.gbps,
                        "server_cpu_s_per_gb": r.server_cpu_s_per_gb,
                        "client_cpu_s_per_gb": r.client_cpu_s_per_gb,
                    }));
                    ceiling.push(r.gbps);
                }
            }
            // one connection count at a time, every arm of it, printed in the plan's order
            for &conns in &plan.sizes {
                let mut tcp = None;
                for (ai, arm) in plan.arms.iter().enumerate() {
                    let Some(spec) = specs.iter().find(|s| s.arm == ai && s.size == conns) else {
                        continue;
                    };
                    let record = bench.run(&plan, spec)?;
                    let m = record.outcome.as_ref().map_err(|e| {
                        anyhow::anyhow!("{} with {conns} connections: {e}", arm.name)
                    })?;
                    let Some(bulk) = &m.detail.bulk else {
                        bail!("{}: the trial measured no bulk transfer", arm.name);
                    };
                    let gbps = bulk.bps() / 1e9;
                    let (server_cpu, client_cpu) = bulk.cpu_per_gb();
                    // the plan's first arm (H2) is the baseline of the rows after it
                    let ratio = match tcp {
                        None => {
                            tcp = Some(gbps);
                            None
                        }
                        Some(t) => Some(gbps / t),
                    };
                    // against the tool's best at this MTU, whatever its payload
                    let best = ceiling.iter().copied().reduce(f64::max);
                    let of_perf = match (arm_gso(&arm.knobs), best) {
                        (true, Some(g)) if conns == 1 => Some(100.0 * gbps / g),
                        _ => None,
                    };
                    out.line(format!(
                        "{mtu:<6} {:<34} {conns:>6} {gbps:>9.2} {server_cpu:>15.2} {client_cpu:>15.2} {:>10} {:>8}",
                        arm.label,
                        ratio.map_or("-".to_string(), |r| format!("{r:.2}")),
                        of_perf.map_or(String::new(), |p| format!("{p:.0} %")),
                    ));
                    rows.push(json!({
                        "mtu": mtu,
                        "stack": arm.label,
                        "connections": conns,
                        "gbps": gbps,
                        "server_cpu_s_per_gb": server_cpu,
                        "client_cpu_s_per_gb": client_cpu,
                        "quic_over_tcp": ratio,
                        "percent_of_perf": of_perf,
                    }));
                }
            }
        }
        Ok(0)
    })();
    drop(bench);
    if result.is_ok() {
        out.summary(|| json!({"duration_s": b.duration.as_secs_f64(), "rows": rows}));
    }
    result
}
