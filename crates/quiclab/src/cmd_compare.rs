//! `quiclab compare`: two campaigns side by side.

use std::path::PathBuf;

use clap::Args;
use quiclab_report::compare::{self, change_text};
use quiclab_store::Store;
use serde_json::json;

use crate::out::Out;
use crate::usage::usage;

/// Put two campaigns side by side: B's median TTLB against A's, cell by cell
///
/// Put two campaigns side by side: the same cells (arm, condition, size) of each, B's median
/// TTLB against A's.
///
/// For every cell both campaigns measured: the trials on each side, both medians, the change of
/// B relative to A with a bootstrap 95 % interval and a Mann-Whitney p-value. A change is
/// significant with at least 4 trials a side, a p-value that stays at most 0.05 after the
/// Benjamini-Hochberg adjustment across the shared cells, and an interval that excludes 0; a
/// significant slowdown is flagged as a regression. Use it for two builds of quiclab or of a
/// stack, two machines, or two versions of a plan. Both campaigns' provenance (build, kernel,
/// CPU, settings) is set side by side, differences flagged.
///
/// Prints a table; with --out DIR also writes DIR/compare.html (one self-contained page).
/// Campaigns with no cell in common are refused, naming the arms each has alone; --map pairs
/// an arm of A with a differently named one of B.
///
/// Examples:
///   quiclab compare results/www21-before results/www21 --out /tmp/cmp
///   quiclab compare old new --map h3=h3-quinn     # A's arm "h3" is B's "h3-quinn"
#[derive(Args)]
#[command(verbatim_doc_comment)]
pub struct CompareCmd {
    /// Campaign A, the reference (a directory written by `quiclab run`).
    a: PathBuf,
    /// Campaign B, compared with A.
    b: PathBuf,
    /// Write DIR/compare.html too.
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// Print the comparison as one JSON object on standard output (the table goes to standard
    /// error).
    #[arg(long)]
    json: bool,
    /// A's arm OLD is B's arm NEW (repeat for several): compares cells of renamed arms.
    #[arg(long, value_name = "OLD=NEW")]
    map: Vec<String>,
}

/// The arm names of a campaign's trials, sorted.
fn arm_names(c: &quiclab_model::campaign::Campaign) -> std::collections::BTreeSet<String> {
    c.trials.iter().map(|t| t.arm.clone()).collect()
}

pub fn compare(c: CompareCmd) -> anyhow::Result<i32> {
    let out = Out::new(c.json);
    for d in [&c.a, &c.b] {
        if !d.is_dir() {
            usage!(
                "{}: no such directory; name two directories `quiclab run` wrote",
                d.display()
            );
        }
    }
    if std::fs::canonicalize(&c.a)? == std::fs::canonicalize(&c.b)? {
        usage!(
            "A and B are the same campaign ({}): name two campaigns to compare",
            c.a.display()
        );
    }
    let mut a = Store::open_existing(&c.a)?.campaign()?;
    let b = Store::open_existing(&c.b)?.campaign()?;
    let (names_a, names_b) = (arm_names(&a), arm_names(&b));
    for m in &c.map {
        let Some((old, new)) = m.split_once('=') else {
            usage!("--map {m:?}: give OLD=NEW, an arm of A and the arm of B it is");
        };
        if !names_a.contains(old) {
            usage!(
                "--map {m:?}: A ({}) has no arm {old:?}; its arms: {}",
                c.a.display(),
                names_a.iter().cloned().collect::<Vec<_>>().join(", ")
            );
        }
        if !names_b.contains(new) {
            usage!(
                "--map {m:?}: B ({}) has no arm {new:?}; its arms: {}",
                c.b.display(),
                names_b.iter().cloned().collect::<Vec<_>>().join(", ")
            );
        }
        for t in a.trials.iter_mut().filter(|t| t.arm == old) {
            t.arm = new.to_string();
        }
    }
    let cmp = compare::compare(&a, &b);
    let (la, lb) = (c.a.display().to_string(), c.b.display().to_string());
    out.line(format!(
        "A: {la} (plan {})\nB: {lb} (plan {})",
        a.name, b.name
    ));
    out.line(format!(
        "{:<24} {:<24} {:>10} {:>9} {:>11} {:>11}  {:<34} {}",
        "arm", "condition", "size", "n A/B", "median A", "median B", "change of B [95 % CI]", ""
    ));
    for d in &cmp.cells {
        out.line(format!(
            "{:<24} {:<24} {:>10} {:>9} {:>8.1} ms {:>8.1} ms  {:<34} {}",
            d.arm,
            d.condition,
            quiclab_model::units::size(d.size),
            format!("{}/{}", d.n_a, d.n_b),
            d.median_a_ms,
            d.median_b_ms,
            change_text(d),
            if d.regression() {
                "REGRESSION"
            } else if d.significant {
                "faster"
            } else {
                ""
            }
        ));
    }
    if cmp.cells.is_empty() {
        let (now_a, now_b) = (arm_names(&a), arm_names(&b));
        let alone = |x: &std::collections::BTreeSet<String>,
                     y: &std::collections::BTreeSet<String>| {
            let v: Vec<String> = x.difference(y).map(|s| format!("{s:?}")).collect();
            if v.is_empty() {
                "none".to_string()
            } else {
                v.join(", ")
            }
        };
        usage!(
            "A and B have no cell (arm, condition and size) in common: {} cells in A only, {} \
             in B only. Arms of A alone: {}; of B alone: {}. Compare campaigns of the same \
             arms, conditions and sizes, or pair renamed arms with --map OLD=NEW",
            cmp.only_a,
            cmp.only_b,
            alone(&now_a, &now_b),
            alone(&now_b, &now_a)
        );
    }
    let regressions = cmp.cells.iter().filter(|d| d.regression()).count();
    out.line(format!(
        "{} cells compared: {regressions} regressions; {} cells in A only, {} in B only",
        cmp.cells.len(),
        cmp.only_a,
        cmp.only_b
    ));
    let page = match &c.out {
        Some(dir) => {
            quiclab_store::output::check_dir(dir)?;
            std::fs::create_dir_all(dir)?;
            let path = dir.join("compare.html");
            let html = compare::render(&a, &b, [&la, &lb], &cmp);
            quiclab_store::output::write_atomic(&path, html.as_bytes())?;
            eprintln!("quiclab: {}", path.display());
            Some(path)
        }
        None => None,
    };
    out.summary(|| {
        json!({
            "a": la,
            "b": lb,
            "page": page,
            "regressions": regressions,
            "only_a": cmp.only_a,
            "only_b": cmp.only_b,
            "cells": cmp.cells.iter().map(|d| json!({
                "arm": d.arm,
                "condition": d.condition,
                "size": d.size,
                "n_a": d.n_a,
                "n_b": d.n_b,
                "median_a_ms": d.median_a_ms,
                "median_b_ms": d.median_b_ms,
                "change": d.rel,
                "ci": d.ci.map(|ci| [ci.lo, ci.hi]),
                "p": d.p,
                "p_adjusted": d.p_adjusted,
                "significant": d.significant,
                "regression": d.regression(),
            })).collect::<Vec<_>>(),
        })
    });
    Ok(crate::usage::OK)
}
