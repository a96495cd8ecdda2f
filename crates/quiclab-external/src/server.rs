//! An external stack's server: its files prepared, the program started, and ready once it
//! holds its port.
//!
//! The server is given a fresh self-signed certificate and key (the certificate where the
//! client's trust is set up) and a directory of documents holding quiclab's byte pattern at
//! `bytes/N` for every object size the trial asks for, so every server serves the same bytes
//! for the same URL. It is ready when a UDP socket of its network namespace is bound to the
//! port: no log line of the program is trusted for that.

use std::io::Write;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use quiclab_endpoint::routes::pattern_byte;
use quiclab_endpoint::tls::Identity;

use quiclab_model::record::{TimelineSample, now_us};
use quiclab_netns::sys::EventFd;

use crate::client::supervise;
use crate::def::{Placeholder, StackDef};
use crate::qlog;

/// What a server run is given.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// Address and UDP port to listen on.
    pub address: String,
    pub port: u16,
    /// Where the certificate is written (clients trust it).
    pub cert: PathBuf,
    /// The object sizes to serve at `/bytes/N`.
    pub objects: Vec<u64>,
    /// A folder whose files are served too, at the same paths (copied into the documents:
    /// a page's real web content).
    pub root: Option<PathBuf>,
    pub knobs: Vec<(String, String)>,
    /// The key, the documents and (unless `qlog_dir`) the qlog files go here.
    pub work_dir: PathBuf,
    pub keylog: Option<PathBuf>,
    /// Receive telemetry too, writing quiclab's telemetry records here (the stack file's
    /// `[telemetry]` server arguments are added).
    pub telemetry_log: Option<PathBuf>,
}

/// Why the server could not run.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error(
        "stack {stack:?}: the server program {program:?} is not installed (install: {install})"
    )]
    Missing {
        stack: String,
        program: String,
        install: String,
    },
    #[error("cannot prepare {}: {source}", path.display())]
    Files {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("stack {stack:?} does not carry telemetry (its file has no [telemetry] section)")]
    NoTelemetry { stack: String },
    #[error("cannot make a certificate: {0}")]
    Certificate(String),
    #[error("cannot start {program}: {source}")]
    Start {
        program: String,
        source: std::io::Error,
    },
    #[error("{program} exited with {status} before it was ready")]
    Exited { program: String, status: String },
    #[error("{program} did not bind UDP port {port} within {waited:?}")]
    NotReady {
        program: String,
        port: u16,
        waited: Duration,
    },
}

/// How long a server may take to bind its port.
const READY_WITHIN: Duration = Duration::from_secs(10);

/// A running external server; stopped (and waited for) when dropped.
pub struct Server {
    child: Child,
    pub program: String,
    /// The program's whole command line, as started.
    pub command_line: String,
    stop_signal: libc::c_int,
    /// Its qlog directory, and when each file in it appeared (the connection's start).
    qlog_dir: PathBuf,
    watcher: Option<Watcher>,
}

impl Server {
    /// Prepares the files and starts the program; returns once it holds its port.
    pub fn start(def: &StackDef, o: &ServeOptions) -> Result<Server, ServeError> {
        let telemetry_args = match (&o.telemetry_log, &def.telemetry) {
            (None, _) => &[][..],
            (Some(_), Some(t)) => &t.server_args[..],
            (Some(_), None) => {
                return Err(ServeError::NoTelemetry {
                    stack: def.name.clone(),
                });
            }
        };
        let program = def.server.locate().ok_or_else(|| ServeError::Missing {
            stack: def.name.clone(),
            program: def.server.program.clone(),
            install: def.install.clone(),
        })?;
        let files = |path: &Path| {
            let path = path.to_path_buf();
            move |source| ServeError::Files { path, source }
        };
        std::fs::create_dir_all(&o.work_dir).map_err(files(&o.work_dir))?;
        let id = Identity::self_signed().map_err(|e| ServeError::Certificate(e.to_string()))?;
        std::fs::write(&o.cert, id.chain_pem()).map_err(files(&o.cert))?;
        let key = o.work_dir.join("key.pem");
        let _ = std::fs::remove_file(&key);
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&key)
            .and_then(|mut f| f.write_all(id.key_pem().as_bytes()))
            .map_err(files(&key))?;
        let htdocs = o.work_dir.join("htdocs");
        write_documents(&htdocs, &o.objects).map_err(files(&htdocs))?;
        if let Some(root) = &o.root {
            copy_tree(root, &htdocs).map_err(files(root))?;
        }
        let qlog_dir = o.work_dir.join("qlog");
        std::fs::create_dir_all(&qlog_dir).map_err(files(&qlog_dir))?;
        let watcher = Watcher::start(&qlog_dir).map_err(files(&qlog_dir))?;
        let value = |p: Placeholder| -> String {
            match p {
                Placeholder::Address => o.address.clone(),
                Placeholder::Port => o.port.to_string(),
                Placeholder::Cert => o.cert.display().to_string(),
                Placeholder::Key => key.display().to_string(),
                Placeholder::Htdocs => htdocs.display().to_string(),
                Placeholder::QlogDir => qlog_dir.display().to_string(),
                Placeholder::Keylog => o
                    .keylog
                    .as_ref()
                    .map(|k| k.display().to_string())
                    .unwrap_or_default(),
                Placeholder::TelemetryLog => o
                    .telemetry_log
                    .as_ref()
                    .map(|k| k.display().to_string())
                    .unwrap_or_default(),
                _ => String::new(),
            }
        };
        let mut args =
            StackDef::render(&def.server, &def.knob_args(true, &o.knobs, &value), &value);
        args.extend(telemetry_args.iter().map(|t| t.render(&value)));
        let name = def.server.program.clone();
        let mut cmd = std::process::Command::new(&program);
        cmd.args(&args)
            .stdin(Stdio::null())
            .env_remove(quiclab_netns::watch::INOTIFY_FD_VAR);
        if let Some(k) = &o.keylog {
            cmd.env("SSLKEYLOGFILE", k);
        }
        supervise(&mut cmd);
        let child = cmd.spawn().map_err(|source| ServeError::Start {
            program: name.clone(),
            source,
        })?;
        let mut server = Server {
            child,
            command_line: format!("{} {}", program.display(), args.join(" ")),
            program: name,
            stop_signal: def.server_stop,
            qlog_dir,
            watcher: Some(watcher),
        };
        let started = Instant::now();
        loop {
            if udp_port_bound(o.port) {
                return Ok(server);
            }
            if let Ok(Some(status)) = server.child.try_wait() {
                return Err(ServeError::Exited {
                    program: server.program.clone(),
                    status: status.to_string(),
                });
            }
            if started.elapsed() > READY_WITHIN {
                return Err(ServeError::NotReady {
                    program: server.program.clone(),
                    port: o.port,
                    waited: READY_WITHIN,
                });
            }
            // a program binds its port a few milliseconds after it starts: look often (one
            // read of /proc/net/udp)
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Runs until `stop` is set or the program exits; the program's exit status if it did.
    /// Woken at once by the program's exit and by `woken` becoming readable (the pipe a signal
    /// handler writes to after setting `stop`), else every 2 ms to look at `stop`.
    pub fn wait(
        &mut self,
        stop: &AtomicBool,
        woken: Option<BorrowedFd<'_>>,
    ) -> Option<std::process::ExitStatus> {
        // SAFETY: pidfd_open of our own child, not yet reaped (so its pid is still its own).
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, self.child.id() as libc::pid_t, 0) };
        // SAFETY: a new descriptor, owned by nobody else.
        let pidfd = (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd as RawFd) });
        let watched: Vec<libc::pollfd> = [pidfd.as_ref().map(|p| p.as_fd()), woken]
            .into_iter()
            .flatten()
            .map(|fd| libc::pollfd {
                fd: fd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            })
            .collect();
        // with both woken by an event, the timeout only backs them up
        let tick = if watched.len() == 2 {
            100
        } else {
            STOP_CHECK.as_millis() as libc::c_int
        };
        while !stop.load(Ordering::Relaxed) {
            if let Ok(Some(s)) = self.child.try_wait() {
                return Some(s);
            }
            let mut p = watched.clone();
            // SAFETY: pollfds we own, of descriptors open for this call; EINTR just loops.
            unsafe { libc::poll(p.as_mut_ptr(), p.len() as libc::nfds_t, tick) };
        }
        None
    }
}

impl Server {
    /// Stops the program with its stack's stop signal (SIGKILL if it has not exited
    /// [`STOP_WITHIN`] later) and waits for it.
    fn stop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let pid = self.child.id() as libc::pid_t;
            // SAFETY: a signal to the child this value owns and has not yet reaped.
            unsafe { libc::kill(pid, self.stop_signal) };
            if let Ok(Some(_)) = quiclab_netns::process::wait_timeout(&mut self.child, STOP_WITHIN)
            {
                return;
            }
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }

    /// Stops the program, then its sending side's timeline from the qlog files it wrote,
    /// connections numbered in the order they began; a file it could not read is named.
    pub fn finish(mut self, path_min_rtt_us: Option<u64>) -> (Vec<TimelineSample>, Vec<String>) {
        self.stop();
        let created = self.watcher.take().map(Watcher::stop).unwrap_or_default();
        let (mut samples, mut problems) = (Vec::new(), Vec::new());
        for (i, (name, at_us)) in created.iter().enumerate() {
            let path = self.qlog_dir.join(name);
            let text = match std::fs::read(&path) {
                Ok(t) => t,
                Err(e) => {
                    problems.push(format!("{}: {e}", path.display()));
                    continue;
                }
            };
            match qlog::timeline(&text, *at_us, i as u32, path_min_rtt_us) {
                Ok(t) => samples.extend(t),
                Err(e) => problems.push(format!("{}: {e}", path.display())),
            }
        }
        samples.sort_by_key(|s| s.t_us);
        (samples, problems)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop();
        if let Some(w) = self.watcher.take() {
            w.stop();
        }
    }
}

/// How long a server may take to exit after its stop signal.
const STOP_WITHIN: Duration = Duration::from_secs(3);
/// How often a running adapter looks whether it was asked to stop (a signal sets the flag),
/// when nothing wakes it.
const STOP_CHECK: Duration = Duration::from_millis(2);
/// Notes when each file appears in a directory (inotify), on CLOCK_MONOTONIC.
struct Watcher {
    fd: libc::c_int,
    /// Wakes the thread to stop.
    wake: std::sync::Arc<EventFd>,
    thread: std::thread::JoinHandle<Vec<(String, u64)>>,
}

impl Watcher {
    fn start(dir: &Path) -> std::io::Result<Watcher> {
        use std::os::fd::IntoRawFd;
        use std::os::unix::ffi::OsStrExt;
        // an instance the runner holds, when it handed one over: closing it then does not wait
        // for the kernel (see quiclab_netns::watch)
        let fd = match quiclab_netns::watch::inherited_inotify() {
            Some(fd) => fd.into_raw_fd(),
            // SAFETY: a plain system call; the descriptor is this value's from now on.
            None => unsafe { libc::inotify_init1(libc::IN_CLOEXEC | libc::IN_NONBLOCK) },
        };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: plain system calls on a descriptor this value owns; the path is NUL-ended.
        let mut c_path = dir.as_os_str().as_bytes().to_vec();
        c_path.push(0);
        let wd = unsafe {
            libc::inotify_add_watch(
                fd,
                c_path.as_ptr().cast(),
                libc::IN_CREATE | libc::IN_MOVED_TO,
            )
        };
        let wake = EventFd::new().map(std::sync::Arc::new);
        let wake = match (wd, wake) {
            (0.., Ok(w)) => w,
            (_, r) => {
                let e = r.err().unwrap_or_else(std::io::Error::last_os_error);
                unsafe { libc::close(fd) };
                return Err(e);
            }
        };
        let w = wake.clone();
        let thread = std::thread::spawn(move || watch(fd, &w));
        Ok(Watcher { fd, wake, thread })
    }

    /// The files that appeared, in order, with when. Closing the last descriptor of the
    /// inotify instance waits for the kernel's notification grace period (10 to 20 ms here);
    /// a trial's runner holds the instance it hands over, and pays that off its path.
    fn stop(self) -> Vec<(String, u64)> {
        self.wake.signal();
        let out = self.thread.join().unwrap_or_default();
        // SAFETY: the thread that read it has ended; nothing else uses the descriptor.
        unsafe { libc::close(self.fd) };
        out
    }
}

/// Reads `fd`'s events as they come until `wake` is signalled, then those already queued.
fn watch(fd: libc::c_int, wake: &EventFd) -> Vec<(String, u64)> {
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let mut pfd = [
            libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: wake.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        // SAFETY: two pollfds we own; EINTR just loops.
        let ready = unsafe { libc::poll(pfd.as_mut_ptr(), 2, -1) };
        if ready < 0 {
            continue;
        }
        let stopping = pfd[1].revents != 0;
        // SAFETY: reads into a buffer we own, no longer than it (the descriptor does not block).
        let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
        let at = now_us();
        let mut off = 0usize;
        while n > 0 && off + std::mem::size_of::<libc::inotify_event>() <= n as usize {
            // SAFETY: the kernel wrote whole events; read_unaligned copes with alignment.
            let ev: libc::inotify_event =
                unsafe { std::ptr::read_unaligned(buf[off..].as_ptr().cast()) };
            let name_at = off + std::mem::size_of::<libc::inotify_event>();
            let name = &buf[name_at..(name_at + ev.len as usize).min(n as usize)];
            let name =
                String::from_utf8_lossy(name.split(|b| *b == 0).next().unwrap_or(&[])).to_string();
            if !name.is_empty() && !out.iter().any(|(n, _)| *n == name) {
                out.push((name, at));
            }
            off = name_at + ev.len as usize;
        }
        // a full buffer may leave events queued: read again before stopping
        if stopping && n < buf.len() as isize {
            return out;
        }
    }
}

/// `bytes/N` holding quiclab's pattern, for each size.
fn write_documents(htdocs: &Path, sizes: &[u64]) -> std::io::Result<()> {
    let dir = htdocs.join("bytes");
    std::fs::create_dir_all(&dir)?;
    let mut sizes = sizes.to_vec();
    sizes.sort_unstable();
    sizes.dedup();
    let largest = sizes.last().copied().unwrap_or(0);
    let body: Vec<u8> = (0..largest).map(pattern_byte).collect();
    for n in sizes {
        std::fs::write(dir.join(n.to_string()), &body[..n as usize])?;
    }
    Ok(())
}

/// Copies the regular files and folders under `from` into `to` (links and other files are
/// left out: the documents are the lab's own files).
fn copy_tree(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for e in std::fs::read_dir(from)? {
        let e = e?;
        let kind = e.file_type()?;
        if kind.is_dir() {
            copy_tree(&e.path(), &to.join(e.file_name()))?;
        } else if kind.is_file() {
            std::fs::copy(e.path(), to.join(e.file_name()))?;
        }
    }
    Ok(())
}

/// A UDP socket of this network namespace is bound to `port` (any address, IPv4 or IPv6).
pub fn udp_port_bound(port: u16) -> bool {
    let want = format!(":{port:04X}");
    ["/proc/net/udp", "/proc/net/udp6"].iter().any(|f| {
        std::fs::read_to_string(f).is_ok_and(|t| {
            t.lines().skip(1).any(|l| {
                l.split_whitespace()
                    .nth(1)
                    .is_some_and(|local| local.ends_with(&want))
            })
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn documents_hold_the_pattern_at_every_size() {
        let dir = std::env::temp_dir().join(format!("quiclab-ext-docs-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        write_documents(&dir, &[300, 10, 300, 0]).unwrap();
        for n in [0u64, 10, 300] {
            let b = std::fs::read(dir.join("bytes").join(n.to_string())).unwrap();
            assert_eq!(b.len() as u64, n);
            assert!(
                b.iter()
                    .enumerate()
                    .all(|(i, x)| *x == pattern_byte(i as u64))
            );
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_bound_udp_port_is_seen_and_a_free_one_is_not() {
        let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let port = s.local_addr().unwrap().port();
        assert!(udp_port_bound(port));
        drop(s);
        assert!(!udp_port_bound(port));
    }
}
