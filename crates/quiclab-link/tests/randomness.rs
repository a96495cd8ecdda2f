//! Seeded packet fates: reproducibility, independence from the traffic, and the statistics of
//! i.i.d. loss, Gilbert-Elliott bursts and duplication.

mod util;

use std::collections::BTreeSet;
use std::time::Duration;

use quiclab_link::{Direction, DropReason, EventKind, Link, LinkConfig};

use util::*;

/// Indices that never leave a pipeline built from `cfg`.
fn lost(cfg: &[(&str, &str)], seed: u64, dir: Direction, arrivals: &[Arrival]) -> BTreeSet<u64> {
    let mut p = pipeline_dir(cfg, "", dir, seed, false);
    drive(&mut p, arrivals, Wake::PushFirst).lost()
}

/// Two kinds of traffic with nothing in common but the packet count.
fn bulk(n: usize) -> Vec<Arrival> {
    periodic(n, Duration::ZERO, ms(1), 1500)
}
fn chatter(n: usize) -> Vec<Arrival> {
    periodic(n, ms(777), us(10), 80)
}

const IID: &[(&str, &str)] = &[("loss", "5%")];
const GE: &[(&str, &str)] = &[("loss", "5%"), ("loss-burst", "4")];

#[test]
fn the_same_seed_drops_the_same_indices_whatever_the_traffic() {
    let n = 5000;
    for cfg in [IID, GE] {
        let a = lost(cfg, 42, Direction::Up, &bulk(n));
        let b = lost(cfg, 42, Direction::Up, &chatter(n));
        let again = lost(cfg, 42, Direction::Up, &bulk(n));
        // 5 % of 5000 packets: a set this small or this large would be far outside any
        // plausible draw
        assert!((100..500).contains(&a.len()), "{cfg:?}: {}", a.len());
        assert_eq!(a, again, "{cfg:?}: same seed, same traffic");
        assert_eq!(a, b, "{cfg:?}: same seed, different traffic");
        // a shorter run is a prefix of a longer one
        let short = lost(cfg, 42, Direction::Up, &chatter(n / 2));
        assert_eq!(
            short,
            a.iter().copied().filter(|&i| i < n as u64 / 2).collect()
        );
    }
}

#[test]
fn different_seeds_and_directions_drop_different_indices() {
    let n = 5000;
    for cfg in [IID, GE] {
        let base = lost(cfg, 42, Direction::Up, &bulk(n));
        for seed in [0, 1, 43, u64::MAX] {
            assert_ne!(
                base,
                lost(cfg, seed, Direction::Up, &bulk(n)),
                "{cfg:?} seed {seed}"
            );
        }
        assert_ne!(base, lost(cfg, 42, Direction::Down, &bulk(n)), "{cfg:?}");
    }
    // the same through `Link`, which builds both directions from one seed
    let mut cfg = LinkConfig {
        seed: 9,
        ..LinkConfig::default()
    };
    cfg.up = config(IID, "");
    cfg.down = config(IID, "");
    let mut link = Link::new(&cfg, false).unwrap();
    let up = drive(&mut link.up, &bulk(n), Wake::PushFirst).lost();
    let down = drive(&mut link.down, &bulk(n), Wake::PushFirst).lost();
    assert_ne!(up, down);
    assert_eq!(up, lost(IID, 9, Direction::Up, &bulk(n)));
    assert_eq!(down, lost(IID, 9, Direction::Down, &bulk(n)));
}

#[test]
fn other_stages_do_not_shift_the_loss_draws() {
    let n = 5000;
    for cfg in [IID, GE] {
        let alone = lost(cfg, 5, Direction::Up, &bulk(n));
        let mut busy = cfg.to_vec();
        busy.extend_from_slice(&[
            ("rate", "2mbit"),
            ("queue", "unlimited"),
            ("delay", "30ms"),
            ("jitter", "10ms"),
            ("jitter-reorders", "true"),
            ("duplicate", "20%"),
            ("reorder", "10%"),
        ]);
        assert_eq!(alone, lost(&busy, 5, Direction::Up, &chatter(n)), "{cfg:?}");
    }
    // listed drops remove indices before the burst model sees them; the model still steps over
    // them, so every other index keeps its fate
    let listed: BTreeSet<u64> = (1000..1200).chain(3000..3010).collect();
    let mut with_list = GE.to_vec();
    with_list.push(("drop-packets", "1000-1199,3000-3009"));
    let mut p = pipeline_dir(&with_list, "", Direction::Up, 5, true);
    let run = drive(&mut p, &bulk(n), Wake::PushFirst);
    assert_eq!(run.dropped(DropReason::Listed), listed);
    let burst_alone = lost(GE, 5, Direction::Up, &bulk(n));
    assert_eq!(
        run.dropped(DropReason::Burst),
        burst_alone.difference(&listed).copied().collect()
    );
}

/// Drives `n` small back-to-back packets through a pipeline without timed stages and returns
/// the lost indices. Logging is off to keep long runs light.
fn lost_fast(cfg: &[(&str, &str)], seed: u64, n: usize) -> (BTreeSet<u64>, quiclab_link::Counters) {
    let mut p = pipeline_dir(cfg, "", Direction::Up, seed, false);
    let run = drive(
        &mut p,
        &periodic(n, Duration::ZERO, us(1), 20),
        Wake::PushFirst,
    );
    (run.lost(), run.counters)
}

#[test]
fn iid_loss_matches_its_rate() {
    // The number of losses among n packets is Binomial(n, p). A two-sided 99.9 % interval is
    // n p +- 3.29 sqrt(n p (1 - p)): for n = 200000 and p = 1 % that is 2000 +- 146, for p = 10 %
    // 20000 +- 441.
    let n = 200_000;
    for (text, p) in [("1%", 0.01), ("10%", 0.1)] {
        for seed in [1, 2, 3] {
            let (lost, c) = lost_fast(&[("loss", text)], seed, n);
            let k = lost.len() as f64;
            let tol = binomial_tolerance(n as u64, p, Z999);
            assert!(
                (k - n as f64 * p).abs() <= tol,
                "loss {text}, seed {seed}: {k} of {n}, expected {} +- {tol:.0}",
                n as f64 * p
            );
            assert_eq!(c.dropped_random, lost.len() as u64);
            assert_eq!(c.dropped_total(), c.dropped_random);
        }
    }
    // the extremes are exact
    assert!(lost_fast(&[("loss", "0%")], 1, 10_000).0.is_empty());
    assert_eq!(lost_fast(&[("loss", "100%")], 1, 10_000).0.len(), 10_000);
}

/// Maximal runs of consecutive lost indices below `n`, leaving out a run that reaches the end
/// (its length is cut short).
fn bursts(lost: &BTreeSet<u64>, n: u64) -> Vec<u64> {
    let mut out = Vec::new();
    let mut run: Option<(u64, u64)> = None;
    for &i in lost {
        run = match run {
            Some((start, last)) if i == last + 1 => Some((start, i)),
            Some((start, last)) => {
                out.push(last - start + 1);
                Some((i, i))
            }
            None => Some((i, i)),
        };
    }
    if let Some((start, last)) = run
        && last + 1 < n
    {
        out.push(last - start + 1);
    }
    out
}

#[test]
fn gilbert_elliott_matches_its_loss_rate_and_burst_length() {
    // The chain drops every packet in the bad state and none in the good one. With
    // r = P(bad -> good) = 1/B and p = P(good -> bad) = loss r / (1 - loss):
    //
    // * Long-run loss: the share of bad steps has mean loss = p / (p + r). Successive states are
    //   correlated with lag-k autocorrelation lambda^k, lambda = 1 - p - r, so the variance of
    //   the number of losses among n packets is n loss (1 - loss) (1 + lambda) / (1 - lambda)
    //   (the sum 1 + 2 sum_k lambda^k), not the binomial n loss (1 - loss).
    // * Burst length: each burst lasts a Geometric(r) number of packets (on 1, 2, ...), mean
    //   1/r = B and variance (1 - r)/r^2 = B (B - 1), independently of other bursts. The mean of
    //   m bursts has standard deviation sqrt(B (B - 1) / m).
    // * The share of bursts of length 1 is r, a binomial over m bursts.
    //
    // Each check allows 3.29 standard deviations (two-sided 99.9 %).
    let n: u64 = 1_000_000;
    for (loss_text, burst_text, loss, b) in [("1%", "3", 0.01, 3.0), ("5%", "10", 0.05, 10.0)] {
        let cfg = [("loss", loss_text), ("loss-burst", burst_text)];
        let (lost, c) = lost_fast(&cfg, 17, n as usize);
        assert_eq!(c.dropped_burst, lost.len() as u64);

        let r = 1.0 / b;
        let p = loss * r / (1.0 - loss);
        let lambda = 1.0 - p - r;
        let sd_losses = (n as f64 * loss * (1.0 - loss) * (1.0 + lambda) / (1.0 - lambda)).sqrt();
        let k = lost.len() as f64;
        assert!(
            (k - n as f64 * loss).abs() <= Z999 * sd_losses,
            "{loss_text}/{burst_text}: {k} losses, expected {} +- {:.0}",
            n as f64 * loss,
            Z999 * sd_losses
        );

        let lengths = bursts(&lost, n);
        let m = lengths.len() as f64;
        // about n loss / B bursts: 3333 and 5000
        assert!(m > 0.8 * n as f64 * loss / b, "{m} bursts");
        let mean = lengths.iter().sum::<u64>() as f64 / m;
        let sd_mean = (b * (b - 1.0) / m).sqrt();
        assert!(
            (mean - b).abs() <= Z999 * sd_mean,
            "{loss_text}/{burst_text}: mean burst {mean:.3} over {m} bursts, expected {b} +- {:.3}",
            Z999 * sd_mean
        );
        let ones = lengths.iter().filter(|&&l| l == 1).count() as f64;
        let tol = binomial_tolerance(m as u64, r, Z999);
        assert!(
            (ones - m * r).abs() <= tol,
            "{loss_text}/{burst_text}: {ones} bursts of 1 among {m}, expected {:.0} +- {tol:.0}",
            m * r
        );
    }
}

#[test]
fn a_mean_burst_of_one_packet_is_iid_loss() {
    // with B = 1 the chain leaves the bad state after every loss: P(loss) = p = loss / (1 - loss)
    // after a delivered packet and 0 after a lost one, so no two losses are adjacent
    let n = 200_000;
    let (lost, _) = lost_fast(&[("loss", "2%"), ("loss-burst", "1")], 3, n);
    assert!(bursts(&lost, n as u64).iter().all(|&l| l == 1));
    let tol = binomial_tolerance(n as u64, 0.02, Z999);
    assert!(
        (lost.len() as f64 - 0.02 * n as f64).abs() <= tol,
        "{}",
        lost.len()
    );
}

#[test]
fn duplication_matches_its_rate_and_copies_keep_their_index() {
    // duplicated packets among n: Binomial(n, p); 99.9 % interval n p +- 3.29 sqrt(n p (1 - p)),
    // for n = 100000 and p = 5 %: 5000 +- 227
    let n = 100_000;
    let p = 0.05;
    let arrivals = periodic(n, Duration::ZERO, us(100), 100);
    let mut pipe = pipeline(&[("duplicate", "5%"), ("delay", "10ms")], 8, true);
    let run = drive(&mut pipe, &arrivals, Wake::PushFirst);
    let mut copies = vec![0u32; n];
    for d in &run.deps {
        copies[d.index as usize] += 1;
        // both copies leave after the delay, at the same time
        assert_eq!(d.at, arrivals[d.index as usize].at + ms(10));
    }
    assert!(copies.iter().all(|&c| c == 1 || c == 2));
    let duplicated: BTreeSet<u64> = (0..n as u64).filter(|&i| copies[i as usize] == 2).collect();
    let k = duplicated.len() as f64;
    let tol = binomial_tolerance(n as u64, p, Z999);
    assert!(
        (k - n as f64 * p).abs() <= tol,
        "{k} duplicated, expected {} +- {tol:.0}",
        n as f64 * p
    );
    assert_eq!(run.counters.duplicated, duplicated.len() as u64);
    let logged: BTreeSet<u64> = run
        .events
        .iter()
        .filter(|e| e.kind == EventKind::Duplicate)
        .map(|e| e.index)
        .collect();
    assert_eq!(logged, duplicated);
    assert_eq!(run.counters.packets_out, (n + duplicated.len()) as u64);

    // the duplicated set depends only on the seed, not on the traffic
    let mut other = pipeline(&[("duplicate", "5%")], 8, false);
    let run2 = drive(&mut other, &chatter(n), Wake::PushFirst);
    let mut seen = BTreeSet::new();
    let twice: BTreeSet<u64> = run2
        .deps
        .iter()
        .filter(|d| !seen.insert(d.index))
        .map(|d| d.index)
        .collect();
    assert_eq!(twice, duplicated);
}

#[test]
fn a_copy_is_serialised_after_its_original() {
    // 10 Mbit/s, 1500 B: 1.2 ms each; packets 5 ms apart never queue behind each other, so an
    // original leaves at arrival + 1.2 ms + delay and its copy 1.2 ms later
    let n = 2000;
    let arrivals = periodic(n, Duration::ZERO, ms(5), 1500);
    let run = run_all_ways(
        || {
            pipeline(
                &[
                    ("duplicate", "10%"),
                    ("rate", "10mbit"),
                    ("queue", "unlimited"),
                    ("delay", "20ms"),
                ],
                4,
                true,
            )
        },
        &arrivals,
    );
    let mut by_index: Vec<Vec<Duration>> = vec![Vec::new(); n];
    for d in &run.deps {
        by_index[d.index as usize].push(d.at);
    }
    let mut dups = 0;
    for (i, times) in by_index.iter().enumerate() {
        let first = arrivals[i].at + us(1200) + ms(20);
        match times.as_slice() {
            [t] => assert_eq!(*t, first),
            [t, u] => {
                dups += 1;
                assert_eq!((*t, *u), (first, first + us(1200)));
            }
            other => panic!("packet {i} left {} times", other.len()),
        }
    }
    assert_eq!(dups, run.counters.duplicated);
    // 10 % of 2000: 200 +- 3.29 sqrt(180) = 200 +- 44
    let tol = binomial_tolerance(n as u64, 0.1, Z999);
    assert!((dups as f64 - 200.0).abs() <= tol, "{dups}");
}

#[test]
fn gilbert_elliott_long_run_loss_is_precise() {
    // The same model driven directly, over 20 million steps, where the tolerance of the loss
    // rate (derived as above: 3.29 sqrt(n loss (1 - loss) (1 + lambda) / (1 - lambda))) is
    // 1.4 % of the expected count for 5 % loss with bursts of 10.
    use quiclab_link::config::Burst;
    use quiclab_link::stage::filter::{Filter, GilbertElliott, Verdict};
    let n: u64 = 20_000_000;
    for (loss, b, seed) in [(0.05, 10.0, 1), (0.2, 2.5, 2)] {
        let model = Burst {
            loss,
            mean_burst: b,
        };
        let mut f = GilbertElliott::new(seed, Direction::Up, model);
        let mut k = 0u64;
        for i in 0..n {
            if f.decide(Duration::ZERO, i, 100) == Verdict::Drop(DropReason::Burst) {
                k += 1;
            }
        }
        let r = 1.0 / b;
        let lambda = 1.0 - model.p_enter() - r;
        let sd = (n as f64 * loss * (1.0 - loss) * (1.0 + lambda) / (1.0 - lambda)).sqrt();
        assert!(
            (k as f64 - n as f64 * loss).abs() <= Z999 * sd,
            "loss {loss}, bursts {b}: {k} of {n}, expected {} +- {:.0}",
            n as f64 * loss,
            Z999 * sd
        );
    }
}
