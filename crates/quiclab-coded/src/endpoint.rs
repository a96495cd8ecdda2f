//! Many connections behind one socket: an [`Endpoint`] routes each datagram to its connection by
//! destination connection id, accepts new connections from client Initials (when it serves),
//! and merges the connections' transmissions and timers. Sans-IO like the connections: the
//! caller owns the socket, keeps the peer address of each [`Handle`] (the source of the first
//! datagram that made it, for a server) and passes `now` in.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use crate::connection::{Config, Connection};
use crate::error::ConnectionError;
use crate::packet::{self, Cid, Level};

/// Names one connection of an endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Handle(pub u64);

/// What [`Endpoint::handle_datagram`] did with a datagram.
#[derive(Debug, Clone, PartialEq)]
pub enum Routed {
    /// Given to an existing connection.
    Existing(Handle),
    /// A client's Initial that made a new connection (servers only).
    New(Handle),
    /// Dropped: unknown connection id, not a valid Initial, or no server configuration.
    Dropped,
}

pub struct Endpoint {
    config: Config,
    server: Option<Arc<rustls::ServerConfig>>,
    connections: BTreeMap<Handle, Connection>,
    routes: HashMap<Cid, Handle>,
    next: u64,
    /// Round-robin position of `poll_transmit`.
    cursor: u64,
}

impl Endpoint {
    /// An endpoint that accepts connections with `tls` (and may also connect).
    pub fn server(config: Config, tls: Arc<rustls::ServerConfig>) -> Self {
        Endpoint {
            server: Some(tls),
            ..Self::client(config)
        }
    }

    /// An endpoint that only connects.
    pub fn client(config: Config) -> Self {
        Endpoint {
            config,
            server: None,
            connections: BTreeMap::new(),
            routes: HashMap::new(),
            next: 0,
            cursor: 0,
        }
    }

    fn insert(&mut self, conn: Connection) -> Handle {
        let h = Handle(self.next);
        self.next += 1;
        self.routes.insert(conn.local_cid(), h);
        if conn.side() == rustls::Side::Server {
            self.routes.insert(conn.initial_cid(), h);
        }
        self.connections.insert(h, conn);
        h
    }

    /// Starts a connection to `server_name`.
    pub fn connect(
        &mut self,
        now: Duration,
        tls: Arc<rustls::ClientConfig>,
        server_name: &str,
    ) -> Result<Handle, ConnectionError> {
        let conn = Connection::connect(now, self.config.clone(), tls, server_name)?;
        Ok(self.insert(conn))
    }

    pub fn connection(&mut self, h: Handle) -> Option<&mut Connection> {
        self.connections.get_mut(&h)
    }

    pub fn handles(&self) -> impl Iterator<Item = Handle> + '_ {
        self.connections.keys().copied()
    }

    pub fn len(&self) -> usize {
        self.connections.len()
    }

    pub fn is_empty(&self) -> bool {
        self.connections.is_empty()
    }

    /// Routes one received datagram.
    pub fn handle_datagram(&mut self, now: Duration, datagram: &[u8]) -> Routed {
        let Ok(header) = packet::parse_header(datagram) else {
            return Routed::Dropped;
        };
        if let Some(&h) = self.routes.get(&header.dcid)
            && let Some(conn) = self.connections.get_mut(&h)
        {
            conn.handle_datagram(now, datagram);
            return Routed::Existing(h);
        }
        let Some(tls) = &self.server else {
            return Routed::Dropped;
        };
        if header.level != Level::Initial {
            return Routed::Dropped;
        }
        match Connection::accept(now, self.config.clone(), tls.clone(), datagram) {
            Ok(conn) => Routed::New(self.insert(conn)),
            Err(_) => Routed::Dropped,
        }
    }

    /// The next datagram any connection has to send, with its connection; connections take
    /// turns.
    pub fn poll_transmit(&mut self, now: Duration) -> Option<(Handle, Vec<u8>)> {
        let handles: Vec<Handle> = self
            .connections
            .range(Handle(self.cursor)..)
            .chain(self.connections.range(..Handle(self.cursor)))
            .map(|(h, _)| *h)
            .collect();
        for h in handles {
            let conn = self.connections.get_mut(&h).expect("listed handles exist");
            if let Some(d) = conn.poll_transmit(now) {
                self.cursor = h.0 + 1;
                return Some((h, d));
            }
        }
        None
    }

    /// The earliest timer of any connection.
    pub fn poll_timeout(&self) -> Option<Duration> {
        self.connections
            .values()
            .filter_map(Connection::poll_timeout)
            .min()
    }

    /// Runs every connection's due timers.
    pub fn handle_timeout(&mut self, now: Duration) {
        for conn in self.connections.values_mut() {
            if conn.poll_timeout().is_some_and(|t| t <= now) {
                conn.handle_timeout(now);
            }
        }
    }

    /// Forgets closed connections; returns them (their statistics stay readable).
    pub fn remove_closed(&mut self) -> Vec<(Handle, Connection)> {
        let closed: Vec<Handle> = self
            .connections
            .iter()
            .filter(|(_, c)| c.is_closed())
            .map(|(h, _)| *h)
            .collect();
        closed
            .into_iter()
            .filter_map(|h| {
                let conn = self.connections.remove(&h)?;
                self.routes.retain(|_, v| *v != h);
                Some((h, conn))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::connection::Event;
    use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};

    #[test]
    fn one_server_endpoint_serves_two_clients_and_drops_strangers() {
        let rcgen::CertifiedKey { cert, signing_key } =
            rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(signing_key.serialize_der()));
        let server_tls = crate::crypto::server_config(vec![cert.der().clone()], key).unwrap();
        let client_tls = crate::crypto::client_config(&[cert.der().clone()]).unwrap();
        let config = Config::default();
        let mut server = Endpoint::server(config.clone(), server_tls);
        let mut clients = Endpoint::client(config);
        let mut now = Duration::ZERO;
        let a = clients
            .connect(now, client_tls.clone(), "localhost")
            .unwrap();
        let b = clients.connect(now, client_tls, "localhost").unwrap();
        for (h, size) in [(a, 3000usize), (b, 70_000)] {
            let c = clients.connection(h).unwrap();
            let s = c.open_stream().unwrap();
            c.write(s, format!("{size}").as_bytes()).unwrap();
            c.finish(s).unwrap();
        }
        assert_eq!(
            server.handle_datagram(now, &[0x40; 40]),
            Routed::Dropped,
            "unknown connection id"
        );
        let mut got = BTreeMap::new();
        // a perfect wire with 1 ms each way
        let mut in_flight: Vec<(Duration, bool, Vec<u8>)> = Vec::new();
        while now < Duration::from_secs(5) && got.values().filter(|(_, fin)| *fin).count() < 2 {
            server.handle_timeout(now);
            clients.handle_timeout(now);
            let due: Vec<_> = in_flight.iter().filter(|d| d.0 <= now).cloned().collect();
            in_flight.retain(|d| d.0 > now);
            for (_, to_server, d) in due {
                if to_server {
                    server.handle_datagram(now, &d);
                } else {
                    clients.handle_datagram(now, &d);
                }
            }
            for h in server.handles().collect::<Vec<_>>() {
                let c = server.connection(h).unwrap();
                while let Some(ev) = c.poll_event() {
                    if let Event::StreamReadable(id) = ev {
                        let (req, fin) = c.read(id).unwrap();
                        if fin {
                            let n: usize = String::from_utf8(req).unwrap().parse().unwrap();
                            c.write(id, &vec![7; n]).unwrap();
                            c.finish(id).unwrap();
                        }
                    }
                }
            }
            for h in [a, b] {
                let c = clients.connection(h).unwrap();
                while let Some(ev) = c.poll_event() {
                    if let Event::StreamReadable(id) = ev {
                        let (data, fin) = c.read(id).unwrap();
                        let e: &mut (usize, bool) = got.entry(h).or_default();
                        e.0 += data.len();
                        e.1 |= fin;
                    }
                }
            }
            while let Some((_, d)) = server.poll_transmit(now) {
                in_flight.push((now + Duration::from_millis(1), false, d));
            }
            while let Some((_, d)) = clients.poll_transmit(now) {
                in_flight.push((now + Duration::from_millis(1), true, d));
            }
            now += Duration::from_micros(100);
        }
        assert_eq!(server.len(), 2);
        assert_eq!(got[&a], (3000, true));
        assert_eq!(got[&b], (70_000, true));
        for h in [a, b] {
            clients.connection(h).unwrap().close(0);
        }
        while let Some((_, d)) = clients.poll_transmit(now) {
            server.handle_datagram(now, &d);
        }
        assert_eq!(server.remove_closed().len(), 2);
        assert!(server.is_empty());
    }
}
