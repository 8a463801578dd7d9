//! CUDA C for the Hopper tensor-core template ([`crate::template::wgmma`], `sm_90a`): a block
//! of `warpgroups` warpgroups (128 threads each) computes a `block_m × block_n` tile; every
//! warpgroup issues `wgmma.mma_async.sync.aligned.m64nNk16.f32.{bf16,f16}` on shared-memory
//! matrix descriptors (`N = block_n`, one or two `m64` blocks), `f32` accumulators.
//!
//! ```text
//! prologue: cp.async k tiles 0 .. D-1 into the canonical swizzled layouts, one group each
//! for each k tile kt (of this block's split):
//!     cp.async.wait_group D-1; fence.proxy.async; __syncthreads   (tile kt has landed and
//!         is visible to the tensor cores' async proxy; the wgmmas of tile kt-1-w are done)
//!     cp.async tile kt+D into the stage those wgmmas read; commit
//!     wgmma.fence; per 16-deep step and m64 block: wgmma.mma_async; wgmma.commit_group
//!     wgmma.wait_group w                   (w = 1: tile kt's MMAs run on during the next wait)
//! split-K across blocks (optional), epilogue on the accumulators, rounded once, predicated store
//! ```
//!
//! `D = stages - 1 - w` tiles are copied ahead, so the stage a copy writes is never one a
//! wgmma in flight reads. Shared memory is dynamic (up to the opt-in limit), its start
//! rounded up to a 1024-byte boundary so every stage of every operand starts a swizzle
//! pattern (descriptor base offset 0). Each thread's `cp.async` addresses are computed once:
//! the chunks it copies in one stage differ from its first by compile-time offsets (an add,
//! or an XOR then an add; checked for every thread when the code is generated), and its
//! global pointer moves one tile per copy. Descriptors are built once per warpgroup; a step
//! adds a compile-time offset to the start address field.
//!
//! With TMA ([`WgSchedule::tma`]) one thread stages the tiles instead: it arms the stage's
//! mbarrier with the stage's bytes (`mbarrier.arrive.expect_tx`) and issues
//! `cp.async.bulk.tensor` copies of whole boxes from the kernel's `CUtensorMap` parameters
//! (one for a K-major operand, one per 64-column panel of an MN-major one; out-of-bounds
//! elements, negative `k` included, arrive as zeros); every thread waits for the stage's
//! phase (`mbarrier.try_wait.parity`) before its MMAs, and the barrier at the top of each
//! iteration frees the stage the next copies write. The maps are in
//! [`CudaSource::tensor_maps`]; the runtime encodes them over the input buffers at launch.
//!
//! Loads past an edge are zero-filled (`cp.async` with source size 0), a reduction that
//! `block_k` does not divide starts its first tile before 0 (only the prologue's first copy
//! checks `k`), rows that are not 16-, 8- or 4-byte aligned are copied with 2-byte loads and
//! stores (made visible to the async proxy by the same fence). Every PTX instruction sits in
//! a small `__device__` function whose non-CUDA path calls the emulator
//! (`tests/cuda_emu_sm90.h`). No `#include`; compiling for anything but `compute_90a` stops
//! at an `#error` that says so.
//!
//! ```
//! use tensor_dsl::ir::parse_text;
//! use tensor_dsl::codegen::wgmma::generate;
//! use tensor_dsl::template::{gpu::GpuTarget, wgmma::WgTemplate};
//! let k = parse_text("mm", "c[[i,j]] += a[[i,k]] * b[[k,j]]", None).unwrap()
//!     .with_dtypes("a=bf16,b=bf16").unwrap();
//! let shapes: [&[usize]; 3] = [&[1000, 1000], &[1000, 1000], &[1000, 1000]];
//! let t = WgTemplate::new(&k, &[1000; 3], &shapes, &GpuTarget::h100_sm90a()).unwrap();
//! let src = generate(&k, &[1000; 3], &shapes, &t.default_schedule());
//! assert!(src.source.contains("wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16"));
//! assert!(!src.source.contains("#include"));
//! assert_eq!((src.grid, src.block), ([128, 1, 1], [256, 1, 1])); // 128×64 tiles
//! // 6 stages of both operands, an mbarrier per stage (TMA), the alignment slack:
//! assert_eq!(src.shared_bytes, 6 * (128 + 64) * 64 * 2 + 6 * 8 + 1024);
//! assert!(!src.tensor_maps.is_empty());
//! ```

use super::cuda::CudaSource;
use super::cuda_async::{cp_async_commit, cp_async_copy, cp_async_wait};
use super::tensorcore::{
    batch_coordinates, epilogue, finish, k_pad_of, pair_store_helper, paired_stores, Context,
};
use super::{builtin_prelude, dtype_prelude, storage_type, used_builtins_prelude};
use crate::ir::{DType, Kernel};
use crate::lower::tensorcore::{Gemm, Operand};
use crate::lower::wgmma::{tensor_maps, SmemLayout, TmaCoord, TmaOperand, WgSchedule};
use crate::template::wgmma::WgGeometry;
use std::fmt::Write as _;

/// Generates the wgmma kernel; a kernel or schedule that does not fit gives a source that
/// fails to compile with the reason (`#error`).
pub fn generate(
    kernel: &Kernel,
    extents: &[usize],
    shapes: &[&[usize]],
    schedule: &WgSchedule,
) -> CudaSource {
    source(kernel, extents, shapes, schedule).unwrap_or_else(|e| CudaSource {
        source: format!(
            "#error \"tensor-dsl: invalid wgmma schedule: {}\"\n",
            super::error_text(&e)
        ),
        entry: super::cuda::ENTRY.into(),
        grid: [1, 1, 1],
        block: [1, 1, 1],
        shared_bytes: 0,
        tensor_maps: Vec::new(),
    })
}

/// Where chunk `it` of a thread's copy lands, relative to where its first chunk lands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Dst {
    /// `first + add`.
    Add(usize),
    /// `(first ^ xor) + add`.
    XorAdd(usize, usize),
    /// Swizzled at run time: `swizzle(linear first + add)`.
    Runtime(usize),
}

/// One chunk `it` of every thread's copy of one tile: the offsets of its coordinates from
/// the thread's first chunk (`o` along the tile's rows as stored, `c` along them), where it
/// lands, and whether some threads have no such chunk.
#[derive(Clone, Copy, Debug)]
struct Chunk {
    d_o: usize,
    d_c: usize,
    dst: Dst,
    guard: bool,
}

/// How the threads of a block copy one operand's tile: the tile as stored is `outer` rows
/// of `inner` contiguous elements (K-major: rows of m/n by k; MN-major: rows of k by m/n),
/// copied in chunks of `width` elements, chunk `q` by thread `q % threads`.
struct Copy<'a> {
    p: &'static str,
    op: &'a Operand,
    layout: SmemLayout,
    /// The operand's bytes into a stage.
    at: usize,
    width: usize,
    outer: usize,
    per_row: usize,
    threads: usize,
    chunks: Vec<Chunk>,
}

impl<'a> Copy<'a> {
    fn new(s: &WgSchedule, g: &Gemm, a: bool, op: &'a Operand) -> Result<Copy<'a>, String> {
        let layout = s.layout(a, op.k_major);
        let (outer, inner) = if op.k_major {
            (layout.rows, layout.depth)
        } else {
            (layout.depth, layout.rows)
        };
        let width = op.width;
        let per_row = inner / width;
        let threads = s.threads();
        let total = outer * per_row;
        // Chunk q = t + it * threads of the tile is at (q / per_row, q % per_row * width).
        let coords = |t: usize, it: usize| {
            let q = t + it * threads;
            (q / per_row, q % per_row * width)
        };
        // (row, k) of a chunk's first element.
        let element = |(o, c): (usize, usize)| if op.k_major { (o, c) } else { (c, o) };
        let mut chunks = Vec::new();
        for it in 0..total.div_ceil(threads) {
            let (o0, c0) = coords(0, it);
            let (d_o, d_c) = (o0, c0);
            let exists = |t: usize| coords(t, it).0 < outer;
            // Offsets must not depend on the thread: (q / per_row, q % per_row) of
            // q = t + it*threads is (t / per_row + d_o, t % per_row * width + d_c) when
            // per_row and threads are powers of two.
            for t in 0..threads {
                let (o, c) = coords(t, it);
                let (ot, ct) = coords(t, 0);
                if (o, c) != (ot + d_o, ct + d_c) {
                    return Err(format!(
                        "copy of {}: chunk {it} of thread {t} is not at a fixed offset",
                        p_of(a)
                    ));
                }
            }
            let first = |t: usize| layout.offset(element(coords(t, 0)).0, element(coords(t, 0)).1);
            let here = |t: usize| {
                let (r, k) = element(coords(t, it));
                layout.offset(r, k)
            };
            let lin = |t: usize, i: usize| {
                let (r, k) = element(coords(t, i));
                layout.linear(r, k)
            };
            let live: Vec<usize> = (0..threads).filter(|&t| exists(t)).collect();
            let add = here(0).wrapping_sub(first(0));
            let dst = if live.iter().all(|&t| here(t) == first(t) + add) && here(0) >= first(0) {
                Dst::Add(add)
            } else if let Some(d) = (0..8).map(|x| x << 4).find_map(|x: usize| {
                let y = here(0).checked_sub(first(0) ^ x)?;
                live.iter()
                    .all(|&t| here(t) == (first(t) ^ x) + y)
                    .then_some(Dst::XorAdd(x, y))
            }) {
                d
            } else {
                let d = lin(0, it) - lin(0, 0);
                if !live.iter().all(|&t| lin(t, it) == lin(t, 0) + d) {
                    return Err(format!("copy of {}: no fixed linear offset", p_of(a)));
                }
                Dst::Runtime(d)
            };
            chunks.push(Chunk {
                d_o,
                d_c,
                dst,
                guard: live.len() < threads,
            });
        }
        let at = if a {
            0
        } else {
            s.layout(true, g.a.k_major).bytes()
        };
        Ok(Copy {
            p: p_of(a),
            op,
            layout,
            at,
            width,
            outer,
            per_row,
            threads,
            chunks,
        })
    }

    /// The swizzle of a stage-relative byte offset as C.
    fn swizzle(&self, x: &str) -> String {
        format!("td_swizzle{}({x})", self.layout.swizzle())
    }

    /// The stage-relative linear (unswizzled) offset of element (`row`, `k`) as C.
    fn linear_c(&self, row: &str, k: &str) -> String {
        let l = self.layout;
        let (w, per) = (l.swizzle(), l.swizzle() / 2);
        let (major, minor, panel) = if l.k_major {
            (row, k, l.rows * w)
        } else {
            (k, row, l.depth * w)
        };
        let panels = if (if l.k_major { l.depth } else { l.rows }) > per {
            format!("({minor}) / {per} * {panel} + ")
        } else {
            String::new()
        };
        format!("{panels}({major}) * {w} + ({minor}) % {per} * 2")
    }

    /// The thread's coordinates, addresses and row checks (before the prologue).
    fn setup(&self, out: &mut String, ind: &str, g: &Gemm, s: &WgSchedule) {
        let (p, op) = (self.p, self.op);
        let a = p == "a";
        let (row0, rows_extent, block_rows) = if a {
            ("m0", g.m_extent, s.block_m())
        } else {
            ("n0", g.n_extent, s.block_n)
        };
        let w = self.width;
        let _ = writeln!(
            out,
            "{ind}/* {}: {} x {} {} tile, {}; thread t copies chunk t + i * {} */",
            if a { "A" } else { "B" },
            self.outer,
            self.per_row * w,
            if op.k_major { "k-major" } else { "mn-major" },
            if w > 1 {
                format!("cp.async {} B", 2 * w)
            } else {
                "2-byte loads".into()
            },
            self.threads
        );
        let _ = writeln!(
            out,
            "{ind}const int {p}_o = threadIdx.x / {}, {p}_c = threadIdx.x % {} * {w};",
            self.per_row, self.per_row
        );
        let (ri, ki) = if op.k_major {
            (format!("{p}_o"), format!("{p}_c"))
        } else {
            (format!("{p}_c"), format!("{p}_o"))
        };
        let pad = k_pad_of(g, s.block_k);
        let mut kx = ki.clone();
        if pad > 0 {
            kx = format!("({kx} - {pad})");
        }
        if s.splits > 1 {
            kx = format!("({kx} + kt0 * {})", s.block_k);
        }
        // Before the tensor when the first tile starts before k = 0: never read there.
        let _ = writeln!(
            out,
            "{ind}const unsigned short *{p}_src = t{} + ({p}_base + ({row0} + {ri}) * {} + {kx} * {});",
            op.param, op.row_stride, op.k_stride
        );
        let lin = self.linear_c(&ri, &ki);
        if self.chunks.iter().any(|c| matches!(c.dst, Dst::Runtime(_))) {
            let _ = writeln!(
                out,
                "{ind}const unsigned {p}_lin = {lin}, {p}_dst = sbase + {}u + {};",
                self.at,
                self.swizzle(&format!("{p}_lin"))
            );
        } else {
            let _ = writeln!(
                out,
                "{ind}const unsigned {p}_dst = sbase + {}u + {};",
                self.at,
                self.swizzle(&lin)
            );
        }
        if !rows_extent.is_multiple_of(block_rows) {
            for (it, c) in self.chunks.iter().enumerate() {
                let cond = if op.k_major {
                    format!("{row0} + {p}_o + {} < {rows_extent}", c.d_o)
                } else {
                    format!("{row0} + {p}_c + {} < {rows_extent}", c.d_c)
                };
                let _ = writeln!(out, "{ind}const bool {p}_in{it} = {cond};");
            }
        }
    }

    /// The copy of k tile `kt` (of the block's split) into the stage `stage` bytes into the
    /// pipeline (`prologue`: the copy may be of the first tile of the reduction).
    #[allow(clippy::too_many_arguments)]
    fn load(
        &self,
        out: &mut String,
        ind: &str,
        g: &Gemm,
        s: &WgSchedule,
        stage: &str,
        kt: &str,
        prologue: bool,
    ) {
        let (p, op) = (self.p, self.op);
        let a = p == "a";
        let (rows_extent, block_rows) = if a {
            (g.m_extent, s.block_m())
        } else {
            (g.n_extent, s.block_n)
        };
        let rows_checked = !rows_extent.is_multiple_of(block_rows);
        let pad = if prologue { k_pad_of(g, s.block_k) } else { 0 };
        let first = if s.splits > 1 { " + kt0" } else { "" };
        for (it, c) in self.chunks.iter().enumerate() {
            let mut ok = Vec::new();
            if rows_checked {
                ok.push(format!("{p}_in{it}"));
            }
            if pad > 0 {
                ok.push(if op.k_major {
                    format!("({kt}{first} > 0 || {p}_c + {} >= {pad})", c.d_c)
                } else {
                    format!("({kt}{first} > 0 || {p}_o + {} >= {pad})", c.d_o)
                });
            }
            let ok = if ok.is_empty() {
                "true".to_string()
            } else {
                ok.join(" && ")
            };
            let (d_row, d_k) = if op.k_major {
                (c.d_o, c.d_c)
            } else {
                (c.d_c, c.d_o)
            };
            let src_off = d_row * op.row_stride + d_k * op.k_stride;
            let dst = match c.dst {
                Dst::Add(0) => format!("{p}_dst + {stage}"),
                Dst::Add(y) => format!("{p}_dst + {stage} + {y}u"),
                Dst::XorAdd(x, y) => format!("({p}_dst ^ {x}u) + {stage} + {y}u"),
                Dst::Runtime(d) => format!(
                    "sbase + {}u + {stage} + {}",
                    self.at,
                    self.swizzle(&format!("{p}_lin + {d}u"))
                ),
            };
            let idle = if c.guard {
                format!("if ({p}_o + {} < {}) ", c.d_o, self.outer)
            } else {
                String::new()
            };
            if self.width > 1 {
                let _ = writeln!(
                    out,
                    "{ind}{idle}td_cp_async{}({dst}, {p}_src + {src_off}, {ok});",
                    2 * self.width
                );
            } else {
                let _ = writeln!(
                    out,
                    "{ind}{idle}td_st_shared16({dst}, {ok} ? {p}_src[{src_off}] : (unsigned short)0);"
                );
            }
        }
        let _ = writeln!(out, "{ind}{p}_src += {};", s.block_k * op.k_stride);
    }
}

fn p_of(a: bool) -> &'static str {
    if a {
        "a"
    } else {
        "b"
    }
}

/// The PTX wrappers: shared addresses, the swizzles, wgmma (fence, the MMA of this `N`,
/// commit, wait), the proxy fence, cp.async of each width, 2-byte shared stores.
fn ptx_helpers(g: &Gemm, s: &WgSchedule, staging: &Staging) -> String {
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
         /* The same value in every lane, as the compiler sees it: kept in uniform registers\n \
         * (the warpgroup index, hence the descriptors). */\n\
         {q} int td_warp_uniform(int x) {{\n\
         #ifdef __CUDA_ARCH__\n\
         \x20   return __shfl_sync(0xffffffffu, x, 0);\n\
         #else\n\
         \x20   return x;\n\
         #endif\n}}\n"
    );
    let mut widths: Vec<usize> = match staging {
        Staging::CpAsync(copies) => copies.iter().map(|c| c.layout.swizzle()).collect(),
        Staging::Tma(_) => Vec::new(),
    };
    widths.sort_unstable();
    widths.dedup();
    for w in widths {
        let _ = writeln!(
            h,
            "/* The {w}-byte swizzle: 16-byte chunk bits [4, {}) ^= address bits [7, {}). */\n\
             {q} unsigned td_swizzle{w}(unsigned x) {{ return x ^ (((x >> 7) & {}u) << 4); }}",
            4 + (w / 16).trailing_zeros(),
            7 + (w / 16).trailing_zeros(),
            w / 16 - 1
        );
    }
    let n = s.block_n;
    let half = n / 2;
    let regs: Vec<String> = (0..half).map(|r| format!("%{r}")).collect();
    let outs: Vec<String> = (0..half).map(|r| format!("\"+f\"(d[{r}])")).collect();
    let (ta, tb) = (u8::from(!g.a.k_major), u8::from(!g.b.k_major));
    let _ = write!(
        h,
        "{q} void td_wgmma_fence() {{\n\
         #ifdef __CUDA_ARCH__\n\
         \x20   asm volatile(\"wgmma.fence.sync.aligned;\" ::: \"memory\");\n\
         #else\n\
         \x20   td_emu90_wgmma_fence();\n\
         #endif\n}}\n\
         /* d[0..{half}) += A (64x16, descriptor da) * B (16x{n}, descriptor db): one warpgroup MMA,\n \
         * {ty} inputs (A {}, B {}), f32 accumulators. */\n\
         {q} void td_wgmma(float *d, unsigned long long da, unsigned long long db) {{\n\
         #ifdef __CUDA_ARCH__\n\
         \x20   asm volatile(\"{{ .reg .pred p; setp.ne.b32 p, %{}, 0;\\n\"\n\
         \x20       \"wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{ty}.{ty} {{{}}}, %{half}, %{}, p, 1, 1, {ta}, {tb}; }}\"\n\
         \x20       : {}\n\
         \x20       : \"l\"(da), \"l\"(db), \"r\"(1) : \"memory\");\n\
         #else\n\
         \x20   td_emu90_wgmma(d, da, db, {n}, {ta}, {tb}, {bf});\n\
         #endif\n}}\n\
         {q} void td_wgmma_commit() {{\n\
         #ifdef __CUDA_ARCH__\n\
         \x20   asm volatile(\"wgmma.commit_group.sync.aligned;\" ::: \"memory\");\n\
         #else\n\
         \x20   td_emu90_wgmma_commit();\n\
         #endif\n}}\n",
        if g.a.k_major { "k-major" } else { "m-major" },
        if g.b.k_major { "k-major" } else { "n-major" },
        half + 2,
        regs.join(", "),
        half + 1,
        outs.join(", "),
        bf = u8::from(g.dtype == DType::BF16)
    );
    let mut waits = vec![0, s.wait_depth()];
    waits.dedup();
    for w in waits {
        let _ = write!(
            h,
            "{q} void td_wgmma_wait{w}() {{\n\
             #ifdef __CUDA_ARCH__\n\
             \x20   asm volatile(\"wgmma.wait_group.sync.aligned {w};\" ::: \"memory\");\n\
             #else\n\
             \x20   td_emu90_wgmma_wait({w});\n\
             #endif\n}}\n"
        );
    }
    let accs = s.accumulators();
    let _ = write!(
        h,
        "/* Keeps the compiler from moving accumulator reads or writes across the asynchronous MMAs. */\n\
         {q} void td_acc_fence(float *d) {{\n\
         #ifdef __CUDA_ARCH__\n\
         \x20   #pragma unroll\n\
         \x20   for (int i = 0; i < {accs}; ++i) asm volatile(\"\" : \"+f\"(d[i]) :: \"memory\");\n\
         #endif\n}}\n"
    );
    match staging {
        Staging::CpAsync(copies) => h.push_str(&cp_async_helpers(s, copies)),
        Staging::Tma(ops) => h.push_str(&tma_helpers(ops)),
    }
    h
}

/// The `cp.async` staging's wrappers: the proxy fence, copies of each width (2-byte loads
/// and stores for unaligned rows), commit and waits.
fn cp_async_helpers(s: &WgSchedule, copies: &[Copy; 2]) -> String {
    let q = "static __device__ __forceinline__";
    let mut h = String::new();
    let _ = write!(
        h,
        "/* Makes this thread's writes to shared memory visible to the tensor cores (the async proxy). */\n\
         {q} void td_fence_proxy_async() {{\n\
         #ifdef __CUDA_ARCH__\n\
         \x20   asm volatile(\"fence.proxy.async.shared::cta;\" ::: \"memory\");\n\
         #else\n\
         \x20   td_emu90_fence_proxy_async();\n\
         #endif\n}}\n"
    );
    let mut widths: Vec<usize> = copies.iter().map(|c| c.width).collect();
    widths.sort_unstable();
    widths.dedup();
    for w in widths {
        if w == 1 {
            let _ = write!(
                h,
                "{q} void td_st_shared16(unsigned dst, unsigned short v) {{\n\
                 #ifdef __CUDA_ARCH__\n\
                 \x20   asm volatile(\"st.shared.u16 [%0], %1;\" :: \"r\"(dst), \"h\"(v) : \"memory\");\n\
                 #else\n\
                 \x20   td_emu90_shared_store((unsigned short *)(td_shared_base + dst), v);\n\
                 #endif\n}}\n"
            );
            continue;
        }
        let bytes = 2 * w;
        let _ = writeln!(
            h,
            "/* {bytes} bytes global -> shared, asynchronously; zeros when !ok (then nothing is read). */"
        );
        h.push_str(&cp_async_copy(bytes, "unsigned short", "td_emu90_cp_async"));
    }
    h.push_str(&cp_async_commit());
    let mut waits = vec![s.prefetch() - 1, 0];
    waits.dedup();
    for n in waits {
        h.push_str(&cp_async_wait(n, "td_emu90_cp_async_wait"));
    }
    h
}

/// The TMA staging's wrappers: the tensor-map parameter type (`CUtensorMap`'s 128 bytes,
/// declared here: no headers), mbarrier init / expect-tx arrival / parity wait, and tiled
/// bulk tensor copies of each rank used.
fn tma_helpers(ops: &[TmaOperand; 2]) -> String {
    let q = "static __device__ __forceinline__";
    let mut h = String::new();
    let _ = write!(
        h,
        "/* CUtensorMap: 128 opaque bytes the runtime encodes (cuTensorMapEncodeTiled); the emulator\n \
         * declares its own. */\n\
         #ifndef TD_TENSOR_MAP_DEFINED\n\
         #define TD_TENSOR_MAP_DEFINED\n\
         struct __align__(64) td_tensor_map {{ unsigned long long opaque[16]; }};\n\
         #endif\n\
         {q} void td_mbar_init(unsigned bar, unsigned count) {{\n\
         #ifdef __CUDA_ARCH__\n\
         \x20   asm volatile(\"mbarrier.init.shared::cta.b64 [%0], %1;\" :: \"r\"(bar), \"r\"(count) : \"memory\");\n\
         #else\n\
         \x20   td_emu90_mbar_init(td_shared_base + bar, count);\n\
         #endif\n}}\n\
         /* Makes the initialized mbarriers visible to the async proxy (the TMA unit). */\n\
         {q} void td_mbar_init_fence() {{\n\
         #ifdef __CUDA_ARCH__\n\
         \x20   asm volatile(\"fence.mbarrier_init.release.cluster;\" ::: \"memory\");\n\
         #endif\n}}\n\
         /* One arrival that also expects `bytes` of copies to complete on the barrier. */\n\
         {q} void td_mbar_expect(unsigned bar, unsigned bytes) {{\n\
         #ifdef __CUDA_ARCH__\n\
         \x20   asm volatile(\"mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\" :: \"r\"(bar), \"r\"(bytes) : \"memory\");\n\
         #else\n\
         \x20   td_emu90_mbar_expect(td_shared_base + bar, bytes);\n\
         #endif\n}}\n\
         /* Waits until the barrier's phase of parity `parity` has completed. */\n\
         {q} void td_mbar_wait(unsigned bar, unsigned parity) {{\n\
         #ifdef __CUDA_ARCH__\n\
         \x20   asm volatile(\"{{\\n .reg .pred p;\\n TD_WAIT:\\n mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\\n @!p bra TD_WAIT;\\n}}\" :: \"r\"(bar), \"r\"(parity) : \"memory\");\n\
         #else\n\
         \x20   td_emu90_mbar_wait(td_shared_base + bar, parity);\n\
         #endif\n}}\n"
    );
    let mut ranks: Vec<usize> = ops.iter().map(|o| o.spec.dims.len()).collect();
    ranks.sort_unstable();
    ranks.dedup();
    for r in ranks {
        let params: Vec<String> = (0..r).map(|c| format!("int c{c}")).collect();
        let regs: Vec<String> = (0..r).map(|c| format!("%{}", c + 3)).collect();
        let args: Vec<String> = (0..r).map(|c| format!("\"r\"(c{c})")).collect();
        let names: Vec<String> = (0..r).map(|c| format!("c{c}")).collect();
        let _ = write!(
            h,
            "/* A box of the {r}-d tensor map at coordinates (c0, ...) into shared memory at dst (zeros out\n \
             * of bounds), completing `box bytes` on the mbarrier. */\n\
             {q} void td_tma_load{r}(unsigned dst, const td_tensor_map *map, unsigned bar, {}) {{\n\
             #ifdef __CUDA_ARCH__\n\
             \x20   asm volatile(\"cp.async.bulk.tensor.{r}d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {{{}}}], [%2];\"\n\
             \x20       :: \"r\"(dst), \"l\"(map), \"r\"(bar), {} : \"memory\");\n\
             #else\n\
             \x20   const int c[{r}] = {{{}}};\n\
             \x20   td_emu90_tma_load(td_shared_base + dst, map, td_shared_base + bar, c, {r});\n\
             #endif\n}}\n",
            params.join(", "),
            regs.join(", "),
            args.join(", "),
            names.join(", ")
        );
    }
    h
}

/// How the operands reach shared memory: every thread's `cp.async`, or TMA boxes.
enum Staging<'a> {
    CpAsync([Copy<'a>; 2]),
    Tma([TmaOperand; 2]),
}

/// One thread's TMA copies of k tile `tile` (of the block's split) into the stage `stage`
/// bytes into the pipeline, completing on the mbarrier at `bar`.
#[allow(clippy::too_many_arguments)]
fn tma_issue(
    out: &mut String,
    ind: &str,
    g: &Gemm,
    s: &WgSchedule,
    ops: &[TmaOperand; 2],
    index_c: &[String],
    stage: &str,
    tile: &str,
    bar: &str,
) {
    let pad = k_pad_of(g, s.block_k);
    let first = if s.splits > 1 { " + kt0" } else { "" };
    let (la, lb) = (s.layout(true, g.a.k_major), s.layout(false, g.b.k_major));
    let _ = writeln!(
        out,
        "{ind}const int k0 = ({tile}{first}) * {}{};",
        s.block_k,
        if pad > 0 {
            format!(" - {pad}")
        } else {
            String::new()
        }
    );
    let _ = writeln!(
        out,
        "{ind}td_mbar_expect({bar}, {}u);",
        la.bytes() + lb.bytes()
    );
    for (n, (op, (at, row0))) in ops.iter().zip([(0, "m0"), (la.bytes(), "n0")]).enumerate() {
        for q in 0..op.boxes {
            let coords: Vec<String> = op
                .coords
                .iter()
                .map(|c| match c {
                    TmaCoord::K => "k0".to_string(),
                    TmaCoord::Row if q == 0 => row0.to_string(),
                    TmaCoord::Row => format!("{row0} + {}", 64 * q),
                    TmaCoord::Batch(v) => index_c[*v].clone(),
                })
                .collect();
            let _ = writeln!(
                out,
                "{ind}td_tma_load{}(sbase + {}u + {stage}, &td_map{n}, {bar}, {});",
                op.spec.dims.len(),
                at + q * op.panel_bytes,
                coords.join(", ")
            );
        }
    }
}

fn source(
    kernel: &Kernel,
    extents: &[usize],
    shapes: &[&[usize]],
    s: &WgSchedule,
) -> Result<CudaSource, String> {
    s.validate()?;
    let g = Gemm::analyze(kernel, extents, shapes)?;
    if !g.a.linear || !g.b.linear {
        return Err("an operand is not addressed linearly".into());
    }
    let cx = Context {
        kernel,
        extents,
        shapes,
    };
    let tiles = g.wg_tiles(s);
    let blocks = tiles * s.splits;
    let threads = s.threads();
    if blocks >= 1 << 31 {
        return Err("too many blocks".into());
    }
    let (la, lb) = (s.layout(true, g.a.k_major), s.layout(false, g.b.k_major));
    let staging = if s.tma {
        Staging::Tma(tensor_maps(kernel, &g, s)?)
    } else {
        Staging::CpAsync([
            Copy::new(s, &g, true, &g.a)?,
            Copy::new(s, &g, false, &g.b)?,
        ])
    };
    let stage_bytes = la.bytes() + lb.bytes();
    let shared = g.wg_shared_bytes(s);
    let (mi_n, ni_n) = (s.m_blocks(), s.block_n / 8);
    let grid_m = g.m_extent.div_ceil(s.block_m());
    let grid_n = g.n_extent.div_ceil(s.block_n);
    let k_tiles_total = g.wg_k_tiles(s);
    let split = g.wg_split(s);
    let k_tiles = if split.is_some() {
        "kt_n".to_string()
    } else {
        k_tiles_total.to_string()
    };
    let bid = if split.is_some() {
        "tile"
    } else {
        "blockIdx.x"
    };
    let (depth, wait) = (s.prefetch(), s.wait_depth());
    let out_dtype = kernel.params[kernel.output].dtype;

    let mut src = String::new();
    let _ = writeln!(
        src,
        "/* tensor-dsl generated CUDA C (codegen v{}, tensor cores, sm_90a wgmma)",
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
        " * schedule (wgmma m64n{}k16, f32 accumulators): block {}x{}x{} = {} warpgroup(s) of {}x{}, \
         {} stages ({depth} k tiles copied ahead by {}, {wait} wgmma group(s) left in flight)",
        s.block_n,
        s.block_m(),
        s.block_n,
        s.block_k,
        s.warpgroups,
        s.wg_m,
        s.block_n,
        s.stages,
        if s.tma { "TMA" } else { "cp.async" }
    );
    let _ = writeln!(
        src,
        " *   {threads} threads, {blocks} blocks, {} accumulators per thread, {shared} bytes of \
         dynamic shared memory; A {} {}-byte swizzle, B {} {}-byte swizzle",
        s.accumulators(),
        if g.a.k_major { "k-major" } else { "m-major" },
        la.swizzle(),
        if g.b.k_major { "k-major" } else { "n-major" },
        lb.swizzle(),
    );
    if s.splits > 1 {
        let _ = writeln!(
            src,
            " *   split-K across blocks: {} blocks per output tile, {k_tiles_total} k tiles",
            s.splits
        );
    }
    let _ = writeln!(src, " */");
    let _ = writeln!(
        src,
        "#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)\n\
         #error \"tensor-dsl: this kernel uses wgmma: compile it for compute_90a (ptxas -arch=sm_90a)\"\n\
         #endif"
    );
    if !kernel.epilogue.is_empty() {
        src.push_str(&builtin_prelude("__device__ "));
        src.push_str(&used_builtins_prelude(kernel, "__device__ "));
    }
    src.push_str(&dtype_prelude(kernel, "__device__ "));
    src.push_str(&ptx_helpers(&g, s, &staging));
    if paired_stores(kernel, extents, &g) {
        src.push_str(&pair_store_helper(out_dtype));
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
        .chain(match &staging {
            Staging::Tma(_) => vec![
                "const __grid_constant__ td_tensor_map td_map0".to_string(),
                "const __grid_constant__ td_tensor_map td_map1".to_string(),
            ],
            Staging::CpAsync(_) => Vec::new(),
        })
        .collect();
    let _ = writeln!(
        src,
        "extern \"C\" __global__ void __launch_bounds__({threads})\n{}({})\n{{",
        super::cuda::ENTRY,
        params.join(", ")
    );
    let i = "    ";
    let _ = writeln!(
        src,
        "#ifdef __CUDA_ARCH__\n\
         {i}extern __shared__ __align__(1024) unsigned char td_dsmem[];\n\
         #else\n\
         {i}static __attribute__((aligned(1024))) unsigned char td_dsmem[{shared}];\n\
         {i}td_shared_base = td_dsmem;\n\
         {i}td_emu90_shared(td_dsmem);\n\
         #endif"
    );
    let _ = writeln!(
        src,
        "{i}/* stages of A then B, from a 1024-byte boundary (where the 128-byte swizzle's pattern starts) */"
    );
    let _ = writeln!(
        src,
        "{i}const unsigned sbase = (td_smem(td_dsmem) + 1023u) & ~1023u;"
    );
    let _ = writeln!(
        src,
        "{i}const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, wg = td_warp_uniform(threadIdx.x >> 7);"
    );
    if let Some(p) = &split {
        p.decode(&mut src, i, k_tiles_total);
    }
    let _ = writeln!(
        src,
        "{i}const int n0 = {bid} % {grid_n} * {}, m0 = {bid} / {grid_n} % {grid_m} * {};",
        s.block_n,
        s.block_m()
    );
    let index_c = batch_coordinates(&mut src, i, kernel, extents, &g, bid, grid_m * grid_n);
    if let Staging::CpAsync(copies) = &staging {
        for c in copies {
            c.setup(&mut src, i, &g, s);
        }
    }
    // Descriptors: the layout's fields and the start address >> 4; a step adds to the start.
    let _ = writeln!(
        src,
        "{i}/* matrix descriptors: start address >> 4 | LBO >> 4 << 16 | SBO >> 4 << 32 | swizzle << 62 */"
    );
    let _ = writeln!(
        src,
        "{i}const unsigned long long da = 0x{:016x}ull | ((sbase + wg * {}u) >> 4);",
        la.descriptor_bits(),
        la.start(s.wg_m, 0)
    );
    let _ = writeln!(
        src,
        "{i}const unsigned long long db = 0x{:016x}ull | ((sbase + {}u) >> 4);",
        lb.descriptor_bits(),
        la.bytes()
    );
    let _ = writeln!(src, "{i}float acc[{mi_n}][{ni_n}][4];");
    let _ = writeln!(
        src,
        "{i}#pragma unroll\n{i}for (int x = 0; x < {}; ++x) (&acc[0][0][0])[x] = 0.0f;",
        mi_n * ni_n * 4
    );
    let _ = writeln!(src, "{i}td_acc_fence(&acc[0][0][0]);");
    let last = (s.stages - 1) * stage_bytes;
    // The MMAs of one k tile on the stage `rs` bytes into the pipeline.
    let mmas = |src: &mut String| {
        let _ = writeln!(src, "{i}    td_wgmma_fence();");
        let _ = writeln!(src, "{i}    const unsigned long long r16 = rs >> 4;");
        for ks in 0..s.block_k / 16 {
            for mi in 0..mi_n {
                let _ = writeln!(
                    src,
                    "{i}    td_wgmma(&acc[{mi}][0][0], da + r16 + {}u, db + r16 + {}u);",
                    la.start(mi * 64, ks * 16) >> 4,
                    lb.start(0, ks * 16) >> 4
                );
            }
        }
        let _ = writeln!(src, "{i}    td_wgmma_commit();");
        let _ = writeln!(src, "{i}    td_wgmma_wait{wait}();");
        let _ = writeln!(src, "{i}    rs = rs == {last}u ? 0u : rs + {stage_bytes}u;");
        let _ = writeln!(src, "{i}    ws = ws == {last}u ? 0u : ws + {stage_bytes}u;");
    };

    match &staging {
        Staging::CpAsync([copy_a, copy_b]) => {
            let _ = writeln!(src, "{i}/* prologue: the first {depth} k tiles */");
            let _ = writeln!(src, "{i}#pragma unroll");
            let _ = writeln!(src, "{i}for (int st = 0; st < {depth}; ++st) {{");
            let _ = writeln!(src, "{i}    if (st < {k_tiles}) {{");
            let first = format!("st * {stage_bytes}u");
            copy_a.load(&mut src, "            ", &g, s, &first, "st", true);
            copy_b.load(&mut src, "            ", &g, s, &first, "st", true);
            let _ = writeln!(src, "{i}    }}");
            let _ = writeln!(src, "{i}    td_cp_async_commit();");
            let _ = writeln!(src, "{i}}}");
            let _ = writeln!(
                src,
                "{i}/* bytes into the pipeline of the stage multiplied (rs) and written (ws) this iteration */"
            );
            let _ = writeln!(src, "{i}unsigned rs = 0, ws = {}u;", depth * stage_bytes);
            let _ = writeln!(src, "{i}#pragma unroll 1");
            let _ = writeln!(src, "{i}for (int kt = 0; kt < {k_tiles}; ++kt) {{");
            let _ = writeln!(src, "{i}    td_cp_async_wait{}();", depth - 1);
            let _ = writeln!(src, "{i}    td_fence_proxy_async();");
            let _ = writeln!(src, "{i}    __syncthreads();");
            let _ = writeln!(
                src,
                "{i}    /* prefetch k tile kt + {depth} into a stage no wgmma in flight reads */"
            );
            let _ = writeln!(src, "{i}    {{");
            let _ = writeln!(src, "{i}        const int nt = kt + {depth};");
            let _ = writeln!(src, "{i}        if (nt < {k_tiles}) {{");
            copy_a.load(&mut src, "                ", &g, s, "ws", "nt", false);
            copy_b.load(&mut src, "                ", &g, s, "ws", "nt", false);
            let _ = writeln!(src, "{i}        }}");
            let _ = writeln!(src, "{i}        td_cp_async_commit();");
            let _ = writeln!(src, "{i}    }}");
            mmas(&mut src);
            let _ = writeln!(src, "{i}}}");
            if wait > 0 {
                let _ = writeln!(src, "{i}td_wgmma_wait0();");
            }
            let _ = writeln!(src, "{i}td_acc_fence(&acc[0][0][0]);");
            let _ = writeln!(src, "{i}td_cp_async_wait0();");
        }
        Staging::Tma(ops) => {
            let stages = s.stages;
            let _ = writeln!(
                src,
                "{i}/* one mbarrier per stage, after the stages: thread 0 arms it with the stage's bytes and\n\
                 {i} * issues the stage's TMA copies; everyone waits for the phase of its use */"
            );
            let _ = writeln!(
                src,
                "{i}const unsigned bars = sbase + {}u;",
                stages * stage_bytes
            );
            let _ = writeln!(src, "{i}if (threadIdx.x == 0) {{");
            let _ = writeln!(src, "{i}    #pragma unroll");
            let _ = writeln!(
                src,
                "{i}    for (int st = 0; st < {stages}; ++st) td_mbar_init(bars + 8u * st, 1u);"
            );
            let _ = writeln!(src, "{i}    td_mbar_init_fence();");
            let _ = writeln!(src, "{i}    /* prologue: the first {depth} k tiles */");
            let _ = writeln!(src, "{i}    #pragma unroll");
            let _ = writeln!(src, "{i}    for (int st = 0; st < {depth}; ++st) {{");
            let _ = writeln!(src, "{i}        if (st < {k_tiles}) {{");
            tma_issue(
                &mut src,
                "                ",
                &g,
                s,
                ops,
                &index_c,
                &format!("st * {stage_bytes}u"),
                "st",
                "bars + 8u * st",
            );
            let _ = writeln!(src, "{i}        }}");
            let _ = writeln!(src, "{i}    }}");
            let _ = writeln!(src, "{i}}}");
            let _ = writeln!(
                src,
                "{i}/* the stage multiplied (rs bytes into the pipeline, mbarrier rb, its phase's parity)\n\
                 {i} * and the stage written (ws, wb) this iteration */"
            );
            let _ = writeln!(
                src,
                "{i}unsigned rs = 0, ws = {}u, rb = 0, wb = {depth}u, parity = 0;",
                depth * stage_bytes
            );
            let _ = writeln!(src, "{i}#pragma unroll 1");
            let _ = writeln!(src, "{i}for (int kt = 0; kt < {k_tiles}; ++kt) {{");
            let _ = writeln!(
                src,
                "{i}    __syncthreads(); /* the MMAs that read stage wb are done, in every warpgroup */"
            );
            let _ = writeln!(
                src,
                "{i}    if (threadIdx.x == 0 && kt + {depth} < {k_tiles}) {{"
            );
            tma_issue(
                &mut src,
                "            ",
                &g,
                s,
                ops,
                &index_c,
                "ws",
                &format!("kt + {depth}"),
                "bars + 8u * wb",
            );
            let _ = writeln!(src, "{i}    }}");
            let _ = writeln!(src, "{i}    td_mbar_wait(bars + 8u * rb, parity);");
            mmas(&mut src);
            let _ = writeln!(
                src,
                "{i}    if (++rb == {stages}u) {{ rb = 0; parity ^= 1u; }}"
            );
            let _ = writeln!(src, "{i}    if (++wb == {stages}u) wb = 0;");
            let _ = writeln!(src, "{i}}}");
            if wait > 0 {
                let _ = writeln!(src, "{i}td_wgmma_wait0();");
            }
            let _ = writeln!(src, "{i}td_acc_fence(&acc[0][0][0]);");
        }
    }
    if let Some(p) = &split {
        // Every copy landed and every MMA retired: the shared memory is free.
        p.reduce(
            &mut src,
            i,
            "&acc[0][0][0]",
            None,
            "*reinterpret_cast<unsigned *>(td_dsmem)",
        );
    }
    let _ = writeln!(
        src,
        "{i}/* row of accumulator (mi, ni, e): warpgroup wg's m64 block mi, warp (warp & 3)'s 16 rows */"
    );
    let _ = writeln!(src, "{i}const int wr = wg * {} + (warp & 3) * 16;", s.wg_m);
    epilogue(
        &mut src,
        i,
        &cx,
        &g,
        index_c,
        "m0 + wr + mi * 64 + (lane >> 2) + (e >> 1) * 8",
        "n0 + ni * 8 + (lane & 3) * 2 + (e & 1)",
        (mi_n, ni_n),
    );
    src.push_str("}\n");
    Ok(CudaSource {
        source: finish(src),
        entry: super::cuda::ENTRY.into(),
        grid: [blocks as u32, 1, 1],
        block: [threads as u32, 1, 1],
        shared_bytes: shared as u32,
        tensor_maps: match staging {
            Staging::Tma([a, b]) => vec![a.spec, b.spec],
            Staging::CpAsync(_) => Vec::new(),
        },
    })
}
