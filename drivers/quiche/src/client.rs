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
    /// Resume the TLS session kept in this file by the connection before (its request then
    /// goes as 0-RTT data), and keep this connection's session there for the next one.
    #[arg(long)]
    session: Option<PathBuf>,
    /// Give up after this many seconds.
    #[arg(long, default_value_t = 60)]
    timeout: u64,
    url: String,
}

/// BoringSSL's `ssl_early_data_accepted` (`ssl_early_data_reason_t`).
const EARLY_DATA_ACCEPTED: u32 = 2;

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
    if a.session.is_some() {
        config.enable_early_data();
    }
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
    let id = super::random_id();
    let scid = quiche::ConnectionId::from_ref(&id);
    // BoringSSL checks a host name against the certificate's DNS names only: an address is
    // checked after the handshake instead (the server must present a certificate of --cacert)
    let by_address = host.parse::<std::net::IpAddr>().is_ok();
    let name = (!by_address).then_some(host.as_str());
    let mut conn = quiche::connect(name, &scid, local, peer, &mut config)
        .map_err(|e| format!("connecting: {e}"))?;
    if let Some(saved) = a.session.as_ref().and_then(|p| std::fs::read(p).ok()) {
        conn.set_session(&saved)
            .map_err(|e| format!("resuming the session kept in the file: {e}"))?;
    }
    let trusted = if by_address {
        pem_certificates(&a.cacert)?
    } else {
        Vec::new()
    };
    // one file per connection (a run of several connections shares the directory)
    let hex: String = id[..8].iter().map(|b| format!("{b:02x}")).collect();
    super::record(
        &mut conn,
        a.qlog_dir.as_deref(),
        &format!("client-{hex}.sqlog"),
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
    let (mut established, mut early) = (false, false);
    event("start");
    super::flush(&mut conn, &socket, &mut out)?;
    let mut acks = AckPolicy::default();
    while !conn.is_closed() {
        if conn.is_established() && !established {
            established = true;
            // the handshake's last flight goes at once
            acks.force();
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
            if early && conn.early_data_reason() != EARLY_DATA_ACCEPTED {
                event("0-RTT rejected");
            }
        }
        // with a resumed session the request goes before the handshake ends, as 0-RTT data
        if (conn.is_established() || conn.is_in_early_data()) && h3.is_none() {
            early = !conn.is_established();
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
            acks.force();
            if early {
                event("0-RTT sent");
            }
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
                        // the session ticket came with the handshake's end: keep it
                        if let (Some(path), Some(session)) = (&a.session, conn.session()) {
                            std::fs::write(path, session)
                                .map_err(|e| format!("{}: {e}", path.display()))?;
                        }
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
        if acks.due(Instant::now()) || !conn.is_established() || done {
            super::flush(&mut conn, &socket, &mut out)?;
            acks.sent();
        }
        // The response is whole and the CONNECTION_CLOSE sent: the closing state that follows
        // (three PTOs, in which quiche would answer a late packet with the close again) tells
        // the server nothing it does not already know, and a one-shot client need not sit it
        // out: it is 18 ms of a 1 KB trial's overhead at no delay.
        if conn.is_closed() || done {
            break;
        }
        if Instant::now() > deadline {
            return Err(format!("no response within {} s", a.timeout));
        }
        let now = Instant::now();
        let wait = conn.timeout().unwrap_or(Duration::from_millis(100));
        let wait = acks
            .deadline()
            .map_or(wait, |d| wait.min(d.saturating_duration_since(now)));
        match super::receive(&socket, &mut buf, wait)? {
            Some((len, from)) => {
                let info = quiche::RecvInfo { from, to: local };
                if let Err(e) = conn.recv(&mut buf[..len], info) {
                    return Err(format!("receiving: {e}"));
                }
                acks.received(Instant::now());
            }
            // one of quiche's timers fired (it does nothing if none did), or the ACK is due
            None => {
                conn.on_timeout();
                acks.force();
            }
        }
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

/// When the client hands quiche's packets to the socket once the handshake is done. quiche
/// acknowledges whatever arrived each time its application asks it for packets to send, and
/// leaves when to ask to the application: asked after every datagram, it acknowledges each
/// packet on its own (one ACK per data packet, twice RFC 9000's recommendation). This policy
/// follows RFC 9000 s13.2.2: send once two packets have arrived since the last send, or
/// `max_ack_delay` (quiche's default of 25 ms, which it advertises to the server) after the
/// first of them, and at once when one of quiche's own timers fires.
#[derive(Default)]
struct AckPolicy {
    /// Packets received since the last send, and when the first of them came.
    pending: u32,
    since: Option<Instant>,
    /// Send at the next turn whatever the count.
    now: bool,
}

/// The advertised `max_ack_delay` (quiche's default transport parameter).
const MAX_ACK_DELAY: Duration = Duration::from_millis(25);

impl AckPolicy {
    fn received(&mut self, at: Instant) {
        self.pending += 1;
        self.since.get_or_insert(at);
    }

    fn force(&mut self) {
        self.now = true;
    }

    /// When the packets received must be acknowledged at the latest.
    fn deadline(&self) -> Option<Instant> {
        self.since.map(|t| t + MAX_ACK_DELAY)
    }

    fn due(&self, now: Instant) -> bool {
        self.now || self.pending >= 2 || self.deadline().is_some_and(|d| now >= d)
    }

    fn sent(&mut self) {
        *self = AckPolicy::default();
    }
}
