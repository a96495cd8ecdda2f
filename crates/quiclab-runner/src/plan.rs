//! Campaign plans: TOML in, a validated [`Plan`] out, or an error that names the file, line,
//! column, the problem and what is allowed.
//!
//! ```toml
//! name = "example"
//! iterations = 20            # trials per (condition, size, arm)
//! seed = 1                   # base seed: iteration i uses a seed derived from (seed, i)
//! [quick]                    # the --quick profile overrides these
//! iterations = 5             # ([quick.workload] overrides keys of [workload])
//! [workload]                 # kinds: "single-object" (one GET of each size on a new
//! kind = "single-object"     # connection), "repeat" (`requests` GETs of each size, each on a
//! sizes = ["100kb", "1mb"]   # new connection resuming the last session: 0-RTT over QUIC),
//!                            # "segments" (`segments` GETs on one connection, sizes drawn from
//!                            # `segment-min`..`segment-max` per iteration)
//! [network]                  # applied to every condition (link keys as in `quiclab link`)
//! rate = "10mbit"
//! delay = "10ms"
//! [conditions.baseline]      # named conditions, in order; their keys override [network]
//! [conditions."loss 1%"]
//! loss = "1%"
//! [matrix]                   # and/or every combination of these values
//! up-loss = ["0%", "2%"]
//! [arms.h2-cubic]            # stacks with their knobs (http = "1.1", "2", "3" or "coded")
//! http = "2"
//! tcp-cc = "cubic"
//! [arms.h3-cubic]
//! http = "3"
//! quic-cc = "cubic"
//! [[compare]]                # shown as the change of b relative to a
//! a = "h2-cubic"
//! b = "h3-cubic"
//! ```

use std::fmt;
use std::time::Duration;

use indexmap::IndexMap;
use quiclab_link::config::{ConfigError, KEYS};
use quiclab_link::{LinkConfig, units};
pub use quiclab_report::model::Workload;
use quiclab_stack::quic::{self, QuicCongestion, QuicOptions};
use quiclab_stack::record::HttpVersion;
use quiclab_stack::tcpinfo;
use quiclab_stack::tls::KxGroup;
use toml::Spanned;

/// A plan problem with its place in the file.
#[derive(Debug, Clone, PartialEq)]
pub struct PlanError {
    pub file: String,
    /// 1-based line and column, when the problem has a place.
    pub line: usize,
    pub column: usize,
    pub message: String,
}

impl fmt::Display for PlanError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line > 0 {
            write!(
                f,
                "{}:{}:{}: {}",
                self.file, self.line, self.column, self.message
            )
        } else {
            write!(f, "{}: {}", self.file, self.message)
        }
    }
}

impl std::error::Error for PlanError {}

/// Which profile of a plan to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Profile {
    Full,
    /// Fewer iterations (and whatever else the plan's `[quick]` table reduces), for a first look.
    Quick,
}

impl Profile {
    pub fn name(self) -> &'static str {
        match self {
            Profile::Full => "full",
            Profile::Quick => "quick",
        }
    }
}

/// A validated plan.
#[derive(Debug, Clone)]
pub struct Plan {
    pub name: String,
    pub description: String,
    /// Where the plan came from (a path, or `built-in NAME`).
    pub source: String,
    pub profile: Profile,
    pub iterations: u32,
    pub seed: u64,
    /// What each trial does.
    pub workload: Workload,
    /// Object sizes in bytes, in plan order (for `segments`, the one nominal segment size,
    /// halfway between the smallest and the largest).
    pub sizes: Vec<u64>,
    pub conditions: Vec<Condition>,
    pub arms: Vec<Arm>,
    /// (baseline, compared) arm names.
    pub comparisons: Vec<(String, String)>,
    /// Longest a trial may take before it is recorded as failed.
    pub trial_timeout: Option<Duration>,
}

/// A network condition: link keys as given (after merging `[network]`) and the resolved link.
#[derive(Debug, Clone)]
pub struct Condition {
    pub name: String,
    /// The keys that define it, e.g. `[("rate", "10mbit"), ("delay", "10ms"), ("loss", "1%")]`.
    pub keys: Vec<(String, String)>,
    /// The link (seed 0; each trial sets its own).
    pub link: LinkConfig,
}

impl Condition {
    /// A one-line description, e.g. `rate=10mbit delay=10ms loss=1%`.
    pub fn label(&self) -> String {
        self.keys
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// The bottleneck rate (the smaller direction's), if any.
    pub fn rate_bps(&self) -> Option<u64> {
        [self.link.up.rate, self.link.down.rate]
            .into_iter()
            .flatten()
            .map(|r| r.bps())
            .min()
    }
}

/// Which stack an arm knob concerns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Applies {
    Any,
    Tcp,
    Quic,
}

/// How a knob reaches the endpoints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Flag {
    /// `--flag VALUE` on the server (`quiclab serve`), the client (`quiclab get`) or both.
    Server(&'static str),
    Client(&'static str),
    Both(&'static str),
    /// A switch without a value on the client, given when the value is true.
    ClientSwitch(&'static str),
    /// The same on both endpoints.
    BothSwitch(&'static str),
}

/// One knob an arm may set.
struct Knob {
    key: &'static str,
    applies: Applies,
    flag: Flag,
    help: &'static str,
    /// Normalises the value or says what is allowed.
    check: fn(&str) -> Result<String, String>,
}

fn check_on_off(v: &str) -> Result<String, String> {
    quic::parse_on_off("value", v)
        .map(|b| if b { "on" } else { "off" }.to_string())
        .map_err(|_| "allowed: on or off".into())
}

fn check_bool(v: &str) -> Result<String, String> {
    match v {
        "true" | "false" => Ok(v.to_string()),
        _ => Err("allowed: true or false".into()),
    }
}

fn check_tcp_cc(v: &str) -> Result<String, String> {
    let names = tcpinfo::available_congestion_controllers()
        .map_err(|e| format!("cannot read {}: {e}", tcpinfo::AVAILABLE_CONGESTION))?;
    if names.iter().any(|n| n == v) {
        Ok(v.to_string())
    } else {
        Err(format!(
            "this kernel's TCP congestion controllers are: {}",
            names.join(", ")
        ))
    }
}

fn check_quic_cc(v: &str) -> Result<String, String> {
    v.parse::<QuicCongestion>()
        .map(|c| c.name().to_string())
        .map_err(|_| {
            format!(
                "allowed: {}",
                QuicCongestion::ALL.map(QuicCongestion::name).join(", ")
            )
        })
}

fn check_duration(v: &str) -> Result<String, String> {
    units::parse_duration(v)
        .map(|_| v.to_string())
        .map_err(|e| e.to_string())
}

fn check_groups(v: &str) -> Result<String, String> {
    KxGroup::parse_list(v)
        .map(|g| g.iter().map(|g| g.name()).collect::<Vec<_>>().join(","))
        .map_err(|e| format!("{e}; allowed: a list of x25519, p256, p384"))
}

fn check_payload(v: &str) -> Result<String, String> {
    match v.parse::<u16>() {
        Ok(n) if (1200..=65_527).contains(&n) => Ok(n.to_string()),
        _ => Err("allowed: bytes from 1200 to 65527".into()),
    }
}

fn check_record(v: &str) -> Result<String, String> {
    match v.parse::<u16>() {
        Ok(n) if (64..=16_384).contains(&n) => Ok(n.to_string()),
        _ => Err("allowed: bytes from 64 to 16384".into()),
    }
}

const KNOBS: &[Knob] = &[
    Knob {
        key: "tcp-cc",
        applies: Applies::Tcp,
        flag: Flag::Both("--tcp-cc"),
        help: "TCP congestion controller of both endpoints (e.g. cubic, bbr, reno)",
        check: check_tcp_cc,
    },
    Knob {
        key: "quic-cc",
        applies: Applies::Quic,
        flag: Flag::Both("--quic-cc"),
        help: "QUIC congestion controller: newreno, cubic or bbr (quinn's BBR is experimental)",
        check: check_quic_cc,
    },
    Knob {
        key: "quic-initial-rtt",
        applies: Applies::Quic,
        flag: Flag::Both("--quic-initial-rtt"),
        help: "RTT assumed before the first sample, e.g. 100ms (sets the first PTO)",
        check: check_duration,
    },
    Knob {
        key: "quic-mtu-discovery",
        applies: Applies::Quic,
        flag: Flag::Both("--quic-mtu-discovery"),
        help: "path MTU discovery: on or off",
        check: check_on_off,
    },
    Knob {
        key: "quic-initial-mtu",
        applies: Applies::Quic,
        flag: Flag::Both("--quic-initial-mtu"),
        help: "UDP payload at the start, bytes",
        check: check_payload,
    },
    Knob {
        key: "quic-max-udp-payload",
        applies: Applies::Quic,
        flag: Flag::Both("--quic-max-udp-payload"),
        help: "largest UDP payload (upper bound of MTU discovery), bytes",
        check: check_payload,
    },
    Knob {
        key: "quic-gso",
        applies: Applies::Quic,
        flag: Flag::Both("--quic-gso"),
        help: "generic segmentation offload: on or off",
        check: check_on_off,
    },
    Knob {
        key: "groups",
        applies: Applies::Any,
        flag: Flag::Client("--groups"),
        help: "client key-exchange groups in order; a key share for the first only",
        check: check_groups,
    },
    Knob {
        key: "server-groups",
        applies: Applies::Any,
        flag: Flag::Server("--groups"),
        help: "groups the server accepts, in order of preference",
        check: check_groups,
    },
    Knob {
        key: "dynamic-records",
        applies: Applies::Tcp,
        flag: Flag::Server("--dynamic-records"),
        help: "HTTP/2 responses start with a small frame: on or off",
        check: check_on_off,
    },
    Knob {
        key: "tls-max-record",
        applies: Applies::Tcp,
        flag: Flag::Server("--tls-max-record"),
        help: "largest TLS record payload over TCP, bytes",
        check: check_record,
    },
    Knob {
        key: "resume",
        applies: Applies::Any,
        flag: Flag::ClientSwitch("--resume"),
        help: "resume TLS sessions (and 0-RTT over QUIC) across connections: true or false",
        check: check_bool,
    },
    Knob {
        key: "tfo",
        applies: Applies::Tcp,
        flag: Flag::BothSwitch("--tfo"),
        help: "TCP Fast Open: true or false",
        check: check_bool,
    },
];

/// A stack with its knobs.
#[derive(Debug, Clone)]
pub struct Arm {
    pub name: String,
    pub label: String,
    pub http: HttpVersion,
    /// Knobs as normalised, in the table's order.
    pub knobs: Vec<(String, String)>,
    /// Notes that must travel with this arm's results.
    pub caveats: Vec<String>,
}

impl Arm {
    fn flags(&self, server: bool) -> Vec<String> {
        let mut out = Vec::new();
        for (key, value) in &self.knobs {
            let Some(k) = KNOBS.iter().find(|k| k.key == key) else {
                continue;
            };
            match (k.flag, server) {
                (Flag::Both(f), _) | (Flag::Server(f), true) | (Flag::Client(f), false) => {
                    out.push(f.to_string());
                    out.push(value.clone());
                }
                (Flag::ClientSwitch(f), false) | (Flag::BothSwitch(f), _) if value == "true" => {
                    out.push(f.to_string())
                }
                _ => {}
            }
        }
        out
    }

    /// Arguments of `quiclab serve` for this arm.
    pub fn server_args(&self) -> Vec<String> {
        self.flags(true)
    }

    /// Arguments of `quiclab get` for this arm (without URLs and output options).
    pub fn client_args(&self) -> Vec<String> {
        let mut out = vec!["--http".to_string(), self.http.name().to_string()];
        out.extend(self.flags(false));
        out
    }

    /// The value of a knob, if set.
    pub fn knob(&self, key: &str) -> Option<&str> {
        self.knobs
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// Every key an arm accepts, with its help (for errors and `--help`).
pub fn arm_keys_help() -> String {
    let mut s = String::from(
        "  http  HTTP version: 1.1, 2 (over TCP and TLS 1.3), 3 (over QUIC), or coded (the network-coded transport)\n  label  a description for the report\n",
    );
    for k in KNOBS {
        s.push_str(&format!("  {}  {}\n", k.key, k.help));
    }
    s
}

// ---- parsing ----

type Value = Spanned<toml::Value>;
type Table = IndexMap<Spanned<String>, Value>;

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPlan {
    name: Spanned<String>,
    #[serde(default)]
    description: String,
    iterations: Spanned<i64>,
    #[serde(default)]
    seed: Option<Spanned<i64>>,
    #[serde(default, rename = "trial-timeout")]
    trial_timeout: Option<Spanned<String>>,
    #[serde(default)]
    quick: Option<RawQuick>,
    workload: Spanned<Table>,
    #[serde(default)]
    network: Table,
    #[serde(default)]
    conditions: IndexMap<Spanned<String>, Table>,
    #[serde(default)]
    matrix: IndexMap<Spanned<String>, Spanned<Vec<Value>>>,
    arms: Spanned<IndexMap<Spanned<String>, Table>>,
    #[serde(default)]
    compare: Vec<RawCompare>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct RawQuick {
    #[serde(default)]
    iterations: Option<Spanned<i64>>,
    #[serde(default)]
    sizes: Option<Spanned<Vec<Value>>>,
    /// `[quick.workload]`: workload keys that replace the plan's
    #[serde(default)]
    workload: Option<Table>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCompare {
    a: Spanned<String>,
    b: Spanned<String>,
}

struct Ctx<'a> {
    file: &'a str,
    text: &'a str,
}

impl Ctx<'_> {
    fn err(&self, at: std::ops::Range<usize>, message: impl Into<String>) -> PlanError {
        let (line, column) = line_col(self.text, at.start);
        PlanError {
            file: self.file.to_string(),
            line,
            column,
            message: message.into(),
        }
    }
}

fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let column = before.len() - before.rfind('\n').map_or(0, |i| i + 1) + 1;
    (line, column)
}

/// A TOML scalar as the string the key parsers take (`1400` and `"1400"` alike).
fn scalar(ctx: &Ctx, v: &Value) -> Result<String, PlanError> {
    match v.get_ref() {
        toml::Value::String(s) => Ok(s.clone()),
        toml::Value::Integer(i) => Ok(i.to_string()),
        toml::Value::Float(f) => Ok(f.to_string()),
        toml::Value::Boolean(b) => Ok(b.to_string()),
        other => Err(ctx.err(
            v.span(),
            format!(
                "expected a string, number or boolean, found a {}",
                other.type_str()
            ),
        )),
    }
}

fn parse_size(ctx: &Ctx, v: &Value) -> Result<u64, PlanError> {
    // a bare TOML integer is a number of bytes
    let n = match v.get_ref() {
        toml::Value::Integer(i) => u64::try_from(*i).unwrap_or(0),
        _ => units::parse_bytes(&scalar(ctx, v)?)
            .map_err(|e| ctx.err(v.span(), format!("size: {e}")))?,
    };
    if n == 0 || n > 10_000_000_000 {
        return Err(ctx.err(v.span(), "size: allowed: 1 byte to 10 GB"));
    }
    Ok(n)
}

fn is_link_key(k: &str) -> bool {
    let bare = k
        .strip_prefix("up-")
        .or_else(|| k.strip_prefix("down-"))
        .unwrap_or(k);
    KEYS.iter().any(|key| key.name == bare)
}

fn link_keys_allowed() -> String {
    let names: Vec<_> = KEYS.iter().map(|k| k.name).collect();
    format!(
        "allowed: {} (each also as up-KEY or down-KEY)",
        names.join(", ")
    )
}

/// Link keys of a table, checked one by one; spans kept for later errors.
fn link_table(
    ctx: &Ctx,
    t: &Table,
) -> Result<Vec<(String, String, std::ops::Range<usize>)>, PlanError> {
    let mut out = Vec::new();
    for (k, v) in t {
        if !is_link_key(k.get_ref()) {
            return Err(ctx.err(
                k.span(),
                format!(
                    "unknown link key {:?}; {}",
                    k.get_ref(),
                    link_keys_allowed()
                ),
            ));
        }
        out.push((k.get_ref().clone(), scalar(ctx, v)?, v.span()));
    }
    Ok(out)
}

/// Base keys overridden by a condition's own (same key replaces; others add).
fn merge(
    base: &[(String, String, std::ops::Range<usize>)],
    over: &[(String, String, std::ops::Range<usize>)],
) -> Vec<(String, String, std::ops::Range<usize>)> {
    let mut out: Vec<_> = base
        .iter()
        .filter(|(k, _, _)| !over.iter().any(|(o, _, _)| o == k))
        .cloned()
        .collect();
    out.extend(over.iter().cloned());
    out
}

fn resolve_condition(
    ctx: &Ctx,
    name: String,
    keys: Vec<(String, String, std::ops::Range<usize>)>,
    at: std::ops::Range<usize>,
) -> Result<Condition, PlanError> {
    let pairs: Vec<(&str, &str)> = keys
        .iter()
        .map(|(k, v, _)| (k.as_str(), v.as_str()))
        .collect();
    let load = |p: &str| std::fs::read_to_string(p);
    let link = LinkConfig::from_keys(0, &pairs, &load).map_err(|e: ConfigError| {
        // point at the offending value when it is one of the keys, else at the condition
        let span = keys
            .iter()
            .rev()
            .find(|(k, _, _)| *k == e.key)
            .map(|(_, _, s)| s.clone())
            .unwrap_or(at);
        ctx.err(span, format!("condition {name:?}: {e}"))
    })?;
    Ok(Condition {
        name,
        keys: keys.into_iter().map(|(k, v, _)| (k, v)).collect(),
        link,
    })
}

fn parse_arm(ctx: &Ctx, name: &Spanned<String>, t: &Table) -> Result<Arm, PlanError> {
    let arm = name.get_ref();
    let http_v = t
        .iter()
        .find(|(k, _)| k.get_ref() == "http")
        .map(|(_, v)| v)
        .ok_or_else(|| {
            ctx.err(
                name.span(),
                format!("arm {arm:?} needs http = \"1.1\", \"2\", \"3\" or \"coded\""),
            )
        })?;
    let http = match scalar(ctx, http_v)?.as_str() {
        "1.1" | "1" => HttpVersion::Http11,
        "2" => HttpVersion::Http2,
        "3" => HttpVersion::Http3,
        "coded" => HttpVersion::Coded,
        other => {
            return Err(ctx.err(
                http_v.span(),
                format!(
                    "arm {arm:?}: http = {other:?}; allowed: \"1.1\", \"2\", \"3\" or \"coded\""
                ),
            ));
        }
    };
    let is_quic = http == HttpVersion::Http3;
    let is_coded = http == HttpVersion::Coded;
    let mut label = None;
    let mut given = Vec::new();
    for (k, v) in t {
        let key = k.get_ref().as_str();
        match key {
            "http" => continue,
            "label" => {
                label = Some(scalar(ctx, v)?);
                continue;
            }
            _ => {}
        }
        let Some(knob) = KNOBS.iter().find(|kn| kn.key == key) else {
            let names: Vec<_> = ["http", "label"]
                .into_iter()
                .chain(KNOBS.iter().map(|k| k.key))
                .collect();
            return Err(ctx.err(
                k.span(),
                format!(
                    "arm {arm:?}: unknown key {key:?}; allowed: {}",
                    names.join(", ")
                ),
            ));
        };
        let wrong = match knob.applies {
            Applies::Tcp if is_quic || is_coded => Some("HTTP/1.1 and HTTP/2 (TCP)"),
            Applies::Quic if !is_quic => Some("HTTP/3 (QUIC)"),
            // the coded transport has no session resumption and no 0-RTT
            Applies::Any if is_coded && key == "resume" => {
                Some("HTTP/1.1, HTTP/2 and HTTP/3 (the coded transport has no resumption)")
            }
            _ => None,
        };
        if let Some(only) = wrong {
            return Err(ctx.err(
                k.span(),
                format!("arm {arm:?}: {key} applies to {only} arms only"),
            ));
        }
        let raw = scalar(ctx, v)?;
        let value = (knob.check)(&raw)
            .map_err(|why| ctx.err(v.span(), format!("{key} = {raw:?}: {why}")))?;
        given.push((knob, value, v.span()));
    }
    // table order, so that equal arms resolve (and hash) equally however they are written
    given.sort_by_key(|(knob, _, _)| KNOBS.iter().position(|k| k.key == knob.key));
    let knobs: Vec<(String, String)> = given
        .iter()
        .map(|(k, v, _)| (k.key.to_string(), v.clone()))
        .collect();
    let mut caveats = Vec::new();
    let mut arm_out = Arm {
        name: arm.clone(),
        label: String::new(),
        http,
        knobs,
        caveats: Vec::new(),
    };
    if is_quic {
        // combinations (e.g. GSO with a jumbo payload) are checked by the stack itself
        let mut o = QuicOptions::default();
        if let Some(c) = arm_out.knob("quic-cc") {
            o.congestion = c.parse().unwrap_or_default();
        }
        if let Some(v) = arm_out.knob("quic-max-udp-payload") {
            o.max_udp_payload = v.parse().unwrap_or(o.max_udp_payload);
        }
        if let Some(v) = arm_out.knob("quic-initial-mtu") {
            o.initial_mtu = v.parse().unwrap_or(o.initial_mtu);
        }
        if let Some(v) = arm_out.knob("quic-gso") {
            o.gso = v == "on";
        }
        if let Err(e) = o.validate() {
            return Err(ctx.err(name.span(), format!("arm {arm:?}: {e}")));
        }
        if o.congestion.experimental() {
            caveats.push("quinn's BBR is experimental (BBRv1, pacing rate not applied)".into());
        }
    }
    let cc = arm_out
        .knob(if is_quic { "quic-cc" } else { "tcp-cc" })
        .map(str::to_string);
    arm_out.label = label.unwrap_or_else(|| {
        let stack = match http {
            HttpVersion::Http11 => "HTTP/1.1 over TCP+TLS 1.3",
            HttpVersion::Http2 => "HTTP/2 over TCP+TLS 1.3",
            HttpVersion::Http3 => "HTTP/3 over QUIC (quinn)",
            HttpVersion::Coded => return CODED_LABEL.to_string(),
        };
        match &cc {
            Some(cc) => format!("{stack}, {cc}"),
            None if is_quic => format!("{stack}, cubic"),
            None => format!("{stack}, kernel default congestion control"),
        }
    });
    arm_out.caveats = caveats;
    Ok(arm_out)
}

/// The default label of a `coded` arm.
pub const CODED_LABEL: &str = "network-coded transport (RaptorQ, goodput-following rate)";

/// Keys of `[workload]` per kind (besides `kind`).
const WORKLOAD_KEYS: &[(&str, &[&str])] = &[
    ("single-object", &["sizes"]),
    ("repeat", &["sizes", "requests"]),
    ("segments", &["segments", "segment-min", "segment-max"]),
];

fn workload_int(
    ctx: &Ctx,
    at: std::ops::Range<usize>,
    t: &Table,
    key: &str,
    range: (i64, i64),
) -> Result<u32, PlanError> {
    let Some((_, v)) = t.get_key_value(key) else {
        return Err(ctx.err(at, format!("[workload] needs {key}")));
    };
    match v.get_ref() {
        toml::Value::Integer(n) if (range.0..=range.1).contains(n) => Ok(*n as u32),
        _ => Err(ctx.err(
            v.span(),
            format!(
                "{key}: allowed: a whole number from {} to {}",
                range.0, range.1
            ),
        )),
    }
}

/// `[workload]` (with the profile's overrides applied): the kind and the trial sizes.
fn parse_workload(
    ctx: &Ctx,
    at: std::ops::Range<usize>,
    t: &Table,
) -> Result<(Workload, Vec<u64>), PlanError> {
    let kinds = || {
        WORKLOAD_KEYS
            .iter()
            .map(|(k, _)| format!("{k:?}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let Some((_, kind_v)) = t.get_key_value("kind") else {
        return Err(ctx.err(at, format!("[workload] needs kind: allowed: {}", kinds())));
    };
    let kind = scalar(ctx, kind_v)?;
    let Some((_, keys)) = WORKLOAD_KEYS.iter().find(|(k, _)| *k == kind) else {
        return Err(ctx.err(
            kind_v.span(),
            format!("workload kind {kind:?}: allowed: {}", kinds()),
        ));
    };
    for k in t.keys() {
        if k.get_ref() != "kind" && !keys.contains(&k.get_ref().as_str()) {
            return Err(ctx.err(
                k.span(),
                format!(
                    "[workload] key {:?} does not apply to kind {kind:?}; its keys: {}",
                    k.get_ref(),
                    keys.join(", ")
                ),
            ));
        }
    }
    let sizes = |t: &Table| -> Result<Vec<u64>, PlanError> {
        let Some((_, v)) = t.get_key_value("sizes") else {
            return Err(ctx.err(
                at.clone(),
                "[workload] needs sizes, e.g. [\"100kb\", \"1mb\"]",
            ));
        };
        let toml::Value::Array(items) = v.get_ref() else {
            return Err(ctx.err(v.span(), "sizes: allowed: a list of sizes"));
        };
        if items.is_empty() {
            return Err(ctx.err(v.span(), "sizes: give at least one size"));
        }
        let mut out = Vec::new();
        for item in items {
            // the items of a replaced list carry the list's place
            let item = Spanned::new(v.span(), item.clone());
            let n = parse_size(ctx, &item)?;
            if out.contains(&n) {
                return Err(ctx.err(v.span(), format!("size {n} bytes is listed twice")));
            }
            out.push(n);
        }
        Ok(out)
    };
    Ok(match kind.as_str() {
        "single-object" => (Workload::SingleObject, sizes(t)?),
        "repeat" => (
            Workload::Repeat {
                requests: workload_int(ctx, at.clone(), t, "requests", (1, 1000))?,
            },
            sizes(t)?,
        ),
        "segments" => {
            let count = workload_int(ctx, at.clone(), t, "segments", (1, 1000))?;
            let size = |key: &str| -> Result<(u64, std::ops::Range<usize>), PlanError> {
                match t.get_key_value(key) {
                    Some((_, v)) => Ok((parse_size(ctx, v)?, v.span())),
                    None => Err(ctx.err(at.clone(), format!("[workload] needs {key}"))),
                }
            };
            let (min, _) = size("segment-min")?;
            let (max, max_at) = size("segment-max")?;
            if max < min {
                return Err(ctx.err(
                    max_at,
                    format!("segment-max ({max} bytes) is below segment-min ({min} bytes)"),
                ));
            }
            (
                Workload::Segments {
                    count,
                    min_bytes: min,
                    max_bytes: max,
                },
                vec![min + (max - min) / 2],
            )
        }
        _ => unreachable!("kinds are listed in WORKLOAD_KEYS"),
    })
}

/// Parses and validates a plan. `file` names it in errors.
pub fn parse(text: &str, file: &str, profile: Profile) -> Result<Plan, PlanError> {
    let ctx = Ctx { file, text };
    let raw: RawPlan = toml::from_str(text).map_err(|e| {
        let span = e.span().unwrap_or(0..0);
        let (line, column) = if e.span().is_some() {
            line_col(text, span.start)
        } else {
            (0, 0)
        };
        PlanError {
            file: file.to_string(),
            line,
            column,
            message: e.message().trim().to_string(),
        }
    })?;
    let name = raw.name.get_ref().trim().to_string();
    if name.is_empty()
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
    {
        return Err(ctx.err(
            raw.name.span(),
            "name: allowed: letters, digits, '-', '_' and '.' (it names the results directory)",
        ));
    }
    let mut iterations = raw.iterations.clone();
    let mut workload_table = raw.workload.get_ref().clone();
    if let (Profile::Quick, Some(q)) = (profile, &raw.quick) {
        if let Some(i) = &q.iterations {
            iterations = i.clone();
        }
        if let Some(s) = &q.sizes {
            let vals = s.get_ref().iter().map(|v| v.get_ref().clone()).collect();
            workload_table.insert(
                Spanned::new(s.span(), "sizes".to_string()),
                Spanned::new(s.span(), toml::Value::Array(vals)),
            );
        }
        if let Some(w) = &q.workload {
            for (k, v) in w {
                workload_table.insert(k.clone(), v.clone());
            }
        }
    }
    let iterations = match *iterations.get_ref() {
        n @ 1..=100_000 => n as u32,
        n => {
            return Err(ctx.err(
                iterations.span(),
                format!("iterations = {n}: allowed: 1 to 100000"),
            ));
        }
    };
    let seed = match &raw.seed {
        Some(s) if *s.get_ref() < 0 => {
            return Err(ctx.err(s.span(), "seed: allowed: a number >= 0"));
        }
        Some(s) => *s.get_ref() as u64,
        None => 1,
    };
    let trial_timeout = match &raw.trial_timeout {
        Some(t) => Some(
            units::parse_duration(t.get_ref())
                .map_err(|e| ctx.err(t.span(), format!("trial-timeout: {e}")))?,
        ),
        None => None,
    };
    let (workload, sizes) = parse_workload(&ctx, raw.workload.span(), &workload_table)?;

    let base = link_table(&ctx, &raw.network)?;
    let mut conditions = Vec::new();
    for (cname, t) in &raw.conditions {
        let own = link_table(&ctx, t)?;
        let c = resolve_condition(
            &ctx,
            cname.get_ref().clone(),
            merge(&base, &own),
            cname.span(),
        )?;
        conditions.push(c);
    }
    if !raw.matrix.is_empty() {
        let mut axes = Vec::new();
        for (k, vals) in &raw.matrix {
            if !is_link_key(k.get_ref()) {
                return Err(ctx.err(
                    k.span(),
                    format!(
                        "matrix: unknown link key {:?}; {}",
                        k.get_ref(),
                        link_keys_allowed()
                    ),
                ));
            }
            if vals.get_ref().is_empty() {
                return Err(ctx.err(vals.span(), "matrix: give at least one value"));
            }
            let vs = vals
                .get_ref()
                .iter()
                .map(|v| Ok((scalar(&ctx, v)?, v.span())))
                .collect::<Result<Vec<_>, PlanError>>()?;
            axes.push((k.get_ref().clone(), vs));
        }
        // every combination, the first key varying slowest
        let mut combos: Vec<Vec<(String, String, std::ops::Range<usize>)>> = vec![Vec::new()];
        for (k, vs) in &axes {
            combos = combos
                .into_iter()
                .flat_map(|c| {
                    vs.iter().map(move |(v, s)| {
                        let mut c = c.clone();
                        c.push((k.clone(), v.clone(), s.clone()));
                        c
                    })
                })
                .collect();
        }
        for combo in combos {
            let cname = combo
                .iter()
                .map(|(k, v, _)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(" ");
            let at = combo[0].2.clone();
            conditions.push(resolve_condition(&ctx, cname, merge(&base, &combo), at)?);
        }
    }
    if conditions.is_empty() {
        // no conditions: [network] alone is the one condition
        let at = 0..0;
        conditions.push(resolve_condition(&ctx, "network".into(), base, at)?);
    }
    for (i, c) in conditions.iter().enumerate() {
        if conditions[..i].iter().any(|o| o.name == c.name) {
            return Err(PlanError {
                file: file.into(),
                line: 0,
                column: 0,
                message: format!("condition {:?} is defined twice", c.name),
            });
        }
    }

    if raw.arms.get_ref().is_empty() {
        return Err(ctx.err(raw.arms.span(), "arms: give at least one arm"));
    }
    let mut arms = Vec::new();
    for (aname, t) in raw.arms.get_ref() {
        arms.push(parse_arm(&ctx, aname, t)?);
    }
    let mut comparisons = Vec::new();
    for c in &raw.compare {
        for side in [&c.a, &c.b] {
            if !arms.iter().any(|a| a.name == *side.get_ref()) {
                let names: Vec<_> = arms.iter().map(|a| a.name.as_str()).collect();
                return Err(ctx.err(
                    side.span(),
                    format!(
                        "compare: unknown arm {:?}; the arms are: {}",
                        side.get_ref(),
                        names.join(", ")
                    ),
                ));
            }
        }
        if c.a.get_ref() == c.b.get_ref() {
            return Err(ctx.err(c.b.span(), "compare: a and b must be different arms"));
        }
        comparisons.push((c.a.get_ref().clone(), c.b.get_ref().clone()));
    }
    Ok(Plan {
        name,
        description: raw.description.trim().to_string(),
        source: file.to_string(),
        profile,
        iterations,
        seed,
        workload,
        sizes,
        conditions,
        arms,
        comparisons,
        trial_timeout,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
name = "t"
iterations = 4
seed = 9
[quick]
iterations = 2
[workload]
kind = "single-object"
sizes = ["100kb", 1000000]
[network]
rate = "10mbit"
delay = "10ms"
[conditions.base]
[conditions."loss 1%"]
loss = "1%"
[conditions.slow]
delay = "35ms"
[matrix]
up-loss = ["0%", "2%"]
mtu = [1400]
[arms.h2]
http = "2"
tcp-cc = "cubic"
[arms.h3]
quic-cc = "bbr"
http = "3"
[[compare]]
a = "h2"
b = "h3"
"#;

    #[test]
    fn a_good_plan_resolves_conditions_arms_and_profiles() {
        let p = parse(GOOD, "t.toml", Profile::Full).unwrap();
        assert_eq!((p.iterations, p.seed), (4, 9));
        assert_eq!(p.sizes, vec![100_000, 1_000_000]);
        let names: Vec<_> = p.conditions.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "base",
                "loss 1%",
                "slow",
                "up-loss=0% mtu=1400",
                "up-loss=2% mtu=1400"
            ]
        );
        // [network] applies everywhere; a condition's own key replaces it
        assert_eq!(p.conditions[1].link.down.delay, Duration::from_millis(10));
        assert_eq!(p.conditions[1].link.up.loss, 0.01);
        assert_eq!(p.conditions[2].link.min_rtt(), Duration::from_millis(70));
        assert_eq!(p.conditions[4].link.up.loss, 0.02);
        assert_eq!(p.conditions[4].link.down.loss, 0.0);
        assert_eq!(p.conditions[4].link.up.mtu, Some(1400));
        assert_eq!(p.conditions[0].rate_bps(), Some(10_000_000));
        assert_eq!(p.arms[0].server_args(), ["--tcp-cc", "cubic"]);
        assert_eq!(p.arms[1].client_args(), ["--http", "3", "--quic-cc", "bbr"]);
        assert_eq!(p.arms[1].caveats.len(), 1, "experimental BBR is labelled");
        assert_eq!(p.comparisons, [("h2".to_string(), "h3".to_string())]);
        let q = parse(GOOD, "t.toml", Profile::Quick).unwrap();
        assert_eq!(q.iterations, 2);
    }

    #[test]
    fn workload_kinds_take_their_own_keys_and_quick_overrides() {
        let repeat = GOOD.replace(
            "kind = \"single-object\"",
            "kind = \"repeat\"\nrequests = 25",
        );
        let p = parse(&repeat, "t.toml", Profile::Full).unwrap();
        assert_eq!(p.workload, Workload::Repeat { requests: 25 });
        assert_eq!(p.sizes, vec![100_000, 1_000_000]);
        let quick = repeat.replace("[quick]", "[quick.workload]\nrequests = 5\n[quick]");
        let q = parse(&quick, "t.toml", Profile::Quick).unwrap();
        assert_eq!(
            (q.workload, q.iterations),
            (Workload::Repeat { requests: 5 }, 2)
        );
        let f = parse(&quick, "t.toml", Profile::Full).unwrap();
        assert_eq!(f.workload, Workload::Repeat { requests: 25 });

        let seg = GOOD.replace(
            "kind = \"single-object\"\nsizes = [\"100kb\", 1000000]",
            "kind = \"segments\"\nsegments = 15\nsegment-min = \"3.6MB\"\nsegment-max = \"5MB\"",
        );
        let p = parse(&seg, "t.toml", Profile::Full).unwrap();
        assert_eq!(
            p.workload,
            Workload::Segments {
                count: 15,
                min_bytes: 3_600_000,
                max_bytes: 5_000_000
            }
        );
        assert_eq!(p.sizes, vec![4_300_000]);

        // a key of another kind, a missing key, an unknown kind, an inverted range
        let e = parse(
            &seg.replace("segments = 15", "sizes = [1]"),
            "t.toml",
            Profile::Full,
        )
        .unwrap_err();
        assert!(
            e.message.contains("\"sizes\"") && e.message.contains("segment-min"),
            "{e}"
        );
        assert_eq!(
            e.line,
            line_of("sizes = [1]", &seg.replace("segments = 15", "sizes = [1]"))
        );
        let e = parse(
            &repeat.replace("requests = 25\n", ""),
            "t.toml",
            Profile::Full,
        )
        .unwrap_err();
        assert!(e.message.contains("needs requests"), "{e}");
        let e = parse(
            &repeat.replace("requests = 25", "requests = 0"),
            "t.toml",
            Profile::Full,
        )
        .unwrap_err();
        assert!(e.message.contains("1 to 1000"), "{e}");
        let e = broken("kind = \"single-object\"", "kind = \"pages\"");
        assert!(e.message.contains("\"segments\""), "{e}");
        let e = parse(&seg.replace("\"5MB\"", "\"1MB\""), "t.toml", Profile::Full).unwrap_err();
        assert!(e.message.contains("below segment-min"), "{e}");
    }

    /// Replaces `from` by `to` in the good plan and returns the error.
    fn broken(from: &str, to: &str) -> PlanError {
        assert!(GOOD.contains(from), "{from}");
        parse(&GOOD.replacen(from, to, 1), "t.toml", Profile::Full).unwrap_err()
    }

    fn line_of(needle: &str, text: &str) -> usize {
        text.lines().position(|l| l.contains(needle)).unwrap() + 1
    }

    #[test]
    fn errors_name_the_line_column_and_what_is_allowed() {
        let e = broken("loss = \"1%\"", "loss = \"1 percent\"");
        assert_eq!(e.line, line_of("loss = \"1%\"", GOOD));
        assert_eq!(e.column, 8, "{e}");
        assert!(e.message.contains("loss") && e.message.contains("%"), "{e}");

        let e = broken("tcp-cc = \"cubic\"", "tcp-cc = \"vegas\"");
        assert!(
            e.message.contains("cubic") && e.message.contains("bbr"),
            "{e}"
        );
        assert_eq!(e.line, line_of("tcp-cc", GOOD));

        let e = broken("b = \"h3\"", "b = \"h4\"");
        assert!(e.message.contains("unknown arm \"h4\""), "{e}");
        assert_eq!(e.line, line_of("b = \"h3\"", GOOD));

        let e = broken("seed = 9", "seed = 9\nsede = 3");
        assert!(e.message.contains("sede"), "{e}");
        assert_eq!(e.line, line_of("seed = 9", GOOD) + 1, "{e}");

        let e = broken("delay = \"35ms\"", "latency = \"35ms\"");
        assert!(
            e.message.contains("delay") && e.message.contains("latency"),
            "{e}"
        );

        let e = broken("quic-cc = \"bbr\"", "tcp-cc = \"bbr\"");
        assert!(e.message.contains("TCP"), "{e}");

        let e = broken("sizes = [\"100kb\", 1000000]", "sizes = [\"100kbit\"]");
        assert!(e.message.contains("size"), "{e}");

        let e = broken("iterations = 4", "iterations = 0");
        assert!(e.message.contains("1 to 100000"), "{e}");

        let e = broken("quic-cc = \"bbr\"", "quic-max-udp-payload = 8000");
        assert!(
            e.message.contains("6550") || e.message.contains("GSO"),
            "{e}"
        );

        // a queue without a rate is an impossible combination, caught with its place
        let e = broken("rate = \"10mbit\"", "queue = \"50ms\"");
        assert!(e.message.contains("queue"), "{e}");

        // the coded transport: its own label, no TCP or QUIC knobs, no resumption
        let coded = GOOD.replace("quic-cc = \"bbr\"\nhttp = \"3\"", "http = \"coded\"");
        let p = parse(&coded, "t.toml", Profile::Full).unwrap();
        assert_eq!(p.arms[1].client_args(), ["--http", "coded"]);
        assert_eq!(p.arms[1].label, CODED_LABEL);
        for (knob, only) in [
            ("tcp-cc = \"cubic\"", "TCP"),
            ("quic-cc = \"cubic\"", "QUIC"),
            ("resume = true", "no resumption"),
        ] {
            let e = parse(
                &coded.replace("http = \"coded\"", &format!("http = \"coded\"\n{knob}")),
                "t.toml",
                Profile::Full,
            )
            .unwrap_err();
            assert!(
                e.message.contains("arm \"h3\"") && e.message.contains(only),
                "{e}"
            );
            assert_eq!(e.line, line_of("http = \"coded\"", &coded) + 1, "{e}");
        }
        let e = broken("http = \"3\"", "http = \"4\"");
        assert!(e.message.contains("\"coded\""), "{e}");

        let e = broken("name = \"t\"", "name = \"a/b\"");
        assert_eq!(e.line, 2);
        // TOML syntax errors keep their place too
        let e = broken("iterations = 4", "iterations = = 4");
        assert_eq!(e.line, line_of("iterations = 4", GOOD), "{e}");
        assert!(
            e.to_string().starts_with(&format!("t.toml:{}:", e.line)),
            "{e}"
        );
    }
}
