//! Tensors that live on the GPU: the fast path for repeated GPU calls.
//!
//! A call with host [`Tensor`]s on `Device::Cuda` copies every input to the GPU and the
//! output back. A [`DeviceTensor`] stays in GPU memory, so a chain of kernels runs with no
//! copies between them; [`call`] runs a kernel (`my_kernel::kernel()`) on device tensors,
//! with the same checks and the same schedule choice (embedded records, the user cache,
//! first-call tuning, the nearest shape, the default) as a host call.
//!
//! ```
//! use tensor_dsl::{tensor_kernel, DeviceTensor, Tensor};
//!
//! #[tensor_kernel]
//! fn matmul(a: &Tensor<f32>, b: &Tensor<f32>, c: &mut Tensor<f32>) {
//!     c[[i, j]] += a[[i, k]] * b[[k, j]];
//! }
//!
//! let a = Tensor::from_vec(vec![2, 3], vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0])?;
//! let b = Tensor::from_vec(vec![3, 1], vec![1.0f32; 3])?;
//! match (DeviceTensor::from_host(&a), DeviceTensor::from_host(&b)) {
//!     (Ok(a), Ok(b)) => {
//!         let mut c = DeviceTensor::zeros(&[2, 1])?;
//!         tensor_dsl::device_tensor::call(matmul::kernel(), &[&a, &b], &mut c)?;
//!         assert_eq!(c.to_host()?.as_slice(), &[6.0, 15.0]);
//!     }
//!     (Err(e), _) | (_, Err(e)) => println!("no GPU here: {e}"),
//! }
//! # Ok::<(), tensor_dsl::Error>(())
//! ```
//!
//! Without a GPU (or without the `cuda` feature) every constructor returns
//! [`Error::DeviceUnavailable`] with the reason, so no `DeviceTensor` can exist.

use crate::ir::Kernel;
use crate::{Error, Tensor};

/// A dense, row-major `f32` tensor in GPU memory (the CUDA runtime's device and stream).
pub struct DeviceTensor {
    shape: Vec<usize>,
    #[cfg(feature = "cuda")]
    buf: crate::runtime::cuda::DeviceBuffer,
}

impl std::fmt::Debug for DeviceTensor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceTensor")
            .field("shape", &self.shape)
            .finish_non_exhaustive()
    }
}

fn element_count(shape: &[usize]) -> Result<usize, Error> {
    shape
        .iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .ok_or_else(|| Error::ShapeOverflow {
            shape: shape.to_vec(),
        })
}

impl DeviceTensor {
    /// A copy of `t` on the GPU.
    ///
    /// Errors: [`Error::DeviceUnavailable`] without a GPU; [`Error::Device`] when the
    /// allocation or the copy fails.
    pub fn from_host(t: &Tensor<f32>) -> Result<DeviceTensor, Error> {
        #[cfg(feature = "cuda")]
        {
            Ok(DeviceTensor {
                shape: t.shape().to_vec(),
                buf: crate::runtime::cuda::DeviceBuffer::from_host(t.as_slice())?,
            })
        }
        #[cfg(not(feature = "cuda"))]
        {
            let _ = t;
            Err(no_cuda())
        }
    }

    /// A tensor of zeros on the GPU.
    ///
    /// Errors: as [`DeviceTensor::from_host`], and [`Error::ShapeOverflow`].
    pub fn zeros(shape: &[usize]) -> Result<DeviceTensor, Error> {
        let n = element_count(shape)?;
        #[cfg(feature = "cuda")]
        {
            Ok(DeviceTensor {
                shape: shape.to_vec(),
                buf: crate::runtime::cuda::DeviceBuffer::zeros(n)?,
            })
        }
        #[cfg(not(feature = "cuda"))]
        {
            let _ = n;
            Err(no_cuda())
        }
    }

    /// The extents, outermost first.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.shape.iter().product()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A host copy. Waits for the kernels queued before it; a fault inside one is reported
    /// here.
    pub fn to_host(&self) -> Result<Tensor<f32>, Error> {
        let mut t = Tensor::try_zeros(&self.shape)?;
        self.copy_to(&mut t)?;
        Ok(t)
    }

    /// Copies into `t`, which must have this shape.
    pub fn copy_to(&self, t: &mut Tensor<f32>) -> Result<(), Error> {
        if t.shape() != self.shape.as_slice() {
            return Err(Error::DataLength {
                shape: t.shape().to_vec(),
                expected: self.len(),
                len: t.len(),
            });
        }
        #[cfg(feature = "cuda")]
        {
            self.buf.copy_to_host(t.as_mut_slice())
        }
        #[cfg(not(feature = "cuda"))]
        {
            Err(no_cuda())
        }
    }

    /// Overwrites the tensor with `t`'s data (same shape).
    pub fn copy_from(&mut self, t: &Tensor<f32>) -> Result<(), Error> {
        if t.shape() != self.shape.as_slice() {
            return Err(Error::DataLength {
                shape: self.shape.clone(),
                expected: self.len(),
                len: t.len(),
            });
        }
        #[cfg(feature = "cuda")]
        {
            self.buf.copy_from_host(t.as_slice())
        }
        #[cfg(not(feature = "cuda"))]
        {
            Err(no_cuda())
        }
    }

    /// The buffer behind it, for the runtime's lower-level API.
    #[cfg(feature = "cuda")]
    pub fn buffer(&self) -> &crate::runtime::cuda::DeviceBuffer {
        &self.buf
    }
}

#[cfg(not(feature = "cuda"))]
fn no_cuda() -> Error {
    Error::DeviceUnavailable {
        device: crate::Device::Cuda.name().into(),
        reason: crate::runtime::NO_CUDA_FEATURE.into(),
    }
}

/// Runs `kernel` on the GPU with device-resident tensors: `inputs` in declaration order,
/// `output` overwritten. Shapes are checked as in a host call; the schedule is chosen as in
/// a host call on `Device::Cuda` (and memoized per kernel and shapes). The launch is
/// asynchronous: a fault inside the kernel is reported by the next copy to the host.
pub fn call(
    kernel: &Kernel,
    inputs: &[&DeviceTensor],
    output: &mut DeviceTensor,
) -> Result<(), Error> {
    let out_shape = output.shape.clone();
    let (shapes, extents) =
        crate::dispatch::bind_call(kernel, inputs.iter().map(|t| t.shape()), &out_shape)?;
    #[cfg(feature = "cuda")]
    {
        let bufs: Vec<&crate::runtime::cuda::DeviceBuffer> =
            inputs.iter().map(|t| &t.buf).collect();
        crate::dispatch::run_on_gpu(kernel, &extents, &shapes, &bufs, &mut output.buf).map(|_| ())
    }
    #[cfg(not(feature = "cuda"))]
    {
        let _ = (shapes, extents);
        Err(no_cuda())
    }
}
