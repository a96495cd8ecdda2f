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

/// Run through sudo (SUDO_GID set), a campaign's directory is its invoking group's to read and
/// write: a user of that group (not root) renders the report, exports the results and reads the
/// database read-only.
#[test]
fn the_invoking_users_group_reads_and_renders_what_root_ran() {
    common::assert_root();
    let dir = common::TempDir::new("shared");
    let plan = dir.join("plan.toml");
    std::fs::write(&plan, PLAN).unwrap();
    let out = dir.join("out");
    let (uid, gid) = ("54321", "54321");
    let st = common::quiclab()
        .env("SUDO_GID", gid)
        .args(["run", plan.to_str().unwrap(), "--out"])
        .arg(&out)
        .status()
        .unwrap();
    assert!(st.success(), "{st}");
    // the test's directory itself is root's alone: let others pass through it
    std::fs::set_permissions(&*dir, std::fs::Permissions::from_mode(0o711)).unwrap();
    let as_user = |args: &[&str]| {
        std::process::Command::new("setpriv")
            .args(["--reuid", uid, "--regid", gid, "--clear-groups", "--"])
            .arg(env!("CARGO_BIN_EXE_quiclab"))
            .args(args)
            .output()
            .unwrap()
    };
    let o = out.to_str().unwrap();
    for args in [vec!["report", o], vec!["export", o]] {
        let r = as_user(&args);
        assert!(
            r.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&r.stderr)
        );
    }
    let csv = std::fs::read_to_string(out.join("export/trials.csv")).unwrap();
    assert!(csv.lines().count() > 1, "{csv}");
    // and a user outside the group is refused
    let r = std::process::Command::new("setpriv")
        .args([
            "--reuid",
            "54322",
            "--regid",
            "54322",
            "--clear-groups",
            "--",
        ])
        .arg(env!("CARGO_BIN_EXE_quiclab"))
        .args(["report", o])
        .output()
        .unwrap();
    assert!(!r.status.success());
}
