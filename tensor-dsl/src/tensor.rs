//! Host tensors: a shape and a row-major buffer of `f32`, `f16` or `bf16` elements.
//!
//! ```
//! use tensor_dsl::{bf16, Tensor};
//! let t = Tensor::from_vec(vec![2, 3], vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0])?;
//! assert_eq!(t.shape(), &[2, 3]);
//! assert_eq!(t.as_slice()[4], 5.0);
//! let s = Tensor::from_vec(vec![], vec![7.0f32])?; // rank 0: one element
//! assert_eq!(s.as_slice(), &[7.0]);
//! assert!(Tensor::from_vec(vec![2, 2], vec![0.0f32; 3]).is_err());
//! let h = Tensor::<bf16>::from_f32(vec![2], &[1.5, -2.0])?; // rounded to bf16
//! assert_eq!(h.to_f32(), vec![1.5, -2.0]);
//! # Ok::<(), tensor_dsl::Error>(())
//! ```
//!
//! Kernels see their arguments through [`TensorRef`] / [`TensorMut`], views that carry the
//! element type at run time, so one call can mix `Tensor<bf16>` inputs with a
//! `Tensor<f32>` output.

use crate::ir::DType;
use crate::Error;
use half::{bf16, f16};
use std::fmt;

mod sealed {
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for half::f16 {}
    impl Sealed for half::bf16 {}
}

/// Element types a tensor can hold: `f32`, [`f16`](struct@f16) and [`bf16`](struct@bf16).
pub trait Element:
    Copy + Default + fmt::Debug + PartialEq + Send + Sync + 'static + sealed::Sealed
{
    /// The IR's name for this type.
    const DTYPE: DType;
    /// The nearest value of this type (round to nearest, ties to even).
    fn from_f32(x: f32) -> Self;
    /// The value as `f32` (exact for every element type).
    fn to_f32(self) -> f32;
    /// A type-erased view of a slice of this type.
    fn data(s: &[Self]) -> Data<'_>;
    /// A type-erased mutable view of a slice of this type.
    fn data_mut(s: &mut [Self]) -> DataMut<'_>;
}

impl Element for f32 {
    const DTYPE: DType = DType::F32;
    fn from_f32(x: f32) -> Self {
        x
    }
    fn to_f32(self) -> f32 {
        self
    }
    fn data(s: &[Self]) -> Data<'_> {
        Data::F32(s)
    }
    fn data_mut(s: &mut [Self]) -> DataMut<'_> {
        DataMut::F32(s)
    }
}

impl Element for f16 {
    const DTYPE: DType = DType::F16;
    fn from_f32(x: f32) -> Self {
        f16::from_f32(x)
    }
    fn to_f32(self) -> f32 {
        f16::to_f32(self)
    }
    fn data(s: &[Self]) -> Data<'_> {
        Data::F16(s)
    }
    fn data_mut(s: &mut [Self]) -> DataMut<'_> {
        DataMut::F16(s)
    }
}

impl Element for bf16 {
    const DTYPE: DType = DType::BF16;
    fn from_f32(x: f32) -> Self {
        bf16::from_f32(x)
    }
    fn to_f32(self) -> f32 {
        bf16::to_f32(self)
    }
    fn data(s: &[Self]) -> Data<'_> {
        Data::BF16(s)
    }
    fn data_mut(s: &mut [Self]) -> DataMut<'_> {
        DataMut::BF16(s)
    }
}

/// The elements of one tensor, borrowed, with their type known at run time.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Data<'a> {
    F32(&'a [f32]),
    F16(&'a [f16]),
    BF16(&'a [bf16]),
}

/// Like [`Data`], mutably.
#[derive(Debug)]
pub enum DataMut<'a> {
    F32(&'a mut [f32]),
    F16(&'a mut [f16]),
    BF16(&'a mut [bf16]),
}

/// The elements of one tensor, owned, with their type known at run time (what measurers,
/// the CLI and the bench hold).
#[derive(Clone, Debug, PartialEq)]
pub enum Buffer {
    F32(Vec<f32>),
    F16(Vec<f16>),
    BF16(Vec<bf16>),
}

impl Default for Data<'_> {
    fn default() -> Self {
        Data::F32(&[])
    }
}

impl<'a> From<&'a [f32]> for Data<'a> {
    fn from(s: &'a [f32]) -> Self {
        Data::F32(s)
    }
}

impl<'a> From<&'a Vec<f32>> for Data<'a> {
    fn from(s: &'a Vec<f32>) -> Self {
        Data::F32(s)
    }
}

impl<'a, const N: usize> From<&'a [f32; N]> for Data<'a> {
    fn from(s: &'a [f32; N]) -> Self {
        Data::F32(s)
    }
}

impl<'a> From<&'a Buffer> for Data<'a> {
    fn from(b: &'a Buffer) -> Self {
        b.view()
    }
}

impl<'a> From<&'a mut Vec<f32>> for DataMut<'a> {
    fn from(s: &'a mut Vec<f32>) -> Self {
        DataMut::F32(s)
    }
}

impl<'a, const N: usize> From<&'a mut [f32; N]> for DataMut<'a> {
    fn from(s: &'a mut [f32; N]) -> Self {
        DataMut::F32(s)
    }
}

impl<'a> From<&'a mut Buffer> for DataMut<'a> {
    fn from(b: &'a mut Buffer) -> Self {
        b.view_mut()
    }
}

impl<'a> From<&'a mut [f32]> for DataMut<'a> {
    fn from(s: &'a mut [f32]) -> Self {
        DataMut::F32(s)
    }
}

impl<'a> Data<'a> {
    pub fn dtype(&self) -> DType {
        match self {
            Data::F32(_) => DType::F32,
            Data::F16(_) => DType::F16,
            Data::BF16(_) => DType::BF16,
        }
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        match self {
            Data::F32(s) => s.len(),
            Data::F16(s) => s.len(),
            Data::BF16(s) => s.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Element `i` as `f32`; `None` past the end.
    pub fn get(&self, i: usize) -> Option<f32> {
        match self {
            Data::F32(s) => s.get(i).copied(),
            Data::F16(s) => s.get(i).map(|x| x.to_f32()),
            Data::BF16(s) => s.get(i).map(|x| x.to_f32()),
        }
    }

    /// Every element as `f32`.
    pub fn to_f32(&self) -> Vec<f32> {
        match self {
            Data::F32(s) => s.to_vec(),
            Data::F16(s) => s.iter().map(|x| x.to_f32()).collect(),
            Data::BF16(s) => s.iter().map(|x| x.to_f32()).collect(),
        }
    }

    /// The elements' bytes in native order (`len() * dtype().size()` of them).
    pub fn bytes(&self) -> &'a [u8] {
        match *self {
            Data::F32(s) => bytemuck::cast_slice(s),
            Data::F16(s) => bytemuck::cast_slice(s),
            Data::BF16(s) => bytemuck::cast_slice(s),
        }
    }

    /// The address of the first element, for generated code.
    pub fn as_ptr(&self) -> *const u8 {
        self.bytes().as_ptr()
    }

    /// The `f32` slice, if that is the element type.
    pub fn as_f32(&self) -> Option<&'a [f32]> {
        match *self {
            Data::F32(s) => Some(s),
            _ => None,
        }
    }
}

impl DataMut<'_> {
    pub fn dtype(&self) -> DType {
        self.as_data().dtype()
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.as_data().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A shared view of the same elements.
    pub fn as_data(&self) -> Data<'_> {
        match self {
            DataMut::F32(s) => Data::F32(s),
            DataMut::F16(s) => Data::F16(s),
            DataMut::BF16(s) => Data::BF16(s),
        }
    }

    /// A shorter-lived mutable view of the same elements (to pass on without giving this
    /// one up).
    pub fn reborrow(&mut self) -> DataMut<'_> {
        match self {
            DataMut::F32(s) => DataMut::F32(s),
            DataMut::F16(s) => DataMut::F16(s),
            DataMut::BF16(s) => DataMut::BF16(s),
        }
    }

    /// Stores `x` at `i`, rounded to the element type; ignored past the end.
    pub fn set(&mut self, i: usize, x: f32) {
        match self {
            DataMut::F32(s) => {
                if let Some(e) = s.get_mut(i) {
                    *e = x;
                }
            }
            DataMut::F16(s) => {
                if let Some(e) = s.get_mut(i) {
                    *e = f16::from_f32(x);
                }
            }
            DataMut::BF16(s) => {
                if let Some(e) = s.get_mut(i) {
                    *e = bf16::from_f32(x);
                }
            }
        }
    }

    /// Fills every element with `x` (rounded).
    pub fn fill(&mut self, x: f32) {
        match self {
            DataMut::F32(s) => s.fill(x),
            DataMut::F16(s) => s.fill(f16::from_f32(x)),
            DataMut::BF16(s) => s.fill(bf16::from_f32(x)),
        }
    }

    /// The elements' bytes in native order.
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        match self {
            DataMut::F32(s) => bytemuck::cast_slice_mut(s),
            DataMut::F16(s) => bytemuck::cast_slice_mut(s),
            DataMut::BF16(s) => bytemuck::cast_slice_mut(s),
        }
    }

    /// The address of the first element, for generated code.
    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        self.bytes_mut().as_mut_ptr()
    }
}

impl Buffer {
    /// `n` zeros of type `dtype`.
    pub fn zeros(dtype: DType, n: usize) -> Buffer {
        match dtype {
            DType::F32 => Buffer::F32(vec![0.0; n]),
            DType::F16 => Buffer::F16(vec![f16::ZERO; n]),
            DType::BF16 => Buffer::BF16(vec![bf16::ZERO; n]),
        }
    }

    /// `values` rounded to `dtype`.
    pub fn from_f32(dtype: DType, values: &[f32]) -> Buffer {
        match dtype {
            DType::F32 => Buffer::F32(values.to_vec()),
            DType::F16 => Buffer::F16(values.iter().map(|&x| f16::from_f32(x)).collect()),
            DType::BF16 => Buffer::BF16(values.iter().map(|&x| bf16::from_f32(x)).collect()),
        }
    }

    /// `bytes` (native order, as [`Data::bytes`] gives them) as elements of `dtype`; the
    /// trailing bytes of an incomplete element are dropped.
    pub fn from_bytes(dtype: DType, bytes: &[u8]) -> Buffer {
        fn read<T: bytemuck::Pod>(bytes: &[u8]) -> Vec<T> {
            bytes
                .chunks_exact(std::mem::size_of::<T>())
                .map(bytemuck::pod_read_unaligned)
                .collect()
        }
        match dtype {
            DType::F32 => Buffer::F32(read(bytes)),
            DType::F16 => Buffer::F16(read(bytes)),
            DType::BF16 => Buffer::BF16(read(bytes)),
        }
    }

    /// A copy of `data`.
    pub fn copy_of(data: Data<'_>) -> Buffer {
        match data {
            Data::F32(s) => Buffer::F32(s.to_vec()),
            Data::F16(s) => Buffer::F16(s.to_vec()),
            Data::BF16(s) => Buffer::BF16(s.to_vec()),
        }
    }

    pub fn view(&self) -> Data<'_> {
        match self {
            Buffer::F32(v) => Data::F32(v),
            Buffer::F16(v) => Data::F16(v),
            Buffer::BF16(v) => Data::BF16(v),
        }
    }

    pub fn view_mut(&mut self) -> DataMut<'_> {
        match self {
            Buffer::F32(v) => DataMut::F32(v),
            Buffer::F16(v) => DataMut::F16(v),
            Buffer::BF16(v) => DataMut::BF16(v),
        }
    }

    pub fn dtype(&self) -> DType {
        self.view().dtype()
    }

    pub fn len(&self) -> usize {
        self.view().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every element as `f32`.
    pub fn to_f32(&self) -> Vec<f32> {
        self.view().to_f32()
    }
}

/// A borrowed input tensor of any element type: what a kernel call receives.
#[derive(Clone, Copy, Debug)]
pub struct TensorRef<'a> {
    pub shape: &'a [usize],
    pub data: Data<'a>,
    /// The [`Tensor::version`] of the tensor borrowed, `None` for other data: what lets the
    /// CPU runtime keep an input's packed form between calls (see [`Tensor::version`]).
    version: Option<u64>,
}

/// A borrowed output tensor of any element type.
#[derive(Debug)]
pub struct TensorMut<'a> {
    pub shape: &'a [usize],
    pub data: DataMut<'a>,
}

impl<'a> TensorRef<'a> {
    /// `data` as a tensor of `shape` (no version: the runtime assumes nothing about how
    /// long the data stays as it is).
    pub fn new(shape: &'a [usize], data: Data<'a>) -> Self {
        TensorRef {
            shape,
            data,
            version: None,
        }
    }

    /// A scalar as a rank-0 tensor (how a kernel's `alpha: f32` parameter is passed).
    pub fn scalar<T: Element>(value: &'a T) -> Self {
        Self::new(&[], T::data(std::slice::from_ref(value)))
    }

    /// The borrowed [`Tensor`]'s [`Tensor::version`]; `None` for views, slices and scalars.
    pub fn version(&self) -> Option<u64> {
        self.version
    }
}

impl<'a, T: Element> From<&'a Tensor<T>> for TensorRef<'a> {
    fn from(t: &'a Tensor<T>) -> Self {
        TensorRef {
            shape: &t.shape,
            data: T::data(&t.data),
            version: Some(t.version),
        }
    }
}

impl<'a, T: Element> From<&'a mut Tensor<T>> for TensorMut<'a> {
    fn from(t: &'a mut Tensor<T>) -> Self {
        t.version = next_version();
        TensorMut {
            shape: &t.shape,
            data: T::data_mut(&mut t.data),
        }
    }
}

/// A shape over borrowed row-major data: a kernel input without copying the data into a
/// [`Tensor`] (`my_kernel::views(...)`, or [`crate::dispatch::call`] through
/// [`TensorRef::from`]).
///
/// ```
/// use tensor_dsl::{tensor_kernel, Tensor, TensorView, TensorViewMut};
/// #[tensor_kernel]
/// fn scale(x: &Tensor<f32>, y: &mut Tensor<f32>) {
///     y[[i, j]] = 2.0 * x[[i, j]];
/// }
/// let data = vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0];
/// let mut out = vec![0.0f32; 6];
/// scale::views(
///     TensorView::new(&[2, 3], &data)?,
///     TensorViewMut::new(&[2, 3], &mut out)?,
/// )?;
/// assert_eq!(out, [2.0, 4.0, 6.0, 8.0, 10.0, 12.0]);
/// # Ok::<(), tensor_dsl::Error>(())
/// ```
#[derive(Clone, Copy, Debug)]
pub struct TensorView<'a, T: Element> {
    shape: &'a [usize],
    data: &'a [T],
}

/// A shape over borrowed, writable row-major data: a kernel output without a [`Tensor`].
#[derive(Debug)]
pub struct TensorViewMut<'a, T: Element> {
    shape: &'a [usize],
    data: &'a mut [T],
}

/// The number of elements of `shape`, checked against `len`.
fn check_len(shape: &[usize], len: usize) -> Result<(), Error> {
    let expected = element_count(shape).ok_or_else(|| Error::ShapeOverflow {
        shape: shape.to_vec(),
    })?;
    if expected != len {
        return Err(Error::DataLength {
            shape: shape.to_vec(),
            expected,
            len,
        });
    }
    Ok(())
}

impl<'a, T: Element> TensorView<'a, T> {
    /// A view of `data` as a tensor of `shape`; an error when the lengths differ.
    pub fn new(shape: &'a [usize], data: &'a [T]) -> Result<Self, Error> {
        check_len(shape, data.len())?;
        Ok(TensorView { shape, data })
    }

    pub fn shape(&self) -> &[usize] {
        self.shape
    }

    pub fn as_slice(&self) -> &[T] {
        self.data
    }
}

impl<'a, T: Element> TensorViewMut<'a, T> {
    /// A writable view of `data` as a tensor of `shape`; an error when the lengths differ.
    pub fn new(shape: &'a [usize], data: &'a mut [T]) -> Result<Self, Error> {
        check_len(shape, data.len())?;
        Ok(TensorViewMut { shape, data })
    }

    pub fn shape(&self) -> &[usize] {
        self.shape
    }

    pub fn as_slice(&self) -> &[T] {
        self.data
    }
}

impl<'a, T: Element> From<TensorView<'a, T>> for TensorRef<'a> {
    fn from(v: TensorView<'a, T>) -> Self {
        TensorRef::new(v.shape, T::data(v.data))
    }
}

impl<'a, T: Element> From<TensorViewMut<'a, T>> for TensorMut<'a> {
    fn from(v: TensorViewMut<'a, T>) -> Self {
        TensorMut {
            shape: v.shape,
            data: T::data_mut(v.data),
        }
    }
}

/// A dense, row-major tensor in host memory.
#[derive(Clone)]
pub struct Tensor<T: Element> {
    shape: Vec<usize>,
    data: Vec<T>,
    /// See [`Tensor::version`].
    version: u64,
}

/// Tensors are equal when their shapes and elements are (their versions do not count).
impl<T: Element> PartialEq for Tensor<T> {
    fn eq(&self, other: &Self) -> bool {
        self.shape == other.shape && self.data == other.data
    }
}

/// A version no tensor has had yet (process-wide, from 1).
fn next_version() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
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
        Ok(Tensor {
            shape,
            data,
            version: next_version(),
        })
    }

    /// A tensor of the given shape holding a copy of `data` (row-major).
    pub fn from_slice(shape: &[usize], data: &[T]) -> Result<Self, Error> {
        Self::from_vec(shape.to_vec(), data.to_vec())
    }

    /// The same elements under another shape with the same number of elements (no copy).
    ///
    /// ```
    /// use tensor_dsl::Tensor;
    /// let t = Tensor::from_vec(vec![2, 3], vec![1.0f32; 6])?.reshape(&[3, 2])?;
    /// assert_eq!(t.shape(), &[3, 2]);
    /// assert!(t.clone().reshape(&[4]).is_err());
    /// # Ok::<(), tensor_dsl::Error>(())
    /// ```
    pub fn reshape(self, shape: &[usize]) -> Result<Self, Error> {
        check_len(shape, self.data.len())?;
        Ok(Tensor {
            shape: shape.to_vec(),
            data: self.data,
            version: self.version,
        })
    }

    /// A borrowed view (what `my_kernel::views` takes).
    pub fn view(&self) -> TensorView<'_, T> {
        TensorView {
            shape: &self.shape,
            data: &self.data,
        }
    }

    /// A tensor of the given shape over `values` rounded to `T` (to nearest, ties to even).
    pub fn from_f32(shape: Vec<usize>, values: &[f32]) -> Result<Self, Error> {
        Self::from_vec(shape, values.iter().map(|&x| T::from_f32(x)).collect())
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
            version: next_version(),
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

    /// The elements in row-major order, mutably (the tensor gets a new
    /// [`version`](Tensor::version)).
    pub fn as_mut_slice(&mut self) -> &mut [T] {
        self.version = next_version();
        &mut self.data
    }

    /// A number that stays the same exactly as long as the elements do: every way to
    /// change them (a mutable borrow, being a kernel's output) gives the tensor a version
    /// no tensor of this process had before; a clone keeps it (same elements).
    ///
    /// The CPU runtime keys what it derives from an input at call time by it: a
    /// convolution's weights packed into the kernel's panel layout are kept for the next
    /// call with the same version and packed again otherwise ([`crate::runtime::cpu`]).
    ///
    /// ```
    /// use tensor_dsl::Tensor;
    /// let mut w = Tensor::from_vec(vec![2], vec![1.0f32, 2.0])?;
    /// let v = w.version();
    /// assert_eq!(w.clone().version(), v);
    /// w.as_mut_slice()[0] = 3.0;
    /// assert_ne!(w.version(), v);
    /// # Ok::<(), tensor_dsl::Error>(())
    /// ```
    pub fn version(&self) -> u64 {
        self.version
    }

    /// The elements as `f32`, in row-major order.
    pub fn to_f32(&self) -> Vec<f32> {
        self.data.iter().map(|x| x.to_f32()).collect()
    }

    /// Consumes the tensor, returning its buffer.
    pub fn into_vec(self) -> Vec<T> {
        self.data
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        T::DTYPE
    }
}

impl<T: Element> fmt::Debug for Tensor<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const SHOWN: usize = 8;
        write!(f, "Tensor<{}>(shape={:?}, data=[", T::DTYPE, self.shape)?;
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
