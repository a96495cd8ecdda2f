//! `segments`: `count` GETs one after another on one connection, of sizes drawn per iteration,
//! like a video player fetching segments (study S3). The report's playback estimate reads the
//! stream rate and the player buffer.

use std::time::Duration;

use quiclab_link::rng::mix;
use quiclab_link::units;
use quiclab_model::campaign::{
    DEFAULT_PLAYER_BUFFER_MS, DEFAULT_STREAM_RATE_BPS, Metrics, Workload,
};
use quiclab_model::task::{Ask, Connection, Get, Request};
use serde_json::json;

use super::{ClientPhase, Ran, TrialCtx, WorkloadKind, requests};
use crate::keys::{PlanError, WorkloadKeys};
use crate::stacks::Capability;

pub struct Segments;

/// Segment sizes of an iteration: `count` sizes drawn uniformly from `min..=max` by a stream
/// seeded with the iteration's seed, so every arm and condition of the iteration fetches the same.
pub fn segment_sizes(seed: u64, count: u32, min: u64, max: u64) -> Vec<u64> {
    let mut state = mix(seed ^ 0x5e9_u64);
    (0..count)
        .map(|_| {
            state = mix(state);
            min + state % (max - min + 1)
        })
        .collect()
}

impl WorkloadKind for Segments {
    fn kind(&self) -> &'static str {
        "segments"
    }

    fn keys(&self) -> &'static [&'static str] {
        &[
            "segments",
            "segment-min",
            "segment-max",
            "stream-rate",
            "player-buffer",
        ]
    }

    fn needs(&self) -> Capability {
        // every segment on the player's one connection
        Capability::GetReused
    }

    fn parse(&self, keys: &WorkloadKeys) -> Result<(Workload, Vec<u64>), PlanError> {
        let count = keys.int("segments", (1, 1000))?;
        let size = |key: &str| match keys.get(key) {
            Some(v) => Ok((keys.size(v)?, v.span())),
            None => Err(keys.missing(key)),
        };
        let (min, _) = size("segment-min")?;
        let (max, max_at) = size("segment-max")?;
        if max < min {
            return Err(keys.err(
                Some(max_at),
                format!("segment-max ({max} bytes) is below segment-min ({min} bytes)"),
            ));
        }
        let stream_rate_bps = match keys.get("stream-rate") {
            Some(v) => {
                let raw = keys.scalar(v)?;
                match raw.parse::<units::Rate>() {
                    Ok(r) if r.bps() >= 1000 => r.bps(),
                    Ok(_) => {
                        return Err(keys.err(
                            Some(v.span()),
                            format!("stream-rate = {raw:?}: allowed: 1kbit or more"),
                        ));
                    }
                    Err(e) => return Err(keys.err(Some(v.span()), format!("stream-rate: {e}"))),
                }
            }
            None => DEFAULT_STREAM_RATE_BPS,
        };
        let player_buffer_ms = match keys.get("player-buffer") {
            Some(v) => {
                let raw = keys.scalar(v)?;
                match units::parse_duration(&raw) {
                    Ok(d) if d <= Duration::from_secs(600) => d.as_millis() as u64,
                    Ok(_) => {
                        return Err(keys.err(
                            Some(v.span()),
                            format!("player-buffer = {raw:?}: allowed: 0 to 10min"),
                        ));
                    }
                    Err(e) => {
                        return Err(keys.err(Some(v.span()), format!("player-buffer: {e}")));
                    }
                }
            }
            None => DEFAULT_PLAYER_BUFFER_MS,
        };
        Ok((
            Workload::Segments {
                count,
                min_bytes: min,
                max_bytes: max,
                stream_rate_bps,
                player_buffer_ms,
            },
            // the one nominal size: halfway between the smallest and the largest
            vec![min + (max - min) / 2],
        ))
    }

    fn grid(&self, w: &Workload, sizes: &[u64]) -> String {
        match *w {
            Workload::Segments {
                count,
                min_bytes,
                max_bytes,
                ..
            } => format!(
                "{count} segments of {} to {}",
                quiclab_model::units::size(min_bytes),
                quiclab_model::units::size(max_bytes)
            ),
            _ => format!("{} sizes", sizes.len()),
        }
    }

    fn trial(&self, w: &Workload, _size: u64, seed: u64) -> (Vec<u64>, serde_json::Value) {
        let Workload::Segments {
            count,
            min_bytes,
            max_bytes,
            ..
        } = *w
        else {
            return (Vec::new(), json!({"kind": "segments"}));
        };
        let sizes = segment_sizes(seed, count, min_bytes, max_bytes);
        let config = json!({"kind": "segments", "sizes": sizes, "connection": "reuse"});
        (sizes, config)
    }

    fn client(&self, t: &TrialCtx) -> ClientPhase {
        ClientPhase::Once(Request::recorded(Ask::Get(Get {
            urls: t.requests.iter().map(|&s| t.bytes_url(s)).collect(),
            connection: Connection::Reuse,
            repeat: 1,
            resume: false,
        })))
    }

    fn metrics(
        &self,
        t: &TrialCtx,
        ran: &Ran,
        requests_out: &mut serde_json::Value,
    ) -> Result<Metrics, String> {
        let records = requests::checked_records(t, ran, requests_out, requests::downloaded)?;
        let mut m = requests::records_metrics(t, ran, &records);
        if m.detail.is_empty() {
            // a sequence of one segment is still a sequence: the report reads segments from here
            m.detail = requests::detail(&records);
        }
        Ok(m)
    }
}
