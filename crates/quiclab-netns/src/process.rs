//! Processes started inside a namespace, owned by a guard that stops them.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use crate::error::{Context, Result};
use crate::ns::Netns;

thread_local! {
    /// The CPUs the commands this thread starts are bound to; `None`: any.
    static CHILD_CPUS: std::cell::Cell<Option<libc::cpu_set_t>> =
        const { std::cell::Cell::new(None) };
}

/// Binds the commands this thread starts from now on (and what they start in turn) to `cpus`;
/// `None` lets them run on any CPU again. Trials running side by side each get a core of
/// their own this way: one trial's process start or handshake does not take the core another
/// trial's endpoints are on.
pub fn bind_children_of_this_thread(cpus: Option<&[usize]>) {
    let set = cpus.map(|cpus| {
        // SAFETY: cpu_set_t is plain data; CPU_ZERO/CPU_SET write within it.
        let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        for &c in cpus {
            unsafe { libc::CPU_SET(c, &mut set) };
        }
        set
    });
    CHILD_CPUS.with(|c| c.set(set));
}

/// How a spawned command is wired.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Own process group (stopped as a group), stdin from /dev/null, output inherited.
    Background,
    /// Own process group, all three streams inherited (a client run from a terminal).
    Foreground,
    /// Stays in quiclab's process group so that it can own the terminal (an interactive shell).
    Interactive,
}

/// What is done in a started process just before its program starts.
#[derive(Debug, Clone, Default)]
pub struct Setup {
    /// Descriptors of the starting process that the program inherits, at the same numbers.
    pub keep: Vec<RawFd>,
    /// Sysctls of its namespace written first: (path under /proc/sys, value).
    pub sysctls: Vec<(String, String)>,
}

/// A running command. Dropping it terminates its process group (SIGTERM, then SIGKILL after a
/// grace period) and reaps it. It also dies by SIGKILL if quiclab dies (PR_SET_PDEATHSIG).
#[derive(Debug)]
pub struct Process {
    child: Option<Child>,
    group: bool,
    label: String,
    /// CPU time it used, once its exit was seen (before it was reaped).
    cpu: Option<Duration>,
}

impl Process {
    /// Runs `sh -c CMD` inside `ns` with extra environment variables.
    pub fn spawn(
        ns: &Netns,
        label: &str,
        cmd: &str,
        env: &[(String, String)],
        mode: Mode,
    ) -> Result<Self> {
        Self::spawn_with_stdout(ns, label, cmd, env, mode, Stdio::inherit())
    }

    /// [`Process::spawn`], with the command's standard output going to `stdout` instead of
    /// quiclab's.
    pub fn spawn_with_stdout(
        ns: &Netns,
        label: &str,
        cmd: &str,
        env: &[(String, String)],
        mode: Mode,
        stdout: Stdio,
    ) -> Result<Self> {
        let mut c = Command::new("sh");
        c.arg("-c")
            .arg(cmd)
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdout(stdout);
        Self::start(ns, label, c, mode, &Setup::default())
    }

    /// Starts `cmd` (its program, arguments, environment and standard output and error as the
    /// caller set them; no shell) inside `ns`, with `setup` done in the new process just
    /// before the program starts.
    pub fn start(
        ns: &Netns,
        label: &str,
        mut c: Command,
        mode: Mode,
        setup: &Setup,
    ) -> Result<Self> {
        let shown = format!("{:?}", c.get_program());
        let nsfile = std::fs::File::open(ns.path())
            .context(|| format!("cannot open namespace {}", ns.name()))?;
        let nsfd = nsfile.as_raw_fd();
        let group = mode != Mode::Interactive;
        if mode == Mode::Background {
            c.stdin(Stdio::null());
        }
        let cpus = CHILD_CPUS.with(|c| c.get());
        let keep = setup.keep.clone();
        let sysctls: Vec<(std::ffi::CString, Vec<u8>)> = setup
            .sysctls
            .iter()
            .map(|(path, value)| {
                std::ffi::CString::new(path.as_str())
                    .map(|p| (p, value.as_bytes().to_vec()))
                    .map_err(std::io::Error::other)
                    .context(|| format!("sysctl path {path:?}"))
            })
            .collect::<Result<_>>()?;
        // SAFETY: only async-signal-safe calls (setns, sched_setaffinity, fcntl, open, write,
        // close) between fork and exec, on memory prepared before the fork; nsfd stays open
        // until spawn returns, and the descriptors to keep are the caller's, open while it
        // waits here.
        unsafe {
            c.pre_exec(move || {
                if libc::setns(nsfd, libc::CLONE_NEWNET) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                // /proc/sys/net is the namespace of the process that opens it: this one's now
                for (path, value) in &sysctls {
                    let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
                    if fd < 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    let n = libc::write(fd, value.as_ptr().cast(), value.len());
                    let e = std::io::Error::last_os_error();
                    libc::close(fd);
                    if n != value.len() as isize {
                        return Err(e);
                    }
                }
                for &fd in &keep {
                    // the child's copy of the descriptor table only
                    if libc::fcntl(fd, libc::F_SETFD, 0) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                if let Some(set) = &cpus {
                    // a binding the kernel refuses (a CPU gone offline) leaves the command
                    // free to run anywhere, as without one
                    libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), set);
                }
                Ok(())
            })
        };
        tie_to_parent(&mut c, group);
        let child = c.spawn().context(|| {
            let sysctls: Vec<&str> = setup.sysctls.iter().map(|(p, _)| p.as_str()).collect();
            if sysctls.is_empty() {
                format!("cannot start {label} command {shown}")
            } else {
                format!(
                    "cannot start {label} command {shown} (or set {} in its namespace)",
                    sysctls.join(", ")
                )
            }
        })?;
        drop(nsfile);
        Ok(Process {
            child: Some(child),
            group,
            label: label.to_string(),
            cpu: None,
        })
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// The command's standard output, when it was started with a pipe there (once).
    pub fn take_stdout(&mut self) -> Option<std::process::ChildStdout> {
        self.child.as_mut()?.stdout.take()
    }

    pub fn label(&self) -> &str {
        &self.label
    }

    /// The CPU time (user and system) the command used, its own and that of the processes it
    /// waited for, once it has exited and been waited for here (`None` before).
    pub fn cpu(&self) -> Option<Duration> {
        self.cpu
    }

    /// Exit status if it has exited.
    pub fn try_wait(&mut self) -> Result<Option<ExitStatus>> {
        match &mut self.child {
            Some(c) => {
                try_wait_noting(c, &mut self.cpu).context(|| format!("waiting for {}", self.label))
            }
            None => Ok(None),
        }
    }

    /// Waits up to `timeout` for the command to exit: its status, or `None` if it still runs.
    /// Wakes the moment it exits (a pidfd), not at the next tick of a poll.
    pub fn wait_timeout(&mut self, timeout: Duration) -> Result<Option<ExitStatus>> {
        let label = &self.label;
        match &mut self.child {
            Some(c) => {
                wait_noting(c, timeout, &mut self.cpu).context(|| format!("waiting for {label}"))
            }
            None => Ok(None),
        }
    }

    /// Stops the command (whole process group), waiting up to `grace` after SIGTERM.
    pub fn stop(&mut self, grace: Duration) -> Option<ExitStatus> {
        let mut child = self.child.take()?;
        if let Ok(Some(st)) = try_wait_noting(&mut child, &mut self.cpu) {
            self.kill_group(libc::SIGKILL, child.id());
            return Some(st);
        }
        self.kill_group(libc::SIGTERM, child.id());
        let mut cpu = self.cpu;
        if let Ok(Some(st)) = wait_noting(&mut child, grace, &mut cpu) {
            self.cpu = cpu;
            self.kill_group(libc::SIGKILL, child.id());
            return Some(st);
        }
        self.kill_group(libc::SIGKILL, child.id());
        // killed: it exits at once (the wait bounds a process stuck in the kernel)
        let _ = wait_noting(&mut child, KILLED_EXIT, &mut cpu);
        self.cpu = cpu;
        child.wait().ok()
    }

    fn kill_group(&self, sig: libc::c_int, pid: u32) {
        let target = if self.group {
            -(pid as i32)
        } else {
            pid as i32
        };
        // SAFETY: signals only the process (group) we started; its pid is still ours because we
        // have not reaped it yet (or, for a group, members may outlive the leader).
        unsafe { libc::kill(target, sig) };
    }
}

/// How long a command killed by SIGKILL is given to exit before it is waited for without a bound.
const KILLED_EXIT: Duration = Duration::from_secs(1);

/// `child.try_wait()`, recording in `cpu` the child's CPU time when it has exited (read before
/// it is reaped: the kernel forgets it then).
fn try_wait_noting(
    child: &mut Child,
    cpu: &mut Option<Duration>,
) -> std::io::Result<Option<ExitStatus>> {
    match crate::sys::exited_child_cpu(child.id()) {
        Ok(None) => return Ok(None),
        Ok(Some(used)) => *cpu = Some(used),
        // reaped already: its status is the one kept
        Err(_) => {}
    }
    child.try_wait()
}

/// Waits up to `timeout` for `child` to exit, woken by its pidfd the moment it does; where
/// pidfds are missing (Linux before 5.3), by polling every millisecond.
pub fn wait_timeout(child: &mut Child, timeout: Duration) -> std::io::Result<Option<ExitStatus>> {
    wait_noting(child, timeout, &mut None)
}

/// [`wait_timeout`], recording the child's CPU time in `cpu` as it exits.
fn wait_noting(
    child: &mut Child,
    timeout: Duration,
    cpu: &mut Option<Duration>,
) -> std::io::Result<Option<ExitStatus>> {
    let deadline = Instant::now() + timeout;
    // SAFETY: pidfd_open of our own child, not yet reaped (so its pid is still its own).
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, child.id() as libc::pid_t, 0) };
    // SAFETY: a new descriptor, owned by nobody else.
    let pidfd = (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd as RawFd) });
    loop {
        if let Some(st) = try_wait_noting(child, cpu)? {
            return Ok(Some(st));
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(None);
        }
        match &pidfd {
            Some(pidfd) => {
                let mut p = libc::pollfd {
                    fd: pidfd.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                };
                let ms = left.as_millis().clamp(1, i32::MAX as u128) as libc::c_int;
                // SAFETY: one pollfd we own; EINTR just loops.
                unsafe { libc::poll(&mut p, 1, ms) };
            }
            None => std::thread::sleep(left.min(Duration::from_millis(1))),
        }
    }
}

/// Makes the command's process die by SIGKILL when the process that starts it dies, however
/// it dies, and (with `own_group`) lead a process group of its own, so that signals to the
/// starter's group do not reach it.
pub fn tie_to_parent(cmd: &mut Command, own_group: bool) {
    // SAFETY: only async-signal-safe calls (setpgid, prctl, getppid) between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            if own_group && libc::setpgid(0, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong);
            // the parent may have died before prctl took effect
            if libc::getppid() == 1 {
                return Err(std::io::Error::other("parent exited"));
            }
            Ok(())
        })
    };
}

impl Drop for Process {
    fn drop(&mut self) {
        self.stop(Duration::from_millis(500));
    }
}
