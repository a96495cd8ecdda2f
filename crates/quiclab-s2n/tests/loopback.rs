//! The s2n-quic server and client against each other on loopback: bodies checked against the
//! pattern, one connection when reused, and the server's sender timeline.

use std::sync::{Arc, Mutex};

use quiclab_endpoint::timeline::TimelineWriter;
use quiclab_endpoint::tls::Identity;
use quiclab_model::record::TimelineSample;
use quiclab_s2n::{ClientOptions, Congestion, ServerOptions, server};

/// A writer whose bytes the test reads back.
#[derive(Clone, Default)]
struct Shared(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Shared {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gets_come_back_whole_over_both_controllers_and_the_server_samples_its_sender() {
    for congestion in Congestion::ALL {
        let id = Identity::self_signed().unwrap();
        let timeline = Shared::default();
        let bound = server::bind(ServerOptions {
            listen: "127.0.0.1:0".parse().unwrap(),
            cert_pem: id.chain_pem().to_string(),
            key_pem: id.key_pem().to_string(),
            congestion,
            timeline: Some(TimelineWriter::new(Box::new(timeline.clone()))),
            path_min_rtt_us: Some(1),
        })
        .unwrap();
        let addr = bound.local_addr().unwrap();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let errors = Arc::new(Mutex::new(Vec::new()));
        let seen = errors.clone();
        let server = tokio::spawn(bound.run_until(
            async move {
                let _ = stop_rx.await;
            },
            move |e| seen.lock().unwrap().push(e.to_string()),
        ));
        let sizes = [1u64, 100_000, 1_000_000];
        let urls: Vec<String> = sizes
            .iter()
            .map(|n| format!("https://127.0.0.1:{}/bytes/{n}", addr.port()))
            .chain([format!("https://127.0.0.1:{}/nothing", addr.port())])
            .collect();
        let opts = ClientOptions {
            ca_pem: id.chain_pem().to_string(),
            congestion,
            reuse_connection: true,
        };
        let records = quiclab_s2n::get(&urls, &opts).await.unwrap();
        stop_tx.send(()).unwrap();
        let stats = server.await.unwrap();
        assert_eq!(records.len(), 4);
        for (r, n) in records.iter().zip(sizes) {
            assert_eq!(r.error, None, "{congestion}: {r:?}");
            assert_eq!((r.status, r.bytes), (200, n), "{congestion}");
            assert!(r.first_byte_us <= r.last_byte_us);
            assert_eq!(r.handshake.alpn.as_deref(), Some("h3"));
            assert_eq!(
                r.transport_stats.congestion_control.as_deref(),
                Some(congestion.name())
            );
        }
        assert_eq!(records[3].status, 404);
        // one connection for all, its handshake noted on the first request only
        assert!(
            records
                .iter()
                .all(|r| r.connection == records[0].connection)
        );
        assert!(records[0].handshake_done_us.is_some() && records[1].handshake_done_us.is_none());
        assert_eq!(stats.connections, 1, "{congestion}");
        assert!(
            errors.lock().unwrap().is_empty(),
            "{:?}",
            errors.lock().unwrap()
        );
        // the server sent 1.1 MB: its sender was sampled with a window and an RTT
        let text = String::from_utf8(timeline.0.lock().unwrap().clone()).unwrap();
        let samples: Vec<TimelineSample> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert!(samples.len() >= 2, "{congestion}: {text}");
        assert!(samples.iter().all(|s| s.cwnd_bytes.unwrap() > 0));
        assert!(samples.iter().any(|s| s.rtt_us.is_some_and(|r| r > 0)));
        // every body byte was acknowledged, in packets whose headers, frames and the TLS
        // handshake add a few percent (a 1200-byte packet carries about 1150 bytes of data)
        let acked = samples.iter().filter_map(|s| s.acked_bytes).max().unwrap();
        let body = sizes.iter().sum::<u64>() as f64;
        assert!(
            acked as f64 >= body && (acked as f64) < body * 1.15,
            "{congestion}: {acked} bytes acknowledged for {body} bytes of bodies"
        );
    }
}
