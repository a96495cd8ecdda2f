//! The `pages` workload: which pages a plan loads, what `quiclab page` is told, and a trial's
//! metrics from its page record.

use std::ops::Range;
use std::path::Path;

use quiclab_external::qlog::Resent;
use quiclab_model::campaign::{
    BrowserDetail, Detail, Metrics, PageDetail, PageInfo, ResourceTimes, Workload,
};
use quiclab_netns::DirectionReport;
use quiclab_pages::page::{self, BUILTIN};
use quiclab_pages::page_client::PageRecord;
use toml::Spanned;

use crate::outputs::Sample;

/// A plan problem: where in the file (when known) and what.
pub(crate) type Problem = (Option<Range<usize>>, String);

/// `[workload] pages = [...]`: built-in page names or manifest files (relative to the plan's
/// folder). Each page's total bytes become its trial size, so two pages of equal size are
/// refused. Errors carry the span to point at.
pub(crate) fn parse_pages(
    v: Option<&Spanned<toml::Value>>,
    plan_file: &str,
) -> Result<(Workload, Vec<u64>), Problem> {
    let allowed = format!(
        "a list of pages: built-in {} or TOML manifest files (docs/pages.md)",
        BUILTIN.join(", ")
    );
    let Some(v) = v else {
        return Err((
            None,
            format!("[workload] needs pages, e.g. [\"small\", \"medium\", \"large\"]: {allowed}"),
        ));
    };
    let at = Some(v.span());
    let toml::Value::Array(items) = v.get_ref() else {
        return Err((at, format!("pages: allowed: {allowed}")));
    };
    if items.is_empty() {
        return Err((at, "pages: give at least one page".into()));
    }
    let mut pages: Vec<PageInfo> = Vec::new();
    for item in items {
        let toml::Value::String(name) = item else {
            return Err((at, format!("pages: {item} is not allowed: {allowed}")));
        };
        let source = if page::builtin(name).is_some() {
            name.clone()
        } else {
            // absolute, so that the trial's client finds it whatever its working directory
            let path = crate::keys::beside_plan(plan_file, name);
            std::fs::canonicalize(&path)
                .unwrap_or(path)
                .display()
                .to_string()
        };
        let p = page::load_manifest(&source).map_err(|e| (at.clone(), format!("pages: {e}")))?;
        let bytes = p.total_bytes();
        if let Some(other) = pages.iter().find(|o| o.bytes == bytes) {
            return Err((
                at,
                format!(
                    "pages: {name:?} and {:?} both have {bytes} bytes; a campaign tells its \
                     pages apart by their size, so each must differ",
                    other.name
                ),
            ));
        }
        pages.push(PageInfo {
            name: p.name.clone(),
            source,
            resources: p.resources.len() as u32,
            bytes,
        });
    }
    let sizes = pages.iter().map(|p| p.bytes).collect();
    Ok((Workload::Pages { pages }, sizes))
}

/// The page a trial of `size` loads.
pub(crate) fn page_for(workload: &Workload, size: u64) -> Option<&PageInfo> {
    match workload {
        Workload::Pages { pages } => pages.iter().find(|p| p.bytes == size),
        _ => None,
    }
}

/// A page trial's metrics: TTLB is the page load time, TTFB the document's first byte, the
/// handshake the first connection's; the sender's timeline and the link's drops as for GETs.
/// `Err` names what went wrong.
pub(crate) fn metrics(
    rec: &PageRecord,
    timeline: &[Sample],
    resent: Option<Resent>,
    reports: &[DirectionReport],
    min_rtt_ms: f64,
) -> Result<Metrics, String> {
    if let Some(e) = &rec.error {
        return Err(format!("page load failed: {e}"));
    }
    let Some(m) = &rec.metrics else {
        return Err("the page load did not complete".into());
    };
    let ms = |v: Option<f64>| v.unwrap_or(f64::NAN);
    let doc_first = rec.resources.first().and_then(|r| r.first_byte_ms);
    let last = timeline.last();
    let lost = crate::outputs::losses(timeline, resent);
    Ok(Metrics {
        ttlb_ms: m.plt_ms,
        ttfb_ms: ms(doc_first),
        handshake_ms: rec.handshake_ms,
        handshake_rtts: rec
            .handshake_ms
            .filter(|_| min_rtt_ms > 0.0)
            .map(|h| h / min_rtt_ms),
        hello_retry: rec.handshake.hello_retry,
        packets_lost: lost.packets_lost,
        bytes_resent: lost.bytes_resent,
        first_retransmit_offset: lost.first_retransmit_offset,
        impossible_rtt_samples: last.and_then(|s| s.impossible_rtt_samples),
        link_drops: reports.iter().map(|r| r.counters.dropped_total()).sum(),
        timeline: timeline
            .iter()
            .filter_map(|s| {
                Some(quiclab_model::campaign::TimelinePoint {
                    t_ms: s.t_ms,
                    acked_bytes: s.acked_bytes?,
                    cwnd_bytes: s.cwnd_bytes,
                    bytes_in_flight: s.bytes_in_flight,
                    rtt_ms: s.rtt_ms,
                    congestion_event: s.congestion_event,
                })
            })
            .collect(),
        detail: Detail {
            page: Some(PageDetail {
                page: rec.page.clone(),
                plt_ms: m.plt_ms,
                render_ms: m.render_ms,
                speed_index_ms: m.speed_index_ms,
                main_image_ms: m.main_image_ms,
                connections: rec.connections,
                resources: rec
                    .resources
                    .iter()
                    .map(|r| ResourceTimes {
                        id: r.id.clone(),
                        kind: r.kind.name().to_string(),
                        bytes: r.bytes,
                        urgency: r.urgency,
                        incremental: r.incremental,
                        critical: r.critical,
                        main_image: r.main_image,
                        connection: r.connection,
                        start_ms: ms(r.start_ms),
                        first_byte_ms: ms(r.first_byte_ms),
                        last_byte_ms: ms(r.last_byte_ms),
                    })
                    .collect(),
                browser: rec.browser.as_ref().map(|b| BrowserDetail {
                    browser: b.browser.clone(),
                    load_event_ms: b.load_event_ms,
                    first_contentful_paint_ms: b.first_contentful_paint_ms,
                    largest_contentful_paint_ms: b.largest_contentful_paint_ms,
                    speed_index_ms: b.speed_index_ms,
                    visually_complete_ms: b.visually_complete_ms,
                    model_plt_ms: b.model.as_ref().map(|m| m.plt_ms),
                    model_speed_index_ms: b.model.as_ref().map(|m| m.speed_index_ms),
                    protocols: b.protocols.clone(),
                }),
            }),
            ..Detail::default()
        },
    })
}

/// The page record `quiclab page --json` wrote, if any.
pub(crate) fn read_record(path: &Path) -> Option<PageRecord> {
    let text = std::fs::read_to_string(path).ok()?;
    text.lines()
        .filter(|l| l.starts_with('{'))
        .find_map(|l| serde_json::from_str(l).ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(list: &str) -> Result<(Workload, Vec<u64>), Problem> {
        let v: toml::Table = toml::from_str(&format!("pages = {list}")).unwrap();
        let v = Spanned::new(0..1, v["pages"].clone());
        parse_pages(Some(&v), "built-in pages")
    }

    #[test]
    fn built_in_pages_become_sizes_and_bad_ones_are_named() {
        let (w, sizes) = parse(r#"["small", "large"]"#).unwrap();
        let Workload::Pages { pages } = &w else {
            panic!("{w:?}")
        };
        assert_eq!(pages.len(), 2);
        assert_eq!(pages[0].resources, 18);
        assert_eq!(sizes, vec![pages[0].bytes, pages[1].bytes]);
        assert_eq!(page_for(&w, sizes[1]).unwrap().name, "large");
        let (_, e) = parse(r#"["small", "small"]"#).unwrap_err();
        assert!(e.contains("both have"), "{e}");
        let (_, e) = parse(r#"["tiny"]"#).unwrap_err();
        assert!(
            e.contains("tiny") && e.contains("small, medium, large"),
            "{e}"
        );
        let (_, e) = parse("[]").unwrap_err();
        assert!(e.contains("at least one"), "{e}");
    }

    #[test]
    fn the_built_in_plan_loads_every_page_and_sets_the_servers_scheduling() {
        use crate::plan::{Profile, parse};
        let text = include_str!("../../../plans/pages.toml");
        let quick = parse(text, "built-in pages", Profile::Quick).unwrap();
        assert_eq!(quick.sizes.len(), 3);
        assert!(quick.iterations < parse(text, "p", Profile::Full).unwrap().iterations);
        let fifo = quick.arms.iter().find(|a| a.name == "h3-fifo").unwrap();
        let knobs = fifo.server_knobs();
        let has = |k: &str, v: &str| knobs.iter().any(|(a, b)| a == k && b == v);
        assert!(has("quic-scheduling", "fifo"), "{knobs:?}");
        assert!(has("quic-priorities", "on"), "{knobs:?}");
        // the client is not told how the server schedules
        assert!(
            !fifo
                .client_knobs()
                .iter()
                .any(|(k, _)| k.contains("scheduling"))
        );
        let bad = text.replace("quic-scheduling = \"fifo\"", "quic-scheduling = \"lifo\"");
        let e = parse(&bad, "p.toml", Profile::Full).unwrap_err();
        assert!(e.message.contains("round-robin or fifo"), "{e}");
        let bad = text.replace(
            "pages = [\"small\", \"medium\", \"large\"]",
            "pages = [\"huge\"]",
        );
        let e = parse(&bad, "p.toml", Profile::Full).unwrap_err();
        assert!(e.line > 0 && e.message.contains("huge"), "{e}");
    }

    #[test]
    fn manifest_files_are_found_next_to_the_plan_and_passed_on_absolute() {
        let dir = std::env::temp_dir().join(format!("quiclab-pages-plan-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut p = page::builtin("small").unwrap();
        p.name = "mine".into();
        p.resources.truncate(3);
        std::fs::write(dir.join("mine.toml"), p.to_toml()).unwrap();
        let v: toml::Table = toml::from_str("pages = [\"mine.toml\", \"small\"]").unwrap();
        let v = Spanned::new(0..1, v["pages"].clone());
        let plan = dir.join("plan.toml").display().to_string();
        let (w, sizes) = parse_pages(Some(&v), &plan).unwrap();
        let mine = page_for(&w, sizes[0]).unwrap();
        assert_eq!((mine.name.as_str(), mine.resources), ("mine", 3));
        assert!(Path::new(&mine.source).is_absolute(), "{}", mine.source);
        assert_eq!(page::load_manifest(&mine.source).unwrap(), p);
        assert_eq!(page_for(&w, sizes[1]).unwrap().source, "small");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
