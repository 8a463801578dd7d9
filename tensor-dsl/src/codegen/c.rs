//! C for the CPU: one shared object per (kernel, shape, schedule) exporting
//! `void td_kernel(const void *const *args, void *out)`, where `args[p]` is parameter
//! `p`'s data (the output's slot is unused), each at its parameter's storage type (`float`,
//! or `unsigned short` for `f16`/`bf16`, widened to `float` when read; the output is
//! rounded once, when stored).
//!
//! The loop nest is described in [`crate::template::cpu`]. Extents and strides are baked in
//! as constants, so the compiler sees exact trip counts.
//!
//! ```
//! use tensor_dsl::{codegen::c, ir::parse_text, template::cpu::CpuConfig};
//! let k = parse_text("mm", "c[[i,j]] += a[[i,k]] * b[[k,j]]", None).unwrap();
//! let shapes: [&[usize]; 3] = [&[8, 4], &[4, 16], &[8, 16]];
//! let cfg = CpuConfig::heuristic(&k, &[8, 16, 4], 8);
//! let src = c::generate(&k, &[8, 16, 4], &shapes, &cfg);
//! assert!(src.contains("void td_kernel(const void *const *args, void *out)"));
//! ```

use super::{
    builtin_prelude, dtype_prelude, index_name, storage_type, store_from_f32, ExprPrinter,
};
use crate::ir::{Access, BodyKind, Kernel};
use crate::template::cpu::{
    blocked_reduction, pack_stride, packed_access, panel_points, u_block, CpuConfig,
};
use std::fmt::Write as _;

/// Version of the generated code's shape; part of every compiled-artifact key.
pub const CODEGEN_VERSION: u32 = 3;

/// Name of the exported entry point.
pub const ENTRY: &str = "td_kernel";

fn pad(depth: usize) -> String {
    "    ".repeat(depth)
}

struct Gen<'a> {
    kernel: &'a Kernel,
    extents: &'a [usize],
    shapes: &'a [&'a [usize]],
    config: &'a CpuConfig,
    /// Spatial indices that are neither the vector nor the unroll axis.
    others: Vec<usize>,
    inputs: Vec<usize>,
    /// C names of the index variables in loops (`i_<name>`).
    names: Vec<String>,
    packed: Option<Access>,
    /// The blocked reduction index and its block (`k_block`), if the config blocks one.
    block: Option<(usize, usize)>,
}

impl Gen<'_> {
    fn printer(&self, index: Vec<String>, packed: Option<(Access, String)>) -> ExprPrinter<'_> {
        ExprPrinter {
            kernel: self.kernel,
            shapes: self.shapes,
            extents: self.extents,
            index,
            tensor: (0..self.kernel.params.len())
                .map(|p| format!("t{p}"))
                .collect(),
            output: "x".into(),
            packed,
        }
    }

    /// Index strings inside a tile: the unroll / vector axes are `u0 + u` and `v0 + v`.
    fn tile_index(&self) -> Vec<String> {
        let mut index = self.names.clone();
        if let Some(u) = self.config.unroll_axis {
            index[u] = "(u0 + u)".into();
        }
        if let Some(v) = self.config.vector_axis {
            index[v] = "(v0 + v)".into();
        }
        index
    }

    /// Row-major position of the current reduction point in a panel, e.g.
    /// `(i_c * 3 + i_r) * 3 + i_s`; a blocked index counts from its block's start `k0`.
    fn reduction_point(&self) -> String {
        let mut s = String::new();
        for (n, &r) in self.kernel.reduction().iter().enumerate() {
            let name = match self.block {
                Some((r0, _)) if r0 == r => format!("({} - k0)", self.names[r]),
                _ => self.names[r].clone(),
            };
            s = if n == 0 {
                name
            } else {
                format!("({s}) * {} + {name}", self.extents[r])
            };
        }
        s
    }

    /// Nested loops over every reduction index, at `depth`; a blocked index runs over its
    /// current block (`k0`, `nk` in scope).
    fn reduction_loops(&self, s: &mut String, depth: usize) {
        for &r in &self.kernel.reduction() {
            let n = &self.names[r];
            let _ = match self.block {
                Some((r0, _)) if r0 == r => {
                    writeln!(s, "{}for (long {n} = k0; {n} < k0 + nk; ++{n})", pad(depth))
                }
                _ => writeln!(
                    s,
                    "{}for (long {n} = 0; {n} < {e}; ++{n})",
                    pad(depth),
                    e = self.extents[r]
                ),
            };
        }
    }

    /// The register tile: called with constant sizes for full tiles (so the compiler
    /// unrolls and keeps `acc` in registers) and with the remainder at the edges.
    fn tile(&self, s: &mut String, name: &str, packed: bool) {
        let (ru, rv) = (self.config.unroll, self.config.vector);
        let mut params: Vec<String> = self
            .inputs
            .iter()
            .map(|&p| {
                format!(
                    "const {} *restrict t{p}",
                    storage_type(self.kernel.params[p].dtype)
                )
            })
            .collect();
        if packed {
            params.push("const float *restrict pk".into());
        }
        params.push(format!(
            "{} *restrict out",
            storage_type(self.kernel.params[self.kernel.output].dtype)
        ));
        params.extend(
            self.others
                .iter()
                .map(|&o| format!("const long {}", self.names[o])),
        );
        params.extend(
            [
                "const long u0",
                "const long v0",
                "const long nu",
                "const long nv",
            ]
            .map(String::from),
        );
        if self.block.is_some() {
            params.extend(["const long k0", "const long nk"].map(String::from));
        }
        let _ = writeln!(
            s,
            "static inline __attribute__((always_inline)) void {name}({})\n{{",
            params.join(", ")
        );
        let _ = writeln!(s, "    float acc[{ru}][{rv}];");
        let out_offset = self.out_offset(&self.tile_index());
        let fill = |s: &mut String, depth: usize, value: &str| {
            self.tile_loops(s, depth, "");
            let _ = writeln!(s, "{}acc[u][v] = {value};", pad(depth + 2));
        };
        if self.block.is_some() {
            // Later blocks continue from the partial sums the earlier ones stored.
            s.push_str("    if (k0 == 0) {\n");
            fill(s, 2, "0.0f");
            s.push_str("    } else {\n");
            fill(s, 2, &format!("out[{out_offset}]"));
            s.push_str("    }\n");
        } else {
            fill(s, 1, "0.0f");
        }

        let pack_read = match (&self.packed, packed) {
            (Some(a), true) => Some((
                a.clone(),
                format!("pk[({}) * {} + v]", self.reduction_point(), pack_stride(rv)),
            )),
            _ => None,
        };
        let printer = self.printer(self.tile_index(), pack_read);
        let body = printer.expr(&self.kernel.body);
        let sum = self.kernel.kind == BodyKind::Sum;
        let mut depth = 1;
        if sum {
            self.reduction_loops(s, depth);
            let _ = writeln!(s, "{}{{", pad(depth));
            depth += 1;
        }
        let _ = writeln!(s, "{}#pragma GCC unroll {ru}", pad(depth));
        let _ = writeln!(s, "{}for (long u = 0; u < nu; ++u) {{", pad(depth));
        let _ = writeln!(s, "{}#pragma GCC unroll {rv}", pad(depth + 1));
        let _ = writeln!(s, "{}for (long v = 0; v < nv; ++v)", pad(depth + 1));
        let _ = writeln!(
            s,
            "{}acc[u][v] {} {body};",
            pad(depth + 2),
            if sum { "+=" } else { "=" }
        );
        let _ = writeln!(s, "{}}}", pad(depth));
        if sum {
            s.push_str("    }\n");
        }

        // Epilogue and the single store (with blocks: partial sums until the last block).
        if let Some((r0, _)) = self.block {
            let _ = writeln!(s, "    if (k0 + nk < {}) {{", self.extents[r0]);
            self.tile_loops(s, 2, "");
            let _ = writeln!(s, "{}out[{out_offset}] = acc[u][v];", pad(4));
            s.push_str("        return;\n    }\n");
        }
        self.tile_loops(s, 1, " {");
        let _ = writeln!(s, "{}float x = acc[u][v];", pad(3));
        for e in &self.kernel.epilogue {
            let _ = writeln!(s, "{}x = {};", pad(3), printer.expr(e));
        }
        let _ = writeln!(
            s,
            "{}out[{out_offset}] = {};",
            pad(3),
            store_from_f32(self.kernel.params[self.kernel.output].dtype, "x")
        );
        let _ = writeln!(s, "{}}}", pad(2));
        s.push_str("}\n\n");
    }

    /// `for u < nu` around `for v < nv` (opened with `open`), for the accumulator's
    /// initialisation and stores. Deliberately without `#pragma GCC unroll`: forcing it here
    /// made edge tiles (a runtime `nv`, e.g. every tile of a 14-wide axis under a 16-wide
    /// vector tile) 2.3x slower on a 1×1 convolution, and full tiles gained nothing.
    fn tile_loops(&self, s: &mut String, depth: usize, open: &str) {
        let _ = writeln!(s, "{}for (long u = 0; u < nu; ++u)", pad(depth));
        let _ = writeln!(s, "{}for (long v = 0; v < nv; ++v){open}", pad(depth + 1));
    }

    /// The output offset of a tile element, e.g. `40 * (u0 + u) + (v0 + v)`.
    fn out_offset(&self, index: &[String]) -> String {
        let out_strides = super::strides(self.shapes[self.kernel.output]);
        let terms: Vec<String> = self
            .kernel
            .spatial()
            .iter()
            .enumerate()
            .map(|(d, &sp)| match out_strides[d] {
                1 => index[sp].clone(),
                st => format!("{st} * {}", index[sp]),
            })
            .collect();
        if terms.is_empty() {
            "0".to_string()
        } else {
            terms.join(" + ")
        }
    }

    /// The calls of a tile function for the tile at (`u0`, `v0`), full or at an edge.
    fn tile_calls(&self, s: &mut String, depth: usize, name: &str, packed: bool) {
        let (ru, rv) = (self.config.unroll, self.config.vector);
        let (u0, v0) = (
            if self.config.unroll_axis.is_some() {
                "u0"
            } else {
                "0"
            },
            if self.config.vector_axis.is_some() {
                "v0"
            } else {
                "0"
            },
        );
        let eu = self.config.unroll_axis.map_or(1, |u| self.extents[u]);
        let ev = self.config.vector_axis.map_or(1, |v| self.extents[v]);
        let mut args: Vec<String> = self.inputs.iter().map(|&p| format!("t{p}")).collect();
        if packed {
            args.push("pk".into());
        }
        args.push("out".into());
        args.extend(self.others.iter().map(|&o| self.names[o].clone()));
        args.push(u0.into());
        args.push(v0.into());
        let args = args.join(", ");
        let kargs = if self.block.is_some() { ", k0, nk" } else { "" };
        let (full_u, full_v) = (eu.is_multiple_of(ru), ev.is_multiple_of(rv));
        if full_u && full_v {
            let _ = writeln!(s, "{}{name}({args}, {ru}, {rv}{kargs});", pad(depth));
            return;
        }
        let mut conds = Vec::new();
        if !full_u {
            conds.push(format!("{u0} + {ru} <= {eu}"));
        }
        if !full_v {
            conds.push(format!("{v0} + {rv} <= {ev}"));
        }
        let nu = if full_u {
            ru.to_string()
        } else {
            format!("({eu} - {u0} < {ru} ? {eu} - {u0} : {ru})")
        };
        let nv = if full_v {
            rv.to_string()
        } else {
            format!("({ev} - {v0} < {rv} ? {ev} - {v0} : {rv})")
        };
        let _ = writeln!(s, "{}if ({})", pad(depth), conds.join(" && "));
        let _ = writeln!(s, "{}{name}({args}, {ru}, {rv}{kargs});", pad(depth + 1));
        let _ = writeln!(s, "{}else", pad(depth));
        let _ = writeln!(s, "{}{name}({args}, {nu}, {nv}{kargs});", pad(depth + 1));
    }

    /// The tiles of one u-block for the current reduction block: a loop over `u0` (from `ub`
    /// when the unroll axis is cut in u-blocks, else from 0) around [`Self::tile_calls`].
    fn blocked_tiles(&self, s: &mut String, depth: usize, name: &str, packed: bool) {
        let (ru, ub) = (
            self.config.unroll,
            u_block(self.kernel, self.extents, self.config),
        );
        match self.config.unroll_axis.map(|u| self.extents[u]) {
            Some(e) if e > ub => {
                let _ = writeln!(
                    s,
                    "{}for (long u0 = ub; u0 < (ub + {ub} < {e} ? ub + {ub} : {e}); u0 += {ru})",
                    pad(depth)
                );
                self.tile_calls(s, depth + 1, name, packed);
            }
            Some(e) => {
                let _ = writeln!(s, "{}for (long u0 = 0; u0 < {e}; u0 += {ru})", pad(depth));
                self.tile_calls(s, depth + 1, name, packed);
            }
            None => self.tile_calls(s, depth, name, packed),
        }
    }

    /// Refills this thread's panel when the tile's (other indices, v0) changed; with a
    /// blocked reduction, fills it for the current block unconditionally.
    fn pack_fill(&self, s: &mut String, depth: usize, access: &Access) {
        let rv = self.config.vector;
        let Some(v) = self.config.vector_axis else {
            return;
        };
        let ev = self.extents[v];
        let mut keys: Vec<&str> = self
            .others
            .iter()
            .map(|&o| self.names[o].as_str())
            .collect();
        keys.push("v0");
        if self.block.is_some() {
            keys.clear();
            let _ = writeln!(s, "{}{{", pad(depth));
        } else {
            let changed: Vec<String> = keys.iter().map(|k| format!("pk_{k} != {k}")).collect();
            let _ = writeln!(s, "{}if ({}) {{", pad(depth), changed.join(" || "));
        }
        let _ = writeln!(
            s,
            "{}const long nv = {ev} - v0 < {rv} ? {ev} - v0 : {rv};",
            pad(depth + 1)
        );
        self.reduction_loops(s, depth + 1);
        let _ = writeln!(s, "{}for (long v = 0; v < nv; ++v)", pad(depth + 2));
        let mut index = self.names.clone();
        index[v] = "(v0 + v)".into();
        let load = self.printer(index, None).global(access);
        let _ = writeln!(
            s,
            "{}pk[({}) * {} + v] = {load};",
            pad(depth + 3),
            self.reduction_point(),
            pack_stride(rv)
        );
        for k in &keys {
            let _ = writeln!(s, "{}pk_{k} = {k};", pad(depth + 1));
        }
        let _ = writeln!(s, "{}}}", pad(depth));
    }
}

/// Generates the C source. `config` must have passed [`CpuConfig::validate`].
pub fn generate(
    kernel: &Kernel,
    extents: &[usize],
    shapes: &[&[usize]],
    config: &CpuConfig,
) -> String {
    let others: Vec<usize> = kernel
        .spatial()
        .into_iter()
        .filter(|&s| Some(s) != config.vector_axis && Some(s) != config.unroll_axis)
        .collect();
    let g = Gen {
        kernel,
        extents,
        shapes,
        config,
        others,
        inputs: kernel.inputs(),
        names: (0..kernel.indices.len())
            .map(|i| index_name(kernel, i))
            .collect(),
        packed: packed_access(kernel, extents, config),
        block: blocked_reduction(kernel, extents, config),
    };
    let (ru, rv) = (config.unroll, config.vector);
    let mut s = String::new();

    // Header: what this is, for a human reading a dump.
    let _ = writeln!(s, "/* tensor-dsl generated C (codegen v{CODEGEN_VERSION})");
    let _ = writeln!(
        s,
        " * kernel `{}` fingerprint {}",
        kernel.name,
        kernel.fingerprint()
    );
    let _ = writeln!(s, " *   {kernel}");
    let ext: Vec<String> = kernel
        .indices
        .iter()
        .zip(extents)
        .map(|(i, e)| format!("{}={e}", i.name))
        .collect();
    let _ = writeln!(s, " * extents: {}", ext.join(" "));
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
        match &g.packed {
            Some(a) => format!("packing `{}`", kernel.params[a.tensor].name),
            None => "no packing".into(),
        },
        if config.wide_simd {
            ", 512-bit vectors"
        } else {
            ""
        }
    );
    if let Some((r0, b)) = g.block {
        let _ = writeln!(
            s,
            " *   reduction blocked: {} in blocks of {b}, unroll axis in blocks of {} rows",
            kernel.indices[r0].name,
            u_block(kernel, extents, config)
        );
    }
    if kernel
        .params
        .iter()
        .any(|p| p.dtype != crate::ir::DType::F32)
    {
        let _ = writeln!(
            s,
            " * element types: {} (arithmetic in float)",
            kernel.dtypes_text()
        );
    }
    let _ = writeln!(s, " */");
    s.push_str("#include <math.h>\n");
    if g.packed.is_some() {
        s.push_str("#include <stdlib.h>\n");
    }
    s.push('\n');
    if config.wide_simd {
        s.push_str(
            "/* 512-bit vectors: GCC prefers 256-bit ones on AVX-512 machines by default. */\n\
             #if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__AVX512F__)\n\
             #pragma GCC target(\"prefer-vector-width=512\")\n\
             #endif\n\n",
        );
    }
    s.push_str(&builtin_prelude(""));
    s.push_str(&dtype_prelude(kernel, ""));
    s.push('\n');

    g.tile(&mut s, "td_tile", false);
    if g.packed.is_some() {
        g.tile(&mut s, "td_tile_packed", true);
    }

    // The entry point: parallel loops over every other output index and the tiles, the
    // unroll axis innermost so a packed panel is reused across it.
    let _ = writeln!(s, "void {ENTRY}(const void *const *args, void *out)\n{{");
    for &p in &g.inputs {
        let ty = storage_type(kernel.params[p].dtype);
        let _ = writeln!(s, "    const {ty} *restrict t{p} = args[{p}];");
    }
    let mut loops: Vec<String> = g
        .others
        .iter()
        .map(|&o| {
            format!(
                "for (long {n} = 0; {n} < {e}; ++{n})",
                n = g.names[o],
                e = extents[o]
            )
        })
        .collect();
    let vloop = config
        .vector_axis
        .map(|v| format!("for (long v0 = 0; v0 < {e}; v0 += {rv})", e = extents[v]));
    let eu = config.unroll_axis.map(|u| extents[u]);
    // With a blocked reduction the parallel loops stop at the u-block; the reduction
    // blocks and the tiles of the u-block run inside (see `blocked_body`).
    let ub = u_block(kernel, extents, config);
    let uloop = match (g.block, eu) {
        (None, Some(e)) => Some(format!("for (long u0 = 0; u0 < {e}; u0 += {ru})")),
        (Some(_), Some(e)) if e > ub => Some(format!("for (long ub = 0; ub < {e}; ub += {ub})")),
        _ => None,
    };
    if config.unroll_outer && g.block.is_none() {
        loops.extend(uloop.into_iter().chain(vloop));
    } else {
        loops.extend(vloop.into_iter().chain(uloop));
    }
    let parallel = config.parallel && !loops.is_empty();
    let mut depth = 1;
    if let Some(access) = &g.packed {
        let points = panel_points(kernel, extents, config);
        if parallel {
            let _ = writeln!(s, "    #pragma omp parallel");
        }
        let _ = writeln!(s, "    {{");
        depth += 1;
        let _ = writeln!(
            s,
            "{}/* This thread's panel of `{}`; without memory, tiles read it in place. */",
            pad(depth),
            kernel.params[access.tensor].name
        );
        let _ = writeln!(
            s,
            "{}float *pk = (float *)malloc(sizeof(float) * {points} * {});",
            pad(depth),
            pack_stride(rv)
        );
        if g.block.is_none() {
            let mut keys: Vec<String> = g
                .others
                .iter()
                .map(|&o| format!("pk_{} = -1", g.names[o]))
                .collect();
            keys.push("pk_v0 = -1".into());
            let _ = writeln!(s, "{}long {};", pad(depth), keys.join(", "));
        }
        if parallel {
            let _ = writeln!(
                s,
                "{}#pragma omp for collapse({}) schedule(static)",
                pad(depth),
                loops.len()
            );
        }
    } else if parallel {
        let _ = writeln!(
            s,
            "    #pragma omp parallel for collapse({}) schedule(static)",
            loops.len()
        );
    }
    for l in &loops {
        let _ = writeln!(s, "{}{l}", pad(depth));
    }
    let _ = writeln!(s, "{}{{", pad(depth));
    match (g.block, &g.packed) {
        (Some((r0, b)), packed) => {
            let e0 = extents[r0];
            let _ = writeln!(
                s,
                "{}for (long k0 = 0; k0 < {e0}; k0 += {b}) {{",
                pad(depth + 1)
            );
            let _ = writeln!(
                s,
                "{}const long nk = {e0} - k0 < {b} ? {e0} - k0 : {b};",
                pad(depth + 2)
            );
            match packed {
                Some(access) => {
                    let _ = writeln!(s, "{}if (pk) {{", pad(depth + 2));
                    g.pack_fill(&mut s, depth + 3, access);
                    g.blocked_tiles(&mut s, depth + 3, "td_tile_packed", true);
                    let _ = writeln!(s, "{}}} else {{", pad(depth + 2));
                    g.blocked_tiles(&mut s, depth + 3, "td_tile", false);
                    let _ = writeln!(s, "{}}}", pad(depth + 2));
                }
                None => g.blocked_tiles(&mut s, depth + 2, "td_tile", false),
            }
            let _ = writeln!(s, "{}}}", pad(depth + 1));
        }
        (None, Some(access)) => {
            let _ = writeln!(s, "{}if (pk) {{", pad(depth + 1));
            g.pack_fill(&mut s, depth + 2, access);
            g.tile_calls(&mut s, depth + 2, "td_tile_packed", true);
            let _ = writeln!(s, "{}}} else {{", pad(depth + 1));
            g.tile_calls(&mut s, depth + 2, "td_tile", false);
            let _ = writeln!(s, "{}}}", pad(depth + 1));
        }
        (None, None) => g.tile_calls(&mut s, depth + 1, "td_tile", false),
    }
    let _ = writeln!(s, "{}}}", pad(depth));
    if g.packed.is_some() {
        let _ = writeln!(s, "{}free(pk);", pad(depth));
        s.push_str("    }\n");
    }
    s.push_str("}\n");
    s
}
