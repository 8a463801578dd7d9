//! Measurers: time schedule candidates for the tuner, verified against the reference.
pub mod cpu;
#[cfg(feature = "cuda")]
pub mod cuda;
#[cfg(feature = "cuda")]
pub mod cuda_child;

use crate::ir::{DType, Kernel};
use crate::tensor::{Buffer, Data};

/// Deterministic inputs in [-1, 1) for every parameter, by parameter id (the output's slot
/// is empty), drawn with xorshift64 from `seed` and rounded to each parameter's element
/// type: the same values on every machine, without a random-number dependency. Shared by
/// the measurers, the CLI's `verify` and the bench.
pub fn random_inputs(kernel: &Kernel, shapes: &[Vec<usize>], seed: u64) -> Vec<Buffer> {
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15 ^ seed;
    if state == 0 {
        state = 1;
    }
    kernel
        .params
        .iter()
        .zip(shapes)
        .map(|(param, shape)| {
            if param.is_output {
                return Buffer::zeros(param.dtype, 0);
            }
            let values: Vec<f32> = (0..shape.iter().product::<usize>())
                .map(|_| {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    (state >> 40) as f32 / (1u64 << 23) as f32 - 1.0
                })
                .collect();
            Buffer::from_f32(param.dtype, &values)
        })
        .collect()
}

/// Above this many flops the expected output comes from the compiled CPU default schedule
/// rather than the reference interpreter (about 0.1 GFLOPS: seconds per check otherwise).
const INTERPRETER_FLOPS: f64 = 2e8;

/// The inputs a measurer checks and times candidates on: [`random_inputs`] seeded by
/// [`task_seed`].
pub(crate) fn task_inputs(kernel: &Kernel, shapes: &[Vec<usize>]) -> Vec<Buffer> {
    random_inputs(kernel, shapes, task_seed(kernel))
}

/// The seed of a measurer's inputs: the kernel's fingerprint.
pub(crate) fn task_seed(kernel: &Kernel) -> u64 {
    u64::from_str_radix(&kernel.fingerprint(), 16).unwrap_or(1)
}

/// The output every candidate must produce on `data` (by parameter id), as `f32` values of
/// the output's element type, and where it came from: the reference interpreter for small
/// problems, above 2e8 flops the CPU schedule `cpu_default()` (the default, which the test
/// suite checks against the interpreter). `Ok(Err(reason))` when that needs a C compiler and
/// there is none.
pub(crate) fn expected_output(
    kernel: &Kernel,
    extents: &[usize],
    shapes: &[&[usize]],
    data: &[Data<'_>],
    cpu_default: impl FnOnce() -> Result<crate::template::cpu::CpuConfig, String>,
) -> Result<Result<(Vec<f32>, &'static str), String>, crate::Error> {
    let mut out = Buffer::zeros(
        kernel.params[kernel.output].dtype,
        shapes[kernel.output].iter().product(),
    );
    if kernel.flops(extents) <= INTERPRETER_FLOPS {
        crate::reference::run(kernel, extents, shapes, data, out.view_mut());
        return Ok(Ok((out.to_f32(), "the reference interpreter")));
    }
    let default = cpu_default().map_err(|message| crate::Error::Backend {
        kernel: kernel.name.clone(),
        message,
    })?;
    match crate::runtime::cpu::run_with(kernel, extents, shapes, data, out.view_mut(), &default) {
        Ok(()) => Ok(Ok((out.to_f32(), "the CPU default schedule"))),
        Err(crate::runtime::cpu::CpuError::Other(e)) => Err(e),
        Err(crate::runtime::cpu::CpuError::NoCompiler(reason)) => Ok(Err(reason)),
    }
}

/// The relative tolerance of [`check_output_within`] for an output of element type `dtype`:
/// 1e-3, or two units in the last place of a half-precision type (the candidate and the
/// reference may round a sum that lies near a tie to neighbouring values).
pub fn tolerance(dtype: DType) -> f32 {
    match dtype {
        DType::F32 => 1e-3,
        DType::F16 => 2.0 * 2f32.powi(-10),
        DType::BF16 => 2.0 * 2f32.powi(-7),
    }
}

/// Whether one output element `got` matches the expected `want`: within `tol` relative
/// (`tol` absolute below magnitude 1), NaN for NaN, an infinity only for the same infinity
/// (`inf - inf` is NaN, and a bound of `tol * inf` would take any value).
pub fn matches(got: f32, want: f32, tol: f32) -> bool {
    if got.is_infinite() || want.is_infinite() {
        got == want
    } else {
        (got.is_nan() && want.is_nan()) || (got - want).abs() <= tol * want.abs().max(1.0)
    }
}

/// Checks a candidate's output against the expected one: every element within 1e-3 relative
/// (1e-3 absolute below magnitude 1), NaN only where NaN is expected, an infinity only where
/// the same infinity is expected (max pooling's windows wholly in the padding are −∞). The
/// message names the first element that differs.
pub fn check_output(got: &[f32], want: &[f32]) -> Result<(), String> {
    check_output_within(got, want, 1e-3)
}

/// [`check_output`] with relative tolerance `tol` (see [`tolerance`]).
pub fn check_output_within(got: &[f32], want: &[f32], tol: f32) -> Result<(), String> {
    if got.len() != want.len() {
        return Err(format!(
            "output has {} elements, expected {}",
            got.len(),
            want.len()
        ));
    }
    for (n, (&g, &w)) in got.iter().zip(want).enumerate() {
        if !matches(g, w, tol) {
            return Err(format!("wrong result: element {n} is {g}, expected {w}"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::check_output;

    #[test]
    fn output_check_tolerates_rounding_and_names_the_first_difference() {
        assert!(check_output(&[1.0, 1000.0], &[1.0005, 1000.9]).is_ok());
        let e = check_output(&[1.0, 2.0, 3.0], &[1.0, 2.01, 4.0]).unwrap_err();
        assert!(e.contains("element 1"), "{e}");
        assert!(check_output(&[f32::NAN], &[1.0]).is_err());
        assert!(check_output(&[f32::NAN], &[f32::NAN]).is_ok());
        // Equal infinities match (a pooling window wholly in the padding is −∞); others not.
        let inf = f32::INFINITY;
        assert!(check_output(&[-inf, inf], &[-inf, inf]).is_ok());
        assert!(check_output(&[inf], &[-inf]).is_err());
        assert!(check_output(&[inf], &[f32::MAX]).is_err());
        assert!(check_output(&[-inf], &[-1.0]).is_err());
        assert!(check_output(&[5.0], &[inf]).is_err());
        assert!(check_output(&[f32::NAN], &[inf]).is_err());
        assert!(check_output(&[1.0], &[1.0, 2.0]).is_err());
    }
}
