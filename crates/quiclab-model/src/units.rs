//! How numbers are written in the report: sizes in powers of 1000, times in ms, changes in %,
//! differences in round trips. One place, so the findings, the heatmap and the tables agree to
//! the digit.

/// The minus sign used in every signed number (U+2212, the same width as `+`).
pub const MINUS: char = '\u{2212}';

/// A byte count in powers of 1000 with at most three significant digits: "100 KB", "1.5 MB",
/// "999 B".
pub fn size(bytes: u64) -> String {
    const UNITS: [(u64, &str); 4] = [
        (1_000_000_000_000, "TB"),
        (1_000_000_000, "GB"),
        (1_000_000, "MB"),
        (1_000, "KB"),
    ];
    for (div, unit) in UNITS {
        if bytes >= div {
            return format!("{} {unit}", sig3(bytes as f64 / div as f64));
        }
    }
    format!("{bytes} B")
}

/// The unit a byte axis reaching `max` is labelled in, with its divisor.
pub fn byte_unit(max: f64) -> (f64, &'static str) {
    if max >= 1e9 {
        (1e9, "GB")
    } else if max >= 1e6 {
        (1e6, "MB")
    } else if max >= 1e3 {
        (1e3, "KB")
    } else {
        (1.0, "B")
    }
}

/// At most three significant digits, trailing zeros dropped.
fn sig3(v: f64) -> String {
    let s = if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    };
    trim_zeros(s)
}

fn trim_zeros(s: String) -> String {
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

/// Digits of `v` with thousands separated by commas, `decimals` after the point; negative
/// numbers get [`MINUS`].
pub fn number(v: f64, decimals: usize) -> String {
    let s = format!("{:.*}", decimals, v.abs());
    let (int, frac) = s
        .split_once('.')
        .map_or((s.as_str(), None), |(i, f)| (i, Some(f)));
    let mut grouped = String::new();
    for (i, c) in int.chars().enumerate() {
        if i > 0 && (int.len() - i) % 3 == 0 {
            grouped.push(',');
        }
        grouped.push(c);
    }
    if let Some(f) = frac {
        grouped.push('.');
        grouped.push_str(f);
    }
    // "-0" is not a number anyone wants to read.
    if v < 0.0 && grouped.chars().any(|c| c.is_ascii_digit() && c != '0') {
        format!("{MINUS}{grouped}")
    } else {
        grouped
    }
}

/// Decimals for a time in ms: one below 10 ms, none above.
fn ms_decimals(v: f64) -> usize {
    if v.abs() < 10.0 { 1 } else { 0 }
}

/// A duration: "812 ms", "4.2 ms", "4,105 ms".
pub fn ms(v: f64) -> String {
    format!("{} ms", number(v, ms_decimals(v)))
}

/// A signed duration: "+52 ms", "−1.5 ms".
pub fn signed_ms(v: f64) -> String {
    format!("{} ms", signed(v, ms_decimals(v)))
}

/// A number with its sign: "+0.72", "−0.3" (zero unsigned).
pub fn signed(v: f64, decimals: usize) -> String {
    let n = number(v, decimals);
    if n.starts_with(MINUS)
        || n.chars()
            .all(|c| !c.is_ascii_digit() || c == '0' || c == '.')
    {
        n
    } else {
        format!("+{n}")
    }
}

/// Round trips, one decimal: "1.3 RTT".
pub fn rtts(v: f64) -> String {
    format!("{} RTT", number(v, 1))
}

/// Signed round trips: "+1.3 RTT".
pub fn signed_rtts(v: f64) -> String {
    format!("{} RTT", signed(v, 1))
}

/// Decimals for a percentage: one below 10 %, none above.
fn pct_decimals(percent: f64) -> usize {
    if percent.abs() < 10.0 { 1 } else { 0 }
}

/// A fraction as a signed percentage: 0.18 -> "+18 %", -0.043 -> "−4.3 %".
pub fn signed_pct(frac: f64) -> String {
    let p = frac * 100.0;
    format!("{} %", signed(p, pct_decimals(p)))
}

/// A fraction as an unsigned percentage of its magnitude: -0.18 -> "18 %".
pub fn abs_pct(frac: f64) -> String {
    let p = (frac * 100.0).abs();
    format!("{} %", number(p, pct_decimals(p)))
}

/// The numbers of a percentage interval without the unit, signed: "+9 to +27".
pub fn signed_pct_range(lo: f64, hi: f64) -> String {
    let (l, h) = (lo * 100.0, hi * 100.0);
    let d = pct_decimals(l.abs().max(h.abs()));
    // An end that is not 0 must not read as 0: "−16 to 0" would look like it touches zero.
    let end = |v: f64| {
        let mut de = d;
        while de < 3
            && v != 0.0
            && number(v, de)
                .chars()
                .all(|c| !c.is_ascii_digit() || c == '0')
        {
            de += 1;
        }
        signed(v, de)
    };
    format!("{} to {}", end(l), end(h))
}

/// A time interval: "790 to 840 ms".
pub fn ms_range(lo: f64, hi: f64) -> String {
    let d = ms_decimals(lo.abs().max(hi.abs()));
    format!("{} to {} ms", number(lo, d), number(hi, d))
}

/// A p-value: "p = 0.003", "p < 0.001".
pub fn p_value(p: f64) -> String {
    if p < 0.001 {
        "p < 0.001".to_string()
    } else if p < 0.01 {
        format!("p = {p:.3}")
    } else {
        format!("p = {p:.2}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_use_powers_of_1000() {
        assert_eq!(size(100_000), "100 KB");
        assert_eq!(size(1_000_000), "1 MB");
        assert_eq!(size(5_000_000), "5 MB");
        assert_eq!(size(1_500_000), "1.5 MB");
        assert_eq!(size(250_000), "250 KB");
        assert_eq!(size(999), "999 B");
        assert_eq!(size(1_000_000_000), "1 GB");
        assert_eq!(size(12_345_678), "12.3 MB");
    }

    #[test]
    fn numbers_group_thousands_and_use_a_true_minus() {
        assert_eq!(number(1234567.0, 0), "1,234,567");
        assert_eq!(number(-1234.5, 1), "\u{2212}1,234.5");
        assert_eq!(number(-0.01, 0), "0");
        assert_eq!(ms(812.4), "812 ms");
        assert_eq!(ms(4.25), "4.2 ms");
        assert_eq!(signed_ms(52.0), "+52 ms");
        assert_eq!(signed_ms(-52.0), "\u{2212}52 ms");
        assert_eq!(signed_ms(0.0), "0.0 ms");
    }

    #[test]
    fn percentages() {
        assert_eq!(signed_pct(0.18), "+18 %");
        assert_eq!(signed_pct(-0.043), "\u{2212}4.3 %");
        assert_eq!(abs_pct(-0.18), "18 %");
        assert_eq!(signed_pct_range(0.09, 0.27), "+9 to +27");
        assert_eq!(signed_pct_range(-0.043, 0.012), "\u{2212}4.3 to +1.2");
        assert_eq!(
            signed_pct_range(-0.16, -0.0004),
            "\u{2212}16 to \u{2212}0.04"
        );
        assert_eq!(signed_pct_range(0.0, 0.25), "0 to +25");
        assert_eq!(signed_pct_range(-0.27, -0.12), "\u{2212}27 to \u{2212}12");
        assert_eq!(p_value(0.0004), "p < 0.001");
        assert_eq!(p_value(0.0123), "p = 0.01");
        assert_eq!(p_value(0.003), "p = 0.003");
    }
}
