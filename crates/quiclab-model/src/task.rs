//! What a trial asks of its client, as data: a workload says *what* to fetch or send (a
//! [`Request`]); the client's stack says *how* (its program, its arguments), and refuses by
//! name what it cannot do.
//!
//! Every kind of request is a variant of [`Ask`], so a new kind does not compile until each
//! stack handles or refuses it. A property every stack must see (for example a priority) is a
//! field of [`Request`]: only the workload that sets it and the stacks that honour it change.

use std::net::SocketAddr;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::record::HttpVersion;

/// The largest body `GET /bytes/N` serves: 1 TB (bulk downloads run for a time, not to the end).
pub const MAX_BYTES: u64 = 1_000_000_000_000;

/// What a trial hands its client when the client is quiclab's own code (`quiclab endpoint
/// --task`), and what `quiclab get` makes of its flags: the same task runs the same code.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClientTask {
    /// The stack, by its registry name.
    pub stack: String,
    pub http: HttpVersion,
    /// A telemetry arm's mode, by name (`tcp`, `quic-stream`, ...).
    pub mode: Option<String>,
    /// The arm's knobs that reach the client, as text (key, value), in the arm's order: for a
    /// stack whose program takes them so (an external stack's templates place them); empty
    /// for a stack that takes `settings`.
    pub knobs: Vec<(String, String)>,
    /// The knobs of a stack of quiclab's own, parsed once where the task was made into the
    /// stack's typed settings (its own serde type), which its endpoint reads as they are.
    #[serde(default, skip_serializing_if = "serde_json::Value::is_null")]
    pub settings: serde_json::Value,
    /// PEM certificates to trust (none for `http://` URLs).
    pub cacert: Option<PathBuf>,
    pub recording: Recording,
    pub request: Request,
    /// Where a stack that is another program is found and keeps its files.
    #[serde(default, flatten)]
    pub program: Program,
}

/// What a trial hands its server when the server is quiclab's own code (`quiclab endpoint
/// --task`): the stack, where it listens, the knobs that reach the server, where it writes its
/// certificate and its output, and what it records.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServerTask {
    /// The stack, by its registry name.
    pub stack: String,
    /// The address it listens on (the IPv6 any address also accepts IPv4).
    pub listen: SocketAddr,
    /// The arm's knobs that reach the server, as text, in the arm's order: for a stack whose
    /// program takes them so; empty for a stack that takes `settings`.
    pub knobs: Vec<(String, String)>,
    /// The knobs of a stack of quiclab's own, parsed into its typed settings (as a client's).
    #[serde(default, skip_serializing_if = "serde_json::Value::is_null")]
    pub settings: serde_json::Value,
    /// The server makes a certificate for this run and writes it here (PEM) before it
    /// listens, for the client to trust.
    pub write_cert: PathBuf,
    /// How long a connection may take over its handshake, µs (idle connections cannot hold
    /// the server).
    pub handshake_timeout_us: u64,
    /// A folder of files served besides the routes (a page trial's web content).
    pub root: Option<PathBuf>,
    pub writes: ServerWrites,
    pub recording: Recording,
    /// The object sizes the trial's requests ask for: a server of static files writes them
    /// (`/bytes/N`) before it listens; quiclab's own servers make any on request.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub objects: Vec<u64>,
    /// Where a stack that is another program is found and keeps its files.
    #[serde(default, flatten)]
    pub program: Program,
}

/// What an endpoint whose stack is another program (a stack file's) needs besides the task;
/// empty for quiclab's own stacks.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Program {
    /// The stack file that defines the stack when it is not built in: the endpoint reads it
    /// (a user's stack beside a plan).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stack_file: Option<PathBuf>,
    /// Where the endpoint keeps its files: the program's output, its downloads or documents,
    /// its key and qlog files.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub work_dir: Option<PathBuf>,
}

/// What a trial's server writes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ServerWrites {
    /// Its sending side's timeline (JSON lines of timeline samples) to this file.
    Timeline(PathBuf),
    /// The telemetry units it receives (JSON lines) to this file.
    Units(PathBuf),
}

/// A task for `quiclab endpoint --task`: a client's or a server's.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "kebab-case")]
pub enum Task {
    Client(ClientTask),
    Server(ServerTask),
}

/// The value of knob `key` among `knobs` (key, value), if set.
pub fn knob<'a>(knobs: &'a [(String, String)], key: &str) -> Option<&'a str> {
    knobs
        .iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
}

/// What an endpoint records besides its output.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Recording {
    /// The path's minimum RTT, µs: RTT samples below it are impossible and counted.
    pub path_min_rtt_us: Option<u64>,
    /// A qlog file per QUIC connection goes here.
    pub qlog_dir: Option<PathBuf>,
    /// A browser's net-log (Chromium's) goes to this file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub netlog: Option<PathBuf>,
    /// A browser's standard error goes to this file (else beside its profile, removed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub browser_log: Option<PathBuf>,
}

/// What a workload asks a trial's client to do.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Request {
    pub ask: Ask,
    /// The client prints one JSON record per request (the trial's metrics read them). A timed
    /// phase, measured by the link and the clock instead, asks for none.
    pub records: bool,
    /// The server holds each response this long (µs) after the request has arrived: a think
    /// time planted on purpose (a slow application or backend), which a client stack passes
    /// to the server with the request. 0: none.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub response_delay_us: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl Request {
    /// `ask`, with a JSON record per request if `records`, and nothing else asked of it.
    pub fn new(ask: Ask, records: bool) -> Request {
        Request {
            ask,
            records,
            response_delay_us: 0,
        }
    }

    /// `ask`, with a JSON record per request.
    pub fn recorded(ask: Ask) -> Request {
        Request::new(ask, true)
    }

    /// `ask`, with no records (a timed phase).
    pub fn unrecorded(ask: Ask) -> Request {
        Request::new(ask, false)
    }
}

/// The kinds of request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Ask {
    /// GET URLs in order.
    Get(Get),
    /// POST `bytes` (the server's pattern) where and as `to` would GET; the server answers
    /// each with the count it received.
    Upload { to: Get, bytes: u64 },
    /// Load a web page as a browser does: `url` is the server's origin, `page` the page's
    /// manifest (a built-in name or a file; the client's default page when `None`), with RFC
    /// 9218 `priority` headers on its requests when `priorities` (a browser's client sends its
    /// own).
    Page {
        url: String,
        page: Option<String>,
        priorities: bool,
    },
    /// Send telemetry units to `url`.
    Telemetry(Telemetry),
}

/// GETs of URLs in order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Get {
    pub urls: Vec<String>,
    /// One connection for all requests, or a new one each.
    pub connection: Connection,
    /// The list is fetched this many times (at least 1).
    pub repeat: u32,
    /// Later connections resume the TLS session of an earlier one (0-RTT where the transport
    /// has it).
    pub resume: bool,
}

impl Get {
    /// One GET of `url` on a new connection.
    pub fn one(url: String) -> Get {
        Get {
            urls: vec![url],
            connection: Connection::New,
            repeat: 1,
            resume: false,
        }
    }

    /// How many requests it makes.
    pub fn requests(&self) -> u64 {
        self.urls.len() as u64 * u64::from(self.repeat.max(1))
    }

    /// It is one GET on a new connection (what a browser's page script does for one object).
    pub fn is_one_new(&self) -> bool {
        self.requests() == 1 && self.connection == Connection::New && !self.resume
    }
}

/// Which connection a request goes on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Connection {
    /// The client's one connection to the server.
    Reuse,
    /// A connection of its own.
    New,
}

impl Connection {
    /// As command lines and records write it.
    pub fn name(self) -> &'static str {
        match self {
            Connection::Reuse => "reuse",
            Connection::New => "new",
        }
    }
}

/// A telemetry run: units at a constant rate, flushed in groups, for a while, in the arm's
/// telemetry mode ([`ClientTask::mode`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Telemetry {
    pub url: String,
    pub units_per_second: u32,
    pub flush_units: u32,
    /// How long units are generated, µs.
    pub duration_us: u64,
    /// How long the sender waits after its last flush for the server to have everything, µs.
    pub drain_us: u64,
    /// The sender runs at a real-time priority (below the link emulator's), so that a busy
    /// host does not add its scheduling delays to every unit's latency.
    pub realtime: bool,
}

impl Telemetry {
    /// The drain of a run that names none: 10 s.
    pub const DEFAULT_DRAIN_US: u64 = 10_000_000;

    /// The units the run generates: its duration times its rate, rounded.
    pub fn units(&self) -> u64 {
        (self.duration_us as f64 / 1e6 * f64::from(self.units_per_second)).round() as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The server task of a task's JSON.
    fn server_of(json: &str) -> ServerTask {
        match serde_json::from_str::<Task>(json).unwrap() {
            Task::Server(s) => s,
            Task::Client(c) => panic!("a client's task: {c:?}"),
        }
    }

    #[test]
    fn a_task_says_its_role_and_round_trips_through_json() {
        let server = ServerTask {
            stack: "s".into(),
            listen: "[::]:443".parse().unwrap(),
            knobs: Vec::new(),
            settings: serde_json::json!({"tcp_cc": "cubic", "server_groups": ["p256"]}),
            write_cert: "/d/cert.pem".into(),
            handshake_timeout_us: 10_500_000,
            root: None,
            writes: ServerWrites::Timeline("/d/timeline.jsonl".into()),
            recording: Recording::default(),
            objects: Vec::new(),
            program: Program::default(),
        };
        let json = serde_json::to_string(&Task::Server(server.clone())).unwrap();
        assert!(
            json.starts_with(r#"{"role":"server","stack":"s""#),
            "{json}"
        );
        assert_eq!(
            serde_json::from_str::<Task>(&json).unwrap(),
            Task::Server(server)
        );
        // a task without typed settings or an external stack's program says none of them
        let bare = ServerTask {
            settings: serde_json::Value::Null,
            ..server_of(&json)
        };
        let json = serde_json::to_string(&bare).unwrap();
        for absent in ["settings", "objects", "stack_file", "work_dir"] {
            assert!(!json.contains(absent), "{json}");
        }
        // a task without its role is refused, not guessed
        assert!(serde_json::from_str::<Task>(r#"{"stack":"s"}"#).is_err());
    }

    #[test]
    fn a_client_task_round_trips_through_json_and_names_its_knobs() {
        let t = ClientTask {
            stack: "s".into(),
            http: HttpVersion::Http3,
            mode: None,
            knobs: vec![("quic-cc".into(), "bbr".into())],
            settings: serde_json::Value::Null,
            cacert: Some("/d/cert.pem".into()),
            recording: Recording {
                path_min_rtt_us: Some(20_000),
                qlog_dir: None,
                ..Default::default()
            },
            request: Request::recorded(Ask::Get(Get::one("https://h/bytes/1".into()))),
            program: Program::default(),
        };
        assert_eq!(knob(&t.knobs, "quic-cc"), Some("bbr"));
        let json = serde_json::to_string(&Task::Client(t.clone())).unwrap();
        assert_eq!(
            serde_json::from_str::<Task>(&json).unwrap(),
            Task::Client(t.clone())
        );
        let Ask::Get(_) = &t.request.ask else {
            panic!("a GET")
        };
        let run = Telemetry {
            url: String::new(),
            units_per_second: 1000,
            flush_units: 10,
            duration_us: 2_500_000,
            drain_us: 0,
            realtime: false,
        };
        assert_eq!(run.units(), 2500);
        // half a unit's interval rounds up to one unit; less generates none
        assert_eq!(
            Telemetry {
                duration_us: 500,
                ..run.clone()
            }
            .units(),
            1
        );
        assert_eq!(
            Telemetry {
                duration_us: 499,
                ..run
            }
            .units(),
            0
        );
        assert_eq!(knob(&t.knobs, "quic-gso"), None);
    }

    #[test]
    fn requests_count_urls_times_repeats() {
        let mut g = Get::one("https://h/bytes/1".into());
        assert_eq!(g.requests(), 1);
        assert!(g.is_one_new());
        g.repeat = 3;
        g.urls.push("https://h/bytes/2".into());
        assert_eq!(g.requests(), 6);
        assert!(!g.is_one_new());
        let mut r = Get::one("u".into());
        r.resume = true;
        assert!(!r.is_one_new(), "a resumed GET needs an earlier session");
        r.resume = false;
        r.connection = Connection::Reuse;
        assert!(!r.is_one_new());
    }

    #[test]
    fn a_request_round_trips_through_json_with_its_kind_named() {
        let r = Request::recorded(Ask::Telemetry(Telemetry {
            url: "https://10.0.0.2".into(),
            units_per_second: 100,
            flush_units: 10,
            duration_us: 5_000_000,
            drain_us: Telemetry::DEFAULT_DRAIN_US,
            realtime: true,
        }));
        let text = serde_json::to_string(&r).unwrap();
        assert!(text.contains(r#""kind":"telemetry""#), "{text}");
        assert_eq!(serde_json::from_str::<Request>(&text).unwrap(), r);
        let g = Request::unrecorded(Ask::Get(Get::one("u".into())));
        let text = serde_json::to_string(&g).unwrap();
        assert!(text.contains(r#""connection":"new""#), "{text}");
        assert_eq!(serde_json::from_str::<Request>(&text).unwrap(), g);
    }
}
