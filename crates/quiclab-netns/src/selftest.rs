//! The instrument's acceptance test: builds topologies with known settings, measures them with
//! the [`crate::probe`] functions, and compares each measurement with what was configured.
//!
//! Random link decisions are seeded ([`SEED`] unless given), so the loss checks see the same
//! packet fates on every run. Their tolerances are the 99% intervals of the configured models: over
//! many seeds, a correct instrument fails each loss check for about one seed in a hundred.

use std::time::Duration;

use quiclab_link::{Direction, DirectionConfig, LinkConfig};

use crate::error::{Error, Result};
use crate::forward::DirectionReport;
use crate::probe::{self, Family, Flow, GoodputConfig, LossConfig, RttConfig};
use crate::topology::{Topology, TopologyConfig};

/// Default seed of every link the self-test builds. Its loss realisations lie well inside the
/// models' 99% intervals (i.i.d.: 505 of 50,000; bursts: mean 3.98 over 490), so a failing loss
/// check points at the instrument rather than at chance.
pub const SEED: u64 = 2;
/// Two-sided 99% quantile of the standard normal distribution.
pub const Z99: f64 = 2.576;
/// Allowed error of a median round trip.
pub const RTT_TOLERANCE: Duration = Duration::from_micros(300);
/// Goodput must reach this share of the link rate. With 1500-byte packets, IP and TCP headers
/// (52 bytes with timestamps) cap application goodput at about 96.5% of the IP rate.
pub const GOODPUT_MIN: f64 = 0.90;

/// One line of the self-test's report.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub check: String,
    pub configured: String,
    pub measured: String,
    pub tolerance: String,
    pub pass: bool,
}

/// Runs every check in turn with [`SEED`], calling `progress` as each row completes, and returns
/// the rows. Takes about 30 s. Needs root.
pub fn run(progress: impl FnMut(&Row)) -> Vec<Row> {
    run_with_seed(SEED, progress)
}

/// [`run`] with links seeded by `seed`.
pub fn run_with_seed(seed: u64, mut progress: impl FnMut(&Row)) -> Vec<Row> {
    let mut rows = Vec::new();
    let mut emit = |row: Row| {
        progress(&row);
        rows.push(row);
    };
    for ms in [0, 10, 50, 100] {
        emit(rtt(Duration::from_millis(ms)));
    }
    emit(goodput("10mbit", 10e6, Duration::from_millis(10), 6));
    emit(goodput("100mbit", 100e6, Duration::from_millis(5), 4));
    emit(iid_loss(seed));
    emit(burst_loss(seed));
    emit(mtu());
    rows
}

/// The 99% interval of a binomial proportion `p` over `n` trials (normal approximation).
pub fn binomial_99(p: f64, n: usize) -> (f64, f64) {
    let half = Z99 * (p * (1.0 - p) / n as f64).sqrt();
    (p - half, p + half)
}

/// Half-width of the 99% interval of the mean of `bursts` Gilbert-Elliott burst lengths with
/// configured mean `mean`: each length is geometric on 1, 2, ... with success probability
/// `r = 1 / mean`, so its variance is `(1 - r) / r^2`.
pub fn burst_tolerance(mean: f64, bursts: usize) -> f64 {
    let r = 1.0 / mean;
    Z99 * ((1.0 - r) / (r * r) / bursts.max(1) as f64).sqrt()
}

fn no_files(path: &str) -> Result<quiclab_link::Trace, String> {
    Err(format!("the self-test reads no files ({path})"))
}

/// A link with the same settings in both directions, seeded with [`SEED`].
pub fn symmetric_link(settings: &[(&str, &str)]) -> Result<LinkConfig> {
    let mut dir = DirectionConfig::default();
    for (key, value) in settings {
        dir.set(key, value, &no_files)?;
    }
    Ok(LinkConfig {
        seed: SEED,
        up: dir.clone(),
        down: dir,
    })
}

/// A link with `settings` client to server and a plain wire back.
pub fn uplink(settings: &[(&str, &str)], seed: u64) -> Result<LinkConfig> {
    let mut link = symmetric_link(settings)?;
    link.down = DirectionConfig::default();
    link.seed = seed;
    Ok(link)
}

fn start(link: LinkConfig, device_mtu: Option<u32>) -> Result<Topology> {
    Topology::start(TopologyConfig {
        link,
        device_mtu,
        events: None,
        pcap: None,
        offloads: false,
    })
}

/// Stops the emulator and returns the report of `dir`, failing if forwarding hit an error.
fn finish(topo: &mut Topology, dir: Direction) -> Result<DirectionReport> {
    let reports = topo.finish()?;
    if let Some(e) = reports.iter().find_map(|r| r.error.as_ref()) {
        return Err(Error::Io {
            what: "link emulator".into(),
            source: std::io::Error::other(e.clone()),
        });
    }
    reports
        .into_iter()
        .find(|r| r.dir == dir)
        .ok_or_else(|| Error::Io {
            what: "link emulator".into(),
            source: std::io::Error::other(format!("no report for the {} link", dir.as_str())),
        })
}

/// A row for a check that could not run.
fn failed(check: String, configured: String, tolerance: String, e: &Error) -> Row {
    Row {
        check,
        configured,
        measured: format!("error: {e}"),
        tolerance,
        pass: false,
    }
}

fn ms(d: Duration) -> String {
    format!("{:.3} ms", d.as_secs_f64() * 1e3)
}

fn rtt(delay: Duration) -> Row {
    let check = format!("RTT, delay {} ms", delay.as_millis());
    let expected = 2 * delay;
    let configured = format!("2 x delay = {}", ms(expected));
    let tolerance = format!("+-{}", ms(RTT_TOLERANCE));
    let cfg = RttConfig::default();
    let measure = || -> Result<probe::RttResult> {
        let link = symmetric_link(&[("delay", &format!("{}ms", delay.as_millis()))])?;
        let topo = start(link, None)?;
        probe::udp_rtt(&topo, &cfg)
    };
    match measure() {
        Ok(r) => {
            let Some(median) = r.median() else {
                return Row {
                    check,
                    configured,
                    measured: format!("no replies to {} probes", cfg.count),
                    tolerance,
                    pass: false,
                };
            };
            let err = median.as_secs_f64() - expected.as_secs_f64();
            Row {
                check,
                configured,
                measured: format!(
                    "{} ({:+.3} ms, {}/{} replies)",
                    ms(median),
                    err * 1e3,
                    cfg.count - r.lost(),
                    cfg.count
                ),
                tolerance,
                pass: err.abs() <= RTT_TOLERANCE.as_secs_f64(),
            }
        }
        Err(e) => failed(check, configured, tolerance, &e),
    }
}

fn goodput(rate: &str, bps: f64, delay: Duration, seconds: u64) -> Row {
    let check = "TCP goodput, cubic".to_string();
    let configured = format!(
        "{:.0} Mbit/s, RTT {} ms, {seconds} s",
        bps / 1e6,
        2 * delay.as_millis()
    );
    let tolerance = format!("{:.0}%..100% of rate", GOODPUT_MIN * 100.0);
    let measure = || -> Result<probe::Goodput> {
        let link = symmetric_link(&[
            ("rate", rate),
            ("delay", &format!("{}ms", delay.as_millis())),
        ])?;
        let topo = start(link, None)?;
        probe::tcp_goodput(
            &topo,
            &GoodputConfig {
                flow: Flow::Download,
                congestion: "cubic".into(),
                duration: Duration::from_secs(seconds),
                ..GoodputConfig::default()
            },
        )
    };
    match measure() {
        Ok(g) => {
            let share = g.bits_per_sec / bps;
            Row {
                check,
                configured,
                measured: format!("{:.2} Mbit/s ({:.1}%)", g.bits_per_sec / 1e6, share * 100.0),
                tolerance,
                pass: (GOODPUT_MIN..=1.0).contains(&share),
            }
        }
        Err(e) => failed(check, configured, tolerance, &e),
    }
}

fn pct(x: f64) -> String {
    format!("{:.3}%", x * 100.0)
}

fn iid_loss(seed: u64) -> Row {
    let p = 0.01;
    let cfg = LossConfig {
        count: 50_000,
        ..LossConfig::default()
    };
    let (lo, hi) = binomial_99(p, cfg.count);
    let check = "loss, i.i.d.".to_string();
    let configured = format!("{:.0}%, {} pkts, seed {seed}", p * 100.0, cfg.count);
    let tolerance = format!("{}..{}, = link drops", pct(lo), pct(hi));
    let measure = || -> Result<(probe::LossResult, DirectionReport)> {
        let mut topo = start(uplink(&[("loss", "1%")], seed)?, None)?;
        let r = probe::udp_loss(&topo, &cfg)?;
        Ok((r, finish(&mut topo, Direction::Up)?))
    };
    match measure() {
        Ok((r, rep)) => {
            let f = r.loss_fraction();
            let (accounted, note) = accounting(&r, &rep, rep.counters.dropped_random);
            Row {
                check,
                configured,
                measured: format!("{} ({} lost, {note})", pct(f), r.lost()),
                tolerance,
                pass: (lo..=hi).contains(&f) && accounted,
            }
        }
        Err(e) => failed(check, configured, tolerance, &e),
    }
}

/// Whether every loss the probe saw is one the link counted (`link_drops`), and a note for the
/// report when not.
fn accounting(r: &probe::LossResult, rep: &DirectionReport, link_drops: u64) -> (bool, String) {
    let c = &rep.counters;
    let mut issues = Vec::new();
    if c.packets_in != r.sent() as u64 {
        issues.push(format!("link saw {} of {} sent", c.packets_in, r.sent()));
    }
    if link_drops != r.lost() as u64 || c.dropped_total() != link_drops {
        issues.push(format!("link dropped {}", c.dropped_total()));
    }
    if rep.device_drops > 0 {
        issues.push(format!("{} dropped at the device", rep.device_drops));
    }
    if r.receiver_drops > 0 {
        issues.push(format!("{} dropped by the receiver", r.receiver_drops));
    }
    if r.duplicates > 0 {
        issues.push(format!("{} duplicates", r.duplicates));
    }
    if issues.is_empty() {
        (true, "all link drops".into())
    } else {
        (false, issues.join(", "))
    }
}

fn burst_loss(seed: u64) -> Row {
    let (p, mean) = (0.02, 4.0);
    let cfg = LossConfig {
        count: 100_000,
        rate: 25_000,
        ..LossConfig::default()
    };
    let check = "loss, Gilbert-Elliott".to_string();
    let configured = format!(
        "{:.0}%, burst {mean}, {} pkts, seed {seed}",
        p * 100.0,
        cfg.count
    );
    let expected_bursts = (cfg.count as f64 * p / mean) as usize;
    let measure = || -> Result<(probe::LossResult, DirectionReport)> {
        let mut topo = start(uplink(&[("loss", "2%"), ("loss-burst", "4")], seed)?, None)?;
        let r = probe::udp_loss(&topo, &cfg)?;
        Ok((r, finish(&mut topo, Direction::Up)?))
    };
    match measure() {
        Ok((r, rep)) => {
            let bursts = r.bursts();
            let observed = bursts.iter().sum::<u64>() as f64 / bursts.len().max(1) as f64;
            let tol = burst_tolerance(mean, bursts.len());
            let (accounted, note) = accounting(&r, &rep, rep.counters.dropped_burst);
            Row {
                check,
                configured,
                measured: format!(
                    "mean {observed:.2} of {} bursts, {} lost, {note}",
                    bursts.len(),
                    pct(r.loss_fraction())
                ),
                tolerance: format!("{mean} +-{tol:.2}, = link drops"),
                pass: !bursts.is_empty() && (observed - mean).abs() <= tol && accounted,
            }
        }
        Err(e) => failed(
            check,
            configured,
            format!(
                "{mean} +-{:.2}, = link drops",
                burst_tolerance(mean, expected_bursts)
            ),
            &e,
        ),
    }
}

fn mtu() -> Row {
    let (link_mtu, device_mtu) = (1400, 1500);
    let check = "MTU enforcement".to_string();
    let configured = format!("link {link_mtu} B, device {device_mtu} B");
    let tolerance = "exact".to_string();
    let wait = Duration::from_millis(300);
    let measure = || -> Result<(bool, bool, DirectionReport)> {
        let mut topo = start(
            uplink(&[("mtu", &link_mtu.to_string())], SEED)?,
            Some(device_mtu),
        )?;
        let fits = probe::udp_mtu(&topo, link_mtu as usize, Family::V4, wait)?;
        let over = probe::udp_mtu(&topo, link_mtu as usize + 1, Family::V4, wait)?;
        Ok((fits, over, finish(&mut topo, Direction::Up)?))
    };
    match measure() {
        Ok((fits, over, rep)) => {
            let said = |arrived: bool| if arrived { "arrived" } else { "lost" };
            let mtu_drops = rep.counters.dropped_mtu;
            Row {
                check,
                configured,
                measured: format!(
                    "{link_mtu} B {}, {} B {}, {mtu_drops} MTU drop(s)",
                    said(fits),
                    link_mtu + 1,
                    said(over)
                ),
                tolerance,
                pass: fits && !over && mtu_drops == 1,
            }
        }
        Err(e) => failed(check, configured, tolerance, &e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binomial_interval_at_one_percent_over_fifty_thousand() {
        let (lo, hi) = binomial_99(0.01, 50_000);
        assert!((lo - 0.008854).abs() < 1e-5, "{lo}");
        assert!((hi - 0.011146).abs() < 1e-5, "{hi}");
    }

    #[test]
    fn burst_tolerance_shrinks_with_more_bursts() {
        // geometric with mean 4: variance 12
        let t = burst_tolerance(4.0, 500);
        assert!((t - Z99 * (12.0f64 / 500.0).sqrt()).abs() < 1e-12);
        assert!(burst_tolerance(4.0, 2000) < t);
    }
}
