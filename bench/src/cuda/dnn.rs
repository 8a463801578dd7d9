//! What the cuDNN baselines (convolution in [`super::baseline`], softmax and pooling in
//! [`super::dnn_rows`]) share: a check that the library loads, a handle on the runtime's
//! stream, and descriptors that destroy themselves once when dropped (so a state that fails
//! half-way through its setup leaks nothing).

use std::sync::Arc;

use cudarc::cudnn::result as dnn;
use cudarc::cudnn::sys as dnn_sys;
use cudarc::driver::CudaStream;
use tensor_dsl::runtime::cuda;

/// An error (what to do) where cuDNN cannot be loaded.
pub fn require_cudnn() -> Result<(), String> {
    // SAFETY: only tries to dlopen the library.
    if unsafe { dnn_sys::is_culib_present() } {
        Ok(())
    } else {
        Err(
            "cuDNN (libcudnn.so.9) is not on the library path: on the GPU machines it \
             comes inside PyTorch's environment (the nvidia-cudnn-cu13 wheel's \
             nvidia/cudnn/lib); put that folder on LD_LIBRARY_PATH"
                .into(),
        )
    }
}

/// A cuDNN object (a handle or a descriptor) and the call that destroys it, made once on drop
/// (errors on teardown are ignored).
pub struct Owned<P: Copy> {
    raw: P,
    destroy: unsafe fn(P) -> Result<(), dnn::CudnnError>,
}

impl<P: Copy> Owned<P> {
    /// Takes `created` (a `create_*` call's result, `what` naming it in the error) with its
    /// `destroy_*` call.
    pub fn new(
        created: Result<P, dnn::CudnnError>,
        destroy: unsafe fn(P) -> Result<(), dnn::CudnnError>,
        what: &str,
    ) -> Result<Owned<P>, String> {
        let raw = created.map_err(|e| format!("creating {what}: {e:?}"))?;
        Ok(Owned { raw, destroy })
    }

    /// The object, for cuDNN calls.
    pub fn raw(&self) -> P {
        self.raw
    }
}

impl<P: Copy> Drop for Owned<P> {
    fn drop(&mut self) {
        // SAFETY: `raw` was created by the call paired with `destroy` and is destroyed here
        // only, once.
        let _ = unsafe { (self.destroy)(self.raw) };
    }
}

/// A cuDNN handle whose calls go to the CUDA runtime's stream.
pub struct Handle {
    handle: Owned<dnn_sys::cudnnHandle_t>,
    stream: Arc<CudaStream>,
}

impl Handle {
    /// A handle on the runtime's stream. cuDNN works on the calling thread's current
    /// context, so the runtime's is made current first.
    pub fn new() -> Result<Handle, String> {
        require_cudnn()?;
        let stream = cuda::stream().map_err(|e| e.to_string())?;
        stream
            .context()
            .bind_to_thread()
            .map_err(|e| format!("binding the CUDA context: {e:?}"))?;
        let handle = Owned::new(dnn::create_handle(), dnn::destroy_handle, "a cuDNN handle")?;
        // SAFETY: a live handle and the runtime's live stream.
        unsafe { dnn::set_stream(handle.raw(), stream.cu_stream() as dnn_sys::cudaStream_t) }
            .map_err(|e| format!("cudnnSetStream: {e:?}"))?;
        Ok(Handle { handle, stream })
    }

    /// The handle, for cuDNN calls.
    pub fn raw(&self) -> dnn_sys::cudnnHandle_t {
        self.handle.raw()
    }

    /// The runtime's stream the handle's calls go to.
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }
}

/// An NCHW tensor descriptor of `dims` elements of `data_t` (`what` names it in errors).
pub fn nchw_tensor(
    data_t: dnn_sys::cudnnDataType_t,
    dims: [i32; 4],
    what: &str,
) -> Result<Owned<dnn_sys::cudnnTensorDescriptor_t>, String> {
    let t = Owned::new(
        dnn::create_tensor_descriptor(),
        dnn::destroy_tensor_descriptor,
        what,
    )?;
    let nchw = dnn_sys::cudnnTensorFormat_t::CUDNN_TENSOR_NCHW;
    // SAFETY: a live descriptor.
    unsafe { dnn::set_tensor4d_descriptor(t.raw(), nchw, data_t, dims) }
        .map_err(|e| format!("{what}: {e:?}"))?;
    Ok(t)
}
