//! Analytic features of a schedule for the learned cost model: the seven GPU features of
//! "Accelerated Auto-Tuning of GPU Kernels" (ICS'24) and CPU analogues. They are computed
//! from the schedule's lowered loop nest ([`crate::lower`], the nest the code is printed
//! from: tile sizes, trip counts, buffers, launch geometry), the device's properties and
//! `ptxas`'s register count where one is at hand, so they describe the generated code. They
//! cost tens of microseconds (mostly the lowering).
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

use crate::ir::{Access, BodyKind, Kernel};
use crate::lower::{self, HwIndex, LoopKind, Nest, Scope, Stage, Stmt, Value};
use crate::runtime::ptxas::PtxasReport;
use crate::template::cpu::CpuConfig;
use crate::template::gpu::{GpuSchedule, GpuTarget};

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

/// The ICS'24 features of `schedule` for `kernel` at `extents` on `target`, read from its
/// lowered nest ([`lower::gpu::lower`], see [`gpu_nest_features`]). `shapes` (per
/// parameter) may be empty: the features do not depend on them (shapes implied by the
/// extents are used then). A schedule that does not lower (it does not fit the kernel) has
/// all-zero features.
pub fn gpu_features(
    kernel: &Kernel,
    extents: &[usize],
    shapes: &[Vec<usize>],
    schedule: &GpuSchedule,
    target: &GpuTarget,
    ptxas: Option<&PtxasReport>,
) -> GpuFeatures {
    let shapes = fitting_shapes(kernel, extents, shapes);
    let refs: Vec<&[usize]> = shapes.iter().map(Vec::as_slice).collect();
    match lower::gpu::lower(kernel, extents, &refs, schedule) {
        Ok(nest) => gpu_nest_features(&nest, schedule.vector, target, ptxas),
        Err(_) => GpuFeatures {
            oi_global: 0.0,
            oi_shared: 0.0,
            register_reuse: 0.0,
            ilp: 0.0,
            wlp: 0.0,
            occupancy: 0.0,
            wave_efficiency: 0.0,
            registers: 0.0,
            blocks_per_sm: 0.0,
        },
    }
}

/// `shapes` when they fit the kernel's parameters, else the shapes the extents imply (a
/// plain dimension its index's extent, an affine one up to the largest coordinate read).
fn fitting_shapes(kernel: &Kernel, extents: &[usize], shapes: &[Vec<usize>]) -> Vec<Vec<usize>> {
    let fits = shapes.len() == kernel.params.len()
        && kernel
            .params
            .iter()
            .zip(shapes)
            .all(|(p, s)| p.rank == s.len());
    if fits {
        return shapes.to_vec();
    }
    let ext = |i: usize| extents.get(i).copied().unwrap_or(1).max(1);
    let mut out: Vec<Vec<usize>> = kernel.params.iter().map(|p| vec![1; p.rank]).collect();
    for a in kernel.accesses() {
        for (d, map) in a.dims.iter().enumerate() {
            let n = match map.as_var() {
                Some(v) => ext(v),
                None => {
                    let e: Vec<usize> = (0..kernel.indices.len()).map(ext).collect();
                    (map.range(&e).1.max(0) as usize).saturating_add(1)
                }
            };
            if let Some(x) = out.get_mut(a.tensor).and_then(|s| s.get_mut(d)) {
                *x = (*x).max(n);
            }
        }
    }
    if let Some(o) = out.get_mut(kernel.output) {
        *o = kernel.spatial().into_iter().map(ext).collect();
    }
    out
}

/// The ICS'24 features of a lowered GPU nest; `vector` is the schedule's `vector` knob
/// (the widest cooperative load).
///
/// Notation, all read from the nest: `T` = threads per block and `B` = blocks (its launch
/// geometry); `A` = accumulators per thread (its register buffer); a block computes `P`
/// output points (the product of the block-bound loops' tile spans) over `R` reduction
/// points (the product of the reduction indices' extents in the nest's domain); for an
/// input access `a` of the compute statement (at least one dimension), `reuse(a)` = the
/// product of the trip counts of the loops around the compute statement over spatial
/// indices that `a` does not read (a thread loads its operand once per register tile row or
/// column it feeds).
///
/// 1. `oi_global = F / G`, `F = flops(domain) / B` (a block's flops), `G` the bytes a block
///    reads from global memory: each copy stage `4 · |box| · S` (`S` = the trip counts of
///    the loops around the stage: the outer reduction steps when the tile is reloaded per
///    step, else 1), each unstaged input `4 · P · R / reuse(a)` (direct loads, one per
///    register-level use).
/// 2. `oi_shared = F / H`, `H = Σ` over staged accesses of `4 · P · R / reuse(a)`; with
///    nothing staged, `H = 4` (no shared traffic: the intensity is the block's flops / 4).
/// 3. `register_reuse = A / Σ_a A / reuse(a)`: FMAs per operand load in one step of the
///    register loops (4 × 4 matmul tile: 16 / 8 = 2); 1 with no input access.
/// 4. `ilp = min(A, ILP_CAP)`.
/// 5. `wlp = min(blocks_per_sm, ⌈B / SMs⌉) · ⌈T / 32⌉`: warps actually resident per SM.
/// 6. `occupancy = blocks_per_sm · ⌈T / 32⌉ / (max_threads_per_sm / 32)`, where
///    `blocks_per_sm = max(1, min(32, ⌊max_threads_per_sm / (32⌈T/32⌉)⌋,
///    ⌊shared_per_sm / (shared + 1 KiB)⌋, ⌊regs_per_sm / (r · 32⌈T/32⌉)⌋))`, `shared` the
///    nest's shared buffers (each rounded up to 16 bytes) or ptxas's if more, and the
///    registers per thread `r` = ptxas's count, else `A + Σ_a A/reuse(a) + vector · stages
///    + 24`, rounded up to 8 and capped at `max_regs_per_thread`.
/// 7. `wave_efficiency = B / (⌈B / (SMs · blocks_per_sm)⌉ · SMs · blocks_per_sm)`.
pub fn gpu_nest_features(
    nest: &Nest,
    vector: usize,
    target: &GpuTarget,
    ptxas: Option<&PtxasReport>,
) -> GpuFeatures {
    let kernel = nest.kernel;
    let spatial = kernel.spatial();
    let reduction = if kernel.kind == BodyKind::Sum {
        kernel.reduction()
    } else {
        Vec::new()
    };
    let launch = nest.launch.unwrap_or(lower::Launch {
        grid: [1; 3],
        block: [1; 3],
    });
    let blocks = prod(launch.grid).max(1);
    let threads = prod(launch.block).max(1);
    let acc = nest
        .scoped(Scope::Register)
        .map(|b| b.elements())
        .sum::<usize>()
        .max(1);
    let mut block_points = 1usize;
    let mut compute: Option<(&crate::ir::Expr, Vec<&lower::Loop>)> = None;
    let mut stages: Vec<(&Stage, usize)> = Vec::new();
    nest.walk(&mut |_, s, loops| match s {
        Stmt::Bind {
            src: Value::Hw(HwIndex::Block),
            parts,
            ..
        } => block_points = prod(parts.iter().map(|p| p.mult)),
        Stmt::Compute {
            value: Value::Kernel { expr, .. },
            ..
        } if compute.is_none() => compute = Some((expr, loops.to_vec())),
        Stmt::Stage(st) => stages.push((st, prod(loops.iter().map(|l| l.trip)))),
        _ => {}
    });
    let block_points = block_points as f64;
    let red_points = prod(
        reduction
            .iter()
            .map(|&r| nest.domain.get(r).copied().unwrap_or(1)),
    ) as f64;
    let flops = ratio(kernel.flops(&nest.domain), blocks as f64);

    // The compute statement's operands (distinct, at least one dimension) and the loops
    // around it.
    let (accesses, around) = match compute {
        Some((expr, loops)) => {
            let mut accesses: Vec<Access> = Vec::new();
            expr.visit_accesses(&mut |a| {
                if !a.dims.is_empty() && !accesses.contains(a) {
                    accesses.push(a.clone());
                }
            });
            (accesses, loops)
        }
        None => (Vec::new(), Vec::new()),
    };
    let reuse = |a: &Access| {
        prod(
            around
                .iter()
                .filter(|l| l.index.is_some_and(|s| spatial.contains(&s) && !uses(a, s)))
                .map(|l| l.trip),
        ) as f64
    };
    let mut global = 0.0;
    let mut shared = 0.0;
    let mut operand_loads = 0.0;
    for a in &accesses {
        let direct = ELEM * block_points * red_points / reuse(a).max(1.0);
        operand_loads += acc as f64 / reuse(a).max(1.0);
        match stages.iter().find(|(st, _)| &st.src == a) {
            Some((st, runs)) => {
                let elems = prod(st.dims.iter().copied()) as f64;
                global += ELEM * elems * *runs as f64;
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
            let est =
                acc + operand_loads.ceil() as usize + vector.max(1) * stages.len() + REG_OVERHEAD;
            est.div_ceil(REG_GRANULE)
                .saturating_mul(REG_GRANULE)
                .min(max_regs)
        }
    };
    let shared_bytes = nest
        .shared_bytes()
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
/// `threads` cores (a serial config uses 1), read from its lowered nest
/// ([`lower::cpu::lower`], see [`cpu_nest_features`]). `shapes` may be empty: the features
/// do not depend on them. A config that does not lower (it does not fit the kernel) has
/// all-zero features.
pub fn cpu_features_with_threads(
    kernel: &Kernel,
    extents: &[usize],
    shapes: &[Vec<usize>],
    config: &CpuConfig,
    lanes: usize,
    threads: usize,
) -> CpuFeatures {
    let shapes = fitting_shapes(kernel, extents, shapes);
    let refs: Vec<&[usize]> = shapes.iter().map(Vec::as_slice).collect();
    let lanes = if lanes >= 16 && !config.wide_simd {
        8
    } else {
        lanes.max(1)
    };
    let threads = if config.parallel { threads.max(1) } else { 1 };
    match lower::cpu::lower(kernel, extents, &refs, config) {
        Ok(nest) => cpu_nest_features(&nest, lanes, threads),
        Err(_) => CpuFeatures {
            register_pressure: 0.0,
            vector_utilisation: 0.0,
            vector_lanes: 0.0,
            unroll_utilisation: 0.0,
            rounds: 0.0,
            last_round_fill: 0.0,
            log2_l1_ratio: 0.0,
            log2_l2_ratio: 0.0,
            packed: 0.0,
            log2_pack_bytes: 0.0,
        },
    }
}

/// Analytic features of a lowered CPU nest run on `threads` threads with `L = lanes` f32
/// lanes per vector (the width the compiler uses: with 16 lanes, 8 unless the config asks
/// for wide vectors, as GCC then prefers 256-bit ones). Read from the nest: the register
/// tile `u × v` (its accumulator buffer), `E_v`, `E_u` the extents of the axes its vector
/// and unrolled loops walk (1 without the axis), the outer band of loops, the loops around
/// the compute statement and the packed panel.
///
/// * `register_pressure = v · u / (L · 32)`;
/// * `vector_utilisation = ⌊E_v / v⌋ · v / E_v` (1 when `v` divides `E_v`), likewise
///   `unroll_utilisation`; `vector_lanes = v / L`;
/// * `rounds = N / threads`, `N` = the product of the outer band's trip counts (the outer
///   iterations: `⌈E_v / v⌉ · ⌈E_u / u⌉ · Π` other spatial extents, with a blocked reduction
///   the unroll axis counts its u-blocks); `last_round_fill = (N mod threads) / threads`, 1
///   when it divides;
/// * `log2_l1_ratio = log2(W / 48 KiB)`, `log2_l2_ratio = log2(W / 2 MiB)`, `W = 4 ·` (the
///   output tile: the trip counts of the tile's vector and unrolled loops + for every
///   access the box of elements it reads while one tile sweeps the reduction loops around
///   the compute statement: per dimension `1 + Σ |c| (span − 1)`, span the trip count of
///   the loop around the compute statement over that index, else 1); a packed access
///   counts its panel rows at the panel's row stride;
/// * `packed` = the nest has a panel, `log2_pack_bytes = log2(1 + its bytes)`.
pub fn cpu_nest_features(nest: &Nest, lanes: usize, threads: usize) -> CpuFeatures {
    let kernel = nest.kernel;
    let lanes = lanes.max(1);
    let threads = threads.max(1);
    let ext = |i: usize| nest.domain.get(i).copied().unwrap_or(1).max(1);
    let (u, v) = match nest
        .scoped(Scope::Register)
        .next()
        .map(|b| b.dims.as_slice())
    {
        Some(&[u, v]) => (u.max(1), v.max(1)),
        _ => (1, 1),
    };
    let mut around: Vec<&lower::Loop> = Vec::new();
    let mut packed: Option<&Access> = None;
    nest.walk(&mut |_, s, loops| match s {
        Stmt::Compute { .. } if around.is_empty() => around = loops.to_vec(),
        Stmt::Stage(st) if packed.is_none() => packed = Some(&st.src),
        _ => {}
    });
    let tile_loop = |vector: bool| {
        around.iter().find(|l| match l.kind {
            LoopKind::Vectorized(_) => vector,
            LoopKind::Unrolled(_) => !vector,
            _ => false,
        })
    };
    let axis_extent = |vector: bool| tile_loop(vector).and_then(|l| l.index).map_or(1, ext);
    let (ev, eu) = (axis_extent(true), axis_extent(false));
    let util = |e: usize, t: usize| ratio(((e / t) * t) as f64, e as f64);

    let outer = prod(nest.outer_band().iter().map(|l| l.trip));
    let rest = outer % threads;
    let last_round_fill = if rest == 0 {
        1.0
    } else {
        rest as f64 / threads as f64
    };

    let panel = nest.scoped(Scope::Panel).next();
    let span = |i: usize| -> usize {
        around
            .iter()
            .find(|l| l.index == Some(i))
            .map_or(1, |l| l.trip)
    };
    let trip = |vector: bool| tile_loop(vector).map_or(1, |l| l.trip);
    let mut elems = (trip(true) * trip(false)) as f64;
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
            if let (true, Some(p)) = (d == last && packed == Some(a), panel) {
                extent = extent.max(p.dims.last().copied().unwrap_or(1));
            }
            box_elems *= extent as f64;
        }
        elems += box_elems;
    }
    let bytes = (ELEM * elems).max(1.0);
    let pack_bytes = panel.map_or(0.0, |p| p.bytes() as f64);
    CpuFeatures {
        register_pressure: ratio((v * u) as f64, (lanes * CPU_VECTOR_REGISTERS) as f64),
        vector_utilisation: util(ev, v),
        vector_lanes: ratio(v as f64, lanes as f64),
        unroll_utilisation: util(eu, u),
        rounds: ratio(outer as f64, threads as f64),
        last_round_fill,
        log2_l1_ratio: (bytes / CPU_L1_BYTES).log2(),
        log2_l2_ratio: (bytes / CPU_L2_BYTES).log2(),
        packed: if panel.is_some() { 1.0 } else { 0.0 },
        log2_pack_bytes: pack_bytes.ln_1p() / std::f64::consts::LN_2,
    }
}
