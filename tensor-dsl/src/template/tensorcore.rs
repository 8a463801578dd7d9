//! The tensor-core template (Bolt-like, sm_80+): half-precision contractions that map onto
//! `mma.sync.aligned.m16n8k16` — GEMMs, batched GEMMs and convolutions as implicit GEMMs
//! (see [`crate::lower::tensorcore::Gemm`] for which do) —, with
//! `f32` accumulators, `ldmatrix` fragment loads and a multi-stage `cp.async` pipeline.
//!
//! Knobs (all discrete):
//! * `warp_m`, `warp_n` ∈ {16, 32, 64}: one warp's tile (`warp_m/16 × warp_n/8` MMAs per
//!   16-deep step);
//! * `warps_m`, `warps_n` ∈ {1, 2, 4}: warps per block along `m` and `n` (the block tile is
//!   their product with the warp tile);
//! * `block_k` ∈ {16, 32, 64}: depth of one pipeline stage;
//! * `split_k` ∈ {1, 2, 4}: warp groups that share each stage's 16-deep steps (sliced K,
//!   for problems with few output tiles and a long reduction); their partial sums are added
//!   through shared memory (reusing the pipeline's) before the epilogue;
//! * `stages` ∈ {2, 3, 4}: shared-memory stages in flight;
//! * `swizzle` ∈ {0, 1}: shared rows padded by 16 bytes, or 16-byte chunks XOR-swizzled.
//!
//! Constraints: at most 8 warps (all groups), `split_k` divides the 16-deep steps of a stage, at most 128 accumulators per thread (64 with a 64-deep
//! stage), static shared memory
//! within the target's limit. Extents that no tile divides are zero-filled on load and
//! predicated on store, so every point runs every shape.
//!
//! ```
//! use tensor_dsl::ir::parse_text;
//! use tensor_dsl::template::{gpu::GpuTarget, tensorcore::TcTemplate, Template};
//! let k = parse_text("mm", "c[[i,j]] += a[[i,k]] * b[[k,j]]", None).unwrap()
//!     .with_dtypes("a=bf16,b=bf16").unwrap();
//! let shapes: [&[usize]; 3] = [&[1000, 1000], &[1000, 1000], &[1000, 1000]];
//! let t = TcTemplate::new(&k, &[1000; 3], &shapes, &GpuTarget::h100()).unwrap();
//! let s = Template::decode(&t, &Template::default_point(&t).unwrap()).unwrap();
//! assert_eq!((s.block_m(), s.block_n(), s.stages), (64, 64, 3));
//! let text = t.space().format(&t.encode(&s).unwrap()).unwrap();
//! assert_eq!(tensor_dsl::template::schedule_from_text(&t, &text), Some(s));
//! ```

use crate::ir::Kernel;
use crate::lower::tensorcore::{Gemm, TcSchedule};
use crate::template::gpu::GpuTarget;
use tuner::{Config, Discrete, SearchSpace, Value};

/// Values of the `warp_m` and `warp_n` knobs.
pub const WARP_TILES: [i64; 3] = [16, 32, 64];
/// Values of the `warps_m` and `warps_n` knobs.
pub const WARPS: [i64; 3] = [1, 2, 4];
/// Values of the `block_k` knob.
pub const BLOCK_K: [i64; 3] = [16, 32, 64];
/// Values of the `split_k` knob.
pub const SPLIT_K: [i64; 3] = [1, 2, 4];
/// Values of the `stages` knob.
pub const STAGES: [i64; 3] = [2, 3, 4];
/// Values of the `splits` knob (split-K across blocks).
pub const SPLITS: [i64; 4] = [1, 2, 4, 8];
/// Most `f32` accumulators per thread (a 64×64 warp tile).
pub const MAX_ACCUMULATORS: usize = 128;
/// Most warps per block.
pub const MAX_WARPS: usize = 8;

/// Outputs (batch × m × n) up to which a GEMM takes [`TcTemplate::small_default`].
pub const SMALL_OUTPUT: usize = 64 * 1024;
/// Waves (blocks per SM) of 16×64 blocks from which a convolution's default widens its
/// warp tiles ([`TcTemplate::small_default`]).
pub const LARGE_CONV_WAVES: usize = 2;

const KNOBS: [(&str, &[i64]); 9] = [
    ("warp_m", &WARP_TILES),
    ("warp_n", &WARP_TILES),
    ("warps_m", &WARPS),
    ("warps_n", &WARPS),
    ("block_k", &BLOCK_K),
    ("stages", &STAGES),
    ("swizzle", &[0, 1]),
    ("split_k", &SPLIT_K),
    ("splits", &SPLITS),
];

/// The tensor-core schedule space of one half-precision GEMM-like kernel at one shape.
#[derive(Debug, Clone)]
pub struct TcTemplate {
    gemm: Gemm,
    space: SearchSpace,
    max_shared: usize,
    sm_count: usize,
    /// The indices fused into `m` that have more than one point (a convolution's image,
    /// output row and column: 3 for a batch of images, 2 for one).
    m_dims: usize,
}

fn decode_values(c: &Config) -> Result<TcSchedule, String> {
    let v = |n: usize| -> Result<usize, String> {
        let (name, list) = KNOBS[n];
        c.index(n)
            .and_then(|i| list.get(i).copied())
            .map(|x| x as usize)
            .ok_or_else(|| format!("the config has no valid `{name}` value"))
    };
    Ok(TcSchedule {
        warp_m: v(0)?,
        warp_n: v(1)?,
        warps_m: v(2)?,
        warps_n: v(3)?,
        block_k: v(4)?,
        stages: v(5)?,
        swizzle: v(6)? == 1,
        split_k: v(7)?,
        splits: v(8)?,
    })
}

impl TcTemplate {
    /// The space for `kernel` at `extents` and `shapes` on `target`; an error (why) when the
    /// kernel has no tensor-core form or the target has no `mma.sync` (below sm_80).
    pub fn new(
        kernel: &Kernel,
        extents: &[usize],
        shapes: &[&[usize]],
        target: &GpuTarget,
    ) -> Result<TcTemplate, String> {
        if target.sm < 80 {
            return Err(format!(
                "sm_{} has no bf16/f16 mma.sync m16n8k16",
                target.sm
            ));
        }
        let gemm = Gemm::analyze(kernel, extents, shapes)?;
        let mut b = SearchSpace::builder();
        for (name, list) in KNOBS {
            b.add(name, Discrete::new(list.to_vec()));
        }
        b.constraint(&format!("warps per block <= {MAX_WARPS}"), |c| {
            decode_values(c).is_ok_and(|s| s.warps_m * s.warps_n * s.split_k <= MAX_WARPS)
        });
        b.constraint("split_k divides the 16-deep steps of a stage", |c| {
            decode_values(c).is_ok_and(|s| (s.block_k / 16).is_multiple_of(s.split_k))
        });
        b.constraint(
            &format!("accumulators per thread <= {MAX_ACCUMULATORS}"),
            |c| decode_values(c).is_ok_and(|s| s.accumulators() <= MAX_ACCUMULATORS),
        );
        // With 128 accumulators and a 64-deep stage, the fragments of the unrolled stage
        // no longer fit the 255 registers (ptxas spills).
        b.constraint(
            &format!("accumulators x block_k <= {}", MAX_ACCUMULATORS * 32),
            |c| {
                decode_values(c)
                    .is_ok_and(|s| s.accumulators() * s.block_k <= MAX_ACCUMULATORS * 32)
            },
        );
        let max_shared = target.max_shared_per_block as usize;
        let g = gemm.clone();
        b.constraint(
            &format!("shared memory per block <= {max_shared} bytes"),
            move |c| decode_values(c).is_ok_and(|s| g.shared_bytes(&s) <= max_shared),
        );
        let g = gemm.clone();
        // Two k tiles or more per split: the main loop stays a loop (with one, the compiler
        // drops it) and a split is worth its partial sums.
        b.constraint("every split has two k tiles", move |c| {
            decode_values(c).is_ok_and(|s| s.splits == 1 || 2 * s.splits <= g.k_tiles(&s))
        });
        let g = gemm.clone();
        b.constraint(
            &format!(
                "split-K partial sums <= {} MiB",
                crate::codegen::split_k::MAX_PARTIAL_BYTES >> 20
            ),
            move |c| {
                decode_values(c).is_ok_and(|s| {
                    g.split(&s).is_none_or(|p| {
                        p.partial_bytes() <= crate::codegen::split_k::MAX_PARTIAL_BYTES
                    })
                })
            },
        );
        let space = b.build().map_err(|e| e.to_string())?;
        let m_dims = gemm.m.iter().filter(|&&v| extents[v] > 1).count();
        Ok(TcTemplate {
            gemm,
            space,
            max_shared,
            sm_count: target.sm_count as usize,
            m_dims,
        })
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
    pub fn decode(&self, c: &Config) -> Result<TcSchedule, String> {
        self.space.check(c).map_err(|e| e.to_string())?;
        decode_values(c)
    }

    /// The point a schedule stands for.
    pub fn encode(&self, s: &TcSchedule) -> Result<Config, String> {
        let fields = [
            s.warp_m,
            s.warp_n,
            s.warps_m,
            s.warps_n,
            s.block_k,
            s.stages,
            usize::from(s.swizzle),
            s.split_k,
            s.splits,
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

    /// The default: [`TcTemplate::small_default`] for the shapes an H100 measured (an
    /// implicit-GEMM convolution, or an output of at most [`SMALL_OUTPUT`] elements), else
    /// [`TcTemplate::cutlass_default`].
    pub fn default_schedule(&self) -> TcSchedule {
        let g = &self.gemm;
        let outputs = g.batch_count_of() * g.m_extent * g.n_extent;
        if !g.a.linear || !g.b.linear || outputs <= SMALL_OUTPUT {
            self.small_default()
        } else {
            self.cutlass_default()
        }
    }

    /// The default where the H100 measured this template
    /// (`bench/results/2026-11-25-cuda-h100/tc-half-points.json`: two small bf16 GEMMs,
    /// 512×64, and 13 f16 convolutions, every ResNet-50 layer): the fastest point of each had warp tiles 16 rows high (16×16 on 12
    /// of the 15), mostly one warp along `m` and four along `n` (a 16×64 block), k tiles
    /// of 64 and two warp groups splitting each stage (sliced K); 16×16 warps in 1×4, k
    /// tiles of 64, 4 stages and sliced K of 2 is this default, where
    /// [`TcTemplate::cutlass_default`] ran at 0.07–0.65 of the best. While half the SMs
    /// would idle, a plain GEMM takes fewer warps along `n` (more, narrower blocks: on an
    /// H200, `bench/results/2026-11-26-cuda-h200/tc-half-points.json`, the 512×64 outputs
    /// measured 0.97–0.98 of their best with 1×1 warps, 0.85–0.86 with 1×4, and 0.40–0.45
    /// with 1×4 split across 2–4 blocks); then the reduction is split across blocks (2, 4
    /// or 8 blocks per output tile, each with at least 4 k tiles) while half the SMs would
    /// still idle, as the convolutions measured on the H100; fewer stages if the target's
    /// shared memory asks for it.
    pub fn small_default(&self) -> TcSchedule {
        // A reduction of 32 or less in k tiles of 16: two tiles, so the second one's copy
        // overlaps the first one's MMAs in a pipelined loop (one tile of 32 is straight-line
        // code: nothing to overlap).
        let block_k = if self.gemm.k_extent <= 32 {
            16
        } else if self.gemm.k_extent < 128 {
            32
        } else {
            64
        };
        let warps_n = match self.gemm.n_extent {
            0..=16 => 1,
            17..=32 => 2,
            _ => 4,
        };
        let mut s = TcSchedule {
            warp_m: 16,
            warp_n: 16,
            warps_m: 1,
            warps_n,
            block_k,
            stages: 4,
            swizzle: true,
            split_k: 1,
            splits: 1,
        };
        let mut wide = false;
        if self.gemm.a.linear && self.gemm.b.linear {
            while s.warps_n > 1 && self.blocks(&s) * 2 <= self.sm_count {
                s.warps_n /= 2;
            }
        } else if self.blocks(&s) >= LARGE_CONV_WAVES * self.sm_count {
            self.widen_for_large_outputs(&mut s);
            wide = true;
        }
        self.split_across_blocks(&mut s);
        // Sliced K: two warp groups per stage, each with a whole k tile. For 16×32 warps on k
        // tiles of 64 only in rows of four warps over one image's pixels: in 2×2, or with a
        // batch of images to index, ptxas kept to 64 registers by spilling one into the hot
        // loop (4 bytes, one local load per k tile).
        if self.gemm.k_extent >= 2 * s.block_k
            && s.block_k >= 32
            && !(wide && s.block_k >= 64 && (s.warps_n < 4 || self.m_dims > 2))
            && s.warps_m * s.warps_n * 2 <= MAX_WARPS
        {
            s.split_k = 2;
        }
        self.fit_stages(&mut s);
        s
    }

    /// A convolution with at least [`LARGE_CONV_WAVES`] waves of the small default's 16×64
    /// blocks (many output pixels, the GEMM's `m`, such as ResNet-50's 1×1 layers on 56×56
    /// and 28×28 planes and its 7×7 stem, and most of YOLO9000's layers) takes warp tiles
    /// twice as wide along the channels (16×32), 2 stages, k tiles of 64 (32 where a tile of
    /// 64 would leave the last one at most half full) and, for at most 64 channels, 2×2 warps
    /// (a 32×64 block) rather than 1×4, for at most 32 a column of 4×1 (a 64×32 block);
    /// sliced K on k tiles of 32, and on tiles of 64 in rows of four warps over one image.
    /// On an H200 (2026-11-26, `tc-half-points.json`) that measured 0.88–0.90 of the best
    /// point on the stem (the 16×16 default 0.60–0.62), 0.96–0.98 on 64 to 256 channels over
    /// 56×56 (0.66–0.69) and 0.99–1.00 on 128 to 512 over 28×28 (0.97–0.98); on the H100,
    /// 1.00 and 0.84 on the latter two. On YOLO9000 in f16 (the H200's third lease), with reductions of up to
    /// 4608: sliced 16×32 warps in 1×4 were the best point of 6 of the 7 layers in 1×4 that
    /// measured them and 0.85 on the seventh, whose best splits K across blocks (the 16×16
    /// default measured 0.65 and 0.69 on two of them), and the 3-channel first layer with 32
    /// filters ran at 1.00 of its best in 4×1 (0.59 in 2×2).
    fn widen_for_large_outputs(&self, s: &mut TcSchedule) {
        let k = self.gemm.k_extent;
        s.warp_n = 32;
        s.stages = 2;
        s.block_k = if (1..=32).contains(&(k % 64)) { 32 } else { 64 };
        if self.gemm.n_extent <= 32 {
            s.warps_m = 4;
            s.warps_n = 1;
        } else if self.gemm.n_extent <= 64 {
            s.warps_m = 2;
            s.warps_n = 2;
        }
    }

    /// The default for large outputs (unmeasured on a GPU so far): CUTLASS's 128×128×32
    /// block of 2×2 warps (64×64 each), 3 stages, swizzled, shrunk to 64 or 32 along an axis that is that small, and to fewer stages
    /// if the target's shared memory asks for it. While that leaves SMs idle (fewer blocks
    /// than SMs), the warp tile is halved along the longer block side, down to 32×32
    /// (1000×1000 on an H100's 132 SMs: 256 blocks of 64×64 rather than 64 of 128×128, which
    /// several blocks per SM can run at once); if half the
    /// SMs are still idle, the reduction is split across blocks (split-K: 2, 4 or 8 blocks
    /// per output tile, each with at least 4 k tiles) and, if that still leaves half the SMs
    /// idle with at least 8 stages per split, two warp groups split each stage (sliced K). A
    /// heuristic from occupancy, not from measurements.
    pub fn cutlass_default(&self) -> TcSchedule {
        let shrink = |e: usize| -> (usize, usize) {
            if e <= 16 {
                (16, 1)
            } else if e <= 32 {
                (32, 1)
            } else if e <= 64 {
                (32, 2)
            } else {
                (64, 2)
            }
        };
        let (warp_m, warps_m) = shrink(self.gemm.m_extent);
        let (warp_n, warps_n) = shrink(self.gemm.n_extent);
        // As in `small_default`: k tiles of 16 for a reduction of 32 or less.
        let block_k = if self.gemm.k_extent <= 32 { 16 } else { 32 };
        let mut s = TcSchedule {
            warp_m,
            warp_n,
            warps_m,
            warps_n,
            block_k,
            stages: 3,
            swizzle: true,
            split_k: 1,
            splits: 1,
        };
        while self.blocks(&s) < self.sm_count && s.warp_m.max(s.warp_n) > 32 {
            if s.block_m() >= s.block_n() && s.warp_m > 32 {
                s.warp_m /= 2;
            } else if s.warp_n > 32 {
                s.warp_n /= 2;
            } else {
                s.warp_m /= 2;
            }
        }
        self.split_across_blocks(&mut s);
        if self.blocks(&s) * s.splits * 2 <= self.sm_count
            && self.gemm.k_extent >= 8 * s.block_k * s.splits
            && s.block_k >= 32
            && s.warps_m * s.warps_n * 2 <= MAX_WARPS
        {
            s.split_k = 2;
        }
        self.fit_stages(&mut s);
        s
    }

    /// Output tiles of `s`.
    fn blocks(&self, s: &TcSchedule) -> usize {
        self.gemm.batch_count_of()
            * self.gemm.m_extent.div_ceil(s.block_m())
            * self.gemm.n_extent.div_ceil(s.block_n())
    }

    /// Split-K across blocks while half the SMs would still idle and every split keeps at
    /// least 4 k tiles (and the partial sums fit their bound).
    fn split_across_blocks(&self, s: &mut TcSchedule) {
        while self.blocks(s) * s.splits * 2 <= self.sm_count
            && self.gemm.k_tiles(s) >= 8 * s.splits
            && s.splits < 8
        {
            let wider = TcSchedule {
                splits: s.splits * 2,
                ..s.clone()
            };
            match self.gemm.split(&wider) {
                Some(p) if p.partial_bytes() > crate::codegen::split_k::MAX_PARTIAL_BYTES => break,
                _ => *s = wider,
            }
        }
    }

    /// Fewer stages while the shared memory asks for it (at least 2).
    fn fit_stages(&self, s: &mut TcSchedule) {
        while s.stages > 2 && self.gemm.shared_bytes(s) > self.max_shared {
            s.stages -= 1;
        }
    }
}

impl crate::template::Template for TcTemplate {
    type Schedule = TcSchedule;

    fn space(&self) -> &SearchSpace {
        &self.space
    }

    fn default_point(&self) -> Result<Config, String> {
        self.encode(&self.default_schedule())
    }

    fn decode(&self, point: &Config) -> Result<TcSchedule, String> {
        TcTemplate::decode(self, point)
    }

    /// The tensor-core code is printed from [`Gemm`] and the schedule directly (see
    /// [`crate::lower::tensorcore`] for why), so there is no loop nest to return.
    fn lower<'a>(
        &self,
        _kernel: &'a Kernel,
        _extents: &[usize],
        _shapes: &'a [&'a [usize]],
        _schedule: &TcSchedule,
    ) -> Result<crate::lower::Nest<'a>, String> {
        Err("the tensor-core template is printed from its GEMM plan, not a loop nest".into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::parse_text;
    use rand::{rngs::StdRng, SeedableRng};

    #[test]
    fn qualifying_kernels_and_round_trips() {
        let target = GpuTarget::h100();
        let mut rng = StdRng::seed_from_u64(5);
        for (src, dtypes, shapes, extents) in [
            (
                "c[[i,j]] += a[[i,k]] * b[[k,j]]",
                "a=bf16,b=bf16",
                vec![vec![67, 93], vec![93, 45], vec![67, 45]],
                vec![67, 45, 93],
            ),
            (
                "c[[b,i,j]] += x[[b,k,i]] * y[[b,j,k]]",
                "x=f16,y=f16,c=f16",
                vec![vec![3, 24, 40], vec![3, 17, 24], vec![3, 40, 17]],
                vec![3, 40, 17, 24],
            ),
        ] {
            let k = parse_text("k", src, None)
                .unwrap()
                .with_dtypes(dtypes)
                .unwrap();
            let refs: Vec<&[usize]> = shapes.iter().map(|s| s.as_slice()).collect();
            let t = TcTemplate::new(&k, &extents, &refs, &target).unwrap();
            let d = t.default_schedule();
            assert_eq!(t.decode(&t.encode(&d).unwrap()).unwrap(), d);
            for _ in 0..20 {
                let c = t.space().sample_uniform(&mut rng).unwrap();
                let s = t.decode(&c).unwrap();
                assert!(s.validate().is_ok());
                assert!(t.gemm().shared_bytes(&s) <= 48 * 1024);
                assert_eq!(t.encode(&s).unwrap(), c);
            }
        }
    }

    /// The template of an m×k · k×n bf16 GEMM on the H100.
    fn bf16_gemm(m: usize, n: usize, kk: usize) -> TcTemplate {
        let k = parse_text("k", "c[[i,j]] += a[[i,k]] * b[[k,j]]", None)
            .unwrap()
            .with_dtypes("a=bf16,b=bf16")
            .unwrap();
        let shapes = [vec![m, kk], vec![kk, n], vec![m, n]];
        let refs: Vec<&[usize]> = shapes.iter().map(Vec::as_slice).collect();
        TcTemplate::new(&k, &[m, n, kk], &refs, &GpuTarget::h100()).unwrap()
    }

    #[test]
    fn the_default_fills_the_gpu() {
        for (m, n, kk, block, split_k, splits) in [
            (4096, 4096, 4096, (128, 128), 1, 1),
            (1000, 1000, 1000, (64, 64), 1, 1),
            // Outputs of at most 64 Ki elements: the small default the H100 and H200
            // measured, narrower blocks before a split across blocks.
            (128, 128, 8192, (16, 16), 2, 2),
            (256, 256, 1024, (16, 32), 2, 1),
            (20, 24, 40, (16, 16), 1, 1),
        ] {
            let t = bf16_gemm(m, n, kk);
            let s = t.default_schedule();
            assert_eq!(
                (s.block_m(), s.block_n(), s.split_k, s.splits),
                (block.0, block.1, split_k, splits)
            );
            assert!(t.encode(&s).is_ok(), "{s:?}");
        }
    }

    #[test]
    fn a_convolution_with_many_pixels_widens_its_warp_tiles() {
        // (Blocks counted for an H100's 132 SMs: at least two waves of 16×64 blocks.)
        // A 1×1 convolution, c → f channels on an hw×hw plane.
        let images = |n: usize, c: usize, f: usize, hw: usize| {
            let k = parse_text("c", "y[[n,f,p,q]] += x[[n,c,p+r,q+s]] * w[[f,c,r,s]]", None)
                .unwrap()
                .with_dtypes("x=f16,w=f16")
                .unwrap();
            let shapes = [vec![n, c, hw, hw], vec![f, c, 1, 1], vec![n, f, hw, hw]];
            let refs: Vec<&[usize]> = shapes.iter().map(Vec::as_slice).collect();
            let extents = crate::ir::bind(&k, &refs).unwrap();
            let t = TcTemplate::new(&k, &extents, &refs, &GpuTarget::h100()).unwrap();
            let s = t.default_schedule();
            assert!(t.encode(&s).is_ok(), "{s:?}");
            s
        };
        let conv = |c: usize, f: usize, hw: usize| images(1, c, f, hw);
        // 1×1, 64 → 256 channels on 56×56: 16×32 warps in 1×4, one k tile of 64, 2 stages.
        let s = conv(64, 256, 56);
        assert_eq!(
            (s.warp_m, s.warp_n, s.warps_m, s.warps_n, s.block_k, s.stages),
            (16, 32, 1, 4, 64, 2)
        );
        // 128 → 512 on 28×28: the same, two k tiles of 64, sliced (a row of four warps).
        let s = conv(128, 512, 28);
        assert_eq!((s.warp_n, s.warps_n, s.block_k, s.split_k), (32, 4, 64, 2));
        // 64 → 64: 2×2 of them, a 32×64 block, not sliced.
        let s = conv(64, 64, 112);
        assert_eq!((s.warp_n, s.warps_m, s.warps_n, s.split_k), (32, 2, 2, 1));
        // 3 → 32 on 544×544 (a 3×3 layer's 27 taps fused into the reduction here as 1×1
        // over 27 channels): a column of 4×1, a 64×32 block.
        let s = conv(27, 32, 544);
        assert_eq!((s.warp_n, s.warps_m, s.warps_n), (32, 4, 1));
        // 512 → 256 on 34×34: a long reduction widens too, sliced.
        let s = conv(512, 256, 34);
        assert_eq!((s.warp_n, s.warps_n, s.block_k, s.split_k), (32, 4, 64, 2));
        // The same over 8 images: not sliced (ptxas spilled in the hot loop).
        let s = images(8, 512, 256, 34);
        assert_eq!((s.warp_n, s.warps_n, s.block_k, s.split_k), (32, 4, 64, 1));
        // 1×1, 256 → 1024 on 14×14: too few pixels, the 16×16 warps stay.
        let s = conv(256, 1024, 14);
        assert_eq!((s.warp_n, s.warps_n), (16, 4));
    }

    #[test]
    fn every_short_reduction_has_a_valid_pipelined_default() {
        for (m, n) in [(64, 64), (256, 256), (512, 1024), (4096, 4096)] {
            for kk in 1..=80 {
                let t = bf16_gemm(m, n, kk);
                let s = t.default_schedule();
                assert!(t.encode(&s).is_ok(), "{m}x{n}x{kk}: {s:?}");
                // Beyond one MMA step, at least two k tiles: a loop to pipeline.
                if kk > 16 {
                    assert!(kk.div_ceil(s.block_k) >= 2, "{m}x{n}x{kk}: {s:?}");
                }
            }
        }
    }

    #[test]
    fn other_kernels_fall_back() {
        let target = GpuTarget::h100();
        for (src, dtypes, shapes, extents) in [
            (
                "c[[i,j]] += a[[i,k]] * b[[k,j]]",
                "",
                vec![vec![8, 8], vec![8, 8], vec![8, 8]],
                vec![8, 8, 8],
            ),
            (
                "c[[i,j]] += a[[i,k]] * b[[k,j]]",
                "a=bf16,b=f16",
                vec![vec![8, 8], vec![8, 8], vec![8, 8]],
                vec![8, 8, 8],
            ),
            (
                "o[[i]] += a[[i,k]] * b[[k]]",
                "a=bf16,b=bf16",
                vec![vec![8, 8], vec![8], vec![8]],
                vec![8, 8],
            ),
        ] {
            let k = parse_text("k", src, None)
                .unwrap()
                .with_dtypes(dtypes)
                .unwrap();
            let refs: Vec<&[usize]> = shapes.iter().map(|s| s.as_slice()).collect();
            assert!(
                TcTemplate::new(&k, &extents, &refs, &target).is_err(),
                "{src}"
            );
        }
    }
}
