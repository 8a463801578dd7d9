//! Tensors that live on the GPU: the fast path for repeated GPU calls.
//!
//! A call with host [`Tensor`]s on `Device::Cuda` copies every input to the GPU and the
//! output back. A [`DeviceTensor`] stays in GPU memory, so a chain of kernels runs with no
//! copies between them. `#[tensor_kernel]` generates `my_kernel::device(&a, &b, &mut c)`,
//! typed like the kernel's declaration; [`call`] is the same untyped (`my_kernel::kernel()`
//! and a slice of device tensors). Both run with the same checks and the same schedule choice (embedded records, the user cache,
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
//!         let mut c = DeviceTensor::<f32>::zeros(&[2, 1])?;
//!         matmul::device(&a, &b, &mut c)?;
//!         assert_eq!(c.to_host()?.as_slice(), &[6.0, 15.0]);
//!         // The same, untyped:
//!         tensor_dsl::device_tensor::call(matmul::kernel(), &[&a, &b], &mut c)?;
//!     }
//!     (Err(e), _) | (_, Err(e)) => println!("no GPU here: {e}"),
//! }
//! # Ok::<(), tensor_dsl::Error>(())
//! ```
//!
//! Without a GPU (or without the `cuda` feature) every constructor returns
//! [`Error::DeviceUnavailable`] with the reason, so no `DeviceTensor` can exist.
//!
//! `DeviceTensor<T>` holds `f32` (the default), `f16` or `bf16` elements, like [`Tensor`].

use crate::ir::{DType, Kernel};
use crate::{Element, Error, Tensor};
use std::marker::PhantomData;

/// A dense, row-major tensor in GPU memory (the CUDA runtime's device and stream).
pub struct DeviceTensor<T: Element = f32> {
    shape: Vec<usize>,
    #[cfg(feature = "cuda")]
    buf: crate::runtime::cuda::DeviceBuffer,
    _elem: PhantomData<T>,
}

impl<T: Element> std::fmt::Debug for DeviceTensor<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceTensor")
            .field("dtype", &T::DTYPE)
            .field("shape", &self.shape)
            .finish_non_exhaustive()
    }
}

mod sealed {
    pub trait Sealed {}
    impl<T: crate::Element> Sealed for super::DeviceTensor<T> {}
    impl Sealed for super::Previous {}
}

/// The output's contents before an accumulating call ([`call_accumulating`]), copied on the
/// GPU.
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
struct Previous {
    shape: Vec<usize>,
    dtype: DType,
    #[cfg(feature = "cuda")]
    buf: crate::runtime::cuda::DeviceBuffer,
}

impl DeviceArg for Previous {
    fn shape(&self) -> &[usize] {
        &self.shape
    }
    fn dtype(&self) -> DType {
        self.dtype
    }
    #[cfg(feature = "cuda")]
    fn buffer(&self) -> &crate::runtime::cuda::DeviceBuffer {
        &self.buf
    }
    #[cfg(feature = "cuda")]
    fn buffer_mut(&mut self) -> &mut crate::runtime::cuda::DeviceBuffer {
        &mut self.buf
    }
}

/// A device tensor of any element type, as [`call`] takes its arguments (a
/// `&DeviceTensor<bf16>` and a `&DeviceTensor<f32>` can sit in one slice).
pub trait DeviceArg: sealed::Sealed {
    /// The extents, outermost first.
    fn shape(&self) -> &[usize];
    /// The element type.
    fn dtype(&self) -> DType;
    /// The buffer behind it.
    #[cfg(feature = "cuda")]
    fn buffer(&self) -> &crate::runtime::cuda::DeviceBuffer;
    /// The buffer behind it, writable.
    #[cfg(feature = "cuda")]
    fn buffer_mut(&mut self) -> &mut crate::runtime::cuda::DeviceBuffer;
}

impl<T: Element> DeviceArg for DeviceTensor<T> {
    fn shape(&self) -> &[usize] {
        &self.shape
    }
    fn dtype(&self) -> DType {
        T::DTYPE
    }
    #[cfg(feature = "cuda")]
    fn buffer(&self) -> &crate::runtime::cuda::DeviceBuffer {
        &self.buf
    }
    #[cfg(feature = "cuda")]
    fn buffer_mut(&mut self) -> &mut crate::runtime::cuda::DeviceBuffer {
        &mut self.buf
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

impl<T: Element> DeviceTensor<T> {
    /// A copy of `t` on the GPU.
    ///
    /// Errors: [`Error::DeviceUnavailable`] without a GPU; [`Error::Device`] when the
    /// allocation or the copy fails.
    pub fn from_host(t: &Tensor<T>) -> Result<DeviceTensor<T>, Error> {
        #[cfg(feature = "cuda")]
        {
            Ok(DeviceTensor {
                shape: t.shape().to_vec(),
                buf: crate::runtime::cuda::DeviceBuffer::from_host(T::data(t.as_slice()))?,
                _elem: PhantomData,
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
    pub fn zeros(shape: &[usize]) -> Result<DeviceTensor<T>, Error> {
        let n = element_count(shape)?;
        #[cfg(feature = "cuda")]
        {
            Ok(DeviceTensor {
                shape: shape.to_vec(),
                buf: crate::runtime::cuda::DeviceBuffer::zeros_of(T::DTYPE, n)?,
                _elem: PhantomData,
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
    pub fn to_host(&self) -> Result<Tensor<T>, Error> {
        let mut t = Tensor::try_zeros(&self.shape)?;
        self.copy_to(&mut t)?;
        Ok(t)
    }

    /// Copies into `t`, which must have this shape.
    pub fn copy_to(&self, t: &mut Tensor<T>) -> Result<(), Error> {
        if t.shape() != self.shape.as_slice() {
            return Err(Error::DataLength {
                shape: t.shape().to_vec(),
                expected: self.len(),
                len: t.len(),
            });
        }
        #[cfg(feature = "cuda")]
        {
            self.buf.copy_to_host(T::data_mut(t.as_mut_slice()))
        }
        #[cfg(not(feature = "cuda"))]
        {
            Err(no_cuda())
        }
    }

    /// Overwrites the tensor with `t`'s data (same shape).
    pub fn copy_from(&mut self, t: &Tensor<T>) -> Result<(), Error> {
        if t.shape() != self.shape.as_slice() {
            return Err(Error::DataLength {
                shape: self.shape.clone(),
                expected: self.len(),
                len: t.len(),
            });
        }
        #[cfg(feature = "cuda")]
        {
            self.buf.copy_from_host(T::data(t.as_slice()))
        }
        #[cfg(not(feature = "cuda"))]
        {
            Err(no_cuda())
        }
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
/// a host call on `Device::Cuda` (and memoized per kernel and shapes), and each tensor's
/// element type must be the one the kernel declares. The launch is asynchronous: a fault
/// inside the kernel is reported by the next copy to the host.
pub fn call(
    kernel: &Kernel,
    inputs: &[&dyn DeviceArg],
    output: &mut dyn DeviceArg,
) -> Result<(), Error> {
    let out_shape = output.shape().to_vec();
    let (shapes, extents) =
        crate::dispatch::bind_call(kernel, inputs.iter().map(|t| t.shape()), &out_shape)?;
    crate::dispatch::check_dtypes(kernel, inputs.iter().map(|t| t.dtype()), output.dtype())?;
    #[cfg(feature = "cuda")]
    {
        let bufs: Vec<&crate::runtime::cuda::DeviceBuffer> =
            inputs.iter().map(|t| t.buffer()).collect();
        crate::dispatch::run_on_gpu(
            kernel,
            &extents,
            &shapes,
            &bufs,
            output.buffer_mut(),
            &crate::Options::default(),
        )
        .map(|_| ())
    }
    #[cfg(not(feature = "cuda"))]
    {
        let _ = (shapes, extents);
        Err(no_cuda())
    }
}

/// [`call`] of a kernel made by [`Kernel::accumulating`] (`#[tensor_kernel(accumulate)]`):
/// `inputs` are the declared inputs; the output's previous contents are copied on the GPU
/// and passed as the last input, so the output ends up holding its old value plus the
/// kernel's result.
pub fn call_accumulating(
    kernel: &Kernel,
    inputs: &[&dyn DeviceArg],
    output: &mut dyn DeviceArg,
) -> Result<(), Error> {
    #[cfg(feature = "cuda")]
    {
        let prev = Previous {
            shape: output.shape().to_vec(),
            dtype: output.dtype(),
            buf: output.buffer().duplicate()?,
        };
        let mut all = inputs.to_vec();
        all.push(&prev);
        call(kernel, &all, output)
    }
    #[cfg(not(feature = "cuda"))]
    {
        let _ = (kernel, inputs, output);
        Err(no_cuda())
    }
}
