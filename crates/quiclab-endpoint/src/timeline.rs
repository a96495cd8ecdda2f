//! Where servers write their connections' timelines: [`TimelineSample`] JSON lines, one writer
//! shared by every connection of a run (a line is written whole under a lock).

use std::io::Write;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use quiclab_model::record::TimelineSample;

/// How often a server samples each connection for its timeline. Timelines promise a sample at
/// least every 5 ms; sampling every 4 ms keeps that promise when ticks come late on a busy host
/// (a late tick is skipped, not made up).
pub const TIMELINE_INTERVAL: Duration = Duration::from_millis(4);

/// A timeline file shared by a server's connections.
#[derive(Clone)]
pub struct TimelineWriter(Arc<Mutex<Box<dyn Write + Send>>>);

impl TimelineWriter {
    pub fn new(w: Box<dyn Write + Send>) -> TimelineWriter {
        TimelineWriter(Arc::new(Mutex::new(w)))
    }

    fn lock(&self) -> MutexGuard<'_, Box<dyn Write + Send>> {
        // A writer whose holder panicked mid-line is still usable: at worst one line is cut.
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Writes one sample as a line.
    pub fn write(&self, sample: &TimelineSample) -> std::io::Result<()> {
        let line = serde_json::to_string(sample).map_err(std::io::Error::other)?;
        writeln!(self.lock(), "{line}")
    }

    pub fn flush(&self) -> std::io::Result<()> {
        self.lock().flush()
    }
}
