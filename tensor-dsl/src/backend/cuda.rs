//! The CUDA backend: generated CUDA C, compiled with NVRTC and launched through `cudarc`
//! ([`crate::runtime::cuda`]), with schedules of the call's [`CudaSpace`] (the tensor-core
//! template for half-precision GEMMs on sm_80+, else the SIMT [`GpuTemplate`](crate::template::gpu::GpuTemplate)),
//! keyed by the GPU's name and compute capability.

use super::{Backend, Decision};
use crate::autotune::{tune_cuda, TuneOptions, TuneOutcome};
use crate::ir::Kernel;
use crate::records::{Key, Record, Target};
use crate::runtime::cuda::{self, DeviceBuffer, DeviceInfo};
use crate::template::cuda::{default_schedule, CudaSchedule, CudaSpace};
use crate::tuned::{self, Memo};
use crate::{Device, Error};
use std::sync::OnceLock;

/// The GPU the CUDA runtime runs on.
#[derive(Clone, Copy, Debug)]
pub struct CudaBackend {
    info: &'static DeviceInfo,
}

impl CudaBackend {
    /// The backend of the runtime's GPU; [`Error::DeviceUnavailable`] (with the reason)
    /// when there is no usable one.
    pub fn new() -> Result<CudaBackend, Error> {
        let info = cuda::available().map_err(|reason| Error::DeviceUnavailable {
            device: Device::Cuda.name().into(),
            reason,
        })?;
        Ok(CudaBackend { info })
    }
}

/// A call's buffers on the GPU: the inputs in declaration order and the output.
pub struct GpuBuffers<'a> {
    pub inputs: &'a [&'a DeviceBuffer],
    pub output: &'a mut DeviceBuffer,
}

impl Backend for CudaBackend {
    type Schedule = CudaSchedule;
    type Buffers<'a> = GpuBuffers<'a>;
    const NAME: &'static str = "cuda";

    fn memo(&self) -> &'static Memo<Decision<CudaSchedule>> {
        static M: OnceLock<Memo<Decision<CudaSchedule>>> = OnceLock::new();
        M.get_or_init(Memo::default)
    }

    fn default_schedule(&self, kernel: &Kernel, extents: &[usize]) -> CudaSchedule {
        default_schedule(kernel, extents, &self.info.target())
    }

    fn has_space(&self, kernel: &Kernel, extents: &[usize]) -> bool {
        CudaSpace::from_extents(kernel, extents, &self.info.target()).is_ok()
    }

    fn key(&self, kernel: &Kernel, shapes: &[&[usize]]) -> Result<Key, Error> {
        Ok(tuned::cuda_key(
            kernel,
            shapes,
            Target::cuda(&self.info.name, self.info.sm()),
            crate::codegen::cuda::CODEGEN_VERSION,
        ))
    }

    fn schedule_of(
        &self,
        kernel: &Kernel,
        extents: &[usize],
        record: &Record,
    ) -> Option<CudaSchedule> {
        let target = self.info.target();
        CudaSpace::from_extents(kernel, extents, &target)
            .ok()?
            .schedule_from_text(kernel, extents, &target, &record.config)
    }

    fn can_tune(&self) -> bool {
        true
    }

    fn tune(
        &self,
        kernel: &Kernel,
        shapes: &[Vec<usize>],
        opts: &TuneOptions,
        progress: &mut dyn FnMut(usize),
    ) -> Result<TuneOutcome<CudaSchedule>, Error> {
        tune_cuda(kernel, shapes, opts, progress)
    }

    /// Queues the launch (asynchronous: a fault shows at the next copy to the host).
    fn run(
        &self,
        kernel: &Kernel,
        extents: &[usize],
        shapes: &[&[usize]],
        buffers: &mut GpuBuffers<'_>,
        schedule: &CudaSchedule,
    ) -> Result<(), Error> {
        let compiled = cuda::compile_schedule(kernel, extents, shapes, schedule)?;
        compiled.launch(buffers.inputs, buffers.output)
    }

    /// Median of 3 event-timed samples each, alternating twice.
    fn not_slower(
        &self,
        kernel: &Kernel,
        extents: &[usize],
        shapes: &[&[usize]],
        buffers: &mut GpuBuffers<'_>,
        candidate: &CudaSchedule,
        default: &CudaSchedule,
    ) -> Result<bool, Error> {
        let compiled = [
            cuda::compile_schedule(kernel, extents, shapes, default)?,
            cuda::compile_schedule(kernel, extents, shapes, candidate)?,
        ];
        let mut best = [f64::INFINITY; 2];
        for _ in 0..2 {
            for (n, k) in compiled.iter().enumerate() {
                let mut samples = k.time(buffers.inputs, buffers.output, 1, 3)?;
                samples.sort_by(f64::total_cmp);
                if let Some(&median) = samples.get(samples.len() / 2) {
                    best[n] = best[n].min(median);
                }
            }
        }
        Ok(best[1] <= best[0])
    }
}
