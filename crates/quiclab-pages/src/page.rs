//! Web pages as data, and a browser-like page load as a state machine in virtual time.
//!
//! Contract:
//! - A [`Page`] is an HTML document and the resources it pulls in. Each [`Resource`] has a type,
//!   a size in bytes, the resource whose arrival discovers it (the document for what the HTML
//!   names, a stylesheet for its fonts and background images, a script for what it loads), whether
//!   it blocks the first render, its weight in the visible part of the page (above the fold) and
//!   an RFC 9218 priority (urgency 0-7, incremental or not). The format users write is TOML
//!   ([`Page::from_toml`], documented in `docs/pages.md`); [`builtin`] has three pages shaped like
//!   the small, medium and large pages of Yu & Benson (18, 59 and 99 resources).
//! - [`Loader`] decides what a browser's loader requests and when: a resource is requested once
//!   the resource that names it has fully arrived; with a connection limit (HTTP/1.1: 6 per
//!   origin) waiting requests go out most urgent first, in discovery order within an urgency.
//!   It never reads a clock: every call takes the time (`now_us`).
//! - [`PageMetrics`] derives the page load time, a visual-progress index and the time to the main
//!   image from the per-resource times; it is pure arithmetic.

use std::collections::VecDeque;
use std::fmt;

pub use quiclab_endpoint::priority::Priority;
use quiclab_model::input;
use serde::{Deserialize, Serialize};

/// What a resource is; decides its default priority and whether it blocks rendering.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    Html,
    Css,
    Js,
    Font,
    Image,
    Other,
}

impl Kind {
    pub const ALL: [Kind; 6] = [
        Kind::Html,
        Kind::Css,
        Kind::Js,
        Kind::Font,
        Kind::Image,
        Kind::Other,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Kind::Html => "html",
            Kind::Css => "css",
            Kind::Js => "js",
            Kind::Font => "font",
            Kind::Image => "image",
            Kind::Other => "other",
        }
    }

    fn parse(s: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.name() == s)
    }
}

/// A browser's choice for a resource of `kind` (as Chrome and Firefox map request
/// destinations to RFC 9218 urgencies): the document and stylesheets first, then
/// render-blocking scripts and fonts, other scripts, then images (incrementally).
pub fn browser_priority(kind: Kind, critical: bool) -> Priority {
    let (urgency, incremental) = match kind {
        Kind::Html => (0, true),
        Kind::Css => (0, false),
        Kind::Js if critical => (1, false),
        Kind::Js => (3, false),
        Kind::Font => (1, false),
        Kind::Image => (5, true),
        Kind::Other => (4, false),
    };
    Priority {
        urgency,
        incremental,
    }
}

/// One resource of a page.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Resource {
    pub id: String,
    pub kind: Kind,
    pub bytes: u64,
    /// The resource whose arrival discovers this one (an index into [`Page::resources`], always
    /// an earlier one); `None` for the document only.
    pub parent: Option<usize>,
    /// Blocks the first render (the document, stylesheets, synchronous scripts).
    pub critical: bool,
    /// Weight of this resource in the visible part of the page (0: not visible at first).
    pub above_fold: f64,
    /// The page's main (largest visible) image.
    pub main_image: bool,
    pub priority: Priority,
}

/// A page: the document (resource 0) and everything it pulls in, parents before children.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Page {
    pub name: String,
    pub resources: Vec<Resource>,
}

/// A manifest that cannot be used: where, what, and what is allowed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("page manifest {origin}: {message}")]
pub struct ManifestError {
    /// The file (or "built-in NAME").
    pub origin: String,
    pub message: String,
}

/// The TOML form of a manifest (see `docs/pages.md`).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPage {
    name: String,
    #[serde(rename = "resource")]
    resources: Vec<RawResource>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct RawResource {
    id: String,
    #[serde(rename = "type")]
    kind: String,
    bytes: u64,
    parent: Option<String>,
    critical: Option<bool>,
    above_fold: Option<f64>,
    main_image: Option<bool>,
    urgency: Option<u8>,
    incremental: Option<bool>,
}

/// The largest resource a manifest may name (what `/bytes/N` serves is far larger; a page
/// resource over 100 MB is a mistake).
pub const MAX_RESOURCE_BYTES: u64 = 100_000_000;

/// The most resources a page may have.
pub const MAX_RESOURCES: usize = 10_000;

impl Page {
    /// Reads a TOML manifest; `origin` names it in errors (a file name).
    pub fn from_toml(text: &str, origin: &str) -> Result<Page, ManifestError> {
        let err = |message: String| ManifestError {
            origin: origin.to_string(),
            message,
        };
        let raw: RawPage = toml::from_str(text).map_err(|e| {
            let at = e
                .span()
                .map(|s| {
                    let before = &text[..s.start.min(text.len())];
                    let line = before.matches('\n').count() + 1;
                    let col = before.len() - before.rfind('\n').map_or(0, |i| i + 1) + 1;
                    format!("{line}:{col}: ")
                })
                .unwrap_or_default();
            err(format!("{at}{}", e.message()))
        })?;
        let mut resources: Vec<Resource> = Vec::with_capacity(raw.resources.len());
        for (n, r) in raw.resources.into_iter().enumerate() {
            let what = format!("resource {} ({:?})", n + 1, r.id);
            let kind = Kind::parse(&r.kind).ok_or_else(|| {
                err(format!(
                    "{what}: type = {:?} is not allowed (allowed: html, css, js, font, image, other)",
                    r.kind
                ))
            })?;
            if resources.iter().any(|o| o.id == r.id) {
                return Err(err(format!("{what}: id {:?} is used twice", r.id)));
            }
            let parent = match &r.parent {
                None => None,
                Some(p) => Some(resources.iter().position(|o| &o.id == p).ok_or_else(|| {
                    err(format!(
                        "{what}: parent = {p:?} is not an earlier resource (a resource is \
                         discovered by one listed before it)"
                    ))
                })?),
            };
            if let Some(u) = r.urgency
                && u > 7
            {
                return Err(err(format!(
                    "{what}: urgency = {u} is not allowed (allowed: 0 to 7, 0 most urgent)"
                )));
            }
            if let Some(w) = r.above_fold
                && !(w.is_finite() && w >= 0.0)
            {
                return Err(err(format!(
                    "{what}: above-fold = {w} is not allowed (allowed: a weight >= 0)"
                )));
            }
            let critical = r.critical.unwrap_or(matches!(kind, Kind::Html | Kind::Css));
            let default = browser_priority(kind, critical);
            resources.push(Resource {
                id: r.id,
                kind,
                bytes: r.bytes,
                parent,
                critical,
                above_fold: r.above_fold.unwrap_or(0.0),
                main_image: r.main_image.unwrap_or(false),
                priority: Priority {
                    urgency: r.urgency.unwrap_or(default.urgency),
                    incremental: r.incremental.unwrap_or(default.incremental),
                },
            });
        }
        let page = Page {
            name: raw.name,
            resources,
        };
        page.validate().map_err(err)?;
        Ok(page)
    }

    /// The rules every page keeps, whatever made it.
    pub(crate) fn validate(&self) -> Result<(), String> {
        let Some(doc) = self.resources.first() else {
            return Err("no resource: a page has at least its document ([[resource]])".into());
        };
        if doc.parent.is_some() {
            return Err(format!(
                "resource 1 ({:?}) is the document and has no parent",
                doc.id
            ));
        }
        if self.resources.len() > MAX_RESOURCES {
            return Err(format!(
                "{} resources; at most {MAX_RESOURCES} are allowed",
                self.resources.len()
            ));
        }
        for (i, r) in self.resources.iter().enumerate().skip(1) {
            let what = format!("resource {} ({:?})", i + 1, r.id);
            match r.parent {
                None => {
                    return Err(format!(
                        "{what}: parent is missing (only the first resource, the document, has \
                         none)"
                    ));
                }
                Some(p) if p >= i => {
                    return Err(format!("{what}: its parent must be listed before it"));
                }
                _ => {}
            }
        }
        for (i, r) in self.resources.iter().enumerate() {
            if r.bytes > MAX_RESOURCE_BYTES {
                return Err(format!(
                    "resource {} ({:?}): bytes = {} is not allowed (allowed: 0 to {MAX_RESOURCE_BYTES})",
                    i + 1,
                    r.id,
                    r.bytes
                ));
            }
        }
        if self.resources.iter().filter(|r| r.main_image).count() > 1 {
            return Err("more than one resource has main-image = true".into());
        }
        Ok(())
    }

    /// The page's bytes, every resource together.
    pub fn total_bytes(&self) -> u64 {
        self.resources.iter().map(|r| r.bytes).sum()
    }

    /// Index of the main image, if the page has one.
    pub fn main_image(&self) -> Option<usize> {
        self.resources.iter().position(|r| r.main_image)
    }

    /// The manifest as TOML, in the format [`Page::from_toml`] reads (every field explicit).
    pub fn to_toml(&self) -> String {
        let mut s = format!("name = {:?}\n", self.name);
        for r in &self.resources {
            s += &format!(
                "\n[[resource]]\nid = {:?}\ntype = {:?}\nbytes = {}\n",
                r.id,
                r.kind.name(),
                r.bytes
            );
            if let Some(p) = r.parent {
                s += &format!("parent = {:?}\n", self.resources[p].id);
            }
            s += &format!("critical = {}\n", r.critical);
            if r.above_fold > 0.0 {
                s += &format!("above-fold = {}\n", r.above_fold);
            }
            if r.main_image {
                s += "main-image = true\n";
            }
            s += &format!(
                "urgency = {}\nincremental = {}\n",
                r.priority.urgency, r.priority.incremental
            );
        }
        s
    }
}

/// Names of the built-in pages.
pub const BUILTIN: [&str; 3] = ["small", "medium", "large"];

/// A built-in page: "small" (18 resources, about 0.6 MB), "medium" (59, about 1.5 MB) or "large"
/// (99, about 2.6 MB), shaped like the pages of Yu & Benson (WWW 2021): a document, stylesheets
/// (which pull in fonts and background images), render-blocking and asynchronous scripts (some
/// of which load more), a main image above the fold and many smaller images.
pub fn builtin(name: &str) -> Option<Page> {
    // (document KB, css, blocking js, async js, js loaded by js, fonts, images in HTML, images
    // from CSS, main image KB)
    let (doc, css, js, async_js, js_from_js, fonts, images, css_images, main) = match name {
        "small" => (30, 2, 2, 1, 0, 1, 10, 0, 150),
        "medium" => (60, 4, 5, 4, 3, 3, 33, 5, 250),
        "large" => (100, 6, 8, 8, 6, 4, 57, 8, 400),
        _ => return None,
    };
    let mut b = Builder::default();
    let html = b.add("index.html", Kind::Html, doc * 1000, None, true, 0.0);
    let mut sheets = Vec::new();
    for k in 0..css {
        sheets.push(b.add(
            &format!("style-{k}.css"),
            Kind::Css,
            [24_000, 12_000, 8_000][k % 3],
            Some(html),
            true,
            0.0,
        ));
    }
    let mut scripts = Vec::new();
    for k in 0..js {
        scripts.push(b.add(
            &format!("app-{k}.js"),
            Kind::Js,
            [60_000, 35_000, 20_000][k % 3],
            Some(html),
            true,
            0.0,
        ));
    }
    let main_image = b.add("hero.jpg", Kind::Image, main * 1000, Some(html), false, 4.0);
    b.page.resources[main_image].main_image = true;
    for k in 0..async_js {
        b.add(
            &format!("async-{k}.js"),
            Kind::Js,
            [30_000, 15_000][k % 2],
            Some(html),
            false,
            0.0,
        );
    }
    for k in 0..js_from_js {
        b.add(
            &format!("lazy-{k}.js"),
            Kind::Js,
            [25_000, 10_000][k % 2],
            Some(scripts[k % scripts.len()]),
            false,
            0.0,
        );
    }
    for k in 0..fonts {
        b.add(
            &format!("font-{k}.woff2"),
            Kind::Font,
            30_000,
            Some(sheets[k % sheets.len()]),
            false,
            0.0,
        );
    }
    for k in 0..css_images {
        b.add(
            &format!("bg-{k}.png"),
            Kind::Image,
            [15_000, 6_000][k % 2],
            Some(sheets[k % sheets.len()]),
            false,
            if k < 2 { 1.0 } else { 0.0 },
        );
    }
    for k in 0..images {
        // the first few are visible, the rest further down the page
        b.add(
            &format!("img-{k}.jpg"),
            Kind::Image,
            [40_000, 22_000, 12_000, 6_000][k % 4],
            Some(html),
            false,
            if k < 4 { 1.0 } else { 0.0 },
        );
    }
    b.page.name = name.to_string();
    Some(b.page)
}

#[derive(Default)]
struct Builder {
    page: Page,
}

impl Builder {
    fn add(
        &mut self,
        id: &str,
        kind: Kind,
        bytes: u64,
        parent: Option<usize>,
        critical: bool,
        above_fold: f64,
    ) -> usize {
        self.page.resources.push(Resource {
            id: id.to_string(),
            kind,
            bytes,
            parent,
            critical,
            above_fold,
            main_image: false,
            priority: browser_priority(kind, critical),
        });
        self.page.resources.len() - 1
    }
}

/// A page by name: a built-in one, a TOML manifest file, or a HAR file (`*.har`, imported by
/// [`crate::har::page_from_har`] and named after the file).
pub fn load_manifest(name_or_path: &str) -> Result<Page, ManifestError> {
    if let Some(p) = builtin(name_or_path) {
        return Ok(p);
    }
    let path = std::path::Path::new(name_or_path);
    let har = path
        .extension()
        .is_some_and(|x| x.eq_ignore_ascii_case("har"));
    let (what, max) = if har {
        ("a HAR file", input::MAX_HAR_BYTES)
    } else {
        ("a page manifest", input::MAX_TEXT_BYTES)
    };
    let text = input::read_text(path, what, max).map_err(|e| ManifestError {
        origin: name_or_path.to_string(),
        message: format!(
            "cannot read it ({e}); a page is one of {}, a TOML manifest file or a .har file",
            BUILTIN.join(", ")
        ),
    })?;
    if har {
        let name = path
            .file_stem()
            .map_or("page".into(), |s| s.to_string_lossy().into_owned());
        return crate::har::page_from_har(&text, name_or_path, &name);
    }
    Page::from_toml(&text, name_or_path)
}

/// What happened to one resource, in microseconds on the caller's clock.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ResourceTiming {
    pub discovered_us: Option<u64>,
    pub request_us: Option<u64>,
    pub first_byte_us: Option<u64>,
    pub last_byte_us: Option<u64>,
}

/// A browser-like loader for one page (see the module's contract).
pub struct Loader {
    page: Page,
    timings: Vec<ResourceTiming>,
    /// Discovered, not yet requested, in discovery order.
    waiting: VecDeque<usize>,
    in_flight: usize,
    /// Requests allowed at once (`None`: no limit, as over one multiplexed connection).
    limit: Option<usize>,
    start_us: u64,
}

impl Loader {
    /// A load that starts at `now_us` with the document discovered.
    pub fn new(page: Page, limit: Option<usize>, now_us: u64) -> Loader {
        let mut timings = vec![ResourceTiming::default(); page.resources.len()];
        timings[0].discovered_us = Some(now_us);
        Loader {
            page,
            timings,
            waiting: VecDeque::from([0]),
            in_flight: 0,
            limit: limit.map(|l| l.max(1)),
            start_us: now_us,
        }
    }

    pub fn page(&self) -> &Page {
        &self.page
    }

    pub fn start_us(&self) -> u64 {
        self.start_us
    }

    pub fn timings(&self) -> &[ResourceTiming] {
        &self.timings
    }

    /// The next resource to request now, if any may go out; the caller sends it.
    pub fn next_request(&mut self, now_us: u64) -> Option<usize> {
        if self.limit.is_some_and(|l| self.in_flight >= l) {
            return None;
        }
        let pick = if self.limit.is_some() {
            // a browser's queue for a limited pool: most urgent first, discovery order within
            let (pos, _) = self
                .waiting
                .iter()
                .enumerate()
                .min_by_key(|(k, i)| (self.page.resources[**i].priority.urgency, *k))?;
            self.waiting.remove(pos)?
        } else {
            self.waiting.pop_front()?
        };
        self.in_flight += 1;
        self.timings[pick].request_us = Some(now_us);
        Some(pick)
    }

    /// The first byte of resource `i`'s body arrived.
    pub fn first_byte(&mut self, i: usize, now_us: u64) {
        self.timings[i].first_byte_us.get_or_insert(now_us);
    }

    /// Resource `i` arrived completely: what it names is discovered.
    pub fn complete(&mut self, i: usize, now_us: u64) {
        if self.timings[i].last_byte_us.is_some() {
            return;
        }
        self.timings[i].first_byte_us.get_or_insert(now_us);
        self.timings[i].last_byte_us = Some(now_us);
        self.in_flight = self.in_flight.saturating_sub(1);
        for (k, r) in self.page.resources.iter().enumerate() {
            if r.parent == Some(i) {
                self.timings[k].discovered_us = Some(now_us);
                self.waiting.push_back(k);
            }
        }
    }

    /// Every resource has arrived.
    pub fn done(&self) -> bool {
        self.timings.iter().all(|t| t.last_byte_us.is_some())
    }
}

/// A page load's summary metrics, in milliseconds from the start of the load.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PageMetrics {
    /// Page load time: the last byte of the last resource.
    pub plt_ms: f64,
    /// First render: every render-blocking resource has arrived.
    pub render_ms: f64,
    /// Visual progress index (see [`PageMetrics::compute`]): the mean time at which the
    /// above-the-fold weight became visible, the integral of (1 - visual completeness).
    pub speed_index_ms: f64,
    /// Everything above the fold is visible.
    pub visual_complete_ms: f64,
    /// The main image's last byte, if the page has one.
    pub main_image_ms: Option<f64>,
}

impl PageMetrics {
    /// Metrics from complete timings (every resource with a last byte; `None` otherwise).
    ///
    /// A resource above the fold becomes visible when it has arrived and the page has first
    /// rendered (every critical resource has arrived): `paint_i = max(last_byte_i, render)`.
    /// Visual completeness VC(t) is the share of the above-the-fold weight painted by t, and the
    /// visual-progress index is `SI = ∫ (1 - VC(t)) dt = Σ w_i paint_i / Σ w_i` (as WebPageTest's
    /// Speed Index, with arrival of weighted resources standing in for screenshots). A page with
    /// no weight above the fold is visually complete at its first render.
    pub fn compute(page: &Page, timings: &[ResourceTiming], start_us: u64) -> Option<PageMetrics> {
        let ms = |t: u64| t.saturating_sub(start_us) as f64 / 1000.0;
        let last: Vec<f64> = timings
            .iter()
            .map(|t| t.last_byte_us.map(ms))
            .collect::<Option<_>>()?;
        let plt_ms = last.iter().copied().fold(0.0, f64::max);
        let render_ms = page
            .resources
            .iter()
            .zip(&last)
            .filter(|(r, _)| r.critical)
            .map(|(_, &t)| t)
            .fold(0.0, f64::max);
        let visible: Vec<(f64, f64)> = page
            .resources
            .iter()
            .zip(&last)
            .filter(|(r, _)| r.above_fold > 0.0)
            .map(|(r, &t)| (r.above_fold, t.max(render_ms)))
            .collect();
        let weight: f64 = visible.iter().map(|(w, _)| w).sum();
        let (speed_index_ms, visual_complete_ms) = if weight > 0.0 {
            (
                visible.iter().map(|(w, p)| w * p).sum::<f64>() / weight,
                visible.iter().map(|(_, p)| *p).fold(0.0, f64::max),
            )
        } else {
            (render_ms, render_ms)
        };
        Some(PageMetrics {
            plt_ms,
            render_ms,
            speed_index_ms,
            visual_complete_ms,
            main_image_ms: page.main_image().map(|i| last[i]),
        })
    }
}

impl fmt::Display for PageMetrics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "page load {:.1} ms, first render {:.1} ms, visual progress index {:.1} ms, visually complete {:.1} ms",
            self.plt_ms, self.render_ms, self.speed_index_ms, self.visual_complete_ms
        )?;
        if let Some(m) = self.main_image_ms {
            write!(f, ", main image {m:.1} ms")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SMALL: &str = r#"
name = "t"
[[resource]]
id = "index.html"
type = "html"
bytes = 10000

[[resource]]
id = "a.css"
type = "css"
bytes = 2000
parent = "index.html"

[[resource]]
id = "font.woff2"
type = "font"
bytes = 3000
parent = "a.css"

[[resource]]
id = "hero.jpg"
type = "image"
bytes = 50000
parent = "index.html"
above-fold = 3
main-image = true
urgency = 2

[[resource]]
id = "b.js"
type = "js"
bytes = 4000
parent = "index.html"
"#;

    #[test]
    fn manifests_parse_with_browser_defaults_and_overrides() {
        let p = Page::from_toml(SMALL, "t.toml").unwrap();
        assert_eq!(p.resources.len(), 5);
        assert_eq!(p.resources[2].parent, Some(1));
        assert!(p.resources[1].critical && !p.resources[4].critical);
        assert_eq!(p.resources[1].priority, browser_priority(Kind::Css, true));
        assert_eq!(p.resources[3].priority.urgency, 2);
        assert!(p.resources[3].priority.incremental);
        assert_eq!(p.main_image(), Some(3));
        assert_eq!(p.total_bytes(), 69_000);
        // the TOML form reads back to the same page
        assert_eq!(Page::from_toml(&p.to_toml(), "round trip").unwrap(), p);
    }

    #[test]
    fn bad_manifests_name_the_resource_field_and_what_is_allowed() {
        let e = |text: &str| Page::from_toml(text, "p.toml").unwrap_err().to_string();
        let m = e(&SMALL.replace("type = \"font\"", "type = \"movie\""));
        assert!(
            m.contains("p.toml") && m.contains("resource 3 (\"font.woff2\")"),
            "{m}"
        );
        assert!(
            m.contains("\"movie\"") && m.contains("html, css, js"),
            "{m}"
        );
        let m = e(&SMALL.replace("parent = \"a.css\"", "parent = \"b.js\""));
        assert!(
            m.contains("parent = \"b.js\" is not an earlier resource"),
            "{m}"
        );
        let m = e(&SMALL.replace("urgency = 2", "urgency = 9"));
        assert!(m.contains("urgency = 9") && m.contains("0 to 7"), "{m}");
        let m = e(&SMALL.replace("bytes = 2000", "bytes = \"2kB\""));
        assert!(m.starts_with("page manifest p.toml: 11:9: "), "{m}");
        let m = e(&SMALL.replace("bytes = 2000", "bytes = 2000\ncolour = 1"));
        assert!(m.contains("colour"), "{m}");
        let m = e(&SMALL.replace("id = \"b.js\"", "id = \"a.css\""));
        assert!(m.contains("used twice"), "{m}");
        let m = e(&SMALL.replacen("bytes = 50000\nparent = \"index.html\"", "bytes = 50000", 1));
        assert!(m.contains("parent is missing"), "{m}");
    }

    #[test]
    fn builtin_pages_have_the_studys_resource_counts() {
        for (name, n) in [("small", 18), ("medium", 59), ("large", 99)] {
            let p = builtin(name).unwrap();
            assert_eq!(p.resources.len(), n, "{name}");
            p.validate().unwrap();
            assert!(p.main_image().is_some());
            assert_eq!(Page::from_toml(&p.to_toml(), name).unwrap(), p);
        }
        let mb = |n: &str| builtin(n).unwrap().total_bytes() as f64 / 1e6;
        assert!(mb("small") < mb("medium") && mb("medium") < mb("large"));
        assert!(builtin("huge").is_none());
    }

    #[test]
    fn priority_headers_round_trip_and_bad_values_keep_the_default() {
        for p in [
            Priority::DEFAULT,
            Priority {
                urgency: 5,
                incremental: true,
            },
        ] {
            assert_eq!(Priority::parse_header(&p.header()), p);
        }
        assert_eq!(Priority::parse_header("u=9, x=1"), Priority::DEFAULT);
        assert_eq!(Priority::parse_header("i, u=0").urgency, 0);
    }

    /// A virtual link: a response of b bytes takes b / rate after the request's round trip.
    #[test]
    fn the_loader_requests_what_arrived_resources_name() {
        let p = Page::from_toml(SMALL, "t").unwrap();
        let mut l = Loader::new(p, None, 1_000);
        assert_eq!(l.next_request(1_000), Some(0));
        assert_eq!(l.next_request(1_000), None, "nothing else is known yet");
        l.complete(0, 50_000);
        let batch: Vec<usize> = std::iter::from_fn(|| l.next_request(50_000)).collect();
        assert_eq!(batch, vec![1, 3, 4], "document order");
        l.complete(1, 60_000);
        assert_eq!(
            l.next_request(60_000),
            Some(2),
            "the font, named by the stylesheet"
        );
        assert_eq!(l.timings()[2].discovered_us, Some(60_000));
        for (i, t) in [(2, 70_000), (4, 75_000), (3, 120_000)] {
            assert!(!l.done());
            l.complete(i, t);
        }
        assert!(l.done());
    }

    #[test]
    fn a_limited_pool_sends_the_most_urgent_first() {
        let p = Page::from_toml(SMALL, "t").unwrap();
        let mut l = Loader::new(p, Some(1), 0);
        assert_eq!(l.next_request(0), Some(0));
        l.complete(0, 10);
        // css (u=0), hero (u=2 here), b.js (u=3): one at a time
        assert_eq!(l.next_request(10), Some(1));
        assert_eq!(l.next_request(10), None);
        l.complete(1, 20);
        // the font (u=1) was discovered after the hero (u=2) and b.js (u=3) but goes first
        assert_eq!(l.next_request(20), Some(2));
        l.complete(2, 30);
        assert_eq!(l.next_request(30), Some(3));
        l.complete(3, 40);
        assert_eq!(l.next_request(40), Some(4));
        assert_eq!(l.timings()[4].discovered_us, Some(10));
        assert_eq!(l.timings()[4].request_us, Some(40));
    }

    #[test]
    fn visual_progress_integrates_weights_from_first_render() {
        let p = Page::from_toml(SMALL, "t").unwrap();
        let t = |last_ms: u64| ResourceTiming {
            last_byte_us: Some(1_000_000 + last_ms * 1000),
            ..Default::default()
        };
        // document 100, css 300 (first render), font 150, hero 200, b.js 500
        let timings = vec![t(100), t(300), t(150), t(200), t(500)];
        let m = PageMetrics::compute(&p, &timings, 1_000_000).unwrap();
        assert_eq!(m.plt_ms, 500.0);
        assert_eq!(m.render_ms, 300.0);
        // the hero arrived at 200 ms but shows at the first render
        assert_eq!(m.speed_index_ms, 300.0);
        assert_eq!(m.main_image_ms, Some(200.0));
        // with two weighted images the index is their weighted mean paint time
        let mut p2 = p.clone();
        p2.resources[4].above_fold = 1.0;
        let m = PageMetrics::compute(&p2, &timings, 1_000_000).unwrap();
        assert_eq!(m.speed_index_ms, (3.0 * 300.0 + 500.0) / 4.0);
        assert_eq!(m.visual_complete_ms, 500.0);
        let mut incomplete = timings.clone();
        incomplete[2].last_byte_us = None;
        assert!(PageMetrics::compute(&p, &incomplete, 1_000_000).is_none());
    }
}
