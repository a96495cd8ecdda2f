//! A real browser as a user runs it: `quiclab serve --root` holding a page's site behind
//! `quiclab link`, loaded by `quiclab browse` (Chromium, headless, as root in the client
//! namespace). Asserted from the browser's own network events: every resource arrived over the
//! protocol asked for (no silent fallback), the content was real (scripts ran, images decoded,
//! fonts loaded), and the filmstrip's times are those of the network.

use serde_json::Value;

mod common;
use common::{TempDir, assert_root};

/// One way of the link: 10 ms, so a round trip takes at least 20 ms.
const RTT_MS: f64 = 20.0;

fn browse(page: &str, http: &str, dir: &std::path::Path) -> Value {
    let bin = env!("CARGO_BIN_EXE_quiclab");
    let www = dir.join("www");
    let out = common::quiclab()
        .args(["browse", "--page", page, "--write-site"])
        .arg(&www)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let cert = dir.join("cert.pem");
    let server = format!(
        "exec {bin} serve --listen '[::]:443' --root {} --write-cert {}",
        www.display(),
        cert.display()
    );
    let client = format!(
        "exec {bin} browse --json --http {http} --page {page} --cacert {} --netlog {} https://$QUICLAB_SERVER",
        cert.display(),
        dir.join(format!("netlog-{http}.json")).display()
    );
    let (stdout, _) = common::link_output(
        &["--rate", "20mbit", "--delay", "10ms", "--queue", "4mb"],
        &server,
        &client,
        0,
    );
    stdout
        .lines()
        .find(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap())
        .unwrap_or_else(|| panic!("no record:\n{stdout}"))
}

#[test]
fn chromium_loads_the_real_page_over_the_protocol_asked_for() {
    assert_root();
    let dir = TempDir::new("browse");
    for (http, proto) in [("3", "h3"), ("2", "h2")] {
        let rec = browse("medium", http, &dir);
        assert!(rec["error"].is_null(), "HTTP/{http}: {rec}");
        let res = rec["resources"].as_array().unwrap();
        assert_eq!(res.len(), 59);
        for r in res {
            assert_eq!(r["protocol"], proto, "HTTP/{http}: {r}");
            // a request needs a round trip before its first byte
            let (start, first, last) = (
                r["start_ms"].as_f64().unwrap(),
                r["first_byte_ms"].as_f64().unwrap(),
                r["last_byte_ms"].as_f64().unwrap(),
            );
            assert!(first - start >= RTT_MS - 1.0 && last >= first, "{r}");
        }
        assert_eq!(rec["connections"], 1, "one connection: {rec}");
        let b = &rec["browser"];
        assert_eq!(b["protocols"], serde_json::json!([proto]));
        // the medium page: 5 blocking, 4 asynchronous and 3 script-loaded scripts, 33 images in
        // the document plus the main image, 3 fonts from its stylesheets
        assert_eq!(b["scripts_run"], 12, "{b}");
        assert_eq!(
            (b["images"].clone(), b["images_decoded"].clone()),
            (34.into(), 34.into())
        );
        assert_eq!(
            (b["fonts"].clone(), b["fonts_loaded"].clone()),
            (3.into(), 3.into())
        );
        assert_eq!(b["extra_requests"], 0, "{b}");
        // the page paints after its render-blocking resources arrived, and is visually
        // complete by its last visible resource plus a few frames (60 per second)
        let last_byte = res
            .iter()
            .map(|r| r["last_byte_ms"].as_f64().unwrap())
            .fold(0.0, f64::max);
        let load = b["load_event_ms"].as_f64().unwrap();
        assert!(
            load >= last_byte - 1.0,
            "load event {load} before the last byte {last_byte}"
        );
        let vc = b["visually_complete_ms"].as_f64().unwrap();
        let model_vc = b["model"]["visual_complete_ms"].as_f64().unwrap();
        assert!(
            vc >= model_vc - 1.0 && vc <= model_vc + 150.0,
            "{vc} vs {model_vc}"
        );
        assert!(b["frames"].as_u64().unwrap() >= 3, "{b}");
        let netlog = std::fs::read_to_string(dir.join(format!("netlog-{http}.json"))).unwrap();
        assert!(
            netlog.starts_with('{') && netlog.len() > 10_000,
            "the net-log is kept"
        );
    }
}
