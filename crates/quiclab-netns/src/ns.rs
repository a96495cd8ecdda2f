//! Named network namespaces (as `ip netns` makes them: a file under /run/netns that holds the
//! namespace by a bind mount), made and removed with system calls and owned by a guard that
//! deletes them.

use std::ffi::CString;
use std::os::unix::fs::MetadataExt;
use std::process::Command;
use std::sync::{Mutex, MutexGuard};

use crate::error::{Context, Error, Result};
use crate::rtnl::Rtnl;
use crate::sys;

/// Every namespace quiclab creates starts with this; `quiclab clean` looks for nothing else.
pub const PREFIX: &str = "quiclab-";
/// Where this process's namespace handles are: `ip netns`'s /run/netns, or a run's private
/// directory inside a user namespace ([`crate::rootless`]).
pub fn netns_dir() -> &'static str {
    crate::rootless::netns_dir()
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

/// A network namespace, deleted (with every process still inside it) when dropped. It keeps a
/// route-netlink socket of its own, through which its devices are configured.
pub struct Netns {
    name: String,
    rtnl: Mutex<Rtnl>,
}

impl std::fmt::Debug for Netns {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Netns").field("name", &self.name).finish()
    }
}

fn c_path(path: &str) -> std::io::Result<CString> {
    CString::new(path).map_err(|_| std::io::Error::other("a path with a NUL byte"))
}

fn cvt(r: libc::c_int) -> std::io::Result<()> {
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Makes [`netns_dir`] a shared mount point, as `ip netns add` does, so that a namespace
/// unmounted there is unmounted in every mount namespace (and so freed).
fn share_netns_dir() -> std::io::Result<()> {
    std::fs::create_dir_all(netns_dir())?;
    let dir = c_path(netns_dir())?;
    let none = c_path("none")?;
    let shared = || {
        // SAFETY: valid C strings; no data argument.
        cvt(unsafe {
            libc::mount(
                c"".as_ptr(),
                dir.as_ptr(),
                none.as_ptr(),
                libc::MS_SHARED | libc::MS_REC,
                std::ptr::null(),
            )
        })
    };
    match shared() {
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
            // not a mount point yet: make it one (a bind mount onto itself), then share it
            // SAFETY: as above.
            cvt(unsafe {
                libc::mount(
                    dir.as_ptr(),
                    dir.as_ptr(),
                    none.as_ptr(),
                    libc::MS_BIND | libc::MS_REC,
                    std::ptr::null(),
                )
            })?;
            shared()
        }
        r => r,
    }
}

/// On a new thread: a new network namespace, held by a bind mount onto `path` (an empty file),
/// its loopback up, and a netlink socket inside it.
fn new_namespace(path: &str) -> std::io::Result<Rtnl> {
    let target = c_path(path)?;
    std::thread::scope(|s| {
        s.spawn(|| {
            // the namespace is the thread's alone; the thread ends here
            // SAFETY: plain syscall on the calling thread.
            cvt(unsafe { libc::unshare(libc::CLONE_NEWNET) })?;
            let source = c_path("/proc/thread-self/ns/net")?;
            let none = c_path("none")?;
            // SAFETY: valid C strings; no data argument.
            cvt(unsafe {
                libc::mount(
                    source.as_ptr(),
                    target.as_ptr(),
                    none.as_ptr(),
                    libc::MS_BIND,
                    std::ptr::null(),
                )
            })?;
            let mut rtnl = Rtnl::new()?;
            // the loopback device is always index 1
            rtnl.up(1)?;
            Ok(rtnl)
        })
        .join()
        .unwrap_or_else(|_| Err(std::io::Error::other("thread panicked")))
    })
}

impl Netns {
    /// Creates `name` with its loopback up.
    pub fn create(name: &str) -> Result<Self> {
        if !sys::is_root() {
            return Err(Error::NotRoot);
        }
        let path = format!("{}/{name}", netns_dir());
        let what = || format!("cannot create namespace {name}");
        share_netns_dir().context(|| format!("cannot share {}", netns_dir()))?;
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
            .context(what)?;
        match new_namespace(&path) {
            Ok(rtnl) => Ok(Netns {
                name: name.to_string(),
                rtnl: Mutex::new(rtnl),
            }),
            Err(e) => {
                let _ = remove(&path);
                Err(e).context(what)
            }
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn path(&self) -> String {
        format!("{}/{}", netns_dir(), self.name)
    }

    /// The namespace's netlink socket.
    pub(crate) fn rtnl(&self) -> MutexGuard<'_, Rtnl> {
        self.rtnl.lock().unwrap_or_else(|p| p.into_inner())
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

/// Pids of the processes inside namespace `name` (as `ip netns pids` finds them: those whose
/// network namespace is the one the file holds).
pub fn pids_in(name: &str) -> Vec<i32> {
    let Ok(ns) = std::fs::metadata(format!("{}/{name}", netns_dir())) else {
        return Vec::new();
    };
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    procs
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::metadata(format!("/proc/{pid}/ns/net"))
                .is_ok_and(|m| (m.dev(), m.ino()) == (ns.dev(), ns.ino()))
        })
        .collect()
}

/// Unmounts the namespace file at `path` and removes it: the namespace goes once no process is
/// left in it. A file that was never mounted (its run died while making it) is removed too.
fn remove(path: &str) -> std::io::Result<()> {
    let c = c_path(path)?;
    // SAFETY: a valid C string.
    if let Err(e) = cvt(unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) })
        && e.raw_os_error() != Some(libc::EINVAL)
    {
        return Err(e);
    }
    std::fs::remove_file(path)
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
    remove(&format!("{}/{name}", netns_dir())).context(|| format!("cannot remove namespace {name}"))
}

impl Drop for Netns {
    fn drop(&mut self) {
        if let Err(e) = destroy(&self.name) {
            // a drop cannot fail: the program decides whether and where this is said
            log::warn!("could not remove namespace {}: {e}", self.name);
        }
    }
}
