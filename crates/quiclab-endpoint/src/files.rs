//! Static files under a root directory (`quiclab serve --root`), the same for every HTTP
//! version.
//!
//! Contract: a request path maps to a file under the root and never outside it. The path is
//! percent-decoded, then any `..` segment, backslash or NUL is refused; the file found is then
//! resolved (symbolic links followed) and must still be under the resolved root. A directory
//! serves its `index.html`. Files are read whole into memory.

use std::path::{Component, Path, PathBuf};

use bytes::Bytes;

/// What a request path found under the root.
#[derive(Debug, PartialEq, Eq)]
pub enum Lookup {
    Found {
        body: Bytes,
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
    match std::fs::read(&file) {
        Ok(body) => Lookup::Found {
            body: body.into(),
            content_type: content_type(&file),
        },
        Err(_) => Lookup::NotFound,
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
            Lookup::Found { body, content_type } => (body, content_type),
            other => panic!("{p}: {other:?}"),
        };
        assert_eq!(found("/").0, Bytes::from("<p>home</p>"));
        assert_eq!(found("/index.html").1, "text/html; charset=utf-8");
        assert_eq!(found("/sub%20dir/a.css"), (Bytes::from("p{}"), "text/css"));
        assert_eq!(found("/./sub dir//a.css").0, Bytes::from("p{}"));
        assert_eq!(lookup(&root, "/missing"), Lookup::NotFound);
        for bad in [
            "/../secret",
            "/sub%20dir/../../secret",
            "/%2e%2e/secret",
            "/a\\b",
            "/link",
            "/%zz",
        ] {
            assert_eq!(lookup(&root, bad), Lookup::Forbidden, "{bad}");
        }
        std::fs::remove_dir_all(&base).unwrap();
    }
}
