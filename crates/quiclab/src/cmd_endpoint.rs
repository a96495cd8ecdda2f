//! `quiclab endpoint --task JSON`: the one entry point a trial starts for an endpoint of a
//! stack quiclab runs (all but a browser and an external stack's own telemetry client). A client task (`quiclab_model::task::ClientTask`: GETs, uploads, page loads,
//! telemetry) names the stack, its knobs, whom it trusts, what it records and the request; a
//! server task (`ServerTask`) names the stack, where it listens, its knobs and what it writes.
//! The stack runs it in this process, as `quiclab get` runs the task it makes of its flags; a
//! stack that is another program (a stack file's) runs that program from here.

use clap::Args;
use quiclab_model::record::HttpVersion;
use quiclab_model::task::{Ask, ClientTask, Program, Recording, Request, Task};
use quiclab_stacks::Measured;

use crate::quicargs::QuicArgs;
use crate::recordargs::RecordArgs;
use crate::trustargs::{TcpArgs, TrustArgs};

use crate::usage::Usage;

/// Run a client's or a server's task (as trials do); not meant to be typed.
#[derive(Args)]
pub struct EndpointCmd {
    /// The task, as JSON.
    #[arg(long, value_name = "JSON")]
    task: String,
}

pub fn endpoint(c: EndpointCmd) -> anyhow::Result<i32> {
    let task: Task = serde_json::from_str(&c.task).map_err(|e| Usage(format!("--task: {e}")))?;
    match task {
        Task::Client(task) => run(&task),
        Task::Server(task) => {
            stack(&task.stack, &task.program)?.run_server(&task)?;
            Ok(0)
        }
    }
}

/// The stack a task names (read from its stack file when the task gives one).
fn stack(name: &str, program: &Program) -> anyhow::Result<&'static dyn quiclab_stacks::Stack> {
    Ok(quiclab_stacks::of_task(name, program).map_err(Usage)?)
}

/// Runs `task` with its stack and prints what it measured: JSON lines when the request asks
/// for records, readable lines otherwise; 1 if a request or the page load failed.
pub fn run(task: &ClientTask) -> anyhow::Result<i32> {
    let stack = stack(&task.stack, &task.program)?;
    quiclab_stacks::honours(stack, &task.request).map_err(Usage)?;
    print(task, &stack.run_client(task)?)
}

/// Prints what `task` measured: JSON lines when its request asks for records, readable lines
/// otherwise; 1 if a request or the page load failed.
pub fn print(task: &ClientTask, measured: &Measured) -> anyhow::Result<i32> {
    let records = task.request.records;
    match measured {
        Measured::Requests(r) => crate::cmd_get::report(r, records),
        Measured::Page(record) => crate::cmd_page::print_record(record, records),
        Measured::Telemetry(outcome) => {
            let url = match &task.request.ask {
                Ask::Telemetry(t) => t.url.as_str(),
                _ => "",
            };
            crate::cmd_telemetry::print_outcome(outcome, records, url)
        }
    }
}

/// The task `quiclab get` and `quiclab page` make of their flags: the HTTP version's stack, the
/// groups, the TCP settings and (over HTTP/3) the QUIC options as knobs, whom to trust and
/// what to record. A bad QUIC option is refused here, as called wrongly.
pub fn front_end_task(
    http: &str,
    trust: &TrustArgs,
    tcp: &TcpArgs,
    quic: &QuicArgs,
    record: &RecordArgs,
    request: Request,
) -> anyhow::Result<ClientTask> {
    let http = HttpVersion::from_name(http).expect("clap accepts only HTTP versions");
    let stack = quiclab_stacks::for_http(http).expect("every HTTP version has a stack");
    let mut knobs = vec![("groups".to_string(), trust.groups.clone())];
    knobs.extend(tcp.knobs());
    if http == HttpVersion::Http3 {
        quic.options()?;
        knobs.extend(quic.knobs());
    }
    let (knobs, settings) = quiclab_stacks::typed(stack, knobs)?;
    Ok(ClientTask {
        stack: stack.name().to_string(),
        http,
        mode: None,
        knobs,
        settings,
        cacert: trust.cacert.clone(),
        recording: Recording {
            path_min_rtt_us: record.path_min_rtt_us(),
            qlog_dir: record.qlog_dir.clone(),
            ..Default::default()
        },
        request,
        program: Default::default(),
    })
}
