//! The UDP socket under a quinn endpoint: large kernel buffers, and GSO batches that always
//! fit in one UDP send.
//!
//! quinn 0.11 puts up to 10 datagrams in one GSO batch (`MAX_TRANSMIT_SEGMENTS` in its
//! connection driver), whatever their size. A batch is one `sendmsg` of at most
//! [`MAX_UDP_DATAGRAM`] bytes: with jumbo payloads (8952 bytes × 10) the kernel refuses it with
//! EMSGSIZE, quinn-udp drops the error, and black-hole detection falls back to a 1200-byte MTU.
//! quinn asks its socket how many segments a batch may hold, so [`BatchCapped`] answers
//! `65,507 / max payload` (7 at 8952 bytes, 10 up to 6550): any payload works with GSO on.
//!
//! The kernel's default socket buffers (212,992 bytes) hold 0.17 ms at 10 Gbit/s: a receiver
//! that falls a little behind drops datagrams the sender then retransmits. [`open`] asks for
//! [`SOCKET_BUFFER`] bytes each way, as root past `net.core.{r,w}mem_max` (SO_*BUFFORCE),
//! otherwise up to those limits.

use std::fmt;
use std::io::{self, IoSliceMut};
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use quinn::udp::{RecvMeta, Transmit};
use quinn::{AsyncUdpSocket, Runtime, UdpPoller};

use crate::MAX_UDP_DATAGRAM;

/// Bytes asked for each of the socket's send and receive buffers (about 7 ms at 10 Gbit/s).
pub const SOCKET_BUFFER: usize = 8 << 20;

/// How many datagrams of `max_payload` bytes fit in one UDP send of [`MAX_UDP_DATAGRAM`] bytes
/// (at least one).
pub fn segments_per_batch(max_payload: u16) -> usize {
    (MAX_UDP_DATAGRAM as usize / usize::from(max_payload.max(1))).max(1)
}

/// A quinn socket whose GSO batches hold at most `max_segments` datagrams.
pub struct BatchCapped {
    inner: Arc<dyn AsyncUdpSocket>,
    max_segments: usize,
}

impl fmt::Debug for BatchCapped {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BatchCapped")
            .field("inner", &self.inner)
            .field("max_segments", &self.max_segments)
            .finish()
    }
}

impl BatchCapped {
    /// Wraps `inner`, holding its batches to what keeps datagrams of `max_payload` bytes within
    /// one UDP send.
    pub fn new(inner: Arc<dyn AsyncUdpSocket>, max_payload: u16) -> BatchCapped {
        BatchCapped {
            inner,
            max_segments: segments_per_batch(max_payload),
        }
    }
}

impl AsyncUdpSocket for BatchCapped {
    fn create_io_poller(self: Arc<Self>) -> Pin<Box<dyn UdpPoller>> {
        self.inner.clone().create_io_poller()
    }

    fn try_send(&self, transmit: &Transmit) -> io::Result<()> {
        self.inner.try_send(transmit)
    }

    fn poll_recv(
        &self,
        cx: &mut Context,
        bufs: &mut [IoSliceMut<'_>],
        meta: &mut [RecvMeta],
    ) -> Poll<io::Result<usize>> {
        self.inner.poll_recv(cx, bufs, meta)
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner.local_addr()
    }

    fn max_transmit_segments(&self) -> usize {
        self.inner.max_transmit_segments().min(self.max_segments)
    }

    fn max_receive_segments(&self) -> usize {
        self.inner.max_receive_segments()
    }

    fn may_fragment(&self) -> bool {
        self.inner.may_fragment()
    }
}

/// Sets one of the socket's buffers to `bytes`: the FORCE option first (root, past the
/// system's maximum), then the plain one (up to the maximum). Returns the size the kernel
/// reports (twice what it was asked for, for its own bookkeeping).
fn raise_buffer(socket: &UdpSocket, bytes: usize, send: bool) -> io::Result<usize> {
    let s = socket2::SockRef::from(socket);
    let (force, what) = if send {
        (libc::SO_SNDBUFFORCE, "SO_SNDBUFFORCE")
    } else {
        (libc::SO_RCVBUFFORCE, "SO_RCVBUFFORCE")
    };
    let value = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
    // SAFETY: setsockopt on an open descriptor with a c_int value that lives for the call.
    let forced = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            force,
            (&value as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    } == 0;
    if !forced {
        log::debug!(
            "{what}: {} (using the plain option, capped by net.core's maximum)",
            io::Error::last_os_error()
        );
        if send {
            s.set_send_buffer_size(bytes)?;
        } else {
            s.set_recv_buffer_size(bytes)?;
        }
    }
    if send {
        s.send_buffer_size()
    } else {
        s.recv_buffer_size()
    }
}

/// A quinn endpoint on `socket`: buffers of [`SOCKET_BUFFER`] bytes, batches capped for
/// `max_payload` (see the module's documentation).
pub fn open(
    socket: UdpSocket,
    max_payload: u16,
    config: quinn::EndpointConfig,
    server: Option<quinn::ServerConfig>,
) -> io::Result<quinn::Endpoint> {
    raise_buffer(&socket, SOCKET_BUFFER, true)?;
    raise_buffer(&socket, SOCKET_BUFFER, false)?;
    let runtime = Arc::new(quinn::TokioRuntime);
    let inner = runtime.wrap_udp_socket(socket)?;
    let socket = Arc::new(BatchCapped::new(inner, max_payload));
    quinn::Endpoint::new_with_abstract_socket(config, server, socket, runtime)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_fit_one_udp_send_at_every_payload() {
        for payload in [1200u16, 1252, 1452, 6550, 6551, 8952, 8972, 16_000, 65_507] {
            let n = segments_per_batch(payload);
            assert!(n >= 1, "payload {payload}");
            assert!(
                n * usize::from(payload) <= MAX_UDP_DATAGRAM as usize,
                "payload {payload}: {n} segments"
            );
            // one more would not fit: the cap is the largest that does
            assert!(
                (n + 1) * usize::from(payload) > MAX_UDP_DATAGRAM as usize,
                "payload {payload}: {n} segments leave room for another"
            );
        }
        assert_eq!(segments_per_batch(8952), 7);
        assert_eq!(segments_per_batch(6550), 10);
    }

    #[test]
    fn the_endpoint_socket_gets_its_buffers_and_the_cap() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
            let probe = socket.try_clone().unwrap();
            let _endpoint =
                open(socket, 8952, quinn::EndpointConfig::default(), None).expect("endpoint");
            let wrapped = quinn::TokioRuntime
                .wrap_udp_socket(UdpSocket::bind("127.0.0.1:0").unwrap())
                .unwrap();
            let uncapped = wrapped.max_transmit_segments();
            assert_eq!(
                BatchCapped::new(wrapped, 8952).max_transmit_segments(),
                uncapped.min(7)
            );
            let s = socket2::SockRef::from(&probe);
            let (snd, rcv) = (s.send_buffer_size().unwrap(), s.recv_buffer_size().unwrap());
            // SAFETY: geteuid has no preconditions.
            if unsafe { libc::geteuid() } == 0 {
                // the kernel doubles what it is given
                assert_eq!((snd, rcv), (2 * SOCKET_BUFFER, 2 * SOCKET_BUFFER));
            } else {
                // capped by net.core.{w,r}mem_max
                let max = |k: &str| -> usize {
                    std::fs::read_to_string(format!("/proc/sys/net/core/{k}"))
                        .unwrap()
                        .trim()
                        .parse()
                        .unwrap()
                };
                let want = |k| 2 * max(k).min(SOCKET_BUFFER);
                assert_eq!((snd, rcv), (want("wmem_max"), want("rmem_max")));
            }
        });
    }
}
