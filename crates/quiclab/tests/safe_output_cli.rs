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

/// Every entry under `dir`, as relative paths (links not followed).
fn tree(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            out.push(p.strip_prefix(dir).unwrap().display().to_string());
            if std::fs::symlink_metadata(&p).unwrap().is_dir() {
                todo.push(p);
            }
        }
    }
    out.sort();
    out
}

/// A directory above the output that the invoking user's group may write (allowed: quiclab
/// shares results with that group) lets a member of the group, another uid, move the output
/// away mid-run and put a directory in its place whose `trials` leads to a root-only
/// directory. quiclab keeps creating and deleting in the directory it opened: nothing outside
/// it is created or deleted, and the campaign finishes there.
#[test]
fn a_swap_of_the_output_by_another_user_mid_run_redirects_no_create_or_delete() {
    common::assert_root();
    let dir = common::TempDir::new("swap");
    std::fs::set_permissions(&*dir, std::fs::Permissions::from_mode(0o711)).unwrap();
    let plan = dir.join("plan.toml");
    let trials = 8;
    std::fs::write(
        &plan,
        format!(
            "name = \"swap\"\niterations = {trials}\n[workload]\nkind = \"single-object\"\n\
             sizes = [\"100KB\"]\n[network]\ndelay = \"5ms\"\nrate = \"4Mbit\"\n\
             [arms.h2]\nhttp = \"2\"\n"
        ),
    )
    .unwrap();
    // the root-only directory the link will lead to, with what must survive
    let victim = dir.join("victim");
    std::fs::create_dir_all(victim.join("keep")).unwrap();
    std::fs::write(victim.join("keep/canary"), b"precious").unwrap();
    std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o700)).unwrap();
    let before = tree(&victim);
    let gid = 54331;
    let shared = dir.join("shared");
    std::fs::create_dir(&shared).unwrap();
    std::os::unix::fs::chown(&shared, Some(0), Some(gid)).unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o775)).unwrap();
    let (out, old) = (shared.join("out"), shared.join("old"));
    let run = common::quiclab()
        .env("SUDO_GID", gid.to_string())
        .args(["run", plan.to_str().unwrap(), "--jobs", "1", "--out"])
        .arg(&out)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let until = Instant::now() + Duration::from_secs(60);
    while std::fs::read_dir(out.join("trials")).map_or(0, |d| d.count()) == 0 {
        assert!(Instant::now() < until, "no trial started");
        std::thread::sleep(Duration::from_millis(20));
    }
    // the other user's swap, as that user (no capability of root's)
    let swap = std::process::Command::new("setpriv")
        .args(["--reuid", &gid.to_string(), "--regid", &gid.to_string()])
        .args(["--clear-groups", "--", "sh", "-c"])
        .arg(format!(
            "mv {o} {old} && mkdir {o} && ln -s {v} {o}/trials",
            o = out.display(),
            old = old.display(),
            v = victim.display()
        ))
        .status()
        .unwrap();
    assert!(swap.success(), "the swap itself failed: {swap}");
    let started_before_swap = std::fs::read_dir(old.join("trials")).unwrap().count();
    let o = run.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    // the swap landed mid-run: trials were still to start
    assert!(started_before_swap < trials, "{started_before_swap} {err}");
    // nothing created or deleted where the link leads, nor in the directory put in place
    assert_eq!(tree(&victim), before, "{err}");
    assert_eq!(tree(&out), ["trials"]);
    assert!(o.status.success(), "{}: {err}", o.status);
    // the campaign finished in the directory it opened, under its new name
    let recorded = common::quiclab()
        .env("SUDO_GID", gid.to_string())
        .args(["export", old.to_str().unwrap()])
        .output()
        .unwrap();
    let export_err = String::from_utf8_lossy(&recorded.stderr);
    assert!(recorded.status.success(), "{export_err}");
    let csv = std::fs::read_to_string(old.join("export/trials.csv")).unwrap();
    assert_eq!(csv.lines().count(), trials + 1, "{csv}");
    assert!(old.join("report.html").is_file());
}
