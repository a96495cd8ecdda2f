//! quiclab's own clients, run in this process for a task (`quiclab endpoint --task`, and
//! `quiclab get`, which makes a task of its flags): what every one of them shares. The GETs a
//! request asks for, the certificates it trusts, the key-exchange groups it offers, and the
//! one-thread runtime that keeps the host's scheduling out of its timings. Each stack's module
//! builds its own client from these and its knobs.

use anyhow::Context;
use quiclab_endpoint::tls::KxGroup;
use quiclab_model::task::{Ask, ClientTask, Connection};

/// The client's key-exchange groups when a task names none.
pub const DEFAULT_GROUPS: &str = "x25519,p256";

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
    /// The trusted certificates (PEM; empty when every URL is `http://`).
    pub ca_pem: String,
    pub groups: Vec<KxGroup>,
    pub runtime: tokio::runtime::Runtime,
}

impl Fetch {
    /// The fetch a task asks for; `Err` for a request that is not GETs or an upload, or for
    /// trust that cannot be read.
    pub fn of(task: &ClientTask) -> anyhow::Result<Fetch> {
        let resume_knob = task.knob("resume") == Some("true");
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
        let (reuse, resume) = (g.connection == Connection::Reuse, g.resume || resume_knob);
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
        // one connection is used at a time: a single thread keeps scheduling out of the timings
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("starting the tokio runtime")?;
        Ok(Fetch {
            urls,
            reuse,
            resume,
            upload,
            ca_pem,
            groups,
            runtime,
        })
    }
}
