//! The sections of the page, in order. Each is a function from the campaign's analysis to an
//! HTML fragment (or nothing, when it has nothing to say); `render` wraps it in a titled
//! `<section>` and lists it in the table of contents.

use crate::analysis::Analysis;
use crate::html::esc;
use crate::model::{Campaign, Workload};
use crate::units;

pub mod bulk;
pub mod cells;
pub mod clients;
pub mod failures;
pub mod findings;
pub mod header;
pub mod heatmap;
pub mod pages;
pub mod repeat;
pub mod segments;
pub mod telemetry;

pub struct Section {
    /// Fragment identifier, unique on the page.
    pub id: &'static str,
    pub title: &'static str,
    pub render: fn(&Analysis) -> Option<String>,
}

/// Sections after the header, in page order.
pub const ALL: &[Section] = &[
    Section {
        id: "findings",
        title: "Findings",
        render: findings::render,
    },
    Section {
        id: "repeat",
        title: "Repeated requests",
        render: repeat::render,
    },
    Section {
        id: "segments",
        title: "Segments: throughput under impairment",
        render: segments::render,
    },
    Section {
        id: "pages",
        title: "Web pages: load time, visual progress and stream scheduling",
        render: pages::render,
    },
    Section {
        id: "telemetry",
        title: "Telemetry: unit latency and head-of-line blocking",
        render: telemetry::render,
    },
    Section {
        id: "bulk",
        title: "Bulk throughput and packet size",
        render: bulk::render,
    },
    Section {
        id: "heatmaps",
        title: "Median TTLB change",
        render: heatmap::render,
    },
    Section {
        id: "clients",
        title: "Clients against servers",
        render: clients::render,
    },
    Section {
        id: "cells",
        title: "Conditions in detail",
        render: cells::render,
    },
    Section {
        id: "failures",
        title: "Failed trials",
        render: failures::render,
    },
];

/// What a trial's size means in the TTLB sections: the object's size, or for a segments
/// workload the sequence it stands for ("15 × 3.6–5 MB").
pub fn size_label(c: &Campaign, bytes: u64) -> String {
    match c.workload {
        Workload::Segments {
            count,
            min_bytes,
            max_bytes,
            ..
        } if min_bytes != max_bytes => format!(
            "{count} × {}–{}",
            units::size(min_bytes),
            units::size(max_bytes)
        ),
        Workload::Segments { count, .. } => format!("{count} × {}", units::size(bytes)),
        Workload::Repeat { requests } => format!("{requests} × {}", units::size(bytes)),
        // every unit's bytes: the TTLB sections do not render for it
        Workload::SingleObject | Workload::Telemetry { .. } | Workload::Requests { .. } => {
            units::size(bytes)
        }
        // the trial's size is its number of parallel connections
        Workload::Bulk { .. } => match bytes {
            1 => "1 connection".to_string(),
            n => format!("{n} connections"),
        },
        Workload::Pages { ref pages } => pages::label(pages, bytes),
    }
}

/// A paragraph saying what TTLB measures when a trial is more than one request (empty for
/// single objects), for the sections built on it.
pub fn ttlb_note(c: &Campaign) -> String {
    let what = match &c.workload {
        Workload::SingleObject | Workload::Telemetry { .. } | Workload::Bulk { .. } => {
            return String::new();
        }
        // the header's line says what it is
        Workload::Requests { .. } => return String::new(),
        Workload::Repeat { requests } => {
            format!("each trial makes {requests} requests, each on a new connection")
        }
        Workload::Segments { count, .. } => {
            format!("each trial fetches {count} segments one after another on one connection")
        }
        Workload::Pages { .. } => {
            return "<p class=\"caption\"><strong>TTLB here is the page load time:</strong> from \
                    the first connection attempt to the last byte of the page's last resource; \
                    TTFB is the document's first byte.</p>\n"
                .to_string();
        }
    };
    format!(
        "<p class=\"caption\"><strong>TTLB here is the whole sequence:</strong> {}, and its \
         TTLB runs from the first request's start to the last byte of the last response; its \
         TTFB and handshake are the first request's.</p>\n",
        esc(&what)
    )
}

/// The page's style sheet.
pub const CSS: &str = r#"
:root { color-scheme: light; }
body { margin: 0; background: #fff; color: #1d1d1f;
  font: 14px/1.45 system-ui, -apple-system, 'Segoe UI', Roboto, 'Helvetica Neue', Arial, sans-serif; }
main { max-width: 1340px; margin: 0 auto; padding: 16px 24px 48px; }
h1 { font-size: 26px; margin: 8px 0 4px; }
h2 { font-size: 20px; margin: 32px 0 8px; padding-bottom: 4px; border-bottom: 1px solid #ddd; }
h3 { font-size: 16px; margin: 12px 0 6px; }
summary h3 { display: inline; margin: 0; }
h4 { font-size: 15px; margin: 20px 0 6px; }
p.desc { max-width: 80ch; margin: 4px 0 12px; }
.muted { color: #6b6b6b; }
.meta { display: grid; grid-template-columns: max-content auto; gap: 2px 16px; margin: 8px 0; }
.meta dt { color: #555; } .meta dd { margin: 0; }
table { border-collapse: collapse; margin: 6px 0 12px; font-size: 13px; }
th, td { padding: 3px 8px; border-bottom: 1px solid #e4e4e4; text-align: left; vertical-align: top; }
th { background: #f5f5f7; font-weight: 600; white-space: nowrap; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
.swatch { display: inline-block; width: 10px; height: 10px; border-radius: 2px; margin-right: 6px;
  vertical-align: baseline; }
.flag { color: #a33; }
nav.toc { margin: 16px 0; padding: 8px 12px; background: #f7f7f9; border-radius: 6px; }
nav.toc ol { display: inline; padding: 0; margin: 0 0 0 8px; }
nav.toc li { display: inline; margin-right: 16px; }
ul.findings { padding-left: 20px; max-width: 110ch; }
ul.findings li { margin: 4px 0; }
figure { margin: 8px 16px 16px 0; }
figcaption { font-size: 12.5px; color: #444; max-width: 720px; margin-top: 2px; }
.heatmaps { display: flex; flex-wrap: wrap; align-items: flex-start; gap: 0 24px; }
p.caption { font-size: 13px; color: #444; max-width: 110ch; }
.charts { display: flex; flex-wrap: wrap; align-items: flex-start; }
.charts figure { margin: 0 10px 8px 0; }
.charts figcaption { max-width: 390px; }
details.condition { border: 1px solid #ddd; border-radius: 6px; margin: 10px 0; padding: 6px 12px; }
details.condition > summary { cursor: pointer; padding: 4px 0; }
details.provenance summary { cursor: pointer; color: #333; }
svg { display: block; max-width: 100%; height: auto; }
svg a:hover rect { stroke: #000; stroke-width: 1.5; }
/* The system's dark scheme: the page goes dark; the charts stay light cards (their colours
   are chosen for a white ground). */
@media (prefers-color-scheme: dark) {
  :root { color-scheme: dark; }
  body { background: #17181a; color: #e6e6e6; }
  h2 { border-bottom-color: #3a3b3e; }
  .muted, figcaption, p.caption, .meta dt, details.provenance summary { color: #a9abb0; }
  th { background: #24262a; }
  th, td { border-bottom-color: #34363a; }
  nav.toc { background: #222428; }
  details.condition { border-color: #3a3b3e; }
  .flag { color: #ff8a80; }
  a { color: #8ab4f8; } a:visited { color: #c58af9; }
  svg { border-radius: 4px; background: #fff; }
}
/* Printing shows every section, collapsed or not (the script opens them before printing). */
@media print {
  :root { color-scheme: light; }
  body { background: #fff; color: #000; font-size: 11pt; }
  main { max-width: none; padding: 0; }
  nav.toc { display: none; }
  details::details-content { content-visibility: visible; display: contents; }
  details > summary { list-style: none; }
  section, figure, table, details.condition { break-inside: avoid-page; }
  h2, h3, h4 { break-after: avoid-page; }
  a { color: inherit; text-decoration: none; }
}
"#;

/// The page's one script: before printing it opens every collapsed section (and closes them
/// again after), for browsers whose print style cannot open them. The page is complete
/// without it.
pub const SCRIPT: &str = r#"
(function () {
  var opened = [];
  addEventListener('beforeprint', function () {
    document.querySelectorAll('details:not([open])').forEach(function (d) {
      d.open = true;
      opened.push(d);
    });
  });
  addEventListener('afterprint', function () {
    opened.forEach(function (d) { d.open = false; });
    opened = [];
  });
})();
"#;
