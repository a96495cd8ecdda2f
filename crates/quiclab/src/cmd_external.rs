//! `quiclab external`: run an external stack's server or client (a stack file's programs) the
//! way a trial does, and turn what they print into quiclab's records: a front-end of the
//! stack's own code (`quiclab_stacks::external`), which a trial's endpoint task runs too.

use std::path::PathBuf;

use clap::{Args, Subcommand};
use quiclab_external::StackDef;
use quiclab_external::server::ServeOptions;
use quiclab_model::record::HttpVersion;
use quiclab_model::task::{Ask, ClientTask, Connection, Get, Program, Recording, Request};

use crate::usage::{Usage, usage};

/// Run an external stack's endpoint: a program named by a stack file (docs/stacks.md).
///
/// `serve` starts the stack's server with a fresh certificate and quiclab's byte pattern at
/// /bytes/N for every size given by --objects, and says "listening" once it holds its UDP
/// port; `get` fetches URLs with the stack's client, one program run (one connection) per URL,
/// and prints quiclab's request records (TTFB, TTLB, handshake, bytes checked against the
/// pattern). Trials run these in their namespaces; they also work by hand, e.g.
/// `quiclab external get --stack ngtcp2 --cacert cert.pem https://198.18.0.2/bytes/100000`.
/// The built-in stacks: aioquic, msquic, ngtcp2, quic-go, quiche, tquic. --stack also takes a
/// stack file's path. A stack whose file has a `[telemetry]` section also receives telemetry
/// (`serve --telemetry-log`). `check-qlog` says what a server's qlog file lacks that quiclab's
/// sender timeline reads (docs/stacks.md, "The qlog a server writes").
#[derive(Args)]
pub struct ExternalCmd {
    #[command(subcommand)]
    what: What,
}

#[derive(Subcommand)]
enum What {
    Serve(ServeArgs),
    Get(GetArgs),
    CheckQlog(CheckQlogArgs),
}

/// Check server qlog files (JSON-SEQ) against what the sender's timeline reads: each file's
/// events, STREAM packets sent, ACK frames received, bytes they acknowledge, window and RTT
/// updates, losses and flow-control frames, and what is missing. Exits 1 if a file lacks
/// anything a timeline needs.
#[derive(Args)]
struct CheckQlogArgs {
    /// Print one JSON object (`files`: each file's counts and `missing`) instead of text.
    #[arg(long)]
    json: bool,
    #[arg(required = true, value_name = "FILE")]
    files: Vec<PathBuf>,
}

/// What both sides take.
#[derive(Args)]
struct StackArgs {
    /// A built-in external stack's name, or a stack file.
    #[arg(long, value_name = "NAME|FILE")]
    stack: String,
    /// A knob of the stack, KEY=VALUE (may be repeated); the stack file lists its knobs.
    #[arg(long = "knob", value_name = "KEY=VALUE")]
    knobs: Vec<String>,
    /// Where the endpoint keeps its files (downloads, key, documents, qlog files, the
    /// program's output).
    #[arg(long, value_name = "DIR")]
    work_dir: PathBuf,
}

impl StackArgs {
    /// The stack and its knobs, each checked as its file says.
    fn resolve(&self) -> anyhow::Result<(StackDef, Vec<(String, String)>)> {
        let def = StackDef::find(&self.stack)?;
        let mut knobs = Vec::new();
        for kv in &self.knobs {
            let Some((k, v)) = kv.split_once('=') else {
                usage!("--knob {kv:?}: give KEY=VALUE");
            };
            let Some(knob) = def.knob(k) else {
                let keys: Vec<&str> = def.knobs.iter().map(|k| k.key.as_str()).collect();
                usage!(
                    "--knob {kv:?}: stack {:?} has no knob {k:?}; its knobs: {}",
                    def.name,
                    keys.join(", ")
                );
            };
            let v = knob
                .check(v)
                .map_err(|why| Usage(format!("--knob {kv:?}: {why}")))?;
            knobs.push((k.to_string(), v));
        }
        Ok((def, knobs))
    }
}

/// Start the stack's server; stop it with SIGTERM or Ctrl-C.
#[derive(Args)]
struct ServeArgs {
    #[command(flatten)]
    stack: StackArgs,
    /// Address to listen on.
    #[arg(long, default_value = "0.0.0.0")]
    address: String,
    /// UDP port to listen on.
    #[arg(long, default_value_t = 443)]
    port: u16,
    /// Where to write the server's certificate (PEM) for clients to trust.
    #[arg(long, value_name = "FILE")]
    cert: PathBuf,
    /// Object sizes to serve at /bytes/N, comma-separated bytes.
    #[arg(long, value_name = "N,...", value_delimiter = ',')]
    objects: Vec<u64>,
    /// A folder whose files are served too, at the same paths (e.g. a page's site).
    #[arg(long, value_name = "DIR")]
    root: Option<PathBuf>,
    /// Where to write the sending side's timeline (JSON lines) from the server's qlog files
    /// when it stops.
    #[arg(long, value_name = "FILE")]
    timeline: Option<PathBuf>,
    /// The path's minimum RTT (e.g. 50ms): RTT samples below it count as impossible.
    #[arg(long, value_name = "DURATION", value_parser = crate::cmd_link::parse_time)]
    path_min_rtt: Option<std::time::Duration>,
    /// Receive quiclab telemetry too (a stack whose file has a `[telemetry]` section), writing
    /// the units it reads here (JSON lines, as `quiclab serve --telemetry-log`).
    #[arg(long, value_name = "FILE")]
    telemetry_log: Option<PathBuf>,
}

/// Fetch URLs with the stack's client, one connection each.
#[derive(Args)]
struct GetArgs {
    #[command(flatten)]
    stack: StackArgs,
    /// The certificate to trust (PEM), e.g. the one `serve` wrote.
    #[arg(long, value_name = "FILE")]
    cacert: PathBuf,
    /// Print one JSON record per request instead of a line of text.
    #[arg(long)]
    json: bool,
    /// Where the client's qlog files go (default: the work directory).
    #[arg(long, value_name = "DIR")]
    qlog_dir: Option<PathBuf>,
    /// Resume the TLS session of the connection before (0-RTT where the stack sends it): the
    /// stack's `resume` knob set to true.
    #[arg(long)]
    resume: bool,
    /// One connection per request is all an external client does: "new" (reuse is refused).
    #[arg(long, default_value = "new", value_parser = ["new"])]
    connection: String,
    /// Fetch the URLs in order this many times.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    repeat: u32,
    #[arg(required = true, value_name = "URL")]
    urls: Vec<String>,
}

pub fn external(c: ExternalCmd) -> anyhow::Result<i32> {
    match c.what {
        What::Serve(a) => serve(a),
        What::Get(a) => get(a),
        What::CheckQlog(a) => check_qlog(a),
    }
}

fn check_qlog(a: CheckQlogArgs) -> anyhow::Result<i32> {
    let mut files = Vec::new();
    let mut lacking = 0;
    for f in &a.files {
        let text =
            std::fs::read(f).map_err(|e| Usage(format!("cannot read {}: {e}", f.display())))?;
        let (counts, missing) = match quiclab_external::qlog::check(&text) {
            Ok(c) => {
                let missing = c.missing();
                let counts = serde_json::json!({
                    "vantage_point": c.vantage_point,
                    "events": c.events,
                    "last_ms": c.last_ms,
                    "stream_packets_sent": c.stream_packets_sent,
                    "acks_received": c.acks_received,
                    "acked_bytes": c.acked_bytes,
                    "cwnd_updates": c.cwnd_updates,
                    "rtt_updates": c.rtt_updates,
                    "losses": c.losses,
                    "blocked_frames": c.blocked_frames,
                });
                (counts, missing)
            }
            Err(e) => (serde_json::Value::Null, vec![e.to_string()]),
        };
        lacking += usize::from(!missing.is_empty());
        if !a.json {
            println!("{}:", f.display());
            if let Some(o) = counts.as_object() {
                for (k, v) in o {
                    println!("  {k}: {v}");
                }
            }
            if missing.is_empty() {
                println!("  nothing missing: a sender's timeline can be read from it");
            }
            for m in &missing {
                println!("  missing: {m}");
            }
        }
        let mut entry = serde_json::json!({"file": f, "missing": missing});
        if let Some(o) = counts.as_object() {
            entry.as_object_mut().expect("an object").extend(o.clone());
        }
        files.push(entry);
    }
    if a.json {
        println!("{}", serde_json::json!({ "files": files }));
    }
    Ok(if lacking > 0 {
        crate::usage::FAILED
    } else {
        crate::usage::OK
    })
}

fn serve(a: ServeArgs) -> anyhow::Result<i32> {
    let (def, knobs) = a.stack.resolve()?;
    let opts = ServeOptions {
        address: a.address,
        port: a.port,
        cert: a.cert,
        objects: a.objects,
        root: a.root,
        knobs,
        work_dir: a.stack.work_dir,
        keylog: std::env::var_os("SSLKEYLOGFILE").map(PathBuf::from),
        telemetry_log: a.telemetry_log,
    };
    let floor = a.path_min_rtt.map(|d| d.as_micros() as u64);
    quiclab_stacks::external::serve(&def, &opts, a.timeline.as_deref(), floor)?;
    Ok(0)
}

fn get(a: GetArgs) -> anyhow::Result<i32> {
    let (def, knobs) = a.stack.resolve()?;
    // the task a trial hands the stack's client, made of the flags
    let task = ClientTask {
        stack: def.name.clone(),
        http: HttpVersion::Http3,
        mode: None,
        knobs,
        settings: serde_json::Value::Null,
        cacert: Some(a.cacert),
        recording: Recording {
            path_min_rtt_us: None,
            qlog_dir: a.qlog_dir,
            ..Default::default()
        },
        request: Request::new(
            Ask::Get(Get {
                urls: a.urls,
                connection: Connection::New,
                resume: a.resume,
                repeat: a.repeat,
            }),
            a.json,
        ),
        program: Program {
            stack_file: None,
            work_dir: Some(a.stack.work_dir),
        },
    };
    let records = quiclab_stacks::external::fetch(&def, &task)?;
    crate::cmd_endpoint::print(&task, &quiclab_stacks::Measured::Requests(records))
}
