//! Running a plan into a campaign directory: skip what is finished, run the rest on `jobs`
//! worker threads, record each trial as it ends, keep artifacts of the median trials.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;

use quiclab_model::campaign as model;
use quiclab_store::{Store, StoreError, TrialRecord};

use crate::expand::{TrialSpec, expand};
use crate::governor::{Change, Governor};
use crate::plan::Plan;
use crate::queue::Queue;
use crate::shard::Shard;
use crate::trial::{self, TrialEnd, TrialEnv};

/// How to run a campaign.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// The campaign directory (database, trial folders, report), as named.
    pub out: PathBuf,
    /// The same directory held open (`Anchor::open(out)`): every trial's files are created and
    /// deleted in it, even if its name is made to lead elsewhere mid-run.
    pub held: std::sync::Arc<quiclab_store::output::Anchor>,
    /// Trials run at once.
    pub jobs: Jobs,
    /// The quiclab binary for the endpoints.
    pub bin: PathBuf,
    /// Keep every trial's artifacts, not only the median trial's of each cell.
    pub keep_all_artifacts: bool,
    /// (key, value) facts about the machine and build, stored with the campaign.
    pub provenance: Vec<(String, String)>,
    /// This quiclab's build (version and commit), recorded with every trial.
    pub build: String,
    /// Add to a directory whose trials another build ran (else refused).
    pub allow_mixed_builds: bool,
    /// Run only this shard of the plan's trials (`crate::shard`).
    pub shard: Option<Shard>,
    /// This machine's name, recorded with every trial.
    pub host: String,
    /// After this many failures of one kind in a row, an arm's trials not yet started are
    /// left out (a rerun into the same directory runs them); `None` never stops an arm.
    pub fail_after: Option<u32>,
}

/// The default of [`RunOptions::fail_after`]: five failures of one kind in a row are a broken
/// arm (a program missing or crashing, a stack that cannot talk to its peer), not bad luck.
pub const FAIL_AFTER: u32 = 5;

/// What makes two failures of one kind: the error with its numbers masked (two timeouts
/// after different times are one kind), its first line, at most 120 characters.
pub fn failure_kind(error: &str) -> String {
    error
        .lines()
        .next()
        .unwrap_or_default()
        .chars()
        .map(|c| if c.is_ascii_digit() { '#' } else { c })
        .take(120)
        .collect()
}

/// An arm the campaign stopped running: its failures in a row, the last one's error, and how
/// many of its trials were left out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoppedArm {
    pub arm: String,
    pub failures: u32,
    pub error: String,
    pub left_out: usize,
}

/// How many trials run at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Jobs {
    /// This many, as asked.
    Fixed(usize),
    /// As many as the trials' measured CPU allows ([`crate::governor`]), at most this many.
    Auto(usize),
}

impl std::fmt::Display for Jobs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Jobs::Fixed(n) => write!(f, "{n}"),
            Jobs::Auto(n) => write!(f, "auto (1 to {n}, by the CPU the trials need)"),
        }
    }
}

/// What the runner tells its user as it goes.
pub trait Progress {
    /// Before the first trial: how many the plan has and how many are already done.
    fn begin(&mut self, total: usize, already_done: usize);
    fn trial_started(&mut self, plan: &Plan, spec: &TrialSpec);
    fn trial_done(&mut self, plan: &Plan, spec: &TrialSpec, record: &TrialRecord);
    /// Something the user should know (e.g. the host is too busy for accurate results).
    fn warn(&mut self, message: &str);
    /// With automatic jobs: the trials allowed at once changed, and why.
    fn jobs_changed(&mut self, _limit: usize, _why: &Change) {}
    /// With adaptive iterations: `n` trials will not run, and why.
    fn trials_dropped(&mut self, _n: usize, _why: &str) {}
    fn end(&mut self);
}

/// How a run went.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Summary {
    pub total: usize,
    /// Finished in an earlier run and skipped.
    pub skipped: usize,
    pub ran: usize,
    pub failed: usize,
    /// Stopped by the user before every trial ran.
    pub interrupted: bool,
    /// Seconds during which the host's CPUs were nearly saturated.
    pub busy_seconds: u64,
    /// The most trials that were allowed at once, and the last limit (with automatic jobs,
    /// where the governor left it; else the fixed number).
    pub jobs_max: usize,
    pub jobs_last: usize,
    /// With adaptive iterations: trials of this run left out because their condition and size
    /// had enough.
    pub adaptive_skipped: usize,
    /// Arms stopped after [`RunOptions::fail_after`] failures of one kind in a row.
    pub stopped_arms: Vec<StoppedArm>,
}

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(
        "{dir} holds the results of plan {found:?}, not {wanted:?}: choose another --out directory"
    )]
    OtherCampaign {
        dir: String,
        found: String,
        wanted: String,
    },
    #[error("--jobs must be at least 1")]
    NoJobs,
    #[error(
        "{dir} holds {found} of plan {plan:?}, not {wanted}: each shard runs into its own \
         directory (choose another --out)"
    )]
    OtherShard {
        dir: String,
        plan: String,
        found: String,
        wanted: String,
    },
    #[error(
        "{dir} holds trials of another quiclab build ({found}); this is {current}: one campaign \
         would mix two builds' results. Choose another --out directory, or add to it with \
         --allow-mixed-builds (the export's build column tells the trials apart)"
    )]
    OtherBuild {
        dir: String,
        found: String,
        current: String,
    },
    #[error(
        "plan {plan:?} stops its iterations adaptively (iterations = {{ min, max, ci }}): a \
         condition and size needs all its iterations in one place to decide, and shards split \
         them; run it whole, or give the plan a number of iterations to shard it"
    )]
    AdaptiveShard { plan: String },
}

/// Whether the plan may run as a shard (`sharded`): adaptive iterations need every iteration of
/// a condition and size in one place. Asked by a run and by its dry run alike.
pub fn check_shardable(plan: &Plan, sharded: bool) -> Result<(), RunError> {
    if plan.adaptive.is_some() && sharded {
        return Err(RunError::AdaptiveShard {
            plan: plan.name.clone(),
        });
    }
    Ok(())
}

/// The campaign description a report needs, from the plan.
pub fn describe(plan: &Plan, provenance: &[(String, String)]) -> model::Campaign {
    let mut sizes = plan.sizes.clone();
    sizes.sort_unstable();
    model::Campaign {
        name: plan.name.clone(),
        description: plan.description.clone(),
        plan_source: plan.source.clone(),
        profile: plan.profile.name().to_string(),
        provenance: provenance.to_vec(),
        arms: plan
            .arms
            .iter()
            .map(|a| model::Arm {
                name: a.name.clone(),
                label: a.label.clone(),
                caveats: a.caveats.clone(),
                server_stack: a.server_stack.name().to_string(),
                client_stack: a.client_stack.name().to_string(),
                client_browser: a.client_stack.browser(),
                transport: Some(a.transport()),
            })
            .collect(),
        conditions: plan
            .conditions
            .iter()
            .map(|c| model::Condition {
                name: c.name.clone(),
                label: c.label(),
                rtt_ms: c.link.min_rtt().as_secs_f64() * 1000.0,
                rate_bps: c.rate_bps(),
                base: c.base.map(|b| plan.conditions[b].name.clone()),
            })
            .collect(),
        interleave: plan.interleave.map(|i| plan.conditions[i].name.clone()),
        workload: plan.workload.clone(),
        sizes,
        comparisons: plan
            .comparisons
            .iter()
            .map(|(a, b)| model::Comparison {
                a: a.clone(),
                b: b.clone(),
            })
            .collect(),
        trials: Vec::new(),
        busy_seconds: None,
        busy: Vec::new(),
        adaptive: plan.adaptive,
        planted: plan.planted.clone(),
    }
}

/// A condition and size found to have enough iterations.
#[derive(Debug, Clone)]
pub struct Settled {
    /// (condition index, size).
    pub group: (usize, u64),
    /// Its complete iterations.
    pub iterations: usize,
    pub precision: quiclab_stats::adaptive::Precision,
}

impl Settled {
    /// `loss 1% / 100 KB: enough after 12 iterations (h2-cubic vs h3-cubic known to ±1.8 %)`.
    pub fn describe(&self, plan: &Plan) -> String {
        let (cond, size) = self.group;
        format!(
            "{} / {}: enough after {} iterations ({} known to ±{:.1} %)",
            plan.conditions[cond].name,
            quiclab_model::units::size(size),
            self.iterations,
            self.precision.widest,
            100.0 * self.precision.half_width.unwrap_or(f64::NAN)
        )
    }
}

/// Trials recorded of one condition, size and iteration: how many, and (arm, figure) of each
/// success.
type Recorded = (usize, Vec<(String, f64)>);

/// Adaptive iterations as a campaign runs: which trials each condition and size expects per
/// iteration, what has been recorded, and which groups have enough (see
/// [`quiclab_stats::adaptive`]). Sans-IO: fed records, it says which groups to stop.
pub struct AdaptiveRun<'a> {
    plan: &'a Plan,
    rule: model::AdaptiveIterations,
    comparisons: Vec<model::Comparison>,
    /// Trials per (condition, size, iteration) in the plan.
    expected: HashMap<(usize, u64, u32), usize>,
    /// Recorded per (condition, size, iteration): count, and (arm, figure) of the successes.
    recorded: HashMap<(usize, u64, u32), Recorded>,
    /// Groups that have enough.
    stopped: HashSet<(usize, u64)>,
}

impl<'a> AdaptiveRun<'a> {
    /// For `plan` (`None` without adaptive iterations), its trials `specs`.
    pub fn new(plan: &'a Plan, specs: &[TrialSpec]) -> Option<Self> {
        let rule = plan.adaptive?;
        let mut expected = HashMap::new();
        for s in specs {
            *expected
                .entry((s.condition, s.size, s.iteration))
                .or_insert(0) += 1;
        }
        Some(AdaptiveRun {
            plan,
            rule,
            comparisons: describe(plan, &[]).comparisons,
            expected,
            recorded: HashMap::new(),
            stopped: HashSet::new(),
        })
    }

    /// A trial was recorded (now or in an earlier run): returns its group if that group has
    /// just been found to have enough.
    pub fn record(&mut self, rec: &TrialRecord) -> Option<Settled> {
        let cond = self
            .plan
            .conditions
            .iter()
            .position(|c| c.name == rec.condition)?;
        let key = (cond, rec.size, rec.iteration);
        let entry = self.recorded.entry(key).or_default();
        entry.0 += 1;
        if rec.outcome.is_ok() {
            entry.1.push((rec.arm.clone(), rank(rec)));
        }
        let group = (cond, rec.size);
        let complete = self.expected.get(&key).is_some_and(|&n| entry.0 >= n);
        if !complete || self.stopped.contains(&group) {
            return None;
        }
        let (iterations, precision) = self.enough(group)?;
        self.stopped.insert(group);
        Some(Settled {
            group,
            iterations,
            precision,
        })
    }

    /// The iterations of `group` whose every trial is recorded.
    fn complete(&self, (cond, size): (usize, u64)) -> impl Iterator<Item = u32> + '_ {
        self.recorded
            .iter()
            .filter_map(move |(&(c, z, it), (n, _))| {
                (c == cond && z == size && self.expected.get(&(c, z, it)).is_some_and(|e| n >= e))
                    .then_some(it)
            })
    }

    /// When `group` has at least `min` complete iterations and every compared difference in
    /// them is known to within the target: how many, and how well.
    fn enough(&self, group: (usize, u64)) -> Option<(usize, quiclab_stats::adaptive::Precision)> {
        let complete: Vec<u32> = self.complete(group).collect();
        if (complete.len() as u32) < self.rule.min {
            return None;
        }
        let n = complete.len();
        let mut samples: std::collections::BTreeMap<String, Vec<f64>> = Default::default();
        for it in complete {
            for (arm, x) in &self.recorded[&(group.0, group.1, it)].1 {
                samples.entry(arm.clone()).or_default().push(*x);
            }
        }
        let size = group.1.to_string();
        let p = quiclab_stats::adaptive::precision(
            &samples,
            &self.comparisons,
            &[&self.plan.conditions[group.0].name, &size],
        );
        p.within(self.rule.ci).then_some((n, p))
    }

    /// Whether `spec` belongs to a group that has enough.
    pub fn stopped(&self, spec: &TrialSpec) -> bool {
        self.stopped.contains(&(spec.condition, spec.size))
    }

    /// Groups that have enough.
    pub fn stopped_groups(&self) -> usize {
        self.stopped.len()
    }
}

/// The most trials automatic jobs may run at once: four per core (a trial on a slow link needs
/// a few percent of one; the governor finds how many fit), and no more than cores for a
/// workload whose endpoints' timing is the measurement.
pub fn auto_ceiling(plan: &Plan) -> usize {
    let cores = cores();
    if crate::workloads::of(&plan.workload).timing_sensitive() {
        cores
    } else {
        4 * cores
    }
}

/// The CPUs this process may run on (1 when unknown).
pub fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Runs every trial of `plan` not yet finished in `opts.out`. Stops early (keeping every
/// finished trial) when `stop` is set.
pub fn run(
    plan: &Plan,
    opts: &RunOptions,
    stop: &Arc<AtomicBool>,
    progress: &mut dyn Progress,
) -> Result<Summary, RunError> {
    if matches!(opts.jobs, Jobs::Fixed(0) | Jobs::Auto(0)) {
        return Err(RunError::NoJobs);
    }
    let anchor = &opts.held;
    // held until the run returns: a second run into the same directory is refused
    let _lock = Store::lock(&opts.out)?;
    let mut store = Store::open(&opts.out)?;
    // the lock and the database were opened by name: in the directory held
    anchor.confirm(&opts.out).map_err(StoreError::from)?;
    if let Some(found) = store.meta("plan_name")?
        && found != plan.name
    {
        return Err(RunError::OtherCampaign {
            dir: opts.out.display().to_string(),
            found,
            wanted: plan.name.clone(),
        });
    }
    let others: Vec<String> = store
        .builds()?
        .into_iter()
        .filter(|b| *b != opts.build)
        .collect();
    if !others.is_empty() && !opts.allow_mixed_builds {
        return Err(RunError::OtherBuild {
            dir: opts.out.display().to_string(),
            found: others.join(", "),
            current: opts.build.clone(),
        });
    }
    let shard_name =
        |s: Option<String>| s.map_or("the whole campaign".into(), |s| format!("shard {s}"));
    let found_shard = store.meta("shard")?;
    let wanted_shard = opts.shard.map(|s| s.to_string());
    // a directory that holds trials belongs to the shard (or whole campaign) that ran them
    if found_shard != wanted_shard && !store.finished()?.is_empty() {
        return Err(RunError::OtherShard {
            dir: opts.out.display().to_string(),
            plan: plan.name.clone(),
            found: shard_name(found_shard),
            wanted: shard_name(wanted_shard),
        });
    }
    check_shardable(plan, opts.shard.is_some())?;
    let specs = expand(plan);
    store.set_meta("plan_name", &plan.name)?;
    match &wanted_shard {
        Some(s) => store.set_meta("shard", s)?,
        None => store.delete_meta("shard")?,
    }
    store.set_campaign(&describe(plan, &opts.provenance))?;
    let ids: Vec<&str> = specs.iter().map(|s| s.id.as_str()).collect();
    store.set_meta(
        "trial_ids",
        &serde_json::to_string(&ids).unwrap_or_else(|_| "[]".into()),
    )?;
    // a shard's trials: the plan's, split as every shard splits them
    let specs = match opts.shard {
        Some(shard) => crate::shard::select(plan, specs, shard),
        None => specs,
    };
    if opts.shard.is_some() {
        let mine: Vec<&str> = specs.iter().map(|s| s.id.as_str()).collect();
        store.set_meta(
            quiclab_store::SHARD_IDS,
            &serde_json::to_string(&mine).unwrap_or_else(|_| "[]".into()),
        )?;
    } else {
        store.delete_meta(quiclab_store::SHARD_IDS)?;
    }
    let finished = store.finished()?;
    // adaptive iterations: the trials already recorded may have settled some groups
    let mut adaptive = AdaptiveRun::new(plan, &specs);
    if let Some(a) = adaptive.as_mut() {
        let ids: HashSet<&str> = specs.iter().map(|s| s.id.as_str()).collect();
        for t in store.trials()? {
            if ids.contains(t.id.as_str()) {
                a.record(&t);
            }
        }
    }
    let mut todo: Vec<TrialSpec> = specs
        .iter()
        .filter(|s| !finished.contains(&s.id))
        .filter(|s| !adaptive.as_ref().is_some_and(|a| a.stopped(s)))
        .cloned()
        .collect();
    // a trial that takes the host starts once every running trial has ended: within an
    // iteration those trials go last, together, so the workers drain once per iteration
    // rather than before each of them (the order is otherwise the plan's, and stable)
    let alone = |s: &TrialSpec| plan.arms[s.arm].client_stack.takes_the_host();
    todo.sort_by_key(|s| (s.iteration, alone(s)));
    let done_here = specs.iter().filter(|s| finished.contains(&s.id)).count();
    let mut summary = Summary {
        total: specs.len(),
        skipped: done_here,
        adaptive_skipped: specs.len() - done_here - todo.len(),
        ..Summary::default()
    };
    progress.begin(summary.total, summary.skipped);
    if summary.adaptive_skipped > 0 {
        progress.trials_dropped(
            summary.adaptive_skipped,
            &format!(
                "{} conditions and sizes already have enough iterations",
                adaptive.as_ref().map_or(0, AdaptiveRun::stopped_groups)
            ),
        );
    }
    let env = TrialEnv {
        bin: opts.bin.clone(),
        dir: anchor.path().to_path_buf(),
        shown: opts.out.clone(),
        events: true,
    };
    let (workers, mut governor) = match opts.jobs {
        Jobs::Fixed(n) => (n, None),
        Jobs::Auto(ceiling) => (ceiling, Some(Governor::new(cores(), ceiling))),
    };
    let workers = workers.min(todo.len().max(1));
    let queue = Queue::new(todo.into_iter().map(|s| {
        let a = alone(&s);
        (s, a)
    }));
    let queue = &queue;
    let limit = governor.as_ref().map_or(workers, Governor::limit);
    queue.set_limit(limit);
    (summary.jobs_max, summary.jobs_last) = (limit, limit);
    let (tx, rx) = mpsc::channel::<Msg>();
    // the monitor only counts; the loop below reads the count, so the channel closes exactly
    // when the last worker returns
    let busy = Arc::new(AtomicU64::new(0));
    let spells: Arc<Mutex<Vec<model::BusySpell>>> = Arc::default();
    let monitor_stop = Arc::new(AtomicBool::new(false));
    let (cpu_tx, cpu_rx) = mpsc::channel::<f64>();
    let monitor = {
        let (done, busy, spells) = (monitor_stop.clone(), busy.clone(), spells.clone());
        let host = opts.host.clone();
        std::thread::spawn(move || watch_cpu(&done, &busy, &host, &spells, &cpu_tx))
    };
    // trials running, summed over the governor's looks since its last CPU sample
    let (mut running_sum, mut looks) = (0.0, 0u32);
    let result = std::thread::scope(|scope| {
        for _ in 0..workers {
            let (tx, env, stop) = (tx.clone(), env.clone(), stop.clone());
            scope.spawn(move || {
                loop {
                    // a trial whose client takes the host (a browser) starts alone
                    let Some((spec, running)) = queue.take(&stop) else {
                        return;
                    };
                    // trials side by side: each one's endpoints on a core of their own (by
                    // its place among them); a trial alone, or one at a time, on any
                    let core = running
                        .place()
                        .filter(|_| queue.limit() > 1)
                        .map(|p| p % cores());
                    quiclab_netns::process::bind_children_of_this_thread(
                        core.as_ref().map(std::slice::from_ref),
                    );
                    let _ = tx.send(Msg::Started(spec.clone()));
                    let end = trial::run(&env, plan, &spec, &stop);
                    drop(running);
                    if tx.send(Msg::Ended(spec, end)).is_err() {
                        return;
                    }
                }
            });
        }
        drop(tx);
        let mut warned = false;
        let mut store_error = None;
        // per arm: the kind of its latest failures and how many in a row
        let mut streaks: HashMap<usize, (String, u32)> = HashMap::new();
        loop {
            let msg = match rx.recv_timeout(Duration::from_millis(250)) {
                Ok(m) => Some(m),
                Err(mpsc::RecvTimeoutError::Timeout) => None,
                // every worker has returned
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
            };
            if let Some(g) = governor.as_mut() {
                running_sum += queue.running() as f64;
                looks += 1;
                while let Ok(cpu) = cpu_rx.try_recv() {
                    let running = running_sum / f64::from(looks.max(1));
                    (running_sum, looks) = (0.0, 0);
                    if let Some((limit, why)) = g.sample(cpu, running) {
                        queue.set_limit(limit);
                        summary.jobs_max = summary.jobs_max.max(limit);
                        summary.jobs_last = limit;
                        progress.jobs_changed(limit, &why);
                    }
                }
            }
            let seconds = busy.load(Ordering::Relaxed);
            if seconds >= BUSY_WARN_AFTER && !warned {
                warned = true;
                progress.warn(&format!(
                    "the host's CPUs have been over {:.0} % busy for {seconds} s: trials may be \
                     slowed by the machine rather than the emulated network; fewer --jobs, or a \
                     quieter machine, give cleaner results",
                    BUSY_THRESHOLD * 100.0
                ));
            }
            match msg {
                None => {}
                Some(Msg::Started(spec)) => progress.trial_started(plan, &spec),
                Some(Msg::Ended(spec, TrialEnd::Done(mut rec))) => {
                    rec.build = Some(opts.build.clone());
                    rec.host = Some(opts.host.clone());
                    rec.shard = wanted_shard.clone();
                    if let Err(e) = store.record(&rec) {
                        // without a store nothing more can be kept: stop the campaign
                        stop.store(true, Ordering::Relaxed);
                        store_error.get_or_insert(e);
                        continue;
                    }
                    summary.ran += 1;
                    summary.failed += usize::from(rec.outcome.is_err());
                    if let (Some(g), Ok(m)) = (governor.as_mut(), &rec.outcome)
                        && m.detail.emulator_late_ms.is_some()
                    {
                        g.trial_late();
                    }
                    progress.trial_done(plan, &spec, &rec);
                    match &rec.outcome {
                        Ok(_) => {
                            streaks.remove(&spec.arm);
                        }
                        Err(e) => {
                            let kind = failure_kind(e);
                            let streak = streaks.entry(spec.arm).or_insert((kind.clone(), 0));
                            if streak.0 != kind {
                                *streak = (kind, 0);
                            }
                            streak.1 += 1;
                            let name = &plan.arms[spec.arm].name;
                            if opts.fail_after.is_some_and(|n| streak.1 >= n)
                                && !summary.stopped_arms.iter().any(|s| s.arm == *name)
                            {
                                let left_out = queue.retain(|(s, _)| s.arm != spec.arm);
                                progress.trials_dropped(
                                    left_out,
                                    &format!(
                                        "arm {name:?} stopped after {} failures of one kind in \
                                         a row ({e}); a rerun into the same directory runs its \
                                         trials left out (--fail-after 0: never stop an arm)",
                                        streak.1
                                    ),
                                );
                                summary.stopped_arms.push(StoppedArm {
                                    arm: name.clone(),
                                    failures: streak.1,
                                    error: e.clone(),
                                    left_out,
                                });
                            }
                        }
                    }
                    // this condition and size may now have enough: its trials not yet started
                    // go (one a worker took meanwhile still runs)
                    if let Some(settled) = adaptive.as_mut().and_then(|a| a.record(&rec)) {
                        let (cond, size) = settled.group;
                        let dropped =
                            queue.retain(|(s, _)| !(s.condition == cond && s.size == size));
                        summary.adaptive_skipped += dropped;
                        progress.trials_dropped(dropped, &settled.describe(plan));
                    }
                }
                Some(Msg::Ended(_, TrialEnd::Interrupted)) => summary.interrupted = true,
            }
        }
        store_error.map_or(Ok(()), Err)
    });
    monitor_stop.store(true, Ordering::Relaxed);
    result?;
    summary.busy_seconds = busy.load(Ordering::Relaxed);
    let _ = monitor.join();
    summary.interrupted |= stop.load(Ordering::Relaxed);
    // this run's busy seconds add to those of earlier runs into the directory
    let earlier: u64 = store
        .meta("busy_seconds")?
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    store.set_meta(
        "busy_seconds",
        &(earlier + summary.busy_seconds).to_string(),
    )?;
    store.add_busy(&spells.lock().unwrap_or_else(|p| p.into_inner()))?;
    if !opts.keep_all_artifacts {
        prune_artifacts(&store, anchor.path())?;
    }
    progress.end();
    Ok(summary)
}

enum Msg {
    Started(TrialSpec),
    Ended(TrialSpec, TrialEnd),
}

/// CPU busy fraction above which results may be skewed.
const BUSY_THRESHOLD: f64 = 0.9;
/// Busy seconds before the user is warned.
const BUSY_WARN_AFTER: u64 = 3;

/// Adds the busy second that ended at `end_unix_ms` to `spells`: it extends the last spell
/// when it follows it (within half a second), else it starts a new one.
fn add_busy_second(spells: &mut Vec<model::BusySpell>, host: &str, end_unix_ms: u64) {
    let start = end_unix_ms.saturating_sub(1000);
    match spells.last_mut() {
        Some(last) if start <= last.to_unix_ms + 500 => last.to_unix_ms = end_unix_ms,
        _ => spells.push(model::BusySpell {
            host: Some(host.to_string()),
            from_unix_ms: start,
            to_unix_ms: end_unix_ms,
        }),
    }
}

/// Reads /proc/stat every second, sends each second's busy fraction of all cores to
/// `samples`, and counts the seconds in which the CPUs were nearly saturated, keeping when they
/// were (`spells`, on `host`).
fn watch_cpu(
    done: &AtomicBool,
    busy_seconds: &AtomicU64,
    host: &str,
    spells: &Mutex<Vec<model::BusySpell>>,
    samples: &mpsc::Sender<f64>,
) {
    fn sample() -> Option<(u64, u64)> {
        let text = std::fs::read_to_string("/proc/stat").ok()?;
        let line = text.lines().next()?;
        let v: Vec<u64> = line
            .split_whitespace()
            .skip(1)
            .filter_map(|x| x.parse().ok())
            .collect();
        // idle + iowait
        let idle = v.get(3)? + v.get(4).copied().unwrap_or(0);
        Some((v.iter().sum(), idle))
    }
    let mut prev = sample();
    while !done.load(Ordering::Relaxed) {
        // short naps, so the campaign's end is not held up by a whole second
        for _ in 0..10 {
            std::thread::sleep(Duration::from_millis(100));
            if done.load(Ordering::Relaxed) {
                return;
            }
        }
        let now = sample();
        if let (Some((t0, i0)), Some((t1, i1))) = (prev, now) {
            let total = t1.saturating_sub(t0).max(1);
            let busy = 1.0 - (i1.saturating_sub(i0) as f64 / total as f64);
            let _ = samples.send(busy);
            if busy > BUSY_THRESHOLD {
                busy_seconds.fetch_add(1, Ordering::Relaxed);
                let now = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_millis() as u64);
                add_busy_second(
                    &mut spells.lock().unwrap_or_else(|p| p.into_inner()),
                    host,
                    now,
                );
            }
        }
        prev = now;
    }
}

/// Keeps the artifacts of the median trial of each (condition, size, arm) cell and removes the
/// others' folders (median by TTLB; for telemetry, by the p90 of unit latency, the figure its
/// report compares). Failed trials keep theirs: they are what explains the failure.
pub fn prune_artifacts(store: &Store, out: &std::path::Path) -> Result<(), StoreError> {
    let trials = store.trials()?;
    let mut cells: HashMap<(&str, &str, u64), Vec<&TrialRecord>> = HashMap::new();
    for t in &trials {
        if t.outcome.is_ok() && t.artifacts.is_some() {
            cells
                .entry((t.arm.as_str(), t.condition.as_str(), t.size))
                .or_default()
                .push(t);
        }
    }
    let mut keep: HashSet<&str> = HashSet::new();
    for group in cells.values_mut() {
        group.sort_by(|a, b| rank(a).total_cmp(&rank(b)));
        // the lower median for an even count: an actual trial, not an average of two
        keep.insert(group[(group.len() - 1) / 2].id.as_str());
    }
    for t in &trials {
        if let (Ok(_), Some(rel)) = (&t.outcome, &t.artifacts)
            && !keep.contains(t.id.as_str())
        {
            let _ = std::fs::remove_dir_all(out.join(rel));
            store.clear_artifacts(&t.id)?;
        }
    }
    Ok(())
}

/// What orders a cell's trials to find its median one.
pub fn rank(t: &TrialRecord) -> f64 {
    match &t.outcome {
        Ok(m) => match &m.detail.telemetry {
            Some(d) => quiclab_stats::quantile(&d.latencies_ms(), 0.9).unwrap_or(f64::NAN),
            None => m.ttlb_ms,
        },
        Err(_) => f64::INFINITY,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_are_of_one_kind_whatever_their_numbers_and_later_lines() {
        assert_eq!(
            failure_kind("client timed out after 60.2 s\nlog: /tmp/x/1"),
            failure_kind("client timed out after 61.7 s\nlog: /tmp/y/2")
        );
        assert_ne!(
            failure_kind("client timed out after 60 s"),
            failure_kind("server exited with status 1")
        );
        assert_eq!(failure_kind(&"x".repeat(500)).len(), 120);
    }

    /// A record of `spec` whose figure (TTLB) is `ms`, or a failure.
    fn record(plan: &Plan, spec: &TrialSpec, ms: Option<f64>) -> TrialRecord {
        let outcome = match ms {
            Some(ms) => Ok(quiclab_model::campaign::Metrics {
                ttlb_ms: ms,
                ..Default::default()
            }),
            None => Err("failed".to_string()),
        };
        TrialRecord {
            id: spec.id.clone(),
            seq: spec.seq,
            arm: plan.arms[spec.arm].name.clone(),
            condition: plan.conditions[spec.condition].name.clone(),
            size: spec.size,
            iteration: spec.iteration,
            seed: spec.seed,
            config: serde_json::Value::Null,
            started_unix_ms: 0,
            wall_ms: 0.0,
            outcome,
            link: serde_json::Value::Null,
            requests: serde_json::Value::Null,
            phases: serde_json::Value::Null,
            artifacts: None,
            build: None,
            host: None,
            shard: None,
        }
    }

    #[test]
    fn a_steady_group_stops_at_its_minimum_and_a_noisy_one_runs_on() {
        let text = "name = \"a\"\niterations = { min = 4, max = 12, ci = \"3%\" }\n\
             [workload]\nkind = \"single-object\"\nsizes = [\"100kb\"]\n\
             [network]\nrate = \"10mbit\"\n[conditions.steady]\n[conditions.noisy]\n\
             loss = \"1%\"\n[arms.h2]\nhttp = \"2\"\n[arms.h3]\nhttp = \"3\"\n\
             [[compare]]\na = \"h2\"\nb = \"h3\"\n";
        let plan = crate::plan::parse(text, "a.toml", crate::plan::Profile::Full).unwrap();
        let specs = expand(&plan);
        let mut a = AdaptiveRun::new(&plan, &specs).unwrap();
        let mut rng = quiclab_stats::Rng::new(11);
        let mut settled = Vec::new();
        for spec in &specs {
            let cond = &plan.conditions[spec.condition].name;
            let base = if spec.arm == 0 { 150.0 } else { 140.0 };
            // ±0.5 % on the steady link, ±40 % with loss
            let spread = if cond == "steady" { 0.005 } else { 0.4 };
            let u = rng.next_u64() as f64 / u64::MAX as f64;
            // one failure: its iteration still completes, with one sample fewer
            let ms = (spec.iteration != 1 || spec.arm != 1 || cond != "steady")
                .then_some(base * (1.0 + spread * (2.0 * u - 1.0)));
            if a.stopped(spec) {
                continue;
            }
            if let Some(s) = a.record(&record(&plan, spec, ms)) {
                settled.push((cond.clone(), s.iterations, s.precision.clone()));
            }
        }
        assert_eq!(settled.len(), 1, "{settled:?}");
        let (cond, iterations, precision) = &settled[0];
        assert_eq!((cond.as_str(), *iterations), ("steady", 4));
        assert_eq!(precision.widest, "h2 vs h3");
        assert!(precision.within(0.03), "{precision:?}");
        let steady = specs.iter().find(|s| s.condition == 0).unwrap();
        let noisy = specs.iter().find(|s| s.condition == 1).unwrap();
        assert!(a.stopped(steady) && !a.stopped(noisy));
        assert_eq!(a.stopped_groups(), 1);
        assert!(
            settled[0]
                .2
                .half_width
                .is_some_and(|h| h > 0.0 && h <= 0.03)
        );
    }

    #[test]
    fn busy_seconds_in_a_row_make_one_spell_and_a_gap_starts_another() {
        let mut spells = Vec::new();
        // seconds ending at 10 s, 11 s and 12.1 s (the sampler's naps drift), then at 20 s
        for end in [10_000, 11_000, 12_100, 20_000] {
            add_busy_second(&mut spells, "lab-1", end);
        }
        let spans: Vec<(u64, u64)> = spells
            .iter()
            .map(|s| (s.from_unix_ms, s.to_unix_ms))
            .collect();
        assert_eq!(spans, [(9_000, 12_100), (19_000, 20_000)]);
        assert!(spells.iter().all(|s| s.host.as_deref() == Some("lab-1")));
    }
}
