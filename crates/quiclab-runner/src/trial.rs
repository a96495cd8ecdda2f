//! One trial: a fresh topology, `quiclab serve` in the server namespace, `quiclab get` (or, for
//! telemetry, `quiclab telemetry`) in the client namespace, then the measurements gathered from
//! what they wrote.
//!
//! Every file a trial produces lands in its own folder (`trials/ID/`): the client's records
//! (`client.jsonl`), the server's sender-side timeline (`server-timeline.jsonl`) or, for
//! telemetry, the server's log of every unit received (`units.jsonl`), both
//! endpoints' logs, a qlog per QUIC connection (`*.sqlog`), the TLS key log (`keys.log`), a
//! packet capture of the client's side (`capture.pcap`, decryptable with the key log) and the
//! emulator's packet events (`events.jsonl`).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime};

use quiclab_link::Direction;
use quiclab_model::campaign::Metrics;
use quiclab_model::record::now_us;
use quiclab_netns::watch::HeldInotify;
use quiclab_netns::{DirectionReport, Mode, Process, Setup, Side, Topology, TopologyConfig};
use quiclab_store::TrialRecord;
use serde_json::json;

use crate::bulk;
use crate::expand::TrialSpec;
use crate::outputs::tail;
use crate::plan::Plan;
use crate::stacks::{self, Endpoint, Launch, ServerOutput};
use crate::workloads::{self, ClientPhase, Ran, ServerWrites, TimedRun, TrialCtx};

/// What trials need from their surroundings.
#[derive(Debug, Clone)]
pub struct TrialEnv {
    /// The quiclab binary that runs the endpoints (`quiclab serve`, `quiclab get`).
    pub bin: PathBuf,
    /// The campaign directory; trial folders go under `trials/`. A campaign's is the directory
    /// it holds open (`quiclab_store::output::Anchor::path`).
    pub dir: PathBuf,
    /// The campaign directory as the user named it, for messages: a failure's text says this
    /// where it would say `dir`.
    pub shown: PathBuf,
    /// Write the emulator's per-packet event log.
    pub events: bool,
}

/// How a trial ended.
#[derive(Debug)]
pub enum TrialEnd {
    /// Measured or failed: record it.
    Done(Box<TrialRecord>),
    /// Stopped by the user: nothing to record.
    Interrupted,
}

/// How long the server may take to listen.
const SERVER_READY: Duration = Duration::from_secs(10);
/// Beyond a round trip, the longest the server is left running for the client's last packets
/// to reach it after the client exits (they normally arrive within the uplink's delay: see
/// `execute`).
const ACK_SETTLE: Duration = Duration::from_millis(30);
/// How long the server has to take in the client's last packets once the link delivered them.
const TAKE_IN: Duration = Duration::from_millis(5);
/// How often a wait for the client looks whether the campaign is stopping.
const STOP_CHECK: Duration = Duration::from_millis(20);
/// How long an endpoint may take to stop after SIGTERM (it flushes its timeline first).
const STOP_GRACE: Duration = Duration::from_secs(3);

/// How long after a trial's failure a stop still claims it: the signal watcher sets the stop
/// within 50 ms of a signal.
const STOP_CLAIMS: Duration = Duration::from_millis(200);

/// Whether the campaign is stopping, or starts to within [`STOP_CLAIMS`].
fn stopping(stop: &AtomicBool) -> bool {
    let until = Instant::now() + STOP_CLAIMS;
    loop {
        if stop.load(std::sync::atomic::Ordering::Relaxed) {
            return true;
        }
        if Instant::now() >= until {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Why a trial's server never listened: `what` happened, then the last lines of its log, or that
/// it wrote nothing (never a colon followed by nothing).
fn not_ready(what: &str, said: &str) -> String {
    if said.trim().is_empty() {
        format!("the server {what} and wrote nothing")
    } else {
        format!("the server {what}: {said}")
    }
}

/// The folder of a trial, relative to the campaign directory.
pub fn trial_folder(id: &str) -> String {
    format!("trials/{id}")
}

/// Runs one trial. Never panics on a failing endpoint or link: failures are recorded.
pub fn run(env: &TrialEnv, plan: &Plan, spec: &TrialSpec, stop: &AtomicBool) -> TrialEnd {
    let started = Instant::now();
    let started_unix_ms = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0);
    let rel = trial_folder(&spec.id);
    let dir = env.dir.join(&rel);
    let mut link = serde_json::Value::Null;
    let mut requests = serde_json::Value::Array(Vec::new());
    let mut phases = serde_json::Value::Null;
    let outcome = match execute(
        env,
        plan,
        spec,
        &dir,
        stop,
        &mut link,
        &mut requests,
        &mut phases,
    ) {
        Ok(mut m) => {
            // the guard of the emulator's timing: a trial whose packets it handed over late
            // measured the host too; say so with the trial rather than trust it silently
            m.detail.emulator_late_ms = emulator_late_ms(&link).filter(|&l| l > EMULATOR_BEHIND_MS);
            Ok(m)
        }
        Err(Failure::Interrupted) => return TrialEnd::Interrupted,
        // a signal that stops the campaign may reach the trial's own processes (`ip`, the
        // endpoints) too, as a job scheduler's does (it signals every process of the job), and
        // fail the trial before the stop is seen: a failure at a stop is the stop's, and the
        // trial runs again on resumption
        Err(Failure::Failed(_)) if stopping(stop) => return TrialEnd::Interrupted,
        Err(Failure::Failed(why)) => Err(match (env.dir.to_str(), env.shown.to_str()) {
            (Some(dir), Some(shown)) if dir != shown => why.replace(dir, shown),
            _ => why,
        }),
    };
    TrialEnd::Done(Box::new(TrialRecord {
        id: spec.id.clone(),
        seq: spec.seq,
        arm: plan.arms[spec.arm].name.clone(),
        condition: plan.conditions[spec.condition].name.clone(),
        size: spec.size,
        iteration: spec.iteration,
        seed: spec.seed,
        config: spec.config(plan),
        started_unix_ms,
        wall_ms: started.elapsed().as_secs_f64() * 1000.0,
        outcome,
        link,
        requests,
        phases,
        artifacts: Some(rel),
        // the campaign records its build, host and shard with the trial
        build: None,
        host: None,
        shard: None,
    }))
}

/// Successive stretches of a trial's wall time.
struct Lap(Instant);

impl Lap {
    fn start() -> Self {
        Lap(Instant::now())
    }

    /// Milliseconds since the previous call (or the start).
    fn ms(&mut self) -> f64 {
        let now = Instant::now();
        let ms = (now - self.0).as_secs_f64() * 1000.0;
        self.0 = now;
        ms
    }
}

enum Failure {
    Interrupted,
    Failed(String),
}

fn fail(why: impl Into<String>) -> Failure {
    Failure::Failed(why.into())
}

/// The program of `launch` with its arguments, the trial's variables and the launch's own, and
/// its output and errors in files (one file opened once when they are the same).
fn command(
    launch: &Launch,
    vars: &[(String, String)],
    out: &Path,
    err: &Path,
) -> Result<std::process::Command, Failure> {
    let create = |p: &Path| {
        std::fs::File::create(p).map_err(|e| fail(format!("cannot create {}: {e}", p.display())))
    };
    let out_file = create(out)?;
    let err_file = if err == out {
        out_file
            .try_clone()
            .map_err(|e| fail(format!("cannot share {}: {e}", out.display())))?
    } else {
        create(err)?
    };
    let mut c = std::process::Command::new(&launch.program);
    c.args(&launch.args)
        .envs(with_env(vars, launch))
        .stdout(out_file)
        .stderr(err_file);
    Ok(c)
}

/// What is done in the program's own process first: its namespace's sysctls, and the
/// descriptors it inherits.
fn setup(launch: &Launch, keep: Vec<std::os::fd::RawFd>) -> Setup {
    Setup {
        keep,
        sysctls: launch.sysctls.clone(),
    }
}

/// The trial's variables and the launch's own.
fn with_env(vars: &[(String, String)], launch: &Launch) -> Vec<(String, String)> {
    vars.iter().chain(&launch.env).cloned().collect()
}

/// What a trial starts, with its files in `dir`.
struct Plumbing {
    /// What the server writes (its timeline, or the telemetry units it received).
    server_output: PathBuf,
    server: Launch,
    /// The client (one of several alike for a timed phase).
    client: Launch,
    phase: ClientPhase,
}

/// The folder of a trial's directory its server serves a page's real web content from; removed
/// when the trial ends (it is made again from the manifest).
const SITE_ROOT: &str = "www";

/// The real web content of a trial's page under `dir/SITE_ROOT`, removed when dropped (so on
/// every way out of the trial, after its server, which is started later and so dropped first).
struct Site(std::path::PathBuf);

impl Site {
    fn write(page: &quiclab_pages::page::Page, dir: &Path) -> Result<Site, String> {
        use quiclab_pages::site;
        let root = Site(dir.join(SITE_ROOT));
        let folder = root.0.join(site::SITE_DIR).join(site::slug(page));
        site::build(page)
            .write(&folder)
            .map_err(|e| format!("cannot write the page's site in {}: {e}", folder.display()))?;
        Ok(root)
    }
}

impl Drop for Site {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn plumbing(bin: &Path, dir: &Path, plan: &Plan, spec: &TrialSpec) -> Result<Plumbing, String> {
    let arm = &plan.arms[spec.arm];
    let workload = workloads::of(&plan.workload);
    let cert = dir.join("cert.pem");
    let root = workload
        .site(&trial_ctx(plan, spec))
        .map(|_| dir.join(SITE_ROOT));
    let endpoint = Endpoint {
        bin,
        cert: &cert,
        path_min_rtt: plan.conditions[spec.condition].link.rtt_floor(),
        qlog_dir: workload.keeps_packets().then_some(dir),
        dir,
        objects: &spec.requests,
        root: root.as_deref(),
    };
    let writes = workload.server_writes();
    let server_output = dir.join(match writes {
        ServerWrites::Units => "units.jsonl",
        ServerWrites::Timeline => "server-timeline.jsonl",
    });
    let out = match writes {
        ServerWrites::Units => ServerOutput::Units(&server_output),
        ServerWrites::Timeline => ServerOutput::Timeline(&server_output),
    };
    let server = arm.server_stack.server(&arm.stack_args(), &endpoint, out);
    let mut phase = workload.client(&trial_ctx(plan, spec));
    // a response delay the arm plants comes on top of the workload's
    let planted = stacks::response_delay_us(&arm.knobs);
    if planted > 0 {
        let (ClientPhase::Once(r) | ClientPhase::Timed { request: r, .. }) = &mut phase;
        r.response_delay_us += planted;
    }
    let request = match &phase {
        ClientPhase::Once(r) | ClientPhase::Timed { request: r, .. } => r,
    };
    let client = stacks::launch_client(arm.client_stack, &arm.stack_args(), &endpoint, request)?;
    Ok(Plumbing {
        server_output,
        server,
        client,
        phase,
    })
}

/// What a trial whose files would go to `dir` starts: its server's launch and its client's;
/// `Err` says why its client stack cannot do what the workload asks.
pub fn launches(
    bin: &Path,
    dir: &Path,
    plan: &Plan,
    spec: &TrialSpec,
) -> Result<(Launch, Launch), String> {
    let p = plumbing(bin, dir, plan, spec)?;
    Ok((p.server, p.client))
}

/// The server's and the client's command lines of a trial whose files would go to `dir`, for
/// a dry run; `Err` as [`launches`].
pub fn command_lines(
    bin: &Path,
    dir: &Path,
    plan: &Plan,
    spec: &TrialSpec,
) -> Result<(String, String), String> {
    let p = plumbing(bin, dir, plan, spec)?;
    let line = |l: &Launch| {
        let mut words = vec![sh(&l.program.display().to_string())];
        words.extend(l.args.iter().map(|a| sh(a)));
        // the sysctls it writes first, as the shell would
        let mut parts: Vec<String> = l
            .sysctls
            .iter()
            .map(|(path, value)| format!("echo {} > {}", sh(value), sh(path)))
            .collect();
        parts.push(words.join(" "));
        parts.join(" && ")
    };
    Ok((line(&p.server), line(&p.client)))
}

/// Quotes a word for a shell.
fn sh(word: &str) -> String {
    if !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./:=,+@%".contains(c))
    {
        word.to_string()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

/// What the workload's functions know of this trial.
fn trial_ctx<'a>(plan: &'a Plan, spec: &'a TrialSpec) -> TrialCtx<'a> {
    let arm = &plan.arms[spec.arm];
    TrialCtx {
        workload: &plan.workload,
        size: spec.size,
        requests: &spec.requests,
        link: &plan.conditions[spec.condition].link,
        trial_timeout: plan.trial_timeout,
        resume_by_default: arm.knob("resume").is_none() && arm.client_stack.resumes(),
        scheme: arm.client_stack.scheme(),
        sender_record: arm.server_stack.sender_record(),
    }
}

#[allow(clippy::too_many_arguments)]
fn execute(
    env: &TrialEnv,
    plan: &Plan,
    spec: &TrialSpec,
    dir: &Path,
    stop: &AtomicBool,
    link_out: &mut serde_json::Value,
    requests_out: &mut serde_json::Value,
    phases_out: &mut serde_json::Value,
) -> Result<Metrics, Failure> {
    let arm = &plan.arms[spec.arm];
    let cond = &plan.conditions[spec.condition];
    let workload = workloads::of(&plan.workload);
    let t = trial_ctx(plan, spec);
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir)
        .map_err(|e| fail(format!("cannot create {}: {e}", dir.display())))?;
    let mut link = cond.link.clone();
    link.seed = spec.seed;
    let packets = workload.keeps_packets();
    let events: Option<Box<dyn Write + Send>> = if env.events && packets {
        let p = dir.join("events.jsonl");
        let f = std::fs::File::create(&p)
            .map_err(|e| fail(format!("cannot create {}: {e}", p.display())))?;
        Some(Box::new(std::io::BufWriter::new(f)))
    } else {
        None
    };
    let pcap: Option<Box<dyn Write + Send>> = if packets {
        let pcap_path = dir.join("capture.pcap");
        Some(Box::new(std::io::BufWriter::new(
            std::fs::File::create(&pcap_path)
                .map_err(|e| fail(format!("cannot create {}: {e}", pcap_path.display())))?,
        )))
    } else {
        None
    };
    let mut lap = Lap::start();
    let runner_cpu = quiclab_netns::sys::thread_cpu();
    let mut topo = match cond.direct_mtu {
        // the kernel's own path, offloads on (as between two real hosts)
        Some(mtu) => Topology::direct(mtu, true),
        None => Topology::start(TopologyConfig {
            link,
            device_mtu: None,
            events,
            pcap,
            offloads: cond.offloads,
        }),
    }
    .map_err(|e| fail(format!("cannot build the topology: {e}")))?;
    let link_epoch_ns = topo.link_epoch_ns().unwrap_or(0);
    let setup_ms = lap.ms();
    let mut vars = topo.env();
    vars.push((
        "SSLKEYLOGFILE".into(),
        dir.join("keys.log").display().to_string(),
    ));
    let Plumbing {
        server_output,
        server: server_launch,
        client: client_launch,
        phase,
    } = plumbing(&env.bin, dir, plan, spec).map_err(fail)?;
    let site = workload
        .site(&t)
        .map(|page| Site::write(&page, dir))
        .transpose()
        .map_err(fail)?;
    let server_log = dir.join("server.log");
    let inotify = server_launch
        .inotify
        .then(HeldInotify::new)
        .transpose()
        .map_err(|e| fail(format!("cannot make an inotify instance: {e}")))?;
    let mut server_cmd = command(&server_launch, &vars, &server_log, &server_log)?;
    server_cmd.envs(inotify.as_ref().map(HeldInotify::var));
    let mut server = Process::start(
        topo.ns(Side::Server),
        "server",
        server_cmd,
        Mode::Background,
        &setup(
            &server_launch,
            inotify.iter().map(HeldInotify::raw).collect(),
        ),
    )
    .map_err(|e| fail(format!("cannot start the server: {e}")))?;
    // the server's log tells when it listens
    let deadline = Instant::now() + SERVER_READY;
    loop {
        if stop.load(Ordering::Relaxed) {
            return Err(Failure::Interrupted);
        }
        if std::fs::read_to_string(&server_log).is_ok_and(|t| arm.server_stack.ready(&t)) {
            break;
        }
        if let Ok(Some(st)) = server.try_wait() {
            return Err(fail(not_ready(
                &format!("exited ({st}) before listening"),
                &tail(&server_log, 3),
            )));
        }
        if Instant::now() > deadline {
            return Err(fail(not_ready(
                &format!("did not listen within {SERVER_READY:?}"),
                &tail(&server_log, 3),
            )));
        }
        // a server listens a few milliseconds after it starts: look often (a read of a
        // short log)
        std::thread::sleep(Duration::from_millis(1));
    }
    let server_ms = lap.ms();
    let (client_out, client_log) = (dir.join("client.jsonl"), dir.join("client.log"));
    let timeout = workload.timeout(&t);
    let mut client_cpu = None;
    let (status, timed) = match phase {
        ClientPhase::Once(_) => {
            let client_cmd = command(&client_launch, &vars, &client_out, &client_log)?;
            let setup = setup(&client_launch, Vec::new());
            let (status, cpu) = run_client(&topo, client_cmd, &setup, timeout, stop)?;
            client_cpu = cpu;
            (status, None)
        }
        ClientPhase::Timed {
            connections,
            measured,
            ..
        } => {
            let run = timed_clients(
                &topo,
                &vars,
                &client_launch,
                connections,
                dir,
                measured,
                stop,
                &server,
            );
            (None, Some(run))
        }
    };
    let client_ms = lap.ms();
    // The client's last packets (its acknowledgements, its close) are still on the path when
    // it exits, and it sends nothing after: once the uplink has delivered them and the server
    // has had a moment to take them in, the server's timeline ends with everything
    // acknowledged. The wait is bounded by what the path could hold them for.
    if !stop.load(Ordering::Relaxed) {
        topo.wait_drained(Direction::Up, cond.link.min_rtt() + ACK_SETTLE);
        std::thread::sleep(TAKE_IN);
    }
    // SIGTERM lets the server write its last timeline samples
    server.stop(STOP_GRACE);
    // closed on a thread of its own, now that the server no longer uses it
    drop(inotify);
    drop(site);
    let stop_ms = lap.ms();
    let reports = topo
        .finish()
        .map_err(|e| fail(format!("stopping the link: {e}")))?;
    let writers_cpu = topo.writers_cpu();
    drop(topo);
    let teardown_ms = lap.ms();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    *phases_out = json!({
        "setup_ms": setup_ms,
        "server_start_ms": server_ms,
        "client_ms": client_ms,
        "server_stop_ms": stop_ms,
        "teardown_ms": teardown_ms,
        "cpu_ms": {
            "emulator": cond.direct_mtu.is_none()
                .then(|| ms(reports.iter().map(|r| r.cpu).sum())),
            "writers": cond.direct_mtu.is_none().then(|| ms(writers_cpu)),
            "server": server.cpu().map(ms),
            "client": client_cpu.map(ms),
        },
    });
    *link_out = link_json(&reports);
    let ran = Ran {
        dir,
        client_out: &client_out,
        client_log: &client_log,
        server_log: &server_log,
        server_output: &server_output,
        status,
        timeout,
        timed: timed.transpose()?,
        reports: &reports,
        link_epoch_ns,
    };
    // reading the trial's files into its measurements (the time budget above all)
    let measuring = Instant::now();
    let m = workload.metrics(&t, &ran, requests_out).map_err(fail);
    phases_out["metrics_ms"] = json!(measuring.elapsed().as_secs_f64() * 1000.0);
    // the trial's own thread, from the topology's set-up to its measurements' end
    phases_out["cpu_ms"]["runner"] = json!(ms(
        quiclab_netns::sys::thread_cpu().saturating_sub(runner_cpu)
    ));
    m
}

/// Runs the client to its end, or until `timeout` (then stopped: `None`); with the CPU time it
/// used.
fn run_client(
    topo: &Topology,
    cmd: std::process::Command,
    setup: &Setup,
    timeout: Duration,
    stop: &AtomicBool,
) -> Result<(Option<std::process::ExitStatus>, Option<Duration>), Failure> {
    let mut client = Process::start(
        topo.ns(Side::Client),
        "client",
        cmd,
        Mode::Background,
        setup,
    )
    .map_err(|e| fail(format!("cannot start the client: {e}")))?;
    let deadline = Instant::now() + timeout;
    loop {
        if stop.load(Ordering::Relaxed) {
            return Err(Failure::Interrupted);
        }
        // woken at the client's exit, and at least every STOP_CHECK to see a stop
        let slice = deadline
            .saturating_duration_since(Instant::now())
            .min(STOP_CHECK);
        match client.wait_timeout(slice) {
            Ok(Some(st)) => return Ok((Some(st), client.cpu())),
            Ok(None) => {}
            Err(e) => return Err(fail(format!("waiting for the client: {e}"))),
        }
        if Instant::now() >= deadline {
            client.stop(Duration::from_millis(200));
            return Ok((None, client.cpu()));
        }
    }
}

/// Starts `connections` clients (one process and connection each, `launch` their command), lets
/// them warm up, then measures for `measured`: the interval's ends and the CPU time the server
/// and the clients used in it. Every client is still downloading at the end (one that stopped
/// early fails the trial); they are stopped before this returns.
#[allow(clippy::too_many_arguments)]
fn timed_clients(
    topo: &Topology,
    vars: &[(String, String)],
    launch: &Launch,
    connections: u32,
    dir: &Path,
    measured: Duration,
    stop: &AtomicBool,
    server: &Process,
) -> Result<TimedRun, Failure> {
    let mut clients = Vec::new();
    let mut logs = Vec::new();
    for i in 0..connections {
        let log = dir.join(format!("client-{i}.log"));
        let c = Process::start(
            topo.ns(Side::Client),
            &format!("client {i}"),
            command(launch, vars, Path::new("/dev/null"), &log)?,
            Mode::Background,
            &setup(launch, Vec::new()),
        )
        .map_err(|e| fail(format!("cannot start client {i}: {e}")))?;
        clients.push(c);
        logs.push(log);
    }
    // sleeps until `until`, failing if a client stopped or a stop was asked for
    let wait = |clients: &mut [Process], until: Instant| -> Result<(), Failure> {
        loop {
            if stop.load(Ordering::Relaxed) {
                return Err(Failure::Interrupted);
            }
            for (i, c) in clients.iter_mut().enumerate() {
                if let Ok(Some(st)) = c.try_wait() {
                    return Err(fail(format!(
                        "client {i} stopped ({st}) while it should still be downloading: {}",
                        tail(&logs[i], 3)
                    )));
                }
            }
            let now = Instant::now();
            if now >= until {
                return Ok(());
            }
            std::thread::sleep((until - now).min(Duration::from_millis(20)));
        }
    };
    let started = Instant::now();
    wait(&mut clients, started + bulk::warmup(measured))?;
    let (t0_us, (s0, c0)) = (now_us(), bulk::cpu_s(server, &clients));
    wait(&mut clients, Instant::now() + measured)?;
    let (t1_us, (s1, c1)) = (now_us(), bulk::cpu_s(server, &clients));
    for c in &mut clients {
        c.stop(Duration::from_millis(200));
    }
    Ok(TimedRun {
        t0_us,
        t1_us,
        server_cpu_s: s1 - s0,
        client_cpu_s: c1 - c0,
    })
}

/// How late the emulator may hand a packet over before its trial is flagged (a host that
/// stalls the forwarding threads this long has lengthened the packet's path by as much).
pub const EMULATOR_BEHIND_MS: f64 = 5.0;

/// The latest the emulator handed a packet over, in either direction, from a trial's link
/// record (ms; None without an emulator).
fn emulator_late_ms(link: &serde_json::Value) -> Option<f64> {
    link.as_array()?
        .iter()
        .filter_map(|d| d["lateness_max_us"].as_f64())
        .reduce(f64::max)
        .map(|us| us / 1000.0)
}

fn link_json(reports: &[DirectionReport]) -> serde_json::Value {
    serde_json::Value::Array(
        reports
            .iter()
            .map(|r| {
                json!({
                    "direction": r.dir.as_str(),
                    "counters": r.counters,
                    "device_drops": r.device_drops,
                    "write_errors": r.write_errors,
                    "lateness_p50_us": r.lateness_us(0.5),
                    "lateness_p99_us": r.lateness_us(0.99),
                    "lateness_max_us": r.lateness_ns.max() as f64 / 1000.0,
                    "error": r.error,
                })
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_server_that_never_listened_is_said_with_its_last_words_or_that_it_wrote_none() {
        let why = not_ready("did not listen within 10s", "");
        assert_eq!(
            why,
            "the server did not listen within 10s and wrote nothing"
        );
        let why = not_ready("exited (exit status: 1) before listening", " \n");
        assert!(why.ends_with("and wrote nothing"), "{why}");
        let why = not_ready("did not listen within 10s", "bind: in use");
        assert_eq!(why, "the server did not listen within 10s: bind: in use");
    }

    #[test]
    fn a_pages_site_is_removed_on_every_way_out() {
        let dir = std::env::temp_dir().join(format!("quiclab-site-{}", std::process::id()));
        let page = quiclab_pages::page::builtin("small").unwrap();
        // a way out by an error after the site was written: the guard goes with it
        let early = || -> Result<(), String> {
            let site = Site::write(&page, &dir)?;
            assert!(site.0.join(quiclab_pages::site::SITE_DIR).is_dir());
            Err("the server did not start".into())
        };
        assert!(early().is_err());
        assert!(dir.is_dir() && !dir.join(SITE_ROOT).exists());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_servers_handshake_limit_grows_with_the_path() {
        // a 10 s one-way delay: a TCP+TLS handshake alone takes over 40 s, beyond a server's
        // limit of 10 s on a path of no delay
        for (delay, wanted_us) in [("0ms", 10_000_000), ("10s", 210_000_000)] {
            let plan = crate::plan::parse(
                &format!(
                    "name = \"t\"\niterations = 1\n[workload]\nkind = \"single-object\"\n\
                     sizes = [\"1KB\"]\n[network]\ndelay = \"{delay}\"\n[arms.h2]\nhttp = \"2\"\n"
                ),
                "t",
                crate::plan::Profile::Full,
            )
            .unwrap();
            let spec = &crate::expand::expand(&plan)[0];
            let (server, _) =
                command_lines(Path::new("quiclab"), Path::new("/d"), &plan, spec).unwrap();
            assert!(
                server.contains(&format!("\"handshake_timeout_us\":{wanted_us}")),
                "{delay}: {server}"
            );
        }
    }

    #[test]
    fn a_trial_of_several_requests_has_time_for_all_of_them() {
        let text = |workload: &str| {
            format!(
                "name = \"t\"\niterations = 1\n[workload]\n{workload}\n[network]\n\
                 rate = \"38mbit\"\ndelay = \"60ms\"\n[arms.h1]\nhttp = \"1.1\"\n"
            )
        };
        let seg = crate::plan::parse(
            &text("kind = \"segments\"\nsegments = 15\nsegment-min = \"3.6MB\"\nsegment-max = \"5MB\""),
            "t",
            crate::plan::Profile::Full,
        )
        .unwrap();
        let spec = &crate::expand::expand(&seg)[0];
        let bytes: u64 = spec.requests.iter().sum();
        // 15 segments at the link's rate, and each request's round trip, many times over
        let ideal = bytes as f64 * 8.0 / 38e6 + 15.0 * 0.12;
        let timeout = |plan: &Plan, spec: &TrialSpec| {
            workloads::of(&plan.workload)
                .timeout(&trial_ctx(plan, spec))
                .as_secs_f64()
        };
        let t = timeout(&seg, spec);
        assert!(t > 10.0 * ideal, "{t} s for an ideal {ideal} s");
        // one object keeps its limit: 30 s + 20 x its transfer + 50 round trips
        let one = crate::plan::parse(
            &text("kind = \"single-object\"\nsizes = [\"4.75MB\"]"),
            "t",
            crate::plan::Profile::Full,
        )
        .unwrap();
        let t = timeout(&one, &crate::expand::expand(&one)[0]);
        assert!((t - (30.0 + 20.0 * 1.0 + 50.0 * 0.12)).abs() < 1e-6, "{t}");
    }
}
