//! CUDA C for the GPU from a [`GpuSchedule`]: the nest of [`crate::lower::gpu`] (see
//! [`crate::template::gpu`] for what each knob means) printed by [`super::printer`] with the
//! CUDA dialect ([`CudaDialect`]).
//!
//! The kernel is `extern "C" __global__ void td_kernel(...)` with the inputs' data pointers
//! in declaration order (`const float *__restrict__ t<p>`, `p` the parameter id; `unsigned short` for
//! `f16`/`bf16` data), then the output (`float *__restrict__ out`). It runs on a one-dimensional grid
//! ([`CudaSource::grid`]) of one-dimensional blocks ([`CudaSource::block`]) and uses static
//! shared memory only. Extents and strides are constants, so the compiler sees every trip
//! count. Inputs must be 16-byte aligned where the schedule stages them with vector loads
//! (`cudaMalloc` gives 256).
//!
//! ```
//! use tensor_dsl::{codegen::cuda, ir::parse_text, template::gpu};
//! let k = parse_text("mm", "c[[i,j]] += a[[i,k]] * b[[k,j]]", None).unwrap();
//! let shapes: [&[usize]; 3] = [&[64, 48], &[48, 40], &[64, 40]];
//! let s = gpu::ansor_default_schedule(&k, &[64, 40, 48], &gpu::GpuTarget::h100());
//! let src = cuda::generate(&k, &[64, 40, 48], &shapes, &s);
//! assert!(src.source.contains("extern \"C\" __global__ void __launch_bounds__(160)"));
//! assert_eq!(src.block, [160, 1, 1]); // 16 x 10 threads, one output element each
//! assert_eq!(src.grid, [16, 1, 1]);
//! ```

use super::builtin_prelude;
use super::printer::{self, Dialect, Lines, LoopContext};
use crate::ir::{DType, Kernel};
use crate::lower::{self, Buffer, Func, HwIndex, LoopKind, Nest, Stmt};
use crate::template::gpu::{GpuSchedule, RegLoop};
use std::fmt::Write as _;

/// Name of the `extern "C" __global__` entry point.
pub const ENTRY: &str = lower::gpu::ENTRY;

/// Version of the generated code's shape; part of every compiled-artifact key.
pub const CODEGEN_VERSION: u32 = 1;

/// A generated kernel and its launch geometry.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CudaSource {
    pub source: String,
    pub entry: String,
    pub grid: [u32; 3],
    pub block: [u32; 3],
    /// Dynamic shared memory, bytes (0 when the kernel uses only static shared memory).
    pub shared_bytes: u32,
    /// The `CUtensorMap` parameters the kernel takes after its output, in order (Hopper
    /// TMA; empty for every other kernel): the runtime encodes each over its input's
    /// buffer at every launch (see [`super::tensor_map`]).
    pub tensor_maps: Vec<super::tensor_map::TensorMapSpec>,
}

/// CUDA C (NVRTC): `__global__` entry with launch bounds, thread indices, barriers, warp
/// shuffles, static shared memory and vector loads.
pub struct CudaDialect;

impl Dialect for CudaDialect {
    fn restrict(&self) -> &'static str {
        "__restrict__"
    }

    fn helper_qualifiers(&self) -> &'static str {
        "static __device__ __forceinline__ "
    }

    fn entry_head(
        &self,
        nest: &Nest,
        func: &Func,
        params: &[String],
        out: &mut Lines,
    ) -> Result<(), String> {
        let threads = nest
            .launch
            .map(|l| l.block.iter().product::<usize>())
            .ok_or("a CUDA kernel needs a launch geometry")?;
        out.line(
            0,
            &format!("extern \"C\" __global__ void __launch_bounds__({threads})"),
        );
        out.line(0, &format!("{}({})", func.name, params.join(", ")));
        out.line(0, "{");
        Ok(())
    }

    fn loop_pragma(&self, kind: LoopKind, cx: LoopContext) -> Result<Option<String>, String> {
        match kind {
            // A partial unroll (the SIMT GEMM's hot loop); a factor of the whole trip count is
            // a full unroll.
            LoopKind::Unrolled(n) if n > 1 && n < cx.trip => {
                Ok(Some(format!("#pragma unroll {n}")))
            }
            LoopKind::Unrolled(_) | LoopKind::Vectorized(_) => Ok(Some("#pragma unroll".into())),
            // Kept a loop (the compiler would unroll a short constant one).
            LoopKind::InOrder => Ok(Some("#pragma unroll 1".into())),
            LoopKind::Serial | LoopKind::ThreadStrided => Ok(None),
            LoopKind::Parallel => Err("CPU-parallel loops cannot be printed as CUDA".into()),
        }
    }

    fn hw_index(&self, hw: HwIndex) -> Result<&'static str, String> {
        Ok(match hw {
            HwIndex::Block => "blockIdx.x",
            HwIndex::Thread => "threadIdx.x",
        })
    }

    fn barrier(&self) -> Result<&'static str, String> {
        Ok("__syncthreads();")
    }

    fn shuffle_xor(&self, mask: &str, value: &str, lane: &str) -> Result<String, String> {
        Ok(format!("__shfl_xor_sync({mask}, {value}, {lane})"))
    }

    fn alloc_shared(&self, buf: &Buffer) -> Result<String, String> {
        Ok(format!(
            "__shared__ {}{} {}[{}];",
            buf.align
                .map_or(String::new(), |a| format!("__align__({a}) ")),
            self.storage_type(buf.dtype),
            buf.name,
            buf.elements()
        ))
    }

    fn align(&self, bytes: usize) -> Result<String, String> {
        Ok(format!("__align__({bytes}) "))
    }

    fn module_array(&self, a: &lower::ModuleArray) -> Result<String, String> {
        let space = match a.space {
            lower::MemSpace::Device => "__device__",
            lower::MemSpace::Shared => "__shared__",
        };
        let ty = match a.elem {
            lower::ElemKind::F32 => "float",
            lower::ElemKind::I32 => "int",
        };
        Ok(format!(
            "{space} __align__({}) {ty} {}[{}];",
            a.align.max(4),
            a.name,
            a.len.max(1)
        ))
    }

    fn shared_address(&self, name: &str) -> Result<String, String> {
        Ok(format!("td_smem({name})"))
    }

    fn async_copy(
        &self,
        dst: &str,
        src: &str,
        bytes: usize,
        ok: Option<&str>,
    ) -> Result<String, String> {
        if bytes != 4 && bytes != 16 {
            return Err(format!("cp.async of {bytes} bytes is not printed"));
        }
        Ok(format!(
            "td_cp_async{bytes}({dst}, {src}, {});",
            ok.unwrap_or("true")
        ))
    }

    fn async_commit(&self) -> Result<String, String> {
        Ok("td_cp_async_commit();".into())
    }

    fn async_wait(&self, n: usize) -> Result<String, String> {
        Ok(format!("td_cp_async_wait<{n}>();"))
    }

    fn vector_type(&self, dtype: DType, width: usize) -> Result<String, String> {
        Ok(format!("{}{width}", self.storage_type(dtype)))
    }

    fn deref_as(&self, ty: &str, ptr: &str) -> String {
        format!("*reinterpret_cast<{ty} *>({ptr})")
    }
}

/// The file header: what this is, for a human reading a dump.
fn header(nest: &Nest, extents: &[usize], s: &GpuSchedule) -> String {
    let k = nest.kernel;
    let mut h = String::new();
    let stem = |i: usize| super::index_name(k, i)[1..].to_string();
    let _ = writeln!(
        h,
        "/* tensor-dsl generated CUDA C (codegen v{CODEGEN_VERSION})"
    );
    let _ = writeln!(
        h,
        " * kernel `{}` fingerprint {}",
        super::c_identifier(&k.name),
        k.fingerprint()
    );
    let _ = writeln!(h, " *   {k}");
    let _ = writeln!(h, " * extents: {}", super::extents_text(k, extents));
    if k.params.iter().any(|p| p.dtype != crate::lower::COMPUTE) {
        let _ = writeln!(
            h,
            " * element types: {} (arithmetic in float)",
            k.dtypes_text()
        );
    }
    if let Some(t) = &s.simt {
        let launch = nest.launch.unwrap_or(lower::Launch {
            grid: [0; 3],
            block: [0; 3],
        });
        let g = s.gemm(k);
        let pipeline = if t.pipeline == 0 {
            "register prefetch into 2 shared buffers".to_string()
        } else {
            format!("cp.async, {} stages", t.pipeline)
        };
        let loads = |side| {
            g.as_ref().map_or(String::new(), |g| {
                let p = t.plan(g, side);
                format!(
                    "{}{}{}",
                    if p.table {
                        "table"
                    } else if p.k_fast {
                        "along k"
                    } else {
                        "along rows"
                    },
                    if p.width == 4 { ", float4" } else { "" },
                    if p.asynchronous { ", cp.async" } else { "" }
                )
            })
        };
        let _ = writeln!(
            h,
            " * schedule (SIMT GEMM): block tile {} x {}, k tile {}{}, thread tile {} x {}, \
             warps of {} x {} threads, hot loop unrolled x{}\n *   {pipeline}; loads: a {}, b {}; \
             raster groups of {} tile rows; split-K {}\n *   {} threads, {} blocks, \
             {} bytes of shared memory\n */",
            t.bm,
            t.bn,
            t.bk,
            if g.as_ref().is_some_and(|g| t.fuses(g)) {
                " (reduction fused)"
            } else {
                ""
            },
            t.tm,
            t.tn,
            t.warp_m,
            32 / t.warp_m,
            t.unroll,
            loads(crate::template::gpu_simt::Side::A),
            loads(crate::template::gpu_simt::Side::B),
            t.raster,
            t.split,
            launch.block[0],
            launch.grid[0],
            nest.shared_bytes()
        );
        return h;
    }
    let _ = writeln!(h, " * schedule (Ansor multi-level tiling):");
    for (i, index) in k.indices.iter().enumerate() {
        let f = &s.axes[i].factors;
        let p = nest.domain[i];
        let padded = if p != extents[i] {
            format!(" (padded from {})", extents[i])
        } else {
            String::new()
        };
        if index.kind == crate::ir::IndexKind::Spatial {
            let _ = writeln!(
                h,
                " *   {}: {p} = block {} x vthread {} x thread {} x reg {} x {}{padded}",
                index.name, f[0], f[1], f[2], f[3], f[4]
            );
        } else {
            let _ = writeln!(
                h,
                " *   {}: {p} = outer {} x middle {} x inner {}{padded}",
                index.name, f[0], f[1], f[2]
            );
        }
    }
    let groups: Vec<String> = k
        .spatial()
        .iter()
        .map(|&sp| s.thread(sp).to_string())
        .collect();
    let launch = nest.launch.unwrap_or(lower::Launch {
        grid: [0; 3],
        block: [0; 3],
    });
    let accumulators = nest
        .scoped(lower::Scope::Register)
        .map(Buffer::elements)
        .sum::<usize>();
    let _ = writeln!(
        h,
        " *   {} threads ({}{}), {} blocks, {} accumulator(s) per thread",
        launch.block[0],
        if groups.is_empty() {
            "1".to_string()
        } else {
            groups.join(" x ")
        },
        if s.lanes > 1 {
            format!(" x {} reduction lanes", s.lanes)
        } else {
            String::new()
        },
        launch.grid[0],
        accumulators
    );
    let mut stages = Vec::new();
    nest.walk(&mut |_, st, _| {
        if let Stmt::Stage(st) = st {
            stages.push(st);
        }
    });
    stages.sort_by_key(|st| st.dst.0);
    if stages.is_empty() {
        let _ = writeln!(h, " *   no shared-memory staging");
    } else {
        let staged: Vec<String> = stages
            .iter()
            .map(|t| {
                let mut a = String::new();
                crate::ir::Expr::Access(t.src.clone())
                    .write(&mut a, k, &|v| k.indices[v].name.clone());
                let dims: Vec<String> = t.dims.iter().map(|d| d.to_string()).collect();
                let w = if t.width > 1 {
                    format!(" float{}", t.width)
                } else {
                    String::new()
                };
                format!("{a} {}{w}", dims.join("x"))
            })
            .collect();
        let _ = writeln!(
            h,
            " *   shared: {} = {} bytes",
            staged.join(", "),
            nest.shared_bytes()
        );
    }
    let order: Vec<String> = s
        .order
        .iter()
        .map(|l| match *l {
            RegLoop::Reg1(i) => format!("u{}", stem(i)),
            RegLoop::Inner(i) | RegLoop::Reg2(i) => format!("w{}", stem(i)),
        })
        .collect();
    let _ = writeln!(
        h,
        " *   unroll_max_step {}, register loops {}",
        s.unroll_max_step,
        if order.is_empty() {
            "-".to_string()
        } else {
            order.join(" ")
        }
    );
    let _ = writeln!(
        h,
        " * names: b_ block corner, t_ thread offset, v_ vthread, u_/w_ register levels,"
    );
    let _ = writeln!(
        h,
        " *   o_/m_/w_ reduction outer/middle/inner, i_ coordinate, l_ coordinate in the tile"
    );
    let _ = writeln!(h, " */");
    h
}

/// A source that fails to compile with `why` (for schedules that do not fit the kernel).
fn invalid(why: &str) -> CudaSource {
    CudaSource {
        source: format!(
            "#error \"tensor-dsl: invalid GPU schedule: {}\"\n",
            super::error_text(why)
        ),
        entry: ENTRY.into(),
        grid: [1, 1, 1],
        block: [1, 1, 1],
        shared_bytes: 0,
        tensor_maps: Vec::new(),
    }
}

/// Generates CUDA C for `kernel` at these extents/shapes with `schedule`. A schedule that
/// does not fit (see [`GpuSchedule::validate`]) gives a source that fails to compile with
/// the reason (`#error`), so it is recorded as invalid rather than run.
pub fn generate(
    kernel: &Kernel,
    extents: &[usize],
    shapes: &[&[usize]],
    schedule: &GpuSchedule,
) -> CudaSource {
    if kernel.is_staged() {
        // The row template, with the schedule's row knobs where it has them.
        let generated = match &schedule.rows {
            Some(rows) => super::rows::generate_cuda(kernel, extents, shapes, rows),
            None => super::rows::cuda_with_heuristic(kernel, extents, shapes),
        };
        return generated.unwrap_or_else(|e| invalid(&e));
    }
    source(kernel, extents, shapes, schedule).unwrap_or_else(|e| invalid(&e))
}

fn source(
    kernel: &Kernel,
    extents: &[usize],
    shapes: &[&[usize]],
    schedule: &GpuSchedule,
) -> Result<CudaSource, String> {
    let nest = lower::gpu::lower(kernel, extents, shapes, schedule)?;
    let body = printer::print(&nest, &CudaDialect)?;
    let launch = nest.launch.ok_or("the nest has no launch geometry")?;
    let dim = |d: [usize; 3]| d.map(|x| x as u32);
    let mut s = header(&nest, extents, schedule);
    if body.contains("INFINITY") {
        s.push_str("#ifndef INFINITY\n#define INFINITY __int_as_float(0x7f800000)\n#endif\n");
    }
    s.push('\n');
    s.push_str(&builtin_prelude("__device__ "));
    s.push_str(&super::used_builtins_prelude(kernel, "__device__ "));
    s.push_str(&super::dtype_prelude(kernel, "__device__ "));
    s.push_str(&super::cuda_async::prelude(&body));
    s.push('\n');
    s.push_str(&body);
    Ok(CudaSource {
        source: s,
        entry: ENTRY.into(),
        grid: dim(launch.grid),
        block: dim(launch.block),
        shared_bytes: 0,
        tensor_maps: Vec::new(),
    })
}
