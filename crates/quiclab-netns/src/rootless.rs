//! Runs without root: the lab inside a user namespace quiclab makes.
//!
//! An ordinary user may make a user namespace (where unprivileged user namespaces are enabled)
//! and be root in it, holding every capability over the namespaces it then makes: network
//! namespaces, their TUN and veth devices, their sysctls, and any TCP congestion controller the
//! kernel has loaded (`TCP_CONGESTION` on a socket asks for CAP_NET_ADMIN in the socket's
//! network namespace's owner, which is this user namespace). What it cannot have is what the
//! host's root owns: real-time priority (without RLIMIT_RTPRIO), buffers past
//! `net.core.rmem_max`, `/dev/cpu_dma_latency`, and a device file the host keeps to root
//! (`/dev/net/tun` at mode 0600).
//!
//! How: a command that makes namespaces, started by a user other than root, runs itself again
//! ([`run_inside`]) with [`DIR_VAR`] naming a fresh directory of its own. That process, before any thread starts, makes a user namespace and a mount namespace
//! ([`enter`]), maps the user to root inside, and mounts a private tmpfs on the directory, in
//! which its named network namespaces ([`netns_dir`]) and run locks ([`lock_dir`]) live: the
//! host sees neither, and both vanish with the last process of the lab. The outer process
//! passes on the signals sent to it alone (a terminal's reach both), waits, removes the
//! directory, and exits as the inner did; the inner gets SIGTERM when the outer dies, and
//! cleans up as on Ctrl-C.

use std::ffi::{CString, OsString};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The environment variable that names the private directory of a run inside a user
/// namespace; set by [`run_inside`] for the process it starts (and inherited by the lab's own
/// processes).
pub const DIR_VAR: &str = "QUICLAB_ROOTLESS_DIR";

/// Where root's namespaces are named (as `ip netns` names them).
const ROOT_NETNS_DIR: &str = "/run/netns";
/// Where root's runs keep their locks.
const ROOT_LOCK_DIR: &str = "/run/quiclab";

fn private_dir() -> Option<&'static Path> {
    static DIR: OnceLock<Option<PathBuf>> = OnceLock::new();
    DIR.get_or_init(|| std::env::var_os(DIR_VAR).map(PathBuf::from))
        .as_deref()
}

/// Whether this process runs inside the user namespace of a run without root.
pub fn active() -> bool {
    private_dir().is_some()
}

/// Where this process's network namespaces are named: /run/netns, or the private directory's
/// `netns` in a run without root.
pub fn netns_dir() -> &'static str {
    static D: OnceLock<String> = OnceLock::new();
    D.get_or_init(|| match private_dir() {
        Some(d) => format!("{}/netns", d.display()),
        None => ROOT_NETNS_DIR.to_string(),
    })
}

/// Where this process's runs keep their locks: /run/quiclab, or the private directory's
/// `locks` in a run without root.
pub fn lock_dir() -> &'static str {
    static D: OnceLock<String> = OnceLock::new();
    D.get_or_init(|| match private_dir() {
        Some(d) => format!("{}/locks", d.display()),
        None => ROOT_LOCK_DIR.to_string(),
    })
}

/// Why a user namespace could not be made or entered.
#[derive(Debug, thiserror::Error)]
pub enum RootlessError {
    #[error(
        "quiclab makes its namespaces inside a user namespace when not run as root, and the \
         kernel refused one ({step}: {source}){hint}; run quiclab as root, or enable \
         unprivileged user namespaces"
    )]
    Refused {
        step: &'static str,
        source: io::Error,
        hint: String,
    },
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: io::Error,
    },
}

/// What the host's settings say about unprivileged user namespaces, for the refusal.
fn userns_hint() -> String {
    let read = |p: &str| {
        std::fs::read_to_string(p)
            .ok()
            .map(|s| s.trim().to_string())
    };
    let mut said = Vec::new();
    if let Some(v) = read("/proc/sys/user/max_user_namespaces")
        && v == "0"
    {
        said.push("user.max_user_namespaces is 0".to_string());
    }
    if let Some(v) = read("/proc/sys/kernel/unprivileged_userns_clone")
        && v == "0"
    {
        said.push("kernel.unprivileged_userns_clone is 0".to_string());
    }
    if let Some(v) = read("/proc/sys/kernel/apparmor_restrict_unprivileged_userns")
        && v == "1"
    {
        said.push("kernel.apparmor_restrict_unprivileged_userns is 1".to_string());
    }
    if said.is_empty() {
        String::new()
    } else {
        format!(": {}", said.join(", "))
    }
}

fn cvt(r: libc::c_int) -> io::Result<()> {
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

fn refused(step: &'static str) -> impl FnOnce(io::Error) -> RootlessError {
    move |source| RootlessError::Refused {
        step,
        source,
        hint: userns_hint(),
    }
}

/// Inside the process [`run_inside`] started, before any thread: makes the user and mount
/// namespaces, becomes root in them, and mounts the private tmpfs with its `netns` and
/// `locks` directories. Does nothing where [`DIR_VAR`] is not set or the process is root
/// already (the lab's own processes, started inside).
pub fn enter() -> Result<(), RootlessError> {
    let Some(dir) = private_dir() else {
        return Ok(());
    };
    if crate::sys::is_root() {
        return Ok(());
    }
    // SAFETY: getters that cannot fail.
    let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
    // SAFETY: plain syscall; the process has one thread (the caller's contract), as a new user
    // namespace requires.
    cvt(unsafe { libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNS) })
        .map_err(refused("unshare(CLONE_NEWUSER | CLONE_NEWNS)"))?;
    std::fs::write("/proc/self/setgroups", "deny").map_err(refused("/proc/self/setgroups"))?;
    std::fs::write("/proc/self/uid_map", format!("0 {uid} 1"))
        .map_err(refused("/proc/self/uid_map"))?;
    std::fs::write("/proc/self/gid_map", format!("0 {gid} 1"))
        .map_err(refused("/proc/self/gid_map"))?;
    let c = |s: &str| CString::new(s).map_err(|_| io::Error::other("a path with a NUL byte"));
    let io_err = |what: String| move |source| RootlessError::Io { what, source };
    let root = c("/").map_err(io_err("/".into()))?;
    // the lab's mounts stay in its mount namespace
    // SAFETY: valid C strings; no data argument.
    cvt(unsafe {
        libc::mount(
            std::ptr::null(),
            root.as_ptr(),
            std::ptr::null(),
            libc::MS_REC | libc::MS_PRIVATE,
            std::ptr::null(),
        )
    })
    .map_err(refused("making / private to the mount namespace"))?;
    let target = c(&dir.to_string_lossy()).map_err(io_err(dir.display().to_string()))?;
    let tmpfs = c("tmpfs").map_err(io_err("tmpfs".into()))?;
    let opts = c("mode=0700").map_err(io_err("tmpfs".into()))?;
    // SAFETY: valid C strings; the data argument is a C string tmpfs parses.
    cvt(unsafe {
        libc::mount(
            tmpfs.as_ptr(),
            target.as_ptr(),
            tmpfs.as_ptr(),
            libc::MS_NOSUID | libc::MS_NODEV,
            opts.as_ptr().cast(),
        )
    })
    .map_err(refused("mounting a tmpfs for the lab's namespaces"))?;
    for sub in [netns_dir(), lock_dir()] {
        std::fs::create_dir(sub).map_err(io_err(format!("cannot create {sub}")))?;
    }
    Ok(())
}

/// For a user other than root: runs this command again inside a user namespace (see the
/// module) and returns its exit code, once it has ended and its directory is removed. `None`
/// for root, and inside the namespace already.
pub fn run_inside() -> Option<Result<i32, RootlessError>> {
    if crate::sys::is_root() || active() {
        return None;
    }
    Some(outer())
}

/// Where the private directories of runs are made: $XDG_RUNTIME_DIR where it is this user's
/// own directory (a scheduler may pass on the submitter's), else the temporary directory.
fn private_base() -> PathBuf {
    use std::os::unix::fs::MetadataExt;
    // SAFETY: geteuid cannot fail.
    let me = unsafe { libc::geteuid() };
    std::env::var_os("XDG_RUNTIME_DIR")
        .map(PathBuf::from)
        .filter(|p| std::fs::metadata(p).is_ok_and(|m| m.is_dir() && m.uid() == me))
        .unwrap_or_else(std::env::temp_dir)
}

const PRIVATE_PREFIX: &str = "quiclab-rootless-";

/// The private directory of a run, named by this process's pid.
fn new_private_dir() -> Result<PathBuf, RootlessError> {
    let dir = private_base().join(format!("{PRIVATE_PREFIX}{}", std::process::id()));
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&dir)
        .map_err(|source| RootlessError::Io {
            what: format!("cannot create {}", dir.display()),
            source,
        })?;
    Ok(dir)
}

fn outer() -> Result<i32, RootlessError> {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGQUIT, SIGTERM};
    use signal_hook::iterator::exfiltrator::WithOrigin;
    use signal_hook::low_level::siginfo::Cause;
    let dir = new_private_dir()?;
    let removed = Removed(&dir);
    let exe = std::env::current_exe().map_err(|source| RootlessError::Io {
        what: "cannot find this program's file".into(),
        source,
    })?;
    let args: Vec<OsString> = std::env::args_os().skip(1).collect();
    // The inner process stays in this one's process group, so that it and what it starts (an
    // interactive shell in `quiclab link`) keep the terminal. A terminal's signal (Ctrl-C,
    // Ctrl-\, a hang-up: sent by the kernel to the whole group) reaches it directly; a signal
    // another process sends to this pid alone (kill, a scheduler) is passed on.
    let mut signals =
        signal_hook::iterator::SignalsInfo::<WithOrigin>::new([SIGINT, SIGTERM, SIGHUP, SIGQUIT])
            .map_err(|source| RootlessError::Io {
            what: "cannot catch signals".into(),
            source,
        })?;
    let mut cmd = std::process::Command::new(&exe);
    cmd.args(&args).env(DIR_VAR, &dir);
    // A pipe whose write end the inner process and everything it starts without closing it
    // (its reaper, which removes what a killed run leaves) inherit: it reads as ended once the
    // lab's last such process is gone, and only then is the directory removed (removed
    // earlier, a reaper still at work would make it again on the host).
    let (lab_alive, lab_end) = lab_pipe()?;
    let end_fd = lab_end.as_raw_fd();
    // SAFETY: only async-signal-safe calls (prctl, getppid, fcntl) between fork and exec.
    unsafe {
        let parent = libc::getpid();
        cmd.pre_exec(move || {
            // kept across exec (it was made close-on-exec for every other child)
            cvt(libc::fcntl(end_fd, libc::F_SETFD, 0))?;
            cvt(libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM, 0, 0, 0))?;
            // the parent died before the request took: end as it would have made us
            if libc::getppid() != parent {
                libc::_exit(130);
            }
            Ok(())
        });
    }
    let spawned = cmd.spawn();
    drop(lab_end);
    let mut child = spawned.map_err(|source| RootlessError::Io {
        what: format!("cannot start {}", exe.display()),
        source,
    })?;
    let pid = child.id() as libc::pid_t;
    let handle = signals.handle();
    let forwarder = std::thread::spawn(move || {
        for origin in signals.forever() {
            if matches!(origin.cause, Cause::Kernel) {
                continue;
            }
            // SAFETY: a signal to the process we started, by its pid.
            unsafe { libc::kill(pid, origin.signal) };
        }
    });
    let status = child.wait().map_err(|source| RootlessError::Io {
        what: "waiting for the run inside its user namespace".into(),
        source,
    });
    handle.close();
    let _ = forwarder.join();
    if wait_for_end(&lab_alive, LAB_END_WAIT) {
        drop(removed);
    } else {
        std::mem::forget(removed);
        eprintln!(
            "quiclab: warning: a process of the run was still alive {} s after it ended; {} is \
             left for `quiclab clean`",
            LAB_END_WAIT.as_secs(),
            dir.display()
        );
    }
    let status = status?;
    use std::os::unix::process::ExitStatusExt;
    Ok(status
        .code()
        .unwrap_or_else(|| 128 + status.signal().unwrap_or(0)))
}

/// How long after the inner process's end the outer waits for the rest of the lab (a reaper
/// gives its parent's run locks 5 s to be released).
const LAB_END_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// A pipe, both ends close-on-exec: (read end, write end).
fn lab_pipe() -> Result<(std::fs::File, std::os::fd::OwnedFd), RootlessError> {
    use std::os::fd::FromRawFd;
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: pipe2 fills two descriptors on success.
    cvt(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }).map_err(|source| {
        RootlessError::Io {
            what: "cannot make a pipe".into(),
            source,
        }
    })?;
    // SAFETY: both are open and ours alone.
    unsafe {
        Ok((
            std::fs::File::from_raw_fd(fds[0]),
            std::os::fd::OwnedFd::from_raw_fd(fds[1]),
        ))
    }
}

/// Whether the pipe's every writer is gone within `limit` (its read end reads 0 bytes).
fn wait_for_end(read: &std::fs::File, limit: std::time::Duration) -> bool {
    let deadline = std::time::Instant::now() + limit;
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let mut p = libc::pollfd {
            fd: read.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = libc::c_int::try_from(left.as_millis()).unwrap_or(libc::c_int::MAX);
        // SAFETY: one valid pollfd.
        let n = unsafe { libc::poll(&mut p, 1, ms) };
        if n > 0 {
            let mut b = [0u8; 16];
            // nobody writes: readable means ended (0 bytes)
            return matches!(std::io::Read::read(&mut &*read, &mut b), Ok(0) | Err(_));
        }
        if n == 0 || left.is_zero() {
            return false;
        }
        // interrupted by a signal (passed on): poll again
    }
}

/// Removes the private directories of runs without root whose outer process is gone (killed
/// before it could remove its own: they are empty on the host); returns those removed. Runs'
/// namespaces need no cleaning: they end with the run's user namespace.
pub fn clean_stale() -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(private_base()) else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name();
            let pid: libc::pid_t = name.to_str()?.strip_prefix(PRIVATE_PREFIX)?.parse().ok()?;
            // SAFETY: signal 0 only tests whether the pid exists.
            let alive = unsafe { libc::kill(pid, 0) } == 0
                || io::Error::last_os_error().raw_os_error() == Some(libc::EPERM);
            (!alive && std::fs::remove_dir(e.path()).is_ok()).then(|| e.path())
        })
        .collect()
}

/// Removes the private directory when dropped (it is empty on the host: the tmpfs was mounted
/// in the inner process's mount namespace only).
struct Removed<'a>(&'a Path);

impl Drop for Removed<'_> {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir(self.0);
    }
}

/// Whether this process may open `/dev/net/tun` to read and write (a user namespace's root is
/// the host's user for the device file's permissions); the refusal names the device's mode.
pub fn tun_accessible() -> crate::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    match std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/net/tun")
    {
        Ok(_) => Ok(()),
        Err(source) => Err(crate::Error::NoTun {
            mode: std::fs::metadata("/dev/net/tun")
                .map(|m| format!("{:04o}", m.permissions().mode() & 0o7777))
                .unwrap_or_else(|e| format!("unknown: {e}")),
            source,
        }),
    }
}

/// The host's user this process is root for: the user namespace's map (`0 UID 1`), or None
/// outside a run without root.
pub fn host_user() -> Option<u32> {
    if !active() {
        return None;
    }
    let map = std::fs::read_to_string("/proc/self/uid_map").ok()?;
    let mut f = map.split_whitespace();
    (f.next()? == "0").then_some(())?;
    f.next()?.parse().ok()
}

/// How this process holds the lab's privileges, for the report's provenance: root, or a user
/// namespace of a host user, with what it goes without ([`limits`]).
pub fn privileges() -> String {
    match host_user() {
        None => "root".into(),
        Some(uid) => {
            let limits = limits();
            let mut s = format!("a user namespace of user {uid} (not root)");
            if !limits.is_empty() {
                s.push_str(": ");
                s.push_str(&limits.join("; "));
            }
            s
        }
    }
}

/// What a run inside a user namespace goes without, for the report's provenance and the
/// run's first lines: a real-time priority (or nice -20) for the emulator's threads, and
/// buffers past the system's maximum. Each is tried, not assumed, once per process: the
/// answer does not change within a run, and the run's notes and its provenance share it.
pub fn limits() -> &'static [String] {
    static LIMITS: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
    LIMITS.get_or_init(try_limits)
}

fn try_limits() -> Vec<String> {
    let mut v = Vec::new();
    let realtime = std::thread::spawn(|| crate::sys::realtime_priority(1))
        .join()
        .unwrap_or(false);
    if !realtime {
        let nice = std::thread::spawn(crate::sys::highest_ordinary_priority)
            .join()
            .unwrap_or(false);
        v.push(if nice {
            "no real-time priority (RLIMIT_RTPRIO is 0): the emulator's threads run at nice -20"
                .to_string()
        } else {
            "no real-time priority nor nice -20 (RLIMIT_RTPRIO and RLIMIT_NICE): the \
             emulator's threads run at the ordinary priority, where a busy host delays them"
                .to_string()
        });
    }
    let forced = std::net::UdpSocket::bind("127.0.0.1:0")
        .is_ok_and(|s| crate::probe::forced_rcvbuf(&s, 1 << 20).is_ok());
    if !forced {
        let max = std::fs::read_to_string("/proc/sys/net/core/rmem_max")
            .map(|s| s.trim().to_string())
            .unwrap_or_else(|_| "unknown".into());
        v.push(format!(
            "sockets' buffers capped by net.core.rmem_max ({max} bytes; SO_RCVBUFFORCE is root's)"
        ));
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_s_directories_are_the_defaults_outside_a_user_namespace() {
        // the test binary runs without DIR_VAR (nothing here sets it)
        assert!(std::env::var_os(DIR_VAR).is_none());
        assert_eq!(netns_dir(), "/run/netns");
        assert_eq!(lock_dir(), "/run/quiclab");
        assert!(!active());
        assert!(enter().is_ok());
    }
}
