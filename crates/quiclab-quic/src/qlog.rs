//! One qlog file per QUIC connection (JSON-SEQ, qlog 0.3, as qvis reads it).
//!
//! quinn writes the transport's own events into it (`transport:packet_sent`,
//! `transport:packet_received`, `recovery:packet_lost`, `recovery:metrics_updated` with the
//! congestion window, bytes in flight and RTTs); the congestion controller's
//! [`Recorder`](crate::recording::Recorder) adds `recovery:congestion_state_updated`
//! (slow start, congestion avoidance, recovery) through [`QlogFile`] as a
//! [`CcObserver`]. Both write from inside quinn's connection processing, one event after the
//! other, into one buffered file; the trace's title names the connection and its description
//! the congestion controller.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use qlog::events::quic::{CongestionStateUpdated, CongestionStateUpdatedTrigger};
use qlog::events::{Event, EventData};

use crate::recording::{CcObserver, CcSnapshot, RttFacts};

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
struct Shared(Arc<Mutex<BufWriter<File>>>);

impl Shared {
    fn lock(&self) -> MutexGuard<'_, BufWriter<File>> {
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

impl QlogFile {
    /// Creates `path` and the quinn qlog stream writing into it; `title` names the connection,
    /// `description` its settings (congestion controller first).
    pub fn create(
        path: &Path,
        title: String,
        description: String,
    ) -> io::Result<(Arc<QlogFile>, quinn::QlogStream)> {
        let file = Shared(Arc::new(Mutex::new(BufWriter::new(File::create(path)?))));
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
