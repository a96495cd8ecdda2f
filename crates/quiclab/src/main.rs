//! The quiclab command line.

mod bench_perf;
mod bench_stacks;
mod bench_trials;
mod cmd_bench;
mod cmd_browse;
mod cmd_compare;
mod cmd_docs;
mod cmd_endpoint;
mod cmd_external;
mod cmd_figure;
mod cmd_fingerprint;
mod cmd_get;
mod cmd_link;
mod cmd_page;
mod cmd_pcapng;
mod cmd_run;
mod cmd_selftest;
mod cmd_serve;
mod cmd_telemetry;
mod linkargs;
mod out;
mod quicargs;
mod recordargs;
mod signals;
mod trustargs;
mod usage;

use clap::{CommandFactory, Parser, Subcommand};

/// quiclab measures transports (TCP+TLS, QUIC) over an emulated network and explains the
/// difference.
///
/// Every trial runs in a pair of network namespaces (client, server) joined by quiclab's own
/// userspace link emulator: delay, jitter, i.i.d. and burst loss, outages, rate limits with a
/// drop-tail queue, Mahimahi traces, MTU. Random decisions are seeded per packet index, so two
/// protocols can be compared on the very same loss pattern. The commands that make namespaces
/// run as root, or as an ordinary user inside a user namespace of their own where the host
/// allows one (docs/operating-safely.md).
#[derive(Parser)]
#[command(
    name = "quiclab",
    version,
    propagate_version = true,
    max_term_width = 100,
    after_help = "Exit codes: 0 done; 1 a trial, request, check or benchmark flow failed, or a \
                  run-time error stopped the command; 2 called wrongly (an argument, a plan or \
                  other input file, a results directory that is not this run's, no root); 130 \
                  interrupted. `quiclab link` ends with its client's own code."
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    Run(cmd_run::RunCmd),
    Report(cmd_run::ReportCmd),
    Figure(cmd_figure::FigureCmd),
    Export(cmd_run::ExportCmd),
    Merge(cmd_run::MergeCmd),
    Compare(cmd_compare::CompareCmd),
    Link(cmd_link::LinkCmd),
    Clean(cmd_link::CleanCmd),
    Selftest(cmd_selftest::SelftestCmd),
    Bench(cmd_bench::BenchCmd),
    Fingerprint(cmd_fingerprint::FingerprintCmd),
    Get(cmd_get::GetCmd),
    Page(cmd_page::PageCmd),
    Browse(cmd_browse::BrowseCmd),
    Serve(cmd_serve::ServeCmd),
    Telemetry(cmd_telemetry::TelemetryCmd),
    External(cmd_external::ExternalCmd),
    Pcapng(cmd_pcapng::PcapngCmd),
    Completions(cmd_docs::CompletionsCmd),
    Man(cmd_docs::ManCmd),
    #[command(hide = true)]
    Endpoint(cmd_endpoint::EndpointCmd),
    /// Removes what the runs of quiclab process PARENT left once it has ended (started by
    /// quiclab itself; see quiclab_netns::reaper).
    #[command(name = "__reap", hide = true)]
    Reap {
        parent: u32,
    },
}

impl Cmd {
    /// Whether the command makes network namespaces: run by a user other than root, it runs
    /// inside a user namespace of its own (`quiclab_netns::rootless`).
    fn makes_namespaces(&self) -> bool {
        match self {
            Cmd::Run(c) => !c.dry_run(),
            Cmd::Link(_) | Cmd::Selftest(_) | Cmd::Bench(_) | Cmd::Fingerprint(_) => true,
            _ => false,
        }
    }

    /// Whether the command times something (a trial, a link, an endpoint), so that its code
    /// must not wait on the disk mid-run.
    fn measures(&self) -> bool {
        !matches!(
            self,
            Cmd::Report(_)
                | Cmd::Figure(_)
                | Cmd::Export(_)
                | Cmd::Merge(_)
                | Cmd::Compare(_)
                | Cmd::Clean(_)
                | Cmd::Pcapng(_)
                | Cmd::Completions(_)
                | Cmd::Man(_)
                | Cmd::Reap { .. }
        )
    }
}

/// Where the libraries' warnings go: standard error, as `quiclab: warning: ...`.
struct StderrLog;

impl log::Log for StderrLog {
    fn enabled(&self, m: &log::Metadata) -> bool {
        m.level() <= log::Level::Warn
    }

    fn log(&self, r: &log::Record) {
        if self.enabled(r.metadata()) {
            eprintln!(
                "quiclab: {}: {}",
                r.level().as_str().to_lowercase(),
                r.args()
            );
        }
    }

    fn flush(&self) {}
}

static LOG: StderrLog = StderrLog;

/// `quiclab __reap PARENT`: says what it removed, if anything (only after a kill).
fn reap(parent: u32) -> anyhow::Result<i32> {
    let r = quiclab_netns::reaper::reap(parent)?;
    if !r.namespaces.is_empty() {
        eprintln!(
            "quiclab: process {parent} ended without cleaning up: removed {} namespace(s) and {} \
             process(es) it left",
            r.namespaces.len(),
            r.processes
        );
    }
    Ok(0)
}

/// An error with its causes, each said once: a cause whose text the message already holds
/// (an error that quotes its source) is not repeated.
fn chain(e: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in e.chain() {
        let c = cause.to_string();
        if text.contains(&c) {
            continue;
        }
        if !text.is_empty() {
            text.push_str(": ");
        }
        text.push_str(&c);
    }
    text
}

fn main() {
    // set once, before anything that could warn
    if log::set_logger(&LOG).is_ok() {
        log::set_max_level(log::LevelFilter::Warn);
    }
    let cli = Cli::parse();
    if let Ok(exe) = std::env::current_exe() {
        // namespaces a kill leaves are removed by a reaper: this program, with this command
        quiclab_netns::reaper::set_program(exe, &["__reap"]);
    }
    if cli.cmd.makes_namespaces() {
        // Before any thread starts: a new user namespace takes a process of one thread.
        if let Some(inside) = quiclab_netns::rootless::run_inside() {
            match inside {
                Ok(code) => std::process::exit(code),
                Err(e) => {
                    eprintln!("quiclab: error: {}", chain(&e.into()));
                    std::process::exit(usage::USAGE);
                }
            }
        }
        if let Err(e) = quiclab_netns::rootless::enter() {
            eprintln!("quiclab: error: {}", chain(&e.into()));
            std::process::exit(usage::USAGE);
        }
    }
    if cli.cmd.measures() {
        // Before any thread starts: see keep_freed_memory and keep_program_resident for why.
        quiclab_netns::sys::keep_freed_memory();
        let inherited = std::env::var(quiclab_netns::sys::RESIDENT_VAR).ok();
        match quiclab_netns::sys::keep_program_resident(inherited.as_deref()) {
            Ok(r) => match r.marker() {
                // SAFETY: no other thread runs yet, so none reads the environment meanwhile
                Some(m) => unsafe { std::env::set_var(quiclab_netns::sys::RESIDENT_VAR, m) },
                None => unsafe { std::env::remove_var(quiclab_netns::sys::RESIDENT_VAR) },
            },
            Err(e) => log::warn!(
                "cannot keep the program's pages in memory ({e}): a page fault on its code can delay a measurement"
            ),
        }
    }
    let result = match cli.cmd {
        Cmd::Run(c) => cmd_run::run(c),
        Cmd::Report(c) => cmd_run::report(c),
        Cmd::Figure(c) => cmd_figure::figure(c),
        Cmd::Export(c) => cmd_run::export(c),
        Cmd::Merge(c) => cmd_run::merge(c),
        Cmd::Compare(c) => cmd_compare::compare(c),
        Cmd::Link(c) => cmd_link::link(c),
        Cmd::Clean(c) => cmd_link::clean(c),
        Cmd::Selftest(c) => cmd_selftest::selftest(c),
        Cmd::Bench(c) => cmd_bench::bench(c),
        Cmd::Fingerprint(c) => cmd_fingerprint::fingerprint(c),
        Cmd::Get(c) => cmd_get::get(c),
        Cmd::Page(c) => cmd_page::page(c),
        Cmd::Browse(c) => cmd_browse::browse(c),
        Cmd::Serve(c) => cmd_serve::serve(c),
        Cmd::Telemetry(c) => cmd_telemetry::telemetry(c),
        Cmd::External(c) => cmd_external::external(c),
        Cmd::Pcapng(c) => cmd_pcapng::pcapng(c),
        Cmd::Completions(c) => cmd_docs::completions(c, Cli::command()),
        Cmd::Man(c) => cmd_docs::man(c, Cli::command()),
        Cmd::Endpoint(c) => cmd_endpoint::endpoint(c),
        Cmd::Reap { parent } => reap(parent),
    };
    match result {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            eprintln!("quiclab: error: {}", chain(&e));
            std::process::exit(usage::exit_code(&e));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use quiclab_runner::plan::{self, Profile};

    /// `quiclab --help` lists each command with its summary, the first paragraph of its help,
    /// which clap wraps to the list's width. A summary of several lines, kept as written by a
    /// command whose help is verbatim, breaks the list mid-sentence: every summary is one line.
    #[test]
    fn every_command_is_listed_with_a_one_line_summary() {
        let cli = Cli::command();
        let long: Vec<String> = cli
            .get_subcommands()
            .filter(|c| !c.is_hide_set())
            .filter_map(|c| {
                let about = c.get_about().map(|a| a.to_string()).unwrap_or_default();
                (about.is_empty() || about.contains('\n'))
                    .then(|| format!("{}: {about:?}", c.get_name()))
            })
            .collect();
        assert!(long.is_empty(), "{}", long.join("\n"));
    }

    /// The runner starts quiclab's own endpoints: every launch the built-in plans give a trial
    /// (one trial per arm, condition and size of each plan, in both profiles) parses against
    /// quiclab's own command line, and every task among them (a client's or a server's) parses
    /// as a task of a registered stack, so that a flag or a field renamed on one side only fails here rather
    /// than in every trial of a campaign.
    #[test]
    fn every_endpoint_command_line_of_the_built_in_plans_parses() {
        let bin = std::path::PathBuf::from("/opt/quiclab/quiclab");
        let dir = std::path::Path::new("/results/x");
        let mut checked = std::collections::BTreeSet::new();
        let mut task_kinds = std::collections::BTreeSet::new();
        // and the removal runs docs/explain.md reports, which users run by path
        let removal = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../plans/removal");
        let mut plans: Vec<(String, String)> = plan::BUILT_IN
            .iter()
            .map(|(n, t)| (n.to_string(), t.to_string()))
            .collect();
        for e in std::fs::read_dir(&removal).unwrap() {
            let path = e.unwrap().path();
            plans.push((
                path.display().to_string(),
                std::fs::read_to_string(&path).unwrap(),
            ));
        }
        assert!(plans.len() >= plan::BUILT_IN.len() + 4, "{removal:?}");
        for (name, text) in &plans {
            let (name, text) = (name.as_str(), text.as_str());
            for profile in [Profile::Full, Profile::Quick] {
                let plan = plan::parse(text, name, profile)
                    .unwrap_or_else(|e| panic!("built-in plan {name}: {e}"));
                let mut seen = std::collections::HashSet::new();
                for spec in quiclab_runner::expand::expand(&plan) {
                    if !seen.insert((spec.arm, spec.condition, spec.size)) {
                        continue;
                    }
                    let (server, client) = quiclab_runner::trial::launches(&bin, dir, &plan, &spec)
                        .unwrap_or_else(|e| panic!("plan {name}: {e}"));
                    for l in [server, client].into_iter().filter(|l| l.program == bin) {
                        let argv =
                            std::iter::once("quiclab").chain(l.args.iter().map(String::as_str));
                        if let Err(e) = Cli::try_parse_from(argv) {
                            panic!(
                                "plan {name}, arm {}: {:?}:\n{e}",
                                plan.arms[spec.arm].name, l.args
                            );
                        }
                        if l.args[0] == "endpoint" {
                            // the task is what the endpoint reads
                            let task: quiclab_model::task::Task = serde_json::from_str(&l.args[2])
                                .unwrap_or_else(|e| panic!("plan {name}: task {}: {e}", l.args[2]));
                            match task {
                                quiclab_model::task::Task::Client(task) => {
                                    quiclab_stacks::of_task(&task.stack, &task.program)
                                        .unwrap_or_else(|e| panic!("plan {name}: {task:?}: {e}"));
                                    let kind = serde_json::to_value(&task.request.ask).unwrap();
                                    let kind = kind["kind"].as_str().unwrap().to_string();
                                    task_kinds.insert(format!("{kind} {}", task.stack));
                                    task_kinds.insert(kind);
                                }
                                quiclab_model::task::Task::Server(task) => {
                                    quiclab_stacks::of_task(&task.stack, &task.program)
                                        .unwrap_or_else(|e| panic!("plan {name}: {task:?}: {e}"));
                                    if task.program.work_dir.is_none() {
                                        // what every own server reads of it, and QUIC's options
                                        quiclab_stacks::serve::Serve::of_task(&task)
                                            .unwrap_or_else(|e| {
                                                panic!("plan {name}: {task:?}: {e:#}")
                                            });
                                        // the stack's own settings: QUIC's options, if any
                                        if let Some(quic) = task.settings.get("quic") {
                                            serde_json::from_value::<quiclab_quic::QuicOptions>(
                                                quic.clone(),
                                            )
                                            .unwrap_or_else(|e| {
                                                panic!("plan {name}: {task:?}: {e}")
                                            });
                                        }
                                    }
                                    task_kinds.insert(format!("server {}", task.stack));
                                }
                            }
                        }
                        checked.insert(l.args.first().cloned().unwrap_or_default());
                    }
                }
            }
        }
        // every kind of endpoint the plans start is among them
        // every endpoint quiclab runs is a task (an external stack's telemetry client is the
        // stack's own program)
        assert_eq!(
            checked,
            std::collections::BTreeSet::from(["endpoint".to_string()])
        );
        for kind in [
            "get",
            "page",
            "telemetry",
            "server tcp",
            "server quinn",
            "server coded",
            "server ngtcp2",
            "server quiche",
            "server quic-go",
            "get ngtcp2",
            "get chrome",
            "page chrome",
        ] {
            assert!(
                task_kinds.contains(kind),
                "no {kind} task among {task_kinds:?}"
            );
        }
    }
}
