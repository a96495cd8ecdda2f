//! `quiclab figure`: the report's figures as files, for a paper.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, bail};
use clap::Args;
use quiclab_report::figures::{Figure, figures};
use quiclab_store::Store;
use resvg::{tiny_skia, usvg};

/// Write the report's figures one by one: SVG, PNG, the data as CSV, the caption
///
/// Write the report's figures one by one: each as SVG (the page's own, byte for byte), as PNG,
/// and the data it draws as CSV, with its caption in NAME.txt.
///
/// Every chart of the report is a figure, named after its section, in the report's order:
///   repeat-SIZE-throughput, repeat-SIZE-CONDITION-ttfb-cdf / -ttlb-cdf   (repeated requests)
///   segments-throughput, segments-drop, segments-CONDITION-series        (segments)
///   pages-CONDITION-PAGE-ARM-waterfall                                   (web pages)
///   telemetry-CONDITION-latency, telemetry-CONDITION-cdf                 (telemetry)
///   bulk-CONDITION-goodput                                               (bulk throughput)
///   heatmap-B-A                                      (each comparison's median TTLB change)
///   budgets-CONDITION-SIZE                           (why: each cell's time budgets)
///   CONDITION-SIZE-KIND   (each cell: acked, window, iterations, spans, cdf, retransmit)
/// The CSV holds the values drawn, not pixels: for timelines every sample of the trials drawn
/// (a `median` column marks each arm's median trial), for waterfalls every resource's times,
/// for bars each bar's value and whisker, for CDFs each value with its fraction. PNGs are drawn
/// from the SVG with the system's fonts (DejaVu Sans or Liberation Sans where the charts'
/// fonts are missing).
///
/// Examples:
///   quiclab figure results/www21                     # into results/www21/figures
///   quiclab figure results/www21 --list
///   quiclab figure results/www21 --only loss-1-1-mb --scale 3 --out paper/fig
#[derive(Args)]
#[command(verbatim_doc_comment)]
pub struct FigureCmd {
    /// A campaign directory written by `quiclab run`.
    dir: PathBuf,
    /// Where the files go (made if needed; files of the same names are replaced).
    /// [default: DIR/figures]
    #[arg(long, short)]
    out: Option<PathBuf>,
    /// Only the figures whose name contains this text (repeat for several).
    #[arg(long, value_name = "TEXT")]
    only: Vec<String>,
    /// PNG pixels per SVG pixel: 2 is 192 dpi, a column of a two-column paper at print
    /// quality.
    #[arg(long, default_value_t = 2.0, value_parser = scale)]
    scale: f32,
    /// Print the figures' names and titles, write nothing.
    #[arg(long)]
    list: bool,
}

fn scale(s: &str) -> Result<f32, String> {
    let v: f32 = s
        .parse()
        .map_err(|_| format!("{s:?} is not a number (e.g. 2)"))?;
    if (0.25..=8.0).contains(&v) {
        Ok(v)
    } else {
        Err(format!("{v} is outside 0.25 to 8"))
    }
}

pub fn figure(c: FigureCmd) -> anyhow::Result<i32> {
    let store = Store::open_existing(&c.dir)?;
    let campaign = store.campaign()?;
    let all = figures(&campaign);
    if all.is_empty() {
        bail!(
            "{}: this campaign's report has no chart to export (its {} trials give none: \
             no successful trial, or nothing its {} sections draw)",
            c.dir.display(),
            campaign.trials.len(),
            campaign.workload.kind()
        );
    }
    let chosen: Vec<&Figure> = all
        .iter()
        .filter(|f| c.only.is_empty() || c.only.iter().any(|o| f.name.contains(o.as_str())))
        .collect();
    if chosen.is_empty() {
        let names: Vec<&str> = all.iter().map(|f| f.name.as_str()).collect();
        let shown = names.len().min(12);
        bail!(
            "no figure's name contains {}; the {} figures are {}{} (quiclab figure {} --list \
             names them all)",
            c.only
                .iter()
                .map(|o| format!("{o:?}"))
                .collect::<Vec<_>>()
                .join(" or "),
            names.len(),
            names[..shown].join(", "),
            if shown < names.len() { ", ..." } else { "" },
            c.dir.display()
        );
    }
    if c.list {
        for f in &chosen {
            println!("{}\t{}", f.name, f.title);
        }
        return Ok(0);
    }
    let out = c.out.clone().unwrap_or_else(|| c.dir.join("figures"));
    std::fs::create_dir_all(&out).with_context(|| format!("making {}", out.display()))?;
    let fonts = fonts();
    let write = |name: &str, bytes: &[u8]| -> anyhow::Result<()> {
        let p = out.join(name);
        quiclab_store::output::write_atomic(&p, bytes)
            .with_context(|| format!("writing {}", p.display()))
    };
    // a count that rewrites itself on a terminal; a log gets the total once
    let progress = std::io::stderr().is_terminal();
    for (i, f) in chosen.iter().enumerate() {
        write(&format!("{}.svg", f.name), f.svg.as_bytes())?;
        write(&format!("{}.png", f.name), &png(&f.svg, c.scale, &fonts)?)?;
        if let Some(csv) = &f.csv {
            write(&format!("{}.csv", f.name), csv.as_bytes())?;
        }
        write(
            &format!("{}.txt", f.name),
            format!("{}\n\n{}\n", f.title, plain(&f.caption)).as_bytes(),
        )?;
        if progress {
            eprint!("\rquiclab: {} of {} figures", i + 1, chosen.len());
        }
    }
    if progress {
        eprintln!();
    } else {
        eprintln!("quiclab: {} figures", chosen.len());
    }
    println!("{}", out.display());
    Ok(0)
}

/// The system's fonts, with the generic families the charts fall back to pointed at fonts a
/// Debian system has.
fn fonts() -> Arc<usvg::fontdb::Database> {
    let mut db = usvg::fontdb::Database::new();
    db.load_system_fonts();
    let has = |db: &usvg::fontdb::Database, family: &str| {
        db.faces()
            .any(|f| f.families.iter().any(|(n, _)| n == family))
    };
    if let Some(sans) = ["DejaVu Sans", "Liberation Sans", "Noto Sans"]
        .into_iter()
        .find(|f| has(&db, f))
    {
        db.set_sans_serif_family(sans);
    }
    Arc::new(db)
}

/// `svg` drawn at `scale` pixels per SVG pixel, as PNG.
fn png(svg: &str, scale: f32, fonts: &Arc<usvg::fontdb::Database>) -> anyhow::Result<Vec<u8>> {
    let opt = usvg::Options {
        fontdb: fonts.clone(),
        ..usvg::Options::default()
    };
    let tree = usvg::Tree::from_str(svg, &opt).context("reading a figure's SVG")?;
    let size = tree.size();
    let (w, h) = (
        (size.width() * scale).ceil() as u32,
        (size.height() * scale).ceil() as u32,
    );
    let mut pixmap = tiny_skia::Pixmap::new(w.max(1), h.max(1))
        .with_context(|| format!("a {w} x {h} image is too large"))?;
    resvg::render(
        &tree,
        tiny_skia::Transform::from_scale(scale, scale),
        &mut pixmap.as_mut(),
    );
    pixmap.encode_png().context("encoding a PNG")
}

/// A caption's HTML as plain text: tags left out, the few entities the report writes read.
fn plain(html: &str) -> String {
    let mut out = String::with_capacity(html.len());
    let mut in_tag = false;
    for ch in html.chars() {
        match ch {
            '<' => in_tag = true,
            '>' if in_tag => in_tag = false,
            _ if !in_tag => out.push(ch),
            _ => {}
        }
    }
    out.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&#39;", "'")
        .replace("&amp;", "&")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_caption_reads_as_text() {
        assert_eq!(
            plain("the legend is in <a href=\"#why\">Why</a> &amp; h2 &lt; h3"),
            "the legend is in Why & h2 < h3"
        );
    }

    #[test]
    fn a_figure_draws_as_a_png_of_its_size_times_the_scale() {
        let camp = quiclab_report::synthetic::campaign(3, 1);
        let f = &figures(&camp)[0];
        let bytes = png(&f.svg, 2.0, &fonts()).unwrap();
        assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
        // IHDR: width and height, big-endian, after the signature and the chunk's header
        let w = u32::from_be_bytes(bytes[16..20].try_into().unwrap());
        let h = u32::from_be_bytes(bytes[20..24].try_into().unwrap());
        let tree = usvg::Tree::from_str(&f.svg, &usvg::Options::default()).unwrap();
        assert_eq!(w, (tree.size().width() * 2.0).ceil() as u32);
        assert_eq!(h, (tree.size().height() * 2.0).ceil() as u32);
    }
}
