//! Tuning records: one JSON object per measured point, one per line (JSON Lines).
//!
//! A record's key is (kernel fingerprint, shapes, dtype, target, codegen version): a record
//! is only ever used for exactly that key. The target is the device name plus, for a CPU,
//! its ISA flags that matter to generated code, or, for a GPU, its compute capability.
//!
//! ```
//! use tensor_dsl::records::{Record, Target};
//! let r = Record {
//!     version: tensor_dsl::records::RECORD_VERSION,
//!     kernel: "ff683267e78ef47e".into(),
//!     name: "matmul".into(),
//!     kernel_text: "c[[i, j]] += (a[[i, k]] * b[[k, j]]);".into(),
//!     shapes: vec![vec![64, 32], vec![32, 48], vec![64, 48]],
//!     dtype: "f32".into(),
//!     target: Target { device: "cpu".into(), name: "Example CPU".into(), detail: "avx2,fma".into() },
//!     codegen: 2,
//!     config: "vector_axis=j;vector=32".into(),
//!     seconds: Some(1.5e-5),
//!     samples: vec![1.5e-5],
//!     error: None,
//!     gflops: Some(13.1),
//!     strategy: "random".into(),
//!     unix_time: 0,
//!     pair: None,
//! };
//! let line = serde_json::to_string(&r).unwrap();
//! assert_eq!(serde_json::from_str::<Record>(&line).unwrap(), r);
//! ```

use crate::{files, Error};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// Version of the record format.
pub const RECORD_VERSION: u32 = 1;

/// The machine a record was measured on.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Target {
    /// `cpu` or `cuda`.
    pub device: String,
    /// CPU model name or GPU name.
    pub name: String,
    /// CPU: ISA flags that change generated code; GPU: `sm_XY`.
    pub detail: String,
}

impl Target {
    /// This machine's CPU.
    pub fn this_cpu() -> Target {
        let info = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let name = info
            .lines()
            .find_map(|l| {
                l.strip_prefix("model name")
                    .map(|r| r.trim_start_matches([' ', '\t', ':']).trim().to_string())
            })
            .unwrap_or_else(|| std::env::consts::ARCH.to_string());
        let mut flags = Vec::new();
        #[cfg(target_arch = "x86_64")]
        {
            for (flag, present) in [
                ("avx512f", std::arch::is_x86_feature_detected!("avx512f")),
                ("avx2", std::arch::is_x86_feature_detected!("avx2")),
                ("fma", std::arch::is_x86_feature_detected!("fma")),
            ] {
                if present {
                    flags.push(flag);
                }
            }
        }
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
        Target {
            device: "cpu".into(),
            name,
            detail: format!("{};threads={threads}", flags.join(",")),
        }
    }

    /// A CUDA GPU: its name and compute capability (`sm` = major·10 + minor).
    ///
    /// ```
    /// let t = tensor_dsl::records::Target::cuda("NVIDIA H100 80GB HBM3", 90);
    /// assert_eq!((t.device.as_str(), t.detail.as_str()), ("cuda", "sm_90"));
    /// ```
    pub fn cuda(name: &str, sm: u32) -> Target {
        Target {
            device: "cuda".into(),
            name: name.to_string(),
            detail: format!("sm_{sm}"),
        }
    }
}

/// One measured point.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Record {
    pub version: u32,
    /// Kernel fingerprint.
    pub kernel: String,
    /// The kernel's name (the Rust function's, or the CLI's `--name`), for people and
    /// `records show`; not part of the key (kernels with one fingerprint share records).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// The kernel in the language's syntax, for people reading the file.
    pub kernel_text: String,
    /// Shapes of the parameters, in declaration order.
    pub shapes: Vec<Vec<usize>>,
    pub dtype: String,
    pub target: Target,
    /// Code generator version the config was measured with.
    pub codegen: u32,
    /// The config's text form in its template's space.
    pub config: String,
    /// Median seconds, for a valid measurement.
    pub seconds: Option<f64>,
    pub samples: Vec<f64>,
    /// Why the point is invalid.
    pub error: Option<String>,
    pub gflops: Option<f64>,
    /// The strategy that proposed it.
    pub strategy: String,
    pub unix_time: u64,
    /// The side-by-side round of a search's confirmation it was measured in
    /// ([`tuner::Trial::pair`]): the [`Index`] compares the two records of a round by their
    /// ratio, as the search did ([`tuner::paired_best`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pair: Option<u64>,
}

thread_local! {
    /// The cache directory of the call running on this thread ([`with_cache_dir`]).
    static CALL_CACHE_DIR: std::cell::RefCell<Option<PathBuf>> = const { std::cell::RefCell::new(None) };
}

/// Runs `f` with `dir` (when `Some`) as this thread's cache directory: what a call with
/// [`crate::Options::cache_dir`] does for its lookups, tuning and compiled objects.
/// `TENSOR_DSL_CACHE` still overrides it.
pub fn with_cache_dir<T>(dir: Option<&Path>, f: impl FnOnce() -> T) -> T {
    let Some(dir) = dir else {
        return f();
    };
    let previous = CALL_CACHE_DIR.with(|c| c.replace(Some(dir.to_path_buf())));
    struct Restore(Option<PathBuf>);
    impl Drop for Restore {
        fn drop(&mut self) {
            let previous = self.0.take();
            CALL_CACHE_DIR.with(|c| *c.borrow_mut() = previous);
        }
    }
    let _restore = Restore(previous);
    f()
}

/// The user cache directory: `$TENSOR_DSL_CACHE`, else the call's
/// [`crate::Options::cache_dir`], else `$XDG_CACHE_HOME/tensor-dsl`, else
/// `$HOME/.cache/tensor-dsl`, else the temp directory.
pub fn cache_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("TENSOR_DSL_CACHE").filter(|d| !d.is_empty()) {
        return PathBuf::from(d);
    }
    if let Some(d) = CALL_CACHE_DIR.with(|c| c.borrow().clone()) {
        return d;
    }
    if let Some(d) = std::env::var_os("XDG_CACHE_HOME").filter(|d| !d.is_empty()) {
        return PathBuf::from(d).join("tensor-dsl");
    }
    if let Some(h) = std::env::var_os("HOME").filter(|d| !d.is_empty()) {
        return PathBuf::from(h).join(".cache").join("tensor-dsl");
    }
    std::env::temp_dir().join("tensor-dsl-cache")
}

/// Where records live: one extension point (a file of JSON Lines today; a database or a
/// remote store would be another implementation). Dispatch reads the user cache and
/// first-call tuning writes to it through this trait.
pub trait RecordStore {
    /// Adds `records`, durably and safely with concurrent writers.
    fn commit(&self, records: &[Record]) -> Result<(), Error>;
    /// Every readable record of this build's format.
    fn load(&self) -> Result<Vec<Record>, Error>;
    /// The best-of index of [`RecordStore::load`].
    fn index(&self) -> Result<Index, Error> {
        let mut index = Index::new();
        index.extend(&self.load()?);
        Ok(index)
    }
}

/// A JSON Lines records file: [`append`] to commit, [`read`] to load.
///
/// ```
/// use tensor_dsl::records::{JsonlFile, RecordStore};
/// let dir = std::env::temp_dir().join(format!("td-store-doc-{}", std::process::id()));
/// let store = JsonlFile::new(dir.join("records.jsonl"));
/// assert!(store.load().is_err()); // no file yet
/// store.commit(&[]).unwrap();
/// assert!(store.load().unwrap().is_empty());
/// # std::fs::remove_dir_all(&dir).ok();
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JsonlFile {
    pub path: PathBuf,
}

impl JsonlFile {
    pub fn new(path: impl Into<PathBuf>) -> JsonlFile {
        JsonlFile { path: path.into() }
    }

    /// The user cache ([`default_records_file`]).
    pub fn user_cache() -> JsonlFile {
        JsonlFile::new(default_records_file())
    }
}

impl RecordStore for JsonlFile {
    fn commit(&self, records: &[Record]) -> Result<(), Error> {
        append(&self.path, records)
    }

    fn load(&self) -> Result<Vec<Record>, Error> {
        read(&self.path).map(|(records, _skipped)| records)
    }
}

/// The default records file in the user cache.
pub fn default_records_file() -> PathBuf {
    cache_dir().join("records.jsonl")
}

/// Adds records to a JSON Lines file safely with other processes: under an exclusive lock
/// on `<file>.lock`, the new lines are appended to the file (it is not read or rewritten, so
/// a save costs the size of what is saved, not of the file). A file cut short in the middle
/// of a line first gets the newline it lacks, so the damaged line stays one unreadable line.
/// When the file then exceeds [`max_bytes`] it is [`compact`]ed.
///
/// The file is written as [`crate::files`] writes every file: a symbolic link is written
/// through to its target (and stays a link), `/dev/null` saves nothing (and gets no lock
/// file), and a device, FIFO, socket or directory is refused with [`Error::NotAFile`].
pub fn append(path: &Path, records: &[Record]) -> Result<(), Error> {
    append_bounded(path, records, max_bytes())
}

/// The most best records [`compact`] keeps per key.
pub const KEEP_PER_KEY: usize = 16;

/// The size above which a records file is compacted: an eighth of `TENSOR_DSL_CACHE_MAX_MB`
/// (see [`crate::runtime::object_cache::max_bytes`]; compiled objects get the rest).
pub fn max_bytes() -> u64 {
    crate::runtime::object_cache::max_bytes() / 8
}

/// [`append`] with an explicit size bound in bytes.
pub fn append_bounded(path: &Path, records: &[Record], max_bytes: u64) -> Result<(), Error> {
    use std::io::{Read, Seek, SeekFrom, Write};
    let files::Destination::File(path) = files::destination(path)? else {
        return Ok(());
    };
    let _lock = files::lock(&path)?;
    let named = |e: std::io::Error| {
        Error::Io(std::io::Error::new(
            e.kind(),
            format!("{}: {e}", path.display()),
        ))
    };
    let mut file = std::fs::File::options()
        .create(true)
        .read(true)
        .append(true)
        .open(&path)
        .map_err(named)?;
    let len = file.metadata().map_err(named)?.len();
    let mut text = String::new();
    if len > 0 {
        let mut last = [0u8; 1];
        file.seek(SeekFrom::Start(len - 1)).map_err(named)?;
        file.read_exact(&mut last).map_err(named)?;
        if last[0] != b'\n' {
            text.push('\n');
        }
    }
    text.push_str(&jsonl(records)?);
    file.write_all(text.as_bytes()).map_err(named)?;
    file.sync_data().map_err(named)?;
    if len + text.len() as u64 > max_bytes {
        compact_locked(&path, KEEP_PER_KEY, max_bytes)?;
    }
    Ok(())
}

/// Rewrites a records file (under its lock, atomically) keeping, per key, the `keep`
/// fastest valid records; unreadable, foreign-version and invalid lines go. If that is still
/// over `max_bytes`, fewer per key are kept (down to the best one), then the keys measured
/// longest ago are dropped. Returns how many records remain.
pub fn compact(path: &Path, keep: usize, max_bytes: u64) -> Result<usize, Error> {
    let files::Destination::File(path) = files::destination(path)? else {
        return Ok(0);
    };
    let _lock = files::lock(&path)?;
    compact_locked(&path, keep, max_bytes)
}

fn compact_locked(path: &Path, keep: usize, max_bytes: u64) -> Result<usize, Error> {
    let (records, _) = read(path)?;
    let mut by_key: std::collections::HashMap<Key, Vec<Record>> = Default::default();
    for r in records {
        if r.error.is_none() && r.seconds.is_some_and(|s| s.is_finite() && s > 0.0) {
            by_key.entry(r.key()).or_default().push(r);
        }
    }
    let mut groups: Vec<Vec<Record>> = by_key.into_values().map(best_first).collect();
    // Newest keys first, so the oldest are the ones dropped last.
    groups.sort_by_key(|g| std::cmp::Reverse(g.iter().map(|r| r.unix_time).max().unwrap_or(0)));
    let mut keep = keep.max(1);
    loop {
        let mut text = String::new();
        let mut kept = 0;
        for g in &groups {
            let part = jsonl(&g[..g.len().min(keep)])?;
            if keep == 1 && (text.len() + part.len()) as u64 > max_bytes {
                break;
            }
            text.push_str(&part);
            kept += g.len().min(keep);
        }
        if text.len() as u64 <= max_bytes || keep == 1 {
            files::replace(path, text.as_bytes())?;
            return Ok(kept);
        }
        keep /= 2;
    }
}

/// Writes exactly `records` to a JSON Lines file, replacing what it held (atomically, under
/// the rules of [`crate::files`]: through symbolic links, never over a special file, nothing
/// for `/dev/null`). No lock is taken and no lock file is left: this is for files one
/// process produces, such as a build's output or records exported for shipping; use
/// [`append`] for files that several processes add to.
///
/// ```
/// use tensor_dsl::records::{read, write};
/// let path = std::env::temp_dir().join(format!("td-write-doc-{}.jsonl", std::process::id()));
/// write(&path, &[]).unwrap();
/// assert_eq!(read(&path).unwrap().0.len(), 0);
/// # std::fs::remove_file(&path).ok();
/// ```
pub fn write(path: &Path, records: &[Record]) -> Result<(), Error> {
    files::replace(path, jsonl(records)?.as_bytes())
}

/// Records as JSON Lines text.
fn jsonl(records: &[Record]) -> Result<String, Error> {
    let mut text = String::new();
    for r in records {
        text.push_str(&serde_json::to_string(r).map_err(|e| Error::Io(std::io::Error::other(e)))?);
        text.push('\n');
    }
    Ok(text)
}

/// The `dtype` field of a kernel's records: `f32` when every parameter is `f32` (as records
/// written before other element types existed say), else each parameter's type,
/// `a=bf16,b=bf16,c=f32`.
pub fn dtype_key(kernel: &crate::ir::Kernel) -> String {
    if kernel
        .params
        .iter()
        .all(|p| p.dtype == crate::ir::DType::F32)
    {
        "f32".into()
    } else {
        kernel.dtypes_text()
    }
}

/// Whether this build knows every element type a record's `dtype` field names (a record
/// from a newer build with another type is skipped like a foreign-version line).
pub fn known_dtype(text: &str) -> bool {
    text.split(',').all(|part| {
        let ty = part.split_once('=').map_or(part, |(_, t)| t);
        crate::ir::DType::from_name(ty.trim()).is_some()
    })
}

/// Reads every well-formed record of the current format version. Lines that are not (a
/// corrupt or truncated file, another version's format, an element type this build does
/// not know) are skipped; the first time this
/// happens in a process, one warning goes to stderr. Returns the records and the number of
/// skipped lines.
pub fn read(path: &Path) -> Result<(Vec<Record>, usize), Error> {
    let bytes = std::fs::read(path)?;
    let text = String::from_utf8_lossy(&bytes);
    let mut skipped = 0;
    let mut out = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        match serde_json::from_str::<Record>(line) {
            Ok(r) if r.version == RECORD_VERSION && known_dtype(&r.dtype) => out.push(r),
            _ => skipped += 1,
        }
    }
    if skipped > 0 {
        static WARNED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
        if !WARNED.swap(true, std::sync::atomic::Ordering::Relaxed) {
            crate::log::warn(format_args!(
                "ignoring {skipped} unreadable or foreign-version line(s) in {} (the next write repairs the file)",
                path.display()
            ));
        }
    }
    Ok((out, skipped))
}

/// What a record is for: it is only used for exactly this key.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Key {
    pub kernel: String,
    pub shapes: Vec<Vec<usize>>,
    pub dtype: String,
    pub target: Target,
    pub codegen: u32,
}

impl Record {
    pub fn key(&self) -> Key {
        Key {
            kernel: self.kernel.clone(),
            shapes: self.shapes.clone(),
            dtype: self.dtype.clone(),
            target: self.target.clone(),
            codegen: self.codegen,
        }
    }
}

/// The fastest valid config per key: O(1) lookups at dispatch.
///
/// A config measured more than once (Droplet's remeasurements, a second tuning run) is
/// judged by the upper median of its records' times, not by its fastest one: the minimum
/// of noisy times favours the point with the luckiest measurement (the winner's curse).
/// Configs measured side by side in a search's confirmation are judged by their ratio in
/// those rounds, as the search judged them ([`tuner::paired_best`]). The record kept
/// for a key is the one of its best config whose time is its upper median.
#[derive(Clone, Debug, Default)]
pub struct Index {
    best: std::collections::HashMap<Key, Record>,
    /// Every valid record, per key and config (in the order they came).
    times: std::collections::HashMap<Key, std::collections::HashMap<String, Vec<Record>>>,
}

impl Index {
    pub fn new() -> Index {
        Index::default()
    }

    /// Adds records, keeping per key the config with the lowest upper median time (ties:
    /// the smaller config text), or the one that ran faster next to it in the rounds of a
    /// search's confirmation (records that share a [`Record::pair`]).
    pub fn extend<'a>(&mut self, records: impl IntoIterator<Item = &'a Record>) {
        let mut touched = std::collections::HashSet::new();
        for r in records {
            if r.error.is_some() || r.seconds.is_none_or(|s| !(s.is_finite() && s > 0.0)) {
                continue;
            }
            let key = r.key();
            self.times
                .entry(key.clone())
                .or_default()
                .entry(r.config.clone())
                .or_default()
                .push(r.clone());
            touched.insert(key);
        }
        for key in touched {
            let Some(configs) = self.times.get(&key) else {
                continue;
            };
            // The search's rule: upper medians, then the rounds of its confirmation.
            let samples: Vec<(&String, f64, Option<u64>)> = configs
                .iter()
                .flat_map(|(config, rs)| rs.iter().map(move |r| (config, secs(r), r.pair)))
                .collect();
            let best = tuner::paired_best(&samples)
                .and_then(|(config, _)| configs.get(config))
                .and_then(|rs| upper_median(rs))
                .cloned();
            if let Some(r) = best {
                self.best.insert(key, r);
            }
        }
    }

    pub fn best(&self, key: &Key) -> Option<&Record> {
        self.best.get(key)
    }

    pub fn len(&self) -> usize {
        self.best.len()
    }

    pub fn is_empty(&self) -> bool {
        self.best.is_empty()
    }

    /// Every best record, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = &Record> {
        self.best.values()
    }

    /// The best record of the tuned shape nearest to `key`'s (same kernel, dtype, target and
    /// codegen; distance = sum over dimensions of |log2 ratio|), excluding `key` itself.
    pub fn nearest(&self, key: &Key) -> Option<&Record> {
        let distance = |shapes: &[Vec<usize>]| -> Option<f64> {
            if shapes.len() != key.shapes.len() {
                return None;
            }
            let mut d = 0.0;
            for (a, b) in shapes.iter().zip(&key.shapes) {
                if a.len() != b.len() {
                    return None;
                }
                for (&x, &y) in a.iter().zip(b) {
                    d += ((x.max(1) as f64) / (y.max(1) as f64)).log2().abs();
                }
            }
            Some(d)
        };
        self.best
            .iter()
            .filter(|(k, _)| {
                k.kernel == key.kernel
                    && k.dtype == key.dtype
                    && k.target == key.target
                    && k.codegen == key.codegen
                    && k.shapes != key.shapes
            })
            .filter_map(|(k, r)| distance(&k.shapes).map(|d| (d, r)))
            .min_by(|a, b| a.0.total_cmp(&b.0))
            .map(|(_, r)| r)
    }
}

/// One key's records in the order compaction keeps them: config by config, the config
/// the [`Index`] would choose first, then the others by their upper medians, and within a
/// config its median record first, then the others fastest first, so that what a tight
/// bound keeps still judges each config as the whole set did.
fn best_first(records: Vec<Record>) -> Vec<Record> {
    let samples: Vec<(String, f64, Option<u64>)> = records
        .iter()
        .filter(|r| r.seconds.is_some())
        .map(|r| (r.config.clone(), secs(r), r.pair))
        .collect();
    let chosen = tuner::paired_best(&samples).map(|(config, _)| config);
    let mut by_config: std::collections::HashMap<String, Vec<Record>> = Default::default();
    for r in records {
        by_config.entry(r.config.clone()).or_default().push(r);
    }
    let mut configs: Vec<(f64, String, Vec<Record>)> = by_config
        .into_iter()
        .map(|(config, mut rs)| {
            rs.sort_by(|a, b| secs(a).total_cmp(&secs(b)));
            let median = rs.remove(rs.len() / 2);
            let m = secs(&median);
            rs.insert(0, median);
            (m, config, rs)
        })
        .collect();
    let other = |config: &String| chosen.as_ref() != Some(config);
    configs.sort_by(|a, b| {
        (other(&a.1).cmp(&other(&b.1)))
            .then_with(|| a.0.total_cmp(&b.0))
            .then_with(|| a.1.cmp(&b.1))
    });
    configs.into_iter().flat_map(|(_, _, rs)| rs).collect()
}

/// The record whose time is the upper median of `records`' times (for two, the slower).
fn upper_median(records: &[Record]) -> Option<&Record> {
    let mut sorted: Vec<&Record> = records.iter().filter(|r| r.seconds.is_some()).collect();
    sorted.sort_by(|a, b| secs(a).total_cmp(&secs(b)));
    sorted.get(sorted.len() / 2).copied()
}

/// A record's seconds, a record without a time last.
fn secs(r: &Record) -> f64 {
    r.seconds.unwrap_or(f64::INFINITY)
}
