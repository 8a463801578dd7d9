//! Generated CUDA, run on the CPU: every kernel on small awkward shapes (1, primes,
//! non-multiples of the tiles), with the default schedule and random points of the GPU
//! template's space, compiled as C++ with `tests/cuda_emu.h` (one fiber per CUDA thread,
//! real barriers, emulated warp shuffles) and compared with the reference interpreter.
//!
//! This is how the CUDA generator's arithmetic, tiling, padding, staging, vector loads and
//! lane sums are checked on machines without a GPU. It needs `g++` (Debian/Ubuntu package
//! `g++`); without it the test prints why and passes.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use rand::{rngs::StdRng, Rng, SeedableRng};
use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;
use tensor_dsl::codegen::cuda;
use tensor_dsl::codegen::storage_type;
use tensor_dsl::ir::{parse_text, DType, Kernel};
use tensor_dsl::template::gpu::{
    default_schedule, simt_schedule, GpuSchedule, GpuTarget, GpuTemplate,
};
use tensor_dsl::template::gpu_simt::SimtGemm;
use tensor_dsl::Buffer;

/// Kernels covering the language: many inputs, diagonals, scalars, outer products,
/// transposes, affine (padded) accesses, epilogues with every built-in.
const KERNELS: &[&str] = &[
    "o[[i, j]] = log(abs(a[[i, j]]) + 1.0) + pow(abs(b[[i, j]]), 1.5) + erf(a[[i, j]]) + silu(b[[i, j]]) + rsqrt(a[[i, j]] * a[[i, j]] + 1.0)",
    "c[[i, j]] += a[[i, k]] * b[[k, j]]",
    // What `#[tensor_kernel(accumulate)]` makes of a matmul (`Kernel::accumulating`).
    "c[[i, j]] += a[[i, k]] * b[[k, j]]; c[[i, j]] = c[[i, j]] + c_prev[[i, j]]",
    "c[[i, j]] += a[[k, i]] * b[[j, k]]",
    "c[[b, i, j]] += x[[b, k, i]] * y[[b, k, j]]",
    "o[[i, j]] = a[[i]] * b[[j]]",
    "s[[]] += a[[i]] * b[[i]]",
    "t[[]] += a[[i, i]]",
    "d[[i]] = a[[i, i]]",
    "o[[i]] += a[[i, j]] * b[[j, l]] * c[[l]] * d[[i]]",
    "o[[i, l]] += a[[i, j]] * b[[j, k]] * c[[k, l]]",
    "o[[i, j]] = a[[i, j]] + b[[i, j]] * 2.0 - a[[i, j]] / 3.0",
    "o[[i, j]] = max(a[[i, j]], b[[i, j]]) - min(a[[i, j]], -b[[i, j]])",
    "o[[j, i]] = a[[i, j]]",
    "o[[i]] += a[[i + k]] * w[[k]]",
    "o[[i]] += a[[2 * i + k - 1]] * w[[k]]",
    "o[[i]] += a[[i - k + 2]] * w[[k]]",
    "o[[i, j]] = a[[j - 2 * i + 3, i]] - b[[i]]",
    "y[[n, f, p, q]] += x[[n, c, 2 * p + r - 1, 2 * q + s - 1]] * w[[f, c, r, s]]; y[[n, f, p, q]] = relu(y[[n, f, p, q]] + bias[[f]])",
    "o[[i, j]] += a[[i, k]] * b[[k, j]]; o[[i, j]] = gelu(o[[i, j]]); o[[i, j]] = sigmoid(o[[i, j]]) + tanh(o[[i, j]])",
    "o[[i, j]] = exp(a[[i, j]]) + sqrt(a[[i, j]] * a[[i, j]] + 1.0)",
    "o[[i]] += exp(a[[i, k]]) * -b[[k]]",
    "o[[i]] += a[[i, k]] + 1.0",
    "o[[i, j, l]] += a[[i, k]] * b[[j, k]] * c[[l, k]]",
    "o[[i, j]] += a[[i, k]] * a[[k, j]]",
    "o[[]] = a[[]] * 2.0 - 1.0",
    "o[[i]] += a[[i]] * s[[]]",
    "o[[i, j]] += a[[i - 2, j + k]] * b[[k]]; o[[i, j]] = o[[i, j]] * 0.5 + 1.0",
];

/// Fixed cases on top of the random ones: long reductions (lanes beyond a warp by default)
/// and a mid-size matmul. Every dimension is a plain index.
const FIXED: &[(&str, &[usize])] = &[
    ("s[[]] += a[[i]] * b[[i]]", &[1000]),
    ("o[[i]] += a[[i, k]] * b[[k]]", &[5, 1000]),
    ("c[[i, j]] += a[[i, k]] * b[[k, j]]", &[96, 80, 64]),
];

/// Kernels in GEMM form at shapes the SIMT GEMM template takes (fused `m`, `n` of at least
/// 16): awkward extents (edge tiles, a reduction not a multiple of the k-tile), a batch, a
/// 3x3 convolution with zero padding 1 (implicit GEMM, padding checks), a 1x1 one, an
/// epilogue, a transposed operand. Affine dimensions are as large as the range they read.
const SIMT: &[(&str, &[usize], &str)] = &[
    ("c[[i, j]] += a[[i, k]] * b[[k, j]]", &[37, 50, 29], ""),
    ("c[[i, j]] += a[[k, i]] * b[[j, k]]", &[40, 24, 70], ""),
    ("c[[b, i, j]] += x[[b, i, k]] * y[[b, k, j]]", &[3, 20, 33, 40], ""),
    (
        "y[[n, f, p, q]] += x[[n, c, p + r - 1, q + s - 1]] * w[[f, c, r, s]]",
        &[1, 20, 6, 5, 9, 3, 3],
        "",
    ),
    (
        "y[[n, f, p, q]] += x[[n, c, p, q]] * w[[f, c]]; y[[n, f, p, q]] = relu(y[[n, f, p, q]] + bias[[f]])",
        &[2, 24, 4, 5, 16],
        "",
    ),
    (
        "c[[i, j]] += a[[i, k]] * b[[k, j]]; c[[i, j]] = gelu(c[[i, j]] + bias[[j]])",
        &[64, 48, 96],
        "a=bf16,b=f16",
    ),
];

/// SIMT GEMM points beyond each case's default and random ones: the default with these
/// knobs set (`knob=value;...`, each must be a valid point of the case's space), so every
/// knob of the template — split-K, `cp.async` stages, `float4` loads, rasterization, the
/// fused reduction — runs against the reference on awkward shapes (primes, edge tiles, a
/// reduction that is not a multiple of the k-tile, padding).
const SIMT_POINTS: &[(&str, &[usize], &str, &[&str])] = &[
    (
        "c[[i, j]] += a[[i, k]] * b[[k, j]]",
        &[130, 50, 97],
        "",
        &[
            "bm=32;bn=32;tm=4;tn=4;bk=8;split=2;pipeline=0;vector=1",
            "bm=32;bn=32;tm=4;tn=4;bk=16;split=4;pipeline=3;vector=1",
            "bm=32;bn=64;tm=4;tn=8;bk=8;pipeline=2;raster=4;split=1;vector=1",
            "bm=32;bn=32;tm=4;tn=4;bk=8;pipeline=4;raster=4;split=8;vector=1;unroll=2",
        ],
    ),
    (
        "c[[i, j]] += a[[i, k]] * b[[k, j]]",
        &[67, 48, 44],
        "",
        &[
            "bm=64;bn=64;tm=8;tn=8;bk=8;vector=4;pipeline=0;split=1",
            "bm=64;bn=64;tm=8;tn=8;bk=16;vector=4;pipeline=3;split=1",
            "bm=32;bn=32;tm=4;tn=4;bk=8;vector=4;pipeline=2;split=2",
            "bm=32;bn=64;tm=4;tn=8;bk=8;vector=4;pipeline=0;split=4;raster=1",
        ],
    ),
    (
        "c[[i, j]] += a[[k, i]] * b[[j, k]]",
        &[40, 36, 72],
        "",
        &[
            "bm=32;bn=32;tm=4;tn=4;bk=8;vector=4;pipeline=0;split=1",
            "bm=32;bn=32;tm=4;tn=4;bk=8;vector=4;pipeline=4;split=8",
            "bm=64;bn=32;tm=8;tn=4;bk=16;vector=4;pipeline=3;split=2",
        ],
    ),
    (
        "c[[b, i, j]] += x[[b, k, i]] * y[[b, k, j]]",
        &[3, 20, 36, 41],
        "",
        &[
            "bm=32;bn=32;tm=4;tn=4;bk=8;vector=4;pipeline=2;split=2",
            "bm=32;bn=32;tm=4;tn=4;bk=16;vector=1;pipeline=0;split=2",
        ],
    ),
    (
        "y[[n, f, p, q]] += x[[n, c, 2 * p + r - 3, 2 * q + s - 3]] * w[[f, c, r, s]]; y[[n, f, p, q]] = relu(y[[n, f, p, q]] + bias[[f]])",
        &[1, 17, 5, 7, 3, 7, 7],
        "",
        &[
            "bm=32;bn=32;tm=4;tn=4;bk=16;kfuse=1;pipeline=3;split=1;vector=1",
            "bm=32;bn=32;tm=4;tn=4;bk=8;kfuse=1;pipeline=0;split=2;vector=1",
            "bm=32;bn=32;tm=4;tn=4;bk=32;kfuse=1;pipeline=2;split=4;vector=1",
            "bm=32;bn=32;tm=4;tn=4;bk=8;kfuse=0;pipeline=3;split=1;vector=1",
            "bm=32;bn=32;tm=4;tn=4;bk=8;kfuse=0;pipeline=2;split=16;vector=1",
        ],
    ),
    (
        "y[[n, p, q, f]] += x[[n, p + r - 1, q + s - 1, c]] * w[[r, s, c, f]]",
        &[2, 5, 3, 20, 12, 3, 3],
        "",
        &[
            "bm=32;bn=32;tm=4;tn=4;bk=8;kfuse=0;vector=4;pipeline=0;split=1",
            "bm=32;bn=32;tm=4;tn=4;bk=16;kfuse=0;vector=4;pipeline=3;split=1",
            "bm=32;bn=32;tm=4;tn=4;bk=16;kfuse=1;vector=4;pipeline=2;split=2",
            "bm=32;bn=32;tm=4;tn=4;bk=8;kfuse=1;vector=1;pipeline=0;split=4",
            "bm=32;bn=32;tm=4;tn=4;bk=8;kfuse=0;vector=4;pipeline=0;split=8",
        ],
    ),
    // No padding: a table without window checks (whole k-tiles with bk 8 and 16; bk 32
    // starts with a partial tile, which is checked).
    (
        "y[[n, f, p, q]] += x[[n, c, p + r, q + s]] * w[[f, c, r, s]]",
        &[2, 17, 5, 6, 16, 3, 3],
        "",
        &[
            "bm=32;bn=32;tm=4;tn=4;bk=16;kfuse=1;pipeline=3;split=1;vector=4",
            "bm=32;bn=32;tm=4;tn=4;bk=8;kfuse=1;pipeline=2;split=2;vector=1",
            "bm=32;bn=32;tm=4;tn=4;bk=32;kfuse=1;pipeline=0;split=1;vector=1",
        ],
    ),
    (
        "y[[n, p, q, f]] += x[[n, 2 * p + r, 2 * q + s, c]] * w[[r, s, c, f]]",
        &[1, 4, 5, 16, 3, 3, 8],
        "",
        &[
            "bm=32;bn=32;tm=4;tn=4;bk=8;kfuse=1;vector=4;pipeline=3;split=2",
            "bm=32;bn=32;tm=4;tn=4;bk=16;kfuse=1;vector=1;pipeline=0;split=1",
        ],
    ),
    (
        "y[[n, p, q, f]] += x[[n, 2 * p + r - 3, 2 * q + s - 3, c]] * w[[r, s, c, f]]",
        &[1, 6, 7, 16, 7, 7, 3],
        "",
        &[
            "bm=32;bn=32;tm=4;tn=4;bk=16;kfuse=1;vector=4;pipeline=3;split=1",
            "bm=32;bn=32;tm=4;tn=4;bk=8;kfuse=1;vector=1;pipeline=0;split=2",
        ],
    ),
];

/// Half-precision kernels (`--dtypes`-style element types): products accumulate in `f32`, the
/// output is rounded once. Every conversion path the CUDA code takes without a GPU (the
/// integer ones) is exercised: `bf16` and `f16` inputs and outputs, mixed with `f32`.
const HALF: &[(&str, &str)] = &[
    ("c[[i, j]] += a[[i, k]] * b[[k, j]]", "a=bf16,b=bf16"),
    ("c[[i, j]] += a[[i, k]] * b[[k, j]]", "a=f16,b=f16,c=f16"),
    (
        "y[[n, f, p, q]] += x[[n, c, 2 * p + r - 1, 2 * q + s - 1]] * w[[f, c, r, s]]; y[[n, f, p, q]] = relu(y[[n, f, p, q]] + bias[[f]])",
        "x=bf16,w=bf16,y=bf16",
    ),
    (
        "o[[i, j]] += a[[i, k]] * b[[k, j]]; o[[i, j]] = gelu(o[[i, j]])",
        "a=f16,b=bf16,o=f16",
    ),
    ("c[[b, i, j]] += x[[b, k, i]] * y[[b, k, j]]", "x=f16,y=f16,c=bf16"),
];

const AWKWARD: &[usize] = &[1, 2, 3, 5, 7, 8, 13, 16, 17, 31, 33, 64, 257, 1000];

/// Shapes for `kernel` from random extents (at most `work` iteration points): plain
/// dimensions take the index's extent, affine ones a random size around the range they
/// read (so padding is exercised).
fn random_case(
    kernel: &Kernel,
    rng: &mut StdRng,
    work: usize,
) -> Option<(Vec<usize>, Vec<Vec<usize>>)> {
    // Sometimes one extent for all indices (kernels like `a[[i, k]] * a[[k, j]]` need it).
    let same = rng
        .gen_bool(0.25)
        .then(|| AWKWARD[rng.gen_range(0..AWKWARD.len())]);
    let extents: Vec<usize> = kernel
        .indices
        .iter()
        .map(|_| same.unwrap_or_else(|| AWKWARD[rng.gen_range(0..AWKWARD.len())]))
        .collect();
    if extents.iter().fold(1usize, |a, &e| a.saturating_mul(e)) > work {
        return None;
    }
    common::shapes_for(kernel, &extents, |hi| {
        rng.gen_range(1..=(hi.max(0) as usize + 2))
    })
}

fn close(got: f32, want: f32, dtype: DType) -> bool {
    let tol = common::emulator_tolerance(dtype);
    (got.is_nan() && want.is_nan()) || (got - want).abs() <= tol * (1.0 + want.abs())
}

/// One shape of one kernel: its data, the expected output and the schedules to try.
struct Shape {
    extents: Vec<usize>,
    shapes: Vec<Vec<usize>>,
    data: Vec<Buffer>,
    want: Vec<f32>,
    schedules: Vec<(String, GpuSchedule)>,
}

/// What the configs exercised, summed over the test.
#[derive(Default, Debug)]
struct Coverage {
    configs: usize,
    lanes: usize,
    lanes_over_warp: usize,
    staged: usize,
    vector_loads: usize,
    vthreads: usize,
    padded_spatial: usize,
    padded_reduction: usize,
    multi_block: usize,
    simt: usize,
    split: usize,
    split_outer: usize,
    cp_async: usize,
    float4: usize,
    raster: usize,
    kfuse: usize,
    kfuse_unchecked: usize,
    switches: u64,
}

/// `base` with the knobs of `point` (`knob=value;...`) set.
fn simt_point(base: &SimtGemm, point: &str) -> SimtGemm {
    let mut s = base.clone();
    for kv in point.split(';') {
        let (k, v) = kv.split_once('=').unwrap();
        let v: usize = v.parse().unwrap();
        match k {
            "bm" => s.bm = v,
            "bn" => s.bn = v,
            "bk" => s.bk = v,
            "tm" => s.tm = v,
            "tn" => s.tn = v,
            "warp_m" => s.warp_m = v,
            "unroll" => s.unroll = v,
            "vector" => s.vector = v,
            "pipeline" => s.pipeline = v,
            "raster" => s.raster = v,
            "split" => s.split = v,
            "kfuse" => s.kfuse = v == 1,
            other => panic!("unknown knob {other}"),
        }
    }
    s
}

fn check_kernel(
    cxx: &Path,
    dir: &Path,
    n: usize,
    src: &str,
    fixed: Option<&[usize]>,
    dtypes: &str,
    points: &[&str],
) -> Coverage {
    let kernel = parse_text(&format!("k{n}"), src, None)
        .unwrap()
        .with_dtypes(dtypes)
        .unwrap();
    let out_dtype = kernel.params[kernel.output].dtype;
    let target = GpuTarget::h100();
    let mut rng = StdRng::seed_from_u64(1000 + n as u64);
    let mut cases: Vec<Shape> = Vec::new();
    let mut cov = Coverage::default();
    for _ in 0..200 {
        if cases.len() == if fixed.is_some() { 1 } else { 2 } {
            break;
        }
        let case = match fixed {
            Some(extents)
                if kernel
                    .accesses()
                    .iter()
                    .any(|a| a.dims.iter().any(|d| d.as_var().is_none())) =>
            {
                // With zero padding (a window starting below 0), as wide as the padding
                // on both sides; without, exactly the range read (no point outside).
                let padded = kernel
                    .accesses()
                    .iter()
                    .any(|a| a.dims.iter().any(|d| d.range(extents).0 < 0));
                common::shapes_for(&kernel, extents, |hi| {
                    if padded {
                        hi.max(1) as usize
                    } else {
                        hi as usize + 1
                    }
                })
            }
            Some(extents) => {
                let shape = |p: usize| -> Vec<usize> {
                    let a = kernel.accesses().into_iter().find(|a| a.tensor == p);
                    match a {
                        Some(a) => a
                            .dims
                            .iter()
                            .map(|d| extents[d.as_var().unwrap()])
                            .collect(),
                        None => kernel.spatial().iter().map(|&s| extents[s]).collect(),
                    }
                };
                Some((
                    extents.to_vec(),
                    (0..kernel.params.len()).map(shape).collect(),
                ))
            }
            None => random_case(&kernel, &mut rng, 40_000),
        };
        let Some((extents, shapes)) = case else {
            continue;
        };
        let data = common::random_inputs(&kernel, &shapes, &mut rng);
        let want = common::reference_output(&kernel, &extents, &shapes, &data);
        let template = GpuTemplate::new(&kernel, &extents, &target).unwrap();
        let default = default_schedule(&kernel, &extents, &target);
        let config = template.default_config().unwrap();
        assert_eq!(template.decode(&config).unwrap(), default);
        let mut schedules = vec![(
            format!("default {}", template.space().format(&config).unwrap()),
            default,
        )];
        // Cases with explicit points draw fewer random ones (the emulator's time).
        for _ in 0..if points.is_empty() { 5 } else { 2 } {
            let point = template
                .space()
                .sample_uniform(&mut rng)
                .unwrap_or_else(|e| panic!("{src} {extents:?}: {e}"));
            let s = template.decode(&point).unwrap();
            s.check_limits(&kernel, &target).unwrap();
            schedules.push((template.space().format(&point).unwrap(), s));
        }
        for point in points {
            let base = default_schedule(&kernel, &extents, &target)
                .simt
                .unwrap_or_else(|| panic!("{src} {extents:?} is not a SIMT GEMM"));
            let t = simt_point(&base, point);
            let s = simt_schedule(&kernel, &extents, t);
            let config = template
                .encode(&s)
                .unwrap_or_else(|e| panic!("{src} {extents:?} {point}: {e}"));
            s.check_limits(&kernel, &target).unwrap();
            schedules.push((template.space().format(&config).unwrap(), s));
        }
        cases.push(Shape {
            extents,
            shapes,
            data,
            want,
            schedules,
        });
    }
    assert!(!cases.is_empty(), "{src}: no random shape found");

    // One C++ file: every config in its own namespace, then a main running them in order.
    let mut cpp = String::from("#include \"cuda_emu.h\"\n");
    let mut main = String::from("int main(int argc, char **argv) {\n    (void)argc;\n");
    let _ = writeln!(
        main,
        "    FILE *o = fopen(argv[{}], \"wb\");",
        cases.len() + 1
    );
    let mut id = 0;
    for (c, case) in cases.iter().enumerate() {
        let _ = writeln!(
            main,
            "    {{\n        FILE *f = fopen(argv[{}], \"rb\");",
            c + 1
        );
        let inputs = kernel.inputs();
        for &p in &inputs {
            let ty = storage_type(kernel.params[p].dtype);
            let _ = writeln!(
                main,
                "        {ty} *t{p} = ({ty} *)td_read_bytes(f, {});",
                case.data[p].view().bytes().len()
            );
        }
        let n_out: usize = case.shapes[kernel.output].iter().product();
        let shape_refs: Vec<&[usize]> = case.shapes.iter().map(|s| s.as_slice()).collect();
        for (_, schedule) in &case.schedules {
            let src = cuda::generate(&kernel, &case.extents, &shape_refs, schedule);
            assert!(!src.source.contains("#error"), "{}", src.source);
            cov.configs += 1;
            cov.lanes += usize::from(schedule.lanes > 1);
            cov.lanes_over_warp += usize::from(schedule.lanes > 32);
            cov.staged += usize::from(schedule.stage.iter().any(|&s| s));
            cov.vector_loads += usize::from(src.source.contains("reinterpret_cast"));
            cov.multi_block += usize::from(src.grid[0] > 1);
            cov.simt += usize::from(schedule.simt.is_some());
            if let Some(t) = &schedule.simt {
                cov.split += usize::from(t.split > 1);
                cov.split_outer += usize::from(src.source.contains("td_oi"));
                cov.cp_async += usize::from(src.source.contains("td_cp_async"));
                cov.float4 += usize::from(src.source.contains("float4"));
                cov.raster += usize::from(t.raster > 1);
                cov.kfuse += usize::from(src.source.contains("td_tab_"));
                cov.kfuse_unchecked +=
                    usize::from(src.source.contains("td_tab_") && !src.source.contains("_nm"));
            }
            cov.vthreads += usize::from(
                kernel
                    .spatial()
                    .iter()
                    .any(|&s| schedule.axes[s].factors[1] > 1),
            );
            cov.padded_spatial += usize::from(
                kernel
                    .spatial()
                    .iter()
                    .any(|&s| schedule.axes[s].padded > case.extents[s]),
            );
            cov.padded_reduction += usize::from(
                kernel
                    .reduction()
                    .iter()
                    .any(|&r| schedule.axes[r].padded > case.extents[r]),
            );
            let _ = writeln!(
                cpp,
                "namespace cfg{id} {{\n{}}}\n",
                src.source.replace("extern \"C\" ", "")
            );
            let args: Vec<String> = inputs
                .iter()
                .map(|p| format!("t{p}"))
                .chain(["out".to_string()])
                .collect();
            let (ty, out_bytes) = (storage_type(out_dtype), n_out * out_dtype.size());
            let _ = writeln!(
                main,
                "        {{\n            {ty} *out = ({ty} *)td_alloc_nan_bytes({out_bytes});\n            \
                 fprintf(stderr, \"config {id}\\n\");\n            \
                 unsigned long sw = td_launch({}, {}, [&] {{ cfg{id}::{}({}); }});\n            \
                 fwrite(&sw, sizeof sw, 1, o);\n            \
                 fwrite(out, 1, {out_bytes}, o);\n            free(out);\n        }}",
                src.grid[0],
                src.block[0],
                src.entry,
                args.join(", ")
            );
            id += 1;
        }
        main.push_str("        fclose(f);\n    }\n");
    }
    main.push_str("    fclose(o);\n    return 0;\n}\n");
    cpp.push_str(&main);

    let base = dir.join(format!("k{n}"));
    let cpp_path = base.with_extension("cpp");
    let exe =
        common::build_emulated(cxx, dir, &base, &cpp).unwrap_or_else(|e| panic!("{src}: {e}"));
    let mut run = Command::new(&exe);
    for (c, case) in cases.iter().enumerate() {
        let path = base.with_extension(format!("in{c}"));
        let bytes: Vec<u8> = kernel
            .inputs()
            .iter()
            .flat_map(|&p| case.data[p].view().bytes().to_vec())
            .collect();
        std::fs::write(&path, bytes).unwrap();
        run.arg(path);
    }
    let out_path = base.with_extension("out");
    run.arg(&out_path);
    let out = run.output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let last_config = stderr
        .lines()
        .filter_map(|l| l.strip_prefix("config "))
        .next_back()
        .and_then(|c| c.parse::<usize>().ok());
    let describe = |id: usize| {
        let mut k = id;
        for case in &cases {
            if k < case.schedules.len() {
                return format!(
                    "extents {:?} shapes {:?} config {}",
                    case.extents, case.shapes, case.schedules[k].0
                );
            }
            k -= case.schedules.len();
        }
        String::new()
    };
    assert!(
        out.status.success(),
        "{src}: the emulated kernel failed ({}) at {}:\n{stderr}",
        out.status,
        last_config.map(describe).unwrap_or_default()
    );
    let bytes = std::fs::read(&out_path).unwrap();
    let mut at = 0;
    let mut id = 0;
    for case in &cases {
        for (text, _) in &case.schedules {
            let sw = u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap());
            cov.switches += sw;
            at += 8;
            let size = out_dtype.size();
            let got = Buffer::from_bytes(out_dtype, &bytes[at..at + size * case.want.len()]);
            at += size * case.want.len();
            for (e, (g, w)) in got.to_f32().into_iter().zip(&case.want).enumerate() {
                assert!(
                    close(g, *w, out_dtype),
                    "{src} extents {:?} shapes {:?} config {text} (cfg{id} in {}): element {e}: \
                     emulated CUDA {g} vs reference {w}",
                    case.extents,
                    case.shapes,
                    cpp_path.display()
                );
            }
            id += 1;
        }
    }
    cov
}

#[test]
fn emulated_cuda_matches_reference() {
    let Some(cxx) = common::gxx() else {
        println!("skipped: g++ not found (install the `g++` package, or set CXX)");
        return;
    };
    let dir = common::emulator_dir("cuda-emu");
    let start = std::time::Instant::now();
    let workers = std::thread::available_parallelism()
        .map_or(2, |n| n.get())
        .min(4);
    let covs: Vec<Coverage> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..workers)
            .map(|w| {
                let (cxx, dir) = (&cxx, &dir);
                scope.spawn(move || {
                    let all = KERNELS
                        .iter()
                        .map(|&k| (k, None, "", &[][..]))
                        .chain(FIXED.iter().map(|&(k, e)| (k, Some(e), "", &[][..])))
                        .chain(HALF.iter().map(|&(k, d)| (k, None, d, &[][..])))
                        .chain(SIMT.iter().map(|&(k, e, d)| (k, Some(e), d, &[][..])))
                        .chain(SIMT_POINTS.iter().map(|&(k, e, d, p)| (k, Some(e), d, p)));
                    all.enumerate()
                        .filter(|(n, _)| n % workers == w)
                        .map(|(n, (src, fixed, dtypes, points))| {
                            check_kernel(cxx, dir, n, src, fixed, dtypes, points)
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect()
    });
    let mut total = Coverage::default();
    for c in covs {
        total.configs += c.configs;
        total.lanes += c.lanes;
        total.lanes_over_warp += c.lanes_over_warp;
        total.staged += c.staged;
        total.vector_loads += c.vector_loads;
        total.vthreads += c.vthreads;
        total.padded_spatial += c.padded_spatial;
        total.padded_reduction += c.padded_reduction;
        total.multi_block += c.multi_block;
        total.simt += c.simt;
        total.split += c.split;
        total.split_outer += c.split_outer;
        total.cp_async += c.cp_async;
        total.float4 += c.float4;
        total.raster += c.raster;
        total.kfuse += c.kfuse;
        total.kfuse_unchecked += c.kfuse_unchecked;
        total.switches += c.switches;
    }
    println!(
        "{} kernels + {} fixed cases + {} half-precision ones + {} SIMT GEMM ones + {} with SIMT points, {total:?}, {:.1} s",
        KERNELS.len(),
        FIXED.len(),
        HALF.len(),
        SIMT.len(),
        SIMT_POINTS.len(),
        start.elapsed().as_secs_f64()
    );
    // The random configs must have exercised every feature of the generator.
    for (what, n) in [
        ("reduction lanes", total.lanes),
        ("lanes beyond a warp", total.lanes_over_warp),
        ("shared-memory staging", total.staged),
        ("vector loads", total.vector_loads),
        ("virtual threads", total.vthreads),
        ("padded spatial extents", total.padded_spatial),
        ("padded reduction extents", total.padded_reduction),
        ("several blocks", total.multi_block),
        ("the SIMT GEMM template", total.simt),
        ("SIMT split-K", total.split),
        ("SIMT split-K over outer reduction loops", total.split_outer),
        ("SIMT cp.async stages", total.cp_async),
        ("SIMT float4 loads", total.float4),
        ("SIMT rasterization", total.raster),
        ("SIMT fused reduction tables", total.kfuse),
        ("SIMT tables without window checks", total.kfuse_unchecked),
    ] {
        assert!(n > 0, "no config exercised {what}: {total:?}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
