//! quiclab-quiche: quiche's HTTP/3 server and client (Cloudflare's QUIC implementation, Rust
//! over BoringSSL), driven the way quiclab drives an external stack (docs/stacks.md and
//! crates/quiclab-external/stacks/quiche.toml).
//!
//! The server serves a documents directory; it schedules its responses with quiche's own
//! RFC 9218 scheduler, from each request's `priority` header and PRIORITY_UPDATE frames (or,
//! with `--priorities off`, every response at the default priority). The client fetches one URL
//! and prints one line per event as it happens, for quiclab to stamp: "start", "handshake
//! complete alpn=h3", "status 200", "first byte", "last byte", and "error: ..." on failure.
//! Both write a qlog file per connection (JSON-SEQ) into `--qlog-dir`.

mod client;
mod server;

use std::net::{SocketAddr, UdpSocket};
use std::path::Path;
use std::time::Duration;

use clap::{Parser, Subcommand};

/// Largest UDP payload either side sends or takes.
const MAX_DATAGRAM: usize = 1350;

/// How much stream data quiche takes from the application, against the room its window has
/// (quiche's default is 1): the server sends only whole packets (`server::send_full`), and a
/// window whose room it leaves unused is the window's doing only while quiche still holds data
/// it could send; with no more than the room, the last part of a response (the room less the
/// packets' overhead) would leave quiche with nothing, taking itself for application-limited,
/// and its window would stop growing.
const SEND_CAPACITY_FACTOR: f64 = 2.0;

#[derive(Parser)]
#[command(about = "quiche's HTTP/3 endpoints for quiclab (see docs/stacks.md)")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    Server(server::Args),
    Client(client::Args),
}

fn main() {
    let result = match Cli::parse().command {
        Command::Server(a) => server::run(a),
        Command::Client(a) => client::run(a),
    };
    if let Err(e) = result {
        println!("error: {e}");
        std::process::exit(1);
    }
}

/// A congestion controller quiche offers, by the name quiclab gives it.
fn check_cc(cc: &str) -> Result<(), String> {
    match cc {
        "cubic" | "reno" | "bbr2" => Ok(()),
        _ => Err(format!(
            "--cc {cc:?}: allowed: cubic, reno, bbr2 (quiche's BBRv2)"
        )),
    }
}

/// The transport settings both sides share.
fn config(cc: &str) -> Result<quiche::Config, String> {
    check_cc(cc)?;
    let mut c = quiche::Config::new(quiche::PROTOCOL_VERSION).map_err(|e| e.to_string())?;
    c.set_application_protos(quiche::h3::APPLICATION_PROTOCOL)
        .map_err(|e| e.to_string())?;
    c.set_max_idle_timeout(10_000);
    c.set_max_recv_udp_payload_size(MAX_DATAGRAM);
    c.set_max_send_udp_payload_size(MAX_DATAGRAM);
    c.set_initial_max_data(100_000_000);
    c.set_initial_max_stream_data_bidi_local(10_000_000);
    c.set_initial_max_stream_data_bidi_remote(10_000_000);
    c.set_initial_max_stream_data_uni(1_000_000);
    c.set_initial_max_streams_bidi(1000);
    c.set_initial_max_streams_uni(100);
    c.set_disable_active_migration(true);
    c.set_send_capacity_factor(SEND_CAPACITY_FACTOR);
    c.set_cc_algorithm_name(cc).map_err(|e| e.to_string())?;
    if std::env::var_os("SSLKEYLOGFILE").is_some() {
        c.log_keys();
    }
    Ok(c)
}

/// Where a connection's TLS secrets go (NSS key log format, which Wireshark reads): the file
/// that SSLKEYLOGFILE names, appended to, as quiclab's own endpoints do; nowhere when unset.
fn key_log(conn: &mut quiche::Connection) {
    let Some(path) = std::env::var_os("SSLKEYLOGFILE") else {
        return;
    };
    match std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
    {
        Ok(f) => conn.set_keylog(Box::new(f)),
        Err(e) => eprintln!(
            "quiclab-quiche: warning: SSLKEYLOGFILE {}: {e}",
            std::path::Path::new(&path).display()
        ),
    }
}

/// Sends what the connection has to send, at once. quiche says when each packet should leave
/// for pacing (`SendInfo::at`), but it takes a packet as sent when it hands it over: waiting
/// here would add the wait to its RTT samples. Honouring it needs the kernel's SO_TXTIME (and
/// the fq qdisc), as in quiche's own apps; like their default, this driver does not pace.
fn flush(conn: &mut quiche::Connection, socket: &UdpSocket, out: &mut [u8]) -> Result<(), String> {
    while send_one(conn, socket, out)?.is_some() {}
    Ok(())
}

/// Sends the connection's next packet, if it has one: its size.
fn send_one(
    conn: &mut quiche::Connection,
    socket: &UdpSocket,
    out: &mut [u8],
) -> Result<Option<usize>, String> {
    let (len, info) = match conn.send(out) {
        Ok(v) => v,
        Err(quiche::Error::Done) => return Ok(None),
        Err(e) => return Err(format!("sending: {e}")),
    };
    match socket.send_to(&out[..len], info.to) {
        Ok(_) => {}
        // a full socket buffer drops the packet: QUIC's loss recovery repairs it
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
        Err(e) => return Err(format!("sending to {}: {e}", info.to)),
    }
    Ok(Some(len))
}

/// What a connection records: its key log, and its qlog into `dir` (none without a directory).
fn record(
    conn: &mut quiche::Connection,
    dir: Option<&Path>,
    name: &str,
    title: &str,
) -> Result<(), String> {
    key_log(conn);
    let Some(dir) = dir else {
        return Ok(());
    };
    let path = dir.join(name);
    let file = std::fs::File::create(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    conn.set_qlog(
        Box::new(std::io::BufWriter::new(file)),
        title.to_string(),
        format!("quiclab-quiche {}", env!("CARGO_PKG_VERSION")),
    );
    Ok(())
}

/// Receives one datagram, waiting at most `wait`; `None` when none came.
fn receive(
    socket: &UdpSocket,
    buf: &mut [u8],
    wait: Duration,
) -> Result<Option<(usize, SocketAddr)>, String> {
    // a zero timeout means "block forever" to the socket
    socket
        .set_read_timeout(Some(wait.max(Duration::from_micros(1))))
        .map_err(|e| e.to_string())?;
    match socket.recv_from(buf) {
        Ok(v) => Ok(Some(v)),
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock
                    | std::io::ErrorKind::TimedOut
                    // a signal (the server's stop) interrupted the wait
                    | std::io::ErrorKind::Interrupted
            ) =>
        {
            Ok(None)
        }
        Err(e) => Err(format!("receiving: {e}")),
    }
}

/// Random bytes for connection ids.
fn random_id() -> [u8; quiche::MAX_CONN_ID_LEN] {
    use ring::rand::SecureRandom;
    let mut id = [0u8; quiche::MAX_CONN_ID_LEN];
    ring::rand::SystemRandom::new()
        .fill(&mut id)
        .expect("the system's random source works");
    id
}
