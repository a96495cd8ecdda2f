//! Paired comparisons: two arms measured in the same iterations (the same link seed, so the same
//! losses and the same emulator decisions) give pairs, and a difference between arms is read
//! from the pairs' differences rather than from two independent samples. Also the control of
//! false discoveries across the many cells of a report.

use crate::{BOOTSTRAP_RESAMPLES, Interval, Rng, erfc, percentile_interval, quantile_sorted};

/// The fewest pairs on which a two-sided signed-rank test can reach p < 0.05 at all: with 5
/// pairs all of one sign its exact p is 2/32 = 0.0625, with 6 it is 2/64 = 0.031. A report
/// calls no difference significant on fewer.
pub const MIN_PAIRS: usize = 6;

/// The false-discovery rate a report controls across its cells (Benjamini–Hochberg).
pub const FDR: f64 = 0.05;

/// A Wilcoxon signed-rank test of paired differences.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SignedRank {
    /// Sum of the ranks of the positive differences (R's `V`).
    pub v: f64,
    /// Two-sided p-value.
    pub p: f64,
    /// Pairs that counted: those whose difference is not 0.
    pub n: usize,
    /// Whether `p` comes from the exact distribution (fewer than 50 pairs, no tied or zero
    /// differences, as R decides) or from the normal approximation.
    pub exact: bool,
}

/// Two-sided Wilcoxon signed-rank test of `b[i] - a[i]`, as R's `wilcox.test(b, a, paired =
/// TRUE)` by default: zero differences dropped, the exact distribution below 50 pairs without
/// ties or zeros, else the normal approximation with tie and continuity corrections. `None` for
/// slices of different lengths or no nonzero difference.
pub fn signed_rank(a: &[f64], b: &[f64]) -> Option<SignedRank> {
    if a.len() != b.len() {
        return None;
    }
    let all: Vec<f64> = a.iter().zip(b).map(|(x, y)| y - x).collect();
    let zeros = all.contains(&0.0);
    let mut d: Vec<f64> = all.into_iter().filter(|d| *d != 0.0).collect();
    let n = d.len();
    if n == 0 {
        return None;
    }
    d.sort_by(|x, y| x.abs().total_cmp(&y.abs()));
    // ranks of |d|, ties sharing their average rank
    let (mut v, mut ties, mut tied) = (0.0, 0.0, false);
    let mut i = 0;
    while i < n {
        let mut j = i;
        while j + 1 < n && d[j + 1].abs() == d[i].abs() {
            j += 1;
        }
        let t = (j - i + 1) as f64;
        let rank = (i + j) as f64 / 2.0 + 1.0;
        v += rank * d[i..=j].iter().filter(|x| **x > 0.0).count() as f64;
        ties += t * t * t - t;
        tied |= j > i;
        i = j + 1;
    }
    if n < 50 && !tied && !zeros {
        let counts = rank_sum_counts(n);
        let total: f64 = counts.iter().map(|&c| c as f64).sum();
        let q = v.round() as usize;
        let tail: u64 = if v > (n * (n + 1)) as f64 / 4.0 {
            counts[q..].iter().sum()
        } else {
            counts[..=q].iter().sum()
        };
        let p = (2.0 * tail as f64 / total).min(1.0);
        return Some(SignedRank {
            v,
            p,
            n,
            exact: true,
        });
    }
    let nf = n as f64;
    let var = nf * (nf + 1.0) * (2.0 * nf + 1.0) / 24.0 - ties / 48.0;
    let z = v - nf * (nf + 1.0) / 4.0;
    let p = if var <= 0.0 {
        1.0
    } else {
        let z = (z - 0.5 * z.signum()) / var.sqrt();
        erfc(z.abs() / std::f64::consts::SQRT_2).min(1.0)
    };
    Some(SignedRank {
        v,
        p,
        n,
        exact: false,
    })
}

/// How many subsets of the ranks `1..=n` sum to each `v` in `0..=n(n+1)/2` (below 2^49 for
/// n < 50, so u64 holds them).
fn rank_sum_counts(n: usize) -> Vec<u64> {
    let max = n * (n + 1) / 2;
    let mut c = vec![0u64; max + 1];
    c[0] = 1;
    for r in 1..=n {
        for s in (r..=max).rev() {
            c[s] += c[s - r];
        }
    }
    c
}

/// Bootstrap 95 % interval of `median(b) / median(a) - 1` resampling whole pairs `(a[i], b[i])`
/// (percentile method, [`BOOTSTRAP_RESAMPLES`] resamples): the relative change of the medians,
/// with the pairing kept, so that what the iterations share (a lossy seed slows both arms)
/// does not widen it. `None` for fewer than 2 pairs, slices of different lengths, or a
/// resampled `median(a)` of 0.
pub fn bootstrap_paired_change_ci(a: &[f64], b: &[f64], seed: u64) -> Option<Interval> {
    if a.len() < 2 || a.len() != b.len() {
        return None;
    }
    let mut rng = Rng::new(seed);
    let (mut ra, mut rb) = (vec![0.0; a.len()], vec![0.0; a.len()]);
    let mut stats = Vec::with_capacity(BOOTSTRAP_RESAMPLES);
    for _ in 0..BOOTSTRAP_RESAMPLES {
        for k in 0..a.len() {
            let i = rng.below(a.len());
            ra[k] = a[i];
            rb[k] = b[i];
        }
        ra.sort_by(f64::total_cmp);
        rb.sort_by(f64::total_cmp);
        let ma = quantile_sorted(&ra, 0.5)?;
        let mb = quantile_sorted(&rb, 0.5)?;
        if ma == 0.0 {
            return None;
        }
        stats.push(mb / ma - 1.0);
    }
    percentile_interval(stats)
}

/// Benjamini–Hochberg adjusted p-values (R's `p.adjust(p, "BH")`): a cell is a discovery at
/// false-discovery rate q when its adjusted p is at most q.
pub fn bh_adjust(p: &[f64]) -> Vec<f64> {
    let m = p.len();
    let mut order: Vec<usize> = (0..m).collect();
    order.sort_by(|&i, &j| p[j].total_cmp(&p[i]));
    let mut out = vec![0.0; m];
    let mut running = 1.0f64;
    for (k, &i) in order.iter().enumerate() {
        // k-th largest has rank m - k
        let rank = (m - k) as f64;
        running = running.min(p[i] * m as f64 / rank);
        out[i] = running.min(1.0);
    }
    out
}

/// [`bh_adjust`] over a family some of whose members have no p-value: those are not part of
/// the family and stay without.
pub fn bh_adjust_some(p: &[Option<f64>]) -> Vec<Option<f64>> {
    let mut adjusted = bh_adjust(&p.iter().flatten().copied().collect::<Vec<_>>()).into_iter();
    p.iter().map(|x| x.and_then(|_| adjusted.next())).collect()
}

/// Whether a difference is called significant: at least `min` pairs (or trials a side), a
/// p-value adjusted across its family at most [`FDR`], and an interval excluding 0.
pub fn significant(n: usize, min: usize, p_adjusted: Option<f64>, ci: Option<Interval>) -> bool {
    n >= min && p_adjusted.is_some_and(|p| p <= FDR) && ci.is_some_and(|ci| !ci.contains(0.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    // 3.14 below is a patient's score, not π
    #[allow(clippy::approx_constant)]
    fn signed_rank_matches_r_exact_and_approximate() {
        // six pairs all one way, no ties: V = 21 (every rank), p = 2/64
        let a = [1.0; 6];
        let b = [2.0, 4.0, 6.0, 8.0, 10.0, 12.0];
        let t = signed_rank(&a, &b).unwrap();
        assert_eq!((t.v, t.n, t.exact), (21.0, 6, true));
        assert!((t.p - 0.03125).abs() < 1e-12, "{t:?}");
        // five pairs all one way: 2/32, never below 0.05
        let t = signed_rank(&a[..5], &b[..5]).unwrap();
        assert!((t.p - 0.0625).abs() < 1e-12, "{t:?}");
        // the example of R's ?wilcox.test (Hollander & Wolfe's depression scores), two-sided:
        // V = 40, p = 0.03906 (its one-sided "greater" p, 0.01953, doubled)
        let x = [1.83, 0.50, 1.62, 2.48, 1.68, 1.88, 1.55, 3.06, 1.30];
        let y = [0.878, 0.647, 0.598, 2.05, 1.06, 1.29, 1.06, 3.14, 1.29];
        let t = signed_rank(&y, &x).unwrap();
        assert_eq!(t.v, 40.0);
        assert!((t.p - 0.039_06).abs() < 1e-4, "{t:?}");
        // with ties, the normal approximation: differences 2, 2, 2, 5, -2, 7, 6; the four 2s
        // share rank 2.5, so V = 3 × 2.5 + 5 + 6 + 7 = 25.5 of 28; the variance 7·8·15/24 less
        // (4³ − 4)/48 is 33.75; z = (25.5 − 14 − 0.5) / √33.75 = 1.8935, p = 0.0583
        let t = signed_rank(
            &[1.0, 3.0, 3.0, 4.0, 4.0, 1.0, 1.0],
            &[3.0, 5.0, 5.0, 9.0, 2.0, 8.0, 7.0],
        )
        .unwrap();
        assert!(!t.exact);
        assert_eq!(t.v, 25.5);
        assert!((t.p - 0.0583).abs() < 1e-4, "{t:?}");
        // no difference at all: nothing to test
        assert_eq!(signed_rank(&[1.0, 2.0], &[1.0, 2.0]), None);
        assert_eq!(signed_rank(&[1.0], &[1.0, 2.0]), None);
    }

    #[test]
    fn the_exact_distribution_sums_to_every_subset() {
        for n in [1usize, 6, 20, 49] {
            let c = rank_sum_counts(n);
            assert_eq!(c.iter().sum::<u64>(), 1u64 << n);
            // symmetric about n(n+1)/4
            let max = c.len() - 1;
            assert!((0..=max).all(|v| c[v] == c[max - v]));
        }
    }

    #[test]
    fn a_paired_interval_is_narrower_than_two_samples_when_the_pairs_share_noise() {
        // each iteration's link slows both arms alike (a shared 0..900 ms); b is 5 % slower
        let a: Vec<f64> = (0..20).map(|i| 1000.0 + 45.0 * i as f64).collect();
        let b: Vec<f64> = a.iter().map(|x| x * 1.05).collect();
        let paired = bootstrap_paired_change_ci(&a, &b, 7).unwrap();
        assert!(paired.lo > 0.04 && paired.hi < 0.06, "{paired:?}");
        let unpaired = crate::bootstrap_relative_change_ci(&a, &b, 7).unwrap();
        assert!(unpaired.contains(0.0), "{unpaired:?}");
        assert!(paired.hi - paired.lo < (unpaired.hi - unpaired.lo) / 5.0);
        assert_eq!(bootstrap_paired_change_ci(&a[..1], &b[..1], 7), None);
        assert_eq!(bootstrap_paired_change_ci(&a, &b[..3], 7), None);
    }

    #[test]
    fn benjamini_hochberg_adjusts_as_r_does() {
        // sorted 0.005, 0.01, 0.03, 0.04, 0.5: p·5/rank = 0.025, 0.025, 0.05, 0.05, 0.5, each
        // the least of itself and those above it
        let adj = bh_adjust(&[0.01, 0.04, 0.03, 0.005, 0.5]);
        for (got, want) in adj.iter().zip([0.025, 0.05, 0.05, 0.025, 0.5]) {
            assert!((got - want).abs() < 1e-12, "{adj:?}");
        }
        assert!(bh_adjust(&[]).is_empty());
        // members without a p are left out of the family
        assert_eq!(
            bh_adjust_some(&[Some(0.01), None, Some(0.04)]),
            vec![Some(0.02), None, Some(0.04)]
        );
        assert_eq!(bh_adjust(&[0.9, 0.8]), vec![0.9, 0.9]);
    }
}
