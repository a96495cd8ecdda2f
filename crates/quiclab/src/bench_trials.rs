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
#[derive(Args)]
pub struct TrialsBench {
    /// Trials per stack.
    #[arg(long, value_name = "N", default_value_t = 30, value_parser = clap::value_parser!(u32).range(3..=1000))]
    iterations: u32,
    /// Print the plan the benchmark runs (TOML) and stop.
    #[arg(long)]
    print_plan: bool,
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
    let bench = crate::cmd_bench::TrialBench::new("trials")?;
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
        Ok(0)
    })();
    drop(bench);
    if result.is_ok() {
        out.line(
            "overhead = the trial's wall time less its time to last byte; stop includes the wait for the link to deliver the client's last packets and 5 ms for the server to take them in; measure = reading the trial's files into its measurements and time budget",
        );
        out.summary(|| json!({"iterations": b.iterations, "rows": rows}));
    }
    result
}
