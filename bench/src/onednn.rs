//! The oneDNN baselines, through oneDNN's C API (v2: Debian `libdnnl2`, oneDNN 2.6), loaded at
//! run time:
//!
//! - **convolution**: `dnnl_convolution_forward_desc_init` (forward inference, direct) with
//!   `format_tag any` for source, weights and destination, so oneDNN picks its own
//!   layouts (blocked `nChw16c`, `nhwc`, ... whatever its implementation prefers). The
//!   weights are reordered from FCRS once, outside the timed calls. Two columns: the convolution alone on the source reordered once in
//!   advance (oneDNN's best case: a network that stays in its layouts), and the convolution
//!   with the NCHW → its source layout and its destination layout → NCHW reorders inside
//!   every call (what a caller holding NCHW tensors pays). With half-precision operands
//!   ([`Conv::typed`]) the source and weights are `bf16` (or `f16`) copies of the `f32`
//!   inputs (the weights' before their reorder; the source's once per input, in the
//!   bench's first, untimed call: a caller would hold it in that type), the destination
//!   `f32`; a CPU where oneDNN has only its reference code for the type gets no column.
//! - **matmul** and **batched matmul**: `dnnl_matmul_desc_init` on the tensors as they are
//!   (plain strided descriptors, transposed operands as strides, no copy).
//!
//! oneDNN threads with OpenMP on every core, like our kernels. The C API's descriptors are
//! opaque fixed-size structs here: this module allocates them larger than oneDNN 2.x's
//! (`dnnl_memory_desc_t` is under 1 KiB, an op descriptor under 8 KiB) and never reads their
//! fields; the enum values are those of oneDNN 2.x's `dnnl_types.h`.
//!
//! `BENCH_ONEDNN=/path/to/libdnnl.so.2` loads it from there instead of the library path.

use std::ffi::{c_char, c_int, c_uint, c_void};
use std::sync::OnceLock;

use crate::workloads::{self, Op};
use tensor_dsl::ir::DType;
use tensor_dsl::Buffer;

type Status = c_int;
type Handle = *mut c_void;

const MD_BYTES: usize = 4096;
const OP_BYTES: usize = 32 * 1024;

/// An opaque `dnnl_memory_desc_t`.
#[repr(C, align(64))]
struct Md([u8; MD_BYTES]);

/// An opaque op descriptor (`dnnl_convolution_desc_t`, `dnnl_matmul_desc_t`).
#[repr(C, align(64))]
struct OpDesc([u8; OP_BYTES]);

impl Md {
    fn zeroed() -> Box<Md> {
        Box::new(Md([0; MD_BYTES]))
    }
}

/// `dnnl_exec_arg_t`.
#[repr(C)]
struct ExecArg {
    arg: c_int,
    memory: Handle,
}

// dnnl_types.h (oneDNN 2.x).
const CPU_ENGINE: c_int = 1;
const STREAM_DEFAULT_FLAGS: c_uint = 1;
const F32: c_int = 3;
const BF16: c_int = 2;
const F16: c_int = 1;
const FORMAT_TAG_ANY: c_int = 1;
const FORWARD_INFERENCE: c_int = 96;
const CONVOLUTION_DIRECT: c_int = 1;
const QUERY_IMPL_INFO_STR: c_int = 8;
const QUERY_SRC_MD: c_int = 129;
const QUERY_WEIGHTS_MD: c_int = 131;
const QUERY_DST_MD: c_int = 133;
const ARG_SRC: c_int = 1;
const ARG_DST: c_int = 17;
const ARG_WEIGHTS: c_int = 33;
const ARG_FROM: c_int = ARG_SRC;
const ARG_TO: c_int = ARG_DST;
/// `DNNL_MEMORY_ALLOCATE`: the library allocates the buffer.
const MEMORY_ALLOCATE: Handle = usize::MAX as Handle;

type Unary = unsafe extern "C" fn(Handle) -> Status;

/// The C API functions used here.
struct Api {
    engine_create: unsafe extern "C" fn(*mut Handle, c_int, usize) -> Status,
    stream_create: unsafe extern "C" fn(*mut Handle, Handle, c_uint) -> Status,
    md_by_tag: unsafe extern "C" fn(*mut Md, c_int, *const i64, c_int, c_int) -> Status,
    md_by_strides: unsafe extern "C" fn(*mut Md, c_int, *const i64, c_int, *const i64) -> Status,
    #[allow(clippy::type_complexity)]
    conv_desc: unsafe extern "C" fn(
        *mut OpDesc,
        c_int,
        c_int,
        *const Md,
        *const Md,
        *const Md,
        *const Md,
        *const i64,
        *const i64,
        *const i64,
    ) -> Status,
    matmul_desc:
        unsafe extern "C" fn(*mut OpDesc, *const Md, *const Md, *const Md, *const Md) -> Status,
    pd_create: unsafe extern "C" fn(
        *mut Handle,
        *const OpDesc,
        *const c_void,
        Handle,
        *const c_void,
    ) -> Status,
    reorder_pd_create: unsafe extern "C" fn(
        *mut Handle,
        *const Md,
        Handle,
        *const Md,
        Handle,
        *const c_void,
    ) -> Status,
    pd_query: unsafe extern "C" fn(Handle, c_int, c_int, *mut c_void) -> Status,
    pd_query_md: unsafe extern "C" fn(Handle, c_int, c_int) -> *const Md,
    pd_destroy: Unary,
    primitive_create: unsafe extern "C" fn(*mut Handle, Handle) -> Status,
    primitive_destroy: Unary,
    memory_create: unsafe extern "C" fn(*mut Handle, *const Md, Handle, Handle) -> Status,
    memory_set_handle: unsafe extern "C" fn(Handle, Handle) -> Status,
    memory_destroy: Unary,
    md_equal: unsafe extern "C" fn(*const Md, *const Md) -> c_int,
    execute: unsafe extern "C" fn(Handle, Handle, c_int, *const ExecArg) -> Status,
    stream_wait: Unary,
}

/// The loaded library with one CPU engine and stream for the process.
struct Dnnl {
    api: Api,
    engine: Handle,
    stream: Handle,
    version: String,
}

// SAFETY: the engine and stream are only used from the bench's main thread, one call at a
// time; oneDNN's CPU engine and an in-order stream are safe to use from any one thread.
unsafe impl Send for Dnnl {}
// SAFETY: as above.
unsafe impl Sync for Dnnl {}

fn check(what: &str, status: Status) -> Result<(), String> {
    if status == 0 {
        Ok(())
    } else {
        Err(format!("oneDNN {what} failed (dnnl_status_t {status})"))
    }
}

fn get() -> Result<&'static Dnnl, String> {
    static LIB: OnceLock<Result<Dnnl, String>> = OnceLock::new();
    LIB.get_or_init(load).as_ref().map_err(Clone::clone)
}

/// The oneDNN version (`oneDNN 2.6.3`), or why oneDNN is not available.
pub fn version() -> Result<String, String> {
    get().map(|d| d.version.clone())
}

/// Set to a path to load oneDNN from there only (a path that does not exist skips the
/// columns).
pub const ENV: &str = "BENCH_ONEDNN";

fn load() -> Result<Dnnl, String> {
    let mut last = String::new();
    let mut found = None;
    let chosen = std::env::var(ENV).ok().filter(|s| !s.is_empty());
    let names: Vec<&str> = match &chosen {
        Some(path) => vec![path.as_str()],
        None => vec!["libdnnl.so.2", "libdnnl.so"],
    };
    for name in names {
        // SAFETY: loading oneDNN runs its initialisers, sound at any time.
        match unsafe { libloading::Library::new(name) } {
            Ok(lib) => {
                found = Some(lib);
                break;
            }
            Err(e) => last = e.to_string(),
        }
    }
    let Some(lib) = found else {
        return Err(format!(
            "oneDNN 2.x not found ({last}); install it with `apt-get install libdnnl2`"
        ));
    };
    // Never unloaded: its OpenMP threads and cached kernels outlive any one baseline.
    let lib: &'static libloading::Library = Box::leak(Box::new(lib));
    macro_rules! sym {
        ($name:literal) => {
            // SAFETY: the field's type is the function's C signature in oneDNN 2.x's
            // dnnl.h.
            *unsafe { lib.get(concat!($name, "\0").as_bytes()) }
                .map_err(|e| format!("oneDNN: {e} (is it oneDNN 2.x?)"))?
        };
    }
    let api = Api {
        engine_create: sym!("dnnl_engine_create"),
        stream_create: sym!("dnnl_stream_create"),
        md_by_tag: sym!("dnnl_memory_desc_init_by_tag"),
        md_by_strides: sym!("dnnl_memory_desc_init_by_strides"),
        conv_desc: sym!("dnnl_convolution_forward_desc_init"),
        matmul_desc: sym!("dnnl_matmul_desc_init"),
        pd_create: sym!("dnnl_primitive_desc_create"),
        reorder_pd_create: sym!("dnnl_reorder_primitive_desc_create"),
        pd_query: sym!("dnnl_primitive_desc_query"),
        pd_query_md: sym!("dnnl_primitive_desc_query_md"),
        pd_destroy: sym!("dnnl_primitive_desc_destroy"),
        primitive_create: sym!("dnnl_primitive_create"),
        primitive_destroy: sym!("dnnl_primitive_destroy"),
        memory_create: sym!("dnnl_memory_create"),
        memory_set_handle: sym!("dnnl_memory_set_data_handle"),
        memory_destroy: sym!("dnnl_memory_destroy"),
        md_equal: sym!("dnnl_memory_desc_equal"),
        execute: sym!("dnnl_primitive_execute"),
        stream_wait: sym!("dnnl_stream_wait"),
    };
    let version_fn: unsafe extern "C" fn() -> *const c_int = sym!("dnnl_version");
    // SAFETY: `dnnl_version` returns a pointer to a static `dnnl_version_t`, whose first
    // fields are `int major, minor, patch`.
    let version = unsafe {
        let v = version_fn();
        if v.is_null() {
            "oneDNN".to_string()
        } else {
            format!("oneDNN {}.{}.{}", *v, *v.add(1), *v.add(2))
        }
    };
    if !version.starts_with("oneDNN 2.") {
        return Err(format!(
            "{version} found; this baseline speaks oneDNN 2.x's C API"
        ));
    }
    let (mut engine, mut stream): (Handle, Handle) = (std::ptr::null_mut(), std::ptr::null_mut());
    // SAFETY: out-pointers to locals; the engine outlives the stream (both live forever).
    unsafe {
        check(
            "engine_create",
            (api.engine_create)(&mut engine, CPU_ENGINE, 0),
        )?;
        check(
            "stream_create",
            (api.stream_create)(&mut stream, engine, STREAM_DEFAULT_FLAGS),
        )?;
    }
    Ok(Dnnl {
        api,
        engine,
        stream,
        version,
    })
}

/// oneDNN's data type for `dtype`.
fn data_type(dtype: DType) -> c_int {
    match dtype {
        DType::F32 => F32,
        DType::BF16 => BF16,
        DType::F16 => F16,
    }
}

/// A plain (strided) memory descriptor of oneDNN data type `dt`.
fn plain_of(d: &Dnnl, dims: &[i64], strides: &[i64], dt: c_int) -> Result<Box<Md>, String> {
    let mut md = Md::zeroed();
    // SAFETY: `md` is larger than `dnnl_memory_desc_t`; dims and strides have `ndims` entries.
    check("memory_desc_init_by_strides", unsafe {
        (d.api.md_by_strides)(
            &mut *md,
            dims.len() as c_int,
            dims.as_ptr(),
            dt,
            strides.as_ptr(),
        )
    })?;
    Ok(md)
}

/// Row-major strides of `dims`.
fn dense(dims: &[i64]) -> Vec<i64> {
    let mut s = vec![1i64; dims.len()];
    for i in (0..dims.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * dims[i + 1];
    }
    s
}

/// A descriptor of oneDNN data type `dt` with `format_tag any`: the primitive picks the
/// layout.
fn any(d: &Dnnl, dims: &[i64], dt: c_int) -> Result<Box<Md>, String> {
    let mut md = Md::zeroed();
    // SAFETY: as in `plain_of`.
    check("memory_desc_init_by_tag", unsafe {
        (d.api.md_by_tag)(
            &mut *md,
            dims.len() as c_int,
            dims.as_ptr(),
            dt,
            FORMAT_TAG_ANY,
        )
    })?;
    Ok(md)
}

/// A primitive descriptor and its primitive, destroyed together.
struct Primitive {
    d: &'static Dnnl,
    pd: Handle,
    prim: Handle,
}

impl Primitive {
    /// From an op descriptor.
    fn new(d: &'static Dnnl, op: &OpDesc) -> Result<Primitive, String> {
        let mut pd: Handle = std::ptr::null_mut();
        // SAFETY: `op` was initialised by a `*_desc_init` call; no attributes, no hint.
        check("primitive_desc_create", unsafe {
            (d.api.pd_create)(&mut pd, op, std::ptr::null(), d.engine, std::ptr::null())
        })?;
        Self::from_pd(d, pd)
    }

    /// A reorder from `src` to `dst` layouts.
    fn reorder(d: &'static Dnnl, src: *const Md, dst: *const Md) -> Result<Primitive, String> {
        let mut pd: Handle = std::ptr::null_mut();
        // SAFETY: both descriptors are initialised and outlive this call.
        check("reorder_primitive_desc_create", unsafe {
            (d.api.reorder_pd_create)(&mut pd, src, d.engine, dst, d.engine, std::ptr::null())
        })?;
        Self::from_pd(d, pd)
    }

    fn from_pd(d: &'static Dnnl, pd: Handle) -> Result<Primitive, String> {
        let mut prim: Handle = std::ptr::null_mut();
        // SAFETY: `pd` is a live primitive descriptor.
        let made = check("primitive_create", unsafe {
            (d.api.primitive_create)(&mut prim, pd)
        });
        let p = Primitive { d, pd, prim };
        made.map(|()| p)
    }

    /// The descriptor of one of its memories (`QUERY_*_MD`), valid while `self` lives.
    fn md(&self, what: c_int) -> Result<*const Md, String> {
        // SAFETY: `pd` is live; the result points into it.
        let md = unsafe { (self.d.api.pd_query_md)(self.pd, what, 0) };
        if md.is_null() {
            Err(format!("oneDNN: no memory descriptor for query {what}"))
        } else {
            Ok(md)
        }
    }

    /// The implementation oneDNN picked (`jit:avx512_core`, `brg:avx512_core`, ...).
    fn implementation(&self) -> String {
        let mut s: *const c_char = std::ptr::null();
        // SAFETY: `impl_info_str` writes a `const char *` owned by the descriptor.
        let ok = unsafe {
            (self.d.api.pd_query)(
                self.pd,
                QUERY_IMPL_INFO_STR,
                0,
                (&mut s as *mut *const c_char).cast(),
            )
        };
        if ok != 0 || s.is_null() {
            return "?".into();
        }
        // SAFETY: a NUL-terminated string owned by the live descriptor.
        unsafe { std::ffi::CStr::from_ptr(s) }
            .to_string_lossy()
            .into_owned()
    }

    /// Executes on the process's stream with `args` (argument id, memory); no wait.
    fn execute(&self, args: &[(c_int, &Memory)]) -> Result<(), String> {
        let args: Vec<ExecArg> = args
            .iter()
            .map(|(arg, m)| ExecArg {
                arg: *arg,
                memory: m.handle,
            })
            .collect();
        // SAFETY: every memory is live and matches the primitive's descriptors.
        check("primitive_execute", unsafe {
            (self.d.api.execute)(self.prim, self.d.stream, args.len() as c_int, args.as_ptr())
        })
    }
}

impl Drop for Primitive {
    fn drop(&mut self) {
        // SAFETY: both handles are live and owned by `self`; a null one is skipped.
        unsafe {
            if !self.prim.is_null() {
                (self.d.api.primitive_destroy)(self.prim);
            }
            if !self.pd.is_null() {
                (self.d.api.pd_destroy)(self.pd);
            }
        }
    }
}

/// A memory object: oneDNN's own buffer, or one of ours set per call.
struct Memory {
    d: &'static Dnnl,
    handle: Handle,
}

impl Memory {
    /// A memory for `md`; `own` lets oneDNN allocate its buffer, else it is set per call.
    fn new(d: &'static Dnnl, md: *const Md, own: bool) -> Result<Memory, String> {
        let mut handle: Handle = std::ptr::null_mut();
        let buffer = if own {
            MEMORY_ALLOCATE
        } else {
            std::ptr::null_mut()
        };
        // SAFETY: `md` is initialised; the buffer is oneDNN's or none yet.
        check("memory_create", unsafe {
            (d.api.memory_create)(&mut handle, md, d.engine, buffer)
        })?;
        Ok(Memory { d, handle })
    }

    /// Points the memory at `data` (which must hold the descriptor's elements and outlive
    /// the next execute and wait).
    fn point_at(&self, data: *const f32) -> Result<(), String> {
        // SAFETY: the memory is live; oneDNN only stores the pointer.
        check("memory_set_data_handle", unsafe {
            (self.d.api.memory_set_handle)(self.handle, data.cast_mut().cast())
        })
    }
}

impl Drop for Memory {
    fn drop(&mut self) {
        // SAFETY: a live memory owned by `self`.
        unsafe {
            (self.d.api.memory_destroy)(self.handle);
        }
    }
}

fn wait(d: &Dnnl) -> Result<(), String> {
    // SAFETY: the process's stream is live.
    check("stream_wait", unsafe { (d.api.stream_wait)(d.stream) })
}

fn dims(v: &[usize]) -> Result<Vec<i64>, String> {
    v.iter()
        .map(|&x| i64::try_from(x).map_err(|_| format!("{x} overflows a oneDNN dim")))
        .collect()
}

/// The convolution column's name (`dtype`: the source's and the weights' type).
pub fn conv_name(dtype: DType, with_reorders: bool, implementation: Option<&str>) -> String {
    let version = version().unwrap_or_else(|_| "oneDNN".into());
    let conv = match dtype {
        DType::F32 => format!("{version} conv"),
        _ => format!("{version} {dtype} conv"),
    };
    let imp = implementation.map_or(String::new(), |i| format!(", {i}"));
    if with_reorders {
        format!("{conv} incl. NCHW reorders{imp}")
    } else {
        format!("{conv} in its own layouts, no reorders{imp}")
    }
}

/// The oneDNN convolution baseline (see the module docs).
pub struct Conv {
    d: &'static Dnnl,
    conv: Primitive,
    with_reorders: bool,
    /// NCHW → the convolution's source layout (`None`: the same layout).
    src_reorder: Option<Primitive>,
    /// The convolution's destination layout → NCHW (`None`: the same layout).
    dst_reorder: Option<Primitive>,
    user_src: Memory,
    user_dst: Memory,
    /// The convolution's source, weights and destination (oneDNN's buffers where the
    /// layout differs from ours).
    src: Option<Memory>,
    weights: Memory,
    dst: Option<Memory>,
    _mds: Vec<Box<Md>>,
    /// Elements of the source and the destination.
    sizes: [usize; 2],
    name: String,
    /// With a half-precision source: its NCHW copy in that type, made from an `f32` input
    /// (the bench's inputs hold values exact in it and never change), and the input it was
    /// made from.
    half: Option<(DType, Buffer, usize)>,
}

impl Conv {
    /// Sets the convolution up on `inputs` (`[x, w]`, NCHW and FCRS): picks the layouts,
    /// reorders the weights, and (for the column without reorders) the source.
    pub fn new(
        cv: &workloads::Conv,
        inputs: &[&[f32]],
        with_reorders: bool,
    ) -> Result<Conv, String> {
        Conv::typed(cv, inputs, with_reorders, DType::F32)
    }

    /// [`Conv::new`] with source and weights of `dtype` (copies of the `f32` inputs in
    /// that type; the destination stays `f32`): oneDNN's `bf16` or `f16` convolution where
    /// this CPU has an optimized implementation (`bf16` with AVX-512 BF16), else an error.
    pub fn typed(
        cv: &workloads::Conv,
        inputs: &[&[f32]],
        with_reorders: bool,
        dtype: DType,
    ) -> Result<Conv, String> {
        let d = get()?;
        let [x, w, ..] = inputs else {
            return Err("the convolution needs two inputs".into());
        };
        let dt = data_type(dtype);
        let (p, q) = cv.out_hw();
        let src_dims = dims(&[cv.n, cv.c, cv.h, cv.w])?;
        let wei_dims = dims(&[cv.f, cv.c, cv.r, cv.s])?;
        let dst_dims = dims(&[cv.n, cv.f, p, q])?;
        if x.len() != cv.n * cv.c * cv.h * cv.w || w.len() != cv.f * cv.c * cv.r * cv.s {
            return Err("oneDNN conv: input sizes do not match the shape".into());
        }
        let user_src_md = plain_of(d, &src_dims, &dense(&src_dims), dt)?;
        let user_wei_md = plain_of(d, &wei_dims, &dense(&wei_dims), dt)?;
        let user_dst_md = plain_of(d, &dst_dims, &dense(&dst_dims), F32)?;
        let (any_src, any_wei, any_dst) = (
            any(d, &src_dims, dt)?,
            any(d, &wei_dims, dt)?,
            any(d, &dst_dims, F32)?,
        );
        let stride = dims(&[cv.stride, cv.stride])?;
        let pad = dims(&[cv.pad, cv.pad])?;
        let mut op = Box::new(OpDesc([0; OP_BYTES]));
        // SAFETY: every descriptor is initialised; no bias; 2-D strides and paddings.
        check("convolution_forward_desc_init", unsafe {
            (d.api.conv_desc)(
                &mut *op,
                FORWARD_INFERENCE,
                CONVOLUTION_DIRECT,
                &*any_src,
                &*any_wei,
                std::ptr::null(),
                &*any_dst,
                stride.as_ptr(),
                pad.as_ptr(),
                pad.as_ptr(),
            )
        })?;
        let conv = Primitive::new(d, &op).map_err(|e| match dtype {
            DType::F32 => e,
            _ => format!("{} has no {dtype} convolution on this CPU ({e})", d.version),
        })?;
        let implementation = conv.implementation();
        if dtype != DType::F32 && implementation.contains("ref") {
            // Its reference code is not what a user of oneDNN gets on a CPU with the type.
            return Err(format!(
                "{} has no optimized {dtype} convolution on this CPU ({implementation})",
                d.version
            ));
        }
        let (src_md, wei_md, dst_md) = (
            conv.md(QUERY_SRC_MD)?,
            conv.md(QUERY_WEIGHTS_MD)?,
            conv.md(QUERY_DST_MD)?,
        );
        // SAFETY: all four descriptors are initialised and live.
        let same = |a: *const Md, b: &Md| unsafe { (d.api.md_equal)(a, b) } != 0;
        let src_same = same(src_md, &user_src_md);
        let dst_same = same(dst_md, &user_dst_md);
        let user_src = Memory::new(d, &*user_src_md, false)?;
        let user_dst = Memory::new(d, &*user_dst_md, false)?;
        let user_wei = Memory::new(d, &*user_wei_md, false)?;
        let weights = Memory::new(d, wei_md, true)?;
        // The weights, once (from a copy in the convolution's type, dropped after).
        let wei_reorder = Primitive::reorder(d, &*user_wei_md, wei_md)?;
        let w_half = (dtype != DType::F32).then(|| Buffer::from_f32(dtype, w));
        user_wei.point_at(
            w_half
                .as_ref()
                .map_or(w.as_ptr(), |h| h.view().as_ptr().cast()),
        )?;
        wei_reorder.execute(&[(ARG_FROM, &user_wei), (ARG_TO, &weights)])?;
        wait(d)?;
        drop(w_half);
        let (src, src_reorder) = if src_same {
            (None, None)
        } else {
            (
                Some(Memory::new(d, src_md, true)?),
                Some(Primitive::reorder(d, &*user_src_md, src_md)?),
            )
        };
        let (dst, dst_reorder) = if dst_same {
            (None, None)
        } else {
            (
                Some(Memory::new(d, dst_md, true)?),
                Some(Primitive::reorder(d, dst_md, &*user_dst_md)?),
            )
        };
        let name = conv_name(dtype, with_reorders, Some(&implementation));
        let mut me = Conv {
            d,
            conv,
            with_reorders,
            src_reorder,
            dst_reorder,
            user_src,
            user_dst,
            src,
            weights,
            dst,
            _mds: vec![
                user_src_md,
                user_wei_md,
                user_dst_md,
                any_src,
                any_wei,
                any_dst,
            ],
            sizes: [x.len(), cv.n * cv.f * p * q],
            name,
            half: (dtype != DType::F32).then(|| (dtype, Buffer::zeros(dtype, 0), 0)),
        };
        if !with_reorders {
            // The source in oneDNN's layout, once.
            let src = me.source(x);
            me.reorder_src(src)?;
            wait(d)?;
        }
        Ok(me)
    }

    /// The elements of the source `x` in the convolution's type: `x` itself, or its
    /// half-precision copy (made again when `x` is another input); valid until the next
    /// call.
    fn source(&mut self, x: &[f32]) -> *const f32 {
        match &mut self.half {
            None => x.as_ptr(),
            Some((dtype, copy, from)) => {
                let key = x.as_ptr() as usize;
                if *from != key || copy.len() != x.len() {
                    *copy = Buffer::from_f32(*dtype, x);
                    *from = key;
                }
                copy.view().as_ptr().cast()
            }
        }
    }

    /// Points the NCHW source at `src` (from [`Conv::source`]) and reorders it into the
    /// convolution's layout where that differs.
    fn reorder_src(&self, src: *const f32) -> Result<(), String> {
        self.user_src.point_at(src)?;
        if let (Some(r), Some(src)) = (&self.src_reorder, &self.src) {
            r.execute(&[(ARG_FROM, &self.user_src), (ARG_TO, src)])?;
        }
        Ok(())
    }

    fn reorder_dst(&self, out: &mut [f32]) -> Result<(), String> {
        self.user_dst.point_at(out.as_ptr())?;
        if let (Some(r), Some(dst)) = (&self.dst_reorder, &self.dst) {
            r.execute(&[(ARG_FROM, dst), (ARG_TO, &self.user_dst)])?;
        }
        Ok(())
    }
}

impl crate::baselines::Baseline for Conv {
    fn name(&self) -> String {
        self.name.clone()
    }

    fn run(&mut self, inputs: &[&[f32]], out: &mut [f32]) -> Result<(), String> {
        let x = inputs.first().ok_or("the convolution needs an input")?;
        if x.len() != self.sizes[0] || out.len() != self.sizes[1] {
            return Err("oneDNN conv: buffer sizes do not match the shape".into());
        }
        if self.with_reorders || self.src.is_none() {
            let src = self.source(x);
            self.reorder_src(src)?;
        }
        if self.dst.is_none() {
            self.user_dst.point_at(out.as_ptr())?;
        }
        let src = self.src.as_ref().unwrap_or(&self.user_src);
        let dst = self.dst.as_ref().unwrap_or(&self.user_dst);
        self.conv
            .execute(&[(ARG_SRC, src), (ARG_WEIGHTS, &self.weights), (ARG_DST, dst)])?;
        if self.with_reorders {
            self.reorder_dst(out)?;
        }
        wait(self.d)
    }

    fn fetch(&mut self, out: &mut [f32]) -> Result<(), String> {
        if !self.with_reorders && self.dst.is_some() {
            self.reorder_dst(out)?;
            wait(self.d)?;
        }
        Ok(())
    }
}

/// The oneDNN matmul baseline (matmul and batched matmul, plain strided layouts).
pub struct Matmul {
    d: &'static Dnnl,
    prim: Primitive,
    mems: [Memory; 3],
    _mds: Vec<Box<Md>>,
    /// Elements each of A, B and C spans.
    sizes: [usize; 3],
    name: String,
    /// With half-precision operands: A and B in that type, made from the `f32` inputs of
    /// the first call (the bench's inputs hold values exact in it and never change) and
    /// the inputs they were made from.
    halves: Option<(DType, [Buffer; 2], [usize; 2])>,
}

impl Matmul {
    /// Sets up the matmul for `op` (a matmul or a batched matmul).
    pub fn new(op: &Op) -> Result<Matmul, String> {
        Matmul::typed(op, DType::F32)
    }

    /// [`Matmul::new`] with operands of `dtype` (`f32` output): oneDNN's `bf16` or `f16`
    /// matmul where this CPU has an implementation (`bf16` with AVX-512 BF16, `f16` with
    /// AVX-512 FP16), else an error.
    pub fn typed(op: &Op, dtype: DType) -> Result<Matmul, String> {
        let d = get()?;
        let dt = data_type(dtype);
        // (dims, strides) of src (A), weights (B) and dst (C).
        let shapes: [(Vec<usize>, Vec<usize>); 3] = match op {
            Op::Matmul { m, n, k } => [
                (vec![*m, *k], vec![*k, 1]),
                (vec![*k, *n], vec![*n, 1]),
                (vec![*m, *n], vec![*n, 1]),
            ],
            Op::BatchMatmul { b, m, n, k, .. } => {
                let Some([la, lb, lc]) = op.batch_strides() else {
                    return Err("a batched matmul without strides".into());
                };
                let st =
                    |l: &workloads::Strides, x: char, y: char| vec![l.of('b'), l.of(x), l.of(y)];
                [
                    (vec![*b, *m, *k], st(&la, 'm', 'k')),
                    (vec![*b, *k, *n], st(&lb, 'k', 'n')),
                    (vec![*b, *m, *n], st(&lc, 'm', 'n')),
                ]
            }
            Op::Conv2d(_) | Op::Stage(_) | Op::GemmBiasRelu { .. } => {
                return Err("oneDNN matmul is for matmuls without an epilogue".into())
            }
        };
        // The bench's layouts are permutations of dense ones: each spans its element count.
        let sizes = shapes.clone().map(|(dv, _)| dv.iter().product());
        let mut mds = Vec::new();
        for (n, (dv, sv)) in shapes.iter().enumerate() {
            let t = if n < 2 { dt } else { F32 };
            mds.push(plain_of(d, &dims(dv)?, &dims(sv)?, t)?);
        }
        let mut desc = Box::new(OpDesc([0; OP_BYTES]));
        // SAFETY: the three descriptors are initialised; no bias.
        check("matmul_desc_init", unsafe {
            (d.api.matmul_desc)(&mut *desc, &*mds[0], &*mds[1], std::ptr::null(), &*mds[2])
        })?;
        let prim = Primitive::new(d, &desc)?;
        let mems = [
            Memory::new(d, &*mds[0], false)?,
            Memory::new(d, &*mds[1], false)?,
            Memory::new(d, &*mds[2], false)?,
        ];
        let implementation = prim.implementation();
        if dtype != DType::F32 && implementation.contains("ref") {
            // Its reference code is not what a user of oneDNN gets on a CPU with the type.
            return Err(format!(
                "{} has no optimized {dtype} matmul on this CPU ({implementation})",
                d.version
            ));
        }
        let name = match dtype {
            DType::F32 => format!("{} matmul, {implementation}", d.version),
            _ => format!("{} {dtype} matmul, {implementation}", d.version),
        };
        Ok(Matmul {
            d,
            prim,
            mems,
            _mds: mds,
            sizes,
            name,
            halves: (dtype != DType::F32).then(|| {
                (
                    dtype,
                    [Buffer::zeros(dtype, 0), Buffer::zeros(dtype, 0)],
                    [0usize; 2],
                )
            }),
        })
    }
}

impl crate::baselines::Baseline for Matmul {
    fn name(&self) -> String {
        self.name.clone()
    }

    fn run(&mut self, inputs: &[&[f32]], out: &mut [f32]) -> Result<(), String> {
        let [a, b, ..] = inputs else {
            return Err("the matmul needs two inputs".into());
        };
        if [a.len(), b.len(), out.len()] != self.sizes {
            return Err("oneDNN matmul: buffer sizes do not match the shape".into());
        }
        match &mut self.halves {
            None => {
                self.mems[0].point_at(a.as_ptr())?;
                self.mems[1].point_at(b.as_ptr())?;
            }
            Some((dtype, halves, from)) => {
                for (n, x) in [a, b].into_iter().enumerate() {
                    let key = x.as_ptr() as usize;
                    if from[n] != key || halves[n].len() != x.len() {
                        halves[n] = Buffer::from_f32(*dtype, x);
                        from[n] = key;
                    }
                }
                self.mems[0].point_at(halves[0].view().as_ptr().cast())?;
                self.mems[1].point_at(halves[1].view().as_ptr().cast())?;
            }
        }
        self.mems[2].point_at(out.as_ptr())?;
        self.prim.execute(&[
            (ARG_SRC, &self.mems[0]),
            (ARG_WEIGHTS, &self.mems[1]),
            (ARG_DST, &self.mems[2]),
        ])?;
        wait(self.d)
    }
}
