//! The built-in `explain-check` plan in its quick profile, as a user runs it (as root: trials
//! need namespaces): every trial's time budget adds up, and every cause planted on purpose is
//! named by the budgets of its cells (docs/explain.md), as the report's "Why" section says.

use quiclab_report::analysis::Analysis;
use quiclab_report::explain;
use quiclab_store::Store;

mod common;

#[test]
fn every_planted_cause_is_named_and_identical_arms_show_no_difference() {
    common::assert_root();
    let _turn = common::one_at_a_time();
    let dir = common::TempDir::new("explain-check");
    let out = dir.join("out");
    let st = common::quiclab()
        .args(["run", "explain-check", "--quick", "--out"])
        .arg(&out)
        .status()
        .unwrap();
    assert!(st.success(), "{st}");
    let store = Store::open_existing(&out).unwrap();
    let trials = store.trials().unwrap();
    assert_eq!(common::assert_budgets_add_up(&trials), trials.len());
    let campaign = store.campaign().unwrap();
    assert_eq!(campaign.planted.len(), 11);
    let an = Analysis::new(&campaign);
    let checks = explain::checks(&an);
    let mut failed = Vec::new();
    for k in &checks {
        let p = &campaign.planted[k.planted];
        let line = format!(
            "{:?} {} / {} against {} / {}: {} pairs, TTLB {:+.1} ms ({:?}), planted share {:.2}, \
             largest other {:?}: {}",
            p.causes,
            campaign.arms[k.arms.1].name,
            campaign.conditions[k.conditions.1].name,
            campaign.arms[k.arms.0].name,
            campaign.conditions[k.conditions.0].name,
            k.pairs,
            k.diff_ms,
            k.diff_ci,
            k.share,
            k.other,
            if k.pass { "named" } else { "NOT NAMED" }
        );
        eprintln!("{line}");
        if !k.pass {
            failed.push(line);
        }
    }
    // the planted arms in their one condition each (7 causes and the identical pair), the
    // outage for the 5 arms of the stacks' own controllers
    assert_eq!(checks.len(), 10 + 5, "{checks:#?}");
    assert!(checks.iter().all(|k| k.pairs == 12), "{checks:#?}");
    assert!(
        failed.is_empty(),
        "checks that failed:\n{}",
        failed.join("\n")
    );
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(html.contains("Planted causes: is the explanation right?"));
    assert!(html.contains(&format!(
        "<b>{} of {} checks pass.</b>",
        checks.len(),
        checks.len()
    )));
    // beside each cell's ACKed bytes, when each arm's median trial lost its time: one chart per
    // cell (4 conditions, 1 size), a row per arm with its flow-control spans shaded in the
    // 16 KB window's and the 8 KB receive buffer's rows
    assert_eq!(html.matches("aria-label=\"when the time went: ").count(), 4);
    assert!(
        html.contains("<title>flow control: "),
        "no flow-control span shaded"
    );
}
