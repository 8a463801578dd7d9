//! The CPU convolution schedule: a direct-convolution register tile that vectorizes the
//! output channel and fuses every other output axis into one pixel axis.
//!
//! It is chosen for kernels of the convolution form `y[[.., f, ..]] += x[[...]] * w[[...]]`
//! ([`ConvShape`]): one input (`x`) read through affine maps (strides, offsets, padding),
//! one input (`w`) read with plain indices, and an output index `f` that `w` reads and `x`
//! does not. The loop nest ([`crate::lower::cpu_conv`]) is
//!
//! ```text
//! (pad) copy x once into a zero-padded scratch buffer (widened to float; in bf16 pairs
//!       raw, two channels side by side), so the hot loop
//!       has no bounds checks
//! parallel for f0 in steps of `vector`, pixel block p0 in steps of `pixels`:
//!     when f0 changed: pack w[f0..f0+vector, every reduction point] into this thread's
//!                      panel wp[reduction point][vector] (zeros past the last f), by
//!                      16×16 in-register transposes where w[f][point] is row-major
//!     acc[pixels][vector] = 0                              // vector registers
//!     for every reduction point (c, r, s, ...):
//!         for each pixel m:  acc[m][:] += x[pixel m, point] * wp[point][:]   // broadcast-FMA
//!     acc = epilogue(acc)
//!     store: channels unit-stride (NHWC): acc[m] as vectors; pixels unit-stride (NCHW):
//!            16×16 in-register transposes, one masked vector store per channel; edge
//!            tiles and other layouts: one store per element
//! ```
//!
//! With `bf16` inputs ([`CpuConfig::pairs`], `conv_vector=pairs`, the default where the CPU
//! has AVX-512 BF16) the input channels go in pairs: the padded copy holds channels `2c` and
//! `2c + 1` of each pixel side by side (raw `bf16`, not widened), the panel the weights'
//! pairs, and each step of the hot loop is one 32-bit broadcast of a pixel's pair and one
//! `vdpbf16ps` per channel vector: two points per instruction on half the bytes
//! ([`crate::lower::cpu_conv`]). `conv_vector=pixel_pairs` is the pixel-vector tile
//! ([`ConvTile::pixel_vector`]) in pairs: 16 pixels' pairs per vector, each channel's weight
//! pair broadcast.
//!
//! The pixel axis is every output index but `f`, fused in output order (for NCHW, `n·p·q`),
//! so a 7×7 plane is 49 pixels cut in tiles of `pixels`, not a 7-wide vector. A 1×1
//! convolution is then a matmul `F×C · C×PQ` with a `pixels × vector` register tile.
//!
//! ```
//! use tensor_dsl::{ir::parse_text, template::cpu::CpuConfig};
//! let k = parse_text("conv",
//!     "y[[n, f, p, q]] += x[[n, c, 2 * p + r - 1, 2 * q + s - 1]] * w[[f, c, r, s]]", None)
//!     .unwrap();
//! // n f p q c r s
//! let cfg = CpuConfig::heuristic(&k, &[1, 64, 28, 28, 32, 3, 3], 16);
//! let conv = cfg.conv.as_ref().unwrap();
//! assert_eq!((cfg.vector_axis, cfg.vector), (Some(1), 32));
//! assert!(conv.pixels >= 4 && conv.pixels <= 14);
//! ```

use crate::ir::{Access, BinOp, BodyKind, DType, Expr, Kernel};
use crate::template::cpu::CpuConfig;
use serde::{Deserialize, Serialize};
use tuner::{Config, SearchSpace, Value};

/// The convolution knobs of a [`CpuConfig`] (its `conv` field); the output channel tile is
/// the config's `vector` along `vector_axis`, and `parallel`/`wide_simd` mean what they
/// mean for every CPU schedule.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ConvTile {
    /// Output pixels (the fused non-channel output axes) per register tile.
    pub pixels: usize,
    /// Copy the affine input once into a zero-padded scratch buffer (no bounds checks in
    /// the hot loop); `false` reads it in place, each read guarded.
    pub pad: bool,
    /// Pack the weights by 16×16 in-register transposes (GNU C vector shuffles) where their
    /// reduction points are contiguous in memory and the channel tile is a multiple of 16;
    /// `false` packs them one element at a time.
    #[serde(default)]
    pub transpose: bool,
    /// Store the tile as vectors where the output allows it
    /// ([`crate::lower::cpu_conv`]: whole channel vectors where channels are unit-stride,
    /// else in-register transposes of the target's vectors and a store of each channel's
    /// pixels where the pixels are: masked with AVX-512, four lanes and then one by one with
    /// AVX2); `false` stores one element at a time.
    #[serde(default)]
    pub vector_store: bool,
    /// Vectorize the pixels instead of the channels: the register tile is `vector` output
    /// channels (each weight broadcast) by `pixels` pixels (a multiple of
    /// [`PIXEL_LANES`], loaded as vectors from the input and stored as vectors into the
    /// output), so an output whose pixels are unit-stride (NCHW) is stored without
    /// transposes. Needs pixels that lie one after another in the (padded) input and in the
    /// output for at least [`PIXEL_LANES`] ([`ConvShape::pixel_run`]; a strided window's
    /// pixels through its window-expanded copy, [`ConvShape::window_axis`]), an `f32`
    /// output and the unguarded (`pad`) read.
    #[serde(default)]
    pub pixel_vector: bool,
    /// On weights packed ahead (`td_kernel_prepacked`), walk the pixel tiles outermost:
    /// each pixel tile's input stays in L1 while every channel tile uses it, and the
    /// weights are read again per pixel tile; `false` walks the channel tiles outermost
    /// (the input read again per channel tile; over the fused copy of a 1×1 convolution,
    /// every pixel tile's copy made first). Weights packed at the call always walk
    /// channel tiles outermost (one packing per channel tile).
    #[serde(default)]
    pub pixels_outer: bool,
    /// The pixel tiles in blocks of this many (0, or at least the pixel tiles there are:
    /// one block of them all). With reduction blocks ([`CpuConfig::k_block`]) each block of
    /// pixel tiles runs every reduction block before the next pixel block starts, so its
    /// partial sums, the reduction block's panel rows and the input rows it reads stay in
    /// L1. Without them, with pixel tiles outermost on prepacked weights, each pixel block
    /// walks the channel tiles outermost, so one channel tile's panel stays in L1 through
    /// the block. The template derives it from the caches ([`block_tiles`]).
    #[serde(default)]
    pub block_tiles: usize,
}

impl ConvTile {
    /// A pixel-vector tile of `pixels` pixels ([`ConvTile::pixel_vector`]) as the default
    /// takes it: the unguarded read, vector stores, pixel tiles outermost, weights packed
    /// element by element, no pixel blocks.
    pub fn pixel_vectors(pixels: usize) -> ConvTile {
        ConvTile {
            pixels,
            pad: true,
            transpose: false,
            vector_store: true,
            pixel_vector: true,
            pixels_outer: true,
            block_tiles: 0,
        }
    }
}

/// Pixel tiles per pixel block ([`ConvTile::block_tiles`]) of a channel-vector tile of
/// `vector` channels × `pixels` on `machine`, for a convolution of `reread`'s figures.
///
/// With reduction blocks of `k_block`: as many as fill half of L1 with their `f32` partial
/// sums. Why: without pixel blocks each reduction block walks every pixel tile, whose
/// partial sums (200 KB for ResNet-50's R2 in 16 × 6 tiles) and input rows stream from L2
/// once per block; with two threads that ran R2 at 78–118 GFLOPS against 107–130 without
/// reduction blocks. In pixel blocks of 40 tiles (15 KB of partial sums), blocks of 16
/// channels: 108–133 on two threads, 60–79 on one against 53–70
/// (`bench/results/2026-11-28-zen3-cpu-reread/`).
///
/// Without them, with pixel tiles outermost (`pixels_outer`) where one channel tile's panel
/// fits in three quarters of L1 and all the channel tiles' panels do not: as many as read
/// half of L2 of input (a tile's pixels × the reduction's points, an upper bound where
/// windows overlap), each block walking the channel tiles outermost. Why: pixel tiles
/// outermost walk every channel tile's panel per pixel tile, which then streams from L2
/// (ResNet-50's stem R0, 7×7 over 3 channels, in 32 × 14 tiles: two 18.8 KB panels against
/// a 32 KB L1), while in pixel blocks one panel stays in L1 through the block and each
/// thread still reads the input rows it copied. Two Cascade Lake cores, generated C side
/// by side, every call and every tenth after another library's: R0 in blocks of 63 tiles
/// 1.12–1.27× of pixel tiles outermost (channel tiles outermost 1.00–1.15× of the blocks),
/// single-threaded 1.42–1.47× (`bench/results/2026-11-28-cascadelake-cpu-order/`). Else 0
/// (one block of them all).
pub fn block_tiles(
    machine: Machine,
    reread: &WeightReread,
    (vector, pixels): (usize, usize),
    k_block: usize,
    pixels_outer: bool,
) -> usize {
    let tile = (vector * pixels * 4).max(1);
    if k_block > 0 {
        return (machine.l1 / 2 / tile).max(1);
    }
    let panel = reread.panel(vector);
    if !pixels_outer
        || reread.channels <= vector
        || panel > machine.l1 / 4 * 3
        || reread.weights(vector) <= machine.l1
    {
        return 0;
    }
    (machine.l2 / 2 / (pixels * reread.points * 4).max(1)).max(1)
}

/// Channels and reduction points of one in-register transpose of the weight packing.
pub const TRANSPOSE: usize = 16;

/// Pixels of one vector of a pixel-vector tile ([`ConvTile::pixel_vector`]) with AVX-512,
/// and in configs from before they carried the target's lanes; see [`pixel_lanes`].
pub const PIXEL_LANES: usize = 16;

/// Pixels of one vector of `config`'s pixel-vector tiles: the target's lanes
/// ([`CpuConfig::vector_code`]: 8 with AVX2), at most [`PIXEL_LANES`].
pub fn pixel_lanes(config: &CpuConfig) -> usize {
    match config.vector_code {
        0 => PIXEL_LANES,
        l => l.min(PIXEL_LANES),
    }
}

/// Pixels of the longest run of the fused pixel axis (`pixels`, outermost first) whose
/// elements lie one after another, given each pixel index's element stride: the product of
/// the innermost axes whose strides follow the fused order from 1 (axes of extent 1 move
/// nothing and are passed over).
pub fn contiguous_run(pixels: &[usize], extents: &[usize], stride: impl Fn(usize) -> i64) -> usize {
    let (mut run, mut expect) = (1usize, 1i64);
    for &t in pixels.iter().rev() {
        let e = extents[t];
        if e == 1 {
            continue;
        }
        if stride(t) != expect {
            break;
        }
        run *= e;
        expect *= e as i64;
    }
    run
}

/// An input axis read as `stride · pixel + window` ([`ConvShape::window_axis`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WindowAxis {
    /// The axis of `x`.
    pub axis: usize,
    /// The reduction index of the window (`s`).
    pub window: usize,
    /// The innermost moving pixel index (`q`).
    pub pixel: usize,
    /// Its stride (`S > 1`).
    pub stride: i64,
}

/// What makes a kernel a convolution for this template.
#[derive(Clone, Debug, PartialEq)]
pub struct ConvShape {
    /// The input read through affine maps.
    pub x: Access,
    /// The input read with plain indices (the weights), packed per channel tile.
    pub w: Access,
    /// The vectorized output index: read by `w`, not by `x`.
    pub f: usize,
    /// The other output indices, in output order: the fused pixel axis.
    pub pixels: Vec<usize>,
    /// The reduction indices, in kernel order.
    pub reduction: Vec<usize>,
}

impl ConvShape {
    /// The convolution form of `kernel`, if it has one (see the module docs).
    pub fn of(kernel: &Kernel) -> Option<ConvShape> {
        if kernel.kind != BodyKind::Sum || kernel.is_staged() || kernel.reduction().is_empty() {
            return None;
        }
        let Expr::Bin(BinOp::Mul, a, b) = &kernel.body else {
            return None;
        };
        let (Expr::Access(a), Expr::Access(b)) = (a.as_ref(), b.as_ref()) else {
            return None;
        };
        let plain = |acc: &Access| acc.dims.iter().all(|d| d.as_var().is_some());
        let (x, w) = match (plain(a), plain(b)) {
            (false, true) => (a.clone(), b.clone()),
            (true, false) => (b.clone(), a.clone()),
            _ => return None,
        };
        if x.tensor == w.tensor {
            return None;
        }
        let uses = |acc: &Access, i: usize| {
            acc.dims
                .iter()
                .any(|d| d.terms.iter().any(|&(v, _)| v == i))
        };
        let spatial = kernel.spatial();
        let f = *spatial
            .iter()
            .rev()
            .find(|&&s| uses(&w, s) && !uses(&x, s))?;
        // The weights read only the channel and reduction indices; the output is the
        // spatial indices in order.
        if spatial.iter().any(|&s| s != f && uses(&w, s))
            || kernel.params[kernel.output].rank != spatial.len()
        {
            return None;
        }
        Some(ConvShape {
            pixels: spatial.iter().copied().filter(|&s| s != f).collect(),
            reduction: kernel.reduction(),
            f,
            x,
            w,
        })
    }

    /// Output pixels: the product of the pixel axes' extents.
    pub fn pixel_count(&self, extents: &[usize]) -> usize {
        self.pixels.iter().map(|&p| extents[p]).product()
    }

    /// The reduction index that a reduction block ([`CpuConfig::k_block`] of a
    /// convolution) cuts: the first one that reads an axis of the input on its own (an
    /// input channel, never a window tap beside a pixel).
    pub fn block_index(&self) -> Option<usize> {
        self.reduction.iter().copied().find(|&r| {
            self.x
                .dims
                .iter()
                .all(|d| d.as_var() == Some(r) || d.terms.iter().all(|&(i, _)| i != r))
                && self.x.dims.iter().any(|d| d.as_var() == Some(r))
        })
    }

    /// Reduction points: the product of the reduction extents.
    pub fn points(&self, extents: &[usize]) -> usize {
        self.reduction.iter().map(|&r| extents[r]).product()
    }

    /// Per axis of `x`: the extent of the scratch copy the convolution reads
    /// ([`crate::lower::cpu_conv`]): the coordinates read (with padding), every
    /// [`ConvShape::read_steps`] one.
    pub fn scratch_dims(&self, extents: &[usize]) -> Vec<usize> {
        self.x
            .dims
            .iter()
            .zip(self.read_steps(extents))
            .map(|(d, k)| {
                let (lo, hi) = d.range(extents);
                usize::try_from((hi - lo) / k + 1).unwrap_or(1)
            })
            .collect()
    }

    /// The axis of `x` that the innermost moving pixel index `q` reads with a stride and a
    /// window (`S·q + s + offset`, `S > 1`, `s` a reduction index; no other index moves
    /// it, and `q` moves no other axis): a pixel-vector tile ([`ConvTile::pixel_vector`])
    /// reads it from a window-expanded copy, one row `x[S·q + s]` over `q` per tap `s`
    /// ([`crate::lower::cpu_conv`]), so 16 consecutive `q` are one vector load. A
    /// strided 3×3 or 7×7 layer's pixels are otherwise `S` elements apart.
    pub fn window_axis(&self, extents: &[usize]) -> Option<WindowAxis> {
        let q = *self.pixels.iter().rev().find(|&&t| extents[t] > 1)?;
        let mut found = None;
        for (axis, d) in self.x.dims.iter().enumerate() {
            let moving: Vec<(usize, i64)> = d
                .terms
                .iter()
                .copied()
                .filter(|&(i, _)| extents[i] > 1)
                .collect();
            if !moving.iter().any(|&(i, _)| i == q) {
                continue;
            }
            if found.is_some() {
                return None;
            }
            let (stride, window) = match moving[..] {
                [(a, k), (b, 1)] if a == q => (k, b),
                [(b, 1), (a, k)] if a == q => (k, b),
                _ => return None,
            };
            if stride <= 1 || !self.reduction.contains(&window) {
                return None;
            }
            found = Some(WindowAxis {
                axis,
                window,
                pixel: q,
                stride,
            });
        }
        found
    }

    /// Pixels of the longest run of the fused pixel axis that lies contiguously both in the
    /// scratch copy of `x` ([`ConvShape::scratch_dims`]) and in the output (whose shape is
    /// the spatial extents): what a pixel-vector tile ([`ConvTile::pixel_vector`]) loads and
    /// stores as vectors. `P·Q` for a 1×1 convolution over NCHW (of any stride), `Q` for a
    /// padded one and for one read through a window-expanded copy
    /// ([`ConvShape::window_axis`]).
    pub fn pixel_run(&self, kernel: &Kernel, extents: &[usize]) -> usize {
        let spatial = kernel.spatial();
        let mut os = vec![0i64; extents.len()];
        let mut stride = 1i64;
        for &t in spatial.iter().rev() {
            os[t] = stride;
            stride *= extents[t] as i64;
        }
        let out = contiguous_run(&self.pixels, extents, |t| os[t]);
        if let Some(w) = self.window_axis(extents) {
            return if os[w.pixel] == 1 {
                extents[w.pixel].min(out)
            } else {
                1
            };
        }
        let dims = self.scratch_dims(extents);
        let steps = self.read_steps(extents);
        let mut xs = vec![0i64; extents.len()];
        let mut stride = 1i64;
        for d in (0..dims.len()).rev() {
            for &(i, c) in &self.x.dims[d].terms {
                xs[i] += stride * c / steps[d];
            }
            stride *= dims[d] as i64;
        }
        let x = contiguous_run(&self.pixels, extents, |t| xs[t]);
        x.min(out)
    }

    /// Per axis of `x`: the stride of the coordinates it is read at, where a pixel index
    /// alone moves along it by more than 1 (a 1×1 convolution of stride 2: 2), else 1. The
    /// scratch copy of `x` keeps only those coordinates ([`crate::lower::cpu_conv`]).
    pub fn read_steps(&self, extents: &[usize]) -> Vec<i64> {
        self.x
            .dims
            .iter()
            .map(|d| {
                let moving: Vec<(usize, i64)> = d
                    .terms
                    .iter()
                    .copied()
                    .filter(|&(i, _)| extents[i] > 1)
                    .collect();
                match moving[..] {
                    [(i, k)] if k > 1 && self.pixels.contains(&i) => k,
                    _ => 1,
                }
            })
            .collect()
    }

    /// The reduction index that `bf16` pairs ([`CpuConfig::pairs`]) take two points of at
    /// a time: the first (in kernel order) that the input reads as a plain coordinate of
    /// one axis and of no other, and the weights read as a plain coordinate (the input
    /// channel `c` of `x[[n, c, p + r, q + s]] * w[[f, c, r, s]]`). The scratch copy then
    /// holds the two channels of a pair side by side, so a pair is one 32-bit load
    /// ([`crate::lower::cpu_conv`]). `None` where the two inputs are not both `bf16`.
    pub fn pair_index(&self, kernel: &Kernel) -> Option<usize> {
        let bf16 = |t: usize| kernel.params.get(t).is_some_and(|p| p.dtype == DType::BF16);
        if !bf16(self.x.tensor) || !bf16(self.w.tensor) {
            return None;
        }
        self.reduction.iter().copied().find(|&c| {
            let mentions = |d: &crate::ir::Affine| d.terms.iter().any(|&(i, _)| i == c);
            self.x.dims.iter().filter(|d| mentions(d)).count() == 1
                && self.x.dims.iter().any(|d| d.as_var() == Some(c))
                && self.w.dims.iter().any(|d| d.as_var() == Some(c))
        })
    }
}

/// What the default reads of the machine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Machine {
    /// `f32` lanes of a SIMD register.
    pub lanes: usize,
    /// SIMD registers (32 with AVX-512, else 16).
    pub registers: usize,
    /// Per-core L1 data cache, bytes.
    pub l1: usize,
    /// Per-core L2 cache, bytes.
    pub l2: usize,
    /// Cores.
    pub threads: usize,
    /// AVX-512 BF16's `vdpbf16ps` ([`super::cpu_machine::CpuMachine::bf16_dot`]): `bf16`
    /// convolutions then take their input channels in pairs.
    pub bf16_dot: bool,
}

impl Machine {
    /// This machine with `lanes` f32 SIMD lanes, from the CPU model every CPU default reads
    /// ([`super::cpu_machine::CpuMachine`]: the register count follows from the lanes, the
    /// L2 size comes from sysfs), plus its core count.
    pub fn with_lanes(lanes: usize) -> Machine {
        let m = super::cpu_machine::CpuMachine::with_lanes(lanes);
        Machine {
            lanes: m.lanes.max(1),
            registers: m.vector_registers,
            l1: m.l1d_bytes,
            l2: m.l2_bytes,
            threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
            bf16_dot: m.bf16_dot,
        }
    }
}

/// Pixel tiles the space offers.
/// The last three serve pixel-vector tiles ([`ConvTile::pixel_vector`]): two to four
/// vectors of [`PIXEL_LANES`] pixels.
pub const PIXEL_CHOICES: [i64; 22] = [
    1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 20, 24, 28, 32, 48, 64,
];
/// Reduction blocks the space offers ([`CpuConfig::k_block`] of a convolution; 0: none).
/// Blocks of 16 serve pixel blocks ([`ConvTile::block_tiles`]) over wide rows: ResNet-50's
/// R2 (64 channels, 3×3 over 56×56, 42 tiles of 16 × 6 per pixel block) ran on two AVX2
/// cores at 93 / 98 GFLOPS in blocks of 16 against 70 / 80 in blocks of 32 and 85 / 98
/// without (`bench/results/2026-11-28-zen3-cpu-reread/`). The default takes 32 or more.
pub const CONV_K_BLOCKS: [i64; 5] = [0, 16, 32, 64, 128];
/// Output-channel tiles the space offers.
/// (6 for pixel-vector tiles only: the 6×16 matmul tile turned on its side, with AVX2.)
pub const CHANNEL_CHOICES: [i64; 9] = [1, 2, 4, 6, 8, 16, 32, 48, 64];

/// Registers the default gives the accumulators: 5/8 of the file (20 of 32). The rest
/// hold the channel vectors of the panel and the broadcast inputs: GCC 12 schedules every
/// broadcast of a tile before its FMAs, and at 12×32 (24 accumulators of 32 `zmm`) it
/// spilled accumulators to the stack inside the hot loop, at 10×32 it did not. With 16
/// registers (AVX2) 3/4 (12 of 16, 6 pixels of two vectors): the tuner took 16×6 over the
/// 16×5 default on four of ResNet-50's layers on a Zen 3 VM (R2, R7, R9, R12; 2–23%,
/// `bench/results/2026-11-27-zen3-cpu-avx2/`).
pub fn accumulator_registers(registers: usize) -> usize {
    if registers >= 32 {
        registers * 5 / 8
    } else {
        registers * 3 / 4
    }
}

/// The analytic default for a convolution: the channel tile two SIMD registers wide (one
/// when the channels are fewer), as many pixels as [`accumulator_registers`] allows, cut
/// so that the pixel tiles cover the pixel axis with little waste (at least 95% of the
/// computed pixels are real ones where a tile of at least half the size achieves it), or
/// more, up to the register file less four, where the tile is a whole row or divides one
/// (a row tile reads its inputs from one address, and with padding skips taps); the
/// input padded once; the weights packed by in-register transposes where the channel tile
/// is a multiple of [`TRANSPOSE`]; the tile stored as vectors with AVX-512; parallel when
/// there are cores and work for them. The
/// channel tile is one register wide where two would make a thread's weight panel larger
/// than L2. Short reductions ([`PIXEL_VECTOR_POINTS`]) over an NCHW input read in place
/// get a pixel-vector tile instead ([`ConvTile::pixel_vector`], [`PIXEL_TILE_CHANNELS`]
/// channels by two or three vectors of pixels, [`pixel_tile`]); elsewhere, reductions
/// shorter than [`SHORT_REDUCTION`] over NCHW rows of whole vectors get one 16×16 transpose
/// block per tile, channel tiles outermost (their stores bound them). With 16 registers, a
/// channel tile whose weight panel fills L1 runs the input channels in blocks
/// (`default_k_block`).
pub fn heuristic(kernel: &Kernel, extents: &[usize], machine: Machine) -> Option<CpuConfig> {
    let shape = ConvShape::of(kernel)?;
    let lanes = machine.lanes;
    let fe = extents[shape.f];
    // Two registers of channels, unless a thread's weight panel (every reduction point
    // times the tile) would then outgrow L2: the hot loop streams it once per pixel tile.
    // Four where the two-register panel already streams from L2 (a quarter of it or more)
    // and the four-register one still leaves a quarter of L2 for the input: four channel
    // vectors per broadcast input load fewer values per FMA (0.45 instead of 0.6; with 32
    // vector registers, so that five pixels of accumulators fit). On the
    // 3×3 convolution of 256 channels over 14×14 (a 295 KB panel at 32 channels), 64×5 ran
    // at 252 GFLOPS single-threaded and 32×10 at 216; where the panel sits in L1 or L2 with
    // room to spare, 32 channels were as fast or faster (R0–R7, R9, R10, R12 of the bench).
    let panel = |v: usize| shape.points(extents).saturating_mul(v * 4);
    let vector = if fe >= 4 * lanes
        && machine.registers >= 32
        && panel(2 * lanes) >= machine.l2 / 4
        && panel(4 * lanes) <= machine.l2 * 3 / 4
    {
        4 * lanes
    } else if fe > lanes && panel(2 * lanes) <= machine.l2 {
        2 * lanes
    } else if fe > lanes {
        lanes
    } else {
        lanes.min(fe.next_power_of_two())
    };
    let vregs = vector.div_ceil(lanes);
    let most = (accumulator_registers(machine.registers) / vregs).clamp(1, 14);
    let np = shape.pixel_count(extents);
    // Largest tile whose tiles cover the pixels at >= 95% (else the best covering one);
    // at >= 90% with 16 registers, where one pixel less is a sixth of the accumulators
    // (a 7×7 plane: 16×6 ran 14% ahead of 16×5 in the bench on a Zen 3 VM, R12).
    let fill = |m: usize| np as f64 / (np.div_ceil(m) * m) as f64;
    let cover = if machine.registers >= 32 { 0.95 } else { 0.9 };
    let candidates = (most.min(np).max(1) / 2).max(1)..=most.min(np).max(1);
    let pixels = candidates
        .clone()
        .rev()
        .find(|&m| fill(m) >= cover)
        .or_else(|| candidates.max_by(|&a, &b| fill(a).total_cmp(&fill(b)).then(a.cmp(&b))))
        .unwrap_or(1);
    // Whole rows of the innermost pixel axis where the input is padded and a row's
    // accumulators fit beside four registers for the panel and the broadcasts (a channel
    // tile of four registers gives way to two for that): such tiles skip the taps that
    // read padding (`lower::cpu_conv`). Single-threaded, a 3×3 convolution over 7×7 ran at
    // 310 GFLOPS (nominal) in 32×7 tiles against 260 in 32×10, one over 14×14 at 299 in
    // 32×14 against 262 in 64×5.
    //
    // Where a whole row does not fit, the largest part of a row that divides it, fits and
    // holds at least 70% of the accumulators (half a 28-wide row, a quarter of a 56-wide
    // one, a fifth of a 35-wide one): such tiles still skip the taps of the rows above and
    // below the input, and read it from one address.
    // Single-threaded, 32×14 tiles ran 1–3% ahead of 32×10 on the 3×3 convolutions over
    // 56×56 and 28×28 (R2, R5 of the bench) and level on the 7×7 stride-2 one over 224×224.
    // Not with 16 registers (AVX2), where a part of a row has at most 4 pixels of two
    // vectors: 8 accumulators leave the FMA units waiting (two Zen 3 cores, R5: 16×4 at 88
    // GFLOPS, 16×5 crossing rows 149).
    let (mut vector, mut pixels) = (vector, pixels);
    let padded = shape.x.dims.iter().any(|d| d.range(extents).0 < 0);
    let fits = |v: usize, m: usize| m * v.div_ceil(lanes) + 4 <= machine.registers;
    if let Some(&q) = shape.pixels.last() {
        let row = extents[q];
        if padded && machine.registers >= 32 {
            let v = if fits(vector, row) {
                vector
            } else {
                (2 * lanes).min(vector)
            };
            // (A row the space has a tile for: an 18-wide one had none, and its default
            // was no point of its space.)
            let offered = PIXEL_CHOICES.contains(&(row as i64));
            if offered && fits(v, row) && row * 2 >= most && row > 1 {
                (vector, pixels) = (v, row);
            } else {
                // A part of the row with at least 70% of the accumulators beats a larger
                // tile that crosses rows. Against the default before, side by side, one
                // core: 32×9 at 285–296 GFLOPS against 64×5 at 269 (5×5 over 27×27, 96 →
                // 192 channels; 560 against 510–523 on two), 32×8 281–289 against 32×10
                // 271–277 (3×3 over 4×16×16, 128 channels), 32×7 266–268 against 263–266
                // (3×3 over 35×35). But 32×5 ran 2–3% behind 32×10 (3×3, stride 2, over
                // 15×15 outputs), and not over a reduction of fewer than 64 points, whose
                // tiles' fixed costs want the larger tile: a 3×3 convolution of 3 channels
                // over 544×544 ran 9% slower in 32×8.
                let v = (2 * lanes).min(vector);
                let most =
                    (accumulator_registers(machine.registers) / v.div_ceil(lanes)).clamp(1, 14);
                let least = if shape.points(extents) >= SHORT_REDUCTION {
                    (most * 7).div_ceil(10)
                } else {
                    pixels
                };
                if let Some(m) = row_part(row, least, |m| fits(v, m), 2..row) {
                    (vector, pixels) = (v, m);
                }
            }
        } else if vector <= 2 * lanes {
            // Unpadded: tiles within a row still read their inputs from one address
            // (`lower::cpu_conv`), which leaves the registers for more accumulators. Two
            // threads, 1×1 convolutions, 32×14 against the 32×10 tile above: 516 against
            // 489 GFLOPS (R4 of the bench, rows of 28), 525 against 501 (R9, rows of 14).
            //
            // Where no such part divides the row, a short reduction (with 32 registers)
            // takes the widest tile that fits and covers the pixels at >= 95%: its tiles'
            // fixed costs (loading and storing the accumulators) weigh on few
            // multiply-adds. Two Zen 4 cores, unpadded 3×3 stride-2 convolutions over 3
            // channels (27 points) with rows of 149, 111 and 75 pixels, 32×14 against
            // 32×10: 165 → 175 GFLOPS (a 299×299 stem, N = 2), 143 → 153, 109 → 120; a
            // 5×5 one (75 points, not short) only 198 → 202
            // (`bench/results/2026-11-27-zen4-cpu-one-zmm/`).
            //
            // Rows too short for that (5 to 7 pixels: 7×7 planes) of a 1×1 convolution take
            // four registers of channels by a whole row where the channels allow and the
            // row's accumulators fill [`accumulator_registers`]: row tiles, and per
            // reduction point 0.39 loads per FMA at 64×7 against 0.6 at 32×10. Two Cascade
            // Lake cores, generated C side by side over eight placements and call patterns,
            // 64×7 against 32×10: R10 (1×1 stride 2, 1024 → 512 channels) 1.11–1.26×, one
            // core 1.07–1.15×; R12 (1×1, 512 → 2048) 1.04–1.12×, one core 1.03–1.10×
            // (`bench/results/2026-11-29-cascadelake-cpu-pixel-tile/`). Unmeasured on Zen 4.
            let wide = 4 * lanes;
            if let Some(m) = row_part(row, pixels, |m| fits(vector, m), 2..row + 1) {
                pixels = m;
            } else if machine.registers >= 32
                && shape.points(extents) >= SHORT_REDUCTION
                && shape
                    .block_index()
                    .is_some_and(|c| extents[c] == shape.points(extents))
                && fe.is_multiple_of(wide)
                && panel(wide) <= machine.l2 * 3 / 4
                && PIXEL_CHOICES.contains(&(row as i64))
                && fits(wide, row)
                && row * wide.div_ceil(lanes) >= accumulator_registers(machine.registers)
            {
                (vector, pixels) = (wide, row);
            } else if shape.points(extents) < SHORT_REDUCTION && machine.registers >= 32 {
                if let Some(m) = (pixels..=14).rev().find(|&m| {
                    fits(vector, m) && fill(m) >= 0.95 && PIXEL_CHOICES.contains(&(m as i64))
                }) {
                    pixels = m;
                }
            }
        }
    }
    // A short reduction over an NCHW output whose rows are whole vectors: one transpose
    // block per tile (L channels × L pixels), so that each channel's pixels go out as one
    // aligned vector and every output line is written whole, once. With so few FMAs per
    // output element the stores bound the kernel: 3×3 convolutions over 224×224 (64
    // channels out), two threads: 3 channels in 364–380 GFLOPS against 184–188 in 32×14,
    // 6 channels 453–463 against 293–376 in 32×10 / 16×10, and over 544×544 (3 → 32
    // channels) 340–390 against 133. From about 100 points on it is level with 32×14 (12
    // and 16 channels in) or behind (R0: 7×7 over 3 channels, 147 points, 0.97 of 32×14).
    // Channel tiles outermost: with pixel tiles outermost the 16×16 tile ran at 390–431
    // GFLOPS on a 64-byte-aligned output but 202–225 on one 16 or 32 bytes off (as a `Vec`
    // may be), channel tiles outermost at 340–362 and 321–353.
    let mut store_bound = false;
    if let Some(&q) = shape.pixels.last() {
        let nchw = kernel.spatial().last() == Some(&q);
        if nchw
            && lanes >= TRANSPOSE
            && shape.points(extents) < SHORT_REDUCTION
            && extents[q].is_multiple_of(lanes)
            && fe >= lanes
            && PIXEL_CHOICES.contains(&(lanes as i64))
        {
            (vector, pixels) = (lanes, lanes);
            store_bound = true;
        }
    }
    // An unpadded input read with strides is read in place, never through a compact copy:
    // two Zen 4 cores, generated C side by side, 1×1 stride-2 convolutions, medians in
    // GFLOPS (`bench/results/2026-11-27-zen4-cpu-one-zmm/`): 1024 → 512 channels over
    // 14×14 (R10 of the bench, 16 channel tiles) 196 through the copy against 224 in
    // place, and 256 → 512 over 56×56, 512 → 1024 over 28×28, 1024 → 2048 over 14×14,
    // 384 → 768 over 34×34, 512 → 512 over 2×20×20 (16 to 64 tiles) 218 / 221 / 211 /
    // 215 / 208 against 225 / 229 / 220 / 223 / 227. (A copy keeps only the pixels read,
    // but every call pays for it, and the threads share it out.)
    let strided = shape.read_steps(extents).iter().any(|&k| k > 1);
    let pad = padded || !strided;
    // The tiles then read a scratch copy (`lower::cpu_conv`): padded, strided or `bf16`.
    let copied = pad && (padded || strided || kernel.params[shape.x.tensor].dtype != DType::F32);
    let base = CpuConfig::naive(kernel);
    // `bf16` inputs on a CPU with `vdpbf16ps`: input channels in pairs, two points per
    // instruction on half the bytes, through the padded copy (which holds the pairs); in
    // pixel vectors where the `f32` default has them, else over whole vectors of channels.
    // Two Zen 4 cores, generated C side by side: 1×1 over 64 channels (R1, R3 of the bench)
    // 345–347 and 411–412 GFLOPS in 8×32 pixel pairs against 250–275 and 362 in 32×14
    // channel pairs; over 128 channels (R6) 412–420 against 397–406.
    let pair_ok = machine.bf16_dot && lanes >= 16 && shape.pair_index(kernel).is_some();
    if let Some(tile) = pixel_vector_default(kernel, extents, &shape, machine, pair_ok) {
        return Some(CpuConfig {
            vector_axis: Some(shape.f),
            vector: pixel_tile(machine).0.min(fe.next_power_of_two()),
            parallel: machine.threads > 1 && kernel.flops(extents) >= 65_536.0,
            pack: true,
            wide_simd: lanes >= 16,
            vector_code: lanes,
            pairs: pair_ok,
            conv: Some(tile),
            ..base
        });
    }
    let pairs = pair_ok && vector.is_multiple_of(16);
    let parallel = machine.threads > 1 && kernel.flops(extents) >= 65_536.0;
    // A strided window (`S·q + s`, [`ConvShape::window_axis`]) with 16 registers: tiles of
    // 5 pixels where 6 would fit, channel tiles outermost. Two Zen 3 cores, generated C side
    // by side, medians in GFLOPS, against 16×6 with pixel tiles outermost: R0 of the bench
    // (7×7, stride 2, over 3 channels) 100–105 → 125–127; three unseen stride-2 layers
    // 1.01–1.17× (a 3×3 one of 3 → 32 channels over 224×224 54 / 79 → 63 / 90 in two runs).
    // 16×6 with channel tiles outermost alone was level on those three; stride-1 3×3 layers
    // (R2, R5, R8) ran level in 16×5 without reduction blocks
    // (`bench/results/2026-11-27-zen3-cpu-xcopy/`); in blocks they take 16×5 (below).
    let narrow_window =
        machine.registers <= 16 && !store_bound && shape.window_axis(extents).is_some();
    // (Strided windows: measured without blocks.)
    let k_block = if pairs || narrow_window {
        0
    } else {
        default_k_block(extents, &shape, vector, machine)
    };
    // Tiles in reduction blocks (16 registers only) take 5 pixels too: ResNet-50's 3×3
    // layers R2, R5, R8, R11 on two Zen 3 cores in blocks of 16, generated C side by side,
    // every call or every tenth after another library's, 16 × 5 against 16 × 6:
    // 1.02–1.08×, 1.02–1.08×, 1.00–1.38× and 1.03–1.11× in four processes or more each
    // (`bench/results/2026-11-28-zen3-cpu-kblock-default/`). (Twelve accumulators, two
    // panel vectors and a broadcast fill the 16 registers; GCC adds register moves.)
    if machine.registers <= 16 && (narrow_window || k_block > 0) && pixels == 6 {
        pixels = 5;
    }
    // Reduction blocks need channel tiles outermost, and where the default takes them they
    // beat pixel tiles outermost: R2 of the bench (3×3, 64 → 64 channels over 56×56, whose
    // 147 KB of weights fit in L2) on two Zen 3 cores, generated C side by side, every call
    // or every tenth after another library's: 16 × 5 channel-outer tiles in blocks of 16
    // 1.02–1.37× (median 1.07) of 16 × 6 tiles with pixel tiles outermost in sixteen
    // processes, 1.19 and 1.28× single-threaded
    // (`bench/results/2026-11-28-zen3-cpu-kblock-default/`). With 32 registers (AVX-512),
    // 32 × 14 tiles in blocks of 16 against pixel tiles outermost unblocked, two Cascade
    // Lake cores, the same harness: R2 0.98–1.20×, R5 1.00–1.25×, R8 1.09–1.31× (one core
    // 1.16–1.32×, 1.14–1.20×, 1.07–1.23×; `bench/results/2026-11-28-cascadelake-cpu-order/`;
    // the session before, R2 0.98–1.10×, R8 0.95–1.06×: `../2026-11-28-cascadelake-cpu/`).
    let outer_pays = !store_bound
        && !narrow_window
        && pixels_outer_pays(
            extents,
            &shape,
            (vector, pixels),
            pad,
            copied && parallel,
            machine,
        );
    let pixels_outer = k_block == 0 && outer_pays;
    Some(CpuConfig {
        vector_axis: Some(shape.f),
        vector,
        parallel,
        pack: true,
        wide_simd: lanes >= 16,
        vector_code: lanes,
        pairs,
        k_block,
        conv: Some(ConvTile {
            pixels,
            pad: pad || pairs,
            // (A 16×16 transpose of GNU C vectors is 16-lane code: with fewer lanes GCC
            // splits each vector through memory.)
            transpose: !pairs && lanes >= TRANSPOSE && vector.is_multiple_of(TRANSPOSE),
            // Channel vectors stored by in-register transposes of the target's vectors
            // (`lower::cpu_conv`), not lane by lane. With AVX2 (8-lane blocks, four lanes
            // and then one by one for a tile's last pixels), two Zen 3 cores, generated C
            // side by side, medians in GFLOPS, two runs: the stem R0 120 / 125 → 126 / 134,
            // R2 135 / 136 → 142 / 146, R9 122 / 138 → 137 / 151, R4 80 / 135 → 95 / 140,
            // R7 117 / 79 → 125 / 80; R5, R8, R11, R12 within 2% either way, R10 59 / 93 →
            // 56 / 100 (`bench/results/2026-11-28-zen3-cpu-unroll/`).
            vector_store: lanes >= 8,
            pixel_vector: false,
            pixels_outer,
            block_tiles: block_tiles(
                machine,
                &WeightReread::of(extents, &shape, machine),
                (vector, pixels),
                k_block,
                pixels_outer,
            ),
        }),
        ..base
    })
}

/// The default's reduction block ([`CpuConfig::k_block`]) for a channel-vector tile of
/// `vector` channels with channel tiles outermost: where the tile's weight panel over the
/// whole reduction fills L1 and the window has more than one tap, the largest block of
/// [`CONV_K_BLOCKS`] up to 64 and below the channel count whose panel rows fit in half of
/// L1 (16 input channels of a 3×3 window in 16-channel tiles, AVX2's), or else the
/// smallest block whose rows fit in L1 (16 input channels of a 3×3 window in 32-channel
/// tiles, AVX-512's: 18 KB); else none. The blocks
/// run in pixel blocks ([`block_tiles`]), so the input rows and partial sums a block
/// touches are bounded by those, not by the plane. Where the default takes blocks it walks
/// channel tiles outermost (blocks need them), with 16 registers in tiles of 5 pixels.
///
/// Why: without blocks each pixel tile walks every input channel, so the panel and the
/// input lines stream from L2 once per tile (a 6-pixel tile uses 24 bytes of each input
/// line it loads). With blocks, every pixel tile of a pixel block runs one block before
/// the next, and the block's panel rows stay in L1. Two Zen 3 cores, generated C side by
/// side, medians per process (`bench/results/2026-11-28-zen3-cpu-kblock-default/`): the
/// 3×3 convolutions of ResNet-50 over 128 channels and 28×28 (R5 of the bench) in 16 × 6
/// tiles in blocks of 32 against none 1.05–1.13× in four processes, over 256 channels and
/// 14×14 (R8) 0.98–1.11× in six, over 512 channels and 7×7 (R11) 0.95–1.09× in six; blocks
/// of 16 within 6% of 32 either way on those three, but on R2 (64 channels over 56×56,
/// whose default walked pixel tiles outermost) 1.03–1.29× of 32 in seven processes. A 1×1
/// convolution of 512 → 2048 channels over 7×7 (R12, a 32 KB panel per 16 channels)
/// without the fused copy ran 81 → 93 with blocks of 64 (92 with 32, 88 with 128): hence
/// no block above 64.
///
/// With 32 registers (AVX-512), two Cascade Lake cores, 32 × 14 tiles, generated C side by
/// side, every call and every tenth after another library's, in two processes
/// (`bench/results/2026-11-28-cascadelake-cpu/`): blocks of 16 with channel tiles
/// outermost against the unblocked default (pixel tiles outermost, but for R11's 7-pixel
/// tiles): R11 1.08–1.31×, R5 1.00–1.29×, R2 0.98–1.10×, R8 0.95–1.06×; blocks of 32 at or
/// below 16 on each; a session later R2 0.98–1.20×, R5 1.00–1.25×, R8 1.09–1.31×
/// (`bench/results/2026-11-28-cascadelake-cpu-order/`). A 1×3 window over 512 channels and
/// 7×7 (12 MB of weights, blocks of 32 by the rule above): level with none. (Unmeasured on
/// Zen 4 and Zen 5, where pixel tiles outermost had measured ahead of channel tiles
/// outermost without blocks: [`pixels_outer_pays`].)
///
/// A 1×1 convolution (one tap per input channel) takes no blocks since its channel tiles
/// read the fused copy (`lower::cpu_conv`: each pixel tile's pixels side by side per input
/// channel, 12 KB for 6 pixels of 512 channels, which stays in L1): R12 without blocks and
/// with the copy 110 / 115 GFLOPS against 103 / 98 with blocks of 64 and no copy (oneDNN
/// 110 / 121; `bench/results/2026-11-28-zen3-cpu-panel/`).
fn default_k_block(extents: &[usize], shape: &ConvShape, vector: usize, machine: Machine) -> usize {
    let Some(r) = shape.block_index() else {
        return 0;
    };
    let channels = extents[r].max(1);
    let points = shape.points(extents);
    let taps = points / channels;
    if !vector.is_multiple_of(8) || points * vector * 4 < machine.l1 || taps == 1 {
        return 0;
    }
    // Panel bytes per input channel: its taps of `vector` channels.
    let row = taps * vector * 4;
    let blocks = || {
        CONV_K_BLOCKS
            .iter()
            .map(|&k| k as usize)
            .filter(|&k| k > 0 && k <= 64 && k < channels)
    };
    blocks()
        .filter(|&k| k * row <= machine.l1 / 2)
        .max()
        .or_else(|| blocks().find(|&k| k * row <= machine.l1))
        .unwrap_or(0)
}

/// The largest tile of `candidates` that divides a row of `row` pixels, is offered by the
/// space ([`PIXEL_CHOICES`]), `fits` the registers and has at least `pixels` pixels.
fn row_part(
    row: usize,
    pixels: usize,
    fits: impl Fn(usize) -> bool,
    candidates: std::ops::Range<usize>,
) -> Option<usize> {
    candidates
        .rev()
        .filter(|&m| row.is_multiple_of(m) && PIXEL_CHOICES.contains(&(m as i64)))
        .find(|&m| fits(m) && m >= pixels)
}

/// Reduction points below which the default treats a convolution as bound by its stores:
/// it keeps tiles that cross rows rather than part-row ones, and over NCHW rows of whole
/// vectors it takes one transpose block per tile (see [`heuristic`]).
pub const SHORT_REDUCTION: usize = 64;

/// Output channels of the default pixel-vector tile with 32 registers (single-threaded on R1
/// and R3 of the bench on a Zen 4 VM, 8×32 ran at 264–268 GFLOPS, 8×48 at 262–266, 16×16
/// at 235–247, 4×64 at 200–210).
pub const PIXEL_TILE_CHANNELS: usize = 8;

/// The default pixel-vector tile on `machine`: (output channels, vectors of pixels).
/// [`PIXEL_TILE_CHANNELS`] by three vectors with 32 registers (24 accumulators: per
/// reduction point three vector loads and eight broadcasts, 0.46 loads per FMA where two
/// vectors take 0.63); the default takes two where three would cover the pixels poorly.
/// Two Cascade Lake cores (two FMA ports of 512 bits), generated C side by side over eight
/// placements and call patterns each, 8×48 against 8×32: ResNet-50's R1 1.02–1.15×, R3
/// 1.06–1.20×, R6 1.01–1.14× (`bench/results/2026-11-29-cascadelake-cpu-pixel-tile/`); on
/// Zen 4 the two had run level (above). With 16 registers (AVX2), 4 channels by three
/// vectors of 8 pixels (12 accumulators: per reduction point three vector loads and four
/// broadcasts, where 6 × 16 takes two and six; and 4 divides more channel counts than 6).
///
/// Two AVX2 Zen 3 cores, 1×1 convolutions of ResNet-50, generated C side by side, 4×24
/// against 6×16 in eight pairs each (buffers aligned and 16 bytes past a page, calls
/// after another library's and every tenth; `bench/results/2026-11-28-zen3-cpu-align/`):
/// R1 (64 → 64 channels over 56×56) 0.94–1.14× (median 1.06), R3 (64 → 256) 0.96–1.06×
/// (1.02), R6 (128 → 512 over 28×28) 1.01–1.12× (1.05). (An older measurement had 6×16
/// ahead on R1, 143 GFLOPS against 130 for 4×16, and a 3-vector tile spilling at 54; the
/// pixel vectors are held in registers since.)
pub fn pixel_tile(machine: Machine) -> (usize, usize) {
    if machine.registers >= 32 {
        (PIXEL_TILE_CHANNELS, 3)
    } else {
        (4, 3)
    }
}

/// Reduction points up to which the default vectorizes the pixels of an NCHW output
/// ([`ConvTile::pixel_vector`]): the channel-vector tile's stores transpose every 16×16
/// block of the output in registers, a cost per output element that a short reduction does
/// not hide. Single-threaded, with prepacked weights: 64 points (1×1 over 64 channels, R1
/// and R3 of the bench) 264–272 GFLOPS against 237–243; 128 points (R6) 266–275 against
/// 263–267; 256 points (R9, 196-pixel runs) 235 against 250.
pub const PIXEL_VECTOR_POINTS: usize = 128;

/// The default's pixel-vector tile, where it pays: an `f32` output, an input read in
/// place (no padding to copy in, no stride to compact away, no window to expand
/// ([`ConvShape::window_axis`]; level to 1.04 of channel vectors): with the copy a 1×1
/// stride-2 convolution ran 0.9 of its channel-vector tile, a padded 3×3 one 0.88), a short
/// reduction ([`PIXEL_VECTOR_POINTS`]) and runs of pixels that the tiles cover (95% of the
/// computed pixels real ones; with 32 registers two vectors of pixels where
/// [`pixel_tile`]'s three do not). With AVX2 (16 registers, [`pixel_tile`]) the same: two Zen 3
/// cores, generated C side by side, medians in GFLOPS, 6×16 pixel tiles against the
/// channel-vector default: ResNet-50's R1 (1×1 over 64 channels) 143 / 105, R6 161 / 160;
/// but padded 3×3 ones ran far behind 16×5 channel tiles (R2 119 / 161, R5 112 / 149), and
/// the strided R0 and R4 level (97 / 94, 106 / 101).
fn pixel_vector_default(
    kernel: &Kernel,
    extents: &[usize],
    shape: &ConvShape,
    machine: Machine,
    pairs: bool,
) -> Option<ConvTile> {
    let lanes = machine.lanes.min(PIXEL_LANES);
    // Fewer vectors where the tile's vectors cover the pixels poorly (32 registers), and
    // two for `bf16` pairs (measured so on Zen 4, see `heuristic`).
    let most = if pairs { 2 } else { pixel_tile(machine).1 };
    let fewest = if machine.registers >= 32 { 2 } else { most };
    let run = shape.pixel_run(kernel, extents);
    let in_place = shape.x.dims.iter().all(|d| d.range(extents).0 >= 0)
        && shape.read_steps(extents).iter().all(|&k| k == 1)
        && shape.window_axis(extents).is_none();
    let fill = |pixels: usize| run as f64 / (run.div_ceil(pixels) * pixels) as f64;
    let pays = in_place && shape.points(extents) <= PIXEL_VECTOR_POINTS;
    if lanes < 8 || kernel.params[kernel.output].dtype != DType::F32 || !pays || run < lanes {
        return None;
    }
    (fewest..=most)
        .rev()
        .map(|v| v * lanes)
        .find(|&p| fill(p) >= 0.95)
        .map(ConvTile::pixel_vectors)
}

/// Whether the default walks pixel tiles outermost on prepacked weights
/// ([`ConvTile::pixels_outer`]) for a channel-vector tile of `vector` channels × `pixels`.
///
/// Over a scratch copy of the input that several threads share (`shared_copy`: padded,
/// strided or `bf16`, and parallel): where the weights fit in L2 or the tile has at least
/// [`PIXELS_OUTER_LEAST`] pixels. With channel tiles outermost every thread reads the whole
/// copy, half of it written by the other core at every call; with pixel tiles outermost each thread reads the rows it copied (the copy
/// walks rows first, `lower::cpu_conv`) and re-reads the weights once per pixel tile
/// instead. Two Zen 4 cores, generated C side by side, medians in GFLOPS
/// (`bench/results/2026-11-27-zen4-cpu-copy-rows/`): ResNet-50's stem (R0) 150 → 186, its
/// 3×3 layers over 56×56, 28×28 and 14×14 (R2, R5, R8) 167 → 207, 199 → 217, 228 → 238,
/// the unseen 3×3 ones (C0, C3, C6) 171 → 198, 123 → 180, 191 → 222, and one over 14×14
/// with 9.4 MB of weights 216 → 234; but over 7×7 (R11: 9.4 MB of weights, 7-pixel tiles,
/// so 0.57 bytes of weights per multiply-add from L3) 231 → 223.
///
/// Over a strided input read in place (`pad` false): always. Single-threaded, over twelve
/// placements of the buffers each, the 1×1 stride-2 convolution over a 3.2 MB input (R4
/// of the bench, 128 KB of weights) ran at 251–260 GFLOPS with pixel tiles outermost
/// against 216–247; on two Zen 4 cores, seven 1×1 stride-2 ones with 0.5 to 8 MB of
/// weights over 0.7 to 3.2 MB of input were level to 5% faster with pixel tiles outermost
/// (R10 of the bench 224 against 216, 1024 → 2048 channels over 14×14 220 against 211;
/// `bench/results/2026-11-27-zen4-cpu-one-zmm/`; an hour later R10 measured 2–6% the
/// other way: for it the choice is within that VM's noise).
///
/// Elsewhere: where the input the tiles read does not fit in L2 and the weights fit in
/// half of it, so that re-reading the weights per pixel tile costs less than re-reading
/// the input per channel tile; where the input fits (R2, R5, R9, R12 of the bench) channel
/// tiles outermost were level or up to 5% faster (R12: 4 MB of weights). Pixel-vector
/// tiles always walk pixel tiles outermost (R1, R3: 2–10% faster).
fn pixels_outer_pays(
    extents: &[usize],
    shape: &ConvShape,
    (vector, pixels): (usize, usize),
    pad: bool,
    shared_copy: bool,
    machine: Machine,
) -> bool {
    let reread = WeightReread::of(extents, shape, machine);
    if reread.dominated(vector, pixels) {
        return false;
    }
    let weights = reread.weights(vector);
    if shared_copy {
        return weights <= machine.l2 || pixels >= PIXELS_OUTER_LEAST;
    }
    if !pad {
        // A strided input read in place.
        return true;
    }
    conv_bytes(&shape.scratch_dims(extents)) > machine.l2 && weights <= machine.l2 / 2
}

/// Bytes of `f32` elements, `n` multiplied out (saturating).
fn conv_bytes(n: &[usize]) -> usize {
    n.iter().fold(4usize, |a, &b| a.saturating_mul(b))
}

/// What re-reading the weights once per pixel tile costs ([`ConvTile::pixels_outer`]),
/// against re-reading the input once per channel tile.
///
/// Pixel tiles outermost are *dominated* where the weights outgrow L2, the tile has fewer
/// than [`PIXELS_OUTER_LEAST`] pixels and the input the tiles read fits in half of L2: every
/// pixel tile then streams all the weights again from L3 or memory (`4 / pixels` bytes per
/// multiply-add), while channel tiles outermost stream each weight once and re-read an
/// input that stays in L2. Neither the default nor the search takes such a point. Why: how
/// fast that stream runs depends on what else shares L3, not on the kernel. R11 of the
/// bench (512 → 512 channels, 3×3 over 7×7, 9.4 MB of weights, 166 KB of padded input) in
/// 16×6 tiles on the two-core Zen 3 VM, generated C side by side in one process, medians in
/// GFLOPS, eight processes: channel tiles outermost 92–110 wherever the FMA peak was whole,
/// pixel tiles outermost 40–130 (`bench/results/2026-11-28-zen3-cpu-reread/`). Both 64-trial
/// bench runs before took the pixel-outer point (the search measured it ahead) and then
/// timed it at 45 and 73 against the default's 93 and 96.
#[derive(Clone, Copy, Debug)]
pub struct WeightReread {
    /// Weight elements per output channel (the reduction's points).
    points: usize,
    /// Output channels.
    channels: usize,
    /// Bytes of the input the tiles read ([`ConvShape::scratch_dims`]).
    input: usize,
    /// Per-core L2, bytes.
    l2: usize,
}

impl WeightReread {
    /// The figures of `shape` at `extents` on `machine`.
    pub fn of(extents: &[usize], shape: &ConvShape, machine: Machine) -> WeightReread {
        WeightReread {
            points: shape.points(extents),
            channels: extents[shape.f],
            input: conv_bytes(&shape.scratch_dims(extents)),
            l2: machine.l2,
        }
    }

    /// Bytes of one channel tile's panel of `vector` channels over every reduction point.
    pub fn panel(&self, vector: usize) -> usize {
        conv_bytes(&[self.points, vector.max(1)])
    }

    /// Bytes of the weights packed in channel tiles of `vector` (the last one padded).
    pub fn weights(&self, vector: usize) -> usize {
        conv_bytes(&[self.points, self.channels.next_multiple_of(vector.max(1))])
    }

    /// Whether pixel tiles outermost are dominated for a tile of `vector` channels ×
    /// `pixels`.
    pub fn dominated(&self, vector: usize, pixels: usize) -> bool {
        self.weights(vector) > self.l2 && pixels < PIXELS_OUTER_LEAST && self.input <= self.l2 / 2
    }
}

/// Pixels of a channel-vector tile from which the default ([`heuristic`]) walks pixel tiles
/// outermost over a copied input even where the weights outgrow L2: 13 and 14 measured
/// ahead (2.4 and 9.4 MB of weights), 7 behind.
pub const PIXELS_OUTER_LEAST: usize = 12;

/// Checks a convolution config against its kernel.
pub fn validate(kernel: &Kernel, config: &CpuConfig, tile: &ConvTile) -> Result<(), String> {
    let shape = ConvShape::of(kernel).ok_or("a convolution schedule needs a convolution")?;
    if config.vector_axis != Some(shape.f) {
        return Err("a convolution tile vectorizes the output channel".into());
    }
    if config.unroll_axis.is_some() || config.unroll != 1 {
        return Err("a convolution tile has no unroll axis".into());
    }
    if config.k_block > 0 {
        let blocked = shape.block_index();
        if tile.pixel_vector || config.pairs || tile.pixels_outer {
            return Err(
                "reduction blocks (k_block) need a channel-vector tile, channel tiles outermost"
                    .into(),
            );
        }
        if !config.vector.is_multiple_of(8) {
            return Err("reduction blocks (k_block) need a channel tile of whole vectors".into());
        }
        if blocked.is_none() {
            return Err("reduction blocks (k_block) need an input channel to cut".into());
        }
    }
    if tile.transpose && !config.vector.is_multiple_of(TRANSPOSE) {
        return Err(format!(
            "transposed weight packing needs a channel tile that is a multiple of {TRANSPOSE}"
        ));
    }
    let lanes = pixel_lanes(config);
    if tile.pixel_vector && (!tile.pad || !tile.pixels.is_multiple_of(lanes)) {
        return Err(format!(
            "a pixel-vector tile reads the padded input in whole vectors of {lanes} pixels"
        ));
    }
    if tile.pixel_vector && kernel.params[kernel.output].dtype != DType::F32 {
        return Err("a pixel-vector tile stores an f32 output".into());
    }
    if config.pairs {
        if shape.pair_index(kernel).is_none() {
            return Err("bf16 pairs need two bf16 inputs and an input channel read plainly".into());
        }
        if !tile.pad || !(tile.pixel_vector || config.vector.is_multiple_of(16)) {
            return Err(
                "bf16 pairs read the padded copy, channel tiles in whole 16-lane vectors".into(),
            );
        }
    }
    if tile.pixels == 0 || config.vector == 0 || tile.pixels * config.vector > 1024 {
        return Err(format!(
            "convolution tile {}x{} out of range",
            tile.pixels, config.vector
        ));
    }
    Ok(())
}

/// The convolution schedule space: channel tile, pixel tile, padding, parallelism, the
/// vector width asked of the compiler and how the weights are packed.
#[derive(Clone, Debug)]
pub struct ConvTemplate {
    space: SearchSpace,
    default: Config,
    base: CpuConfig,
    knobs: [usize; 10],
    /// The machine and the convolution's sizes, which [`ConvTile::block_tiles`] follows
    /// from.
    machine: Machine,
    reread: WeightReread,
}

impl ConvTemplate {
    /// The space for `kernel` at `extents`, if it is a convolution ([`ConvShape`]).
    pub fn new(
        kernel: &Kernel,
        extents: &[usize],
        lanes: usize,
    ) -> Option<Result<ConvTemplate, String>> {
        let shape = ConvShape::of(kernel)?;
        let machine = Machine::with_lanes(lanes);
        let heuristic = heuristic(kernel, extents, machine)?;
        Some(Self::build(kernel, extents, machine, &shape, heuristic))
    }

    fn build(
        kernel: &Kernel,
        extents: &[usize],
        machine: Machine,
        shape: &ConvShape,
        heuristic: CpuConfig,
    ) -> Result<ConvTemplate, String> {
        let lanes = machine.lanes;
        let mut b = SearchSpace::builder();
        let vector = b.discrete("conv_channels", &CHANNEL_CHOICES);
        let pixels = b.discrete("conv_pixels", &PIXEL_CHOICES);
        let pad = b.categorical("conv_border", &["guard", "pad"]);
        let parallel = b.categorical("parallel", &["serial", "parallel"]);
        let simd = b.categorical("simd", &["compiler", "wide"]);
        let packing = b.categorical("conv_pack", &["loops", "transpose"]);
        let store = b.categorical("conv_store", &["scalar", "vector"]);
        // `pairs`: channel vectors of `bf16` pairs ([`CpuConfig::pairs`]), offered where
        // both inputs are `bf16`, an input channel pairs and vectors are AVX-512's;
        // `pixel_pairs`: pixel vectors of them.
        let pairs_ok = lanes >= 16 && shape.pair_index(kernel).is_some();
        let along = if pairs_ok {
            b.categorical(
                "conv_vector",
                &["channels", "pixels", "pairs", "pixel_pairs"],
            )
        } else {
            b.categorical("conv_vector", &["channels", "pixels"])
        };
        let order = b.categorical("conv_outer", &["channels", "pixels"]);
        let kblock = b.discrete("conv_kblock", &CONV_K_BLOCKS);
        let value = |c: &Config, k: usize, list: &[i64]| {
            c.index(k).and_then(|i| list.get(i)).map(|&v| v as usize)
        };
        let (fe, np) = (extents[shape.f], shape.pixel_count(extents));
        let regs = machine.registers;
        b.constraint("tiles fit their axes", move |c| {
            value(c, vector, &CHANNEL_CHOICES).is_some_and(|v| v <= fe.next_power_of_two())
                && value(c, pixels, &PIXEL_CHOICES).is_some_and(|m| m <= np)
        });
        b.constraint("accumulators fit the registers", move |c| {
            let v = value(c, vector, &CHANNEL_CHOICES).unwrap_or(1);
            let m = value(c, pixels, &PIXEL_CHOICES).unwrap_or(1);
            if matches!(c.index(along), Some(1 | 3)) {
                v * m.div_ceil(lanes.max(1)) <= regs * 3 / 4
            } else {
                m * v.div_ceil(lanes.max(1)) <= regs
            }
        });
        let reread = WeightReread::of(extents, shape, machine);
        b.constraint(
            "pixel tiles outermost re-read no weights beyond L2",
            move |c| {
                c.index(order) != Some(1)
                    || !reread.dominated(
                        value(c, vector, &CHANNEL_CHOICES).unwrap_or(1),
                        value(c, pixels, &PIXEL_CHOICES).unwrap_or(1),
                    )
            },
        );
        b.constraint("six channels are a pixel-vector tile", move |c| {
            value(c, vector, &CHANNEL_CHOICES) != Some(6) || matches!(c.index(along), Some(1))
        });
        b.constraint("transposes need 16-channel multiples", move |c| {
            c.index(packing) == Some(0)
                || value(c, vector, &CHANNEL_CHOICES).is_some_and(|v| v.is_multiple_of(TRANSPOSE))
        });
        // Reduction blocks: channel-vector tiles of whole vectors, channel tiles outermost,
        // blocks shorter than the input channel they cut.
        let blockable = shape.block_index().map_or(0, |r| extents[r]);
        b.constraint(
            "reduction blocks cut an input channel",
            move |c| match value(c, kblock, &CONV_K_BLOCKS) {
                Some(0) => true,
                Some(k) => {
                    k < blockable
                        && c.index(along) == Some(0)
                        && c.index(order) == Some(0)
                        && value(c, vector, &CHANNEL_CHOICES).is_some_and(|v| v.is_multiple_of(8))
                }
                None => false,
            },
        );
        let wide_ok = lanes >= 16;
        b.constraint("wide vectors need AVX-512", move |c| {
            wide_ok || c.index(simd) == Some(0)
        });
        // The vector stores of channel vectors transpose blocks of the target's vectors
        // (16 floats with AVX-512, 8 with AVX2); pixel vectors are stored whole (a run's
        // last one lane by lane without AVX-512).
        let store_ok = lanes >= 8;
        b.constraint("vector stores need 8-lane vectors", move |c| {
            store_ok || c.index(store) == Some(0) || c.index(along) == Some(1)
        });
        // Pixel vectors: whole vectors of the target's lanes of pixels that lie in one run
        // of the (padded) input and the output, an `f32` output, the unguarded read, 8
        // lanes or more; the scalar store knob means nothing there.
        let run = shape.pixel_run(kernel, extents);
        let f32_out = kernel.params[kernel.output].dtype == DType::F32;
        let plane = lanes.min(PIXEL_LANES);
        let pixel_ok = lanes >= 8 && f32_out && run >= plane;
        // (The window-expanded copy holds `f32`, not pairs.)
        let windowed = shape.window_axis(extents).is_some();
        b.constraint("pixel vectors need a run of pixels", move |c| {
            !matches!(c.index(along), Some(1 | 3))
                || (pixel_ok
                    && !(windowed && c.index(along) == Some(3))
                    && c.index(pad) == Some(1)
                    && c.index(store) == Some(1)
                    && value(c, pixels, &PIXEL_CHOICES).is_some_and(|m| {
                        m.is_multiple_of(plane) && m <= run.next_multiple_of(plane)
                    }))
        });
        b.constraint("bf16 pairs are padded whole vectors", move |c| {
            match c.index(along) {
                Some(2) => {
                    c.index(pad) == Some(1)
                        && c.index(simd) == Some(1)
                        && c.index(packing) == Some(0)
                        && value(c, vector, &CHANNEL_CHOICES).is_some_and(|v| v.is_multiple_of(16))
                }
                Some(3) => c.index(simd) == Some(1) && c.index(packing) == Some(0),
                _ => true,
            }
        });
        let space = b.build().map_err(|e| e.to_string())?;
        let mut t = ConvTemplate {
            space,
            default: Config::new(Vec::new()),
            base: CpuConfig {
                conv: None,
                rows: None,
                ..heuristic.clone()
            },
            knobs: [
                vector, pixels, pad, parallel, simd, packing, store, along, order, kblock,
            ],
            machine,
            reread: WeightReread::of(extents, shape, machine),
        };
        t.default = t
            .encode(&heuristic)
            .ok_or_else(|| "the convolution default is not in its space".to_string())?;
        Ok(t)
    }

    /// The knobs.
    pub fn space(&self) -> &SearchSpace {
        &self.space
    }

    /// The analytic default, as a point.
    pub fn default_config(&self) -> Config {
        self.default.clone()
    }

    /// The schedule a point stands for.
    pub fn decode(&self, c: &Config) -> Result<CpuConfig, String> {
        self.space.check(c).map_err(|e| e.to_string())?;
        let [vector, pixels, pad, parallel, simd, packing, store, along, order, kblock] =
            self.knobs;
        let num = |k: usize| self.space.discrete_value(c, k).map_or(1, |v| v as usize);
        let choice = |k: usize| c.index(k).unwrap_or(0) == 1;
        let k_block = self
            .space
            .discrete_value(c, kblock)
            .map_or(0, |v| v as usize);
        Ok(CpuConfig {
            vector: num(vector),
            k_block,
            parallel: choice(parallel),
            wide_simd: choice(simd),
            conv: Some(ConvTile {
                pixels: num(pixels),
                pad: choice(pad),
                transpose: choice(packing),
                vector_store: choice(store),
                pixel_vector: matches!(c.index(along), Some(1 | 3)),
                pixels_outer: choice(order),
                block_tiles: block_tiles(
                    self.machine,
                    &self.reread,
                    (num(vector), num(pixels)),
                    k_block,
                    choice(order) && !matches!(c.index(along), Some(1 | 3)),
                ),
            }),
            pairs: matches!(c.index(along), Some(2 | 3)),
            ..self.base.clone()
        })
    }

    /// Reads a config's text form (a record's `config`), accepting records written before
    /// the `conv_vector`, `conv_outer` and `conv_kblock` knobs existed (read as
    /// `conv_vector=channels`, `conv_outer=channels`, `conv_kblock=0`: the schedule they
    /// measured).
    pub fn parse(&self, text: &str) -> Result<Config, String> {
        let has = |knob: &str| {
            text.split(';')
                .any(|e| e.split_once('=').is_some_and(|(n, _)| n.trim() == knob))
        };
        let mut full = text.to_string();
        if !text.trim().is_empty() {
            for (knob, old) in [
                ("conv_vector", "channels"),
                ("conv_outer", "channels"),
                ("conv_kblock", "0"),
            ] {
                if !has(knob) {
                    full = format!("{full};{knob}={old}");
                }
            }
        }
        self.space.parse(&full).map_err(|e| e.to_string())
    }

    /// The point for a schedule, if the space has it.
    pub fn encode(&self, cfg: &CpuConfig) -> Option<Config> {
        let tile = cfg.conv.as_ref()?;
        if cfg.vector_axis != self.base.vector_axis {
            return None;
        }
        let idx = |list: &[i64], v: usize| list.iter().position(|&x| x == v as i64);
        let c = Config::new(vec![
            Value::Discrete(idx(&CHANNEL_CHOICES, cfg.vector)?),
            Value::Discrete(idx(&PIXEL_CHOICES, tile.pixels)?),
            Value::Categorical(usize::from(tile.pad)),
            Value::Categorical(usize::from(cfg.parallel)),
            Value::Categorical(usize::from(cfg.wide_simd)),
            Value::Categorical(usize::from(tile.transpose)),
            Value::Categorical(usize::from(tile.vector_store)),
            Value::Categorical(match (tile.pixel_vector, cfg.pairs) {
                (false, false) => 0,
                (true, false) => 1,
                (false, true) => 2,
                (true, true) => 3,
            }),
            Value::Categorical(usize::from(tile.pixels_outer)),
            Value::Discrete(idx(&CONV_K_BLOCKS, cfg.k_block)?),
        ]);
        self.space.is_valid(&c).then_some(c)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::ir::parse_text;

    /// The development machine: AVX-512 (16 lanes, 32 registers), 1 MB of L2, 2 cores.
    const AVX512_TWO_CORES: Machine = Machine {
        lanes: 16,
        registers: 32,
        l1: 48 << 10,
        l2: 1 << 20,
        threads: 2,
        bf16_dot: false,
    };

    /// The Cascade Lake VM: AVX-512 with 32 KB of L1 and 1 MB of L2, 2 cores.
    const CASCADE_TWO_CORES: Machine = Machine {
        l1: 32 << 10,
        ..AVX512_TWO_CORES
    };

    /// The Zen 3 VM: AVX2 (8 lanes, 16 registers), 32 KB of L1, 512 KB of L2, 2 cores.
    const AVX2_TWO_CORES: Machine = Machine {
        lanes: 8,
        registers: 16,
        l1: 32 << 10,
        l2: 512 << 10,
        ..AVX512_TWO_CORES
    };

    /// The default's channel tile and pixel tile for `k` at extents `e` on `m`.
    fn default_tile(k: &Kernel, e: &[usize], m: Machine) -> (usize, usize) {
        let h = heuristic(k, e, m).unwrap();
        (h.vector, h.conv.unwrap().pixels)
    }

    const CONV: &str =
        "y[[n, f, p, q]] += x[[n, c, 2 * p + r - 3, 2 * q + s - 3]] * w[[f, c, r, s]]";

    #[test]
    fn convolutions_are_recognised_and_matmuls_are_not() {
        let k = parse_text("conv", CONV, None).unwrap();
        let s = ConvShape::of(&k).unwrap();
        assert_eq!(
            (s.f, s.pixels.clone(), s.reduction.clone()),
            (1, vec![0, 2, 3], vec![4, 5, 6])
        );
        let mm = parse_text("mm", "c[[i,j]] += a[[i,k]] * b[[k,j]]", None).unwrap();
        assert!(ConvShape::of(&mm).is_none());
        // Depthwise (the channel is read by both) is not this template's.
        let dw = parse_text("dw", "y[[c, p]] += x[[c, p + r]] * w[[c, r]]", None).unwrap();
        assert!(ConvShape::of(&dw).is_none());
    }

    #[test]
    fn the_default_fits_the_registers_and_round_trips() {
        let k = parse_text("conv", CONV, None).unwrap();
        for (e, lanes) in [
            ([1, 64, 112, 112, 3, 7, 7], 16),
            ([1, 512, 7, 7, 512, 3, 3], 16),
            ([2, 5, 4, 5, 3, 3, 3], 8),
        ] {
            let t = ConvTemplate::new(&k, &e, lanes).unwrap().unwrap();
            let d = t.decode(&t.default_config()).unwrap();
            let tile = d.conv.clone().unwrap();
            let regs = if lanes == 16 { 32 } else { 16 };
            assert!(tile.pixels * d.vector.div_ceil(lanes) <= regs, "{e:?}");
            assert_eq!(t.encode(&d), Some(t.default_config()));
            let text = t.space().format(&t.default_config()).unwrap();
            assert_eq!(t.space().parse(&text).unwrap(), t.default_config());
        }
        // A 7x7 plane is 49 pixels: tiles that cover it with little waste, not a 7-wide
        // vector.
        let m = AVX512_TWO_CORES;
        let h = heuristic(&k, &[1, 512, 7, 7, 512, 3, 3], m).unwrap();
        assert_eq!(h.vector, 32);
        let px = h.conv.unwrap().pixels;
        assert!(
            px >= 7 && 49 * 100 / (49usize.div_ceil(px) * px) >= 95,
            "{px}"
        );
        // Padded: whole rows, so that the tiles skip the taps that read padding.
        assert_eq!(px, 7);
        // A 32-channel panel that streams from L2 (2304 points: 295 KB) and a 64-channel one
        // that still fits: four registers of channels, five pixels; padded, whole rows of
        // 14 pixels at two registers of channels instead.
        let unpadded = parse_text(
            "conv",
            "y[[n, f, p, q]] += x[[n, c, p + r, q + s]] * w[[f, c, r, s]]",
            None,
        )
        .unwrap();
        let h = heuristic(&unpadded, &[1, 256, 14, 14, 256, 3, 3], m).unwrap();
        assert_eq!((h.vector, h.conv.unwrap().pixels), (64, 5));
        let h = heuristic(&k, &[1, 256, 14, 14, 256, 3, 3], m).unwrap();
        assert_eq!((h.vector, h.conv.unwrap().pixels), (32, 14));
        // A weight panel past L2 (4608 points x 32 channels x 4 bytes > 512 KiB): one
        // register of channels. One core: serial.
        let small = Machine {
            l2: 512 << 10,
            threads: 1,
            ..m
        };
        let h = heuristic(&k, &[1, 512, 7, 7, 512, 3, 3], small).unwrap();
        assert_eq!((h.vector, h.parallel), (16, false));
        // AVX2: 16 registers, 12 for accumulators, 2 per pixel at 16 channels (a 14×14
        // plane covered at 99% by 6-pixel tiles); no row parts. 3×3 layers whose panel
        // fills L1 run in reduction blocks, in 16 × 5 tiles (R11 and R5 of the bench).
        let avx2 = Machine {
            lanes: 8,
            registers: 16,
            ..m
        };
        let stride1 = parse_text(
            "conv",
            "y[[n, f, p, q]] += x[[n, c, p + r - 1, q + s - 1]] * w[[f, c, r, s]]",
            None,
        )
        .unwrap();
        let h = heuristic(&stride1, &[1, 32, 14, 14, 32, 3, 3], avx2).unwrap();
        assert_eq!((h.vector, h.conv.unwrap().pixels, h.k_block), (16, 6, 0));
        for e in [[1, 512, 7, 7, 512, 3, 3], [1, 128, 28, 28, 128, 3, 3]] {
            let h = heuristic(&stride1, &e, avx2).unwrap();
            let tile = h.conv.unwrap();
            assert_eq!((h.vector, tile.pixels), (16, 5));
            assert!(h.k_block > 0 && !tile.pixels_outer);
        }
        // A strided window (R0's 7×7, stride 2): 5 pixels, channel tiles outermost.
        for e in [[1, 64, 112, 112, 3, 7, 7], [1, 128, 28, 28, 128, 3, 3]] {
            let h = heuristic(&k, &e, avx2).unwrap();
            let tile = h.conv.unwrap();
            assert_eq!((h.vector, tile.pixels, tile.pixels_outer), (16, 5, false));
            assert_eq!(h.k_block, 0);
        }
        // Not with 32 registers.
        let h = heuristic(&k, &[1, 64, 112, 112, 3, 7, 7], m).unwrap();
        assert_ne!(h.conv.unwrap().pixels, 5);
    }

    /// Records written before the `conv_vector` knob read as channel-vector tiles; the
    /// default of a 1×1 convolution over 64 channels (runs of 3136 pixels) has pixel
    /// vectors, one over a 7×7 plane (runs of 49) keeps channel vectors.
    #[test]
    fn old_records_read_as_channel_vectors_and_pixel_vectors_have_runs() {
        let k = parse_text(
            "conv",
            "y[[n, f, p, q]] += x[[n, c, p + r, q + s]] * w[[f, c, r, s]]",
            None,
        )
        .unwrap();
        let r1 = [1, 64, 56, 56, 64, 1, 1];
        let t = ConvTemplate::new(&k, &r1, 16).unwrap().unwrap();
        let old = "conv_channels=32;conv_pixels=10;conv_border=pad;parallel=parallel;\
                   simd=wide;conv_pack=transpose;conv_store=vector";
        let cfg = t.decode(&t.parse(old).unwrap()).unwrap().conv.unwrap();
        assert!(!cfg.pixel_vector && !cfg.pixels_outer);
        let shape = ConvShape::of(&k).unwrap();
        assert_eq!(shape.pixel_run(&k, &r1), 3136);
        let d = t.decode(&t.default_config()).unwrap();
        assert_eq!((d.vector, d.conv.unwrap().pixel_vector), (8, true));
        let r12 = [1, 2048, 7, 7, 512, 1, 1];
        assert_eq!(shape.pixel_run(&k, &r12), 49);
        let t = ConvTemplate::new(&k, &r12, 16).unwrap().unwrap();
        assert!(!default_pixel_vector(&t));
        // Padded and strided: runs of one output row (of the window-expanded copy).
        let padded = parse_text("conv", CONV, None).unwrap();
        let shape = ConvShape::of(&padded).unwrap();
        assert_eq!(shape.pixel_run(&padded, &[1, 64, 28, 28, 64, 7, 7]), 28);
    }

    /// Whether the template's default is a pixel-vector tile.
    fn default_pixel_vector(t: &ConvTemplate) -> bool {
        t.decode(&t.default_config())
            .unwrap()
            .conv
            .unwrap()
            .pixel_vector
    }

    /// A strided window (`2·q + s`) along the innermost pixel axis: a pixel-vector tile
    /// reads it from the window-expanded copy, so its runs are the output rows; the
    /// default keeps channel vectors there.
    #[test]
    fn strided_windows_have_runs_of_output_rows() {
        let k = parse_text("conv", CONV, None).unwrap();
        let r0 = [1, 64, 112, 112, 3, 7, 7];
        let shape = ConvShape::of(&k).unwrap();
        let w = shape.window_axis(&r0).unwrap();
        assert_eq!((w.axis, w.window, w.pixel, w.stride), (3, 6, 3, 2));
        assert_eq!(shape.pixel_run(&k, &r0), 112);
        let t = ConvTemplate::new(&k, &r0, 16).unwrap().unwrap();
        assert!(!default_pixel_vector(&t));
        let pixels = "conv_channels=16;conv_pixels=16;conv_border=pad;parallel=parallel;\
                      simd=wide;conv_pack=loops;conv_store=vector;conv_vector=pixels;\
                      conv_outer=pixels";
        assert!(
            t.decode(&t.parse(pixels).unwrap())
                .unwrap()
                .conv
                .unwrap()
                .pixel_vector
        );
        // A stride along the rows only, or none: no window axis.
        let rows = parse_text(
            "conv",
            "y[[n, f, p, q]] += x[[n, c, 2 * p + r, q + s]] * w[[f, c, r, s]]",
            None,
        )
        .unwrap();
        let shape = ConvShape::of(&rows).unwrap();
        assert!(shape.window_axis(&[1, 8, 10, 30, 3, 3, 3]).is_none());
    }

    /// Pixel tiles outermost (on prepacked weights) where the input does not fit in L2
    /// and the weights fit in half of it: R4 of the bench (3.2 MB read in place, 128 KB of
    /// weights), not R9 (200 KB, 1 MB); always with pixel vectors (R1). The 3×3 windows
    /// (R2, R5, R8, R11) take reduction blocks, which walk channel tiles outermost.
    #[test]
    fn pixel_tiles_go_outermost_where_the_input_outgrows_l2_or_is_copied() {
        let m = AVX512_TWO_CORES;
        let conv = |stride: usize, pad: usize| {
            parse_text(
                "conv",
                &format!(
                    "y[[n, f, p, q]] += x[[n, c, {stride} * p + r - {pad}, {stride} * q + s - {pad}]] \
                     * w[[f, c, r, s]]"
                ),
                None,
            )
            .unwrap()
        };
        let outer_on = |k: &Kernel, e: &[usize], m: Machine| {
            heuristic(k, e, m).unwrap().conv.unwrap().pixels_outer
        };
        let outer = |k: &Kernel, e: &[usize]| outer_on(k, e, m);
        assert!(outer(&conv(2, 0), &[1, 128, 28, 28, 256, 1, 1]));
        assert!(!outer(&conv(1, 0), &[1, 1024, 14, 14, 256, 1, 1]));
        assert!(outer(&conv(1, 0), &[1, 64, 56, 56, 64, 1, 1]));
        for channels in [64, 128, 256, 512] {
            let plane = 56 * 64 / channels;
            let e = [1, channels, plane, plane, channels, 3, 3];
            assert!(!outer(&conv(1, 1), &e), "{channels}");
            assert_eq!(heuristic(&conv(1, 1), &e, m).unwrap().k_block, 16);
        }
        let one_core = Machine { threads: 1, ..m };
        assert!(!outer_on(&conv(1, 1), &[1, 64, 56, 56, 64, 3, 3], one_core));
    }

    /// A short reduction whose output rows no tile divides takes 14-pixel tiles (the
    /// register file less four, over two registers of channels); a long one keeps 10.
    #[test]
    fn short_reductions_take_the_widest_pixel_tile_that_fits() {
        let k = parse_text(
            "conv",
            "y[[n, f, p, q]] += x[[n, c, 2 * p + r, 2 * q + s]] * w[[f, c, r, s]]",
            None,
        )
        .unwrap();
        // n, f, p, q, c, r, s: 3 → 32 channels over 299×299 (149×149 out), N = 2.
        let stem = [2, 32, 149, 149, 3, 3, 3];
        let cfg = heuristic(&k, &stem, AVX512_TWO_CORES).unwrap();
        assert_eq!((cfg.vector, cfg.conv.unwrap().pixels), (32, 14));
        let deep = [2, 32, 149, 149, 64, 3, 3];
        let cfg = heuristic(&k, &deep, AVX512_TWO_CORES).unwrap();
        assert_eq!((cfg.vector, cfg.conv.unwrap().pixels), (32, 10));
    }

    /// Short 1×1 reductions read in place take pixel-vector tiles: with 32 registers three
    /// vectors of pixels where they cover the plane (R1: 56×56), two where three would not
    /// (8×8: 64 pixels, two 48-pixel tiles compute 96), two for `bf16` pairs; with AVX2
    /// three vectors of 8 pixels.
    #[test]
    fn pixel_vector_tiles_take_three_vectors_where_they_cover_the_plane() {
        let k = parse_text(
            "conv",
            "y[[n, f, p, q]] += x[[n, c, p + r, q + s]] * w[[f, c, r, s]]",
            None,
        )
        .unwrap();
        let tile = |e: &[usize], m: Machine| {
            let cfg = heuristic(&k, e, m).unwrap();
            let t = cfg.conv.unwrap();
            assert!(t.pixel_vector, "{e:?} on {m:?}: {t:?}");
            (cfg.vector, t.pixels)
        };
        let (r1, small) = ([1, 64, 56, 56, 64, 1, 1], [1, 64, 8, 8, 64, 1, 1]);
        assert_eq!(tile(&r1, AVX512_TWO_CORES), (8, 48));
        assert_eq!(tile(&small, AVX512_TWO_CORES), (8, 32));
        assert_eq!(tile(&r1, AVX2_TWO_CORES), (4, 24));
        let mut bf16 = k.clone();
        for p in &mut bf16.params[..2] {
            p.dtype = DType::BF16;
        }
        let m = Machine {
            bf16_dot: true,
            ..AVX512_TWO_CORES
        };
        let cfg = heuristic(&bf16, &r1, m).unwrap();
        assert!(cfg.pairs, "{cfg:?}");
        assert_eq!(cfg.conv.as_ref().unwrap().pixels, 32, "{cfg:?}");
    }

    /// A strided, unpadded input (a 1×1 stride-2 convolution) is read in place with pixel
    /// tiles outermost, however many channel tiles read it (R4, R7 of the bench), except
    /// where that re-reads weights beyond L2 over an input that fits ([`WeightReread`]: R10,
    /// 2 MB of weights over 200 KB read, and 2048 → 1024 channels over 14×14).
    #[test]
    fn strided_inputs_are_read_in_place_with_pixel_tiles_outermost() {
        let k = parse_text(
            "conv",
            "y[[n, f, p, q]] += x[[n, c, 2 * p + r, 2 * q + s]] * w[[f, c, r, s]]",
            None,
        )
        .unwrap();
        let shape = ConvShape::of(&k).unwrap();
        let (r4, r10) = ([1, 128, 28, 28, 256, 1, 1], [1, 512, 7, 7, 1024, 1, 1]);
        let (r7, wide) = ([1, 256, 14, 14, 512, 1, 1], [1, 2048, 7, 7, 1024, 1, 1]);
        assert_eq!(shape.read_steps(&r10), vec![1, 1, 2, 2]);
        for m in [
            AVX512_TWO_CORES,
            Machine {
                threads: 1,
                ..AVX512_TWO_CORES
            },
        ] {
            for (e, outer) in [(r4, true), (r7, true), (r10, false), (wide, false)] {
                let tile = heuristic(&k, &e, m).unwrap().conv.unwrap();
                assert!(
                    !tile.pad && tile.pixels_outer == outer,
                    "{e:?} on {m:?}: {tile:?}"
                );
            }
        }
        // A 3×3 window moves along the same axes: nothing to drop.
        assert_eq!(shape.read_steps(&[1, 128, 28, 28, 256, 3, 3]), vec![1; 4]);
    }

    /// Unpadded convolutions whose rows a tile of up to 14 pixels divides get such tiles
    /// (28 accumulators: their reads are one address plus constants); rows of 7 (R10, R12 of
    /// the bench) take whole rows of four registers of channels (64×7).
    #[test]
    fn unpadded_rows_get_row_tiles_within_the_registers() {
        let m = AVX512_TWO_CORES;
        let conv = |stride: usize| {
            parse_text(
                "conv",
                &format!(
                    "y[[n, f, p, q]] += x[[n, c, {stride} * p + r, {stride} * q + s]] \
                     * w[[f, c, r, s]]"
                ),
                None,
            )
            .unwrap()
        };
        let tile = |k: &Kernel, e: &[usize]| default_tile(k, e, m);
        // n f p q c r s: R4, R7, R9, R10, R12, and a 3×3 window over 28×28 outputs.
        assert_eq!(tile(&conv(2), &[1, 128, 28, 28, 256, 1, 1]), (32, 14));
        assert_eq!(tile(&conv(2), &[1, 256, 14, 14, 512, 1, 1]), (32, 14));
        assert_eq!(tile(&conv(1), &[1, 1024, 14, 14, 256, 1, 1]), (32, 14));
        assert_eq!(tile(&conv(2), &[1, 512, 7, 7, 1024, 1, 1]), (64, 7));
        assert_eq!(tile(&conv(1), &[1, 2048, 7, 7, 512, 1, 1]), (64, 7));
        assert_eq!(tile(&conv(1), &[2, 64, 28, 28, 32, 3, 3]), (32, 14));
        // Rows of 7 whose channels four registers do not divide, rows of 4 (16
        // accumulators in a four-register row tile) and windows (a 1×3 one) keep the tile
        // that crosses rows.
        assert_eq!(tile(&conv(1), &[1, 96, 7, 7, 512, 1, 1]), (32, 10));
        assert_eq!(tile(&conv(1), &[1, 256, 4, 4, 512, 1, 1]).0, 32);
        assert_eq!(tile(&conv(1), &[1, 2048, 7, 7, 512, 1, 3]), (32, 10));
        // With AVX2 rows of 7 keep two-register tiles.
        assert_eq!(
            default_tile(&conv(1), &[1, 2048, 7, 7, 512, 1, 1], AVX2_TWO_CORES).0,
            16
        );
    }

    /// Padded convolutions take a part of a row with at least 70% of the accumulators
    /// over a larger tile that crosses rows, unless the reduction is short; short ones over
    /// NCHW rows of whole vectors take 16×16 tiles.
    #[test]
    fn padded_rows_take_a_part_of_a_row_over_a_crossing_tile() {
        let m = AVX512_TWO_CORES;
        let conv = |pad: usize| {
            parse_text(
                "conv",
                &format!(
                    "y[[n, f, p, q]] += x[[n, c, p + r - {pad}, q + s - {pad}]] * w[[f, c, r, s]]"
                ),
                None,
            )
            .unwrap()
        };
        let tile = |k: &Kernel, e: &[usize]| default_tile(k, e, m);
        // n f p q c r s.
        assert_eq!(tile(&conv(1), &[4, 128, 16, 16, 128, 3, 3]), (32, 8));
        assert_eq!(tile(&conv(1), &[1, 96, 35, 35, 48, 3, 3]), (32, 7));
        // A channel tile of four registers gives way to two for a part of the row.
        assert_eq!(tile(&conv(2), &[1, 192, 27, 27, 96, 5, 5]), (32, 9));
        // Five pixels are too few; a 27-point reduction keeps the larger tile (rows of 150
        // pixels, 15 × 10)...
        assert_eq!(tile(&conv(1), &[1, 64, 15, 15, 64, 3, 3]).1, 10);
        assert_eq!(tile(&conv(1), &[1, 32, 150, 150, 3, 3, 3]), (32, 10));
        // ... or, over rows of whole vectors, takes one 16×16 transpose block (YOLO's Y0).
        assert_eq!(tile(&conv(1), &[1, 32, 544, 544, 3, 3, 3]), (16, 16));
        let y0 = heuristic(&conv(1), &[1, 32, 544, 544, 3, 3, 3], m).unwrap();
        assert!(!y0.conv.unwrap().pixels_outer, "channel tiles outermost");
        assert_eq!(tile(&conv(1), &[1, 64, 224, 224, 6, 3, 3]), (16, 16));
        // 144 points: the row part.
        assert_eq!(tile(&conv(1), &[1, 64, 224, 224, 16, 3, 3]), (32, 14));
    }

    #[test]
    fn resnet_defaults_pack_by_transposes_and_round_trip() {
        let k = parse_text("conv", CONV, None).unwrap();
        let m = AVX512_TWO_CORES;
        // n f p q c r s: R0, R1, R5, R11, R12 of the bench (output extents).
        for e in [
            [1, 64, 112, 112, 3, 7, 7],
            [1, 128, 28, 28, 128, 3, 3],
            [1, 512, 7, 7, 512, 3, 3],
            [1, 2048, 7, 7, 512, 1, 1],
        ] {
            let h = heuristic(&k, &e, m).unwrap();
            assert!(h.conv.as_ref().unwrap().transpose, "{e:?}");
            let t = ConvTemplate::build(&k, &e, m, &ConvShape::of(&k).unwrap(), h.clone()).unwrap();
            assert_eq!(t.decode(&t.default_config()).unwrap(), h, "{e:?}");
        }
        // Fewer channels than a transpose: packed by the loops, and the space has no
        // transposed point with an 8-channel tile.
        let h = heuristic(&k, &[1, 8, 5, 5, 3, 3, 3], m).unwrap();
        assert_eq!(h.vector, 8);
        assert!(!h.conv.as_ref().unwrap().transpose);
        let mut bad = h.clone();
        if let Some(t) = bad.conv.as_mut() {
            t.transpose = true;
        }
        let t = ConvTemplate::build(
            &k,
            &[1, 8, 5, 5, 3, 3, 3],
            m,
            &ConvShape::of(&k).unwrap(),
            h,
        )
        .unwrap();
        assert_eq!(t.encode(&bad), None);
        assert!(validate(&k, &bad, bad.conv.as_ref().unwrap()).is_err());
    }

    /// `bf16` inputs on a machine with `vdpbf16ps`: the default takes the input channels in
    /// pairs (padded copy, loop packing; whole channel vectors, or pixel vectors where the
    /// `f32` default has them); without the instruction, or in `f32`, it does not, and the
    /// space has no pairs point.
    #[test]
    fn bf16_defaults_pair_input_channels_where_the_machine_has_the_dot_product() {
        let mut k = parse_text(
            "conv",
            "y[[n, f, p, q]] += x[[n, c, p + r - 1, q + s - 1]] * w[[f, c, r, s]]",
            None,
        )
        .unwrap();
        let one = parse_text(
            "conv",
            "y[[n, f, p, q]] += x[[n, c, p + r, q + s]] * w[[f, c, r, s]]",
            None,
        )
        .unwrap();
        let f32_space = ConvTemplate::new(&k, &[1, 64, 28, 28, 64, 3, 3], 16)
            .unwrap()
            .unwrap();
        let text = f32_space
            .space()
            .format(&f32_space.default_config())
            .unwrap();
        assert!(f32_space
            .parse(&text.replace("conv_vector=channels", "conv_vector=pairs"))
            .is_err());
        let mut one = one;
        for kernel in [&mut k, &mut one] {
            for p in kernel.params.iter_mut().filter(|p| !p.is_output) {
                p.dtype = DType::BF16;
            }
        }
        let m = Machine {
            bf16_dot: true,
            ..AVX512_TWO_CORES
        };
        // A 3x3 one and a 1x1 one whose f32 default is a pixel-vector tile.
        for (kernel, e) in [
            (&k, [1, 128, 28, 28, 128, 3, 3]),
            (&one, [1, 64, 56, 56, 64, 1, 1]),
        ] {
            let h = heuristic(kernel, &e, m).unwrap();
            let tile = h.conv.clone().unwrap();
            assert!(h.pairs && tile.pad && !tile.transpose, "{h:?}");
            // Pixel pairs where the f32 default has pixel vectors (the short 1x1 one).
            let without = heuristic(kernel, &e, AVX512_TWO_CORES).unwrap();
            assert_eq!(
                tile.pixel_vector,
                without.conv.as_ref().unwrap().pixel_vector
            );
            assert_eq!(tile.pixel_vector, e[6] == 1);
            assert!(validate(kernel, &h, &tile).is_ok());
            assert!(!without.pairs);
            let t = ConvTemplate::build(
                kernel,
                &e,
                AVX512_TWO_CORES,
                &ConvShape::of(kernel).unwrap(),
                h.clone(),
            )
            .unwrap();
            let text = t.space().format(&t.default_config()).unwrap();
            let want = if tile.pixel_vector {
                "conv_vector=pixel_pairs"
            } else {
                "conv_vector=pairs"
            };
            assert!(text.contains(want), "{text}");
            assert_eq!(t.decode(&t.parse(&text).unwrap()).unwrap(), h);
            // Pairs read the padded copy.
            let unpadded = CpuConfig {
                conv: Some(ConvTile {
                    pad: false,
                    ..tile.clone()
                }),
                ..h.clone()
            };
            assert_eq!(t.encode(&unpadded), None);
            assert!(validate(kernel, &unpadded, unpadded.conv.as_ref().unwrap()).is_err());
        }
    }

    /// With 16 registers, a channel tile whose panel over the whole reduction fills L1
    /// runs the input channels in blocks (a 1×3 window over 512 channels and 7×7 pixels:
    /// blocks of 64; ResNet-50's 3×3 layers over 64–512 channels: 16); not where the panel
    /// is smaller (R9), not in a 1×1 convolution (R12 of the bench, 512 → 2048 channels over
    /// 7×7, which reads the fused copy). With 32 registers 16 channels of a 3×3 layer's
    /// 32-channel rows fill more than half of a 32 KB L1: still blocks of 16. Records from
    /// before the knob read as unblocked; blocks
    /// need channel tiles outermost.
    #[test]
    fn reduction_blocks_where_the_panel_fills_l1() {
        let k = parse_text(
            "conv",
            "y[[n, f, p, q]] += x[[n, c, p + r, q + s]] * w[[f, c, r, s]]",
            None,
        )
        .unwrap();
        let avx2 = AVX2_TWO_CORES;
        let r12 = [1, 2048, 7, 7, 512, 1, 1];
        assert_eq!(heuristic(&k, &r12, avx2).unwrap().k_block, 0);
        let wide = [1, 2048, 7, 7, 512, 1, 3];
        let h = heuristic(&k, &wide, avx2).unwrap();
        assert_eq!((h.vector, h.k_block), (16, 64));
        let padded = parse_text(
            "conv",
            "y[[n, f, p, q]] += x[[n, c, p + r - 1, q + s - 1]] * w[[f, c, r, s]]",
            None,
        )
        .unwrap();
        // ResNet-50's 3×3 layers R2, R5, R8, R11: blocks of 16 (R2's weights fit in L2,
        // yet channel tiles outermost, which blocks need).
        for (channels, plane) in [(64, 56), (128, 28), (256, 14), (512, 7)] {
            let e = [1, channels, plane, plane, channels, 3, 3];
            let d = heuristic(&padded, &e, avx2).unwrap();
            assert_eq!((d.vector, d.k_block), (16, 16), "{channels} over {plane}²");
            assert!(!d.conv.unwrap().pixels_outer);
        }
        assert!(!h.conv.as_ref().unwrap().pixels_outer);
        let r9 = [1, 1024, 14, 14, 256, 1, 1];
        assert_eq!(heuristic(&k, &r9, avx2).unwrap().k_block, 0);
        // With 32 registers, 32-channel tiles and 32 KB of L1: the 1×3 window in blocks
        // of 32 (12 KB of rows), the 3×3 ones in blocks of 16 (18 KB: more than half of L1).
        let cascade = CASCADE_TWO_CORES;
        assert_eq!(heuristic(&k, &wide, cascade).unwrap().k_block, 32);
        for (channels, plane) in [(64, 56), (128, 28), (256, 14), (512, 7)] {
            let e = [1, channels, plane, plane, channels, 3, 3];
            let d = heuristic(&padded, &e, cascade).unwrap();
            assert_eq!((d.vector, d.k_block), (32, 16), "{channels} over {plane}²");
            assert!(!d.conv.unwrap().pixels_outer);
        }
        let shape = ConvShape::of(&k).unwrap();
        assert_eq!(shape.block_index(), Some(4));
        let t = ConvTemplate::build(&k, &wide, avx2, &shape, h.clone()).unwrap();
        let d = t.decode(&t.default_config()).unwrap();
        assert_eq!(d.k_block, 64);
        // In 16 × 5 tiles, pixel blocks whose partial sums fill half of L1: 16 KB / (16 × 5
        // floats).
        let tile = d.conv.clone().unwrap();
        assert_eq!((tile.pixels, tile.block_tiles), (5, 51));
        let old = "conv_channels=16;conv_pixels=6;conv_border=pad;parallel=parallel;\
                   simd=compiler;conv_pack=loops;conv_store=scalar";
        assert_eq!(t.decode(&t.parse(old).unwrap()).unwrap().k_block, 0);
        let outer = CpuConfig {
            conv: Some(ConvTile {
                pixels_outer: true,
                ..h.conv.clone().unwrap()
            }),
            ..h.clone()
        };
        assert_eq!(t.encode(&outer), None);
        assert!(validate(&k, &outer, outer.conv.as_ref().unwrap()).is_err());
        let whole = CpuConfig { k_block: 512, ..h };
        assert_eq!(t.encode(&whole), None);
    }

    /// The stem (7×7 over 3 channels, 64 output channels) on a 32 KB L1: its two 18.8 KB
    /// channel-tile panels do not fit together, so its pixel tiles walk in pixel blocks
    /// that read half of L2 of input; with 48 KB of L1 (both fit), in tiles of 16 channels
    /// (AVX2, channel tiles outermost) and with 3×3 windows over 64 channels (a 73 KB
    /// panel) there are none.
    #[test]
    fn pixel_blocks_where_one_panel_fits_l1_and_all_do_not() {
        let k = parse_text("conv", CONV, None).unwrap();
        let stem = [1, 64, 112, 112, 3, 7, 7];
        let cascade = CASCADE_TWO_CORES;
        let blocks = |k: &Kernel, e: &[usize], m: Machine| {
            let h = heuristic(k, e, m).unwrap();
            let tile = h.conv.clone().unwrap();
            let shape = ConvShape::of(k).unwrap();
            let t = ConvTemplate::build(k, e, m, &shape, h.clone()).unwrap();
            // The search's points derive them as the default does.
            let d = t.decode(&t.default_config()).unwrap();
            assert_eq!(d.conv.unwrap().block_tiles, tile.block_tiles);
            (
                h.vector,
                tile.pixels,
                tile.pixels_outer,
                h.k_block,
                tile.block_tiles,
            )
        };
        // 512 KB of input per block: 14 pixels × 147 points × 4 bytes per tile.
        assert_eq!(
            blocks(&k, &stem, cascade),
            (32, 14, true, 0, (512 << 10) / (14 * 147 * 4))
        );
        assert_eq!(blocks(&k, &stem, AVX512_TWO_CORES).4, 0);
        assert_eq!(blocks(&k, &stem, AVX2_TWO_CORES).4, 0);
        let padded = parse_text(
            "conv",
            "y[[n, f, p, q]] += x[[n, c, p + r - 1, q + s - 1]] * w[[f, c, r, s]]",
            None,
        )
        .unwrap();
        let r2 = [1, 64, 56, 56, 64, 3, 3];
        let reread = WeightReread::of(&r2, &ConvShape::of(&padded).unwrap(), cascade);
        assert_eq!(block_tiles(cascade, &reread, (32, 14), 0, true), 0);
    }

    /// The space has no point that walks pixel tiles outermost where that re-reads the
    /// weights beyond L2 over an input that fits ([`WeightReread`]): R11 of the bench (9.4
    /// MB of weights over 166 KB of padded input) in 16×6 tiles, but it keeps them at 12
    /// pixels, and over a 28×28 plane whose padded input outgrows half of L2 (R5).
    #[test]
    fn no_pixel_tiles_outermost_that_reread_the_weights_beyond_l2() {
        let k = parse_text(
            "conv",
            "y[[n, f, p, q]] += x[[n, c, p + r - 1, q + s - 1]] * w[[f, c, r, s]]",
            None,
        )
        .unwrap();
        let avx2 = AVX2_TWO_CORES;
        let shape = ConvShape::of(&k).unwrap();
        let point = |e: &[usize], m: Machine, text: &str| {
            let t = ConvTemplate::build(&k, e, m, &shape, heuristic(&k, e, m).unwrap()).unwrap();
            t.parse(text).is_ok()
        };
        let r11 = [1, 512, 7, 7, 512, 3, 3];
        let cfg = |v: usize, m: usize, outer: &str| {
            format!(
                "conv_channels={v};conv_pixels={m};conv_border=pad;parallel=parallel;\
                 simd=compiler;conv_pack=loops;conv_store=vector;conv_vector=channels;\
                 conv_outer={outer};conv_kblock=0"
            )
        };
        assert!(point(&r11, avx2, &cfg(16, 6, "channels")));
        assert!(!point(&r11, avx2, &cfg(16, 6, "pixels")));
        assert!(!point(&r11, AVX512_TWO_CORES, &cfg(32, 10, "pixels")));
        assert!(point(&r11, AVX512_TWO_CORES, &cfg(16, 12, "pixels")));
        assert!(
            !heuristic(&k, &r11, avx2)
                .unwrap()
                .conv
                .unwrap()
                .pixels_outer
        );
        // R5: 590 KB of weights over 460 KB of padded input, more than half of 512 KB.
        assert!(point(
            &[1, 128, 28, 28, 128, 3, 3],
            avx2,
            &cfg(16, 6, "pixels")
        ));
    }
}
