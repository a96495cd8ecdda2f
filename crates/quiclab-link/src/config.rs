//! What one direction of a link does, set key by key from human strings.
//!
//! The same keys serve the command line (`--rate`, `--up-rate`, `--down-rate`) and plan files, so
//! the list of keys, their value syntax and their help text live here, once.

use std::time::Duration;

use crate::trace::Trace;
use crate::units::{self, QueueLimit, Rate, UnitError};

/// The longest one-way delay (or jitter) a link takes: beyond any real path (a geostationary
/// satellite's is about 0.3 s), and within the time limits of the endpoints' handshakes.
pub const MAX_DELAY: std::time::Duration = std::time::Duration::from_secs(10);

fn bounded_delay(key: &str, value: &str) -> Result<std::time::Duration, ConfigError> {
    let d = units::parse_duration(value).map_err(|e| ConfigError::unit(key, value, e))?;
    if d > MAX_DELAY {
        return Err(ConfigError::new(
            key,
            value,
            format!("allowed: 0 to {}s", MAX_DELAY.as_secs()),
        ));
    }
    Ok(d)
}

/// Reads the trace a `trace` key names (a file, for the command line and plans; the core does
/// no I/O), or says why it cannot.
pub type TraceLoader<'a> = dyn Fn(&str) -> Result<Trace, String> + 'a;

/// A key whose value was rejected: which key, which value, and why / what is allowed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{key} = {value:?}: {reason}")]
pub struct ConfigError {
    pub key: String,
    pub value: String,
    pub reason: String,
}

impl ConfigError {
    pub fn new(key: &str, value: &str, reason: impl Into<String>) -> Self {
        ConfigError {
            key: key.to_string(),
            value: value.to_string(),
            reason: reason.into(),
        }
    }
    fn unit(key: &str, value: &str, e: UnitError) -> Self {
        Self::new(key, value, e.to_string())
    }
}

/// One configurable key of a direction.
#[derive(Debug, Clone, Copy)]
pub struct Key {
    pub name: &'static str,
    pub value: &'static str,
    pub help: &'static str,
    /// May be given several times (accumulates).
    pub repeatable: bool,
}

const fn key(name: &'static str, value: &'static str, help: &'static str) -> Key {
    Key {
        name,
        value,
        help,
        repeatable: false,
    }
}

/// Every key a direction accepts, in the order stages apply.
pub const KEYS: &[Key] = &[
    key(
        "mtu",
        "BYTES",
        "link MTU: larger IP packets are dropped and counted (e.g. 1500)",
    ),
    Key {
        repeatable: true,
        ..key(
            "outage",
            "FROM-TO",
            "blackhole from FROM to TO after the link starts, e.g. 2s-3.5s (repeatable)",
        )
    },
    key(
        "drop-packets",
        "LIST",
        "drop these packet indices (0-based, per direction), e.g. 3,7,10-12",
    ),
    key(
        "drop-large",
        "BYTES/LIST",
        "drop these indices (0-based) among the packets of at least BYTES (IP), e.g. \
         1028/40,95: losses planted on a transfer's data, wherever small packets fall",
    ),
    key(
        "isolated-loss",
        "N/BYTES/KEEP/LENGTH",
        "drop the Nth (0-based) packet of at least BYTES (IP), pass the KEEP packets after it, \
         then drop every packet for LENGTH, e.g. 7/1028/1/50ms: a loss that exactly KEEP \
         packets show, wherever small packets fall",
    ),
    key(
        "blackout",
        "BYTES/LENGTH",
        "from the packet that takes the direction past BYTES, drop every packet for LENGTH: a \
         transfer's tail, whatever its packet count, e.g. 990kb/60ms",
    ),
    key(
        "loss",
        "PERCENT",
        "packet loss rate, e.g. 1% (i.i.d. unless --loss-burst is given)",
    ),
    key(
        "loss-burst",
        "PACKETS",
        "mean loss burst length in packets: turns --loss into Gilbert-Elliott bursts, e.g. 3",
    ),
    key(
        "duplicate",
        "PERCENT",
        "duplicate this share of packets, e.g. 0.5%",
    ),
    key(
        "rate",
        "RATE",
        "bottleneck rate, e.g. 10mbit, 1gbit (default: unlimited)",
    ),
    key(
        "trace",
        "FILE",
        "Mahimahi trace: one line per 1500-byte delivery opportunity, in ms; replaces --rate",
    ),
    key(
        "queue",
        "SIZE",
        "drop-tail queue: bytes (64kb), packets (100pkt) or buffering time (50ms); default 100ms",
    ),
    key("delay", "TIME", "one-way propagation delay, e.g. 25ms"),
    key(
        "jitter",
        "TIME",
        "uniform jitter added to the delay, +/- TIME (keeps order unless --jitter-reorders)",
    ),
    key(
        "jitter-reorders",
        "BOOL",
        "let jitter reorder packets (true/false; default false)",
    ),
    key(
        "reorder",
        "PERCENT",
        "hold back this share of packets by --reorder-delay so later ones overtake",
    ),
    key(
        "reorder-delay",
        "TIME",
        "extra delay of reordered packets (default 5ms)",
    ),
];

/// A Gilbert-Elliott model fixed by its long-run loss rate and mean burst length: the bad state
/// drops every packet, the good state none; the mean burst is `1 / P(bad -> good)`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Burst {
    pub loss: f64,
    pub mean_burst: f64,
}

impl Burst {
    /// P(good -> bad).
    pub fn p_enter(&self) -> f64 {
        let r = self.p_leave();
        self.loss * r / (1.0 - self.loss)
    }
    /// P(bad -> good).
    pub fn p_leave(&self) -> f64 {
        1.0 / self.mean_burst
    }
}

/// A loss that exactly `keep` packets show: the `index`th (0-based) packet of at least
/// `min_bytes` is dropped, the `keep` packets after it pass, and every packet for `blackout`
/// after the last of them is dropped. Whatever a sender writes behind its data
/// (acknowledgements, a stream's end), the receiver sees `keep` packets past the gap: one is
/// too few for a packet-count threshold, three are RFC 9002's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IsolatedLoss {
    pub index: u64,
    pub min_bytes: u32,
    pub keep: u32,
    pub blackout: Duration,
}

/// The configuration of one direction. `Default` is a perfect wire: no delay, no loss, no limit.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct DirectionConfig {
    pub mtu: Option<u32>,
    pub outages: Vec<(Duration, Duration)>,
    pub drop_packets: Vec<u64>,
    /// Drops counted among the large packets only: the least IP size of a packet counted, and
    /// the indices (0-based, sorted) of those dropped.
    pub drop_large: Option<(u32, Vec<u64>)>,
    /// A loss that a given number of packets behind it show ([`IsolatedLoss`]).
    pub isolated_loss: Option<IsolatedLoss>,
    /// A tail's blackout: from the packet that takes the bytes the direction was offered past
    /// the first value, every packet is dropped for the second.
    pub blackout: Option<(u64, Duration)>,
    /// Loss probability (i.i.d., or the long-run rate of the burst model).
    pub loss: f64,
    pub loss_burst: Option<f64>,
    pub duplicate: f64,
    pub rate: Option<Rate>,
    pub trace: Option<Trace>,
    pub queue: Option<QueueLimit>,
    pub delay: Duration,
    pub jitter: Duration,
    pub jitter_reorders: bool,
    pub reorder: f64,
    pub reorder_delay: Option<Duration>,
}

/// Default queue when a rate or trace is set and no queue is given.
pub const DEFAULT_QUEUE: QueueLimit = QueueLimit::Time(Duration::from_millis(100));
/// Default extra delay of a reordered packet.
pub const DEFAULT_REORDER_DELAY: Duration = Duration::from_millis(5);

fn parse_bool(key: &str, value: &str) -> Result<bool, ConfigError> {
    match value.trim().to_ascii_lowercase().as_str() {
        "true" | "yes" | "on" | "1" => Ok(true),
        "false" | "no" | "off" | "0" => Ok(false),
        _ => Err(ConfigError::new(key, value, "allowed: true or false")),
    }
}

/// Parses `3,7,10-12` into sorted, deduplicated indices.
fn parse_index_list(key: &str, value: &str) -> Result<Vec<u64>, ConfigError> {
    let bad = |why: &str| {
        ConfigError::new(
            key,
            value,
            format!("{why}; allowed: comma-separated indices or ranges, e.g. 3,7,10-12"),
        )
    };
    let mut out = Vec::new();
    for part in value.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let a: u64 = a
                    .trim()
                    .parse()
                    .map_err(|_| bad(&format!("{a:?} is not an index")))?;
                let b: u64 = b
                    .trim()
                    .parse()
                    .map_err(|_| bad(&format!("{b:?} is not an index")))?;
                if b < a || b - a > 10_000_000 {
                    return Err(bad(&format!("range {part} is empty or too long")));
                }
                out.extend(a..=b);
            }
            None => out.push(
                part.parse()
                    .map_err(|_| bad(&format!("{part:?} is not an index")))?,
            ),
        }
    }
    out.sort_unstable();
    out.dedup();
    Ok(out)
}

impl DirectionConfig {
    /// The shortest time a packet can take through this direction, queueing aside: the delay
    /// less the jitter (a draw of `-jitter`), never below zero. Nothing else lets a packet
    /// through sooner: reordering only holds packets back, a trace or rate only queues them,
    /// an outage drops them.
    pub fn fastest_delay(&self) -> Duration {
        self.delay.saturating_sub(self.jitter)
    }

    /// Whether a packet can be held to a later time: by a rate or trace (serialisation and
    /// queueing), a delay, jitter or reordering. Without any, every packet the direction does not
    /// drop leaves the moment it arrives.
    pub fn holds_packets(&self) -> bool {
        self.rate.is_some()
            || self.trace.is_some()
            || !self.delay.is_zero()
            || !self.jitter.is_zero()
            || self.reorder > 0.0
    }

    /// Sets `key` from its human string. `load` reads a file (for `trace`); the core does no I/O.
    pub fn set(
        &mut self,
        key: &str,
        value: &str,
        load: &TraceLoader<'_>,
    ) -> Result<(), ConfigError> {
        let unit = |e| ConfigError::unit(key, value, e);
        match key {
            "mtu" => {
                let mtu: u32 = value
                    .trim()
                    .trim_end_matches('b')
                    .parse()
                    .ok()
                    .filter(|m| (68..=65_535).contains(m))
                    .ok_or_else(|| {
                        ConfigError::new(key, value, "allowed: bytes from 68 to 65535")
                    })?;
                self.mtu = Some(mtu);
            }
            "outage" => {
                let (a, b) = value.split_once('-').ok_or_else(|| {
                    ConfigError::new(key, value, "allowed: FROM-TO, e.g. 2s-3.5s")
                })?;
                let (a, b) = (
                    units::parse_duration(a).map_err(unit)?,
                    units::parse_duration(b).map_err(unit)?,
                );
                if b <= a {
                    return Err(ConfigError::new(
                        key,
                        value,
                        "the outage must end after it starts",
                    ));
                }
                self.outages.push((a, b));
                self.outages.sort();
            }
            "drop-packets" => self.drop_packets = parse_index_list(key, value)?,
            "drop-large" => {
                let bad = || {
                    ConfigError::new(
                        key,
                        value,
                        "allowed: BYTES/LIST, e.g. 1028/40,95-97 (a least IP size of at least 1 \
                         byte, then indices or ranges counted among the packets that large)",
                    )
                };
                let (b, list) = value.split_once('/').ok_or_else(bad)?;
                let min_bytes = b
                    .trim()
                    .parse::<u32>()
                    .ok()
                    .filter(|&b| b > 0)
                    .ok_or_else(bad)?;
                let list = parse_index_list(key, list).map_err(|_| bad())?;
                if list.is_empty() {
                    return Err(bad());
                }
                self.drop_large = Some((min_bytes, list));
            }
            "isolated-loss" => {
                let allowed = "allowed: N/BYTES/KEEP/LENGTH, e.g. 7/1028/1/50ms (an index, a size \
                               of at least 1 byte, a count of at least 1, a length above zero)";
                let bad = || ConfigError::new(key, value, allowed);
                let parts: Vec<&str> = value.split('/').map(str::trim).collect();
                let &[n, b, k, l] = parts.as_slice() else {
                    return Err(bad());
                };
                let index = n.parse::<u64>().map_err(|_| bad())?;
                let min_bytes = b.parse::<u32>().ok().filter(|&b| b > 0).ok_or_else(bad)?;
                let keep = k.parse::<u32>().ok().filter(|&k| k > 0).ok_or_else(bad)?;
                let blackout = units::parse_duration(l).map_err(unit)?;
                if blackout.is_zero() {
                    return Err(bad());
                }
                self.isolated_loss = Some(IsolatedLoss {
                    index,
                    min_bytes,
                    keep,
                    blackout,
                });
            }
            "blackout" => {
                let allowed = "allowed: BYTES/LENGTH, e.g. 990kb/60ms (a length above zero)";
                let (b, q) = value
                    .split_once('/')
                    .ok_or_else(|| ConfigError::new(key, value, allowed))?;
                let bytes = units::parse_bytes(b).map_err(unit)?;
                let length = units::parse_duration(q).map_err(unit)?;
                if length.is_zero() {
                    return Err(ConfigError::new(key, value, allowed));
                }
                self.blackout = Some((bytes, length));
            }
            "loss" => self.loss = units::parse_percent(value).map_err(unit)?,
            "loss-burst" => {
                let b: f64 = value
                    .trim()
                    .trim_end_matches("pkt")
                    .parse()
                    .ok()
                    .filter(|b: &f64| b.is_finite() && *b >= 1.0)
                    .ok_or_else(|| {
                        ConfigError::new(
                            key,
                            value,
                            "allowed: a mean burst length >= 1 packet, e.g. 3",
                        )
                    })?;
                self.loss_burst = Some(b);
            }
            "duplicate" => self.duplicate = units::parse_percent(value).map_err(unit)?,
            "rate" => self.rate = Some(value.parse().map_err(unit)?),
            "trace" => {
                self.trace = Some(load(value).map_err(|e| ConfigError::new(key, value, e))?);
            }
            "queue" => self.queue = Some(value.parse().map_err(unit)?),
            "delay" => self.delay = bounded_delay(key, value)?,
            "jitter" => self.jitter = bounded_delay(key, value)?,
            "jitter-reorders" => self.jitter_reorders = parse_bool(key, value)?,
            "reorder" => self.reorder = units::parse_percent(value).map_err(unit)?,
            "reorder-delay" => {
                self.reorder_delay = Some(units::parse_duration(value).map_err(unit)?)
            }
            _ => {
                let names: Vec<_> = KEYS.iter().map(|k| k.name).collect();
                return Err(ConfigError::new(
                    key,
                    value,
                    format!("unknown key; allowed: {}", names.join(", ")),
                ));
            }
        }
        Ok(())
    }

    /// Checks combinations that no single key can check.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if let (Some(rate), Some(_)) = (self.rate, &self.trace) {
            return Err(ConfigError::new(
                "rate",
                &rate.to_string(),
                "a rate and a trace both set the link's capacity: give either rate or trace, \
                 not both",
            ));
        }
        if self.queue.is_some() && self.rate.is_none() && self.trace.is_none() {
            return Err(ConfigError::new(
                "queue",
                &self.queue.map(|q| q.to_string()).unwrap_or_default(),
                "a queue needs a rate or a trace to drain it",
            ));
        }
        if self.loss_burst.is_some() && !(self.loss > 0.0 && self.loss < 1.0) {
            return Err(ConfigError::new(
                "loss-burst",
                &format!("{}", self.loss_burst.unwrap_or_default()),
                "burst loss needs a loss rate above 0% and below 100%",
            ));
        }
        if let Some(b) = self.burst()
            && b.p_enter() > 1.0
        {
            return Err(ConfigError::new(
                "loss-burst",
                &format!("{}", b.mean_burst),
                format!(
                    "a loss rate of {}% cannot be reached with bursts this short; use a burst length >= {:.2}",
                    b.loss * 100.0,
                    b.loss / (1.0 - b.loss)
                ),
            ));
        }
        Ok(())
    }

    /// The burst-loss model, when configured.
    pub fn burst(&self) -> Option<Burst> {
        self.loss_burst.map(|mean_burst| Burst {
            loss: self.loss,
            mean_burst,
        })
    }

    /// Queue limit in force (the default when a rate or trace is set without one).
    pub fn queue_limit(&self) -> QueueLimit {
        self.queue.unwrap_or(DEFAULT_QUEUE)
    }

    /// True when the direction changes nothing (a plain wire).
    pub fn is_transparent(&self) -> bool {
        *self == DirectionConfig::default()
    }
}

/// Both directions and the seed.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct LinkConfig {
    pub seed: u64,
    /// Client -> server.
    pub up: DirectionConfig,
    /// Server -> client.
    pub down: DirectionConfig,
}

impl LinkConfig {
    /// Builds both directions from `(key, value)` pairs where a key is `KEY` (both directions),
    /// `up-KEY` (client -> server) or `down-KEY` (server -> client). Symmetric keys apply first,
    /// then per-direction ones, each in the order given, so `--delay 10ms --down-delay 30ms`
    /// means what it says whatever the order. Errors carry the key as given (`up-rate`).
    pub fn from_keys<K: AsRef<str>, V: AsRef<str>>(
        seed: u64,
        pairs: &[(K, V)],
        load: &TraceLoader<'_>,
    ) -> Result<LinkConfig, ConfigError> {
        let mut cfg = LinkConfig {
            seed,
            ..Default::default()
        };
        for pass in ["", "up-", "down-"] {
            for (given, value) in pairs {
                let (given, value) = (given.as_ref(), value.as_ref());
                let (scope, key) = match given.strip_prefix("up-") {
                    Some(k) => ("up-", k),
                    None => match given.strip_prefix("down-") {
                        Some(k) => ("down-", k),
                        None => ("", given),
                    },
                };
                if scope != pass {
                    continue;
                }
                let named = |e: ConfigError| ConfigError {
                    key: given.to_string(),
                    ..e
                };
                if scope != "down-" {
                    cfg.up.set(key, value, load).map_err(named)?;
                }
                if scope != "up-" {
                    cfg.down.set(key, value, load).map_err(named)?;
                }
            }
        }
        fn named(dir: &'static str) -> impl Fn(ConfigError) -> ConfigError {
            move |e| ConfigError {
                key: format!("{dir}{}", e.key),
                ..e
            }
        }
        match (cfg.up.validate(), cfg.down.validate()) {
            // the same mistake in both directions came from keys given for both: name them so
            (Err(up), Err(down)) if up == down => Err(up),
            (Err(up), _) => Err(named("up-")(up)),
            (_, Err(down)) => Err(named("down-")(down)),
            _ => Ok(cfg),
        }
    }

    /// The link's nominal minimum round-trip time: both propagation delays, no queueing and
    /// no jitter. What an RTT is counted in (handshake round trips, timeouts).
    pub fn min_rtt(&self) -> Duration {
        self.up.delay + self.down.delay
    }

    /// The smallest round trip the link can deliver: both directions' fastest passage
    /// ([`DirectionConfig::fastest_delay`]). An RTT sample below it is physically impossible;
    /// one between it and [`LinkConfig::min_rtt`] is jitter at work.
    pub fn rtt_floor(&self) -> Duration {
        self.up.fastest_delay() + self.down.fastest_delay()
    }

    /// The bottleneck rate: the slower direction's, bit/s; `None` when neither has a rate.
    pub fn bottleneck_bps(&self) -> Option<u64> {
        [self.up.rate, self.down.rate]
            .into_iter()
            .flatten()
            .map(|r| r.bps())
            .min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_files(_: &str) -> Result<Trace, String> {
        Err("no files here".into())
    }

    #[test]
    fn errors_name_key_value_and_what_is_allowed() {
        let mut c = DirectionConfig::default();
        let e = c.set("rate", "10mbits", &no_files).unwrap_err();
        let msg = e.to_string();
        assert!(msg.starts_with("rate = \"10mbits\""), "{msg}");
        assert!(msg.contains("allowed"), "{msg}");
        let e = c.set("latency", "5ms", &no_files).unwrap_err();
        assert!(e.to_string().contains("delay"), "{e}");
        assert!(c.set("mtu", "40", &no_files).is_err());
        assert!(c.set("outage", "3s-2s", &no_files).is_err());
    }

    #[test]
    fn index_lists_and_ranges() {
        let mut c = DirectionConfig::default();
        c.set("drop-packets", "7, 3,10-12,3", &no_files).unwrap();
        assert_eq!(c.drop_packets, vec![3, 7, 10, 11, 12]);
    }

    #[test]
    fn drops_among_large_packets_take_a_least_size_and_a_list() {
        let mut c = DirectionConfig::default();
        c.set("drop-large", "1028/95, 40-41", &no_files).unwrap();
        assert_eq!(c.drop_large, Some((1028, vec![40, 41, 95])));
        for bad in ["40,95", "0/40", "big/40", "1028/", "1028/x"] {
            let e = c.set("drop-large", bad, &no_files).unwrap_err().to_string();
            assert!(e.starts_with(&format!("drop-large = \"{bad}\"")), "{e}");
        }
    }

    #[test]
    fn an_isolated_loss_takes_an_index_a_least_size_a_count_and_a_length() {
        let mut c = DirectionConfig::default();
        c.set("isolated-loss", "7/1028/3/50ms", &no_files).unwrap();
        assert_eq!(
            c.isolated_loss,
            Some(IsolatedLoss {
                index: 7,
                min_bytes: 1028,
                keep: 3,
                blackout: Duration::from_millis(50)
            })
        );
        for bad in [
            "7/1028/50ms",
            "7/0/1/50ms",
            "7/big/1/50ms",
            "x/1028/1/50ms",
            "7/1028/0/50ms",
            "7/1028/1/0ms",
            "7/1028/1/50ms/1",
        ] {
            let e = c
                .set("isolated-loss", bad, &no_files)
                .unwrap_err()
                .to_string();
            assert!(e.starts_with(&format!("isolated-loss = \"{bad}\"")), "{e}");
        }
    }

    #[test]
    fn a_blackout_takes_bytes_and_a_length() {
        let mut c = DirectionConfig::default();
        c.set("blackout", "990kb/60ms", &no_files).unwrap();
        assert_eq!(c.blackout, Some((990_000, Duration::from_millis(60))));
        for bad in ["990kb", "990kb/0ms", "lots/30ms", "990kb/soon"] {
            let e = c.set("blackout", bad, &no_files).unwrap_err().to_string();
            assert!(e.starts_with(&format!("blackout = \"{bad}\"")), "{e}");
        }
    }

    #[test]
    fn combinations_are_checked() {
        let mut c = DirectionConfig::default();
        c.set("queue", "10pkt", &no_files).unwrap();
        assert!(c.validate().is_err());
        c.set("rate", "1mbit", &no_files).unwrap();
        c.validate().unwrap();
        c.set("loss-burst", "2", &no_files).unwrap();
        assert!(c.validate().is_err(), "burst without loss");
        c.set("loss", "1%", &no_files).unwrap();
        c.validate().unwrap();
        // 60 % loss with bursts of 1 is impossible: p_enter = 0.6/0.4 > 1
        c.set("loss", "60%", &no_files).unwrap();
        c.set("loss-burst", "1", &no_files).unwrap();
        assert!(c.validate().unwrap_err().to_string().contains("1.50"));
    }

    #[test]
    fn burst_model_matches_its_parameters() {
        let b = Burst {
            loss: 0.02,
            mean_burst: 4.0,
        };
        let (p, r) = (b.p_enter(), b.p_leave());
        assert!((p / (p + r) - 0.02).abs() < 1e-12);
        assert_eq!(r, 0.25);
    }
}
