//! One tuning per key: when several threads, or several processes, make the first call of
//! the same (kernel, shapes, dtype, target, codegen) with first-call tuning on, one tunes and
//! the others wait for its record.
//!
//! A tuner holds a [`Turn`]: in this process an entry in an in-flight set (waiters sleep on
//! a condition variable), across processes an exclusive lock on
//! `<cache>/locks/<key hash>.lock`, beside the records. After taking its turn a caller reads
//! the records again: if the one before it saved a record, it uses that instead of tuning.
//! Waiting is bounded: a caller that would wait past `deadline` gets [`None`] and runs the
//! default schedule.
//!
//! ```
//! use std::time::{Duration, Instant};
//! use tensor_dsl::tune_once;
//! let dir = std::env::temp_dir().join(format!("td-tune-once-doc-{}", std::process::id()));
//! let key = "some key";
//! let turn = tune_once::take(&dir, key, Instant::now() + Duration::from_secs(1)).unwrap();
//! // A second taker of the same key waits, here past its deadline.
//! assert!(tune_once::take(&dir, key, Instant::now() + Duration::from_millis(50)).is_none());
//! drop(turn);
//! assert!(tune_once::take(&dir, key, Instant::now()).is_some());
//! # std::fs::remove_dir_all(&dir).ok();
//! ```

use crate::records::Key;
use std::collections::HashSet;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::{Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// Keys being tuned in this process.
struct InFlight {
    keys: Mutex<HashSet<String>>,
    done: Condvar,
}

fn in_flight() -> &'static InFlight {
    static F: OnceLock<InFlight> = OnceLock::new();
    F.get_or_init(|| InFlight {
        keys: Mutex::new(HashSet::new()),
        done: Condvar::new(),
    })
}

/// The right to tune one key, held until dropped (other waiters then take their turn).
#[derive(Debug)]
pub struct Turn {
    key: String,
    /// `None` when the lock file could not be created (an unwritable cache): tuning then
    /// only excludes other threads of this process.
    file: Option<File>,
}

impl Drop for Turn {
    fn drop(&mut self) {
        if let Some(f) = &self.file {
            let _ = f.unlock();
        }
        let f = in_flight();
        f.keys
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&self.key);
        f.done.notify_all();
    }
}

/// The text that identifies a records key (its lock file is named by its hash).
pub fn key_text(key: &Key) -> String {
    format!(
        "{}|{:?}|{}|{}|{}|{}|{}",
        key.kernel,
        key.shapes,
        key.dtype,
        key.target.device,
        key.target.name,
        key.target.detail,
        key.codegen
    )
}

/// The lock file of `key` in the cache folder `cache`.
pub fn lock_path(cache: &Path, key: &str) -> PathBuf {
    cache.join("locks").join(format!(
        "{:016x}.lock",
        tensor_dsl_lang::ir::fnv1a64(key.as_bytes())
    ))
}

/// How long to poll a lock another process holds.
const POLL: Duration = Duration::from_millis(25);

/// Waits (until `deadline` at most) for the turn to tune `key`, whose lock file lives under
/// `cache`. `None`: someone else was still tuning it at the deadline.
pub fn take(cache: &Path, key: &str, deadline: Instant) -> Option<Turn> {
    let f = in_flight();
    {
        let mut keys = f.keys.lock().unwrap_or_else(|p| p.into_inner());
        while keys.contains(key) {
            let left = deadline.checked_duration_since(Instant::now())?;
            keys = f
                .done
                .wait_timeout(keys, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        keys.insert(key.to_string());
    }
    // From here on the in-process entry is ours; dropping `turn` gives it back.
    let mut turn = Turn {
        key: key.to_string(),
        file: None,
    };
    let Some(file) = open_lock(&lock_path(cache, key)) else {
        return Some(turn);
    };
    loop {
        match file.try_lock() {
            Ok(()) => {
                turn.file = Some(file);
                return Some(turn);
            }
            Err(std::fs::TryLockError::WouldBlock) => {
                if Instant::now() >= deadline {
                    return None;
                }
                std::thread::sleep(POLL.min(deadline.saturating_duration_since(Instant::now())));
            }
            // Locking unsupported here (some network file systems): in-process only.
            Err(std::fs::TryLockError::Error(_)) => return Some(turn),
        }
    }
}

/// Opens (creating) a lock file under the rules of [`crate::files`]; `None` when it cannot
/// be (an unwritable cache, `/dev/null`, a special file).
fn open_lock(path: &Path) -> Option<File> {
    let crate::files::Destination::File(target) = crate::files::destination(path).ok()? else {
        return None;
    };
    if let Some(dir) = target.parent() {
        std::fs::create_dir_all(dir).ok()?;
    }
    File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(target)
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    /// Eight threads asking for one key: one holds the turn at a time, each waits its turn.
    #[test]
    fn one_holder_at_a_time_in_process() {
        let dir = std::env::temp_dir().join(format!("td-tune-once-{}", std::process::id()));
        let holders = Arc::new(AtomicUsize::new(0));
        let handles: Vec<_> = (0..8)
            .map(|_| {
                let (dir, holders) = (dir.clone(), holders.clone());
                std::thread::spawn(move || {
                    let deadline = Instant::now() + Duration::from_secs(30);
                    let turn = take(&dir, "k", deadline).expect("a turn");
                    assert_eq!(holders.fetch_add(1, Ordering::SeqCst), 0);
                    std::thread::sleep(Duration::from_millis(20));
                    holders.fetch_sub(1, Ordering::SeqCst);
                    drop(turn);
                })
            })
            .collect();
        for h in handles {
            h.join().expect("no thread panicked");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
