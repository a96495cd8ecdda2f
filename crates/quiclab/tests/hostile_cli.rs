//! Hostile input, faults and misuse: each test reproduces a way quiclab once went wrong (as
//! root, in namespaces the tests create) and checks what it does now.

use std::process::Stdio;
use std::time::{Duration, Instant};

mod common;

/// A plan of `arms` (TOML tables) fetching 10 KB over a 5 ms link, `iterations` times.
fn tiny_plan(name: &str, iterations: u32, arms: &str) -> String {
    format!(
        "name = \"{name}\"\niterations = {iterations}\n[workload]\nkind = \"single-object\"\n\
         sizes = [\"10KB\"]\n[network]\ndelay = \"5ms\"\n{arms}"
    )
}

/// A plan of `iterations` HTTP/2 GETs of 1 MB over a 5 ms link of `rate`: trials long enough
/// to act on one while it runs.
fn slow_plan(name: &str, iterations: u32, rate: &str) -> String {
    format!(
        "name = \"{name}\"\niterations = {iterations}\n[workload]\nkind = \"single-object\"\n\
         sizes = [\"1MB\"]\n[network]\ndelay = \"5ms\"\nrate = \"{rate}\"\n[arms.h2]\nhttp = \"2\"\n"
    )
}

/// `quiclab ARGS`: (exit code, standard error).
fn quiclab(args: &[&str]) -> (Option<i32>, String) {
    let o = common::quiclab().args(args).output().unwrap();
    (
        o.status.code(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn a_second_run_into_a_busy_directory_is_refused_naming_the_first() {
    common::assert_root();
    let dir = common::TempDir::new("busy");
    let plan = dir.join("plan.toml");
    // long enough trials (1 MB at 2 Mbit/s: over 4 s each) that the first run is surely busy
    std::fs::write(&plan, slow_plan("busy", 3, "2mbit")).unwrap();
    let out = dir.join("out");
    let mut first = common::quiclab()
        .args(["run", plan.to_str().unwrap(), "--jobs", "1", "--out"])
        .arg(&out)
        .stderr(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let lock = out.join(".lock");
    let until = Instant::now() + Duration::from_secs(10);
    while std::fs::read_to_string(&lock).map_or(true, |s| s.trim().is_empty()) {
        assert!(
            Instant::now() < until,
            "the first run never took its directory"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let (code, err) = quiclab(&[
        "run",
        plan.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    // SAFETY: SIGINT to the child this test started.
    unsafe { libc::kill(first.id() as i32, libc::SIGINT) };
    let first_status = first.wait().unwrap();
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains(&format!(
            "in use by another quiclab run (pid {})",
            first.id()
        )),
        "{err}"
    );
    // the first run was not disturbed: it stopped on the signal, as asked
    assert_eq!(first_status.code(), Some(130), "{first_status}");
}

#[test]
fn export_after_editing_the_plan_writes_its_current_trials_only() {
    common::assert_root();
    let two = "[arms.h2]\nhttp = \"2\"\n[arms.h3]\nhttp = \"3\"\n";
    let (dir, out) = common::run_plan("stale", &tiny_plan("stale", 2, two), &[]);
    // the plan loses an arm and runs again into the same directory
    let plan = dir.join("plan.toml");
    std::fs::write(&plan, tiny_plan("stale", 2, "[arms.h2]\nhttp = \"2\"\n")).unwrap();
    let (code, err) = quiclab(&[
        "run",
        plan.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(0), "{err}");
    let (code, err) = quiclab(&["export", out.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{err}");
    assert!(err.contains("2 trials of earlier versions"), "{err}");
    let csv = std::fs::read_to_string(out.join("export/trials.csv")).unwrap();
    let rows: Vec<&str> = csv.lines().skip(1).collect();
    assert_eq!(rows.len(), 2, "{csv}");
    assert!(
        rows.iter().all(|r| r.split(',').nth(2) == Some("h2")),
        "{csv}"
    );
    let mut ids: Vec<&str> = rows.iter().map(|r| r.split(',').next().unwrap()).collect();
    ids.dedup();
    assert_eq!(ids.len(), 2, "no duplicate keys: {csv}");
}

#[test]
fn a_lost_database_beside_finished_trials_is_named_not_silently_replaced() {
    common::assert_root();
    let (dir, out) = common::run_plan(
        "lostdb",
        &tiny_plan("lostdb", 1, "[arms.h2]\nhttp = \"2\"\n"),
        &["--keep-artifacts"],
    );
    let plan = dir.join("plan.toml");
    for damage in ["empty", "deleted"] {
        let db = out.join("results.db");
        for f in ["results.db", "results.db-wal", "results.db-shm"] {
            let _ = std::fs::remove_file(out.join(f));
        }
        if damage == "empty" {
            std::fs::write(&db, b"").unwrap();
        }
        let (code, err) = quiclab(&[
            "run",
            plan.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ]);
        assert_eq!(code, Some(2), "{damage}: {err}");
        assert!(
            err.contains("holds no campaign") && err.contains("trial folders"),
            "{damage}: {err}"
        );
        let (code, err) = quiclab(&["report", out.to_str().unwrap()]);
        assert_eq!(code, Some(2), "{damage}: {err}");
        assert!(
            err.contains("no campaign has been recorded"),
            "{damage}: {err}"
        );
    }
}

/// Pids of processes whose command line holds `marker` (read from /proc; never signalled).
fn processes_with(marker: &str) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains(marker))
        })
        .collect()
}

/// quiclab's namespaces of the process `pid`.
fn namespaces_of(pid: u32) -> Vec<String> {
    std::fs::read_dir("/run/netns")
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with(&format!("quiclab-{pid}-")))
                .collect()
        })
        .unwrap_or_default()
}

/// Waits up to `limit` for `done`.
fn eventually(limit: Duration, mut done: impl FnMut() -> bool) -> bool {
    let until = Instant::now() + limit;
    while !done() {
        if Instant::now() > until {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    true
}

#[test]
fn killing_link_outright_takes_its_namespaces_and_their_processes_with_it() {
    common::assert_root();
    // compound commands: the shell forks the sleeps, which PR_SET_PDEATHSIG does not reach
    let marker = format!("61.{}", std::process::id());
    let mut link = common::quiclab()
        .args(["link", "--delay", "5ms", "--wait", "0s", "--server"])
        .arg(format!("sleep {marker}; true"))
        .arg("--client")
        .arg(format!("sleep 1{marker}; true"))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = link.id();
    // the two sleeps, besides quiclab itself and its shells, whose command lines hold it too
    let sleeps = || {
        processes_with(&marker)
            .into_iter()
            .filter(|p| {
                std::fs::read(format!("/proc/{p}/cmdline")).is_ok_and(|c| c.starts_with(b"sleep\0"))
            })
            .count()
    };
    assert!(
        eventually(Duration::from_secs(10), || sleeps() == 2),
        "server and client started"
    );
    assert_eq!(namespaces_of(pid).len(), 2);
    link.kill().unwrap();
    link.wait().unwrap();
    let gone = eventually(Duration::from_secs(5), || {
        namespaces_of(pid).is_empty() && processes_with(&marker).is_empty()
    });
    let mut err = String::new();
    std::io::Read::read_to_string(link.stderr.as_mut().unwrap(), &mut err).unwrap();
    assert!(
        gone,
        "left behind: namespaces {:?}, processes {:?}",
        namespaces_of(pid),
        processes_with(&marker)
    );
    assert!(
        err.contains("ended without cleaning up: removed 2 namespace(s)"),
        "{err}"
    );
}

#[test]
fn sigquit_stops_a_run_cleanly_like_ctrl_c() {
    common::assert_root();
    let dir = common::TempDir::new("quit");
    let plan = dir.join("plan.toml");
    std::fs::write(&plan, slow_plan("quit", 4, "4mbit")).unwrap();
    let mut run = common::quiclab()
        .args(["run", plan.to_str().unwrap(), "--jobs", "2", "--out"])
        .arg(dir.join("out"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pid = run.id();
    assert!(
        eventually(Duration::from_secs(10), || namespaces_of(pid).len() >= 4),
        "two trials running"
    );
    // SAFETY: a signal to the child this test started.
    unsafe { libc::kill(pid as i32, libc::SIGQUIT) };
    let st = run.wait().unwrap();
    assert_eq!(st.code(), Some(130), "{st}");
    assert_eq!(namespaces_of(pid), Vec::<String>::new());
}

/// `quiclab serve ARGS` on an ephemeral loopback port, its certificate in `dir`: the process
/// and the port it listens on (read from the line it prints).
fn serve_on_loopback(dir: &std::path::Path, args: &[&str]) -> (std::process::Child, u16) {
    let mut serve = common::quiclab()
        .args(["serve", "--listen", "127.0.0.1:0", "--write-cert"])
        .arg(dir.join("cert.pem"))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(serve.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    let port = line
        .split("listening on 127.0.0.1:")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no port in {line:?}"));
    (serve, port)
}

/// `quiclab get` of `path` from the loopback server over HTTP `version`: (exit code, stdout).
fn get(dir: &std::path::Path, port: u16, version: &str, path: &str) -> (Option<i32>, String) {
    let o = common::quiclab()
        .args(["get", "--json", "--http", version, "--cacert"])
        .arg(dir.join("cert.pem"))
        .arg(format!("https://127.0.0.1:{port}{path}"))
        .output()
        .unwrap();
    (
        o.status.code(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
    )
}

fn open_descriptors(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count())
}

/// The server closed `stream` (a read ends at once, within 5 s, with no byte).
fn assert_closed_by_server(mut stream: &std::net::TcpStream) {
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut buf = [0u8; 16];
    let n = std::io::Read::read(&mut stream, &mut buf).unwrap_or(usize::MAX);
    assert_eq!(n, 0, "closed by the server");
}

/// Stops `serve` with SIGTERM; it must exit within `limit`.
fn stop_within(mut serve: std::process::Child, limit: Duration) {
    // SAFETY: a signal to the child this test started.
    unsafe { libc::kill(serve.id() as i32, libc::SIGTERM) };
    let t = Instant::now();
    let exited = eventually(limit, || serve.try_wait().unwrap().is_some());
    if !exited {
        serve.kill().unwrap();
        serve.wait().unwrap();
    }
    assert!(exited, "serve ignored SIGTERM for {:?}", t.elapsed());
}

#[test]
fn idle_connections_cannot_hold_the_server() {
    let dir = common::TempDir::new("slowloris");
    let (serve, port) = serve_on_loopback(
        &dir,
        &[
            "--no-quic",
            "--handshake-timeout",
            "1s",
            "--max-connections",
            "20",
        ],
    );
    let before = open_descriptors(serve.id());
    // 200 connections that send nothing: a slowloris
    let idle: Vec<std::net::TcpStream> = (0..200)
        .map(|_| std::net::TcpStream::connect(("127.0.0.1", port)).unwrap())
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let held = open_descriptors(serve.id());
    assert!(
        held <= before + 20,
        "at most 20 connections open: {before} descriptors before, {held} now"
    );
    // the idle ones are dropped after the handshake limit, so a real request is served
    // while the rest of the flood waits its turn
    let t = Instant::now();
    let (code, out) = get(&dir, port, "2", "/bytes/1000");
    assert_eq!(code, Some(0), "{out}");
    assert!(
        t.elapsed() < Duration::from_secs(12),
        "served in {:?}",
        t.elapsed()
    );
    // an accepted idle connection was closed by the server
    assert_closed_by_server(&idle[0]);
    drop(idle);
    stop_within(serve, Duration::from_secs(3));
}

/// A flood of plain TCP connects that send nothing, with the server's default limits (1,024
/// connections, a 10 s handshake limit): at the limit each new connection closes the oldest
/// one still in its handshake, so real requests over HTTP/1.1 and HTTP/2 are answered within
/// a second during the flood (they waited up to 17 s, a batch per handshake limit).
#[test]
fn a_connect_flood_does_not_delay_real_requests() {
    let dir = common::TempDir::new("connect-flood");
    let (serve, port) = serve_on_loopback(&dir, &["--no-quic"]);
    let t = Instant::now();
    let flood: Vec<std::net::TcpStream> = (0..3000)
        .map(|_| std::net::TcpStream::connect(("127.0.0.1", port)).unwrap())
        .collect();
    let connecting = t.elapsed();
    for version in ["1.1", "2", "1.1", "2"] {
        let t = Instant::now();
        let (code, out) = get(&dir, port, version, "/bytes/1000");
        assert_eq!(code, Some(0), "HTTP/{version}: {out}");
        assert!(
            t.elapsed() < Duration::from_secs(1),
            "HTTP/{version} answered in {:?} during the flood ({} connects took {connecting:?})",
            t.elapsed(),
            flood.len()
        );
    }
    // the oldest silent connections were closed by the server to make room
    assert_closed_by_server(&flood[0]);
    drop(flood);
    stop_within(serve, Duration::from_secs(3));
}

#[test]
fn a_large_file_is_streamed_and_a_fifo_under_the_root_blocks_nothing() {
    let dir = common::TempDir::new("files");
    let root = dir.join("root");
    std::fs::create_dir_all(&root).unwrap();
    // 300 MB (sparse: no disk used), and a FIFO nobody writes to
    let big = std::fs::File::create(root.join("big.bin")).unwrap();
    big.set_len(300_000_000).unwrap();
    std::fs::write(root.join("index.html"), "<p>hi</p>").unwrap();
    let fifo = std::ffi::CString::new(root.join("pipe").to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o644) }, 0);
    let (serve, port) = serve_on_loopback(&dir, &["--root", root.to_str().unwrap()]);
    for version in ["1.1", "2", "3"] {
        let (code, out) = get(&dir, port, version, "/pipe");
        assert_eq!(
            code,
            Some(1),
            "HTTP {version}: the FIFO is not found: {out}"
        );
        assert!(out.contains("\"status\":404"), "{out}");
    }
    for version in ["2", "3"] {
        let (code, out) = get(&dir, port, version, "/big.bin");
        assert_eq!(code, Some(0), "HTTP {version}: {out}");
        assert!(out.contains("\"bytes\":300000000"), "{out}");
    }
    // the file pool still answers after the FIFO requests
    let (code, out) = get(&dir, port, "2", "/");
    assert_eq!(code, Some(0), "{out}");
    let status = std::fs::read_to_string(format!("/proc/{}/status", serve.id())).unwrap();
    let peak_kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    // read whole, one GET alone would take 300 MB
    assert!(peak_kb < 150_000, "serve's peak memory {peak_kb} kB");
    stop_within(serve, Duration::from_secs(3));
}

#[test]
fn a_trial_whose_emulator_the_host_held_up_is_flagged() {
    common::assert_root();
    let dir = common::TempDir::new("held");
    let plan = dir.join("plan.toml");
    // one 1 MB transfer at 4 Mbit/s: two seconds in which to pause the runner
    std::fs::write(&plan, slow_plan("held", 1, "4mbit")).unwrap();
    let out = dir.join("out");
    let run = common::quiclab()
        .args(["run", plan.to_str().unwrap(), "--out"])
        .arg(&out)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = run.id();
    assert!(
        eventually(Duration::from_secs(10), || namespaces_of(pid).len() == 2),
        "the trial started"
    );
    std::thread::sleep(Duration::from_millis(700));
    // the runner (and with it the emulator's threads) stops for 150 ms mid-transfer
    // SAFETY: signals to the child this test started.
    unsafe { libc::kill(pid as i32, libc::SIGSTOP) };
    std::thread::sleep(Duration::from_millis(150));
    unsafe { libc::kill(pid as i32, libc::SIGCONT) };
    let o = run.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    // said as the trial ends, and in the report's cell
    assert!(
        err.contains("the host held the emulator's packets up to"),
        "{err}"
    );
    let report = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(
        report.contains("the host held the emulator's packets up to"),
        "the report flags the trial"
    );
}

#[test]
fn a_report_killed_mid_write_leaves_a_whole_report() {
    common::assert_root();
    let (_dir, out) = common::run_plan(
        "killreport",
        &tiny_plan(
            "killreport",
            2,
            "[arms.h2]\nhttp = \"2\"\n[arms.h3]\nhttp = \"3\"\n",
        ),
        &[],
    );
    let report = out.join("report.html");
    let whole = std::fs::read_to_string(&report).unwrap();
    assert!(whole.trim_end().ends_with("</html>"));
    // killed at every moment of its short life, 60 times
    for i in 0..60u64 {
        let mut r = common::quiclab()
            .arg("report")
            .arg(&out)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_micros(500 * (i % 20)));
        let _ = r.kill();
        r.wait().unwrap();
        let now = std::fs::read_to_string(&report).unwrap();
        assert_eq!(now, whole, "after a kill at {} us", 500 * (i % 20));
    }
    // no temporary file is left behind either
    let stray: Vec<_> = std::fs::read_dir(&out)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".tmp"))
        .collect();
    assert!(
        stray.len() <= 1,
        "at most the file of the last kill: {stray:?}"
    );
}

/// A FIFO at `path`, which nobody writes to.
fn fifo(path: &std::path::Path) {
    let c = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
}

#[test]
fn input_files_that_are_not_regular_or_too_large_are_refused_by_name_at_once() {
    let dir = common::TempDir::new("inputs");
    let plan = dir.join("p.toml");
    std::fs::write(&plan, tiny_plan("inputs", 1, "[arms.h2]\nhttp = \"2\"\n")).unwrap();
    let stacks = dir.join("stacks");
    std::fs::create_dir_all(&stacks).unwrap();
    let start = Instant::now();
    // a stack file that is a FIFO (it blocked the dry run forever), then a link to /dev/zero
    // (it grew 1.7 GB a second), then 17 MB of comment
    fifo(&stacks.join("mine.toml"));
    let (code, err) = quiclab(&["run", plan.to_str().unwrap(), "--dry-run"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("mine.toml") && err.contains("a FIFO, not a regular file"),
        "{err}"
    );
    assert!(
        !err.contains("mine.toml:0:0"),
        "an unreadable file has no line: {err}"
    );
    std::fs::remove_file(stacks.join("mine.toml")).unwrap();
    std::os::unix::fs::symlink("/dev/zero", stacks.join("mine.toml")).unwrap();
    let (code, err) = quiclab(&["run", plan.to_str().unwrap(), "--dry-run"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("a device, not a regular file"), "{err}");
    std::fs::remove_file(stacks.join("mine.toml")).unwrap();
    std::fs::write(stacks.join("mine.toml"), "#".repeat(17 << 20)).unwrap();
    let (code, err) = quiclab(&["run", plan.to_str().unwrap(), "--dry-run"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("at most 16 MiB"), "{err}");
    std::fs::remove_dir_all(&stacks).unwrap();
    // a HAR that is a FIFO, given to page and named in a plan
    let har = dir.join("x.har");
    fifo(&har);
    let (code, err) = quiclab(&["page", "--page", har.to_str().unwrap(), "--print-manifest"]);
    assert_ne!(code, Some(0), "{err}");
    assert!(
        err.contains("x.har") && err.contains("a FIFO, not a regular file"),
        "{err}"
    );
    let pages = format!(
        "name = \"p\"\niterations = 1\n[workload]\nkind = \"pages\"\npages = [\"{}\"]\n\
         [network]\ndelay = \"5ms\"\n[arms.h2]\nhttp = \"2\"\n",
        har.display()
    );
    std::fs::write(&plan, pages).unwrap();
    let (code, err) = quiclab(&["run", plan.to_str().unwrap(), "--dry-run"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("a FIFO, not a regular file"), "{err}");
    // and the plan itself as a FIFO
    std::fs::remove_file(&plan).unwrap();
    fifo(&plan);
    let (code, err) = quiclab(&["run", plan.to_str().unwrap(), "--dry-run"]);
    assert_ne!(code, Some(0), "{err}");
    assert!(err.contains("a FIFO, not a regular file"), "{err}");
    // none of it waited on anything
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "{:?}",
        start.elapsed()
    );
}

/// A stack file whose name another stack already has is refused at the line and column of its
/// `name`, its path said once (it printed the path twice, at line 1).
#[test]
fn a_stack_name_taken_is_refused_where_the_name_is_set() {
    let dir = common::TempDir::new("stack-names");
    let plan = dir.join("p.toml");
    std::fs::write(&plan, tiny_plan("names", 1, "[arms.h2]\nhttp = \"2\"\n")).unwrap();
    let stacks = dir.join("stacks");
    std::fs::create_dir_all(&stacks).unwrap();
    let ngtcp2 = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../quiclab-external/stacks/ngtcp2.toml"),
    )
    .unwrap();
    let line = ngtcp2
        .lines()
        .position(|l| l.starts_with("name = "))
        .unwrap()
        + 1;
    for (file, name) in [("a.toml", "mine"), ("b.toml", "mine")] {
        std::fs::write(
            stacks.join(file),
            ngtcp2.replace("name = \"ngtcp2\"", &format!("name = \"{name}\"")),
        )
        .unwrap();
    }
    let (code, err) = quiclab(&["run", plan.to_str().unwrap(), "--dry-run"]);
    assert_eq!(code, Some(2), "{err}");
    let b = stacks.join("b.toml").display().to_string();
    assert!(
        err.contains(&format!(
            "{b}:{line}:8: stack \"mine\" is already defined by"
        )),
        "{err}"
    );
    assert_eq!(err.matches(&b).count(), 1, "{err}");
    std::fs::remove_file(stacks.join("b.toml")).unwrap();
    std::fs::write(
        stacks.join("a.toml"),
        ngtcp2.replace("name = \"ngtcp2\"", "name = \"quinn\""),
    )
    .unwrap();
    let (code, err) = quiclab(&["run", plan.to_str().unwrap(), "--dry-run"]);
    assert_eq!(code, Some(2), "{err}");
    let a = stacks.join("a.toml").display().to_string();
    assert!(
        err.contains(&format!(
            "{a}:{line}:8: stack name \"quinn\" is quiclab's own"
        )),
        "{err}"
    );
    assert_eq!(err.matches(&a).count(), 1, "{err}");
}
