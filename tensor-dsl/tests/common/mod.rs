//! Helpers shared by the backend-vs-reference tests.

use tensor_dsl::ir::{bind, Kernel};

/// Kernels covering the language: many inputs, diagonals, scalars, outer products,
/// transposes, affine (padded) accesses, epilogues with every built-in: every backend is
/// checked against the reference on each of them, at random awkward shapes.
#[allow(dead_code)] // each test file compiles this module; not all of them use the list
pub const KERNELS: &[&str] = &[
    "c[[i, j]] += a[[i, k]] * b[[k, j]]",
    "c[[i, j]] += a[[k, i]] * b[[j, k]]",
    "c[[b, i, j]] += x[[b, i, k]] * y[[b, k, j]]",
    "c[[b, i, j]] += x[[b, k, i]] * y[[b, k, j]]",
    "o[[i, j]] = a[[i]] * b[[j]]",
    "s[[]] += a[[i]] * b[[i]]",
    "t[[]] += a[[i, i]]",
    "d[[i]] = a[[i, i]]",
    "o[[i]] += a[[i, j]] * b[[j, l]] * c[[l]] * d[[i]]",
    "o[[i, l]] += a[[i, j]] * b[[j, k]] * c[[k, l]]",
    "o[[i, j]] = a[[i, j]] + b[[i, j]] * 2.0 - a[[i, j]] / 3.0",
    "o[[i, j]] = max(a[[i, j]], b[[i, j]]) - min(a[[i, j]], -b[[i, j]])",
    "o[[j, i]] = a[[i, j]]",
    "o[[i]] += a[[i + k]] * w[[k]]",
    "o[[i]] += a[[2 * i + k - 1]] * w[[k]]",
    "y[[n, f, p, q]] += x[[n, c, 2 * p + r - 1, 2 * q + s - 1]] * w[[f, c, r, s]]; y[[n, f, p, q]] = relu(y[[n, f, p, q]] + bias[[f]])",
    "y[[n, f, p, q]] += x[[n, c, p + r, q + s]] * w[[f, c, r, s]]",
    "o[[i, j]] += a[[i, k]] * b[[k, j]]; o[[i, j]] = gelu(o[[i, j]]); o[[i, j]] = sigmoid(o[[i, j]]) + tanh(o[[i, j]])",
    "o[[i, j]] = exp(a[[i, j]]) + sqrt(a[[i, j]] * a[[i, j]] + 1.0)",
    "o[[i]] += exp(a[[i, k]]) * -b[[k]]",
    "o[[i, j, l]] += a[[i, k]] * b[[j, k]] * c[[l, k]]",
    "o[[i, j]] += a[[i, j, k, m]] * b[[m, k]]",
    "o[[i, j]] += a[[i, k]] * a[[k, j]]",
    "o[[i, j]] += a[[i - 2, j + k]] * b[[k]]; o[[i, j]] = o[[i, j]] * 0.5 + 1.0",
];

/// Shapes for `kernel` at the given index extents: a plain dimension takes its index's
/// extent, an affine one `affine_size(hi)` where `hi` is the largest coordinate it reads (a
/// size around it exercises zero padding); the output takes the spatial extents. Returns
/// the bound extents and the shapes, or `None` when they are inconsistent (e.g. one tensor
/// read with two different extents).
pub fn shapes_for(
    kernel: &Kernel,
    extents: &[usize],
    mut affine_size: impl FnMut(i64) -> usize,
) -> Option<(Vec<usize>, Vec<Vec<usize>>)> {
    let mut shapes: Vec<Option<Vec<usize>>> = vec![None; kernel.params.len()];
    for a in kernel.accesses() {
        if shapes[a.tensor].is_none() {
            let dims = a
                .dims
                .iter()
                .map(|m| match m.as_var() {
                    Some(v) => extents[v],
                    None => affine_size(m.range(extents).1),
                })
                .collect();
            shapes[a.tensor] = Some(dims);
        }
    }
    shapes[kernel.output] = Some(kernel.spatial().iter().map(|&s| extents[s]).collect());
    let shapes: Vec<Vec<usize>> = shapes.into_iter().map(|s| s.unwrap_or_default()).collect();
    let refs: Vec<&[usize]> = shapes.iter().map(|s| s.as_slice()).collect();
    let extents = bind(kernel, &refs).ok()?;
    Some((extents, shapes))
}
