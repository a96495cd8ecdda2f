//! HTTP/3 over s2n-quic (AWS's QUIC implementation, with rustls for TLS): a server of quiclab's
//! routes that writes its sending side's timeline from s2n-quic's own events, and a client that
//! is a `Connector` of quiclab's one request loop.
//!
//! s2n-quic chooses its own packet sizes, pacing, loss detection and acknowledgements; what a
//! run chooses is the congestion controller ([`Congestion`]: its Cubic or its BBRv2).

pub mod client;
pub mod h3;
pub mod server;
mod timeline;

use std::fmt;
use std::str::FromStr;

pub use client::{ClientOptions, get};
pub use server::{ServerOptions, serve};

/// HTTP/3's ALPN.
pub const ALPN_H3: &[u8] = b"h3";

/// s2n-quic's congestion controllers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Congestion {
    /// CUBIC (RFC 9438), s2n-quic's default.
    #[default]
    Cubic,
    /// BBRv2 (s2n-quic's `Bbr`).
    Bbr,
}

impl Congestion {
    pub const ALL: [Congestion; 2] = [Congestion::Cubic, Congestion::Bbr];

    /// As plans name it (`quic-cc`).
    pub fn name(self) -> &'static str {
        match self {
            Congestion::Cubic => "cubic",
            Congestion::Bbr => "bbr",
        }
    }

    /// As people name it.
    pub fn title(self) -> &'static str {
        match self {
            Congestion::Cubic => "Cubic",
            Congestion::Bbr => "BBRv2",
        }
    }
}

impl fmt::Display for Congestion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Congestion {
    type Err = String;

    fn from_str(s: &str) -> Result<Congestion, String> {
        Congestion::ALL
            .into_iter()
            .find(|c| c.name() == s)
            .ok_or_else(|| format!("{s:?}: allowed: cubic, bbr (s2n-quic's BBRv2)"))
    }
}

/// An error of the s2n-quic endpoints, as records and messages state it.
pub type Error = Box<dyn std::error::Error + Send + Sync>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn controllers_parse_by_name_and_refuse_others_with_the_allowed_ones() {
        for c in Congestion::ALL {
            assert_eq!(c.name().parse::<Congestion>(), Ok(c));
        }
        assert_eq!(Congestion::default(), Congestion::Cubic);
        let e = "bbr2".parse::<Congestion>().unwrap_err();
        assert!(e.contains("cubic, bbr"), "{e}");
    }
}
