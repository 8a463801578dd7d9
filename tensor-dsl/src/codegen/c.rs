//! C for the CPU: one shared object per (kernel, shape, schedule) exporting
//! `void td_kernel(const void *const *args, void *out)`, where `args[p]` is parameter
//! `p`'s data (the output's slot is unused), each at its parameter's storage type (`float`,
//! or `unsigned short` for `f16`/`bf16`, widened to `float` when read; the output is
//! rounded once, when stored).
//!
//! The loop nest is built by [`crate::lower::cpu`] (described in [`crate::template::cpu`])
//! and printed by [`super::printer`] with the C dialect ([`CDialect`]). Extents and strides
//! are baked in as constants, so the compiler sees exact trip counts.
//!
//! ```
//! use tensor_dsl::{codegen::c, ir::parse_text, template::cpu::CpuConfig};
//! let k = parse_text("mm", "c[[i,j]] += a[[i,k]] * b[[k,j]]", None).unwrap();
//! let shapes: [&[usize]; 3] = [&[8, 4], &[4, 16], &[8, 16]];
//! let cfg = CpuConfig::heuristic(&k, &[8, 16, 4], 8);
//! let src = c::generate(&k, &[8, 16, 4], &shapes, &cfg);
//! assert!(src.contains("void td_kernel(const void *const *args, void *out)"));
//! ```

use super::printer::{self, Dialect, Lines, LoopContext};
use super::{builtin_prelude, dtype_prelude};
use crate::ir::{DType, Kernel};
use crate::lower::{self, cpu::Plan, Buffer, Func, LoopKind, Nest, Param};
use crate::template::cpu::CpuConfig;
use std::fmt::Write as _;

/// Version of the generated code's shape; part of every compiled-artifact key.
pub const CODEGEN_VERSION: u32 = 4;

/// Name of the exported entry point.
pub const ENTRY: &str = lower::cpu::ENTRY;

/// Every name a generated C unit exports: the entry point and, where a nest has a
/// [`lower::Prepack`], its functions and constants (what a caller linking several units
/// into one object renames).
pub const EXPORTS: [&str; 5] = [
    ENTRY,
    lower::cpu::PREPACK_FILL,
    lower::cpu::PREPACK_ENTRY,
    lower::cpu::PREPACK_INPUT,
    lower::cpu::PREPACK_ELEMS,
];

/// The macro that opens an [`LoopKind::InOrder`] loop; [`IN_ORDER_PRELUDE`] defines it.
pub const IN_ORDER: &str = "TD_IN_ORDER";

/// Defines [`IN_ORDER`]: with GCC 9 or later, `omp simd if(0)` (OpenMP 5.0: "run this loop
/// one iteration at a time"), the only way GCC 12 offers to keep one loop from being
/// vectorized (`#pragma GCC novector` came in GCC 14). It needs `-fopenmp` or
/// `-fopenmp-simd`; without either, and with other compilers, it is nothing.
pub const IN_ORDER_PRELUDE: &str = "\
/* Reduction loops around a register tile run in order: GCC would otherwise vectorize the
   innermost one (one in-order float sum per accumulator) instead of the tile. */
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 9
#define TD_IN_ORDER _Pragma(\"omp simd if(0)\")
#else
#define TD_IN_ORDER
#endif
";

/// Defines `TD_ASSUME(c)`, which prints a [`lower::Stmt::Assume`]: with GCC and Clang,
/// `if (!(c)) __builtin_unreachable();`, from which they take value ranges.
pub const ASSUME_PRELUDE: &str = "\
/* Facts about a tile function's parameters (their ranges), which the compiler would know
   had it inlined the function: they let it drop bounds checks that cannot fail. */
#if defined(__GNUC__)
#define TD_ASSUME(c) do { if (!(c)) __builtin_unreachable(); } while (0)
#else
#define TD_ASSUME(c) ((void)0)
#endif
";

/// C with OpenMP and GCC pragmas.
pub struct CDialect;

impl Dialect for CDialect {
    fn restrict(&self) -> &'static str {
        "restrict"
    }

    /// Tile functions are compiled each on its own: inlined together into the entry point,
    /// GCC 12 left a full tile unvectorized next to an edge tile (a 1000³ matmul ran 8x
    /// slower), and a call per tile costs nothing measurable (each runs a whole reduction).
    fn helper_qualifiers(&self) -> &'static str {
        "static __attribute__((noinline)) "
    }

    /// `void td_kernel(const void *const *args, void *out)`, each input bound from `args`
    /// at its own element type.
    fn entry_head(
        &self,
        nest: &Nest,
        func: &Func,
        params: &[String],
        out: &mut Lines,
    ) -> Result<(), String> {
        let output = nest
            .param_buffer(nest.kernel.output)
            .ok_or("the nest has no output buffer")?;
        out.line(
            0,
            &format!(
                "void {}(const void *const *args, void *{})",
                func.name, output.name
            ),
        );
        out.line(0, "{");
        for (p, decl) in func.params.iter().zip(params) {
            if let Param::Buffer { buf, .. } = p {
                let b = nest.buffer(*buf).ok_or("a parameter has no buffer")?;
                if let (Some(param), true) = (b.param, b.param != Some(nest.kernel.output)) {
                    out.line(1, &format!("{decl} = args[{param}];"));
                }
            }
        }
        Ok(())
    }

    /// Parallel loops are shared out `schedule(guided)`: each thread first takes a share
    /// as large as a static schedule's first one (the same rows of the tiles, the copy and
    /// the packed panel), then ever smaller ones, so a thread whose core is slowed (a
    /// virtual CPU the host takes away for a while; tiles of unequal cost) does not hold
    /// up the others for a whole static half. Two AVX2 Zen 3 vCPUs, generated C, the same
    /// code with every `schedule(static)` replaced, interleaved: a 512×1024·1024×1024
    /// matmul 124 / 129 → 139 / 142 GFLOPS (medians, two runs; the 10th percentiles level,
    /// 128–167 against 134–164), ResNet-50's R5 89 / 89 → 98 / 94, a batched matmul
    /// 79 / 96 → 81 / 116.
    fn loop_pragma(&self, kind: LoopKind, cx: LoopContext) -> Result<Option<String>, String> {
        Ok(match kind {
            LoopKind::Parallel if cx.in_region => Some(format!(
                "#pragma omp for collapse({}) schedule(guided)",
                cx.collapse
            )),
            LoopKind::Parallel => Some(format!(
                "#pragma omp parallel for collapse({}) schedule(guided)",
                cx.collapse
            )),
            LoopKind::Unrolled(n) | LoopKind::Vectorized(n) => {
                Some(format!("#pragma GCC unroll {n}"))
            }
            LoopKind::InOrder => Some(IN_ORDER.into()),
            LoopKind::Serial | LoopKind::ThreadStrided => None,
        })
    }

    fn assume(&self, cond: &str) -> Result<Option<String>, String> {
        Ok(Some(format!("TD_ASSUME({cond});")))
    }

    fn parallel_region(&self) -> Result<&'static str, String> {
        Ok("#pragma omp parallel")
    }

    /// A panel from this thread's scratch ([`SCRATCH_PRELUDE`]): kept between calls.
    fn alloc_panel(&self, buf: &Buffer, slot: usize) -> Result<String, String> {
        let ty = self.storage_type(buf.dtype);
        let dims: Vec<String> = buf.dims.iter().map(|d| d.to_string()).collect();
        Ok(format!(
            "{ty} *{n} = ({ty} *)td_scratch({slot}, sizeof({ty}) * {});",
            dims.join(" * "),
            n = buf.name
        ))
    }

    fn free_panel(&self, buf: &Buffer, slot: usize) -> Result<String, String> {
        Ok(format!("td_release({slot}, {});", buf.name))
    }

    /// `td_f32x<n>`, a GNU C vector type that [`vector_prelude`] defines.
    fn vector_type(&self, dtype: DType, width: usize) -> Result<String, String> {
        match dtype {
            DType::F32 => Ok(format!("td_f32x{width}")),
            _ => Err(format!("no C vector type of {dtype:?}")),
        }
    }
}

/// Defines the vector types `td_f32x<n>` of `widths` (GNU C vector extensions, GCC and
/// Clang): `n` floats, aligned to one float only, so that a vector is read from any float
/// offset of a panel or a row.
pub fn vector_prelude(widths: &[usize]) -> String {
    let mut s = String::from(
        "/* Explicit vector code: the register micro-kernel's accumulators and panel rows. */\n\
         #if !defined(__GNUC__)\n\
         #error \"tensor-dsl: explicit vector code needs GNU C vector extensions (GCC, Clang); use kernel=loops\"\n\
         #endif\n",
    );
    for w in widths {
        let _ = writeln!(
            s,
            "typedef float td_f32x{w} __attribute__((vector_size({}), aligned(4)));",
            4 * w
        );
    }
    s
}

/// A source that fails to compile with `why` (for configs that do not fit the kernel).
fn invalid(why: &str) -> String {
    format!(
        "#error \"tensor-dsl: invalid CPU schedule: {}\"\n",
        super::error_text(why)
    )
}

/// Generates the C source. A config that does not fit (see [`CpuConfig::validate`]) gives
/// a source that fails to compile with the reason (`#error`).
pub fn generate(
    kernel: &Kernel,
    extents: &[usize],
    shapes: &[&[usize]],
    config: &CpuConfig,
) -> String {
    if kernel.is_staged() {
        return super::rows::c_for_einsum_config(kernel, extents, shapes, config)
            .unwrap_or_else(|e| invalid(&e));
    }
    source(kernel, extents, shapes, config).unwrap_or_else(|e| invalid(&e))
}

fn source(
    kernel: &Kernel,
    extents: &[usize],
    shapes: &[&[usize]],
    config: &CpuConfig,
) -> Result<String, String> {
    let nest = lower::cpu::lower(kernel, extents, shapes, config)?;
    let body = printer::print(&nest, &CDialect)?;
    let plan = Plan::new(kernel, extents, shapes, config);
    let pairs = lower::cpu_pairs::active(kernel, extents, shapes, config);
    let conv_pairs = lower::cpu_conv::pairs(kernel, config);
    let (ru, rv) = (config.unroll, config.vector);
    let mut s = String::new();

    // Header: what this is, for a human reading a dump.
    let _ = writeln!(s, "/* tensor-dsl generated C (codegen v{CODEGEN_VERSION})");
    let _ = writeln!(
        s,
        " * kernel `{}` fingerprint {}",
        super::c_identifier(&kernel.name),
        kernel.fingerprint()
    );
    let _ = writeln!(s, " *   {kernel}");
    let _ = writeln!(s, " * extents: {}", super::extents_text(kernel, extents));
    let axis = |a: Option<usize>| a.map_or("-".to_string(), |a| kernel.indices[a].name.clone());
    let _ = writeln!(
        s,
        " * schedule: vector {} x{rv}, unroll {} x{ru}, {}, {}{}",
        axis(config.vector_axis),
        axis(config.unroll_axis),
        if config.parallel {
            "parallel"
        } else {
            "serial"
        },
        match &plan.packed {
            Some(a) if pairs => format!("packing `{}` in bf16 pairs", kernel.params[a.tensor].name),
            Some(a) => format!("packing `{}`", kernel.params[a.tensor].name),
            None => "no packing".into(),
        },
        if config.wide_simd {
            ", 512-bit vectors"
        } else {
            ""
        }
    );
    if let Some(tile) = &config.conv {
        let _ = writeln!(
            s,
            " *   convolution: output pixels fused, {} per tile, input {}",
            tile.pixels,
            if tile.pad {
                "padded once"
            } else {
                "read in place"
            }
        );
        if conv_pairs {
            let _ = writeln!(s, " *   input channels in bf16 pairs");
        }
        if plan.block.is_none() && tile.pixels_outer && tile.block_tiles > 0 && !tile.pixel_vector {
            let _ = writeln!(
                s,
                " *   on prepacked weights, pixel tiles in blocks of {}, channel tiles within",
                tile.block_tiles
            );
        }
    }
    if let Some((r0, b)) = plan.block {
        let walk = match &config.conv {
            // A convolution's blocks run in pixel blocks (`ConvTile::block_tiles`; 0: one
            // block of them all).
            Some(tile) if tile.block_tiles == 0 => "over every pixel tile".to_string(),
            Some(tile) => format!("pixel tiles in blocks of {}", tile.block_tiles),
            None => format!("unroll axis in blocks of {} rows", plan.u_block),
        };
        let _ = writeln!(
            s,
            " *   reduction blocked: {} in blocks of {b}, {walk}",
            kernel.indices[r0].name
        );
    }
    if kernel.params.iter().any(|p| p.dtype != lower::COMPUTE) {
        let _ = writeln!(
            s,
            " * element types: {} (arithmetic in float)",
            kernel.dtypes_text()
        );
    }
    let _ = writeln!(s, " */");
    s.push_str("#include <math.h>\n");
    let panels = nest.scoped(lower::Scope::Panel).count();
    if panels > 0 {
        s.push_str("#include <stdlib.h>\n#include <pthread.h>\n");
    }
    s.push('\n');
    if panels > 0 {
        s.push_str(&scratch_prelude(panels));
        s.push('\n');
    }
    if config.wide_simd {
        s.push_str(
            "/* 512-bit vectors: GCC prefers 256-bit ones on AVX-512 machines by default. */\n\
             #if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__AVX512F__)\n\
             #pragma GCC target(\"prefer-vector-width=512\")\n\
             #endif\n\n",
        );
    }
    let (in_order, assume, widths, lane_stores) = uses(&nest);
    if in_order {
        s.push_str(IN_ORDER_PRELUDE);
        s.push('\n');
    }
    if assume {
        s.push_str(ASSUME_PRELUDE);
        s.push('\n');
    }
    if !widths.is_empty() {
        s.push_str(&vector_prelude(&widths));
        s.push('\n');
    }
    if pairs || conv_pairs {
        if !widths.contains(&lower::cpu_pairs::LANES) {
            s.push_str(&vector_prelude(&[lower::cpu_pairs::LANES]));
        }
        s.push_str(lower::cpu_pairs::PRELUDE);
        s.push('\n');
    }
    for prelude in lane_stores {
        s.push_str(prelude);
        s.push('\n');
    }
    s.push_str(&builtin_prelude(""));
    s.push_str(&super::used_builtins_prelude(kernel, ""));
    s.push_str(&dtype_prelude(kernel, ""));
    s.push('\n');
    if let Some(pp) = &nest.prepack {
        let _ = writeln!(
            s,
            "/* `{}` can be packed ahead of calls: {} fills {} floats, which {} reads from\n   args[{}] instead of packing at each call. */",
            kernel.params[pp.input].name,
            lower::cpu::PREPACK_FILL,
            pp.elems,
            lower::cpu::PREPACK_ENTRY,
            kernel.params.len()
        );
        let _ = writeln!(
            s,
            "const long {} = {};",
            lower::cpu::PREPACK_INPUT,
            pp.input
        );
        let _ = writeln!(
            s,
            "const long {} = {};\n",
            lower::cpu::PREPACK_ELEMS,
            pp.elems
        );
    }
    s.push_str(&body);
    Ok(s)
}

/// Panels at most this large stay allocated between calls ([`scratch_prelude`]).
pub const SCRATCH_KEEP_BYTES: usize = 64 << 20;

/// Defines `td_scratch(slot, bytes)` and `td_release(slot, p)`, which every panel of a nest
/// (`slot`: its number) is allocated and released with: each thread keeps the largest
/// block it was given for each slot (up to [`SCRATCH_KEEP_BYTES`]) for its next call, and
/// frees its blocks when it exits (a `pthread` key's destructor; objects are never
/// unloaded, so the destructor stays valid). `td_scratch` returns a null pointer when out
/// of memory, as `malloc` does.
///
/// Why: `malloc` hands out blocks over 128 KiB as fresh pages, so a panel allocated and
/// freed at every call paid a page fault per 4 KiB page at every call: a 3×3 convolution of
/// 256 channels over 14×14 (a 295 KB weight panel) ran at 211 GFLOPS single-threaded, 244
/// with its panels kept. Blocks start on a cache line (`malloc`'s large ones start 16
/// bytes into a page): a 3×3 convolution over 7×7 packing its weights at each call ran 5%
/// faster so, a 512³ matmul the same.
pub fn scratch_prelude(slots: usize) -> String {
    format!(
        "\
/* Panels: each thread keeps its blocks between calls (fresh pages fault on first touch). */
#define TD_SLOTS {slots}
#define TD_KEEP ((size_t){SCRATCH_KEEP_BYTES})
typedef struct {{ void *p[TD_SLOTS]; size_t cap[TD_SLOTS]; }} td_scratch_t;
static pthread_key_t td_scratch_key;
static pthread_once_t td_scratch_once = PTHREAD_ONCE_INIT;
static int td_scratch_ok;
static void td_scratch_free(void *v)
{{
    td_scratch_t *t = (td_scratch_t *)v;
    for (int i = 0; i < TD_SLOTS; ++i)
        free(t->p[i]);
    free(t);
}}
static void td_scratch_init(void) {{ td_scratch_ok = pthread_key_create(&td_scratch_key, td_scratch_free) == 0; }}
/* On a cache line: vector loads of a panel then never straddle two. */
static void *td_alloc(size_t bytes) {{ return aligned_alloc(64, (bytes + 63) / 64 * 64); }}
static void *td_scratch(int slot, size_t bytes)
{{
    pthread_once(&td_scratch_once, td_scratch_init);
    if (!td_scratch_ok || bytes > TD_KEEP)
        return td_alloc(bytes);
    td_scratch_t *t = (td_scratch_t *)pthread_getspecific(td_scratch_key);
    if (!t) {{
        t = (td_scratch_t *)calloc(1, sizeof(td_scratch_t));
        if (!t || pthread_setspecific(td_scratch_key, t) != 0) {{
            free(t);
            return td_alloc(bytes);
        }}
    }}
    if (t->cap[slot] < bytes) {{
        free(t->p[slot]);
        t->p[slot] = td_alloc(bytes);
        t->cap[slot] = t->p[slot] ? bytes : 0;
    }}
    return t->p[slot];
}}
static void td_release(int slot, void *p)
{{
    td_scratch_t *t = td_scratch_ok ? (td_scratch_t *)pthread_getspecific(td_scratch_key) : 0;
    if (!t || t->p[slot] != p)
        free(p);
}}
"
    )
}

/// Defines `td_store16(p, v, n)`, which stores the first `n` lanes of the 16-float vector
/// `v` at `p` ([`lower::cpu_conv::STORE_LANES`]): one masked store with AVX-512 (GCC's
/// builtin, no header), else a loop.
pub const STORE_LANES_PRELUDE: &str = "\
/* The first n lanes of a vector, stored: one masked store with AVX-512. */
static inline void td_store16(float *restrict p, td_f32x16 v, int n)
{
#if defined(__GNUC__) && !defined(__clang__) && defined(__AVX512F__)
    __builtin_ia32_storeups512_mask(p, v, (unsigned short)((1u << n) - 1u));
#else
    for (int l = 0; l < n; ++l)
        p[l] = v[l];
#endif
}
";

/// Defines `td_store8(p, v, n)`, which stores the first `n` lanes of the 8-float vector `v`
/// at `p` ([`lower::cpu_conv::STORE_LANES8`]): the whole vector, else four lanes as one
/// store, two as one, and the last one alone (`n` is a constant at each call, so the
/// branches fold).
///
/// With AVX, an empty `asm` first takes `v` in a register as it is: GCC otherwise follows
/// each stored lane back through the transposes that built `v` (`lower::cpu_conv`) and
/// extracts it from there, one `vextractps` per lane. The stem of ResNet-50 (R0 of the
/// bench, 16 × 5 tiles: five-lane stores), generated C side by side on the two-core Zen 3
/// VM, medians in GFLOPS, four processes: 108, 100, 106, 111 → 120, 108, 116, 116 (oneDNN
/// 131–149; `bench/results/2026-11-28-zen3-cpu-reread/`); six-lane stores (R2, R5, R9,
/// R11, R12) within that VM's noise either way.
pub const STORE_LANES8_PRELUDE: &str = "\
/* The first n lanes of an 8-float vector, stored: four at once, two at once, then one. */
static inline void td_store8(float *restrict p, td_f32x8 v, int n)
{
    typedef float td_f32x4u __attribute__((vector_size(16), aligned(4)));
    typedef float td_f32x2u __attribute__((vector_size(8), aligned(4)));
    if (n == 8) {
        *(td_f32x8 *)p = v;
        return;
    }
#if defined(__GNUC__) && defined(__x86_64__) && defined(__AVX__)
    /* v as it is: GCC would extract each lane from the vectors that built v. */
    __asm__(\"\" : \"+x\"(v));
#endif
    td_f32x4u q = {v[0], v[1], v[2], v[3]};
    if (n >= 4) {
        *(td_f32x4u *)p = q;
        q = (td_f32x4u){v[4], v[5], v[6], v[7]};
        p += 4;
        n -= 4;
    }
    if (n >= 2) {
        *(td_f32x2u *)p = (td_f32x2u){q[0], q[1]};
        q = (td_f32x4u){q[2], q[3], q[2], q[3]};
        p += 2;
        n -= 2;
    }
    if (n >= 1)
        p[0] = q[0];
}
";

/// Defines `td_store16_from(p, v, o)`, which stores the lanes of the 16-float vector `v`
/// from lane `o` on (none when `o` is 16) at `p` ([`lower::cpu_conv::STORE_TAIL`]): one
/// masked store with AVX-512, else one vector store where `o` is 0 (every tile's vectors
/// but a run's last) and a loop.
pub const STORE_TAIL_PRELUDE: &str = "\
/* The lanes of a vector from lane o on, stored: one masked store with AVX-512. */
static inline void td_store16_from(float *restrict p, td_f32x16 v, int o)
{
#if defined(__GNUC__) && !defined(__clang__) && defined(__AVX512F__)
    __builtin_ia32_storeups512_mask(p, v, (unsigned short)(0xffffu << o));
#else
    if (o == 0) {
        *(td_f32x16 *)p = v;
        return;
    }
    for (int l = o; l < 16; ++l)
        p[l] = v[l];
#endif
}
";

/// Defines `td_store8_from(p, v, o)`, [`STORE_TAIL_PRELUDE`]'s store for 8-float vectors
/// ([`lower::cpu_conv::STORE_TAIL8`]): one vector store where `o` is 0, else a loop. Why:
/// a run that tiles do not divide sends every tile's stores here, not only its last
/// vector's; lane by lane, a 1×1 layer (96 → 192 channels over 35×35) ran at 45–51 GFLOPS
/// on the Zen 3 VM, 103 with the vector store (`bench/results/2026-11-27-zen3-cpu-xcopy/`).
pub const STORE_TAIL8_PRELUDE: &str = "\
/* The lanes of an 8-float vector from lane o on, stored: one vector store for all of them. */
static inline void td_store8_from(float *restrict p, td_f32x8 v, int o)
{
    if (o == 0) {
        *(td_f32x8 *)p = v;
        return;
    }
    for (int l = o; l < 8; ++l)
        p[l] = v[l];
}
";

/// Defines `TD_IN_REGISTER8(x)` ([`lower::cpu_conv::IN_REGISTER8`]): [`IN_REGISTER_PRELUDE`]
/// for an 8-float vector, held in a `ymm` register where the target has AVX.
pub const IN_REGISTER8_PRELUDE: &str = "\
/* An 8-float vector kept in a register: GCC would load it again as a memory operand of each FMA. */
#if defined(__GNUC__) && defined(__x86_64__) && defined(__AVX__)
#define TD_IN_REGISTER8(x) __asm__(\"\" : \"+x\"(x))
#else
#define TD_IN_REGISTER8(x) ((void)0)
#endif
";

/// Defines `TD_IN_REGISTER(x)` ([`lower::cpu_conv::IN_REGISTER`]): an empty `asm` that
/// takes `x` in a vector register and may change it, so that the compiler loads `x` once
/// instead of folding its load into every instruction that uses it. Only with AVX-512
/// (the 16-float vectors it is used on) under GCC or Clang; elsewhere nothing.
pub const IN_REGISTER_PRELUDE: &str = "\
/* A vector kept in a register: GCC would load it again as a memory operand of each FMA. */
#if defined(__GNUC__) && defined(__x86_64__) && defined(__AVX512F__)
#define TD_IN_REGISTER(x) __asm__(\"\" : \"+v\"(x))
#else
#define TD_IN_REGISTER(x) ((void)0)
#endif
";

/// Defines `TD_OPAQUE(x)` ([`lower::cpu_conv::OPAQUE`]): an empty `asm` that takes the
/// integer `x` in a register and may change it, so that the compiler cannot relate
/// addresses computed from it to those of another loop step. GCC or Clang; elsewhere
/// nothing.
pub const OPAQUE_PRELUDE: &str = "\
/* An offset the optimizer cannot see through: reads from it are not carried across taps. */
#if defined(__GNUC__)
#define TD_OPAQUE(x) __asm__(\"\" : \"+r\"(x))
#else
#define TD_OPAQUE(x) ((void)0)
#endif
";

/// Whether the nest has an [`LoopKind::InOrder`] loop (and so needs [`IN_ORDER_PRELUDE`]),
/// whether it has an assumption (and needs [`ASSUME_PRELUDE`]), the widths of the
/// vectors it uses (for [`vector_prelude`]) and the preludes of the helpers it calls
/// ([`STORE_LANES_PRELUDE`], [`STORE_LANES8_PRELUDE`], [`STORE_TAIL_PRELUDE`],
/// [`IN_REGISTER_PRELUDE`], [`STORE_TAIL8_PRELUDE`], [`IN_REGISTER8_PRELUDE`],
/// [`OPAQUE_PRELUDE`]).
fn uses(nest: &Nest) -> (bool, bool, Vec<usize>, Vec<&'static str>) {
    let (mut in_order, mut assume, mut store_lanes, mut store_tail) = (false, false, false, false);
    let (mut in_register, mut opaque, mut store_tail8, mut in_register8) =
        (false, false, false, false);
    let mut store_lanes8 = false;
    let mut widths = std::collections::BTreeSet::new();
    nest.walk(&mut |_, s, _| match s {
        lower::Stmt::Loop(l) => in_order |= l.kind == LoopKind::InOrder,
        lower::Stmt::Assume(_) => assume = true,
        lower::Stmt::Call { func, .. } => {
            store_lanes |= func.as_str() == lower::cpu_conv::STORE_LANES;
            store_lanes8 |= func.as_str() == lower::cpu_conv::STORE_LANES8;
            store_tail |= func.as_str() == lower::cpu_conv::STORE_TAIL;
            in_register |= func.as_str() == lower::cpu_conv::IN_REGISTER;
            store_tail8 |= func.as_str() == lower::cpu_conv::STORE_TAIL8;
            in_register8 |= func.as_str() == lower::cpu_conv::IN_REGISTER8;
            opaque |= func.as_str() == lower::cpu_conv::OPAQUE;
        }
        lower::Stmt::Let {
            ty: lower::Ty::Vector(w),
            ..
        } => {
            widths.insert(*w);
        }
        _ => {}
    });
    let preludes = [
        (store_lanes, STORE_LANES_PRELUDE),
        (store_lanes8, STORE_LANES8_PRELUDE),
        (store_tail, STORE_TAIL_PRELUDE),
        (in_register, IN_REGISTER_PRELUDE),
        (store_tail8, STORE_TAIL8_PRELUDE),
        (in_register8, IN_REGISTER8_PRELUDE),
        (opaque, OPAQUE_PRELUDE),
    ]
    .into_iter()
    .filter_map(|(used, p)| used.then_some(p))
    .collect();
    (in_order, assume, widths.into_iter().collect(), preludes)
}
