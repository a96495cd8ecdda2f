//! Every transport setting quiclab varies, shared by servers and clients ([`QuicOptions`]), and
//! how each is parsed and checked.

use super::*;

/// ALPN protocol identifier of HTTP/3.
pub const ALPN_H3: &[u8] = b"h3";

/// The largest UDP payload the kernel sends in one datagram (65,535 - 8 UDP - 20 IPv4 header).
pub const MAX_UDP_DATAGRAM: u32 = 65_507;

/// Errors from QUIC options, configurations and servers.
#[derive(Debug, thiserror::Error)]
pub enum QuicError {
    #[error("QUIC option {field} = {value} is not allowed (allowed: {allowed})")]
    InvalidOption {
        field: &'static str,
        value: String,
        allowed: String,
    },
    #[error("TLS configuration for QUIC")]
    Tls(#[source] rustls::Error),
    #[error(
        "the TLS configuration lacks TLS_AES_128_GCM_SHA256, which QUIC's initial packets need"
    )]
    NoInitialCipherSuite(#[source] quinn::crypto::rustls::NoInitialCipherSuite),
    #[error("reading the CA certificates to trust")]
    CaPem(#[source] rustls::pki_types::pem::Error),
    #[error("the CA certificate PEM holds no certificate")]
    NoCaCertificate,
    #[error("creating the qlog file {}", path.display())]
    Qlog {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("opening a UDP socket for {addr}")]
    Socket {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
}

/// A QUIC congestion controller as quinn implements it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum QuicCongestion {
    NewReno,
    #[default]
    Cubic,
    /// quinn's BBRv1, experimental (see the module documentation).
    Bbr,
}

impl QuicCongestion {
    pub const ALL: [QuicCongestion; 3] = [
        QuicCongestion::NewReno,
        QuicCongestion::Cubic,
        QuicCongestion::Bbr,
    ];

    pub fn name(self) -> &'static str {
        match self {
            QuicCongestion::NewReno => "newreno",
            QuicCongestion::Cubic => "cubic",
            QuicCongestion::Bbr => "bbr",
        }
    }

    /// The name, with "(experimental)" where results must be labelled so.
    pub fn label(self) -> String {
        if self.experimental() {
            format!("{} (experimental)", self.name())
        } else {
            self.name().to_string()
        }
    }

    /// True for controllers whose results must be labelled experimental.
    pub fn experimental(self) -> bool {
        self == QuicCongestion::Bbr
    }

    /// The controller's factory, with its initial window in bytes where one is given (else
    /// quinn's: 12,000 bytes for NewReno and Cubic, 240,000 for its BBR).
    fn factory(self, initial_window: Option<u64>) -> Arc<dyn ControllerFactory + Send + Sync> {
        match self {
            QuicCongestion::NewReno => {
                let mut c = congestion::NewRenoConfig::default();
                if let Some(w) = initial_window {
                    c.initial_window(w);
                }
                Arc::new(c)
            }
            QuicCongestion::Cubic => {
                let mut c = congestion::CubicConfig::default();
                if let Some(w) = initial_window {
                    c.initial_window(w);
                }
                Arc::new(c)
            }
            QuicCongestion::Bbr => {
                let mut c = congestion::BbrConfig::default();
                if let Some(w) = initial_window {
                    c.initial_window(w);
                }
                Arc::new(c)
            }
        }
    }

    /// Which controller a connection actually runs, told by the controller's type.
    pub fn of_connection(conn: &quinn::Connection) -> Option<QuicCongestion> {
        let any = conn.congestion_state().into_any();
        if any.is::<congestion::Cubic>() {
            Some(QuicCongestion::Cubic)
        } else if any.is::<congestion::NewReno>() {
            Some(QuicCongestion::NewReno)
        } else if any.is::<congestion::Bbr>() {
            Some(QuicCongestion::Bbr)
        } else {
            None
        }
    }
}

impl FromStr for QuicCongestion {
    type Err = QuicError;

    fn from_str(s: &str) -> Result<Self, QuicError> {
        Self::ALL
            .into_iter()
            .find(|c| c.name().eq_ignore_ascii_case(s))
            .ok_or_else(|| QuicError::InvalidOption {
                field: "congestion",
                value: s.to_string(),
                allowed: Self::ALL.map(Self::name).join(", "),
            })
    }
}

impl fmt::Display for QuicCongestion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// QUIC transport settings, the same for servers and clients. Defaults are quinn's, except
/// datagrams (off: HTTP/3 downloads do not use them). The server reaches quinn's per-stream
/// priorities through its own h3 transport ([`crate::h3prio`]): h3-quinn does not expose them,
/// and h3 has no RFC 9218 support.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct QuicOptions {
    pub congestion: QuicCongestion,
    /// The controller's initial window, bytes; `None`: quinn's (12,000 bytes for NewReno and
    /// Cubic, 240,000 for its BBR).
    pub initial_window: Option<u64>,
    /// RTT assumed before the first sample, in microseconds.
    pub initial_rtt_us: u64,
    /// Path MTU discovery (DPLPMTUD) between `initial_mtu` and `max_udp_payload`.
    pub mtu_discovery: bool,
    /// UDP payload size used from the start.
    pub initial_mtu: u16,
    /// Upper bound of MTU discovery (the largest UDP payload ever sent).
    pub max_udp_payload: u16,
    /// Generic segmentation offload (several datagrams per `sendmsg`).
    pub gso: bool,
    /// Flow-control window of each stream, bytes.
    pub stream_receive_window: u64,
    /// Flow-control window of the whole connection, bytes.
    pub receive_window: u64,
    /// Data buffered for sending across all streams, bytes.
    pub send_window: u64,
    /// Unreliable datagrams (RFC 9221): `None` off; `Some(n)` on, with n bytes buffered for
    /// receiving and for sending (workloads send and read them on the `quinn::Connection`).
    pub datagram_buffer: Option<u64>,
    /// Round-robin between streams with data to send (quinn's default); `false` sends them one
    /// after another in the order they were opened (FIFO).
    pub round_robin: bool,
    /// The server honours RFC 9218 `priority` request headers (urgency first; see
    /// [`crate::h3prio`]); `false`: every response at the default urgency.
    pub priorities: bool,
    /// Loss detection's packet threshold (RFC 9002's kPacketThreshold, 3): a packet is lost
    /// once one this many packet numbers after it is acknowledged.
    pub packet_threshold: u32,
    /// Loss detection's time threshold (RFC 9002's kTimeThreshold, 9/8) as a factor of the RTT.
    pub time_threshold: f64,
}

/// The packet thresholds [`QuicOptions::validate`] takes, packets.
pub const PACKET_THRESHOLDS: std::ops::RangeInclusive<u32> = 1..=1000;
/// The time thresholds [`QuicOptions::validate`] takes, round trips.
pub const TIME_THRESHOLDS: std::ops::RangeInclusive<f64> = 1.0..=10.0;

impl Default for QuicOptions {
    fn default() -> Self {
        QuicOptions::DEFAULT
    }
}

impl QuicOptions {
    /// The defaults: every front-end's and every plan's unless a knob says otherwise.
    pub const DEFAULT: QuicOptions = QuicOptions {
        congestion: QuicCongestion::Cubic,
        initial_window: None,
        initial_rtt_us: 333_000,
        mtu_discovery: true,
        initial_mtu: 1200,
        max_udp_payload: 1452,
        gso: true,
        stream_receive_window: 1_250_000,
        receive_window: VARINT_MAX,
        send_window: 10_000_000,
        datagram_buffer: None,
        round_robin: true,
        priorities: true,
        packet_threshold: 3,
        time_threshold: 1.125,
    };
}

impl QuicOptions {
    /// Checks every field; the error names the first bad one.
    pub fn validate(&self) -> Result<(), QuicError> {
        let bad = |field, value: String, allowed: String| {
            Err(QuicError::InvalidOption {
                field,
                value,
                allowed,
            })
        };
        if self.initial_rtt_us == 0 || self.initial_rtt_us > 60_000_000 {
            return bad(
                "initial_rtt",
                format!("{} us", self.initial_rtt_us),
                "1 us to 60 s".into(),
            );
        }
        if !PACKET_THRESHOLDS.contains(&self.packet_threshold) {
            return bad(
                "packet_threshold",
                self.packet_threshold.to_string(),
                "1 to 1000 packets (RFC 9002 recommends 3)".into(),
            );
        }
        if !TIME_THRESHOLDS.contains(&self.time_threshold) {
            return bad(
                "time_threshold",
                self.time_threshold.to_string(),
                "1 to 10 round trips (RFC 9002 recommends 1.125)".into(),
            );
        }
        if let Some(w) = self.initial_window
            && !(2 * u64::from(MIN_QUIC_PAYLOAD)..=VARINT_MAX).contains(&w)
        {
            return bad(
                "initial_window",
                w.to_string(),
                format!("{} bytes (two packets) or more", 2 * MIN_QUIC_PAYLOAD),
            );
        }
        if !(MIN_QUIC_PAYLOAD..=u16::MAX - 8).contains(&self.max_udp_payload) {
            return bad(
                "max_udp_payload",
                self.max_udp_payload.to_string(),
                format!("{MIN_QUIC_PAYLOAD} to {}", u16::MAX - 8),
            );
        }
        if !(MIN_QUIC_PAYLOAD..=self.max_udp_payload).contains(&self.initial_mtu) {
            return bad(
                "initial_mtu",
                self.initial_mtu.to_string(),
                format!(
                    "{MIN_QUIC_PAYLOAD} to max_udp_payload ({})",
                    self.max_udp_payload
                ),
            );
        }
        for (field, v) in [
            ("stream_receive_window", self.stream_receive_window),
            ("receive_window", self.receive_window),
            ("send_window", self.send_window),
            ("datagram_buffer", self.datagram_buffer.unwrap_or(1)),
        ] {
            if v == 0 || v > VARINT_MAX {
                return bad(field, v.to_string(), format!("1 to {VARINT_MAX} bytes"));
            }
        }
        Ok(())
    }

    /// quinn's transport configuration for these options (validated first).
    pub fn transport_config(&self) -> Result<TransportConfig, QuicError> {
        self.validate()?;
        Ok(self.build_transport(self.congestion.factory(self.initial_window)))
    }

    /// The endpoint configuration: it advertises `max_udp_payload` as the largest UDP payload
    /// this end accepts (quinn's default, 1472, would cap the peer's packets whatever its own
    /// settings).
    pub fn endpoint_config(&self) -> quinn::EndpointConfig {
        let mut c = quinn::EndpointConfig::default();
        // validate() keeps max_udp_payload at 1200 or more, which quinn accepts.
        let _ = c.max_udp_payload_size(self.max_udp_payload);
        c
    }

    /// One connection's transport: [`QuicOptions::transport_config`] with the controller
    /// wrapped to record into a recorder of its own (RTT samples under `path_min_rtt` counted
    /// as impossible), and with a qlog file when `qlog` says where.
    pub fn instrumented(
        &self,
        path_min_rtt: Option<Duration>,
        qlog: Option<QlogTarget>,
    ) -> Result<Instrumented, QuicError> {
        self.validate()?;
        let (qlog, stream) = match qlog {
            Some(target) => {
                let description = format!("quiclab; {}", self.summary());
                let (file, stream) =
                    QlogFile::create(&target, description).map_err(|source| QuicError::Qlog {
                        path: target.path,
                        source,
                    })?;
                (Some(file), Some(stream))
            }
            None => (None, None),
        };
        let observer = qlog.clone().map(|q| q as Arc<dyn CcObserver>);
        let recorder = Recorder::with_observer(path_min_rtt, observer);
        let mut transport = self.build_transport(RecordingFactory::new(
            self.congestion.factory(self.initial_window),
            recorder.clone(),
        ));
        transport.qlog_stream(stream);
        Ok(Instrumented {
            recorder,
            qlog,
            transport: Arc::new(transport),
        })
    }

    /// The transport for valid options with the given controller factory.
    fn build_transport(
        &self,
        factory: Arc<dyn ControllerFactory + Send + Sync>,
    ) -> TransportConfig {
        let mut t = TransportConfig::default();
        t.congestion_controller_factory(factory)
            .initial_rtt(Duration::from_micros(self.initial_rtt_us))
            .initial_mtu(self.initial_mtu)
            .enable_segmentation_offload(self.gso)
            // validate() keeps the windows within VarInt's range.
            .stream_receive_window(
                VarInt::from_u64(self.stream_receive_window).unwrap_or(VarInt::MAX),
            )
            .receive_window(VarInt::from_u64(self.receive_window).unwrap_or(VarInt::MAX))
            .send_window(self.send_window);
        if self.mtu_discovery {
            let mut mtu = MtuDiscoveryConfig::default();
            mtu.upper_bound(self.max_udp_payload);
            t.mtu_discovery_config(Some(mtu));
        } else {
            t.mtu_discovery_config(None);
        }
        match self.datagram_buffer {
            Some(n) => {
                // validate() keeps n within a VarInt, far below usize::MAX on 64-bit hosts.
                let n = usize::try_from(n).unwrap_or(usize::MAX);
                t.datagram_receive_buffer_size(Some(n))
                    .datagram_send_buffer_size(n);
            }
            None => {
                t.datagram_receive_buffer_size(None);
            }
        }
        t.send_fairness(self.round_robin);
        t.packet_threshold(self.packet_threshold)
            .time_threshold(self.time_threshold as f32);
        t
    }

    /// A one-line summary for ready lines and logs.
    pub fn summary(&self) -> String {
        format!(
            "quic congestion {}; initial window {}; initial rtt {} ms; mtu discovery {}; initial mtu {}; max udp payload {}; gso {}; stream window {}; connection window {}; scheduling {}; datagrams {}; priorities {}",
            self.congestion.label(),
            self.initial_window
                .map_or("quinn's".to_string(), |w| format!("{w} bytes")),
            self.initial_rtt_us as f64 / 1000.0,
            on_off(self.mtu_discovery),
            self.initial_mtu,
            self.max_udp_payload,
            on_off(self.gso),
            self.stream_receive_window,
            if self.receive_window == VARINT_MAX {
                "unlimited".to_string()
            } else {
                self.receive_window.to_string()
            },
            if self.round_robin {
                "round-robin"
            } else {
                "fifo"
            },
            self.datagram_buffer
                .map_or("off".to_string(), |n| format!("on, {n} bytes buffered")),
            on_off(self.priorities),
        )
    }
}

/// What [`QuicOptions::instrumented`] made for one connection.
pub struct Instrumented {
    pub recorder: Arc<Recorder>,
    pub qlog: Option<Arc<QlogFile>>,
    pub transport: Arc<TransportConfig>,
}

impl Instrumented {
    /// Writes out the qlog, if there is one (once the connection is over).
    pub fn flush(&self) -> std::io::Result<()> {
        self.qlog.as_ref().map_or(Ok(()), |q| q.flush())
    }
}

fn on_off(b: bool) -> &'static str {
    if b { "on" } else { "off" }
}

/// Parses `on`/`off` (also `true`/`false`, `yes`/`no`, `1`/`0`) for a named field.
pub fn parse_on_off(field: &'static str, s: &str) -> Result<bool, QuicError> {
    match s.to_ascii_lowercase().as_str() {
        "on" | "true" | "yes" | "1" => Ok(true),
        "off" | "false" | "no" | "0" => Ok(false),
        _ => Err(QuicError::InvalidOption {
            field,
            value: s.to_string(),
            allowed: "on, off".into(),
        }),
    }
}

/// Parses a duration such as `100ms`, `1.5s` or `250us` (a bare number is milliseconds) into
/// microseconds.
pub fn parse_duration_us(field: &'static str, s: &str) -> Result<u64, QuicError> {
    let t = s.trim();
    let (num, scale) = if let Some(n) = t.strip_suffix("us") {
        (n, 1.0)
    } else if let Some(n) = t.strip_suffix("ms") {
        (n, 1e3)
    } else if let Some(n) = t.strip_suffix('s') {
        (n, 1e6)
    } else {
        (t, 1e3)
    };
    match num.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok((v * scale).round() as u64),
        _ => Err(QuicError::InvalidOption {
            field,
            value: s.to_string(),
            allowed: "a duration such as 100ms, 1.5s or 250us".into(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each controller starts from the initial window given, and from quinn's without one: ten
    /// packets of 1200 bytes for NewReno and Cubic, 200 for its (experimental) BBR.
    #[test]
    fn the_initial_window_reaches_every_controller() {
        let now = std::time::Instant::now();
        for cc in QuicCongestion::ALL {
            let quinn_s = if cc == QuicCongestion::Bbr {
                240_000
            } else {
                12_000
            };
            assert_eq!(cc.factory(None).build(now, 1200).initial_window(), quinn_s);
            let c = cc.factory(Some(14_480)).build(now, 1200);
            assert_eq!((c.initial_window(), c.window()), (14_480, 14_480), "{cc}");
        }
        let e = QuicOptions {
            initial_window: Some(2000),
            ..QuicOptions::DEFAULT
        }
        .validate()
        .unwrap_err();
        assert!(e.to_string().contains("initial_window = 2000"), "{e}");
    }
}
