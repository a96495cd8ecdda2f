//! `quiclab browse`: load a page in a real browser (Chromium, headless) and report what it saw.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use quiclab_browser::load::{BrowserOptions, LoadOptions, load};
use quiclab_browser::object::ObjectOptions;
use quiclab_model::record::HttpVersion;
use quiclab_pages::page;
use quiclab_pages::site;

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
    #[arg(long, value_name = "NAME|FILE", default_value = "small")]
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
    let page = page::load_manifest(&c.page).context("--page")?;
    if let Some(dir) = &c.write_site {
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
        .as_deref()
        .expect("clap requires URL without --write-site");
    let program = quiclab_external::def::locate_program(&c.browser).with_context(|| {
        format!(
            "--browser {}: not found; install Chromium (Debian: apt-get install chromium)",
            c.browser
        )
    })?;
    let cacert = c
        .cacert
        .as_ref()
        .context("--cacert is required: the server's certificate (quiclab serve --write-cert)")?;
    let pem = std::fs::read_to_string(cacert)
        .with_context(|| format!("reading --cacert {}", cacert.display()))?;
    let pin = quiclab_browser::spki::pin_from_pem(&pem)
        .with_context(|| format!("--cacert {}", cacert.display()))?;
    anyhow::ensure!(
        c.timeout.is_finite() && c.timeout > 0.0 && c.timeout <= 3600.0,
        "--timeout {}: allowed: 0 to 3600 seconds",
        c.timeout
    );
    let profile = tempdir()?;
    remove_on_signal(profile.clone())?;
    let browser = BrowserOptions {
        program,
        http: HttpVersion::from_name(&c.http).expect("clap allows 2 and 3"),
        spki_pin: pin,
        profile_dir: profile.join("profile"),
        stderr: c
            .browser_log
            .clone()
            .unwrap_or_else(|| profile.join("browser.log")),
        netlog: c.netlog.clone(),
    };
    let timeout = Duration::from_secs_f64(c.timeout);
    if c.object {
        let record = quiclab_browser::object::fetch(&ObjectOptions {
            browser,
            url: url.to_string(),
            timeout,
        });
        let _ = std::fs::remove_dir_all(&profile);
        wait_if_stopping();
        return crate::cmd_get::report(&[record], c.json);
    }
    let opts = LoadOptions {
        browser,
        url: format!(
            "{}{}",
            url.trim_end_matches('/'),
            site::document_path(&page)
        ),
        page,
        timeout,
    };
    let record = load(&opts);
    let _ = std::fs::remove_dir_all(&profile);
    wait_if_stopping();
    crate::cmd_page::print_record(&record, c.json, summary)
}

fn summary(r: &quiclab_pages::page_client::PageRecord) -> String {
    let mut s = format!(
        "page {} in a browser over HTTP/{}: {} resources, {} bytes, {} connection(s)",
        r.page,
        r.http.name(),
        r.resources.len(),
        r.bytes,
        r.connections
    );
    if let Some(b) = &r.browser {
        let ms = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.0} ms"));
        s += &format!(
            "; {}: load event {}, first contentful paint {}, largest contentful paint {}, \
             Speed Index {} ({} frames), visually complete {}; protocols {}",
            b.browser,
            ms(b.load_event_ms),
            ms(b.first_contentful_paint_ms),
            ms(b.largest_contentful_paint_ms),
            ms(b.speed_index_ms),
            b.frames,
            ms(b.visually_complete_ms),
            b.protocols.join(", ")
        );
        if let Some(m) = &b.model {
            s += &format!("; quiclab's model on these arrivals: {m}");
        }
    }
    if let Some(e) = &r.error {
        s += &format!(", FAILED: {e}");
    }
    s
}

/// On SIGTERM, SIGINT, SIGHUP or SIGQUIT (a campaign stopping its trial, Ctrl-C), the browser
/// is ended, `dir` (its profile and temporary files) removed, and quiclab exits as the signal
/// would have ended it (status 128 + the signal's number).
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

/// A fresh private directory for the browser's profile.
fn tempdir() -> anyhow::Result<PathBuf> {
    let base = std::env::temp_dir();
    for n in 0..1000u32 {
        let d = base.join(format!("quiclab-browse-{}-{n}", std::process::id()));
        match std::fs::create_dir(&d) {
            Ok(()) => return Ok(d),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e).with_context(|| format!("creating {}", d.display())),
        }
    }
    anyhow::bail!("cannot create a profile directory in {}", base.display())
}
