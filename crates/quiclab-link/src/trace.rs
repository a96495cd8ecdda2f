//! Mahimahi link traces: one line per 1500-byte delivery opportunity, the time in milliseconds
//! since the start of the trace. The trace repeats with a period equal to its last timestamp.

use std::io::BufRead;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// Bytes one delivery opportunity carries (Mahimahi's MTU-sized slot).
pub const OPPORTUNITY_BYTES: u32 = 1500;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TraceError {
    #[error("line {line}: {text:?} is not a whole number of milliseconds")]
    NotANumber {
        line: usize,
        /// The line's start (at most [`EXCERPT`] characters).
        text: String,
    },
    #[error(
        "line {line}: {ms} ms comes before the previous line's {prev} ms; timestamps must not decrease"
    )]
    Decreasing { line: usize, ms: u64, prev: u64 },
    #[error("the trace has no delivery opportunities")]
    Empty,
    #[error("the trace's last timestamp is 0 ms; its period must be positive")]
    ZeroPeriod,
    #[error("{0}")]
    Io(String),
}

/// The most characters of a bad line an error quotes.
pub const EXCERPT: usize = 40;
/// The largest trace file read, in bytes (a day of a 100 Mbit/s trace is about 100 MB less
/// than this; a larger file is more likely a mistake, such as /dev/zero).
pub const MAX_FILE_BYTES: u64 = 256 << 20;

/// A parsed trace. Cloning it is cheap: conditions sharing a trace file share its data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Trace {
    ms: Arc<[u64]>,
}

impl Trace {
    /// Parses Mahimahi's format; blank lines and lines starting with `#` are ignored.
    pub fn parse(text: &str) -> Result<Trace, TraceError> {
        Self::read(text.as_bytes())
    }

    /// The same from a reader, line by line, stopping at the first bad line (which the error
    /// quotes in part: a binary file yields a short message).
    pub fn read(mut r: impl BufRead) -> Result<Trace, TraceError> {
        let mut ms = Vec::new();
        let mut buf = Vec::new();
        let mut line = 0;
        loop {
            buf.clear();
            if r.read_until(b'\n', &mut buf)
                .map_err(|e| TraceError::Io(e.to_string()))?
                == 0
            {
                break;
            }
            line += 1;
            let raw = String::from_utf8_lossy(&buf);
            let t = raw.trim();
            if t.is_empty() || t.starts_with('#') {
                continue;
            }
            let v: u64 = t.parse().map_err(|_| TraceError::NotANumber {
                line,
                text: t.chars().take(EXCERPT).collect(),
            })?;
            if let Some(&prev) = ms.last()
                && v < prev
            {
                return Err(TraceError::Decreasing { line, ms: v, prev });
            }
            ms.push(v);
        }
        Self::from_ms(ms)
    }

    /// Reads a trace file: a regular file (a FIFO or a device is refused, not waited on or
    /// read forever) of at most [`MAX_FILE_BYTES`], by the reader of every input file
    /// ([`quiclab_model::input`]).
    pub fn read_file(path: &Path) -> Result<Trace, TraceError> {
        // the caller names the file
        let bytes = quiclab_model::input::read(path, "a trace file", MAX_FILE_BYTES)
            .map_err(|e| TraceError::Io(e.why.to_string()))?;
        Self::read(bytes.as_slice())
    }

    /// Whether two traces are one in memory (read once, shared).
    pub fn shares_data(&self, other: &Trace) -> bool {
        Arc::ptr_eq(&self.ms, &other.ms)
    }

    pub fn from_ms(ms: Vec<u64>) -> Result<Trace, TraceError> {
        match ms.last() {
            None => Err(TraceError::Empty),
            Some(0) => Err(TraceError::ZeroPeriod),
            Some(_) if ms.windows(2).any(|w| w[1] < w[0]) => Err(TraceError::Decreasing {
                line: 0,
                ms: 0,
                prev: 0,
            }),
            Some(_) => Ok(Trace { ms: ms.into() }),
        }
    }

    /// Length of one cycle.
    pub fn period(&self) -> Duration {
        Duration::from_millis(*self.ms.last().unwrap_or(&1))
    }

    pub fn opportunities_per_period(&self) -> usize {
        self.ms.len()
    }

    /// Mean rate in bits per second.
    pub fn mean_bps(&self) -> f64 {
        self.ms.len() as f64 * f64::from(OPPORTUNITY_BYTES) * 8.0 / self.period().as_secs_f64()
    }

    /// Bytes the trace carries in `d` at its mean rate (rounded down).
    pub fn bytes_in(&self, d: Duration) -> u64 {
        let per_period = self.ms.len() as u128 * u128::from(OPPORTUNITY_BYTES);
        u64::try_from(per_period * d.as_nanos() / self.period().as_nanos()).unwrap_or(u64::MAX)
    }

    /// Time of opportunity `(cycle, pos)`.
    pub(crate) fn at(&self, cycle: u64, pos: usize) -> Duration {
        self.period() * (cycle as u32) + Duration::from_millis(self.ms[pos])
    }

    /// The opportunity after `(cycle, pos)`.
    pub(crate) fn next(&self, cycle: u64, pos: usize) -> (u64, usize) {
        if pos + 1 < self.ms.len() {
            (cycle, pos + 1)
        } else {
            (cycle + 1, 0)
        }
    }

    /// The first opportunity at or after `t`.
    pub(crate) fn first_at_or_after(&self, t: Duration) -> (u64, usize) {
        let period_ns = self.period().as_nanos();
        let cycle = (t.as_nanos() / period_ns) as u64;
        let offset = t - self.period() * (cycle as u32);
        // An opportunity stamped with the full period belongs to the previous cycle but falls on
        // this cycle's start.
        if cycle > 0 {
            let late = offset + self.period();
            let pos = self
                .ms
                .partition_point(|&m| Duration::from_millis(m) < late);
            if pos < self.ms.len() {
                return (cycle - 1, pos);
            }
        }
        let pos = self
            .ms
            .partition_point(|&m| Duration::from_millis(m) < offset);
        if pos < self.ms.len() {
            (cycle, pos)
        } else {
            (cycle + 1, 0)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_mahimahi_format() {
        let t = Trace::parse("# 12 Mbit/s\n1\n1\n2\n\n4\n").unwrap();
        assert_eq!(t.period(), Duration::from_millis(4));
        assert_eq!(t.opportunities_per_period(), 4);
        assert_eq!(t.mean_bps(), 4.0 * 1500.0 * 8.0 / 0.004);
        assert_eq!(
            Trace::parse("3\n2\n"),
            Err(TraceError::Decreasing {
                line: 2,
                ms: 2,
                prev: 3
            })
        );
        assert!(matches!(
            Trace::parse("1\nx\n"),
            Err(TraceError::NotANumber { line: 2, .. })
        ));
        assert_eq!(Trace::parse(""), Err(TraceError::Empty));
        // a binary file: stopped at its first line, quoted in part
        let binary: Vec<u8> = (0..=255u8).cycle().take(400_000).collect();
        let e = Trace::read(&binary[..]).unwrap_err();
        assert!(matches!(e, TraceError::NotANumber { line: 1, .. }), "{e}");
        assert!(e.to_string().len() < 200, "{e}");
    }

    #[test]
    fn only_regular_files_of_bounded_size_are_read() {
        for special in ["/dev/zero", "/dev/null", "/"] {
            let e = Trace::read_file(Path::new(special)).unwrap_err();
            assert!(
                e.to_string().contains("not a regular file"),
                "{special}: {e}"
            );
        }
        let dir = std::env::temp_dir().join(format!("quiclab-trace-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let big = dir.join("big.trace");
        let f = std::fs::File::create(&big).unwrap();
        f.set_len(MAX_FILE_BYTES + 1).unwrap();
        let e = Trace::read_file(&big).unwrap_err();
        assert!(e.to_string().contains("at most 256 MiB"), "{e}");
        let good = dir.join("good.trace");
        std::fs::write(&good, "1\n2\n").unwrap();
        assert_eq!(
            Trace::read_file(&good).unwrap().opportunities_per_period(),
            2
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn finds_opportunities_across_cycles() {
        let t = Trace::parse("1\n3\n4\n").unwrap();
        assert_eq!(t.first_at_or_after(Duration::ZERO), (0, 0));
        assert_eq!(t.first_at_or_after(Duration::from_micros(1500)), (0, 1));
        assert_eq!(t.first_at_or_after(Duration::from_millis(4)), (0, 2));
        assert_eq!(t.first_at_or_after(Duration::from_micros(4001)), (1, 0));
        assert_eq!(t.at(1, 0), Duration::from_millis(5));
        assert_eq!(t.next(0, 2), (1, 0));
    }
}
