//! The C compiler must not take seconds over a default CPU schedule: a first call compiles
//! it (and a shape with only a "nearest" record compiles that schedule and the default).
//!
//! Each case is the default schedule of a shape that once took GCC 12 long, compiled the way
//! the runtime compiles (its probed compiler and flags), one at a time. Seconds of CPU time
//! of `cc` on a 2-core AVX-512 VM (GCC 12.2, shared with another job; before: codegen v3,
//! after: v4; `bench/results/2026-11-23-cpu-compile-time.md` has the full tables):
//!
//! | case                                   | before | after |
//! |----------------------------------------|-------:|------:|
//! | matmul 512×1024·1024×64 (the README's) |   7.86 |  0.29 |
//! | matmul 512×1024·1024×128               |   8.00 |  0.31 |
//! | matmul 512×768·768×64                  |   7.67 |  0.46 |
//! | matmul 7×64·64×128                     |   5.56 |  0.38 |
//! | matmul 1000×1000·1000×1000 (edges)     |   1.24 |  0.35 |
//! | matmul 127×129·129×131 (edges, both)   |   0.55 |  0.33 |
//! | batched matmul 960×128×128·…×64        |   8.47 |  0.36 |
//! | convolution 7×7, stride 2, padding 3   |   2.35 |  1.14 |
//! | convolution 3×3, padding 1, 56×56      |   1.58 |  0.87 |
//!
//! The bound is loose, for a loaded CI machine; the causes it guards against took 6–16 s.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::{Duration, Instant};
use tensor_dsl::codegen::c;
use tensor_dsl::ir::{bind, parse_text};
use tensor_dsl::runtime::cpu;
use tensor_dsl::template::cpu::CpuConfig;

/// Most seconds one default schedule may take to compile.
const BOUND: Duration = Duration::from_secs(3);

const MATMUL: &str = "c[[i, j]] += a[[i, k]] * b[[k, j]]";

/// (what, kernel, shapes).
fn cases() -> Vec<(&'static str, &'static str, Vec<Vec<usize>>)> {
    let mm = |m: usize, k: usize, n: usize| vec![vec![m, k], vec![k, n], vec![m, n]];
    vec![
        ("matmul 512x1024x64", MATMUL, mm(512, 1024, 64)),
        ("matmul 512x1024x128", MATMUL, mm(512, 1024, 128)),
        ("matmul 512x768x64", MATMUL, mm(512, 768, 64)),
        ("matmul 7x64x128", MATMUL, mm(7, 64, 128)),
        ("matmul 1000^3", MATMUL, mm(1000, 1000, 1000)),
        ("matmul 127x129x131", MATMUL, mm(127, 129, 131)),
        // The batch does not change the code; 960 is OpEvo's BMM1.
        (
            "batched matmul 4x128x128x64",
            "c[[b, i, j]] += a[[b, i, k]] * w[[b, k, j]]",
            vec![vec![4, 128, 128], vec![4, 128, 64], vec![4, 128, 64]],
        ),
        (
            "convolution 7x7 stride 2 padding 3",
            "y[[n, f, p, q]] += x[[n, c, 2 * p + r - 3, 2 * q + s - 3]] * w[[f, c, r, s]]",
            vec![
                vec![1, 3, 224, 224],
                vec![64, 3, 7, 7],
                vec![1, 64, 112, 112],
            ],
        ),
        (
            "convolution 3x3 padding 1",
            "y[[n, f, p, q]] += x[[n, c, p + r - 1, q + s - 1]] * w[[f, c, r, s]]",
            vec![vec![1, 64, 56, 56], vec![64, 64, 3, 3], vec![1, 64, 56, 56]],
        ),
    ]
}

#[test]
fn default_cpu_schedules_compile_in_seconds_not_tens() {
    if let Err(why) = cpu::compiler() {
        println!("skipped: no C compiler ({why})");
        return;
    }
    let dir = cpu::work_dir().unwrap();
    let mut slow = Vec::new();
    for (n, (what, text, shapes)) in cases().into_iter().enumerate() {
        let kernel = parse_text("k", text, None).unwrap();
        let refs: Vec<&[usize]> = shapes.iter().map(Vec::as_slice).collect();
        let extents = bind(&kernel, &refs).unwrap();
        let config = CpuConfig::heuristic(&kernel, &extents, cpu::simd_lanes());
        let source = c::generate(&kernel, &extents, &refs, &config);
        let out = dir.join(format!("case{n}.so"));
        let start = Instant::now();
        let built = cpu::compile_shared_object(&source, &out);
        let took = start.elapsed();
        let _ = std::fs::remove_file(&out);
        built.unwrap_or_else(|e| panic!("{what}: {e}"));
        println!("{what}: {:.2} s", took.as_secs_f64());
        if took > BOUND {
            slow.push(format!("{what}: {:.1} s", took.as_secs_f64()));
        }
    }
    let _ = std::fs::remove_dir(&dir);
    assert!(
        slow.is_empty(),
        "default schedules took over {BOUND:?} to compile: {slow:?}"
    );
}
