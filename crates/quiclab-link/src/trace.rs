//! Mahimahi link traces: one line per 1500-byte delivery opportunity, the time in milliseconds
//! since the start of the trace. The trace repeats with a period equal to its last timestamp.

use std::time::Duration;

/// Bytes one delivery opportunity carries (Mahimahi's MTU-sized slot).
pub const OPPORTUNITY_BYTES: u32 = 1500;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TraceError {
    #[error("line {line}: {text:?} is not a whole number of milliseconds")]
    NotANumber { line: usize, text: String },
    #[error(
        "line {line}: {ms} ms comes before the previous line's {prev} ms; timestamps must not decrease"
    )]
    Decreasing { line: usize, ms: u64, prev: u64 },
    #[error("the trace has no delivery opportunities")]
    Empty,
    #[error("the trace's last timestamp is 0 ms; its period must be positive")]
    ZeroPeriod,
}

/// A parsed trace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Trace {
    ms: Vec<u64>,
}

impl Trace {
    /// Parses Mahimahi's format; blank lines and lines starting with `#` are ignored.
    pub fn parse(text: &str) -> Result<Trace, TraceError> {
        let mut ms = Vec::new();
        for (i, raw) in text.lines().enumerate() {
            let t = raw.trim();
            if t.is_empty() || t.starts_with('#') {
                continue;
            }
            let v: u64 = t.parse().map_err(|_| TraceError::NotANumber {
                line: i + 1,
                text: t.to_string(),
            })?;
            if let Some(&prev) = ms.last()
                && v < prev
            {
                return Err(TraceError::Decreasing {
                    line: i + 1,
                    ms: v,
                    prev,
                });
            }
            ms.push(v);
        }
        Self::from_ms(ms)
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
            Some(_) => Ok(Trace { ms }),
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
