//! `quiclab telemetry`: the sending side of the telemetry workload (timestamped units at a
//! constant rate, in flushes), against `quiclab serve --telemetry-log`.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use quiclab_endpoint::tls::KxGroup;
use quiclab_model::task::{self, Ask, ClientTask, Recording, Request};
use quiclab_telemetry::sender::SendOutcome;
use quiclab_telemetry::{Mode, SenderSummary};

use crate::quicargs::QuicArgs;
use crate::recordargs::{RecordArgs, duration};
use crate::usage::{Usage, usage};

/// Send timestamped telemetry units to `quiclab serve`, which logs each one's arrival
///
/// Send telemetry: 8-byte units, each holding its generation time (CLOCK_MONOTONIC
/// microseconds), generated at a constant rate and sent in flushes, to a `quiclab serve
/// --telemetry-log FILE`, which logs every unit with its receive time. Both ends read the same
/// clock, so a unit's one-way latency is exact. The study this reproduces (S5) sent 1000 units
/// per second in flushes of 10 (one every 10 ms) for 10 s.
///
/// Modes (--mode):
///   tcp             TLS 1.3 over TCP, one ordered byte stream (TCP_NODELAY on)
///   quic-stream     one QUIC stream for every flush (ordered, like TCP)
///   quic-streams    a new QUIC stream per flush: a loss delays only the flush it hit
///   quic-datagrams  one QUIC datagram per flush (RFC 9221): a lost flush is never repaired;
///                   the server must accept datagrams (--telemetry-log turns them on)
///
/// Units are generated on a fixed schedule from 5 ms after the handshake: unit i at
/// epoch + i/rate, flush k sent when its last unit is generated. With no loss a unit's latency
/// is the one-way delay plus its wait in the flush (9 ms down to 0 for flushes of 10 at 1000
/// units/s). A thread of its own wakes for each flush (absolute sleeps, then a short spin);
/// how late flushes left is reported.
///
/// At the end the client waits (at most --drain) until the server has everything, then closes.
/// It prints a summary, or with --json one record per flush (flush, gen_us of its first unit,
/// units, send_us, stream) and a summary record (the schedule, counts, send lateness,
/// transport statistics). SIGINT or SIGTERM stops sending and still prints what was sent.
/// Exits with 1 if the run ended early.
///
/// Example:
///   quiclab link --delay 25ms --loss 2% \
///     --server 'quiclab serve --write-cert /tmp/cert.pem --telemetry-log /tmp/units.jsonl' \
///     --client 'quiclab telemetry --mode quic-streams --cacert /tmp/cert.pem https://$QUICLAB_SERVER'
#[derive(Args)]
#[command(verbatim_doc_comment)]
pub struct TelemetryCmd {
    /// The server: https://HOST, or https://HOST:PORT for another port than 443.
    #[arg(value_name = "URL")]
    url: String,
    /// How flushes travel: tcp, quic-stream, quic-streams or quic-datagrams.
    #[arg(long, value_name = "MODE", value_parser = mode)]
    mode: Mode,
    /// How long units are generated (e.g. 10s); units = duration x rate.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = duration)]
    duration: Duration,
    /// Units generated per second (1 to 1000000).
    #[arg(long, value_name = "N", default_value_t = 1000)]
    units_per_second: u32,
    /// Units per flush (1 to 128).
    #[arg(long, value_name = "N", default_value_t = 10)]
    flush: u32,
    /// PEM certificates to trust (e.g. the file `quiclab serve --write-cert` wrote).
    #[arg(long, value_name = "FILE")]
    cacert: PathBuf,
    /// Key-exchange groups in order of preference (x25519, p256, p384); the ClientHello carries
    /// a key share for the first only.
    #[arg(long, value_name = "LIST", default_value = "x25519,p256")]
    groups: String,
    /// TCP congestion controller (one of /proc/sys/net/ipv4/tcp_available_congestion_control);
    /// tcp mode only. Set explicitly, as the kernel's default is often bbr.
    #[arg(long, value_name = "NAME")]
    tcp_cc: Option<String>,
    /// How long to wait after the last flush for the server to have everything.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = duration)]
    drain: Duration,
    /// Run at a real-time priority (SCHED_FIFO 5, below the link emulator's), so that a busy
    /// host does not add its scheduling delays to every unit's latency. Needs root; without
    /// it a warning is printed and the run goes on. The summary records which it was.
    #[arg(long, value_name = "on|off", default_value = "on", value_parser = crate::cmd_serve::on_off, action = clap::ArgAction::Set)]
    realtime: bool,
    /// Print one JSON record per flush and a summary record instead of a summary line.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    quic: QuicArgs,
    #[command(flatten)]
    record: RecordArgs,
}

fn mode(s: &str) -> Result<Mode, String> {
    s.parse::<Mode>().map_err(|e| e.to_string())
}

pub fn telemetry(c: TelemetryCmd) -> anyhow::Result<i32> {
    if c.mode.is_quic() && c.tcp_cc.is_some() {
        usage!(
            "--tcp-cc applies to --mode tcp; use --quic-cc for the QUIC modes (--mode {})",
            c.mode
        );
    }
    let run = task::Telemetry {
        url: c.url.clone(),
        units_per_second: c.units_per_second,
        flush_units: c.flush,
        duration_us: c.duration.as_micros() as u64,
        drain_us: c.drain.as_micros() as u64,
        realtime: c.realtime,
    };
    if run.units() == 0 {
        usage!(
            "--duration {:?} at --units-per-second {} generates no unit; allowed: at least one unit interval",
            c.duration,
            c.units_per_second
        );
    }
    KxGroup::parse_list(&c.groups).map_err(|e| Usage(format!("--groups: {e}")))?;
    std::fs::read_to_string(&c.cacert)
        .with_context(|| format!("reading --cacert {}", c.cacert.display()))?;
    c.quic.options()?;
    // the mode's stack: quiclab's own, whose client runs this task
    let stack = quiclab_stacks::for_mode(c.mode).expect("quiclab's own stacks carry every mode");
    let mut knobs = vec![("groups".to_string(), c.groups.clone())];
    if let Some(cc) = &c.tcp_cc {
        knobs.push(("tcp-cc".to_string(), cc.clone()));
    }
    knobs.extend(c.quic.knobs());
    let (knobs, settings) = quiclab_stacks::typed(stack, knobs)?;
    let task = ClientTask {
        stack: stack.name().to_string(),
        http: stack.http()[0],
        mode: Some(c.mode.name().to_string()),
        knobs,
        settings,
        cacert: Some(c.cacert.clone()),
        recording: Recording {
            path_min_rtt_us: c.record.path_min_rtt_us(),
            qlog_dir: c.record.qlog_dir.clone(),
            ..Default::default()
        },
        request: Request::new(Ask::Telemetry(run), c.json),
        program: Default::default(),
    };
    crate::cmd_endpoint::run(&task)
}

/// Prints a telemetry run: a JSON record per flush and the summary's (`json`), or one readable
/// line; the exit code: 1 if the run ended early.
pub(crate) fn print_outcome(outcome: &SendOutcome, json: bool, url: &str) -> anyhow::Result<i32> {
    if json {
        use std::io::Write;
        let mut out = std::io::BufWriter::new(std::io::stdout().lock());
        for r in outcome.records() {
            writeln!(
                out,
                "{}",
                serde_json::to_string(&r).context("encoding a record")?
            )
            .context("writing to standard output")?;
        }
        out.flush().context("writing to standard output")?;
    } else {
        println!("{}", summary(url, &outcome.summary));
    }
    Ok(i32::from(outcome.summary.error.is_some()))
}

/// One readable line for a run.
fn summary(url: &str, s: &SenderSummary) -> String {
    let ms = |us: u64| format!("{:.2} ms", us as f64 / 1000.0);
    let sch = &s.schedule;
    let mut line = format!(
        "quiclab telemetry: {} to {url}: {} of {} units in {} flushes of {} at {} units/s",
        s.mode, s.units_sent, sch.units, s.flushes_sent, sch.flush_units, sch.units_per_second,
    );
    if let Some(done) = s.handshake_done_us {
        line += &format!(", handshake {}", ms(done.saturating_sub(s.connect_us)));
    }
    line += &format!(
        ", flushes sent late by p50 {} p99 {} max {}",
        ms(s.send_late_p50_us),
        ms(s.send_late_p99_us),
        ms(s.send_late_max_us)
    );
    let t = &s.transport_stats;
    if let Some(cc) = &t.congestion_control {
        line += &format!(", cc {cc}");
    }
    if let Some(lost) = t.packets_lost {
        line += &format!(
            ", {} {lost}",
            if s.mode.is_quic() {
                "packets lost"
            } else {
                "segments retransmitted"
            }
        );
    }
    if let Some(rtt) = t.smoothed_rtt_us {
        line += &format!(", srtt {}", ms(rtt));
    }
    match &s.error {
        Some(e) => line += &format!(", ENDED EARLY: {e}"),
        None => line += "; the server's --telemetry-log has every unit's receive time",
    }
    if !s.realtime {
        line += " (not at a real-time priority)";
    }
    line
}
