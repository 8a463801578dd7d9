//! Binding index extents from the argument shapes at a call.

use crate::ir::Kernel;

/// A shape inconsistency found at a call. Every variant names the kernel, the tensor and,
/// where one is involved, the index.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ShapeError {
    #[error("kernel `{kernel}` takes {expected} tensors, but {got} were given")]
    Arity {
        kernel: String,
        expected: usize,
        got: usize,
    },
    #[error("kernel `{kernel}`: tensor `{tensor}` has rank {got} (shape {shape:?}), but the kernel indexes it with {expected} indices")]
    Rank {
        kernel: String,
        tensor: String,
        expected: usize,
        got: usize,
        shape: Vec<usize>,
    },
    #[error("kernel `{kernel}`: tensor `{tensor}` is empty (dimension {dim} has extent 0)")]
    Empty {
        kernel: String,
        tensor: String,
        dim: usize,
    },
    #[error("{0}")]
    Extent(Box<ExtentConflict>),
    #[error("kernel `{kernel}`: tensor `{tensor}` with shape {shape:?} is too large to index")]
    TooLarge {
        kernel: String,
        tensor: String,
        shape: Vec<usize>,
    },
}

/// An index variable bound to two different extents by two tensor dimensions.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("kernel `{kernel}`: index `{index}` has extent {first_extent} from `{first_tensor}` (dimension {first_dim}) but extent {second_extent} from `{second_tensor}` (dimension {second_dim})")]
pub struct ExtentConflict {
    pub kernel: String,
    pub index: String,
    pub first_tensor: String,
    pub first_dim: usize,
    pub first_extent: usize,
    pub second_tensor: String,
    pub second_dim: usize,
    pub second_extent: usize,
}

/// Binds every index variable's extent from the shapes of the parameters (given in
/// declaration order, output included). Inputs are bound in the order they are read, the
/// output last, so a wrong output shape is reported against the output.
pub fn bind(kernel: &Kernel, shapes: &[&[usize]]) -> Result<Vec<usize>, ShapeError> {
    let name = || kernel.name.clone();
    if shapes.len() != kernel.params.len() {
        return Err(ShapeError::Arity {
            kernel: name(),
            expected: kernel.params.len(),
            got: shapes.len(),
        });
    }
    for (param, shape) in kernel.params.iter().zip(shapes) {
        if shape.len() != param.rank {
            return Err(ShapeError::Rank {
                kernel: name(),
                tensor: param.name.clone(),
                expected: param.rank,
                got: shape.len(),
                shape: shape.to_vec(),
            });
        }
        if let Some(dim) = shape.iter().position(|&e| e == 0) {
            return Err(ShapeError::Empty {
                kernel: name(),
                tensor: param.name.clone(),
                dim,
            });
        }
        let fits = shape
            .iter()
            .try_fold(1usize, |acc, &e| acc.checked_mul(e))
            .is_some_and(|n| n <= i64::MAX as usize / 8);
        if !fits {
            return Err(ShapeError::TooLarge {
                kernel: name(),
                tensor: param.name.clone(),
                shape: shape.to_vec(),
            });
        }
    }
    // (extent, tensor, dim) that first bound each index.
    let mut bound: Vec<Option<(usize, usize, usize)>> = vec![None; kernel.indices.len()];
    let mut bind_one = |index: usize, tensor: usize, dim: usize| -> Result<(), ShapeError> {
        let extent = shapes[tensor][dim];
        match bound[index] {
            None => {
                bound[index] = Some((extent, tensor, dim));
                Ok(())
            }
            Some((e, _, _)) if e == extent => Ok(()),
            Some((e, t, d)) => Err(ShapeError::Extent(Box::new(ExtentConflict {
                kernel: name(),
                index: kernel.indices[index].name.clone(),
                first_tensor: kernel.params[t].name.clone(),
                first_dim: d,
                first_extent: e,
                second_tensor: kernel.params[tensor].name.clone(),
                second_dim: dim,
                second_extent: extent,
            }))),
        }
    };
    for access in kernel.accesses() {
        for (dim, map) in access.dims.iter().enumerate() {
            if let Some(v) = map.as_var() {
                bind_one(v, access.tensor, dim)?;
            }
        }
    }
    for (dim, v) in kernel.spatial().into_iter().enumerate() {
        bind_one(v, kernel.output, dim)?;
    }
    // `let r = 0..3;`: the range is the extent; a tensor indexed plainly by `r` must agree.
    for &(v, n) in kernel.staged.as_deref().map_or(&[][..], |s| &s.ranges) {
        match bound[v] {
            Some((e, t, d)) if e != n => {
                return Err(ShapeError::Extent(Box::new(ExtentConflict {
                    kernel: name(),
                    index: kernel.indices[v].name.clone(),
                    first_tensor: format!("let {} = 0..{n}", kernel.indices[v].name),
                    first_dim: 0,
                    first_extent: n,
                    second_tensor: kernel.params[t].name.clone(),
                    second_dim: d,
                    second_extent: e,
                })))
            }
            _ => bound[v] = Some((n, kernel.output, 0)),
        }
    }
    // The parser guarantees every index is used plainly somewhere; 1 is a safe fallback.
    Ok(bound
        .into_iter()
        .map(|b| b.map_or(1, |(e, _, _)| e))
        .collect())
}

/// A kernel with concrete shapes: the parameters' shapes (declaration order, output
/// included) and the extents [`bind`] derived from them. What tools that take a kernel and
/// its shapes as data (the CLI, the bench) work with.
///
/// ```
/// use tensor_dsl_lang::{bind::Problem, parse::parse_text};
/// let k = parse_text("mm", "c[[i,j]] += a[[i,k]] * b[[k,j]]", None).unwrap();
/// let p = Problem::new(k, vec![vec![2, 3], vec![3, 4], vec![2, 4]]).unwrap();
/// assert_eq!(p.extents, vec![2, 4, 3]);
/// assert_eq!(p.flops(), 2.0 * 2.0 * 4.0 * 3.0);
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct Problem {
    pub kernel: Kernel,
    /// Shapes by parameter id.
    pub shapes: Vec<Vec<usize>>,
    /// Extent of every index, by index id.
    pub extents: Vec<usize>,
}

impl Problem {
    /// Binds `kernel` to `shapes`.
    ///
    /// Errors: the [`ShapeError`] of [`bind`].
    pub fn new(kernel: Kernel, shapes: Vec<Vec<usize>>) -> Result<Problem, ShapeError> {
        let refs: Vec<&[usize]> = shapes.iter().map(Vec::as_slice).collect();
        let extents = bind(&kernel, &refs)?;
        Ok(Problem {
            kernel,
            shapes,
            extents,
        })
    }

    /// The shapes as slices, as the runtimes take them.
    pub fn shape_refs(&self) -> Vec<&[usize]> {
        self.shapes.iter().map(Vec::as_slice).collect()
    }

    /// The kernel's flop count at these extents.
    pub fn flops(&self) -> f64 {
        self.kernel.flops(&self.extents)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse_text;

    #[test]
    fn binds_and_reports() {
        let k = parse_text("mm", "c[[i,j]] += a[[i,k]] * b[[k,j]]", None).unwrap();
        assert_eq!(
            bind(&k, &[&[2, 3], &[3, 4], &[2, 4]]).unwrap(),
            vec![2, 4, 3]
        );
        let e = bind(&k, &[&[2, 3], &[5, 4], &[2, 4]]).unwrap_err();
        assert!(e.to_string().contains("index `k`"), "{e}");
        assert!(e.to_string().contains("`b`"), "{e}");
        let e = bind(&k, &[&[2, 3], &[3, 4], &[2, 5]]).unwrap_err();
        assert!(
            e.to_string().contains("`c`") && e.to_string().contains("`j`"),
            "{e}"
        );
        let e = bind(&k, &[&[2, 3, 1], &[3, 4], &[2, 4]]).unwrap_err();
        assert!(matches!(e, ShapeError::Rank { .. }));
        let e = bind(&k, &[&[2, 0], &[0, 4], &[2, 4]]).unwrap_err();
        assert!(matches!(e, ShapeError::Empty { .. }));
    }
}
