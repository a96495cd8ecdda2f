//! `quiclab run` of a pages plan as a user runs it (as root: trials need namespaces): the page
//! loads are stored with every resource's times and the report has the pages section.

mod common;
use common::{assert_root, quiclab};

use quiclab_model::campaign::Workload;
use quiclab_store::Store;

#[test]
fn a_pages_campaign_stores_every_resource_and_reports_waterfalls() {
    assert_root();
    let dir = common::TempDir::new("pages-run");
    let plan = dir.join("p.toml");
    std::fs::write(
        &plan,
        r#"name = "p"
iterations = 3
[workload]
kind = "pages"
pages = ["small"]
[network]
rate = "10mbit"
delay = "10ms"
[arms.h2]
http = "2"
[arms.h3-fifo]
http = "3"
quic-scheduling = "fifo"
[arms.h1]
http = "1.1"
[[compare]]
a = "h2"
b = "h3-fifo"
"#,
    )
    .unwrap();
    let out_dir = dir.join("out");
    let out = quiclab()
        .args(["run", plan.to_str().unwrap(), "--out"])
        .arg(&out_dir)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");

    let campaign = Store::open_existing(&out_dir).unwrap().campaign().unwrap();
    let Workload::Pages { pages } = &campaign.workload else {
        panic!("{:?}", campaign.workload)
    };
    assert_eq!(pages[0].resources, 18);
    assert_eq!(campaign.trials.len(), 9);
    // 593 kB over 10 Mbit/s take 474 ms; with handshakes and discovery round trips more
    let wire_ms = pages[0].bytes as f64 * 8.0 / 10e6 * 1000.0;
    for t in &campaign.trials {
        let m = t
            .outcome
            .as_ref()
            .unwrap_or_else(|e| panic!("{}: {e}", t.id));
        let d = m.detail.page.as_ref().expect("page detail");
        assert_eq!(d.resources.len(), 18);
        assert_eq!(m.ttlb_ms, d.plt_ms, "TTLB is the page load time");
        assert!(d.plt_ms > wire_ms, "{}: {} ms", t.arm, d.plt_ms);
        for r in &d.resources {
            assert!(r.start_ms <= r.first_byte_ms && r.first_byte_ms <= r.last_byte_ms);
            assert!(r.last_byte_ms <= d.plt_ms);
        }
    }

    // every load's time budget adds up, over one connection or six
    let records = Store::open_existing(&out_dir).unwrap().trials().unwrap();
    assert_eq!(common::assert_budgets_add_up(&records), 9);
    for t in &records {
        let b = t.outcome.as_ref().unwrap().detail.budget.as_ref().unwrap();
        // the floor: the first connection's handshake by design, one round trip for the
        // document, every resource's body at 10 Mbit/s
        let hs = if t.arm == "h3-fifo" { 20.0 } else { 40.0 };
        assert_eq!(b.floor.handshake_ms, hs, "{}", t.arm);
        assert_eq!(b.floor.request_ms, 20.0);
        assert!((b.floor.serialisation_ms - wire_ms).abs() < 0.01, "{b:?}");
    }

    let html = std::fs::read_to_string(out_dir.join("report.html")).unwrap();
    // every chart exported, the waterfalls among them
    let names = common::assert_figures_exported(&out_dir);
    assert!(names.iter().any(|n| n.ends_with("-waterfall")), "{names:?}");
    let section = &html[html.find("id=\"pages\"").expect("a pages section")..];
    assert!(section.contains("small (18 resources"), "page labels");
    // a waterfall per arm for the one condition and page
    assert!(section.contains("h2 — iteration") && section.contains("h3-fifo — iteration"));
    assert!(
        html.contains("id=\"heatmap-0\""),
        "the page load time heatmap"
    );
}

#[test]
fn chrome_arms_run_in_a_campaign_over_the_protocol_asked_for_and_keep_the_net_log() {
    assert_root();
    let dir = common::TempDir::new("pages-chrome");
    let plan = dir.join("p.toml");
    std::fs::write(
        &plan,
        r#"name = "p"
iterations = 2
[workload]
kind = "pages"
pages = ["small"]
[network]
rate = "10mbit"
delay = "10ms"
[arms.chrome-h2]
http = "2"
client-stack = "chrome"
[arms.chrome-h3]
http = "3"
client-stack = "chrome"
[arms.chrome-h3-quiche]
http = "3"
server-stack = "quiche"
client-stack = "chrome"
[arms.h2]
http = "2"
"#,
    )
    .unwrap();
    let out_dir = dir.join("out");
    let out = quiclab()
        .args(["run", plan.to_str().unwrap(), "--jobs", "4", "--out"])
        .arg(&out_dir)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");

    let store = Store::open_existing(&out_dir).unwrap();
    // a browser takes the host: its trials ran alone though four could run at once
    let records = store.trials().unwrap();
    let span = |r: &quiclab_store::TrialRecord| {
        (
            r.started_unix_ms as f64,
            r.started_unix_ms as f64 + r.wall_ms,
        )
    };
    for b in records.iter().filter(|r| r.arm.starts_with("chrome")) {
        let (b0, b1) = span(b);
        for o in records.iter().filter(|o| o.id != b.id) {
            let (o0, o1) = span(o);
            // (start times are whole milliseconds)
            assert!(
                o1 <= b0 + 1.0 || o0 >= b1 - 1.0,
                "{} ran beside {}",
                o.arm,
                b.arm
            );
        }
    }
    // a browser's loads get their budgets from its net-log's times as quiclab's loader's do
    assert_eq!(common::assert_budgets_add_up(&records), 8);
    let campaign = store.campaign().unwrap();
    assert_eq!(campaign.trials.len(), 8);
    // the registry says which arms' client is a browser, and the campaign keeps it
    let browsers: Vec<(&str, bool)> = campaign
        .arms
        .iter()
        .map(|a| (a.name.as_str(), a.client_browser))
        .collect();
    assert_eq!(
        browsers,
        [
            ("chrome-h2", true),
            ("chrome-h3", true),
            ("chrome-h3-quiche", true),
            ("h2", false)
        ]
    );
    for t in campaign.trials.iter().filter(|t| t.arm != "h2") {
        let m = t
            .outcome
            .as_ref()
            .unwrap_or_else(|e| panic!("{} {}: {e}", t.arm, t.id));
        let d = m.detail.page.as_ref().expect("page detail");
        let b = d.browser.as_ref().expect("the browser's own measurements");
        let proto = if t.arm == "chrome-h2" { "h2" } else { "h3" };
        assert_eq!(b.protocols, [proto], "{}", t.arm);
        // the page load time of a browser arm is its load event, after every last byte
        assert_eq!(Some(m.ttlb_ms), b.load_event_ms, "{}", t.arm);
        let last = d
            .resources
            .iter()
            .map(|r| r.last_byte_ms)
            .fold(0.0, f64::max);
        // (the load event is on the page's clock, the last bytes on the network events'; the
        // two are put together through Chromium's wall-clock mapping, which was measured off
        // by up to 5.7 ms: a chrome-h3 load event once read 1.0 ms before its last byte)
        assert!(m.ttlb_ms >= last - 6.0, "{}: {} < {last}", t.arm, m.ttlb_ms);
        // the model on the same arrivals ends with the last byte (times kept in whole µs)
        assert_eq!(b.model_plt_ms.map(|p| (p - last).abs() < 0.01), Some(true));
        assert!(
            b.speed_index_ms
                .is_some_and(|s| s > 0.0 && s <= m.ttlb_ms + 100.0)
        );
    }
    // the median trial of each cell keeps Chromium's net-log
    let kept: Vec<_> = campaign
        .trials
        .iter()
        .filter_map(|t| t.artifacts.as_ref())
        .filter(|a| out_dir.join(a).join("netlog.json").is_file())
        .collect();
    assert_eq!(kept.len(), 3, "one net-log per cell: {kept:?}");
}

#[test]
fn a_browser_trial_that_times_out_keeps_its_logs_but_not_its_site() {
    assert_root();
    // the small page is 0.59 MB: at 10 Mbit/s its bytes alone take 470 ms, so a trial that
    // may take 300 ms fails while the browser is loading the site
    // the trial failed: the run says so by its exit code
    let (_dir, out_dir) = common::run_plan_ending(
        "pages-chrome-fail",
        r#"name = "p"
iterations = 1
trial-timeout = "300ms"
[workload]
kind = "pages"
pages = ["small"]
[network]
rate = "10mbit"
delay = "10ms"
[arms.chrome-h3]
http = "3"
client-stack = "chrome"
"#,
        &[],
        1,
    );
    let campaign = Store::open_existing(&out_dir).unwrap().campaign().unwrap();
    assert_eq!(campaign.trials.len(), 1);
    let t = &campaign.trials[0];
    let err = t.outcome.as_ref().unwrap_err();
    assert!(
        err.contains("the client did not finish within 300ms"),
        "{err}"
    );
    let kept = out_dir.join(
        t.artifacts
            .as_ref()
            .expect("a failed trial keeps its files"),
    );
    assert!(kept.join("server.log").is_file(), "{}", kept.display());
    assert!(!kept.join("www").exists(), "the site outlived its trial");
}
