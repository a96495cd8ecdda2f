//! One qlog file per QUIC connection (JSON-SEQ, qlog 0.3, as qvis reads it).
//!
//! quinn writes the transport's own events into it (`transport:packet_sent`,
//! `transport:packet_received`, `recovery:packet_lost`, `recovery:metrics_updated` with the
//! congestion window, bytes in flight and RTTs; the workspace's patch of quinn-proto,
//! `vendor/README.md`, adds each sent and received packet's frames and a received one's size); the congestion controller's
//! [`Recorder`](crate::recording::Recorder) adds `recovery:congestion_state_updated`
//! (slow start, congestion avoidance, recovery) through [`QlogFile`] as a
//! [`CcObserver`]. Both write from inside quinn's connection processing, one event after the
//! other, into one buffered file; the trace's title names the connection and its description
//! the congestion controller.
//!
//! Every record passes through `Rewriter` on its way to the file, which makes quinn's output
//! what the qlog 0.3 schema (and qvis) expects: the trace's vantage point is the connection's
//! side (quinn writes "unknown"); a sent or lost packet's size moves to `raw.length` (quinn puts
//! it in `header.length`, which names the long header's Length field; a lost packet that only
//! acknowledged has none, quinn counting it 0 bytes); RTTs are milliseconds
//! (quinn writes seconds); an unset slow-start threshold (`u64::MAX`) is left out; and the
//! congestion-state events quiclab adds carry the connection's group id, as do all of quinn's
//! (a client's quinn changes it after the handshake), so that a tool grouping events by
//! connection sees one connection.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use qlog::events::quic::{CongestionStateUpdated, CongestionStateUpdatedTrigger};
use qlog::events::{Event, EventData};

use crate::recording::{CcObserver, CcSnapshot, RttFacts};

/// Which end of the connection writes the trace (its qlog vantage point).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Vantage {
    Client,
    Server,
}

impl Vantage {
    fn name(self) -> &'static str {
        match self {
            Vantage::Client => "client",
            Vantage::Server => "server",
        }
    }
}

/// Where a connection's qlog goes, what its trace is called, and from which end.
pub struct QlogTarget {
    pub path: std::path::PathBuf,
    pub title: String,
    pub vantage: Vantage,
}

/// A connection's qlog file, shared by quinn's qlog streamer and the controller's recorder.
pub struct QlogFile {
    file: Shared,
    start: Instant,
    state: Mutex<CcState>,
}

/// The congestion state last written, and when the current recovery period started.
#[derive(Default)]
struct CcState {
    name: Option<&'static str>,
    recovery_since: Option<Instant>,
}

#[derive(Clone)]
struct Shared(Arc<Mutex<Rewriter<BufWriter<File>>>>);

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Rewriter<BufWriter<File>>> {
        // A holder that panicked mid-event leaves at worst one record cut; the rest is valid.
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Write for Shared {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.lock().write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.lock().flush()
    }
}

/// Takes JSON-SEQ records written in pieces, and writes each, complete, as the schema wants it
/// (see the module's notes); a record that is not JSON passes unchanged.
struct Rewriter<W: Write> {
    out: W,
    vantage: Vantage,
    /// Bytes of a record not yet complete.
    pending: Vec<u8>,
    /// The connection's group id, from the first record of quinn's that has one.
    group: Option<serde_json::Value>,
}

/// RS, which starts every JSON-SEQ record.
const RS: u8 = 0x1e;

impl<W: Write> Rewriter<W> {
    fn new(out: W, vantage: Vantage) -> Self {
        Rewriter {
            out,
            vantage,
            pending: Vec::new(),
            group: None,
        }
    }

    fn record(&mut self, line: &[u8]) -> io::Result<()> {
        let body = line.strip_prefix(&[RS]).unwrap_or(line);
        let Ok(mut v) = serde_json::from_slice::<serde_json::Value>(body) else {
            self.out.write_all(line)?;
            return self.out.write_all(b"\n");
        };
        self.fix(&mut v);
        let mut record = Vec::with_capacity(body.len() + 16);
        record.push(RS);
        serde_json::to_writer(&mut record, &v)?;
        record.push(b'\n');
        self.out.write_all(&record)
    }

    fn fix(&mut self, v: &mut serde_json::Value) {
        use serde_json::{Value, json};
        if v.get("qlog_version").is_some() {
            v["trace"]["vantage_point"] = json!({"type": self.vantage.name()});
            return;
        }
        // one file, one connection, one group id: the first quinn gives (a client's quinn
        // moves from the destination id it chose to the server's after the handshake)
        if self.group.is_none() {
            self.group = v.get("group_id").cloned();
        }
        if let (Some(g), Some(o)) = (&self.group, v.as_object_mut()) {
            o.insert("group_id".into(), g.clone());
        }
        let name = v["name"].as_str().unwrap_or_default().to_string();
        let data = &mut v["data"];
        match name.as_str() {
            "transport:packet_sent" | "recovery:packet_lost" => {
                let header = data.get_mut("header").and_then(Value::as_object_mut);
                // quinn counts no bytes for a packet that only acknowledges: its size is
                // unknown, not 0
                if let Some(len) = header.and_then(|h| h.remove("length"))
                    && len.as_u64() != Some(0)
                {
                    data["raw"] = json!({ "length": len });
                }
            }
            "recovery:metrics_updated" => {
                if let Some(m) = data.as_object_mut() {
                    for key in ["min_rtt", "smoothed_rtt", "latest_rtt", "rtt_variance"] {
                        if let Some(s) = m.get(key).and_then(Value::as_f64) {
                            // seconds (f32) to milliseconds, to the microsecond
                            m.insert(key.into(), json!((s * 1e6).round() / 1e3));
                        }
                    }
                    if m.get("ssthresh").and_then(Value::as_u64) == Some(u64::MAX) {
                        m.remove("ssthresh");
                    }
                }
            }
            _ => {}
        }
    }
}

impl<W: Write> Write for Rewriter<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        // a compact JSON record holds no line break but its last, and the bytes pending hold
        // none: only the new ones are searched (a record comes in many small writes)
        let Some(first) = buf.iter().position(|&b| b == b'\n') else {
            self.pending.extend_from_slice(buf);
            return Ok(buf.len());
        };
        let mut line = std::mem::take(&mut self.pending);
        line.extend_from_slice(&buf[..first]);
        self.record(&line)?;
        let mut rest = &buf[first + 1..];
        while let Some(end) = rest.iter().position(|&b| b == b'\n') {
            self.record(&rest[..end])?;
            rest = &rest[end + 1..];
        }
        line.clear();
        line.extend_from_slice(rest);
        self.pending = line;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }
}

impl QlogFile {
    /// Creates the target's file and the quinn qlog stream writing into it; its title names the
    /// connection, `description` its settings (congestion controller first).
    pub fn create(
        target: &QlogTarget,
        description: String,
    ) -> io::Result<(Arc<QlogFile>, quinn::QlogStream)> {
        let path = &target.path;
        let title = target.title.clone();
        let file = Shared(Arc::new(Mutex::new(Rewriter::new(
            BufWriter::new(File::create(path)?),
            target.vantage,
        ))));
        let start = Instant::now();
        let mut config = quinn::QlogConfig::default();
        config
            .writer(Box::new(file.clone()))
            .title(Some(title))
            .description(Some(description))
            .start_time(start);
        let stream = config.into_stream().ok_or_else(|| {
            io::Error::other(format!("writing the qlog header to {}", path.display()))
        })?;
        let qlog = Arc::new(QlogFile {
            file,
            start,
            state: Mutex::new(CcState::default()),
        });
        Ok((qlog, stream))
    }

    /// Writes what is buffered (the file is also flushed when the last user drops it).
    pub fn flush(&self) -> io::Result<()> {
        self.file.lock().flush()
    }

    fn event(&self, now: Instant, data: EventData) {
        let t = now.saturating_duration_since(self.start).as_secs_f32() * 1000.0;
        if let Ok(json) = serde_json::to_string(&Event::with_time(t, data)) {
            // One write per record, so that it never interleaves with quinn's.
            let mut record = Vec::with_capacity(json.len() + 2);
            record.push(0x1e);
            record.extend_from_slice(json.as_bytes());
            record.push(b'\n');
            // A qlog that cannot be written loses events, never the connection.
            let _ = self.file.lock().write_all(&record);
        }
    }

    fn state(&self) -> MutexGuard<'_, CcState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn set_state(
        &self,
        now: Instant,
        new: &'static str,
        trigger: Option<CongestionStateUpdatedTrigger>,
    ) {
        let mut state = self.state();
        if state.name == Some(new) {
            return;
        }
        let old = state.name.replace(new);
        drop(state);
        self.event(
            now,
            EventData::CongestionStateUpdated(CongestionStateUpdated {
                old: old.map(str::to_string),
                new: new.to_string(),
                trigger,
            }),
        );
    }
}

impl CcObserver for QlogFile {
    fn on_acks(&self, now: Instant, newest: Option<Instant>, snap: &CcSnapshot, _rtt: RttFacts) {
        {
            // Recovery ends when a packet sent after it began is acknowledged (RFC 9002, 7.3.2).
            let mut state = self.state();
            match (state.recovery_since, newest) {
                (Some(since), Some(sent)) if sent > since => state.recovery_since = None,
                (Some(_), _) => return,
                _ => {}
            }
        }
        let state = match snap.ssthresh {
            Some(t) if snap.cwnd >= t => "congestion_avoidance",
            _ => "slow_start",
        };
        self.set_state(now, state, None);
    }

    fn on_congestion(&self, now: Instant, lost: u64, persistent: bool, _snap: &CcSnapshot) {
        let trigger = if persistent {
            Some(CongestionStateUpdatedTrigger::PersistentCongestion)
        } else if lost == 0 {
            Some(CongestionStateUpdatedTrigger::Ecn)
        } else {
            None
        };
        self.state().recovery_since = Some(now);
        self.set_state(now, "recovery", trigger);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    fn records(out: &[u8]) -> Vec<Value> {
        out.split(|&b| b == b'\n')
            .filter(|l| !l.is_empty())
            .map(|l| {
                assert_eq!(l[0], RS, "a record starts with RS");
                serde_json::from_slice(&l[1..]).unwrap()
            })
            .collect()
    }

    #[test]
    fn quinns_records_come_out_as_the_schema_wants_them_whatever_the_pieces() {
        let input = [
            r#"{"qlog_version":"0.3","qlog_format":"JSON-SEQ","trace":{"vantage_point":{"type":"unknown"}}}"#,
            r#"{"time":1.0,"name":"transport:packet_sent","data":{"header":{"packet_type":"initial","packet_number":0,"length":1200}},"group_id":"aa"}"#,
            r#"{"time":2.0,"name":"recovery:metrics_updated","data":{"min_rtt":0.0203,"smoothed_rtt":0.025,"latest_rtt":0.0215,"rtt_variance":0.005,"ssthresh":18446744073709551615,"congestion_window":12000}}"#,
            r#"{"time":3.0,"name":"recovery:packet_lost","data":{"header":{"packet_type":"1RTT","packet_number":7,"length":1252}},"group_id":"bb"}"#,
        ];
        let mut text = Vec::new();
        for r in input {
            text.push(RS);
            text.extend_from_slice(r.as_bytes());
            text.push(b'\n');
        }
        // quinn writes a record in several pieces: cut it anywhere, or several records at once
        let cut = |size: usize| {
            let mut w = Rewriter::new(Vec::new(), Vantage::Client);
            for piece in text.chunks(size) {
                w.write_all(piece).unwrap();
            }
            w.out
        };
        let whole = cut(text.len());
        for size in [1, 7, 150] {
            assert_eq!(cut(size), whole, "pieces of {size} bytes");
        }
        let out = records(&whole);
        assert_eq!(out.len(), 4);
        assert_eq!(out[0]["trace"]["vantage_point"]["type"], "client");
        assert_eq!(out[1]["data"]["raw"]["length"], 1200);
        assert!(out[1]["data"]["header"].get("length").is_none());
        let m = &out[2]["data"];
        assert_eq!(m["min_rtt"], 20.3);
        assert_eq!(m["smoothed_rtt"], 25.0);
        assert_eq!(m["latest_rtt"], 21.5);
        assert!(m.get("ssthresh").is_none());
        assert_eq!(m["congestion_window"], 12000);
        // every event carries the connection's first group id
        for e in &out[1..] {
            assert_eq!(e["group_id"], "aa", "{e}");
        }
        assert_eq!(out[3]["data"]["raw"]["length"], 1252);
    }

    #[test]
    fn a_record_that_is_not_json_passes_unchanged() {
        let mut w = Rewriter::new(Vec::new(), Vantage::Server);
        w.write_all(b"\x1e{not json\n").unwrap();
        assert_eq!(w.out, b"\x1e{not json\n");
    }
}
