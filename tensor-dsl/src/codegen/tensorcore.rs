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
//! Shared memory holds the stages one after another, each A's tile then B's; the loop
//! walks them with two running byte offsets (read and write stage). The hot loop does
//! little address arithmetic: shared addresses are 32-bit values, each thread's `ldmatrix`
//! and `cp.async` addresses are computed once before the loop (the swizzle's XOR applied
//! to them, the fragments' steps then compile-time XORs and adds, see `Frags` and
//! `Fast`), and a linear operand's global pointer moves one tile per copy.
//!
//! Loads past an edge are zero-filled (`cp.async` with a source size of 0), so extents no
//! tile divides are fine (a reduction that `block_k` does not divide starts its first k
//! tile before 0, so that only that tile, copied in the prologue, is partial); where a tensor's rows are not 16-, 8- or 4-byte aligned the copy
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
//! // A small output: 16×16 blocks of one warp (128 of them for 132 SMs), two warp groups
//! // per stage (sliced K).
//! assert_eq!((src.grid, src.block), ([128, 1, 1], [64, 1, 1]));
//! ```

use super::cuda::CudaSource;
use super::cuda_async::{cp_async_commit, cp_async_copy, cp_async_wait};
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
        tensor_maps: Vec::new(),
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
        "/* Shared-memory addresses are 32-bit values (the emulator: offsets into its shared array). */\n\
         #ifndef __CUDA_ARCH__\n\
         static unsigned char *td_shared_base;\n\
         #endif\n\
         {q} unsigned td_smem(const void *p) {{\n\
         #ifdef __CUDA_ARCH__\n\
         \x20   unsigned r; asm(\"{{ .reg .u64 a; cvta.to.shared.u64 a, %1; cvt.u32.u64 %0, a; }}\" : \"=r\"(r) : \"l\"(p)); return r;\n\
         #else\n\
         \x20   return (unsigned)((const unsigned char *)p - td_shared_base);\n\
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
            "{q} void {name}(unsigned *r, unsigned addr) {{\n\
             #ifdef __CUDA_ARCH__\n\
             \x20   asm volatile(\"ldmatrix.sync.aligned.m8n8.x4{trans}.shared.b16 {{%0,%1,%2,%3}}, [%4];\"\n\
             \x20       : \"=r\"(r[0]), \"=r\"(r[1]), \"=r\"(r[2]), \"=r\"(r[3]) : \"r\"(addr));\n\
             #else\n\
             \x20   td_emu_ldmatrix(r, (const unsigned short *)(td_shared_base + addr), 4, {t});\n\
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
        let _ = writeln!(
            h,
            "/* {bytes} bytes global -> shared, asynchronously; zeros when !ok (then nothing is read). */"
        );
        h.push_str(&cp_async_copy(bytes, "unsigned short", "td_emu_cp_async"));
    }
    h.push_str(&cp_async_commit());
    for n in [s.stages - 2, 0] {
        h.push_str(&cp_async_wait(n, "td_emu_cp_async_wait"));
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
pub(super) struct Context<'a> {
    pub(super) kernel: &'a Kernel,
    pub(super) extents: &'a [usize],
    pub(super) shapes: &'a [&'a [usize]],
}

/// `const int` definitions of the indices of `group` from their fused value `fused`
/// (row-major, the first outermost): `(name, expression)`.
pub(super) fn decompose(extents: &[usize], group: &[usize], fused: &str) -> Vec<(usize, String)> {
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

/// How far before `k = 0` the first k tile starts: `block_k - K % block_k` when `block_k`
/// does not divide the reduction (else 0), so that only the first tile, copied in the
/// prologue, is partial and the main loop's copies check no `k` bounds.
fn k_pad(g: &Gemm, s: &TcSchedule) -> usize {
    k_pad_of(g, s.block_k)
}

/// [`k_pad`] for a stage depth.
pub(super) fn k_pad_of(g: &Gemm, block_k: usize) -> usize {
    (block_k - g.k_extent % block_k) % block_k
}

/// The cooperative copy of k-tile `kt` of one operand into the shared stage that starts
/// `stage` bytes into the pipeline: with precomputed addresses ([`Fast`]) where the operand
/// allows, else each chunk's coordinates and addresses computed from its index.
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
    prologue: bool,
) {
    let t = Tile::for_operand(s, a, op);
    if let Some(f) = Fast::new(s, op, &t) {
        return f.load(out, ind, g, s, op, a, stage, kt, prologue);
    }
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
        // 2-byte loads: a loop unrolled by 4. Fully unrolled, their address arithmetic
        // spills; rolled, ptxas (sm_90) capped a TN GEMM of 999×1001×257 at 56 registers
        // and spilled 12 bytes (333×1000×4001 too); by 4, no spills on 20 odd-shaped
        // GEMMs of every operand layout, and four loads in flight.
        let _ = writeln!(out, "{ind}#pragma unroll 4");
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
    let pad = k_pad(g, s);
    let shift = if pad > 0 {
        format!(" - {pad}")
    } else {
        String::new()
    };
    let _ = writeln!(
        out,
        "{ind}    const int g{name} = {row0} + {ri}, gk = ({kt}{}) * {} + {ki}{shift};",
        if s.splits > 1 { " + kt0" } else { "" },
        s.block_k
    );
    let _ = writeln!(
        out,
        "{ind}    const bool ok = g{name} < {rows_extent} && {}gk < {};",
        if pad > 0 { "gk >= 0 && " } else { "" },
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
    let dst = format!("{buf} + ({stage}) / 2 + {}", offset(&t, "r", "c"));
    if w > 1 {
        let _ = writeln!(
            out,
            "{ind}    td_cp_async{}(td_smem({dst}), {src}, ok);",
            2 * w
        );
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

/// A linear operand copied with per-thread addresses computed once: chunk `it` of every
/// tile is tile row `X_r + it * step`, column `X_c` (the thread's first chunk), so its
/// shared address is the first chunk's plus a compile-time constant (the swizzle's row
/// bits do not change: `step` is a multiple of its span) and its global address a pointer
/// that moves one tile along `k` per copy (tiles are copied in order, each once). Row
/// checks are per thread and chunk, made once; the `k` check (only when `block_k` does not
/// divide the extent) compares with the tile's remaining depth. A chunk outside the tensor
/// copies nothing (`cp.async` source size 0) whatever its pointer.
struct Fast {
    /// The reduction is split across blocks: tile indices count from the split's `kt0`.
    split: bool,
    step: usize,
    iterations: usize,
    /// The chunks do not divide among the threads: in the last round, threads past the
    /// tile's last chunk copy nothing.
    guard: bool,
}

impl Fast {
    fn new(s: &TcSchedule, op: &Operand, t: &Tile) -> Option<Fast> {
        if !op.linear || op.width == 1 {
            return None;
        }
        let per_row = t.cols / op.width;
        let threads = s.threads();
        let span = if t.swizzle { t.swizzle_span() } else { 1 };
        if !threads.is_multiple_of(per_row) || !(threads / per_row).is_multiple_of(span) {
            return None;
        }
        let chunks = t.rows * per_row;
        Some(Fast {
            split: s.splits > 1,
            step: threads / per_row,
            iterations: chunks.div_ceil(threads),
            guard: !chunks.is_multiple_of(threads),
        })
    }

    /// The per-thread addresses and row checks (before the prologue).
    fn setup(&self, out: &mut String, ind: &str, g: &Gemm, s: &TcSchedule, op: &Operand, a: bool) {
        let t = Tile::for_operand(s, a, op);
        let p = if a { "a" } else { "b" };
        let (row0, rows_extent, block_rows) = if a {
            ("m0", g.m_extent, s.block_m())
        } else {
            ("n0", g.n_extent, s.block_n())
        };
        let w = op.width;
        let per_row = t.cols / w;
        let _ = writeln!(
            out,
            "{ind}/* {}: chunk it of each tile is row {p}_r + it * {}, column {p}_c */",
            if a { "A" } else { "B" },
            self.step
        );
        let _ = writeln!(
            out,
            "{ind}const int {p}_r = threadIdx.x / {per_row}, {p}_c = threadIdx.x % {per_row} * {w};"
        );
        let (ri, ki) = if op.k_major {
            (format!("{p}_r"), format!("{p}_c"))
        } else {
            (format!("{p}_c"), format!("{p}_r"))
        };
        let pad = k_pad(g, s);
        let ki = if pad > 0 {
            format!("({ki} - {pad})")
        } else {
            ki
        };
        let ki = if self.split {
            format!("({ki} + kt0 * {})", s.block_k)
        } else {
            ki
        };
        // Before the tensor when the first tile starts before k = 0: never read there.
        let _ = writeln!(
            out,
            "{ind}const unsigned short *{p}_src = t{} + ({p}_base + ({row0} + {ri}) * {} + {ki} * {});",
            op.param, op.row_stride, op.k_stride
        );
        let buf = if a {
            0
        } else {
            2 * Tile::for_operand(s, true, &g.a).elements()
        };
        let _ = writeln!(
            out,
            "{ind}const unsigned {p}_dst = sbase + {buf}u + 2u * ({});",
            offset(&t, &format!("{p}_r"), &format!("{p}_c"))
        );
        let rows_checked = !rows_extent.is_multiple_of(block_rows);
        for it in 0..self.iterations {
            let mut conds = Vec::new();
            if rows_checked {
                conds.push(if op.k_major {
                    format!("{row0} + {p}_r + {} < {rows_extent}", it * self.step)
                } else {
                    format!("{row0} + {p}_c < {rows_extent}")
                });
            }
            if !conds.is_empty() {
                let _ = writeln!(out, "{ind}const bool {p}_in{it} = {};", conds.join(" && "));
            }
        }
    }

    /// The copy of k tile `kt` into the stage `stage` bytes into the pipeline (`prologue`:
    /// the copy may be of the first tile).
    #[allow(clippy::too_many_arguments)]
    fn load(
        &self,
        out: &mut String,
        ind: &str,
        g: &Gemm,
        s: &TcSchedule,
        op: &Operand,
        a: bool,
        stage: &str,
        kt: &str,
        prologue: bool,
    ) {
        let t = Tile::for_operand(s, a, op);
        let p = if a { "a" } else { "b" };
        let (rows_extent, block_rows) = if a {
            (g.m_extent, s.block_m())
        } else {
            (g.n_extent, s.block_n())
        };
        let rows_checked = !rows_extent.is_multiple_of(block_rows);
        // Only the first tile can start before k = 0 (see `k_pad`), and only the prologue
        // copies it.
        let pad = if prologue { k_pad(g, s) } else { 0 };
        let first = if self.split { " + kt0" } else { "" };
        for it in 0..self.iterations {
            let mut ok = Vec::new();
            if rows_checked {
                ok.push(format!("{p}_in{it}"));
            }
            if pad > 0 {
                ok.push(if op.k_major {
                    format!("({kt}{first} > 0 || {p}_c >= {pad})")
                } else {
                    format!("({kt}{first} > 0 || {p}_r + {} >= {pad})", it * self.step)
                });
            }
            let ok = if ok.is_empty() {
                "true".to_string()
            } else {
                ok.join(" && ")
            };
            let along = if op.k_major {
                op.row_stride
            } else {
                op.k_stride
            };
            // A thread past the tile's last chunk copies nothing (a zero fill would land
            // in the next tile).
            let idle = if self.guard && it + 1 == self.iterations {
                format!("if ({p}_r + {} < {}) ", it * self.step, t.rows)
            } else {
                String::new()
            };
            let _ = writeln!(
                out,
                "{ind}{idle}td_cp_async{}({p}_dst + {stage} + {}u, {p}_src + {}, {ok});",
                2 * op.width,
                2 * it * self.step * t.pitch(),
                it * self.step * along
            );
        }
        let _ = writeln!(out, "{ind}{p}_src += {};", s.block_k * op.k_stride);
    }
}

/// Per-thread `ldmatrix` addresses: an operand's fragment for 16-deep step `kq` and its
/// `j`-th 16-row block is at `{p}_frag + stage + (({p}_x ^ X) + Y)` with compile-time `X`
/// and `Y` (see [`Frags::addr`]). The swizzle's XOR distributes over the steps and blocks
/// because every tile is a power of two: a block's column chunk is the warp's (a multiple
/// of the warp tile's chunks) ORed with bits the XOR leaves in place, and the rows a
/// fragment adds are multiples of 8 (the span is at most 8). `None` where the warp tile or
/// the split is not a power of two (the addresses are then computed in full).
struct Frags {
    k_major: bool,
    pitch: usize,
    split: usize,
}

impl Frags {
    fn new(s: &TcSchedule, op: &Operand, a: bool) -> Option<Frags> {
        let warp = if a { s.warp_m } else { s.warp_n };
        if !warp.is_power_of_two() || !s.split_k.is_power_of_two() {
            return None;
        }
        Some(Frags {
            k_major: op.k_major,
            pitch: Tile::for_operand(s, a, op).pitch(),
            split: s.split_k,
        })
    }

    fn setup(&self, out: &mut String, ind: &str, g: &Gemm, s: &TcSchedule, a: bool) {
        let p = if a { "a" } else { "b" };
        let t = Tile::for_operand(s, a, if a { &g.a } else { &g.b });
        let w0 = if a { "wm" } else { "wn" };
        // A's four 8x8 matrices: (rows +0/+8) x (k +0/+8), row half from mat & 1; B's: k
        // half from mat & 1.
        let (row_half, col_half) = if a {
            ("(mat & 1)", "(mat >> 1)")
        } else {
            ("(mat >> 1)", "(mat & 1)")
        };
        let rs = if t.swizzle {
            format!(" ^ (lr & {})", t.swizzle_span() - 1)
        } else {
            String::new()
        };
        let split = s.split_k > 1;
        let buf = if a {
            0
        } else {
            2 * Tile::for_operand(s, true, &g.a).elements()
        };
        let (row, x) = if self.k_major {
            (
                format!("{w0} + lr + {row_half} * 8"),
                if split {
                    format!("((({col_half}{rs}) << 3) ^ (kw << 4))")
                } else {
                    format!("(({col_half}{rs}) << 3)")
                },
            )
        } else {
            // Rows are k: the k half, and the warp group's steps of a split K.
            (
                format!(
                    "lr + {col_half} * 8{}",
                    if split { " + kw * 16" } else { "" }
                ),
                format!("(((({w0} >> 3) ^ {row_half}){rs}) << 3)"),
            )
        };
        let _ = writeln!(
            out,
            "{ind}const unsigned {p}_frag = sbase + {buf}u + 2u * (({row}) * {}), {p}_x = 2u * {x};",
            self.pitch
        );
    }

    /// The address of step `kq`'s block `j` (A: `mi`; B: the pair of `n8` blocks `nj`).
    fn addr(&self, p: &str, kq: &str, j: &str) -> String {
        let (xor, add) = if self.k_major {
            (
                format!("(({kq}) * {} << 5)", self.split),
                format!("({j}) * {}", 32 * self.pitch),
            )
        } else {
            (
                format!("(({j}) << 5)"),
                format!("({kq}) * {}", 32 * self.split * self.pitch),
            )
        };
        format!("{p}_s + (({p}_x ^ {xor}) + {add})")
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
    let k_tiles_total = g.k_tiles(s);
    let split = g.split(s);
    // The block's k tiles: all of them, or its split's (`kt_n`, from `kt0`).
    let k_tiles = if split.is_some() {
        "kt_n".to_string()
    } else {
        k_tiles_total.to_string()
    };
    // The output tile's index among the tiles of the launch.
    let bid = if split.is_some() {
        "tile"
    } else {
        "blockIdx.x"
    };
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
        if s.swizzle { "swizzled shared memory" } else { "padded shared memory" },
    );
    if s.splits > 1 {
        let _ = writeln!(
            src,
            " *   split-K across blocks: {} blocks per output tile, {k_tiles_total} k tiles",
            s.splits
        );
    }
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
    if paired_stores(kernel, extents, &g) {
        src.push_str(&pair_store_helper(kernel.params[kernel.output].dtype));
    }
    if let Some(p) = &split {
        src.push_str(&p.globals());
    }
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
    // One array: the pipeline's stages, each A's tile then B's, and (after the main loop)
    // the partial sums of a split K.
    let stage_bytes = 2 * (ta.elements() + tb.elements());
    let _ = writeln!(
        src,
        "{i}__shared__ __align__(128) unsigned short smem[{}];",
        g.shared_bytes(s) / 2
    );
    let _ = writeln!(
        src,
        "#ifndef __CUDA_ARCH__\n{i}td_shared_base = (unsigned char *)smem;\n#endif"
    );
    // The element pointers of the stages' tiles, for operands copied without precomputed
    // addresses.
    if Fast::new(s, &g.a, &ta).is_none() {
        let _ = writeln!(src, "{i}unsigned short *sA = smem;");
    }
    if Fast::new(s, &g.b, &tb).is_none() {
        let _ = writeln!(src, "{i}unsigned short *sB = smem + {};", ta.elements());
    }
    let _ = writeln!(src, "{i}const unsigned sbase = td_smem(smem);");
    let _ = writeln!(
        src,
        "{i}const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, mat = lane >> 3, lr = lane & 7;"
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
    if let Some(p) = &split {
        p.decode(&mut src, i, k_tiles_total);
    }
    let _ = writeln!(
        src,
        "{i}const int n0 = {bid} % {grid_n} * {}, m0 = {bid} / {grid_n} % {grid_m} * {};",
        s.block_n(),
        s.block_m()
    );
    let index_c = batch_coordinates(&mut src, i, kernel, extents, &g, bid, grid_m * grid_n);
    for (op, a) in [(&g.a, true), (&g.b, false)] {
        if let Some(f) = Fast::new(s, op, &Tile::for_operand(s, a, op)) {
            f.setup(&mut src, i, &g, s, op, a);
        }
    }
    let frags = [Frags::new(s, &g.a, true), Frags::new(s, &g.b, false)];
    for (f, a) in frags.iter().zip([true, false]) {
        if let Some(f) = f {
            f.setup(&mut src, i, &g, s, a);
        }
    }
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
    let first = format!("st * {stage_bytes}u");
    load_tile(
        &mut src,
        "            ",
        &cx,
        &g,
        s,
        &g.a,
        true,
        &first,
        "st",
        true,
    );
    load_tile(
        &mut src,
        "            ",
        &cx,
        &g,
        s,
        &g.b,
        false,
        &first,
        "st",
        true,
    );
    let _ = writeln!(src, "{i}    }}");
    let _ = writeln!(src, "{i}    td_cp_async_commit();");
    let _ = writeln!(src, "{i}}}");

    // Main loop.
    let last = (s.stages - 1) * stage_bytes;
    let _ = writeln!(
        src,
        "{i}/* bytes into the pipeline of the stage read (rs) and written (ws) this iteration */"
    );
    let _ = writeln!(src, "{i}unsigned rs = 0, ws = {last}u;");
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
    let _ = writeln!(src, "{i}        const int nt = kt + {};", s.stages - 1);
    let _ = writeln!(src, "{i}        if (nt < {k_tiles}) {{");
    load_tile(
        &mut src,
        "                ",
        &cx,
        &g,
        s,
        &g.a,
        true,
        "ws",
        "nt",
        false,
    );
    load_tile(
        &mut src,
        "                ",
        &cx,
        &g,
        s,
        &g.b,
        false,
        "ws",
        "nt",
        false,
    );
    let _ = writeln!(src, "{i}        }}");
    let _ = writeln!(src, "{i}        td_cp_async_commit();");
    let _ = writeln!(src, "{i}    }}");
    let _ = writeln!(
        src,
        "{i}    const unsigned a_s = {}, b_s = {};",
        if frags[0].is_some() {
            "a_frag + rs".to_string()
        } else {
            "sbase + rs".to_string()
        },
        if frags[1].is_some() {
            "b_frag + rs".to_string()
        } else {
            format!("sbase + rs + {}u", 2 * ta.elements())
        }
    );
    open_unrolled(&mut src, "        ", "kq", s.block_k / 16 / s.split_k);
    if frags.iter().any(Option::is_none) {
        if s.split_k > 1 {
            let _ = writeln!(
                src,
                "{i}        const int kk = (kq * {} + kw) * 16;",
                s.split_k
            );
        } else {
            let _ = writeln!(src, "{i}        const int kk = kq * 16;");
        }
    }
    let _ = writeln!(src, "{i}        unsigned af[{mi_n}][4], bf[{ni_n}][2];");
    open_unrolled(&mut src, "            ", "mi", mi_n);
    let a_addr = match &frags[0] {
        Some(f) => f.addr("a", "kq", "mi"),
        None if g.a.k_major => format!(
            "a_s + 2u * ({})",
            offset(
                &ta,
                "wm + mi * 16 + lr + (mat & 1) * 8",
                "kk + (mat >> 1) * 8"
            )
        ),
        None => format!(
            "a_s + 2u * ({})",
            offset(
                &ta,
                "kk + lr + (mat >> 1) * 8",
                "wm + mi * 16 + (mat & 1) * 8"
            )
        ),
    };
    let _ = writeln!(
        src,
        "{i}            td_ldmatrix_x4{}(af[mi], {a_addr});",
        if g.a.k_major { "" } else { "_trans" }
    );
    let _ = writeln!(src, "{i}        }}");
    open_unrolled(&mut src, "            ", "nj", ni_n / 2);
    let _ = writeln!(src, "{i}            unsigned t[4];");
    let b_addr = match &frags[1] {
        Some(f) => f.addr("b", "kq", "nj"),
        None if g.b.k_major => format!(
            "b_s + 2u * ({})",
            offset(
                &tb,
                "wn + nj * 16 + lr + (mat >> 1) * 8",
                "kk + (mat & 1) * 8"
            )
        ),
        None => format!(
            "b_s + 2u * ({})",
            offset(
                &tb,
                "kk + lr + (mat & 1) * 8",
                "wn + nj * 16 + (mat >> 1) * 8"
            )
        ),
    };
    let _ = writeln!(
        src,
        "{i}            td_ldmatrix_x4{}(t, {b_addr});",
        if g.b.k_major { "" } else { "_trans" }
    );
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
    let _ = writeln!(src, "{i}    rs = rs == {last}u ? 0u : rs + {stage_bytes}u;");
    let _ = writeln!(src, "{i}    ws = ws == {last}u ? 0u : ws + {stage_bytes}u;");
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
        // Split across blocks too: the other groups stay for the barriers of that reduction.
        let (open, close) = if split.is_some() {
            ("if (kw == 0) {", "}")
        } else {
            ("if (kw > 0) return;", "")
        };
        let _ = writeln!(src, "{i}{open}");
        let _ = writeln!(src, "{i}#pragma unroll");
        let _ = writeln!(src, "{i}for (int x = 0; x < {accs}; ++x)");
        let _ = writeln!(src, "{i}    #pragma unroll");
        let _ = writeln!(src, "{i}    for (int g = 0; g < {}; ++g)", s.split_k - 1);
        let _ = writeln!(
            src,
            "{i}        (&acc[0][0][0])[x] += red[x * {stride} + g * {lanes_all} + wmn * 32 + lane];"
        );
        if !close.is_empty() {
            let _ = writeln!(src, "{i}{close}");
        }
    }
    if let Some(p) = &split {
        let active = (s.split_k > 1).then_some("kw == 0");
        // The pipeline's shared memory is free (every copy landed, every fragment read).
        p.reduce(
            &mut src,
            i,
            "&acc[0][0][0]",
            active,
            "*reinterpret_cast<unsigned *>(smem)",
        );
        if s.split_k > 1 {
            let _ = writeln!(src, "{i}if (kw > 0) return;");
        }
    }

    epilogue(
        &mut src,
        i,
        &cx,
        &g,
        index_c,
        "m0 + wm + mi * 16 + (lane >> 2) + (e >> 1) * 8",
        "n0 + wn + ni * 8 + (lane & 3) * 2 + (e & 1)",
        (mi_n, ni_n),
    );
    src.push_str("}\n");
    Ok(CudaSource {
        source: finish(src),
        entry: super::cuda::ENTRY.into(),
        grid: [blocks as u32, 1, 1],
        block: [threads as u32, 1, 1],
        shared_bytes: 0,
        tensor_maps: Vec::new(),
    })
}

/// The batch coordinates of the block's tile `bid` (tiles of one instance first, innermost
/// batch index fastest) and `a_base`, `b_base` (the instance's first elements of A and B);
/// returns the C names of the kernel's indices (`"0"` for those not yet defined).
pub(super) fn batch_coordinates(
    src: &mut String,
    i: &str,
    kernel: &Kernel,
    extents: &[usize],
    g: &Gemm,
    bid: &str,
    tiles_per_instance: usize,
) -> Vec<String> {
    let mut index_c: Vec<String> = (0..kernel.indices.len()).map(|_| "0".to_string()).collect();
    let mut div = tiles_per_instance;
    let (mut a_base, mut b_base) = (Vec::new(), Vec::new());
    for (bi, &bx) in g.batch.iter().enumerate().rev() {
        let name = super::index_name(kernel, bx);
        let _ = writeln!(
            src,
            "{i}const int {name} = {bid} / {div} % {};",
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
    index_c
}

/// The `INFINITY` definition where the source uses it (no headers).
pub(super) fn finish(mut src: String) -> String {
    if src.contains("INFINITY") {
        src.insert_str(
            0,
            "#ifndef INFINITY\n#define INFINITY __int_as_float(0x7f800000)\n#endif\n",
        );
    }
    src
}

/// Whether the epilogue stores each pair of adjacent accumulators (`e` and `e + 1`, columns
/// `n` and `n + 1` of one row) with one 8-byte (`f32`) or 4-byte (half) store: where the
/// innermost index of `n` is contiguous in the output and of even extent, every pair that
/// starts inside the output ends inside it, in the same row, at an even element offset.
pub(super) fn paired_stores(kernel: &Kernel, extents: &[usize], g: &Gemm) -> bool {
    g.n.last().is_some_and(|&l| {
        g.out_strides[l] == 1
            && extents[l].is_multiple_of(2)
            && kernel
                .spatial()
                .iter()
                .all(|&sp| sp == l || g.out_strides[sp].is_multiple_of(2))
    })
}

/// The store of a pair of adjacent output elements, aligned to the pair's size (see
/// [`paired_stores`]): one vector store on a GPU, two plain ones in the emulator.
pub(super) fn pair_store_helper(out_dtype: DType) -> String {
    let (ty, bytes) = match out_dtype {
        DType::F32 => ("float", 8),
        DType::F16 | DType::BF16 => ("unsigned short", 4),
    };
    format!(
        "/* Two adjacent output elements in one {bytes}-byte store (p is {bytes}-byte aligned). */\n\
         static __device__ __forceinline__ void td_store_pair({ty} *p, {ty} x, {ty} y) {{\n\
         #ifdef __CUDA_ARCH__\n\
         \x20   struct __align__({bytes}) pair {{ {ty} x, y; }};\n\
         \x20   pair v; v.x = x; v.y = y;\n\
         \x20   *reinterpret_cast<pair *>(p) = v;\n\
         #else\n\
         \x20   p[0] = x; p[1] = y;\n\
         #endif\n}}\n"
    )
}

/// The epilogue over an accumulator array `acc[mi][ni][e]` (`counts` = the `mi` and `ni`
/// extents, `e` < 4): `row` and `col` are the C expressions of an accumulator's output row
/// (`m`) and column (`n`) in `mi`, `ni`, `e`, where `e` and `e | 1` share a row and an
/// even `e` has an even column, one less than `e + 1`'s (the MMA fragments' layout); the
/// kernel's later statements run on the `f32` value, which is rounded once and stored if
/// inside the output, a pair of adjacent columns in one store where [`paired_stores`] holds
/// (the source must then hold [`pair_store_helper`]).
#[allow(clippy::too_many_arguments)]
pub(super) fn epilogue(
    src: &mut String,
    i: &str,
    cx: &Context,
    g: &Gemm,
    mut index_c: Vec<String>,
    row: &str,
    col: &str,
    counts: (usize, usize),
) {
    let (kernel, extents, shapes) = (cx.kernel, cx.extents, cx.shapes);
    let (mi_n, ni_n) = counts;
    let out_dtype = kernel.params[kernel.output].dtype;
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
    let pairs = paired_stores(kernel, extents, g);
    let _ = writeln!(
        src,
        "{i}/* epilogue on the f32 accumulators, one rounding, predicated {} */",
        if pairs {
            "stores of column pairs"
        } else {
            "store"
        }
    );
    let _ = writeln!(src, "{i}#pragma unroll");
    let _ = writeln!(src, "{i}for (int mi = 0; mi < {mi_n}; ++mi)");
    let _ = writeln!(src, "{i}    #pragma unroll");
    let _ = writeln!(src, "{i}    for (int ni = 0; ni < {ni_n}; ++ni)");
    let _ = writeln!(src, "{i}        #pragma unroll");
    // One element's value in `x` at indentation `ind`: the fused groups' indices, the
    // accumulator `acc`, the kernel's later statements.
    let value = |src: &mut String, ind: &str, acc: &str| {
        for p in &parts {
            let _ = writeln!(src, "{ind}{p}");
        }
        let _ = writeln!(src, "{ind}float x = {acc};");
        for e in &kernel.epilogue {
            let _ = writeln!(src, "{ind}x = {};", printer.expr(e));
        }
    };
    if pairs {
        let _ = writeln!(src, "{i}        for (int ep = 0; ep < 4; ep += 2) {{");
        let _ = writeln!(
            src,
            "{i}            const int e = ep, {gm} = {row}, gn0 = {col};"
        );
        let _ = writeln!(
            src,
            "{i}            if ({gm} < {} && gn0 < {}) {{",
            g.m_extent, g.n_extent
        );
        let _ = writeln!(
            src,
            "{i}                {} v[2];\n{i}                long long off = 0;",
            storage_type(out_dtype)
        );
        let _ = writeln!(src, "{i}                #pragma unroll");
        let _ = writeln!(src, "{i}                for (int h = 0; h < 2; ++h) {{");
        let _ = writeln!(src, "{i}                    const int {gn} = gn0 + h;");
        value(
            src,
            &format!("{i}                    "),
            "acc[mi][ni][ep + h]",
        );
        let _ = writeln!(
            src,
            "{i}                    v[h] = {};",
            store_from_f32(out_dtype, "x")
        );
        let _ = writeln!(
            src,
            "{i}                    if (h == 0) off = {store_offset};"
        );
        let _ = writeln!(src, "{i}                }}");
        let _ = writeln!(
            src,
            "{i}                td_store_pair(&out[off], v[0], v[1]);"
        );
    } else {
        let _ = writeln!(src, "{i}        for (int e = 0; e < 4; ++e) {{");
        let _ = writeln!(src, "{i}            const int {gm} = {row}, {gn} = {col};");
        let _ = writeln!(
            src,
            "{i}            if ({gm} < {} && {gn} < {}) {{",
            g.m_extent, g.n_extent
        );
        value(src, &format!("{i}                "), "acc[mi][ni][e]");
        let _ = writeln!(
            src,
            "{i}                out[{store_offset}] = {};",
            store_from_f32(out_dtype, "x")
        );
    }
    let _ = writeln!(src, "{i}            }}");
    let _ = writeln!(src, "{i}        }}");
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::ir::{bind, parse_text};

    /// Whether the epilogue of `src` over `shapes` (bf16 operands) pairs its stores.
    fn pairs(src: &str, shapes: &[&[usize]], dtypes: &str) -> bool {
        let k = parse_text("k", src, None)
            .unwrap()
            .with_dtypes(dtypes)
            .unwrap();
        let extents = bind(&k, shapes).unwrap();
        let g = Gemm::analyze(&k, &extents, shapes).unwrap();
        paired_stores(&k, &extents, &g)
    }

    #[test]
    fn pairs_only_where_a_pair_stays_in_one_row_at_an_even_offset() {
        let mm = "c[[i, j]] += a[[i, k]] * b[[k, j]]";
        let bf16 = "a=bf16,b=bf16";
        // n contiguous and even: pairs, whatever the output's element type.
        assert!(pairs(mm, &[&[64, 32], &[32, 128], &[64, 128]], bf16));
        assert!(pairs(
            mm,
            &[&[64, 32], &[32, 128], &[64, 128]],
            "a=f16,b=f16,c=f16"
        ));
        // An odd n: a pair would cross into the next row.
        assert!(!pairs(mm, &[&[64, 32], &[32, 45], &[64, 45]], bf16));
        // The output transposed: n is not the contiguous index.
        let t = "c[[j, i]] += a[[i, k]] * b[[k, j]]";
        assert!(!pairs(t, &[&[64, 32], &[32, 128], &[128, 64]], bf16));
        // Batched, every stride even: pairs.
        let bmm = "z[[b, m, n]] += x[[b, m, k]] * y[[b, k, n]]";
        assert!(pairs(
            bmm,
            &[&[3, 16, 32], &[3, 32, 64], &[3, 16, 64]],
            "x=bf16,y=bf16"
        ));
    }
}
