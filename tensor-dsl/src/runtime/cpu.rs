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
    /// Where the object exports a prepacked form ([`crate::lower::Prepack`]).
    prepack: Option<Prepacked>,
}

/// Packed forms of one input kept per compiled kernel: enough for the weights of every
/// layer of one shape in common networks (ResNet-50 repeats a shape at most 6 times);
/// beyond that the least recently used is dropped (and packed again when it comes back).
pub const PREPACK_KEEP: usize = 8;

/// A packed form of an input, shared by the calls that use it.
type Packed = Arc<PackedBuf>;

/// Floats whose first one (`data[start]`) lies on a 64-byte boundary: the kernel's vector
/// loads of the panel then never straddle cache lines (a large heap block starts 16 bytes
/// into a page; at that offset a 3×3 convolution over 7×7 ran 3–4% slower).
struct PackedBuf {
    data: Box<[f32]>,
    start: usize,
}

impl PackedBuf {
    const ALIGN: usize = 64;

    fn zeros(elems: usize) -> PackedBuf {
        let slack = Self::ALIGN / std::mem::size_of::<f32>() - 1;
        let data = vec![0.0f32; elems + slack].into_boxed_slice();
        let misaligned = data.as_ptr() as usize % Self::ALIGN;
        let start = (Self::ALIGN - misaligned) % Self::ALIGN / std::mem::size_of::<f32>();
        PackedBuf { data, start }
    }

    fn as_ptr(&self) -> *const f32 {
        self.data[self.start..].as_ptr()
    }

    fn as_mut_ptr(&mut self) -> *mut f32 {
        self.data[self.start..].as_mut_ptr()
    }
}

/// A loaded kernel's prepacked form: `fill` packs input `input` into `elems` floats, `run`
/// is the entry point on them (`args[params]`); `kept` holds packed forms by the input's
/// [`crate::Tensor::version`], most recently used last.
struct Prepacked {
    fill: EntryFn,
    run: EntryFn,
    input: usize,
    elems: usize,
    kept: Mutex<Vec<(u64, Packed)>>,
}

impl Prepacked {
    /// The packed form of the input at `version`, packed from `args` if it is not kept.
    fn get(&self, version: u64, args: &[*const u8]) -> Packed {
        let lookup = |kept: &mut Vec<(u64, Packed)>| {
            let at = kept.iter().position(|(v, _)| *v == version)?;
            let entry = kept.remove(at);
            let packed = Arc::clone(&entry.1);
            kept.push(entry);
            Some(packed)
        };
        {
            let mut kept = self.kept.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(p) = lookup(&mut kept) {
                return p;
            }
        }
        // Packed outside the lock (it runs the kernel's threads); two callers racing on a
        // new version both pack, and one of the results is kept.
        let mut packed = PackedBuf::zeros(self.elems);
        // SAFETY: `fill` reads input `input` within its checked shape (like the entry
        // point) and writes exactly `elems` floats to its output pointer.
        unsafe { (self.fill)(args.as_ptr(), packed.as_mut_ptr().cast()) };
        let packed = Arc::new(packed);
        let mut kept = self.kept.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(p) = lookup(&mut kept) {
            return p;
        }
        if kept.len() >= PREPACK_KEEP {
            kept.remove(0);
        }
        kept.push((version, Arc::clone(&packed)));
        packed
    }
}

/// The prepacked form `lib` exports, if any (its functions and the constants that size
/// it, [`crate::lower::cpu::PREPACK_INPUT`] and [`crate::lower::cpu::PREPACK_ELEMS`]).
fn prepacked(lib: &libloading::Library, params: usize) -> Option<Prepacked> {
    use crate::lower::cpu::{PREPACK_ELEMS, PREPACK_ENTRY, PREPACK_FILL, PREPACK_INPUT};
    // SAFETY: in generated objects these names are the functions and `const long`s that
    // `codegen::c` prints for a nest's `Prepack`, with these types.
    unsafe {
        let fill = *lib.get::<EntryFn>(PREPACK_FILL.as_bytes()).ok()?;
        let run = *lib.get::<EntryFn>(PREPACK_ENTRY.as_bytes()).ok()?;
        let input = **lib
            .get::<*const std::ffi::c_long>(PREPACK_INPUT.as_bytes())
            .ok()?;
        let elems = **lib
            .get::<*const std::ffi::c_long>(PREPACK_ELEMS.as_bytes())
            .ok()?;
        let input = usize::try_from(input).ok().filter(|&i| i < params)?;
        Some(Prepacked {
            fill,
            run,
            input,
            elems: usize::try_from(elems).ok()?,
            kept: Mutex::new(Vec::new()),
        })
    }
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

fn try_compile(
    program: &str,
    flags: &[String],
    srcs: &[PathBuf],
    out: &Path,
) -> Result<(), String> {
    let output = Command::new(program)
        .args(flags)
        .arg("-o")
        .arg(out)
        .args(srcs)
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
    compile_shared_object_from(std::slice::from_ref(&source), out)
}

/// Compiles several C translation units into the one shared object `out`, with one compiler
/// process (the measurer batches candidates this way, each with its own entry symbol; their
/// `static` helpers do not clash across units). Unit `n` is written beside `out` (as `out`
/// with the extension `n.c`) and removed after.
pub fn compile_shared_object_from(sources: &[&str], out: &Path) -> Result<(), String> {
    let cc = compiler()?;
    let srcs: Vec<PathBuf> = match sources {
        [_] => vec![out.with_extension("c")],
        _ => (0..sources.len())
            .map(|n| out.with_extension(format!("{n}.c")))
            .collect(),
    };
    let written = srcs.iter().zip(sources).try_for_each(|(src, text)| {
        std::fs::write(src, text).map_err(|e| format!("{}: {e}", src.display()))
    });
    let start = std::time::Instant::now();
    let result = written.and_then(|()| try_compile(&cc.program, &cc.flags, &srcs, out));
    crate::log::compiled(
        &out.file_stem().unwrap_or_default().to_string_lossy(),
        &cc.program,
        start.elapsed().as_secs_f64(),
    );
    for src in &srcs {
        let _ = std::fs::remove_file(src);
    }
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
                match try_compile(&program, &flags, std::slice::from_ref(&src), &so) {
                    Ok(()) => {
                        let _ = std::fs::remove_file(&so);
                        let _ = std::fs::remove_file(&src);
                        let _ = std::fs::remove_dir(&dir);
                        if !openmp {
                            crate::log::warn(format_args!(
                                "`{program}` has no OpenMP; CPU kernels run on one core"
                            ));
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

/// What compiled code is built for on this machine: the CPU's model and its ISA flags as
/// `/proc/cpuinfo` lists them (`flags` on x86, `Features` on Arm), else the features the
/// standard library detects. Part of every compiled object's cache key, since
/// `-march=native` means different code on different machines: a cache shared between
/// hosts (an NFS home, a restored CI cache) never hands AVX-512 code to an AVX2 host.
pub fn host_identity() -> &'static str {
    static ID: OnceLock<String> = OnceLock::new();
    ID.get_or_init(|| {
        let info = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let field = |name: &str| {
            info.lines().find_map(|l| {
                let (k, v) = l.split_once(':')?;
                (k.trim() == name).then(|| v.split_whitespace().collect::<Vec<_>>().join(" "))
            })
        };
        let model = field("model name")
            .or_else(|| field("CPU part"))
            .unwrap_or_default();
        let flags = field("flags")
            .or_else(|| field("Features"))
            .unwrap_or_else(|| {
                let mut detected: Vec<&str> = Vec::new();
                #[cfg(target_arch = "x86_64")]
                for (flag, present) in [
                    ("avx512f", std::arch::is_x86_feature_detected!("avx512f")),
                    ("avx2", std::arch::is_x86_feature_detected!("avx2")),
                    ("fma", std::arch::is_x86_feature_detected!("fma")),
                    ("sse4.2", std::arch::is_x86_feature_detected!("sse4.2")),
                ] {
                    if present {
                        detected.push(flag);
                    }
                }
                detected.join(" ")
            });
        format!("{} {model}\n{flags}", std::env::consts::ARCH)
    })
}

/// The cache key of a compiled object for `source`: the source, the compiler, its version
/// and flags, and [`host_identity`].
pub fn object_key(source: &str) -> Result<String, String> {
    let cc = compiler()?;
    Ok(format!(
        "{}\n{}\n{}\n{}\n{source}",
        cc.program,
        cc.version,
        cc.flags.join(" "),
        host_identity()
    ))
}

/// Loads a shared object from `bytes` (already checked) through a private copy, so the
/// loaded file is one nobody else writes, truncates or deletes.
fn load_bytes(bytes: &[u8], stem: &str) -> Result<libloading::Library, String> {
    let dir = work_dir().map_err(|e| e.to_string())?;
    let so = dir.join(format!("{stem}.so"));
    let result = std::fs::write(&so, bytes)
        .map_err(|e| format!("{}: {e}", so.display()))
        .and_then(|()| {
            // SAFETY: the bytes are an object we compiled from generated code (checked against
            // the content hash it was stored under); its initialisers are the C runtime's.
            unsafe { libloading::Library::new(&so) }.map_err(|e| e.to_string())
        });
    let _ = std::fs::remove_dir_all(&dir);
    result
}

/// Compiles `source` (or finds it, verified, in the disk cache) and loads it.
fn build(kernel: &Kernel, source: &str) -> Result<Loaded, String> {
    let cc = compiler()?;
    if cc.openmp {
        pin_openmp();
    }
    let key = object_key(source)?;
    let dir = super::object_cache::objects_dir();
    let stem = kernel.fingerprint();
    let cached = dir
        .as_deref()
        .and_then(|d| super::object_cache::lookup(d, &key, "so"));
    let lib = match cached {
        // A verified object that still fails to load is dropped and compiled again.
        Some((path, bytes)) => match load_bytes(&bytes, &stem) {
            Ok(lib) => Some(lib),
            Err(_) => {
                super::object_cache::discard_damaged(&path);
                None
            }
        },
        None => None,
    };
    let lib = match lib {
        Some(lib) => lib,
        None => {
            let work = work_dir().map_err(|e| e.to_string())?;
            let so = work.join(format!("{stem}.so"));
            let bytes = compile_shared_object(source, &so)
                .and_then(|()| std::fs::read(&so).map_err(|e| format!("{}: {e}", so.display())));
            let _ = std::fs::remove_dir_all(&work);
            let bytes = bytes?;
            let lib = load_bytes(&bytes, &stem)?;
            // Publish to the disk cache (by rename: other processes see all of it or nothing).
            if let Some(d) = &dir {
                super::object_cache::store(d, &key, "so", &bytes);
            }
            lib
        }
    };
    // Leaked, so it outlives every use of `entry`.
    let lib: &'static libloading::Library = Box::leak(Box::new(lib));
    // SAFETY: `td_kernel` has exactly the `EntryFn` signature in every generated file.
    let entry = unsafe { lib.get::<EntryFn>(c::ENTRY.as_bytes()) }.map_err(|e| e.to_string())?;
    Ok(Loaded {
        _lib: lib,
        entry: *entry,
        prepack: prepacked(lib, kernel.params.len()),
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
    out: DataMut<'_>,
    config: &CpuConfig,
) -> Result<(), CpuError> {
    run_with_versions(kernel, extents, shapes, data, &[], out, config)
}

/// [`run_with`], told the [`crate::Tensor::version`] of each input (by parameter id; `None`
/// or missing: unknown). Where the schedule can take an input packed ahead of the call (a
/// convolution's weights) and that input's version is known, its packed form is made on
/// the first call with that version and reused by the next ones (at most
/// [`PREPACK_KEEP`] versions per compiled kernel).
///
/// A version must stand for exactly one content of that input: [`crate::Tensor`] keeps
/// that promise; a caller passing its own numbers gets stale results if it breaks it.
pub fn run_with_versions(
    kernel: &Kernel,
    extents: &[usize],
    shapes: &[&[usize]],
    data: &[Data<'_>],
    versions: &[Option<u64>],
    out: DataMut<'_>,
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
    // SAFETY (of the call inside): the generated code reads parameter `p` only at offsets
    // below the product of `shapes[p]` (plain indices range over the bound extents, affine
    // ones are bounds-checked) and writes `out` only below the output's element count; both
    // were checked against the buffers above.
    call_compiled(kernel, data, versions, out, &slot, || {
        c::generate(kernel, extents, shapes, config)
    })
}

/// Builds `slot`'s shared object from `source()` on first use (a compile error is kept and
/// returned each time), then calls its entry point on `data` and `out`. Callers have checked
/// the buffers against the shapes the source was generated for.
fn call_compiled(
    kernel: &Kernel,
    data: &[Data<'_>],
    versions: &[Option<u64>],
    mut out: DataMut<'_>,
    slot: &Slot,
    source: impl FnOnce() -> String,
) -> Result<(), CpuError> {
    let loaded = slot
        .get_or_init(|| build(kernel, &source()).map(Arc::new))
        .as_ref()
        .map_err(|log| {
            CpuError::Other(Error::Compile {
                kernel: kernel.name.clone(),
                compiler: compiler().map(|c| c.program.clone()).unwrap_or_default(),
                log: log.clone(),
            })
        })?;
    let mut args: Vec<*const u8> = data.iter().map(Data::as_ptr).collect();
    if let Some(pp) = &loaded.prepack {
        if let (Some(Some(version)), true) =
            (versions.get(pp.input), args.len() == kernel.params.len())
        {
            let packed = pp.get(*version, &args);
            args.push(packed.as_ptr().cast());
            // SAFETY: as below; `args[params]` is the packed form `fill` wrote, kept alive
            // by `packed` until the call returns.
            unsafe { (pp.run)(args.as_ptr(), out.as_mut_ptr()) };
            return Ok(());
        }
    }
    // SAFETY: the callers checked the buffers against the shapes; the source stays inside
    // them (see each caller).
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
    out: DataMut<'_>,
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
    // The buffers were checked against `shapes` above; the caller vouches that the source
    // stays inside them.
    call_compiled(kernel, data, &[], out, &slot, || source.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The object key names the machine the code is compiled for, not `-march=native`.
    #[test]
    fn object_keys_name_the_cpu_model_and_isa_flags() {
        let Ok(key) = object_key("int x;") else {
            return; // no C compiler here
        };
        let id = host_identity();
        assert!(key.contains(id), "{key}");
        #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
        {
            assert!(id.contains("sse2"), "the ISA flags are part of it: {id}");
            if std::arch::is_x86_feature_detected!("avx2") {
                assert!(id.split_whitespace().any(|f| f == "avx2"), "{id}");
            }
        }
    }
}
