//! Per-call options: which device runs the kernel.
//!
//! The device is, in this order: the one set with [`Options::device`], the value of
//! `TENSOR_DSL_DEVICE` (`cuda`/`gpu`, `cpu`, `reference`), else CUDA when a GPU and the CUDA
//! libraries are present, else the CPU (which itself falls back to the reference
//! interpreter when there is no C compiler).
//!
//! ```
//! use tensor_dsl::{Device, Options};
//! let opts = Options::new().device(Device::Reference);
//! assert_eq!(opts.device_choice(), Some(Device::Reference));
//! assert_eq!(Device::parse("GPU")?, Device::Cuda);
//! // Whether CUDA can run here, and why not:
//! if let Err(reason) = Device::Cuda.availability() {
//!     println!("no CUDA: {reason}");
//! }
//! # Ok::<(), tensor_dsl::Error>(())
//! ```

use crate::Error;
use std::fmt;

/// Where a kernel runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Device {
    /// Generated CUDA C, compiled with NVRTC and launched through the CUDA driver (device 0,
    /// or `TENSOR_DSL_CUDA_DEVICE`). Host tensors are copied to the GPU and back per call.
    Cuda,
    /// Generated C, compiled with the system C compiler (OpenMP), loaded as a shared object.
    Cpu,
    /// The reference interpreter: slow and obviously right.
    Reference,
}

impl Device {
    /// Parses the value of `TENSOR_DSL_DEVICE`.
    pub fn parse(s: &str) -> Result<Device, Error> {
        match s.trim().to_ascii_lowercase().as_str() {
            "cpu" => Ok(Device::Cpu),
            "reference" | "ref" => Ok(Device::Reference),
            "cuda" | "gpu" => Ok(Device::Cuda),
            _ => Err(Error::InvalidSetting {
                name: "TENSOR_DSL_DEVICE".into(),
                value: s.into(),
                expected: "one of cuda (or gpu), cpu, reference".into(),
            }),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Device::Cuda => "cuda",
            Device::Cpu => "cpu",
            Device::Reference => "reference",
        }
    }

    /// `Ok` when kernels can run on this device here, else why not (for CUDA: no driver, no
    /// GPU, no NVRTC, a driver older than CUDA 13, or a build without the `cuda` feature).
    /// The CPU is always available: without a C compiler it falls back to the reference
    /// interpreter. Detection runs once per process.
    pub fn availability(self) -> Result<(), String> {
        match self {
            Device::Cuda => cuda_availability(),
            Device::Cpu | Device::Reference => Ok(()),
        }
    }
}

#[cfg(feature = "cuda")]
fn cuda_availability() -> Result<(), String> {
    crate::runtime::cuda::available().map(|_| ())
}

#[cfg(not(feature = "cuda"))]
fn cuda_availability() -> Result<(), String> {
    Err(crate::runtime::NO_CUDA_FEATURE.into())
}

impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// When a call may tune: never (the default: a first call never pauses for minutes unless
/// asked to), at the first call of each shape that has no record (the call waits for the
/// tuning), or in the background (the call runs the default at once; a background thread
/// tunes within the budget, saves the records and later calls use the result).
///
/// Either way a (kernel, shapes, dtype, target) is tuned once, even when several threads or
/// processes make its first call together: see [`crate::tune_once`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum TunePolicy {
    #[default]
    Off,
    FirstCall,
    Background,
}

impl TunePolicy {
    /// Parses `off` (or `0`), `first-call` and `background`.
    pub fn parse(s: &str) -> Result<TunePolicy, Error> {
        match s.trim() {
            "off" | "0" => Ok(TunePolicy::Off),
            "first-call" => Ok(TunePolicy::FirstCall),
            "background" => Ok(TunePolicy::Background),
            other => Err(Error::InvalidSetting {
                name: "TENSOR_DSL_TUNE".into(),
                value: other.into(),
                expected: "off, first-call or background".into(),
            }),
        }
    }
}

/// Options for a call made through `my_kernel::with(&opts)`: a builder. Every setting has
/// an environment variable, which overrides it when set (so a deployed program can be
/// steered without a rebuild):
///
/// | builder | variable | values (default) |
/// |---|---|---|
/// | [`device`](Options::device) | `TENSOR_DSL_DEVICE` | `cuda` (or `gpu`), `cpu`, `reference` (CUDA if usable, else CPU) |
/// | [`tune`](Options::tune) | `TENSOR_DSL_TUNE` | `off`, `first-call`, `background` (`off`) |
/// | [`trials`](Options::trials) | `TENSOR_DSL_TRIALS` | a whole number (64; 0: the cost model's pick, unmeasured) |
/// | [`tune_seconds`](Options::tune_seconds) | `TENSOR_DSL_TUNE_SECONDS` | a positive number (120) |
/// | [`strategy`](Options::strategy) | `TENSOR_DSL_STRATEGY` | a `tuner` strategy name, or `default` (`default`: `droplet` on the CPU, `combined` on CUDA) |
/// | [`cache_dir`](Options::cache_dir) | `TENSOR_DSL_CACHE` | a folder (`$XDG_CACHE_HOME/tensor-dsl` or `~/.cache/tensor-dsl`) |
///
/// ```
/// use tensor_dsl::{Device, Options, TunePolicy};
/// let opts = Options::new()
///     .device(Device::Cpu)
///     .tune(TunePolicy::FirstCall)
///     .trials(32)
///     .tune_seconds(60.0)
///     .strategy("droplet")
///     .cache_dir("/tmp/my-app-kernels");
/// assert_eq!(opts.device_choice(), Some(Device::Cpu));
/// ```
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Options {
    device: Option<Device>,
    tune: Option<TunePolicy>,
    trials: Option<usize>,
    tune_seconds: Option<f64>,
    strategy: Option<String>,
    cache_dir: Option<std::path::PathBuf>,
}

impl Options {
    /// Defaults: the device comes from `TENSOR_DSL_DEVICE`, else the best available.
    pub fn new() -> Self {
        Self::default()
    }

    /// Runs on this device, whatever `TENSOR_DSL_DEVICE` says.
    pub fn device(mut self, device: Device) -> Self {
        self.device = Some(device);
        self
    }

    /// Whether a call may tune (see [`TunePolicy`]).
    pub fn tune(mut self, policy: TunePolicy) -> Self {
        self.tune = Some(policy);
        self
    }

    /// The measurement budget of first-call tuning; 0 uses the cost model's pick (learned
    /// from the records at hand, see [`crate::transfer`]) without measuring.
    pub fn trials(mut self, trials: usize) -> Self {
        self.trials = Some(trials);
        self
    }

    /// The wall-clock budget of first-call tuning, in seconds.
    pub fn tune_seconds(mut self, seconds: f64) -> Self {
        self.tune_seconds = Some(seconds);
        self
    }

    /// The search strategy of first-call tuning (`tuner::strategy::STRATEGY_NAMES`).
    pub fn strategy(mut self, name: &str) -> Self {
        self.strategy = Some(name.to_string());
        self
    }

    /// Where calls with these options find and save tuning records and compiled objects
    /// (the user cache). A shape's decision is made once per process, with the folder of
    /// its first call.
    pub fn cache_dir(mut self, dir: impl Into<std::path::PathBuf>) -> Self {
        self.cache_dir = Some(dir.into());
        self
    }

    /// The folder set with [`Options::cache_dir`], if any (`TENSOR_DSL_CACHE` overrides it).
    pub fn cache_dir_choice(&self) -> Option<&std::path::Path> {
        self.cache_dir.as_deref()
    }

    /// The tuning policy and options these options give, each overridden by its variable.
    pub fn tune_settings(&self) -> Result<(TunePolicy, crate::autotune::TuneOptions), Error> {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
        let policy = match var("TENSOR_DSL_TUNE") {
            Some(v) => TunePolicy::parse(&v)?,
            None => self.tune.unwrap_or_default(),
        };
        let number = |name: &str| -> Result<Option<f64>, Error> {
            match var(name) {
                None => Ok(None),
                Some(v) => v
                    .trim()
                    .parse::<f64>()
                    .ok()
                    .filter(|x| *x > 0.0 && x.is_finite())
                    .map(Some)
                    .ok_or(Error::InvalidSetting {
                        name: name.into(),
                        value: v,
                        expected: "a positive number".into(),
                    }),
            }
        };
        let mut opts = crate::autotune::TuneOptions::default();
        // 0 trials is a real budget: the cost model's pick, unmeasured.
        let trials = match var("TENSOR_DSL_TRIALS") {
            None => None,
            Some(v) => Some(
                v.trim()
                    .parse::<usize>()
                    .map_err(|_| Error::InvalidSetting {
                        name: "TENSOR_DSL_TRIALS".into(),
                        value: v.clone(),
                        expected:
                            "a whole number of measurements (0: the model's pick, unmeasured)"
                                .into(),
                    })?,
            ),
        };
        if let Some(t) = trials.or(self.trials) {
            opts.trials = t;
        }
        opts.seconds = Some(
            number("TENSOR_DSL_TUNE_SECONDS")?
                .or(self.tune_seconds)
                .unwrap_or(120.0),
        );
        if let Some(s) = var("TENSOR_DSL_STRATEGY").or_else(|| self.strategy.clone()) {
            let s = s.trim().to_string();
            if s != crate::autotune::DEFAULT_STRATEGY_NAME
                && !tuner::strategy::STRATEGY_NAMES.contains(&s.as_str())
            {
                return Err(Error::InvalidSetting {
                    name: "TENSOR_DSL_STRATEGY".into(),
                    value: s,
                    expected: format!(
                        "default or one of {}",
                        tuner::strategy::STRATEGY_NAMES.join(", ")
                    ),
                });
            }
            opts.strategy = s;
        }
        Ok((policy, opts))
    }

    /// The device set with [`Options::device`], if any.
    pub fn device_choice(&self) -> Option<Device> {
        self.device
    }

    /// The device a call with these options runs on: the explicit choice, else
    /// `TENSOR_DSL_DEVICE`, else CUDA when [`Device::availability`] says it can run, else the
    /// CPU. An explicit or environment choice is returned even when that device is
    /// unavailable; the call then fails with [`Error::DeviceUnavailable`].
    pub fn resolve_device(&self) -> Result<Device, Error> {
        if let Some(d) = self.device {
            return Ok(d);
        }
        match std::env::var("TENSOR_DSL_DEVICE") {
            Ok(v) if !v.trim().is_empty() => Device::parse(&v),
            _ if Device::Cuda.availability().is_ok() => Ok(Device::Cuda),
            _ => Ok(Device::Cpu),
        }
    }
}
