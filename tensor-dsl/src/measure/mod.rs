//! Measurers: time schedule candidates for the tuner, verified against the reference.
pub mod cpu;

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
