//! Reading the files a user hands quiclab: plans, link traces, stack files, page manifests and
//! HARs. One reader for all of them: a regular file (or a link to one) only, never more than a
//! stated number of bytes. A FIFO, a device, a socket or a directory is refused by name, without
//! waiting on it (it is opened without blocking) or reading it forever; a file that grows past
//! its limit while it is read is refused too.

use std::io::Read;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;

/// The largest plan, stack file or TOML page manifest read: far beyond any real one.
pub const MAX_TEXT_BYTES: u64 = 16 << 20;

/// The largest HAR read: a browser's capture of a heavy page, bodies left out, is a few MB.
pub const MAX_HAR_BYTES: u64 = 256 << 20;

/// An input file that was not read: which, and why.
#[derive(Debug, thiserror::Error)]
#[error("{path}: {why}")]
pub struct InputError {
    pub path: String,
    pub why: Why,
}

/// Why an input file was not read.
#[derive(Debug, thiserror::Error)]
pub enum Why {
    #[error("{0}")]
    Io(std::io::Error),
    #[error("{kind}, not a regular file; allowed: {what} as a regular file")]
    NotAFile {
        kind: &'static str,
        what: &'static str,
    },
    #[error("more than {}; allowed: {what} of at most {}", bytes(*.max), bytes(*.max))]
    TooLarge { max: u64, what: &'static str },
    #[error("not UTF-8 text; allowed: {what} as UTF-8 text")]
    NotText { what: &'static str },
}

/// A limit as people write it: "256 MiB", "100 bytes".
fn bytes(n: u64) -> String {
    if n >= 1 << 20 && n.is_multiple_of(1 << 20) {
        format!("{} MiB", n >> 20)
    } else {
        format!("{n} bytes")
    }
}

/// The bytes of `path`, `what` it should be (for errors: "a plan"), at most `max` of them.
pub fn read(path: &Path, what: &'static str, max: u64) -> Result<Vec<u8>, InputError> {
    let fail = |why| InputError {
        path: path.display().to_string(),
        why,
    };
    // O_NONBLOCK: opening a FIFO for reading would wait for a writer
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| fail(Why::Io(e)))?;
    // the opened file's own type: a path swapped after a check cannot slip another in
    let meta = f.metadata().map_err(|e| fail(Why::Io(e)))?;
    let t = meta.file_type();
    if !t.is_file() {
        let kind = if t.is_dir() {
            "a directory"
        } else if t.is_fifo() {
            "a FIFO"
        } else if t.is_char_device() || t.is_block_device() {
            "a device"
        } else if t.is_socket() {
            "a socket"
        } else {
            "a special file"
        };
        return Err(fail(Why::NotAFile { kind, what }));
    }
    if meta.len() > max {
        return Err(fail(Why::TooLarge { max, what }));
    }
    // a file that grows while it is read is cut at the limit, and refused
    let mut bytes = Vec::new();
    f.take(max + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| fail(Why::Io(e)))?;
    if bytes.len() as u64 > max {
        return Err(fail(Why::TooLarge { max, what }));
    }
    Ok(bytes)
}

/// [`read`] as UTF-8 text.
pub fn read_text(path: &Path, what: &'static str, max: u64) -> Result<String, InputError> {
    String::from_utf8(read(path, what, max)?).map_err(|_| InputError {
        path: path.display().to_string(),
        why: Why::NotText { what },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_regular_files_within_the_limit_are_read() {
        let d = std::env::temp_dir().join(format!("quiclab-input-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        let file = d.join("plan.toml");
        std::fs::write(&file, "name = \"x\"\n").unwrap();
        assert_eq!(read_text(&file, "a plan", 100).unwrap(), "name = \"x\"\n");
        // one byte over: refused, and the message names the file, the limit and the kind
        let e = read(&file, "a plan", 10).unwrap_err().to_string();
        assert!(
            e.contains("plan.toml") && e.contains("at most 10 bytes"),
            "{e}"
        );
        // a FIFO is refused at once, not waited on
        let fifo = d.join("fifo.toml");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: mkfifo reads a NUL-terminated path we own.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let e = read(&fifo, "a plan", 100).unwrap_err().to_string();
        assert!(e.contains("a FIFO, not a regular file"), "{e}");
        // a link to a device that never ends, and a directory
        let zero = d.join("zero.toml");
        std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();
        let e = read(&zero, "a stack file", 100).unwrap_err().to_string();
        assert!(e.contains("a device"), "{e}");
        let e = read(&d, "a plan", 100).unwrap_err().to_string();
        assert!(e.contains("a directory"), "{e}");
        // text must be text
        std::fs::write(&file, [0xff, 0xfe]).unwrap();
        let e = read_text(&file, "a plan", 100).unwrap_err();
        assert!(matches!(e.why, Why::NotText { .. }), "{e}");
        let _ = std::fs::remove_dir_all(&d);
    }
}
