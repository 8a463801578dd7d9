//! The CPU schedule: a register tile over (up to) two output axes, a parallel outer loop,
//! optionally a blocked reduction.
//!
//! The generated loop nest (see [`crate::codegen::c`]) is, without reduction blocking,
//!
//! ```text
//! parallel for every other output index, v0 in steps of `vector`, u0 in steps of `unroll`:
//!     (if packing) refill this thread's panel of the vector operand when v0 changed
//!     acc[unroll][vector] = 0
//!     for every reduction point (r0, r1, ...):
//!         for u < unroll, v < vector:            // v innermost: vectorized
//!             acc[u][v] += body(..., u0 + u, v0 + v, r...)
//!     out[...] = epilogue(acc[u][v])              // fused, one store per element
//! ```
//!
//! and with `k_block = B` (the first reduction index `r0` cut in blocks of `B`):
//!
//! ```text
//! parallel for every other output index, v0 in steps of `vector`, ub in u-blocks (u_block):
//!     for k0 in 0..E(r0) step B:
//!         (if packing) fill this thread's panel for (v0, r0 in k0..k0+B)
//!         for u0 in the u-block, step `unroll`:
//!             acc = k0 == 0 ? 0 : out[...]         // partial sums live in the output
//!             for r0 in k0..k0+B, every other reduction point:
//!                 acc[u][v] += body(...)
//!             out[...] = last block ? epilogue(acc) : acc
//! ```
//!
//! so one block of the panel (`B` × the other reduction points × the vector tile) stays
//! in L1 while every register tile of the u-block sweeps it.
//!
//! Tiles and blocks that do not divide an extent are predicated (the edge tiles run with
//! smaller trip counts), so every shape runs.
//!
//! ```
//! use tensor_dsl::{ir::parse_text, template::cpu::CpuConfig};
//! let k = parse_text("mm", "c[[i,j]] += a[[i,k]] * b[[k,j]]", None).unwrap();
//! let cfg = CpuConfig::heuristic(&k, &[512, 512, 512], 16);
//! assert_eq!((cfg.vector_axis, cfg.unroll_axis), (Some(1), Some(0)));
//! assert!(cfg.validate(&k).is_ok());
//! ```

use super::cpu_machine::CpuMachine;
use crate::ir::{Access, BodyKind, Kernel};
use serde::{Deserialize, Serialize};
use tuner::{Config, SearchSpace};

/// One point of the CPU schedule space.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct CpuConfig {
    /// Spatial index vectorized in the innermost loop (`None` for a rank-0 output).
    pub vector_axis: Option<usize>,
    /// Register-tile width along the vector axis.
    pub vector: usize,
    /// Second spatial index of the register tile.
    pub unroll_axis: Option<usize>,
    /// Register-tile height along the unroll axis.
    pub unroll: usize,
    /// Run the outer loops on all cores (OpenMP).
    pub parallel: bool,
    /// Copy the operand that varies along the vector axis (and not the unroll axis) into a
    /// contiguous per-thread panel, reused across the unroll axis (see [`packed_access`]).
    pub pack: bool,
    /// Loop order of the tile loops: `false` walks the unroll axis innermost (a packed panel
    /// is reused across it), `true` walks the vector axis innermost.
    #[serde(default)]
    pub unroll_outer: bool,
    /// Block the first reduction index in chunks of this many iterations (0: no blocking,
    /// the whole reduction runs inside one register tile). With a block, the output tile
    /// accumulates across blocks (partial sums are stored in the output, the epilogue runs
    /// after the last block) and the tile loops run in u-blocks of [`u_block`] rows. For a
    /// convolution tile ([`crate::template::cpu_conv::ConvTile`]) the input channel is cut
    /// instead ([`crate::template::cpu_conv::ConvShape::block_index`]): per channel tile,
    /// every pixel tile runs one block before the next block starts, its partial sums
    /// kept in a per-thread buffer.
    #[serde(default)]
    pub k_block: usize,
    /// Ask the C compiler for 512-bit vectors (GCC's `prefer-vector-width=512`, on x86-64
    /// with AVX-512 only). GCC tunes for 256-bit vectors on AVX-512 machines by default, so
    /// without this a 32-float tile row is 4 `ymm` registers and 16 accumulators fill half
    /// the register file; with it, 2 `zmm`.
    #[serde(default)]
    pub wide_simd: bool,
    /// A convolution's register tile ([`crate::template::cpu_conv`]): with it, the config
    /// vectorizes the output channel (`vector_axis`, `vector`) over a tile of fused output
    /// pixels, and the other tile knobs are unused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conv: Option<super::cpu_conv::ConvTile>,
    /// A kernel of several stages' knobs ([`crate::template::rows`]): with them, the config
    /// is the row template's (see [`RowsCpuConfig::to_cpu_config`]); the tile knobs are
    /// unused, and `parallel`, `vector` and `wide_simd` repeat the row knobs of the same
    /// meaning, for the analytic features.
    ///
    /// [`RowsCpuConfig::to_cpu_config`]: crate::template::rows::RowsCpuConfig::to_cpu_config
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rows: Option<super::rows::RowsCpuConfig>,
    /// Lanes (`f32`) of the explicit vector micro-kernel, 0 for none: with a packed panel,
    /// every packed tile whose width is a multiple of it is written as GNU C vector code
    /// (`unroll × vector/lanes` vector accumulators, the panel row loaded as vectors, the
    /// other operand broadcast; see [`crate::lower::cpu_micro`]) instead of loops the
    /// compiler must vectorize.
    #[serde(default)]
    pub vector_code: usize,
    /// `bf16` pairs (the space's `kernel=pairs`): for a kernel that sums the product of two
    /// `bf16` inputs over one reduction index, with 16-lane vector code, the panel holds the
    /// packed operand as raw `bf16` pairs of consecutive reduction points and the micro-kernel
    /// multiplies two points per instruction (AVX-512 BF16's `vdpbf16ps`; where the compiler
    /// targets a CPU without it, shifts and FMAs on the same layout; see
    /// [`crate::lower::cpu_pairs`]). Where the kernel or the rest of the config does not
    /// fit, the tiles are the plain vector code.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub pairs: bool,
}

/// Parallel work items a blocked reduction aims for: the unroll axis is cut into u-blocks
/// only as far as needed to give the outer loops this many iterations.
pub const U_BLOCK_WORK: usize = 16;

/// Register tiles the analytic default wants to share each filled reduction block: with
/// fewer, it leaves the reduction unblocked. A 64×8192·8192×64 matmul (whose panel
/// overflows L2, and whose u-blocks are one 8-row tile each so that two tiles go to each
/// core) ran at 242 GFLOPS with 512-point blocks and 387 without, 447 with the panels
/// made ahead of calls (which blocks rule out); 2 cores, AVX-512.
pub const MIN_BLOCK_TILES: usize = 8;

/// The u-block of a config with reduction blocking, in rows of the unroll axis (a multiple
/// of `unroll`, so blocks start on tile boundaries): the whole axis when the other output
/// indices and the vector tiles already give [`U_BLOCK_WORK`] parallel iterations, else
/// the axis cut into just enough blocks. Every u-block refills the packed panel once per
/// reduction block, so blocks are kept as tall as the parallelism allows (on a
/// 512×1024·1024×4096 matmul, `k_block` 256 ran 26% behind the unblocked tile with 64-row
/// u-blocks and 8% behind with whole-axis ones, each pair timed side by side).
pub fn u_block(kernel: &Kernel, extents: &[usize], config: &CpuConfig) -> usize {
    let ru = config.unroll.max(1);
    let Some(eu) = config.unroll_axis.map(|u| extents[u]) else {
        return ru;
    };
    let outer: usize = kernel
        .spatial()
        .into_iter()
        .filter(|&s| Some(s) != config.unroll_axis)
        .map(|s| {
            if Some(s) == config.vector_axis {
                extents[s].div_ceil(config.vector.max(1))
            } else {
                extents[s]
            }
        })
        .product();
    let blocks = U_BLOCK_WORK.div_ceil(outer.max(1)).min(eu.div_ceil(ru));
    eu.div_ceil(blocks.max(1)).div_ceil(ru) * ru
}

/// The blocked reduction index of a config and its block, if the config blocks one: the
/// first reduction index, when `k_block` is positive and smaller than its extent.
pub fn blocked_reduction(
    kernel: &Kernel,
    extents: &[usize],
    config: &CpuConfig,
) -> Option<(usize, usize)> {
    if config.k_block == 0 || kernel.kind != BodyKind::Sum {
        return None;
    }
    let r0 = *kernel.reduction().first()?;
    (config.k_block < extents[r0]).then_some((r0, config.k_block))
}

/// Reduction points one packed panel holds: every reduction point, or one block's worth
/// with reduction blocking.
pub fn panel_points(kernel: &Kernel, extents: &[usize], config: &CpuConfig) -> usize {
    kernel
        .reduction()
        .iter()
        .map(|&r| match blocked_reduction(kernel, extents, config) {
            Some((r0, b)) if r0 == r => b,
            _ => extents[r],
        })
        .product()
}

/// Row stride (in floats) of a packed panel for a vector tile of `vector` that loop tiles
/// (vectorized by the compiler) read: padded past the tile and never a power of two. A panel
/// whose rows are contiguous lets GCC vectorize such a tile across the reduction instead of
/// along the tile, and power-of-two strides cause cache-set conflicts; either one measured
/// 20x slower than this (512³ matmul, AVX-512). Panels read by explicit vector code have
/// contiguous rows instead (`lower::cpu::Plan::panel_stride`); the template sizes panels
/// with this stride, an upper bound.
pub fn pack_stride(vector: usize) -> usize {
    let s = vector + 8;
    if s.is_power_of_two() {
        s + 8
    } else {
        s
    }
}

/// Largest packed panel, in bytes.
pub const MAX_PACK_BYTES: usize = 4 << 20;

/// The input access a config packs, if any: the first read in the main statement that
/// depends on the vector axis and not on the unroll axis, when the kernel reduces and the
/// panel ([`panel_points`] × the vector tile) fits in [`MAX_PACK_BYTES`].
///
/// Packing turns strided or transposed reads into one contiguous stream and removes the
/// cache-set conflicts of power-of-two row strides (measured: a 512×1024·1024×64 matmul
/// went from 7 to ~150 GFLOPS on a 2-core AVX-512 machine).
pub fn packed_access(kernel: &Kernel, extents: &[usize], config: &CpuConfig) -> Option<Access> {
    let v = config.vector_axis?;
    if !config.pack || kernel.kind != BodyKind::Sum || kernel.reduction().is_empty() {
        return None;
    }
    let points = panel_points(kernel, extents, config);
    if points
        .saturating_mul(pack_stride(config.vector))
        .saturating_mul(4)
        > MAX_PACK_BYTES
    {
        return None;
    }
    let uses = |a: &Access, i: usize| a.dims.iter().any(|d| d.terms.iter().any(|&(x, _)| x == i));
    let mut found = None;
    kernel.body.visit_accesses(&mut |a| {
        if found.is_none() && uses(a, v) && !config.unroll_axis.is_some_and(|u| uses(a, u)) {
            found = Some(a.clone());
        }
    });
    found
}

/// Register-tile elements we allow: beyond this GCC spills the accumulators.
pub const MAX_TILE: usize = 256;

/// Register-tile elements explicit vector code may have: 32 vectors of 16 lanes.
pub const MAX_VECTOR_TILE: usize = 512;

/// Whether a `u × v` tile of explicit vector code with `lanes` lanes fits in `registers`
/// vector registers: its accumulators, one panel row and a broadcast.
pub fn vector_tile_fits(u: usize, v: usize, lanes: usize, registers: usize) -> bool {
    let vectors = v.div_ceil(lanes.max(1));
    u * vectors + vectors < registers && u * v <= MAX_VECTOR_TILE
}

impl CpuConfig {
    /// The analytic default for a machine with `lanes` SIMD lanes, its register count and
    /// this machine's caches ([`CpuMachine::with_lanes`]): a convolution
    /// ([`super::cpu_conv::ConvShape`]) gets the convolution tile's analytic default
    /// ([`super::cpu_conv::heuristic`]), every other kernel [`Self::heuristic_for`].
    pub fn heuristic(kernel: &Kernel, extents: &[usize], lanes: usize) -> CpuConfig {
        let machine = super::cpu_conv::Machine::with_lanes(lanes);
        super::cpu_conv::heuristic(kernel, extents, machine)
            .unwrap_or_else(|| CpuConfig::einsum_heuristic(kernel, extents, lanes))
    }

    /// The einsum register tile's default ([`Self::heuristic_for`] on this machine), also
    /// for convolutions.
    pub fn einsum_heuristic(kernel: &Kernel, extents: &[usize], lanes: usize) -> CpuConfig {
        Self::heuristic_for(kernel, extents, &CpuMachine::with_lanes(lanes))
    }

    /// The analytic default on `machine` (`L` lanes, `R` vector registers, its L2):
    ///
    /// * the output's innermost axis is the vector axis: where it is at least
    ///   [`wide_vectors`] vectors long, that many vectors wide in 6 rows ([`wide_tile`]:
    ///   3/4 of the registers as accumulators, 6×64 with AVX-512, 6×16 with AVX2);
    ///   otherwise two vectors wide (`2L`) where it is longer than one (with 8 lanes or
    ///   more: its last tile is then vector code over a zero-padded panel), else one, else
    ///   its extent rounded up to a power of two; the next axis is unrolled;
    /// * a tile that is not the wide one holds `R / 2` vector accumulators — the other
    ///   half holds the panel row and the broadcasts — in at most 8
    ///   rows (as many as a two-vector tile has where the tile is one vector wide), the
    ///   last tile of the axis a function of its own size where they do not divide it: in
    ///   single-core checks on a 2-core AVX-512 EPYC (packed panel, K = 1024 and 4096) 12
    ///   and 14 rows of two vectors ran slower than 8;
    /// * the vector operand is packed into a per-thread panel, and with 8 lanes or more the
    ///   packed tiles are explicit vector code ([`CpuConfig::vector_code`]); 512-bit vectors
    ///   are asked for where there are 16 lanes;
    /// * the first reduction index is blocked only when the whole panel would not fit in
    ///   L2 (each tile would then stream it from L3): in blocks of at most half the L2,
    ///   and only where [`MIN_BLOCK_TILES`] register tiles share each filled block;
    /// * the outer loops run in parallel when the work pays for the threads.
    pub fn heuristic_for(kernel: &Kernel, extents: &[usize], machine: &CpuMachine) -> CpuConfig {
        if let Ok(plan) = crate::template::rows::RowPlan::new(kernel, extents) {
            // A kernel of several stages: the row template's default, carried as a CpuConfig.
            return crate::template::rows::RowsCpuConfig::heuristic_for(&plan, machine.lanes)
                .to_cpu_config();
        }
        let wide = kernel
            .spatial()
            .last()
            .is_some_and(|&v| wide_tile(machine, extents[v]));
        let cfg = Self::tile_default(kernel, extents, machine, wide);
        let unblocked = CpuConfig {
            k_block: 0,
            ..cfg.clone()
        };
        if wide && panel_bytes(kernel, extents, &unblocked) > machine.l2_bytes {
            // The wide tile's panel would not fit in L2: where the two-vector tile's is
            // narrower (AVX-512: about half), that tile and its reduction blocking stay what
            // they were measured as; where it is as wide (AVX2), the wide tile keeps its
            // reduction blocks (6×16 ran 1.3× ahead of 4×16, both in 256-point blocks).
            let narrow = Self::tile_default(kernel, extents, machine, false);
            if narrow.vector < cfg.vector {
                return narrow;
            }
        }
        cfg
    }

    /// [`Self::heuristic_for`]'s register tile, the wide one ([`wide_tile`]) or not.
    fn tile_default(
        kernel: &Kernel,
        extents: &[usize],
        machine: &CpuMachine,
        wide: bool,
    ) -> CpuConfig {
        let spatial = kernel.spatial();
        let lanes = machine.lanes.max(1);
        let vector_axis = spatial.last().copied();
        let unroll_axis = (spatial.len() >= 2).then(|| spatial[spatial.len() - 2]);
        let vector = match vector_axis {
            None => 1,
            Some(v) => {
                let e = extents[v];
                if wide {
                    wide_vectors(machine) * lanes
                } else if e > lanes && lanes >= 8 {
                    // Also where the axis is shorter than two vectors: the edge tile is
                    // vector code over a zero-padded panel (`lower::cpu_micro`).
                    2 * lanes
                } else if e >= lanes {
                    lanes
                } else {
                    e.next_power_of_two()
                }
            }
        };
        let wide_simd = lanes >= 16;
        // A tile one vector wide (a narrow axis) keeps the height of a two-vector one.
        let vectors = vector.div_ceil(lanes).max(2);
        let rows = if wide {
            machine.vector_registers * 3 / 4 / vectors
        } else {
            (machine.vector_registers / 2 / vectors).clamp(1, 8)
        };
        // Also where the rows do not divide the axis: the edge tile is a function of its own
        // constant size. (Before edge tiles had constant sizes, 8 rows on a 14-row axis made
        // a 1×1 convolution 2× slower, and such axes got at most 4.)
        // A shorter axis is one tile of its own size (the knob rounds it up to a power of
        // two, as the space's tiles do).
        let unroll = unroll_axis.map_or(1, |u| rows.min(extents[u].next_power_of_two()));
        let work = kernel.flops(extents);
        let mut cfg = CpuConfig {
            vector_axis,
            vector,
            unroll_axis,
            unroll,
            parallel: work >= 65_536.0,
            pack: true,
            unroll_outer: false,
            k_block: 0,
            wide_simd,
            vector_code: if lanes >= 8 { lanes } else { 0 },
            conv: None,
            rows: None,
            pairs: false,
        };
        cfg.pairs = machine.bf16_dot && pairs_fit_space(kernel, &cfg, lanes);
        cfg.k_block = l2_k_block(kernel, extents, &cfg, machine.l2_bytes);
        if cfg.k_block > 0 && u_block(kernel, extents, &cfg) / cfg.unroll.max(1) < MIN_BLOCK_TILES {
            // Too few tiles share each filled block for the refills to pay.
            cfg.k_block = 0;
        }
        cfg
    }

    /// The single-threaded, untiled schedule (for tests and baselines).
    pub fn naive(kernel: &Kernel) -> CpuConfig {
        let spatial = kernel.spatial();
        CpuConfig {
            vector_axis: spatial.last().copied(),
            vector: 1,
            unroll_axis: None,
            unroll: 1,
            parallel: false,
            pack: false,
            unroll_outer: false,
            k_block: 0,
            wide_simd: false,
            vector_code: 0,
            conv: None,
            rows: None,
            pairs: false,
        }
    }

    /// Checks the config fits the kernel: axes are distinct spatial indices, tiles are
    /// positive and the register tile is bounded.
    pub fn validate(&self, kernel: &Kernel) -> Result<(), String> {
        if kernel.is_staged() {
            // The row template's knobs (see `RowsCpuConfig::to_cpu_config`).
            return match self.rows {
                Some(rows) if rows.to_cpu_config() == *self => rows.validate(),
                _ => Err("not a configuration of the row template".into()),
            };
        }
        if self.rows.is_some() {
            return Err("row template knobs on a kernel that is not of several stages".into());
        }
        if let Some(tile) = &self.conv {
            return super::cpu_conv::validate(kernel, self, tile);
        }
        let spatial = kernel.spatial();
        for (axis, what) in [(self.vector_axis, "vector"), (self.unroll_axis, "unroll")] {
            if let Some(a) = axis {
                if !spatial.contains(&a) {
                    return Err(format!("{what} axis {a} is not a spatial index"));
                }
            }
        }
        if self.vector_axis.is_some() && self.vector_axis == self.unroll_axis {
            return Err("vector and unroll axes must differ".into());
        }
        if self.vector == 0 || self.unroll == 0 {
            return Err("tile sizes must be positive".into());
        }
        if self.vector_axis.is_none() && self.vector != 1
            || self.unroll_axis.is_none() && self.unroll != 1
        {
            return Err("a tile without an axis must have size 1".into());
        }
        let most = if self.vector_code > 0 {
            MAX_VECTOR_TILE
        } else {
            MAX_TILE
        };
        if self.vector * self.unroll > most {
            return Err(format!(
                "register tile {}x{} exceeds {most} accumulators",
                self.unroll, self.vector
            ));
        }
        if self.vector_code > 0 && !(self.vector_code.is_power_of_two() && self.vector_code <= 64) {
            return Err(format!(
                "vector_code {} is not a vector width (a power of two up to 64 lanes, or 0)",
                self.vector_code
            ));
        }
        if self.k_block > 0 {
            if kernel.kind != BodyKind::Sum || kernel.reduction().is_empty() {
                return Err("k_block needs a reduction (use 0 for an elementwise kernel)".into());
            }
            if self.unroll_outer {
                return Err(
                    "k_block walks the unroll axis innermost: unroll_outer must be off".into(),
                );
            }
            if !output_is_f32(kernel) {
                return Err(
                    "k_block keeps partial sums in the output, which must then be f32".into(),
                );
            }
        }
        Ok(())
    }
}

/// Vectors across the analytic default's wide register tile ([`wide_tile`]) on `machine`:
/// four with 32 vector registers (AVX-512), two with 16 (AVX2).
pub fn wide_vectors(machine: &CpuMachine) -> usize {
    if machine.vector_registers >= 32 {
        4
    } else {
        2
    }
}

/// Whether the analytic default takes the wide register tile on `machine` for a vector axis
/// of `extent`: [`wide_vectors`] vectors across and 3/4 of the register file in
/// accumulators, where the axis is at least that wide ([`CpuConfig::heuristic_for`] also
/// wants its whole panel in L2: where it is not, the two-vector tile and its reduction
/// blocking stay). With AVX-512's 32 registers that is 6 rows of 4 `zmm` (the panel row
/// and a broadcast take 5 of the other 8); with AVX2's 16, 6 rows of 2 `ymm` (12
/// accumulators, 2 for the panel row, 1 broadcast), the tile of BLIS's and OpenBLAS's
/// Haswell kernels.
///
/// Why: on a 2-core AVX-512 Zen 4 the BERT and OpEvo matmuls ran at 0.98–1.04 of 8×32's
/// speed as 6×64 (mostly 1.02–1.04; the panel packed at each call and ahead), the batched
/// ones at 1.08–1.16, `bf16` pairs at 1.00–1.05 (generated C, interleaved call by call with
/// an FMA loop at the machine's peak; `bench/results/2026-11-27-zen4-cpu-wide-tile/`). More
/// accumulators as more rows of two vectors did not pay: 12 rows 4 KiB apart overflow an
/// 8-way L1 (12×32 ran at 0.76–0.93 of 8×32 on 512×64×1024). On a 2-core AVX2 Zen 3, where
/// the default had kept half the register file (4×16), 6×16 ran at 1.3–1.5× its speed on
/// 512×3072×768 and 512×4096×1024 (`bench/results/2026-11-27-zen3-cpu-avx2/`).
pub fn wide_tile(machine: &CpuMachine, extent: usize) -> bool {
    machine.vector_registers >= 16
        && machine.lanes >= 8
        && extent >= wide_vectors(machine) * machine.lanes
}

/// The reduction block of the analytic default: 0 when the whole packed panel fits in
/// `l2` bytes (or nothing can be blocked), else the largest block of [`K_BLOCK_CHOICES`]
/// whose panel takes at most half of it.
fn l2_k_block(kernel: &Kernel, extents: &[usize], cfg: &CpuConfig, l2: usize) -> usize {
    let row = pack_stride(cfg.vector).saturating_mul(4);
    let blockable = match kernel.reduction().first() {
        Some(&r0) if kernel.kind == BodyKind::Sum && output_is_f32(kernel) => extents[r0],
        _ => return 0,
    };
    if panel_bytes(kernel, extents, cfg) <= l2 {
        return 0;
    }
    let others = panel_points(kernel, extents, cfg) / blockable.max(1);
    K_BLOCK_CHOICES
        .iter()
        .map(|&b| b as usize)
        .filter(|&b| b > 0 && b < blockable)
        .filter(|&b| b.saturating_mul(others).saturating_mul(row) <= l2 / 2)
        .max()
        .unwrap_or(0)
}

/// Bytes of `cfg`'s whole packed panel (every reduction point × the padded vector tile, as
/// `f32`).
fn panel_bytes(kernel: &Kernel, extents: &[usize], cfg: &CpuConfig) -> usize {
    panel_points(kernel, extents, cfg)
        .saturating_mul(pack_stride(cfg.vector))
        .saturating_mul(4)
}

/// Whether `cfg` is a point of the space with `kernel=pairs` on a machine of `lanes`: the
/// kernel sums `bf16` products, vectors are AVX-512's and the config's vector code covers a
/// packed panel in whole vectors.
fn pairs_fit_space(kernel: &Kernel, cfg: &CpuConfig, lanes: usize) -> bool {
    lanes >= 16
        && cfg.vector_code == lanes
        && cfg.pack
        && cfg.vector.is_multiple_of(16)
        && crate::lower::cpu_pairs::pair_product(kernel).is_some()
}

/// Whether the kernel's output holds `f32` (partial sums may then be stored in it).
fn output_is_f32(kernel: &Kernel) -> bool {
    kernel.params[kernel.output].dtype == crate::ir::DType::F32
}

/// Tile widths the vector axis may take.
pub const VECTOR_CHOICES: [i64; 8] = [1, 2, 4, 8, 16, 32, 48, 64];
/// Tile heights the unroll axis may take.
pub const UNROLL_CHOICES: [i64; 9] = [1, 2, 3, 4, 6, 8, 12, 14, 16];
/// Reduction blocks the first reduction index may take (0: not blocked). Only blocks
/// smaller than the index's extent are in a space (a larger one is the same schedule as 0).
pub const K_BLOCK_CHOICES: [i64; 7] = [0, 16, 32, 64, 128, 256, 512];

/// The CPU schedule space of one kernel at concrete extents: which output axes form the
/// register tile and how big it is, whether to run in parallel, whether to pack the vector
/// operand, the tile loop order, the reduction block and the vector width asked of the
/// compiler. Every point is a valid [`CpuConfig`]; edge tiles are
/// predicated, so no shape makes the space empty.
///
/// ```
/// use rand::SeedableRng;
/// use tensor_dsl::{ir::parse_text, template::cpu::CpuTemplate};
/// let k = parse_text("mm", "c[[i,j]] += a[[i,k]] * b[[k,j]]", None).unwrap();
/// let t = CpuTemplate::new(&k, &[7, 13, 5], 16).unwrap();
/// let mut rng = rand::rngs::StdRng::seed_from_u64(1);
/// let cfg = t.space().sample_uniform(&mut rng).unwrap();
/// assert!(t.decode(&cfg).unwrap().validate(&k).is_ok());
/// assert!(t.space().is_valid(&t.default_config()));
/// ```
#[derive(Clone, Debug)]
pub struct CpuTemplate {
    space: SearchSpace,
    /// Spatial index id behind each vector-axis choice (the last choice, `none`, is `None`).
    axes: Vec<Option<usize>>,
    default: Config,
    knobs: [usize; 10],
    /// SIMD lanes of the machine (the width of explicit vector code).
    lanes: usize,
    /// For a kernel of several stages, the row template's space (which then is `space`).
    rows: Option<crate::template::rows::RowsCpuSpace>,
    /// The convolution space ([`super::cpu_conv`]), which replaces this one for kernels of
    /// the convolution form.
    conv: Option<super::cpu_conv::ConvTemplate>,
}

fn axis_choices(kernel: &Kernel) -> (Vec<String>, Vec<Option<usize>>) {
    let mut names = Vec::new();
    let mut axes = Vec::new();
    for s in kernel.spatial() {
        names.push(kernel.indices[s].name.clone());
        axes.push(Some(s));
    }
    names.push("none".into());
    axes.push(None);
    // Index names are identifiers; a name clash with "none" is resolved by position.
    for (n, name) in names.iter_mut().enumerate() {
        if n + 1 < axes.len() && name == "none" {
            *name = format!("axis{n}");
        }
    }
    (names, axes)
}

impl CpuTemplate {
    /// Builds the space; `lanes` is the SIMD width in f32 (for the default point).
    pub fn new(kernel: &Kernel, extents: &[usize], lanes: usize) -> Result<CpuTemplate, String> {
        if let Some(conv) = super::cpu_conv::ConvTemplate::new(kernel, extents, lanes) {
            let conv = conv?;
            return Ok(CpuTemplate {
                space: conv.space().clone(),
                axes: Vec::new(),
                default: conv.default_config(),
                knobs: [0; 10],
                lanes,
                rows: None,
                conv: Some(conv),
            });
        }
        if kernel.is_staged() {
            let rows = crate::template::rows::RowsCpuSpace::new(kernel, extents, lanes)?;
            return Ok(CpuTemplate {
                space: rows.space().clone(),
                axes: Vec::new(),
                default: rows.default_point(),
                knobs: [0; 10],
                lanes,
                rows: Some(rows),
                conv: None,
            });
        }
        let (names, axes) = axis_choices(kernel);
        let choices: Vec<&str> = names.iter().map(String::as_str).collect();
        let mut b = SearchSpace::builder();
        let vaxis = b.categorical("vector_axis", &choices);
        let vector = b.discrete("vector", &VECTOR_CHOICES);
        let uaxis = b.categorical("unroll_axis", &choices);
        let unroll = b.discrete("unroll", &UNROLL_CHOICES);
        let parallel = b.categorical("parallel", &["serial", "parallel"]);
        let pack = b.categorical("pack", &["none", "vector_operand"]);
        let order = b.categorical("order", &["unroll_inner", "unroll_outer"]);
        let k_block = b.discrete("k_block", &K_BLOCK_CHOICES);
        let simd = b.categorical("simd", &["compiler", "wide"]);
        // `pairs` only where the kernel is a sum of `bf16` products and vectors are AVX-512's.
        let pairs_ok = lanes >= 16 && crate::lower::cpu_pairs::pair_product(kernel).is_some();
        let code = if pairs_ok {
            b.categorical("kernel", &["loops", "vectors", "pairs"])
        } else {
            b.categorical("kernel", &["loops", "vectors"])
        };
        let knobs = [
            vaxis, vector, uaxis, unroll, parallel, pack, order, k_block, simd, code,
        ];

        let ext: Vec<Option<usize>> = axes.iter().map(|a| a.map(|a| extents[a])).collect();
        let has_spatial = !kernel.spatial().is_empty();
        let (e1, e2, e3) = (ext.clone(), ext.clone(), ext);
        let value = |c: &Config, k: usize, list: &[i64]| {
            c.index(k).and_then(|i| list.get(i)).map(|&v| v as usize)
        };
        b.constraint("a spatial output has a vector axis", move |c| {
            !has_spatial
                || c.index(vaxis)
                    .is_some_and(|i| e1.get(i).is_some_and(Option::is_some))
        });
        b.constraint("vector and unroll axes differ", move |c| {
            let (v, u) = (c.index(vaxis), c.index(uaxis));
            v != u || v.is_some_and(|i| i + 1 == e2.len())
        });
        b.constraint("a missing axis has a tile of 1", move |c| {
            let none = e3.len() - 1;
            (c.index(vaxis) != Some(none) || value(c, vector, &VECTOR_CHOICES) == Some(1))
                && (c.index(uaxis) != Some(none) || value(c, unroll, &UNROLL_CHOICES) == Some(1))
        });
        let ext: Vec<Option<usize>> = axes.iter().map(|a| a.map(|a| extents[a])).collect();
        b.constraint("tiles fit their axes", move |c| {
            let fits = |axis: usize, knob: usize, list: &[i64]| {
                let e = c
                    .index(axis)
                    .and_then(|i| ext.get(i).copied().flatten())
                    .unwrap_or(1);
                value(c, knob, list).is_some_and(|t| t <= e.next_power_of_two().max(1))
            };
            fits(vaxis, vector, &VECTOR_CHOICES) && fits(uaxis, unroll, &UNROLL_CHOICES)
        });
        let lanes = lanes.max(1);
        let registers = CpuMachine::with_lanes(lanes).vector_registers;
        b.constraint("register tile is bounded", move |c| {
            let v = value(c, vector, &VECTOR_CHOICES).unwrap_or(1);
            let u = value(c, unroll, &UNROLL_CHOICES).unwrap_or(1);
            if matches!(c.index(code), Some(1 | 2)) {
                vector_tile_fits(u, v, lanes, registers)
            } else {
                v * u <= MAX_TILE
            }
        });
        // The blocked index's extent, 0 when nothing can be blocked.
        // Blocks keep their partial sums in the output, so only an `f32` output can be
        // blocked (a half-precision one would round them).
        let blockable = match kernel.reduction().first() {
            Some(&r0) if kernel.kind == BodyKind::Sum && output_is_f32(kernel) => extents[r0],
            _ => 0,
        };
        b.constraint("a reduction block is smaller than its index", move |c| {
            value(c, k_block, &K_BLOCK_CHOICES).is_some_and(|kb| kb == 0 || kb < blockable)
        });
        b.constraint(
            "a blocked reduction walks the unroll axis innermost",
            move |c| value(c, k_block, &K_BLOCK_CHOICES) == Some(0) || c.index(order) == Some(0),
        );
        b.constraint("bf16 pairs are whole vectors of a packed panel", move |c| {
            c.index(code) != Some(2)
                || c.index(pack) == Some(1)
                    && value(c, vector, &VECTOR_CHOICES).is_some_and(|v| v % 16 == 0)
        });
        // Without AVX-512 the request changes nothing: one point, not two.
        let wide_ok = lanes >= 16;
        b.constraint("wide vectors need AVX-512", move |c| {
            wide_ok || c.index(simd) == Some(0)
        });
        let space = b.build().map_err(|e| e.to_string())?;
        let mut t = CpuTemplate {
            space,
            axes,
            default: Config::new(Vec::new()),
            knobs,
            lanes,
            rows: None,
            conv: None,
        };
        let heuristic = CpuConfig::heuristic(kernel, extents, lanes);
        t.default = t
            .encode(&heuristic)
            .or_else(|| t.encode(&CpuConfig::naive(kernel)))
            .ok_or_else(|| "the heuristic schedule is not in the space".to_string())?;
        Ok(t)
    }

    /// The knobs.
    pub fn space(&self) -> &SearchSpace {
        &self.space
    }

    /// The heuristic default, as a point of the space.
    pub fn default_config(&self) -> Config {
        self.default.clone()
    }

    /// The schedule a point stands for.
    pub fn decode(&self, c: &Config) -> Result<CpuConfig, String> {
        if let Some(conv) = &self.conv {
            return conv.decode(c);
        }
        if let Some(rows) = &self.rows {
            return rows.decode(c).map(|r| r.to_cpu_config());
        }
        self.space.check(c).map_err(|e| e.to_string())?;
        let [vaxis, vector, uaxis, unroll, parallel, pack, order, k_block, simd, code] = self.knobs;
        let axis = |k: usize| c.index(k).and_then(|i| self.axes.get(i).copied().flatten());
        let num = |k: usize| self.space.discrete_value(c, k).map_or(1, |v| v as usize);
        let choice = |k: usize| c.index(k).unwrap_or(0) == 1;
        Ok(CpuConfig {
            vector_axis: axis(vaxis),
            vector: num(vector),
            unroll_axis: axis(uaxis),
            unroll: num(unroll),
            parallel: choice(parallel),
            pack: choice(pack),
            unroll_outer: choice(order),
            k_block: self
                .space
                .discrete_value(c, k_block)
                .map_or(0, |v| v as usize),
            wide_simd: choice(simd),
            vector_code: if c.index(code).unwrap_or(0) >= 1 {
                self.lanes
            } else {
                0
            },
            conv: None,
            rows: None,
            pairs: c.index(code) == Some(2),
        })
    }

    /// Reads a config's text form (a record's `config`), accepting records written before
    /// the `k_block`, `simd` and `kernel` knobs existed (read as `k_block=0`,
    /// `simd=compiler`, `kernel=loops`: the schedule they measured), and convolution
    /// records from before `conv_vector` ([`ConvTemplate::parse`](super::cpu_conv::ConvTemplate::parse)).
    pub fn parse(&self, text: &str) -> Result<Config, String> {
        if let Some(conv) = &self.conv {
            return conv.parse(text);
        }
        if self.rows.is_some() {
            return self.space.parse(text).map_err(|e| e.to_string());
        }
        let has = |knob: &str| {
            text.split(';')
                .any(|e| e.split_once('=').is_some_and(|(n, _)| n.trim() == knob))
        };
        let mut text = text.to_string();
        if !text.trim().is_empty() {
            for (knob, old) in [("k_block", "0"), ("simd", "compiler"), ("kernel", "loops")] {
                if !has(knob) {
                    text = format!("{text};{knob}={old}");
                }
            }
        }
        self.space.parse(&text).map_err(|e| e.to_string())
    }

    /// The point for a schedule, if the space has it.
    pub fn encode(&self, cfg: &CpuConfig) -> Option<Config> {
        if let Some(conv) = &self.conv {
            return conv.encode(cfg);
        }
        if let Some(rows) = &self.rows {
            return rows.encode(&crate::template::rows::RowsCpuConfig::from_cpu_config(cfg));
        }
        let axis = |a: Option<usize>| self.axes.iter().position(|x| *x == a);
        let idx = |list: &[i64], v: usize| list.iter().position(|&x| x == v as i64);
        let c = Config::new(vec![
            tuner::Value::Categorical(axis(cfg.vector_axis)?),
            tuner::Value::Discrete(idx(&VECTOR_CHOICES, cfg.vector)?),
            tuner::Value::Categorical(axis(cfg.unroll_axis)?),
            tuner::Value::Discrete(idx(&UNROLL_CHOICES, cfg.unroll)?),
            tuner::Value::Categorical(usize::from(cfg.parallel)),
            tuner::Value::Categorical(usize::from(cfg.pack)),
            tuner::Value::Categorical(usize::from(cfg.unroll_outer)),
            tuner::Value::Discrete(idx(&K_BLOCK_CHOICES, cfg.k_block)?),
            tuner::Value::Categorical(usize::from(cfg.wide_simd)),
            tuner::Value::Categorical(match (cfg.vector_code, cfg.pairs) {
                (0, false) => 0,
                (l, false) if l == self.lanes => 1,
                (l, true) if l == self.lanes => 2,
                _ => return None,
            }),
        ]);
        self.space.is_valid(&c).then_some(c)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::ir::parse_text;

    fn matmul() -> Kernel {
        parse_text("mm", "c[[i,j]] += a[[i,k]] * b[[k,j]]", None).unwrap()
    }

    #[test]
    fn configs_and_records_from_before_the_new_knobs_still_read() {
        let old = r#"{"vector_axis":1,"vector":32,"unroll_axis":0,"unroll":4,
                      "parallel":true,"pack":true}"#;
        let cfg: CpuConfig = serde_json::from_str(old).unwrap();
        assert_eq!(
            (cfg.k_block, cfg.wide_simd, cfg.unroll_outer),
            (0, false, false)
        );

        let k = matmul();
        let t = CpuTemplate::new(&k, &[512, 64, 1024], 16).unwrap();
        let text = "vector_axis=j;vector=32;unroll_axis=i;unroll=4;parallel=parallel;\
                    pack=vector_operand;order=unroll_inner";
        let decoded = t.decode(&t.parse(text).unwrap()).unwrap();
        assert_eq!(
            decoded,
            CpuConfig {
                wide_simd: false,
                k_block: 0,
                ..decoded.clone()
            }
        );
        assert_eq!((decoded.vector, decoded.unroll), (32, 4));
        // A current record round-trips through its text form.
        let point = t.default_config();
        let again = t.parse(&t.space().format(&point).unwrap()).unwrap();
        assert_eq!(again, point);
        assert!(t.parse("vector_axis=j;k_block=7").is_err());
    }

    #[test]
    fn k_block_and_simd_knobs_are_in_the_space_where_they_mean_something() {
        let k = matmul();
        let t = CpuTemplate::new(&k, &[64, 64, 100], 16).unwrap();
        let h = CpuConfig::heuristic(&k, &[64, 64, 100], 16);
        for (k_block, ok) in [(16, true), (64, true), (128, false), (0, true)] {
            let cfg = CpuConfig {
                k_block,
                ..h.clone()
            };
            assert_eq!(t.encode(&cfg).is_some(), ok, "k_block {k_block}");
        }
        // Blocking walks the unroll axis innermost.
        let outer = CpuConfig {
            k_block: 16,
            unroll_outer: true,
            ..h.clone()
        };
        assert!(t.encode(&outer).is_none());
        assert!(outer.validate(&k).is_err());
        // Wide vectors only where there are 512-bit ones.
        let narrow = CpuTemplate::new(&k, &[64, 64, 100], 8).unwrap();
        assert!(narrow
            .encode(&CpuConfig {
                wide_simd: true,
                ..h.clone()
            })
            .is_none());
        assert!(!CpuConfig::heuristic(&k, &[64, 64, 100], 8).wide_simd);
        // An elementwise kernel has nothing to block.
        let ew = parse_text("ew", "o[[i]] = a[[i]] * 2.0", None).unwrap();
        let cfg = CpuConfig {
            k_block: 16,
            ..CpuConfig::naive(&ew)
        };
        assert!(cfg.validate(&ew).is_err());
        let t = CpuTemplate::new(&ew, &[100], 16).unwrap();
        assert!(t.encode(&cfg).is_none());
    }

    #[test]
    fn the_default_comes_from_the_machine() {
        let k = matmul();
        let m = |lanes: usize, l2: usize| CpuMachine {
            lanes,
            vector_registers: if lanes >= 16 { 32 } else { 16 },
            l1d_bytes: 32 << 10,
            l2_bytes: l2,
            l3_bytes: 32 << 20,
            bf16_dot: false,
        };
        // AVX-512: 24 of 32 zmm as accumulators, 6 rows of four vectors, vector code.
        let avx512 = CpuConfig::heuristic_for(&k, &[512, 512, 512], &m(16, 1 << 20));
        assert_eq!(
            (avx512.unroll, avx512.vector, avx512.vector_code),
            (6, 64, 16)
        );
        assert!(avx512.wide_simd && avx512.k_block == 0);
        // An axis narrower than four vectors: 16 zmm, 8 rows of two.
        let narrow = CpuConfig::heuristic_for(&k, &[512, 48, 512], &m(16, 1 << 20));
        assert_eq!((narrow.unroll, narrow.vector), (8, 32));
        // A wide panel (K x 72 floats) larger than L2: the two-vector tile, whose panel
        // (K x 40) fits, unblocked as before: 4096 x 288 B = 1.13 MiB, 4096 x 160 B = 640 KiB.
        let deep = CpuConfig::heuristic_for(&k, &[512, 1024, 4096], &m(16, 1 << 20));
        assert_eq!((deep.unroll, deep.vector, deep.k_block), (8, 32, 0));
        // AVX2: 12 of 16 ymm, 6 rows of two vectors.
        let avx2 = CpuConfig::heuristic_for(&k, &[512, 512, 512], &m(8, 1 << 20));
        assert_eq!((avx2.unroll, avx2.vector, avx2.vector_code), (6, 16, 8));
        // Its panel (K x 24 floats) larger than L2: the same tile, in reduction blocks
        // (8192 x 96 B = 768 KiB > 512 KiB).
        let avx2_deep = CpuConfig::heuristic_for(&k, &[512, 512, 8192], &m(8, 512 << 10));
        assert_eq!((avx2_deep.unroll, avx2_deep.vector), (6, 16));
        assert!(avx2_deep.k_block > 0 && avx2_deep.k_block <= 2048);
        // An axis of one vector: not the wide tile; as many rows as a two-vector tile.
        let avx2_narrow = CpuConfig::heuristic_for(&k, &[512, 8, 512], &m(8, 1 << 20));
        assert_eq!((avx2_narrow.unroll, avx2_narrow.vector), (4, 8));
        // Without 8 lanes: loops for the compiler.
        assert_eq!(
            CpuConfig::heuristic_for(&k, &[64, 64, 64], &m(4, 1 << 20)).vector_code,
            0
        );
        // A panel (K x 40 floats) larger than L2 is blocked, in blocks of at most half of it:
        // 8192 x 160 B = 1.25 MiB > 1 MiB; 512 x 160 B = 80 KiB <= 512 KiB.
        let long = CpuConfig::heuristic_for(&k, &[512, 512, 8192], &m(16, 1 << 20));
        assert_eq!(long.k_block, 512);
        let small_l2 = CpuConfig::heuristic_for(&k, &[512, 512, 8192], &m(16, 64 << 10));
        assert_eq!(small_l2.k_block, 128);
        assert!(long.validate(&k).is_ok() && small_l2.validate(&k).is_ok());
        let t = CpuTemplate::new(&k, &[512, 512, 8192], 16).unwrap();
        assert!(t.space().is_valid(&t.default_config()));
    }

    #[test]
    fn vector_code_is_a_knob_and_old_records_read_as_loops() {
        let k = matmul();
        let t = CpuTemplate::new(&k, &[512, 64, 1024], 16).unwrap();
        assert_eq!(t.decode(&t.default_config()).unwrap().vector_code, 16);
        // An 8×32 tile (a loop tile of that size is a point too; the default's 6×64 is not).
        let vectors = CpuConfig {
            vector: 32,
            unroll: 8,
            ..t.decode(&t.default_config()).unwrap()
        };
        let point = t.encode(&vectors).unwrap();
        let text = t.space().format(&point).unwrap();
        assert!(text.contains("kernel=vectors"), "{text}");
        // A record from before the knob: the loop tile it measured.
        let old = text.replace(";kernel=vectors", "");
        let loops = t.decode(&t.parse(&old).unwrap()).unwrap();
        assert_eq!(
            loops,
            CpuConfig {
                vector_code: 0,
                ..vectors.clone()
            }
        );
        // Only the machine's width is a point of the space.
        assert!(t
            .encode(&CpuConfig {
                vector_code: 8,
                ..vectors.clone()
            })
            .is_none());
        // Vector tiles may use the register file: 14 rows of two zmm, not 16.
        assert!(vector_tile_fits(14, 32, 16, 32) && !vector_tile_fits(16, 32, 16, 32));
        assert!(vector_tile_fits(6, 64, 16, 32) && !vector_tile_fits(8, 64, 16, 32));
        for (unroll, ok) in [(14, true), (16, false)] {
            let cfg = CpuConfig {
                unroll,
                vector: 32,
                ..vectors.clone()
            };
            assert_eq!(t.encode(&cfg).is_some(), ok, "unroll {unroll}");
        }
        let bad = CpuConfig {
            vector_code: 12,
            ..vectors
        };
        assert!(bad.validate(&k).is_err());
    }

    #[test]
    fn u_blocks_are_whole_tiles_and_cut_only_for_parallelism() {
        let k = matmul();
        let h = CpuConfig {
            k_block: 64,
            unroll: 6,
            ..CpuConfig::heuristic(&k, &[512, 1024, 4096], 16)
        };
        // 1024 / 32 = 32 vector tiles: enough parallel work, the whole axis is one u-block.
        assert_eq!(u_block(&k, &[512, 1024, 4096], &h), 516);
        // 64 / 32 = 2 vector tiles: 8 u-blocks of 64 rows, rounded up to 6-row tiles.
        assert_eq!(u_block(&k, &[512, 64, 4096], &h), 66);
        assert_eq!(blocked_reduction(&k, &[512, 64, 4096], &h), Some((2, 64)));
        assert_eq!(blocked_reduction(&k, &[512, 64, 64], &h), None);
        assert_eq!(panel_points(&k, &[512, 64, 4096], &h), 64);
    }
}
