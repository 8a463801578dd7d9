//! The OpenBLAS baseline: `cblas_sgemm` from the system's OpenBLAS (Debian
//! `libopenblas0-pthread`), loaded at run time. Matmuls are one call on every core; batched
//! matmuls and convolutions (im2col + `sgemm` per image) follow the same plan as the
//! `matrixmultiply` baseline ([`crate::baseline::run_on`]), except that batches (images) are
//! split across the cores whenever there are at least as many as cores, each call then
//! single-threaded, which is what a caller with many independent GEMMs does.
//!
//! OpenBLAS 0.3.21 (Debian 12) has no `cblas_sgemm_batch`, so batches are always separate
//! calls. OpenBLAS runs on as many threads as our kernels (`openblas_set_num_threads`).
//! `BENCH_OPENBLAS=/path/to/libopenblas.so` loads it from there instead.

use std::ffi::c_int;
use std::sync::OnceLock;

use crate::baseline::{self, Gemm, Scratch, Sgemm};
use crate::workloads::Op;

const ROW_MAJOR: c_int = 101;
const NO_TRANS: c_int = 111;
const TRANS: c_int = 112;

type SgemmFn = unsafe extern "C" fn(
    c_int,
    c_int,
    c_int,
    c_int,
    c_int,
    c_int,
    f32,
    *const f32,
    c_int,
    *const f32,
    c_int,
    f32,
    *mut f32,
    c_int,
);
type SetThreadsFn = unsafe extern "C" fn(c_int);
type GetConfigFn = unsafe extern "C" fn() -> *const std::ffi::c_char;

/// The loaded library (kept for the life of the process: its worker threads live on).
pub struct OpenBlas {
    sgemm: SgemmFn,
    set_threads: Option<SetThreadsFn>,
    /// `openblas_get_config()`, e.g. `OpenBLAS 0.3.21 DYNAMIC_ARCH NO_AFFINITY SkylakeX MAX_THREADS=64`.
    pub config: String,
}

/// Where the library may be.
const NAMES: [&str; 4] = [
    "libopenblas.so.0",
    "libopenblas.so",
    "/usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so.0",
    "/usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblasp-r0.3.21.so",
];

/// OpenBLAS, loaded once; `Err` says why it is not available.
pub fn get() -> Result<&'static OpenBlas, String> {
    static LIB: OnceLock<Result<OpenBlas, String>> = OnceLock::new();
    LIB.get_or_init(load).as_ref().map_err(Clone::clone)
}

/// Set to a path to load OpenBLAS from there only (a path that does not exist skips the
/// column).
pub const ENV: &str = "BENCH_OPENBLAS";

fn load() -> Result<OpenBlas, String> {
    let mut errors = Vec::new();
    let chosen = std::env::var(ENV).ok().filter(|s| !s.is_empty());
    let names: Vec<&str> = match &chosen {
        Some(path) => vec![path.as_str()],
        None => NAMES.to_vec(),
    };
    for name in names {
        // SAFETY: loading OpenBLAS runs its initialisers (thread pool set-up), which are
        // sound at any time.
        match unsafe { libloading::Library::new(name) } {
            Ok(lib) => {
                // Never unloaded: OpenBLAS's worker threads run its code.
                let lib: &'static libloading::Library = Box::leak(Box::new(lib));
                // SAFETY: the symbols have these C signatures in OpenBLAS's cblas.h
                // (32-bit integers: the LP64 build).
                unsafe {
                    let sgemm = *lib
                        .get::<SgemmFn>(b"cblas_sgemm\0")
                        .map_err(|e| format!("{name}: {e}"))?;
                    let set_threads = lib
                        .get::<SetThreadsFn>(b"openblas_set_num_threads\0")
                        .ok()
                        .map(|s| *s);
                    let config = lib
                        .get::<GetConfigFn>(b"openblas_get_config\0")
                        .ok()
                        .map(|f| (*f)())
                        .filter(|p| !p.is_null())
                        .map(|p| {
                            std::ffi::CStr::from_ptr(p)
                                .to_string_lossy()
                                .trim()
                                .to_string()
                        })
                        .unwrap_or_else(|| "OpenBLAS".into());
                    return Ok(OpenBlas {
                        sgemm,
                        set_threads,
                        config,
                    });
                }
            }
            Err(e) => errors.push(e.to_string()),
        }
    }
    Err(format!(
        "OpenBLAS not found ({}); install it with `apt-get install libopenblas0-pthread`",
        errors.first().map_or("", String::as_str)
    ))
}

/// `cblas_sgemm` arguments for `g` in row-major order: (transa, lda, transb, ldb, ldc), and
/// whether A and B were swapped (C stored column-major: C^T = B^T · A^T). `None` when an
/// operand has no unit stride (never for the bench's layouts).
#[derive(Debug, PartialEq, Eq)]
struct Call {
    m: usize,
    n: usize,
    k: usize,
    transa: c_int,
    lda: isize,
    transb: c_int,
    ldb: isize,
    ldc: isize,
    swap: bool,
}

fn operand(rows_stride: isize, cols_stride: isize, cols: usize) -> Option<(c_int, isize)> {
    // A row-major operand: unit column stride, or transposed with unit row stride. A
    // single column (or row) makes the other stride irrelevant but it must stay ≥ cols.
    if cols_stride == 1 {
        Some((NO_TRANS, rows_stride.max(cols as isize).max(1)))
    } else if rows_stride == 1 {
        Some((TRANS, cols_stride))
    } else {
        None
    }
}

fn plan(g: &Gemm) -> Option<Call> {
    let (m, n, k, a, b, c, swap) = if g.csc == 1 || (g.n == 1 && g.rsc != 1) {
        // C row-major (a single column needs no unit column stride).
        (g.m, g.n, g.k, (g.rsa, g.csa), (g.rsb, g.csb), g.rsc, false)
    } else if g.rsc == 1 {
        // C^T (n×m, row-major with row stride csc) = B^T (n×k) · A^T (k×m).
        (g.n, g.m, g.k, (g.csb, g.rsb), (g.csa, g.rsa), g.csc, true)
    } else {
        return None;
    };
    let (transa, lda) = operand(a.0, a.1, k)?;
    let (transb, ldb) = operand(b.0, b.1, n)?;
    // With a transposed operand the leading dimension is the stored row length.
    let lda = if transa == TRANS {
        lda.max(m as isize)
    } else {
        lda
    };
    let ldb = if transb == TRANS {
        ldb.max(k as isize)
    } else {
        ldb
    };
    Some(Call {
        m,
        n,
        k,
        transa,
        lda,
        transb,
        ldb,
        ldc: c.max(n as isize).max(1),
        swap,
    })
}

impl Sgemm for OpenBlas {
    fn split_batches(&self, _g: &Gemm, batches: usize) -> bool {
        batches >= baseline::threads()
    }

    fn threads_for(&self, split: bool) {
        if let Some(set) = self.set_threads {
            let n = if split { 1 } else { baseline::threads() };
            // SAFETY: `openblas_set_num_threads(int)` takes any positive count.
            unsafe { set(n as c_int) }
        }
    }

    unsafe fn sgemm(
        &self,
        g: &Gemm,
        a: *const f32,
        b: *const f32,
        c: *mut f32,
    ) -> Result<(), String> {
        let call = plan(g).ok_or_else(|| format!("no cblas_sgemm call for {g:?}"))?;
        let (a, b) = if call.swap { (b, a) } else { (a, b) };
        let int = |v: usize| c_int::try_from(v).map_err(|_| format!("{v} overflows a BLAS int"));
        let ld = |v: isize| c_int::try_from(v).map_err(|_| format!("{v} overflows a BLAS int"));
        // SAFETY: the caller guarantees the operands cover every element the strides reach;
        // `plan` turned the strides into the equivalent row-major call.
        unsafe {
            (self.sgemm)(
                ROW_MAJOR,
                call.transa,
                call.transb,
                int(call.m)?,
                int(call.n)?,
                int(call.k)?,
                1.0,
                a,
                ld(call.lda)?,
                b,
                ld(call.ldb)?,
                0.0,
                c,
                ld(call.ldc)?,
            );
        }
        Ok(())
    }
}

/// The column's name for `op`.
pub fn name(op: &Op) -> String {
    let what = match op {
        Op::Matmul { .. } => "OpenBLAS sgemm",
        Op::GemmBiasRelu { .. } => "OpenBLAS sgemm, then bias + ReLU",
        Op::BatchMatmul { .. } => "OpenBLAS sgemm per batch",
        Op::Conv2d(_) => "im2col + OpenBLAS sgemm",
        Op::Stage(_) => "OpenBLAS (no row kernels)",
    };
    what.to_string()
}

/// The OpenBLAS baseline for one workload.
pub struct Baseline {
    lib: &'static OpenBlas,
    op: Op,
    scratch: Scratch,
}

impl Baseline {
    /// `Err` when OpenBLAS is not installed.
    pub fn new(op: &Op) -> Result<Baseline, String> {
        Ok(Baseline {
            lib: get()?,
            op: op.clone(),
            scratch: Scratch::default(),
        })
    }
}

impl crate::baselines::Baseline for Baseline {
    fn name(&self) -> String {
        format!("{} ({})", name(&self.op), self.lib.config)
    }

    fn run(&mut self, inputs: &[&[f32]], out: &mut [f32]) -> Result<(), String> {
        baseline::run_on(self.lib, &self.op, inputs, out, &mut self.scratch)
    }

    fn settle(&self) -> f64 {
        // OpenBLAS's idle workers spin (yielding) for 2^28 cycles, about 0.1 s, after each
        // call (THREAD_TIMEOUT); the next contender must not compete with them.
        SETTLE_SECONDS
    }
}

/// How long the bench waits after a round of OpenBLAS calls.
pub const SETTLE_SECONDS: f64 = 0.25;

#[cfg(test)]
mod tests {
    use super::*;

    fn g(m: usize, k: usize, n: usize, s: [isize; 6]) -> Gemm {
        Gemm {
            m,
            k,
            n,
            rsa: s[0],
            csa: s[1],
            rsb: s[2],
            csb: s[3],
            rsc: s[4],
            csc: s[5],
        }
    }

    #[test]
    fn plans_row_major_transposed_and_swapped_calls() {
        let p = plan(&g(3, 4, 5, [4, 1, 5, 1, 5, 1])).unwrap();
        assert_eq!(
            (p.transa, p.lda, p.transb, p.ldb, p.ldc),
            (NO_TRANS, 4, NO_TRANS, 5, 5)
        );
        // A stored k×m (bkm): transposed, leading dimension m.
        let p = plan(&g(3, 4, 5, [1, 3, 5, 1, 5, 1])).unwrap();
        assert_eq!((p.transa, p.lda), (TRANS, 3));
        // C column-major: swapped.
        let p = plan(&g(3, 4, 5, [4, 1, 5, 1, 1, 3])).unwrap();
        assert!(p.swap);
        assert_eq!(
            (p.m, p.n, p.transa, p.lda, p.transb, p.ldb, p.ldc),
            (5, 3, TRANS, 5, TRANS, 4, 3)
        );
        assert!(plan(&g(3, 4, 5, [8, 2, 5, 1, 5, 1])).is_none());
    }
}
