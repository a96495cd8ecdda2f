//! `quiclab run`, `quiclab report` and `quiclab export`: campaigns from plans to reports.

use std::collections::{BTreeMap, HashMap};
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::{Args, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};
use quiclab_runner::campaign::{self, Jobs, Progress, RunOptions};
use quiclab_runner::expand::TrialSpec;
use quiclab_runner::governor::Change;
use quiclab_runner::plan::{self, Plan, Profile};
use quiclab_runner::shard::Shard;
use quiclab_runner::workloads;
use quiclab_store::{Store, TrialRecord};

use crate::signals::Signals;
use crate::usage::{self, usage};

use quiclab_runner::plan::BUILT_IN;

/// Run a campaign: every trial of a plan, into a results directory, then its report.
///
/// PLAN is a TOML file or the name of a built-in plan (www21, clients, repeat, hls, telemetry,
/// coded-loss, bulk-mtu, pages, implementations, explain-check). Without PLAN, the quick
/// profile of www21 runs: H3 against H2 on a 10 Mbit/s link with loss and delay, a few minutes.
///
/// Each trial gets a fresh pair of namespaces and link emulator, a `quiclab serve` and a
/// `quiclab get` (`quiclab telemetry` for the telemetry workload, `quiclab page` for web
/// pages); arms compared within an iteration share its seed (the same packet fates).
/// Results go to DIR/results.db (SQLite) one trial at a time, so Ctrl-C keeps every finished
/// trial, and running the same plan into the same directory again resumes where it stopped.
/// Artifacts (TLS keys, sender timelines, packet events, logs) are kept for the median trial of
/// each cell and for failed trials.
///
/// As root, the namespaces are the host's; as another user, quiclab makes them inside a user
/// namespace of its own (unprivileged user namespaces enabled, /dev/net/tun mode 0666), and
/// the report's provenance says what that run went without (real-time priority, ...).
///
/// Examples:
///   quiclab run                                # quick www21, report in results/www21
///   quiclab run plans/www21.toml --jobs 4      # the full study (40 iterations)
///   quiclab run hls --quick                    # video segments under one-way impairments
///   quiclab run my-plan.toml --out /tmp/mine   # your own plan (see plans/www21.toml)
#[derive(Args)]
#[command(verbatim_doc_comment)]
pub struct RunCmd {
    /// A plan file, or a built-in plan's name (default: www21 with --quick).
    plan: Option<String>,
    /// The plan's quick profile: fewer iterations, for a first look.
    #[arg(long)]
    quick: bool,
    /// Trials at once (default: automatic: one to start with, then as many as the CPU the
    /// trials are measured to need keeps the host at most 0.1^(1/cores) busy, 32 % on 2 cores
    /// and 56 % on 4, up to four per core; a saturated second or two trials whose emulator ran
    /// late in 3 s halve it).
    #[arg(long, value_name = "N")]
    jobs: Option<usize>,
    /// Results directory (default: results/PLAN-NAME).
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// Keep every trial's artifacts, not only the median trial's of each cell.
    #[arg(long)]
    keep_artifacts: bool,
    /// Stop an arm after N failures of one kind in a row (the same error, numbers aside): its
    /// trials not yet started are left out, and a rerun into the same directory runs them.
    /// 0 never stops an arm.
    #[arg(long, value_name = "N", default_value_t = quiclab_runner::campaign::FAIL_AFTER)]
    fail_after: u32,
    /// Check the plan and list its trials without running anything.
    #[arg(long)]
    dry_run: bool,
    /// Add to a results directory whose trials another quiclab build ran (refused otherwise,
    /// so that one campaign never silently mixes two builds; the export's build column tells
    /// them apart).
    #[arg(long)]
    allow_mixed_builds: bool,
    /// Run only shard K of N (e.g. 2/4), one per machine: the plan's trials split the same way
    /// on every machine, every arm of a condition, size and iteration in one shard (paired
    /// arms share a host), the shards' expected durations balanced. Each shard runs into its
    /// own directory (default: results/PLAN-NAME-shard-K-of-N); `quiclab merge` joins them.
    #[arg(long, value_name = "K/N")]
    shard: Option<Shard>,
    /// Print a summary as one JSON object on standard output at the end (plan, results
    /// directory, report, trials run, failed and already done, whether it was interrupted,
    /// seconds the host was busy, wall time) instead of the report's path.
    #[arg(long)]
    json: bool,
    /// Ask the kernel to keep idle CPUs awake for the run (a PM QoS request of 0 µs on
    /// /dev/cpu_dma_latency, dropped by the kernel when quiclab exits, however it exits): the
    /// emulator's timers then wake it sooner, so its departures are on time with less
    /// spinning. Idle CPUs poll instead of sleeping meanwhile: the host pays in power (or, in a
    /// virtual machine, in its own CPU time). The report's provenance records it.
    #[arg(long)]
    keep_cpus_awake: bool,
}

impl RunCmd {
    /// `--dry-run`: nothing runs, no namespace is made.
    pub(crate) fn dry_run(&self) -> bool {
        self.dry_run
    }
}

/// Render a campaign's report: DIR/report.html, self-contained (inline SVG, no network).
#[derive(Args)]
pub struct ReportCmd {
    /// A campaign directory written by `quiclab run`.
    dir: PathBuf,
}

/// Merge the shards of one campaign into one campaign directory, and render its report
///
/// Merge the shards of one campaign (`quiclab run --shard K/N`, one directory each, perhaps
/// from several machines) into one campaign directory, and render its report.
///
/// Only shards of one campaign merge: the same plan (name and trials: another version of the
/// plan is refused), one quiclab build, one shard count, each shard once; a directory that
/// breaks a rule is refused by name with what differs, before anything is written. Every trial
/// keeps its host and shard, and its artifacts. Exit 1 when the shards do not hold every trial
/// of the plan (a shard missing or unfinished: run it again, then merge again into the same
/// OUT).
///
/// Example:
///   quiclab merge results/www21 results/www21-shard-*-of-4
#[derive(Args)]
#[command(verbatim_doc_comment)]
pub struct MergeCmd {
    /// The merged campaign's directory: new, or an earlier merge of the same shards.
    out: PathBuf,
    /// The shards' directories.
    #[arg(required = true)]
    dirs: Vec<PathBuf>,
    /// Print a summary as one JSON object on standard output (plan, trials in the plan,
    /// merged and missing, shards with their hosts, the report).
    #[arg(long)]
    json: bool,
}

pub fn merge(c: MergeCmd) -> anyhow::Result<i32> {
    let out = crate::out::Out::new(c.json);
    let new_out = !c.out.exists();
    let merged = {
        // held while merging: a run or another merge into OUT is refused meanwhile
        let _lock = Store::lock(&c.out)?;
        quiclab_store::merge::merge(&c.out, &c.dirs)
    };
    let summary = match merged {
        Ok(s) => s,
        Err(e) => {
            if new_out {
                // a refused merge leaves no directory it made: its lock file, then the
                // directory if nothing else is in it
                let _ = std::fs::remove_file(c.out.join(quiclab_store::LOCK_FILE));
                let _ = std::fs::remove_dir(&c.out);
            }
            return Err(e.into());
        }
    };
    for s in &summary.shards {
        out.line(format!(
            "shard {}: {} trials from {} (host {})",
            s.shard,
            s.trials,
            s.dir,
            if s.hosts.is_empty() {
                "unknown".to_string()
            } else {
                s.hosts.join(", ")
            }
        ));
    }
    for link in &summary.links_left_out {
        out.line(format!(
            "left out {}: a symbolic link, not an artifact quiclab wrote (it could lead anywhere)",
            link.display()
        ));
    }
    let report = render(&c.out)?;
    let missing = match (summary.missing, summary.shards_missing.as_slice()) {
        (0, _) => String::new(),
        (n, []) => format!("; {n} missing: run the unfinished shards again, then merge again"),
        (n, shards) => format!(
            "; {n} missing (no directory of shard {}): run those shards again, then merge again",
            shards.join(", ")
        ),
    };
    out.line(format!(
        "quiclab: {} of plan {}'s {} trials merged into {}{missing}",
        summary.merged,
        summary.plan,
        summary.total,
        c.out.display(),
    ));
    out.line(report.display());
    out.summary(|| {
        serde_json::json!({
            "plan": summary.plan,
            "out": c.out,
            "report": report,
            "trials": {
                "total": summary.total,
                "merged": summary.merged,
                "missing": summary.missing,
            },
            "shards": summary.shards.iter().map(|s| serde_json::json!({
                "shard": s.shard, "dir": s.dir, "trials": s.trials, "hosts": s.hosts,
            })).collect::<Vec<_>>(),
            "shards_missing": summary.shards_missing,
            "links_left_out": summary.links_left_out,
        })
    });
    Ok(if summary.missing > 0 {
        usage::FAILED
    } else {
        usage::OK
    })
}

#[derive(Clone, Copy, ValueEnum)]
enum Format {
    Csv,
}

/// Export a campaign's results for pandas, R or a spreadsheet.
///
/// Writes CSV files: trials.csv (one row per trial: arm, condition, size, iteration, seed,
/// status, TTLB, TTFB, handshake, losses named by transport, the arm's stacks and knobs, the
/// condition's link keys, round trip and rate, ...), arms.csv and conditions.csv (the plan),
/// timeline.csv (the sender's timeline of every trial), and where the workload has them
/// requests.csv, pages.csv, resources.csv, telemetry.csv, units.csv and bulk.csv. Every column,
/// with its unit: docs/data.md.
#[derive(Args)]
pub struct ExportCmd {
    /// A campaign directory written by `quiclab run`.
    dir: PathBuf,
    #[arg(long, value_enum, default_value = "csv")]
    format: Format,
    /// Where to write the files (default: DIR/export).
    #[arg(long, value_name = "DIR")]
    to: Option<PathBuf>,
}

/// Reads a plan from a file or the built-in list.
pub fn load_plan(arg: Option<&str>, profile: Profile) -> anyhow::Result<Plan> {
    let arg = arg.unwrap_or("www21");
    let path = Path::new(arg);
    let (text, source) = if path.exists() {
        // the stack files of the stacks/ directory beside the plan
        quiclab_runner::stacks::external::load_beside(path)?;
        (
            quiclab_model::input::read_text(path, "a plan", quiclab_model::input::MAX_TEXT_BYTES)
                .context("cannot read the plan")?,
            path.display().to_string(),
        )
    } else if let Some((name, text)) = BUILT_IN.iter().find(|(n, _)| *n == arg) {
        (text.to_string(), format!("built-in {name}"))
    } else {
        let names: Vec<_> = BUILT_IN.iter().map(|(n, _)| *n).collect();
        usage!(
            "no plan file {arg:?} and no built-in plan of that name; built-in plans: {}",
            names.join(", ")
        );
    };
    Ok(plan::parse(&text, &source, profile)?)
}

fn cell(plan: &Plan, spec: &TrialSpec) -> String {
    let before = spec
        .before
        .map(|b| format!(" (before {})", plan.conditions[b].name))
        .unwrap_or_default();
    let cond = &plan.conditions[spec.condition].name;
    let arm = &plan.arms[spec.arm].name;
    if !plan.workload.is_requests() {
        // one size, the workload's own: not worth a column
        return format!("{cond}{before} / {arm} #{}", spec.iteration + 1);
    }
    format!(
        "{cond}{before} / {} / {arm} #{}",
        quiclab_model::units::size(spec.size),
        spec.iteration + 1
    )
}

/// Facts about the machine and build that a result depends on.
/// This build of quiclab: its version and commit.
fn build() -> String {
    format!(
        "{} (commit {})",
        env!("CARGO_PKG_VERSION"),
        env!("QUICLAB_COMMIT")
    )
}

/// This machine's name, as the kernel knows it.
fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into())
}

/// `--keep-cpus-awake`: the request, held by the caller for as long as it should last, where
/// `wanted`.
pub(crate) fn keep_cpus_awake(
    wanted: bool,
) -> anyhow::Result<Option<quiclab_netns::sys::CpusAwake>> {
    wanted
        .then(quiclab_netns::sys::CpusAwake::hold)
        .transpose()
        .with_context(|| {
            format!(
                "--keep-cpus-awake: cannot ask the kernel to keep idle CPUs awake through {} \
                 (a kernel without PM QoS, or no access to the device)",
                quiclab_netns::sys::CPU_WAKE_LATENCY_DEV
            )
        })
}

fn provenance(jobs: &Jobs, cpus_awake: bool) -> Vec<(String, String)> {
    let read = |p: &str| {
        std::fs::read_to_string(p)
            .map(|s| s.trim().to_string())
            .unwrap_or_else(|_| "unknown".into())
    };
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_else(|| "unknown".into());
    let mut p = vec![
        ("quiclab".to_string(), build()),
        ("host".into(), hostname()),
        ("kernel".into(), read("/proc/sys/kernel/osrelease")),
        ("cpu".into(), cpu),
        ("cpus".into(), campaign::cores().to_string()),
        ("jobs".into(), jobs.to_string()),
        ("load average".into(), read("/proc/loadavg")),
        ("privileges".into(), quiclab_netns::rootless::privileges()),
        (
            "idle CPUs".into(),
            if cpus_awake {
                format!(
                    "kept awake for the run (--keep-cpus-awake: a request of 0 µs on {})",
                    quiclab_netns::sys::CPU_WAKE_LATENCY_DEV
                )
            } else {
                format!(
                    "free to sleep (cpuidle driver {})",
                    read("/sys/devices/system/cpu/cpuidle/current_driver")
                )
            },
        ),
    ];
    for key in [
        "net/ipv4/tcp_congestion_control",
        "net/ipv4/tcp_available_congestion_control",
        "net/ipv4/tcp_rmem",
        "net/ipv4/tcp_wmem",
        "net/ipv4/tcp_fastopen",
        "net/ipv4/tcp_slow_start_after_idle",
        "net/ipv4/tcp_no_metrics_save",
        "net/core/rmem_max",
        "net/core/wmem_max",
    ] {
        p.push((
            key.replace('/', "."),
            read(&format!("/proc/sys/{key}")).replace('\t', " "),
        ));
    }
    p
}

/// Progress on a terminal: a bar with the running trials and an ETA; elsewhere (CI, a pipe)
/// one line per finished trial.
struct Bar {
    bar: Option<ProgressBar>,
    running: HashMap<String, String>,
    failed: usize,
    done: usize,
    total: usize,
    started: Instant,
    /// Per arm, the trials of this run whose sender's timeline is in doubt and the first one's
    /// reasons.
    doubted: BTreeMap<String, (usize, String)>,
}

impl Bar {
    fn new() -> Self {
        Bar {
            bar: None,
            running: HashMap::new(),
            failed: 0,
            done: 0,
            total: 0,
            started: Instant::now(),
            doubted: BTreeMap::new(),
        }
    }

    fn message(&self) -> String {
        let mut running: Vec<&String> = self.running.values().collect();
        running.sort();
        let fails = if self.failed > 0 {
            format!("{} failed; ", self.failed)
        } else {
            String::new()
        };
        let list = running
            .iter()
            .map(|s| s.as_str())
            .collect::<Vec<_>>()
            .join(", ");
        format!("{fails}running: {list}")
    }
}

impl Bar {
    /// A line above the bar, or on its own without one.
    fn say(&self, line: &str) {
        match &self.bar {
            Some(b) => b.println(line),
            None => eprintln!("{line}"),
        }
    }
}

impl Progress for Bar {
    fn begin(&mut self, total: usize, already_done: usize) {
        self.total = total;
        self.done = already_done;
        if already_done > 0 {
            eprintln!("quiclab: resuming: {already_done} of {total} trials already finished here");
        }
        if std::io::stderr().is_terminal() {
            let bar = ProgressBar::new(total as u64);
            bar.set_style(
                ProgressStyle::with_template(
                    "{elapsed_precise} [{bar:30.cyan/blue}] {pos}/{len} trials, {eta} left\n  {wide_msg}",
                )
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> "),
            );
            bar.set_position(already_done as u64);
            bar.enable_steady_tick(Duration::from_millis(200));
            self.bar = Some(bar);
        }
        self.started = Instant::now();
    }

    fn trial_started(&mut self, plan: &Plan, spec: &TrialSpec) {
        self.running.insert(spec.id.clone(), cell(plan, spec));
        if let Some(b) = &self.bar {
            b.set_message(self.message());
        }
    }

    fn trial_done(&mut self, plan: &Plan, spec: &TrialSpec, rec: &TrialRecord) {
        self.running.remove(&spec.id);
        self.done += 1;
        let mut late = match &rec.outcome {
            Ok(m) => m.detail.emulator_late_ms.map_or(String::new(), |l| {
                format!(" (the host held the emulator's packets up to {l:.1} ms)")
            }),
            Err(_) => String::new(),
        };
        if let Ok(m) = &rec.outcome
            && !m.detail.sender_doubts.is_empty()
        {
            let why = m.detail.sender_doubts.join("; ");
            late += &format!(" (the sender's record is in doubt: {why})");
            self.doubted.entry(rec.arm.clone()).or_insert((0, why)).0 += 1;
        }
        let what = match &rec.outcome {
            Ok(m) => match &m.detail.telemetry {
                Some(d) => {
                    let lat = d.latencies_ms();
                    let q = |p| quiclab_report::stats::quantile(&lat, p).unwrap_or(f64::NAN);
                    format!(
                        "latency p50 {:.1} ms, p90 {:.1} ms, max {:.1} ms, {} stalls{}",
                        q(0.5),
                        q(0.9),
                        q(1.0),
                        d.stalls.len(),
                        match d.lost() {
                            0 => String::new(),
                            n => format!(", {n} units lost"),
                        }
                    )
                }
                None => match &m.detail.bulk {
                    Some(b) => {
                        let (server, client) = b.cpu_per_gb();
                        format!(
                            "{:.2} Gbit/s, CPU {server:.2} / {client:.2} s/GB (server / clients){}",
                            b.bps() / 1e9,
                            b.udp_payload
                                .map_or(String::new(), |p| format!(", UDP payload {p} B"))
                        )
                    }
                    None => format!("TTLB {:.1} ms", m.ttlb_ms),
                },
            },
            Err(e) => {
                self.failed += 1;
                format!("FAILED: {e}")
            }
        };
        let what = what + &late;
        match &self.bar {
            Some(b) => {
                if rec.outcome.is_err() || !late.is_empty() {
                    b.println(format!("  {}: {what}", cell(plan, spec)));
                }
                b.inc(1);
                b.set_message(self.message());
            }
            None => eprintln!(
                "[{}/{} {:.0}s] {}: {what}",
                self.done,
                self.total,
                self.started.elapsed().as_secs_f64(),
                cell(plan, spec)
            ),
        }
    }

    fn warn(&mut self, message: &str) {
        self.say(&format!("quiclab: warning: {message}"));
    }

    fn trials_dropped(&mut self, n: usize, why: &str) {
        self.total = self.total.saturating_sub(n);
        if let Some(b) = &self.bar {
            b.set_length(self.total as u64);
        }
        self.say(&format!(
            "quiclab: {why}: {n} trial{} left out",
            if n == 1 { "" } else { "s" }
        ));
    }

    fn jobs_changed(&mut self, limit: usize, why: &Change) {
        let share = |c: f64| format!("a trial needs {:.0} % of a core", c * 100.0);
        let why = match why {
            Change::Up { per_trial_cores } => share(*per_trial_cores),
            Change::Down { per_trial_cores } => {
                let cores = campaign::cores();
                format!(
                    "{}; the host kept at most {:.0} % busy",
                    share(*per_trial_cores),
                    100.0 * quiclab_runner::governor::target_busy(cores)
                )
            }
            Change::BackOff {
                saturated: true, ..
            } => "the host's CPUs were saturated".to_string(),
            Change::BackOff { late_trials, .. } => format!(
                "{late_trials} trial{} found the emulator's packets held up",
                if *late_trials == 1 { "" } else { "s" }
            ),
        };
        self.say(&format!("quiclab: trials at once: {limit} ({why})"));
    }

    fn end(&mut self) {
        if let Some(b) = self.bar.take() {
            b.finish_and_clear();
        }
    }
}

pub fn run(c: RunCmd) -> anyhow::Result<i32> {
    let profile = if c.quick || c.plan.is_none() {
        Profile::Quick
    } else {
        Profile::Full
    };
    let plan = load_plan(c.plan.as_deref(), profile)?;
    // refused before anything is printed, by the dry run as by the run
    quiclab_runner::campaign::check_shardable(&plan, c.shard.is_some())?;
    let missing = plan.missing();
    if !missing.is_empty() {
        usage!(
            "plan {} cannot run on this machine:\n  {}",
            plan.source,
            missing.join("\n  ")
        );
    }
    let jobs = match c.jobs {
        Some(0) => usage!("--jobs 0: allowed: 1 or more (or leave it out: automatic)"),
        Some(n) => Jobs::Fixed(n),
        None => Jobs::Auto(campaign::auto_ceiling(&plan)),
    };
    let out = c.out.clone().unwrap_or_else(|| {
        PathBuf::from("results").join(match c.shard {
            Some(s) => format!("{}-shard-{}-of-{}", plan.name, s.index, s.count),
            None => plan.name.clone(),
        })
    });
    let specs = quiclab_runner::expand::expand(&plan);
    let trials = specs.len();
    let groups = quiclab_runner::shard::groups(&specs);
    let specs = match c.shard {
        Some(shard) => quiclab_runner::shard::select(&plan, specs, shard),
        None => specs,
    };
    let shard_note = match c.shard {
        // more shards than groups: the extra ones have nothing to run (and say why)
        Some(shard) if specs.is_empty() => format!(
            " (shard {shard}: none of them: the plan's trials make {groups} groups that each \
             stay on one host, so no shard beyond {groups} has any)"
        ),
        Some(shard) => format!(
            " (shard {shard}: {} of them, about {:.0} s of transfers)",
            specs.len(),
            specs
                .iter()
                .map(|s| quiclab_runner::shard::expected_ms(&plan, s))
                .sum::<f64>()
                / 1000.0
        ),
        None => String::new(),
    };
    let conditions = match (&plan.cells, plan.interleave) {
        (Some(cells), _) => format!(
            "({} cells of {} arms in {} conditions that the planted checks compare)",
            cells.len(),
            plan.arms.len(),
            plan.conditions.len()
        ),
        (None, Some(b)) => format!(
            "({} conditions, each after a run of {:?})",
            plan.conditions.len() - 1,
            plan.conditions[b].name
        ),
        (None, None) => format!("{} conditions", plan.conditions.len()),
    };
    let arms = match plan.cells {
        Some(_) => String::new(),
        None => format!(" x {} arms", plan.arms.len()),
    };
    let sizes = workloads::of(&plan.workload).grid(&plan.workload, &plan.sizes);
    eprintln!(
        "quiclab: plan {} ({}, {} profile): {conditions} x {sizes}{arms} x {} = {trials} trials{}{shard_note}, {jobs} at a time, into {}",
        plan.name,
        plan.source,
        profile.name(),
        match plan.adaptive {
            Some(a) => format!(
                "{} to {} iterations (each condition and size stops once every compared \
                 difference is known to ±{:.1} %)",
                a.min,
                a.max,
                a.ci * 100.0
            ),
            None => format!("{} iterations", plan.iterations),
        },
        if plan.adaptive.is_some() {
            " at most"
        } else {
            ""
        },
        out.display()
    );
    if c.dry_run {
        for cond in &plan.conditions {
            eprintln!("  condition {:?}: {}", cond.name, cond.label());
        }
        let bin = std::env::current_exe().context("finding the quiclab binary")?;
        for (i, arm) in plan.arms.iter().enumerate() {
            let (server, client) = (arm.server_stack, arm.client_stack);
            let stacks = if server.name() == client.name() {
                format!("stack {}: {}", server.name(), server.implementation())
            } else {
                format!(
                    "stacks {} serving ({}), {} fetching ({})",
                    server.name(),
                    server.implementation(),
                    client.name(),
                    client.implementation()
                )
            };
            eprintln!("  arm {:?}: {} ({stacks})", arm.name, arm.label);
            // what its first trial would start
            if let Some(spec) = specs.iter().find(|s| s.arm == i) {
                let dir = out.join(quiclab_runner::trial::trial_folder(&spec.id));
                match quiclab_runner::trial::command_lines(&bin, &dir, &plan, spec) {
                    Ok((server, client)) => {
                        eprintln!("    server: {server}\n    client: {client}")
                    }
                    Err(e) => eprintln!("    {e}"),
                }
            }
        }
        return Ok(0);
    }
    if !quiclab_netns::sys::is_root() {
        usage!("quiclab run creates network namespaces: run it as root");
    }
    let max_rate: u64 = plan
        .conditions
        .iter()
        .filter_map(|c| c.rate_bps())
        .max()
        .unwrap_or(0);
    let cores = campaign::cores();
    // a fixed number is the user's: say when it may skew results (automatic jobs measure)
    let fixed = match jobs {
        Jobs::Fixed(n) => n,
        Jobs::Auto(_) => 1,
    };
    if !plan.workload.is_requests() {
        // telemetry moves a hundred small packets a second whatever the link's rate; what
        // matters is that every trial's endpoints find a core when a unit is due
        if fixed > cores {
            eprintln!(
                "quiclab: warning: {fixed} telemetry trials at once on {cores} cores may delay \
                 each other's units and skew their latencies; consider --jobs {cores}"
            );
        }
    } else if fixed > 1 && (max_rate == 0 || max_rate as u128 * fixed as u128 > 400_000_000) {
        eprintln!(
            "quiclab: warning: {fixed} trials at once on links of up to {} may compete for CPU \
             and skew results; consider --jobs 1",
            if max_rate == 0 {
                "unlimited rate".to_string()
            } else {
                format!("{} Mbit/s", max_rate / 1_000_000)
            }
        );
    }
    if quiclab_netns::rootless::active() {
        eprintln!(
            "quiclab: note: not run as root: the lab runs in a user namespace of its own \
             (the report's provenance says what it goes without)"
        );
        for l in quiclab_netns::rootless::limits() {
            eprintln!("quiclab: note: {l}");
        }
    }
    // held until the run ends (the kernel drops the request at exit, whatever ends it)
    let _awake = keep_cpus_awake(c.keep_cpus_awake)?;
    let signals = Signals::install()?;
    let stop = Arc::new(AtomicBool::new(false));
    let watcher = {
        let (signals, stop) = (signals.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                if signals.any() {
                    stop.store(true, Ordering::Relaxed);
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        })
    };
    // held open for the run and its report: see quiclab_store::output::Anchor
    let held = Arc::new(quiclab_store::output::Anchor::open(&out)?);
    let opts = RunOptions {
        out: out.clone(),
        held: held.clone(),
        jobs,
        bin: std::env::current_exe().context("cannot find the quiclab binary")?,
        keep_all_artifacts: c.keep_artifacts,
        provenance: provenance(&jobs, c.keep_cpus_awake),
        build: build(),
        allow_mixed_builds: c.allow_mixed_builds,
        shard: c.shard,
        host: hostname(),
        fail_after: (c.fail_after > 0).then_some(c.fail_after),
    };
    let started = Instant::now();
    let mut bar = Bar::new();
    let result = campaign::run(&plan, &opts, &stop, &mut bar);
    bar.end();
    let doubted = std::mem::take(&mut bar.doubted);
    let interrupted_by_signal = signals.any();
    stop.store(true, Ordering::Relaxed);
    let _ = watcher.join();
    let s = result?;
    eprintln!(
        "quiclab: {} trials ran ({} failed), {} were already done{}, in {:.0} s{}",
        s.ran,
        s.failed,
        s.skipped,
        if plan.adaptive.is_some() {
            format!(
                ", {} were left out (their condition and size had enough iterations)",
                s.adaptive_skipped
            )
        } else {
            String::new()
        },
        started.elapsed().as_secs_f64(),
        if s.interrupted {
            "; stopped early: run the same command again to finish"
        } else {
            ""
        }
    );
    for a in &s.stopped_arms {
        eprintln!(
            "quiclab: arm {:?} was stopped after {} failures in a row ({} of its trials left \
             out): {}",
            a.arm, a.failures, a.left_out, a.error
        );
    }
    for (arm, (n, why)) in &doubted {
        eprintln!(
            "quiclab: arm {arm:?}: {n} completed trial{} whose sender's record is in doubt \
             (its time budget and timeline charts are not to be trusted): {why}",
            if *n == 1 { "" } else { "s" }
        );
    }
    let report = render_held(&held, Store::open_existing(held.path())?)?;
    if c.json {
        let summary = serde_json::json!({
            "plan": plan.name,
            "source": plan.source,
            "profile": plan.profile.name(),
            "out": out,
            "report": report,
            "jobs": match jobs {
                Jobs::Fixed(n) => serde_json::json!(n),
                Jobs::Auto(ceiling) => serde_json::json!({
                    "auto": true,
                    "ceiling": ceiling,
                    "max": s.jobs_max,
                    "last": s.jobs_last,
                }),
            },
            "trials": {
                "total": s.total,
                "ran": s.ran,
                "failed": s.failed,
                "already_done": s.skipped,
                "left_out": s.adaptive_skipped,
            },
            "stopped_arms": s.stopped_arms.iter().map(|a| serde_json::json!({
                "arm": a.arm,
                "failures": a.failures,
                "error": a.error,
                "left_out": a.left_out,
            })).collect::<Vec<_>>(),
            "doubted_senders": doubted.iter().map(|(arm, (n, why))| serde_json::json!({
                "arm": arm,
                "trials": n,
                "why": why,
            })).collect::<Vec<_>>(),
            "interrupted": s.interrupted,
            "busy_seconds": s.busy_seconds,
            "seconds": started.elapsed().as_secs_f64(),
        });
        println!("{summary}");
    } else {
        println!("{}", report.display());
    }
    Ok(if interrupted_by_signal {
        usage::INTERRUPTED
    } else if s.failed > 0 {
        usage::FAILED
    } else {
        usage::OK
    })
}

/// Renders DIR/report.html from the database and returns its path.
fn render(dir: &Path) -> anyhow::Result<PathBuf> {
    // a directory without a campaign is refused before anything is made
    let store = Store::open_existing(dir)?;
    render_held(&quiclab_store::output::Anchor::open(dir)?, store)
}

/// Renders the campaign of `store` into the directory `held`, and shares that directory with
/// the invoking user's group.
fn render_held(held: &quiclab_store::output::Anchor, store: Store) -> anyhow::Result<PathBuf> {
    let campaign = store.campaign()?;
    let t = Instant::now();
    let html = quiclab_report::render(&campaign);
    // a kill mid-write leaves the old report, never half of one
    quiclab_store::output::write_atomic(&held.path().join("report.html"), html.as_bytes())?;
    eprintln!(
        "quiclab: report of {} trials rendered in {:.0} ms",
        campaign.trials.len(),
        t.elapsed().as_secs_f64() * 1000.0
    );
    share(held.path(), held.shown());
    Ok(held.shown().join("report.html"))
}

/// Run through sudo: the invoking user's group may read and write what root wrote into `dir`
/// (see quiclab_store::output::share_with_group), `shown` is its name.
fn share(dir: &Path, shown: &Path) {
    if let Some(gid) = quiclab_store::output::invoking_group()
        && let Err(e) = quiclab_store::output::share_with_group(dir, gid)
    {
        log::warn!("cannot share {} with group {gid}: {e}", shown.display());
    }
}

pub fn report(c: ReportCmd) -> anyhow::Result<i32> {
    let path = render(&c.dir)?;
    println!("{}", path.display());
    Ok(0)
}

pub fn export(c: ExportCmd) -> anyhow::Result<i32> {
    let store = Store::open_existing(&c.dir)?;
    let to = c.to.unwrap_or_else(|| c.dir.join("export"));
    match c.format {
        Format::Csv => {
            let e = store.export_csv(&to)?;
            share(&to, &to);
            for f in &e.files {
                println!("{}", f.display());
            }
            if e.stale > 0 {
                eprintln!(
                    "quiclab: exported the plan's {} current trials; {} trials of earlier \
                     versions of the plan stay in the database, not exported",
                    e.trials, e.stale
                );
            }
        }
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use quiclab_runner::expand::expand;
    use quiclab_runner::plan::Workload;

    #[test]
    fn built_in_plans_parse_and_their_quick_profiles_keep_every_condition_and_arm() {
        for (name, _) in BUILT_IN {
            let full = load_plan(Some(name), Profile::Full).unwrap();
            let quick = load_plan(Some(name), Profile::Quick).unwrap();
            assert_eq!(full.name, *name);
            let (f, q) = (expand(&full), expand(&quick));
            assert!(q.len() < f.len(), "{name}: quick is smaller");
            // every cell the full profile runs (all, or those its planted checks compare)
            assert_eq!(quick.cells, full.cells, "{name}");
            for (ci, _) in quick.conditions.iter().enumerate() {
                for (ai, _) in quick.arms.iter().enumerate() {
                    assert_eq!(
                        q.iter().any(|t| t.condition == ci && t.arm == ai),
                        full.runs(ai, ci),
                        "{name}: quick runs condition {ci} with arm {ai} where the plan does"
                    );
                }
            }
        }
    }

    #[test]
    fn hls_alternates_normal_and_impaired_runs_of_the_studys_segments() {
        let plan = load_plan(Some("hls"), Profile::Full).unwrap();
        let Workload::Segments {
            count,
            min_bytes,
            max_bytes,
            ..
        } = plan.workload
        else {
            panic!("hls fetches segments: {:?}", plan.workload);
        };
        assert_eq!((count, min_bytes, max_bytes), (15, 3_600_000, 5_000_000));
        assert_eq!(plan.iterations, 3);
        let normal = plan.interleave.expect("normal runs interleave");
        assert_eq!(plan.conditions[normal].name, "normal");
        // inbound and outbound x latency and loss, on one direction each
        let (mut inbound, mut outbound) = (0, 0);
        for c in plan.conditions.iter().filter(|c| c.name != "normal") {
            let (up, down) = (&c.link.up, &c.link.down);
            let impaired_down = down.loss > 0.0 || down.delay > up.delay;
            let impaired_up = up.loss > 0.0 || up.delay > down.delay;
            assert!(impaired_down != impaired_up, "{}: one direction", c.name);
            inbound += usize::from(impaired_down);
            outbound += usize::from(impaired_up);
            assert_eq!(c.rate_bps(), Some(38_000_000));
        }
        assert_eq!((inbound, outbound), (2, 2));
        let trials = expand(&plan);
        for pair in trials.chunks(2) {
            assert_eq!(pair[0].condition, normal);
            assert_eq!(pair[0].before, Some(pair[1].condition));
        }
    }
}
