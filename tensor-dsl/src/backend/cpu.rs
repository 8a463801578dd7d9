//! The CPU backend: generated C, compiled with the system C compiler, run in-process
//! ([`crate::runtime::cpu`]), with schedules of [`CpuTemplate`].

use super::{Backend, Decision};
use crate::autotune::{tune_cpu, TuneOptions, TuneOutcome};
use crate::codegen::c::CODEGEN_VERSION;
use crate::ir::Kernel;
use crate::records::{Key, Record};
use crate::runtime::cpu;
use crate::template::cpu::{CpuConfig, CpuTemplate};
use crate::tensor::{Data, DataMut};
use crate::tuned::{self, Memo};
use crate::Error;
use std::sync::OnceLock;
use std::time::Instant;

/// The CPU.
#[derive(Clone, Copy, Debug, Default)]
pub struct CpuBackend;

/// A host call's buffers: the inputs by parameter id (the output's slot unused), their
/// [`crate::Tensor::version`]s where known (by parameter id; may be empty), and the output.
pub struct HostBuffers<'a> {
    pub data: &'a [Data<'a>],
    pub versions: &'a [Option<u64>],
    pub out: DataMut<'a>,
}

/// A CPU runtime error as the facade's error (a missing compiler is checked before any
/// decision, so it does not reach here in practice).
fn error(e: cpu::CpuError) -> Error {
    match e {
        cpu::CpuError::Other(e) => e,
        cpu::CpuError::NoCompiler(reason) => Error::DeviceUnavailable {
            device: "cpu".into(),
            reason,
        },
    }
}

impl Backend for CpuBackend {
    type Schedule = CpuConfig;
    type Buffers<'a> = HostBuffers<'a>;
    const NAME: &'static str = "cpu";

    fn memo(&self) -> &'static Memo<Decision<CpuConfig>> {
        static M: OnceLock<Memo<Decision<CpuConfig>>> = OnceLock::new();
        M.get_or_init(Memo::default)
    }

    fn default_schedule(&self, kernel: &Kernel, extents: &[usize]) -> CpuConfig {
        CpuConfig::heuristic(kernel, extents, cpu::simd_lanes())
    }

    fn has_space(&self, kernel: &Kernel, extents: &[usize]) -> bool {
        CpuTemplate::new(kernel, extents, cpu::simd_lanes()).is_ok()
    }

    fn key(&self, kernel: &Kernel, shapes: &[&[usize]]) -> Result<Key, Error> {
        Ok(tuned::cpu_key(kernel, shapes, CODEGEN_VERSION))
    }

    fn schedule_of(
        &self,
        kernel: &Kernel,
        extents: &[usize],
        record: &Record,
    ) -> Option<CpuConfig> {
        let template = CpuTemplate::new(kernel, extents, cpu::simd_lanes()).ok()?;
        let config = crate::template::schedule_from_text(&template, &record.config)?;
        config.validate(kernel).ok()?;
        Some(config)
    }

    fn can_tune(&self) -> bool {
        cpu::compiler().is_ok()
    }

    fn constant_inputs(&self, buffers: &HostBuffers<'_>) -> Vec<usize> {
        buffers
            .versions
            .iter()
            .enumerate()
            .filter_map(|(i, v)| v.map(|_| i))
            .collect()
    }

    fn tune(
        &self,
        kernel: &Kernel,
        shapes: &[Vec<usize>],
        opts: &TuneOptions,
        progress: &mut dyn FnMut(usize),
    ) -> Result<TuneOutcome<CpuConfig>, Error> {
        tune_cpu(kernel, shapes, opts, progress)
    }

    fn run(
        &self,
        kernel: &Kernel,
        extents: &[usize],
        shapes: &[&[usize]],
        buffers: &mut HostBuffers<'_>,
        schedule: &CpuConfig,
    ) -> Result<(), Error> {
        cpu::run_with_versions(
            kernel,
            extents,
            shapes,
            buffers.data,
            buffers.versions,
            buffers.out.reborrow(),
            schedule,
        )
        .map_err(error)
    }

    /// Best of 3 runs each (after one warm-up round), alternating.
    fn not_slower(
        &self,
        kernel: &Kernel,
        extents: &[usize],
        shapes: &[&[usize]],
        buffers: &mut HostBuffers<'_>,
        candidate: &CpuConfig,
        default: &CpuConfig,
    ) -> Result<bool, Error> {
        let mut best = [f64::INFINITY; 2];
        for round in 0..4 {
            for (n, cfg) in [default, candidate].into_iter().enumerate() {
                let t = Instant::now();
                self.run(kernel, extents, shapes, buffers, cfg)?;
                if round > 0 {
                    best[n] = best[n].min(t.elapsed().as_secs_f64());
                }
            }
        }
        Ok(best[1] <= best[0])
    }
}
