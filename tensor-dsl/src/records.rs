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
//! };
//! let line = serde_json::to_string(&r).unwrap();
//! assert_eq!(serde_json::from_str::<Record>(&line).unwrap(), r);
//! ```

use crate::Error;
use serde::{Deserialize, Serialize};
use std::io::Write;
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
}

/// One measured point.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Record {
    pub version: u32,
    /// Kernel fingerprint.
    pub kernel: String,
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
}

/// The user cache directory: `$TENSOR_DSL_CACHE`, else `$XDG_CACHE_HOME/tensor-dsl`, else
/// `$HOME/.cache/tensor-dsl`, else the temp directory.
pub fn cache_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("TENSOR_DSL_CACHE").filter(|d| !d.is_empty()) {
        return PathBuf::from(d);
    }
    if let Some(d) = std::env::var_os("XDG_CACHE_HOME").filter(|d| !d.is_empty()) {
        return PathBuf::from(d).join("tensor-dsl");
    }
    if let Some(h) = std::env::var_os("HOME").filter(|d| !d.is_empty()) {
        return PathBuf::from(h).join(".cache").join("tensor-dsl");
    }
    std::env::temp_dir().join("tensor-dsl-cache")
}

/// The default records file in the user cache.
pub fn default_records_file() -> PathBuf {
    cache_dir().join("records.jsonl")
}

/// Appends records to a JSON Lines file, one `write` per line (appends of whole lines from
/// several processes interleave but do not tear).
pub fn append(path: &Path, records: &[Record]) -> Result<(), Error> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)?;
    for r in records {
        let mut line = serde_json::to_string(r).map_err(|e| Error::Io(std::io::Error::other(e)))?;
        line.push('\n');
        file.write_all(line.as_bytes())?;
    }
    Ok(())
}

/// Reads every well-formed record of the current version; other lines are skipped and
/// counted.
pub fn read(path: &Path) -> Result<(Vec<Record>, usize), Error> {
    let text = std::fs::read_to_string(path)?;
    let mut skipped = 0;
    let mut out = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        match serde_json::from_str::<Record>(line) {
            Ok(r) if r.version == RECORD_VERSION => out.push(r),
            _ => skipped += 1,
        }
    }
    Ok((out, skipped))
}
