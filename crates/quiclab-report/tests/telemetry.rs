//! The telemetry section on a synthetic campaign whose physics is known: without loss every
//! unit arrives 0.3 ms after the model; with loss every 50th flush is lost and repaired 60 ms
//! late, holding back only itself with a stream per flush, the flushes sent during the repair on
//! a single stream, and never arriving as a datagram.

use quiclab_model::campaign::{
    Arm, Campaign, Condition, Detail, LossDetection, LostPacket, Metrics, Stall, TelemetryDetail,
    Trial, Workload,
};
use quiclab_report::render;
use quiclab_report::stats;

const UPS: u32 = 1000;
const FLUSH: u32 = 10;
const UNITS: usize = 5000;
const ARMS: [&str; 4] = ["tcp", "quic-stream", "quic-streams", "quic-datagrams"];

/// Extra latency (ms) of flush `k` under loss, or `None` if it never arrives, for `mode`.
fn extra_ms(mode: &str, k: usize) -> Option<f64> {
    let lost = k % 50 == 7;
    match mode {
        "quic-datagrams" if lost => None,
        "quic-datagrams" => Some(0.0),
        "quic-streams" => Some(if lost { 60.0 } else { 0.0 }),
        // behind the lost flush: released together with it, 10 ms less late per flush
        _ => {
            let since = (k + 50 - 7) % 50;
            Some((60.0 - 10.0 * since as f64).max(0.0))
        }
    }
}

fn detail(mode: &str, lossy: bool, offset_ms: f64) -> TelemetryDetail {
    let mut d = TelemetryDetail {
        mode: mode.into(),
        units_per_second: UPS,
        flush_units: FLUSH,
        one_way_ms: 25.0,
        loss_up: if lossy { 0.02 } else { 0.0 },
        loss_down: if lossy { 0.02 } else { 0.0 },
        // the model needs the run's length
        latency_us: vec![None; UNITS],
        stalls: Vec::new(),
        send_late_p99_us: 100,
        send_late_max_us: 200,
        realtime: true,
        loss_detection: Vec::new(),
    };
    d.latency_us = (0..UNITS)
        .map(|i| {
            let extra = if lossy {
                extra_ms(mode, i / FLUSH as usize)?
            } else {
                0.0
            };
            Some(((d.model_ms(i) + 0.3 + offset_ms + extra) * 1000.0).round() as u32)
        })
        .collect();
    if lossy && mode.starts_with("quic") {
        // the client's stack declared three losses, 60, 62 and 70 ms after sending them, and
        // sent again 5 ms after each
        d.loss_detection = [
            (60.0, "time_threshold"),
            (62.0, "time_threshold"),
            (70.0, "pto_expired"),
        ]
        .into_iter()
        .enumerate()
        .map(|(i, (after, trigger))| LossDetection {
            sent_ms: 1000.0 * i as f64,
            declared_after_ms: after,
            repaired_after_ms: Some(after + 5.0),
            trigger: Some(trigger.into()),
        })
        .collect();
    }
    if lossy && mode != "quic-datagrams" {
        d.stalls = (0..UNITS / 500)
            .map(|n| Stall {
                first_unit: (n * 500 + 70) as u64,
                units: if mode == "quic-streams" { 10 } else { 20 },
                flushes: if mode == "quic-streams" { 1 } else { 2 },
                start_ms: (n * 500 + 70) as f64,
                duration_ms: 60.3,
                cause: Some(LostPacket {
                    direction: "up".into(),
                    index: (n * 50 + 12) as u64,
                    size: 139,
                    reason: "random".into(),
                    at_ms: (n * 500 + 79) as f64,
                }),
                drops: 1,
                host_ms: 0.0,
            })
            .collect();
    }
    d
}

fn campaign(offset_tcp_ms: f64) -> Campaign {
    let mut trials = Vec::new();
    for (cond, lossy) in [("no loss", false), ("loss 2%", true)] {
        for arm in ARMS {
            for it in 0..2 {
                let offset = if arm == "tcp" && !lossy {
                    offset_tcp_ms
                } else {
                    0.0
                };
                trials.push(Trial {
                    id: format!("{cond}/{arm}/{it}"),
                    arm: arm.into(),
                    condition: cond.into(),
                    size: (UNITS * 8) as u64,
                    iteration: it,
                    seed: u64::from(it),
                    before: None,
                    outcome: Ok(Metrics {
                        ttlb_ms: 5100.0,
                        ttfb_ms: 70.0,
                        detail: Detail {
                            telemetry: Some(detail(arm, lossy, offset)),
                            ..Detail::default()
                        },
                        ..Default::default()
                    }),
                    artifacts: None,
                    host: None,
                    started_unix_ms: 0,
                    wall_ms: 0.0,
                });
            }
        }
    }
    Campaign {
        name: "tel".into(),
        description: "synthetic telemetry".into(),
        plan_source: "test".into(),
        profile: "quick".into(),
        provenance: Vec::new(),
        arms: ARMS
            .iter()
            .map(|a| Arm {
                name: a.to_string(),
                label: format!("telemetry over {a}"),
                caveats: Vec::new(),
                ..Default::default()
            })
            .collect(),
        conditions: ["no loss", "loss 2%"]
            .iter()
            .map(|c| Condition {
                name: c.to_string(),
                label: c.to_string(),
                rtt_ms: 50.0,
                rate_bps: None,
                base: None,
            })
            .collect(),
        workload: Workload::Telemetry {
            units_per_second: UPS,
            flush_units: FLUSH,
            duration_ms: 5000,
        },
        sizes: vec![(UNITS * 8) as u64],
        comparisons: Vec::new(),
        interleave: None,
        trials,
        busy_seconds: None,
        busy: Vec::new(),
        adaptive: None,
        planted: Vec::new(),
    }
}

/// Every `<svg>...</svg>` block of a page.
fn svg_blocks(html: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = html;
    while let Some(start) = rest.find("<svg") {
        let end = rest[start..].find("</svg>").expect("unclosed svg") + start + "</svg>".len();
        out.push(&rest[start..end]);
        rest = &rest[end..];
    }
    out
}

fn pooled(c: &Campaign, cond: &str, arm: &str) -> Vec<f64> {
    c.trials
        .iter()
        .filter(|t| t.condition == cond && t.arm == arm)
        .flat_map(|t| {
            t.outcome
                .as_ref()
                .unwrap()
                .detail
                .telemetry
                .as_ref()
                .unwrap()
                .latencies_ms()
        })
        .collect()
}

/// Every chart of a telemetry report is exported, its SVG the page's: per condition the
/// scatter (every unit of the median trials) and the CDF (the quantiles drawn, the model's too).
#[test]
fn every_chart_is_exported_with_its_data() {
    let c = campaign(0.0);
    let html = render(&c);
    let figs = quiclab_report::figures::figures(&c);
    assert_eq!(html.matches("<svg").count(), figs.len());
    assert_eq!(figs.len(), 2 * c.conditions.len());
    for f in &figs {
        assert!(html.contains(&f.svg), "{}", f.name);
        let csv = f.csv.as_ref().unwrap();
        let header = csv.lines().next().unwrap();
        if f.name.ends_with("-latency") {
            assert_eq!(header, "arm,trial_id,unit,generated_s,latency_ms,model_ms");
            // each arm's median trial, every unit of it
            let units = c.trials[0]
                .outcome
                .as_ref()
                .unwrap()
                .detail
                .telemetry
                .as_ref()
                .unwrap()
                .latency_us
                .len();
            assert_eq!(csv.lines().count() - 1, c.arms.len() * units, "{}", f.name);
        } else {
            assert!(f.name.ends_with("-cdf"), "{}", f.name);
            assert_eq!(header, "series,fraction,latency_ms");
            let series: std::collections::BTreeSet<&str> = csv
                .lines()
                .skip(1)
                .map(|l| l.split(',').next().unwrap())
                .collect();
            assert_eq!(series.len(), c.arms.len() + 1, "{series:?}");
            assert!(series.contains("model"));
        }
    }
}

#[test]
fn the_section_shows_the_study_s_table_charts_and_sentences_and_nothing_of_ttlb() {
    let c = campaign(0.0);
    let html = render(&c);
    assert_eq!(html, render(&c), "deterministic");
    assert!(html.contains("<section id=\"telemetry\">"));
    assert!(
        !html.contains("<section id=\"heatmaps\">") && !html.contains("<section id=\"cells\">")
    );
    assert!(html.contains("telemetry: 1000 units of 8 bytes per second"));
    assert!(html.contains("2 conditions × 4 arms"));
    // every chart is well-formed: two per condition
    let svgs = svg_blocks(&html);
    assert_eq!(svgs.len(), 4);
    for s in &svgs {
        roxmltree::Document::parse(s).expect("svg parses");
    }
    // the table's numbers are the pooled percentiles, with the change from the baseline
    for arm in ARMS {
        for cond in ["no loss", "loss 2%"] {
            let p90 = stats::quantile(&pooled(&c, cond, arm), 0.9).unwrap();
            assert!(
                html.contains(&format!(">{p90:.2}<")),
                "{arm} {cond} p90 {p90:.2}"
            );
        }
    }
    let tcp_growth = stats::quantile(&pooled(&c, "loss 2%", "tcp"), 0.9).unwrap()
        - stats::quantile(&pooled(&c, "no loss", "tcp"), 0.9).unwrap();
    assert!(tcp_growth > 5.0, "{tcp_growth}");
    assert!(
        html.contains(&format!("+{tcp_growth:.1}")),
        "{tcp_growth:.1}"
    );
    // the model's row: one-way delay plus the wait, 25..34 ms
    assert!(html.contains("<em>model</em>"));
    assert!(html.contains(">29.50<") && html.contains(">34.00<"));
    // sentences: the model check and the p90 comparison
    assert!(
        html.contains("every arm's p50 and p98 lie within 1.0 ms of the model"),
        "model sentence"
    );
    assert!(html.contains("p90 grew with a stream per flush for <strong>quic-streams</strong>"));
    assert!(html.contains(
        "(within 5.0 ms); on a single ordered stream it grew more, for <strong>tcp</strong>"
    ));
    assert!(html.contains("A lost packet holds back only its own flush"));
    // datagrams: the lost flushes, 10 of 500 per trial
    assert!(html.contains(
        "<strong>quic-datagrams</strong> lost 2.0 % of its units instead (200 of 10000)"
    ));
    // stalls of the median trials with their lost packet
    assert!(html.contains("Stalls of the median trials"));
    assert!(html.contains("up #12, 139 B, random at 0.079 s"));
}

#[test]
fn an_arm_off_the_model_without_loss_is_flagged() {
    let html = render(&campaign(1.5));
    assert!(html.contains("Off the model without loss:"), "flag");
    assert!(html.contains("p50 of <strong>tcp</strong> under no loss"));
    assert!(!html.contains("lie within 1.0 ms of the model"));
}

#[test]
fn other_workloads_get_no_telemetry_section() {
    let mut c = campaign(0.0);
    c.workload = Workload::default();
    let html = render(&c);
    assert!(!html.contains("<section id=\"telemetry\">"));
}

#[test]
fn the_study_s_published_percentiles_stand_beside_every_quic_arm_with_its_loss_detection() {
    let c = campaign(0.0);
    let html = render(&c);
    let at = html.find("Beside the study").expect("the study's table");
    let table = &html[at..at + html[at..].find("</table>").unwrap()];
    // the published row, every figure
    for (_, _, clean, lossy) in quiclab_report::APTPOD {
        assert!(table.contains(&format!(">{clean:.2}<")), "{clean}");
        assert!(table.contains(&format!(">{lossy:.2}<")), "{lossy}");
    }
    // a row per QUIC arm with its own percentiles; none for TCP
    for arm in ARMS {
        let row = table.find(&format!("</span>{arm}<br>"));
        assert_eq!(row.is_some(), arm != "tcp", "{arm}");
        if arm == "tcp" {
            continue;
        }
        let p98 = stats::quantile(&pooled(&c, "loss 2%", arm), 0.98).unwrap();
        let row = &table[row.unwrap()..];
        let row = &row[..row.find("</tr>").unwrap()];
        assert!(row.contains(&format!(">{p98:.2}<")), "{arm}: {row}");
        // losses (three in each of two trials): declared after the median of 60, 62 and 70 ms,
        // sent again 5 ms later, and what declared them
        assert!(
            row.contains(">62 ms<") && row.contains(">67 ms<"),
            "{arm}: {row}"
        );
        assert!(
            row.contains("6 losses: time_threshold 67 %, pto_expired 33 %"),
            "{arm}: {row}"
        );
    }
}
