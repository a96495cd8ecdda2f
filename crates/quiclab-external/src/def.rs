//! Stack files: what an external stack is, parsed and checked (docs/stacks.md is the user's
//! description of the format).
//!
//! A stack file names the programs of a stack's server and client, their arguments as templates
//! with placeholders, the knobs an arm may set and the arguments each becomes, and the lines of
//! the client's output that mark the handshake, the first and the last byte. Every error names
//! the file, line and column and what is allowed.

use std::collections::BTreeMap;
use std::fmt;
use std::ops::Range;
use std::path::{Path, PathBuf};

use quiclab_model::budget::SenderRecord;
use quiclab_model::input;
use quiclab_model::record::HttpVersion;
use regex::Regex;
use serde::Deserialize;
use toml::Spanned;

/// The stack files shipped with quiclab: (file name, text).
pub const BUILTIN: &[(&str, &str)] = &[
    ("ngtcp2.toml", include_str!("../stacks/ngtcp2.toml")),
    ("quic-go.toml", include_str!("../stacks/quic-go.toml")),
    ("quiche.toml", include_str!("../stacks/quiche.toml")),
    ("aioquic.toml", include_str!("../stacks/aioquic.toml")),
    ("tquic.toml", include_str!("../stacks/tquic.toml")),
    ("msquic.toml", include_str!("../stacks/msquic.toml")),
];

/// Where a stack file came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// Shipped with quiclab (its file name).
    Builtin(&'static str),
    /// A file of the user's.
    File(PathBuf),
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Builtin(name) => write!(f, "built-in {name}"),
            Source::File(p) => write!(f, "{}", p.display()),
        }
    }
}

/// A stack file that could not be used: where and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{file}{}: {message}", at(*.line, *.column))]
pub struct DefError {
    pub file: String,
    /// From 1; 0 when the error is the whole file's (it cannot be read).
    pub line: usize,
    pub column: usize,
    pub message: String,
}

/// `:LINE:COLUMN`, or nothing for an error of the whole file.
fn at(line: usize, column: usize) -> String {
    if line == 0 {
        String::new()
    } else {
        format!(":{line}:{column}")
    }
}

/// What a placeholder stands for. Server templates may use the server's, client templates the
/// client's; `{knobs}` (the arguments of the arm's knobs, as a whole argument) and, in a knob's
/// own templates, `{value}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Placeholder {
    /// Server: the address to listen on; `{port}` its UDP or TCP port.
    Address,
    Port,
    /// Server: its certificate and private key (PEM files), and the directory of documents it
    /// serves (quiclab's byte pattern at `/bytes/N` for every size the trial asks for).
    Cert,
    Key,
    Htdocs,
    /// Both: the directory for qlog files (one per connection).
    QlogDir,
    /// Client: the URL to fetch, its host and path, the certificate it should trust, and the
    /// directory it downloads into (the body is checked there against quiclab's pattern).
    Url,
    Host,
    Path,
    Cacert,
    DownloadDir,
    /// Client: where it keeps the TLS session and the server's transport parameters between
    /// the connections of one run (resumption and 0-RTT); absent before the first.
    SessionFile,
    TpFile,
    /// The file of TLS secrets (NSS key log format).
    Keylog,
    Knobs,
    Value,
    /// Telemetry server: the file of quiclab's telemetry records it writes (JSON lines).
    TelemetryLog,
    /// Telemetry client: the mode (quic-stream, quic-streams or quic-datagrams), units per
    /// second, units per flush, and how long units are generated (e.g. "6000ms").
    Mode,
    UnitsPerSecond,
    Flush,
    Duration,
}

impl Placeholder {
    const ALL: [(&'static str, Placeholder); 21] = [
        ("address", Placeholder::Address),
        ("port", Placeholder::Port),
        ("cert", Placeholder::Cert),
        ("key", Placeholder::Key),
        ("htdocs", Placeholder::Htdocs),
        ("qlog_dir", Placeholder::QlogDir),
        ("url", Placeholder::Url),
        ("host", Placeholder::Host),
        ("path", Placeholder::Path),
        ("cacert", Placeholder::Cacert),
        ("download_dir", Placeholder::DownloadDir),
        ("session_file", Placeholder::SessionFile),
        ("tp_file", Placeholder::TpFile),
        ("keylog", Placeholder::Keylog),
        ("knobs", Placeholder::Knobs),
        ("value", Placeholder::Value),
        ("telemetry_log", Placeholder::TelemetryLog),
        ("mode", Placeholder::Mode),
        ("units_per_second", Placeholder::UnitsPerSecond),
        ("flush", Placeholder::Flush),
        ("duration", Placeholder::Duration),
    ];

    pub fn name(self) -> &'static str {
        Self::ALL
            .iter()
            .find(|(_, p)| *p == self)
            .map(|(n, _)| *n)
            .unwrap_or("?")
    }

    fn names(of: &[Placeholder]) -> String {
        of.iter()
            .map(|p| format!("{{{}}}", p.name()))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

const SERVER_PLACES: &[Placeholder] = &[
    Placeholder::Address,
    Placeholder::Port,
    Placeholder::Cert,
    Placeholder::Key,
    Placeholder::Htdocs,
    Placeholder::QlogDir,
    Placeholder::Keylog,
    Placeholder::Knobs,
];
const CLIENT_PLACES: &[Placeholder] = &[
    Placeholder::Url,
    Placeholder::Host,
    Placeholder::Port,
    Placeholder::Path,
    Placeholder::Cacert,
    Placeholder::DownloadDir,
    Placeholder::SessionFile,
    Placeholder::TpFile,
    Placeholder::QlogDir,
    Placeholder::Keylog,
    Placeholder::Knobs,
];

const TELEMETRY_SERVER_PLACES: &[Placeholder] = &[Placeholder::TelemetryLog];
const TELEMETRY_CLIENT_PLACES: &[Placeholder] = &[
    Placeholder::Url,
    Placeholder::Host,
    Placeholder::Port,
    Placeholder::Cacert,
    Placeholder::QlogDir,
    Placeholder::Keylog,
    Placeholder::Knobs,
    Placeholder::Mode,
    Placeholder::UnitsPerSecond,
    Placeholder::Flush,
    Placeholder::Duration,
];

/// The telemetry modes an external stack may carry (quiclab's names; TLS over TCP is quiclab's
/// own).
pub const TELEMETRY_MODES: [&str; 3] = ["quic-stream", "quic-streams", "quic-datagrams"];

/// How an external stack carries quiclab's telemetry workload: its client program writes
/// quiclab's client records on standard output, its server the units it read into
/// `{telemetry_log}` (the protocol and records: crates/quiclab-telemetry).
#[derive(Debug, Clone)]
pub struct TelemetryDef {
    /// Of [`TELEMETRY_MODES`], in the file's order.
    pub modes: Vec<String>,
    /// Added to the server's arguments in telemetry trials.
    pub server_args: Vec<Template>,
    /// The client program (the `[client]` program) and its arguments for a telemetry run.
    pub client: Command,
}

/// One piece of a template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Piece {
    Text(String),
    Var(Placeholder),
}

/// One argument with placeholders, e.g. `--htdocs={htdocs}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template(pub Vec<Piece>);

impl Template {
    /// Fills the placeholders from `value` (a placeholder without a value renders empty; the
    /// definition's checks make sure every used one has one).
    pub fn render(&self, value: &dyn Fn(Placeholder) -> String) -> String {
        self.0
            .iter()
            .map(|p| match p {
                Piece::Text(t) => t.clone(),
                Piece::Var(v) => value(*v),
            })
            .collect()
    }

    /// The placeholders it uses.
    pub fn uses(&self, p: Placeholder) -> bool {
        self.0.contains(&Piece::Var(p))
    }

    /// `{knobs}` alone.
    pub fn is_knobs(&self) -> bool {
        self.0 == [Piece::Var(Placeholder::Knobs)]
    }
}

/// A program and its arguments.
#[derive(Debug, Clone)]
pub struct Command {
    pub program: String,
    pub args: Vec<Template>,
}

impl Command {
    pub fn uses(&self, p: Placeholder) -> bool {
        self.args.iter().any(|a| a.uses(p))
    }

    /// Where the program is (see [`locate_program`]).
    pub fn locate(&self) -> Option<PathBuf> {
        locate_program(&self.program)
    }
}

/// A program as a stack file from `source` names it: a relative path (one with a slash, e.g.
/// `./driver` or `bin/server`) is taken from the stack file's directory, made absolute, so that
/// it is found wherever quiclab is run from; a bare name is looked up on `PATH` when run
/// ([`locate_program`]), and an absolute path or a built-in file's program is as given.
fn beside(source: &Source, program: &str) -> String {
    match source {
        Source::File(file) if program.contains('/') && !program.starts_with('/') => {
            let dir = file.parent().unwrap_or(Path::new(""));
            let joined = dir.join(program);
            std::path::absolute(&joined)
                .unwrap_or(joined)
                .display()
                .to_string()
        }
        _ => program.to_string(),
    }
}

/// Where a program is: the name as given if it has a slash, else the first executable of that
/// name on `PATH` (and in /usr/sbin and /sbin, where servers often live).
pub fn locate_program(program: &str) -> Option<PathBuf> {
    if program.contains('/') {
        let p = PathBuf::from(program);
        return is_executable(&p).then_some(p);
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/sbin", "/usr/local/sbin"].map(PathBuf::from))
        .map(|d| d.join(program))
        .find(|p| is_executable(p))
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// How a knob's value is checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KnobKind {
    /// One of these words.
    OneOf(Vec<String>),
    /// A duration (e.g. "100ms"); rendered as whole microseconds ("100000us").
    Duration,
    /// A list of key-exchange groups in quiclab's names (x25519, p256, p384), each rendered by
    /// the knob's map and joined by its separator.
    Groups,
}

/// A knob of an external stack.
#[derive(Debug, Clone)]
pub struct KnobDef {
    pub key: String,
    pub help: String,
    pub kind: KnobKind,
    /// Its value when the arm sets none (its arguments are given then too).
    pub default: Option<String>,
    pub server: Vec<Template>,
    pub client: Vec<Template>,
    /// Arguments for particular values instead (a value not listed gives none), e.g. a switch
    /// that is an argument when "off" and nothing when "on".
    pub server_by_value: BTreeMap<String, Vec<Template>>,
    pub client_by_value: BTreeMap<String, Vec<Template>>,
    /// How each item of a list value is written for the program, and what joins them.
    pub map: BTreeMap<String, String>,
    pub separator: String,
}

/// Group names a `groups` knob takes.
pub const GROUP_NAMES: [&str; 3] = ["x25519", "p256", "p384"];

impl KnobDef {
    /// The value normalised, or what is allowed.
    pub fn check(&self, v: &str) -> Result<String, String> {
        match &self.kind {
            KnobKind::OneOf(words) => {
                if words.iter().any(|w| w == v) {
                    Ok(v.to_string())
                } else {
                    Err(format!("allowed: {}", words.join(", ")))
                }
            }
            KnobKind::Duration => quiclab_link::units::parse_duration(v)
                .map(|d| format!("{}us", d.as_micros()))
                .map_err(|e| format!("{e}; allowed: a duration such as 100ms")),
            KnobKind::Groups => {
                let items: Vec<&str> = v.split(',').map(str::trim).collect();
                match items
                    .iter()
                    .find(|i| !GROUP_NAMES.contains(i) || !self.map.contains_key(**i))
                {
                    Some(bad) => Err(format!(
                        "unknown group {bad:?}; allowed: a list of {}",
                        self.map.keys().cloned().collect::<Vec<_>>().join(", ")
                    )),
                    None => Ok(items.join(",")),
                }
            }
        }
    }

    /// The normalised value as the program is given it.
    pub fn program_value(&self, v: &str) -> String {
        match self.kind {
            KnobKind::Groups => v
                .split(',')
                .map(|i| self.map.get(i).cloned().unwrap_or_else(|| i.to_string()))
                .collect::<Vec<_>>()
                .join(&self.separator),
            _ => v.to_string(),
        }
    }

    /// The arguments for one side, given the arm's normalised value (or the default), with
    /// the side's placeholders filled by `side`.
    pub fn args(
        &self,
        server: bool,
        value: Option<&str>,
        side: &dyn Fn(Placeholder) -> String,
    ) -> Vec<String> {
        let Some(v) = value.or(self.default.as_deref()) else {
            return Vec::new();
        };
        let by_value = if server {
            &self.server_by_value
        } else {
            &self.client_by_value
        };
        let program_value = self.program_value(v);
        let fill = |p: Placeholder| {
            if p == Placeholder::Value {
                program_value.clone()
            } else {
                side(p)
            }
        };
        let templates = if by_value.is_empty() {
            if server { &self.server } else { &self.client }
        } else {
            match by_value.get(v) {
                Some(t) => t,
                None => return Vec::new(),
            }
        };
        templates.iter().map(|t| t.render(&fill)).collect()
    }
}

/// What the client's output lines say.
#[derive(Debug, Clone)]
pub struct ClientLines {
    /// The line printed when its first packet is sent (the request's start); without it, the
    /// start is when the program was started.
    pub start: Option<Regex>,
    pub handshake: Option<Regex>,
    pub first_byte: Regex,
    pub last_byte: Regex,
    pub error: Option<Regex>,
    /// The response's status code, in its first capture group.
    pub status: Option<Regex>,
    /// The negotiated ALPN protocol, in its first capture group.
    pub alpn: Option<Regex>,
    /// A line that shows the server asked for another key share (HelloRetryRequest).
    pub hello_retry: Option<Regex>,
    /// A line printed when it sends 0-RTT data, and one when the server rejected it.
    pub zero_rtt_sent: Option<Regex>,
    pub zero_rtt_rejected: Option<Regex>,
}

/// An external stack, checked.
#[derive(Debug, Clone)]
pub struct StackDef {
    pub source: Source,
    /// The file's text as read.
    pub text: String,
    pub name: String,
    /// Where `name` is set in the file: line and column, from 1.
    pub name_at: (usize, usize),
    pub implementation: String,
    pub http: Vec<HttpVersion>,
    pub label: String,
    /// What provides the programs (shown when one is missing).
    pub install: String,
    pub server: Command,
    /// The signal that stops the server cleanly (its logs flushed): SIGTERM unless the file
    /// says otherwise.
    pub server_stop: libc::c_int,
    pub client: Command,
    pub lines: ClientLines,
    pub knobs: Vec<KnobDef>,
    /// How it carries telemetry, if it does.
    pub telemetry: Option<TelemetryDef>,
    /// What its server's qlog offers the time budget (`[records] server-qlog`): the budget
    /// reads these from it and no more; none without the section.
    pub records: Vec<SenderRecord>,
}

impl StackDef {
    /// The built-in stack files.
    pub fn builtin() -> Vec<StackDef> {
        BUILTIN
            .iter()
            .map(|(name, text)| {
                StackDef::parse(text, Source::Builtin(name))
                    .unwrap_or_else(|e| panic!("built-in stack file: {e}"))
            })
            .collect()
    }

    /// Reads and checks a stack file.
    pub fn load(path: &Path) -> Result<StackDef, DefError> {
        let text = input::read_text(path, "a stack file", input::MAX_TEXT_BYTES).map_err(|e| {
            DefError {
                file: path.display().to_string(),
                line: 0,
                column: 0,
                message: format!("cannot read it: {e}"),
            }
        })?;
        StackDef::parse(&text, Source::File(path.to_path_buf()))
    }

    /// A stack by built-in name or file path (`quiclab external serve --stack NAME|FILE`).
    pub fn find(name_or_file: &str) -> Result<StackDef, DefError> {
        // a built-in file is named after its stack: only that one is parsed (its patterns
        // compiled), a millisecond off every external endpoint's start
        let builtin = BUILTIN
            .iter()
            .find(|(file, _)| file.strip_suffix(".toml") == Some(name_or_file));
        if let Some((file, text)) = builtin {
            return Ok(StackDef::parse(text, Source::Builtin(file))
                .unwrap_or_else(|e| panic!("built-in stack file: {e}")));
        }
        StackDef::load(Path::new(name_or_file))
    }

    pub fn knob(&self, key: &str) -> Option<&KnobDef> {
        self.knobs.iter().find(|k| k.key == key)
    }

    /// The programs that are not installed, each with what provides it.
    pub fn missing_programs(&self) -> Vec<String> {
        [&self.server, &self.client]
            .into_iter()
            .filter(|c| c.locate().is_none())
            .map(|c| {
                format!(
                    "stack {:?} needs the program {:?}, which is not installed (install: {})",
                    self.name, c.program, self.install
                )
            })
            .collect()
    }

    /// The arguments of every knob for one side, given the arm's values and the side's
    /// placeholders.
    pub fn knob_args(
        &self,
        server: bool,
        knobs: &[(String, String)],
        side: &dyn Fn(Placeholder) -> String,
    ) -> Vec<String> {
        let mut out = Vec::new();
        for k in &self.knobs {
            let given = knobs.iter().find(|(key, _)| *key == k.key).map(|(_, v)| v);
            out.extend(k.args(server, given.map(String::as_str), side));
        }
        out
    }

    /// Renders one side's command: every argument, `{knobs}` replaced by `knob_args`.
    pub fn render(
        cmd: &Command,
        knob_args: &[String],
        value: &dyn Fn(Placeholder) -> String,
    ) -> Vec<String> {
        let mut out = Vec::new();
        for a in &cmd.args {
            if a.is_knobs() {
                out.extend(knob_args.iter().cloned());
            } else {
                out.push(a.render(value));
            }
        }
        out
    }

    /// Parses and checks a stack file's text.
    pub fn parse(text: &str, source: Source) -> Result<StackDef, DefError> {
        let file = source.to_string();
        let err = |at: Range<usize>, message: String| {
            let (line, column) = line_col(text, at.start);
            DefError {
                file: file.clone(),
                line,
                column,
                message,
            }
        };
        let raw: RawStack = toml::from_str(text).map_err(|e| {
            err(
                e.span().unwrap_or(0..0),
                e.message().trim_end().replace('\n', "; "),
            )
        })?;
        let name = raw.name.get_ref().trim().to_string();
        let name_at = line_col(text, raw.name.span().start);
        if name.is_empty()
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        {
            return Err(err(
                raw.name.span(),
                format!("name {name:?}: allowed: letters, digits, '-' and '_'"),
            ));
        }
        let mut http = Vec::new();
        for h in &raw.http {
            match HttpVersion::from_name(h.get_ref()) {
                // one version: its client is given no placeholder saying which to speak
                Some(v @ (HttpVersion::Http3 | HttpVersion::Hq)) if http.is_empty() => http.push(v),
                _ => {
                    return Err(err(
                        h.span(),
                        format!(
                            "http {:?}: an external stack speaks one version over QUIC; allowed: \
                             [\"3\"] (HTTP/3) or [\"hq\"] (HTTP/0.9 over QUIC, the interop \
                             runner's hq-interop)",
                            h.get_ref()
                        ),
                    ));
                }
            }
        }
        if http.is_empty() {
            return Err(err(
                0..0,
                "http: give the HTTP versions it speaks, e.g. [\"3\"]".into(),
            ));
        }
        let template =
            |s: &Spanned<String>, allowed: &[Placeholder]| -> Result<Template, DefError> {
                parse_template(s.get_ref(), allowed).map_err(|(offset, m)| {
                    // the value's span starts at its opening quote
                    err(s.span().start + 1 + offset..s.span().end, m)
                })
            };
        let command = |program: &Spanned<String>,
                       raw_args: &[Spanned<String>],
                       places: &[Placeholder],
                       side: &str,
                       needs: &[&[Placeholder]]|
         -> Result<Command, DefError> {
            let args = raw_args
                .iter()
                .map(|a| template(a, places))
                .collect::<Result<Vec<_>, _>>()?;
            for (i, a) in args.iter().enumerate() {
                if a.uses(Placeholder::Knobs) && !a.is_knobs() {
                    return Err(err(
                        raw_args[i].span(),
                        "{knobs} stands for several arguments: give it as an argument of its own"
                            .into(),
                    ));
                }
            }
            let cmd = Command {
                program: beside(&source, program.get_ref()),
                args,
            };
            if cmd.program.trim().is_empty() {
                return Err(err(program.span(), format!("[{side}] program is empty")));
            }
            for any_of in needs {
                if !any_of.iter().any(|p| cmd.uses(*p)) {
                    return Err(err(
                        program.span(),
                        format!(
                            "[{side}] args must use {}: without it quiclab cannot run a trial",
                            if any_of.len() == 1 {
                                Placeholder::names(any_of)
                            } else {
                                format!("one of {}", Placeholder::names(any_of))
                            }
                        ),
                    ));
                }
            }
            Ok(cmd)
        };
        let server_stop = match raw
            .server
            .stop_signal
            .as_ref()
            .map(|s| (s, s.get_ref().as_str()))
        {
            None => libc::SIGTERM,
            Some((_, "TERM")) => libc::SIGTERM,
            Some((_, "INT")) => libc::SIGINT,
            Some((_, "HUP")) => libc::SIGHUP,
            Some((_, "QUIT")) => libc::SIGQUIT,
            Some((at, other)) => {
                return Err(err(
                    at.span(),
                    format!("stop-signal {other:?}: allowed: TERM, INT, HUP, QUIT"),
                ));
            }
        };
        let server = command(
            &raw.server.program,
            &raw.server.args,
            SERVER_PLACES,
            "server",
            &[
                &[Placeholder::Port],
                &[Placeholder::Cert],
                &[Placeholder::Key],
                &[Placeholder::Htdocs],
            ],
        )?;
        let client = command(
            &raw.client.program,
            &raw.client.args,
            CLIENT_PLACES,
            "client",
            &[
                &[Placeholder::Url, Placeholder::Path],
                &[Placeholder::DownloadDir],
            ],
        )?;
        let regex = |s: &Spanned<String>, what: &str| {
            Regex::new(s.get_ref())
                .map_err(|e| err(s.span(), format!("{what}: not a regular expression: {e}")))
        };
        let optional = |s: &Option<Spanned<String>>, what: &str| {
            s.as_ref().map(|r| regex(r, what)).transpose()
        };
        let c = &raw.client;
        let lines = ClientLines {
            start: optional(&c.start, "start")?,
            handshake: optional(&c.handshake, "handshake")?,
            first_byte: regex(&c.first_byte, "first-byte")?,
            last_byte: regex(&c.last_byte, "last-byte")?,
            error: optional(&c.error, "error")?,
            status: optional(&c.status, "status")?,
            alpn: optional(&c.alpn, "alpn")?,
            hello_retry: optional(&c.hello_retry, "hello-retry")?,
            zero_rtt_sent: optional(&c.zero_rtt_sent, "zero-rtt-sent")?,
            zero_rtt_rejected: optional(&c.zero_rtt_rejected, "zero-rtt-rejected")?,
        };
        for (r, what, at) in [
            (&lines.status, "status", &c.status),
            (&lines.alpn, "alpn", &c.alpn),
        ] {
            if let (Some(r), Some(at)) = (r, at)
                && r.captures_len() < 2
            {
                return Err(err(
                    at.span(),
                    format!("{what}: the pattern needs a capture group (...) around the value"),
                ));
            }
        }
        let mut knobs = Vec::new();
        for (key, k) in &raw.knobs {
            let at = k.span();
            let k = k.get_ref();
            let kind = match (k.kind.as_ref().map(|s| s.get_ref().as_str()), &k.allowed) {
                (None, Some(words)) if !words.is_empty() => KnobKind::OneOf(words.clone()),
                (Some("duration"), None) => KnobKind::Duration,
                (Some("groups"), None) => KnobKind::Groups,
                _ => {
                    return Err(err(
                        at,
                        format!(
                            "knob {key:?}: give either allowed = [words] or kind = \"duration\" \
                             or kind = \"groups\""
                        ),
                    ));
                }
            };
            if kind == KnobKind::Groups {
                if let Some(bad) = k.map.keys().find(|g| !GROUP_NAMES.contains(&g.as_str())) {
                    return Err(err(
                        at,
                        format!(
                            "knob {key:?}: map names group {bad:?}; allowed: {}",
                            GROUP_NAMES.join(", ")
                        ),
                    ));
                }
                if k.map.is_empty() {
                    return Err(err(
                        at,
                        format!(
                            "knob {key:?}: a groups knob needs map = {{ x25519 = \"...\", ... }}"
                        ),
                    ));
                }
            }
            let value_only = [Placeholder::Value];
            let templates = |list: &[Spanned<String>]| -> Result<Vec<Template>, DefError> {
                list.iter().map(|t| template(t, &value_only)).collect()
            };
            let by_value = |map: &BTreeMap<String, Vec<Spanned<String>>>,
                            places: &[Placeholder]|
             -> Result<BTreeMap<String, Vec<Template>>, DefError> {
                map.iter()
                    .map(|(v, list)| {
                        let t = list
                            .iter()
                            .map(|a| template(a, places))
                            .collect::<Result<Vec<_>, _>>()?;
                        Ok((v.clone(), t))
                    })
                    .collect()
            };
            let server_places: Vec<Placeholder> = SERVER_PLACES
                .iter()
                .copied()
                .filter(|p| *p != Placeholder::Knobs)
                .collect();
            let client_places: Vec<Placeholder> = CLIENT_PLACES
                .iter()
                .copied()
                .filter(|p| *p != Placeholder::Knobs)
                .collect();
            let def = KnobDef {
                key: key.clone(),
                help: k.help.clone(),
                kind,
                default: None,
                server: templates(&k.server)?,
                client: templates(&k.client)?,
                server_by_value: by_value(&k.server_by_value, &server_places)?,
                client_by_value: by_value(&k.client_by_value, &client_places)?,
                map: k.map.clone(),
                separator: k.separator.clone().unwrap_or_else(|| ",".into()),
            };
            for (side, by, plain) in [
                ("server", &def.server_by_value, &def.server),
                ("client", &def.client_by_value, &def.client),
            ] {
                if !by.is_empty() && !plain.is_empty() {
                    return Err(err(
                        at,
                        format!("knob {key:?}: give {side} or {side}-by-value, not both"),
                    ));
                }
                if let Some(bad) = by.keys().find(|v| def.check(v).is_err()) {
                    return Err(err(
                        at,
                        format!(
                            "knob {key:?}: {side}-by-value names {bad:?}, which the knob does \
                             not allow"
                        ),
                    ));
                }
            }
            let has_args = |plain: &Vec<Template>, by: &BTreeMap<String, Vec<Template>>| {
                !plain.is_empty() || !by.is_empty()
            };
            if !has_args(&def.server, &def.server_by_value)
                && !has_args(&def.client, &def.client_by_value)
            {
                return Err(err(
                    at,
                    format!(
                        "knob {key:?}: give the arguments it becomes: server = [...], client = [...]"
                    ),
                ));
            }
            let default = match &k.default {
                Some(d) => Some(def.check(d).map_err(|why| {
                    err(at.clone(), format!("knob {key:?}: default {d:?}: {why}"))
                })?),
                None => None,
            };
            knobs.push(KnobDef { default, ..def });
        }
        if !server.args.iter().any(Template::is_knobs)
            && knobs
                .iter()
                .any(|k| !k.server.is_empty() || !k.server_by_value.is_empty())
            || !client.args.iter().any(Template::is_knobs)
                && knobs
                    .iter()
                    .any(|k| !k.client.is_empty() || !k.client_by_value.is_empty())
        {
            return Err(err(
                0..0,
                "knobs have arguments, but a side's args have no {knobs} to put them in".into(),
            ));
        }
        let telemetry = match &raw.telemetry {
            None => None,
            Some(t) => {
                let mut modes = Vec::new();
                for m in &t.modes {
                    if !TELEMETRY_MODES.contains(&m.get_ref().as_str()) {
                        return Err(err(
                            m.span(),
                            format!(
                                "telemetry mode {:?}: allowed: {}",
                                m.get_ref(),
                                TELEMETRY_MODES.join(", ")
                            ),
                        ));
                    }
                    modes.push(m.get_ref().clone());
                }
                if modes.is_empty() {
                    return Err(err(
                        t.client_args_at(),
                        format!(
                            "[telemetry] modes: give the modes it carries, of {}",
                            TELEMETRY_MODES.join(", ")
                        ),
                    ));
                }
                let server_args = t
                    .server_args
                    .iter()
                    .map(|a| template(a, TELEMETRY_SERVER_PLACES))
                    .collect::<Result<Vec<_>, _>>()?;
                if !server_args
                    .iter()
                    .any(|a| a.uses(Placeholder::TelemetryLog))
                {
                    return Err(err(
                        t.client_args_at(),
                        "[telemetry] server-args must use {telemetry_log}: without it quiclab \
                         cannot read what the server received"
                            .into(),
                    ));
                }
                let mut needs: Vec<&[Placeholder]> = vec![
                    &[Placeholder::Url, Placeholder::Host],
                    &[Placeholder::UnitsPerSecond],
                    &[Placeholder::Flush],
                    &[Placeholder::Duration],
                ];
                if modes.len() > 1 {
                    needs.push(&[Placeholder::Mode]);
                }
                let client = command(
                    &raw.client.program,
                    t.client_args.get_ref(),
                    TELEMETRY_CLIENT_PLACES,
                    "telemetry",
                    &needs,
                )?;
                Some(TelemetryDef {
                    modes,
                    server_args,
                    client,
                })
            }
        };
        let mut records = Vec::new();
        if let Some(r) = &raw.records {
            for v in &r.server_qlog {
                let Some(rec) = SenderRecord::from_name(v.get_ref()) else {
                    return Err(err(
                        v.span(),
                        format!(
                            "[records] server-qlog: {:?} is not something a budget reads; \
                             allowed: {}",
                            v.get_ref(),
                            SenderRecord::names()
                        ),
                    ));
                };
                if !records.contains(&rec) {
                    records.push(rec);
                }
            }
            if !records.is_empty() && !server.uses(Placeholder::QlogDir) {
                return Err(err(
                    r.server_qlog.first().map_or(0..0, |v| v.span()),
                    "[records] server-qlog: the [server] args never give the program \
                     {qlog_dir}, so it writes no qlog there; add \"--qlog-dir={qlog_dir}\" \
                     (in the program's own words) or leave server-qlog empty"
                        .into(),
                ));
            }
        }
        Ok(StackDef {
            records,
            source,
            text: text.to_string(),
            name_at,
            label: raw
                .label
                .unwrap_or_else(|| format!("HTTP/3 over QUIC ({name})")),
            name,
            implementation: raw.implementation,
            http,
            install: raw.install,
            server,
            server_stop,
            client,
            lines,
            knobs,
            telemetry,
        })
    }
}

/// Parses `{name}` placeholders; `{{` and `}}` are literal braces. Errors carry the byte
/// offset in `s`.
fn parse_template(s: &str, allowed: &[Placeholder]) -> Result<Template, (usize, String)> {
    let mut pieces = Vec::new();
    let mut text = String::new();
    let mut rest = s.char_indices().peekable();
    while let Some((i, c)) = rest.next() {
        match c {
            '{' if rest.peek().map(|p| p.1) == Some('{') => {
                rest.next();
                text.push('{');
            }
            '}' if rest.peek().map(|p| p.1) == Some('}') => {
                rest.next();
                text.push('}');
            }
            '}' => return Err((i, "a '}' without its '{' (write }} for a brace)".into())),
            '{' => {
                let Some(end) = s[i..].find('}') else {
                    return Err((i, "a '{' without its '}' (write {{ for a brace)".into()));
                };
                let name = &s[i + 1..i + end];
                let Some((_, p)) = Placeholder::ALL.iter().find(|(n, _)| *n == name) else {
                    return Err((
                        i,
                        format!(
                            "unknown placeholder {{{name}}}; allowed here: {}",
                            Placeholder::names(allowed)
                        ),
                    ));
                };
                if !allowed.contains(p) {
                    return Err((
                        i,
                        format!(
                            "{{{name}}} cannot be used here; allowed here: {}",
                            Placeholder::names(allowed)
                        ),
                    ));
                }
                if !text.is_empty() {
                    pieces.push(Piece::Text(std::mem::take(&mut text)));
                }
                pieces.push(Piece::Var(*p));
                for _ in 0..end {
                    rest.next();
                }
            }
            c => text.push(c),
        }
    }
    if !text.is_empty() {
        pieces.push(Piece::Text(text));
    }
    Ok(Template(pieces))
}

fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let column = before.chars().count()
        - before
            .rfind('\n')
            .map_or(0, |i| before[..=i].chars().count())
        + 1;
    (line, column)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawStack {
    name: Spanned<String>,
    implementation: String,
    http: Vec<Spanned<String>>,
    label: Option<String>,
    install: String,
    server: RawServer,
    client: RawClient,
    #[serde(default)]
    knobs: indexmap::IndexMap<String, Spanned<RawKnob>>,
    telemetry: Option<RawTelemetry>,
    records: Option<RawRecords>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct RawRecords {
    #[serde(default)]
    server_qlog: Vec<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct RawTelemetry {
    modes: Vec<Spanned<String>>,
    server_args: Vec<Spanned<String>>,
    client_args: Spanned<Vec<Spanned<String>>>,
}

impl RawTelemetry {
    /// Where a problem of the section as a whole is shown.
    fn client_args_at(&self) -> Range<usize> {
        self.client_args.span()
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct RawServer {
    program: Spanned<String>,
    args: Vec<Spanned<String>>,
    stop_signal: Option<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct RawClient {
    program: Spanned<String>,
    args: Vec<Spanned<String>>,
    start: Option<Spanned<String>>,
    handshake: Option<Spanned<String>>,
    first_byte: Spanned<String>,
    last_byte: Spanned<String>,
    error: Option<Spanned<String>>,
    status: Option<Spanned<String>>,
    alpn: Option<Spanned<String>>,
    hello_retry: Option<Spanned<String>>,
    zero_rtt_sent: Option<Spanned<String>>,
    zero_rtt_rejected: Option<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct RawKnob {
    #[serde(default)]
    help: String,
    kind: Option<Spanned<String>>,
    allowed: Option<Vec<String>>,
    default: Option<String>,
    #[serde(default)]
    server: Vec<Spanned<String>>,
    #[serde(default)]
    client: Vec<Spanned<String>>,
    #[serde(default)]
    server_by_value: BTreeMap<String, Vec<Spanned<String>>>,
    #[serde(default)]
    client_by_value: BTreeMap<String, Vec<Spanned<String>>>,
    #[serde(default)]
    map: BTreeMap<String, String>,
    separator: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ngtcp2_text() -> &'static str {
        BUILTIN
            .iter()
            .find(|(file, _)| *file == "ngtcp2.toml")
            .expect("ngtcp2 is built in")
            .1
    }

    fn broken(from: &str, to: &str) -> DefError {
        let text = ngtcp2_text().replacen(from, to, 1);
        assert_ne!(text, ngtcp2_text(), "{from:?} is in the file");
        StackDef::parse(&text, Source::File("s.toml".into())).unwrap_err()
    }

    fn line_of(needle: &str, text: &str) -> usize {
        text.lines().position(|l| l.contains(needle)).unwrap() + 1
    }

    #[test]
    fn a_relative_program_path_is_taken_from_the_stack_files_directory() {
        let text = ngtcp2_text()
            .replacen("program = \"gtlsserver\"", "program = \"./bin/server\"", 1)
            .replacen("program = \"gtlsclient\"", "program = \"/opt/x/client\"", 1);
        let d = StackDef::parse(&text, Source::File("/srv/lab/stacks/mine.toml".into())).unwrap();
        assert_eq!(d.server.program, "/srv/lab/stacks/bin/server");
        // an absolute path, and a bare name (looked up on PATH when run), are as given
        assert_eq!(d.client.program, "/opt/x/client");
        let d = StackDef::parse(ngtcp2_text(), Source::File("stacks/mine.toml".into())).unwrap();
        assert_eq!(d.server.program, "gtlsserver");
        // a file named by a relative path: the program's path is made absolute, so that it
        // is found from wherever quiclab runs
        let text = ngtcp2_text().replacen("program = \"gtlsserver\"", "program = \"./s\"", 1);
        let d = StackDef::parse(&text, Source::File("stacks/mine.toml".into())).unwrap();
        let want = std::env::current_dir().unwrap().join("stacks/s");
        assert_eq!(Path::new(&d.server.program), want);
        // a built-in file's program is never rewritten
        let d = StackDef::parse(&text, Source::Builtin("ngtcp2.toml")).unwrap();
        assert_eq!(d.server.program, "./s");
    }

    #[test]
    fn the_builtin_ngtcp2_renders_its_commands_with_knobs() {
        let d = StackDef::builtin()
            .into_iter()
            .find(|d| d.name == "ngtcp2")
            .unwrap();
        assert_eq!(d.http, vec![HttpVersion::Http3]);
        let knobs = vec![
            ("quic-cc".to_string(), "bbr2".to_string()),
            ("groups".to_string(), "p256,x25519".to_string()),
        ];
        let place = |p: Placeholder| format!("<{}>", p.name());
        let args = StackDef::render(&d.client, &d.knob_args(false, &knobs, &place), &place);
        assert!(args.contains(&"--cc=bbr2".to_string()), "{args:?}");
        assert!(
            args.contains(&"--groups=-GROUP-ALL:+GROUP-SECP256R1:+GROUP-X25519".to_string()),
            "{args:?}"
        );
        assert_eq!(args.last().unwrap(), "<url>");
        assert!(args.contains(&"--download=<download_dir>".to_string()));
        // the default controller is given when the arm sets none; no groups then
        let args = StackDef::render(&d.server, &d.knob_args(true, &[], &place), &place);
        assert!(args.contains(&"--cc=cubic".to_string()), "{args:?}");
        assert!(!args.iter().any(|a| a.starts_with("--groups")), "{args:?}");
        assert_eq!(
            d.knob("quic-initial-rtt").unwrap().check("0.1s"),
            Ok("100000us".into())
        );
        let e = d.knob("quic-cc").unwrap().check("vegas").unwrap_err();
        assert!(e.contains("cubic, reno, bbr, bbr2"), "{e}");
        let e = d
            .knob("groups")
            .unwrap()
            .check("x25519,ffdhe2048")
            .unwrap_err();
        assert!(e.contains("ffdhe2048") && e.contains("p256"), "{e}");
    }

    #[test]
    fn a_bad_template_is_refused_at_its_line_and_column() {
        let text = ngtcp2_text();
        let e = broken("\"--htdocs={htdocs}\"", "\"--htdocs={htdoc}\"");
        assert_eq!(e.file, "s.toml");
        assert_eq!(e.line, line_of("--htdocs=", text));
        let col = text
            .lines()
            .nth(e.line - 1)
            .unwrap()
            .find("{htdocs}")
            .unwrap()
            + 1;
        assert_eq!(e.column, col, "{e}");
        assert!(
            e.message.contains("{htdoc}") && e.message.contains("{htdocs}"),
            "{e}"
        );

        let e = broken("\"{url}\"", "\"{cert}\"");
        assert!(e.message.contains("cannot be used here"), "{e}");
        let e = broken("\"--download={download_dir}\", ", "");
        assert!(e.message.contains("{download_dir}"), "{e}");
        assert_eq!(e.line, line_of("program = \"gtlsclient\"", text));
        let e = broken("\"{port}\", \"{key}\"", "\"{key}\"");
        assert!(e.message.contains("{port}"), "{e}");
        let e = broken("--htdocs={htdocs}", "--htdocs={htdocs");
        assert!(e.message.contains("without its '}'"), "{e}");
    }

    #[test]
    fn other_mistakes_are_named() {
        let e = broken("first-byte = '", "first-byte = '(");
        assert!(
            e.message.contains("first-byte") && e.message.contains("regular"),
            "{e}"
        );
        assert_eq!(e.line, line_of("first-byte", ngtcp2_text()));
        let e = broken(
            "status = 'http: stream 0x0 \\[:status: (\\d+)\\]'",
            "status = 'status'",
        );
        assert!(e.message.contains("capture group"), "{e}");
        let e = broken("default = \"cubic\"", "default = \"vegas\"");
        assert!(
            e.message.contains("vegas") && e.message.contains("bbr2"),
            "{e}"
        );
        let e = broken("http = [\"3\"]", "http = [\"2\"]");
        assert!(e.message.contains("allowed: [\"3\"]"), "{e}");
        let e = broken("http = [\"3\"]", "http = [\"3\", \"hq\"]");
        assert!(
            e.message.contains("\"hq\"") && e.message.contains("one version"),
            "{e}"
        );
        let e = broken("label =", "lable =");
        assert!(e.message.contains("lable"), "{e}");
        let e = broken("server-by-value = { off = ", "server-by-value = { of = ");
        assert!(
            e.message.contains("\"of\", which the knob does not allow"),
            "{e}"
        );
        let e = broken("name = \"ngtcp2\"", "name = \"ng tcp2\"");
        assert!(e.message.contains("letters"), "{e}");
    }

    /// `[records]` says what the server's qlog offers the budget; a name it does not know, or a
    /// qlog the server is never told to write, is refused where it is written.
    #[test]
    fn records_say_what_the_server_s_qlog_offers() {
        for d in StackDef::builtin() {
            // aioquic's and tquic's qlogs list no DATA_BLOCKED or STREAM_DATA_BLOCKED frame;
            // msquic writes no qlog
            let offered: Vec<SenderRecord> = SenderRecord::ALL
                .into_iter()
                .filter(|r| {
                    !["aioquic", "tquic"].contains(&d.name.as_str())
                        || *r != SenderRecord::FlowBlocked
                })
                .filter(|_| d.name != "msquic")
                .collect();
            assert_eq!(d.records, offered, "{}", d.name);
        }
        let text = ngtcp2_text();
        let e = broken("\"congestion-events\"", "\"loss-events\"");
        assert!(
            e.message
                .contains("\"loss-events\" is not something a budget reads")
                && e.message
                    .contains("allowed: cwnd, rtt, congestion-events, flow-blocked"),
            "{e}"
        );
        assert_eq!(e.line, line_of("server-qlog", text));
        let e = broken("\"--qlog-dir={qlog_dir}\", ", "");
        assert!(
            e.message.contains("never give the program {qlog_dir}"),
            "{e}"
        );
        assert_eq!(e.line, line_of("server-qlog", text));
        // without the section the budget reads the link's log alone
        let none = text.replacen(
            "server-qlog = [\"cwnd\", \"rtt\", \"congestion-events\", \"flow-blocked\"]",
            "",
            1,
        );
        let d = StackDef::parse(&none, Source::File("s.toml".into())).unwrap();
        assert!(d.records.is_empty());
        let e = broken("server-qlog =", "server-qlogs =");
        assert!(e.message.contains("server-qlogs"), "{e}");
    }

    fn quic_go_text() -> &'static str {
        BUILTIN
            .iter()
            .find(|(n, _)| *n == "quic-go.toml")
            .unwrap()
            .1
    }

    /// The quic-go file with `from` replaced by `to`, parsed.
    fn quic_go_with(from: &str, to: &str) -> Result<StackDef, DefError> {
        let text = quic_go_text().replacen(from, to, 1);
        assert_ne!(text, quic_go_text(), "{from:?} is in the file");
        StackDef::parse(&text, Source::File("g.toml".into()))
    }

    #[test]
    fn a_telemetry_section_names_its_modes_and_renders_its_client() {
        let d = StackDef::builtin()
            .into_iter()
            .find(|d| d.name == "quic-go")
            .unwrap();
        let t = d.telemetry.as_ref().expect("quic-go carries telemetry");
        assert_eq!(t.modes, TELEMETRY_MODES);
        let place = |p: Placeholder| format!("<{}>", p.name());
        let args = StackDef::render(&t.client, &[], &place);
        for want in [
            "telemetry",
            "--mode=<mode>",
            "--units-per-second=<units_per_second>",
            "--flush=<flush>",
            "--duration=<duration>",
            "<url>",
        ] {
            assert!(args.iter().any(|a| a == want), "{want} in {args:?}");
        }
        let server: Vec<String> = t.server_args.iter().map(|a| a.render(&place)).collect();
        assert_eq!(server, ["--telemetry-log=<telemetry_log>"]);
        // a stack file without the section carries none
        let ngtcp2 = StackDef::builtin().into_iter().find(|d| d.name == "ngtcp2");
        assert!(ngtcp2.unwrap().telemetry.is_none());
    }

    #[test]
    fn telemetry_mistakes_are_named_where_they_are() {
        let text = quic_go_text();
        let e = quic_go_with("\"quic-datagrams\"]", "\"tcp\"]").unwrap_err();
        assert!(
            e.message.contains("\"tcp\"") && e.message.contains("quic-streams"),
            "{e}"
        );
        assert_eq!(e.line, line_of("modes = [", text));
        let e = quic_go_with("\"--telemetry-log={telemetry_log}\"", "\"--log\"").unwrap_err();
        assert!(e.message.contains("{telemetry_log}"), "{e}");
        let e = quic_go_with("\"--flush={flush}\", ", "").unwrap_err();
        assert!(e.message.contains("{flush}"), "{e}");
        // a placeholder of the other side
        let e = quic_go_with("\"--flush={flush}\"", "\"--flush={telemetry_log}\"").unwrap_err();
        assert!(e.message.contains("cannot be used here"), "{e}");
        // one mode needs no {mode}; several do
        let one = quic_go_with(
            "modes = [\"quic-stream\", \"quic-streams\", \"quic-datagrams\"]",
            "modes = [\"quic-streams\"]",
        )
        .unwrap();
        assert_eq!(one.telemetry.unwrap().modes, ["quic-streams"]);
        let e = quic_go_with("\"--mode={mode}\", ", "").unwrap_err();
        assert!(e.message.contains("{mode}"), "{e}");
        let e = quic_go_with("server-args", "server-argz").unwrap_err();
        assert!(e.message.contains("server-argz"), "{e}");
    }

    #[test]
    fn a_built_in_stack_is_found_by_the_name_its_file_carries() {
        for (file, _) in BUILTIN {
            let name = file.strip_suffix(".toml").unwrap();
            let d = StackDef::find(name).unwrap();
            assert_eq!(d.name, name, "{file} names its stack otherwise");
            assert_eq!(d.source, Source::Builtin(file));
        }
        assert!(StackDef::find("no-such-stack").is_err());
    }
}
