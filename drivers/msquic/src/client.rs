//! The client: one GET on one connection, one line per event on standard output.

use std::io::Write;
use std::path::PathBuf;
use std::sync::mpsc::{Sender, channel};
use std::time::Duration;

use msquic::{
    BufferRef, Configuration, Connection, ConnectionEvent, ConnectionRef, ConnectionShutdownFlags,
    CredentialConfig, Stream, StreamEvent, StreamOpenFlags, StreamRef, StreamStartFlags,
};

/// Fetch one URL over hq-interop, saving the body as DIR/body.
#[derive(clap::Args)]
pub struct Args {
    /// The certificate to trust (PEM).
    #[arg(long)]
    cacert: PathBuf,
    /// The directory to save the body in.
    #[arg(long)]
    download: PathBuf,
    /// Congestion controller: cubic or bbr.
    #[arg(long, default_value = "cubic")]
    cc: String,
    /// Give up after this many seconds.
    #[arg(long, default_value_t = 60)]
    timeout: u64,
    /// https://HOST:PORT/PATH
    url: String,
}

/// The connection's TLS secrets, which msquic fills in during the handshake: written to the
/// key log SSLKEYLOGFILE names (NSS's format, as other stacks write it) once it completes.
struct Secrets(Box<msquic::QuicTlsSecrets>);

impl Secrets {
    fn new() -> Secrets {
        // SAFETY: a plain C struct of integers and byte arrays; all zeros is "nothing set"
        Secrets(Box::new(unsafe { std::mem::zeroed() }))
    }

    /// Has msquic fill them in for `conn` (before it starts).
    fn attach(&self, conn: &Connection) -> Result<(), String> {
        // SAFETY: the buffer lives in a Box that outlives the connection (it is dropped after
        // the connection is), and is of the size msquic expects for this parameter
        unsafe {
            msquic::Api::set_param(
                conn.as_raw(),
                msquic::PARAM_CONN_TLS_SECRETS,
                std::mem::size_of::<msquic::QuicTlsSecrets>() as u32,
                &*self.0 as *const msquic::QuicTlsSecrets as *const std::ffi::c_void,
            )
        }
        .map_err(|e| format!("asking msquic for the TLS secrets: {e}"))
    }

    /// The key log's lines for the secrets set so far.
    fn lines(s: &msquic::QuicTlsSecrets) -> String {
        let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
        let len = usize::from(s.secret_length).min(msquic::QUIC_TLS_SECRETS_MAX_SECRET_LEN);
        // the flags' bits, from the lowest: client random, client early, client handshake,
        // server handshake, client 1-RTT, server 1-RTT
        if s.flags & 1 == 0 {
            return String::new();
        }
        [
            (
                2,
                "CLIENT_EARLY_TRAFFIC_SECRET",
                &s.client_early_traffic_secret,
            ),
            (
                4,
                "CLIENT_HANDSHAKE_TRAFFIC_SECRET",
                &s.client_handshake_traffic_secret,
            ),
            (
                8,
                "SERVER_HANDSHAKE_TRAFFIC_SECRET",
                &s.server_handshake_traffic_secret,
            ),
            (16, "CLIENT_TRAFFIC_SECRET_0", &s.client_traffic_secret0),
            (32, "SERVER_TRAFFIC_SECRET_0", &s.server_traffic_secret0),
        ]
        .into_iter()
        .filter(|(bit, _, _)| s.flags & bit != 0)
        .map(|(_, label, secret)| {
            format!(
                "{label} {} {}\n",
                hex(&s.client_random),
                hex(&secret[..len])
            )
        })
        .collect()
    }
}

/// Appends the secrets' lines to the key log SSLKEYLOGFILE names, if it names one.
fn write_key_log(secrets: *const msquic::QuicTlsSecrets) {
    let Some(path) = std::env::var_os("SSLKEYLOGFILE") else {
        return;
    };
    // SAFETY: the pointer is the Secrets box's, alive until after the connection is closed;
    // msquic wrote it on this same connection's worker, before the event that calls this
    let text = Secrets::lines(unsafe { &*secrets });
    let written = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .and_then(|mut f| f.write_all(text.as_bytes()));
    if let Err(e) = written {
        eprintln!("key log {}: {e}", std::path::Path::new(&path).display());
    }
}

/// Prints an event line at once (quiclab stamps it when it reads it).
fn event(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

/// The host, port and path of an `https://` URL.
pub fn split_url(url: &str) -> Result<(String, u16, String), String> {
    let bad = || format!("{url:?}: give https://HOST:PORT/PATH");
    let rest = url.strip_prefix("https://").ok_or_else(bad)?;
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let (host, port) = match authority.rsplit_once(':') {
        Some((h, p)) if !h.is_empty() => (h, p.parse::<u16>().map_err(|_| bad())?),
        _ => (authority, 443),
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.is_empty() {
        return Err(bad());
    }
    let path = if path.is_empty() { "/" } else { path };
    Ok((host.to_string(), port, path.to_string()))
}

/// How the transfer ended, sent once from msquic's threads to the main one.
type Outcome = Result<u64, String>;

pub fn run(a: Args) -> Result<(), String> {
    let (host, port, path) = split_url(&a.url)?;
    std::fs::create_dir_all(&a.download).map_err(|e| format!("{}: {e}", a.download.display()))?;
    let body_path = a.download.join("body");
    let body =
        std::fs::File::create(&body_path).map_err(|e| format!("{}: {e}", body_path.display()))?;
    let reg = super::registration()?;
    let alpn = [BufferRef::from(super::ALPN)];
    let config = Configuration::open(&reg, &alpn, Some(&super::settings(&a.cc)?))
        .map_err(|e| format!("msquic configuration: {e}"))?;
    config
        .load_credential(
            &CredentialConfig::new_client().set_ca_certificate_file(a.cacert.display().to_string()),
        )
        .map_err(|e| format!("{}: {e}", a.cacert.display()))?;
    let (done, outcome) = channel::<Outcome>();
    let secrets = Secrets::new();
    // a raw address: the handler must be 'static, and the box outlives the connection
    let secrets_at = &*secrets.0 as *const msquic::QuicTlsSecrets as usize;
    let on_conn = {
        let done = done.clone();
        let mut body = Some(body);
        move |conn: ConnectionRef, ev: ConnectionEvent| {
            match ev {
                ConnectionEvent::Connected {
                    negotiated_alpn, ..
                } => {
                    write_key_log(secrets_at as *const msquic::QuicTlsSecrets);
                    event(&format!(
                        "handshake complete alpn={}",
                        String::from_utf8_lossy(negotiated_alpn)
                    ));
                    if let Some(body) = body.take()
                        && let Err(e) = request(&conn, &path, body, done.clone())
                    {
                        let _ = done.send(Err(format!("opening the request stream: {e}")));
                    }
                }
                ConnectionEvent::ShutdownInitiatedByTransport { status, error_code } => {
                    let _ = done.send(Err(format!(
                        "connection closed by the transport: {status} (error code {error_code:#x})"
                    )));
                }
                ConnectionEvent::ShutdownInitiatedByPeer { error_code } => {
                    let _ = done.send(Err(format!(
                        "connection closed by the server (error code {error_code:#x})"
                    )));
                }
                ConnectionEvent::ShutdownComplete { .. } => {
                    let _ = done.send(Err("connection closed".into()));
                }
                _ => {}
            }
            Ok(())
        }
    };
    let conn = Connection::open(&reg, on_conn).map_err(|e| format!("msquic connection: {e}"))?;
    secrets.attach(&conn)?;
    event("start");
    conn.start(&config, &host, port)
        .map_err(|e| format!("connecting to {host}:{port}: {e}"))?;
    let result = match outcome.recv_timeout(Duration::from_secs(a.timeout)) {
        Ok(r) => r,
        Err(_) => Err(format!("no response within {} s", a.timeout)),
    };
    conn.shutdown(ConnectionShutdownFlags::NONE, 0);
    // the connection's close goes out before the process ends
    drop(conn);
    drop(secrets);
    drop(config);
    reg.shutdown();
    result.map(|_| ())
}

/// Opens the request's stream and sends `GET PATH`, ending it; the stream's handler writes the
/// body and reports the end.
fn request(
    conn: &ConnectionRef,
    path: &str,
    mut body: std::fs::File,
    done: Sender<Outcome>,
) -> Result<(), msquic::Status> {
    let mut received = 0u64;
    let on_stream = move |s: StreamRef, ev: StreamEvent| {
        match ev {
            StreamEvent::Receive { buffers, .. } => {
                for b in buffers {
                    let bytes = b.as_bytes();
                    if received == 0 && !bytes.is_empty() {
                        event("first byte");
                    }
                    received += bytes.len() as u64;
                    if let Err(e) = body.write_all(bytes) {
                        let _ = done.send(Err(format!("saving the body: {e}")));
                    }
                }
            }
            StreamEvent::PeerSendShutdown => {
                event("last byte");
                let _ = done.send(Ok(received));
            }
            StreamEvent::PeerSendAborted { error_code } => {
                let _ = done.send(Err(format!(
                    "the server aborted the response (error code {error_code:#x}; \
                     {:#x}: no such file)",
                    0x10
                )));
            }
            StreamEvent::SendComplete { client_context, .. } => unsafe {
                super::release_sent(client_context);
            },
            StreamEvent::ShutdownComplete { .. } => {
                drop(unsafe { Stream::from_raw(s.as_raw()) });
            }
            _ => {}
        }
        Ok(())
    };
    let stream = Stream::open(conn, StreamOpenFlags::NONE, on_stream)?;
    stream.start(StreamStartFlags::NONE)?;
    super::send_and_end(&stream, format!("GET {path}\r\n").into_bytes())?;
    // msquic holds the stream until ShutdownComplete, whose handler closes it
    let _ = unsafe { stream.into_raw() };
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::split_url;

    #[test]
    fn urls_give_host_port_and_path() {
        assert_eq!(
            split_url("https://10.0.0.2:4433/files/1mb").unwrap(),
            ("10.0.0.2".into(), 4433, "/files/1mb".into())
        );
        assert_eq!(
            split_url("https://[fd00::2]:443").unwrap(),
            ("fd00::2".into(), 443, "/".into())
        );
        assert_eq!(
            split_url("https://h/x").unwrap(),
            ("h".into(), 443, "/x".into())
        );
        assert!(
            split_url("http://h/x")
                .unwrap_err()
                .contains("https://HOST:PORT/PATH")
        );
        assert!(split_url("https://h:port/x").is_err());
    }
}
