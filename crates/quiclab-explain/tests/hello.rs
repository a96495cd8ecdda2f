//! The client's hello read from bytes real TLS and QUIC clients wrote: rustls's ClientHello over
//! TCP and quinn's first Initial datagram, each with the key-exchange groups it was configured
//! with, in a pcap file written by quiclab's own capture writer. The groups come back as
//! configured: rustls sends one key share, for its first group, and lists every group.

use std::sync::Arc;
use std::time::{Duration, Instant};

use quiclab_explain::hello::{Captured, capture, client_hello, from_quic, from_tls, group_names};
use quiclab_netns::pcap::PcapWriter;
use rustls::crypto::{CryptoProvider, SupportedKxGroup, ring};

const X25519: u16 = 0x001d;
const P256: u16 = 0x0017;
const P384: u16 = 0x0018;

fn tls_config(groups: &[&'static dyn SupportedKxGroup], alpn: &[u8]) -> rustls::ClientConfig {
    let provider = Arc::new(CryptoProvider {
        kx_groups: groups.to_vec(),
        ..ring::default_provider()
    });
    let mut c = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .unwrap()
        .with_root_certificates(rustls::RootCertStore::empty())
        .with_no_client_auth();
    c.alpn_protocols = vec![alpn.to_vec()];
    c
}

/// rustls's first flight over TCP: its TLS records.
fn tls_hello(groups: &[&'static dyn SupportedKxGroup]) -> Vec<u8> {
    let mut conn = rustls::ClientConnection::new(
        Arc::new(tls_config(groups, b"h2")),
        "localhost".try_into().unwrap(),
    )
    .unwrap();
    let mut out = Vec::new();
    conn.write_tls(&mut out).unwrap();
    out
}

/// quinn's first datagram: an Initial packet carrying its ClientHello.
fn quic_hello(groups: &[&'static dyn SupportedKxGroup]) -> Vec<u8> {
    let crypto =
        quinn_proto::crypto::rustls::QuicClientConfig::try_from(tls_config(groups, b"h3")).unwrap();
    let mut config = quinn_proto::ClientConfig::new(Arc::new(crypto));
    // flow-control limits and idle timeout the hello's transport parameters must carry
    let mut transport = quinn_proto::TransportConfig::default();
    transport
        .receive_window(quinn_proto::VarInt::from_u32(3_000_000))
        .stream_receive_window(quinn_proto::VarInt::from_u32(700_000))
        .max_concurrent_bidi_streams(quinn_proto::VarInt::from_u32(77))
        .max_idle_timeout(Some(quinn_proto::VarInt::from_u32(12_000).into()));
    config.transport_config(Arc::new(transport));
    let mut endpoint = quinn_proto::Endpoint::new(
        Arc::new(quinn_proto::EndpointConfig::default()),
        None,
        false,
        None,
    );
    let now = Instant::now();
    let (_, mut conn) = endpoint
        .connect(now, config, "198.18.0.2:443".parse().unwrap(), "localhost")
        .unwrap();
    let mut buf = Vec::new();
    let t = conn
        .poll_transmit(now, 1, &mut buf)
        .expect("a first datagram");
    buf.truncate(t.size);
    buf
}

/// An IPv4 packet of `protocol` from 198.18.0.1:`sport` to 198.18.0.2:`dport`
/// (UDP, or TCP with `seq` and `flags`).
fn ipv4(protocol: u8, sport: u16, dport: u16, seq: u32, flags: u8, payload: &[u8]) -> Vec<u8> {
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
    let (src, dst) = if sport == 443 {
        ([198, 18, 0, 2], [198, 18, 0, 1])
    } else {
        ([198, 18, 0, 1], [198, 18, 0, 2])
    };
    let mut p = vec![0x45, 0];
    p.extend_from_slice(&((20 + l4.len()) as u16).to_be_bytes());
    p.extend_from_slice(&[0, 0, 0, 0, 64, protocol, 0, 0]);
    p.extend_from_slice(&src);
    p.extend_from_slice(&dst);
    p.extend_from_slice(&l4);
    p
}

/// A pcap file of `packets`, written by the lab's own capture writer (as `capture.pcap` is).
fn pcap(packets: &[Vec<u8>]) -> Vec<u8> {
    let mut w = PcapWriter::new(Vec::new()).unwrap();
    for (i, p) in packets.iter().enumerate() {
        w.packet(Duration::from_millis(i as u64), p).unwrap();
    }
    w.into_inner().unwrap()
}

#[test]
fn rustls_over_tcp_offers_one_share_for_its_first_group_and_lists_them_all() {
    for (groups, shares, listed) in [
        (
            vec![ring::kx_group::X25519, ring::kx_group::SECP256R1],
            vec![X25519],
            vec![X25519, P256],
        ),
        (
            vec![ring::kx_group::SECP384R1, ring::kx_group::X25519],
            vec![P384],
            vec![P384, X25519],
        ),
    ] {
        let records = tls_hello(&groups);
        let h = from_tls(&records).unwrap();
        assert_eq!(
            (h.key_shares.clone(), h.groups.clone()),
            (shares.clone(), listed)
        );
        assert_eq!(h.bytes + 5, records.len(), "one record holds the hello");
        assert_eq!(
            h.quic, None,
            "a hello over TCP carries no QUIC transport parameters"
        );
        // through a capture: a SYN, the hello in two segments out of order and one of them
        // again (a retransmission), and the server's answer, which is not read
        let (a, b) = records.split_at(100);
        let file = pcap(&[
            ipv4(6, 40000, 443, 999, 0x02, &[]),
            ipv4(6, 443, 40000, 5000, 0x12, &[]),
            ipv4(6, 40000, 443, 1100, 0x18, b),
            ipv4(6, 40000, 443, 1000, 0x18, a),
            ipv4(6, 40000, 443, 1000, 0x18, a),
            ipv4(6, 443, 40000, 5001, 0x18, &[22, 3, 3, 0, 1, 2]),
        ]);
        let packets: Vec<Captured> = capture(&file).unwrap();
        assert_eq!(packets.len(), 6);
        assert_eq!(client_hello(&packets).unwrap(), h);
        // the hello cut short is said to be, not read
        let e = from_tls(&records[..records.len() - 10]).unwrap_err();
        assert!(e.contains("incomplete"), "{e}");
    }
}

#[test]
fn quinns_initial_is_opened_with_its_connection_ids_keys_and_its_hello_read() {
    for (groups, shares, listed) in [
        (vec![ring::kx_group::X25519], vec![X25519], vec![X25519]),
        (
            vec![ring::kx_group::SECP256R1, ring::kx_group::SECP384R1],
            vec![P256],
            vec![P256, P384],
        ),
    ] {
        let datagram = quic_hello(&groups);
        // RFC 9000 §14.1: a client's Initial datagram is padded to 1200 bytes at least
        assert!(datagram.len() >= 1200, "{}", datagram.len());
        let h = from_quic(&[&datagram]).unwrap();
        assert_eq!((h.key_shares.clone(), h.groups.clone()), (shares, listed));
        assert!(h.bytes > 100 && h.bytes < 1200, "{h:?}");
        // its transport parameters, as configured; max_ack_delay as quinn sends it (its 25 ms
        // is the default, which it leaves out)
        let tp = h.quic.expect("QUIC transport parameters");
        assert_eq!(
            (
                tp.max_data,
                tp.max_stream_data_bidi_local,
                tp.max_streams_bidi
            ),
            (3_000_000, 700_000, 77)
        );
        assert_eq!((tp.idle_timeout_ms, tp.max_ack_delay_ms), (12_000, 25));
        // in a capture, the server's first answer ends the client's first flight
        let file = pcap(&[
            ipv4(17, 40000, 443, 0, 0, &datagram),
            ipv4(17, 443, 40000, 0, 0, &[0x40; 30]),
        ]);
        assert_eq!(client_hello(&capture(&file).unwrap()).unwrap(), h);
        // a byte changed anywhere in the protected payload: the packet does not open
        let mut bad = datagram.clone();
        let last = bad.len() - 1;
        bad[last] ^= 1;
        let e = from_quic(&[&bad]).unwrap_err();
        assert!(e.contains("do not open"), "{e}");
    }
    assert_eq!(group_names(&[X25519, P256]), "x25519 + secp256r1");
}

#[test]
fn what_is_not_a_hello_is_refused_by_name() {
    assert!(capture(b"not a pcap").unwrap_err().contains("not a pcap"));
    let e = client_hello(&capture(&pcap(&[])).unwrap()).unwrap_err();
    assert!(e.contains("no UDP or TCP packet"), "{e}");
    // a short-header datagram is no Initial
    let e = from_quic(&[&[0x40; 40][..]]).unwrap_err();
    assert!(e.contains("no QUIC v1 Initial"), "{e}");
    // QUIC version 2 is named, not misread
    let mut v2 = vec![0xc0, 0x6b, 0x33, 0x43, 0xcf, 8];
    v2.extend_from_slice(&[1; 8]);
    v2.extend_from_slice(&[0, 0, 0x40, 0x20]);
    v2.extend_from_slice(&[0; 40]);
    let e = from_quic(&[&v2]).unwrap_err();
    assert!(e.contains("0x6b3343cf"), "{e}");
    // TLS records that are not a handshake
    let e = from_tls(&[23, 3, 3, 0, 2, 0, 0]).unwrap_err();
    assert!(e.contains("not a handshake"), "{e}");
}
