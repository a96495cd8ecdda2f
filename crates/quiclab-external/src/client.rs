//! An external stack's client, run once per URL (one connection each), its output turned into
//! quiclab's request records.
//!
//! Times come from the lines the program prints (standard output and error, read as they are
//! written and stamped on CLOCK_MONOTONIC, the clock of every record): the request starts at
//! the line that says its first packet was sent (or, for a stack file without such a pattern,
//! when the program was started, which adds its start-up), the handshake, first byte and last
//! byte at the first line matching the stack's pattern for each. The body is checked byte for byte against quiclab's pattern in the
//! file the program downloaded. A program that exits non-zero, prints no last-byte line, or
//! downloads other bytes gives a record with the error and the end of its output; never a
//! zero or a silent success.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::mpsc;

use quiclab_endpoint::routes::{expected_bytes, first_mismatch};
use quiclab_endpoint::url::Url;
use quiclab_model::record::{RequestRecord, now_us};

use crate::def::{Placeholder, StackDef};

/// What a client run is given besides the URLs.
#[derive(Debug, Clone, Default)]
pub struct GetOptions {
    /// The certificate to trust (`{cacert}`).
    pub cacert: PathBuf,
    /// The arm's knobs, normalised.
    pub knobs: Vec<(String, String)>,
    /// Where the program downloads and its output is kept (`client-N.log` per request).
    pub work_dir: PathBuf,
    /// Where qlog files go (`{qlog_dir}`); the work directory when not given.
    pub qlog_dir: Option<PathBuf>,
    /// The TLS key log file (`{keylog}`), also given as SSLKEYLOGFILE.
    pub keylog: Option<PathBuf>,
}

/// The session files of a run, in its work directory.
const SESSION_FILE: &str = "session.pem";
const TP_FILE: &str = "transport-parameters.pem";

/// How many of the program's last lines an error quotes.
const TAIL_LINES: usize = 5;

/// Fetches each URL with the stack's client, one program run (one connection) each. The runs
/// share the session files (`{session_file}`, `{tp_file}`): each resumes the session of the
/// one before when the stack is told to.
pub fn get(def: &StackDef, urls: &[String], opts: &GetOptions) -> Vec<RequestRecord> {
    let _ = std::fs::create_dir_all(&opts.work_dir);
    for f in [SESSION_FILE, TP_FILE] {
        let _ = std::fs::remove_file(opts.work_dir.join(f));
    }
    urls.iter()
        .enumerate()
        .map(|(i, url)| fetch(def, i, url, opts))
        .collect()
}

/// One line of the program's output and when it was read.
struct Line {
    at_us: u64,
    text: String,
}

fn fetch(def: &StackDef, index: usize, url: &str, opts: &GetOptions) -> RequestRecord {
    let start = now_us();
    let mut rec = RequestRecord::get(def.http[0], url, index as u32, true, start);
    let target = match Url::parse(url) {
        Ok(u) => u,
        Err(e) => return failed(rec, e.to_string()),
    };
    let (host, port, path) = (target.host, target.port, target.path);
    let download = opts.work_dir.join(format!("download-{index}"));
    let _ = std::fs::remove_dir_all(&download);
    if let Err(e) = std::fs::create_dir_all(&download) {
        return failed(rec, format!("cannot create {}: {e}", download.display()));
    }
    let Some(program) = def.client.locate() else {
        return failed(
            rec,
            format!(
                "stack {:?}: the client program {:?} is not installed (install: {})",
                def.name, def.client.program, def.install
            ),
        );
    };
    let qlog_dir = opts
        .qlog_dir
        .clone()
        .unwrap_or_else(|| opts.work_dir.clone());
    let value = |p: Placeholder| -> String {
        match p {
            Placeholder::Url => url.to_string(),
            Placeholder::Host => host.clone(),
            Placeholder::Port => port.to_string(),
            Placeholder::Path => path.clone(),
            Placeholder::Cacert => opts.cacert.display().to_string(),
            Placeholder::DownloadDir => download.display().to_string(),
            Placeholder::QlogDir => qlog_dir.display().to_string(),
            Placeholder::SessionFile => opts.work_dir.join(SESSION_FILE).display().to_string(),
            Placeholder::TpFile => opts.work_dir.join(TP_FILE).display().to_string(),
            Placeholder::Keylog => opts
                .keylog
                .as_ref()
                .map(|k| k.display().to_string())
                .unwrap_or_default(),
            _ => String::new(),
        }
    };
    let args = StackDef::render(
        &def.client,
        &def.knob_args(false, &opts.knobs, &value),
        &value,
    );
    let log_path = opts.work_dir.join(format!("client-{index}.log"));
    let mut cmd = std::process::Command::new(&program);
    cmd.args(&args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(k) = &opts.keylog {
        cmd.env("SSLKEYLOGFILE", k);
    }
    supervise(&mut cmd);
    rec.start_us = now_us();
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => return failed(rec, format!("cannot start {}: {e}", program.display())),
    };
    let (tx, rx) = mpsc::channel::<Line>();
    let readers: Vec<_> = [
        child
            .stdout
            .take()
            .map(|s| Box::new(s) as Box<dyn Read + Send>),
        child
            .stderr
            .take()
            .map(|s| Box::new(s) as Box<dyn Read + Send>),
    ]
    .into_iter()
    .flatten()
    .map(|pipe| {
        let tx = tx.clone();
        std::thread::spawn(move || read_lines(pipe, &tx))
    })
    .collect();
    drop(tx);
    let mut log = std::fs::File::create(&log_path).ok();
    let _ = log
        .as_mut()
        .map(|l| writeln!(l, "$ {} {}", program.display(), args.join(" ")));
    let mut tail: std::collections::VecDeque<String> = Default::default();
    let mut error_line = None;
    let mut started = false;
    let mut zero_rtt_rejected = false;
    let lines = &def.lines;
    for line in rx {
        if let Some(l) = log.as_mut() {
            let _ = writeln!(l, "{}", line.text);
        }
        let t = line.text.as_str();
        if !started && lines.start.as_ref().is_some_and(|r| r.is_match(t)) {
            started = true;
            rec.start_us = line.at_us;
        }
        if rec.handshake_done_us.is_none()
            && lines.handshake.as_ref().is_some_and(|r| r.is_match(t))
        {
            rec.handshake_done_us = Some(line.at_us);
        }
        if rec.first_byte_us.is_none() && lines.first_byte.is_match(t) {
            rec.first_byte_us = Some(line.at_us);
        }
        if rec.last_byte_us.is_none() && lines.last_byte.is_match(t) {
            rec.last_byte_us = Some(line.at_us);
        }
        if rec.status == 0
            && let Some(c) = lines.status.as_ref().and_then(|r| r.captures(t))
        {
            rec.status = c.get(1).and_then(|m| m.as_str().parse().ok()).unwrap_or(0);
        }
        if rec.handshake.alpn.is_none()
            && let Some(c) = lines.alpn.as_ref().and_then(|r| r.captures(t))
        {
            rec.handshake.alpn = c.get(1).map(|m| m.as_str().to_string());
        }
        if lines.hello_retry.as_ref().is_some_and(|r| r.is_match(t)) {
            rec.handshake.hello_retry = true;
        }
        if lines.zero_rtt_sent.as_ref().is_some_and(|r| r.is_match(t)) {
            rec.handshake.zero_rtt_attempted = true;
        }
        if lines
            .zero_rtt_rejected
            .as_ref()
            .is_some_and(|r| r.is_match(t))
        {
            zero_rtt_rejected = true;
        }
        if error_line.is_none() && lines.error.as_ref().is_some_and(|r| r.is_match(t)) {
            error_line = Some(t.to_string());
        }
        tail.push_back(line.text);
        if tail.len() > TAIL_LINES {
            tail.pop_front();
        }
    }
    for r in readers {
        let _ = r.join();
    }
    let status = child.wait();
    let tail = || {
        format!(
            "its last lines ({}): {}",
            log_path.display(),
            tail.iter().cloned().collect::<Vec<_>>().join(" | ")
        )
    };
    match status {
        Ok(s) if !s.success() => {
            return failed(
                rec,
                format!("{} exited with {s}; {}", def.client.program, tail()),
            );
        }
        Err(e) => return failed(rec, format!("cannot wait for {}: {e}", def.client.program)),
        Ok(_) => {}
    }
    if let Some(e) = error_line {
        return failed(
            rec,
            format!("{} reported {e:?}; {}", def.client.program, tail()),
        );
    }
    if rec.last_byte_us.is_none() {
        return failed(
            rec,
            format!(
                "{} printed no line matching last-byte ({}); {}",
                def.client.program,
                lines.last_byte.as_str(),
                tail()
            ),
        );
    }
    match check_download(&download, &path) {
        // checked: the body need not take disk space any more (a failed one stays to look at)
        Ok(n) => {
            rec.bytes = n;
            let _ = std::fs::remove_dir_all(&download);
        }
        Err(e) => return failed(rec, e),
    }
    // 0-RTT data the server took can only have come from a resumed session
    rec.handshake.zero_rtt_accepted = rec.handshake.zero_rtt_attempted && !zero_rtt_rejected;
    rec.handshake.resumed = rec.handshake.zero_rtt_accepted;
    if rec.status == 0 && lines.status.is_none() {
        // the program does not say; the body it saved is the answer
        rec.status = 200;
    }
    // a body before the first-byte line (a pattern that never matched) still arrived
    if rec.first_byte_us.is_none() {
        rec.first_byte_us = rec.last_byte_us;
    }
    rec.derive();
    rec
}

fn failed(mut rec: RequestRecord, error: String) -> RequestRecord {
    rec.error = Some(error);
    rec.derive();
    rec
}

/// The body the program saved (the one file in `dir`), checked against quiclab's pattern when
/// the path is `/bytes/N`; its length.
fn check_download(dir: &Path, path: &str) -> Result<u64, String> {
    let files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| format!("cannot read {}: {e}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file())
        .collect();
    let [file] = files.as_slice() else {
        return Err(format!(
            "the client saved {} files in {}, not one body",
            files.len(),
            dir.display()
        ));
    };
    let body = std::fs::read(file).map_err(|e| format!("cannot read {}: {e}", file.display()))?;
    if let Some(want) = expected_bytes(path) {
        if body.len() as u64 != want {
            return Err(format!("the body has {} bytes, not {want}", body.len()));
        }
        if let Some(m) = first_mismatch(0, &body) {
            return Err(format!(
                "the body differs from quiclab's pattern at byte {} (the server sent other bytes)",
                m.offset
            ));
        }
    }
    Ok(body.len() as u64)
}

/// The real-time priority of the threads that stamp the program's lines: a line is stamped
/// when it is read, so the reader must wake as soon as it is written, however busy the host
/// (below the emulator's forwarding threads, which keep the path itself on time).
const STAMP_PRIORITY: i32 = 5;

fn read_lines(pipe: Box<dyn Read + Send>, tx: &mpsc::Sender<Line>) {
    // without the privilege the thread keeps its normal priority
    quiclab_netns::sys::realtime_priority(STAMP_PRIORITY);
    let mut r = BufReader::new(pipe);
    let mut buf = Vec::new();
    loop {
        buf.clear();
        match r.read_until(b'\n', &mut buf) {
            Ok(0) | Err(_) => return,
            Ok(_) => {
                let at_us = now_us();
                let text = String::from_utf8_lossy(&buf).trim_end().to_string();
                if tx.send(Line { at_us, text }).is_err() {
                    return;
                }
            }
        }
    }
}

/// The program runs in a process group of its own, so that a signal to quiclab's group (a
/// trial stopping its endpoint) does not cut it short before quiclab stops it with the
/// stack's own stop signal; and it dies with the process that started it, however that dies:
/// an external program never outlives its trial.
pub(crate) fn supervise(cmd: &mut std::process::Command) {
    quiclab_netns::process::tie_to_parent(cmd, true);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_download_is_checked_against_the_pattern() {
        let dir = std::env::temp_dir().join(format!("quiclab-ext-check-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let good: Vec<u8> = (0..1000u64)
            .map(quiclab_endpoint::routes::pattern_byte)
            .collect();
        std::fs::write(dir.join("1000"), &good).unwrap();
        assert_eq!(check_download(&dir, "/bytes/1000"), Ok(1000));
        let e = check_download(&dir, "/bytes/999").unwrap_err();
        assert!(e.contains("1000 bytes, not 999"), "{e}");
        let mut bad = good.clone();
        bad[700] ^= 1;
        std::fs::write(dir.join("1000"), &bad).unwrap();
        let e = check_download(&dir, "/bytes/1000").unwrap_err();
        assert!(e.contains("at byte 700"), "{e}");
        std::fs::write(dir.join("other"), b"x").unwrap();
        assert!(
            check_download(&dir, "/bytes/1000")
                .unwrap_err()
                .contains("2 files")
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
