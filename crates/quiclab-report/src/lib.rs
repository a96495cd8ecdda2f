//! quiclab's report: statistics, SVG charts and one self-contained HTML page from a campaign's
//! results.
//!
//! Contract: the input is [`model::Campaign`], plain data that the results store fills; nothing
//! here reads a clock, a file or the network, so the same campaign always renders the same page,
//! byte for byte ([`render`]). The page needs nothing else to be read: CSS and SVG are inline, it
//! loads no font or image, and its one inline script (opening collapsed sections for printing)
//! is not needed to read it. It follows the system's dark scheme, and prints every section.
//!
//! Layout of the code: [`analysis`] reduces a campaign to per-cell statistics once (using
//! [`stats`]); each section of the page is a module under `sections` that turns that analysis into
//! HTML, drawing charts with the shared `chart` module. A new workload adds a section module and
//! lists it in `sections::ALL`.

pub use quiclab_stats::adaptive;
pub mod analysis;
mod chart;
pub mod compare;
pub mod explain;
pub mod figures;
pub mod fingerprints;
mod html;
pub mod playback;
mod sections;
pub use quiclab_stats as stats;
pub mod synthetic;

/// S5's published percentiles, which the telemetry section sets beside a campaign's.
pub use sections::telemetry::APTPOD;

/// The campaign model the report reads (from quiclab-model).
pub(crate) use quiclab_model::campaign as model;
/// How numbers are written, shared with the rest of quiclab.
pub(crate) use quiclab_model::units;

use analysis::Analysis;
use html::esc;
use std::fmt::Write;

/// The report of `campaign` as a complete HTML document.
pub fn render(campaign: &model::Campaign) -> String {
    let an = Analysis::new(campaign);
    let mut out = String::with_capacity(1 << 20);
    let title = format!("quiclab report: {}", campaign.name);
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>{}</title>\n<style>{}</style>\n</head>\n<body>\n<main>\n",
        esc(&title),
        sections::CSS
    );
    out.push_str(&sections::header::render(&an));
    let bodies: Vec<(&sections::Section, String)> = sections::ALL
        .iter()
        .filter_map(|s| (s.render)(&an).map(|body| (s, body)))
        .collect();
    out.push_str("<nav class=\"toc\"><strong>Contents</strong><ol>");
    for (s, _) in &bodies {
        let _ = write!(out, "<li><a href=\"#{}\">{}</a></li>", s.id, esc(s.title));
    }
    out.push_str("</ol></nav>\n");
    for (s, body) in bodies {
        let _ = write!(
            out,
            "<section id=\"{}\">\n<h2>{}</h2>\n{}</section>\n",
            s.id,
            esc(s.title),
            body
        );
    }
    let _ = write!(
        out,
        "</main>\n<script>{}</script>\n</body>\n</html>\n",
        sections::SCRIPT
    );
    out
}
