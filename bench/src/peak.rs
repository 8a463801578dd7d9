//! The machine's measured peak: a generated C kernel that keeps many independent vector FMA
//! accumulators in registers (AVX-512 when the compiler, with `-march=native`, targets it,
//! else 256-bit vectors), compiled with the system C compiler and flags our kernels use,
//! run on every core with OpenMP. Peak GFLOPS = 2 · lanes · accumulators · iterations ·
//! threads / seconds, the best of a few runs. Every kernel's GFLOPS is reported as a share
//! of it. For `bf16` operands (`dot`), where the compiler targets AVX-512 BF16, the
//! accumulators take `vdpbf16ps` instead (two multiply-adds per lane: 4 · lanes flops per
//! instruction), the peak of kernels that use it.

use serde::Serialize;
use std::time::Instant;

/// The measured peak.
#[derive(Clone, Debug, Serialize)]
pub struct Peak {
    pub gflops: f64,
    /// f32 lanes per vector the compiler chose (16: AVX-512).
    pub lanes: usize,
    /// Independent accumulators per thread.
    pub accumulators: usize,
    /// Threads it ran on.
    pub threads: usize,
    /// `fma` (`f32` multiply-adds) or `bf16 dot` (`vdpbf16ps`).
    pub instruction: String,
}

/// The kernel: no `#include` but the intrinsics header of the `bf16` variant; the vector
/// width comes from the compiler's target macros.
const SOURCE: &str = r#"
#ifdef __AVX512F__
#define TD_LANES 16
#define TD_ACC 24
#else
#define TD_LANES 8
#define TD_ACC 12
#endif
typedef float td_vec __attribute__((vector_size(TD_LANES * 4)));
#if defined(TD_DOT) && defined(__AVX512BF16__)
#include <immintrin.h>
#define TD_FLOPS_PER_LANE 4
#define TD_STEP(acc) acc = (td_vec)_mm512_dpbf16_ps((__m512)acc, ha, hb)
#else
#define TD_FLOPS_PER_LANE 2
#define TD_STEP(acc) acc = acc * a + b
#endif
int td_peak_lanes(void) { return TD_LANES; }
int td_peak_flops_per_lane(void) { return TD_FLOPS_PER_LANE; }
int td_peak_accumulators(void) { return TD_ACC; }
void td_peak(long iters, int threads, float *sink) {
#pragma omp parallel for num_threads(threads) schedule(static, 1)
    for (int t = 0; t < threads; ++t) {
        td_vec acc[TD_ACC];
        td_vec a, b;
        for (int l = 0; l < TD_LANES; ++l) {
            a[l] = 0.999999f;
            b[l] = 1e-6f * (float)(t + 1);
        }
        for (int j = 0; j < TD_ACC; ++j)
            for (int l = 0; l < TD_LANES; ++l) acc[j][l] = (float)(j + l);
#if defined(TD_DOT) && defined(__AVX512BF16__)
        /* Pairs of bf16 near 1 and 1e-6: the sums stay finite. */
        __m512bh ha = (__m512bh)_mm512_set1_epi32(0x3f803f80);
        __m512bh hb = (__m512bh)_mm512_set1_epi32(0x35863586);
#endif
        for (long i = 0; i < iters; ++i) {
#pragma GCC unroll 32
            for (int j = 0; j < TD_ACC; ++j) TD_STEP(acc[j]);
        }
        float s = 0.0f;
        for (int j = 0; j < TD_ACC; ++j)
            for (int l = 0; l < TD_LANES; ++l) s += acc[j][l];
        sink[t] = s;
    }
}
"#;

type PeakFn = unsafe extern "C" fn(i64, i32, *mut f32);
type CountFn = unsafe extern "C" fn() -> i32;

/// Compiles and runs the peak kernel for about `seconds` per run, `runs` runs; the best.
/// With `dot`, the `bf16` dot product's peak where the compiler targets AVX-512 BF16 (else
/// the FMA peak, and `instruction` says so).
pub fn measure(seconds: f64, runs: usize, dot: bool) -> Result<Peak, String> {
    let cc = tensor_dsl::runtime::cpu::compiler()?;
    let threads = if cc.openmp {
        crate::baseline::threads()
    } else {
        1
    };
    let dir = std::env::temp_dir().join(format!("tensor-dsl-bench-peak-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let so = dir.join("peak.so");
    let source = if dot {
        format!("#define TD_DOT 1\n{SOURCE}")
    } else {
        SOURCE.to_string()
    };
    let built = tensor_dsl::runtime::cpu::compile_shared_object(&source, &so);
    // SAFETY: the object we just built; its initialisers are the compiler's defaults.
    let lib =
        built.and_then(|()| unsafe { libloading::Library::new(&so) }.map_err(|e| e.to_string()));
    let _ = std::fs::remove_dir_all(&dir);
    let lib = lib.map_err(|e| format!("building the peak kernel: {e}"))?;
    // Never unloaded: its OpenMP region's threads belong to libgomp, which stays loaded.
    let lib: &'static libloading::Library = Box::leak(Box::new(lib));
    // SAFETY: the signatures of the functions in `SOURCE`.
    let (run, lanes, accs, per_lane) = unsafe {
        let sym = |name: &[u8]| {
            lib.get::<CountFn>(name)
                .map(|f| *f)
                .map_err(|e| e.to_string())
        };
        (
            *lib.get::<PeakFn>(b"td_peak\0").map_err(|e| e.to_string())?,
            sym(b"td_peak_lanes\0")?(),
            sym(b"td_peak_accumulators\0")?(),
            sym(b"td_peak_flops_per_lane\0")?(),
        )
    };
    let (lanes, accumulators) = (lanes as usize, accs as usize);
    let mut sink = vec![0.0f32; threads];
    let mut call = |iters: i64| {
        let start = Instant::now();
        // SAFETY: `sink` holds one float per thread.
        unsafe { run(iters, threads as i32, sink.as_mut_ptr()) };
        start.elapsed().as_secs_f64()
    };
    // Size the runs: grow until one takes ≥ 10 ms, then scale to `seconds`.
    let mut iters: i64 = 1 << 12;
    let mut t = call(iters);
    while t < 0.01 && iters < 1 << 40 {
        iters *= 4;
        t = call(iters);
    }
    let iters = ((iters as f64) * seconds / t.max(1e-9)).max(1.0) as i64;
    let flops = f64::from(per_lane) * (lanes * accumulators * threads) as f64 * iters as f64;
    let best = (0..runs.max(1))
        .map(|_| call(iters))
        .fold(f64::INFINITY, f64::min);
    if sink.iter().any(|s| !s.is_finite()) {
        return Err("the peak kernel produced a non-finite value".into());
    }
    Ok(Peak {
        gflops: flops / best / 1e9,
        lanes,
        accumulators,
        threads,
        instruction: if per_lane == 4 { "bf16 dot" } else { "fma" }.into(),
    })
}

#[cfg(test)]
mod tests {
    /// The kernel builds and reports a positive rate (not timed against anything).
    #[test]
    fn peak_kernel_runs() {
        if tensor_dsl::runtime::cpu::compiler().is_err() {
            eprintln!("skipped: no C compiler");
            return;
        }
        let p = super::measure(0.01, 1, false).unwrap();
        assert!(p.gflops > 0.0 && p.gflops.is_finite(), "{p:?}");
        assert!(p.lanes == 8 || p.lanes == 16);
        assert!(p.threads >= 1);
        assert_eq!(p.instruction, "fma");
        // The bf16 variant builds everywhere: `vdpbf16ps` where the compiler targets it.
        let d = super::measure(0.01, 1, true).unwrap();
        assert!(d.gflops > 0.0 && d.gflops.is_finite(), "{d:?}");
        assert!(
            d.instruction == "bf16 dot" || d.instruction == "fma",
            "{d:?}"
        );
    }
}
