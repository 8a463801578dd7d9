//! Runtimes that build and run generated code.
pub mod cpu;
pub mod cubin;
#[cfg(feature = "cuda")]
pub mod cuda;
#[cfg(feature = "cuda")]
pub mod graph_timing;
pub mod lru;
#[cfg(feature = "cuda")]
pub mod nvrtc;
pub mod object_cache;
pub mod ptxas;
pub mod rows;
pub mod sass;
#[cfg(feature = "cuda")]
pub mod tensor_map;

/// Why CUDA is unavailable in a build without the `cuda` feature.
pub const NO_CUDA_FEATURE: &str =
    "tensor-dsl was built without the `cuda` feature; enable it (it is on by default) to run on a GPU";

/// Checks that the argument buffers are exactly what `shapes` says: one shape and one data
/// slot per parameter, each input's length the product of its shape, the output's too, and
/// each buffer's element type the one the kernel declares for it. Generated code trusts
/// this (it indexes without bounds checks and reads the declared types), so every runtime
/// calls it before launching anything.
pub(crate) fn check_buffers(
    kernel: &crate::ir::Kernel,
    shapes: &[&[usize]],
    data: &[crate::Data<'_>],
    out: &crate::DataMut<'_>,
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
        let (len, dtype) = if param.is_output {
            (out.len(), out.dtype())
        } else {
            (data[p].len(), data[p].dtype())
        };
        if dtype != param.dtype {
            return Err(format!(
                "tensor `{}` holds {dtype} elements, the kernel declares {}",
                param.name, param.dtype
            ));
        }
        if len != expected {
            return Err(format!(
                "tensor `{}` has {len} elements, its shape needs {expected}",
                param.name
            ));
        }
    }
    Ok(())
}
