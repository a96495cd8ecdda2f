//! A response delay planted by a plan (`response-delay`), as a user runs it (as root: trials
//! need namespaces): every stack that can hold a response adds exactly that time before the
//! first byte, on the same link and seeds as a plan without it.

use quiclab_model::budget::Component;
use quiclab_store::{Store, TrialRecord};

mod common;

/// The median time (ms) from the handshake's end to the first byte of each arm of `plan_body`
/// run in `out`: where a held response waits. (s2n-quic's handshake alone varies by tens of ms
/// from trial to trial, which the whole TTFB would carry.)
fn wait_by_arm(
    dir: &std::path::Path,
    name: &str,
    delay: Option<&str>,
) -> (Vec<(String, f64)>, Vec<TrialRecord>) {
    let plan = dir.join(format!("{name}.toml"));
    let delay = delay.map_or(String::new(), |d| format!("response-delay = \"{d}\"\n"));
    std::fs::write(
        &plan,
        format!(
            "name = \"held\"\niterations = 3\nseed = 7\n[workload]\nkind = \"single-object\"\n\
             sizes = [\"100kb\"]\n{delay}[network]\nrate = \"10mbit\"\ndelay = \"10ms\"\n\
             [arms.h2]\nhttp = \"2\"\ntcp-cc = \"cubic\"\n[arms.h3]\nhttp = \"3\"\n\
             [arms.s2n]\nstack = \"s2n-quic\"\n"
        ),
    )
    .unwrap();
    let out_dir = dir.join(format!("out-{name}"));
    let out = common::quiclab()
        .args(["run", plan.to_str().unwrap(), "--jobs", "1", "--out"])
        .arg(&out_dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let trials = Store::open_existing(&out_dir).unwrap().trials().unwrap();
    let waits = ["h2", "h3", "s2n"]
        .iter()
        .map(|arm| {
            let ttfb: Vec<f64> = trials
                .iter()
                .filter(|t| t.arm == *arm)
                .map(|t| {
                    let o = t.outcome.as_ref().unwrap();
                    o.ttfb_ms
                        - o.handshake_ms
                            .expect("every stack here times its handshake")
                })
                .collect();
            assert_eq!(ttfb.len(), 3, "{arm}");
            (arm.to_string(), common::median(ttfb))
        })
        .collect();
    (waits, trials)
}

#[test]
fn a_planted_response_delay_adds_itself_to_the_first_byte_of_every_stack_that_holds_one() {
    common::assert_root();
    let dir = common::TempDir::new("response-delay");
    let (plain, plain_trials) = wait_by_arm(&dir, "plain", None);
    let (held, held_trials) = wait_by_arm(&dir, "held", Some("200ms"));
    for ((arm, a), (_, b)) in plain.iter().zip(&held) {
        // the server sleeps 200 ms before its response's head: the timer's lateness and the
        // host's scheduling add a few ms at most, and the same seeds give both runs the same
        // link (no loss here), so nothing else moves the first byte
        let added = b - a;
        eprintln!(
            "{arm}: first byte {a:.1} ms after the handshake, with the delay {b:.1} ms \
             (+{added:.1} ms)"
        );
        assert!(
            (195.0..225.0).contains(&added),
            "{arm}: first byte {a:.1} ms after the handshake without the delay, {b:.1} ms with \
             200 ms"
        );
    }
    // every trial's time budget adds up, and the held response is charged to the endpoint:
    // at least 80 % of the median paired TTLB difference (the same seeds: the same link), and
    // no other part more than 20 %
    assert_eq!(common::assert_budgets_add_up(&plain_trials), 9);
    assert_eq!(common::assert_budgets_add_up(&held_trials), 9);
    for arm in ["h2", "h3", "s2n"] {
        let part = |t: &TrialRecord, c: Option<Component>| {
            let b = t.outcome.as_ref().unwrap().detail.budget.as_ref().unwrap();
            c.map_or(b.ttlb_ms, |c| b.ms(c))
        };
        let diff = |c: Option<Component>| {
            common::median(
                held_trials
                    .iter()
                    .filter(|t| t.arm == arm)
                    .map(|h| {
                        let p = plain_trials
                            .iter()
                            .find(|p| p.arm == arm && p.iteration == h.iteration)
                            .unwrap();
                        part(h, c) - part(p, c)
                    })
                    .collect(),
            )
        };
        let total = diff(None);
        let named: Vec<(Component, f64)> =
            Component::ALL.iter().map(|&c| (c, diff(Some(c)))).collect();
        let why = format!("{arm}: TTLB {total:+.1} ms, {named:?}");
        common::assert_cause_named(total, &named, Component::Endpoint, &why);
    }
    // a stack that cannot hold a response is refused before any trial, by name
    let plan = dir.join("refused.toml");
    std::fs::write(
        &plan,
        "name = \"r\"\niterations = 1\n[workload]\nkind = \"single-object\"\nsizes = [\"1kb\"]\n\
         response-delay = \"10ms\"\n[network]\nrate = \"10mbit\"\n[arms.coded]\nhttp = \"coded\"\n",
    )
    .unwrap();
    let out = common::quiclab()
        .args(["run", plan.to_str().unwrap(), "--out"])
        .arg(dir.join("out-refused"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("stack \"coded\" cannot have its server hold a response"),
        "{err}"
    );
}
