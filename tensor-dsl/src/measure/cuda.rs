//! Measuring GPU schedules: points of a [`GpuTemplate`] (or, through
//! [`CudaMeasurer::with_space`], of either CUDA template: [`CudaSpace`]) compiled, checked and
//! timed on the GPU the CUDA runtime uses.
//!
//! A batch is compiled on every core first (NVRTC, one program per thread; the PTX lands in
//! the runtime's caches), then each candidate in turn is loaded, launched once on seeded
//! random inputs with its output checked against the expected one, and timed with CUDA
//! events ([`CompiledKernel::time`](crate::runtime::cuda::CompiledKernel::time): back-to-back launches, so launch latency does not count).
//! A candidate that does not compile, exceeds the device's limits, computes a wrong result
//! or runs longer than [`CudaMeasurer::max_seconds`] per launch is an [`Outcome::Invalid`];
//! the search goes on.
//!
//! Unlike the CPU measurer this runs in the tuning process: a GPU kernel cannot be killed
//! from outside, and a fault inside one (an illegal address) leaves the CUDA context unusable
//! until the process exits. Generated kernels are bounds-checked by construction and every
//! template point is run on a CPU emulation of CUDA in the test suite, so a fault is a bug;
//! should one happen, that candidate and every later one are invalid with the driver's
//! message.
//!
//! ```no_run
//! use tensor_dsl::{ir::{bind, parse_text}, measure::cuda::CudaMeasurer};
//! use tensor_dsl::{runtime::cuda, template::gpu::GpuTemplate};
//! use tuner::Measurer;
//! let k = parse_text("mm", "c[[i,j]] += a[[i,k]] * b[[k,j]]", None).unwrap();
//! let shapes = vec![vec![256, 256], vec![256, 256], vec![256, 256]];
//! let gpu = cuda::available().expect("a GPU");
//! let t = GpuTemplate::new(&k, &[256, 256, 256], &gpu.target()).unwrap();
//! let mut m = CudaMeasurer::new(&k, &shapes, t.clone()).unwrap();
//! let outcomes = m.measure(&[t.default_config().unwrap()]);
//! println!("{:?}", outcomes[0].seconds());
//! ```

use crate::codegen::cuda as codegen;
use crate::ir::{bind, Kernel};
use crate::runtime::cuda::{self, DeviceBuffer};
use crate::runtime::{cpu, nvrtc};
use crate::template::cpu::CpuTemplate;
use crate::template::cuda::{CudaSchedule, CudaSpace};
use crate::template::gpu::{GpuSchedule, GpuTarget, GpuTemplate};
use crate::Error;
use tuner::{Config, Measurer, Outcome};

/// Measures points of a CUDA schedule space for one kernel at one shape.
pub struct CudaMeasurer {
    kernel: Kernel,
    shapes: Vec<Vec<usize>>,
    extents: Vec<usize>,
    space: CudaSpace,
    target: GpuTarget,
    /// The kernel's inputs on the GPU, in declaration order.
    inputs: Vec<DeviceBuffer>,
    output: DeviceBuffer,
    reference: Vec<f32>,
    /// Where the expected output came from (for messages).
    reference_source: &'static str,
    /// Launches before timing.
    pub warmup: usize,
    /// Timed samples per candidate (each a mean over enough launches to last 200 µs).
    pub repeats: usize,
    /// A candidate whose second launch (after the checked one) takes longer than this is not
    /// timed further and is invalid ("too slow"): the analogue of the CPU measurer's timeout.
    pub max_seconds: f64,
}

impl std::fmt::Debug for CudaMeasurer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaMeasurer")
            .field("kernel", &self.kernel.name)
            .field("shapes", &self.shapes)
            .field("target", &self.target.name)
            .field("reference", &self.reference_source)
            .finish_non_exhaustive()
    }
}

/// A candidate's schedule and source, or why it has none.
fn prepare(
    kernel: &Kernel,
    extents: &[usize],
    shapes: &[&[usize]],
    template: &GpuTemplate,
    target: &GpuTarget,
    config: &Config,
) -> Result<(GpuSchedule, String), String> {
    let schedule = template.decode(config)?;
    schedule.validate(kernel, extents)?;
    schedule.check_limits(kernel, target)?;
    let generated = codegen::generate(kernel, extents, shapes, &schedule);
    Ok((schedule, generated.source))
}

/// Compiles every candidate of `batch` to PTX on all cores (NVRTC programs are independent),
/// leaving the PTX in the runtime's caches; returns each candidate's schedule or the reason
/// it cannot run (does not decode, breaks a device limit, does not compile). Needs NVRTC,
/// not a GPU: this is what the tests run without one.
pub fn compile_batch(
    kernel: &Kernel,
    extents: &[usize],
    shapes: &[&[usize]],
    template: &GpuTemplate,
    target: &GpuTarget,
    batch: &[Config],
) -> Vec<Result<GpuSchedule, String>> {
    compile_points(kernel, target, batch, &|config: &Config| {
        prepare(kernel, extents, shapes, template, target, config)
    })
}

/// [`compile_batch`] for the points of either CUDA template.
pub fn compile_batch_space(
    kernel: &Kernel,
    extents: &[usize],
    shapes: &[&[usize]],
    space: &CudaSpace,
    target: &GpuTarget,
    batch: &[Config],
) -> Vec<Result<CudaSchedule, String>> {
    match space {
        CudaSpace::Simt(t) => compile_batch(kernel, extents, shapes, t, target, batch)
            .into_iter()
            .map(|r| r.map(CudaSchedule::Simt))
            .collect(),
        CudaSpace::TensorCore(_) | CudaSpace::Wgmma(_) => {
            compile_points(kernel, target, batch, &|config: &Config| {
                let schedule = space.decode(config)?;
                let generated = crate::template::cuda::generate(kernel, extents, shapes, &schedule);
                Ok((schedule, generated.source))
            })
        }
    }
}

/// What a point becomes before it is compiled: its schedule and source, or why not.
type Prepare<'a, S> = dyn Fn(&Config) -> Result<(S, String), String> + Sync + 'a;

/// Compiles the source `prepare` makes of each point on all cores.
fn compile_points<S: Clone + Send>(
    kernel: &Kernel,
    target: &GpuTarget,
    batch: &[Config],
    prepare: &Prepare<'_, S>,
) -> Vec<Result<S, String>> {
    let arch = target.virtual_arch();
    let workers = std::thread::available_parallelism()
        .map_or(2, |n| n.get())
        .clamp(1, batch.len().max(1));
    let one = |config: &Config| -> Result<S, String> {
        let (schedule, source) = prepare(config)?;
        nvrtc::compile_ptx_cached(&kernel.name, &source, &arch).map_err(|e| match e {
            Error::Compile { log, .. } => format!(
                "does not compile: {}",
                log.chars().take(2000).collect::<String>()
            ),
            other => other.to_string(),
        })?;
        Ok(schedule)
    };
    let mut results: Vec<Option<Result<S, String>>> = vec![None; batch.len()];
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..workers)
            .map(|w| {
                let one = &one;
                scope.spawn(move || {
                    (0..batch.len())
                        .filter(|i| i % workers == w)
                        .map(|i| (i, one(&batch[i])))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        for h in handles {
            if let Ok(done) = h.join() {
                for (i, r) in done {
                    results[i] = Some(r);
                }
            }
        }
    });
    results
        .into_iter()
        .map(|r| r.unwrap_or_else(|| Err("the compiling thread panicked".into())))
        .collect()
}

impl CudaMeasurer {
    /// Prepares a task on the GPU: uploads seeded random inputs and computes the expected
    /// output once — with the reference interpreter for small problems, above 2e8 flops with
    /// the CPU default schedule (which the test suite checks against the interpreter) or,
    /// without a C compiler, the GPU default schedule.
    ///
    /// Errors: [`Error::DeviceUnavailable`] without a GPU; shape errors; a failure to
    /// compute the expected output.
    pub fn new(
        kernel: &Kernel,
        shapes: &[Vec<usize>],
        template: GpuTemplate,
    ) -> Result<CudaMeasurer, Error> {
        CudaMeasurer::with_space(kernel, shapes, CudaSpace::Simt(template))
    }

    /// [`CudaMeasurer::new`] for the points of either CUDA template.
    pub fn with_space(
        kernel: &Kernel,
        shapes: &[Vec<usize>],
        space: CudaSpace,
    ) -> Result<CudaMeasurer, Error> {
        let info = cuda::available().map_err(|reason| Error::DeviceUnavailable {
            device: "cuda".into(),
            reason,
        })?;
        let target = info.target();
        let refs: Vec<&[usize]> = shapes.iter().map(Vec::as_slice).collect();
        let extents = bind(kernel, &refs)?;
        let data = super::task_inputs(kernel, shapes);
        let data_refs: Vec<crate::Data<'_>> = data.iter().map(crate::Buffer::view).collect();
        let out_dtype = kernel.params[kernel.output].dtype;
        let expected = super::expected_output(kernel, &extents, &refs, &data_refs, || {
            CpuTemplate::new(kernel, &extents, cpu::simd_lanes())
                .and_then(|t| t.decode(&t.default_config()))
        })?;
        let out_len: usize = shapes[kernel.output].iter().product();
        let (reference, reference_source) = match expected {
            Ok(found) => found,
            Err(_no_compiler) => {
                let mut reference = crate::Buffer::zeros(out_dtype, out_len);
                cuda::run_schedule(
                    kernel,
                    &extents,
                    &refs,
                    &data_refs,
                    reference.view_mut(),
                    &space.default_schedule(),
                )?;
                (
                    reference.to_f32(),
                    "the GPU default schedule (no C compiler for the CPU one)",
                )
            }
        };
        let inputs = kernel
            .inputs()
            .iter()
            .map(|&p| DeviceBuffer::from_host(&data[p]))
            .collect::<Result<Vec<_>, _>>()?;
        let output = DeviceBuffer::zeros_of(out_dtype, out_len)?;
        Ok(CudaMeasurer {
            kernel: kernel.clone(),
            shapes: shapes.to_vec(),
            extents,
            space,
            target,
            inputs,
            output,
            reference,
            reference_source,
            warmup: 2,
            repeats: 5,
            max_seconds: 1.0,
        })
    }

    /// The space whose points this measures.
    pub fn space(&self) -> &CudaSpace {
        &self.space
    }

    /// The GPU it measures on.
    pub fn target(&self) -> &GpuTarget {
        &self.target
    }

    /// The kernel's flop count at this shape.
    pub fn flops(&self) -> f64 {
        self.kernel.flops(&self.extents)
    }

    /// Loads, checks and times one compiled candidate.
    fn run_one(&mut self, schedule: &CudaSchedule) -> Result<Vec<f64>, String> {
        let shapes: Vec<&[usize]> = self.shapes.iter().map(Vec::as_slice).collect();
        let compiled = cuda::compile_schedule(&self.kernel, &self.extents, &shapes, schedule)
            .map_err(|e| e.to_string())?;
        let inputs: Vec<&DeviceBuffer> = self.inputs.iter().collect();
        // Poison the output: an element the kernel forgets to write fails the check.
        let dtype = self.output.dtype();
        let poison = crate::Buffer::from_f32(dtype, &vec![f32::NAN; self.output.len()]);
        self.output
            .copy_from_host(&poison)
            .map_err(|e| e.to_string())?;
        compiled
            .launch(&inputs, &mut self.output)
            .map_err(|e| e.to_string())?;
        let got = self
            .output
            .to_host()
            .map_err(|e| format!("{e}\n{}", compiled.describe()))?;
        super::check_output_within(&got, &self.reference, super::tolerance(dtype))
            .map_err(|m| format!("{m} (expected output from {})", self.reference_source))?;
        // One launch timed with events (the first one may include loading the module) before
        // spending repeats on it.
        let output = &mut self.output;
        let once = cuda::time_enqueued(1, &mut || compiled.launch(&inputs, output))
            .map_err(|e| e.to_string())?;
        if once > self.max_seconds {
            return Err(format!(
                "too slow: {once:.4} s for one launch (limit {:.4} s)",
                self.max_seconds
            ));
        }
        compiled
            .time(&inputs, &mut self.output, self.warmup, self.repeats.max(1))
            .map_err(|e| e.to_string())
    }
}

impl Measurer for CudaMeasurer {
    fn measure(&mut self, batch: &[Config]) -> Vec<Outcome> {
        let shapes: Vec<&[usize]> = self.shapes.iter().map(Vec::as_slice).collect();
        let built = compile_batch_space(
            &self.kernel,
            &self.extents,
            &shapes,
            &self.space,
            &self.target,
            batch,
        );
        built
            .into_iter()
            .map(|b| match b.and_then(|schedule| self.run_one(&schedule)) {
                Ok(samples) if !samples.is_empty() => Outcome::Valid { samples },
                Ok(_) => Outcome::Invalid {
                    reason: "no timings".into(),
                },
                Err(reason) => Outcome::Invalid { reason },
            })
            .collect()
    }
}
