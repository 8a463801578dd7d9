//! The Hopper tensor-core template (`sm_90a`): `wgmma.mma_async.m64nNk16` warpgroup MMAs on
//! operands staged by a multi-stage `cp.async` pipeline into the canonical swizzled shared
//! layouts (see [`crate::lower::wgmma`]), `f32` accumulators, fused epilogues, split-K
//! across blocks. It takes the GEMMs and batched GEMMs of the tensor-core template whose
//! operands are addressed linearly (implicit-GEMM convolutions stay on `mma.sync`), on a
//! target with `wgmma` ([`GpuTarget::has_wgmma`]); [`WgTemplate::preferred`] says when the
//! CUDA backend picks it over `mma.sync`.
//!
//! Knobs (all discrete):
//! * `wg_m` ∈ {64, 128}: rows of a warpgroup's tile (one or two `m64` MMAs per step);
//! * `warpgroups` ∈ {1, 2}: warpgroups of a block, along `m`;
//! * `block_n` ∈ {64, 128, 256}: the `N` of every `wgmma` (the block tile's columns);
//! * `block_k` ∈ {32, 64}: depth of a stage (64-byte or 128-byte swizzle of a K-major tile);
//! * `stages` ∈ {2, …, 6}: shared-memory stages (dynamic shared memory, up to the
//!   target's opt-in limit);
//! * `splits` ∈ {1, 2, 4, 8}: split-K across blocks ([`crate::codegen::split_k`]);
//! * `tma` ∈ {0, 1}: operands staged by `cp.async` (every thread, 16-byte chunks) or by the
//!   tensor memory accelerator (one thread copies whole boxes from `CUtensorMap`s the
//!   runtime encodes; an mbarrier per stage says they landed). TMA needs every operand
//!   stride to be a multiple of 16 bytes; the default takes it wherever it can (on the
//!   H100 it measured at or ahead of `cp.async` at the same tiles on 9 of 10 GEMMs).
//!
//! Constraints: at most 128 accumulators per thread, shared memory within the target's
//! limit, at least two k tiles per split, split-K partial sums within bounds.
//!
//! ```
//! use tensor_dsl::ir::parse_text;
//! use tensor_dsl::template::{gpu::GpuTarget, wgmma::WgTemplate};
//! let k = parse_text("mm", "c[[i,j]] += a[[i,k]] * b[[k,j]]", None).unwrap()
//!     .with_dtypes("a=bf16,b=bf16").unwrap();
//! let shapes: [&[usize]; 3] = [&[1000, 1000], &[1000, 1000], &[1000, 1000]];
//! let t = WgTemplate::new(&k, &[1000; 3], &shapes, &GpuTarget::h100_sm90a()).unwrap();
//! let s = t.default_schedule();
//! assert_eq!((s.block_m(), s.block_n, s.block_k), (128, 64, 64));
//! assert_eq!(t.decode(&t.encode(&s).unwrap()).unwrap(), s);
//! // sm_90 without the `a` has no wgmma.
//! assert!(WgTemplate::new(&k, &[1000; 3], &shapes, &GpuTarget::h100()).is_err());
//! ```

use crate::codegen::split_k::{SplitK, MAX_PARTIAL_BYTES};
use crate::ir::Kernel;
use crate::lower::tensorcore::Gemm;
use crate::lower::wgmma::{tensor_maps, WgSchedule};
use crate::template::gpu::GpuTarget;
use tuner::{Config, Discrete, SearchSpace, Value};

/// Most `f32` accumulators per thread.
pub const MAX_ACCUMULATORS: usize = 128;
/// The shared memory the kernel adds to its stages: the round-up of its start to a
/// 1024-byte boundary (the 128-byte swizzle's pattern).
pub const ALIGN_SLACK: usize = 1024;

/// Reductions up to which the default takes k tiles of 32 in 3 stages (see
/// [`WgTemplate::default_schedule`]).
pub const SHORT_REDUCTION: usize = 128;

const KNOBS: [(&str, &[i64]); 7] = [
    ("wg_m", &[64, 128]),
    ("warpgroups", &[1, 2]),
    ("block_n", &[64, 128, 256]),
    ("block_k", &[32, 64]),
    ("stages", &[2, 3, 4, 5, 6]),
    ("splits", &[1, 2, 4, 8]),
    ("tma", &[0, 1]),
];

fn decode_values(c: &Config) -> Result<WgSchedule, String> {
    let v = |n: usize| -> Result<usize, String> {
        let (name, list) = KNOBS[n];
        c.index(n)
            .and_then(|i| list.get(i).copied())
            .map(|x| x as usize)
            .ok_or_else(|| format!("the config has no valid `{name}` value"))
    };
    Ok(WgSchedule {
        wg_m: v(0)?,
        warpgroups: v(1)?,
        block_n: v(2)?,
        block_k: v(3)?,
        stages: v(4)?,
        splits: v(5)?,
        tma: v(6)? == 1,
    })
}

/// Output tiles, k tiles, shared bytes and split geometry of a wgmma schedule on a GEMM.
pub trait WgGeometry {
    /// Output tiles (batch instances included): blocks without split-K.
    fn wg_tiles(&self, s: &WgSchedule) -> usize;
    /// k tiles (stages of `block_k`).
    fn wg_k_tiles(&self, s: &WgSchedule) -> usize;
    /// Dynamic shared memory of a block, bytes: every stage of both operands, an mbarrier
    /// per stage with TMA, plus the alignment slack.
    fn wg_shared_bytes(&self, s: &WgSchedule) -> usize;
    /// The split-K geometry, if the reduction is split across blocks.
    fn wg_split(&self, s: &WgSchedule) -> Option<SplitK>;
}

impl WgGeometry for Gemm {
    fn wg_tiles(&self, s: &WgSchedule) -> usize {
        self.batch_count_of()
            * self.m_extent.div_ceil(s.block_m())
            * self.n_extent.div_ceil(s.block_n)
    }

    fn wg_k_tiles(&self, s: &WgSchedule) -> usize {
        self.k_extent.div_ceil(s.block_k)
    }

    fn wg_shared_bytes(&self, s: &WgSchedule) -> usize {
        let mbarriers = if s.tma { 8 * s.stages } else { 0 };
        s.stages
            * (s.layout(true, self.a.k_major).bytes() + s.layout(false, self.b.k_major).bytes())
            + mbarriers
            + ALIGN_SLACK
    }

    fn wg_split(&self, s: &WgSchedule) -> Option<SplitK> {
        (s.splits > 1).then(|| SplitK {
            splits: s.splits,
            tiles: self.wg_tiles(s),
            accumulators: s.accumulators(),
            threads: s.threads(),
        })
    }
}

/// The wgmma schedule space of one half-precision GEMM at one shape on an `sm_90a` target.
#[derive(Debug, Clone)]
pub struct WgTemplate {
    gemm: Gemm,
    space: SearchSpace,
    max_shared: usize,
    /// The target, for its shared memory per SM.
    target: GpuTarget,
    sm_count: usize,
    tma: bool,
}

impl WgTemplate {
    /// The space for `kernel` at `extents` and `shapes` on `target`; an error (why) when the
    /// target has no `wgmma`, the kernel has no tensor-core form or an operand is not
    /// addressed linearly.
    pub fn new(
        kernel: &Kernel,
        extents: &[usize],
        shapes: &[&[usize]],
        target: &GpuTarget,
    ) -> Result<WgTemplate, String> {
        if !target.has_wgmma() {
            return Err(format!("{} has no wgmma (sm_90a only)", target.real_arch()));
        }
        let gemm = Gemm::analyze(kernel, extents, shapes)?;
        if !gemm.a.linear || !gemm.b.linear {
            return Err("an operand is not addressed linearly (an implicit GEMM)".into());
        }
        let mut b = SearchSpace::builder();
        for (name, list) in KNOBS {
            b.add(name, Discrete::new(list.to_vec()));
        }
        b.constraint(
            &format!("accumulators per thread <= {MAX_ACCUMULATORS}"),
            |c| decode_values(c).is_ok_and(|s| s.accumulators() <= MAX_ACCUMULATORS),
        );
        let max_shared = target.max_dynamic_shared() as usize;
        let g = gemm.clone();
        b.constraint(
            &format!("shared memory per block <= {max_shared} bytes"),
            move |c| decode_values(c).is_ok_and(|s| g.wg_shared_bytes(&s) <= max_shared),
        );
        let g = gemm.clone();
        // Two k tiles or more per split: the main loop stays a loop (with one, the compiler
        // drops it) and a split is worth its partial sums.
        b.constraint("every split has two k tiles", move |c| {
            decode_values(c).is_ok_and(|s| s.splits == 1 || 2 * s.splits <= g.wg_k_tiles(&s))
        });
        let g = gemm.clone();
        b.constraint(
            &format!("split-K partial sums <= {} MiB", MAX_PARTIAL_BYTES >> 20),
            move |c| {
                decode_values(c).is_ok_and(|s| {
                    g.wg_split(&s)
                        .is_none_or(|p| p.partial_bytes() <= MAX_PARTIAL_BYTES)
                })
            },
        );
        // Whether TMA can copy the operands does not depend on the tile sizes.
        let probe = WgSchedule {
            wg_m: 64,
            warpgroups: 1,
            block_n: 64,
            block_k: 64,
            stages: 2,
            splits: 1,
            tma: true,
        };
        let tma = tensor_maps(kernel, &gemm, &probe).err();
        b.constraint(
            &format!(
                "tma only where the operands have tensor maps{}",
                tma.as_deref()
                    .map(|e| format!(" ({e})"))
                    .unwrap_or_default()
            ),
            {
                let ok = tma.is_none();
                move |c| decode_values(c).is_ok_and(|s| !s.tma || ok)
            },
        );
        let space = b.build().map_err(|e| e.to_string())?;
        Ok(WgTemplate {
            gemm,
            space,
            max_shared,
            target: target.clone(),
            sm_count: target.sm_count as usize,
            tma: tma.is_none(),
        })
    }

    /// Whether the CUDA backend should take this template over `mma.sync` for the GEMM:
    /// every fused extent at least 64 and at least 2^27 multiply-adds (512³ is 2^27), so the
    /// 64-row warpgroup tiles are mostly useful work and there is enough of it to fill an
    /// H100 with them. A heuristic from tile shapes; on the H100 (2026-11-25) the GEMMs it
    /// left to `mma.sync` (512×64 outputs) beat cuBLAS and those it took reached 0.55–0.72
    /// of it, so the boundary itself is not yet measured.
    pub fn preferred(gemm: &Gemm) -> bool {
        let work = gemm.batch_count_of() as u128
            * gemm.m_extent as u128
            * gemm.n_extent as u128
            * gemm.k_extent as u128;
        gemm.m_extent >= 64 && gemm.n_extent >= 64 && gemm.k_extent >= 64 && work >= 1 << 27
    }

    /// The search space.
    pub fn space(&self) -> &SearchSpace {
        &self.space
    }

    /// The GEMM view of the kernel.
    pub fn gemm(&self) -> &Gemm {
        &self.gemm
    }

    /// The schedule a point stands for (errors name the knob or constraint).
    pub fn decode(&self, c: &Config) -> Result<WgSchedule, String> {
        self.space.check(c).map_err(|e| e.to_string())?;
        decode_values(c)
    }

    /// The point a schedule stands for.
    pub fn encode(&self, s: &WgSchedule) -> Result<Config, String> {
        let fields = [
            s.wg_m,
            s.warpgroups,
            s.block_n,
            s.block_k,
            s.stages,
            s.splits,
            usize::from(s.tma),
        ];
        let values = KNOBS
            .iter()
            .zip(fields)
            .map(|((name, list), v)| {
                list.iter()
                    .position(|&x| x == v as i64)
                    .map(Value::Discrete)
                    .ok_or_else(|| format!("{name} {v} is not a value of the knob"))
            })
            .collect::<Result<Vec<Value>, String>>()?;
        let c = Config::new(values);
        self.space.check(&c).map_err(|e| e.to_string())?;
        Ok(c)
    }

    /// The default: CUTLASS's Hopper 128×128×64 tile (two warpgroups of 64×128); while that
    /// gives fewer tiles than 3/4 of the SMs, the tile narrows to 128×64, then to one
    /// warpgroup (64×64); if half the SMs would still idle, the reduction is split across
    /// blocks (2, 4 or 8, each split keeping at least 4 k tiles). Operands come by TMA
    /// wherever they have tensor maps. Stages: as many as shared memory holds (up to 6 and
    /// the k tiles of a split) without fewer blocks on an SM than the grid puts there, as
    /// CUTLASS sizes its pipelines. Both from the H100's measurements (2026-11-25, replayed
    /// by `tests/tests/gpu_default_replay.rs`): at the same tiles TMA ran at 0.98–1.10 of
    /// `cp.async`, and on the long reductions (512×1024 or 512×768 outputs over 3072–4096),
    /// one block per SM, 6 stages reached 0.94–1.00 of the best point where 4 reached
    /// 0.79–0.83; where two blocks share an SM (512×3072), a fifth stage that leaves room for
    /// only one measured 0.89–0.91. A reduction of at most [`SHORT_REDUCTION`] into blocks of
    /// one warpgroup (at most 64 rows) takes k tiles of 32 in 3 stages rather than two tiles
    /// of 64 in 4: on an H200 (2026-11-26) 960 batched 64×64 outputs over 128 ran at 0.99 of
    /// the best point so, 0.85 with tiles of 64; 128×64 outputs over 128 (two warpgroups)
    /// ran at 0.88 so and 0.92–1.00 with tiles of 64.
    pub fn default_schedule(&self) -> WgSchedule {
        let g = &self.gemm;
        let short = g.k_extent <= SHORT_REDUCTION && g.m_extent <= 64;
        let mut s = WgSchedule {
            wg_m: 64,
            warpgroups: if g.m_extent <= 64 { 1 } else { 2 },
            block_n: if g.n_extent <= 64 { 64 } else { 128 },
            block_k: if short { 32 } else { 64 },
            stages: if short { 3 } else { 4 },
            splits: 1,
            tma: self.tma,
        };
        let few = |s: &WgSchedule| g.wg_tiles(s) * 4 < self.sm_count * 3;
        if few(&s) && s.block_n > 64 {
            s.block_n = 64;
        }
        if few(&s) && s.warpgroups > 1 {
            s.warpgroups = 1;
        }
        while g.wg_tiles(&s) * s.splits * 2 <= self.sm_count
            && g.wg_k_tiles(&s) >= 8 * s.splits
            && s.splits < 8
        {
            let wider = WgSchedule {
                splits: s.splits * 2,
                ..s.clone()
            };
            match g.wg_split(&wider) {
                Some(p) if p.partial_bytes() > MAX_PARTIAL_BYTES => break,
                _ => s = wider,
            }
        }
        while s.stages > 2 && g.wg_shared_bytes(&s) > self.max_shared {
            s.stages -= 1;
        }
        s.stages = self.deepest_pipeline(&s);
        s
    }

    /// The most stages (at most 6, and at most the k tiles of a split) that fit the
    /// block's shared memory without leaving room for fewer blocks per SM than the grid
    /// puts on one (or than `s.stages` would allow, when the SM holds more than it gets).
    fn deepest_pipeline(&self, s: &WgSchedule) -> usize {
        let g = &self.gemm;
        let blocks = g.wg_tiles(s) * s.splits;
        let wanted = blocks.div_ceil(self.sm_count.max(1)).max(1);
        let fit = |stages: usize| {
            let t = WgSchedule {
                stages,
                ..s.clone()
            };
            let bytes = g.wg_shared_bytes(&t);
            if bytes > self.max_shared {
                0
            } else {
                self.target.blocks_by_shared(bytes)
            }
        };
        let floor = fit(s.stages).min(wanted);
        let k_tiles = g.wg_k_tiles(s).div_ceil(s.splits.max(1));
        (s.stages..=6)
            .rev()
            .find(|&st| st <= k_tiles.max(s.stages) && fit(st) >= floor.max(1))
            .unwrap_or(s.stages)
    }
}

impl crate::template::Template for WgTemplate {
    type Schedule = WgSchedule;

    fn space(&self) -> &SearchSpace {
        &self.space
    }

    fn default_point(&self) -> Result<Config, String> {
        self.encode(&self.default_schedule())
    }

    fn decode(&self, point: &Config) -> Result<WgSchedule, String> {
        WgTemplate::decode(self, point)
    }

    /// Printed from the GEMM plan like the `mma.sync` template (see
    /// [`crate::lower::tensorcore`]): there is no loop nest to return.
    fn lower<'a>(
        &self,
        _kernel: &'a Kernel,
        _extents: &[usize],
        _shapes: &'a [&'a [usize]],
        _schedule: &WgSchedule,
    ) -> Result<crate::lower::Nest<'a>, String> {
        Err("the wgmma template is printed from its GEMM plan, not a loop nest".into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::parse_text;
    use rand::{rngs::StdRng, SeedableRng};

    fn template(src: &str, dtypes: &str, shapes: &[Vec<usize>]) -> Result<WgTemplate, String> {
        let k = parse_text("k", src, None)
            .unwrap()
            .with_dtypes(dtypes)
            .unwrap();
        let refs: Vec<&[usize]> = shapes.iter().map(Vec::as_slice).collect();
        let extents = crate::ir::bind(&k, &refs).unwrap();
        WgTemplate::new(&k, &extents, &refs, &GpuTarget::h100_sm90a())
    }

    #[test]
    fn points_round_trip_and_fit_the_target() {
        let mut rng = StdRng::seed_from_u64(3);
        for (src, dtypes, shapes) in [
            (
                "c[[i,j]] += a[[i,k]] * b[[k,j]]",
                "a=bf16,b=bf16",
                vec![vec![1000, 1000], vec![1000, 1000], vec![1000, 1000]],
            ),
            (
                "c[[b,i,j]] += x[[b,k,i]] * y[[b,j,k]]",
                "x=f16,y=f16",
                vec![vec![3, 200, 136], vec![3, 72, 200], vec![3, 136, 72]],
            ),
        ] {
            let t = template(src, dtypes, &shapes).unwrap();
            let d = t.default_schedule();
            assert_eq!(t.decode(&t.encode(&d).unwrap()).unwrap(), d);
            for _ in 0..30 {
                let c = t.space().sample_uniform(&mut rng).unwrap();
                let s = t.decode(&c).unwrap();
                assert!(s.validate().is_ok());
                assert!(t.gemm().wg_shared_bytes(&s) <= 227 * 1024);
                assert_eq!(t.encode(&s).unwrap(), c);
            }
        }
    }

    #[test]
    fn the_default_fills_the_gpu() {
        for (m, n, k, tile, splits) in [
            (4096, 4096, 4096, (128, 128), 1),
            (1000, 1000, 1000, (128, 64), 1),
            (512, 3072, 768, (128, 64), 1),
            (512, 512, 4096, (64, 64), 2),
            (256, 256, 8192, (64, 64), 8),
        ] {
            let t = template(
                "c[[i,j]] += a[[i,k]] * b[[k,j]]",
                "a=bf16,b=bf16",
                &[vec![m, k], vec![k, n], vec![m, n]],
            )
            .unwrap();
            let s = t.default_schedule();
            assert_eq!((s.block_m(), s.block_n, s.splits), (tile.0, tile.1, splits));
            assert!(t.encode(&s).is_ok(), "{s:?}");
        }
    }

    #[test]
    fn a_short_reduction_takes_more_narrower_k_tiles() {
        // 960 batched 64×64 outputs over 128: four k tiles of 32 in 3 stages, not two of 64.
        let t = template(
            "z[[b,i,j]] += x[[b,k,i]] * y[[b,k,j]]",
            "x=bf16,y=bf16",
            &[vec![960, 128, 64], vec![960, 128, 64], vec![960, 64, 64]],
        )
        .unwrap();
        let s = t.default_schedule();
        assert_eq!((s.block_k, s.stages), (32, 3), "{s:?}");
        // A long one keeps tiles of 64.
        let t = template(
            "c[[i,j]] += a[[i,k]] * b[[k,j]]",
            "a=bf16,b=bf16",
            &[vec![512, 1024], vec![1024, 4096], vec![512, 4096]],
        )
        .unwrap();
        assert_eq!(t.default_schedule().block_k, 64);
    }

    #[test]
    fn implicit_gemms_and_other_targets_are_refused() {
        let conv = template(
            "y[[n,f,p,q]] += x[[n,c,p+r,q+s]] * w[[f,c,r,s]]",
            "x=bf16,w=bf16",
            &[vec![2, 64, 18, 18], vec![64, 64, 3, 3], vec![2, 64, 16, 16]],
        );
        assert!(conv.is_err());
        let k = parse_text("k", "c[[i,j]] += a[[i,k]] * b[[k,j]]", None)
            .unwrap()
            .with_dtypes("a=bf16,b=bf16")
            .unwrap();
        let shapes: [&[usize]; 3] = [&[256, 256], &[256, 256], &[256, 256]];
        assert!(WgTemplate::new(&k, &[256; 3], &shapes, &GpuTarget::h100()).is_err());
        let sm100 = GpuTarget {
            sm: 100,
            ..GpuTarget::h100_sm90a()
        };
        assert!(WgTemplate::new(&k, &[256; 3], &shapes, &sm100).is_err());
    }
}
