//! `quiclab page`: load a web page (a manifest of resources) like a browser and report every
//! resource's request, first and last byte.

use anyhow::Context;
use clap::Args;
use quiclab_model::task::{Ask, Request};
use quiclab_pages::page::{self, Page};
use quiclab_pages::page_client::PageRecord;

use crate::quicargs::QuicArgs;
use crate::recordargs::RecordArgs;
use crate::trustargs::{TcpArgs, TrustArgs};
use crate::usage::usage;

/// Load a web page like a browser, each resource once what names it has arrived
///
/// Load a web page like a browser: the document first, then every resource as soon as the
/// resource naming it has arrived (the HTML names stylesheets, scripts and images; stylesheets
/// name fonts and background images; scripts may load more). Each resource is fetched as
/// /bytes/SIZE from `quiclab serve`.
///
/// Over HTTP/2 and HTTP/3 everything goes over one connection; over HTTP/1.1 over up to 6, one
/// request at a time each, the most urgent waiting request first. Requests carry RFC 9218
/// priorities (the `priority` header, e.g. `u=0` for a stylesheet, `u=5, i` for an image) unless
/// --no-priorities; `quiclab serve` honours them over HTTP/3 (see its --quic-priorities and
/// --quic-scheduling) and, like the servers Yu & Benson measured, ignores them over HTTP/2.
///
/// The page is a built-in one (small: 18 resources, medium: 59, large: 99), a TOML manifest
/// (see docs/pages.md), or a HAR file saved by a browser (*.har: its successful GETs, with
/// their types, sizes, initiators and priorities). --print-manifest prints the page as a TOML
/// manifest, e.g. to turn a HAR into a manifest to edit:
///   quiclab page --page site.har --print-manifest > site.toml
///
/// Reports the page load time (last byte of the last resource), the first render (every
/// render-blocking resource has arrived), a visual-progress index (the weighted mean time at which
/// the above-the-fold resources became visible, like WebPageTest's Speed Index) and the time to
/// the main image, and with --json one JSON record with every resource's times. Exits with 1 if
/// the load failed.
///
/// Example (inside `quiclab link`, with `quiclab serve --write-cert /tmp/cert.pem`):
///   quiclab page --http 3 --page medium --cacert /tmp/cert.pem https://$QUICLAB_SERVER
#[derive(Args)]
#[command(verbatim_doc_comment)]
pub struct PageCmd {
    /// The server: `https://HOST[:PORT]`.
    #[arg(value_name = "URL", required_unless_present = "print_manifest")]
    url: Option<String>,
    /// The page: small, medium, large, a TOML manifest file or a HAR file (*.har).
    #[arg(long, value_name = "NAME|FILE", default_value = quiclab_stacks::own::DEFAULT_PAGE)]
    page: String,
    /// Print the page's manifest (TOML) and exit.
    #[arg(long)]
    print_manifest: bool,
    /// HTTP version.
    #[arg(long, default_value = "2", value_parser = http_values())]
    http: String,
    /// Send no `priority` headers (every request at the server's default).
    #[arg(long)]
    no_priorities: bool,
    #[command(flatten)]
    trust: TrustArgs,
    #[command(flatten)]
    tcp: TcpArgs,
    /// Print one JSON record (every resource's times) instead of a summary.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    quic: QuicArgs,
    #[command(flatten)]
    record: RecordArgs,
}

/// quiclab's own page loaders, one per `--http` value: the HTTP version's stack in the registry
/// loads the page, running the task these flags make (as a trial's `quiclab endpoint` does).
struct OwnLoader {
    http: &'static str,
    help: &'static str,
}

const LOADERS: &[OwnLoader] = &[
    OwnLoader {
        http: "1.1",
        help: "HTTP/1.1 over TCP and TLS 1.3 (up to 6 connections)",
    },
    OwnLoader {
        http: "2",
        help: "HTTP/2 over TCP and TLS 1.3 (one connection)",
    },
    OwnLoader {
        http: "3",
        help: "HTTP/3 over QUIC (quinn, one connection)",
    },
];

fn http_values() -> clap::builder::PossibleValuesParser {
    LOADERS
        .iter()
        .map(|l| clap::builder::PossibleValue::new(l.http).help(l.help))
        .collect::<Vec<_>>()
        .into()
}

pub fn page(c: PageCmd) -> anyhow::Result<i32> {
    let page: Page = page::load_manifest(&c.page).context("--page")?;
    if c.print_manifest {
        print!("{}", page.to_toml());
        return Ok(0);
    }
    let Some(url) = &c.url else {
        usage!("give the server's URL, e.g. https://$QUICLAB_SERVER");
    };
    // whom it trusts and what it offers, refused here as called wrongly
    c.trust.load()?;
    if c.http == "3" {
        c.tcp.refuse_for_quic()?;
    }
    let request = Request::new(
        Ask::Page {
            url: url.clone(),
            page: Some(c.page.clone()),
            priorities: !c.no_priorities,
        },
        c.json,
    );
    let task = crate::cmd_endpoint::front_end_task(
        &c.http, &c.trust, &c.tcp, &c.quic, &c.record, request,
    )?;
    crate::cmd_endpoint::run(&task)
}

/// Prints a page record as one JSON line (`json`) or as its `summary`; the exit code: 1 if the
/// load failed.
pub(crate) fn print_record(record: &PageRecord, json: bool) -> anyhow::Result<i32> {
    if json {
        println!(
            "{}",
            serde_json::to_string(record).context("encoding the record")?
        );
    } else {
        println!("{}", summary(record));
    }
    Ok(i32::from(record.error.is_some()))
}

/// A page load's line: quiclab's loader's (its handshake and page metrics), or a browser's (its
/// paint timings and Speed Index).
fn summary(r: &PageRecord) -> String {
    let mut s = format!(
        "page {}{} over HTTP/{}: {} resources, {} bytes, {} connection(s)",
        r.page,
        if r.browser.is_some() {
            " in a browser"
        } else {
            ""
        },
        r.http.name(),
        r.resources.len(),
        r.bytes,
        r.connections
    );
    match &r.browser {
        None => {
            if let Some(h) = r.handshake_ms {
                s += &format!(", handshake {h:.1} ms");
            }
            if let Some(m) = &r.metrics {
                s += &format!(": {m}");
            }
        }
        Some(b) => {
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
    }
    if let Some(e) = &r.error {
        s += &format!(", FAILED: {e}");
    }
    s
}
