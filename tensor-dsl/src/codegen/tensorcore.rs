//! CUDA C for the tensor-core template ([`crate::template::tensorcore`]): one block computes
//! a `block_m × block_n` tile of one batch instance with `warps_m × warps_n` warps, each a
//! `warp_m × warp_n` tile of `mma.sync.aligned.m16n8k16.row.col.f32.{bf16,f16}` fragments.
//!
//! ```text
//! prologue: cp.async tiles 0 .. stages-2 into shared stages, one commit group each
//! for each k tile kt:
//!     cp.async.wait_group stages-2; __syncthreads     (tile kt has landed, stage kt-1 is free)
//!     cp.async tile kt+stages-1 into stage (kt-1) % stages; commit
//!     for each 16-deep step (of this warp's k group): ldmatrix A and B fragments (.trans
//!         where the operand is not k-major in memory), mma.sync into the f32 accumulators
//! sliced K: groups 1.. leave their sums in shared memory, group 0 adds them
//! epilogue on each accumulator (the kernel's later statements), rounded once, predicated store
//! ```
//!
//! Loads past an edge are zero-filled (`cp.async` with a source size of 0), so extents no
//! tile divides are fine; where a tensor's rows are not 16-, 8- or 4-byte aligned the copy
//! falls back to 2-byte plain loads. Every PTX instruction is wrapped in a small
//! `__device__` function: under `__CUDA_ARCH__` the inline `asm`, elsewhere a call of the
//! CPU emulator's warp collective (`tests/cuda_emu.h`, `td_emu_*`: a CPU thread cannot
//! compute its fragment of an MMA alone). No `#include`.
//!
//! ```
//! use tensor_dsl::ir::parse_text;
//! use tensor_dsl::codegen::tensorcore::generate;
//! use tensor_dsl::template::{gpu::GpuTarget, tensorcore::TcTemplate};
//! let k = parse_text("mm", "c[[i,j]] += a[[i,k]] * b[[k,j]]", None).unwrap()
//!     .with_dtypes("a=bf16,b=bf16").unwrap();
//! let shapes: [&[usize]; 3] = [&[256, 64], &[64, 128], &[256, 128]];
//! let t = TcTemplate::new(&k, &[256, 128, 64], &shapes, &GpuTarget::h100()).unwrap();
//! let src = generate(&k, &[256, 128, 64], &shapes, &t.default_schedule());
//! assert!(src.source.contains("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"));
//! assert!(!src.source.contains("#include"));
//! assert_eq!((src.grid, src.block), ([8, 1, 1], [128, 1, 1])); // 64×64 blocks
//! ```

use super::cuda::CudaSource;
use super::ExprPrinter;
use super::{builtin_prelude, dtype_prelude, storage_type, store_from_f32, used_builtins_prelude};
use crate::ir::{DType, Kernel};
use crate::lower::tensorcore::{Gemm, Operand, TcSchedule, Tile};
use std::fmt::Write as _;

/// Generates the tensor-core kernel; a kernel or schedule that does not fit gives a source
/// that fails to compile with the reason (`#error`).
pub fn generate(
    kernel: &Kernel,
    extents: &[usize],
    shapes: &[&[usize]],
    schedule: &TcSchedule,
) -> CudaSource {
    source(kernel, extents, shapes, schedule).unwrap_or_else(|e| CudaSource {
        source: format!(
            "#error \"tensor-dsl: invalid tensor-core schedule: {}\"\n",
            super::error_text(&e)
        ),
        entry: super::cuda::ENTRY.into(),
        grid: [1, 1, 1],
        block: [1, 1, 1],
        shared_bytes: 0,
    })
}

/// The PTX wrappers: `mma.sync`, `ldmatrix` (x4, plain and transposed), `cp.async` of each
/// width with zero fill, commit and wait.
fn ptx_helpers(g: &Gemm, s: &TcSchedule) -> String {
    let ty = if g.dtype == DType::BF16 {
        "bf16"
    } else {
        "f16"
    };
    let q = "static __device__ __forceinline__";
    let mut h = String::new();
    let _ = write!(
        h,
        "{q} unsigned td_smem(const void *p) {{\n\
         #ifdef __CUDA_ARCH__\n\
         \x20   unsigned r; asm(\"{{ .reg .u64 a; cvta.to.shared.u64 a, %1; cvt.u32.u64 %0, a; }}\" : \"=r\"(r) : \"l\"(p)); return r;\n\
         #else\n\
         \x20   (void)p; return 0;\n\
         #endif\n}}\n\
         /* d += a * b: one m16n8k16 MMA of the warp, {ty} inputs, f32 accumulators. */\n\
         {q} void td_mma(float *d, const unsigned *a, const unsigned *b) {{\n\
         #ifdef __CUDA_ARCH__\n\
         \x20   asm volatile(\"mma.sync.aligned.m16n8k16.row.col.f32.{ty}.{ty}.f32 {{%0,%1,%2,%3}}, {{%4,%5,%6,%7}}, {{%8,%9}}, {{%0,%1,%2,%3}};\"\n\
         \x20       : \"+f\"(d[0]), \"+f\"(d[1]), \"+f\"(d[2]), \"+f\"(d[3])\n\
         \x20       : \"r\"(a[0]), \"r\"(a[1]), \"r\"(a[2]), \"r\"(a[3]), \"r\"(b[0]), \"r\"(b[1]));\n\
         #else\n\
         \x20   td_emu_mma_m16n8k16(d, a, b, {bf});\n\
         #endif\n}}\n",
        bf = u8::from(g.dtype == DType::BF16)
    );
    for (name, trans) in [("td_ldmatrix_x4", ""), ("td_ldmatrix_x4_trans", ".trans")] {
        let _ = write!(
            h,
            "{q} void {name}(unsigned *r, const unsigned short *p) {{\n\
             #ifdef __CUDA_ARCH__\n\
             \x20   asm volatile(\"ldmatrix.sync.aligned.m8n8.x4{trans}.shared.b16 {{%0,%1,%2,%3}}, [%4];\"\n\
             \x20       : \"=r\"(r[0]), \"=r\"(r[1]), \"=r\"(r[2]), \"=r\"(r[3]) : \"r\"(td_smem(p)));\n\
             #else\n\
             \x20   td_emu_ldmatrix(r, p, 4, {t});\n\
             #endif\n}}\n",
            t = u8::from(!trans.is_empty())
        );
    }
    let mut widths: Vec<usize> = [g.a.width, g.b.width]
        .into_iter()
        .filter(|&w| w > 1)
        .collect();
    widths.sort_unstable();
    widths.dedup();
    for w in widths {
        let bytes = 2 * w;
        let cache = if bytes == 16 { "cg" } else { "ca" };
        let _ = write!(
            h,
            "/* {bytes} bytes global -> shared, asynchronously; zeros when !ok. */\n\
             {q} void td_cp_async{bytes}(unsigned short *dst, const unsigned short *src, bool ok) {{\n\
             #ifdef __CUDA_ARCH__\n\
             \x20   asm volatile(\"cp.async.{cache}.shared.global [%0], [%1], {bytes}, %2;\" :: \"r\"(td_smem(dst)), \"l\"(src), \"r\"(ok ? {bytes} : 0) : \"memory\");\n\
             #else\n\
             \x20   td_emu_cp_async(dst, src, {bytes}, ok ? {bytes} : 0);\n\
             #endif\n}}\n"
        );
    }
    let _ = write!(
        h,
        "{q} void td_cp_async_commit() {{\n\
         #ifdef __CUDA_ARCH__\n\
         \x20   asm volatile(\"cp.async.commit_group;\" ::: \"memory\");\n\
         #else\n\
         \x20   td_emu_cp_async_commit();\n\
         #endif\n}}\n"
    );
    for n in [s.stages - 2, 0] {
        let _ = write!(
            h,
            "{q} void td_cp_async_wait{n}() {{\n\
             #ifdef __CUDA_ARCH__\n\
             \x20   asm volatile(\"cp.async.wait_group {n};\" ::: \"memory\");\n\
             #else\n\
             \x20   td_emu_cp_async_wait({n});\n\
             #endif\n}}\n"
        );
        if s.stages == 2 {
            break;
        }
    }
    h
}

/// The element offset of `(row, col)` in a stage of `tile`, as C text.
fn offset(t: &Tile, row: &str, col: &str) -> String {
    if t.swizzle {
        format!(
            "({row}) * {} + ((((({col}) >> 3) ^ (({row}) & {})) << 3) | (({col}) & 7))",
            t.pitch(),
            t.swizzle_span() - 1
        )
    } else {
        format!("({row}) * {} + ({col})", t.pitch())
    }
}

/// What the printers of a kernel's pieces need.
struct Context<'a> {
    kernel: &'a Kernel,
    extents: &'a [usize],
    shapes: &'a [&'a [usize]],
}

/// `const int` definitions of the indices of `group` from their fused value `fused`
/// (row-major, the first outermost): `(name, expression)`.
fn decompose(extents: &[usize], group: &[usize], fused: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut inner = 1usize;
    for (j, &i) in group.iter().enumerate().rev() {
        let e = extents[i];
        let mut x = if inner == 1 {
            fused.to_string()
        } else {
            format!("{fused} / {inner}")
        };
        if j > 0 {
            x = format!("{x} % {e}");
        }
        out.push((i, x));
        inner *= e;
    }
    out.reverse();
    out
}

/// For an input access with the indices defined by `defs`: the `const int` lines of the
/// indices and coordinates, the bounds checks its coordinates need, and its element offset.
fn access_parts(
    cx: &Context,
    access: &crate::ir::Access,
    defs: &[(usize, String)],
) -> (Vec<String>, Vec<String>, String) {
    let name = |i: usize| super::index_name(cx.kernel, i);
    let mut lets: Vec<String> = defs
        .iter()
        .map(|(i, x)| format!("const int {} = {x};", name(*i)))
        .collect();
    let shape = cx.shapes[access.tensor];
    let coords: Vec<super::Coord> = access
        .dims
        .iter()
        .enumerate()
        .map(|(d, map)| {
            let (lo, hi) = map.range(cx.extents);
            let mut text = String::new();
            map.write(&mut text, &name);
            if map.as_var().is_some() || map.terms.is_empty() {
                super::Coord {
                    expr: text,
                    simple: true,
                    lo,
                    hi,
                }
            } else {
                let c = format!("c{}_{d}", access.tensor);
                lets.push(format!("const int {c} = {text};"));
                super::Coord {
                    expr: c,
                    simple: true,
                    lo,
                    hi,
                }
            }
        })
        .collect();
    let conds = super::bound_checks(shape, &coords);
    (lets, conds, super::offset_expr(shape, &coords))
}

/// Opens a fully unrolled loop of `var` over `0..trip` (closed by `}`); a single iteration
/// is a plain block. NVVM moves the unroll request of a one-iteration loop it deletes onto
/// the loop around it: the rolled main loop then gets unrolled over every k tile.
fn open_unrolled(out: &mut String, ind: &str, var: &str, trip: usize) {
    if trip == 1 {
        let _ = writeln!(out, "{ind}{{ const int {var} = 0;");
    } else {
        let _ = writeln!(out, "{ind}#pragma unroll");
        let _ = writeln!(out, "{ind}for (int {var} = 0; {var} < {trip}; ++{var}) {{");
    }
}

/// The cooperative copy of k-tile `kt` of one operand into shared stage `stage`.
#[allow(clippy::too_many_arguments)]
fn load_tile(
    out: &mut String,
    ind: &str,
    cx: &Context,
    g: &Gemm,
    s: &TcSchedule,
    op: &Operand,
    a: bool,
    stage: &str,
    kt: &str,
) {
    let t = Tile::for_operand(s, a, op);
    let (buf, base, row0, rows_extent, name) = if a {
        ("sA", "a_base", "m0", g.m_extent, 'm')
    } else {
        ("sB", "b_base", "n0", g.n_extent, 'n')
    };
    let w = op.width;
    let per_row = t.cols / w;
    let chunks = t.rows * per_row;
    let threads = s.threads();
    // Tile coordinates (r, c) to the operand's (row index, k).
    let (ri, ki) = if op.k_major { ("r", "c") } else { ("c", "r") };
    let iterations = chunks.div_ceil(threads);
    if w == 1 && iterations > 1 {
        // 2-byte loads: a rolled loop (unrolled, their address arithmetic spills).
        let _ = writeln!(out, "{ind}#pragma unroll 1");
        let _ = writeln!(out, "{ind}for (int it = 0; it < {iterations}; ++it) {{");
    } else {
        open_unrolled(out, ind, "it", iterations);
    }
    let _ = writeln!(
        out,
        "{ind}    const int q = threadIdx.x + it * {threads}, r = q / {per_row}, c = q % {per_row} * {w};"
    );
    let guard = !chunks.is_multiple_of(threads);
    let ind = &if guard {
        let _ = writeln!(out, "{ind}    if (q < {chunks}) {{");
        format!("{ind}    ")
    } else {
        ind.to_string()
    };
    let _ = writeln!(
        out,
        "{ind}    const int g{name} = {row0} + {ri}, gk = ({kt}) * {} + {ki};",
        s.block_k
    );
    let _ = writeln!(
        out,
        "{ind}    const bool ok = g{name} < {rows_extent} && gk < {};",
        g.k_extent
    );
    let mut ok = "ok";
    let src = if op.linear {
        format!(
            "t{} + (ok ? {base} + g{name} * {} + gk * {} : 0)",
            op.param, op.row_stride, op.k_stride
        )
    } else {
        // Implicit GEMM: the fused indices' parts, the access's coordinates, zero outside.
        let rows = if a { &g.m } else { &g.n };
        let mut defs = decompose(cx.extents, rows, &format!("g{name}"));
        defs.extend(decompose(cx.extents, &g.k, "gk"));
        let (lets, conds, offset) = access_parts(cx, &op.access, &defs);
        for l in lets {
            let _ = writeln!(out, "{ind}    {l}");
        }
        if !conds.is_empty() {
            let _ = writeln!(out, "{ind}    const bool in = {};", conds.join(" && "));
        }
        if !conds.is_empty() {
            ok = "ok && in";
        }
        format!("t{} + ({ok} ? {offset} : 0)", op.param)
    };
    let dst = format!(
        "{buf} + ({stage}) * {} + {}",
        t.elements(),
        offset(&t, "r", "c")
    );
    if w > 1 {
        let _ = writeln!(out, "{ind}    td_cp_async{}({dst}, {src}, ok);", 2 * w);
    } else {
        let _ = writeln!(
            out,
            "{ind}    *({dst}) = {ok} ? *({src}) : (unsigned short)0;"
        );
    }
    if guard {
        let _ = writeln!(out, "{ind}}}");
        let _ = writeln!(out, "{}}}", &ind[4..]);
    } else {
        let _ = writeln!(out, "{ind}}}");
    }
}

fn source(
    kernel: &Kernel,
    extents: &[usize],
    shapes: &[&[usize]],
    s: &TcSchedule,
) -> Result<CudaSource, String> {
    s.validate()?;
    let g = Gemm::analyze(kernel, extents, shapes)?;
    let cx = Context {
        kernel,
        extents,
        shapes,
    };
    let (blocks, threads) = g.launch(extents, s);
    if blocks >= 1 << 31 {
        return Err("too many blocks".into());
    }
    let (ta, tb) = (
        Tile::for_operand(s, true, &g.a),
        Tile::for_operand(s, false, &g.b),
    );
    let (mi_n, ni_n) = (s.warp_m / 16, s.warp_n / 8);
    let grid_m = g.m_extent.div_ceil(s.block_m());
    let grid_n = g.n_extent.div_ceil(s.block_n());
    let k_tiles = g.k_extent.div_ceil(s.block_k);
    let out_dtype = kernel.params[kernel.output].dtype;

    let mut src = String::new();
    let _ = writeln!(
        src,
        "/* tensor-dsl generated CUDA C (codegen v{}, tensor cores)",
        super::cuda::CODEGEN_VERSION
    );
    let _ = writeln!(
        src,
        " * kernel `{}` fingerprint {}",
        kernel.name,
        kernel.fingerprint()
    );
    let _ = writeln!(src, " *   {kernel}");
    let _ = writeln!(src, " * extents: {}", super::extents_text(kernel, extents));
    let _ = writeln!(src, " * element types: {}", kernel.dtypes_text());
    let _ = writeln!(
        src,
        " * schedule (tensor cores, mma.sync m16n8k16, f32 accumulators): block {}x{}x{} = {}x{} warps of {}x{}{}, {} stages, {}",
        s.block_m(),
        s.block_n(),
        s.block_k,
        s.warps_m,
        s.warps_n,
        s.warp_m,
        s.warp_n,
        if s.split_k > 1 {
            format!(" x {} k groups (sliced K)", s.split_k)
        } else {
            String::new()
        },
        s.stages,
        if s.swizzle { "swizzled shared memory" } else { "padded shared memory" }
    );
    let _ = writeln!(
        src,
        " *   {threads} threads, {blocks} blocks, {} accumulators per thread, {} bytes shared; A {} {}, B {} {}",
        s.accumulators(),
        g.shared_bytes(s),
        if g.a.k_major { "k-major" } else { "m-major" },
        if g.a.width > 1 { format!("cp.async {} B", 2 * g.a.width) } else { "2-byte loads".into() },
        if g.b.k_major { "k-major" } else { "n-major" },
        if g.b.width > 1 { format!("cp.async {} B", 2 * g.b.width) } else { "2-byte loads".into() },
    );
    let _ = writeln!(src, " */");
    if !kernel.epilogue.is_empty() {
        src.push_str(&builtin_prelude("__device__ "));
        src.push_str(&used_builtins_prelude(kernel, "__device__ "));
    }
    src.push_str(&dtype_prelude(kernel, "__device__ "));
    src.push_str(&ptx_helpers(&g, s));
    src.push('\n');

    let params: Vec<String> = kernel
        .inputs()
        .into_iter()
        .map(|p| {
            format!(
                "const {} *__restrict__ t{p}",
                storage_type(kernel.params[p].dtype)
            )
        })
        .chain([format!("{} *__restrict__ out", storage_type(out_dtype))])
        .collect();
    let _ = writeln!(
        src,
        "extern \"C\" __global__ void __launch_bounds__({threads})\n{}({})\n{{",
        super::cuda::ENTRY,
        params.join(", ")
    );
    let i = "    ";
    // One array: the pipeline's stages of A then B, and (after the main loop) the partial
    // sums of a split K.
    let _ = writeln!(
        src,
        "{i}__shared__ __align__(128) unsigned short smem[{}];",
        g.shared_bytes(s) / 2
    );
    let _ = writeln!(
        src,
        "{i}unsigned short *sA = smem, *sB = smem + {};",
        s.stages * ta.elements()
    );
    let _ = writeln!(
        src,
        "{i}const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;"
    );
    let warps_mn = s.warps_m * s.warps_n;
    if s.split_k > 1 {
        let _ = writeln!(
            src,
            "{i}/* warp group kw of {} takes the 16-deep steps kw, kw + {}, ... of each stage */",
            s.split_k, s.split_k
        );
        let _ = writeln!(
            src,
            "{i}const int kw = warp / {warps_mn}, wmn = warp % {warps_mn};"
        );
    } else {
        let _ = writeln!(src, "{i}const int wmn = warp;");
    }
    let _ = writeln!(
        src,
        "{i}const int wm = wmn / {} * {}, wn = wmn % {} * {};",
        s.warps_n, s.warp_m, s.warps_n, s.warp_n
    );
    let _ = writeln!(
        src,
        "{i}const int n0 = blockIdx.x % {grid_n} * {}, m0 = blockIdx.x / {grid_n} % {grid_m} * {};",
        s.block_n(),
        s.block_m()
    );
    // Batch coordinates, innermost batch index fastest.
    let mut index_c: Vec<String> = (0..kernel.indices.len()).map(|_| "0".to_string()).collect();
    let mut div = grid_m * grid_n;
    let (mut a_base, mut b_base) = (Vec::new(), Vec::new());
    for (bi, &bx) in g.batch.iter().enumerate().rev() {
        let name = super::index_name(kernel, bx);
        let _ = writeln!(
            src,
            "{i}const int {name} = blockIdx.x / {div} % {};",
            extents[bx]
        );
        div *= extents[bx];
        let [sa, sb] = g.batch_strides[bi];
        a_base.push(format!("{name} * {sa}"));
        b_base.push(format!("{name} * {sb}"));
        index_c[bx] = name;
    }
    let sum = |v: &[String]| {
        if v.is_empty() {
            "0".to_string()
        } else {
            v.join(" + ")
        }
    };
    let _ = writeln!(
        src,
        "{i}const int a_base = {}, b_base = {};",
        sum(&a_base),
        sum(&b_base)
    );
    let _ = writeln!(src, "{i}float acc[{mi_n}][{ni_n}][4];");
    let _ = writeln!(
        src,
        "{i}#pragma unroll\n{i}for (int x = 0; x < {}; ++x) (&acc[0][0][0])[x] = 0.0f;",
        mi_n * ni_n * 4
    );

    // Prologue.
    let _ = writeln!(src, "{i}/* prologue: the first {} k tiles */", s.stages - 1);
    let _ = writeln!(src, "{i}#pragma unroll");
    let _ = writeln!(src, "{i}for (int st = 0; st < {}; ++st) {{", s.stages - 1);
    let _ = writeln!(src, "{i}    if (st < {k_tiles}) {{");
    load_tile(&mut src, "            ", &cx, &g, s, &g.a, true, "st", "st");
    load_tile(
        &mut src,
        "            ",
        &cx,
        &g,
        s,
        &g.b,
        false,
        "st",
        "st",
    );
    let _ = writeln!(src, "{i}    }}");
    let _ = writeln!(src, "{i}    td_cp_async_commit();");
    let _ = writeln!(src, "{i}}}");

    // Main loop.
    // Rolled: unrolling it multiplies the code by the k tiles for nothing.
    let _ = writeln!(src, "{i}#pragma unroll 1");
    let _ = writeln!(src, "{i}for (int kt = 0; kt < {k_tiles}; ++kt) {{");
    let _ = writeln!(src, "{i}    td_cp_async_wait{}();", s.stages - 2);
    let _ = writeln!(src, "{i}    __syncthreads();");
    let _ = writeln!(
        src,
        "{i}    /* prefetch k tile kt + {} into the stage read last iteration */",
        s.stages - 1
    );
    let _ = writeln!(src, "{i}    {{");
    let _ = writeln!(
        src,
        "{i}        const int nt = kt + {}, ns = nt % {};",
        s.stages - 1,
        s.stages
    );
    let _ = writeln!(src, "{i}        if (nt < {k_tiles}) {{");
    load_tile(
        &mut src,
        "                ",
        &cx,
        &g,
        s,
        &g.a,
        true,
        "ns",
        "nt",
    );
    load_tile(
        &mut src,
        "                ",
        &cx,
        &g,
        s,
        &g.b,
        false,
        "ns",
        "nt",
    );
    let _ = writeln!(src, "{i}        }}");
    let _ = writeln!(src, "{i}        td_cp_async_commit();");
    let _ = writeln!(src, "{i}    }}");
    let _ = writeln!(
        src,
        "{i}    const unsigned short *As = sA + kt % {} * {}, *Bs = sB + kt % {} * {};",
        s.stages,
        ta.elements(),
        s.stages,
        tb.elements()
    );
    let _ = writeln!(src, "{i}    const int mat = lane >> 3, lr = lane & 7;");
    open_unrolled(&mut src, "        ", "kq", s.block_k / 16 / s.split_k);
    if s.split_k > 1 {
        let _ = writeln!(
            src,
            "{i}        const int kk = (kq * {} + kw) * 16;",
            s.split_k
        );
    } else {
        let _ = writeln!(src, "{i}        const int kk = kq * 16;");
    }
    let _ = writeln!(src, "{i}        unsigned af[{mi_n}][4], bf[{ni_n}][2];");
    open_unrolled(&mut src, "            ", "mi", mi_n);
    if g.a.k_major {
        let _ = writeln!(
            src,
            "{i}            td_ldmatrix_x4(af[mi], As + {});",
            offset(
                &ta,
                "wm + mi * 16 + lr + (mat & 1) * 8",
                "kk + (mat >> 1) * 8"
            )
        );
    } else {
        let _ = writeln!(
            src,
            "{i}            td_ldmatrix_x4_trans(af[mi], As + {});",
            offset(
                &ta,
                "kk + lr + (mat >> 1) * 8",
                "wm + mi * 16 + (mat & 1) * 8"
            )
        );
    }
    let _ = writeln!(src, "{i}        }}");
    open_unrolled(&mut src, "            ", "nj", ni_n / 2);
    let _ = writeln!(src, "{i}            unsigned t[4];");
    if g.b.k_major {
        let _ = writeln!(
            src,
            "{i}            td_ldmatrix_x4(t, Bs + {});",
            offset(
                &tb,
                "wn + nj * 16 + lr + (mat >> 1) * 8",
                "kk + (mat & 1) * 8"
            )
        );
    } else {
        let _ = writeln!(
            src,
            "{i}            td_ldmatrix_x4_trans(t, Bs + {});",
            offset(
                &tb,
                "kk + lr + (mat & 1) * 8",
                "wn + nj * 16 + (mat >> 1) * 8"
            )
        );
    }
    let _ = writeln!(
        src,
        "{i}            bf[2 * nj][0] = t[0]; bf[2 * nj][1] = t[1]; bf[2 * nj + 1][0] = t[2]; bf[2 * nj + 1][1] = t[3];"
    );
    let _ = writeln!(src, "{i}        }}");
    open_unrolled(&mut src, "            ", "mi", mi_n);
    open_unrolled(&mut src, "                ", "ni", ni_n);
    let _ = writeln!(
        src,
        "{i}                td_mma(acc[mi][ni], af[mi], bf[ni]);"
    );
    let _ = writeln!(src, "{i}            }}");
    let _ = writeln!(src, "{i}        }}");
    let _ = writeln!(src, "{i}    }}");
    let _ = writeln!(src, "{i}}}");
    let _ = writeln!(src, "{i}td_cp_async_wait0();");
    let accs = s.accumulators();
    if s.split_k > 1 {
        // Groups 1.. park their sums in the pipeline's memory (once every warp is done
        // reading it), group 0 adds them; lane-fastest, so a warp's stores hit 32 banks.
        let lanes_all = warps_mn * 32;
        let stride = (s.split_k - 1) * lanes_all;
        let _ = writeln!(
            src,
            "{i}/* sliced K: add the partial sums of warp groups 1..{} to group 0's */",
            s.split_k - 1
        );
        let _ = writeln!(src, "{i}__syncthreads();");
        let _ = writeln!(src, "{i}float *red = reinterpret_cast<float *>(smem);");
        let _ = writeln!(src, "{i}if (kw > 0) {{");
        let _ = writeln!(src, "{i}    #pragma unroll");
        let _ = writeln!(src, "{i}    for (int x = 0; x < {accs}; ++x)");
        let _ = writeln!(
            src,
            "{i}        red[x * {stride} + (kw - 1) * {lanes_all} + wmn * 32 + lane] = (&acc[0][0][0])[x];"
        );
        let _ = writeln!(src, "{i}}}");
        let _ = writeln!(src, "{i}__syncthreads();");
        let _ = writeln!(src, "{i}if (kw > 0) return;");
        let _ = writeln!(src, "{i}#pragma unroll");
        let _ = writeln!(src, "{i}for (int x = 0; x < {accs}; ++x)");
        let _ = writeln!(src, "{i}    #pragma unroll");
        let _ = writeln!(src, "{i}    for (int g = 0; g < {}; ++g)", s.split_k - 1);
        let _ = writeln!(
            src,
            "{i}        (&acc[0][0][0])[x] += red[x * {stride} + g * {lanes_all} + wmn * 32 + lane];"
        );
    }

    // Epilogue.
    let (gm, gn) = ("gm", "gn");
    // A fused group's indices are split out of it; a single index is the fused one.
    let mut parts = Vec::new();
    for (group, fused) in [(&g.m, gm), (&g.n, gn)] {
        if let [one] = group[..] {
            index_c[one] = fused.into();
        } else {
            for (ix, expr) in decompose(extents, group, fused) {
                let name = super::index_name(kernel, ix);
                parts.push(format!("const int {name} = {expr};"));
                index_c[ix] = name;
            }
        }
    }
    let store_offset = kernel
        .spatial()
        .iter()
        .map(|&sp| format!("{} * {}", index_c[sp], g.out_strides[sp]))
        .collect::<Vec<_>>()
        .join(" + ");
    let printer = ExprPrinter {
        kernel,
        shapes,
        extents,
        index: index_c,
        tensor: (0..kernel.params.len()).map(|p| format!("t{p}")).collect(),
        output: "x".into(),
        packed: None,
    };
    let _ = writeln!(
        src,
        "{i}/* epilogue on the f32 accumulators, one rounding, predicated store */"
    );
    let _ = writeln!(src, "{i}#pragma unroll");
    let _ = writeln!(src, "{i}for (int mi = 0; mi < {mi_n}; ++mi)");
    let _ = writeln!(src, "{i}    #pragma unroll");
    let _ = writeln!(src, "{i}    for (int ni = 0; ni < {ni_n}; ++ni)");
    let _ = writeln!(src, "{i}        #pragma unroll");
    let _ = writeln!(src, "{i}        for (int e = 0; e < 4; ++e) {{");
    let _ = writeln!(
        src,
        "{i}            const int {gm} = m0 + wm + mi * 16 + (lane >> 2) + (e >> 1) * 8, {gn} = n0 + wn + ni * 8 + (lane & 3) * 2 + (e & 1);"
    );
    let _ = writeln!(
        src,
        "{i}            if ({gm} < {} && {gn} < {}) {{",
        g.m_extent, g.n_extent
    );
    for p in &parts {
        let _ = writeln!(src, "{i}                {p}");
    }
    let _ = writeln!(src, "{i}                float x = acc[mi][ni][e];");
    for e in &kernel.epilogue {
        let _ = writeln!(src, "{i}                x = {};", printer.expr(e));
    }
    let _ = writeln!(
        src,
        "{i}                out[{store_offset}] = {};",
        store_from_f32(out_dtype, "x")
    );
    let _ = writeln!(src, "{i}            }}");
    let _ = writeln!(src, "{i}        }}");
    src.push_str("}\n");
    if src.contains("INFINITY") {
        src.insert_str(
            0,
            "#ifndef INFINITY\n#define INFINITY __int_as_float(0x7f800000)\n#endif\n",
        );
    }
    Ok(CudaSource {
        source: src,
        entry: super::cuda::ENTRY.into(),
        grid: [blocks as u32, 1, 1],
        block: [threads as u32, 1, 1],
        shared_bytes: 0,
    })
}
