//! Tensor-core kernels through the real NVRTC (`compute_90`) and `ptxas -arch=sm_90 -v`,
//! then `nvdisasm` on the cubin: bf16- and f16-input GEMMs (including 1000×1000×1000, a
//! prime-sized one, a batched one, transposed operands and a fused bias + ReLU), the default
//! and random points of the template. Each must compile with no `#include`, assemble with no
//! spills and the shared memory the schedule computes, and its SASS must issue `HMMA`
//! (tensor-core MMA) inside the main loop, with `LDSM` (ldmatrix) and, where rows are
//! aligned, `LDGSTS` (cp.async).
//!
//! Without NVRTC, `ptxas` or `nvdisasm` the test prints why and passes, unless
//! `TENSOR_DSL_REQUIRE_NVRTC=1` makes that a failure.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use rand::{rngs::StdRng, SeedableRng};
use std::path::PathBuf;
use std::process::Command;
use tensor_dsl::codegen::{tensorcore, wgmma};
use tensor_dsl::lower::tensorcore::TcSchedule;
use tensor_dsl::lower::wgmma::WgSchedule;
use tensor_dsl::template::cuda::CudaSpace;
use tensor_dsl::template::wgmma::{WgGeometry, WgTemplate};
use tensor_dsl::template::{gpu::GpuTarget, tensorcore::TcTemplate};

/// (name, statements, shapes, element types).
const CASES: &[(&str, &str, &str, &str)] = &[
    (
        "matmul_bf16_1000",
        "c[[i, j]] += a[[i, k]] * b[[k, j]]",
        "a=1000x1000 b=1000x1000 c=1000x1000",
        "a=bf16,b=bf16,c=f32",
    ),
    (
        "matmul_f16_1000",
        "c[[i, j]] += a[[i, k]] * b[[k, j]]",
        "a=1000x1000 b=1000x1000 c=1000x1000",
        "a=f16,b=f16,c=f32",
    ),
    (
        "matmul_bf16_prime",
        "c[[i, j]] += a[[i, k]] * b[[k, j]]",
        "a=127x131 b=131x137 c=127x137",
        "a=bf16,b=bf16",
    ),
    (
        // Both operands m/n-major with odd leading dimensions: 2-byte loads, whose rolled
        // loop ptxas once capped at 56 registers and spilled 12 bytes.
        "matmul_bf16_tn_odd",
        "c[[i, j]] += a[[k, i]] * b[[k, j]]",
        "a=257x999 b=257x1001 c=999x1001",
        "a=bf16,b=bf16",
    ),
    (
        "matmul_bf16_tn_odd_long",
        "c[[i, j]] += a[[k, i]] * b[[k, j]]",
        "a=4001x333 b=4001x1000 c=333x1000",
        "a=bf16,b=bf16",
    ),
    (
        // k = 32: the default takes two k tiles of 16, so its MMAs sit in a pipelined loop
        // (one tile of 32 was straight-line code without a hot loop).
        "matmul_bf16_short_k",
        "c[[i, j]] += a[[i, k]] * b[[k, j]]",
        "a=512x32 b=32x1024 c=512x1024",
        "a=bf16,b=bf16,c=f32",
    ),
    (
        "matmul_f16_nt",
        "c[[i, j]] += a[[k, i]] * b[[j, k]]",
        "a=512x768 b=1024x512 c=768x1024",
        "a=f16,b=f16,c=f16",
    ),
    (
        "batch_matmul_bf16",
        "z[[b, m, n]] += x[[b, m, k]] * y[[b, k, n]]",
        "x=12x128x64 y=12x64x128 z=12x128x128",
        "x=bf16,y=bf16",
    ),
    (
        "conv_bias_relu_bf16",
        "y[[n, f, p, q]] += x[[n, c, 2 * p + r - 1, 2 * q + s - 1]] * w[[f, c, r, s]]; y[[n, f, p, q]] = relu(y[[n, f, p, q]] + bias[[f]])",
        "x=8x64x56x56 w=128x64x3x3 bias=128 y=8x128x28x28",
        "x=bf16,w=bf16,y=bf16",
    ),
    (
        // Many output pixels over a short reduction: the default widens its warp tiles
        // (16×32, 2×2 warps, k tiles of 32).
        "conv_stem_f16",
        "y[[n, f, p, q]] += x[[n, c, 2 * p + r - 3, 2 * q + s - 3]] * w[[f, c, r, s]]",
        "x=1x3x224x224 w=64x3x7x7 y=1x64x112x112",
        "x=f16,w=f16",
    ),
    (
        "conv_nhwc_f16",
        "y[[n, p, q, f]] += x[[n, p + r - 1, q + s - 1, c]] * w[[f, r, s, c]]",
        "x=4x56x56x64 w=64x3x3x64 y=4x56x56x64",
        "x=f16,w=f16",
    ),
    (
        "gemm_bias_relu_bf16",
        "o[[i, j]] += a[[i, k]] * b[[k, j]]; o[[i, j]] = relu(o[[i, j]] + bias[[j]])",
        "a=512x768 b=768x3072 bias=3072 o=512x3072",
        "a=bf16,b=bf16,o=bf16",
    ),
];

const RANDOM_POINTS: usize = 8;

fn tool(name: &str) -> Option<PathBuf> {
    let paths = std::env::var_os("PATH")?;
    std::env::split_paths(&paths)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

fn unavailable() -> Option<String> {
    common::nvrtc_unavailable().or_else(|| {
        tool("nvdisasm")
            .is_none()
            .then(|| "nvdisasm is not on PATH".into())
    })
}

#[cfg(feature = "cuda")]
fn ptx_of(name: &str, source: &str, arch: &str) -> Result<String, String> {
    tensor_dsl::runtime::nvrtc::compile_ptx(name, source, arch).map_err(|e| e.to_string())
}

#[cfg(not(feature = "cuda"))]
fn ptx_of(_: &str, _: &str, _: &str) -> Result<String, String> {
    Err("the `cuda` feature is off".into())
}

/// ptxas with the cubin kept: (report, SASS text).
fn assemble(
    ptx: &str,
    arch: &str,
    dir: &std::path::Path,
    n: usize,
) -> Result<(String, String), String> {
    let ptxas = tensor_dsl::runtime::ptxas::find().unwrap();
    let input = dir.join(format!("k{n}.ptx"));
    let cubin = dir.join(format!("k{n}.cubin"));
    std::fs::write(&input, ptx).unwrap();
    let out = Command::new(ptxas)
        .arg(format!("-arch={arch}"))
        .arg("-v")
        .arg("-o")
        .arg(&cubin)
        .arg(&input)
        .output()
        .unwrap();
    let log = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if !out.status.success() {
        return Err(log);
    }
    let sass = Command::new(tool("nvdisasm").unwrap())
        .arg(&cubin)
        .output()
        .unwrap();
    if !sass.status.success() {
        return Err(String::from_utf8_lossy(&sass.stderr).into_owned());
    }
    Ok((log, String::from_utf8_lossy(&sass.stdout).into_owned()))
}

/// The SASS lines of the hot loop as `tensor-dsl inspect` finds it (the innermost loop doing
/// the most arithmetic, out-of-line code jumping back excluded: `runtime::sass::hot_loop`):
/// the main (k-tile) loop.
fn hot_loop(sass: &str) -> Vec<&str> {
    let Some(h) = tensor_dsl::runtime::sass::hot_loop(sass) else {
        return Vec::new();
    };
    sass.lines()
        .filter(|l| {
            let t = l.trim();
            t.strip_prefix("/*")
                .and_then(|r| r.split_once("*/"))
                .and_then(|(hex, _)| usize::from_str_radix(hex.trim(), 16).ok())
                .is_some_and(|o| (h.start..=h.end).contains(&o))
        })
        .collect()
}

#[test]
fn tensor_core_kernels_compile_assemble_and_issue_hmma() {
    if !common::tools_present(unavailable()) {
        return;
    }
    let target = GpuTarget::h100();
    let dir = std::env::temp_dir().join(format!("td-tc-sass-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut rng = StdRng::seed_from_u64(90);
    let mut failures = Vec::new();
    let mut n = 0;
    for &(name, src, shapes, dtypes) in CASES {
        let case = common::Case::new(name, src, shapes, dtypes);
        let extents = case.extents();
        let refs = case.shape_refs();
        let t = TcTemplate::new(&case.kernel, &extents, &refs, &target)
            .unwrap_or_else(|e| panic!("{name}: no tensor-core form: {e}"));
        let mut points: Vec<(String, TcSchedule)> = vec![("default".into(), t.default_schedule())];
        for _ in 0..RANDOM_POINTS {
            let c = t.space().sample_uniform(&mut rng).unwrap();
            points.push((t.space().format(&c).unwrap(), t.decode(&c).unwrap()));
        }
        // CUTLASS's 128x128x32 block of four 64x64 warps: the most accumulators.
        let big = TcSchedule {
            warp_m: 64,
            warp_n: 64,
            warps_m: 2,
            warps_n: 2,
            block_k: 32,
            stages: 3,
            swizzle: true,
            split_k: 1,
            splits: 1,
        };
        let c = t.encode(&big).unwrap();
        points.push((t.space().format(&c).unwrap(), big));
        // Split-K across blocks (4 blocks per tile where the reduction has the k tiles).
        let d = t.default_schedule();
        let across = TcSchedule {
            splits: if t.gemm().k_extent >= 8 * d.block_k {
                4
            } else {
                2
            },
            ..d.clone()
        };
        if let Ok(c) = t.encode(&across) {
            points.push((t.space().format(&c).unwrap(), across));
        }
        // Sliced K over two warp groups.
        let d = t.default_schedule();
        let split = TcSchedule {
            split_k: 2,
            warps_n: 1,
            // Two warp groups need two k steps of 16 per tile.
            block_k: d.block_k.max(32),
            ..d
        };
        let c = t.encode(&split).unwrap();
        points.push((t.space().format(&c).unwrap(), split));
        for (config, s) in points {
            n += 1;
            let gen = tensorcore::generate(&case.kernel, &extents, &refs, &s);
            assert!(!gen.source.contains("#include"), "{name}: #include");
            let result = ptx_of(name, &gen.source, &target.virtual_arch())
                .and_then(|ptx| assemble(&ptx, &target.real_arch(), &dir, n));
            let (log, sass) = match result {
                Ok(x) => x,
                Err(e) => {
                    failures.push(format!("{name} {config}: {e}\n{}", gen.source));
                    continue;
                }
            };
            if let Some(d) = std::env::var_os("TD_TC_SASS_DIR") {
                let d = PathBuf::from(d);
                let _ = std::fs::write(d.join(format!("{name}-{n}.sass")), &sass);
                let _ = std::fs::write(d.join(format!("{name}-{n}.cu")), &gen.source);
            }
            let r = tensor_dsl::runtime::ptxas::parse_report(&log);
            // One k tile (per split): the main loop runs once and is gone; the whole kernel
            // is "hot".
            let hot = if t.gemm().k_tiles(&s) <= s.splits {
                sass.lines().collect()
            } else {
                hot_loop(&sass)
            };
            let count = |lines: &[&str], op: &str| lines.iter().filter(|l| l.contains(op)).count();
            let mmas = s.warp_m / 16 * (s.warp_n / 8) * (s.block_k / 16 / s.split_k);
            let g = t.gemm();
            let mut problems = Vec::new();
            if r.spill_stores > 0 || r.spill_loads > 0 {
                problems.push(format!(
                    "spills ({} B stores, {} B loads)",
                    r.spill_stores, r.spill_loads
                ));
            }
            if r.shared_bytes as usize != g.shared_bytes(&s) {
                problems.push(format!(
                    "ptxas reports {} bytes of shared memory, the schedule {}",
                    r.shared_bytes,
                    g.shared_bytes(&s)
                ));
            }
            if count(&hot, "HMMA.16816.F32") < mmas {
                problems.push(format!(
                    "{} HMMA.16816.F32 in the hot loop ({} lines), want {mmas}",
                    count(&hot, "HMMA.16816.F32"),
                    hot.len()
                ));
            }
            if count(&hot, "LDSM") == 0 {
                problems.push("no LDSM (ldmatrix) in the hot loop".into());
            }
            // Prefetches happen in the loop only when there are more k tiles than stages in
            // flight.
            let k_tiles = g.k_extent.div_ceil(s.block_k);
            let all: Vec<&str> = sass.lines().collect();
            let copies = if k_tiles > s.stages - 1 { &hot } else { &all };
            if (g.a.width > 1 || g.b.width > 1) && count(copies, "LDGSTS") == 0 {
                problems.push("no LDGSTS (cp.async) where the tiles are copied".into());
            }
            println!(
                "{name} {config}: {} registers, {} B shared, {} HMMA of {} SASS lines in the hot loop",
                r.registers,
                r.shared_bytes,
                count(&hot, "HMMA"),
                hot.len()
            );
            if !problems.is_empty() {
                failures.push(format!("{name} {config} {s:?}: {}", problems.join("; ")));
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        failures.is_empty(),
        "{} of {n} configs failed:\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}

/// (name, statements, shapes, element types, least HMMA share of the hot loop). Measured
/// with NVRTC and ptxas 13.0 when this was written: 25.8% for the 32×32-warp defaults
/// (1000³, the transposed one), 34.8% for the 32×64-warp ones (BERT, bias + ReLU), 40% for
/// the batched one.
const DENSE: &[(&str, &str, &str, &str, f64)] = &[
    (
        "matmul_bf16_1000",
        "c[[i, j]] += a[[i, k]] * b[[k, j]]",
        "a=1000x1000 b=1000x1000 c=1000x1000",
        "a=bf16,b=bf16,c=f32",
        0.22,
    ),
    (
        "matmul_f16_1000",
        "c[[i, j]] += a[[i, k]] * b[[k, j]]",
        "a=1000x1000 b=1000x1000 c=1000x1000",
        "a=f16,b=f16,c=f32",
        0.22,
    ),
    (
        "bert_m1_bf16",
        "c[[i, j]] += a[[i, k]] * b[[k, j]]",
        "a=512x1024 b=1024x4096 c=512x4096",
        "a=bf16,b=bf16,c=f32",
        0.30,
    ),
    (
        "bert_m3_bf16",
        "c[[i, j]] += a[[i, k]] * b[[k, j]]",
        "a=512x768 b=768x3072 c=512x3072",
        "a=bf16,b=bf16,c=f32",
        0.30,
    ),
    (
        "matmul_f16_nt",
        "c[[i, j]] += a[[k, i]] * b[[j, k]]",
        "a=512x768 b=1024x512 c=768x1024",
        "a=f16,b=f16,c=f16",
        0.22,
    ),
    (
        "batch_matmul_bf16",
        "z[[b, m, n]] += x[[b, m, k]] * y[[b, k, n]]",
        "x=12x128x64 y=12x64x128 z=12x128x128",
        "x=bf16,y=bf16",
        0.33,
    ),
    (
        "gemm_bias_relu_bf16",
        "o[[i, j]] += a[[i, k]] * b[[k, j]]; o[[i, j]] = relu(o[[i, j]] + bias[[j]])",
        "a=512x768 b=768x3072 bias=3072 o=512x3072",
        "a=bf16,b=bf16,o=bf16",
        0.30,
    ),
];

/// The default schedules of GEMMs whose operands are copied with precomputed addresses
/// (every operand linear with aligned rows) spend their hot loop mostly on tensor-core
/// MMAs: the share of `HMMA` among the loop's SASS instructions (as `tensor-dsl inspect`
/// counts them) stays above each case's bound. Before per-thread addresses were
/// precomputed, the 1000³ loop was 16 HMMA of 160 instructions (10%), the 512×4096×1024
/// one 32 of 219 (15%). Implicit-GEMM convolutions and operands with unaligned rows take
/// the general copy path and are not bounded here.
#[cfg(feature = "cuda")]
#[test]
fn default_hot_loops_are_dense_in_mma() {
    if !common::tools_present(unavailable()) {
        return;
    }
    let target = GpuTarget::h100();
    let mut failures = Vec::new();
    for &(name, src, shapes, dtypes, least) in DENSE {
        let case = common::Case::new(name, src, shapes, dtypes);
        let extents = case.extents();
        let refs = case.shape_refs();
        let t = TcTemplate::new(&case.kernel, &extents, &refs, &target)
            .unwrap_or_else(|e| panic!("{name}: no tensor-core form: {e}"));
        let gen = tensorcore::generate(&case.kernel, &extents, &refs, &t.default_schedule());
        let p = tensor_dsl::runtime::sass::profile_cuda(&gen, &target)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let Some(hot) = p.hot_loop.clone() else {
            failures.push(format!("{name}: no hot loop"));
            continue;
        };
        let share = hot.mix.mma as f64 / hot.mix.total() as f64;
        println!(
            "{name}: {} HMMA of {} hot-loop instructions ({:.1}%), {} registers",
            hot.mix.mma,
            hot.mix.total(),
            100.0 * share,
            p.ptxas.registers
        );
        if share < least || p.spills() > 0 {
            failures.push(format!(
                "{name}: HMMA {:.1}% of the hot loop (want at least {:.0}%), {} B spilled",
                100.0 * share,
                100.0 * least,
                p.spills()
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// (name, statements, shapes, element types) of the sm_90a (wgmma) cases.
const WGMMA_CASES: &[(&str, &str, &str, &str)] = &[
    (
        "matmul_bf16_1000",
        "c[[i, j]] += a[[i, k]] * b[[k, j]]",
        "a=1000x1000 b=1000x1000 c=1000x1000",
        "a=bf16,b=bf16,c=f32",
    ),
    (
        "matmul_f16_1000",
        "c[[i, j]] += a[[i, k]] * b[[k, j]]",
        "a=1000x1000 b=1000x1000 c=1000x1000",
        "a=f16,b=f16,c=f32",
    ),
    (
        "bert_bias_relu_bf16",
        "o[[i, j]] += a[[i, k]] * b[[k, j]]; o[[i, j]] = relu(o[[i, j]] + bias[[j]])",
        "a=512x768 b=768x3072 bias=3072 o=512x3072",
        "a=bf16,b=bf16,o=bf16",
    ),
    (
        "matmul_f16_nt",
        "c[[i, j]] += a[[k, i]] * b[[j, k]]",
        "a=512x768 b=1024x512 c=768x1024",
        "a=f16,b=f16,c=f16",
    ),
    (
        "batch_matmul_bf16",
        "z[[b, m, n]] += x[[b, m, k]] * y[[b, k, n]]",
        "x=12x512x64 y=12x64x512 z=12x512x512",
        "x=bf16,y=bf16",
    ),
    (
        "matmul_bf16_prime",
        "c[[i, j]] += a[[i, k]] * b[[k, j]]",
        "a=127x131 b=131x137 c=127x137",
        "a=bf16,b=bf16",
    ),
    (
        "matmul_bf16_odd_k",
        "c[[i, j]] += a[[i, k]] * b[[k, j]]",
        "a=1000x999 b=999x1000 c=1000x1000",
        "a=bf16,b=bf16,c=f32",
    ),
];

const WGMMA_RANDOM_POINTS: usize = 2;

/// Hopper kernels through NVRTC (`compute_90a`), `ptxas -arch=sm_90a -v` and `nvdisasm`: the
/// default and random points of the wgmma template on bf16/f16 GEMMs (1000³, BERT-size with
/// a fused bias + ReLU, transposed operands, batched, prime and odd extents). Each must
/// compile with no `#include`, assemble with no spills and without ptxas serializing the
/// warpgroup MMAs, and issue `HGMMA` in its main loop (one per `m64` block and 16-deep step),
/// with `LDGSTS` (cp.async) where rows are aligned. The CUDA space picks this template on
/// sm_90a for the large GEMMs, and `mma.sync` on plain sm_90.
#[test]
fn wgmma_kernels_assemble_for_sm90a_and_issue_hgmma() {
    if !common::tools_present(unavailable()) {
        return;
    }
    let target = GpuTarget::h100_sm90a();
    assert_eq!(
        (target.virtual_arch(), target.real_arch()),
        ("compute_90a".to_string(), "sm_90a".to_string())
    );
    let dir = std::env::temp_dir().join(format!("td-wg-sass-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut rng = StdRng::seed_from_u64(900);
    let mut failures = Vec::new();
    let mut n = 0;
    for &(name, src, shapes, dtypes) in WGMMA_CASES {
        let case = common::Case::new(name, src, shapes, dtypes);
        let extents = case.extents();
        let refs = case.shape_refs();
        let t = WgTemplate::new(&case.kernel, &extents, &refs, &target)
            .unwrap_or_else(|e| panic!("{name}: no wgmma form: {e}"));
        // Dispatch: wgmma for the large GEMMs on sm_90a, never on sm_90.
        let space = CudaSpace::new(&case.kernel, &extents, &refs, &target).unwrap();
        let large = !name.contains("prime");
        assert_eq!(space.name() == "wgmma", large, "{name}: {}", space.name());
        let plain = CudaSpace::new(&case.kernel, &extents, &refs, &GpuTarget::h100()).unwrap();
        assert_eq!(plain.name(), "tensor_core", "{name}");
        let mut points: Vec<(String, WgSchedule)> = vec![("default".into(), t.default_schedule())];
        for _ in 0..WGMMA_RANDOM_POINTS {
            let c = t.space().sample_uniform(&mut rng).unwrap();
            points.push((t.space().format(&c).unwrap(), t.decode(&c).unwrap()));
        }
        // The largest tile: two warpgroups of two m64 blocks, N = 128.
        let big = WgSchedule {
            wg_m: 128,
            warpgroups: 2,
            block_n: 128,
            block_k: 64,
            stages: 3,
            splits: 1,
            tma: false,
        };
        if let Ok(c) = t.encode(&big) {
            points.push((t.space().format(&c).unwrap(), big.clone()));
        }
        // TMA staging (where the strides allow it): the default's tiles and the big one.
        for s in [t.default_schedule(), big] {
            let tma = WgSchedule { tma: true, ..s };
            if let Ok(c) = t.encode(&tma) {
                points.push((t.space().format(&c).unwrap(), tma));
            }
        }
        for (config, s) in points {
            n += 1;
            let gen = wgmma::generate(&case.kernel, &extents, &refs, &s);
            assert!(!gen.source.contains("#include"), "{name}: #include");
            let result = ptx_of(name, &gen.source, &target.virtual_arch())
                .and_then(|ptx| assemble(&ptx, &target.real_arch(), &dir, n));
            let (log, sass) = match result {
                Ok(x) => x,
                Err(e) => {
                    failures.push(format!("{name} {config}: {e}\n{}", gen.source));
                    continue;
                }
            };
            let r = tensor_dsl::runtime::ptxas::parse_report(&log);
            let g = t.gemm();
            let per_split = g.wg_k_tiles(&s).div_ceil(s.splits);
            let hot = if per_split <= 1 {
                sass.lines().collect()
            } else {
                hot_loop(&sass)
            };
            let count = |lines: &[&str], op: &str| lines.iter().filter(|l| l.contains(op)).count();
            let mmas = s.m_blocks() * s.block_k / 16;
            let mut problems = Vec::new();
            if r.spill_stores > 0 || r.spill_loads > 0 {
                problems.push(format!(
                    "spills ({} B stores, {} B loads)",
                    r.spill_stores, r.spill_loads
                ));
            }
            if log.contains("serialized") {
                problems.push(format!("ptxas serializes the wgmma: {log}"));
            }
            if count(&hot, "HGMMA") < mmas {
                problems.push(format!(
                    "{} HGMMA in the hot loop ({} lines), want {mmas}",
                    count(&hot, "HGMMA"),
                    hot.len()
                ));
            }
            let all: Vec<&str> = sass.lines().collect();
            if s.tma {
                // One thread issues the stage's bulk tensor copies (UTMALDG) in the loop.
                if count(&hot, "UTMALDG") == 0 && per_split > s.prefetch() {
                    problems.push("no UTMALDG (TMA) in the main loop".into());
                }
                if gen.tensor_maps.len() != 2 {
                    problems.push("a TMA kernel without its two tensor maps".into());
                }
            } else if (g.a.width > 1 || g.b.width > 1) && count(&all, "LDGSTS") == 0 {
                problems.push("no LDGSTS (cp.async)".into());
            }
            println!(
                "{name} {config}: {} registers, {} HGMMA of {} SASS lines in the hot loop",
                r.registers,
                count(&hot, "HGMMA"),
                hot.len()
            );
            if !problems.is_empty() {
                failures.push(format!("{name} {config} {s:?}: {}", problems.join("; ")));
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        failures.is_empty(),
        "{} of {n} configs failed:\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}
