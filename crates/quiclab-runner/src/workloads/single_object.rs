//! `single-object`: one GET of the trial's size on a new connection (study S1's TTLB). With
//! `response-delay`, the server holds each response that long after the request arrives: a
//! think time planted on purpose, which both stacks must honour.

use quiclab_link::units;
use quiclab_model::campaign::{Metrics, Workload};
use quiclab_model::task::{Ask, Get, Request};
use serde_json::json;

use super::{ClientPhase, Ran, TrialCtx, WorkloadKind, requests};
use crate::keys::{PlanError, WorkloadKeys};
use crate::stacks::Capability;

pub struct SingleObject;

/// The workload's response delay, µs (0: none).
fn delay_us(w: &Workload) -> u64 {
    match w {
        Workload::SingleObject { response_delay_us } => *response_delay_us,
        _ => 0,
    }
}

impl WorkloadKind for SingleObject {
    fn kind(&self) -> &'static str {
        "single-object"
    }

    fn keys(&self) -> &'static [&'static str] {
        &["sizes", "response-delay"]
    }

    fn needs(&self) -> Capability {
        // one GET on a new connection: a browser's client does it too
        Capability::GetOne
    }

    fn needs_also(&self, w: &Workload) -> Option<Capability> {
        (delay_us(w) > 0).then_some(Capability::ResponseDelay)
    }

    fn parse(&self, keys: &WorkloadKeys) -> Result<(Workload, Vec<u64>), PlanError> {
        let response_delay_us = match keys.get("response-delay") {
            None => 0,
            Some(v) => {
                let d = units::parse_duration(&keys.scalar(v)?)
                    .ok()
                    .filter(|d| *d <= crate::stacks::MAX_RESPONSE_DELAY)
                    .ok_or_else(|| {
                        keys.err(
                            Some(v.span()),
                            "response-delay: allowed: a duration up to 60s, e.g. \"50ms\"",
                        )
                    })?;
                d.as_micros() as u64
            }
        };
        Ok((Workload::SingleObject { response_delay_us }, keys.sizes()?))
    }

    fn trial(&self, w: &Workload, size: u64, _seed: u64) -> (Vec<u64>, serde_json::Value) {
        let mut identity = json!({"kind": "single-object", "size": size, "connection": "new"});
        // a plan without a delay keeps the trial ids it had before the key existed
        if delay_us(w) > 0 {
            identity["response_delay_us"] = json!(delay_us(w));
        }
        (vec![size], identity)
    }

    fn client(&self, t: &TrialCtx) -> ClientPhase {
        let mut request = Request::recorded(Ask::Get(Get::one(t.bytes_url(t.size))));
        request.response_delay_us = delay_us(t.workload);
        ClientPhase::Once(request)
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
        requests::doubt_sender(t, &records, &timeline, &mut m);
        Ok(m)
    }
}
