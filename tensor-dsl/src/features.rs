//! Analytic features of a schedule for the learned cost model: the seven GPU features of
//! "Accelerated Auto-Tuning of GPU Kernels" (ICS'24) and CPU analogues. They are computed
//! from the schedule, the kernel's extents and the device's properties alone (plus
//! `ptxas`'s register count where one is at hand), so they cost microseconds.
//!
//! Every feature is finite: divisions are guarded (a zero denominator is treated as 1, or
//! the quantity it measures is defined explicitly below).
//!
//! ```
//! use tensor_dsl::features::gpu_features;
//! use tensor_dsl::ir::parse_text;
//! use tensor_dsl::template::gpu::{default_schedule, GpuTarget};
//! let k = parse_text("mm", "c[[i,j]] += a[[i,k]] * b[[k,j]]", None).unwrap();
//! let e = [1024, 1024, 1024];
//! let t = GpuTarget::h100();
//! let f = gpu_features(&k, &e, &[], &default_schedule(&k, &e, &t), &t, None);
//! assert!(f.occupancy > 0.0 && f.occupancy <= 1.0);
//! assert_eq!(f.to_vec().len(), tensor_dsl::features::GpuFeatures::NAMES.len());
//! ```

use crate::ir::{Access, BodyKind, IndexKind, Kernel};
use crate::runtime::ptxas::PtxasReport;
use crate::template::cpu::{
    blocked_reduction, pack_stride, packed_access, panel_points, u_block, CpuConfig,
};
use crate::template::gpu::{padded_extents, stageable_accesses, GpuSchedule, GpuTarget};

/// Bytes of one element (the language computes in f32).
const ELEM: f64 = 4.0;
/// Registers per thread we assume beyond accumulators and operands (indices, addresses,
/// loop counters, predicates).
pub const REG_OVERHEAD: usize = 24;
/// Cap of the ILP feature: beyond this many independent accumulators the FMA pipeline is
/// full (4-cycle latency × 4 schedulers), more adds nothing.
pub const ILP_CAP: usize = 16;
/// Most resident blocks per SM (sm_70 to sm_90).
pub const MAX_BLOCKS_PER_SM: usize = 32;
/// Shared memory the driver reserves per block (sm_80 and later), bytes.
pub const RESERVED_SHARED_PER_BLOCK: usize = 1024;
/// Register allocation granularity per thread (registers are allocated per warp in units
/// of 256, i.e. 8 per thread).
const REG_GRANULE: usize = 8;

/// L1 data cache per core assumed by the CPU features, bytes.
pub const CPU_L1_BYTES: f64 = 48.0 * 1024.0;
/// L2 cache per core assumed by the CPU features, bytes.
pub const CPU_L2_BYTES: f64 = 2.0 * 1024.0 * 1024.0;
/// Architectural vector registers assumed by the CPU features (AVX-512; AVX2 has 16, but a
/// constant keeps features comparable across machines).
pub const CPU_VECTOR_REGISTERS: usize = 32;

fn ratio(num: f64, den: f64) -> f64 {
    let r = num / if den > 0.0 { den } else { 1.0 };
    if r.is_finite() {
        r
    } else {
        0.0
    }
}

fn prod(xs: impl IntoIterator<Item = usize>) -> usize {
    xs.into_iter()
        .fold(1usize, |a, b| a.saturating_mul(b.max(1)))
}

/// The spatial indices an access reads along (any term of any dimension).
fn uses(a: &Access, i: usize) -> bool {
    a.dims.iter().any(|d| d.terms.iter().any(|&(v, _)| v == i))
}

/// The seven ICS'24 features of one GPU schedule. See [`gpu_features`] for the formulas.
#[derive(Clone, Debug, PartialEq)]
pub struct GpuFeatures {
    /// Operational intensity global → shared, flops per byte.
    pub oi_global: f64,
    /// Operational intensity shared → registers, flops per byte.
    pub oi_shared: f64,
    /// FMAs per register-level operand load.
    pub register_reuse: f64,
    /// Independent accumulators per thread, capped at [`ILP_CAP`].
    pub ilp: f64,
    /// Warps resident per SM.
    pub wlp: f64,
    /// Active warps per SM / the SM's maximum, in (0, 1].
    pub occupancy: f64,
    /// Useful fraction of the block slots of all waves, in (0, 1].
    pub wave_efficiency: f64,
    /// Registers per thread used for the occupancy (ptxas's, else the estimate).
    pub registers: f64,
    /// Resident blocks per SM (at least 1).
    pub blocks_per_sm: f64,
}

impl GpuFeatures {
    /// The names of [`to_vec`](Self::to_vec)'s entries.
    pub const NAMES: [&'static str; 7] = [
        "gpu.log2_oi_global",
        "gpu.log2_oi_shared",
        "gpu.register_reuse",
        "gpu.ilp",
        "gpu.wlp",
        "gpu.occupancy",
        "gpu.wave_efficiency",
    ];

    /// The seven features as a vector (the intensities as `log2(1 + x)`, since they span
    /// orders of magnitude).
    pub fn to_vec(&self) -> Vec<f64> {
        vec![
            self.oi_global.max(0.0).ln_1p() / std::f64::consts::LN_2,
            self.oi_shared.max(0.0).ln_1p() / std::f64::consts::LN_2,
            self.register_reuse,
            self.ilp,
            self.wlp,
            self.occupancy,
            self.wave_efficiency,
        ]
    }
}

/// The ICS'24 features of `schedule` for `kernel` at `extents` on `target`. `shapes` (per
/// parameter) is accepted for symmetry with [`cpu_features`] and not needed: the schedule
/// works on padded extents. With `ptxas`, its register count and shared memory replace the
/// estimates.
///
/// Notation: a block computes `P = Π span(s)` output points (spatial `s`) over
/// `R = Π padded(r)` reduction points; `A` = accumulators per thread; `T` = threads per
/// block; `B` = blocks; for an input access `a`, `reuse(a) = Π registers(s)` over spatial
/// `s` that `a` does not read along (a thread loads its operand once per register tile row
/// or column it feeds).
///
/// 1. `oi_global = F / G`, `F = flops(padded) / B` (a block's flops), `G` the bytes a block
///    reads from global memory: each staged tile `4 · |tile| · S` (`S` = outer reduction
///    steps when the tile is reloaded per step, else 1), each unstaged input
///    `4 · P · R / reuse(a)` (direct loads, one per register-level use).
/// 2. `oi_shared = F / H`, `H = Σ` over staged accesses of `4 · P · R / reuse(a)`; with
///    nothing staged, `H = 4` (no shared traffic: the intensity is the block's flops / 4).
/// 3. `register_reuse = A / Σ_a A / reuse(a)`: FMAs per operand load in one step of the
///    register loops (4 × 4 matmul tile: 16 / 8 = 2); 1 with no input access.
/// 4. `ilp = min(A, ILP_CAP)`.
/// 5. `wlp = min(blocks_per_sm, ⌈B / SMs⌉) · ⌈T / 32⌉`: warps actually resident per SM.
/// 6. `occupancy = blocks_per_sm · ⌈T / 32⌉ / (max_threads_per_sm / 32)`, where
///    `blocks_per_sm = max(1, min(32, ⌊max_threads_per_sm / (32⌈T/32⌉)⌋,
///    ⌊shared_per_sm / (shared + 1 KiB)⌋, ⌊regs_per_sm / (r · 32⌈T/32⌉)⌋))` and the
///    registers per thread `r` = ptxas's count, else `A + Σ_a A/reuse(a) + vector ·
///    staged tiles + 24`, rounded up to 8 and capped at `max_regs_per_thread`.
/// 7. `wave_efficiency = B / (⌈B / (SMs · blocks_per_sm)⌉ · SMs · blocks_per_sm)`.
pub fn gpu_features(
    kernel: &Kernel,
    extents: &[usize],
    _shapes: &[Vec<usize>],
    schedule: &GpuSchedule,
    target: &GpuTarget,
    ptxas: Option<&PtxasReport>,
) -> GpuFeatures {
    let padded = padded_extents(kernel, extents);
    let spatial = kernel.spatial();
    let reduction = if kernel.kind == BodyKind::Sum {
        kernel.reduction()
    } else {
        Vec::new()
    };
    let blocks = schedule.blocks(kernel).max(1);
    let threads = schedule.threads(kernel).max(1);
    let acc = schedule.accumulators(kernel).max(1);
    let block_points = prod(spatial.iter().map(|&s| schedule.span(s))) as f64;
    let red_points = prod(
        reduction
            .iter()
            .map(|&r| padded.get(r).copied().unwrap_or(1)),
    ) as f64;
    let outer_steps = prod(reduction.iter().map(|&r| schedule.outer(r))) as f64;
    let flops = ratio(kernel.flops(&padded), blocks as f64);

    let accesses = stageable_accesses(kernel);
    let reuse = |a: &Access| {
        prod(
            spatial
                .iter()
                .filter(|&&s| !uses(a, s))
                .map(|&s| schedule.registers(s)),
        ) as f64
    };
    let tiles = schedule.tiles(kernel);
    let mut global = 0.0;
    let mut shared = 0.0;
    let mut operand_loads = 0.0;
    for (n, a) in accesses.iter().enumerate() {
        let direct = ELEM * block_points * red_points / reuse(a).max(1.0);
        operand_loads += acc as f64 / reuse(a).max(1.0);
        let staged = schedule.stage.get(n).copied().unwrap_or(false);
        match tiles.iter().find(|t| &t.access == a).filter(|_| staged) {
            Some(t) => {
                let elems = prod(t.dims.iter().copied()) as f64;
                global += ELEM * elems * if t.per_step { outer_steps } else { 1.0 };
                shared += direct;
            }
            None => global += direct,
        }
    }
    let oi_global = ratio(flops, global.max(ELEM));
    let oi_shared = ratio(flops, shared.max(ELEM));
    let register_reuse = if operand_loads > 0.0 {
        ratio(acc as f64, operand_loads)
    } else {
        1.0
    };
    let ilp = acc.min(ILP_CAP) as f64;

    let warp = (target.warp_size as usize).max(1);
    let warps_per_block = threads.div_ceil(warp);
    let max_regs = (target.max_regs_per_thread as usize).max(1);
    let registers = match ptxas {
        Some(r) if r.registers > 0 => (r.registers as usize).min(max_regs),
        _ => {
            let staged = schedule.stage.iter().filter(|&&s| s).count();
            let est = acc
                + operand_loads.ceil() as usize
                + schedule.vector.max(1) * staged
                + REG_OVERHEAD;
            est.div_ceil(REG_GRANULE)
                .saturating_mul(REG_GRANULE)
                .min(max_regs)
        }
    };
    let shared_bytes = schedule
        .shared_bytes(kernel)
        .max(ptxas.map_or(0, |r| r.shared_bytes as usize))
        .saturating_add(RESERVED_SHARED_PER_BLOCK);
    let slot_threads = warps_per_block.saturating_mul(warp).max(1);
    let by_threads = target.max_threads_per_sm as usize / slot_threads;
    let by_shared = target.shared_per_sm as usize / shared_bytes.max(1);
    let by_regs = target.regs_per_sm as usize / registers.saturating_mul(slot_threads).max(1);
    let blocks_per_sm = by_threads
        .min(by_shared)
        .min(by_regs)
        .clamp(1, MAX_BLOCKS_PER_SM);
    let max_warps = (target.max_threads_per_sm as usize / warp).max(1);
    let active_warps = blocks_per_sm.saturating_mul(warps_per_block);
    let occupancy = ratio(active_warps as f64, max_warps as f64).clamp(f64::MIN_POSITIVE, 1.0);
    let sms = (target.sm_count as usize).max(1);
    let resident = blocks_per_sm.min(blocks.div_ceil(sms)).max(1);
    let wlp = (resident * warps_per_block) as f64;
    let slots = sms.saturating_mul(blocks_per_sm).max(1);
    let waves = blocks.div_ceil(slots).max(1);
    let wave_efficiency = ratio(blocks as f64, waves as f64 * slots as f64).clamp(0.0, 1.0);

    GpuFeatures {
        oi_global,
        oi_shared,
        register_reuse,
        ilp,
        wlp,
        occupancy,
        wave_efficiency,
        registers: registers as f64,
        blocks_per_sm: blocks_per_sm as f64,
    }
}

/// Analytic features of one CPU schedule. See [`cpu_features`] for the formulas.
#[derive(Clone, Debug, PartialEq)]
pub struct CpuFeatures {
    /// Accumulator floats / (lanes × 32 vector registers): above ~0.75 GCC spills.
    pub register_pressure: f64,
    /// Fraction of the vector axis covered by full vector tiles (1 when the tile divides
    /// the extent).
    pub vector_utilisation: f64,
    /// Vector tile width / SIMD lanes.
    pub vector_lanes: f64,
    /// Fraction of the unroll axis covered by full unroll tiles.
    pub unroll_utilisation: f64,
    /// Outer (parallel) iterations per thread.
    pub rounds: f64,
    /// Fraction of the threads busy in the last round (1 when balanced).
    pub last_round_fill: f64,
    /// log2 of the bytes one tile's reduction sweep touches / 48 KiB.
    pub log2_l1_ratio: f64,
    /// log2 of the same bytes / 2 MiB.
    pub log2_l2_ratio: f64,
    /// 1 when an operand is packed, else 0.
    pub packed: f64,
    /// log2(1 + bytes of one packed panel), 0 without packing.
    pub log2_pack_bytes: f64,
}

impl CpuFeatures {
    /// The names of [`to_vec`](Self::to_vec)'s entries.
    pub const NAMES: [&'static str; 10] = [
        "cpu.register_pressure",
        "cpu.vector_utilisation",
        "cpu.vector_lanes",
        "cpu.unroll_utilisation",
        "cpu.log2_rounds",
        "cpu.last_round_fill",
        "cpu.log2_l1_ratio",
        "cpu.log2_l2_ratio",
        "cpu.packed",
        "cpu.log2_pack_bytes",
    ];

    /// The features as a vector ([`NAMES`](Self::NAMES) order; `rounds` as log2(1 + x)).
    pub fn to_vec(&self) -> Vec<f64> {
        vec![
            self.register_pressure,
            self.vector_utilisation,
            self.vector_lanes,
            self.unroll_utilisation,
            self.rounds.max(0.0).ln_1p() / std::f64::consts::LN_2,
            self.last_round_fill,
            self.log2_l1_ratio,
            self.log2_l2_ratio,
            self.packed,
            self.log2_pack_bytes,
        ]
    }
}

/// [`cpu_features_with_threads`] with this machine's thread count.
pub fn cpu_features(
    kernel: &Kernel,
    extents: &[usize],
    shapes: &[Vec<usize>],
    config: &CpuConfig,
    lanes: usize,
) -> CpuFeatures {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    cpu_features_with_threads(kernel, extents, shapes, config, lanes, threads)
}

/// Analytic features of `config` for `kernel` at `extents` with `lanes` f32 SIMD lanes and
/// `threads` cores (a serial config uses 1). `v`, `u` are the vector and unroll tiles,
/// `E_v`, `E_u` their axes' extents (1 without the axis). `L` is the vector width the
/// compiler uses: `lanes`, or 8 when `lanes` is 16 and the config does not ask for wide
/// vectors (GCC then prefers 256-bit ones).
///
/// * `register_pressure = v · u / (L · 32)`;
/// * `vector_utilisation = ⌊E_v / v⌋ · v / E_v` (1 when `v` divides `E_v`), likewise
///   `unroll_utilisation`; `vector_lanes = v / L`;
/// * `rounds = N / threads`, `N = ⌈E_v / v⌉ · ⌈E_u / u⌉ · Π` other spatial extents (the
///   outer iterations; with a blocked reduction the unroll axis counts its u-blocks, see
///   [`u_block`]); `last_round_fill = (N mod threads) / threads`, 1 when it divides;
/// * `log2_l1_ratio = log2(W / 48 KiB)`, `log2_l2_ratio = log2(W / 2 MiB)`, `W = 4 ·` (the
///   output tile `v · u` + for every input access the box of elements it reads while one
///   tile sweeps the whole reduction, or one block of it: per dimension
///   `1 + Σ |c| (span − 1)`, span `v`, `u`, 1 for other spatial indices, the extent for
///   reduction indices and `k_block` for a blocked one); a packed access counts its panel
///   rows at [`pack_stride`];
/// * `packed` = [`packed_access`] is some, `log2_pack_bytes = log2(1 + 4 · R ·
///   pack_stride(v))`, `R` the reduction points of one panel ([`panel_points`]).
///
/// `shapes` is not needed (the extents say it all) and accepted for symmetry.
pub fn cpu_features_with_threads(
    kernel: &Kernel,
    extents: &[usize],
    _shapes: &[Vec<usize>],
    config: &CpuConfig,
    lanes: usize,
    threads: usize,
) -> CpuFeatures {
    let lanes = if lanes >= 16 && !config.wide_simd {
        8
    } else {
        lanes.max(1)
    };
    let ext = |i: usize| extents.get(i).copied().unwrap_or(1).max(1);
    let block = blocked_reduction(kernel, extents, config);
    let v = config.vector.max(1);
    let u = config.unroll.max(1);
    let ev = config.vector_axis.map_or(1, ext);
    let eu = config.unroll_axis.map_or(1, ext);
    let util = |e: usize, t: usize| ratio(((e / t) * t) as f64, e as f64);
    let red_points = if kernel.kind == BodyKind::Sum {
        panel_points(kernel, extents, config)
    } else {
        1
    };

    let others = prod(
        kernel
            .spatial()
            .into_iter()
            .filter(|&s| Some(s) != config.vector_axis && Some(s) != config.unroll_axis)
            .map(ext),
    );
    let u_tiles = match block {
        Some(_) => eu.div_ceil(u_block(kernel, extents, config).max(1)),
        None => eu.div_ceil(u),
    };
    let outer = prod([ev.div_ceil(v), u_tiles, others]);
    let threads = if config.parallel { threads.max(1) } else { 1 };
    let rest = outer % threads;
    let last_round_fill = if rest == 0 {
        1.0
    } else {
        rest as f64 / threads as f64
    };

    let packed = packed_access(kernel, extents, config);
    let span = |i: usize| -> usize {
        if Some(i) == config.vector_axis {
            v.min(ev)
        } else if Some(i) == config.unroll_axis {
            u.min(eu)
        } else if let Some((r0, b)) = block.filter(|&(r0, _)| r0 == i) {
            b.min(ext(r0))
        } else if kernel.indices.get(i).map(|x| x.kind) == Some(IndexKind::Reduction) {
            ext(i)
        } else {
            1
        }
    };
    let mut elems = (v.min(ev) * u.min(eu)) as f64;
    for a in kernel.accesses() {
        let mut box_elems = 1.0;
        let last = a.dims.len().saturating_sub(1);
        for (d, map) in a.dims.iter().enumerate() {
            let mut extent: usize = 1;
            for &(x, c) in &map.terms {
                extent = extent.saturating_add(
                    (c.unsigned_abs() as usize).saturating_mul(span(x).saturating_sub(1)),
                );
            }
            if d == last && packed.as_ref() == Some(a) {
                extent = extent.max(pack_stride(v));
            }
            box_elems *= extent as f64;
        }
        elems += box_elems;
    }
    let bytes = (ELEM * elems).max(1.0);
    let pack_bytes = if packed.is_some() {
        ELEM * red_points as f64 * pack_stride(v) as f64
    } else {
        0.0
    };
    CpuFeatures {
        register_pressure: ratio((v * u) as f64, (lanes * CPU_VECTOR_REGISTERS) as f64),
        vector_utilisation: util(ev, v),
        vector_lanes: ratio(v as f64, lanes as f64),
        unroll_utilisation: util(eu, u),
        rounds: ratio(outer as f64, threads as f64),
        last_round_fill,
        log2_l1_ratio: (bytes / CPU_L1_BYTES).log2(),
        log2_l2_ratio: (bytes / CPU_L2_BYTES).log2(),
        packed: if packed.is_some() { 1.0 } else { 0.0 },
        log2_pack_bytes: pack_bytes.ln_1p() / std::f64::consts::LN_2,
    }
}
