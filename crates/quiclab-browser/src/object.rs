//! One object fetched by a fresh Chromium, recorded as `quiclab get` records a request.
//!
//! Contract:
//! - [`fetch`] never fails: a missing or crashing browser, a failed request, a protocol other
//!   than the one asked for, or no answer within the limit is the record's `error`.
//! - The browser starts on a blank page (so its own start-up is not timed), then the page asks
//!   for the object as a script would: `fetch(url, {mode: "no-cors"})`. That opens a new
//!   connection (a fresh profile: nothing to resume) and the browser reads the whole body
//!   whatever its type. Navigating to the object instead would turn a body of unknown type
//!   into a download, whose progress the network events do not report.
//! - Times are the network events' own (Chromium's monotonic clock, the records' clock):
//!   `start_us` is the connection attempt, `handshake_done_us` the end of connecting (TLS
//!   included, QUIC's handshake for HTTP/3), `first_byte_us` the end of the response's
//!   headers (the browser reports no earlier body byte for an opaque response), and
//!   `last_byte_us` the end of loading. The body's bytes are the received data's length.

use std::time::{Duration, Instant};

use quiclab_model::record::{RequestRecord, now_us};
use serde_json::{Value, json};

use crate::cdp::CdpError;
use crate::load::{BrowserOptions, CALL, open_tab, protocol};

/// What a fetch needs.
#[derive(Debug, Clone)]
pub struct ObjectOptions {
    pub browser: BrowserOptions,
    /// The object's URL (its origin is the only one the browser reaches).
    pub url: String,
    /// How long the whole body may take.
    pub timeout: Duration,
}

/// The network events of the object's request.
#[derive(Debug, Default)]
struct Seen {
    id: Option<String>,
    sent_s: Option<f64>,
    response: Option<Value>,
    body_bytes: u64,
    finished_s: Option<f64>,
    failed: Option<String>,
}

/// Fetches the object once (see the module's contract).
pub fn fetch(o: &ObjectOptions) -> RequestRecord {
    let mut rec = RequestRecord::get(o.browser.http, &o.url, 0, true, now_us());
    let mut seen = Seen::default();
    let outcome = drive(o, &mut seen);
    fill(o, &seen, &mut rec);
    if let Err(e) = outcome {
        rec.error = Some(e);
    }
    rec.derive();
    rec
}

/// The script that asks for the object: cross-origin from the blank page, so no-cors (the
/// response is opaque to the page, but the browser still reads it whole).
fn script(url: &str) -> String {
    format!(
        "fetch({}, {{mode: 'no-cors', cache: 'no-store'}}).then(r => r.type, e => String(e))",
        Value::String(url.to_string())
    )
}

fn drive(o: &ObjectOptions, seen: &mut Seen) -> Result<(), String> {
    let err = |e: CdpError| e.to_string();
    let (mut b, sid, _version) = open_tab(&o.browser, &o.url)?;
    let deadline = Instant::now() + o.timeout;
    b.call(
        Some(&sid),
        "Runtime.evaluate",
        json!({"expression": script(&o.url), "awaitPromise": false}),
        CALL,
    )
    .map_err(err)?;
    while seen.finished_s.is_none() && seen.failed.is_none() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            b.close(Duration::from_secs(2));
            return Err(format!(
                "the object did not arrive within {:.0} s",
                o.timeout.as_secs_f64()
            ));
        }
        if let Some(e) = b
            .next_event(left.min(Duration::from_millis(100)))
            .map_err(err)?
        {
            on_event(o, &e.method, &e.params, seen);
        }
    }
    b.close(Duration::from_secs(2));
    Ok(())
}

fn on_event(o: &ObjectOptions, method: &str, p: &Value, seen: &mut Seen) {
    let id = p["requestId"].as_str();
    if method == "Network.requestWillBeSent" {
        if seen.id.is_none() && p["request"]["url"].as_str() == Some(o.url.as_str()) {
            seen.id = id.map(str::to_string);
            seen.sent_s = p["timestamp"].as_f64();
        }
        return;
    }
    if id.is_none() || id != seen.id.as_deref() {
        return;
    }
    match method {
        "Network.responseReceived" => seen.response = Some(p["response"].clone()),
        "Network.dataReceived" => seen.body_bytes += p["dataLength"].as_u64().unwrap_or(0),
        "Network.loadingFinished" => seen.finished_s = p["timestamp"].as_f64(),
        "Network.loadingFailed" => {
            seen.failed = Some(p["errorText"].as_str().unwrap_or("failed").to_string())
        }
        _ => {}
    }
}

/// A key-exchange group as quiclab names them ("X25519" -> "x25519", "P-256" -> "p256").
fn group_name(chrome: &str) -> String {
    chrome.to_ascii_lowercase().replace('-', "")
}

fn fill(o: &ObjectOptions, seen: &Seen, rec: &mut RequestRecord) {
    let us = |s: f64| (s * 1e6).max(0.0) as u64;
    if let Some(s) = seen.sent_s {
        rec.start_us = us(s);
    }
    if let Some(resp) = &seen.response {
        rec.status = resp["status"].as_u64().unwrap_or(0) as u16;
        let t = &resp["timing"];
        // offsets in ms from the request's time; -1 when the step did not happen
        let at = |k: &str| {
            let base = t["requestTime"].as_f64()?;
            let off = t[k].as_f64().filter(|v| *v >= 0.0)?;
            Some(us(base + off / 1000.0))
        };
        if let Some(connect) = at("connectStart") {
            rec.start_us = connect;
        }
        rec.handshake_done_us = match (at("connectEnd"), at("sslEnd")) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
        rec.first_byte_us = at("receiveHeadersEnd");
        rec.handshake.alpn = resp["protocol"].as_str().map(str::to_string);
        rec.handshake.group = resp["securityDetails"]["keyExchangeGroup"]
            .as_str()
            .filter(|g| !g.is_empty())
            .map(group_name);
    }
    rec.bytes = seen.body_bytes;
    rec.last_byte_us = seen.finished_s.map(us);
    if let Some(f) = &seen.failed {
        rec.error = Some(format!("the request failed: {f}"));
        rec.last_byte_us = None;
    }
    // no silent fallback: the object came over the protocol asked for
    let want = protocol(o.browser.http);
    if rec.error.is_none()
        && let Some(got) = rec.handshake.alpn.as_deref()
        && got != want
    {
        rec.error = Some(format!("the object came over {got} instead of {want}"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use quiclab_model::record::HttpVersion;

    fn opts(http: HttpVersion) -> ObjectOptions {
        ObjectOptions {
            browser: BrowserOptions {
                program: "chromium".into(),
                http,
                spki_pin: "PIN".into(),
                profile_dir: "/tmp/p".into(),
                stderr: "/tmp/e".into(),
                netlog: None,
            },
            url: "https://198.18.0.2/bytes/100000".into(),
            timeout: Duration::from_secs(5),
        }
    }

    /// The events of one h3 fetch as Chromium 156 reported them (values from a real run).
    fn events(protocol: &str) -> Vec<(&'static str, Value)> {
        vec![
            (
                "Network.requestWillBeSent",
                json!({"requestId": "7", "timestamp": 100.0,
                       "request": {"url": "https://198.18.0.2/bytes/100000"}}),
            ),
            // another request of the page is not the object's
            (
                "Network.dataReceived",
                json!({"requestId": "8", "dataLength": 5}),
            ),
            (
                "Network.responseReceived",
                json!({"requestId": "7", "response": {"status": 200, "protocol": protocol,
                  "securityDetails": {"keyExchangeGroup": "X25519"},
                  "timing": {"requestTime": 100.002, "connectStart": 0.5, "connectEnd": 47.2,
                             "sslStart": 0.5, "sslEnd": 47.2, "receiveHeadersEnd": 88.0}}}),
            ),
            (
                "Network.dataReceived",
                json!({"requestId": "7", "dataLength": 100000}),
            ),
            (
                "Network.loadingFinished",
                json!({"requestId": "7", "timestamp": 100.2}),
            ),
        ]
    }

    #[test]
    fn a_fetch_is_recorded_from_its_network_events_on_the_records_clock() {
        let o = opts(HttpVersion::Http3);
        let mut seen = Seen::default();
        for (m, p) in events("h3") {
            on_event(&o, m, &p, &mut seen);
        }
        let mut rec = RequestRecord::get(HttpVersion::Http3, &o.url, 0, true, 0);
        fill(&o, &seen, &mut rec);
        rec.derive();
        assert_eq!(rec.error, None);
        assert_eq!((rec.status, rec.bytes), (200, 100_000));
        // the connection attempt starts the clock: 100.002 s + 0.5 ms
        assert_eq!(rec.start_us, 100_002_500);
        assert_eq!(rec.handshake_done_us, Some(100_049_200));
        let ttlb = rec.ttlb_ms.unwrap();
        assert!((ttlb - 197.5).abs() < 0.01, "{ttlb}");
        let ttfb = rec.ttfb_ms.unwrap();
        assert!((ttfb - 87.5).abs() < 0.01, "{ttfb}");
        assert_eq!(rec.handshake.group.as_deref(), Some("x25519"));
        assert_eq!(rec.handshake.alpn.as_deref(), Some("h3"));
    }

    #[test]
    fn another_protocol_or_a_failed_request_is_the_records_error() {
        let o = opts(HttpVersion::Http3);
        let mut seen = Seen::default();
        for (m, p) in events("h2") {
            on_event(&o, m, &p, &mut seen);
        }
        let mut rec = RequestRecord::get(HttpVersion::Http3, &o.url, 0, true, 0);
        fill(&o, &seen, &mut rec);
        assert_eq!(
            rec.error.as_deref(),
            Some("the object came over h2 instead of h3")
        );

        let mut seen = Seen::default();
        for (m, p) in &events("h3")[..3] {
            on_event(&o, m, p, &mut seen);
        }
        on_event(
            &o,
            "Network.loadingFailed",
            &json!({"requestId": "7", "errorText": "net::ERR_QUIC_PROTOCOL_ERROR"}),
            &mut seen,
        );
        let mut rec = RequestRecord::get(HttpVersion::Http3, &o.url, 0, true, 0);
        fill(&o, &seen, &mut rec);
        assert_eq!(
            rec.error.as_deref(),
            Some("the request failed: net::ERR_QUIC_PROTOCOL_ERROR")
        );
        assert_eq!(rec.last_byte_us, None);
    }

    #[test]
    fn the_script_quotes_the_url() {
        assert_eq!(
            script("https://h/a'b\"c"),
            "fetch(\"https://h/a'b\\\"c\", {mode: 'no-cors', cache: 'no-store'}).then(r => r.type, e => String(e))"
        );
        assert_eq!(group_name("P-256"), "p256");
        assert_eq!(group_name("X25519MLKEM768"), "x25519mlkem768");
    }
}
