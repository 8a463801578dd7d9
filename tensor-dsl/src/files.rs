//! Writing files without destroying what is at their path.
//!
//! Every file tensor-dsl writes by replacing it — records and their lock files, the
//! compiled-code cache, the build script's output — goes through this module, so all of
//! them follow the same rules:
//!
//! - a symbolic link is written through: its final target gets the contents and the link
//!   stays a link;
//! - a regular file, or a path where nothing is yet, is replaced atomically: the contents
//!   go to a temporary file beside it, which is renamed over it, so a reader sees the old
//!   file or the new one and never a part of either (the old file's permissions are kept);
//! - anything else — a character or block device, a FIFO, a socket, a directory — is
//!   refused with [`Error::NotAFile`], since renaming over it would destroy it;
//! - `/dev/null` (or a link to it) means "do not save": nothing is written and no lock
//!   file is created.
//!
//! ```
//! use std::path::Path;
//! use tensor_dsl::files;
//! let dir = std::env::temp_dir().join(format!("td-files-doc-{}", std::process::id()));
//! std::fs::create_dir_all(&dir).unwrap();
//! files::replace(&dir.join("a.txt"), b"one").unwrap();
//! # #[cfg(unix)] {
//! std::os::unix::fs::symlink("a.txt", dir.join("link")).unwrap();
//! files::replace(&dir.join("link"), b"two").unwrap();
//! assert!(std::fs::symlink_metadata(dir.join("link")).unwrap().is_symlink());
//! assert_eq!(std::fs::read(dir.join("a.txt")).unwrap(), b"two");
//! # }
//! files::replace(Path::new("/dev/null"), b"not saved").unwrap();
//! assert!(files::replace(&dir, b"x").is_err()); // a directory is refused
//! # std::fs::remove_dir_all(&dir).ok();
//! ```

use crate::Error;
use std::fs::{File, Metadata};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// The most symbolic links followed from one path (Linux's own limit).
const MAX_LINKS: usize = 40;

/// Where writing to a path really goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Destination {
    /// Nothing is saved: the path is `/dev/null`, or a link to it.
    Discard,
    /// This path, reached through any symbolic links: a regular file, or nothing yet.
    File(PathBuf),
}

/// Follows `path` through symbolic links and says where writing it goes, or why it must
/// not be written ([`Error::NotAFile`] for a device, FIFO, socket or directory).
///
/// ```
/// use std::path::Path;
/// use tensor_dsl::files::{destination, Destination};
/// assert_eq!(destination(Path::new("/dev/null")).unwrap(), Destination::Discard);
/// let new = std::env::temp_dir().join("td-files-doc-nothing-here-yet");
/// assert_eq!(destination(&new).unwrap(), Destination::File(new.clone()));
/// ```
pub fn destination(path: &Path) -> Result<Destination, Error> {
    let (resolved, meta) = follow_links(path)?;
    if is_dev_null(&resolved, meta.as_ref()) {
        return Ok(Destination::Discard);
    }
    if let Some(kind) = meta.as_ref().and_then(special_kind) {
        return Err(Error::NotAFile {
            path: path.to_path_buf(),
            resolved,
            kind: kind.to_string(),
        });
    }
    Ok(Destination::File(resolved))
}

/// Replaces the contents of `path` with `contents` under the rules of this module (see the
/// module docs): through symbolic links, atomically by rename, never over a special file,
/// and not at all for `/dev/null`. Missing parent directories are created.
pub fn replace(path: &Path, contents: &[u8]) -> Result<(), Error> {
    replace_with(path, |file| file.write_all(contents))
}

/// [`replace`], with the new contents written by `write` into the temporary file (for
/// contents that are not in memory, such as a file to copy).
///
/// ```
/// use std::io::Write;
/// let path = std::env::temp_dir().join(format!("td-files-doc-with-{}", std::process::id()));
/// tensor_dsl::files::replace_with(&path, |file| writeln!(file, "hello")).unwrap();
/// assert_eq!(std::fs::read_to_string(&path).unwrap(), "hello\n");
/// # std::fs::remove_file(&path).ok();
/// ```
pub fn replace_with(
    path: &Path,
    write: impl FnOnce(&mut File) -> std::io::Result<()>,
) -> Result<(), Error> {
    let Destination::File(target) = destination(path)? else {
        return Ok(());
    };
    create_parent(&target)?;
    let tmp = temporary_path(&target);
    let result = (|| -> std::io::Result<()> {
        let mut file = File::options().write(true).create_new(true).open(&tmp)?;
        write(&mut file)?;
        if let Ok(old) = std::fs::metadata(&target) {
            file.set_permissions(old.permissions())?;
        }
        file.sync_all()?;
        std::fs::rename(&tmp, &target)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result.map_err(|e| at(&target, e))
}

/// An exclusive lock on a file's `<file>.lock` beside it, held until dropped.
#[derive(Debug)]
pub struct FileLock {
    file: File,
}

impl Drop for FileLock {
    fn drop(&mut self) {
        let _ = self.file.unlock();
    }
}

/// Takes an exclusive lock for writing `path`, waiting for other holders (in this process
/// or others): the lock file is `<file>.lock` beside the final target of any symbolic
/// links, so writers through different links to one file exclude each other. `None` for
/// `/dev/null`, which needs no lock (and gets no lock file beside it). The lock file is
/// created if missing and never truncated; it is itself subject to the rules of this module.
///
/// ```
/// use std::path::Path;
/// let path = std::env::temp_dir().join(format!("td-files-doc-lock-{}.jsonl", std::process::id()));
/// let lock = tensor_dsl::files::lock(&path).unwrap();
/// assert!(lock.is_some() && path.with_extension("lock").is_file());
/// drop(lock);
/// assert!(tensor_dsl::files::lock(Path::new("/dev/null")).unwrap().is_none());
/// # std::fs::remove_file(path.with_extension("lock")).ok();
/// ```
pub fn lock(path: &Path) -> Result<Option<FileLock>, Error> {
    let Destination::File(target) = destination(path)? else {
        return Ok(None);
    };
    let Destination::File(lock_path) = destination(&target.with_extension("lock"))? else {
        return Ok(None);
    };
    create_parent(&lock_path)?;
    let file = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .map_err(|e| at(&lock_path, e))?;
    file.lock().map_err(|e| at(&lock_path, e))?;
    Ok(Some(FileLock { file }))
}

/// `path` followed through symbolic links, with its metadata (`None`: nothing there yet).
fn follow_links(path: &Path) -> Result<(PathBuf, Option<Metadata>), Error> {
    let mut current = path.to_path_buf();
    for _ in 0..=MAX_LINKS {
        match std::fs::symlink_metadata(&current) {
            Ok(meta) if meta.is_symlink() => {
                let target = std::fs::read_link(&current).map_err(|e| at(&current, e))?;
                current = match current.parent() {
                    Some(dir) if target.is_relative() => dir.join(target),
                    _ => target,
                };
            }
            Ok(meta) => return Ok((current, Some(meta))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((current, None)),
            Err(e) => return Err(at(&current, e)),
        }
    }
    Err(Error::Io(std::io::Error::other(format!(
        "{}: more than {MAX_LINKS} symbolic links to follow (a loop?); give the path of a regular file",
        path.display()
    ))))
}

/// `/dev/null` by name, or any device node that is the null device.
fn is_dev_null(path: &Path, meta: Option<&Metadata>) -> bool {
    if path == Path::new("/dev/null") {
        return true;
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::{FileTypeExt, MetadataExt};
        if let (Some(meta), Ok(null)) = (meta, std::fs::metadata("/dev/null")) {
            return meta.file_type().is_char_device()
                && null.file_type().is_char_device()
                && meta.rdev() == null.rdev();
        }
    }
    let _ = meta;
    false
}

/// What a non-regular file is, for the error message; `None` for a regular file.
fn special_kind(meta: &Metadata) -> Option<&'static str> {
    let ty = meta.file_type();
    if ty.is_file() {
        return None;
    }
    if ty.is_dir() {
        return Some("directory");
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if ty.is_char_device() {
            return Some("character device");
        }
        if ty.is_block_device() {
            return Some("block device");
        }
        if ty.is_fifo() {
            return Some("FIFO (named pipe)");
        }
        if ty.is_socket() {
            return Some("socket");
        }
    }
    Some("special file")
}

/// A fresh name beside `target`: `<stem>.tmp<pid>-<n>` (the object cache's pruning knows
/// `*.tmp*` names as files being written).
fn temporary_path(target: &Path) -> PathBuf {
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let n = SEQ.fetch_add(1, Ordering::Relaxed);
    target.with_extension(format!("tmp{}-{n}", std::process::id()))
}

fn create_parent(path: &Path) -> Result<(), Error> {
    match path.parent().filter(|d| !d.as_os_str().is_empty()) {
        Some(dir) => std::fs::create_dir_all(dir).map_err(|e| at(dir, e)),
        None => Ok(()),
    }
}

/// An I/O error that names the path it happened at.
fn at(path: &Path, e: std::io::Error) -> Error {
    Error::Io(std::io::Error::new(
        e.kind(),
        format!("{}: {e}", path.display()),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("td-files-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn replaces_regular_files_and_keeps_their_permissions() {
        let dir = temp_dir("regular");
        let path = dir.join("f.txt");
        replace(&path, b"one").unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o640)).unwrap();
        }
        replace(&path, b"two").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"two");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o640);
        }
        let left: Vec<_> = std::fs::read_dir(&dir).unwrap().collect();
        assert_eq!(left.len(), 1, "no temporary file is left behind");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[cfg(unix)]
    #[test]
    fn links_are_followed_to_the_end_and_loops_are_an_error() {
        let dir = temp_dir("links");
        // link1 -> link2 -> sub/target (relative to each link's own folder).
        std::fs::create_dir_all(dir.join("sub")).unwrap();
        std::os::unix::fs::symlink("sub/target", dir.join("link2")).unwrap();
        std::os::unix::fs::symlink("link2", dir.join("link1")).unwrap();
        assert_eq!(
            destination(&dir.join("link1")).unwrap(),
            Destination::File(dir.join("sub/target"))
        );
        replace(&dir.join("link1"), b"x").unwrap();
        assert_eq!(std::fs::read(dir.join("sub/target")).unwrap(), b"x");
        assert!(std::fs::symlink_metadata(dir.join("link1"))
            .unwrap()
            .is_symlink());
        assert!(std::fs::symlink_metadata(dir.join("link2"))
            .unwrap()
            .is_symlink());

        std::os::unix::fs::symlink("loop_b", dir.join("loop_a")).unwrap();
        std::os::unix::fs::symlink("loop_a", dir.join("loop_b")).unwrap();
        let e = replace(&dir.join("loop_a"), b"x").unwrap_err().to_string();
        assert!(e.contains("symbolic links"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[cfg(unix)]
    #[test]
    fn a_link_to_dev_null_discards() {
        let dir = temp_dir("null-link");
        std::os::unix::fs::symlink("/dev/null", dir.join("null")).unwrap();
        assert_eq!(
            destination(&dir.join("null")).unwrap(),
            Destination::Discard
        );
        replace(&dir.join("null"), b"x").unwrap();
        assert!(lock(&dir.join("null")).unwrap().is_none());
        assert!(std::fs::symlink_metadata(dir.join("null"))
            .unwrap()
            .is_symlink());
        assert!(!dir.join("null.lock").exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[cfg(unix)]
    #[test]
    fn special_files_are_refused_with_their_kind() {
        let dir = temp_dir("special");
        let socket = dir.join("sock");
        let _listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
        for (path, kind) in [(&socket, "socket"), (&dir, "directory")] {
            let e = replace(path, b"x").unwrap_err();
            assert!(matches!(e, Error::NotAFile { .. }), "{e:?}");
            let text = e.to_string();
            assert!(
                text.contains(kind) && text.contains(&*path.to_string_lossy()),
                "{text}"
            );
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
