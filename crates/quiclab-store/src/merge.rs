//! Shards of one campaign (`quiclab run --shard K/N`, one directory each) merged into one
//! campaign directory (`quiclab merge OUT DIR...`).
//!
//! Contract: only shards of one campaign merge: the same plan (its name and its current trial
//! ids, so another version of the plan is refused), one quiclab build, one shard count, each
//! shard at most once; a directory that breaks a rule is refused by name with what differs,
//! before anything is written. Every trial keeps its record as its shard wrote it (host and
//! shard included) and its artifacts folder; the merged campaign's provenance names the hosts
//! and shards. Trials of the plan that no shard holds are counted, not invented.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use crate::{Store, StoreError, TrialRecord};

#[derive(Debug, thiserror::Error)]
pub enum MergeError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(
        "{dir}: its results.db cannot be read as a campaign ({why}): a shard's directory must \
         hold the whole database its `quiclab run --shard` wrote (copy it again, with its \
         results.db-wal if there is one)"
    )]
    Unreadable { dir: String, why: String },
    #[error("nothing to merge: name the shards' directories after OUT")]
    NoShards,
    #[error("{dir} is the output directory: merge into a new directory")]
    OutIsAShard { dir: String },
    #[error(
        "{dir} holds a whole campaign of plan {plan:?}, not a shard: merge the directories of \
         `quiclab run --shard K/N`"
    )]
    NotAShard { dir: String, plan: String },
    #[error(
        "{dir} holds plan {found:?}, {first} holds plan {wanted:?}: only the shards of one \
         campaign merge"
    )]
    OtherPlan {
        dir: String,
        found: String,
        first: String,
        wanted: String,
    },
    #[error(
        "{dir} holds another version of plan {plan:?} than {first}: {only_here} of its trials \
         are not in {first}'s plan and {only_there} of {first}'s are not in its plan. Run every \
         shard from the same plan file"
    )]
    OtherPlanVersion {
        dir: String,
        first: String,
        plan: String,
        only_here: usize,
        only_there: usize,
    },
    #[error(
        "{dir} holds trials of quiclab build {found}, {first} of build {wanted}: the shards of \
         one campaign must be run by one build"
    )]
    OtherBuild {
        dir: String,
        found: String,
        first: String,
        wanted: String,
    },
    #[error(
        "{dir} holds shard {found}, {first} holds shard {wanted}: the shards of one split \
             merge, all of the same N"
    )]
    OtherCount {
        dir: String,
        found: String,
        first: String,
        wanted: String,
    },
    #[error("{a} and {b} both hold shard {shard}: name each shard's directory once")]
    SameShard { shard: String, a: String, b: String },
    #[error(
        "trial {id} is in both {a} and {b}: a trial runs in one shard only, so one of them was \
         edited or copied; merge the shards as their runs left them"
    )]
    TrialTwice { id: String, a: String, b: String },
    #[error(
        "trial {id} in {dir} was recorded by shard {recorded}, not by this directory's shard \
         {shard}: merge the shards as their runs left them"
    )]
    TrialOfAnotherShard {
        id: String,
        dir: String,
        recorded: String,
        shard: String,
    },
    #[error(
        "{out} holds {what}: merge into a new directory (or the directory of an earlier merge \
         of these shards)"
    )]
    OutInUse { out: String, what: String },
    #[error(
        "trial {id} in {dir} is not one the plan's split gives shard {shard}: merge the shards \
         as their runs left them"
    )]
    NotInSplit {
        id: String,
        dir: String,
        shard: String,
    },
}

/// One shard as merged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MergedShard {
    pub dir: String,
    /// "K/N".
    pub shard: String,
    pub trials: usize,
    /// The machines that ran its trials.
    pub hosts: Vec<String>,
}

/// What a merge did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MergeSummary {
    pub plan: String,
    /// Trials in the plan.
    pub total: usize,
    /// Trials merged (finished or failed: every trial a shard recorded).
    pub merged: usize,
    pub shards: Vec<MergedShard>,
    /// "K/N" of the shards of the split that no directory held.
    pub shards_missing: Vec<String>,
    /// Trials of the plan that no shard holds.
    pub missing: usize,
    /// Symbolic links found among the shards' artifacts, left out of the merge (a shard's
    /// artifacts are files and folders quiclab wrote; a link could lead anywhere).
    pub links_left_out: Vec<PathBuf>,
}

/// A shard directory as read.
struct Part {
    dir: String,
    plan: String,
    ids: BTreeSet<String>,
    shard: (usize, usize),
    builds: Vec<String>,
    busy_seconds: u64,
    store: Store,
    path: PathBuf,
    /// The trial ids the plan's split gives this shard, as its run recorded them (`None` for a
    /// shard run before they were recorded).
    split: Option<BTreeSet<String>>,
}

fn read(dir: &Path) -> Result<Part, MergeError> {
    // a shard's database SQLite cannot read (truncated in a copy, damaged): the directory is
    // refused, as one of another campaign is
    read_part(dir).map_err(|e| match e {
        MergeError::Store(StoreError::Sqlite { source, .. }) => MergeError::Unreadable {
            dir: dir.display().to_string(),
            why: source.to_string(),
        },
        e => e,
    })
}

fn read_part(dir: &Path) -> Result<Part, MergeError> {
    let name = dir.display().to_string();
    let store = Store::open_existing(dir)?;
    let plan = store
        .meta("plan_name")?
        .ok_or_else(|| StoreError::Empty { path: name.clone() })?;
    let shard = store
        .meta("shard")?
        .and_then(|s| {
            let (k, n) = s.split_once('/')?;
            Some((k.parse().ok()?, n.parse().ok()?))
        })
        .ok_or_else(|| MergeError::NotAShard {
            dir: name.clone(),
            plan: plan.clone(),
        })?;
    let ids: BTreeSet<String> = store
        .current_ids()?
        .map(|ids| ids.into_iter().collect())
        .unwrap_or_default();
    let builds = store.builds()?;
    let split = match store.meta(crate::SHARD_IDS)? {
        Some(text) => Some(
            serde_json::from_str(&text).map_err(|e| MergeError::Unreadable {
                dir: name.clone(),
                why: format!("meta {}: {e}", crate::SHARD_IDS),
            })?,
        ),
        None => None,
    };
    let busy_seconds = store
        .meta("busy_seconds")?
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    Ok(Part {
        dir: name,
        plan,
        ids,
        shard,
        builds,
        busy_seconds,
        store,
        path: dir.to_path_buf(),
        split,
    })
}

/// Refuses shards that are not of one campaign; the first directory is the reference.
fn check(parts: &[Part]) -> Result<(), MergeError> {
    let first = &parts[0];
    let mut seen: BTreeMap<usize, &str> = BTreeMap::new();
    for p in parts {
        if p.plan != first.plan {
            return Err(MergeError::OtherPlan {
                dir: p.dir.clone(),
                found: p.plan.clone(),
                first: first.dir.clone(),
                wanted: first.plan.clone(),
            });
        }
        if p.ids != first.ids {
            return Err(MergeError::OtherPlanVersion {
                dir: p.dir.clone(),
                first: first.dir.clone(),
                plan: p.plan.clone(),
                only_here: p.ids.difference(&first.ids).count(),
                only_there: first.ids.difference(&p.ids).count(),
            });
        }
        // a shard that ran nothing yet has no build to compare
        if let (Some(found), Some(wanted)) = (
            p.builds.iter().find(|b| !first.builds.contains(b)),
            first.builds.first(),
        ) {
            return Err(MergeError::OtherBuild {
                dir: p.dir.clone(),
                found: found.clone(),
                first: first.dir.clone(),
                wanted: wanted.clone(),
            });
        }
        if p.shard.1 != first.shard.1 {
            return Err(MergeError::OtherCount {
                dir: p.dir.clone(),
                found: format!("{}/{}", p.shard.0, p.shard.1),
                first: first.dir.clone(),
                wanted: format!("{}/{}", first.shard.0, first.shard.1),
            });
        }
        if let Some(a) = seen.insert(p.shard.0, &p.dir) {
            return Err(MergeError::SameShard {
                shard: format!("{}/{}", p.shard.0, p.shard.1),
                a: a.to_string(),
                b: p.dir.clone(),
            });
        }
    }
    Ok(())
}

/// Copies the directory tree `from` to `to` (files and directories; links are not followed).
/// The first of `base`'s descendants on the way to `base/rel` that is a symbolic link.
fn first_link(base: &Path, rel: &str) -> Option<PathBuf> {
    let mut at = base.to_path_buf();
    for part in Path::new(rel).components() {
        at.push(part);
        if std::fs::symlink_metadata(&at).is_ok_and(|m| m.file_type().is_symlink()) {
            return Some(at);
        }
    }
    None
}

fn copy_tree(from: &Path, to: &Path, links: &mut Vec<PathBuf>) -> Result<(), StoreError> {
    use std::os::unix::fs::OpenOptionsExt;
    let io = |path: &Path| {
        let path = path.display().to_string();
        move |source| StoreError::Io { path, source }
    };
    std::fs::create_dir_all(to).map_err(io(to))?;
    for entry in std::fs::read_dir(from).map_err(io(from))? {
        let entry = entry.map_err(io(from))?;
        let kind = entry.file_type().map_err(io(&entry.path()))?;
        let target = to.join(entry.file_name());
        if kind.is_dir() {
            copy_tree(&entry.path(), &target, links)?;
        } else if kind.is_file() {
            // neither end through a link: the source is opened as the file it was listed as,
            // the target created in place
            let mut src = std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_NOFOLLOW)
                .open(entry.path())
                .map_err(io(&entry.path()))?;
            let mut dst = crate::output::create(&target)?;
            std::io::copy(&mut src, &mut dst).map_err(io(&target))?;
        } else if kind.is_symlink() {
            links.push(entry.path());
        }
    }
    Ok(())
}

/// Merges the shard directories `dirs` into the campaign directory `out` (see the module's
/// contract). `out` must be new, or hold an earlier merge of the same plan.
pub fn merge(out: &Path, dirs: &[PathBuf]) -> Result<MergeSummary, MergeError> {
    if dirs.is_empty() {
        return Err(MergeError::NoShards);
    }
    let out_abs = std::fs::canonicalize(out).ok();
    for d in dirs {
        if out_abs.is_some() && std::fs::canonicalize(d).ok() == out_abs {
            return Err(MergeError::OutIsAShard {
                dir: d.display().to_string(),
            });
        }
    }
    let parts = dirs
        .iter()
        .map(|d| read(d))
        .collect::<Result<Vec<_>, _>>()?;
    check(&parts)?;
    let first = &parts[0];
    let out_name = out.display().to_string();
    let mut description = first.store.description()?;
    let mut shards = Vec::new();
    let mut hosts_all: BTreeSet<String> = BTreeSet::new();
    let mut merged = BTreeSet::new();
    let mut busy = 0;
    let mut records: Vec<(TrialRecord, &Part)> = Vec::new();
    for p in &parts {
        let trials = p.store.trials()?;
        let hosts: BTreeSet<String> = trials.iter().filter_map(|t| t.host.clone()).collect();
        hosts_all.extend(hosts.iter().cloned());
        busy += p.busy_seconds;
        shards.push(MergedShard {
            dir: p.dir.clone(),
            shard: format!("{}/{}", p.shard.0, p.shard.1),
            trials: trials.len(),
            hosts: hosts.into_iter().collect(),
        });
        let shard = format!("{}/{}", p.shard.0, p.shard.1);
        for t in trials.into_iter().filter(|t| p.ids.contains(&t.id)) {
            if let Some(recorded) = t.shard.as_ref().filter(|r| **r != shard) {
                return Err(MergeError::TrialOfAnotherShard {
                    id: t.id.clone(),
                    dir: p.dir.clone(),
                    recorded: recorded.clone(),
                    shard,
                });
            }
            if p.split.as_ref().is_some_and(|ids| !ids.contains(&t.id)) {
                return Err(MergeError::NotInSplit {
                    id: t.id.clone(),
                    dir: p.dir.clone(),
                    shard,
                });
            }
            if let Some((_, q)) = records.iter().find(|(o, _)| o.id == t.id) {
                return Err(MergeError::TrialTwice {
                    id: t.id.clone(),
                    a: q.dir.clone(),
                    b: p.dir.clone(),
                });
            }
            merged.insert(t.id.clone());
            records.push((t, p));
        }
    }
    // every shard's trials checked before anything is written; the artifacts are copied into
    // the directory held open here, whatever its name comes to lead to meanwhile
    let anchor = crate::output::Anchor::open(out).map_err(StoreError::from)?;
    let mut target = Store::open(out)?;
    anchor.confirm(out).map_err(StoreError::from)?;
    if let Some(plan) = target.meta("plan_name")? {
        let merged_before = target.meta("merged_from")?.is_some();
        if plan != first.plan || !merged_before {
            return Err(MergeError::OutInUse {
                out: out_name,
                what: if merged_before {
                    format!("a merge of plan {plan:?}")
                } else {
                    format!("a campaign of plan {plan:?} run there")
                },
            });
        }
    }
    shards.sort_by_key(|s| {
        s.shard
            .split_once('/')
            .and_then(|(k, _)| k.parse::<usize>().ok())
    });
    // the provenance of the first shard, its host replaced by every shard's
    description.provenance.retain(|(k, _)| k != "host");
    description.provenance.insert(
        1,
        (
            "hosts".into(),
            hosts_all.iter().cloned().collect::<Vec<_>>().join(", "),
        ),
    );
    description.provenance.insert(
        2,
        (
            "shards".into(),
            shards
                .iter()
                .map(|s| format!("{} ({}, {} trials)", s.shard, s.hosts.join(", "), s.trials))
                .collect::<Vec<_>>()
                .join("; "),
        ),
    );
    target.set_meta("plan_name", &first.plan)?;
    target.set_campaign(&description)?;
    let ids: Vec<&String> = first.ids.iter().collect();
    target.set_meta(
        "trial_ids",
        &serde_json::to_string(&ids).unwrap_or_else(|_| "[]".into()),
    )?;
    target.set_meta("busy_seconds", &busy.to_string())?;
    // each shard's busy spells, of its own host; a merge again replaces them
    target.delete_meta("busy")?;
    for p in &parts {
        target.add_busy(&p.store.busy()?)?;
    }
    target.set_meta(
        "merged_from",
        &serde_json::to_string(
            &shards
                .iter()
                .map(|s| serde_json::json!({"shard": s.shard, "dir": s.dir}))
                .collect::<Vec<_>>(),
        )
        .unwrap_or_else(|_| "[]".into()),
    )?;
    let mut links_left_out = Vec::new();
    for (t, p) in &records {
        if let Some(rel) = &t.artifacts {
            match first_link(&p.path, rel) {
                Some(link) => links_left_out.push(link),
                None if p.path.join(rel).is_dir() => copy_tree(
                    &p.path.join(rel),
                    &anchor.path().join(rel),
                    &mut links_left_out,
                )?,
                None => {}
            }
        }
        target.record(t)?;
    }
    let count = first.shard.1;
    let held: BTreeSet<usize> = parts.iter().map(|p| p.shard.0).collect();
    Ok(MergeSummary {
        plan: first.plan.clone(),
        total: first.ids.len(),
        merged: merged.len(),
        shards,
        shards_missing: (1..=count)
            .filter(|k| !held.contains(k))
            .map(|k| format!("{k}/{count}"))
            .collect(),
        missing: first.ids.len() - merged.len(),
        links_left_out,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tests::{dir, metrics, trial};
    use quiclab_model::campaign::Campaign;

    const IDS: [&str; 4] = ["a", "b", "c", "d"];

    /// A shard directory of plan `plan` (trials `ids` in the plan) holding `held` as shard
    /// `shard`, run on `host` by `build`.
    fn shard(
        name: &str,
        plan: &str,
        ids: &[&str],
        shard: &str,
        held: &[&str],
        host: &str,
        build: &str,
    ) -> PathBuf {
        let d = dir(name);
        let mut s = Store::open(&d).unwrap();
        s.set_meta("plan_name", plan).unwrap();
        s.set_meta("shard", shard).unwrap();
        s.set_meta("trial_ids", &serde_json::to_string(ids).unwrap())
            .unwrap();
        s.set_meta("busy_seconds", "2").unwrap();
        s.set_campaign(&Campaign {
            name: plan.into(),
            provenance: vec![
                ("quiclab".into(), build.into()),
                ("host".into(), host.into()),
            ],
            ..Default::default()
        })
        .unwrap();
        for (i, id) in held.iter().enumerate() {
            let mut t = trial(id, i as u64, Ok(metrics(100.0 + i as f64, 3)));
            t.host = Some(host.into());
            t.shard = Some(shard.into());
            t.build = Some(build.into());
            t.artifacts = Some(format!("trials/{id}"));
            std::fs::create_dir_all(d.join("trials").join(id)).unwrap();
            std::fs::write(d.join("trials").join(id).join("server.log"), id).unwrap();
            s.record(&t).unwrap();
        }
        d
    }

    #[test]
    fn shards_of_one_campaign_merge_with_their_hosts_shards_and_artifacts() {
        let a = shard("merge-a", "p", &IDS, "1/2", &["a", "c"], "lab-1", "v1");
        let b = shard("merge-b", "p", &IDS, "2/2", &["b"], "lab-2", "v1");
        // links among a shard's artifacts, in a folder and as a folder: left out, and said
        let secret = dir("merge-secret");
        std::fs::create_dir_all(&secret).unwrap();
        std::fs::write(secret.join("key"), "secret").unwrap();
        std::os::unix::fs::symlink(secret.join("key"), a.join("trials/a/keys.log")).unwrap();
        std::fs::remove_dir_all(b.join("trials/b")).unwrap();
        std::os::unix::fs::symlink(&secret, b.join("trials/b")).unwrap();
        let out = dir("merge-out");
        let sum = merge(&out, &[b.clone(), a.clone()]).unwrap();
        assert_eq!((sum.total, sum.merged, sum.missing), (4, 3, 1));
        assert_eq!(
            sum.links_left_out,
            [b.join("trials/b"), a.join("trials/a/keys.log")]
        );
        assert!(!out.join("trials/a/keys.log").exists());
        assert!(out.join("trials/a/server.log").is_file());
        assert!(!out.join("trials/b").exists());
        assert!(sum.shards_missing.is_empty());
        assert_eq!(sum.shards[0].shard, "1/2");
        assert_eq!(sum.shards[0].hosts, ["lab-1"]);
        assert_eq!(sum.shards[1].trials, 1);
        let s = Store::open_existing(&out).unwrap();
        let trials = s.trials().unwrap();
        assert_eq!(trials.len(), 3);
        let b_trial = trials.iter().find(|t| t.id == "b").unwrap();
        assert_eq!(b_trial.host.as_deref(), Some("lab-2"));
        assert_eq!(b_trial.shard.as_deref(), Some("2/2"));
        assert_eq!(b_trial.outcome.as_ref().unwrap().timeline.len(), 3);
        assert_eq!(
            std::fs::read_to_string(out.join("trials/c/server.log")).unwrap(),
            "c"
        );
        let c = s.campaign().unwrap();
        let prov: BTreeMap<_, _> = c.provenance.into_iter().collect();
        assert_eq!(prov["hosts"], "lab-1, lab-2");
        assert!(prov["shards"].starts_with("1/2 (lab-1, 2 trials); 2/2 (lab-2, 1 trials)"));
        assert!(!prov.contains_key("host"));
        assert_eq!(s.meta("busy_seconds").unwrap().as_deref(), Some("4"));
        // the missing trial's shard finishes it; merging again into the same directory
        let b2 = shard("merge-b2", "p", &IDS, "2/2", &["b", "d"], "lab-2", "v1");
        drop(s);
        let sum = merge(&out, &[a.clone(), b2.clone()]).unwrap();
        assert_eq!((sum.merged, sum.missing), (4, 0));
        // one shard alone: the other is named missing
        let out2 = dir("merge-out2");
        let sum = merge(&out2, std::slice::from_ref(&a)).unwrap();
        assert_eq!(sum.shards_missing, ["2/2"]);
        for d in [a, b, b2, out, out2, secret] {
            let _ = std::fs::remove_dir_all(d);
        }
    }

    #[test]
    fn shards_that_are_not_of_one_campaign_are_refused_by_name_before_anything_is_written() {
        let a = shard("refuse-a", "p", &IDS, "1/2", &["a"], "lab-1", "v1");
        let cases: Vec<(PathBuf, &str)> = vec![
            (
                shard("refuse-plan", "q", &IDS, "2/2", &["b"], "h", "v1"),
                "holds plan \"q\"",
            ),
            (
                shard(
                    "refuse-version",
                    "p",
                    &["a", "b", "c", "e"],
                    "2/2",
                    &["b"],
                    "h",
                    "v1",
                ),
                "another version of plan \"p\"",
            ),
            (
                shard("refuse-build", "p", &IDS, "2/2", &["b"], "h", "v2"),
                "build v2",
            ),
            (
                shard("refuse-count", "p", &IDS, "2/3", &["b"], "h", "v1"),
                "holds shard 2/3",
            ),
            (
                shard("refuse-twice", "p", &IDS, "1/2", &["b"], "h", "v1"),
                "both hold shard 1/2",
            ),
            // a trial in two shards (one copied or edited): which one's result would be kept
            // depended on the order the shards were named
            (
                shard("refuse-dup", "p", &IDS, "2/2", &["b", "a"], "h", "v1"),
                "trial a is in both",
            ),
            (
                {
                    let d = shard("refuse-moved", "p", &IDS, "2/2", &["b"], "h", "v1");
                    Store::open(&d)
                        .unwrap()
                        .conn
                        .execute("UPDATE trials SET shard = '1/2' WHERE id = 'b'", [])
                        .unwrap();
                    d
                },
                "was recorded by shard 1/2, not by this directory's shard 2/2",
            ),
            // a trial the plan's split gives another shard (its record edited to this one's)
            (
                {
                    let d = shard("refuse-split", "p", &IDS, "2/2", &["b", "c"], "h", "v1");
                    Store::open(&d)
                        .unwrap()
                        .set_meta(crate::SHARD_IDS, r#"["b","d"]"#)
                        .unwrap();
                    d
                },
                "trial c in",
            ),
        ];
        for (other, why) in &cases {
            let out = dir("refuse-out");
            let e = merge(&out, &[a.clone(), other.clone()])
                .unwrap_err()
                .to_string();
            assert!(e.contains(why), "{e}");
            if why.starts_with("trial c in") {
                assert!(
                    e.contains("is not one the plan's split gives shard 2/2"),
                    "{e}"
                );
            }
            assert!(
                e.contains(&other.display().to_string()),
                "names the directory: {e}"
            );
            // nothing written
            assert!(!out.join(crate::DB_FILE).exists(), "{e}");
        }
        // an OUT that is a link is not written through
        let target = dir("refuse-link-target");
        let link =
            target.with_file_name(format!("quiclab-store-refuse-link-{}", std::process::id()));
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let b = shard("refuse-link-b", "p", &IDS, "2/2", &["b"], "h", "v1");
        let e = merge(&link, &[a.clone(), b.clone()])
            .unwrap_err()
            .to_string();
        assert!(e.contains("symbolic link"), "{e}");
        assert!(!target.join(crate::DB_FILE).exists(), "{e}");
        let _ = std::fs::remove_file(&link);
        let _ = std::fs::remove_dir_all(&b);
        // a shard whose database was cut short in a copy: refused by name
        let cut = shard("refuse-cut", "p", &IDS, "2/2", &["b"], "h", "v1");
        let db = cut.join(crate::DB_FILE);
        let whole_db = std::fs::read(&db).unwrap();
        std::fs::write(&db, &whole_db[..whole_db.len().min(100)]).unwrap();
        let e = merge(&dir("refuse-out"), &[a.clone(), cut.clone()]).unwrap_err();
        assert!(matches!(e, MergeError::Unreadable { .. }), "{e}");
        let e = e.to_string();
        assert!(
            e.contains(&cut.display().to_string()) && e.contains("cannot be read"),
            "{e}"
        );
        let _ = std::fs::remove_dir_all(&cut);
        // a whole campaign's directory is not a shard
        let whole = shard("refuse-whole", "p", &IDS, "1/1", &["a"], "h", "v1");
        Store::open(&whole).unwrap().delete_meta("shard").unwrap();
        let e = merge(&dir("refuse-out"), &[a.clone(), whole.clone()])
            .unwrap_err()
            .to_string();
        assert!(e.contains("not a shard"), "{e}");
        // a directory a campaign ran in is not overwritten by a merge
        let e = merge(&whole, std::slice::from_ref(&a))
            .unwrap_err()
            .to_string();
        assert!(e.contains("a campaign of plan \"p\" run there"), "{e}");
        for (d, _) in cases {
            let _ = std::fs::remove_dir_all(d);
        }
        let _ = std::fs::remove_dir_all(a);
        let _ = std::fs::remove_dir_all(whole);
    }
}
