//! The small SVG toolkit every section draws with: arm colours, 1-2-5 ticks, an x/y frame with
//! gridlines, labelled axes and a legend, grouped bars, and the diverging scale of the heatmaps.
//!
//! Contract: output is a self-contained `<svg>` element (namespace, size and font set on the
//! element itself, so it also renders when saved alone), well-formed XML, with every text escaped
//! and every coordinate printed with one decimal so the same input gives the same bytes. Text
//! widths are estimated from character counts (no font is read), with margins to spare.

use crate::html::esc;
use crate::model::Campaign;
use crate::units;
use quiclab_model::csv::Table;
use std::fmt::Write;

/// Font stack of charts and page alike: fonts every system has, nothing downloaded.
pub const FONT_FAMILY: &str =
    "system-ui, -apple-system, 'Segoe UI', Roboto, 'Helvetica Neue', Arial, sans-serif";

/// Okabe-Ito colours, ordered so the first arms get the most distinct ones on white (yellow
/// last: it reads poorly as a thin line).
const PALETTE: [&str; 8] = [
    "#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000", "#F0E442",
];

/// The colour of the arm at `index` in `Campaign::arms`, the same in every chart and table.
pub fn arm_colour(index: usize) -> &'static str {
    PALETTE[index % PALETTE.len()]
}

/// Fill of heatmap cells whose confidence interval includes 0.
pub const NEUTRAL_FILL: &str = "#e3e3e3";
/// Text of those cells.
pub const MUTED_TEXT: &str = "#6b6b6b";

/// A coordinate with one decimal ("-0.0" printed as "0").
pub fn c(v: f64) -> String {
    let s = format!("{v:.1}");
    match s.as_str() {
        "-0.0" | "0.0" => "0".to_string(),
        _ => s.strip_suffix(".0").map(str::to_string).unwrap_or(s),
    }
}

/// Estimated width in px of `s` at `size` px: 0.6 em per character is wide for digits and
/// lower case in the fonts above, so labels get room to spare.
pub fn text_width(s: &str, size: f64) -> f64 {
    s.chars().count() as f64 * size * 0.6
}

/// Evenly spaced "nice" values (steps of 1, 2 or 5 times a power of ten) covering `[lo, hi]`.
#[derive(Debug, Clone, PartialEq)]
pub struct Ticks {
    /// First tick, at or below the data's minimum.
    pub lo: f64,
    /// Last tick, at or above the data's maximum.
    pub hi: f64,
    pub step: f64,
    pub values: Vec<f64>,
}

impl Ticks {
    /// Ticks covering `[lo, hi]` with about `target` intervals (never more than `2 * target`).
    pub fn new(lo: f64, hi: f64, target: usize) -> Ticks {
        let (lo, hi) = match (lo.is_finite(), hi.is_finite()) {
            (true, true) if hi > lo => (lo, hi),
            (true, _) => (lo, lo + 1.0),
            _ => (0.0, 1.0),
        };
        let raw = (hi - lo) / target.max(1) as f64;
        let mag = 10f64.powf(raw.log10().floor());
        let norm = raw / mag;
        let step = mag
            // The slack absorbs rounding in `raw / mag` (0.2 / 0.1 is not exactly 2).
            * if norm <= 1.0 + 1e-9 {
                1.0
            } else if norm <= 2.0 + 1e-9 {
                2.0
            } else if norm <= 5.0 + 1e-9 {
                5.0
            } else {
                10.0
            };
        // Work in whole steps so tick values do not accumulate rounding error; the small slack
        // keeps a bound that is already a multiple of the step from growing an extra tick.
        let first = (lo / step + 1e-9).floor() as i64;
        let last = (hi / step - 1e-9).ceil() as i64;
        let values: Vec<f64> = (first..=last.max(first + 1))
            .map(|k| k as f64 * step)
            .collect();
        Ticks {
            lo: values[0],
            hi: values[values.len() - 1],
            step,
            values,
        }
    }

    /// A tick's label: as many decimals as the step needs, thousands grouped.
    pub fn label(&self, v: f64) -> String {
        let decimals = if self.step >= 1.0 {
            0
        } else {
            (-self.step.log10()).ceil() as usize
        };
        units::number(v, decimals)
    }
}

/// What a legend entry looks like.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Mark {
    Line,
    /// A dashed line, for a second quantity in an arm's colour.
    Dashed,
    Dot,
    /// A hollow circle, for events on a curve.
    Ring,
}

#[derive(Debug, Clone)]
pub struct LegendEntry {
    pub label: String,
    pub colour: String,
    pub mark: Mark,
}

/// A legend entry per arm of the campaign, in its colour, with `mark`.
pub fn arm_legend(camp: &Campaign, mark: Mark) -> Vec<LegendEntry> {
    camp.arms
        .iter()
        .enumerate()
        .map(|(i, a)| LegendEntry {
            label: a.name.clone(),
            colour: arm_colour(i).to_string(),
            mark,
        })
        .collect()
}

const LEGEND_ROW: f64 = 16.0;
const FONT_SIZE: f64 = 11.0;
const TICK_FONT: f64 = 10.5;

/// Lays out `entries` in rows no wider than `width`; returns each entry's (x, row) and the
/// number of rows.
fn legend_layout(entries: &[LegendEntry], width: f64) -> (Vec<(f64, usize)>, usize) {
    let mut pos = Vec::with_capacity(entries.len());
    let (mut x, mut row) = (0.0, 0);
    for e in entries {
        let w = 20.0 + text_width(&e.label, FONT_SIZE) + 14.0;
        if x > 0.0 && x + w > width {
            x = 0.0;
            row += 1;
        }
        pos.push((x, row));
        x += w;
    }
    (pos, if entries.is_empty() { 0 } else { row + 1 })
}

fn draw_legend(out: &mut String, entries: &[LegendEntry], left: f64, top: f64, width: f64) {
    let (pos, _) = legend_layout(entries, width);
    for (e, (x, row)) in entries.iter().zip(pos) {
        let x = left + x;
        let y = top + row as f64 * LEGEND_ROW + LEGEND_ROW / 2.0;
        let col = esc(&e.colour);
        match e.mark {
            Mark::Line => {
                let _ = write!(
                    out,
                    r#"<line x1="{}" y1="{}" x2="{}" y2="{}" stroke="{col}" stroke-width="2.5"/>"#,
                    c(x),
                    c(y),
                    c(x + 16.0),
                    c(y)
                );
            }
            Mark::Dashed => {
                let _ = write!(
                    out,
                    r#"<line x1="{}" y1="{}" x2="{}" y2="{}" stroke="{col}" stroke-width="1.5" stroke-dasharray="{DASH}"/>"#,
                    c(x),
                    c(y),
                    c(x + 16.0),
                    c(y)
                );
            }
            Mark::Dot => {
                let _ = write!(
                    out,
                    r#"<circle cx="{}" cy="{}" r="4" fill="{col}"/>"#,
                    c(x + 8.0),
                    c(y)
                );
            }
            Mark::Ring => {
                let _ = write!(
                    out,
                    r##"<circle cx="{}" cy="{}" r="3" fill="#ffffff" stroke="{col}" stroke-width="1.5"/>"##,
                    c(x + 8.0),
                    c(y)
                );
            }
        }
        let _ = write!(
            out,
            r##"<text x="{}" y="{}" dominant-baseline="central" fill="#222">{}</text>"##,
            c(x + 20.0),
            c(y),
            esc(&e.label)
        );
    }
}

/// Opening tag of a standalone SVG element of `width` x `height` px.
pub fn svg_open(out: &mut String, width: f64, height: f64, label: &str) {
    let _ = write!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" role="img" aria-label="{}" font-family="{}" font-size="{FONT_SIZE}">"#,
        esc(label),
        esc(FONT_FAMILY),
        w = c(width),
        h = c(height),
    );
    // Opaque, so the chart reads the same when saved and viewed on its own.
    out.push_str(r##"<rect width="100%" height="100%" fill="#ffffff"/>"##);
}

/// What an x/y chart shows, before any data is drawn.
#[derive(Debug, Clone)]
pub struct XySpec {
    pub width: f64,
    pub height: f64,
    /// Read by screen readers; also the chart's `aria-label`.
    pub title: String,
    /// Axis titles with their units, e.g. "time since the client's first packet (ms)".
    pub x_label: String,
    pub y_label: String,
    pub x: Ticks,
    pub y: Ticks,
    pub legend: Vec<LegendEntry>,
    /// Room right of the plot area for a band of values that have no x (e.g. "none").
    pub right_band: f64,
}

/// The plot area of an x/y chart and its mapping from data to pixels.
#[derive(Debug, Clone)]
pub struct Frame {
    pub left: f64,
    pub top: f64,
    pub width: f64,
    pub height: f64,
    pub x: Ticks,
    pub y: Ticks,
}

impl Frame {
    pub fn px(&self, v: f64) -> f64 {
        self.left + (v - self.x.lo) / (self.x.hi - self.x.lo) * self.width
    }

    pub fn py(&self, v: f64) -> f64 {
        self.top + self.height - (v - self.y.lo) / (self.y.hi - self.y.lo) * self.height
    }

    pub fn right(&self) -> f64 {
        self.left + self.width
    }

    pub fn bottom(&self) -> f64 {
        self.top + self.height
    }
}

/// Horizontal gridlines at the y ticks and their labels left of the frame.
fn y_grid(out: &mut String, frame: &Frame, labels: &[String]) {
    out.push_str(r##"<g class="ygrid" stroke="#e6e6e6" stroke-width="1">"##);
    for &v in &frame.y.values {
        let _ = write!(
            out,
            r#"<line x1="{}" y1="{y}" x2="{}" y2="{y}"/>"#,
            c(frame.left),
            c(frame.right()),
            y = c(frame.py(v))
        );
    }
    out.push_str("</g>");
    let _ = write!(
        out,
        r##"<g class="ytick" fill="#333" font-size="{TICK_FONT}" text-anchor="end">"##
    );
    for (&v, l) in frame.y.values.iter().zip(labels) {
        let _ = write!(
            out,
            r#"<text x="{}" y="{}" dominant-baseline="central">{}</text>"#,
            c(frame.left - 5.0),
            c(frame.py(v)),
            esc(l)
        );
    }
    out.push_str("</g>");
}

/// Starts an x/y chart: opens the `<svg>`, draws the legend, gridlines, axes, tick labels and
/// axis titles, and returns the frame to draw data into. Close with [`svg_close`].
pub fn xy_frame(out: &mut String, spec: &XySpec) -> Frame {
    svg_open(out, spec.width, spec.height, &spec.title);
    let y_labels: Vec<String> = spec.y.values.iter().map(|&v| spec.y.label(v)).collect();
    let y_label_w = y_labels
        .iter()
        .map(|l| text_width(l, TICK_FONT))
        .fold(0.0, f64::max);
    let left = 8.0 + 14.0 + 6.0 + y_label_w + 6.0;
    // Room for half of the last x tick label ("1,000").
    let right = 22.0 + spec.right_band;
    let (_, rows) = legend_layout(&spec.legend, spec.width - left - right + 30.0);
    let top = 10.0 + rows as f64 * LEGEND_ROW + if rows > 0 { 6.0 } else { 0.0 };
    // Room below the frame for the x ticks' labels (their baseline 18 px down, so the first
    // clears the lowest y tick's label, centred on the frame's corner) and the axis title.
    let bottom = 42.0;
    let frame = Frame {
        left,
        top,
        width: spec.width - left - right,
        height: spec.height - top - bottom,
        x: spec.x.clone(),
        y: spec.y.clone(),
    };
    draw_legend(out, &spec.legend, left - 30.0, 6.0, frame.width + 30.0);
    out.push_str(r##"<g class="xgrid" stroke="#e6e6e6" stroke-width="1">"##);
    for &v in &spec.x.values {
        let x = frame.px(v);
        let _ = write!(
            out,
            r#"<line x1="{x}" y1="{}" x2="{x}" y2="{}"/>"#,
            c(frame.top),
            c(frame.bottom()),
            x = c(x)
        );
    }
    out.push_str("</g>");
    y_grid(out, &frame, &y_labels);
    let _ = write!(
        out,
        r##"<path d="M{l} {t}V{b}H{r}" fill="none" stroke="#555" stroke-width="1"/>"##,
        l = c(frame.left),
        t = c(frame.top),
        b = c(frame.bottom()),
        r = c(frame.right())
    );
    let _ = write!(
        out,
        r##"<g class="xtick" fill="#333" font-size="{TICK_FONT}" text-anchor="middle">"##
    );
    for &v in &spec.x.values {
        let _ = write!(
            out,
            r#"<text x="{}" y="{}">{}</text>"#,
            c(frame.px(v)),
            c(frame.bottom() + 18.0),
            esc(&spec.x.label(v))
        );
    }
    out.push_str("</g>");
    let _ = write!(
        out,
        r##"<text x="{}" y="{}" text-anchor="middle" fill="#222">{}</text>"##,
        c(frame.left + frame.width / 2.0),
        c(spec.height - 8.0),
        esc(&spec.x_label)
    );
    let (yx, yy) = (14.0, frame.top + frame.height / 2.0);
    let _ = write!(
        out,
        r##"<text transform="translate({},{}) rotate(-90)" text-anchor="middle" fill="#222">{}</text>"##,
        c(yx),
        c(yy),
        esc(&spec.y_label)
    );
    frame
}

/// A message in the middle of a chart that has no data to show.
/// The frame of an [`empty_chart`], which no other chart draws.
const EMPTY_FILL: &str = r##"fill="#fafafa" stroke="#ddd""##;

/// Whether `svg` is an [`empty_chart`]: a message where the data would be.
#[cfg(test)]
pub(crate) fn is_empty_chart(svg: &str) -> bool {
    svg.contains(EMPTY_FILL)
}

pub fn empty_chart(title: &str, width: f64, height: f64, message: &str) -> String {
    let mut out = String::new();
    svg_open(&mut out, width, height, title);
    let _ = write!(
        out,
        r##"<rect x="0.5" y="0.5" width="{}" height="{}" {EMPTY_FILL}/><text x="{}" y="{}" text-anchor="middle" fill="{MUTED_TEXT}">{}</text>"##,
        c(width - 1.0),
        c(height - 1.0),
        c(width / 2.0),
        c(height / 2.0),
        esc(message)
    );
    svg_close(&mut out);
    out
}

pub fn svg_close(out: &mut String) {
    out.push_str("</svg>");
}

/// A polyline through `points` (already in pixels).
pub fn polyline(out: &mut String, points: &[(f64, f64)], colour: &str, width: f64) {
    styled_line(out, points, colour, width, LineStyle::default());
}

/// The dash pattern of [`Mark::Dashed`] and [`LineStyle::dashed`].
pub const DASH: &str = "5 3";

/// How a line is drawn beyond its colour and width.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LineStyle {
    pub dashed: bool,
    /// 1 opaque; less for lines behind others (every iteration behind the median one).
    pub opacity: f64,
}

impl Default for LineStyle {
    fn default() -> Self {
        LineStyle {
            dashed: false,
            opacity: 1.0,
        }
    }
}

/// A polyline through `points` (already in pixels), dashed or faint as `style` says. Points
/// that print the same as the one before are left out.
pub fn styled_line(
    out: &mut String,
    points: &[(f64, f64)],
    colour: &str,
    width: f64,
    style: LineStyle,
) {
    if points.is_empty() {
        return;
    }
    let mut d = String::with_capacity(points.len() * 12);
    let mut last = (String::new(), String::new());
    for (i, (x, y)) in points.iter().enumerate() {
        let here = (c(*x), c(*y));
        if i > 0 && here == last {
            continue;
        }
        let _ = write!(d, "{}{} {}", if i == 0 { "M" } else { "L" }, here.0, here.1);
        last = here;
    }
    let mut extra = String::new();
    if style.dashed {
        let _ = write!(extra, r#" stroke-dasharray="{DASH}""#);
    }
    if style.opacity < 1.0 {
        let _ = write!(extra, r#" stroke-opacity="{}""#, style.opacity);
    }
    let _ = write!(
        out,
        r#"<path d="{d}" fill="none" stroke="{}" stroke-width="{}" stroke-linejoin="round"{extra}/>"#,
        esc(colour),
        c(width)
    );
}

/// A line of a chart that the page's script lets a reader zoom and read under the pointer.
#[derive(Debug, Clone)]
pub struct ZoomLine {
    pub label: String,
    pub colour: String,
    /// `(x, y)` in data units, x ascending; between two points the line is straight, and the
    /// value read at an x is that of the last point at or before it.
    pub points: Vec<(f64, f64)>,
    /// Points marked with a ring (e.g. congestion events), in data units.
    pub rings: Vec<(f64, f64)>,
}

/// The data of a zoomable chart: its lines and the units the script names when it reads them.
#[derive(Debug, Clone)]
pub struct Zoom {
    /// e.g. "ms"
    pub x_unit: String,
    /// e.g. "MB"
    pub y_unit: String,
    /// What a ring means, named when the pointer is on one (e.g. "congestion event").
    pub ring_label: String,
    pub lines: Vec<ZoomLine>,
}

/// A number for the script's data: three decimals at most, no trailing zeros.
fn data_number(v: f64) -> String {
    let s = format!("{v:.3}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    if s == "-0" { "0".into() } else { s.into() }
}

/// Draws `zoom`'s lines (width 2) and rings into `frame` inside a group that carries them, in
/// data units, for the report's script (`sections::SCRIPT`): hovering the plot reads every
/// line's value at the pointer's x, dragging across it zooms into that x range (the y range
/// following the data in it, both axes' ticks redrawn), a double click zooms out. Without the
/// script (printed, or saved alone) the chart is the static one.
pub fn zoomable(out: &mut String, frame: &Frame, zoom: &Zoom) {
    let mut data = String::new();
    let _ = write!(
        data,
        r#"{{"f":[{},{},{},{}],"x":[{},{}],"y":[{},{}],"xu":{},"yu":{},"rl":{},"l":["#,
        data_number(frame.left),
        data_number(frame.top),
        data_number(frame.width),
        data_number(frame.height),
        data_number(frame.x.lo),
        data_number(frame.x.hi),
        data_number(frame.y.lo),
        data_number(frame.y.hi),
        serde_json::Value::from(zoom.x_unit.as_str()),
        serde_json::Value::from(zoom.y_unit.as_str()),
        serde_json::Value::from(zoom.ring_label.as_str()),
    );
    let flat = |pts: &[(f64, f64)]| {
        pts.iter()
            .flat_map(|(x, y)| [data_number(*x), data_number(*y)])
            .collect::<Vec<_>>()
            .join(",")
    };
    for (i, l) in zoom.lines.iter().enumerate() {
        let _ = write!(
            data,
            r#"{}{{"n":{},"c":{},"p":[{}],"r":[{}]}}"#,
            if i == 0 { "" } else { "," },
            serde_json::Value::from(l.label.as_str()),
            serde_json::Value::from(l.colour.as_str()),
            flat(&l.points),
            flat(&l.rings),
        );
    }
    data.push_str("]}");
    let _ = write!(out, r#"<g class="zoom" data-xy="{}">"#, esc(&data));
    for l in &zoom.lines {
        let mut pts: Vec<(f64, f64)> = l
            .points
            .iter()
            .map(|&(x, y)| (frame.px(x), frame.py(y)))
            .collect();
        pts.dedup_by(|b, a| c(a.0) == c(b.0) && c(a.1) == c(b.1));
        polyline(out, &pts, &l.colour, 2.0);
    }
    for l in &zoom.lines {
        for &(x, y) in &l.rings {
            let _ = write!(
                out,
                r##"<circle cx="{}" cy="{}" r="3" fill="#ffffff" stroke="{}" stroke-width="1.5"><title>{} {} at {} {}</title></circle>"##,
                c(frame.px(x)),
                c(frame.py(y)),
                esc(&l.colour),
                esc(&l.label),
                esc(&zoom.ring_label),
                esc(&units::number(x, 1)),
                esc(&zoom.x_unit),
            );
        }
    }
    out.push_str("</g>");
}

/// Pixel corners of the empirical CDF of `xs` as a step function across the whole frame.
pub fn cdf_steps(frame: &Frame, xs: &[f64]) -> Vec<(f64, f64)> {
    let mut pts = vec![(frame.left, frame.py(0.0))];
    let mut prev = 0.0;
    for (v, f) in crate::stats::ecdf(xs) {
        let x = frame.px(v);
        pts.push((x, frame.py(prev)));
        pts.push((x, frame.py(f)));
        prev = f;
    }
    pts.push((frame.right(), frame.py(prev)));
    pts
}

/// One named set of values drawn in one colour.
#[derive(Debug, Clone)]
pub struct Series<'a> {
    pub label: String,
    pub colour: &'a str,
    pub values: Vec<f64>,
}

/// Empirical CDFs of several series on one x axis (a dashed line at the median); series
/// without values are left out of chart and legend.
pub fn cdf(title: &str, width: f64, height: f64, x_label: &str, series: &[Series]) -> String {
    let drawn: Vec<&Series> = series.iter().filter(|s| !s.values.is_empty()).collect();
    let all = || drawn.iter().flat_map(|s| s.values.iter().copied());
    let (Some(lo), Some(hi)) = (all().reduce(f64::min), all().reduce(f64::max)) else {
        return empty_chart(title, width, height, "no values");
    };
    let spec = XySpec {
        width,
        height,
        title: title.to_string(),
        x_label: x_label.to_string(),
        y_label: "fraction".into(),
        x: Ticks::new(lo, hi, 5),
        y: Ticks::new(0.0, 1.0, 5),
        legend: drawn
            .iter()
            .map(|s| LegendEntry {
                label: format!("{} (n = {})", s.label, s.values.len()),
                colour: s.colour.to_string(),
                mark: Mark::Line,
            })
            .collect(),
        right_band: 0.0,
    };
    let mut out = String::new();
    let frame = xy_frame(&mut out, &spec);
    let _ = write!(
        out,
        r##"<line x1="{}" y1="{y}" x2="{}" y2="{y}" stroke="#999" stroke-dasharray="3 3"/>"##,
        c(frame.left),
        c(frame.right()),
        y = c(frame.py(0.5))
    );
    for s in &drawn {
        polyline(&mut out, &cdf_steps(&frame, &s.values), s.colour, 2.0);
    }
    svg_close(&mut out);
    out
}

/// The values a [`cdf`] of `series` draws, for a figure's CSV: a row per value, in order within
/// each series, with the fraction of its series at or below it (the last of each is 1).
/// Columns: `series_column`, `value_column`, `fraction`.
pub fn cdf_csv(series: &[Series], series_column: &str, value_column: &str) -> Table {
    let mut t = Table::new(&[series_column, value_column, "fraction"]);
    for s in series {
        let mut v = s.values.clone();
        v.sort_by(f64::total_cmp);
        let n = v.len();
        for (k, x) in v.iter().enumerate() {
            t.row(&[
                s.label.clone(),
                x.to_string(),
                ((k + 1) as f64 / n as f64).to_string(),
            ]);
        }
    }
    t
}

/// A dashed horizontal line across the frame at `y` (data units) with a label at its right end,
/// e.g. a link's rate; nothing when `y` is outside the axis.
pub fn reference_line(out: &mut String, frame: &Frame, y: f64, colour: &str, label: &str) {
    if y < frame.y.lo || y > frame.y.hi {
        return;
    }
    let py = frame.py(y);
    let _ = write!(
        out,
        r#"<line x1="{}" y1="{py}" x2="{}" y2="{py}" stroke="{col}" stroke-width="1.2" stroke-dasharray="5 3"/><text x="{}" y="{}" text-anchor="end" fill="{col}" font-size="{TICK_FONT}">{}</text>"#,
        c(frame.left),
        c(frame.right()),
        c(frame.right() - 2.0),
        c(py - 3.0),
        esc(label),
        py = c(py),
        col = esc(colour),
    );
}

/// One bar of a [`grouped_bars`] chart.
#[derive(Debug, Clone)]
pub struct Bar {
    /// `None` draws nothing in the bar's slot (no data).
    pub value: Option<f64>,
    pub colour: String,
    /// Outlined with a pale fill instead of solid: the second series of a pair.
    pub hollow: bool,
    /// An interval drawn as a whisker over the bar.
    pub whisker: Option<(f64, f64)>,
    /// The bar's tooltip.
    pub title: String,
}

/// Bars side by side under one category label.
#[derive(Debug, Clone)]
pub struct BarGroup {
    pub label: String,
    pub bars: Vec<Bar>,
}

/// What a grouped bar chart shows.
#[derive(Debug, Clone)]
pub struct BarSpec {
    pub width: f64,
    pub height: f64,
    pub title: String,
    pub y_label: String,
    pub y: Ticks,
    pub groups: Vec<BarGroup>,
    pub legend: Vec<LegendEntry>,
    /// Dashed lines across the chart: (value, colour, label).
    pub references: Vec<(f64, String, String)>,
}

impl BarSpec {
    /// The values the chart draws, for a figure's CSV: a row per bar with a value, as
    /// `group_column` (the group's label), `series_column` (the legend's label at the bar's
    /// place, the arm for charts of arms), the value named by the y axis, and the whisker's
    /// ends where there is one.
    pub fn csv(&self, group_column: &str, series_column: &str) -> Table {
        let value = format!("value ({})", self.y_label);
        let mut t = Table::new(&[group_column, series_column, &value, "low", "high"]);
        for g in &self.groups {
            for (i, b) in g.bars.iter().enumerate() {
                let Some(v) = b.value else { continue };
                let series = self
                    .legend
                    .get(i)
                    .map_or(i.to_string(), |l| l.label.clone());
                let (lo, hi) = b.whisker.map_or((String::new(), String::new()), |(l, h)| {
                    (l.to_string(), h.to_string())
                });
                t.row(&[g.label.clone(), series, v.to_string(), lo, hi]);
            }
        }
        t
    }
}

/// `label` in one line if it fits `width` px, else in two, broken at the space that makes the
/// longer line shortest.
fn wrap_label(label: &str, width: f64) -> Vec<String> {
    if text_width(label, FONT_SIZE) <= width {
        return vec![label.to_string()];
    }
    label
        .match_indices(' ')
        .map(|(i, _)| (label[..i].to_string(), label[i + 1..].to_string()))
        .min_by_key(|(a, b)| a.chars().count().max(b.chars().count()))
        .map_or_else(|| vec![label.to_string()], |(a, b)| vec![a, b])
}

/// A bar chart of categories (groups) along x, each with its bars side by side, on a value
/// axis with gridlines; bars start at 0 (or at the axis's bottom, if it is above 0).
pub fn grouped_bars(spec: &BarSpec) -> String {
    let mut out = String::new();
    svg_open(&mut out, spec.width, spec.height, &spec.title);
    let y_labels: Vec<String> = spec.y.values.iter().map(|&v| spec.y.label(v)).collect();
    let y_label_w = y_labels
        .iter()
        .map(|l| text_width(l, TICK_FONT))
        .fold(0.0, f64::max);
    let left = 8.0 + 14.0 + 6.0 + y_label_w + 6.0;
    let right = 12.0;
    let (_, rows) = legend_layout(&spec.legend, spec.width - left - right + 30.0);
    let top = 10.0 + rows as f64 * LEGEND_ROW + if rows > 0 { 6.0 } else { 0.0 };
    let frame = Frame {
        left,
        top,
        width: spec.width - left - right,
        height: spec.height - top - 46.0,
        // x is categorical: a unit axis the groups divide
        x: Ticks::new(0.0, 1.0, 1),
        y: spec.y.clone(),
    };
    draw_legend(&mut out, &spec.legend, left - 30.0, 6.0, frame.width + 30.0);
    y_grid(&mut out, &frame, &y_labels);
    let base = frame.py(spec.y.lo.max(0.0).min(spec.y.hi));
    let n = spec.groups.len().max(1) as f64;
    let group_w = frame.width / n;
    for (gi, g) in spec.groups.iter().enumerate() {
        let gx = frame.left + gi as f64 * group_w;
        let slots = g.bars.len().max(1) as f64;
        let bar_w = ((group_w * 0.8) / slots).min(28.0);
        let x0 = gx + (group_w - bar_w * slots) / 2.0;
        for (bi, b) in g.bars.iter().enumerate() {
            let Some(v) = b.value else { continue };
            let x = x0 + bi as f64 * bar_w;
            let py = frame.py(v.clamp(spec.y.lo, spec.y.hi));
            let (y, h) = if py < base {
                (py, base - py)
            } else {
                (base, py - base)
            };
            let col = esc(&b.colour);
            let (fill, opacity) = if b.hollow {
                (col.clone(), "0.22")
            } else {
                (col.clone(), "1")
            };
            let _ = write!(
                out,
                r#"<rect x="{}" y="{}" width="{}" height="{}" fill="{fill}" fill-opacity="{opacity}" stroke="{col}" stroke-width="1.2"><title>{}</title></rect>"#,
                c(x + 1.0),
                c(y),
                c(bar_w - 2.0),
                c(h.max(0.5)),
                esc(&b.title)
            );
            if let Some((lo, hi)) = b.whisker {
                let (ylo, yhi) = (
                    frame.py(lo.clamp(spec.y.lo, spec.y.hi)),
                    frame.py(hi.clamp(spec.y.lo, spec.y.hi)),
                );
                let xm = x + bar_w / 2.0;
                let _ = write!(
                    out,
                    r##"<path d="M{xm} {ylo}V{yhi}M{} {ylo}H{}M{} {yhi}H{}" stroke="#222" stroke-width="1.2" fill="none"/>"##,
                    c(xm - 3.0),
                    c(xm + 3.0),
                    c(xm - 3.0),
                    c(xm + 3.0),
                    xm = c(xm),
                    ylo = c(ylo),
                    yhi = c(yhi),
                );
            }
        }
        for (li, line) in wrap_label(&g.label, group_w - 4.0).iter().enumerate() {
            let _ = write!(
                out,
                r##"<text x="{}" y="{}" text-anchor="middle" fill="#222">{}</text>"##,
                c(gx + group_w / 2.0),
                c(frame.bottom() + 16.0 + 13.0 * li as f64),
                esc(line)
            );
        }
    }
    let _ = write!(
        out,
        r##"<path d="M{l} {t}V{b}M{l} {base}H{r}" fill="none" stroke="#555" stroke-width="1"/>"##,
        l = c(frame.left),
        t = c(frame.top),
        b = c(frame.bottom()),
        base = c(base),
        r = c(frame.right())
    );
    for (v, col, label) in &spec.references {
        reference_line(&mut out, &frame, *v, col, label);
    }
    let (yx, yy) = (14.0, frame.top + frame.height / 2.0);
    let _ = write!(
        out,
        r##"<text transform="translate({},{}) rotate(-90)" text-anchor="middle" fill="#222">{}</text>"##,
        c(yx),
        c(yy),
        esc(&spec.y_label)
    );
    svg_close(&mut out);
    out
}

/// Heatmap colour of a relative change: white at 0, ColorBrewer RdBu blue for negative (faster)
/// and red for positive (slower), full intensity at `|change| >= saturate`. Returns the fill
/// and whether text on it should be white.
pub fn diverging(change: f64, saturate: f64) -> (String, bool) {
    const BLUE: [[u8; 3]; 5] = [
        [0xf7, 0xf7, 0xf7],
        [0xd1, 0xe5, 0xf0],
        [0x92, 0xc5, 0xde],
        [0x43, 0x93, 0xc3],
        [0x21, 0x66, 0xac],
    ];
    const RED: [[u8; 3]; 5] = [
        [0xf7, 0xf7, 0xf7],
        [0xfd, 0xdb, 0xc7],
        [0xf4, 0xa5, 0x82],
        [0xd6, 0x60, 0x4d],
        [0xb2, 0x18, 0x2b],
    ];
    let stops = if change < 0.0 { &BLUE } else { &RED };
    let t = if change.is_finite() {
        (change.abs() / saturate).min(1.0)
    } else {
        0.0
    };
    let pos = t * (stops.len() - 1) as f64;
    let i = (pos.floor() as usize).min(stops.len() - 2);
    let f = pos - i as f64;
    let mix = |k: usize| {
        let (a, b) = (f64::from(stops[i][k]), f64::from(stops[i + 1][k]));
        (a + (b - a) * f).round() as u8
    };
    (
        format!("#{:02x}{:02x}{:02x}", mix(0), mix(1), mix(2)),
        t > 0.62,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_step_by_1_2_5_and_cover_the_data() {
        let t = Ticks::new(0.0, 812.0, 5);
        assert_eq!(t.step, 200.0);
        assert_eq!(t.values, vec![0.0, 200.0, 400.0, 600.0, 800.0, 1000.0]);
        let t = Ticks::new(0.0, 1.0, 5);
        assert_eq!(t.step, 0.2);
        assert_eq!(t.label(t.values[3]), "0.6");
        assert_eq!(t.lo, 0.0);
        assert!((t.hi - 1.0).abs() < 1e-12);
        let t = Ticks::new(3.2, 4.9, 4);
        assert_eq!(t.step, 0.5);
        assert!(t.lo <= 3.2 && t.hi >= 4.9);
        assert_eq!(t.label(4000.0), "4,000.0");
        // Degenerate ranges still give a usable axis.
        let t = Ticks::new(5.0, 5.0, 5);
        assert!(t.hi > t.lo && t.values.len() >= 2);
        for target in 1..10 {
            let t = Ticks::new(0.0, 4_731.0, target);
            assert!(t.values.len() - 1 <= 2 * target, "{target}: {:?}", t.values);
            let mant = t.step / 10f64.powf(t.step.log10().floor());
            assert!([1.0, 2.0, 5.0].iter().any(|m| (mant - m).abs() < 1e-9));
        }
    }

    #[test]
    fn diverging_is_blue_for_faster_red_for_slower_and_saturates() {
        let hex = |s: &str| {
            let p = |i| u8::from_str_radix(&s[i..i + 2], 16).unwrap();
            (p(1), p(3), p(5))
        };
        let (blue, _) = diverging(-0.3, 0.5);
        let (r, _, b) = hex(&blue);
        assert!(b > r);
        let (red, _) = diverging(0.3, 0.5);
        let (r, _, b) = hex(&red);
        assert!(r > b);
        assert_eq!(diverging(0.5, 0.5), diverging(2.0, 0.5));
        assert_eq!(diverging(0.0, 0.5).0, "#f7f7f7");
        assert!(diverging(-0.5, 0.5).1, "white text on full blue");
    }

    #[test]
    fn grouped_bars_stand_on_zero_with_heights_in_proportion() {
        let bar = |v: f64| Bar {
            value: Some(v),
            colour: "#0072B2".into(),
            hollow: false,
            whisker: Some((v - 1.0, v + 1.0)),
            title: format!("v={v}"),
        };
        let spec = BarSpec {
            width: 400.0,
            height: 300.0,
            title: "t".into(),
            y_label: "Mbit/s".into(),
            y: Ticks::new(0.0, 40.0, 4),
            groups: vec![
                BarGroup {
                    label: "a".into(),
                    bars: vec![bar(10.0), bar(30.0)],
                },
                BarGroup {
                    label: "b <&>".into(),
                    bars: vec![Bar {
                        value: None,
                        ..bar(0.0)
                    }],
                },
            ],
            legend: Vec::new(),
            references: vec![(38.0, "#888888".into(), "link".into())],
        };
        let svg = grouped_bars(&spec);
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>"));
        assert!(svg.contains("b &lt;&amp;&gt;"), "labels are escaped");
        let heights: Vec<f64> = svg
            .split("<rect x=")
            .skip(1)
            .filter_map(|r| {
                let h = r.split("height=\"").nth(1)?.split('"').next()?;
                h.parse().ok()
            })
            .collect();
        // the 100% background rect has no numeric height; two bars, the second three times
        // the first (to the 0.1 px of printed coordinates)
        assert_eq!(heights.len(), 2, "{svg}");
        assert!((heights[1] / heights[0] - 3.0).abs() < 0.02, "{heights:?}");
        assert_eq!(
            svg.matches("<title>").count(),
            2,
            "no bar for a missing value"
        );
        assert!(svg.contains("stroke-dasharray") && svg.contains(">link<"));
        // a label too wide for its group breaks at the space nearest its middle
        assert_eq!(wrap_label("inbound loss 1%", 60.0), ["inbound", "loss 1%"]);
        assert_eq!(wrap_label("inbound loss 1%", 200.0), ["inbound loss 1%"]);
        assert_eq!(wrap_label("unbreakable", 10.0), ["unbreakable"]);
        assert_eq!(grouped_bars(&spec), svg, "deterministic");
    }

    #[test]
    fn cdfs_leave_out_series_without_values() {
        let svg = cdf(
            "t",
            400.0,
            200.0,
            "ms",
            &[
                Series {
                    label: "x".into(),
                    colour: "#000000",
                    values: vec![1.0, 2.0],
                },
                Series {
                    label: "empty".into(),
                    colour: "#ffffff",
                    values: vec![],
                },
            ],
        );
        assert!(svg.contains("x (n = 2)") && !svg.contains("empty"));
    }

    #[test]
    fn coordinates_print_compactly() {
        assert_eq!(c(-0.01), "0");
        assert_eq!(c(12.0), "12");
        assert_eq!(c(12.34), "12.3");
    }
}
