//! Campaign plans: TOML in, a validated [`Plan`] out, or an error that names the file, line,
//! column, the problem and what is allowed.
//!
//! ```toml
//! name = "example"
//! iterations = 20            # trials per (condition, size, arm)
//! seed = 1                   # base seed: iteration i uses a seed derived from (seed, i)
//! interleave = "baseline"    # optional: run this condition just before every other
//!                            # condition's trial (same arm, iteration and size)
//! [quick]                    # the --quick profile overrides these
//! iterations = 5             # ([quick.workload] overrides keys of [workload])
//! [workload]                 # kinds: "single-object" (one GET of each size on a new
//! kind = "single-object"     # connection), "repeat" (`requests` GETs of each size, each on a
//! sizes = ["100kb", "1mb"]   # new connection resuming the last session: 0-RTT over QUIC),
//!                            # "segments" (`segments` GETs on one connection, sizes drawn from
//!                            # `segment-min`..`segment-max` per iteration; `stream-rate` and
//!                            # `player-buffer` set the report's playback estimate), "telemetry"
//!                            # (`units-per-second` 8-byte units in flushes of `flush` units
//!                            # for `duration`; arms say `telemetry = MODE`, not `http`),
//!                            # "pages" (`pages` = built-in page names or manifest files, each
//!                            # loaded like a browser by `quiclab page`; see docs/pages.md),
//!                            # "bulk" (`connections`, `duration`), "upload" (`sizes`: one
//!                            # POST of each per trial); every kind is a module of `workloads`
//! [network]                  # applied to every condition (link keys as in `quiclab link`)
//! rate = "10mbit"
//! delay = "10ms"
//! [conditions.baseline]      # named conditions, in order; their keys override [network]
//! [conditions."loss 1%"]
//! loss = "1%"
//! [matrix]                   # and/or every combination of these values
//! up-loss = ["0%", "2%"]
//! [arms.h2-cubic]            # http = "1.1", "2", "3", "coded" or "hq" (its default stack), or
//!                            # stack = NAME (see `stacks`), with the stack's knobs
//! http = "2"
//! tcp-cc = "cubic"
//! [arms.h3-cubic]
//! http = "3"
//! quic-cc = "cubic"
//! [[compare]]                # shown as the change of b relative to a
//! a = "h2-cubic"
//! b = "h3-cubic"
//! [[planted]]                # a cause planted on purpose: a and b (+ `in` a condition) or
//! condition = "loss 1%"      # `condition` (against its base), and the budget components
//! cause = "window-after-loss" # that must account for it, or "nothing" (docs/explain.md)
//! ```

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use indexmap::IndexMap;
use quiclab_link::config::{ConfigError, KEYS};
use quiclab_link::{LinkConfig, units};
pub use quiclab_model::campaign::AdaptiveIterations;
pub use quiclab_model::campaign::Workload;
use quiclab_model::record::{HttpVersion, Transport};
use quiclab_telemetry::Mode;
use std::ops::Range;
use toml::Spanned;

pub use crate::keys::PlanError;
use crate::keys::{Ctx, Table, Value, WorkloadKeys, line_col, scalar};
use crate::stacks::{self, ArmStack, Capability, Knob, Stack};
use crate::workloads::{self, WorkloadKind};

/// Which profile of a plan to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Profile {
    Full,
    /// Fewer iterations (and whatever else the plan's `[quick]` table reduces), for a first look.
    Quick,
}

impl Profile {
    pub fn name(self) -> &'static str {
        match self {
            Profile::Full => "full",
            Profile::Quick => "quick",
        }
    }
}

/// A validated plan.
#[derive(Debug, Clone)]
pub struct Plan {
    pub name: String,
    pub description: String,
    /// Where the plan came from (a path, or `built-in NAME`).
    pub source: String,
    pub profile: Profile,
    /// Iterations of every condition and size (with adaptive iterations, the most).
    pub iterations: u32,
    /// `iterations = { min, max, ci }`: each condition and size stops once every compared
    /// difference in it is known to within `ci` (the campaign decides, after each iteration).
    pub adaptive: Option<AdaptiveIterations>,
    pub seed: u64,
    /// What each trial does.
    pub workload: Workload,
    /// Object sizes in bytes, in plan order (for `segments`, the one nominal segment size,
    /// halfway between the smallest and the largest).
    pub sizes: Vec<u64>,
    pub conditions: Vec<Condition>,
    /// Index of the condition run just before every trial of each other condition (same arm,
    /// iteration and size), as a study that alternates impaired and normal runs does; that
    /// condition then has no trials of its own besides these.
    pub interleave: Option<usize>,
    pub arms: Vec<Arm>,
    /// (baseline, compared) arm names.
    pub comparisons: Vec<(String, String)>,
    /// Causes planted on purpose (`[[planted]]`); a planted arm's pair is among `comparisons`.
    pub planted: Vec<quiclab_model::campaign::Planted>,
    /// Longest a trial may take before it is recorded as failed.
    pub trial_timeout: Option<Duration>,
    /// `cells = "planted"`: only these (arm, condition) cells run, those the planted checks
    /// compare (`None`: every arm in every condition).
    pub cells: Option<Vec<(usize, usize)>>,
}

/// A network condition: link keys as given (after merging `[network]`) and the resolved link.
#[derive(Debug, Clone)]
pub struct Condition {
    pub name: String,
    /// The keys that define it, e.g. `[("rate", "10mbit"), ("delay", "10ms"), ("loss", "1%")]`.
    pub keys: Vec<(String, String)>,
    /// The link (seed 0; each trial sets its own).
    pub link: LinkConfig,
    /// `direct = true`: no emulator, the namespaces joined by a veth pair of this MTU (the
    /// link's `mtu`, or 1500); the link then emulates nothing.
    pub direct_mtu: Option<u32>,
    /// `offloads = true`: the emulator's devices take and give segmentation-offload
    /// super-packets (split into wire packets for every decision), which more than doubles
    /// what it forwards at MTU 1500; for links of several Gbit/s.
    pub offloads: bool,
    /// The condition this one impairs: the same path (its keys other than loss, delay, jitter
    /// and reordering) without its impairments.
    pub base: Option<usize>,
}

impl Condition {
    /// A one-line description, e.g. `rate=10mbit delay=10ms loss=1%`.
    pub fn label(&self) -> String {
        self.keys
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// The bottleneck rate (the smaller direction's), if any.
    pub fn rate_bps(&self) -> Option<u64> {
        self.link.bottleneck_bps()
    }
}

/// A stack (or a pair: one serving, one fetching) with its knobs.
#[derive(Debug, Clone)]
pub struct Arm {
    pub name: String,
    pub label: String,
    /// The HTTP version; for a telemetry arm (no HTTP spoken), the newest its stack speaks.
    pub http: HttpVersion,
    /// How a telemetry arm's flushes travel (telemetry plans only).
    pub telemetry: Option<Mode>,
    /// The stack that serves and the stack that fetches: the same one unless the plan pairs two
    /// (`server-stack`, `client-stack`).
    pub server_stack: &'static dyn Stack,
    pub client_stack: &'static dyn Stack,
    /// Knobs as normalised, in the stacks' order.
    pub knobs: Vec<(String, String)>,
    /// Notes that must travel with this arm's results.
    pub caveats: Vec<String>,
}

impl Arm {
    /// What the arm asks of its stacks.
    pub fn stack_args(&self) -> ArmStack<'_> {
        ArmStack {
            http: self.http,
            mode: self.telemetry,
            knobs: &self.knobs,
        }
    }

    /// The arm's knobs that reach its server (what its server task carries).
    pub fn server_knobs(&self) -> Vec<(String, String)> {
        stacks::server_knobs(self.server_stack, &self.knobs)
    }

    /// The arm's knobs that reach its client (what its client task carries).
    pub fn client_knobs(&self) -> Vec<(String, String)> {
        stacks::client_knobs(self.client_stack, &self.knobs)
    }

    /// The transport the arm runs over.
    pub fn transport(&self) -> Transport {
        self.server_stack.transport()
    }

    /// The value of a knob, if set.
    pub fn knob(&self, key: &str) -> Option<&str> {
        stacks::knob(&self.knobs, key)
    }

    /// The arm as a trial's configuration names it (hashed into the trial's id). An arm of the
    /// default stacks is named by its HTTP version or telemetry mode alone, as before stacks had
    /// names; explicit stacks add themselves.
    pub fn config(&self) -> serde_json::Value {
        let mut c = match self.telemetry {
            Some(mode) => serde_json::json!({
                "name": self.name,
                "telemetry": mode.name(),
                "knobs": self.knobs,
            }),
            None => serde_json::json!({
                "name": self.name,
                "http": self.http.name(),
                "knobs": self.knobs,
            }),
        };
        let default = match self.telemetry {
            Some(mode) => stacks::for_mode(mode),
            None => stacks::for_http(self.http),
        }
        .map(|s| s.name());
        if [self.server_stack, self.client_stack]
            .iter()
            .any(|s| Some(s.name()) != default)
        {
            c["server-stack"] = self.server_stack.identity().into();
            c["client-stack"] = self.client_stack.identity().into();
        }
        c
    }
}

impl Plan {
    /// How many trials the plan expands to, counted without expanding it.
    pub fn trial_count(&self) -> u64 {
        let conditions = (self.conditions.len() - usize::from(self.interleave.is_some())) as u64;
        let per = if self.interleave.is_some() { 2 } else { 1 };
        let cells = match &self.cells {
            Some(c) => c.len() as u64,
            None => conditions.saturating_mul(self.arms.len() as u64),
        };
        u64::from(self.iterations)
            .saturating_mul(cells)
            .saturating_mul(self.sizes.len() as u64)
            .saturating_mul(per)
    }

    /// Whether arm `arm` runs in condition `condition` (see [`Plan::cells`]).
    pub fn runs(&self, arm: usize, condition: usize) -> bool {
        self.cells
            .as_ref()
            .is_none_or(|c| c.contains(&(arm, condition)))
    }

    /// What the plan's stacks need that this machine lacks (programs not installed, with
    /// what provides each), once each.
    pub fn missing(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for a in &self.arms {
            for s in [a.server_stack, a.client_stack] {
                for m in s.missing() {
                    if !out.contains(&m) {
                        out.push(m);
                    }
                }
            }
        }
        out
    }
}

mod arms;
mod builtin;
mod conditions;
mod raw;

pub use arms::arm_keys_help;
use arms::*;
pub use builtin::BUILT_IN;
use conditions::*;
use raw::*;

// ---- parsing ----

/// The most trials a plan may have: each is a few hundred bytes until it runs, and a few
/// kilobytes in the results database after.
pub const MAX_TRIALS: u64 = 1_000_000;

/// A message with every run of more than 20 digits cut to its first and last few and its
/// length: toml spells `1e308` out as 309 digits.
fn short_numbers(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    let mut digits = String::new();
    let flush = |digits: &mut String, out: &mut String| {
        if digits.len() > 20 {
            out.push_str(&format!(
                "{}…{} ({} digits)",
                &digits[..3],
                &digits[digits.len() - 3..],
                digits.len()
            ));
        } else {
            out.push_str(digits);
        }
        digits.clear();
    };
    for c in message.chars() {
        if c.is_ascii_digit() {
            digits.push(c);
        } else {
            flush(&mut digits, &mut out);
            out.push(c);
        }
    }
    flush(&mut digits, &mut out);
    out
}

/// `[workload]` (with the profile's overrides applied): its kind's module parses the rest.
fn parse_workload(
    ctx: &Ctx,
    at: Range<usize>,
    t: &Table,
) -> Result<(&'static dyn WorkloadKind, Workload, Vec<u64>), PlanError> {
    let Some((_, kind_v)) = t.get_key_value("kind") else {
        return Err(ctx.err(
            at,
            format!("[workload] needs kind: allowed: {}", workloads::kinds()),
        ));
    };
    let kind = scalar(ctx, kind_v)?;
    let Some(module) = workloads::find(&kind) else {
        return Err(ctx.err(
            kind_v.span(),
            format!("workload kind {kind:?}: allowed: {}", workloads::kinds()),
        ));
    };
    for k in t.keys() {
        if k.get_ref() != "kind" && !module.keys().contains(&k.get_ref().as_str()) {
            return Err(ctx.err(
                k.span(),
                format!(
                    "[workload] key {:?} does not apply to kind {kind:?}; its keys: {}",
                    k.get_ref(),
                    module.keys().join(", ")
                ),
            ));
        }
    }
    let keys = WorkloadKeys { ctx, at, table: t };
    let (w, sizes) = module.parse(&keys)?;
    Ok((module, w, sizes))
}

/// Parses and validates a plan. `file` names it in errors.
pub fn parse(text: &str, file: &str, profile: Profile) -> Result<Plan, PlanError> {
    let ctx = Ctx { file, text };
    let raw: RawPlan = toml::from_str(text).map_err(|e| {
        let span = e.span().unwrap_or(0..0);
        let (line, column) = if e.span().is_some() {
            line_col(text, span.start)
        } else {
            (0, 0)
        };
        let mut message = short_numbers(e.message().trim());
        if message == "duplicate key" {
            // toml names no key: the span does
            let key = text.get(span.clone()).unwrap_or("").trim();
            if !key.is_empty() {
                message = format!(
                    "duplicate key {key:?}: a key or table may be given only once per table"
                );
            }
        }
        PlanError {
            file: file.to_string(),
            line,
            column,
            message,
        }
    })?;
    let traces = Traces::new(file);
    let plan = resolve(&ctx, &traces, &raw, profile)?;
    if profile == Profile::Full && raw.quick.is_some() {
        // the quick profile's mistakes are found now, not on the first run with --quick
        resolve(&ctx, &traces, &raw, Profile::Quick)?;
    }
    Ok(plan)
}

/// The plan of one profile, checked, from its parsed TOML.
fn resolve(ctx: &Ctx, traces: &Traces, raw: &RawPlan, profile: Profile) -> Result<Plan, PlanError> {
    let file = ctx.file;
    let name = raw.name.get_ref().trim().to_string();
    if name.is_empty()
        || name.starts_with('.')
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
    {
        return Err(ctx.err(
            raw.name.span(),
            format!(
                "name = {:?}: allowed: letters, digits, '-', '_' and '.', not first (it names \
                 the results directory, results/NAME)",
                raw.name.get_ref()
            ),
        ));
    }
    let mut iterations = raw.iterations.clone();
    let mut workload_table = raw.workload.get_ref().clone();
    if let (Profile::Quick, Some(q)) = (profile, &raw.quick) {
        if let Some(i) = &q.iterations {
            iterations = i.clone();
        }
        if let Some(s) = &q.sizes {
            let vals = s.get_ref().iter().map(|v| v.get_ref().clone()).collect();
            workload_table.insert(
                Spanned::new(s.span(), "sizes".to_string()),
                Spanned::new(s.span(), toml::Value::Array(vals)),
            );
        }
        if let Some(w) = &q.workload {
            for (k, v) in w {
                workload_table.insert(k.clone(), v.clone());
            }
        }
    }
    let (iterations, adaptive) = parse_iterations(ctx, &iterations)?;
    let seed = match &raw.seed {
        Some(s) if *s.get_ref() < 0 => {
            return Err(ctx.err(s.span(), "seed: allowed: a number >= 0"));
        }
        Some(s) => *s.get_ref() as u64,
        None => 1,
    };
    let trial_timeout = match &raw.trial_timeout {
        Some(t) => Some(
            units::parse_duration(t.get_ref())
                .map_err(|e| ctx.err(t.span(), format!("trial-timeout: {e}")))?,
        ),
        None => None,
    };
    let (workload_kind, workload, sizes) =
        parse_workload(ctx, raw.workload.span(), &workload_table)?;

    let base = link_table(ctx, &raw.network)?;
    let mut conditions = Vec::new();
    for (cname, t) in &raw.conditions {
        let own = link_table(ctx, t)?;
        let c = resolve_condition(
            ctx,
            traces,
            cname.get_ref().clone(),
            merge(&base, &own),
            cname.span(),
        )?;
        conditions.push(c);
    }
    if !raw.matrix.is_empty() {
        let mut axes = Vec::new();
        for (k, vals) in &raw.matrix {
            if !is_link_key(k.get_ref()) {
                return Err(ctx.err(
                    k.span(),
                    format!(
                        "matrix: unknown link key {:?}; {}",
                        k.get_ref(),
                        link_keys_allowed()
                    ),
                ));
            }
            if vals.get_ref().is_empty() {
                return Err(ctx.err(vals.span(), "matrix: give at least one value"));
            }
            let vs = vals
                .get_ref()
                .iter()
                .map(|v| Ok((scalar(ctx, v)?, v.span())))
                .collect::<Result<Vec<_>, PlanError>>()?;
            axes.push((k.get_ref().clone(), vs));
        }
        // counted before they are made: a few short lists can multiply into more conditions
        // than memory holds
        let combinations = axes
            .iter()
            .fold(1u64, |n, (_, vs)| n.saturating_mul(vs.len() as u64));
        if combinations > MAX_TRIALS {
            return Err(ctx.err(
                0..0,
                format!(
                    "matrix: {combinations} combinations of its values, each a condition; \
                     allowed: at most {} trials in a plan: fewer values per key, or several \
                     plans (each into its own --out directory)",
                    MAX_TRIALS
                ),
            ));
        }
        // every combination, the first key varying slowest
        let mut combos: Vec<Vec<(String, String, std::ops::Range<usize>)>> = vec![Vec::new()];
        for (k, vs) in &axes {
            combos = combos
                .into_iter()
                .flat_map(|c| {
                    vs.iter().map(move |(v, s)| {
                        let mut c = c.clone();
                        c.push((k.clone(), v.clone(), s.clone()));
                        c
                    })
                })
                .collect();
        }
        for combo in combos {
            let cname = combo
                .iter()
                .map(|(k, v, _)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(" ");
            let at = combo[0].2.clone();
            conditions.push(resolve_condition(
                ctx,
                traces,
                cname,
                merge(&base, &combo),
                at,
            )?);
        }
    }
    if conditions.is_empty() {
        // no conditions: [network] alone is the one condition
        let at = 0..0;
        conditions.push(resolve_condition(
            ctx,
            traces,
            "network".into(),
            base.clone(),
            at,
        )?);
    }
    bases(&mut conditions, &base);
    for (i, c) in conditions.iter().enumerate() {
        if conditions[..i].iter().any(|o| o.name == c.name) {
            return Err(PlanError {
                file: file.into(),
                line: 0,
                column: 0,
                message: format!("condition {:?} is defined twice", c.name),
            });
        }
    }

    if trial_timeout.is_none() && workload.is_requests() {
        // a trial that cannot end in a sensible time (rate = "1bit") is refused now, rather
        // than holding a worker for days
        let largest = sizes.iter().copied().max().unwrap_or(0);
        for c in &conditions {
            // a trace carries at its mean rate
            let trace_bps = [&c.link.up, &c.link.down]
                .iter()
                .filter_map(|d| d.trace.as_ref().map(|t| t.mean_bps().max(1.0) as u64))
                .min();
            let Some(bps) = c.rate_bps().into_iter().chain(trace_bps).min() else {
                continue;
            };
            let ideal = Duration::from_secs_f64(largest as f64 * 8.0 / bps as f64);
            if ideal > MAX_IDEAL_TRANSFER {
                return Err(PlanError {
                    file: file.into(),
                    line: 0,
                    column: 0,
                    message: format!(
                        "condition {:?}: at {} a trial's {} would take {:.0} s to carry; \
                         allowed: conditions whose rate carries the plan's largest size within \
                         {} s (give a faster rate, smaller sizes, or set trial-timeout to accept \
                         long trials)",
                        c.name,
                        quiclab_link::Rate::from_bps(bps),
                        quiclab_model::units::size(largest),
                        ideal.as_secs_f64(),
                        MAX_IDEAL_TRANSFER.as_secs()
                    ),
                });
            }
        }
    }

    let interleave = match &raw.interleave {
        None => None,
        Some(name) => {
            let names = || {
                conditions
                    .iter()
                    .map(|c| format!("{:?}", c.name))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            let Some(i) = conditions.iter().position(|c| c.name == *name.get_ref()) else {
                return Err(ctx.err(
                    name.span(),
                    format!(
                        "interleave: no condition {:?}; allowed: one of the plan's conditions: {}",
                        name.get_ref(),
                        names()
                    ),
                ));
            };
            if conditions.len() < 2 {
                return Err(ctx.err(
                    name.span(),
                    format!(
                        "interleave = {:?}: it runs before every other condition, and the plan \
                         has no other; allowed: a condition of a plan with two or more",
                        name.get_ref()
                    ),
                ));
            }
            Some(i)
        }
    };

    if raw.arms.get_ref().is_empty() {
        return Err(ctx.err(raw.arms.span(), "arms: give at least one arm"));
    }
    let mut arms = Vec::new();
    let workload_keys = WorkloadKeys {
        ctx,
        at: raw.workload.span(),
        table: &workload_table,
    };
    for (aname, t) in raw.arms.get_ref() {
        // the stacks' own refusals first: they name what offers the key
        let arm = parse_arm(ctx, aname, t, workload_kind)?;
        workload_kind.check_arm(&workload_keys, aname.get_ref(), t)?;
        // what the workload as set asks of both stacks besides its kind (e.g. a response
        // delay: the client passes it, the server honours it)
        if let Some(c) = workload_kind.needs_also(&workload) {
            for (s, server) in [(arm.client_stack, false), (arm.server_stack, true)] {
                stacks::offers(s, c, server).map_err(|e| {
                    ctx.err(raw.workload.span(), format!("arm {:?}: {e}", arm.name))
                })?;
            }
        }
        arms.push(arm);
    }
    let mut comparisons = Vec::new();
    for c in &raw.compare {
        for side in [&c.a, &c.b] {
            known_arm(ctx, &arms, "compare", side)?;
        }
        if c.a.get_ref() == c.b.get_ref() {
            return Err(ctx.err(c.b.span(), "compare: a and b must be different arms"));
        }
        comparisons.push((c.a.get_ref().clone(), c.b.get_ref().clone()));
    }
    let planted = planted(ctx, &raw.planted, &arms, &conditions, &mut comparisons)?;
    if let Some(span) = adaptive.as_ref().map(|_| raw.iterations.span()) {
        if !workload.is_requests() {
            return Err(ctx.err(
                span,
                format!(
                    "iterations = {{ min, max, ci }}: adaptive iterations compare times to last \
                     byte, which the {} workload does not measure; give a number of iterations",
                    workload.kind()
                ),
            ));
        }
        if interleave.is_some() {
            return Err(ctx.err(
                span,
                "iterations = { min, max, ci }: adaptive iterations and `interleave` cannot be \
                 combined (the interleaved condition's trials belong to every other condition); \
                 give a number of iterations",
            ));
        }
    }
    let cells = match &raw.cells {
        None => None,
        Some(v) => planted_cells(
            ctx,
            v,
            &planted,
            &arms,
            &conditions,
            interleave.is_some() || adaptive.is_some(),
        )?,
    };
    let plan = Plan {
        name,
        description: raw.description.trim().to_string(),
        source: file.to_string(),
        profile,
        iterations,
        adaptive,
        seed,
        workload,
        sizes,
        conditions,
        interleave,
        arms,
        comparisons,
        planted,
        trial_timeout,
        cells,
    };
    let trials = plan.trial_count();
    if trials > MAX_TRIALS {
        return Err(PlanError {
            file: file.into(),
            line: 0,
            column: 0,
            message: format!(
                "{} profile: {} iterations x {} conditions x {} sizes x {} arms = {trials} \
                 trials; allowed: at most {} in a plan: split it into several plans (e.g. one \
                 per condition or arm, each into its own --out directory) or run fewer \
                 iterations",
                profile.name(),
                plan.iterations,
                plan.conditions.len(),
                plan.sizes.len(),
                plan.arms.len(),
                MAX_TRIALS
            ),
        });
    }
    Ok(plan)
}

/// `cells = "all"` (`None`: every arm in every condition) or `"planted"`: the (arm, condition)
/// cells the `[[planted]]` checks compare, in arm order, each once.
fn planted_cells(
    ctx: &Ctx,
    v: &Spanned<String>,
    planted: &[quiclab_model::campaign::Planted],
    arms: &[Arm],
    conditions: &[Condition],
    interleaved_or_adaptive: bool,
) -> Result<Option<Vec<(usize, usize)>>, PlanError> {
    let err = |m: &str| Err(ctx.err(v.span(), m.to_string()));
    match v.get_ref().as_str() {
        "all" => return Ok(None),
        "planted" => {}
        other => {
            return Err(ctx.err(
                v.span(),
                format!(
                    "cells = {other:?}: allowed: \"all\" (every arm in every condition, the \
                     default) or \"planted\" (only the cells the [[planted]] checks compare)"
                ),
            ));
        }
    }
    if planted.is_empty() {
        return err(
            "cells = \"planted\": the plan plants nothing; give [[planted]] entries, or leave \
             cells out to run every arm in every condition",
        );
    }
    if interleaved_or_adaptive {
        return err(
            "cells = \"planted\" cannot be combined with interleave or adaptive iterations \
             (both need every arm of a condition); leave cells out",
        );
    }
    let names: Vec<&str> = arms.iter().map(|a| a.name.as_str()).collect();
    let conds: Vec<(&str, Option<&str>)> = conditions
        .iter()
        .map(|c| (c.name.as_str(), c.base.map(|b| conditions[b].name.as_str())))
        .collect();
    let mut cells: Vec<(usize, usize)> = planted
        .iter()
        .flat_map(|p| p.cells(&names, &conds))
        .flat_map(|((a, b), (ca, cb))| [(a, ca), (b, cb)])
        .collect();
    cells.sort_unstable();
    cells.dedup();
    Ok(Some(cells))
}

/// `name` is one of the plan's arms, or an error at it, after `what` ("compare"), naming the
/// arms there are.
fn known_arm(ctx: &Ctx, arms: &[Arm], what: &str, name: &Spanned<String>) -> Result<(), PlanError> {
    if arms.iter().any(|a| a.name == *name.get_ref()) {
        return Ok(());
    }
    let names: Vec<_> = arms.iter().map(|a| a.name.as_str()).collect();
    Err(ctx.err(
        name.span(),
        format!(
            "{what}: unknown arm {:?}; the arms are: {}",
            name.get_ref(),
            names.join(", ")
        ),
    ))
}

/// The plan's `[[planted]]` causes, checked: a known pair of different arms (added to the
/// comparisons when not there) or a condition with a base, and components by name.
fn planted(
    ctx: &Ctx,
    raw: &[raw::RawPlanted],
    arms: &[Arm],
    conditions: &[Condition],
    comparisons: &mut Vec<(String, String)>,
) -> Result<Vec<quiclab_model::campaign::Planted>, PlanError> {
    use quiclab_model::budget::Component;
    use quiclab_model::campaign::{Comparison, Planted};
    let names: Vec<&str> = Component::ALL.iter().map(|c| c.name()).collect();
    let allowed = format!(
        "allowed: \"nothing\", or one or a list of: {}",
        names.join(", ")
    );
    let mut out = Vec::new();
    for p in raw {
        let at = p.cause.span();
        let words: Vec<&str> = match p.cause.get_ref() {
            toml::Value::String(s) => vec![s.as_str()],
            toml::Value::Array(a) => a
                .iter()
                .map(|v| {
                    v.as_str()
                        .ok_or_else(|| ctx.err(at.clone(), format!("planted: cause: {allowed}")))
                })
                .collect::<Result<_, _>>()?,
            _ => return Err(ctx.err(at, format!("planted: cause: {allowed}"))),
        };
        let causes: Vec<Component> = if words == ["nothing"] {
            Vec::new()
        } else {
            words
                .iter()
                .map(|w| {
                    Component::ALL
                        .into_iter()
                        .find(|c| c.name() == *w)
                        .ok_or_else(|| {
                            ctx.err(at.clone(), format!("planted: cause {w:?}: {allowed}"))
                        })
                })
                .collect::<Result<_, _>>()?
        };
        if causes.is_empty() && words != ["nothing"] {
            return Err(ctx.err(at, format!("planted: cause: {allowed}")));
        }
        let known = |c: &Spanned<String>| -> Result<&Condition, PlanError> {
            if let Some(cond) = conditions.iter().find(|x| x.name == *c.get_ref()) {
                return Ok(cond);
            }
            let names: Vec<_> = conditions.iter().map(|c| c.name.as_str()).collect();
            Err(ctx.err(
                c.span(),
                format!(
                    "planted: unknown condition {:?}; the conditions are: {}",
                    c.get_ref(),
                    names.join(", ")
                ),
            ))
        };
        let entry = match (&p.a, &p.b, &p.condition) {
            (Some(a), Some(b), None) => {
                let within = match &p.within {
                    Some(w) => Some(known(w)?.name.clone()),
                    None => None,
                };
                for side in [a, b] {
                    known_arm(ctx, arms, "planted", side)?;
                }
                if a.get_ref() == b.get_ref() {
                    return Err(ctx.err(b.span(), "planted: a and b must be different arms"));
                }
                if let Some(list) = &p.arms {
                    return Err(ctx.err(
                        list.span(),
                        "planted: arms: only with condition (a and b name the arms)",
                    ));
                }
                let pair = (a.get_ref().clone(), b.get_ref().clone());
                if !comparisons.contains(&pair) {
                    comparisons.push(pair.clone());
                }
                Planted {
                    arms: Some(Comparison {
                        a: pair.0,
                        b: pair.1,
                    }),
                    condition: None,
                    within,
                    for_arms: Vec::new(),
                    causes,
                }
            }
            (None, None, Some(c)) => {
                let cond = known(c)?;
                if let Some(w) = &p.within {
                    return Err(ctx.err(
                        w.span(),
                        "planted: in: only with a and b (a planted condition is checked for \
                         every arm)",
                    ));
                }
                if cond.base.is_none() {
                    return Err(ctx.err(
                        c.span(),
                        format!(
                            "planted: condition {:?} has no base (a condition of the same path \
                             without its impairment) to be compared against",
                            c.get_ref()
                        ),
                    ));
                }
                let mut for_arms = Vec::new();
                for name in p.arms.iter().flat_map(|l| l.get_ref()) {
                    known_arm(ctx, arms, "planted: arms", name)?;
                    for_arms.push(name.get_ref().clone());
                }
                Planted {
                    arms: None,
                    condition: Some(c.get_ref().clone()),
                    within: None,
                    for_arms,
                    causes,
                }
            }
            _ => {
                return Err(ctx.err(
                    at,
                    "planted: give a and b (a control arm and the arm with the cause), or \
                     condition (one with a base), not both",
                ));
            }
        };
        out.push(entry);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plans_that_once_passed_wrongly_are_refused_saying_what_is_allowed() {
        let base = "name = \"p\"\niterations = 1\n[workload]\nkind = \"single-object\"\n\
                    sizes = [\"10KB\"]\n[arms.h2]\nhttp = \"2\"\n";
        let trace = std::env::temp_dir().join(format!("quiclab-plan-{}.trace", std::process::id()));
        std::fs::write(&trace, "1\n").unwrap();
        let rate_and_trace = format!("[network]\nrate = \"10mbit\"\ntrace = {trace:?}\n");
        // two 1500-byte opportunities every 100,000 s (0.24 bit/s, counted as 1): 10 KB would
        // take 80,000 s and more
        let slow_trace =
            std::env::temp_dir().join(format!("quiclab-plan-slow-{}.trace", std::process::id()));
        std::fs::write(&slow_trace, "1\n100000000\n").unwrap();
        let slow_trace_keys = format!("[network]\ntrace = {slow_trace:?}\n");
        let values: Vec<String> = (1..=20).map(|v| format!("\"{v}ms\"")).collect();
        let huge_matrix = format!(
            "[matrix]\n{}",
            [
                "delay",
                "jitter",
                "up-delay",
                "down-delay",
                "up-jitter",
                "down-jitter",
                "reorder-delay"
            ]
            .iter()
            .map(|k| format!("{k} = [{}]\n", values.join(",")))
            .collect::<String>()
        );
        for (extra, name, wanted) in [
            ("", "..", "name = \"..\": allowed: letters"),
            ("", ".hidden", "not first"),
            (
                "[network]\nrate = \"1bit\"\n",
                "p",
                "would take 80000 s to carry",
            ),
            (
                "[network]\ndelay = \"86400s\"\n",
                "p",
                "delay = \"86400s\": allowed: 0 to 10s",
            ),
            (
                "[network]\njitter = \"60min\"\n",
                "p",
                "jitter = \"60min\": allowed: 0 to 10s",
            ),
            ("[network]\nrate = \"0\"\n", "p", "is no rate"),
            (
                rate_and_trace.as_str(),
                "p",
                "rate = \"10mbit\": a rate and a trace both set",
            ),
            (
                "[network]\ntrace = \"/dev/zero\"\n",
                "p",
                "not a regular file",
            ),
            (slow_trace_keys.as_str(), "p", "would take 80000 s to carry"),
            // the quick profile's mistake, found without --quick
            (
                "[quick]\niterations = 0\n",
                "p",
                "iterations = 0: allowed: 1 to 100000",
            ),
            (
                "[arms.h2b]\nhttp = \"2\"\nresume = true\n",
                "p",
                "no session to resume",
            ),
            (
                "[network]\ndelay = \"1ms\"\n[network]\n",
                "p",
                "duplicate key \"network\"",
            ),
            // 20^7 combinations (1.28e9): refused before any is made
            (huge_matrix.as_str(), "p", "1280000000 combinations"),
        ] {
            let text = format!("{}{extra}", base.replace("\"p\"", &format!("{name:?}")));
            let e = parse(&text, "t.toml", Profile::Full)
                .expect_err(extra)
                .to_string();
            assert!(e.contains(wanted), "{extra:?} / {name:?}: {e}");
            // the offending line is named (line 0: a finding about the plan as a whole)
            assert!(e.starts_with("t.toml"), "{e}");
        }
        // toml spells a float out in full: 309 digits for 1e308, cut short
        let e = parse(&base.replace("\"p\"", "1e308"), "t.toml", Profile::Full)
            .unwrap_err()
            .to_string();
        assert!(e.contains("`100…000 (309 digits).0`"), "{e}");
        assert!(e.len() < 200, "{e}");
        // the same rate with trial-timeout set: long trials accepted knowingly
        let slow = format!("trial-timeout = \"1000min\"\n{base}[network]\nrate = \"100bit\"\n");
        parse(&slow, "t.toml", Profile::Full).unwrap();
        let _ = std::fs::remove_file(&trace);
        let _ = std::fs::remove_file(&slow_trace);
        // 100000 iterations x 11 conditions: over the limit, counted, not expanded
        let many = base.replace("iterations = 1", "iterations = 100000")
            + "[matrix]\ndelay = [\"1ms\",\"2ms\",\"3ms\",\"4ms\",\"5ms\",\"6ms\",\"7ms\",\
               \"8ms\",\"9ms\",\"10ms\",\"11ms\"]\n";
        let e = parse(&many, "t.toml", Profile::Full)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("= 1100000 trials; allowed: at most 1000000"),
            "{e}"
        );
        let fewer = many.replace("100000", "90000");
        let p = parse(&fewer, "t.toml", Profile::Full).unwrap();
        assert_eq!(p.trial_count(), 990_000);
    }

    #[test]
    fn trace_files_are_found_beside_the_plan_and_read_once() {
        let dir = std::env::temp_dir().join(format!("quiclab-plan-trace-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("t.trace"), "1\n2\n3\n").unwrap();
        let plan = dir.join("plan.toml");
        let text = "name = \"p\"\niterations = 1\n[workload]\nkind = \"single-object\"\n\
                    sizes = [\"10KB\"]\n[arms.h2]\nhttp = \"2\"\n[network]\ntrace = \"t.trace\"\n\
                    [conditions.a]\ndelay = \"1ms\"\n[conditions.b]\ndelay = \"2ms\"\n";
        // parsed from another working directory: the plan's own directory counts
        let p = parse(text, plan.to_str().unwrap(), Profile::Full).unwrap();
        let traces: Vec<&quiclab_link::Trace> = p
            .conditions
            .iter()
            .flat_map(|c| [&c.link.up, &c.link.down])
            .map(|d| d.trace.as_ref().expect("a trace"))
            .collect();
        assert_eq!(traces.len(), 4);
        assert!(traces.iter().all(|t| t.opportunities_per_period() == 3));
        assert!(
            traces.windows(2).all(|w| w[0].shares_data(w[1])),
            "one parsed trace for every condition and direction"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    const GOOD: &str = r#"
name = "t"
iterations = 4
seed = 9
[quick]
iterations = 2
[workload]
kind = "single-object"
sizes = ["100kb", 1000000]
[network]
rate = "10mbit"
delay = "10ms"
[conditions.base]
[conditions."loss 1%"]
loss = "1%"
[conditions.slow]
delay = "35ms"
[matrix]
up-loss = ["0%", "2%"]
mtu = [1400]
[arms.h2]
http = "2"
tcp-cc = "cubic"
[arms.h3]
quic-cc = "bbr"
http = "3"
[[compare]]
a = "h2"
b = "h3"
"#;

    #[test]
    fn adaptive_iterations_are_a_min_a_max_and_a_target_or_a_clear_error() {
        let adaptive = GOOD.replacen(
            "iterations = 4",
            "iterations = { min = 3, max = 20, ci = \"2%\" }",
            1,
        );
        let p = parse(&adaptive, "t.toml", Profile::Full).unwrap();
        assert_eq!(p.iterations, 20, "the most iterations are expanded");
        assert_eq!(
            p.adaptive,
            Some(AdaptiveIterations {
                min: 3,
                max: 20,
                ci: 0.02
            })
        );
        // the quick profile's number replaces it
        let q = parse(&adaptive, "t.toml", Profile::Quick).unwrap();
        assert_eq!((q.iterations, q.adaptive), (2, None));
        assert_eq!(parse(GOOD, "t.toml", Profile::Full).unwrap().adaptive, None);
        for (bad, says) in [
            (
                "{ min = 5, max = 3, ci = \"2%\" }",
                "min = 5 is above max = 3",
            ),
            ("{ min = 1, max = 3, ci = \"2%\" }", "min = 1"),
            ("{ min = 2, max = 3 }", "ci is missing"),
            ("{ min = 2, max = 3, ci = \"60%\" }", "ci = \"60%\""),
            ("{ min = 2, max = 3, ci = \"1e-30%\" }", "ci = \"1e-30%\""),
            ("{ min = 2, max = 3, ci = \"0.09%\" }", "ci from 0.1%"),
            ("{ min = 2, max = 3, ci = 2 }", "ci = 2"),
            (
                "{ min = 2, max = 3, ci = \"2%\", step = 1 }",
                "unknown key `step`",
            ),
            ("\"many\"", "iterations = \"many\""),
        ] {
            let e = broken("iterations = 4", &format!("iterations = {bad}"));
            assert!(e.message.contains(says), "{bad}: {e}");
            assert!(e.message.contains("min = N, max = N"), "{bad}: {e}");
            assert_eq!(e.line, line_of("iterations = 4", GOOD), "{bad}: {e}");
        }
        // the figure compared is a time to last byte: not every workload has one
        let bulk = "name = \"t\"\niterations = { min = 2, max = 4, ci = \"5%\" }\n\
             [workload]\nkind = \"bulk\"\nconnections = [1]\nduration = \"1s\"\n\
             [conditions.d]\ndirect = true\nmtu = 1500\n[arms.h2]\nhttp = \"2\"\n";
        let e = parse(bulk, "t.toml", Profile::Full).unwrap_err();
        assert!(e.message.contains("bulk workload does not measure"), "{e}");
    }

    #[test]
    fn a_good_plan_resolves_conditions_arms_and_profiles() {
        let p = parse(GOOD, "t.toml", Profile::Full).unwrap();
        assert_eq!((p.iterations, p.seed), (4, 9));
        assert_eq!(p.sizes, vec![100_000, 1_000_000]);
        let names: Vec<_> = p.conditions.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "base",
                "loss 1%",
                "slow",
                "up-loss=0% mtu=1400",
                "up-loss=2% mtu=1400"
            ]
        );
        // [network] applies everywhere; a condition's own key replaces it
        assert_eq!(p.conditions[1].link.down.delay, Duration::from_millis(10));
        assert_eq!(p.conditions[1].link.up.loss, 0.01);
        assert_eq!(p.conditions[2].link.min_rtt(), Duration::from_millis(70));
        assert_eq!(p.conditions[4].link.up.loss, 0.02);
        assert_eq!(p.conditions[4].link.down.loss, 0.0);
        assert_eq!(p.conditions[4].link.up.mtu, Some(1400));
        assert_eq!(p.conditions[0].rate_bps(), Some(10_000_000));
        assert_eq!(
            p.arms[0].server_knobs(),
            [("tcp-cc".to_string(), "cubic".to_string())]
        );
        assert_eq!(p.arms[1].client_knobs(), [("quic-cc".into(), "bbr".into())]);
        assert_eq!(p.arms[1].caveats.len(), 1, "experimental BBR is labelled");
        assert_eq!(p.comparisons, [("h2".to_string(), "h3".to_string())]);
        let q = parse(GOOD, "t.toml", Profile::Quick).unwrap();
        assert_eq!(q.iterations, 2);
    }

    #[test]
    fn an_impaired_condition_s_base_is_the_same_path_unimpaired() {
        let text = "name = \"b\"\niterations = 1\n[workload]\nkind = \"single-object\"\nsizes = [\"1mb\"]\n\
                    [network]\nrate = \"10mbit\"\ndelay = \"10ms\"\nqueue = \"100ms\"\n\
                    [conditions.base]\n[conditions.\"loss 1%\"]\nloss = \"1%\"\n\
                    [conditions.\"rtt +50ms\"]\ndelay = \"35ms\"\n\
                    [conditions.\"base, queue 20ms\"]\nqueue = \"20ms\"\n\
                    [conditions.\"loss 1%, queue 20ms\"]\nqueue = \"20ms\"\nloss = \"1%\"\n\
                    [conditions.\"up loss, slow\"]\nrate = \"1mbit\"\nup-loss = \"1%\"\n\
                    [arms.h2]\nhttp = \"2\"\n";
        let p = parse(text, "t.toml", Profile::Full).unwrap();
        let bases: Vec<(&str, Option<&str>)> = p
            .conditions
            .iter()
            .map(|c| {
                let base = c.base.map(|b| p.conditions[b].name.as_str());
                (c.name.as_str(), base)
            })
            .collect();
        assert_eq!(
            bases,
            [
                ("base", None),
                ("loss 1%", Some("base")),
                ("rtt +50ms", Some("base")),
                ("base, queue 20ms", None),
                ("loss 1%, queue 20ms", Some("base, queue 20ms")),
                // no unimpaired condition at 1 Mbit/s
                ("up loss, slow", None),
            ]
        );
    }

    #[test]
    fn workload_kinds_take_their_own_keys_and_quick_overrides() {
        let repeat = GOOD.replace(
            "kind = \"single-object\"",
            "kind = \"repeat\"\nrequests = 25",
        );
        let p = parse(&repeat, "t.toml", Profile::Full).unwrap();
        assert_eq!(p.workload, Workload::Repeat { requests: 25 });
        assert_eq!(p.sizes, vec![100_000, 1_000_000]);
        let quick = repeat.replace("[quick]", "[quick.workload]\nrequests = 5\n[quick]");
        let q = parse(&quick, "t.toml", Profile::Quick).unwrap();
        assert_eq!(
            (q.workload, q.iterations),
            (Workload::Repeat { requests: 5 }, 2)
        );
        let f = parse(&quick, "t.toml", Profile::Full).unwrap();
        assert_eq!(f.workload, Workload::Repeat { requests: 25 });

        let seg = GOOD.replace(
            "kind = \"single-object\"\nsizes = [\"100kb\", 1000000]",
            "kind = \"segments\"\nsegments = 15\nsegment-min = \"3.6MB\"\nsegment-max = \"5MB\"",
        );
        let p = parse(&seg, "t.toml", Profile::Full).unwrap();
        assert_eq!(
            p.workload,
            Workload::Segments {
                count: 15,
                min_bytes: 3_600_000,
                max_bytes: 5_000_000,
                stream_rate_bps: 6_000_000,
                player_buffer_ms: 10_000,
            }
        );
        assert_eq!(p.sizes, vec![4_300_000]);
        // the playback estimate's keys
        let player = seg.replace(
            "segments = 15",
            "segments = 15\nstream-rate = \"3mbit\"\nplayer-buffer = \"4.5s\"",
        );
        let p = parse(&player, "t.toml", Profile::Full).unwrap();
        assert!(matches!(
            p.workload,
            Workload::Segments {
                stream_rate_bps: 3_000_000,
                player_buffer_ms: 4_500,
                ..
            }
        ));
        for (bad, what) in [("\"3mb\"", "rate"), ("\"10bit\"", "1kbit or more")] {
            let text = player.replace("\"3mbit\"", bad);
            let e = parse(&text, "t.toml", Profile::Full).unwrap_err();
            assert!(
                e.message.contains("stream-rate") && e.message.contains(what),
                "{e}"
            );
            assert_eq!(e.line, line_of("stream-rate", &text), "{e}");
        }
        let e = parse(
            &player.replace("\"4.5s\"", "\"11min\""),
            "t.toml",
            Profile::Full,
        )
        .unwrap_err();
        assert!(e.message.contains("0 to 10min"), "{e}");

        // a key of another kind, a missing key, an unknown kind, an inverted range
        let e = parse(
            &seg.replace("segments = 15", "sizes = [1]"),
            "t.toml",
            Profile::Full,
        )
        .unwrap_err();
        assert!(
            e.message.contains("\"sizes\"") && e.message.contains("segment-min"),
            "{e}"
        );
        assert_eq!(
            e.line,
            line_of("sizes = [1]", &seg.replace("segments = 15", "sizes = [1]"))
        );
        let e = parse(
            &repeat.replace("requests = 25\n", ""),
            "t.toml",
            Profile::Full,
        )
        .unwrap_err();
        assert!(e.message.contains("needs requests"), "{e}");
        let e = parse(
            &repeat.replace("requests = 25", "requests = 0"),
            "t.toml",
            Profile::Full,
        )
        .unwrap_err();
        assert!(e.message.contains("1 to 1000"), "{e}");
        let e = broken("kind = \"single-object\"", "kind = \"webpages\"");
        assert!(e.message.contains("\"segments\""), "{e}");
        let e = parse(&seg.replace("\"5MB\"", "\"1MB\""), "t.toml", Profile::Full).unwrap_err();
        assert!(e.message.contains("below segment-min"), "{e}");
    }

    #[test]
    fn interleave_names_a_condition_of_a_plan_with_others() {
        let p = parse(GOOD, "t.toml", Profile::Full).unwrap();
        assert_eq!(p.interleave, None);
        let text = GOOD.replace("seed = 9", "seed = 9\ninterleave = \"base\"");
        let p = parse(&text, "t.toml", Profile::Full).unwrap();
        assert_eq!(p.interleave, Some(0));
        // a matrix condition can be the baseline too
        let text = GOOD.replace("seed = 9", "seed = 9\ninterleave = \"up-loss=0% mtu=1400\"");
        assert_eq!(
            parse(&text, "t.toml", Profile::Full).unwrap().interleave,
            Some(3)
        );

        let e = broken("seed = 9", "seed = 9\ninterleave = \"normal\"");
        assert_eq!(e.line, line_of("seed = 9", GOOD) + 1, "{e}");
        assert_eq!(e.column, 14, "{e}");
        assert!(
            e.message.contains("no condition \"normal\"")
                && e.message.contains("\"base\", \"loss 1%\""),
            "{e}"
        );
        let e = broken("seed = 9", "seed = 9\ninterleave = 3");
        assert_eq!(e.line, line_of("seed = 9", GOOD) + 1, "{e}");
        assert!(e.message.contains("string"), "{e}");
        // alone, a baseline has nothing to precede
        let alone = GOOD
            .replace("seed = 9", "seed = 9\ninterleave = \"network\"")
            .replace(
                "[conditions.base]\n[conditions.\"loss 1%\"]\nloss = \"1%\"\n[conditions.slow]\ndelay = \"35ms\"\n[matrix]\nup-loss = [\"0%\", \"2%\"]\nmtu = [1400]\n",
                "",
            );
        let e = parse(&alone, "t.toml", Profile::Full).unwrap_err();
        assert!(e.message.contains("no other"), "{e}");
    }

    /// Replaces `from` by `to` in the good plan and returns the error.
    fn broken(from: &str, to: &str) -> PlanError {
        assert!(GOOD.contains(from), "{from}");
        parse(&GOOD.replacen(from, to, 1), "t.toml", Profile::Full).unwrap_err()
    }

    #[test]
    fn bulk_plans_take_connection_counts_and_direct_conditions() {
        let bulk = r#"
name = "b"
iterations = 1
[workload]
kind = "bulk"
connections = [1, 8, 64]
duration = "10s"
[quick.workload]
connections = [1]
duration = "2s"
[conditions.veth]
direct = true
mtu = 9000
[conditions.plain]
direct = true
[conditions.emulated]
rate = "1gbit"
[conditions.fast]
rate = "5gbit"
offloads = true
[arms.h2]
http = "2"
"#;
        let p = parse(bulk, "b.toml", Profile::Full).unwrap();
        let offloads: Vec<_> = p.conditions.iter().map(|c| c.offloads).collect();
        assert_eq!(offloads, [false, false, false, true]);
        // offloads is the condition's, not the link's: the link has the rate alone
        assert_eq!(p.conditions[3].rate_bps(), Some(5_000_000_000));
        assert_eq!(
            p.workload,
            Workload::Bulk {
                duration_ms: 10_000
            }
        );
        assert_eq!(p.sizes, vec![1, 8, 64]);
        let mtus: Vec<_> = p.conditions.iter().map(|c| c.direct_mtu).collect();
        assert_eq!(mtus, [Some(9000), Some(1500), None, None]);
        let q = parse(bulk, "b.toml", Profile::Quick).unwrap();
        assert_eq!(
            (q.workload, q.sizes),
            (Workload::Bulk { duration_ms: 2_000 }, vec![1])
        );
        for (from, to, needle, what) in [
            ("[1, 8, 64]", "[0]", "connections = [", "from 1 to 256"),
            ("[1, 8, 64]", "[1, 1]", "connections = [", "listed twice"),
            ("[1, 8, 64]", "[]", "connections = [", "at least one"),
            ("\"10s\"", "\"500ms\"", "duration = \"500ms", "from 1s"),
            (
                "mtu = 9000",
                "mtu = 9000\ndelay = \"5ms\"",
                "delay = \"5ms",
                "allowed with direct = true: mtu",
            ),
            (
                "direct = true\nmtu",
                "direct = \"yes\"\nmtu",
                "direct = \"yes",
                "true or false",
            ),
            (
                "offloads = true",
                "offloads = 1",
                "offloads = 1",
                "offloads = \"1\": allowed: true or false",
            ),
            (
                "mtu = 9000",
                "mtu = 9000\noffloads = true",
                "offloads = true",
                "offloads does not apply to a direct condition",
            ),
        ] {
            let text = bulk.replacen(from, to, 1);
            let e = parse(&text, "b.toml", Profile::Full).unwrap_err();
            assert!(e.message.contains(what), "{e}");
            assert_eq!(e.line, line_of(needle, &text), "{e}");
        }
    }

    fn line_of(needle: &str, text: &str) -> usize {
        text.lines().position(|l| l.contains(needle)).unwrap() + 1
    }

    #[test]
    fn errors_name_the_line_column_and_what_is_allowed() {
        let e = broken("loss = \"1%\"", "loss = \"1 percent\"");
        assert_eq!(e.line, line_of("loss = \"1%\"", GOOD));
        assert_eq!(e.column, 8, "{e}");
        assert!(e.message.contains("loss") && e.message.contains("%"), "{e}");

        let e = broken("tcp-cc = \"cubic\"", "tcp-cc = \"vegas\"");
        assert!(
            e.message.contains("cubic") && e.message.contains("bbr"),
            "{e}"
        );
        assert_eq!(e.line, line_of("tcp-cc", GOOD));

        let e = broken("b = \"h3\"", "b = \"h4\"");
        assert!(e.message.contains("unknown arm \"h4\""), "{e}");
        assert_eq!(e.line, line_of("b = \"h3\"", GOOD));

        let e = broken("seed = 9", "seed = 9\nsede = 3");
        assert!(e.message.contains("sede"), "{e}");
        assert_eq!(e.line, line_of("seed = 9", GOOD) + 1, "{e}");

        let e = broken("delay = \"35ms\"", "latency = \"35ms\"");
        assert!(
            e.message.contains("delay") && e.message.contains("latency"),
            "{e}"
        );

        let e = broken("quic-cc = \"bbr\"", "tcp-cc = \"bbr\"");
        assert!(e.message.contains("TCP"), "{e}");

        let e = broken("sizes = [\"100kb\", 1000000]", "sizes = [\"100kbit\"]");
        assert!(e.message.contains("size"), "{e}");

        let e = broken("iterations = 4", "iterations = 0");
        assert!(e.message.contains("1 to 100000"), "{e}");

        let e = broken("quic-cc = \"bbr\"", "quic-max-udp-payload = 1100");
        assert!(
            e.message.contains("quic-max-udp-payload = \"1100\"")
                && e.message.contains("1200 to 65527"),
            "{e}"
        );

        // a queue without a rate is an impossible combination, caught with its place
        let e = broken("rate = \"10mbit\"", "queue = \"50ms\"");
        assert!(e.message.contains("queue"), "{e}");

        // the coded transport: its own label, no TCP or QUIC knobs, no resumption
        let coded = GOOD.replace("quic-cc = \"bbr\"\nhttp = \"3\"", "http = \"coded\"");
        let p = parse(&coded, "t.toml", Profile::Full).unwrap();
        assert_eq!(p.arms[1].client_knobs(), []);
        assert_eq!(
            p.arms[1].label,
            "network-coded transport (RaptorQ, goodput-following rate)"
        );
        for (knob, only) in [
            ("tcp-cc = \"cubic\"", "TCP"),
            ("quic-cc = \"cubic\"", "QUIC"),
            // the coded transport has no resumption: the stacks that have it are named
            (
                "resume = true",
                "over TCP (stack \"tcp\"), HTTP/3 over QUIC (stack \"quinn\"), HTTP/3 over \
                 QUIC (stack \"ngtcp2\") and HTTP/3 over QUIC (stack \"quiche\")",
            ),
        ] {
            let e = parse(
                &coded.replace("http = \"coded\"", &format!("http = \"coded\"\n{knob}")),
                "t.toml",
                Profile::Full,
            )
            .unwrap_err();
            assert!(
                e.message.contains("arm \"h3\"") && e.message.contains(only),
                "{e}"
            );
            assert_eq!(e.line, line_of("http = \"coded\"", &coded) + 1, "{e}");
        }
        let e = broken("http = \"3\"", "http = \"4\"");
        assert!(e.message.contains("\"coded\""), "{e}");

        let e = broken("name = \"t\"", "name = \"a/b\"");
        assert_eq!(e.line, 2);
        // TOML syntax errors keep their place too
        let e = broken("iterations = 4", "iterations = = 4");
        assert_eq!(e.line, line_of("iterations = 4", GOOD), "{e}");
        assert!(
            e.to_string().starts_with(&format!("t.toml:{}:", e.line)),
            "{e}"
        );
    }

    #[test]
    fn arms_name_their_stacks_by_http_version_or_by_name() {
        let p = parse(GOOD, "t.toml", Profile::Full).unwrap();
        assert_eq!(p.arms[0].server_stack.name(), "tcp");
        assert_eq!(p.arms[1].client_stack.name(), "quinn");
        // the default stacks' arms are named as they always were: their trial ids stay
        assert_eq!(
            p.arms[1].config(),
            serde_json::json!({"name": "h3", "http": "3", "knobs": [["quic-cc", "bbr"]]})
        );
        // naming the default stack is the same arm, whichever way it is written
        for named in [
            "stack = \"quinn\"",
            "stack = \"quinn\"\nhttp = \"3\"",
            "server-stack = \"quinn\"\nclient-stack = \"quinn\"\nhttp = \"3\"",
        ] {
            let q = parse(
                &GOOD.replace("http = \"3\"", named),
                "t.toml",
                Profile::Full,
            )
            .unwrap();
            assert_eq!(q.arms[1].config(), p.arms[1].config(), "{named}");
            assert_eq!(q.arms[1].label, p.arms[1].label, "{named}");
            assert_eq!(q.arms[1].caveats, p.arms[1].caveats, "{named}");
        }
        // a stack of several versions needs http; an unknown stack is named with the allowed
        let e = broken("http = \"2\"", "stack = \"tcp\"");
        assert!(
            e.message.contains("several HTTP versions") && e.message.contains("\"1.1\" or \"2\""),
            "{e}"
        );
        assert_eq!(e.line, line_of("http = \"2\"", GOOD), "{e}");
        let e = broken("http = \"2\"", "stack = \"nginx\"");
        assert!(
            e.message.contains("no such stack") && e.message.contains("\"quinn\""),
            "{e}"
        );
        // a pair must speak the arm's version at both ends
        let e = broken(
            "http = \"3\"",
            "http = \"3\"\nserver-stack = \"quinn\"\nclient-stack = \"tcp\"",
        );
        assert!(
            e.message.contains("stack \"tcp\" does not carry HTTP/3")
                && e.message.contains("HTTP/1.1 and HTTP/2 over TCP"),
            "{e}"
        );
        assert_eq!(e.line, line_of("http = \"3\"", GOOD) + 2, "{e}");
        let e = broken(
            "http = \"3\"",
            "stack = \"quinn\"\nserver-stack = \"quinn\"",
        );
        assert!(e.message.contains("server-stack and client-stack"), "{e}");
        // a knob belongs to the stacks that take it
        let e = broken("tcp-cc = \"cubic\"", "quic-scheduling = \"fifo\"");
        assert!(
            e.message.contains(
                "quic-scheduling applies to HTTP/3 over QUIC (stack \"quinn\") arms only"
            ),
            "{e}"
        );
    }

    #[test]
    fn an_external_stack_takes_its_own_knobs_and_pairs_with_quinn() {
        // ngtcp2 with its own controller; its label names it
        let p = parse(
            &GOOD.replace(
                "quic-cc = \"bbr\"\nhttp = \"3\"",
                "stack = \"ngtcp2\"\nquic-cc = \"bbr2\"",
            ),
            "t.toml",
            Profile::Full,
        )
        .unwrap();
        assert_eq!(p.arms[1].server_stack.name(), "ngtcp2");
        assert_eq!(p.arms[1].label, "HTTP/3 over QUIC (ngtcp2), bbr2");
        // the trial's identity holds the stack file's digest and its programs'
        let id = p.arms[1].config()["server-stack"]
            .as_str()
            .unwrap()
            .to_string();
        let words: Vec<&str> = id.split(' ').collect();
        assert_eq!(words.len(), 4, "{id}");
        assert_eq!((words[0], words[2]), ("ngtcp2", "programs"), "{id}");
        assert!(words[1].len() == 16 && words[3].len() == 16, "{id}");
        // a value one end's stack does not take is refused naming that end
        let e = broken(
            "quic-cc = \"bbr\"\nhttp = \"3\"",
            "server-stack = \"ngtcp2\"\nclient-stack = \"quinn\"\nhttp = \"3\"\nquic-cc = \"bbr2\"",
        );
        assert!(
            e.message.contains("the client's stack \"quinn\"") && e.message.contains("newreno"),
            "{e}"
        );
        let e = broken(
            "quic-cc = \"bbr\"\nhttp = \"3\"",
            "stack = \"ngtcp2\"\nquic-cc = \"vegas\"",
        );
        assert!(e.message.contains("cubic, reno, bbr, bbr2"), "{e}");
        // a knob it does not take names the knobs it does
        let e = broken(
            "quic-cc = \"bbr\"\nhttp = \"3\"",
            "stack = \"ngtcp2\"\nquic-mtu-discovery = \"on\"",
        );
        assert!(
            e.message
                .contains("stack \"ngtcp2\" takes quic-cc, quic-initial-rtt, quic-gso"),
            "{e}"
        );
    }

    #[test]
    fn a_stack_runs_only_the_workloads_it_supports() {
        let pages = GOOD
            .replace(
                "kind = \"single-object\"\nsizes = [\"100kb\", 1000000]",
                "kind = \"pages\"\npages = [\"small\"]",
            )
            .replace("quic-cc = \"bbr\"\nhttp = \"3\"", "http = \"coded\"");
        let e = parse(&pages, "t.toml", Profile::Full).unwrap_err();
        assert!(
            e.message
                .contains("stack \"coded\" does not run the pages workload"),
            "{e}"
        );
        assert_eq!(e.line, line_of("http = \"coded\"", &pages), "{e}");

        // a browser fetches one object on a new connection, but no series of requests
        let chrome = GOOD.replace(
            "quic-cc = \"bbr\"\nhttp = \"3\"",
            "client-stack = \"chrome\"\nhttp = \"3\"",
        );
        let p = parse(&chrome, "t.toml", Profile::Full).unwrap();
        assert_eq!(p.arms[1].client_stack.name(), "chrome");
        let repeat = chrome.replace(
            "kind = \"single-object\"",
            "kind = \"repeat\"\nrequests = 3",
        );
        let e = parse(&repeat, "t.toml", Profile::Full).unwrap_err();
        assert!(
            e.message.contains(
                "stack \"chrome\" does not run the repeat workload; its workloads: \
                 single-object, pages"
            ),
            "{e}"
        );

        // an external client opens a connection per request: no segments on one connection
        let segments = GOOD
            .replace(
                "kind = \"single-object\"\nsizes = [\"100kb\", 1000000]",
                "kind = \"segments\"\nsegments = 3\nsegment-min = \"1MB\"\nsegment-max = \"2MB\"\n\
                 stream-rate = \"6mbit\"\nplayer-buffer = \"10s\"",
            )
            .replace("quic-cc = \"bbr\"\nhttp = \"3\"", "stack = \"ngtcp2\"");
        let e = parse(&segments, "t.toml", Profile::Full).unwrap_err();
        assert!(
            e.message.contains(
                "stack \"ngtcp2\" does not run the segments workload; its workloads: \
                 single-object, repeat, bulk"
            ),
            "{e}"
        );
        // quiclab's own stacks do
        let own = segments.replace("stack = \"ngtcp2\"", "http = \"3\"");
        parse(&own, "t.toml", Profile::Full).unwrap();
    }

    #[test]
    fn planted_causes_name_known_arms_or_a_condition_with_a_base_and_components_by_name() {
        use quiclab_model::budget::Component;
        let plan = |planted: &str| {
            format!(
                "name = \"p\"\niterations = 2\n[workload]\nkind = \"single-object\"\n\
                 sizes = [\"1mb\"]\n[network]\nrate = \"10mbit\"\ndelay = \"10ms\"\n\
                 [conditions.clean]\n[conditions.outage]\noutage = \"400ms-700ms\"\n\
                 [arms.a]\nhttp = \"2\"\n[arms.b]\nhttp = \"2\"\ngroups = \"p256,p384\"\n\
                 server-groups = \"p384\"\n{planted}"
            )
        };
        let ok = parse(
            &plan(
                "[[planted]]\na = \"a\"\nb = \"b\"\nin = \"clean\"\ncause = \"handshake\"\n\
                 [[planted]]\ncondition = \"outage\"\narms = [\"b\"]\n\
                 cause = [\"loss-recovery-wait\", \"window-after-loss\"]\n\
                 [[planted]]\na = \"a\"\nb = \"b\"\ncause = \"nothing\"\n",
            ),
            "p.toml",
            Profile::Full,
        )
        .unwrap();
        assert_eq!(ok.planted.len(), 3);
        assert_eq!(ok.planted[0].within.as_deref(), Some("clean"));
        assert_eq!(ok.planted[0].causes, [Component::Handshake]);
        assert_eq!(
            ok.planted[1].causes,
            [Component::LossRecoveryWait, Component::WindowAfterLoss]
        );
        assert_eq!(ok.planted[1].condition.as_deref(), Some("outage"));
        assert_eq!(ok.planted[1].for_arms, ["b"]);
        assert!(ok.planted[2].causes.is_empty());
        // a planted pair is compared, once
        assert_eq!(ok.comparisons, [("a".to_string(), "b".to_string())]);
        for (planted, wanted) in [
            (
                "a = \"a\"\nb = \"c\"\ncause = \"handshake\"",
                "planted: unknown arm \"c\"; the arms are: a, b",
            ),
            (
                "a = \"a\"\nb = \"a\"\ncause = \"handshake\"",
                "planted: a and b must be different arms",
            ),
            (
                "condition = \"wet\"\ncause = \"handshake\"",
                "planted: unknown condition \"wet\"; the conditions are: clean, outage",
            ),
            (
                "condition = \"clean\"\ncause = \"overhead\"",
                "planted: condition \"clean\" has no base",
            ),
            (
                "a = \"a\"\nb = \"b\"\ncause = \"slowness\"",
                "planted: cause \"slowness\": allowed: \"nothing\", or one or a list of: \
                 handshake, ramp-up,",
            ),
            ("a = \"a\"\nb = \"b\"\ncause = 3", "planted: cause: allowed"),
            ("a = \"a\"\ncause = \"handshake\"", "planted: give a and b"),
            (
                "a = \"a\"\nb = \"b\"\ncondition = \"outage\"\ncause = \"handshake\"",
                "not both",
            ),
            (
                "condition = \"outage\"\nin = \"clean\"\ncause = \"handshake\"",
                "planted: in: only with a and b",
            ),
            (
                "a = \"a\"\nb = \"b\"\nin = \"wet\"\ncause = \"handshake\"",
                "planted: unknown condition \"wet\"",
            ),
            (
                "condition = \"outage\"\narms = [\"c\"]\ncause = \"handshake\"",
                "planted: arms: unknown arm \"c\"; the arms are: a, b",
            ),
            (
                "a = \"a\"\nb = \"b\"\narms = [\"a\"]\ncause = \"handshake\"",
                "planted: arms: only with condition",
            ),
        ] {
            let e = parse(
                &plan(&format!("[[planted]]\n{planted}\n")),
                "p.toml",
                Profile::Full,
            )
            .unwrap_err();
            assert!(e.message.contains(wanted), "{planted}: {e}");
            assert!(e.line > 14, "{planted}: {e}");
        }
    }

    #[test]
    fn cells_planted_runs_only_the_cells_the_checks_compare() {
        // arms a, b, c; a against b on the clean path, the outage against the clean path for c
        let plan = |cells: &str, planted: &str| {
            format!(
                "name = \"p\"\niterations = 3\n{cells}\n[workload]\nkind = \"single-object\"\n\
                 sizes = [\"1mb\", \"10kb\"]\n[network]\nrate = \"10mbit\"\ndelay = \"10ms\"\n\
                 [conditions.clean]\n[conditions.outage]\noutage = \"400ms-700ms\"\n\
                 [arms.a]\nhttp = \"2\"\n[arms.b]\nhttp = \"3\"\n[arms.c]\nhttp = \"3\"\n\
                 {planted}"
            )
        };
        let planted = "[[planted]]\na = \"a\"\nb = \"b\"\nin = \"clean\"\ncause = \"nothing\"\n\
                       [[planted]]\ncondition = \"outage\"\narms = [\"c\"]\n\
                       cause = \"loss-recovery-wait\"\n";
        let p = parse(
            &plan("cells = \"planted\"", planted),
            "p.toml",
            Profile::Full,
        )
        .unwrap();
        // (a, clean), (b, clean), (c, clean), (c, outage): 4 cells x 2 sizes x 3 iterations
        assert_eq!(p.cells, Some(vec![(0, 0), (1, 0), (2, 0), (2, 1)]));
        assert_eq!(p.trial_count(), 24);
        let specs = crate::expand::expand(&p);
        assert_eq!(specs.len(), 24);
        assert!(specs.iter().all(|s| p.runs(s.arm, s.condition)));
        assert!(!specs.iter().any(|s| s.condition == 1 && s.arm != 2));
        // every arm in every condition: the default, and "all"
        for cells in ["", "cells = \"all\""] {
            let all = parse(&plan(cells, planted), "p.toml", Profile::Full).unwrap();
            assert_eq!((all.cells.clone(), all.trial_count()), (None, 36));
            assert_eq!(crate::expand::expand(&all).len(), 36);
        }
        for (cells, planted, says) in [
            (
                "cells = \"some\"",
                planted,
                "cells = \"some\": allowed: \"all\"",
            ),
            ("cells = \"planted\"", "", "the plan plants nothing"),
            (
                "cells = \"planted\"\ninterleave = \"clean\"",
                planted,
                "cannot be combined with interleave",
            ),
        ] {
            let e = parse(&plan(cells, planted), "p.toml", Profile::Full).unwrap_err();
            assert!(e.message.contains(says), "{cells}: {e}");
            assert_eq!(e.line, 3, "{cells}: {e}");
        }
    }

    /// The command line of `spec`'s client, as a trial of `p` starts it.
    fn client_line(p: &Plan, spec: &crate::expand::TrialSpec) -> String {
        let (_, client) = crate::trial::command_lines(
            std::path::Path::new("quiclab"),
            std::path::Path::new("/d"),
            p,
            spec,
        )
        .unwrap();
        client
    }

    /// `text`'s plan refused with a message that says `says`.
    fn refused(text: &str, says: &str) -> PlanError {
        let e = parse(text, "t.toml", Profile::Full).unwrap_err();
        assert!(e.message.contains(says), "{e}");
        e
    }

    #[test]
    fn a_response_delay_reaches_the_request_and_is_refused_by_stacks_that_cannot_hold_one() {
        let held = GOOD.replace(
            "sizes = [\"100kb\", 1000000]",
            "sizes = [\"100kb\", 1000000]\nresponse-delay = \"50ms\"",
        );
        let p = parse(&held, "t.toml", Profile::Full).unwrap();
        assert_eq!(
            p.workload,
            Workload::SingleObject {
                response_delay_us: 50_000
            }
        );
        // the delay is part of a trial's identity; without it, the ids are those of before
        let plain = parse(GOOD, "t.toml", Profile::Full).unwrap();
        let id = |p: &Plan| crate::expand::expand(p)[0].id.clone();
        assert_ne!(id(&p), id(&plain));
        let client = client_line(&p, &crate::expand::expand(&p)[0]);
        assert!(client.contains("\"response_delay_us\":50000"), "{client}");
        // a server of documents cannot hold a response: refused at the plan, with who can
        let external = held.replace("quic-cc = \"bbr\"\nhttp = \"3\"", "stack = \"ngtcp2\"");
        refused(
            &external,
            "arm \"h3\": stack \"ngtcp2\" cannot have its server hold a response \
             (response-delay); stacks that can: tcp, quinn, tcp-plain, s2n-quic",
        );
        let bad = GOOD.replace(
            "sizes = [\"100kb\", 1000000]",
            "sizes = [\"100kb\"]\nresponse-delay = \"2min\"",
        );
        refused(&bad, "up to 60s");
    }

    #[test]
    fn an_arm_s_response_delay_reaches_its_requests_only_and_needs_a_server_that_holds_one() {
        // the h2 arm's server holds 100 ms, on top of the workload's 50 ms; the h3 arm's, 50
        let held = GOOD
            .replace(
                "sizes = [\"100kb\", 1000000]",
                "sizes = [\"100kb\", 1000000]\nresponse-delay = \"50ms\"",
            )
            .replace(
                "tcp-cc = \"cubic\"\n",
                "tcp-cc = \"cubic\"\nresponse-delay = \"100ms\"\n",
            );
        let p = parse(&held, "t.toml", Profile::Full).unwrap();
        assert_eq!(
            p.arms[0].knobs.last(),
            Some(&("response-delay".to_string(), "100000us".to_string()))
        );
        let specs = crate::expand::expand(&p);
        let asked = |arm: usize| client_line(&p, specs.iter().find(|s| s.arm == arm).unwrap());
        assert!(
            asked(0).contains("\"response_delay_us\":150000"),
            "{}",
            asked(0)
        );
        assert!(
            asked(1).contains("\"response_delay_us\":50000"),
            "{}",
            asked(1)
        );
        // a quinn client of ngtcp2's server would ask a server that does not hold: refused,
        // with the stacks that can
        let mixed = GOOD.replace(
            "quic-cc = \"bbr\"\nhttp = \"3\"",
            "http = \"3\"\nserver-stack = \"ngtcp2\"\nclient-stack = \"quinn\"\n\
             response-delay = \"100ms\"",
        );
        let e = refused(
            &mixed,
            "arm \"h3\": stack \"ngtcp2\" cannot have its server hold a response \
             (response-delay) as a server; stacks that can: tcp, quinn, tcp-plain, s2n-quic",
        );
        assert_eq!(e.line, 28, "{e}");
        // an upload, a page or a bulk transfer has its own timing
        let upload = held.replace("kind = \"single-object\"", "kind = \"upload\"");
        let upload = upload.replace("response-delay = \"50ms\"\n", "");
        refused(
            &upload,
            "response-delay holds the one response of a single-object trial",
        );
        let long = GOOD.replace(
            "tcp-cc = \"cubic\"\n",
            "tcp-cc = \"cubic\"\nresponse-delay = \"2min\"\n",
        );
        refused(&long, "up to 60s");
    }

    const TELEMETRY: &str = r#"
name = "tel"
iterations = 3
[quick]
iterations = 1
[quick.workload]
duration = "5s"
[workload]
kind = "telemetry"
units-per-second = 1000
flush = 10
duration = "10s"
[network]
delay = "25ms"
[conditions.base]
[conditions.lossy]
loss = "2%"
[arms.tcp]
telemetry = "tcp"
tcp-cc = "cubic"
[arms.streams]
telemetry = "quic-streams"
quic-cc = "newreno"
groups = "p256"
"#;

    fn telemetry_broken(from: &str, to: &str) -> PlanError {
        assert!(TELEMETRY.contains(from), "{from}");
        parse(&TELEMETRY.replacen(from, to, 1), "t.toml", Profile::Full).unwrap_err()
    }

    #[test]
    fn telemetry_plans_take_a_mode_per_arm_instead_of_http() {
        let p = parse(TELEMETRY, "t.toml", Profile::Full).unwrap();
        assert_eq!(
            p.workload,
            Workload::Telemetry {
                units_per_second: 1000,
                flush_units: 10,
                duration_ms: 10_000
            }
        );
        // the trial's bytes: 10,000 units of 8
        assert_eq!(p.sizes, [80_000]);
        assert_eq!(p.arms[0].telemetry, Some(Mode::Tcp));
        assert_eq!(
            (p.arms[0].transport(), p.arms[1].transport()),
            (Transport::Tcp, Transport::Quic)
        );
        assert_eq!(p.arms[1].telemetry, Some(Mode::QuicStreams));
        assert_eq!(
            p.arms[1].client_knobs(),
            [
                ("quic-cc".to_string(), "newreno".to_string()),
                ("groups".to_string(), "p256".to_string())
            ]
        );
        assert_eq!(
            p.arms[1].server_knobs(),
            [("quic-cc".to_string(), "newreno".to_string())]
        );
        assert_eq!(
            p.arms[1].label,
            "telemetry over a QUIC stream per flush (quinn), newreno"
        );
        let q = parse(TELEMETRY, "t.toml", Profile::Quick).unwrap();
        assert_eq!(
            (q.workload, q.iterations),
            (
                Workload::Telemetry {
                    units_per_second: 1000,
                    flush_units: 10,
                    duration_ms: 5_000
                },
                1
            )
        );

        let e = telemetry_broken("telemetry = \"tcp\"", "http = \"2\"");
        assert!(
            e.message
                .contains("http does not apply to a telemetry plan")
                && e.message.contains("\"quic-datagrams\""),
            "{e}"
        );
        assert_eq!(e.line, line_of("telemetry = \"tcp\"", TELEMETRY));
        let e = telemetry_broken("telemetry = \"tcp\"", "telemetry = \"udp\"");
        assert!(
            e.message.contains("telemetry = \"udp\"") && e.message.contains("\"quic-stream\""),
            "{e}"
        );
        assert_eq!(e.column, 13, "{e}");
        let e = telemetry_broken("telemetry = \"tcp\"\n", "");
        assert!(e.message.contains("arm \"tcp\" needs telemetry = "), "{e}");
        let e = telemetry_broken("tcp-cc = \"cubic\"", "tfo = true");
        assert!(
            e.message.contains("tfo does not apply to telemetry arms")
                // what the arm's stack takes, and only that
                && e.message.contains("tcp-cc")
                && !e.message.contains("quic-cc"),
            "{e}"
        );
        let e = telemetry_broken("quic-cc = \"newreno\"", "tcp-cc = \"reno\"");
        assert!(e.message.contains("applies to tcp arms only"), "{e}");
        let e = telemetry_broken("tcp-cc = \"cubic\"", "quic-cc = \"cubic\"");
        assert!(e.message.contains("quic-stream, quic-streams"), "{e}");
        let e = telemetry_broken("flush = 10", "flush = 200");
        assert!(
            e.message
                .contains("flush: allowed: a whole number from 1 to 128"),
            "{e}"
        );
        let e = telemetry_broken("duration = \"10s\"", "duration = \"0.1ms\"");
        assert!(e.message.contains("one unit interval"), "{e}");
        let e = telemetry_broken("flush = 10", "sizes = [\"1kb\"]");
        assert!(
            e.message.contains("does not apply to kind \"telemetry\"")
                && e.message.contains("units-per-second"),
            "{e}"
        );
        // and the other way round: no mode in an HTTP plan
        let e = broken("http = \"2\"", "telemetry = \"tcp\"");
        assert!(e.message.contains("kind is \"telemetry\""), "{e}");
    }
}
