//! Tensor-core kernels run on the CPU: the default and random points of the tensor-core
//! template, compiled as C++ with `tests/cuda_emu.h` (warp collectives for `mma.sync
//! m16n8k16`, `ldmatrix` and `cp.async` with the PTX ISA's fragment layouts) and compared
//! with the reference interpreter, on unaligned shapes (odd, prime extents: zero-filled
//! loads, predicated stores, 2-byte loads where rows are unaligned), aligned ones (every
//! `cp.async` width), transposed operands (`ldmatrix.trans`), a batched matmul and a fused
//! bias + ReLU epilogue. Needs `g++`; without it the test prints why and passes.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use rand::{rngs::StdRng, Rng, SeedableRng};
use std::fmt::Write as _;
use std::process::Command;
use tensor_dsl::codegen::{storage_type, tensorcore};
use tensor_dsl::ir::DType;
use tensor_dsl::lower::tensorcore::TcSchedule;
use tensor_dsl::template::{gpu::GpuTarget, tensorcore::TcTemplate};
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

/// Copies the emulator headers (`cuda_emu.h`, and `cuda_emu_sm90.h` for wgmma and split-K)
/// into `dir`.
fn copy_headers(dir: &std::path::Path) {
    for h in ["cuda_emu.h", "cuda_emu_sm90.h"] {
        std::fs::copy(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("tests")
                .join(h),
            dir.join(h),
        )
        .unwrap();
    }
}

fn close(got: f32, want: f32, dtype: DType) -> bool {
    let tol = common::emulator_tolerance(dtype);
    (got - want).abs() <= tol * (1.0 + want.abs())
}

#[test]
fn tensor_core_points_match_the_reference_on_the_emulator() {
    let Some(cxx) = common::gxx() else {
        eprintln!("skipping: no g++ to compile the emulated CUDA (install g++)");
        return;
    };
    let dir = std::env::temp_dir().join(format!("td-tc-emu-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    copy_headers(&dir);
    let target = GpuTarget::h100();
    let mut rng = StdRng::seed_from_u64(13);
    let mut seen = (false, false, false); // swizzled, padded, 4-stage
    for (n, &(src, shapes, dtypes)) in CASES.iter().enumerate() {
        let case = common::Case::new(&format!("k{n}"), src, shapes, dtypes);
        let (kernel, shapes) = (case.kernel.clone(), case.shapes.clone());
        let extents = &case.extents()[..];
        let out_dtype = kernel.params[kernel.output].dtype;
        let refs: Vec<&[usize]> = shapes.iter().map(|s| s.as_slice()).collect();
        let data: Vec<Buffer> = shapes
            .iter()
            .enumerate()
            .map(|(p, s)| {
                let count = if p == kernel.output {
                    0
                } else {
                    s.iter().product()
                };
                let values: Vec<f32> = (0..count).map(|_| rng.gen_range(-1.0..1.0)).collect();
                Buffer::from_f32(kernel.params[p].dtype, &values)
            })
            .collect();
        let views: Vec<tensor_dsl::Data> = data.iter().map(Buffer::view).collect();
        let n_out: usize = shapes[kernel.output].iter().product();
        let mut want = Buffer::zeros(out_dtype, n_out);
        tensor_dsl::reference::run(&kernel, extents, &refs, &views, want.view_mut());
        let want = want.to_f32();

        let t = TcTemplate::new(&kernel, extents, &refs, &target)
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
        // Split-K across blocks: 2 and up to 4 blocks per output tile (16-deep stages, so
        // every split has a k tile), alone and with a sliced K inside each block.
        let k_tiles = t.gemm().k_extent.div_ceil(32);
        for (splits, split_k) in [(2, 1), (if k_tiles >= 4 { 4 } else { 2 }, 2)] {
            let d = t.default_schedule();
            let s = TcSchedule {
                splits,
                split_k,
                block_k: 16 * split_k,
                warps_n: 1,
                ..d
            };
            let c = t.encode(&s).unwrap_or_else(|e| panic!("{src}: {s:?}: {e}"));
            points.push((t.space().format(&c).unwrap(), s));
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

        let mut cpp = String::from("#include \"cuda_emu.h\"\n#include \"cuda_emu_sm90.h\"\n");
        let mut main = String::from("int main(int argc, char **argv) {\n    (void)argc;\n");
        main.push_str("    FILE *f = fopen(argv[1], \"rb\"), *o = fopen(argv[2], \"wb\");\n");
        let inputs = kernel.inputs();
        for &p in &inputs {
            let ty = storage_type(kernel.params[p].dtype);
            let _ = writeln!(
                main,
                "    {ty} *t{p} = ({ty} *)td_read_bytes(f, {});",
                data[p].view().bytes().len()
            );
        }
        let out_bytes = n_out * out_dtype.size();
        let ty = storage_type(out_dtype);
        for (id, (_, s)) in points.iter().enumerate() {
            seen.0 |= s.swizzle;
            seen.1 |= !s.swizzle;
            seen.2 |= s.stages == 4;
            let gen = tensorcore::generate(&kernel, extents, &refs, s);
            assert!(!gen.source.contains("#error"), "{}", gen.source);
            assert!(!gen.source.contains("#include"));
            let _ = writeln!(
                cpp,
                "namespace cfg{id} {{\n{}}}\n",
                gen.source.replace("extern \"C\" ", "")
            );
            let args: Vec<String> = inputs
                .iter()
                .map(|p| format!("t{p}"))
                .chain(["out".to_string()])
                .collect();
            let _ = writeln!(
                main,
                "    {{\n        {ty} *out = ({ty} *)td_alloc_nan_bytes({out_bytes});\n        \
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
        let base = dir.join(format!("tc{n}"));
        let cpp_path = base.with_extension("cpp");
        let exe = base.with_extension("exe");
        std::fs::write(&cpp_path, &cpp).unwrap();
        let out = Command::new(&cxx)
            .args(["-std=c++17", "-O1", "-w", "-I"])
            .arg(&dir)
            .arg(&cpp_path)
            .arg("-o")
            .arg(&exe)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{src}: g++ failed on {}:\n{}",
            cpp_path.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        let in_path = base.with_extension("in");
        let bytes: Vec<u8> = inputs
            .iter()
            .flat_map(|&p| data[p].view().bytes().to_vec())
            .collect();
        std::fs::write(&in_path, bytes).unwrap();
        let out_path = base.with_extension("out");
        let run = Command::new(&exe)
            .arg(&in_path)
            .arg(&out_path)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&run.stderr);
        assert!(
            run.status.success(),
            "{src} {extents:?}: the emulated kernel failed ({}):\n{stderr}\npoints: {points:?}",
            run.status
        );
        let got_all = std::fs::read(&out_path).unwrap();
        for (id, (text, s)) in points.iter().enumerate() {
            let got = Buffer::from_bytes(out_dtype, &got_all[id * out_bytes..(id + 1) * out_bytes]);
            for (e, (g, w)) in got.to_f32().into_iter().zip(&want).enumerate() {
                assert!(
                    close(g, *w, out_dtype),
                    "{src} {dtypes} extents {extents:?} config {text} {s:?} (cfg{id} in {}): \
                     element {e}: emulated {g} vs reference {w}",
                    cpp_path.display()
                );
            }
        }
        eprintln!("{src} {dtypes} {extents:?}: {} points match", points.len());
    }
    assert!(seen.0 && seen.1, "both shared-memory layouts were tested");
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
    let dir = std::env::temp_dir().join(format!("td-tc-collectives-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    copy_headers(&dir);
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
    let cpp = dir.join("collectives.cpp");
    let exe = dir.join("collectives.exe");
    std::fs::write(&cpp, program).unwrap();
    let out = Command::new(&cxx)
        .args(["-std=c++17", "-O1", "-w", "-I"])
        .arg(&dir)
        .arg(&cpp)
        .arg("-o")
        .arg(&exe)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "g++ failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let run = Command::new(&exe).output().unwrap();
    assert!(
        run.status.success(),
        "the emulator's collectives disagree with the PTX layouts:\n{}{}",
        String::from_utf8_lossy(&run.stdout),
        String::from_utf8_lossy(&run.stderr)
    );
    let _ = std::fs::remove_dir_all(&dir);
}
