//! `quiclab fingerprint STACK...`: each stack's choices, measured from the wire.

use std::io::IsTerminal;
use std::path::PathBuf;

use anyhow::bail;
use clap::{Args, ValueEnum};
use quiclab_runner::fingerprint::{self, Card, Role, Subject};
use quiclab_runner::stacks;
use serde_json::json;

use crate::out::Out;

/// What an implementation chose, read from the wire rather than from its documentation.
///
/// For each stack, in each role it has: trials of one GET on a new connection over a path of 50
/// ms each way, against the registry's default stack of the same HTTP version at the other end
/// (quinn for HTTP/3, kernel TCP for HTTP/2), with losses planted where a question needs them.
/// The link's own per-packet log gives the answers (docs/fingerprint.md says how each is read):
///
/// As a server (no rate limit): its first flight, its first and largest datagram (and the
/// largest on a 9000-byte link over a 5 MB download at 10 Mbit/s: where path MTU discovery
/// ends), its initial window (what it sends in the first round trip of data), over how long it
/// sends that window and its largest burst, whether it paces (the share of its fullest round
/// trip of data sent within the busiest tenth of one: below a half is paced), its window after
/// a loss planted in congestion avoidance over the one before (β; "no cut", as 1, for a sender
/// that kept its flight through it, or through a first loss in slow start where its window
/// then outgrew the object, as Linux's BBR does) and, over QUIC, on a small response that
/// leaves at once, when it repairs a loss that one packet shows (its time threshold) and one
/// that three show (its packet threshold), the rest of the round trip blacked out (its 1-RTT packets opened with the trial's key log); its
/// first retransmission timer (its first flight dropped on purpose), and its timer once the
/// path is measured (its transfer's last flight dropped whole: the time to its first probe or
/// retransmission, from where its RFC starts it: over QUIC its last packet, over TCP the
/// client's last acknowledgement), whether its slow start ends before a deep queue (20 Mbit/s, 300
/// ms) overflows and how much queueing it built by then: the whole queue without a delay-based
/// exit (HyStart), far less with one; and its ServerHello (group, suite, HelloRetryRequest, and
/// what it does with a peer whose one key share is P-256: takes it, or asks for x25519), whether
/// it takes 0-RTT on a resumed session (two GETs, the second on a new connection), whether it
/// sends an urgent response (RFC 9218) asked for while a least urgent one is being sent first,
/// shares its sending, or answers in order (a page load at 10 Mbit/s) and,
/// over QUIC, its transport parameters (flow-control limits, streams, max_ack_delay, idle
/// timeout).
///
/// As a client (10 Mbit/s, a 5 MB download: long enough for a path-MTU search to end): its hello (its size on the link, and its key shares, groups and
/// length read from the capture: QUIC Initial packets are opened with the keys RFC 9001 derives
/// from the connection ID), its first and largest datagram, how many data packets each of its
/// acknowledgements covers, and its first retransmission timer (no answer to its hello).
/// A browser has a client card: `quiclab fingerprint chrome --role client`.
///
/// Each probe runs --runs times; an item whose runs disagree beyond its tolerance is marked. A
/// probe whose link the host held back more than its reading takes (a departure late in the
/// link's log by 2 ms for the clean and isolated-loss probes, up to 20 ms for the jumbo and long
/// ones) is run again, up to twice, and the card says how many were.
/// What moves with the host or the peer rather than the stack (the window β was read at, the
/// tail probe's time from the anchor its RFC does not use) is in an answer's words, not checked.
/// Knobs set on the stack (--knob KEY=VALUE, as a plan's arm sets them) show in the answers:
/// `quiclab fingerprint quinn --knob quic-initial-rtt=10ms` gives a first timer near 30 ms (three
/// times the initial RTT), `--knob quic-cc=newreno` a β near 0.5. A server card takes eleven trials
/// per run (fourteen over QUIC), a client card three (one or two more where a planted event
/// missed). The trials make namespaces: run it as root, or as an ordinary user where the host
/// allows user namespaces (docs/operating-safely.md).
#[derive(Args)]
pub struct FingerprintCmd {
    /// The stacks to measure, as plans name them (an unknown name is answered with the list).
    #[arg(value_name = "STACK", required = true)]
    stacks: Vec<String>,
    /// Which endpoint of each stack: server, client, or both (each role the stack has).
    #[arg(long, value_enum, default_value_t = RoleArg::Both)]
    role: RoleArg,
    /// A knob of the stack under test, as a plan's arm sets it (repeatable), e.g.
    /// quic-initial-window=20000b. A knob that reaches both endpoints reaches the peer too.
    #[arg(long = "knob", value_name = "KEY=VALUE")]
    knobs: Vec<String>,
    /// How many times each probe runs (the answers must agree).
    #[arg(long, value_name = "N", default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=20))]
    runs: u32,
    /// Keep the probes' trial folders (link events, captures, qlogs, logs) in DIR.
    #[arg(long, value_name = "DIR")]
    keep: Option<PathBuf>,
    /// Write the cards side by side as a self-contained HTML page here, every answer that
    /// sets a stack apart highlighted.
    #[arg(long, value_name = "FILE")]
    report: Option<PathBuf>,
    /// Print one JSON object (the cards) on standard output; the tables go to standard error.
    #[arg(long)]
    json: bool,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum RoleArg {
    Server,
    Client,
    Both,
}

fn knob(s: &str) -> anyhow::Result<(String, String)> {
    match s.split_once('=') {
        Some((k, v)) if !k.is_empty() && !v.is_empty() => Ok((k.to_string(), v.to_string())),
        _ => crate::usage::usage!("--knob {s:?}: give KEY=VALUE, e.g. quic-initial-rtt=10ms"),
    }
}

/// The subjects asked for: each stack in each role asked that it has (a role it lacks is
/// refused when asked alone, skipped with a note under `both`).
fn subjects(c: &FingerprintCmd, out: &Out) -> anyhow::Result<Vec<Subject>> {
    let knobs = c
        .knobs
        .iter()
        .map(|k| knob(k))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let mut v = Vec::new();
    for name in &c.stacks {
        let Some(stack) = stacks::find(name) else {
            crate::usage::usage!("unknown stack {name:?}; known: {}", stacks::names());
        };
        let missing = stack.missing();
        if !missing.is_empty() {
            bail!(
                "stack {name:?} cannot run here: {} (.ci/setup installs what quiclab's stacks need)",
                missing.join("; ")
            );
        }
        let roles: &[Role] = match c.role {
            RoleArg::Server => &[Role::Server],
            RoleArg::Client => &[Role::Client],
            RoleArg::Both => &[Role::Server, Role::Client],
        };
        for &role in roles {
            match Subject::new(name, role, knobs.clone()) {
                Ok(s) => v.push(s),
                Err(e) if c.role == RoleArg::Both => out.line(format!("{name}: {e}; skipped")),
                Err(e) => crate::usage::usage!("{e}"),
            }
        }
    }
    // every probe's plan is checked before the first trial: a bad knob fails at once
    for s in &v {
        s.probe("clean", &[], 0, fingerprint::OBJECT).map_err(|e| {
            crate::usage::Usage(format!("{} as {}: {e}", s.stack.name(), s.role.name()))
        })?;
    }
    Ok(v)
}

pub fn fingerprint(c: FingerprintCmd) -> anyhow::Result<i32> {
    let out = Out::new(c.json);
    let subjects = subjects(&c, &out)?;
    // The endpoints' timing is part of what the wire shows: a client that wakes late reads
    // several packets at once and acknowledges them together (quinn's client: 2.4 data packets
    // per acknowledgement on an idle host whose CPUs sleep, 1.85 with them kept awake). Idle
    // CPUs are kept awake for the probes, as `run --keep-cpus-awake` does, where the kernel
    // allows it.
    let _awake = match quiclab_netns::sys::CpusAwake::hold() {
        Ok(a) => Some(a),
        Err(e) => {
            out.line(format!(
                "note: idle CPUs may sleep during the probes ({}: {e}): how many packets an \
                 acknowledgement covers then moves with how soon they wake",
                quiclab_netns::sys::CPU_WAKE_LATENCY_DEV
            ));
            None
        }
    };
    let mut bench = crate::cmd_bench::TrialBench::for_command("fingerprint", c.keep.as_deref())?;
    bench.record_events(true);
    let mut cards = Vec::new();
    let mut failed = Vec::new();
    for s in &subjects {
        let who = format!(
            "{} as {} (peer {})",
            s.stack.name(),
            s.role.name(),
            s.peer.name()
        );
        // progress on a terminal: one line, rewritten probe by probe
        let tty = std::io::stderr().is_terminal();
        let mut run_trial = |plan: &_, spec: &_, step: fingerprint::Step| {
            if tty {
                eprint!(
                    "\r{who}: run {}/{}, {} probe   ",
                    step.run, step.runs, step.probe
                );
            }
            bench.run(plan, spec).map_err(|e| format!("{e:#}"))
        };
        let card = fingerprint::fingerprint(s, c.runs, bench.dir(), &mut run_trial);
        if tty {
            eprint!("\r{:width$}\r", "", width = who.len() + 40);
        }
        if bench.signals.any() {
            bail!("interrupted");
        }
        match card {
            Ok(card) => {
                print_card(&out, &card);
                cards.push(card);
            }
            Err(e) => {
                out.line(format!("{who}: no card: {e}"));
                failed.push(format!("{who}: {e}"));
            }
        }
    }
    if let Some(r) = &c.report {
        quiclab_store::output::write_atomic(
            r,
            quiclab_report::fingerprints::render(&cards).as_bytes(),
        )?;
        out.line(format!("the cards side by side: {}", r.display()));
    }
    if let Some(k) = &c.keep {
        out.line(format!("the probes' trials are in {}", k.display()));
    }
    out.summary(|| json!({ "cards": cards, "failed": failed }));
    Ok(if failed.is_empty() { 0 } else { 1 })
}

fn number(v: f64) -> String {
    if v.fract() == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.2}")
    }
}

/// A card as a table: item, answer, each run's, agreement.
fn print_card(out: &Out, card: &Card) {
    let knobs = if card.knobs.is_empty() {
        String::new()
    } else {
        let k: Vec<String> = card.knobs.iter().map(|(k, v)| format!("{k}={v}")).collect();
        format!(", {}", k.join(" "))
    };
    out.line(format!(
        "{} as {} ({}{knobs}; peer {}, {}; {})",
        card.stack,
        card.role.name(),
        card.implementation,
        card.peer,
        card.http,
        card.path
    ));
    let rows: Vec<[String; 4]> = card
        .items
        .iter()
        .map(|i| {
            let runs: Vec<String> = (0..i.runs.len()).map(|k| i.shown(k, number)).collect();
            let mark = if i.runs.iter().all(Option::is_none) {
                "not read".to_string()
            } else if i.reproducible {
                format!("agree ({})", i.tolerance_text)
            } else {
                format!("DIFFER beyond {}", i.tolerance_text)
            };
            [
                format!("{} ({})", i.label, i.unit),
                i.shown_value(number),
                runs.join(", "),
                match &i.why {
                    Some(w) if !i.reproducible => format!("{mark}: {w}"),
                    _ => mark,
                },
            ]
        })
        .collect();
    let w0 = rows.iter().map(|r| r[0].chars().count()).max().unwrap_or(0);
    let w1 = rows.iter().map(|r| r[1].len()).max().unwrap_or(0).max(6);
    let w2 = rows
        .iter()
        .map(|r| r[2].chars().count())
        .max()
        .unwrap_or(0)
        .max(4);
    out.line(format!(
        "  {:w0$}  {:>w1$}  {:w2$}  runs",
        "item", "answer", "each"
    ));
    for r in rows {
        out.line(format!(
            "  {:w0$}  {:>w1$}  {:w2$}  {}",
            r[0], r[1], r[2], r[3]
        ));
    }
    // the probes run again because the host held their link back (each run's `stalls`)
    let stalls: Vec<f64> = card
        .runs
        .iter()
        .filter_map(|r| r["stalls"].as_array())
        .flatten()
        .filter_map(|s| s["late_ms"].as_f64())
        .collect();
    if !stalls.is_empty() {
        let most = stalls.iter().copied().fold(0.0, f64::max);
        out.line(format!(
            "  {} probe trial(s) run again: the host held their link back more than their \
             reading takes (departures up to {most:.1} ms late)",
            stalls.len()
        ));
    }
}
