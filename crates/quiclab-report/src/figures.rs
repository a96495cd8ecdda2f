//! The report's figures one by one, for a paper: each as the same standalone SVG the page
//! shows, with its caption and the data it draws as CSV. `quiclab figure` writes them out (and
//! a PNG of each).
//!
//! Contract: [`figures`] gives every chart of the page, section by section in the page's order
//! (repeated requests, segments, page waterfalls, telemetry, bulk goodput, the heatmaps, the
//! time budgets, then every cell's charts); a name is unique within a campaign and made only of
//! lower-case letters, digits and `-`, so it is a file name on any system. The SVG is byte for
//! byte the page's, and each figure's CSV holds the values it draws.

use crate::analysis::Analysis;
use crate::model::Campaign;
use quiclab_model::csv::Table;

/// One figure of the report.
#[derive(Debug, Clone, PartialEq)]
pub struct Figure {
    /// A file name without its extension, e.g. `loss-1-1-mb-acked`.
    pub name: String,
    /// What it shows, as its chart's label says.
    pub title: String,
    /// HTML, as under the figure in the report.
    pub caption: String,
    pub svg: String,
    /// The data drawn, one row per point (absent where it was not asked for).
    pub csv: Option<String>,
}

impl Figure {
    /// The figure as the page shows it: its SVG over its caption.
    pub fn html(&self) -> String {
        format!(
            "<figure>{}<figcaption>{}</figcaption></figure>\n",
            self.svg, self.caption
        )
    }
}

/// `make`'s table as CSV when `with_csv` (the export's; the page needs none).
pub(crate) fn csv_if(with_csv: bool, make: impl FnOnce() -> Table) -> Option<String> {
    with_csv.then(|| make().into_string())
}

/// Every figure of `campaign`'s report that [`Figure`] covers, with its data as CSV.
pub fn figures(campaign: &Campaign) -> Vec<Figure> {
    let an = Analysis::new(campaign);
    use crate::sections::*;
    let mut out = Vec::new();
    for section in [
        repeat::figures,
        segments::figures,
        pages::figures,
        telemetry::figures,
        bulk::figures,
        heatmap::figures,
        why::figures,
    ] {
        out.extend(section(&an, true));
    }
    if campaign.workload.is_requests() {
        for ci in 0..campaign.conditions.len() {
            for s in 0..campaign.sizes.len() {
                out.extend(crate::sections::cells::figures(&an, ci, s, true));
            }
        }
    }
    // names made unique in order (two conditions may slug alike: "loss 1%" and "loss-1")
    let mut seen = std::collections::HashSet::new();
    for f in &mut out {
        let base = f.name.clone();
        let mut k = 2;
        while !seen.insert(f.name.clone()) {
            f.name = format!("{base}-{k}");
            k += 1;
        }
    }
    out
}

/// `s` as a file name's part: lower-case letters and digits, every other run of characters
/// one `-`, none at either end ("loss 0.1%" -> "loss-0-1"; "1 MB" -> "1-mb").
pub fn slug(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for ch in s.chars().flat_map(char::to_lowercase) {
        if ch.is_ascii_alphanumeric() {
            out.push(ch);
        } else if !out.is_empty() && !out.ends_with('-') {
            out.push('-');
        }
    }
    while out.ends_with('-') {
        out.pop();
    }
    if out.is_empty() { "x".into() } else { out }
}

/// Checks the contract on `campaign`: every chart of its page is one exported figure (its SVG
/// byte for byte, once), names are unique file names, and every CSV is a rectangular table
/// with data wherever the chart drew some. Returns the figures.
#[cfg(test)]
pub(crate) fn assert_exported(campaign: &Campaign) -> Vec<Figure> {
    let figs = figures(campaign);
    let page = crate::render(campaign);
    assert_eq!(
        page.matches("<svg").count(),
        figs.len(),
        "the page's charts against the figures {:?}",
        figs.iter().map(|f| &f.name).collect::<Vec<_>>()
    );
    let mut names = std::collections::HashSet::new();
    for f in &figs {
        assert!(names.insert(f.name.clone()), "{} twice", f.name);
        assert!(
            f.name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'),
            "{}",
            f.name
        );
        assert!(page.contains(&f.svg), "{} is not the page's", f.name);
        assert!(
            page.contains(&f.caption),
            "{}: its caption is not the page's",
            f.name
        );
        let csv = f
            .csv
            .as_ref()
            .unwrap_or_else(|| panic!("{}: no CSV", f.name));
        let mut lines = csv.lines();
        let columns = lines.next().expect("a header").split(',').count();
        let rows: Vec<&str> = lines.collect();
        assert!(
            crate::chart::is_empty_chart(&f.svg) || !rows.is_empty(),
            "{}: no data",
            f.name
        );
        assert!(
            rows.iter().all(|r| r.split(',').count() == columns),
            "{}: rows of other widths than {columns}",
            f.name
        );
    }
    figs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slugs_are_file_names() {
        assert_eq!(slug("loss 0.1%"), "loss-0-1");
        assert_eq!(slug("1 MB"), "1-mb");
        assert_eq!(slug("rtt+100ms"), "rtt-100ms");
        assert_eq!(slug("--"), "x");
        assert_eq!(slug("Ünïcode name"), "n-code-name");
    }

    #[test]
    fn every_figure_of_the_page_is_there_once_with_its_data() {
        let camp = crate::synthetic::campaign(5, 1);
        let figs = assert_exported(&camp);
        let cells = camp.conditions.len() * camp.sizes.len();
        // a heatmap per comparison and five charts per cell (no budgets in the synthetic data)
        assert_eq!(figs.len(), camp.comparisons.len() + 5 * cells);
        // the CDF's data: every successful trial of the cell once, each arm ending at 1
        let cdf = figs
            .iter()
            .find(|f| f.name == "base-1-mb-cdf")
            .expect("base · 1 MB's CDF");
        let ok = camp
            .trials
            .iter()
            .filter(|t| t.condition == "base" && t.size == 1_000_000 && t.outcome.is_ok())
            .count();
        let csv = cdf.csv.as_ref().unwrap();
        assert_eq!(csv.lines().count() - 1, ok);
        let ends = csv.lines().filter(|l| l.ends_with(",1")).count();
        assert_eq!(ends, camp.arms.len());
        // every iteration's timeline, and the median's flagged once per arm
        let every = figs
            .iter()
            .find(|f| f.name == "base-1-mb-iterations")
            .unwrap();
        let csv = every.csv.as_ref().unwrap();
        let trials: std::collections::HashSet<&str> = csv
            .lines()
            .skip(1)
            .map(|l| l.split(',').nth(2).unwrap())
            .collect();
        assert_eq!(trials.len(), ok);
        let medians: std::collections::HashSet<&str> = csv
            .lines()
            .skip(1)
            .filter(|l| l.split(',').nth(3) == Some("true"))
            .map(|l| l.split(',').nth(2).unwrap())
            .collect();
        assert_eq!(medians.len(), camp.arms.len());
    }
}
