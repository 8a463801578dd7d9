//! Per-call options: which device runs the kernel.
//!
//! ```
//! use tensor_dsl::{Device, Options};
//! let opts = Options::new().device(Device::Reference);
//! assert_eq!(opts.device_choice(), Some(Device::Reference));
//! ```

use crate::Error;
use std::fmt;

/// Where a kernel runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Device {
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
            "cuda" | "gpu" => Err(Error::DeviceUnavailable {
                device: "cuda".into(),
                reason: "this build has no CUDA backend yet; use cpu or reference".into(),
            }),
            _ => Err(Error::InvalidSetting {
                name: "TENSOR_DSL_DEVICE".into(),
                value: s.into(),
                expected: "one of cpu, reference, cuda".into(),
            }),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Device::Cpu => "cpu",
            Device::Reference => "reference",
        }
    }
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

    /// The device a call with these options runs on.
    pub fn resolve_device(&self) -> Result<Device, Error> {
        if let Some(d) = self.device {
            return Ok(d);
        }
        match std::env::var("TENSOR_DSL_DEVICE") {
            Ok(v) if !v.trim().is_empty() => Device::parse(&v),
            _ => Ok(Device::Cpu),
        }
    }
}
