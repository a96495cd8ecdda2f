//! h3's QUIC traits over quinn for the HTTP/3 server, keeping each response stream's quinn
//! priority in reach (h3-quinn hides the quinn streams, and h3 has no RFC 9218 support).
//!
//! Contract:
//! - [`Connection`] is an h3 transport over a `quinn::Connection`: it accepts and opens streams
//!   and moves bytes as h3-quinn does, with two savings: it reads without copying (see
//!   [`RecvStream`]), and a response's payload that is a slice of the buffer the server named
//!   ([`Connection::with_shared_payload`]) goes to quinn as a reference to that buffer, not as a
//!   copy (h3 hands a frame over only as bytes to read).
//! - Before the first byte of a response (its HEADERS frame) goes into a request stream, the
//!   stream gets the quinn priority [`quinn_priority`] computes from the request's RFC 9218
//!   priority (registered by the request handler in [`Urgencies`] under the stream's id; RFC
//!   9218's default `u=3` when none was registered; none at all when priorities are off) and the
//!   connection's [`Scheduling`]. quinn sends the buffered data of higher priorities first;
//!   among equal priorities it round-robins with `send_fairness` on and drains one stream after
//!   another with it off. A priority must be set before data is buffered (quinn applies a change
//!   only after what is already queued), hence before the HEADERS frame.
//! - [`quinn_priority`] is pure. Urgency comes first. Within an urgency, FIFO gives every
//!   request stream its own level (earlier requests higher); round-robin with priorities
//!   honoured sends non-incremental responses one by one in request order and then shares the
//!   link between the incremental ones (RFC 9218, section 10), and without priorities shares it
//!   between all.
//! - Responses are handed to quinn in request order (see [`Urgencies`]), whatever order the
//!   server's handler tasks run in: quinn can only order what it holds, and without fairness it
//!   finishes whichever stream it began first. A request not yet read (held up by a lost
//!   packet) is waited for at most [`ARRIVAL_WAIT`].

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker, ready};

use bytes::{Buf, Bytes};
use h3::error::Code;
use h3::quic::{self, ConnectionErrorIncoming, StreamErrorIncoming, StreamId, WriteBuf};
use quinn::VarInt;
use tokio_util::sync::ReusableBoxFuture;

use crate::priority::Priority;

/// How the server shares its sending side between response streams.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Scheduling {
    /// Round-robin between streams of one urgency; `false`: one after another, in request order.
    pub round_robin: bool,
    /// Honour the requests' RFC 9218 priorities (urgency, incremental); `false`: every response
    /// alike.
    pub priorities: bool,
}

/// What a connection's request streams share: the priority of each request that has arrived,
/// and the order in which responses are handed to quinn.
///
/// Responses go to quinn in request order. The response to request k waits while an earlier
/// request that has arrived still has its response being written (until it is written whole,
/// abandoned, or waiting for room in quinn's send buffer). For an earlier request that has not
/// been read yet (its stream is open, its handler has not read it) it waits at most
/// [`ARRIVAL_WAIT`]: long enough for the handlers of requests that came together to read
/// theirs on a busy host, short against any round trip, so that a request held up by a lost
/// packet does not hold up the others.
#[derive(Clone, Debug, Default)]
pub struct Urgencies(Arc<Mutex<Shared>>);

#[derive(Debug, Default)]
struct Shared {
    priority: HashMap<u64, Priority>,
    /// Indices of request streams accepted whose request has not been read yet.
    unread: BTreeSet<u64>,
    /// Indices of requests read whose responses are not yet handed to quinn whole.
    unwritten: BTreeSet<u64>,
    /// Responses waiting for their turn.
    waiting: Vec<Waker>,
}

/// How long a response waits for an earlier request to be read.
pub const ARRIVAL_WAIT: std::time::Duration = std::time::Duration::from_millis(2);

#[derive(Debug, PartialEq, Eq)]
enum Turned {
    Wait,
    Unread,
    Go,
}

/// Request stream `id`'s index among the client's bidirectional streams.
fn index_of(id: u64) -> u64 {
    id >> 2
}

impl Urgencies {
    /// The request on stream `id` has been read, with this `priority` header if it had one
    /// (call before its response starts).
    pub fn request(&self, id: u64, priority: Option<Priority>) {
        let mut s = self.lock();
        if let Some(p) = priority {
            s.priority.insert(id, p);
        }
        let index = index_of(id);
        if s.unread.remove(&index) {
            s.unwritten.insert(index);
            for w in s.waiting.drain(..) {
                w.wake();
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Shared> {
        // a poisoned lock only means a handler panicked: the sets are still consistent
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn take(&self, id: u64) -> Option<Priority> {
        self.lock().priority.remove(&id)
    }

    fn accepted(&self, index: u64) {
        self.lock().unread.insert(index);
    }

    /// Whether the response of request `index` may go to quinn now: `Wait` while an earlier
    /// response is being written, `Unread` while an earlier request has not been read (unless
    /// `waited` is past: then it goes), else `Go`. Both waits are woken by what they wait for.
    fn turn(&self, index: u64, waited: bool, cx: &mut Context<'_>) -> Turned {
        let mut s = self.lock();
        if s.unwritten.first().is_some_and(|&first| first < index) {
            s.waiting.push(cx.waker().clone());
            return Turned::Wait;
        }
        if s.unread.first().is_some_and(|&first| first < index) && !waited {
            s.waiting.push(cx.waker().clone());
            return Turned::Unread;
        }
        Turned::Go
    }

    /// Request `index`'s response is with quinn (or abandoned): later ones may go.
    fn written(&self, index: u64) {
        let mut s = self.lock();
        let was = s.unwritten.remove(&index) | s.unread.remove(&index);
        if was {
            for w in s.waiting.drain(..) {
                w.wake();
            }
        }
    }
}

/// Levels between two urgencies: room for half a million request positions within one.
const LEVEL: i32 = 1 << 20;

/// The quinn priority (higher is sent first) of the response to the `index`-th request
/// (client-initiated bidirectional stream number `index`) with RFC 9218 `priority` (`None`:
/// priorities are not honoured).
pub fn quinn_priority(priority: Option<Priority>, index: u64, round_robin: bool) -> i32 {
    let urgency = priority.map_or(Priority::DEFAULT.urgency, |p| p.urgency.min(7));
    // u=3 (the default) sits at quinn's default priority 0, where the control streams are
    let level = (3 - i32::from(urgency)) * LEVEL;
    let position = index.min(LEVEL as u64 / 2 - 1) as i32;
    match (round_robin, priority) {
        (false, _) => level - position,
        (true, None) => level,
        (true, Some(p)) if p.incremental => level,
        // above the incremental ones of its urgency, earlier requests first
        (true, Some(_)) => level + LEVEL / 2 - position,
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
    shared: Option<Bytes>,
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
            shared: None,
        }
    }

    /// The same, sending what a response takes from `shared` (the server's one buffer that
    /// response bodies are sliced from) without copying it.
    pub fn with_shared_payload(mut self, shared: Bytes) -> Self {
        self.shared = Some(shared);
        self
    }

    /// The same, with a request stream the caller already accepted given out first.
    pub fn with_first_stream(mut self, first: (quinn::SendStream, quinn::RecvStream)) -> Self {
        self.accepting_bi = Some(Box::pin(async move { Ok(first) }));
        self
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
        send.shared = self.shared.clone();
        let index = send.stream.id().index();
        self.urgencies.accepted(index);
        send.turn = Some(Turn {
            urgencies: self.urgencies.clone(),
            index,
            deadline: None,
            waited: false,
            admitted: false,
        });
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
    /// The buffer whose slices are written by reference.
    shared: Option<Bytes>,
}

struct Turn {
    urgencies: Urgencies,
    index: u64,
    /// How long it waits for earlier requests to be read, from the first time it did.
    deadline: Option<Pin<Box<tokio::time::Sleep>>>,
    waited: bool,
    admitted: bool,
}

impl<B: Buf> SendStream<B> {
    fn new(stream: quinn::SendStream, prioritize: Option<(Scheduling, Urgencies)>) -> Self {
        SendStream {
            stream,
            writing: None,
            prioritize,
            turn: None,
            shared: None,
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
            loop {
                match t.urgencies.turn(t.index, t.waited, cx) {
                    Turned::Wait => return Poll::Pending,
                    Turned::Unread => {
                        let d = t
                            .deadline
                            .get_or_insert_with(|| Box::pin(tokio::time::sleep(ARRIVAL_WAIT)));
                        ready!(d.as_mut().poll(cx));
                        t.waited = true;
                    }
                    Turned::Go => break,
                }
            }
            t.admitted = true;
        }
        if let Some(data) = &mut self.writing {
            while data.has_remaining() {
                let n = match write_some(&mut self.stream, self.shared.as_ref(), cx, data.chunk()) {
                    Poll::Ready(n) => n.map_err(write_error)?,
                    Poll::Pending => {
                        // quinn's send buffer is full: the order of what it holds is its own
                        // scheduler's now, so the next response need not wait for this one
                        self.release();
                        return Poll::Pending;
                    }
                };
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
            let priority = scheduling
                .priorities
                .then(|| registered.unwrap_or(Priority::DEFAULT));
            // a stream closed meanwhile has nothing left to order
            let _ = self
                .stream
                .set_priority(quinn_priority(priority, id, scheduling.round_robin));
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
        stream_id(self.stream.id())
    }
}

/// The receiving half of a stream. It reads without copying: up to 32 of quinn's
/// received chunks at once (one look at the connection's state for all of them), handed to h3
/// one by one as they are.
pub struct RecvStream {
    id: StreamId,
    /// The stream while no read is under way (a read holds it).
    stream: Option<quinn::RecvStream>,
    reading: ReusableBoxFuture<'static, ChunksRead>,
    /// Room for the chunks of the next read.
    bufs: Vec<Bytes>,
    /// Chunks read and not yet handed over, in stream order.
    ready: VecDeque<Bytes>,
    finished: bool,
    /// A STOP_SENDING asked for while a read held the stream: sent when it returns (or, if no
    /// more data ever comes, when the stream is dropped, which stops it with code 0).
    stop: Option<VarInt>,
}

/// Writes as much of `chunk` as quinn takes now: by reference when it lies in `shared`, else
/// copied.
fn write_some(
    stream: &mut quinn::SendStream,
    shared: Option<&Bytes>,
    cx: &mut Context<'_>,
    chunk: &[u8],
) -> Poll<Result<usize, quinn::WriteError>> {
    match shared.filter(|s| holds(s, chunk)) {
        Some(shared) => {
            let mut bufs = [shared.slice_ref(chunk)];
            // polled once and dropped: quinn's chunk write takes nothing unless it is ready
            // (and wakes this task when there is room)
            let write = std::pin::pin!(stream.write_chunks(&mut bufs));
            write.poll(cx).map_ok(|w| w.bytes)
        }
        None => Pin::new(stream).poll_write(cx, chunk),
    }
}

/// Whether `chunk` is a non-empty part of `buffer`'s memory.
fn holds(buffer: &Bytes, chunk: &[u8]) -> bool {
    let (outer, inner) = (buffer.as_ptr_range(), chunk.as_ptr_range());
    !chunk.is_empty() && outer.start <= inner.start && inner.end <= outer.end
}

/// h3's name for a quinn stream id (quinn's are valid QUIC stream ids, all below 2^62).
fn stream_id(id: quinn::StreamId) -> StreamId {
    StreamId::try_from(u64::from(id)).expect("a QUIC stream id")
}

/// What a read gives back: the stream, the buffers, and how many of them it filled (`None`:
/// the stream is finished).
type ChunksRead = (
    quinn::RecvStream,
    Vec<Bytes>,
    Result<Option<usize>, quinn::ReadError>,
);

/// Chunks read at once.
const READ_CHUNKS: usize = 32;

impl RecvStream {
    fn new(stream: quinn::RecvStream) -> Self {
        RecvStream {
            id: stream_id(stream.id()),
            stream: Some(stream),
            reading: ReusableBoxFuture::new(async { unreachable!("polled before a read") }),
            bufs: Vec::new(),
            ready: VecDeque::new(),
            finished: false,
            stop: None,
        }
    }
}

impl quic::RecvStream for RecvStream {
    type Buf = Bytes;

    fn poll_data(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Result<Option<Bytes>, StreamErrorIncoming>> {
        if let Some(chunk) = self.ready.pop_front() {
            return Poll::Ready(Ok(Some(chunk)));
        }
        if self.finished {
            return Poll::Ready(Ok(None));
        }
        if let Some(mut stream) = self.stream.take() {
            let mut bufs = std::mem::take(&mut self.bufs);
            bufs.resize(READ_CHUNKS, Bytes::new());
            self.reading.set(async move {
                let read = stream.read_chunks(&mut bufs).await;
                (stream, bufs, read)
            });
        }
        let (mut stream, mut bufs, read) = ready!(self.reading.poll(cx));
        if let Some(code) = self.stop.take() {
            let _ = stream.stop(code);
        }
        self.stream = Some(stream);
        let read = read.map_err(read_error);
        if let Ok(Some(n)) = read {
            self.ready.extend(bufs.drain(..n));
        }
        bufs.clear();
        self.bufs = bufs;
        match read? {
            Some(_) => Poll::Ready(Ok(self.ready.pop_front())),
            None => {
                self.finished = true;
                Poll::Ready(Ok(None))
            }
        }
    }

    fn stop_sending(&mut self, error_code: u64) {
        let code = VarInt::from_u64(error_code).unwrap_or(VarInt::MAX);
        match &mut self.stream {
            Some(stream) => {
                let _ = stream.stop(code);
            }
            None => self.stop = Some(code),
        }
    }

    fn recv_id(&self) -> StreamId {
        self.id
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
        let p = |urgency, incremental| {
            Some(Priority {
                urgency,
                incremental,
            })
        };
        // more urgent is always higher, whatever the request order and the incremental flag
        for rr in [false, true] {
            for u in 0..7u8 {
                for (a, b) in [(false, false), (false, true), (true, false), (true, true)] {
                    assert!(
                        quinn_priority(p(u, a), 1000, rr) > quinn_priority(p(u + 1, b), 0, rr),
                        "{u} {rr} {a} {b}"
                    );
                }
            }
        }
        // round-robin: incremental responses of one urgency share a level (quinn interleaves
        // them), as do all responses when priorities are not honoured
        assert_eq!(
            quinn_priority(p(5, true), 0, true),
            quinn_priority(p(5, true), 77, true)
        );
        assert_eq!(
            quinn_priority(None, 0, true),
            quinn_priority(None, 77, true)
        );
        // non-incremental ones go one by one in request order, before the incremental ones
        assert!(quinn_priority(p(5, false), 3, true) > quinn_priority(p(5, false), 4, true));
        assert!(quinn_priority(p(5, false), 900, true) > quinn_priority(p(5, true), 0, true));
        // FIFO: earlier requests first within an urgency, incremental or not
        assert!(quinn_priority(p(5, true), 3, false) > quinn_priority(p(5, false), 4, false));
        assert!(quinn_priority(None, 3, false) > quinn_priority(None, 4, false));
        // RFC 9218's default urgency, shared, is quinn's default priority (control streams)
        assert_eq!(quinn_priority(None, 0, true), 0);
    }

    #[test]
    fn responses_go_in_request_order_without_waiting_for_requests_not_read() {
        let mut cx = Context::from_waker(Waker::noop());
        let u = Urgencies::default();
        for i in 0..5 {
            u.accepted(i);
        }
        let id = |index: u64| index << 2;
        // request 2 was read first; 0 and 1 not yet: 2 waits for them (at most ARRIVAL_WAIT)
        u.request(id(2), None);
        assert_eq!(u.turn(2, false, &mut cx), Turned::Unread);
        // request 1 arrives in the meantime: its response goes first, 2 waits for it
        u.request(
            id(1),
            Some(Priority {
                urgency: 1,
                incremental: false,
            }),
        );
        assert_eq!(u.turn(2, false, &mut cx), Turned::Wait);
        assert_eq!(
            u.turn(1, false, &mut cx),
            Turned::Unread,
            "1 waits for 0 too"
        );
        // request 0 is never read: once 1 has waited its while it goes
        assert_eq!(u.turn(1, true, &mut cx), Turned::Go);
        assert_eq!(
            u.turn(2, true, &mut cx),
            Turned::Wait,
            "1 is still being written"
        );
        u.written(1);
        assert_eq!(u.turn(2, true, &mut cx), Turned::Go);
        // request 3's stream is dropped before it is read: 4 does not wait for it at all
        u.written(3);
        u.written(0);
        u.written(2);
        u.request(id(4), None);
        assert_eq!(u.turn(4, false, &mut cx), Turned::Go);
        assert_eq!(u.take(id(1)).map(|p| p.urgency), Some(1));
        assert_eq!(u.take(id(4)), None, "no header, no priority");
    }
}
