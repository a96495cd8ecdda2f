//! External stacks as users run them: ngtcp2's example programs (Debian's ngtcp2-server and
//! ngtcp2-client) beside quinn in one plan, each client against each server, and the ways a
//! stack file or its programs can fail (as root: trials need namespaces).

use std::path::Path;

use quiclab_store::{Store, TrialRecord};

mod common;

/// The tests run one at a time: those that time handshakes and round trips to the millisecond
/// must not share the two cores with another test's endpoints (the harness runs tests side by
/// side by default), and the others are short.
static TIMED: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn timed() -> std::sync::MutexGuard<'static, ()> {
    // a failed test poisons the lock; the next one may still measure
    TIMED.lock().unwrap_or_else(|e| e.into_inner())
}

/// One size, one link: 20 Mbit/s and 50 ms RTT.
fn plan(size: &str, arms: &str) -> String {
    format!(
        "name = \"ext\"\niterations = 1\nseed = 5\n[workload]\nkind = \"single-object\"\n\
         sizes = [\"{size}\"]\n[network]\nrate = \"20mbit\"\ndelay = \"25ms\"\n{arms}"
    )
}

fn by_arm<'a>(trials: &'a [TrialRecord], arm: &str) -> &'a TrialRecord {
    trials
        .iter()
        .find(|t| t.arm == arm)
        .unwrap_or_else(|| panic!("no trial of arm {arm}"))
}

/// The sender's timeline as the server wrote it (absolute times, every field).
fn server_timeline(out: &Path, t: &TrialRecord) -> Vec<serde_json::Value> {
    let dir = out.join(t.artifacts.as_ref().expect("artifacts kept"));
    let text = std::fs::read_to_string(dir.join("server-timeline.jsonl")).unwrap();
    common::json_lines(&text)
}

#[test]
fn ngtcp2_and_quinn_fetch_from_each_other_and_the_timelines_account_for_every_byte() {
    let _timed = timed();
    common::assert_root();
    let arms = "[arms.quinn]\nhttp = \"3\"\n\
                [arms.ngtcp2]\nstack = \"ngtcp2\"\n\
                [arms.ngtcp2-from-quinn]\nserver-stack = \"quinn\"\nclient-stack = \"ngtcp2\"\n\
                [arms.quinn-from-ngtcp2]\nserver-stack = \"ngtcp2\"\nclient-stack = \"quinn\"\n";
    // one trial at a time: the handshakes are timed to the millisecond, and two trials side by
    // side on a small host delay each other's endpoints by more (60.5 ms seen for a 50 ms RTT)
    let (_dir, out) = common::run_plan(
        "external-pairs",
        &plan("1MB", arms),
        &["--keep-artifacts", "--jobs", "1"],
    );
    let trials = Store::open_existing(&out).unwrap().trials().unwrap();
    assert_eq!(trials.len(), 4);
    const BYTES: u64 = 1_000_000;
    // physics: 1 MB at 20 Mbit/s takes 400 ms on the wire, after a handshake and a request
    // (two round trips of 50 ms)
    let floor_ms = BYTES as f64 * 8.0 / 20e6 * 1000.0 + 100.0;
    for t in &trials {
        let m = t
            .outcome
            .as_ref()
            .unwrap_or_else(|e| panic!("{}: {e}", t.arm));
        let rec = &t.requests[0];
        assert_eq!(rec["bytes"], BYTES, "{}: {rec}", t.arm);
        assert!(rec["error"].is_null(), "{}: {rec}", t.arm);
        assert_eq!(rec["status"], 200, "{}", t.arm);
        assert!(m.ttlb_ms > floor_ms, "{}: TTLB {} ms", t.arm, m.ttlb_ms);
        assert!(
            m.ttlb_ms < floor_ms * 2.0,
            "{}: TTLB {} ms",
            t.arm,
            m.ttlb_ms
        );
        // the handshake takes one round trip for every client; an external client's two ends
        // are the times quiclab read the program's lines, each late by however long the host
        // kept quiclab from reading (0.12 ms short of the round trip seen on a quiet host,
        // 1.7 ms while it compiled)
        let hs = m.handshake_ms.expect("a handshake time");
        assert!((47.5..60.0).contains(&hs), "{}: handshake {hs} ms", t.arm);
        assert!(!m.timeline.is_empty(), "{}: no timeline", t.arm);
        eprintln!(
            "{}: TTFB {:.1} ms, TTLB {:.1} ms, timeline ends at {} acknowledged bytes",
            t.arm,
            m.ttfb_ms,
            m.ttlb_ms,
            m.timeline.last().unwrap().acked_bytes
        );
    }

    // ngtcp2's server: its timeline comes from its qlog and counts stream bytes, so it ends
    // within 2 % of what quinn's client received (HTTP/3 framing is a few dozen bytes)
    let t = by_arm(&trials, "quinn-from-ngtcp2");
    let m = t.outcome.as_ref().unwrap();
    let acked = m.timeline.last().unwrap().acked_bytes as f64;
    assert!(
        (acked - BYTES as f64).abs() <= 0.02 * BYTES as f64,
        "ngtcp2's timeline ends at {acked} bytes"
    );
    // its times are on the client's clock: the server's first event is the client's first
    // packet arriving, one one-way delay (25 ms) and its serialisation (< 1 ms) after it
    let first = m.timeline.first().unwrap().t_ms;
    assert!(
        (24.0..31.0).contains(&first),
        "first server event at {first} ms"
    );
    // every RTT sample is possible on a 50 ms path (the log has whole milliseconds)
    let samples = server_timeline(&out, t);
    assert_eq!(samples.last().unwrap()["impossible_rtt_samples"], 0);
    assert!(
        m.timeline
            .iter()
            .filter_map(|p| p.rtt_ms)
            .all(|r| r >= 49.0)
    );
    // ngtcp2's Cubic grows its window from its initial one
    let cwnd: Vec<u64> = m.timeline.iter().filter_map(|p| p.cwnd_bytes).collect();
    assert!(cwnd.iter().max() > cwnd.first(), "{cwnd:?}");

    // quinn's server counts acknowledged packets (headers and all): at least the body, and at
    // most the body plus a packet's overhead (under 60 bytes in a packet of at least 1200)
    let t = by_arm(&trials, "ngtcp2-from-quinn");
    let acked = t
        .outcome
        .as_ref()
        .unwrap()
        .timeline
        .last()
        .unwrap()
        .acked_bytes as f64;
    assert!(
        acked >= BYTES as f64 && acked <= BYTES as f64 * (1.0 + 60.0 / 1200.0),
        "quinn's timeline ends at {acked} bytes"
    );
}

/// A copy of the built-in ngtcp2 stack file with `edit` applied, as a user's stack called
/// `name` in `stacks/` beside the plan.
fn user_stack(dir: &Path, name: &str, edit: impl Fn(String) -> String) {
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../quiclab-external/stacks/ngtcp2.toml"),
    )
    .unwrap()
    .replace("name = \"ngtcp2\"", &format!("name = \"{name}\""));
    std::fs::create_dir_all(dir.join("stacks")).unwrap();
    std::fs::write(dir.join("stacks").join(format!("{name}.toml")), edit(text)).unwrap();
}

#[test]
fn a_client_program_that_fails_or_says_nothing_fails_its_trial_with_its_output_kept() {
    let _timed = timed();
    common::assert_root();
    let dir = common::TempDir::new("external-failures");
    // a client given an option it does not know exits non-zero; `true` exits 0 saying nothing
    user_stack(&dir, "badopt", |t| {
        t.replace(
            "\"--exit-on-all-streams-close\",",
            "\"--exit-on-all-streams-close\", \"--no-such-option\",",
        )
    });
    user_stack(&dir, "silent", |t| {
        t.replace("program = \"gtlsclient\"", "program = \"true\"")
    });
    let arms = "[arms.badopt]\nstack = \"badopt\"\n[arms.silent]\nstack = \"silent\"\n";
    std::fs::write(dir.join("plan.toml"), plan("10KB", arms)).unwrap();
    let out = dir.join("out");
    // failed trials are recorded (the campaign itself runs to its end, and says by its exit
    // code that trials failed)
    let st = common::quiclab()
        .args(["run", dir.join("plan.toml").to_str().unwrap(), "--out"])
        .arg(&out)
        .status()
        .unwrap();
    assert_eq!(st.code(), Some(1), "{st}");
    let trials = Store::open_existing(&out).unwrap().trials().unwrap();
    let err = |arm: &str| by_arm(&trials, arm).outcome.clone().unwrap_err();
    let e = err("badopt");
    assert!(e.contains("gtlsclient exited with"), "{e}");
    assert!(
        e.contains("no-such-option") || e.contains("unrecognized"),
        "{e}"
    );
    let e = err("silent");
    assert!(e.contains("printed no line matching last-byte"), "{e}");
    // the log it points to is named under the output directory as given, not as held open
    let given = format!("({}/trials/", out.display());
    assert!(e.contains(&given) && !e.contains("/proc/"), "{e}");
    // the program's whole output is kept beside the trial
    let t = by_arm(&trials, "badopt");
    let log = out
        .join(
            t.artifacts
                .as_ref()
                .expect("a failed trial keeps its artifacts"),
        )
        .join("client/client-0.log");
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("--no-such-option"), "{text}");
}

/// An arm that fails the same way again and again is stopped (--fail-after, 5 by default): its
/// trials not yet started are left out and said, and a rerun into the directory runs them.
#[test]
fn an_arm_failing_the_same_way_in_a_row_is_stopped_and_a_rerun_finishes_it() {
    let _timed = timed();
    common::assert_root();
    let dir = common::TempDir::new("external-fail-after");
    user_stack(&dir, "silent", |t| {
        t.replace("program = \"gtlsclient\"", "program = \"true\"")
    });
    let text = plan("10KB", "[arms.silent]\nstack = \"silent\"\n")
        .replace("iterations = 1", "iterations = 8");
    std::fs::write(dir.join("plan.toml"), text).unwrap();
    let out = dir.join("out");
    let run = |extra: &[&str]| {
        let o = common::quiclab()
            .args([
                "run",
                dir.join("plan.toml").to_str().unwrap(),
                "--jobs",
                "1",
            ])
            .args(extra)
            .arg("--json")
            .arg("--out")
            .arg(&out)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr).to_string();
        assert_eq!(o.status.code(), Some(1), "{err}");
        let s: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        (s, err)
    };
    // one at a time: three failures in a row stop the arm; the trial the worker had already
    // taken by then still runs (as when adaptive iterations settle a group), the rest are left
    // out
    let (s, err) = run(&["--fail-after", "3"]);
    let ran = s["trials"]["ran"].as_u64().unwrap();
    assert!((3..=4).contains(&ran), "{s}");
    assert_eq!(s["trials"]["failed"].as_u64(), Some(ran), "{s}");
    let stopped = &s["stopped_arms"][0];
    assert_eq!(stopped["arm"], "silent", "{s}");
    assert_eq!(stopped["failures"].as_u64(), Some(3), "{s}");
    assert_eq!(stopped["left_out"].as_u64(), Some(8 - ran), "{s}");
    assert!(
        stopped["error"]
            .as_str()
            .unwrap()
            .contains("printed no line matching last-byte"),
        "{s}"
    );
    assert!(
        err.contains("arm \"silent\" stopped after 3 failures of one kind in a row"),
        "{err}"
    );
    assert_eq!(
        Store::open_existing(&out).unwrap().trials().unwrap().len() as u64,
        ran
    );
    // the same command with --fail-after 0 runs the five left out and the three failed again
    // (a failed trial is not done), failing each, and stops nothing
    let (s, _) = run(&["--fail-after", "0"]);
    assert_eq!(
        (s["trials"]["ran"].as_u64(), s["trials"]["failed"].as_u64()),
        (Some(8), Some(8)),
        "{s}"
    );
    assert_eq!(s["stopped_arms"].as_array().map(Vec::len), Some(0), "{s}");
}

/// A server whose qlog lacks the acknowledgements, as aioquic's first driver's did: its
/// transfers complete, and each is flagged (as it ends, in `--json`, in the trial's detail and
/// in the report), while ngtcp2's own qlog beside it is not; `external check-qlog` names what
/// the one lacks and finds nothing missing in the other. The broken driver is a script beside
/// its stack file, named by a relative path: found from the file's directory, not the one
/// quiclab runs in.
#[test]
fn a_stack_whose_qlog_lacks_acknowledgements_completes_flagged_and_check_qlog_names_it() {
    let _timed = timed();
    common::assert_root();
    let dir = common::TempDir::new("external-hollow");
    user_stack(&dir, "hollow", |t| {
        t.replace(
            "program = \"gtlsserver\"",
            "program = \"./hollow-server\"",
        )
        .replace(
            "args = [\"-q\", \"--htdocs={htdocs}\", \"--qlog-dir={qlog_dir}\",",
            "args = [\"{qlog_dir}\", \"-q\", \"--htdocs={htdocs}\", \"--qlog-dir={qlog_dir}-aside\",",
        )
    });
    let stack_file = std::fs::read_to_string(dir.join("stacks/hollow.toml")).unwrap();
    assert!(stack_file.contains("{qlog_dir}-aside"), "{stack_file}");
    // ngtcp2's server with its own qlog put aside, and in the qlog directory a connection's
    // log with a STREAM packet sent, a window and an RTT, and no acknowledgement
    let script = dir.join("stacks/hollow-server");
    std::fs::write(
        &script,
        concat!(
            "#!/bin/sh\n",
            "q=\"$1\"; shift\n",
            "mkdir -p \"$q-aside\"\n",
            "printf '\\036{\"qlog_format\":\"JSON-SEQ\",\"qlog_version\":\"0.3\",\"trace\":{\"vantage_point\":{\"type\":\"server\"},\"common_fields\":{\"time_format\":\"relative\"}}}\\n",
            "\\036{\"time\":1,\"name\":\"transport:packet_sent\",\"data\":{\"header\":{\"packet_type\":\"1RTT\",\"packet_number\":0},\"frames\":[{\"frame_type\":\"stream\",\"stream_id\":0,\"offset\":0,\"length\":1000}]}}\\n",
            "\\036{\"time\":1,\"name\":\"recovery:metrics_updated\",\"data\":{\"congestion_window\":12000,\"bytes_in_flight\":1040,\"latest_rtt\":50}}\\n' > \"$q/hollow.sqlog\"\n",
            "exec gtlsserver \"$@\"\n",
        ),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let arms = "[arms.hollow]\nstack = \"hollow\"\n[arms.ngtcp2]\nstack = \"ngtcp2\"\n";
    std::fs::write(dir.join("plan.toml"), plan("1MB", arms)).unwrap();
    let out = dir.join("out");
    let o = common::quiclab()
        .args(["run", dir.join("plan.toml").to_str().unwrap()])
        .args(["--jobs", "1", "--keep-artifacts", "--json", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    // the transfers themselves completed: nothing failed
    assert_eq!(o.status.code(), Some(0), "{err}");
    let s: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let doubted = s["doubted_senders"].as_array().unwrap();
    assert_eq!(doubted.len(), 1, "{s}");
    assert_eq!(doubted[0]["arm"], "hollow", "{s}");
    assert_eq!(doubted[0]["trials"].as_u64(), Some(1), "{s}");
    let why = doubted[0]["why"].as_str().unwrap();
    assert!(
        why.contains("acknowledges 0 of the body's 1000000 bytes (more than a last flight"),
        "{why}"
    );
    assert!(err.contains("the sender's record is in doubt"), "{err}");
    let trials = Store::open_existing(&out).unwrap().trials().unwrap();
    let hollow = by_arm(&trials, "hollow");
    let m = hollow.outcome.as_ref().unwrap();
    assert_eq!(
        m.detail.sender_doubts.len(),
        1,
        "{:?}",
        m.detail.sender_doubts
    );
    let ngtcp2 = by_arm(&trials, "ngtcp2").outcome.as_ref().unwrap();
    assert!(
        ngtcp2.detail.sender_doubts.is_empty(),
        "{:?}",
        ngtcp2.detail.sender_doubts
    );
    let report = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(report.contains("Sender's record in doubt:"), "the finding");
    assert!(
        report.contains("sender's record in doubt in 1 of 1 trials"),
        "the cell's flag"
    );
    // check-qlog: the hollow log lacks its acknowledgements; ngtcp2's own, put aside by the
    // script, lacks nothing a timeline reads
    let server = out.join(hollow.artifacts.as_ref().unwrap()).join("server");
    let check = |file: &Path| {
        let o = common::quiclab()
            .args(["external", "check-qlog", "--json"])
            .arg(file)
            .output()
            .unwrap();
        let v: serde_json::Value = serde_json::from_slice(&o.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&o.stderr)));
        (o.status.code(), v["files"][0].clone())
    };
    let (code, v) = check(&server.join("qlog/hollow.sqlog"));
    assert_eq!(code, Some(1), "{v}");
    assert_eq!(v["acks_received"].as_u64(), Some(0), "{v}");
    let missing = v["missing"].as_array().unwrap();
    assert_eq!(missing.len(), 1, "{v}");
    assert!(missing[0].as_str().unwrap().contains("ACK frame"), "{v}");
    let aside: Vec<_> = std::fs::read_dir(server.join("qlog-aside"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(aside.len(), 1, "{aside:?}");
    let (code, v) = check(&aside[0]);
    assert_eq!(code, Some(0), "{v}");
    // all of the body but at most its last flight, whose acknowledgement came with the close
    assert!(
        v["acked_bytes"].as_u64().unwrap() >= 1_000_000 - 14_720,
        "{v}"
    );
    assert_eq!(v["missing"].as_array().map(Vec::len), Some(0), "{v}");
}

#[test]
fn a_stack_whose_program_is_missing_is_refused_before_anything_runs() {
    let _timed = timed();
    let dir = common::TempDir::new("external-missing");
    user_stack(&dir, "mine", |t| {
        t.replace(
            "program = \"gtlsserver\"",
            "program = \"quiclab-no-such-server\"",
        )
        .replace(
            "install = \"apt-get install ngtcp2-server ngtcp2-client (Debian 12)\"",
            "install = \"build it from its repository\"",
        )
    });
    std::fs::write(
        dir.join("plan.toml"),
        plan("10KB", "[arms.m]\nstack = \"mine\"\n"),
    )
    .unwrap();
    let o = common::quiclab()
        .args(["run", dir.join("plan.toml").to_str().unwrap(), "--dry-run"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("\"quiclab-no-such-server\", which is not installed (install: build it from its repository)"),
        "{err}"
    );
    // a mistake in the stack file is named at its line and column
    user_stack(&dir, "mine", |t| t.replace("{htdocs}", "{htdoc}"));
    let o = common::quiclab()
        .args(["run", dir.join("plan.toml").to_str().unwrap(), "--dry-run"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("stacks/mine.toml:"), "{err}");
    assert!(err.contains("unknown placeholder {htdoc}"), "{err}");
}

#[test]
fn ngtcp2_resumes_with_0rtt_against_both_servers_and_saves_a_round_trip() {
    common::assert_root();
    let _timed = timed();
    let plan = "name = \"ext-repeat\"\niterations = 1\nseed = 4\n[workload]\nkind = \"repeat\"\n\
                requests = 3\nsizes = [\"10KB\"]\n[network]\nrate = \"20mbit\"\ndelay = \"25ms\"\n\
                [arms.ngtcp2]\nstack = \"ngtcp2\"\n\
                [arms.ngtcp2-from-quinn]\nserver-stack = \"quinn\"\nclient-stack = \"ngtcp2\"\n\
                http = \"3\"\n";
    let (_dir, out) = common::run_plan("external-repeat", plan, &[]);
    let trials = Store::open_existing(&out).unwrap().trials().unwrap();
    assert_eq!(trials.len(), 2);
    for t in &trials {
        let reqs = t.requests.as_array().expect("request records");
        assert_eq!(reqs.len(), 3, "{}", t.arm);
        let ttfb = |r: &serde_json::Value| r["ttfb_ms"].as_f64().unwrap();
        // time the host held the emulator's packets back (the trial records it) delays a
        // request by up to that much more
        let late = t
            .outcome
            .as_ref()
            .ok()
            .and_then(|m| m.detail.emulator_late_ms)
            .unwrap_or(0.0);
        // the first connection: a handshake, then the request (two round trips of 50 ms)
        assert!(reqs[0]["error"].is_null(), "{}: {}", t.arm, reqs[0]);
        assert_eq!(reqs[0]["handshake"]["zero_rtt_attempted"], false);
        assert!(
            (100.0..120.0 + late).contains(&ttfb(&reqs[0])),
            "{}: {}",
            t.arm,
            reqs[0]
        );
        // the later ones resume and send the request in 0-RTT: one round trip to the first byte,
        // and the 20 ms the first connection is allowed for a new client process's start and
        // the host's scheduling (ngtcp2's read 65.9 ms once on a busy host): still one round
        // trip, not two
        for r in &reqs[1..] {
            assert!(r["error"].is_null(), "{}: {r}", t.arm);
            assert_eq!(r["handshake"]["zero_rtt_accepted"], true, "{}: {r}", t.arm);
            assert!(
                (50.0..70.0 + late).contains(&ttfb(r)),
                "{}: {r} (host held packets up to {late} ms)",
                t.arm
            );
            assert_eq!(r["bytes"], 10_000);
        }
    }
}
