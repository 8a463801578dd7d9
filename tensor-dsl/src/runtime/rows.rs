//! Running kernels of several stages ([`crate::ir::Staged`]) with the row template
//! ([`crate::template::rows`]): on the CPU through the C compiler, on a GPU through NVRTC,
//! and on the reference interpreter when the kernel is not of the row form.
//!
//! [`crate::dispatch::call`] sends every kernel of several stages here.
//!
//! ```
//! use tensor_dsl::ir::parse_text;
//! use tensor_dsl::runtime::rows;
//! let k = parse_text("rowmax", "y[[i]] = max(x[[i, j]])", None).unwrap();
//! let x = [1.0f32, 5.0, 2.0, -1.0, -3.0, -2.0];
//! let mut y = [0.0f32; 2];
//! let shapes: [&[usize]; 2] = [&[2, 3], &[2]];
//! rows::run_cpu(&k, &[2, 3], &shapes, &[(&x).into(), Default::default()], (&mut y).into()).unwrap();
//! assert_eq!(y, [5.0, -1.0]);
//! ```

use super::cpu::{self, CpuError};
use crate::codegen::rows as gen;
use crate::ir::Kernel;
use crate::reference;
use crate::template::rows::{RowPlan, RowsCpuConfig};
use crate::tensor::{Data, DataMut};

/// Runs `kernel` on the CPU with the row template's heuristic knobs; the reference
/// interpreter when the kernel is not of the row form.
pub fn run_cpu(
    kernel: &Kernel,
    extents: &[usize],
    shapes: &[&[usize]],
    data: &[Data<'_>],
    out: DataMut<'_>,
) -> Result<(), CpuError> {
    let Ok(plan) = RowPlan::new(kernel, extents) else {
        reference::run(kernel, extents, shapes, data, out);
        return Ok(());
    };
    let config = RowsCpuConfig::heuristic(&plan);
    run_cpu_with(kernel, extents, shapes, data, out, &config)
}

/// [`run_cpu`] with given knobs.
pub fn run_cpu_with(
    kernel: &Kernel,
    extents: &[usize],
    shapes: &[&[usize]],
    data: &[Data<'_>],
    out: DataMut<'_>,
    config: &RowsCpuConfig,
) -> Result<(), CpuError> {
    let source = gen::generate_c(kernel, extents, shapes, config).map_err(|message| {
        CpuError::Other(crate::Error::Backend {
            kernel: kernel.name.clone(),
            message,
        })
    })?;
    cpu::run_source(kernel, shapes, data, out, &source)
}

/// Compiles (once per process) and queues `kernel` on the GPU with the row template's
/// heuristic knobs, on buffers already there (inputs in declaration order).
#[cfg(feature = "cuda")]
pub fn launch_cuda(
    kernel: &Kernel,
    extents: &[usize],
    shapes: &[&[usize]],
    inputs: &[&super::cuda::DeviceBuffer],
    output: &mut super::cuda::DeviceBuffer,
) -> Result<String, crate::Error> {
    use crate::template::rows::RowsGpuConfig;
    use std::collections::HashMap;
    use std::sync::{Arc, Mutex, OnceLock};
    type Compiled = Arc<super::cuda::CompiledKernel>;
    static CACHE: OnceLock<Mutex<HashMap<String, Compiled>>> = OnceLock::new();
    let backend = |message: String| crate::Error::Backend {
        kernel: kernel.name.clone(),
        message,
    };
    let plan = RowPlan::new(kernel, extents).map_err(|why| {
        backend(format!(
            "this kernel of several stages is not of the row form ({why}); run it on the CPU or the reference device"
        ))
    })?;
    let config = RowsGpuConfig::heuristic(&plan);
    let source = gen::generate_cuda(kernel, extents, shapes, &config).map_err(backend)?;
    let key = source.source.clone();
    let cached = CACHE
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(&key)
        .cloned();
    let compiled = match cached {
        Some(c) => c,
        None => {
            let c = super::cuda::compile_source(kernel, shapes, source)?;
            CACHE
                .get_or_init(Default::default)
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(key, c.clone());
            c
        }
    };
    compiled.launch(inputs, output)?;
    Ok(compiled.describe())
}
