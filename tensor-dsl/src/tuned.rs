//! Where a call's schedule comes from, in this order: records embedded in the binary, the
//! user cache, tuning now (if `TENSOR_DSL_TUNE=first-call`), the tuned record of the nearest
//! shape (only if valid here and measured no slower than the default), the heuristic
//! default. The decision is made once per (kernel, shapes, device) and memoized.
//!
//! Embedding: `tensor_dsl::include_tuned!()` (the build script's output) or
//! `tensor_dsl::include_tuned!("tuned/cpu.jsonl")` (a shipped records file, relative to the
//! crate root) registers records before `main` runs; [`register_embedded`] does the same by
//! hand.

use crate::ir::Kernel;
use crate::records::{self, Index, Key, Record, RecordStore, Target};
use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, OnceLock};

/// Where the schedule used for a (kernel, shapes, device) came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Source {
    Embedded,
    Cache,
    Tuned,
    Nearest,
    Default,
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Source::Embedded => "embedded",
            Source::Cache => "cache",
            Source::Tuned => "tuned",
            Source::Nearest => "nearest",
            Source::Default => "default",
        })
    }
}

#[derive(Default)]
struct Embedded {
    texts: Vec<&'static str>,
    index: Option<Arc<Index>>,
}

fn embedded() -> &'static Mutex<Embedded> {
    static E: OnceLock<Mutex<Embedded>> = OnceLock::new();
    E.get_or_init(Default::default)
}

/// Registers records (JSON Lines, the records format) embedded in the binary. Called by
/// `include_tuned!` before `main`; cheap: parsing happens at the first dispatch.
pub fn register_embedded(records: &'static str) {
    let mut e = embedded().lock().unwrap_or_else(|p| p.into_inner());
    e.texts.push(records);
    e.index = None;
}

fn parse_lines(text: &str) -> Vec<Record> {
    text.lines()
        .filter_map(|l| serde_json::from_str::<Record>(l).ok())
        .filter(|r| r.version == records::RECORD_VERSION && records::known_dtype(&r.dtype))
        .collect()
}

/// Every embedded record (not only the best per key: transfer learns from them all).
pub fn embedded_records() -> Vec<Record> {
    let e = embedded().lock().unwrap_or_else(|p| p.into_inner());
    e.texts.iter().flat_map(|t| parse_lines(t)).collect()
}

/// The index of every embedded record.
pub fn embedded_index() -> Arc<Index> {
    let mut e = embedded().lock().unwrap_or_else(|p| p.into_inner());
    if let Some(i) = &e.index {
        return i.clone();
    }
    let mut index = Index::new();
    for text in &e.texts {
        index.extend(&parse_lines(text));
    }
    let index = Arc::new(index);
    e.index = Some(index.clone());
    index
}

fn cache_slot() -> &'static Mutex<HashMap<std::path::PathBuf, Arc<Index>>> {
    static C: OnceLock<Mutex<HashMap<std::path::PathBuf, Arc<Index>>>> = OnceLock::new();
    C.get_or_init(Default::default)
}

/// The index of the user cache ([`records::cache_dir`]; each folder read once per process,
/// [`forget_cache`] re-reads them).
pub fn cache_index() -> Arc<Index> {
    let dir = records::cache_dir();
    let mut slot = cache_slot().lock().unwrap_or_else(|p| p.into_inner());
    if let Some(i) = slot.get(&dir) {
        return i.clone();
    }
    // A missing or unreadable cache is an empty one (the warning for bad lines is `read`'s).
    let index = Arc::new(records::JsonlFile::user_cache().index().unwrap_or_default());
    slot.insert(dir, index.clone());
    index
}

/// Makes the next lookup re-read the user cache (after this process wrote to it).
pub fn forget_cache() {
    cache_slot()
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clear();
}

/// The key of a call of `kernel` on this machine's CPU.
pub fn cpu_key(kernel: &Kernel, shapes: &[&[usize]], codegen: u32) -> Key {
    Key {
        kernel: kernel.fingerprint(),
        shapes: shapes.iter().map(|s| s.to_vec()).collect(),
        dtype: crate::records::dtype_key(kernel),
        target: this_cpu().clone(),
        codegen,
    }
}

/// The key of a call of `kernel` on a GPU (`target` from [`Target::cuda`]).
pub fn cuda_key(kernel: &Kernel, shapes: &[&[usize]], target: Target, codegen: u32) -> Key {
    Key {
        kernel: kernel.fingerprint(),
        shapes: shapes.iter().map(|s| s.to_vec()).collect(),
        dtype: crate::records::dtype_key(kernel),
        target,
        codegen,
    }
}

/// This machine's CPU target (computed once).
pub fn this_cpu() -> &'static Target {
    static T: OnceLock<Target> = OnceLock::new();
    T.get_or_init(Target::this_cpu)
}

/// The best record for `key` from the embedded records, else the user cache.
pub fn lookup(key: &Key) -> Option<(Record, Source)> {
    if let Some(r) = embedded_index().best(key) {
        return Some((r.clone(), Source::Embedded));
    }
    cache_index().best(key).map(|r| (r.clone(), Source::Cache))
}

/// The best record of the nearest tuned shape of the same kernel on this target.
pub fn nearest(key: &Key) -> Option<Record> {
    if let Some(r) = embedded_index().nearest(key) {
        return Some(r.clone());
    }
    cache_index().nearest(key).cloned()
}

/// (kernel fingerprint, shapes, device name).
type MemoKey = (String, Vec<Vec<usize>>, &'static str);

/// A memo of decisions per (fingerprint, shapes, device).
pub struct Memo<T> {
    map: Mutex<HashMap<MemoKey, Arc<T>>>,
}

impl<T> Default for Memo<T> {
    fn default() -> Self {
        Memo {
            map: Mutex::new(HashMap::new()),
        }
    }
}

impl<T> Memo<T> {
    /// Replaces the memoized value (background tuning switches later calls to its result).
    pub fn replace(
        &self,
        fingerprint: &str,
        shapes: &[Vec<usize>],
        device: &'static str,
        value: T,
    ) {
        let key = (fingerprint.to_string(), shapes.to_vec(), device);
        self.map
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key, Arc::new(value));
    }

    /// The memoized value, or `make()`'s (stored when `Ok`). Concurrent first calls may both
    /// run `make`; the first stored wins.
    pub fn get_or_try<E>(
        &self,
        fingerprint: &str,
        shapes: &[&[usize]],
        device: &'static str,
        make: impl FnOnce() -> Result<T, E>,
    ) -> Result<Arc<T>, E> {
        let key = (
            fingerprint.to_string(),
            shapes.iter().map(|s| s.to_vec()).collect::<Vec<_>>(),
            device,
        );
        if let Some(v) = self.map.lock().unwrap_or_else(|p| p.into_inner()).get(&key) {
            return Ok(v.clone());
        }
        let v = Arc::new(make()?);
        let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        Ok(map.entry(key).or_insert(v).clone())
    }
}
