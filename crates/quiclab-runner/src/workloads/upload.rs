//! `upload`: one POST of the trial's size per trial, on a new connection, to the server's
//! `/upload`, which answers with the count it received: TTLB is the upload's, from the
//! connection attempt to the answer's last byte (every byte has arrived by then). The data
//! travels client to server, so the up direction's rate and loss are the ones that matter.

use quiclab_model::campaign::{Metrics, Workload};
use quiclab_model::record::RequestRecord;
use quiclab_model::task::{Ask, Get, Request};
use serde_json::json;

use super::{ClientPhase, Ran, TrialCtx, WorkloadKind, requests};
use crate::keys::{PlanError, WorkloadKeys};
use crate::stacks::Capability;

pub struct Upload;

/// The upload of `size` bytes went through: status 200, every byte sent (the client checked
/// the server's count).
fn uploaded(rec: &RequestRecord, size: u64) -> Result<(), String> {
    if rec.status != 200 || rec.sent_bytes != size {
        return Err(format!(
            "status {} after sending {} of {size} bytes",
            rec.status, rec.sent_bytes
        ));
    }
    Ok(())
}

impl WorkloadKind for Upload {
    fn kind(&self) -> &'static str {
        "upload"
    }

    fn keys(&self) -> &'static [&'static str] {
        &["sizes"]
    }

    fn needs(&self) -> Capability {
        Capability::Upload
    }

    fn parse(&self, keys: &WorkloadKeys) -> Result<(Workload, Vec<u64>), PlanError> {
        Ok((
            Workload::Requests {
                name: self.kind().into(),
                description: "one POST of each size per trial, on a new connection; TTLB runs \
                              to the server's answer, sent once it has every byte"
                    .into(),
            },
            keys.sizes()?,
        ))
    }

    fn trial(&self, _: &Workload, size: u64, _seed: u64) -> (Vec<u64>, serde_json::Value) {
        (
            vec![size],
            json!({"kind": "upload", "size": size, "connection": "new"}),
        )
    }

    fn client(&self, t: &TrialCtx) -> ClientPhase {
        ClientPhase::Once(Request::recorded(Ask::Upload {
            to: Get::one(t.url("/upload")),
            bytes: t.size,
        }))
    }

    fn metrics(
        &self,
        t: &TrialCtx,
        ran: &Ran,
        requests_out: &mut serde_json::Value,
    ) -> Result<Metrics, String> {
        requests::trial_metrics(t, ran, requests_out, uploaded)
    }
}
