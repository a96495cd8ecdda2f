//! The rendered page: well-formed SVG, heatmap colours that follow significance, numbers that
//! match the statistics module, the median trial's timeline, determinism, escaping and
//! self-containment.

use quiclab_model::campaign::{
    Arm, Campaign, Comparison, Condition, Metrics, TimelinePoint, Trial,
};
use quiclab_report::analysis::{self, Analysis};
use quiclab_report::stats::{self, Rng};
use quiclab_report::{render, synthetic};

fn arm(name: &str) -> Arm {
    Arm {
        name: name.into(),
        label: format!("arm {name}"),
        caveats: Vec::new(),
        ..Default::default()
    }
}

fn timeline(ttlb: f64, size: u64) -> Vec<TimelinePoint> {
    (0..=10)
        .map(|k| TimelinePoint {
            t_ms: ttlb * k as f64 / 10.0,
            acked_bytes: size * k / 10,
            cwnd_bytes: None,
            bytes_in_flight: None,
            rtt_ms: None,
            congestion_event: k == 5,
        })
        .collect()
}

fn ok_trial(arm: &str, cond: &str, size: u64, iteration: u32, ttlb: f64) -> Trial {
    Trial {
        id: format!("{arm}/{cond}/{size}/{iteration}"),
        arm: arm.into(),
        condition: cond.into(),
        size,
        iteration,
        seed: u64::from(iteration),
        before: None,
        outcome: Ok(Metrics {
            ttlb_ms: ttlb,
            ttfb_ms: ttlb / 3.0,
            handshake_rtts: Some(1.0),
            packets_lost: Some(0),
            bytes_resent: Some(0),
            timeline: timeline(ttlb, size),
            ..Default::default()
        }),
        artifacts: None,
        host: None,
        started_unix_ms: 0,
        wall_ms: 0.0,
    }
}

/// Arms: "a" ~ N(100, 5); "slow" = a's distribution times 1.3; "same" = exactly a's values in
/// another order; "few" has only 2 successful trials. One condition, one size, 20 iterations.
fn contrast_campaign() -> Campaign {
    let (cond, size) = ("plain", 1_000_000);
    let mut rng = Rng::new(11);
    let base: Vec<f64> = (0..20).map(|_| 100.0 + 5.0 * rng.normal()).collect();
    let mut trials = Vec::new();
    for (i, &v) in base.iter().enumerate() {
        let i = i as u32;
        trials.push(ok_trial("a", cond, size, i, v));
        trials.push(ok_trial(
            "slow",
            cond,
            size,
            i,
            1.3 * (100.0 + 5.0 * rng.normal()),
        ));
        trials.push(ok_trial("same", cond, size, i, base[(i as usize * 7) % 20]));
        if i < 2 {
            trials.push(ok_trial("few", cond, size, i, v));
        } else {
            let mut t = ok_trial("few", cond, size, i, v);
            t.outcome = Err(format!("timeout after {} s", 30));
            trials.push(t);
        }
    }
    Campaign {
        name: "contrast".into(),
        description: "three clear cases".into(),
        plan_source: "test".into(),
        profile: "quick".into(),
        provenance: vec![("kernel".into(), "6.18".into())],
        arms: vec![arm("a"), arm("slow"), arm("same"), arm("few")],
        conditions: vec![Condition {
            name: cond.into(),
            label: "a plain link".into(),
            rtt_ms: 20.0,
            rate_bps: Some(10_000_000),
            base: None,
        }],
        workload: Default::default(),
        interleave: None,
        sizes: vec![size],
        comparisons: vec![
            Comparison {
                a: "a".into(),
                b: "slow".into(),
            },
            Comparison {
                a: "a".into(),
                b: "same".into(),
            },
            Comparison {
                a: "a".into(),
                b: "few".into(),
            },
            Comparison {
                a: "slow".into(),
                b: "a".into(),
            },
        ],
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

/// The heatmap cell group with this id, from any SVG on the page.
fn heatmap_cell(html: &str, id: &str) -> (String, String, Vec<String>) {
    for block in svg_blocks(html) {
        let doc = roxmltree::Document::parse(block).expect("svg parses");
        if let Some(g) = doc.descendants().find(|n| n.attribute("id") == Some(id)) {
            let class = g.attribute("class").unwrap().to_string();
            let fill = g
                .children()
                .find(|n| n.has_tag_name("rect"))
                .and_then(|r| r.attribute("fill"))
                .unwrap()
                .to_string();
            let texts = g
                .children()
                .filter(|n| n.has_tag_name("text") || n.has_tag_name("title"))
                .map(|n| n.text().unwrap_or("").to_string())
                .collect();
            return (class, fill, texts);
        }
    }
    panic!("no heatmap cell {id}");
}

fn rgb(hex: &str) -> (u8, u8, u8) {
    let p = |i: usize| u8::from_str_radix(&hex[i..i + 2], 16).unwrap();
    (p(1), p(3), p(5))
}

/// "CI +25 to +35 %" -> (25.0, 35.0)
fn parse_ci(text: &str) -> (f64, f64) {
    let body = text
        .strip_prefix("CI ")
        .and_then(|t| t.strip_suffix(" %"))
        .unwrap_or_else(|| panic!("not an interval: {text:?}"));
    let (lo, hi) = body.split_once(" to ").unwrap();
    let num = |s: &str| {
        s.replace('\u{2212}', "-")
            .replace('+', "")
            .parse::<f64>()
            .unwrap()
    };
    (num(lo), num(hi))
}

fn ttlbs(c: &Campaign, arm: &str) -> Vec<f64> {
    c.trials
        .iter()
        .filter(|t| t.arm == arm)
        .filter_map(|t| t.outcome.as_ref().ok().map(|m| m.ttlb_ms))
        .collect()
}

#[test]
fn every_svg_is_well_formed_and_every_chart_is_there() {
    let c = synthetic::campaign(10, 3);
    let html = render(&c);
    let blocks = svg_blocks(&html);
    // One heatmap per comparison, five charts per (condition, size) cell.
    assert_eq!(
        blocks.len(),
        c.comparisons.len() + 5 * c.conditions.len() * c.sizes.len()
    );
    for b in &blocks {
        let doc = roxmltree::Document::parse(b).unwrap_or_else(|e| panic!("{e}: {b:.300}"));
        let root = doc.root_element();
        assert_eq!(
            root.tag_name().namespace(),
            Some("http://www.w3.org/2000/svg")
        );
        assert!(root.attribute("viewBox").is_some());
    }
    // Block elements open and close in pairs.
    for tag in ["section", "details", "table", "figure", "ul", "svg", "a"] {
        let opens =
            html.matches(&format!("<{tag} ")).count() + html.matches(&format!("<{tag}>")).count();
        let closes = html.matches(&format!("</{tag}>")).count();
        assert_eq!(opens, closes, "<{tag}>");
    }
}

#[test]
fn heatmap_colours_follow_the_sign_and_significance() {
    let c = contrast_campaign();
    let html = render(&c);
    // Comparison 0: "slow" vs "a", +30 %: red.
    let (class, fill, texts) = heatmap_cell(&html, "hm-0-0-0");
    assert_eq!(class, "cell slower");
    let (r, _, b) = rgb(&fill);
    assert!(r > b + 30, "red expected, got {fill}");
    assert!(texts.iter().any(|t| t.starts_with('+')), "{texts:?}");
    // Comparison 3: "a" vs "slow": blue.
    let (class, fill, _) = heatmap_cell(&html, "hm-3-0-0");
    assert_eq!(class, "cell faster");
    let (r, _, b) = rgb(&fill);
    assert!(b > r + 30, "blue expected, got {fill}");
    // Comparison 1: the same values: neutral grey, value still printed.
    let (class, fill, texts) = heatmap_cell(&html, "hm-1-0-0");
    assert_eq!(class, "cell ns");
    let (r, g, b) = rgb(&fill);
    assert!(r == g && g == b, "grey expected, got {fill}");
    assert!(
        texts
            .iter()
            .any(|t| t.ends_with(" %") && !t.starts_with("CI")),
        "{texts:?}"
    );
    // Comparison 2: "few" has 2 successes: n/a.
    let (class, _, texts) = heatmap_cell(&html, "hm-2-0-0");
    assert_eq!(class, "cell na");
    assert!(texts.iter().any(|t| t == "n/a"), "{texts:?}");
}

#[test]
fn heatmap_numbers_are_the_statistics_modules() {
    let c = contrast_campaign();
    let html = render(&c);
    let (a, slow) = (ttlbs(&c, "a"), ttlbs(&c, "slow"));
    let ci = stats::bootstrap_relative_change_ci(
        &a,
        &slow,
        analysis::change_seed("a", "slow", "plain", 1_000_000),
    )
    .unwrap();
    let change = stats::relative_change(&a, &slow).unwrap();
    // 30 % slower in distribution; with 20 trials per arm the interval is well clear of 0.
    assert!(ci.lo > 0.1 && ci.hi < 0.5, "{ci:?}");
    let (_, _, texts) = heatmap_cell(&html, "hm-0-0-0");
    let interval = texts.iter().find(|t| t.starts_with("CI ")).unwrap();
    let (lo, hi) = parse_ci(interval);
    // Printed with at most one decimal: within rounding of the module's values.
    assert!((lo - ci.lo * 100.0).abs() <= 0.5, "{interval} vs {ci:?}");
    assert!((hi - ci.hi * 100.0).abs() <= 0.5, "{interval} vs {ci:?}");
    let main = texts
        .iter()
        .find(|t| t.ends_with(" %") && !t.starts_with("CI"))
        .unwrap();
    let printed: f64 = main
        .trim_end_matches(" %")
        .replace('+', "")
        .parse()
        .unwrap();
    assert!(
        (printed - change * 100.0).abs() <= 0.5,
        "{main} vs {change}"
    );
    // The tooltip names both medians and the Mann-Whitney p of the module.
    let tooltip = &texts[0];
    let p = stats::mann_whitney(&slow, &a).unwrap().p;
    assert!(p < 0.001, "{p}");
    assert!(tooltip.contains("p < 0.001"), "{tooltip}");
    let median_a = stats::median(&a).unwrap();
    assert!(
        tooltip.contains(&format!("a: n = 20, median {:.0} ms", median_a)),
        "{tooltip}"
    );
    assert!(tooltip.contains("RTT"), "{tooltip}");
}

#[test]
fn the_acked_bytes_chart_shows_the_median_trial() {
    let (cond, size) = ("plain", 100_000);
    let mut c = contrast_campaign();
    c.arms = vec![arm("m")];
    c.comparisons.clear();
    c.conditions.truncate(1);
    c.sizes = vec![size];
    // TTLBs by iteration; iteration 6 has the median TTLB of all but keeps no timeline.
    let ttlb = [50.0, 10.0, 40.0, 30.0, 20.0, 60.0, 35.0];
    c.trials = ttlb
        .iter()
        .enumerate()
        .map(|(i, &v)| ok_trial("m", cond, size, i as u32, v))
        .collect();
    if let Ok(m) = &mut c.trials[6].outcome {
        m.timeline.clear();
    }
    // With timelines: 10 (1), 20 (4), 30 (3), 40 (2), 50 (0), 60 (5): lower median 30, iteration 3.
    let an = Analysis::new(&c);
    assert_eq!(an.cell(0, 0, 0).median_trial.map(|t| t.iteration), Some(3));
    let html = render(&c);
    assert!(
        html.contains("m (it. 3, 30 ms)"),
        "legend names the median trial"
    );
    assert!(!html.contains("(it. 6,"));
    // the data the page's script zooms and reads is that trial's timeline, in the axis's unit
    // (KB for 100 KB), to the third decimal
    let data: Vec<serde_json::Value> = svg_blocks(&html)
        .into_iter()
        .flat_map(|b| {
            let doc = roxmltree::Document::parse(b).unwrap();
            doc.descendants()
                .filter_map(|n| n.attribute("data-xy"))
                .map(|d| serde_json::from_str(d).unwrap())
                .collect::<Vec<_>>()
        })
        .collect();
    assert_eq!(data.len(), 1, "one zoomable chart: the one cell's");
    let lines = data[0]["l"].as_array().unwrap();
    assert_eq!(lines.len(), 1);
    assert_eq!(lines[0]["n"], "m");
    assert_eq!(data[0]["xu"], "ms");
    assert_eq!(data[0]["yu"], "KB");
    let flat: Vec<f64> = lines[0]["p"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_f64().unwrap())
        .collect();
    let Ok(m) = &c.trials[3].outcome else {
        panic!("iteration 3 succeeded")
    };
    assert_eq!(flat.len(), 2 * m.timeline.len());
    for (pair, p) in flat.chunks(2).zip(&m.timeline) {
        assert!((pair[0] - p.t_ms).abs() <= 5e-4, "{pair:?} vs {p:?}");
        assert!(
            (pair[1] - p.acked_bytes as f64 / 1e3).abs() <= 5e-4,
            "{pair:?} vs {p:?}"
        );
    }
    let rings: Vec<f64> = lines[0]["r"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_f64().unwrap())
        .collect();
    let events: Vec<f64> = m
        .timeline
        .iter()
        .filter(|p| p.congestion_event)
        .flat_map(|p| [p.t_ms, p.acked_bytes as f64 / 1e3])
        .collect();
    assert!(!events.is_empty());
    assert_eq!(rings.len(), events.len());
    assert!(
        rings
            .iter()
            .zip(&events)
            .all(|(a, b)| (a - b).abs() <= 5e-4)
    );
}

#[test]
fn rendering_is_deterministic() {
    let c = synthetic::campaign(6, 9);
    let first = render(&c);
    assert_eq!(first, render(&c.clone()));
    assert_eq!(first, render(&synthetic::campaign(6, 9)));
    assert_ne!(first, render(&synthetic::campaign(6, 10)));
}

#[test]
fn text_from_the_campaign_is_escaped() {
    let mut c = contrast_campaign();
    let evil = "<b>&";
    for t in c.trials.iter_mut().filter(|t| t.arm == "slow") {
        t.arm = evil.into();
        t.condition = "x\"<y>'".into();
    }
    for t in c.trials.iter_mut() {
        t.condition = "x\"<y>'".into();
    }
    c.arms[1].name = evil.into();
    c.arms[1].caveats = vec!["<script>alert(1)</script>".into()];
    c.conditions[0].name = "x\"<y>'".into();
    c.description = "</p><script>".into();
    c.provenance.push(("<k>".into(), "v&w".into()));
    c.comparisons[0].b = evil.into();
    c.comparisons[3].a = evil.into();
    let html = render(&c);
    assert!(!html.contains("<b>&"));
    // the page's own script only
    assert_eq!(html.matches("<script").count(), 1);
    assert!(!html.contains("alert(1)</script>"));
    assert!(!html.contains("<y>"));
    assert!(html.contains("&lt;b&gt;&amp;"));
    for b in svg_blocks(&html) {
        roxmltree::Document::parse(b).unwrap_or_else(|e| panic!("{e}: {b:.300}"));
    }
    // The renamed arm is still found and compared.
    let (class, _, _) = heatmap_cell(&html, "hm-0-0-0");
    assert_eq!(class, "cell slower");
}

#[test]
fn the_page_is_self_contained_and_in_order() {
    let c = synthetic::campaign(5, 1);
    let html = render(&c);
    assert!(html.starts_with("<!DOCTYPE html>"));
    for banned in [
        "<link",
        "<img",
        "@import",
        "https://",
        "<script src",
        "fetch(",
    ] {
        assert!(!html.contains(banned), "{banned}");
    }
    // a url() names only a fragment of the page itself (the script's clip paths)
    assert!(
        html.match_indices("url(")
            .all(|(i, _)| html[i + 4..].starts_with('#')),
        "an external url()"
    );
    // one inline script, after the content; a dark scheme and a print style that opens every
    // collapsed section
    assert_eq!(html.matches("<script>").count(), 1);
    assert!(html.find("</main>") < html.find("<script>"));
    assert!(html.contains("@media (prefers-color-scheme: dark)"));
    assert!(html.contains("@media print"));
    assert!(html.contains("details::details-content { content-visibility: visible;"));
    assert!(html.contains("addEventListener('beforeprint'"));
    // The only URL is the SVG namespace.
    assert_eq!(
        html.matches("http://").count(),
        html.matches("http://www.w3.org/2000/svg").count()
    );
    let pos = |needle: &str| {
        html.find(needle)
            .unwrap_or_else(|| panic!("missing {needle}"))
    };
    let order = [
        "<header>",
        "<details class=\"provenance\">",
        "id=\"findings\"",
        "id=\"heatmaps\"",
        "id=\"cells\"",
        "id=\"failures\"",
    ];
    for w in order.windows(2) {
        assert!(pos(w[0]) < pos(w[1]), "{} before {}", w[0], w[1]);
    }
    // Only the first condition is open.
    assert!(html.contains("<details class=\"condition\" id=\"cond-0\" open>"));
    assert_eq!(html.matches("<details class=\"condition\"").count(), 5);
    assert_eq!(html.matches(" open>").count(), 1);
}

#[test]
fn failures_are_listed_and_counted() {
    let c = contrast_campaign();
    let html = render(&c);
    let failed: Vec<&Trial> = c.trials.iter().filter(|t| t.outcome.is_err()).collect();
    assert_eq!(failed.len(), 18);
    let list = &html[html.find("id=\"failures\"").unwrap()..];
    for t in &failed {
        assert!(list.contains(&format!("<code>{}</code>", t.id)), "{}", t.id);
    }
    // 18 of 20 "few" trials failed: the first finding says so.
    let findings = &html[html.find("<ul class=\"findings\">").unwrap()..];
    let first = &findings[..findings.find("</li>").unwrap()];
    assert!(first.contains("18 of 80 trials failed"), "{first}");
    assert!(first.contains("timeout after 30 s"), "{first}");
}

#[test]
fn findings_lead_with_the_clear_difference() {
    let mut c = contrast_campaign();
    c.trials.retain(|t| t.arm != "few");
    c.arms.retain(|a| a.name != "few");
    c.comparisons.retain(|x| x.b != "few");
    let html = render(&c);
    let findings = &html[html.find("<ul class=\"findings\">").unwrap()..];
    let first = &findings[..findings.find("</li>").unwrap()];
    assert!(
        first.contains("<strong>slow</strong> finished")
            && first.contains("later than <strong>a</strong>"),
        "{first}"
    );
    // Times are given in ms and in round trips of the 20 ms path.
    assert!(
        first.contains(" ms (") && first.contains(" RTT)"),
        "{first}"
    );
    // The identical pair is called indistinguishable, never faster or slower.
    assert!(
        findings.contains("<strong>same</strong> and <strong>a</strong> were indistinguishable")
    );
}

#[test]
fn an_empty_campaign_still_renders() {
    let html = render(&Campaign::default());
    assert!(html.contains("<h1></h1>") || html.contains("<h1>"));
    assert!(html.contains("No successful trials to compare."));
    assert!(html.ends_with("</html>\n"));
}

#[test]
fn a_difference_under_one_condition_is_named_with_its_interval_and_round_trips() {
    // Two conditions; "b" is 20 % slower than "a" only under "lossy" (RTT 50 ms) and drawn from
    // the same values under "clean".
    let size = 5_000_000;
    let mut rng = Rng::new(5);
    let mut trials = Vec::new();
    for cond in ["clean", "lossy"] {
        let base: Vec<f64> = (0..30).map(|_| 4000.0 + 100.0 * rng.normal()).collect();
        for (i, &v) in base.iter().enumerate() {
            trials.push(ok_trial("a", cond, size, i as u32, v));
            let other = if cond == "lossy" {
                1.2 * (4000.0 + 100.0 * rng.normal())
            } else {
                base[(i * 11) % 30]
            };
            trials.push(ok_trial("b", cond, size, i as u32, other));
        }
    }
    let cond = |name: &str, rtt_ms: f64| Condition {
        name: name.into(),
        label: name.into(),
        rtt_ms,
        rate_bps: None,
        base: None,
    };
    let c = Campaign {
        name: "one-sided".into(),
        arms: vec![arm("a"), arm("b")],
        conditions: vec![cond("clean", 20.0), cond("lossy", 50.0)],
        workload: Default::default(),
        sizes: vec![size],
        comparisons: vec![Comparison {
            a: "a".into(),
            b: "b".into(),
        }],
        trials,
        ..Default::default()
    };
    let an = Analysis::new(&c);
    let ch = an.comparisons[0].cell(1, 0).change.clone().unwrap();
    let ci = ch.ci.unwrap();
    assert!(ch.significant && ch.rel > 0.1);
    assert!(
        !an.comparisons[0]
            .cell(0, 0)
            .change
            .as_ref()
            .unwrap()
            .significant
    );
    let html = render(&c);
    let findings = &html[html.find("<ul class=\"findings\">").unwrap()..];
    let first = &findings[..findings.find("</li>").unwrap()];
    assert!(
        first.starts_with("<ul class=\"findings\">\n<li>Under <strong>lossy</strong>, at 5 MB <strong>b</strong> was "),
        "{first}"
    );
    assert!(first.contains("slower than <strong>a</strong>"), "{first}");
    assert!(first.contains("1 of 2 conditions"), "{first}");
    // "95 % CI 17–24 %" with the module's interval, "… ms, … RTT" with the condition's RTT.
    let ci_text = &first[first.find("95 % CI ").unwrap() + "95 % CI ".len()..];
    let (lo, rest) = ci_text.split_once('–').unwrap();
    let hi = rest.split_once(" %").unwrap().0;
    assert!(
        (lo.parse::<f64>().unwrap() - ci.lo * 100.0).abs() <= 0.5,
        "{first} vs {ci:?}"
    );
    assert!(
        (hi.parse::<f64>().unwrap() - ci.hi * 100.0).abs() <= 0.5,
        "{first} vs {ci:?}"
    );
    let rtts = ch.diff_ms / 50.0;
    assert!(
        first.contains(&format!("{:.1} RTT", rtts)),
        "{first}: {rtts}"
    );
}

#[test]
fn a_second_arm_against_the_same_baseline_says_whether_it_removes_the_difference() {
    // "mismatched" is 20 % slower than "base" under both conditions; "matched" is drawn from
    // base's own values under "lossy" (the difference gone) and 20 % slower under "clean"
    let size = 1_000_000;
    let mut rng = Rng::new(11);
    let mut trials = Vec::new();
    for cond in ["clean", "lossy"] {
        let base: Vec<f64> = (0..30).map(|_| 1000.0 + 25.0 * rng.normal()).collect();
        for (i, &v) in base.iter().enumerate() {
            trials.push(ok_trial("base", cond, size, i as u32, v));
            let slower = 1.2 * (1000.0 + 25.0 * rng.normal());
            trials.push(ok_trial("mismatched", cond, size, i as u32, slower));
            let matched = if cond == "lossy" {
                base[(i * 7) % 30]
            } else {
                1.2 * (1000.0 + 25.0 * rng.normal())
            };
            trials.push(ok_trial("matched", cond, size, i as u32, matched));
        }
    }
    let cond = |name: &str| Condition {
        name: name.into(),
        label: name.into(),
        rtt_ms: 20.0,
        rate_bps: None,
        base: None,
    };
    let c = Campaign {
        name: "separate".into(),
        arms: vec![arm("base"), arm("mismatched"), arm("matched")],
        conditions: vec![cond("clean"), cond("lossy")],
        sizes: vec![size],
        comparisons: ["mismatched", "matched"]
            .map(|b| Comparison {
                a: "base".into(),
                b: b.into(),
            })
            .to_vec(),
        trials,
        ..Default::default()
    };
    let html = render(&c);
    let at = html
        .find("Against <strong>base</strong> in the cells where")
        .expect("a sentence on the shared baseline");
    let sentence = &html[at..at + html[at..].find("</li>").unwrap()];
    assert!(
        sentence.contains("<strong>matched</strong> removed the difference in 1")
            && sentence.contains("kept it in 1 and reversed it in 0"),
        "{sentence}"
    );
    // cell by cell, each with its change and interval
    assert!(
        sentence.contains("<strong>lossy</strong>, 1 MB: <strong>mismatched</strong> +"),
        "{sentence}"
    );
    assert_eq!(sentence.matches("95 % CI").count(), 4, "{sentence}");
}

/// A campaign merged from shards run on two hosts: the header names both with their trials, and
/// flags the one cell whose trials on the second host are 30 % slower than on the first (every
/// other cell's trials have the same TTLBs on both hosts).
#[test]
fn the_header_names_the_hosts_and_flags_a_cell_that_differs_by_host() {
    let mut c = synthetic::campaign(10, 3);
    let (arm, cond, size) = {
        let t = &c.trials[0];
        (t.arm.clone(), t.condition.clone(), t.size)
    };
    // iteration 2k on lab-1, 2k+1 on lab-2 with iteration 2k's TTLB
    let ttlb: std::collections::HashMap<(String, String, u64, u32), f64> = c
        .trials
        .iter()
        .filter_map(|t| {
            let m = t.outcome.as_ref().ok()?;
            Some((
                (t.arm.clone(), t.condition.clone(), t.size, t.iteration),
                m.ttlb_ms,
            ))
        })
        .collect();
    let uniform = |c: &mut Campaign, slower: f64| {
        for t in &mut c.trials {
            let odd = t.iteration % 2 == 1;
            t.host = Some(if odd { "lab-2" } else { "lab-1" }.into());
            let key = (
                t.arm.clone(),
                t.condition.clone(),
                t.size,
                t.iteration - u32::from(odd),
            );
            let cell = (t.arm == arm && t.condition == cond && t.size == size) as u8 as f64;
            if let (true, Ok(m), Some(v)) = (odd, t.outcome.as_mut(), ttlb.get(&key)) {
                m.ttlb_ms = v * (1.0 + slower * cell);
            }
        }
    };
    let mut same = c.clone();
    uniform(&mut same, 0.0);
    let html = render(&same);
    assert!(html.contains("<dt>hosts</dt><dd>lab-1 ("), "{:.2000}", html);
    assert!(html.contains(", lab-2 ("));
    assert!(
        html.contains("; no host effect: in each of the "),
        "no effect to flag"
    );
    uniform(&mut c, 0.3);
    let html = render(&c);
    assert!(html.contains("host effect in 1 of "), "one cell flagged");
    assert!(
        html.contains(&format!("{arm} / {cond} / "))
            && html.contains("lab-2 +30.0 % against lab-1"),
        "the cell and its change are named"
    );
}

/// A campaign whose host was busy: the header gives the busy seconds and the trials that ran
/// then with their cells, the findings say so; a quiet one says it was never busy; a campaign
/// that did not measure its host says nothing.
#[test]
fn a_busy_host_is_named_in_the_header_and_the_findings_with_the_trials_it_touched() {
    let mut c = synthetic::campaign(5, 2);
    // one trial a second, each taking 0.8 s
    for (i, t) in c.trials.iter_mut().enumerate() {
        t.started_unix_ms = 1_000_000 + i as u64 * 1000;
        t.wall_ms = 800.0;
        t.host = Some("lab-1".into());
    }
    assert!(render(&c).contains("<dt>hosts</dt>"));
    assert!(!render(&c).contains("host load"), "not measured: not said");
    c.busy_seconds = Some(0);
    let html = render(&c);
    assert!(html.contains("the CPUs were never over 90 % busy"));
    assert!(!html.contains("A busy host"));
    // busy from the middle of trial 10 to the start of trial 14: trials 10 to 13
    c.busy_seconds = Some(3);
    c.busy = vec![quiclab_model::campaign::BusySpell {
        host: Some("lab-1".into()),
        from_unix_ms: 1_010_500,
        to_unix_ms: 1_014_000,
    }];
    let html = render(&c);
    assert!(
        html.contains("the CPUs were over 90 % busy for 3 s</span>; 4 trials ran then ("),
        "header"
    );
    let t = &c.trials[10];
    let cell = format!("{} / {} / ", t.arm, t.condition);
    assert!(html.contains(&cell), "the cell of trial 10 is named");
    assert!(
        html.contains(&format!(
            "A busy host:</span> 4 of {} trials ran while their host",
            c.trials.len()
        )),
        "findings"
    );
    // a spell of another host touches none of them
    c.busy[0].host = Some("lab-2".into());
    assert!(render(&c).contains("for 3 s</span>; 0 trials ran then<"));
}

/// Conditions "base" and "loss" (whose base is "base"), one size, 20 iterations: "a" takes
/// 100 ms at base and 110 under loss; "b" is 20 % slower than "a" in both (a base difference,
/// not a loss response); "c" takes as long as "a" at base and 60 % longer under loss. Each
/// value carries N(0, 2) noise.
fn own_base_campaign(offsets: bool) -> Campaign {
    let size = 1_000_000;
    let mut rng = Rng::new(5);
    let mut trials = Vec::new();
    for i in 0..20u32 {
        for (arm, base, loss) in [
            ("a", 100.0, 110.0),
            ("b", 120.0, 132.0),
            ("c", 100.0, 160.0),
        ] {
            trials.push(ok_trial(arm, "base", size, i, base + 2.0 * rng.normal()));
            let mut t = ok_trial(arm, "loss", size, i, loss + 2.0 * rng.normal());
            if offsets && let Ok(m) = &mut t.outcome {
                // "a": the earlier its first loss, the longer it takes; "b", "c": no relation
                m.first_retransmit_offset = Some(match arm {
                    "a" => ((200.0 - m.ttlb_ms) * 1000.0) as u64,
                    _ => u64::from(i * 7 % 20) * 10_000,
                });
                m.packets_lost = Some(1);
            }
            trials.push(t);
        }
    }
    let cond = |name: &str, base: Option<&str>| Condition {
        name: name.into(),
        label: name.into(),
        rtt_ms: 20.0,
        rate_bps: Some(10_000_000),
        base: base.map(str::to_string),
    };
    let cmp = |a: &str, b: &str| Comparison {
        a: a.into(),
        b: b.into(),
    };
    Campaign {
        name: "own-base".into(),
        arms: vec![arm("a"), arm("b"), arm("c")],
        conditions: vec![cond("base", None), cond("loss", Some("base"))],
        sizes: vec![size],
        comparisons: vec![cmp("a", "b"), cmp("a", "c")],
        trials,
        ..Default::default()
    }
}

/// The difference of changes a cell of the own-base table gives ("b − a: +50 pp").
fn pp_of(cell: &str) -> f64 {
    let v = &cell[cell.find("b − a: ").unwrap() + "b − a: ".len()..];
    v[..v.find(" pp").unwrap()]
        .replace('\u{2212}', "-")
        .parse()
        .unwrap()
}

/// The own-base section's table for one comparison ("b vs a"): the HTML from its heading to
/// the end of its table.
fn own_base_table<'a>(html: &'a str, heading: &str) -> &'a str {
    let section = &html[html.find("id=\"own-base\"").expect("the own-base section")..];
    let start = section.find(heading).expect(heading);
    let rest = &section[start..];
    &rest[..rest.find("</table>").unwrap()]
}

#[test]
fn an_arm_slower_at_its_base_is_not_charged_for_it_under_loss() {
    let html = render(&own_base_campaign(false));
    // b is 20 % slower than a at base and under loss: the loss changes both by +10 %, and the
    // difference of the changes is not told apart from 0
    let b = own_base_table(&html, "</span>b vs ");
    let loss_b = &b[b.find("loss <span").unwrap()..];
    assert!(loss_b.contains("<td class=\"num muted\">"), "{loss_b}");
    assert!(pp_of(loss_b).abs() < 5.0, "{loss_b}");
    // c's +60 % against a's +10 %: +50 points, its interval clear of 0
    let c = own_base_table(&html, "</span>c vs ");
    let loss_c = &c[c.find("loss <span").unwrap()..];
    assert!(loss_c.contains("<td class=\"num \">"), "{loss_c}");
    assert!((pp_of(loss_c) - 50.0).abs() < 5.0, "{loss_c}");
    assert!(loss_c.contains("n = 20 / 20 / 20 / 20"), "{loss_c}");
}

#[test]
fn figure_6_gives_each_arm_s_rank_correlation_with_its_interval() {
    let html = render(&own_base_campaign(true));
    // the loss cell's caption: a's offsets fall as its TTLB rises (rho = -1 over its 20 trials
    // under loss); b's and c's are unrelated to their TTLB
    let caption = html
        .split("Spearman's rank correlation")
        .skip(1)
        .map(|c| &c[..c.find("</").unwrap()])
        .find(|c| c.contains("20 trials"))
        .expect("the loss cell's correlations");
    assert!(
        caption.contains("a −1.00 (95 % CI −1.00 to −1.00, 20 trials)"),
        "{caption}"
    );
    for arm in ["; b ", "; c "] {
        let c = &caption[caption.find(arm).expect(arm) + arm.len()..];
        let rho: f64 = c[..c.find(' ').unwrap()]
            .replace('\u{2212}', "-")
            .parse()
            .unwrap();
        assert!(rho.abs() < 0.6, "{caption}");
    }
    // the base condition's trials re-sent nothing: no correlation is made up for them
    assert!(html.contains("a: too few trials with a retransmission (0) for a correlation"));
}

/// The paths of the chart whose label starts with `title` (its first on the page): each path's
/// attributes and number of points.
fn chart_paths(html: &str, title: &str) -> Vec<(Option<String>, Option<String>, usize)> {
    let block = svg_blocks(html)
        .into_iter()
        .find(|b| b.contains(&format!("aria-label=\"{title}")))
        .unwrap_or_else(|| panic!("no chart {title:?}"));
    let doc = roxmltree::Document::parse(block).unwrap();
    doc.descendants()
        .filter(|n| n.tag_name().name() == "path" && n.attribute("fill") == Some("none"))
        // the frame's axes are one grey path
        .filter(|n| n.attribute("stroke") != Some("#555"))
        .map(|n| {
            (
                n.attribute("stroke-dasharray").map(str::to_string),
                n.attribute("stroke-opacity").map(str::to_string),
                n.attribute("d").unwrap().matches(['M', 'L']).count(),
            )
        })
        .collect()
}

#[test]
fn each_cell_draws_its_median_trials_window_and_flight_and_every_iteration() {
    let c = synthetic::campaign(10, 3);
    let html = render(&c);
    let cell = format!("{} · 1 MB", c.conditions[0].name);
    // a window (solid) and a flight (dashed) line per arm, each through the timeline's samples
    let window = chart_paths(
        &html,
        &format!("Congestion window and bytes in flight, {cell}"),
    );
    let dashed = window.iter().filter(|p| p.0.is_some()).count();
    assert_eq!(dashed, c.arms.len(), "{window:?}");
    assert_eq!(window.len(), 2 * c.arms.len(), "{window:?}");
    assert!(window.iter().all(|p| p.2 > 10), "{window:?}");
    // every successful iteration (faint), and each arm's median over them
    let ok = c
        .trials
        .iter()
        .filter(|t| t.condition == c.conditions[0].name && t.size == 1_000_000)
        .filter(|t| t.outcome.as_ref().is_ok_and(|m| !m.timeline.is_empty()))
        .count();
    let every = chart_paths(&html, &format!("ACKed bytes of every iteration, {cell}"));
    let faint = every.iter().filter(|p| p.1.is_some()).count();
    assert_eq!(every.len(), ok, "{every:?}");
    assert_eq!(faint, ok - c.arms.len(), "{every:?}");
    // an arm's legend names its iterations
    let arm = &c.arms[0].name;
    let n = c
        .trials
        .iter()
        .filter(|t| t.arm == *arm && t.condition == c.conditions[0].name && t.size == 1_000_000)
        .filter(|t| t.outcome.is_ok())
        .count();
    assert!(
        html.contains(&format!("{arm} ({n} iterations)")),
        "{arm} ({n} iterations)"
    );
}
