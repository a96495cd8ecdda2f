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
        let dir = std::env::temp_dir().join(format!("quiclab-report-ui-{}", std::process::id()));
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
