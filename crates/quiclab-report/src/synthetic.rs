//! A synthetic campaign shaped like the www21 study, for examples, tests and demonstrations of
//! the report without running anything.
//!
//! Contract: deterministic for a given `(iterations, seed)`; the numbers come from a toy model
//! (handshake round trips, slow start, a rate limit, per-packet loss shared by all arms of an
//! iteration, Cubic-like or BBR-like reaction to loss), not from measurements, and must never
//! be presented as results.

use crate::model::{Arm, Campaign, Comparison, Condition, Metrics, TimelinePoint, Trial, Workload};
use crate::stats::{Rng, seed_from};

const MSS: f64 = 1460.0;

#[derive(Clone, Copy)]
enum Cc {
    Cubic,
    Bbr,
}

struct ArmModel {
    name: &'static str,
    label: &'static str,
    handshake_rtts: f64,
    cc: Cc,
    caveats: &'static [&'static str],
}

const ARMS: [ArmModel; 3] = [
    ArmModel {
        name: "h2-cubic",
        label: "HTTP/2 over TCP + TLS 1.3, Cubic",
        handshake_rtts: 2.0,
        cc: Cc::Cubic,
        caveats: &[],
    },
    ArmModel {
        name: "h3-cubic",
        label: "HTTP/3 over QUIC (quinn), Cubic",
        handshake_rtts: 1.0,
        cc: Cc::Cubic,
        caveats: &[],
    },
    ArmModel {
        name: "h3-bbr",
        label: "HTTP/3 over QUIC (quinn), BBR",
        handshake_rtts: 1.0,
        cc: Cc::Bbr,
        caveats: &["quinn's BBR is experimental"],
    },
];

/// (name, label, minimum RTT in ms, loss per packet and direction)
const CONDITIONS: [(&str, &str, f64, f64); 5] = [
    ("base", "10 Mbit/s, 20 ms RTT", 20.0, 0.0),
    (
        "loss-0.1%",
        "10 Mbit/s, 20 ms RTT, 0.1 % loss each way",
        20.0,
        0.001,
    ),
    (
        "loss-1%",
        "10 Mbit/s, 20 ms RTT, 1 % loss each way",
        20.0,
        0.01,
    ),
    ("rtt+50ms", "10 Mbit/s, 70 ms RTT", 70.0, 0.0),
    ("rtt+100ms", "10 Mbit/s, 120 ms RTT", 120.0, 0.0),
];

const RATE_BPS: u64 = 10_000_000;

/// A www21-like campaign: 3 arms (h2-cubic, h3-cubic, h3-bbr), 5 conditions, sizes 100 KB,
/// 1 MB and 5 MB, `iterations` trials per cell, with sender timelines, a few HelloRetryRequests,
/// impossible RTT samples for BBR on the longest path, and two failed trials.
pub fn campaign(iterations: u32, seed: u64) -> Campaign {
    let sizes = vec![100_000, 1_000_000, 5_000_000];
    let mut trials = Vec::new();
    for &(cname, _, rtt, loss) in &CONDITIONS {
        for &size in &sizes {
            for it in 0..iterations {
                let trial_seed =
                    seed_from(&[&seed.to_string(), cname, &size.to_string(), &it.to_string()]);
                for arm in &ARMS {
                    let outcome = if failed(arm.name, cname, size, it) {
                        Err(match arm.cc {
                            Cc::Bbr => "timeout: no response within 30 s".to_string(),
                            Cc::Cubic => "connection reset by peer".to_string(),
                        })
                    } else {
                        Ok(simulate(arm, rtt, loss, size, trial_seed))
                    };
                    trials.push(Trial {
                        id: format!("{:016x}", seed_from(&[arm.name, &trial_seed.to_string()])),
                        arm: arm.name.into(),
                        condition: cname.into(),
                        size,
                        iteration: it,
                        seed: trial_seed,
                        before: None,
                        outcome,
                        artifacts: None,
                        host: None,
                        started_unix_ms: 0,
                        wall_ms: 0.0,
                    });
                }
            }
        }
    }
    Campaign {
        name: "www21 (synthetic)".into(),
        description: "Single-object GETs of 100 KB, 1 MB and 5 MB on a new connection each, \
                      HTTP/2 over TCP against HTTP/3 over QUIC, on a 10 Mbit/s link with extra \
                      loss or delay (after Yu & Benson, WWW 2021). Synthetic data from a toy \
                      model, for demonstrating the report."
            .into(),
        plan_source: "synthetic (quiclab_report::synthetic)".into(),
        profile: "demo".into(),
        workload: Workload::default(),
        interleave: None,
        provenance: vec![
            (
                "generator".into(),
                "quiclab_report::synthetic::campaign".into(),
            ),
            ("seed".into(), seed.to_string()),
            ("iterations".into(), iterations.to_string()),
        ],
        arms: ARMS
            .iter()
            .map(|a| Arm {
                name: a.name.into(),
                label: a.label.into(),
                caveats: a.caveats.iter().map(|s| s.to_string()).collect(),
                ..Default::default()
            })
            .collect(),
        conditions: CONDITIONS
            .iter()
            .map(|&(name, label, rtt_ms, _)| Condition {
                name: name.into(),
                label: label.into(),
                rtt_ms,
                rate_bps: Some(RATE_BPS),
                // every other condition impairs the first
                base: (name != CONDITIONS[0].0).then(|| CONDITIONS[0].0.into()),
            })
            .collect(),
        sizes,
        comparisons: vec![
            Comparison {
                a: "h2-cubic".into(),
                b: "h3-cubic".into(),
            },
            Comparison {
                a: "h2-cubic".into(),
                b: "h3-bbr".into(),
            },
            Comparison {
                a: "h3-cubic".into(),
                b: "h3-bbr".into(),
            },
        ],
        trials,
        busy_seconds: None,
        busy: Vec::new(),
        adaptive: None,
        planted: Vec::new(),
    }
}

fn failed(arm: &str, cond: &str, size: u64, it: u32) -> bool {
    (arm == "h3-bbr" && cond == "loss-1%" && size == 5_000_000 && it == 3)
        || (arm == "h2-cubic" && cond == "rtt+100ms" && size == 100_000 && it == 7)
}

/// One transfer in 5 ms steps of acknowledgement time.
fn simulate(arm: &ArmModel, rtt: f64, loss: f64, size: u64, trial_seed: u64) -> Metrics {
    // Packet fates depend on the trial's seed only: every arm of an iteration loses the same
    // packet indices, as on the real emulator.
    let mut fates = Rng::new(trial_seed);
    let packets = (size as f64 / MSS).ceil() as u64;
    let losses: Vec<u64> = (0..packets)
        .filter(|_| fates.unit() < loss)
        .map(|i| i * MSS as u64)
        .collect();
    let mut noise = Rng::new(seed_from(&[arm.name, &trial_seed.to_string()]));
    let hello_retry = matches!(arm.cc, Cc::Cubic) && arm.handshake_rtts > 1.0 && noise.unit() < 0.1;
    // The study's PTO case: on a long path BBR takes a too-short RTT sample and leaves startup
    // early, under-using the link.
    let bad_sample = matches!(arm.cc, Cc::Bbr) && rtt > 100.0 && noise.unit() < 0.4;
    let hs_rtts = arm.handshake_rtts + if hello_retry { 1.0 } else { 0.0 };
    let jitter = |r: &mut Rng| (1.0 + 0.02 * r.normal()).max(0.8);
    let handshake_ms = hs_rtts * rtt * jitter(&mut noise) + 1.0;
    let t0 = handshake_ms + rtt * jitter(&mut noise);
    let rate = RATE_BPS as f64 / 8.0 / 1000.0; // bytes per ms
    let bdp = rate * rtt;
    let cap = if bad_sample { 0.45 * bdp } else { 2.0 * bdp };
    let (mut cwnd, mut ssthresh) = (10.0 * MSS, f64::INFINITY);
    let (mut t, mut acked) = (t0, 0.0f64);
    let dt = 5.0;
    let mut next_loss = 0;
    let mut timeline = vec![TimelinePoint {
        t_ms: round1(t),
        acked_bytes: 0,
        cwnd_bytes: Some(cwnd as u64),
        bytes_in_flight: Some(0),
        rtt_ms: Some(rtt),
        congestion_event: false,
    }];
    let total = size as f64;
    let mut retransmissions = 0u64;
    while acked < total {
        let per_ms = (cwnd / rtt).min(rate);
        let step = per_ms * dt * jitter(&mut noise);
        let mut event = false;
        acked = (acked + step).min(total);
        if cwnd < ssthresh {
            cwnd += step;
        } else {
            cwnd += 2.0 * MSS * dt / rtt;
        }
        cwnd = cwnd.min(cap);
        while next_loss < losses.len() && (losses[next_loss] as f64) < acked {
            next_loss += 1;
            retransmissions += 1;
            event = true;
            match arm.cc {
                Cc::Cubic => {
                    cwnd = (cwnd * 0.7).max(2.0 * MSS);
                    ssthresh = cwnd;
                }
                Cc::Bbr => cwnd = (cwnd * 0.97).max(4.0 * MSS),
            }
        }
        if event && matches!(arm.cc, Cc::Cubic) {
            // Recovery costs about a round trip of reduced progress.
            t += rtt * 0.5;
        }
        t += dt;
        timeline.push(TimelinePoint {
            t_ms: round1(t),
            acked_bytes: acked as u64,
            cwnd_bytes: Some(cwnd as u64),
            // what a round trip at this rate holds, within the window and what is left
            bytes_in_flight: Some((per_ms * rtt).min(cwnd).min(total - acked) as u64),
            rtt_ms: Some(rtt + (per_ms / rate) * 4.0),
            congestion_event: event,
        });
    }
    let ttlb_ms = round1(t - rtt / 2.0);
    Metrics {
        ttlb_ms,
        ttfb_ms: round1(t0),
        handshake_ms: Some(round1(handshake_ms)),
        handshake_rtts: Some((handshake_ms / rtt * 10.0).round() / 10.0),
        hello_retry,
        packets_lost: Some(retransmissions),
        bytes_resent: Some(retransmissions * MSS as u64),
        first_retransmit_offset: losses.first().copied(),
        impossible_rtt_samples: Some(if bad_sample {
            1 + noise.below(3) as u64
        } else {
            0
        }),
        link_drops: losses.len() as u64,
        timeline,
        detail: Default::default(),
    }
}

fn round1(v: f64) -> f64 {
    (v * 10.0).round() / 10.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_arguments_same_campaign() {
        let a = serde_json_like(&campaign(4, 1));
        let b = serde_json_like(&campaign(4, 1));
        assert_eq!(a, b);
        assert_ne!(a, serde_json_like(&campaign(4, 2)));
    }

    fn serde_json_like(c: &Campaign) -> String {
        format!("{:?}", c.trials)
    }

    #[test]
    fn shape_follows_the_study() {
        let c = campaign(10, 7);
        assert_eq!(c.trials.len(), 3 * 5 * 3 * 10);
        assert_eq!(c.trials.iter().filter(|t| t.outcome.is_err()).count(), 2);
        // Arms of one iteration share the seed, hence the loss pattern.
        let offsets: Vec<Option<u64>> = c
            .trials
            .iter()
            .filter(|t| t.condition == "loss-1%" && t.size == 1_000_000 && t.iteration == 0)
            .filter_map(|t| t.outcome.as_ref().ok().map(|m| m.first_retransmit_offset))
            .collect();
        assert_eq!(offsets.len(), 3);
        assert!(offsets.iter().all(|o| *o == offsets[0] && o.is_some()));
    }
}
