//! C for the CPU: one shared object per (kernel, shape, schedule) exporting
//! `void td_kernel(const float *const *args, float *out)`, where `args[p]` is parameter
//! `p`'s data (the output's slot is unused).
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
//! assert!(src.contains("void td_kernel(const float *const *args, float *out)"));
//! ```

use super::{builtin_prelude, index_name, ExprPrinter};
use crate::ir::{Access, BodyKind, Kernel};
use crate::template::cpu::{pack_stride, packed_access, CpuConfig};
use std::fmt::Write as _;

/// Version of the generated code's shape; part of every compiled-artifact key.
pub const CODEGEN_VERSION: u32 = 2;

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

    /// Row-major position of the current reduction point, e.g. `(i_c * 3 + i_r) * 3 + i_s`.
    fn reduction_point(&self) -> String {
        let mut s = String::new();
        for (n, &r) in self.kernel.reduction().iter().enumerate() {
            s = if n == 0 {
                self.names[r].clone()
            } else {
                format!("({s}) * {} + {}", self.extents[r], self.names[r])
            };
        }
        s
    }

    /// Nested loops over every reduction index, at `depth`.
    fn reduction_loops(&self, s: &mut String, depth: usize) {
        for &r in &self.kernel.reduction() {
            let _ = writeln!(
                s,
                "{}for (long {n} = 0; {n} < {e}; ++{n})",
                pad(depth),
                n = self.names[r],
                e = self.extents[r]
            );
        }
    }

    /// The register tile: called with constant sizes for full tiles (so the compiler
    /// unrolls and keeps `acc` in registers) and with the remainder at the edges.
    fn tile(&self, s: &mut String, name: &str, packed: bool) {
        let (ru, rv) = (self.config.unroll, self.config.vector);
        let mut params: Vec<String> = self
            .inputs
            .iter()
            .map(|&p| format!("const float *restrict t{p}"))
            .collect();
        if packed {
            params.push("const float *restrict pk".into());
        }
        params.push("float *restrict out".into());
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
        let _ = writeln!(
            s,
            "static inline __attribute__((always_inline)) void {name}({})\n{{",
            params.join(", ")
        );
        let _ = writeln!(s, "    float acc[{ru}][{rv}];");
        s.push_str("    for (long u = 0; u < nu; ++u)\n        for (long v = 0; v < nv; ++v)\n            acc[u][v] = 0.0f;\n");

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

        // Epilogue and the single store.
        let out_strides = super::strides(self.shapes[self.kernel.output]);
        let out_offset: Vec<String> = self
            .kernel
            .spatial()
            .iter()
            .enumerate()
            .map(|(d, &sp)| match out_strides[d] {
                1 => printer.index[sp].clone(),
                st => format!("{st} * {}", printer.index[sp]),
            })
            .collect();
        let out_offset = if out_offset.is_empty() {
            "0".to_string()
        } else {
            out_offset.join(" + ")
        };
        s.push_str("    for (long u = 0; u < nu; ++u)\n        for (long v = 0; v < nv; ++v) {\n");
        s.push_str("            float x = acc[u][v];\n");
        for e in &self.kernel.epilogue {
            let _ = writeln!(s, "            x = {};", printer.expr(e));
        }
        let _ = writeln!(s, "            out[{out_offset}] = x;");
        s.push_str("        }\n}\n\n");
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
        let (full_u, full_v) = (eu.is_multiple_of(ru), ev.is_multiple_of(rv));
        if full_u && full_v {
            let _ = writeln!(s, "{}{name}({args}, {ru}, {rv});", pad(depth));
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
        let _ = writeln!(s, "{}{name}({args}, {ru}, {rv});", pad(depth + 1));
        let _ = writeln!(s, "{}else", pad(depth));
        let _ = writeln!(s, "{}{name}({args}, {nu}, {nv});", pad(depth + 1));
    }

    /// Refills this thread's panel when the tile's (other indices, v0) changed.
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
        let changed: Vec<String> = keys.iter().map(|k| format!("pk_{k} != {k}")).collect();
        let _ = writeln!(s, "{}if ({}) {{", pad(depth), changed.join(" || "));
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
        " * schedule: vector {} x{rv}, unroll {} x{ru}, {}, {}",
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
        }
    );
    let _ = writeln!(s, " */");
    s.push_str("#include <math.h>\n");
    if g.packed.is_some() {
        s.push_str("#include <stdlib.h>\n");
    }
    s.push('\n');
    s.push_str(&builtin_prelude(""));
    s.push('\n');

    g.tile(&mut s, "td_tile", false);
    if g.packed.is_some() {
        g.tile(&mut s, "td_tile_packed", true);
    }

    // The entry point: parallel loops over every other output index and the tiles, the
    // unroll axis innermost so a packed panel is reused across it.
    let _ = writeln!(s, "void {ENTRY}(const float *const *args, float *out)\n{{");
    for &p in &g.inputs {
        let _ = writeln!(s, "    const float *restrict t{p} = args[{p}];");
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
    let uloop = config
        .unroll_axis
        .map(|u| format!("for (long u0 = 0; u0 < {e}; u0 += {ru})", e = extents[u]));
    if config.unroll_outer {
        loops.extend(uloop.into_iter().chain(vloop));
    } else {
        loops.extend(vloop.into_iter().chain(uloop));
    }
    let parallel = config.parallel && !loops.is_empty();
    let mut depth = 1;
    if let Some(access) = &g.packed {
        let points: usize = kernel.reduction().iter().map(|&r| extents[r]).product();
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
        let mut keys: Vec<String> = g
            .others
            .iter()
            .map(|&o| format!("pk_{} = -1", g.names[o]))
            .collect();
        keys.push("pk_v0 = -1".into());
        let _ = writeln!(s, "{}long {};", pad(depth), keys.join(", "));
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
    match &g.packed {
        Some(access) => {
            let _ = writeln!(s, "{}if (pk) {{", pad(depth + 1));
            g.pack_fill(&mut s, depth + 2, access);
            g.tile_calls(&mut s, depth + 2, "td_tile_packed", true);
            let _ = writeln!(s, "{}}} else {{", pad(depth + 1));
            g.tile_calls(&mut s, depth + 2, "td_tile", false);
            let _ = writeln!(s, "{}}}", pad(depth + 1));
        }
        None => g.tile_calls(&mut s, depth + 1, "td_tile", false),
    }
    let _ = writeln!(s, "{}}}", pad(depth));
    if g.packed.is_some() {
        let _ = writeln!(s, "{}free(pk);", pad(depth));
        s.push_str("    }\n");
    }
    s.push_str("}\n");
    s
}
