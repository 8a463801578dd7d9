//! Lowers a [`CpuConfig`] to a [`Nest`]: the loop nest described in
//! [`crate::template::cpu`] — parallel outer loops, a register tile computed by tile
//! functions (one per size a tile takes: the full tile and, where the tile does not divide an
//! axis, the last tile's; each with its size and the ranges of its parameters built in, its
//! reduction loops in order so that the compiler vectorizes the tile), optionally a packed
//! per-thread panel and a blocked reduction.
//!
//! ```
//! use tensor_dsl::{ir::parse_text, lower, template::cpu::CpuConfig};
//! let k = parse_text("mm", "c[[i,j]] += a[[i,k]] * b[[k,j]]", None).unwrap();
//! let e = [7, 17, 13];
//! let shapes: [&[usize]; 3] = [&[7, 13], &[13, 17], &[7, 17]];
//! let cfg = CpuConfig { parallel: true, ..CpuConfig::heuristic(&k, &e, 8) };
//! let nest = lower::cpu::lower(&k, &e, &shapes, &cfg).unwrap();
//! // The parallel iteration space: 2 vector tiles (17 = 16 + 1) x 2 unroll tiles (7 = 4 + 3).
//! let band: Vec<usize> = nest.outer_band().iter().map(|l| l.trip).collect();
//! assert_eq!(band, vec![2, 2]);
//! // `b` is packed into a per-thread panel of 13 rows of 16 floats (the tiles over it are
//! // explicit vector code, which reads contiguous rows).
//! let panel = nest.scoped(lower::Scope::Panel).next().unwrap();
//! assert_eq!(panel.dims, vec![13, 16]);
//! ```

use super::{
    band, AssignOp, BufId, Buffer, Func, Layout, Loop, LoopKind, Nest, Param, Scope, Stage, Step,
    Stmt, Target, Ty, Value, COMPUTE,
};
use super::{pointer_params, Binding, CopyMode, IntType};
use crate::codegen::{index_name, strides};
use crate::ir::{Access, BodyKind, Kernel};
use crate::template::cpu::CpuConfig;
use crate::template::cpu::{blocked_reduction, pack_stride, packed_access, panel_points, u_block};

/// Name of the exported entry point.
pub const ENTRY: &str = "td_kernel";

/// Name of the exported function that packs an input ahead of calls ([`super::Prepack`]).
pub const PREPACK_FILL: &str = "td_prepack";

/// Name of the exported entry point on a prepacked input ([`super::Prepack`]).
pub const PREPACK_ENTRY: &str = "td_kernel_prepacked";

/// Names of the exported constants that say which input [`PREPACK_FILL`] packs and how
/// many elements of the compute type it writes.
pub const PREPACK_INPUT: &str = "td_prepack_input";
pub const PREPACK_ELEMS: &str = "td_prepack_elems";

/// Steps of the reduction per iteration of the loop around an explicit-vector register tile
/// (the matmul micro-kernel's `k`, a 1×1 convolution's channels): the loop is unrolled by
/// this factor, as oneDNN's AVX2 1×1 kernel unrolls its reduction by 8. Rolled, the loop
/// runs one tile step per iteration, and on AVX2 Zen 3 the loop's own instructions held the
/// FMAs back: an assembly 6×16 tile on data in L1 ran at 0.78 of the register-only FMA rate
/// rolled and 0.93 unrolled by 8. Generated C, two cores, interleaved with oneDNN (medians,
/// GFLOPS): ResNet-50's 1×1 layers R1 124 → 140, R3 129 → 148, R9 123 → 136, R12 104 → 122
/// (oneDNN 162, 158, 150, 121), a 512³ matmul 143 → 154
/// (`bench/results/2026-11-28-zen3-cpu-unroll/`).
pub const UNROLL_REDUCTION: usize = 8;

/// What a config decides for the nest, beyond its knobs.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    /// Spatial indices that are neither the vector nor the unroll axis.
    pub others: Vec<usize>,
    /// The packed access, if any.
    pub packed: Option<Access>,
    /// The blocked reduction index and its block, if any.
    pub block: Option<(usize, usize)>,
    /// Rows of the unroll axis per u-block (with a blocked reduction).
    pub u_block: usize,
    /// Row stride, in elements, of the packed panel: the vector tile where the packed tiles
    /// are explicit vector code, else [`pack_stride`]'s padded stride (see
    /// `cpu_micro::panel_stride`).
    pub panel_stride: usize,
}

impl Plan {
    pub fn new(
        kernel: &Kernel,
        extents: &[usize],
        shapes: &[&[usize]],
        config: &CpuConfig,
    ) -> Plan {
        let packed = packed_access(kernel, extents, config);
        Plan {
            panel_stride: packed.as_ref().map_or(pack_stride(config.vector), |p| {
                super::cpu_micro::panel_stride(kernel, extents, shapes, config, p)
            }),
            others: kernel
                .spatial()
                .into_iter()
                .filter(|&s| Some(s) != config.vector_axis && Some(s) != config.unroll_axis)
                .collect(),
            packed,
            block: blocked_reduction(kernel, extents, config),
            u_block: u_block(kernel, extents, config),
        }
    }
}

/// Checks that `config`, `extents` and `shapes` fit `kernel`.
fn check(
    kernel: &Kernel,
    extents: &[usize],
    shapes: &[&[usize]],
    config: &CpuConfig,
) -> Result<(), String> {
    config.validate(kernel)?;
    if extents.len() != kernel.indices.len() || extents.contains(&0) {
        return Err(format!(
            "{} positive extents are needed, got {extents:?}",
            kernel.indices.len()
        ));
    }
    super::check_shapes(kernel, shapes)?;
    Ok(())
}

/// Lowers `config` for `kernel` at `extents` (parameter shapes `shapes`).
pub fn lower<'a>(
    kernel: &'a Kernel,
    extents: &[usize],
    shapes: &'a [&'a [usize]],
    config: &CpuConfig,
) -> Result<Nest<'a>, String> {
    if let Some(tile) = &config.conv {
        return super::cpu_conv::lower(kernel, extents, shapes, config, tile);
    }
    check(kernel, extents, shapes, config)?;
    let plan = Plan::new(kernel, extents, shapes, config);
    let mut buffers = super::param_buffers(kernel, shapes);
    let acc = BufId(buffers.len());
    buffers.push(Buffer {
        name: "acc".into(),
        scope: Scope::Register,
        dtype: COMPUTE,
        dims: vec![config.unroll, config.vector],
        param: None,
        align: None,
    });
    // The panel holds loaded (converted) values, in the compute type, or with `bf16`
    // pairs the raw values, in an even number of rows.
    let pairs = super::cpu_pairs::active(kernel, extents, shapes, config);
    let (panel_dtype, rows) = if pairs {
        (
            crate::ir::DType::BF16,
            panel_points(kernel, extents, config).next_multiple_of(2),
        )
    } else {
        (COMPUTE, panel_points(kernel, extents, config))
    };
    let pk = plan.packed.as_ref().map(|_| {
        buffers.push(Buffer {
            name: "pk".into(),
            scope: Scope::Panel,
            dtype: panel_dtype,
            dims: vec![rows, plan.panel_stride],
            param: None,
            align: None,
        });
        BufId(buffers.len() - 1)
    });
    // Every panel of the packed operand, made ahead of calls ([`super::Prepack`]): where
    // panels are filled per (other indices, vector tile) with the whole reduction (no
    // reduction blocks) and the operand is an input.
    let wall = match (&pk, &plan.packed, config.vector_axis) {
        (Some(_), Some(access), Some(v))
            if plan.block.is_none() && access.tensor != kernel.output =>
        {
            let panels = panel_keys(&plan, access)
                .iter()
                .map(|&o| extents[o])
                .product::<usize>()
                * extents[v].div_ceil(config.vector);
            buffers.push(Buffer {
                name: "wall".into(),
                scope: Scope::Global,
                dtype: panel_dtype,
                dims: vec![panels * rows, plan.panel_stride],
                param: None,
                align: None,
            });
            Some(BufId(buffers.len() - 1))
        }
        _ => None,
    };
    // With the vector axis innermost (`unroll_outer`), consecutive tiles need different
    // panels: where the packed input has a prepacked form, the entry point fills every panel
    // into this scratch first and runs the prepacked nest on it, instead of refilling a
    // panel at every tile.
    let walls = wall.filter(|_| config.unroll_outer).map(|w| {
        let dims = buffers[w.0].dims.clone();
        buffers.push(Buffer {
            name: "walls".into(),
            scope: Scope::Panel,
            dtype: panel_dtype,
            dims,
            param: None,
            align: None,
        });
        BufId(buffers.len() - 1)
    });
    let l = Lower {
        buffers,
        kernel,
        extents,
        shapes,
        config,
        names: (0..kernel.indices.len())
            .map(|i| index_name(kernel, i))
            .collect(),
        inputs: kernel.inputs(),
        out: BufId(kernel.output),
        acc,
        pk,
        plan,
        pairs,
        walls,
    };
    // The full tile first: features read the tile from the first helper.
    let mut helpers = Vec::new();
    for packed in [false, true] {
        if !packed || l.pk.is_some() {
            for size in l.tile_sizes() {
                helpers.push(l.tile(&l.tile_name(packed, size), packed, size));
            }
        }
    }
    let entry = l.entry();
    let prepack = match (wall, l.pk, &l.plan.packed, config.vector_axis) {
        (Some(wall), Some(pk), Some(access), Some(v)) => Some(l.prepacked(&Prepacking {
            wall,
            pk,
            access,
            v,
        })),
        _ => None,
    };
    Ok(Nest {
        kernel,
        shapes,
        domain: extents.to_vec(),
        buffers: l.buffers,
        helpers,
        entry,
        launch: None,
        globals: Vec::new(),
        prepack,
    })
}

/// What a nest with a prepacked form packs: every panel (`wall`), the per-thread panel whose
/// layout each of its panels has (`pk`), the packed access and its vector axis.
#[derive(Clone, Copy)]
struct Prepacking<'a> {
    wall: BufId,
    pk: BufId,
    access: &'a Access,
    v: usize,
}

/// The other indices (neither vector nor unroll axis) that the packed access reads with:
/// its panels differ along them (a weight shared across a batch index has one set).
fn panel_keys(plan: &Plan, access: &Access) -> Vec<usize> {
    plan.others
        .iter()
        .copied()
        .filter(|&o| access.dims.iter().any(|d| d.terms.iter().any(|t| t.0 == o)))
        .collect()
}

pub(super) struct Lower<'a> {
    pub(super) buffers: Vec<Buffer>,
    pub(super) kernel: &'a Kernel,
    pub(super) extents: &'a [usize],
    pub(super) shapes: &'a [&'a [usize]],
    pub(super) config: &'a CpuConfig,
    /// C names of the index variables in loops (`i_<name>`).
    pub(super) names: Vec<String>,
    pub(super) inputs: Vec<usize>,
    pub(super) out: BufId,
    pub(super) acc: BufId,
    pub(super) pk: Option<BufId>,
    pub(super) plan: Plan,
    /// The packed tiles are `bf16` pairs ([`super::cpu_pairs`]): the panel holds raw pairs.
    pub(super) pairs: bool,
    /// Scratch for every panel, which the entry point fills before the tiles (see `lower`).
    pub(super) walls: Option<BufId>,
}

fn int(v: usize) -> String {
    v.to_string()
}

/// A loop of `long var` from `start` while `< end`.
#[allow(clippy::too_many_arguments)]
fn lp(
    var: &str,
    start: &str,
    end: String,
    step: Step,
    trip: usize,
    kind: LoopKind,
    index: Option<usize>,
    layout: Layout,
    body: Vec<Stmt>,
) -> Loop {
    Loop {
        var: var.into(),
        ty: IntType::Long,
        start: start.into(),
        end,
        step,
        trip,
        kind,
        index,
        layout,
        body,
    }
}

/// `for (long var = 0; var < extent; var += step)`: the tiles of `extent` by `step`, over
/// kernel index `index`.
fn tile_steps(var: &str, extent: usize, step: usize, index: Option<usize>, layout: Layout) -> Loop {
    lp(
        var,
        "0",
        int(extent),
        Step::Add(step),
        extent.div_ceil(step),
        LoopKind::Serial,
        index,
        layout,
        Vec::new(),
    )
}

impl Lower<'_> {
    pub(super) fn ext(&self, axis: Option<usize>) -> usize {
        axis.map_or(1, |a| self.extents[a])
    }

    /// `for (long i_<o> = 0; i_<o> < extent; ++i_<o>)`: a serial, flat loop over output index
    /// `o` (one of the other indices around the tiles).
    fn index_loop(&self, o: usize) -> Loop {
        lp(
            &self.names[o],
            "0",
            int(self.extents[o]),
            Step::Inc,
            self.extents[o],
            LoopKind::Serial,
            Some(o),
            Layout::Flat,
            Vec::new(),
        )
    }

    pub(super) fn elem(&self, buf: BufId, index: &[&str]) -> Target {
        Target::Elem {
            buf,
            index: index.iter().map(|s| s.to_string()).collect(),
        }
    }

    /// Index strings inside a tile: the unroll / vector axes are `u0 + u` and `v0 + v`.
    pub(super) fn tile_index(&self) -> Vec<String> {
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
    pub(super) fn reduction_point(&self) -> String {
        let mut s = String::new();
        for (n, &r) in self.kernel.reduction().iter().enumerate() {
            let name = match self.plan.block {
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

    /// The panel element of the current reduction point and `v`.
    fn panel_elem(&self) -> String {
        format!(
            "({}) * {} + v",
            self.reduction_point(),
            self.plan.panel_stride
        )
    }

    /// Nested loops over every reduction index, each flat around the next: the innermost of
    /// `innermost` kind and with `last` layout around `body`, the others of `kind`; a blocked
    /// index runs over its current block (`k0`, `nk` in scope).
    pub(super) fn reduction_loops(
        &self,
        kind: LoopKind,
        innermost: LoopKind,
        last: Layout,
        body: Vec<Stmt>,
    ) -> Vec<Stmt> {
        let red = self.kernel.reduction();
        let loops = red
            .iter()
            .enumerate()
            .map(|(n, &r)| {
                let (layout, kind) = if n + 1 == red.len() {
                    (last, innermost)
                } else {
                    (Layout::Flat, kind)
                };
                let name = &self.names[r];
                match self.plan.block {
                    Some((r0, b)) if r0 == r => lp(
                        name,
                        "k0",
                        "k0 + nk".into(),
                        Step::Inc,
                        b,
                        kind,
                        Some(r),
                        layout,
                        Vec::new(),
                    ),
                    _ => lp(
                        name,
                        "0",
                        int(self.extents[r]),
                        Step::Inc,
                        self.extents[r],
                        kind,
                        Some(r),
                        layout,
                        Vec::new(),
                    ),
                }
            })
            .collect();
        band(loops, body)
    }

    /// The tile's `v` loop (`vector`: `v < end` over the vector axis) or `u` loop (`u < end`
    /// over the unroll axis), at most `trip` iterations.
    fn tile_loop(
        &self,
        vector: bool,
        (end, trip): (String, usize),
        kind: LoopKind,
        layout: Layout,
        body: Vec<Stmt>,
    ) -> Loop {
        let (var, axis) = if vector {
            ("v", self.config.vector_axis)
        } else {
            ("u", self.config.unroll_axis)
        };
        lp(var, "0", end, Step::Inc, trip, kind, axis, layout, body)
    }

    /// `for u < nu` around `for v < nv` (braced when `braced`) for a tile of `size` =
    /// (`nu`, `nv`), for the accumulator's initialisation and stores. Deliberately without
    /// `#pragma GCC unroll`: forcing it here made edge tiles of a runtime size (e.g. every
    /// tile of a 14-wide axis under a 16-wide vector tile, before edge tiles had constant
    /// sizes) 2.3x slower on a 1×1 convolution, and full tiles gained nothing.
    pub(super) fn tile_loops(
        &self,
        (nu, nv): (usize, usize),
        braced: bool,
        body: Vec<Stmt>,
    ) -> Stmt {
        let v = self.tile_loop(
            true,
            (int(nv), nv),
            LoopKind::Serial,
            if braced { Layout::Braced } else { Layout::Bare },
            body,
        );
        Stmt::Loop(self.tile_loop(
            false,
            (int(nu), nu),
            LoopKind::Serial,
            Layout::Bare,
            vec![Stmt::Loop(v)],
        ))
    }

    /// The output offset of a tile element, e.g. `40 * (u0 + u) + (v0 + v)`.
    pub(super) fn out_offset(&self) -> String {
        self.out_offset_at(&self.tile_index())
    }

    /// The output offset of the element at `index` (C text of every index variable).
    pub(super) fn out_offset_at(&self, index: &[String]) -> String {
        let out_strides = strides(self.shapes[self.kernel.output]);
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

    /// The register tile of `size` = (`nu`, `nv`) at (`u0`, `v0`): one function per size a
    /// tile takes (the full tile and the edges), the size a constant, so the compiler unrolls
    /// the tile and keeps `acc` in registers.
    fn tile(&self, name: &str, packed: bool, size: (usize, usize)) -> Func {
        if let Some(micro) = packed.then(|| self.micro_tile(name, size)).flatten() {
            return micro;
        }
        // A pairs panel holds raw `bf16` pairs, which only the vector code reads
        // (`cpu_pairs::active` admits only configs whose packed tiles all are).
        debug_assert!(!(packed && self.pairs), "a pairs panel read by a loop tile");
        let (ru, rv) = (self.config.unroll, self.config.vector);
        let (nu, nv) = size;
        let params = self.tile_params(packed);

        let acc_uv = self.elem(self.acc, &["u", "v"]);
        let out = self.elem(self.out, &[&self.out_offset()]);
        let mut body = vec![
            Stmt::Assume(self.tile_facts(size)),
            Stmt::Alloc {
                buf: self.acc,
                init: None,
            },
        ];
        let fill = |value: Value| {
            self.tile_loops(
                size,
                false,
                vec![Stmt::Assign {
                    dst: acc_uv.clone(),
                    op: AssignOp::Set,
                    value,
                }],
            )
        };
        if self.plan.block.is_some() {
            // Later blocks continue from the partial sums the earlier ones stored.
            body.push(Stmt::If {
                cond: "k0 == 0".into(),
                then: vec![fill(Value::Float(0.0))],
                els: Some(vec![fill(Value::Read(out.clone()))]),
                braced: true,
            });
        } else {
            body.push(fill(Value::Float(0.0)));
        }

        let reads = match (&self.plan.packed, self.pk, packed) {
            (Some(a), Some(pk), true) => {
                vec![(
                    a.clone(),
                    format!("{}[{}]", self.name(pk), self.panel_elem()),
                )]
            }
            _ => Vec::new(),
        };
        let binding = Binding {
            index: self.tile_index(),
            reads,
        };
        let sum = self.kernel.kind == BodyKind::Sum;
        let compute = Stmt::Loop(self.tile_loop(
            false,
            (int(nu), nu),
            LoopKind::Unrolled(ru),
            Layout::Braced,
            vec![Stmt::Loop(self.tile_loop(
                true,
                (int(nv), nv),
                LoopKind::Vectorized(rv),
                Layout::Bare,
                vec![Stmt::Compute {
                    acc: acc_uv.clone(),
                    reduce: sum,
                    value: Value::Kernel {
                        expr: self.kernel.body.clone(),
                        binding: binding.clone(),
                    },
                }],
            ))],
        ));
        if sum {
            // In order: the tile inside is what the compiler should vectorize.
            body.extend(self.reduction_loops(
                LoopKind::InOrder,
                LoopKind::InOrder,
                Layout::Flat,
                vec![Stmt::Block(vec![compute])],
            ));
        } else {
            body.push(compute);
        }

        // Epilogue and the single store (with blocks: partial sums until the last block).
        if let Some((r0, _)) = self.plan.block {
            body.push(Stmt::If {
                cond: format!("k0 + nk < {}", self.extents[r0]),
                then: vec![
                    self.tile_loops(
                        size,
                        false,
                        vec![Stmt::Assign {
                            dst: out.clone(),
                            op: AssignOp::Set,
                            value: Value::Read(acc_uv.clone()),
                        }],
                    ),
                    Stmt::Return,
                ],
                els: None,
                braced: true,
            });
        }
        body.push(self.epilogue_stores(size));
        Func {
            name: name.into(),
            params,
            body,
        }
    }

    /// The epilogue and store of every element of a tile of `size` from `acc`.
    pub(super) fn epilogue_stores(&self, size: (usize, usize)) -> Stmt {
        self.tile_loops(
            size,
            true,
            vec![Stmt::Store {
                acc: self.elem(self.acc, &["u", "v"]),
                epilogue: self.kernel.epilogue.clone(),
                // The panel holds the current reduction point's rows: the epilogue, after
                // the reduction, reads every input from global memory.
                binding: Binding {
                    index: self.tile_index(),
                    reads: Vec::new(),
                },
                dst: self.elem(self.out, &[&self.out_offset()]),
            }],
        )
    }

    /// The parameters of a tile function: the pointers (the panel's with `packed`), the
    /// other output indices, the tile's start and the reduction block.
    pub(super) fn tile_params(&self, packed: bool) -> Vec<Param> {
        let mut params = pointer_params(self.kernel, self.pk.filter(|_| packed));
        let scalar = |name: &str| Param::Scalar {
            ty: IntType::Long,
            name: name.into(),
        };
        params.extend(self.plan.others.iter().map(|&o| scalar(&self.names[o])));
        params.extend(["u0", "v0"].map(scalar));
        if self.plan.block.is_some() {
            params.extend(["k0", "nk"].map(scalar));
        }
        params
    }

    /// A buffer's name.
    pub(super) fn name(&self, buf: BufId) -> &str {
        self.buffers.get(buf.0).map_or("", |b| b.name.as_str())
    }

    /// The tiles of one axis (the unroll axis, or with `vector` the vector axis): their size,
    /// and for an axis the tile does not divide (and covers more than once), the test for a
    /// full tile at `start` and the size of the last tile. Tiles start at multiples of the
    /// tile, so the last is the only partial one, `extent mod tile` long.
    fn axis_tiles(&self, vector: bool) -> (usize, Option<(String, usize)>) {
        let (start, e, r) = if vector {
            ("v0", self.ext(self.config.vector_axis), self.config.vector)
        } else {
            ("u0", self.ext(self.config.unroll_axis), self.config.unroll)
        };
        if e <= r {
            (e, None)
        } else if e.is_multiple_of(r) {
            (r, None)
        } else {
            (r, Some((format!("{start} + {r} <= {e}"), e % r)))
        }
    }

    /// Every size (`nu`, `nv`) a tile takes, the full tile first.
    fn tile_sizes(&self) -> Vec<(usize, usize)> {
        let (fu, lu) = self.axis_tiles(false);
        let (fv, lv) = self.axis_tiles(true);
        let us = [Some(fu), lu.map(|(_, n)| n)];
        let vs = [Some(fv), lv.map(|(_, n)| n)];
        us.iter()
            .flatten()
            .flat_map(|&u| vs.iter().flatten().map(move |&v| (u, v)))
            .collect()
    }

    /// The name of the tile function of `size`: `td_tile` (`td_tile_packed`) for the full
    /// tile, with `_<nu>x<nv>` for an edge.
    fn tile_name(&self, packed: bool, size: (usize, usize)) -> String {
        let base = if packed { "td_tile_packed" } else { "td_tile" };
        if Some(&size) == self.tile_sizes().first() {
            base.into()
        } else {
            format!("{base}_{}x{}", size.0, size.1)
        }
    }

    /// The ranges of the index parameters of the tile function of `size` (an edge tile's
    /// start is exact). The functions are not inlined (see [`crate::codegen::c::CDialect`]),
    /// so without these the compiler keeps every bounds check of a padded read: a 3×3
    /// convolution with padding 1 took 3.1 s to compile and ran 2.7x slower; with them, 0.9 s
    /// and 0.74x the time of the inlined tiles without ranges.
    pub(super) fn tile_facts(&self, (nu, nv): (usize, usize)) -> String {
        let mut facts: Vec<String> = self
            .plan
            .others
            .iter()
            .map(|&o| match (&self.names[o], self.extents[o]) {
                (n, 1) => format!("{n} == 0"),
                (n, e) => format!("{n} >= 0 && {n} < {e}"),
            })
            .collect();
        for (vector, start, n) in [(false, "u0", nu), (true, "v0", nv)] {
            let e = self.ext(if vector {
                self.config.vector_axis
            } else {
                self.config.unroll_axis
            });
            facts.push(match self.axis_tiles(vector) {
                (_, Some((_, last))) if n == last => format!("{start} == {}", e - last),
                _ if e == n => format!("{start} == 0"),
                _ => format!("{start} >= 0 && {start} <= {}", e - n),
            });
        }
        if let Some((r0, b)) = self.plan.block {
            facts.push(format!(
                "k0 >= 0 && k0 < {} && nk >= 1 && nk <= {b}",
                self.extents[r0]
            ));
        }
        facts.join(" && ")
    }

    /// The call of the tile function for the tile at (`u0`, `v0`): the full tile's, or at an
    /// edge the edge's. Every tile function has its size built in (see [`Self::tile`]): a
    /// runtime size (`min(extent - v0, tile)`, as edge tiles once had) made GCC unroll the
    /// tile loops into guarded copies as costly to compile as the full tile and not
    /// vectorized.
    fn tile_calls(&self, packed: bool) -> Stmt {
        self.tile_calls_on(packed, None)
    }

    /// [`Self::tile_calls`], the packed tiles reading the panel at `panel` (C text) instead
    /// of this thread's.
    fn tile_calls_on(&self, packed: bool, panel: Option<&str>) -> Stmt {
        let u0 = if self.config.unroll_axis.is_some() {
            "u0"
        } else {
            "0"
        };
        let v0 = if self.config.vector_axis.is_some() {
            "v0"
        } else {
            "0"
        };
        let mut args: Vec<String> = self
            .inputs
            .iter()
            .map(|&p| self.name(BufId(p)).to_string())
            .collect();
        if let (Some(pk), true) = (self.pk, packed) {
            args.push(panel.unwrap_or(self.name(pk)).into());
        }
        args.push(self.name(self.out).into());
        args.extend(self.plan.others.iter().map(|&o| self.names[o].clone()));
        args.push(u0.into());
        args.push(v0.into());
        if self.plan.block.is_some() {
            args.extend(["k0".to_string(), "nk".to_string()]);
        }
        let call = |nu: usize, nv: usize| Stmt::Call {
            func: self.tile_name(packed, (nu, nv)),
            args: args.clone(),
        };
        let when = |cond: String, then: Stmt, els: Stmt| Stmt::If {
            cond,
            then: vec![then],
            els: Some(vec![els]),
            braced: false,
        };
        // Edges chain in `else` branches only, so no `else` pairs with the wrong `if`.
        match (self.axis_tiles(false), self.axis_tiles(true)) {
            ((nu, None), (nv, None)) => call(nu, nv),
            ((nu, Some((cu, lu))), (nv, None)) => when(cu, call(nu, nv), call(lu, nv)),
            ((nu, None), (nv, Some((cv, lv)))) => when(cv, call(nu, nv), call(nu, lv)),
            ((nu, Some((cu, lu))), (nv, Some((cv, lv)))) => when(
                format!("{cu} && {cv}"),
                call(nu, nv),
                when(cu, call(nu, lv), when(cv, call(lu, nv), call(lu, lv))),
            ),
        }
    }

    /// The tiles of one u-block for the current reduction block: a loop over `u0` (from `ub`
    /// when the unroll axis is cut in u-blocks, else from 0) around [`Self::tile_calls`].
    fn blocked_tiles(&self, packed: bool) -> Stmt {
        let (ru, ub) = (self.config.unroll, self.plan.u_block);
        let calls = self.tile_calls(packed);
        let axis = self.config.unroll_axis;
        match axis.map(|u| self.extents[u]) {
            Some(e) if e > ub => Stmt::Loop(lp(
                "u0",
                "ub",
                format!("(ub + {ub} < {e} ? ub + {ub} : {e})"),
                Step::Add(ru),
                ub.div_ceil(ru),
                LoopKind::Serial,
                axis,
                Layout::Bare,
                vec![calls],
            )),
            Some(e) => Stmt::Loop(Loop {
                body: vec![calls],
                ..tile_steps("u0", e, ru, axis, Layout::Bare)
            }),
            None => calls,
        }
    }

    /// Refills this thread's panel when the tile's (other indices, v0) changed; with a
    /// blocked reduction, fills it for the current block unconditionally.
    fn pack_fill(&self, pk: BufId, access: &Access) -> Vec<Stmt> {
        let Some(v) = self.config.vector_axis else {
            return Vec::new();
        };
        let mut keys: Vec<&str> = self
            .plan
            .others
            .iter()
            .map(|&o| self.names[o].as_str())
            .collect();
        keys.push("v0");
        if self.plan.block.is_some() {
            keys.clear();
        }
        let mut body = self.panel_copy(pk, access, v);
        for k in &keys {
            body.push(Stmt::Assign {
                dst: Target::Var(format!("pk_{k}")),
                op: AssignOp::Set,
                value: Value::Code(k.to_string()),
            });
        }
        if self.plan.block.is_some() {
            vec![Stmt::Block(body)]
        } else {
            let changed: Vec<String> = keys.iter().map(|k| format!("pk_{k} != {k}")).collect();
            vec![Stmt::If {
                cond: changed.join(" || "),
                then: body,
                els: None,
                braced: true,
            }]
        }
    }

    /// Copies the tile's (other indices, `v0`) panel of `access` into `pk`: `nv` (the
    /// vector tile's width there) and the copy over every reduction point.
    fn panel_copy(&self, pk: BufId, access: &Access, v: usize) -> Vec<Stmt> {
        let rv = self.config.vector;
        let ev = self.extents[v];
        let mut index = self.names.clone();
        index[v] = "(v0 + v)".into();
        let copy = Stmt::Assign {
            dst: self.elem(pk, &[&self.panel_elem()]),
            op: AssignOp::Set,
            value: Value::Global {
                access: access.clone(),
                binding: Binding {
                    index,
                    reads: Vec::new(),
                },
            },
        };
        let mut row = vec![Stmt::Loop(self.tile_loop(
            true,
            ("nv".into(), rv.min(ev)),
            LoopKind::Serial,
            Layout::Bare,
            vec![copy],
        ))];
        // The edge panel's lanes past the extent, up to whole vectors, are zeros: the vector
        // code of an edge tile computes whole vectors and stores only the extent's lanes.
        let pad = self.edge_vector_pad();
        if pad > 0 {
            let zero = Stmt::Assign {
                dst: self.elem(pk, &[&self.panel_elem()]),
                op: AssignOp::Set,
                value: Value::Float(0.0),
            };
            row.push(Stmt::Loop(lp(
                "v",
                "nv",
                int(pad),
                Step::Inc,
                pad - ev % rv,
                LoopKind::Serial,
                Some(v),
                Layout::Bare,
                vec![zero],
            )));
        }
        let rows = if self.pairs {
            self.pair_panel_rows(pk, access, v)
        } else {
            self.reduction_loops(
                LoopKind::Serial,
                LoopKind::Serial,
                if row.len() > 1 {
                    Layout::Braced
                } else {
                    Layout::Bare
                },
                row,
            )
        };
        vec![
            Stmt::Let {
                ty: Ty::Int(IntType::Long),
                konst: true,
                defs: vec![(
                    "nv".into(),
                    Value::Code(format!("{ev} - v0 < {rv} ? {ev} - v0 : {rv}")),
                )],
            },
            Stmt::Stage(Stage {
                src: access.clone(),
                dst: pk,
                dims: vec![panel_points(self.kernel, self.extents, self.config), rv],
                width: 1,
                mode: CopyMode::Sync,
                body: rows,
            }),
        ]
    }

    /// With a panel: fill it and run the packed tiles if it was allocated, else the plain
    /// ones.
    fn with_panel(&self, tiles: &dyn Fn(bool) -> Stmt) -> Vec<Stmt> {
        match (self.pk, &self.plan.packed) {
            (Some(pk), Some(access)) => {
                let mut then = self.pack_fill(pk, access);
                then.push(tiles(true));
                vec![Stmt::If {
                    cond: "pk".into(),
                    then,
                    els: Some(vec![tiles(false)]),
                    braced: true,
                }]
            }
            _ => vec![tiles(false)],
        }
    }

    /// C text of the panel of the current (other indices, `v0`) inside `wall`: panels one
    /// after another, the vector tiles innermost, then the other indices the packed access
    /// reads with, in order.
    fn wall_panel(&self, wall: BufId, access: &Access) -> String {
        // One panel's elements: the per-thread panel's, whose layout each of them has.
        let size: usize = self
            .pk
            .map_or(0, |pk| self.buffers[pk.0].dims.iter().product());
        let tiles = self
            .ext(self.config.vector_axis)
            .div_ceil(self.config.vector);
        let mut at = String::from("0");
        for &o in &panel_keys(&self.plan, access) {
            at = format!("({at}) * {} + {}", self.extents[o], self.names[o]);
        }
        format!(
            "{} + (({at}) * {tiles} + v0 / {}) * {size}",
            self.name(wall),
            self.config.vector
        )
    }

    /// The loops that fill every panel of the packed input into `wall`, in its order (the
    /// threads share them out).
    fn prepack_loops(&self, p: &Prepacking<'_>) -> Vec<Stmt> {
        let Prepacking {
            wall,
            pk,
            access,
            v,
        } = *p;
        let mut loops: Vec<Loop> = panel_keys(&self.plan, access)
            .into_iter()
            .map(|o| self.index_loop(o))
            .collect();
        loops.push(tile_steps(
            "v0",
            self.extents[v],
            self.config.vector,
            Some(v),
            Layout::Flat,
        ));
        if self.config.parallel {
            for l in &mut loops {
                l.kind = LoopKind::Parallel;
            }
        }
        // The copy writes `pk`: here, the panel's place in `wall`.
        let mut body = vec![Stmt::Let {
            ty: Ty::Ptr(self.buffers[pk.0].dtype),
            konst: false,
            defs: vec![(
                self.name(pk).into(),
                Value::Code(self.wall_panel(wall, access)),
            )],
        }];
        body.extend(self.panel_copy(pk, access, v));
        band(loops, vec![Stmt::Block(body)])
    }

    /// The [`super::Prepack`] pair: `td_prepack` fills every panel, `td_kernel_prepacked`
    /// runs the nest on them. The entry point itself stays as it was (each thread packs).
    fn prepacked(&self, p: &Prepacking<'_>) -> super::Prepack {
        let (wall, packed) = (p.wall, p.access.tensor);
        let out = self.name(self.out).to_string();
        // Both bodies are printed after the entry point, so the tile functions and the
        // entry keep the places they have without a prepacked form (on this machine a
        // batched matmul's hot loop ran up to 15% slower at another code address).
        let mut fill_body = vec![Stmt::Let {
            ty: Ty::Ptr(self.buffers[wall.0].dtype),
            konst: false,
            defs: vec![(self.name(wall).into(), Value::Code(out))],
        }];
        fill_body.extend(self.prepack_loops(p));
        let fill = Func {
            name: PREPACK_FILL.into(),
            params: vec![
                Param::Buffer {
                    buf: BufId(packed),
                    konst: true,
                },
                Param::Buffer {
                    buf: self.out,
                    konst: false,
                },
            ],
            body: fill_body,
        };
        let mut run_body = vec![Stmt::Let {
            ty: Ty::Ptr(self.buffers[wall.0].dtype),
            konst: true,
            defs: vec![(
                self.name(wall).into(),
                Value::Code(format!("args[{}]", self.kernel.params.len())),
            )],
        }];
        run_body.extend(self.body(Some(p)));
        super::Prepack {
            input: packed,
            // In elements of the compute type (`f32`): half as many for `bf16` pairs.
            elems: {
                let b = &self.buffers[wall.0];
                let n: usize = b.dims.iter().product();
                (n * b.dtype.size()).div_ceil(COMPUTE.size())
            },
            fill,
            run: Func {
                name: PREPACK_ENTRY.into(),
                params: pointer_params(self.kernel, None),
                body: run_body,
            },
        }
    }

    /// The entry point: parallel loops over every other output index and the tiles, the
    /// unroll axis innermost so a packed panel is reused across it. With the vector axis
    /// innermost and a prepacked form, every panel is filled first into scratch (`walls`)
    /// and the prepacked nest runs on it: refilled at every tile, such a winner of tuning on
    /// prepacked weights ran at 146–231 GFLOPS instead of 424–452 (bf16 BERT matmuls, Zen 4).
    /// Without the scratch's memory, the tiles pack their own panels as before.
    fn entry(&self) -> Func {
        let body = match (
            self.walls,
            self.pk,
            &self.plan.packed,
            self.config.vector_axis,
        ) {
            (Some(walls), Some(pk), Some(access), Some(v)) => {
                let p = Prepacking {
                    wall: walls,
                    pk,
                    access,
                    v,
                };
                let mut then = self.prepack_loops(&p);
                then.extend(self.body(Some(&p)));
                vec![self.scratch_region(
                    false,
                    walls,
                    format!(
                        "Every panel of `{}` first, then the tiles on them.",
                        self.kernel.params[access.tensor].name
                    ),
                    // The tiles' own nest first, for `Nest::outer_band`.
                    vec![Stmt::If {
                        cond: format!("!{}", self.name(walls)),
                        then: self.body(None),
                        els: Some(then),
                        braced: true,
                    }],
                )]
            }
            _ => self.body(None),
        };
        Func {
            name: ENTRY.into(),
            params: pointer_params(self.kernel, None),
            body,
        }
    }

    /// The nest: the entry point's body (each thread packs its panels), or with `wall`
    /// the prepacked entry's, whose tiles read the prepacked panels.
    fn body(&self, prepacked: Option<&Prepacking<'_>>) -> Vec<Stmt> {
        let (ru, rv) = (self.config.unroll, self.config.vector);
        let extents = self.extents;
        let mut loops: Vec<Loop> = self
            .plan
            .others
            .iter()
            .map(|&o| self.index_loop(o))
            .collect();
        let vloop = self
            .config
            .vector_axis
            .map(|v| tile_steps("v0", extents[v], rv, Some(v), Layout::Flat));
        // With a blocked reduction the parallel loops stop at the u-block; the reduction
        // blocks and the tiles of the u-block run inside.
        let ub = self.plan.u_block;
        let uaxis = self.config.unroll_axis;
        let uloop = match (self.plan.block, uaxis.map(|u| extents[u])) {
            (None, Some(e)) => Some(tile_steps("u0", e, ru, uaxis, Layout::Flat)),
            (Some(_), Some(e)) if e > ub => Some(tile_steps("ub", e, ub, uaxis, Layout::Flat)),
            _ => None,
        };
        if self.config.unroll_outer && self.plan.block.is_none() {
            loops.extend(uloop.into_iter().chain(vloop));
        } else {
            loops.extend(vloop.into_iter().chain(uloop));
        }
        let parallel = self.config.parallel && !loops.is_empty();
        if parallel {
            for l in &mut loops {
                l.kind = LoopKind::Parallel;
            }
        }

        let inner = match self.plan.block {
            Some((r0, b)) => {
                let e0 = extents[r0];
                let mut body = vec![Stmt::Let {
                    ty: Ty::Int(IntType::Long),
                    konst: true,
                    defs: vec![(
                        "nk".into(),
                        Value::Code(format!("{e0} - k0 < {b} ? {e0} - k0 : {b}")),
                    )],
                }];
                body.extend(self.with_panel(&|p| self.blocked_tiles(p)));
                vec![Stmt::Loop(Loop {
                    body,
                    ..tile_steps("k0", e0, b, Some(r0), Layout::Braced)
                })]
            }
            None => match prepacked {
                Some(p) => vec![self.tile_calls_on(true, Some(&self.wall_panel(p.wall, p.access)))],
                None => self.with_panel(&|p| self.tile_calls(p)),
            },
        };
        let nest = band(loops, vec![Stmt::Block(inner)]);
        if prepacked.is_some() {
            return nest;
        }

        match (self.pk, &self.plan.packed) {
            (Some(pk), Some(access)) => {
                let mut region = Vec::new();
                if self.plan.block.is_none() {
                    let mut keys: Vec<(String, Value)> = self
                        .plan
                        .others
                        .iter()
                        .map(|&o| (format!("pk_{}", self.names[o]), Value::Code("-1".into())))
                        .collect();
                    keys.push(("pk_v0".into(), Value::Code("-1".into())));
                    region.push(Stmt::Let {
                        ty: Ty::Int(IntType::Long),
                        konst: false,
                        defs: keys,
                    });
                }
                region.extend(nest);
                vec![self.scratch_region(
                    parallel,
                    pk,
                    format!(
                        "This thread's panel of `{}`; without memory, tiles read it in place.",
                        self.kernel.params[access.tensor].name
                    ),
                    region,
                )]
            }
            _ => nest,
        }
    }

    /// `{ /* comment */ buf = scratch; body; release buf }`, each thread's own with
    /// `parallel` (a parallel region).
    fn scratch_region(&self, parallel: bool, buf: BufId, comment: String, body: Vec<Stmt>) -> Stmt {
        let mut region = vec![Stmt::Comment(comment), Stmt::Alloc { buf, init: None }];
        region.extend(body);
        region.push(Stmt::Free(buf));
        Stmt::Region {
            parallel,
            body: region,
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::ir::parse_text;
    use crate::lower::Scope;
    use crate::template::cpu::CpuTemplate;
    use rand::{rngs::StdRng, SeedableRng};

    /// The nest's outer band and panel are what the schedule says: the parallel iterations
    /// and the packed rows.
    #[test]
    fn the_nest_agrees_with_the_config_it_lowers() {
        let mut rng = StdRng::seed_from_u64(9);
        let k = parse_text("mm", "c[[i,j]] += a[[i,k]] * b[[k,j]]", None).unwrap();
        let e = [37, 50, 300];
        let shapes: [&[usize]; 3] = [&[37, 300], &[300, 50], &[37, 50]];
        let t = CpuTemplate::new(&k, &e, 16).unwrap();
        for _ in 0..60 {
            let cfg = t
                .decode(&t.space().sample_uniform(&mut rng).unwrap())
                .unwrap();
            let nest = lower(&k, &e, &shapes, &cfg).unwrap();
            let plan = Plan::new(&k, &e, &shapes, &cfg);
            let ext = |a: Option<usize>| a.map_or(1, |a| e[a]);
            let u_tiles = match plan.block {
                Some(_) => ext(cfg.unroll_axis).div_ceil(plan.u_block),
                None => ext(cfg.unroll_axis).div_ceil(cfg.unroll),
            };
            let others: usize = plan.others.iter().map(|&o| e[o]).product();
            let outer: usize = nest.outer_band().iter().map(|l| l.trip).product();
            assert_eq!(
                outer,
                ext(cfg.vector_axis).div_ceil(cfg.vector) * u_tiles * others,
                "{cfg:?}"
            );
            let parallel = nest
                .outer_band()
                .iter()
                .all(|l| l.kind == LoopKind::Parallel);
            assert_eq!(parallel, cfg.parallel || nest.outer_band().is_empty());
            let panel = nest.scoped(Scope::Panel).next().map(|b| b.dims.clone());
            assert_eq!(
                panel,
                plan.packed
                    .as_ref()
                    .map(|_| vec![panel_points(&k, &e, &cfg), plan.panel_stride])
            );
            assert!(
                [cfg.vector, pack_stride(cfg.vector)].contains(&plan.panel_stride),
                "{cfg:?}"
            );
        }
    }

    /// An epilogue that reads the packed access reads it from global memory: the panel
    /// holds rows per reduction point, out of scope after the reduction (this printed
    /// `pk[(i_k) * 24 + v]` outside the `i_k` loop, which did not compile).
    #[test]
    fn an_epilogue_reads_the_packed_operand_in_place() {
        let k = parse_text(
            "k",
            "o[[i, j]] += a[[i, k]] * b[[j]]; o[[i, j]] = o[[i, j]] + b[[j]]",
            None,
        )
        .unwrap();
        let shapes: [&[usize]; 3] = [&[16, 8], &[32], &[16, 32]];
        let e = crate::ir::bind(&k, &shapes).unwrap();
        let cfg = CpuConfig::heuristic(&k, &e, 8);
        assert!(packed_access(&k, &e, &cfg).is_some());
        let src = crate::codegen::c::generate(&k, &e, &shapes, &cfg);
        assert!(src.contains("x = (x + t1[(v0 + v)]);"), "{src}");
        assert!(!src.contains("x = (x + pk"), "{src}");
        let a: Vec<f32> = (0..128).map(|x| (x % 7) as f32).collect();
        let b: Vec<f32> = (0..32).map(|x| (x % 5) as f32 - 2.0).collect();
        let data: [crate::Data; 3] = [(&a).into(), (&b).into(), Default::default()];
        let mut want = vec![0.0f32; 16 * 32];
        crate::reference::run(&k, &e, &shapes, &data, (&mut want).into());
        let mut got = vec![0.0f32; 16 * 32];
        match crate::runtime::cpu::run_with(&k, &e, &shapes, &data, (&mut got).into(), &cfg) {
            Err(crate::runtime::cpu::CpuError::NoCompiler(why)) => {
                eprintln!("skipped: no C compiler ({why})")
            }
            r => {
                assert!(r.is_ok(), "{r:?}");
                assert_eq!(got, want);
            }
        }
    }

    /// With the vector axis innermost and a prepacked form, the entry point packs every
    /// panel into scratch first and runs the prepacked tiles: called without the prepacked
    /// input (no versions), in f32 and in bf16 pairs, it matches the reference.
    #[test]
    fn vector_axis_innermost_packs_every_panel_first() {
        for bf16 in [false, true] {
            let mut k = parse_text("mm", "c[[i,j]] += a[[i,k]] * b[[k,j]]", None).unwrap();
            if bf16 {
                k.params[0].dtype = crate::ir::DType::BF16;
                k.params[1].dtype = crate::ir::DType::BF16;
            }
            let shapes: [&[usize]; 3] = [&[37, 61], &[61, 50], &[37, 50]];
            let e = crate::ir::bind(&k, &shapes).unwrap();
            let cfg = CpuConfig {
                unroll_outer: true,
                parallel: true,
                vector_code: 16,
                pairs: bf16,
                ..CpuConfig::heuristic_for(
                    &k,
                    &e,
                    &crate::template::cpu_machine::CpuMachine::with_lanes(16),
                )
            };
            let src = crate::codegen::c::generate(&k, &e, &shapes, &cfg);
            assert!(src.contains("if (!walls)"), "{src}");
            let a: Vec<f32> = (0..37 * 61)
                .map(|x| ((x * 7) % 13) as f32 / 8.0 - 0.75)
                .collect();
            let b: Vec<f32> = (0..61 * 50)
                .map(|x| ((x * 5) % 11) as f32 / 8.0 - 0.625)
                .collect();
            let bufs = [
                crate::Buffer::from_f32(k.params[0].dtype, &a),
                crate::Buffer::from_f32(k.params[1].dtype, &b),
            ];
            let data: [crate::Data; 3] = [bufs[0].view(), bufs[1].view(), Default::default()];
            let mut want = vec![0.0f32; 37 * 50];
            crate::reference::run(&k, &e, &shapes, &data, (&mut want).into());
            let mut got = vec![f32::NAN; 37 * 50];
            match crate::runtime::cpu::run_with(&k, &e, &shapes, &data, (&mut got).into(), &cfg) {
                Err(crate::runtime::cpu::CpuError::NoCompiler(why)) => {
                    eprintln!("skipped: no C compiler ({why})");
                    return;
                }
                r => assert!(r.is_ok(), "{r:?}"),
            }
            for (n, (g, w)) in got.iter().zip(&want).enumerate() {
                assert!(
                    (g - w).abs() <= 1e-4 * (1.0 + w.abs()),
                    "bf16 {bf16}: element {n}: {g} vs {w}"
                );
            }
        }
    }

    #[test]
    fn configs_that_do_not_fit_are_errors() {
        let k = parse_text("mm", "c[[i,j]] += a[[i,k]] * b[[k,j]]", None).unwrap();
        let shapes: [&[usize]; 3] = [&[8, 4], &[4, 16], &[8, 16]];
        let cfg = CpuConfig::heuristic(&k, &[8, 16, 4], 8);
        assert!(lower(&k, &[8, 16], &shapes, &cfg).is_err());
        assert!(lower(&k, &[8, 16, 4], &shapes[..2], &cfg).is_err());
        let bad = CpuConfig {
            vector_axis: Some(2),
            ..cfg
        };
        assert!(lower(&k, &[8, 16, 4], &shapes, &bad).is_err());
        let src = crate::codegen::c::generate(&k, &[8, 16, 4], &shapes, &bad);
        assert!(src.starts_with("#error"), "{src}");
    }
}
