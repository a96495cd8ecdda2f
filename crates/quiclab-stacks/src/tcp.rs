//! `tcp`: kernel TCP with TLS 1.3 (rustls, ring) and HTTP/1.1 or HTTP/2 (hyper), quiclab's
//! own `serve` and clients; telemetry as one ordered TLS stream.

use quiclab_model::record::{HttpVersion, Transport};
use quiclab_model::task::{ClientTask, Request};
use quiclab_pages::page_client;
use quiclab_tcp::client::{Client, ClientOptions, ConnectionMode};
use quiclab_tcp::tcpinfo::{self, FASTOPEN_SYSCTL};
use quiclab_telemetry::Mode;

use crate::own::{Job, Measured, Settings, Trust, runtime};

use crate::serve::{self, Serve};
use quiclab_model::task::ServerTask;

use super::{
    ArmStack, Capability, Check, Endpoint, GROUPS, HTTPS_LISTEN, Knob, Launch, RESPONSE_DELAY,
    RESUME, SERVER_GROUPS, SenderRecord, ServerOutput, Side, Stack, check_bool, check_on_off,
    quiclab_client, quiclab_server, with_cc,
};

pub struct Tcp;

/// quiclab's TCP client (HTTP/1.1 or HTTP/2; plain HTTP/1.1 for `http://` URLs) for a task:
/// the `tcp-cc` and `tfo` knobs, the task's groups and trust; GETs, an upload or a page load.
pub(crate) fn run_tcp(task: &ClientTask) -> anyhow::Result<Measured> {
    let settings = Settings::of_task(&task.settings)?;
    let options = |trust: Trust, connection, resume, upload| ClientOptions {
        http: task.http,
        connection,
        groups: trust.groups,
        ca_pem: trust.ca_pem,
        resume,
        tcp_congestion: settings.tcp_cc.clone(),
        fast_open: settings.tfo,
        receive_buffer: settings.tcp_rcvbuf,
        path_min_rtt_us: task.recording.path_min_rtt_us,
        upload,
    };
    let f = match Job::of(task)? {
        Job::Telemetry(run) => return run.send(quiclab_quic::QuicOptions::default()),
        Job::Page(load) => {
            let opts = options(load.trust.clone(), ConnectionMode::Reuse, false, None);
            return load.run(&page_client::Stack::Tcp(opts));
        }
        Job::Fetch(f) => f,
    };
    let mode = if f.reuse {
        ConnectionMode::Reuse
    } else {
        ConnectionMode::New
    };
    let opts = options(f.trust, mode, f.resume, f.upload);
    let cacert = task.cacert.as_ref().map(|p| p.display().to_string());
    let client = Client::new(opts)
        .map_err(anyhow::Error::from)
        .map_err(|e| e.context(format!("--cacert {}", cacert.unwrap_or_default())))?;
    Ok(Measured::Requests(
        runtime()?.block_on(client.requests().run(&f.urls)),
    ))
}

/// With `tfo = true`, Fast Open is switched on in the server's namespace (the trial's own, for
/// its clients and servers) before the server starts.
pub(crate) fn with_fast_open(arm: &ArmStack, mut launch: Launch) -> Launch {
    if arm.knob("tfo") == Some("true") {
        launch
            .sysctls
            .push((FASTOPEN_SYSCTL.to_string(), "3".to_string()));
    }
    launch
}

fn check_tcp_cc(v: &str) -> Result<String, String> {
    let names = tcpinfo::available_congestion_controllers()
        .map_err(|e| format!("cannot read {}: {e}", tcpinfo::AVAILABLE_CONGESTION))?;
    if names.iter().any(|n| n == v) {
        Ok(v.to_string())
    } else {
        Err(format!(
            "this kernel's TCP congestion controllers are: {}",
            names.join(", ")
        ))
    }
}

fn check_record(v: &str) -> Result<String, String> {
    match v.parse::<u16>() {
        Ok(n) if (64..=16_384).contains(&n) => Ok(n.to_string()),
        _ => Err("allowed: bytes from 64 to 16384".into()),
    }
}

pub(crate) static TCP_CC: Knob = Knob {
    key: "tcp-cc",
    side: Side::Both,
    help: "TCP congestion controller of both endpoints (e.g. cubic, bbr, reno)",
    telemetry: true,
    check: Check::Fn(check_tcp_cc),
};

static DYNAMIC_RECORDS: Knob = Knob {
    key: "dynamic-records",
    side: Side::Server,
    help: "HTTP/2 responses start with a small frame: on or off",
    telemetry: false,
    check: Check::Fn(check_on_off),
};

static TLS_MAX_RECORD: Knob = Knob {
    key: "tls-max-record",
    side: Side::Server,
    help: "largest TLS record payload over TCP, bytes",
    telemetry: false,
    check: Check::Fn(check_record),
};

pub(crate) static TFO: Knob = Knob {
    key: "tfo",
    side: Side::Both,
    help: "TCP Fast Open: true or false",
    telemetry: false,
    check: Check::Fn(check_bool),
};

fn check_rcvbuf(v: &str) -> Result<String, String> {
    match quiclab_link::units::parse_bytes(v) {
        Ok(n) if (2048..=1 << 30).contains(&n) => Ok(format!("{n}b")),
        _ => Err("allowed: bytes from 2 KB to 1 GiB, e.g. 32kb".into()),
    }
}

static RCVBUF: Knob = Knob {
    key: "tcp-rcvbuf",
    side: Side::Client,
    help: "the client's TCP receive buffer (SO_RCVBUF before it connects), bytes (e.g. 32kb): \
           it caps the receive window the server may fill, about half of it for data",
    telemetry: false,
    check: Check::Fn(check_rcvbuf),
};

static KNOBS: [&Knob; 9] = [
    &TCP_CC,
    &RCVBUF,
    &GROUPS,
    &SERVER_GROUPS,
    &DYNAMIC_RECORDS,
    &TLS_MAX_RECORD,
    &RESUME,
    &TFO,
    &RESPONSE_DELAY,
];

impl Stack for Tcp {
    /// TCP_INFO sampled at its server's socket: `snd_cwnd`, `rtt`, the congestion state's
    /// changes, and the `tcpi_rwnd_limited` chronograph.
    fn sender_record(&self) -> &[SenderRecord] {
        &SenderRecord::ALL
    }

    fn name(&self) -> &'static str {
        "tcp"
    }

    fn transport(&self) -> Transport {
        Transport::Tcp
    }

    fn http(&self) -> &'static [HttpVersion] {
        &[HttpVersion::Http11, HttpVersion::Http2]
    }

    fn implementation(&self) -> &'static str {
        "kernel TCP, rustls 0.23 (ring), hyper 1"
    }

    fn knobs(&self) -> &'static [&'static Knob] {
        &KNOBS
    }

    fn capabilities(&self) -> &'static [Capability] {
        &[
            Capability::Get,
            Capability::GetReused,
            Capability::ResponseDelay,
            Capability::Upload,
            Capability::PageLoad,
            Capability::Telemetry,
        ]
    }

    fn telemetry_modes(&self) -> &'static [Mode] {
        &[Mode::Tcp]
    }

    fn resumes(&self) -> bool {
        true
    }

    fn label(&self, http: HttpVersion, mode: Option<Mode>, knobs: &[(String, String)]) -> String {
        let cc = super::knob(knobs, "tcp-cc");
        match mode {
            // the telemetry client sets cubic when its arm does not say
            Some(_) => with_cc(
                "telemetry over TCP+TLS 1.3 (one ordered stream)",
                cc,
                "cubic",
            ),
            None => with_cc(
                if http == HttpVersion::Http11 {
                    "HTTP/1.1 over TCP+TLS 1.3"
                } else {
                    "HTTP/2 over TCP+TLS 1.3"
                },
                cc,
                "kernel default congestion control",
            ),
        }
    }

    fn server(&self, arm: &ArmStack, t: &Endpoint, out: ServerOutput) -> Launch {
        with_fast_open(arm, quiclab_server(self, arm, t, out, HTTPS_LISTEN))
    }

    fn settings(&self, knobs: &[(String, String)]) -> anyhow::Result<serde_json::Value> {
        Ok(Settings::of(knobs)?.value())
    }

    fn run_server(&self, task: &ServerTask) -> anyhow::Result<()> {
        serve::run(serve_for(task)?)
    }

    fn run_client(&self, task: &ClientTask) -> anyhow::Result<Measured> {
        run_tcp(task)
    }

    fn client(&self, arm: &ArmStack, t: &Endpoint, request: &Request) -> Result<Launch, String> {
        quiclab_client(self, arm, t, request)
    }
}

/// What its server runs for a trial's task.
pub(crate) fn serve_for(task: &ServerTask) -> anyhow::Result<Serve> {
    Ok(Serve {
        tcp_timeline: serve::timeline_of(task),
        ..Serve::of_task(task)?
    })
}
