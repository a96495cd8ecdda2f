//! External stacks in the registry: a stack file ([`quiclab_external::def`]) made a [`Stack`].
//!
//! The stack files shipped with quiclab are registered on first use; a user's are registered
//! from beside a plan ([`load_beside`]: every `*.toml` in a `stacks/` directory next to the
//! plan file). A trial runs such a stack through quiclab's own `external serve` and
//! `external get` commands, which start the programs, wait for the server to hold its port and
//! turn the client's output into request records; the stack is named to them by its built-in
//! name or its file.

use std::path::Path;
use std::sync::RwLock;

use quiclab_external::def::{DefError, Placeholder, StackDef, TelemetryDef};
use quiclab_model::record::{HttpVersion, Transport};
use quiclab_telemetry::Mode;

use quiclab_model::task::{self, Ask, Connection, Request};

use super::{
    ArmStack, Capability, Check, Endpoint, Knob, Launch, ServerOutput, Side, Stack, with_cc,
};

/// An external stack; lives as long as the process (the registry hands out `&'static`).
pub struct External {
    pub def: StackDef,
    name: &'static str,
    /// The name and the first 16 hex digits of the file's SHA-256.
    identity: String,
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
        let hex: String = digest.as_ref()[..8]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
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
            name: leak(&def.name),
            implementation: leak(&def.implementation),
            http: Box::leak(def.http.clone().into_boxed_slice()),
            knobs: Box::leak(knobs.into_boxed_slice()),
            def,
        }
    }

    /// The arguments every `external` command takes: the stack and the arm's knobs.
    fn common_args(&self, arm: &ArmStack) -> Vec<String> {
        let mut out = vec!["--stack".to_string(), self.def.reference()];
        for (k, v) in arm.knobs {
            if self.def.knob(k).is_some() {
                out.extend(["--knob".to_string(), format!("{k}={v}")]);
            }
        }
        out
    }
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

    fn identity(&self) -> String {
        self.identity.clone()
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
        let mut args = vec!["external".to_string(), "serve".into()];
        args.extend(self.common_args(arm));
        args.extend([
            // every IPv4 address of the server's namespace (the clients' URLs name one)
            "--address".into(),
            "0.0.0.0".into(),
            "--port".into(),
            "443".into(),
            "--cert".into(),
            t.cert.display().to_string(),
            "--work-dir".into(),
            t.dir.join("server").display().to_string(),
        ]);
        if !t.objects.is_empty() {
            let sizes: Vec<String> = t.objects.iter().map(u64::to_string).collect();
            args.extend(["--objects".into(), sizes.join(",")]);
        }
        if let Some(root) = t.root {
            args.extend(["--root".into(), root.display().to_string()]);
        }
        if !t.path_min_rtt.is_zero() {
            args.extend([
                "--path-min-rtt".into(),
                format!("{}us", t.path_min_rtt.as_micros()),
            ]);
        }
        match out {
            ServerOutput::Timeline(p) => {
                args.extend(["--timeline".into(), p.display().to_string()]);
            }
            ServerOutput::Units(p) => {
                args.extend(["--telemetry-log".into(), p.display().to_string()]);
            }
        }
        Launch {
            program: t.bin.to_path_buf(),
            args,
            // `external serve` watches its server's qlog directory
            inotify: true,
            ..Launch::default()
        }
    }

    fn client(&self, arm: &ArmStack, t: &Endpoint, request: &Request) -> Result<Launch, String> {
        let get = match &request.ask {
            Ask::Telemetry(run) => match &self.def.telemetry {
                Some(def) => return Ok(self.telemetry_client(arm, t, run, def)),
                None => return Err(super::cannot(self.name(), &request.ask)),
            },
            // its client program makes one connection per run: a single request is on a new
            // connection either way
            Ask::Get(g) if g.connection == Connection::New || g.requests() == 1 => g,
            ask @ (Ask::Get(_) | Ask::Upload { .. } | Ask::Page { .. }) => {
                return Err(super::cannot(self.name(), ask));
            }
        };
        let mut args = vec!["external".to_string(), "get".into()];
        if request.records {
            args.push("--json".into());
        }
        args.extend(self.common_args(arm));
        args.extend([
            "--cacert".into(),
            t.cert.display().to_string(),
            "--work-dir".into(),
            t.dir.join("client").display().to_string(),
        ]);
        if let Some(q) = t.qlog_dir {
            args.extend(["--qlog-dir".into(), q.display().to_string()]);
        }
        let mut what = super::get_args(get);
        if get.connection == Connection::Reuse {
            // `--connection reuse` (one request): the program's own default, new
            what.drain(..2);
        }
        args.extend(what);
        Ok(Launch {
            program: t.bin.to_path_buf(),
            args,
            ..Launch::default()
        })
    }
}
