//! Lowers a [`SimtGemm`] schedule of a kernel in [`GemmForm`] to a [`Nest`] (see
//! [`crate::template::gpu_simt`] for the structure): one block per `bm × bn` tile of the
//! fused output (and batch element), per-thread load slots whose addresses and padding
//! checks are computed before the hot loop, a register-prefetched double-buffered k-tile
//! loop with one barrier per tile, a fully unrolled `tm × tn` register tile, and a guarded
//! store with the epilogue.
//!
//! ```
//! use tensor_dsl::{ir::parse_text, lower, template::gpu_simt};
//! let k = parse_text("mm", "c[[i,j]] += a[[i,k]] * b[[k,j]]", None).unwrap();
//! let shapes: [&[usize]; 3] = [&[256, 64], &[64, 128], &[256, 128]];
//! let g = gpu_simt::gemm_form(&k, &[256, 128, 64]).unwrap();
//! let s = gpu_simt::SimtGemm { bm: 64, bn: 64, bk: 8, tm: 8, tn: 8, warp_m: 4, unroll: 1 };
//! let nest = lower::gpu_simt::lower(&k, &[256, 128, 64], &shapes, &g, &s).unwrap();
//! assert_eq!(nest.launch.unwrap().block, [64, 1, 1]);
//! assert_eq!(nest.shared_bytes(), 2 * 8 * (68 + 68) * 4);
//! ```

use super::{
    Binding, BufId, Buffer, Func, IntType, Launch, Layout, Loop, LoopKind, Nest, Scope, Step, Stmt,
    Target, Ty, Value, COMPUTE,
};
use crate::codegen::{index_name, offset_expr, Coord};
use crate::ir::{Access, Kernel};
use crate::template::gpu_simt::{GemmForm, SimtGemm, SHARED_PAD};

/// Row-major strides of a shape.
fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1usize; shape.len()];
    for d in (0..shape.len().saturating_sub(1)).rev() {
        s[d] = s[d + 1].saturating_mul(shape[d + 1].max(1));
    }
    s
}

fn join_sum(terms: Vec<String>) -> String {
    let t: Vec<String> = terms.into_iter().filter(|t| !t.is_empty()).collect();
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

/// One operand (`a` or `b`) of the GEMM: how its per-thread load slots address it.
struct Operand<'k> {
    /// `a` or `b`.
    tag: char,
    access: &'k Access,
    /// Its fused output axes (`m` or `n`).
    axes: &'k [usize],
    /// Fused extent along them.
    extent: usize,
    /// Block tile along them.
    tile: usize,
    /// Load slots per thread.
    slots: usize,
    /// Whether the tiled reduction index is its fastest-varying dimension (then threads
    /// walk `k` first, else the fused axes first).
    k_fast: bool,
    shared: BufId,
    regs: BufId,
    global: BufId,
}

struct Simt<'a> {
    k: &'a Kernel,
    extents: &'a [usize],
    shapes: &'a [&'a [usize]],
    g: &'a GemmForm,
    s: &'a SimtGemm,
    ity: IntType,
}

impl Simt<'_> {
    fn var(&self, i: usize) -> String {
        index_name(self.k, i)
    }

    /// Rows (or k offsets) between the load rounds of one thread: a thread loads the same
    /// row every round when the fused axes are the fastest (`T % tile == 0`), else the same
    /// `k` (`T % bk == 0`, the schedule's check guarantees both).
    fn round_step(&self, o: &Operand) -> usize {
        let t = self.s.threads();
        if o.k_fast {
            t / self.s.bk
        } else {
            t / o.tile
        }
    }

    /// Slot 0's tile row and `k` offset, as C expressions of `td_tid`.
    fn slot0(&self, o: &Operand) -> (String, String) {
        if o.k_fast {
            (
                format!("td_tid / {}", self.s.bk),
                format!("td_tid % {}", self.s.bk),
            )
        } else {
            (
                format!("td_tid % {}", o.tile),
                format!("td_tid / {}", o.tile),
            )
        }
    }

    /// Offset per step of the tiled reduction index.
    fn k_stride(&self, o: &Operand) -> i64 {
        let st = strides(self.shapes[o.access.tensor]);
        o.access
            .dims
            .iter()
            .enumerate()
            .map(|(d, m)| {
                m.terms
                    .iter()
                    .filter(|t| t.0 == self.g.k_axis)
                    .map(|t| t.1 * st[d] as i64)
                    .sum::<i64>()
            })
            .sum()
    }

    /// The offset between consecutive load rounds when it is a constant (then only slot 0
    /// is set up, and round `i` reads at slot 0's offset plus `i` times it): always when a
    /// thread keeps its row; when it keeps its `k`, if the fused axes are one index read
    /// plainly, the tile divides its extent (no clamping) and no check involves it.
    fn linear(&self, o: &Operand) -> Option<i64> {
        let step = self.round_step(o) as i64;
        if !o.k_fast {
            return Some(step * self.k_stride(o));
        }
        let [ax] = o.axes else { return None };
        if !o.extent.is_multiple_of(o.tile) {
            return None;
        }
        let st = strides(self.shapes[o.access.tensor]);
        let mut delta = 0i64;
        for (d, m) in o.access.dims.iter().enumerate() {
            let c: i64 = m.terms.iter().filter(|t| t.0 == *ax).map(|t| t.1).sum();
            if c != 0 && self.needs_check(o.access, d) {
                return None;
            }
            delta += c * st[d] as i64;
        }
        Some(step * delta)
    }

    /// Load slots with their own set-up (1 when [`Simt::linear`]).
    fn setups(&self, o: &Operand) -> usize {
        if self.linear(o).is_some() {
            1
        } else {
            o.slots
        }
    }

    /// Whether dimension `d` of `acc` can leave the tensor (needs a check).
    fn needs_check(&self, acc: &Access, d: usize) -> bool {
        let (lo, hi) = acc.dims[d].range(self.extents);
        lo < 0 || hi >= self.shapes[acc.tensor][d] as i64
    }

    /// Statements before the outer reduction loops: per set-up slot, its row of the fused
    /// axes (clamped into the extent: rows past it only feed outputs never stored), the
    /// row's variables, the offset and checked coordinates they contribute; and the
    /// thread's place in the shared tile.
    fn slot_setup(&self, o: &Operand) -> Vec<Stmt> {
        let mut out = Vec::new();
        let shape = self.shapes[o.access.tensor];
        let st = strides(shape);
        let corner = if o.tag == 'a' { "b_m" } else { "b_n" };
        let ity = self.ity.spelling();
        let (row0, kk0) = self.slot0(o);
        let step = self.round_step(o);
        out.push(let_int(
            &format!("{}_s", o.tag),
            IntType::Int,
            format!("({kk0}) * {} + {row0}", o.tile + SHARED_PAD),
        ));
        for i in 0..self.setups(o) {
            let p = format!("{}{i}", o.tag);
            let (row, kk) = if o.k_fast {
                (format!("{row0} + {}", i * step), kk0.clone())
            } else {
                (row0.clone(), format!("{kk0} + {}", i * step))
            };
            out.push(let_int(
                &format!("{p}_r"),
                IntType::Int,
                format!(
                    "{corner} + {row} < {e} ? {corner} + {row} : {e}",
                    e = o.extent - 1
                ),
            ));
            out.push(let_int(&format!("{p}_kk"), IntType::Int, kk));
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
        }
        out
    }

    /// The checks of dimensions without the tiled index, for slot `p`, at the outer
    /// reduction loops' values.
    fn outer_checks(&self, o: &Operand, p: &str) -> Vec<String> {
        let shape = self.shapes[o.access.tensor];
        let mut conds = Vec::new();
        for (d, map) in o.access.dims.iter().enumerate() {
            let uses_k = map.terms.iter().any(|t| t.0 == self.g.k_axis);
            if !self.needs_check(o.access, d) || uses_k {
                continue;
            }
            let mut part = vec![format!("{p}_c{d}")];
            for &(v, c) in &map.terms {
                if self.g.outer_axes.contains(&v) {
                    part.push(scaled(c, &self.var(v)));
                }
            }
            conds.push(format!("(unsigned)({}) < {}u", join_sum(part), shape[d]));
        }
        conds
    }

    /// Statements at the top of the outer reduction loops' body: per set-up slot, its
    /// offset at `k = 0` and whether it reads inside the tensor.
    fn slot_outer(&self, o: &Operand) -> Vec<Stmt> {
        let mut out = Vec::new();
        let st = strides(self.shapes[o.access.tensor]);
        let kx = self.g.k_axis;
        let ity = self.ity.spelling();
        for i in 0..self.setups(o) {
            let p = format!("{}{i}", o.tag);
            let mut terms = vec![format!("{p}_m")];
            for (d, map) in o.access.dims.iter().enumerate() {
                let mut part = Vec::new();
                for &(v, c) in &map.terms {
                    if self.g.outer_axes.contains(&v) {
                        part.push(scaled(c, &self.var(v)));
                    }
                    if v == kx {
                        part.push(scaled(c, &format!("{p}_kk")));
                    }
                }
                let part = join_sum(part);
                if st[d] != 0 && part != "0" {
                    terms.push(scaled(st[d] as i64, &format!("({ity})({part})")));
                }
            }
            out.push(let_int(&format!("{p}_o"), self.ity, join_sum(terms)));
            let conds = self.outer_checks(o, &p);
            if !conds.is_empty() {
                out.push(Stmt::Let {
                    ty: Ty::Int(IntType::Int),
                    konst: true,
                    defs: vec![(format!("{p}_v"), Value::Code(conds.join(" && ")))],
                });
            }
        }
        out
    }

    /// Loads of the tile at reduction offset `k0` (C text) into the registers.
    /// `partial`: the tile is the last, partial one (reads past the reduction's extent
    /// are zero); full tiles have no such check.
    fn load(&self, o: &Operand, k0: &str, partial: bool) -> Vec<Stmt> {
        let shape = self.shapes[o.access.tensor];
        let kx = self.g.k_axis;
        let sk = self.k_stride(o);
        let linear = self.linear(o);
        let step = self.round_step(o);
        let ity = self.ity.spelling();
        (0..o.slots)
            .map(|i| {
                let p = format!("{}{}", o.tag, if linear.is_some() { 0 } else { i });
                let mut guard = Vec::new();
                if !self.outer_checks(o, &p).is_empty() {
                    guard.push(format!("{p}_v"));
                }
                // This round's k offset in the tile.
                let kk = if o.k_fast || linear.is_none() {
                    format!("{p}_kk")
                } else {
                    format!("{p}_kk + {}", i * step)
                };
                if partial {
                    guard.push(format!("{k0} + {kk} < {}", self.g.k));
                }
                for (d, map) in o.access.dims.iter().enumerate() {
                    let ck: i64 = map.terms.iter().filter(|t| t.0 == kx).map(|t| t.1).sum();
                    if ck != 0 && self.needs_check(o.access, d) {
                        let mut part =
                            vec![format!("{p}_c{d}"), scaled(ck, &format!("({k0} + {kk})"))];
                        for &(v, c) in &map.terms {
                            if self.g.outer_axes.contains(&v) {
                                part.push(scaled(c, &self.var(v)));
                            }
                        }
                        guard.push(format!("(unsigned)({}) < {}u", join_sum(part), shape[d]));
                    }
                }
                let mut src = vec![format!("{p}_o")];
                if sk != 0 && k0 != "0" {
                    src.push(scaled(sk, &format!("({ity})({k0})")));
                }
                if let Some(delta) = linear {
                    if i > 0 && delta != 0 {
                        src.push((delta * i as i64).to_string());
                    }
                }
                Stmt::Move {
                    dst: (o.regs, i.to_string()),
                    src: (o.global, join_sum(src)),
                    width: 1,
                    guard,
                }
            })
            .collect()
    }

    /// Stores of the registers into shared buffer `buf` (C text, 0 or 1).
    fn stash(&self, o: &Operand, buf: &str) -> Vec<Stmt> {
        let row = o.tile + SHARED_PAD;
        let size = self.s.bk * row;
        let step = self.round_step(o);
        // Rounds advance the row (k_fast) or k.
        let ds = if o.k_fast { step } else { step * row };
        (0..o.slots)
            .map(|i| Stmt::Assign {
                dst: Target::Elem {
                    buf: o.shared,
                    index: vec![format!("{buf} * {size} + {}_s + {}", o.tag, i * ds)],
                },
                op: super::AssignOp::Set,
                value: Value::Read(Target::Elem {
                    buf: o.regs,
                    index: vec![i.to_string()],
                }),
            })
            .collect()
    }
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
    let (la, lb) = s.loads();
    let sa = add(
        "s_a",
        Scope::Shared,
        vec![2 * s.bk * (s.bm + SHARED_PAD)],
        Some(16),
    );
    let sb = add(
        "s_b",
        Scope::Shared,
        vec![2 * s.bk * (s.bn + SHARED_PAD)],
        Some(16),
    );
    let acc = add("acc", Scope::Register, vec![s.tm * s.tn], None);
    let ra = add("r_a", Scope::Register, vec![la], None);
    let rb = add("r_b", Scope::Register, vec![lb], None);
    let fa = add("f_a", Scope::Register, vec![s.tm], None);
    let fb = add("f_b", Scope::Register, vec![s.tn], None);
    let fast = |acc: &Access, axes: &[usize]| {
        // The tiled index's dimension is the access's last, and the fused axes are not.
        let last = acc.dims.last();
        last.is_some_and(|m| m.terms.iter().any(|t| t.0 == g.k_axis))
            && !last.is_some_and(|m| m.terms.iter().any(|t| axes.contains(&t.0)))
    };
    let a = Operand {
        tag: 'a',
        access: &g.a,
        axes: &g.m_axes,
        extent: g.m,
        tile: s.bm,
        slots: la,
        k_fast: fast(&g.a, &g.m_axes),
        shared: sa,
        regs: ra,
        global: BufId(g.a.tensor),
    };
    let b = Operand {
        tag: 'b',
        access: &g.b,
        axes: &g.n_axes,
        extent: g.n,
        tile: s.bn,
        slots: lb,
        k_fast: fast(&g.b, &g.n_axes),
        shared: sb,
        regs: rb,
        global: BufId(g.b.tensor),
    };
    let l = Simt {
        k: kernel,
        extents,
        shapes,
        g,
        s,
        ity,
    };
    let (tiles_m, tiles_n) = (g.m.div_ceil(s.bm), g.n.div_ceil(s.bn));
    let (_, gn) = s.thread_grid();
    let warp_n = 32 / s.warp_m;
    let warps_n = gn / warp_n;
    let mut body = vec![
        let_int("td_tid", IntType::Int, "threadIdx.x".into()),
        Stmt::Comment("this block's tile of the fused output and its batch element".into()),
        Stmt::Let {
            ty: Ty::Int(IntType::Int),
            konst: true,
            defs: vec![
                (
                    "b_n".into(),
                    Value::Code(format!("(int)(blockIdx.x % {tiles_n}) * {}", s.bn)),
                ),
                (
                    "b_m".into(),
                    Value::Code(format!(
                        "(int)(blockIdx.x / {tiles_n} % {tiles_m}) * {}",
                        s.bm
                    )),
                ),
                (
                    "td_batch".into(),
                    Value::Code(format!("(int)(blockIdx.x / {})", tiles_n * tiles_m)),
                ),
            ],
        },
    ];
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
    for buf in [sa, sb, acc, ra, rb, fa, fb] {
        body.push(Stmt::Alloc { buf, init: None });
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
            op: super::AssignOp::Set,
            value: Value::Float(0.0),
        }],
    ));
    body.push(Stmt::Comment(
        "per load slot: its row of the fused axes, k offset, coordinates and offset".into(),
    ));
    body.extend(l.slot_setup(&a));
    body.extend(l.slot_setup(&b));

    // The hot loop: one full k-tile per iteration; a partial last tile after it.
    let tiles_k = g.k / s.bk;
    let partial = !g.k.is_multiple_of(s.bk);
    let (rows_a, rows_b) = (s.bm + SHARED_PAD, s.bn + SHARED_PAD);
    let piece_m = s.bm / (s.tm / 4);
    let piece_n = s.bn / (s.tn / 4);
    let mut frag = Vec::new();
    for w in 0..s.tm {
        frag.push(Stmt::Assign {
            dst: Target::Elem {
                buf: fa,
                index: vec![w.to_string()],
            },
            op: super::AssignOp::Set,
            value: Value::Code(format!(
                "(s_a + td_ao)[td_kk * {rows_a} + {}]",
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
            op: super::AssignOp::Set,
            value: Value::Code(format!(
                "(s_b + td_bo)[td_kk * {rows_b} + {}]",
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
    let inner = loop_(
        "td_kk",
        s.bk,
        LoopKind::Unrolled(s.bk),
        Some(g.k_axis),
        frag,
    );
    // The partial tile's loop runs only its k points, and is not unrolled: a second
    // unrolled copy of the tile would cost registers.
    let tail_compute = match &inner {
        Stmt::Loop(l) => Stmt::Loop(Loop {
            end: (g.k % s.bk).to_string(),
            trip: g.k % s.bk,
            kind: LoopKind::Serial,
            ..l.clone()
        }),
        other => other.clone(),
    };
    let mut step = vec![Stmt::Let {
        ty: Ty::Int(IntType::Int),
        konst: true,
        defs: vec![
            ("td_cur".into(), Value::Code("td_kt & 1".into())),
            (
                "td_ao".into(),
                Value::Code(format!("(td_kt & 1) * {} + t_m * 4", s.bk * rows_a)),
            ),
            (
                "td_bo".into(),
                Value::Code(format!("(td_kt & 1) * {} + t_n * 4", s.bk * rows_b)),
            ),
        ],
    }];
    let mut next = l.load(&a, &format!("(td_kt + 1) * {}", s.bk), false);
    next.extend(l.load(&b, &format!("(td_kt + 1) * {}", s.bk), false));
    step.push(Stmt::Comment(
        "the next tile: global -> registers, in flight while this one is computed".into(),
    ));
    step.push(Stmt::If {
        cond: format!("td_kt + 1 < {tiles_k}"),
        then: next,
        els: None,
        braced: true,
    });
    step.push(inner);
    let mut put = l.stash(&a, "(td_cur ^ 1)");
    put.extend(l.stash(&b, "(td_cur ^ 1)"));
    step.push(Stmt::If {
        cond: format!("td_kt + 1 < {tiles_k}"),
        then: put,
        els: None,
        braced: true,
    });
    step.push(Stmt::Barrier);
    let hot = Stmt::Loop(Loop {
        var: "td_kt".into(),
        ty: IntType::Int,
        start: "0".into(),
        end: tiles_k.to_string(),
        step: Step::Inc,
        trip: tiles_k,
        kind: if s.unroll > 1 {
            LoopKind::Unrolled(s.unroll)
        } else {
            LoopKind::Serial
        },
        index: Some(g.k_axis),
        layout: Layout::Braced,
        body: step,
    });
    let mut pass = l.slot_outer(&a);
    pass.extend(l.slot_outer(&b));
    if tiles_k > 0 {
        pass.push(Stmt::Comment("the first tile".into()));
        pass.extend(l.load(&a, "0", false));
        pass.extend(l.load(&b, "0", false));
        pass.extend(l.stash(&a, "0"));
        pass.extend(l.stash(&b, "0"));
        pass.push(Stmt::Barrier);
        pass.push(hot);
    }
    if partial {
        // Every thread is past the last barrier: both buffers are free.
        let k0 = (tiles_k * s.bk).to_string();
        pass.push(Stmt::Comment(format!(
            "the last, partial tile ({} of {})",
            g.k % s.bk,
            s.bk
        )));
        pass.extend(l.load(&a, &k0, true));
        pass.extend(l.load(&b, &k0, true));
        pass.extend(l.stash(&a, "0"));
        pass.extend(l.stash(&b, "0"));
        pass.push(Stmt::Barrier);
        pass.push(Stmt::Let {
            ty: Ty::Int(IntType::Int),
            konst: true,
            defs: vec![
                ("td_ao".into(), Value::Code("t_m * 4".into())),
                ("td_bo".into(), Value::Code("t_n * 4".into())),
            ],
        });
        pass.push(tail_compute);
        if !g.outer_axes.is_empty() {
            // The next outer iteration overwrites buffer 0.
            pass.push(Stmt::Barrier);
        }
    }
    let mut reduction = pass;
    for &r in g.outer_axes.iter().rev() {
        reduction = vec![loop_(
            &l.var(r),
            extents[r].max(1),
            LoopKind::Serial,
            Some(r),
            reduction,
        )];
    }
    body.extend(reduction);

    // Epilogue and store.
    body.push(Stmt::Comment(
        if kernel.epilogue.is_empty() {
            "one guarded store per output element"
        } else {
            "fused epilogue, one guarded store per output element"
        }
        .into(),
    ));
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
    col.push(Stmt::If {
        cond: format!("td_m < {} && td_n < {}", g.m, g.n),
        then: vec![Stmt::Store {
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
        els: None,
        braced: true,
    });
    row.push(loop_("td_y", s.tn, LoopKind::Unrolled(s.tn), None, col));
    body.push(loop_("td_x", s.tm, LoopKind::Unrolled(s.tm), None, row));

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
            block: [s.threads(), 1, 1],
        }),
    })
}
