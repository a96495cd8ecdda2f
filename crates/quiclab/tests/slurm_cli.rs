//! The Slurm deployment as a user runs it: a single-node cluster (munged, slurmctld and slurmd
//! from Debian's munge and slurm-wlm, started by the test on loopback ports of its own), a plan
//! submitted as a job array of 4 shards through `deploy/slurm/quiclab.sbatch`, joined with
//! `quiclab merge`, and checked against the same plan run whole. One shard's task is cancelled
//! midway and submitted again: it finishes its shard without running its finished trials again.
//! As root; fails (never skips) without Slurm and munge (CI installs them).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use quiclab_report::stats;
use quiclab_store::{Store, TrialRecord};

mod common;

/// The ports of the test's cluster (Slurm's defaults are 6817 and 6818).
const CTLD_PORT: u16 = 16817;
const SLURMD_PORT: u16 = 16818;

/// A single-node Slurm cluster in a directory of its own; its daemons stop (by the pids the
/// test started) when it is dropped, after its jobs are cancelled.
struct Cluster {
    dir: PathBuf,
    conf: PathBuf,
    daemons: Vec<Child>,
    jobs: Vec<u64>,
}

impl Cluster {
    fn start(dir: &Path) -> Cluster {
        for p in [
            "munged",
            "slurmctld",
            "slurmd",
            "sbatch",
            "squeue",
            "scancel",
            "scontrol",
            "sinfo",
        ] {
            assert!(
                quiclab_external::def::locate_program(p).is_some(),
                "{p} is not installed: this test runs a Slurm cluster \
                 (apt-get install slurm-wlm munge)"
            );
        }
        let dir = dir.join("slurm");
        for d in ["munge", "state", "spool", "log"] {
            std::fs::create_dir_all(dir.join(d)).unwrap();
        }
        let mode = |p: &Path, m: u32| {
            std::fs::set_permissions(p, std::os::unix::fs::PermissionsExt::from_mode(m)).unwrap()
        };
        // as a node has it: the spool, where slurmd puts a job's script, reached by its user
        mode(&dir, 0o755);
        mode(&dir.join("munge"), 0o711);
        // munge's shared key: 1 KiB of randomness, readable by root only
        let key = dir.join("munge/munge.key");
        let mut bytes = vec![0u8; 1024];
        std::io::Read::read_exact(
            &mut std::fs::File::open("/dev/urandom").unwrap(),
            &mut bytes,
        )
        .unwrap();
        std::fs::write(&key, &bytes).unwrap();
        mode(&key, 0o400);
        let socket = dir.join("munge/munge.sock");
        let log = |name: &str| std::fs::File::create(dir.join("log").join(name)).unwrap();
        let mut daemons = vec![
            Command::new("munged")
                .args(["--foreground", "--force"])
                .arg(format!("--key-file={}", key.display()))
                .arg(format!("--socket={}", socket.display()))
                .arg(format!(
                    "--pid-file={}",
                    dir.join("munge/munged.pid").display()
                ))
                .arg(format!(
                    "--log-file={}",
                    dir.join("log/munged.log").display()
                ))
                .arg(format!("--seed-file={}", dir.join("munge/seed").display()))
                .stdout(Stdio::null())
                .stderr(log("munged.err"))
                .spawn()
                .unwrap(),
        ];
        let deadline = Instant::now() + Duration::from_secs(10);
        while !socket.exists() {
            assert!(Instant::now() < deadline, "munged made no socket");
            std::thread::sleep(Duration::from_millis(50));
        }
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .unwrap()
            .trim()
            .to_string();
        let cpus = std::thread::available_parallelism().unwrap().get();
        let d = dir.display();
        let conf = dir.join("slurm.conf");
        std::fs::write(
            &conf,
            format!(
                "ClusterName=quiclab\nSlurmctldHost={host}(127.0.0.1)\n\
                 SlurmctldPort={CTLD_PORT}\nSlurmdPort={SLURMD_PORT}\n\
                 SlurmUser=root\nSlurmdUser=root\nAuthType=auth/munge\n\
                 AuthInfo=socket={}\nCredType=cred/munge\n\
                 StateSaveLocation={d}/state\nSlurmdSpoolDir={d}/spool\n\
                 SlurmctldPidFile={d}/slurmctld.pid\nSlurmdPidFile={d}/slurmd.pid\n\
                 SlurmctldLogFile={d}/log/slurmctld.log\nSlurmdLogFile={d}/log/slurmd.log\n\
                 ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\n\
                 JobAcctGatherType=jobacct_gather/none\n\
                 AccountingStorageType=accounting_storage/none\nJobCompType=jobcomp/none\n\
                 SchedulerType=sched/backfill\nSelectType=select/linear\nMpiDefault=none\n\
                 ReturnToService=2\nMinJobAge=600\n\
                 NodeName={host} NodeAddr=127.0.0.1 CPUs={cpus} State=UNKNOWN\n\
                 PartitionName=lab Nodes={host} Default=YES MaxTime=INFINITE State=UP\n",
                socket.display()
            ),
        )
        .unwrap();
        for (daemon, err) in [("slurmctld", "slurmctld.err"), ("slurmd", "slurmd.err")] {
            daemons.push(
                Command::new(daemon)
                    .arg("-D")
                    .arg("-f")
                    .arg(&conf)
                    .env("SLURM_CONF", &conf)
                    .stdout(Stdio::null())
                    .stderr(log(err))
                    .spawn()
                    .unwrap(),
            );
        }
        let cluster = Cluster {
            dir,
            conf,
            daemons,
            jobs: Vec::new(),
        };
        // the node registers and turns idle
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let state = cluster.output("sinfo", &["-h", "-o", "%t"]);
            if state.trim() == "idle" {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the node is {state:?}, not idle: {}",
                cluster.logs()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        cluster
    }

    fn logs(&self) -> String {
        [
            "slurmctld.log",
            "slurmd.log",
            "slurmctld.err",
            "slurmd.err",
            "munged.err",
        ]
        .iter()
        .map(|f| {
            let t = std::fs::read_to_string(self.dir.join("log").join(f)).unwrap_or_default();
            let tail: Vec<&str> = t.lines().rev().take(8).collect();
            format!(
                "--- {f}:\n{}",
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
    }

    /// A Slurm command's standard output (it must succeed).
    fn output(&self, program: &str, args: &[&str]) -> String {
        let o = Command::new(program)
            .args(args)
            .env("SLURM_CONF", &self.conf)
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "{program} {args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    /// Submits the job array `array` of deploy/slurm/quiclab.sbatch with `env`; its job id.
    fn submit(&mut self, array: &str, env: &str) -> u64 {
        let log = self.dir.join("log");
        self.submit_with(array, env, &log, &[])
    }

    /// [`submit`](Self::submit) with more `sbatch` options, the tasks' output in `log`.
    fn submit_with(&mut self, array: &str, env: &str, log: &Path, more: &[&str]) -> u64 {
        let script =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/slurm/quiclab.sbatch");
        let array = format!("--array={array}");
        let output = format!("--output={}/job-%A_%a.out", log.display());
        let export = format!("--export=ALL,{env}");
        let mut args = vec!["--parsable", &array, &output, &export];
        args.extend_from_slice(more);
        args.push(script.to_str().unwrap());
        let out = self.output("sbatch", &args);
        let id: u64 = out.trim().split(';').next().unwrap().parse().unwrap();
        self.jobs.push(id);
        id
    }

    /// Task `task`'s state as the controller tells it ("PENDING", "RUNNING", "COMPLETED", ...).
    fn state(&self, job: u64, task: usize) -> String {
        let o = self.output("scontrol", &["-o", "show", "job", &format!("{job}_{task}")]);
        o.split_whitespace()
            .find_map(|w| w.strip_prefix("JobState="))
            .unwrap_or("unknown")
            .to_string()
    }

    /// Waits until no task of `job` is pending or running.
    fn wait(&self, job: u64, limit: Duration) {
        let deadline = Instant::now() + limit;
        while !self
            .output("squeue", &["-h", "-j", &job.to_string()])
            .trim()
            .is_empty()
        {
            assert!(
                Instant::now() < deadline,
                "job {job} still queued: {}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Task `task`'s output file.
    fn job_output(&self, job: u64, task: usize) -> String {
        std::fs::read_to_string(self.dir.join(format!("log/job-{job}_{task}.out")))
            .unwrap_or_default()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for job in &self.jobs {
            let _ = Command::new("scancel")
                .arg(job.to_string())
                .env("SLURM_CONF", &self.conf)
                .status();
        }
        for job in self.jobs.clone() {
            let deadline = Instant::now() + Duration::from_secs(20);
            while Instant::now() < deadline
                && Command::new("squeue")
                    .args(["-h", "-j", &job.to_string()])
                    .env("SLURM_CONF", &self.conf)
                    .output()
                    .is_ok_and(|o| !o.stdout.is_empty())
            {
                std::thread::sleep(Duration::from_millis(200));
            }
        }
        // slurmd, then the controller, then munge: each by the pid this test started
        for child in self.daemons.iter_mut().rev() {
            // SAFETY: a signal to a child of this process, which has not been waited for.
            unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
            let deadline = Instant::now() + Duration::from_secs(10);
            while child.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Successful trials' TTLBs per cell (arm, size).
fn cells(trials: &[TrialRecord]) -> BTreeMap<(String, u64), Vec<f64>> {
    let mut m: BTreeMap<(String, u64), Vec<f64>> = BTreeMap::new();
    for t in trials {
        let ttlb = t.outcome.as_ref().expect("every trial succeeds").ttlb_ms;
        m.entry((t.arm.clone(), t.size)).or_default().push(ttlb);
    }
    m
}

fn trial_count(dir: &Path) -> usize {
    Store::open_existing(dir)
        .and_then(|s| s.trials())
        .map_or(0, |t| t.len())
}

#[test]
fn a_plan_sharded_over_a_slurm_job_array_merges_into_the_whole_campaign() {
    common::assert_root();
    let dir = common::TempDir::new("slurm");
    // 2 arms x 2 sizes x 10 iterations = 40 trials; a shard's ten take a few seconds
    let plan = dir.join("plan.toml");
    std::fs::write(
        &plan,
        "name = \"slurm\"\niterations = 10\nseed = 11\n[workload]\nkind = \"single-object\"\n\
         sizes = [\"300kb\", \"600kb\"]\n[network]\nrate = \"10mbit\"\ndelay = \"5ms\"\n\
         [arms.h2]\nhttp = \"2\"\n[arms.h3]\nhttp = \"3\"\n",
    )
    .unwrap();
    // the whole campaign, as one machine runs it
    let whole = dir.join("whole");
    let st = common::quiclab()
        .arg("run")
        .arg(&plan)
        .arg("--out")
        .arg(&whole)
        .args(["--jobs", "1"])
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert!(st.success());

    let mut cluster = Cluster::start(&dir);
    let results = dir.join("results");
    let env = format!(
        "QUICLAB_PLAN={},QUICLAB_SHARDS=4,QUICLAB_RESULTS={},QUICLAB={},QUICLAB_ARGS=--jobs 1",
        plan.display(),
        results.display(),
        common::QUICLAB
    );
    let job = cluster.submit("1-4", &env);
    // shard 2 is cancelled once it has finished a trial, before it finishes them all
    let shard2 = results.join("shard-2-of-4");
    let deadline = Instant::now() + Duration::from_secs(120);
    while trial_count(&shard2) == 0 {
        assert!(
            Instant::now() < deadline,
            "shard 2 never started: {}",
            cluster.logs()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    cluster.output("scancel", &[&format!("{job}_2")]);
    cluster.wait(job, Duration::from_secs(300));
    for task in [1, 3, 4] {
        assert_eq!(
            cluster.state(job, task),
            "COMPLETED",
            "task {task}: {}",
            cluster.job_output(job, task)
        );
    }
    assert_eq!(cluster.state(job, 2), "CANCELLED");
    // the trials it finished; the one the cancel cut short is not recorded as failed (the
    // cancel signals every process of the task, `ip` and the endpoints included)
    let before: BTreeMap<String, u64> = Store::open_existing(&shard2)
        .unwrap()
        .trials()
        .unwrap()
        .into_iter()
        .map(|t| {
            assert!(t.outcome.is_ok(), "{}: {:?}", t.id, t.outcome.err());
            (t.id, t.started_unix_ms)
        })
        .collect();
    // the cancel came before the shard's end (its share, as the dry run counts it), else this
    // test would not test a resumption
    let plan_ids: BTreeSet<String> = Store::open_existing(&whole)
        .unwrap()
        .trials()
        .unwrap()
        .into_iter()
        .map(|t| t.id)
        .collect();
    let o = common::quiclab()
        .args(["run", plan.to_str().unwrap(), "--shard", "2/4", "--dry-run"])
        .output()
        .unwrap();
    let dry = String::from_utf8_lossy(&o.stderr);
    let share: usize = dry
        .split("(shard 2/4: ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("the dry run names the shard's share: {dry}"));
    assert!(
        !before.is_empty() && before.len() < share,
        "shard 2 cancelled after {} of its {share} trials",
        before.len()
    );
    // merging now: the missing trials are counted (exit 1)
    let shards: Vec<PathBuf> = (1..=4)
        .map(|k| results.join(format!("shard-{k}-of-4")))
        .collect();
    let o = common::merge(&dir.join("early"), &shards, &[]);
    assert_eq!(
        o.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );

    // submitted again, the task resumes its shard
    let again = cluster.submit("2", &env);
    cluster.wait(again, Duration::from_secs(300));
    assert_eq!(
        cluster.state(again, 2),
        "COMPLETED",
        "{}",
        cluster.job_output(again, 2)
    );
    let out = cluster.job_output(again, 2);
    assert!(
        out.contains(&format!(
            "resuming: {} of {share} trials already finished here",
            before.len()
        )),
        "{out}"
    );
    let after = Store::open_existing(&shard2).unwrap().trials().unwrap();
    assert_eq!(after.len(), share);
    for t in &after {
        if let Some(started) = before.get(&t.id) {
            assert_eq!(*started, t.started_unix_ms, "{} ran again", t.id);
        }
    }

    // merged: the whole campaign's trials, each once, and its cells' medians
    let merged = dir.join("merged");
    let o = common::merge(&merged, &shards, &[]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let merged_trials = Store::open_existing(&merged).unwrap().trials().unwrap();
    let merged_ids: Vec<&String> = merged_trials.iter().map(|t| &t.id).collect();
    let unique: BTreeSet<String> = merged_ids.iter().map(|s| s.to_string()).collect();
    assert_eq!(merged_ids.len(), unique.len(), "no trial twice");
    assert_eq!(unique, plan_ids, "the same trials as the whole campaign");
    let whole_cells = cells(&Store::open_existing(&whole).unwrap().trials().unwrap());
    let merged_cells = cells(&merged_trials);
    for (cell, w) in &whole_cells {
        let m = &merged_cells[cell];
        let seed = stats::seed_from(&[&cell.0, &cell.1.to_string()]);
        let ci_w = stats::bootstrap_median_ci(w, seed).unwrap();
        let ci_m = stats::bootstrap_median_ci(m, seed).unwrap();
        let (mw, mm) = (stats::median(w).unwrap(), stats::median(m).unwrap());
        eprintln!(
            "{cell:?}: whole {mw:.1} ms [{:.1}, {:.1}], sharded {mm:.1} ms [{:.1}, {:.1}]",
            ci_w.lo, ci_w.hi, ci_m.lo, ci_m.hi
        );
        // the two runs ran at different times, each trial's TTLB moved by the machine's own
        // scheduling (the emulator's packets late, the endpoints' wakeups, CPU time the
        // hypervisor takes): the intervals, a few tenths of a millisecond wide on a link this
        // steady, are widened by that, 3 ms (a sitting of a busy host moved a 535 ms median by
        // 1.8 ms between two runs). The shards also run side by side on the two cores, which
        // widens their interval (537.7 to 555.0 ms once, against 536.6 to 539.5 for the whole
        // run): the two intervals, so widened, must overlap (the medians not told apart)
        let overlap = ci_w.lo - 3.0 <= ci_m.hi + 3.0 && ci_m.lo - 3.0 <= ci_w.hi + 3.0;
        assert!(
            overlap,
            "{cell:?}: the two medians' 95 % intervals, widened by 3 ms, overlap"
        );
    }

    // The same deployment for a user who is not root: the tasks run as that user, and
    // quiclab in a user namespace of its own (/dev/net/tun at 0666, as most nodes have it).
    let user = common::TestUser::ensure();
    let (uid, gid) = user.ids();
    let (bin, home) = common::user_files(&dir, uid, gid);
    let user_plan = home.join("plan.toml");
    common::write_plan(
        &user_plan,
        "name = \"slurm-user\"\niterations = 3\nseed = 11\n[workload]\n\
         kind = \"single-object\"\nsizes = [\"300kb\"]\n[network]\nrate = \"10mbit\"\n\
         delay = \"5ms\"\n[arms.h2]\nhttp = \"2\"\n[arms.h3]\nhttp = \"3\"\n",
    );
    let _tun = common::TunMode::set(0o666);
    let user_results = home.join("results");
    let env = format!(
        "QUICLAB_PLAN={},QUICLAB_SHARDS=2,QUICLAB_RESULTS={},QUICLAB={},QUICLAB_ARGS=--jobs 1",
        user_plan.display(),
        user_results.display(),
        bin.display()
    );
    let (uid_arg, gid_arg) = (format!("--uid={uid}"), format!("--gid={gid}"));
    let job = cluster.submit_with("1-2", &env, &home, &[&uid_arg, &gid_arg]);
    cluster.wait(job, Duration::from_secs(180));
    let mut user_trials = 0;
    for k in 1..=2 {
        let shard = user_results.join(format!("shard-{k}-of-2"));
        let log =
            std::fs::read_to_string(home.join(format!("job-{job}_{k}.out"))).unwrap_or_default();
        assert_eq!(
            cluster.state(job, k),
            "COMPLETED",
            "the user's task {k}: {log}\n{}",
            cluster.logs()
        );
        assert!(
            log.contains("not run as root: the lab runs in a user namespace of its own"),
            "{log}"
        );
        let report = std::fs::read_to_string(shard.join("report.html")).unwrap();
        assert!(
            report.contains(&format!("a user namespace of user {uid} (not root)")),
            "shard {k}'s report names the user namespace"
        );
        let meta = std::fs::metadata(shard.join("results.db")).unwrap();
        assert_eq!(std::os::unix::fs::MetadataExt::uid(&meta), uid);
        user_trials += trial_count(&shard);
    }
    assert_eq!(user_trials, 6, "the user's shards ran the plan's 6 trials");
}

#[test]
fn the_batch_script_passes_quiclab_args_as_words_without_expanding_patterns() {
    let d = common::TempDir::new("sbatch-args");
    // a file a pattern would match, and a stand-in for quiclab that prints its arguments
    std::fs::write(d.join("match-me"), "").unwrap();
    let fake = d.join("fake-quiclab");
    std::fs::write(
        &fake,
        "#!/bin/sh\nfor a in \"$@\"; do echo \"[$a]\"; done\n",
    )
    .unwrap();
    std::fs::set_permissions(&fake, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/slurm/quiclab.sbatch");
    // task `task` of 4 with these QUICLAB_ARGS (none: unset): the arguments quiclab got
    let run = |task: &str, args: Option<&str>| {
        let mut cmd = Command::new("bash");
        cmd.arg(&script)
            .current_dir(&*d)
            .env("QUICLAB", &fake)
            .env("QUICLAB_PLAN", "www21")
            .env("QUICLAB_SHARDS", "4")
            .env("QUICLAB_RESULTS", "/r")
            .env("SLURM_ARRAY_TASK_ID", task);
        match args {
            Some(a) => cmd.env("QUICLAB_ARGS", a),
            None => cmd.env_remove("QUICLAB_ARGS"),
        };
        let out = cmd.output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    assert_eq!(
        run("2", Some("--jobs 2  match-*")),
        "[run]\n[www21]\n[--shard]\n[2/4]\n[--out]\n[/r/shard-2-of-4]\n[--jobs]\n[2]\n[match-*]\n"
    );
    assert!(run("1", None).ends_with("[--out]\n[/r/shard-1-of-4]\n"));
}
