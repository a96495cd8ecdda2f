//! Removal of what a crashed run left behind: its namespaces (with any process inside) and its
//! lock file. A run whose lock is still held is alive and is left alone.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::Path;

use crate::error::Result;
use crate::ns::{self, PREFIX, netns_dir};
use crate::topology::lock_dir;

/// What `clean` removed.
#[derive(Debug, Default)]
pub struct Cleaned {
    pub namespaces: Vec<String>,
    pub processes: usize,
    pub skipped_live: Vec<String>,
}

/// The run id inside a namespace name: `quiclab-ID-client` -> `ID`.
fn run_id(ns: &str) -> Option<&str> {
    ns.strip_prefix(PREFIX)?.rsplit_once('-').map(|(id, _)| id)
}

/// The lock of a run that is no longer alive, taken by us; `None` while its owner lives.
/// A missing lock file means the run is gone (or never got that far).
enum RunState {
    Live,
    Dead(Option<File>),
}

fn run_state(id: &str) -> RunState {
    let Ok(f) = File::open(format!("{}/{id}.lock", lock_dir())) else {
        return RunState::Dead(None);
    };
    // SAFETY: flock on a file we opened; if we get the lock, nobody else holds it. It is
    // released when `f` is dropped.
    if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
        RunState::Dead(Some(f))
    } else {
        RunState::Live
    }
}

/// Namespaces with quiclab's prefix.
pub fn namespaces() -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(netns_dir())
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with(PREFIX))
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// The lock every remover of leftovers (`clean`, a reaper) holds for its whole pass, one at a
/// time. A remover tests a run by taking the run's lock; meanwhile that run looks alive to any
/// other remover, which would leave its namespaces to the first (and return before it had
/// removed them). Holding this lock, a remover sees only live runs' locks held. `None` when
/// the lock directory cannot be made (the pass then goes on unserialised).
fn one_remover_at_a_time() -> Option<File> {
    std::fs::create_dir_all(lock_dir()).ok()?;
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(format!("{}/{REMOVER_LOCK}", lock_dir()))
        .ok()?;
    // SAFETY: a blocking flock on a file we opened; released when `f` is dropped. A pass takes
    // milliseconds, so a second remover waits that long.
    while unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) } != 0 {
        if std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
            return None;
        }
    }
    Some(f)
}

/// The file of [`one_remover_at_a_time`]'s lock in the lock directory (not a run's: runs'
/// locks end in `.lock`).
const REMOVER_LOCK: &str = "removing";

/// Removes the leftovers of runs that are no longer alive; with `force`, of live runs too.
pub fn clean(force: bool) -> Result<Cleaned> {
    let _one = one_remover_at_a_time();
    let mut out = Cleaned::default();
    remove_namespaces(force, &mut out)?;
    remove_locks(force);
    Ok(out)
}

/// Removes the leftovers of the dead runs of process `pid` (see [`crate::reaper`]): the same
/// as [`clean`] without `force`, for one process's runs only.
pub fn remove_dead_runs_of(pid: u32) -> Result<Cleaned> {
    let _one = one_remover_at_a_time();
    let mut out = Cleaned::default();
    let mine = |name: &str| {
        run_id(name)
            .and_then(|id| id.split_once('-'))
            .is_some_and(|(p, _)| p == pid.to_string())
    };
    remove_namespaces_where(false, &mut out, &mine)?;
    remove_locks_where(false, &|id| {
        id.split_once('-')
            .is_some_and(|(p, _)| p == pid.to_string())
    });
    Ok(out)
}

fn remove_namespaces(force: bool, out: &mut Cleaned) -> Result<()> {
    remove_namespaces_where(force, out, &|_| true)
}

fn remove_namespaces_where(
    force: bool,
    out: &mut Cleaned,
    which: &dyn Fn(&str) -> bool,
) -> Result<()> {
    for name in namespaces().into_iter().filter(|n| which(n)) {
        let id = run_id(&name).unwrap_or("");
        let state = run_state(id);
        if !force && matches!(state, RunState::Live) {
            out.skipped_live.push(name);
            continue;
        }
        out.processes += ns::pids_in(&name).len();
        match ns::destroy(&name) {
            Ok(()) => out.namespaces.push(name),
            // a run that ended between our listing and now removed it itself
            Err(_) if !Path::new(netns_dir()).join(&name).exists() => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

fn remove_locks(force: bool) {
    remove_locks_where(force, &|_| true);
}

fn remove_locks_where(force: bool, which: &dyn Fn(&str) -> bool) {
    if let Ok(dir) = std::fs::read_dir(lock_dir()) {
        for e in dir.filter_map(|e| e.ok()) {
            let file = e.file_name().to_string_lossy().into_owned();
            let Some(id) = file.strip_suffix(".lock").filter(|id| which(id)) else {
                continue;
            };
            // unlink only while holding the lock, so a run taking it now cannot lose it
            if let RunState::Dead(Some(_held)) = run_state(id) {
                let _ = std::fs::remove_file(e.path());
            } else if force {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reaper testing a dead run (holding the run's lock, as it does for a moment) while
    /// `clean` runs: `clean` removes the run's namespace before it returns, rather than taking
    /// the run for alive and leaving it to the reaper (a test that checked right after `clean`
    /// found it still there).
    #[test]
    fn clean_removes_a_dead_runs_namespace_while_a_reaper_is_testing_the_run() {
        assert!(
            crate::sys::is_root(),
            "this test creates a namespace: run it as root"
        );
        // a run id whose pid cannot exist (above the kernel's pid limit)
        let id = "999999999-0";
        let name = format!("{PREFIX}{id}-client");
        let _ = ns::destroy(&name);
        std::mem::forget(ns::Netns::create(&name).unwrap());
        std::fs::create_dir_all(lock_dir()).unwrap();
        std::fs::write(format!("{}/{id}.lock", lock_dir()), b"").unwrap();
        let (tested, testing) = std::sync::mpsc::channel();
        let reaper = std::thread::spawn(move || {
            let _one = one_remover_at_a_time();
            let state = run_state(id);
            assert!(matches!(state, RunState::Dead(Some(_))));
            tested.send(()).unwrap();
            std::thread::sleep(std::time::Duration::from_millis(300));
            drop(state);
        });
        testing.recv().unwrap();
        let cleaned = clean(false).unwrap();
        let left = Path::new(netns_dir()).join(&name).exists();
        reaper.join().unwrap();
        let _ = ns::destroy(&name);
        assert!(!left, "clean left {name}: {cleaned:?}");
        assert!(cleaned.namespaces.contains(&name), "{cleaned:?}");
    }

    #[test]
    fn run_id_is_parsed_from_namespace_names() {
        assert_eq!(super::run_id("quiclab-1234-0-client"), Some("1234-0"));
        assert_eq!(super::run_id("other-1-client"), None);
    }
}
