//! Exit codes: what a script calling quiclab can tell from how it ended.
//!
//! | code | meaning |
//! |---|---|
//! | 0 | done: everything asked for was measured (or served, written, removed) |
//! | 1 | it ran and something failed: a trial, a request, a selftest check, a benchmark's flow, or a run-time error (a device, a namespace, an endpoint, the disk) |
//! | 2 | it was called wrongly: an argument, an input file (plan, stack file, page manifest, trace), a results directory holding another campaign (or none, or in use by another run, or another user's), or a user without the root it needs; nothing was measured |
//! | 130 | interrupted (SIGINT, SIGTERM, SIGHUP or SIGQUIT), after cleaning up |
//!
//! `quiclab link` is the one exception: it ends with its client command's own code.

use std::fmt;

use quiclab_store::StoreError;
use quiclab_store::output::OutputError;

/// Everything went as asked.
pub const OK: i32 = 0;
/// A measurement or trial failed, or a run-time error stopped the command.
pub const FAILED: i32 = 1;
/// The command was called wrongly (clap uses this code for its own argument errors too).
pub const USAGE: i32 = 2;
/// Stopped by a signal.
pub const INTERRUPTED: i32 = 130;

/// An error in how the command was called, found by the command itself (clap finds the
/// others): it exits with [`USAGE`].
#[derive(Debug)]
pub struct Usage(pub String);

impl fmt::Display for Usage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Usage {}

/// Returns early with a [`Usage`] error, formatted like `format!`.
macro_rules! usage {
    ($($arg:tt)*) => {
        return Err($crate::usage::Usage(format!($($arg)*)).into())
    };
}
pub(crate) use usage;

/// The exit code of a command that ended with `e`: [`USAGE`] when any error in its chain is a
/// mistake in the input (the command's own [`Usage`] errors, and the libraries' errors about
/// plans, link settings, stack files, page manifests, traces, URLs, a results directory that
/// holds no campaign, another one, orphaned trials or another run, a TCP congestion controller
/// the kernel lacks, and a user without root),
/// [`FAILED`] otherwise.
pub fn exit_code(e: &anyhow::Error) -> i32 {
    use quiclab_runner::campaign::RunError;
    use quiclab_tcp::server::ServerError;
    use quiclab_tcp::tcpinfo::CongestionError;
    // a TCP congestion controller the kernel does not have
    let unknown_cc = |e: &CongestionError| matches!(e, CongestionError::Unknown { .. });
    // an output quiclab will not write to (another user's directory, a link)
    let unsafe_output = |e: &OutputError| !matches!(e, OutputError::Io { .. });
    // a results directory that is not this run's to use
    let wrong_dir = |e: &StoreError| match e {
        StoreError::Empty { .. }
        | StoreError::Orphans { .. }
        | StoreError::Damaged { .. }
        | StoreError::Busy { .. } => true,
        StoreError::Output(o) => unsafe_output(o),
        _ => false,
    };
    let input = e.chain().any(|c| {
        c.is::<Usage>()
            || c.is::<quiclab_runner::plan::PlanError>()
            || c.is::<quiclab_link::ConfigError>()
            || c.is::<quiclab_link::units::UnitError>()
            || c.is::<quiclab_link::trace::TraceError>()
            || c.is::<quiclab_external::DefError>()
            || c.is::<quiclab_pages::page::ManifestError>()
            || c.is::<quiclab_endpoint::url::UrlError>()
            || c.downcast_ref::<StoreError>().is_some_and(wrong_dir)
            || c.downcast_ref::<OutputError>().is_some_and(unsafe_output)
            || c.downcast_ref::<CongestionError>().is_some_and(unknown_cc)
            // transparent: the chain goes on past the congestion error it wraps
            || matches!(
                c.downcast_ref::<ServerError>(),
                Some(ServerError::Congestion(e)) if unknown_cc(e)
            )
            // transparent wrappers: the chain goes on past the error they wrap
            || match c.downcast_ref::<quiclab_store::merge::MergeError>() {
                // shards that are not of one campaign, or an output directory in use
                Some(quiclab_store::merge::MergeError::Store(s)) => wrong_dir(s),
                Some(_) => true,
                None => false,
            }
            || match c.downcast_ref::<RunError>() {
                Some(
                    RunError::OtherCampaign { .. }
                    | RunError::OtherBuild { .. }
                    | RunError::OtherShard { .. }
                    | RunError::AdaptiveShard { .. }
                    | RunError::NoJobs,
                ) => true,
                Some(RunError::Store(s)) => wrong_dir(s),
                None => false,
            }
            || matches!(
                c.downcast_ref::<quiclab_quic::QuicError>(),
                Some(quiclab_quic::QuicError::InvalidOption { .. })
            )
            || matches!(
                c.downcast_ref::<quiclab_netns::Error>(),
                Some(quiclab_netns::Error::NotRoot | quiclab_netns::Error::Config(_))
            )
    });
    if input { USAGE } else { FAILED }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn input_mistakes_exit_2_and_failures_exit_1() {
        let usage: anyhow::Error = Usage("--jobs 0: allowed: 1 or more".into()).into();
        assert_eq!(exit_code(&usage), USAGE);
        // a cause deep in the chain counts, as it is when a command adds context
        assert_eq!(exit_code(&usage.context("while starting")), USAGE);
        let plan = quiclab_runner::plan::parse(
            "iterations = \"x\"",
            "p.toml",
            quiclab_runner::plan::Profile::Full,
        )
        .expect_err("a bad plan");
        assert_eq!(exit_code(&plan.into()), USAGE);
        assert_eq!(exit_code(&quiclab_netns::Error::NotRoot.into()), USAGE);
        let busy = StoreError::Busy {
            dir: "out".into(),
            holder: "1".into(),
        };
        let wrapped = quiclab_runner::campaign::RunError::Store(busy);
        assert_eq!(exit_code(&wrapped.into()), USAGE);
        // a shard directory whose database cannot be read is a refused directory
        let cut = quiclab_store::merge::MergeError::Unreadable {
            dir: "s2".into(),
            why: "file is not a database".into(),
        };
        assert_eq!(exit_code(&cut.into()), USAGE);
        let io = quiclab_netns::Error::Command {
            cmd: "ip link add".into(),
            stderr: "RTNETLINK answers: File exists".into(),
        };
        assert_eq!(exit_code(&io.into()), FAILED);
        assert_eq!(exit_code(&anyhow::anyhow!("the trial failed")), FAILED);
    }
}
