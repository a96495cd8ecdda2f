//! An external stack's server: its files prepared, the program started, and ready once it
//! holds its port.
//!
//! The server is given a fresh self-signed certificate and key (the certificate where the
//! client's trust is set up) and a directory of documents holding quiclab's byte pattern at
//! `bytes/N` for every object size the trial asks for, so every server serves the same bytes
//! for the same URL. It is ready when a UDP socket of its network namespace is bound to the
//! port: no log line of the program is trusted for that.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use quiclab_endpoint::routes::pattern_byte;
use quiclab_endpoint::tls::Identity;

use crate::client::die_with_parent;
use crate::def::{Placeholder, StackDef};

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
    pub knobs: Vec<(String, String)>,
    /// The key, the documents and (unless `qlog_dir`) the qlog files go here.
    pub work_dir: PathBuf,
    pub qlog_dir: Option<PathBuf>,
    pub keylog: Option<PathBuf>,
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
}

impl Server {
    /// Prepares the files and starts the program; returns once it holds its port.
    pub fn start(def: &StackDef, o: &ServeOptions) -> Result<Server, ServeError> {
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
        let qlog_dir = o
            .qlog_dir
            .clone()
            .unwrap_or_else(|| o.work_dir.join("qlog"));
        std::fs::create_dir_all(&qlog_dir).map_err(files(&qlog_dir))?;
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
                _ => String::new(),
            }
        };
        let args = StackDef::render(&def.server, &def.knob_args(true, &o.knobs), &value);
        let name = def.server.program.clone();
        eprintln!("$ {} {}", program.display(), args.join(" "));
        let mut cmd = std::process::Command::new(&program);
        cmd.args(&args).stdin(Stdio::null());
        if let Some(k) = &o.keylog {
            cmd.env("SSLKEYLOGFILE", k);
        }
        die_with_parent(&mut cmd);
        let child = cmd.spawn().map_err(|source| ServeError::Start {
            program: name.clone(),
            source,
        })?;
        let mut server = Server {
            child,
            program: name,
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
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Runs until `stop` is set or the program exits; the program's exit status if it did.
    pub fn wait(&mut self, stop: &AtomicBool) -> Option<std::process::ExitStatus> {
        while !stop.load(Ordering::Relaxed) {
            if let Ok(Some(s)) = self.child.try_wait() {
                return Some(s);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            // SIGTERM first (it may write its last qlog lines), SIGKILL after a second
            let pid = self.child.id() as libc::pid_t;
            // SAFETY: a signal to the child this value owns and has not yet reaped.
            unsafe { libc::kill(pid, libc::SIGTERM) };
            let until = Instant::now() + Duration::from_secs(1);
            while Instant::now() < until {
                if let Ok(Some(_)) = self.child.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
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
