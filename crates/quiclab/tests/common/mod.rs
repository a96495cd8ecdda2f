//! Helpers shared by the command-line tests.
// Each test binary uses its own subset of these.
#![allow(dead_code)]

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::Command;

/// The quiclab binary under test.
pub const QUICLAB: &str = env!("CARGO_BIN_EXE_quiclab");

pub fn quiclab() -> Command {
    Command::new(QUICLAB)
}

/// From its first call the test process keeps idle CPUs awake until it exits (the request
/// `run --keep-cpus-awake` makes: a PM QoS bound of 0 µs, dropped by the kernel when the
/// process ends). Tests that time handshakes to the millisecond call it: a CPU woken from an
/// idle state adds its wake-up to them (quinn's client read handshakes of 60.1 and 65.6 ms for
/// a 50 ms round trip in 2 of 4 runs of `external_cli` on an idle host, none in 4 runs with the
/// CPUs kept awake). Not in a test binary that checks the request itself (`run_cli`). Without
/// root (the tests refuse to run then) there is none.
pub fn keep_cpus_awake() {
    static AWAKE: std::sync::OnceLock<Option<quiclab_netns::sys::CpusAwake>> =
        std::sync::OnceLock::new();
    AWAKE.get_or_init(|| quiclab_netns::sys::CpusAwake::hold().ok());
}

/// These tests create network namespaces: they must run as root, and fail (never skip) if not.
pub fn assert_root() {
    assert!(
        // SAFETY: geteuid cannot fail.
        unsafe { libc::geteuid() } == 0,
        "these tests create network namespaces and must run as root"
    );
}

/// Tests of one binary that time what a CPU-heavy neighbour would disturb (a browser's paints, a
/// round trip counted to half an RTT) take turns: cargo runs a binary's tests on parallel
/// threads, and on a 2-core machine two campaigns or two browsers at once delay each other by
/// tens of milliseconds, which is the machine's contention and not what the tests measure.
pub fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static TURN: std::sync::Mutex<()> = std::sync::Mutex::new(());
    // a failed test poisons the lock; the next one still measures correctly
    TURN.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// `quiclab merge OUT DIRS... ARGS...`, run to its end.
pub fn merge(out: &std::path::Path, dirs: &[PathBuf], args: &[&str]) -> std::process::Output {
    quiclab()
        .arg("merge")
        .arg(out)
        .args(dirs)
        .args(args)
        .output()
        .unwrap()
}

/// An empty directory of this test process.
pub fn tmpdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("quiclab-test-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A test's directory ([`tmpdir`]), removed when the test ends, passed or failed (kept, to
/// look into, when the environment sets `QUICLAB_TEST_KEEP`).
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new(name: &str) -> TempDir {
        TempDir(tmpdir(name))
    }
}

impl std::ops::Deref for TempDir {
    type Target = std::path::Path;
    fn deref(&self) -> &std::path::Path {
        &self.0
    }
}

impl AsRef<std::path::Path> for TempDir {
    fn as_ref(&self) -> &std::path::Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        if std::env::var_os("QUICLAB_TEST_KEEP").is_none() {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

/// Runs `quiclab link` with `args`, `server` and `client` (shell commands), waiting up to 10 s
/// for the server; checks that it exits with `code` and returns its standard output and standard
/// error (where the link's report goes).
pub fn link_output(args: &[&str], server: &str, client: &str, code: i32) -> (String, String) {
    let out = quiclab()
        .arg("link")
        .args(args)
        .args(["--wait", "10s", "--server", server, "--client", client])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(
        out.status.code(),
        Some(code),
        "stdout:\n{stdout}\nstderr:\n{stderr}"
    );
    (stdout, stderr)
}

/// [`link_output`]'s standard output.
pub fn link_exit(args: &[&str], server: &str, client: &str, code: i32) -> String {
    link_output(args, server, client, code).0
}

/// [`link_exit`] for a client that must succeed.
pub fn link(args: &[&str], server: &str, client: &str) -> String {
    link_exit(args, server, client, 0)
}

/// The JSON records (lines starting with `{`) of an output.
pub fn json_lines(stdout: &str) -> Vec<serde_json::Value> {
    stdout
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The median of some values (the mean of the middle two for an even count).
pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Writes `plan` (TOML) to a fresh directory named after `name`, runs `quiclab run` on it with
/// `args` into `DIR/out`, checks that it succeeded, and returns (DIR, DIR/out); DIR is removed
/// when the test ends, passed or failed.
pub fn run_plan(name: &str, plan: &str, args: &[&str]) -> (TempDir, PathBuf) {
    run_plan_ending(name, plan, args, 0)
}

/// [`run_plan`], expecting `quiclab run` to exit with `code` (1: a trial failed).
pub fn run_plan_ending(name: &str, plan: &str, args: &[&str], code: i32) -> (TempDir, PathBuf) {
    keep_cpus_awake();
    let dir = TempDir::new(name);
    let file = dir.join("plan.toml");
    std::fs::write(&file, plan).unwrap();
    let out = dir.join("out");
    let st = quiclab()
        .args([
            "run",
            file.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ])
        .args(args)
        .status()
        .unwrap();
    assert_eq!(st.code(), Some(code), "quiclab run {name}: {st}");
    (dir, out)
}

/// Watches whether the host stops this machine's CPUs: a thread pinned to each CPU, at a
/// real-time priority above every thread of the lab (the link emulator runs at 10), wakes every
/// millisecond and notes how late it woke. A late wake-up at that priority means nothing the
/// lab runs could have run on that CPU either: the hypervisor paused it, or the kernel gave it
/// to something else (its fair-share server runs ordinary tasks ahead of real-time ones for up
/// to 50 ms a second). Costs a few microseconds a millisecond per CPU.
pub struct StallWatch {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    threads: Vec<std::thread::JoinHandle<u64>>,
}

impl StallWatch {
    /// Real-time priority of the watching threads.
    const PRIORITY: i32 = 20;
    const TICK_NS: u64 = 1_000_000;

    pub fn start() -> StallWatch {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        let threads = (0..cpus)
            .map(|cpu| {
                let stop = stop.clone();
                std::thread::spawn(move || watch_cpu(cpu, &stop))
            })
            .collect();
        StallWatch { stop, threads }
    }

    /// The longest any CPU was held, ms; `None` if a watching thread could not be pinned or
    /// given its priority (it then saw nothing).
    pub fn stop(self) -> Option<f64> {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let worst = self
            .threads
            .into_iter()
            .map(|t| t.join().unwrap())
            .collect::<Vec<u64>>();
        if worst.contains(&u64::MAX) {
            return None;
        }
        Some(worst.into_iter().max().unwrap_or(0) as f64 / 1e6)
    }
}

fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the timespec we own.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// One CPU's watch: the worst lateness of a wake-up in ns, or u64::MAX if the thread could not
/// be pinned or given its priority.
fn watch_cpu(cpu: usize, stop: &std::sync::atomic::AtomicBool) -> u64 {
    // SAFETY: the cpu set and the scheduling parameters are ours; both calls act on this thread.
    let ready = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        let param = libc::sched_param {
            sched_priority: StallWatch::PRIORITY,
        };
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) == 0
            && libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) == 0
            && libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0) == 0
    };
    if !ready {
        return u64::MAX;
    }
    let mut worst = 0;
    let mut due = now_ns();
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        due += StallWatch::TICK_NS;
        let ts = libc::timespec {
            tv_sec: (due / 1_000_000_000) as libc::time_t,
            tv_nsec: (due % 1_000_000_000) as libc::c_long,
        };
        // SAFETY: clock_nanosleep reads the timespec we own; TIMER_ABSTIME needs no remainder.
        unsafe {
            libc::clock_nanosleep(
                libc::CLOCK_MONOTONIC,
                libc::TIMER_ABSTIME,
                &ts,
                std::ptr::null_mut(),
            )
        };
        let now = now_ns();
        worst = worst.max(now.saturating_sub(due));
        // after a stall, count from now rather than running the missed ticks back to back
        due = due.max(now);
    }
    worst
}

/// One field (or several, separated by spaces) of every packet of the capture that matches
/// `filter`, decrypted with `keys` if given.
pub fn tshark(
    pcap: &std::path::Path,
    keys: Option<&std::path::Path>,
    filter: &str,
    field: &str,
) -> Vec<String> {
    let mut cmd = Command::new("tshark");
    cmd.arg("-r").arg(pcap);
    if let Some(k) = keys {
        cmd.arg("-o")
            .arg(format!("tls.keylog_file:{}", k.display()));
    }
    cmd.args(["-Y", filter, "-T", "fields"]);
    for f in field.split(' ') {
        cmd.args(["-e", f]);
    }
    let out = cmd.output().expect("tshark runs (the tshark package)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect()
}

/// Every successful trial of `trials` has a time budget that adds up: the floor and the
/// components within 2 % or 2 ms (whichever is more) of its TTLB, and none of them negative.
/// Returns how many it checked.
pub fn assert_budgets_add_up(trials: &[quiclab_store::TrialRecord]) -> usize {
    let mut n = 0;
    for t in trials {
        let Ok(m) = &t.outcome else { continue };
        let who = format!("{} / {} / {} #{}", t.arm, t.condition, t.size, t.iteration);
        assert_eq!(m.detail.budget_error, None, "{who}");
        let b = m
            .detail
            .budget
            .as_ref()
            .unwrap_or_else(|| panic!("{who}: no budget"));
        assert!((b.ttlb_ms - m.ttlb_ms).abs() < 0.01, "{who}: {b:?}");
        let tolerance = (0.02 * m.ttlb_ms).max(2.0);
        assert!(
            (b.accounted_ms() - m.ttlb_ms).abs() <= tolerance,
            "{who}: {:.2} ms accounted of {:.2}: {b:?}",
            b.accounted_ms(),
            m.ttlb_ms
        );
        assert!(b.charges.iter().all(|c| c.ms > 0.0), "{who}: {b:?}");
        assert!(b.floor.total_ms() <= m.ttlb_ms + tolerance, "{who}: {b:?}");
        n += 1;
    }
    n
}

/// The median over iterations of a budget part's paired difference, `arm` less `control`, in
/// `condition` and `size`: `part` of each trial's budget (its TTLB for `None`). Panics unless
/// both arms have a budget in at least `min` common iterations.
pub fn paired_budget_median(
    trials: &[quiclab_store::TrialRecord],
    arm: &str,
    control: &str,
    condition: &str,
    size: u64,
    part: Option<quiclab_model::budget::Component>,
    min: usize,
) -> f64 {
    let of = |a: &str| -> std::collections::BTreeMap<u32, f64> {
        trials
            .iter()
            .filter(|t| t.arm == a && t.condition == condition && t.size == size)
            .filter_map(|t| {
                let b = t.outcome.as_ref().ok()?.detail.budget.as_ref()?;
                Some((t.iteration, part.map_or(b.ttlb_ms, |c| b.ms(c))))
            })
            .collect()
    };
    let (a, c) = (of(arm), of(control));
    let diffs: Vec<f64> = a.iter().filter_map(|(i, x)| Some(x - c.get(i)?)).collect();
    assert!(
        diffs.len() >= min,
        "{arm} against {control} in {condition} at {size}: {} pairs",
        diffs.len()
    );
    median(diffs)
}

/// The planted `cause` takes at least 80 % of the `total` difference (ms) and no other component
/// more than 20 %: `named` holds each component's difference, `why` says where.
pub fn assert_cause_named(
    total: f64,
    named: &[(quiclab_model::budget::Component, f64)],
    cause: quiclab_model::budget::Component,
    why: &str,
) {
    eprintln!("{why}");
    for &(c, ms) in named {
        if c == cause {
            assert!(ms >= 0.8 * total, "{why}");
        } else {
            assert!(ms.abs() <= 0.2 * total, "{why}");
        }
    }
}

/// What the lab's own path adds to a unit's latency on two cores of a Firecracker guest, at the
/// median and at p98, beyond the model's 1 ms. Measured from the emulator's log against the
/// units' clocks (a loss-free quic-datagrams trial): the sender's write, two TUN hops and the
/// receiver's wake-up cost 0.24 ms at least, 0.45 ms at the median and 2.1 ms at p98, split
/// evenly between the two sides of the emulator; one new quinn stream per flush adds about 0.8 ms
/// at the median (31.4 against 30.6 ms for datagrams, the same sitting). Across three sittings
/// the arms' p98 lay 0.5 to 3.2 ms above the model's. Halt polling in the guest
/// (`guest_halt_poll_ns` 2 ms) did not change it.
pub const LAB_PATH_P50_MS: f64 = 1.5;
pub const LAB_PATH_P98_MS: f64 = 3.0;

/// The unprivileged user tests run quiclab as (`rootless_cli`, `slurm_cli`); made by the test
/// when missing, and removed at its end when the test made it.
pub const USER: &str = "quiclab-unprivileged";
pub const TUN: &str = "/dev/net/tun";

pub struct TestUser {
    made: bool,
}

impl TestUser {
    pub fn ensure() -> TestUser {
        let exists = std::process::Command::new("id")
            .arg(USER)
            .output()
            .unwrap()
            .status
            .success();
        if !exists {
            let st = std::process::Command::new("useradd")
                .args([
                    "--system",
                    "--no-create-home",
                    "--shell",
                    "/usr/sbin/nologin",
                    USER,
                ])
                .status()
                .expect("useradd (passwd) is installed");
            assert!(st.success(), "useradd {USER}: {st}");
        }
        TestUser { made: !exists }
    }

    pub fn ids(&self) -> (u32, u32) {
        let id = |flag: &str| -> u32 {
            let o = std::process::Command::new("id")
                .args([flag, USER])
                .output()
                .unwrap();
            String::from_utf8_lossy(&o.stdout).trim().parse().unwrap()
        };
        (id("-u"), id("-g"))
    }
}

impl Drop for TestUser {
    fn drop(&mut self) {
        if self.made {
            let _ = std::process::Command::new("userdel").arg(USER).status();
        }
    }
}

/// `/dev/net/tun` at a mode for as long as this lives; its mode before, restored when dropped.
pub struct TunMode(u32);

impl TunMode {
    pub fn set(mode: u32) -> TunMode {
        let before = std::fs::metadata(TUN).unwrap().permissions().mode() & 0o7777;
        std::fs::set_permissions(TUN, std::fs::Permissions::from_mode(mode)).unwrap();
        TunMode(before)
    }
}

impl Drop for TunMode {
    fn drop(&mut self) {
        let _ = std::fs::set_permissions(TUN, std::fs::Permissions::from_mode(self.0));
    }
}

/// quiclab (the copy at `bin`) as the test's user (`setpriv`, which runs it in its own
/// process: the child's pid is quiclab's), with an empty environment but the path.
pub fn as_user(bin: &std::path::Path, uid: u32, gid: u32, args: &[&str]) -> std::process::Command {
    let mut c = std::process::Command::new("setpriv");
    c.arg(format!("--reuid={uid}"))
        .arg(format!("--regid={gid}"))
        .args(["--clear-groups", "--", "env", "-i"])
        .arg(format!(
            "PATH={}",
            std::env::var("PATH").unwrap_or_else(|_| "/usr/bin:/bin".into())
        ))
        .arg(bin)
        .args(args);
    c
}

/// For the test's user, in the test's directory `dir`: a copy of quiclab it may run, whatever
/// the checkout's directories allow, and a directory of its own (`dir/user`). Returns both.
pub fn user_files(dir: &std::path::Path, uid: u32, gid: u32) -> (PathBuf, PathBuf) {
    let bin = dir.join("quiclab");
    std::fs::copy(QUICLAB, &bin).unwrap();
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
    let home = dir.join("user");
    std::fs::create_dir(&home).unwrap();
    std::os::unix::fs::chown(&home, Some(uid), Some(gid)).unwrap();
    (bin, home)
}

/// Writes a plan the test's user may read.
pub fn write_plan(path: &std::path::Path, plan: &str) {
    std::fs::write(path, plan).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o644)).unwrap();
}

/// Runs `quiclab figure` on the campaign `out` (its report already written) into `out/figures`
/// and checks what it wrote: a figure for every chart of the report (its SVG the report's own,
/// byte for byte), each with a PNG, a caption and its data as a CSV of at least one row.
/// Returns the figures' names, in the report's order.
pub fn assert_figures_exported(out: &std::path::Path) -> Vec<String> {
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    let fig = quiclab()
        .args(["figure", out.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(
        fig.status.success(),
        "{}",
        String::from_utf8_lossy(&fig.stderr)
    );
    // the PNG renderer warns of what it cannot draw (e.g. a rectangle of width 0), and the
    // count of figures is said once to a log
    let said = String::from_utf8_lossy(&fig.stderr);
    assert!(!said.contains("warn"), "{said}");
    assert!(said.trim_end().ends_with(" figures"), "{said}");
    let dir = out.join("figures");
    assert_eq!(
        String::from_utf8_lossy(&fig.stdout).trim(),
        dir.display().to_string()
    );
    let list = quiclab()
        .args(["figure", out.to_str().unwrap(), "--list"])
        .output()
        .unwrap();
    assert!(list.status.success());
    let names: Vec<String> = String::from_utf8_lossy(&list.stdout)
        .lines()
        .map(|l| l.split('\t').next().unwrap().to_string())
        .collect();
    assert_eq!(
        html.matches("<svg").count(),
        names.len(),
        "the report's charts against the figures {names:?}"
    );
    for n in &names {
        let svg = std::fs::read_to_string(dir.join(format!("{n}.svg"))).unwrap();
        assert!(html.contains(&svg), "{n}.svg is not the report's");
        let png = std::fs::read(dir.join(format!("{n}.png"))).unwrap();
        assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n", "{n}.png");
        let csv = std::fs::read_to_string(dir.join(format!("{n}.csv"))).unwrap();
        assert!(csv.lines().count() > 1, "{n}.csv: {csv}");
        assert!(dir.join(format!("{n}.txt")).is_file());
    }
    names
}
