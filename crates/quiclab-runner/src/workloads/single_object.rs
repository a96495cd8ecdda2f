//! `single-object`: one GET of the trial's size on a new connection (study S1's TTLB).

use quiclab_model::campaign::{Metrics, Workload};
use quiclab_model::task::{Ask, Get, Request};
use serde_json::json;

use super::{ClientPhase, Ran, TrialCtx, WorkloadKind, requests};
use crate::keys::{PlanError, WorkloadKeys};
use crate::stacks::Capability;

pub struct SingleObject;

impl WorkloadKind for SingleObject {
    fn kind(&self) -> &'static str {
        "single-object"
    }

    fn keys(&self) -> &'static [&'static str] {
        &["sizes"]
    }

    fn needs(&self) -> Capability {
        // one GET on a new connection: a browser's client does it too
        Capability::GetOne
    }

    fn parse(&self, keys: &WorkloadKeys) -> Result<(Workload, Vec<u64>), PlanError> {
        Ok((Workload::SingleObject, keys.sizes()?))
    }

    fn trial(&self, _: &Workload, size: u64, _seed: u64) -> (Vec<u64>, serde_json::Value) {
        (
            vec![size],
            json!({"kind": "single-object", "size": size, "connection": "new"}),
        )
    }

    fn client(&self, t: &TrialCtx) -> ClientPhase {
        ClientPhase::Once(Request::recorded(Ask::Get(Get::one(t.bytes_url(t.size)))))
    }

    fn metrics(
        &self,
        t: &TrialCtx,
        ran: &Ran,
        requests_out: &mut serde_json::Value,
    ) -> Result<Metrics, String> {
        requests::trial_metrics(t, ran, requests_out, requests::downloaded)
    }
}
