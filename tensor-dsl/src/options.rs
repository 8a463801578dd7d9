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

/// Options for a call made through `my_kernel::with(&opts)`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Options {
    device: Option<Device>,
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
