//! Thin wrappers over the Linux calls the runtime needs: the monotonic clock, timerfd, eventfd,
//! epoll, setns and prctl. Each returns `io::Result` with the OS error.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

fn cvt(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// CLOCK_MONOTONIC now, in nanoseconds (the clock `std::time::Instant` uses on Linux).
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the timespec we own; CLOCK_MONOTONIC always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// CPU time the calling thread has used so far (user and system).
pub fn thread_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the timespec we own; the calling thread's CPU clock
    // always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// The CPU time (user and system) of an exited child `pid` not yet reaped, with that of the
/// children it reaped itself; `Ok(None)` while it runs. Leaves it to be reaped by whoever
/// waits for it (`WNOWAIT`). An error: not a child of ours to wait for (already reaped).
pub fn exited_child_cpu(pid: u32) -> io::Result<Option<Duration>> {
    // SAFETY: plain data, written by the kernel.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // the system call's fifth argument (which the C library's wrapper lacks) is the
    // process's resource usage, its threads and reaped children included
    // SAFETY: a child of ours, peeked at without reaping; both structures are ours.
    let r = unsafe {
        libc::syscall(
            libc::SYS_waitid,
            libc::P_PID,
            pid as libc::id_t,
            &mut info as *mut libc::siginfo_t,
            libc::WEXITED | libc::WNOWAIT | libc::WNOHANG,
            &mut usage as *mut libc::rusage,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a successful waitid sets si_pid (0 when the child has not exited)
    if unsafe { info.si_pid() } == 0 {
        return Ok(None);
    }
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    Ok(Some(tv(usage.ru_utime) + tv(usage.ru_stime)))
}

/// The PM QoS device through which a process asks the kernel to bound how long an idle CPU
/// takes to wake.
pub const CPU_WAKE_LATENCY_DEV: &str = "/dev/cpu_dma_latency";

/// A request, held open, that idle CPUs wake within 0 µs: the kernel keeps them out of every
/// sleep state that takes longer (a virtual machine's halt, a deep C-state), so a sleeping
/// thread is woken sooner at its timer. It lasts as long as this value: the kernel drops the
/// request when the descriptor closes, however the process ends (SIGKILL included).
///
/// What it does here (a 2-core virtual machine, a thread woken by an absolute timer every
/// millisecond): p50 66 µs and p99 749 µs late without it, 36 and 143 µs with it; an idle CPU
/// then polls instead of halting, which the host pays for.
#[derive(Debug)]
pub struct CpusAwake(#[allow(dead_code)] std::fs::File);

impl CpusAwake {
    /// Asks the kernel to keep idle CPUs awake (root; a kernel with PM QoS).
    pub fn hold() -> io::Result<CpusAwake> {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .open(CPU_WAKE_LATENCY_DEV)?;
        // the request is a binary 32-bit number of microseconds
        f.write_all(&0i32.to_ne_bytes())?;
        Ok(CpusAwake(f))
    }

    /// The kernel's current bound, µs: the strictest request of any process (root).
    pub fn bound_us() -> io::Result<i32> {
        use std::io::Read;
        let mut b = [0u8; 4];
        std::fs::File::open(CPU_WAKE_LATENCY_DEV)?.read_exact(&mut b)?;
        Ok(i32::from_ne_bytes(b))
    }
}

/// A link's clock: time since its epoch on CLOCK_MONOTONIC.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    epoch_ns: u64,
}

impl Clock {
    pub fn start() -> Self {
        Clock {
            epoch_ns: monotonic_ns(),
        }
    }
    pub fn now(&self) -> Duration {
        Duration::from_nanos(monotonic_ns().saturating_sub(self.epoch_ns))
    }
    /// The absolute CLOCK_MONOTONIC time of `t` after the epoch.
    pub fn absolute_ns(&self, t: Duration) -> u64 {
        self.epoch_ns + t.as_nanos() as u64
    }
}

/// A one-shot CLOCK_MONOTONIC timer armed at absolute times (hrtimer-backed, nanosecond
/// resolution).
pub struct TimerFd(OwnedFd);

impl TimerFd {
    pub fn new() -> io::Result<Self> {
        // SAFETY: plain syscall; the returned fd is owned below.
        let fd = cvt(unsafe {
            libc::timerfd_create(
                libc::CLOCK_MONOTONIC,
                libc::TFD_NONBLOCK | libc::TFD_CLOEXEC,
            )
        })?;
        // SAFETY: fd was just created and is owned by nobody else.
        Ok(TimerFd(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    /// Arms the timer at absolute monotonic time `ns`; `None` disarms it.
    pub fn set_absolute(&self, ns: Option<u64>) -> io::Result<()> {
        let it_value = match ns {
            // a zero it_value disarms, so an already-due deadline becomes 1 ns
            Some(ns) => libc::timespec {
                tv_sec: (ns / 1_000_000_000) as libc::time_t,
                tv_nsec: (ns % 1_000_000_000).max(1) as libc::c_long,
            },
            None => libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            },
        };
        let spec = libc::itimerspec {
            it_interval: libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            },
            it_value,
        };
        // SAFETY: spec is a valid itimerspec; old value not requested.
        cvt(unsafe {
            libc::timerfd_settime(
                self.0.as_raw_fd(),
                libc::TFD_TIMER_ABSTIME,
                &spec,
                std::ptr::null_mut(),
            )
        })?;
        Ok(())
    }

    /// Consumes an expiry, if any.
    pub fn clear(&self) {
        let mut buf = [0u8; 8];
        // SAFETY: reads at most 8 bytes into our buffer; EAGAIN when not expired is fine.
        unsafe { libc::read(self.0.as_raw_fd(), buf.as_mut_ptr().cast(), 8) };
    }
}

impl AsRawFd for TimerFd {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }
}

/// An eventfd used to wake a thread from epoll (to stop it).
pub struct EventFd(OwnedFd);

impl EventFd {
    pub fn new() -> io::Result<Self> {
        // SAFETY: plain syscall.
        let fd = cvt(unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) })?;
        // SAFETY: fd was just created.
        Ok(EventFd(unsafe { OwnedFd::from_raw_fd(fd) }))
    }
    pub fn signal(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a u64 we own.
        unsafe { libc::write(self.0.as_raw_fd(), (&one as *const u64).cast(), 8) };
    }
}

impl AsRawFd for EventFd {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }
}

/// A minimal epoll set: register fds for readability with a token, wait for tokens.
pub struct Epoll(OwnedFd);

impl Epoll {
    pub fn new() -> io::Result<Self> {
        // SAFETY: plain syscall.
        let fd = cvt(unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) })?;
        // SAFETY: fd was just created.
        Ok(Epoll(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    pub fn add(&self, fd: RawFd, token: u64) -> io::Result<()> {
        let mut ev = libc::epoll_event {
            events: libc::EPOLLIN as u32,
            u64: token,
        };
        // SAFETY: ev is valid for the call; fd stays open while registered (owned by caller).
        cvt(unsafe { libc::epoll_ctl(self.0.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, &mut ev) })?;
        Ok(())
    }

    /// Waits until a registered fd is readable (blocking without a timeout: timers are fds).
    /// Returns a bit set of ready tokens (tokens must be < 64).
    pub fn wait(&self) -> io::Result<u64> {
        let mut evs = [libc::epoll_event { events: 0, u64: 0 }; 8];
        loop {
            // SAFETY: evs has room for 8 events.
            let n = unsafe { libc::epoll_wait(self.0.as_raw_fd(), evs.as_mut_ptr(), 8, -1) };
            if n < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(e);
            }
            return Ok(evs[..n as usize]
                .iter()
                .fold(0, |acc, e| acc | (1 << e.u64)));
        }
    }
}

/// Sets this thread's timer slack to 1 ns so that timer expiries are not coalesced (the default
/// slack is 50 us).
pub fn tight_timer_slack() {
    // SAFETY: PR_SET_TIMERSLACK takes an unsigned long and affects only this thread.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong) };
}

/// Moves this thread into the network namespace at `path` (e.g. `/run/netns/NAME`).
pub fn enter_netns(path: &str) -> io::Result<()> {
    let f = std::fs::File::open(path)?;
    // SAFETY: f is an open namespace file; setns affects only this thread.
    cvt(unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) })?;
    Ok(())
}

/// True when running as root (needed for namespaces and TUN devices).
pub fn is_root() -> bool {
    // SAFETY: geteuid cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// Gives this thread a real-time (SCHED_FIFO) priority so that ordinary threads competing for
/// the CPU do not delay its wake-ups; for threads whose work is short (the kernel stalls a
/// real-time thread that keeps a CPU busy, see `forward`). Returns false where that is not
/// permitted.
pub fn realtime_priority(priority: i32) -> bool {
    let p = libc::sched_param {
        sched_priority: priority,
    };
    // SAFETY: affects only the calling thread (pid 0); p is a valid sched_param.
    unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &p) == 0 }
}

/// Gives this thread the highest ordinary priority (nice -20): ordinary threads competing for the CPU weigh 1/87 as much, and the
/// kernel never stalls it to let them run as it does a real-time thread that starves them (see
/// `forward`). Returns false where that is not permitted.
pub fn highest_ordinary_priority() -> bool {
    // SAFETY: on Linux, PRIO_PROCESS with who = 0 sets the calling thread's nice value only.
    unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, -20) == 0 }
}

/// Keeps memory the allocator has freed in the process instead of returning it to the kernel.
///
/// Why: glibc returns a freed block of 128 KiB or more with `munmap` (and trims the heap's top
/// beyond 128 KiB), so a program that allocates and frees large buffers at a high rate (a QUIC
/// endpoint's datagram batches at gigabits per second) gets fresh zeroed pages, one page fault
/// each, again and again: 9 % of the CPU time of a 10 Gbit/s QUIC transfer was page faults.
/// Keeping the memory raised one HTTP/3 connection over a direct veth pair from 12.1-16.8 to
/// 18.5-20.7 Gbit/s at MTU 9000 and from 8.1-9.5 to 9.9-10.0 at MTU 1500 (three pairs each).
/// Thresholds of 256 MiB keep such buffers in the heap. Call before threads start.
pub fn keep_freed_memory() {
    const THRESHOLD: libc::c_int = 256 << 20;
    // SAFETY: mallopt only changes the allocator's parameters; no memory is touched.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, THRESHOLD);
        libc::mallopt(libc::M_TRIM_THRESHOLD, THRESHOLD);
    }
}

/// The variable through which a quiclab process that has locked its program's pages tells the
/// quiclab processes it starts: `PID:DEV:INODE` of itself and its program file.
pub const RESIDENT_VAR: &str = "QUICLAB_RESIDENT";

/// How [`keep_program_resident`] kept the program's pages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Residency {
    /// This many bytes locked (root): they stay in memory, for this process and for every
    /// process mapping the same files.
    Locked(u64),
    /// This many bytes mapped in (where locking is not permitted).
    Populated(u64),
    /// Nothing done: the live process with this pid runs the same program file and has
    /// locked it ([`RESIDENT_VAR`]), so the page cache holds every page of it and of its
    /// libraries, and a first touch here is a minor fault that never waits for the disk.
    Inherited(u32),
}

impl Residency {
    /// The value of [`RESIDENT_VAR`] for the processes this one starts: where this process
    /// locked its pages, or where its own ancestor did.
    pub fn marker(self) -> Option<String> {
        let pid = match self {
            Residency::Locked(_) => std::process::id(),
            Residency::Inherited(pid) => pid,
            Residency::Populated(_) => return None,
        };
        let (dev, ino) = file_identity(&format!("/proc/{pid}/exe"))?;
        Some(format!("{pid}:{dev}:{ino}"))
    }
}

/// Maps every page of this process's program and libraries (its file-backed mappings) now and
/// keeps them in memory: locked where permitted (root), else at least populated. Nothing is
/// done when `inherited` (the value of [`RESIDENT_VAR`]) names a live process that runs the
/// same program file and has locked it.
///
/// Why: a thread that touches a code page for the first time mid-measurement takes a page
/// fault, and when the page cache has dropped that page (hosts that reclaim idle cache do so
/// within a minute) the fault waits for the disk or for the reclaimer's locks, tens of
/// milliseconds in which a real-time endpoint or forwarding thread does not run. Pages mapped
/// in a process's page tables are not dropped while it lives, and locked pages not while any
/// process locks them. Locking takes 1.6 ms here (every page of the program mapped): a
/// campaign's endpoints, two quiclab processes per trial started by a runner that has locked
/// the same program, are spared it.
pub fn keep_program_resident(inherited: Option<&str>) -> io::Result<Residency> {
    if let Some(pid) = inherited.and_then(locked_by_ancestor) {
        return Ok(Residency::Inherited(pid));
    }
    let maps = std::fs::read_to_string("/proc/self/maps")?;
    let (mut kept, mut all_locked) = (0, true);
    for line in maps.lines() {
        let Some((start, end)) = file_mapping(line) else {
            continue;
        };
        let (addr, len) = (start as *mut libc::c_void, (end - start) as usize);
        // SAFETY: the range is one of this process's mappings as the kernel listed it; locking
        // or populating it changes residency only, never contents.
        let locked = unsafe { libc::mlock(addr, len) == 0 };
        let ok = locked || unsafe { libc::madvise(addr, len, libc::MADV_POPULATE_READ) == 0 };
        if !ok {
            return Err(io::Error::last_os_error());
        }
        all_locked &= locked;
        kept += end - start;
    }
    Ok(if all_locked {
        Residency::Locked(kept)
    } else {
        Residency::Populated(kept)
    })
}

/// The pid a [`RESIDENT_VAR`] value names, if that process lives and runs the program file
/// this process runs.
fn locked_by_ancestor(value: &str) -> Option<u32> {
    let mut f = value.split(':');
    let pid: u32 = f.next()?.parse().ok()?;
    let dev: u64 = f.next()?.parse().ok()?;
    let ino: u64 = f.next()?.parse().ok()?;
    let theirs = file_identity(&format!("/proc/{pid}/exe"))?;
    let ours = file_identity("/proc/self/exe")?;
    (theirs == (dev, ino) && ours == theirs).then_some(pid)
}

/// The device and inode of the file at `path` (links followed).
fn file_identity(path: &str) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path).ok()?;
    Some((m.dev(), m.ino()))
}

/// The address range of a `/proc/PID/maps` line that maps a file readably (program text, read-only
/// data, libraries); `None` for anonymous memory, special mappings and inaccessible ranges.
fn file_mapping(line: &str) -> Option<(u64, u64)> {
    let mut f = line.split_whitespace();
    let (range, perms) = (f.next()?, f.next()?);
    let (_offset, _dev, inode) = (f.next()?, f.next()?, f.next()?);
    let path = f.next()?;
    if inode == "0" || !path.starts_with('/') || !perms.starts_with('r') {
        return None;
    }
    let (a, b) = range.split_once('-')?;
    Some((
        u64::from_str_radix(a, 16).ok()?,
        u64::from_str_radix(b, 16).ok()?,
    ))
}

/// Sleeps until absolute CLOCK_MONOTONIC time `ns`.
pub fn sleep_until(ns: u64) {
    let ts = libc::timespec {
        tv_sec: (ns / 1_000_000_000) as libc::time_t,
        tv_nsec: (ns % 1_000_000_000) as libc::c_long,
    };
    // SAFETY: ts is valid; an interrupted sleep simply returns early, which callers tolerate.
    unsafe {
        libc::clock_nanosleep(
            libc::CLOCK_MONOTONIC,
            libc::TIMER_ABSTIME,
            &ts,
            std::ptr::null_mut(),
        )
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_exited_childs_cpu_time_is_read_before_it_is_reaped() {
        // a child that only sleeps: running, it has no figure yet
        let mut sleeper = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        assert_eq!(exited_child_cpu(sleeper.id()).unwrap(), None);
        sleeper.kill().unwrap();
        sleeper.wait().unwrap();
        // reaped: no longer a child to peek at
        assert!(exited_child_cpu(sleeper.id()).is_err());

        // a child that computes for a while: its figure is at most its lifetime (one thread)
        // and it is left to be reaped, with its status
        let started = std::time::Instant::now();
        let mut busy = std::process::Command::new("sh")
            .args([
                "-c",
                "i=0; while [ $i -lt 100000 ]; do i=$((i+1)); done; exit 3",
            ])
            .spawn()
            .unwrap();
        let used = loop {
            if let Some(d) = exited_child_cpu(busy.id()).unwrap() {
                break d;
            }
            std::thread::sleep(Duration::from_millis(1));
        };
        let lived = started.elapsed();
        assert!(used > Duration::from_millis(10), "{used:?}");
        assert!(used <= lived, "{used:?} of CPU in {lived:?}");
        assert_eq!(busy.wait().unwrap().code(), Some(3));
    }

    #[test]
    fn idle_cpus_are_kept_awake_while_the_request_is_held_and_no_longer() {
        assert!(is_root(), "the PM QoS device is root's");
        let before = CpusAwake::bound_us().unwrap();
        assert!(
            before > 0,
            "another process already holds a request of {before} µs"
        );
        let held = CpusAwake::hold().unwrap();
        assert_eq!(CpusAwake::bound_us().unwrap(), 0);
        drop(held);
        assert_eq!(CpusAwake::bound_us().unwrap(), before);
    }

    #[test]
    fn a_threads_cpu_time_grows_with_its_work_and_not_with_its_sleep() {
        let t0 = thread_cpu();
        std::thread::sleep(Duration::from_millis(50));
        let slept = thread_cpu() - t0;
        let t1 = thread_cpu();
        let until = std::time::Instant::now() + Duration::from_millis(50);
        while std::time::Instant::now() < until {
            std::hint::spin_loop();
        }
        let worked = thread_cpu() - t1;
        // a sleep costs a few system calls; 50 ms of spinning costs up to 50 ms (less only
        // while the host runs something else on the core)
        assert!(slept < Duration::from_millis(5), "{slept:?}");
        assert!(worked > Duration::from_millis(10), "{worked:?}");
        assert!(worked <= Duration::from_millis(51), "{worked:?}");
    }

    #[test]
    fn only_readable_file_mappings_are_kept() {
        let text = "55d0c0a00000-55d0c1000000 r-xp 00200000 fd:01 1234 /usr/bin/quiclab";
        assert_eq!(
            file_mapping(text),
            Some((0x55d0_c0a0_0000, 0x55d0_c100_0000))
        );
        for other in [
            // anonymous, the heap, the stack, the vDSO, a guard, a deleted file's inode 0
            "7f00-8f00 rw-p 00000000 00:00 0 ",
            "55d0c2000000-55d0c2100000 rw-p 00000000 00:00 0 [heap]",
            "7ffd0000-7ffd1000 rw-p 00000000 00:00 0 [stack]",
            "7ffd2000-7ffd3000 r-xp 00000000 00:00 0 [vdso]",
            "7f10-7f20 ---p 00000000 fd:01 99 /usr/lib/libc.so.6",
        ] {
            assert_eq!(file_mapping(other), None, "{other}");
        }
    }

    #[test]
    fn the_program_is_kept_resident() {
        let kept = match keep_program_resident(None).unwrap() {
            Residency::Locked(n) => {
                // as root every kept page is locked, and the kernel counts them
                let status = std::fs::read_to_string("/proc/self/status").unwrap();
                let locked_kb: u64 = status
                    .lines()
                    .find_map(|l| l.strip_prefix("VmLck:"))
                    .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
                    .unwrap();
                assert!(locked_kb * 1024 >= n, "{locked_kb} kB locked of {n}");
                n
            }
            Residency::Populated(n) => {
                assert!(!is_root(), "root may lock");
                n
            }
            Residency::Inherited(pid) => panic!("nothing was inherited, yet {pid}"),
        };
        // at least this test program's own text, which is megabytes
        assert!(kept > 1 << 20, "{kept} bytes");
    }

    #[test]
    fn a_live_process_that_locked_the_same_program_spares_the_lock() {
        let me = std::process::id();
        let (dev, ino) = file_identity("/proc/self/exe").unwrap();
        let marker = Residency::Inherited(me).marker().unwrap();
        assert_eq!(marker, format!("{me}:{dev}:{ino}"));
        assert_eq!(
            keep_program_resident(Some(&marker)).unwrap(),
            Residency::Inherited(me)
        );
        // stopped and reaped however the test ends
        struct Stopped(std::process::Child);
        impl Drop for Stopped {
            fn drop(&mut self) {
                let _ = self.0.kill();
                let _ = self.0.wait();
            }
        }
        // a live process of another program, this process named with another program's file
        // or another inode, a process that is gone, a value that is not one: locked here
        let other = Stopped(
            std::process::Command::new("sleep")
                .arg("30")
                .spawn()
                .unwrap(),
        );
        let op = other.0.id();
        let sleep_file = file_identity(&format!("/proc/{op}/exe")).unwrap();
        let gone = {
            let mut c = std::process::Command::new("true").spawn().unwrap();
            let pid = c.id();
            c.wait().unwrap();
            pid
        };
        for value in [
            format!("{op}:{}:{}", sleep_file.0, sleep_file.1),
            format!("{me}:{}:{}", sleep_file.0, sleep_file.1),
            format!("{me}:{dev}:{}", ino + 1),
            format!("{gone}:{dev}:{ino}"),
            "garbage".to_string(),
        ] {
            let r = keep_program_resident(Some(&value)).unwrap();
            assert!(
                matches!(r, Residency::Locked(_) | Residency::Populated(_)),
                "{value}: {r:?}"
            );
        }
        drop(other);
        assert_eq!(Residency::Populated(1).marker(), None);
    }
}
