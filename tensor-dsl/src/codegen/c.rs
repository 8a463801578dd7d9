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
use crate::ir::{BodyKind, Kernel};
use crate::template::cpu::CpuConfig;
use std::fmt::Write as _;

/// Version of the generated code's shape; part of every compiled-artifact key.
pub const CODEGEN_VERSION: u32 = 1;

/// Name of the exported entry point.
pub const ENTRY: &str = "td_kernel";

/// Generates the C source. `config` must have passed [`CpuConfig::validate`].
pub fn generate(kernel: &Kernel, extents: &[usize], shapes: &[&[usize]], config: &CpuConfig) -> String {
    let spatial = kernel.spatial();
    let reduction = kernel.reduction();
    let others: Vec<usize> = spatial
        .iter()
        .copied()
        .filter(|&s| Some(s) != config.vector_axis && Some(s) != config.unroll_axis)
        .collect();
    let inputs = kernel.inputs();
    let (ru, rv) = (config.unroll, config.vector);

    let mut index: Vec<String> = (0..kernel.indices.len()).map(|i| index_name(kernel, i)).collect();
    let tensor: Vec<String> = (0..kernel.params.len()).map(|p| format!("t{p}")).collect();
    let mut s = String::new();

    // Header: what this is, for a human reading a dump.
    let _ = writeln!(s, "/* tensor-dsl generated C (codegen v{CODEGEN_VERSION})");
    let _ = writeln!(s, " * kernel `{}` fingerprint {}", kernel.name, kernel.fingerprint());
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
        " * schedule: vector {} x{rv}, unroll {} x{ru}, {}",
        axis(config.vector_axis),
        axis(config.unroll_axis),
        if config.parallel { "parallel" } else { "serial" }
    );
    let _ = writeln!(s, " */");
    s.push_str("#include <math.h>\n\n");
    s.push_str(&builtin_prelude(""));
    s.push('\n');

    // The register tile: a function called with constant sizes for full tiles (so the
    // compiler unrolls and keeps `acc` in registers) and with the remainder at the edges.
    let mut params: Vec<String> = inputs
        .iter()
        .map(|&p| format!("const float *restrict {}", tensor[p]))
        .collect();
    params.push("float *restrict out".into());
    params.extend(others.iter().map(|&o| format!("const long {}", index[o])));
    params.extend(["const long u0", "const long v0", "const long nu", "const long nv"].map(String::from));
    let _ = writeln!(
        s,
        "static inline __attribute__((always_inline)) void td_tile({})\n{{",
        params.join(", ")
    );
    let _ = writeln!(s, "    float acc[{ru}][{rv}];");
    s.push_str("    for (long u = 0; u < nu; ++u)\n        for (long v = 0; v < nv; ++v)\n            acc[u][v] = 0.0f;\n");

    // Inside the tile, the unroll / vector axes are u0 + u and v0 + v.
    if let Some(u) = config.unroll_axis {
        index[u] = format!("(u0 + u)");
    }
    if let Some(v) = config.vector_axis {
        index[v] = format!("(v0 + v)");
    }
    let mut printer = ExprPrinter {
        kernel,
        shapes,
        extents,
        index,
        tensor,
        output: "x".into(),
    };
    let body = printer.expr(&kernel.body);
    let mut depth = 1;
    let pad = |d: usize| "    ".repeat(d);
    if kernel.kind == BodyKind::Sum {
        for &r in &reduction {
            let _ = writeln!(
                s,
                "{}for (long {n} = 0; {n} < {e}; ++{n})",
                pad(depth),
                n = printer.index[r],
                e = extents[r]
            );
        }
        let _ = writeln!(s, "{}{{", pad(depth));
        depth += 1;
    }
    let _ = writeln!(s, "{}#pragma GCC unroll {ru}", pad(depth));
    let _ = writeln!(s, "{}for (long u = 0; u < nu; ++u) {{", pad(depth));
    let _ = writeln!(s, "{}#pragma GCC unroll {rv}", pad(depth + 1));
    let _ = writeln!(s, "{}for (long v = 0; v < nv; ++v)", pad(depth + 1));
    let op = if kernel.kind == BodyKind::Sum { "+=" } else { "=" };
    let _ = writeln!(s, "{}acc[u][v] {op} {body};", pad(depth + 2));
    let _ = writeln!(s, "{}}}", pad(depth));
    if kernel.kind == BodyKind::Sum {
        let _ = writeln!(s, "    }}");
    }

    // Epilogue and the single store.
    let out_strides = super::strides(shapes[kernel.output]);
    let out_offset: Vec<String> = spatial
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
    for e in &kernel.epilogue {
        let _ = writeln!(s, "            x = {};", printer.expr(e));
    }
    let _ = writeln!(s, "            out[{out_offset}] = x;");
    s.push_str("        }\n}\n\n");

    // The entry point: parallel loops over every other output index and the tiles.
    let _ = writeln!(s, "void {ENTRY}(const float *const *args, float *out)\n{{");
    for &p in &inputs {
        let _ = writeln!(s, "    const float *restrict t{p} = args[{p}];");
    }
    let names: Vec<String> = (0..kernel.indices.len()).map(|i| index_name(kernel, i)).collect();
    printer.index = names.clone();
    let mut loops: Vec<String> = others
        .iter()
        .map(|&o| format!("for (long {n} = 0; {n} < {e}; ++{n})", n = names[o], e = extents[o]))
        .collect();
    if let Some(u) = config.unroll_axis {
        loops.push(format!("for (long u0 = 0; u0 < {e}; u0 += {ru})", e = extents[u]));
    }
    if let Some(v) = config.vector_axis {
        loops.push(format!("for (long v0 = 0; v0 < {e}; v0 += {rv})", e = extents[v]));
    }
    if config.parallel && !loops.is_empty() {
        let _ = writeln!(s, "    #pragma omp parallel for collapse({}) schedule(static)", loops.len());
    }
    for l in &loops {
        let _ = writeln!(s, "    {l}");
    }
    let _ = writeln!(s, "    {{");
    let (u0, v0) = (
        if config.unroll_axis.is_some() { "u0" } else { "0" },
        if config.vector_axis.is_some() { "v0" } else { "0" },
    );
    let eu = config.unroll_axis.map_or(1, |u| extents[u]);
    let ev = config.vector_axis.map_or(1, |v| extents[v]);
    let mut args: Vec<String> = inputs.iter().map(|&p| format!("t{p}")).collect();
    args.push("out".into());
    args.extend(others.iter().map(|&o| names[o].clone()));
    args.push(u0.into());
    args.push(v0.into());
    let args = args.join(", ");
    let full_u = eu % ru == 0;
    let full_v = ev % rv == 0;
    if full_u && full_v {
        let _ = writeln!(s, "        td_tile({args}, {ru}, {rv});");
    } else {
        let mut conds = Vec::new();
        if !full_u {
            conds.push(format!("{u0} + {ru} <= {eu}"));
        }
        if !full_v {
            conds.push(format!("{v0} + {rv} <= {ev}"));
        }
        let nu = if full_u { ru.to_string() } else { format!("({eu} - {u0} < {ru} ? {eu} - {u0} : {ru})") };
        let nv = if full_v { rv.to_string() } else { format!("({ev} - {v0} < {rv} ? {ev} - {v0} : {rv})") };
        let _ = writeln!(s, "        if ({})", conds.join(" && "));
        let _ = writeln!(s, "            td_tile({args}, {ru}, {rv});");
        let _ = writeln!(s, "        else\n            td_tile({args}, {nu}, {nv});");
    }
    s.push_str("    }\n}\n");
    s
}
