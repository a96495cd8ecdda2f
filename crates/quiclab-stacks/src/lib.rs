//! The stack registry: every stack an arm can name, what it speaks, the knobs it takes, the
//! workloads it runs, and how a trial starts its server and its client.
//!
//! Contract: the one home of stack identity. It knows nothing of plans, trials or the store:
//! the runner (`quiclab-runner`, which re-exports it as `stacks`) asks it, with a typed
//! request (`quiclab_model::task`) for what a client must do.
//!
//! A stack is one module here behind the [`Stack`] trait and one line in `BUILTIN`, or a stack
//! file ([`external`]: its endpoints are other programs). Nothing
//! outside a stack's own module asks which stack it is: the plan parser checks an arm's keys
//! against the stack's [`Stack::knobs`] and its workload against [`Stack::capabilities`], the
//! trial asks the stack for its [`Launch`]es, and the report reads the labels and caveats the
//! stack gave the arm.
//!
//! Plans name a stack by its HTTP version (`http = "3"` is the default HTTP/3 stack, see
//! [`for_http`]) or explicitly (`stack = "quinn"`); an arm may pair a `server-stack` with a
//! different `client-stack` when both speak its HTTP version.

pub mod chrome;
mod coded;
pub mod external;
pub mod own;
mod quinn;
mod s2n;
pub mod serve;
mod tcp;
mod tcp_plain;

pub use own::Measured;
pub use quinn::quic_options;

use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use quiclab_endpoint::tls::KxGroup;
pub use quiclab_model::budget::SenderRecord;
use quiclab_model::record::{HttpVersion, Transport};
use quiclab_model::task::{
    Ask, ClientTask, Connection, Program, Recording, Request, ServerTask, ServerWrites, Task,
};
use quiclab_quic as quic;
use quiclab_telemetry::Mode;

/// The stacks built into quiclab, in the order help texts list them. The first stack that
/// speaks an HTTP version is that version's default (what `http = "..."` alone means).
static BUILTIN: &[&dyn Stack] = &[
    &tcp::Tcp,
    &quinn::Quinn,
    &coded::Coded,
    &tcp_plain::TcpPlain,
    &chrome::Chrome,
    &s2n::S2n,
];

/// Every stack: the built-in ones, then the external stacks (the stack files shipped with
/// quiclab, then those registered from a user's files), in the order help texts list them.
pub fn all() -> Vec<&'static dyn Stack> {
    let mut out = BUILTIN.to_vec();
    out.extend(external::registered());
    out
}

/// The first stack of [`all`] that `is` picks, reading the stack files only when no built-in
/// stack does (an endpoint of quiclab's own starts without parsing them).
fn first(is: impl Fn(&dyn Stack) -> bool) -> Option<&'static dyn Stack> {
    BUILTIN
        .iter()
        .copied()
        .find(|s| is(*s))
        .or_else(|| external::registered().into_iter().find(|s| is(*s)))
}

/// The stack called `name`.
pub fn find(name: &str) -> Option<&'static dyn Stack> {
    first(|s| s.name() == name)
}

/// The stack a task names: one registered, or the one its stack file defines (read and
/// registered now: a user's stack beside a plan, run by an endpoint the trial started).
pub fn of_task(name: &str, program: &Program) -> Result<&'static dyn Stack, String> {
    if let Some(file) = &program.stack_file {
        let def = quiclab_external::StackDef::load(file).map_err(|e| e.to_string())?;
        if def.name != name {
            return Err(format!(
                "stack file {} defines stack {:?}, not {name:?}",
                file.display(),
                def.name
            ));
        }
        return external::register(def);
    }
    find(name).ok_or_else(|| format!("stack {name:?} is not known; known: {}", names()))
}

/// The default stack for an HTTP version (`http = "3"` alone).
pub fn for_http(http: HttpVersion) -> Option<&'static dyn Stack> {
    first(|s| s.http().contains(&http))
}

/// The stack that carries a telemetry mode when the arm names none.
pub fn for_mode(mode: Mode) -> Option<&'static dyn Stack> {
    first(|s| s.telemetry_modes().contains(&mode))
}

/// Every stack's name, for messages.
pub fn names() -> String {
    all()
        .iter()
        .map(|s| format!("{:?}", s.name()))
        .collect::<Vec<_>>()
        .join(", ")
}

/// A transport stack: an implementation of a transport and the HTTP versions it speaks.
pub trait Stack: Sync {
    /// The name plans use (`stack = "NAME"`).
    fn name(&self) -> &'static str;
    fn transport(&self) -> Transport;
    /// The HTTP versions it speaks (for the coded transport, its own request framing).
    fn http(&self) -> &'static [HttpVersion];
    /// What it is made of, with versions (a dry run names it beside each arm).
    fn implementation(&self) -> &'static str;
    /// The knobs an arm of this stack may set, in the order a trial's configuration lists them.
    fn knobs(&self) -> &'static [&'static Knob];
    /// What its client can do (so which workloads it runs: each needs one of these).
    fn capabilities(&self) -> &'static [Capability];
    /// Its server serves what a client of this capability asks (by default: what its own
    /// client does).
    fn serves(&self, c: Capability) -> bool {
        Capability::any_covers(self.capabilities(), c)
    }
    /// How telemetry flushes may travel over it (none: it does not run telemetry).
    fn telemetry_modes(&self) -> &'static [Mode] {
        &[]
    }
    /// It resumes TLS sessions (and sends 0-RTT where its transport has it) when asked.
    fn resumes(&self) -> bool;
    /// Checks an arm's knobs together (each was checked alone already); the caveats that must
    /// travel with the arm's results.
    fn check(&self, _knobs: &[(String, String)]) -> Result<Vec<String>, String> {
        Ok(Vec::new())
    }
    /// The arm's label when the plan gives none.
    fn label(&self, http: HttpVersion, mode: Option<Mode>, knobs: &[(String, String)]) -> String;
    /// Its knobs (those reaching one endpoint) parsed into the typed settings its endpoints
    /// take, as a task carries them (the stack's own serde type, which its `run_client` and
    /// `run_server` read); `null` for a stack whose program takes its knobs as text (the task's
    /// `knobs`). Called where a task is made; a plan's check calls it for every arm, so a
    /// trial's cannot fail.
    fn settings(&self, knobs: &[(String, String)]) -> anyhow::Result<serde_json::Value> {
        let _ = knobs;
        Ok(serde_json::Value::Null)
    }
    /// How a trial starts the server.
    fn server(&self, arm: &ArmStack, t: &Endpoint, out: ServerOutput) -> Launch;
    /// How a trial starts the client for a workload's request, or why this stack's client
    /// cannot do what it asks (a request its capabilities do not cover: see [`cannot`]).
    fn client(&self, arm: &ArmStack, t: &Endpoint, request: &Request) -> Result<Launch, String>;
    /// Runs this stack's client in this process for `task` (GETs, an upload or a page load):
    /// what it measured. For a stack whose client is quiclab's own code; others have none to run
    /// here (their client is another program, started through [`Stack::client`]).
    fn run_client(&self, task: &ClientTask) -> anyhow::Result<Measured> {
        let _ = task;
        anyhow::bail!("stack {:?} has no client of quiclab's own", self.name())
    }
    /// Runs this stack's server in this process for `task` until SIGINT or SIGTERM. For a
    /// stack whose server is quiclab's own code; others have none to run here.
    fn run_server(&self, task: &ServerTask) -> anyhow::Result<()> {
        let _ = task;
        anyhow::bail!("stack {:?} has no server of quiclab's own", self.name())
    }
    /// The scheme of the URLs its client is given: `https` (TLS, and QUIC's), or `http` for a
    /// stack without TLS.
    fn scheme(&self) -> &'static str {
        "https"
    }
    /// What a trial's identity records of it when an arm names it: its name, and for a stack
    /// described by a file, the file's digest and its programs' too (a changed file, a rebuilt
    /// driver or an upgraded program makes new trials).
    fn identity(&self) -> String {
        self.name().to_string()
    }
    /// What it needs that this machine lacks (programs not installed), each with what
    /// provides it; empty when it can run.
    fn missing(&self) -> Vec<String> {
        Vec::new()
    }
    /// Its client is a real browser: the report compares its page loads with quiclab's own
    /// page model's.
    fn browser(&self) -> bool {
        false
    }
    /// Its client takes the host (several processes and cores, as a browser's): its trials run
    /// alone, the campaign's other trials waiting meanwhile.
    fn takes_the_host(&self) -> bool {
        false
    }
    /// The server is ready for clients once its log says this.
    fn ready(&self, log: &str) -> bool {
        log.contains("listening")
    }
    /// What its server's record of the sending side offers the time budget (docs/explain.md):
    /// the budget reads these and no more, and says where a trial's record lacks one. None by
    /// default: the budget reads the link's log alone.
    fn sender_record(&self) -> &[SenderRecord] {
        &[]
    }
}

impl fmt::Debug for dyn Stack {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What a stack's client can do; a workload needs one of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Capability {
    /// GET URLs in order, each on a new connection, or one on the client's one connection
    /// (timed per request).
    Get,
    /// GET several URLs in order on one connection.
    GetReused,
    /// GET one URL on a new connection (a client that does [`Capability::Get`] does this too).
    GetOne,
    /// POST a number of bytes to a URL instead.
    Upload,
    /// Load a web page as a browser does (`quiclab page`).
    PageLoad,
    /// Send telemetry units in one of its telemetry modes (`quiclab telemetry`).
    Telemetry,
    /// Pass a request's response delay to its server, whose server then holds the response
    /// that long (quiclab's own servers: `GET /bytes/N?delay-us=D`).
    ResponseDelay,
}

impl Capability {
    /// What a stack with it does, for messages.
    pub fn what(self) -> &'static str {
        match self {
            Capability::Get => "GET URLs in order",
            Capability::GetReused => "GET several URLs on one connection",
            Capability::GetOne => "GET one URL",
            Capability::Upload => "upload",
            Capability::PageLoad => "load a page",
            Capability::Telemetry => "send telemetry",
            Capability::ResponseDelay => "have its server hold a response (response-delay)",
        }
    }

    /// A stack that has this capability does what `need` asks.
    pub fn covers(self, need: Capability) -> bool {
        self == need || (self == Capability::Get && need == Capability::GetOne)
    }

    /// Some of `have` covers `need`.
    pub fn any_covers(have: &[Capability], need: Capability) -> bool {
        have.iter().any(|c| c.covers(need))
    }
}

/// What an arm asks of a stack: the HTTP version, the telemetry mode (telemetry arms) and the
/// knobs as normalised.
#[derive(Debug, Clone, Copy)]
pub struct ArmStack<'a> {
    pub http: HttpVersion,
    pub mode: Option<Mode>,
    pub knobs: &'a [(String, String)],
}

impl ArmStack<'_> {
    pub fn knob(&self, key: &str) -> Option<&str> {
        knob(self.knobs, key)
    }
}

// the value of `key` among normalised knobs
pub use quiclab_model::task::knob;

/// What a trial gives both endpoints.
#[derive(Debug, Clone, Copy)]
pub struct Endpoint<'a> {
    /// The quiclab binary (quiclab's own endpoints are its subcommands).
    pub bin: &'a Path,
    /// The server writes its certificate here; the client trusts it.
    pub cert: &'a Path,
    /// The smallest round trip the path can deliver (`LinkConfig::rtt_floor`: jitter counted):
    /// RTT samples below it are impossible.
    pub path_min_rtt: Duration,
    /// Where a qlog per QUIC connection goes; `None` keeps none.
    pub qlog_dir: Option<&'a Path>,
    /// The trial's directory (an external stack's endpoints keep their files under it).
    pub dir: &'a Path,
    /// The object sizes the trial's requests ask for (a server of static files writes them).
    pub objects: &'a [u64],
    /// A folder of files the server serves besides its routes (`quiclab serve --root`): the
    /// real web content of a page trial, for a browser.
    pub root: Option<&'a Path>,
}

/// What the server writes for the trial.
#[derive(Debug, Clone, Copy)]
pub enum ServerOutput<'a> {
    /// Its sending side's timeline (JSON lines of timeline samples).
    Timeline(&'a Path),
    /// The telemetry units it received (JSON lines).
    Units(&'a Path),
}

/// A process to start in a namespace.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Launch {
    pub program: PathBuf,
    pub args: Vec<String>,
    /// Variables set for it besides the trial's own.
    pub env: Vec<(String, String)>,
    /// Sysctls of its namespace written just before it starts: (path under /proc/sys, value).
    pub sysctls: Vec<(String, String)>,
    /// It is handed an inotify instance that the trial holds until it has stopped
    /// (`quiclab_netns::watch`), so that its exit does not wait for the kernel's close of
    /// one: for a program that watches a directory (an external stack's qlog files).
    pub inotify: bool,
}

/// Which endpoint a knob reaches: its value travels in that endpoint's task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Server,
    Client,
    Both,
    /// Placed by the stack's own command templates (an external stack's knob).
    Template,
}

/// One knob an arm may set.
#[derive(Debug)]
pub struct Knob {
    pub key: &'static str,
    pub side: Side,
    pub help: &'static str,
    /// Normalises the value or says what is allowed.
    pub check: Check,
    /// Telemetry arms take it too.
    pub telemetry: bool,
}

/// How a knob's value is checked.
#[derive(Debug)]
pub enum Check {
    /// By a function of the stack that defines the knob.
    Fn(fn(&str) -> Result<String, String>),
    /// As an external stack's file says.
    External(&'static quiclab_external::def::KnobDef),
}

impl Knob {
    /// The value normalised, or what is allowed.
    pub fn check(&self, v: &str) -> Result<String, String> {
        match &self.check {
            Check::Fn(f) => f(v),
            Check::External(def) => def.check(v),
        }
    }
}

/// Every knob of every stack, once per key (the first stack's), in registry order.
pub fn all_knobs() -> Vec<&'static Knob> {
    let mut out: Vec<&'static Knob> = Vec::new();
    for s in all() {
        for k in s.knobs() {
            if !out.iter().any(|o| o.key == k.key) {
                out.push(k);
            }
        }
    }
    out
}

/// How a trial starts a server of quiclab's own: `quiclab endpoint --task` with the server's
/// task ([`server_task`]), listening on `listen`.
pub(crate) fn quiclab_server(
    stack: &dyn Stack,
    arm: &ArmStack,
    t: &Endpoint,
    out: ServerOutput,
    listen: SocketAddr,
) -> Launch {
    endpoint_launch(t, &Task::Server(server_task(stack, arm, t, out, listen)))
}

/// The address quiclab's own servers listen on: port 443 (HTTPS and QUIC) of every address.
pub(crate) const HTTPS_LISTEN: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED), 443);

/// A server's handshake limit on a path of no delay.
const SERVER_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// What a trial hands a server of quiclab's own: the stack, where it listens, the arm's knobs
/// that reach the server, where it writes its certificate and output, the web content it
/// serves, and what it records against the path.
pub fn server_task(
    stack: &dyn Stack,
    arm: &ArmStack,
    t: &Endpoint,
    out: ServerOutput,
    listen: SocketAddr,
) -> ServerTask {
    // the limit on a slow handshake (against idle connections) grows with the path: a TLS
    // handshake over TCP takes two round trips and more when a packet is lost; whole ms
    let handshake = SERVER_HANDSHAKE_TIMEOUT + t.path_min_rtt * 10;
    let (knobs, settings) = typed_arm(stack, server_knobs(stack, arm.knobs));
    ServerTask {
        stack: stack.name().to_string(),
        listen,
        knobs,
        settings,
        write_cert: t.cert.to_path_buf(),
        handshake_timeout_us: handshake.as_millis() as u64 * 1000,
        root: t.root.map(Path::to_path_buf),
        writes: match out {
            ServerOutput::Timeline(p) => ServerWrites::Timeline(p.to_path_buf()),
            ServerOutput::Units(p) => ServerWrites::Units(p.to_path_buf()),
        },
        recording: recording(t),
        objects: Vec::new(),
        program: Program::default(),
    }
}

/// An endpoint's knobs as its task carries them (`knobs`, `settings`): as `stack`'s typed
/// settings, or as text for a stack that has none.
pub fn typed(
    stack: &dyn Stack,
    knobs: Vec<(String, String)>,
) -> anyhow::Result<(Vec<(String, String)>, serde_json::Value)> {
    let settings = stack.settings(&knobs)?;
    Ok(if settings.is_null() {
        (knobs, settings)
    } else {
        (Vec::new(), settings)
    })
}

/// [`typed`] for an arm's knobs, which its plan's check parsed already (`Stack::settings`):
/// the same knobs parse again here.
fn typed_arm(
    stack: &dyn Stack,
    knobs: Vec<(String, String)>,
) -> (Vec<(String, String)>, serde_json::Value) {
    let name = stack.name();
    let shown = format!("{knobs:?}");
    typed(stack, knobs).unwrap_or_else(|e| panic!("stack {name:?}: knobs {shown}: {e:#}"))
}

/// What an endpoint of quiclab's own records against the trial's path.
fn recording(t: &Endpoint) -> Recording {
    Recording {
        path_min_rtt_us: (!t.path_min_rtt.is_zero()).then_some(t.path_min_rtt.as_micros() as u64),
        qlog_dir: t.qlog_dir.map(Path::to_path_buf),
        ..Default::default()
    }
}

/// `quiclab endpoint --task` with `task`, as JSON.
fn endpoint_launch(t: &Endpoint, task: &Task) -> Launch {
    let json = serde_json::to_string(task).expect("a task is plain data");
    Launch {
        program: t.bin.to_path_buf(),
        args: vec!["endpoint".into(), "--task".into(), json],
        ..Launch::default()
    }
}

/// The knobs among `knobs` that reach `stack`'s server (not only its client), in order.
pub fn server_knobs(stack: &dyn Stack, knobs: &[(String, String)]) -> Vec<(String, String)> {
    knobs_reaching(stack, knobs, |side| side != Side::Client)
}

/// The knobs among `knobs` that `stack` takes and whose flag `reaches` a side, in order.
fn knobs_reaching(
    stack: &dyn Stack,
    knobs: &[(String, String)],
    reaches: impl Fn(Side) -> bool,
) -> Vec<(String, String)> {
    knobs
        .iter()
        .filter(|(key, _)| {
            stack
                .knobs()
                .iter()
                .any(|k| k.key == key && reaches(k.side))
        })
        .cloned()
        .collect()
}

/// How a trial starts a client of quiclab's own for `request`, refused unless `stack`'s
/// capabilities cover it: `quiclab endpoint --task` with the task ([`client_task`]).
pub(crate) fn quiclab_client(
    stack: &dyn Stack,
    arm: &ArmStack,
    t: &Endpoint,
    request: &Request,
) -> Result<Launch, String> {
    if !Capability::any_covers(stack.capabilities(), needs(&request.ask)) {
        return Err(cannot(stack.name(), &request.ask));
    }
    Ok(endpoint_launch(
        t,
        &Task::Client(client_task(stack, arm, t, request)),
    ))
}

/// What a trial hands a client of quiclab's own: the stack, the arm's knobs that reach the
/// client, the certificate the server writes (none for a stack without TLS), what to record and
/// the request.
pub fn client_task(
    stack: &dyn Stack,
    arm: &ArmStack,
    t: &Endpoint,
    request: &Request,
) -> ClientTask {
    let (knobs, settings) = typed_arm(stack, client_knobs(stack, arm.knobs));
    ClientTask {
        stack: stack.name().to_string(),
        http: arm.http,
        mode: arm.mode.map(|m| m.name().to_string()),
        knobs,
        settings,
        cacert: (stack.scheme() == "https").then(|| t.cert.to_path_buf()),
        recording: recording(t),
        request: request.clone(),
        program: Program::default(),
    }
}

/// The knobs among `knobs` that reach `stack`'s client (not only its server), in order.
pub fn client_knobs(stack: &dyn Stack, knobs: &[(String, String)]) -> Vec<(String, String)> {
    knobs_reaching(stack, knobs, |side| side != Side::Server)
}

/// The capability a client needs for `ask`.
pub fn needs(ask: &Ask) -> Capability {
    match ask {
        Ask::Get(g) if g.is_one_new() => Capability::GetOne,
        Ask::Get(g) if g.connection == Connection::Reuse && g.requests() > 1 => {
            Capability::GetReused
        }
        Ask::Get(_) => Capability::Get,
        Ask::Upload { .. } => Capability::Upload,
        Ask::Page { .. } => Capability::PageLoad,
        Ask::Telemetry(_) => Capability::Telemetry,
    }
}

/// How a trial starts `stack`'s client for `request`: what [`Stack::client`] launches, once
/// the stack's capabilities cover every property of the request as well as its kind (a
/// property a stack does not honour is refused by name, never dropped).
pub fn launch_client(
    stack: &dyn Stack,
    arm: &ArmStack,
    t: &Endpoint,
    request: &Request,
) -> Result<Launch, String> {
    honours(stack, request)?;
    stack.client(arm, t, request)
}

/// Refuses, by name, a request with a property `stack`'s client does not honour (a client of
/// quiclab's own checks its task with it too).
pub fn honours(stack: &dyn Stack, request: &Request) -> Result<(), String> {
    if request.response_delay_us > 0 {
        offers(stack, Capability::ResponseDelay, false)?;
    }
    Ok(())
}

/// Refuses, by name, a stack whose client (or, with `server`, whose server) lacks `c`, and
/// names the stacks that have it.
pub fn offers(stack: &dyn Stack, c: Capability, server: bool) -> Result<(), String> {
    let has = |s: &dyn Stack| {
        if server {
            s.serves(c)
        } else {
            Capability::any_covers(s.capabilities(), c)
        }
    };
    if has(stack) {
        return Ok(());
    }
    let can: Vec<&str> = all()
        .into_iter()
        .filter(|s| has(*s))
        .map(|s| s.name())
        .collect();
    Err(format!(
        "stack {:?} cannot {}{}; stacks that can: {}",
        stack.name(),
        c.what(),
        if server { " as a server" } else { "" },
        can.join(", ")
    ))
}

/// Why `stack`'s client cannot do what `ask` asks (a plan's capability check keeps such
/// requests from reaching it; a trial that still gets one fails with this).
pub fn cannot(stack: &str, ask: &Ask) -> String {
    let what = match ask {
        Ask::Get(g) if g.connection == Connection::Reuse && g.requests() > 1 => {
            "GET several URLs on one connection"
        }
        Ask::Get(_) => "GET these URLs",
        Ask::Upload { .. } => "upload",
        Ask::Page { .. } => "load a page",
        Ask::Telemetry(_) => "send telemetry",
    };
    format!("stack {stack:?}'s client cannot {what}")
}

/// How a telemetry arm's stack is named in labels, for an implementation.
pub(crate) fn telemetry_label(mode: Mode, implementation: &str) -> String {
    match mode {
        Mode::Tcp => format!("telemetry over TLS/TCP ({implementation})"),
        Mode::QuicStream => format!("telemetry over one QUIC stream ({implementation})"),
        Mode::QuicStreams => format!("telemetry over a QUIC stream per flush ({implementation})"),
        Mode::QuicDatagrams => {
            format!("telemetry in QUIC datagrams, one per flush ({implementation})")
        }
    }
}

/// A stack's label with the arm's congestion controller, or what runs without one.
pub(crate) fn with_cc(stack: &str, cc: Option<&str>, default: &str) -> String {
    format!("{stack}, {}", cc.unwrap_or(default))
}

// ---- knobs shared by the stacks that use TLS ----

pub(crate) fn check_on_off(v: &str) -> Result<String, String> {
    quic::parse_on_off("value", v)
        .map(|b| if b { "on" } else { "off" }.to_string())
        .map_err(|_| "allowed: on or off".into())
}

pub(crate) fn check_bool(v: &str) -> Result<String, String> {
    match v {
        "true" | "false" => Ok(v.to_string()),
        _ => Err("allowed: true or false".into()),
    }
}

fn check_groups(v: &str) -> Result<String, String> {
    KxGroup::parse_list(v)
        .map(|g| g.iter().map(|g| g.name()).collect::<Vec<_>>().join(","))
        .map_err(|e| format!("{e}; allowed: a list of x25519, p256, p384"))
}

pub(crate) static GROUPS: Knob = Knob {
    key: "groups",
    side: Side::Client,
    help: "client key-exchange groups in order; a key share for the first only",
    telemetry: true,
    check: Check::Fn(check_groups),
};

pub(crate) static SERVER_GROUPS: Knob = Knob {
    key: "server-groups",
    side: Side::Server,
    help: "groups the server accepts, in order of preference",
    telemetry: true,
    check: Check::Fn(check_groups),
};

/// The longest response delay an arm may plant.
pub const MAX_RESPONSE_DELAY: std::time::Duration = std::time::Duration::from_secs(60);

fn check_response_delay(v: &str) -> Result<String, String> {
    quiclab_link::units::parse_duration(v)
        .ok()
        .filter(|d| *d <= MAX_RESPONSE_DELAY)
        .map(|d| format!("{}us", d.as_micros()))
        .ok_or_else(|| "allowed: a duration up to 60s, e.g. 200ms".into())
}

/// A think time planted in the arm's server: the client asks for it with each request (as the
/// single-object workload's `response-delay` does for every arm), and the server holds the
/// response that long after the request arrives.
pub(crate) static RESPONSE_DELAY: Knob = Knob {
    key: "response-delay",
    side: Side::Client,
    help: "the server holds each response this long after its request arrives (e.g. 200ms): \
           a server's think time planted on purpose; single-object plans only",
    telemetry: false,
    check: Check::Fn(check_response_delay),
};

/// The response delay an arm's knobs plant, µs (0: none).
pub fn response_delay_us(knobs: &[(String, String)]) -> u64 {
    knobs
        .iter()
        .find(|(k, _)| k == RESPONSE_DELAY.key)
        .and_then(|(_, v)| quiclab_link::units::parse_duration(v).ok())
        .map_or(0, |d| d.as_micros() as u64)
}

pub(crate) static RESUME: Knob = Knob {
    key: "resume",
    side: Side::Client,
    help: "resume TLS sessions (and 0-RTT over QUIC) across connections: true or false",
    telemetry: false,
    check: Check::Fn(check_bool),
};

#[cfg(test)]
mod tests {
    use super::*;
    use quiclab_model::task::Get;

    #[test]
    fn every_http_version_and_telemetry_mode_has_a_default_stack() {
        for http in [
            HttpVersion::Http11,
            HttpVersion::Http2,
            HttpVersion::Http3,
            HttpVersion::Coded,
        ] {
            let s = for_http(http).expect("a stack");
            assert!(s.http().contains(&http), "{}", s.name());
        }
        for mode in Mode::ALL {
            let s = for_mode(mode).expect("a stack");
            assert_eq!(s.transport() == Transport::Quic, mode.is_quic(), "{mode:?}");
        }
        assert_eq!(for_http(HttpVersion::Http3).unwrap().name(), "quinn");
    }

    #[test]
    fn quinn_s_flow_control_windows_are_knobs_whose_checked_values_its_settings_take() {
        let quinn = find("quinn").unwrap();
        let knob = |key: &str| quinn.knobs().iter().find(|k| k.key == key).unwrap();
        let stream = knob("quic-stream-window").check("16kb").unwrap();
        let conn = knob("quic-conn-window").check("1MiB").unwrap();
        let v = quinn
            .settings(&[
                ("quic-stream-window".into(), stream),
                ("quic-conn-window".into(), conn),
            ])
            .unwrap();
        assert_eq!(v["quic"]["stream_receive_window"], 16_000, "{v}");
        assert_eq!(v["quic"]["receive_window"], 1 << 20, "{v}");
        let e = knob("quic-stream-window").check("100b").unwrap_err();
        assert!(e.contains("from 1200 to 1 GiB"), "{e}");
    }

    #[test]
    fn names_are_unique_and_knobs_of_one_key_are_one_knob() {
        let stacks = all();
        for (i, s) in stacks.iter().enumerate() {
            assert!(
                stacks[..i].iter().all(|o| o.name() != s.name()),
                "{} twice",
                s.name()
            );
            assert!(find(s.name()).is_some());
        }
        // a key reaches the same endpoint wherever a built-in stack takes it, and stacks of one
        // implementation share one definition of it (same check); another implementation
        // checks its own values (quic-cc: quinn's controllers, s2n-quic's), as an external
        // stack's file does
        let knobs = || {
            BUILTIN
                .iter()
                .flat_map(|s| s.knobs().iter().map(move |k| (s.implementation(), *k)))
        };
        for (ia, a) in knobs() {
            for (ib, b) in knobs() {
                if a.key == b.key {
                    assert_eq!(a.side, b.side, "{} reaches two sides", a.key);
                    assert!(ia != ib || std::ptr::eq(a, b), "{} defined twice", a.key);
                }
            }
        }
        assert!(find("nope").is_none());
    }

    /// Every kind of request, as the workloads ask them.
    fn asks() -> Vec<Ask> {
        let url = |n: u64| format!("https://198.18.0.2/bytes/{n}");
        vec![
            Ask::Get(Get::one(url(1000))),
            Ask::Get(Get {
                urls: vec![url(1000)],
                connection: Connection::New,
                repeat: 5,
                resume: true,
            }),
            Ask::Get(Get {
                urls: vec![url(1000), url(2000)],
                connection: Connection::Reuse,
                repeat: 1,
                resume: false,
            }),
            Ask::Get(Get {
                urls: vec![url(1 << 40)],
                connection: Connection::Reuse,
                repeat: 1,
                resume: false,
            }),
            Ask::Upload {
                to: Get::one("https://198.18.0.2/upload".into()),
                bytes: 1000,
            },
            Ask::Page {
                url: "https://198.18.0.2".into(),
                page: Some("small".into()),
                priorities: true,
            },
            Ask::Telemetry(quiclab_model::task::Telemetry {
                url: "https://198.18.0.2".into(),
                units_per_second: 100,
                flush_units: 10,
                duration_us: 1_000_000,
                drain_us: 1_000_000,
                realtime: true,
            }),
        ]
    }

    /// A stack's client launches exactly the requests its capabilities cover and refuses the
    /// others by its name, so that the plan's capability check and what a trial starts agree.
    #[test]
    fn a_client_does_what_its_capabilities_say_and_refuses_the_rest_by_name() {
        let dir = Path::new("/results/x");
        let endpoint = Endpoint {
            bin: Path::new("/opt/quiclab/quiclab"),
            cert: &dir.join("cert.pem"),
            path_min_rtt: Duration::from_millis(20),
            qlog_dir: None,
            dir,
            objects: &[],
            root: None,
        };
        let mut launched = 0;
        for stack in all() {
            for ask in asks() {
                let http = stack.http()[0];
                let mode = match &ask {
                    Ask::Telemetry(_) => stack.telemetry_modes().first().copied(),
                    _ => None,
                };
                let arm = ArmStack {
                    http,
                    mode,
                    knobs: &[],
                };
                let request = Request::recorded(ask.clone());
                let covered = Capability::any_covers(stack.capabilities(), needs(&ask));
                match stack.client(&arm, &endpoint, &request) {
                    Ok(l) => {
                        assert!(
                            covered,
                            "{}: launched {ask:?} beyond its capabilities",
                            stack.name()
                        );
                        assert!(
                            !l.args.is_empty() || l.program != endpoint.bin,
                            "{}",
                            stack.name()
                        );
                        launched += 1;
                    }
                    Err(e) => {
                        assert!(!covered, "{}: refused {ask:?}: {e}", stack.name());
                        assert!(e.contains(&format!("{:?}", stack.name())), "{e}");
                    }
                }
            }
        }
        assert!(launched >= 20, "{launched}");
        // the refusals that matter: a browser fetches one object only, an external client
        // opens a connection per request
        let chrome = find("chrome").unwrap();
        assert!(!Capability::any_covers(
            chrome.capabilities(),
            Capability::Get
        ));
        for s in all().into_iter().filter(|s| s.identity() != s.name()) {
            assert!(
                !Capability::any_covers(s.capabilities(), Capability::GetReused),
                "{}",
                s.name()
            );
        }
    }

    #[test]
    fn a_response_delay_reaches_the_clients_that_pass_it_and_is_refused_by_the_rest() {
        let dir = Path::new("/d");
        let endpoint = Endpoint {
            bin: Path::new("/bin/quiclab"),
            cert: &dir.join("cert.pem"),
            path_min_rtt: Duration::from_millis(20),
            qlog_dir: None,
            dir,
            objects: &[1000],
            root: None,
        };
        let mut request =
            Request::recorded(Ask::Get(Get::one("https://198.18.0.2/bytes/1000".into())));
        request.response_delay_us = 50_000;
        let mut passed = Vec::new();
        for stack in all() {
            let arm = ArmStack {
                http: stack.http()[0],
                mode: None,
                knobs: &[],
            };
            let can = Capability::any_covers(stack.capabilities(), Capability::ResponseDelay);
            match launch_client(stack, &arm, &endpoint, &request) {
                Ok(l) => {
                    assert!(can, "{}", stack.name());
                    let Ok(Task::Client(task)) = serde_json::from_str::<Task>(&l.args[2]) else {
                        panic!("{}: {:?}", stack.name(), l.args)
                    };
                    assert_eq!(task.request.response_delay_us, 50_000);
                    passed.push(stack.name());
                }
                Err(e) => {
                    assert!(!can, "{}: {e}", stack.name());
                    assert!(e.contains("cannot have its server hold a response"), "{e}");
                }
            }
            // without the delay, nothing changes for any stack
            let plain = Request::recorded(request.ask.clone());
            assert_eq!(
                launch_client(stack, &arm, &endpoint, &plain),
                stack.client(&arm, &endpoint, &plain)
            );
        }
        assert_eq!(passed, ["tcp", "quinn", "tcp-plain", "s2n-quic"]);
        // and a server of documents does not claim to hold one
        let ngtcp2 = find("ngtcp2").unwrap();
        assert!(offers(ngtcp2, Capability::ResponseDelay, true).is_err());
        assert!(offers(find("quinn").unwrap(), Capability::ResponseDelay, true).is_ok());
    }

    /// A GET of quiclab's own stacks is one task for `quiclab endpoint`: the knobs that reach
    /// the client (not the server's), the certificate, the path's floor and the request.
    #[test]
    fn quiclab_s_own_gets_are_tasks_with_the_client_s_knobs() {
        let dir = Path::new("/results/x");
        let endpoint = Endpoint {
            bin: Path::new("/opt/quiclab/quiclab"),
            cert: &dir.join("cert.pem"),
            path_min_rtt: Duration::from_millis(20),
            qlog_dir: Some(dir),
            dir,
            objects: &[],
            root: None,
        };
        let knobs = vec![
            ("quic-cc".to_string(), "bbr".to_string()),
            ("server-groups".to_string(), "p256".to_string()),
            ("quic-scheduling".to_string(), "fifo".to_string()),
            ("groups".to_string(), "x25519".to_string()),
        ];
        let arm = ArmStack {
            http: HttpVersion::Http3,
            mode: None,
            knobs: &knobs,
        };
        let request = Request::recorded(Ask::Get(Get::one("https://198.18.0.2/bytes/9".into())));
        // a page load is a task too
        let page = Request::recorded(Ask::Page {
            url: "https://198.18.0.2".into(),
            page: None,
            priorities: true,
        });
        let l = for_http(HttpVersion::Http2)
            .unwrap()
            .client(&arm, &endpoint, &page)
            .unwrap();
        let task: ClientTask = serde_json::from_str(&l.args[2]).unwrap();
        assert_eq!(task.request, page);
        let quinn = for_http(HttpVersion::Http3).unwrap();
        let l = quinn.client(&arm, &endpoint, &request).unwrap();
        assert_eq!(l.args[..2], ["endpoint", "--task"]);
        let task: ClientTask = serde_json::from_str(&l.args[2]).unwrap();
        assert_eq!(task.stack, quinn.name());
        // the client's knobs, typed: its groups and QUIC options, not the server's groups
        assert_eq!(task.knobs, []);
        assert_eq!(task.settings["groups"], serde_json::json!(["x25519"]));
        assert_eq!(task.settings.get("server_groups"), None);
        let quic: quic::QuicOptions =
            serde_json::from_value(task.settings["quic"].clone()).unwrap();
        assert_eq!(quic, quic_options(&client_knobs(quinn, &knobs)).unwrap());
        assert_eq!(quic.congestion.name(), "bbr");
        assert_eq!(task.cacert.as_deref(), Some(dir.join("cert.pem").as_path()));
        assert_eq!(task.recording.path_min_rtt_us, Some(20_000));
        assert_eq!(task.recording.qlog_dir.as_deref(), Some(dir));
        assert_eq!(task.request, request);
        // a stack without TLS trusts nothing
        let plain = all().into_iter().find(|s| s.scheme() == "http").unwrap();
        let arm = ArmStack {
            http: HttpVersion::Http11,
            mode: None,
            knobs: &[],
        };
        let l = plain.client(&arm, &endpoint, &request).unwrap();
        let task: ClientTask = serde_json::from_str(&l.args[2]).unwrap();
        assert_eq!(task.cacert, None);
    }

    /// An endpoint reads a user's stack from the file its task names, and refuses a file that
    /// defines another stack than the task's.
    #[test]
    fn a_task_s_stack_file_is_read_and_must_define_the_task_s_stack() {
        let (_, ngtcp2) = quiclab_external::def::BUILTIN
            .iter()
            .find(|(f, _)| *f == "ngtcp2.toml")
            .unwrap();
        let text = ngtcp2.replacen("name = \"ngtcp2\"", "name = \"mine-from-a-task\"", 1);
        assert_ne!(&text, ngtcp2, "the built-in file names its stack");
        let file = std::env::temp_dir().join(format!("quiclab-stack-{}.toml", std::process::id()));
        std::fs::write(&file, text).unwrap();
        let program = Program {
            stack_file: Some(file.clone()),
            work_dir: None,
        };
        let other = of_task("ngtcp2", &program).err();
        let mine = of_task("mine-from-a-task", &program).map(|s| s.name());
        std::fs::remove_file(&file).unwrap();
        assert!(
            other.is_some_and(|e| e.contains("defines stack \"mine-from-a-task\", not \"ngtcp2\"")),
        );
        assert_eq!(mine, Ok("mine-from-a-task"));
        assert_eq!(
            find("mine-from-a-task").map(|s| s.name()),
            Some("mine-from-a-task")
        );
        // without a file, only registered stacks
        assert!(of_task("no-such-stack", &Program::default()).is_err());
    }

    #[test]
    fn knobs_reach_the_side_they_name() {
        let tcp = find("tcp").unwrap();
        let knobs = vec![
            ("tcp-cc".to_string(), "cubic".to_string()),
            ("groups".to_string(), "p256".to_string()),
            ("server-groups".to_string(), "x25519".to_string()),
            ("resume".to_string(), "true".to_string()),
            ("tfo".to_string(), "false".to_string()),
        ];
        let pairs = |v: &[(&str, &str)]| -> Vec<(String, String)> {
            v.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        assert_eq!(
            server_knobs(tcp, &knobs),
            pairs(&[
                ("tcp-cc", "cubic"),
                ("server-groups", "x25519"),
                ("tfo", "false")
            ])
        );
        assert_eq!(
            client_knobs(tcp, &knobs),
            pairs(&[
                ("tcp-cc", "cubic"),
                ("groups", "p256"),
                ("resume", "true"),
                ("tfo", "false")
            ])
        );
        // a knob the stack does not take reaches neither side
        let quinn = find("quinn").unwrap();
        assert_eq!(server_knobs(quinn, &knobs[..1]), Vec::new());
        assert_eq!(client_knobs(quinn, &knobs[..1]), Vec::new());
    }
}
