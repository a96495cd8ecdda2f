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

/// A test's directory ([`tmpdir`]), removed when the test ends, passed or failed.
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new(name: &str) -> TempDir {
        TempDir(tmpdir(name))
    }
}

impl std::ops::Deref for TempDir {
    type Target = std::path::Path;
    fn deref(&self) -> &std::path::Path {
        &self.0
    }
}

impl AsRef<std::path::Path> for TempDir {
    fn as_ref(&self) -> &std::path::Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Runs `quiclab link` with `args`, `server` and `client` (shell commands), waiting up to 10 s
/// for the server; checks that it exits with `code` and returns its standard output and standard
/// error (where the link's report goes).
pub fn link_output(args: &[&str], server: &str, client: &str, code: i32) -> (String, String) {
    let out = quiclab()
        .arg("link")
        .args(args)
        .args(["--wait", "10s", "--server", server, "--client", client])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(
        out.status.code(),
        Some(code),
        "stdout:\n{stdout}\nstderr:\n{stderr}"
    );
    (stdout, stderr)
}

/// [`link_output`]'s standard output.
pub fn link_exit(args: &[&str], server: &str, client: &str, code: i32) -> String {
    link_output(args, server, client, code).0
}

/// [`link_exit`] for a client that must succeed.
pub fn link(args: &[&str], server: &str, client: &str) -> String {
    link_exit(args, server, client, 0)
}

/// The JSON records (lines starting with `{`) of an output.
pub fn json_lines(stdout: &str) -> Vec<serde_json::Value> {
    stdout
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The median of some values (the mean of the middle two for an even count).
pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Writes `plan` (TOML) to a fresh directory named after `name`, runs `quiclab run` on it with
/// `args` into `DIR/out`, checks that it succeeded, and returns (DIR, DIR/out); DIR is removed
/// when the test ends, passed or failed.
pub fn run_plan(name: &str, plan: &str, args: &[&str]) -> (TempDir, PathBuf) {
    let dir = TempDir::new(name);
    let file = dir.join("plan.toml");
    std::fs::write(&file, plan).unwrap();
    let out = dir.join("out");
    let st = quiclab()
        .args([
            "run",
            file.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ])
        .args(args)
        .status()
        .unwrap();
    assert!(st.success(), "quiclab run {name}: {st}");
    (dir, out)
}
