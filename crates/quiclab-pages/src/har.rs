//! Page manifests from HAR files (HTTP Archive 1.2, as browsers' developer tools save them).
//!
//! Contract: [`page_from_har`] turns the entries of a HAR into a [`Page`] and never reads a
//! file or a clock. What it takes from each entry:
//! - only successful GETs (status 200-299) of http(s) URLs, in the order they started;
//! - the document: the first entry whose resource type is `document` (Chrome's `_resourceType`)
//!   or whose MIME type is `text/html`; it becomes resource 1 and everything before it is dropped;
//! - the type from `_resourceType`, or else from the MIME type;
//! - the size from `response.content.size` (the decoded body), or else `response.bodySize`;
//! - the parent from the initiator (`_initiator.url`, or the first frame of its script stack)
//!   when that names an earlier entry, otherwise the document;
//! - the urgency from Chrome's `_priority` (VeryHigh 0, High 1, Medium 2, Low 3, VeryLow 4, as
//!   Chrome maps its request priorities to RFC 9218), otherwise the type's default; a script at
//!   High or above is render-blocking;
//! - above the fold: a HAR does not say, so the largest image is taken as the main image with
//!   weight 1 (edit the manifest to say more).
//!
//! Every origin is folded into one (quiclab serves a page from one server).

use std::collections::HashMap;

use serde::Deserialize;
use serde::de::{IgnoredAny, SeqAccess, Visitor};
use serde_json::Value;

use crate::page::{
    Kind, MAX_RESOURCE_BYTES, MAX_RESOURCES, ManifestError, Page, Priority, Resource,
    browser_priority,
};

fn kind_of(entry: &Value) -> Kind {
    let by_type = match entry["_resourceType"].as_str().unwrap_or("") {
        "document" => Some(Kind::Html),
        "stylesheet" => Some(Kind::Css),
        "script" => Some(Kind::Js),
        "font" => Some(Kind::Font),
        "image" => Some(Kind::Image),
        "" => None,
        _ => Some(Kind::Other),
    };
    by_type.unwrap_or_else(|| {
        let mime = entry["response"]["content"]["mimeType"]
            .as_str()
            .unwrap_or("")
            .to_ascii_lowercase();
        if mime.starts_with("text/html") {
            Kind::Html
        } else if mime.starts_with("text/css") {
            Kind::Css
        } else if mime.contains("javascript") || mime.contains("ecmascript") {
            Kind::Js
        } else if mime.starts_with("font/") || mime.contains("font-") || mime.contains("woff") {
            Kind::Font
        } else if mime.starts_with("image/") {
            Kind::Image
        } else {
            Kind::Other
        }
    })
}

fn urgency_of(entry: &Value) -> Option<u8> {
    match entry["_priority"].as_str()? {
        "VeryHigh" => Some(0),
        "High" => Some(1),
        "Medium" => Some(2),
        "Low" => Some(3),
        "VeryLow" => Some(4),
        _ => None,
    }
}

/// The URL of whatever started this request, if the HAR says.
fn initiator_url(entry: &Value) -> Option<&str> {
    let init = &entry["_initiator"];
    init["url"].as_str().or_else(|| {
        init["stack"]["callFrames"]
            .as_array()?
            .iter()
            .find_map(|f| f["url"].as_str().filter(|u| !u.is_empty()))
    })
}

/// The body's size: `response.content.size`, or else `response.bodySize` (-1 or absent means
/// unknown); anything else (another negative, a fraction, beyond [`MAX_RESOURCE_BYTES`]) is
/// refused rather than read as 0.
fn size_of(entry: &Value) -> Result<u64, String> {
    let r = &entry["response"];
    for (field, v) in [
        ("response.content.size", &r["content"]["size"]),
        ("response.bodySize", &r["bodySize"]),
    ] {
        if v.is_null() || v.as_i64() == Some(-1) {
            continue;
        }
        return match v.as_u64() {
            Some(n) if n <= MAX_RESOURCE_BYTES => Ok(n),
            _ => Err(format!(
                "{field} = {v}: allowed: a whole number of bytes from 0 to {MAX_RESOURCE_BYTES} \
                 (-1: unknown)"
            )),
        };
    }
    Err(
        "no size: response.content.size and response.bodySize are both absent or -1 \
         (unknown)"
            .into(),
    )
}

/// Refuses an entry without the fields HAR 1.2 requires of it that a page is made of
/// (`request.method`, `request.url`, `response.status`), or with one of another type: the
/// field's path below the entry, its value and what is allowed.
fn check_entry(e: &Value) -> Result<(), String> {
    fn short(v: &Value) -> String {
        let t = v.to_string();
        match t.char_indices().nth(40) {
            Some((at, _)) => format!("{}...", &t[..at]),
            None => t,
        }
    }
    let object = |path: &str, v: &Value| -> Result<(), String> {
        match v {
            Value::Object(_) => Ok(()),
            Value::Null => Err(format!("{path}: missing: a HAR entry has it (an object)")),
            other => Err(format!("{path} = {}: allowed: an object", short(other))),
        }
    };
    object("", e).map_err(|m| m.replacen(": missing", " is null", 1))?;
    object(".request", &e["request"])?;
    object(".response", &e["response"])?;
    for (path, v) in [
        (".request.method", &e["request"]["method"]),
        (".request.url", &e["request"]["url"]),
    ] {
        match v {
            Value::String(_) => {}
            Value::Null => return Err(format!("{path}: missing: a HAR entry has it (a string)")),
            other => return Err(format!("{path} = {}: allowed: a string", short(other))),
        }
    }
    match &e["response"]["status"] {
        Value::Number(n) if n.is_i64() => Ok(()),
        Value::Null => Err(".response.status: missing: a HAR entry has it (a number)".into()),
        other => Err(format!(
            ".response.status = {}: allowed: a whole number (the HTTP status)",
            short(other)
        )),
    }
}

/// A page from a HAR's text; `origin` names it in errors, `name` is the page's name.
/// The most entries a HAR may hold in all: each is parsed into a tree before the page's own limit
/// of [`MAX_RESOURCES`] (counted from the document on) can be applied, so a HAR of many more is
/// refused from a count that allocates nothing.
pub const MAX_ENTRIES: usize = 4 * MAX_RESOURCES;

/// How many entries `log.entries` holds, counted without building them (`None`: not that shape;
/// the full parse says why).
fn count_entries(text: &str) -> Option<usize> {
    struct Count(usize);
    impl<'de> Deserialize<'de> for Count {
        fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct Counter;
            impl<'de> Visitor<'de> for Counter {
                type Value = Count;
                fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                    f.write_str("an array")
                }
                fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Count, A::Error> {
                    let mut n = 0;
                    while seq.next_element::<IgnoredAny>()?.is_some() {
                        n += 1;
                    }
                    Ok(Count(n))
                }
            }
            d.deserialize_seq(Counter)
        }
    }
    #[derive(Deserialize)]
    struct Log {
        entries: Count,
    }
    #[derive(Deserialize)]
    struct Har {
        log: Log,
    }
    serde_json::from_str::<Har>(text)
        .ok()
        .map(|h| h.log.entries.0)
}

pub fn page_from_har(text: &str, origin: &str, name: &str) -> Result<Page, ManifestError> {
    let err = |message: String| ManifestError {
        origin: origin.to_string(),
        message,
    };
    // counted first: a tree of each of 200,000 entries took longer than the refusal may
    if let Some(n) = count_entries(text).filter(|n| *n > MAX_ENTRIES) {
        return Err(err(format!(
            "{n} entries; at most {MAX_ENTRIES} are read (and {MAX_RESOURCES} resources from \
             its document on)"
        )));
    }
    let har: Value = serde_json::from_str(text).map_err(|e| {
        err(format!(
            "{}:{}: not a HAR file (JSON): {e}",
            e.line(),
            e.column()
        ))
    })?;
    let Some(entries) = har["log"]["entries"].as_array() else {
        return Err(err(
            "no log.entries: a HAR file is {\"log\": {\"entries\": [...]}}".into(),
        ));
    };
    // every entry's fields a page is made of, of the type HAR 1.2 gives them, or the entry and
    // field named (an entry of another type would be left out as if it were no GET): checked
    // before any other refusal but the count, which stays at once
    let check_entries = || -> Result<(), ManifestError> {
        for (i, e) in entries.iter().enumerate() {
            check_entry(e).map_err(|m| err(format!("log.entries[{i}]{m}")))?;
        }
        Ok(())
    };
    let mut kept: Vec<&Value> = entries
        .iter()
        .filter(|e| {
            e["request"]["method"].as_str() == Some("GET")
                && e["request"]["url"]
                    .as_str()
                    .is_some_and(|u| u.starts_with("http://") || u.starts_with("https://"))
                && e["response"]["status"]
                    .as_i64()
                    .is_some_and(|s| (200..300).contains(&s))
        })
        .collect();
    // ISO 8601 times of one capture sort as text
    kept.sort_by_key(|e| e["startedDateTime"].as_str().unwrap_or("").to_string());
    let Some(doc) = kept.iter().position(|e| kind_of(e) == Kind::Html) else {
        check_entries()?;
        return Err(err(format!(
            "none of its {} entries is a successful GET of an HTML document",
            entries.len()
        )));
    };
    let kept = &kept[doc..];
    // refused before any work on them: a page of more is not allowed anyway
    if kept.len() > MAX_RESOURCES {
        return Err(err(format!(
            "{} resources from its document on; at most {MAX_RESOURCES} are allowed",
            kept.len()
        )));
    }
    check_entries()?;
    let mut page = Page {
        name: name.to_string(),
        resources: Vec::with_capacity(kept.len()),
    };
    // each URL's first resource, and how many resources it has had: a lookup per entry, so the
    // import takes time in proportion to the entries
    let mut seen: HashMap<&str, (usize, usize)> = HashMap::with_capacity(kept.len());
    for (i, e) in kept.iter().enumerate() {
        let url = e["request"]["url"].as_str().unwrap_or_default();
        let kind = if i == 0 { Kind::Html } else { kind_of(e) };
        let parent = (i > 0).then(|| {
            initiator_url(e)
                .and_then(|u| seen.get(u).map(|(first, _)| *first))
                .unwrap_or(0)
        });
        let urgency = urgency_of(e);
        let critical = match kind {
            Kind::Html => i == 0,
            Kind::Css => true,
            Kind::Js => urgency.is_some_and(|u| u <= 1),
            _ => false,
        };
        let default = browser_priority(kind, critical);
        // the same URL twice (a reload, a redirect target): numbered to keep ids unique
        let (_, dup) = seen.entry(url).or_insert((i, 0));
        let id = if *dup == 0 {
            url.to_string()
        } else {
            format!("{url}#{}", *dup + 1)
        };
        *dup += 1;
        let bytes = size_of(e).map_err(|m| err(format!("entry {url}: {m}")))?;
        page.resources.push(Resource {
            id,
            kind,
            bytes,
            parent,
            critical,
            above_fold: 0.0,
            main_image: false,
            priority: Priority {
                urgency: urgency.unwrap_or(default.urgency),
                incremental: default.incremental,
            },
        });
    }
    if let Some(main) = page
        .resources
        .iter()
        .enumerate()
        // an empty image shows nothing: it cannot be the main one
        .filter(|(_, r)| r.kind == Kind::Image && r.bytes > 0)
        .max_by_key(|(i, r)| (r.bytes, std::cmp::Reverse(*i)))
        .map(|(i, _)| i)
    {
        page.resources[main].main_image = true;
        page.resources[main].above_fold = 1.0;
    }
    page.validate().map_err(err)?;
    Ok(page)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn entry(url: &str, t: &str, mime: &str, size: i64, extra: Value) -> Value {
        let mut e = json!({
            "startedDateTime": format!("2026-01-01T00:00:{t}Z"),
            "request": {"method": "GET", "url": url},
            "response": {"status": 200, "bodySize": -1,
                         "content": {"size": size, "mimeType": mime}},
        });
        if let (Some(o), Some(x)) = (e.as_object_mut(), extra.as_object()) {
            o.extend(x.clone());
        }
        e
    }

    fn har() -> String {
        json!({"log": {"entries": [
            entry("https://a.test/favicon.ico", "00.000", "image/x-icon", 100, json!({})),
            entry("https://a.test/", "00.100", "text/html", 30000, json!({"_priority": "VeryHigh"})),
            entry("https://a.test/s.css", "00.200", "text/css", 9000,
                  json!({"_initiator": {"type": "parser", "url": "https://a.test/"}})),
            entry("https://a.test/app.js", "00.210", "application/javascript", 50000,
                  json!({"_priority": "High", "_resourceType": "script"})),
            entry("https://cdn.test/f.woff2", "00.400", "font/woff2", 20000,
                  json!({"_initiator": {"type": "parser", "url": "https://a.test/s.css"}})),
            entry("https://a.test/big.jpg", "00.300", "image/jpeg", 200000,
                  json!({"_priority": "Low"})),
            entry("https://a.test/lazy.png", "00.500", "image/png", 5000,
                  json!({"_initiator": {"type": "script", "stack": {"callFrames": [
                      {"url": "https://a.test/app.js"}]}}})),
            // a failed request and a POST are not part of the page
            json!({"startedDateTime": "2026-01-01T00:00:00.600Z",
                   "request": {"method": "GET", "url": "https://a.test/404"},
                   "response": {"status": 404, "content": {"size": 10}}}),
            json!({"startedDateTime": "2026-01-01T00:00:00.700Z",
                   "request": {"method": "POST", "url": "https://a.test/beacon"},
                   "response": {"status": 204, "content": {"size": 0}}}),
        ]}})
        .to_string()
    }

    #[test]
    fn impossible_sizes_are_refused_and_an_empty_image_is_never_the_main_one() {
        let doc = entry("https://a.test/", "00.100", "text/html", 3000, json!({}));
        for (bad, what) in [
            (json!(-7), "-7"),
            (json!(1e30), "1e30"),
            (json!(2.5), "2.5"),
        ] {
            let mut img = entry("https://a.test/x.jpg", "00.200", "image/jpeg", 0, json!({}));
            img["response"]["content"]["size"] = bad;
            let text = json!({"log": {"entries": [doc.clone(), img]}}).to_string();
            let e = page_from_har(&text, "a.har", "a").unwrap_err().to_string();
            assert!(
                e.contains("entry https://a.test/x.jpg: response.content.size = ")
                    && e.contains("allowed: a whole number of bytes"),
                "{what}: {e}"
            );
        }
        let mut unknown = entry(
            "https://a.test/u.jpg",
            "00.200",
            "image/jpeg",
            -1,
            json!({}),
        );
        unknown["response"]["bodySize"] = json!(-1);
        let text = json!({"log": {"entries": [doc.clone(), unknown]}}).to_string();
        let e = page_from_har(&text, "a.har", "a").unwrap_err().to_string();
        assert!(e.contains("no size"), "{e}");
        // a 0-byte image (a tracking pixel) beside a real one: the real one is the main image
        let text = json!({"log": {"entries": [
            doc,
            entry("https://a.test/pixel.gif", "00.200", "image/gif", 0, json!({})),
            entry("https://a.test/hero.jpg", "00.300", "image/jpeg", 900, json!({})),
        ]}})
        .to_string();
        let p = page_from_har(&text, "a.har", "a").unwrap();
        let main: Vec<&str> = p
            .resources
            .iter()
            .filter(|r| r.main_image)
            .map(|r| r.id.as_str())
            .collect();
        assert_eq!(main, ["https://a.test/hero.jpg"]);
    }

    #[test]
    fn a_har_becomes_a_page_in_start_order_with_initiators_as_parents() {
        let p = page_from_har(&har(), "a.har", "a").unwrap();
        let ids: Vec<&str> = p.resources.iter().map(|r| r.id.as_str()).collect();
        assert_eq!(
            ids,
            [
                "https://a.test/",
                "https://a.test/s.css",
                "https://a.test/app.js",
                "https://a.test/big.jpg",
                "https://cdn.test/f.woff2",
                "https://a.test/lazy.png"
            ],
            "the favicon before the document is dropped, as are the 404 and the POST"
        );
        let r = &p.resources;
        assert_eq!(r[0].kind, Kind::Html);
        assert_eq!((r[1].kind, r[1].parent), (Kind::Css, Some(0)));
        assert_eq!(
            (r[4].kind, r[4].parent),
            (Kind::Font, Some(1)),
            "named by the stylesheet"
        );
        assert_eq!(r[5].parent, Some(2), "loaded by the script");
        assert!(
            r[2].critical && r[2].priority.urgency == 1,
            "a High script blocks rendering"
        );
        assert_eq!(r[3].priority.urgency, 3, "Low");
        assert!(
            r[3].main_image && r[3].above_fold == 1.0,
            "the largest image"
        );
        assert_eq!(r[4].bytes, 20_000);
        // and it is a valid manifest
        assert_eq!(Page::from_toml(&p.to_toml(), "round trip").unwrap(), p);
    }

    /// A HAR of a document and `n - 1` images of one URL, each started after the last.
    fn many(n: usize) -> String {
        let mut entries = vec![entry(
            "https://a.test/",
            "00.000",
            "text/html",
            1000,
            json!({}),
        )];
        entries.extend((1..n).map(|i| {
            let mut e = entry("https://a.test/i.png", "00.001", "image/png", 10, json!({}));
            e["startedDateTime"] = json!(format!(
                "2026-01-01T00:{:02}:{:02}.{:03}Z",
                i / 60_000,
                i / 1000 % 60,
                i % 1000
            ));
            e
        }));
        json!({"log": {"entries": entries}}).to_string()
    }

    #[test]
    fn a_har_of_too_many_entries_is_refused_at_once_and_one_of_many_repeats_imports() {
        // 200,000 entries: refused once they are counted (the import of each against every
        // earlier one took minutes)
        let text = many(200_000);
        let start = std::time::Instant::now();
        let e = page_from_har(&text, "big.har", "big")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("200000 entries") && e.contains("at most 40000"),
            "{e}"
        );
        assert!(
            start.elapsed() < std::time::Duration::from_secs(1),
            "{:?}",
            start.elapsed()
        );
        // fewer entries than that, but more resources than a page may have
        let e = page_from_har(&many(10_001), "big.har", "big")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("10001 resources from its document on") && e.contains("at most 10000"),
            "{e}"
        );
        // the limit itself: 10,000 resources, 9,999 of them one URL, numbered apart
        let p = page_from_har(&many(10_000), "limit.har", "limit").unwrap();
        assert_eq!(p.resources.len(), 10_000);
        assert_eq!(p.resources[9_999].id, "https://a.test/i.png#9999");
        assert!(p.resources[1..].iter().all(|r| r.parent == Some(0)));
    }

    #[test]
    fn what_is_not_a_page_says_why() {
        let e = page_from_har("{\"log\": 1", "x.har", "x")
            .unwrap_err()
            .to_string();
        assert!(e.contains("x.har") && e.contains("not a HAR file"), "{e}");
        let e = page_from_har("{}", "x.har", "x").unwrap_err().to_string();
        assert!(e.contains("log.entries"), "{e}");
        let only_images = json!({"log": {"entries": [
            entry("https://a.test/i.png", "00.000", "image/png", 5, json!({}))]}});
        let e = page_from_har(&only_images.to_string(), "x.har", "x")
            .unwrap_err()
            .to_string();
        assert!(e.contains("HTML document"), "{e}");
        // an entry of the wrong type, or with a field of one, is named with its field
        for (bad, says) in [
            (json!(5), "log.entries[1] = 5: allowed: an object"),
            (
                json!({"request": 5, "response": {}}),
                "log.entries[1].request = 5: allowed",
            ),
            (
                json!({"request": {"method": "GET", "url": ["x"]}, "response": {"status": 200}}),
                r#"log.entries[1].request.url = ["x"]: allowed: a string"#,
            ),
            (
                json!({"request": {"method": "GET", "url": "https://a.test/"},
                       "response": {"status": "200"}}),
                r#"log.entries[1].response.status = "200": allowed: a whole number"#,
            ),
            (
                json!({"request": {"url": "https://a.test/"}, "response": {"status": 200}}),
                "log.entries[1].request.method: missing",
            ),
        ] {
            let page = json!({"log": {"entries": [
                entry("https://a.test/", "00.000", "text/html", 5, json!({})), bad]}});
            let e = page_from_har(&page.to_string(), "x.har", "x")
                .unwrap_err()
                .to_string();
            assert!(e.contains("x.har") && e.contains(says), "{e}");
        }
    }
}
