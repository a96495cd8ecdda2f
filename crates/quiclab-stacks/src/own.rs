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

/// The client's key-exchange groups when a task names none.
pub const DEFAULT_GROUPS: &str = "x25519,p256";

/// What a client of quiclab's own measured.
#[derive(Debug)]
pub enum Measured {
    /// A record per request, in order (GETs, uploads).
    Requests(Vec<RequestRecord>),
    /// One record of a page load.
    Page(Box<PageRecord>),
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
