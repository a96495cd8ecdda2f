//! Human units: `10mbit`, `25ms`, `0.1%`, `64kb`, `100pkt`.
//!
//! Every parser returns a [`UnitError`] that names what was expected; callers wrap it with the
//! field name (see [`crate::config::ConfigError`]).

use std::fmt;
use std::time::Duration;

/// A value that could not be read, with what would have been accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{problem}; allowed: {allowed}")]
pub struct UnitError {
    pub problem: String,
    pub allowed: &'static str,
}

fn err(problem: impl Into<String>, allowed: &'static str) -> UnitError {
    UnitError {
        problem: problem.into(),
        allowed,
    }
}

/// Splits `"12.5ms"` into `(12.5, "ms")`.
fn split_number(s: &str) -> Option<(f64, String)> {
    let s = s.trim();
    let end = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '-' || c == '+' || c == 'e'))
        .unwrap_or(s.len());
    // `e` may start a unit ("..."), so retry without it when the number does not parse.
    let (mut num, mut unit) = s.split_at(end);
    if num.parse::<f64>().is_err() && num.ends_with('e') {
        num = &num[..num.len() - 1];
        unit = &s[num.len()..];
    }
    let value: f64 = num.parse().ok()?;
    value
        .is_finite()
        .then(|| (value, unit.trim().to_ascii_lowercase()))
}

/// A link rate in bits per second.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Rate {
    bps: u64,
}

impl Rate {
    pub const fn from_bps(bps: u64) -> Self {
        Rate { bps }
    }
    pub const fn bps(self) -> u64 {
        self.bps
    }

    /// Time to serialise `bytes` at this rate, rounded up to the nanosecond.
    pub fn serialisation(self, bytes: u64) -> Duration {
        let bits = u128::from(bytes) * 8;
        let ns = (bits * 1_000_000_000).div_ceil(u128::from(self.bps));
        Duration::from_nanos(u64::try_from(ns).unwrap_or(u64::MAX))
    }

    /// Bytes this rate carries in `d` (rounded down).
    pub fn bytes_in(self, d: Duration) -> u64 {
        let bits = u128::from(self.bps) * d.as_nanos() / 1_000_000_000;
        u64::try_from(bits / 8).unwrap_or(u64::MAX)
    }
}

const RATE_ALLOWED: &str =
    "a positive number with bit, kbit, mbit or gbit (bits per second), e.g. 10mbit, 1.5gbit";

impl std::str::FromStr for Rate {
    type Err = UnitError;
    fn from_str(s: &str) -> Result<Self, UnitError> {
        let (v, unit) =
            split_number(s).ok_or_else(|| err(format!("{s:?} is not a rate"), RATE_ALLOWED))?;
        if v == 0.0 {
            return Err(err(
                format!("{s:?} is no rate: a link of rate 0 carries nothing"),
                RATE_ALLOWED,
            ));
        }
        let unit = unit.strip_suffix("/s").unwrap_or(&unit);
        let mult = match unit {
            "bit" | "bps" => 1.0,
            "kbit" | "kbps" => 1e3,
            "mbit" | "mbps" => 1e6,
            "gbit" | "gbps" => 1e9,
            "" => return Err(err(format!("{s:?} has no unit"), RATE_ALLOWED)),
            _ => {
                return Err(err(
                    format!("{s:?} has an unknown unit {unit:?}"),
                    RATE_ALLOWED,
                ));
            }
        };
        let bps = v * mult;
        if !(1.0..=1e12).contains(&bps) {
            return Err(err(format!("{s:?} is out of range"), "1bit to 1000gbit"));
        }
        Ok(Rate::from_bps(bps.round() as u64))
    }
}

impl fmt::Display for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = self.bps as f64;
        if b >= 1e9 {
            write!(f, "{}gbit", b / 1e9)
        } else if b >= 1e6 {
            write!(f, "{}mbit", b / 1e6)
        } else if b >= 1e3 {
            write!(f, "{}kbit", b / 1e3)
        } else {
            write!(f, "{}bit", self.bps)
        }
    }
}

const DURATION_ALLOWED: &str =
    "a non-negative number with ns, us, ms, s or min, e.g. 25ms, 1.5s (0 needs no unit)";

/// Parses `25ms`, `100us`, `1.5s`, `2min`, or a bare `0`.
pub fn parse_duration(s: &str) -> Result<Duration, UnitError> {
    let (v, unit) =
        split_number(s).ok_or_else(|| err(format!("{s:?} is not a duration"), DURATION_ALLOWED))?;
    let secs = match unit.as_str() {
        "ns" => v * 1e-9,
        "us" | "µs" => v * 1e-6,
        "ms" => v * 1e-3,
        "s" | "sec" => v,
        "min" => v * 60.0,
        "" if v == 0.0 => 0.0,
        "" => return Err(err(format!("{s:?} has no unit"), DURATION_ALLOWED)),
        _ => {
            return Err(err(
                format!("{s:?} has an unknown unit {unit:?}"),
                DURATION_ALLOWED,
            ));
        }
    };
    if !(0.0..=86_400.0).contains(&secs) {
        return Err(err(format!("{s:?} is out of range"), "0 to 24 hours"));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// Formats a duration the way [`parse_duration`] reads it back.
pub fn format_duration(d: Duration) -> String {
    let ns = d.as_nanos();
    if ns == 0 {
        "0".into()
    } else if ns.is_multiple_of(1_000_000_000) {
        format!("{}s", ns / 1_000_000_000)
    } else if ns.is_multiple_of(1_000_000) {
        format!("{}ms", ns / 1_000_000)
    } else if ns.is_multiple_of(1_000) {
        format!("{}us", ns / 1_000)
    } else {
        format!("{ns}ns")
    }
}

const PERCENT_ALLOWED: &str = "a percentage from 0% to 100%, e.g. 1%, 0.1%";

/// Parses `1%` or `0.1%` into a probability in `[0, 1]`. The `%` is required so that `1` is
/// never misread as 100 %.
pub fn parse_percent(s: &str) -> Result<f64, UnitError> {
    let (v, unit) = split_number(s)
        .ok_or_else(|| err(format!("{s:?} is not a percentage"), PERCENT_ALLOWED))?;
    if unit != "%" {
        if unit.is_empty() && v == 0.0 {
            return Ok(0.0);
        }
        return Err(err(format!("{s:?} needs a % sign"), PERCENT_ALLOWED));
    }
    if !(0.0..=100.0).contains(&v) {
        return Err(err(format!("{s:?} is out of range"), PERCENT_ALLOWED));
    }
    Ok(v / 100.0)
}

const BYTES_ALLOWED: &str = "a size with b, kb, mb, gb (powers of 1000) or kib, mib, gib (powers of 1024), e.g. 64kb, 1500b";

/// Parses a size in bytes: `1500b`, `64kb` (64,000), `64kib` (65,536), `5mb`.
pub fn parse_bytes(s: &str) -> Result<u64, UnitError> {
    let (v, unit) =
        split_number(s).ok_or_else(|| err(format!("{s:?} is not a size"), BYTES_ALLOWED))?;
    let mult = match unit.as_str() {
        "b" | "byte" | "bytes" => 1.0,
        "kb" => 1e3,
        "mb" => 1e6,
        "gb" => 1e9,
        "kib" => 1024.0,
        "mib" => 1024.0 * 1024.0,
        "gib" => 1024.0 * 1024.0 * 1024.0,
        "" if v == 0.0 => 1.0,
        "" => return Err(err(format!("{s:?} has no unit"), BYTES_ALLOWED)),
        _ => {
            return Err(err(
                format!("{s:?} has an unknown unit {unit:?}"),
                BYTES_ALLOWED,
            ));
        }
    };
    let bytes = v * mult;
    if !(0.0..=1e15).contains(&bytes) || bytes.fract() != 0.0 {
        return Err(err(
            format!("{s:?} is not a whole number of bytes in range"),
            BYTES_ALLOWED,
        ));
    }
    Ok(bytes as u64)
}

/// The size of a drop-tail queue: in bytes, in packets, or in time of buffering at the link rate.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum QueueLimit {
    Bytes(u64),
    Packets(u64),
    Time(Duration),
    Unlimited,
}

const QUEUE_ALLOWED: &str = "bytes (64kb, 1500b), packets (100pkt) or time of buffering at the link rate (50ms), or unlimited";

impl std::str::FromStr for QueueLimit {
    type Err = UnitError;
    fn from_str(s: &str) -> Result<Self, UnitError> {
        let t = s.trim().to_ascii_lowercase();
        if t == "unlimited" || t == "inf" {
            return Ok(QueueLimit::Unlimited);
        }
        let (v, unit) = split_number(&t)
            .ok_or_else(|| err(format!("{s:?} is not a queue size"), QUEUE_ALLOWED))?;
        match unit.as_str() {
            "p" | "pkt" | "pkts" | "packets" if v >= 0.0 && v.fract() == 0.0 => {
                Ok(QueueLimit::Packets(v as u64))
            }
            "ns" | "us" | "ms" | "s" => parse_duration(s).map(QueueLimit::Time),
            _ => parse_bytes(s)
                .map(QueueLimit::Bytes)
                .map_err(|_| err(format!("{s:?} is not a queue size"), QUEUE_ALLOWED)),
        }
    }
}

impl fmt::Display for QueueLimit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            QueueLimit::Bytes(b) => write!(f, "{b}b"),
            QueueLimit::Packets(p) => write!(f, "{p}pkt"),
            QueueLimit::Time(d) => f.write_str(&format_duration(*d)),
            QueueLimit::Unlimited => f.write_str("unlimited"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates() {
        assert_eq!("10mbit".parse::<Rate>().unwrap().bps(), 10_000_000);
        assert_eq!("1.5Gbit".parse::<Rate>().unwrap().bps(), 1_500_000_000);
        assert_eq!("500kbit/s".parse::<Rate>().unwrap().bps(), 500_000);
        let e = "10".parse::<Rate>().unwrap_err();
        assert!(e.to_string().contains("no unit"), "{e}");
        assert!(e.to_string().contains("mbit"), "{e}");
        assert!("10furlongs".parse::<Rate>().is_err());
        assert!("0mbit".parse::<Rate>().is_err());
        assert_eq!(Rate::from_bps(10_000_000).to_string(), "10mbit");
    }

    #[test]
    fn serialisation_is_size_times_eight_over_rate() {
        let r = Rate::from_bps(10_000_000);
        assert_eq!(r.serialisation(1500), Duration::from_micros(1200));
        assert_eq!(r.bytes_in(Duration::from_millis(1200)), 1_500_000);
        // rounding up: 1 byte at 3 bit/s is 8/3 s
        assert_eq!(
            Rate::from_bps(3).serialisation(1),
            Duration::from_nanos(2_666_666_667)
        );
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("25ms").unwrap(), Duration::from_millis(25));
        assert_eq!(parse_duration("100us").unwrap(), Duration::from_micros(100));
        assert_eq!(parse_duration("1.5s").unwrap(), Duration::from_millis(1500));
        assert_eq!(parse_duration("0").unwrap(), Duration::ZERO);
        assert!(
            parse_duration("25")
                .unwrap_err()
                .to_string()
                .contains("no unit")
        );
        assert!(parse_duration("-1ms").is_err());
        for d in ["25ms", "1s", "150us", "7ns", "0"] {
            assert_eq!(format_duration(parse_duration(d).unwrap()), d);
        }
    }

    #[test]
    fn percents() {
        assert_eq!(parse_percent("1%").unwrap(), 0.01);
        assert!((parse_percent("0.1%").unwrap() - 0.001).abs() < 1e-15);
        assert_eq!(parse_percent("0").unwrap(), 0.0);
        assert!(parse_percent("1").unwrap_err().to_string().contains("%"));
        assert!(parse_percent("101%").is_err());
    }

    #[test]
    fn sizes_and_queues() {
        assert_eq!(parse_bytes("64kb").unwrap(), 64_000);
        assert_eq!(parse_bytes("64kib").unwrap(), 65_536);
        assert_eq!(parse_bytes("1500b").unwrap(), 1500);
        assert!(parse_bytes("1.5b").is_err());
        assert_eq!(
            "100pkt".parse::<QueueLimit>().unwrap(),
            QueueLimit::Packets(100)
        );
        assert_eq!(
            "50ms".parse::<QueueLimit>().unwrap(),
            QueueLimit::Time(Duration::from_millis(50))
        );
        assert_eq!(
            "64kb".parse::<QueueLimit>().unwrap(),
            QueueLimit::Bytes(64_000)
        );
        assert_eq!(
            "unlimited".parse::<QueueLimit>().unwrap(),
            QueueLimit::Unlimited
        );
        assert!(
            "lots"
                .parse::<QueueLimit>()
                .unwrap_err()
                .to_string()
                .contains("100pkt")
        );
    }
}
