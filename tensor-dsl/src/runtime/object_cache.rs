//! Bounding the disk cache of compiled code (`<cache>/objects/`: CPU shared objects and
//! PTX). Each use of a cached file refreshes its modification time; each time a new file is
//! published, the folder is pruned if it holds more than `TENSOR_DSL_CACHE_MAX_MB` megabytes
//! (default 1024): the least recently used files go first, down to three quarters of the
//! limit. Deleting a shared object another process has loaded is harmless on Unix (its
//! mapping stays); that process just compiles it again next time.

use std::path::Path;
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
            prune(dir, max_bytes());
        }
    }
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
    fn the_bound_comes_from_the_environment_with_a_safe_default() {
        // Only checks the parse; the variable is process-wide, so it is not set here.
        if std::env::var("TENSOR_DSL_CACHE_MAX_MB").is_err() {
            assert_eq!(max_bytes(), DEFAULT_MAX_MB << 20);
        }
    }
}
