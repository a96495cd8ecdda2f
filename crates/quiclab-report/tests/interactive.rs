//! The report's interactive timelines in a real browser: the page opened from its file in
//! headless Chromium (driven over the DevTools protocol, as `quiclab browse` drives it), with
//! real pointer input. Pointing at an ACKed-bytes chart reads each line's value at that time,
//! dragging across it zooms into that time range with both axes redrawn, and a double click
//! restores the static chart. Needs `chromium` (CI installs it); fails, never skips, without it.

use std::path::PathBuf;
use std::time::Duration;

use quiclab_browser::cdp::Browser;
use quiclab_report::{render, synthetic};
use serde_json::{Value, json};

const CALL: Duration = Duration::from_secs(30);

struct Tab {
    browser: Option<Browser>,
    session: String,
    dir: PathBuf,
}

impl Tab {
    /// A headless Chromium showing `html` (written to a file of a fresh directory), 1200 x 900.
    fn open(html: &str) -> Tab {
        // one directory per tab: the tests of this file run at once
        static TABS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = TABS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir =
            std::env::temp_dir().join(format!("quiclab-report-ui-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let page = dir.join("report.html");
        std::fs::write(&page, html).unwrap();
        let program = quiclab_external::def::locate_program("chromium").expect(
            "chromium is not installed: this test opens the report in it (apt-get install chromium)",
        );
        let args: Vec<String> = [
            "--headless",
            "--no-sandbox",
            "--no-first-run",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-extensions",
            "--hide-scrollbars",
            "--window-size=1200,900",
        ]
        .iter()
        .map(|s| s.to_string())
        .chain([
            format!("--user-data-dir={}", dir.join("profile").display()),
            "about:blank".into(),
        ])
        .collect();
        let mut b = Browser::launch(&program, &args, &dir.join("stderr.txt"), &dir).unwrap();
        let session = b.open_blank_tab(CALL).unwrap();
        let mut tab = Tab {
            browser: Some(b),
            session,
            dir,
        };
        tab.call(
            "Emulation.setDeviceMetricsOverride",
            json!({"width": 1200, "height": 900, "deviceScaleFactor": 1, "mobile": false}),
        );
        tab.call(
            "Page.navigate",
            json!({"url": format!("file://{}", page.display())}),
        );
        let deadline = std::time::Instant::now() + CALL;
        while tab.eval("document.readyState") != "complete" {
            assert!(
                std::time::Instant::now() < deadline,
                "the report never loaded"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        tab
    }

    fn call(&mut self, method: &str, params: Value) -> Value {
        let s = self.session.clone();
        self.browser
            .as_mut()
            .unwrap()
            .call(Some(&s), method, params, CALL)
            .unwrap_or_else(|e| panic!("{method}: {e}"))
    }

    fn eval(&mut self, expr: &str) -> Value {
        let r = self.call(
            "Runtime.evaluate",
            json!({"expression": expr, "returnByValue": true}),
        );
        assert!(r.get("exceptionDetails").is_none(), "{expr}: {r}");
        r["result"]["value"].clone()
    }

    /// A mouse event at (x, y) in the viewport's CSS pixels, the left button held or not.
    fn mouse(&mut self, kind: &str, x: f64, y: f64, held: bool, clicks: u32) {
        self.call(
            "Input.dispatchMouseEvent",
            json!({
                "type": kind, "x": x, "y": y,
                "button": if held || kind != "mouseMoved" { "left" } else { "none" },
                "buttons": if held { 1 } else { 0 },
                "clickCount": clicks,
            }),
        );
    }
}

impl Drop for Tab {
    fn drop(&mut self) {
        if let Some(b) = self.browser.take() {
            b.close(Duration::from_secs(2));
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A label as a number ("1,250.5" -> 1250.5; "−3" -> -3).
fn num(s: &str) -> f64 {
    s.replace(',', "")
        .replace('\u{2212}', "-")
        .parse()
        .unwrap_or_else(|e| panic!("{s:?}: {e}"))
}

/// The index of the last point at or before `x`.
fn at(points: &[(f64, f64)], x: f64) -> Option<usize> {
    points.iter().rposition(|p| p.0 <= x)
}

#[test]
fn a_timeline_reads_under_the_pointer_zooms_on_a_drag_and_restores_on_a_double_click() {
    let mut tab = Tab::open(&render(&synthetic::campaign(5, 1)));
    // the first cell's ACKed-bytes chart (its condition is open), in the middle of the window
    let chart = tab.eval(
        "(() => { const g = document.querySelector('svg g.zoom[data-xy]');
           g.ownerSVGElement.scrollIntoView({block: 'center'});
           const r = g.ownerSVGElement.querySelector('rect.zoom-area').getBoundingClientRect();
           return {x: r.x, y: r.y, w: r.width, h: r.height, data: JSON.parse(g.dataset.xy)}; })()",
    );
    let (left, top, width, height) = (
        chart["x"].as_f64().unwrap(),
        chart["y"].as_f64().unwrap(),
        chart["w"].as_f64().unwrap(),
        chart["h"].as_f64().unwrap(),
    );
    assert!(width > 100.0 && height > 100.0, "{chart}");
    let data = &chart["data"];
    let (x0, x1) = (
        data["x"][0].as_f64().unwrap(),
        data["x"][1].as_f64().unwrap(),
    );
    let lines: Vec<(String, Vec<(f64, f64)>)> = data["l"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| {
            let flat: Vec<f64> = l["p"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_f64().unwrap())
                .collect();
            let pts = flat.chunks(2).map(|p| (p[0], p[1])).collect();
            (l["n"].as_str().unwrap().to_string(), pts)
        })
        .collect();
    assert!(lines.len() >= 2, "the arms' median trials: {data}");
    let ticks = |tab: &mut Tab, axis: &str| -> Vec<String> {
        serde_json::from_value(tab.eval(&format!(
            "Array.from(document.querySelector('svg g.zoom[data-xy]').ownerSVGElement
               .querySelectorAll('g.{axis} text')).map(t => t.textContent)"
        )))
        .unwrap()
    };
    let static_x = ticks(&mut tab, "xtick");
    let static_y = ticks(&mut tab, "ytick");
    assert_eq!(num(&static_x[0]), x0);
    assert_eq!(num(static_x.last().unwrap()), x1);

    // hover at 60 % of the plot's width: the box names that time and each line's last value
    // at or before it (one pixel either way for the pointer's rounding)
    let (px, py) = (left + 0.6 * width, top + 0.5 * height);
    tab.mouse("mouseMoved", px, py, false, 0);
    let rows: Vec<String> = serde_json::from_value(tab.eval(
        "Array.from(document.querySelector('g.zoom-tip').querySelectorAll('text'))
           .map(t => t.textContent)",
    ))
    .unwrap();
    let ms_per_px = (x1 - x0) / width;
    let t = x0 + 0.6 * (x1 - x0);
    let shown_t = num(rows[0].strip_suffix(" ms").expect("a time in ms"));
    assert!(
        (shown_t - t).abs() <= ms_per_px + 0.05,
        "{rows:?}: time {shown_t} against {t}"
    );
    // (a row naming a ring under the pointer may follow a line's row)
    let ring = data["rl"].as_str().unwrap();
    let values: Vec<&String> = rows[1..].iter().filter(|r| !r.contains(ring)).collect();
    assert_eq!(values.len(), lines.len(), "{rows:?}");
    let unit = format!(" {}", data["yu"].as_str().unwrap());
    for ((name, pts), row) in lines.iter().zip(values) {
        let shown = row
            .strip_prefix(&format!("{name}: "))
            .and_then(|r| r.strip_suffix(&unit))
            .unwrap_or_else(|| panic!("{row:?} names {name} and {unit}"));
        let value = num(shown);
        // rounded to the decimals shown
        let decimals = shown.split_once('.').map_or(0, |(_, d)| d.len()) as i32;
        let rounding = 0.5 * 10f64.powi(-decimals) + 1e-9;
        let candidates: Vec<f64> = (at(pts, t - ms_per_px).unwrap_or(0)
            ..=at(pts, t + ms_per_px).expect("a point before 60 % of the time axis"))
            .map(|i| pts[i].1)
            .collect();
        assert!(
            candidates.iter().any(|v| (v - value).abs() <= rounding),
            "{row:?}: {value} is none of {candidates:?}"
        );
    }

    // drag from 20 % to 45 %: the x axis now spans that range (to the next 1-2-5 tick) and
    // the y axis the lines' values in it
    let (a, b) = (x0 + 0.2 * (x1 - x0), x0 + 0.45 * (x1 - x0));
    tab.mouse("mousePressed", left + 0.2 * width, py, true, 1);
    tab.mouse("mouseMoved", left + 0.33 * width, py, true, 0);
    tab.mouse("mouseMoved", left + 0.45 * width, py, true, 0);
    tab.mouse("mouseReleased", left + 0.45 * width, py, false, 1);
    let zx: Vec<f64> = ticks(&mut tab, "xtick").iter().map(|s| num(s)).collect();
    let (lo, hi) = (zx[0], *zx.last().unwrap());
    let step = zx[1] - zx[0];
    assert!(
        lo <= a + ms_per_px && lo > a - step - ms_per_px,
        "{zx:?} from {a}"
    );
    assert!(
        hi >= b - ms_per_px && hi < b + step + ms_per_px,
        "{zx:?} to {b}"
    );
    assert!(hi - lo < 0.5 * (x1 - x0), "zoomed in: {zx:?} of {x0}..{x1}");
    let zy: Vec<f64> = ticks(&mut tab, "ytick").iter().map(|s| num(s)).collect();
    let in_view: Vec<f64> = lines
        .iter()
        .flat_map(|(_, pts)| {
            let from = at(pts, lo).unwrap_or(0);
            let to = at(pts, hi).unwrap_or(0);
            pts[from..=to].iter().map(|p| p.1)
        })
        .collect();
    let (ymin, ymax) = in_view
        .iter()
        .fold((f64::MAX, f64::MIN), |(a, b), &v| (a.min(v), b.max(v)));
    // the first tick at or below the lowest value, the second above it; likewise at the top
    let n = zy.len();
    assert!(
        zy[0] <= ymin + 1e-6 && ymin < zy[1] && zy[n - 2] < ymax && ymax <= zy[n - 1] + 1e-6,
        "the y axis follows the data in view: {zy:?} for {ymin}..{ymax}"
    );
    // each line is redrawn inside the plot, clipped to it
    let paths = tab.eval(
        "(() => { const g = document.querySelector('svg g.zoom[data-xy]');
           return {clip: g.getAttribute('clip-path'),
                   paths: Array.from(g.querySelectorAll('path')).map(p => p.getAttribute('d'))}; })()",
    );
    assert!(
        paths["clip"]
            .as_str()
            .is_some_and(|c| c.starts_with("url(#")),
        "{paths}"
    );
    assert_eq!(
        paths["paths"].as_array().unwrap().len(),
        lines.len(),
        "{paths}"
    );

    // a double click restores the static chart
    tab.mouse("mousePressed", px, py, true, 1);
    tab.mouse("mouseReleased", px, py, false, 1);
    tab.mouse("mousePressed", px, py, true, 2);
    tab.mouse("mouseReleased", px, py, false, 2);
    assert_eq!(ticks(&mut tab, "xtick"), static_x);
    assert_eq!(ticks(&mut tab, "ytick"), static_y);
}

/// The synthetic campaign with every arm renamed to a name of `len` characters (its trials and
/// comparisons following).
fn long_arm_names(len: usize) -> quiclab_model::campaign::Campaign {
    let mut camp = synthetic::campaign(5, 1);
    let names: Vec<(String, String)> = camp
        .arms
        .iter()
        .map(|a| {
            let mut long = format!("{}-with-a-long-name-", a.name);
            while long.chars().count() < len {
                long.push('x');
            }
            let long: String = long.chars().take(len).collect();
            (a.name.clone(), long)
        })
        .collect();
    let rename = |n: &mut String| {
        if let Some((_, long)) = names.iter().find(|(old, _)| old == n) {
            *n = long.clone();
        }
    };
    for a in &mut camp.arms {
        rename(&mut a.name);
    }
    for t in &mut camp.trials {
        rename(&mut t.arm);
    }
    for c in &mut camp.comparisons {
        rename(&mut c.a);
        rename(&mut c.b);
    }
    assert!(camp.arms.iter().all(|a| a.name.chars().count() == len));
    camp
}

/// Every text of every chart on the page (all sections opened), as the browser laid it out:
/// which chart, the text, and its box.
const CHART_TEXTS: &str = "(() => {
  document.querySelectorAll('details').forEach(d => d.open = true);
  const charts = [];
  document.querySelectorAll('svg').forEach(svg => {
    const b = svg.getBoundingClientRect();
    if (b.width === 0 || svg.parentElement.closest('svg')) return;
    const title = svg.getAttribute('aria-label') || svg.querySelector('title')?.textContent || '';
    const texts = [];
    svg.querySelectorAll('text').forEach(t => {
      const r = t.getBoundingClientRect();
      if (r.width === 0 || !t.textContent.trim() || !t.checkVisibility()) return;
      texts.push({s: t.textContent, l: r.left, r: r.right, t: r.top, b: r.bottom});
    });
    charts.push({title, box: {l: b.left, r: b.right, t: b.top, b: b.bottom}, texts});
  });
  return charts;
})()";

#[test]
fn no_chart_text_overlaps_another_or_leaves_its_chart_at_24_character_arm_names() {
    let camp = long_arm_names(24);
    let mut tab = Tab::open(&render(&camp));
    let charts = tab.eval(CHART_TEXTS);
    let charts = charts.as_array().unwrap();
    // every cell's charts, the heatmaps and the rest
    assert!(charts.len() > 30, "{} charts", charts.len());
    let rect = |v: &Value| {
        (
            v["l"].as_f64().unwrap(),
            v["r"].as_f64().unwrap(),
            v["t"].as_f64().unwrap(),
            v["b"].as_f64().unwrap(),
        )
    };
    let mut problems = Vec::new();
    let mut texts_seen = 0;
    let mut long_names_seen = 0;
    for chart in charts {
        let title = chart["title"].as_str().unwrap();
        let (bl, br, bt, bb) = rect(&chart["box"]);
        let texts = chart["texts"].as_array().unwrap();
        texts_seen += texts.len();
        for (i, a) in texts.iter().enumerate() {
            let (l, r, t, b) = rect(a);
            let s = a["s"].as_str().unwrap();
            long_names_seen += camp.arms.iter().any(|arm| s.contains(&arm.name)) as usize;
            // half a pixel for the glyphs' antialiased edges
            if l < bl - 0.5 || r > br + 0.5 || t < bt - 0.5 || b > bb + 0.5 {
                problems.push(format!(
                    "{title}: {s:?} ({l:.1}..{r:.1} x {t:.1}..{b:.1}) leaves its chart \
                     ({bl:.1}..{br:.1} x {bt:.1}..{bb:.1})"
                ));
            }
            for o in &texts[i + 1..] {
                let (ol, or, ot, ob) = rect(o);
                // overlapping by more than a pixel each way: glyph boxes of neighbouring
                // rows may touch
                let w = r.min(or) - l.max(ol);
                let h = b.min(ob) - t.max(ot);
                if w > 1.0 && h > 1.0 {
                    problems.push(format!(
                        "{title}: {s:?} and {:?} overlap by {w:.1} x {h:.1} px",
                        o["s"].as_str().unwrap()
                    ));
                }
            }
        }
    }
    assert!(texts_seen > 500, "{texts_seen} texts");
    assert!(
        long_names_seen > 20,
        "{long_names_seen} texts with an arm's name"
    );
    assert!(
        problems.is_empty(),
        "{} problems:\n{}",
        problems.len(),
        problems.join("\n")
    );
}

#[test]
fn printing_shows_every_condition_open_or_not() {
    let camp = synthetic::campaign(5, 1);
    let mut tab = Tab::open(&render(&camp));
    let conditions = camp.conditions.len();
    assert!(conditions >= 3);
    // Each condition's panel and whether its first cell shows: on screen only the first is
    // open.
    let shown = |tab: &mut Tab| -> Vec<bool> {
        serde_json::from_value(tab.eval(
            "Array.from(document.querySelectorAll('details.condition')).map(d =>
               d.querySelector('section.cell').checkVisibility())",
        ))
        .unwrap()
    };
    let on_screen = shown(&mut tab);
    assert_eq!(on_screen.len(), conditions);
    assert_eq!(on_screen.iter().filter(|s| **s).count(), 1, "{on_screen:?}");
    // The print style alone shows them all (a browser that runs no script before printing)
    tab.call("Emulation.setEmulatedMedia", json!({"media": "print"}));
    assert_eq!(shown(&mut tab), vec![true; conditions]);
    tab.call("Emulation.setEmulatedMedia", json!({"media": ""}));
    assert_eq!(shown(&mut tab), on_screen);
    // and the script opens them before printing, closing them again after
    tab.eval("dispatchEvent(new Event('beforeprint'))");
    let open: Vec<bool> = serde_json::from_value(
        tab.eval("Array.from(document.querySelectorAll('details')).map(d => d.open)"),
    )
    .unwrap();
    assert!(open.iter().all(|o| *o), "{open:?}");
    tab.eval("dispatchEvent(new Event('afterprint'))");
    assert_eq!(shown(&mut tab), on_screen);
    // The printed document: more pages than a print of the first condition alone
    let pages = |tab: &mut Tab| {
        let pdf = tab.call("Page.printToPDF", json!({"printBackground": false}));
        let data = pdf["data"].as_str().unwrap().to_string();
        let bytes = base64::Engine::decode(&base64::engine::general_purpose::STANDARD, &data)
            .expect("the PDF in base64");
        // each page object of the PDF: "/Type /Page" not followed by "s"
        let text = String::from_utf8_lossy(&bytes);
        text.match_indices("/Type /Page")
            .filter(|(i, m)| !text[i + m.len()..].starts_with('s'))
            .count()
    };
    let all = pages(&mut tab);
    tab.eval(
        "document.querySelectorAll('details.condition').forEach((d, i) => { if (i > 0) d.remove(); })",
    );
    let first = pages(&mut tab);
    assert!(
        first >= 1 && all > first,
        "{all} pages printed against {first} of one condition"
    );
}
