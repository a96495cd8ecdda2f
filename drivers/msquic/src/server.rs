//! The server: every request's file from a documents directory, until SIGINT or SIGTERM.

use std::net::{IpAddr, SocketAddr};
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use msquic::{
    Addr, BufferRef, CertificateFile, Configuration, Connection, ConnectionEvent, ConnectionRef,
    Credential, CredentialConfig, Listener, ListenerEvent, Stream, StreamEvent, StreamRef,
    StreamShutdownFlags,
};

/// Serve a directory over hq-interop.
#[derive(clap::Args)]
pub struct Args {
    /// The directory whose files are served, by their path under it.
    #[arg(long)]
    htdocs: PathBuf,
    #[arg(long)]
    addr: IpAddr,
    #[arg(long)]
    port: u16,
    /// The private key (PEM).
    #[arg(long)]
    key: PathBuf,
    /// The certificate chain (PEM).
    #[arg(long)]
    cert: PathBuf,
    /// Congestion controller: cubic or bbr.
    #[arg(long, default_value = "cubic")]
    cc: String,
}

/// The error code of a stream aborted for a path with no file (hq-interop has no status).
const NOT_FOUND: u64 = 0x10;

pub fn run(a: Args) -> Result<(), String> {
    let reg = super::registration()?;
    let alpn = [BufferRef::from(super::ALPN)];
    let config = Configuration::open(&reg, &alpn, Some(&super::settings(&a.cc)?))
        .map_err(|e| format!("msquic configuration: {e}"))?;
    let path = |p: &Path| p.display().to_string();
    config
        .load_credential(
            &CredentialConfig::new().set_credential(Credential::CertificateFile(
                CertificateFile::new(path(&a.key), path(&a.cert)),
            )),
        )
        .map_err(|e| format!("{} and {}: {e}", a.key.display(), a.cert.display()))?;
    let config = Arc::new(config);
    let htdocs = Arc::new(a.htdocs.clone());
    let listener = Listener::open(&reg, move |_, ev| {
        if let ListenerEvent::NewConnection { connection, .. } = ev {
            let htdocs = htdocs.clone();
            connection.set_callback_handler(move |c, ev| on_connection(c, ev, &htdocs));
            connection.set_configuration(&config)?;
        }
        Ok(())
    })
    .map_err(|e| format!("msquic listener: {e}"))?;
    let local = SocketAddr::new(a.addr, a.port);
    listener
        .start(&alpn, Some(&Addr::from(local)))
        .map_err(|e| format!("listening on {local}: {e}"))?;
    eprintln!("quiclab-msquic: serving {} on {local}", a.htdocs.display());
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, stop.clone()).map_err(|e| e.to_string())?;
    }
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(20));
    }
    listener.stop();
    drop(listener);
    // closes every connection before the registration goes
    reg.shutdown();
    Ok(())
}

fn on_connection(
    conn: ConnectionRef,
    ev: ConnectionEvent,
    htdocs: &Arc<PathBuf>,
) -> Result<(), msquic::Status> {
    match ev {
        ConnectionEvent::PeerStreamStarted { stream, .. } => {
            let htdocs = htdocs.clone();
            let mut request = Vec::new();
            let mut answered = false;
            stream.set_callback_handler(move |s, ev| {
                on_stream(s, ev, &htdocs, &mut request, &mut answered)
            });
        }
        ConnectionEvent::ShutdownComplete { .. } => {
            // the handle is ours to close once msquic is done with it
            drop(unsafe { Connection::from_raw(conn.as_raw()) });
        }
        _ => {}
    }
    Ok(())
}

fn on_stream(
    stream: StreamRef,
    ev: StreamEvent,
    htdocs: &Path,
    request: &mut Vec<u8>,
    answered: &mut bool,
) -> Result<(), msquic::Status> {
    match ev {
        StreamEvent::Receive { buffers, .. } => {
            for b in buffers {
                request.extend_from_slice(b.as_bytes());
            }
            if !*answered && request_path(request).is_some() {
                *answered = true;
                answer(&stream, htdocs, request);
            }
        }
        // a request line the stream's end closed rather than a line end
        StreamEvent::PeerSendShutdown if !*answered => {
            *answered = true;
            request.push(b'\n');
            answer(&stream, htdocs, request);
        }
        StreamEvent::SendComplete { client_context, .. } => unsafe {
            super::release_sent(client_context);
        },
        StreamEvent::ShutdownComplete { .. } => {
            drop(unsafe { Stream::from_raw(stream.as_raw()) });
        }
        _ => {}
    }
    Ok(())
}

/// The path of a complete request line, `GET /PATH` ended by a line end.
pub fn request_path(request: &[u8]) -> Option<&str> {
    let end = request.iter().position(|&b| b == b'\n')?;
    let line = std::str::from_utf8(&request[..end])
        .ok()?
        .trim_end_matches('\r');
    line.strip_prefix("GET ").map(str::trim)
}

/// Sends the file a request names, ending the stream, or aborts the stream.
fn answer(stream: &StreamRef, htdocs: &Path, request: &[u8]) {
    let body = request_path(request).and_then(|p| {
        let p = p.split(['?', '#']).next().unwrap_or("");
        let mut file = htdocs.to_path_buf();
        for part in Path::new(p).components() {
            if let Component::Normal(n) = part {
                file.push(n);
            }
        }
        std::fs::read(&file).ok()
    });
    let Some(body) = body else {
        let _ = stream.shutdown(StreamShutdownFlags::ABORT, NOT_FOUND);
        return;
    };
    if super::send_and_end(stream, body).is_err() {
        let _ = stream.shutdown(StreamShutdownFlags::ABORT, NOT_FOUND);
    }
}
