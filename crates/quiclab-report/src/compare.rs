//! Two campaigns side by side (`quiclab compare A B`): the cells they share, each an arm of a
//! condition and size measured in both, with B's median TTLB against A's.
//!
//! Contract: pure, as the rest of the report. A cell is keyed by arm name, condition name and
//! size; its samples are the TTLB of its successful trials in each campaign. The change is
//! `(median_B - median_A) / median_A` with a bootstrap 95 % interval (each campaign resampled
//! on its own, seeded by the cell's key, so the same pair of campaigns always gives the same
//! page) and a two-sided Mann-Whitney p-value (two campaigns' trials are not paired: they ran
//! at different times); it is significant when each side has at least [`MIN_TRIALS`] trials,
//! the p-value adjusted by Benjamini-Hochberg across the shared cells is at most
//! [`stats::paired::FDR`], and the interval excludes 0. A significant slowdown is a
//! regression. Cells found in one campaign only are counted, not compared.

use std::collections::BTreeMap;
use std::fmt::Write;

use crate::chart::diverging;
use crate::html::esc;
use crate::model::Campaign;
use crate::stats::{self, Interval};

/// The fewest trials per side on which a two-sided Mann-Whitney test can reach p < 0.05: with
/// 3 against 3 its exact p is at least 2/20 = 0.1, with 4 against 4 it can be 2/70 = 0.029.
pub const MIN_TRIALS: usize = 4;

/// One cell of both campaigns.
#[derive(Debug, Clone)]
pub struct CellDiff {
    pub arm: String,
    pub condition: String,
    pub size: u64,
    pub n_a: usize,
    pub n_b: usize,
    pub median_a_ms: f64,
    pub median_b_ms: f64,
    /// `(median_b - median_a) / median_a`.
    pub rel: f64,
    /// Bootstrap 95 % interval of `rel`; `None` with fewer than 2 trials on a side.
    pub ci: Option<Interval>,
    pub p: Option<f64>,
    /// `p` adjusted by Benjamini-Hochberg across the cells both campaigns measured.
    pub p_adjusted: Option<f64>,
    /// At least [`MIN_TRIALS`] a side, the adjusted p at most the false-discovery rate, and the
    /// interval excluding 0.
    pub significant: bool,
}

impl CellDiff {
    /// B is significantly slower than A here.
    pub fn regression(&self) -> bool {
        self.significant && self.rel > 0.0
    }
}

/// What two campaigns have in common, and what not.
#[derive(Debug, Clone)]
pub struct Comparison {
    pub cells: Vec<CellDiff>,
    /// Cells with successful trials in A only, and in B only.
    pub only_a: usize,
    pub only_b: usize,
}

type Key = (String, String, u64);

fn samples(c: &Campaign) -> BTreeMap<Key, Vec<f64>> {
    let mut m: BTreeMap<Key, Vec<f64>> = BTreeMap::new();
    for t in &c.trials {
        if let Ok(x) = &t.outcome {
            m.entry((t.arm.clone(), t.condition.clone(), t.size))
                .or_default()
                .push(x.ttlb_ms);
        }
    }
    m
}

/// Compares every cell the two campaigns share.
pub fn compare(a: &Campaign, b: &Campaign) -> Comparison {
    let (sa, sb) = (samples(a), samples(b));
    let mut cells = Vec::new();
    for (key, xa) in &sa {
        let Some(xb) = sb.get(key) else { continue };
        let (Some(ma), Some(mb)) = (stats::median(xa), stats::median(xb)) else {
            continue;
        };
        if ma <= 0.0 {
            continue;
        }
        let seed = stats::seed_from(&["compare", &key.0, &key.1, &key.2.to_string()]);
        let ci = stats::bootstrap_relative_change_ci(xa, xb, seed);
        cells.push(CellDiff {
            arm: key.0.clone(),
            condition: key.1.clone(),
            size: key.2,
            n_a: xa.len(),
            n_b: xb.len(),
            median_a_ms: ma,
            median_b_ms: mb,
            rel: (mb - ma) / ma,
            p: stats::mann_whitney(xa, xb).map(|m| m.p),
            p_adjusted: None,
            significant: false,
            ci,
        });
    }
    let ps: Vec<Option<f64>> = cells.iter().map(|c| c.p).collect();
    for (c, adj) in cells.iter_mut().zip(stats::paired::bh_adjust_some(&ps)) {
        c.p_adjusted = adj;
        c.significant = stats::paired::significant(c.n_a.min(c.n_b), MIN_TRIALS, adj, c.ci);
    }
    Comparison {
        only_a: sa.keys().filter(|k| !sb.contains_key(*k)).count(),
        only_b: sb.keys().filter(|k| !sa.contains_key(*k)).count(),
        cells,
    }
}

fn pct(v: f64) -> String {
    format!("{:+.1} %", v * 100.0)
}

/// How a cell reads in a table: the change and its interval, or why there is none.
pub fn change_text(c: &CellDiff) -> String {
    match c.ci {
        Some(ci) => format!("{} [{}, {}]", pct(c.rel), pct(ci.lo), pct(ci.hi)),
        None => format!("{} (too few trials for an interval)", pct(c.rel)),
    }
}

/// The comparison as one self-contained HTML page (the report's style).
pub fn render(a: &Campaign, b: &Campaign, labels: [&str; 2], cmp: &Comparison) -> String {
    let mut out = String::with_capacity(64 << 10);
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>quiclab comparison: {} against {}</title>\n<style>{}</style>\n</head>\n<body>\n\
         <main>\n<h1>{} against {}</h1>\n",
        esc(labels[1]),
        esc(labels[0]),
        crate::sections::CSS,
        esc(labels[1]),
        esc(labels[0])
    );
    let regressions = cmp.cells.iter().filter(|c| c.regression()).count();
    let faster = cmp
        .cells
        .iter()
        .filter(|c| c.significant && c.rel < 0.0)
        .count();
    let _ = writeln!(
        out,
        "<p class=\"desc\">Median TTLB of B ({}) against A ({}) in the {} cells (arm, \
         condition, size) both measured: <strong>{regressions} significantly slower</strong> \
         (regressions, flagged), {faster} significantly faster, the others not told apart \
         (grey). A cell differs when each campaign has at least {min} trials in it, the \
         Mann-Whitney p-value adjusted by Benjamini-Hochberg across these {} cells is at most \
         {fdr} (of the {flagged} flagged, about {chance:.1} may differ by chance alone), and \
         the 95 % bootstrap interval of the change excludes 0. {} cells were measured by A \
         only, {} by B only.</p>",
        esc(labels[1]),
        esc(labels[0]),
        cmp.cells.len(),
        cmp.cells.len(),
        cmp.only_a,
        cmp.only_b,
        min = MIN_TRIALS,
        fdr = stats::paired::FDR,
        flagged = regressions + faster,
        chance = (regressions + faster) as f64 * stats::paired::FDR,
    );
    // provenance of both, key by key
    out.push_str("<h2>Provenance</h2>\n<table><thead><tr><th></th>");
    let _ = write!(
        out,
        "<th>A: {}</th><th>B: {}</th></tr></thead><tbody>",
        esc(labels[0]),
        esc(labels[1])
    );
    let mut keys: Vec<&str> = Vec::new();
    for (k, _) in a.provenance.iter().chain(&b.provenance) {
        if !keys.contains(&k.as_str()) {
            keys.push(k);
        }
    }
    let get = |c: &Campaign, k: &str| {
        c.provenance
            .iter()
            .find(|(pk, _)| pk == k)
            .map_or(String::new(), |(_, v)| v.clone())
    };
    for k in keys {
        let (va, vb) = (get(a, k), get(b, k));
        let _ = write!(
            out,
            "<tr><th>{}</th><td>{}</td><td{}>{}</td></tr>",
            esc(k),
            esc(&va),
            if va != vb { " class=\"flag\"" } else { "" },
            esc(&vb)
        );
    }
    out.push_str("</tbody></table>\n<h2>Cells</h2>\n");
    out.push_str(
        "<table><thead><tr><th>arm</th><th>condition</th><th class=\"num\">size</th>\
         <th class=\"num\">n A / B</th><th class=\"num\">median A (ms)</th>\
         <th class=\"num\">median B (ms)</th><th>change of B [95 % CI]</th>\
         <th class=\"num\">p (adjusted)</th><th></th></tr></thead><tbody>\n",
    );
    for c in &cmp.cells {
        let (bg, dark) = if c.significant {
            diverging(c.rel, 0.5)
        } else {
            (crate::chart::NEUTRAL_FILL.to_string(), false)
        };
        let _ = writeln!(
            out,
            "<tr><td>{}</td><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{} / {}</td>\
             <td class=\"num\">{:.1}</td><td class=\"num\">{:.1}</td>\
             <td style=\"background:{bg};color:{}\">{}</td><td class=\"num\">{}</td><td>{}</td></tr>",
            esc(&c.arm),
            esc(&c.condition),
            esc(&crate::sections::size_label(b, c.size)),
            c.n_a,
            c.n_b,
            c.median_a_ms,
            c.median_b_ms,
            if dark { "#fff" } else { "#1d1d1f" },
            esc(&change_text(c)),
            match (c.p, c.p_adjusted) {
                (Some(p), Some(adj)) => format!("{p:.3} ({adj:.3})"),
                (Some(p), None) => format!("{p:.3}"),
                _ => String::new(),
            },
            if c.regression() {
                "<strong class=\"flag\">regression</strong>"
            } else {
                ""
            }
        );
    }
    out.push_str("</tbody></table>\n</main>\n</body>\n</html>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Metrics, Trial};

    fn campaign(arm_ms: &[(&str, f64)], n: u32, provenance: &str) -> Campaign {
        let mut c = Campaign {
            provenance: vec![("quiclab".into(), provenance.into())],
            ..Default::default()
        };
        for (arm, ms) in arm_ms {
            for i in 0..n {
                c.trials.push(Trial {
                    id: format!("{arm}-{i}"),
                    arm: arm.to_string(),
                    condition: "loss 1%".into(),
                    size: 100_000,
                    iteration: i,
                    seed: 0,
                    before: None,
                    // a spread of 2 % around the median, the same in both campaigns
                    outcome: Ok(Metrics {
                        ttlb_ms: ms * (0.99 + 0.02 * f64::from(i) / f64::from(n)),
                        ..Default::default()
                    }),
                    artifacts: None,
                    host: None,
                    started_unix_ms: 0,
                    wall_ms: 0.0,
                });
            }
        }
        c
    }

    #[test]
    fn a_slower_cell_is_a_regression_an_equal_one_is_not_and_unshared_cells_are_counted() {
        let a = campaign(&[("h3", 100.0), ("h2", 200.0), ("old", 50.0)], 20, "0.1.0");
        let b = campaign(&[("h3", 120.0), ("h2", 200.0), ("new", 50.0)], 20, "0.2.0");
        let cmp = compare(&a, &b);
        assert_eq!((cmp.only_a, cmp.only_b), (1, 1));
        assert_eq!(cmp.cells.len(), 2);
        let h3 = cmp.cells.iter().find(|c| c.arm == "h3").unwrap();
        assert!((h3.rel - 0.2).abs() < 1e-9, "{h3:?}");
        assert!(h3.significant && h3.regression(), "{h3:?}");
        assert!(h3.ci.unwrap().contains(0.2));
        let h2 = cmp.cells.iter().find(|c| c.arm == "h2").unwrap();
        assert!(!h2.significant && !h2.regression(), "{h2:?}");
        let html = render(&a, &b, ["a", "b"], &cmp);
        assert_eq!(html.matches(">regression<").count(), 1);
        // the provenance that differs is flagged
        assert!(html.contains("<td class=\"flag\">0.2.0</td>"));
        // the same campaigns give the same page
        assert_eq!(html, render(&a, &b, ["a", "b"], &compare(&a, &b)));
    }
}
