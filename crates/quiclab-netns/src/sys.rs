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

/// Gives this thread a real-time (SCHED_FIFO) priority so that endpoints competing for the CPU
/// do not delay its wake-ups. Returns false where that is not permitted.
pub fn realtime_priority(priority: i32) -> bool {
    let p = libc::sched_param {
        sched_priority: priority,
    };
    // SAFETY: affects only the calling thread (pid 0); p is a valid sched_param.
    unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &p) == 0 }
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
