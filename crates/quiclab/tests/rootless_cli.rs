//! quiclab as an ordinary user: a user the test creates runs a small campaign, which quiclab
//! runs inside a user namespace of its own, and its cells' medians are compared with the same
//! campaign run by root in the same sitting. `/dev/net/tun` is root's alone on some hosts
//! (mode 0600, where most distributions ship 0666): the test first checks that quiclab names
//! the device when it cannot open it, then sets 0666 for the campaign, as a typical node has
//! it, and restores the mode on every exit path. As root (it creates the user); never skipped.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Output;

use quiclab_report::stats;
use quiclab_store::Store;

mod common;
use common::{TestUser, TunMode, as_user};

/// Pids of the processes of user `uid`.
fn processes_of(uid: u32) -> Vec<i32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::metadata(format!("/proc/{pid}"))
                .is_ok_and(|m| std::os::unix::fs::MetadataExt::uid(&m) == uid)
        })
        .collect()
}

/// Waits up to 5 s for the user's processes to end (a run's reaper ends once its run has);
/// returns those still there.
fn settled(uid: u32) -> Vec<i32> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        let left = processes_of(uid);
        if left.is_empty() || std::time::Instant::now() > deadline {
            return left;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// Successful trials' TTLBs per cell (arm, size).
fn cells(dir: &Path) -> BTreeMap<(String, u64), Vec<f64>> {
    let mut m: BTreeMap<(String, u64), Vec<f64>> = BTreeMap::new();
    for t in Store::open_existing(dir).unwrap().trials().unwrap() {
        let ttlb = t.outcome.as_ref().expect("every trial succeeds").ttlb_ms;
        m.entry((t.arm.clone(), t.size)).or_default().push(ttlb);
    }
    m
}

fn text(o: &Output) -> String {
    format!(
        "{}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn private_dirs() -> Vec<PathBuf> {
    std::fs::read_dir(std::env::temp_dir())
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with("quiclab-rootless-")
        })
        .map(|e| e.path())
        .collect()
}

fn host_namespaces() -> Vec<String> {
    std::fs::read_dir("/run/netns")
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with("quiclab-"))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn a_user_s_campaign_runs_in_a_user_namespace_and_matches_root_s() {
    common::assert_root();
    let _turn = common::one_at_a_time();
    let user = TestUser::ensure();
    let (uid, gid) = user.ids();
    let dir = common::TempDir::new("rootless");
    let (bin, home) = common::user_files(&dir, uid, gid);
    let plan = home.join("plan.toml");
    // 2 arms x 1 size x 8 iterations: the pairs of each iteration share the link's seed
    common::write_plan(
        &plan,
        "name = \"rootless\"\niterations = 8\nseed = 5\n[workload]\nkind = \"single-object\"\n\
         sizes = [\"200kb\"]\n[network]\nrate = \"10mbit\"\ndelay = \"10ms\"\n\
         [arms.h2]\nhttp = \"2\"\ntcp-cc = \"cubic\"\n[arms.h3]\nhttp = \"3\"\nquic-cc = \"cubic\"\n",
    );
    let (plan_s, bin_p) = (plan.to_str().unwrap(), bin.as_path());
    let namespaces_before = host_namespaces();
    let dirs_before = private_dirs();

    // without access to the TUN device (this host's 0600), quiclab says so by name
    {
        let _mode = TunMode::set(0o600);
        let o = as_user(
            bin_p,
            uid,
            gid,
            &[
                "link", "--rate", "10mbit", "--server", "true", "--client", "true",
            ],
        )
        .output()
        .unwrap();
        let t = text(&o);
        assert_eq!(o.status.code(), Some(1), "{t}");
        assert!(
            t.contains("cannot open /dev/net/tun") && t.contains("its mode is 0600"),
            "{t}"
        );
    }

    let _mode = TunMode::set(0o666);
    // the emulator's own checks as the user: the seeded loss patterns and the MTU are exact
    // whatever the priority (the round trips' lateness is shown, not judged here)
    let o = as_user(bin_p, uid, gid, &["selftest"]).output().unwrap();
    let t = text(&o);
    eprintln!("{t}");
    for row in ["loss, i.i.d.", "loss, Gilbert-Elliott", "MTU enforcement"] {
        let line = t.lines().find(|l| l.starts_with(row)).unwrap_or_default();
        assert!(line.ends_with("PASS"), "{row}: {t}");
    }
    let user_out = home.join("out");
    let o = as_user(
        bin_p,
        uid,
        gid,
        &[
            "run",
            plan_s,
            "--out",
            user_out.to_str().unwrap(),
            "--jobs",
            "1",
        ],
    )
    .output()
    .unwrap();
    let t = text(&o);
    assert!(o.status.success(), "the user's run: {t}");
    assert!(
        t.contains("not run as root: the lab runs in a user namespace of its own"),
        "{t}"
    );
    // nothing of it left on the host: no namespace (its were in its mount namespace), no
    // private directory
    let left: Vec<String> = host_namespaces()
        .into_iter()
        .filter(|n| !namespaces_before.contains(n))
        .collect();
    assert!(left.is_empty(), "{left:?}");
    assert_eq!(private_dirs(), dirs_before);
    assert_eq!(
        settled(uid),
        Vec::<i32>::new(),
        "the user's processes all ended"
    );
    // what it made is the user's, and the report says how it ran
    let meta = std::fs::metadata(user_out.join("report.html")).unwrap();
    assert_eq!(std::os::unix::fs::MetadataExt::uid(&meta), uid);
    let report = std::fs::read_to_string(user_out.join("report.html")).unwrap();
    assert!(
        report.contains(&format!("a user namespace of user {uid} (not root)")),
        "the report's provenance names the user namespace"
    );
    // root's run of the same plan, in the same sitting
    let root_out = dir.join("root-out");
    let st = common::quiclab()
        .args(["run", plan_s, "--out", root_out.to_str().unwrap()])
        .args(["--jobs", "1"])
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(st.success(), "root's run: {st}");
    assert!(
        std::fs::read_to_string(root_out.join("report.html"))
            .unwrap()
            .contains("<th>privileges</th><td>root</td>"),
        "root's report says root"
    );

    let (by_user, by_root) = (cells(&user_out), cells(&root_out));
    assert_eq!(by_user.len(), 2);
    for (cell, r) in &by_root {
        let u = &by_user[cell];
        assert_eq!((u.len(), r.len()), (8, 8), "{cell:?}");
        let seed = stats::seed_from(&[&cell.0, &cell.1.to_string()]);
        let (ci_u, ci_r) = (
            stats::bootstrap_median_ci(u, seed).unwrap(),
            stats::bootstrap_median_ci(r, seed).unwrap(),
        );
        let (mu, mr) = (stats::median(u).unwrap(), stats::median(r).unwrap());
        eprintln!(
            "{cell:?}: user {mu:.1} ms [{:.1}, {:.1}], root {mr:.1} ms [{:.1}, {:.1}]",
            ci_u.lo, ci_u.hi, ci_r.lo, ci_r.hi
        );
        // The same trials on the same links: what differs is the user's emulator threads at
        // an ordinary priority (no real-time class without RLIMIT_RTPRIO) and the machine's
        // own scheduling between two runs, which moved a median by 1.8 ms between two root
        // runs of a busy host (the Slurm test's figure): the two medians' 95 % intervals,
        // each widened by 3 ms, must overlap.
        assert!(
            ci_u.lo - 3.0 <= ci_r.hi + 3.0 && ci_r.lo - 3.0 <= ci_u.hi + 3.0,
            "{cell:?}: the user's and root's medians are told apart"
        );
    }
}

#[test]
fn a_user_s_interrupted_run_keeps_its_trials_and_leaves_nothing() {
    common::assert_root();
    let _turn = common::one_at_a_time();
    let user = TestUser::ensure();
    let (uid, gid) = user.ids();
    let dir = common::TempDir::new("rootless-stop");
    let (bin, home) = common::user_files(&dir, uid, gid);
    let plan = home.join("plan.toml");
    // 40 trials of about half a second: the stop comes long before the end
    common::write_plan(
        &plan,
        "name = \"stop\"\niterations = 20\n[workload]\nkind = \"single-object\"\n\
         sizes = [\"300kb\"]\n[network]\nrate = \"10mbit\"\ndelay = \"10ms\"\n\
         [arms.h2]\nhttp = \"2\"\n[arms.h3]\nhttp = \"3\"\n",
    );
    let dirs_before = private_dirs();
    let _mode = TunMode::set(0o666);
    let out = home.join("out");
    let mut child = as_user(
        &bin,
        uid,
        gid,
        &[
            "run",
            plan.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
            "--jobs",
            "1",
        ],
    )
    .stderr(std::process::Stdio::null())
    .spawn()
    .unwrap();
    let count = || {
        Store::open_existing(&out)
            .and_then(|s| s.trials())
            .map_or(0, |t| t.len())
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while count() < 2 {
        assert!(std::time::Instant::now() < deadline, "no trial in 60 s");
        assert!(child.try_wait().unwrap().is_none(), "the run ended early");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    // SIGTERM to the outer process (a scheduler's stop), which passes it on
    // SAFETY: a signal to the process this test started, by its pid.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let st = child.wait().unwrap();
    assert_eq!(st.code(), Some(130), "{st}");
    let kept = count();
    assert!((2..40).contains(&kept), "{kept} trials kept");
    assert_eq!(private_dirs(), dirs_before);
    assert_eq!(
        settled(uid),
        Vec::<i32>::new(),
        "the user's processes all ended"
    );
}
