//! The UDP driver on the loopback interface: a server endpoint in one thread, a client in
//! another, a byte-exact GET between them on the real clock.

mod util;

use std::net::UdpSocket;
use std::time::Duration;

use quiclab_coded::udp::{Clock, run_connection, run_endpoint};
use quiclab_coded::{Config, Connection, Endpoint, Event};
use util::{client_tls, pattern, server_tls};

#[test]
fn a_get_over_loopback_udp_is_byte_exact() {
    let size: u64 = 5_000_000;
    let server_socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    let addr = server_socket.local_addr().unwrap();
    let deadline = Duration::from_secs(30);
    let server = std::thread::spawn(move || {
        let clock = Clock::start();
        let mut ep = Endpoint::server(Config::default(), server_tls());
        let mut served = 0;
        let mut seen = 0;
        run_endpoint(&server_socket, &mut ep, &clock, deadline, |ep| {
            for h in ep.handles().collect::<Vec<_>>() {
                let c = ep.connection(h).unwrap();
                while let Some(ev) = c.poll_event() {
                    match ev {
                        Event::StreamReadable(id) => {
                            let (req, fin) = c.read(id).unwrap();
                            if fin {
                                let text = String::from_utf8(req).unwrap();
                                let n: u64 =
                                    text.strip_prefix("GET /bytes/").unwrap().parse().unwrap();
                                let body: Vec<u8> = (0..n).map(pattern).collect();
                                c.write(id, &body).unwrap();
                                c.finish(id).unwrap();
                                served += 1;
                            }
                        }
                        Event::Connected => seen += 1,
                        _ => {}
                    }
                }
            }
            // stop once the one client has come, been served and gone
            !(seen == 1 && served == 1 && ep.is_empty())
        })
        .unwrap();
        served
    });
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    socket.connect(addr).unwrap();
    let clock = Clock::start();
    let mut conn =
        Connection::connect(clock.now(), Config::default(), client_tls(), "localhost").unwrap();
    let stream = conn.open_stream().unwrap();
    conn.write(stream, format!("GET /bytes/{size}").as_bytes())
        .unwrap();
    conn.finish(stream).unwrap();
    let (mut got, mut exact, mut done_at) = (0u64, true, None);
    run_connection(&socket, &mut conn, &clock, deadline, |c| {
        while let Some(ev) = c.poll_event() {
            if let Event::StreamReadable(id) = ev {
                let (data, fin) = c.read(id).unwrap();
                for (i, b) in data.iter().enumerate() {
                    exact &= *b == pattern(got + i as u64);
                }
                got += data.len() as u64;
                if fin && done_at.is_none() {
                    done_at = Some(clock.now());
                    c.close(0);
                }
            }
        }
        true
    })
    .unwrap();
    assert_eq!(got, size);
    assert!(exact, "the body differs from the pattern");
    assert!(done_at.is_some() && conn.is_closed());
    assert_eq!(server.join().unwrap(), 1);
    let s = conn.stats();
    assert_eq!(s.rejected, 0);
    println!(
        "{size} bytes in {:?} over loopback: {} packets received, {} blocks needed repair",
        done_at.unwrap(),
        s.packets_received,
        s.blocks_recovered
    );
}
