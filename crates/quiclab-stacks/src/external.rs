//! External stacks in the registry: a stack file ([`quiclab_external::def`]) made a [`Stack`].
//!
//! The stack files shipped with quiclab are registered on first use; a user's are registered
//! from beside a plan ([`load_beside`]: every `*.toml` in a `stacks/` directory next to the
//! plan file). A trial starts such a stack's endpoints as every other stack's, `quiclab
//! endpoint --task`, with the stack's file in the task when it is a user's: the stack then runs
//! its program in that process ([`serve`], [`fetch`]), waits for the server to hold its port
//! and turns the client's output into request records. `quiclab external serve` and `get` are
//! front-ends of the same code. A stack's own telemetry client is started directly: it writes
//! quiclab's records itself.

use std::net::SocketAddr;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, OnceLock, RwLock};

use anyhow::{Context, bail};
use quiclab_external::client::{self, GetOptions};
use quiclab_external::def::{DefError, Placeholder, Source, StackDef, TelemetryDef};
use quiclab_external::server::{ServeOptions, Server};
use quiclab_model::record::{HttpVersion, RequestRecord, Transport};
use quiclab_telemetry::Mode;

use quiclab_model::task::{
    self, Ask, ClientTask, Connection, Program, Request, ServerTask, ServerWrites, Task,
};

use super::{
    ArmStack, Capability, Check, Endpoint, Knob, Launch, Measured, SenderRecord, ServerOutput,
    Side, Stack, with_cc,
};

/// Where an external stack's server listens: UDP port 443 of every IPv4 address of the
/// server's namespace (the clients' URLs name one).
const LISTEN: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED), 443);

/// An external stack; lives as long as the process (the registry hands out `&'static`).
pub struct External {
    pub def: StackDef,
    name: &'static str,
    /// The name and the first 16 hex digits of the file's SHA-256.
    identity: String,
    /// The first 16 hex digits of the SHA-256 of its programs' files, read when a trial's
    /// identity first asks (an endpoint's process never does).
    builds: OnceLock<String>,
    implementation: &'static str,
    http: &'static [HttpVersion],
    knobs: &'static [&'static Knob],
    /// The telemetry modes its file lists.
    modes: &'static [Mode],
}

/// External stacks registered so far (`None` until the built-in files are read).
static REGISTERED: RwLock<Option<Vec<&'static External>>> = RwLock::new(None);

fn with_registry<T>(f: impl FnOnce(&mut Vec<&'static External>) -> T) -> T {
    let mut guard = REGISTERED.write().unwrap_or_else(|e| e.into_inner());
    let list = guard.get_or_insert_with(|| {
        StackDef::builtin()
            .into_iter()
            .map(|d| &*Box::leak(Box::new(External::new(d))))
            .collect()
    });
    f(list)
}

/// Every registered external stack, in registration order.
pub fn registered() -> Vec<&'static dyn Stack> {
    with_registry(|l| l.iter().map(|e| *e as &'static dyn Stack).collect())
}

/// The registered external stacks.
pub fn externals() -> Vec<&'static External> {
    with_registry(|l| l.clone())
}

/// Adds a stack to the registry. A stack of the same name from the same file is already
/// there (`Ok`); another stack of that name is refused.
pub fn register(def: StackDef) -> Result<&'static dyn Stack, String> {
    if let Some(b) = super::BUILTIN.iter().find(|b| b.name() == def.name) {
        return Err(format!(
            "stack name {:?} is quiclab's own; choose another",
            b.name()
        ));
    }
    with_registry(|l| {
        if let Some(e) = l.iter().find(|e| e.def.name == def.name) {
            return if e.def.source == def.source {
                Ok(*e as &'static dyn Stack)
            } else {
                Err(format!(
                    "stack {:?} is already defined by {}",
                    def.name, e.def.source
                ))
            };
        }
        let e: &'static External = Box::leak(Box::new(External::new(def)));
        l.push(e);
        Ok(e as &'static dyn Stack)
    })
}

/// Registers every stack file (`*.toml`) of the `stacks/` directory beside `plan`; their
/// names, in file-name order.
pub fn load_beside(plan: &Path) -> Result<Vec<String>, DefError> {
    let dir = plan
        .parent()
        .unwrap_or_else(|| Path::new("."))
        .join("stacks");
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Ok(Vec::new());
    };
    let mut files: Vec<_> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .collect();
    files.sort();
    let mut names = Vec::new();
    for f in files {
        let def = StackDef::load(&f)?;
        let (name, (line, column)) = (def.name.clone(), def.name_at);
        register(def).map_err(|message| DefError {
            file: f.display().to_string(),
            line,
            column,
            message,
        })?;
        names.push(name);
    }
    Ok(names)
}

fn leak(s: &str) -> &'static str {
    Box::leak(s.to_string().into_boxed_str())
}

impl External {
    fn new(def: StackDef) -> External {
        let knobs: Vec<&'static Knob> = def
            .knobs
            .iter()
            .map(|k| {
                let k: &'static _ = Box::leak(Box::new(k.clone()));
                &*Box::leak(Box::new(Knob {
                    key: leak(&k.key),
                    side: Side::Template,
                    help: leak(&k.help),
                    check: Check::External(k),
                    // a stack that carries telemetry puts its knobs in its telemetry client's
                    // {knobs} too; resuming is for repeated connections only
                    telemetry: def.telemetry.is_some() && k.key != "resume",
                }))
            })
            .collect();
        let digest = ring::digest::digest(&ring::digest::SHA256, def.text.as_bytes());
        let hex = hex8(digest.as_ref());
        let modes: Vec<Mode> = def
            .telemetry
            .iter()
            .flat_map(|t| &t.modes)
            // the file's modes are checked against quiclab's names when it is read
            .filter_map(|m| m.parse().ok())
            .collect();
        External {
            modes: Box::leak(modes.into_boxed_slice()),
            identity: format!("{} {hex}", def.name),
            builds: OnceLock::new(),
            name: leak(&def.name),
            implementation: leak(&def.implementation),
            http: Box::leak(def.http.clone().into_boxed_slice()),
            knobs: Box::leak(knobs.into_boxed_slice()),
            def,
        }
    }

    /// What its endpoints' tasks carry besides quiclab's own: its file when it is a user's,
    /// and the endpoint's folder under the trial's.
    fn program(&self, work_dir: PathBuf) -> Program {
        Program {
            stack_file: match &self.def.source {
                Source::Builtin(_) => None,
                Source::File(p) => Some(p.clone()),
            },
            work_dir: Some(work_dir),
        }
    }
}

/// The first 16 hex digits of the SHA-256 over the files of `def`'s programs (server, client,
/// telemetry client, each once, in that order; "absent" for one not installed), so that a
/// rebuilt driver or an upgraded program makes new trials.
fn builds_digest(def: &StackDef) -> String {
    use std::io::Read;
    let mut all = ring::digest::Context::new(&ring::digest::SHA256);
    let mut seen: Vec<PathBuf> = Vec::new();
    let commands = [
        Some(&def.server),
        Some(&def.client),
        def.telemetry.as_ref().map(|t| &t.client),
    ];
    for cmd in commands.into_iter().flatten() {
        let Some(path) = cmd.locate() else {
            all.update(b"absent\0");
            continue;
        };
        if seen.contains(&path) {
            continue;
        }
        let mut one = ring::digest::Context::new(&ring::digest::SHA256);
        let read = std::fs::File::open(&path).and_then(|mut f| {
            let mut buf = vec![0u8; 1 << 16];
            loop {
                let n = f.read(&mut buf)?;
                if n == 0 {
                    return Ok(());
                }
                one.update(&buf[..n]);
            }
        });
        match read {
            Ok(()) => all.update(one.finish().as_ref()),
            Err(_) => all.update(b"unreadable\0"),
        }
        seen.push(path);
    }
    hex8(all.finish().as_ref())
}

/// The first 8 bytes of a digest in hex.
fn hex8(digest: &[u8]) -> String {
    digest[..8].iter().map(|b| format!("{b:02x}")).collect()
}

/// The folder a task names for the endpoint's files (a trial always names one).
fn work_dir(task: &Program) -> anyhow::Result<PathBuf> {
    task.work_dir
        .clone()
        .context("the task names no work directory for the stack's program")
}

/// Runs `def`'s server with `opts` until SIGTERM, SIGINT or SIGHUP: says "listening" once its
/// program holds its UDP port; then, when `timeline` names a file, writes the sending side's
/// timeline there from the server's qlog files (RTT samples below `path_min_rtt_us` counted as
/// impossible). An error if the program exited by itself.
pub fn serve(
    def: &StackDef,
    opts: &ServeOptions,
    timeline: Option<&Path>,
    path_min_rtt_us: Option<u64>,
) -> anyhow::Result<()> {
    let stop = Arc::new(AtomicBool::new(false));
    // a signal sets the flag, then wakes the wait through the pipe
    let (woken, wake) = std::os::unix::net::UnixStream::pair().context("cannot make a pipe")?;
    wake.set_nonblocking(true).context("cannot make a pipe")?;
    for sig in [
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGHUP,
    ] {
        signal_hook::flag::register(sig, stop.clone()).context("cannot handle signals")?;
        let wake = wake.try_clone().context("cannot make a pipe")?;
        signal_hook::low_level::pipe::register(sig, wake).context("cannot handle signals")?;
    }
    let mut server = Server::start(def, opts)?;
    eprintln!("$ {}", server.command_line);
    eprintln!(
        "quiclab external: {} ({}) listening on {}:{}",
        def.name, server.program, opts.address, opts.port
    );
    let exited = server.wait(&stop, Some(woken.as_fd()));
    let (samples, problems) = server.finish(path_min_rtt_us);
    for p in &problems {
        eprintln!("quiclab external: warning: qlog {p}");
    }
    if let Some(path) = timeline {
        let mut text = String::new();
        for s in &samples {
            text.push_str(&serde_json::to_string(s).context("encoding a timeline sample")?);
            text.push('\n');
        }
        quiclab_store::output::write_atomic(path, text.as_bytes())?;
    }
    if let Some(status) = exited {
        bail!("the server program exited by itself with {status}");
    }
    Ok(())
}

/// Fetches what `task` asks with `def`'s client, one program run (one connection) per URL:
/// a record per request. Its knobs are `def`'s, checked already; `resume` sets its `resume`
/// knob. GETs only, each on a connection of its own (one request may ask for reuse).
pub fn fetch(def: &StackDef, task: &ClientTask) -> anyhow::Result<Vec<RequestRecord>> {
    let get = match &task.request.ask {
        Ask::Get(g) if g.connection == Connection::New || g.requests() == 1 => g,
        ask => bail!("{}", super::cannot(&def.name, ask)),
    };
    let mut knobs = task.knobs.clone();
    if get.resume && !knobs.iter().any(|(k, _)| k == "resume") {
        if def.knob("resume").is_none() {
            bail!(
                "--resume: stack {:?} does not resume sessions (it has no resume knob)",
                def.name
            );
        }
        knobs.push(("resume".into(), "true".into()));
    }
    let opts = GetOptions {
        cacert: task
            .cacert
            .clone()
            .context("the task names no certificate to trust")?,
        knobs,
        work_dir: work_dir(&task.program)?,
        qlog_dir: task.recording.qlog_dir.clone(),
        keylog: std::env::var_os("SSLKEYLOGFILE").map(PathBuf::from),
    };
    let repeat = get.repeat.max(1) as usize;
    let urls: Vec<String> = (0..repeat).flat_map(|_| get.urls.iter().cloned()).collect();
    Ok(client::get(def, &urls, &opts))
}

impl External {
    /// The stack's own telemetry client, started directly: it writes quiclab's client records
    /// itself (the stack file's `[telemetry]` section).
    fn telemetry_client(
        &self,
        arm: &ArmStack,
        t: &Endpoint,
        run: &task::Telemetry,
        def: &TelemetryDef,
    ) -> Launch {
        let url = run.url.clone();
        // the workload's own URL, of the trial's server
        let (host, port) = quiclab_endpoint::url::Url::parse(&url)
            .map(|u| (u.host, u.port))
            .unwrap_or_default();
        let value = |p: Placeholder| -> String {
            match p {
                Placeholder::Url => url.clone(),
                Placeholder::Host => host.clone(),
                Placeholder::Port => port.to_string(),
                Placeholder::Cacert => t.cert.display().to_string(),
                Placeholder::QlogDir => t
                    .qlog_dir
                    .map(|d| d.display().to_string())
                    .unwrap_or_default(),
                Placeholder::Mode => arm.mode.map(Mode::name).unwrap_or_default().to_string(),
                Placeholder::UnitsPerSecond => run.units_per_second.to_string(),
                Placeholder::Flush => run.flush_units.to_string(),
                Placeholder::Duration => match run.duration_us % 1000 {
                    0 => format!("{}ms", run.duration_us / 1000),
                    _ => format!("{}us", run.duration_us),
                },
                _ => String::new(),
            }
        };
        let knobs = self.def.knob_args(false, arm.knobs, &value);
        let args = StackDef::render(&def.client, &knobs, &value);
        Launch {
            program: def
                .client
                .locate()
                .unwrap_or_else(|| def.client.program.clone().into()),
            args,
            ..Launch::default()
        }
    }
}

impl Stack for External {
    /// What its file's `[records]` says its server's qlog holds.
    fn sender_record(&self) -> &[SenderRecord] {
        &self.def.records
    }

    fn name(&self) -> &'static str {
        self.name
    }

    fn transport(&self) -> Transport {
        Transport::Quic
    }

    fn http(&self) -> &'static [HttpVersion] {
        self.http
    }

    fn implementation(&self) -> &'static str {
        self.implementation
    }

    fn knobs(&self) -> &'static [&'static Knob] {
        self.knobs
    }

    fn capabilities(&self) -> &'static [Capability] {
        if self.def.telemetry.is_some() {
            &[Capability::Get, Capability::Telemetry]
        } else {
            &[Capability::Get]
        }
    }

    fn serves(&self, c: Capability) -> bool {
        // a page's resources are static files (/bytes/N) as GETs' are
        match c {
            Capability::Get | Capability::GetOne | Capability::GetReused | Capability::PageLoad => {
                true
            }
            Capability::Telemetry => self.def.telemetry.is_some(),
            // its documents are files: nothing holds a response
            Capability::Upload | Capability::ResponseDelay => false,
        }
    }

    fn telemetry_modes(&self) -> &'static [Mode] {
        self.modes
    }

    fn resumes(&self) -> bool {
        self.def.knob("resume").is_some()
    }

    fn missing(&self) -> Vec<String> {
        self.def.missing_programs()
    }

    /// Its name, its file's digest and its programs' (a changed file, a rebuilt driver or an
    /// upgraded program makes new trials).
    fn identity(&self) -> String {
        let builds = self.builds.get_or_init(|| builds_digest(&self.def));
        format!("{} programs {builds}", self.identity)
    }

    fn label(&self, _http: HttpVersion, mode: Option<Mode>, knobs: &[(String, String)]) -> String {
        let cc = self.def.knob("quic-cc");
        let given = super::knob(knobs, "quic-cc");
        let default = cc
            .and_then(|k| k.default.as_deref())
            .unwrap_or("its default");
        match mode {
            Some(mode) => with_cc(&super::telemetry_label(mode, self.name), given, default),
            None => with_cc(&self.def.label, given, default),
        }
    }

    fn server(&self, arm: &ArmStack, t: &Endpoint, out: ServerOutput) -> Launch {
        let mut task = super::server_task(self, arm, t, out, LISTEN);
        task.objects = t.objects.to_vec();
        task.program = self.program(t.dir.join("server"));
        Launch {
            // the server's adapter watches its program's qlog directory
            inotify: true,
            ..super::endpoint_launch(t, &Task::Server(task))
        }
    }

    fn client(&self, arm: &ArmStack, t: &Endpoint, request: &Request) -> Result<Launch, String> {
        match &request.ask {
            Ask::Telemetry(run) => match &self.def.telemetry {
                Some(def) => Ok(self.telemetry_client(arm, t, run, def)),
                None => Err(super::cannot(self.name(), &request.ask)),
            },
            // its client program makes one connection per run: a single request is on a new
            // connection either way
            Ask::Get(g) if g.connection == Connection::New || g.requests() == 1 => {
                let mut task = super::client_task(self, arm, t, request);
                task.program = self.program(t.dir.join("client"));
                Ok(super::endpoint_launch(t, &Task::Client(task)))
            }
            ask @ (Ask::Get(_) | Ask::Upload { .. } | Ask::Page { .. }) => {
                Err(super::cannot(self.name(), ask))
            }
        }
    }

    fn run_client(&self, task: &ClientTask) -> anyhow::Result<Measured> {
        Ok(Measured::Requests(fetch(&self.def, task)?))
    }

    fn run_server(&self, task: &ServerTask) -> anyhow::Result<()> {
        let opts = ServeOptions {
            address: task.listen.ip().to_string(),
            port: task.listen.port(),
            cert: task.write_cert.clone(),
            objects: task.objects.clone(),
            root: task.root.clone(),
            knobs: task.knobs.clone(),
            work_dir: work_dir(&task.program)?,
            keylog: std::env::var_os("SSLKEYLOGFILE").map(PathBuf::from),
            telemetry_log: match &task.writes {
                ServerWrites::Units(p) => Some(p.clone()),
                ServerWrites::Timeline(_) => None,
            },
        };
        let timeline = super::serve::timeline_of(task);
        serve(
            &self.def,
            &opts,
            timeline.as_deref(),
            task.recording.path_min_rtt_us,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rebuilt_program_changes_the_identity_and_a_missing_one_is_absent() {
        let dir = std::env::temp_dir().join(format!("quiclab-builds-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let program = dir.join("server");
        let write = |body: &str| {
            std::fs::write(&program, format!("#!/bin/sh\n{body}\n")).unwrap();
            std::fs::set_permissions(
                &program,
                std::os::unix::fs::PermissionsExt::from_mode(0o755),
            )
            .unwrap();
        };
        let text = quiclab_external::def::BUILTIN
            .iter()
            .find(|(f, _)| *f == "ngtcp2.toml")
            .unwrap()
            .1
            .replacen("name = \"ngtcp2\"", "name = \"mine\"", 1)
            .replacen("program = \"gtlsserver\"", "program = \"./server\"", 1);
        let file = dir.join("mine.toml");
        let def = || StackDef::parse(&text, Source::File(file.clone())).unwrap();
        write("exec true");
        let first = builds_digest(&def());
        assert_eq!(first.len(), 16);
        assert_eq!(
            builds_digest(&def()),
            first,
            "the same files, the same digest"
        );
        write("exec false");
        let rebuilt = builds_digest(&def());
        assert_ne!(rebuilt, first);
        // the identity a trial records holds it, after the file's own digest
        let id = External::new(def()).identity();
        assert!(
            id.starts_with("mine ") && id.ends_with(&format!(" programs {rebuilt}")),
            "{id}"
        );
        std::fs::remove_file(&program).unwrap();
        let absent = builds_digest(&def());
        assert_ne!(absent, rebuilt);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
