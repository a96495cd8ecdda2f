//! quiclab's report: statistics, SVG charts and one self-contained HTML page from a campaign's
//! results.
//!
//! Contract: the input is [`model::Campaign`], plain data that the results store fills; nothing
//! here reads a clock, a file or the network, so the same campaign always renders the same page.

pub mod model;
pub mod stats;
