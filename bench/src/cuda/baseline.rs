//! The GPU baselines, on the CUDA runtime's own stream and buffers: cuBLAS for matmuls and
//! batched matmuls, cuDNN's forward convolution for convolutions, and for Bolt's fused
//! epilogue (`c = relu(a · b + bias)`) the cuBLAS GEMM followed by a separate NVRTC-compiled
//! bias + ReLU kernel ([`super::epilogue`]), timed together.
//!
//! The operands' element type picks the call:
//! - `f32`: `sgemm` / `sgemmStridedBatched` with TF32 off (cuBLAS `CUBLAS_DEFAULT_MATH`,
//!   cuDNN `CUDNN_FMA_MATH`; `bench` also sets `NVIDIA_TF32_OVERRIDE=0` before CUDA loads),
//!   so they compute what our kernels compute;
//! - `bf16` / `f16` (`--dtypes`): `cublasGemmEx` / `cublasGemmStridedBatchedEx` with half
//!   inputs, an `f32` output and `CUBLAS_COMPUTE_32F` (tensor cores, f32 accumulation: what
//!   our tensor-core template computes); cuDNN in half precision with `f32` compute and
//!   tensor-core math. cuDNN has no half-input, `f32`-output convolution, so its output is
//!   in the input type ([`output_dtype`]) and the check against ours allows that rounding.
//!
//! cuDNN is given its best chance: every forward algorithm its heuristics list for the
//! problem is run and timed once, and the fastest is the baseline (what
//! `cudnnFindConvolutionForwardAlgorithm` does).
//!
//! The libraries are loaded at run time (`libcublas.so.13`, `libcudnn.so.9` on the library
//! path); without one the baseline is an error that says so, never a panic.

use std::sync::Arc;

use cudarc::cublas::sys as blas_sys;
use cudarc::cublas::{CudaBlas, Gemm, GemmConfig, StridedBatchedConfig};
use cudarc::cudnn::result as dnn;
use cudarc::cudnn::sys as dnn_sys;
use cudarc::driver::{CudaSlice, CudaStream, DevicePtr, DevicePtrMut};
use tensor_dsl::ir::DType;
use tensor_dsl::runtime::cuda::{self, guarded, CompiledKernel, DeviceBuffer};

use super::dnn::{nchw_tensor, Handle, Owned};
use super::epilogue;
use super::gemm_plan::{self, Operand};
use crate::workloads::{Conv, Op};

/// What the report calls the baseline of `op` on the GPU when its operands are `dtype`.
pub fn name(op: &Op, dtype: DType) -> String {
    let half =
        |call: &str| format!("cuBLAS {call} ({dtype} inputs, f32 output, CUBLAS_COMPUTE_32F)");
    match (op, dtype) {
        (Op::Matmul { .. }, DType::F32) => "cuBLAS sgemm (fp32, TF32 off)".into(),
        (Op::Matmul { .. }, _) => half("GemmEx"),
        (Op::BatchMatmul { .. }, DType::F32) => {
            "cuBLAS sgemmStridedBatched (fp32, TF32 off)".into()
        }
        (Op::BatchMatmul { .. }, _) => half("GemmStridedBatchedEx"),
        (Op::GemmBiasRelu { .. }, DType::F32) => {
            "cuBLAS sgemm (fp32, TF32 off) + bias/ReLU kernel".into()
        }
        (Op::GemmBiasRelu { .. }, _) => format!("{} + bias/ReLU kernel", half("GemmEx")),
        (Op::Conv2d(_), DType::F32) => {
            "cuDNN convolution forward (fp32, TF32 off, fastest algorithm)".into()
        }
        (Op::Conv2d(_), _) => format!(
            "cuDNN convolution forward ({dtype} in and out, f32 compute, tensor ops, fastest algorithm)"
        ),
        (Op::Stage(stage), _) => super::dnn_rows::name(stage).unwrap_or_else(|why| format!("none ({why})")),
    }
}

/// The element type of the baseline's output for `op` with operands of type `dtype`: `f32`,
/// except for a half-precision convolution (cuDNN writes it in the input type).
pub fn output_dtype(op: &Op, dtype: DType) -> DType {
    match op {
        Op::Conv2d(_) => dtype,
        _ => DType::F32,
    }
}

/// The relative tolerance for comparing our `f32` output with the baseline's of type
/// `dtype`: the usual 1e-3, or two units in the last place of a half-precision output.
pub fn tolerance(dtype: DType) -> f32 {
    match dtype {
        DType::F32 => 1e-3,
        DType::F16 => 2.0 * 2f32.powi(-10),
        DType::BF16 => 2.0 * 2f32.powi(-7),
    }
}

/// The one element type of both operands (cuBLAS and cuDNN take one type for both).
pub fn operand_dtype(a: DType, b: DType) -> Result<DType, String> {
    if a == b {
        Ok(a)
    } else {
        Err(format!(
            "the operands are {a} and {b}: the library baselines need one type for both"
        ))
    }
}

/// cuBLAS's name for a half-precision operand type (`None` for `f32`, which takes `sgemm`).
pub fn blas_type(dtype: DType) -> Option<blas_sys::cudaDataType> {
    match dtype {
        DType::F32 => None,
        DType::F16 => Some(blas_sys::cudaDataType::CUDA_R_16F),
        DType::BF16 => Some(blas_sys::cudaDataType::CUDA_R_16BF),
    }
}

/// cuDNN's name for an element type.
pub(super) fn dnn_type(dtype: DType) -> dnn_sys::cudnnDataType_t {
    match dtype {
        DType::F32 => dnn_sys::cudnnDataType_t::CUDNN_DATA_FLOAT,
        DType::F16 => dnn_sys::cudnnDataType_t::CUDNN_DATA_HALF,
        DType::BF16 => dnn_sys::cudnnDataType_t::CUDNN_DATA_BFLOAT16,
    }
}

/// Forward algorithms cuDNN knows (`CUDNN_CONVOLUTION_FWD_ALGO_COUNT`).
const ALGOS: usize = 8;

enum Kind {
    Gemm {
        blas: CudaBlas,
        plan: gemm_plan::Plan,
        /// `None`: `f32` operands (`sgemm`); else cuBLAS's half type (`GemmEx`).
        half: Option<blas_sys::cudaDataType>,
        epilogue: Option<Epilogue>,
    },
    Conv(Box<ConvState>),
    /// Softmax or max pooling (one input).
    Rows(Box<super::dnn_rows::RowState>),
}

/// The separate bias + ReLU pass after the GEMM: the GEMM writes `t`, the kernel reads it
/// and the bias and writes the output.
struct Epilogue {
    t: DeviceBuffer,
    kernel: Arc<CompiledKernel>,
}

/// cuDNN through its C API (`cudarc::cudnn::result`): the safe wrappers do not list every
/// algorithm. Descriptors before the handle: fields drop in this order.
struct ConvState {
    x: Owned<dnn_sys::cudnnTensorDescriptor_t>,
    w: Owned<dnn_sys::cudnnFilterDescriptor_t>,
    y: Owned<dnn_sys::cudnnTensorDescriptor_t>,
    conv: Owned<dnn_sys::cudnnConvolutionDescriptor_t>,
    algo: dnn_sys::cudnnConvolutionFwdAlgo_t,
    workspace: Option<CudaSlice<u8>>,
    dnn: Handle,
}

/// A baseline ready to run on given device buffers.
pub struct Baseline {
    kind: Kind,
    /// The library call and, for cuDNN, the algorithm chosen.
    pub description: String,
}

pub(super) fn dim(v: usize, what: &str) -> Result<i32, String> {
    i32::try_from(v).map_err(|_| format!("{what} = {v} does not fit cuBLAS/cuDNN's int"))
}

impl Baseline {
    /// Prepares the baseline for `op` (`inputs` in parameter order, `out` the output, of
    /// type [`output_dtype`]), on the CUDA runtime's stream. For a convolution this runs
    /// every algorithm cuDNN lists (once to warm up, three times timed) and keeps the
    /// fastest.
    pub fn new(
        op: &Op,
        inputs: &[&DeviceBuffer],
        out: &mut DeviceBuffer,
    ) -> Result<Baseline, String> {
        if let Op::Stage(stage) = op {
            let x = inputs.first().ok_or("a stage kernel needs an input")?;
            let state = super::dnn_rows::RowState::new(stage, x.dtype())?;
            return Ok(Baseline {
                kind: Kind::Rows(state),
                description: name(op, x.dtype()),
            });
        }
        let dtype = match inputs {
            [a, b, ..] => operand_dtype(a.dtype(), b.dtype())?,
            _ => return Err("the baseline needs two inputs".into()),
        };
        let row_major = |rows: usize, cols: usize| Operand {
            rows,
            cols,
            rs: cols,
            cs: 1,
            bs: 0,
        };
        match op {
            Op::Matmul { m, n, k } => {
                let plan = gemm_plan::plan(
                    &row_major(*m, *k),
                    &row_major(*k, *n),
                    &row_major(*m, *n),
                    1,
                )?;
                Self::gemm(plan, dtype, None, &name(op, dtype))
            }
            Op::GemmBiasRelu { m, n, k } => {
                let plan = gemm_plan::plan(
                    &row_major(*m, *k),
                    &row_major(*k, *n),
                    &row_major(*m, *n),
                    1,
                )?;
                if inputs.get(2).is_none_or(|b| b.dtype() != DType::F32) {
                    return Err("the bias + ReLU baseline needs an f32 bias as third input".into());
                }
                let kernel = epilogue::kernel()?;
                let shapes: [&[usize]; 3] = [&[*m, *n], &[*n], &[*m, *n]];
                let compiled = cuda::compile_source(&kernel, &shapes, epilogue::source(*m, *n)?)
                    .map_err(|e| format!("the bias + ReLU kernel: {e}"))?;
                let t = DeviceBuffer::zeros(m * n).map_err(|e| e.to_string())?;
                Self::gemm(
                    plan,
                    dtype,
                    Some(Epilogue {
                        t,
                        kernel: compiled,
                    }),
                    &name(op, dtype),
                )
            }
            Op::BatchMatmul {
                b: batch, m, n, k, ..
            } => {
                let Some([la, lb, lc]) = op.batch_strides() else {
                    return Err("a batched matmul without strides (a bug in the bench)".into());
                };
                let (sa, sb, sc) = (|c| la.of(c), |c| lb.of(c), |c| lc.of(c));
                let a = Operand {
                    rows: *m,
                    cols: *k,
                    rs: sa('m'),
                    cs: sa('k'),
                    bs: sa('b'),
                };
                let b = Operand {
                    rows: *k,
                    cols: *n,
                    rs: sb('k'),
                    cs: sb('n'),
                    bs: sb('b'),
                };
                let c = Operand {
                    rows: *m,
                    cols: *n,
                    rs: sc('m'),
                    cs: sc('n'),
                    bs: sc('b'),
                };
                Self::gemm(
                    gemm_plan::plan(&a, &b, &c, *batch)?,
                    dtype,
                    None,
                    &name(op, dtype),
                )
            }
            Op::Conv2d(cv) => Self::conv(cv, dtype, inputs, out),
            Op::Stage(_) => Err("a stage kernel's baseline is cuDNN's (dnn_rows)".into()),
        }
    }

    fn gemm(
        plan: gemm_plan::Plan,
        dtype: DType,
        epilogue: Option<Epilogue>,
        what: &str,
    ) -> Result<Baseline, String> {
        // SAFETY: only tries to dlopen the library.
        if !unsafe { blas_sys::is_culib_present() } {
            return Err(
                "cuBLAS (libcublas.so.13) is not on the library path: put the CUDA toolkit's \
                 lib64 or the nvidia-cublas wheel's lib folder on LD_LIBRARY_PATH"
                    .into(),
            );
        }
        let stream = cuda::stream().map_err(|e| e.to_string())?;
        let blas = guarded("creating a cuBLAS handle", || {
            let blas = CudaBlas::new(stream).map_err(|e| format!("cublasCreate: {e:?}"))?;
            // SAFETY: a live handle; CUBLAS_DEFAULT_MATH keeps fp32 GEMMs in fp32 (no TF32).
            unsafe {
                blas_sys::cublasSetMathMode(
                    *blas.handle(),
                    blas_sys::cublasMath_t::CUBLAS_DEFAULT_MATH,
                )
            }
            .result()
            .map_err(|e| format!("cublasSetMathMode: {e:?}"))?;
            Ok(blas)
        })?;
        for v in [
            plan.m, plan.n, plan.k, plan.ld_l, plan.ld_r, plan.ld_y, plan.batch,
        ] {
            dim(v, "a GEMM size")?;
        }
        Ok(Baseline {
            kind: Kind::Gemm {
                blas,
                plan,
                half: blas_type(dtype),
                epilogue,
            },
            description: format!(
                "{what} (m={} n={} k={} batch={}, op {}{})",
                plan.m,
                plan.n,
                plan.k,
                plan.batch,
                if plan.trans_l { 'T' } else { 'N' },
                if plan.trans_r { 'T' } else { 'N' }
            ),
        })
    }

    fn conv(
        cv: &Conv,
        dtype: DType,
        inputs: &[&DeviceBuffer],
        out: &mut DeviceBuffer,
    ) -> Result<Baseline, String> {
        let (x_buf, w_buf) = match inputs {
            [x, w, ..] => (*x, *w),
            _ => return Err("a convolution needs two inputs".into()),
        };
        let (p, q) = cv.out_hw();
        let dims = |v: [(usize, &str); 4]| -> Result<[i32; 4], String> {
            Ok([
                dim(v[0].0, v[0].1)?,
                dim(v[1].0, v[1].1)?,
                dim(v[2].0, v[2].1)?,
                dim(v[3].0, v[3].1)?,
            ])
        };
        let x_dims = dims([(cv.n, "N"), (cv.c, "C"), (cv.h, "H"), (cv.w, "W")])?;
        let w_dims = dims([(cv.f, "F"), (cv.c, "C"), (cv.r, "R"), (cv.s, "S")])?;
        let y_dims = dims([(cv.n, "N"), (cv.f, "F"), (p, "P"), (q, "Q")])?;
        let (pad, stride) = (dim(cv.pad, "pad")?, dim(cv.stride, "stride")?);
        let (mut state, candidates) = guarded("setting up cuDNN", || {
            let err = |what: &'static str| move |e: dnn::CudnnError| format!("{what}: {e:?}");
            let dnn = Handle::new()?;
            let nchw = dnn_sys::cudnnTensorFormat_t::CUDNN_TENSOR_NCHW;
            let f32_t = dnn_sys::cudnnDataType_t::CUDNN_DATA_FLOAT;
            // The tensors' type; the convolution computes in f32 whatever they are.
            let data_t = dnn_type(dtype);
            let math = if dtype == DType::F32 {
                dnn_sys::cudnnMathType_t::CUDNN_FMA_MATH
            } else {
                dnn_sys::cudnnMathType_t::CUDNN_TENSOR_OP_MATH
            };
            let x = nchw_tensor(data_t, x_dims, "the input descriptor")?;
            let w = Owned::new(
                dnn::create_filter_descriptor(),
                dnn::destroy_filter_descriptor,
                "the filter descriptor",
            )?;
            let y = nchw_tensor(data_t, y_dims, "the output descriptor")?;
            let conv = Owned::new(
                dnn::create_convolution_descriptor(),
                dnn::destroy_convolution_descriptor,
                "the convolution descriptor",
            )?;
            let mut count: std::ffi::c_int = 0;
            // SAFETY: zeroed plain-data structs for cuDNN to fill.
            let mut perf: [dnn_sys::cudnnConvolutionFwdAlgoPerf_t; ALGOS] =
                unsafe { std::mem::zeroed() };
            // SAFETY: every handle and descriptor was just created; `perf` holds ALGOS
            // entries, the count passed.
            unsafe {
                dnn::set_filter4d_descriptor(w.raw(), data_t, nchw, w_dims)
                    .map_err(err("the filter descriptor"))?;
                dnn::set_convolution2d_descriptor(
                    conv.raw(),
                    pad,
                    pad,
                    stride,
                    stride,
                    1,
                    1,
                    dnn_sys::cudnnConvolutionMode_t::CUDNN_CROSS_CORRELATION,
                    f32_t,
                )
                .map_err(err("the convolution descriptor"))?;
                dnn::set_convolution_math_type(conv.raw(), math)
                    .map_err(err("cudnnSetConvolutionMathType"))?;
                dnn::get_convolution_forward_algorithm(
                    dnn.raw(),
                    x.raw(),
                    w.raw(),
                    conv.raw(),
                    y.raw(),
                    ALGOS as std::ffi::c_int,
                    &mut count,
                    perf.as_mut_ptr(),
                )
                .map_err(err("cudnnGetConvolutionForwardAlgorithm_v7"))?;
            }
            let candidates = perf
                .iter()
                .take(count.clamp(0, ALGOS as std::ffi::c_int) as usize)
                .filter(|p| p.status == dnn_sys::cudnnStatus_t::CUDNN_STATUS_SUCCESS)
                .map(|p| p.algo)
                .collect::<Vec<_>>();
            let state = Box::new(ConvState {
                x,
                w,
                y,
                conv,
                algo: dnn_sys::cudnnConvolutionFwdAlgo_t::CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM,
                workspace: None,
                dnn,
            });
            Ok((state, candidates))
        })?;
        if candidates.is_empty() {
            return Err("cuDNN lists no forward algorithm for this convolution".into());
        }
        // Every algorithm listed, each run once to warm up and three times for its time.
        let mut best: Option<(f64, dnn_sys::cudnnConvolutionFwdAlgo_t)> = None;
        let mut failures = Vec::new();
        for algo in candidates {
            state.algo = algo;
            let timed = state.prepare_workspace().and_then(|()| {
                // Timed like every contender (a CUDA graph of the calls, or a spin kernel
                // ahead of them), short rounds: three, median.
                let mut t =
                    super::timer(Box::new(|| state.launch(x_buf, w_buf, &mut *out)), 1, 1e-3)?;
                let mut s = t.samples(3).map_err(|e| e.to_string())?;
                s.sort_by(f64::total_cmp);
                s.get(1).copied().ok_or_else(|| "no samples".to_string())
            });
            match timed {
                Ok(t) if best.is_none_or(|(b, _)| t < b) => best = Some((t, algo)),
                Ok(_) => {}
                Err(e) => failures.push(format!("{algo:?}: {e}")),
            }
        }
        let Some((_, algo)) = best else {
            return Err(format!("no cuDNN algorithm ran: {}", failures.join("; ")));
        };
        state.algo = algo;
        state.prepare_workspace()?;
        Ok(Baseline {
            kind: Kind::Conv(state),
            description: format!("cuDNN convolution forward ({dtype}), {algo:?}"),
        })
    }

    /// Queues one run of the baseline on the runtime's stream.
    pub fn enqueue(
        &mut self,
        inputs: &[&DeviceBuffer],
        out: &mut DeviceBuffer,
    ) -> Result<(), String> {
        let two = || match inputs {
            [a, b, ..] => Ok((*a, *b)),
            _ => Err("the baseline needs two inputs".to_string()),
        };
        match &mut self.kind {
            Kind::Gemm {
                blas,
                plan,
                half,
                epilogue,
            } => {
                let (a, b) = two()?;
                let (l, r) = if plan.swap { (b, a) } else { (a, b) };
                let y = match epilogue {
                    Some(e) => &mut e.t,
                    None => &mut *out,
                };
                match half {
                    None => sgemm(blas, plan, l, r, y)?,
                    Some(ty) => gemm_ex(blas, plan, *ty, l, r, y)?,
                }
                if let Some(e) = epilogue {
                    let bias = inputs
                        .get(2)
                        .ok_or("the bias + ReLU baseline needs a bias")?;
                    e.kernel
                        .launch(&[&e.t, bias], out)
                        .map_err(|e| format!("the bias + ReLU kernel: {e}"))?;
                }
                Ok(())
            }
            Kind::Conv(state) => {
                let (a, b) = two()?;
                state.launch(a, b, out)
            }
            Kind::Rows(state) => {
                let x = inputs.first().ok_or("a stage kernel needs an input")?;
                state.launch(x, out)
            }
        }
    }
}

fn blas_op(t: bool) -> blas_sys::cublasOperation_t {
    if t {
        blas_sys::cublasOperation_t::CUBLAS_OP_T
    } else {
        blas_sys::cublasOperation_t::CUBLAS_OP_N
    }
}

/// `f32` operands: cudarc's `sgemm` / `sgemmStridedBatched`.
fn sgemm(
    blas: &CudaBlas,
    plan: &gemm_plan::Plan,
    l: &DeviceBuffer,
    r: &DeviceBuffer,
    y: &mut DeviceBuffer,
) -> Result<(), String> {
    let gemm = GemmConfig {
        transa: blas_op(plan.trans_l),
        transb: blas_op(plan.trans_r),
        m: plan.m as i32,
        n: plan.n as i32,
        k: plan.k as i32,
        alpha: 1.0f32,
        lda: plan.ld_l as i32,
        ldb: plan.ld_r as i32,
        beta: 0.0f32,
        ldc: plan.ld_y as i32,
    };
    let f = |e: tensor_dsl::Error| e.to_string();
    let (ls, rs) = (l.cuda_slice().map_err(f)?, r.cuda_slice().map_err(f)?);
    let os = y.cuda_slice_mut().map_err(f)?;
    let result = if plan.batch <= 1 {
        // SAFETY: `plan` was derived from the operands' shapes and strides (tested
        // against a model of cuBLAS), so every element cuBLAS touches lies inside
        // the buffers, whose lengths are those of the kernel's tensors.
        unsafe { blas.gemm(gemm, ls, rs, os) }
    } else {
        let cfg = StridedBatchedConfig {
            gemm,
            batch_size: plan.batch as i32,
            stride_a: plan.stride_l as i64,
            stride_b: plan.stride_r as i64,
            stride_c: plan.stride_y as i64,
        };
        // SAFETY: as above, for every batch.
        unsafe { blas.gemm_strided_batched(cfg, ls, rs, os) }
    };
    result.map_err(|e| format!("cuBLAS: {e:?}"))
}

/// Half-precision operands of cuBLAS type `ty`, `f32` output and compute:
/// `cublasGemmEx`, or `cublasGemmStridedBatchedEx` for a batch.
fn gemm_ex(
    blas: &CudaBlas,
    plan: &gemm_plan::Plan,
    ty: blas_sys::cudaDataType,
    l: &DeviceBuffer,
    r: &DeviceBuffer,
    y: &mut DeviceBuffer,
) -> Result<(), String> {
    let stream = cuda::stream().map_err(|e| e.to_string())?;
    let f = |e: tensor_dsl::Error| e.to_string();
    let (lp, _l) = l.half_slice().map_err(f)?.device_ptr(&stream);
    let (rp, _r) = r.half_slice().map_err(f)?.device_ptr(&stream);
    let (yp, _y) = y.cuda_slice_mut().map_err(f)?.device_ptr_mut(&stream);
    let (one, zero) = (1.0f32, 0.0f32);
    let (alpha, beta) = (
        (&one as *const f32).cast::<std::ffi::c_void>(),
        (&zero as *const f32).cast::<std::ffi::c_void>(),
    );
    let f32_t = blas_sys::cudaDataType::CUDA_R_32F;
    let compute = blas_sys::cublasComputeType_t::CUBLAS_COMPUTE_32F;
    let algo = blas_sys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT;
    let (ta, tb) = (blas_op(plan.trans_l), blas_op(plan.trans_r));
    let (m, n, k) = (plan.m as i32, plan.n as i32, plan.k as i32);
    let (lda, ldb, ldc) = (plan.ld_l as i32, plan.ld_r as i32, plan.ld_y as i32);
    let (lp, rp, yp) = (
        lp as *const std::ffi::c_void,
        rp as *const std::ffi::c_void,
        yp as *mut std::ffi::c_void,
    );
    // SAFETY: a live handle on the runtime's stream; `plan` was derived from the operands'
    // shapes and strides (tested against a model of cuBLAS), so every element cuBLAS touches
    // lies inside the buffers (half inputs, an f32 output), whose lengths are those of the
    // kernel's tensors; alpha and beta are f32, as CUBLAS_COMPUTE_32F requires.
    let status = unsafe {
        if plan.batch <= 1 {
            blas_sys::cublasGemmEx(
                *blas.handle(),
                ta,
                tb,
                m,
                n,
                k,
                alpha,
                lp,
                ty,
                lda,
                rp,
                ty,
                ldb,
                beta,
                yp,
                f32_t,
                ldc,
                compute,
                algo,
            )
        } else {
            blas_sys::cublasGemmStridedBatchedEx(
                *blas.handle(),
                ta,
                tb,
                m,
                n,
                k,
                alpha,
                lp,
                ty,
                lda,
                plan.stride_l as i64,
                rp,
                ty,
                ldb,
                plan.stride_r as i64,
                beta,
                yp,
                f32_t,
                ldc,
                plan.stride_y as i64,
                plan.batch as i32,
                compute,
                algo,
            )
        }
    };
    status.result().map_err(|e| format!("cuBLAS GemmEx: {e:?}"))
}

/// The device address of a buffer of either element type, for reading on `stream`.
pub(super) fn read_ptr<'a>(
    buf: &'a DeviceBuffer,
    stream: &'a CudaStream,
) -> Result<(u64, cudarc::driver::SyncOnDrop<'a>), String> {
    let f = |e: tensor_dsl::Error| e.to_string();
    Ok(match buf.dtype() {
        DType::F32 => buf.cuda_slice().map_err(f)?.device_ptr(stream),
        DType::F16 | DType::BF16 => buf.half_slice().map_err(f)?.device_ptr(stream),
    })
}

/// [`read_ptr`], for writing.
pub(super) fn write_ptr<'a>(
    buf: &'a mut DeviceBuffer,
    stream: &'a CudaStream,
) -> Result<(u64, cudarc::driver::SyncOnDrop<'a>), String> {
    let f = |e: tensor_dsl::Error| e.to_string();
    Ok(match buf.dtype() {
        DType::F32 => buf.cuda_slice_mut().map_err(f)?.device_ptr_mut(stream),
        DType::F16 | DType::BF16 => buf.half_slice_mut().map_err(f)?.device_ptr_mut(stream),
    })
}

impl ConvState {
    /// Allocates the chosen algorithm's workspace (none if it needs none).
    fn prepare_workspace(&mut self) -> Result<(), String> {
        let mut bytes = 0usize;
        // SAFETY: live handle and descriptors; cuDNN writes one size_t.
        unsafe {
            dnn_sys::cudnnGetConvolutionForwardWorkspaceSize(
                self.dnn.raw(),
                self.x.raw(),
                self.w.raw(),
                self.conv.raw(),
                self.y.raw(),
                self.algo,
                &mut bytes,
            )
        }
        .result()
        .map_err(|e| format!("workspace size for {:?}: {e:?}", self.algo))?;
        self.workspace = if bytes == 0 {
            None
        } else {
            Some(
                self.dnn
                    .stream()
                    .alloc_zeros::<u8>(bytes)
                    .map_err(|e| format!("allocating {bytes} B of cuDNN workspace: {e:?}"))?,
            )
        };
        Ok(())
    }

    fn launch(
        &mut self,
        x: &DeviceBuffer,
        w: &DeviceBuffer,
        y: &mut DeviceBuffer,
    ) -> Result<(), String> {
        let (alpha, beta) = (1.0f32, 0.0f32);
        let stream = self.dnn.stream();
        let (xp, _x) = read_ptr(x, stream)?;
        let (wp, _w) = read_ptr(w, stream)?;
        let (yp, _y) = write_ptr(y, stream)?;
        let (ws, ws_bytes) = match &mut self.workspace {
            Some(buf) => {
                let bytes = buf.len();
                let (p, _) = buf.device_ptr_mut(stream);
                (p as *mut std::ffi::c_void, bytes)
            }
            None => (std::ptr::null_mut(), 0),
        };
        // SAFETY: the descriptors describe exactly the kernel's tensors (NCHW input, FCRS
        // filter, NFPQ output), whose buffers have those lengths; the workspace is the size
        // cuDNN asked for this algorithm; everything is ordered on the runtime's one stream.
        unsafe {
            dnn::convolution_forward(
                self.dnn.raw(),
                (&alpha as *const f32).cast(),
                self.x.raw(),
                xp as *const std::ffi::c_void,
                self.w.raw(),
                wp as *const std::ffi::c_void,
                self.conv.raw(),
                self.algo,
                ws,
                ws_bytes,
                (&beta as *const f32).cast(),
                self.y.raw(),
                yp as *mut std::ffi::c_void,
            )
        }
        .map_err(|e| format!("cudnnConvolutionForward ({:?}): {e:?}", self.algo))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn half_operands_pick_gemm_ex_and_half_cudnn() {
        let mm = Op::Matmul { m: 2, n: 3, k: 4 };
        let conv = Op::Conv2d(Conv {
            n: 1,
            c: 2,
            h: 5,
            w: 5,
            f: 3,
            r: 3,
            s: 3,
            stride: 1,
            pad: 1,
        });
        assert_eq!(name(&mm, DType::F32), "cuBLAS sgemm (fp32, TF32 off)");
        assert!(name(&mm, DType::BF16).contains("GemmEx (bf16 inputs, f32 output"));
        let bolt = Op::GemmBiasRelu { m: 2, n: 3, k: 4 };
        assert!(name(&bolt, DType::F16).ends_with("+ bias/ReLU kernel"));
        assert!(name(&conv, DType::BF16).contains("bf16 in and out"));
        assert_eq!(blas_type(DType::F32), None);
        assert_eq!(
            blas_type(DType::BF16),
            Some(blas_sys::cudaDataType::CUDA_R_16BF)
        );
        assert_eq!(
            blas_type(DType::F16),
            Some(blas_sys::cudaDataType::CUDA_R_16F)
        );
        assert_eq!(
            dnn_type(DType::BF16),
            dnn_sys::cudnnDataType_t::CUDNN_DATA_BFLOAT16
        );
        // cuDNN writes a half convolution's output in half; cuBLAS writes f32.
        assert_eq!(output_dtype(&conv, DType::F16), DType::F16);
        assert_eq!(output_dtype(&mm, DType::BF16), DType::F32);
        assert!(tolerance(DType::BF16) > tolerance(DType::F16));
        assert!(tolerance(DType::F16) > tolerance(DType::F32));
        assert!(operand_dtype(DType::BF16, DType::F16).is_err());
    }
}
