//! Host tensors: a shape and a row-major buffer.
//!
//! ```
//! use tensor_dsl::Tensor;
//! let t = Tensor::from_vec(vec![2, 3], vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0])?;
//! assert_eq!(t.shape(), &[2, 3]);
//! assert_eq!(t.as_slice()[4], 5.0);
//! let s = Tensor::from_vec(vec![], vec![7.0f32])?; // rank 0: one element
//! assert_eq!(s.as_slice(), &[7.0]);
//! assert!(Tensor::from_vec(vec![2, 2], vec![0.0f32; 3]).is_err());
//! # Ok::<(), tensor_dsl::Error>(())
//! ```

use crate::Error;
use std::fmt;

/// Element types a tensor can hold.
pub trait Element: Copy + Default + fmt::Debug + Send + Sync + 'static {}
impl Element for f32 {}

/// A dense, row-major tensor in host memory.
#[derive(Clone, PartialEq)]
pub struct Tensor<T: Element> {
    shape: Vec<usize>,
    data: Vec<T>,
}

fn element_count(shape: &[usize]) -> Option<usize> {
    shape.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d))
}

impl<T: Element> Tensor<T> {
    /// A tensor of the given shape over `data` (row-major). Fails when `data.len()` is not the
    /// product of the extents (1 for a rank-0 tensor).
    pub fn from_vec(shape: Vec<usize>, data: Vec<T>) -> Result<Self, Error> {
        let expected = element_count(&shape).ok_or_else(|| Error::ShapeOverflow {
            shape: shape.clone(),
        })?;
        if expected != data.len() {
            return Err(Error::DataLength {
                shape,
                expected,
                len: data.len(),
            });
        }
        Ok(Tensor { shape, data })
    }

    /// A tensor of zeros.
    ///
    /// Panics only if the element count overflows `usize` (the allocation could not succeed
    /// anyway); use [`Tensor::try_zeros`] to get an error instead.
    pub fn zeros(shape: &[usize]) -> Self {
        #[allow(clippy::expect_used)]
        Self::try_zeros(shape).expect("tensor shape overflows usize")
    }

    /// A tensor of zeros, or an error if the element count overflows.
    pub fn try_zeros(shape: &[usize]) -> Result<Self, Error> {
        let n = element_count(shape).ok_or_else(|| Error::ShapeOverflow {
            shape: shape.to_vec(),
        })?;
        Ok(Tensor {
            shape: shape.to_vec(),
            data: vec![T::default(); n],
        })
    }

    /// The extents, outermost first.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.data.len()
    }

    /// `true` when some extent is 0.
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    /// The elements in row-major order.
    pub fn as_slice(&self) -> &[T] {
        &self.data
    }

    /// The elements in row-major order, mutably.
    pub fn as_mut_slice(&mut self) -> &mut [T] {
        &mut self.data
    }

    /// Consumes the tensor, returning its buffer.
    pub fn into_vec(self) -> Vec<T> {
        self.data
    }
}

impl<T: Element> fmt::Debug for Tensor<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const SHOWN: usize = 8;
        write!(f, "Tensor(shape={:?}, data=[", self.shape)?;
        for (i, v) in self.data.iter().take(SHOWN).enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{v:?}")?;
        }
        if self.data.len() > SHOWN {
            write!(f, ", ... {} more", self.data.len() - SHOWN)?;
        }
        f.write_str("])")
    }
}
