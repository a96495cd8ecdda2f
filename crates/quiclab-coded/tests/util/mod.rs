//! A client and a server connection joined by quiclab's emulated link, in virtual time.
//!
//! Datagrams travel as IPv4/UDP packets would: 28 bytes of header are added on the link (so the
//! bottleneck serialises what a real one would) and removed on delivery.

#![allow(dead_code)]

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use quiclab_coded::{Config, Connection, Event};
use quiclab_link::{Direction, Link, LinkConfig};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

pub const IP_UDP_HEADER: usize = 28;

pub fn ms(v: u64) -> Duration {
    Duration::from_millis(v)
}

/// Byte `i` of a response body.
pub fn pattern(i: u64) -> u8 {
    (i % 251) as u8
}

struct Identity {
    chain: Vec<CertificateDer<'static>>,
    key: PrivatePkcs8KeyDer<'static>,
}

fn identity() -> &'static Identity {
    static ID: OnceLock<Identity> = OnceLock::new();
    ID.get_or_init(|| {
        let rcgen::CertifiedKey { cert, signing_key } =
            rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
        Identity {
            chain: vec![cert.der().clone()],
            key: PrivatePkcs8KeyDer::from(signing_key.serialize_der()),
        }
    })
}

pub fn server_tls() -> Arc<rustls::ServerConfig> {
    let id = identity();
    quiclab_coded::crypto::server_config(id.chain.clone(), PrivateKeyDer::Pkcs8(id.key.clone_key()))
        .unwrap()
}

pub fn client_tls() -> Arc<rustls::ClientConfig> {
    quiclab_coded::crypto::client_config(&identity().chain).unwrap()
}

/// Builds a link from `quiclab link`-style keys, e.g. `[("rate", "10mbit"), ("delay", "25ms")]`.
pub fn link(seed: u64, keys: &[(&str, &str)]) -> LinkConfig {
    LinkConfig::from_keys(seed, keys, &|_| Err("no files".to_string())).unwrap()
}

/// What happens to a packet at the link's exit: deliver it, or change it first.
pub type Tamper = Box<dyn FnMut(Direction, u64, &mut Vec<u8>)>;

pub struct Pair {
    pub now: Duration,
    pub client: Connection,
    pub server: Option<Connection>,
    pub link: Link,
    pub link_config: LinkConfig,
    config: Config,
    server_tls: Arc<rustls::ServerConfig>,
    pub tamper: Option<Tamper>,
    /// Datagrams pushed into the link per direction (up, down).
    pub pushed: [u64; 2],
    /// The time of the last step's deliveries (events seen after a step happened then).
    pub at: Duration,
}

impl Pair {
    pub fn new(link_config: LinkConfig, config: Config) -> Self {
        let now = Duration::ZERO;
        let client = Connection::connect(now, config.clone(), client_tls(), "localhost").unwrap();
        Pair {
            now,
            client,
            server: None,
            link: Link::new(&link_config, false).unwrap(),
            link_config,
            config,
            server_tls: server_tls(),
            tamper: None,
            pushed: [0; 2],
            at: now,
        }
    }

    pub fn server(&mut self) -> &mut Connection {
        self.server.as_mut().expect("the server has accepted")
    }

    /// Runs due timers, delivers every datagram due at `now`, sends what the connections have
    /// to send, then advances the clock to the next event (at most to `limit`). Returns false when nothing is left to happen before `limit`.
    pub fn step(&mut self, limit: Duration) -> bool {
        let now = self.now;
        self.at = now;
        if self.client.poll_timeout().is_some_and(|t| t <= now) {
            self.client.handle_timeout(now);
        }
        if let Some(s) = &mut self.server
            && s.poll_timeout().is_some_and(|t| t <= now)
        {
            s.handle_timeout(now);
        }
        while let Some(dep) = self.link.up.poll_transmit(now) {
            let mut d = dep.data;
            d.truncate(d.len() - IP_UDP_HEADER);
            if let Some(t) = &mut self.tamper {
                t(Direction::Up, dep.index, &mut d);
            }
            match &mut self.server {
                Some(s) => s.handle_datagram(now, &d),
                None => {
                    if let Ok(s) =
                        Connection::accept(now, self.config.clone(), self.server_tls.clone(), &d)
                    {
                        self.server = Some(s);
                    }
                }
            }
        }
        while let Some(dep) = self.link.down.poll_transmit(now) {
            let mut d = dep.data;
            d.truncate(d.len() - IP_UDP_HEADER);
            if let Some(t) = &mut self.tamper {
                t(Direction::Down, dep.index, &mut d);
            }
            self.client.handle_datagram(now, &d);
        }
        while let Some(mut d) = self.client.poll_transmit(now) {
            d.resize(d.len() + IP_UDP_HEADER, 0);
            self.link.up.push(now, d);
            self.pushed[0] += 1;
        }
        if let Some(s) = &mut self.server {
            while let Some(mut d) = s.poll_transmit(now) {
                d.resize(d.len() + IP_UDP_HEADER, 0);
                self.link.down.push(now, d);
                self.pushed[1] += 1;
            }
        }
        let mut next: Option<Duration> = None;
        let mut consider = |t: Option<Duration>| {
            if let Some(t) = t {
                next = Some(next.map_or(t, |n| n.min(t)));
            }
        };
        consider(self.client.poll_timeout());
        consider(self.server.as_ref().and_then(|s| s.poll_timeout()));
        consider(self.link.up.poll_timeout());
        consider(self.link.down.poll_timeout());
        match next {
            Some(t) if t <= limit => {
                // a timer due now whose handling sent nothing must not spin: move on by 1 us
                self.now = t.max(now + Duration::from_micros(1)).min(limit);
                true
            }
            _ => false,
        }
    }
}

/// The outcome of one GET.
#[derive(Debug, Clone)]
pub struct Get {
    pub bytes: u64,
    pub exact: bool,
    /// When the client had the whole body (virtual time since the start).
    pub done_at: Option<Duration>,
    pub first_byte_at: Option<Duration>,
    pub established_at: Option<Duration>,
}

impl Get {
    /// Body bytes per second from the handshake's end to the last byte.
    pub fn goodput_bps(&self) -> f64 {
        let (Some(done), Some(est)) = (self.done_at, self.established_at) else {
            return 0.0;
        };
        self.bytes as f64 * 8.0 / (done - est).as_secs_f64()
    }
}

/// Runs a GET of `size` bytes (request `GET /bytes/N` on a new stream, the server answers with
/// `size` bytes of [`pattern`]) until the client has it all or `limit` passes; then closes.
pub fn get(pair: &mut Pair, size: u64, limit: Duration) -> Get {
    let stream = pair.client.open_stream().unwrap();
    pair.client
        .write(stream, format!("GET /bytes/{size}").as_bytes())
        .unwrap();
    pair.client.finish(stream).unwrap();
    let mut out = Get {
        bytes: 0,
        exact: true,
        done_at: None,
        first_byte_at: None,
        established_at: None,
    };
    let mut requests: std::collections::BTreeMap<u64, Vec<u8>> = Default::default();
    loop {
        while let Some(ev) = pair.client.poll_event() {
            match ev {
                Event::Connected => {}
                Event::StreamReadable(id) => {
                    assert_eq!(id, stream);
                    let (data, fin) = pair.client.read(id).unwrap();
                    if !data.is_empty() && out.first_byte_at.is_none() {
                        out.first_byte_at = Some(pair.at);
                    }
                    for (i, b) in data.iter().enumerate() {
                        if *b != pattern(out.bytes + i as u64) {
                            out.exact = false;
                        }
                    }
                    out.bytes += data.len() as u64;
                    if fin {
                        out.done_at = Some(pair.at);
                    }
                }
                Event::Closed(e) => panic!("client closed: {e}"),
                Event::StreamOpened(_) => panic!("the server opened a stream"),
            }
        }
        if let Some(s) = &mut pair.server {
            while let Some(ev) = s.poll_event() {
                match ev {
                    Event::StreamReadable(id) => {
                        let (data, fin) = s.read(id).unwrap();
                        let req = requests.entry(id).or_default();
                        req.extend_from_slice(&data);
                        if fin {
                            let text = String::from_utf8(req.clone()).unwrap();
                            let n: u64 = text.strip_prefix("GET /bytes/").unwrap().parse().unwrap();
                            let body: Vec<u8> = (0..n).map(pattern).collect();
                            s.write(id, &body).unwrap();
                            s.finish(id).unwrap();
                        }
                    }
                    Event::Closed(e) => panic!("server closed: {e}"),
                    Event::Connected | Event::StreamOpened(_) => {}
                }
            }
        }
        if out.done_at.is_some() {
            break;
        }
        if !pair.step(limit) {
            break;
        }
    }
    out.exact &= out.bytes == size;
    out.established_at = pair.client.stats().established_at;
    pair.client.close(0);
    // let the close reach the server
    let end = pair.now + ms(500);
    while pair.step(end) {
        if pair.server.as_ref().is_none_or(|s| s.is_closed()) {
            break;
        }
    }
    out
}

/// Two endpoints (every client on one side, every server connection on the other) joined by
/// one emulated link, so that their connections share its bottleneck.
pub struct Shared {
    pub now: Duration,
    pub clients: quiclab_coded::Endpoint,
    pub server: quiclab_coded::Endpoint,
    pub link: Link,
    pub at: Duration,
}

impl Shared {
    pub fn new(link_config: &LinkConfig, config: Config) -> Self {
        Shared {
            now: Duration::ZERO,
            clients: quiclab_coded::Endpoint::client(config.clone()),
            server: quiclab_coded::Endpoint::server(config, server_tls()),
            link: Link::new(link_config, false).unwrap(),
            at: Duration::ZERO,
        }
    }

    pub fn connect(&mut self) -> quiclab_coded::Handle {
        self.clients
            .connect(self.now, client_tls(), "localhost")
            .unwrap()
    }

    /// As [`Pair::step`].
    pub fn step(&mut self, limit: Duration) -> bool {
        let now = self.now;
        self.at = now;
        self.clients.handle_timeout(now);
        self.server.handle_timeout(now);
        while let Some(dep) = self.link.up.poll_transmit(now) {
            let mut d = dep.data;
            d.truncate(d.len() - IP_UDP_HEADER);
            self.server.handle_datagram(now, &d);
        }
        while let Some(dep) = self.link.down.poll_transmit(now) {
            let mut d = dep.data;
            d.truncate(d.len() - IP_UDP_HEADER);
            self.clients.handle_datagram(now, &d);
        }
        while let Some((_, mut d)) = self.clients.poll_transmit(now) {
            d.resize(d.len() + IP_UDP_HEADER, 0);
            self.link.up.push(now, d);
        }
        while let Some((_, mut d)) = self.server.poll_transmit(now) {
            d.resize(d.len() + IP_UDP_HEADER, 0);
            self.link.down.push(now, d);
        }
        let next = [
            self.clients.poll_timeout(),
            self.server.poll_timeout(),
            self.link.up.poll_timeout(),
            self.link.down.poll_timeout(),
        ]
        .into_iter()
        .flatten()
        .min();
        match next {
            Some(t) if t <= limit => {
                self.now = t.max(now + Duration::from_micros(1)).min(limit);
                true
            }
            _ => false,
        }
    }
}
