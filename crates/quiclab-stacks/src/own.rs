//! quiclab's own clients, run in this process for a task (`quiclab endpoint --task`, and
//! `quiclab get`, `quiclab page` and `quiclab telemetry`, which make a task of their flags):
//! what every one of them shares. The GETs a request asks for, the certificates it trusts, the key-exchange groups it
//! offers, and the one-thread runtime that keeps the host's scheduling out of its timings. Each
//! stack's module builds its own client from these and its knobs.

use anyhow::Context;
use quiclab_endpoint::routes;
use quiclab_endpoint::tls::KxGroup;
use quiclab_model::record::RequestRecord;
use quiclab_model::task::{Ask, ClientTask, Connection, Get, Telemetry};
use quiclab_pages::page::{self, Page};
use quiclab_pages::page_client::{self, PageRecord};
use quiclab_quic::QuicOptions;
use quiclab_telemetry::Mode;
use quiclab_telemetry::sender::{self, SendOutcome, SenderOptions};

/// The client's key-exchange groups when a task names none.
pub const DEFAULT_GROUPS: &str = "x25519,p256";

/// The knobs every stack of quiclab's own may take (TLS, TCP, sessions), parsed: the part of an
/// own stack's task settings that the shared client code (here) and server (`serve.rs`) read. A
/// stack adds its protocol's own settings beside these fields (quinn's QUIC options, s2n-quic's
/// controller), so any own stack's settings read as these. Parsed once, where the task is made
/// ([`Settings::of`]); a knob not given is `None` or off, and its default is the endpoint's.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct Settings {
    /// `groups`: the key shares a client offers, in order.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub groups: Option<Vec<KxGroup>>,
    /// `server-groups`: the groups a server accepts, in its order of preference.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server_groups: Option<Vec<KxGroup>>,
    /// `tcp-cc`: the TCP congestion controller of the endpoint's sockets.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tcp_cc: Option<String>,
    /// `tfo`: TCP Fast Open.
    #[serde(skip_serializing_if = "is_false")]
    pub tfo: bool,
    /// `tcp-rcvbuf`: the client's socket receive buffer, bytes (it caps TCP's receive window).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tcp_rcvbuf: Option<u32>,
    /// `tls-max-record`: the server's largest TLS record's plaintext, bytes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls_max_record: Option<u16>,
    /// `dynamic-records`: the server starts a connection with small TLS records (on when
    /// `None`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dynamic_records: Option<bool>,
    /// `resume`: later connections resume the TLS session of an earlier one.
    #[serde(skip_serializing_if = "is_false")]
    pub resume: bool,
}

fn is_false(b: &bool) -> bool {
    !*b
}

impl Settings {
    /// The knobs (key, value, as the registry normalised them) that are these settings';
    /// others are left to the stack's own.
    pub fn of(knobs: &[(String, String)]) -> anyhow::Result<Settings> {
        let mut s = Settings::default();
        for (key, v) in knobs {
            match key.as_str() {
                "groups" => s.groups = Some(KxGroup::parse_list(v).context("groups")?),
                "server-groups" => {
                    s.server_groups = Some(KxGroup::parse_list(v).context("server-groups")?)
                }
                "tcp-cc" => s.tcp_cc = Some(v.clone()),
                "tfo" => s.tfo = on(key, v)?,
                "tcp-rcvbuf" => {
                    s.tcp_rcvbuf = Some(
                        quiclab_link::units::parse_bytes(v)
                            .ok()
                            .and_then(|n| u32::try_from(n).ok())
                            .with_context(|| format!("tcp-rcvbuf {v:?}: a size in bytes"))?,
                    )
                }
                "resume" => s.resume = on(key, v)?,
                "dynamic-records" => s.dynamic_records = Some(on(key, v)?),
                "tls-max-record" => {
                    s.tls_max_record = Some(
                        v.parse::<u16>()
                            .ok()
                            .filter(|n| (64..=16384).contains(n))
                            .with_context(|| {
                                format!("tls-max-record {v:?}: allowed: 64 to 16384")
                            })?,
                    )
                }
                _ => {}
            }
        }
        Ok(s)
    }

    /// The settings of a task's stack of quiclab's own (this part of them).
    pub fn of_task(settings: &serde_json::Value) -> anyhow::Result<Settings> {
        read(settings)
    }

    /// As a task carries them.
    pub fn value(&self) -> serde_json::Value {
        serde_json::to_value(self).expect("settings are plain data")
    }
}

/// A stack's typed settings from a task (`settings`), as the stack wrote them where the task was
/// made; a task without any gives the type's defaults.
pub fn read<T: serde::de::DeserializeOwned + Default>(
    settings: &serde_json::Value,
) -> anyhow::Result<T> {
    if settings.is_null() {
        return Ok(T::default());
    }
    serde_json::from_value(settings.clone()).context("the task's settings")
}

/// A knob's on/off or true/false value (the registry normalised it to one of these).
fn on(key: &str, v: &str) -> anyhow::Result<bool> {
    match v {
        "true" | "on" => Ok(true),
        "false" | "off" => Ok(false),
        v => anyhow::bail!("{key} {v:?}: allowed: on, off, true, false"),
    }
}

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
        let groups = match Settings::of_task(&task.settings)?.groups {
            Some(g) => g,
            None => KxGroup::parse_list(DEFAULT_GROUPS).expect("the default groups parse"),
        };
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

/// What a task asks of a client of quiclab's own, read and checked before anything is sent.
pub enum Job {
    Fetch(Fetch),
    Page(PageLoad),
    Telemetry(TelemetryRun),
}

impl Job {
    /// The task's job: its trust read, its page's manifest loaded, its telemetry run checked.
    pub fn of(task: &ClientTask) -> anyhow::Result<Job> {
        Ok(match &task.request.ask {
            Ask::Get(g) => Job::Fetch(Fetch::of(task, g, None)?),
            Ask::Upload { to, bytes } => Job::Fetch(Fetch::of(task, to, Some(*bytes))?),
            Ask::Page {
                url,
                page,
                priorities,
            } => Job::Page(PageLoad {
                page: page::load_manifest(page.as_deref().unwrap_or(DEFAULT_PAGE))
                    .context("--page")?,
                url: url.clone(),
                priorities: *priorities,
                trust: Trust::of(task, std::slice::from_ref(url))?,
            }),
            Ask::Telemetry(t) => Job::Telemetry(TelemetryRun::of(task, t)?),
        })
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
    /// The GETs `g` of `task` (POSTs of `upload` bytes instead, if given).
    fn of(task: &ClientTask, g: &Get, upload: Option<u64>) -> anyhow::Result<Fetch> {
        // a response delay travels with each URL to the server, which holds the response
        let delay = task.request.response_delay_us;
        let urls: Vec<String> = (0..g.repeat.max(1))
            .flat_map(|_| g.urls.iter().map(|u| routes::with_delay(u, delay)))
            .collect();
        let trust = Trust::of(task, &urls)?;
        Ok(Fetch {
            reuse: g.connection == Connection::Reuse,
            resume: g.resume || Settings::of_task(&task.settings)?.resume,
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

/// Creates the task's qlog directory, if it names one, so that a bad path fails before any
/// connection.
pub fn make_qlog_dir(task: &ClientTask) -> anyhow::Result<()> {
    create_qlog_dir(task.recording.qlog_dir.as_deref()).map(drop)
}

/// Creates `dir` if given (a qlog directory, client's or server's), so that a bad path fails
/// before any connection; the directory, as given.
pub(crate) fn create_qlog_dir(
    dir: Option<&std::path::Path>,
) -> anyhow::Result<Option<std::path::PathBuf>> {
    if let Some(d) = dir {
        std::fs::create_dir_all(d)
            .with_context(|| format!("--qlog-dir: creating {}", d.display()))?;
    }
    Ok(dir.map(std::path::Path::to_path_buf))
}

/// The TCP congestion controller of a telemetry run over TCP that names none (the kernel's
/// default is often bbr).
pub const DEFAULT_TELEMETRY_TCP_CC: &str = "cubic";

/// A telemetry run a task asks for, in the task's mode.
pub struct TelemetryRun {
    url: String,
    realtime: bool,
    /// Everything but the QUIC options, which are the stack's.
    opts: SenderOptions,
}

impl TelemetryRun {
    fn of(task: &ClientTask, t: &Telemetry) -> anyhow::Result<TelemetryRun> {
        let mode: Mode = task
            .mode
            .as_deref()
            .context("a telemetry task names its mode")?
            .parse()?;
        let units = t.units();
        anyhow::ensure!(
            units > 0,
            "{} µs at {} units a second generates no unit",
            t.duration_us,
            t.units_per_second
        );
        let trust = Trust::of(task, std::slice::from_ref(&t.url))?;
        let settings = Settings::of_task(&task.settings)?;
        make_qlog_dir(task)?;
        Ok(TelemetryRun {
            url: t.url.clone(),
            realtime: t.realtime,
            opts: SenderOptions {
                mode,
                units_per_second: t.units_per_second,
                flush_units: t.flush_units,
                units,
                ca_pem: trust.ca_pem,
                groups: trust.groups,
                tcp_congestion: (!mode.is_quic()).then(|| {
                    settings
                        .tcp_cc
                        .clone()
                        .unwrap_or_else(|| DEFAULT_TELEMETRY_TCP_CC.to_string())
                }),
                quic: QuicOptions::default(),
                path_min_rtt_us: task.recording.path_min_rtt_us,
                qlog_dir: task.recording.qlog_dir.clone(),
                drain: std::time::Duration::from_micros(t.drain_us),
            },
        })
    }

    /// Sends the run with `quic` (for the QUIC modes). A SIGINT or SIGTERM ends it early (a
    /// trial stopping its client), with what was sent so far.
    pub fn send(mut self, quic: QuicOptions) -> anyhow::Result<Measured> {
        self.opts.quic = quic;
        if self.realtime
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
            sender::run(&self.url, &self.opts, stop)
                .await
                .context("telemetry options")
        })?;
        Ok(Measured::Telemetry(Box::new(outcome)))
    }
}
