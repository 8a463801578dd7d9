//! Measurers: time schedule candidates for the tuner, verified against the reference.
pub mod cpu;
#[cfg(feature = "cuda")]
pub mod cuda;

use crate::ir::Kernel;

/// Deterministic inputs in [-1, 1) for every parameter, by parameter id (the output's slot
/// is empty), drawn with xorshift64 from `seed`: the same values on every machine, without
/// a random-number dependency. Shared by the measurer, the CLI's `verify` and the bench.
pub fn random_inputs(kernel: &Kernel, shapes: &[Vec<usize>], seed: u64) -> Vec<Vec<f32>> {
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
                return Vec::new();
            }
            (0..shape.iter().product::<usize>())
                .map(|_| {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    (state >> 40) as f32 / (1u64 << 23) as f32 - 1.0
                })
                .collect()
        })
        .collect()
}

/// Checks a candidate's output against the expected one: every element within 1e-3 relative
/// (1e-3 absolute below magnitude 1), NaN only where NaN is expected. The message names the
/// first element that differs.
pub fn check_output(got: &[f32], want: &[f32]) -> Result<(), String> {
    if got.len() != want.len() {
        return Err(format!(
            "output has {} elements, expected {}",
            got.len(),
            want.len()
        ));
    }
    for (n, (&g, &w)) in got.iter().zip(want).enumerate() {
        let ok = (g.is_nan() && w.is_nan()) || (g - w).abs() <= 1e-3 * w.abs().max(1.0);
        if !ok {
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
        assert!(check_output(&[1.0], &[1.0, 2.0]).is_err());
    }
}
