//! `quiclab endpoint --task JSON`: the one entry point a trial starts for a client of quiclab's
//! own (GETs, uploads, page loads). The task (`quiclab_model::task::ClientTask`) names the stack, its knobs, whom it trusts,
//! what it records and the request; the stack runs it in this process, as `quiclab get` runs
//! the task it makes of its flags.

use clap::Args;
use quiclab_model::task::ClientTask;
use quiclab_stacks::Measured;

use crate::usage::Usage;

/// Run a client task (as trials do); not meant to be typed.
#[derive(Args)]
pub struct EndpointCmd {
    /// The task, as JSON.
    #[arg(long, value_name = "JSON")]
    task: String,
}

pub fn endpoint(c: EndpointCmd) -> anyhow::Result<i32> {
    let task: ClientTask =
        serde_json::from_str(&c.task).map_err(|e| Usage(format!("--task: {e}")))?;
    run(&task)
}

/// Runs `task` with its stack and prints what it measured: JSON lines when the request asks
/// for records, readable lines otherwise; 1 if a request or the page load failed.
pub fn run(task: &ClientTask) -> anyhow::Result<i32> {
    let stack = quiclab_stacks::find(&task.stack).ok_or_else(|| {
        Usage(format!(
            "stack {:?} is not known; known: {}",
            task.stack,
            quiclab_stacks::names()
        ))
    })?;
    match stack.run_client(task)? {
        Measured::Requests(records) => crate::cmd_get::report(&records, task.request.records),
        Measured::Page(record) => {
            crate::cmd_page::print_record(&record, task.request.records, crate::cmd_page::summary)
        }
    }
}
