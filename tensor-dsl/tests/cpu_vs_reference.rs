//! Every kernel, on random and awkward shapes, through the CPU backend (default and naive
//! schedules) against the reference interpreter.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use rand::{rngs::StdRng, Rng, SeedableRng};
use tensor_dsl::ir::{parse_text, DType, Kernel};
use tensor_dsl::runtime::cpu;
use tensor_dsl::template::cpu::{CpuConfig, CpuTemplate};
use tensor_dsl::template::cpu_conv::{ConvShape, ConvTile};
use tensor_dsl::{Buffer, Data};

const AWKWARD: &[usize] = &[1, 2, 3, 5, 7, 8, 13, 16, 17, 31, 33, 64];

/// Most iteration points of a random case: the interpreter (a debug build in tests) must
/// check it in well under a second.
const MAX_POINTS: usize = 2_000_000;

/// Shapes for `kernel` from random extents: plain dimensions take the index's extent,
/// affine ones a random size around the range they read (so padding is exercised).
fn random_case(kernel: &Kernel, rng: &mut StdRng) -> Option<(Vec<usize>, Vec<Vec<usize>>)> {
    let extents: Vec<usize> = kernel
        .indices
        .iter()
        .map(|_| AWKWARD[rng.gen_range(0..AWKWARD.len())])
        .collect();
    if extents.iter().fold(1usize, |a, &e| a.saturating_mul(e)) > MAX_POINTS {
        return None;
    }
    common::shapes_for(kernel, &extents, |hi| {
        rng.gen_range(1..=(hi.max(0) as usize + 2))
    })
}

fn close(got: f32, want: f32) -> bool {
    close_within(got, want, 1.0)
}

/// `close` with the tolerance scaled by `scale`: f32 rounding in a sum grows about with the
/// square root of its length, see [`sum_scale`].
fn close_within(got: f32, want: f32, scale: f32) -> bool {
    (got.is_nan() && want.is_nan()) || (got - want).abs() <= 1e-4 * scale * (1.0 + want.abs())
}

/// Tolerance scale for a kernel's reduction: 1 up to 1000 terms, then √(terms / 1000) (a
/// 33·13·64-term convolution sums to 1.5e-4 off the interpreter in plain sequential f32).
fn sum_scale(kernel: &Kernel, extents: &[usize]) -> f32 {
    let terms: usize = kernel.reduction().iter().map(|&r| extents[r]).product();
    (terms as f32 / 1000.0).sqrt().max(1.0)
}

/// Runs `check(n, src)` for every kernel of the language, spread over the cores (compiling
/// dominates).
fn for_each_kernel(check: impl Fn(usize, &str) + Sync) {
    let workers = std::thread::available_parallelism()
        .map_or(2, |n| n.get())
        .min(4);
    std::thread::scope(|scope| {
        for w in 0..workers {
            let check = &check;
            scope.spawn(move || {
                for (n, src) in common::KERNELS.iter().enumerate() {
                    if n % workers == w {
                        check(n, src);
                    }
                }
            });
        }
    });
}

#[test]
fn cpu_matches_reference_on_random_shapes() {
    for_each_kernel(|n, src| check_kernel(src, n as u64, |_| None));
}

/// Element types for a kernel's parameters in the half-precision test, cycling by `n`:
/// `bf16` inputs with an `f32` output (the tensor-core case), all `f16`, `f16` inputs with a
/// `bf16` output, and `bf16` inputs with an `f16` output.
fn half_types(n: usize) -> impl Fn(bool) -> Option<DType> {
    move |is_output| {
        let (input, output) = match n % 4 {
            0 => (DType::BF16, DType::F32),
            1 => (DType::F16, DType::F16),
            2 => (DType::F16, DType::BF16),
            _ => (DType::BF16, DType::F16),
        };
        Some(if is_output { output } else { input })
    }
}

#[test]
fn cpu_matches_reference_in_half_precision() {
    for_each_kernel(|n, src| check_kernel(src, 100 + n as u64, half_types(n)));
}

/// Tolerance of an output element of type `dtype`: f32 sums to `1e-4 * scale`, half ones to
/// two units in the last place on top.
fn tol(dtype: DType, scale: f32) -> f32 {
    match dtype {
        DType::F32 => scale,
        other => scale + tensor_dsl::measure::tolerance(other) / 1e-4,
    }
}

fn check_kernel(src: &str, seed: u64, dtype_of: impl Fn(bool) -> Option<DType>) {
    let lanes = cpu::simd_lanes();
    let mut rng = StdRng::seed_from_u64(seed);
    {
        let mut kernel = parse_text("k", src, None).unwrap();
        for p in &mut kernel.params {
            if let Some(d) = dtype_of(p.is_output) {
                p.dtype = d;
            }
        }
        let out_dtype = kernel.params[kernel.output].dtype;
        let mut ran = 0;
        for _ in 0..400 {
            if ran == 3 {
                break;
            }
            let Some((extents, shapes)) = random_case(&kernel, &mut rng) else {
                continue;
            };
            ran += 1;
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
            let shape_refs: Vec<&[usize]> = shapes.iter().map(|s| s.as_slice()).collect();
            let data_refs: Vec<Data> = data.iter().map(Buffer::view).collect();
            let n_out: usize = shapes[kernel.output].iter().product();
            let mut want = Buffer::zeros(out_dtype, n_out);
            tensor_dsl::reference::run(&kernel, &extents, &shape_refs, &data_refs, want.view_mut());
            let want = want.to_f32();
            let mut configs = vec![
                CpuConfig::heuristic(&kernel, &extents, lanes),
                CpuConfig::naive(&kernel),
            ];
            // Random points of the template's space (odd tiles, other axes, no packing, ...).
            let template = CpuTemplate::new(&kernel, &extents, lanes).unwrap();
            assert_eq!(
                template.decode(&template.default_config()).unwrap(),
                configs[0]
            );
            for _ in 0..2 {
                let point = template.space().sample_uniform(&mut rng).unwrap();
                configs.push(template.decode(&point).unwrap());
            }
            let scale = tol(out_dtype, sum_scale(&kernel, &extents));
            for cfg in configs {
                let mut got = Buffer::from_f32(out_dtype, &vec![f32::NAN; n_out]);
                if let Err(cpu::CpuError::Other(e)) = cpu::run_with(
                    &kernel,
                    &extents,
                    &shape_refs,
                    &data_refs,
                    got.view_mut(),
                    &cfg,
                ) {
                    panic!("{src} {shapes:?} {cfg:?}: {e}");
                }
                for (n, (g, w)) in got.to_f32().iter().zip(&want).enumerate() {
                    assert!(
                        close_within(*g, *w, scale),
                        "{src} ({}) shapes {shapes:?} {cfg:?}: element {n}: cpu {g} vs reference {w}",
                        kernel.dtypes_text()
                    );
                }
            }
        }
        assert!(ran > 0, "{src}: no consistent random shape found");
    }
}

/// Random data in [-1, 1) for every tensor of `shapes` (the output's too), and the
/// reference interpreter's output on it.
fn reference_case(
    kernel: &Kernel,
    extents: &[usize],
    shapes: &[Vec<usize>],
    rng: &mut StdRng,
) -> (Vec<Vec<f32>>, Vec<f32>) {
    let data: Vec<Vec<f32>> = shapes
        .iter()
        .map(|s| {
            (0..s.iter().product::<usize>())
                .map(|_| rng.gen_range(-1.0..1.0))
                .collect()
        })
        .collect();
    let shape_refs: Vec<&[usize]> = shapes.iter().map(|s| s.as_slice()).collect();
    let data_refs: Vec<Data> = data.iter().map(Into::into).collect();
    let mut want = vec![0.0f32; shapes[kernel.output].iter().product()];
    tensor_dsl::reference::run(kernel, extents, &shape_refs, &data_refs, (&mut want).into());
    (data, want)
}

/// The extents of a convolution kernel from those of its indices `n f p q c r s`.
fn conv_extents(kernel: &Kernel, named: &[usize; 7]) -> Vec<usize> {
    let id = |n: &str| kernel.indices.iter().position(|i| i.name == n).unwrap();
    let mut e = vec![0; kernel.indices.len()];
    for (name, &x) in ["n", "f", "p", "q", "c", "r", "s"].iter().zip(named) {
        e[id(name)] = x;
    }
    e
}

/// `default` with a pixel-vector tile ([`ConvTile::pixel_vectors`]) of `v` channels by `px`
/// pixels, in vectors of `lanes` (`wide`: 512-bit ones).
fn pixel_tile(default: &CpuConfig, v: usize, px: usize, lanes: usize, wide: bool) -> CpuConfig {
    let mut c = default.clone();
    c.vector = v;
    c.vector_code = lanes;
    c.wide_simd = wide;
    // (A `bf16` default in pairs on a CPU with AVX-512 BF16: not with pixels.)
    c.pairs = false;
    if let Some(t) = c.conv.as_mut() {
        *t = ConvTile::pixel_vectors(px);
    }
    c
}

/// Runs `configs` of `src` at `extents` (shapes derived, padded reads exercised) and checks
/// each against the reference interpreter.
fn check_configs(src: &str, extents: &[usize], configs: &[CpuConfig]) {
    let kernel = parse_text("k", src, None).unwrap();
    let mut rng = StdRng::seed_from_u64(7);
    let (extents, shapes) = common::shapes_for(&kernel, extents, |hi| hi.max(1) as usize).unwrap();
    let (data, want) = reference_case(&kernel, &extents, &shapes, &mut rng);
    let shape_refs: Vec<&[usize]> = shapes.iter().map(|s| s.as_slice()).collect();
    let data_refs: Vec<Data> = data.iter().map(Into::into).collect();
    let n_out = want.len();
    for cfg in configs {
        cfg.validate(&kernel).unwrap();
        let mut got = vec![f32::NAN; n_out];
        match cpu::run_with(
            &kernel,
            &extents,
            &shape_refs,
            &data_refs,
            (&mut got).into(),
            cfg,
        ) {
            Ok(()) => {}
            Err(cpu::CpuError::NoCompiler(e)) => {
                eprintln!("no C compiler ({e}): skipped");
                return;
            }
            Err(cpu::CpuError::Other(e)) => panic!("{src} {shapes:?} {cfg:?}: {e}"),
        }
        for (n, (g, w)) in got.iter().zip(&want).enumerate() {
            assert!(
                close(*g, *w),
                "{src} shapes {shapes:?} {cfg:?}: element {n}: cpu {g} vs reference {w}"
            );
        }
    }
}

/// Every combination of the knobs that change a blocked reduction's loop nest: blocks that
/// divide the reduction and blocks that do not, packed or not, parallel or not.
fn blocked_variants(base: &CpuConfig, blocks: &[usize]) -> Vec<CpuConfig> {
    let mut out = Vec::new();
    for &k_block in blocks {
        for pack in [true, false] {
            for parallel in [true, false] {
                out.push(CpuConfig {
                    k_block,
                    pack,
                    parallel,
                    ..base.clone()
                });
            }
        }
    }
    out
}

#[test]
fn blocked_reductions_match_reference() {
    let lanes = cpu::simd_lanes();
    // Matmul: 7 and 16 do not divide K = 100, 50 does; M = 131 spans three u-blocks
    // (64 rows rounded to the unroll tile of 3), N = 37 leaves an edge vector tile.
    let mm = "c[[i, j]] += a[[i, k]] * b[[k, j]]";
    let k = parse_text("k", mm, None).unwrap();
    let base = CpuConfig {
        unroll: 3,
        ..CpuConfig::heuristic(&k, &[131, 37, 100], lanes)
    };
    check_configs(mm, &[131, 37, 100], &blocked_variants(&base, &[7, 16, 50]));

    // Convolution with padding and a fused epilogue: the epilogue must run once, after the
    // last block, on the full sum; c = 13 is blocked by 4 (not dividing) and by 1.
    let conv = "y[[n, f, p, q]] += x[[n, c, 2 * p + r - 1, 2 * q + s - 1]] * w[[f, c, r, s]]; \
                y[[n, f, p, q]] = relu(y[[n, f, p, q]] + bias[[f]])";
    let k = parse_text("k", conv, None).unwrap();
    let id = |name: &str| k.indices.iter().position(|i| i.name == name).unwrap();
    let mut e = vec![0; k.indices.len()];
    for (name, extent) in [("n", 2), ("f", 5), ("p", 7), ("q", 9), ("c", 13)] {
        e[id(name)] = extent;
    }
    e[id("r")] = 3;
    e[id("s")] = 3;
    assert_eq!(
        k.reduction().first(),
        Some(&id("c")),
        "c is the blocked index"
    );
    let heuristic = CpuConfig::einsum_heuristic(&k, &e, lanes);
    let mut configs = blocked_variants(&heuristic, &[1, 4]);
    // The channel axis vectorized instead (the weights are packed along f).
    let f_axis = CpuConfig {
        vector_axis: Some(id("f")),
        vector: 4,
        unroll_axis: Some(id("q")),
        unroll: 2,
        ..heuristic.clone()
    };
    configs.extend(blocked_variants(&f_axis, &[4]));
    check_configs(conv, &e, &configs);

    // No unroll axis (a rank-1 output), an epilogue, and a rank-0 output.
    let gemv = "o[[i]] += a[[i, k]] * b[[k]]; o[[i]] = o[[i]] * 0.5 + 1.0";
    let k = parse_text("k", gemv, None).unwrap();
    let base = CpuConfig::heuristic(&k, &[70, 45], lanes);
    check_configs(gemv, &[70, 45], &blocked_variants(&base, &[16]));
    let dot = "s[[]] += a[[i]] * b[[i]]";
    let k = parse_text("k", dot, None).unwrap();
    check_configs(dot, &[99], &blocked_variants(&CpuConfig::naive(&k), &[32]));

    // Several reduction indices, the first one blocked.
    let chain = "o[[i]] += a[[i, j]] * b[[j, l]] * c[[l]] * d[[i]]";
    let k = parse_text("k", chain, None).unwrap();
    let base = CpuConfig::heuristic(&k, &[9, 17, 6], lanes);
    check_configs(chain, &[9, 17, 6], &blocked_variants(&base, &[5]));
}

/// Shapes and data slots of one call.
type Buffers<'a> = (Vec<&'a [usize]>, Vec<Data<'a>>);

#[test]
fn mismatched_buffers_are_errors_not_panics() {
    let kernel = parse_text("k", "c[[i]] = a[[i]] * 2.0", None).unwrap();
    let cfg = CpuConfig::naive(&kernel);
    let a = [1.0f32; 4];
    let mut out = [0.0f32; 4];
    let cases: [Buffers; 4] = [
        (vec![&[4]], vec![(&a).into(), Data::default()]), // too few shapes
        (vec![&[4], &[4]], vec![(&a).into()]),            // too few data slots
        (vec![&[4], &[4]], vec![a[..3].into(), Data::default()]), // short input
        (
            vec![&[4], &[4]],
            vec![Data::BF16(&[tensor_dsl::bf16::ONE; 4]), Data::default()],
        ), // wrong type
    ];
    for (shapes, data) in cases {
        match cpu::run_with(&kernel, &[4], &shapes, &data, (&mut out).into(), &cfg) {
            Err(cpu::CpuError::Other(e)) => assert!(
                e.to_string().contains("parameters")
                    || e.to_string().contains("elements")
                    || e.to_string().contains("declares"),
                "{e}"
            ),
            Err(cpu::CpuError::NoCompiler(_)) => {}
            Ok(()) => panic!("accepted mismatched buffers"),
        }
    }
}

/// The convolution template (`template::cpu_conv`) on awkward convolutions: odd and prime
/// channel counts, stride 2, padding, 1×1, 7×7 over 3 channels, a batch, an epilogue, and
/// channel counts below, at and past the channel tile, weights with the channel innermost;
/// in f32 and with half-precision inputs. Each runs its default, every border/parallel
/// variant of it, the other weight packing, tiles of whole and part rows (padding taps
/// skipped) and random points of its space, with the weights packed at the call and packed
/// ahead ([`cpu::run_with_versions`]).
#[test]
fn convolution_template_matches_reference() {
    let lanes = cpu::simd_lanes();
    let conv = |stride: usize, pad: usize| {
        format!(
            "y[[n, f, p, q]] += x[[n, c, {stride} * p + r - {pad}, {stride} * q + s - {pad}]] \
             * w[[f, c, r, s]]"
        )
    };
    let epilogue = "; y[[n, f, p, q]] = relu(y[[n, f, p, q]] + bias[[f]])";
    // (kernel, n f p q c r s)
    let cases: Vec<(String, [usize; 7])> = vec![
        (conv(1, 1), [1, 5, 7, 7, 3, 3, 3]),
        (conv(2, 1), [2, 33, 5, 6, 13, 3, 3]),
        (conv(1, 0), [1, 17, 7, 7, 31, 1, 1]),
        (conv(2, 0), [1, 64, 4, 3, 8, 1, 1]),
        (conv(2, 3), [1, 37, 8, 9, 3, 7, 7]),
        (format!("{}{epilogue}", conv(1, 2)), [3, 16, 5, 5, 2, 5, 5]),
        (format!("{}{epilogue}", conv(2, 1)), [1, 70, 3, 3, 11, 3, 3]),
        // Channels past the last whole tile and points past the last whole transpose.
        (conv(1, 1), [1, 48, 4, 5, 19, 3, 3]),
        // Weights with the channel innermost: their points are not contiguous, so the
        // transposed packing falls back to the loops.
        (
            "y[[n, f, p, q]] += x[[n, c, p + r - 1, q + s - 1]] * w[[c, r, s, f]]".into(),
            [1, 40, 3, 4, 5, 3, 3],
        ),
        // NHWC: the channels are unit-stride in the output (whole-vector stores), with a
        // partial channel tile and an epilogue.
        (
            "y[[n, p, q, f]] += x[[n, p + r - 1, q + s - 1, c]] * w[[r, s, c, f]]; \
             y[[n, p, q, f]] = relu(y[[n, p, q, f]] + bias[[f]])"
                .into(),
            [2, 40, 5, 3, 7, 3, 3],
        ),
        // Pixel tiles that end past an image (a batch of 3 planes of 4x5) and past the
        // last pixel, stored by transposes where they lie in one plane.
        (conv(1, 1), [3, 32, 4, 5, 6, 3, 3]),
        // Pixel vectors: 1×1 over a batch of 9×9 planes (runs of 81 pixels, the last
        // vector of each moved back), read in place; a stride-2 one (the compact copy,
        // runs of 80) with channels past the last tile; a padded 3×3 one (runs of one
        // 18-pixel row of the padded copy); an epilogue.
        (conv(1, 0), [2, 20, 9, 9, 24, 1, 1]),
        (conv(2, 0), [1, 21, 8, 10, 40, 1, 1]),
        (conv(1, 1), [1, 12, 6, 18, 5, 3, 3]),
        (format!("{}{epilogue}", conv(1, 0)), [2, 19, 6, 6, 10, 1, 1]),
        // Five channels: one tile of 8 reads the input in place, tiles of 4 through each
        // pixel tile's own copy (the fused copy, for more than one channel tile).
        (conv(1, 0), [1, 5, 9, 9, 24, 1, 1]),
        // Pixel vectors over strided windows (the window-expanded copy): a padded 3×3 of
        // stride 2 with 17-pixel rows, an unpadded one over a batch with 16-pixel rows.
        (conv(2, 1), [1, 20, 3, 17, 3, 3, 3]),
        (conv(2, 0), [2, 9, 2, 16, 3, 3, 3]),
        // Reduction blocks (below): 70 input channels (blocks of 32 and 64, the last
        // partial) over 5×7 with a partial channel tile and an epilogue; a padded 3×3 one
        // of stride 2 over 33 channels.
        (format!("{}{epilogue}", conv(1, 0)), [1, 20, 5, 7, 70, 1, 1]),
        (conv(2, 1), [1, 17, 4, 4, 33, 3, 3]),
        // Channel tiles over the fused copy (each pixel tile's pixels gathered per input
        // channel): a strided 1×1 over a batch of two, 37 output channels (a partial
        // channel tile), 70 pixels (a partial pixel tile), with and without an epilogue.
        (conv(2, 0), [2, 37, 5, 7, 19, 1, 1]),
        (format!("{}{epilogue}", conv(1, 0)), [1, 40, 3, 5, 21, 1, 1]),
        // Rows of 20 pixels: tiles in one row (copied along the row, the next tile's
        // lines fetched) beside tiles across rows and images, and a partial last tile.
        (conv(2, 0), [2, 37, 4, 20, 19, 1, 1]),
        (conv(1, 0), [1, 40, 3, 20, 21, 1, 1]),
    ];
    let types: [(DType, DType); 3] = [
        (DType::F32, DType::F32),
        (DType::F16, DType::F16),
        (DType::BF16, DType::F32),
    ];
    let mut rng = StdRng::seed_from_u64(11);
    // Versions of the weights: a new one for each case's data.
    let mut version = 1u64 << 40;
    let mut pixel_tiles = 0;
    let mut avx2_pixel_tiles = 0;
    let mut blocked = 0;
    let mut pixel_blocks = 0;
    for (src, named) in &cases {
        for &(input, output) in &types {
            let mut kernel = parse_text("k", src, None).unwrap();
            for p in &mut kernel.params {
                p.dtype = if p.is_output { output } else { input };
            }
            let id = |n: &str| kernel.indices.iter().position(|i| i.name == n).unwrap();
            let e = conv_extents(&kernel, named);
            let (extents, shapes) =
                common::shapes_for(&kernel, &e, |hi| hi.max(0) as usize + 1).unwrap();
            let default = CpuConfig::heuristic(&kernel, &extents, lanes);
            assert!(
                default.conv.is_some(),
                "{src}: not the convolution template"
            );
            let template = CpuTemplate::new(&kernel, &extents, lanes)
                .unwrap_or_else(|e| panic!("{src} {named:?} {}: {e}", kernel.dtypes_text()));
            assert_eq!(
                template.decode(&template.default_config()).unwrap(),
                default
            );
            let mut configs = Vec::new();
            for pad in [true, false] {
                for parallel in [true, false] {
                    let mut c = default.clone();
                    c.parallel = parallel;
                    if let Some(t) = c.conv.as_mut() {
                        t.pad = pad;
                    }
                    // (A pixel-vector tile reads the padded input only.)
                    if c.validate(&kernel).is_ok() {
                        configs.push(c);
                    }
                }
            }
            // Pixel-vector tiles of a few shapes, where the space has them (f32 outputs,
            // runs of 16 pixels or more).
            for (v, px) in [(8, 32), (4, 16), (16, 48)] {
                let c = pixel_tile(&default, v, px, default.vector_code, true);
                if template.encode(&c).is_some() {
                    pixel_tiles += 1;
                    configs.push(c);
                }
            }
            // AVX2's pixel tiles (8-pixel vectors, whatever this machine's width: any x86-64
            // compiler target with AVX runs them), runs that they do not divide included.
            let run = ConvShape::of(&kernel).unwrap().pixel_run(&kernel, &extents);
            for (v, px) in [(6, 16), (4, 24)] {
                let c = pixel_tile(&default, v, px, 8, false);
                if c.validate(&kernel).is_ok() && output == DType::F32 && run >= 8 {
                    avx2_pixel_tiles += 1;
                    configs.push(c);
                }
            }
            // The other weight packing, where the channel tile allows both.
            let mut flipped = default.clone();
            if let Some(t) = flipped.conv.as_mut() {
                t.transpose = !t.transpose;
            }
            if template.encode(&flipped).is_some() {
                configs.push(flipped);
            }
            // Tiles of whole rows and of parts of rows (which skip the taps that read
            // padding: all of them, or those of whole rows of taps; their pixels are
            // steps along the row from the first), on the padded copy and in place.
            let q = extents[id("q")];
            for px in (1..=q).rev().filter(|d| q % d == 0).take(2) {
                for pad in [true, false] {
                    let mut rows = default.clone();
                    if let Some(t) = rows.conv.as_mut() {
                        t.pixels = px;
                        t.pad = pad;
                    }
                    if template.encode(&rows).is_some() && !configs.contains(&rows) {
                        configs.push(rows);
                    }
                }
            }
            // Reduction blocks that divide the input channels and blocks that do not, on
            // the default's channel tile (pairs aside), channel tiles outermost; over all
            // pixel tiles at once and in pixel blocks of 2 and 3 tiles.
            let channels = extents[id("c")];
            for (k_block, block_tiles) in [(32, 0), (64, 0), (32, 2), (64, 3)] {
                let mut c = default.clone();
                c.k_block = k_block;
                c.pairs = false;
                if let Some(t) = c.conv.as_mut() {
                    t.pixels_outer = false;
                    t.block_tiles = block_tiles;
                }
                if k_block < channels && c.validate(&kernel).is_ok() && !configs.contains(&c) {
                    blocked += 1;
                    configs.push(c);
                }
            }
            // The other loop order on prepacked weights (unblocked: blocks keep channel
            // tiles outermost).
            let mut order = default.clone();
            if let Some(t) = order.conv.as_mut() {
                t.pixels_outer = !t.pixels_outer;
                if t.pixels_outer {
                    order.k_block = 0;
                }
            }
            configs.push(order);
            // Pixel tiles outermost in pixel blocks of 2 and 3 tiles (unblocked reduction),
            // each block walking the channel tiles on prepacked weights.
            for block_tiles in [2, 3] {
                let mut c = default.clone();
                c.k_block = 0;
                if let Some(t) = c.conv.as_mut() {
                    t.pixels_outer = true;
                    t.block_tiles = block_tiles;
                }
                if c.validate(&kernel).is_ok() && !configs.contains(&c) {
                    pixel_blocks += 1;
                    configs.push(c);
                }
            }
            // And the other way of storing the tile.
            let mut stored = default.clone();
            if let Some(t) = stored.conv.as_mut() {
                t.vector_store = !t.vector_store;
            }
            configs.push(stored);
            for _ in 0..3 {
                let point = template.space().sample_uniform(&mut rng).unwrap();
                configs.push(template.decode(&point).unwrap());
            }
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
            let shape_refs: Vec<&[usize]> = shapes.iter().map(|s| s.as_slice()).collect();
            let data_refs: Vec<Data> = data.iter().map(Buffer::view).collect();
            let n_out: usize = shapes[kernel.output].iter().product();
            let mut want = Buffer::zeros(output, n_out);
            tensor_dsl::reference::run(&kernel, &extents, &shape_refs, &data_refs, want.view_mut());
            let want = want.to_f32();
            let scale = tol(output, sum_scale(&kernel, &extents));
            // Each config runs packing the weights itself, then twice on weights packed
            // ahead (the first call packs them, the second reuses them).
            version += 1;
            let mut versions = vec![None; kernel.params.len()];
            versions[kernel.params.iter().position(|p| p.name == "w").unwrap()] = Some(version);
            let runs = configs
                .iter()
                .flat_map(|c| [(c, &[][..]), (c, &versions[..]), (c, &versions[..])]);
            for (cfg, versions) in runs {
                cfg.validate(&kernel).unwrap();
                let mut got = Buffer::from_f32(output, &vec![f32::NAN; n_out]);
                match cpu::run_with_versions(
                    &kernel,
                    &extents,
                    &shape_refs,
                    &data_refs,
                    versions,
                    got.view_mut(),
                    cfg,
                ) {
                    Ok(()) => {}
                    Err(cpu::CpuError::NoCompiler(e)) => {
                        eprintln!("no C compiler ({e}): skipped");
                        return;
                    }
                    Err(cpu::CpuError::Other(e)) => panic!("{src} {shapes:?} {cfg:?}: {e}"),
                }
                for (n, (g, w)) in got.to_f32().iter().zip(&want).enumerate() {
                    assert!(
                        close_within(*g, *w, scale),
                        "{src} ({}) shapes {shapes:?} {cfg:?} versions {versions:?}: element \
                         {n}: cpu {g} vs reference {w}",
                        kernel.dtypes_text()
                    );
                }
            }
        }
    }
    if lanes >= 16 {
        assert!(
            pixel_tiles >= 20,
            "{pixel_tiles} pixel-vector tiles checked"
        );
    }
    assert!(
        avx2_pixel_tiles >= 10,
        "{avx2_pixel_tiles} 8-lane pixel-vector tiles checked"
    );
    assert!(
        blocked >= 8,
        "{blocked} configs with reduction blocks checked"
    );
    assert!(
        pixel_blocks >= 8,
        "{pixel_blocks} configs in pixel blocks checked"
    );
}

/// Fused pixel-vector tiles (1×1, stride 1, unpadded, more than one channel tile) align
/// their runs to the output's cache lines at run time: each run's first tile starts before
/// it and its last may end past it. Every output element must come out right wherever the
/// output starts (each offset past a line, as sub-slices of one buffer), with an epilogue
/// that reads the output's own pixels too (where edge tiles' lanes outside the run read
/// the run's ends).
#[test]
fn pixel_tiles_aligned_at_run_time_match_reference_at_every_offset() {
    let base = "y[[n, f, p, q]] += x[[n, c, p + r, q + s]] * w[[f, c, r, s]]";
    let residual = format!("{base}; y[[n, f, p, q]] = relu(y[[n, f, p, q]] + z[[n, f, p, q]])");
    // (kernel, n f p q c r s): runs of 64 pixels (tiles of 16 and 32 whole), of 48 (tiles
    // of 24 whole, of 16 over a batch of two), of 40 (no tile of 16 or more divides them).
    let cases: [(&str, [usize; 7]); 4] = [
        (base, [1, 20, 8, 8, 24, 1, 1]),
        (&residual, [2, 13, 6, 8, 9, 1, 1]),
        (base, [1, 9, 5, 8, 5, 1, 1]),
        (&residual, [1, 20, 8, 8, 3, 1, 1]),
    ];
    let mut rng = StdRng::seed_from_u64(5);
    let mut checked = 0;
    for (src, named) in cases {
        let kernel = parse_text("k", src, None).unwrap();
        let e = conv_extents(&kernel, &named);
        let (extents, shapes) =
            common::shapes_for(&kernel, &e, |hi| hi.max(0) as usize + 1).unwrap();
        let default = CpuConfig::heuristic(&kernel, &extents, 8);
        let (data, want) = reference_case(&kernel, &extents, &shapes, &mut rng);
        let shape_refs: Vec<&[usize]> = shapes.iter().map(|s| s.as_slice()).collect();
        let data_refs: Vec<Data> = data.iter().map(Into::into).collect();
        let n_out = want.len();
        // Tiles of 8-float vectors (AVX2's) and of 16-float ones (AVX-512's; GCC splits
        // them where the machine's are narrower).
        for (v, px, lanes) in [(6, 16, 8), (4, 24, 8), (4, 32, 16)] {
            let mut c = pixel_tile(&default, v, px, lanes, lanes == 16);
            c.k_block = 0;
            c.validate(&kernel).unwrap();
            for offset in 0..16 {
                let mut buffer = vec![f32::NAN; n_out + 16];
                let got = &mut buffer[offset..offset + n_out];
                match cpu::run_with(&kernel, &extents, &shape_refs, &data_refs, got.into(), &c) {
                    Ok(()) => {}
                    Err(cpu::CpuError::NoCompiler(e)) => {
                        eprintln!("no C compiler ({e}): skipped");
                        return;
                    }
                    Err(cpu::CpuError::Other(e)) => panic!("{src} {shapes:?} {c:?}: {e}"),
                }
                for (n, (g, w)) in buffer[offset..offset + n_out].iter().zip(&want).enumerate() {
                    assert!(
                        close(*g, *w),
                        "{src} shapes {shapes:?} {c:?} output at +{offset}: element {n}: \
                         cpu {g} vs reference {w}"
                    );
                }
                assert!(
                    buffer[..offset]
                        .iter()
                        .chain(&buffer[offset + n_out..])
                        .all(|x| x.is_nan()),
                    "{src} {c:?} output at +{offset}: wrote outside the output"
                );
                checked += 1;
            }
        }
    }
    assert_eq!(checked, 4 * 3 * 16);
}
