//! Tensor-core kernels run on the CPU: the default and random points of the tensor-core
//! template, compiled as C++ with `tests/cuda_emu.h` (warp collectives for `mma.sync
//! m16n8k16`, `ldmatrix` and `cp.async` with the PTX ISA's fragment layouts) and compared
//! with the reference interpreter, on unaligned shapes (odd, prime extents: zero-filled
//! loads, predicated stores, 2-byte loads where rows are unaligned), aligned ones (every
//! `cp.async` width), transposed operands (`ldmatrix.trans`), a batched matmul and a fused
//! bias + ReLU epilogue. Needs `g++`; without it the test prints why and passes.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use rand::{rngs::StdRng, SeedableRng};
use std::fmt::Write as _;
use std::process::Command;
use tensor_dsl::codegen::cuda::CudaSource;
use tensor_dsl::codegen::{storage_type, tensorcore, wgmma};
use tensor_dsl::ir::DType;
use tensor_dsl::lower::tensorcore::TcSchedule;
use tensor_dsl::lower::wgmma::WgSchedule;
use tensor_dsl::template::{gpu::GpuTarget, tensorcore::TcTemplate, wgmma::WgTemplate};
use tensor_dsl::Buffer;

/// (kernel, shapes as in a case file, element types).
const CASES: &[(&str, &str, &str)] = &[
    // 1000x1000x1000-class, scaled down: nothing divides.
    ("c[[i, j]] += a[[i, k]] * b[[k, j]]", "a=67x93 b=93x45 c=67x45", "a=bf16,b=bf16"),
    ("c[[i, j]] += a[[i, k]] * b[[k, j]]", "a=67x93 b=93x45 c=67x45", "a=f16,b=f16"),
    // Rows of 40/48 halves: 16-byte cp.async; 44/36: 8 bytes; 46/30: 4 bytes.
    ("c[[i, j]] += a[[i, k]] * b[[k, j]]", "a=64x40 b=40x48 c=64x48", "a=bf16,b=bf16,c=bf16"),
    ("c[[i, j]] += a[[i, k]] * b[[k, j]]", "a=70x44 b=44x36 c=70x36", "a=f16,b=f16"),
    ("c[[i, j]] += a[[i, k]] * b[[k, j]]", "a=21x46 b=46x30 c=21x30", "a=bf16,b=bf16"),
    // Transposed operands: A m-major (ldmatrix.trans), B k-major.
    ("c[[i, j]] += a[[k, i]] * b[[j, k]]", "a=56x37 b=40x56 c=37x40", "a=f16,b=f16,c=f16"),
    // Both operands transposed with 16-byte rows: precomputed copy and ldmatrix
    // addresses on the transposed (A) and k-major (B) sides.
    ("c[[i, j]] += a[[k, i]] * b[[j, k]]", "a=40x48 b=56x40 c=48x56", "a=bf16,b=bf16"),
    // Batched.
    (
        "c[[b, i, j]] += x[[b, i, k]] * y[[b, k, j]]",
        "x=3x33x40 y=3x40x24 c=3x33x24",
        "x=bf16,y=bf16",
    ),
    // Fused bias + ReLU on the accumulators, one rounding to bf16.
    (
        "o[[i, j]] += a[[i, k]] * b[[k, j]]; o[[i, j]] = relu(o[[i, j]] + bias[[j]])",
        "a=50x64 b=64x72 bias=72 o=50x72",
        "a=bf16,b=bf16,o=bf16",
    ),
    // Implicit-GEMM convolutions: m = (n, p, q), k = (c, r, s), zero padding, stride 2, a
    // fused bias + ReLU; and an NHWC one whose filter rows are 16-byte aligned.
    (
        "y[[n, f, p, q]] += x[[n, c, 2 * p + r - 1, 2 * q + s - 1]] * w[[f, c, r, s]]; y[[n, f, p, q]] = relu(y[[n, f, p, q]] + bias[[f]])",
        "x=2x5x9x9 w=12x5x3x3 bias=12 y=2x12x5x5",
        "x=bf16,w=bf16,y=bf16",
    ),
    (
        "y[[n, p, q, f]] += x[[n, p + r, q + s, c]] * w[[f, r, s, c]]",
        "x=2x7x6x8 w=20x3x3x8 y=2x5x4x20",
        "x=f16,w=f16",
    ),
];

const RANDOM_POINTS: usize = 4;

/// (kernel, shapes, element types) of the wgmma cases: sizes around one or two block tiles,
/// so the emulation stays cheap.
const WGMMA_CASES: &[(&str, &str, &str)] = &[
    // Aligned rows (16-byte cp.async), a reduction 64-deep stages do not divide.
    ("c[[i, j]] += a[[i, k]] * b[[k, j]]", "a=136x88 b=88x72 c=136x72", "a=bf16,b=bf16"),
    // Both operands transposed (A m-major, B k-major), f16, rounded f16 output.
    ("c[[i, j]] += a[[k, i]] * b[[j, k]]", "a=80x72 b=136x80 c=72x136", "a=f16,b=f16,c=f16"),
    // Odd rows and a prime reduction: 2-byte loads everywhere.
    ("c[[i, j]] += a[[i, k]] * b[[k, j]]", "a=67x53 b=53x71 c=67x71", "a=bf16,b=bf16"),
    // 8- and 4-byte cp.async (rows of 44 and 90 halves).
    ("c[[i, j]] += a[[i, k]] * b[[k, j]]", "a=70x44 b=44x90 c=70x90", "a=f16,b=f16"),
    // A long reduction (9 to 17 k tiles): the pipeline's steady state, stages reused.
    ("c[[i, j]] += a[[i, k]] * b[[k, j]]", "a=72x536 b=536x80 c=72x80", "a=bf16,b=bf16"),
    ("c[[i, j]] += a[[k, i]] * b[[j, k]]", "a=520x64 b=72x520 c=64x72", "a=f16,b=f16"),
    // Batched, fused bias + ReLU, one rounding to bf16.
    (
        "o[[b, i, j]] += x[[b, i, k]] * y[[b, k, j]]; o[[b, i, j]] = relu(o[[b, i, j]] + bias[[j]])",
        "x=2x72x96 y=2x96x64 bias=64 o=2x72x64",
        "x=bf16,y=bf16,o=bf16",
    ),
];

const WGMMA_RANDOM_POINTS: usize = 5;

fn close(got: f32, want: f32, dtype: DType) -> bool {
    let tol = common::emulator_tolerance(dtype);
    (got - want).abs() <= tol * (1.0 + want.abs())
}

/// A case's kernel, shapes, random inputs and the reference's output.
struct Problem {
    src: String,
    dtypes: String,
    kernel: tensor_dsl::ir::Kernel,
    shapes: Vec<Vec<usize>>,
    extents: Vec<usize>,
    data: Vec<Buffer>,
    want: Vec<f32>,
}

impl Problem {
    fn new(n: usize, src: &str, shapes: &str, dtypes: &str, rng: &mut StdRng) -> Problem {
        let case = common::Case::new(&format!("k{n}"), src, shapes, dtypes);
        let (kernel, shapes) = (case.kernel.clone(), case.shapes.clone());
        let extents = case.extents();
        let data = common::random_inputs(&kernel, &shapes, rng);
        let want = common::reference_output(&kernel, &extents, &shapes, &data);
        Problem {
            src: src.into(),
            dtypes: dtypes.into(),
            want,
            kernel,
            shapes,
            extents,
            data,
        }
    }

    fn refs(&self) -> Vec<&[usize]> {
        self.shapes.iter().map(|s| s.as_slice()).collect()
    }

    /// Compiles every point's source into one program with the emulator headers, runs it
    /// on the inputs and compares each output with the reference.
    fn check(
        &self,
        cxx: &std::path::Path,
        dir: &std::path::Path,
        name: &str,
        points: &[(String, CudaSource)],
    ) {
        let kernel = &self.kernel;
        let out_dtype = kernel.params[kernel.output].dtype;
        let n_out: usize = self.shapes[kernel.output].iter().product();
        let mut cpp = String::from("#include \"cuda_emu.h\"\n#include \"cuda_emu_sm90.h\"\n");
        let mut main = String::from("int main(int argc, char **argv) {\n    (void)argc;\n");
        main.push_str("    FILE *f = fopen(argv[1], \"rb\"), *o = fopen(argv[2], \"wb\");\n");
        let inputs = kernel.inputs();
        for &p in &inputs {
            let ty = storage_type(kernel.params[p].dtype);
            let _ = writeln!(
                main,
                "    {ty} *t{p} = ({ty} *)td_read_bytes(f, {});",
                self.data[p].view().bytes().len()
            );
        }
        let out_bytes = n_out * out_dtype.size();
        let ty = storage_type(out_dtype);
        for (id, (text, gen)) in points.iter().enumerate() {
            assert!(!gen.source.starts_with("#error"), "{text}:\n{}", gen.source);
            assert!(!gen.source.contains("#include"));
            let _ = writeln!(
                cpp,
                "namespace cfg{id} {{\n{}}}\n",
                gen.source.replace("extern \"C\" ", "")
            );
            // TMA: the tensor maps the runtime would encode, in the emulator's encoding.
            let mut maps = String::new();
            for (m, spec) in gen.tensor_maps.iter().enumerate() {
                let list = |v: Vec<String>| v.join(", ");
                let _ = writeln!(
                    maps,
                    "        td_tensor_map map{m};\n        {{\n            \
                     const unsigned long long dims[] = {{{}}}, strides[] = {{{}}};\n            \
                     const unsigned box[] = {{{}}};\n            \
                     td_emu90_encode_tensor_map(&map{m}, t{}, {}, {}, {}, dims, strides, box);\n        }}",
                    list(spec.dims.iter().map(|d| d.to_string()).collect()),
                    list(spec.strides.iter().map(|d| d.to_string()).collect()),
                    list(spec.boxes.iter().map(|d| d.to_string()).collect()),
                    inputs[spec.input],
                    spec.dims.len(),
                    spec.dtype.size(),
                    spec.swizzle
                );
            }
            let args: Vec<String> = inputs
                .iter()
                .map(|p| format!("t{p}"))
                .chain(["out".to_string()])
                .chain((0..gen.tensor_maps.len()).map(|m| format!("map{m}")))
                .collect();
            let _ = writeln!(
                main,
                "    {{\n{maps}        {ty} *out = ({ty} *)td_alloc_nan_bytes({out_bytes});\n        \
                 fprintf(stderr, \"config {id}\\n\");\n        \
                 td_launch90({}, {}, [&] {{ cfg{id}::{}({}); }});\n        \
                 fwrite(out, 1, {out_bytes}, o);\n        free(out);\n    }}",
                gen.grid[0],
                gen.block[0],
                gen.entry,
                args.join(", ")
            );
        }
        main.push_str("    fclose(o);\n    return 0;\n}\n");
        cpp.push_str(&main);
        let base = dir.join(name);
        let cpp_path = base.with_extension("cpp");
        let src = &self.src;
        let exe =
            common::build_emulated(cxx, dir, &base, &cpp).unwrap_or_else(|e| panic!("{src}: {e}"));
        let in_path = base.with_extension("in");
        let bytes: Vec<u8> = inputs
            .iter()
            .flat_map(|&p| self.data[p].view().bytes().to_vec())
            .collect();
        std::fs::write(&in_path, bytes).unwrap();
        let out_path = base.with_extension("out");
        let run = Command::new(&exe)
            .arg(&in_path)
            .arg(&out_path)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&run.stderr);
        let (extents, dtypes) = (&self.extents, &self.dtypes);
        let labels: Vec<&String> = points.iter().map(|p| &p.0).collect();
        assert!(
            run.status.success(),
            "{src} {extents:?}: the emulated kernel failed ({}):\n{stderr}\npoints: {labels:?}",
            run.status
        );
        let got_all = std::fs::read(&out_path).unwrap();
        for (id, (text, _)) in points.iter().enumerate() {
            let got = Buffer::from_bytes(out_dtype, &got_all[id * out_bytes..(id + 1) * out_bytes]);
            for (e, (g, w)) in got.to_f32().into_iter().zip(&self.want).enumerate() {
                assert!(
                    close(g, *w, out_dtype),
                    "{src} {dtypes} extents {extents:?} config {text} (cfg{id} in {}): \
                     element {e}: emulated {g} vs reference {w}",
                    cpp_path.display()
                );
            }
        }
        eprintln!("{src} {dtypes} {extents:?}: {} points match", points.len());
    }
}

#[test]
fn tensor_core_points_match_the_reference_on_the_emulator() {
    let Some(cxx) = common::gxx() else {
        eprintln!("skipping: no g++ to compile the emulated CUDA (install g++)");
        return;
    };
    let dir = common::emulator_dir("tc-emu");
    let target = GpuTarget::h100();
    let mut rng = StdRng::seed_from_u64(13);
    let mut seen = (false, false, false); // swizzled, padded, 4-stage
    let mut seen_split = false;
    for (n, &(src, shapes, dtypes)) in CASES.iter().enumerate() {
        let problem = Problem::new(n, src, shapes, dtypes, &mut rng);
        let (kernel, extents, refs) = (&problem.kernel, &problem.extents, problem.refs());
        let t = TcTemplate::new(kernel, extents, &refs, &target)
            .unwrap_or_else(|e| panic!("{src}: no tensor-core form: {e}"));
        let mut points: Vec<(String, TcSchedule)> = vec![("default".into(), t.default_schedule())];
        for _ in 0..RANDOM_POINTS {
            let c = t.space().sample_uniform(&mut rng).unwrap();
            points.push((t.space().format(&c).unwrap(), t.decode(&c).unwrap()));
        }
        // Sliced K: two and four warp groups sharing each stage's steps.
        for (split_k, block_k, stages) in [(2, 32, 3), (4, 64, 2)] {
            let d = t.default_schedule();
            let s = TcSchedule {
                split_k,
                block_k,
                stages,
                warps_m: d.warps_m.min(2),
                warps_n: 1,
                ..d
            };
            let c = t.encode(&s).unwrap_or_else(|e| panic!("{src}: {s:?}: {e}"));
            points.push((t.space().format(&c).unwrap(), s));
        }
        // Split-K across blocks: 2 or 4 blocks per output tile (where every split gets two
        // k tiles), alone and with a sliced K inside each block.
        for split_k in [1, 2] {
            let block_k = 16 * split_k;
            let k_tiles = t.gemm().k_extent.div_ceil(block_k);
            let Some(splits) = [4, 2].into_iter().find(|s| 2 * s <= k_tiles) else {
                continue;
            };
            let d = t.default_schedule();
            let s = TcSchedule {
                splits,
                split_k,
                block_k,
                warps_n: 1,
                ..d
            };
            let c = t.encode(&s).unwrap_or_else(|e| panic!("{src}: {s:?}: {e}"));
            points.push((t.space().format(&c).unwrap(), s));
            seen_split = true;
        }
        // A warp tile that is no power of two (valid unswizzled, not a knob value): the
        // fragments' addresses are computed in full, not from per-thread bases.
        points.push((
            "warp_m=48 (off the knobs)".into(),
            TcSchedule {
                warp_m: 48,
                warp_n: 16,
                warps_m: 1,
                warps_n: 2,
                block_k: 32,
                stages: 2,
                swizzle: false,
                split_k: 1,
                splits: 1,
            },
        ));
        for (_, s) in &points {
            seen.0 |= s.swizzle;
            seen.1 |= !s.swizzle;
            seen.2 |= s.stages == 4;
        }
        let sources: Vec<(String, CudaSource)> = points
            .iter()
            .map(|(text, s)| {
                (
                    format!("{text} {s:?}"),
                    tensorcore::generate(kernel, extents, &refs, s),
                )
            })
            .collect();
        problem.check(&cxx, &dir, &format!("tc{n}"), &sources);
    }
    assert!(seen.0 && seen.1, "both shared-memory layouts were tested");
    assert!(seen_split, "split-K across blocks was tested");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Hopper `wgmma` kernels run on the CPU: the default and random points of the wgmma
/// template (every knob value: one or two warpgroups of one or two `m64` blocks, `N` of
/// 64/128/256, 32- and 64-deep stages with the 64- and 128-byte swizzles, 2 to 6 stages,
/// split-K across blocks) against the reference, on GEMMs with every operand orientation
/// (K-major, and M/N-major through the descriptors' transposes), unaligned extents (odd
/// rows: 2-byte loads; 4- and 8-byte `cp.async`), a reduction no stage divides, a batched
/// GEMM and a fused bias + ReLU. The emulator computes an MMA's products only when a wait
/// retires it, and refuses copies into what a queued MMA reads, reads of data in flight or
/// not fenced for the async proxy, and descriptors that differ across a warpgroup.
#[test]
fn wgmma_points_match_the_reference_on_the_emulator() {
    let Some(cxx) = common::gxx() else {
        eprintln!("skipping: no g++ to compile the emulated CUDA (install g++)");
        return;
    };
    let dir = common::emulator_dir("wg-emu");
    let target = GpuTarget::h100_sm90a();
    let mut rng = StdRng::seed_from_u64(90);
    let mut seen = [false; 7]; // 2 warpgroups, wg_m 128, N 256, block_k 32, 5+ stages, splits, TMA
    for (n, &(src, shapes, dtypes)) in WGMMA_CASES.iter().enumerate() {
        let problem = Problem::new(n, src, shapes, dtypes, &mut rng);
        let (kernel, extents, refs) = (&problem.kernel, &problem.extents, problem.refs());
        let t = WgTemplate::new(kernel, extents, &refs, &target)
            .unwrap_or_else(|e| panic!("{src}: no wgmma form: {e}"));
        let mut points: Vec<(String, WgSchedule)> = vec![("default".into(), t.default_schedule())];
        for _ in 0..WGMMA_RANDOM_POINTS {
            let c = t.space().sample_uniform(&mut rng).unwrap();
            points.push((t.space().format(&c).unwrap(), t.decode(&c).unwrap()));
        }
        let split = WgSchedule {
            splits: 2,
            block_k: 32,
            ..t.default_schedule()
        };
        if let Ok(c) = t.encode(&split) {
            points.push((t.space().format(&c).unwrap(), split));
        }
        // TMA staging where the operands allow it (16-byte aligned strides): the default's
        // tiles, and 3 stages of 32-deep tiles (64-byte swizzle, more phases per stage).
        for tma in [
            WgSchedule {
                tma: true,
                ..t.default_schedule()
            },
            WgSchedule {
                tma: true,
                block_k: 32,
                stages: 3,
                ..t.default_schedule()
            },
        ] {
            if let Ok(c) = t.encode(&tma) {
                points.push((t.space().format(&c).unwrap(), tma));
            }
        }
        for (_, s) in &points {
            seen[0] |= s.warpgroups == 2;
            seen[1] |= s.wg_m == 128;
            seen[2] |= s.block_n == 256;
            seen[3] |= s.block_k == 32;
            seen[4] |= s.stages >= 5;
            seen[5] |= s.splits > 1;
            seen[6] |= s.tma;
        }
        let sources: Vec<(String, CudaSource)> = points
            .iter()
            .map(|(text, s)| (text.clone(), wgmma::generate(kernel, extents, &refs, s)))
            .collect();
        problem.check(&cxx, &dir, &format!("wg{n}"), &sources);
    }
    assert!(
        seen.iter().all(|&x| x),
        "every kind of point was tested: {seen:?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The emulator's warp collectives against the PTX ISA's layouts written out directly
/// (independently of the generated code): `ldmatrix` .x1/.x2/.x4, plain and `.trans`, and
/// `mma.sync m16n8k16` with bf16 and f16 fragments built from the "Matrix Fragments for
/// mma.m16n8k16" formulas (small values, so every sum is exact).
#[test]
fn warp_collectives_follow_the_ptx_layouts() {
    let Some(cxx) = common::gxx() else {
        eprintln!("skipping: no g++ (install g++)");
        return;
    };
    let dir = common::emulator_dir("tc-collectives");
    let program = r#"#include "cuda_emu.h"
// Four 8x8 matrices of 16-bit values, rows padded to 16 elements (rows stay 16-byte aligned).
static __attribute__((aligned(16))) unsigned short M[4][8][16];
static int bad = 0;
// Values {0, 1, 2, -1, 3, 0.5} as bf16 and f16 bits.
static const float VAL[6] = {0.0f, 1.0f, 2.0f, -1.0f, 3.0f, 0.5f};
static const unsigned short BF[6] = {0x0000, 0x3F80, 0x4000, 0xBF80, 0x4040, 0x3F00};
static const unsigned short HF[6] = {0x0000, 0x3C00, 0x4000, 0xBC00, 0x4200, 0x3800};
static int av(int r, int c) { return (r * 7 + c * 3) % 6; }
static int bv(int r, int c) { return (r * 5 + c * 1 + 2) % 6; }
static float cv(int r, int c) { return (float)(r - c); }
int main() {
    for (int j = 0; j < 4; ++j)
        for (int r = 0; r < 8; ++r)
            for (int c = 0; c < 16; ++c)
                M[j][r][c] = (unsigned short)(j * 64 + r * 8 + c);
    for (int num = 1; num <= 4; num *= 2)
        for (int trans = 0; trans < 2; ++trans)
            td_launch(1, 64, [&] {
                unsigned lane = threadIdx.x % 32, r[4] = {0, 0, 0, 0};
                td_emu_ldmatrix(r, &M[(lane / 8) % num][lane % 8][0], num, trans);
                for (int j = 0; j < num; ++j)
                    for (unsigned e = 0; e < 2; ++e) {
                        unsigned want = trans ? M[j][lane % 4 * 2 + e][lane / 4]
                                              : M[j][lane / 4][lane % 4 * 2 + e];
                        if (((r[j] >> (16 * e)) & 0xffffu) != want) {
                            fprintf(stderr, "ldmatrix x%d trans %d lane %u reg %d half %u\n", num, trans, lane, j, e);
                            ++bad;
                        }
                    }
            });
    for (int bf16 = 0; bf16 < 2; ++bf16)
        td_launch(1, 32, [&] {
            const unsigned short *bits = bf16 ? BF : HF;
            unsigned lane = threadIdx.x, g = lane >> 2, t = lane % 4, a[4] = {0, 0, 0, 0}, b[2] = {0, 0};
            float d[4];
            for (unsigned i = 0; i < 8; ++i) {
                unsigned row = (i < 2 || (i >= 4 && i < 6)) ? g : g + 8;
                unsigned col = t * 2 + (i & 1) + (i >= 4 ? 8 : 0);
                a[i / 2] |= (unsigned)bits[av(row, col)] << (16 * (i & 1));
            }
            for (unsigned i = 0; i < 4; ++i) {
                unsigned row = t * 2 + (i & 1) + (i >= 2 ? 8 : 0);
                b[i / 2] |= (unsigned)bits[bv(row, g)] << (16 * (i & 1));
            }
            for (unsigned i = 0; i < 4; ++i)
                d[i] = cv(g + (i >= 2 ? 8 : 0), t * 2 + (i & 1));
            td_emu_mma_m16n8k16(d, a, b, bf16);
            for (unsigned i = 0; i < 4; ++i) {
                unsigned row = g + (i >= 2 ? 8 : 0), col = t * 2 + (i & 1);
                float want = cv(row, col);
                for (int k = 0; k < 16; ++k)
                    want += VAL[av(row, k)] * VAL[bv(k, col)];
                if (d[i] != want) {
                    fprintf(stderr, "mma bf16 %d lane %u d%u: %g, want %g\n", bf16, lane, i, d[i], want);
                    ++bad;
                }
            }
        });
    printf("%d\n", bad);
    return bad != 0;
}
"#;
    let exe = common::build_emulated(&cxx, &dir, &dir.join("collectives"), program)
        .unwrap_or_else(|e| panic!("{e}"));
    let run = Command::new(&exe).output().unwrap();
    assert!(
        run.status.success(),
        "the emulator's collectives disagree with the PTX layouts:\n{}{}",
        String::from_utf8_lossy(&run.stdout),
        String::from_utf8_lossy(&run.stderr)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The emulator's `wgmma` against the PTX ISA's own descriptions, independently of the
/// generated code and of the template's layouts: shared memory is filled through the CuTe
/// layouts the ISA gives ("Canonical Layouts": the bf16 examples of MN-major
/// no-swizzle, 32-byte and 64-byte swizzles with their LBO and SBO, and the K-major and
/// 128-byte canonical forms), evaluated here as plain shape/stride sums and swizzled on the
/// byte address (`Swizzle<B,4,3>`); descriptors are encoded per "Matrix Descriptor
/// Format"; every thread's accumulators are checked against "Figure 149" (thread t of the
/// warpgroup, lane l: `d[x]` is row `16(t/32) + l/4 + 8((x%4)/2)`, column `8(x/4) + 2(l%4) +
/// x%2`). Small integers, so every sum is exact.
#[test]
fn wgmma_follows_the_ptx_layouts() {
    let Some(cxx) = common::gxx() else {
        eprintln!("skipping: no g++ (install g++)");
        return;
    };
    let dir = common::emulator_dir("wg-layouts");
    let program = r#"#include "cuda_emu.h"
#include "cuda_emu_sm90.h"
static __attribute__((aligned(1024))) unsigned char S[32768];
static int bad = 0;
// A CuTe layout of a (rows x 16) matrix: rows = r0 + e0 (r1 + e1 r2), k = k0 + 8 k1 (shapes
// e0 x e1 x e2 and 8 x 2, strides in elements), swizzled Swizzle<bits,4,3> on bytes.
struct Layout {
    const char *name;
    int mn_major;  // the descriptor's transpose flag
    unsigned e0, e1, e2, s0, s1, s2, ks0, ks1;  // (rows) : (strides), (8, 2) : (ks0, ks1)
    unsigned bits, lbo, sbo, mode;             // swizzle bits; descriptor fields (bytes)
};
static unsigned place(const Layout &l, unsigned row, unsigned k) {
    unsigned r0 = row % l.e0, r1 = row / l.e0 % l.e1, r2 = row / (l.e0 * l.e1);
    unsigned off = r0 * l.s0 + r1 * l.s1 + r2 * l.s2 + k % 8 * l.ks0 + k / 8 * l.ks1;
    unsigned byte = 2 * off;
    return byte ^ (((byte >> 7) & ((1u << l.bits) - 1)) << 4);
}
static unsigned long long desc(const Layout &l, unsigned start) {
    return (unsigned long long)((start & 0x3ffff) >> 4) | (unsigned long long)(l.lbo >> 4) << 16 |
           (unsigned long long)(l.sbo >> 4) << 32 | (unsigned long long)l.mode << 62;
}
static const unsigned short BF[6] = {0x0000, 0x3F80, 0x4000, 0xBF80, 0x4040, 0x3F00};
static const float VAL[6] = {0.0f, 1.0f, 2.0f, -1.0f, 3.0f, 0.5f};
static int av(unsigned r, unsigned k) { return (r * 7 + k * 3) % 6; }
static int bv(unsigned n, unsigned k) { return (n * 5 + k + 2) % 6; }
int main() {
    td_emu90_shared(S);
    // A: 64 x 16. K-major 128-byte swizzle: ((8,8),(8,2)) : ((64,512),(1,8)), SBO 1024 B;
    // M-major 128-byte: ((8,8),(8,2)) : ((1,8),(64,512)), LBO (unused: one panel) 8192 B.
    const Layout as[2] = {
        {"A K-major SW128", 0, 8, 8, 1, 64, 512, 0, 1, 8, 3, 16, 1024, 1},
        {"A M-major SW128", 1, 8, 8, 1, 1, 8, 0, 64, 512, 3, 8192, 1024, 1},
    };
    // B: N x 16 (n, k).
    const Layout bs[7] = {
        // The ISA's examples (bf16): MN-major no swizzle ((8,1,2),(8,2)):((1,8,64),(8,128)),
        // LBO 128, SBO 64 (elements); 32-byte ((8,2,2),(8,2)):((1,8,128),(16,256)), LBO 128,
        // SBO 256; 64-byte ((8,4,2),(8,2)):((1,8,256),(32,512)), LBO 256, SBO 512.
        {"B N-major none", 1, 8, 1, 2, 1, 8, 64, 8, 128, 0, 256, 128, 0},
        {"B N-major SW32", 1, 8, 2, 2, 1, 8, 128, 16, 256, 1, 256, 512, 3},
        {"B N-major SW64", 1, 8, 4, 2, 1, 8, 256, 32, 512, 2, 512, 1024, 2},
        // N-major 128-byte, two panels of 64: ((8,8,2),(8,2)):((1,8,1024),(64,512)).
        {"B N-major SW128", 1, 8, 8, 2, 1, 8, 1024, 64, 512, 3, 2048, 1024, 1},
        // K-major: no swizzle ((8,m),(8,2)):((8,SBO),(1,LBO)) with LBO 64, SBO 128 elements;
        // 32-byte ((8,m),(8,2)):((16,SBO),(1,8)); 128-byte ((8,m),(8,2)):((64,SBO),(1,8)).
        {"B K-major none", 0, 8, 4, 1, 8, 128, 0, 1, 64, 0, 128, 256, 0},
        {"B K-major SW32", 0, 8, 4, 1, 16, 128, 0, 1, 8, 1, 16, 256, 3},
        {"B K-major SW128", 0, 8, 4, 1, 64, 512, 0, 1, 8, 3, 16, 1024, 1},
    };
    const unsigned ns[7] = {16, 32, 64, 128, 32, 32, 32};
    for (int ai = 0; ai < 2; ++ai)
        for (int bi = 0; bi < 7; ++bi) {
            const Layout &la = as[ai], &lb = bs[bi];
            unsigned n = ns[bi], a0 = 0, b0 = 16384;
            memset(S, 0, sizeof S);
            for (unsigned r = 0; r < 64; ++r)
                for (unsigned k = 0; k < 16; ++k)
                    memcpy(S + a0 + place(la, r, k), &BF[av(r, k)], 2);
            for (unsigned c = 0; c < n; ++c)
                for (unsigned k = 0; k < 16; ++k)
                    memcpy(S + b0 + place(lb, c, k), &BF[bv(c, k)], 2);
            td_launch90(1, 128, [&] {
                float d[64];
                for (int x = 0; x < 64; ++x) d[x] = 1.0f;
                td_emu90_wgmma_fence();
                td_emu90_wgmma(d, desc(la, a0), desc(lb, b0), (int)n, la.mn_major, lb.mn_major, 1);
                td_emu90_wgmma_commit();
                td_emu90_wgmma_wait(0);
                unsigned t = threadIdx.x, lane = t % 32;
                for (unsigned x = 0; x < n / 2; ++x) {
                    unsigned row = 16 * (t / 32) + lane / 4 + 8 * (x % 4 / 2);
                    unsigned col = 8 * (x / 4) + 2 * (lane % 4) + x % 2;
                    float want = 1.0f;
                    for (unsigned k = 0; k < 16; ++k) want += VAL[av(row, k)] * VAL[bv(col, k)];
                    if (d[x] != want) {
                        if (bad < 10)
                            fprintf(stderr, "%s x %s: thread %u d[%u] (%u, %u) = %g, want %g\n",
                                    la.name, lb.name, t, x, row, col, d[x], want);
                        ++bad;
                    }
                }
            });
        }
    printf("%d\n", bad);
    return bad != 0;
}
"#;
    let exe = common::build_emulated(&cxx, &dir, &dir.join("wgmma"), program)
        .unwrap_or_else(|e| panic!("{e}"));
    let run = Command::new(&exe).output().unwrap();
    assert!(
        run.status.success(),
        "the emulator's wgmma disagrees with the PTX layouts:\n{}{}",
        String::from_utf8_lossy(&run.stdout),
        String::from_utf8_lossy(&run.stderr)
    );
    let _ = std::fs::remove_dir_all(&dir);
}
