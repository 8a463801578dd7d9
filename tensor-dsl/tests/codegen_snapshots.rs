//! Snapshots of generated code, one per kernel case in `tests/kernels/` and backend. A diff
//! here is a change in generated code: review it like any other diff
//! (`cargo insta review`, or `INSTA_UPDATE=always` then `git diff`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use tensor_dsl::template::cpu::CpuConfig;

#[test]
fn generated_c() {
    let cases = common::kernel_cases();
    assert!(cases.len() >= 8);
    for case in cases {
        let (kernel, shapes, extents) = (&case.kernel, case.shape_refs(), case.extents());
        // A fixed SIMD width so snapshots do not depend on the machine, and for the
        // convolution template (whose default runs in parallel only with several cores) a
        // fixed serial loop.
        let mut config = CpuConfig::heuristic(kernel, &extents, 8);
        if config.conv.is_some() {
            config.parallel = false;
        }
        let code = tensor_dsl::codegen::c::generate(kernel, &extents, &shapes, &config);
        insta::assert_snapshot!(format!("c_{}", case.name), code);
    }
}

/// The blocked-reduction loop nest and the 512-bit request, on the matmul and the padded
/// convolution cases: blocks that do not divide the reduction (48 = 2·20 + 8, 3 = 2 + 1).
#[test]
fn generated_c_blocked() {
    for (name, k_block) in [("matmul", 20), ("conv_bias_relu", 2)] {
        let case = common::kernel_cases()
            .into_iter()
            .find(|c| c.name == name)
            .unwrap();
        let (kernel, shapes, extents) = (&case.kernel, case.shape_refs(), case.extents());
        let config = CpuConfig {
            k_block,
            ..CpuConfig::einsum_heuristic(kernel, &extents, 16)
        };
        assert!(config.wide_simd);
        assert!(tensor_dsl::template::cpu::blocked_reduction(kernel, &extents, &config).is_some());
        let code = tensor_dsl::codegen::c::generate(kernel, &extents, &shapes, &config);
        insta::assert_snapshot!(format!("c_blocked_{}", case.name), code);
    }
}

/// The convolution template's transposed weight packing (`conv_pack=transpose`): 20
/// channels in a 32-channel tile (the second tile takes the guarded loops) and 45 reduction
/// points (two 16×16 transposes, then 13 points one by one).
#[test]
fn generated_c_conv_transposed_pack() {
    let kernel = tensor_dsl::ir::parse_text(
        "conv",
        "y[[n, f, p, q]] += x[[n, c, p + r - 1, q + s - 1]] * w[[f, c, r, s]]",
        None,
    )
    .unwrap();
    let shapes: [&[usize]; 3] = [&[1, 5, 6, 6], &[40, 5, 3, 3], &[1, 40, 6, 6]];
    let extents = [1, 40, 6, 6, 5, 3, 3];
    // Parallel whatever the machine's cores (the default is serial on one core).
    let config = CpuConfig {
        parallel: true,
        ..CpuConfig::heuristic(&kernel, &extents, 16)
    };
    assert_eq!(config.vector, 32);
    assert!(config.conv.as_ref().unwrap().transpose);
    let code = tensor_dsl::codegen::c::generate(&kernel, &extents, &shapes, &config);
    assert!(code.contains("__builtin_shuffle"));
    insta::assert_snapshot!("c_conv_transposed_pack", code);
}

/// The convolution `text` with its inputs `x` and `w` in `bf16`.
fn bf16_conv(text: &str) -> tensor_dsl::ir::Kernel {
    let mut kernel = tensor_dsl::ir::parse_text("conv", text, None).unwrap();
    for p in kernel
        .params
        .iter_mut()
        .filter(|p| p.name == "x" || p.name == "w")
    {
        p.dtype = tensor_dsl::ir::DType::BF16;
    }
    kernel
}

/// `base` in `bf16` pairs, `vector` channels by `tile`, with 512-bit vectors and parallel
/// whatever the machine.
fn in_pairs(
    base: CpuConfig,
    vector: usize,
    tile: tensor_dsl::template::cpu_conv::ConvTile,
) -> CpuConfig {
    CpuConfig {
        parallel: true,
        pairs: true,
        vector,
        wide_simd: true,
        conv: Some(tile),
        ..base
    }
}

/// The convolution template in `bf16` pairs (`conv_vector=pairs`): 5 input channels (the
/// copy's last pair and the panel's last point take channel 4 and a zero), 40 output
/// channels in 32-channel tiles, a bias and ReLU; parallel whatever the machine.
#[test]
fn generated_c_conv_bf16_pairs() {
    let kernel = bf16_conv(
        "y[[n, f, p, q]] += x[[n, c, p + r - 1, q + s - 1]] * w[[f, c, r, s]]; \
         y[[n, f, p, q]] = relu(y[[n, f, p, q]] + bias[[f]])",
    );
    let shapes: [&[usize]; 4] = [&[1, 5, 6, 6], &[40, 5, 3, 3], &[40], &[1, 40, 6, 6]];
    let extents = [1, 40, 6, 6, 5, 3, 3];
    let base = CpuConfig::heuristic(&kernel, &extents, 16);
    let tile = tensor_dsl::template::cpu_conv::ConvTile {
        pixels: 6,
        pad: true,
        transpose: false,
        pixel_vector: false,
        ..base.conv.clone().unwrap()
    };
    let config = in_pairs(base, 32, tile);
    let code = tensor_dsl::codegen::c::generate(&kernel, &extents, &shapes, &config);
    assert!(code.contains("td_dot2("), "{code}");
    insta::assert_snapshot!("c_conv_bf16_pairs", code);
}

/// Pixel pairs (`conv_vector=pixel_pairs`) over a 1×1, stride-1, unpadded input: 7 input
/// channels (the last pair's second half zero), runs of 36 pixels in 32-pixel tiles (the
/// second tile's vectors moved back), 20 output channels in 8-channel tiles; each pixel
/// tile's pairs copied once per thread (`td_conv_xtile`), the panels packed first into
/// scratch on calls without prepacked weights.
#[test]
fn generated_c_conv_bf16_pixel_pairs() {
    let kernel = bf16_conv("y[[n, f, p, q]] += x[[n, c, p + r, q + s]] * w[[f, c, r, s]]");
    let shapes: [&[usize]; 3] = [&[1, 7, 6, 6], &[20, 7, 1, 1], &[1, 20, 6, 6]];
    let extents = [1, 20, 6, 6, 7, 1, 1];
    let base = CpuConfig::heuristic(&kernel, &extents, 16);
    let tile = tensor_dsl::template::cpu_conv::ConvTile::pixel_vectors(32);
    let config = in_pairs(base, 8, tile);
    let code = tensor_dsl::codegen::c::generate(&kernel, &extents, &shapes, &config);
    assert!(code.contains("td_conv_xtile("), "{code}");
    insta::assert_snapshot!("c_conv_bf16_pixel_pairs", code);
}

/// A 1×1 convolution with bias and ReLU (NCHW; parameters x, w, bias, y).
fn conv_1x1_bias_relu() -> tensor_dsl::ir::Kernel {
    tensor_dsl::ir::parse_text(
        "conv",
        "y[[n, f, p, q]] += x[[n, c, p + r, q + s]] * w[[f, c, r, s]]; \
         y[[n, f, p, q]] = relu(y[[n, f, p, q]] + bias[[f]])",
        None,
    )
    .unwrap()
}

/// The convolution template's pixel-vector tile (`conv_vector=pixels`, the default of a
/// short reduction over an unpadded NCHW input): a 1×1 convolution with bias and ReLU, 20
/// channels in 8-channel tiles (the last one's rows past the channels not stored), runs of
/// 36 pixels in 32-pixel tiles (the second tile's vectors moved back to end at the run's
/// end, stored from their first new lane).
#[test]
fn generated_c_conv_pixel_vectors() {
    let kernel = conv_1x1_bias_relu();
    let shapes: [&[usize]; 4] = [&[2, 24, 6, 6], &[20, 24, 1, 1], &[20], &[2, 20, 6, 6]];
    let extents = [2, 20, 6, 6, 24, 1, 1];
    let config = CpuConfig::heuristic(&kernel, &extents, 16);
    let tile = config.conv.clone().unwrap();
    assert!(
        !tile.pixel_vector,
        "36-pixel runs: the default keeps channel vectors"
    );
    let config = CpuConfig {
        vector: 8,
        parallel: true,
        wide_simd: true,
        conv: Some(tensor_dsl::template::cpu_conv::ConvTile::pixel_vectors(32)),
        ..config
    };
    config.validate(&kernel).unwrap();
    let code = tensor_dsl::codegen::c::generate(&kernel, &extents, &shapes, &config);
    assert!(code.contains("td_store16_from"));
    insta::assert_snapshot!("c_conv_pixel_vectors", code);
}

/// AVX2's pixel-vector tile over the fused copy, aligned to the output at run time: the 1×1
/// convolution with bias and ReLU over 8×8 planes (runs of 64 pixels, which every channel
/// starts the same distance past a line), 6 × 16 tiles. Each run's tiles start `sh` pixels
/// before it (`sh`: the output's offset past a line, read from its pointer); a tile across
/// the run's start or end copies zeros outside the run and stores lane by lane; one past
/// it returns at once.
#[test]
fn generated_c_conv_pixel_vectors_aligned() {
    let kernel = conv_1x1_bias_relu();
    let shapes: [&[usize]; 4] = [&[1, 24, 8, 8], &[20, 24, 1, 1], &[20], &[1, 20, 8, 8]];
    let extents = [1, 20, 8, 8, 24, 1, 1];
    let config = CpuConfig {
        vector: 6,
        parallel: true,
        vector_code: 8,
        wide_simd: false,
        conv: Some(tensor_dsl::template::cpu_conv::ConvTile::pixel_vectors(16)),
        ..CpuConfig::heuristic(&kernel, &extents, 8)
    };
    config.validate(&kernel).unwrap();
    let code = tensor_dsl::codegen::c::generate(&kernel, &extents, &shapes, &config);
    assert!(code.contains("const long sh = "));
    insta::assert_snapshot!("c_conv_pixel_vectors_aligned", code);
}

/// A padded 3×3 convolution, 64 → 64 channels over 28×28: the kernel, its extents and its
/// tensors' shapes.
fn padded_conv_3x3() -> (tensor_dsl::ir::Kernel, [usize; 7], [&'static [usize]; 3]) {
    let kernel = tensor_dsl::ir::parse_text(
        "conv",
        "y[[n, f, p, q]] += x[[n, c, p + r - 1, q + s - 1]] * w[[f, c, r, s]]",
        None,
    )
    .unwrap();
    let shapes: [&'static [usize]; 3] = [&[1, 64, 28, 28], &[64, 64, 3, 3], &[1, 64, 28, 28]];
    (kernel, [1, 64, 28, 28, 64, 3, 3], shapes)
}

/// A convolution tile's accumulators are vectors of the target's width: 8 lanes (two `ymm`
/// per 16 channels) for AVX2, 16 for AVX-512. (GCC splits a 16-lane vector through memory
/// on AVX2: a 1×1 convolution's default ran at 12 GFLOPS on two Zen 3 cores, 104 after.)
#[test]
fn convolution_tiles_use_the_targets_vectors() {
    let (kernel, extents, shapes) = padded_conv_3x3();
    for (lanes, own, other) in [
        (8, "td_f32x8 c0_0", "td_f32x16"),
        (16, "td_f32x16 c0_0", "td_f32x8 "),
    ] {
        let config = CpuConfig::heuristic(&kernel, &extents, lanes);
        assert_eq!(config.vector_code, lanes);
        let code = tensor_dsl::codegen::c::generate(&kernel, &extents, &shapes, &config);
        assert!(code.contains(own), "{lanes} lanes: {own}");
        assert!(!code.contains(other), "{lanes} lanes: {other}");
    }
}

/// AVX2's channel-tile stores: the default 16×5 tile of a padded 3×3 convolution with 8
/// lanes (in reduction blocks) transposes each 8-channel block of its accumulators in
/// registers (pixels padded to 8 with zeros) and stores each channel's 5 pixels with
/// `td_store8` (four lanes, then one), where the tile's pixels lie in one run of the
/// output; elsewhere lane by lane.
#[test]
fn generated_c_conv_vector_stores_8_lanes() {
    let (kernel, extents, shapes) = padded_conv_3x3();
    let mut config = CpuConfig::heuristic(&kernel, &extents, 8);
    config.parallel = false;
    let tile = config.conv.clone().unwrap();
    assert!(tile.vector_store && !tile.pixel_vector, "{tile:?}");
    assert_eq!((config.vector, tile.pixels), (16, 5));
    let code = tensor_dsl::codegen::c::generate(&kernel, &extents, &shapes, &config);
    assert!(code.contains("static inline void td_store8("), "{code}");
    assert!(code.contains("td_store8(&out["), "{code}");
    insta::assert_snapshot!("c_conv_vector_stores_8_lanes", code);
}

/// A 1×1 convolution with bias and ReLU (70 input channels, 20 output channels over 5×7,
/// 8 lanes) in 16×6 channel tiles with reduction blocks of 32, channel tiles outermost, in
/// pixel blocks of `block_tiles` tiles (0: all of them at once): its generated C.
fn reduction_blocks_code(block_tiles: usize) -> String {
    let kernel = conv_1x1_bias_relu();
    let extents = [1, 20, 5, 7, 70, 1, 1];
    let shapes: [&[usize]; 4] = [&[1, 70, 5, 7], &[20, 70, 1, 1], &[20], &[1, 20, 5, 7]];
    let default = CpuConfig::heuristic(&kernel, &extents, 8);
    let config = CpuConfig {
        vector: 16,
        k_block: 32,
        parallel: true,
        conv: Some(tensor_dsl::template::cpu_conv::ConvTile {
            pixels: 6,
            pixel_vector: false,
            pixels_outer: false,
            vector_store: false,
            transpose: false,
            pad: true,
            block_tiles,
        }),
        ..default
    };
    config.validate(&kernel).unwrap();
    tensor_dsl::codegen::c::generate(&kernel, &extents, &shapes, &config)
}

/// The convolution template's reduction blocks (`conv_kblock`, AVX2's default where a
/// channel tile's weight panel fills L1): a 1×1 convolution with bias and ReLU, 70 input
/// channels in blocks of 32 (the last one 6), 20 output channels (a partial 16-channel
/// tile) over 5×7, 8 lanes. Each channel tile (shared out among the threads) runs every
/// block through all its pixel tiles; a tile keeps its partial sums in `part` between
/// blocks and stores (the epilogue fused) after the last.
#[test]
fn generated_c_conv_reduction_blocks() {
    let code = reduction_blocks_code(0);
    assert!(code.contains("if (c1 < 70)"), "{code}");
    insta::assert_snapshot!("c_conv_reduction_blocks", code);
}

/// [`generated_c_conv_reduction_blocks`] in pixel blocks of 2 tiles (`block_tiles`): the
/// 35 pixels' 6 tiles in 3 blocks, the threads sharing out channel tiles and pixel blocks
/// (each packs a channel tile's panel when it changes), every reduction block through one
/// pixel block's tiles before the next, `part` holding that block's partial sums.
#[test]
fn generated_c_conv_reduction_blocks_in_pixel_blocks() {
    let code = reduction_blocks_code(2);
    assert!(code.contains("(p0 - b0) / 6 * 96"), "{code}");
    insta::assert_snapshot!("c_conv_reduction_blocks_in_pixel_blocks", code);
}

/// The generated C of AVX2's default for a strided 1×1 convolution (19 → 37 channels over
/// 10×12, stride 2), after `edit` (which may check or change the config).
fn fused_copy_code(edit: impl FnOnce(&mut CpuConfig)) -> String {
    let kernel = tensor_dsl::ir::parse_text(
        "conv",
        "y[[n, f, p, q]] += x[[n, c, 2 * p + r, 2 * q + s]] * w[[f, c, r, s]]",
        None,
    )
    .unwrap();
    let extents = [1, 37, 5, 6, 19, 1, 1];
    let shapes: [&[usize]; 3] = [&[1, 19, 10, 12], &[37, 19, 1, 1], &[1, 37, 5, 6]];
    let mut config = CpuConfig::heuristic(&kernel, &extents, 8);
    edit(&mut config);
    tensor_dsl::codegen::c::generate(&kernel, &extents, &shapes, &config)
}

/// AVX2's default for a strided 1×1 convolution (19 → 37 channels over 10×12, stride 2):
/// 16×6 channel tiles over the fused copy. Each thread gathers a pixel tile's 6 pixels of
/// every input channel side by side (`td_conv_xtile`: each tile lies in one row of 6, so
/// along it at the input's step of 2, fetching the next tile's lines; a tile across rows
/// would take each pixel at its own offset) and runs every channel tile (the last one
/// partial) on them, broadcasting `xt[xr + m]`.
#[test]
fn generated_c_conv_channel_tiles_fused_copy() {
    let code = fused_copy_code(|config| {
        let tile = config.conv.clone().unwrap();
        assert!(!tile.pixel_vector && config.k_block == 0, "{config:?}");
    });
    assert!(code.contains("td_conv_xtile(t0, t1, xt, t);"), "{code}");
    assert!(code.contains("const float x_5 = xt[xr + 5];"), "{code}");
    assert!(code.contains("if (i_p_5 == i_p_0) {"), "{code}");
    assert!(
        code.contains("xt[cp * 6 + m] = t0[xs_0 + cp * 120 + 2 * m];"),
        "{code}"
    );
    insta::assert_snapshot!("c_conv_channel_tiles_fused_copy", code);
}

/// [`generated_c_conv_channel_tiles_fused_copy`] with channel tiles outermost: every pixel
/// tile is copied first into one shared copy (`xt + t * 114`: 19 channels × 6 pixels per
/// tile), then each channel tile walks every pixel tile on it.
#[test]
fn generated_c_conv_channel_tiles_whole_copy() {
    let code = fused_copy_code(|config| config.conv.as_mut().unwrap().pixels_outer = false);
    assert!(
        code.contains("float *xt = (float *)td_scratch(1, sizeof(float) * 5 * 19 * 6);"),
        "{code}"
    );
    assert!(
        code.contains("td_conv_xtile(t0, t1, xt + t * 114, t);"),
        "{code}"
    );
    let channels = code.find("for (long f0 = 0; f0 < 37;").unwrap();
    let pixels = code.find("for (long t = 0; t < 5; t += 1)\n        td_conv_tile(");
    assert!(pixels.is_some_and(|p| p > channels), "{code}");
    insta::assert_snapshot!("c_conv_channel_tiles_whole_copy", code);
}

/// Pixel tiles outermost in pixel blocks ([`ConvTile::block_tiles`]) without reduction
/// blocks: on prepacked weights each block of 3 pixel tiles walks the channel tiles
/// outermost.
#[test]
fn pixel_blocks_walk_channel_tiles_within() {
    let kernel = tensor_dsl::ir::parse_text(
        "conv",
        "y[[n, f, p, q]] += x[[n, c, 2 * p + r - 3, 2 * q + s - 3]] * w[[f, c, r, s]]",
        None,
    )
    .unwrap();
    let extents = [1, 24, 9, 9, 3, 7, 7];
    let shapes: [&[usize]; 3] = [&[1, 3, 18, 18], &[24, 3, 7, 7], &[1, 24, 9, 9]];
    let mut config = CpuConfig::heuristic(&kernel, &extents, 8);
    config.k_block = 0;
    let tile = config.conv.as_mut().unwrap();
    tile.pixel_vector = false;
    tile.pixels_outer = true;
    tile.block_tiles = 3;
    let span = 3 * tile.pixels;
    let code = tensor_dsl::codegen::c::generate(&kernel, &extents, &shapes, &config);
    let blocks = format!("for (long b0 = 0; b0 < 81; b0 += {span})");
    let within = format!("for (long p0 = b0; p0 < (b0 + {span} < 81 ? b0 + {span} : 81);");
    let (b, p) = (code.find(&blocks), code.find(&within));
    assert!(b.is_some() && p.is_some_and(|p| Some(p) > b), "{code}");
    assert!(
        code.contains("pixel tiles in blocks of 3, channel tiles within"),
        "{code}"
    );
}

/// A 3×3 window's rows are unrolled around its unrolled columns only where the registers
/// hold the accumulators, two taps' operand vectors and a broadcast: AVX-512's 32 × 14
/// channel tile (28 accumulators) rolls them (GCC spilled accumulators in the unrolled
/// window), its 32 × 7 tile (14) and AVX2's 16 × 5 one (10) unroll them.
#[test]
fn window_rows_unrolled_where_the_registers_hold_two_taps() {
    let kernel = tensor_dsl::ir::parse_text(
        "conv",
        "y[[n, f, p, q]] += x[[n, c, p + r - 1, q + s - 1]] * w[[f, c, r, s]]",
        None,
    )
    .unwrap();
    let extents = [1, 64, 28, 28, 32, 3, 3];
    let shapes: [&[usize]; 3] = [&[1, 32, 28, 28], &[64, 32, 3, 3], &[1, 64, 28, 28]];
    let base = CpuConfig::heuristic(&kernel, &extents, 16);
    for (vector, pixels, lanes, unrolled) in [(32, 14, 16, 1), (32, 7, 16, 2), (16, 5, 8, 2)] {
        let mut config = CpuConfig {
            vector,
            vector_code: lanes,
            wide_simd: lanes >= 16,
            k_block: 0,
            ..base.clone()
        };
        let tile = config.conv.as_mut().unwrap();
        tile.pixels = pixels;
        tile.pixel_vector = false;
        tile.pixels_outer = false;
        tile.block_tiles = 0;
        let code = tensor_dsl::codegen::c::generate(&kernel, &extents, &shapes, &config);
        assert_eq!(
            code.matches("#pragma GCC unroll 3").count(),
            unrolled,
            "{vector}×{pixels}, {lanes} lanes:\n{code}"
        );
    }
}
