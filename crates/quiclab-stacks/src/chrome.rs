//! `chrome`: a real browser as the client. Chromium (Debian's `chromium`, headless) loads the
//! page's real web content through `quiclab browse` over HTTP/2 or HTTP/3 (forced onto QUIC),
//! or fetches a single object (`browse --object`);
//! it serves nothing, so an arm pairs it with a server (`client-stack = "chrome"`, the server
//! being the HTTP version's default or `server-stack`).

use quiclab_model::record::{HttpVersion, Transport};
use quiclab_model::task::{Ask, Request};

use super::{ArmStack, Capability, Endpoint, Knob, Launch, ServerOutput, Stack};

pub struct Chrome;

/// The browser's program, looked up on PATH.
const PROGRAM: &str = "chromium";

impl Stack for Chrome {
    fn name(&self) -> &'static str {
        "chrome"
    }

    fn transport(&self) -> Transport {
        // a client only: an arm's transport is its server's
        Transport::Quic
    }

    fn http(&self) -> &'static [HttpVersion] {
        &[HttpVersion::Http2, HttpVersion::Http3]
    }

    fn implementation(&self) -> &'static str {
        "Chromium (Debian's chromium, headless, driven over the DevTools protocol)"
    }

    fn knobs(&self) -> &'static [&'static Knob] {
        &[]
    }

    fn capabilities(&self) -> &'static [Capability] {
        &[Capability::GetOne, Capability::PageLoad]
    }

    fn serves(&self, _c: Capability) -> bool {
        false
    }

    fn resumes(&self) -> bool {
        false
    }

    fn browser(&self) -> bool {
        true
    }

    fn takes_the_host(&self) -> bool {
        // a browser, its renderer, network service and compositor: several cores at once
        true
    }

    fn label(
        &self,
        http: HttpVersion,
        _mode: Option<quiclab_telemetry::Mode>,
        _knobs: &[(String, String)],
    ) -> String {
        format!("Chrome, {}", http.title())
    }

    fn server(&self, arm: &ArmStack, t: &Endpoint, out: ServerOutput) -> Launch {
        // never asked (it serves nothing, so no plan names it as a server); the version's
        // default server would do
        super::for_http(arm.http)
            .expect("every HTTP version has a default stack")
            .server(arm, t, out)
    }

    fn client(&self, arm: &ArmStack, t: &Endpoint, request: &Request) -> Result<Launch, String> {
        // the browser loads the page through `quiclab browse`, or fetches one object on a new
        // connection as a page's script would (`--object`, which takes get's arguments for it)
        let (mut own, what) = match &request.ask {
            Ask::Page { url, page, .. } => (Vec::new(), super::page_args(url, page.as_deref())),
            Ask::Get(g) if g.is_one_new() => (vec!["--object".to_string()], super::get_args(g)),
            ask @ (Ask::Get(_) | Ask::Upload { .. } | Ask::Telemetry(_)) => {
                return Err(super::cannot(self.name(), ask));
            }
        };
        let mut args = vec!["browse".to_string()];
        if request.records {
            args.push("--json".into());
        }
        args.extend(["--cacert".into(), t.cert.display().to_string()]);
        args.append(&mut own);
        args.extend([
            "--http".to_string(),
            arm.http.name().to_string(),
            "--browser".into(),
            PROGRAM.into(),
            "--netlog".into(),
            t.dir.join("netlog.json").display().to_string(),
            "--browser-log".into(),
            t.dir.join("browser.log").display().to_string(),
        ]);
        args.extend(what);
        Ok(Launch {
            program: t.bin.to_path_buf(),
            args,
            ..Launch::default()
        })
    }

    fn missing(&self) -> Vec<String> {
        match quiclab_external::def::locate_program(PROGRAM) {
            Some(_) => Vec::new(),
            None => vec![format!(
                "stack \"chrome\" needs the program {PROGRAM:?}, which is not installed \
                 (install: apt-get install chromium)"
            )],
        }
    }
}
