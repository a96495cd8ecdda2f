//! A deterministic mutation fuzzer for the two parsers that read what users hand quiclab: plans
//! and link traces. Each case is a seeded mutation of a real input (the built-in plans, a
//! Mahimahi trace): bytes flipped, lines deleted, duplicated or swapped, values replaced by
//! extremes and by other keys' values. A case passes if the parser answers (a plan, or an error
//! that names the file, a line and what is wrong, in a bounded length) without panicking, within
//! the time limit for the whole run. Executions and findings are printed.

use std::time::{Duration, Instant};

use quiclab_link::Trace;
use quiclab_link::rng::mix;
use quiclab_runner::plan::{BUILT_IN as PLANS, Profile, parse};

/// The fuzzer's time budget (CI runs it every time: bounded, deterministic in what it tries).
const BUDGET: Duration = Duration::from_secs(15);

/// Values a mutation may put in place of another.
const EXTREMES: &[&str] = &[
    "0",
    "-1",
    "1e308",
    "18446744073709551616",
    "\"\"",
    "\"0\"",
    "\"1bit\"",
    "\"1000gbit\"",
    "\"86400s\"",
    "\"-5ms\"",
    "\"NaN%\"",
    "\"100%\"",
    "\"..\"",
    "\"/dev/zero\"",
    "[]",
    "[1, \"a\"]",
    "{}",
    "true",
    "\"\\u0000\"",
    "\"ms\"",
    "9999999999",
];

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = mix(self.0);
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// One seeded mutation of `text` (one to four edits).
fn mutate(text: &str, rng: &mut Rng) -> String {
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    for _ in 0..=rng.below(4) {
        if lines.is_empty() {
            lines.push(String::new());
        }
        let i = rng.below(lines.len());
        match rng.below(7) {
            0 => {
                lines.remove(i);
            }
            1 => {
                let l = lines[i].clone();
                lines.insert(rng.below(lines.len() + 1), l);
            }
            2 => {
                let j = rng.below(lines.len());
                lines.swap(i, j);
            }
            3 => {
                // a value replaced by an extreme
                if let Some((k, _)) = lines[i].split_once('=') {
                    lines[i] = format!("{k}= {}", EXTREMES[rng.below(EXTREMES.len())]);
                }
            }
            4 => {
                // a value replaced by another line's value
                let j = rng.below(lines.len());
                if let (Some((k, _)), Some((_, v))) =
                    (lines[i].split_once('='), lines[j].clone().split_once('='))
                {
                    lines[i] = format!("{k}={v}");
                }
            }
            5 => {
                // a byte flipped (kept as text)
                let mut b = lines[i].clone().into_bytes();
                if !b.is_empty() {
                    let k = rng.below(b.len());
                    b[k] ^= 1 << rng.below(7);
                }
                lines[i] = String::from_utf8_lossy(&b).into_owned();
            }
            _ => {
                // a line cut short
                let l = &lines[i];
                let cut = rng.below(l.len() + 1);
                lines[i] = l.chars().take(cut).collect();
            }
        }
    }
    lines.join("\n")
}

#[test]
fn plans_and_traces_mutated_thousands_of_ways_get_an_answer_never_a_panic() {
    let started = Instant::now();
    let mut rng = Rng(20);
    let (mut plans, mut accepted, mut traces) = (0u64, 0u64, 0u64);
    let mut findings: Vec<String> = Vec::new();
    let trace: String = (1..=400u64).map(|i| format!("{}\n", i * 3)).collect();
    while started.elapsed() < BUDGET {
        let (name, text) = PLANS[rng.below(PLANS.len())];
        let mutated = mutate(text, &mut rng);
        let file = format!("{name}-mutated.toml");
        let profile = if rng.below(2) == 0 {
            Profile::Full
        } else {
            Profile::Quick
        };
        plans += 1;
        match std::panic::catch_unwind(|| parse(&mutated, &file, profile)) {
            Ok(Ok(p)) => {
                accepted += 1;
                if p.trial_count() == 0 || p.trial_count() > quiclab_runner::plan::MAX_TRIALS {
                    findings.push(format!("{file}: accepted with {} trials", p.trial_count()));
                }
            }
            Ok(Err(e)) => {
                let m = e.to_string();
                if !m.starts_with(&file) || m.len() > 2000 || e.message.trim().is_empty() {
                    findings.push(format!(
                        "{file}: an error that does not say where or what: {m:.300}"
                    ));
                }
            }
            Err(_) => findings.push(format!("{file}: panicked on:\n{mutated}")),
        }
        let t = mutate(&trace, &mut rng);
        traces += 1;
        match std::panic::catch_unwind(|| Trace::parse(&t)) {
            Ok(Ok(tr)) => {
                if tr.opportunities_per_period() == 0 || tr.period().is_zero() {
                    findings.push("a trace accepted with no opportunity or period".into());
                }
            }
            Ok(Err(e)) if e.to_string().len() > 200 => findings.push(format!(
                "a trace error of {} characters",
                e.to_string().len()
            )),
            Ok(Err(_)) => {}
            Err(_) => findings.push(format!("the trace parser panicked on:\n{t:.500}")),
        }
    }
    eprintln!(
        "fuzz: {plans} mutated plans ({accepted} accepted), {traces} mutated traces in {:.1} s; \
         {} findings",
        started.elapsed().as_secs_f64(),
        findings.len()
    );
    assert!(
        plans >= 1000,
        "too few executions to mean anything: {plans}"
    );
    assert!(findings.is_empty(), "findings:\n{}", findings.join("\n"));
}
