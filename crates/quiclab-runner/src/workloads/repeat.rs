//! `repeat`: `requests` GETs of the trial's size one after another, each on a new connection
//! resuming the last TLS session (0-RTT over QUIC; study S4).

use quiclab_model::campaign::{Metrics, Workload};
use quiclab_model::task::{Ask, Connection, Get, Request};
use serde_json::json;

use super::{ClientPhase, Ran, TrialCtx, WorkloadKind, requests};
use crate::keys::{PlanError, WorkloadKeys};

pub struct Repeat;

fn requests_of(w: &Workload) -> u32 {
    match w {
        Workload::Repeat { requests } => *requests,
        _ => 1,
    }
}

impl WorkloadKind for Repeat {
    fn resumes(&self) -> bool {
        true
    }

    fn kind(&self) -> &'static str {
        "repeat"
    }

    fn keys(&self) -> &'static [&'static str] {
        &["sizes", "requests"]
    }

    fn parse(&self, keys: &WorkloadKeys) -> Result<(Workload, Vec<u64>), PlanError> {
        Ok((
            Workload::Repeat {
                requests: keys.int("requests", (1, 1000))?,
            },
            keys.sizes()?,
        ))
    }

    fn trial(&self, w: &Workload, size: u64, _seed: u64) -> (Vec<u64>, serde_json::Value) {
        let requests = requests_of(w);
        (
            vec![size; requests as usize],
            json!({"kind": "repeat", "size": size, "requests": requests,
                   "connection": "new", "resume": true}),
        )
    }

    fn client(&self, t: &TrialCtx) -> ClientPhase {
        ClientPhase::Once(Request::recorded(Ask::Get(Get {
            urls: vec![t.bytes_url(t.size)],
            connection: Connection::New,
            repeat: requests_of(t.workload),
            // resumption is the workload's point; an arm may still turn it off explicitly
            resume: t.resume_by_default,
        })))
    }

    fn metrics(
        &self,
        t: &TrialCtx,
        ran: &Ran,
        requests_out: &mut serde_json::Value,
    ) -> Result<Metrics, String> {
        let records = requests::checked_records(t, ran, requests_out, requests::downloaded)?;
        let timeline = requests::timeline(ran, &records);
        let mut m = requests::records_timeline_metrics(t, ran, &records, &timeline);
        requests::budget(t, ran, &records, &timeline, &mut m);
        Ok(m)
    }
}
