//! cuDNN's softmax and max pooling: the GPU baselines of the `stages` suite's softmax and
//! max-pooling rows (see [`crate::stages`]). Softmax is `cudnnSoftmaxForward` with
//! `CUDNN_SOFTMAX_ACCURATE` (the row maximum subtracted first, as ours does) over each row
//! (`CUDNN_SOFTMAX_MODE_INSTANCE` on an `rows × cols × 1 × 1` tensor); max pooling is
//! `cudnnPoolingForward` with `CUDNN_POOLING_MAX`, whose padding never wins the maximum
//! (the reduction's identity, as in ours). cuDNN has no layer norm outside its graph API, so
//! that row has no GPU baseline here.

use std::sync::Arc;

use cudarc::cudnn::result as dnn;
use cudarc::cudnn::sys as dnn_sys;
use cudarc::driver::CudaStream;
use tensor_dsl::ir::DType;
use tensor_dsl::runtime::cuda::{self, guarded, DeviceBuffer};

use super::baseline::{dim, dnn_type, read_ptr, require_cudnn, write_ptr};
use crate::stages::Stage;

/// Why layer norm has no GPU baseline.
const NO_LAYER_NORM: &str = "cuDNN has no layer norm outside its graph API: no GPU baseline";

/// What the baseline calls for a stage kernel, or why there is none.
pub fn name(stage: &Stage) -> Result<String, String> {
    match stage {
        Stage::Softmax { .. } => Ok("cuDNN softmax forward (accurate, per row)".into()),
        Stage::MaxPool { .. } => Ok("cuDNN max pooling forward".into()),
        Stage::LayerNorm { .. } => Err(NO_LAYER_NORM.into()),
    }
}

/// A prepared cuDNN softmax or max pooling, with its handle and descriptors.
pub struct RowState {
    handle: dnn_sys::cudnnHandle_t,
    x: dnn_sys::cudnnTensorDescriptor_t,
    y: dnn_sys::cudnnTensorDescriptor_t,
    /// Max pooling's window; null for softmax.
    pool: dnn_sys::cudnnPoolingDescriptor_t,
    stream: Arc<CudaStream>,
}

impl Drop for RowState {
    fn drop(&mut self) {
        // SAFETY: each was created by this struct and is destroyed once; null ones (a
        // half-built state) are skipped. Errors on teardown are ignored.
        unsafe {
            if !self.pool.is_null() {
                let _ = dnn_sys::cudnnDestroyPoolingDescriptor(self.pool);
            }
            if !self.y.is_null() {
                let _ = dnn::destroy_tensor_descriptor(self.y);
            }
            if !self.x.is_null() {
                let _ = dnn::destroy_tensor_descriptor(self.x);
            }
            if !self.handle.is_null() {
                let _ = dnn::destroy_handle(self.handle);
            }
        }
    }
}

impl RowState {
    /// The baseline of `stage` on tensors of type `dtype`, on the runtime's stream; an error
    /// (why) for a stage cuDNN does not have.
    pub fn new(stage: &Stage, dtype: DType) -> Result<Box<RowState>, String> {
        require_cudnn()?;
        // The input's and the output's NCHW extents.
        let (x_dims, y_dims) = match *stage {
            Stage::Softmax { rows, cols } => {
                let d = [dim(rows, "rows")?, dim(cols, "cols")?, 1, 1];
                (d, d)
            }
            Stage::MaxPool {
                n,
                c,
                h,
                w,
                k,
                stride,
                pad,
            } => {
                let (p, q) = (
                    (h + 2 * pad - k) / stride + 1,
                    (w + 2 * pad - k) / stride + 1,
                );
                let (n, c) = (dim(n, "N")?, dim(c, "C")?);
                (
                    [n, c, dim(h, "H")?, dim(w, "W")?],
                    [n, c, dim(p, "P")?, dim(q, "Q")?],
                )
            }
            Stage::LayerNorm { .. } => return Err(NO_LAYER_NORM.into()),
        };
        let stream = cuda::stream().map_err(|e| e.to_string())?;
        let mut state = Box::new(RowState {
            handle: std::ptr::null_mut(),
            x: std::ptr::null_mut(),
            y: std::ptr::null_mut(),
            pool: std::ptr::null_mut(),
            stream,
        });
        guarded("setting up cuDNN", || {
            let err = |what: &'static str| move |e: dnn::CudnnError| format!("{what}: {e:?}");
            let s = &mut *state;
            // cuDNN works on the calling thread's current context: make it the runtime's.
            s.stream
                .context()
                .bind_to_thread()
                .map_err(|e| format!("binding the CUDA context: {e:?}"))?;
            s.handle = dnn::create_handle().map_err(err("cudnnCreate"))?;
            s.x = dnn::create_tensor_descriptor().map_err(err("the input descriptor"))?;
            s.y = dnn::create_tensor_descriptor().map_err(err("the output descriptor"))?;
            let nchw = dnn_sys::cudnnTensorFormat_t::CUDNN_TENSOR_NCHW;
            let data_t = dnn_type(dtype);
            // SAFETY: the handle and descriptors were just created.
            unsafe {
                dnn::set_stream(s.handle, s.stream.cu_stream() as dnn_sys::cudaStream_t)
                    .map_err(err("cudnnSetStream"))?;
                dnn::set_tensor4d_descriptor(s.x, nchw, data_t, x_dims)
                    .map_err(err("the input descriptor"))?;
                dnn::set_tensor4d_descriptor(s.y, nchw, data_t, y_dims)
                    .map_err(err("the output descriptor"))?;
            }
            if let Stage::MaxPool { k, stride, pad, .. } = *stage {
                let (k, stride, pad) = (dim(k, "K")?, dim(stride, "stride")?, dim(pad, "pad")?);
                s.pool = dnn::create_pooling_descriptor().map_err(err("the pooling descriptor"))?;
                // SAFETY: a live descriptor; each array holds the 2 entries passed.
                unsafe {
                    dnn::set_pooling_descriptor(
                        s.pool,
                        dnn_sys::cudnnPoolingMode_t::CUDNN_POOLING_MAX,
                        dnn_sys::cudnnNanPropagation_t::CUDNN_NOT_PROPAGATE_NAN,
                        2,
                        &[k, k],
                        &[pad, pad],
                        &[stride, stride],
                    )
                    .map_err(err("the pooling descriptor"))?;
                }
            }
            Ok(())
        })?;
        Ok(state)
    }

    /// Queues one run on the runtime's stream: `x` in, `y` out.
    pub fn launch(&mut self, x: &DeviceBuffer, y: &mut DeviceBuffer) -> Result<(), String> {
        let (alpha, beta) = (1.0f32, 0.0f32);
        let stream = &self.stream;
        let (xp, _x) = read_ptr(x, stream)?;
        let (yp, _y) = write_ptr(y, stream)?;
        let (a, b) = (
            (&alpha as *const f32).cast::<std::ffi::c_void>(),
            (&beta as *const f32).cast::<std::ffi::c_void>(),
        );
        let (xv, yv) = (xp as *const std::ffi::c_void, yp as *mut std::ffi::c_void);
        // SAFETY: the descriptors describe the buffers' extents and type (set from the
        // workload the buffers were made for), alpha and beta outlive the call.
        let result = unsafe {
            if self.pool.is_null() {
                dnn::softmax_forward(
                    self.handle,
                    dnn_sys::cudnnSoftmaxAlgorithm_t::CUDNN_SOFTMAX_ACCURATE,
                    dnn_sys::cudnnSoftmaxMode_t::CUDNN_SOFTMAX_MODE_INSTANCE,
                    a,
                    self.x,
                    xv,
                    b,
                    self.y,
                    yv,
                )
            } else {
                dnn::pooling_forward(self.handle, self.pool, a, self.x, xv, b, self.y, yv)
            }
        };
        result.map_err(|e| format!("cuDNN: {e:?}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn softmax_and_max_pooling_have_a_cudnn_baseline_and_layer_norm_says_why_not() {
        assert!(name(&Stage::Softmax { rows: 2, cols: 3 })
            .unwrap()
            .contains("softmax"));
        let pool = Stage::MaxPool {
            n: 1,
            c: 2,
            h: 8,
            w: 8,
            k: 3,
            stride: 2,
            pad: 1,
        };
        assert!(name(&pool).unwrap().contains("pooling"));
        let ln = Stage::LayerNorm { rows: 2, cols: 3 };
        assert!(name(&ln).unwrap_err().contains("layer norm"));
        assert!(
            crate::cuda::baseline_name(&crate::workloads::Op::Stage(ln), DType::F32)
                .starts_with("none (")
        );
    }
}
