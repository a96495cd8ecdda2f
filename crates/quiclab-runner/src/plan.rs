//! Campaign plans: TOML in, a validated [`Plan`] out, or an error that names the file, line,
//! column, the problem and what is allowed.
//!
//! ```toml
//! name = "example"
//! iterations = 20            # trials per (condition, size, arm)
//! seed = 1                   # base seed: iteration i uses a seed derived from (seed, i)
//! interleave = "baseline"    # optional: run this condition just before every other
//!                            # condition's trial (same arm, iteration and size)
//! [quick]                    # the --quick profile overrides these
//! iterations = 5             # ([quick.workload] overrides keys of [workload])
//! [workload]                 # kinds: "single-object" (one GET of each size on a new
//! kind = "single-object"     # connection), "repeat" (`requests` GETs of each size, each on a
//! sizes = ["100kb", "1mb"]   # new connection resuming the last session: 0-RTT over QUIC),
//!                            # "segments" (`segments` GETs on one connection, sizes drawn from
//!                            # `segment-min`..`segment-max` per iteration; `stream-rate` and
//!                            # `player-buffer` set the report's playback estimate), "telemetry"
//!                            # (`units-per-second` 8-byte units in flushes of `flush` units
//!                            # for `duration`; arms say `telemetry = MODE`, not `http`),
//!                            # "pages" (`pages` = built-in page names or manifest files, each
//!                            # loaded like a browser by `quiclab page`; see docs/pages.md)
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
use quiclab_stack::telemetry::{self, Mode};
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
    /// Index of the condition run just before every trial of each other condition (same arm,
    /// iteration and size), as a study that alternates impaired and normal runs does; that
    /// condition then has no trials of its own besides these.
    pub interleave: Option<usize>,
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
    /// `direct = true`: no emulator, the namespaces joined by a veth pair of this MTU (the
    /// link's `mtu`, or 1500); the link then emulates nothing.
    pub direct_mtu: Option<u32>,
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
    /// `quiclab telemetry` and the server's telemetry side take it too.
    telemetry: bool,
}

fn check_on_off(v: &str) -> Result<String, String> {
    quic::parse_on_off("value", v)
        .map(|b| if b { "on" } else { "off" }.to_string())
        .map_err(|_| "allowed: on or off".into())
}

fn check_scheduling(v: &str) -> Result<String, String> {
    match v {
        "round-robin" | "fifo" => Ok(v.to_string()),
        _ => Err("allowed: round-robin or fifo".into()),
    }
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
        telemetry: true,
        check: check_tcp_cc,
    },
    Knob {
        key: "quic-cc",
        applies: Applies::Quic,
        flag: Flag::Both("--quic-cc"),
        help: "QUIC congestion controller: newreno, cubic or bbr (quinn's BBR is experimental)",
        telemetry: true,
        check: check_quic_cc,
    },
    Knob {
        key: "quic-initial-rtt",
        applies: Applies::Quic,
        flag: Flag::Both("--quic-initial-rtt"),
        help: "RTT assumed before the first sample, e.g. 100ms (sets the first PTO)",
        telemetry: true,
        check: check_duration,
    },
    Knob {
        key: "quic-mtu-discovery",
        applies: Applies::Quic,
        flag: Flag::Both("--quic-mtu-discovery"),
        help: "path MTU discovery: on or off",
        telemetry: true,
        check: check_on_off,
    },
    Knob {
        key: "quic-initial-mtu",
        applies: Applies::Quic,
        flag: Flag::Both("--quic-initial-mtu"),
        help: "UDP payload at the start, bytes",
        telemetry: true,
        check: check_payload,
    },
    Knob {
        key: "quic-max-udp-payload",
        applies: Applies::Quic,
        flag: Flag::Both("--quic-max-udp-payload"),
        help: "largest UDP payload (upper bound of MTU discovery), bytes",
        telemetry: true,
        check: check_payload,
    },
    Knob {
        key: "quic-gso",
        applies: Applies::Quic,
        flag: Flag::Both("--quic-gso"),
        help: "generic segmentation offload: on or off",
        telemetry: true,
        check: check_on_off,
    },
    Knob {
        key: "groups",
        applies: Applies::Any,
        flag: Flag::Client("--groups"),
        help: "client key-exchange groups in order; a key share for the first only",
        telemetry: true,
        check: check_groups,
    },
    Knob {
        key: "server-groups",
        applies: Applies::Any,
        flag: Flag::Server("--groups"),
        help: "groups the server accepts, in order of preference",
        telemetry: true,
        check: check_groups,
    },
    Knob {
        key: "dynamic-records",
        applies: Applies::Tcp,
        flag: Flag::Server("--dynamic-records"),
        help: "HTTP/2 responses start with a small frame: on or off",
        telemetry: false,
        check: check_on_off,
    },
    Knob {
        key: "tls-max-record",
        applies: Applies::Tcp,
        flag: Flag::Server("--tls-max-record"),
        help: "largest TLS record payload over TCP, bytes",
        telemetry: false,
        check: check_record,
    },
    Knob {
        key: "quic-scheduling",
        applies: Applies::Quic,
        flag: Flag::Server("--quic-scheduling"),
        help: "how the server shares its sending side between streams: round-robin or fifo",
        telemetry: false,
        check: check_scheduling,
    },
    Knob {
        key: "quic-priorities",
        applies: Applies::Quic,
        flag: Flag::Server("--quic-priorities"),
        help: "the server honours RFC 9218 priority headers: on or off",
        telemetry: false,
        check: check_on_off,
    },
    Knob {
        key: "resume",
        applies: Applies::Any,
        flag: Flag::ClientSwitch("--resume"),
        help: "resume TLS sessions (and 0-RTT over QUIC) across connections: true or false",
        telemetry: false,
        check: check_bool,
    },
    Knob {
        key: "tfo",
        applies: Applies::Tcp,
        flag: Flag::BothSwitch("--tfo"),
        help: "TCP Fast Open: true or false",
        telemetry: false,
        check: check_bool,
    },
];

/// A stack with its knobs.
#[derive(Debug, Clone)]
pub struct Arm {
    pub name: String,
    pub label: String,
    /// The HTTP version; for a telemetry arm (no HTTP spoken), the one whose transport its mode
    /// uses (2 for TCP, 3 for QUIC).
    pub http: HttpVersion,
    /// How a telemetry arm's flushes travel (telemetry plans only).
    pub telemetry: Option<Mode>,
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

    /// True when the arm runs over QUIC.
    pub fn is_quic(&self) -> bool {
        self.http == HttpVersion::Http3
    }

    /// Arguments of the client (`quiclab get`, or `quiclab telemetry` for a telemetry arm) for
    /// this arm, without URLs and output options.
    pub fn client_args(&self) -> Vec<String> {
        if let Some(mode) = self.telemetry {
            let mut out = vec!["--mode".to_string(), mode.name().to_string()];
            out.extend(self.flags(false));
            return out;
        }
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
    let mut s = format!(
        "  http  HTTP version: 1.1, 2 (over TCP and TLS 1.3), 3 (over QUIC), or coded (the network-coded transport)\n  telemetry  in telemetry plans instead of http, how flushes travel: {}\n  label  a description for the report\n",
        Mode::allowed()
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
    interleave: Option<Spanned<String>>,
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
    if k == "direct" {
        return true;
    }
    let bare = k
        .strip_prefix("up-")
        .or_else(|| k.strip_prefix("down-"))
        .unwrap_or(k);
    KEYS.iter().any(|key| key.name == bare)
}

fn link_keys_allowed() -> String {
    let names: Vec<_> = KEYS.iter().map(|k| k.name).collect();
    format!(
        "allowed: {} (each also as up-KEY or down-KEY), and direct = true (a veth pair of the \
         mtu given, no emulator)",
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
    let direct = match keys.iter().rev().find(|(k, _, _)| k == "direct") {
        None => false,
        Some((_, v, span)) => match v.as_str() {
            "true" => true,
            "false" => false,
            _ => {
                return Err(ctx.err(
                    span.clone(),
                    format!("condition {name:?}: direct = {v:?}: allowed: true or false"),
                ));
            }
        },
    };
    if direct && let Some((k, _, span)) = keys.iter().find(|(k, _, _)| k != "direct" && k != "mtu")
    {
        return Err(ctx.err(
            span.clone(),
            format!(
                "condition {name:?}: {k} does not apply to a direct condition (a veth pair, no \
                 emulator); allowed with direct = true: mtu"
            ),
        ));
    }
    let pairs: Vec<(&str, &str)> = keys
        .iter()
        .filter(|(k, _, _)| k != "direct")
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
    let direct_mtu = direct.then(|| link.up.mtu.unwrap_or(1500));
    Ok(Condition {
        name,
        keys: keys.into_iter().map(|(k, v, _)| (k, v)).collect(),
        link,
        direct_mtu,
    })
}

fn parse_arm(
    ctx: &Ctx,
    name: &Spanned<String>,
    t: &Table,
    telemetry_plan: bool,
) -> Result<Arm, PlanError> {
    let arm = name.get_ref();
    let get = |key: &str| t.iter().find(|(k, _)| k.get_ref() == key);
    let modes = || Mode::ALL.map(|m| format!("{:?}", m.name())).join(", ");
    let (http, mode) = if telemetry_plan {
        if let Some((k, _)) = get("http") {
            return Err(ctx.err(
                k.span(),
                format!(
                    "arm {arm:?}: http does not apply to a telemetry plan (no HTTP is spoken); \
                     say how flushes travel instead: telemetry = {}",
                    modes()
                ),
            ));
        }
        let (_, v) = get("telemetry").ok_or_else(|| {
            ctx.err(
                name.span(),
                format!("arm {arm:?} needs telemetry = {}", modes()),
            )
        })?;
        let raw = scalar(ctx, v)?;
        let mode: Mode = raw.parse().map_err(|_| {
            ctx.err(
                v.span(),
                format!("arm {arm:?}: telemetry = {raw:?}; allowed: {}", modes()),
            )
        })?;
        let http = if mode.is_quic() {
            HttpVersion::Http3
        } else {
            HttpVersion::Http2
        };
        (http, Some(mode))
    } else {
        if let Some((k, _)) = get("telemetry") {
            return Err(ctx.err(
                k.span(),
                format!(
                    "arm {arm:?}: telemetry applies to plans whose [workload] kind is \"telemetry\""
                ),
            ));
        }
        let (_, http_v) = get("http").ok_or_else(|| {
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
        (http, None)
    };
    let is_quic = http == HttpVersion::Http3;
    let is_coded = http == HttpVersion::Coded;
    let mut label = None;
    let mut given = Vec::new();
    for (k, v) in t {
        let key = k.get_ref().as_str();
        match key {
            "http" | "telemetry" => continue,
            "label" => {
                label = Some(scalar(ctx, v)?);
                continue;
            }
            _ => {}
        }
        let Some(knob) = KNOBS
            .iter()
            .find(|kn| kn.key == key && (kn.telemetry || !telemetry_plan))
        else {
            let names: Vec<_> = [if telemetry_plan { "telemetry" } else { "http" }, "label"]
                .into_iter()
                .chain(
                    KNOBS
                        .iter()
                        .filter(|k| k.telemetry || !telemetry_plan)
                        .map(|k| k.key),
                )
                .collect();
            let what = if KNOBS.iter().any(|kn| kn.key == key) {
                format!("{key} does not apply to telemetry arms")
            } else {
                format!("unknown key {key:?}")
            };
            return Err(ctx.err(
                k.span(),
                format!("arm {arm:?}: {what}; allowed: {}", names.join(", ")),
            ));
        };
        let wrong = match (knob.applies, mode) {
            (Applies::Tcp, Some(_)) if is_quic => Some("tcp"),
            (Applies::Quic, Some(_)) if !is_quic => {
                Some("quic-stream, quic-streams and quic-datagrams")
            }
            (Applies::Tcp, None) if is_quic || is_coded => Some("HTTP/1.1 and HTTP/2 (TCP)"),
            (Applies::Quic, None) if !is_quic => Some("HTTP/3 (QUIC)"),
            // the coded transport has no session resumption and no 0-RTT
            (Applies::Any, None) if is_coded && key == "resume" => {
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
        telemetry: mode,
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
        let stack = match (mode, http) {
            (Some(Mode::Tcp), _) => "telemetry over TCP+TLS 1.3 (one ordered stream)",
            (Some(Mode::QuicStream), _) => "telemetry over one QUIC stream (quinn)",
            (Some(Mode::QuicStreams), _) => "telemetry over a QUIC stream per flush (quinn)",
            (Some(Mode::QuicDatagrams), _) => "telemetry in QUIC datagrams, one per flush (quinn)",
            (None, HttpVersion::Http11) => "HTTP/1.1 over TCP+TLS 1.3",
            (None, HttpVersion::Http2) => "HTTP/2 over TCP+TLS 1.3",
            (None, HttpVersion::Http3) => "HTTP/3 over QUIC (quinn)",
            (None, HttpVersion::Coded) => return CODED_LABEL.to_string(),
        };
        match &cc {
            Some(cc) => format!("{stack}, {cc}"),
            // the telemetry client sets cubic when its arm does not say
            None if is_quic || mode.is_some() => format!("{stack}, cubic"),
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
    (
        "segments",
        &[
            "segments",
            "segment-min",
            "segment-max",
            "stream-rate",
            "player-buffer",
        ],
    ),
    ("telemetry", &["units-per-second", "flush", "duration"]),
    ("bulk", &["connections", "duration"]),
    ("pages", &["pages"]),
];

/// The most parallel connections a bulk trial may open (one client process each).
pub const MAX_BULK_CONNECTIONS: i64 = 256;

/// `duration` of `[workload]`: required, at most an hour.
fn workload_duration(
    ctx: &Ctx,
    at: std::ops::Range<usize>,
    t: &Table,
) -> Result<(Duration, std::ops::Range<usize>), PlanError> {
    let Some((_, v)) = t.get_key_value("duration") else {
        return Err(ctx.err(at, "[workload] needs duration, e.g. \"10s\""));
    };
    let d = units::parse_duration(&scalar(ctx, v)?)
        .map_err(|e| ctx.err(v.span(), format!("duration: {e}")))?;
    if d > Duration::from_secs(3600) {
        return Err(ctx.err(v.span(), "duration: allowed: at most 1 hour"));
    }
    Ok((d, v.span()))
}

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
            let stream_rate_bps = match t.get_key_value("stream-rate") {
                Some((_, v)) => {
                    let raw = scalar(ctx, v)?;
                    match raw.parse::<units::Rate>() {
                        Ok(r) if r.bps() >= 1000 => r.bps(),
                        Ok(_) => {
                            return Err(ctx.err(
                                v.span(),
                                format!("stream-rate = {raw:?}: allowed: 1kbit or more"),
                            ));
                        }
                        Err(e) => return Err(ctx.err(v.span(), format!("stream-rate: {e}"))),
                    }
                }
                None => quiclab_report::model::DEFAULT_STREAM_RATE_BPS,
            };
            let player_buffer_ms = match t.get_key_value("player-buffer") {
                Some((_, v)) => {
                    let raw = scalar(ctx, v)?;
                    match units::parse_duration(&raw) {
                        Ok(d) if d <= Duration::from_secs(600) => d.as_millis() as u64,
                        Ok(_) => {
                            return Err(ctx.err(
                                v.span(),
                                format!("player-buffer = {raw:?}: allowed: 0 to 10min"),
                            ));
                        }
                        Err(e) => return Err(ctx.err(v.span(), format!("player-buffer: {e}"))),
                    }
                }
                None => quiclab_report::model::DEFAULT_PLAYER_BUFFER_MS,
            };
            (
                Workload::Segments {
                    count,
                    min_bytes: min,
                    max_bytes: max,
                    stream_rate_bps,
                    player_buffer_ms,
                },
                vec![min + (max - min) / 2],
            )
        }
        "telemetry" => {
            let units_per_second = workload_int(
                ctx,
                at.clone(),
                t,
                "units-per-second",
                (1, i64::from(telemetry::MAX_UNITS_PER_SECOND)),
            )?;
            let flush_units = workload_int(
                ctx,
                at.clone(),
                t,
                "flush",
                (1, i64::from(telemetry::MAX_FLUSH_UNITS)),
            )?;
            let (d, d_at) = workload_duration(ctx, at, t)?;
            let units = (d.as_secs_f64() * f64::from(units_per_second)).round() as u64;
            if units == 0 {
                return Err(ctx.err(d_at, "duration: allowed: from one unit interval to 1 hour"));
            }
            (
                Workload::Telemetry {
                    units_per_second,
                    flush_units,
                    duration_ms: d.as_millis() as u64,
                },
                // the trial's bytes: every unit's
                vec![units * telemetry::UNIT_BYTES as u64],
            )
        }
        "bulk" => {
            let (d, d_at) = workload_duration(ctx, at.clone(), t)?;
            if d < Duration::from_secs(1) {
                return Err(ctx.err(d_at, "duration: allowed: from 1s to 1 hour"));
            }
            let Some((_, v)) = t.get_key_value("connections") else {
                return Err(ctx.err(at, "[workload] needs connections, e.g. [1, 8, 64]"));
            };
            let toml::Value::Array(items) = v.get_ref() else {
                return Err(ctx.err(
                    v.span(),
                    "connections: allowed: a list of connection counts, e.g. [1, 8, 64]",
                ));
            };
            let mut counts = Vec::new();
            for item in items {
                match item {
                    toml::Value::Integer(n) if (1..=MAX_BULK_CONNECTIONS).contains(n) => {
                        if counts.contains(&(*n as u64)) {
                            return Err(
                                ctx.err(v.span(), format!("connections: {n} is listed twice"))
                            );
                        }
                        counts.push(*n as u64);
                    }
                    other => {
                        return Err(ctx.err(
                            v.span(),
                            format!(
                                "connections: {other}: allowed: whole numbers from 1 to {MAX_BULK_CONNECTIONS}"
                            ),
                        ));
                    }
                }
            }
            if counts.is_empty() {
                return Err(ctx.err(v.span(), "connections: give at least one count"));
            }
            (
                Workload::Bulk {
                    duration_ms: d.as_millis() as u64,
                },
                counts,
            )
        }
        "pages" => crate::page::parse_pages(t.get_key_value("pages").map(|(_, v)| v), ctx.file)
            .map_err(|(span, message)| ctx.err(span.unwrap_or(at), message))?,
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

    let interleave = match &raw.interleave {
        None => None,
        Some(name) => {
            let names = || {
                conditions
                    .iter()
                    .map(|c| format!("{:?}", c.name))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            let Some(i) = conditions.iter().position(|c| c.name == *name.get_ref()) else {
                return Err(ctx.err(
                    name.span(),
                    format!(
                        "interleave: no condition {:?}; allowed: one of the plan's conditions: {}",
                        name.get_ref(),
                        names()
                    ),
                ));
            };
            if conditions.len() < 2 {
                return Err(ctx.err(
                    name.span(),
                    format!(
                        "interleave = {:?}: it runs before every other condition, and the plan \
                         has no other; allowed: a condition of a plan with two or more",
                        name.get_ref()
                    ),
                ));
            }
            Some(i)
        }
    };

    if raw.arms.get_ref().is_empty() {
        return Err(ctx.err(raw.arms.span(), "arms: give at least one arm"));
    }
    let mut arms = Vec::new();
    for (aname, t) in raw.arms.get_ref() {
        if let Workload::Pages { .. } = workload {
            crate::page::check_arm(aname.get_ref(), t)
                .map_err(|(at, message)| ctx.err(at, message))?;
        }
        arms.push(parse_arm(
            &ctx,
            aname,
            t,
            matches!(workload, Workload::Telemetry { .. }),
        )?);
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
        interleave,
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
                max_bytes: 5_000_000,
                stream_rate_bps: 6_000_000,
                player_buffer_ms: 10_000,
            }
        );
        assert_eq!(p.sizes, vec![4_300_000]);
        // the playback estimate's keys
        let player = seg.replace(
            "segments = 15",
            "segments = 15\nstream-rate = \"3mbit\"\nplayer-buffer = \"4.5s\"",
        );
        let p = parse(&player, "t.toml", Profile::Full).unwrap();
        assert!(matches!(
            p.workload,
            Workload::Segments {
                stream_rate_bps: 3_000_000,
                player_buffer_ms: 4_500,
                ..
            }
        ));
        for (bad, what) in [("\"3mb\"", "rate"), ("\"10bit\"", "1kbit or more")] {
            let text = player.replace("\"3mbit\"", bad);
            let e = parse(&text, "t.toml", Profile::Full).unwrap_err();
            assert!(
                e.message.contains("stream-rate") && e.message.contains(what),
                "{e}"
            );
            assert_eq!(e.line, line_of("stream-rate", &text), "{e}");
        }
        let e = parse(
            &player.replace("\"4.5s\"", "\"11min\""),
            "t.toml",
            Profile::Full,
        )
        .unwrap_err();
        assert!(e.message.contains("0 to 10min"), "{e}");

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
        let e = broken("kind = \"single-object\"", "kind = \"webpages\"");
        assert!(e.message.contains("\"segments\""), "{e}");
        let e = parse(&seg.replace("\"5MB\"", "\"1MB\""), "t.toml", Profile::Full).unwrap_err();
        assert!(e.message.contains("below segment-min"), "{e}");
    }

    #[test]
    fn interleave_names_a_condition_of_a_plan_with_others() {
        let p = parse(GOOD, "t.toml", Profile::Full).unwrap();
        assert_eq!(p.interleave, None);
        let text = GOOD.replace("seed = 9", "seed = 9\ninterleave = \"base\"");
        let p = parse(&text, "t.toml", Profile::Full).unwrap();
        assert_eq!(p.interleave, Some(0));
        // a matrix condition can be the baseline too
        let text = GOOD.replace("seed = 9", "seed = 9\ninterleave = \"up-loss=0% mtu=1400\"");
        assert_eq!(
            parse(&text, "t.toml", Profile::Full).unwrap().interleave,
            Some(3)
        );

        let e = broken("seed = 9", "seed = 9\ninterleave = \"normal\"");
        assert_eq!(e.line, line_of("seed = 9", GOOD) + 1, "{e}");
        assert_eq!(e.column, 14, "{e}");
        assert!(
            e.message.contains("no condition \"normal\"")
                && e.message.contains("\"base\", \"loss 1%\""),
            "{e}"
        );
        let e = broken("seed = 9", "seed = 9\ninterleave = 3");
        assert_eq!(e.line, line_of("seed = 9", GOOD) + 1, "{e}");
        assert!(e.message.contains("string"), "{e}");
        // alone, a baseline has nothing to precede
        let alone = GOOD
            .replace("seed = 9", "seed = 9\ninterleave = \"network\"")
            .replace(
                "[conditions.base]\n[conditions.\"loss 1%\"]\nloss = \"1%\"\n[conditions.slow]\ndelay = \"35ms\"\n[matrix]\nup-loss = [\"0%\", \"2%\"]\nmtu = [1400]\n",
                "",
            );
        let e = parse(&alone, "t.toml", Profile::Full).unwrap_err();
        assert!(e.message.contains("no other"), "{e}");
    }

    /// Replaces `from` by `to` in the good plan and returns the error.
    fn broken(from: &str, to: &str) -> PlanError {
        assert!(GOOD.contains(from), "{from}");
        parse(&GOOD.replacen(from, to, 1), "t.toml", Profile::Full).unwrap_err()
    }

    #[test]
    fn bulk_plans_take_connection_counts_and_direct_conditions() {
        let bulk = r#"
name = "b"
iterations = 1
[workload]
kind = "bulk"
connections = [1, 8, 64]
duration = "10s"
[quick.workload]
connections = [1]
duration = "2s"
[conditions.veth]
direct = true
mtu = 9000
[conditions.plain]
direct = true
[conditions.emulated]
rate = "1gbit"
[arms.h2]
http = "2"
"#;
        let p = parse(bulk, "b.toml", Profile::Full).unwrap();
        assert_eq!(
            p.workload,
            Workload::Bulk {
                duration_ms: 10_000
            }
        );
        assert_eq!(p.sizes, vec![1, 8, 64]);
        let mtus: Vec<_> = p.conditions.iter().map(|c| c.direct_mtu).collect();
        assert_eq!(mtus, [Some(9000), Some(1500), None]);
        let q = parse(bulk, "b.toml", Profile::Quick).unwrap();
        assert_eq!(
            (q.workload, q.sizes),
            (Workload::Bulk { duration_ms: 2_000 }, vec![1])
        );
        for (from, to, needle, what) in [
            ("[1, 8, 64]", "[0]", "connections = [", "from 1 to 256"),
            ("[1, 8, 64]", "[1, 1]", "connections = [", "listed twice"),
            ("[1, 8, 64]", "[]", "connections = [", "at least one"),
            ("\"10s\"", "\"500ms\"", "duration = \"500ms", "from 1s"),
            (
                "mtu = 9000",
                "mtu = 9000\ndelay = \"5ms\"",
                "delay = \"5ms",
                "allowed with direct = true: mtu",
            ),
            (
                "direct = true\nmtu",
                "direct = \"yes\"\nmtu",
                "direct = \"yes",
                "true or false",
            ),
        ] {
            let text = bulk.replacen(from, to, 1);
            let e = parse(&text, "b.toml", Profile::Full).unwrap_err();
            assert!(e.message.contains(what), "{e}");
            assert_eq!(e.line, line_of(needle, &text), "{e}");
        }
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

    const TELEMETRY: &str = r#"
name = "tel"
iterations = 3
[quick]
iterations = 1
[quick.workload]
duration = "5s"
[workload]
kind = "telemetry"
units-per-second = 1000
flush = 10
duration = "10s"
[network]
delay = "25ms"
[conditions.base]
[conditions.lossy]
loss = "2%"
[arms.tcp]
telemetry = "tcp"
tcp-cc = "cubic"
[arms.streams]
telemetry = "quic-streams"
quic-cc = "newreno"
groups = "p256"
"#;

    fn telemetry_broken(from: &str, to: &str) -> PlanError {
        assert!(TELEMETRY.contains(from), "{from}");
        parse(&TELEMETRY.replacen(from, to, 1), "t.toml", Profile::Full).unwrap_err()
    }

    #[test]
    fn telemetry_plans_take_a_mode_per_arm_instead_of_http() {
        let p = parse(TELEMETRY, "t.toml", Profile::Full).unwrap();
        assert_eq!(
            p.workload,
            Workload::Telemetry {
                units_per_second: 1000,
                flush_units: 10,
                duration_ms: 10_000
            }
        );
        // the trial's bytes: 10,000 units of 8
        assert_eq!(p.sizes, [80_000]);
        assert_eq!(p.arms[0].telemetry, Some(Mode::Tcp));
        assert!(!p.arms[0].is_quic() && p.arms[1].is_quic());
        assert_eq!(
            p.arms[1].client_args(),
            [
                "--mode",
                "quic-streams",
                "--quic-cc",
                "newreno",
                "--groups",
                "p256"
            ]
        );
        assert_eq!(p.arms[1].server_args(), ["--quic-cc", "newreno"]);
        assert_eq!(
            p.arms[1].label,
            "telemetry over a QUIC stream per flush (quinn), newreno"
        );
        let q = parse(TELEMETRY, "t.toml", Profile::Quick).unwrap();
        assert_eq!(
            (q.workload, q.iterations),
            (
                Workload::Telemetry {
                    units_per_second: 1000,
                    flush_units: 10,
                    duration_ms: 5_000
                },
                1
            )
        );

        let e = telemetry_broken("telemetry = \"tcp\"", "http = \"2\"");
        assert!(
            e.message
                .contains("http does not apply to a telemetry plan")
                && e.message.contains("\"quic-datagrams\""),
            "{e}"
        );
        assert_eq!(e.line, line_of("telemetry = \"tcp\"", TELEMETRY));
        let e = telemetry_broken("telemetry = \"tcp\"", "telemetry = \"udp\"");
        assert!(
            e.message.contains("telemetry = \"udp\"") && e.message.contains("\"quic-stream\""),
            "{e}"
        );
        assert_eq!(e.column, 13, "{e}");
        let e = telemetry_broken("telemetry = \"tcp\"\n", "");
        assert!(e.message.contains("arm \"tcp\" needs telemetry = "), "{e}");
        let e = telemetry_broken("tcp-cc = \"cubic\"", "tfo = true");
        assert!(
            e.message.contains("tfo does not apply to telemetry arms")
                && e.message.contains("quic-cc"),
            "{e}"
        );
        let e = telemetry_broken("quic-cc = \"newreno\"", "tcp-cc = \"reno\"");
        assert!(e.message.contains("applies to tcp arms only"), "{e}");
        let e = telemetry_broken("tcp-cc = \"cubic\"", "quic-cc = \"cubic\"");
        assert!(e.message.contains("quic-stream, quic-streams"), "{e}");
        let e = telemetry_broken("flush = 10", "flush = 200");
        assert!(
            e.message
                .contains("flush: allowed: a whole number from 1 to 128"),
            "{e}"
        );
        let e = telemetry_broken("duration = \"10s\"", "duration = \"0.1ms\"");
        assert!(e.message.contains("one unit interval"), "{e}");
        let e = telemetry_broken("flush = 10", "sizes = [\"1kb\"]");
        assert!(
            e.message.contains("does not apply to kind \"telemetry\"")
                && e.message.contains("units-per-second"),
            "{e}"
        );
        // and the other way round: no mode in an HTTP plan
        let e = broken("http = \"2\"", "telemetry = \"tcp\"");
        assert!(e.message.contains("kind is \"telemetry\""), "{e}");
    }
}
