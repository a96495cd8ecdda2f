//! quiclab's shared vocabulary: what a campaign is made of ([`campaign`]: arms, conditions,
//! workloads, trials and their metrics), what endpoints write ([`record`]: one request record
//! per request, timeline samples of the sending side), what a page load stores ([`page`]), where a transfer's time went ([`budget`]), how
//! numbers are written for people ([`units`]) and tables as CSV ([`csv`]), what a trial asks of its client ([`task`]), and
//! how the files a user hands quiclab are read
//! ([`input`]: regular files only, each within a stated size).
//!
//! Contract: plain data with serde, read and written by the stacks, the runner, the store and
//! the report alike, so that none of them depends on another for its types. It must never run
//! a trial, touch a database or draw a chart; the one clock it reads is
//! [`record::now_us`], the time base every record shares.

pub mod budget;
pub mod campaign;
pub mod csv;
pub mod fingerprint;
pub mod input;
pub mod page;
pub mod record;
pub mod task;
pub mod units;
