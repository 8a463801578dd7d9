//! Helpers shared by the backend-vs-reference tests.

use tensor_dsl::ir::{bind, Kernel};

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
