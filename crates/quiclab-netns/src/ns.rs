//! Named network namespaces (as `ip netns` makes them), owned by a guard that deletes them.

use std::process::Command;

use crate::error::{Context, Error, Result};
use crate::sys;

/// Every namespace quiclab creates starts with this; `quiclab clean` looks for nothing else.
pub const PREFIX: &str = "quiclab-";
/// Where `ip netns` keeps its namespace handles.
pub const NETNS_DIR: &str = "/run/netns";

/// Runs `ip ARGS...`, turning a failure into an error carrying its stderr.
pub fn ip(args: &[&str]) -> Result<()> {
    run("ip", args).map(drop)
}

/// Runs a command to completion; returns its stdout, or an error with its stderr.
pub fn run(prog: &str, args: &[&str]) -> Result<String> {
    let cmd = || format!("{prog} {}", args.join(" "));
    let out = Command::new(prog)
        .args(args)
        .output()
        .context(|| format!("cannot run `{}`", cmd()))?;
    if !out.status.success() {
        return Err(Error::Command {
            cmd: cmd(),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// A network namespace, deleted (with every process still inside it) when dropped.
#[derive(Debug)]
pub struct Netns {
    name: String,
}

impl Netns {
    /// Creates `name` with its loopback up.
    pub fn create(name: &str) -> Result<Self> {
        if !sys::is_root() {
            return Err(Error::NotRoot);
        }
        ip(&["netns", "add", name])?;
        let ns = Netns {
            name: name.to_string(),
        };
        ns.ip(&["link", "set", "lo", "up"])?;
        Ok(ns)
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn path(&self) -> String {
        format!("{NETNS_DIR}/{}", self.name)
    }

    /// Runs `ip -n NAME ARGS...`.
    pub fn ip(&self, args: &[&str]) -> Result<()> {
        let mut a = vec!["-n", self.name.as_str()];
        a.extend_from_slice(args);
        ip(&a)
    }

    /// Runs `f` on a thread that has entered this namespace: sockets and devices it creates
    /// belong to the namespace and keep working from any thread afterwards.
    pub fn run_in<T: Send>(&self, f: impl FnOnce() -> std::io::Result<T> + Send) -> Result<T> {
        let path = self.path();
        std::thread::scope(|s| {
            s.spawn(|| {
                sys::enter_netns(&path)?;
                f()
            })
            .join()
            .unwrap_or_else(|_| Err(std::io::Error::other("thread panicked")))
        })
        .context(|| format!("in namespace {}", self.name))
    }

    /// Pids of the processes inside this namespace.
    pub fn pids(&self) -> Vec<i32> {
        pids_in(&self.name)
    }
}

/// Pids of the processes inside namespace `name` (as `ip netns pids` reports them).
pub fn pids_in(name: &str) -> Vec<i32> {
    run("ip", &["netns", "pids", name])
        .map(|s| {
            s.split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// Kills every process inside namespace `name` and deletes it. Those processes are ours: only
/// quiclab puts processes into its namespaces.
pub fn destroy(name: &str) -> Result<()> {
    for _ in 0..50 {
        let pids = pids_in(name);
        if pids.is_empty() {
            break;
        }
        for pid in pids {
            // SAFETY: kill with a specific pid we found inside our own namespace.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    ip(&["netns", "del", name])
}

impl Drop for Netns {
    fn drop(&mut self) {
        if let Err(e) = destroy(&self.name) {
            // a drop cannot fail: the program decides whether and where this is said
            log::warn!("could not remove namespace {}: {e}", self.name);
        }
    }
}
