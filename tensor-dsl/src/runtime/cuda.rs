//! The CUDA runtime: generated CUDA C → NVRTC (a CUBIN for the device's real architecture,
//! `sm_XY`; PTX only as a logged fallback, see [`super::cubin`]) → the CUDA driver (through
//! `cudarc`, loaded at run time) → a launch on one stream. Timing goes through
//! [`super::graph_timing`] (CUDA graphs of back-to-back launches).
//!
//! Everything here checks first that the CUDA libraries and a GPU are present
//! ([`available`], memoized): `cudarc` panics when a library is missing, so no `cudarc` call is
//! made before that check, and detection itself runs under `catch_unwind`. Without a GPU every
//! entry point returns [`Error::DeviceUnavailable`] with the reason.
//!
//! The device is GPU 0, or the index in `TENSOR_DSL_CUDA_DEVICE`. One context and one stream
//! per process; kernels are compiled once per (kernel fingerprint, shapes, extents, schedule,
//! architecture, codegen version) and stay loaded for the life of the process.
//!
//! Two ways to run a kernel:
//! - [`run`]: host slices in, host slice out (copied to the GPU and back per call); this is
//!   what `Device::Cuda` calls do.
//! - [`compile`] → [`CompiledKernel`], launched on [`DeviceBuffer`]s that stay on the GPU: the
//!   fast path, and what benchmarks and tuning time ([`CompiledKernel::time`]).
//!
//! ```
//! use tensor_dsl::ir::{bind, parse_text};
//! use tensor_dsl::runtime::cuda::{self, DeviceBuffer};
//! use tensor_dsl::template::gpu::default_schedule;
//!
//! let kernel = parse_text("dot", "s[[]] += a[[i]] * b[[i]]", None).unwrap();
//! let shapes: [&[usize]; 3] = [&[3], &[3], &[]];
//! let extents = bind(&kernel, &shapes)?;
//! match cuda::available() {
//!     Err(reason) => println!("no GPU here: {reason}"),
//!     Ok(gpu) => {
//!         let schedule = default_schedule(&kernel, &extents, &gpu.target());
//!         let dot = cuda::compile(&kernel, &extents, &shapes, &schedule)?;
//!         let a = DeviceBuffer::from_host(&[1.0, 2.0, 3.0])?;
//!         let b = DeviceBuffer::from_host(&[4.0, 5.0, 6.0])?;
//!         let mut s = DeviceBuffer::zeros(1)?;
//!         dot.launch(&[&a, &b], &mut s)?;
//!         assert_eq!(s.to_host()?, vec![32.0]);
//!         let seconds = dot.time(&[&a, &b], &mut s, 2, 5)?;
//!         assert_eq!(seconds.len(), 5);
//!     }
//! }
//! # Ok::<(), tensor_dsl::Error>(())
//! ```

use crate::codegen::cuda::{self as codegen, CudaSource};
use crate::ir::DType;
use crate::ir::Kernel;
use crate::runtime::nvrtc;
use crate::template::gpu::{default_schedule, GpuSchedule, GpuTarget};
use crate::tensor::{Buffer, Data, DataMut};
use crate::Error;
use cudarc::driver::result as cu;
use cudarc::driver::sys::{self, CUdevice_attribute as Attr, CUresult};
use cudarc::driver::{
    CudaContext, CudaFunction, CudaSlice, CudaStream, DriverError, LaunchConfig, PushKernelArg,
};
use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

const DEVICE: &str = "cuda";
/// The oldest driver this build supports: it binds the CUDA 13 driver API (`cudarc`'s
/// `cuda-13000`), and CUDA 13 NVRTC's PTX (the fallback image) needs it.
const MIN_DRIVER_VERSION: u32 = 13000;
/// Shared memory a block may use without opting in to more.
const DEFAULT_SHARED_LIMIT: u32 = 48 * 1024;

/// What the driver says about the GPU kernels run on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceInfo {
    /// Device index (`TENSOR_DSL_CUDA_DEVICE`, default 0).
    pub ordinal: usize,
    /// e.g. "NVIDIA H100 80GB HBM3".
    pub name: String,
    /// (major, minor), e.g. (9, 0).
    pub compute_capability: (u32, u32),
    /// The driver's CUDA version as major*1000 + minor*10, e.g. 13000.
    pub driver_version: u32,
    pub sm_count: u32,
    pub warp_size: u32,
    pub max_threads_per_block: u32,
    pub max_threads_per_sm: u32,
    pub max_block_dim: [u32; 3],
    pub max_grid_dim: [u32; 3],
    /// Shared memory per block without opting in (48 KiB), bytes.
    pub max_shared_per_block: u32,
    /// Shared memory per block with the opt-in attribute (dynamic shared memory), bytes.
    pub max_shared_per_block_optin: u32,
    pub shared_per_sm: u32,
    pub regs_per_block: u32,
    pub regs_per_sm: u32,
    pub l2_bytes: u32,
    pub total_memory: u64,
}

impl DeviceInfo {
    /// Compute capability as major*10+minor, e.g. 90.
    pub fn sm(&self) -> u32 {
        self.compute_capability.0 * 10 + self.compute_capability.1
    }

    /// What the GPU template needs to know about this device.
    pub fn target(&self) -> GpuTarget {
        GpuTarget {
            name: self.name.clone(),
            sm: self.sm(),
            sm_count: self.sm_count,
            max_threads_per_block: self.max_threads_per_block,
            max_shared_per_block: self.max_shared_per_block,
            shared_per_sm: self.shared_per_sm,
            regs_per_sm: self.regs_per_sm,
            // Every architecture NVRTC 13 targets (sm_75 and later) allows 255.
            max_regs_per_thread: 255,
            max_threads_per_sm: self.max_threads_per_sm,
            warp_size: self.warp_size,
            // Code is compiled for this very device, so a 9.0 GPU's `sm_90a` features
            // (`wgmma`) are usable: its kernels are compiled for `compute_90a`.
            arch_specific: self.sm() == 90,
        }
    }
}

impl fmt::Display for DeviceInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} (GPU {}, sm_{}, {} SMs, {} MiB, driver {})",
            self.name,
            self.ordinal,
            self.sm(),
            self.sm_count,
            self.total_memory >> 20,
            version_text(self.driver_version)
        )
    }
}

fn version_text(v: u32) -> String {
    format!("{}.{}", v / 1000, (v % 1000) / 10)
}

// ---------------------------------------------------------------------------------------------
// Detection
// ---------------------------------------------------------------------------------------------

static DETECTED: OnceLock<Result<DeviceInfo, String>> = OnceLock::new();

/// The GPU kernels run on, or why CUDA cannot run here: no driver library, `cuInit` failing,
/// a driver older than CUDA 13, no GPU, a bad `TENSOR_DSL_CUDA_DEVICE`, or no NVRTC.
/// Detected once per process; never panics.
pub fn available() -> Result<&'static DeviceInfo, String> {
    DETECTED.get_or_init(detect).as_ref().map_err(Clone::clone)
}

fn unavailable(reason: &str) -> Error {
    Error::DeviceUnavailable {
        device: DEVICE.into(),
        reason: reason.into(),
    }
}

/// Runs `f`, turning a panic inside `cudarc` (a library or symbol it cannot load) into an
/// error that starts with `what`. Public for code that calls other `cudarc` libraries
/// (cuBLAS, cuDNN) beside this runtime.
pub fn guarded<T>(what: &str, f: impl FnOnce() -> Result<T, String>) -> Result<T, String> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(payload) => {
            let text = payload
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "unknown panic".into());
            Err(format!("{what}: the CUDA library failed: {text}"))
        }
    }
}

/// `CUDA_ERROR_X (what the driver says)`.
fn describe(e: DriverError) -> String {
    let name = format!("{:?}", e.0);
    match e.error_string() {
        Ok(text) => format!("{name} ({})", text.to_string_lossy()),
        Err(_) => name,
    }
}

fn device_ordinal() -> Result<usize, String> {
    match std::env::var("TENSOR_DSL_CUDA_DEVICE") {
        Ok(v) if !v.trim().is_empty() => v
            .trim()
            .parse()
            .map_err(|_| format!("TENSOR_DSL_CUDA_DEVICE={v:?} is not a device index (0, 1, ...)")),
        _ => Ok(0),
    }
}

fn detect() -> Result<DeviceInfo, String> {
    // SAFETY: only tries to dlopen the driver library; no CUDA call is made.
    if !unsafe { sys::is_culib_present() } {
        return Err(
            "no CUDA driver (libcuda.so) found: this machine has no NVIDIA driver, or it \
                    is not on the library path; kernels run on the CPU instead"
                .into(),
        );
    }
    let info = guarded("detecting the GPU", detect_device)?;
    if !nvrtc::available() {
        return Err(format!(
            "found {info} but not NVRTC (libnvrtc.so.13, or .so.12): install the CUDA toolkit, \
             or the `nvidia-cuda-nvrtc` wheel, and put its lib folder (nvidia/cu13/lib) on \
             LD_LIBRARY_PATH"
        ));
    }
    Ok(info)
}

fn detect_device() -> Result<DeviceInfo, String> {
    cu::init().map_err(|e| {
        format!(
            "the CUDA driver did not initialise (cuInit: {}); is an NVIDIA GPU present and \
             usable by this user?",
            describe(e)
        )
    })?;
    let mut version: std::ffi::c_int = 0;
    // SAFETY: writes one int; the driver is initialised.
    unsafe { sys::cuDriverGetVersion(&mut version) }
        .result()
        .map_err(|e| format!("cuDriverGetVersion: {}", describe(e)))?;
    let driver_version = version.max(0) as u32;
    if driver_version < MIN_DRIVER_VERSION {
        return Err(format!(
            "the NVIDIA driver supports CUDA {}, older than the CUDA {} this build is made \
             for; update the driver",
            version_text(driver_version),
            version_text(MIN_DRIVER_VERSION)
        ));
    }
    let count =
        cu::device::get_count().map_err(|e| format!("cuDeviceGetCount: {}", describe(e)))?;
    if count <= 0 {
        return Err("the CUDA driver is installed but reports no GPU".into());
    }
    let ordinal = device_ordinal()?;
    if ordinal >= count as usize {
        return Err(format!(
            "TENSOR_DSL_CUDA_DEVICE={ordinal} but only {count} GPU(s) are present (0..{})",
            count - 1
        ));
    }
    let dev = cu::device::get(ordinal as std::ffi::c_int)
        .map_err(|e| format!("cuDeviceGet({ordinal}): {}", describe(e)))?;
    let attr = |a: Attr| -> Result<u32, String> {
        // SAFETY: `dev` came from cuDeviceGet.
        unsafe { cu::device::get_attribute(dev, a) }
            .map(|v| v.max(0) as u32)
            .map_err(|e| format!("cuDeviceGetAttribute({a:?}): {}", describe(e)))
    };
    let name =
        cu::device::get_name(dev).map_err(|e| format!("cuDeviceGetName: {}", describe(e)))?;
    // SAFETY: `dev` came from cuDeviceGet.
    let total_memory = unsafe { cu::device::total_mem(dev) }
        .map_err(|e| format!("cuDeviceTotalMem: {}", describe(e)))? as u64;
    Ok(DeviceInfo {
        ordinal,
        name,
        compute_capability: (
            attr(Attr::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?,
            attr(Attr::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?,
        ),
        driver_version,
        sm_count: attr(Attr::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?,
        warp_size: attr(Attr::CU_DEVICE_ATTRIBUTE_WARP_SIZE)?,
        max_threads_per_block: attr(Attr::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK)?,
        max_threads_per_sm: attr(Attr::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR)?,
        max_block_dim: [
            attr(Attr::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X)?,
            attr(Attr::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y)?,
            attr(Attr::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z)?,
        ],
        max_grid_dim: [
            attr(Attr::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X)?,
            attr(Attr::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y)?,
            attr(Attr::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z)?,
        ],
        max_shared_per_block: attr(Attr::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK)?,
        max_shared_per_block_optin: attr(
            Attr::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
        )?,
        shared_per_sm: attr(Attr::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR)?,
        regs_per_block: attr(Attr::CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK)?,
        regs_per_sm: attr(Attr::CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR)?,
        l2_bytes: attr(Attr::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE)?,
        total_memory,
    })
}

// ---------------------------------------------------------------------------------------------
// The process-wide runtime: one context, one stream
// ---------------------------------------------------------------------------------------------

struct Runtime {
    info: &'static DeviceInfo,
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    /// Set after a sticky error (a kernel fault): the context cannot be used again.
    lost: Mutex<Option<String>>,
}

static RUNTIME: OnceLock<Result<Runtime, String>> = OnceLock::new();

fn runtime() -> Result<&'static Runtime, Error> {
    let info = available().map_err(|r| unavailable(&r))?;
    RUNTIME
        .get_or_init(|| {
            guarded("creating the CUDA context", || {
                let ctx = CudaContext::new(info.ordinal).map_err(|e| {
                    format!("cannot create a CUDA context on {info}: {}", describe(e))
                })?;
                // SAFETY: every buffer this runtime allocates and every kernel it launches is
                // ordered on its one stream, so cudarc's per-buffer event tracking (meant for
                // several streams) is not needed; turned off before any buffer exists.
                unsafe { ctx.disable_event_tracking() };
                let stream = ctx
                    .new_stream()
                    .map_err(|e| format!("cannot create a CUDA stream: {}", describe(e)))?;
                Ok(Runtime {
                    info,
                    ctx,
                    stream,
                    lost: Mutex::new(None),
                })
            })
        })
        .as_ref()
        .map_err(|r| unavailable(r))
}

/// Errors that leave the context unusable until the process exits.
fn is_sticky(e: DriverError) -> bool {
    matches!(
        e.0,
        CUresult::CUDA_ERROR_ILLEGAL_ADDRESS
            | CUresult::CUDA_ERROR_LAUNCH_TIMEOUT
            | CUresult::CUDA_ERROR_HARDWARE_STACK_ERROR
            | CUresult::CUDA_ERROR_ILLEGAL_INSTRUCTION
            | CUresult::CUDA_ERROR_MISALIGNED_ADDRESS
            | CUresult::CUDA_ERROR_INVALID_ADDRESS_SPACE
            | CUresult::CUDA_ERROR_INVALID_PC
            | CUresult::CUDA_ERROR_LAUNCH_FAILED
            | CUresult::CUDA_ERROR_ASSERT
            | CUresult::CUDA_ERROR_ECC_UNCORRECTABLE
            | CUresult::CUDA_ERROR_CONTEXT_IS_DESTROYED
    )
}

impl Runtime {
    /// `Err` (the earlier error) once the context is lost.
    fn alive(&self) -> Result<(), String> {
        match &*self.lost.lock().unwrap_or_else(|p| p.into_inner()) {
            None => Ok(()),
            Some(e) => Err(format!(
                "the CUDA context was lost after an earlier error ({e}); restart the process to \
                 use the GPU again"
            )),
        }
    }

    /// A message for a failed CUDA call; records sticky errors.
    fn failure(&self, what: &str, e: DriverError) -> String {
        let text = describe(e);
        if is_sticky(e) {
            let mut lost = self.lost.lock().unwrap_or_else(|p| p.into_inner());
            if lost.is_none() {
                *lost = Some(text.clone());
            }
            format!(
                "{what}: {text}; this error is sticky: the CUDA context is unusable from now on \
                 (restart the process)"
            )
        } else {
            format!("{what}: {text}")
        }
    }

    fn device_error(&self, what: &str, e: DriverError) -> Error {
        Error::Device {
            device: DEVICE.into(),
            message: self.failure(what, e),
        }
    }

    fn check_device(&self) -> Result<(), Error> {
        self.alive().map_err(|message| Error::Device {
            device: DEVICE.into(),
            message,
        })
    }

    fn synchronize(&self) -> Result<(), Error> {
        self.check_device()?;
        self.stream
            .synchronize()
            .map_err(|e| self.device_error("synchronizing the stream", e))
    }
}

/// Waits for all work queued on the GPU (launches are asynchronous); a kernel that faulted
/// since the last synchronization is reported here.
pub fn synchronize() -> Result<(), Error> {
    runtime()?.synchronize()
}

/// The runtime's one stream, for interoperation: a cuBLAS or cuDNN handle bound to it orders
/// its work with every launch and copy of this runtime (what `bench` does to time its
/// baselines beside our kernels).
pub fn stream() -> Result<Arc<CudaStream>, Error> {
    let rt = runtime()?;
    rt.check_device()?;
    Ok(Arc::clone(&rt.stream))
}

// ---------------------------------------------------------------------------------------------
// Device buffers
// ---------------------------------------------------------------------------------------------

/// The allocation behind a [`DeviceBuffer`]: `f32`s, or the 16-bit patterns of `f16`/`bf16`.
enum Slice {
    F32(CudaSlice<f32>),
    Half(CudaSlice<u16>),
}

/// Elements of one type (`f32`, `f16` or `bf16`) in GPU memory, on the runtime's device and
/// stream. Copies to and from the host synchronize; kernels launched on it are ordered on
/// the same stream.
pub struct DeviceBuffer {
    /// At least one element (the driver refuses empty allocations); `len` is the real length.
    slice: Slice,
    dtype: DType,
    len: usize,
    rt: &'static Runtime,
}

impl DeviceBuffer {
    /// The buffer's device address (for the tensor maps of TMA kernels).
    fn address(&self, stream: &CudaStream) -> u64 {
        use cudarc::driver::DevicePtr;
        match &self.slice {
            Slice::F32(s) => s.device_ptr(stream).0,
            Slice::Half(s) => s.device_ptr(stream).0,
        }
    }

    fn alloc(dtype: DType, len: usize) -> Result<DeviceBuffer, Error> {
        let rt = runtime()?;
        rt.check_device()?;
        let what = || format!("allocating {len} {dtype} elements");
        let slice = match dtype {
            DType::F32 => Slice::F32(
                rt.stream
                    .alloc_zeros::<f32>(len.max(1))
                    .map_err(|e| rt.device_error(&what(), e))?,
            ),
            DType::F16 | DType::BF16 => Slice::Half(
                rt.stream
                    .alloc_zeros::<u16>(len.max(1))
                    .map_err(|e| rt.device_error(&what(), e))?,
            ),
        };
        Ok(DeviceBuffer {
            slice,
            dtype,
            len,
            rt,
        })
    }

    /// A buffer of `len` `f32` zeros.
    pub fn zeros(len: usize) -> Result<DeviceBuffer, Error> {
        Self::zeros_of(DType::F32, len)
    }

    /// A buffer of `len` zeros of type `dtype`.
    pub fn zeros_of(dtype: DType, len: usize) -> Result<DeviceBuffer, Error> {
        let buf = Self::alloc(dtype, len)?;
        // Allocation and memset are asynchronous: surface their errors here.
        buf.rt.synchronize()?;
        Ok(buf)
    }

    /// A copy of `data` (`&[f32]`, a [`Data`] view of any element type) on the GPU.
    pub fn from_host<'a>(data: impl Into<Data<'a>>) -> Result<DeviceBuffer, Error> {
        let data = data.into();
        let mut buf = Self::alloc(data.dtype(), data.len())?;
        buf.copy_from_host(data)?;
        Ok(buf)
    }

    /// The `cudarc` allocation behind an `f32` buffer (at least one element long even when
    /// [`len`](Self::len) is 0), for handing to cuBLAS or cuDNN on [`stream`]; an error for
    /// a half-precision buffer.
    pub fn cuda_slice(&self) -> Result<&CudaSlice<f32>, Error> {
        match &self.slice {
            Slice::F32(s) => Ok(s),
            Slice::Half(_) => Err(self.wrong_type(DType::F32)),
        }
    }

    /// [`cuda_slice`](Self::cuda_slice), writable.
    pub fn cuda_slice_mut(&mut self) -> Result<&mut CudaSlice<f32>, Error> {
        let dtype = self.dtype;
        match &mut self.slice {
            Slice::F32(s) => Ok(s),
            Slice::Half(_) => Err(Error::Device {
                device: DEVICE.into(),
                message: format!("the buffer holds {dtype} elements, not f32"),
            }),
        }
    }

    /// The 16-bit patterns of an `f16` or `bf16` buffer (for cuBLAS's `GemmEx`); an error
    /// for an `f32` buffer.
    pub fn half_slice(&self) -> Result<&CudaSlice<u16>, Error> {
        match &self.slice {
            Slice::Half(s) => Ok(s),
            Slice::F32(_) => Err(self.wrong_type(DType::F16)),
        }
    }

    /// [`half_slice`](Self::half_slice), writable (for a half-precision cuDNN output).
    pub fn half_slice_mut(&mut self) -> Result<&mut CudaSlice<u16>, Error> {
        let dtype = self.dtype;
        match &mut self.slice {
            Slice::Half(s) => Ok(s),
            Slice::F32(_) => Err(Error::Device {
                device: DEVICE.into(),
                message: format!("the buffer holds {dtype} elements, not f16 or bf16"),
            }),
        }
    }

    fn wrong_type(&self, wanted: DType) -> Error {
        Error::Device {
            device: DEVICE.into(),
            message: format!("the buffer holds {} elements, not {wanted}", self.dtype),
        }
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// Overwrites the buffer with `data`, which must have exactly [`DeviceBuffer::len`]
    /// elements of the buffer's type.
    pub fn copy_from_host<'a>(&mut self, data: impl Into<Data<'a>>) -> Result<(), Error> {
        let data = data.into();
        self.rt.check_device()?;
        if data.len() != self.len || data.dtype() != self.dtype {
            return Err(Error::Device {
                device: DEVICE.into(),
                message: format!(
                    "copying {} {} elements into a device buffer of {} {}",
                    data.len(),
                    data.dtype(),
                    self.len,
                    self.dtype
                ),
            });
        }
        if self.len > 0 {
            let copied = match (&mut self.slice, data) {
                (Slice::F32(s), Data::F32(d)) => self.rt.stream.memcpy_htod(d, s),
                (Slice::Half(s), Data::F16(d)) => self
                    .rt
                    .stream
                    .memcpy_htod(bytemuck::cast_slice::<_, u16>(d), s),
                (Slice::Half(s), Data::BF16(d)) => self
                    .rt
                    .stream
                    .memcpy_htod(bytemuck::cast_slice::<_, u16>(d), s),
                _ => return Err(self.wrong_type(data.dtype())),
            };
            copied.map_err(|e| self.rt.device_error("copying to the GPU", e))?;
        }
        self.rt.synchronize()
    }

    /// Copies the buffer into `out` (`&mut [f32]`, or a [`DataMut`] view of the buffer's
    /// element type), which must have exactly [`DeviceBuffer::len`] elements. Waits for the
    /// kernels queued before it.
    pub fn copy_to_host<'a>(&self, out: impl Into<DataMut<'a>>) -> Result<(), Error> {
        let mut out = out.into();
        self.rt.check_device()?;
        if out.len() != self.len || out.dtype() != self.dtype {
            return Err(Error::Device {
                device: DEVICE.into(),
                message: format!(
                    "copying a device buffer of {} {} elements into {} {}",
                    self.len,
                    self.dtype,
                    out.len(),
                    out.dtype()
                ),
            });
        }
        if self.len > 0 {
            let copied = match (&self.slice, &mut out) {
                (Slice::F32(s), DataMut::F32(d)) => self.rt.stream.memcpy_dtoh(s, &mut **d),
                (Slice::Half(s), DataMut::F16(d)) => self
                    .rt
                    .stream
                    .memcpy_dtoh(s, bytemuck::cast_slice_mut::<_, u16>(d)),
                (Slice::Half(s), DataMut::BF16(d)) => self
                    .rt
                    .stream
                    .memcpy_dtoh(s, bytemuck::cast_slice_mut::<_, u16>(d)),
                _ => return Err(self.wrong_type(out.dtype())),
            };
            copied.map_err(|e| self.rt.device_error("copying from the GPU", e))?;
        }
        self.rt.synchronize()
    }

    /// A copy of the buffer in new GPU memory (a device-to-device copy, ordered after the
    /// kernels queued before it on the stream).
    pub fn duplicate(&self) -> Result<DeviceBuffer, Error> {
        self.rt.check_device()?;
        let fail = |e| self.rt.device_error("copying on the GPU", e);
        let slice = match &self.slice {
            Slice::F32(s) => Slice::F32(self.rt.stream.clone_dtod(s).map_err(fail)?),
            Slice::Half(s) => Slice::Half(self.rt.stream.clone_dtod(s).map_err(fail)?),
        };
        Ok(DeviceBuffer {
            slice,
            dtype: self.dtype,
            len: self.len,
            rt: self.rt,
        })
    }

    /// The buffer's contents in its own element type. Waits for the kernels queued before it.
    pub fn to_buffer(&self) -> Result<Buffer, Error> {
        let mut out = Buffer::zeros(self.dtype, self.len);
        self.copy_to_host(out.view_mut())?;
        Ok(out)
    }

    /// The buffer's contents as `f32` (exact for every element type). Waits for the kernels
    /// queued before it.
    pub fn to_host(&self) -> Result<Vec<f32>, Error> {
        Ok(self.to_buffer()?.to_f32())
    }
}

impl fmt::Debug for DeviceBuffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "DeviceBuffer({} x {}, gpu={})",
            self.len, self.dtype, self.rt.info.ordinal
        )
    }
}

// ---------------------------------------------------------------------------------------------
// Compiled kernels
// ---------------------------------------------------------------------------------------------

/// What the driver says about a loaded kernel.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KernelAttributes {
    pub registers: u32,
    pub static_shared_bytes: u32,
    /// Local memory per thread (spills, stack), bytes.
    pub local_bytes: u32,
    /// The largest block this kernel can be launched with (registers permitting).
    pub max_threads_per_block: u32,
}

/// A kernel compiled and loaded for one shape and schedule, launched on [`DeviceBuffer`]s.
/// Obtain one with [`compile`] (memoized).
pub struct CompiledKernel {
    rt: &'static Runtime,
    kernel: String,
    func: CudaFunction,
    generated: CudaSource,
    image: super::cubin::Image,
    schedule: String,
    /// Element count of each input, in declaration order, and of the output.
    input_lens: Vec<usize>,
    input_names: Vec<String>,
    input_dtypes: Vec<DType>,
    output_len: usize,
    output_name: String,
    output_dtype: DType,
    attributes: KernelAttributes,
}

impl CompiledKernel {
    /// The CUDA C it was compiled from.
    pub fn source(&self) -> &str {
        &self.generated.source
    }

    /// What the driver loaded: a CUBIN for the device's architecture, or PTX where NVRTC
    /// could not assemble for it (see [`super::cubin`]).
    pub fn image(&self) -> &super::cubin::Image {
        &self.image
    }

    /// The PTX the driver compiled, when the image is PTX (the fallback); `None` for a CUBIN.
    pub fn ptx(&self) -> Option<&str> {
        self.image.ptx()
    }

    pub fn grid(&self) -> [u32; 3] {
        self.generated.grid
    }

    pub fn block(&self) -> [u32; 3] {
        self.generated.block
    }

    /// Dynamic shared memory per block, bytes.
    pub fn shared_bytes(&self) -> u32 {
        self.generated.shared_bytes
    }

    pub fn attributes(&self) -> KernelAttributes {
        self.attributes
    }

    /// Kernel, launch geometry, resources and schedule on one line, for logs and bug reports.
    pub fn describe(&self) -> String {
        let a = &self.attributes;
        format!(
            "kernel `{}` on {}: grid {:?} block {:?}, {} B dynamic + {} B static shared, {} \
             registers, {} B local, {}; schedule {}",
            self.kernel,
            self.rt.info.name,
            self.generated.grid,
            self.generated.block,
            self.generated.shared_bytes,
            a.static_shared_bytes,
            a.registers,
            a.local_bytes,
            self.image.kind(),
            self.schedule
        )
    }

    /// Writes the CUDA C to `dir/<kernel>-<n>.cu` and returns the path (for bug reports).
    pub fn save_source(&self, dir: &std::path::Path) -> Result<PathBuf, Error> {
        save_text(dir, &self.kernel, "cu", &self.generated.source).map_err(Error::Io)
    }

    fn backend(&self, message: String) -> Error {
        Error::Backend {
            kernel: self.kernel.clone(),
            message,
        }
    }

    fn check_args(&self, inputs: &[&DeviceBuffer], out: &DeviceBuffer) -> Result<(), Error> {
        self.rt.alive().map_err(|m| self.backend(m))?;
        if inputs.len() != self.input_lens.len() {
            return Err(self.backend(format!(
                "launched with {} input buffers, the kernel has {} inputs",
                inputs.len(),
                self.input_lens.len()
            )));
        }
        for (((buf, &want), name), &dtype) in inputs
            .iter()
            .zip(&self.input_lens)
            .zip(&self.input_names)
            .zip(&self.input_dtypes)
        {
            if buf.dtype != dtype {
                return Err(self.backend(format!(
                    "input `{name}` holds {} elements on the GPU, the kernel declares {dtype}",
                    buf.dtype
                )));
            }
            if buf.len != want {
                return Err(self.backend(format!(
                    "input `{name}` has {} elements on the GPU, its shape needs {want}",
                    buf.len
                )));
            }
        }
        if out.dtype != self.output_dtype {
            return Err(self.backend(format!(
                "output `{}` holds {} elements on the GPU, the kernel declares {}",
                self.output_name, out.dtype, self.output_dtype
            )));
        }
        if out.len != self.output_len {
            return Err(self.backend(format!(
                "output `{}` has {} elements on the GPU, its shape needs {}",
                self.output_name, out.len, self.output_len
            )));
        }
        Ok(())
    }

    /// Queues one launch on the runtime's stream; arguments already checked.
    fn enqueue(&self, inputs: &[&DeviceBuffer], out: &mut DeviceBuffer) -> Result<(), Error> {
        self.enqueue_on(&self.rt.stream, inputs, out)
    }

    /// Queues one launch on `stream` (the runtime's, or one ordered after it by the caller,
    /// such as the timing stream); arguments already checked.
    fn enqueue_on(
        &self,
        stream: &CudaStream,
        inputs: &[&DeviceBuffer],
        out: &mut DeviceBuffer,
    ) -> Result<(), Error> {
        let g = &self.generated;
        // Hopper TMA kernels take tensor maps of their inputs after the output (encoded over
        // the buffers' addresses: `tensor_map.rs`); other kernels none.
        let maps = super::tensor_map::for_launch(&g.tensor_maps, |i| {
            inputs.get(i).map(|b| b.address(&self.rt.stream))
        })
        .map_err(|m| self.backend(m))?;
        let cfg = LaunchConfig {
            grid_dim: (g.grid[0], g.grid[1], g.grid[2]),
            block_dim: (g.block[0], g.block[1], g.block[2]),
            shared_mem_bytes: g.shared_bytes,
        };
        let mut launch = stream.launch_builder(&self.func);
        for buf in inputs {
            match &buf.slice {
                Slice::F32(s) => launch.arg(s),
                Slice::Half(s) => launch.arg(s),
            };
        }
        match &mut out.slice {
            Slice::F32(s) => launch.arg(s),
            Slice::Half(s) => launch.arg(s),
        };
        for m in &maps {
            launch.arg(m);
        }
        // SAFETY: the generated kernel takes one pointer per input in declaration order, then
        // the output pointer, each of its parameter's storage type (`float` or the 16-bit
        // `unsigned short`), exactly what was pushed (`check_args` checked the types); it reads input `p` only below the
        // product of its shape and writes the output only below its element count, and
        // `check_args` verified every buffer has exactly those lengths. Inputs and output are
        // distinct allocations (`&` vs `&mut`), as `__restrict__` requires.
        unsafe { launch.launch(cfg) }.map_err(|e| {
            self.backend(self.rt.failure(
                &format!(
                    "launching grid {:?} block {:?} with {} B dynamic shared memory",
                    g.grid, g.block, g.shared_bytes
                ),
                e,
            ))
        })?;
        Ok(())
    }

    /// Queues the kernel on the GPU: reads `inputs` (declaration order), overwrites `out`.
    /// Asynchronous: a fault inside the kernel is reported by the next copy to the host,
    /// [`synchronize`] or [`CompiledKernel::time`].
    pub fn launch(&self, inputs: &[&DeviceBuffer], out: &mut DeviceBuffer) -> Result<(), Error> {
        self.check_args(inputs, out)?;
        self.enqueue(inputs, out)
    }

    /// Runs the kernel `warmup` times, then returns `repeats` samples of its run time in
    /// seconds per launch, measured with CUDA events around a CUDA graph of enough
    /// back-to-back launches to last at least 200 µs (one launch for longer kernels), so
    /// the host's launch latency does not count (see [`super::graph_timing`]). Take the
    /// median.
    pub fn time(
        &self,
        inputs: &[&DeviceBuffer],
        out: &mut DeviceBuffer,
        warmup: usize,
        repeats: usize,
    ) -> Result<Vec<f64>, Error> {
        if repeats == 0 {
            self.check_args(inputs, out)?;
            for _ in 0..warmup {
                self.enqueue(inputs, out)?;
            }
            self.rt.synchronize()?;
            return Ok(Vec::new());
        }
        let plan = super::graph_timing::TimingPlan {
            warmup,
            ..Default::default()
        };
        self.timing(inputs, out, &plan, repeats).map(|t| t.samples)
    }

    /// [`time`](Self::time) with a [`TimingPlan`](super::graph_timing::TimingPlan) and what
    /// the timer did: samples, launches per sample, method. The launches run on a private
    /// stream ordered after the runtime's (and the runtime's after them), so other threads'
    /// work on the runtime's stream is not captured into the graph.
    pub fn timing(
        &self,
        inputs: &[&DeviceBuffer],
        out: &mut DeviceBuffer,
        plan: &super::graph_timing::TimingPlan,
        repeats: usize,
    ) -> Result<KernelTiming, Error> {
        use super::graph_timing::{order, timing_stream, Timer};
        self.check_args(inputs, out)?;
        let stream = timing_stream()?;
        order(&stream, &self.rt.stream)?;
        let timed = Timer::new(
            Some(Arc::clone(&stream)),
            plan,
            Box::new(|s: &CudaStream| self.enqueue_on(s, inputs, out)),
        )
        .and_then(|mut timer| {
            let samples = timer.samples(repeats)?;
            Ok(KernelTiming {
                samples,
                launches: timer.launches(),
                method: timer.method(),
                warmup_seconds: timer.warmup_seconds(),
                note: timer.note().map(str::to_string),
            })
        });
        order(&self.rt.stream, &stream)?;
        timed.map_err(|e| match e {
            Error::Device { message, .. } => self.backend(message),
            other => other,
        })
    }
}

/// What [`CompiledKernel::timing`] measured.
#[derive(Clone, Debug, PartialEq)]
pub struct KernelTiming {
    /// Seconds per launch, one per sample.
    pub samples: Vec<f64>,
    /// Launches per sample.
    pub launches: usize,
    pub method: super::graph_timing::Method,
    /// Seconds per launch of the warm-up launches (host latency may count).
    pub warmup_seconds: f64,
    /// Why no CUDA graph was used, if none was.
    pub note: Option<String>,
}

impl fmt::Debug for CompiledKernel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.describe())
    }
}

/// A build failure, cached per key (the facade's `Error` is not `Clone`).
#[derive(Clone, Debug)]
enum BuildError {
    Compile { compiler: String, log: String },
    Backend(String),
    Unavailable(String),
}

impl BuildError {
    fn into_error(self, kernel: &Kernel) -> Error {
        match self {
            BuildError::Compile { compiler, log } => Error::Compile {
                kernel: kernel.name.clone(),
                compiler,
                log,
            },
            BuildError::Backend(message) => Error::Backend {
                kernel: kernel.name.clone(),
                message,
            },
            BuildError::Unavailable(reason) => unavailable(&reason),
        }
    }
}

type Slot = Arc<OnceLock<Result<Arc<CompiledKernel>, BuildError>>>;
/// Loaded modules, bounded (least recently used evicted): a long tuning session loads a
/// module per candidate, and each holds GPU memory until its last user drops it.
static CACHE: OnceLock<Mutex<super::lru::Lru<String, Slot>>> = OnceLock::new();
/// The most loaded modules the per-process memo of [`compile`] keeps.
pub const MODULE_MEMO_ENTRIES: usize = 256;
static SEQ: AtomicU64 = AtomicU64::new(0);

fn save_text(dir: &std::path::Path, stem: &str, ext: &str, text: &str) -> std::io::Result<PathBuf> {
    std::fs::create_dir_all(dir)?;
    let n = SEQ.fetch_add(1, Ordering::Relaxed);
    let path = dir.join(format!("{stem}-{}-{n}.{ext}", std::process::id()));
    std::fs::write(&path, text)?;
    Ok(path)
}

/// Where sources of kernels that failed to build are kept.
fn failure_dir() -> PathBuf {
    std::env::temp_dir().join("tensor-dsl-cuda")
}

/// " (source: /tmp/...)", or nothing if it could not be written.
fn saved(kernel: &Kernel, source: &str) -> String {
    match save_text(&failure_dir(), &kernel.fingerprint(), "cu", source) {
        Ok(p) => format!("\n(generated source: {})", p.display()),
        Err(_) => String::new(),
    }
}

/// Parameter checks shared by [`compile`] and [`run_with`].
fn check_shapes(kernel: &Kernel, extents: &[usize], shapes: &[&[usize]]) -> Result<(), Error> {
    if extents.len() != kernel.indices.len() {
        return Err(Error::Backend {
            kernel: kernel.name.clone(),
            message: format!(
                "{} extents for {} indices",
                extents.len(),
                kernel.indices.len()
            ),
        });
    }
    check_params(kernel, shapes)
}

fn check_params(kernel: &Kernel, shapes: &[&[usize]]) -> Result<(), Error> {
    let bad = |message: String| Error::Backend {
        kernel: kernel.name.clone(),
        message,
    };
    if shapes.len() != kernel.params.len() {
        return Err(bad(format!(
            "{} shapes for {} parameters",
            shapes.len(),
            kernel.params.len()
        )));
    }
    for (p, param) in kernel.params.iter().enumerate() {
        if shapes[p].len() != param.rank {
            return Err(bad(format!(
                "tensor `{}` has rank {}, shape {:?} given",
                param.name, param.rank, shapes[p]
            )));
        }
    }
    Ok(())
}

/// Compiles `kernel` for these extents and shapes with `schedule` and loads it on the GPU.
/// Memoized per process by (kernel fingerprint, shapes, extents, schedule, architecture,
/// codegen version).
///
/// Errors: [`Error::DeviceUnavailable`] without a GPU; [`Error::Compile`] with NVRTC's log
/// (and the path of the saved source) when the generated code does not compile;
/// [`Error::Backend`] when the driver refuses the module or its launch geometry cannot run on
/// this device (too many threads for its registers, too much shared memory).
pub fn compile(
    kernel: &Kernel,
    extents: &[usize],
    shapes: &[&[usize]],
    schedule: &GpuSchedule,
) -> Result<Arc<CompiledKernel>, Error> {
    compile_memo(kernel, extents, shapes, &format!("{schedule:?}"), || {
        codegen::generate(kernel, extents, shapes, schedule)
    })
}

/// [`compile`] for a schedule of either CUDA template (SIMT or tensor cores).
pub fn compile_schedule(
    kernel: &Kernel,
    extents: &[usize],
    shapes: &[&[usize]],
    schedule: &crate::template::cuda::CudaSchedule,
) -> Result<Arc<CompiledKernel>, Error> {
    compile_memo(kernel, extents, shapes, &format!("{schedule:?}"), || {
        crate::template::cuda::generate(kernel, extents, shapes, schedule)
    })
}

/// The memoized compile of [`compile`]: `schedule` (its text) is part of the key, `generate`
/// makes the source on a miss.
fn compile_memo(
    kernel: &Kernel,
    extents: &[usize],
    shapes: &[&[usize]],
    schedule: &str,
    generate: impl FnOnce() -> CudaSource,
) -> Result<Arc<CompiledKernel>, Error> {
    let rt = runtime()?;
    check_shapes(kernel, extents, shapes)?;
    rt.alive().map_err(|message| Error::Backend {
        kernel: kernel.name.clone(),
        message,
    })?;
    let key = format!(
        "{}|{:?}|{:?}|{:?}|sm_{}|v{}",
        kernel.fingerprint(),
        shapes,
        extents,
        schedule,
        rt.info.sm(),
        codegen::CODEGEN_VERSION
    );
    let slot: Slot = {
        let map = CACHE.get_or_init(|| Mutex::new(super::lru::Lru::new(MODULE_MEMO_ENTRIES)));
        let mut map = map.lock().unwrap_or_else(|p| p.into_inner());
        map.get_or_insert_with(key, Slot::default).clone()
    };
    slot.get_or_init(|| load(rt, kernel, shapes, generate(), schedule.to_string()).map(Arc::new))
        .clone()
        .map_err(|e| e.into_error(kernel))
}

/// Compiles and loads CUDA C written elsewhere (a hand-written baseline, a test kernel) with
/// the parameter convention of generated kernels: one `const float*` per input of `kernel`, in
/// declaration order, then the output `float*`, whose lengths `shapes` give. Launched and timed
/// like a generated kernel. Not memoized: each call compiles.
pub fn compile_source(
    kernel: &Kernel,
    shapes: &[&[usize]],
    source: CudaSource,
) -> Result<Arc<CompiledKernel>, Error> {
    let rt = runtime()?;
    check_params(kernel, shapes)?;
    rt.alive().map_err(|message| Error::Backend {
        kernel: kernel.name.clone(),
        message,
    })?;
    load(rt, kernel, shapes, source, "(hand-written source)".into())
        .map(Arc::new)
        .map_err(|e| e.into_error(kernel))
}

/// NVRTC, then the driver: module, function, attributes, launch-geometry checks.
fn load(
    rt: &'static Runtime,
    kernel: &Kernel,
    shapes: &[&[usize]],
    generated: CudaSource,
    schedule: String,
) -> Result<CompiledKernel, BuildError> {
    if generated.source.trim().is_empty() {
        return Err(BuildError::Backend(
            "the CUDA generator produced no code for this kernel".into(),
        ));
    }
    let info = rt.info;
    check_geometry(info, &generated)?;
    let (image, _) = nvrtc::image(
        &kernel.name,
        &generated.source,
        &generated.entry,
        &info.target(),
    )
    .map_err(|e| match e {
        Error::Compile { compiler, log, .. } => BuildError::Compile {
            compiler,
            log: format!("{log}{}", saved(kernel, &generated.source)),
        },
        Error::DeviceUnavailable { reason, .. } => BuildError::Unavailable(reason),
        other => BuildError::Backend(other.to_string()),
    })?;
    load_image(rt, kernel, shapes, generated, schedule, image)
}

/// The launch geometry fits the device: grid and block within its limits, not too many
/// threads per block.
fn check_geometry(info: &DeviceInfo, generated: &CudaSource) -> Result<(), BuildError> {
    let [bx, by, bz] = generated.block;
    let threads = u64::from(bx) * u64::from(by) * u64::from(bz);
    let geometry_ok = generated
        .grid
        .iter()
        .zip(&info.max_grid_dim)
        .all(|(&g, &m)| g >= 1 && g <= m)
        && generated
            .block
            .iter()
            .zip(&info.max_block_dim)
            .all(|(&b, &m)| b >= 1 && b <= m)
        && threads <= u64::from(info.max_threads_per_block);
    if !geometry_ok {
        return Err(BuildError::Backend(format!(
            "launch geometry grid {:?} block {:?} does not fit {} (grid ≤ {:?}, block ≤ {:?}, \
             ≤ {} threads per block)",
            generated.grid,
            generated.block,
            info.name,
            info.max_grid_dim,
            info.max_block_dim,
            info.max_threads_per_block
        )));
    }
    Ok(())
}

/// The driver's half of [`load`]: module, function, attributes, launch-geometry checks, for
/// an image built already (here or, for the measurer's child process, by its parent).
fn load_image(
    rt: &'static Runtime,
    kernel: &Kernel,
    shapes: &[&[usize]],
    generated: CudaSource,
    schedule: String,
    image: super::cubin::Image,
) -> Result<CompiledKernel, BuildError> {
    let info = rt.info;
    let threads = generated
        .block
        .iter()
        .map(|&b| u64::from(b))
        .product::<u64>();
    let load_failure = |what: &str, message: String| {
        BuildError::Backend(format!(
            "{what}: {message}{}",
            saved(kernel, &generated.source)
        ))
    };
    let (func, image) = load_function(rt, &kernel.name, &generated, image)
        .map_err(|m| load_failure("loading the kernel", m))?;
    let attribute = |a: sys::CUfunction_attribute| {
        func.get_attribute(a).map(|v| v.max(0) as u32).map_err(|e| {
            load_failure(
                "reading the kernel's attributes",
                rt.failure(&format!("{a:?}"), e),
            )
        })
    };
    use sys::CUfunction_attribute as F;
    let attributes = KernelAttributes {
        registers: attribute(F::CU_FUNC_ATTRIBUTE_NUM_REGS)?,
        static_shared_bytes: attribute(F::CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES)?,
        local_bytes: attribute(F::CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES)?,
        max_threads_per_block: attribute(F::CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK)?,
    };
    if threads > u64::from(attributes.max_threads_per_block) {
        return Err(BuildError::Backend(format!(
            "a block of {threads} threads is more than this kernel can run: it uses {} registers \
             per thread, which allows at most {} threads per block",
            attributes.registers, attributes.max_threads_per_block
        )));
    }
    let shared_total =
        u64::from(generated.shared_bytes) + u64::from(attributes.static_shared_bytes);
    if shared_total > u64::from(info.max_shared_per_block_optin) {
        return Err(BuildError::Backend(format!(
            "{} B of shared memory per block ({} dynamic + {} static) is more than {} allows ({} B)",
            shared_total,
            generated.shared_bytes,
            attributes.static_shared_bytes,
            info.name,
            info.max_shared_per_block_optin
        )));
    }
    if shared_total > u64::from(DEFAULT_SHARED_LIMIT) {
        func.set_attribute(
            F::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
            generated.shared_bytes as i32,
        )
        .map_err(|e| {
            load_failure(
                "opting in to more shared memory",
                rt.failure(&format!("{} B dynamic", generated.shared_bytes), e),
            )
        })?;
    }
    let count = |p: usize| shapes[p].iter().product::<usize>();
    let inputs = kernel.inputs();
    Ok(CompiledKernel {
        rt,
        kernel: kernel.name.clone(),
        func,
        generated,
        image,
        schedule,
        input_lens: inputs.iter().map(|&p| count(p)).collect(),
        input_names: inputs
            .iter()
            .map(|&p| kernel.params[p].name.clone())
            .collect(),
        input_dtypes: inputs.iter().map(|&p| kernel.params[p].dtype).collect(),
        output_len: count(kernel.output),
        output_name: kernel.params[kernel.output].name.clone(),
        output_dtype: kernel.params[kernel.output].dtype,
        attributes,
    })
}

// ---------------------------------------------------------------------------------------------
// Host-tensor calls
// ---------------------------------------------------------------------------------------------

/// Compiles (once per process) and runs `kernel` with the default schedule for this GPU.
/// Same arguments as the CPU runtime: `shapes` and `data` indexed by parameter id (the
/// output's data slot ignored), `out` the output buffer. Inputs are copied to the GPU and the
/// output back.
pub fn run(
    kernel: &Kernel,
    extents: &[usize],
    shapes: &[&[usize]],
    data: &[Data<'_>],
    out: DataMut<'_>,
) -> Result<(), Error> {
    let info = available().map_err(|r| unavailable(&r))?;
    let schedule = default_schedule(kernel, extents, &info.target());
    run_with(kernel, extents, shapes, data, out, &schedule)
}

/// [`run`] with a given schedule.
pub fn run_with(
    kernel: &Kernel,
    extents: &[usize],
    shapes: &[&[usize]],
    data: &[Data<'_>],
    out: DataMut<'_>,
    schedule: &GpuSchedule,
) -> Result<(), Error> {
    runtime()?;
    check_shapes(kernel, extents, shapes)?;
    run_host(kernel, shapes, data, out, |inputs, output| {
        let compiled = compile(kernel, extents, shapes, schedule)?;
        compiled.launch(inputs, output)?;
        Ok(compiled.describe())
    })
}

/// [`run_with`] for a schedule of either CUDA template (SIMT or tensor cores).
pub fn run_schedule(
    kernel: &Kernel,
    extents: &[usize],
    shapes: &[&[usize]],
    data: &[Data<'_>],
    out: DataMut<'_>,
    schedule: &crate::template::cuda::CudaSchedule,
) -> Result<(), Error> {
    runtime()?;
    check_shapes(kernel, extents, shapes)?;
    run_host(kernel, shapes, data, out, |inputs, output| {
        let compiled = compile_schedule(kernel, extents, shapes, schedule)?;
        compiled.launch(inputs, output)?;
        Ok(compiled.describe())
    })
}

/// A host-tensor call around `launch`: checks the buffers against `shapes`, copies the inputs
/// (`data` by parameter id) to the GPU, lets `launch` queue the kernel on them (it returns the
/// launch's description), and copies the output back into `out`, reporting a fault inside
/// the kernel against it.
pub fn run_host(
    kernel: &Kernel,
    shapes: &[&[usize]],
    data: &[Data<'_>],
    out: DataMut<'_>,
    launch: impl FnOnce(&[&DeviceBuffer], &mut DeviceBuffer) -> Result<String, Error>,
) -> Result<(), Error> {
    let bad = |message: String| Error::Backend {
        kernel: kernel.name.clone(),
        message,
    };
    // The buffers must be exactly what `bind` checked; anything else would be unsound.
    super::check_buffers(kernel, shapes, data, &out).map_err(bad)?;
    let inputs = kernel
        .inputs()
        .iter()
        .map(|&p| DeviceBuffer::from_host(data[p]))
        .collect::<Result<Vec<_>, _>>()?;
    let refs: Vec<&DeviceBuffer> = inputs.iter().collect();
    let mut output = DeviceBuffer::alloc(out.dtype(), out.len())?;
    let describe = launch(&refs, &mut output)?;
    output.copy_to_host(out).map_err(|e| match e {
        // A fault inside the kernel shows up at this copy: report it against the kernel.
        Error::Device { message, .. } => bad(format!("{message}\n{describe}")),
        other => other,
    })
}

// ---------------------------------------------------------------------------------------------
// Loading images (CUBIN, PTX as the fallback) and kernels built elsewhere
// ---------------------------------------------------------------------------------------------

/// Why loading an image failed: at the module (the driver refused the image) or later.
struct LoadFailure {
    message: String,
    at_module: bool,
}

/// Loads `image` as a module and finds `entry` in it.
fn try_load(
    rt: &'static Runtime,
    image: &super::cubin::Image,
    entry: &str,
) -> Result<CudaFunction, LoadFailure> {
    use super::cubin::Image;
    let module = guarded("loading the module", || {
        let data = match image {
            Image::Cubin { bytes, .. } => cudarc::nvrtc::Ptx::from_binary(bytes.clone()),
            Image::Ptx { text, .. } if !text.contains('\0') => {
                cudarc::nvrtc::Ptx::from_src(text.clone())
            }
            Image::Ptx { .. } => return Err("NUL byte in the PTX".to_string()),
        };
        rt.ctx
            .load_module(data)
            .map_err(|e| rt.failure(&format!("loading the {}", image.kind()), e))
    })
    .map_err(|message| LoadFailure {
        message,
        at_module: true,
    })?;
    guarded("finding the entry point", || {
        module
            .load_function(entry)
            .map_err(|e| rt.failure(&format!("finding the entry point `{entry}`"), e))
    })
    .map_err(|message| LoadFailure {
        message,
        at_module: false,
    })
}

/// The kernel `generated.entry` of `image`, loaded; when the driver refuses a CUBIN (and the
/// context is still usable), PTX of the same source instead, with the reason logged once.
/// Returns the image that was loaded.
fn load_function(
    rt: &'static Runtime,
    name: &str,
    generated: &CudaSource,
    image: super::cubin::Image,
) -> Result<(CudaFunction, super::cubin::Image), String> {
    use super::cubin::Image;
    if generated.entry.contains('\0') {
        return Err("NUL byte in the entry name".into());
    }
    let failure = match try_load(rt, &image, &generated.entry) {
        Ok(f) => return Ok((f, image)),
        Err(f) => f,
    };
    let Image::Cubin { arch, .. } = &image else {
        return Err(failure.message);
    };
    if !failure.at_module || rt.alive().is_err() {
        return Err(failure.message);
    }
    let reason = format!(
        "the driver (CUDA {}) refused the {arch} CUBIN from NVRTC {}: {}",
        version_text(rt.info.driver_version),
        nvrtc::version_text(),
        failure.message
    );
    let ptx = nvrtc::ptx_fallback(name, &generated.source, rt.info.sm(), reason)
        .map_err(|e| format!("{}; the PTX fallback: {e}", failure.message))?;
    try_load(rt, &ptx, &generated.entry)
        .map(|f| (f, ptx))
        .map_err(|f| f.message)
}

/// Loads a kernel compiled elsewhere — `image` built from `generated.source` by
/// [`nvrtc::image`] for this GPU, e.g. by the measurer's parent process — with the parameter
/// convention and checks of [`compile`]: `shapes` by parameter, launch geometry and shared
/// memory from `generated`. Not memoized.
///
/// Errors: as [`compile_source`], without the compile.
pub fn load_prebuilt(
    kernel: &Kernel,
    shapes: &[&[usize]],
    generated: CudaSource,
    image: super::cubin::Image,
    schedule: &str,
) -> Result<Arc<CompiledKernel>, Error> {
    let rt = runtime()?;
    check_params(kernel, shapes)?;
    rt.alive().map_err(|message| Error::Backend {
        kernel: kernel.name.clone(),
        message,
    })?;
    check_geometry(rt.info, &generated)
        .and_then(|()| load_image(rt, kernel, shapes, generated, schedule.to_string(), image))
        .map(Arc::new)
        .map_err(|e| e.into_error(kernel))
}

/// Whether the runtime's CUDA context is lost (a sticky error, such as a kernel's illegal
/// address, happened in this process): `Some(the error)`.
pub fn lost() -> Option<String> {
    let rt = RUNTIME.get()?.as_ref().ok()?;
    rt.lost.lock().unwrap_or_else(|p| p.into_inner()).clone()
}

/// The runtime's context and stream, for the timing helper ([`super::graph_timing`]).
pub(crate) fn context_and_stream() -> Result<(Arc<CudaContext>, Arc<CudaStream>), Error> {
    let rt = runtime()?;
    rt.check_device()?;
    Ok((Arc::clone(&rt.ctx), Arc::clone(&rt.stream)))
}

/// A failed driver call as an [`Error::Device`], recording a sticky error (the context is
/// lost from then on), for code beside the runtime that calls the driver.
pub(crate) fn driver_error(what: &str, e: DriverError) -> Error {
    match runtime() {
        Ok(rt) => rt.device_error(what, e),
        Err(other) => other,
    }
}
