//! What a run leaves when quiclab is killed outright (SIGKILL, an out-of-memory kill): a
//! process tied to quiclab's life removes it. Children started with [`Process`] die with quiclab
//! (PR_SET_PDEATHSIG), but what they started in turn (a shell's pipeline, a server's workers)
//! does not, and namespaces outlive every process. So the first topology of a process starts a
//! reaper: a small process (quiclab itself, `quiclab __reap`) that waits for its parent to go
//! and then removes the namespaces of the parent's runs, with every process inside them.
//!
//! The reaper learns of its parent's end by the end of a pipe: it reads its standard input,
//! whose only writer is the parent (the write end is close-on-exec, so no other child holds
//! it). After a normal exit the runs are gone already and it finds nothing. It removes only
//! runs whose lock is free (see [`crate::clean`]), so a live run is never touched.
//!
//! [`Process`]: crate::Process

use std::io::Read;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::clean::{self, Cleaned};
use crate::error::Result;

/// The program and arguments that run [`reap`] (set by the binary at start).
static PROGRAM: OnceLock<(PathBuf, Vec<String>)> = OnceLock::new();
/// The running reaper (its stdin is the pipe; never dropped before exit).
static REAPER: Mutex<Option<Child>> = Mutex::new(None);

/// Names the command that runs [`reap`] with the parent's pid appended (e.g. `quiclab __reap
/// --parent`); without it no reaper is started (a library's own tests).
pub fn set_program(exe: PathBuf, args: &[&str]) {
    let _ = PROGRAM.set((exe, args.iter().map(|s| s.to_string()).collect()));
}

/// Starts the reaper once per process, if a program was set. A failure to start one is said
/// and otherwise ignored: the run works, only a kill would leave its namespaces to `clean`.
pub(crate) fn ensure() {
    let Some((exe, args)) = PROGRAM.get() else {
        return;
    };
    let Ok(mut slot) = REAPER.lock() else { return };
    if slot.is_some() {
        return;
    }
    let mut c = Command::new(exe);
    c.args(args)
        .arg(std::process::id().to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit());
    // its own process group: a Ctrl-C to quiclab's group must not end the reaper first
    std::os::unix::process::CommandExt::process_group(&mut c, 0);
    match c.spawn() {
        Ok(child) => *slot = Some(child),
        Err(e) => log::warn!(
            "cannot start the reaper ({e}): if quiclab is killed, `quiclab clean` removes what \
             its runs leave"
        ),
    }
}

/// The reaper's body: waits for the parent `pid` to end (standard input closes), then removes
/// what its runs left.
pub fn reap(parent: u32) -> Result<Cleaned> {
    let mut sink = [0u8; 64];
    let mut stdin = std::io::stdin().lock();
    // only the end of the pipe matters; data (none is sent) is ignored
    while !matches!(stdin.read(&mut sink), Ok(0) | Err(_)) {}
    // The pipe closes with the first of the parent's files; its run locks are released as its
    // last threads finish exiting, a moment later. Until then its runs look alive: look again.
    let until = Instant::now() + LOCKS_RELEASED;
    let mut cleaned = Cleaned::default();
    loop {
        let r = clean::remove_dead_runs_of(parent)?;
        cleaned.namespaces.extend(r.namespaces);
        cleaned.processes += r.processes;
        if r.skipped_live.is_empty() || Instant::now() > until {
            return Ok(cleaned);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// How long after its parent's end the reaper waits for the parent's run locks to be released.
const LOCKS_RELEASED: Duration = Duration::from_secs(5);
