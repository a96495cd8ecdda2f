//! The delay line's jitter and reordering.

mod util;

use std::collections::BTreeSet;
use std::time::Duration;

use util::*;

const DELAY: Duration = Duration::from_millis(20);
const JITTER: Duration = Duration::from_millis(5);

/// Departure time of each index, for runs where every packet leaves exactly once.
fn departures(run: &Run) -> Vec<Duration> {
    assert_eq!(
        run.deps.len(),
        run.arrivals.len(),
        "every packet leaves once"
    );
    let d: Vec<Duration> = run.departure_of().into_iter().map(Option::unwrap).collect();
    d
}

/// Indices that some later index leaves before.
fn overtaken(dep: &[Duration]) -> BTreeSet<u64> {
    let mut out = BTreeSet::new();
    let mut min_after = Duration::MAX;
    for i in (0..dep.len()).rev() {
        if min_after < dep[i] {
            out.insert(i as u64);
        }
        min_after = min_after.min(dep[i]);
    }
    out
}

fn within(dep: Duration, arr: Duration, lo: Duration, hi: Duration) -> bool {
    arr + lo <= dep && dep <= arr + hi
}

#[test]
fn jitter_spreads_delays_uniformly_around_the_delay() {
    // packets 25 ms apart never hold each other up (exits differ by at least 25 - 2*5 ms), so
    // each delay is delay + U(-jitter, +jitter):
    // * the mean of n delays is within 3.29 * (jitter / sqrt 3) / sqrt n of the delay (the
    //   uniform's standard deviation is jitter / sqrt 3);
    // * the number below the delay, and the number in the lowest tenth of the interval, are
    //   binomial with p = 1/2 and p = 1/10.
    let n = 10_000;
    let arrivals = periodic(n, Duration::ZERO, ms(25), 200);
    let run = run_all_ways(
        || pipeline(&[("delay", "20ms"), ("jitter", "5ms")], 21, true),
        &arrivals,
    );
    let dep = departures(&run);
    let delays: Vec<f64> = dep
        .iter()
        .zip(&arrivals)
        .map(|(d, a)| (*d - a.at).as_secs_f64())
        .collect();
    let (d, j) = (DELAY.as_secs_f64(), JITTER.as_secs_f64());
    for (i, &x) in delays.iter().enumerate() {
        assert!(
            within(dep[i], arrivals[i].at, DELAY - JITTER, DELAY + JITTER),
            "packet {i}: {x}"
        );
    }
    let mean = delays.iter().sum::<f64>() / n as f64;
    let tol = Z999 * j / 3f64.sqrt() / (n as f64).sqrt();
    assert!(
        (mean - d).abs() <= tol,
        "mean delay {mean}, expected {d} +- {tol}"
    );
    let below = delays.iter().filter(|&&x| x < d).count() as f64;
    assert!((below - n as f64 / 2.0).abs() <= binomial_tolerance(n as u64, 0.5, Z999));
    let low = delays.iter().filter(|&&x| x < d - 0.8 * j).count() as f64;
    assert!((low - n as f64 / 10.0).abs() <= binomial_tolerance(n as u64, 0.1, Z999));
}

#[test]
fn jitter_keeps_order_by_default() {
    // packets 1 ms apart with +-5 ms of jitter would overtake each other; by default a packet
    // waits for the one ahead of it instead
    let n = 20_000;
    let arrivals = periodic(n, ms(3), ms(1), 200);
    let ordered = run_all_ways(
        || pipeline(&[("delay", "20ms"), ("jitter", "5ms")], 5, true),
        &arrivals,
    );
    let free = run_all_ways(
        || {
            pipeline(
                &[
                    ("delay", "20ms"),
                    ("jitter", "5ms"),
                    ("jitter-reorders", "true"),
                ],
                5,
                true,
            )
        },
        &arrivals,
    );
    let dep = departures(&ordered);
    let own = departures(&free);
    // in order of index, and never earlier than delay - jitter; a packet held behind an earlier
    // one leaves with it, which is still within delay + jitter of its own arrival
    assert!(
        ordered
            .deps
            .iter()
            .enumerate()
            .all(|(i, d)| d.index == i as u64)
    );
    for i in 0..n {
        assert!(
            within(dep[i], arrivals[i].at, DELAY - JITTER, DELAY + JITTER),
            "packet {i}"
        );
    }
    // the same draws decide both runs: with order kept, each packet leaves at the latest of its
    // own exit and the exits of all packets ahead of it
    let mut latest = Duration::ZERO;
    for i in 0..n {
        latest = latest.max(own[i]);
        assert_eq!(dep[i], latest, "packet {i}");
    }
    let held = (1..n).filter(|&i| dep[i] == dep[i - 1]).count();
    assert!(held > n / 10, "{held} packets held");
}

#[test]
fn jitter_may_reorder_when_allowed() {
    // Delays are delay + J (2u - 1), packets s = 1 ms apart, J = 5 ms. Packet i + 1 leaves
    // before packet i when s + J (2u' - 1) < J (2u - 1), i.e. u - u' > s / 2J = 0.1, with
    // probability (1 - 0.1)^2 / 2 = 0.405. Neighbouring inversions share a draw, so the count is
    // a sum of 1-dependent indicators: its variance is at most n p (1 - p) plus twice the
    // covariances of neighbours, each at most p (1 - p), so at most 3 n p (1 - p). Allowed:
    // 3.29 times that standard deviation.
    let n = 20_000;
    let arrivals = periodic(n, Duration::ZERO, ms(1), 200);
    let run = run_all_ways(
        || {
            pipeline(
                &[
                    ("delay", "20ms"),
                    ("jitter", "5ms"),
                    ("jitter-reorders", "true"),
                ],
                6,
                true,
            )
        },
        &arrivals,
    );
    let dep = departures(&run);
    for i in 0..n {
        assert!(
            within(dep[i], arrivals[i].at, DELAY - JITTER, DELAY + JITTER),
            "packet {i}"
        );
    }
    let inversions = (0..n - 1).filter(|&i| dep[i + 1] < dep[i]).count() as f64;
    let p = 0.9f64.powi(2) / 2.0;
    let sd = (3.0 * (n - 1) as f64 * p * (1.0 - p)).sqrt();
    assert!(
        (inversions - (n - 1) as f64 * p).abs() <= Z999 * sd,
        "{inversions} inversions, expected {:.0} +- {:.0}",
        (n - 1) as f64 * p,
        Z999 * sd
    );
}

#[test]
fn jitter_larger_than_the_delay_never_makes_a_packet_early() {
    // delay 1 ms, jitter 5 ms: the drawn delay 1 + 5 (2u - 1) ms is negative for u < 0.4, and
    // such packets leave on arrival; the count of those is Binomial(n, 0.4)
    let n = 20_000;
    let arrivals = periodic(n, Duration::ZERO, ms(20), 200);
    let run = run_all_ways(
        || {
            pipeline(
                &[
                    ("delay", "1ms"),
                    ("jitter", "5ms"),
                    ("jitter-reorders", "true"),
                ],
                7,
                true,
            )
        },
        &arrivals,
    );
    let dep = departures(&run);
    for i in 0..n {
        assert!(
            within(dep[i], arrivals[i].at, Duration::ZERO, ms(6)),
            "packet {i}"
        );
    }
    let at_once = (0..n).filter(|&i| dep[i] == arrivals[i].at).count() as f64;
    let tol = binomial_tolerance(n as u64, 0.4, Z999);
    assert!((at_once - 0.4 * n as f64).abs() <= tol, "{at_once}");
}

/// Runs `n` packets `gap` apart through delay 20 ms with `reorder` and `reorder_delay`, and
/// checks the held packets and exactly which ones are overtaken.
fn check_reorder(n: usize, gap: Duration, reorder: &str, p: f64, reorder_delay: Option<&str>) {
    let arrivals = periodic(n, Duration::ZERO, gap, 300);
    let extra = reorder_delay.map_or(ms(5), |t| quiclab_link::units::parse_duration(t).unwrap());
    let mut cfg = vec![("delay", "20ms"), ("reorder", reorder)];
    if let Some(t) = reorder_delay {
        cfg.push(("reorder-delay", t));
    }
    let run = run_all_ways(|| pipeline(&cfg, 12, true), &arrivals);
    let dep = departures(&run);
    // every delay is the delay, or the delay plus the reorder delay
    let mut held = BTreeSet::new();
    for i in 0..n {
        let delay = dep[i] - arrivals[i].at;
        if delay == DELAY + extra {
            held.insert(i as u64);
        } else {
            assert_eq!(delay, DELAY, "packet {i}");
        }
    }
    // held packets ~ Binomial(n, p)
    let tol = binomial_tolerance(n as u64, p, Z999);
    let k = held.len() as f64;
    assert!(
        (k - n as f64 * p).abs() <= tol,
        "{k} held, expected {} +- {tol:.0}",
        n as f64 * p
    );
    // A held packet i leaves at t_i + delay + extra. A later packet j that is not held leaves at
    // t_j + delay, earlier exactly when (j - i) gap < extra (at equal times the earlier index
    // goes first); a later held packet never leaves earlier. Packets not held are never
    // overtaken.
    let window = ((extra.as_nanos() - 1) / gap.as_nanos()) as usize;
    let want: BTreeSet<u64> = held
        .iter()
        .copied()
        .filter(|&i| {
            let i = i as usize;
            (i + 1..=(i + window).min(n - 1)).any(|j| !held.contains(&(j as u64)))
        })
        .collect();
    assert_eq!(overtaken(&dep), want);
    // so about p (1 - p^window) of all packets are overtaken
    let p_over = p * (1.0 - p.powi(window as i32));
    let tol = binomial_tolerance(n as u64, p_over, Z999);
    let k = want.len() as f64;
    assert!(
        (k - n as f64 * p_over).abs() <= tol,
        "{k} overtaken, expected {} +- {tol:.0}",
        n as f64 * p_over
    );
}

#[test]
fn explicit_reordering_holds_back_a_share_of_packets() {
    check_reorder(20_000, ms(1), "10%", 0.1, None);
    check_reorder(20_000, ms(1), "10%", 0.1, Some("2500us"));
    check_reorder(20_000, us(500), "25%", 0.25, Some("1ms"));
    // packets further apart than the reorder delay are held but never overtaken
    check_reorder(5_000, ms(10), "10%", 0.1, None);
}

#[test]
fn a_copy_draws_its_own_jitter() {
    // an original and its copy get independent delays in [delay - jitter, delay + jitter]; two
    // draws of 53 bits coincide with negligible probability
    let n = 5000;
    let arrivals = periodic(n, Duration::ZERO, ms(30), 200);
    let run = run_all_ways(
        || {
            pipeline(
                &[
                    ("delay", "20ms"),
                    ("jitter", "5ms"),
                    ("jitter-reorders", "true"),
                    ("duplicate", "30%"),
                ],
                8,
                true,
            )
        },
        &arrivals,
    );
    let mut times: Vec<Vec<Duration>> = vec![Vec::new(); n];
    for d in &run.deps {
        let arr = arrivals[d.index as usize].at;
        assert!(within(d.at, arr, DELAY - JITTER, DELAY + JITTER));
        times[d.index as usize].push(d.at);
    }
    let pairs: Vec<&Vec<Duration>> = times.iter().filter(|t| t.len() == 2).collect();
    assert_eq!(pairs.len() as u64, run.counters.duplicated);
    assert!(pairs.len() > n / 5);
    assert!(pairs.iter().all(|t| t[0] != t[1]));
}

#[test]
fn no_packet_passes_sooner_than_the_direction_s_fastest_delay_and_some_come_close() {
    // The floor an impossible-RTT check uses: delay less jitter. Jitter that keeps order, jitter
    // that reorders, explicit reordering and a rate with its queue must never beat it; with
    // U(-5, +5) ms draws over 2,000 packets the fastest comes within 10 ms * 5 / 2000 = 25 us of
    // it, but for a chance of (1 - 5/2000)^2000 < 0.7 % (the draws are seeded: fixed here).
    // Behind a rate, each packet also takes its serialisation: 200 bytes at 10 Mbit/s, 160 us.
    let arrivals = periodic(2_000, Duration::ZERO, ms(25), 200);
    for (pairs, serialisation) in [
        (vec![("delay", "20ms"), ("jitter", "5ms")], us(0)),
        (
            vec![
                ("delay", "20ms"),
                ("jitter", "5ms"),
                ("jitter-reorders", "true"),
            ],
            us(0),
        ),
        (
            vec![("delay", "20ms"), ("jitter", "5ms"), ("reorder", "10%")],
            us(0),
        ),
        (
            vec![("delay", "20ms"), ("jitter", "5ms"), ("rate", "10mbit")],
            us(160),
        ),
        // jitter beyond the delay: the floor is zero, and a packet never leaves before it came
        (vec![("delay", "3ms"), ("jitter", "5ms")], us(0)),
    ] {
        let floor = config(&pairs, "").fastest_delay();
        let run = run_all_ways(|| pipeline(&pairs, 33, false), &arrivals);
        let fastest = departures(&run)
            .iter()
            .zip(&arrivals)
            .map(|(d, a)| *d - a.at)
            .min()
            .expect("packets");
        // Duration::from_secs_f64 may round a draw of exactly -jitter a nanosecond down
        assert!(
            fastest + ns(1) >= floor,
            "{pairs:?}: {fastest:?} < {floor:?}"
        );
        assert!(
            fastest <= floor + serialisation + us(25),
            "{pairs:?}: fastest {fastest:?}, floor {floor:?}"
        );
    }
    assert_eq!(
        config(&[("delay", "20ms"), ("jitter", "5ms")], "").fastest_delay(),
        ms(15)
    );
    assert_eq!(
        config(&[("delay", "3ms"), ("jitter", "5ms")], "").fastest_delay(),
        ms(0)
    );
}
