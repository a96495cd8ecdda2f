//! quiclab's own clients, run in this process for a task (`quiclab endpoint --task`, and
//! `quiclab get` and `quiclab page`, which make a task of their flags): what every one of them
//! shares. The GETs a request asks for, the certificates it trusts, the key-exchange groups it
//! offers, and the one-thread runtime that keeps the host's scheduling out of its timings. Each
//! stack's module builds its own client from these and its knobs.

use anyhow::Context;
use quiclab_endpoint::tls::KxGroup;
use quiclab_model::record::RequestRecord;
use quiclab_model::task::{Ask, ClientTask, Connection};
use quiclab_pages::page::{self, Page};
use quiclab_pages::page_client::{self, PageRecord};
use quiclab_quic::QuicOptions;
use quiclab_telemetry::Mode;
use quiclab_telemetry::sender::{self, SendOutcome, SenderOptions};

/// The client's key-exchange groups when a task names none.
pub const DEFAULT_GROUPS: &str = "x25519,p256";

/// What a client of quiclab's own measured.
#[derive(Debug)]
pub enum Measured {
    /// A record per request, in order (GETs, uploads).
    Requests(Vec<RequestRecord>),
    /// One record of a page load.
    Page(Box<PageRecord>),
    /// A telemetry run: a record per flush and its summary.
    Telemetry(Box<SendOutcome>),
}

/// Whom a client trusts and what it offers.
#[derive(Clone)]
pub struct Trust {
    /// The trusted certificates (PEM; empty when every URL is `http://`).
    pub ca_pem: String,
    pub groups: Vec<KxGroup>,
}

impl Trust {
    /// The task's certificates (needed unless every one of `urls` is `http://`) and groups.
    pub fn of(task: &ClientTask, urls: &[String]) -> anyhow::Result<Trust> {
        let groups =
            KxGroup::parse_list(task.knob("groups").unwrap_or(DEFAULT_GROUPS)).context("groups")?;
        let ca_pem = match &task.cacert {
            Some(path) => std::fs::read_to_string(path)
                .with_context(|| format!("--cacert {}", path.display()))?,
            None if urls.iter().all(|u| u.starts_with("http://")) => String::new(),
            None => anyhow::bail!(
                "--cacert is required: give the PEM certificate of the server (or its CA)"
            ),
        };
        Ok(Trust { ca_pem, groups })
    }
}

/// What a task's GETs or upload come to for a client of quiclab's own.
pub struct Fetch {
    /// Every request's URL in order (the list repeated as asked).
    pub urls: Vec<String>,
    /// One connection per server for all requests.
    pub reuse: bool,
    /// Resume TLS sessions across connections (0-RTT where the transport has it).
    pub resume: bool,
    /// POST this many bytes to each URL instead of a GET.
    pub upload: Option<u64>,
    pub trust: Trust,
}

impl Fetch {
    /// The fetch a task asks for; `Err` for a request that is not GETs or an upload, or for
    /// trust that cannot be read.
    pub fn of(task: &ClientTask) -> anyhow::Result<Fetch> {
        let (g, upload) = match &task.request.ask {
            Ask::Get(g) => (g, None),
            Ask::Upload { to, bytes } => (to, Some(*bytes)),
            ask @ (Ask::Page { .. } | Ask::Telemetry(_)) => {
                anyhow::bail!("{}", crate::cannot(&task.stack, ask))
            }
        };
        let urls: Vec<String> = (0..g.repeat.max(1))
            .flat_map(|_| g.urls.iter().cloned())
            .collect();
        let trust = Trust::of(task, &urls)?;
        Ok(Fetch {
            reuse: g.connection == Connection::Reuse,
            resume: g.resume || task.knob("resume") == Some("true"),
            upload,
            urls,
            trust,
        })
    }
}

/// A page load a task asks for: the page, the server's origin, whether its requests carry
/// priorities.
pub struct PageLoad {
    pub page: Page,
    pub url: String,
    pub priorities: bool,
    pub trust: Trust,
}

impl PageLoad {
    /// The page load of a task whose request is one; `None` otherwise.
    pub fn of(task: &ClientTask) -> Option<anyhow::Result<PageLoad>> {
        let Ask::Page {
            url,
            page,
            priorities,
        } = &task.request.ask
        else {
            return None;
        };
        Some((|| {
            let page =
                page::load_manifest(page.as_deref().unwrap_or(DEFAULT_PAGE)).context("--page")?;
            let trust = Trust::of(task, std::slice::from_ref(url))?;
            Ok(PageLoad {
                page,
                url: url.clone(),
                priorities: *priorities,
                trust,
            })
        })())
    }

    /// Loads the page with `stack`'s transport.
    pub fn run(&self, stack: &page_client::Stack) -> anyhow::Result<Measured> {
        let record = runtime()?.block_on(page_client::load(
            &self.page,
            &self.url,
            stack,
            self.priorities,
        ));
        Ok(Measured::Page(Box::new(record)))
    }
}

/// The page a page load fetches when its task names none.
pub const DEFAULT_PAGE: &str = "small";

/// The runtime of a client: one thread, so that the host's scheduling stays out of the timings
/// (one connection is used at a time; a page's requests are light).
pub fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the tokio runtime")
}

/// The TCP congestion controller of a telemetry run over TCP that names none (the kernel's
/// default is often bbr).
pub const DEFAULT_TELEMETRY_TCP_CC: &str = "cubic";

/// A telemetry run a task asks for, sent in the task's mode with `quic` (for the QUIC modes);
/// `None` if the task asks for something else. A SIGINT or SIGTERM ends the run early (a trial
/// stopping its client), with what was sent so far.
pub fn send_telemetry(task: &ClientTask, quic: QuicOptions) -> Option<anyhow::Result<Measured>> {
    let Ask::Telemetry(t) = &task.request.ask else {
        return None;
    };
    Some((|| {
        let mode: Mode = task
            .mode
            .as_deref()
            .context("a telemetry task names its mode")?
            .parse()?;
        let units = (t.duration_ms as f64 / 1000.0 * f64::from(t.units_per_second)).round() as u64;
        anyhow::ensure!(
            units > 0,
            "{} ms at {} units a second generates no unit",
            t.duration_ms,
            t.units_per_second
        );
        let trust = Trust::of(task, std::slice::from_ref(&t.url))?;
        if let Some(d) = &task.recording.qlog_dir {
            std::fs::create_dir_all(d)
                .with_context(|| format!("--qlog-dir: creating {}", d.display()))?;
        }
        let opts = SenderOptions {
            mode,
            units_per_second: t.units_per_second,
            flush_units: t.flush_units,
            units,
            ca_pem: trust.ca_pem,
            groups: trust.groups,
            tcp_congestion: (!mode.is_quic()).then(|| {
                task.knob("tcp-cc")
                    .unwrap_or(DEFAULT_TELEMETRY_TCP_CC)
                    .to_string()
            }),
            quic,
            path_min_rtt_us: task.recording.path_min_rtt_us,
            qlog_dir: task.recording.qlog_dir.clone(),
            drain: std::time::Duration::from_millis(t.drain_ms),
        };
        if t.realtime
            && let Err(e) = quiclab_telemetry::use_realtime_priority()
        {
            log::warn!(
                "cannot run at a real-time priority ({e}); latencies include this host's scheduling delays"
            );
        }
        // one connection and one writer: a single thread keeps scheduling out of the timings
        // (the clock runs on a thread of its own)
        let outcome = runtime()?.block_on(async {
            use tokio::signal::unix::{SignalKind, signal};
            let mut sigint = signal(SignalKind::interrupt()).context("handling SIGINT")?;
            let mut sigterm = signal(SignalKind::terminate()).context("handling SIGTERM")?;
            let stop = async move {
                tokio::select! {
                    _ = sigint.recv() => {}
                    _ = sigterm.recv() => {}
                }
            };
            sender::run(&t.url, &opts, stop)
                .await
                .context("telemetry options")
        })?;
        Ok(Measured::Telemetry(Box::new(outcome)))
    })())
}
