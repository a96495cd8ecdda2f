//! TCP_INFO of a socket: the kernel's view of one TCP connection (RTT, congestion window, bytes
//! acknowledged, retransmissions), read once ([`TcpInfo::read`]) or sampled into a timeline
//! ([`Sampler`]).
//!
//! Contract:
//! - The kernel's `struct tcp_info` grows with kernel versions and `libc::tcp_info` lags behind,
//!   so the fields are read by their offsets in the kernel's layout (include/uapi/linux/tcp.h).
//!   A field the running kernel did not return (a shorter struct) is `None`.
//! - Times are microseconds, sizes bytes, rates bits per second.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::time::Duration;

use quiclab_model::record::{TimelineSample, Transport, now_us};

/// Where the kernel lists the TCP congestion controllers it has.
pub const AVAILABLE_CONGESTION: &str = "/proc/sys/net/ipv4/tcp_available_congestion_control";

/// The kernel's TCP congestion controllers.
pub fn available_congestion_controllers() -> io::Result<Vec<String>> {
    Ok(std::fs::read_to_string(AVAILABLE_CONGESTION)?
        .split_whitespace()
        .map(str::to_string)
        .collect())
}

/// The kernel's TCP congestion controllers, comma-separated, for error messages.
fn available_congestion() -> String {
    available_congestion_controllers()
        .map(|v| v.join(", "))
        .unwrap_or_else(|e| format!("unknown: {e}"))
}

/// Why a socket does not run the congestion controller asked for.
#[derive(Debug, thiserror::Error)]
pub enum CongestionError {
    #[error(
        "TCP congestion controller {name:?} is not available (available: {available}; see {AVAILABLE_CONGESTION})"
    )]
    Unknown { name: String, available: String },
    #[error("setting TCP congestion controller {name:?}")]
    Set {
        name: String,
        #[source]
        source: io::Error,
    },
    #[error("reading a socket's TCP congestion controller")]
    Read(#[source] io::Error),
    #[error("TCP congestion controller {wanted:?} was set but the socket reports {got:?}")]
    Mismatch { wanted: String, got: String },
}

/// Sets an integer option at the TCP level (`IPPROTO_TCP`) on a socket.
pub fn set_tcp_option(
    socket: &impl AsRawFd,
    option: libc::c_int,
    value: libc::c_int,
) -> io::Result<()> {
    // SAFETY: setsockopt reads an int from a live local variable; the descriptor is open.
    let rc = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::IPPROTO_TCP,
            option,
            (&value as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// The kernel's TCP Fast Open switch (bit 1 clients, bit 2 servers), per network namespace.
pub const FASTOPEN_SYSCTL: &str = "/proc/sys/net/ipv4/tcp_fastopen";

/// The Fast Open switch as its text and whether `bit` is set in it.
pub fn fast_open_enabled(bit: u32) -> io::Result<(String, bool)> {
    let value = std::fs::read_to_string(FASTOPEN_SYSCTL)?.trim().to_string();
    let on = value.parse::<u32>().is_ok_and(|v| v & bit != 0);
    Ok((value, on))
}

/// Sets `wanted` on the socket when given, and returns the controller the socket reports, which
/// must be the one asked for (the kernel's default otherwise).
pub fn apply_congestion(
    socket: &socket2::Socket,
    wanted: Option<&str>,
) -> Result<String, CongestionError> {
    if let Some(name) = wanted {
        socket.set_tcp_congestion(name.as_bytes()).map_err(|e| {
            if e.raw_os_error() == Some(libc::ENOENT) {
                CongestionError::Unknown {
                    name: name.to_string(),
                    available: available_congestion(),
                }
            } else {
                CongestionError::Set {
                    name: name.to_string(),
                    source: e,
                }
            }
        })?;
    }
    let raw = socket.tcp_congestion().map_err(CongestionError::Read)?;
    // The kernel returns a fixed-size, NUL-padded name.
    let got = raw.split(|&b| b == 0).next().unwrap_or_default();
    let got = String::from_utf8_lossy(got).into_owned();
    match wanted {
        Some(w) if w != got => Err(CongestionError::Mismatch {
            wanted: w.to_string(),
            got,
        }),
        _ => Ok(got),
    }
}

/// Offsets and sizes of the fields read, in the kernel's `struct tcp_info`.
mod layout {
    pub const STATE: usize = 0;
    pub const CA_STATE: usize = 1;
    pub const OPTIONS: usize = 5;
    pub const SND_MSS: usize = 16;
    pub const UNACKED: usize = 24;
    pub const SACKED: usize = 28;
    pub const LOST: usize = 32;
    pub const RETRANS: usize = 36;
    pub const RTT: usize = 68;
    pub const RTTVAR: usize = 72;
    pub const SND_SSTHRESH: usize = 76;
    pub const SND_CWND: usize = 80;
    pub const TOTAL_RETRANS: usize = 100;
    pub const PACING_RATE: usize = 104;
    pub const BYTES_ACKED: usize = 120;
    pub const BYTES_RECEIVED: usize = 128;
    pub const MIN_RTT: usize = 148;
    pub const DELIVERY_RATE: usize = 160;
    pub const RWND_LIMITED: usize = 176;
    pub const BYTES_SENT: usize = 200;
    pub const BYTES_RETRANS: usize = 208;
    /// Everything up to and including `tcpi_bytes_retrans`.
    pub const WANTED: usize = 216;
}

/// `tcpi_ca_state` values (enum tcp_ca_state) that mean the sender reacted to congestion.
const TCP_CA_CWR: u8 = 2;
const TCP_CA_RECOVERY: u8 = 3;
const TCP_CA_LOSS: u8 = 4;

/// `tcpi_options` bit: the SYN carried data that the peer acknowledged (TCP Fast Open).
const TCPI_OPT_SYN_DATA: u8 = 32;

/// What TCP_INFO said about a connection at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TcpInfo {
    /// TCP state (1 = ESTABLISHED).
    pub state: u8,
    /// Congestion-avoidance state (0 open, 1 disorder, 2 CWR, 3 recovery, 4 loss).
    pub ca_state: u8,
    /// True when data sent in the SYN was acknowledged (TCP Fast Open worked).
    pub syn_data_acked: bool,
    pub snd_mss: Option<u32>,
    /// Segments sent and not yet acknowledged.
    pub unacked: Option<u32>,
    pub sacked: Option<u32>,
    pub lost: Option<u32>,
    pub retrans: Option<u32>,
    pub rtt_us: Option<u32>,
    pub rttvar_us: Option<u32>,
    pub snd_ssthresh: Option<u32>,
    /// Congestion window in segments.
    pub snd_cwnd: Option<u32>,
    pub total_retrans: Option<u32>,
    /// Bytes per second, as the kernel reports it.
    pub pacing_rate: Option<u64>,
    pub bytes_acked: Option<u64>,
    pub bytes_received: Option<u64>,
    pub min_rtt_us: Option<u32>,
    /// Bytes per second, as the kernel reports it.
    pub delivery_rate: Option<u64>,
    /// Time the peer's receive window limited the sender (a chronograph), µs.
    pub rwnd_limited_us: Option<u64>,
    pub bytes_sent: Option<u64>,
    pub bytes_retrans: Option<u64>,
}

impl TcpInfo {
    /// Reads TCP_INFO from a TCP socket.
    pub fn read(fd: BorrowedFd<'_>) -> io::Result<TcpInfo> {
        let mut buf = [0u8; layout::WANTED];
        let mut len = buf.len() as libc::socklen_t;
        // SAFETY: the kernel writes at most `len` bytes into `buf`, which we own, and sets `len`
        // to the number written.
        let rc = unsafe {
            libc::getsockopt(
                fd.as_raw_fd(),
                libc::IPPROTO_TCP,
                libc::TCP_INFO,
                buf.as_mut_ptr().cast(),
                &mut len,
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Self::parse(&buf[..(len as usize).min(buf.len())]))
    }

    /// Decodes the first `raw.len()` bytes of a kernel `struct tcp_info`.
    pub fn parse(raw: &[u8]) -> TcpInfo {
        let u8_at = |off: usize| raw.get(off).copied().unwrap_or(0);
        let u32_at = |off: usize| {
            raw.get(off..off + 4)
                .map(|b| u32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
        };
        let u64_at = |off: usize| {
            raw.get(off..off + 8).map(|b| {
                let mut a = [0u8; 8];
                a.copy_from_slice(b);
                u64::from_ne_bytes(a)
            })
        };
        use layout::*;
        TcpInfo {
            state: u8_at(STATE),
            ca_state: u8_at(CA_STATE),
            syn_data_acked: u8_at(OPTIONS) & TCPI_OPT_SYN_DATA != 0,
            snd_mss: u32_at(SND_MSS),
            unacked: u32_at(UNACKED),
            sacked: u32_at(SACKED),
            lost: u32_at(LOST),
            retrans: u32_at(RETRANS),
            rtt_us: u32_at(RTT),
            rttvar_us: u32_at(RTTVAR),
            snd_ssthresh: u32_at(SND_SSTHRESH),
            snd_cwnd: u32_at(SND_CWND),
            total_retrans: u32_at(TOTAL_RETRANS),
            pacing_rate: u64_at(PACING_RATE),
            bytes_acked: u64_at(BYTES_ACKED),
            bytes_received: u64_at(BYTES_RECEIVED),
            min_rtt_us: u32_at(MIN_RTT),
            delivery_rate: u64_at(DELIVERY_RATE),
            rwnd_limited_us: u64_at(RWND_LIMITED),
            bytes_sent: u64_at(BYTES_SENT),
            bytes_retrans: u64_at(BYTES_RETRANS),
        }
    }

    /// Congestion window in bytes (segments times the sender's MSS).
    pub fn cwnd_bytes(&self) -> Option<u64> {
        Some(u64::from(self.snd_cwnd?) * u64::from(self.snd_mss?))
    }

    /// Bytes in flight as the kernel counts packets in flight (unacked - sacked - lost +
    /// retransmitted), times the MSS.
    pub fn bytes_in_flight(&self) -> Option<u64> {
        let packets = (u64::from(self.unacked?) + u64::from(self.retrans?))
            .saturating_sub(u64::from(self.sacked?) + u64::from(self.lost?));
        Some(packets * u64::from(self.snd_mss?))
    }

    /// True in the states a sender enters when it reacts to congestion (CWR, recovery, loss).
    pub fn in_congestion_state(&self) -> bool {
        matches!(self.ca_state, TCP_CA_CWR | TCP_CA_RECOVERY | TCP_CA_LOSS)
    }
}

/// Samples one socket's TCP_INFO into [`TimelineSample`]s.
///
/// It owns a duplicate of the socket's descriptor, so the socket stays valid (and is not
/// confused with a later one reusing the number) for as long as the sampler lives; the
/// connection is not closed (no FIN goes out) before the sampler is dropped too.
pub struct Sampler {
    fd: OwnedFd,
    connection: u32,
    was_congested: bool,
    last_total_retrans: u32,
    path_min_rtt_us: Option<u64>,
    first_loss_offset: Option<u64>,
}

impl Sampler {
    /// A sampler for the socket `fd` (duplicated), labelled with `connection`.
    pub fn new(fd: BorrowedFd<'_>, connection: u32) -> io::Result<Sampler> {
        Ok(Sampler {
            fd: fd.try_clone_to_owned()?,
            connection,
            was_congested: false,
            last_total_retrans: 0,
            path_min_rtt_us: None,
            first_loss_offset: None,
        })
    }

    /// Counts RTT samples below `floor_us` (the emulated path's minimum RTT) as impossible.
    pub fn with_path_min_rtt(mut self, floor_us: Option<u64>) -> Sampler {
        self.path_min_rtt_us = floor_us;
        self
    }

    /// Takes one sample now. `congestion_event` is set on the first sample in a congestion
    /// state (CWR, recovery, loss) after one that was not, and on any new retransmission.
    pub fn sample(&mut self) -> io::Result<TimelineSample> {
        let t_us = now_us();
        let info = TcpInfo::read(self.fd.as_fd())?;
        let congested = info.in_congestion_state();
        let retrans = info.total_retrans.unwrap_or(0);
        let event = (congested && !self.was_congested) || retrans > self.last_total_retrans;
        if retrans > 0 && self.first_loss_offset.is_none() {
            // Until the first retransmission is acknowledged (at least a round trip, longer
            // than the sampling period), the cumulative ACK point is the first lost byte.
            self.first_loss_offset = info.bytes_acked;
        }
        self.was_congested = congested;
        self.last_total_retrans = retrans;
        Ok(TimelineSample {
            transport: Transport::Tcp,
            connection: self.connection,
            t_us,
            cwnd_bytes: info.cwnd_bytes(),
            bytes_in_flight: info.bytes_in_flight(),
            acked_bytes: info.bytes_acked,
            rtt_us: info.rtt_us.map(u64::from),
            rate_bps: info.delivery_rate.map(|r| r.saturating_mul(8)),
            congestion_event: event,
            retransmits: info.total_retrans.map(u64::from),
            impossible_rtt_samples: self
                .path_min_rtt_us
                .map(|floor| impossible_min_rtt(&info, floor)),
            busy_rtt_samples: None,
            first_loss_offset: self.first_loss_offset,
            resent_bytes: info.bytes_retrans,
            udp_payload: None,
            flow_blocked: info.rwnd_limited_us,
        })
    }

    /// Samples every `interval` until `stop` completes (one last sample is taken then), or until
    /// TCP_INFO fails (the socket is gone). Returns the samples in time order.
    pub async fn run_until(
        self,
        interval: Duration,
        stop: impl Future<Output = ()>,
    ) -> Vec<TimelineSample> {
        let mut samples = Vec::new();
        self.run_each(interval, stop, |s| samples.push(s)).await;
        samples
    }

    /// Like [`Sampler::run_until`], handing each sample to `each` as it is taken.
    pub async fn run_each(
        mut self,
        interval: Duration,
        stop: impl Future<Output = ()>,
        mut each: impl FnMut(TimelineSample),
    ) {
        let mut tick = tokio::time::interval(interval);
        // Stay on the grid: a late tick fires once and the next keeps its time, so lateness
        // under load does not stretch the sampling period.
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        let mut stop = std::pin::pin!(stop);
        loop {
            tokio::select! {
                () = &mut stop => {
                    if let Ok(s) = self.sample() {
                        each(s);
                    }
                    return;
                }
                _ = tick.tick() => match self.sample() {
                    Ok(s) => each(s),
                    Err(_) => return,
                },
            }
        }
    }
}

/// TCP keeps only its minimum RTT: one below the floor means at least one impossible sample.
pub fn impossible_min_rtt(info: &TcpInfo, floor_us: u64) -> u64 {
    // The kernel reports ~0 (u32::MAX) before its first sample; only a real one counts.
    match info.min_rtt_us {
        Some(m) if m != u32::MAX && u64::from(m) < floor_us => 1,
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};

    #[test]
    fn short_structs_leave_missing_fields_empty() {
        let mut raw = vec![0u8; layout::WANTED];
        raw[layout::CA_STATE] = TCP_CA_RECOVERY;
        raw[layout::SND_MSS..layout::SND_MSS + 4].copy_from_slice(&1448u32.to_ne_bytes());
        raw[layout::SND_CWND..layout::SND_CWND + 4].copy_from_slice(&10u32.to_ne_bytes());
        raw[layout::BYTES_ACKED..layout::BYTES_ACKED + 8].copy_from_slice(&7u64.to_ne_bytes());
        let full = TcpInfo::parse(&raw);
        assert_eq!(full.cwnd_bytes(), Some(14_480));
        assert_eq!(full.bytes_acked, Some(7));
        assert!(full.in_congestion_state());
        let short = TcpInfo::parse(&raw[..layout::PACING_RATE]);
        assert_eq!(short.snd_cwnd, Some(10));
        assert_eq!(short.total_retrans, Some(0));
        assert_eq!(short.bytes_acked, None);
        assert_eq!(short.min_rtt_us, None);
    }

    #[test]
    fn sampler_sees_every_byte_sent_on_loopback_acknowledged() {
        const N: usize = 3_000_000;
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let reader = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            let mut buf = vec![0u8; 65_536];
            let mut total = 0;
            loop {
                let n = s.read(&mut buf).unwrap();
                if n == 0 {
                    return total;
                }
                total += n;
            }
        });
        let mut tx = TcpStream::connect(addr).unwrap();
        let mut sampler = Sampler::new(tx.as_fd(), 3).unwrap();
        let before = sampler.sample().unwrap();
        let base = before.acked_bytes.unwrap();
        assert!(
            base <= 1,
            "a fresh connection has acknowledged at most its SYN: {base}"
        );

        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let (done_tx, done_rx) = tokio::sync::oneshot::channel::<()>();
        let writer = std::thread::spawn(move || {
            tx.write_all(&vec![0x5a; N]).unwrap();
            // Everything is acknowledged once the peer has read it all and the ACKs are in:
            // wait for TCP_INFO to say so before stopping the sampler.
            let deadline = std::time::Instant::now() + Duration::from_secs(10);
            loop {
                let info = TcpInfo::read(tx.as_fd()).unwrap();
                if info.bytes_acked.unwrap() >= base + N as u64
                    || std::time::Instant::now() > deadline
                {
                    break;
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            let _ = done_tx.send(());
            tx
        });
        let samples = rt.block_on(sampler.run_until(Duration::from_millis(2), async {
            let _ = done_rx.await;
        }));
        let tx = writer.join().unwrap();
        drop(tx);
        assert_eq!(reader.join().unwrap(), N);

        assert!(!samples.is_empty());
        assert!(samples.windows(2).all(|w| w[0].t_us <= w[1].t_us));
        let acked: Vec<u64> = samples.iter().map(|s| s.acked_bytes.unwrap()).collect();
        assert!(acked.windows(2).all(|w| w[0] <= w[1]), "{acked:?}");
        assert_eq!(*acked.last().unwrap() - base, N as u64);
        let last = samples.last().unwrap();
        assert_eq!(last.connection, 3);
        assert_eq!(last.transport, Transport::Tcp);
        assert!(last.cwnd_bytes.unwrap() > 0 && last.rtt_us.is_some());
    }
}
