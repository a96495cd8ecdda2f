//! How many trials run at once when the user leaves it to quiclab (`--jobs` not given): set
//! from the CPU the trials are measured to need, not guessed from the plan.
//!
//! Trials at once share the host's cores with each other's emulators and endpoints; a trial
//! that waits for a core measures the host, not the network. The governor starts at one trial
//! and, window by window, reads what the host's CPUs did (the busy fraction of all cores) and
//! how many trials ran meanwhile. From those it estimates one trial's share of a core and allows
//! as many trials as keep the host at most [`target_busy`] busy, one more per window at most,
//! and only when the limit was what held the campaign back. A saturated second, or a window in
//! which [`LATE_TRIALS`] trials found their emulator's packets held up (the trial's own guard;
//! a single one happens with one trial at a time too), halves the limit and makes the level it
//! came from a ceiling for the rest of the run.
//!
//! Sans-IO: the campaign feeds it samples; it keeps no clock.

/// The chance, at most, that a thread waking on the host finds every core busy: a trial's
/// endpoint or emulator thread that waits for a core delays its packets.
pub const ALL_BUSY: f64 = 0.1;
/// The busiest the governor ever lets the host be, however many cores it has.
pub const MOST_BUSY: f64 = 0.75;
/// Late trials in one window that make the governor back off.
pub const LATE_TRIALS: usize = 2;

/// The busy fraction of all cores the governor aims at on `cores` cores: with each core busy
/// a fraction `u` of the time, independently, all are busy together `u^cores` of it; the
/// target keeps that at [`ALL_BUSY`] (32 % on 2 cores, 56 % on 4, 75 % from 8 on).
pub fn target_busy(cores: usize) -> f64 {
    ALL_BUSY.powf(1.0 / cores.max(1) as f64).min(MOST_BUSY)
}
/// Above this busy fraction the host is saturated (the campaign's busy-second threshold).
pub const SATURATED: f64 = 0.9;
/// Samples (seconds) per decision.
pub const WINDOW: usize = 3;

/// The limit on trials at once, and what it is based on.
#[derive(Debug, Clone)]
pub struct Governor {
    cores: f64,
    target: f64,
    limit: usize,
    /// The most it may ever allow: the workers there are, lowered by each back-off.
    ceiling: usize,
    /// This window's samples: busy fraction, trials running.
    busy: Vec<f64>,
    running: Vec<f64>,
    late: usize,
    /// The last estimate of one trial's CPU, in cores.
    per_trial: Option<f64>,
}

/// Why the limit changed.
#[derive(Debug, Clone, PartialEq)]
pub enum Change {
    /// The trials needed little enough CPU for one more.
    Up { per_trial_cores: f64 },
    /// They needed more than the target allows.
    Down { per_trial_cores: f64 },
    /// The host was saturated, or a trial's emulator ran late: halved, and capped below the
    /// level that did it.
    BackOff { saturated: bool, late_trials: usize },
}

impl Governor {
    /// A governor for `cores` cores and at most `ceiling` trials at once, starting at one.
    pub fn new(cores: usize, ceiling: usize) -> Self {
        Governor {
            cores: cores.max(1) as f64,
            target: target_busy(cores),
            limit: 1,
            ceiling: ceiling.max(1),
            busy: Vec::new(),
            running: Vec::new(),
            late: 0,
            per_trial: None,
        }
    }

    /// The trials allowed at once now.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// The last estimate of one trial's CPU need, in cores.
    pub fn per_trial_cores(&self) -> Option<f64> {
        self.per_trial
    }

    /// A trial ended whose emulator handed packets over late.
    pub fn trial_late(&mut self) {
        self.late += 1;
    }

    /// One second's sample: the busy fraction of all cores and the trials that were running
    /// (on average) in it. Returns the new limit when a window ends with a change.
    pub fn sample(&mut self, busy: f64, running: f64) -> Option<(usize, Change)> {
        self.busy.push(busy.clamp(0.0, 1.0));
        self.running.push(running.max(0.0));
        // a saturated second or a late trial is acted on at once
        let saturated = busy > SATURATED;
        if saturated || self.late >= LATE_TRIALS {
            let change = Change::BackOff {
                saturated,
                late_trials: self.late,
            };
            self.reset_window();
            if self.limit == 1 {
                return None;
            }
            self.ceiling = self.ceiling.min(self.limit - 1).max(1);
            self.limit = (self.limit / 2).max(1);
            return Some((self.limit, change));
        }
        if self.busy.len() < WINDOW {
            return None;
        }
        let n = self.busy.len() as f64;
        let (busy, running) = (
            self.busy.iter().sum::<f64>() / n,
            self.running.iter().sum::<f64>() / n,
        );
        self.reset_window();
        if running < 0.5 {
            // nothing ran: nothing learnt
            return None;
        }
        // what the host spent, shared among the trials that ran (the host's other work counts
        // against them: it takes the same cores)
        let per_trial = (busy * self.cores / running).max(1e-3);
        self.per_trial = Some(per_trial);
        let fits = ((self.target * self.cores / per_trial).floor() as usize).max(1);
        if fits < self.limit {
            self.limit = fits;
            return Some((
                fits,
                Change::Down {
                    per_trial_cores: per_trial,
                },
            ));
        }
        // one more only when the limit held trials back (as many ran as it allowed) and the
        // estimate has room for it
        let bound = running >= self.limit as f64 - 0.5;
        if fits > self.limit && bound && self.limit < self.ceiling {
            self.limit += 1;
            return Some((
                self.limit,
                Change::Up {
                    per_trial_cores: per_trial,
                },
            ));
        }
        None
    }

    fn reset_window(&mut self) {
        self.busy.clear();
        self.running.clear();
        self.late = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds `g` seconds of a host where each running trial takes `per_trial` cores (and the
    /// host nothing else), `limit` trials running, until the limit stops changing.
    fn settle(g: &mut Governor, cores: f64, per_trial: f64, seconds: usize) {
        for _ in 0..seconds {
            let running = g.limit() as f64;
            g.sample((running * per_trial / cores).min(1.0), running);
        }
    }

    #[test]
    fn light_trials_climb_one_step_a_window_up_to_the_ceiling() {
        let mut g = Governor::new(2, 6);
        assert_eq!(g.limit(), 1);
        // 5 % of a core each: the target (0.63 of a core) allows 12
        let mut limits = Vec::new();
        for _ in 0..(WINDOW * 8) {
            let running = g.limit() as f64;
            if let Some((l, c)) = g.sample(running * 0.05 / 2.0, running) {
                assert!(matches!(c, Change::Up { .. }), "{c:?}");
                limits.push(l);
            }
        }
        assert_eq!(
            limits,
            vec![2, 3, 4, 5, 6],
            "one step a window, then the ceiling"
        );
    }

    #[test]
    fn the_limit_keeps_the_host_at_the_target() {
        // 0.2 cores a trial on 2 cores: the target (0.63 of a core) fits 3 (0.6), not 4
        let mut g = Governor::new(2, 16);
        settle(&mut g, 2.0, 0.2, WINDOW * 10);
        assert_eq!(g.limit(), 3);
        let est = g.per_trial_cores().unwrap();
        assert!((est - 0.2).abs() < 1e-9, "{est}");
        // the trials grow heavier (larger objects): the limit comes down in one window
        for _ in 0..WINDOW {
            let r = g.limit() as f64;
            g.sample(r * 0.4 / 2.0, r);
        }
        assert_eq!(g.limit(), 1, "one trial of 0.4 cores fits, two do not");
    }

    #[test]
    fn a_saturated_second_halves_the_limit_and_caps_it_below_where_it_was() {
        let mut g = Governor::new(4, 16);
        settle(&mut g, 4.0, 0.1, WINDOW * 10);
        let before = g.limit();
        assert!(before >= 8, "{before}");
        let (after, change) = g.sample(0.95, before as f64).unwrap();
        assert_eq!(after, before / 2);
        assert_eq!(
            change,
            Change::BackOff {
                saturated: true,
                late_trials: 0
            }
        );
        // light trials again: it climbs back, but never to the level that saturated
        settle(&mut g, 4.0, 0.1, WINDOW * 20);
        assert_eq!(g.limit(), before - 1);
    }

    #[test]
    fn late_trials_back_off_and_one_trial_is_the_floor() {
        let mut g = Governor::new(2, 8);
        settle(&mut g, 2.0, 0.05, WINDOW * 3);
        assert_eq!(g.limit(), 4);
        // one late trial in a window is the host's ordinary noise (it happens to a trial alone)
        g.trial_late();
        assert_eq!(g.sample(0.1, 4.0), None);
        for _ in 0..LATE_TRIALS {
            g.trial_late();
        }
        let (after, change) = g.sample(0.1, 4.0).unwrap();
        assert_eq!(after, 2);
        assert_eq!(
            change,
            Change::BackOff {
                saturated: false,
                late_trials: LATE_TRIALS + 1
            }
        );
        for _ in 0..LATE_TRIALS {
            g.trial_late();
        }
        assert_eq!(g.sample(0.1, 2.0).unwrap().0, 1);
        for _ in 0..LATE_TRIALS {
            g.trial_late();
        }
        assert_eq!(g.sample(0.1, 1.0), None, "never below one trial");
        assert_eq!(g.limit(), 1);
    }

    #[test]
    fn the_target_keeps_every_core_busy_together_rarely() {
        for cores in [1, 2, 4, 8, 64] {
            let u = target_busy(cores);
            assert!(u.powi(cores as i32) <= ALL_BUSY + 1e-12, "{cores}: {u}");
            assert!(u <= MOST_BUSY);
        }
        assert!((target_busy(2) - 0.1f64.sqrt()).abs() < 1e-12);
        assert_eq!(target_busy(1), ALL_BUSY);
        assert_eq!(target_busy(64), MOST_BUSY);
    }

    #[test]
    fn a_limit_that_held_nothing_back_is_not_raised() {
        // one trial runs although two are allowed (the queue is draining, or trials that take
        // the host run alone): what one trial costs says nothing about three
        let mut g = Governor::new(2, 8);
        settle(&mut g, 2.0, 0.05, WINDOW);
        assert_eq!(g.limit(), 2);
        for _ in 0..WINDOW * 5 {
            assert_eq!(g.sample(0.05 / 2.0, 1.0), None);
        }
        assert_eq!(g.limit(), 2);
        // an idle window teaches nothing either
        for _ in 0..WINDOW {
            assert_eq!(g.sample(0.0, 0.0), None);
        }
    }
}
