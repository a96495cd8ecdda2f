//! `chrome`: a real browser as the client. Chromium (Debian's `chromium`, headless) loads the
//! page's real web content over HTTP/2 or HTTP/3 (forced onto QUIC), or fetches a single object
//! on a new connection as a page's script would; it serves nothing, so an arm pairs it with a
//! server (`client-stack = "chrome"`, the server being the HTTP version's default or
//! `server-stack`). A trial starts its client as every other stack's, `quiclab endpoint --task`,
//! which drives the browser from that process ([`browse`]); `quiclab browse` is a front-end of
//! the same code.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::Context;
use quiclab_browser::load::{BrowserOptions, LoadOptions};
use quiclab_browser::object::ObjectOptions;
use quiclab_model::record::{HttpVersion, Transport};
use quiclab_model::task::{Ask, ClientTask, Request, Task};
use quiclab_pages::{page, site};

use super::{ArmStack, Capability, Endpoint, Knob, Launch, Measured, ServerOutput, Stack};
use crate::own::DEFAULT_PAGE;

pub struct Chrome;

/// The browser's program, looked up on PATH.
const PROGRAM: &str = "chromium";

impl Stack for Chrome {
    fn name(&self) -> &'static str {
        "chrome"
    }

    fn transport(&self) -> Transport {
        // a client only: an arm's transport is its server's
        Transport::Quic
    }

    fn http(&self) -> &'static [HttpVersion] {
        &[HttpVersion::Http2, HttpVersion::Http3]
    }

    fn implementation(&self) -> &'static str {
        "Chromium (Debian's chromium, headless, driven over the DevTools protocol)"
    }

    fn knobs(&self) -> &'static [&'static Knob] {
        &[]
    }

    fn capabilities(&self) -> &'static [Capability] {
        &[Capability::GetOne, Capability::PageLoad]
    }

    fn serves(&self, _c: Capability) -> bool {
        false
    }

    fn resumes(&self) -> bool {
        false
    }

    fn browser(&self) -> bool {
        true
    }

    fn takes_the_host(&self) -> bool {
        // a browser, its renderer, network service and compositor: several cores at once
        true
    }

    fn label(
        &self,
        http: HttpVersion,
        _mode: Option<quiclab_telemetry::Mode>,
        _knobs: &[(String, String)],
    ) -> String {
        format!("Chrome, {}", http.title())
    }

    fn server(&self, arm: &ArmStack, t: &Endpoint, out: ServerOutput) -> Launch {
        // never asked (it serves nothing, so no plan names it as a server); the version's
        // default server would do
        super::for_http(arm.http)
            .expect("every HTTP version has a default stack")
            .server(arm, t, out)
    }

    fn client(&self, arm: &ArmStack, t: &Endpoint, request: &Request) -> Result<Launch, String> {
        // a page's real web content, or one object on a new connection
        match &request.ask {
            Ask::Page { .. } => {}
            Ask::Get(g) if g.is_one_new() => {}
            ask @ (Ask::Get(_) | Ask::Upload { .. } | Ask::Telemetry(_)) => {
                return Err(super::cannot(self.name(), ask));
            }
        }
        let mut task = super::client_task(self, arm, t, request);
        task.recording.netlog = Some(t.dir.join("netlog.json"));
        task.recording.browser_log = Some(t.dir.join("browser.log"));
        Ok(super::endpoint_launch(t, &Task::Client(task)))
    }

    fn run_client(&self, task: &ClientTask) -> anyhow::Result<Measured> {
        let program = quiclab_external::def::locate_program(PROGRAM)
            .with_context(|| self.missing().join("; "))?;
        browse(task, &program, DEFAULT_TIMEOUT)
    }

    fn missing(&self) -> Vec<String> {
        match quiclab_external::def::locate_program(PROGRAM) {
            Some(_) => Vec::new(),
            None => vec![format!(
                "stack \"chrome\" needs the program {PROGRAM:?}, which is not installed \
                 (install: apt-get install chromium)"
            )],
        }
    }
}

/// How long a page's load event may take, unless `quiclab browse --timeout` says.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// Runs `task` (a page load of the page's real web content, or one GET on a new connection)
/// in the browser `program` with a fresh profile, which is removed afterwards: the page's
/// record, or `quiclab get`'s record of the object. The browser trusts the task's certificate
/// by its public key's pin; over HTTP/3 the origin is forced onto QUIC, over HTTP/2 QUIC is off.
///
/// On SIGTERM, SIGINT, SIGHUP or SIGQUIT (a campaign stopping its trial, Ctrl-C) the browser is
/// ended, the profile removed, and the process exits as the signal would have ended it
/// (status 128 + the signal's number): call this from a process of its own.
pub fn browse(task: &ClientTask, program: &Path, timeout: Duration) -> anyhow::Result<Measured> {
    let cacert = task
        .cacert
        .as_ref()
        .context("a certificate to trust is required: the server's (quiclab serve --write-cert)")?;
    let pem = std::fs::read_to_string(cacert)
        .with_context(|| format!("reading --cacert {}", cacert.display()))?;
    let pin = quiclab_browser::spki::pin_from_pem(&pem)
        .with_context(|| format!("--cacert {}", cacert.display()))?;
    // what to load, checked before a browser starts: a page (its manifest and the document's
    // URL) or an object's URL
    let (page, url) = match &task.request.ask {
        Ask::Page { url, page, .. } => {
            let page =
                page::load_manifest(page.as_deref().unwrap_or(DEFAULT_PAGE)).context("--page")?;
            let url = format!(
                "{}{}",
                url.trim_end_matches('/'),
                site::document_path(&page)
            );
            (Some(page), url)
        }
        Ask::Get(g) if g.is_one_new() => (None, g.urls[0].clone()),
        ask => anyhow::bail!("{}", super::cannot("chrome", ask)),
    };
    anyhow::ensure!(
        matches!(task.http, HttpVersion::Http2 | HttpVersion::Http3),
        "HTTP/{}: a browser's client speaks 2 or 3",
        task.http.name()
    );
    let profile = tempdir()?;
    remove_on_signal(profile.clone())?;
    let browser = BrowserOptions {
        program: program.to_path_buf(),
        http: task.http,
        spki_pin: pin,
        // short: Chromium's singleton socket goes under it, and a socket's path is short
        profile_dir: profile.join("p"),
        stderr: task
            .recording
            .browser_log
            .clone()
            .unwrap_or_else(|| profile.join("browser.log")),
        netlog: task.recording.netlog.clone(),
    };
    let measured = match page {
        Some(page) => Measured::Page(Box::new(quiclab_browser::load::load(&LoadOptions {
            browser,
            url,
            page,
            timeout,
        }))),
        None => Measured::Requests(vec![quiclab_browser::object::fetch(&ObjectOptions {
            browser,
            url,
            timeout,
        })]),
    };
    let _ = std::fs::remove_dir_all(&profile);
    wait_if_stopping();
    Ok(measured)
}

/// On SIGTERM, SIGINT, SIGHUP or SIGQUIT, the browser is ended, `dir` (its profile and
/// temporary files) removed, and the process exits as the signal would have ended it (status
/// 128 + the signal's number).
fn remove_on_signal(dir: PathBuf) -> anyhow::Result<()> {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGQUIT, SIGTERM};
    let mut signals = signal_hook::iterator::Signals::new([SIGTERM, SIGINT, SIGHUP, SIGQUIT])
        .context("handling termination signals")?;
    std::thread::Builder::new()
        .name("browse-signals".into())
        .spawn(move || {
            if let Some(sig) = signals.forever().next() {
                // set before the browser is ended: the load that fails because of it must
                // not report that failure as the exit status
                STOPPING.store(true, Ordering::SeqCst);
                quiclab_browser::cdp::kill_running();
                let _ = std::fs::remove_dir_all(&dir);
                std::process::exit(128 + sig);
            }
        })
        .context("starting the signal thread")?;
    Ok(())
}

/// Set by the signal thread before it ends the browser.
static STOPPING: AtomicBool = AtomicBool::new(false);

/// A load ended by a termination signal returns while the signal's thread is still removing
/// the profile: this thread waits for that thread's exit (status 128 + signal), so the status is
/// the signal's, not the failed load's.
fn wait_if_stopping() {
    while STOPPING.load(Ordering::SeqCst) {
        std::thread::park();
    }
}

/// A fresh private directory for the browser's profile, its name short (Chromium's singleton
/// socket goes under it: [`quiclab_browser::load::SOCKET_DIR_MAX`]).
fn tempdir() -> anyhow::Result<PathBuf> {
    let base = std::env::temp_dir();
    for n in 0..1000u32 {
        let d = base.join(format!("qlb-{}-{n}", std::process::id()));
        match std::fs::create_dir(&d) {
            Ok(()) => return Ok(d),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e).with_context(|| format!("creating {}", d.display())),
        }
    }
    anyhow::bail!("cannot create a profile directory in {}", base.display())
}
