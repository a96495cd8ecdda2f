//! quiclab's HTTP/3 endpoints: quinn for the transport, h3 for HTTP, rustls with *ring* for
//! TLS.
//!
//! Modules: `options` ([`QuicOptions`]), `server` ([`QuicServer`]), `client` ([`get`],
//! [`QuicClient`]), all re-exported here; [`socket`] (the endpoint's UDP socket), [`h3prio`] (the server's response scheduler: RFC 9218 priorities, FIFO or
//! round-robin), [`qlog`] (one qlog file per connection), [`recording`] (a congestion
//! controller wrapper that counts what quinn does not expose). Routes, URLs, TLS and the
//! request loop come from `quiclab-endpoint`.
//!
//! Must never: know about plans, trials or the store; print (warnings go through `log`).
//!
//! Contract:
//! - [`QuicOptions`] is every transport setting quiclab varies, shared by servers and clients.
//!   [`QuicOptions::validate`] refuses a value quinn would reject or silently misuse, naming the
//!   field, the value and what is allowed.
//! - Every endpoint's UDP socket comes from [`socket::open`]: 8 MiB kernel buffers, and GSO
//!   batches held to what fits one UDP send at the largest payload (7 × 8952 bytes at jumbo
//!   frames, 10 up to 6550), so any payload works with GSO on.
//! - [`QuicServer`] serves the routes of [`crate::routes`] (`GET /bytes/N`, `POST /upload`, 404
//!   otherwise) over HTTP/3 on a UDP socket, TLS 1.3 with ALPN `h3`, accepting 0-RTT requests
//!   (they are idempotent downloads or counted uploads, so a replay does no harm).
//!   Optionally it writes each connection's timeline (the sender's view, every 5 ms). Responses
//!   are scheduled by [`crate::h3prio`]: RFC 9218 priorities, FIFO or round-robin.
//! - [`get`] fetches URLs over HTTP/3 and returns one [`RequestRecord`] per URL, checking
//!   `/bytes/N` bodies byte for byte against the pattern. With resumption, later connections of
//!   a run send their request as 0-RTT; if the server refuses the early data, the request is
//!   repeated on the same connection.
//! - With a [`QuicService`] (e.g. the telemetry receiver), connections that negotiate its ALPN
//!   are handed to it instead of HTTP/3.
//! - Congestion control is read back from the connection (by type), and quinn's BBR is flagged
//!   experimental in records: it is BBRv1 and quinn's pacer does not apply its pacing rate.

use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf, Bytes};
use http::{Request, Response, StatusCode, Uri};
use quinn::congestion::{self, ControllerFactory};
use quinn::crypto::rustls::{QuicClientConfig, QuicServerConfig};
use quinn::{MtuDiscoveryConfig, TransportConfig, VarInt};
use rustls::RootCertStore;

use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use serde::{Deserialize, Serialize};
use socket2::{Domain, Protocol, Socket, Type};
use tokio::task::JoinSet;

pub mod h3prio;
pub mod qlog;
pub mod recording;
pub mod socket;

use quiclab_endpoint::{files, priority, requests, routes, timeline, tls, url};

use crate::files::Lookup;
use crate::qlog::{QlogFile, QlogTarget, Vantage};
use crate::recording::{CcObserver, Recorder, RecordingFactory};
use crate::requests::{Connector, Requests};
use crate::routes::PatternBody;
use crate::routes::{Route, first_mismatch, held, pattern_chunk, route};
use crate::timeline::{TIMELINE_INTERVAL, TimelineWriter};
use crate::tls::{KxGroup, KxLog, logged_provider};
use crate::url::{Url, UrlError};
use http_body_util::BodyExt;
use quiclab_endpoint::ServeStats;
use quiclab_model::record::{
    Handshake, HttpVersion, RequestRecord, TimelineSample, Transport, TransportStats, now_us,
};

/// HTTP/3's "no error" code (RFC 9114, section 8.1), for closing a connection that is done.
const H3_NO_ERROR: VarInt = VarInt::from_u32(0x100);

/// The smallest datagram size QUIC allows (RFC 9000, section 14).
const MIN_QUIC_PAYLOAD: u16 = 1200;

/// The largest value of a QUIC variable-length integer (flow-control windows are such values).
const VARINT_MAX: u64 = (1 << 62) - 1;

mod client;
mod options;
mod server;

pub use client::*;
pub use options::*;
pub use server::*;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_are_validated_with_field_value_and_allowed() {
        QuicOptions::default().validate().unwrap();
        let e = "vegas".parse::<QuicCongestion>().unwrap_err();
        assert_eq!(
            e.to_string(),
            "QUIC option congestion = vegas is not allowed (allowed: newreno, cubic, bbr)"
        );
        // jumbo payloads are fine with GSO on: the socket caps the batch (see `socket`)
        let o = QuicOptions {
            max_udp_payload: 8952,
            ..Default::default()
        };
        o.validate().unwrap();
        let e = QuicOptions {
            max_udp_payload: 65_528,
            ..o
        }
        .validate()
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("max_udp_payload = 65528") && e.contains("1200 to 65527"),
            "{e}"
        );
        let e = QuicOptions {
            initial_mtu: 1500,
            ..Default::default()
        }
        .validate()
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "QUIC option initial_mtu = 1500 is not allowed (allowed: 1200 to max_udp_payload (1452))"
        );
        let e = QuicOptions {
            stream_receive_window: 0,
            ..Default::default()
        }
        .validate()
        .unwrap_err();
        assert!(
            e.to_string()
                .starts_with("QUIC option stream_receive_window = 0"),
            "{e}"
        );
        assert_eq!(parse_duration_us("x", "100ms").unwrap(), 100_000);
        assert_eq!(parse_duration_us("x", "1.5s").unwrap(), 1_500_000);
        assert_eq!(parse_duration_us("x", "40").unwrap(), 40_000);
        assert!(parse_duration_us("x", "fast").is_err());
        assert!(parse_on_off("gso", "maybe").is_err());
        let json = serde_json::to_string(&QuicOptions::default()).unwrap();
        let back: QuicOptions = serde_json::from_str(&json).unwrap();
        assert_eq!(back, QuicOptions::default());
        let partial: QuicOptions = serde_json::from_str(r#"{"congestion":"bbr"}"#).unwrap();
        assert_eq!(partial.congestion, QuicCongestion::Bbr);
    }

    /// A QUIC server of `id` with default options on an ephemeral loopback port (started inside
    /// a tokio runtime): its address, what stops it, and its task.
    fn loopback_server(
        id: &crate::tls::Identity,
    ) -> (
        SocketAddr,
        tokio::sync::oneshot::Sender<()>,
        tokio::task::JoinHandle<ServeStats>,
    ) {
        let tcp = crate::tls::server_config(id, &[KxGroup::X25519]).unwrap();
        let server = QuicServer::bind(QuicServerOptions {
            listen: "127.0.0.1:0".parse().unwrap(),
            tls: Arc::new(server_tls(&tcp)),
            quic: QuicOptions::default(),
            timeline: None,
            path_min_rtt_us: None,
            qlog_dir: None,
            root: None,
            service: None,
        })
        .unwrap();
        let addr = server.local_addr();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let served = tokio::spawn(server.run_until(
            async {
                let _ = stop_rx.await;
            },
            |e| eprintln!("server error: {e}"),
        ));
        (addr, stop_tx, served)
    }

    /// RFC 9114 7.2.8: an HTTP/2 frame type (here PING, 0x06) on a request stream, first or
    /// after the request's HEADERS, is a connection error of type H3_FRAME_UNEXPECTED.
    #[test]
    fn a_reserved_http2_frame_on_a_request_stream_closes_the_connection_as_unexpected() {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let id = crate::tls::Identity::self_signed().unwrap();
            let (addr, stop_tx, served) = loopback_server(&id);
            let opts = QuicClientOptions {
                quic: QuicOptions::default(),
                ca_pem: id.chain_pem().to_string(),
                groups: vec![KxGroup::X25519],
                reuse_connection: false,
                resume: false,
                path_min_rtt_us: None,
                qlog_dir: None,
                upload: None,
            };
            let tls = client_tls(&opts).unwrap();
            let endpoint = quinn::Endpoint::client("127.0.0.1:0".parse().unwrap()).unwrap();
            // a GET of /bytes/1 as QPACK with the static table only: required insert count 0,
            // base 0, :method GET (17), :scheme https (23), :authority "x" (0, a literal), and
            // :path "/bytes/1" (1, a literal)
            let mut headers = vec![0x00, 0x00, 0xd1, 0xd7, 0x50, 0x01, b'x', 0x51, 0x08];
            headers.extend_from_slice(b"/bytes/1");
            let mut request = vec![0x01, headers.len() as u8];
            request.extend_from_slice(&headers);
            let ping = [0x06u8, 0x00];
            for (what, frames) in [
                ("first", ping.to_vec()),
                (
                    "after the headers",
                    [request.clone(), ping.to_vec()].concat(),
                ),
            ] {
                let kx = Arc::new(KxLog::default());
                let config = client_config(&opts, &tls, &kx, ALPN_H3).unwrap();
                let conn = endpoint
                    .connect_with(config, addr, "localhost")
                    .unwrap()
                    .await
                    .unwrap();
                let (mut send, _recv) = conn.open_bi().await.unwrap();
                send.write_all(&frames).await.unwrap();
                send.finish().unwrap();
                let closed = tokio::time::timeout(Duration::from_secs(5), conn.closed())
                    .await
                    .unwrap_or_else(|_| panic!("{what}: the connection stayed open"));
                match closed {
                    quinn::ConnectionError::ApplicationClosed(c) => assert_eq!(
                        c.error_code.into_inner(),
                        0x105,
                        "{what}: H3_FRAME_UNEXPECTED, not {c:?}"
                    ),
                    other => panic!("{what}: {other}"),
                }
            }
            stop_tx.send(()).unwrap();
            served.await.unwrap();
        });
    }

    #[test]
    fn loopback_download_and_zero_rtt_resumption() {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let id = crate::tls::Identity::self_signed().unwrap();
            let (addr, stop_tx, served) = loopback_server(&id);
            let port = addr.port();
            let urls: Vec<String> = [100_000, 1, 0, 300_000]
                .iter()
                .map(|n| format!("https://127.0.0.1:{port}/bytes/{n}"))
                .chain([format!("https://127.0.0.1:{port}/nothing")])
                .collect();
            let opts = QuicClientOptions {
                quic: QuicOptions {
                    congestion: QuicCongestion::NewReno,
                    ..Default::default()
                },
                ca_pem: id.chain_pem().to_string(),
                groups: vec![KxGroup::X25519],
                reuse_connection: false,
                resume: true,
                path_min_rtt_us: None,
                qlog_dir: None,
                upload: None,
            };
            let recs = get(&urls, &opts).await.unwrap();
            for (r, n) in recs.iter().zip([100_000, 1, 0, 300_000]) {
                assert_eq!(r.error, None, "{r:?}");
                assert_eq!((r.status, r.bytes), (200, n));
                assert_eq!(r.handshake.alpn.as_deref(), Some("h3"));
                assert_eq!(
                    r.transport_stats.congestion_control.as_deref(),
                    Some("newreno")
                );
            }
            assert_eq!(recs[4].status, 404);
            assert!(!recs[0].handshake.zero_rtt_attempted);
            assert!(recs[1].handshake.zero_rtt_attempted && recs[1].handshake.zero_rtt_accepted);
            assert_eq!(
                recs.iter().map(|r| r.connection).collect::<Vec<_>>(),
                [0, 1, 2, 3, 4]
            );
            // uploads: every byte reaches /upload, whose answer counts them
            let upload = QuicClientOptions {
                upload: Some(300_000),
                ..opts.clone()
            };
            let up = get(&[format!("https://127.0.0.1:{port}/upload")], &upload)
                .await
                .unwrap();
            assert_eq!(up[0].error, None, "{:?}", up[0]);
            assert_eq!((up[0].method.as_str(), up[0].status), ("POST", 200));
            assert_eq!(up[0].sent_bytes, 300_000);
            // a path that counts nothing answers with no count: refused by the check
            let wrong = get(&[format!("https://127.0.0.1:{port}/bytes/10")], &upload)
                .await
                .unwrap();
            assert!(
                wrong[0].status != 200 || wrong[0].error.is_some(),
                "{:?}",
                wrong[0]
            );

            // A second server (its own session cache) behind the same name: the ticket from the
            // first is offered, 0-RTT is refused, and the request is repeated in 1-RTT.
            let (other_addr, other_stop, other_served) = loopback_server(&id);
            let other_port = other_addr.port();
            let urls2 = [
                format!("https://127.0.0.1:{port}/bytes/1000"),
                format!("https://127.0.0.1:{other_port}/bytes/70000"),
            ];
            let recs = get(&urls2, &opts).await.unwrap();
            assert_eq!(recs[1].error, None, "{:?}", recs[1]);
            assert_eq!(recs[1].bytes, 70_000);
            assert!(recs[1].handshake.zero_rtt_attempted, "{:?}", recs[1]);
            assert!(!recs[1].handshake.zero_rtt_accepted && !recs[1].handshake.resumed);
            other_stop.send(()).unwrap();
            other_served.await.unwrap();

            let recs = get(
                &urls[..2],
                &QuicClientOptions {
                    reuse_connection: true,
                    resume: false,
                    ..opts
                },
            )
            .await
            .unwrap();
            assert_eq!(recs[0].error, None);
            assert_eq!(recs[1].error, None);
            assert_eq!((recs[1].connection, recs[1].new_connection), (0, false));
            stop_tx.send(()).unwrap();
            let stats = served.await.unwrap();
            // five downloads, two uploads, the 0-RTT pair
            assert_eq!((stats.connections, stats.failed), (9, 0));
        });
    }
}
