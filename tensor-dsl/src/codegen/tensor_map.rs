//! What a generated kernel needs of Hopper's tensor memory accelerator (TMA): one
//! [`TensorMapSpec`] per `CUtensorMap` parameter, which the runtime encodes with the
//! driver's `cuTensorMapEncodeTiled` over an input's buffer at each launch
//! (`runtime/tensor_map.rs`) and passes after the output, in order, as
//! `const __grid_constant__` parameters.
//!
//! A spec is plain data, checked here against the driver's documented rules for tiled maps
//! (rank 1–5, extents in 1..=2^31, byte strides multiples of 16 below 2^40 that grow with
//! the dimension, box sides in 1..=256 with an inner side of a multiple of 16 bytes that
//! fits the swizzle span), so a map the driver would refuse is refused when the code is
//! generated, not at a launch.
//!
//! ```
//! use tensor_dsl::codegen::tensor_map::TensorMapSpec;
//! use tensor_dsl::ir::DType;
//! // A 1000 x 1000 bf16 matrix, k contiguous, copied in boxes of 64 (k) x 128 rows.
//! let s = TensorMapSpec { input: 0, dtype: DType::BF16, dims: vec![1000, 1000],
//!     strides: vec![2000], boxes: vec![64, 128], swizzle: 128 };
//! assert!(s.validate().is_ok());
//! assert_eq!(s.box_bytes(), 64 * 128 * 2);
//! let odd = TensorMapSpec { strides: vec![1998], ..s.clone() }; // rows of 999 halves
//! assert!(odd.validate().unwrap_err().contains("multiple of 16"));
//! ```

use crate::ir::DType;

/// One `CUtensorMap` a kernel takes: a tiled map of input `input` (its position among the
/// kernel's inputs, in declaration order) over the whole tensor, no interleave, no element
/// strides, zero fill out of bounds, 256-byte L2 promotion.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TensorMapSpec {
    /// Which input (index into `Kernel::inputs()`) the map addresses.
    pub input: usize,
    /// Element type (`f16` or `bf16`).
    pub dtype: DType,
    /// Extent of each dimension, innermost (contiguous) first.
    pub dims: Vec<u64>,
    /// Byte stride of each dimension after the first.
    pub strides: Vec<u64>,
    /// Box (the tile one copy moves) side along each dimension, elements.
    pub boxes: Vec<u32>,
    /// Shared-memory swizzle span in bytes: 32, 64 or 128 (0: none).
    pub swizzle: u32,
}

impl TensorMapSpec {
    /// Bytes one copy of a box writes to shared memory (out-of-bounds elements included, as
    /// zeros): what an mbarrier expects per copy.
    pub fn box_bytes(&self) -> usize {
        self.boxes.iter().map(|&b| b as usize).product::<usize>() * self.dtype.size()
    }

    /// Checks the driver's rules for `cuTensorMapEncodeTiled` (without interleave).
    pub fn validate(&self) -> Result<(), String> {
        let rank = self.dims.len();
        if !(1..=5).contains(&rank) {
            return Err(format!("a tensor map has rank 1 to 5, not {rank}"));
        }
        if self.strides.len() + 1 != rank || self.boxes.len() != rank {
            return Err("a tensor map needs rank-1 strides and rank box sides".into());
        }
        if let Some(d) = self.dims.iter().find(|&&d| d == 0 || d > 1 << 31) {
            return Err(format!("tensor map extent {d} is not in 1..=2^31"));
        }
        for (i, &s) in self.strides.iter().enumerate() {
            if !s.is_multiple_of(16) || s >= 1 << 40 {
                return Err(format!(
                    "tensor map stride {s} bytes is not a multiple of 16 below 2^40"
                ));
            }
            // Each stride covers the dimension before it (the driver's packed description).
            let below = if i == 0 {
                self.dims[0] * self.dtype.size() as u64
            } else {
                self.strides[i - 1] * self.dims[i]
            };
            if s < below {
                return Err(format!(
                    "tensor map stride {s} bytes of dimension {} is below the {below} bytes of the dimensions inside it",
                    i + 1
                ));
            }
        }
        if let Some(b) = self.boxes.iter().find(|&&b| b == 0 || b > 256) {
            return Err(format!("tensor map box side {b} is not in 1..=256"));
        }
        let inner = self.boxes[0] as usize * self.dtype.size();
        if !inner.is_multiple_of(16) {
            return Err(format!(
                "tensor map box rows of {inner} bytes are not a multiple of 16"
            ));
        }
        match self.swizzle {
            0 => {}
            32 | 64 | 128 if inner <= self.swizzle as usize => {}
            w => {
                return Err(format!(
                    "tensor map box rows of {inner} bytes do not fit a {w}-byte swizzle"
                ))
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_drivers_rules() {
        let ok = TensorMapSpec {
            input: 1,
            dtype: DType::F16,
            dims: vec![768, 512, 12],
            strides: vec![1536, 1536 * 512],
            boxes: vec![64, 64, 1],
            swizzle: 128,
        };
        assert!(ok.validate().is_ok());
        let bad = [
            TensorMapSpec {
                dims: vec![768, 512, 12, 1, 1, 1],
                strides: vec![16; 5],
                boxes: vec![1; 6],
                ..ok.clone()
            },
            TensorMapSpec {
                boxes: vec![64, 512, 1],
                ..ok.clone()
            },
            TensorMapSpec {
                boxes: vec![128, 64, 1],
                ..ok.clone()
            },
            TensorMapSpec {
                swizzle: 64,
                ..ok.clone()
            },
            TensorMapSpec {
                strides: vec![1536, 1536],
                ..ok.clone()
            },
            TensorMapSpec {
                dims: vec![0, 512, 12],
                ..ok.clone()
            },
            TensorMapSpec {
                boxes: vec![4, 64, 1],
                swizzle: 0,
                ..ok.clone()
            },
        ];
        for b in bad {
            assert!(b.validate().is_err(), "{b:?}");
        }
    }
}
