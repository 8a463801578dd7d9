//! Tensor maps for Hopper TMA kernels: a kernel whose [`CudaSource::tensor_maps`] is not
//! empty takes one `CUtensorMap` per entry after its output, each describing one of its
//! inputs as it lies in GPU memory. The driver encodes them (`cuTensorMapEncodeTiled`, a
//! host call that needs no GPU work) from the spec and the input buffer's address, at every
//! launch — the address is the buffer's — and the runtime passes them by value
//! (`const __grid_constant__` parameters).
//!
//! [`encode_args`] computes the driver's arguments from a spec (element type, rank,
//! extents, byte strides, box, unit element strides, no interleave, the spec's swizzle,
//! 256-byte L2 promotion, zero fill out of bounds) and is tested without a GPU; [`encode`]
//! makes the call.
//!
//! [`CudaSource::tensor_maps`]: crate::codegen::cuda::CudaSource::tensor_maps
//!
//! ```
//! use tensor_dsl::codegen::tensor_map::TensorMapSpec;
//! use tensor_dsl::ir::DType;
//! use tensor_dsl::runtime::tensor_map::encode_args;
//! let spec = TensorMapSpec { input: 0, dtype: DType::BF16, dims: vec![1000, 1000],
//!     strides: vec![2000], boxes: vec![64, 128], swizzle: 128 };
//! let args = encode_args(&spec).unwrap();
//! assert_eq!((args.rank, args.dims.as_slice(), args.boxes.as_slice()), (2, &[1000u64, 1000][..], &[64u32, 128][..]));
//! ```

use crate::codegen::tensor_map::TensorMapSpec;
use crate::ir::DType;
use cudarc::driver::sys::{
    self, CUtensorMapDataType, CUtensorMapFloatOOBfill, CUtensorMapInterleave,
    CUtensorMapL2promotion, CUtensorMapSwizzle,
};

/// A `CUtensorMap` as a kernel argument (128 opaque bytes, passed by value).
#[repr(transparent)]
#[derive(Clone, Copy, Debug)]
pub struct TensorMap(pub sys::CUtensorMap);

// SAFETY: a `CUtensorMap` is plain bytes (`#[repr(C)]`, 128-byte aligned), which is what a
// `const __grid_constant__` tensor-map parameter of a kernel takes.
unsafe impl cudarc::driver::DeviceRepr for TensorMap {}

/// The arguments of `cuTensorMapEncodeTiled` for one spec (the address aside).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EncodeArgs {
    pub data_type: CUtensorMapDataType,
    pub rank: u32,
    pub dims: Vec<u64>,
    pub strides: Vec<u64>,
    pub boxes: Vec<u32>,
    pub element_strides: Vec<u32>,
    pub interleave: CUtensorMapInterleave,
    pub swizzle: CUtensorMapSwizzle,
    pub l2_promotion: CUtensorMapL2promotion,
    pub oob_fill: CUtensorMapFloatOOBfill,
}

/// The driver's arguments for `spec`, or why it has none (see
/// [`TensorMapSpec::validate`]).
pub fn encode_args(spec: &TensorMapSpec) -> Result<EncodeArgs, String> {
    spec.validate()?;
    let data_type = match spec.dtype {
        DType::BF16 => CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
        DType::F16 => CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
        DType::F32 => CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_FLOAT32,
    };
    let swizzle = match spec.swizzle {
        0 => CUtensorMapSwizzle::CU_TENSOR_MAP_SWIZZLE_NONE,
        32 => CUtensorMapSwizzle::CU_TENSOR_MAP_SWIZZLE_32B,
        64 => CUtensorMapSwizzle::CU_TENSOR_MAP_SWIZZLE_64B,
        128 => CUtensorMapSwizzle::CU_TENSOR_MAP_SWIZZLE_128B,
        w => return Err(format!("no {w}-byte swizzle")),
    };
    Ok(EncodeArgs {
        data_type,
        rank: spec.dims.len() as u32,
        dims: spec.dims.clone(),
        strides: spec.strides.clone(),
        boxes: spec.boxes.clone(),
        element_strides: vec![1; spec.dims.len()],
        interleave: CUtensorMapInterleave::CU_TENSOR_MAP_INTERLEAVE_NONE,
        swizzle,
        l2_promotion: CUtensorMapL2promotion::CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
        oob_fill: CUtensorMapFloatOOBfill::CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
    })
}

/// Encodes `spec` over the tensor at device address `address` (16-byte aligned, as every
/// allocation is). Needs the CUDA driver (initialized by the runtime); errors say why the
/// driver refused.
pub fn encode(spec: &TensorMapSpec, address: u64) -> Result<TensorMap, String> {
    let a = encode_args(spec)?;
    if !address.is_multiple_of(16) {
        return Err(format!(
            "a tensor map's address must be 16-byte aligned, not {address:#x}"
        ));
    }
    let mut map = sys::CUtensorMap { opaque: [0; 16] };
    super::cuda::guarded("encoding a TMA tensor map", || {
        // SAFETY: every array has `rank` entries (`strides` rank - 1), checked by
        // `encode_args`; `map` is a valid, writable `CUtensorMap`; the address is only
        // recorded in the map, not dereferenced.
        let status = unsafe {
            sys::cuTensorMapEncodeTiled(
                &mut map,
                a.data_type,
                a.rank,
                address as *mut std::ffi::c_void,
                a.dims.as_ptr(),
                a.strides.as_ptr(),
                a.boxes.as_ptr(),
                a.element_strides.as_ptr(),
                a.interleave,
                a.swizzle,
                a.l2_promotion,
                a.oob_fill,
            )
        };
        if status == sys::CUresult::CUDA_SUCCESS {
            Ok(())
        } else {
            Err(format!(
                "cuTensorMapEncodeTiled failed: {status:?} for {spec:?}"
            ))
        }
    })?;
    Ok(TensorMap(map))
}

/// The tensor maps of one launch: `specs` encoded over the inputs whose device addresses
/// `address` gives (by input position).
pub fn for_launch(
    specs: &[TensorMapSpec],
    address: impl Fn(usize) -> Option<u64>,
) -> Result<Vec<TensorMap>, String> {
    specs
        .iter()
        .map(|s| {
            let at = address(s.input).ok_or_else(|| {
                format!("a tensor map of input {}, which the launch lacks", s.input)
            })?;
            encode(s, at)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_follow_the_spec() {
        let spec = TensorMapSpec {
            input: 1,
            dtype: DType::F16,
            dims: vec![512, 768, 12],
            strides: vec![1024, 1024 * 768],
            boxes: vec![64, 64, 1],
            swizzle: 64,
        };
        let a = encode_args(&TensorMapSpec {
            boxes: vec![32, 64, 1],
            ..spec.clone()
        })
        .unwrap();
        assert_eq!(
            a.data_type,
            CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_FLOAT16
        );
        assert_eq!(a.swizzle, CUtensorMapSwizzle::CU_TENSOR_MAP_SWIZZLE_64B);
        assert_eq!(
            (a.rank, a.strides.len(), a.element_strides),
            (3, 2, vec![1, 1, 1])
        );
        assert_eq!(
            a.oob_fill,
            CUtensorMapFloatOOBfill::CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE
        );
        // A 64-element (128-byte) box row does not fit a 64-byte swizzle.
        assert!(encode_args(&spec).is_err());
        // Misaligned addresses are refused before the driver is asked.
        let ok = TensorMapSpec {
            boxes: vec![32, 64, 1],
            ..spec
        };
        assert!(encode(&ok, 0x1008).unwrap_err().contains("16-byte aligned"));
        assert!(for_launch(&[ok], |_| None).unwrap_err().contains("lacks"));
    }
}
