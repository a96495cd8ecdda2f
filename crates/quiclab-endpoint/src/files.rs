//! Static files under a root directory (`quiclab serve --root`), the same for every HTTP
//! version.
//!
//! Contract: a request path maps to a file under the root and never outside it. The path is
//! percent-decoded, then any `..` segment, backslash or NUL is refused; the file found is then
//! resolved (symbolic links followed) and must still be under the resolved root. A directory
//! serves its `index.html`. Only regular files are served (a FIFO or a device under the root
//! is not found: opening one could block a reader for ever), and they are streamed in chunks of
//! [`CHUNK`] bytes, never read whole into memory.

use std::os::unix::fs::OpenOptionsExt;
use std::path::{Component, Path, PathBuf};
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use hyper::body::{Body, Frame, SizeHint};
use tokio::io::{AsyncRead, AsyncReadExt, ReadBuf};

/// Bytes read from a file per write.
pub const CHUNK: usize = 64 * 1024;

/// What a request path found under the root.
#[derive(Debug)]
pub enum Lookup {
    Found {
        /// The open file (a regular one), to stream from.
        file: std::fs::File,
        /// Its length when opened: what the response promises.
        len: u64,
        content_type: &'static str,
    },
    NotFound,
    /// The path tried to leave the root.
    Forbidden,
}

/// Looks `request_path` (as in the URL, without the query) up under `root`. Reads the disk:
/// call it where blocking is allowed.
pub fn lookup(root: &Path, request_path: &str) -> Lookup {
    let Some(decoded) = percent_decode(request_path) else {
        return Lookup::Forbidden;
    };
    let mut rel = PathBuf::new();
    for seg in decoded.split('/') {
        match seg {
            "" | "." => {}
            ".." => return Lookup::Forbidden,
            s if s.contains('\\') || s.contains('\0') => return Lookup::Forbidden,
            s => rel.push(s),
        }
    }
    // Only plain names remain; a Windows-style prefix or root cannot appear on Linux, but make
    // the invariant explicit.
    if rel.components().any(|c| !matches!(c, Component::Normal(_))) {
        return Lookup::Forbidden;
    }
    let (Ok(root), Ok(mut file)) = (root.canonicalize(), root.join(&rel).canonicalize()) else {
        return Lookup::NotFound;
    };
    if !file.starts_with(&root) {
        return Lookup::Forbidden;
    }
    if file.is_dir() {
        file.push("index.html");
    }
    // non-blocking: opening a FIFO would otherwise wait for a writer
    let opened = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(&file);
    let Ok(f) = opened else {
        return Lookup::NotFound;
    };
    match f.metadata() {
        Ok(m) if m.is_file() => Lookup::Found {
            file: f,
            len: m.len(),
            content_type: content_type(&file),
        },
        _ => Lookup::NotFound,
    }
}

/// Reads the next chunk of at most `remaining` bytes (empty at the end of the file).
pub async fn next_chunk(
    file: &mut tokio::fs::File,
    remaining: u64,
    buf: &mut [u8],
) -> std::io::Result<Bytes> {
    let want = buf
        .len()
        .min(usize::try_from(remaining).unwrap_or(usize::MAX));
    let n = file.read(&mut buf[..want]).await?;
    Ok(Bytes::copy_from_slice(&buf[..n]))
}

/// A response body streaming a found file's first `len` bytes in chunks of [`CHUNK`] (a file
/// that shrank meanwhile ends the body early: the client sees it short).
pub struct FileBody {
    file: tokio::fs::File,
    remaining: u64,
    buf: Box<[u8]>,
}

impl FileBody {
    pub fn new(file: std::fs::File, len: u64) -> Self {
        FileBody {
            file: tokio::fs::File::from_std(file),
            remaining: len,
            buf: vec![0; CHUNK].into_boxed_slice(),
        }
    }
}

impl Body for FileBody {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
        if self.remaining == 0 {
            return Poll::Ready(None);
        }
        let this = &mut *self;
        let want = this
            .buf
            .len()
            .min(usize::try_from(this.remaining).unwrap_or(usize::MAX));
        let mut rb = ReadBuf::new(&mut this.buf[..want]);
        match Pin::new(&mut this.file).poll_read(cx, &mut rb) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Err(e)) => Poll::Ready(Some(Err(e))),
            Poll::Ready(Ok(())) if rb.filled().is_empty() => {
                this.remaining = 0;
                Poll::Ready(None)
            }
            Poll::Ready(Ok(())) => {
                let data = Bytes::copy_from_slice(rb.filled());
                this.remaining -= data.len() as u64;
                Poll::Ready(Some(Ok(Frame::data(data))))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.remaining == 0
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.remaining)
    }
}

fn percent_decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = std::str::from_utf8(b.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

fn content_type(path: &Path) -> &'static str {
    match path.extension().and_then(|e| e.to_str()).unwrap_or("") {
        "html" | "htm" => "text/html; charset=utf-8",
        "css" => "text/css",
        "js" => "text/javascript",
        "json" => "application/json",
        "txt" => "text/plain; charset=utf-8",
        "svg" => "image/svg+xml",
        "png" => "image/png",
        "jpg" | "jpeg" => "image/jpeg",
        "gif" => "image/gif",
        "webp" => "image/webp",
        "ttf" => "font/ttf",
        "woff2" => "font/woff2",
        "m3u8" => "application/vnd.apple.mpegurl",
        "ts" => "video/mp2t",
        _ => "application/octet-stream",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_under_the_root_only() {
        let base = std::env::temp_dir().join(format!("quiclab-files-{}", std::process::id()));
        let root = base.join("root");
        std::fs::create_dir_all(root.join("sub dir")).unwrap();
        std::fs::write(root.join("index.html"), "<p>home</p>").unwrap();
        std::fs::write(root.join("sub dir/a.css"), "p{}").unwrap();
        std::fs::write(base.join("secret"), "no").unwrap();
        std::os::unix::fs::symlink(base.join("secret"), root.join("link")).unwrap();

        let found = |p: &str| match lookup(&root, p) {
            Lookup::Found {
                mut file,
                len,
                content_type,
            } => {
                let mut body = Vec::new();
                std::io::Read::read_to_end(&mut file, &mut body).unwrap();
                assert_eq!(body.len() as u64, len);
                (Bytes::from(body), content_type)
            }
            other => panic!("{p}: {other:?}"),
        };
        let missing = |p: &str| matches!(lookup(&root, p), Lookup::NotFound);
        let forbidden = |p: &str| matches!(lookup(&root, p), Lookup::Forbidden);
        assert_eq!(found("/").0, Bytes::from("<p>home</p>"));
        assert_eq!(found("/index.html").1, "text/html; charset=utf-8");
        assert_eq!(found("/sub%20dir/a.css"), (Bytes::from("p{}"), "text/css"));
        assert_eq!(found("/./sub dir//a.css").0, Bytes::from("p{}"));
        assert!(missing("/missing"));
        // a FIFO is not a file to serve: not found, at once (opening it would wait)
        let fifo = root.join("pipe");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
        let t = std::time::Instant::now();
        assert!(missing("/pipe"));
        assert!(t.elapsed() < std::time::Duration::from_secs(1));
        for bad in [
            "/../secret",
            "/sub%20dir/../../secret",
            "/%2e%2e/secret",
            "/a\\b",
            "/link",
            "/%zz",
        ] {
            assert!(forbidden(bad), "{bad}");
        }
        std::fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn a_file_streams_in_chunks_of_its_promised_length() {
        use http_body_util::BodyExt;
        let base = std::env::temp_dir().join(format!("quiclab-files-big-{}", std::process::id()));
        std::fs::create_dir_all(&base).unwrap();
        let data: Vec<u8> = (0..CHUNK * 3 + 17).map(|i| (i % 251) as u8).collect();
        std::fs::write(base.join("big.bin"), &data).unwrap();
        let Lookup::Found { file, len, .. } = lookup(&base, "/big.bin") else {
            panic!("found");
        };
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let frames = rt.block_on(async {
            let mut body = FileBody::new(file, len);
            let mut frames = Vec::new();
            while let Some(f) = body.frame().await {
                frames.push(f.unwrap().into_data().unwrap());
            }
            frames
        });
        assert!(frames.iter().all(|f| f.len() <= CHUNK));
        assert_eq!(frames.len(), 4);
        assert_eq!(frames.concat(), data);
        std::fs::remove_dir_all(&base).unwrap();
    }
}
