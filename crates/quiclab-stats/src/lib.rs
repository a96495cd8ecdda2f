//! The statistics a report rests on, and a campaign's adaptive iterations too: quantiles,
//! empirical CDFs, bootstrap confidence intervals and the Mann-Whitney U test ([`adaptive`]: when a
//! group of cells has enough iterations).
//!
//! Contract: pure functions of their inputs. Randomness (the bootstrap) comes only from a seed the
//! caller passes, so a result is reproducible bit for bit; [`seed_from`] turns a cell's identity
//! into such a seed. Functions that need data return `None` for too little of it instead of a
//! made-up number. NaN inputs are the caller's bug: values are ordered with `f64::total_cmp`.

pub mod adaptive;
pub mod paired;

/// Resamples per bootstrap interval.
pub const BOOTSTRAP_RESAMPLES: usize = 2000;

/// Coverage of every confidence interval in the report.
pub const CONFIDENCE: f64 = 0.95;

/// A closed interval `[lo, hi]`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Interval {
    pub lo: f64,
    pub hi: f64,
}

impl Interval {
    pub fn contains(&self, v: f64) -> bool {
        self.lo <= v && v <= self.hi
    }
}

/// A sorted copy of `xs`.
pub fn sorted(xs: &[f64]) -> Vec<f64> {
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    v
}

/// The percentiles of a latency table (those of the S5 telemetry study), with their labels.
pub const LATENCY_PERCENTILES: [(&str, f64); 8] = [
    ("p50", 0.50),
    ("p90", 0.90),
    ("p95", 0.95),
    ("p97", 0.97),
    ("p98", 0.98),
    ("p99", 0.99),
    ("p99.9", 0.999),
    ("max", 1.0),
];

/// Quantile `p` in `[0, 1]` of already sorted data, by linear interpolation between order
/// statistics (Hyndman & Fan type 7, R's default). `None` for no data.
pub fn quantile_sorted(sorted: &[f64], p: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let h = (sorted.len() - 1) as f64 * p.clamp(0.0, 1.0);
    let lo = h.floor() as usize;
    let hi = (lo + 1).min(sorted.len() - 1);
    Some(sorted[lo] + (h - lo as f64) * (sorted[hi] - sorted[lo]))
}

/// Quantile `p` of unsorted data (R type 7).
pub fn quantile(xs: &[f64], p: f64) -> Option<f64> {
    quantile_sorted(&sorted(xs), p)
}

/// The median: the middle value, or the mean of the two middle values for an even count.
pub fn median(xs: &[f64]) -> Option<f64> {
    quantile(xs, 0.5)
}

/// Empirical CDF as `(value, fraction of the data <= value)`, one point per distinct value in
/// ascending order: the corners of the step function.
pub fn ecdf(xs: &[f64]) -> Vec<(f64, f64)> {
    let s = sorted(xs);
    let n = s.len() as f64;
    let mut out: Vec<(f64, f64)> = Vec::new();
    for (i, &v) in s.iter().enumerate() {
        let f = (i + 1) as f64 / n;
        match out.last_mut() {
            Some(last) if last.0 == v => last.1 = f,
            _ => out.push((v, f)),
        }
    }
    out
}

/// Relative change of medians, `(median(b) - median(a)) / median(a)`; `None` without data or
/// when `median(a)` is 0.
pub fn relative_change(a: &[f64], b: &[f64]) -> Option<f64> {
    let ma = median(a)?;
    let mb = median(b)?;
    (ma != 0.0).then(|| (mb - ma) / ma)
}

/// Bootstrap 95 % confidence interval of the median (percentile method,
/// [`BOOTSTRAP_RESAMPLES`] resamples). `None` for fewer than 2 values.
pub fn bootstrap_median_ci(xs: &[f64], seed: u64) -> Option<Interval> {
    if xs.len() < 2 {
        return None;
    }
    let mut rng = Rng::new(seed);
    let mut buf = vec![0.0; xs.len()];
    let stats: Vec<f64> = (0..BOOTSTRAP_RESAMPLES)
        .map(|_| resample_median(xs, &mut buf, &mut rng))
        .collect();
    percentile_interval(stats)
}

/// Bootstrap 95 % confidence interval of `(median(b) - median(a)) / median(a)`, resampling each
/// arm independently (percentile method, [`BOOTSTRAP_RESAMPLES`] resamples). `None` when either
/// sample has fewer than 2 values or a resampled `median(a)` is 0.
pub fn bootstrap_relative_change_ci(a: &[f64], b: &[f64], seed: u64) -> Option<Interval> {
    if a.len() < 2 || b.len() < 2 {
        return None;
    }
    let mut rng = Rng::new(seed);
    let mut buf_a = vec![0.0; a.len()];
    let mut buf_b = vec![0.0; b.len()];
    let mut stats = Vec::with_capacity(BOOTSTRAP_RESAMPLES);
    for _ in 0..BOOTSTRAP_RESAMPLES {
        let ma = resample_median(a, &mut buf_a, &mut rng);
        let mb = resample_median(b, &mut buf_b, &mut rng);
        if ma == 0.0 {
            return None;
        }
        stats.push((mb - ma) / ma);
    }
    percentile_interval(stats)
}

/// Bootstrap 95 % confidence interval of `sum(b) / sum(a)` over pairs `(a[i], b[i])`, resampling
/// whole pairs (percentile method, [`BOOTSTRAP_RESAMPLES`] resamples): for paired measurements
/// such as a normal and an impaired run of the same round, whose ratio of means is wanted.
/// `None` for fewer than 2 pairs, slices of different lengths, or a resampled `sum(a)` of 0.
pub fn bootstrap_paired_ratio_ci(a: &[f64], b: &[f64], seed: u64) -> Option<Interval> {
    if a.len() < 2 || a.len() != b.len() {
        return None;
    }
    let mut rng = Rng::new(seed);
    let mut stats = Vec::with_capacity(BOOTSTRAP_RESAMPLES);
    for _ in 0..BOOTSTRAP_RESAMPLES {
        let (mut sa, mut sb) = (0.0, 0.0);
        for _ in 0..a.len() {
            let i = rng.below(a.len());
            sa += a[i];
            sb += b[i];
        }
        if sa == 0.0 {
            return None;
        }
        stats.push(sb / sa);
    }
    percentile_interval(stats)
}

fn resample_median(xs: &[f64], buf: &mut [f64], rng: &mut Rng) -> f64 {
    for slot in buf.iter_mut() {
        *slot = xs[rng.below(xs.len())];
    }
    buf.sort_by(f64::total_cmp);
    // Invariant: `buf` has the length of `xs`, which callers checked is at least 2.
    quantile_sorted(buf, 0.5).unwrap_or(f64::NAN)
}

fn percentile_interval(mut stats: Vec<f64>) -> Option<Interval> {
    stats.sort_by(f64::total_cmp);
    let tail = (1.0 - CONFIDENCE) / 2.0;
    Some(Interval {
        lo: quantile_sorted(&stats, tail)?,
        hi: quantile_sorted(&stats, 1.0 - tail)?,
    })
}

/// Bootstrap 95 % confidence interval of the difference of two relative changes of medians,
/// `(median(b1) / median(b0) - 1) - (median(a1) / median(a0) - 1)`, each sample resampled on
/// its own ([`BOOTSTRAP_RESAMPLES`] resamples): how much more an impairment (`*1` against the
/// base `*0`) slows `b` than `a`, each against its own base. `None` when a sample has fewer
/// than 2 values or a resampled base median is 0.
pub fn bootstrap_change_difference_ci(
    a0: &[f64],
    a1: &[f64],
    b0: &[f64],
    b1: &[f64],
    seed: u64,
) -> Option<Interval> {
    if [a0, a1, b0, b1].iter().any(|s| s.len() < 2) {
        return None;
    }
    let mut rng = Rng::new(seed);
    let mut bufs: Vec<Vec<f64>> = [a0, a1, b0, b1]
        .iter()
        .map(|s| vec![0.0; s.len()])
        .collect();
    let mut stats = Vec::with_capacity(BOOTSTRAP_RESAMPLES);
    for _ in 0..BOOTSTRAP_RESAMPLES {
        let mut m = [0.0; 4];
        for (i, s) in [a0, a1, b0, b1].iter().enumerate() {
            m[i] = resample_median(s, &mut bufs[i], &mut rng);
        }
        if m[0] == 0.0 || m[2] == 0.0 {
            return None;
        }
        stats.push(m[3] / m[2] - m[1] / m[0]);
    }
    percentile_interval(stats)
}

/// Spearman's rank correlation of the pairs `(x[i], y[i])`: Pearson's correlation of their
/// ranks, tied values sharing their average rank. `None` for fewer than 3 pairs, slices of
/// different lengths, or a side whose values are all equal.
pub fn spearman(x: &[f64], y: &[f64]) -> Option<f64> {
    if x.len() < 3 || x.len() != y.len() {
        return None;
    }
    let (rx, ry) = (ranks(x), ranks(y));
    let n = x.len() as f64;
    let mean = (n + 1.0) / 2.0;
    let (mut sxy, mut sxx, mut syy) = (0.0, 0.0, 0.0);
    for (a, b) in rx.iter().zip(&ry) {
        sxy += (a - mean) * (b - mean);
        sxx += (a - mean) * (a - mean);
        syy += (b - mean) * (b - mean);
    }
    (sxx > 0.0 && syy > 0.0).then(|| sxy / (sxx * syy).sqrt())
}

/// Ranks from 1, ties sharing their average rank.
fn ranks(xs: &[f64]) -> Vec<f64> {
    let mut order: Vec<usize> = (0..xs.len()).collect();
    order.sort_by(|&a, &b| xs[a].total_cmp(&xs[b]));
    let mut out = vec![0.0; xs.len()];
    let mut i = 0;
    while i < order.len() {
        let mut j = i;
        while j + 1 < order.len() && xs[order[j + 1]] == xs[order[i]] {
            j += 1;
        }
        let rank = (i + j) as f64 / 2.0 + 1.0;
        for &k in &order[i..=j] {
            out[k] = rank;
        }
        i = j + 1;
    }
    out
}

/// 95 % confidence interval of a Spearman correlation `rho` over `n` pairs, by Fisher's z
/// transform with the standard error `1.06 / sqrt(n - 3)` (Fieller, Hartley and Pearson, 1957).
/// `None` for fewer than 4 pairs. A correlation of exactly +-1 is taken as +-(1 - 1e-9), where
/// the transform is finite; its interval is then all but a point, so the number of pairs,
/// which the report prints beside it, is what says how much it rests on.
pub fn spearman_ci(rho: f64, n: usize) -> Option<Interval> {
    if n < 4 || !rho.is_finite() {
        return None;
    }
    const Z975: f64 = 1.959_963_984_540_054;
    let z = rho.clamp(-1.0 + 1e-9, 1.0 - 1e-9).atanh();
    let half = Z975 * 1.06 / ((n - 3) as f64).sqrt();
    Some(Interval {
        lo: (z - half).tanh(),
        hi: (z + half).tanh(),
    })
}

/// Result of a two-sided Mann-Whitney U (Wilcoxon rank-sum) test of `x` against `y`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MannWhitney {
    /// U of the first sample: the number of pairs (x_i, y_j) with x_i > y_j, ties counting 1/2
    /// (R's `W`).
    pub u: f64,
    /// Two-sided p-value.
    pub p: f64,
    /// Whether `p` comes from the exact distribution of U (no ties, both samples under 50, as R
    /// decides) or from the normal approximation.
    pub exact: bool,
}

/// Two-sided Mann-Whitney U test, choosing the method as R's `wilcox.test` does by default: the
/// exact distribution when both samples have fewer than 50 values and there are no ties, else the
/// normal approximation with tie and continuity corrections. `None` if a sample is empty.
pub fn mann_whitney(x: &[f64], y: &[f64]) -> Option<MannWhitney> {
    // `mann_whitney_exact` itself refuses ties and samples of 50 or more.
    mann_whitney_exact(x, y).or_else(|| mann_whitney_normal(x, y))
}

/// Ranks of `x` followed by `y` in the pooled sample (ties get their average rank), and the sum
/// of `t^3 - t` over groups of `t` tied values.
fn pooled_ranks(x: &[f64], y: &[f64]) -> (f64, f64) {
    let mut pooled: Vec<(f64, bool)> = x
        .iter()
        .map(|&v| (v, true))
        .chain(y.iter().map(|&v| (v, false)))
        .collect();
    pooled.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut rank_sum_x = 0.0;
    let mut ties = 0.0;
    let mut i = 0;
    while i < pooled.len() {
        let mut j = i;
        while j + 1 < pooled.len() && pooled[j + 1].0 == pooled[i].0 {
            j += 1;
        }
        let t = (j - i + 1) as f64;
        // Ranks are 1-based: positions i..=j share the average of ranks i+1..=j+1.
        let rank = (i + j) as f64 / 2.0 + 1.0;
        rank_sum_x += rank * pooled[i..=j].iter().filter(|p| p.1).count() as f64;
        ties += t * t * t - t;
        i = j + 1;
    }
    (rank_sum_x, ties)
}

fn u_statistic(x: &[f64], rank_sum_x: f64) -> f64 {
    let m = x.len() as f64;
    rank_sum_x - m * (m + 1.0) / 2.0
}

/// Normal approximation with tie correction and continuity correction, as R's
/// `wilcox.test(x, y, exact = FALSE, correct = TRUE)`. `None` if a sample is empty. When every
/// value is the same the test has no information and `p` is 1.
pub fn mann_whitney_normal(x: &[f64], y: &[f64]) -> Option<MannWhitney> {
    if x.is_empty() || y.is_empty() {
        return None;
    }
    let (rank_sum_x, ties) = pooled_ranks(x, y);
    let u = u_statistic(x, rank_sum_x);
    let (m, n) = (x.len() as f64, y.len() as f64);
    let big_n = m + n;
    let var = m * n / 12.0 * ((big_n + 1.0) - ties / (big_n * (big_n - 1.0)));
    let d = u - m * n / 2.0;
    let p = if var <= 0.0 {
        1.0
    } else {
        let z = (d - 0.5 * d.signum()) / var.sqrt();
        // 2 * min(Phi(z), 1 - Phi(z)) = erfc(|z| / sqrt 2), computed without cancellation.
        erfc(z.abs() / std::f64::consts::SQRT_2).min(1.0)
    };
    Some(MannWhitney { u, p, exact: false })
}

/// Exact two-sided test from the distribution of U under the null hypothesis (as R's
/// `wilcox.test(x, y, exact = TRUE)`). `None` if a sample is empty, there are ties, or a sample
/// has 50 values or more (the counts would not fit the integers used).
pub fn mann_whitney_exact(x: &[f64], y: &[f64]) -> Option<MannWhitney> {
    let (m, n) = (x.len(), y.len());
    if m == 0 || n == 0 || m >= 50 || n >= 50 {
        return None;
    }
    let (rank_sum_x, ties) = pooled_ranks(x, y);
    if ties != 0.0 {
        return None;
    }
    let u = u_statistic(x, rank_sum_x);
    let counts = u_counts(m, n);
    let total: f64 = counts.iter().map(|&c| c as f64).sum();
    // Without ties U is an integer.
    let q = u.round() as usize;
    let tail: u128 = if u > (m * n) as f64 / 2.0 {
        counts[q..].iter().sum()
    } else {
        counts[..=q].iter().sum()
    };
    let p = (2.0 * tail as f64 / total).min(1.0);
    Some(MannWhitney { u, p, exact: true })
}

/// Number of orderings of `m` x-values and `n` y-values giving each U in `0..=m*n`: the
/// coefficients of the Gaussian binomial `[m+n choose m]_q = prod_{i=1..m} (1 - q^(n+i)) / (1 - q^i)`.
/// Arithmetic wraps modulo 2^128, which is exact because every coefficient of the result is below
/// `C(98, 49) < 2^128` and the polynomial operations are ring operations.
fn u_counts(m: usize, n: usize) -> Vec<u128> {
    let len = m * n + 1;
    let mut c = vec![0u128; len];
    c[0] = 1;
    for i in 1..=m {
        let k = n + i;
        for u in (k..len).rev() {
            c[u] = c[u].wrapping_sub(c[u - k]);
        }
        for u in i..len {
            c[u] = c[u].wrapping_add(c[u - i]);
        }
    }
    c
}

/// Standard normal CDF.
pub fn normal_cdf(z: f64) -> f64 {
    0.5 * erfc(-z / std::f64::consts::SQRT_2)
}

/// Complementary error function, to about 1e-14 relative: a power series for `erf` below 1.5 and a
/// continued fraction above, where `1 - erf` would lose digits.
pub fn erfc(x: f64) -> f64 {
    if x.is_nan() {
        return f64::NAN;
    }
    if x < 0.0 {
        return 2.0 - erfc(-x);
    }
    if x < 1.5 {
        // erf(x) = 2/sqrt(pi) e^(-x^2) sum_n (2x^2)^n x / (1*3*...*(2n+1)): positive terms only.
        let mut term = x;
        let mut sum = x;
        let mut n = 0.0;
        while term > sum * 1e-17 {
            n += 1.0;
            term *= 2.0 * x * x / (2.0 * n + 1.0);
            sum += term;
        }
        1.0 - 2.0 / std::f64::consts::PI.sqrt() * (-x * x).exp() * sum
    } else {
        // erfc(x) = e^(-x^2)/sqrt(pi) / (x + (1/2)/(x + 1/(x + (3/2)/(x + ...)))), evaluated from
        // a fixed depth backwards; 120 levels reach full precision for x >= 1.5.
        let mut f = x;
        for k in (1..=120).rev() {
            f = x + (k as f64 / 2.0) / f;
        }
        (-x * x).exp() / std::f64::consts::PI.sqrt() / f
    }
}

/// A 64-bit seed from a cell's identity (e.g. `["change", "h2-cubic", "h3-cubic", "loss-1%",
/// "100000"]`): FNV-1a over the parts with a separator, stable across platforms and Rust
/// versions (unlike `std`'s hashers).
pub fn seed_from(parts: &[&str]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for part in parts {
        for &b in part.as_bytes().iter().chain(std::iter::once(&0xff)) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    h
}

/// A small seeded generator (xoshiro256**, state filled by SplitMix64): enough for resampling,
/// and its output is fixed by its published definition, so results never change with a
/// dependency's version.
#[derive(Debug, Clone)]
pub struct Rng {
    s: [u64; 4],
}

impl Rng {
    pub fn new(seed: u64) -> Self {
        let mut x = seed;
        let mut next = || {
            x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = x;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        };
        Rng {
            s: [next(), next(), next(), next()],
        }
    }

    pub fn next_u64(&mut self) -> u64 {
        let result = self.s[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = self.s[1] << 17;
        self.s[2] ^= self.s[0];
        self.s[3] ^= self.s[1];
        self.s[1] ^= self.s[2];
        self.s[0] ^= self.s[3];
        self.s[2] ^= t;
        self.s[3] = self.s[3].rotate_left(45);
        result
    }

    /// Uniform in `0..n` (multiply-shift; the bias, below n / 2^64, is irrelevant here).
    pub fn below(&mut self, n: usize) -> usize {
        ((u128::from(self.next_u64()) * n as u128) >> 64) as usize
    }

    /// Uniform in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Standard normal (Box-Muller).
    pub fn normal(&mut self) -> f64 {
        let u1 = 1.0 - self.unit(); // in (0, 1]: ln is finite
        let u2 = self.unit();
        (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spearman_ranks_ties_by_their_average_and_its_interval_follows_fisher() {
        let up = [1.0, 2.0, 3.0, 4.0, 5.0];
        assert_eq!(spearman(&up, &[10.0, 20.0, 25.0, 90.0, 100.0]), Some(1.0));
        assert_eq!(spearman(&up, &[5.0, 4.0, 3.0, 2.0, 1.0]), Some(-1.0));
        // the textbook example (IQ against hours of television, 10 people): rho = -29/165
        let iq = [
            106.0, 100.0, 86.0, 101.0, 99.0, 103.0, 97.0, 113.0, 112.0, 110.0,
        ];
        let tv = [7.0, 27.0, 2.0, 50.0, 28.0, 29.0, 20.0, 12.0, 6.0, 17.0];
        let rho = spearman(&iq, &tv).unwrap();
        assert!((rho + 29.0 / 165.0).abs() < 1e-12, "{rho}");
        // ties: ranks 1, 2.5, 2.5, 4 against 1, 2, 3, 4
        assert_eq!(ranks(&[1.0, 7.0, 7.0, 9.0]), [1.0, 2.5, 2.5, 4.0]);
        assert!(spearman(&up, &[3.0; 5]).is_none());
        assert!(spearman(&up[..2], &up[..2]).is_none());
        // rho 0.5 over 28 pairs: tanh(atanh 0.5 -+ 1.96 * 1.06 / 5)
        let ci = spearman_ci(0.5, 28).unwrap();
        assert!(
            (ci.lo - 0.13299).abs() < 1e-4 && (ci.hi - 0.74634).abs() < 1e-4,
            "{ci:?}"
        );
        // fewer pairs, a wider interval; a perfect correlation stays finite
        assert!(spearman_ci(0.5, 8).unwrap().lo < ci.lo);
        assert!(spearman_ci(-1.0, 5).unwrap().lo.is_finite());
        assert!(spearman_ci(0.5, 3).is_none());
    }

    #[test]
    fn the_difference_of_two_changes_each_against_its_own_base() {
        let base: Vec<f64> = (0..20).map(|i| 100.0 + i as f64).collect();
        let slower: Vec<f64> = base.iter().map(|v| v * 1.2).collect();
        // a unchanged, b 20 % slower under the impairment: the difference is +0.2
        let ci = bootstrap_change_difference_ci(&base, &base, &base, &slower, 3).unwrap();
        assert!(ci.contains(0.2) && ci.lo > 0.1, "{ci:?}");
        // both 20 % slower: no difference, whatever their bases
        let other: Vec<f64> = base.iter().map(|v| v * 3.0).collect();
        let other_slower: Vec<f64> = other.iter().map(|v| v * 1.2).collect();
        let ci = bootstrap_change_difference_ci(&base, &slower, &other, &other_slower, 3).unwrap();
        assert!(ci.contains(0.0), "{ci:?}");
        assert!(bootstrap_change_difference_ci(&base, &base[..1], &base, &base, 3).is_none());
    }

    fn close(a: f64, b: f64, tol: f64) -> bool {
        (a - b).abs() <= tol
    }

    #[test]
    fn quantiles_match_r_type_7() {
        // x <- c(7, 1, 3, 10, 4); quantile(x, c(0, .1, .25, .5, .75, .9, 1))
        // sorted 1 3 4 7 10; h = 4p: 0 -> 1; .4 -> 1 + .4*2 = 1.8; 1 -> 3; 2 -> 4; 3 -> 7;
        // 3.6 -> 7 + .6*3 = 8.8; 4 -> 10.
        let x = [7.0, 1.0, 3.0, 10.0, 4.0];
        let expect = [
            (0.0, 1.0),
            (0.1, 1.8),
            (0.25, 3.0),
            (0.5, 4.0),
            (0.75, 7.0),
            (0.9, 8.8),
            (1.0, 10.0),
        ];
        for (p, q) in expect {
            assert!(close(quantile(&x, p).unwrap(), q, 1e-12), "p={p}");
        }
        // Even count: median is the mean of the middle pair; quantile(c(1,2,3,4), .25) = 1.75.
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), Some(2.5));
        assert!(close(
            quantile(&[1.0, 2.0, 3.0, 4.0], 0.25).unwrap(),
            1.75,
            1e-12
        ));
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[5.0]), Some(5.0));
    }

    #[test]
    fn paired_ratio_interval_resamples_whole_pairs() {
        // every pair has b = 0.6 a: any resample has the same ratio
        let a = [10.0, 20.0, 35.0, 5.0];
        let b: Vec<f64> = a.iter().map(|x| 0.6 * x).collect();
        let ci = bootstrap_paired_ratio_ci(&a, &b, 1).unwrap();
        assert!(
            close(ci.lo, 0.6, 1e-12) && close(ci.hi, 0.6, 1e-12),
            "{ci:?}"
        );
        // ratios 0.5 and 1.0 in pairs of equal weight: the interval lies within [0.5, 1] and
        // contains the ratio of sums, 0.75
        let ci =
            bootstrap_paired_ratio_ci(&[10.0; 6], &[5.0, 10.0, 5.0, 10.0, 5.0, 10.0], 2).unwrap();
        assert!(ci.lo >= 0.5 && ci.hi <= 1.0 && ci.contains(0.75), "{ci:?}");
        assert!(
            ci.hi - ci.lo > 0.1,
            "pairs that differ give a real interval: {ci:?}"
        );
        assert_eq!(
            bootstrap_paired_ratio_ci(&[1.0, 2.0, 3.0], &[1.0, 1.0, 2.0], 9),
            bootstrap_paired_ratio_ci(&[1.0, 2.0, 3.0], &[1.0, 1.0, 2.0], 9),
            "seeded"
        );
        assert_eq!(bootstrap_paired_ratio_ci(&[1.0], &[1.0], 0), None);
        assert_eq!(bootstrap_paired_ratio_ci(&[1.0, 2.0], &[1.0], 0), None);
        assert_eq!(bootstrap_paired_ratio_ci(&[0.0, 0.0], &[1.0, 1.0], 0), None);
    }

    #[test]
    fn ecdf_merges_ties_and_ends_at_one() {
        let e = ecdf(&[3.0, 1.0, 3.0, 2.0]);
        assert_eq!(e, vec![(1.0, 0.25), (2.0, 0.5), (3.0, 1.0)]);
        assert!(ecdf(&[]).is_empty());
    }

    #[test]
    fn erfc_matches_reference_values() {
        // Python: math.erfc(x)
        let cases = [
            (0.0, 1.0),
            (0.5, 0.4795001221869535),
            (1.0, 0.15729920705028513),
            (1.49, 0.03510213515679579),
            (1.5, 0.033894853524689274),
            (2.0, 0.004677734981047265),
            (2.99, 2.3525603080640195e-05),
            (3.0, 2.2090496998585438e-05),
            (5.0, 1.5374597944280351e-12),
            (-1.0, 1.842700792949715),
        ];
        for (x, want) in cases {
            let got = erfc(x);
            assert!(
                (got - want).abs() <= want * 1e-12,
                "erfc({x}) = {got}, want {want}"
            );
        }
        assert!(close(normal_cdf(1.959963984540054), 0.975, 1e-12));
    }

    // Hollander & Wolfe's example used in R's ?wilcox.test (ties-free):
    // x <- c(0.80, 0.83, 1.89, 1.04, 1.45, 1.38, 1.91, 1.64, 0.73, 1.46)
    // y <- c(1.15, 0.88, 0.90, 0.74, 1.21)
    const HW_X: [f64; 10] = [0.80, 0.83, 1.89, 1.04, 1.45, 1.38, 1.91, 1.64, 0.73, 1.46];
    const HW_Y: [f64; 5] = [1.15, 0.88, 0.90, 0.74, 1.21];

    #[test]
    fn mann_whitney_normal_matches_r() {
        // Pooled ranks of x: 0.73->1, 0.80->3, 0.83->4, 1.04->7, 1.38->10, 1.45->11, 1.46->12,
        // 1.64->13, 1.89->14, 1.91->15; sum 90, W = 90 - 55 = 35. mn/2 = 25, sigma^2 = 50*16/12,
        // z = (35 - 25 - 0.5) / sqrt(66.667) = 1.163489; p = erfc(z/sqrt 2) = 0.24462...
        // Cross-checked with scipy.stats.mannwhitneyu(x, y, method='asymptotic',
        // use_continuity=True).pvalue = 0.24462360512698333 (R's exact=FALSE, correct=TRUE).
        let r = mann_whitney_normal(&HW_X, &HW_Y).unwrap();
        assert_eq!(r.u, 35.0);
        let z: f64 = 9.5 / (50.0_f64 * 16.0 / 12.0).sqrt();
        assert!(close(r.p, erfc(z / std::f64::consts::SQRT_2), 1e-15));
        assert!(close(r.p, 0.24462360512698333, 1e-9), "p = {}", r.p);
        assert!(!r.exact);
    }

    #[test]
    fn mann_whitney_ties_use_the_tie_correction() {
        // x <- c(1, 2, 2, 3, 3, 3); y <- c(3, 4, 4, 5)
        // Pooled sorted: 1 | 2 2 | 3 3 3 3 | 4 4 | 5 -> ranks 1 | 2.5 | 5.5 | 8.5 | 10.
        // R_x = 1 + 2*2.5 + 3*5.5 = 22.5, W = 22.5 - 21 = 1.5. Ties: 2^3-2 + 4^3-4 + 2^3-2 = 72.
        // sigma^2 = 24/12 * (11 - 72/90) = 20.4; z = (1.5 - 12 + 0.5) / sqrt(20.4) = -2.21404
        // p = erfc(2.21404/sqrt 2) = 0.026826 (scipy asymptotic with continuity: 0.026826219079541514)
        let x = [1.0, 2.0, 2.0, 3.0, 3.0, 3.0];
        let y = [3.0, 4.0, 4.0, 5.0];
        let r = mann_whitney(&x, &y).unwrap();
        assert!(!r.exact, "ties force the normal approximation");
        assert_eq!(r.u, 1.5);
        let z: f64 = 10.0 / 20.4_f64.sqrt();
        assert!(close(r.p, erfc(z / std::f64::consts::SQRT_2), 1e-15));
        assert!(close(r.p, 0.026826219079541514, 1e-9), "p = {}", r.p);
        // Symmetric: swapping the samples gives U' = mn - U and the same p.
        let s = mann_whitney(&y, &x).unwrap();
        assert_eq!(s.u, 24.0 - 1.5);
        assert!(close(s.p, r.p, 1e-15));
    }

    #[test]
    fn mann_whitney_exact_matches_r() {
        // R: wilcox.test(x, y) (exact) gives W = 35, p-value = 0.2544 (= 2 * P(W >= 35)).
        // scipy.stats.mannwhitneyu(x, y, method='exact').pvalue = 0.2544122544122544 (= 2 * 382/3003)
        let r = mann_whitney(&HW_X, &HW_Y).unwrap();
        assert!(r.exact);
        assert!(close(r.p, 0.2544122544122544, 1e-12), "p = {}", r.p);
        // The smallest case by hand: x = (1, 2), y = (3, 4): U = 0, P(U <= 0) = 1/C(4,2) = 1/6,
        // two-sided 1/3.
        let r = mann_whitney_exact(&[1.0, 2.0], &[3.0, 4.0]).unwrap();
        assert_eq!(r.u, 0.0);
        assert!(close(r.p, 1.0 / 3.0, 1e-15));
        assert_eq!(mann_whitney_exact(&[1.0, 2.0], &[2.0, 4.0]), None);
    }

    #[test]
    fn u_counts_are_the_gaussian_binomial() {
        // [4 choose 2]_q = 1 + q + 2q^2 + q^3 + q^4.
        assert_eq!(u_counts(2, 2), vec![1, 1, 2, 1, 1]);
        // Largest case still fits: the counts add up to C(98, 49) and are symmetric.
        let c = u_counts(49, 49);
        let total = c.iter().fold(0u128, |a, &b| a.checked_add(b).unwrap());
        assert_eq!(total, 25_477_612_258_980_856_902_730_428_600);
        assert_eq!(c.first(), c.last());
        assert_eq!(c[1], 1);
    }

    fn normal_sample(rng: &mut Rng, n: usize, mean: f64, sd: f64) -> Vec<f64> {
        (0..n).map(|_| mean + sd * rng.normal()).collect()
    }

    #[test]
    fn bootstrap_change_ci_covers_a_real_difference_and_excludes_zero() {
        let mut rng = Rng::new(1);
        let a = normal_sample(&mut rng, 40, 100.0, 5.0);
        let b = normal_sample(&mut rng, 40, 130.0, 5.0);
        let ci = bootstrap_relative_change_ci(&a, &b, seed_from(&["t", "separated"])).unwrap();
        assert!(
            ci.contains(0.30),
            "{ci:?} should cover the true change of +30 %"
        );
        assert!(!ci.contains(0.0), "{ci:?} should exclude 0");
        let point = relative_change(&a, &b).unwrap();
        assert!(ci.contains(point));
        // The interval is a few percent wide for n = 40 and sd 5 %: not degenerate, not huge.
        assert!(ci.hi - ci.lo > 0.01 && ci.hi - ci.lo < 0.10, "{ci:?}");
    }

    #[test]
    fn bootstrap_change_ci_includes_zero_for_the_same_distribution() {
        // Over many independent pairs, a 95 % interval misses 0 rarely: allow 4 of 40.
        let mut misses = 0;
        for k in 0..40 {
            let mut rng = Rng::new(100 + k);
            let a = normal_sample(&mut rng, 40, 100.0, 5.0);
            let b = normal_sample(&mut rng, 40, 100.0, 5.0);
            let ci =
                bootstrap_relative_change_ci(&a, &b, seed_from(&["same", &k.to_string()])).unwrap();
            if !ci.contains(0.0) {
                misses += 1;
            }
        }
        assert!(misses <= 4, "{misses} of 40 intervals excluded 0");
    }

    #[test]
    fn bootstrap_median_ci_brackets_the_median() {
        let mut rng = Rng::new(7);
        let x = normal_sample(&mut rng, 40, 500.0, 20.0);
        let ci = bootstrap_median_ci(&x, 42).unwrap();
        let m = median(&x).unwrap();
        assert!(ci.lo <= m && m <= ci.hi, "{ci:?} vs {m}");
        // The population median 500 is inside; the standard error of the median is about
        // 1.25 * 20 / sqrt(40) = 4, so the interval is roughly +-8 wide.
        assert!(ci.contains(500.0), "{ci:?}");
        assert!(ci.hi - ci.lo > 4.0 && ci.hi - ci.lo < 30.0, "{ci:?}");
        assert_eq!(bootstrap_median_ci(&[1.0], 1), None);
    }

    #[test]
    fn bootstrap_is_deterministic_per_seed() {
        let mut rng = Rng::new(3);
        let a = normal_sample(&mut rng, 15, 10.0, 1.0);
        let b = normal_sample(&mut rng, 15, 11.0, 1.0);
        let s = seed_from(&["change", "a", "b", "c", "1"]);
        assert_eq!(
            bootstrap_relative_change_ci(&a, &b, s),
            bootstrap_relative_change_ci(&a, &b, s)
        );
        assert_ne!(
            bootstrap_relative_change_ci(&a, &b, s),
            bootstrap_relative_change_ci(&a, &b, s + 1)
        );
    }

    #[test]
    fn seeds_depend_on_every_part_and_its_boundaries() {
        assert_ne!(seed_from(&["ab", "c"]), seed_from(&["a", "bc"]));
        assert_ne!(seed_from(&["a"]), seed_from(&["b"]));
        assert_eq!(seed_from(&["x", "y"]), seed_from(&["x", "y"]));
    }

    #[test]
    fn rng_below_is_in_range_and_roughly_uniform() {
        let mut rng = Rng::new(9);
        let mut counts = [0u32; 5];
        for _ in 0..50_000 {
            counts[rng.below(5)] += 1;
        }
        // Each bucket expects 10,000 with sd ~89: 5 sd is 450.
        for c in counts {
            assert!((9_550..=10_450).contains(&c), "{counts:?}");
        }
    }
}
