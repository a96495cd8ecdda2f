//! The server's side of the handshake read from a handshake real endpoints made: quinn's client
//! and server run in process, their datagrams written to a pcap file by quiclab's own capture
//! writer and their secrets to a key log, as a trial keeps them. What the server was configured
//! with comes back: its group and suite, a HelloRetryRequest when the client's one share is of
//! a group it does not take, and its transport parameters out of its Handshake packets; over
//! TCP, rustls's ServerHello out of its first records. After a Retry the Initial keys are the
//! new connection ID's.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use quiclab_explain::hello::capture;
use quiclab_explain::one_rtt::server_stream_data;
use quiclab_explain::server_hello::{server_hello, suite_name};
use quiclab_netns::pcap::PcapWriter;
use rustls::SupportedCipherSuite;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, SupportedKxGroup, ring};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};

const X25519: u16 = 0x001d;
const P256: u16 = 0x0017;
const P384: u16 = 0x0018;

/// A key log in SSLKEYLOGFILE's format, kept in memory.
#[derive(Debug, Default)]
struct Log(Mutex<String>);

impl rustls::KeyLog for Log {
    fn log(&self, label: &str, random: &[u8], secret: &[u8]) {
        let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
        let line = format!("{label} {} {}\n", hex(random), hex(secret));
        self.0.lock().unwrap().push_str(&line);
    }
}

/// Takes any certificate: the test reads the handshake, not the server's identity.
#[derive(Debug)]
struct AnyCert(Arc<CryptoProvider>);

impl ServerCertVerifier for AnyCert {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        _: &[u8],
        _: &CertificateDer<'_>,
        _: &rustls::DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        Ok(HandshakeSignatureValid::assertion())
    }
    fn verify_tls13_signature(
        &self,
        _: &[u8],
        _: &CertificateDer<'_>,
        _: &rustls::DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        Ok(HandshakeSignatureValid::assertion())
    }
    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

fn provider(
    groups: &[&'static dyn SupportedKxGroup],
    suites: &[SupportedCipherSuite],
) -> Arc<CryptoProvider> {
    Arc::new(CryptoProvider {
        kx_groups: groups.to_vec(),
        cipher_suites: suites.to_vec(),
        ..ring::default_provider()
    })
}

fn client_tls(groups: &[&'static dyn SupportedKxGroup], alpn: &[u8]) -> rustls::ClientConfig {
    let p = provider(groups, &ring::default_provider().cipher_suites);
    let mut c = rustls::ClientConfig::builder_with_provider(p.clone())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .unwrap()
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AnyCert(p)))
        .with_no_client_auth();
    c.alpn_protocols = vec![alpn.to_vec()];
    c
}

/// A server that takes `groups` and prefers `suites` in their order, and the log of its keys.
fn server_tls(
    groups: &[&'static dyn SupportedKxGroup],
    suites: &[SupportedCipherSuite],
    alpn: &[u8],
) -> (rustls::ServerConfig, Arc<Log>) {
    let made = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    let key = PrivateKeyDer::Pkcs8(made.signing_key.serialize_der().into());
    let mut c = rustls::ServerConfig::builder_with_provider(provider(groups, suites))
        .with_protocol_versions(&[&rustls::version::TLS13])
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![made.cert.der().clone()], key)
        .unwrap();
    c.alpn_protocols = vec![alpn.to_vec()];
    c.ignore_client_order = true;
    let log = Arc::new(Log::default());
    c.key_log = log.clone();
    (c, log)
}

const CLIENT: &str = "198.18.0.1:40000";
const SERVER: &str = "198.18.0.2:443";

/// An IPv4 UDP or TCP packet between the test's client and server (`up`: from the client).
fn ipv4(protocol: u8, up: bool, seq: u32, flags: u8, payload: &[u8]) -> Vec<u8> {
    let (sport, dport): (u16, u16) = if up { (40000, 443) } else { (443, 40000) };
    let mut l4 = Vec::new();
    l4.extend_from_slice(&sport.to_be_bytes());
    l4.extend_from_slice(&dport.to_be_bytes());
    if protocol == 17 {
        l4.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
        l4.extend_from_slice(&[0, 0]);
    } else {
        l4.extend_from_slice(&seq.to_be_bytes());
        l4.extend_from_slice(&[0, 0, 0, 0, 0x50, flags, 0xff, 0xff, 0, 0, 0, 0]);
    }
    l4.extend_from_slice(payload);
    let (src, dst) = if up {
        ([198, 18, 0, 1], [198, 18, 0, 2])
    } else {
        ([198, 18, 0, 2], [198, 18, 0, 1])
    };
    let mut p = vec![0x45, 0];
    p.extend_from_slice(&((20 + l4.len()) as u16).to_be_bytes());
    p.extend_from_slice(&[0, 0, 0, 0, 64, protocol, 0, 0]);
    p.extend_from_slice(&src);
    p.extend_from_slice(&dst);
    p.extend_from_slice(&l4);
    p
}

/// How many bytes of a datagram its long-header packets take, told from their Length fields
/// (RFC 9000 §17.2): what a 1-RTT packet coalesced after them starts at.
fn long_prefix(d: &[u8]) -> usize {
    fn varint(d: &[u8], at: &mut usize) -> usize {
        let first = d[*at];
        let n = 1usize << (first >> 6);
        let v = (1..n).fold(u64::from(first & 0x3f), |v, i| {
            v << 8 | u64::from(d[*at + i])
        });
        *at += n;
        v as usize
    }
    let mut at = 0;
    while at < d.len() && d[at] & 0x80 != 0 {
        let initial = d[at] & 0x30 == 0;
        let mut i = at + 5;
        i += 1 + usize::from(d[i]);
        i += 1 + usize::from(d[i]);
        if initial {
            let token = varint(d, &mut i);
            i += token;
        }
        let len = varint(d, &mut i);
        at = i + len;
    }
    at
}

fn pcap(packets: &[Vec<u8>]) -> Vec<u8> {
    let mut w = PcapWriter::new(Vec::new()).unwrap();
    for (i, p) in packets.iter().enumerate() {
        w.packet(Duration::from_millis(i as u64), p).unwrap();
    }
    w.into_inner().unwrap()
}

/// quinn's client and server in process, on a clock the test moves: every datagram is
/// delivered at once, but for the server's datagrams `drop` names (counted from 0), which the
/// capture does not hold either, as the link's capture of the client's side would not.
struct Pair {
    ce: quinn_proto::Endpoint,
    se: quinn_proto::Endpoint,
    cc: quinn_proto::Connection,
    sc: Option<(quinn_proto::ConnectionHandle, quinn_proto::Connection)>,
    now: Instant,
    retry: bool,
    drop: Vec<usize>,
    /// The server's datagrams so far, the dropped ones among them.
    sent: Vec<Vec<u8>>,
    /// The capture: both directions, in order, without the dropped datagrams.
    wire: Vec<Vec<u8>>,
    /// The same with them.
    full: Vec<Vec<u8>>,
    client_up: bool,
    server_up: bool,
}

impl Pair {
    fn new(
        client: rustls::ClientConfig,
        server: rustls::ServerConfig,
        transport: quinn_proto::TransportConfig,
        retry: bool,
    ) -> Pair {
        use quinn_proto::{Endpoint, EndpointConfig, ServerConfig};
        let server_crypto =
            quinn_proto::crypto::rustls::QuicServerConfig::try_from(server).unwrap();
        let mut server_config = ServerConfig::with_crypto(Arc::new(server_crypto));
        server_config.transport_config(Arc::new(transport));
        let se = Endpoint::new(
            Arc::new(EndpointConfig::default()),
            Some(Arc::new(server_config)),
            false,
            None,
        );
        let mut ce = Endpoint::new(Arc::new(EndpointConfig::default()), None, false, None);
        let client_crypto =
            quinn_proto::crypto::rustls::QuicClientConfig::try_from(client).unwrap();
        let now = Instant::now();
        let (_, cc) = ce
            .connect(
                now,
                quinn_proto::ClientConfig::new(Arc::new(client_crypto)),
                SERVER.parse().unwrap(),
                "localhost",
            )
            .unwrap();
        Pair {
            ce,
            se,
            cc,
            sc: None,
            now,
            retry,
            drop: Vec::new(),
            sent: Vec::new(),
            wire: Vec::new(),
            full: Vec::new(),
            client_up: false,
            server_up: false,
        }
    }

    /// Moves every datagram either end has to send, then the clock by 1 ms (firing timers).
    fn step(&mut self) {
        use quinn_proto::{DatagramEvent, Event};
        let (caddr, saddr): (SocketAddr, SocketAddr) =
            (CLIENT.parse().unwrap(), SERVER.parse().unwrap());
        let now = self.now;
        let mut buf = Vec::new();
        while let Some(t) = self.cc.poll_transmit(now, 1, &mut buf) {
            let d = buf[..t.size].to_vec();
            buf.clear();
            self.wire.push(ipv4(17, true, 0, 0, &d));
            self.full.push(ipv4(17, true, 0, 0, &d));
            let mut out = Vec::new();
            match self
                .se
                .handle(now, caddr, None, None, d.as_slice().into(), &mut out)
            {
                Some(DatagramEvent::NewConnection(incoming))
                    if self.retry && !incoming.remote_address_validated() =>
                {
                    // a Retry: the client comes back with the token, to a new connection ID
                    let t = self.se.retry(incoming, &mut out).unwrap();
                    let d = out[..t.size].to_vec();
                    self.wire.push(ipv4(17, false, 0, 0, &d));
                    self.full.push(ipv4(17, false, 0, 0, &d));
                    let mut ignored = Vec::new();
                    match self
                        .ce
                        .handle(now, saddr, None, None, d.as_slice().into(), &mut ignored)
                    {
                        Some(DatagramEvent::ConnectionEvent(_, ev)) => self.cc.handle_event(ev),
                        _ => panic!("the client ignored the Retry"),
                    }
                }
                Some(DatagramEvent::NewConnection(incoming)) => {
                    self.sc = Some(self.se.accept(incoming, now, &mut out, None).unwrap());
                }
                Some(DatagramEvent::ConnectionEvent(_, ev)) => self
                    .sc
                    .as_mut()
                    .expect("a server connection")
                    .1
                    .handle_event(ev),
                _ => {}
            }
        }
        if let Some((sh, s)) = self.sc.as_mut() {
            while let Some(ev) = s.poll_endpoint_events() {
                if let Some(back) = self.se.handle_event(*sh, ev) {
                    s.handle_event(back);
                }
            }
            while let Some(t) = s.poll_transmit(now, 1, &mut buf) {
                let d = buf[..t.size].to_vec();
                buf.clear();
                let dropped = self.drop.contains(&self.sent.len());
                self.sent.push(d.clone());
                self.full.push(ipv4(17, false, 0, 0, &d));
                if dropped {
                    continue;
                }
                self.wire.push(ipv4(17, false, 0, 0, &d));
                let mut out = Vec::new();
                if let Some(DatagramEvent::ConnectionEvent(_, ev)) =
                    self.ce
                        .handle(now, saddr, None, None, d.as_slice().into(), &mut out)
                {
                    self.cc.handle_event(ev);
                }
            }
            while let Some(ev) = s.poll() {
                self.server_up |= matches!(ev, Event::Connected);
            }
        }
        while let Some(ev) = self.cc.poll() {
            self.client_up |= matches!(ev, Event::Connected);
        }
        while let Some(ev) = self.cc.poll_endpoint_events() {
            if let Some(back) = self.ce.handle_event(quinn_proto::ConnectionHandle(0), ev) {
                self.cc.handle_event(back);
            }
        }
        self.now += Duration::from_millis(1);
        let now = self.now;
        if self.cc.poll_timeout().is_some_and(|t| t <= now) {
            self.cc.handle_timeout(now);
        }
        if let Some((_, s)) = self.sc.as_mut()
            && s.poll_timeout().is_some_and(|t| t <= now)
        {
            s.handle_timeout(now);
        }
    }

    /// One GET on a new stream, answered with `n` bytes: steps until the client has them all.
    fn transfer(&mut self, n: usize) {
        use quinn_proto::Dir;
        let id = self.cc.streams().open(Dir::Bi).expect("a stream");
        self.cc.send_stream(id).write(b"GET").unwrap();
        self.cc.send_stream(id).finish().unwrap();
        let body: Vec<u8> = (0..n).map(|i| i as u8).collect();
        let (mut written, mut read, mut served) = (0, 0, None);
        for _ in 0..5000 {
            if let Some((_, s)) = self.sc.as_mut() {
                if served.is_none() {
                    served = s.streams().accept(Dir::Bi);
                }
                if let Some(sid) = served
                    && written < n
                {
                    let piece = &body[written..(written + 10_000).min(n)];
                    if let Ok(k) = s.send_stream(sid).write(piece) {
                        // the server updates its keys twice on the way (RFC 9001 §6): at a
                        // third and at two thirds of the body (the second once the first is
                        // acknowledged: quinn ignores it before)
                        if (written < n / 3) != (written + k < n / 3)
                            || (written < 2 * n / 3) != (written + k < 2 * n / 3)
                        {
                            s.force_key_update();
                        }
                        written += k;
                    }
                    if written == n {
                        s.send_stream(sid).finish().unwrap();
                    }
                }
            }
            let mut stream = self.cc.recv_stream(id);
            if let Ok(mut chunks) = stream.read(true) {
                while let Ok(Some(c)) = chunks.next(usize::MAX) {
                    assert_eq!(c.offset as usize, read, "delivered in order");
                    assert!(c.bytes.iter().zip(read..).all(|(b, i)| *b == i as u8));
                    read += c.bytes.len();
                }
                let _ = chunks.finalize();
            }
            if read == n {
                return;
            }
            self.step();
        }
        panic!("{read} of {n} bytes in 5000 steps");
    }

    fn handshake(&mut self) {
        for _ in 0..50 {
            self.step();
            if self.client_up && self.server_up {
                return;
            }
        }
        panic!("the handshake did not complete in 50 exchanges");
    }
}

/// A QUIC handshake between quinn's client and server: the capture of its datagrams (as IPv4
/// packets, in order) until both ends are connected.
fn quic_handshake(
    client: rustls::ClientConfig,
    server: rustls::ServerConfig,
    transport: quinn_proto::TransportConfig,
    retry: bool,
) -> Vec<Vec<u8>> {
    let mut pair = Pair::new(client, server, transport, retry);
    pair.handshake();
    pair.wire
}

fn transport() -> quinn_proto::TransportConfig {
    let mut t = quinn_proto::TransportConfig::default();
    t.receive_window(quinn_proto::VarInt::from_u32(3_000_000))
        .stream_receive_window(quinn_proto::VarInt::from_u32(700_000))
        .max_concurrent_bidi_streams(quinn_proto::VarInt::from_u32(77))
        .max_idle_timeout(Some(quinn_proto::VarInt::from_u32(12_000).into()));
    t
}

#[test]
fn a_quic_servers_group_suite_retry_and_transport_parameters_come_back_as_configured() {
    let all = ring::default_provider().cipher_suites;
    let suite = |code: u16| *all.iter().find(|s| u16::from(s.suite()) == code).unwrap();
    // the server's choice first (it takes its own order); AES-128-GCM is there for the
    // Initial packets quinn needs it for
    for (client_groups, server_groups, first, group, retry) in [
        (
            vec![ring::kx_group::X25519, ring::kx_group::SECP256R1],
            vec![ring::kx_group::X25519],
            0x1301,
            X25519,
            None,
        ),
        // the client's one share is of P-384, which the server does not take: it asks for
        // P-256, the one group of the client's list it does
        (
            vec![ring::kx_group::SECP384R1, ring::kx_group::SECP256R1],
            vec![ring::kx_group::X25519, ring::kx_group::SECP256R1],
            0x1302,
            P256,
            Some(P256),
        ),
        (
            vec![ring::kx_group::SECP384R1],
            vec![ring::kx_group::SECP384R1],
            0x1303,
            P384,
            None,
        ),
    ] {
        for quic_retry in [false, true] {
            let suites = [suite(first), suite(0x1301)];
            let (server, log) = server_tls(&server_groups, &suites, b"h3");
            let wire = quic_handshake(
                client_tls(&client_groups, b"h3"),
                server,
                transport(),
                quic_retry,
            );
            // a Retry is a long-header packet of type 3 from the server
            let retried = wire.iter().any(|p| p[20] == 1 && p[28] & 0xf0 == 0xf0);
            assert_eq!(retried, quic_retry);
            let packets = capture(&pcap(&wire)).unwrap();
            let keylog = log.0.lock().unwrap().clone();
            let s = server_hello(&packets, keylog.as_bytes()).unwrap();
            assert_eq!(
                (s.group, s.retry_group, s.cipher_suite),
                (group, retry, first),
                "{}",
                suite_name(first)
            );
            // quinn's server sends the receive windows as its limits on what the client sends,
            // and its stream limit, in its EncryptedExtensions
            let tp = s.quic.unwrap_or_else(|| panic!("{:?}", s.quic_why));
            assert_eq!(
                (
                    tp.max_data,
                    tp.max_stream_data_bidi_remote,
                    tp.max_streams_bidi
                ),
                (3_000_000, 700_000, 77)
            );
            assert_eq!((tp.idle_timeout_ms, tp.max_ack_delay_ms), (12_000, 25));
            assert_eq!(s.quic_why, None);
            // without the key log, the Initial packets still say the group; the parameters are
            // said not read, and why
            let s = server_hello(&packets, b"").unwrap();
            assert_eq!((s.group, s.retry_group), (group, retry));
            assert_eq!(s.quic, None);
            assert!(
                s.quic_why
                    .as_deref()
                    .is_some_and(|w| w.contains("SERVER_HANDSHAKE_TRAFFIC_SECRET")),
                "{:?}",
                s.quic_why
            );
            // a key log of another connection (another client random) opens nothing either
            let other = keylog.replace(
                "SERVER_HANDSHAKE_TRAFFIC_SECRET ",
                "SERVER_HANDSHAKE_TRAFFIC_SECRET 00",
            );
            assert_eq!(server_hello(&packets, other.as_bytes()).unwrap().quic, None);
        }
    }
}

#[test]
fn a_tls_servers_hello_and_retry_are_read_from_its_first_records() {
    for (client_groups, server_groups, group, retry) in [
        (
            vec![ring::kx_group::X25519],
            vec![ring::kx_group::X25519, ring::kx_group::SECP256R1],
            X25519,
            None,
        ),
        (
            vec![ring::kx_group::SECP384R1, ring::kx_group::X25519],
            vec![ring::kx_group::X25519],
            X25519,
            Some(X25519),
        ),
    ] {
        let suites = ring::default_provider().cipher_suites;
        let (server, _) = server_tls(&server_groups, &suites, b"h2");
        let mut c = rustls::ClientConnection::new(
            Arc::new(client_tls(&client_groups, b"h2")),
            "localhost".try_into().unwrap(),
        )
        .unwrap();
        let mut s = rustls::ServerConnection::new(Arc::new(server)).unwrap();
        // each flight as one segment, in order, after a SYN and a SYN-ACK
        let mut wire = vec![
            ipv4(6, true, 999, 0x02, &[]),
            ipv4(6, false, 4999, 0x12, &[]),
        ];
        let (mut up, mut down) = (1000u32, 5000u32);
        for _ in 0..10 {
            let mut out = Vec::new();
            while c.wants_write() {
                c.write_tls(&mut out).unwrap();
            }
            if !out.is_empty() {
                wire.push(ipv4(6, true, up, 0x18, &out));
                up += out.len() as u32;
                s.read_tls(&mut out.as_slice()).unwrap();
                s.process_new_packets().unwrap();
            }
            let mut back = Vec::new();
            while s.wants_write() {
                s.write_tls(&mut back).unwrap();
            }
            if !back.is_empty() {
                wire.push(ipv4(6, false, down, 0x18, &back));
                down += back.len() as u32;
                c.read_tls(&mut back.as_slice()).unwrap();
                c.process_new_packets().unwrap();
            }
            if !c.is_handshaking() && !s.is_handshaking() {
                break;
            }
        }
        let packets = capture(&pcap(&wire)).unwrap();
        let h = server_hello(&packets, b"").unwrap();
        assert_eq!((h.group, h.retry_group), (group, retry));
        assert_eq!(suite_name(h.cipher_suite), "TLS_AES_256_GCM_SHA384");
        assert_eq!((h.quic, h.quic_why), (None, None));
    }
}

#[test]
fn what_is_not_a_server_hello_is_refused_by_name() {
    let e = server_hello(&capture(&pcap(&[])).unwrap(), b"").unwrap_err();
    assert!(e.contains("no UDP or TCP packet"), "{e}");
    // a server whose first record is application data, not a handshake
    let wire = vec![
        ipv4(6, true, 999, 0x02, &[]),
        ipv4(6, false, 4999, 0x12, &[]),
        ipv4(6, false, 5000, 0x18, &[22, 3, 3, 0, 4, 11, 0, 0, 0]),
    ];
    let e = server_hello(&capture(&pcap(&wire)).unwrap(), b"").unwrap_err();
    assert!(e.contains("type 11, not a ServerHello"), "{e}");
}

#[test]
fn a_lost_datagrams_stream_bytes_are_found_again_in_its_retransmission() {
    const N: usize = 60_000;
    // (and the 1-RTT packets open across the server's key updates)
    let all = ring::default_provider().cipher_suites;
    for first in [0x1301u16, 0x1303] {
        let suite = *all.iter().find(|s| u16::from(s.suite()) == first).unwrap();
        let aes = *all.iter().find(|s| u16::from(s.suite()) == 0x1301).unwrap();
        let (server, log) = server_tls(&[ring::kx_group::X25519], &[suite, aes], b"h3");
        let mut pair = Pair::new(
            client_tls(&[ring::kx_group::X25519], b"h3"),
            server,
            quinn_proto::TransportConfig::default(),
            false,
        );
        pair.handshake();
        // the server's sixth datagram from the request on is lost
        let lost = pair.sent.len() + 5;
        pair.drop = vec![lost];
        pair.transfer(N);
        let keylog = log.0.lock().unwrap().clone();
        // what the lost datagram carried, read from the capture that holds it
        let full =
            server_stream_data(&capture(&pcap(&pair.full)).unwrap(), keylog.as_bytes()).unwrap();
        assert_eq!(full.len(), pair.sent.len());
        let gone = full[lost].clone();
        assert!(
            !gone.is_empty(),
            "the lost datagram carried stream data: {full:?}"
        );
        let (stream, from, len) = gone[0];
        // the capture without it: the same bytes come again, in a later datagram only
        let seen =
            server_stream_data(&capture(&pcap(&pair.wire)).unwrap(), keylog.as_bytes()).unwrap();
        assert_eq!(seen.len(), pair.sent.len() - 1);
        let carries = |spans: &Vec<(u64, u64, u64)>| {
            spans
                .iter()
                .any(|&(s, o, l)| s == stream && o < from + len && from < o + l)
        };
        let again = seen.iter().position(carries).expect("a retransmission");
        // a server that pads its handshake datagrams with zeros after their packets (quiche,
        // to 1200 bytes) reads the same: the zeros are no 1-RTT packet. The server's first
        // datagram's long packets, sent so once more, just before it
        let at = pair
            .wire
            .iter()
            .position(|p| p[12..16] == [198, 18, 0, 2])
            .unwrap();
        let d = &pair.wire[at][28..];
        let mut long = d[..long_prefix(d)].to_vec();
        assert!(!long.is_empty());
        long.resize(1200, 0);
        let mut padded = pair.wire.clone();
        padded.insert(at, ipv4(17, false, 0, 0, &long));
        let mut read =
            server_stream_data(&capture(&pcap(&padded)).unwrap(), keylog.as_bytes()).unwrap();
        // (the server's first datagram: the copy, which carries no stream data)
        assert_eq!(read.remove(0), Vec::new());
        assert_eq!(read, seen);
        assert!(again >= lost, "retransmitted at {again}, lost at {lost}");
        // and the response stream's bytes, all told, are the body's (and HTTP/0.9's nothing
        // more): every byte of the N is carried by a datagram the capture holds
        let mut covered = vec![false; N];
        for &(s, o, l) in seen.iter().flatten() {
            if s == stream {
                for c in &mut covered[o as usize..(o + l) as usize] {
                    *c = true;
                }
            }
        }
        assert!(covered.iter().all(|c| *c), "{}", suite_name(first));
        // without the 1-RTT secret the packets stay closed, and the answer says which secret
        let handshake_only: String = keylog
            .lines()
            .filter(|l| !l.starts_with("SERVER_TRAFFIC_SECRET_0"))
            .map(|l| format!("{l}\n"))
            .collect();
        let e = server_stream_data(
            &capture(&pcap(&pair.wire)).unwrap(),
            handshake_only.as_bytes(),
        )
        .unwrap_err();
        assert!(e.contains("SERVER_TRAFFIC_SECRET_0"), "{e}");
    }
}
