//! The CUDA backend's schedules: a point of the Hopper `wgmma` template ([`super::wgmma`])
//! where the target has `wgmma` (`sm_90a`: the runtime on a 9.0 GPU, or asked for by name)
//! and the kernel is a large enough `f16`/`bf16` GEMM or batched GEMM
//! ([`WgTemplate::preferred`]); else of the `mma.sync` tensor-core template
//! ([`super::tensorcore`]) where the kernel has a tensor-core form on the target (sm_80+,
//! an `f16`/`bf16` GEMM, batched GEMM or implicit-GEMM convolution); else of the SIMT
//! template ([`super::gpu`]). The backend decides from extents alone
//! ([`CudaSpace::from_extents`]), so there a convolution (whose input shape the extents do
//! not give) stays SIMT; `emit`/`verify`/`tune` with shapes use the tensor-core form.
//!
//! ```
//! use tensor_dsl::ir::parse_text;
//! use tensor_dsl::template::{cuda::{CudaSchedule, CudaSpace}, gpu::GpuTarget};
//! let k = parse_text("mm", "c[[i,j]] += a[[i,k]] * b[[k,j]]", None).unwrap();
//! let shapes: [&[usize]; 3] = [&[64, 32], &[32, 48], &[64, 48]];
//! let h100 = GpuTarget::h100();
//! let simt = CudaSpace::new(&k, &[64, 48, 32], &shapes, &h100).unwrap();
//! assert!(matches!(simt.default_schedule(), CudaSchedule::Simt(_)));
//! let half = k.with_dtypes("a=bf16,b=bf16").unwrap();
//! let tc = CudaSpace::new(&half, &[64, 48, 32], &shapes, &h100).unwrap();
//! let s = tc.default_schedule();
//! assert!(matches!(s, CudaSchedule::TensorCore(_)));
//! // A record's config text round-trips.
//! let text = tc.space().format(&tc.default_point().unwrap()).unwrap();
//! assert_eq!(tc.schedule_from_text(&half, &[64, 48, 32], &h100, &text), Some(s));
//! ```

use super::gpu::{GpuSchedule, GpuTarget, GpuTemplate};
use super::tensorcore::TcTemplate;
use super::wgmma::WgTemplate;
use crate::codegen::cuda::CudaSource;
use crate::ir::Kernel;
use crate::lower::tensorcore::TcSchedule;
use crate::lower::wgmma::WgSchedule;
use serde::{Deserialize, Serialize};
use tuner::{Config, SearchSpace};

/// A schedule of the CUDA backend.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "template", rename_all = "snake_case")]
pub enum CudaSchedule {
    /// The SIMT template (Ansor multi-level tiling, FFMA).
    Simt(GpuSchedule),
    /// The tensor-core template (`mma.sync m16n8k16`).
    TensorCore(TcSchedule),
    /// The Hopper tensor-core template (`wgmma.mma_async m64nNk16`, `sm_90a`).
    Wgmma(WgSchedule),
}

impl From<GpuSchedule> for CudaSchedule {
    fn from(s: GpuSchedule) -> CudaSchedule {
        CudaSchedule::Simt(s)
    }
}

/// The schedule space of one call on one GPU: tensor-core where it applies, else SIMT.
#[derive(Debug, Clone)]
pub enum CudaSpace {
    Simt(GpuTemplate),
    TensorCore(Box<TcTemplate>),
    Wgmma(Box<WgTemplate>),
}

impl CudaSpace {
    /// The wgmma space if the target has `wgmma` and the kernel is a GEMM it prefers, else
    /// the tensor-core space if the kernel has a tensor-core form on `target`, else the SIMT
    /// space. Errors: the SIMT template's (extents that do not fit the kernel).
    pub fn new(
        kernel: &Kernel,
        extents: &[usize],
        shapes: &[&[usize]],
        target: &GpuTarget,
    ) -> Result<CudaSpace, String> {
        if let Ok(t) = WgTemplate::new(kernel, extents, shapes, target) {
            if WgTemplate::preferred(t.gemm()) {
                return Ok(CudaSpace::Wgmma(Box::new(t)));
            }
        }
        match TcTemplate::new(kernel, extents, shapes, target) {
            Ok(t) => Ok(CudaSpace::TensorCore(Box::new(t))),
            Err(_) => GpuTemplate::new(kernel, extents, target).map(CudaSpace::Simt),
        }
    }

    /// [`CudaSpace::new`] with the shapes every plain access implies (each dimension the
    /// extent of its index, the output's the spatial extents); SIMT when some access is
    /// affine (its tensor's shape is not known from the extents).
    pub fn from_extents(
        kernel: &Kernel,
        extents: &[usize],
        target: &GpuTarget,
    ) -> Result<CudaSpace, String> {
        match plain_shapes(kernel, extents) {
            Some(shapes) => {
                let refs: Vec<&[usize]> = shapes.iter().map(Vec::as_slice).collect();
                CudaSpace::new(kernel, extents, &refs, target)
            }
            None => GpuTemplate::new(kernel, extents, target).map(CudaSpace::Simt),
        }
    }

    /// The knobs.
    pub fn space(&self) -> &SearchSpace {
        match self {
            CudaSpace::Simt(t) => t.space(),
            CudaSpace::TensorCore(t) => t.space(),
            CudaSpace::Wgmma(t) => t.space(),
        }
    }

    /// The template's name in messages and records' notes: `simt`, `tensor_core` or
    /// `wgmma`.
    pub fn name(&self) -> &'static str {
        match self {
            CudaSpace::Simt(_) => "simt",
            CudaSpace::TensorCore(_) => "tensor_core",
            CudaSpace::Wgmma(_) => "wgmma",
        }
    }

    /// The default point.
    pub fn default_point(&self) -> Result<Config, String> {
        match self {
            CudaSpace::Simt(t) => t.default_config(),
            CudaSpace::TensorCore(t) => t.encode(&t.default_schedule()),
            CudaSpace::Wgmma(t) => t.encode(&t.default_schedule()),
        }
    }

    /// The default schedule.
    pub fn default_schedule(&self) -> CudaSchedule {
        match self {
            CudaSpace::Simt(t) => CudaSchedule::Simt(t.default_schedule()),
            CudaSpace::TensorCore(t) => CudaSchedule::TensorCore(t.default_schedule()),
            CudaSpace::Wgmma(t) => CudaSchedule::Wgmma(t.default_schedule()),
        }
    }

    /// The schedule a point stands for.
    pub fn decode(&self, c: &Config) -> Result<CudaSchedule, String> {
        match self {
            CudaSpace::Simt(t) => t.decode(c).map(CudaSchedule::Simt),
            CudaSpace::TensorCore(t) => t.decode(c).map(CudaSchedule::TensorCore),
            CudaSpace::Wgmma(t) => t.decode(c).map(CudaSchedule::Wgmma),
        }
    }

    /// The schedule a record's config text stands for, if it is a valid point of this space
    /// (SIMT schedules also within `target`'s limits).
    pub fn schedule_from_text(
        &self,
        kernel: &Kernel,
        extents: &[usize],
        target: &GpuTarget,
        text: &str,
    ) -> Option<CudaSchedule> {
        let point = self.space().parse(text).ok()?;
        let schedule = self.decode(&point).ok()?;
        if let CudaSchedule::Simt(s) = &schedule {
            s.validate(kernel, extents).ok()?;
            s.check_limits(kernel, target).ok()?;
        }
        Some(schedule)
    }
}

/// The default CUDA schedule of a call whose shapes follow from its extents (see
/// [`CudaSpace::from_extents`]); the SIMT default when there is no space.
pub fn default_schedule(kernel: &Kernel, extents: &[usize], target: &GpuTarget) -> CudaSchedule {
    match CudaSpace::from_extents(kernel, extents, target) {
        Ok(space) => space.default_schedule(),
        Err(_) => CudaSchedule::Simt(super::gpu::default_schedule(kernel, extents, target)),
    }
}

/// The shapes every plain access implies, or `None` when an access is affine.
pub fn plain_shapes(kernel: &Kernel, extents: &[usize]) -> Option<Vec<Vec<usize>>> {
    let accesses = kernel.accesses();
    (0..kernel.params.len())
        .map(|p| {
            if p == kernel.output {
                return Some(kernel.spatial().iter().map(|&s| extents[s]).collect());
            }
            let a = accesses.iter().find(|a| a.tensor == p)?;
            a.dims
                .iter()
                .map(|d| d.as_var().map(|v| extents[v]))
                .collect()
        })
        .collect()
}

/// CUDA C for a CUDA schedule (see [`crate::codegen::cuda::generate`],
/// [`crate::codegen::tensorcore::generate`] and [`crate::codegen::wgmma::generate`]).
pub fn generate(
    kernel: &Kernel,
    extents: &[usize],
    shapes: &[&[usize]],
    schedule: &CudaSchedule,
) -> CudaSource {
    match schedule {
        CudaSchedule::Simt(s) => crate::codegen::cuda::generate(kernel, extents, shapes, s),
        CudaSchedule::TensorCore(s) => {
            crate::codegen::tensorcore::generate(kernel, extents, shapes, s)
        }
        CudaSchedule::Wgmma(s) => crate::codegen::wgmma::generate(kernel, extents, shapes, s),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::parse_text;
    use rand::{rngs::StdRng, SeedableRng};

    /// Tensor-core records round-trip; SIMT text (or garbage) is not a point of the
    /// tensor-core space and the other way round, so a foreign record is ignored.
    #[test]
    fn records_round_trip_and_templates_do_not_mix() {
        let target = GpuTarget::h100();
        let k = parse_text("mm", "c[[i,j]] += a[[i,k]] * b[[k,j]]", None).unwrap();
        let half = k.with_dtypes("a=f16,b=f16").unwrap();
        let extents = [1000, 1000, 1000];
        let tc = CudaSpace::from_extents(&half, &extents, &target).unwrap();
        let simt = CudaSpace::from_extents(&k, &extents, &target).unwrap();
        assert_eq!((tc.name(), simt.name()), ("tensor_core", "simt"));
        assert!(matches!(
            default_schedule(&half, &extents, &target),
            CudaSchedule::TensorCore(_)
        ));
        let old = GpuTarget {
            sm: 75,
            ..GpuTarget::h100()
        };
        assert!(matches!(
            default_schedule(&half, &extents, &old),
            CudaSchedule::Simt(_)
        ));
        let mut rng = StdRng::seed_from_u64(7);
        for _ in 0..10 {
            let c = tc.space().sample_uniform(&mut rng).unwrap();
            let text = tc.space().format(&c).unwrap();
            let s = tc.schedule_from_text(&half, &extents, &target, &text);
            assert_eq!(s, Some(tc.decode(&c).unwrap()));
            assert_eq!(simt.schedule_from_text(&k, &extents, &target, &text), None);
            let json = serde_json::to_string(&s).unwrap();
            assert_eq!(
                serde_json::from_str::<Option<CudaSchedule>>(&json).unwrap(),
                s
            );
        }
        let simt_text = simt.space().format(&simt.default_point().unwrap()).unwrap();
        assert_eq!(
            tc.schedule_from_text(&half, &extents, &target, &simt_text),
            None
        );
        assert_eq!(
            tc.schedule_from_text(&half, &extents, &target, "warp_m=7"),
            None
        );
    }

    /// On sm_90a a large half-precision GEMM gets the wgmma space (records round-trip, in
    /// text and JSON), a small one `mma.sync`; on sm_90 never wgmma.
    #[test]
    fn sm90a_dispatch_and_wgmma_records() {
        let k = parse_text("mm", "c[[i,j]] += a[[i,k]] * b[[k,j]]", None)
            .unwrap()
            .with_dtypes("a=bf16,b=bf16")
            .unwrap();
        let hopper = GpuTarget::h100_sm90a();
        let big = CudaSpace::from_extents(&k, &[1000, 1000, 1000], &hopper).unwrap();
        assert_eq!(big.name(), "wgmma");
        let small = CudaSpace::from_extents(&k, &[64, 64, 64], &hopper).unwrap();
        assert_eq!(small.name(), "tensor_core");
        let plain = CudaSpace::from_extents(&k, &[1000, 1000, 1000], &GpuTarget::h100()).unwrap();
        assert_eq!(plain.name(), "tensor_core");
        let mut rng = StdRng::seed_from_u64(9);
        for _ in 0..10 {
            let c = big.space().sample_uniform(&mut rng).unwrap();
            let text = big.space().format(&c).unwrap();
            let s = big.schedule_from_text(&k, &[1000; 3], &hopper, &text);
            assert!(matches!(s, Some(CudaSchedule::Wgmma(_))));
            let json = serde_json::to_string(&s).unwrap();
            assert!(json.contains("\"template\":\"wgmma\""), "{json}");
            assert_eq!(
                serde_json::from_str::<Option<CudaSchedule>>(&json).unwrap(),
                s
            );
            assert_eq!(
                plain.schedule_from_text(&k, &[1000; 3], &hopper, &text),
                None
            );
        }
    }

    #[test]
    fn shapes_follow_from_plain_accesses_only() {
        let k = parse_text("mm", "c[[b,i,j]] += a[[b,i,k]] * w[[k,j]]", None).unwrap();
        assert_eq!(
            plain_shapes(&k, &[2, 3, 4, 5]),
            Some(vec![vec![2, 3, 5], vec![5, 4], vec![2, 3, 4]])
        );
        let conv = parse_text("c", "o[[i]] += a[[i + k]] * w[[k]]", None).unwrap();
        assert_eq!(plain_shapes(&conv, &[8, 3]), None);
    }
}
