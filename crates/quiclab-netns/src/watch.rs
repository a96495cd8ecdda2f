//! An inotify instance a long-lived process holds for a short-lived one, so that the short-lived
//! one's exit does not wait for the kernel.
//!
//! Why: when the last descriptor of an inotify instance that has held a watch is closed, the
//! kernel waits for its notification marks' grace period (SRCU) before the close returns: 10 to
//! 20 ms here. A process closes its descriptors as it exits, so that wait delays the exit
//! its parent is waiting for. An external stack's adapter (`quiclab external serve`) watches
//! its server's qlog directory and exits at every trial's end; with the instance made and held
//! by the runner ([`HeldInotify`]) and handed to it ([`inherited_inotify`]), its close only
//! drops a reference, and the runner closes the last one on a thread of its own.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// The variable that names an inherited inotify descriptor to the process it is handed to.
pub const INOTIFY_FD_VAR: &str = "QUICLAB_INOTIFY_FD";

/// A fresh inotify instance held for a process this one starts; dropping it closes it on a
/// thread of its own.
#[derive(Debug)]
pub struct HeldInotify(Option<OwnedFd>);

impl HeldInotify {
    pub fn new() -> io::Result<HeldInotify> {
        // SAFETY: a plain system call; the descriptor returned is new and ours.
        let fd = unsafe { libc::inotify_init1(libc::IN_CLOEXEC | libc::IN_NONBLOCK) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: just made, owned by nobody else.
        Ok(HeldInotify(Some(unsafe { OwnedFd::from_raw_fd(fd) })))
    }

    /// Its descriptor: to be kept open across the exec of the process it is handed to
    /// ([`crate::Setup::keep`] of [`crate::Process::start`]), named by [`INOTIFY_FD_VAR`].
    pub fn raw(&self) -> RawFd {
        self.0.as_ref().map_or(-1, AsRawFd::as_raw_fd)
    }

    /// The variable that hands it over.
    pub fn var(&self) -> (String, String) {
        (INOTIFY_FD_VAR.to_string(), self.raw().to_string())
    }
}

impl Drop for HeldInotify {
    fn drop(&mut self) {
        if let Some(fd) = self.0.take() {
            // the close waits for the kernel, working on nothing: off the caller's path (and
            // here, should the thread not start)
            let _ = std::thread::Builder::new()
                .name("quiclab-close".into())
                .spawn(move || drop(fd));
        }
    }
}

/// The inotify instance this process was handed ([`INOTIFY_FD_VAR`]), if it is one; it is
/// marked close-on-exec so that the programs this process starts do not inherit it.
pub fn inherited_inotify() -> Option<OwnedFd> {
    take_inotify(&std::env::var(INOTIFY_FD_VAR).ok()?)
}

/// The descriptor `value` names, if it is an inotify instance of this process: taken (owned
/// from now on) and marked close-on-exec.
fn take_inotify(value: &str) -> Option<OwnedFd> {
    let fd: RawFd = value.parse().ok()?;
    if fd < 0 {
        return None;
    }
    let target = std::fs::read_link(format!("/proc/self/fd/{fd}")).ok()?;
    if target.as_os_str() != "anon_inode:inotify" {
        return None;
    }
    // SAFETY: F_SETFD on a descriptor of this process that the kernel says is an inotify
    // instance, then owned here: the caller hands over the only claim on it.
    unsafe {
        if libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) != 0 {
            return None;
        }
        Some(OwnedFd::from_raw_fd(fd))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The names of the files created that `fd` has events for.
    fn created(fd: RawFd) -> Vec<String> {
        let mut buf = [0u8; 4096];
        // SAFETY: reads into a buffer we own, no longer than it (non-blocking).
        let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
        let (mut out, mut off) = (Vec::new(), 0usize);
        let head = std::mem::size_of::<libc::inotify_event>();
        while n > 0 && off + head <= n as usize {
            // SAFETY: the kernel wrote whole events; read_unaligned copes with alignment.
            let ev: libc::inotify_event =
                unsafe { std::ptr::read_unaligned(buf[off..].as_ptr().cast()) };
            let name = &buf[off + head..off + head + ev.len as usize];
            out.push(String::from_utf8_lossy(name.split(|b| *b == 0).next().unwrap()).to_string());
            off += head + ev.len as usize;
        }
        out
    }

    #[test]
    fn the_instance_outlives_the_descriptor_handed_over() {
        let dir = std::env::temp_dir().join(format!("quiclab-watch-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let held = HeldInotify::new().unwrap();
        // the copy a started process would hold, taken as it takes it
        // SAFETY: dup of a descriptor we hold; the copy is handed to take_inotify.
        let copy = take_inotify(&unsafe { libc::dup(held.raw()) }.to_string()).unwrap();
        let c = std::ffi::CString::new(dir.to_str().unwrap()).unwrap();
        // SAFETY: a NUL-ended path and an inotify descriptor of this process.
        let wd = unsafe { libc::inotify_add_watch(copy.as_raw_fd(), c.as_ptr(), libc::IN_CREATE) };
        assert!(wd >= 0, "{}", io::Error::last_os_error());
        std::fs::write(dir.join("before"), b"x").unwrap();
        assert_eq!(created(copy.as_raw_fd()), ["before"]);
        // the started process exits: its close is not the last, so its watch lives on (the
        // kernel's wait comes with the destruction of the instance, which has not happened)
        drop(copy);
        std::fs::write(dir.join("after"), b"x").unwrap();
        assert_eq!(created(held.raw()), ["after"]);
        drop(held);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn only_an_inotify_descriptor_is_taken() {
        let file = std::fs::File::open("/proc/self/status").unwrap();
        for value in [
            file.as_raw_fd().to_string(),
            "-1".into(),
            "x".into(),
            "99999".into(),
        ] {
            assert!(take_inotify(&value).is_none(), "{value}");
        }
        let held = HeldInotify::new().unwrap();
        // SAFETY: a copy of the held descriptor without close-on-exec, as a started process
        // finds it; handed to take_inotify
        let copy = unsafe { libc::fcntl(held.raw(), libc::F_DUPFD, 0) };
        // SAFETY: F_GETFD on descriptors we own
        assert_eq!(
            unsafe { libc::fcntl(copy, libc::F_GETFD) } & libc::FD_CLOEXEC,
            0
        );
        let taken = take_inotify(&copy.to_string()).unwrap();
        let flags = unsafe { libc::fcntl(taken.as_raw_fd(), libc::F_GETFD) };
        assert_eq!(flags & libc::FD_CLOEXEC, libc::FD_CLOEXEC);
    }
}
