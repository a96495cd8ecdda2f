//! A fingerprint's card: an implementation's choices, each measured from the wire by
//! `quiclab fingerprint` (docs/fingerprint.md), with each run's answer and whether the runs
//! agree within the item's tolerance. Pure data: the runner makes cards, the report draws them
//! side by side.

use serde::{Deserialize, Serialize};

/// Which endpoint of the stack is measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// The stack serves, the reference client fetches (a download: the server sends).
    Server,
    /// The stack's client fetches from the reference server.
    Client,
}

impl Role {
    pub fn name(self) -> &'static str {
        match self {
            Role::Server => "server",
            Role::Client => "client",
        }
    }
}

/// How close two runs' answers must be to agree.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Tolerance {
    Exact,
    /// Within this many bytes (one packet).
    Bytes(f64),
    /// Within this share of the smaller answer.
    Share(f64),
    /// Within this much, in the item's unit.
    Within(f64),
    /// Within a floor (in the item's unit) and a share of the smaller answer, added: what the
    /// host's timing adds to any answer, and what grows with the answer (a paced flight's
    /// span, whose every timer the host may wake late).
    WithinPlusShare(f64, f64),
    /// One round trip of slow start more: the larger answer at most twice the smaller plus
    /// this much (in the item's unit). A queue a slow start built when it ended: an exit on a
    /// delay signal that misses a round trip's samples comes a round trip later, its flight
    /// doubled once more, and a flight `F` that queues `Q` (`F = BDP + Q·rate`) queues
    /// `2Q + RTT` once doubled; the amount is that RTT and the host's timing.
    OneDoubling(f64),
}

impl Tolerance {
    pub fn holds(self, lo: f64, hi: f64) -> bool {
        let d = hi - lo;
        match self {
            Tolerance::Exact => d == 0.0,
            Tolerance::Bytes(b) | Tolerance::Within(b) => d <= b,
            Tolerance::Share(s) => d <= s * lo.abs(),
            Tolerance::WithinPlusShare(w, s) => d <= w + s * lo.abs(),
            Tolerance::OneDoubling(w) => hi <= 2.0 * lo + w,
        }
    }

    fn describe(self) -> String {
        match self {
            Tolerance::Exact => "exact".into(),
            Tolerance::Bytes(b) => format!("±{b:.0} B (one packet)"),
            Tolerance::Share(s) => format!("±{:.0} %", s * 100.0),
            Tolerance::Within(w) => format!("±{w}"),
            Tolerance::WithinPlusShare(w, s) => format!("±({w} + {:.0} %)", s * 100.0),
            Tolerance::OneDoubling(w) => {
                format!("a round trip of slow start (at most 2 × the less + {w})")
            }
        }
    }
}

/// One answer of the card: each run's value, and whether they agree.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Item {
    pub key: String,
    pub label: String,
    pub unit: String,
    /// Each run's answer (`None`: the run could not tell; `why` says why).
    pub runs: Vec<Option<f64>>,
    pub tolerance: Tolerance,
    pub tolerance_text: String,
    /// Every run answered and the answers agree within the tolerance.
    pub reproducible: bool,
    /// What a reader needs beside the number (why a run could not tell).
    pub why: Option<String>,
    /// Each run's answer in words, where the number only stands for it (key shares by name:
    /// the number is a code that is equal for equal answers). Empty for numbers.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub words: Vec<Option<String>>,
}

impl Item {
    pub fn new(
        key: &str,
        label: &str,
        unit: &str,
        tolerance: Tolerance,
        runs: Vec<Option<f64>>,
        why: Option<String>,
    ) -> Item {
        let known: Vec<f64> = runs.iter().flatten().copied().collect();
        let lo = known.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = known.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        Item {
            key: key.to_string(),
            label: label.to_string(),
            unit: unit.to_string(),
            reproducible: !known.is_empty() && known.len() == runs.len() && tolerance.holds(lo, hi),
            tolerance_text: tolerance.describe(),
            runs,
            tolerance,
            why,
            words: Vec::new(),
        }
    }

    /// The same item with each run's answer in words (one per run).
    pub fn with_words(mut self, words: Vec<Option<String>>) -> Item {
        self.words = words;
        self
    }

    /// Run `i`'s answer as shown: its words where the item has them, else `number` of it.
    pub fn shown(&self, i: usize, number: impl Fn(f64) -> String) -> String {
        match (self.words.get(i), self.runs.get(i)) {
            (Some(Some(w)), _) => w.clone(),
            (_, Some(Some(v))) => number(*v),
            _ => "–".into(),
        }
    }

    /// The answer as shown: the run whose number is the runs' median, in words where the item
    /// has them.
    pub fn shown_value(&self, number: impl Fn(f64) -> String) -> String {
        let Some(v) = self.value() else {
            return "–".into();
        };
        match self.runs.iter().position(|r| *r == Some(v)) {
            Some(i) => self.shown(i, number),
            None => number(v),
        }
    }

    /// The runs' median (the lower middle one), if any run answered.
    pub fn value(&self) -> Option<f64> {
        let mut v: Vec<f64> = self.runs.iter().flatten().copied().collect();
        v.sort_by(f64::total_cmp);
        v.get(v.len().saturating_sub(1) / 2).copied()
    }
}

/// A stack's card in one role.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Card {
    pub stack: String,
    pub implementation: String,
    pub role: Role,
    pub peer: String,
    pub http: String,
    pub knobs: Vec<(String, String)>,
    pub path: String,
    pub items: Vec<Item>,
    /// Each run's probes and what was read from them, as the runner records them.
    pub runs: Vec<serde_json::Value>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn items_agree_only_within_their_tolerance() {
        let a = Item::new(
            "k",
            "l",
            "ms",
            Tolerance::Share(0.1),
            vec![Some(100.0), Some(109.0)],
            None,
        );
        assert!(a.reproducible);
        let b = Item::new(
            "k",
            "l",
            "ms",
            Tolerance::Share(0.1),
            vec![Some(100.0), Some(111.0)],
            None,
        );
        assert!(!b.reproducible);
        let c = Item::new(
            "k",
            "l",
            "B",
            Tolerance::Exact,
            vec![Some(1200.0), None],
            None,
        );
        assert!(
            !c.reproducible,
            "a run that could not tell is not agreement"
        );
        assert_eq!(c.value(), Some(1200.0));
        let d = Item::new(
            "k",
            "l",
            "B",
            Tolerance::Bytes(1200.0),
            vec![Some(12000.0), Some(13200.0), Some(12100.0)],
            None,
        );
        assert!(d.reproducible);
        assert_eq!(d.value(), Some(12100.0));
        // a floor and a share added: 2 + 20 % of 5 = 3
        let span = |b| {
            Item::new(
                "k",
                "l",
                "ms",
                Tolerance::WithinPlusShare(2.0, 0.2),
                vec![Some(5.0), Some(b)],
                None,
            )
        };
        assert!(span(7.9).reproducible);
        assert!(!span(8.1).reproducible);
        assert_eq!(span(8.0).tolerance_text, "±(2 + 20 %)");
        // a round trip of slow start: 2 × 107 + 110 = 324
        let queued = |b| {
            Item::new(
                "k",
                "l",
                "ms",
                Tolerance::OneDoubling(110.0),
                vec![Some(b), Some(107.0)],
                None,
            )
        };
        assert!(queued(245.0).reproducible);
        assert!(queued(324.0).reproducible);
        assert!(!queued(324.5).reproducible);
        // the smaller answer is the one doubled, whichever run gave it
        assert!(queued(40.0).reproducible);
        assert!(!Tolerance::OneDoubling(110.0).holds(30.0, 250.0));
        assert_eq!(
            queued(245.0).tolerance_text,
            "a round trip of slow start (at most 2 × the less + 110)"
        );
    }
}
