//! Chromium driven over the DevTools protocol through a pipe (`--remote-debugging-pipe`).
//!
//! Contract:
//! - [`Browser::launch`] starts the browser with the DevTools protocol on file descriptors 3
//!   (commands in) and 4 (replies and events out), messages as JSON separated by NUL bytes. No
//!   port is opened, so nothing but the page's own traffic crosses the network, and the browser
//!   ends when the pipe closes. It runs in a process group of its own and dies with its parent
//!   (SIGKILL); its standard error goes to a file the caller names.
//! - [`Browser::call`] sends a command and waits (up to a limit) for its reply; events that
//!   arrive meanwhile are kept, in order, for [`Browser::next_event`].
//! - Dropping a `Browser` ends the browser's whole process group and waits for it.
//! - [`kill_running`] ends the browser of this process from anywhere (a signal's thread), so that
//!   its profile can be removed before the process exits.

use std::collections::VecDeque;
use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// Why talking to the browser failed.
#[derive(Debug, thiserror::Error)]
pub enum CdpError {
    #[error("cannot start {program}: {source}")]
    Spawn {
        program: String,
        #[source]
        source: std::io::Error,
    },
    #[error("the browser closed its DevTools pipe (it exited or crashed){}", stderr_tail(.stderr))]
    Closed { stderr: Option<String> },
    #[error("no reply to {method} within {secs:.0} s")]
    Timeout { method: String, secs: f64 },
    #[error("{method}: {message}")]
    Command { method: String, message: String },
    #[error("writing to the browser: {0}")]
    Write(#[source] std::io::Error),
}

fn stderr_tail(s: &Option<String>) -> String {
    match s {
        Some(t) if !t.is_empty() => format!("; its last lines: {t}"),
        _ => String::new(),
    }
}

/// A DevTools event: its method, parameters and the session it belongs to.
#[derive(Debug, Clone)]
pub struct Event {
    pub method: String,
    pub params: Value,
    pub session: Option<String>,
}

/// The process group of the browser this process runs (0: none).
static RUNNING: AtomicI32 = AtomicI32::new(0);

/// Ends the browser this process runs, if any, with its whole process group (SIGKILL): for a
/// signal's thread that must remove the browser's profile and exit. A browser killed so can no
/// longer write, though it may not yet have been reaped.
pub fn kill_running() {
    let pid = RUNNING.swap(0, Ordering::SeqCst);
    if pid > 0 {
        // SAFETY: the group the browser leads; it is not reaped before `end` clears RUNNING, so
        // the id is still the browser's.
        unsafe { libc::kill(-pid, libc::SIGKILL) };
    }
}

/// A running browser and its DevTools pipe.
pub struct Browser {
    child: Child,
    commands: File,
    incoming: Receiver<Value>,
    pending: VecDeque<Event>,
    next_id: u64,
    stderr_path: PathBuf,
}

impl Browser {
    /// Starts `program` with `args` (the DevTools pipe flag is added), its standard error into
    /// `stderr_path` and its own temporary files (Chromium's singleton socket) into `tmp_dir`.
    pub fn launch(
        program: &Path,
        args: &[String],
        stderr_path: &Path,
        tmp_dir: &Path,
    ) -> Result<Browser, CdpError> {
        let spawn_err = |source| CdpError::Spawn {
            program: program.display().to_string(),
            source,
        };
        let (to_browser_r, to_browser_w) = pipe().map_err(spawn_err)?;
        let (from_browser_r, from_browser_w) = pipe().map_err(spawn_err)?;
        let stderr = File::create(stderr_path).map_err(spawn_err)?;
        let mut cmd = Command::new(program);
        cmd.args(args)
            .arg("--remote-debugging-pipe")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .env("TMPDIR", tmp_dir);
        quiclab_netns::process::tie_to_parent(&mut cmd, true);
        let (r, w) = (to_browser_r.as_raw_fd(), from_browser_w.as_raw_fd());
        // SAFETY: only dup2 (async-signal-safe) between fork and exec. The pipes' ends are
        // above 4 (see `pipe`), so dup2 makes fresh descriptors 3 and 4 without close-on-exec.
        unsafe {
            cmd.pre_exec(move || {
                if libc::dup2(r, 3) < 0 || libc::dup2(w, 4) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = cmd.spawn().map_err(spawn_err)?;
        RUNNING.store(child.id() as i32, Ordering::SeqCst);
        drop((to_browser_r, from_browser_w));
        let (tx, incoming) = channel();
        let reader = File::from(from_browser_r);
        std::thread::Builder::new()
            .name("cdp-reader".into())
            .spawn(move || {
                let mut r = BufReader::with_capacity(1 << 20, reader);
                let mut buf = Vec::new();
                loop {
                    buf.clear();
                    match r.read_until(0, &mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(_) => {
                            if buf.last() == Some(&0) {
                                buf.pop();
                            }
                            match serde_json::from_slice::<Value>(&buf) {
                                Ok(v) => {
                                    if tx.send(v).is_err() {
                                        break;
                                    }
                                }
                                Err(e) => log::warn!("unreadable DevTools message: {e}"),
                            }
                        }
                    }
                }
            })
            .map_err(spawn_err)?;
        Ok(Browser {
            child,
            commands: File::from(to_browser_w),
            incoming,
            pending: VecDeque::new(),
            next_id: 0,
            stderr_path: stderr_path.to_path_buf(),
        })
    }

    /// The browser's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    fn closed(&self) -> CdpError {
        CdpError::Closed {
            stderr: std::fs::read_to_string(&self.stderr_path).ok().map(|t| {
                let lines: Vec<&str> = t.lines().filter(|l| !l.trim().is_empty()).collect();
                lines[lines.len().saturating_sub(3)..].join(" | ")
            }),
        }
    }

    /// Sends `method` (to `session`, or to the browser) and waits up to `limit` for its result.
    pub fn call(
        &mut self,
        session: Option<&str>,
        method: &str,
        params: Value,
        limit: Duration,
    ) -> Result<Value, CdpError> {
        self.next_id += 1;
        let id = self.next_id;
        let mut msg = json!({"id": id, "method": method, "params": params});
        if let Some(s) = session {
            msg["sessionId"] = json!(s);
        }
        let mut bytes = serde_json::to_vec(&msg).expect("a JSON value serialises");
        bytes.push(0);
        self.commands.write_all(&bytes).map_err(|e| {
            if e.kind() == std::io::ErrorKind::BrokenPipe {
                self.closed()
            } else {
                CdpError::Write(e)
            }
        })?;
        let until = Instant::now() + limit;
        loop {
            let left = until.saturating_duration_since(Instant::now());
            match self.incoming.recv_timeout(left) {
                Ok(v) if v.get("id").and_then(Value::as_u64) == Some(id) => {
                    if let Some(e) = v.get("error") {
                        return Err(CdpError::Command {
                            method: method.to_string(),
                            message: e
                                .get("message")
                                .and_then(Value::as_str)
                                .unwrap_or("error")
                                .to_string(),
                        });
                    }
                    return Ok(v.get("result").cloned().unwrap_or(Value::Null));
                }
                Ok(v) => self.keep(v),
                Err(RecvTimeoutError::Timeout) => {
                    return Err(CdpError::Timeout {
                        method: method.to_string(),
                        secs: limit.as_secs_f64(),
                    });
                }
                Err(RecvTimeoutError::Disconnected) => return Err(self.closed()),
            }
        }
    }

    /// Opens a blank tab and attaches to it (flat sessions): its session id, for [`call`].
    ///
    /// [`call`]: Browser::call
    pub fn open_blank_tab(&mut self, limit: Duration) -> Result<String, CdpError> {
        let t = self.call(
            None,
            "Target.createTarget",
            json!({"url": "about:blank"}),
            limit,
        )?;
        let target = t["targetId"].as_str().unwrap_or_default().to_string();
        let a = self.call(
            None,
            "Target.attachToTarget",
            json!({"targetId": target, "flatten": true}),
            limit,
        )?;
        Ok(a["sessionId"].as_str().unwrap_or_default().to_string())
    }

    fn keep(&mut self, v: Value) {
        if let Some(method) = v.get("method").and_then(Value::as_str) {
            self.pending.push_back(Event {
                method: method.to_string(),
                params: v.get("params").cloned().unwrap_or(Value::Null),
                session: v
                    .get("sessionId")
                    .and_then(Value::as_str)
                    .map(str::to_string),
            });
        }
    }

    /// The next event, waiting up to `limit`; `Ok(None)` when none came in time.
    pub fn next_event(&mut self, limit: Duration) -> Result<Option<Event>, CdpError> {
        if let Some(e) = self.pending.pop_front() {
            return Ok(Some(e));
        }
        let until = Instant::now() + limit;
        loop {
            let left = until.saturating_duration_since(Instant::now());
            match self.incoming.recv_timeout(left) {
                Ok(v) => {
                    self.keep(v);
                    if let Some(e) = self.pending.pop_front() {
                        return Ok(Some(e));
                    }
                }
                Err(RecvTimeoutError::Timeout) => return Ok(None),
                Err(RecvTimeoutError::Disconnected) => return Err(self.closed()),
            }
        }
    }

    /// Asks the browser to close, then ends its process group (after `grace`) and waits.
    pub fn close(mut self, grace: Duration) {
        let _ = self.call(None, "Browser.close", json!({}), grace);
        self.end(grace);
    }

    fn end(&mut self, grace: Duration) {
        let pid = self.child.id() as libc::pid_t;
        let until = Instant::now() + grace;
        while Instant::now() < until {
            if let Ok(Some(_)) = self.child.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        // the browser leads its group: its helper processes go with it
        let _ = RUNNING.compare_exchange(pid, 0, Ordering::SeqCst, Ordering::SeqCst);
        // SAFETY: kill with a negative pid signals the group the browser leads (it was made
        // leader at spawn); a group that no longer exists makes kill fail harmlessly.
        unsafe { libc::kill(-pid, libc::SIGKILL) };
        let _ = self.child.wait();
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        self.end(Duration::ZERO);
    }
}

/// A pipe whose two ends are above descriptor 4 and close on exec.
fn pipe() -> std::io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 writes two descriptors into the array we own.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: both descriptors were just created and are owned by nothing else.
    let (r, w) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    Ok((above_four(r)?, above_four(w)?))
}

fn above_four(fd: OwnedFd) -> std::io::Result<OwnedFd> {
    if fd.as_raw_fd() > 4 {
        return Ok(fd);
    }
    // SAFETY: F_DUPFD_CLOEXEC makes a new descriptor (>= 5) of an open one we own.
    let new = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 5) };
    if new < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `new` was just created and is owned by nothing else.
    Ok(unsafe { OwnedFd::from_raw_fd(new) })
}
