//! Measuring GPU schedules: points of a [`GpuTemplate`] (or, through
//! [`CudaMeasurer::with_space`], of either CUDA template: [`CudaSpace`]) compiled, checked and
//! timed on the GPU the CUDA runtime uses.
//!
//! A batch is compiled in the tuning process on every core first: NVRTC assembles each
//! candidate into a CUBIN for the GPU's own architecture (`sm_XY`; see
//! [`crate::runtime::cubin`]), and ptxas's register count is remembered for the cost model's
//! features. Then each candidate in turn is run in a **child process**
//! ([`super::cuda_child`]): loaded, launched once on seeded random inputs with its output
//! checked against the expected one (computed once, on the CPU, in the tuning process), and
//! timed by [`CompiledKernel::timing`](crate::runtime::cuda::CompiledKernel::timing): a CUDA
//! graph of enough back-to-back launches to last 200 µs, so the host's launch rate does not
//! count. A candidate that does not compile, exceeds the device's limits, computes a wrong
//! result, runs longer than [`CudaMeasurer::max_seconds`] per launch, faults (an illegal
//! address: its child's CUDA context is lost), crashes its child or hangs past the timeout
//! is an [`Outcome::Invalid`]; the next candidate runs in a fresh child, and the search goes
//! on. The tuning process itself creates no CUDA context (unless there is no C compiler for
//! the expected output, see [`CudaMeasurer::with_space`]).
//!
//! Where the current executable cannot serve as the child (see
//! [`cuda_child`](super::cuda_child)), candidates run in process, as before the child
//! existed: a fault then leaves this process's CUDA context unusable.
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

use super::cuda_child::{Candidate, ChildOutcome, Runner, Task, WireImage};
use crate::codegen::cuda::{self as codegen, CudaSource};
use crate::ir::{bind, Kernel};
use crate::runtime::cubin::{self, Image};
use crate::runtime::cuda;
use crate::runtime::ptxas::PtxasReport;
use crate::runtime::{cpu, nvrtc};
use crate::template::cpu::CpuTemplate;
use crate::template::cuda::{CudaSchedule, CudaSpace};
use crate::template::gpu::{GpuSchedule, GpuTarget, GpuTemplate};
use crate::Error;
use std::path::PathBuf;
use tuner::{Config, Measurer, Outcome};

/// Measures points of a CUDA schedule space for one kernel at one shape.
pub struct CudaMeasurer {
    kernel: Kernel,
    shapes: Vec<Vec<usize>>,
    extents: Vec<usize>,
    space: CudaSpace,
    target: GpuTarget,
    /// Where the expected output came from (for messages).
    reference_source: &'static str,
    /// The folder holding the expected output for the child.
    dir: PathBuf,
    /// How candidates run: in a child process, or in process.
    runner: Runner,
    next_id: u64,
    /// Launches before timing.
    pub warmup: usize,
    /// Timed samples per candidate (each a CUDA graph of enough launches to last 200 µs).
    pub repeats: usize,
    /// A candidate whose single launch (after the checked one) takes longer than this is not
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
            .field("in_child", &matches!(self.runner, Runner::Child(_)))
            .finish_non_exhaustive()
    }
}

/// A candidate compiled for the GPU: its schedule, generated source and launch geometry, the
/// image the driver loads, and what ptxas reported (`None` for PTX).
#[derive(Clone, Debug)]
pub struct Built<S> {
    pub schedule: S,
    pub generated: CudaSource,
    pub image: Image,
    pub report: Option<PtxasReport>,
}

/// A candidate's schedule and source, or why it has none.
fn prepare(
    kernel: &Kernel,
    extents: &[usize],
    shapes: &[&[usize]],
    template: &GpuTemplate,
    target: &GpuTarget,
    config: &Config,
) -> Result<(GpuSchedule, CudaSource), String> {
    let schedule = template.decode(config)?;
    schedule.validate(kernel, extents)?;
    schedule.check_limits(kernel, target)?;
    let generated = codegen::generate(kernel, extents, shapes, &schedule);
    Ok((schedule, generated))
}

/// Compiles every candidate of `batch` to a CUBIN for `target` on all cores (NVRTC programs
/// are independent; the CUBINs land in NVRTC's caches) and remembers each one's register
/// count for the analytic features ([`cubin::remember`]); returns each candidate's schedule
/// or the reason it cannot run (does not decode, breaks a device limit, does not compile).
/// Needs NVRTC, not a GPU: this is what the tests run without one.
pub fn compile_batch(
    kernel: &Kernel,
    extents: &[usize],
    shapes: &[&[usize]],
    template: &GpuTemplate,
    target: &GpuTarget,
    batch: &[Config],
) -> Vec<Result<GpuSchedule, String>> {
    compile_simt(kernel, extents, shapes, template, target, batch)
        .into_iter()
        .map(|r| r.map(|b| b.schedule))
        .collect()
}

/// [`compile_batch`] with what each compile produced.
pub fn compile_simt(
    kernel: &Kernel,
    extents: &[usize],
    shapes: &[&[usize]],
    template: &GpuTemplate,
    target: &GpuTarget,
    batch: &[Config],
) -> Vec<Result<Built<GpuSchedule>, String>> {
    let built = compile_points(kernel, target, batch, &|config: &Config| {
        prepare(kernel, extents, shapes, template, target, config)
    });
    let fingerprint = kernel.fingerprint();
    for b in built.iter().flatten() {
        if let Some(report) = &b.report {
            let key = cubin::schedule_key(
                &fingerprint,
                extents,
                &format!("{:?}", b.schedule),
                &target.real_arch(),
            );
            cubin::remember(key, report.clone());
        }
    }
    built
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
    compile_space(kernel, extents, shapes, space, target, batch)
        .into_iter()
        .map(|r| r.map(|b| b.schedule))
        .collect()
}

/// [`compile_batch_space`] with what each compile produced.
pub fn compile_space(
    kernel: &Kernel,
    extents: &[usize],
    shapes: &[&[usize]],
    space: &CudaSpace,
    target: &GpuTarget,
    batch: &[Config],
) -> Vec<Result<Built<CudaSchedule>, String>> {
    match space {
        CudaSpace::Simt(t) => compile_simt(kernel, extents, shapes, t, target, batch)
            .into_iter()
            .map(|r| {
                r.map(|b| Built {
                    schedule: CudaSchedule::Simt(b.schedule),
                    generated: b.generated,
                    image: b.image,
                    report: b.report,
                })
            })
            .collect(),
        CudaSpace::TensorCore(_) | CudaSpace::Wgmma(_) => {
            compile_points(kernel, target, batch, &|config: &Config| {
                let schedule = space.decode(config)?;
                let generated = crate::template::cuda::generate(kernel, extents, shapes, &schedule);
                Ok((schedule, generated))
            })
        }
    }
}

/// What a point becomes before it is compiled: its schedule and source, or why not.
type Prepare<'a, S> = dyn Fn(&Config) -> Result<(S, CudaSource), String> + Sync + 'a;

/// Compiles the source `prepare` makes of each point on all cores.
fn compile_points<S: Clone + Send>(
    kernel: &Kernel,
    target: &GpuTarget,
    batch: &[Config],
    prepare: &Prepare<'_, S>,
) -> Vec<Result<Built<S>, String>> {
    let workers = std::thread::available_parallelism()
        .map_or(2, |n| n.get())
        .clamp(1, batch.len().max(1));
    let one = |config: &Config| -> Result<Built<S>, String> {
        let (schedule, generated) = prepare(config)?;
        let (image, report) =
            nvrtc::image(&kernel.name, &generated.source, &generated.entry, target).map_err(
                |e| match e {
                    Error::Compile { log, .. } => format!(
                        "does not compile: {}",
                        log.chars().take(2000).collect::<String>()
                    ),
                    other => other.to_string(),
                },
            )?;
        Ok(Built {
            schedule,
            generated,
            image,
            report,
        })
    };
    let mut results: Vec<Option<Result<Built<S>, String>>> = vec![None; batch.len()];
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
    /// Prepares a task: computes the expected output of seeded random inputs once — with the
    /// reference interpreter for small problems, above 2e8 flops with the CPU default
    /// schedule (which the test suite checks against the interpreter) or, without a C
    /// compiler, the GPU default schedule (in this process) — and writes it for the child
    /// processes that run the candidates (started at the first candidate).
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
        CudaMeasurer::build(kernel, shapes, space, true)
    }

    /// [`CudaMeasurer::with_space`] measuring in this process, without a child: a fault
    /// then leaves this process's CUDA context unusable (for tools that want that).
    pub fn in_process(
        kernel: &Kernel,
        shapes: &[Vec<usize>],
        space: CudaSpace,
    ) -> Result<CudaMeasurer, Error> {
        CudaMeasurer::build(kernel, shapes, space, false)
    }

    fn build(
        kernel: &Kernel,
        shapes: &[Vec<usize>],
        space: CudaSpace,
        isolated: bool,
    ) -> Result<CudaMeasurer, Error> {
        let (task, dir, extents, target, reference_source) = task(kernel, shapes, &space)?;
        Ok(CudaMeasurer {
            kernel: kernel.clone(),
            shapes: shapes.to_vec(),
            extents,
            space,
            target,
            reference_source,
            dir,
            runner: if isolated {
                Runner::new(task)
            } else {
                Runner::in_process(task)
            },
            next_id: 0,
            warmup: 2,
            repeats: 5,
            max_seconds: 1.0,
        })
    }

    /// Whether candidates run in a child process.
    pub fn isolated(&self) -> bool {
        matches!(self.runner, Runner::Child(_))
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

    /// Runs one compiled candidate (in the child) and turns the answer into an outcome.
    fn run_one(&mut self, built: Built<CudaSchedule>) -> Outcome {
        self.next_id += 1;
        let g = built.generated;
        let candidate = Candidate {
            id: self.next_id,
            source: g.source,
            entry: g.entry,
            grid: g.grid,
            block: g.block,
            shared_bytes: g.shared_bytes,
            tensor_maps: g.tensor_maps,
            image: WireImage::from(&built.image),
            schedule: format!("{:?}", built.schedule),
            warmup: self.warmup,
            repeats: self.repeats.max(1),
            max_seconds: self.max_seconds,
        };
        match self.runner.run(&candidate) {
            ChildOutcome::Measured(m) if !m.samples.is_empty() => {
                Outcome::Valid { samples: m.samples }
            }
            ChildOutcome::Measured(_) => Outcome::Invalid {
                reason: "no timings".into(),
            },
            ChildOutcome::Invalid(reason) | ChildOutcome::Unavailable(reason) => {
                Outcome::Invalid { reason }
            }
        }
    }
}

/// The task of a measurer: the expected output written to a fresh folder, and what the
/// measurer keeps (extents, target, where the expected output came from).
fn task(
    kernel: &Kernel,
    shapes: &[Vec<usize>],
    space: &CudaSpace,
) -> Result<(Task, PathBuf, Vec<usize>, GpuTarget, &'static str), Error> {
    let info = cuda::available().map_err(|reason| Error::DeviceUnavailable {
        device: "cuda".into(),
        reason,
    })?;
    let target = info.target();
    let refs: Vec<&[usize]> = shapes.iter().map(Vec::as_slice).collect();
    let extents = bind(kernel, &refs)?;
    let seed = super::task_seed(kernel);
    let data = super::random_inputs(kernel, shapes, seed);
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
    let dir = cpu::work_dir()?;
    let path = dir.join("expected.f32");
    let bytes: Vec<u8> = reference.iter().flat_map(|v| v.to_le_bytes()).collect();
    std::fs::write(&path, bytes)?;
    let task = Task {
        kernel: kernel.clone(),
        shapes: shapes.to_vec(),
        seed,
        expected: path,
        tolerance: super::tolerance(out_dtype),
        reference_source: reference_source.into(),
    };
    Ok((task, dir, extents, target, reference_source))
}

impl Measurer for CudaMeasurer {
    fn measure(&mut self, batch: &[Config]) -> Vec<Outcome> {
        let shapes: Vec<&[usize]> = self.shapes.iter().map(Vec::as_slice).collect();
        let built = compile_space(
            &self.kernel,
            &self.extents,
            &shapes,
            &self.space,
            &self.target,
            batch,
        );
        built
            .into_iter()
            .map(|b| match b {
                Ok(b) => self.run_one(b),
                Err(reason) => Outcome::Invalid { reason },
            })
            .collect()
    }
}

impl Drop for CudaMeasurer {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
