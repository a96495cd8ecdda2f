//! The server: every connection on one UDP socket, each request answered from the documents
//! directory, responses scheduled by quiche's RFC 9218 scheduler.

use std::collections::{BTreeSet, HashMap};
use std::io::Read;
use std::net::{SocketAddr, UdpSocket};
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use quiche::h3::NameValue;

/// Serve a documents directory over HTTP/3 until SIGINT or SIGTERM.
#[derive(clap::Args)]
pub struct Args {
    #[arg(long, default_value = "0.0.0.0")]
    addr: String,
    #[arg(long, default_value_t = 443)]
    port: u16,
    /// Certificate chain and private key (PEM).
    #[arg(long)]
    cert: PathBuf,
    #[arg(long)]
    key: PathBuf,
    /// The documents directory (GET /a/b serves DIR/a/b).
    #[arg(long)]
    htdocs: PathBuf,
    /// Write a qlog file per connection here.
    #[arg(long)]
    qlog_dir: Option<PathBuf>,
    /// Congestion controller: cubic, reno or bbr2.
    #[arg(long, default_value = "cubic")]
    cc: String,
    /// Honour the clients' RFC 9218 priorities (on), or send every response at the default
    /// priority, in the order requested (off).
    #[arg(long, default_value = "on", value_parser = ["on", "off"])]
    priorities: String,
}

/// A response still being sent.
struct Response {
    headers: Option<Vec<quiche::h3::Header>>,
    priority: quiche::h3::Priority,
    body: Option<std::fs::File>,
    /// Read from the file but not yet taken by the stream.
    pending: Vec<u8>,
    offset: usize,
    /// The whole file was read: only the stream's end is left to send.
    eof: bool,
}

struct Client {
    conn: quiche::Connection,
    h3: Option<quiche::h3::Connection>,
    responses: HashMap<u64, Response>,
    /// The streams of responses not yet wholly sent: quiche keeps a stream until its peer has
    /// acknowledged all of it, and holds what the application handed it until it can send it.
    sending: BTreeSet<u64>,
    /// Bytes the congestion window had room for when the last packet came in, less what was
    /// sent since (see [`send_full`]); `None` while no response is under way.
    room: Option<usize>,
    /// When the last packet came in.
    heard: Instant,
}

/// Bytes read from a file per turn.
const CHUNK: usize = 64 * 1024;

pub fn run(a: Args) -> Result<(), String> {
    let mut config = super::config(&a.cc)?;
    config
        .load_cert_chain_from_pem_file(&a.cert.display().to_string())
        .map_err(|e| format!("{}: {e}", a.cert.display()))?;
    config
        .load_priv_key_from_pem_file(&a.key.display().to_string())
        .map_err(|e| format!("{}: {e}", a.key.display()))?;
    config.enable_early_data();
    let honour = a.priorities == "on";
    let h3_config = quiche::h3::Config::new().map_err(|e| e.to_string())?;
    let addr: SocketAddr = format!("{}:{}", a.addr, a.port)
        .parse()
        .or_else(|_| format!("[{}]:{}", a.addr, a.port).parse())
        .map_err(|e| format!("--addr {}: {e}", a.addr))?;
    let socket = UdpSocket::bind(addr).map_err(|e| format!("binding {addr}: {e}"))?;
    let local = socket.local_addr().map_err(|e| e.to_string())?;
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, stop.clone()).map_err(|e| e.to_string())?;
    }
    eprintln!("quiclab-quiche: serving {} on {local}", a.htdocs.display());
    let mut clients: HashMap<Vec<u8>, Client> = HashMap::new();
    // a client's first packets name the id it chose; later ones ours
    let mut aliases: HashMap<Vec<u8>, Vec<u8>> = HashMap::new();
    let (mut buf, mut out) = (vec![0u8; 65_536], vec![0u8; super::MAX_DATAGRAM]);
    let mut accepted = 0u32;
    while !stop.load(Ordering::Relaxed) {
        let wait = clients
            .values()
            .filter_map(|c| c.conn.timeout())
            .chain(clients.values().filter_map(Client::held_for))
            .min()
            .unwrap_or(Duration::from_millis(50))
            .min(Duration::from_millis(50));
        let started = Instant::now();
        match super::receive(&socket, &mut buf, wait)? {
            None => clients.values_mut().for_each(Client::on_timeout),
            Some((len, from)) => {
                let pkt = &mut buf[..len];
                let Ok(hdr) = quiche::Header::from_slice(pkt, quiche::MAX_CONN_ID_LEN) else {
                    continue;
                };
                let dcid = hdr.dcid.to_vec();
                let key = if clients.contains_key(&dcid) {
                    dcid
                } else if let Some(k) = aliases.get(&dcid) {
                    k.clone()
                } else {
                    if hdr.ty != quiche::Type::Initial {
                        continue;
                    }
                    if !quiche::version_is_supported(hdr.version) {
                        if let Ok(n) = quiche::negotiate_version(&hdr.scid, &hdr.dcid, &mut out) {
                            let _ = socket.send_to(&out[..n], from);
                        }
                        continue;
                    }
                    let id = super::random_id();
                    let scid = quiche::ConnectionId::from_ref(&id);
                    let mut conn = quiche::accept(&scid, None, local, from, &mut config)
                        .map_err(|e| format!("accepting: {e}"))?;
                    super::record(
                        &mut conn,
                        a.qlog_dir.as_deref(),
                        &format!("server-{accepted}.sqlog"),
                        "quiclab-quiche server",
                    )?;
                    accepted += 1;
                    aliases.insert(dcid, id.to_vec());
                    clients.insert(
                        id.to_vec(),
                        Client {
                            conn,
                            h3: None,
                            responses: HashMap::new(),
                            sending: BTreeSet::new(),
                            room: None,
                            heard: Instant::now(),
                        },
                    );
                    id.to_vec()
                };
                let Some(client) = clients.get_mut(&key) else {
                    continue;
                };
                let info = quiche::RecvInfo { from, to: local };
                if client.conn.recv(pkt, info).is_err() {
                    continue;
                }
                client.room = room(client);
                client.heard = Instant::now();
                serve(client, &h3_config, &a.htdocs, honour);
            }
        }
        // timers that expired while a datagram kept the socket busy
        if started.elapsed() >= wait {
            clients.values_mut().for_each(Client::on_timeout);
        }
        for c in clients.values_mut() {
            c.release_if_silent();
            serve(c, &h3_config, &a.htdocs, honour);
            send_full(c, &socket, &mut out)?;
        }
        clients.retain(|_, c| !c.conn.is_closed());
        aliases.retain(|_, k| clients.contains_key(k));
    }
    // closing writes every connection's qlog to its end
    for c in clients.values_mut() {
        let _ = c.conn.close(true, 0x100, b"server stopping");
        super::flush(&mut c.conn, &socket, &mut out)?;
    }
    Ok(())
}

impl Client {
    /// How much longer the whole-packet rule may hold this connection's packets back: until a
    /// round trip has passed without a packet from the peer. The room is read from quiche's send
    /// capacity, which the peer's flow-control credit caps too; a peer that waits for a lost
    /// packet's repair before it grants more credit would otherwise wait for ever.
    fn held_for(&self) -> Option<Duration> {
        let room = self.room?;
        (room < super::MAX_DATAGRAM).then(|| {
            let rtt = self
                .conn
                .path_stats()
                .next()
                .map_or(Duration::from_millis(100), |p| p.rtt);
            (self.heard + rtt).saturating_duration_since(Instant::now())
        })
    }

    /// After a round trip without a packet from the peer, whatever quiche has goes.
    fn release_if_silent(&mut self) {
        if self.held_for().is_some_and(|d| d.is_zero()) {
            self.room = None;
        }
    }

    /// quiche's timers (it does nothing if none fired). A probe (its loss-detection timer
    /// expired with nothing acknowledged) is sent whatever the window's room: one packet may go.
    fn on_timeout(&mut self) {
        if self.conn.timeout().is_some_and(|t| t.is_zero()) {
            self.conn.on_timeout();
            self.room = self.room.map(|r| r.max(super::MAX_DATAGRAM));
        }
    }
}

/// The room the congestion window has once a packet came in: quiche's send capacity (the
/// window's room times [`super::SEND_CAPACITY_FACTOR`], as the stream-data bytes the
/// application may hand over) just after `recv`, before anything is written; `None` while no
/// response is under way.
fn room(c: &mut Client) -> Option<usize> {
    let conn = &mut c.conn;
    let mut room = None;
    // a stream quiche no longer has (all of it acknowledged, or reset) is done
    c.sending.retain(|s| match conn.stream_capacity(*s) {
        Ok(cap) => {
            room = room.max(Some(cap));
            true
        }
        Err(_) => false,
    });
    room.map(|r| (r as f64 / super::SEND_CAPACITY_FACTOR) as usize)
}

/// Sends what the connection has to send, but while a response is under way only whole
/// packets: once the window has room for less than a full packet, the rest waits for the next
/// acknowledgement, as a TCP sender counting its window in segments waits.
///
/// quiche builds a packet of whatever the window has room for, down to a few bytes. Its window
/// grows by a quarter packet an acknowledgement in HyStart++'s conservative slow start, and by
/// odd amounts in recovery, so a sender that sends whenever the window opens makes small
/// packets; once acknowledged, each small packet frees room for one more of its size, and
/// they never die out (half of a 5 MB download's packets were under 700 bytes).
///
/// A window left with room is taken by quiche for an application with nothing to send, and
/// then it does not grow: the last, too short buffer tells quiche that the window is what
/// stops it (quiche's own path for "cwnd almost full", which marks the sender not
/// application-limited). That path is reached only while quiche holds data it could send,
/// hence [`super::SEND_CAPACITY_FACTOR`].
fn send_full(c: &mut Client, socket: &UdpSocket, out: &mut [u8]) -> Result<(), String> {
    let Some(mut room) = c.room else {
        return super::flush(&mut c.conn, socket, out);
    };
    while room >= out.len() {
        match super::send_one(&mut c.conn, socket, out)? {
            Some(len) => room -= len.min(room),
            None => break,
        }
    }
    if room < out.len() {
        // A buffer that holds a short header but not its packet number and AEAD tag: quiche
        // writes the header, finds no room for the rest, marks the sender not
        // application-limited and sends nothing. (One byte would fail on the header, before
        // that mark.)
        let header = 1 + c.conn.destination_id().len();
        let _ = c.conn.send(&mut out[..header + 2]);
    }
    c.room = Some(room);
    Ok(())
}

/// Starts HTTP/3 once the handshake allows, answers new requests and moves responses on.
fn serve(c: &mut Client, h3_config: &quiche::h3::Config, htdocs: &Path, honour: bool) {
    if (c.conn.is_in_early_data() || c.conn.is_established()) && c.h3.is_none() {
        match quiche::h3::Connection::with_transport(&mut c.conn, h3_config) {
            Ok(h) => c.h3 = Some(h),
            Err(_) => {
                let _ = c.conn.close(true, 0x101, b"HTTP/3 setup failed");
                return;
            }
        }
    }
    let Some(h3) = c.h3.as_mut() else {
        return;
    };
    loop {
        match h3.poll(&mut c.conn) {
            Ok((stream, quiche::h3::Event::Headers { list, .. })) => {
                let (u, i) = match list.iter().find(|h| h.name() == b"priority") {
                    Some(h) if honour => parse_priority(h.value()),
                    _ => (3, false),
                };
                let priority = quiche::h3::Priority::new(u, i);
                let _ = c.conn.stream_shutdown(stream, quiche::Shutdown::Read, 0);
                c.responses.insert(stream, respond(&list, htdocs, priority));
                c.sending.insert(stream);
            }
            Ok((stream, quiche::h3::Event::PriorityUpdate)) => {
                let update = h3.take_last_priority_update(stream);
                if let (true, Ok(v)) = (honour, update) {
                    let (u, i) = parse_priority(&v);
                    match c.responses.get_mut(&stream) {
                        // not started: it starts at the new priority
                        Some(r) if r.headers.is_some() => {
                            r.priority = quiche::h3::Priority::new(u, i)
                        }
                        _ => {
                            let _ = c.conn.stream_priority(stream, u, i);
                        }
                    }
                }
            }
            Ok(_) => {}
            Err(quiche::h3::Error::Done) => break,
            Err(_) => break,
        }
    }
    // Headers first, in request order: they give each stream its priority. Then bodies, in
    // the order quiche's scheduler ranks the writable streams (most urgent first): a body
    // written early would otherwise take the window a more urgent one should have.
    let mut waiting: Vec<u64> = c
        .responses
        .iter()
        .filter(|(_, r)| r.headers.is_some())
        .map(|(s, _)| *s)
        .collect();
    waiting.sort_unstable();
    for s in waiting {
        if send(
            &mut c.conn,
            h3,
            s,
            c.responses.get_mut(&s).expect("listed"),
            true,
        ) {
            c.responses.remove(&s);
        }
    }
    for s in c.conn.writable() {
        if let Some(r) = c.responses.get_mut(&s)
            && send(&mut c.conn, h3, s, r, false)
        {
            c.responses.remove(&s);
        }
    }
}

/// An RFC 9218 priority field value ("u=1, i"): urgency 0-7 (3 when absent, 7 when out of
/// range, as RFC 9218 says) and incremental (false when absent). Parameters it does not know
/// are ignored.
fn parse_priority(v: &[u8]) -> (u8, bool) {
    let (mut urgency, mut incremental) = (3u8, false);
    for item in String::from_utf8_lossy(v).split(',') {
        let (k, val) = item.trim().split_once('=').unwrap_or((item.trim(), "?1"));
        match k {
            "u" => {
                urgency = match val.trim().parse::<i64>() {
                    Ok(u @ 0..=7) => u as u8,
                    Ok(_) => 7,
                    Err(_) => urgency,
                }
            }
            "i" => incremental = val.trim() == "?1",
            _ => {}
        }
    }
    (urgency, incremental)
}

/// The response to a request: the file at its path, or 404 (or 405 for another method).
fn respond(
    request: &[quiche::h3::Header],
    htdocs: &Path,
    priority: quiche::h3::Priority,
) -> Response {
    let value = |name: &[u8]| {
        request
            .iter()
            .find(|h| h.name() == name)
            .map(|h| String::from_utf8_lossy(h.value()).into_owned())
    };
    let path = value(b":path").unwrap_or_default();
    let path = path.split(['?', '#']).next().unwrap_or("");
    let file = if value(b":method").as_deref() == Some("GET") {
        let mut p = htdocs.to_path_buf();
        for part in Path::new(path).components() {
            if let Component::Normal(n) = part {
                p.push(n);
            }
        }
        std::fs::File::open(&p).ok().and_then(|f| {
            f.metadata()
                .ok()
                .filter(|m| m.is_file())
                .map(|m| (f, m.len()))
        })
    } else {
        None
    };
    let (status, len, body) = match file {
        Some((f, len)) => ("200", len, Some(f)),
        None if value(b":method").as_deref() == Some("GET") => ("404", 0, None),
        None => ("405", 0, None),
    };
    Response {
        headers: Some(vec![
            quiche::h3::Header::new(b":status", status.as_bytes()),
            quiche::h3::Header::new(b"server", b"quiclab-quiche"),
            quiche::h3::Header::new(b"content-length", len.to_string().as_bytes()),
        ]),
        priority,
        body,
        pending: Vec::new(),
        offset: 0,
        eof: false,
    }
}

/// Moves one response on as far as the stream takes it (its headers only, if asked); true when
/// it is all sent.
fn send(
    conn: &mut quiche::Connection,
    h3: &mut quiche::h3::Connection,
    stream: u64,
    r: &mut Response,
    headers_only: bool,
) -> bool {
    if let Some(headers) = &r.headers {
        let fin = r.body.is_none();
        match h3.send_response_with_priority(conn, stream, headers, &r.priority, fin) {
            Ok(()) => r.headers = None,
            Err(quiche::h3::Error::StreamBlocked | quiche::h3::Error::Done) => return false,
            // the stream is gone (reset by the client): nothing more to send
            Err(_) => return true,
        }
        if fin {
            return true;
        }
    }
    if headers_only || r.headers.is_some() {
        return false;
    }
    loop {
        if r.offset == r.pending.len() && !r.eof {
            let Some(f) = r.body.as_mut() else {
                return true;
            };
            r.pending.resize(CHUNK, 0);
            let n = f.read(&mut r.pending).unwrap_or(0);
            r.pending.truncate(n);
            r.offset = 0;
            r.eof = n == 0;
        }
        if r.eof {
            return match h3.send_body(conn, stream, &[], true) {
                Ok(_) => true,
                Err(quiche::h3::Error::Done) => false,
                Err(_) => true,
            };
        }
        match h3.send_body(conn, stream, &r.pending[r.offset..], false) {
            Ok(n) => {
                r.offset += n;
                if n == 0 {
                    return false;
                }
            }
            Err(quiche::h3::Error::Done) => return false,
            Err(_) => return true,
        }
    }
}
