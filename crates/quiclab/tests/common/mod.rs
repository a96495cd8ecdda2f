//! Helpers shared by the command-line tests.
// Each test binary uses its own subset of these.
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::Command;

/// The quiclab binary under test.
pub const QUICLAB: &str = env!("CARGO_BIN_EXE_quiclab");

pub fn quiclab() -> Command {
    Command::new(QUICLAB)
}

/// These tests create network namespaces: they must run as root, and fail (never skip) if not.
pub fn assert_root() {
    assert!(
        // SAFETY: geteuid cannot fail.
        unsafe { libc::geteuid() } == 0,
        "these tests create network namespaces and must run as root"
    );
}

/// An empty directory of this test process.
pub fn tmpdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("quiclab-test-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}
