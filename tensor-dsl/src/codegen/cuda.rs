//! CUDA C for the GPU from a [`GpuSchedule`] (see [`crate::template::gpu`] for the loop
//! nest and what each knob means).
//!
//! The kernel is `extern "C" __global__ void td_kernel(...)` with the inputs' data pointers
//! in declaration order (`const float *__restrict__ t<p>`, `p` the parameter id), then the
//! output (`float *__restrict__ out`). It runs on a one-dimensional grid
//! ([`CudaSource::grid`]) of one-dimensional blocks ([`CudaSource::block`]) and uses static
//! shared memory only. Extents and strides are constants, so the compiler sees every trip
//! count. Inputs must be 16-byte aligned where the schedule stages them with vector loads
//! (`cudaMalloc` gives 256).
//!
//! ```
//! use tensor_dsl::{codegen::cuda, ir::parse_text, template::gpu};
//! let k = parse_text("mm", "c[[i,j]] += a[[i,k]] * b[[k,j]]", None).unwrap();
//! let shapes: [&[usize]; 3] = [&[64, 48], &[48, 40], &[64, 40]];
//! let s = gpu::default_schedule(&k, &[64, 40, 48], &gpu::GpuTarget::h100());
//! let src = cuda::generate(&k, &[64, 40, 48], &shapes, &s);
//! assert!(src.source.contains("extern \"C\" __global__ void __launch_bounds__(160)"));
//! assert_eq!(src.block, [160, 1, 1]); // 16 x 10 threads, one output element each
//! assert_eq!(src.grid, [16, 1, 1]);
//! ```

use super::{bound_checks, builtin_prelude, index_name, offset_expr, Coord, ExprPrinter};
use crate::ir::{Access, Affine, BodyKind, IndexKind, Kernel};
use crate::template::gpu::{GpuSchedule, RegLoop, Tile};
use std::fmt::Write as _;

/// Name of the `extern "C" __global__` entry point.
pub const ENTRY: &str = "td_kernel";

/// Version of the generated code's shape; part of every compiled-artifact key.
pub const CODEGEN_VERSION: u32 = 1;

/// A generated kernel and its launch geometry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CudaSource {
    pub source: String,
    pub entry: String,
    pub grid: [u32; 3],
    pub block: [u32; 3],
    /// Dynamic shared memory, bytes (0 when the kernel uses only static shared memory).
    pub shared_bytes: u32,
}

fn pad(depth: usize) -> String {
    "    ".repeat(depth)
}

/// `a + b + ...` of the non-empty terms, or `0`.
fn sum(terms: &[String]) -> String {
    let t: Vec<&String> = terms.iter().filter(|t| !t.is_empty()).collect();
    if t.is_empty() {
        "0".into()
    } else {
        t.iter()
            .map(|s| s.as_str())
            .collect::<Vec<&str>>()
            .join(" + ")
    }
}

/// `c * name`, `name` when `c` is 1, nothing when the loop has one iteration.
fn term(name: &str, coef: usize, trip: usize) -> String {
    match (trip, coef) {
        (1, _) => String::new(),
        (_, 1) => name.to_string(),
        (_, c) => format!("{c} * {name}"),
    }
}

/// Whether a C expression needs parentheses as an operand.
fn is_simple(e: &str) -> bool {
    e.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// A loop of the compute nest: its variable, iterations and header.
struct Loop {
    var: String,
    trip: usize,
    header: String,
    /// Never gets `#pragma unroll` (the lane-strided loop).
    no_unroll: bool,
}

struct StagedTile {
    tile: Tile,
    array: String,
    width: usize,
}

struct Gen<'a> {
    kernel: &'a Kernel,
    extents: &'a [usize],
    shapes: &'a [&'a [usize]],
    s: &'a GpuSchedule,
    padded: Vec<usize>,
    spatial: Vec<usize>,
    /// Reduction indices of a `+=` kernel (none for `=`).
    reduction: Vec<usize>,
    /// `index_name` of each index without its leading `i` (`_k` for `i_k`).
    stem: Vec<String>,
    tiles: Vec<StagedTile>,
    threads: usize,
    nacc: usize,
    /// C type of coordinates and offsets.
    ity: &'static str,
}

impl Gen<'_> {
    fn name(&self, prefix: char, i: usize) -> String {
        format!("{prefix}{}", self.stem[i])
    }

    fn f(&self, i: usize, level: usize) -> usize {
        self.s.axes[i].factors[level]
    }

    fn is_spatial(&self, i: usize) -> bool {
        self.kernel.indices[i].kind == IndexKind::Spatial
    }

    /// Whether index `i` has a block corner (`b_`): several blocks or outer steps.
    fn has_base(&self, i: usize) -> bool {
        self.f(i, 0) > 1
    }

    /// The terms of index `i`'s coordinate inside the block tile (what `l_` holds).
    fn local_terms(&self, i: usize) -> Vec<String> {
        if self.is_spatial(i) {
            let (v, t, u, w) = (self.f(i, 1), self.f(i, 2), self.f(i, 3), self.f(i, 4));
            vec![
                term(&self.name('t', i), 1, t),
                term(&self.name('v', i), t * u * w, v),
                term(&self.name('u', i), w, u),
                term(&self.name('w', i), 1, w),
            ]
        } else {
            let (m, w) = (self.f(i, 1), self.f(i, 2));
            vec![
                term(&self.name('m', i), w, m),
                term(&self.name('w', i), 1, w),
            ]
        }
    }

    /// `b_i + l_i`, expanded.
    fn global_coord(&self, i: usize) -> String {
        let mut terms = vec![if self.has_base(i) {
            self.name('b', i)
        } else {
            String::new()
        }];
        terms.extend(self.local_terms(i));
        sum(&terms)
    }

    fn local_coord(&self, i: usize) -> String {
        sum(&self.local_terms(i))
    }

    /// The loop variables a coordinate of index `i` depends on (global: with the outer
    /// reduction step).
    fn coord_vars(&self, i: usize, global: bool) -> Vec<String> {
        let mut v = Vec::new();
        if self.is_spatial(i) {
            for (level, p) in [(1, 'v'), (3, 'u'), (4, 'w')] {
                if self.f(i, level) > 1 {
                    v.push(self.name(p, i));
                }
            }
        } else {
            if global && self.has_base(i) {
                v.push(self.name('o', i));
            }
            for (level, p) in [(1, 'm'), (2, 'w')] {
                if self.f(i, level) > 1 {
                    v.push(self.name(p, i));
                }
            }
        }
        v
    }

    /// The staged tile of an access, if any.
    fn staged(&self, a: &Access) -> Option<&StagedTile> {
        self.tiles.iter().find(|t| &t.tile.access == a)
    }

    /// Which indices the compute statement needs as global (`i_`) and tile (`l_`)
    /// coordinates.
    fn used_coords(&self) -> (Vec<bool>, Vec<bool>) {
        let n = self.kernel.indices.len();
        let (mut global, mut local) = (vec![false; n], vec![false; n]);
        self.kernel.body.visit_accesses(&mut |a| {
            let set = if self.staged(a).is_some() {
                &mut local
            } else {
                &mut global
            };
            for d in &a.dims {
                for &(v, _) in &d.terms {
                    set[v] = true;
                }
            }
        });
        (global, local)
    }

    fn printer(&self) -> ExprPrinter<'_> {
        ExprPrinter {
            kernel: self.kernel,
            shapes: self.shapes,
            extents: &self.padded,
            index: (0..self.kernel.indices.len())
                .map(|i| self.name('i', i))
                .collect(),
            tensor: (0..self.kernel.params.len())
                .map(|p| format!("t{p}"))
                .collect(),
            output: "x".into(),
            packed: None,
        }
    }

    /// The read of a staged access from its tile.
    fn tile_read(&self, a: &Access) -> Option<String> {
        let st = self.staged(a)?;
        let coords: Vec<Coord> = a
            .dims
            .iter()
            .zip(&st.tile.shift)
            .map(|(map, &shift)| {
                let local = Affine {
                    terms: map.terms.clone(),
                    offset: -shift,
                };
                let mut expr = String::new();
                local.write(&mut expr, &|v| self.name('l', v));
                Coord {
                    simple: is_simple(&expr),
                    expr,
                    lo: 0,
                    hi: 0,
                }
            })
            .collect();
        Some(format!(
            "{}[{}]",
            st.array,
            offset_expr(&st.tile.dims, &coords)
        ))
    }

    /// The flat accumulator index of the current register point.
    fn acc_ref(&self) -> String {
        if self.nacc == 1 {
            return "acc".into();
        }
        let mut terms = Vec::new();
        let mut stride = 1;
        for &s in self.spatial.iter().rev() {
            let (v, u, w) = (self.f(s, 1), self.f(s, 3), self.f(s, 4));
            terms.push(term(&self.name('w', s), stride, w));
            terms.push(term(&self.name('u', s), stride * w, u));
            terms.push(term(&self.name('v', s), stride * w * u, v));
            stride *= v * u * w;
        }
        terms.reverse();
        format!("acc[{}]", sum(&terms))
    }

    fn header(&self, s: &mut String) {
        let k = self.kernel;
        let _ = writeln!(
            s,
            "/* tensor-dsl generated CUDA C (codegen v{CODEGEN_VERSION})"
        );
        let _ = writeln!(s, " * kernel `{}` fingerprint {}", k.name, k.fingerprint());
        let _ = writeln!(s, " *   {k}");
        let ext: Vec<String> = k
            .indices
            .iter()
            .zip(self.extents)
            .map(|(i, e)| format!("{}={e}", i.name))
            .collect();
        let _ = writeln!(s, " * extents: {}", ext.join(" "));
        if k.params.iter().any(|p| p.dtype != crate::ir::DType::F32) {
            let _ = writeln!(
                s,
                " * element types: {} (arithmetic in float)",
                k.dtypes_text()
            );
        }
        let _ = writeln!(s, " * schedule (Ansor multi-level tiling):");
        for (i, index) in k.indices.iter().enumerate() {
            let f = &self.s.axes[i].factors;
            let p = self.padded[i];
            let padded = if p != self.extents[i] {
                format!(" (padded from {})", self.extents[i])
            } else {
                String::new()
            };
            if self.is_spatial(i) {
                let _ = writeln!(
                    s,
                    " *   {}: {p} = block {} x vthread {} x thread {} x reg {} x {}{padded}",
                    index.name, f[0], f[1], f[2], f[3], f[4]
                );
            } else {
                let _ = writeln!(
                    s,
                    " *   {}: {p} = outer {} x middle {} x inner {}{padded}",
                    index.name, f[0], f[1], f[2]
                );
            }
        }
        let groups: Vec<String> = self
            .spatial
            .iter()
            .map(|&sp| self.f(sp, 2).to_string())
            .collect();
        let _ = writeln!(
            s,
            " *   {} threads ({}{}), {} blocks, {} accumulator(s) per thread",
            self.threads,
            if groups.is_empty() {
                "1".to_string()
            } else {
                groups.join(" x ")
            },
            if self.s.lanes > 1 {
                format!(" x {} reduction lanes", self.s.lanes)
            } else {
                String::new()
            },
            self.s.blocks(k),
            self.nacc
        );
        if self.tiles.is_empty() {
            let _ = writeln!(s, " *   no shared-memory staging");
        } else {
            let staged: Vec<String> = self
                .tiles
                .iter()
                .map(|t| {
                    let mut a = String::new();
                    crate::ir::Expr::Access(t.tile.access.clone())
                        .write(&mut a, k, &|v| k.indices[v].name.clone());
                    let dims: Vec<String> = t.tile.dims.iter().map(|d| d.to_string()).collect();
                    let w = if t.width > 1 {
                        format!(" float{}", t.width)
                    } else {
                        String::new()
                    };
                    format!("{a} {}{w}", dims.join("x"))
                })
                .collect();
            let _ = writeln!(
                s,
                " *   shared: {} = {} bytes",
                staged.join(", "),
                self.s.shared_bytes(k)
            );
        }
        let order: Vec<String> = self
            .s
            .order
            .iter()
            .map(|l| match *l {
                RegLoop::Reg1(i) => format!("u{}", self.stem[i]),
                RegLoop::Inner(i) | RegLoop::Reg2(i) => format!("w{}", self.stem[i]),
            })
            .collect();
        let _ = writeln!(
            s,
            " *   unroll_max_step {}, register loops {}",
            self.s.unroll_max_step,
            if order.is_empty() {
                "-".to_string()
            } else {
                order.join(" ")
            }
        );
        let _ = writeln!(
            s,
            " * names: b_ block corner, t_ thread offset, v_ vthread, u_/w_ register levels,"
        );
        let _ = writeln!(
            s,
            " *   o_/m_/w_ reduction outer/middle/inner, i_ coordinate, l_ coordinate in the tile"
        );
        let _ = writeln!(s, " */");
    }

    /// `const int x = (q / stride) % count * mult;` for each (name, count, mult) decoded
    /// from `src`, last fastest; names with count 1 are skipped.
    fn decode(&self, s: &mut String, depth: usize, src: &str, parts: &[(String, usize, usize)]) {
        let mut stride = 1;
        let mut lines = Vec::new();
        for (n, (name, count, mult)) in parts.iter().enumerate().rev() {
            if *count > 1 {
                let mut e = src.to_string();
                if stride > 1 {
                    e = format!("{e} / {stride}");
                }
                let outermost = parts[..n].iter().all(|p| p.1 == 1);
                if !outermost {
                    e = format!("{e} % {count}");
                }
                if *mult > 1 {
                    e = if e == src {
                        format!("{e} * {mult}")
                    } else {
                        format!("({e}) * {mult}")
                    };
                }
                lines.push(format!("{}const {} {name} = {e};", pad(depth), self.ity));
                stride *= count;
            }
        }
        for l in lines.into_iter().rev() {
            let _ = writeln!(s, "{l}");
        }
    }

    /// The cooperative copy of one tile into shared memory.
    fn stage(&self, s: &mut String, depth: usize, st: &StagedTile) {
        let k = self.kernel;
        let a = &st.tile.access;
        let p = a.tensor;
        let w = st.width;
        let dims = &st.tile.dims;
        let rank = dims.len();
        let mut vdims = dims.clone();
        vdims[rank - 1] /= w;
        let count: usize = vdims.iter().product();
        let mut text = String::new();
        crate::ir::Expr::Access(a.clone()).write(&mut text, k, &|v| k.indices[v].name.clone());
        let _ = writeln!(
            s,
            "{}/* stage {text}: {} floats{} */",
            pad(depth),
            dims.iter()
                .map(|d| d.to_string())
                .collect::<Vec<_>>()
                .join(" x "),
            if w > 1 {
                format!(", float{w} loads")
            } else {
                String::new()
            }
        );
        if count == self.threads {
            let _ = writeln!(s, "{}{{", pad(depth));
            let _ = writeln!(s, "{}const {} e = td_tid;", pad(depth + 1), self.ity);
        } else if count < self.threads {
            let _ = writeln!(s, "{}if (td_tid < {count}) {{", pad(depth));
            let _ = writeln!(s, "{}const {} e = td_tid;", pad(depth + 1), self.ity);
        } else {
            let _ = writeln!(
                s,
                "{}for ({ity} e = td_tid; e < {count}; e += {}) {{",
                pad(depth),
                self.threads,
                ity = self.ity
            );
        }
        let d = depth + 1;
        // Tile coordinates of element (or vector) e, row-major.
        let mut stride = 1;
        let mut parts = Vec::new();
        for dim in (0..rank).rev() {
            let outermost = vdims[..dim].iter().all(|&x| x == 1);
            let mut e = "e".to_string();
            if vdims[dim] == 1 {
                e = "0".into();
            } else {
                if stride > 1 {
                    e = format!("{e} / {stride}");
                }
                if !outermost {
                    e = format!("{e} % {}", vdims[dim]);
                }
            }
            if dim == rank - 1 && w > 1 {
                e = if e == "e" || e == "0" {
                    format!("{e} * {w}")
                } else {
                    format!("({e}) * {w}")
                };
            }
            parts.push(format!("d{dim} = {e}"));
            stride *= vdims[dim];
        }
        parts.reverse();
        let _ = writeln!(s, "{}const {} {};", pad(d), self.ity, parts.join(", "));
        // Global coordinates: the tile's corner plus the tile coordinate.
        let mut coords = Vec::new();
        for (dim, map) in a.dims.iter().enumerate() {
            let corner = Affine {
                terms: map
                    .terms
                    .iter()
                    .copied()
                    .filter(|&(v, _)| self.has_base(v))
                    .collect(),
                offset: map.offset + st.tile.shift[dim],
            };
            let mut c = String::new();
            corner.write(&mut c, &|v| self.name('b', v));
            let g = if c == "0" {
                format!("d{dim}")
            } else if let Some(neg) = c.strip_prefix('-').filter(|r| is_simple(r)) {
                format!("d{dim} - {neg}")
            } else {
                format!("{c} + d{dim}")
            };
            let _ = writeln!(s, "{}const {} g{dim} = {g};", pad(d), self.ity);
            let (lo, hi) = map.range(&self.padded);
            coords.push(Coord {
                expr: format!("g{dim}"),
                simple: true,
                lo,
                hi,
            });
        }
        let shape = self.shapes[p];
        let conds = bound_checks(shape, &coords);
        let offset = offset_expr(shape, &coords);
        if w == 1 {
            let load = super::load_as_f32(self.kernel.params[p].dtype, &format!("t{p}[{offset}]"));
            let value = if conds.is_empty() {
                load
            } else {
                format!("{} ? {load} : 0.0f", conds.join(" && "))
            };
            let _ = writeln!(s, "{}{}[e] = {value};", pad(d), st.array);
        } else {
            let zeros = vec!["0.0f"; w].join(", ");
            let _ = writeln!(s, "{}float{w} v = {{{zeros}}};", pad(d));
            let load = format!("v = *reinterpret_cast<const float{w} *>(t{p} + {offset});");
            if conds.is_empty() {
                let _ = writeln!(s, "{}{load}", pad(d));
            } else {
                let _ = writeln!(s, "{}if ({})", pad(d), conds.join(" && "));
                let _ = writeln!(s, "{}{load}", pad(d + 1));
            }
            let _ = writeln!(
                s,
                "{}*reinterpret_cast<float{w} *>({} + {w} * e) = v;",
                pad(d),
                st.array
            );
        }
        let _ = writeln!(s, "{}}}", pad(depth));
    }

    /// Defines the coordinates that become complete after loop variable `after` (or
    /// before any loop when `None`).
    fn define_coords(
        &self,
        s: &mut String,
        depth: usize,
        after: Option<&str>,
        opened: &[String],
        used: &(Vec<bool>, Vec<bool>),
    ) {
        for i in 0..self.kernel.indices.len() {
            for (global, wanted) in [(true, used.0[i]), (false, used.1[i])] {
                if !wanted {
                    continue;
                }
                let vars = self.coord_vars(i, global);
                // The last of its variables among the loops opened so far.
                let last = opened.iter().rev().find(|o| vars.contains(o));
                if vars.iter().all(|v| opened.contains(v)) && last.map(|l| l.as_str()) == after {
                    let (name, value) = if global {
                        (self.name('i', i), self.global_coord(i))
                    } else {
                        (self.name('l', i), self.local_coord(i))
                    };
                    let _ = writeln!(s, "{}const {} {name} = {value};", pad(depth), self.ity);
                }
            }
        }
    }

    fn kernel_body(&self, s: &mut String) {
        let k = self.kernel;
        let lanes = self.s.lanes;
        let sum_kind = k.kind == BodyKind::Sum;
        let mut d = 1;
        let _ = writeln!(s, "    const {} td_tid = threadIdx.x;", self.ity);
        if lanes > 1 {
            let _ = writeln!(
                s,
                "    /* {lanes} neighbouring threads (lanes) share each output's reduction */"
            );
            let _ = writeln!(s, "    const {} td_lane = td_tid % {lanes};", self.ity);
            if self.s.thread_groups(k) > 1 {
                let _ = writeln!(s, "    const {} td_group = td_tid / {lanes};", self.ity);
            }
        }
        let group = if lanes > 1 { "td_group" } else { "td_tid" };
        // Block corners and thread offsets.
        let blocks: Vec<(String, usize, usize)> = self
            .spatial
            .iter()
            .map(|&sp| (self.name('b', sp), self.f(sp, 0), self.s.span(sp)))
            .collect();
        let threads: Vec<(String, usize, usize)> = self
            .spatial
            .iter()
            .map(|&sp| {
                (
                    self.name('t', sp),
                    self.f(sp, 2),
                    self.f(sp, 3) * self.f(sp, 4),
                )
            })
            .collect();
        if blocks.iter().any(|b| b.1 > 1) || threads.iter().any(|t| t.1 > 1) {
            let _ = writeln!(
                s,
                "    /* this block's corner of the output, this thread's offset in the block tile */"
            );
        }
        self.decode(s, d, "blockIdx.x", &blocks);
        self.decode(s, d, group, &threads);

        // Shared memory.
        for st in &self.tiles {
            let n: usize = st.tile.dims.iter().product();
            let _ = writeln!(s, "    __shared__ __align__(16) float {}[{n}];", st.array);
        }
        let scratch = self.s.lane_scratch(k);
        if scratch > 0 {
            let _ = writeln!(s, "    __shared__ float td_red[{scratch}];");
        }

        // Accumulators.
        if self.nacc == 1 {
            let _ = writeln!(s, "    float acc{};", if sum_kind { " = 0.0f" } else { "" });
        } else {
            let _ = writeln!(s, "    float acc[{}];", self.nacc);
            if sum_kind {
                let _ = writeln!(s, "    #pragma unroll");
                let _ = writeln!(
                    s,
                    "    for (int n = 0; n < {}; ++n)\n        acc[n] = 0.0f;",
                    self.nacc
                );
            }
        }

        let used = self.used_coords();
        let mut opened: Vec<String> = Vec::new();
        self.define_coords(s, d, None, &opened, &used);

        // Tiles loaded once, before the reduction.
        let once: Vec<&StagedTile> = self.tiles.iter().filter(|t| !t.tile.per_step).collect();
        let per_step: Vec<&StagedTile> = self.tiles.iter().filter(|t| t.tile.per_step).collect();
        for st in &once {
            self.stage(s, d, st);
        }
        if !once.is_empty() && per_step.is_empty() {
            let _ = writeln!(s, "    __syncthreads();");
        }

        // Outer reduction loops: one shared-memory stage per step.
        let mut closers = Vec::new();
        for &r in &self.reduction {
            let o = self.f(r, 0);
            if o > 1 {
                let var = self.name('o', r);
                let _ = writeln!(
                    s,
                    "{}for ({ity} {var} = 0; {var} < {o}; ++{var}) {{",
                    pad(d),
                    ity = self.ity
                );
                d += 1;
                let span = self.s.span(r);
                let _ = writeln!(
                    s,
                    "{}const {} {} = {};",
                    pad(d),
                    self.ity,
                    self.name('b', r),
                    if span == 1 {
                        var.clone()
                    } else {
                        format!("{span} * {var}")
                    }
                );
                opened.push(var.clone());
                self.define_coords(s, d, Some(&var), &opened, &used);
                closers.push(d);
            }
        }
        for st in &per_step {
            self.stage(s, d, st);
        }
        if !per_step.is_empty() {
            let _ = writeln!(s, "{}__syncthreads();", pad(d));
        }

        // The compute nest: middle reduction, vthreads, register loops.
        let mut loops: Vec<Loop> = Vec::new();
        let middles: Vec<usize> = self
            .reduction
            .iter()
            .copied()
            .filter(|&r| self.f(r, 1) > 1)
            .collect();
        let q = self.s.middle_points(k);
        if lanes > 1 {
            loops.push(Loop {
                var: "q".into(),
                trip: q.div_ceil(lanes),
                header: format!(
                    "for ({ity} q = td_lane; q < {q}; q += {lanes})",
                    ity = self.ity
                ),
                no_unroll: true,
            });
        } else {
            for &r in &middles {
                let var = self.name('m', r);
                let m = self.f(r, 1);
                loops.push(Loop {
                    header: format!("for (int {var} = 0; {var} < {m}; ++{var})"),
                    var,
                    trip: m,
                    no_unroll: false,
                });
            }
        }
        for &sp in &self.spatial {
            let v = self.f(sp, 1);
            if v > 1 {
                let var = self.name('v', sp);
                loops.push(Loop {
                    header: format!("for (int {var} = 0; {var} < {v}; ++{var})"),
                    var,
                    trip: v,
                    no_unroll: false,
                });
            }
        }
        for l in &self.s.order {
            let (var, trip) = match *l {
                RegLoop::Reg1(i) => (self.name('u', i), self.f(i, 3)),
                RegLoop::Inner(i) => (self.name('w', i), self.f(i, 2)),
                RegLoop::Reg2(i) => (self.name('w', i), self.f(i, 4)),
            };
            if trip > 1 {
                loops.push(Loop {
                    header: format!("for (int {var} = 0; {var} < {trip}; ++{var})"),
                    var,
                    trip,
                    no_unroll: false,
                });
            }
        }
        let step = self.s.unroll_max_step;
        let compute_depth = d;
        for n in 0..loops.len() {
            let l = &loops[n];
            let inner: usize = loops[n..]
                .iter()
                .fold(1usize, |a, x| a.saturating_mul(x.trip));
            if step > 0 && inner <= step && !l.no_unroll {
                let _ = writeln!(s, "{}#pragma unroll", pad(d));
            }
            let _ = writeln!(s, "{}{} {{", pad(d), l.header);
            d += 1;
            if l.var == "q" {
                let parts: Vec<(String, usize, usize)> = self
                    .reduction
                    .iter()
                    .map(|&r| (self.name('m', r), self.f(r, 1), 1))
                    .collect();
                self.decode(s, d, "q", &parts);
                for &r in &middles {
                    opened.push(self.name('m', r));
                }
                for &r in &middles {
                    self.define_coords(s, d, Some(&self.name('m', r)), &opened, &used);
                }
            } else {
                opened.push(l.var.clone());
                self.define_coords(s, d, Some(&l.var), &opened, &used);
            }
        }
        let body = self.printer().expr_with(&k.body, &|a| self.tile_read(a));
        let _ = writeln!(
            s,
            "{}{} {} {body};",
            pad(d),
            self.acc_ref(),
            if sum_kind { "+=" } else { "=" }
        );
        while d > compute_depth {
            d -= 1;
            let _ = writeln!(s, "{}}}", pad(d));
        }
        if !per_step.is_empty() && !closers.is_empty() {
            let _ = writeln!(s, "{}__syncthreads();", pad(d));
        }
        while d > 1 {
            d -= 1;
            let _ = writeln!(s, "{}}}", pad(d));
        }

        if lanes > 1 {
            self.lane_sum(s);
        }
        self.store(s);
    }

    /// Emits `f(acc, n)` for every accumulator (a loop over `n` unless there is one).
    fn each_acc(&self, s: &mut String, depth: usize, f: &dyn Fn(&mut String, usize, &str, &str)) {
        if self.nacc == 1 {
            f(s, depth, "acc", "0");
        } else {
            let _ = writeln!(s, "{}#pragma unroll", pad(depth));
            let _ = writeln!(
                s,
                "{}for (int n = 0; n < {}; ++n) {{",
                pad(depth),
                self.nacc
            );
            f(s, depth + 1, "acc[n]", "n");
            let _ = writeln!(s, "{}}}", pad(depth));
        }
    }

    /// Sums each accumulator over the lanes: butterfly shuffles inside a warp, then (more
    /// than 32 lanes) the warps' partial sums through shared memory.
    fn lane_sum(&self, s: &mut String) {
        let lanes = self.s.lanes;
        let threads = self.threads;
        let mask = if threads.is_multiple_of(32) {
            "0xffffffffu".to_string()
        } else if threads < 32 {
            format!("0x{:x}u", (1u64 << threads) - 1)
        } else {
            let last = threads / 32;
            let part = (1u64 << (threads % 32)) - 1;
            let _ = writeln!(
                s,
                "    const unsigned td_mask = td_tid / 32 == {last} ? 0x{part:x}u : 0xffffffffu;"
            );
            "td_mask".into()
        };
        let _ = writeln!(
            s,
            "    /* sum the {lanes} lanes of each accumulator{} */",
            if lanes > 32 {
                ": shuffles in each warp, then across warps in shared memory"
            } else {
                " (warp shuffles)"
            }
        );
        let half = lanes.min(32) / 2;
        self.each_acc(s, 1, &|s, d, acc, _| {
            let _ = writeln!(s, "{}#pragma unroll", pad(d));
            let _ = writeln!(s, "{}for (int k = {half}; k > 0; k /= 2)", pad(d));
            let _ = writeln!(
                s,
                "{}{acc} += __shfl_xor_sync({mask}, {acc}, k);",
                pad(d + 1)
            );
        });
        if lanes > 32 {
            let warps = lanes / 32;
            let groups = self.s.thread_groups(self.kernel);
            let slot = |n: &str| match (n, groups) {
                ("0", 1) => String::new(),
                (n, 1) => format!("{n} * {warps} + "),
                ("0", _) => format!("td_group * {warps} + "),
                (n, g) => format!("({n} * {g} + td_group) * {warps} + "),
            };
            let _ = writeln!(s, "    if (td_lane % 32 == 0) {{");
            self.each_acc(s, 2, &|s, d, acc, n| {
                let _ = writeln!(s, "{}td_red[{}td_lane / 32] = {acc};", pad(d), slot(n));
            });
            let _ = writeln!(s, "    }}");
            let _ = writeln!(s, "    __syncthreads();");
            let _ = writeln!(s, "    if (td_lane == 0) {{");
            self.each_acc(s, 2, &|s, d, acc, n| {
                let _ = writeln!(s, "{}float total = 0.0f;", pad(d));
                let _ = writeln!(s, "{}for (int k = 0; k < {warps}; ++k)", pad(d));
                let _ = writeln!(s, "{}total += td_red[{}k];", pad(d + 1), slot(n));
                let _ = writeln!(s, "{}{acc} = total;", pad(d));
            });
            let _ = writeln!(s, "    }}");
        }
    }

    /// The epilogue on every accumulator and one predicated store per output element.
    fn store(&self, s: &mut String) {
        let k = self.kernel;
        let _ = writeln!(
            s,
            "    /* {}one store per output element */",
            if k.epilogue.is_empty() {
                ""
            } else {
                "fused epilogue, "
            }
        );
        let mut d = 1;
        let mut loops: Vec<(String, usize, usize)> = Vec::new();
        for (level, p) in [(1, 'v'), (3, 'u'), (4, 'w')] {
            for &sp in &self.spatial {
                let trip = self.f(sp, level);
                if trip > 1 {
                    loops.push((self.name(p, sp), trip, sp));
                }
            }
        }
        // Coordinates without register loops may already be defined by the compute phase.
        let used = self.used_coords().0;
        let mut defined: Vec<bool> = (0..k.indices.len())
            .map(|i| used[i] && self.coord_vars(i, true).is_empty())
            .collect();
        let mut opened: Vec<String> = Vec::new();
        let define = |s: &mut String, d: usize, opened: &[String], defined: &mut Vec<bool>| {
            for &sp in &self.spatial {
                if !defined[sp] && self.coord_vars(sp, true).iter().all(|v| opened.contains(v)) {
                    defined[sp] = true;
                    let _ = writeln!(
                        s,
                        "{}const {} {} = {};",
                        pad(d),
                        self.ity,
                        self.name('i', sp),
                        self.global_coord(sp)
                    );
                }
            }
        };
        define(s, d, &opened, &mut defined);
        for (var, trip, _) in &loops {
            let _ = writeln!(s, "{}#pragma unroll", pad(d));
            let _ = writeln!(
                s,
                "{}for (int {var} = 0; {var} < {trip}; ++{var}) {{",
                pad(d)
            );
            d += 1;
            opened.push(var.clone());
            define(s, d, &opened, &mut defined);
        }
        let mut conds = Vec::new();
        if self.s.lanes > 1 {
            conds.push("td_lane == 0".to_string());
        }
        for &sp in &self.spatial {
            if self.padded[sp] > self.extents[sp] {
                conds.push(format!("{} < {}", self.name('i', sp), self.extents[sp]));
            }
        }
        if !conds.is_empty() {
            let _ = writeln!(s, "{}if ({}) {{", pad(d), conds.join(" && "));
            d += 1;
        }
        let _ = writeln!(s, "{}float x = {};", pad(d), self.acc_ref());
        let printer = self.printer();
        for e in &k.epilogue {
            let _ = writeln!(s, "{}x = {};", pad(d), printer.expr(e));
        }
        let out_shape = self.shapes[k.output];
        let coords: Vec<Coord> = self
            .spatial
            .iter()
            .map(|&sp| Coord {
                expr: self.name('i', sp),
                simple: true,
                lo: 0,
                hi: 0,
            })
            .collect();
        let _ = writeln!(
            s,
            "{}out[{}] = {};",
            pad(d),
            offset_expr(out_shape, &coords),
            super::store_from_f32(k.params[k.output].dtype, "x")
        );
        while d > 1 {
            d -= 1;
            let _ = writeln!(s, "{}}}", pad(d));
        }
    }
}

/// A source that fails to compile with `why` (for schedules that do not fit the kernel).
fn invalid(why: &str) -> CudaSource {
    let why: String = why
        .chars()
        .map(|c| {
            if c == '"' || c == '\\' || c == '\n' {
                ' '
            } else {
                c
            }
        })
        .collect();
    CudaSource {
        source: format!("#error \"tensor-dsl: invalid GPU schedule: {why}\"\n"),
        entry: ENTRY.into(),
        grid: [1, 1, 1],
        block: [1, 1, 1],
        shared_bytes: 0,
    }
}

/// A C-identifier-safe name for a tensor's shared tile.
fn tile_array(kernel: &Kernel, p: usize, taken: &[String]) -> String {
    let n = &kernel.params[p].name;
    let base = if n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        format!("s_{n}")
    } else {
        format!("s_{p}")
    };
    let mut name = base.clone();
    let mut k = 1;
    while taken.contains(&name) {
        name = format!("{base}_{k}");
        k += 1;
    }
    name
}

/// The widest vector load of a tile that is provably aligned and all-or-nothing in bounds:
/// the tile's last dimension is a plain index whose block span and tensor row are
/// multiples of the width.
fn vector_width(kernel: &Kernel, s: &GpuSchedule, shapes: &[&[usize]], tile: &Tile) -> usize {
    let a = &tile.access;
    // `float4`-style loads read `float`s; half-precision tiles are widened element by element.
    if kernel.params[a.tensor].dtype != crate::ir::DType::F32 {
        return 1;
    }
    let Some(v) = a.dims.last().and_then(|d| d.as_var()) else {
        return 1;
    };
    let row = shapes[a.tensor].last().copied().unwrap_or(1);
    [4, 2]
        .into_iter()
        .find(|&w| w <= s.vector && s.span(v).is_multiple_of(w) && row.is_multiple_of(w))
        .unwrap_or(1)
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
    if let Err(e) = schedule.validate(kernel, extents) {
        return invalid(&e);
    }
    if shapes.len() != kernel.params.len()
        || kernel
            .params
            .iter()
            .zip(shapes)
            .any(|(p, s)| p.rank != s.len())
    {
        return invalid("the shapes do not match the kernel's parameters");
    }
    let threads = schedule.threads(kernel);
    let blocks = schedule.blocks(kernel);
    if threads == 0 || threads > u32::MAX as usize || blocks > u32::MAX as usize {
        return invalid("the launch geometry does not fit 32 bits");
    }
    let mut tiles: Vec<StagedTile> = Vec::new();
    let mut taken: Vec<String> = Vec::new();
    for tile in schedule.tiles(kernel) {
        let array = tile_array(kernel, tile.access.tensor, &taken);
        taken.push(array.clone());
        let width = vector_width(kernel, schedule, shapes, &tile);
        tiles.push(StagedTile { tile, array, width });
    }
    let padded: Vec<usize> = schedule.axes.iter().map(|a| a.padded).collect();
    // 32-bit coordinates unless a tensor or padded extent could overflow them.
    let coordinates = kernel.accesses().into_iter().flat_map(|a| {
        a.dims.iter().map(|m| {
            let (lo, hi) = m.range(&padded);
            lo.unsigned_abs().max(hi.unsigned_abs()) as usize
        })
    });
    let biggest = shapes
        .iter()
        .map(|s| s.iter().product::<usize>())
        .chain(padded.iter().map(|&p| p.saturating_mul(4)))
        .chain(coordinates)
        .max()
        .unwrap_or(0);
    let ity = if biggest < (1 << 30) {
        "int"
    } else {
        "long long"
    };
    let g = Gen {
        kernel,
        extents,
        shapes,
        s: schedule,
        spatial: kernel.spatial(),
        reduction: if kernel.kind == BodyKind::Sum {
            kernel.reduction()
        } else {
            Vec::new()
        },
        stem: (0..kernel.indices.len())
            .map(|i| index_name(kernel, i)[1..].to_string())
            .collect(),
        padded,
        tiles,
        threads,
        nacc: schedule.accumulators(kernel),
        ity,
    };
    let mut body = String::new();
    let params: Vec<String> = kernel
        .inputs()
        .iter()
        .map(|&p| {
            format!(
                "const {} *__restrict__ t{p}",
                super::storage_type(kernel.params[p].dtype)
            )
        })
        .chain([format!(
            "{} *__restrict__ out",
            super::storage_type(kernel.params[kernel.output].dtype)
        )])
        .collect();
    let _ = writeln!(
        body,
        "extern \"C\" __global__ void __launch_bounds__({threads})\n{ENTRY}({})\n{{",
        params.join(", ")
    );
    g.kernel_body(&mut body);
    body.push_str("}\n");

    let mut s = String::new();
    g.header(&mut s);
    if body.contains("INFINITY") {
        s.push_str("#ifndef INFINITY\n#define INFINITY __int_as_float(0x7f800000)\n#endif\n");
    }
    s.push('\n');
    s.push_str(&builtin_prelude("__device__ "));
    s.push_str(&super::dtype_prelude(kernel, "__device__ "));
    s.push('\n');
    s.push_str(&body);
    CudaSource {
        source: s,
        entry: ENTRY.into(),
        grid: [blocks as u32, 1, 1],
        block: [threads as u32, 1, 1],
        shared_bytes: 0,
    }
}
