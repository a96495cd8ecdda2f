//! Network conditions: the link keys of `[network]` and each `[conditions.NAME]`, traces read
//! once, and each impaired condition's base.

use super::*;

pub(super) fn is_link_key(k: &str) -> bool {
    if k == "direct" || k == "offloads" {
        return true;
    }
    let bare = k
        .strip_prefix("up-")
        .or_else(|| k.strip_prefix("down-"))
        .unwrap_or(k);
    KEYS.iter().any(|key| key.name == bare)
}

pub(super) fn link_keys_allowed() -> String {
    let names: Vec<_> = KEYS.iter().map(|k| k.name).collect();
    format!(
        "allowed: {} (each also as up-KEY or down-KEY), direct = true (a veth pair of the \
         mtu given, no emulator), and offloads = true (the emulator's devices take \
         segmentation-offload super-packets)",
        names.join(", ")
    )
}

/// Link keys of a table, checked one by one; spans kept for later errors.
pub(super) fn link_table(
    ctx: &Ctx,
    t: &Table,
) -> Result<Vec<(String, String, std::ops::Range<usize>)>, PlanError> {
    let mut out = Vec::new();
    for (k, v) in t {
        if !is_link_key(k.get_ref()) {
            return Err(ctx.err(
                k.span(),
                format!(
                    "unknown link key {:?}; {}",
                    k.get_ref(),
                    link_keys_allowed()
                ),
            ));
        }
        out.push((k.get_ref().clone(), scalar(ctx, v)?, v.span()));
    }
    Ok(out)
}

/// Base keys overridden by a condition's own (same key replaces; others add).
pub(super) fn merge(
    base: &[(String, String, std::ops::Range<usize>)],
    over: &[(String, String, std::ops::Range<usize>)],
) -> Vec<(String, String, std::ops::Range<usize>)> {
    let mut out: Vec<_> = base
        .iter()
        .filter(|(k, _, _)| !over.iter().any(|(o, _, _)| o == k))
        .cloned()
        .collect();
    out.extend(over.iter().cloned());
    out
}

/// The longest a trial's data may take to cross its link at the link's rate, unless the plan
/// sets a trial-timeout (the client's own limit is many times this).
pub(super) const MAX_IDEAL_TRANSFER: Duration = Duration::from_secs(600);

/// Trace files read once per plan, named relative to the plan's file (as page manifests are):
/// conditions that share a trace share its data, and both profiles' conditions share it too.
pub(super) struct Traces {
    pub(super) plan_file: String,
    pub(super) read: std::cell::RefCell<HashMap<PathBuf, Result<quiclab_link::Trace, String>>>,
}

impl Traces {
    pub(super) fn new(plan_file: &str) -> Self {
        Traces {
            plan_file: plan_file.to_string(),
            read: Default::default(),
        }
    }

    pub(super) fn load(&self, name: &str) -> Result<quiclab_link::Trace, String> {
        let path = crate::keys::beside_plan(&self.plan_file, name);
        self.read
            .borrow_mut()
            .entry(path.clone())
            .or_insert_with(|| {
                quiclab_link::Trace::read_file(&path).map_err(|e| {
                    // the file as found, when the plan named it relative to its own place
                    if path.as_os_str() == name {
                        e.to_string()
                    } else {
                        format!("{}: {e}", path.display())
                    }
                })
            })
            .clone()
    }
}

pub(super) fn resolve_condition(
    ctx: &Ctx,
    traces: &Traces,
    name: String,
    keys: Vec<(String, String, std::ops::Range<usize>)>,
    at: std::ops::Range<usize>,
) -> Result<Condition, PlanError> {
    // the last of a key wins, as for link keys
    let flag = |key: &str| -> Result<bool, PlanError> {
        match keys.iter().rev().find(|(k, _, _)| k == key) {
            None => Ok(false),
            Some((_, v, span)) => match v.as_str() {
                "true" => Ok(true),
                "false" => Ok(false),
                _ => Err(ctx.err(
                    span.clone(),
                    format!("condition {name:?}: {key} = {v:?}: allowed: true or false"),
                )),
            },
        }
    };
    let direct = flag("direct")?;
    let offloads = flag("offloads")?;
    if direct && let Some((k, _, span)) = keys.iter().find(|(k, _, _)| k != "direct" && k != "mtu")
    {
        return Err(ctx.err(
            span.clone(),
            format!(
                "condition {name:?}: {k} does not apply to a direct condition (a veth pair, no \
                 emulator, offloads always on); allowed with direct = true: mtu"
            ),
        ));
    }
    let pairs: Vec<(&str, &str)> = keys
        .iter()
        .filter(|(k, _, _)| k != "direct" && k != "offloads")
        .map(|(k, v, _)| (k.as_str(), v.as_str()))
        .collect();
    let load = |p: &str| traces.load(p);
    let link = LinkConfig::from_keys(0, &pairs, &load).map_err(|e: ConfigError| {
        // point at the offending value when it is one of the keys, else at the condition
        let span = keys
            .iter()
            .rev()
            .find(|(k, _, _)| *k == e.key)
            .map(|(_, _, s)| s.clone())
            .unwrap_or(at);
        ctx.err(span, format!("condition {name:?}: {e}"))
    })?;
    let direct_mtu = direct.then(|| link.up.mtu.unwrap_or(1500));
    Ok(Condition {
        name,
        keys: keys.into_iter().map(|(k, v, _)| (k, v)).collect(),
        link,
        direct_mtu,
        offloads,
        base: None,
    })
}

/// Link keys that impair a path rather than make it (in either direction): loss, extra delay,
/// jitter, reordering, duplicates, outages, listed drops (by index or among the large packets), an isolated loss, a tail's blackout.
pub(super) const IMPAIRMENTS: [&str; 13] = [
    "loss",
    "loss-burst",
    "duplicate",
    "delay",
    "jitter",
    "jitter-reorders",
    "reorder",
    "reorder-delay",
    "outage",
    "drop-packets",
    "drop-large",
    "isolated-loss",
    "blackout",
];

/// Each condition's base: the first other condition of the same path (the same keys other than
/// impairments) whose impairments are all `[network]`'s, for a condition with an impairment of
/// its own. www21's "loss 1%" has "base"; a "loss 1%, queue 20ms" has "base, queue 20ms".
pub(super) fn bases(
    conditions: &mut [Condition],
    network: &[(String, String, std::ops::Range<usize>)],
) {
    let impairs = |k: &str| {
        let bare = k
            .strip_prefix("up-")
            .or_else(|| k.strip_prefix("down-"))
            .unwrap_or(k);
        IMPAIRMENTS.contains(&bare)
    };
    let own = |c: &Condition| -> Vec<(String, String)> {
        let mut v: Vec<(String, String)> = c
            .keys
            .iter()
            .filter(|(k, v)| impairs(k) && !network.iter().any(|(nk, nv, _)| nk == k && nv == v))
            .cloned()
            .collect();
        v.sort();
        v
    };
    let path = |c: &Condition| -> Vec<(String, String)> {
        let mut v: Vec<(String, String)> = c
            .keys
            .iter()
            .filter(|(k, _)| !impairs(k))
            .cloned()
            .collect();
        v.sort();
        v
    };
    let found: Vec<Option<usize>> = conditions
        .iter()
        .enumerate()
        .map(|(i, c)| {
            if own(c).is_empty() {
                return None;
            }
            conditions
                .iter()
                .enumerate()
                .find(|(j, b)| *j != i && own(b).is_empty() && path(b) == path(c))
                .map(|(j, _)| j)
        })
        .collect();
    for (c, b) in conditions.iter_mut().zip(found) {
        c.base = b;
    }
}
