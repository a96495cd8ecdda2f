//! HTTP/3 (the `h3` crate) over s2n-quic: the QUIC traits `h3` asks of a transport
//! (`h3::quic`), over s2n-quic's polled connection handle, stream acceptors and streams.
//!
//! s2n-quic's own adapter (`s2n-quic-h3`) is not published on crates.io, so this is quiclab's.
//! Data `h3` hands a send stream is copied into one `Bytes` chunk and given to s2n-quic, which
//! takes whole chunks (or none, when its send buffer is full: `poll_ready` waits then).

use std::marker::PhantomData;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use bytes::{Buf, Bytes};
use h3::quic::{self, ConnectionErrorIncoming, StreamErrorIncoming, StreamId, WriteBuf};
use s2n_quic::application;
use s2n_quic::connection::{BidirectionalStreamAcceptor, Handle, ReceiveStreamAcceptor};

/// HTTP/3's "no error" code, for a connection that ended cleanly.
const H3_NO_ERROR: u64 = 0x100;

/// An s2n-quic connection as `h3` drives it.
pub struct Connection {
    handle: Handle,
    bidi: BidirectionalStreamAcceptor,
    recv: ReceiveStreamAcceptor,
}

impl Connection {
    pub fn new(conn: s2n_quic::Connection) -> Connection {
        let (handle, acceptor) = conn.split();
        let (bidi, recv) = acceptor.split();
        Connection { handle, bidi, recv }
    }

    /// The connection's handle (to close it, or to ask for its addresses).
    pub fn handle(&self) -> Handle {
        self.handle.clone()
    }
}

fn connection_error(e: s2n_quic::connection::Error) -> ConnectionErrorIncoming {
    use s2n_quic::connection::Error;
    match e {
        Error::Application { error, .. } => ConnectionErrorIncoming::ApplicationClose {
            error_code: u64::from(error),
        },
        Error::Closed { .. } | Error::EndpointClosing { .. } => {
            ConnectionErrorIncoming::ApplicationClose {
                error_code: H3_NO_ERROR,
            }
        }
        Error::IdleTimerExpired { .. } | Error::MaxHandshakeDurationExceeded { .. } => {
            ConnectionErrorIncoming::Timeout
        }
        e => ConnectionErrorIncoming::Undefined(Arc::new(e)),
    }
}

fn stream_error(e: s2n_quic::stream::Error) -> StreamErrorIncoming {
    use s2n_quic::stream::Error;
    match e {
        Error::StreamReset { error, .. } => StreamErrorIncoming::StreamTerminated {
            error_code: u64::from(error),
        },
        Error::ConnectionError { error, .. } => StreamErrorIncoming::ConnectionErrorIncoming {
            connection_error: connection_error(error),
        },
        e => StreamErrorIncoming::Unknown(Box::new(e)),
    }
}

/// A stream accepted or opened after the connection closed: the close, as h3 expects it.
fn closed() -> ConnectionErrorIncoming {
    ConnectionErrorIncoming::ApplicationClose {
        error_code: H3_NO_ERROR,
    }
}

/// An application error code for s2n-quic (codes beyond QUIC's varints become h3's internal
/// error, which they cannot be).
fn app_error(code: u64) -> application::Error {
    application::Error::new(code).unwrap_or_else(|_| {
        application::Error::new(u64::from(h3::error::Code::H3_INTERNAL_ERROR))
            .expect("a small code")
    })
}

fn stream_id(id: u64) -> StreamId {
    StreamId::try_from(id).expect("s2n-quic's stream ids are QUIC varints")
}

impl<B: Buf> quic::Connection<B> for Connection {
    type RecvStream = RecvStream;
    type OpenStreams = OpenStreams;

    fn poll_accept_recv(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Result<RecvStream, ConnectionErrorIncoming>> {
        match ready!(self.recv.poll_accept_receive_stream(cx)) {
            Ok(Some(s)) => Poll::Ready(Ok(RecvStream::new(s))),
            Ok(None) => Poll::Ready(Err(closed())),
            Err(e) => Poll::Ready(Err(connection_error(e))),
        }
    }

    fn poll_accept_bidi(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Result<BidiStream<B>, ConnectionErrorIncoming>> {
        match ready!(self.bidi.poll_accept_bidirectional_stream(cx)) {
            Ok(Some(s)) => Poll::Ready(Ok(BidiStream::new(s))),
            Ok(None) => Poll::Ready(Err(closed())),
            Err(e) => Poll::Ready(Err(connection_error(e))),
        }
    }

    fn opener(&self) -> OpenStreams {
        OpenStreams {
            handle: self.handle.clone(),
        }
    }
}

impl<B: Buf> quic::OpenStreams<B> for Connection {
    type BidiStream = BidiStream<B>;
    type SendStream = SendStream<B>;

    fn poll_open_bidi(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Result<BidiStream<B>, StreamErrorIncoming>> {
        open_bidi(&mut self.handle, cx)
    }

    fn poll_open_send(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Result<SendStream<B>, StreamErrorIncoming>> {
        open_send(&mut self.handle, cx)
    }

    fn close(&mut self, code: h3::error::Code, _reason: &[u8]) {
        self.handle.close(app_error(code.value()));
    }
}

fn open_bidi<B: Buf>(
    handle: &mut Handle,
    cx: &mut Context<'_>,
) -> Poll<Result<BidiStream<B>, StreamErrorIncoming>> {
    match ready!(handle.poll_open_bidirectional_stream(cx)) {
        Ok(s) => Poll::Ready(Ok(BidiStream::new(s))),
        Err(e) => Poll::Ready(Err(StreamErrorIncoming::ConnectionErrorIncoming {
            connection_error: connection_error(e),
        })),
    }
}

fn open_send<B: Buf>(
    handle: &mut Handle,
    cx: &mut Context<'_>,
) -> Poll<Result<SendStream<B>, StreamErrorIncoming>> {
    match ready!(handle.poll_open_send_stream(cx)) {
        Ok(s) => Poll::Ready(Ok(SendStream::new(s))),
        Err(e) => Poll::Ready(Err(StreamErrorIncoming::ConnectionErrorIncoming {
            connection_error: connection_error(e),
        })),
    }
}

/// Opens streams on a connection (h3's request sender holds one).
#[derive(Clone)]
pub struct OpenStreams {
    handle: Handle,
}

impl<B: Buf> quic::OpenStreams<B> for OpenStreams {
    type BidiStream = BidiStream<B>;
    type SendStream = SendStream<B>;

    fn poll_open_bidi(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Result<BidiStream<B>, StreamErrorIncoming>> {
        open_bidi(&mut self.handle, cx)
    }

    fn poll_open_send(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Result<SendStream<B>, StreamErrorIncoming>> {
        open_send(&mut self.handle, cx)
    }

    fn close(&mut self, code: h3::error::Code, _reason: &[u8]) {
        self.handle.close(app_error(code.value()));
    }
}

/// A stream's sending half.
pub struct SendStream<B> {
    stream: s2n_quic::stream::SendStream,
    id: StreamId,
    /// Data h3 handed over that s2n-quic has not taken yet.
    pending: Option<Bytes>,
    _buf: PhantomData<fn(B)>,
}

impl<B> SendStream<B> {
    fn new(stream: s2n_quic::stream::SendStream) -> SendStream<B> {
        SendStream {
            id: stream_id(stream.id()),
            stream,
            pending: None,
            _buf: PhantomData,
        }
    }
}

impl<B: Buf> quic::SendStream<B> for SendStream<B> {
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), StreamErrorIncoming>> {
        if let Some(chunk) = &mut self.pending {
            ready!(self.stream.poll_send(chunk, cx)).map_err(stream_error)?;
            self.pending = None;
        }
        Poll::Ready(Ok(()))
    }

    fn send_data<T: Into<WriteBuf<B>>>(&mut self, data: T) -> Result<(), StreamErrorIncoming> {
        if self.pending.is_some() {
            // h3 waits for poll_ready before it sends more
            return Err(StreamErrorIncoming::Unknown(
                "data sent before the stream was ready for it".into(),
            ));
        }
        let mut buf: WriteBuf<B> = data.into();
        self.pending = Some(buf.copy_to_bytes(buf.remaining()));
        Ok(())
    }

    fn poll_finish(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), StreamErrorIncoming>> {
        ready!(quic::SendStream::<B>::poll_ready(self, cx))?;
        // s2n-quic sends what it holds, then the FIN; dropping the stream later keeps both
        match self.stream.finish() {
            Ok(()) => Poll::Ready(Ok(())),
            // finished already (h3 may finish twice)
            Err(s2n_quic::stream::Error::SendAfterFinish { .. }) => Poll::Ready(Ok(())),
            Err(e) => Poll::Ready(Err(stream_error(e))),
        }
    }

    fn reset(&mut self, reset_code: u64) {
        self.pending = None;
        let _ = self.stream.reset(app_error(reset_code));
    }

    fn send_id(&self) -> StreamId {
        self.id
    }
}

/// A stream's receiving half.
pub struct RecvStream {
    stream: s2n_quic::stream::ReceiveStream,
    id: StreamId,
}

impl RecvStream {
    fn new(stream: s2n_quic::stream::ReceiveStream) -> RecvStream {
        RecvStream {
            id: stream_id(stream.id()),
            stream,
        }
    }
}

impl quic::RecvStream for RecvStream {
    type Buf = Bytes;

    fn poll_data(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Result<Option<Bytes>, StreamErrorIncoming>> {
        self.stream.poll_receive(cx).map_err(stream_error)
    }

    fn stop_sending(&mut self, error_code: u64) {
        let _ = self.stream.stop_sending(app_error(error_code));
    }

    fn recv_id(&self) -> StreamId {
        self.id
    }
}

/// A bidirectional stream: both halves.
pub struct BidiStream<B> {
    send: SendStream<B>,
    recv: RecvStream,
}

impl<B> BidiStream<B> {
    fn new(stream: s2n_quic::stream::BidirectionalStream) -> BidiStream<B> {
        let (recv, send) = stream.split();
        BidiStream {
            send: SendStream::new(send),
            recv: RecvStream::new(recv),
        }
    }
}

impl<B: Buf> quic::SendStream<B> for BidiStream<B> {
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), StreamErrorIncoming>> {
        self.send.poll_ready(cx)
    }

    fn send_data<T: Into<WriteBuf<B>>>(&mut self, data: T) -> Result<(), StreamErrorIncoming> {
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

impl<B: Buf> quic::BidiStream<B> for BidiStream<B> {
    type SendStream = SendStream<B>;
    type RecvStream = RecvStream;

    fn split(self) -> (SendStream<B>, RecvStream) {
        (self.send, self.recv)
    }
}
