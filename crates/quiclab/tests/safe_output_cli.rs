//! quiclab runs as root: a file another user placed must never redirect its writes (as root:
//! the tests make directories owned by another user, and run a trial in namespaces).

use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::Path;
use std::time::{Duration, Instant};

mod common;

const PLAN: &str = "name = \"safe\"\niterations = 1\n[workload]\nkind = \"single-object\"\n\
                    sizes = [\"10KB\"]\n[network]\ndelay = \"5ms\"\n[arms.h2]\nhttp = \"2\"\n";

/// A root-only file the attacker wants overwritten.
fn victim(dir: &Path) -> std::path::PathBuf {
    let v = dir.join("victim");
    std::fs::write(&v, b"precious").unwrap();
    std::fs::set_permissions(&v, std::fs::Permissions::from_mode(0o600)).unwrap();
    v
}

/// `quiclab run PLAN --out OUT` expected to be refused: its standard error.
fn refused(plan: &Path, out: &Path) -> String {
    let o = common::quiclab()
        .args(["run", plan.to_str().unwrap(), "--out"])
        .arg(out)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    assert_eq!(o.status.code(), Some(2), "{err}");
    err
}

#[test]
fn another_users_output_directory_is_refused_and_links_in_ours_are_replaced_not_followed() {
    common::assert_root();
    let dir = common::TempDir::new("safe-output");
    let plan = dir.join("plan.toml");
    std::fs::write(&plan, PLAN).unwrap();
    let v = victim(&dir);

    // a directory "nobody" owns, with report.html pointing at the victim: refused, untouched
    let theirs = dir.join("theirs");
    std::fs::create_dir(&theirs).unwrap();
    symlink(&v, theirs.join("report.html")).unwrap();
    std::os::unix::fs::chown(&theirs, Some(65534), Some(65534)).unwrap();
    let err = refused(&plan, &theirs);
    assert!(err.contains("belongs to user 65534"), "{err}");
    assert_eq!(std::fs::read(&v).unwrap(), b"precious");

    // our own directory: the campaign runs; the link at report.html is replaced, the victim kept
    let ours = dir.join("ours");
    std::fs::create_dir(&ours).unwrap();
    symlink(&v, ours.join("report.html")).unwrap();
    let st = common::quiclab()
        .args(["run", plan.to_str().unwrap(), "--out"])
        .arg(&ours)
        .status()
        .unwrap();
    assert!(st.success(), "{st}");
    assert_eq!(std::fs::read(&v).unwrap(), b"precious");
    let report = std::fs::symlink_metadata(ours.join("report.html")).unwrap();
    assert!(report.file_type().is_file() && report.len() > 1000);

    // a link where the database would be is refused before it is opened
    let db_link = dir.join("db-link");
    std::fs::create_dir(&db_link).unwrap();
    symlink(&v, db_link.join("results.db")).unwrap();
    let err = refused(&plan, &db_link);
    assert!(err.contains("results.db: is a symbolic link"), "{err}");
    assert_eq!(std::fs::read(&v).unwrap(), b"precious");
}

#[test]
fn serve_replaces_a_link_at_its_certificate_path_instead_of_writing_through_it() {
    common::assert_root();
    let dir = common::TempDir::new("safe-cert");
    let v = victim(&dir);
    let cert = dir.join("cert.pem");
    symlink(&v, &cert).unwrap();
    // loopback only, an ephemeral port
    let mut serve = common::quiclab()
        .args(["serve", "--listen", "127.0.0.1:0", "--write-cert"])
        .arg(&cert)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let until = Instant::now() + Duration::from_secs(10);
    while std::fs::symlink_metadata(&cert).is_ok_and(|m| m.file_type().is_symlink()) {
        assert!(Instant::now() < until, "no certificate written");
        std::thread::sleep(Duration::from_millis(20));
    }
    serve.kill().unwrap();
    serve.wait().unwrap();
    assert_eq!(std::fs::read(&v).unwrap(), b"precious");
    let pem = std::fs::read_to_string(&cert).unwrap();
    assert!(pem.starts_with("-----BEGIN CERTIFICATE-----"), "{pem}");
}
