//! Timing queued GPU work — our kernels, cuBLAS, cuDNN — without timing the host.
//!
//! A kernel that runs for 5 µs takes about as long to *launch* from the host. Timing a run of
//! back-to-back launches between two CUDA events then measures the host's launch rate as
//! much as the kernel: the GPU idles between launches whenever the host falls behind. So a
//! [`Timer`] times what the GPU does with the host out of the way:
//!
//! - **A CUDA graph of N launches** ([`Method::Graph`]): the work is captured once from its
//!   stream (`cuStreamBeginCapture` … `cuStreamEndCapture`, through `cudarc`'s graph API)
//!   and each sample replays the graph between two events: one host call queues all N
//!   launches, and the GPU runs them back to back.
//! - **A leading spin kernel** ([`Method::Spin`]), where the work cannot be captured (a
//!   library call that synchronizes or allocates inside): a one-thread kernel that spins on
//!   `%globaltimer` holds the stream while the host queues the start event, the N launches
//!   and the end event behind it, so the events see only the GPU running the launches.
//! - Plain back-to-back launches ([`Method::Events`]) only when neither is possible (the
//!   spin kernel does not compile); the reason is in [`Timer::note`].
//!
//! N is chosen so that one sample lasts at least [`TimingPlan::min_sample_seconds`]
//! (from the warm-up launches' time), at most [`TimingPlan::max_launches`]; a sample is the
//! seconds per launch. The measurer and the bench time everything through this one helper
//! ([`crate::runtime::cuda::CompiledKernel::time`] for generated kernels; `bench` for the
//! cuBLAS/cuDNN baselines beside them).
//!
//! **Streams.** The work must be queued on the stream given to [`Timer::new`] (the closure
//! receives it). Capturing a stream captures *every* launch queued on it meanwhile, from any
//! thread, so [`CompiledKernel::time`](crate::runtime::cuda::CompiledKernel::time) times on
//! a private stream ordered after the runtime's (a user's other threads keep the runtime's
//! stream); a caller that times on the runtime's own stream ([`crate::runtime::cuda::stream`],
//! as the bench does for library baselines bound to it) must not queue work on it from
//! other threads meanwhile.
//!
//! Not yet run on a GPU (none was available to this work): the code paths are compiled and
//! their failure handling reviewed, the numbers unmeasured.

use super::cuda::{self, context_and_stream, driver_error, guarded};
use crate::Error;
use cudarc::driver::sys::{CUevent_flags, CUgraphInstantiate_flags, CUstreamCaptureMode};
use cudarc::driver::{
    CudaContext, CudaEvent, CudaFunction, CudaGraph, CudaStream, LaunchConfig, PushKernelArg,
};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

/// How much work a [`Timer`] queues per sample.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TimingPlan {
    /// Untimed launches first (at least 1: they also calibrate N).
    pub warmup: usize,
    /// A sample lasts at least this long (N launches of the work).
    pub min_sample_seconds: f64,
    /// ... with at most this many launches.
    pub max_launches: usize,
}

impl Default for TimingPlan {
    /// 2 warm-up launches; samples of at least 200 µs and at most 1000 launches.
    fn default() -> Self {
        TimingPlan {
            warmup: 2,
            min_sample_seconds: 200e-6,
            max_launches: 1000,
        }
    }
}

/// How a [`Timer`] keeps the host out of its samples (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    /// A CUDA graph of N launches, replayed per sample.
    Graph,
    /// N launches queued behind a spin kernel.
    Spin,
    /// N launches queued back to back (host launch latency may count).
    Events,
}

impl std::fmt::Display for Method {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Method::Graph => "graph",
            Method::Spin => "spin",
            Method::Events => "events",
        })
    }
}

/// The work timed: queues one run on the stream it is given.
pub type Work<'a> = Box<dyn FnMut(&CudaStream) -> Result<(), Error> + 'a>;

/// Times one piece of queued work (see the module docs). Made with [`Timer::new`], which
/// warms the work up, picks N and captures the graph; each [`Timer::samples`] call then
/// returns seconds per launch.
pub struct Timer<'a> {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    work: Work<'a>,
    launches: usize,
    graph: Option<CudaGraph>,
    method: Method,
    /// Seconds per launch of the warm-up (the first, untimed runs included).
    once: f64,
    /// Host seconds to queue one launch (for the spin kernel's length).
    host_per_launch: f64,
    note: Option<String>,
}

/// Events, launches and synchronization on `stream`, errors through the runtime (a sticky
/// error marks its context lost).
fn event(ctx: &Arc<CudaContext>) -> Result<CudaEvent, Error> {
    ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
        .map_err(|e| driver_error("creating a CUDA event", e))
}

fn record(ev: &CudaEvent, stream: &CudaStream) -> Result<(), Error> {
    ev.record(stream)
        .map_err(|e| driver_error("recording a CUDA event", e))
}

fn seconds_between(start: &CudaEvent, end: &CudaEvent) -> Result<f64, Error> {
    start
        .elapsed_ms(end)
        .map(|ms| f64::from(ms) * 1e-3)
        .map_err(|e| driver_error("running the timed work", e))
}

fn sync(stream: &CudaStream, what: &str) -> Result<(), Error> {
    stream.synchronize().map_err(|e| driver_error(what, e))
}

/// The spin kernel: one thread waiting `ns` nanoseconds of `%globaltimer`.
const SPIN_SOURCE: &str = r#"extern "C" __global__ void td_spin(unsigned long long ns) {
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    do {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    } while (now - start < ns);
}
"#;

/// The spin kernel, compiled and loaded once per process (or why it cannot be).
fn spin_kernel(ctx: &Arc<CudaContext>) -> Result<&'static CudaFunction, String> {
    static SPIN: OnceLock<Result<CudaFunction, String>> = OnceLock::new();
    SPIN.get_or_init(|| {
        let info = cuda::available()?;
        let (image, _) = super::nvrtc::image("td_spin", SPIN_SOURCE, "td_spin", &info.target())
            .map_err(|e| e.to_string())?;
        guarded("loading the spin kernel", || {
            let data = match &image {
                super::cubin::Image::Cubin { bytes, .. } => {
                    cudarc::nvrtc::Ptx::from_binary(bytes.clone())
                }
                super::cubin::Image::Ptx { text, .. } => cudarc::nvrtc::Ptx::from_src(text.clone()),
            };
            let module = ctx.load_module(data).map_err(|e| format!("{e:?}"))?;
            module
                .load_function("td_spin")
                .map_err(|e| format!("{e:?}"))
        })
    })
    .as_ref()
    .map_err(Clone::clone)
}

/// The longest a spin kernel holds the stream, seconds.
const MAX_SPIN_SECONDS: f64 = 0.05;
/// With a spin kernel, at most this many launches per sample (the driver's launch queue
/// holds about a thousand before the host blocks).
const MAX_SPIN_LAUNCHES: usize = 500;

impl<'a> Timer<'a> {
    /// Prepares to time `work` on `stream` (`None`: the runtime's stream): runs it
    /// `plan.warmup` times (errors inside it, a fault included, are reported here), picks
    /// N, and captures N runs into a CUDA graph — or, if capturing fails, prepares the spin
    /// kernel instead ([`Timer::note`] says why).
    pub fn new(
        stream: Option<Arc<CudaStream>>,
        plan: &TimingPlan,
        mut work: Work<'a>,
    ) -> Result<Timer<'a>, Error> {
        let (ctx, main) = context_and_stream()?;
        let stream = stream.unwrap_or(main);
        sync(&stream, "waiting for earlier work")?;
        let warmup = plan.warmup.max(1);
        let (start, end) = (event(&ctx)?, event(&ctx)?);
        record(&start, &stream)?;
        let host = Instant::now();
        for _ in 0..warmup {
            work(&stream)?;
        }
        let host_per_launch = host.elapsed().as_secs_f64() / warmup as f64;
        record(&end, &stream)?;
        sync(&stream, "running the warm-up launches")?;
        let once = seconds_between(&start, &end)? / warmup as f64;
        let launches = if once > 0.0 {
            // (Less a hair: event times are `f32` milliseconds.)
            (plan.min_sample_seconds / once - 1e-3).ceil() as usize
        } else {
            plan.max_launches
        }
        .clamp(1, plan.max_launches.max(1));
        let mut timer = Timer {
            ctx,
            stream,
            work,
            launches,
            graph: None,
            method: Method::Graph,
            once,
            host_per_launch,
            note: None,
        };
        match timer.capture() {
            Ok(graph) => timer.graph = Some(graph),
            Err(reason) => {
                // The capture may have left errors behind: a sticky one ends the timing.
                sync(&timer.stream, "after a failed graph capture")?;
                timer.fall_back(format!("no CUDA graph ({reason})"));
            }
        }
        Ok(timer)
    }

    /// Captures N runs of the work into a graph, uploaded and ready.
    fn capture(&mut self) -> Result<CudaGraph, String> {
        let stream = Arc::clone(&self.stream);
        stream
            .begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
            .map_err(|e| format!("cuStreamBeginCapture: {e:?}"))?;
        let mut queued = Ok(());
        for _ in 0..self.launches {
            queued = (self.work)(&stream);
            if queued.is_err() {
                break;
            }
        }
        // Always end the capture, so the stream leaves capture mode.
        let ended = stream.end_capture(CUgraphInstantiate_flags(0));
        queued.map_err(|e| format!("the work failed while captured: {e}"))?;
        let graph = ended
            .map_err(|e| format!("cuStreamEndCapture: {e:?}"))?
            .ok_or("the capture recorded nothing")?;
        graph
            .upload()
            .map_err(|e| format!("cuGraphUpload: {e:?}"))?;
        Ok(graph)
    }

    /// Switches to the spin kernel (or plain events without it), noting why.
    fn fall_back(&mut self, why: String) {
        self.graph = None;
        match spin_kernel(&self.ctx) {
            Ok(_) => {
                self.method = Method::Spin;
                self.launches = self.launches.min(MAX_SPIN_LAUNCHES);
                self.note = Some(format!("{why}; a spin kernel leads each sample"));
            }
            Err(spin) => {
                self.method = Method::Events;
                self.note = Some(format!(
                    "{why}; no spin kernel either ({spin}): host launch latency may count"
                ));
            }
        }
    }

    /// Holds the stream for `seconds` with the spin kernel (nothing without one).
    fn spin(&self, seconds: f64) -> Result<(), Error> {
        let Ok(f) = spin_kernel(&self.ctx) else {
            return Ok(());
        };
        let ns = (seconds.clamp(10e-6, MAX_SPIN_SECONDS) * 1e9) as u64;
        let cfg = LaunchConfig {
            grid_dim: (1, 1, 1),
            block_dim: (1, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut launch = self.stream.launch_builder(f);
        launch.arg(&ns);
        // SAFETY: `td_spin` takes one `unsigned long long`, pushed above; it touches no
        // memory.
        unsafe { launch.launch(cfg) }
            .map(|_| ())
            .map_err(|e| driver_error("launching the spin kernel", e))
    }

    /// `count` samples, seconds per launch each (queued together, then read).
    pub fn samples(&mut self, count: usize) -> Result<Vec<f64>, Error> {
        if count == 0 {
            return Ok(Vec::new());
        }
        let mut marks = Vec::with_capacity(count);
        match &self.graph {
            Some(graph) => {
                // The host queues every sample in microseconds; a short spin (or, without
                // the kernel, one untimed replay) keeps the GPU from starting the first one
                // before the host has queued it.
                if spin_kernel(&self.ctx).is_ok() {
                    self.spin(50e-6)?;
                } else {
                    graph
                        .launch()
                        .map_err(|e| driver_error("replaying the CUDA graph", e))?;
                }
                for _ in 0..count {
                    let (start, end) = (event(&self.ctx)?, event(&self.ctx)?);
                    record(&start, &self.stream)?;
                    graph
                        .launch()
                        .map_err(|e| driver_error("replaying the CUDA graph", e))?;
                    record(&end, &self.stream)?;
                    marks.push((start, end));
                }
            }
            None => {
                for _ in 0..count {
                    // Long enough for the host to queue this sample behind it.
                    let queueing = self.host_per_launch * self.launches as f64;
                    if self.method == Method::Spin {
                        self.spin(2.0 * queueing + 20e-6)?;
                    }
                    let (start, end) = (event(&self.ctx)?, event(&self.ctx)?);
                    record(&start, &self.stream)?;
                    for _ in 0..self.launches {
                        (self.work)(&self.stream)?;
                    }
                    record(&end, &self.stream)?;
                    marks.push((start, end));
                }
            }
        }
        sync(&self.stream, "running the timed work")?;
        marks
            .iter()
            .map(|(s, e)| seconds_between(s, e).map(|t| t / self.launches as f64))
            .collect()
    }

    /// Launches per sample (N).
    pub fn launches(&self) -> usize {
        self.launches
    }

    /// How the samples are taken.
    pub fn method(&self) -> Method {
        self.method
    }

    /// Seconds per launch of the warm-up (host latency may count: a first estimate).
    pub fn warmup_seconds(&self) -> f64 {
        self.once
    }

    /// Why the timer does not use a CUDA graph, if it does not.
    pub fn note(&self) -> Option<&str> {
        self.note.as_deref()
    }
}

/// A private stream for [`CompiledKernel::time`](crate::runtime::cuda::CompiledKernel::time):
/// captures on it do not take in other threads' work on the runtime's stream.
pub(crate) fn timing_stream() -> Result<Arc<CudaStream>, Error> {
    static STREAM: OnceLock<Result<Arc<CudaStream>, String>> = OnceLock::new();
    let (_, main) = context_and_stream()?;
    STREAM
        .get_or_init(|| main.fork().map_err(|e| format!("{e:?}")))
        .clone()
        .map_err(|message| Error::Device {
            device: "cuda".into(),
            message: format!("creating the timing stream: {message}"),
        })
}

/// Orders `after` behind the work queued so far on `before`.
pub(crate) fn order(after: &CudaStream, before: &CudaStream) -> Result<(), Error> {
    after
        .join(before)
        .map_err(|e| driver_error("ordering two CUDA streams", e))
}
