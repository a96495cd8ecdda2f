//! `quinn`: HTTP/3 over QUIC from quinn and h3, quiclab's own `serve` and clients (with its
//! scheduler for RFC 9218 priorities); telemetry over one QUIC stream, a stream per flush or
//! datagrams.

use anyhow::Context;
use quiclab_link::units;
use quiclab_model::record::{HttpVersion, Transport};
use quiclab_model::task::{ClientTask, Request};
use quiclab_pages::page_client;
use quiclab_quic::{self as quic, QuicClientOptions, QuicCongestion, QuicOptions};
use quiclab_telemetry::Mode;

use crate::own::{self, Job, Measured, Settings, Trust, make_qlog_dir, runtime};

use crate::serve::{self, Serve};
use quiclab_model::task::ServerTask;

use super::{
    ArmStack, Capability, Check, Endpoint, GROUPS, HTTPS_LISTEN, Knob, Launch, RESPONSE_DELAY,
    RESUME, SERVER_GROUPS, SenderRecord, ServerOutput, Side, Stack, check_on_off, quiclab_client,
    quiclab_server, with_cc,
};

pub struct Quinn;

fn check_quic_cc(v: &str) -> Result<String, String> {
    v.parse::<QuicCongestion>()
        .map(|c| c.name().to_string())
        .map_err(|_| {
            format!(
                "allowed: {}",
                QuicCongestion::ALL.map(QuicCongestion::name).join(", ")
            )
        })
}

fn check_duration(v: &str) -> Result<String, String> {
    units::parse_duration(v)
        .map(|_| v.to_string())
        .map_err(|e| e.to_string())
}

fn check_payload(v: &str) -> Result<String, String> {
    match v.parse::<u16>() {
        Ok(n) if (1200..=65_527).contains(&n) => Ok(n.to_string()),
        _ => Err("allowed: bytes from 1200 to 65527".into()),
    }
}

fn check_scheduling(v: &str) -> Result<String, String> {
    match v {
        "round-robin" | "fifo" => Ok(v.to_string()),
        _ => Err("allowed: round-robin or fifo".into()),
    }
}

static QUIC_CC: Knob = Knob {
    key: "quic-cc",
    side: Side::Both,
    help: "QUIC congestion controller: newreno, cubic or bbr (quinn's BBR is experimental)",
    telemetry: true,
    check: Check::Fn(check_quic_cc),
};

/// A size in bytes from `min` to 1 GiB, normalised (`16384b`); else `allowed`.
fn bytes_from(v: &str, min: u64, allowed: &str) -> Result<String, String> {
    match units::parse_bytes(v) {
        Ok(n) if (min..=1 << 30).contains(&n) => Ok(format!("{n}b")),
        _ => Err(allowed.into()),
    }
}

fn check_initial_window(v: &str) -> Result<String, String> {
    bytes_from(
        v,
        2400,
        "allowed: bytes from 2400 (two packets) to 1 GiB, e.g. 14480b",
    )
}

static INITIAL_WINDOW: Knob = Knob {
    key: "quic-initial-window",
    side: Side::Server,
    help: "the sender's congestion window before any feedback, bytes (quinn's: 12000 for \
           newreno and cubic, 240000 for bbr); e.g. 14480b, TCP's ten segments of 1448",
    telemetry: false,
    check: Check::Fn(check_initial_window),
};

static INITIAL_RTT: Knob = Knob {
    key: "quic-initial-rtt",
    side: Side::Both,
    help: "RTT assumed before the first sample, e.g. 100ms (sets the first PTO)",
    telemetry: true,
    check: Check::Fn(check_duration),
};

/// A packet threshold within what quinn's options take, or what is allowed.
fn packet_threshold(v: &str) -> Result<u32, String> {
    v.parse::<u32>()
        .ok()
        .filter(|n| quic::PACKET_THRESHOLDS.contains(n))
        .ok_or_else(|| "allowed: 1 to 1000 packets (RFC 9002 recommends 3)".into())
}

/// A time threshold within what quinn's options take, or what is allowed.
fn time_threshold(v: &str) -> Result<f64, String> {
    v.parse::<f64>()
        .ok()
        .filter(|x| quic::TIME_THRESHOLDS.contains(x))
        .ok_or_else(|| "allowed: 1 to 10 round trips, e.g. 1.125 (RFC 9002's)".into())
}

fn check_packet_threshold(v: &str) -> Result<String, String> {
    packet_threshold(v).map(|n| n.to_string())
}

fn check_time_threshold(v: &str) -> Result<String, String> {
    time_threshold(v).map(|_| v.to_string())
}

static PACKET_THRESHOLD: Knob = Knob {
    key: "quic-packet-threshold",
    side: Side::Both,
    help: "loss detection: a packet is lost once one this many packets after it is acknowledged (RFC 9002: 3)",
    telemetry: true,
    check: Check::Fn(check_packet_threshold),
};

static TIME_THRESHOLD: Knob = Knob {
    key: "quic-time-threshold",
    side: Side::Both,
    help: "loss detection: a packet is lost this many RTTs after it was sent, once a later one is acknowledged (RFC 9002: 1.125)",
    telemetry: true,
    check: Check::Fn(check_time_threshold),
};

static MTU_DISCOVERY: Knob = Knob {
    key: "quic-mtu-discovery",
    side: Side::Both,
    help: "path MTU discovery: on or off",
    telemetry: true,
    check: Check::Fn(check_on_off),
};

static INITIAL_MTU: Knob = Knob {
    key: "quic-initial-mtu",
    side: Side::Both,
    help: "UDP payload at the start, bytes",
    telemetry: true,
    check: Check::Fn(check_payload),
};

static MAX_UDP_PAYLOAD: Knob = Knob {
    key: "quic-max-udp-payload",
    side: Side::Both,
    help: "largest UDP payload (upper bound of MTU discovery), bytes",
    telemetry: true,
    check: Check::Fn(check_payload),
};

static GSO: Knob = Knob {
    key: "quic-gso",
    side: Side::Both,
    help: "generic segmentation offload: on or off",
    telemetry: true,
    check: Check::Fn(check_on_off),
};

static SCHEDULING: Knob = Knob {
    key: "quic-scheduling",
    side: Side::Server,
    help: "how the server shares its sending side between streams: round-robin or fifo",
    telemetry: false,
    check: Check::Fn(check_scheduling),
};

static PRIORITIES: Knob = Knob {
    key: "quic-priorities",
    side: Side::Server,
    help: "the server honours RFC 9218 priority headers: on or off",
    telemetry: false,
    check: Check::Fn(check_on_off),
};

fn check_window(v: &str) -> Result<String, String> {
    bytes_from(v, 1200, "allowed: bytes from 1200 to 1 GiB, e.g. 16kb")
}

static STREAM_WINDOW: Knob = Knob {
    key: "quic-stream-window",
    side: Side::Both,
    help: "flow-control limit of a stream the endpoint receives, bytes (e.g. 16kb): how far \
           the peer may send ahead of what it has read",
    telemetry: true,
    check: Check::Fn(check_window),
};

static CONN_WINDOW: Knob = Knob {
    key: "quic-conn-window",
    side: Side::Both,
    help: "flow-control limit of everything the endpoint receives on a connection, bytes",
    telemetry: true,
    check: Check::Fn(check_window),
};

static KNOBS: [&Knob; 17] = [
    &QUIC_CC,
    &INITIAL_WINDOW,
    &INITIAL_RTT,
    &PACKET_THRESHOLD,
    &TIME_THRESHOLD,
    &MTU_DISCOVERY,
    &INITIAL_MTU,
    &MAX_UDP_PAYLOAD,
    &GSO,
    &STREAM_WINDOW,
    &CONN_WINDOW,
    &GROUPS,
    &SERVER_GROUPS,
    &SCHEDULING,
    &PRIORITIES,
    &RESUME,
    &RESPONSE_DELAY,
];

/// quinn's options from knobs (key, value): the one place QUIC knobs become typed options, for
/// a plan's check, the client's task and quiclab's own command line. A knob not given keeps
/// [`QuicOptions::default`]; besides the plan's knobs it reads the command line's
/// `quic-stream-window`, `quic-conn-window` and `quic-datagrams`. An error names the knob as a
/// flag (`--quic-cc: ...`) or, for options that do not go together, "QUIC options".
pub fn quic_options(knobs: &[(String, String)]) -> anyhow::Result<QuicOptions> {
    let mut o = QuicOptions::default();
    for (key, v) in knobs {
        let at = || format!("--{key}");
        let size = |v: &str| units::parse_bytes(v).with_context(at);
        let on_off = |field, v: &str| quic::parse_on_off(field, v).with_context(at);
        let payload = |field, v: &str| {
            v.parse::<u16>()
                .map_err(|_| quic::QuicError::InvalidOption {
                    field,
                    value: v.to_string(),
                    allowed: "bytes from 1200 to 65527".into(),
                })
                .with_context(at)
        };
        match key.as_str() {
            "quic-cc" => o.congestion = v.parse().with_context(at)?,
            "quic-initial-window" => o.initial_window = Some(size(v)?),
            "quic-initial-rtt" => {
                o.initial_rtt_us = quic::parse_duration_us("initial_rtt", v).with_context(at)?
            }
            "quic-packet-threshold" => {
                o.packet_threshold = packet_threshold(v)
                    .map_err(anyhow::Error::msg)
                    .with_context(at)?
            }
            "quic-time-threshold" => {
                o.time_threshold = time_threshold(v)
                    .map_err(anyhow::Error::msg)
                    .with_context(at)?
            }
            "quic-mtu-discovery" => o.mtu_discovery = on_off("mtu_discovery", v)?,
            "quic-initial-mtu" => o.initial_mtu = payload("initial_mtu", v)?,
            "quic-max-udp-payload" => o.max_udp_payload = payload("max_udp_payload", v)?,
            "quic-gso" => o.gso = on_off("gso", v)?,
            "quic-stream-window" => o.stream_receive_window = size(v)?,
            "quic-conn-window" => o.receive_window = size(v)?,
            "quic-scheduling" => o.round_robin = v == "round-robin",
            "quic-priorities" => o.priorities = on_off("priorities", v)?,
            "quic-datagrams" => {
                o.datagram_buffer = match v.as_str() {
                    "off" => None,
                    v => Some(size(v)?),
                }
            }
            // the TLS and session knobs are the client's and the server's own
            _ => {}
        }
    }
    o.validate().context("QUIC options")?;
    Ok(o)
}

/// What quinn's endpoints take of a task: the settings every own stack shares and the QUIC
/// options, parsed from the knobs where the task is made.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
struct QuinnSettings {
    #[serde(flatten)]
    own: Settings,
    quic: QuicOptions,
}

impl Stack for Quinn {
    /// Its recorder: the controller's window, RTT samples, window cuts, and the
    /// DATA_BLOCKED / STREAM_DATA_BLOCKED frames it sent.
    fn sender_record(&self) -> &[SenderRecord] {
        &SenderRecord::ALL
    }

    fn name(&self) -> &'static str {
        "quinn"
    }

    fn transport(&self) -> Transport {
        Transport::Quic
    }

    fn http(&self) -> &'static [HttpVersion] {
        &[HttpVersion::Http3]
    }

    fn implementation(&self) -> &'static str {
        "quinn 0.11, h3 0.0.8, rustls 0.23 (ring)"
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
        &[Mode::QuicStream, Mode::QuicStreams, Mode::QuicDatagrams]
    }

    fn resumes(&self) -> bool {
        true
    }

    fn check(&self, knobs: &[(String, String)]) -> Result<Vec<String>, String> {
        // combinations (e.g. an initial MTU above the largest payload) are the stack's own rules
        let o = quic_options(knobs).map_err(|e| e.root_cause().to_string())?;
        Ok(if o.congestion.experimental() {
            vec!["quinn's BBR is experimental (BBRv1, pacing rate not applied)".into()]
        } else {
            Vec::new()
        })
    }

    fn label(&self, _http: HttpVersion, mode: Option<Mode>, knobs: &[(String, String)]) -> String {
        let stack = match mode {
            Some(mode) => super::telemetry_label(mode, "quinn"),
            None => "HTTP/3 over QUIC (quinn)".to_string(),
        };
        // quiclab's QUIC endpoints run their default controller unless told otherwise
        with_cc(
            &stack,
            super::knob(knobs, "quic-cc"),
            QuicOptions::DEFAULT.congestion.name(),
        )
    }

    fn server(&self, arm: &ArmStack, t: &Endpoint, out: ServerOutput) -> Launch {
        quiclab_server(self, arm, t, out, HTTPS_LISTEN)
    }

    fn run_server(&self, task: &ServerTask) -> anyhow::Result<()> {
        serve::run(serve_for(task)?)
    }

    fn settings(&self, knobs: &[(String, String)]) -> anyhow::Result<serde_json::Value> {
        let settings = QuinnSettings {
            own: Settings::of(knobs)?,
            quic: quic_options(knobs)?,
        };
        Ok(serde_json::to_value(settings).expect("settings are plain data"))
    }

    fn run_client(&self, task: &ClientTask) -> anyhow::Result<Measured> {
        let quic = own::read::<QuinnSettings>(&task.settings)?.quic;
        let options = |trust: Trust, reuse_connection, resume, upload| QuicClientOptions {
            quic: quic.clone(),
            ca_pem: trust.ca_pem,
            groups: trust.groups,
            reuse_connection,
            resume,
            path_min_rtt_us: task.recording.path_min_rtt_us,
            qlog_dir: task.recording.qlog_dir.clone(),
            upload,
        };
        match Job::of(task)? {
            // a telemetry run makes its qlog directory itself (over TCP too)
            Job::Telemetry(run) => run.send(quic),
            Job::Page(load) => {
                make_qlog_dir(task)?;
                let opts = options(load.trust.clone(), true, false, None);
                load.run(&page_client::Stack::Quic(opts))
            }
            Job::Fetch(f) => {
                make_qlog_dir(task)?;
                let opts = options(f.trust, f.reuse, f.resume, f.upload);
                Ok(Measured::Requests(
                    runtime()?.block_on(quic::get(&f.urls, &opts))?,
                ))
            }
        }
    }

    fn client(&self, arm: &ArmStack, t: &Endpoint, request: &Request) -> Result<Launch, String> {
        quiclab_client(self, arm, t, request)
    }
}

/// What its server runs for a trial's task.
pub(crate) fn serve_for(task: &ServerTask) -> anyhow::Result<Serve> {
    let quic = own::read::<QuinnSettings>(&task.settings)?.quic;
    Ok(Serve {
        quic_timeline: serve::timeline_of(task),
        qlog_dir: task.recording.qlog_dir.clone(),
        ..Serve::of_task(task)?.with_quic(quic)
    })
}
