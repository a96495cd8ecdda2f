//! `quiclab bench trials`: what a trial costs beyond its transfer, phase by phase, stack by
//! stack.

use anyhow::Context;
use clap::Args;
use quiclab_runner::plan::{self, Profile};
use quiclab_runner::stacks;
use serde_json::{Value, json};

use crate::out::Out;

/// A trial's overhead: everything it spends beyond the transfer it measures.
///
/// Runs trials one at a time, as `quiclab run --jobs 1` does, of a 1 KB GET on a new connection
/// over an emulated 1 Gbit/s link without delay, so that the transfer itself takes a few
/// milliseconds: HTTP/2 (TCP, cubic), HTTP/3 (quinn, cubic), and each external HTTP/3 stack
/// whose programs are installed. For each stack it prints the median of each phase as the
/// trial records it (the namespaces, devices and emulator set up; the server started until
/// it listens; the client's run beyond its time to last byte, i.e. its process start, TLS set-up
/// and exit; the server stopped once the link has delivered the client's last packets; the
/// link stopped and the namespaces removed; the trial's files read into its measurements and
/// time budget) and the overhead: the trial's wall time less its time to last byte, median and
/// 90th percentile.
///
/// Then the CPU a trial costs, as campaigns run them (events recorded): 1 MB GETs over 20 ms
/// of RTT at 10 and at 100 Mbit/s, HTTP/2 (TCP, cubic) and HTTP/3 (quinn, cubic). For each it
/// prints the median CPU time of each role in the trial (the emulator's two forwarding
/// threads, the writers of its events and capture, the runner's thread of the trial, the
/// server's and the client's processes), the whole machine's busy time over the trial (the
/// kernel's own work and other programs included), the roles' sum as a share of a core over
/// the trial's wall time and per second of transfer (its time to last byte), and what the
/// emulator's timing bought: the 99th percentile of its departures' lateness.
#[derive(Args)]
pub struct TrialsBench {
    /// Trials per stack.
    #[arg(long, value_name = "N", default_value_t = 30, value_parser = clap::value_parser!(u32).range(3..=1000))]
    iterations: u32,
    /// Trials per stack and rate of the CPU measurement (0: skip it).
    #[arg(long, value_name = "N", default_value_t = 10, value_parser = clap::value_parser!(u32).range(0..=1000))]
    cpu_iterations: u32,
    /// Print the plan the benchmark runs (TOML) and stop.
    #[arg(long)]
    print_plan: bool,
    /// Keep idle CPUs awake while it runs, as `quiclab run --keep-cpus-awake` does (run the
    /// benchmark with and without it to see what it saves).
    #[arg(long)]
    keep_cpus_awake: bool,
}

/// The external HTTP/3 stacks of the registry (the stack files quiclab ships), measured when
/// their programs are installed.
fn external_h3() -> Vec<&'static str> {
    stacks::external::registered()
        .into_iter()
        .filter(|s| {
            s.http()
                .contains(&quiclab_model::record::HttpVersion::Http3)
        })
        .map(|s| s.name())
        .collect()
}

fn plan_text(iterations: u32, externals: &[&str]) -> String {
    let mut s = format!(
        "name = \"bench-trials\"\niterations = {iterations}\nseed = 1\n\
         [workload]\nkind = \"single-object\"\nsizes = [\"1kb\"]\n\
         [network]\nrate = \"1gbit\"\ndelay = \"0ms\"\n[conditions.plain]\n\
         [arms.h2]\nhttp = \"2\"\ntcp-cc = \"cubic\"\nlabel = \"H2, TCP (tcp)\"\n\
         [arms.h3]\nhttp = \"3\"\nquic-cc = \"cubic\"\nlabel = \"H3, quinn\"\n"
    );
    for name in externals {
        s += &format!("[arms.{name}]\nstack = \"{name}\"\nlabel = \"H3, {name}\"\n");
    }
    s
}

/// The plan of the CPU measurement: 1 MB over 20 ms of RTT at two rates, TCP and quinn.
fn cpu_plan_text(iterations: u32) -> String {
    format!(
        "name = \"bench-trials-cpu\"\niterations = {iterations}\nseed = 1\n\
         [workload]\nkind = \"single-object\"\nsizes = [\"1mb\"]\n\
         [network]\ndelay = \"10ms\"\n\
         [conditions.\"10 Mbit/s\"]\nrate = \"10mbit\"\n\
         [conditions.\"100 Mbit/s\"]\nrate = \"100mbit\"\n\
         [arms.h2]\nhttp = \"2\"\ntcp-cc = \"cubic\"\nlabel = \"H2, TCP (tcp)\"\n\
         [arms.h3]\nhttp = \"3\"\nquic-cc = \"cubic\"\nlabel = \"H3, quinn\"\n"
    )
}

/// The roles whose CPU time a trial records (`phases.cpu_ms`), and their column titles.
const ROLES: [(&str, &str); 5] = [
    ("emulator", "emulator"),
    ("writers", "writers"),
    ("runner", "runner"),
    ("server", "server"),
    ("client", "client"),
];

/// One row of the CPU table: the median of each role, of the machine and of the shares.
struct CpuRow {
    roles: Vec<f64>,
    machine_ms: f64,
    /// The roles' sum over the trial's wall time.
    share: f64,
    /// The roles' sum over the time to last byte.
    per_transfer_s: f64,
    ttlb_ms: f64,
    /// The 99th percentile of departures' lateness, of the later direction, µs.
    late_p99_us: f64,
}

/// Runs the CPU measurement's trials of one arm in one condition.
fn cpu_row(
    bench: &crate::cmd_bench::TrialBench,
    plan: &plan::Plan,
    specs: &[quiclab_runner::expand::TrialSpec],
    arm: usize,
    condition: usize,
) -> anyhow::Result<CpuRow> {
    let mut roles: Vec<Vec<f64>> = vec![Vec::new(); ROLES.len()];
    let (mut machine, mut share, mut per_transfer, mut ttlb, mut late) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for spec in specs
        .iter()
        .filter(|s| s.arm == arm && s.condition == condition)
    {
        let busy = crate::cmd_bench::busy_cpu_s();
        let record = bench.run(plan, spec)?;
        machine.push((crate::cmd_bench::busy_cpu_s() - busy) * 1000.0);
        let m = record
            .outcome
            .as_ref()
            .map_err(|e| anyhow::anyhow!("{}: {e}", plan.arms[arm].label))?;
        let cpu = &record.phases["cpu_ms"];
        let mut sum = 0.0;
        for (i, (key, _)) in ROLES.iter().enumerate() {
            let v = cpu[*key]
                .as_f64()
                .with_context(|| format!("the trial recorded no CPU time of its {key}"))?;
            roles[i].push(v);
            sum += v;
        }
        let directions = record.link.as_array().map(Vec::as_slice).unwrap_or(&[]);
        late.push(
            directions
                .iter()
                .filter_map(|d| d["lateness_p99_us"].as_f64())
                .fold(f64::NAN, f64::max),
        );
        share.push(sum / record.wall_ms);
        per_transfer.push(sum / m.ttlb_ms);
        ttlb.push(m.ttlb_ms);
    }
    Ok(CpuRow {
        roles: roles.iter().map(|v| quantile(v, 0.5)).collect(),
        machine_ms: quantile(&machine, 0.5),
        share: quantile(&share, 0.5),
        per_transfer_s: quantile(&per_transfer, 0.5),
        ttlb_ms: quantile(&ttlb, 0.5),
        late_p99_us: quantile(&late, 0.5),
    })
}

/// The CPU measurement (see [`TrialsBench`]): a table on `out`, its rows as JSON.
fn cpu(
    bench: &crate::cmd_bench::TrialBench,
    iterations: u32,
    awake: bool,
    out: &Out,
) -> anyhow::Result<Vec<Value>> {
    let text = cpu_plan_text(iterations);
    let plan = plan::parse(&text, "bench trials", Profile::Full)?;
    let specs = quiclab_runner::expand::expand(&plan);
    out.line(format!(
        "CPU per trial: {iterations} trials per stack and rate, one at a time, of a 1 MB GET over 20 ms RTT, events recorded{}",
        if awake { ", idle CPUs kept awake" } else { "" }
    ));
    out.line(format!(
        "medians, CPU ms: {:<11} {:<14} {:>8} {:>7} {:>6} {:>6} {:>6} {:>7} | {:>6} {:>7} {:>13} {:>9}",
        "rate",
        "stack",
        "emulator",
        "writers",
        "runner",
        "server",
        "client",
        "machine",
        "TTLB",
        "of wall",
        "per transfer",
        "late p99"
    ));
    let mut rows = Vec::new();
    for (ci, cond) in plan.conditions.iter().enumerate() {
        for (ai, arm) in plan.arms.iter().enumerate() {
            let r = cpu_row(bench, &plan, &specs, ai, ci)?;
            out.line(format!(
                "                 {:<11} {:<14} {:>8.1} {:>7.1} {:>6.1} {:>6.1} {:>6.1} {:>7.1} | {:>6.0} {:>6.1}% {:>10.3} s/s {:>6.0} µs",
                cond.name,
                arm.label,
                r.roles[0],
                r.roles[1],
                r.roles[2],
                r.roles[3],
                r.roles[4],
                r.machine_ms,
                r.ttlb_ms,
                r.share * 100.0,
                r.per_transfer_s,
                r.late_p99_us
            ));
            let mut row = json!({
                "rate": cond.name,
                "stack": arm.label,
                "machine_ms": r.machine_ms,
                "ttlb_ms": r.ttlb_ms,
                "share_of_wall": r.share,
                "cpu_s_per_transfer_s": r.per_transfer_s,
                "lateness_p99_us": r.late_p99_us,
            });
            for ((key, _), m) in ROLES.iter().zip(&r.roles) {
                row[format!("{key}_ms")] = json!(m);
            }
            rows.push(row);
        }
    }
    out.line(
        "roles = the emulator's forwarding threads (with the receiving kernels' work their writes run), its event and capture writers, the runner's thread of the trial, the server and the client; machine = the whole machine's busy time over the trial; of wall = the roles' sum over the trial's wall time; per transfer = over its time to last byte; late p99 = the emulator's departures' 99th percentile of lateness, in the later direction",
    );
    Ok(rows)
}

/// The `q` quantile of `v` (as the report computes them); NaN for no values.
fn quantile(v: &[f64], q: f64) -> f64 {
    quiclab_report::stats::quantile(v, q).unwrap_or(f64::NAN)
}

/// The phases a row shows, as the trial records them, and their column titles.
const PHASES: [(&str, &str); 6] = [
    ("setup_ms", "set-up"),
    ("server_start_ms", "server"),
    ("client_extra_ms", "client-TTLB"),
    ("server_stop_ms", "stop"),
    ("teardown_ms", "teardown"),
    ("metrics_ms", "measure"),
];

pub fn trials(b: TrialsBench, out: Out) -> anyhow::Result<i32> {
    let all = external_h3();
    let externals: Vec<&str> = all
        .iter()
        .copied()
        .filter(|n| stacks::find(n).is_some_and(|s| s.missing().is_empty()))
        .collect();
    let text = plan_text(b.iterations, &externals);
    if b.print_plan {
        println!("{text}");
        return Ok(0);
    }
    let mut bench = crate::cmd_bench::TrialBench::new("trials")?;
    let _awake = crate::cmd_run::keep_cpus_awake(b.keep_cpus_awake)?;
    let plan = plan::parse(&text, "bench trials", Profile::Full)?;
    let specs = quiclab_runner::expand::expand(&plan);
    let skipped: Vec<&str> = all
        .iter()
        .copied()
        .filter(|n| !externals.contains(n))
        .collect();
    out.line(format!(
        "A trial's overhead: {} trials per stack, one at a time, of a 1 KB GET on a new connection over 1 Gbit/s without delay{}",
        b.iterations,
        if skipped.is_empty() {
            String::new()
        } else {
            format!(" ({} not installed)", skipped.join(", "))
        }
    ));
    out.line(format!(
        "medians, ms: {:<16} {:>7} {:>7} {:>11} {:>6} {:>8} {:>7} {:>6} | {:>8} {:>8}",
        "stack",
        "set-up",
        "server",
        "client-TTLB",
        "stop",
        "teardown",
        "measure",
        "TTLB",
        "overhead",
        "p90"
    ));
    let mut rows: Vec<Value> = Vec::new();
    let result = (|| {
        for (ai, arm) in plan.arms.iter().enumerate() {
            let mut phases: Vec<Vec<f64>> = vec![Vec::new(); PHASES.len()];
            let (mut ttlb, mut overhead) = (Vec::new(), Vec::new());
            for spec in specs.iter().filter(|s| s.arm == ai) {
                let record = bench.run(&plan, spec)?;
                let m = record
                    .outcome
                    .as_ref()
                    .map_err(|e| anyhow::anyhow!("{}: {e}", arm.label))?;
                let t = m.ttlb_ms;
                let p = &record.phases;
                let get = |k: &str| p[k].as_f64();
                let client_extra = get("client_ms").map(|c| c - t);
                for (i, (key, _)) in PHASES.iter().enumerate() {
                    let v = if *key == "client_extra_ms" {
                        client_extra
                    } else {
                        get(key)
                    };
                    phases[i].push(v.with_context(|| format!("the trial recorded no {key}"))?);
                }
                ttlb.push(t);
                overhead.push(record.wall_ms - t);
            }
            let medians: Vec<f64> = phases.iter().map(|v| quantile(v, 0.5)).collect();
            let (t, o, o90) = (
                quantile(&ttlb, 0.5),
                quantile(&overhead, 0.5),
                quantile(&overhead, 0.9),
            );
            out.line(format!(
                "             {:<16} {:>7.1} {:>7.1} {:>11.1} {:>6.1} {:>8.1} {:>7.1} {:>6.1} | {:>8.1} {:>8.1}",
                arm.label,
                medians[0],
                medians[1],
                medians[2],
                medians[3],
                medians[4],
                medians[5],
                t,
                o,
                o90
            ));
            let mut row =
                json!({"stack": arm.label, "ttlb_ms": t, "overhead_ms": o, "overhead_p90_ms": o90});
            for ((key, _), m) in PHASES.iter().zip(&medians) {
                row[*key] = json!(m);
            }
            rows.push(row);
        }
        out.line(
            "overhead = the trial's wall time less its time to last byte; stop includes the wait for the link to deliver the client's last packets and 5 ms for the server to take them in; measure = reading the trial's files into its measurements and time budget",
        );
        if b.cpu_iterations == 0 {
            return Ok(Vec::new());
        }
        // as campaigns run them
        bench.record_events(true);
        cpu(&bench, b.cpu_iterations, b.keep_cpus_awake, &out)
    })();
    drop(bench);
    let cpu_rows = result?;
    out.summary(|| {
        json!({
            "iterations": b.iterations,
            "rows": rows,
            "cpu_iterations": b.cpu_iterations,
            "cpus_kept_awake": b.keep_cpus_awake,
            "cpu_rows": cpu_rows,
        })
    });
    Ok(0)
}
