//! CUDA C → CUBIN (SASS for the device's real architecture, `-arch=sm_XY`) or PTX with NVRTC,
//! loaded at run time through `cudarc` (`dynamic-loading`).
//!
//! NVRTC is found on the library path: `cudarc` tries `libnvrtc.so`, then `libnvrtc.so.13`,
//! then `libnvrtc.so.12` (and older), so the CUDA 13 toolkit, the PyPI wheel
//! `nvidia-cuda-nvrtc` (`nvidia/cu13/lib`) and PyTorch's CUDA 12 wheels (`nvidia/cuda_nvrtc/lib`)
//! all work; its builtins library must sit beside it. [`version`] says which one was loaded,
//! and every cache key names it. Every call checks the library is present first: `cudarc`
//! panics when it is missing.
//!
//! The runtime runs CUBINs ([`compile_cubin_cached`], see [`super::cubin`] for why); PTX
//! ([`compile_ptx`]) is for the static checks and the fallback.

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
            reason: NO_NVRTC.into(),
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
    // The key names what the file holds: PTX, for this architecture, from this NVRTC.
    let key = format!("nvrtc {}\nptx {arch}\n{source}", version_text());
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

// ---------------------------------------------------------------------------------------------
// Version, architectures, CUBIN
// ---------------------------------------------------------------------------------------------

/// NVRTC's version (major, minor), e.g. (13, 0); `None` without NVRTC. Asked once.
pub fn version() -> Option<(u32, u32)> {
    static VERSION: OnceLock<Option<(u32, u32)>> = OnceLock::new();
    *VERSION.get_or_init(|| {
        if !available() {
            return None;
        }
        crate::runtime::cuda::guarded("asking NVRTC its version", || {
            let (mut major, mut minor) = (0, 0);
            // SAFETY: writes two ints; the library is present.
            unsafe { cudarc::nvrtc::sys::nvrtcVersion(&mut major, &mut minor) }
                .result()
                .map_err(|e| format!("{e:?}"))?;
            Ok((major.max(0) as u32, minor.max(0) as u32))
        })
        .ok()
    })
}

/// `13.0`, or `unknown` without NVRTC: the part of every cache key that says which NVRTC
/// produced the file.
pub fn version_text() -> String {
    version().map_or("unknown".into(), |(a, b)| format!("{a}.{b}"))
}

/// The real architectures (major*10+minor, e.g. 90) this NVRTC assembles SASS for; empty
/// without NVRTC. Asked once.
pub fn supported_archs() -> &'static [u32] {
    static ARCHS: OnceLock<Vec<u32>> = OnceLock::new();
    ARCHS.get_or_init(|| {
        if !available() {
            return Vec::new();
        }
        crate::runtime::cuda::guarded("asking NVRTC its architectures", || {
            use cudarc::nvrtc::sys;
            let mut n: std::ffi::c_int = 0;
            // SAFETY: writes one int; the library is present.
            unsafe { sys::nvrtcGetNumSupportedArchs(&mut n) }
                .result()
                .map_err(|e| format!("{e:?}"))?;
            let mut archs = vec![0 as std::ffi::c_int; n.max(0) as usize];
            // SAFETY: `archs` has room for the `n` ints NVRTC writes.
            unsafe { sys::nvrtcGetSupportedArchs(archs.as_mut_ptr()) }
                .result()
                .map_err(|e| format!("{e:?}"))?;
            Ok(archs.into_iter().map(|a| a.max(0) as u32).collect())
        })
        .unwrap_or_default()
    })
}

/// A CUBIN from NVRTC: the ELF file and what ptxas said about its kernel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cubin {
    /// The real architecture, e.g. `sm_90`.
    pub arch: String,
    pub bytes: Vec<u8>,
    /// Registers, spills, static shared memory and stack: from ptxas's report in NVRTC's
    /// log when it was compiled in this process, else read from the file
    /// ([`super::cubin::resources`], without spill counts).
    pub report: crate::runtime::ptxas::PtxasReport,
}

/// NVRTC's options for a CUBIN (`arch` such as `sm_90`); `-v` puts ptxas's report in the log.
fn cubin_options(arch: &str) -> Vec<String> {
    vec![
        format!("--gpu-architecture={arch}"),
        "--std=c++17".into(),
        "--ptxas-options=-v".into(),
    ]
}

/// Compiles `source` to a CUBIN for a real architecture such as `sm_90` (NVRTC's
/// `-arch=sm_XY` and `nvrtcGetCUBIN`): the machine code ptxas assembled, as CI checks it.
/// `entry` names the kernel whose resources the report gives.
///
/// Errors: [`Error::DeviceUnavailable`] without NVRTC, [`Error::Compile`] with NVRTC's log
/// when the source does not compile or NVRTC does not know the architecture (see
/// [`supported_archs`]).
pub fn compile_cubin(name: &str, source: &str, arch: &str, entry: &str) -> Result<Cubin, Error> {
    use cudarc::nvrtc::{result, sys};
    if !available() {
        return Err(Error::DeviceUnavailable {
            device: "cuda".into(),
            reason: NO_NVRTC.into(),
        });
    }
    let compiler = format!("nvrtc {} --gpu-architecture={arch}", version_text());
    let failed = |log: String| Error::Compile {
        kernel: name.into(),
        compiler: compiler.clone(),
        log,
    };
    let (Ok(src), Ok(file)) = (
        std::ffi::CString::new(source),
        std::ffi::CString::new(format!("{}.cu", crate::codegen::c_identifier(name))),
    ) else {
        return Err(failed("source contains a NUL byte".into()));
    };
    let start = std::time::Instant::now();
    let outcome = crate::runtime::cuda::guarded("compiling with NVRTC", || {
        let prog = result::create_program(&src, Some(&file)).map_err(|e| format!("{e:?}"))?;
        // SAFETY: `prog` is a live program until `destroy_program` below; the CUBIN buffer
        // is as long as NVRTC says.
        unsafe {
            let compiled = result::compile_program(prog, &cubin_options(arch));
            let log = result::get_program_log(prog)
                .map(|raw| {
                    let bytes: Vec<u8> = raw
                        .iter()
                        .map(|&c| c as u8)
                        .take_while(|&c| c != 0)
                        .collect();
                    String::from_utf8_lossy(&bytes).into_owned()
                })
                .unwrap_or_default();
            let cubin = compiled.map_err(|e| format!("{e:?}")).and_then(|()| {
                let mut size = 0usize;
                sys::nvrtcGetCUBINSize(prog, &mut size)
                    .result()
                    .map_err(|e| format!("nvrtcGetCUBINSize: {e:?}"))?;
                let mut bytes = vec![0u8; size];
                sys::nvrtcGetCUBIN(prog, bytes.as_mut_ptr().cast())
                    .result()
                    .map_err(|e| format!("nvrtcGetCUBIN: {e:?}"))?;
                Ok(bytes)
            });
            let _ = result::destroy_program(prog);
            Ok((cubin, log))
        }
    });
    crate::log::compiled(name, "nvrtc", start.elapsed().as_secs_f64());
    let (cubin, log) = outcome.map_err(&failed)?;
    let bytes = cubin.map_err(|e| {
        failed(if log.trim().is_empty() {
            e
        } else {
            log.clone()
        })
    })?;
    if bytes.is_empty() {
        return Err(failed(format!("NVRTC produced no CUBIN for {arch}\n{log}")));
    }
    let report = if log.contains("Used ") {
        crate::runtime::ptxas::parse_report(&log)
    } else {
        crate::runtime::cubin::resources(&bytes, Some(entry)).map_err(&failed)?
    };
    Ok(Cubin {
        arch: arch.into(),
        bytes,
        report,
    })
}

const NO_NVRTC: &str = "NVRTC (libnvrtc.so.13 or .so.12) was not found on the library path; install the CUDA toolkit or the `nvidia-cuda-nvrtc` wheel and add its lib folder to LD_LIBRARY_PATH";

/// CUBINs compiled in this process, by cache key (see [`compile_cubin_cached`]).
static CUBINS: OnceLock<Mutex<HashMap<String, std::sync::Arc<Cubin>>>> = OnceLock::new();

/// [`compile_cubin`] through a per-process memory cache and the disk cache beside the
/// records (`<cache>/objects/<key>-<content>.cubin`): the key names what the file holds —
/// a CUBIN, for this real architecture, from this NVRTC version, with these options, of
/// this source — and the content hash is checked before use (see [`super::object_cache`]).
/// A CUBIN read from disk gets its report from the file itself (no spill counts).
/// `TENSOR_DSL_NO_DISK_CACHE=1` turns the disk cache off.
pub fn compile_cubin_cached(
    name: &str,
    source: &str,
    arch: &str,
    entry: &str,
) -> Result<std::sync::Arc<Cubin>, Error> {
    let key = format!(
        "nvrtc {}\ncubin {arch}\n{}\n{entry}\n{source}",
        version_text(),
        cubin_options(arch).join(" ")
    );
    let memory = CUBINS.get_or_init(Default::default);
    if let Some(c) = memory.lock().unwrap_or_else(|p| p.into_inner()).get(&key) {
        return Ok(c.clone());
    }
    let remember = |c: Cubin| {
        let c = std::sync::Arc::new(c);
        let mut map = memory.lock().unwrap_or_else(|p| p.into_inner());
        if map.len() >= MEMORY_ENTRIES {
            map.clear();
        }
        map.insert(key.clone(), c.clone());
        c
    };
    let dir = super::object_cache::objects_dir().filter(|_| available());
    if let Some((path, bytes)) = dir
        .as_deref()
        .and_then(|d| super::object_cache::lookup(d, &key, "cubin"))
    {
        match crate::runtime::cubin::resources(&bytes, Some(entry)) {
            Ok(report) => {
                return Ok(remember(Cubin {
                    arch: arch.into(),
                    bytes,
                    report,
                }))
            }
            Err(_) => super::object_cache::discard_damaged(&path),
        }
    }
    let cubin = compile_cubin(name, source, arch, entry)?;
    if let Some(d) = &dir {
        super::object_cache::store(d, &key, "cubin", &cubin.bytes);
    }
    Ok(remember(cubin))
}

/// What the driver should load for a kernel on the GPU `target` describes: a CUBIN for its
/// real architecture ([`GpuTarget::real_arch`](crate::template::gpu::GpuTarget::real_arch): `sm_90a` on an H100, whose kernels may use
/// `wgmma`; [`compile_cubin_cached`]) when this NVRTC assembles for it, else —
/// a GPU newer than NVRTC — PTX for the newest virtual architecture NVRTC knows below it,
/// which the driver compiles at load time (the reason is in the [`Image`](crate::runtime::cubin::Image) and logged once
/// per architecture). With the image comes what ptxas reported for the CUBIN (`None` for
/// PTX).
///
/// Errors: as [`compile_cubin`]; a GPU older than every architecture NVRTC knows.
pub fn image(
    name: &str,
    source: &str,
    entry: &str,
    target: &crate::template::gpu::GpuTarget,
) -> Result<
    (
        crate::runtime::cubin::Image,
        Option<crate::runtime::ptxas::PtxasReport>,
    ),
    Error,
> {
    use crate::runtime::cubin::Image;
    let sm = target.sm;
    let archs = supported_archs();
    // An NVRTC too old to list its architectures is asked for the CUBIN anyway.
    if archs.is_empty() || archs.contains(&sm) {
        let c = compile_cubin_cached(name, source, &target.real_arch(), entry)?;
        return Ok((
            Image::Cubin {
                arch: c.arch.clone(),
                bytes: c.bytes.clone(),
            },
            Some(c.report.clone()),
        ));
    }
    let Some(&below) = archs.iter().filter(|&&a| a < sm).max() else {
        return Err(Error::DeviceUnavailable {
            device: "cuda".into(),
            reason: format!(
                "NVRTC {} compiles for sm_{}..sm_{}, not for this GPU's sm_{sm}; use an older CUDA toolkit's NVRTC",
                version_text(),
                archs.iter().min().copied().unwrap_or(0),
                archs.iter().max().copied().unwrap_or(0),
            ),
        });
    };
    let reason = format!(
        "NVRTC {} cannot assemble SASS for sm_{sm} (it knows sm_{}); the driver compiles PTX for compute_{below} instead",
        version_text(),
        archs
            .iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join(", sm_")
    );
    ptx_fallback(name, source, below, reason).map(|image| (image, None))
}

/// PTX for `compute_<sm>` as the fallback image, with `reason` logged once per reason.
pub fn ptx_fallback(
    name: &str,
    source: &str,
    sm: u32,
    reason: String,
) -> Result<crate::runtime::cubin::Image, Error> {
    static LOGGED: OnceLock<Mutex<std::collections::HashSet<String>>> = OnceLock::new();
    let arch = format!("compute_{sm}");
    let text = compile_ptx_cached(name, source, &arch)?;
    let first = LOGGED
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(reason.clone());
    if first {
        crate::log::warn(format_args!("running PTX, not a CUBIN: {reason}"));
    }
    Ok(crate::runtime::cubin::Image::Ptx { arch, text, reason })
}
