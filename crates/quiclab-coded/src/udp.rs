//! The one module that does I/O: drives a [`Connection`] or an [`Endpoint`] over a UDP socket
//! that the caller opened, on the real clock, in the calling thread. Everything it does is
//! what the virtual-time tests do with an emulated link: deliver datagrams, run timers, send
//! what the core has to send. It never opens sockets itself and never spawns.

use std::collections::HashMap;
use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use crate::connection::Connection;
use crate::endpoint::{Endpoint, Handle, Routed};

/// The real clock as the core sees it: time since the driver started.
#[derive(Debug, Clone, Copy)]
pub struct Clock(Instant);

impl Clock {
    pub fn start() -> Self {
        Clock(Instant::now())
    }

    pub fn now(&self) -> Duration {
        self.0.elapsed()
    }
}

impl Default for Clock {
    fn default() -> Self {
        Self::start()
    }
}

/// Largest datagram read (larger ones are truncated and then fail authentication).
const RECV_BUF: usize = 65_536;
/// Longest sleep between two looks at the application and the deadline.
const MAX_WAIT: Duration = Duration::from_millis(20);
/// Waits shorter than this poll instead of blocking.
const SPIN_BELOW: Duration = Duration::from_millis(5);

/// Waits for a datagram until `at` at most. Socket receive timeouts are rounded up to the
/// kernel's tick (often 4 ms), far coarser than a pacer's gaps at tens of Mbit/s, so short
/// waits poll the socket and sleep (nanosleep is precise to tens of microseconds) instead.
fn recv_until<T>(
    socket: &UdpSocket,
    clock: &Clock,
    at: Option<Duration>,
    mut recv: impl FnMut(&UdpSocket) -> io::Result<T>,
) -> io::Result<Option<T>> {
    let wait = at
        .map_or(MAX_WAIT, |t| t.saturating_sub(clock.now()))
        .min(MAX_WAIT);
    if wait > SPIN_BELOW {
        socket.set_nonblocking(false)?;
        socket.set_read_timeout(Some(wait - SPIN_BELOW / 2))?;
        return match recv(socket) {
            Ok(v) => Ok(Some(v)),
            Err(e) if timed_out(&e) => Ok(None),
            Err(e) => Err(e),
        };
    }
    socket.set_nonblocking(true)?;
    let until = clock.now() + wait;
    loop {
        match recv(socket) {
            Ok(v) => return Ok(Some(v)),
            Err(e) if timed_out(&e) => {}
            Err(e) => return Err(e),
        }
        let now = clock.now();
        if now >= until {
            return Ok(None);
        }
        std::thread::sleep((until - now).min(Duration::from_micros(100)));
    }
}

/// A send that did not go out for a reason the protocol survives is dropped like a lost packet:
/// a full socket buffer (while the driver polls without blocking), or a peer that is not (yet)
/// there (ICMP port unreachable, reported on the next call of a connected socket).
fn sent(result: io::Result<usize>) -> io::Result<()> {
    match result {
        Ok(_) => Ok(()),
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::WouldBlock
                    | io::ErrorKind::ConnectionRefused
                    | io::ErrorKind::ConnectionReset
                    | io::ErrorKind::Interrupted
            ) =>
        {
            Ok(())
        }
        Err(e) => Err(e),
    }
}

fn timed_out(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted
    )
}

/// Runs one connection over a socket connected to its peer until `app` returns false, the
/// connection closes, or `deadline` (on `clock`) passes. `app` sees the connection after every
/// datagram or timer (to read events, write, finish, close).
pub fn run_connection(
    socket: &UdpSocket,
    conn: &mut Connection,
    clock: &Clock,
    deadline: Duration,
    mut app: impl FnMut(&mut Connection) -> bool,
) -> io::Result<()> {
    let mut buf = vec![0u8; RECV_BUF];
    loop {
        let now = clock.now();
        if conn.poll_timeout().is_some_and(|t| t <= now) {
            conn.handle_timeout(now);
        }
        let go_on = app(conn);
        while let Some(d) = conn.poll_transmit(clock.now()) {
            sent(socket.send(&d))?;
        }
        if !go_on || conn.is_closed() || clock.now() >= deadline {
            return Ok(());
        }
        match recv_until(socket, clock, conn.poll_timeout(), |s| s.recv(&mut buf)) {
            Ok(Some(n)) => conn.handle_datagram(clock.now(), &buf[..n]),
            Ok(None) => {}
            // a peer that went away (ICMP port unreachable) is the idle timeout's business
            Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {}
            Err(e) => return Err(e),
        }
    }
}

/// Runs an endpoint on an unconnected socket until `app` returns false or `deadline` passes.
/// Each connection's peer is the address its first datagram came from. `app` sees the
/// endpoint after every datagram or timer.
pub fn run_endpoint(
    socket: &UdpSocket,
    endpoint: &mut Endpoint,
    clock: &Clock,
    deadline: Duration,
    mut app: impl FnMut(&mut Endpoint) -> bool,
) -> io::Result<()> {
    let mut buf = vec![0u8; RECV_BUF];
    let mut peers: HashMap<Handle, SocketAddr> = HashMap::new();
    loop {
        endpoint.handle_timeout(clock.now());
        let go_on = app(endpoint);
        while let Some((h, d)) = endpoint.poll_transmit(clock.now()) {
            if let Some(to) = peers.get(&h) {
                sent(socket.send_to(&d, to))?;
            }
        }
        for (h, _) in endpoint.remove_closed() {
            peers.remove(&h);
        }
        if !go_on || clock.now() >= deadline {
            return Ok(());
        }
        match recv_until(socket, clock, endpoint.poll_timeout(), |s| {
            s.recv_from(&mut buf)
        }) {
            Ok(Some((n, from))) => {
                if let Routed::New(h) = endpoint.handle_datagram(clock.now(), &buf[..n]) {
                    peers.insert(h, from);
                }
            }
            Ok(None) => {}
            Err(e) if e.kind() == io::ErrorKind::ConnectionReset => {}
            Err(e) => return Err(e),
        }
    }
}
