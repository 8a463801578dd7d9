//! The row template (kernels of several stages: softmax, layer norm, RMS norm, pooling,
//! row reductions) against the reference interpreter:
//!
//! * the C code, with every CPU configuration, on awkward shapes;
//! * the CUDA code on the CPU emulator (`tests/cuda_emu.h`, needs `g++`), with threads per
//!   row from 1 to 1024 (shuffles within a warp, shared memory beyond);
//! * the CUDA code through the real NVRTC and `ptxas` at the bench's shapes (skipped
//!   without them unless `TENSOR_DSL_REQUIRE_NVRTC=1`);
//! * snapshots of the generated code.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::Case;
use rand::{rngs::StdRng, Rng, SeedableRng};
use std::path::Path;
use tensor_dsl::codegen::rows;
use tensor_dsl::ir::DType;
use tensor_dsl::runtime::rows as run_rows;
use tensor_dsl::template::rows::{RowPlan, RowsCpuConfig, RowsGpuConfig};
use tensor_dsl::Buffer;

const SOFTMAX: &str = "m[[i]] = max(x[[i, j]]); s[[i]] = sum(exp(x[[i, j]] - m[[i]])); \
                       y[[i, j]] = exp(x[[i, j]] - m[[i]]) / s[[i]]";
const LAYER_NORM: &str = "mu[[i]] = mean(x[[i, j]]); \
                          var[[i]] = mean((x[[i, j]] - mu[[i]]) * (x[[i, j]] - mu[[i]])); \
                          y[[i, j]] = (x[[i, j]] - mu[[i]]) * rsqrt(var[[i]] + 1e-5) * g[[j]] + b[[j]]";
const RMS_NORM: &str =
    "ms[[i]] = mean(x[[i, j]] * x[[i, j]]); y[[i, j]] = x[[i, j]] * rsqrt(ms[[i]] + 1e-6) * g[[j]]";
const MAX_POOL: &str =
    "let r = 0..3; let s = 0..3; y[[n, c, p, q]] = max(x[[n, c, 2 * p + r - 1, 2 * q + s - 1]])";
const ROW_MIN: &str = "y[[i]] = min(x[[i, j]])";

/// Cases of [`cases`] that only the CPU tests run (see `emulated_cuda_matches_reference`).
const CPU_ONLY: [&str; 6] = [
    "shifted_mean",
    "max_pool_f16",
    "min_pool_same",
    "max_pool_7x7",
    "sum_relu_dilated",
    "max_pool_3d",
];

/// (name, statements, shapes at which to test, element types).
fn cases() -> Vec<(&'static str, &'static str, Vec<String>, &'static str)> {
    let rc = |sh: &dyn Fn(usize, usize) -> String| -> Vec<String> {
        [(1, 1), (3, 1), (1, 7), (5, 33), (2, 1000), (3, 1537)]
            .iter()
            .map(|&(r, c)| sh(r, c))
            .collect()
    };
    vec![
        ("softmax", SOFTMAX, rc(&|r, c| format!("x={r}x{c} y={r}x{c}")), ""),
        ("softmax_f16", SOFTMAX, rc(&|r, c| format!("x={r}x{c} y={r}x{c}")), "x=f16,y=f16"),
        ("layer_norm", LAYER_NORM, rc(&|r, c| format!("x={r}x{c} g={c} b={c} y={r}x{c}")), ""),
        ("layer_norm_bf16", LAYER_NORM, rc(&|r, c| format!("x={r}x{c} g={c} b={c} y={r}x{c}")), "x=bf16,y=bf16"),
        ("rms_norm", RMS_NORM, rc(&|r, c| format!("x={r}x{c} g={c} y={r}x{c}")), ""),
        ("row_min", ROW_MIN, rc(&|r, c| format!("x={r}x{c} y={r}")), ""),
        (
            "max_pool",
            MAX_POOL,
            vec!["x=1x1x1x1 y=1x1x1x1".into(), "x=2x3x7x5 y=2x3x4x3".into(), "x=1x2x12x9 y=1x2x6x5".into(), "x=1x3x9x37 y=1x3x5x19".into()],
            "",
        ),
        (
            "max_pool_f16",
            MAX_POOL,
            vec!["x=1x2x12x9 y=1x2x6x5".into()],
            "x=f16,y=f16",
        ),
        (
            "avg_pool_2x2",
            "let r = 0..2; let s = 0..2; y[[n, c, p, q]] = mean(x[[n, c, 2 * p + r, 2 * q + s]])",
            vec!["x=2x3x9x7 y=2x3x4x3".into()],
            "",
        ),
        (
            "min_pool_same",
            "let r = 0..3; let s = 0..3; y[[c, p, q]] = min(x[[c, p + r - 1, q + s - 1]])",
            vec!["x=2x17x33 y=2x17x33".into()],
            "",
        ),
        (
            "max_pool_7x7",
            "let r = 0..7; let s = 0..7; y[[c, p, q]] = max(x[[c, 2 * p + r - 3, 2 * q + s - 3]])",
            vec!["x=2x13x11 y=2x7x6".into(), "x=1x3x3 y=1x2x2".into()],
            "",
        ),
        (
            "sum_relu_dilated",
            "let r = 0..3; let s = 0..2; y[[p, q]] = sum(relu(x[[p + 2 * r - 2, 3 * q + 2 * s - 1]]))",
            vec!["x=9x20 y=9x7".into()],
            "",
        ),
        (
            "max_pool_3d",
            "let t = 0..2; let r = 0..3; let s = 0..3; \
             y[[d, p, q]] = max(x[[2 * d + t, 2 * p + r - 1, 2 * q + s - 1]])",
            vec!["x=5x9x9 y=2x5x5".into()],
            "",
        ),
        (
            "shifted_mean",
            "mu[[i]] = mean(x[[i, j - 3]]); y[[i, j]] = x[[i, j]] - mu[[i]]",
            vec!["x=3x40 y=3x40".into(), "x=2x1000 y=2x1000".into()],
            "",
        ),
        (
            "heads_softmax_relu",
            "m[[b, i]] = max(x[[b, i, j]]); e[[b, i]] = sum(exp(x[[b, i, j]] - m[[b, i]])); \
             y[[b, i, j]] = exp(x[[b, i, j]] - m[[b, i]]) / e[[b, i]]; y[[b, i, j]] = relu(y[[b, i, j]] - 0.01)",
            vec!["x=2x3x17 y=2x3x17".into(), "x=1x1x300 y=1x1x300".into()],
            "",
        ),
        (
            "logsumexp",
            "m[[i]] = max(x[[i, j]]); y[[i]] = sum(exp(x[[i, j]] - m[[i]]))",
            rc(&|r, c| format!("x={r}x{c} y={r}")),
            "",
        ),
        (
            "prod_and_scalar",
            "t[[]] = mean(x[[i, j]]); y[[i, j]] = x[[i, j]] - t[[]]",
            vec!["x=1x1 y=1x1".into(), "x=13x70 y=13x70".into()],
            "",
        ),
        (
            "product",
            "y[[i]] = prod(1.0 + 0.01 * x[[i, j]])",
            rc(&|r, c| format!("x={r}x{c} y={r}")),
            "",
        ),
    ]
}

struct Prepared {
    name: String,
    case: Case,
    extents: Vec<usize>,
    data: Vec<Buffer>,
    want: Vec<f32>,
}

fn prepare() -> Vec<Prepared> {
    let mut rng = StdRng::seed_from_u64(16);
    let mut out = Vec::new();
    for (name, src, shapes, dtypes) in cases() {
        for shape in shapes {
            let case = Case::new(name, src, &shape, dtypes);
            let extents = case.extents();
            let k = &case.kernel;
            let data: Vec<Buffer> = case
                .shapes
                .iter()
                .enumerate()
                .map(|(p, s)| {
                    let n = if p == k.output { 0 } else { s.iter().product() };
                    let v: Vec<f32> = (0..n).map(|_| rng.gen_range(-3.0..3.0)).collect();
                    Buffer::from_f32(k.params[p].dtype, &v)
                })
                .collect();
            let refs: Vec<tensor_dsl::Data> = data.iter().map(Buffer::view).collect();
            let out_dtype = k.params[k.output].dtype;
            let mut want = Buffer::zeros(out_dtype, case.shapes[k.output].iter().product());
            tensor_dsl::reference::run(k, &extents, &case.shape_refs(), &refs, want.view_mut());
            out.push(Prepared {
                name: format!("{name} {shape}"),
                case,
                extents,
                data,
                want: want.to_f32(),
            });
        }
    }
    out
}

fn close(got: f32, want: f32, dtype: DType) -> bool {
    let tol = common::emulator_tolerance(dtype);
    (got.is_nan() && want.is_nan()) || got == want || (got - want).abs() <= tol * (1.0 + want.abs())
}

#[test]
fn every_kernel_is_of_the_row_form() {
    for p in prepare() {
        let plan = RowPlan::new(&p.case.kernel, &p.extents).unwrap();
        assert!(plan.rows >= 1, "{}", p.name);
    }
    // Intermediates that keep different indices are not: the CPU runs them on the reference.
    let k = tensor_dsl::ir::parse_text(
        "k",
        "a[[i]] = sum(x[[i, j]]); b[[j]] = sum(x[[i, j]]); y[[i, j]] = x[[i, j]] - a[[i]] - b[[j]]",
        None,
    )
    .unwrap();
    assert!(RowPlan::new(&k, &[3, 4]).is_err());
    let x: Vec<f32> = (0..12).map(|v| v as f32).collect();
    let mut got = vec![0.0f32; 12];
    let mut want = vec![0.0f32; 12];
    let shapes: [&[usize]; 2] = [&[3, 4], &[3, 4]];
    let data = [(&x).into(), Default::default()];
    run_rows::run_cpu(&k, &[3, 4], &shapes, &data, (&mut got).into()).unwrap();
    tensor_dsl::reference::run(&k, &[3, 4], &shapes, &data, (&mut want).into());
    assert_eq!(got, want);
}

/// Pooling windows separate into a vertical and a horizontal pass, the analytic default;
/// windows that do not (no vertical part, an index in both parts, two reads, no window along
/// the line) keep one reduction per output.
#[test]
fn pooling_windows_separate() {
    for (src, shapes, separates) in [
        (MAX_POOL, "x=1x64x112x112 y=1x64x56x56", true),
        (
            "let r = 0..2; let s = 0..2; y[[n, c, p, q]] = mean(x[[n, c, 2 * p + r, 2 * q + s]])",
            "x=1x8x10x10 y=1x8x5x5",
            true,
        ),
        (
            "let r = 0..3; let s = 0..3; y[[n, p, q, c]] = max(x[[n, 2 * p + r - 1, 2 * q + s - 1, c]])",
            "x=1x12x12x32 y=1x6x6x32",
            false,
        ),
        (
            "let r = 0..3; y[[c, p, q]] = max(x[[c, p + r, q + r]])",
            "x=2x10x10 y=2x8x8",
            false,
        ),
        (
            "let r = 0..3; let s = 0..3; y[[p, q]] = max(x[[p + r, q + s]] * w[[r, s]])",
            "x=10x10 w=3x3 y=8x8",
            false,
        ),
        (
            "let s = 0..3; y[[p, q]] = max(x[[p, q + s]])",
            "x=10x10 y=10x8",
            false,
        ),
    ] {
        let case = Case::new("pool", src, shapes, "");
        let extents = case.extents();
        let plan = RowPlan::new(&case.kernel, &extents).unwrap();
        assert_eq!(plan.window.is_some(), separates, "{src}");
        let config = RowsCpuConfig::heuristic_for(&plan, 16);
        assert_eq!(config.separable, separates, "{src}");
        let c = rows::generate_c(&case.kernel, &extents, &case.shape_refs(), &config).unwrap();
        assert_eq!(c.contains("/* horizontal "), separates, "{c}");
    }
    // The bench's pooling: the vertical pass of the rows inside the image has no check, the
    // horizontal pass reads the column buffer, padded with the identity.
    let case = Case::new("pool", MAX_POOL, "x=1x64x112x112 y=1x64x56x56", "");
    let extents = case.extents();
    let plan = RowPlan::new(&case.kernel, &extents).unwrap();
    let c = rows::generate_c(
        &case.kernel,
        &extents,
        &case.shape_refs(),
        &RowsCpuConfig::heuristic_for(&plan, 16),
    )
    .unwrap();
    assert!(c.contains("if (2*i_p - 1 >= 0) {"), "{c}");
    assert!(c.contains("td_col[td_c + 16] = (-INFINITY);"), "{c}");
    assert!(c.contains("td_col[2*i_q + i_s - 1 + 16]"), "{c}");
    // Rows of 112 columns prefetch the next row's window rows.
    assert!(c.contains("/* prefetch the next row's reads */"), "{c}");
}

/// The default puts vector lanes across rows where the reads walk the line contiguously and
/// the rows are short or strided: not for a short row minimum (each lane would read a row
/// of its own), but for a column sum and a small weighted window.
#[test]
fn lanes_across_rows_where_the_line_is_contiguous() {
    for (src, shapes, across) in [
        (ROW_MIN, "x=4096x32 y=4096", false),
        (ROW_MIN, "x=4096x1000 y=4096", false),
        ("y[[j]] = sum(x[[i, j]])", "x=1000x1000 y=1000", true),
        (
            "let r = 0..3; let s = 0..3; y[[p, q]] = max(x[[p + r, q + s]] * w[[r, s]])",
            "x=10x10 w=3x3 y=8x8",
            true,
        ),
    ] {
        let case = Case::new("k", src, shapes, "");
        let plan = RowPlan::new(&case.kernel, &case.extents()).unwrap();
        let config = RowsCpuConfig::heuristic_for(&plan, 16);
        assert_eq!((config.across, config.separable), (across, false), "{src}");
    }
}

#[test]
fn cpu_matches_reference_with_every_config() {
    if tensor_dsl::runtime::cpu::compiler().is_err() {
        println!("skipped: no C compiler");
        return;
    }
    for p in prepare() {
        let k = &p.case.kernel;
        let out_dtype = k.params[k.output].dtype;
        for config in RowsCpuConfig::all() {
            let refs: Vec<tensor_dsl::Data> = p.data.iter().map(Buffer::view).collect();
            let mut got = Buffer::zeros(out_dtype, p.want.len());
            run_rows::run_cpu_with(
                k,
                &p.extents,
                &p.case.shape_refs(),
                &refs,
                got.view_mut(),
                &config,
            )
            .map_err(|e| format!("{e:?}"))
            .unwrap();
            for (e, (g, w)) in got.to_f32().into_iter().zip(&p.want).enumerate() {
                assert!(
                    close(g, *w, out_dtype),
                    "{} {config:?}: element {e}: C {g} vs reference {w}",
                    p.name
                );
            }
        }
    }
}

/// GPU configurations to emulate: 1 to 1024 threads per row.
/// The heuristic, a fixed spread (1 to 1024 threads per row) and 3 random points of the
/// GPU space that tuning searches (drawn through `GpuTemplate`, as tuning does).
fn gpu_configs(k: &tensor_dsl::ir::Kernel, extents: &[usize]) -> Vec<RowsGpuConfig> {
    use tensor_dsl::template::gpu::{GpuTarget, GpuTemplate};
    let plan = RowPlan::new(k, extents).unwrap();
    let mut v = vec![RowsGpuConfig::heuristic(&plan)];
    let template = GpuTemplate::new(k, extents, &GpuTarget::h100()).unwrap();
    let default = template
        .decode(&template.default_config().unwrap())
        .unwrap();
    assert_eq!(default.rows, Some(v[0]), "{k}");
    let mut rng = StdRng::seed_from_u64(extents.iter().product::<usize>() as u64);
    for _ in 0..3 {
        let point = template.space().sample_uniform(&mut rng).unwrap();
        let schedule = template.decode(&point).unwrap();
        assert_eq!(template.encode(&schedule).unwrap(), point);
        let c = schedule.rows.unwrap();
        assert!(c.validate().is_ok(), "{c:?}");
        if !v.contains(&c) {
            v.push(c);
        }
    }
    for (t, r) in [(1, 32), (4, 8), (32, 1), (64, 2), (256, 1), (1024, 1)] {
        let c = RowsGpuConfig {
            threads_per_row: t,
            rows_per_block: r,
        };
        if c.validate().is_ok() && !v.contains(&c) {
            v.push(c);
        }
    }
    v
}

fn emulate(cxx: &Path, dir: &Path, n: usize, p: &Prepared) {
    let k = &p.case.kernel;
    let configs = gpu_configs(k, &p.extents);
    let out_dtype = k.params[k.output].dtype;
    let outputs = common::emulate_rows(
        cxx,
        dir,
        &format!("rows{n}"),
        &p.case,
        &p.extents,
        &p.data,
        &configs,
    )
    .unwrap_or_else(|e| panic!("{}: {e}", p.name));
    for (id, (config, got)) in configs.iter().zip(outputs).enumerate() {
        for (e, (g, w)) in got.into_iter().zip(&p.want).enumerate() {
            assert!(
                close(g, *w, out_dtype),
                "{} {config:?} (cfg{id} in {}): element {e}: emulated CUDA {g} vs reference {w}",
                p.name,
                dir.join(format!("rows{n}.cpp")).display()
            );
        }
    }
}

#[test]
fn emulated_cuda_matches_reference() {
    let Some(cxx) = common::gxx() else {
        println!("skipped: g++ not found (install the `g++` package, or set CXX)");
        return;
    };
    let dir = common::emulator_dir("rows-emu");
    // The windows that only the CPU template cuts differently are not emulated again (the
    // GPU code of a window reduction does not depend on its shape): `avg_pool_2x2` and
    // `max_pool` cover it.
    let prepared: Vec<Prepared> = prepare()
        .into_iter()
        .filter(|p| {
            !CPU_ONLY
                .iter()
                .any(|c| p.name.starts_with(&format!("{c} ")))
        })
        .collect();
    let workers = std::thread::available_parallelism()
        .map_or(2, |n| n.get())
        .min(4);
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..workers)
            .map(|w| {
                let (cxx, dir, prepared) = (&cxx, &dir, &prepared);
                scope.spawn(move || {
                    for (n, p) in prepared
                        .iter()
                        .enumerate()
                        .filter(|(n, _)| n % workers == w)
                    {
                        emulate(cxx, dir, n, p);
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
    });
    let _ = std::fs::remove_dir_all(&dir);
}

/// The bench's shapes: softmax over 512x1024 and 4096x4096, layer norm over 512x768, 3x3
/// stride-2 max pooling on 112x112x64, a row minimum and an `f16` softmax.
const NVRTC_CASES: &[(&str, &str, &str, &str)] = &[
    ("softmax_512x1024", SOFTMAX, "x=512x1024 y=512x1024", ""),
    ("softmax_4096x4096", SOFTMAX, "x=4096x4096 y=4096x4096", ""),
    (
        "layer_norm_512x768",
        LAYER_NORM,
        "x=512x768 g=768 b=768 y=512x768",
        "",
    ),
    (
        "rms_norm_512x768",
        RMS_NORM,
        "x=512x768 g=768 y=512x768",
        "",
    ),
    ("max_pool_112", MAX_POOL, "x=1x64x112x112 y=1x64x56x56", ""),
    ("row_min", ROW_MIN, "x=1000x1001 y=1000", ""),
    (
        "softmax_f16",
        SOFTMAX,
        "x=512x1024 y=512x1024",
        "x=f16,y=f16",
    ),
    (
        "layer_norm_bf16",
        LAYER_NORM,
        "x=512x768 g=768 b=768 y=512x768",
        "x=bf16,g=bf16,b=bf16,y=bf16",
    ),
];

#[test]
fn cuda_compiles_with_nvrtc_and_ptxas() {
    if !common::tools_present(common::nvrtc_unavailable()) {
        return;
    }
    #[cfg(feature = "cuda")]
    for &(name, src, shapes, dtypes) in NVRTC_CASES {
        let case = Case::new(name, src, shapes, dtypes);
        let extents = case.extents();
        for config in gpu_configs(&case.kernel, &extents) {
            let gen =
                rows::generate_cuda(&case.kernel, &extents, &case.shape_refs(), &config).unwrap();
            assert!(!gen.source.contains("#include"), "{name}");
            let ptx = tensor_dsl::runtime::nvrtc::compile_ptx(name, &gen.source, "compute_90")
                .unwrap_or_else(|e| panic!("{name} {config:?}: NVRTC: {e}\n{}", gen.source));
            let report = tensor_dsl::runtime::ptxas::assemble(&ptx, "sm_90")
                .unwrap_or_else(|e| panic!("{name} {config:?}: ptxas: {e}"));
            assert_eq!(report.spill_stores, 0, "{name} {config:?}: spills");
            let shared = 4 * (config.threads_per_row / 32) * config.rows_per_block;
            assert!(
                report.shared_bytes <= shared + 16,
                "{name} {config:?}: {report:?}"
            );
            println!("{name} {config:?}: {report:?}");
        }
    }
}

#[test]
fn generated_code_snapshots() {
    for (name, src, shapes) in [
        ("softmax", SOFTMAX, "x=4x10 y=4x10"),
        ("layer_norm", LAYER_NORM, "x=4x10 g=10 b=10 y=4x10"),
        ("max_pool", MAX_POOL, "x=2x3x7x5 y=2x3x4x3"),
        ("row_min", ROW_MIN, "x=5x7 y=5"),
    ] {
        let case = Case::new(name, src, shapes, "");
        let extents = case.extents();
        let plan = RowPlan::new(&case.kernel, &extents).unwrap();
        let c = rows::generate_c(
            &case.kernel,
            &extents,
            &case.shape_refs(),
            // (A fixed SIMD width, AVX-512's, so the snapshots do not depend on the machine.)
            &RowsCpuConfig::heuristic_for(&plan, 16),
        )
        .unwrap();
        insta::assert_snapshot!(format!("rows_c_{name}"), c);
        let g = RowsGpuConfig {
            threads_per_row: 64,
            rows_per_block: 2,
        };
        let cu = rows::generate_cuda(&case.kernel, &extents, &case.shape_refs(), &g).unwrap();
        insta::assert_snapshot!(format!("rows_cuda_{name}"), cu.source);
    }
    // Rows long enough for the vector accumulators (a max cut in two chunks, sums in
    // blocks of vectors) and for prefetching the next row, with remainders.
    for (name, src, shapes) in [
        ("softmax_130", SOFTMAX, "x=3x130 y=3x130"),
        ("layer_norm_130", LAYER_NORM, "x=3x130 g=130 b=130 y=3x130"),
    ] {
        let case = Case::new(name, src, shapes, "");
        let extents = case.extents();
        let plan = RowPlan::new(&case.kernel, &extents).unwrap();
        let c = rows::generate_c(
            &case.kernel,
            &extents,
            &case.shape_refs(),
            &RowsCpuConfig::heuristic_for(&plan, 16),
        )
        .unwrap();
        assert!(
            c.contains("td_hsum(") && c.contains("TD_PREFETCH(&t0[130 * i_i + td_b + td_next0]);"),
            "{c}"
        );
        insta::assert_snapshot!(format!("rows_c_{name}"), c);
    }
    // Streaming stores (the default with AVX-512 for outputs over 16 MiB) on a small
    // softmax: the stashed values in a row buffer, the output row in 16-float blocks.
    let case = Case::new("softmax", SOFTMAX, "x=3x40 y=3x40", "");
    let config = RowsCpuConfig {
        parallel: true,
        vector: 32,
        wide: true,
        stash: true,
        across: false,
        stream: true,
        separable: false,
    };
    let c = rows::generate_c(&case.kernel, &case.extents(), &case.shape_refs(), &config).unwrap();
    assert!(
        c.contains("td_stream16(") && c.contains("td_buf[i_j] = td_e;"),
        "{c}"
    );
    insta::assert_snapshot!("rows_c_softmax_streaming", c);
}

/// The vectorizable `exp` of the C row template: within 2e-7 of the exact value on the
/// normal range, 0 below it, +inf above, NaN for NaN (checked through a one-column sum).
#[test]
fn vector_exp_is_accurate() {
    if tensor_dsl::runtime::cpu::compiler().is_err() {
        println!("skipped: no C compiler");
        return;
    }
    let k = tensor_dsl::ir::parse_text("e", "y[[i]] = sum(exp(x[[i, j]]))", None).unwrap();
    let mut x: Vec<f32> = (0..20001).map(|n| -100.0 + n as f32 * 0.01).collect();
    x.extend([
        0.0,
        -0.0,
        1e-30,
        -1e-30,
        88.7,
        88.72,
        -86.9,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
    ]);
    let n = x.len();
    let mut y = vec![0.0f32; n];
    let shapes: [&[usize]; 2] = [&[n, 1], &[n]];
    let config = RowsCpuConfig {
        parallel: false,
        vector: 16,
        ..RowsCpuConfig::default()
    };
    let src = rows::generate_c(&k, &[n, 1], &shapes, &config).unwrap();
    assert!(src.contains("td_vexpf("), "{src}");
    run_rows::run_cpu_with(
        &k,
        &[n, 1],
        &shapes,
        &[(&x).into(), Default::default()],
        (&mut y).into(),
        &config,
    )
    .map_err(|e| format!("{e:?}"))
    .unwrap();
    for (&v, &got) in x.iter().zip(&y) {
        let want = f64::from(v).exp();
        if v.is_nan() {
            assert!(got.is_nan(), "exp({v}) = {got}");
        } else if v < -86.5 {
            assert!(f64::from(got) <= 3e-38 && got >= 0.0, "exp({v}) = {got}");
        } else if want > f64::from(f32::MAX) {
            assert_eq!(got, f32::INFINITY, "exp({v})");
        } else {
            let err = (f64::from(got) - want).abs() / want;
            assert!(
                err <= 2e-7,
                "exp({v}) = {got}, exact {want}, relative error {err:e}"
            );
        }
    }
}

/// Tools written against the einsum templates' entry points (`CpuTemplate`,
/// `runtime::cpu::run_with`, `GpuTemplate`, `codegen::cuda::generate`) get the row
/// template's code for a kernel of several stages.
#[test]
fn einsum_entry_points_give_the_row_template() {
    use tensor_dsl::template::cpu::{CpuConfig, CpuTemplate};
    use tensor_dsl::template::gpu::{default_schedule, GpuTarget, GpuTemplate};
    let have_cc = tensor_dsl::runtime::cpu::compiler().is_ok();
    let mut rng = StdRng::seed_from_u64(7);
    for p in prepare().iter().step_by(3) {
        let k = &p.case.kernel;
        let shapes = p.case.shape_refs();
        let t = CpuTemplate::new(k, &p.extents, 8).unwrap();
        let point = t.space().sample_uniform(&mut rng).unwrap();
        for config in [
            CpuConfig::heuristic(k, &p.extents, 8),
            t.decode(&point).unwrap(),
        ] {
            let src = tensor_dsl::codegen::c::generate(k, &p.extents, &shapes, &config);
            assert!(src.contains("row template"), "{}: {src}", p.name);
            if have_cc {
                let out_dtype = k.params[k.output].dtype;
                let refs: Vec<tensor_dsl::Data> = p.data.iter().map(Buffer::view).collect();
                let mut got = Buffer::zeros(out_dtype, p.want.len());
                tensor_dsl::runtime::cpu::run_with(
                    k,
                    &p.extents,
                    &shapes,
                    &refs,
                    got.view_mut(),
                    &config,
                )
                .map_err(|e| format!("{e:?}"))
                .unwrap();
                for (g, w) in got.to_f32().into_iter().zip(&p.want) {
                    assert!(close(g, *w, out_dtype), "{}: {g} vs {w}", p.name);
                }
            }
        }
        let target = GpuTarget::h100();
        let g = GpuTemplate::new(k, &p.extents, &target).unwrap();
        let point = g.space().sample_uniform(&mut rng).unwrap();
        for s in [
            default_schedule(k, &p.extents, &target),
            g.decode(&point).unwrap(),
        ] {
            let src = tensor_dsl::codegen::cuda::generate(k, &p.extents, &shapes, &s);
            assert!(
                src.source.contains("row template"),
                "{}: {}",
                p.name,
                src.source
            );
        }
    }
}

/// A row configuration travels in the CPU schedule's own `rows` field: every point of each
/// case's space decodes to a schedule that validates, whose einsum tile knobs are neutral
/// and whose row knobs come back unchanged; an einsum schedule's packing, loop order,
/// reduction blocking or vector code is not read as a row knob (stash, lanes across rows,
/// separable window, streaming), and row knobs on a matmul are refused.
#[test]
fn row_knobs_travel_in_their_own_field() {
    use tensor_dsl::template::cpu::{CpuConfig, CpuTemplate};
    for p in prepare() {
        let k = &p.case.kernel;
        let t = CpuTemplate::new(k, &p.extents, 16).unwrap();
        let plan = RowPlan::new(k, &p.extents).unwrap();
        for r in RowsCpuConfig::all_for(&plan) {
            let c = r.to_cpu_config();
            assert_eq!(c.rows, Some(r), "{}", p.name);
            assert_eq!(RowsCpuConfig::from_cpu_config(&c), r, "{}", p.name);
            assert_eq!(
                (c.pack, c.unroll_outer, c.k_block, c.vector_code),
                (false, false, 0, 0),
                "{}: {c:?}",
                p.name
            );
            assert!(c.validate(k).is_ok(), "{}: {c:?}", p.name);
            // (`all_for` also lists points the space's constraints leave out.)
            if let Some(point) = t.encode(&c) {
                assert_eq!(t.decode(&point).unwrap(), c, "{}", p.name);
            }
        }
        let einsum = CpuConfig {
            pack: true,
            unroll_outer: true,
            k_block: 1,
            vector_code: 16,
            rows: None,
            ..CpuConfig::heuristic(k, &p.extents, 16)
        };
        let r = RowsCpuConfig::from_cpu_config(&einsum);
        assert!(
            !(r.stash || r.across || r.separable || r.stream),
            "{}: {r:?}",
            p.name
        );
        assert!(einsum.validate(k).is_err(), "{}", p.name);
    }
    let mm = tensor_dsl::ir::parse_text("mm", "c[[i,j]] += a[[i,k]] * b[[k,j]]", None).unwrap();
    let with_rows = CpuConfig {
        rows: Some(RowsCpuConfig::default()),
        ..CpuConfig::heuristic(&mm, &[64, 64, 64], 16)
    };
    assert!(with_rows.validate(&mm).is_err());
}

/// The row template's CPU space is what CPU tuning searches for a kernel of several stages:
/// the default first, every measured point checked against the reference, the best a
/// configuration of the row template (stashing softmax's `exp` in its output row).
#[test]
fn cpu_tuning_searches_the_row_space() {
    if tensor_dsl::runtime::cpu::compiler().is_err() {
        println!("skipped: no C compiler");
        return;
    }
    let k = tensor_dsl::ir::parse_text("softmax", SOFTMAX, None).unwrap();
    let shapes = vec![vec![37, 300], vec![37, 300]];
    let t = tensor_dsl::template::cpu::CpuTemplate::new(&k, &[37, 300], 16).unwrap();
    assert_eq!(t.space().knob_count(), 6, "{:?}", t.space().feature_names());
    let opts = tensor_dsl::autotune::TuneOptions {
        trials: 6,
        batch: 3,
        strategy: "random".into(),
        ..Default::default()
    };
    let out = tensor_dsl::autotune::tune_cpu(&k, &shapes, &opts, &mut |_| {}).unwrap();
    assert_eq!(out.records.len(), 6);
    assert!(
        out.records.iter().all(|r| r.error.is_none()),
        "{:?}",
        out.records
    );
    let (best, text) = out.best.unwrap();
    assert!(best.validate(&k).is_ok(), "{best:?}");
    assert!(text.contains("vector="), "{text}");
    let default = tensor_dsl::template::cpu::CpuConfig::heuristic(&k, &[37, 300], 16);
    let rows = RowsCpuConfig::from_cpu_config(&default);
    assert!(rows.stash && rows.vector == 32 && rows.wide, "{rows:?}");
    let src = rows::generate_c(&k, &[37, 300], &[&[37, 300], &[37, 300]], &rows).unwrap();
    // One exp per element: the output's pass reads the stashed values.
    let (sum, output) = src.split_once("const float td_inv").unwrap();
    assert!(
        sum.contains("td_vexpf(") && !output.contains("td_vexpf("),
        "{src}"
    );
    assert!(output.contains("const float td_s = out["), "{src}");
}
