//! Where servers write their connections' timelines: [`TimelineSample`] JSON lines, one writer
//! shared by every connection of a run. Lines go to a thread of the writer's own, which does
//! the file's I/O: a write the kernel holds up (its dirty pages throttled on a busy disk) then
//! delays neither the sampling, nor the connections served on the same runtime.

use std::io::Write;
use std::sync::mpsc::{Sender, SyncSender, channel, sync_channel};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use quiclab_model::record::TimelineSample;

/// How often a server samples each connection for its timeline. Timelines promise a sample at
/// least every 5 ms; sampling every 4 ms keeps that promise when ticks come late on a busy host
/// (a late tick is skipped, not made up).
pub const TIMELINE_INTERVAL: Duration = Duration::from_millis(4);

/// A timeline file shared by a server's connections.
#[derive(Clone)]
pub struct TimelineWriter {
    lines: Sender<Line>,
    /// The first error of the writing thread, reported by the next call.
    failed: Arc<Mutex<Option<std::io::Error>>>,
}

enum Line {
    Sample(String),
    /// Flush, then say how it went.
    Flush(SyncSender<std::io::Result<()>>),
}

impl TimelineWriter {
    /// A writer of `w`, written by a thread that ends when the last clone is dropped (after
    /// writing every line and flushing).
    pub fn new(mut w: Box<dyn Write + Send>) -> TimelineWriter {
        let (lines, rx) = channel::<Line>();
        let failed = Arc::new(Mutex::new(None));
        let report = failed.clone();
        std::thread::Builder::new()
            .name("timeline".into())
            .spawn(move || {
                let mut broken = false;
                for line in rx {
                    match line {
                        Line::Sample(l) if !broken => {
                            if let Err(e) = writeln!(w, "{l}") {
                                broken = true;
                                *report.lock().unwrap_or_else(|e| e.into_inner()) = Some(e);
                            }
                        }
                        Line::Sample(_) => {}
                        Line::Flush(done) => {
                            let _ = done.send(w.flush());
                        }
                    }
                }
                let _ = w.flush();
            })
            .expect("a thread can be started");
        TimelineWriter { lines, failed }
    }

    fn error(&self) -> std::io::Result<()> {
        match self.failed.lock().unwrap_or_else(|e| e.into_inner()).take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Writes one sample as a line (an error of an earlier line's write is reported here).
    pub fn write(&self, sample: &TimelineSample) -> std::io::Result<()> {
        self.error()?;
        let line = serde_json::to_string(sample).map_err(std::io::Error::other)?;
        self.lines
            .send(Line::Sample(line))
            .map_err(|_| std::io::Error::other("the timeline's writer has ended"))
    }

    /// Writes every line sent so far to the file, and flushes it.
    pub fn flush(&self) -> std::io::Result<()> {
        self.error()?;
        let (done, ack) = sync_channel(1);
        self.lines
            .send(Line::Flush(done))
            .map_err(|_| std::io::Error::other("the timeline's writer has ended"))?;
        ack.recv()
            .map_err(|_| std::io::Error::other("the timeline's writer has ended"))??;
        self.error()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file that takes its time: every write waits.
    struct Slow(Arc<Mutex<Vec<u8>>>);

    impl Write for Slow {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            std::thread::sleep(Duration::from_millis(50));
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// A sample at `t_us` with nothing else known.
    fn sample(t_us: u64) -> TimelineSample {
        serde_json::from_value(serde_json::json!({
            "transport": "quic", "connection": 0, "t_us": t_us, "congestion_event": false
        }))
        .unwrap()
    }

    #[test]
    fn a_slow_file_holds_up_no_sample_and_loses_none() {
        let out = Arc::new(Mutex::new(Vec::new()));
        let w = TimelineWriter::new(Box::new(Slow(out.clone())));
        let start = std::time::Instant::now();
        for t in 0..10 {
            w.write(&sample(t)).unwrap();
        }
        // ten writes of 50 ms each went to the writer's thread
        assert!(
            start.elapsed() < Duration::from_millis(50),
            "{:?}",
            start.elapsed()
        );
        w.flush().unwrap();
        let text = String::from_utf8(out.lock().unwrap().clone()).unwrap();
        let ts: Vec<u64> = text
            .lines()
            .map(|l| serde_json::from_str::<TimelineSample>(l).unwrap().t_us)
            .collect();
        assert_eq!(ts, (0..10).collect::<Vec<_>>());
    }

    struct Full;

    impl Write for Full {
        fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
            Err(std::io::Error::other("no space left"))
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_failed_write_is_reported() {
        let w = TimelineWriter::new(Box::new(Full));
        w.write(&sample(1)).unwrap();
        let e = w.flush().unwrap_err();
        assert!(e.to_string().contains("no space left"), "{e}");
    }
}
