//! `s2n-quic`: HTTP/3 over AWS's QUIC implementation (s2n-quic with rustls, `h3` on top; the
//! `quiclab-s2n` crate), both endpoints run in process for a task. Its Cubic or its BBRv2
//! (`quic-cc`); everything else is s2n-quic's own choice.

use std::io::Write;

use anyhow::Context;
use quiclab_endpoint::tls::Identity;
use quiclab_model::record::{HttpVersion, Transport};
use quiclab_model::task::{ClientTask, Request, ServerTask, ServerWrites};
use quiclab_s2n::{self as s2n, Congestion};
use quiclab_telemetry::Mode;

use crate::own::{self, Job, Measured, runtime};
use crate::serve::{timeline_writer, write_certificate};

use super::{
    ArmStack, Capability, Check, Endpoint, HTTPS_LISTEN, Knob, Launch, RESPONSE_DELAY,
    SenderRecord, ServerOutput, Side, Stack, quiclab_client, quiclab_server,
};

pub struct S2n;

fn check_cc(v: &str) -> Result<String, String> {
    v.parse::<Congestion>().map(|c| c.name().to_string())
}

static QUIC_CC: Knob = Knob {
    key: "quic-cc",
    side: Side::Both,
    help: "s2n-quic's congestion controller: cubic (its default) or bbr (its BBRv2)",
    check: Check::Fn(check_cc),
    telemetry: false,
};

static KNOBS: [&Knob; 2] = [&QUIC_CC, &RESPONSE_DELAY];

/// What s2n-quic's endpoints take of a task: its controller (`quic-cc`), parsed from the knobs
/// where the task is made.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
struct S2nSettings {
    congestion: Congestion,
}

impl S2nSettings {
    fn of(knobs: &[(String, String)]) -> anyhow::Result<S2nSettings> {
        Ok(S2nSettings {
            congestion: match super::knob(knobs, "quic-cc") {
                Some(v) => v
                    .parse()
                    .map_err(|e: String| anyhow::anyhow!("quic-cc {e}"))?,
                None => Congestion::default(),
            },
        })
    }
}

impl Stack for S2n {
    /// Its connection's recovery events: window, RTT and window cuts; it does not tell when
    /// flow control held it back.
    fn sender_record(&self) -> &[SenderRecord] {
        &[
            SenderRecord::Cwnd,
            SenderRecord::Rtt,
            SenderRecord::CongestionEvents,
        ]
    }

    fn name(&self) -> &'static str {
        "s2n-quic"
    }

    fn transport(&self) -> Transport {
        Transport::Quic
    }

    fn http(&self) -> &'static [HttpVersion] {
        &[HttpVersion::Http3]
    }

    fn implementation(&self) -> &'static str {
        "s2n-quic 1.91 (rustls 0.23 with aws-lc-rs), h3 0.0.8"
    }

    fn knobs(&self) -> &'static [&'static Knob] {
        &KNOBS
    }

    fn capabilities(&self) -> &'static [Capability] {
        // GETs only: no uploads, page loads or telemetry through it here
        &[
            Capability::Get,
            Capability::GetReused,
            Capability::ResponseDelay,
        ]
    }

    fn resumes(&self) -> bool {
        false
    }

    fn label(&self, _: HttpVersion, _: Option<Mode>, knobs: &[(String, String)]) -> String {
        let cc = match S2nSettings::of(knobs).unwrap_or_default().congestion {
            Congestion::Cubic => "cubic",
            Congestion::Bbr => "bbr (BBRv2)",
        };
        format!("HTTP/3 over QUIC (s2n-quic), {cc}")
    }

    fn server(&self, arm: &ArmStack, t: &Endpoint, out: ServerOutput) -> Launch {
        quiclab_server(self, arm, t, out, HTTPS_LISTEN)
    }

    fn settings(&self, knobs: &[(String, String)]) -> anyhow::Result<serde_json::Value> {
        Ok(serde_json::to_value(S2nSettings::of(knobs)?).expect("settings are plain data"))
    }

    fn run_server(&self, task: &ServerTask) -> anyhow::Result<()> {
        let timeline = match &task.writes {
            ServerWrites::Timeline(p) => Some(timeline_writer(p, "QUIC")?),
            ServerWrites::Units(_) => anyhow::bail!("s2n-quic's server here receives no telemetry"),
        };
        let identity = Identity::self_signed()?;
        write_certificate(&task.write_cert, &identity)?;
        let congestion = own::read::<S2nSettings>(&task.settings)?.congestion;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .context("starting the tokio runtime")?;
        runtime.block_on(async {
            use tokio::signal::unix::{SignalKind, signal};
            // installed before listening, so that a signal right after the ready line stops it
            let mut sigint = signal(SignalKind::interrupt()).context("handling SIGINT")?;
            let mut sigterm = signal(SignalKind::terminate()).context("handling SIGTERM")?;
            let bound = s2n::server::bind(s2n::ServerOptions {
                listen: task.listen,
                cert_pem: identity.chain_pem().to_string(),
                key_pem: identity.key_pem().to_string(),
                congestion,
                timeline,
                path_min_rtt_us: task.recording.path_min_rtt_us,
            })
            .map_err(|e| anyhow::anyhow!("starting s2n-quic's server on {}: {e}", task.listen))?;
            println!(
                "quiclab endpoint: s2n-quic listening on UDP {} (HTTP/3; congestion {}; \
                 certificate sha256 {} written to {})",
                bound.local_addr().map_err(|e| anyhow::anyhow!("{e}"))?,
                congestion.title(),
                identity.fingerprint_sha256(),
                task.write_cert.display()
            );
            std::io::stdout()
                .flush()
                .context("writing to standard output")?;
            let stop = async move {
                tokio::select! {
                    _ = sigint.recv() => {}
                    _ = sigterm.recv() => {}
                }
            };
            let stats = bound
                .run_until(stop, |e| eprintln!("quiclab endpoint: s2n-quic: {e}"))
                .await;
            eprintln!(
                "quiclab endpoint: s2n-quic stopped after {} connections ({} failed)",
                stats.connections, stats.failed
            );
            Ok(())
        })
    }

    fn run_client(&self, task: &ClientTask) -> anyhow::Result<Measured> {
        let Job::Fetch(f) = Job::of(task)? else {
            anyhow::bail!("{}", crate::cannot(self.name(), &task.request.ask));
        };
        anyhow::ensure!(
            !f.resume && f.upload.is_none(),
            "s2n-quic's client here makes GETs on full handshakes only (no resumption, no uploads)"
        );
        let opts = s2n::ClientOptions {
            ca_pem: f.trust.ca_pem,
            congestion: own::read::<S2nSettings>(&task.settings)?.congestion,
            reuse_connection: f.reuse,
        };
        let records = runtime()?
            .block_on(s2n::get(&f.urls, &opts))
            .map_err(|e| anyhow::anyhow!("s2n-quic's client: {e}"))?;
        Ok(Measured::Requests(records))
    }

    fn client(&self, arm: &ArmStack, t: &Endpoint, request: &Request) -> Result<Launch, String> {
        quiclab_client(self, arm, t, request)
    }
}
