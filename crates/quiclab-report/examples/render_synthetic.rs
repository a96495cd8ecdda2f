//! Writes the report of a synthetic www21-like campaign to the path given as the first argument
//! (default `report.html`), to look at the report without running a campaign:
//!
//! ```sh
//! cargo run -p quiclab-report --example render_synthetic -- /tmp/report.html [iterations] [seed]
//! ```

use std::process::ExitCode;

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let path = args.next().unwrap_or_else(|| "report.html".into());
    let parse = |v: Option<String>, default: u64| -> Result<u64, String> {
        v.map_or(Ok(default), |s| {
            s.parse().map_err(|e| format!("bad number {s:?}: {e}"))
        })
    };
    let (iterations, seed) = match (parse(args.next(), 10), parse(args.next(), 1)) {
        (Ok(i), Ok(s)) => (i, s),
        (Err(e), _) | (_, Err(e)) => {
            eprintln!("usage: render_synthetic [PATH] [ITERATIONS] [SEED]: {e}");
            return ExitCode::FAILURE;
        }
    };
    let Ok(iterations) = u32::try_from(iterations) else {
        eprintln!("too many iterations: {iterations}");
        return ExitCode::FAILURE;
    };
    let campaign = quiclab_report::synthetic::campaign(iterations, seed);
    let html = quiclab_report::render(&campaign);
    if let Err(e) = std::fs::write(&path, &html) {
        eprintln!("cannot write {path}: {e}");
        return ExitCode::FAILURE;
    }
    println!(
        "wrote {path} ({} bytes, {} trials)",
        html.len(),
        campaign.trials.len()
    );
    ExitCode::SUCCESS
}
