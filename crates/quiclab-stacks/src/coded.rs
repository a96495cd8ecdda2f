//! `coded`: quiclab's network-coded transport (RaptorQ over UDP, quiclab-coded) with the same
//! routes as HTTP, served by `quiclab serve --coded-listen` on HTTP/3's port.

use quiclab_coded_udp as coded;
use quiclab_model::record::{HttpVersion, Transport};
use quiclab_model::task::{ClientTask, Request};
use quiclab_telemetry::Mode;

use crate::own::{Job, Measured, Settings, runtime};

use crate::serve::{self, Serve};
use quiclab_model::task::ServerTask;

use super::{
    ArmStack, Capability, Endpoint, GROUPS, HTTPS_LISTEN, Knob, Launch, SERVER_GROUPS,
    SenderRecord, ServerOutput, Stack, quiclab_client, quiclab_server,
};

pub struct Coded;

/// The label of a `coded` arm when the plan gives none.
pub const LABEL: &str = "network-coded transport (RaptorQ, goodput-following rate)";

static KNOBS: [&Knob; 2] = [&GROUPS, &SERVER_GROUPS];

impl Stack for Coded {
    /// Its rate control: the cap on bytes in flight, RTT and congestion events; the coded
    /// transport has no flow control.
    fn sender_record(&self) -> &[SenderRecord] {
        &[
            SenderRecord::Cwnd,
            SenderRecord::Rtt,
            SenderRecord::CongestionEvents,
        ]
    }

    fn name(&self) -> &'static str {
        "coded"
    }

    fn transport(&self) -> Transport {
        Transport::Coded
    }

    fn http(&self) -> &'static [HttpVersion] {
        &[HttpVersion::Coded]
    }

    fn implementation(&self) -> &'static str {
        "quiclab-coded (RaptorQ repair symbols over UDP, TLS 1.3 key schedule from rustls)"
    }

    fn knobs(&self) -> &'static [&'static Knob] {
        &KNOBS
    }

    fn capabilities(&self) -> &'static [Capability] {
        // not HTTP, so no page loads; its client only downloads; no telemetry modes
        &[Capability::Get, Capability::GetReused]
    }

    fn resumes(&self) -> bool {
        false
    }

    fn label(&self, _: HttpVersion, _: Option<Mode>, _: &[(String, String)]) -> String {
        LABEL.to_string()
    }

    fn server(&self, arm: &ArmStack, t: &Endpoint, out: ServerOutput) -> Launch {
        quiclab_server(self, arm, t, out, HTTPS_LISTEN)
    }

    fn settings(&self, knobs: &[(String, String)]) -> anyhow::Result<serde_json::Value> {
        Ok(Settings::of(knobs)?.value())
    }

    fn run_server(&self, task: &ServerTask) -> anyhow::Result<()> {
        serve::run(serve_for(task)?)
    }

    fn run_client(&self, task: &ClientTask) -> anyhow::Result<Measured> {
        let Job::Fetch(f) = Job::of(task)? else {
            anyhow::bail!("{}", crate::cannot(self.name(), &task.request.ask));
        };
        // no session resumption, no 0-RTT, and its client only downloads
        anyhow::ensure!(
            !f.resume,
            "the coded transport has no session resumption or 0-RTT (every connection makes a \
             full handshake)"
        );
        anyhow::ensure!(
            f.upload.is_none(),
            "the coded transport's client only downloads"
        );
        let opts = coded::CodedClientOptions {
            ca_pem: f.trust.ca_pem,
            groups: f.trust.groups,
            reuse_connection: f.reuse,
            config: coded::Config::default(),
        };
        Ok(Measured::Requests(
            runtime()?.block_on(coded::get(&f.urls, &opts))?,
        ))
    }

    fn client(&self, arm: &ArmStack, t: &Endpoint, request: &Request) -> Result<Launch, String> {
        quiclab_client(self, arm, t, request)
    }
}

/// What its server runs for a trial's task.
pub(crate) fn serve_for(task: &ServerTask) -> anyhow::Result<Serve> {
    // it takes HTTP/3's place on the UDP port, so URLs stay the same
    Ok(Serve {
        coded_listen: Some(task.listen),
        coded_timeline: serve::timeline_of(task),
        ..Serve::of_task(task)?
    })
}
