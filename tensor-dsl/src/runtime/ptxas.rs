//! PTX → SASS with `ptxas -v`, for what it reports: registers per thread, spills and
//! shared memory (features for the cost model, and a check that PTX assembles for a real
//! architecture without a GPU present).
//!
//! ```
//! let log = "ptxas info    : Compiling entry function 'td_kernel' for 'sm_90'\n\
//!            ptxas info    : Function properties for td_kernel\n\
//!            \x20   8 bytes stack frame, 4 bytes spill stores, 12 bytes spill loads\n\
//!            ptxas info    : Used 40 registers, used 1 barriers, 4352 bytes smem, 392 bytes cmem[0]\n";
//! let r = tensor_dsl::runtime::ptxas::parse_report(log);
//! assert_eq!((r.registers, r.spill_stores, r.spill_loads, r.shared_bytes, r.stack_bytes), (40, 4, 12, 4352, 8));
//! ```

use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::process::Command;

/// What `ptxas -v` says about one kernel.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PtxasReport {
    pub registers: u32,
    pub spill_stores: u32,
    pub spill_loads: u32,
    /// Static shared memory per block, in bytes.
    pub shared_bytes: u32,
    pub stack_bytes: u32,
}

/// `$TENSOR_DSL_PTXAS`, else `ptxas` on `PATH`, else `$CUDA_HOME/bin/ptxas`.
pub fn find() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("TENSOR_DSL_PTXAS") {
        return Some(PathBuf::from(p));
    }
    let on_path = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join("ptxas"))
            .find(|p| p.is_file())
    });
    on_path.or_else(|| {
        ["CUDA_HOME", "CUDA_PATH"]
            .iter()
            .filter_map(std::env::var_os)
            .map(|h| PathBuf::from(h).join("bin/ptxas"))
            .find(|p| p.is_file())
    })
}

fn number_before(text: &str, suffix: &str) -> Option<u32> {
    let end = text.find(suffix)?;
    text[..end].split_whitespace().last()?.parse().ok()
}

/// Parses `ptxas -v` output (the last entry function in it).
pub fn parse_report(log: &str) -> PtxasReport {
    let mut r = PtxasReport::default();
    for line in log.lines() {
        if line.contains("bytes stack frame") {
            r.stack_bytes = number_before(line, "bytes stack frame").unwrap_or(0);
            r.spill_stores = number_before(line, "bytes spill stores").unwrap_or(0);
            r.spill_loads = number_before(line, "bytes spill loads").unwrap_or(0);
        }
        if let Some(rest) = line.split("Used ").nth(1) {
            r.registers = number_before(rest, "registers").unwrap_or(0);
            r.shared_bytes = number_before(rest, "bytes smem").unwrap_or(0);
        }
    }
    r
}

/// Assembles `ptx` for a real architecture such as `sm_90` and returns the report, or
/// ptxas's error output.
pub fn assemble(ptx: &str, arch: &str) -> Result<PtxasReport, String> {
    assemble_cubin(ptx, arch).map(|(_, report)| report)
}

/// A fresh file path `k<n>.<ext>` in this process's scratch folder for ptxas and nvdisasm
/// (the caller removes the file).
pub(crate) fn scratch(ext: &str) -> Result<PathBuf, String> {
    static SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let dir = std::env::temp_dir().join(format!("tensor-dsl-ptxas-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let n = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    Ok(dir.join(format!("k{n}.{ext}")))
}

/// Assembles `ptx` for a real architecture such as `sm_90` with `ptxas -v`: the cubin and
/// the report, or ptxas's error output.
pub fn assemble_cubin(ptx: &str, arch: &str) -> Result<(Vec<u8>, PtxasReport), String> {
    let ptxas = find().ok_or("ptxas not found: set TENSOR_DSL_PTXAS or put it on PATH")?;
    let input = scratch("ptx")?;
    let output = input.with_extension("cubin");
    std::fs::write(&input, ptx).map_err(|e| e.to_string())?;
    let result = Command::new(&ptxas)
        .arg(format!("-arch={arch}"))
        .arg("-v")
        .arg("-o")
        .arg(&output)
        .arg(&input)
        .output();
    let _ = std::fs::remove_file(&input);
    let cubin = std::fs::read(&output);
    let _ = std::fs::remove_file(&output);
    let out = result.map_err(|e| format!("cannot run {}: {e}", ptxas.display()))?;
    let log = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if !out.status.success() {
        return Err(log);
    }
    let cubin = cubin.map_err(|e| format!("ptxas wrote no cubin: {e}"))?;
    Ok((cubin, parse_report(&log)))
}
