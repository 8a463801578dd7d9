//! Lowers a [`SimtGemm`] schedule of a kernel in [`GemmForm`] to a [`Nest`] (see
//! [`crate::template::gpu_simt`] for the structure and the knobs):
//!
//! ```text
//! block -> (split z, batch element, output tile)     rasterized in groups of `raster` tile rows
//! [kfuse with a table operand] each k point's offset and window mask -> shared table; barrier
//! per load slot: its row, coordinates, offset, window mask (before any loop)
//! for outer reduction (r, s, ...):                   (none with kfuse)
//!     per load slot: its offset and padding check at this (r, s)
//!     register prefetch:                             cp.async, S stages:
//!       tile t0 -> regs -> buffer 0; barrier           tiles t0 .. t0+S-2 -> stages; commit each
//!       for kt in t0 .. t1:                            for kt in t0 .. t1:
//!           tile kt+1 -> regs                              wait (S-2 pending); barrier
//!           compute buffer kt&1                            tile kt+S-1 -> stage; commit
//!           regs -> buffer (kt+1)&1; barrier               compute stage
//!                                                      wait (0 pending)
//! [split] partial tile -> workspace; fence; count; the last arrival sums in split order
//! epilogue, one guarded store per output element
//! ```
//!
//! A thread's load slots walk its operand's tile "rows first": along the fused rows for an
//! operand whose `k` is not its fastest axis (consecutive lanes, consecutive rows: `float4`
//! rows or one row each), in runs of 8 `k` (one 32-byte sector) for the others (2 lanes of
//! `float4` or 8 lanes of one float a row); either way a warp's stores into the k-major
//! shared tile hit 32 different banks (checked by this module's tests).
//!
//! ```
//! use tensor_dsl::{ir::parse_text, lower, template::gpu_simt};
//! let k = parse_text("mm", "c[[i,j]] += a[[i,k]] * b[[k,j]]", None).unwrap();
//! let shapes: [&[usize]; 3] = [&[256, 64], &[64, 128], &[256, 128]];
//! let g = gpu_simt::gemm_form(&k, &[256, 128, 64]).unwrap();
//! let s = gpu_simt::SimtGemm::tiles(64, 64, 8, 8, 8, 4);
//! let nest = lower::gpu_simt::lower(&k, &[256, 128, 64], &shapes, &g, &s).unwrap();
//! assert_eq!(nest.launch.unwrap().block, [64, 1, 1]);
//! assert_eq!(nest.shared_bytes(), 2 * 8 * (68 + 68) * 4);
//! ```

use super::{
    AssignOp, Binding, BufId, Buffer, ElemKind, Func, IntType, Launch, Layout, Loop, LoopKind,
    MemSpace, ModuleArray, Nest, Scope, Step, Stmt, Target, Ty, Value, COMPUTE,
};
use crate::codegen::{index_name, offset_expr, Coord};
use crate::ir::{Access, DType, Kernel};
use crate::template::gpu_simt::{GemmForm, OperandPlan, Side, SimtGemm, SHARED_PAD};

/// Row-major strides of a shape.
fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1usize; shape.len()];
    for d in (0..shape.len().saturating_sub(1)).rev() {
        s[d] = s[d + 1].saturating_mul(shape[d + 1].max(1));
    }
    s
}

fn join_sum(terms: Vec<String>) -> String {
    let t: Vec<String> = terms
        .into_iter()
        .filter(|t| !t.is_empty() && t != "0")
        .collect();
    if t.is_empty() {
        "0".into()
    } else {
        t.join(" + ")
    }
}

fn scaled(c: i64, v: &str) -> String {
    match c {
        0 => String::new(),
        1 => v.to_string(),
        -1 => format!("-{v}"),
        c => format!("{c} * {v}"),
    }
}

fn loop_(var: &str, trip: usize, kind: LoopKind, index: Option<usize>, body: Vec<Stmt>) -> Stmt {
    Stmt::Loop(Loop {
        var: var.into(),
        ty: IntType::Int,
        start: "0".into(),
        end: trip.to_string(),
        step: Step::Inc,
        trip,
        kind,
        index,
        layout: Layout::Braced,
        body,
    })
}

/// The fused coordinate `x` of `axes` (last fastest) decoded into `prefix`-named variables.
fn decode(k: &Kernel, extents: &[usize], axes: &[usize], x: &str, prefix: &str) -> Vec<Stmt> {
    let mut defs = Vec::new();
    let mut stride = 1usize;
    for (n, &ax) in axes.iter().enumerate().rev() {
        let e = extents[ax].max(1);
        let div = if stride == 1 {
            x.to_string()
        } else {
            format!("({x}) / {stride}")
        };
        let v = if n == 0 {
            div
        } else {
            format!("({div}) % {e}")
        };
        defs.push((
            format!("{prefix}{}", &index_name(k, ax)[1..]),
            Value::Code(v),
        ));
        stride = stride.saturating_mul(e);
    }
    defs.reverse();
    if defs.is_empty() {
        return Vec::new();
    }
    vec![Stmt::Let {
        ty: Ty::Int(IntType::Int),
        konst: true,
        defs,
    }]
}

fn let_int(name: &str, ty: IntType, v: String) -> Stmt {
    Stmt::Let {
        ty: Ty::Int(ty),
        konst: true,
        defs: vec![(name.into(), Value::Code(v))],
    }
}

fn var_int(name: &str, v: String) -> Stmt {
    Stmt::Let {
        ty: Ty::Int(IntType::Int),
        konst: false,
        defs: vec![(name.into(), Value::Code(v))],
    }
}

fn set_var(name: &str, v: String) -> Stmt {
    Stmt::Assign {
        dst: Target::Var(name.into()),
        op: AssignOp::Set,
        value: Value::Code(v),
    }
}

fn if_(cond: String, then: Vec<Stmt>) -> Stmt {
    Stmt::If {
        cond,
        then,
        els: None,
        braced: true,
    }
}

/// One load slot of a thread: its set-up (row) and the compile-time part of its `k` offset
/// in the tile (the operand's per-thread part is `<tag>_kk`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Slot {
    setup: usize,
    kk: usize,
}

/// One operand of the GEMM and how its tile is loaded.
struct Op<'k> {
    side: Side,
    /// `a` or `b`.
    tag: char,
    access: &'k Access,
    axes: &'k [usize],
    extent: usize,
    tile: usize,
    plan: OperandPlan,
    global: BufId,
    dtype: DType,
    /// Registers staging its next tile (register prefetch).
    regs: Option<BufId>,
    /// Element offset of stage 0 of its tiles in the shared buffer.
    base: usize,
    /// Elements of a shared row (`tile + 4`).
    pitch: usize,
}

/// The lowering's view of the schedule.
struct Simt<'a> {
    k: &'a Kernel,
    extents: &'a [usize],
    shapes: &'a [&'a [usize]],
    g: &'a GemmForm,
    s: &'a SimtGemm,
    ity: IntType,
    /// The tiled reduction indices (last fastest) and the outer ones.
    k_axes: Vec<usize>,
    outer: Vec<usize>,
    /// The zero-filled points before the first (partial) tile: position `p` of the tiles
    /// is reduction point `p - shift`.
    shift: usize,
    threads: usize,
    smem: BufId,
}

impl Simt<'_> {
    fn var(&self, i: usize) -> String {
        index_name(self.k, i)
    }

    /// Whether dimension `d` of `acc` can leave the tensor (needs a check).
    fn needs_check(&self, acc: &Access, d: usize) -> bool {
        let (lo, hi) = acc.dims[d].range(self.extents);
        lo < 0 || hi >= self.shapes[acc.tensor][d] as i64
    }

    /// Offset per point of the tiled reduction, for an operand linear in it: the last tiled
    /// index's coefficient (its dimension's stride).
    fn k_stride(&self, o: &Op) -> i64 {
        let st = strides(self.shapes[o.access.tensor]);
        let Some(&last) = self.k_axes.last() else {
            return 0;
        };
        o.access
            .dims
            .iter()
            .enumerate()
            .map(|(d, m)| {
                m.terms
                    .iter()
                    .filter(|t| t.0 == last)
                    .map(|t| t.1 * st[d] as i64)
                    .sum::<i64>()
            })
            .sum()
    }

    /// The thread's tile row of logical set-up `j` (C text), and the set-ups.
    fn rows(&self, o: &Op) -> Vec<String> {
        let (t, w, tile) = (self.threads, o.plan.width, o.tile);
        if o.plan.k_fast {
            let q = 8 / w;
            let workers = t / q;
            if workers >= tile {
                vec![format!("td_tid / {q} % {tile}")]
            } else {
                (0..tile / workers)
                    .map(|j| format!("td_tid / {q} + {}", j * workers))
                    .collect()
            }
        } else {
            let r = tile / w;
            let scale = |e: String| if w == 1 { e } else { format!("({e}) * {w}") };
            if r <= t {
                vec![scale(format!("td_tid % {r}"))]
            } else {
                (0..r / t)
                    .map(|j| scale(format!("td_tid + {}", j * t)))
                    .collect()
            }
        }
    }

    /// The thread's own part of its `k` offset in the tile (C text, `0` when none).
    fn kk0(&self, o: &Op) -> String {
        let (t, w, tile) = (self.threads, o.plan.width, o.tile);
        if o.plan.k_fast {
            let q = 8 / w;
            let workers = t / q;
            let lane = if w == 1 {
                format!("td_tid % {q}")
            } else {
                format!("td_tid % {q} * {w}")
            };
            if workers > tile {
                format!("td_tid / {} * 8 + {lane}", q * tile)
            } else {
                lane
            }
        } else {
            let r = tile / w;
            if r < t {
                format!("td_tid / {r}")
            } else {
                "0".into()
            }
        }
    }

    /// The thread's load slots, each with its set-up and `k` offset.
    fn slots(&self, o: &Op) -> Vec<Slot> {
        let (t, w, tile) = (self.threads, o.plan.width, o.tile);
        let per = self.rows(o).len();
        (0..o.plan.slots)
            .map(|i| {
                let (setup, round) = (i % per, i / per);
                let kk = if o.plan.k_fast {
                    let workers = t / (8 / w);
                    if workers >= tile {
                        i * (workers / tile) * 8
                    } else {
                        round * 8
                    }
                } else {
                    let r = tile / w;
                    if r <= t {
                        i * (t / r)
                    } else {
                        round
                    }
                };
                Slot { setup, kk }
            })
            .collect()
    }

    /// When the logical set-ups' rows differ by a constant offset (one fused axis read
    /// plainly, no checks), the offset per set-up in the tile and in memory: then only
    /// set-up 0 is computed. Rows are not clamped then; when the tile does not divide the
    /// extent, each set-up's row is guarded instead ([`Simt::row_guarded`]).
    fn row_step(&self, o: &Op) -> Option<(usize, i64)> {
        let rows = self.rows(o).len();
        if rows < 2 {
            return None;
        }
        let [ax] = o.axes else { return None };
        let st = strides(self.shapes[o.access.tensor]);
        let mut delta = 0i64;
        for (d, m) in o.access.dims.iter().enumerate() {
            let c: i64 = m.terms.iter().filter(|t| t.0 == *ax).map(|t| t.1).sum();
            if c != 0 && self.needs_check(o.access, d) {
                return None;
            }
            delta += c * st[d] as i64;
        }
        let step = if o.plan.k_fast {
            self.threads / (8 / o.plan.width)
        } else {
            self.threads * o.plan.width
        };
        Some((step, step as i64 * delta))
    }

    /// Whether the rows of [`Simt::row_step`]'s set-ups are checked against the extent
    /// (`<tag>_ok<j>`) instead of clamped.
    fn row_guarded(&self, o: &Op) -> bool {
        self.row_step(o).is_some() && !o.extent.is_multiple_of(o.tile)
    }

    /// Set-ups with their own code (1 when [`Simt::row_step`] applies).
    fn setups(&self, o: &Op) -> usize {
        if self.row_step(o).is_some() {
            1
        } else {
            self.rows(o).len()
        }
    }

    /// The physical set-up of logical set-up `j`, and its row offset from it in the tile
    /// and in memory.
    fn setup_of(&self, o: &Op, j: usize) -> (usize, usize, i64) {
        match self.row_step(o) {
            Some((rows, mem)) => (0, j * rows, j as i64 * mem),
            None => (j, 0, 0),
        }
    }

    /// The dimensions of a table operand that take a field of the window mask: those with a
    /// reduction index that are not plain, with the lowest value of that part and its span.
    fn fields(&self, o: &Op) -> Vec<(usize, i64, usize)> {
        let mut out = Vec::new();
        for (d, m) in o.access.dims.iter().enumerate() {
            if m.as_var().is_some() || !m.terms.iter().any(|t| self.k_axes.contains(&t.0)) {
                continue;
            }
            let (mut lo, mut span) = (0i64, 1usize);
            for &(v, c) in m.terms.iter().filter(|t| self.k_axes.contains(&t.0)) {
                let last = self.extents[v].max(1) as i64 - 1;
                if c < 0 {
                    lo += c * last;
                }
                span += (c.unsigned_abs() as usize) * last as usize;
            }
            out.push((d, lo, span));
        }
        out
    }

    /// Statements before any loop: per set-up, its row of the fused axes (clamped into
    /// the extent: rows past it only feed outputs never stored), the row's variables, the
    /// offset and checked coordinates they contribute; a table operand's window mask; the
    /// thread's place in the shared tile.
    fn setup(&self, o: &Op) -> Vec<Stmt> {
        let mut out = Vec::new();
        let shape = self.shapes[o.access.tensor];
        let st = strides(shape);
        let corner = if o.side == Side::A { "b_m" } else { "b_n" };
        let ity = self.ity.spelling();
        let rows = self.rows(o);
        let kk0 = self.kk0(o);
        out.push(let_int(&format!("{}_kk", o.tag), IntType::Int, kk0));
        // Rows past the extent are clamped (a group of 4 rows as a whole).
        let group = if o.plan.k_fast { 1 } else { o.plan.width };
        let last = o.extent - group.min(o.extent);
        for (j, row) in rows.iter().enumerate().take(self.setups(o)) {
            let p = format!("{}{j}", o.tag);
            out.push(let_int(
                &format!("{p}_s"),
                IntType::Int,
                format!("{} + {}_kk * {} + {row}", o.base, o.tag, o.pitch),
            ));
            out.push(let_int(
                &format!("{p}_r"),
                IntType::Int,
                if self.row_guarded(o) {
                    format!("{corner} + {row}")
                } else {
                    format!("{corner} + {row} < {last} ? {corner} + {row} : {last}")
                },
            ));
            if let (true, Some((step, _))) = (self.row_guarded(o), self.row_step(o)) {
                for j in 0..rows.len() {
                    out.push(let_int(
                        &format!("{}_ok{j}", o.tag),
                        IntType::Int,
                        format!("{p}_r + {} < {}", j * step, o.extent),
                    ));
                }
            }
            out.extend(decode(
                self.k,
                self.extents,
                o.axes,
                &format!("{p}_r"),
                &format!("{p}_"),
            ));
            let name_of = |v: usize| -> Option<String> {
                if o.axes.contains(&v) {
                    Some(format!("{p}_{}", &index_name(self.k, v)[1..]))
                } else if self.g.batch_axes.contains(&v) {
                    Some(self.var(v))
                } else {
                    None
                }
            };
            let mut terms = Vec::new();
            for (d, map) in o.access.dims.iter().enumerate() {
                let mut coord = vec![map.offset.to_string()];
                for &(v, c) in &map.terms {
                    if let Some(n) = name_of(v) {
                        coord.push(scaled(c, &n));
                    }
                }
                let coord = join_sum(coord);
                if self.needs_check(o.access, d) {
                    out.push(let_int(&format!("{p}_c{d}"), IntType::Int, coord.clone()));
                }
                if st[d] != 0 && coord != "0" {
                    terms.push(scaled(st[d] as i64, &format!("({ity})({coord})")));
                }
            }
            out.push(let_int(&format!("{p}_m"), self.ity, join_sum(terms)));
            if o.plan.table && self.table_checked(o) {
                out.extend(self.window_mask(o, &p));
            }
        }
        out
    }

    /// Whether a table operand's points need their window check: some point may lie
    /// outside the tensor (padding, a row dimension that can leave it). Without padding
    /// every point is inside, and the loads go unguarded but for the points before the
    /// reduction in a partial first tile (checked by position there).
    fn table_checked(&self, o: &Op) -> bool {
        o.access.dims.iter().enumerate().any(|(d, m)| {
            self.needs_check(o.access, d)
                && (!m.terms.iter().any(|t| self.k_axes.contains(&t.0)) || m.as_var().is_none())
        })
    }

    /// Words of a table entry: its offset, and its window bits where they are checked.
    fn table_stride(&self, o: &Op) -> usize {
        if self.table_checked(o) {
            2
        } else {
            1
        }
    }

    /// A table operand's set-up `p`: `<p>_nm`, the complement of its row's mask — bit 31
    /// when the dimensions without a reduction index are inside the tensor, and per
    /// window field the positions inside the tensor — so a point with entry `e` is read
    /// when `(e & <p>_nm) == 0`.
    fn window_mask(&self, o: &Op, p: &str) -> Vec<Stmt> {
        let shape = self.shapes[o.access.tensor];
        let mut out = Vec::new();
        let mut row_ok = Vec::new();
        for (d, m) in o.access.dims.iter().enumerate() {
            if self.needs_check(o.access, d) && !m.terms.iter().any(|t| self.k_axes.contains(&t.0))
            {
                row_ok.push(format!("(unsigned)({p}_c{d}) < {}u", shape[d]));
            }
        }
        let mut mask = vec![if row_ok.is_empty() {
            "0x80000000u".to_string()
        } else {
            format!("({} ? 0x80000000u : 0u)", row_ok.join(" && "))
        }];
        let mut field = 0usize;
        for (d, lo, span) in self.fields(o) {
            if !self.needs_check(o.access, d) {
                mask.push(format!("{}u", ((1u64 << span) - 1) << field));
            } else {
                // The window positions inside the tensor: `[l, h)` of the field.
                let c = match lo {
                    0 => format!("{p}_c{d}"),
                    lo if lo < 0 => format!("{p}_c{d} - {}", -lo),
                    lo => format!("{p}_c{d} + {lo}"),
                };
                let (l, h) = (format!("{p}_l{d}"), format!("{p}_h{d}"));
                out.push(Stmt::Let {
                    ty: Ty::Int(IntType::Int),
                    konst: true,
                    defs: vec![
                        (l.clone(), Value::Code(format!("{c} < 0 ? -({c}) : 0"))),
                        (
                            h.clone(),
                            Value::Code(format!(
                                "{n} - ({c}) < {span} ? {n} - ({c}) : {span}",
                                n = shape[d]
                            )),
                        ),
                    ],
                });
                let bits = format!("((1u << {h}) - (1u << {l}))");
                let bits = if field == 0 {
                    bits
                } else {
                    format!("{bits} << {field}")
                };
                mask.push(format!("({h} > {l} ? {bits} : 0u)"));
            }
            field += span;
        }
        out.push(Stmt::Let {
            ty: Ty::Int(IntType::Unsigned),
            konst: true,
            defs: vec![(
                format!("{p}_nm"),
                Value::Code(format!("~({})", mask.join(" | "))),
            )],
        });
        out
    }

    /// The checks of dimensions without the tiled index, for set-up `p`, at the outer
    /// reduction loops' values (none for a table operand: its mask has them).
    fn outer_checks(&self, o: &Op, p: &str) -> Vec<String> {
        if o.plan.table {
            return Vec::new();
        }
        let shape = self.shapes[o.access.tensor];
        let mut conds = Vec::new();
        for (d, map) in o.access.dims.iter().enumerate() {
            let uses_k = map.terms.iter().any(|t| self.k_axes.contains(&t.0));
            if !self.needs_check(o.access, d) || uses_k {
                continue;
            }
            let mut part = vec![format!("{p}_c{d}")];
            for &(v, c) in &map.terms {
                if self.outer.contains(&v) {
                    part.push(scaled(c, &self.var(v)));
                }
            }
            conds.push(format!("(unsigned)({}) < {}u", join_sum(part), shape[d]));
        }
        conds
    }

    /// Statements at the top of the outer reduction loops' body (before the pipeline
    /// without outer loops): per set-up, its offset at the first reduction point of the
    /// tiles (`<p>_o`; a table operand: its base pointer `<p>_p`) and whether it reads
    /// inside the tensor (`<p>_v`).
    fn per_outer(&self, o: &Op) -> Vec<Stmt> {
        let mut out = Vec::new();
        let st = strides(self.shapes[o.access.tensor]);
        let ity = self.ity.spelling();
        for j in 0..self.setups(o) {
            let p = format!("{}{j}", o.tag);
            let mut terms = vec![format!("{p}_m")];
            for (d, map) in o.access.dims.iter().enumerate() {
                let mut part = Vec::new();
                for &(v, c) in &map.terms {
                    if self.outer.contains(&v) {
                        part.push(scaled(c, &self.var(v)));
                    }
                }
                let part = join_sum(part);
                if st[d] != 0 && part != "0" {
                    terms.push(scaled(st[d] as i64, &format!("({ity})({part})")));
                }
            }
            if !o.plan.table {
                // The thread's own k offset, from the first point of the tiles.
                let ks = self.k_stride(o);
                if ks != 0 {
                    terms.push(scaled(
                        ks,
                        &format!("({ity})({}_kk - {})", o.tag, self.shift),
                    ));
                }
            }
            out.push(let_int(&format!("{p}_o"), self.ity, join_sum(terms)));
            if o.plan.table && o.dtype == DType::F32 {
                out.push(Stmt::Comment(format!(
                    "{p}_p: the row's base pointer, opaque so a table offset adds in one instruction"
                )));
                out.push(Stmt::Let {
                    ty: Ty::Ptr(DType::F32),
                    konst: true,
                    defs: vec![(
                        format!("{p}_p"),
                        Value::Code(format!("td_opaque({} + {p}_o)", self.buffer_name(o.global))),
                    )],
                });
            }
            let conds = self.outer_checks(o, &p);
            if !conds.is_empty() {
                out.push(let_int(&format!("{p}_v"), IntType::Int, conds.join(" && ")));
            }
        }
        out
    }

    fn buffer_name(&self, b: BufId) -> String {
        if b.0 == self.k.output {
            "out".into()
        } else {
            format!("t{}", b.0)
        }
    }

    /// The loads of tile `t` (C text of its index) of one operand: per slot, per element
    /// of it, the element offset in the tile's shared stage (relative to the slot's
    /// set-up), the global source (C text, relative to the tensor or, for a table operand,
    /// `<p>_p`), and its guards; plus statements that must come first (table reads).
    /// `first`: the tile may be the partial first one (points before the reduction read 0).
    fn elements(&self, o: &Op, t: &str, first: bool) -> (Vec<Stmt>, Vec<Element>) {
        let bk = self.s.bk;
        let shape = self.shapes[o.access.tensor];
        let ity = self.ity.spelling();
        let ks = self.k_stride(o);
        let mut pre = Vec::new();
        let mut out = Vec::new();
        let w = o.plan.width;
        // In a partial first tile, whether tile position `kc` of the thread is a point of
        // the reduction (`t * bk + <tag>_kk + kc - shift >= 0`); none needed otherwise.
        let started = |kc: usize| {
            (first && self.shift > 0)
                .then(|| format!("({t}) * {bk} + {}_kk + {kc} >= {}", o.tag, self.shift))
        };
        for (i, slot) in self.slots(o).iter().enumerate() {
            let (phys, drow, dmem) = self.setup_of(o, slot.setup);
            let p = format!("{}{phys}", o.tag);
            let mut guard = Vec::new();
            if !self.outer_checks(o, &p).is_empty() {
                guard.push(format!("{p}_v"));
            }
            if self.row_guarded(o) {
                guard.push(format!("{}_ok{}", o.tag, slot.setup));
            }
            if o.plan.table {
                // Position of the point in the tiles, and its table entry.
                let pos = format!(
                    "{} * (({t}) * {bk} + {}_kk + {})",
                    self.table_stride(o),
                    o.tag,
                    slot.kk
                );
                let (e, f) = (format!("{}_e{i}", o.tag), format!("{}_f{i}", o.tag));
                let mut defs = vec![(e.clone(), Value::Code(format!("td_tab_{}[{pos}]", o.tag)))];
                if self.table_checked(o) {
                    defs.push((
                        f.clone(),
                        Value::Code(format!("td_tab_{}[{pos} + 1]", o.tag)),
                    ));
                    guard.push(format!("({f} & {p}_nm) == 0"));
                } else {
                    guard.extend(started(slot.kk));
                }
                pre.push(Stmt::Let {
                    ty: Ty::Int(IntType::Int),
                    konst: true,
                    defs,
                });
                let opaque = o.dtype == DType::F32;
                out.push(Element {
                    shared: drow + slot.kk * o.pitch,
                    setup: phys,
                    src: if opaque {
                        format!("{p}_p + {e}")
                    } else {
                        format!("{p}_o + {e}")
                    },
                    opaque,
                    width: 1,
                    slot: i,
                    lane: 0,
                    guard,
                });
                continue;
            }
            // Elements of the slot: w rows at one k, or w k at one row.
            let count = if o.plan.k_fast { w } else { 1 };
            for e in 0..count {
                let mut g = guard.clone();
                let kc = slot.kk + e;
                g.extend(started(kc));
                // Checks of dimensions holding the tiled index (without fusion: a
                // convolution tiled along a window index).
                for (d, map) in o.access.dims.iter().enumerate() {
                    let ck: i64 = map
                        .terms
                        .iter()
                        .filter(|x| self.k_axes.contains(&x.0))
                        .map(|x| x.1)
                        .sum();
                    if ck != 0 && self.needs_check(o.access, d) {
                        let mut part = vec![
                            format!("{p}_c{d}"),
                            scaled(
                                ck,
                                &format!(
                                    "(({t}) * {bk} + {}_kk + {})",
                                    o.tag,
                                    kc as i64 - self.shift as i64
                                ),
                            ),
                        ];
                        for &(v, c) in &map.terms {
                            if self.outer.contains(&v) {
                                part.push(scaled(c, &self.var(v)));
                            }
                        }
                        g.push(format!("(unsigned)({}) < {}u", join_sum(part), shape[d]));
                    }
                }
                let mut src = vec![format!("{p}_o")];
                if ks != 0 {
                    src.push(scaled(ks * bk as i64, &format!("({ity})({t})")));
                }
                let konst = ks * kc as i64 + dmem;
                if konst != 0 {
                    src.push(konst.to_string());
                }
                out.push(Element {
                    shared: if o.plan.k_fast {
                        drow + (slot.kk + e) * o.pitch
                    } else {
                        drow + slot.kk * o.pitch
                    },
                    setup: phys,
                    src: join_sum(src),
                    opaque: false,
                    width: if o.plan.k_fast { 1 } else { w },
                    slot: i,
                    lane: e,
                    guard: g,
                });
            }
        }
        (pre, out)
    }

    /// Loads of tile `t` of `o` into its staging registers (register prefetch).
    fn load_regs(&self, o: &Op, t: &str, first: bool) -> Vec<Stmt> {
        let Some(regs) = o.regs else {
            return Vec::new();
        };
        let (mut body, elems) = self.elements(o, t, first);
        let w = o.plan.width;
        // A run of 4 along k is one float4 load (its elements share their checks).
        let run = o.plan.k_fast && w == 4;
        for mut el in elems {
            if run {
                if el.lane > 0 {
                    continue;
                }
                el.width = 4;
            }
            if el.opaque {
                // A table point of an f32 operand, from the row's opaque base pointer.
                body.push(Stmt::Assign {
                    dst: Target::Elem {
                        buf: regs,
                        index: vec![(el.slot * w + el.lane).to_string()],
                    },
                    op: AssignOp::Set,
                    // `__ldg`: a global load (the opaque pointer is generic).
                    value: Value::Code(if el.guard.is_empty() {
                        format!("__ldg({})", el.src)
                    } else {
                        format!("{} ? __ldg({}) : 0.0f", el.guard.join(" && "), el.src)
                    }),
                });
                continue;
            }
            let dst = (regs, (el.slot * w + el.lane).to_string());
            let mv = Stmt::Move {
                dst,
                src: (o.global, el.src),
                width: el.width,
                guard: el.guard,
            };
            body.push(if el.width > 1 {
                Stmt::Block(vec![mv])
            } else {
                mv
            });
        }
        body
    }

    /// Stores of the staging registers into the shared stage at element offset `stage`
    /// (C text).
    fn stash(&self, o: &Op, stage: &str) -> Vec<Stmt> {
        let Some(regs) = o.regs else {
            return Vec::new();
        };
        let (_, elems) = self.elements(o, "0", false);
        let w = o.plan.width;
        elems
            .into_iter()
            .map(|el| {
                let index = format!("{stage} + {}{}_s + {}", o.tag, el.setup, el.shared);
                if el.width > 1 {
                    Stmt::Block(vec![Stmt::Move {
                        dst: (self.smem, index),
                        src: (regs, (el.slot * w).to_string()),
                        width: el.width,
                        guard: Vec::new(),
                    }])
                } else {
                    Stmt::Assign {
                        dst: Target::Elem {
                            buf: self.smem,
                            index: vec![index],
                        },
                        op: AssignOp::Set,
                        value: Value::Read(Target::Elem {
                            buf: regs,
                            index: vec![(el.slot * w + el.lane).to_string()],
                        }),
                    }
                }
            })
            .collect()
    }

    /// Asynchronous copies of tile `t` of `o` into the shared stage at element offset
    /// `stage` (C text).
    fn copy_async(&self, o: &Op, t: &str, stage: &str, first: bool) -> Vec<Stmt> {
        let (mut body, elems) = self.elements(o, t, first);
        let name = self.buffer_name(o.global);
        for el in elems {
            let src = if el.opaque {
                el.src
            } else {
                format!("{name} + ({})", el.src)
            };
            body.push(Stmt::AsyncCopy {
                dst: format!(
                    "{}{}_sd + 4u * (unsigned)({stage} + {})",
                    o.tag, el.setup, el.shared
                ),
                src,
                bytes: 4 * el.width,
                guard: el.guard,
            });
        }
        body
    }
}

/// One element (or `float4`) a slot loads.
struct Element {
    /// Element offset in the shared stage, from the set-up's `<p>_s`.
    shared: usize,
    /// The physical set-up.
    setup: usize,
    /// Global source: an element offset of the tensor, or a pointer (`opaque`).
    src: String,
    opaque: bool,
    width: usize,
    slot: usize,
    /// Element of the slot (k-fast runs).
    lane: usize,
    guard: Vec<String>,
}

/// Lowers `s` for `kernel` (in GEMM form `g`) at `extents` with parameter shapes `shapes`.
pub fn lower<'a>(
    kernel: &'a Kernel,
    extents: &[usize],
    shapes: &'a [&'a [usize]],
    g: &GemmForm,
    s: &SimtGemm,
) -> Result<Nest<'a>, String> {
    super::check_shapes(kernel, shapes)?;
    s.check(g)?;
    let biggest = shapes
        .iter()
        .map(|s| s.iter().product::<usize>())
        .max()
        .unwrap_or(0);
    let ity = if biggest < (1 << 30) {
        IntType::Int
    } else {
        IntType::LongLong
    };
    let fuse = s.fuses(g);
    let threads = s.threads();
    let stages = s.stages();
    let asynchronous = s.pipeline >= 2;
    let (pa, pb) = (s.plan(g, Side::A), s.plan(g, Side::B));
    let (pitch_a, pitch_b) = (s.bm + SHARED_PAD, s.bn + SHARED_PAD);
    let (stage_a, stage_b) = (s.bk * pitch_a, s.bk * pitch_b);
    let mut buffers = super::param_buffers(kernel, shapes);
    let mut add = |name: &str, scope: Scope, dims: Vec<usize>, align: Option<usize>| {
        buffers.push(Buffer {
            name: name.into(),
            scope,
            dtype: COMPUTE,
            dims,
            param: None,
            align,
        });
        BufId(buffers.len() - 1)
    };
    let smem = add(
        "smem",
        Scope::Shared,
        vec![stages * (stage_a + stage_b)],
        Some(16),
    );
    let acc = add("acc", Scope::Register, vec![s.tm * s.tn], None);
    let staging = |p: &OperandPlan| (p.width == 4).then_some(16);
    let (ra, rb) = if asynchronous {
        (None, None)
    } else {
        (
            Some(add(
                "r_a",
                Scope::Register,
                vec![pa.slots * pa.width],
                staging(&pa),
            )),
            Some(add(
                "r_b",
                Scope::Register,
                vec![pb.slots * pb.width],
                staging(&pb),
            )),
        )
    };
    let fa = add("f_a", Scope::Register, vec![s.tm], None);
    let fb = add("f_b", Scope::Register, vec![s.tn], None);
    let a = Op {
        side: Side::A,
        tag: 'a',
        access: &g.a,
        axes: &g.m_axes,
        extent: g.m,
        tile: s.bm,
        plan: pa,
        global: BufId(g.a.tensor),
        dtype: g.a_dtype,
        regs: ra,
        base: 0,
        pitch: pitch_a,
    };
    let b = Op {
        side: Side::B,
        tag: 'b',
        access: &g.b,
        axes: &g.n_axes,
        extent: g.n,
        tile: s.bn,
        plan: pb,
        global: BufId(g.b.tensor),
        dtype: g.b_dtype,
        regs: rb,
        base: stages * stage_a,
        pitch: pitch_b,
    };
    let klen = g.k_len(fuse);
    let ktiles = s.k_tiles(g);
    let l = Simt {
        k: kernel,
        extents,
        shapes,
        g,
        s,
        ity,
        k_axes: g.k_axes(fuse),
        outer: g.outer(fuse),
        shift: ktiles * s.bk - klen,
        threads,
        smem,
    };
    let mut globals = Vec::new();
    let (tiles_m, tiles_n) = s.tile_grid(g);
    let tiles = tiles_m * tiles_n;
    let out_tiles = s.output_tiles(g);
    let (_, gn) = s.thread_grid();
    let warp_n = 32 / s.warp_m;
    let warps_n = gn / warp_n;
    let mut body = vec![let_int("td_tid", IntType::Int, "threadIdx.x".into())];

    // The block's split, output tile (rasterized) and batch element.
    body.push(Stmt::Comment(format!(
        "this block's {}tile of the fused output ({}) and batch element",
        if s.split > 1 { "split of a " } else { "" },
        if s.raster > 1 {
            format!("in groups of {} tile rows", s.raster)
        } else {
            "row by row".to_string()
        }
    )));
    let mut defs: Vec<(String, Value)> = Vec::new();
    if s.split > 1 {
        defs.push((
            "td_z".into(),
            Value::Code(format!("(int)(blockIdx.x / {out_tiles})")),
        ));
        defs.push((
            "td_o".into(),
            Value::Code(format!("(int)(blockIdx.x % {out_tiles})")),
        ));
    } else {
        defs.push(("td_o".into(), Value::Code("(int)blockIdx.x".into())));
    }
    defs.push(("td_batch".into(), Value::Code(format!("td_o / {tiles}"))));
    defs.push(("td_t".into(), Value::Code(format!("td_o % {tiles}"))));
    body.push(Stmt::Let {
        ty: Ty::Int(IntType::Int),
        konst: true,
        defs,
    });
    let rg = s.raster;
    if rg <= 1 {
        body.push(Stmt::Let {
            ty: Ty::Int(IntType::Int),
            konst: true,
            defs: vec![
                (
                    "b_m".into(),
                    Value::Code(format!("td_t / {tiles_n} * {}", s.bm)),
                ),
                (
                    "b_n".into(),
                    Value::Code(format!("td_t % {tiles_n} * {}", s.bn)),
                ),
            ],
        });
    } else {
        // Groups of `rg` tile rows, walked column by column (the last group may be short).
        let size = if tiles_m.is_multiple_of(rg) {
            rg.to_string()
        } else {
            format!("({tiles_m} - td_g * {rg} < {rg} ? {tiles_m} - td_g * {rg} : {rg})")
        };
        body.push(Stmt::Let {
            ty: Ty::Int(IntType::Int),
            konst: true,
            defs: vec![
                (
                    "td_g".into(),
                    Value::Code(format!("td_t / {}", rg * tiles_n)),
                ),
                (
                    "td_w".into(),
                    Value::Code(format!("td_t % {}", rg * tiles_n)),
                ),
            ],
        });
        body.push(Stmt::Let {
            ty: Ty::Int(IntType::Int),
            konst: true,
            defs: vec![("td_gs".into(), Value::Code(size))],
        });
        body.push(Stmt::Let {
            ty: Ty::Int(IntType::Int),
            konst: true,
            defs: vec![
                (
                    "b_m".into(),
                    Value::Code(format!("(td_g * {rg} + td_w % td_gs) * {}", s.bm)),
                ),
                (
                    "b_n".into(),
                    Value::Code(format!("td_w / td_gs * {}", s.bn)),
                ),
            ],
        });
    }
    body.extend(decode(kernel, extents, &g.batch_axes, "td_batch", "i"));
    body.push(Stmt::Comment(format!(
        "this thread's {} x {} register tile: warps of {} x {warp_n} threads",
        s.tm, s.tn, s.warp_m
    )));
    body.push(Stmt::Let {
        ty: Ty::Int(IntType::Int),
        konst: true,
        defs: vec![
            (
                "t_m".into(),
                Value::Code(format!(
                    "(td_tid / 32 / {warps_n}) * {} + td_tid % 32 / {warp_n}",
                    s.warp_m
                )),
            ),
            (
                "t_n".into(),
                Value::Code(format!(
                    "(td_tid / 32 % {warps_n}) * {warp_n} + td_tid % {warp_n}"
                )),
            ),
        ],
    });
    for buf in [Some(smem), Some(acc), ra, rb, Some(fa), Some(fb)]
        .into_iter()
        .flatten()
    {
        body.push(Stmt::Alloc { buf, init: None });
    }
    if asynchronous {
        body.push(Stmt::Let {
            ty: Ty::Int(IntType::Unsigned),
            konst: true,
            defs: vec![("td_sb".into(), Value::SharedAddress(smem))],
        });
    }
    body.push(loop_(
        "n",
        s.tm * s.tn,
        LoopKind::Unrolled(s.tm * s.tn),
        None,
        vec![Stmt::Assign {
            dst: Target::Elem {
                buf: acc,
                index: vec!["n".into()],
            },
            op: AssignOp::Set,
            value: Value::Float(0.0),
        }],
    ));

    // The fused reduction's tables: per position of the tiles, the offset of its point and,
    // where points are checked, its window bits (-1 before the first point).
    let tabled: Vec<&Op> = [&a, &b].into_iter().filter(|o| o.plan.table).collect();
    if !tabled.is_empty() {
        let positions = ktiles * s.bk;
        body.push(Stmt::Comment(format!(
            "the fused reduction's table{}: offset and window bits of each of its {} positions",
            if tabled.len() > 1 { "s" } else { "" },
            positions
        )));
        let mut fill = vec![let_int(
            "td_k",
            IntType::Int,
            format!("td_p < {} ? 0 : td_p - {}", l.shift, l.shift),
        )];
        fill.extend(decode(kernel, extents, &l.k_axes, "td_k", "td_k"));
        for o in &tabled {
            globals.push(ModuleArray {
                name: format!("td_tab_{}", o.tag),
                space: MemSpace::Shared,
                elem: ElemKind::I32,
                len: l.table_stride(o) * positions,
                align: 16,
            });
            let st = strides(shapes[o.access.tensor]);
            let kname = |v: usize| format!("td_k{}", &index_name(kernel, v)[1..]);
            let mut off = Vec::new();
            for (d, map) in o.access.dims.iter().enumerate() {
                let part: Vec<String> = map
                    .terms
                    .iter()
                    .filter(|t| l.k_axes.contains(&t.0))
                    .map(|&(v, c)| scaled(c, &kname(v)))
                    .collect();
                let part = join_sum(part);
                if part != "0" && st[d] != 0 {
                    off.push(scaled(st[d] as i64, &format!("({part})")));
                }
            }
            let mut bits = vec!["0x80000000u".to_string()];
            let mut field = 0usize;
            for (d, lo, span) in l.fields(o) {
                let part: Vec<String> = o.access.dims[d]
                    .terms
                    .iter()
                    .filter(|t| l.k_axes.contains(&t.0))
                    .map(|&(v, c)| scaled(c, &kname(v)))
                    .collect();
                bits.push(format!(
                    "(1u << ({} + {}))",
                    join_sum(part),
                    field as i64 - lo
                ));
                field += span;
            }
            let tab = format!("td_tab_{}", o.tag);
            let stride = l.table_stride(o);
            fill.push(Stmt::Assign {
                dst: Target::Var(format!("{tab}[{stride} * td_p]")),
                op: AssignOp::Set,
                value: Value::Code(format!("td_p < {} ? 0 : {}", l.shift, join_sum(off))),
            });
            if stride == 1 {
                continue;
            }
            fill.push(Stmt::Assign {
                dst: Target::Var(format!("{tab}[2 * td_p + 1]")),
                op: AssignOp::Set,
                value: Value::Code(format!(
                    "td_p < {} ? -1 : (int)({})",
                    l.shift,
                    bits.join(" | ")
                )),
            });
        }
        body.push(Stmt::Loop(Loop {
            var: "td_p".into(),
            ty: IntType::Int,
            start: "td_tid".into(),
            end: positions.to_string(),
            step: Step::Add(threads),
            trip: positions.div_ceil(threads),
            kind: LoopKind::ThreadStrided,
            index: None,
            layout: Layout::Braced,
            body: fill,
        }));
        body.push(Stmt::Barrier);
    }

    body.push(Stmt::Comment(
        "per load slot: its row of the fused axes, coordinates, offset and place in the tile"
            .into(),
    ));
    for o in [&a, &b] {
        body.extend(l.setup(o));
        if asynchronous {
            for j in 0..l.setups(o) {
                let p = format!("{}{j}", o.tag);
                body.push(let_int(
                    &format!("{p}_sd"),
                    IntType::Unsigned,
                    format!("td_sb + 4u * (unsigned){p}_s"),
                ));
            }
        }
    }

    // The k-tiles of this block: all, or its split's range.
    let (t0, t1) = if s.split > 1 && !s.splits_outer(g) {
        let split = s.split;
        body.push(Stmt::Let {
            ty: Ty::Int(IntType::Int),
            konst: true,
            defs: vec![
                (
                    "td_t0".into(),
                    Value::Code(format!("td_z * {ktiles} / {split}")),
                ),
                (
                    "td_t1".into(),
                    Value::Code(format!("(td_z + 1) * {ktiles} / {split}")),
                ),
            ],
        });
        ("td_t0".to_string(), "td_t1".to_string())
    } else {
        ("0".to_string(), ktiles.to_string())
    };
    let trip = s.tiles_per_split(g);

    // The compute of one tile from the stages `td_ra` / `td_rb` point at.
    let piece_m = s.bm / (s.tm / 4);
    let piece_n = s.bn / (s.tn / 4);
    let mut frag = Vec::new();
    for w in 0..s.tm {
        frag.push(Stmt::Assign {
            dst: Target::Elem {
                buf: fa,
                index: vec![w.to_string()],
            },
            op: AssignOp::Set,
            value: Value::Code(format!(
                "td_ra[td_kk * {pitch_a} + {}]",
                (w / 4) * piece_m + w % 4
            )),
        });
    }
    for w in 0..s.tn {
        frag.push(Stmt::Assign {
            dst: Target::Elem {
                buf: fb,
                index: vec![w.to_string()],
            },
            op: AssignOp::Set,
            value: Value::Code(format!(
                "td_rb[td_kk * {pitch_b} + {}]",
                (w / 4) * piece_n + w % 4
            )),
        });
    }
    let compute = Stmt::Compute {
        acc: Target::Elem {
            buf: acc,
            index: vec![format!("td_x * {} + td_y", s.tn)],
        },
        reduce: true,
        value: Value::Kernel {
            expr: kernel.body.clone(),
            binding: Binding {
                index: vec!["0".into(); kernel.indices.len()],
                reads: vec![
                    (g.a.clone(), "f_a[td_x]".into()),
                    (g.b.clone(), "f_b[td_y]".into()),
                ],
            },
        },
    };
    frag.push(loop_(
        "td_x",
        s.tm,
        LoopKind::Unrolled(s.tm),
        None,
        vec![loop_(
            "td_y",
            s.tn,
            LoopKind::Unrolled(s.tn),
            None,
            vec![compute],
        )],
    ));
    let inner = if ktiles == 1 {
        // The whole reduction is one (partial) tile: a rolled loop over its points only
        // (the zero-filled ones before them add nothing), rather than a second copy of the
        // tile's code that computes zeros.
        Stmt::Loop(Loop {
            var: "td_kk".into(),
            ty: IntType::Int,
            start: l.shift.to_string(),
            end: s.bk.to_string(),
            step: Step::Inc,
            trip: s.bk - l.shift,
            kind: LoopKind::InOrder,
            index: l.k_axes.last().copied(),
            layout: Layout::Braced,
            body: frag,
        })
    } else {
        loop_(
            "td_kk",
            s.bk,
            LoopKind::Unrolled(s.bk),
            l.k_axes.last().copied(),
            frag,
        )
    };
    // Pointers, so every fragment read is the pointer plus a constant: ptxas folds that into
    // the `LDS` (with an `int` index it recomputed the address of every read of `b`, 80
    // instructions of a 1200-instruction hot loop).
    let reads = |stage: &str| {
        let ptr = |name: &str, at: String| Stmt::Let {
            ty: Ty::Ptr(COMPUTE),
            konst: true,
            defs: vec![(name.into(), Value::Code(format!("smem + {at}")))],
        };
        [
            ptr("td_ra", format!("{stage} * {stage_a} + t_m * 4")),
            ptr(
                "td_rb",
                format!("{} + {stage} * {stage_b} + t_n * 4", b.base),
            ),
        ]
    };
    let hot_kind = if s.unroll > 1 {
        LoopKind::Unrolled(s.unroll)
    } else {
        LoopKind::InOrder
    };
    let hot = |body: Vec<Stmt>| {
        Stmt::Loop(Loop {
            var: "td_kt".into(),
            ty: IntType::Int,
            start: t0.clone(),
            end: t1.clone(),
            step: Step::Inc,
            trip,
            kind: hot_kind,
            index: l.k_axes.last().copied(),
            layout: Layout::Braced,
            body,
        })
    };

    let mut pass = Vec::new();
    for o in [&a, &b] {
        pass.extend(l.per_outer(o));
    }
    if !asynchronous {
        // Register prefetch: the first tile, then per tile the next one into registers.
        pass.push(Stmt::Comment("the first tile".into()));
        pass.extend(l.load_regs(&a, &t0, true));
        pass.extend(l.load_regs(&b, &t0, true));
        pass.extend(l.stash(&a, "0"));
        pass.extend(l.stash(&b, "0"));
        pass.push(Stmt::Barrier);
        let mut step = vec![let_int(
            "td_cur",
            IntType::Int,
            format!("(td_kt - {t0}) & 1"),
        )];
        step.extend(reads("td_cur"));
        let mut next = l.load_regs(&a, "td_kt + 1", false);
        next.extend(l.load_regs(&b, "td_kt + 1", false));
        step.push(Stmt::Comment(
            "the next tile: global -> registers, in flight while this one is computed".into(),
        ));
        step.push(if_(format!("td_kt + 1 < {t1}"), next));
        step.push(inner);
        let mut put = l.stash(&a, &format!("(td_cur ^ 1) * {stage_a}"));
        put.extend(l.stash(&b, &format!("(td_cur ^ 1) * {stage_b}")));
        step.push(if_(format!("td_kt + 1 < {t1}"), put));
        step.push(Stmt::Barrier);
        pass.push(hot(step));
    } else {
        // cp.async: stages-1 tiles in flight before the loop, one more issued per tile.
        pass.push(Stmt::Comment(format!(
            "the first {} tile{} in flight",
            stages - 1,
            if stages > 2 { "s" } else { "" }
        )));
        for st in 0..stages - 1 {
            let t = if st == 0 {
                t0.clone()
            } else {
                format!("{t0} + {st}")
            };
            let mut issue = l.copy_async(&a, &t, &format!("{}", st * stage_a), st == 0);
            issue.extend(l.copy_async(&b, &t, &format!("{}", st * stage_b), st == 0));
            if st == 0 && s.split <= 1 {
                pass.extend(issue);
            } else {
                pass.push(if_(format!("{t} < {t1}"), issue));
            }
            pass.push(Stmt::AsyncCommit);
        }
        pass.push(var_int("td_rd", "0".into()));
        pass.push(var_int("td_wr", (stages - 1).to_string()));
        let advance = |v: &str| {
            if stages.is_power_of_two() {
                format!("({v} + 1) & {}", stages - 1)
            } else {
                format!("{v} + 1 == {stages} ? 0 : {v} + 1")
            }
        };
        let mut step = vec![Stmt::AsyncWait(stages - 2), Stmt::Barrier];
        step.push(Stmt::Comment(format!(
            "tile kt+{}: global -> shared stage td_wr, in flight while this one is computed",
            stages - 1
        )));
        let nt = format!("td_kt + {}", stages - 1);
        let mut issue = l.copy_async(&a, &nt, &format!("td_wr * {stage_a}"), false);
        issue.extend(l.copy_async(&b, &nt, &format!("td_wr * {stage_b}"), false));
        step.push(if_(format!("{nt} < {t1}"), issue));
        step.push(Stmt::AsyncCommit);
        step.extend(reads("td_rd"));
        step.push(inner);
        step.push(set_var("td_rd", advance("td_rd")));
        step.push(set_var("td_wr", advance("td_wr")));
        pass.push(hot(step));
        pass.push(Stmt::AsyncWait(0));
        if !l.outer.is_empty() {
            // The next outer iteration overwrites the stages.
            pass.push(Stmt::Barrier);
        }
    }
    let mut reduction = pass;
    // Outer reduction loops stay loops: unrolled, their copies of the pipeline would only
    // cost registers and instruction cache.
    if s.splits_outer(g) {
        // This split's range of the outer iterations, one loop decoding them.
        let (outer, split) = (g.outer, s.split);
        body.push(Stmt::Let {
            ty: Ty::Int(IntType::Int),
            konst: true,
            defs: vec![
                (
                    "td_o0".into(),
                    Value::Code(format!("td_z * {outer} / {split}")),
                ),
                (
                    "td_o1".into(),
                    Value::Code(format!("(td_z + 1) * {outer} / {split}")),
                ),
            ],
        });
        let mut inner = decode(kernel, extents, &l.outer, "td_oi", "i");
        inner.extend(reduction);
        reduction = vec![Stmt::Loop(Loop {
            var: "td_oi".into(),
            ty: IntType::Int,
            start: "td_o0".into(),
            end: "td_o1".into(),
            step: Step::Inc,
            trip: s.outer_per_split(g),
            kind: LoopKind::InOrder,
            index: l.outer.first().copied(),
            layout: Layout::Braced,
            body: inner,
        })];
    } else {
        for &r in l.outer.iter().rev() {
            reduction = vec![loop_(
                &l.var(r),
                extents[r].max(1),
                LoopKind::InOrder,
                Some(r),
                reduction,
            )];
        }
    }
    body.extend(reduction);

    // Epilogue and store.
    let mut row = vec![let_int(
        "td_m",
        IntType::Int,
        format!("b_m + td_x / 4 * {piece_m} + t_m * 4 + td_x % 4"),
    )];
    row.extend(decode(kernel, extents, &g.m_axes, "td_m", "i"));
    let mut col = vec![let_int(
        "td_n",
        IntType::Int,
        format!("b_n + td_y / 4 * {piece_n} + t_n * 4 + td_y % 4"),
    )];
    col.extend(decode(kernel, extents, &g.n_axes, "td_n", "i"));
    let out_shape = shapes[kernel.output];
    let coords: Vec<Coord> = kernel
        .spatial()
        .iter()
        .map(|&sp| Coord {
            expr: format!("({})({})", ity.spelling(), l.var(sp)),
            simple: false,
            lo: 0,
            hi: 0,
        })
        .collect();
    let index: Vec<String> = (0..kernel.indices.len())
        .map(|i| {
            if kernel.spatial().contains(&i) {
                l.var(i)
            } else {
                "0".into()
            }
        })
        .collect();
    col.push(if_(
        format!("td_m < {} && td_n < {}", g.m, g.n),
        vec![Stmt::Store {
            acc: Target::Elem {
                buf: acc,
                index: vec![format!("td_x * {} + td_y", s.tn)],
            },
            epilogue: kernel.epilogue.clone(),
            binding: Binding {
                index,
                reads: Vec::new(),
            },
            dst: Target::Elem {
                buf: BufId(kernel.output),
                index: vec![offset_expr(out_shape, &coords)],
            },
        }],
    ));
    row.push(loop_("td_y", s.tn, LoopKind::Unrolled(s.tn), None, col));
    let store = loop_("td_x", s.tm, LoopKind::Unrolled(s.tm), None, row);
    let store_comment = Stmt::Comment(
        if kernel.epilogue.is_empty() {
            "one guarded store per output element"
        } else {
            "fused epilogue, one guarded store per output element"
        }
        .into(),
    );
    if s.split > 1 {
        body.extend(split_epilogue(s, out_tiles, acc, &mut globals));
        body.push(if_(
            "td_last".into(),
            vec![store_comment, store, reset_counter()],
        ));
    } else {
        body.push(store_comment);
        body.push(store);
    }

    Ok(Nest {
        kernel,
        shapes,
        domain: extents.iter().map(|&e| e.max(1)).collect(),
        buffers,
        helpers: Vec::new(),
        entry: Func {
            name: super::gpu::ENTRY.into(),
            params: super::pointer_params(kernel, None),
            body,
        },
        launch: Some(Launch {
            grid: [s.blocks(g), 1, 1],
            block: [threads, 1, 1],
        }),
        globals,
        prepack: None,
    })
}

/// Split-K: the partial tile to the workspace, the arrival count, and — in the last block
/// to arrive at this output tile (`td_last`) — the sum of every split's partial (its own
/// too, read back) in split order into the accumulators: the same bits whichever block
/// arrives last.
fn split_epilogue(
    s: &SimtGemm,
    out_tiles: usize,
    acc: BufId,
    globals: &mut Vec<ModuleArray>,
) -> Vec<Stmt> {
    let t = s.threads();
    let n = s.tm * s.tn;
    globals.push(ModuleArray {
        name: "td_ws".into(),
        space: MemSpace::Device,
        elem: ElemKind::F32,
        len: s.split * out_tiles * n * t,
        align: 16,
    });
    globals.push(ModuleArray {
        name: "td_cnt".into(),
        space: MemSpace::Device,
        elem: ElemKind::I32,
        len: out_tiles,
        align: 4,
    });
    let at = |z: &str, e: &str| format!("(({z} * {out_tiles} + td_o) * {n} + {e}) * {t} + td_tid");
    let mut out = vec![Stmt::Comment(format!(
        "split-K: this split's partial tile to the workspace; the last of the {} splits of \
         the tile to arrive sums them in split order",
        s.split
    ))];
    out.push(loop_(
        "n",
        n,
        LoopKind::Unrolled(n),
        None,
        vec![Stmt::Assign {
            dst: Target::Var(format!("td_ws[{}]", at("td_z", "n"))),
            op: AssignOp::Set,
            value: Value::Read(Target::Elem {
                buf: acc,
                index: vec!["n".into()],
            }),
        }],
    ));
    out.push(Stmt::Call {
        func: "td_fence_acq_rel".into(),
        args: Vec::new(),
    });
    out.push(let_int(
        "td_last",
        IntType::Int,
        format!(
            "__syncthreads_or(td_tid == 0 && atomicAdd(&td_cnt[td_o], 1) == {})",
            s.split - 1
        ),
    ));
    // The sum, `chunk` accumulators at a time over groups of `group` splits (a rolled loop):
    // a group's partials are all loaded before any is added, in split order, so the tail
    // (a chain of trips to L2 after the whole main loop) takes one trip per
    // `chunk · group` partials, while the rolled loop keeps the loads in flight within the
    // registers the main loop already holds.
    let (chunk, group) = crate::codegen::split_k::sum_shape(n, s.split);
    let add = Stmt::Assign {
        dst: Target::Elem {
            buf: acc,
            index: vec![format!("td_c * {chunk} + n")],
        },
        op: AssignOp::Add,
        // Read past L1 (which is not coherent across SMs).
        value: Value::Code(format!(
            "__ldcg(&td_ws[{}])",
            at(
                &format!("(td_zg * {group} + td_zz)"),
                &format!("td_c * {chunk} + n")
            )
        )),
    };
    let sum = loop_(
        "td_c",
        n / chunk,
        LoopKind::Unrolled(n / chunk),
        None,
        vec![loop_(
            "td_zg",
            s.split / group,
            LoopKind::InOrder,
            None,
            vec![loop_(
                "td_zz",
                group,
                LoopKind::Unrolled(group),
                None,
                vec![loop_(
                    "n",
                    chunk,
                    LoopKind::Unrolled(chunk),
                    None,
                    vec![add],
                )],
            )],
        )],
    );
    let zero = loop_(
        "n",
        n,
        LoopKind::Unrolled(n),
        None,
        vec![Stmt::Assign {
            dst: Target::Elem {
                buf: acc,
                index: vec!["n".into()],
            },
            op: AssignOp::Set,
            value: Value::Float(0.0),
        }],
    );
    out.push(if_(
        "td_last".into(),
        vec![
            Stmt::Call {
                func: "td_fence_acq_rel".into(),
                args: Vec::new(),
            },
            zero,
            sum,
        ],
    ));
    out
}

/// The last arrival's reset of its tile's counter, for the next launch.
fn reset_counter() -> Stmt {
    if_(
        "td_tid == 0".into(),
        vec![Stmt::Assign {
            dst: Target::Var("td_cnt[td_o]".into()),
            op: AssignOp::Set,
            value: Value::Code("0".into()),
        }],
    )
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::ir::parse_text;
    use crate::template::gpu_simt::{bank_conflicts, gemm_form};

    /// Evaluates the integer C text the lowering prints for a thread's place (`+ - * / %`,
    /// parentheses, literals, `td_tid`), as C does (left to right, `* / %` before `+ -`).
    fn eval(text: &str, tid: i64) -> i64 {
        fn term(t: &[String], i: &mut usize, tid: i64) -> i64 {
            let mut v = atom(t, i, tid);
            while *i < t.len() && ["*", "/", "%"].contains(&t[*i].as_str()) {
                let op = t[*i].clone();
                *i += 1;
                let r = atom(t, i, tid);
                v = match op.as_str() {
                    "*" => v * r,
                    "/" => v / r,
                    _ => v % r,
                };
            }
            v
        }
        fn expr(t: &[String], i: &mut usize, tid: i64) -> i64 {
            let mut v = term(t, i, tid);
            while *i < t.len() && ["+", "-"].contains(&t[*i].as_str()) {
                let op = t[*i].clone();
                *i += 1;
                let r = term(t, i, tid);
                v = if op == "+" { v + r } else { v - r };
            }
            v
        }
        fn atom(t: &[String], i: &mut usize, tid: i64) -> i64 {
            let tok = t[*i].clone();
            *i += 1;
            match tok.as_str() {
                "(" => {
                    let v = expr(t, i, tid);
                    *i += 1;
                    v
                }
                "td_tid" => tid,
                n => n.parse().unwrap(),
            }
        }
        let spaced = text.replace('(', " ( ").replace(')', " ) ");
        let toks: Vec<String> = spaced.split_whitespace().map(String::from).collect();
        expr(&toks, &mut 0, tid)
    }

    /// The word addresses (in one shared stage) of one warp's stores of each slot element,
    /// from the lowering's own printed place of each thread (`rows`, `<tag>_kk`, `slots`).
    fn store_words(
        src: &str,
        extents: &[usize],
        s: &SimtGemm,
        side: Side,
        warp: usize,
    ) -> Vec<Vec<usize>> {
        let k = parse_text("k", src, None).unwrap();
        let g = gemm_form(&k, extents).unwrap();
        let shapes: Vec<Vec<usize>> = k
            .params
            .iter()
            .enumerate()
            .map(|(p, _)| {
                let acc = k.accesses().into_iter().find(|a| a.tensor == p);
                match acc {
                    Some(a) => a
                        .dims
                        .iter()
                        .map(|d| extents[d.as_var().unwrap()])
                        .collect(),
                    None => k.spatial().iter().map(|&i| extents[i]).collect(),
                }
            })
            .collect();
        let shape_refs: Vec<&[usize]> = shapes.iter().map(Vec::as_slice).collect();
        let l = Simt {
            k: &k,
            extents,
            shapes: &shape_refs,
            g: &g,
            s,
            ity: IntType::Int,
            k_axes: g.k_axes(false),
            outer: g.outer(false),
            shift: 0,
            threads: s.threads(),
            smem: BufId(0),
        };
        let plan = s.plan(&g, side);
        let tile = if side == Side::A { s.bm } else { s.bn };
        let o = Op {
            side,
            tag: 'a',
            access: g.access(side),
            axes: g.axes(side),
            extent: g.extent(side),
            tile,
            plan,
            global: BufId(0),
            dtype: DType::F32,
            regs: None,
            base: 0,
            pitch: tile + SHARED_PAD,
        };
        let rows = l.rows(&o);
        let kk0 = l.kk0(&o);
        let per = if plan.k_fast { plan.width } else { 1 };
        let mut out = Vec::new();
        for slot in l.slots(&o) {
            for e in 0..per {
                out.push(
                    (0..32)
                        .map(|lane| {
                            let tid = (warp * 32 + lane) as i64;
                            let row = eval(&rows[slot.setup], tid) as usize;
                            let kk = eval(&kk0, tid) as usize + slot.kk;
                            let (kk, row) = if plan.k_fast {
                                (kk + e, row)
                            } else {
                                (kk, row + e)
                            };
                            kk * o.pitch + row
                        })
                        .collect(),
                );
            }
        }
        out
    }

    #[test]
    fn the_copies_into_shared_tiles_are_free_of_bank_conflicts() {
        for (src, extents) in [
            ("c[[i, j]] += a[[i, k]] * b[[k, j]]", [512, 512, 512]),
            ("c[[i, j]] += a[[i, k]] * b[[k, j]]", [509, 509, 509]),
            ("c[[i, j]] += a[[k, i]] * b[[j, k]]", [512, 512, 512]),
        ] {
            for (bm, bn, bk, vector) in [
                (128, 128, 8, 4),
                (128, 64, 16, 4),
                (64, 64, 32, 1),
                (128, 128, 16, 1),
                (64, 128, 8, 4),
            ] {
                let mut s = SimtGemm::tiles(bm, bn, bk, 8, 8, 4);
                s.vector = vector;
                s.pipeline = 3;
                let k = parse_text("k", src, None).unwrap();
                let g = gemm_form(&k, &extents).unwrap();
                if s.check(&g).is_err() {
                    continue;
                }
                for side in [Side::A, Side::B] {
                    let plan = s.plan(&g, side);
                    let width = if plan.k_fast { 1 } else { plan.width };
                    for warp in 0..s.threads() / 32 {
                        for words in store_words(src, &extents, &s, side, warp) {
                            assert_eq!(
                                bank_conflicts(&words, width),
                                0,
                                "{src} {extents:?} {s:?} {side:?} {plan:?} warp {warp}: {words:?}"
                            );
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn the_compute_loop_reads_shared_tiles_without_bank_conflicts() {
        // A warp's float4 reads of its A and B fragments at one k: lanes differ in t_m
        // (A) or t_n (B), 4 floats apart, or read the same float4 (a broadcast).
        for (bm, bn, warp_m) in [(128, 128, 4), (64, 64, 4), (128, 64, 8), (64, 128, 2)] {
            let s = SimtGemm::tiles(bm, bn, 8, 8, 8, warp_m);
            let (_, gn) = s.thread_grid();
            let warp_n = 32 / warp_m;
            let warps_n = gn / warp_n;
            for warp in 0..s.threads() / 32 {
                let lanes = || (0..32).map(|l| warp * 32 + l);
                let t_m = |tid: usize| (tid / 32 / warps_n) * warp_m + tid % 32 / warp_n;
                let t_n = |tid: usize| (tid / 32 % warps_n) * warp_n + tid % warp_n;
                let a: Vec<usize> = lanes()
                    .map(|t| 3 * (bm + SHARED_PAD) + t_m(t) * 4)
                    .collect();
                let b: Vec<usize> = lanes()
                    .map(|t| 3 * (bn + SHARED_PAD) + t_n(t) * 4)
                    .collect();
                assert_eq!(bank_conflicts(&a, 4), 0, "{bm}x{bn} warp_m {warp_m}");
                assert_eq!(bank_conflicts(&b, 4), 0, "{bm}x{bn} warp_m {warp_m}");
            }
        }
    }
}
