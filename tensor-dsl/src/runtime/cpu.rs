//! The CPU runtime: generated C → the system C compiler → a shared object loaded with
//! `libloading` → a call.
//!
//! Compiled kernels are memoized per process by (kernel fingerprint, shapes, schedule) and
//! never unloaded: an OpenMP object unloaded while its worker threads live crashes the
//! process, so libraries (and `libgomp`) stay loaded for the process lifetime.
//!
//! The compiler is `$CC` or `cc`, probed once with `-O3 -march=native -fopenmp`; flags the
//! compiler rejects are dropped (OpenMP first, for `-fopenmp-simd`, then that, then
//! `-march=native`), with a warning.

use crate::codegen::c;
use crate::ir::Kernel;
use crate::template::cpu::CpuConfig;
use crate::tensor::{Data, DataMut};
use crate::Error;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

/// Why a CPU call failed: no usable compiler (callers may fall back) or anything else.
#[derive(Debug)]
pub enum CpuError {
    NoCompiler(String),
    Other(Error),
}

impl From<Error> for CpuError {
    fn from(e: Error) -> Self {
        CpuError::Other(e)
    }
}

/// `void td_kernel(const void *const *args, void *out)`: each pointer at its parameter's
/// element type.
type EntryFn = unsafe extern "C" fn(*const *const u8, *mut u8);

/// A loaded kernel. The library is kept alive (never dropped) with the function pointer.
struct Loaded {
    _lib: &'static libloading::Library,
    entry: EntryFn,
}

/// The C compiler and the flags it accepted.
#[derive(Clone, Debug)]
pub struct Compiler {
    pub program: String,
    pub flags: Vec<String>,
    pub openmp: bool,
    /// The first line of `program --version` (part of artifact-cache keys).
    pub version: String,
}

static COMPILER: OnceLock<Result<Compiler, String>> = OnceLock::new();
type Slot = Arc<OnceLock<Result<Arc<Loaded>, String>>>;
/// (kernel fingerprint, shapes, extents, schedule); the codegen version is fixed per build.
type CacheKey = (String, Vec<Vec<usize>>, Vec<usize>, CpuConfig);
static CACHE: OnceLock<Mutex<HashMap<CacheKey, Slot>>> = OnceLock::new();
static SEQ: AtomicU64 = AtomicU64::new(0);

/// The SIMD width in `f32` lanes of this CPU (16 with AVX-512, 8 with AVX2, else 4).
pub fn simd_lanes() -> usize {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512f") {
            return 16;
        }
        if std::arch::is_x86_feature_detected!("avx2") {
            return 8;
        }
    }
    4
}

/// A fresh directory for one build (unique per process and call; the caller removes it).
pub fn work_dir() -> Result<PathBuf, Error> {
    let n = SEQ.fetch_add(1, Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("tensor-dsl-{}-{n}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

fn try_compile(program: &str, flags: &[String], src: &Path, out: &Path) -> Result<(), String> {
    let output = Command::new(program)
        .args(flags)
        .arg("-o")
        .arg(out)
        .arg(src)
        .arg("-lm")
        .output()
        .map_err(|e| format!("cannot run `{program}`: {e}"))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&output.stderr).into_owned())
    }
}

/// Compiles C `source` into the shared object `out` with the probed compiler and flags.
/// The source is written beside `out` (as `out` with a `.c` extension) and removed after.
pub fn compile_shared_object(source: &str, out: &Path) -> Result<(), String> {
    let cc = compiler()?;
    let src = out.with_extension("c");
    std::fs::write(&src, source).map_err(|e| format!("{}: {e}", src.display()))?;
    let result = try_compile(&cc.program, &cc.flags, &src, out);
    let _ = std::fs::remove_file(&src);
    result.map_err(|log| format!("{} {}:\n{log}", cc.program, cc.flags.join(" ")))
}

/// Finds the C compiler and the best flags it supports (probed once per process).
pub fn compiler() -> Result<&'static Compiler, String> {
    COMPILER
        .get_or_init(|| {
            let program = std::env::var("CC")
                .ok()
                .filter(|s| !s.trim().is_empty())
                .unwrap_or_else(|| "cc".into());
            let dir = work_dir().map_err(|e| e.to_string())?;
            let src = dir.join("probe.c");
            std::fs::write(
                &src,
                "#include <math.h>\nfloat td_probe(float *x, int n) { float s = 0;\n#pragma omp parallel for reduction(+:s)\nfor (int i = 0; i < n; ++i) s += sqrtf(x[i]); return s; }\n",
            )
            .map_err(|e| e.to_string())?;
            let so = dir.join("probe.so");
            let base = ["-O3", "-fPIC", "-shared", "-fno-math-errno"];
            // Without OpenMP, `-fopenmp-simd` still honours `omp simd`, which keeps the
            // reduction loops around a register tile in order (see `lower::LoopKind::InOrder`;
            // without it GCC 12 takes 9 s, not 0.5 s, on a 512x1024x64 matmul).
            let candidates: [(&[&str], bool); 4] = [
                (&["-march=native", "-fopenmp"], true),
                (&["-march=native", "-fopenmp-simd"], false),
                (&["-march=native"], false),
                (&[], false),
            ];
            let mut last = String::new();
            for (extra, openmp) in candidates {
                let flags: Vec<String> = base.iter().chain(extra).map(|s| s.to_string()).collect();
                match try_compile(&program, &flags, &src, &so) {
                    Ok(()) => {
                        let _ = std::fs::remove_file(&so);
                        let _ = std::fs::remove_file(&src);
                        let _ = std::fs::remove_dir(&dir);
                        if !openmp {
                            eprintln!("tensor-dsl: warning: `{program}` has no OpenMP; CPU kernels run on one core");
                        }
                        let version = Command::new(&program)
                            .arg("--version")
                            .output()
                            .ok()
                            .and_then(|o| String::from_utf8(o.stdout).ok())
                            .and_then(|v| v.lines().next().map(str::to_string))
                            .unwrap_or_default();
                        return Ok(Compiler {
                            program,
                            flags,
                            openmp,
                            version,
                        });
                    }
                    Err(e) => last = e,
                }
            }
            let _ = std::fs::remove_file(&src);
            Err(format!("`{program}` cannot build a shared object: {last}"))
        })
        .as_ref()
        .map_err(Clone::clone)
}

/// Keeps `libgomp` loaded for the life of the process (see the module docs).
fn pin_openmp() {
    static PINNED: OnceLock<()> = OnceLock::new();
    PINNED.get_or_init(|| {
        for name in ["libgomp.so.1", "libomp.so", "libomp.so.5"] {
            // SAFETY: loading the OpenMP runtime runs its initialisers, which are sound to
            // run at any time; we never unload it.
            if let Ok(lib) = unsafe { libloading::Library::new(name) } {
                std::mem::forget(lib);
                break;
            }
        }
    });
}

/// Compiles `source` into a shared object and loads it.
/// Where a compiled object for `source` is cached: `<cache>/objects/<hash>.so`, the hash
/// covering the source, the compiler's version and its flags. `TENSOR_DSL_NO_DISK_CACHE=1`
/// turns the disk cache off.
pub fn cached_object_path(source: &str) -> Result<Option<PathBuf>, String> {
    if std::env::var("TENSOR_DSL_NO_DISK_CACHE").is_ok_and(|v| v == "1") {
        return Ok(None);
    }
    let cc = compiler()?;
    let key = format!(
        "{}\n{}\n{}\n{source}",
        cc.program,
        cc.version,
        cc.flags.join(" ")
    );
    let hash = tensor_dsl_lang::ir::fnv1a64(key.as_bytes());
    Ok(Some(
        crate::records::cache_dir()
            .join("objects")
            .join(format!("{hash:016x}.so")),
    ))
}

/// Compiles `source` (or finds it in the disk cache), loads it.
fn build(kernel: &Kernel, source: &str) -> Result<Loaded, String> {
    let cc = compiler()?;
    if cc.openmp {
        pin_openmp();
    }
    let cached = cached_object_path(source)?;
    let lib = match &cached {
        // SAFETY: objects in the cache are ones we compiled from generated code and published
        // by rename, so they are complete; their initialisers are the C runtime's.
        Some(path) if path.is_file() => match unsafe { libloading::Library::new(path) } {
            Ok(lib) => {
                super::object_cache::touch(path);
                Some(lib)
            }
            Err(_) => {
                // A broken object is dropped (a link someone put there is left alone: the
                // publish below writes through it).
                if std::fs::symlink_metadata(path).is_ok_and(|m| m.is_file()) {
                    let _ = std::fs::remove_file(path);
                }
                None
            }
        },
        _ => None,
    };
    let lib = match lib {
        Some(lib) => lib,
        None => {
            let dir = work_dir().map_err(|e| e.to_string())?;
            let so = dir.join(format!("{}.so", kernel.fingerprint()));
            if let Err(e) = compile_shared_object(source, &so) {
                let _ = std::fs::remove_dir_all(&dir);
                return Err(e);
            }
            // Publish to the disk cache (by rename: other processes see all of it or nothing).
            if let Some(path) = &cached {
                super::object_cache::publish(path, |file| {
                    std::io::copy(&mut std::fs::File::open(&so)?, file).map(|_| ())
                });
            }
            // SAFETY: the library is code we just generated and compiled; its initialisers
            // are the C runtime's. It is leaked, so it outlives every use of `entry`.
            let lib = unsafe { libloading::Library::new(&so) }.map_err(|e| e.to_string());
            let _ = std::fs::remove_dir_all(&dir);
            lib?
        }
    };
    let lib: &'static libloading::Library = Box::leak(Box::new(lib));
    // SAFETY: `td_kernel` has exactly the `EntryFn` signature in every generated file.
    let entry = unsafe { lib.get::<EntryFn>(c::ENTRY.as_bytes()) }.map_err(|e| e.to_string())?;
    Ok(Loaded {
        _lib: lib,
        entry: *entry,
    })
}

/// Compiles (once per process) and runs `kernel` with the default schedule.
pub fn run(
    kernel: &Kernel,
    extents: &[usize],
    shapes: &[&[usize]],
    data: &[Data<'_>],
    out: DataMut<'_>,
) -> Result<(), CpuError> {
    let config = CpuConfig::heuristic(kernel, extents, simd_lanes());
    run_with(kernel, extents, shapes, data, out, &config)
}

/// Compiles (once per process) and runs `kernel` with a given schedule.
pub fn run_with(
    kernel: &Kernel,
    extents: &[usize],
    shapes: &[&[usize]],
    data: &[Data<'_>],
    mut out: DataMut<'_>,
    config: &CpuConfig,
) -> Result<(), CpuError> {
    let backend_err = |message: String| {
        CpuError::Other(Error::Backend {
            kernel: kernel.name.clone(),
            message,
        })
    };
    config
        .validate(kernel)
        .map_err(|e| backend_err(format!("invalid schedule: {e}")))?;
    // The arguments must be exactly what `bind` checked; anything else would be unsound.
    super::check_buffers(kernel, shapes, data, &out).map_err(backend_err)?;
    compiler().map_err(CpuError::NoCompiler)?;

    let key: CacheKey = (
        kernel.fingerprint(),
        shapes.iter().map(|s| s.to_vec()).collect(),
        extents.to_vec(),
        config.clone(),
    );
    let slot: Slot = {
        let map = CACHE.get_or_init(Default::default);
        let mut map = map.lock().unwrap_or_else(|p| p.into_inner());
        map.entry(key).or_default().clone()
    };
    let loaded = slot
        .get_or_init(|| {
            let source = c::generate(kernel, extents, shapes, config);
            build(kernel, &source).map(Arc::new)
        })
        .as_ref()
        .map_err(|log| {
            CpuError::Other(Error::Compile {
                kernel: kernel.name.clone(),
                compiler: compiler().map(|c| c.program.clone()).unwrap_or_default(),
                log: log.clone(),
            })
        })?;
    let args: Vec<*const u8> = data.iter().map(Data::as_ptr).collect();
    // SAFETY: the generated code reads parameter `p` only at offsets below the product of
    // `shapes[p]` (plain indices range over the bound extents, affine ones are
    // bounds-checked) and writes `out` only below the output's element count; both were
    // checked against the buffers above.
    unsafe { (loaded.entry)(args.as_ptr(), out.as_mut_ptr()) };
    Ok(())
}

/// Compiles (once per process, and through the disk cache) C `source` that another
/// generator wrote with the `td_kernel` entry convention (the row template's), and runs it
/// on the call's buffers. The caller vouches that the source reads parameter `p` only below
/// the product of `shapes[p]` and writes `out` only below its length.
pub fn run_source(
    kernel: &Kernel,
    shapes: &[&[usize]],
    data: &[Data<'_>],
    mut out: DataMut<'_>,
    source: &str,
) -> Result<(), CpuError> {
    type SourceMap = Mutex<HashMap<String, Slot>>;
    static SOURCES: OnceLock<SourceMap> = OnceLock::new();
    super::check_buffers(kernel, shapes, data, &out).map_err(|message| {
        CpuError::Other(Error::Backend {
            kernel: kernel.name.clone(),
            message,
        })
    })?;
    compiler().map_err(CpuError::NoCompiler)?;
    let slot: Slot = {
        let map = SOURCES.get_or_init(Default::default);
        let mut map = map.lock().unwrap_or_else(|p| p.into_inner());
        map.entry(source.to_string()).or_default().clone()
    };
    let loaded = slot
        .get_or_init(|| build(kernel, source).map(Arc::new))
        .as_ref()
        .map_err(|log| {
            CpuError::Other(Error::Compile {
                kernel: kernel.name.clone(),
                compiler: compiler().map(|c| c.program.clone()).unwrap_or_default(),
                log: log.clone(),
            })
        })?;
    let args: Vec<*const u8> = data.iter().map(Data::as_ptr).collect();
    // SAFETY: the buffers were checked against `shapes` above; the caller vouches that the
    // source stays inside them.
    unsafe { (loaded.entry)(args.as_ptr(), out.as_mut_ptr()) };
    Ok(())
}
