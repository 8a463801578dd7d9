//! cuDNN's softmax and max pooling: the GPU baselines of the `stages` suite's softmax and
//! max-pooling rows (see [`crate::stages`]). Softmax is `cudnnSoftmaxForward` with
//! `CUDNN_SOFTMAX_ACCURATE` (the row maximum subtracted first, as ours does) over each row
//! (`CUDNN_SOFTMAX_MODE_INSTANCE` on an `rows × cols × 1 × 1` tensor); max pooling is
//! `cudnnPoolingForward` with `CUDNN_POOLING_MAX`, whose padding never wins the maximum
//! (the reduction's identity, as in ours). cuDNN has no layer norm or RMS norm outside its
//! graph API, so those rows have no cuDNN baseline here (PyTorch's, `bench/gpu/torch_stages.py`,
//! times them); nor is the row minimum timed through cuDNN (`cudnnReduceTensor` needs a
//! workspace and indices set-up not written yet).

use cudarc::cudnn::result as dnn;
use cudarc::cudnn::sys as dnn_sys;
use tensor_dsl::ir::DType;
use tensor_dsl::runtime::cuda::{guarded, DeviceBuffer};

use super::baseline::{dim, dnn_type, read_ptr, write_ptr};
use super::dnn::{nchw_tensor, Handle, Owned};
use crate::stages::Stage;

/// Why layer norm has no GPU baseline.
const NO_LAYER_NORM: &str = "cuDNN has no layer norm outside its graph API: no GPU baseline";
/// Why RMS norm has no GPU baseline.
const NO_RMS_NORM: &str = "cuDNN has no RMS norm outside its graph API: no GPU baseline";
/// Why the row minimum has no GPU baseline.
const NO_ROW_MIN: &str = "cuDNN's reduction (cudnnReduceTensor) is not wired up: no GPU baseline";

/// What the baseline calls for a stage kernel, or why there is none.
pub fn name(stage: &Stage) -> Result<String, String> {
    match stage {
        Stage::Softmax { .. } => Ok("cuDNN softmax forward (accurate, per row)".into()),
        Stage::MaxPool { .. } => Ok("cuDNN max pooling forward".into()),
        Stage::LayerNorm { .. } => Err(NO_LAYER_NORM.into()),
        Stage::RmsNorm { .. } => Err(NO_RMS_NORM.into()),
        Stage::RowMin { .. } => Err(NO_ROW_MIN.into()),
    }
}

/// A prepared cuDNN softmax or max pooling, with its handle and descriptors (which drop
/// before the handle, in field order).
pub struct RowState {
    x: Owned<dnn_sys::cudnnTensorDescriptor_t>,
    y: Owned<dnn_sys::cudnnTensorDescriptor_t>,
    /// Max pooling's window; `None` for softmax.
    pool: Option<Owned<dnn_sys::cudnnPoolingDescriptor_t>>,
    dnn: Handle,
}

/// `cudnnDestroyPoolingDescriptor`, in the form [`Owned`] takes (cudarc's `result` module has
/// no wrapper for it).
unsafe fn destroy_pooling(p: dnn_sys::cudnnPoolingDescriptor_t) -> Result<(), dnn::CudnnError> {
    // SAFETY: the caller's: `p` is a live pooling descriptor, destroyed once.
    unsafe { dnn_sys::cudnnDestroyPoolingDescriptor(p) }.result()
}

impl RowState {
    /// The baseline of `stage` on tensors of type `dtype`, on the runtime's stream; an error
    /// (why) for a stage cuDNN does not have.
    pub fn new(stage: &Stage, dtype: DType) -> Result<Box<RowState>, String> {
        // The input's and the output's NCHW extents.
        let (x_dims, y_dims) = match *stage {
            Stage::Softmax { rows, cols } => {
                let d = [dim(rows, "rows")?, dim(cols, "cols")?, 1, 1];
                (d, d)
            }
            Stage::MaxPool { n, c, h, w, .. } => {
                let (p, q) = stage.pooled();
                let (n, c) = (dim(n, "N")?, dim(c, "C")?);
                (
                    [n, c, dim(h, "H")?, dim(w, "W")?],
                    [n, c, dim(p, "P")?, dim(q, "Q")?],
                )
            }
            Stage::LayerNorm { .. } | Stage::RmsNorm { .. } | Stage::RowMin { .. } => {
                return Err(name(stage).err().unwrap_or_default())
            }
        };
        guarded("setting up cuDNN", || {
            let dnn = Handle::new()?;
            let data_t = dnn_type(dtype);
            let x = nchw_tensor(data_t, x_dims, "the input descriptor")?;
            let y = nchw_tensor(data_t, y_dims, "the output descriptor")?;
            let pool = match *stage {
                Stage::MaxPool { k, stride, pad, .. } => {
                    let (k, stride, pad) = (dim(k, "K")?, dim(stride, "stride")?, dim(pad, "pad")?);
                    let pool = Owned::new(
                        dnn::create_pooling_descriptor(),
                        destroy_pooling,
                        "the pooling descriptor",
                    )?;
                    // SAFETY: a live descriptor; each array holds the 2 entries passed.
                    unsafe {
                        dnn::set_pooling_descriptor(
                            pool.raw(),
                            dnn_sys::cudnnPoolingMode_t::CUDNN_POOLING_MAX,
                            dnn_sys::cudnnNanPropagation_t::CUDNN_NOT_PROPAGATE_NAN,
                            2,
                            &[k, k],
                            &[pad, pad],
                            &[stride, stride],
                        )
                    }
                    .map_err(|e| format!("the pooling descriptor: {e:?}"))?;
                    Some(pool)
                }
                _ => None,
            };
            Ok(Box::new(RowState { x, y, pool, dnn }))
        })
    }

    /// Queues one run on the runtime's stream: `x` in, `y` out.
    pub fn launch(&mut self, x: &DeviceBuffer, y: &mut DeviceBuffer) -> Result<(), String> {
        let (alpha, beta) = (1.0f32, 0.0f32);
        let stream = self.dnn.stream();
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
            match &self.pool {
                None => dnn::softmax_forward(
                    self.dnn.raw(),
                    dnn_sys::cudnnSoftmaxAlgorithm_t::CUDNN_SOFTMAX_ACCURATE,
                    dnn_sys::cudnnSoftmaxMode_t::CUDNN_SOFTMAX_MODE_INSTANCE,
                    a,
                    self.x.raw(),
                    xv,
                    b,
                    self.y.raw(),
                    yv,
                ),
                Some(pool) => dnn::pooling_forward(
                    self.dnn.raw(),
                    pool.raw(),
                    a,
                    self.x.raw(),
                    xv,
                    b,
                    self.y.raw(),
                    yv,
                ),
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
        let rms = Stage::RmsNorm { rows: 2, cols: 3 };
        assert!(name(&rms).unwrap_err().contains("RMS norm"));
        let min = Stage::RowMin { rows: 2, cols: 3 };
        assert!(name(&min).unwrap_err().contains("no GPU baseline"));
        assert!(
            crate::cuda::baseline_name(&crate::workloads::Op::Stage(ln), DType::F32)
                .starts_with("none (")
        );
    }
}
