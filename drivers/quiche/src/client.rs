//! The client: one GET on one connection, one line per event on standard output.

use std::io::Write;
use std::net::{ToSocketAddrs, UdpSocket};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use quiche::h3::NameValue;

/// Fetch one URL over HTTP/3, saving the body as DIR/body.
#[derive(clap::Args)]
pub struct Args {
    /// The certificate to trust (PEM).
    #[arg(long)]
    cacert: PathBuf,
    /// The directory to save the body in.
    #[arg(long)]
    download: PathBuf,
    /// Write the connection's qlog here.
    #[arg(long)]
    qlog_dir: Option<PathBuf>,
    /// Congestion controller: cubic, reno or bbr2.
    #[arg(long, default_value = "cubic")]
    cc: String,
    /// Give up after this many seconds.
    #[arg(long, default_value_t = 60)]
    timeout: u64,
    url: String,
}

/// Prints an event line at once (quiclab stamps it when it reads it).
fn event(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

pub fn run(a: Args) -> Result<(), String> {
    let rest = a
        .url
        .strip_prefix("https://")
        .ok_or_else(|| format!("{:?}: give https://HOST[:PORT]/PATH", a.url))?;
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    let host = authority
        .rsplit_once(':')
        .filter(|(_, p)| p.parse::<u16>().is_ok())
        .map_or(authority, |(h, _)| h)
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string();
    let with_port = if authority.contains(':') && !authority.ends_with(']') {
        authority.to_string()
    } else {
        format!("{authority}:443")
    };
    let peer = with_port
        .to_socket_addrs()
        .map_err(|e| format!("{authority}: {e}"))?
        .next()
        .ok_or_else(|| format!("{authority}: no address"))?;
    let mut config = super::config(&a.cc)?;
    config.verify_peer(true);
    config
        .load_verify_locations_from_file(&a.cacert.display().to_string())
        .map_err(|e| format!("{}: {e}", a.cacert.display()))?;
    let bind = if peer.is_ipv4() {
        "0.0.0.0:0"
    } else {
        "[::]:0"
    };
    let socket = UdpSocket::bind(bind).map_err(|e| e.to_string())?;
    let local = socket.local_addr().map_err(|e| e.to_string())?;
    let scid = super::random_id();
    let scid = quiche::ConnectionId::from_ref(&scid);
    // BoringSSL checks a host name against the certificate's DNS names only: an address is
    // checked after the handshake instead (the server must present a certificate of --cacert)
    let by_address = host.parse::<std::net::IpAddr>().is_ok();
    let name = (!by_address).then_some(host.as_str());
    let mut conn = quiche::connect(name, &scid, local, peer, &mut config)
        .map_err(|e| format!("connecting: {e}"))?;
    let trusted = if by_address {
        pem_certificates(&a.cacert)?
    } else {
        Vec::new()
    };
    super::qlog(
        &mut conn,
        a.qlog_dir.as_deref(),
        "client.sqlog",
        "quiclab-quiche client",
    )?;
    std::fs::create_dir_all(&a.download).map_err(|e| e.to_string())?;
    let body_path = a.download.join("body");
    let mut body =
        std::fs::File::create(&body_path).map_err(|e| format!("{}: {e}", body_path.display()))?;
    let deadline = Instant::now() + Duration::from_secs(a.timeout);
    let (mut buf, mut out) = (vec![0u8; 65_536], vec![0u8; super::MAX_DATAGRAM]);
    let h3_config = quiche::h3::Config::new().map_err(|e| e.to_string())?;
    let mut h3: Option<quiche::h3::Connection> = None;
    let mut first = true;
    let mut done = false;
    event("start");
    super::flush(&mut conn, &socket, &mut out)?;
    while !conn.is_closed() {
        if Instant::now() > deadline {
            return Err(format!("no response within {} s", a.timeout));
        }
        let wait = conn.timeout().unwrap_or(Duration::from_millis(100));
        match super::receive(&socket, &mut buf, wait)? {
            Some((len, from)) => {
                let info = quiche::RecvInfo { from, to: local };
                if let Err(e) = conn.recv(&mut buf[..len], info) {
                    return Err(format!("receiving: {e}"));
                }
            }
            None => conn.on_timeout(),
        }
        if conn.is_established() && h3.is_none() {
            if by_address
                && !conn
                    .peer_cert()
                    .is_some_and(|c| trusted.iter().any(|t| t == c))
            {
                return Err(format!(
                    "{host}: the server's certificate is not one of {}",
                    a.cacert.display()
                ));
            }
            event(&format!(
                "handshake complete alpn={}",
                String::from_utf8_lossy(conn.application_proto())
            ));
            let mut c = quiche::h3::Connection::with_transport(&mut conn, &h3_config)
                .map_err(|e| format!("HTTP/3: {e}"))?;
            let req = [
                quiche::h3::Header::new(b":method", b"GET"),
                quiche::h3::Header::new(b":scheme", b"https"),
                quiche::h3::Header::new(b":authority", authority.as_bytes()),
                quiche::h3::Header::new(b":path", path.as_bytes()),
                quiche::h3::Header::new(b"user-agent", b"quiclab-quiche"),
            ];
            c.send_request(&mut conn, &req, true)
                .map_err(|e| format!("sending the request: {e}"))?;
            h3 = Some(c);
        }
        if let Some(c) = h3.as_mut() {
            loop {
                match c.poll(&mut conn) {
                    Ok((_, quiche::h3::Event::Headers { list, .. })) => {
                        if let Some(s) = list.iter().find(|h| h.name() == b":status") {
                            event(&format!("status {}", String::from_utf8_lossy(s.value())));
                        }
                    }
                    Ok((stream, quiche::h3::Event::Data)) => {
                        while let Ok(n) = c.recv_body(&mut conn, stream, &mut buf) {
                            if first && n > 0 {
                                event("first byte");
                                first = false;
                            }
                            body.write_all(&buf[..n]).map_err(|e| e.to_string())?;
                        }
                    }
                    Ok((_, quiche::h3::Event::Finished)) => {
                        event("last byte");
                        done = true;
                        conn.close(true, 0x100, b"done").ok();
                    }
                    Ok((stream, quiche::h3::Event::Reset(code))) => {
                        return Err(format!("stream {stream} reset by the server ({code})"));
                    }
                    Ok(_) => {}
                    Err(quiche::h3::Error::Done) => break,
                    Err(e) => return Err(format!("HTTP/3: {e}")),
                }
            }
        }
        super::flush(&mut conn, &socket, &mut out)?;
    }
    if done {
        return Ok(());
    }
    match (conn.peer_error(), conn.local_error()) {
        (Some(e), _) => Err(format!(
            "the server closed the connection: {:#x} {}",
            e.error_code,
            String::from_utf8_lossy(&e.reason)
        )),
        (None, Some(e)) => Err(format!(
            "closed: {:#x} {}",
            e.error_code,
            String::from_utf8_lossy(&e.reason)
        )),
        (None, None) if conn.is_timed_out() => Err("the connection timed out".into()),
        (None, None) => Err("the connection closed before the response ended".into()),
    }
}

/// The certificates (DER) of a PEM file.
fn pem_certificates(path: &std::path::Path) -> Result<Vec<Vec<u8>>, String> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    let certs: Vec<Vec<u8>> = CertificateDer::pem_file_iter(path)
        .map_err(|e| format!("{}: {e}", path.display()))?
        .map(|c| c.map(|c| c.to_vec()))
        .collect::<Result<_, _>>()
        .map_err(|e| format!("{}: {e}", path.display()))?;
    if certs.is_empty() {
        return Err(format!("{}: no certificate", path.display()));
    }
    Ok(certs)
}
