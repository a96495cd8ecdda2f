//! The server's side of telemetry: reads units from a connection that negotiated
//! [`ALPN_TELEMETRY`] and logs each with the time it was read.
//!
//! Contract:
//! - Over TCP, the TLS stream's plaintext is one sequence of units; a unit's receive time is
//!   when the read that completed it returned.
//! - Over QUIC, every unidirectional stream the client opens is read to its end, each on its own
//!   task, so that a stream waiting for a retransmission never holds another back; every
//!   datagram is read as a whole number of units. The connection's end (the client closing it)
//!   is the normal end, not an error.
//! - Over QUIC, a client whose stack cannot tell when its data is acknowledged asks instead
//!   (the end-of-run question, `answer_end`): a bidirectional stream carrying the number of
//!   unidirectional streams it opened (8 bytes, big-endian), finished. The answer, once that
//!   many streams were read to their end, is the number of units read so far (8 bytes), and
//!   the end of the stream.
//! - Records go to a [`RecordLog`] as [`ServerRecord`]s: one per unit, and one per connection
//!   when it ends.
//! - [`Receiver`] is how servers speak it: a `TlsService` of the TCP server and a `QuicService`
//!   of the QUIC server.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::task::JoinSet;

use super::{
    ALPN_TELEMETRY, ConnectionEnd, ReceivedUnit, RecordLog, ServerRecord, UNIT_BYTES, UnitDecoder,
};
use quiclab_model::record::now_us;

/// The receiver as a protocol the TCP and QUIC servers also speak (ALPN [`ALPN_TELEMETRY`]):
/// every connection's units go to one log.
#[derive(Clone)]
pub struct Receiver {
    log: RecordLog,
}

impl Receiver {
    pub fn new(log: RecordLog) -> Receiver {
        Receiver { log }
    }
}

impl quiclab_tcp::server::TlsService for Receiver {
    fn name(&self) -> &'static str {
        "telemetry"
    }

    fn alpn(&self) -> &'static [u8] {
        ALPN_TELEMETRY
    }

    fn serve(
        &self,
        tls: tokio_rustls::server::TlsStream<tokio::net::TcpStream>,
        index: u32,
        peer: SocketAddr,
    ) -> quiclab_tcp::server::ServiceFuture {
        let log = self.log.clone();
        Box::pin(async move {
            let end = serve_stream(tls, index, peer, &log).await;
            end.error.map_or(Ok(()), Err)
        })
    }
}

impl quiclab_quic::QuicService for Receiver {
    fn name(&self) -> &'static str {
        "telemetry"
    }

    fn alpn(&self) -> &'static [u8] {
        ALPN_TELEMETRY
    }

    fn serve(&self, conn: quinn::Connection, index: u32) -> quiclab_quic::ServiceFuture {
        let log = self.log.clone();
        Box::pin(async move {
            let end = serve_quic(&conn, index, &log).await;
            end.error.map_or(Ok(()), Err)
        })
    }
}

/// Reads units from a TLS stream (over TCP) until the client closes it.
pub async fn serve_stream<S: AsyncRead + Unpin>(
    mut stream: S,
    connection: u32,
    peer: SocketAddr,
    log: &RecordLog,
) -> ConnectionEnd {
    let mut decoder = UnitDecoder::default();
    let mut buf = vec![0u8; 16 * 1024];
    let mut units = 0u64;
    let mut records = Vec::new();
    let error = loop {
        let n = match stream.read(&mut buf).await {
            Ok(0) => break None,
            Ok(n) => n,
            Err(e) => break Some(format!("reading: {e}")),
        };
        let recv_us = now_us();
        decoder.feed(&buf[..n], |gen_us| {
            records.push(ServerRecord::Unit(ReceivedUnit {
                connection,
                gen_us,
                recv_us,
                stream: None,
                datagram: None,
            }))
        });
        units += records.len() as u64;
        if let Err(e) = log.write_all(std::mem::take(&mut records)) {
            break Some(format!("writing the telemetry log: {e}"));
        }
    };
    let end = ConnectionEnd {
        connection,
        transport: "tcp".into(),
        peer: peer.to_string(),
        units,
        streams: 1,
        datagrams: 0,
        partial_bytes: decoder.pending() as u64,
        error,
    };
    let _ = log.write_all(vec![ServerRecord::Connection(end.clone())]);
    end
}

/// True for the ways a QUIC connection normally ends: the peer closing it (any application
/// code), or this end closing it.
fn normal_end(e: &quinn::ConnectionError) -> bool {
    matches!(
        e,
        quinn::ConnectionError::ApplicationClosed(_) | quinn::ConnectionError::LocallyClosed
    )
}

/// Reads units from every unidirectional stream and datagram of a QUIC connection until it
/// closes.
pub async fn serve_quic(
    conn: &quinn::Connection,
    connection: u32,
    log: &RecordLog,
) -> ConnectionEnd {
    let units = Arc::new(AtomicU64::new(0));
    let partial = Arc::new(AtomicU64::new(0));
    let mut streams: JoinSet<Option<String>> = JoinSet::new();
    // streams read to their end, for the end-of-run question
    let (finished, _) = tokio::sync::watch::channel(0u64);
    let mut answers: JoinSet<()> = JoinSet::new();
    let (mut stream_count, mut datagrams) = (0u64, 0u64);
    let mut error = None;
    loop {
        tokio::select! {
            accepted = conn.accept_uni() => match accepted {
                Ok(s) => {
                    stream_count += 1;
                    let (log, units, partial) = (log.clone(), units.clone(), partial.clone());
                    let finished = finished.clone();
                    streams.spawn(async move {
                        let error = read_stream(s, connection, log, units, partial).await;
                        finished.send_modify(|n| *n += 1);
                        error
                    });
                }
                Err(e) => {
                    if !normal_end(&e) {
                        error = Some(format!("accepting a stream: {e}"));
                    }
                    break;
                }
            },
            datagram = conn.read_datagram() => match datagram {
                Ok(d) => {
                    let recv_us = now_us();
                    let id = datagrams;
                    datagrams += 1;
                    let mut records = Vec::with_capacity(d.len() / UNIT_BYTES);
                    let mut decoder = UnitDecoder::default();
                    decoder.feed(&d, |gen_us| {
                        records.push(ServerRecord::Unit(ReceivedUnit {
                            connection,
                            gen_us,
                            recv_us,
                            stream: None,
                            datagram: Some(id),
                        }))
                    });
                    partial.fetch_add(decoder.pending() as u64, Ordering::Relaxed);
                    units.fetch_add(records.len() as u64, Ordering::Relaxed);
                    if let Err(e) = log.write_all(std::mem::take(&mut records)) {
                        error = Some(format!("writing the telemetry log: {e}"));
                        break;
                    }
                }
                Err(e) => {
                    if !normal_end(&e) {
                        error = Some(format!("reading a datagram: {e}"));
                    }
                    break;
                }
            },
            question = conn.accept_bi() => match question {
                Ok((send, recv)) => {
                    answers.spawn(answer_end(send, recv, finished.subscribe(), units.clone()));
                }
                Err(e) => {
                    if !normal_end(&e) {
                        error = Some(format!("accepting a stream: {e}"));
                    }
                    break;
                }
            },
            Some(done) = streams.join_next(), if !streams.is_empty() => {
                if let Ok(Some(e)) = done {
                    error.get_or_insert(e);
                }
            }
        }
    }
    answers.abort_all();
    while let Some(done) = streams.join_next().await {
        if let Ok(Some(e)) = done {
            error.get_or_insert(e);
        }
    }
    let end = ConnectionEnd {
        connection,
        transport: "quic".into(),
        peer: conn.remote_address().to_string(),
        units: units.load(Ordering::Relaxed),
        streams: stream_count,
        datagrams,
        partial_bytes: partial.load(Ordering::Relaxed),
        error,
    };
    let _ = log.write_all(vec![ServerRecord::Connection(end.clone())]);
    end
}

/// Answers the end-of-run question (see the module's contract) on one bidirectional stream.
async fn answer_end(
    mut send: quinn::SendStream,
    mut recv: quinn::RecvStream,
    mut finished: tokio::sync::watch::Receiver<u64>,
    units: Arc<AtomicU64>,
) {
    let Ok(question) = recv.read_to_end(UNIT_BYTES).await else {
        let _ = send.reset(1u32.into());
        return;
    };
    let Ok(streams) = <[u8; UNIT_BYTES]>::try_from(question.as_slice()) else {
        let _ = send.reset(1u32.into());
        return;
    };
    let streams = u64::from_be_bytes(streams);
    if finished.wait_for(|n| *n >= streams).await.is_err() {
        return;
    }
    let read = units.load(Ordering::Relaxed);
    if send.write_all(&read.to_be_bytes()).await.is_ok() {
        let _ = send.finish();
    }
}

/// Reads one stream to its end; returns what went wrong, if anything.
async fn read_stream(
    mut s: quinn::RecvStream,
    connection: u32,
    log: RecordLog,
    units: Arc<AtomicU64>,
    partial: Arc<AtomicU64>,
) -> Option<String> {
    let id = u64::from(s.id());
    let mut decoder = UnitDecoder::default();
    let mut records = Vec::new();
    let error = loop {
        match s.read_chunk(usize::MAX, true).await {
            Ok(Some(chunk)) => {
                let recv_us = now_us();
                decoder.feed(&chunk.bytes, |gen_us| {
                    records.push(ServerRecord::Unit(ReceivedUnit {
                        connection,
                        gen_us,
                        recv_us,
                        stream: Some(id),
                        datagram: None,
                    }))
                });
                units.fetch_add(records.len() as u64, Ordering::Relaxed);
                if let Err(e) = log.write_all(std::mem::take(&mut records)) {
                    break Some(format!("writing the telemetry log: {e}"));
                }
            }
            Ok(None) => break None,
            // The connection closing with streams still open ends them: the connection's end
            // is reported by the connection.
            Err(quinn::ReadError::ConnectionLost(e)) if normal_end(&e) => break None,
            Err(e) => break Some(format!("reading stream {id}: {e}")),
        }
    };
    partial.fetch_add(decoder.pending() as u64, Ordering::Relaxed);
    error
}
