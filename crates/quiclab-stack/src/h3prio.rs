//! h3's QUIC traits over quinn for the HTTP/3 server, keeping each response stream's quinn
//! priority in reach (h3-quinn hides the quinn streams, and h3 has no RFC 9218 support).
//!
//! Contract:
//! - [`Connection`] is an h3 transport over a `quinn::Connection`: it accepts and opens streams
//!   and moves bytes exactly as h3-quinn does, and nothing else.
//! - Before the first byte of a response (its HEADERS frame) goes into a request stream, the
//!   stream gets the quinn priority [`quinn_priority`] computes from the request's RFC 9218
//!   urgency (registered by the request handler in [`Urgencies`] under the stream's id; urgency
//!   3, RFC 9218's default, when none was registered or priorities are off) and the
//!   connection's [`Scheduling`]. quinn sends the buffered data of higher priorities first;
//!   among equal priorities it round-robins with `send_fairness` on and drains one stream after
//!   another with it off. A priority must be set before data is buffered (quinn applies a change
//!   only after what is already queued), hence before the HEADERS frame.
//! - [`quinn_priority`] is pure: FIFO gives every request stream its own level below those of
//!   more urgent requests (earlier requests higher).
//! - FIFO also writes responses in request order: quinn without fairness finishes a stream it
//!   has begun to send before any other, whatever their priorities, so the stream that reaches
//!   quinn first wins. A response therefore waits for the responses to every earlier request of
//!   the connection to be written whole (or abandoned) before its first byte goes to quinn; the
//!   order on the wire is then the order of the requests, not the order in which the server's
//!   tasks happened to run. (quinn buffers a whole response at once, up to its send window.)

use std::collections::{BTreeSet, HashMap};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker, ready};

use bytes::{Buf, Bytes};
use h3::error::Code;
use h3::quic::{self, ConnectionErrorIncoming, StreamErrorIncoming, StreamId, WriteBuf};
use quinn::VarInt;

/// How the server shares its sending side between response streams.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Scheduling {
    /// Round-robin between streams of one urgency; `false`: one after another, in request order.
    pub round_robin: bool,
    /// Honour the requests' RFC 9218 urgencies; `false`: every response at urgency 3.
    pub priorities: bool,
}

/// What a connection's request streams share: the urgency of each request whose handler has
/// read its `priority` header, and (FIFO) which responses are still being written.
#[derive(Clone, Debug, Default)]
pub struct Urgencies(Arc<Mutex<Shared>>);

#[derive(Debug, Default)]
struct Shared {
    urgency: HashMap<u64, u8>,
    /// Indices of request streams whose responses are not yet written whole (FIFO only).
    unwritten: BTreeSet<u64>,
    /// Responses waiting for their turn.
    waiting: Vec<Waker>,
}

impl Urgencies {
    /// Records the urgency (0-7) of the request on stream `id` (before its response starts).
    pub fn set(&self, id: u64, urgency: u8) {
        self.lock().urgency.insert(id, urgency.min(7));
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Shared> {
        // a poisoned lock only means a handler panicked: the sets are still consistent
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn take(&self, id: u64) -> Option<u8> {
        self.lock().urgency.remove(&id)
    }

    fn accepted(&self, index: u64) {
        self.lock().unwritten.insert(index);
    }

    /// Whether the response of request `index` may start (every earlier one is written).
    fn poll_turn(&self, index: u64, cx: &mut Context<'_>) -> Poll<()> {
        let mut s = self.lock();
        if s.unwritten.first().is_none_or(|&first| first >= index) {
            return Poll::Ready(());
        }
        s.waiting.push(cx.waker().clone());
        Poll::Pending
    }

    fn written(&self, index: u64) {
        let mut s = self.lock();
        if s.unwritten.remove(&index) {
            for w in s.waiting.drain(..) {
                w.wake();
            }
        }
    }
}

/// Levels between two urgencies: room for a million FIFO positions within one urgency.
const LEVEL: i32 = 1 << 20;

/// The quinn priority (higher is sent first) of the response to the `index`-th request
/// (client-initiated bidirectional stream number `index`) at `urgency` (0 most urgent to 7).
pub fn quinn_priority(urgency: u8, index: u64, round_robin: bool) -> i32 {
    // u=3 (the default) sits at quinn's default priority 0, where the control streams are
    let level = (3 - i32::from(urgency.min(7))) * LEVEL;
    if round_robin {
        level
    } else {
        level - index.min(LEVEL as u64 - 1) as i32
    }
}

fn connection_error(e: quinn::ConnectionError) -> ConnectionErrorIncoming {
    match e {
        quinn::ConnectionError::ApplicationClosed(c) => ConnectionErrorIncoming::ApplicationClose {
            error_code: c.error_code.into_inner(),
        },
        quinn::ConnectionError::TimedOut => ConnectionErrorIncoming::Timeout,
        other => ConnectionErrorIncoming::Undefined(Arc::new(other)),
    }
}

fn stream_error(e: quinn::ConnectionError) -> StreamErrorIncoming {
    StreamErrorIncoming::ConnectionErrorIncoming {
        connection_error: connection_error(e),
    }
}

fn write_error(e: quinn::WriteError) -> StreamErrorIncoming {
    match e {
        quinn::WriteError::Stopped(code) => StreamErrorIncoming::StreamTerminated {
            error_code: code.into_inner(),
        },
        quinn::WriteError::ConnectionLost(e) => stream_error(e),
        other => StreamErrorIncoming::Unknown(Box::new(other)),
    }
}

fn read_error(e: quinn::ReadError) -> StreamErrorIncoming {
    match e {
        quinn::ReadError::Reset(code) => StreamErrorIncoming::StreamTerminated {
            error_code: code.into_inner(),
        },
        quinn::ReadError::ConnectionLost(e) => stream_error(e),
        other => StreamErrorIncoming::Unknown(Box::new(other)),
    }
}

type Pending<T> = Pin<Box<dyn Future<Output = Result<T, quinn::ConnectionError>> + Send + Sync>>;

/// An h3 transport over one quinn connection (server side).
pub struct Connection {
    conn: quinn::Connection,
    scheduling: Scheduling,
    urgencies: Urgencies,
    accepting_bi: Option<Pending<(quinn::SendStream, quinn::RecvStream)>>,
    accepting_uni: Option<Pending<quinn::RecvStream>>,
    opener: Opener,
}

impl Connection {
    pub fn new(conn: quinn::Connection, scheduling: Scheduling, urgencies: Urgencies) -> Self {
        Connection {
            opener: Opener {
                conn: conn.clone(),
                opening_bi: None,
                opening_uni: None,
            },
            conn,
            scheduling,
            urgencies,
            accepting_bi: None,
            accepting_uni: None,
        }
    }
}

/// Opens streams on a connection (h3 opens its control and QPACK streams with it).
pub struct Opener {
    conn: quinn::Connection,
    opening_bi: Option<Pending<(quinn::SendStream, quinn::RecvStream)>>,
    opening_uni: Option<Pending<quinn::SendStream>>,
}

impl<B: Buf> quic::OpenStreams<B> for Opener {
    type SendStream = SendStream<B>;
    type BidiStream = BidiStream<B>;

    fn poll_open_bidi(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Result<Self::BidiStream, StreamErrorIncoming>> {
        let conn = self.conn.clone();
        let fut = self
            .opening_bi
            .get_or_insert_with(|| Box::pin(async move { conn.open_bi().await }));
        let opened = ready!(fut.as_mut().poll(cx));
        self.opening_bi = None;
        let (send, recv) = opened.map_err(stream_error)?;
        Poll::Ready(Ok(BidiStream {
            send: SendStream::new(send, None),
            recv: RecvStream::new(recv),
        }))
    }

    fn poll_open_send(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Result<Self::SendStream, StreamErrorIncoming>> {
        let conn = self.conn.clone();
        let fut = self
            .opening_uni
            .get_or_insert_with(|| Box::pin(async move { conn.open_uni().await }));
        let opened = ready!(fut.as_mut().poll(cx));
        self.opening_uni = None;
        Poll::Ready(Ok(SendStream::new(opened.map_err(stream_error)?, None)))
    }

    fn close(&mut self, code: Code, reason: &[u8]) {
        self.conn.close(
            VarInt::from_u64(code.value()).unwrap_or(VarInt::MAX),
            reason,
        );
    }
}

impl<B: Buf> quic::OpenStreams<B> for Connection {
    type SendStream = SendStream<B>;
    type BidiStream = BidiStream<B>;

    fn poll_open_bidi(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Result<Self::BidiStream, StreamErrorIncoming>> {
        <Opener as quic::OpenStreams<B>>::poll_open_bidi(&mut self.opener, cx)
    }

    fn poll_open_send(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Result<Self::SendStream, StreamErrorIncoming>> {
        <Opener as quic::OpenStreams<B>>::poll_open_send(&mut self.opener, cx)
    }

    fn close(&mut self, code: Code, reason: &[u8]) {
        <Opener as quic::OpenStreams<B>>::close(&mut self.opener, code, reason)
    }
}

impl<B: Buf> quic::Connection<B> for Connection {
    type RecvStream = RecvStream;
    type OpenStreams = Opener;

    fn poll_accept_recv(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Result<Self::RecvStream, ConnectionErrorIncoming>> {
        let conn = self.conn.clone();
        let fut = self
            .accepting_uni
            .get_or_insert_with(|| Box::pin(async move { conn.accept_uni().await }));
        let accepted = ready!(fut.as_mut().poll(cx));
        self.accepting_uni = None;
        Poll::Ready(Ok(RecvStream::new(accepted.map_err(connection_error)?)))
    }

    fn poll_accept_bidi(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Result<Self::BidiStream, ConnectionErrorIncoming>> {
        let conn = self.conn.clone();
        let fut = self
            .accepting_bi
            .get_or_insert_with(|| Box::pin(async move { conn.accept_bi().await }));
        let accepted = ready!(fut.as_mut().poll(cx));
        self.accepting_bi = None;
        let (send, recv) = accepted.map_err(connection_error)?;
        let mut send = SendStream::new(send, Some((self.scheduling, self.urgencies.clone())));
        if !self.scheduling.round_robin {
            let index = send.stream.id().index();
            self.urgencies.accepted(index);
            send.turn = Some(Turn {
                urgencies: self.urgencies.clone(),
                index,
                admitted: false,
            });
        }
        Poll::Ready(Ok(BidiStream {
            send,
            recv: RecvStream::new(recv),
        }))
    }

    fn opener(&self) -> Self::OpenStreams {
        Opener {
            conn: self.conn.clone(),
            opening_bi: None,
            opening_uni: None,
        }
    }
}

/// The sending half of a stream; a request stream's carries what decides its priority until
/// its first write.
pub struct SendStream<B: Buf> {
    stream: quinn::SendStream,
    writing: Option<WriteBuf<B>>,
    prioritize: Option<(Scheduling, Urgencies)>,
    /// FIFO: this response's place in the connection's order.
    turn: Option<Turn>,
}

struct Turn {
    urgencies: Urgencies,
    index: u64,
    admitted: bool,
}

impl<B: Buf> SendStream<B> {
    fn new(stream: quinn::SendStream, prioritize: Option<(Scheduling, Urgencies)>) -> Self {
        SendStream {
            stream,
            writing: None,
            prioritize,
            turn: None,
        }
    }

    /// The response is written whole or abandoned: the next one may go.
    fn release(&mut self) {
        if let Some(t) = self.turn.take() {
            t.urgencies.written(t.index);
        }
    }
}

impl<B: Buf> Drop for SendStream<B> {
    fn drop(&mut self) {
        self.release();
    }
}

impl<B: Buf> quic::SendStream<B> for SendStream<B> {
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), StreamErrorIncoming>> {
        if self.writing.is_some()
            && let Some(t) = &mut self.turn
            && !t.admitted
        {
            ready!(t.urgencies.poll_turn(t.index, cx));
            t.admitted = true;
        }
        if let Some(data) = &mut self.writing {
            while data.has_remaining() {
                let n = ready!(Pin::new(&mut self.stream).poll_write(cx, data.chunk()))
                    .map_err(write_error)?;
                data.advance(n);
            }
        }
        self.writing = None;
        Poll::Ready(Ok(()))
    }

    fn send_data<D: Into<WriteBuf<B>>>(&mut self, data: D) -> Result<(), StreamErrorIncoming> {
        if self.writing.is_some() {
            return Err(StreamErrorIncoming::ConnectionErrorIncoming {
                connection_error: ConnectionErrorIncoming::InternalError(
                    "send_data before the previous write completed".into(),
                ),
            });
        }
        if let Some((scheduling, urgencies)) = self.prioritize.take() {
            let id = self.stream.id().index();
            let registered = urgencies.take(u64::from(self.stream.id()));
            let urgency = registered
                .filter(|_| scheduling.priorities)
                .unwrap_or(crate::page::Priority::DEFAULT.urgency);
            // a stream closed meanwhile has nothing left to order
            let _ = self
                .stream
                .set_priority(quinn_priority(urgency, id, scheduling.round_robin));
        }
        self.writing = Some(data.into());
        Ok(())
    }

    fn poll_finish(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), StreamErrorIncoming>> {
        self.release();
        Poll::Ready(
            self.stream
                .finish()
                .map_err(|e| StreamErrorIncoming::Unknown(Box::new(e))),
        )
    }

    fn reset(&mut self, reset_code: u64) {
        self.release();
        let _ = self
            .stream
            .reset(VarInt::from_u64(reset_code).unwrap_or(VarInt::MAX));
    }

    fn send_id(&self) -> StreamId {
        // quinn's stream ids are valid QUIC stream ids, which are all below 2^62
        StreamId::try_from(u64::from(self.stream.id())).expect("a QUIC stream id")
    }
}

/// The receiving half of a stream.
pub struct RecvStream {
    stream: quinn::RecvStream,
    buf: Box<[u8]>,
}

/// Bytes read from a stream at once (requests and control frames are small).
const READ_BUF: usize = 16 * 1024;

impl RecvStream {
    fn new(stream: quinn::RecvStream) -> Self {
        RecvStream {
            stream,
            buf: vec![0; READ_BUF].into_boxed_slice(),
        }
    }
}

impl quic::RecvStream for RecvStream {
    type Buf = Bytes;

    fn poll_data(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Result<Option<Bytes>, StreamErrorIncoming>> {
        let n = ready!(self.stream.poll_read(cx, &mut self.buf)).map_err(read_error)?;
        // zero bytes into a non-empty buffer: the peer finished the stream
        Poll::Ready(Ok((n > 0).then(|| Bytes::copy_from_slice(&self.buf[..n]))))
    }

    fn stop_sending(&mut self, error_code: u64) {
        let _ = self
            .stream
            .stop(VarInt::from_u64(error_code).unwrap_or(VarInt::MAX));
    }

    fn recv_id(&self) -> StreamId {
        StreamId::try_from(u64::from(self.stream.id())).expect("a QUIC stream id")
    }
}

/// Both halves of a bidirectional stream.
pub struct BidiStream<B: Buf> {
    send: SendStream<B>,
    recv: RecvStream,
}

impl<B: Buf> quic::BidiStream<B> for BidiStream<B> {
    type SendStream = SendStream<B>;
    type RecvStream = RecvStream;

    fn split(self) -> (SendStream<B>, RecvStream) {
        (self.send, self.recv)
    }
}

impl<B: Buf> quic::RecvStream for BidiStream<B> {
    type Buf = Bytes;

    fn poll_data(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Result<Option<Bytes>, StreamErrorIncoming>> {
        self.recv.poll_data(cx)
    }

    fn stop_sending(&mut self, error_code: u64) {
        self.recv.stop_sending(error_code)
    }

    fn recv_id(&self) -> StreamId {
        self.recv.recv_id()
    }
}

impl<B: Buf> quic::SendStream<B> for BidiStream<B> {
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), StreamErrorIncoming>> {
        self.send.poll_ready(cx)
    }

    fn send_data<D: Into<WriteBuf<B>>>(&mut self, data: D) -> Result<(), StreamErrorIncoming> {
        self.send.send_data(data)
    }

    fn poll_finish(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), StreamErrorIncoming>> {
        self.send.poll_finish(cx)
    }

    fn reset(&mut self, reset_code: u64) {
        self.send.reset(reset_code)
    }

    fn send_id(&self) -> StreamId {
        self.send.send_id()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urgency_orders_first_then_request_order_or_fairness() {
        // more urgent is always higher, whatever the request order
        for rr in [false, true] {
            for u in 0..7u8 {
                assert!(
                    quinn_priority(u, 1000, rr) > quinn_priority(u + 1, 0, rr),
                    "{u} {rr}"
                );
            }
        }
        // round-robin: one level per urgency, so quinn interleaves equal urgencies
        assert_eq!(quinn_priority(5, 0, true), quinn_priority(5, 77, true));
        // FIFO: earlier requests first within an urgency
        assert!(quinn_priority(5, 3, false) > quinn_priority(5, 4, false));
        // RFC 9218's default urgency is quinn's default priority (control streams)
        assert_eq!(quinn_priority(3, 0, true), 0);
        assert!(quinn_priority(3, 1, false) < 0);
    }

    #[test]
    fn fifo_turns_follow_request_order_and_survive_abandoned_responses() {
        let mut cx = Context::from_waker(Waker::noop());
        let u = Urgencies::default();
        for i in 0..4 {
            u.accepted(i);
        }
        // the handler of request 2 runs first: it waits for 0 and 1
        assert!(u.poll_turn(2, &mut cx).is_pending());
        assert!(u.poll_turn(0, &mut cx).is_ready());
        u.written(0);
        assert!(u.poll_turn(2, &mut cx).is_pending());
        // request 1's response is abandoned (its stream dropped): 2 goes
        u.written(1);
        assert!(u.poll_turn(2, &mut cx).is_ready());
        assert!(u.poll_turn(3, &mut cx).is_pending());
        u.written(2);
        assert!(u.poll_turn(3, &mut cx).is_ready());
        assert_eq!(u.lock().waiting.len(), 0, "every waiter was woken");
    }
}
