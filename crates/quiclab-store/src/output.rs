//! Where quiclab writes its outputs, safely: it runs as root, so a directory another user
//! controls could redirect a write (a symbolic link named `report.html` pointing at a system
//! file), and a kill mid-write must not leave a truncated report.
//!
//! Contract:
//! - [`check_dir`] refuses an output directory that belongs to another user or that any user
//!   may write to (world-writable), and one below a directory another user could change (one
//!   they own, or one their group or anyone may write without the sticky bit of a root-owned
//!   directory such as /tmp: they could rename the output and put a link in its place), saying
//!   why; a missing one is fine (quiclab creates it).
//! - [`write_atomic`] writes a file's whole contents into a new temporary file beside it
//!   (created exclusively, never through a link) and renames it over the target: readers see
//!   the old file or the new one, never a part, and a link at the target is replaced, not
//!   followed.
//! - [`refuse_link`] refuses a path that is a symbolic link (for files opened in place, such as
//!   the SQLite database and its journal files).
//! - [`share_with_group`] lets the group of the user who ran quiclab through sudo read and
//!   write a results directory root made, so that `quiclab report`, `quiclab export` and
//!   `sqlite3 -readonly` work for that user; [`check_dir`] accepts such a root-owned directory
//!   from a user who is not root (only root could have placed a link there, or the group).

use std::io::Write;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// Why an output could not be written where asked.
#[derive(Debug, thiserror::Error)]
pub enum OutputError {
    #[error(
        "{path}: the directory belongs to user {owner}, not to this user ({me}); quiclab would \
         write there as this user and a link its owner placed could redirect a write: use a \
         directory this user owns"
    )]
    OtherOwner { path: PathBuf, owner: u32, me: u32 },
    #[error(
        "{path}: any user may write into this directory, so a link another user placed could \
         redirect quiclab's writes: use a directory only its owner may write to"
    )]
    WorldWritable { path: PathBuf },
    #[error(
        "{path}: a directory above the output ({ancestor}) {why}, so that user could move the \
         output away mid-run and put a link in its place that redirects quiclab's writes and \
         deletions: use an output directory whose every parent only this user or root may \
         change (a root-owned sticky directory such as /tmp is fine)"
    )]
    UnsafeAncestor {
        path: PathBuf,
        ancestor: PathBuf,
        why: String,
    },
    #[error("{path}: is not a directory; quiclab writes a campaign into a directory of its own")]
    NotADirectory { path: PathBuf },
    #[error(
        "{path}: the directory was replaced while quiclab opened it (moved away, another put in \
         its place); quiclab writes nothing there: check who else can change its parents"
    )]
    Moved { path: PathBuf },
    #[error("{path}: is a symbolic link; quiclab does not write through links")]
    Link { path: PathBuf },
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

fn io(path: &Path) -> impl Fn(std::io::Error) -> OutputError + '_ {
    move |source| OutputError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// This process's effective user.
/// The effective group of this process.
fn my_group() -> u32 {
    // SAFETY: getegid cannot fail.
    unsafe { libc::getegid() }
}

fn me() -> u32 {
    // SAFETY: geteuid has no arguments and cannot fail.
    unsafe { libc::geteuid() }
}

/// Whether `uid` owns directories as root does here: root, or, inside a user namespace that maps
/// only some of the host's users (a run without root), the overflow user that stands for every
/// unmapped one. Inside such a namespace root's directories (`/`, `/home`, `/tmp`) show that
/// owner, and so do other users' whom quiclab cannot tell from root there: they are taken as
/// root's, where no one but their owner may change them (see `check_ancestors`).
fn root_like(uid: u32) -> bool {
    static OVERFLOW: std::sync::LazyLock<Option<u32>> = std::sync::LazyLock::new(|| {
        let map = std::fs::read_to_string("/proc/self/uid_map").ok()?;
        let identity = map.split_whitespace().collect::<Vec<_>>() == ["0", "0", "4294967295"];
        if identity {
            return None;
        }
        std::fs::read_to_string("/proc/sys/kernel/overflowuid")
            .ok()?
            .trim()
            .parse()
            .ok()
    });
    uid == 0 || Some(uid) == *OVERFLOW
}

/// Refuses an output directory another user controls (see the module's contract).
pub fn check_dir(dir: &Path) -> Result<(), OutputError> {
    check_ancestors(dir)?;
    let meta = match std::fs::metadata(dir) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io(dir)(e)),
    };
    check_meta(dir, &meta)
}

/// The directory's own part of [`check_dir`]: a directory, this user's or root's, and not one
/// anyone may write to.
fn check_meta(dir: &Path, meta: &std::fs::Metadata) -> Result<(), OutputError> {
    if !meta.is_dir() {
        return Err(OutputError::NotADirectory {
            path: dir.to_path_buf(),
        });
    }
    let me = me();
    // root's directory is safe to write into for another user (only root placed what is in
    // it, or the group it was shared with)
    if meta.uid() != me && !root_like(meta.uid()) {
        return Err(OutputError::OtherOwner {
            path: dir.to_path_buf(),
            owner: meta.uid(),
            me,
        });
    }
    if meta.mode() & 0o002 != 0 {
        return Err(OutputError::WorldWritable {
            path: dir.to_path_buf(),
        });
    }
    Ok(())
}

/// This process's descriptors as paths (`/proc/PID/fd`): the same for its threads and for the
/// processes it starts, which `/proc/self/fd` would not be.
static FD_DIR: std::sync::LazyLock<String> =
    std::sync::LazyLock::new(|| format!("/proc/{}/fd", std::process::id()));

/// The path that leads to what `f` has open, whatever its name leads to now: join a relative
/// path to it to create, open or delete in that directory.
fn through(f: &std::fs::File) -> PathBuf {
    use std::os::fd::AsRawFd;
    PathBuf::from(format!("{}/{}", FD_DIR.as_str(), f.as_raw_fd()))
}

/// An output directory held open for the length of a run: every later create and delete goes
/// through [`Anchor::path`], which the kernel resolves from the open directory itself (a
/// `/proc/PID/fd/N` link), never from its name again. Whoever could rename the directory
/// mid-run and put another, or a link, in its place would redirect nothing: quiclab (and the
/// endpoints it starts, given paths under [`Anchor::path`]) keeps writing where it started.
#[derive(Debug)]
pub struct Anchor {
    dir: std::fs::File,
    path: PathBuf,
    shown: PathBuf,
}

impl Anchor {
    /// Checks `dir` as [`check_dir`] does, creates it if it is missing, opens it without
    /// following a link, and checks what was opened again (owner and mode, as opened).
    pub fn open(dir: &Path) -> Result<Anchor, OutputError> {
        refuse_link(dir)?;
        check_dir(dir)?;
        std::fs::create_dir_all(dir).map_err(io(dir))?;
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW)
            .open(dir)
            .map_err(|e| match e.raw_os_error() {
                Some(libc::ENOTDIR) => OutputError::NotADirectory {
                    path: dir.to_path_buf(),
                },
                _ => link_or_io(dir, e),
            })?;
        check_meta(dir, &file.metadata().map_err(io(dir))?)?;
        let path = through(&file);
        if !path.is_dir() {
            return Err(io(dir)(std::io::Error::other(
                "/proc is not mounted: quiclab holds its output directory open through /proc/PID/fd",
            )));
        }
        Ok(Anchor {
            dir: file,
            path,
            shown: dir.to_path_buf(),
        })
    }

    /// The held directory, as a path any process of this user resolves from the open
    /// directory: join a relative path to it to create or delete there.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The directory as it was named.
    pub fn shown(&self) -> &Path {
        &self.shown
    }

    /// Whether `path` names the held directory now (same device and inode).
    pub fn is(&self, path: &Path) -> bool {
        match (self.dir.metadata(), std::fs::metadata(path)) {
            (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
            _ => false,
        }
    }

    /// Fails unless `path` still names the held directory: a campaign's database is opened by
    /// name, so after opening it the name must still lead to the directory held.
    pub fn confirm(&self, path: &Path) -> Result<(), OutputError> {
        if self.is(path) {
            Ok(())
        } else {
            Err(OutputError::Moved {
                path: path.to_path_buf(),
            })
        }
    }
}

/// Every directory above `dir` (as the path names them, absolute, and as they resolve) must be
/// one only this user or root may change: owned by one of them, and writable by no one else
/// unless root owns it and it is sticky (where no one may rename another's entries: /tmp).
/// Another user able to rename the output directory could put a link where it was.
fn check_ancestors(dir: &Path) -> Result<(), OutputError> {
    use std::os::unix::fs::PermissionsExt;
    let me = me();
    let abs = std::path::absolute(dir).map_err(io(dir))?;
    let mut chains = vec![abs.clone()];
    // the resolved path of the deepest existing ancestor (its links followed) too
    if let Some(real) = abs.ancestors().skip(1).find_map(|a| a.canonicalize().ok()) {
        chains.push(real.join("_"));
    }
    for chain in &chains {
        for a in chain.ancestors().skip(1) {
            let Ok(meta) = std::fs::metadata(a) else {
                continue;
            };
            let mode = meta.permissions().mode();
            // a group's write is this user's own group's, or the invoking user's that quiclab
            // shares a results directory with (`share_with_group`)
            let own_group = meta.gid() == my_group() || Some(meta.gid()) == invoking_group();
            let writers = if own_group { 0o002 } else { 0o022 };
            let why = if meta.uid() != me && !root_like(meta.uid()) {
                Some(format!("belongs to user {}", meta.uid()))
            } else if mode & writers != 0 && !(root_like(meta.uid()) && mode & 0o1000 != 0) {
                Some(format!(
                    "may be written by {} without the sticky bit",
                    if mode & 0o002 != 0 {
                        "any user"
                    } else {
                        "its group"
                    }
                ))
            } else {
                None
            };
            if let Some(why) = why {
                return Err(OutputError::UnsafeAncestor {
                    path: dir.to_path_buf(),
                    ancestor: a.to_path_buf(),
                    why,
                });
            }
        }
    }
    Ok(())
}

/// The group quiclab, run as root, shares its results with: `QUICLAB_GROUP` when set (a
/// container's, whose merge runs as another user), else the group of the user who ran quiclab
/// through sudo (`SUDO_GID`); None when quiclab is not root, or neither names a group other
/// than root's.
pub fn invoking_group() -> Option<u32> {
    if me() != 0 {
        return None;
    }
    ["QUICLAB_GROUP", "SUDO_GID"]
        .iter()
        .find_map(|v| std::env::var(v).ok())?
        .parse()
        .ok()
        .filter(|&g| g != 0)
}

/// Gives `gid` read and write access to `dir` and everything in it: each directory and file
/// (never a link, which is left alone, nor a FIFO or socket) gets that group and the group's read
/// and write bits (and search, for directories), others' bits unchanged. Every entry is opened
/// without following a link and changed through its open descriptor, so an entry replaced by a
/// link meanwhile is never followed. `dir` itself may be an [`Anchor::path`].
pub fn share_with_group(dir: &Path, gid: u32) -> Result<(), OutputError> {
    let held = dir.starts_with(FD_DIR.as_str());
    match open_entry(dir, !held) {
        Ok(f) => share_open(f, dir, gid),
        // a link is left alone
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => Ok(()),
        Err(e) => Err(io(dir)(e)),
    }
}

/// Opens a file or directory to change its owner and mode (read-only, without blocking on a
/// FIFO, and without following a link at `path` when `nofollow`).
fn open_entry(path: &Path, nofollow: bool) -> std::io::Result<std::fs::File> {
    let flags = libc::O_NONBLOCK | if nofollow { libc::O_NOFOLLOW } else { 0 };
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(flags)
        .open(path)
}

fn share_open(f: std::fs::File, shown: &Path, gid: u32) -> Result<(), OutputError> {
    use std::os::unix::fs::PermissionsExt;
    let meta = f.metadata().map_err(io(shown))?;
    if !meta.is_dir() && !meta.is_file() {
        return Ok(());
    }
    std::os::unix::fs::fchown(&f, None, Some(gid)).map_err(io(shown))?;
    let group = if meta.is_dir() { 0o070 } else { 0o060 };
    let mode = meta.permissions().mode() & 0o7777 | group;
    f.set_permissions(std::fs::Permissions::from_mode(mode))
        .map_err(io(shown))?;
    if meta.is_dir() {
        let at = through(&f);
        for entry in std::fs::read_dir(&at).map_err(io(shown))? {
            let name = entry.map_err(io(shown))?.file_name();
            let (path, shown) = (at.join(&name), shown.join(&name));
            match open_entry(&path, true) {
                Ok(child) => share_open(child, &shown, gid)?,
                // a link, or an entry gone meanwhile, is left alone
                Err(e) if matches!(e.raw_os_error(), Some(libc::ELOOP | libc::ENOENT)) => {}
                Err(e) => return Err(io(&shown)(e)),
            }
        }
    }
    Ok(())
}

/// Refuses `path` if it is a symbolic link (a missing path is fine).
pub fn refuse_link(path: &Path) -> Result<(), OutputError> {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_symlink() => Err(OutputError::Link {
            path: path.to_path_buf(),
        }),
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io(path)(e)),
    }
}

/// Creates (or truncates) a file to stream into, refusing a symbolic link at `path` (for logs
/// written as they grow, which cannot be renamed into place at the end).
pub fn create(path: &Path) -> Result<std::fs::File, OutputError> {
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .custom_flags(libc::O_NOFOLLOW)
        .mode(0o644)
        .open(path)
        .map_err(|e| link_or_io(path, e))
}

/// Opens (creating if needed) a file to read and write in place without truncating it (a lock
/// file), refusing a symbolic link at `path`.
pub fn open_rw(path: &Path) -> Result<std::fs::File, OutputError> {
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .custom_flags(libc::O_NOFOLLOW)
        .mode(0o644)
        .open(path)
        .map_err(|e| link_or_io(path, e))
}

fn link_or_io(path: &Path, e: std::io::Error) -> OutputError {
    if e.raw_os_error() == Some(libc::ELOOP) {
        OutputError::Link {
            path: path.to_path_buf(),
        }
    } else {
        io(path)(e)
    }
}

/// Writes `bytes` to `path` atomically, never through a link (see the module's contract).
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), OutputError> {
    write_atomic_with(path, |w| w.write_all(bytes))
}

/// The same, the contents written by `fill` (e.g. a CSV row by row).
pub fn write_atomic_with(
    path: &Path,
    fill: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
) -> Result<(), OutputError> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().to_string())
        .unwrap_or_default();
    let tmp_name = format!(".{name}.{}.tmp", std::process::id());
    let shown_tmp = dir.join(&tmp_name);
    // the directory is resolved once and held: the temporary file and the rename happen in
    // that one directory, even if its name is made to lead elsewhere meanwhile
    let held = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY)
        .open(&dir)
        .map_err(io(&dir))?;
    let at = through(&held);
    let (tmp, target) = (at.join(&tmp_name), at.join(&name));
    let _ = std::fs::remove_file(&tmp);
    remove_dead_writers_files(&at, &name);
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .custom_flags(libc::O_NOFOLLOW)
        .mode(0o644)
        .open(&tmp)
        .map_err(io(&shown_tmp))?;
    let mut w = std::io::BufWriter::new(file);
    let written = fill(&mut w)
        .and_then(|()| w.flush())
        .and_then(|()| w.get_ref().sync_all());
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(io(path)(e));
    }
    // rename replaces a link at `path` itself, never its target
    std::fs::rename(&tmp, &target).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        io(path)(e)
    })
}

/// Removes the temporary files of `name` that writers killed mid-write left (`.NAME.PID.tmp`
/// of a pid that no longer runs).
fn remove_dead_writers_files(dir: &Path, name: &str) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let prefix = format!(".{name}.");
    for e in entries.filter_map(|e| e.ok()) {
        let file = e.file_name().to_string_lossy().into_owned();
        let Some(pid) = file
            .strip_prefix(&prefix)
            .and_then(|r| r.strip_suffix(".tmp"))
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shared_results_directory_is_the_groups_to_read_and_write_and_links_are_left_alone() {
        use std::os::unix::fs::PermissionsExt;
        // giving a file to another group needs root; CI runs the tests as root
        assert_eq!(me(), 0, "this test needs root");
        let d = std::env::temp_dir().join(format!("quiclab-share-{}", std::process::id()));
        std::fs::create_dir_all(d.join("trials/t0")).unwrap();
        std::fs::write(d.join("results.db"), b"x").unwrap();
        std::fs::write(d.join("trials/t0/server.log"), b"x").unwrap();
        std::os::unix::fs::symlink("/etc/hostname", d.join("trials/t0/link")).unwrap();
        let gid = 54_321;
        share_with_group(&d, gid).unwrap();
        for (p, dir) in [
            (d.clone(), true),
            (d.join("trials/t0"), true),
            (d.join("results.db"), false),
            (d.join("trials/t0/server.log"), false),
        ] {
            let m = std::fs::metadata(&p).unwrap();
            assert_eq!(m.gid(), gid, "{}", p.display());
            let want = if dir { 0o070 } else { 0o060 };
            assert_eq!(m.permissions().mode() & 0o070, want, "{}", p.display());
            // others gain nothing
            assert_eq!(m.permissions().mode() & 0o002, 0, "{}", p.display());
        }
        // the link's target was not touched
        assert_ne!(std::fs::metadata("/etc/hostname").unwrap().gid(), gid);
        // a root-owned directory is fine for another user to write into; still refused when
        // anyone may write there
        assert!(check_dir(&d).is_ok());
        let _ = std::fs::remove_dir_all(&d);
    }

    fn scratch(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("quiclab-output-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn a_link_at_the_target_is_replaced_and_its_target_untouched() {
        let d = scratch("link");
        let victim = d.join("victim");
        std::fs::write(&victim, b"precious").unwrap();
        let out = d.join("report.html");
        std::os::unix::fs::symlink(&victim, &out).unwrap();
        write_atomic(&out, b"<html>").unwrap();
        assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
        assert!(
            !std::fs::symlink_metadata(&out)
                .unwrap()
                .file_type()
                .is_symlink()
        );
        assert_eq!(std::fs::read(&out).unwrap(), b"<html>");
        // nothing of the temporary file is left
        let names: Vec<_> = std::fs::read_dir(&d)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names.len(), 2, "{names:?}");
        assert!(matches!(refuse_link(&d.join("missing")), Ok(())));
        // a log streamed in place refuses the link instead
        let log = d.join("server.log");
        std::os::unix::fs::symlink(&victim, &log).unwrap();
        assert!(matches!(create(&log), Err(OutputError::Link { .. })));
        assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
        std::os::unix::fs::symlink(&victim, d.join("results.db")).unwrap();
        assert!(matches!(
            refuse_link(&d.join("results.db")),
            Err(OutputError::Link { .. })
        ));
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_failed_fill_leaves_the_old_file() {
        let d = scratch("fail");
        let out = d.join("trials.csv");
        std::fs::write(&out, b"old").unwrap();
        let e = write_atomic_with(&out, |w| {
            w.write_all(b"half")?;
            Err(std::io::Error::other("disk full"))
        });
        assert!(e.is_err());
        assert_eq!(std::fs::read(&out).unwrap(), b"old");
        assert_eq!(std::fs::read_dir(&d).unwrap().count(), 1);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_directory_anyone_may_write_to_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let d = scratch("mode");
        check_dir(&d).unwrap();
        check_dir(&d.join("not yet")).unwrap();
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o777)).unwrap();
        let e = check_dir(&d).unwrap_err();
        assert!(e.to_string().contains("any user may write"), "{e}");
        // a file where the directory should be: named as such (it said "File exists")
        let file = scratch("mode-file").join("results.txt");
        std::fs::write(&file, "x").unwrap();
        let e = check_dir(&file).unwrap_err().to_string();
        assert!(e.contains("is not a directory"), "{e}");
        let _ = std::fs::remove_dir_all(file.parent().unwrap());
        // another user's directory (the test runs as root in CI: make one for "nobody")
        if me() == 0 {
            std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o755)).unwrap();
            std::os::unix::fs::chown(&d, Some(65534), None).unwrap();
            let e = check_dir(&d).unwrap_err();
            assert!(e.to_string().contains("belongs to user 65534"), "{e}");
        }
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn an_output_under_a_directory_another_user_may_change_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let d = scratch("ancestor");
        let parent = d.join("theirs");
        std::fs::create_dir_all(&parent).unwrap();
        // as root, a directory of another user's (in CI); otherwise one anyone may write
        if me() == 0 {
            std::os::unix::fs::chown(&parent, Some(12345), None).unwrap();
        } else {
            std::fs::set_permissions(&parent, std::fs::Permissions::from_mode(0o777)).unwrap();
        }
        for out in [parent.join("out"), parent.join("out").join("deeper")] {
            let e = check_dir(&out).unwrap_err().to_string();
            assert!(
                e.contains("a directory above the output") && e.contains("theirs"),
                "{e}"
            );
        }
        // reached through a link of one's own, it is refused as well
        let link = d.join("mine");
        std::os::unix::fs::symlink(&parent, &link).unwrap();
        assert!(check_dir(&link.join("out")).is_err());
        // /tmp itself (root's, sticky) is fine, and so is a directory of one's own under it
        let own = d.join("own");
        std::fs::create_dir_all(&own).unwrap();
        check_dir(&own.join("out")).unwrap();
        std::fs::remove_dir_all(&d).unwrap();
    }
}
