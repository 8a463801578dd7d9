//! CUDA C → PTX with NVRTC, loaded at run time through `cudarc` (`dynamic-loading`).
//!
//! NVRTC is found on the library path (`libnvrtc.so.13`); its builtins library must sit
//! beside it (the PyPI wheel `nvidia-cuda-nvrtc` ships both in `nvidia/cu13/lib`). Every
//! call checks the library is present first: `cudarc` panics when it is missing.

use crate::Error;
use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

/// PTX compiled in this process, by (CUDA version, architecture, source): lets a measurer
/// compile a batch on several threads first and load each kernel afterwards for free, disk
/// cache or not.
static MEMORY: OnceLock<Mutex<HashMap<String, String>>> = OnceLock::new();
/// The memory cache is emptied when it reaches this many entries.
const MEMORY_ENTRIES: usize = 256;

/// Whether NVRTC can be loaded.
pub fn available() -> bool {
    // SAFETY: only tries to dlopen the library; no NVRTC call is made.
    unsafe { cudarc::nvrtc::sys::is_culib_present() }
}

/// Compiles `source` to PTX for a virtual architecture such as `compute_90`.
///
/// Errors: [`Error::DeviceUnavailable`] when NVRTC cannot be loaded, [`Error::Compile`] with
/// NVRTC's log when the source does not compile.
pub fn compile_ptx(name: &str, source: &str, arch: &str) -> Result<String, Error> {
    if !available() {
        return Err(Error::DeviceUnavailable {
            device: "cuda".into(),
            reason: "NVRTC (libnvrtc.so.13) was not found on the library path; install the CUDA toolkit or the `nvidia-cuda-nvrtc` wheel and add its lib folder to LD_LIBRARY_PATH".into(),
        });
    }
    if source.contains('\0') {
        return Err(Error::Compile {
            kernel: name.into(),
            compiler: "nvrtc".into(),
            log: "source contains a NUL byte".into(),
        });
    }
    let opts = cudarc::nvrtc::CompileOptions {
        options: vec![format!("--gpu-architecture={arch}"), "--std=c++17".into()],
        name: Some(format!("{}.cu", crate::codegen::c_identifier(name))),
        ..Default::default()
    };
    let start = std::time::Instant::now();
    let result = cudarc::nvrtc::compile_ptx_with_opts(source, opts);
    crate::log::compiled(name, "nvrtc", start.elapsed().as_secs_f64());
    result.map(|ptx| ptx.to_src()).map_err(|e| Error::Compile {
        kernel: name.into(),
        compiler: format!("nvrtc --gpu-architecture={arch}"),
        log: match e {
            cudarc::nvrtc::CompileError::CompileError { log, .. } => {
                log.to_string_lossy().into_owned()
            }
            other => format!("{other:?}"),
        },
    })
}

/// [`compile_ptx`] through a per-process memory cache and the disk cache beside the records:
/// `<cache>/objects/<key>-<content>.ptx`, the key covering the source, the architecture and
/// the CUDA major version, the content hash checked before the PTX is used (see
/// [`super::object_cache`]), so a second process pays no NVRTC compile and a damaged file is
/// compiled again. Files are published by rename. `TENSOR_DSL_NO_DISK_CACHE=1` turns the
/// cache off.
pub fn compile_ptx_cached(name: &str, source: &str, arch: &str) -> Result<String, Error> {
    // This build loads NVRTC for CUDA 13 (cudarc `cuda-13000`); its PTX for a given virtual
    // architecture runs on any CUDA 13 driver.
    let key = format!("nvrtc cuda-13\n{arch}\n{source}");
    // The memory cache keeps the whole key: a hash collision must not hand back other code.
    let memory = MEMORY.get_or_init(Default::default);
    if let Some(ptx) = memory.lock().unwrap_or_else(|p| p.into_inner()).get(&key) {
        return Ok(ptx.clone());
    }
    let dir = super::object_cache::objects_dir().filter(|_| available());
    let remember = |ptx: &String| {
        let mut map = memory.lock().unwrap_or_else(|p| p.into_inner());
        // Bounded: a long tuning session must not hold every candidate's PTX.
        if map.len() >= MEMORY_ENTRIES {
            map.clear();
        }
        map.insert(key.clone(), ptx.clone());
    };
    if let Some((path, bytes)) = dir
        .as_deref()
        .and_then(|d| super::object_cache::lookup(d, &key, "ptx"))
    {
        match String::from_utf8(bytes) {
            Ok(ptx) if ptx.contains(".entry") && !ptx.contains('\0') => {
                remember(&ptx);
                return Ok(ptx);
            }
            _ => super::object_cache::discard_damaged(&path),
        }
    }
    let ptx = compile_ptx(name, source, arch)?;
    remember(&ptx);
    if let Some(d) = &dir {
        super::object_cache::store(d, &key, "ptx", ptx.as_bytes());
    }
    Ok(ptx)
}
