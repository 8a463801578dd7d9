//! Lowers a convolution schedule (a [`CpuConfig`] with a [`ConvTile`]) to a [`Nest`]: the
//! loop nest described in [`crate::template::cpu_conv`].
//!
//! In `bf16` pairs ([`pairs`]) the pair index's loop runs over pairs of input channels; the
//! scratch copy has that axis halved and a trailing axis of 2 (an odd last channel pairs
//! with zero), the panels hold `vector` pairs of raw `bf16` per point, and the hot loop is
//! `td_dot2(acc, td_pair(&xp[..]), td_pairs(&wp[..]))` ([`super::cpu_pairs::PRELUDE`]); a
//! pixel-vector tile in pairs loads 16 pixels' pairs as one vector (they lie one after
//! another in the copy) and broadcasts each channel's weight pair. The copy stores each
//! pair as one 32-bit value, which GCC vectorizes. Why: widened to `f32`, a `bf16`
//! convolution ran at the `f32` one's speed at best; in pairs ResNet-50's 3×3 layers over
//! 28×28 and 7×7 ran 1.9–2.0× their `f32` default (generated C timed side by side, two Zen 4
//! cores: 404–437 against 194–228 GFLOPS, 527–551 against 263–272 nominal).
//!
//! Where the input is read at each point only through the pair index (a 1×1, stride-1,
//! unpadded convolution), pixel pairs copy no whole input: each thread copies one pixel
//! tile's pairs into a small buffer (`td_conv_xtile`) and runs every channel tile on it,
//! pixel tiles outermost, on panels prepacked or packed first into scratch
//! (`td_conv_tiles`). Why: the whole copy took a quarter of a 1×1 convolution over 128
//! channels of 136×136 (YOLO9000's Y3: 297–311 GFLOPS, 408–426 with the copy left out); per
//! tile, Y3 ran at 302–356 and R1 of ResNet-50 at 364–406 against 341 at best before (in the
//! bench, best rounds: R1 74.8 → 64.8 µs, Y3 953 → 766 µs). Channel tiles in pairs keep the
//! whole copy: gathering per pixel tile measured slower on the strided 1×1 layers (R4, R7,
//! R10 of ResNet-50, 5–9% in the bench, Zen 4).
//!
//! In `f32`, channel tiles of a 1×1 convolution of any stride gather each pixel tile's
//! pixels side by side per input channel (`xt[c][m]`, `td_conv_xtile`, each pixel at its own
//! offset) and run every channel tile on them, pixel tiles outermost: read in place (or
//! from the compact copy of a strided input) a tile's broadcasts walk one cache line per
//! input channel for 4 bytes. On two AVX2 Zen 3 cores, prepacked weights, side by side:
//! R10 1.17–1.20×, R4 1.10–1.18×, R12 1.06–1.17× (`bench/results/2026-11-28-zen3-cpu-panel/`).
//! A tile within one row is copied along it, vectorized (`Conv::channel_xtile_func`).
//!
//! A pixel-vector tile over a strided window (`S·q + s`, [`ConvShape::window_axis`]) reads
//! a window-expanded copy: the input axis becomes two, the tap `s` and the pixel `q`, each
//! tap's row holding `x[S·q + s]` over `q` (`R/S` times the input along that axis), so 16
//! consecutive output pixels are one vector load. Interleaved against the channel-vector
//! default (two Zen 4 cores): ResNet-50's 7×7 stride-2 stem with 16 × 16 pixel tiles at
//! 1.04 of it (168 against 162 GFLOPS, medians), a 3×3 stride-2 layer over 3 channels
//! level (149 against 148); the default keeps channel vectors there and the tuner has both.
//!
//! ```
//! use tensor_dsl::{ir::parse_text, lower, template::cpu::CpuConfig};
//! let k = parse_text("conv",
//!     "y[[n, f, p, q]] += x[[n, c, p + r - 1, q + s - 1]] * w[[f, c, r, s]]", None).unwrap();
//! let e = [1, 40, 9, 9, 3, 3, 3];
//! let shapes: [&[usize]; 3] = [&[1, 3, 9, 9], &[40, 3, 3, 3], &[1, 40, 9, 9]];
//! let cfg = CpuConfig::heuristic(&k, &e, 16);
//! let nest = lower::cpu::lower(&k, &e, &shapes, &cfg).unwrap();
//! // The weights are packed per thread (27 points x 32 channels), the input padded once
//! // (9 x 9 to 11 x 11).
//! let panels: Vec<Vec<usize>> = nest.scoped(lower::Scope::Panel).map(|b| b.dims.clone()).collect();
//! assert_eq!(panels, vec![vec![27, 32], vec![1, 3, 11, 11]]);
//! ```

use super::{
    band, AssignOp, BufId, Buffer, Func, IntType, Layout, Loop, LoopKind, Nest, Param, Prepack,
    Scope, Step, Stmt, Target, Ty, Value, COMPUTE,
};
use crate::codegen::{index_name, load_as_f32, strides};
use crate::ir::{DType, Kernel};
use crate::lower::Binding;
use crate::template::cpu::CpuConfig;
use crate::template::cpu_conv::{contiguous_run, pixel_lanes, ConvShape, ConvTile, TRANSPOSE};

/// The masked vector store the transposed output path calls ([`crate::codegen::c`] defines
/// it where a nest calls it).
pub const STORE_LANES: &str = "td_store16";

/// Its 8-lane form, for targets whose vectors are 8 floats (AVX2): a whole vector, or four
/// lanes and then one by one (no masked store: AVX2's `vmaskmovps` store made the stem R0's
/// tile slower than the scalar stores it replaced, 91–96 against 112–117 GFLOPS, where four
/// lanes and one ran at 135).
pub const STORE_LANES8: &str = "td_store8";

/// The masked vector store of a run's last pixel vector ([`crate::codegen::c`] defines it
/// where a nest calls it): the lanes from a given one on.
pub const STORE_TAIL: &str = "td_store16_from";

/// [`STORE_TAIL`] for vectors of 8 pixels (AVX2's).
pub const STORE_TAIL8: &str = "td_store8_from";

/// Keeps a vector in a register ([`crate::codegen::c`] defines it where a nest calls it):
/// a pixel vector loaded once and used by several FMAs, which GCC 12 otherwise loads again
/// as a memory operand of each (a 3×3 convolution's 4-channel × 64-pixel tile ran at 108
/// GFLOPS that way, 235 held; one core of the development machine).
pub const IN_REGISTER: &str = "TD_IN_REGISTER";

/// [`IN_REGISTER`] for vectors of 8 floats (a `ymm` register, AVX and up).
pub const IN_REGISTER8: &str = "TD_IN_REGISTER8";

/// Makes an integer variable opaque to the optimizer ([`crate::codegen::c`] defines it
/// where a nest calls it): an empty `asm` that may change it.
pub const OPAQUE: &str = "TD_OPAQUE";

/// Name of the tile function.
pub const TILE: &str = "td_conv_tile";

/// Name of the function that packs one channel tile's weights.
pub const PACK: &str = "td_conv_pack";

/// Name of the function that packs every channel tile's weights ([`Prepack::fill`]).
pub const PREPACK: &str = "td_conv_prepack";

/// Name of the function that runs the convolution on prepacked weights or packs them.
pub const RUN: &str = "td_conv_run";

/// Name of the function that copies one pixel tile's input (the fused copy).
pub const XTILE: &str = "td_conv_xtile";

/// Name of the function that runs the tiles of the fused copy on given panels.
pub const TILES: &str = "td_conv_tiles";

/// Longest innermost reduction loop of the tile that is unrolled: a 7-step loop around the
/// register tile (the 7×7 window of a 3-channel convolution) ran a few percent faster
/// unrolled (GCC 12, timed single-threaded).
pub const UNROLL_SHORT: usize = 8;

/// Most steps of the window's rows and columns together for the rows' loop to be unrolled
/// too (`Conv::unrolled_window_row`): a 3×3 window.
pub const UNROLL_WINDOW: usize = 9;

/// Bytes of a cache line: what fused pixel-vector tiles align their stores to at run time
/// and the fused copy prefetches in.
pub const LINE_BYTES: usize = 64;

/// Bytes of the weight panel filled per slice of the first reduction index.
pub const PACK_SLICE_BYTES: usize = 16 << 10;

fn int(v: usize) -> String {
    v.to_string()
}

fn long(v: i64) -> String {
    v.to_string()
}

/// `for (long var = 0; var < end; ++var)`.
fn for_each(var: &str, end: usize, kind: LoopKind, layout: Layout, body: Vec<Stmt>) -> Stmt {
    Stmt::Loop(Loop {
        var: var.into(),
        ty: IntType::Long,
        start: "0".into(),
        end: int(end),
        step: Step::Inc,
        trip: end,
        kind,
        index: None,
        layout,
        body,
    })
}

fn let_long(name: &str, value: String) -> Stmt {
    Stmt::Let {
        ty: Ty::Int(IntType::Long),
        konst: true,
        defs: vec![(name.into(), Value::Code(value))],
    }
}

/// `sum(k * name)` over non-zero `k`, `0` when empty.
fn linear(terms: &[(i64, String)]) -> String {
    let parts: Vec<String> = terms
        .iter()
        .filter(|(k, _)| *k != 0)
        .map(|(k, n)| {
            if *k == 1 {
                n.clone()
            } else {
                format!("{k} * {n}")
            }
        })
        .collect();
    if parts.is_empty() {
        "0".into()
    } else {
        parts.join(" + ")
    }
}

/// How the hot loop reads the affine input.
struct XRead {
    /// The buffer read (the padded scratch or the input itself).
    buf: BufId,
    /// Per kernel index: its coefficient in the flat element offset.
    coef: Vec<i64>,
    /// The constant part of the flat offset.
    base: i64,
    /// Whether reads are guarded (the input in place, not padded).
    guarded: bool,
}

/// Whether `config` computes the convolution `kernel` in `bf16` pairs (two input channels
/// per `vdpbf16ps`, [`super::cpu_pairs::PRELUDE`]): it asks for them and the kernel has a
/// pair index ([`ConvShape::pair_index`]).
pub fn pairs(kernel: &Kernel, config: &CpuConfig) -> bool {
    config.pairs
        && config.conv.is_some()
        && ConvShape::of(kernel).is_some_and(|s| s.pair_index(kernel).is_some())
}

/// Lowers `config` (whose `conv` is `tile`) for the convolution `kernel`.
pub fn lower<'a>(
    kernel: &'a Kernel,
    extents: &[usize],
    shapes: &'a [&'a [usize]],
    config: &CpuConfig,
    tile: &ConvTile,
) -> Result<Nest<'a>, String> {
    crate::template::cpu_conv::validate(kernel, config, tile)?;
    if extents.len() != kernel.indices.len() || extents.contains(&0) {
        return Err(format!(
            "{} positive extents are needed, got {extents:?}",
            kernel.indices.len()
        ));
    }
    super::check_shapes(kernel, shapes)?;
    let shape = ConvShape::of(kernel).ok_or("not a convolution")?;
    let (v, mr) = (config.vector, tile.pixels);
    let names: Vec<String> = (0..kernel.indices.len())
        .map(|i| index_name(kernel, i))
        .collect();
    let mut buffers = super::param_buffers(kernel, shapes);
    let mut push = |b: Buffer| {
        buffers.push(b);
        BufId(buffers.len() - 1)
    };
    let acc = push(Buffer {
        name: "acc".into(),
        scope: Scope::Register,
        dtype: COMPUTE,
        // A pixel-vector tile holds channel rows of pixels.
        dims: if tile.pixel_vector {
            vec![v, mr]
        } else {
            vec![mr, v]
        },
        param: None,
        align: None,
    });
    // `bf16` pairs ([`CpuConfig::pairs`]): the panels hold raw `bf16`, each point of the
    // pair index's halved extent a row of `vector` pairs.
    let pair = pairs(kernel, config)
        .then(|| shape.pair_index(kernel))
        .flatten();
    let pair_extents: Vec<usize> = extents
        .iter()
        .enumerate()
        .map(|(i, &e)| if Some(i) == pair { e.div_ceil(2) } else { e })
        .collect();
    let (panel_dtype, lane_elems) = if pair.is_some() {
        (DType::BF16, 2)
    } else {
        (COMPUTE, 1)
    };
    let points = shape.points(&pair_extents);
    let wp = push(Buffer {
        name: "wp".into(),
        scope: Scope::Panel,
        dtype: panel_dtype,
        dims: vec![points, v * lane_elems],
        param: None,
        align: None,
    });

    // The weights of every channel tile, packed ahead of the call ([`Prepack`]).
    let tiles = extents[shape.f].div_ceil(v);
    let wall = push(Buffer {
        name: "wall".into(),
        scope: Scope::Global,
        dtype: panel_dtype,
        dims: vec![tiles * points, v * lane_elems],
        param: None,
        align: None,
    });

    // The affine input: the range each of its coordinates takes, and the scratch copy.
    let xshape = shapes[shape.x.tensor];
    let ranges: Vec<(i64, i64)> = shape.x.dims.iter().map(|d| d.range(extents)).collect();
    let outside = ranges
        .iter()
        .zip(xshape)
        .any(|(&(lo, hi), &n)| lo < 0 || hi >= n as i64);
    let xdtype = kernel.params[shape.x.tensor].dtype;
    // The scratch copy keeps only the coordinates read along an axis that a pixel index
    // alone strides by more than 1 (a 1×1 convolution of stride 2): read in place, each
    // pixel's input of a 14×14 plane sat on its own cache line, and the whole input (4×
    // what is read) passed through the cache once per channel tile.
    let steps = shape.read_steps(extents);
    let compact = steps.iter().any(|&k| k > 1);
    // A pixel-vector tile over a strided window (`S·q + s`) reads a window-expanded copy:
    // per tap `s`, the row `x[S·q + s]` over `q`, so its pixels are one vector load.
    let window = (tile.pixel_vector && tile.pad && pair.is_none())
        .then(|| shape.window_axis(extents))
        .flatten();
    // A pixel-vector tile reads the input in the scratch copy's layout: in place only where
    // that is the input's own.
    let own_layout = !compact
        && window.is_none()
        && ranges
            .iter()
            .zip(xshape)
            .all(|(&(lo, hi), &n)| lo == 0 && hi + 1 == n as i64);
    let scratch = tile.pad
        && (outside
            || xdtype != DType::F32
            || compact
            || window.is_some()
            || (tile.pixel_vector && !own_layout));
    if pair.is_some() && !scratch {
        return Err("bf16 pairs read the padded copy of the input".into());
    }
    // The fused copy: a pixel-vector tile over an input in its own layout, read at each
    // point only through one reduction index (a 1×1, stride-1, unpadded convolution): no
    // copy of the whole input; each pixel tile copies its own pixels of every input
    // channel (in `bf16` pairs: its pairs) into a small per-thread buffer, which every
    // channel tile then reads ([`Conv::xtile_func`]). In `f32`, where more than one
    // channel tile reads it. Why: read in place, a tile's loads walk rows a plane apart
    // (12.5 KB in a 56×56 plane), one cache line and one page each; generated C side by
    // side on the Zen 3 VM, two threads, medians: R3 of the bench (64 → 256 channels over
    // 56×56) 121–126 GFLOPS against 102–112, R1 107–116 against 99–109, R6 126–127 against
    // 120–123 (`bench/results/2026-11-27-zen3-cpu-xcopy/`).
    let copy_index = pair.or_else(|| {
        let wide: Vec<usize> = shape
            .reduction
            .iter()
            .copied()
            .filter(|&r| extents[r] > 1)
            .collect();
        match wide[..] {
            [r] => Some(r),
            [] => shape.reduction.first().copied(),
            _ => None,
        }
    });
    // A channel-vector tile of a 1×1 convolution (any stride) with more than one channel
    // tile takes the fused copy too, each pixel tile's pixels gathered per input channel
    // side by side (`xt[c][pixel]`): read in place or in the strided copy, a tile's
    // broadcasts walk one row a plane apart per channel, one cache line each for a few
    // bytes. Generated C, prepacked weights, two AVX2 cores, side by side, two runs
    // (medians, GFLOPS; `bench/results/2026-11-28-zen3-cpu-panel/`): ResNet-50's R10 99 /
    // 100 → 118 / 116 (oneDNN 109 / 108), R4 122 / 88 → 134 / 104 (134 / 108), R7 123 /
    // 124 → 124 / 130 (134 / 132), R12 (before in reduction blocks) 103 / 98 → 110 / 115
    // (110 / 121); R9 level, 139 / 134 → 134 / 138 (143 / 158).
    let one_index =
        copy_index.is_some_and(|c| shape.reduction.iter().all(|&r| r == c || extents[r] == 1));
    let fused = if tile.pixel_vector {
        own_layout
            && one_index
            && (pair.is_some() || (xdtype == DType::F32 && extents[shape.f] > v))
    } else {
        one_index
            && pair.is_none()
            && !outside
            && xdtype == DType::F32
            && extents[shape.f] > v
            && config.k_block == 0
    };
    let scratch = scratch && !fused;
    let steps = if scratch { steps } else { vec![1; steps.len()] };
    // The axis of the input that the pair index reads: in the scratch copy it holds pairs,
    // and a trailing axis of 2 the two channels of each.
    let pair_axis = pair.and_then(|c| shape.x.dims.iter().position(|d| d.as_var() == Some(c)));
    // The scratch copy's axes: per axis of `x`, its coordinates read (every `k`-th); the
    // window axis as two, the tap `s` and the pixel `q` (coordinate `lo + s + S·q`). Each
    // as (axis of `x`, multiplier of its coordinate).
    let mut scratch_dims = Vec::new();
    let mut layout: CopyAxes = Vec::new();
    for (d, (&(lo, hi), &k)) in ranges.iter().zip(&steps).enumerate() {
        match window {
            Some(w) if w.axis == d => {
                scratch_dims.extend([extents[w.window], extents[w.pixel]]);
                layout.extend([(d, 1), (d, w.stride)]);
            }
            _ => {
                let n = usize::try_from((hi - lo) / k + 1).unwrap_or(1);
                scratch_dims.push(if Some(d) == pair_axis {
                    n.div_ceil(2)
                } else {
                    n
                });
                layout.push((d, k));
            }
        }
    }
    let xp = scratch.then(|| {
        let mut dims = scratch_dims.clone();
        if pair.is_some() {
            dims.push(2);
        }
        push(Buffer {
            name: "xp".into(),
            scope: Scope::Panel,
            dtype: panel_dtype,
            dims,
            param: None,
            align: None,
        })
    });
    // The fused copy's buffers: a pixel tile's pixels of every input channel (in pairs:
    // every pair of channels by the tile's pixels), and for calls without prepacked
    // weights, every channel tile's panel. With channel tiles outermost ([`whole_copy`]),
    // one copy of every pixel tile's pixels, which the threads share.
    let copy_index = copy_index.unwrap_or(0);
    let xt = fused.then(|| {
        push(Buffer {
            name: "xt".into(),
            scope: Scope::Panel,
            dtype: panel_dtype,
            dims: match pair {
                Some(c) => vec![extents[c].div_ceil(2), tile.pixels, 2],
                None if whole_copy(tile) => vec![
                    shape.pixel_count(extents).div_ceil(mr),
                    extents[copy_index],
                    tile.pixels,
                ],
                None => vec![extents[copy_index], tile.pixels],
            },
            param: None,
            align: None,
        })
    });
    let walls = fused.then(|| {
        push(Buffer {
            name: "walls".into(),
            scope: Scope::Panel,
            dtype: panel_dtype,
            dims: vec![tiles * points, v * lane_elems],
            param: None,
            align: None,
        })
    });
    let xread = {
        let (buf, dims, lo, axes): (BufId, Vec<usize>, Vec<i64>, CopyAxes) = match xp {
            Some(xp) => (
                xp,
                scratch_dims.clone(),
                ranges.iter().map(|r| r.0).collect(),
                layout.clone(),
            ),
            None => (
                BufId(shape.x.tensor),
                xshape.to_vec(),
                vec![0; xshape.len()],
                (0..xshape.len()).map(|d| (d, 1)).collect(),
            ),
        };
        let st = strides(&dims);
        let mut coef = vec![0i64; kernel.indices.len()];
        let mut base = 0i64;
        for (e, &(d, k)) in axes.iter().enumerate() {
            let (map, s) = (&shape.x.dims[d], st[e] as i64);
            match window {
                // The window axis: the tap along one axis of the copy, the pixel along the
                // other (the coordinate's offset is the range's low end).
                Some(w) if w.axis == d => {
                    let i = if k == 1 { w.window } else { w.pixel };
                    coef[i] += s;
                }
                _ => {
                    base += s * (map.offset - lo[d]) / k;
                    for &(i, c) in &map.terms {
                        coef[i] += s * c / k;
                    }
                }
            }
        }
        // In pairs, offsets count `bf16` elements: two per pair (the fused copy reads the
        // input itself, in its own elements).
        let k = if fused { 1 } else { lane_elems as i64 };
        XRead {
            buf,
            coef: coef.iter().map(|c| c * k).collect(),
            base: base * k,
            guarded: !tile.pad && outside,
        }
    };

    // Reduction blocks: per channel tile, every pixel tile runs one block of input
    // channels before the next, keeping its partial sums in `part` between blocks.
    let kblock = (config.k_block > 0 && !tile.pixel_vector && pair.is_none())
        .then(|| shape.block_index())
        .flatten()
        .filter(|&r| config.k_block < extents[r] && v.is_multiple_of(8))
        .map(|r| (r, config.k_block));
    // Partial sums of the pixel tiles one reduction block walks: every tile, or a pixel
    // block's ([`ConvTile::block_tiles`]).
    let part_tiles = pixel_block(tile, shape.pixel_count(extents).div_ceil(mr))
        .unwrap_or_else(|| shape.pixel_count(extents).div_ceil(mr));
    let part = kblock.map(|_| {
        push(Buffer {
            name: "part".into(),
            scope: Scope::Panel,
            dtype: COMPUTE,
            dims: vec![part_tiles * mr * v],
            param: None,
            align: None,
        })
    });
    let transpose = if pair.is_none() && tile.transpose && v.is_multiple_of(TRANSPOSE) {
        channel_stride(kernel, extents, shapes, &shape)
    } else {
        None
    };
    let mut l = Conv {
        kernel,
        extents,
        shapes,
        config,
        tile,
        shape,
        names,
        acc,
        wp,
        wall,
        xp,
        xread,
        ranges: ranges.clone(),
        layout,
        v,
        mr,
        transpose,
        run: 0,
        shift: None,
        pair,
        pair_axis,
        xt,
        copy_index,
        walls,
        kblock,
        part,
    };
    if tile.pixel_vector {
        // (In the pairs copy, runs of pairs: two elements a pixel.)
        let k = if l.xt.is_some() {
            1
        } else {
            l.lane_elems() as i64
        };
        let x = contiguous_run(&l.shape.pixels, extents, |t| l.xread.coef[t] / k);
        l.run = x.min(l.dense_run());
        let lanes = pixel_lanes(config);
        if l.run < lanes {
            return Err(format!(
                "a pixel-vector tile needs runs of at least {lanes} pixels, these are {}",
                l.run
            ));
        }
        l.shift = l.line_shift();
    }
    let mut helpers = vec![
        if tile.pixel_vector {
            l.pixel_tile_func(&buffers)
        } else {
            l.tile_func(&buffers)
        },
        l.pack_func(),
        l.prepack_func(&buffers),
    ];
    if let (Some(xt), Some(walls)) = (l.xt, l.walls) {
        helpers.push(l.xtile_func(&buffers, xt));
        helpers.push(l.fused_tiles_func(&buffers, xt));
        helpers.push(l.fused_run_func(&buffers, walls));
    } else {
        helpers.push(l.run_func(&buffers, &ranges));
    }
    let (entry, prepack) = l.entries(&buffers);
    Ok(Nest {
        kernel,
        shapes,
        domain: extents.to_vec(),
        buffers,
        helpers,
        entry,
        launch: None,
        globals: Vec::new(),
        prepack: Some(prepack),
    })
}

/// Per axis of a copy of the input: the input axis it walks and the stride between the
/// coordinates it keeps ([`Conv`]'s `layout`).
type CopyAxes = Vec<(usize, i64)>;

/// Whether a channel-vector tile's fused copy ([`Conv::fused_tiles_func`]) holds every
/// pixel tile at once, so that channel tiles can walk outermost (`pixels_outer` false): each
/// channel tile's panel then streams once per call, not once per pixel tile. Why: over
/// 7×7 and 14×14 planes the weights outgrow L2 (2 MB for ResNet-50's R10, 1024 → 512
/// channels), and with pixel tiles outermost every thread streamed all of them from L3
/// for each of its pixel tiles. Two Cascade Lake cores, generated C side by side, every
/// call and every tenth after another library's: R10 1.03–1.39× (oneDNN 0.99–1.2× of it;
/// `bench/results/2026-11-28-cascadelake-cpu-order/`).
fn whole_copy(tile: &ConvTile) -> bool {
    !tile.pixel_vector && !tile.pixels_outer
}

/// Pixel tiles per pixel block ([`ConvTile::block_tiles`]), where it cuts the `tiles` pixel
/// tiles in more than one block.
fn pixel_block(tile: &ConvTile, tiles: usize) -> Option<usize> {
    (tile.block_tiles > 0 && tile.block_tiles < tiles).then_some(tile.block_tiles)
}

/// The weights' element stride between output channels, if they are `f32` and their
/// reduction points lie one after another in memory (`w[f][c][r][s]`: point `(c, r, s)` at
/// offset `f · stride + point`), so that a block of channels by points is a row-major
/// matrix that [`TRANSPOSE`]-square in-register transposes pack.
fn channel_stride(
    kernel: &Kernel,
    extents: &[usize],
    shapes: &[&[usize]],
    shape: &ConvShape,
) -> Option<usize> {
    let w = &shape.w;
    if kernel.params[w.tensor].dtype != DType::F32 {
        return None;
    }
    let st = strides(shapes[w.tensor]);
    let stride_of = |i: usize| {
        w.dims
            .iter()
            .position(|d| d.as_var() == Some(i))
            .map(|d| st[d])
    };
    let mut expect = 1usize;
    for &r in shape.reduction.iter().rev() {
        if stride_of(r)? != expect {
            return None;
        }
        expect *= extents[r];
    }
    stride_of(shape.f)
}

/// Appends to `out` the shuffles that transpose the `t` × `t` block held in the `t`
/// vectors `{input}0 .. {input}{t-1}` (vector `l` = row `l`): `log2(t)` rounds, round `b`
/// swapping bit `b` of the row index with bit `b` of the lane index, each `t` two-vector
/// shuffles named `{tag}{round}_{i}`. Returns the names of the transposed rows.
fn transpose_rounds(
    t: usize,
    input: &str,
    tag: &str,
    out: &mut Vec<Stmt>,
) -> impl Fn(usize) -> String {
    let (mut b, mut round, mut prev) = (t / 2, 0, input.to_string());
    while b >= 1 {
        let name = format!("{tag}{round}_");
        let mask = |hi: bool| {
            let lanes: Vec<String> = (0..t)
                .map(|k| {
                    let lane = match (hi, k & b == 0) {
                        (false, true) => k,
                        (false, false) => t + k - b,
                        (true, true) => k + b,
                        (true, false) => t + k,
                    };
                    lane.to_string()
                })
                .collect();
            format!(
                "(int __attribute__((vector_size({})))){{{}}}",
                4 * t,
                lanes.join(", ")
            )
        };
        out.extend((0..t).map(|i| {
            let (lo, hi) = (i & !b, i | b);
            let code = format!(
                "__builtin_shuffle({prev}{lo}, {prev}{hi}, {})",
                mask(i & b != 0)
            );
            Stmt::Let {
                ty: Ty::Vector(t),
                konst: true,
                defs: vec![(format!("{name}{i}"), Value::Code(code))],
            }
        }));
        prev = name;
        round += 1;
        b /= 2;
    }
    move |i| format!("{prev}{i}")
}

/// The taps a tile skips because they read the input's zero padding (they add nothing):
/// why: on a 3×3 convolution over a 7×7 plane with padding 1, 18% of the taps are padding
/// (oneDNN skips them); with whole-row tiles that skip them, R11 of the bench ran at
/// 295–310 GFLOPS (nominal) single-threaded instead of about 260.
#[derive(Default)]
struct TapSkip {
    /// Definitions of the bounds, in the tile before its reduction loops.
    lets: Vec<Stmt>,
    /// Reduction indices whose loop runs from and to the named bounds: those that move
    /// along an input axis on which the whole tile stands at one coordinate.
    bounds: Vec<(usize, String, String)>,
    /// Per tile pixel: the condition (on the unrolled innermost reduction index) under
    /// which its tap reads inside the input; pixels not listed read inside at every tap.
    pixels: Vec<(usize, String)>,
}

impl TapSkip {
    /// `stmts` (pixel `m`'s FMAs) under its condition, if it has one.
    fn guard(&self, m: usize, stmts: Vec<Stmt>) -> Vec<Stmt> {
        match self.pixels.iter().find(|(p, _)| *p == m) {
            Some((_, cond)) => vec![Stmt::If {
                cond: cond.clone(),
                then: stmts,
                els: None,
                braced: true,
            }],
            None => stmts,
        }
    }
}

struct Conv<'a> {
    kernel: &'a Kernel,
    extents: &'a [usize],
    shapes: &'a [&'a [usize]],
    config: &'a CpuConfig,
    tile: &'a ConvTile,
    shape: ConvShape,
    names: Vec<String>,
    acc: BufId,
    wp: BufId,
    /// The prepacked weights: every channel tile's panel, one after another.
    wall: BufId,
    xp: Option<BufId>,
    xread: XRead,
    /// The range of each coordinate of the affine input (below 0 or past its extent: padding).
    ranges: Vec<(i64, i64)>,
    /// Per axis of the scratch copy: the axis of the input it walks and the stride
    /// between the coordinates it keeps (a window-expanded input axis is two: its tap,
    /// stride 1, and its pixel, stride `S`; see [`ConvShape::window_axis`]).
    layout: CopyAxes,
    v: usize,
    mr: usize,
    /// Transposed packing: the weights' stride between channels (their reduction points
    /// are contiguous), when the tile asks for it and the weights allow it.
    transpose: Option<usize>,
    /// A pixel-vector tile's run: pixels one after another in the input read and the
    /// output (0 for a channel-vector tile).
    run: usize,
    /// Fused pixel-vector tiles aligned to the output at run time: each run's tiles start
    /// `sh` pixels before it, `sh` the output's offset past a boundary of this many
    /// elements (a cache line's where tiles cover whole lines), so that each tile's
    /// stores fill whole lines ([`Conv::line_shift`]).
    shift: Option<usize>,
    /// `bf16` pairs: the reduction index taken two points at a time (its loop runs over
    /// pairs) and the input axis it reads ([`ConvShape::pair_index`]).
    pair: Option<usize>,
    pair_axis: Option<usize>,
    /// The fused copy: the per-thread buffer of one pixel tile's pixels (in pairs: its
    /// pairs), and the scratch for every channel tile's panel on calls without prepacked
    /// weights.
    xt: Option<BufId>,
    /// With the fused copy, the reduction index it copies along (the input channels; the
    /// pair index in pairs).
    copy_index: usize,
    walls: Option<BufId>,
    /// Reduction blocks ([`CpuConfig::k_block`]): the input-channel index cut and the
    /// block, and the per-thread buffer of every pixel tile's partial sums.
    kblock: Option<(usize, usize)>,
    part: Option<BufId>,
}

impl Conv<'_> {
    /// The flat reduction point of the reduction loop variables, in kernel order.
    fn point(&self) -> String {
        let mut s = String::new();
        for (n, &r) in self.shape.reduction.iter().enumerate() {
            s = if n == 0 {
                self.names[r].clone()
            } else {
                format!("({s}) * {} + {}", self.steps_of(r), self.names[r])
            };
        }
        s
    }

    /// Steps of reduction index `r`'s loop: its extent, or with `bf16` pairs for the pair
    /// index, its pairs (an odd last channel pairs with zero).
    fn steps_of(&self, r: usize) -> usize {
        if Some(r) == self.pair {
            self.extents[r].div_ceil(2)
        } else {
            self.extents[r]
        }
    }

    /// Reduction points the panel holds a row for (pairs of the pair index count once).
    fn panel_points(&self) -> usize {
        self.shape
            .reduction
            .iter()
            .map(|&r| self.steps_of(r))
            .product()
    }

    /// Elements of a panel row per channel: 2 for `bf16` pairs, else 1.
    fn lane_elems(&self) -> usize {
        if self.pair.is_some() {
            2
        } else {
            1
        }
    }

    /// Loops over every reduction index (kernel order) around `body`.
    /// The innermost one is unrolled instead when it is short (at most
    /// [`UNROLL_SHORT`] steps, the `s` of a 3×3 or 7×7 window), and the one around it too
    /// where [`Conv::unrolled_window_row`] says so.
    /// Where `body` is vector code (`vector_body`), the innermost loop of more than one step
    /// that is not unrolled whole is unrolled by [`super::cpu::UNROLL_REDUCTION`] when every
    /// loop inside it takes one step (the channels of a 1×1 convolution): the compiler does
    /// not vectorize vector code again, and one tile step per iteration held the FMAs back.
    /// `bounds`: reduction indices whose loop runs over a range computed in the tile
    /// (C names of its start and end), not the whole extent.
    fn reduction_loops(
        &self,
        kind: LoopKind,
        vector_body: bool,
        bounds: &[(usize, String, String)],
        body: Vec<Stmt>,
    ) -> Vec<Stmt> {
        let last = self.shape.reduction.last().copied();
        let row = self.unrolled_window_row();
        let rolled = self
            .shape
            .reduction
            .iter()
            .rev()
            .copied()
            .find(|&r| self.steps_of(r) > 1)
            .filter(|&r| vector_body && !(Some(r) == last && self.unrolled(r)) && Some(r) != row);
        self.shape.reduction.iter().rev().fold(body, |inner, &r| {
            let e = self.steps_of(r);
            let kind = if Some(r) == last && self.unrolled(r) || Some(r) == row {
                LoopKind::Unrolled(e)
            } else if Some(r) == rolled {
                LoopKind::Unrolled(super::cpu::UNROLL_REDUCTION)
            } else {
                kind
            };
            let mut l = for_each(&self.names[r], e, kind, Layout::Braced, inner);
            if let (Stmt::Loop(l), Some((_, lo, hi))) =
                (&mut l, bounds.iter().find(|(i, _, _)| *i == r))
            {
                l.start = lo.clone();
                l.end = hi.clone();
            }
            vec![l]
        })
    }

    /// Whether reduction index `r`'s loop is unrolled (the innermost one, when short).
    fn unrolled(&self, r: usize) -> bool {
        self.shape.reduction.last() == Some(&r) && (2..=UNROLL_SHORT).contains(&self.steps_of(r))
    }

    /// The reduction index whose loop is unrolled around the unrolled innermost one (the
    /// window row around the window column), where the two together take at most
    /// [`UNROLL_WINDOW`] steps, the input is `f32` and every pixel index reads it at
    /// stride 1. Why: with the rows of a 3×3 window unrolled, stride-1 3×3 layers ran 1–5%
    /// faster (ResNet-50's R2, R5 and R8, an Inception-like 96-channel 35×35 one), while a
    /// stride-2 3×3 layer ran 7% slower and the 7×7 stride-2 stem 3% slower; a 5×5 was level
    /// (generated C interleaved call by call, two Zen 4 cores;
    /// `bench/results/2026-11-27-zen4-cpu-wide-tile/`).
    ///
    /// Only where the registers hold the accumulators, two taps' operand vectors and a
    /// broadcast ([`Conv::window_rows_fit`]): GCC 12 spilled seven of the 28 accumulators
    /// of AVX-512's 32 × 14 tile in the unrolled window (every `-mtune` tried), none with
    /// the rows rolled; on two Cascade Lake cores the defaults of R2, R5 and R8 ran
    /// 1.08–1.24×, 1.12–1.23× and 1.05–1.18× faster with the rows rolled, generated C side
    /// by side in eight pairs each (buffers aligned and 16 bytes past a page, every call and
    /// every tenth after another library's; `bench/results/2026-11-28-cascadelake-cpu/`),
    /// against the 1–5% the unrolled rows had gained on Zen 4.
    fn unrolled_window_row(&self) -> Option<usize> {
        let [.., row, col] = self.shape.reduction[..] else {
            return None;
        };
        let unit_stride = self.shape.x.dims.iter().all(|d| {
            d.terms
                .iter()
                .all(|&(i, k)| k == 1 || !self.shape.pixels.contains(&i))
        });
        let f32_input = self.kernel.params[self.shape.x.tensor].dtype == crate::ir::DType::F32;
        (f32_input
            && unit_stride
            && self.unrolled(col)
            && self.steps_of(row) * self.steps_of(col) <= UNROLL_WINDOW
            && self.window_rows_fit())
        .then_some(row)
    }

    /// Whether the target's vector registers (32 with 16 lanes, AVX-512; else 16) hold the
    /// tile's accumulators, the operand vectors of two taps and a broadcast.
    fn window_rows_fit(&self) -> bool {
        let lanes = pixel_lanes(self.config).max(1);
        let registers = if lanes >= 16 { 32 } else { 16 };
        let (accumulators, operands) = if self.tile.pixel_vector {
            let vectors = self.mr.div_ceil(lanes);
            (self.v * vectors, vectors)
        } else {
            let vectors = self.v.div_ceil(lanes);
            (self.mr * vectors, vectors)
        };
        accumulators + 2 * operands < registers
    }

    /// The innermost pixel axis where every tile lies in one row of it (the tile's
    /// pixels divide its extent): a row tile's pixels are steps along it.
    fn row_axis(&self) -> Option<usize> {
        let q = *self.shape.pixels.last()?;
        self.extents[q].is_multiple_of(self.mr).then_some(q)
    }

    /// The taps of the tile that read padding, to skip ([`TapSkip`]), where the tile lies
    /// in one row of the innermost pixel axis ([`Conv::row_axis`]).
    fn padding_taps(&self) -> TapSkip {
        let mut skip = TapSkip::default();
        let Some(q) = self.row_axis() else {
            return skip;
        };
        let qe = self.extents[q];
        let xshape = self.shapes[self.shape.x.tensor];
        let is_reduction = |i: usize| self.shape.reduction.contains(&i);
        for (d, map) in self.shape.x.dims.iter().enumerate() {
            let (lo, hi) = self.ranges[d];
            let size = xshape[d] as i64;
            if lo >= 0 && hi < size {
                continue;
            }
            let red: Vec<(usize, i64)> = map
                .terms
                .iter()
                .copied()
                .filter(|&(i, _)| is_reduction(i))
                .collect();
            let [(r, kr)] = red[..] else {
                continue;
            };
            let uses_q = map.terms.iter().any(|&(i, _)| i == q);
            if !uses_q && kr == 1 && !skip.bounds.iter().any(|(i, _, _)| *i == r) {
                // The same pixel coordinates along this axis for the whole tile: the taps
                // `r` with `0 <= base + r < size`, computed per tile.
                let terms: Vec<(i64, String)> = map
                    .terms
                    .iter()
                    .filter(|&&(i, _)| !is_reduction(i))
                    .map(|&(i, c)| (c, self.pixel_var(i, 0)))
                    .collect();
                let base = match map.offset {
                    0 => format!("({})", linear(&terms)),
                    k if k < 0 => format!("({} - {})", linear(&terms), -k),
                    k => format!("({} + {k})", linear(&terms)),
                };
                let e = self.extents[r];
                let (lo_name, hi_name) = (
                    format!("{}_lo", self.names[r]),
                    format!("{}_hi", self.names[r]),
                );
                skip.lets
                    .push(let_long(&lo_name, format!("{base} < 0 ? -{base} : 0")));
                skip.lets.push(let_long(
                    &hi_name,
                    format!("{size} - {base} < {e} ? {size} - {base} : {e}"),
                ));
                skip.bounds.push((r, lo_name, hi_name));
            } else if uses_q
                && qe == self.mr
                && self.unrolled(r)
                && map.terms.iter().all(|&(i, _)| i == q || i == r)
            {
                // Pixel m of a whole-row tile is at q = m: which taps of the unrolled `r`
                // read inside is known here.
                let kq = map.terms.iter().find(|t| t.0 == q).map_or(0, |t| t.1);
                for m in 0..self.mr {
                    let inside: Vec<usize> = (0..self.extents[r])
                        .filter(|&t| {
                            let at = kq * m as i64 + kr * t as i64 + map.offset;
                            (0..size).contains(&at)
                        })
                        .collect();
                    if inside.len() == self.extents[r] {
                        continue;
                    }
                    let name = &self.names[r];
                    let cond = match (inside.first(), inside.last()) {
                        (Some(&a), Some(&b)) if b + 1 - a == inside.len() => {
                            let mut c = Vec::new();
                            if a > 0 {
                                c.push(format!("{name} >= {a}"));
                            }
                            if b + 1 < self.extents[r] {
                                c.push(format!("{name} <= {b}"));
                            }
                            c.join(" && ")
                        }
                        (None, _) => "0".into(),
                        _ => inside
                            .iter()
                            .map(|t| format!("{name} == {t}"))
                            .collect::<Vec<_>>()
                            .join(" || "),
                    };
                    if !cond.is_empty() {
                        skip.pixels.push((m, cond));
                    }
                }
            }
        }
        skip
    }

    /// Pointer parameters of the tile: the inputs, the scratch input, the panel, the output.
    fn params(&self, scalars: &[&str]) -> Vec<Param> {
        let konst = |buf| Param::Buffer { buf, konst: true };
        let mut p: Vec<Param> = self
            .kernel
            .inputs()
            .into_iter()
            .map(|i| konst(BufId(i)))
            .collect();
        p.extend(self.xp.map(konst));
        p.extend(self.xt.map(konst));
        p.push(konst(self.wp));
        p.push(Param::Buffer {
            buf: BufId(self.kernel.output),
            konst: false,
        });
        p.extend(self.part.map(|buf| Param::Buffer { buf, konst: false }));
        p.extend(scalars.iter().map(|s| Param::Scalar {
            ty: IntType::Long,
            name: (*s).into(),
        }));
        p
    }

    fn args(&self, buffers: &[Buffer], scalars: &[&str]) -> Vec<String> {
        self.params(scalars)
            .iter()
            .map(|p| match p {
                Param::Buffer { buf, .. } => buffers[buf.0].name.clone(),
                Param::Scalar { name, .. } => name.clone(),
            })
            .collect()
    }

    /// The C name of pixel index `t` for tile pixel `m`.
    fn pixel_var(&self, t: usize, m: usize) -> String {
        format!("{}_{m}", self.names[t])
    }

    /// The output's element stride along kernel index `t` (0 for an index it lacks).
    fn out_stride(&self, t: usize) -> i64 {
        let ostrides = strides(self.shapes[self.kernel.output]);
        self.kernel
            .spatial()
            .iter()
            .position(|&s| s == t)
            .map_or(0, |d| ostrides[d] as i64)
    }

    /// Pixels of the longest run of the fused pixel axis that lies contiguously in the
    /// output, per channel: the product of the innermost pixel axes whose output strides
    /// follow the fused order from 1 (`q`, then `p`, ... of an NCHW output; 1 when the
    /// innermost pixel axis is not unit-stride).
    fn dense_run(&self) -> usize {
        contiguous_run(&self.shape.pixels, self.extents, |t| self.out_stride(t))
    }

    /// The pixel indices of the fused pixel `px` (a C expression), in output order.
    fn pixel_coords(&self, px: &str) -> Vec<(usize, String)> {
        let np = self.shape.pixel_count(self.extents);
        let mut div = 1usize;
        let mut coords = Vec::new();
        for &t in self.shape.pixels.iter().rev() {
            let e = self.extents[t];
            let value = match (div, e) {
                (_, 1) => "0".to_string(),
                (1, _) => format!("{px} % {e}"),
                _ if div * e == np => format!("{px} / {div}"),
                _ => format!("{px} / {div} % {e}"),
            };
            coords.push((t, value));
            div *= e;
        }
        coords.reverse();
        coords
    }

    /// `const long <pixel index>_<m> = ...` for every pixel index of the fused pixel `px`.
    fn pixel_lets(&self, px: &str, m: usize) -> Stmt {
        Stmt::Let {
            ty: Ty::Int(IntType::Long),
            konst: true,
            defs: self
                .pixel_coords(px)
                .into_iter()
                .map(|(t, v)| (self.pixel_var(t, m), Value::Code(v)))
                .collect(),
        }
    }

    /// The pixel indices of tile pixel `m > 0` from those of pixel `m - 1`: one step along
    /// the fused pixel axis (the innermost index plus one, carried outward where it wraps),
    /// none past the last pixel (a pixel past the end repeats the last one, as
    /// [`Conv::pixel_lets`] clamps it). A division and a remainder per index and pixel took
    /// a tenth of the time of a 3-channel 3×3 convolution's tiles (27 points, 149-pixel
    /// rows that tiles cross); stepping measured 4–5% faster there.
    fn next_pixel(&self, m: usize) -> Vec<Stmt> {
        let np = self.shape.pixel_count(self.extents);
        let mut out = Vec::new();
        let mut carry = if np.is_multiple_of(self.mr) {
            "1".to_string()
        } else {
            let a = format!("td_a_{m}");
            out.push(let_long(&a, format!("p0 + {m} < {np}")));
            a
        };
        // The outermost index that moves: it never wraps (the last pixel is clamped).
        let outermost = self
            .shape
            .pixels
            .iter()
            .copied()
            .find(|&t| self.extents[t] > 1);
        for &t in self.shape.pixels.iter().rev() {
            let (e, name) = (self.extents[t], self.pixel_var(t, m));
            let prev = self.pixel_var(t, m - 1);
            if e == 1 {
                out.push(let_long(&name, "0".into()));
            } else if Some(t) == outermost {
                out.push(let_long(&name, format!("{prev} + {carry}")));
            } else {
                let sum = format!("td_s_{name}");
                out.push(let_long(&sum, format!("{prev} + {carry}")));
                out.push(let_long(&name, format!("{sum} == {e} ? 0 : {sum}")));
                carry = format!("({sum} == {e})");
            }
        }
        out
    }

    /// `const long xs_<m> = ...`: the input's flat offset of tile pixel `m` (its pixel
    /// indices' part; the reduction's is added in the hot loop).
    fn x_offset(&self, m: usize) -> Stmt {
        let mut terms: Vec<(i64, String)> = self
            .shape
            .pixels
            .iter()
            .map(|&t| (self.xread.coef[t], self.pixel_var(t, m)))
            .collect();
        terms.push((self.xread.base, "1".into()));
        let_long(&format!("xs_{m}"), linear(&terms))
    }

    /// The output offset of tile pixel `m`, as terms for [`linear`] (the channel's not
    /// included).
    fn out_terms(&self, m: usize) -> Vec<(i64, String)> {
        self.shape
            .pixels
            .iter()
            .map(|&t| (self.out_stride(t), self.pixel_var(t, m)))
            .collect()
    }

    /// The vector accumulators `cvar(row, j)` written into the accumulator array, row by
    /// row, `vectors` vectors of `width` lanes each (what the stores and epilogues read).
    fn spill(
        &self,
        rows: usize,
        vectors: usize,
        width: usize,
        cvar: impl Fn(usize, usize) -> String,
    ) -> Vec<Stmt> {
        let mut out = vec![Stmt::Alloc {
            buf: self.acc,
            init: None,
        }];
        for r in 0..rows {
            for j in 0..vectors {
                out.push(Stmt::Assign {
                    dst: Target::Lanes {
                        buf: self.acc,
                        index: vec![int(r), int(j * width)],
                        width,
                    },
                    op: AssignOp::Set,
                    value: Value::Read(Target::Var(cvar(r, j))),
                });
            }
        }
        out
    }

    /// The output's element offset of fused pixel `px` in the first channel.
    fn out_offset(&self, px: usize) -> i64 {
        let mut rest = px;
        let mut offset = 0;
        for &t in self.shape.pixels.iter().rev() {
            let e = self.extents[t];
            offset += self.out_stride(t) * (rest % e) as i64;
            rest /= e;
        }
        offset
    }

    /// [`Conv::shift`]: for fused pixel-vector tiles (the copy reads the input at the
    /// output's pixels) of an `f32` output whose every channel and run starts the same
    /// distance past a line, the elements of a line (of a tile where a tile is less).
    /// Why: a `Vec` of more than 128 KiB starts 16 bytes past a page. Each tile then wrote
    /// parts of two lines, the tile next to it the rest of them after a whole pass over
    /// the channel tiles. Generated C on two Zen 3 cores, input and output 16 bytes past
    /// a page, every tenth call after another library's, side by side, GFLOPS: ResNet-50's
    /// R3 (64 → 256 channels over 56×56) 148 against 139–140 (oneDNN 152–155), R1 (64 → 64)
    /// 137–147 against 129–133, R6 (128 → 512 over 28×28) level; calls right after
    /// another library's: R3 117–139 against 88–115, R1 125–126 against 111–113, R6
    /// 136–141 against 114–132. On aligned buffers level
    /// (`bench/results/2026-11-28-zen3-cpu-align/`).
    fn line_shift(&self) -> Option<usize> {
        let f32_out = self.kernel.params[self.kernel.output].dtype == DType::F32;
        let fused = self.tile.pixel_vector && self.xt.is_some() && self.pair.is_none();
        if !fused || self.run == 0 || !f32_out {
            return None;
        }
        let (mut a, mut b) = (self.mr, LINE_BYTES / 4);
        while b != 0 {
            (a, b) = (b, a % b);
        }
        let line = a as i64;
        let np = self.shape.pixel_count(self.extents);
        let same = self.out_stride(self.shape.f) % line == 0
            && (0..np / self.run).all(|k| self.out_offset(k * self.run) % line == 0);
        same.then_some(a)
    }

    /// `pb` (the first pixel of tile `t`'s run) and `p0` (the tile's first pixel), in a
    /// pixel-vector tile and in the copy of its pairs, which must agree. Aligned at run
    /// time ([`Conv::shift`]), a run's tiles start `sh` pixels before it.
    fn pixel_tile_start(&self) -> [Stmt; 2] {
        let (per_run, _) = self.pixel_tiles();
        let (run, mr) = (self.run, self.mr);
        let sh = if self.shift.is_some() { " - sh" } else { "" };
        [
            let_long("pb", format!("t / {per_run} * {run}")),
            let_long("p0", format!("pb + t % {per_run} * {mr}{sh}")),
        ]
    }

    /// Aligned at run time ([`Conv::shift`]): a tile that crosses its run's start or end
    /// (`pb`, `p0` in scope) stores its lanes inside the run one by one from the
    /// accumulator array, and returns.
    fn edge_stores(
        &self,
        buffers: &[Buffer],
        spilled: bool,
        cvar: impl Fn(usize, usize) -> String,
    ) -> Stmt {
        let (v, mr, run, lanes) = (self.v, self.mr, self.run, pixel_lanes(self.config));
        let sf = self.out_stride(self.shape.f);
        let out = &buffers[self.kernel.output].name;
        let acc = &buffers[self.acc.0].name;
        // The output's offset of the run's first pixel: the run lies contiguously in it.
        let ob: Vec<(i64, String)> = self
            .pixel_coords("pb")
            .into_iter()
            .map(|(t, e)| (self.out_stride(t), format!("({e})")))
            .collect();
        let mut then = if spilled {
            Vec::new()
        } else {
            self.spill(v, mr / lanes, lanes, cvar)
        };
        then.push(let_long("ob", linear(&ob)));
        let lane = Stmt::If {
            cond: format!("p0 + l >= pb && p0 + l < pb + {run}"),
            then: vec![Stmt::Assign {
                dst: Target::Var(format!("{out}[ob + p0 + l - pb + {sf} * (f0 + fi)]")),
                op: AssignOp::Set,
                value: Value::Code(format!("{acc}[fi][l]")),
            }],
            els: None,
            braced: false,
        };
        let lanes_loop = for_each("l", mr, LoopKind::Serial, Layout::Flat, vec![lane]);
        let channel = self.in_channels("fi", lanes_loop);
        then.push(for_each(
            "fi",
            v,
            LoopKind::Serial,
            Layout::Flat,
            vec![channel],
        ));
        then.push(Stmt::Return);
        Stmt::If {
            cond: format!("p0 < pb || p0 + {mr} > pb + {run}"),
            then,
            els: None,
            braced: true,
        }
    }

    /// `stmt` for the tile's channel `f0 + chan` (`chan` C text): as it is where the channel
    /// tiles divide the output's channels, else under `if (f0 + chan < channels)`.
    fn in_channels(&self, chan: &str, stmt: Stmt) -> Stmt {
        let fe = self.extents[self.shape.f];
        if fe.is_multiple_of(self.v) {
            return stmt;
        }
        Stmt::If {
            cond: format!("f0 + {chan} < {fe}"),
            then: vec![stmt],
            els: None,
            braced: false,
        }
    }

    /// `if (p0 >= pb + run) return;`: a tile aligned at run time that starts past its run's
    /// end ([`Conv::pixel_tiles`]) has nothing to do.
    fn past_run_end(&self) -> Stmt {
        Stmt::If {
            cond: format!("p0 >= pb + {}", self.run),
            then: vec![Stmt::Return],
            els: None,
            braced: false,
        }
    }

    /// The first pixel of vector `j` of a pixel-vector tile (`pb`, `p0` in scope): `p0 +
    /// lanes · j`, or, for a vector that would pass the end of its run, moved back to end
    /// there.
    fn vector_start(&self, j: usize) -> String {
        let (run, lanes) = (self.run, pixel_lanes(self.config));
        let at = format!("p0 + {}", j * lanes);
        // Aligned at run time, a tile that crosses its run's start or end reads zeros there
        // and stores lane by lane ([`Conv::edge_stores`]).
        if self.shift.is_some() || run.is_multiple_of(self.mr) {
            at
        } else {
            format!("{at} + {lanes} <= pb + {run} ? {at} : pb + {}", run - lanes)
        }
    }

    /// A loop over tiles: `var` from 0 to `e` in steps of `step`, shared out among the
    /// threads where the config is parallel.
    fn tile_loop(&self, var: &str, e: usize, step: usize) -> Loop {
        Loop {
            var: var.into(),
            ty: IntType::Long,
            start: "0".into(),
            end: int(e),
            step: Step::Add(step),
            trip: e.div_ceil(step),
            kind: if self.config.parallel {
                LoopKind::Parallel
            } else {
                LoopKind::Serial
            },
            index: None,
            layout: Layout::Flat,
            body: Vec::new(),
        }
    }

    /// Pixel tiles per pixel block of channel-vector tiles ([`ConvTile::block_tiles`]),
    /// where there are several.
    fn pixel_block(&self) -> Option<usize> {
        let tiles = self.shape.pixel_count(self.extents).div_ceil(self.mr);
        (!self.tile.pixel_vector)
            .then(|| pixel_block(self.tile, tiles))
            .flatten()
    }

    /// The call of the tile on channel tile `f0` and pixel tile `pixel_var`, reading the
    /// panel `panel` (C text) in place of this thread's.
    fn tile_call(&self, buffers: &[Buffer], pixel_var: &str, panel: &str) -> Stmt {
        let wp = &buffers[self.wp.0].name;
        let mut args = if self.kblock.is_some() {
            self.args(buffers, &["f0", pixel_var, "c0", "c1"])
        } else if self.shift.is_some() {
            self.args(buffers, &["f0", pixel_var, "sh"])
        } else {
            self.args(buffers, &["f0", pixel_var])
        };
        for a in args.iter_mut().filter(|a| *a == wp) {
            *a = panel.to_string();
        }
        // Each pixel tile's partial sums: its own stretch of this thread's buffer (counted
        // from the pixel block's first tile, `b0`, in pixel blocks).
        if let Some(part) = self.part {
            let name = &buffers[part.0].name;
            let (mr, v) = (self.mr, self.v);
            let from = if self.pixel_block().is_some() {
                format!("({pixel_var} - b0)")
            } else {
                pixel_var.to_string()
            };
            for a in args.iter_mut().filter(|a| *a == name) {
                *a = format!("{name} + {from} / {mr} * {}", mr * v);
            }
        }
        Stmt::Call {
            func: TILE.into(),
            args,
        }
    }

    /// Tiles of a pixel-vector schedule per run of pixels, and in all (aligned at run
    /// time, enough for a run that starts `sh` pixels late: a tile past the run's end does
    /// nothing).
    fn pixel_tiles(&self) -> (usize, usize) {
        let per_run = (self.run + self.shift.map_or(0, |l| l - 1)).div_ceil(self.mr);
        let np = self.shape.pixel_count(self.extents);
        (per_run, np / self.run.max(1) * per_run)
    }

    /// One pixel-vector tile ([`ConvTile::pixel_vector`]): `vector` channels from `f0` by
    /// `pixels` pixels, tile `t` of the fused pixel axis cut in runs ([`Conv::run`]) and
    /// each run in tiles. Per reduction point, each pixel vector is loaded from the input
    /// and each channel's weight broadcast against them; the rows are stored as vectors.
    /// A vector that would pass the end of its run is moved back to end there (its first
    /// lanes repeat pixels of the vector before it, and are not stored again).
    fn pixel_tile_func(&self, buffers: &[Buffer]) -> Func {
        let (v, mr, run, lanes) = (self.v, self.mr, self.run, pixel_lanes(self.config));
        let nvec = mr / lanes;
        let (_, tiles) = self.pixel_tiles();
        let fe = self.extents[self.shape.f];
        let f = self.shape.f;
        let wp = &buffers[self.wp.0].name;
        let out = &buffers[self.kernel.output].name;
        let tail = !run.is_multiple_of(mr) && self.shift.is_none();
        let mut body = vec![Stmt::Assume(format!(
            "f0 >= 0 && f0 < {fe} && t >= 0 && t < {tiles}"
        ))];
        body.extend(self.pixel_tile_start());
        if let Some(line) = self.shift {
            body.push(Stmt::Assume(format!("sh >= 0 && sh < {line}")));
            body.push(self.past_run_end());
        }
        for j in 0..nvec {
            let at = format!("p0 + {}", j * lanes);
            let ps = format!("ps_{j}");
            body.push(let_long(&ps, self.vector_start(j)));
            if tail {
                // The lanes already stored: those before the vector's own first pixel,
                // all of them past the run's end.
                body.push(let_long(
                    &format!("po_{j}"),
                    format!("{at} + {lanes} <= pb + {run} ? 0 : {at} < pb + {run} ? {at} - {ps} : {lanes}"),
                ));
            }
            body.push(self.pixel_lets(&ps, j));
            body.push(match self.xt {
                // In the tile's own copy: a pixel from its first vector's (in pairs, two
                // elements a pixel).
                Some(_) if self.pair.is_some() => {
                    let_long(&format!("xs_{j}"), format!("2 * (ps_{j} - ps_0)"))
                }
                Some(_) => let_long(&format!("xs_{j}"), format!("ps_{j} - ps_0")),
                None => self.x_offset(j),
            });
            body.push(let_long(&format!("os_{j}"), linear(&self.out_terms(j))));
        }
        let cvar = |fi: usize, j: usize| format!("c{fi}_{j}");
        body.push(Stmt::Let {
            ty: Ty::Vector(lanes),
            konst: false,
            defs: (0..v)
                .flat_map(|fi| (0..nvec).map(move |j| (fi, j)))
                .map(|(fi, j)| (cvar(fi, j), Value::Float(0.0)))
                .collect(),
        });
        let pairs = self.pair.is_some();
        let row = v * self.lane_elems();
        let mut hot = vec![let_long("wr", format!("({}) * {row}", self.point()))];
        hot.push(let_long("xr", self.x_row()));
        // Each pixel vector feeds `v` FMAs: held in a register ([`IN_REGISTER`]), or GCC
        // folds its load into each of them.
        let held = v > 1;
        hot.push(Stmt::Let {
            ty: Ty::Vector(lanes),
            konst: !held,
            defs: (0..nvec)
                .map(|j| {
                    let at = format!("xs_{j} + xr");
                    if pairs {
                        // 16 pixels' pairs: 32 `bf16` one after another in the copy.
                        let xp = &buffers[self.xt.unwrap_or(self.xread.buf).0].name;
                        return (
                            format!("xv_{j}"),
                            Value::Code(format!("td_pairs(&{xp}[{at}])")),
                        );
                    }
                    let lanes = Target::Lanes {
                        buf: self.xt.unwrap_or(self.xread.buf),
                        index: vec![at],
                        width: lanes,
                    };
                    (format!("xv_{j}"), Value::Read(lanes))
                })
                .collect(),
        });
        if held {
            let func = if lanes == 8 {
                IN_REGISTER8
            } else {
                IN_REGISTER
            };
            hot.extend((0..nvec).map(|j| Stmt::Call {
                func: func.into(),
                args: vec![format!("xv_{j}")],
            }));
        }
        for fi in 0..v {
            if pairs {
                // The channel's weight pair broadcast against each vector of pixel pairs.
                hot.push(Stmt::Let {
                    ty: Ty::Int(IntType::Unsigned),
                    konst: true,
                    defs: vec![(
                        format!("w_{fi}"),
                        Value::Code(format!("td_pair(&{wp}[wr + {}])", 2 * fi)),
                    )],
                });
                for j in 0..nvec {
                    let acc = cvar(fi, j);
                    hot.push(Stmt::Assign {
                        dst: Target::Var(acc.clone()),
                        op: AssignOp::Set,
                        value: Value::Code(format!("td_dot2({acc}, w_{fi}, xv_{j})")),
                    });
                }
                continue;
            }
            hot.push(Stmt::Let {
                ty: Ty::Elem(COMPUTE),
                konst: true,
                defs: vec![(format!("w_{fi}"), Value::Code(format!("{wp}[wr + {fi}]")))],
            });
            for j in 0..nvec {
                hot.push(Stmt::Compute {
                    acc: Target::Var(cvar(fi, j)),
                    reduce: true,
                    value: Value::Code(format!("w_{fi} * xv_{j}")),
                });
            }
        }
        body.extend(self.reduction_loops(LoopKind::InOrder, true, &[], hot));
        // The epilogue, element by element on the accumulator array.
        let epilogue = !self.kernel.epilogue.is_empty();
        let acc = &buffers[self.acc.0].name;
        if epilogue {
            body.extend(self.spill(v, nvec, lanes, cvar));
            for fi in 0..v {
                for j in 0..nvec {
                    let mut index: Vec<String> = self.names.iter().map(|_| "0".into()).collect();
                    let mut lane = Vec::new();
                    // Aligned at run time, an edge tile's lanes outside the run read the
                    // run's first or last pixel's elements (and are not stored).
                    let px = if self.shift.is_some() {
                        lane.push(let_long(
                            "pl",
                            format!(
                                "ps_{j} + l < pb ? pb : ps_{j} + l < pb + {run} ? ps_{j} + l : pb + {}",
                                run - 1
                            ),
                        ));
                        "pl".to_string()
                    } else {
                        format!("(ps_{j} + l)")
                    };
                    for (t, e) in self.pixel_coords(&px) {
                        index[t] = format!("({e})");
                    }
                    index[f] = format!("(f0 + {fi})");
                    let elem = Target::Elem {
                        buf: self.acc,
                        index: vec![int(fi), format!("{} + l", j * lanes)],
                    };
                    lane.push(Stmt::Store {
                        acc: elem.clone(),
                        epilogue: self.kernel.epilogue.clone(),
                        binding: Binding {
                            index,
                            reads: Vec::new(),
                        },
                        dst: elem,
                    });
                    body.push(for_each("l", lanes, LoopKind::Serial, Layout::Braced, lane));
                }
            }
        }
        let sf = self.out_stride(f);
        if self.shift.is_some() {
            body.push(self.edge_stores(buffers, epilogue, cvar));
        }
        for fi in 0..v {
            let stores: Vec<Stmt> = (0..nvec)
                .map(|j| {
                    let value = if epilogue {
                        format!("*(const td_f32x{lanes} *)&{acc}[{fi}][{}]", j * lanes)
                    } else {
                        cvar(fi, j)
                    };
                    let at = format!("{out}[os_{j} + {sf} * (f0 + {fi})]");
                    if tail {
                        Stmt::Call {
                            func: if lanes == 8 { STORE_TAIL8 } else { STORE_TAIL }.into(),
                            args: vec![format!("&{at}"), value, format!("(int)po_{j}")],
                        }
                    } else {
                        Stmt::Assign {
                            dst: Target::Var(format!("*(td_f32x{lanes} *)&{at}")),
                            op: AssignOp::Set,
                            value: Value::Code(value),
                        }
                    }
                })
                .collect();
            body.push(if fe.is_multiple_of(v) {
                Stmt::Block(stores)
            } else {
                Stmt::If {
                    cond: format!("f0 + {fi} < {fe}"),
                    then: stores,
                    els: None,
                    braced: true,
                }
            });
        }
        Func {
            name: TILE.into(),
            params: if self.shift.is_some() {
                self.params(&["f0", "t", "sh"])
            } else {
                self.params(&["f0", "t"])
            },
            body,
        }
    }

    /// The tile's stores as vectors, for an `f32` output whose channels or pixels are
    /// contiguous, as a guarded early exit before the one-store-per-element path (which
    /// stays for edge tiles and other layouts):
    ///
    /// * channels unit-stride (NHWC): each pixel's accumulator rows are stored as they are
    ///   (vectors of the target's width),
    ///   when the channel tile is whole;
    /// * pixels unit-stride (NCHW): each block of [`TRANSPOSE`] channels is transposed in
    ///   registers (the pixels padded to [`TRANSPOSE`] with zeros) so that every channel's
    ///   pixels are one vector, stored with a lane mask (`td_store16`), when the tile's
    ///   pixels are whole and lie in one contiguous run.
    ///
    /// Epilogues run on the accumulators first. Why: one scalar store per element (and the
    /// lane extraction before it) took about a quarter of a 1×1 convolution over 64
    /// channels (R3 of the bench: 178 GFLOPS single-threaded; 238 with the transposed
    /// stores).
    fn vector_store(&self, buffers: &[Buffer]) -> Vec<Stmt> {
        // Blocks of the target's vector width: 16 channels with AVX-512, 8 with AVX2.
        let t = if pixel_lanes(self.config) >= TRANSPOSE {
            TRANSPOSE
        } else {
            8
        };
        let (v, mr) = (self.v, self.mr);
        let (fe, np) = (
            self.extents[self.shape.f],
            self.shape.pixel_count(self.extents),
        );
        if !self.tile.vector_store
            || self.kernel.params[self.kernel.output].dtype != DType::F32
            || !v.is_multiple_of(t)
            || mr > t
        {
            return Vec::new();
        }
        let f = self.shape.f;
        let out = &buffers[self.kernel.output].name;
        let acc = &buffers[self.acc.0].name;
        let pixel_offset = |m: usize| linear(&self.out_terms(m));
        let mut fast = Vec::new();
        let mut conds = Vec::new();
        // The epilogue, in place on the accumulators (the real channels only).
        if !self.kernel.epilogue.is_empty() {
            for m in 0..mr {
                let mut index: Vec<String> = self.names.iter().map(|_| "0".into()).collect();
                for &p in &self.shape.pixels {
                    index[p] = self.pixel_var(p, m);
                }
                index[f] = "(f0 + v)".into();
                let elem = Target::Elem {
                    buf: self.acc,
                    index: vec![int(m), "v".into()],
                };
                fast.push(Stmt::Loop(Loop {
                    var: "v".into(),
                    ty: IntType::Long,
                    start: "0".into(),
                    end: "nv".into(),
                    step: Step::Inc,
                    trip: v,
                    kind: LoopKind::Serial,
                    index: Some(f),
                    layout: Layout::Braced,
                    body: vec![Stmt::Store {
                        acc: elem.clone(),
                        epilogue: self.kernel.epilogue.clone(),
                        binding: Binding {
                            index,
                            reads: Vec::new(),
                        },
                        dst: elem,
                    }],
                }));
            }
        }
        if self.out_stride(f) == 1 {
            // Whole vectors of the target's width.
            let t = pixel_lanes(self.config).min(t);
            if !v.is_multiple_of(t) {
                return Vec::new();
            }
            if !fe.is_multiple_of(v) {
                conds.push(format!("f0 + {v} <= {fe}"));
            }
            for m in 0..mr {
                let stores: Vec<Stmt> = (0..v / t)
                    .map(|j| Stmt::Assign {
                        dst: Target::Var(format!(
                            "*(td_f32x{t} *)&{out}[{} + f0 + {}]",
                            pixel_offset(m),
                            j * t
                        )),
                        op: AssignOp::Set,
                        value: Value::Code(format!("*(const td_f32x{t} *)&{acc}[{m}][{}]", j * t)),
                    })
                    .collect();
                fast.push(if m == 0 {
                    Stmt::Block(stores)
                } else {
                    Stmt::If {
                        cond: format!("p0 + {m} < {np}"),
                        then: stores,
                        els: None,
                        braced: true,
                    }
                });
            }
        } else {
            let run = self.dense_run();
            if run < 2 {
                return Vec::new();
            }
            conds.push(format!("p0 + {mr} <= {np}"));
            if run < np {
                conds.push(format!("p0 % {run} + {mr} <= {run}"));
            }
            let sf = self.out_stride(f);
            for j in 0..v / t {
                for l in 0..t {
                    let value = if l < mr {
                        Value::Code(format!("*(const td_f32x{t} *)&{acc}[{l}][{}]", j * t))
                    } else {
                        Value::Float(0.0)
                    };
                    fast.push(Stmt::Let {
                        ty: Ty::Vector(t),
                        konst: true,
                        defs: vec![(format!("ta{j}_{l}"), value)],
                    });
                }
                let rows = transpose_rounds(t, &format!("ta{j}_"), &format!("ts{j}_"), &mut fast);
                for l in 0..t {
                    let chan = j * t + l;
                    let store = Stmt::Call {
                        func: if t == 8 { STORE_LANES8 } else { STORE_LANES }.into(),
                        args: vec![
                            format!("&{out}[{} + {sf} * (f0 + {chan})]", pixel_offset(0)),
                            rows(l),
                            int(mr),
                        ],
                    };
                    fast.push(self.in_channels(&chan.to_string(), store));
                }
            }
        }
        fast.push(Stmt::Return);
        vec![if conds.is_empty() {
            Stmt::Block(fast)
        } else {
            Stmt::If {
                cond: conds.join(" && "),
                then: fast,
                els: None,
                braced: true,
            }
        }]
    }

    /// The reduction's part of a tile's input offset (C text): in the fused copy, the row
    /// of the tile's `mr` pixels (pairs) per channel (pair), else the input's own
    /// coefficients.
    fn x_row(&self) -> String {
        let terms: Vec<(i64, String)> = self
            .shape
            .reduction
            .iter()
            .map(|&r| match self.xt {
                Some(_) if r == self.copy_index => {
                    ((self.lane_elems() * self.mr) as i64, self.names[r].clone())
                }
                Some(_) => (0, self.names[r].clone()),
                None => (self.xread.coef[r], self.names[r].clone()),
            })
            .collect();
        linear(&terms)
    }

    /// Each tile pixel's indices (`px_<m>`, a pixel past the end repeating the last one)
    /// and, with `offsets` and unguarded, its part of the input offset (`xs_<m>`), `p0` in
    /// scope. With `in_row` (every tile in one run of that innermost pixel axis), the
    /// pixels after the first are steps along it, and only the first has an offset.
    fn pixel_prelude(&self, in_row: Option<usize>, offsets: bool) -> Vec<Stmt> {
        let (mr, np) = (self.mr, self.shape.pixel_count(self.extents));
        let mut out = Vec::new();
        for m in 0..mr {
            let px = format!("px_{m}");
            match in_row {
                Some(t) if m > 0 => {
                    out.push(Stmt::Let {
                        ty: Ty::Int(IntType::Long),
                        konst: true,
                        defs: self
                            .shape
                            .pixels
                            .iter()
                            .map(|&u| {
                                let first = self.pixel_var(u, 0);
                                let value = if u == t {
                                    format!("{first} + {m}")
                                } else {
                                    first
                                };
                                (self.pixel_var(u, m), Value::Code(value))
                            })
                            .collect(),
                    });
                }
                _ if m > 0 => {
                    out.extend(self.next_pixel(m));
                    if offsets && !self.xread.guarded {
                        out.push(self.x_offset(m));
                    }
                }
                _ => {
                    out.push(let_long(
                        &px,
                        format!("p0 + {m} < {np} ? p0 + {m} : {}", np - 1),
                    ));
                    out.push(self.pixel_lets(&px, m));
                    if offsets && !self.xread.guarded {
                        out.push(self.x_offset(m));
                    }
                }
            }
        }
        out
    }

    /// One register tile: `pixels` output pixels from `p0` by `vector` channels from `f0`.
    fn tile_func(&self, buffers: &[Buffer]) -> Func {
        let (v, mr) = (self.v, self.mr);
        let taps = self.padding_taps();
        let (fe, np) = (
            self.extents[self.shape.f],
            self.shape.pixel_count(self.extents),
        );
        let xname = &buffers[self.xread.buf.0].name;
        // Accumulators as vector variables `c<m>_<j>` where the channel tile is a whole
        // number of vectors (GCC 12 keeps them in registers; the accumulator array of the
        // scalar form lost registers to spills when the code after the loop changed), else
        // the accumulator array. The vectors are the target's ([`CpuConfig::vector_code`]:
        // 16 lanes before configs carried them): GCC splits a vector wider than the
        // target's registers through memory (a 16×5 tile of 16-lane vectors ran at 12
        // GFLOPS on two AVX2 cores).
        let native = pixel_lanes(self.config);
        let width = [native, 8]
            .into_iter()
            .filter(|&w| w <= native)
            .find(|&w| v.is_multiple_of(w))
            .unwrap_or(0);
        let vectors = v.checked_div(width).unwrap_or(0);
        let cvar = |m: usize, j: usize| format!("c{m}_{j}");
        let mut body = vec![Stmt::Assume(format!(
            "f0 >= 0 && f0 < {fe} && p0 >= 0 && p0 < {np}"
        ))];
        body.push(if width > 0 {
            Stmt::Let {
                ty: Ty::Vector(width),
                konst: false,
                defs: (0..mr)
                    .flat_map(|m| (0..vectors).map(move |j| (m, j)))
                    .map(|(m, j)| (cvar(m, j), Value::Float(0.0)))
                    .collect(),
            }
        } else {
            Stmt::Alloc {
                buf: self.acc,
                init: Some(Value::Code("{0}".into())),
            }
        });
        // With reduction blocks, a block after the first starts from the partial sums.
        let part_lanes = |m: usize, j: usize| {
            self.part.map(|buf| Target::Lanes {
                buf,
                index: vec![int((m * vectors + j) * width)],
                width,
            })
        };
        if self.kblock.is_some() && width > 0 {
            body.push(Stmt::If {
                cond: "c0 > 0".into(),
                then: (0..mr)
                    .flat_map(|m| (0..vectors).map(move |j| (m, j)))
                    .filter_map(|(m, j)| {
                        Some(Stmt::Assign {
                            dst: Target::Var(cvar(m, j)),
                            op: AssignOp::Set,
                            value: Value::Read(part_lanes(m, j)?),
                        })
                    })
                    .collect(),
                els: None,
                braced: true,
            });
        }
        // Each pixel's indices (a pixel past the end repeats the last one; it is not
        // stored) and, unguarded, its part of the input offset. Where every tile lies in
        // one run of the innermost pixel axis, the pixels after the first are steps along
        // it: their input reads are one address plus constants (14 pointers of their own,
        // moved at every step of the reduction, took general registers from the hot loop
        // of a 14-pixel tile and spilled some of its accumulators).
        // Over the fused copy the pixels' indices only place the stores: no input offsets.
        let in_row = if self.xt.is_some() {
            None
        } else {
            self.row_axis()
        };
        body.extend(self.pixel_prelude(in_row, self.xt.is_none()));
        // The hot loop: per reduction point, each pixel's input broadcast against the
        // channel vector of the panel.
        let row = v * self.lane_elems();
        let mut hot = vec![let_long("wr", format!("({}) * {row}", self.point()))];
        // (Over the fused copy, or over the input unguarded; `in_row` is never set over
        // the copy.)
        if self.xt.is_some() || !self.xread.guarded {
            let xr = self.x_row();
            if in_row.is_some() {
                // The reads of a row tile overlap from one tap to the next (pixel m + 1
                // at tap s is pixel m at tap s + 1 with stride 1): GCC would keep values
                // across the unrolled taps and spill accumulators to hold them (R0 of
                // ResNet-50 ran 12% slower). An offset it cannot see through
                // ([`OPAQUE`]) leaves one load per pixel and tap.
                hot.push(Stmt::Let {
                    ty: Ty::Int(IntType::Long),
                    konst: false,
                    defs: vec![("xr".into(), Value::Code(xr))],
                });
                hot.push(Stmt::Call {
                    func: OPAQUE.into(),
                    args: vec!["xr".into()],
                });
            } else {
                hot.push(let_long("xr", xr));
            }
        }
        for m in 0..mr {
            let value = if let Some(xt) = self.xt {
                Value::Code(format!("{}[xr + {m}]", buffers[xt.0].name))
            } else if self.xread.guarded {
                let mut index: Vec<String> = self.names.clone();
                for &t in &self.shape.pixels {
                    index[t] = self.pixel_var(t, m);
                }
                Value::Global {
                    access: self.shape.x.clone(),
                    binding: Binding {
                        index,
                        reads: Vec::new(),
                    },
                }
            } else {
                // The scratch copy is float (or `bf16` pairs); the input in place has its
                // own type.
                let dtype = buffers[self.xread.buf.0].dtype;
                let index = match in_row {
                    // One address (`xs_0 + xr`) and a constant per pixel: not a register
                    // per pixel, which the compiler keeps when the sum is `xs_m + xr`.
                    Some(t) => format!("xs_0 + xr + {}", self.xread.coef[t] * m as i64),
                    None => format!("xs_{m} + xr"),
                };
                if self.pair.is_some() {
                    Value::Code(format!("td_pair(&{xname}[{index}])"))
                } else {
                    Value::Code(load_as_f32(dtype, &format!("{xname}[{index}]")))
                }
            };
            hot.push(Stmt::Let {
                ty: if self.pair.is_some() {
                    Ty::Int(IntType::Unsigned)
                } else {
                    Ty::Elem(COMPUTE)
                },
                konst: true,
                defs: vec![(format!("x_{m}"), value)],
            });
        }
        if self.pair.is_some() {
            // Two channels per instruction: each pixel's pair against the panel's vectors
            // of pairs (`td_dot2`: `vdpbf16ps`, [`super::cpu_pairs`]).
            let wname = &buffers[self.wp.0].name;
            hot.push(Stmt::Let {
                ty: Ty::Vector(width),
                konst: true,
                defs: (0..vectors)
                    .map(|j| {
                        let at = j * width * 2;
                        (
                            format!("b{j}"),
                            Value::Code(format!("td_pairs(&{wname}[wr + {at}])")),
                        )
                    })
                    .collect(),
            });
            for m in 0..mr {
                let dots = (0..vectors)
                    .map(|j| {
                        let acc = cvar(m, j);
                        Stmt::Assign {
                            dst: Target::Var(acc.clone()),
                            op: AssignOp::Set,
                            value: Value::Code(format!("td_dot2({acc}, x_{m}, b{j})")),
                        }
                    })
                    .collect();
                hot.extend(taps.guard(m, dots));
            }
        } else if width > 0 {
            hot.push(Stmt::Let {
                ty: Ty::Vector(width),
                konst: true,
                defs: (0..vectors)
                    .map(|j| {
                        let lanes = Target::Lanes {
                            buf: self.wp,
                            index: vec![format!("wr + {}", j * width)],
                            width,
                        };
                        (format!("b{j}"), Value::Read(lanes))
                    })
                    .collect(),
            });
            for m in 0..mr {
                let fmas = (0..vectors)
                    .map(|j| Stmt::Compute {
                        acc: Target::Var(cvar(m, j)),
                        reduce: true,
                        value: Value::Code(format!("x_{m} * b{j}")),
                    })
                    .collect();
                hot.extend(taps.guard(m, fmas));
            }
        } else {
            for m in 0..mr {
                let lp = for_each(
                    "v",
                    v,
                    LoopKind::Vectorized(v),
                    Layout::Bare,
                    vec![Stmt::Compute {
                        acc: Target::Elem {
                            buf: self.acc,
                            index: vec![int(m), "v".into()],
                        },
                        reduce: true,
                        value: Value::Code(format!("x_{m} * wp[wr + v]")),
                    }],
                );
                hot.extend(taps.guard(m, vec![lp]));
            }
        }
        body.extend(taps.lets);
        let mut bounds = taps.bounds.clone();
        if let Some((r, _)) = self.kblock {
            // (`block_index` reads an input axis that is never padded: no tap bounds.)
            bounds.retain(|(i, _, _)| *i != r);
            bounds.push((r, "c0".into(), "c1".into()));
        }
        let vector_body = width > 0 || self.pair.is_some();
        body.extend(self.reduction_loops(LoopKind::InOrder, vector_body, &bounds, hot));
        // The stores: after the last block only; after the others, the partial sums.
        let mut stores = Vec::new();
        if width > 0 {
            // The sums into the accumulator array that the stores read.
            stores.extend(self.spill(mr, vectors, width, cvar));
        }
        stores.push(let_long("nv", format!("{fe} - f0 < {v} ? {fe} - f0 : {v}")));
        stores.extend(self.vector_store(buffers));

        // One store per output element, the epilogue fused.
        let f = self.shape.f;
        for m in 0..mr {
            let mut terms = self.out_terms(m);
            terms.push((self.out_stride(f), "(f0 + v)".into()));
            let mut index: Vec<String> = self.names.iter().map(|_| "0".into()).collect();
            for &t in &self.shape.pixels {
                index[t] = self.pixel_var(t, m);
            }
            index[f] = "(f0 + v)".into();
            let store = Stmt::Store {
                acc: Target::Elem {
                    buf: self.acc,
                    index: vec![int(m), "v".into()],
                },
                epilogue: self.kernel.epilogue.clone(),
                binding: Binding {
                    index,
                    reads: Vec::new(),
                },
                dst: Target::Elem {
                    buf: BufId(self.kernel.output),
                    index: vec![linear(&terms)],
                },
            };
            let lp = Stmt::Loop(Loop {
                var: "v".into(),
                ty: IntType::Long,
                start: "0".into(),
                end: "nv".into(),
                step: Step::Inc,
                trip: v,
                kind: LoopKind::Serial,
                index: Some(f),
                layout: Layout::Braced,
                body: vec![store],
            });
            stores.push(if m == 0 {
                lp
            } else {
                Stmt::If {
                    cond: format!("p0 + {m} < {np}"),
                    then: vec![lp],
                    els: None,
                    braced: false,
                }
            });
        }
        match self.kblock {
            Some((r, _)) if width > 0 => {
                let saves = (0..mr)
                    .flat_map(|m| (0..vectors).map(move |j| (m, j)))
                    .filter_map(|(m, j)| {
                        Some(Stmt::Assign {
                            dst: part_lanes(m, j)?,
                            op: AssignOp::Set,
                            value: Value::Read(Target::Var(cvar(m, j))),
                        })
                    })
                    .collect();
                body.push(Stmt::If {
                    cond: format!("c1 < {}", self.steps_of(r)),
                    then: saves,
                    els: Some(stores),
                    braced: true,
                });
            }
            _ => body.extend(stores),
        }
        let scalars: &[&str] = if self.kblock.is_some() {
            &["f0", "p0", "c0", "c1"]
        } else {
            &["f0", "p0"]
        };
        Func {
            name: TILE.into(),
            params: self.params(scalars),
            body,
        }
    }

    /// The weights' element offset of channel `f0 + v` at the reduction loops' point, as
    /// terms for [`linear`]; `pair`: `(c, h)`, index `c` read at `2 c + h` (its loop runs
    /// over pairs).
    fn weight_terms(&self, pair: Option<(usize, usize)>) -> Vec<(i64, String)> {
        let w = &self.shape.w;
        let st = strides(self.shapes[w.tensor]);
        w.dims
            .iter()
            .enumerate()
            .filter_map(|(d, map)| {
                let i = map.as_var()?;
                let name = match pair {
                    _ if i == self.shape.f => "(f0 + v)".to_string(),
                    Some((c, h)) if i == c => format!("(2 * {} + {h})", self.names[c]),
                    _ => self.names[i].clone(),
                };
                Some((st[d] as i64, name))
            })
            .collect()
    }

    /// Fills this thread's panel with the weights of channels `f0..f0 + vector`.
    fn pack_weights(&self) -> Vec<Stmt> {
        let w = &self.shape.w;
        let fe = self.extents[self.shape.f];
        let terms = self.weight_terms(None);
        let mv = Stmt::Move {
            dst: (self.wp, format!("({}) * {} + v", self.point(), self.v)),
            src: (BufId(w.tensor), linear(&terms)),
            width: 1,
            guard: vec![format!("f0 + v < {fe}")],
        };
        // In slices of the first reduction index, each slice's part of the panel about
        // PACK_SLICE_BYTES (it stays in L1): per slice, each channel's row of `w` is read in
        // order (a prefetchable stream), then the next channel's. Reading the `vector` rows
        // side by side instead (32 streams 2 KiB apart) missed cache on every line: on a 1×1
        // 512→2048 convolution over 7×7 that load was the hottest instruction.
        let red = &self.shape.reduction;
        let (r0, e0) = (red[0], self.extents[red[0]]);
        let per_r0: usize = red[1..].iter().map(|&r| self.extents[r]).product();
        let slice = (PACK_SLICE_BYTES / (per_r0 * self.v * 4).max(1)).clamp(1, e0);
        let inner = red[1..].iter().rev().fold(vec![mv], |body, &r| {
            vec![for_each(
                &self.names[r],
                self.extents[r],
                LoopKind::Serial,
                Layout::Braced,
                body,
            )]
        });
        let name0 = &self.names[r0];
        let first = Stmt::Loop(Loop {
            var: name0.clone(),
            ty: IntType::Long,
            start: "k0".into(),
            end: if slice == e0 {
                int(e0)
            } else {
                format!("(k0 + {slice} < {e0} ? k0 + {slice} : {e0})")
            },
            step: Step::Inc,
            trip: slice,
            kind: LoopKind::Serial,
            index: Some(r0),
            layout: Layout::Braced,
            body: inner,
        });
        vec![Stmt::Loop(Loop {
            var: "k0".into(),
            ty: IntType::Long,
            start: "0".into(),
            end: int(e0),
            step: Step::Add(slice),
            trip: e0.div_ceil(slice),
            kind: LoopKind::Serial,
            index: Some(r0),
            layout: Layout::Braced,
            body: vec![for_each(
                "v",
                self.v,
                LoopKind::Serial,
                Layout::Braced,
                vec![first],
            )],
        })]
    }

    /// The transposed weight packing (when [`Conv::transpose`] is set): fills the panel of
    /// channels `f0..f0 + vector` by [`TRANSPOSE`]-square blocks, each read as `TRANSPOSE`
    /// channel rows of `TRANSPOSE` consecutive points (full cache lines, one stream per
    /// channel), transposed in registers by `log2(TRANSPOSE)` rounds of two-vector shuffles
    /// and stored as `TRANSPOSE` panel rows. Points past the last whole block are copied one
    /// by one; a channel tile that runs past the last channel takes the guarded loops.
    ///
    /// Why: packed one element at a time, a 3×3 convolution of 512 channels over a 7×7
    /// plane spent about as long packing as computing (timed with packing skipped).
    fn transposed_pack(&self, sf: usize) -> Vec<Stmt> {
        let (v, t) = (self.v, TRANSPOSE);
        let points = self.shape.points(self.extents);
        let whole = points / t * t;
        let fe = self.extents[self.shape.f];
        let w = BufId(self.shape.w.tensor);
        let row = |name: &str, n: usize| format!("{name}{n}");
        let mut fast = Vec::new();
        for j in 0..v / t {
            let mut step: Vec<Stmt> = (0..t)
                .map(|l| {
                    let at = format!("(f0 + {}) * {sf} + pt", j * t + l);
                    let lanes = Target::Lanes {
                        buf: w,
                        index: vec![at],
                        width: t,
                    };
                    Stmt::Let {
                        ty: Ty::Vector(t),
                        konst: true,
                        defs: vec![(row("a", l), Value::Read(lanes))],
                    }
                })
                .collect();
            let prev = transpose_rounds(t, "a", "s", &mut step);
            for l in 0..t {
                step.push(Stmt::Assign {
                    dst: Target::Lanes {
                        buf: self.wp,
                        index: vec![format!("(pt + {l}) * {v} + {}", j * t)],
                        width: t,
                    },
                    op: AssignOp::Set,
                    value: Value::Read(Target::Var(prev(l))),
                });
            }
            fast.push(Stmt::Loop(Loop {
                var: "pt".into(),
                ty: IntType::Long,
                start: "0".into(),
                end: int(whole),
                step: Step::Add(t),
                trip: whole / t,
                kind: LoopKind::Serial,
                index: None,
                layout: Layout::Braced,
                body: step,
            }));
        }
        if whole < points {
            let mv = Stmt::Move {
                dst: (self.wp, format!("pt * {v} + v")),
                src: (w, format!("(f0 + v) * {sf} + pt")),
                width: 1,
                guard: Vec::new(),
            };
            fast.push(Stmt::Loop(Loop {
                var: "pt".into(),
                ty: IntType::Long,
                start: int(whole),
                end: int(points),
                step: Step::Inc,
                trip: points - whole,
                kind: LoopKind::Serial,
                index: None,
                layout: Layout::Braced,
                body: vec![for_each("v", v, LoopKind::Serial, Layout::Braced, vec![mv])],
            }));
        }
        if fe.is_multiple_of(v) {
            fast
        } else {
            vec![Stmt::If {
                cond: format!("f0 + {v} <= {fe}"),
                then: fast,
                els: Some(self.pack_weights()),
                braced: true,
            }]
        }
    }

    /// With `bf16` pairs: fills this thread's panel with the raw weights of channels
    /// `f0..f0 + vector`, each panel row the `vector` pairs of one point of the halved
    /// reduction (input channels `2c`, `2c + 1` side by side; zeros past the last channel
    /// and the last input channel).
    fn pack_pairs(&self, c: usize) -> Vec<Stmt> {
        let w = &self.shape.w;
        let (fe, ce) = (self.extents[self.shape.f], self.extents[c]);
        let row = self.v * 2;
        let moves = (0..2)
            .map(|h| {
                let terms = self.weight_terms(Some((c, h)));
                let mut guard = vec![format!("f0 + v < {fe}")];
                if h == 1 && ce % 2 == 1 {
                    guard.push(format!("2 * {} + 1 < {ce}", self.names[c]));
                }
                Stmt::Move {
                    dst: (self.wp, format!("({}) * {row} + 2 * v + {h}", self.point())),
                    src: (BufId(w.tensor), linear(&terms)),
                    width: 1,
                    guard,
                }
            })
            .collect();
        let inner = self.shape.reduction.iter().rev().fold(moves, |body, &r| {
            vec![for_each(
                &self.names[r],
                self.steps_of(r),
                LoopKind::Serial,
                Layout::Braced,
                body,
            )]
        });
        vec![for_each(
            "v",
            self.v,
            LoopKind::Serial,
            Layout::Braced,
            inner,
        )]
    }

    /// `td_conv_pack(w, wp, f0)`: fills `wp` with the panel of channels `f0..f0 + vector`,
    /// transposed ([`Conv::transposed_pack`]), in `bf16` pairs ([`Conv::pack_pairs`]) or
    /// one element at a time.
    fn pack_func(&self) -> Func {
        let body = match (self.pair, self.transpose) {
            (Some(c), _) => self.pack_pairs(c),
            (None, Some(sf)) => self.transposed_pack(sf),
            (None, None) => self.pack_weights(),
        };
        Func {
            name: PACK.into(),
            params: vec![
                Param::Buffer {
                    buf: BufId(self.shape.w.tensor),
                    konst: true,
                },
                Param::Buffer {
                    buf: self.wp,
                    konst: false,
                },
                Param::Scalar {
                    ty: IntType::Long,
                    name: "f0".into(),
                },
            ],
            body,
        }
    }

    /// C text of the panel of channel tile `f0` inside the prepacked weights `wall`
    /// (tiles one after another, `points × vector` floats each: `f0 · points`).
    fn wall_panel(&self, wall: &str) -> String {
        format!("{wall} + f0 * {}", self.panel_points() * self.lane_elems())
    }

    /// `td_conv_prepack(w, wall)`: every channel tile's panel, in tile order (the threads
    /// share out the tiles).
    fn prepack_func(&self, buffers: &[Buffer]) -> Func {
        let (fe, v) = (self.extents[self.shape.f], self.v);
        let w = BufId(self.shape.w.tensor);
        let call = Stmt::Call {
            func: PACK.into(),
            args: vec![
                buffers[w.0].name.clone(),
                self.wall_panel(&buffers[self.wall.0].name),
                "f0".into(),
            ],
        };
        Func {
            name: PREPACK.into(),
            params: vec![
                Param::Buffer {
                    buf: w,
                    konst: true,
                },
                Param::Buffer {
                    buf: self.wall,
                    konst: false,
                },
            ],
            body: vec![Stmt::Loop(Loop {
                layout: Layout::Braced,
                body: vec![call],
                ..self.tile_loop("f0", fe, v)
            })],
        }
    }

    /// The exported entry point (`wall` null: the weights packed per thread at each call)
    /// and the [`Prepack`] pair around [`RUN`].
    fn entries(&self, buffers: &[Buffer]) -> (Func, Prepack) {
        let name = |b: BufId| buffers[b.0].name.clone();
        let inputs: Vec<String> = self
            .kernel
            .inputs()
            .into_iter()
            .map(|p| name(BufId(p)))
            .collect();
        let out = name(BufId(self.kernel.output));
        let run = |wall: &str| {
            let mut args = inputs.clone();
            args.push(wall.into());
            args.push(out.clone());
            Stmt::Call {
                func: RUN.into(),
                args,
            }
        };
        let w = BufId(self.shape.w.tensor);
        let params = super::pointer_params(self.kernel, None);
        let entry = Func {
            name: super::cpu::ENTRY.into(),
            params: params.clone(),
            body: vec![run("0")],
        };
        let fill = Func {
            name: super::cpu::PREPACK_FILL.into(),
            params: vec![
                Param::Buffer {
                    buf: w,
                    konst: true,
                },
                Param::Buffer {
                    buf: BufId(self.kernel.output),
                    konst: false,
                },
            ],
            body: vec![Stmt::Call {
                func: PREPACK.into(),
                args: vec![name(w), out.clone()],
            }],
        };
        let prepacked = Func {
            name: super::cpu::PREPACK_ENTRY.into(),
            params,
            body: vec![
                Stmt::Let {
                    ty: Ty::Ptr(buffers[self.wall.0].dtype),
                    konst: true,
                    defs: vec![(
                        name(self.wall),
                        Value::Code(format!("args[{}]", self.kernel.params.len())),
                    )],
                },
                run(&name(self.wall)),
            ],
        };
        let wall = &buffers[self.wall.0];
        let prepack = Prepack {
            input: w.0,
            // In elements of the compute type (`f32`): half as many for `bf16` pairs.
            elems: (wall.dims.iter().product::<usize>() * wall.dtype.size())
                .div_ceil(COMPUTE.size()),
            fill,
            run: prepacked,
        };
        (entry, prepack)
    }

    /// Copies the affine input once into the zero-padded scratch buffer (allocated before
    /// the parallel region; the copy is shared out among its threads, the implicit barrier
    /// at its end keeps the tiles from reading it early).
    fn pad_input(&self, buffers: &[Buffer], ranges: &[(i64, i64)]) -> Vec<Stmt> {
        let Some(xp) = self.xp else {
            return Vec::new();
        };
        let mut dims = buffers[xp.0].dims.clone();
        let xshape = self.shapes[self.shape.x.tensor];
        let (dst_st, src_st) = (strides(&dims), strides(xshape));
        // With `bf16` pairs the last axis (2) is the pair's two channels: each step copies
        // both, from two channels of the input.
        let halves = if self.pair_axis.is_some() {
            dims.pop();
            2
        } else {
            1
        };
        let vars: Vec<String> = (0..dims.len()).map(|d| format!("xj{d}")).collect();
        let moves = (0..halves)
            .map(|h| {
                let mut guard = Vec::new();
                let mut src = Vec::new();
                for (d, &(lo, hi)) in ranges.iter().enumerate() {
                    let parts: Vec<String> = self
                        .layout
                        .iter()
                        .zip(&vars)
                        .filter(|((axis, _), _)| *axis == d)
                        .map(|(&(_, k), var)| match k {
                            1 => var.clone(),
                            k => format!("{k} * {var}"),
                        })
                        .collect();
                    let j = match &parts[..] {
                        [one] => one.clone(),
                        _ => format!("({})", parts.join(" + ")),
                    };
                    let j = if Some(d) == self.pair_axis {
                        format!("(2 * {j} + {h})")
                    } else {
                        j
                    };
                    let at = if lo == 0 {
                        j
                    } else {
                        format!("({j} + {})", long(lo)).replace("+ -", "- ")
                    };
                    if lo < 0 {
                        guard.push(format!("{at} >= 0"));
                    }
                    let odd = Some(d) == self.pair_axis && h == 1 && xshape[d] % 2 == 1;
                    if hi >= xshape[d] as i64 || odd {
                        guard.push(format!("{at} < {}", xshape[d]));
                    }
                    src.push((src_st[d] as i64, at));
                }
                let dst: Vec<(i64, String)> = dst_st
                    .iter()
                    .zip(&vars)
                    .map(|(&s, n)| (s as i64, n.clone()))
                    .collect();
                (dst, src, guard)
            })
            .collect::<Vec<_>>();
        let moves = if halves == 2 {
            // A pair as one 32-bit store of both channels (two 16-bit stores a lane apart
            // stayed scalar: the copy took 15% of a 1×1 convolution over 64 channels, and
            // this form, which GCC vectorizes, gave back a third of that).
            let x = &buffers[self.shape.x.tensor].name;
            let half = |h: usize| {
                let (_, src, guard) = &moves[h];
                let load = format!("(unsigned int){x}[{}]", linear(src));
                if guard.is_empty() {
                    load
                } else {
                    format!("({} ? {load} : 0u)", guard.join(" && "))
                }
            };
            let pairs: Vec<(i64, String)> =
                moves[0].0.iter().map(|(k, n)| (k / 2, n.clone())).collect();
            vec![Stmt::Assign {
                dst: Target::Var(format!(
                    "((unsigned int *){})[{}]",
                    buffers[xp.0].name,
                    linear(&pairs)
                )),
                op: AssignOp::Set,
                value: Value::Code(format!("{} | {} << 16", half(0), half(1))),
            }]
        } else {
            moves
                .into_iter()
                .map(|(dst, src, guard)| Stmt::Move {
                    dst: (xp, linear(&dst)),
                    src: (BufId(self.shape.x.tensor), linear(&src)),
                    width: 1,
                    guard,
                })
                .collect()
        };
        // The copy walks the input's rows before its channels (the last dimension kept
        // innermost for the vector loop), so that the threads share it out by rows, as
        // pixel tiles outermost share out the tiles: each thread then writes the rows its
        // own tiles read, and fewer lines of the copy move between the cores' caches at
        // every call. With pixel tiles outermost on prepacked weights, ResNet-50's 3×3
        // layer over 56×56 (R2 of the bench) ran at 192 GFLOPS copied channel by channel
        // and 207 by rows (two Zen 4 cores, medians; with no copy at all 208–221,
        // `bench/results/2026-11-27-zen4-cpu-copy-rows/`).
        let order = self.copy_order(dims.len());
        let dims: Vec<usize> = order.iter().map(|&d| dims[d]).collect();
        let vars: Vec<String> = order.iter().map(|&d| vars[d].clone()).collect();
        // The leading dimensions shared out among the threads: enough of them for 64
        // iterations (an NCHW first layer's 1 × 3 images and channels left one thread a
        // third of the copy to itself), the last one kept whole for the vector loop.
        let last = dims.len().saturating_sub(1).max(1);
        let outer = (1..last)
            .find(|&k| dims[..k].iter().product::<usize>() >= 64)
            .unwrap_or(last);
        let loops: Vec<Loop> = vars
            .iter()
            .zip(&dims)
            .enumerate()
            .map(|(d, (n, &e))| {
                let kind = if self.config.parallel && d < outer {
                    LoopKind::Parallel
                } else {
                    LoopKind::Serial
                };
                Loop {
                    var: n.clone(),
                    ty: IntType::Long,
                    start: "0".into(),
                    end: int(e),
                    step: Step::Inc,
                    trip: e,
                    kind,
                    index: None,
                    layout: Layout::Flat,
                    body: Vec::new(),
                }
            })
            .collect();
        let mut out = vec![Stmt::Comment(format!(
            "`{}` once, zero-padded: the tiles read it without bounds checks.",
            self.kernel.params[self.shape.x.tensor].name
        ))];
        out.extend(band(loops, moves));
        out
    }

    /// The order in which the padding copy's loops walk its `n` dimensions: those the
    /// output pixels index (batch, rows) first, then those only the reduction indexes (the
    /// input channels), each group in layout order, the last dimension last.
    fn copy_order(&self, n: usize) -> Vec<usize> {
        let reduction_only = |d: usize| {
            self.layout.get(d).is_some_and(|&(axis, _)| {
                self.shape.x.dims.get(axis).is_some_and(|dim| {
                    dim.terms
                        .iter()
                        .all(|(v, _)| self.shape.reduction.contains(v))
                })
            })
        };
        let Some(last) = n.checked_sub(1) else {
            return Vec::new();
        };
        let (channels, rows): (Vec<usize>, Vec<usize>) =
            (0..last).partition(|&d| reduction_only(d));
        rows.into_iter().chain(channels).chain([last]).collect()
    }

    /// `td_conv_xtile(inputs.., xt, t)` (the fused copy): fills this thread's `xt` with
    /// pixel tile `t`'s pixels — for each input channel, the tile's pixels from its first
    /// vector's on (the tile's span, cut at the run's end); in `bf16` pairs, for each pair
    /// of input channels, each pixel as one 32-bit pair (an odd last channel paired with
    /// zero).
    fn xtile_func(&self, buffers: &[Buffer], xt: BufId) -> Func {
        if !self.tile.pixel_vector {
            return self.channel_xtile_func(buffers, xt);
        }
        let (mr, run) = (self.mr, self.run);
        let (_, tiles) = self.pixel_tiles();
        let [pb, p0] = self.pixel_tile_start();
        let x = &buffers[self.shape.x.tensor].name;
        let xt_name = &buffers[xt.0].name;
        let c = self.copy_index;
        let ce = self.extents[c];
        let sc = self.xread.coef[c];
        let mut xb: Vec<(i64, String)> = self
            .shape
            .pixels
            .iter()
            .map(|&t| (self.xread.coef[t], self.pixel_var(t, 0)))
            .collect();
        xb.push((self.xread.base, "1".into()));
        let hi = if ce % 2 == 1 {
            format!("(2 * cp + 1 < {ce} ? (unsigned int){x}[xb + (2 * cp + 1) * {sc} + p] : 0u)")
        } else {
            format!("(unsigned int){x}[xb + (2 * cp + 1) * {sc} + p]")
        };
        let copy = if self.pair.is_some() {
            Stmt::Assign {
                dst: Target::Var(format!("((unsigned int *){xt_name})[cp * {mr} + p]")),
                op: AssignOp::Set,
                value: Value::Code(format!(
                    "(unsigned int){x}[xb + 2 * cp * {sc} + p] | {hi} << 16"
                )),
            }
        } else {
            Stmt::Assign {
                dst: Target::Var(format!("{xt_name}[cp * {mr} + p]")),
                op: AssignOp::Set,
                value: Value::Code(format!("{x}[xb + cp * {sc} + p]")),
            }
        };
        let inner = Stmt::Loop(Loop {
            var: "p".into(),
            ty: IntType::Long,
            start: "0".into(),
            end: "np".into(),
            step: Step::Inc,
            trip: mr,
            kind: LoopKind::Serial,
            index: None,
            layout: Layout::Flat,
            body: vec![copy],
        });
        let mut per_channel = vec![inner];
        // Without pairs, the next tile's lines of each input channel (the same run, `mr`
        // pixels on), fetched while this tile is copied: a tile reads one line from each of
        // as many channel rows as the input has channels (64 over 56×56 for R1 and R3 of
        // the bench), more streams than the hardware prefetcher follows. Two Zen 3 cores,
        // generated C side by side, with against without, per process, every call / every
        // tenth call after another library's: R3 (64 → 256 channels) 1.10, 1.20 / 1.04×,
        // R6 (128 → 512 over 28×28) 1.10, 1.11 / 1.04×, R1 (64 → 64) 1.16, 0.92 / 1.06×
        // (`bench/results/2026-11-28-zen3-cpu-kblock-default/`). Each line's last pixel:
        // on an input not aligned to lines, a tile's first line is the last one of the tile
        // before it, already in the cache (R3 with input and output 16 bytes past a page:
        // 1.01–1.05× against the first pixel, `bench/results/2026-11-28-zen3-cpu-align/`).
        let line = LINE_BYTES / 4;
        let fetches: Vec<usize> = (0..mr.div_ceil(line))
            .map(|i| mr + (line * i + line - 1).min(mr - 1))
            .collect();
        if self.pair.is_none() {
            per_channel.push(Stmt::If {
                cond: "next".into(),
                then: (0..fetches.len())
                    .map(|i| Stmt::Call {
                        func: "__builtin_prefetch".into(),
                        args: vec![
                            format!("&{x}[xb + cp * {sc} + pf_{i}]"),
                            "0".into(),
                            "3".into(),
                        ],
                    })
                    .collect(),
                els: None,
                braced: fetches.len() > 1,
            });
        }
        let params = self.xtile_params(xt);
        let mut body = vec![Stmt::Assume(format!("t >= 0 && t < {tiles}")), pb, p0];
        if let Some(line) = self.shift {
            body.push(Stmt::Assume(format!("sh >= 0 && sh < {line}")));
            body.push(self.past_run_end());
        }
        body.extend([
            let_long(
                "ps",
                if self.shift.is_some() {
                    "p0 < pb ? pb : p0".into()
                } else {
                    self.vector_start(0)
                },
            ),
            // Pixels to copy: the tile's, or at a run's end those left in it.
            let_long(
                "np",
                if run.is_multiple_of(mr) || self.shift.is_some() {
                    mr.to_string()
                } else {
                    format!("pb + {run} - ps < {mr} ? pb + {run} - ps : {mr}")
                },
            ),
        ]);
        if self.pair.is_none() {
            // Whether a next tile starts in this run, and where its lines end (from `ps`).
            body.push(let_long("next", format!("p0 + {mr} < pb + {run}")));
            for (i, f) in fetches.iter().enumerate() {
                body.push(let_long(
                    &format!("pf_{i}"),
                    format!("(p0 + {f} < pb + {run} ? p0 + {f} : pb + {}) - ps", run - 1),
                ));
            }
        }
        body.extend([self.pixel_lets("ps", 0), let_long("xb", linear(&xb))]);
        if self.shift.is_some() {
            // A tile across its run's start or end: its pixels in the run, zeros outside.
            let px = "p0 + p";
            let copy = Stmt::Assign {
                dst: Target::Var(format!("{xt_name}[cp * {mr} + p]")),
                op: AssignOp::Set,
                value: Value::Code(format!(
                    "{px} >= pb && {px} < pb + {run} ? {x}[xb + cp * {sc} + {px} - ps] : 0.0f"
                )),
            };
            let pixels = for_each("p", mr, LoopKind::Serial, Layout::Flat, vec![copy]);
            body.push(Stmt::If {
                cond: format!("p0 < pb || p0 + {mr} > pb + {run}"),
                then: vec![
                    for_each(
                        "cp",
                        self.steps_of(c),
                        LoopKind::Serial,
                        Layout::Flat,
                        vec![pixels],
                    ),
                    Stmt::Return,
                ],
                els: None,
                braced: true,
            });
        }
        body.push(for_each(
            "cp",
            self.steps_of(c),
            LoopKind::Serial,
            Layout::Braced,
            per_channel,
        ));
        Func {
            name: XTILE.into(),
            params,
            body,
        }
    }

    /// `td_conv_xtile(inputs.., xt, t)` for channel-vector tiles: fills this thread's `xt`
    /// with the `mr` pixels of pixel tile `t` (from pixel `t · mr`; past the last pixel,
    /// the last again, as the tile clamps them) side by side for each input channel,
    /// gathered from the input in place at each pixel's own offset (any stride).
    ///
    /// A whole tile within one row of the innermost pixel index is copied by a loop over
    /// its pixels at that index's input step, which GCC vectorizes (loads and shuffles;
    /// element by element, the copy of R4's tiles below cost about what their FMAs did
    /// single-threaded), and each input channel's lines of the next tile (its first
    /// pixel's, each line on to its last pixel's) are fetched while this one is copied: a
    /// tile reads a line or two from each of as many channel planes as the input has
    /// channels, more streams than the hardware prefetcher follows. Two Cascade Lake cores
    /// (AVX-512), defaults' generated C side by side, before / after, buffers 16 bytes past
    /// a page and aligned, every call and every tenth after another library's
    /// (`bench/results/2026-11-28-cascadelake-cpu/`): R4 of the bench (1×1 stride 2, 256 →
    /// 128 channels over 56×56) 1.16–1.37× in eight pairs (oneDNN still 1.1–1.4× ahead),
    /// R7 0.96–1.14×, R9 (stride 1, 14-pixel rows) 1.00–1.20×. Tiles across rows (R10,
    /// R12: 10-pixel tiles over 7-pixel rows) keep the gather without fetches: fetching
    /// the next tile's first and last pixels' lines there measured 0.83–1.02×.
    fn channel_xtile_func(&self, buffers: &[Buffer], xt: BufId) -> Func {
        let mr = self.mr;
        let np = self.shape.pixel_count(self.extents);
        let x = &buffers[self.shape.x.tensor].name;
        let xt_name = &buffers[xt.0].name;
        let c = self.copy_index;
        let sc = self.xread.coef[c];
        let copies: Vec<Stmt> = (0..mr)
            .map(|m| Stmt::Assign {
                dst: Target::Var(format!("{xt_name}[cp * {mr} + {m}]")),
                op: AssignOp::Set,
                value: Value::Code(format!("{x}[xs_{m} + cp * {sc}]")),
            })
            .collect();
        let params = self.xtile_params(xt);
        let mut body = vec![
            Stmt::Assume(format!("t >= 0 && t < {}", self.copy_tiles())),
            let_long("p0", format!("t * {mr}")),
        ];
        body.extend(self.pixel_prelude(None, true));
        let in_row = self
            .shape
            .pixels
            .iter()
            .rev()
            .copied()
            .find(|&t| self.extents[t] > 1)
            .filter(|&t| mr > 1 && mr <= self.extents[t]);
        // The fast path: a whole tile whose other pixel indices are its first pixel's.
        if let Some(t_in) = in_row {
            let step = self.xread.coef[t_in];
            let mut conds: Vec<String> = Vec::new();
            if !np.is_multiple_of(mr) {
                conds.push(format!("p0 + {mr} <= {np}"));
            }
            conds.extend(
                self.shape
                    .pixels
                    .iter()
                    .filter(|&&u| u != t_in && self.extents[u] > 1)
                    .map(|&u| format!("{} == {}", self.pixel_var(u, mr - 1), self.pixel_var(u, 0))),
            );
            // The next tile's first and last pixels (`xs_<mr>`, `xs_<2mr-1>`, clamped to
            // the last pixel) and, were it in one row too, each line between them.
            let (first, last) = (mr, 2 * mr - 1);
            for m in [first, last] {
                let px = format!("px_{m}");
                body.push(let_long(
                    &px,
                    format!("p0 + {m} < {np} ? p0 + {m} : {}", np - 1),
                ));
                body.push(self.pixel_lets(&px, m));
                body.push(self.x_offset(m));
            }
            let line = (LINE_BYTES / 4) as i64;
            let span = (mr as i64 - 1) * step.abs() + 1;
            let mut fetches = vec![format!("xs_{first}")];
            fetches.extend(
                (1..(span + line - 1) / line)
                    .map(|j| format!("xs_{first} + {}", j * line * step.signum())),
            );
            fetches.push(format!("xs_{last}"));
            let mut per_channel: Vec<Stmt> = fetches
                .iter()
                .map(|at| Stmt::Call {
                    func: "__builtin_prefetch".into(),
                    args: vec![format!("&{x}[{at} + cp * {sc}]"), "0".into(), "3".into()],
                })
                .collect();
            let copy = for_each(
                "m",
                mr,
                LoopKind::Unrolled(mr),
                Layout::Braced,
                vec![Stmt::Assign {
                    dst: Target::Var(format!("{xt_name}[cp * {mr} + m]")),
                    op: AssignOp::Set,
                    value: Value::Code(format!("{x}[xs_0 + cp * {sc} + {step} * m]")),
                }],
            );
            per_channel.push(copy);
            let fast = for_each(
                "cp",
                self.steps_of(c),
                LoopKind::Serial,
                Layout::Braced,
                per_channel,
            );
            if conds.is_empty() {
                body.push(fast);
                return Func {
                    name: XTILE.into(),
                    params,
                    body,
                };
            }
            body.push(Stmt::If {
                cond: conds.join(" && "),
                then: vec![fast, Stmt::Return],
                els: None,
                braced: true,
            });
        }
        body.push(for_each(
            "cp",
            self.steps_of(c),
            LoopKind::Serial,
            Layout::Braced,
            copies,
        ));
        Func {
            name: XTILE.into(),
            params,
            body,
        }
    }

    /// `td_conv_xtile`'s parameters: the inputs, this thread's `xt` and the pixel tile `t`.
    fn xtile_params(&self, xt: BufId) -> Vec<Param> {
        let mut params: Vec<Param> = self
            .kernel
            .inputs()
            .into_iter()
            .map(|i| Param::Buffer {
                buf: BufId(i),
                konst: true,
            })
            .collect();
        params.push(Param::Buffer {
            buf: xt,
            konst: false,
        });
        params.push(Param::Scalar {
            ty: IntType::Long,
            name: "t".into(),
        });
        if self.shift.is_some() {
            params.push(Param::Scalar {
                ty: IntType::Long,
                name: "sh".into(),
            });
        }
        params
    }

    /// Pixel tiles of the fused copy: a pixel-vector schedule's ([`Conv::pixel_tiles`]), or
    /// the fused pixel axis in tiles of `mr`.
    fn copy_tiles(&self) -> usize {
        if self.tile.pixel_vector {
            self.pixel_tiles().1
        } else {
            self.shape.pixel_count(self.extents).div_ceil(self.mr)
        }
    }

    /// `td_conv_tiles(inputs.., wall, out)` (the fused copy), on the panels in `wall`:
    /// pixel tiles outermost, each thread copying a pixel tile's pixels (pairs) once
    /// ([`Conv::xtile_func`]) and running every channel tile on them; or ([`whole_copy`])
    /// every pixel tile copied first into one shared copy, then channel tiles outermost.
    fn fused_tiles_func(&self, buffers: &[Buffer], xt: BufId) -> Func {
        if whole_copy(self.tile) {
            return self.whole_copy_tiles_func(buffers, xt);
        }
        let fe = self.extents[self.shape.f];
        let wall = &buffers[self.wall.0].name;
        let work = vec![
            Stmt::If {
                cond: "t != pk_t".into(),
                then: vec![
                    self.xtile_call(buffers, buffers[xt.0].name.clone()),
                    Stmt::Assign {
                        dst: Target::Var("pk_t".into()),
                        op: AssignOp::Set,
                        value: Value::Code("t".into()),
                    },
                ],
                els: None,
                braced: true,
            },
            if self.tile.pixel_vector {
                self.tile_call(buffers, "t", &self.wall_panel(wall))
            } else {
                self.tile_call(buffers, &format!("t * {}", self.mr), &self.wall_panel(wall))
            },
        ];
        let mut region = vec![
            Stmt::Comment(format!(
                "This thread's copy of a pixel tile's {} of `{}`.",
                if self.pair.is_some() {
                    "pairs"
                } else {
                    "pixels"
                },
                self.kernel.params[self.shape.x.tensor].name
            )),
            Stmt::Alloc {
                buf: xt,
                init: None,
            },
            Stmt::Let {
                ty: Ty::Int(IntType::Long),
                konst: false,
                defs: vec![("pk_t".into(), Value::Code("-1".into()))],
            },
        ];
        region.extend(band(
            vec![
                self.tile_loop("t", self.copy_tiles(), 1),
                self.tile_loop("f0", fe, self.v),
            ],
            vec![Stmt::Block(work)],
        ));
        region.push(Stmt::Free(xt));
        let mut body = Vec::new();
        if let Some(line) = self.shift {
            let out = &buffers[self.kernel.output].name;
            body.push(Stmt::Comment(format!(
                "Tiles aligned to `{}`: each run's start `sh` pixels past a {}-pixel boundary.",
                self.kernel.params[self.kernel.output].name, line
            )));
            body.push(let_long(
                "sh",
                format!("(long)((size_t){out} / sizeof(float) % {line})"),
            ));
        }
        body.push(Stmt::Region {
            parallel: self.config.parallel,
            body: region,
        });
        Func {
            name: TILES.into(),
            params: super::pointer_params(self.kernel, Some(self.wall)),
            body,
        }
    }

    /// `td_conv_xtile(inputs.., xt, t[, sh])`: the fused copy of pixel tile `t` into `xt`
    /// (C text).
    fn xtile_call(&self, buffers: &[Buffer], xt: String) -> Stmt {
        let mut args: Vec<String> = self
            .kernel
            .inputs()
            .into_iter()
            .map(|i| buffers[i].name.clone())
            .collect();
        args.extend([xt, "t".into()]);
        if self.shift.is_some() {
            args.push("sh".into());
        }
        Stmt::Call {
            func: XTILE.into(),
            args,
        }
    }

    /// [`Conv::fused_tiles_func`] over one shared copy of every pixel tile ([`whole_copy`]):
    /// the threads share out the pixel tiles' copies, then the channel tiles, each through
    /// every pixel tile.
    fn whole_copy_tiles_func(&self, buffers: &[Buffer], xt: BufId) -> Func {
        let fe = self.extents[self.shape.f];
        let wall = &buffers[self.wall.0].name;
        let xt_name = &buffers[xt.0].name;
        let tiles = self.copy_tiles();
        // Pixel tile `t`'s stretch of the shared copy.
        let at = format!(
            "{xt_name} + t * {}",
            self.extents[self.copy_index] * self.mr
        );
        let mut tile = self.tile_call(buffers, &format!("t * {}", self.mr), &self.wall_panel(wall));
        if let Stmt::Call { args, .. } = &mut tile {
            for a in args.iter_mut().filter(|a| *a == xt_name) {
                a.clone_from(&at);
            }
        }
        let mut region = vec![Stmt::Comment(format!(
            "Every pixel tile's pixels of `{}`, copied once: then each channel tile walks them.",
            self.kernel.params[self.shape.x.tensor].name
        ))];
        region.extend(band(
            vec![self.tile_loop("t", tiles, 1)],
            vec![self.xtile_call(buffers, at.clone())],
        ));
        region.extend(band(
            vec![
                self.tile_loop("f0", fe, self.v),
                self.tile_loop("t", tiles, 1),
            ],
            vec![tile],
        ));
        Func {
            name: TILES.into(),
            params: super::pointer_params(self.kernel, Some(self.wall)),
            body: vec![
                Stmt::Alloc {
                    buf: xt,
                    init: None,
                },
                Stmt::Region {
                    parallel: self.config.parallel,
                    body: region,
                },
                Stmt::Free(xt),
            ],
        }
    }

    /// `td_conv_run(inputs.., wall, out)` with the fused copy: the tiles on the prepacked
    /// weights, or where `wall` is null on every panel packed first into scratch.
    fn fused_run_func(&self, buffers: &[Buffer], walls: BufId) -> Func {
        let name = |b: BufId| buffers[b.0].name.clone();
        let inputs: Vec<String> = self
            .kernel
            .inputs()
            .into_iter()
            .map(|p| name(BufId(p)))
            .collect();
        let out = name(BufId(self.kernel.output));
        let call = |w: String| {
            let mut args = inputs.clone();
            args.push(w);
            args.push(out.clone());
            Stmt::Call {
                func: TILES.into(),
                args,
            }
        };
        Func {
            name: RUN.into(),
            params: super::pointer_params(self.kernel, Some(self.wall)),
            body: vec![Stmt::If {
                cond: name(self.wall),
                then: vec![call(name(self.wall))],
                els: Some(vec![
                    Stmt::Alloc {
                        buf: walls,
                        init: None,
                    },
                    Stmt::Call {
                        func: PREPACK.into(),
                        args: vec![name(BufId(self.shape.w.tensor)), name(walls)],
                    },
                    call(name(walls)),
                    Stmt::Free(walls),
                ]),
                braced: true,
            }],
        }
    }

    /// `td_conv_run(inputs.., wall, out)`: the convolution, on the prepacked weights
    /// `wall` or, where it is null, on weights each thread packs into its panel.
    fn run_func(&self, buffers: &[Buffer], ranges: &[(i64, i64)]) -> Func {
        let (fe, np) = (
            self.extents[self.shape.f],
            self.shape.pixel_count(self.extents),
        );
        let tiles = |var: &str, e: usize, step: usize| self.tile_loop(var, e, step);
        let wall = &buffers[self.wall.0].name;
        // Without prepacked weights, this thread packs channel tile `f0` into its panel.
        let pack = Stmt::If {
            cond: format!("!{wall}"),
            then: vec![Stmt::Call {
                func: PACK.into(),
                args: vec![
                    buffers[self.shape.w.tensor].name.clone(),
                    buffers[self.wp.0].name.clone(),
                    "f0".into(),
                ],
            }],
            els: None,
            braced: false,
        };
        let refill = vec![
            pack.clone(),
            Stmt::Assign {
                dst: Target::Var("pk_f0".into()),
                op: AssignOp::Set,
                value: Value::Code("f0".into()),
            },
        ];
        let (pixel_var, pixel_loop) = if self.tile.pixel_vector {
            ("t", tiles("t", self.pixel_tiles().1, 1))
        } else {
            ("p0", tiles("p0", np, self.mr))
        };
        // The tile on channel tile `f0`'s panel: `panel` in place of this thread's.
        let wp = &buffers[self.wp.0].name;
        let tile_call = |panel: String| self.tile_call(buffers, pixel_var, &panel);
        // The prepacked panel of this channel tile, if any.
        let panel = format!("{wall} ? {} : {wp}", self.wall_panel(wall));
        // This thread's panel refilled where the channel tile changed.
        let refill_on_change = || Stmt::If {
            cond: "f0 != pk_f0".into(),
            then: refill.clone(),
            els: None,
            braced: true,
        };
        let work = vec![Stmt::Block(vec![
            refill_on_change(),
            tile_call(panel.clone()),
        ])];
        let blocked = self.kblock.zip(self.part);
        let serial = |l: Loop, body: Vec<Stmt>| {
            Stmt::Loop(Loop {
                kind: LoopKind::Serial,
                layout: Layout::Braced,
                body,
                ..l
            })
        };
        // The pixel tiles of the pixel block from `b0` of `bt` tiles.
        let block_pixels = |bt: usize, body: Vec<Stmt>| {
            let span = bt * self.mr;
            serial(
                Loop {
                    start: "b0".into(),
                    end: format!("(b0 + {span} < {np} ? b0 + {span} : {np})"),
                    trip: bt,
                    ..tiles("p0", np, self.mr)
                },
                body,
            )
        };
        // The channel tile this thread's panel holds (-1: none yet).
        let pk_f0 = || Stmt::Let {
            ty: Ty::Int(IntType::Long),
            konst: false,
            defs: vec![("pk_f0".into(), Value::Code("-1".into()))],
        };
        let mut region = self.pad_input(buffers, ranges);
        region.extend([
            Stmt::Comment(format!(
                "This thread's panel of `{}`: every reduction point x {} channels.",
                self.kernel.params[self.shape.w.tensor].name, self.v
            )),
            Stmt::Alloc {
                buf: self.wp,
                init: None,
            },
        ]);
        if let Some(((r, kc), part)) = blocked {
            // Reduction blocks ([`CpuConfig::k_block`]): per channel tile, each block of
            // input channels through every pixel tile, or in pixel blocks through each
            // block's tiles.
            region.push(Stmt::Alloc {
                buf: part,
                init: None,
            });
            let e = self.steps_of(r);
            let c1 = let_long("c1", format!("c0 + {kc} < {e} ? c0 + {kc} : {e}"));
            if let Some(bt) = self.pixel_block() {
                // In pixel blocks ([`ConvTile::block_tiles`]): per channel tile and block of
                // pixel tiles (both shared out among the threads), each reduction block
                // through the block's pixel tiles.
                let pixels = block_pixels(bt, vec![tile_call(panel)]);
                let blocks = serial(tiles("c0", e, kc), vec![c1, pixels]);
                region.push(pk_f0());
                region.extend(band(
                    vec![tiles("f0", fe, self.v), tiles("b0", np, bt * self.mr)],
                    vec![Stmt::Block(vec![refill_on_change(), blocks])],
                ));
            } else {
                // The channel tiles shared out among the threads, each packed once (no
                // `pk_f0`).
                let pixels = serial(tiles("p0", np, self.mr), vec![tile_call(panel)]);
                let blocks = serial(tiles("c0", e, kc), vec![c1, pixels]);
                region.push(Stmt::Loop(Loop {
                    layout: Layout::Braced,
                    body: vec![pack, blocks],
                    ..tiles("f0", fe, self.v)
                }));
            }
            region.push(Stmt::Free(part));
        } else if self.tile.pixels_outer {
            region.push(pk_f0());
            // On prepacked weights, pixel tiles outermost ([`ConvTile::pixels_outer`]):
            // a tile's input stays in L1 while every channel tile uses it, and each thread
            // reads its share of the input once, not once per channel tile. Timed in a C
            // harness over 24 placements of the buffers, single-threaded: R3 of the bench
            // (a pixel-vector tile, 32 channel tiles over an 802 KB input) 265–278 GFLOPS
            // against 231–264, R1 248–272 against 229–270; both cores R1 531–534 against
            // 508–522, R3 533–548 against 517–520. Weights packed by each thread keep
            // channel tiles outermost (one packing per channel tile).
            let on_packed = vec![tile_call(self.wall_panel(wall))];
            let then = match self.pixel_block() {
                // In pixel blocks ([`ConvTile::block_tiles`]), each walking the channel
                // tiles outermost: one channel tile's panel stays in L1 through the block.
                Some(bt) => band(
                    vec![tiles("b0", np, bt * self.mr), tiles("f0", fe, self.v)],
                    vec![block_pixels(bt, on_packed)],
                ),
                None => band(vec![pixel_loop.clone(), tiles("f0", fe, self.v)], on_packed),
            };
            region.push(Stmt::If {
                cond: wall.clone(),
                then,
                els: Some(band(vec![tiles("f0", fe, self.v), pixel_loop], work)),
                braced: true,
            });
        } else {
            region.push(pk_f0());
            region.extend(band(vec![tiles("f0", fe, self.v), pixel_loop], work));
        }
        region.push(Stmt::Free(self.wp));
        // One parallel region per call: the padding copy and the tiles share it.
        let mut body: Vec<Stmt> = self
            .xp
            .map(|buf| Stmt::Alloc { buf, init: None })
            .into_iter()
            .collect();
        body.push(Stmt::Region {
            parallel: self.config.parallel,
            body: region,
        });
        body.extend(self.xp.map(Stmt::Free));
        Func {
            name: RUN.into(),
            params: super::pointer_params(self.kernel, Some(self.wall)),
            body,
        }
    }
}
