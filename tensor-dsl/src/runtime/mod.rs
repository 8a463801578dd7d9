//! Runtimes that build and run generated code.
pub mod cpu;
#[cfg(feature = "cuda")]
pub mod cuda;
#[cfg(feature = "cuda")]
pub mod nvrtc;
pub mod object_cache;
pub mod ptxas;

/// Why CUDA is unavailable in a build without the `cuda` feature.
pub const NO_CUDA_FEATURE: &str =
    "tensor-dsl was built without the `cuda` feature; enable it (it is on by default) to run on a GPU";

/// Checks that the argument buffers are exactly what `shapes` says: one shape and one data
/// slot per parameter, each input's length the product of its shape, the output's too.
/// Generated code trusts this (it indexes without bounds checks), so every runtime calls it
/// before launching anything.
pub(crate) fn check_buffers(
    kernel: &crate::ir::Kernel,
    shapes: &[&[usize]],
    data: &[&[f32]],
    out: &[f32],
) -> Result<(), String> {
    let n = kernel.params.len();
    if shapes.len() != n || data.len() != n {
        return Err(format!(
            "{} shapes and {} data slots for {n} parameters",
            shapes.len(),
            data.len()
        ));
    }
    for (p, param) in kernel.params.iter().enumerate() {
        let expected: usize = shapes[p].iter().product();
        let len = if param.is_output {
            out.len()
        } else {
            data[p].len()
        };
        if len != expected {
            return Err(format!(
                "tensor `{}` has {len} elements, its shape needs {expected}",
                param.name
            ));
        }
    }
    Ok(())
}
