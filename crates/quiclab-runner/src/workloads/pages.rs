//! `pages`: one web page per trial, loaded like a browser loads it (`quiclab page`); each page's
//! total bytes are its trial size, and TTLB is the page load time (study S1's pages; manifests
//! and metrics in docs/pages.md).

use quiclab_model::campaign::{Metrics, Workload};
use quiclab_model::task::{Ask, Request};
use serde_json::json;

use super::{ClientPhase, Ran, TrialCtx, WorkloadKind};
use crate::keys::{PlanError, WorkloadKeys};
use crate::outputs;
use crate::page;
use crate::stacks::Capability;

pub struct Pages;

impl WorkloadKind for Pages {
    fn kind(&self) -> &'static str {
        "pages"
    }

    fn keys(&self) -> &'static [&'static str] {
        &["pages"]
    }

    fn needs(&self) -> Capability {
        Capability::PageLoad
    }

    fn parse(&self, keys: &WorkloadKeys) -> Result<(Workload, Vec<u64>), PlanError> {
        page::parse_pages(keys.get("pages"), keys.file())
            .map_err(|(span, message)| keys.err(span, message))
    }

    fn trial(&self, w: &Workload, size: u64, _seed: u64) -> (Vec<u64>, serde_json::Value) {
        // one page load: the client discovers its requests; a server of static files (an
        // external stack's) needs every resource's size, each served at /bytes/N
        let page = page::page_for(w, size);
        let mut sizes: Vec<u64> = page
            .and_then(|p| quiclab_pages::page::load_manifest(&p.source).ok())
            .map(|m| m.resources.iter().map(|r| r.bytes).collect())
            .unwrap_or_default();
        sizes.sort_unstable();
        sizes.dedup();
        (
            sizes,
            json!({"kind": "pages", "page": page.map(|p| &p.name),
                   "source": page.map(|p| &p.source), "bytes": size}),
        )
    }

    fn site(&self, t: &TrialCtx) -> Option<quiclab_pages::page::Page> {
        let p = page::page_for(t.workload, t.size)?;
        quiclab_pages::page::load_manifest(&p.source).ok()
    }

    fn client(&self, t: &TrialCtx) -> ClientPhase {
        ClientPhase::Once(Request::recorded(Ask::Page {
            url: t.url(""),
            page: page::page_for(t.workload, t.size).map(|p| p.source.clone()),
            priorities: true,
        }))
    }

    fn metrics(
        &self,
        t: &TrialCtx,
        ran: &Ran,
        requests_out: &mut serde_json::Value,
    ) -> Result<Metrics, String> {
        trial_metrics(t, ran, requests_out)
    }
}

/// A page trial's outcome from what its client wrote, the server's timeline file and its qlogs
/// under the trial's folder, how the client ended and the link's reports, with the load's time
/// budget; `Err` says why the trial failed. The record goes to `requests_out` either way.
fn trial_metrics(
    t: &TrialCtx,
    ran: &Ran,
    requests_out: &mut serde_json::Value,
) -> Result<Metrics, String> {
    let rec = page::read_record(ran.client_out);
    if let Some(r) = &rec {
        *requests_out =
            serde_json::to_value(r).map_or(serde_json::json!([]), |v| serde_json::json!([v]));
    }
    if let Some(err) = ran.reports.iter().find_map(|r| r.error.clone()) {
        return Err(format!("the link emulator failed: {err}"));
    }
    let status = ran
        .status
        .ok_or(ran.timeout)
        .map_err(|timeout| format!("the client did not finish within {:?}", timeout))?;
    let Some(rec) = rec else {
        return Err(format!(
            "the client ({status}) wrote no page record: {}",
            outputs::tail(ran.client_log, 3)
        ));
    };
    let device_drops: u64 = ran.reports.iter().map(|r| r.device_drops).sum();
    if device_drops > 0 {
        return Err(format!(
            "{device_drops} packets were dropped by the kernel before reaching the emulator (the \
             host could not keep up)"
        ));
    }
    let timeline = outputs::read_timeline(ran.server_output, rec.start_us);
    let mut m = page::metrics(
        &rec,
        &timeline,
        outputs::server_resent(ran.dir),
        ran.reports,
        t.min_rtt_ms(),
    )?;
    match crate::budget::of_page(
        ran.dir,
        t.link,
        ran.link_epoch_ns,
        &rec,
        m.ttlb_ms,
        t.scheme == "https",
        crate::budget::SenderLog {
            timeline: &timeline,
            offers: t.sender_record,
        },
    ) {
        Ok(b) => m.detail.budget = b,
        Err(e) => m.detail.budget_error = Some(e),
    }
    Ok(m)
}
