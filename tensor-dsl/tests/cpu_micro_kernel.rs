//! The explicit vector micro-kernel (`kernel=vectors`, [`CpuConfig::vector_code`]) against
//! the reference interpreter: matmuls and batched matmuls (both operand layouts), bodies
//! with literals, negation, division and built-ins on the broadcast operand, an epilogue, a
//! body it must refuse (a built-in of the packed operand), on awkward extents (1, primes,
//! tails of every tile), vector widths of 4, 8 and 16 lanes, random points of the rest of
//! the space (tiles, reduction blocks, packing, order), in every element type the CPU
//! backend supports.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use rand::{rngs::StdRng, Rng, SeedableRng};
use tensor_dsl::codegen::c;
use tensor_dsl::ir::{bind, parse_text, DType, Kernel};
use tensor_dsl::runtime::cpu;
use tensor_dsl::template::cpu::{CpuConfig, CpuTemplate};
use tensor_dsl::{Buffer, Data};

/// (name, kernel, whether the packed tiles are vector code).
const CASES: &[(&str, &str, bool)] = &[
    ("matmul", "c[[i, j]] += a[[i, k]] * b[[k, j]]", true),
    (
        "batched",
        "c[[n, i, j]] += a[[n, i, k]] * b[[n, k, j]]",
        true,
    ),
    (
        "batched_transposed",
        "c[[n, i, j]] += a[[n, k, i]] * b[[n, k, j]]",
        true,
    ),
    (
        "arithmetic",
        "c[[i, j]] += -(a[[i, k]] * 2.0) * b[[k, j]] / 3.0 + exp(a[[i, k]]) * 0.25",
        true,
    ),
    (
        "epilogue",
        "c[[i, j]] += a[[i, k]] * b[[k, j]]; c[[i, j]] = relu(c[[i, j]] * 0.5 + d[[j]])",
        true,
    ),
    (
        "builtin_of_packed",
        "c[[i, j]] += a[[i, k]] * relu(b[[k, j]])",
        false,
    ),
];

const AWKWARD: &[usize] = &[1, 2, 3, 7, 13, 16, 17, 31, 32, 33, 48, 67];

/// Element types (inputs, output), cycled over the cases.
const DTYPES: &[(DType, DType)] = &[
    (DType::F32, DType::F32),
    (DType::F16, DType::F16),
    (DType::BF16, DType::F32),
    (DType::F16, DType::BF16),
];

/// Every parameter's shape, each plain dimension the extent of its index by name (the
/// output's dimensions are the spatial indices in order).
fn shapes(kernel: &Kernel, extent: &dyn Fn(&str) -> usize) -> Vec<Vec<usize>> {
    let of = |x: usize| extent(&kernel.indices[x].name);
    (0..kernel.params.len())
        .map(|p| {
            if p == kernel.output {
                return kernel.spatial().into_iter().map(of).collect();
            }
            let access = kernel
                .accesses()
                .into_iter()
                .find(|a| a.tensor == p)
                .unwrap();
            access.dims.iter().map(|d| of(d.terms[0].0)).collect()
        })
        .collect()
}

fn tolerance(dtype: DType, terms: usize) -> f32 {
    let scale = (terms as f32 / 1000.0).sqrt().max(1.0);
    1e-4 * scale
        + match dtype {
            DType::F32 => 0.0,
            d => tensor_dsl::measure::tolerance(d),
        }
}

/// Runs `configs` of `kernel` at `shapes` on random data and compares with the reference.
fn check(name: &str, kernel: &Kernel, shapes: &[Vec<usize>], configs: &[CpuConfig], seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    let refs: Vec<&[usize]> = shapes.iter().map(Vec::as_slice).collect();
    let extents = bind(kernel, &refs).unwrap();
    let data: Vec<Buffer> = shapes
        .iter()
        .zip(&kernel.params)
        .map(|(s, p)| {
            let values: Vec<f32> = (0..s.iter().product::<usize>())
                .map(|_| rng.gen_range(-1.0..1.0))
                .collect();
            Buffer::from_f32(p.dtype, &values)
        })
        .collect();
    let views: Vec<Data> = data.iter().map(Buffer::view).collect();
    let out_dtype = kernel.params[kernel.output].dtype;
    let n_out: usize = shapes[kernel.output].iter().product();
    let mut want = Buffer::zeros(out_dtype, n_out);
    tensor_dsl::reference::run(kernel, &extents, &refs, &views, want.view_mut());
    let want = want.to_f32();
    let terms: usize = kernel.reduction().iter().map(|&r| extents[r]).product();
    let tol = tolerance(out_dtype, terms);
    for cfg in configs {
        let mut got = Buffer::from_f32(out_dtype, &vec![f32::NAN; n_out]);
        match cpu::run_with(kernel, &extents, &refs, &views, got.view_mut(), cfg) {
            Err(cpu::CpuError::Other(e)) => panic!("{name} {shapes:?} {cfg:?}: {e}"),
            Err(cpu::CpuError::NoCompiler(_)) | Ok(()) => {}
        }
        for (n, (g, w)) in got.to_f32().iter().zip(&want).enumerate() {
            assert!(
                (g - w).abs() <= tol * (1.0 + w.abs()),
                "{name} ({}) shapes {shapes:?} {cfg:?}: element {n}: cpu {g} vs reference {w}",
                kernel.dtypes_text()
            );
        }
    }
}

#[test]
fn vector_micro_kernels_match_the_reference() {
    if let Err(why) = cpu::compiler() {
        println!("skipped: no C compiler ({why})");
        return;
    }
    let lanes = cpu::simd_lanes();
    let work: Vec<(usize, &(&str, &str, bool))> = CASES.iter().enumerate().collect();
    std::thread::scope(|scope| {
        for part in work.chunks(CASES.len().div_ceil(2)) {
            scope.spawn(move || {
                for &(n, &(name, text, vector)) in part {
                    let mut rng = StdRng::seed_from_u64(n as u64 + 11);
                    let mut kernel = parse_text(name, text, None).unwrap();
                    let (inputs, output) = DTYPES[n % DTYPES.len()];
                    for p in &mut kernel.params {
                        p.dtype = if p.is_output { output } else { inputs };
                    }
                    for round in 0..2 {
                        // i and j span several tiles with tails; k, the batch and the rest
                        // are small or prime.
                        let pick = |rng: &mut StdRng| AWKWARD[rng.gen_range(0..AWKWARD.len())];
                        let (i, j, k) = if round == 0 {
                            (33, 67, 13)
                        } else {
                            (pick(&mut rng), pick(&mut rng), pick(&mut rng))
                        };
                        let extent = |x: &str| match x {
                            "i" => i,
                            "j" => j,
                            "k" => k,
                            _ => 3,
                        };
                        let shapes = shapes(&kernel, &extent);
                        let refs: Vec<&[usize]> = shapes.iter().map(Vec::as_slice).collect();
                        let extents = bind(&kernel, &refs).unwrap();
                        let template = CpuTemplate::new(&kernel, &extents, lanes).unwrap();
                        let mut configs = vec![CpuConfig::heuristic(&kernel, &extents, lanes)];
                        for width in [4, 8, 16] {
                            let point = template.space().sample_uniform(&mut rng).unwrap();
                            let sampled = template.decode(&point).unwrap();
                            configs.push(CpuConfig {
                                vector_code: width,
                                // Blocks only where the output keeps f32 partial sums.
                                k_block: if output == DType::F32 && k > 2 {
                                    [0, 2, 5][rng.gen_range(0..3)]
                                } else {
                                    0
                                },
                                unroll_outer: false,
                                pack: true,
                                ..sampled
                            });
                        }
                        // The shape with full tiles prints vector code where the body allows.
                        if round == 0 {
                            let cfg = CpuConfig {
                                vector_code: 8,
                                ..configs[0].clone()
                            };
                            let src = c::generate(&kernel, &extents, &refs, &cfg);
                            assert_eq!(src.contains("td_f32x8"), vector, "{name}:\n{src}");
                        }
                        for cfg in &configs {
                            assert!(cfg.validate(&kernel).is_ok(), "{cfg:?}");
                        }
                        check(name, &kernel, &shapes, &configs, n as u64);
                    }
                }
            });
        }
    });
}
