//! Lowers a [`GpuSchedule`] to a [`Nest`]: Ansor's multi-level tiling (see
//! [`crate::template::gpu`]) as one CUDA kernel on a one-dimensional grid of
//! one-dimensional blocks — block corners and thread offsets bound to `blockIdx.x` and the
//! thread index, input tiles staged cooperatively in shared memory once or per outer
//! reduction step, the compute nest over middle reduction, virtual-thread and register
//! loops, the lanes' partial sums combined by warp shuffles, and one guarded store per
//! output element.
//!
//! ```
//! use tensor_dsl::{ir::parse_text, lower, template::gpu};
//! let k = parse_text("mm", "c[[i,j]] += a[[i,k]] * b[[k,j]]", None).unwrap();
//! let shapes: [&[usize]; 3] = [&[64, 48], &[48, 40], &[64, 40]];
//! // (a matmul's default is the SIMT GEMM form, see `lower::gpu_simt`; this is the Ansor one)
//! let s = gpu::ansor_default_schedule(&k, &[64, 40, 48], &gpu::GpuTarget::h100());
//! let nest = lower::gpu::lower(&k, &[64, 40, 48], &shapes, &s).unwrap();
//! assert_eq!(nest.launch.unwrap().block, [160, 1, 1]);
//! // Both inputs are staged in shared memory, 16-byte aligned for vector loads.
//! let shared: Vec<usize> = nest.scoped(lower::Scope::Shared).map(|b| b.elements()).collect();
//! assert_eq!(shared, vec![256, 160]);
//! assert_eq!(nest.shared_bytes(), 1664);
//! ```

use super::{
    AssignOp, BindPart, Binding, BufId, Buffer, CopyMode, Func, HwIndex, IntType, Launch, Layout,
    Loop, LoopKind, Nest, Scope, Stage, Step, Stmt, Target, Ty, Value, COMPUTE,
};
use crate::codegen::{bound_checks, index_name, offset_expr, Coord};
use crate::ir::{Access, Affine, BodyKind, IndexKind, Kernel};
use crate::template::gpu::{GpuSchedule, RegLoop, Tile};

/// Name of the `extern "C" __global__` entry point.
pub const ENTRY: &str = "td_kernel";

/// `a + b + ...` of the non-empty terms, or `0`.
fn sum(terms: &[String]) -> String {
    let t: Vec<&str> = terms
        .iter()
        .filter(|t| !t.is_empty())
        .map(String::as_str)
        .collect();
    if t.is_empty() {
        "0".into()
    } else {
        t.join(" + ")
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
    if kernel.params[a.tensor].dtype != COMPUTE {
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

/// What a statement list is being built inside.
enum Open {
    Loop(Loop),
    If(String),
}

/// Statements built in program order: loops and guards are opened, filled and closed.
struct Builder {
    frames: Vec<(Option<Open>, Vec<Stmt>)>,
}

impl Builder {
    fn new() -> Builder {
        Builder {
            frames: vec![(None, Vec::new())],
        }
    }

    fn push(&mut self, s: Stmt) {
        if let Some(f) = self.frames.last_mut() {
            f.1.push(s);
        }
    }

    fn extend(&mut self, s: impl IntoIterator<Item = Stmt>) {
        for s in s {
            self.push(s);
        }
    }

    fn open(&mut self, o: Open) {
        self.frames.push((Some(o), Vec::new()));
    }

    /// Open loops and guards.
    fn depth(&self) -> usize {
        self.frames.len() - 1
    }

    fn close(&mut self) {
        if self.frames.len() < 2 {
            return;
        }
        if let Some((Some(open), body)) = self.frames.pop() {
            self.push(match open {
                Open::Loop(mut l) => {
                    l.body = body;
                    Stmt::Loop(l)
                }
                Open::If(cond) => Stmt::If {
                    cond,
                    then: body,
                    els: None,
                    braced: true,
                },
            });
        }
    }

    fn finish(mut self) -> Vec<Stmt> {
        while self.frames.len() > 1 {
            self.close();
        }
        self.frames.pop().map(|f| f.1).unwrap_or_default()
    }
}

/// A braced `int` loop from 0 by 1.
fn count_loop(var: &str, trip: usize, kind: LoopKind, index: Option<usize>) -> Loop {
    Loop {
        var: var.into(),
        ty: IntType::Int,
        start: "0".into(),
        end: trip.to_string(),
        step: Step::Inc,
        trip,
        kind,
        index,
        layout: Layout::Braced,
        body: Vec::new(),
    }
}

struct StagedTile {
    tile: Tile,
    buf: BufId,
    array: String,
    width: usize,
}

/// Checks the schedule, shapes and launch geometry; the error says which does not fit.
fn check(
    kernel: &Kernel,
    extents: &[usize],
    shapes: &[&[usize]],
    schedule: &GpuSchedule,
) -> Result<(), String> {
    schedule.validate(kernel, extents)?;
    super::check_shapes(kernel, shapes)?;
    let threads = schedule.threads(kernel);
    let blocks = schedule.blocks(kernel);
    if threads == 0 || threads > u32::MAX as usize || blocks > u32::MAX as usize {
        return Err("the launch geometry does not fit 32 bits".into());
    }
    Ok(())
}

/// Lowers `schedule` for `kernel` at `extents` (parameter shapes `shapes`). A schedule that
/// does not fit (see [`GpuSchedule::validate`]) is an error.
pub fn lower<'a>(
    kernel: &'a Kernel,
    extents: &[usize],
    shapes: &'a [&'a [usize]],
    schedule: &GpuSchedule,
) -> Result<Nest<'a>, String> {
    check(kernel, extents, shapes, schedule)?;
    if let Some(t) = &schedule.simt {
        let g = schedule
            .gemm(kernel)
            .ok_or("the kernel has no GEMM form for a SIMT schedule")?;
        return super::gpu_simt::lower(kernel, extents, shapes, &g, t);
    }
    let threads = schedule.threads(kernel);
    let mut buffers = super::param_buffers(kernel, shapes);
    let mut tiles: Vec<StagedTile> = Vec::new();
    let mut taken: Vec<String> = Vec::new();
    for tile in schedule.tiles(kernel) {
        let name = tile_array(kernel, tile.access.tensor, &taken);
        taken.push(name.clone());
        let width = vector_width(kernel, schedule, shapes, &tile);
        // Staged tiles hold the compute type: half-precision data is widened once, when
        // copied in, and the inner loops read floats.
        buffers.push(Buffer {
            name: name.clone(),
            scope: Scope::Shared,
            dtype: COMPUTE,
            dims: vec![tile.dims.iter().product()],
            param: None,
            align: Some(16),
        });
        tiles.push(StagedTile {
            tile,
            buf: BufId(buffers.len() - 1),
            array: name,
            width,
        });
    }
    let scratch = schedule.lane_scratch(kernel);
    let red = (scratch > 0).then(|| {
        buffers.push(Buffer {
            name: "td_red".into(),
            scope: Scope::Shared,
            dtype: COMPUTE,
            dims: vec![scratch],
            param: None,
            align: None,
        });
        BufId(buffers.len() - 1)
    });
    let nacc = schedule.accumulators(kernel);
    buffers.push(Buffer {
        name: "acc".into(),
        scope: Scope::Register,
        dtype: COMPUTE,
        dims: if nacc == 1 { Vec::new() } else { vec![nacc] },
        param: None,
        align: None,
    });
    let acc = BufId(buffers.len() - 1);

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
        IntType::Int
    } else {
        IntType::LongLong
    };
    let l = Lower {
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
        nacc,
        ity,
        out: BufId(kernel.output),
        acc,
        red,
    };
    let body = l.kernel_body();
    let params = super::pointer_params(kernel, None);
    let domain = l.padded.clone();
    Ok(Nest {
        kernel,
        shapes,
        domain,
        buffers,
        helpers: Vec::new(),
        entry: Func {
            name: ENTRY.into(),
            params,
            body,
        },
        launch: Some(Launch {
            grid: [schedule.blocks(kernel), 1, 1],
            block: [threads, 1, 1],
        }),
        globals: Vec::new(),
        prepack: None,
    })
}

struct Lower<'a> {
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
    ity: IntType,
    out: BufId,
    acc: BufId,
    /// The cross-warp lane sum's scratch.
    red: Option<BufId>,
}

impl Lower<'_> {
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

    /// `const <ity> name = value;`.
    fn let_(&self, name: &str, value: String) -> Stmt {
        Stmt::Let {
            ty: Ty::Int(self.ity),
            konst: true,
            defs: vec![(name.into(), Value::Code(value))],
        }
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

    /// The global coordinate of every index (`i_`), as the kernel expressions see them.
    fn index_binding(&self) -> Vec<String> {
        (0..self.kernel.indices.len())
            .map(|i| self.name('i', i))
            .collect()
    }

    /// The reads of staged accesses from their tiles.
    fn tile_reads(&self) -> Vec<(Access, String)> {
        self.tiles
            .iter()
            .map(|st| {
                let a = &st.tile.access;
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
                (
                    a.clone(),
                    format!("{}[{}]", st.array, offset_expr(&st.tile.dims, &coords)),
                )
            })
            .collect()
    }

    /// The accumulator of the current register point.
    fn acc_ref(&self) -> Target {
        if self.nacc == 1 {
            return Target::Elem {
                buf: self.acc,
                index: Vec::new(),
            };
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
        Target::Elem {
            buf: self.acc,
            index: vec![sum(&terms)],
        }
    }

    /// The cooperative copy of one tile into shared memory.
    fn stage(&self, st: &StagedTile) -> Stmt {
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
        let comment = Stmt::Comment(format!(
            "stage {text}: {} floats{}",
            dims.iter()
                .map(|d| d.to_string())
                .collect::<Vec<_>>()
                .join(" x "),
            if w > 1 {
                format!(", float{w} loads")
            } else {
                String::new()
            }
        ));
        let mut body = Vec::new();
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
            parts.push((format!("d{dim}"), Value::Code(e)));
            stride *= vdims[dim];
        }
        parts.reverse();
        body.push(Stmt::Let {
            ty: Ty::Int(self.ity),
            konst: true,
            defs: parts,
        });
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
            body.push(self.let_(&format!("g{dim}"), g));
            let (lo, hi) = map.range(&self.padded);
            coords.push(Coord {
                expr: format!("g{dim}"),
                simple: true,
                lo,
                hi,
            });
        }
        let shape = self.shapes[p];
        body.push(Stmt::Move {
            dst: (
                st.buf,
                if w == 1 {
                    "e".into()
                } else {
                    format!("{w} * e")
                },
            ),
            src: (BufId(p), offset_expr(shape, &coords)),
            width: w,
            guard: bound_checks(shape, &coords),
        });
        let e = self.let_("e", "td_tid".into());
        let copy = if count == self.threads {
            Stmt::Block([e].into_iter().chain(body).collect())
        } else if count < self.threads {
            Stmt::If {
                cond: format!("td_tid < {count}"),
                then: [e].into_iter().chain(body).collect(),
                els: None,
                braced: true,
            }
        } else {
            Stmt::Loop(Loop {
                var: "e".into(),
                ty: self.ity,
                start: "td_tid".into(),
                end: count.to_string(),
                step: Step::Add(self.threads),
                trip: count.div_ceil(self.threads),
                kind: LoopKind::ThreadStrided,
                index: None,
                layout: Layout::Braced,
                body,
            })
        };
        Stmt::Stage(Stage {
            src: a.clone(),
            dst: st.buf,
            dims: dims.clone(),
            width: w,
            mode: CopyMode::Sync,
            body: vec![comment, copy],
        })
    }

    /// Defines the coordinates that become complete after loop variable `after` (or
    /// before any loop when `None`).
    fn define_coords(
        &self,
        after: Option<&str>,
        opened: &[String],
        used: &(Vec<bool>, Vec<bool>),
    ) -> Vec<Stmt> {
        let mut out = Vec::new();
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
                    out.push(self.let_(&name, value));
                }
            }
        }
        out
    }

    fn kernel_body(&self) -> Vec<Stmt> {
        let k = self.kernel;
        let lanes = self.s.lanes;
        let sum_kind = k.kind == BodyKind::Sum;
        let mut b = Builder::new();
        b.push(Stmt::Let {
            ty: Ty::Int(self.ity),
            konst: true,
            defs: vec![("td_tid".into(), Value::Hw(HwIndex::Thread))],
        });
        if lanes > 1 {
            b.push(Stmt::Comment(format!(
                "{lanes} neighbouring threads (lanes) share each output's reduction"
            )));
            b.push(self.let_("td_lane", format!("td_tid % {lanes}")));
            if self.s.thread_groups(k) > 1 {
                b.push(self.let_("td_group", format!("td_tid / {lanes}")));
            }
        }
        let group = if lanes > 1 { "td_group" } else { "td_tid" };
        // Block corners and thread offsets.
        let blocks: Vec<BindPart> = self
            .spatial
            .iter()
            .map(|&sp| BindPart {
                name: self.name('b', sp),
                count: self.f(sp, 0),
                mult: self.s.span(sp),
                index: Some(sp),
            })
            .collect();
        let threads: Vec<BindPart> = self
            .spatial
            .iter()
            .map(|&sp| BindPart {
                name: self.name('t', sp),
                count: self.f(sp, 2),
                mult: self.f(sp, 3) * self.f(sp, 4),
                index: Some(sp),
            })
            .collect();
        if blocks.iter().any(|b| b.count > 1) || threads.iter().any(|t| t.count > 1) {
            b.push(Stmt::Comment(
                "this block's corner of the output, this thread's offset in the block tile".into(),
            ));
        }
        b.push(Stmt::Bind {
            src: Value::Hw(HwIndex::Block),
            ty: self.ity,
            parts: blocks,
        });
        b.push(Stmt::Bind {
            src: Value::Code(group.into()),
            ty: self.ity,
            parts: threads,
        });

        // Shared memory.
        for st in &self.tiles {
            b.push(Stmt::Alloc {
                buf: st.buf,
                init: None,
            });
        }
        if let Some(red) = self.red {
            b.push(Stmt::Alloc {
                buf: red,
                init: None,
            });
        }

        // Accumulators.
        if self.nacc == 1 {
            b.push(Stmt::Alloc {
                buf: self.acc,
                init: sum_kind.then_some(Value::Float(0.0)),
            });
        } else {
            b.push(Stmt::Alloc {
                buf: self.acc,
                init: None,
            });
            if sum_kind {
                let mut init = count_loop("n", self.nacc, LoopKind::Unrolled(self.nacc), None);
                init.layout = Layout::Bare;
                init.body = vec![Stmt::Assign {
                    dst: Target::Elem {
                        buf: self.acc,
                        index: vec!["n".into()],
                    },
                    op: AssignOp::Set,
                    value: Value::Float(0.0),
                }];
                b.push(Stmt::Loop(init));
            }
        }

        let used = self.used_coords();
        let mut opened: Vec<String> = Vec::new();
        b.extend(self.define_coords(None, &opened, &used));

        // Tiles loaded once, before the reduction.
        let once: Vec<&StagedTile> = self.tiles.iter().filter(|t| !t.tile.per_step).collect();
        let per_step: Vec<&StagedTile> = self.tiles.iter().filter(|t| t.tile.per_step).collect();
        for st in &once {
            b.push(self.stage(st));
        }
        if !once.is_empty() && per_step.is_empty() {
            b.push(Stmt::Barrier);
        }

        // Outer reduction loops: one shared-memory stage per step.
        let mut closers = 0;
        for &r in &self.reduction {
            let o = self.f(r, 0);
            if o > 1 {
                let var = self.name('o', r);
                let mut l = count_loop(&var, o, LoopKind::Serial, Some(r));
                l.ty = self.ity;
                b.open(Open::Loop(l));
                let span = self.s.span(r);
                b.push(self.let_(
                    &self.name('b', r),
                    if span == 1 {
                        var.clone()
                    } else {
                        format!("{span} * {var}")
                    },
                ));
                opened.push(var.clone());
                b.extend(self.define_coords(Some(&var), &opened, &used));
                closers += 1;
            }
        }
        for st in &per_step {
            b.push(self.stage(st));
        }
        if !per_step.is_empty() {
            b.push(Stmt::Barrier);
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
                ty: self.ity,
                start: "td_lane".into(),
                end: q.to_string(),
                step: Step::Add(lanes),
                trip: q.div_ceil(lanes),
                kind: LoopKind::ThreadStrided,
                index: None,
                layout: Layout::Braced,
                body: Vec::new(),
            });
        } else {
            for &r in &middles {
                loops.push(count_loop(
                    &self.name('m', r),
                    self.f(r, 1),
                    LoopKind::Serial,
                    Some(r),
                ));
            }
        }
        for &sp in &self.spatial {
            let v = self.f(sp, 1);
            if v > 1 {
                loops.push(count_loop(
                    &self.name('v', sp),
                    v,
                    LoopKind::Serial,
                    Some(sp),
                ));
            }
        }
        for l in &self.s.order {
            let (var, trip, i) = match *l {
                RegLoop::Reg1(i) => (self.name('u', i), self.f(i, 3), i),
                RegLoop::Inner(i) => (self.name('w', i), self.f(i, 2), i),
                RegLoop::Reg2(i) => (self.name('w', i), self.f(i, 4), i),
            };
            if trip > 1 {
                loops.push(count_loop(&var, trip, LoopKind::Serial, Some(i)));
            }
        }
        let step = self.s.unroll_max_step;
        let compute_depth = b.depth();
        for n in 0..loops.len() {
            let mut l = loops[n].clone();
            let inner: usize = loops[n..]
                .iter()
                .fold(1usize, |a, x| a.saturating_mul(x.trip));
            if step > 0 && inner <= step && l.kind != LoopKind::ThreadStrided {
                l.kind = LoopKind::Unrolled(l.trip);
            }
            let var = l.var.clone();
            b.open(Open::Loop(l));
            if var == "q" {
                let parts: Vec<BindPart> = self
                    .reduction
                    .iter()
                    .map(|&r| BindPart {
                        name: self.name('m', r),
                        count: self.f(r, 1),
                        mult: 1,
                        index: Some(r),
                    })
                    .collect();
                b.push(Stmt::Bind {
                    src: Value::Code("q".into()),
                    ty: self.ity,
                    parts,
                });
                for &r in &middles {
                    opened.push(self.name('m', r));
                }
                for &r in &middles {
                    b.extend(self.define_coords(Some(&self.name('m', r)), &opened, &used));
                }
            } else {
                opened.push(var.clone());
                b.extend(self.define_coords(Some(&var), &opened, &used));
            }
        }
        b.push(Stmt::Compute {
            acc: self.acc_ref(),
            reduce: sum_kind,
            value: Value::Kernel {
                expr: k.body.clone(),
                binding: Binding {
                    index: self.index_binding(),
                    reads: self.tile_reads(),
                },
            },
        });
        while b.depth() > compute_depth {
            b.close();
        }
        if !per_step.is_empty() && closers > 0 {
            b.push(Stmt::Barrier);
        }
        while b.depth() > 0 {
            b.close();
        }

        if lanes > 1 {
            b.extend(self.lane_sum());
        }
        b.extend(self.store());
        b.finish()
    }

    /// `f(acc, n)` for every accumulator (a loop over `n` unless there is one).
    fn each_acc(&self, f: &dyn Fn(Target, &str) -> Vec<Stmt>) -> Vec<Stmt> {
        if self.nacc == 1 {
            f(self.acc_elem(None), "0")
        } else {
            let mut l = count_loop("n", self.nacc, LoopKind::Unrolled(self.nacc), None);
            l.body = f(self.acc_elem(Some("n")), "n");
            vec![Stmt::Loop(l)]
        }
    }

    fn acc_elem(&self, n: Option<&str>) -> Target {
        Target::Elem {
            buf: self.acc,
            index: n.map(String::from).into_iter().collect(),
        }
    }

    /// Sums each accumulator over the lanes: butterfly shuffles inside a warp, then (more
    /// than 32 lanes) the warps' partial sums through shared memory.
    fn lane_sum(&self) -> Vec<Stmt> {
        let lanes = self.s.lanes;
        let threads = self.threads;
        let mut out = Vec::new();
        let mask = if threads.is_multiple_of(32) {
            "0xffffffffu".to_string()
        } else if threads < 32 {
            format!("0x{:x}u", (1u64 << threads) - 1)
        } else {
            let last = threads / 32;
            let part = (1u64 << (threads % 32)) - 1;
            out.push(Stmt::Let {
                ty: Ty::Int(IntType::Unsigned),
                konst: true,
                defs: vec![(
                    "td_mask".into(),
                    Value::Code(format!("td_tid / 32 == {last} ? 0x{part:x}u : 0xffffffffu")),
                )],
            });
            "td_mask".into()
        };
        out.push(Stmt::Comment(format!(
            "sum the {lanes} lanes of each accumulator{}",
            if lanes > 32 {
                ": shuffles in each warp, then across warps in shared memory"
            } else {
                " (warp shuffles)"
            }
        )));
        let half = lanes.min(32) / 2;
        out.extend(self.each_acc(&|acc, _| {
            vec![Stmt::Loop(Loop {
                var: "k".into(),
                ty: IntType::Int,
                start: half.to_string(),
                end: "0".into(),
                step: Step::Halve,
                trip: half.max(1).ilog2() as usize + 1,
                kind: LoopKind::Unrolled(half.max(1).ilog2() as usize + 1),
                index: None,
                layout: Layout::Bare,
                body: vec![Stmt::Assign {
                    dst: acc.clone(),
                    op: AssignOp::Add,
                    value: Value::ShuffleXor {
                        mask: mask.clone(),
                        value: acc,
                        lane: "k".into(),
                    },
                }],
            })]
        }));
        if let (true, Some(red)) = (lanes > 32, self.red) {
            let warps = lanes / 32;
            let groups = self.s.thread_groups(self.kernel);
            let slot = |n: &str| match (n, groups) {
                ("0", 1) => String::new(),
                (n, 1) => format!("{n} * {warps} + "),
                ("0", _) => format!("td_group * {warps} + "),
                (n, g) => format!("({n} * {g} + td_group) * {warps} + "),
            };
            let red_at = |i: String| Target::Elem {
                buf: red,
                index: vec![i],
            };
            out.push(Stmt::If {
                cond: "td_lane % 32 == 0".into(),
                then: self.each_acc(&|acc, n| {
                    vec![Stmt::Assign {
                        dst: red_at(format!("{}td_lane / 32", slot(n))),
                        op: AssignOp::Set,
                        value: Value::Read(acc),
                    }]
                }),
                els: None,
                braced: true,
            });
            out.push(Stmt::Barrier);
            out.push(Stmt::If {
                cond: "td_lane == 0".into(),
                then: self.each_acc(&|acc, n| {
                    let mut total = count_loop("k", warps, LoopKind::Serial, None);
                    total.layout = Layout::Bare;
                    total.body = vec![Stmt::Assign {
                        dst: Target::Var("total".into()),
                        op: AssignOp::Add,
                        value: Value::Read(red_at(format!("{}k", slot(n)))),
                    }];
                    vec![
                        Stmt::Let {
                            ty: Ty::Elem(COMPUTE),
                            konst: false,
                            defs: vec![("total".into(), Value::Float(0.0))],
                        },
                        Stmt::Loop(total),
                        Stmt::Assign {
                            dst: acc,
                            op: AssignOp::Set,
                            value: Value::Read(Target::Var("total".into())),
                        },
                    ]
                }),
                els: None,
                braced: true,
            });
        }
        out
    }

    /// The epilogue on every accumulator and one predicated store per output element.
    fn store(&self) -> Vec<Stmt> {
        let k = self.kernel;
        let mut b = Builder::new();
        b.push(Stmt::Comment(format!(
            "{}one store per output element",
            if k.epilogue.is_empty() {
                ""
            } else {
                "fused epilogue, "
            }
        )));
        let mut loops: Vec<Loop> = Vec::new();
        for (level, p) in [(1, 'v'), (3, 'u'), (4, 'w')] {
            for &sp in &self.spatial {
                let trip = self.f(sp, level);
                if trip > 1 {
                    loops.push(count_loop(
                        &self.name(p, sp),
                        trip,
                        LoopKind::Unrolled(trip),
                        Some(sp),
                    ));
                }
            }
        }
        // Coordinates without register loops may already be defined by the compute phase.
        let used = self.used_coords().0;
        let mut defined: Vec<bool> = (0..k.indices.len())
            .map(|i| used[i] && self.coord_vars(i, true).is_empty())
            .collect();
        let mut opened: Vec<String> = Vec::new();
        let define = |b: &mut Builder, opened: &[String], defined: &mut Vec<bool>| {
            for &sp in &self.spatial {
                if !defined[sp] && self.coord_vars(sp, true).iter().all(|v| opened.contains(v)) {
                    defined[sp] = true;
                    b.push(self.let_(&self.name('i', sp), self.global_coord(sp)));
                }
            }
        };
        define(&mut b, &opened, &mut defined);
        for l in loops {
            opened.push(l.var.clone());
            b.open(Open::Loop(l));
            define(&mut b, &opened, &mut defined);
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
            b.open(Open::If(conds.join(" && ")));
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
        b.push(Stmt::Store {
            acc: self.acc_ref(),
            epilogue: k.epilogue.clone(),
            binding: Binding {
                index: self.index_binding(),
                reads: Vec::new(),
            },
            dst: Target::Elem {
                buf: self.out,
                index: vec![offset_expr(out_shape, &coords)],
            },
        });
        b.finish()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::ir::parse_text;
    use crate::template::gpu::{GpuTarget, GpuTemplate};
    use rand::{rngs::StdRng, SeedableRng};

    /// The nest agrees with the schedule's own arithmetic (which the template's limits
    /// check): threads, blocks, accumulators, shared bytes, staged tiles.
    #[test]
    fn the_nest_agrees_with_the_schedule_it_lowers() {
        let target = GpuTarget::h100();
        let mut rng = StdRng::seed_from_u64(5);
        for (src, shapes) in [
            (
                "c[[i, j]] += a[[i, k]] * b[[k, j]]",
                vec![vec![100, 64], vec![64, 48], vec![100, 48]],
            ),
            (
                "o[[i]] += a[[i, k]] * b[[k]]",
                vec![vec![8, 4096], vec![4096], vec![8]],
            ),
            (
                "o[[i]] += a[[i - k + 2]] * w[[k]]",
                vec![vec![1000], vec![5], vec![1000]],
            ),
        ] {
            let k = parse_text("k", src, None).unwrap();
            let refs: Vec<&[usize]> = shapes.iter().map(Vec::as_slice).collect();
            let e = crate::ir::bind(&k, &refs).unwrap();
            let t = GpuTemplate::new(&k, &e, &target).unwrap();
            for _ in 0..40 {
                let s = t
                    .decode(&t.space().sample_uniform(&mut rng).unwrap())
                    .unwrap();
                let nest = lower(&k, &e, &refs, &s).unwrap();
                let launch = nest.launch.unwrap();
                assert_eq!(launch.block, [s.threads(&k), 1, 1]);
                assert_eq!(launch.grid, [s.blocks(&k), 1, 1]);
                let acc: usize = nest
                    .scoped(Scope::Register)
                    .filter(|b| b.name == "acc")
                    .map(Buffer::elements)
                    .sum();
                assert_eq!(acc, s.accumulators(&k));
                assert_eq!(nest.shared_bytes(), s.shared_bytes(&k));
                let mut staged = Vec::new();
                nest.walk(&mut |_, st, _| {
                    if let Stmt::Stage(st) = st {
                        staged.push((st.src.clone(), st.dims.clone()));
                    }
                });
                for tile in s.tiles(&k) {
                    assert!(staged.contains(&(tile.access.clone(), tile.dims.clone())));
                }
                assert_eq!(staged.len(), s.tiles(&k).len());
            }
        }
    }

    #[test]
    fn schedules_that_do_not_fit_are_errors() {
        let k = parse_text("mm", "c[[i,j]] += a[[i,k]] * b[[k,j]]", None).unwrap();
        let shapes: [&[usize]; 3] = [&[64, 48], &[48, 40], &[64, 40]];
        let e = [64, 40, 48];
        let mut s = crate::template::gpu::default_schedule(&k, &e, &GpuTarget::h100());
        assert!(lower(&k, &e, &shapes[..2], &s).is_err());
        s.axes[0].factors[0] += 1;
        assert!(lower(&k, &e, &shapes, &s).is_err());
    }
}
