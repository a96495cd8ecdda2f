//! The sections of the page, in order. Each is a function from the campaign's analysis to an
//! HTML fragment (or nothing, when it has nothing to say); `render` wraps it in a titled
//! `<section>` and lists it in the table of contents.

use crate::analysis::Analysis;
use crate::html::esc;
use crate::model::{Campaign, Workload};
use crate::units;

pub mod bulk;
pub mod cells;
pub mod clients;
pub mod failures;
pub mod findings;
pub mod header;
pub mod heatmap;
pub mod own_base;
pub mod pages;
pub mod repeat;
pub mod segments;
pub mod telemetry;
pub mod why;

pub struct Section {
    /// Fragment identifier, unique on the page.
    pub id: &'static str,
    pub title: &'static str,
    pub render: fn(&Analysis) -> Option<String>,
}

/// Sections after the header, in page order.
pub const ALL: &[Section] = &[
    Section {
        id: "findings",
        title: "Findings",
        render: findings::render,
    },
    Section {
        id: "repeat",
        title: "Repeated requests",
        render: repeat::render,
    },
    Section {
        id: "segments",
        title: "Segments: throughput under impairment",
        render: segments::render,
    },
    Section {
        id: "pages",
        title: "Web pages: load time, visual progress and stream scheduling",
        render: pages::render,
    },
    Section {
        id: "telemetry",
        title: "Telemetry: unit latency and head-of-line blocking",
        render: telemetry::render,
    },
    Section {
        id: "bulk",
        title: "Bulk throughput and packet size",
        render: bulk::render,
    },
    Section {
        id: "heatmaps",
        title: "Median TTLB change",
        render: heatmap::render,
    },
    Section {
        id: "why",
        title: "Why: where the time went",
        render: why::render,
    },
    Section {
        id: "own-base",
        title: "Each arm against its own base",
        render: own_base::render,
    },
    Section {
        id: "clients",
        title: "Clients against servers",
        render: clients::render,
    },
    Section {
        id: "cells",
        title: "Conditions in detail",
        render: cells::render,
    },
    Section {
        id: "failures",
        title: "Failed trials",
        render: failures::render,
    },
];

/// The cells of the trials that ran while their host was busy ([`Analysis::busy`]), each as
/// "arm / condition / size" (escaped) with its count, most first.
pub fn busy_cells(an: &Analysis) -> Vec<(String, usize)> {
    let c = an.campaign;
    an.busy
        .cells
        .iter()
        .map(|((arm, cond, size), k)| {
            let cell = if c.workload.is_requests() {
                format!("{arm} / {cond} / {}", size_label(c, *size))
            } else {
                format!("{arm} / {cond}")
            };
            (esc(&cell), *k)
        })
        .collect()
}

/// What a trial's size means in the TTLB sections: the object's size, or for a segments
/// workload the sequence it stands for ("15 × 3.6–5 MB").
pub fn size_label(c: &Campaign, bytes: u64) -> String {
    match c.workload {
        Workload::Segments {
            count,
            min_bytes,
            max_bytes,
            ..
        } if min_bytes != max_bytes => format!(
            "{count} × {}–{}",
            units::size(min_bytes),
            units::size(max_bytes)
        ),
        Workload::Segments { count, .. } => format!("{count} × {}", units::size(bytes)),
        Workload::Repeat { requests } => format!("{requests} × {}", units::size(bytes)),
        // every unit's bytes: the TTLB sections do not render for it
        Workload::SingleObject { .. } | Workload::Telemetry { .. } | Workload::Requests { .. } => {
            units::size(bytes)
        }
        // the trial's size is its number of parallel connections
        Workload::Bulk { .. } => match bytes {
            1 => "1 connection".to_string(),
            n => format!("{n} connections"),
        },
        Workload::Pages { ref pages } => pages::label(pages, bytes),
    }
}

/// A paragraph saying what TTLB measures when a trial is more than one request (empty for
/// single objects), for the sections built on it.
pub fn ttlb_note(c: &Campaign) -> String {
    let what = match &c.workload {
        Workload::SingleObject { .. } | Workload::Telemetry { .. } | Workload::Bulk { .. } => {
            return String::new();
        }
        // the header's line says what it is
        Workload::Requests { .. } => return String::new(),
        Workload::Repeat { requests } => {
            format!("each trial makes {requests} requests, each on a new connection")
        }
        Workload::Segments { count, .. } => {
            format!("each trial fetches {count} segments one after another on one connection")
        }
        Workload::Pages { .. } => {
            return "<p class=\"caption\"><strong>TTLB here is the page load time:</strong> from \
                    the first connection attempt to the last byte of the page's last resource; \
                    TTFB is the document's first byte.</p>\n"
                .to_string();
        }
    };
    format!(
        "<p class=\"caption\"><strong>TTLB here is the whole sequence:</strong> {}, and its \
         TTLB runs from the first request's start to the last byte of the last response; its \
         TTFB and handshake are the first request's.</p>\n",
        esc(&what)
    )
}

/// The page's style sheet.
pub const CSS: &str = r#"
:root { color-scheme: light; }
body { margin: 0; background: #fff; color: #1d1d1f;
  font: 14px/1.45 system-ui, -apple-system, 'Segoe UI', Roboto, 'Helvetica Neue', Arial, sans-serif; }
main { max-width: 1340px; margin: 0 auto; padding: 16px 24px 48px; }
h1 { font-size: 26px; margin: 8px 0 4px; }
h2 { font-size: 20px; margin: 32px 0 8px; padding-bottom: 4px; border-bottom: 1px solid #ddd; }
h3 { font-size: 16px; margin: 12px 0 6px; }
summary h3 { display: inline; margin: 0; }
h4 { font-size: 15px; margin: 20px 0 6px; }
p.desc { max-width: 80ch; margin: 4px 0 12px; }
.muted { color: #6b6b6b; }
.meta { display: grid; grid-template-columns: max-content auto; gap: 2px 16px; margin: 8px 0; }
.meta dt { color: #555; } .meta dd { margin: 0; }
table { border-collapse: collapse; margin: 6px 0 12px; font-size: 13px; }
th, td { padding: 3px 8px; border-bottom: 1px solid #e4e4e4; text-align: left; vertical-align: top; }
th { background: #f5f5f7; font-weight: 600; white-space: nowrap; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
.swatch { display: inline-block; width: 10px; height: 10px; border-radius: 2px; margin-right: 6px;
  vertical-align: baseline; }
.flag { color: #a33; }
nav.toc { margin: 16px 0; padding: 8px 12px; background: #f7f7f9; border-radius: 6px; }
nav.toc ol { display: inline; padding: 0; margin: 0 0 0 8px; }
nav.toc li { display: inline; margin-right: 16px; }
ul.findings { padding-left: 20px; max-width: 110ch; }
ul.findings li { margin: 4px 0; }
figure { margin: 8px 16px 16px 0; }
figcaption { font-size: 12.5px; color: #444; max-width: 720px; margin-top: 2px; }
.heatmaps { display: flex; flex-wrap: wrap; align-items: flex-start; gap: 0 24px; }
p.caption { font-size: 13px; color: #444; max-width: 110ch; }
.charts { display: flex; flex-wrap: wrap; align-items: flex-start; }
.charts figure { margin: 0 10px 8px 0; }
.charts figcaption { max-width: 390px; }
details.condition { border: 1px solid #ddd; border-radius: 6px; margin: 10px 0; padding: 6px 12px; }
details.condition > summary { cursor: pointer; padding: 4px 0; }
details.provenance summary { cursor: pointer; color: #333; }
svg { display: block; max-width: 100%; height: auto; }
svg a:hover rect { stroke: #000; stroke-width: 1.5; }
/* The system's dark scheme: the page goes dark; the charts stay light cards (their colours
   are chosen for a white ground). */
@media (prefers-color-scheme: dark) {
  :root { color-scheme: dark; }
  body { background: #17181a; color: #e6e6e6; }
  h2 { border-bottom-color: #3a3b3e; }
  .muted, figcaption, p.caption, .meta dt, details.provenance summary { color: #a9abb0; }
  th { background: #24262a; }
  th, td { border-bottom-color: #34363a; }
  nav.toc { background: #222428; }
  details.condition { border-color: #3a3b3e; }
  .flag { color: #ff8a80; }
  a { color: #8ab4f8; } a:visited { color: #c58af9; }
  svg { border-radius: 4px; background: #fff; }
}
/* Printing shows every section, collapsed or not (the script opens them before printing). */
@media print {
  :root { color-scheme: light; }
  body { background: #fff; color: #000; font-size: 11pt; }
  main { max-width: none; padding: 0; }
  nav.toc { display: none; }
  details::details-content { content-visibility: visible; display: contents; }
  details > summary { list-style: none; }
  section, figure, table, details.condition { break-inside: avoid-page; }
  h2, h3, h4 { break-after: avoid-page; }
  a { color: inherit; text-decoration: none; }
}
"#;

/// The page's one script. Before printing it opens every collapsed section (and closes them
/// again after), for browsers whose print style cannot open them. It makes the charts drawn
/// with `chart::zoomable` interactive: pointing at the plot reads every line's value at that
/// x (the last point at or before it) in a box that follows the pointer, dragging across the
/// plot zooms into that x range (the y range following the data in view; both axes' ticks and
/// labels redrawn with the same 1-2-5 rule and number format as the static chart), and a
/// double click restores the static chart. The page is complete without it.
pub const SCRIPT: &str = r#"
(function () {
  var opened = [];
  addEventListener('beforeprint', function () {
    document.querySelectorAll('details:not([open])').forEach(function (d) {
      d.open = true;
      opened.push(d);
    });
  });
  addEventListener('afterprint', function () {
    opened.forEach(function (d) { d.open = false; });
    opened = [];
  });

  var NS = 'http://www.w3.org/2000/svg';
  var clips = 0;
  function el(name, attrs, parent) {
    var e = document.createElementNS(NS, name);
    for (var k in attrs) e.setAttribute(k, attrs[k]);
    if (parent) parent.appendChild(e);
    return e;
  }
  function r1(v) { return Math.round(v * 10) / 10; }
  // chart::Ticks: steps of 1, 2 or 5 times a power of ten covering [lo, hi]
  function ticks(lo, hi, target) {
    if (!(hi > lo)) hi = lo + 1;
    var raw = (hi - lo) / target;
    var mag = Math.pow(10, Math.floor(Math.log10(raw)));
    var n = raw / mag;
    var step = mag * (n <= 1 + 1e-9 ? 1 : n <= 2 + 1e-9 ? 2 : n <= 5 + 1e-9 ? 5 : 10);
    var first = Math.floor(lo / step + 1e-9);
    var last = Math.max(Math.ceil(hi / step - 1e-9), first + 1);
    var values = [];
    for (var k = first; k <= last; k++) values.push(k * step);
    return { lo: values[0], hi: values[values.length - 1], step: step, values: values };
  }
  function decimals(step) { return step >= 1 ? 0 : Math.ceil(-Math.log10(step)); }
  // units::number: fixed decimals, thousands grouped, a real minus sign
  function number(v, d) {
    var parts = Math.abs(v).toFixed(d).split('.');
    parts[0] = parts[0].replace(/\B(?=(\d{3})+(?!\d))/g, ',');
    var s = parts.join('.');
    return (v < 0 && /[1-9]/.test(s) ? '−' : '') + s;
  }
  function pairs(flat) {
    var out = [];
    for (var i = 0; i + 1 < flat.length; i += 2) out.push([flat[i], flat[i + 1]]);
    return out;
  }
  // index of the last point at or before x, or -1
  function at(points, x) {
    var lo = 0, hi = points.length;
    while (lo < hi) {
      var mid = (lo + hi) >> 1;
      if (points[mid][0] <= x) lo = mid + 1; else hi = mid;
    }
    return lo - 1;
  }

  function zoomable(g) {
    var d = JSON.parse(g.getAttribute('data-xy'));
    var svg = g.ownerSVGElement;
    var f = { l: d.f[0], t: d.f[1], w: d.f[2], h: d.f[3] };
    var lines = d.l.map(function (l) {
      return { n: l.n, c: l.c, p: pairs(l.p), r: pairs(l.r) };
    });
    var axes = {};
    var saved = { plot: g.innerHTML };
    ['xgrid', 'xtick', 'ygrid', 'ytick'].forEach(function (c) {
      axes[c] = svg.querySelector('g.' + c);
      saved[c] = axes[c].innerHTML;
    });
    var clip = el('clipPath', { id: 'zoom-clip-' + (++clips) }, svg);
    el('rect', { x: f.l, y: f.t, width: f.w, height: f.h }, clip);
    g.setAttribute('clip-path', 'url(#' + clip.id + ')');
    var full = { x0: d.x[0], x1: d.x[1], y0: d.y[0], y1: d.y[1], ydec: null };
    var view = full;
    var cross = el('line', { y1: f.t, y2: f.t + f.h, stroke: '#555', 'stroke-dasharray': '3 3',
      visibility: 'hidden', 'pointer-events': 'none' }, svg);
    var sel = el('rect', { class: 'zoom-selection', y: f.t, height: f.h, fill: '#0072B2',
      'fill-opacity': '0.12', visibility: 'hidden', 'pointer-events': 'none' }, svg);
    var tip = el('g', { class: 'zoom-tip', visibility: 'hidden', 'pointer-events': 'none',
      'font-size': '11' }, svg);
    var area = el('rect', { class: 'zoom-area', x: f.l, y: f.t, width: f.w, height: f.h,
      fill: 'transparent', style: 'cursor: crosshair; touch-action: none' }, svg);
    var px = function (x) { return f.l + (x - view.x0) / (view.x1 - view.x0) * f.w; };
    var py = function (y) { return f.t + f.h - (y - view.y0) / (view.y1 - view.y0) * f.h; };
    var xOf = function (p) { return view.x0 + (p - f.l) / f.w * (view.x1 - view.x0); };
    function local(e) {
      var pt = svg.createSVGPoint();
      pt.x = e.clientX;
      pt.y = e.clientY;
      return pt.matrixTransform(svg.getScreenCTM().inverse());
    }
    function yDecimals() {
      return view.ydec !== null ? view.ydec + 1 : decimals((full.y1 - full.y0) / 5) + 1;
    }
    function hover(p) {
      var x = xOf(p.x);
      var rows = [[number(x, 1) + ' ' + d.xu, '#222']];
      lines.forEach(function (l) {
        var i = at(l.p, x);
        rows.push([l.n + ': ' + (i < 0 ? 'nothing yet' : number(l.p[i][1], yDecimals()) + ' ' + d.yu), l.c]);
        l.r.forEach(function (r) {
          if (Math.abs(px(r[0]) - p.x) <= 4 && Math.abs(py(r[1]) - p.y) <= 6)
            rows.push([l.n + ': ' + d.rl + ' at ' + number(r[0], 1) + ' ' + d.xu, l.c]);
        });
      });
      cross.setAttribute('x1', r1(p.x));
      cross.setAttribute('x2', r1(p.x));
      cross.setAttribute('visibility', 'visible');
      while (tip.firstChild) tip.removeChild(tip.firstChild);
      var box = el('rect', { fill: '#ffffff', 'fill-opacity': '0.95', stroke: '#999', rx: '3' }, tip);
      rows.forEach(function (row, i) {
        var t = el('text', { x: 6, y: 15 + i * 15, fill: row[1] }, tip);
        t.textContent = row[0];
      });
      var b = tip.getBBox();
      box.setAttribute('width', r1(b.width + 12));
      box.setAttribute('height', r1(b.height + 10));
      var tx = p.x + 12;
      if (tx + b.width + 12 > f.l + f.w) tx = Math.max(f.l, p.x - 12 - b.width - 12);
      var ty = Math.max(f.t, Math.min(p.y - 10, f.t + f.h - b.height - 10));
      tip.setAttribute('transform', 'translate(' + r1(tx) + ',' + r1(ty) + ')');
      tip.setAttribute('visibility', 'visible');
    }
    function unhover() {
      cross.setAttribute('visibility', 'hidden');
      tip.setAttribute('visibility', 'hidden');
    }
    function redraw(xt, yt) {
      ['xgrid', 'xtick', 'ygrid', 'ytick'].forEach(function (c) {
        while (axes[c].firstChild) axes[c].removeChild(axes[c].firstChild);
      });
      xt.values.forEach(function (v) {
        var x = r1(px(v));
        el('line', { x1: x, y1: f.t, x2: x, y2: f.t + f.h }, axes.xgrid);
        el('text', { x: x, y: r1(f.t + f.h + 14) }, axes.xtick).textContent = number(v, decimals(xt.step));
      });
      yt.values.forEach(function (v) {
        var y = r1(py(v));
        el('line', { x1: f.l, y1: y, x2: f.l + f.w, y2: y }, axes.ygrid);
        el('text', { x: r1(f.l - 5), y: y, 'dominant-baseline': 'central' }, axes.ytick)
          .textContent = number(v, decimals(yt.step));
      });
      while (g.firstChild) g.removeChild(g.firstChild);
      lines.forEach(function (l) {
        var i0 = Math.max(0, at(l.p, view.x0)), i1 = Math.min(l.p.length - 1, at(l.p, view.x1) + 1);
        var dd = '';
        for (var i = i0; i <= i1; i++) dd += (i === i0 ? 'M' : 'L') + r1(px(l.p[i][0])) + ' ' + r1(py(l.p[i][1]));
        if (dd) el('path', { d: dd, fill: 'none', stroke: l.c, 'stroke-width': '2', 'stroke-linejoin': 'round' }, g);
      });
      lines.forEach(function (l) {
        l.r.forEach(function (r) {
          if (r[0] >= view.x0 && r[0] <= view.x1)
            el('circle', { cx: r1(px(r[0])), cy: r1(py(r[1])), r: '3', fill: '#ffffff', stroke: l.c,
              'stroke-width': '1.5' }, g);
        });
      });
    }
    function zoom(a, b) {
      var xt = ticks(a, b, 5);
      var lo = Infinity, hi = -Infinity;
      lines.forEach(function (l) {
        var i0 = Math.max(0, at(l.p, xt.lo)), i1 = at(l.p, xt.hi);
        for (var i = i0; i <= i1; i++) {
          lo = Math.min(lo, l.p[i][1]);
          hi = Math.max(hi, l.p[i][1]);
        }
      });
      if (!(hi >= lo)) { lo = full.y0; hi = full.y1; }
      var yt = ticks(lo, hi, 5);
      view = { x0: xt.lo, x1: xt.hi, y0: yt.lo, y1: yt.hi, ydec: decimals(yt.step) };
      redraw(xt, yt);
    }
    function reset() {
      view = full;
      g.innerHTML = saved.plot;
      ['xgrid', 'xtick', 'ygrid', 'ytick'].forEach(function (c) { axes[c].innerHTML = saved[c]; });
    }
    var start = null;
    area.addEventListener('pointerdown', function (e) {
      if (e.button !== 0) return;
      start = local(e).x;
      area.setPointerCapture(e.pointerId);
    });
    area.addEventListener('pointermove', function (e) {
      var p = local(e);
      p.x = Math.max(f.l, Math.min(f.l + f.w, p.x));
      if (start !== null) {
        sel.setAttribute('x', r1(Math.min(start, p.x)));
        sel.setAttribute('width', r1(Math.abs(p.x - start)));
        sel.setAttribute('visibility', 'visible');
      }
      hover(p);
    });
    area.addEventListener('pointerup', function (e) {
      if (start === null) return;
      var p = Math.max(f.l, Math.min(f.l + f.w, local(e).x));
      sel.setAttribute('visibility', 'hidden');
      if (Math.abs(p - start) >= 4) zoom(xOf(Math.min(start, p)), xOf(Math.max(start, p)));
      start = null;
      hover({ x: p, y: local(e).y });
    });
    area.addEventListener('pointerleave', function () { if (start === null) unhover(); });
    area.addEventListener('dblclick', function (e) {
      reset();
      hover(local(e));
    });
  }
  document.querySelectorAll('svg g.zoom[data-xy]').forEach(zoomable);
})();
"#;
