//! One page load in a fresh Chromium, recorded as quiclab records page loads.
//!
//! Contract:
//! - [`load`] never fails: a missing or crashing browser, or a page whose load event does not
//!   come within the limit, is the record's `error` (with the browser's last standard-error
//!   lines), and what had arrived by then is kept.
//! - The browser gets a fresh profile, a window of [`VIEWPORT`], no background traffic (no
//!   updates, sync or other names resolved: only the page's origin is reached), and trusts the
//!   lab's certificate by its SPKI pin. For HTTP/3 the origin is forced onto QUIC
//!   (`--origin-to-force-quic-on`); for HTTP/2 QUIC is off, so neither can fall back silently
//!   to the other unnoticed: every resource's protocol is recorded from the network events,
//!   and one that came over another protocol is the record's error.
//! - Times are milliseconds from the navigation's start (`performance.timeOrigin`); the record's
//!   `start_us` is that instant on the monotonic clock (Chromium's network timestamps are that
//!   clock), so server timelines line up with it.
//! - Resources are matched to the manifest by file name ([`quiclab_pages::site::file_name`]);
//!   requests for anything else are counted, not matched.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use base64::Engine;
use quiclab_model::record::HttpVersion;
use quiclab_pages::page::{Page, PageMetrics, ResourceTiming};
use quiclab_pages::page_client::{BrowserMetrics, PageRecord, ResourceRecord};
use quiclab_pages::site::{VIEWPORT, file_name};
use serde_json::{Value, json};

use crate::cdp::{Browser, CdpError};
use crate::visual::{Histogram, speed_index};

/// How the browser is started, whatever it is then asked to do.
#[derive(Debug, Clone)]
pub struct BrowserOptions {
    /// The browser's program (`chromium`).
    pub program: PathBuf,
    pub http: HttpVersion,
    /// Base64 SHA-256 of the server certificate's public key, trusted as if signed.
    pub spki_pin: String,
    /// A fresh directory for the browser's profile (removed by the caller); the browser's own
    /// temporary files go there too.
    pub profile_dir: PathBuf,
    /// Where the browser's standard error goes.
    pub stderr: PathBuf,
    /// Chromium's net-log, if wanted.
    pub netlog: Option<PathBuf>,
}

/// What a load needs.
#[derive(Debug, Clone)]
pub struct LoadOptions {
    pub browser: BrowserOptions,
    /// The document's URL.
    pub url: String,
    /// The page's manifest (to match requests to resources).
    pub page: Page,
    /// How long the load event may take.
    pub timeout: Duration,
}

/// The command line for a browser that will reach `url`'s origin only (without the DevTools
/// pipe flag).
pub fn browser_args(o: &BrowserOptions, url: &str) -> Vec<String> {
    let mut a: Vec<String> = [
        "--headless",
        "--no-sandbox",
        "--no-first-run",
        "--no-default-browser-check",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-extensions",
        "--disable-default-apps",
        "--disable-domain-reliability",
        "--disable-client-side-phishing-detection",
        "--disable-breakpad",
        "--hide-scrollbars",
        "--mute-audio",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    // no name resolves but the page's own host: nothing else is reached
    let host_port = origin_host_port(url);
    let host = host_port
        .rsplit_once(':')
        .map_or(host_port.as_str(), |(h, _)| h);
    a.push(format!(
        "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE {host}"
    ));
    a.push(format!("--window-size={},{}", VIEWPORT.0, VIEWPORT.1));
    a.push(format!("--user-data-dir={}", o.profile_dir.display()));
    a.push(format!(
        "--ignore-certificate-errors-spki-list={}",
        o.spki_pin
    ));
    match o.http {
        HttpVersion::Http3 => {
            a.push("--enable-quic".into());
            a.push(format!(
                "--origin-to-force-quic-on={}",
                origin_host_port(url)
            ));
        }
        _ => a.push("--disable-quic".into()),
    }
    if let Some(n) = &o.netlog {
        a.push(format!("--log-net-log={}", n.display()));
        a.push("--net-log-capture-mode=IncludeSensitive".into());
    }
    a.push("about:blank".into());
    a
}

/// `host:port` of an https URL (port 443 when it names none).
fn origin_host_port(url: &str) -> String {
    let rest = url.split("://").nth(1).unwrap_or(url);
    let auth = rest.split('/').next().unwrap_or(rest);
    let has_port = if auth.starts_with('[') {
        auth.contains("]:")
    } else {
        auth.contains(':')
    };
    if has_port {
        auth.to_string()
    } else {
        format!("{auth}:443")
    }
}

/// One request as the network events told it.
#[derive(Debug, Default, Clone)]
struct Request {
    url: String,
    sent_mono: Option<f64>,
    wall: Option<f64>,
    protocol: Option<String>,
    connection: Option<u64>,
    request_time: Option<f64>,
    send_start_ms: Option<f64>,
    headers_end_ms: Option<f64>,
    /// The connection's end, ms after `request_time` (none for a connection used before).
    connect_end_ms: Option<f64>,
    finished_mono: Option<f64>,
    failed: Option<String>,
    bytes: u64,
}

/// Loads the page once (see the module's contract).
pub fn load(o: &LoadOptions) -> PageRecord {
    let mut record = PageRecord::new(
        &o.page.name,
        o.browser.http,
        true,
        quiclab_model::record::now_us(),
    );
    let mut seen = Seen::default();
    if let Err(e) = drive(o, &mut seen) {
        record.error = Some(e);
    }
    fill(o, &seen, &mut record);
    // no silent fallback: every resource came over the protocol asked for
    let want = protocol(o.browser.http);
    if record.error.is_none()
        && let Some(r) = record
            .resources
            .iter()
            .find(|r| r.protocol.as_deref() != Some(want))
    {
        record.error = Some(format!(
            "resource {:?} came over {} instead of {want}",
            r.id,
            r.protocol.as_deref().unwrap_or("no protocol")
        ));
        record.metrics = None;
    }
    record
}

/// How the browser's network events name the protocol of an HTTP version ("h3", "h2").
pub(crate) fn protocol(http: HttpVersion) -> &'static str {
    match http {
        HttpVersion::Http3 => "h3",
        _ => "h2",
    }
}

/// What the load gathered.
#[derive(Default)]
struct Seen {
    version: String,
    requests: Vec<(String, Request)>,
    frames: Vec<(f64, String)>,
    page: Option<Value>,
    load_fired: bool,
}

impl Seen {
    fn request(&mut self, id: &str) -> &mut Request {
        match self.requests.iter().position(|(k, _)| k == id) {
            Some(i) => &mut self.requests[i].1,
            None => {
                self.requests.push((id.to_string(), Request::default()));
                &mut self.requests.last_mut().unwrap().1
            }
        }
    }
}

pub(crate) const CALL: Duration = Duration::from_secs(10);
/// How long the blank page must stay unchanged before its last frame is the baseline, and
/// how long to wait for that at most.
const BASELINE_QUIET: Duration = Duration::from_millis(200);
const BASELINE_LIMIT: Duration = Duration::from_secs(3);
/// After the load event, how long the filmstrip keeps going once frames stop changing.
const SETTLE: Duration = Duration::from_millis(500);

/// The longest profile directory Chromium can run in: it puts its singleton socket at
/// `DIR/org.chromium.Chromium.XXXXXX/SingletonSocket` (its temporary directory is the profile's,
/// so that nothing of it is left elsewhere), 45 bytes more, and a Unix socket's path holds 107
/// (108 with its NUL). Longer, Chromium exits at start ("Socket path too long").
pub const SOCKET_DIR_MAX: usize = 107 - 45;

/// A browser started for `url`'s origin, with a blank tab attached (its session id) whose
/// page and network events are on, and the browser's version.
pub(crate) fn open_tab(o: &BrowserOptions, url: &str) -> Result<(Browser, String, String), String> {
    let err = |e: CdpError| e.to_string();
    let dir = o.profile_dir.as_os_str().len();
    if dir > SOCKET_DIR_MAX {
        return Err(format!(
            "the browser's profile directory {} is {dir} bytes long: Chromium puts its singleton \
             socket under it, and a Unix socket's path holds at most 107 bytes, so it may be at \
             most {SOCKET_DIR_MAX} (set TMPDIR to a shorter directory)",
            o.profile_dir.display()
        ));
    }
    std::fs::create_dir_all(&o.profile_dir)
        .map_err(|e| format!("creating {}: {e}", o.profile_dir.display()))?;
    let mut b = Browser::launch(&o.program, &browser_args(o, url), &o.stderr, &o.profile_dir)
        .map_err(err)?;
    let v = b
        .call(None, "Browser.getVersion", json!({}), CALL)
        .map_err(err)?;
    let version = v["product"].as_str().unwrap_or("chromium").to_string();
    let sid = b.open_blank_tab(CALL).map_err(err)?;
    for m in ["Page.enable", "Network.enable"] {
        b.call(Some(&sid), m, json!({}), CALL).map_err(err)?;
    }
    Ok((b, sid, version))
}

fn drive(o: &LoadOptions, seen: &mut Seen) -> Result<(), String> {
    let err = |e: CdpError| e.to_string();
    let (mut b, sid, version) = open_tab(&o.browser, &o.url)?;
    seen.version = version;
    let s = Some(sid.as_str());
    for (m, p) in [
        (
            "Emulation.setDeviceMetricsOverride",
            json!({"width": VIEWPORT.0, "height": VIEWPORT.1, "deviceScaleFactor": 1, "mobile": false}),
        ),
        (
            "Page.startScreencast",
            json!({"format": "png", "maxWidth": VIEWPORT.0 / 2, "maxHeight": VIEWPORT.1 / 2, "everyNthFrame": 1}),
        ),
    ] {
        b.call(s, m, p, CALL).map_err(err)?;
    }
    // the blank page as it looks once the window has its size: what the filmstrip starts from
    // (a frame painted before the size took effect differs in a strip of the window). Frames
    // come only when the picture changes: the last one before a quiet spell is the baseline.
    let until = Instant::now() + BASELINE_LIMIT;
    let mut last_frame = Instant::now();
    while Instant::now() < until
        && (seen.frames.is_empty() || last_frame.elapsed() < BASELINE_QUIET)
    {
        let frames = seen.frames.len();
        if let Some(e) = b.next_event(Duration::from_millis(20)).map_err(err)? {
            on_event(&mut b, &sid, e, seen);
            if seen.frames.len() != frames {
                last_frame = Instant::now();
            }
        }
    }
    let before = seen.frames.len().saturating_sub(1);
    seen.frames.drain(..before);
    let deadline = Instant::now() + o.timeout;
    // the reply comes once the document's response has arrived: within the load's limit
    match b.call(s, "Page.navigate", json!({"url": o.url}), o.timeout) {
        Ok(_) => {}
        Err(CdpError::Timeout { .. }) => {
            b.close(Duration::from_secs(2));
            return Err(no_load_event(o));
        }
        Err(e) => return Err(err(e)),
    }
    let mut last_change = Instant::now();
    loop {
        let now = Instant::now();
        if now >= deadline {
            break;
        }
        if seen.load_fired && now.duration_since(last_change) >= SETTLE {
            break;
        }
        let frames = seen.frames.len();
        if let Some(e) = b.next_event(Duration::from_millis(50)).map_err(err)? {
            on_event(&mut b, &sid, e, seen);
            if seen.frames.len() != frames {
                last_change = Instant::now();
            }
        }
    }
    let _ = b.call(s, "Page.stopScreencast", json!({}), CALL);
    let r = b
        .call(
            s,
            "Runtime.evaluate",
            json!({"expression": PAGE_FACTS, "awaitPromise": true, "returnByValue": true}),
            CALL,
        )
        .map_err(err)?;
    seen.page = r["result"]["value"]
        .as_str()
        .and_then(|t| serde_json::from_str(t).ok());
    b.close(Duration::from_secs(2));
    if !seen.load_fired {
        return Err(no_load_event(o));
    }
    Ok(())
}

fn no_load_event(o: &LoadOptions) -> String {
    format!(
        "the page did not fire its load event within {:.0} s",
        o.timeout.as_secs_f64()
    )
}

/// What the page itself says: navigation timing, paint timing, largest contentful paint, and
/// whether its scripts ran, images decoded and fonts loaded.
const PAGE_FACTS: &str = r#"(async () => {
  const nav = performance.getEntriesByType('navigation')[0];
  const paint = {};
  for (const e of performance.getEntriesByType('paint')) paint[e.name] = e.startTime;
  const lcp = await new Promise(done => {
    let last = null;
    try {
      new PerformanceObserver(l => { const e = l.getEntries(); last = e[e.length - 1].startTime; })
        .observe({type: 'largest-contentful-paint', buffered: true});
    } catch (e) {}
    setTimeout(() => done(last), 50);
  });
  const imgs = [...document.images];
  const fonts = [...document.fonts];
  return JSON.stringify({
    origin: performance.timeOrigin,
    load: nav ? nav.loadEventStart : null,
    dcl: nav ? nav.domContentLoadedEventStart : null,
    fp: paint['first-paint'] ?? null,
    fcp: paint['first-contentful-paint'] ?? null,
    lcp,
    scripts: window.__qlScripts || 0,
    images: imgs.length,
    decoded: imgs.filter(i => i.complete && i.naturalWidth > 0).length,
    fonts: fonts.length,
    fonts_loaded: fonts.filter(f => f.status === 'loaded').length,
  });
})()"#;

fn on_event(b: &mut Browser, sid: &str, e: crate::cdp::Event, seen: &mut Seen) {
    let p = &e.params;
    let id = p["requestId"].as_str().unwrap_or_default().to_string();
    match e.method.as_str() {
        "Page.screencastFrame" => {
            let session = p["sessionId"].clone();
            let _ = b.call(
                Some(sid),
                "Page.screencastFrameAck",
                json!({"sessionId": session}),
                CALL,
            );
            if let (Some(ts), Some(data)) =
                (p["metadata"]["timestamp"].as_f64(), p["data"].as_str())
            {
                seen.frames.push((ts * 1000.0, data.to_string()));
            }
        }
        "Page.loadEventFired" => seen.load_fired = true,
        "Network.requestWillBeSent" => {
            let r = seen.request(&id);
            r.url = p["request"]["url"].as_str().unwrap_or_default().to_string();
            r.sent_mono = p["timestamp"].as_f64();
            r.wall = p["wallTime"].as_f64();
        }
        "Network.responseReceived" => {
            let resp = &p["response"];
            let t = &resp["timing"];
            let r = seen.request(&id);
            r.protocol = resp["protocol"].as_str().map(str::to_string);
            r.connection = resp["connectionId"].as_u64();
            r.request_time = t["requestTime"].as_f64();
            r.send_start_ms = t["sendStart"].as_f64();
            r.headers_end_ms = t["receiveHeadersEnd"].as_f64();
            r.connect_end_ms = t["connectEnd"].as_f64().filter(|z| *z >= 0.0);
        }
        "Network.loadingFinished" => {
            let r = seen.request(&id);
            r.finished_mono = p["timestamp"].as_f64();
            r.bytes = p["encodedDataLength"].as_f64().unwrap_or(0.0) as u64;
        }
        "Network.loadingFailed" => {
            let r = seen.request(&id);
            r.failed = Some(p["errorText"].as_str().unwrap_or("failed").to_string());
            r.finished_mono = p["timestamp"].as_f64();
        }
        _ => {}
    }
}

/// Builds the record from what was seen.
fn fill(o: &LoadOptions, seen: &Seen, record: &mut PageRecord) {
    let page = &o.page;
    let facts = seen.page.clone().unwrap_or(Value::Null);
    let origin = facts["origin"].as_f64();
    // the document's request: monotonic and wall clock at one instant
    let doc = seen
        .requests
        .iter()
        .map(|(_, r)| r)
        .find(|r| r.wall.is_some() && r.url.starts_with("http"));
    let (Some(origin), Some(doc)) = (origin, doc) else {
        if record.error.is_none() {
            record.error = Some("the browser reported no navigation".into());
        }
        return;
    };
    let wall_minus_mono = doc.wall.unwrap_or(0.0) * 1000.0 - doc.sent_mono.unwrap_or(0.0) * 1000.0;
    let rel = |mono_s: f64| mono_s * 1000.0 + wall_minus_mono - origin;
    record.start_us = ((origin - wall_minus_mono) * 1000.0).max(0.0) as u64;

    let names: HashMap<String, usize> = (0..page.resources.len())
        .map(|i| (file_name(page, i), i))
        .collect();
    let mut by_resource: Vec<Option<&Request>> = vec![None; page.resources.len()];
    let mut extra = 0;
    for (_, r) in &seen.requests {
        if !r.url.starts_with("http") {
            continue;
        }
        let name = r
            .url
            .split(['?', '#'])
            .next()
            .unwrap_or("")
            .rsplit('/')
            .next()
            .unwrap_or("");
        match names.get(name) {
            Some(&i) if by_resource[i].is_none() => by_resource[i] = Some(r),
            _ => extra += 1,
        }
    }
    let mut connections: Vec<u64> = Vec::new();
    let mut protocols: Vec<String> = Vec::new();
    let mut failed = None;
    record.resources = page
        .resources
        .iter()
        .zip(&by_resource)
        .map(|(res, req)| {
            let req = req.cloned().unwrap_or_default();
            if let Some(c) = req.connection
                && !connections.contains(&c)
            {
                connections.push(c);
            }
            if let Some(p) = &req.protocol
                && !protocols.contains(p)
            {
                protocols.push(p.clone());
            }
            if failed.is_none()
                && let Some(f) = &req.failed
            {
                failed = Some(format!("resource {:?}: {f}", res.id));
            }
            let at = |offset_ms: Option<f64>| {
                let base = req.request_time?;
                let off = offset_ms.filter(|v| *v >= 0.0)?;
                Some(rel(base + off / 1000.0))
            };
            ResourceRecord {
                id: res.id.clone(),
                kind: res.kind,
                bytes: res.bytes,
                parent: res.parent,
                critical: res.critical,
                above_fold: res.above_fold,
                main_image: res.main_image,
                urgency: res.priority.urgency,
                incremental: res.priority.incremental,
                connection: req
                    .connection
                    .and_then(|c| connections.iter().position(|&k| k == c))
                    .unwrap_or(0) as u32,
                discovered_ms: req.sent_mono.map(rel),
                start_ms: at(req.send_start_ms).or(req.sent_mono.map(rel)),
                first_byte_ms: at(req.headers_end_ms),
                last_byte_ms: req.finished_mono.filter(|_| req.failed.is_none()).map(rel),
                protocol: req.protocol.clone(),
            }
        })
        .collect();
    if record.error.is_none() {
        record.error = failed;
    }
    record.connections = connections.len() as u32;
    record.bytes = record
        .resources
        .iter()
        .filter(|r| r.last_byte_ms.is_some())
        .map(|r| r.bytes)
        .sum();
    // the connection's end on the load's clock: its start may precede the request's (a
    // connection Chromium opened ahead of the request reports its timing from the request's
    // start), so its length alone is not the time from the load's start
    if let Some(r) = by_resource[0]
        && let (Some(base), Some(z)) = (r.request_time, r.connect_end_ms)
    {
        record.handshake_ms = Some(rel(base + z / 1000.0));
    }
    record.handshake.alpn = by_resource[0].and_then(|r| r.protocol.clone());

    // the filmstrip
    let frames: Vec<(f64, Histogram)> = seen
        .frames
        .iter()
        .filter_map(|(wall_ms, data)| Some((wall_ms - origin, decode(data)?)))
        .collect();
    let visual = speed_index(&frames);
    // the model on the browser's own arrival times
    let timings: Vec<ResourceTiming> = record
        .resources
        .iter()
        .map(|r| {
            let us = |ms: Option<f64>| ms.map(|m| (m.max(0.0) * 1000.0) as u64);
            ResourceTiming {
                discovered_us: us(r.discovered_ms),
                request_us: us(r.start_ms),
                first_byte_us: us(r.first_byte_ms),
                last_byte_us: us(r.last_byte_ms),
            }
        })
        .collect();
    let model = PageMetrics::compute(page, &timings, 0);
    let num = |k: &str| facts[k].as_f64();
    let count = |k: &str| facts[k].as_u64().unwrap_or(0) as u32;
    let browser = BrowserMetrics {
        browser: seen.version.clone(),
        load_event_ms: num("load").filter(|v| *v > 0.0),
        dom_content_loaded_ms: num("dcl").filter(|v| *v > 0.0),
        first_paint_ms: num("fp"),
        first_contentful_paint_ms: num("fcp"),
        largest_contentful_paint_ms: num("lcp"),
        speed_index_ms: visual.as_ref().map(|v| v.speed_index_ms),
        visually_complete_ms: visual.as_ref().map(|v| v.visually_complete_ms),
        first_visual_change_ms: visual.as_ref().map(|v| v.first_visual_change_ms),
        frames: frames.len() as u32,
        visual_progress: visual
            .as_ref()
            .map(|v| v.progress.clone())
            .unwrap_or_default(),
        model,
        protocols,
        scripts_run: count("scripts"),
        images_decoded: count("decoded"),
        images: count("images"),
        fonts_loaded: count("fonts_loaded"),
        fonts: count("fonts"),
        extra_requests: extra,
    };
    let all_arrived = record.resources.iter().all(|r| r.last_byte_ms.is_some());
    if record.error.is_none() && all_arrived {
        if let (Some(plt), Some(v)) = (browser.load_event_ms, &visual) {
            record.metrics = Some(PageMetrics {
                plt_ms: plt,
                render_ms: browser
                    .first_contentful_paint_ms
                    .or(browser.first_paint_ms)
                    .unwrap_or(v.first_visual_change_ms),
                speed_index_ms: v.speed_index_ms,
                visual_complete_ms: v.visually_complete_ms,
                main_image_ms: page
                    .main_image()
                    .and_then(|i| record.resources[i].last_byte_ms),
            });
        }
    } else if record.error.is_none() {
        let missing = record
            .resources
            .iter()
            .filter(|r| r.last_byte_ms.is_none())
            .count();
        record.error = Some(format!(
            "{missing} of the page's {} resources never arrived",
            record.resources.len()
        ));
    }
    record.browser = Some(browser);
}

/// A screencast frame's colour histogram (PNG, base64).
fn decode(data: &str) -> Option<Histogram> {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(data)
        .ok()?;
    let mut dec = png::Decoder::new(std::io::Cursor::new(bytes));
    dec.set_transformations(png::Transformations::EXPAND | png::Transformations::STRIP_16);
    let mut reader = dec.read_info().ok()?;
    let mut buf = vec![0; reader.output_buffer_size()?];
    let info = reader.next_frame(&mut buf).ok()?;
    let stride = match info.color_type {
        png::ColorType::Rgb => 3,
        png::ColorType::Rgba => 4,
        _ => return None,
    };
    Some(Histogram::from_pixels(&buf[..info.buffer_size()], stride))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_profile_directory_too_long_for_chromium_s_socket_is_refused_before_it_starts() {
        // 63 bytes: one more than the socket's path leaves; the program is never started
        let dir = format!("/tmp/{}", "d".repeat(SOCKET_DIR_MAX - 4));
        assert_eq!(dir.len(), SOCKET_DIR_MAX + 1);
        let o = BrowserOptions {
            program: "/nonexistent/chromium".into(),
            http: HttpVersion::Http2,
            spki_pin: "PIN".into(),
            profile_dir: dir.into(),
            stderr: "/tmp/e".into(),
            netlog: None,
        };
        let e = open_tab(&o, "https://127.0.0.1/").err().unwrap();
        assert!(
            e.contains("63 bytes long") && e.contains("at most 62"),
            "{e}"
        );
    }

    #[test]
    fn h3_forces_the_origin_onto_quic_and_h2_turns_quic_off() {
        let mut o = BrowserOptions {
            program: "chromium".into(),
            http: HttpVersion::Http3,
            spki_pin: "PIN".into(),
            profile_dir: "/tmp/p".into(),
            stderr: "/tmp/e".into(),
            netlog: None,
        };
        let url = "https://198.18.0.2/small/000-index.html";
        let a = browser_args(&o, url).join(" ");
        assert!(
            a.contains("--origin-to-force-quic-on=198.18.0.2:443"),
            "{a}"
        );
        assert!(a.contains("--ignore-certificate-errors-spki-list=PIN"));
        assert!(a.contains("--user-data-dir=/tmp/p"));
        assert!(
            a.contains("--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 198.18.0.2 "),
            "{a}"
        );
        o.http = HttpVersion::Http2;
        let a = browser_args(&o, url).join(" ");
        assert!(
            a.contains("--disable-quic") && !a.contains("force-quic"),
            "{a}"
        );
        assert_eq!(
            origin_host_port("https://[fd51:c1ab::2]:8443/x"),
            "[fd51:c1ab::2]:8443"
        );
        assert_eq!(
            origin_host_port("https://[fd51:c1ab::2]/x"),
            "[fd51:c1ab::2]:443"
        );
    }
}
