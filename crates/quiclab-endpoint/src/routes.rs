//! The routes every quiclab server serves, whatever carries them (HTTP/1.1 and HTTP/2 over TCP,
//! HTTP/3 over QUIC, the coded transport): which request gets which answer, decided here once,
//! and the `/bytes` pattern their bodies and uploads are made of.
//!
//! - `GET /bytes/N`: exactly N bytes (N in decimal digits, at most [`MAX_BYTES`]) of the pattern
//!   [`pattern_byte`]; a bad N is a 400 with the reason. `GET /bytes/N?delay-us=D` holds the
//!   response D µs (at most [`MAX_DELAY_US`]) after the request arrived ([`held`]): a think time
//!   a plan plants.
//! - `POST /upload`: the body is read to its end and answered with its length in decimal.
//! - `GET` of any other path: a file under the server's root, if it has one ([`crate::files`]).
//! - Anything else: 404.
//!
//! Each server turns a [`Route`] into its own protocol's answer; none matches paths itself.
//! [`PatternBody`] is a `/bytes/N` body (and an upload) as HTTP body frames.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use hyper::body::{Body, Frame, SizeHint};

pub use quiclab_model::task::MAX_BYTES;

/// The period of the `/bytes` pattern: a prime, so that the pattern does not line up with
/// power-of-two record, frame or packet sizes and a misplaced chunk shows up when compared.
pub const PATTERN_PERIOD: u64 = 251;

/// The query parameter that asks a server to hold its response, in µs.
pub const DELAY_PARAM: &str = "delay-us";

/// The longest a server holds a response: 60 s.
pub const MAX_DELAY_US: u64 = 60_000_000;

/// `url` asking its server to hold the response `delay_us` µs (`url` itself for 0).
pub fn with_delay(url: &str, delay_us: u64) -> String {
    if delay_us == 0 {
        return url.to_string();
    }
    let sep = if url.contains('?') { '&' } else { '?' };
    format!("{url}{sep}{DELAY_PARAM}={delay_us}")
}

/// How long a request's query asks the server to hold its response: none without the
/// parameter, or with a value that is not a number of µs up to [`MAX_DELAY_US`].
pub fn held(query: Option<&str>) -> Option<std::time::Duration> {
    query?
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .find(|(k, _)| *k == DELAY_PARAM)
        .and_then(|(_, v)| v.parse::<u64>().ok())
        .filter(|us| *us <= MAX_DELAY_US)
        .map(std::time::Duration::from_micros)
}

/// Byte `i` of every `/bytes/N` body.
pub fn pattern_byte(i: u64) -> u8 {
    (i % PATTERN_PERIOD) as u8
}

/// Fills `buf` with the pattern bytes starting at body offset `offset`.
pub fn fill_pattern(offset: u64, buf: &mut [u8]) {
    let mut v = offset % PATTERN_PERIOD;
    for b in buf {
        *b = v as u8;
        v += 1;
        if v == PATTERN_PERIOD {
            v = 0;
        }
    }
}

/// A body byte that differs from the pattern: where, what came, what the pattern has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mismatch {
    pub offset: u64,
    pub got: u8,
    pub expected: u8,
}

/// The pattern from phase 0, one period longer than [`COMPARE_SLICE`]: any slice of the
/// pattern up to that length starts within its first period.
static COMPARE_PATTERN: std::sync::LazyLock<Vec<u8>> = std::sync::LazyLock::new(|| {
    let mut p = vec![0; COMPARE_SLICE + PATTERN_PERIOD as usize];
    fill_pattern(0, &mut p);
    p
});

/// How many bytes [`first_mismatch`] compares at once (a `memcmp` of the piece against the
/// pattern buffer, many GB/s, where a byte-by-byte `i % 251` manages about one).
const COMPARE_SLICE: usize = 64 * 1024;

/// The first byte of `data`, found at body offset `offset`, that differs from the pattern.
pub fn first_mismatch(offset: u64, data: &[u8]) -> Option<Mismatch> {
    let pattern = &*COMPARE_PATTERN;
    let mut at = offset;
    for piece in data.chunks(COMPARE_SLICE) {
        let phase = (at % PATTERN_PERIOD) as usize;
        let expected = &pattern[phase..phase + piece.len()];
        if piece != expected {
            let i = piece
                .iter()
                .zip(expected)
                .position(|(a, b)| a != b)
                .unwrap_or(0);
            return Some(Mismatch {
                offset: at + i as u64,
                got: piece[i],
                expected: expected[i],
            });
        }
        at += piece.len() as u64;
    }
    None
}

/// Size of the chunks a `/bytes` body is sent in: a whole number of pattern periods (so every
/// chunk starts at phase 0 and is a slice of one shared buffer) just under 64 KiB.
pub const CHUNK: usize = (65_536 / PATTERN_PERIOD as usize) * PATTERN_PERIOD as usize;

/// [`CHUNK`] bytes of the pattern from phase 0: the one buffer a `/bytes` body or an upload is
/// sliced from.
pub fn pattern_chunk() -> Bytes {
    let mut chunk = vec![0; CHUNK];
    fill_pattern(0, &mut chunk);
    chunk.into()
}

/// What a request asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// `GET /bytes/N`: N pattern bytes.
    Bytes(u64),
    /// `POST /upload`: count the body.
    Upload,
    /// `GET` of another path on a server with a root: that file.
    File,
    /// A malformed request for a route (e.g. `/bytes/x`): 400 with this text.
    BadRequest(String),
    /// Nothing here: 404.
    NotFound,
}

/// The route of a request: its method ("GET", "POST", ...) and path, on a server that does or
/// does not serve files.
pub fn route(method: &str, path: &str, serves_files: bool) -> Route {
    match (method, path.strip_prefix("/bytes/")) {
        ("GET", Some(n)) => match parse_size(n) {
            Ok(n) => Route::Bytes(n),
            Err(msg) => Route::BadRequest(msg),
        },
        ("POST", _) if path == "/upload" => Route::Upload,
        ("GET", None) if serves_files => Route::File,
        _ => Route::NotFound,
    }
}

/// How many bytes a GET of `path` must bring back when it succeeds: N for `/bytes/N`, nothing
/// known for any other path (clients check downloads against this).
pub fn expected_bytes(path: &str) -> Option<u64> {
    match route("GET", path, false) {
        Route::Bytes(n) => Some(n),
        _ => None,
    }
}

/// The N of `/bytes/N`: decimal digits only, at most [`MAX_BYTES`].
pub fn parse_size(s: &str) -> Result<u64, String> {
    let too_big = || format!("/bytes/N: N is at most {MAX_BYTES}\n");
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!(
            "/bytes/N: N must be a number of bytes in decimal digits, got {s:?}\n"
        ));
    }
    match s.parse::<u64>() {
        Ok(n) if n <= MAX_BYTES => Ok(n),
        _ => Err(too_big()),
    }
}

/// A `/bytes/N` body: N pattern bytes as slices of one shared chunk, so serving any size
/// allocates nothing per request. Clients upload the same pattern.
pub struct PatternBody {
    remaining: u64,
    sent: u64,
    /// Size of the next write.
    next: usize,
    chunk: Bytes,
}

/// The largest write: a slice of the shared chunk starting at any pattern phase fits.
const LARGEST_WRITE: usize = CHUNK - PATTERN_PERIOD as usize;

impl PatternBody {
    /// `len` pattern bytes from offset 0, each write as large as possible.
    pub fn of_len(len: u64) -> Self {
        PatternBody::new(len, pattern_chunk(), None)
    }

    /// `len` pattern bytes taken from `chunk` (a [`pattern_chunk`]); the first write is
    /// `first_write` bytes (default: the largest), and each later one twice the previous.
    pub fn new(len: u64, chunk: Bytes, first_write: Option<usize>) -> Self {
        PatternBody {
            remaining: len,
            sent: 0,
            next: first_write.unwrap_or(LARGEST_WRITE).clamp(1, LARGEST_WRITE),
            chunk,
        }
    }
}

impl Body for PatternBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        if self.remaining == 0 {
            return Poll::Ready(None);
        }
        let n = self.remaining.min(self.next as u64) as usize;
        // the chunk holds whole periods, so the slice at the current phase continues the pattern
        let phase = (self.sent % PATTERN_PERIOD) as usize;
        let data = self.chunk.slice(phase..phase + n);
        self.sent += n as u64;
        self.remaining -= n as u64;
        self.next = (self.next * 2).min(LARGEST_WRITE);
        Poll::Ready(Some(Ok(Frame::data(data))))
    }

    fn is_end_stream(&self) -> bool {
        self.remaining == 0
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.remaining)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    #[test]
    fn pattern_body_streams_exactly_n_bytes_in_phase() {
        let chunk = pattern_chunk();
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        for first in [None, Some(1200), Some(1)] {
            for n in [0, 1, CHUNK as u64 - 1, CHUNK as u64, 3 * CHUNK as u64 + 7] {
                let mut body = PatternBody::new(n, chunk.clone(), first);
                assert_eq!(body.size_hint().exact(), Some(n));
                let mut bytes = Vec::new();
                let mut writes = Vec::new();
                while let Some(frame) = rt.block_on(body.frame()) {
                    let data = frame.unwrap().into_data().unwrap();
                    writes.push(data.len());
                    bytes.extend_from_slice(&data);
                }
                assert_eq!(bytes.len() as u64, n);
                assert!(
                    bytes
                        .iter()
                        .enumerate()
                        .all(|(i, &b)| b == pattern_byte(i as u64)),
                    "n = {n}, first write {first:?}"
                );
                // writes double from the first size up to the largest, the last may be short
                let start = first.unwrap_or(LARGEST_WRITE);
                for (k, &w) in writes
                    .iter()
                    .enumerate()
                    .take(writes.len().saturating_sub(1))
                {
                    let expected = (start << k.min(20)).min(LARGEST_WRITE);
                    assert_eq!(w, expected, "write {k} of n = {n}, first {first:?}");
                }
            }
        }
    }

    #[test]
    fn pattern_is_i_mod_251_from_any_offset() {
        assert_eq!(pattern_byte(0), 0);
        assert_eq!(pattern_byte(250), 250);
        assert_eq!(pattern_byte(251), 0);
        assert_eq!(pattern_byte(9_999_999_999), (9_999_999_999u64 % 251) as u8);
        for offset in [0, 1, 250, 251, 1_000_003] {
            let mut buf = vec![0xAA; 1000];
            fill_pattern(offset, &mut buf);
            for (i, &b) in buf.iter().enumerate() {
                assert_eq!(b, pattern_byte(offset + i as u64), "offset {offset} + {i}");
            }
        }
    }

    #[test]
    fn the_first_wrong_byte_is_found_wherever_it_is() {
        let mut data = vec![0u8; 200_000];
        fill_pattern(1000, &mut data);
        assert_eq!(first_mismatch(1000, &data), None);
        // in the first piece, on a piece boundary, in a later piece, the last byte
        for at in [0, 17, COMPARE_SLICE - 1, COMPARE_SLICE, 150_000, 199_999] {
            let mut bad = data.clone();
            bad[at] ^= 1;
            let expected = pattern_byte(1000 + at as u64);
            assert_eq!(
                first_mismatch(1000, &bad),
                Some(Mismatch {
                    offset: 1000 + at as u64,
                    got: expected ^ 1,
                    expected,
                }),
                "byte {at}"
            );
        }
        // the right bytes at the wrong offset differ at once
        assert_eq!(first_mismatch(1001, &data).map(|m| m.offset), Some(1001));
    }

    #[test]
    fn sizes_are_plain_decimal_up_to_10_gb() {
        assert_eq!(parse_size("0"), Ok(0));
        assert_eq!(parse_size("5000000"), Ok(5_000_000));
        assert_eq!(parse_size("1000000000000"), Ok(MAX_BYTES));
        assert!(parse_size("1000000000001").unwrap_err().contains("at most"));
        assert!(
            parse_size("99999999999999999999999")
                .unwrap_err()
                .contains("at most")
        );
        for bad in ["", "1k", "-1", "+1", "1.5", " 1"] {
            assert!(
                parse_size(bad).unwrap_err().contains("decimal digits"),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn every_request_has_one_route() {
        assert_eq!(route("GET", "/bytes/1000", false), Route::Bytes(1000));
        assert_eq!(route("GET", "/bytes/0", false), Route::Bytes(0));
        assert!(
            matches!(route("GET", "/bytes/1e3", false), Route::BadRequest(m) if m.contains("decimal"))
        );
        assert!(matches!(
            route("GET", &format!("/bytes/{}", MAX_BYTES + 1), false),
            Route::BadRequest(m) if m.contains("at most")
        ));
        assert_eq!(route("POST", "/upload", false), Route::Upload);
        // an upload is a POST, a download a GET
        assert_eq!(route("GET", "/upload", false), Route::NotFound);
        assert_eq!(route("POST", "/bytes/10", true), Route::NotFound);
        assert_eq!(route("GET", "/index.html", true), Route::File);
        assert_eq!(route("GET", "/index.html", false), Route::NotFound);
        assert_eq!(expected_bytes("/bytes/77"), Some(77));
        assert_eq!(expected_bytes("/bytes/x"), None);
        assert_eq!(expected_bytes("/upload"), None);
    }

    #[test]
    fn a_delay_travels_in_the_query_and_only_a_valid_one_holds_a_response() {
        let url = with_delay("https://198.18.0.2/bytes/1000", 50_000);
        assert_eq!(url, "https://198.18.0.2/bytes/1000?delay-us=50000");
        assert_eq!(
            with_delay("https://h/bytes/1?a=b", 7),
            "https://h/bytes/1?a=b&delay-us=7"
        );
        assert_eq!(with_delay("https://h/bytes/1", 0), "https://h/bytes/1");
        let uri: http::Uri = url.parse().unwrap();
        // the route is the path's: the query does not change what is served
        assert_eq!(route("GET", uri.path(), false), Route::Bytes(1000));
        assert_eq!(
            held(uri.query()),
            Some(std::time::Duration::from_millis(50))
        );
        assert_eq!(
            held(Some("a=b&delay-us=7")),
            Some(std::time::Duration::from_micros(7))
        );
        for none in [
            None,
            Some(""),
            Some("delay-us=x"),
            Some("delay=5"),
            Some("delay-us=60000001"),
        ] {
            assert_eq!(held(none), None, "{none:?}");
        }
    }
}
