//! The disk cache of compiled code (`<cache>/objects/`: CPU shared objects and PTX): checked
//! before use, and bounded.
//!
//! **Integrity.** An object is stored as `<key>-<content>.<ext>`: `key` hashes everything the
//! code was compiled from and for (source, compiler and its version and flags, the CPU's model
//! and ISA flags or the GPU architecture), `content` hashes the file's bytes. [`lookup`] reads
//! a candidate, hashes it and hands back its bytes only when the hash is the one in its name;
//! anything else (a truncated file, random bytes, another kernel's object copied over it) is
//! deleted, with one warning per process, and the caller compiles again. The CPU runtime then
//! loads the *checked bytes* from a private copy, so nothing in the shared cache is ever
//! `dlopen`ed directly (a file cut short under a loaded library would kill the process with
//! `SIGBUS`).
//!
//! **Size.** Each use of a cached file refreshes its modification time; each time a new file is
//! published, the folder is pruned if it holds more than `TENSOR_DSL_CACHE_MAX_MB` megabytes
//! (default 1024): the least recently used files go first, down to three quarters of the
//! limit. Deleting a shared object another process has loaded is harmless on Unix (its
//! mapping stays); that process just compiles it again next time.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime};

/// The default bound, in megabytes.
pub const DEFAULT_MAX_MB: u64 = 1024;

/// The bound in bytes: `TENSOR_DSL_CACHE_MAX_MB`, else [`DEFAULT_MAX_MB`]. An unparsable
/// value falls back to the default (a cache setting must not break a call).
pub fn max_bytes() -> u64 {
    std::env::var("TENSOR_DSL_CACHE_MAX_MB")
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
        .unwrap_or(DEFAULT_MAX_MB)
        .saturating_mul(1 << 20)
}

/// Writes a new file into the cache with [`crate::files::replace_with`] (atomically, by
/// rename, through a symbolic link, never over a special file), then prunes its folder.
/// Errors are ignored: a file that could not be cached is compiled again next time.
pub fn publish(path: &Path, write: impl FnOnce(&mut std::fs::File) -> std::io::Result<()>) {
    if crate::files::replace_with(path, write).is_ok() {
        if let Some(dir) = path.parent() {
            prune(dir, max_bytes() - crate::records::max_bytes());
        }
    }
}

/// The objects folder of the user cache, or `None` when `TENSOR_DSL_NO_DISK_CACHE=1`.
pub fn objects_dir() -> Option<PathBuf> {
    if std::env::var("TENSOR_DSL_NO_DISK_CACHE").is_ok_and(|v| v == "1") {
        return None;
    }
    Some(crate::records::cache_dir().join("objects"))
}

/// The hash naming an object's contents (64-bit FNV-1a: it detects damage, it is not a
/// defence against someone who can write the cache and wants to fool it).
pub fn content_hash(bytes: &[u8]) -> u64 {
    tensor_dsl_lang::ir::fnv1a64(bytes)
}

/// The file name of an object whose key text is `key` and contents `bytes`.
///
/// ```
/// use tensor_dsl::runtime::object_cache::object_name;
/// let name = object_name("cc 12\nsource", b"\x7fELF...", "so");
/// assert!(name.ends_with(".so") && name.len() == 16 + 1 + 16 + 3);
/// ```
pub fn object_name(key: &str, bytes: &[u8], ext: &str) -> String {
    format!(
        "{:016x}-{:016x}.{ext}",
        tensor_dsl_lang::ir::fnv1a64(key.as_bytes()),
        content_hash(bytes)
    )
}

static WARNED_DAMAGED: AtomicBool = AtomicBool::new(false);

/// Finds the object stored for `key` in `dir` and returns its path and bytes, verified
/// against the content hash in its name. Every candidate that does not verify is deleted
/// (one warning per process names the first); `None` means "compile it". Reading errors
/// are a miss, never an error.
pub fn lookup(dir: &Path, key: &str, ext: &str) -> Option<(PathBuf, Vec<u8>)> {
    let prefix = format!("{:016x}-", tensor_dsl_lang::ir::fnv1a64(key.as_bytes()));
    let suffix = format!(".{ext}");
    let entries = std::fs::read_dir(dir).ok()?;
    let mut found = None;
    for entry in entries.filter_map(Result::ok) {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let Some(hash) = name
            .strip_prefix(&prefix)
            .and_then(|rest| rest.strip_suffix(&suffix))
        else {
            continue;
        };
        let path = entry.path();
        // Only regular files (a link or anything else is left alone and not used).
        if !std::fs::symlink_metadata(&path).is_ok_and(|m| m.is_file()) {
            continue;
        }
        let Ok(bytes) = std::fs::read(&path) else {
            continue;
        };
        if found.is_none() && format!("{:016x}", content_hash(&bytes)) == hash {
            touch(&path);
            found = Some((path, bytes));
        } else if found.is_none() {
            discard_damaged(&path);
        }
    }
    found
}

/// Deletes a cached object that failed its check, warning once per process.
pub fn discard_damaged(path: &Path) {
    let _ = std::fs::remove_file(path);
    if !WARNED_DAMAGED.swap(true, Ordering::Relaxed) {
        crate::log::warn(format_args!(
            "{} does not match its content hash (damaged or replaced); deleted, compiling again",
            path.display()
        ));
    }
}

/// Stores `bytes` as the object for `key` in `dir` (named by [`object_name`]) with
/// [`publish`]. Errors are ignored: it is compiled again next time.
pub fn store(dir: &Path, key: &str, ext: &str, bytes: &[u8]) {
    let path = dir.join(object_name(key, bytes, ext));
    publish(&path, |file| std::io::Write::write_all(file, bytes));
}

/// Marks a cached file as just used. Errors are ignored: at worst it is pruned earlier.
pub fn touch(path: &Path) {
    if let Ok(f) = std::fs::File::options().append(true).open(path) {
        let _ = f.set_modified(SystemTime::now());
    }
}

/// If the files directly in `dir` total more than `max_bytes`, deletes the least recently
/// modified ones until they total at most 3/4 of it. Another process's temporary file
/// (`*.tmp<pid>-<n>`, see [`crate::files`]) is only deleted once it is an hour old. Returns how many files it deleted.
pub fn prune(dir: &Path, max_bytes: u64) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    let now = SystemTime::now();
    let mut files: Vec<(SystemTime, u64, std::path::PathBuf)> = entries
        .filter_map(Result::ok)
        .filter_map(|e| {
            let meta = e.metadata().ok()?;
            meta.is_file()
                .then(|| (meta.modified().unwrap_or(now), meta.len(), e.path()))
        })
        .collect();
    let mut total: u64 = files.iter().map(|f| f.1).sum();
    if total <= max_bytes {
        return 0;
    }
    files.sort_by_key(|f| f.0);
    let goal = max_bytes / 4 * 3;
    let mut removed = 0;
    for (modified, len, path) in files {
        if total <= goal {
            break;
        }
        let temporary = path
            .extension()
            .and_then(|e| e.to_str())
            .is_some_and(|e| e.starts_with("tmp"));
        let age = now.duration_since(modified).unwrap_or(Duration::ZERO);
        if temporary && age < Duration::from_secs(3600) {
            continue;
        }
        if std::fs::remove_file(&path).is_ok() {
            total = total.saturating_sub(len);
            removed += 1;
        }
    }
    removed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prunes_least_recently_used_down_to_three_quarters() {
        let dir = std::env::temp_dir().join(format!("td-objcache-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let base = SystemTime::now() - Duration::from_secs(10_000);
        // Ten files of 100 bytes, file n last used at base + n seconds.
        for n in 0..10u64 {
            let p = dir.join(format!("{n}.so"));
            std::fs::write(&p, vec![0u8; 100]).unwrap();
            let f = std::fs::File::options().append(true).open(&p).unwrap();
            f.set_modified(base + Duration::from_secs(n)).unwrap();
        }
        // A fresh temporary file of another process is left alone.
        std::fs::write(dir.join("x.tmp123"), vec![0u8; 100]).unwrap();
        assert_eq!(prune(&dir, 2000), 0, "under the bound: nothing goes");
        // Using file 0 makes it the most recent.
        touch(&dir.join("0.so"));
        // 1100 bytes, bound 800: down to 600, so 5 files go: 1..=5, the oldest.
        assert_eq!(prune(&dir, 800), 5);
        let mut left: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(left, ["0.so", "6.so", "7.so", "8.so", "9.so", "x.tmp123"]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn objects_are_used_only_when_their_bytes_match_their_name() {
        let dir = std::env::temp_dir().join(format!("td-objcheck-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let (a, b) = (
            b"object of kernel a".to_vec(),
            b"object of kernel b".to_vec(),
        );
        store(&dir, "key a", "so", &a);
        store(&dir, "key b", "so", &b);
        assert_eq!(lookup(&dir, "key a", "so").unwrap().1, a);
        assert!(lookup(&dir, "key a", "ptx").is_none(), "another kind");
        assert!(lookup(&dir, "key c", "so").is_none(), "another key");
        let path_a = dir.join(object_name("key a", &a, "so"));
        let path_b = dir.join(object_name("key b", &b, "so"));
        // Truncated, random bytes, another kernel's object: each is a miss and is deleted.
        for damaged in [a[..7].to_vec(), vec![0x5a; 64], b.clone()] {
            std::fs::write(&path_a, &damaged).unwrap();
            assert!(lookup(&dir, "key a", "so").is_none());
            assert!(!path_a.exists(), "the damaged object is deleted");
        }
        assert_eq!(lookup(&dir, "key b", "so").unwrap().1, b);
        assert!(path_b.exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_bound_comes_from_the_environment_with_a_safe_default() {
        // Only checks the parse; the variable is process-wide, so it is not set here.
        if std::env::var("TENSOR_DSL_CACHE_MAX_MB").is_err() {
            assert_eq!(max_bytes(), DEFAULT_MAX_MB << 20);
        }
    }
}
