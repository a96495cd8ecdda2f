//! `tcp-plain`: HTTP/1.1 over kernel TCP without TLS (quiclab's `serve --plain` on port 80 and
//! `get` with `http://` URLs): the baseline with the encryption taken out, so that what TLS
//! costs (a round trip, records, CPU) can be told apart from what TCP does.

use quiclab_model::record::{HttpVersion, Transport};
use quiclab_model::task::{ClientTask, Request};
use quiclab_telemetry::Mode;

use super::tcp::{TCP_CC, TFO, run_tcp, with_fast_open};
use crate::serve::{self, Serve};
use quiclab_model::task::ServerTask;

use std::net::SocketAddr;

use super::{
    ArmStack, Capability, Endpoint, HTTPS_LISTEN, Knob, Launch, RESPONSE_DELAY, SenderRecord,
    ServerOutput, Stack, quiclab_client, quiclab_server, with_cc,
};
use crate::own::{Measured, Settings};

pub struct TcpPlain;

static KNOBS: [&Knob; 3] = [&TCP_CC, &TFO, &RESPONSE_DELAY];

impl Stack for TcpPlain {
    /// TCP_INFO, as `tcp`'s server samples it.
    fn sender_record(&self) -> &[SenderRecord] {
        &SenderRecord::ALL
    }

    fn name(&self) -> &'static str {
        "tcp-plain"
    }

    fn transport(&self) -> Transport {
        Transport::Tcp
    }

    fn http(&self) -> &'static [HttpVersion] {
        &[HttpVersion::Http11]
    }

    fn implementation(&self) -> &'static str {
        "kernel TCP, hyper 1, no TLS"
    }

    fn knobs(&self) -> &'static [&'static Knob] {
        &KNOBS
    }

    fn capabilities(&self) -> &'static [Capability] {
        // page loads and telemetry speak TLS
        &[
            Capability::Get,
            Capability::GetReused,
            Capability::Upload,
            Capability::ResponseDelay,
        ]
    }

    fn resumes(&self) -> bool {
        // no TLS session to resume
        false
    }

    fn label(&self, _: HttpVersion, _: Option<Mode>, knobs: &[(String, String)]) -> String {
        with_cc(
            "HTTP/1.1 over TCP without TLS",
            super::knob(knobs, "tcp-cc"),
            "kernel default congestion control",
        )
    }

    fn scheme(&self) -> &'static str {
        "http"
    }

    fn server(&self, arm: &ArmStack, t: &Endpoint, out: ServerOutput) -> Launch {
        // http:// URLs name no port: 80
        let listen = SocketAddr::new(HTTPS_LISTEN.ip(), 80);
        with_fast_open(arm, quiclab_server(self, arm, t, out, listen))
    }

    fn settings(&self, knobs: &[(String, String)]) -> anyhow::Result<serde_json::Value> {
        Ok(Settings::of(knobs)?.value())
    }

    fn run_server(&self, task: &ServerTask) -> anyhow::Result<()> {
        serve::run(serve_for(task)?)
    }

    fn run_client(&self, task: &ClientTask) -> anyhow::Result<Measured> {
        // the request its capabilities cover: GETs and uploads
        run_tcp(task)
    }

    fn client(&self, arm: &ArmStack, t: &Endpoint, request: &Request) -> Result<Launch, String> {
        quiclab_client(self, arm, t, request)
    }
}

/// What its server runs for a trial's task.
pub(crate) fn serve_for(task: &ServerTask) -> anyhow::Result<Serve> {
    Ok(Serve {
        plain: true,
        tcp_timeline: serve::timeline_of(task),
        ..Serve::of_task(task)?
    })
}
