//! `quiclab browse`: load a page in a real browser (Chromium, headless) and report what it saw:
//! a front-end of the `chrome` stack's client (`quiclab_stacks::chrome::browse`), which a
//! trial's endpoint task runs too.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use quiclab_model::record::HttpVersion;
use quiclab_model::task::{Ask, ClientTask, Get, Recording, Request};
use quiclab_pages::page;
use quiclab_pages::site;

/// Load a web page in Chromium and report its load event, paints and Speed Index
///
/// Load a web page in Chromium (headless, a fresh profile) and report the network and the
/// browser's own metrics: the load event, first and largest contentful paint, and the Speed
/// Index of a filmstrip of screenshots (WebPageTest's definition), with every resource's
/// request, first and last byte and the protocol that carried it.
///
/// The server serves the page as real web content: `quiclab browse --page P --write-site DIR`
/// writes it under DIR/site/P/ for `quiclab serve --root DIR`. The browser trusts the server's
/// certificate (--cacert) by its public-key pin; over HTTP/3 the origin is forced onto QUIC,
/// over HTTP/2 QUIC is off, and every resource's protocol is checked against the one asked for.
///
/// With --object, URL is one object instead (e.g. https://HOST/bytes/100000): the browser
/// starts on a blank page, then fetches it on a new connection as a page's script would, and
/// the record is `quiclab get`'s (times from the connection attempt, the handshake's end, the
/// response's headers and the last byte; the key-exchange group the browser used).
///
/// Exits with 1 if the load failed (a missing or crashed browser, a resource that did not
/// arrive, a load event that did not come within --timeout).
///
/// Examples (inside `quiclab link`):
///   quiclab browse --page medium --write-site /tmp/www
///   quiclab serve --root /tmp/www --write-cert /tmp/cert.pem          (server side)
///   quiclab browse --http 3 --page medium --cacert /tmp/cert.pem https://$QUICLAB_SERVER
///   quiclab browse --http 3 --object --cacert /tmp/cert.pem https://$QUICLAB_SERVER/bytes/100000
#[derive(Args)]
#[command(verbatim_doc_comment)]
pub struct BrowseCmd {
    /// The server: `https://HOST[:PORT]` (the page is at /site/PAGE/ below it).
    #[arg(value_name = "URL", required_unless_present = "write_site")]
    url: Option<String>,
    /// The page: small, medium, large, a TOML manifest or a HAR file.
    #[arg(long, value_name = "NAME|FILE", default_value = quiclab_stacks::own::DEFAULT_PAGE)]
    page: String,
    /// Fetch URL as one object on a new connection, and print `quiclab get`'s record.
    #[arg(long, conflicts_with_all = ["page", "write_site"])]
    object: bool,
    /// With --object: the connection to fetch it on; a fresh browser has only new ones.
    #[arg(long, value_parser = ["new"], requires = "object")]
    connection: Option<String>,
    /// Write the page's site under DIR/site/PAGE/ and exit.
    #[arg(long, value_name = "DIR")]
    write_site: Option<PathBuf>,
    /// HTTP version: 2 (QUIC off) or 3 (the origin forced onto QUIC).
    #[arg(long, default_value = "3", value_parser = ["2", "3"])]
    http: String,
    /// The server's certificate (PEM), trusted by its public key's pin.
    #[arg(long, value_name = "FILE")]
    cacert: Option<PathBuf>,
    /// The browser's program (a path, or a name looked up on PATH).
    #[arg(long, value_name = "PROGRAM", default_value = "chromium")]
    browser: String,
    /// Keep Chromium's net-log here.
    #[arg(long, value_name = "FILE")]
    netlog: Option<PathBuf>,
    /// Keep the browser's standard error here (default: a file beside the profile, removed).
    #[arg(long, value_name = "FILE")]
    browser_log: Option<PathBuf>,
    /// Seconds the load event may take.
    #[arg(long, default_value_t = 60.0)]
    timeout: f64,
    /// Print one JSON record instead of a summary.
    #[arg(long)]
    json: bool,
}

pub fn browse(c: BrowseCmd) -> anyhow::Result<i32> {
    if let Some(dir) = &c.write_site {
        let page = page::load_manifest(&c.page).context("--page")?;
        let folder = dir.join(site::SITE_DIR).join(site::slug(&page));
        let built = site::build(&page);
        built
            .write(&folder)
            .with_context(|| format!("writing {}", folder.display()))?;
        for (i, want, got) in built.shortfall(&page) {
            eprintln!(
                "quiclab: {}: {want} bytes in the manifest, {got} as a real file (its smallest form)",
                page.resources[i].id
            );
        }
        println!("{}", folder.display());
        return Ok(0);
    }
    let url = c
        .url
        .clone()
        .expect("clap requires URL without --write-site");
    let program = quiclab_external::def::locate_program(&c.browser).with_context(|| {
        format!(
            "--browser {}: not found; install Chromium (Debian: apt-get install chromium)",
            c.browser
        )
    })?;
    anyhow::ensure!(
        c.cacert.is_some(),
        "--cacert is required: the server's certificate (quiclab serve --write-cert)"
    );
    anyhow::ensure!(
        c.timeout.is_finite() && c.timeout > 0.0 && c.timeout <= 3600.0,
        "--timeout {}: allowed: 0 to 3600 seconds",
        c.timeout
    );
    // the task a trial hands the browser's stack, made of the flags
    let ask = if c.object {
        Ask::Get(Get::one(url))
    } else {
        Ask::Page {
            url,
            page: Some(c.page.clone()),
            priorities: false,
        }
    };
    let stack = quiclab_stacks::all()
        .into_iter()
        .find(|s| s.browser())
        .expect("a browser's stack is built in");
    let task = ClientTask {
        stack: stack.name().into(),
        http: HttpVersion::from_name(&c.http).expect("clap allows 2 and 3"),
        mode: None,
        knobs: Vec::new(),
        settings: serde_json::Value::Null,
        cacert: c.cacert.clone(),
        recording: Recording {
            netlog: c.netlog.clone(),
            browser_log: c.browser_log.clone(),
            ..Default::default()
        },
        request: Request::new(ask, c.json),
        program: Default::default(),
    };
    let timeout = Duration::from_secs_f64(c.timeout);
    let measured = quiclab_stacks::chrome::browse(&task, &program, timeout)?;
    crate::cmd_endpoint::print(&task, &measured)
}
