//! `quiclab link` and `quiclab clean` as a user runs them (as root: namespaces need it).

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod common;

fn quiclab() -> Command {
    common::assert_root();
    common::quiclab()
}

/// Namespaces of the run whose processes wrote `pidfile` (found via their namespace).
fn netns_of(pid: i32) -> Option<String> {
    let out = Command::new("ip")
        .args(["netns", "identify", &pid.to_string()])
        .output()
        .ok()?;
    let s = String::from_utf8_lossy(&out.stdout).trim().to_string();
    (!s.is_empty()).then_some(s)
}

fn read_pid(p: &Path, timeout: Duration) -> i32 {
    let t0 = Instant::now();
    loop {
        if let Ok(s) = std::fs::read_to_string(p)
            && let Ok(pid) = s.trim().parse()
        {
            return pid;
        }
        assert!(t0.elapsed() < timeout, "{} never appeared", p.display());
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// True if `pid` is gone (or a zombie awaiting its reaper: it holds no resources).
fn is_gone(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(s) => {
            s.rsplit(')')
                .next()
                .and_then(|r| r.split_whitespace().next())
                == Some("Z")
        }
    }
}

fn namespace_exists(name: &str) -> bool {
    Path::new("/run/netns").join(name).exists()
}

fn wait_until(timeout: Duration, mut f: impl FnMut() -> bool) -> bool {
    let t0 = Instant::now();
    while t0.elapsed() < timeout {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    f()
}

#[test]
fn exit_code_and_environment_come_through_and_nothing_is_left() {
    let _turn = common::one_at_a_time();
    let d = common::TempDir::new("env");
    let spid = d.join("server.pid");
    let out = quiclab()
        .args(["link", "--delay", "1ms", "--wait", "0s", "--server"])
        .arg(format!("echo $$ > {}; exec sleep 60", spid.display()))
        .arg("--client")
        .arg(
            r#"test "$QUICLAB_SERVER" = 198.18.0.2 && test "$QUICLAB_CLIENT" = 198.18.0.1 &&
               test "$QUICLAB_SERVER6" = fd51:c1ab::2 && ping -q -c 1 -W 2 $QUICLAB_SERVER >/dev/null && exit 7"#,
        )
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(7), "{stderr}");
    // one echo request up and one reply down crossed the emulator
    assert!(
        stderr.contains("up   (client -> server): 1 packets in, 1 out"),
        "{stderr}"
    );
    let server = read_pid(&spid, Duration::from_secs(1));
    assert!(
        wait_until(Duration::from_secs(2), || is_gone(server)),
        "server process {server} survived"
    );
    let run = stderr
        .split("link ")
        .nth(1)
        .and_then(|s| s.split(':').next())
        .unwrap();
    for side in ["client", "server"] {
        assert!(
            !namespace_exists(&format!("quiclab-{run}-{side}")),
            "namespace of run {run} left behind"
        );
    }
    assert!(!Path::new(&format!("/run/quiclab/{run}.lock")).exists());
}

#[test]
fn bad_values_are_reported_with_the_flag_and_what_is_allowed() {
    let _turn = common::one_at_a_time();
    let out = quiclab()
        .args(["link", "--up-rate", "10mbits", "--client", "true"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("--up-rate = \"10mbits\""), "{stderr}");
    assert!(stderr.contains("allowed"), "{stderr}");
    let out = quiclab()
        .args(["link", "--loss", "1", "--client", "true"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--loss") && stderr.contains("%"),
        "{stderr}"
    );
}

/// Ctrl-C (SIGINT) and SIGTERM stop the run and remove everything it made.
#[test]
fn signals_stop_the_run_cleanly() {
    let _turn = common::one_at_a_time();
    for sig in [libc::SIGINT, libc::SIGTERM] {
        let d = common::TempDir::new(&format!("sig{sig}"));
        let cpid = d.join("client.pid");
        let mut child = quiclab()
            .args(["link", "--wait", "0s", "--client"])
            .arg(format!("echo $$ > {}; exec sleep 60", cpid.display()))
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let client = read_pid(&cpid, Duration::from_secs(5));
        let ns = netns_of(client).expect("client runs in a namespace");
        // SAFETY: signals the quiclab process this test started.
        unsafe { libc::kill(child.id() as i32, sig) };
        let st = child.wait().unwrap();
        assert_eq!(st.code(), Some(130), "signal {sig}");
        assert!(is_gone(client), "client survived signal {sig}");
        assert!(!namespace_exists(&ns), "{ns} survived signal {sig}");
    }
}

/// The pid of the reaper (`quiclab __reap`) that quiclab process `pid` started.
fn reaper_of(pid: u32) -> Option<u32> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
    tasks
        .filter_map(|t| t.ok())
        .filter_map(|t| std::fs::read_to_string(t.path().join("children")).ok())
        .flat_map(|c| {
            c.split_whitespace()
                .filter_map(|p| p.parse::<u32>().ok())
                .collect::<Vec<_>>()
        })
        .find(|child| {
            std::fs::read(format!("/proc/{child}/cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains("__reap"))
        })
}

/// After SIGKILL (of quiclab and its reaper) nothing can clean up in-process; `quiclab clean` must then remove the
/// namespaces and every process in them (here a grandchild that outlives its parent), and leave
/// live runs alone.
#[test]
fn clean_removes_what_a_killed_run_left_and_spares_live_runs() {
    let _turn = common::one_at_a_time();
    let d = common::TempDir::new("kill");
    let (spid, cpid, lpid) = (
        d.join("server.pid"),
        d.join("client.pid"),
        d.join("live.pid"),
    );
    // a live run that clean must not touch
    let mut live = quiclab()
        .args(["link", "--wait", "0s", "--client"])
        .arg(format!("echo $$ > {}; exec sleep 60", lpid.display()))
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let live_client = read_pid(&lpid, Duration::from_secs(5));
    let live_ns = netns_of(live_client).unwrap();

    let mut victim = quiclab()
        .args(["link", "--wait", "0s", "--server"])
        .arg(format!("sleep 600 & echo $! > {}; wait", spid.display()))
        .arg("--client")
        .arg(format!("sleep 600 & echo $! > {}; wait", cpid.display()))
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let server = read_pid(&spid, Duration::from_secs(5));
    let client = read_pid(&cpid, Duration::from_secs(5));
    let (sns, cns) = (netns_of(server).unwrap(), netns_of(client).unwrap());
    // the run's reaper would remove its namespaces once it dies: kill it first, as a kill of
    // the whole machine's processes (an out-of-memory killer's spree) would
    let reaper = reaper_of(victim.id()).expect("the run started its reaper");
    // SAFETY: kills the reaper process of the quiclab process this test started.
    unsafe { libc::kill(reaper as i32, libc::SIGKILL) };
    // SAFETY: kills the quiclab process this test started.
    unsafe { libc::kill(victim.id() as i32, libc::SIGKILL) };
    victim.wait().unwrap();
    std::thread::sleep(Duration::from_millis(200));
    assert!(
        namespace_exists(&sns) && namespace_exists(&cns),
        "SIGKILL leaves the namespaces"
    );
    assert!(
        !is_gone(server) && !is_gone(client),
        "grandchildren outlive a SIGKILLed run"
    );

    let out = quiclab().arg("clean").output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}{stderr}");
    assert!(
        stdout.contains(&format!("removed namespace {sns}")),
        "{stdout}"
    );
    assert!(!namespace_exists(&sns) && !namespace_exists(&cns));
    assert!(wait_until(Duration::from_secs(2), || is_gone(server)
        && is_gone(client)));
    let links = Command::new("ip").args(["-o", "link"]).output().unwrap();
    assert!(
        !String::from_utf8_lossy(&links.stdout).contains("quiclab"),
        "a quiclab device is left in the root namespace"
    );

    assert!(namespace_exists(&live_ns), "clean removed a live run");
    assert!(
        stdout.contains(&format!("kept namespace {live_ns}")),
        "{stdout}"
    );
    // SAFETY: signals the quiclab process this test started.
    unsafe { libc::kill(live.id() as i32, libc::SIGTERM) };
    live.wait().unwrap();
    assert!(!namespace_exists(&live_ns));
}

/// stdout carries the client's output and, with --json, the link's summary as its last line;
/// the server's output goes to stderr. The echo request is still in its 2 s delay when the
/// client gives up after 1 s: the summary counts it in flight.
#[test]
fn outputs_are_kept_apart_and_json_summarises_the_link() {
    let _turn = common::one_at_a_time();
    let out = quiclab()
        .args(["link", "--delay", "2s", "--wait", "0s", "--json"])
        .args(["--server", "echo server-says-hello; exec sleep 60"])
        .args([
            "--client",
            "echo '{\"client\": 1}'; ping -q -c 1 -w 1 $QUICLAB_SERVER >/dev/null",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    // ping got no reply in time: its exit code 1 is quiclab's
    assert_eq!(out.status.code(), Some(1), "{stdout}{stderr}");
    assert!(!stdout.contains("server-says-hello"), "{stdout}");
    assert!(stderr.contains("server-says-hello"), "{stderr}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 2, "{stdout}");
    let first: serde_json::Value = serde_json::from_str(lines[0]).unwrap();
    assert_eq!(first["client"], 1);
    let s: serde_json::Value = serde_json::from_str(lines[1]).unwrap();
    assert_eq!(s["client_exit"], 1);
    let up = &s["directions"][0];
    assert_eq!(up["direction"], "up");
    assert_eq!(up["packets_in"], 1, "{s}");
    assert_eq!(up["packets_out"], 0, "{s}");
    assert_eq!(up["in_flight"], 1, "{s}");
    assert_eq!(s["directions"][1]["packets_in"], 0, "{s}");
    assert!(
        stderr.contains("1 still in flight when the link stopped"),
        "{stderr}"
    );
}

/// A server that opens no socket within --wait is an error (exit 1), and the client never runs.
#[test]
fn a_server_without_a_socket_by_the_wait_is_an_error() {
    let _turn = common::one_at_a_time();
    let d = common::TempDir::new("wait");
    let ran = d.join("client-ran");
    let out = quiclab()
        .args(["link", "--wait", "300ms", "--server", "exec sleep 60"])
        .arg("--client")
        .arg(format!("touch {}", ran.display()))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("opened no socket within --wait 300ms"),
        "{stderr}"
    );
    assert!(!ran.exists());
}

/// `bench link --json`: standard output is one object with every row's figures, and what the
/// link carried behind its rate limit cannot exceed the limit (by more than the counting
/// window's edge effects, 3 %). The file's tests take turns: with the others' links beside it
/// the rate-limited row once carried 46 % of its limit, which is the two cores' contention.
#[test]
fn bench_link_prints_its_figures_as_json() {
    let _turn = common::one_at_a_time();
    common::assert_root();
    let out = quiclab()
        .args(["bench", "link", "--duration", "1s", "--json"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    // the readable table went to stderr
    assert!(stderr.contains("Forwarding capacity"), "{stderr}");
    let s: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let rows = s["capacity"].as_array().unwrap();
    // 4 emulator, 4 bare copy, 1 rate-limited, 2 or 3 veth rows (with ethtool: offloads off)
    assert!((11..=12).contains(&rows.len()), "{s}");
    for r in rows {
        assert!(r["gbps"].as_f64().unwrap() > 0.0, "{r}");
    }
    let limit = &s["rate_limit"];
    let (carried, limit_mbit) = (
        limit["carried_gbps"].as_f64().unwrap(),
        limit["limit_mbit"].as_f64().unwrap(),
    );
    assert!(carried * 1000.0 <= limit_mbit * 1.03, "{limit}");
    assert!(carried * 1000.0 >= limit_mbit * 0.5, "{limit}");
    let precision = s["precision"].as_array().unwrap();
    assert_eq!(precision.len(), 2, "{s}");
    for p in precision {
        assert!(p["packets"].as_u64().unwrap() > 0, "{p}");
        let l = &p["lateness_us"];
        assert!(
            l["p50"].as_f64().unwrap() <= l["p99"].as_f64().unwrap(),
            "{p}"
        );
    }
}

/// `selftest --json`: one object whose verdict agrees with its checks and with the exit code.
#[test]
fn selftest_prints_its_checks_as_json() {
    let _turn = common::one_at_a_time();
    common::assert_root();
    let out = quiclab().args(["selftest", "--json"]).output().unwrap();
    let s: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let checks = s["checks"].as_array().unwrap();
    assert_eq!(checks.len(), 9, "{s}");
    let all = checks.iter().all(|c| c["pass"] == true);
    assert_eq!(s["pass"], all, "{s}");
    assert_eq!(out.status.code(), Some(if all { 0 } else { 1 }), "{s}");
}

/// `bench trials --json`: a row per stack (quiclab's own two at least), each phase measured,
/// the stop at least the 5 ms the server is given to take in the client's last packets, and
/// the overhead beyond the transfer covering at least the set-up, stop and teardown medians;
/// then the CPU of each role of a 1 MB trial at both rates, within what the machine's cores
/// could give over the trial.
#[test]
fn bench_trials_prints_each_stacks_phases_as_json() {
    let _turn = common::one_at_a_time();
    common::assert_root();
    let out = quiclab()
        .args([
            "bench",
            "trials",
            "--iterations",
            "3",
            "--cpu-iterations",
            "3",
            "--json",
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("A trial's overhead"), "{stderr}");
    let s: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let rows = s["rows"].as_array().unwrap();
    let stacks: Vec<&str> = rows.iter().map(|r| r["stack"].as_str().unwrap()).collect();
    assert!(stacks.contains(&"H2, TCP (tcp)"), "{stacks:?}");
    assert!(stacks.contains(&"H3, quinn"), "{stacks:?}");
    for r in rows {
        let f = |k: &str| r[k].as_f64().unwrap_or_else(|| panic!("{k} in {r}"));
        for k in [
            "setup_ms",
            "server_start_ms",
            "client_extra_ms",
            "teardown_ms",
            "metrics_ms",
            "ttlb_ms",
        ] {
            assert!(f(k) > 0.0, "{k} in {r}");
        }
        assert!(f("server_stop_ms") >= 5.0, "{r}");
        assert!(f("overhead_p90_ms") >= f("overhead_ms"), "{r}");
        assert!(
            f("overhead_ms") >= 0.9 * (f("setup_ms") + f("server_stop_ms") + f("teardown_ms")),
            "{r}"
        );
    }
    assert!(stderr.contains("CPU per trial"), "{stderr}");
    let cpu = s["cpu_rows"].as_array().unwrap();
    assert_eq!(cpu.len(), 4, "two rates, two stacks: {s}");
    let cores = std::thread::available_parallelism().unwrap().get() as f64;
    for r in cpu {
        let f = |k: &str| r[k].as_f64().unwrap_or_else(|| panic!("{k} in {r}"));
        // every role worked: the emulator forwarded about 1,100 packets, the writers wrote
        // their events and capture, the endpoints moved 1 MB
        for k in [
            "emulator_ms",
            "writers_ms",
            "runner_ms",
            "server_ms",
            "client_ms",
            "lateness_p99_us",
        ] {
            assert!(f(k) > 0.0, "{k} in {r}");
        }
        // a 1 MB transfer at 10 Mbit/s takes at least 0.84 s, at 100 Mbit/s 84 ms
        let floor = if r["rate"] == "10 Mbit/s" {
            838.0
        } else {
            83.8
        };
        assert!(f("ttlb_ms") > floor, "{r}");
        // the roles together cannot use more than every core over the trial
        assert!(
            f("share_of_wall") > 0.0 && f("share_of_wall") <= cores,
            "{r}"
        );
        assert!(f("cpu_s_per_transfer_s") >= f("share_of_wall"), "{r}");
    }
}
