//! What `quiclab serve` and `quiclab get` record beyond their own output, shared by both.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

#[derive(Args, Clone, Debug)]
#[command(next_help_heading = "Recording")]
pub struct RecordArgs {
    /// The emulated path's minimum RTT (e.g. 50ms for `quiclab link --delay 25ms`). RTT samples
    /// below it are physically impossible (a mis-attributed acknowledgement) and are counted in
    /// records and timelines as impossible_rtt_samples: every QUIC sample; for TCP, whose kernel
    /// keeps only its minimum, a minimum below it counts as one.
    #[arg(long, value_name = "DURATION", value_parser = duration)]
    pub path_min_rtt: Option<Duration>,
    /// Write one qlog file per QUIC connection into this directory (created if missing):
    /// server-N.sqlog / client-N.sqlog, JSON-SEQ qlog 0.3 that qvis reads (packets sent,
    /// received and lost, congestion window, bytes in flight, RTTs, congestion states; the
    /// congestion controller is named in the trace's description).
    #[arg(long, value_name = "DIR")]
    pub qlog_dir: Option<PathBuf>,
}

impl RecordArgs {
    pub fn path_min_rtt_us(&self) -> Option<u64> {
        self.path_min_rtt.map(|d| d.as_micros() as u64)
    }
}

/// A duration as `quiclab link` reads them (`25ms`, `1.5s`).
pub fn duration(s: &str) -> Result<Duration, String> {
    quiclab_link::units::parse_duration(s).map_err(|e| e.to_string())
}
