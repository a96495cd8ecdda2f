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

use quiclab_model::campaign::{BulkDetail, Detail, Metrics, RequestMetrics, TimelinePoint};
use quiclab_model::record::{RequestRecord, now_us};
use quiclab_netns::topology::SERVER_V4;
use quiclab_netns::{DirectionReport, Mode, Process, Side, Topology, TopologyConfig};
use quiclab_store::TrialRecord;
use serde_json::json;

use crate::expand::TrialSpec;
use crate::outputs::{Sample, read_records, read_timeline, tail};
use crate::plan::{Plan, Workload};
use crate::stacks::{ClientRequest, Endpoint, Launch, ServerOutput};
use crate::{bulk, telemetry};

/// What trials need from their surroundings.
#[derive(Debug, Clone)]
pub struct TrialEnv {
    /// The quiclab binary that runs the endpoints (`quiclab serve`, `quiclab get`).
    pub bin: PathBuf,
    /// The campaign directory; trial folders go under `trials/`.
    pub dir: PathBuf,
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
/// How long an endpoint may take to stop after SIGTERM (it flushes its timeline first).
const STOP_GRACE: Duration = Duration::from_secs(3);

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
        Ok(m) => Ok(m),
        Err(Failure::Interrupted) => return TrialEnd::Interrupted,
        Err(Failure::Failed(why)) => Err(why),
    };
    TrialEnd::Done(Box::new(TrialRecord {
        id: spec.id.clone(),
        seq: spec.seq,
        arm: plan.arms[spec.arm].name.clone(),
        condition: plan.conditions[spec.condition].name.clone(),
        size: spec.size,
        iteration: spec.iteration,
        seed: spec.seed,
        config: spec.config.clone(),
        started_unix_ms,
        wall_ms: started.elapsed().as_secs_f64() * 1000.0,
        outcome,
        link,
        requests,
        phases,
        artifacts: Some(rel),
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

/// Quotes a word for `sh -c`.
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

/// The shell command that starts `launch` with its output and errors in files.
fn command(launch: &Launch, out: &Path, err: &Path) -> String {
    let mut s = format!("exec {}", sh(&launch.program.display().to_string()));
    for a in &launch.args {
        s.push(' ');
        s.push_str(&sh(a));
    }
    let s = format!(
        "{s} >{} 2>{}",
        sh(&out.display().to_string()),
        sh(&err.display().to_string())
    );
    match &launch.before {
        Some(before) => format!("{before} && {s}"),
        None => s,
    }
}

/// The trial's variables and the launch's own.
fn with_env(vars: &[(String, String)], launch: &Launch) -> Vec<(String, String)> {
    vars.iter().chain(&launch.env).cloned().collect()
}

/// The longest a trial's client may run: generous against the ideal transfer time of all its
/// requests and their round trips, so only a stuck transfer hits it.
fn client_timeout(plan: &Plan, spec: &TrialSpec) -> Duration {
    if let Some(t) = plan.trial_timeout {
        return t;
    }
    let cond = &plan.conditions[spec.condition];
    if let Workload::Telemetry { duration_ms, .. } = plan.workload {
        // the units' own time, then the client's drain (10 s at most) and set-up
        return Duration::from_millis(duration_ms) + Duration::from_secs(40);
    }
    let bytes: u64 = spec.requests.iter().sum::<u64>().max(spec.size);
    let ideal = match cond.rate_bps() {
        Some(bps) => bytes as f64 * 8.0 / bps as f64,
        None => bytes as f64 * 8.0 / 1e9,
    };
    // a handshake and a request round trip or two per request, many times over
    let rtts = 50.0 + 10.0 * spec.requests.len().saturating_sub(1) as f64;
    Duration::from_secs_f64(30.0 + 20.0 * ideal + rtts * cond.link.min_rtt().as_secs_f64())
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
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir)
        .map_err(|e| fail(format!("cannot create {}: {e}", dir.display())))?;
    let mut link = cond.link.clone();
    link.seed = spec.seed;
    let bulk = match plan.workload {
        Workload::Bulk { duration_ms } => Some(Duration::from_millis(duration_ms)),
        _ => None,
    };
    // a bulk trial moves gigabytes: no packet log or capture of it
    let events: Option<Box<dyn Write + Send>> = if env.events && bulk.is_none() {
        let p = dir.join("events.jsonl");
        let f = std::fs::File::create(&p)
            .map_err(|e| fail(format!("cannot create {}: {e}", p.display())))?;
        Some(Box::new(std::io::BufWriter::new(f)))
    } else {
        None
    };
    let pcap: Option<Box<dyn Write + Send>> = if bulk.is_none() {
        let pcap_path = dir.join("capture.pcap");
        Some(Box::new(std::io::BufWriter::new(
            std::fs::File::create(&pcap_path)
                .map_err(|e| fail(format!("cannot create {}: {e}", pcap_path.display())))?,
        )))
    } else {
        None
    };
    let mut lap = Lap::start();
    let mut topo = match cond.direct_mtu {
        // the kernel's own path, offloads on (as between two real hosts)
        Some(mtu) => Topology::direct(mtu, true),
        None => Topology::start(TopologyConfig {
            link,
            device_mtu: None,
            events,
            pcap,
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
    let telemetry = matches!(plan.workload, Workload::Telemetry { .. });
    let timeline = dir.join("server-timeline.jsonl");
    let units_log = dir.join("units.jsonl");
    let cert = dir.join("cert.pem");
    let endpoint = Endpoint {
        bin: &env.bin,
        cert: &cert,
        path_min_rtt: cond.link.min_rtt(),
        // a bulk trial's qlogs would be gigabytes
        qlog_dir: bulk.is_none().then_some(dir),
    };
    let server_out = if telemetry {
        ServerOutput::Units(&units_log)
    } else {
        ServerOutput::Timeline(&timeline)
    };
    let server_launch = arm
        .server_stack
        .server(&arm.stack_args(), &endpoint, server_out);
    let server_log = dir.join("server.log");
    let mut server = Process::spawn(
        topo.ns(Side::Server),
        "server",
        &command(&server_launch, &server_log, &server_log),
        &with_env(&vars, &server_launch),
        Mode::Background,
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
            return Err(fail(format!(
                "the server exited ({st}) before listening: {}",
                tail(&server_log, 3)
            )));
        }
        if Instant::now() > deadline {
            return Err(fail(format!(
                "the server did not listen within {SERVER_READY:?}: {}",
                tail(&server_log, 3)
            )));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let server_ms = lap.ms();
    // a bulk trial's clients run for a set time; any other trial's client runs to its end
    let connections = u32::try_from(spec.size).unwrap_or(u32::MAX);
    let bulk_run = bulk.map(|measured| {
        let request = ClientRequest {
            command: "get",
            json: false,
            args: vec![format!(
                "https://{SERVER_V4}/bytes/{}",
                quiclab_stack::server::MAX_BYTES
            )],
        };
        let launch = arm
            .client_stack
            .client(&arm.stack_args(), &endpoint, &request);
        bulk_clients(
            &topo,
            &vars,
            &launch,
            connections,
            dir,
            measured,
            stop,
            &server,
        )
    });
    let pages = matches!(plan.workload, Workload::Pages { .. });
    let request = ClientRequest {
        command: match (telemetry, pages) {
            (true, _) => "telemetry",
            (_, true) => "page",
            _ => "get",
        },
        json: true,
        args: workload_args(plan, spec),
    };
    let (client_out, client_log) = (dir.join("client.jsonl"), dir.join("client.log"));
    let timeout = client_timeout(plan, spec);
    let status = if bulk_run.is_some() {
        None
    } else {
        let launch = arm
            .client_stack
            .client(&arm.stack_args(), &endpoint, &request);
        let client_cmd = command(&launch, &client_out, &client_log);
        run_client(&topo, &with_env(&vars, &launch), &client_cmd, timeout, stop)?
    };
    let client_ms = lap.ms();
    // SIGTERM lets the server write its last timeline samples
    server.stop(STOP_GRACE);
    let stop_ms = lap.ms();
    let reports = topo
        .finish()
        .map_err(|e| fail(format!("stopping the link: {e}")))?;
    drop(topo);
    let teardown_ms = lap.ms();
    *phases_out = json!({
        "setup_ms": setup_ms,
        "server_start_ms": server_ms,
        "client_ms": client_ms,
        "server_stop_ms": stop_ms,
        "teardown_ms": teardown_ms,
    });
    *link_out = link_json(&reports);
    if let Some(run) = bulk_run {
        return bulk_metrics(run?, connections, &reports, &timeline);
    }
    if telemetry {
        return telemetry_metrics(
            dir,
            cond,
            &reports,
            link_epoch_ns,
            status,
            timeout,
            &client_log,
            &server_log,
            requests_out,
        );
    }
    if pages {
        let min_rtt_ms = cond.link.min_rtt().as_secs_f64() * 1000.0;
        return crate::page::trial_metrics(
            &client_out,
            &client_log,
            &timeline,
            status.ok_or(timeout),
            &reports,
            min_rtt_ms,
            requests_out,
        )
        .map_err(fail);
    }
    let records = read_records(&client_out);
    *requests_out = serde_json::Value::Array(
        records
            .iter()
            .filter_map(|r| serde_json::to_value(r).ok())
            .collect(),
    );
    if let Some(err) = reports.iter().find_map(|r| r.error.clone()) {
        return Err(fail(format!("the link emulator failed: {err}")));
    }
    let Some(status) = status else {
        return Err(fail(format!(
            "the client did not finish within {:.0} s",
            timeout.as_secs_f64()
        )));
    };
    if records.is_empty() {
        return Err(fail(format!(
            "the client ({status}) wrote no record: {}",
            tail(&client_log, 3)
        )));
    }
    let many = spec.requests.len() > 1;
    for (i, (rec, &size)) in records.iter().zip(&spec.requests).enumerate() {
        let which = if many {
            format!("request {} of {}: ", i + 1, spec.requests.len())
        } else {
            String::new()
        };
        if let Some(e) = &rec.error {
            return Err(fail(format!("{which}request failed: {e}")));
        }
        if rec.status != 200 || rec.bytes != size {
            return Err(fail(format!(
                "{which}status {} with {} of {size} bytes",
                rec.status, rec.bytes
            )));
        }
    }
    if records.len() != spec.requests.len() {
        return Err(fail(format!(
            "the client reported {} of {} requests: {}",
            records.len(),
            spec.requests.len(),
            tail(&client_log, 3)
        )));
    }
    if !status.success() {
        return Err(fail(format!(
            "the client exited with {status}: {}",
            tail(&client_log, 3)
        )));
    }
    let device_drops: u64 = reports.iter().map(|r| r.device_drops).sum();
    if device_drops > 0 {
        // loss the condition did not ask for: the measurement is not of this condition
        return Err(fail(format!(
            "{device_drops} packets were dropped by the kernel before reaching the emulator \
             (the host could not keep up)"
        )));
    }
    let min_rtt_ms = cond.link.min_rtt().as_secs_f64() * 1000.0;
    let mut m = metrics(
        &records,
        &read_timeline(&timeline, records[0].start_us),
        &reports,
        min_rtt_ms,
    );
    if matches!(plan.workload, Workload::Segments { .. }) && m.detail.is_empty() {
        // a sequence of one segment is still a sequence: the report reads segments from here
        m.detail = detail(&records);
    }
    Ok(m)
}

/// Runs the client to its end, or until `timeout` (then stopped: `None`).
fn run_client(
    topo: &Topology,
    vars: &[(String, String)],
    cmd: &str,
    timeout: Duration,
    stop: &AtomicBool,
) -> Result<Option<std::process::ExitStatus>, Failure> {
    let mut client = Process::spawn(topo.ns(Side::Client), "client", cmd, vars, Mode::Background)
        .map_err(|e| fail(format!("cannot start the client: {e}")))?;
    let deadline = Instant::now() + timeout;
    loop {
        if stop.load(Ordering::Relaxed) {
            return Err(Failure::Interrupted);
        }
        match client.try_wait() {
            Ok(Some(st)) => return Ok(Some(st)),
            Ok(None) => {}
            Err(e) => return Err(fail(format!("waiting for the client: {e}"))),
        }
        if Instant::now() > deadline {
            client.stop(Duration::from_millis(200));
            return Ok(None);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// A bulk trial's metrics from what its clients did, the link's reports and the server's
/// timeline.
fn bulk_metrics(
    run: BulkRun,
    connections: u32,
    reports: &[DirectionReport],
    timeline: &Path,
) -> Result<Metrics, Failure> {
    if let Some(err) = reports.iter().find_map(|r| r.error.clone()) {
        return Err(fail(format!("the link emulator failed: {err}")));
    }
    let device_drops: u64 = reports.iter().map(|r| r.device_drops).sum();
    let text = std::fs::read_to_string(timeline)
        .map_err(|e| fail(format!("reading {}: {e}", timeline.display())))?;
    let samples = bulk::samples(&text).map_err(fail)?;
    let bytes = bulk::acked_between(&samples, run.t0_us, run.t1_us);
    if bytes == 0 {
        return Err(fail("nothing was acknowledged over the measured interval"));
    }
    let (udp_payload, udp_payload_reached_ms) = bulk::udp_payload(&samples);
    let b = BulkDetail {
        connections,
        seconds: (run.t1_us - run.t0_us) as f64 / 1e6,
        bytes,
        server_cpu_s: run.server_cpu_s,
        client_cpu_s: run.client_cpu_s,
        udp_payload,
        udp_payload_reached_ms,
    };
    Ok(Metrics {
        ttlb_ms: b.seconds * 1000.0,
        ttfb_ms: f64::NAN,
        handshake_ms: None,
        handshake_rtts: None,
        hello_retry: false,
        retransmissions: None,
        first_retransmit_offset: None,
        impossible_rtt_samples: None,
        // the kernel's own drops count too: at these rates the host is part of the path
        link_drops: reports
            .iter()
            .map(|r| r.counters.dropped_total())
            .sum::<u64>()
            + device_drops,
        timeline: Vec::new(),
        detail: Detail {
            bulk: Some(b),
            ..Detail::default()
        },
    })
}

/// What the clients of a bulk trial did over the measured interval.
struct BulkRun {
    t0_us: u64,
    t1_us: u64,
    server_cpu_s: f64,
    client_cpu_s: f64,
}

/// Starts `connections` clients (one process and connection each, `launch` their command), lets
/// them warm up, then measures for `measured`: the interval's ends and the CPU time the server
/// and the clients used in it. Every client is still downloading at the end (one that stopped
/// early fails the trial); they are stopped before this returns.
#[allow(clippy::too_many_arguments)]
fn bulk_clients(
    topo: &Topology,
    vars: &[(String, String)],
    launch: &Launch,
    connections: u32,
    dir: &Path,
    measured: Duration,
    stop: &AtomicBool,
    server: &Process,
) -> Result<BulkRun, Failure> {
    let mut clients = Vec::new();
    let mut logs = Vec::new();
    for i in 0..connections {
        let log = dir.join(format!("client-{i}.log"));
        let c = Process::spawn(
            topo.ns(Side::Client),
            &format!("client {i}"),
            &command(launch, Path::new("/dev/null"), &log),
            &with_env(vars, launch),
            Mode::Background,
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
    Ok(BulkRun {
        t0_us,
        t1_us,
        server_cpu_s: s1 - s0,
        client_cpu_s: c1 - c0,
    })
}

/// A telemetry trial's metrics from the client's records, the server's unit log and the
/// emulator's drops; a failure if the run was cut short or a reliable mode lost units.
#[allow(clippy::too_many_arguments)]
fn telemetry_metrics(
    dir: &Path,
    cond: &crate::plan::Condition,
    reports: &[DirectionReport],
    link_epoch_ns: u64,
    status: Option<std::process::ExitStatus>,
    timeout: Duration,
    client_log: &Path,
    server_log: &Path,
    requests_out: &mut serde_json::Value,
) -> Result<Metrics, Failure> {
    let (flushes, summary) = telemetry::read_client(&dir.join("client.jsonl"));
    if let Some(s) = &summary {
        // the summary only: the flushes are in the trial's folder
        *requests_out = json!([s]);
    }
    let Some(status) = status else {
        return Err(fail(format!(
            "the client did not finish within {:.0} s",
            timeout.as_secs_f64()
        )));
    };
    let Some(summary) = summary else {
        return Err(fail(format!(
            "the client ({status}) wrote no summary: {}",
            tail(client_log, 3)
        )));
    };
    if let Some(e) = &summary.error {
        return Err(fail(format!("telemetry: {e}")));
    }
    if !status.success() {
        return Err(fail(format!(
            "the client exited with {status}: {}",
            tail(client_log, 3)
        )));
    }
    let device_drops: u64 = reports.iter().map(|r| r.device_drops).sum();
    if device_drops > 0 {
        return Err(fail(format!(
            "{device_drops} packets were dropped by the kernel before reaching the emulator \
             (the host could not keep up)"
        )));
    }
    let (received, ends) = telemetry::read_server(&dir.join("units.jsonl"));
    if let Some(e) = ends.iter().find_map(|c| c.error.clone()) {
        return Err(fail(format!(
            "the server's telemetry connection failed: {e}"
        )));
    }
    let drops = telemetry::read_drops(&dir.join("events.jsonl"), link_epoch_ns);
    let server_realtime =
        std::fs::read_to_string(server_log).is_ok_and(|t| t.contains("real-time priority"));
    let path = telemetry::PathModel {
        one_way_us: cond.link.up.delay.as_micros() as u64,
        rtt_us: cond.link.min_rtt().as_micros() as u64,
        loss_up: cond.link.up.loss,
        loss_down: cond.link.down.loss,
    };
    let (detail, outcomes) =
        telemetry::detail(&summary, &flushes, &received, &drops, path, server_realtime);
    let missing = outcomes.iter().filter(|o| o.recv_us.is_none()).count();
    if missing > 0 && !summary.mode.unreliable() {
        return Err(fail(format!(
            "{missing} of {} units never arrived over {}, a reliable mode",
            outcomes.len(),
            summary.mode
        )));
    }
    if outcomes.is_empty() {
        return Err(fail("the client sent no unit"));
    }
    let since_connect = |t: u64| t.saturating_sub(summary.connect_us) as f64 / 1000.0;
    let recv = || outcomes.iter().filter_map(|o| o.recv_us);
    let handshake_ms = summary.handshake_done_us.map(since_connect);
    let min_rtt_ms = path.rtt_us as f64 / 1000.0;
    let stats = &summary.transport_stats;
    Ok(Metrics {
        // the whole run, from the connection attempt to the first and the last unit received
        ttlb_ms: recv().max().map_or(f64::NAN, since_connect),
        ttfb_ms: recv().min().map_or(f64::NAN, since_connect),
        handshake_ms,
        handshake_rtts: handshake_ms
            .filter(|_| min_rtt_ms > 0.0)
            .map(|h| h / min_rtt_ms),
        hello_retry: false,
        retransmissions: stats.packets_lost,
        first_retransmit_offset: None,
        impossible_rtt_samples: stats.impossible_rtt_samples,
        link_drops: reports.iter().map(|r| r.counters.dropped_total()).sum(),
        timeline: Vec::new(),
        detail: Detail {
            telemetry: Some(detail),
            ..Detail::default()
        },
    })
}

/// What the client is told to do for the plan's workload: what `quiclab get` fetches, and
/// how; how much `quiclab telemetry` sends.
fn workload_args(plan: &Plan, spec: &TrialSpec) -> Vec<String> {
    let url = |size: u64| format!("https://{SERVER_V4}/bytes/{size}");
    let mut args: Vec<String> = Vec::new();
    match plan.workload {
        Workload::Telemetry {
            units_per_second,
            flush_units,
            duration_ms,
        } => {
            args.extend([
                "--units-per-second".into(),
                units_per_second.to_string(),
                "--flush".into(),
                flush_units.to_string(),
                "--duration".into(),
                format!("{duration_ms}ms"),
                format!("https://{SERVER_V4}"),
            ]);
        }
        // its clients are started by `bulk_clients`, one connection each
        Workload::Bulk { .. } => {}
        Workload::SingleObject => {
            args.extend(["--connection".into(), "new".into(), url(spec.size)]);
        }
        Workload::Repeat { requests } => {
            args.extend(["--connection".into(), "new".into()]);
            // resumption is the workload's point; an arm may still turn it off explicitly
            let arm = &plan.arms[spec.arm];
            if arm.knob("resume").is_none() && arm.client_stack.resumes() {
                args.push("--resume".into());
            }
            args.extend(["--repeat".into(), requests.to_string(), url(spec.size)]);
        }
        Workload::Segments { .. } => {
            args.extend(["--connection".into(), "reuse".into()]);
            args.extend(spec.requests.iter().map(|&s| url(s)));
        }
        Workload::Pages { .. } => {
            if let Some(p) = crate::page::page_for(&plan.workload, spec.size) {
                args.extend(["--page".into(), p.source.clone()]);
            }
            args.push(format!("https://{SERVER_V4}"));
        }
    }
    args
}

/// A trial's metrics from the client's records (at least one, in order), the sender's
/// timeline and the link's reports. The trial's TTLB runs from the first request's start to the
/// last request's last byte; its TTFB, handshake and TLS facts are the first request's.
pub fn metrics(
    records: &[RequestRecord],
    timeline: &[Sample],
    reports: &[DirectionReport],
    min_rtt_ms: f64,
) -> Metrics {
    let rec = &records[0];
    let last_rec = records.last().unwrap_or(rec);
    let ms = |t: Option<u64>| t.map(|t| t.saturating_sub(rec.start_us) as f64 / 1000.0);
    let handshake_ms = ms(rec.handshake_done_us);
    let last = timeline.last();
    let retransmissions = last.and_then(|s| s.retransmits).or_else(|| {
        records
            .iter()
            .map(|r| r.transport_stats.packets_lost)
            .sum::<Option<u64>>()
    });
    // The stack's own account of where its first loss was; failing that, the data acknowledged
    // when a retransmission was first seen (within one sampling period of it).
    let first_retransmit_offset = timeline
        .iter()
        .find_map(|s| s.first_loss_offset)
        .or_else(|| {
            timeline
                .iter()
                .find(|s| s.retransmits.unwrap_or(0) > 0)
                .and_then(|s| s.acked_bytes)
        });
    let impossible = last
        .and_then(|s| s.impossible_rtt_samples)
        .or(rec.transport_stats.impossible_rtt_samples);
    let detail = if records.len() > 1 {
        detail(records)
    } else {
        Detail::default()
    };
    Metrics {
        ttlb_ms: ms(last_rec.last_byte_us).unwrap_or(f64::NAN),
        ttfb_ms: ms(rec.first_byte_us).unwrap_or(f64::NAN),
        handshake_ms,
        handshake_rtts: handshake_ms
            .filter(|_| min_rtt_ms > 0.0)
            .map(|h| h / min_rtt_ms),
        hello_retry: rec.handshake.hello_retry,
        retransmissions,
        first_retransmit_offset,
        impossible_rtt_samples: impossible,
        link_drops: reports.iter().map(|r| r.counters.dropped_total()).sum(),
        timeline: timeline
            .iter()
            .filter_map(|s| {
                Some(TimelinePoint {
                    t_ms: s.t_ms,
                    acked_bytes: s.acked_bytes?,
                    cwnd_bytes: s.cwnd_bytes,
                    rtt_ms: s.rtt_ms,
                    congestion_event: s.congestion_event,
                })
            })
            .collect(),
        detail,
    }
}

/// Every request of a trial (at least one record) with its times from its own start, and its
/// start from the first request's.
pub fn detail(records: &[RequestRecord]) -> Detail {
    let first = records.first().map_or(0, |r| r.start_us);
    Detail {
        requests: records
            .iter()
            .map(|r| {
                let own = |t: Option<u64>| {
                    t.map_or(f64::NAN, |t| t.saturating_sub(r.start_us) as f64 / 1000.0)
                };
                RequestMetrics {
                    bytes: r.bytes,
                    start_ms: r.start_us.saturating_sub(first) as f64 / 1000.0,
                    ttfb_ms: own(r.first_byte_us),
                    ttlb_ms: own(r.last_byte_us),
                    new_connection: r.new_connection,
                    handshake_ms: r
                        .handshake_done_us
                        .map(|t| t.saturating_sub(r.start_us) as f64 / 1000.0),
                    resumed: r.handshake.resumed,
                    zero_rtt_attempted: r.handshake.zero_rtt_attempted,
                    zero_rtt_accepted: r.handshake.zero_rtt_accepted,
                }
            })
            .collect(),
        ..Detail::default()
    }
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
        let t = client_timeout(&seg, spec).as_secs_f64();
        assert!(t > 10.0 * ideal, "{t} s for an ideal {ideal} s");
        // one object keeps its limit: 30 s + 20 x its transfer + 50 round trips
        let one = crate::plan::parse(
            &text("kind = \"single-object\"\nsizes = [\"4.75MB\"]"),
            "t",
            crate::plan::Profile::Full,
        )
        .unwrap();
        let t = client_timeout(&one, &crate::expand::expand(&one)[0]).as_secs_f64();
        assert!((t - (30.0 + 20.0 * 1.0 + 50.0 * 0.12)).abs() < 1e-6, "{t}");
    }
}
