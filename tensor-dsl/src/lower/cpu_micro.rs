//! The CPU register micro-kernel as explicit vector code: a packed tile function (see
//! [`crate::lower::cpu`]) written with vectors of `L` lanes ([`CpuConfig::vector_code`])
//! instead of `u`/`v` loops that the compiler must unroll and vectorize.
//!
//! For a tile of `nu × nv` (`nv` a multiple of `L`) it declares `nu · nv/L` vector
//! accumulators `c<u>_<j>`, and for every reduction point loads the panel row as `nv/L`
//! vectors `b<j>` and adds `body(u0 + u, b<j>)` to each accumulator, where every access of
//! the body other than the packed one is a scalar (a broadcast): on AVX-512 the inner loop
//! is `nv/L` loads, `nu` broadcasts and `nu · nv/L` FMAs on `zmm` registers. The sums are
//! stored straight to the output when it is `f32`, unit-stride along the vector axis and
//! without an epilogue; otherwise through the accumulator array and the scalar epilogue.
//!
//! Why: GCC 12 already turns the loop tile into broadcast + FMA on `zmm`, but zeroes its
//! accumulator array with `memset` before and copies it out through the stack after every
//! tile, which shows on short reductions (a batch of 128×128·128×64 matmuls); the vector
//! tile has neither. Its speed is for the bench to say, on an idle machine.
//!
//! ```
//! use tensor_dsl::{codegen::c, ir::parse_text, template::cpu::CpuConfig};
//! let k = parse_text("mm", "c[[i,j]] += a[[i,k]] * b[[k,j]]", None).unwrap();
//! let shapes: [&[usize]; 3] = [&[8, 5], &[5, 32], &[8, 32]];
//! let cfg = CpuConfig { vector_code: 16, ..CpuConfig::heuristic(&k, &[8, 32, 5], 16) };
//! let src = c::generate(&k, &[8, 32, 5], &shapes, &cfg);
//! assert!(src.contains("c0_1 += (t0[5 * (u0 + 0) + i_k] * b1);"), "{src}");
//! ```

use super::cpu::Lower;
use super::{AssignOp, Binding, Func, Stmt, Target, Ty, Value};
use crate::codegen::strides;
use crate::ir::{Access, BodyKind, Expr, Kernel};
use crate::lower::{Layout, LoopKind};
use crate::template::cpu::{blocked_reduction, pack_stride, CpuConfig};
use crate::template::cpu_machine::CpuMachine;

/// Reduction points ahead of the current one that `stream_prefetch` fetches (512
/// bytes of `f32`: 64 to 256 measured alike on 4096×4096·4096×64).
const PREFETCH_AHEAD: usize = 128;
/// Shortest rows (bytes) that `stream_prefetch` fetches ahead.
const PREFETCH_MIN_ROW_BYTES: usize = 16 << 10;
/// Longest rows (bytes) whose next tile `stream_prefetch` fetches during the current one.
const PREFETCH_NEXT_MAX_ROW_BYTES: usize = 2 << 10;

/// Whether `expr` may be evaluated with `packed` as a vector: the packed access appears
/// only under `+ - * /` and negation (a built-in function of it would be a call on a
/// vector), and the expression reads neither the output nor an intermediate.
fn vector_safe(expr: &Expr, packed: &Access) -> bool {
    fn reads(e: &Expr, packed: &Access) -> bool {
        let mut found = false;
        e.visit_accesses(&mut |a| found |= a == packed);
        found
    }
    match expr {
        Expr::Lit(_) | Expr::Access(_) => true,
        Expr::Output | Expr::Temp(_) => false,
        Expr::Neg(e) => vector_safe(e, packed),
        Expr::Bin(_, a, b) => vector_safe(a, packed) && vector_safe(b, packed),
        Expr::Call(_, args) => args.iter().all(|a| !reads(a, packed)),
    }
}

/// Whether every access of `kernel`'s main statement that walks index `v` is `packed` (the
/// others are broadcast).
fn only_packed_walks(kernel: &Kernel, v: usize, packed: &Access) -> bool {
    let mut ok = true;
    kernel.body.visit_accesses(&mut |a| {
        let walks = a.dims.iter().any(|d| d.terms.iter().any(|&(x, _)| x == v));
        ok &= !walks || a == packed;
    });
    ok
}

/// Whether `config`'s packed tiles of `kernel` may be explicit vector code: it asks for
/// vector code, the kernel sums, and its body is vector-safe with `packed` (along `v`) the
/// only access that walks the vector axis.
fn vector_body(kernel: &Kernel, config: &CpuConfig, v: usize, packed: &Access) -> bool {
    config.vector_code > 0
        && kernel.kind == BodyKind::Sum
        && vector_safe(&kernel.body, packed)
        && only_packed_walks(kernel, v, packed)
}

/// Row stride, in floats, of the packed panel ([`super::cpu::Plan::panel_stride`]): the
/// vector tile itself where its full tiles are explicit vector code (whole vectors, and with
/// a blocked reduction a unit-stride output, as [`Lower::micro_tile`] asks), else
/// [`pack_stride`]'s padded stride, which the compiler-vectorized loop tiles need. `bf16`
/// pairs keep the padded stride.
///
/// Contiguous rows are one sequential stream, and at K = 3072–4096 the padded panel (1.5×
/// the bytes with 16-float tiles) no longer fit L2 beside the rows of the other operand:
/// the untuned default on the Zen 3 VM (AVX2, two cores, generated C side by side, medians
/// of two runs) went from 128 to 144–147 GFLOPS at 512×1024·4096, 120–126 to 139–143 at
/// 512×768·3072 and 149–152 to 156–157 at 512³ (OpenBLAS 129–135, 126–127 and 128)
/// (`bench/results/2026-11-28-zen3-cpu-panel/`).
pub(super) fn panel_stride(
    kernel: &Kernel,
    extents: &[usize],
    shapes: &[&[usize]],
    config: &CpuConfig,
    packed: &Access,
) -> usize {
    let contiguous = config.vector_axis.is_some_and(|v| {
        vector_body(kernel, config, v, packed)
            && config.vector.is_multiple_of(config.vector_code)
            && (blocked_reduction(kernel, extents, config).is_none()
                || out_vector_stride(kernel, shapes, v) == Some(1))
            && !super::cpu_pairs::active(kernel, extents, shapes, config)
    });
    if contiguous {
        config.vector
    } else {
        pack_stride(config.vector)
    }
}

/// The output's element stride along spatial index `v` (of shapes `shapes`), if the output
/// has that axis.
pub(super) fn out_vector_stride(kernel: &Kernel, shapes: &[&[usize]], v: usize) -> Option<usize> {
    let d = kernel.spatial().iter().position(|&s| s == v)?;
    strides(shapes[kernel.output]).get(d).copied()
}

/// The width of the last tile of an axis of `extent` in tiles of `tile`, when it is
/// partial (0 when the tile divides the extent).
fn padded_edge(extent: usize, tile: usize) -> usize {
    if extent < tile {
        extent
    } else {
        extent % tile
    }
}

impl Lower<'_> {
    /// The output's element stride along the vector axis.
    fn out_vector_stride(&self) -> Option<usize> {
        out_vector_stride(self.kernel, self.shapes, self.config.vector_axis?)
    }

    /// Whether the tile sums go straight to the output as vectors: an `f32` output,
    /// unit-stride along the vector axis, without an epilogue.
    fn direct_store(&self) -> bool {
        self.kernel.params[self.kernel.output].dtype == crate::ir::DType::F32
            && self.kernel.epilogue.is_empty()
            && self.out_vector_stride() == Some(1)
    }

    /// Whether the packed tiles may be vector code at all (see [`Self::micro_tile`]).
    fn micro_fits(&self) -> bool {
        let (Some(v), Some(packed)) = (self.config.vector_axis, &self.plan.packed) else {
            return false;
        };
        self.pk.is_some() && vector_body(self.kernel, self.config, v, packed)
    }

    /// The width, in whole vectors, that the edge tile of the vector axis computes when it
    /// is vector code over a zero-padded panel: where the axis ends in a tile that is not
    /// a whole number of vectors, the packed tiles are vector code and the padded width
    /// stays within the tile (a blocked reduction's partial sums of such a tile pass through
    /// the accumulator array). 0 otherwise (the edge tile is a loop the compiler vectorizes).
    ///
    /// With 8-row tiles where the rows do not divide the axis (`CpuConfig::heuristic_for`),
    /// the untuned default went from 118 to 489 GFLOPS on a 2000×500·500×30 matmul (a
    /// 16-wide tile and a 14-wide loop before, one padded 32-wide tile now) and from 233
    /// to 487 on 777×555·555×333 (2 cores, AVX-512, generated C timed side by side).
    pub(super) fn edge_vector_pad(&self) -> usize {
        let lanes = self.config.vector_code;
        let edge = padded_edge(self.ext(self.config.vector_axis), self.config.vector);
        if lanes == 0 || edge == 0 || edge.is_multiple_of(lanes) {
            return 0;
        }
        let pad = edge.next_multiple_of(lanes);
        if pad > self.config.vector || !self.micro_fits() {
            return 0;
        }
        pad
    }

    /// `if (<point> is a multiple of step && below count * step) __builtin_prefetch(&element)`:
    /// `count` prefetches spread evenly over a reduction loop of index `point`.
    fn spread_prefetch(point: &str, count: usize, step: usize, element: &str) -> Stmt {
        let mut cond = format!("{point} < {}", count * step);
        if step > 1 {
            cond = format!("({point} & {}) == 0 && {cond}", step - 1);
        }
        Stmt::If {
            cond,
            then: vec![Stmt::Call {
                func: "__builtin_prefetch".into(),
                args: vec![format!("&{element}"), "0".into(), "3".into()],
            }],
            els: None,
            braced: true,
        }
    }

    /// Software prefetches of the rows a tile broadcasts from, [`PREFETCH_AHEAD`] reduction
    /// points ahead, once per cache line: for each broadcast access whose last coordinate is
    /// the innermost reduction index (a row read along it), whose tensor outgrows the L3
    /// cache (its rows come from memory at every tile) and whose rows are at least
    /// [`PREFETCH_MIN_ROW_BYTES`] long (a tile's rows pages apart: the hardware prefetcher
    /// follows rows of 4 KiB, which a tile reads as one contiguous block). Alone it left
    /// 4096×4096·4096×64 at 360–410 GFLOPS on two cores, 455–470 with these; with the operand
    /// in L3 they cost 1–2.5%, with 4 KiB rows 3–5%
    /// (`bench/results/2026-11-26-cpu-stream-prefetch.md`). Without such rows, short rows
    /// get [`Self::next_rows_prefetch`], batched blocks [`Self::next_batch_prefetch`].
    /// `at(u, 0)` gives the index strings of row `u` of the tile.
    pub(super) fn stream_prefetch(
        &self,
        nu: usize,
        at: &dyn Fn(usize, usize) -> Vec<String>,
        packed: &Access,
    ) -> Option<Stmt> {
        let &inner = self.kernel.reduction().last()?;
        let l3 = CpuMachine::with_lanes(self.config.vector_code.max(1)).l3_bytes;
        let mut rows: Vec<Access> = Vec::new();
        self.kernel.body.visit_accesses(&mut |a| {
            let shape = self.shapes[a.tensor];
            let size = self.kernel.params[a.tensor].dtype.size();
            let bytes = shape.iter().product::<usize>() * size;
            let row = shape.last().copied().unwrap_or(0) * size;
            if a != packed
                && bytes > l3
                && row >= PREFETCH_MIN_ROW_BYTES
                && a.dims.last().and_then(|d| d.as_var()) == Some(inner)
                && !rows.contains(a)
            {
                rows.push(a.clone());
            }
        });
        let Some(first) = rows.first() else {
            return self
                .next_rows_prefetch(nu, at, packed)
                .or_else(|| self.next_batch_prefetch(at, packed));
        };
        let line = 64 / self.kernel.params[first.tensor].dtype.size();
        let mut calls: Vec<Stmt> = Vec::new();
        for a in &rows {
            for u in 0..nu {
                let mut index = at(u, 0);
                index[inner] = format!("({} + {PREFETCH_AHEAD})", self.names[inner]);
                let element = self.printer(index).stored(a)?;
                let call = Stmt::Call {
                    func: "__builtin_prefetch".into(),
                    args: vec![format!("&{element}"), "0".into(), "3".into()],
                };
                if !calls.contains(&call) {
                    calls.push(call);
                }
            }
        }
        Some(Stmt::If {
            cond: format!("({} & {}) == 0", self.names[inner], line - 1),
            then: calls,
            els: None,
            braced: true,
        })
    }

    /// Software prefetches of the next tile's rows, spread over the current tile's
    /// reduction loop, for rows too short for the hardware prefetcher to ramp up on: a
    /// broadcast access read along the only reduction index, whole rows per tile (no
    /// reduction blocks) of at most [`PREFETCH_NEXT_MAX_ROW_BYTES`], one row per unroll
    /// step (rows contiguous along the unroll axis, walked innermost: the next tile's rows
    /// follow the current ones in memory, and a batch's last tile's the next batch's), in a
    /// tensor that outgrows the L3 cache. On 960 batched 128×128·128×64 products (512-byte
    /// rows, 63 MB of them) the tile waited on memory: 160 GFLOPS on two Zen 4 cores, 227
    /// with the batches in cache, 191–195 with these prefetches (generated C side by side).
    fn next_rows_prefetch(
        &self,
        nu: usize,
        at: &dyn Fn(usize, usize) -> Vec<String>,
        packed: &Access,
    ) -> Option<Stmt> {
        let ua = self.config.unroll_axis?;
        let [inner] = self.kernel.reduction()[..] else {
            return None;
        };
        if self.config.unroll_outer
            || (self.config.k_block > 0 && self.config.k_block < self.ext(Some(inner)))
        {
            return None;
        }
        let k = self.ext(Some(inner));
        let l3 = CpuMachine::with_lanes(self.config.vector_code.max(1)).l3_bytes;
        let mut found: Option<Access> = None;
        self.kernel.body.visit_accesses(&mut |a| {
            let shape = self.shapes[a.tensor];
            let size = self.kernel.params[a.tensor].dtype.size();
            let n = a.dims.len();
            let row = shape.last().copied().unwrap_or(0);
            if a != packed
                && found.is_none()
                && n >= 2
                && shape.iter().product::<usize>() * size > l3
                && row == k
                && row * size <= PREFETCH_NEXT_MAX_ROW_BYTES
                && a.dims[n - 1].as_var() == Some(inner)
                && a.dims[n - 2].as_var() == Some(ua)
            {
                found = Some(a.clone());
            }
        });
        let a = found?;
        let line = 64 / self.kernel.params[a.tensor].dtype.size();
        let lines_per_row = k.div_ceil(line);
        let lines = nu * lines_per_row;
        if lines > k {
            return None;
        }
        // One line every `step` reduction points (a power of two), all within the loop.
        let step = 1usize << (k / lines).ilog2();
        let point = self.names[inner].clone();
        let n = format!("({point} / {step})");
        let mut index = at(0, 0);
        index[ua] = format!("(u0 + {nu} + {n} / {lines_per_row})");
        index[inner] = format!("({n} % {lines_per_row} * {line})");
        let element = self.printer(index).stored(&a)?;
        Some(Self::spread_prefetch(&point, lines, step, &element))
    }

    /// Software prefetches of the next batch's block of a batched product, each tile
    /// fetching its share (the batch's lines split evenly over its tiles, spread over the
    /// tile's reduction loop): for a broadcast access whose first coordinate is the only
    /// index outside the tiles (the batch), whose other coordinates are the unroll axis and
    /// the only reduction index (either order: a batch's block is contiguous), read whole
    /// (no reduction blocks), where the kernel's tensors together outgrow the L3 cache. A
    /// tile reads its
    /// block's lines a few at a time at strides the hardware prefetcher does not follow
    /// ahead of the batch: 960 batched 64×64 products over 128 with a transposed left
    /// operand ran at 163–166 GFLOPS on two Zen 4 cores, 185–189 with these (generated C
    /// side by side); in bf16 (the pairs kernel) 292–303 and 336–348.
    fn next_batch_prefetch(
        &self,
        at: &dyn Fn(usize, usize) -> Vec<String>,
        packed: &Access,
    ) -> Option<Stmt> {
        let ua = self.config.unroll_axis?;
        let va = self.config.vector_axis?;
        let [inner] = self.kernel.reduction()[..] else {
            return None;
        };
        let [batch] = self
            .kernel
            .spatial()
            .into_iter()
            .filter(|&v| v != ua && v != va)
            .collect::<Vec<_>>()[..]
        else {
            return None;
        };
        let k = self.ext(Some(inner));
        if self.config.k_block > 0 && self.config.k_block < k {
            return None;
        }
        // Every operand streams batch by batch: their bytes together against the L3.
        let l3 = CpuMachine::with_lanes(self.config.vector_code.max(1)).l3_bytes;
        let total: usize = (0..self.kernel.params.len())
            .map(|p| self.shapes[p].iter().product::<usize>() * self.kernel.params[p].dtype.size())
            .sum();
        if total <= l3 {
            return None;
        }
        let mut found: Option<Access> = None;
        self.kernel.body.visit_accesses(&mut |a| {
            let shape = self.shapes[a.tensor];
            let vars: Vec<Option<usize>> = a.dims.iter().map(|d| d.as_var()).collect();
            let block = [Some(ua), Some(inner)];
            if a != packed
                && found.is_none()
                && vars.len() == 3
                && vars[0] == Some(batch)
                && (vars[1..] == block || vars[1..] == [Some(inner), Some(ua)])
                && shape[1..] == [self.ext(vars[1]), self.ext(vars[2])]
            {
                found = Some(a.clone());
            }
        });
        let a = found?;
        let size = self.kernel.params[a.tensor].dtype.size();
        let line = 64 / size;
        let block = self.shapes[a.tensor][1..].iter().product::<usize>();
        let (us, vs) = (
            self.ext(Some(ua)).div_ceil(self.config.unroll),
            self.ext(Some(va)).div_ceil(self.config.vector),
        );
        let tiles = us * vs;
        let per_tile = block.div_ceil(line).div_ceil(tiles);
        if per_tile == 0 || per_tile > k {
            return None;
        }
        let step = 1usize << (k / per_tile).ilog2();
        // The tile's number within its batch, in the tile loops' order.
        let (u_tile, v_tile) = (
            format!("u0 / {}", self.config.unroll),
            format!("v0 / {}", self.config.vector),
        );
        let tile = if self.config.unroll_outer {
            format!("({u_tile} * {vs} + {v_tile})")
        } else {
            format!("({v_tile} * {us} + {u_tile})")
        };
        // The next batch's block starts at coordinates (batch + 1, 0, 0); its last
        // coordinate (unit stride) carries this tile's line within it.
        let point = self.names[inner].clone();
        let last = a.dims[2].as_var()?;
        let mut index = at(0, 0);
        index[batch] = format!("({} + 1)", self.names[batch]);
        index[ua] = "0".into();
        index[inner] = "0".into();
        index[last] = format!("(({tile} * {per_tile} + {point} / {step}) * {line})");
        let element = self.printer(index).stored(&a)?;
        Some(Self::spread_prefetch(&point, per_tile, step, &element))
    }

    /// The packed tile function of `size` as vector code (see the module documentation),
    /// if it has one: the config asks for vector code of `L` lanes, the tile's width is a
    /// multiple of `L` (or it is the axis's zero-padded last tile, [`Self::edge_vector_pad`]),
    /// the kernel sums a vector-safe body whose only access along the vector axis is the
    /// packed one, and (with a blocked reduction, whose partial sums of whole tiles are
    /// reloaded as vectors) the output is unit-stride along the vector axis.
    pub(super) fn micro_tile(&self, name: &str, (nu, nv): (usize, usize)) -> Option<Func> {
        let lanes = self.config.vector_code;
        let packed = self.plan.packed.clone()?;
        let pk = self.pk?;
        let padded = self.edge_vector_pad();
        let fits = self.micro_fits()
            && (nv.is_multiple_of(lanes)
                && (self.plan.block.is_none() || self.out_vector_stride() == Some(1))
                || padded > 0
                    && nv == padded_edge(self.ext(self.config.vector_axis), self.config.vector));
        if !fits {
            return None;
        }
        // An edge tile narrower than whole vectors computes them over the panel's zero
        // padding and stores only its own lanes, through the accumulator array.
        let vectors = nv.div_ceil(lanes);
        let whole = nv.is_multiple_of(lanes);
        let acc = |u: usize, j: usize| format!("c{u}_{j}");
        let tiles = || (0..nu).flat_map(move |u| (0..vectors).map(move |j| (u, j)));
        // The index strings of tile element (u, the first lane of vector j).
        let at = |u: usize, j: usize| {
            let mut index = self.names.clone();
            if let Some(ua) = self.config.unroll_axis {
                index[ua] = format!("(u0 + {u})");
            }
            if let Some(va) = self.config.vector_axis {
                index[va] = format!("(v0 + {})", j * lanes);
            }
            index
        };
        let out_lanes = |u: usize, j: usize| Target::Lanes {
            buf: self.out,
            index: vec![self.out_offset_at(&at(u, j))],
            width: lanes,
        };
        let set = |dst: Target, value: Value| Stmt::Assign {
            dst,
            op: AssignOp::Set,
            value,
        };

        let mut body = vec![
            Stmt::Assume(self.tile_facts((nu, nv))),
            Stmt::Let {
                ty: Ty::Vector(lanes),
                konst: false,
                defs: tiles()
                    .map(|(u, j)| (acc(u, j), Value::Float(0.0)))
                    .collect(),
            },
        ];
        // A partial tile's sums pass through the accumulator array, whose rows hold whole
        // vectors: into it from the output's lanes, out of it to them.
        let acc_lanes = |u: usize, j: usize| Target::Lanes {
            buf: self.acc,
            index: vec![u.to_string(), (j * lanes).to_string()],
            width: lanes,
        };
        let acc_uv = self.elem(self.acc, &["u", "v"]);
        let out_uv = self.elem(self.out, &[&self.out_offset()]);
        if !whole {
            body.push(Stmt::Alloc {
                buf: self.acc,
                init: None,
            });
        }
        if self.plan.block.is_some() {
            // Later blocks continue from the partial sums the earlier ones stored.
            let then = if whole {
                tiles()
                    .map(|(u, j)| set(Target::Var(acc(u, j)), Value::Read(out_lanes(u, j))))
                    .collect()
            } else {
                let mut then = vec![self.tile_loops(
                    (nu, nv),
                    false,
                    vec![set(acc_uv.clone(), Value::Read(out_uv.clone()))],
                )];
                then.extend(
                    tiles().map(|(u, j)| set(Target::Var(acc(u, j)), Value::Read(acc_lanes(u, j)))),
                );
                then
            };
            body.push(Stmt::If {
                cond: "k0 != 0".into(),
                then,
                els: None,
                braced: true,
            });
        }

        if self.pairs {
            body.extend(self.pair_steps(nu, vectors, &packed, pk, &at));
        } else {
            body.extend(self.point_steps(nu, vectors, &packed, pk, &at));
        }

        // Partial sums of a block that is not the last go back to the output.
        if let Some((r0, _)) = self.plan.block {
            let mut then: Vec<Stmt> = if whole {
                tiles()
                    .map(|(u, j)| set(out_lanes(u, j), Value::Read(Target::Var(acc(u, j)))))
                    .collect()
            } else {
                let mut then: Vec<Stmt> = tiles()
                    .map(|(u, j)| set(acc_lanes(u, j), Value::Read(Target::Var(acc(u, j)))))
                    .collect();
                then.push(self.tile_loops(
                    (nu, nv),
                    false,
                    vec![set(out_uv.clone(), Value::Read(acc_uv.clone()))],
                ));
                then
            };
            then.push(Stmt::Return);
            body.push(Stmt::If {
                cond: format!("k0 + nk < {}", self.extents[r0]),
                then,
                els: None,
                braced: true,
            });
        }
        if whole && self.direct_store() {
            body.extend(
                tiles().map(|(u, j)| set(out_lanes(u, j), Value::Read(Target::Var(acc(u, j))))),
            );
        } else {
            // Through the accumulator array, then the epilogue and the store of each element.
            if whole {
                body.push(Stmt::Alloc {
                    buf: self.acc,
                    init: None,
                });
            }
            body.extend(
                tiles().map(|(u, j)| set(acc_lanes(u, j), Value::Read(Target::Var(acc(u, j))))),
            );
            body.push(self.epilogue_stores((nu, nv)));
        }
        Some(Func {
            name: name.into(),
            params: self.tile_params(true),
            body,
        })
    }

    /// The reduction loops of a plain vector tile of `nu` rows and `vectors` vectors: per
    /// reduction point, the panel row as vectors, then every accumulator.
    fn point_steps(
        &self,
        nu: usize,
        vectors: usize,
        packed: &Access,
        pk: super::BufId,
        at: &dyn Fn(usize, usize) -> Vec<String>,
    ) -> Vec<Stmt> {
        let lanes = self.config.vector_code;
        let tiles = || (0..nu).flat_map(move |u| (0..vectors).map(move |j| (u, j)));
        let row = self.reduction_point();
        let stride = self.plan.panel_stride;
        let mut step = vec![Stmt::Let {
            ty: Ty::Vector(lanes),
            konst: true,
            defs: (0..vectors)
                .map(|j| {
                    let b = Target::Lanes {
                        buf: pk,
                        index: vec![format!("({row}) * {stride} + {}", j * lanes)],
                        width: lanes,
                    };
                    (format!("b{j}"), Value::Read(b))
                })
                .collect(),
        }];
        step.extend(self.stream_prefetch(nu, at, packed));
        for (u, j) in tiles() {
            step.push(Stmt::Compute {
                acc: Target::Var(format!("c{u}_{j}")),
                reduce: true,
                value: Value::Kernel {
                    expr: self.kernel.body.clone(),
                    binding: Binding {
                        index: at(u, j),
                        reads: vec![(packed.clone(), format!("b{j}"))],
                    },
                },
            });
        }
        // The body is vector code, which the compiler does not vectorize again: the
        // innermost loop is unrolled ([`super::cpu::UNROLL_REDUCTION`]), the others in order.
        self.reduction_loops(
            LoopKind::InOrder,
            LoopKind::Unrolled(super::cpu::UNROLL_REDUCTION),
            Layout::Flat,
            vec![Stmt::Block(step)],
        )
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use crate::codegen::c;
    use crate::ir::{bind, parse_text};
    use crate::template::cpu::CpuConfig;

    /// The default's C for a matmul of these extents (`m × k · k × n`).
    fn default_c(m: usize, n: usize, k: usize) -> String {
        let kernel = parse_text("mm", "c[[i,j]] += a[[i,k]] * b[[k,j]]", None).unwrap();
        let shapes: [&[usize]; 3] = [&[m, k], &[k, n], &[m, n]];
        let extents = bind(&kernel, &shapes).unwrap();
        let cfg = CpuConfig::heuristic(&kernel, &extents, 16);
        c::generate(&kernel, &extents, &shapes, &cfg)
    }

    #[test]
    fn rows_streamed_from_memory_are_fetched_ahead() {
        // A 1 GiB left operand (larger than any L3) of 64 KiB rows: each of the tile's 8 rows
        // fetched 128 points ahead, once per 16.
        let big = default_c(16384, 64, 16384);
        assert_eq!(big.matches("__builtin_prefetch").count(), 8, "{big}");
        assert!(big.contains("if ((i_k & 15) == 0) {"), "{big}");
        assert!(big.contains("__builtin_prefetch(&t0[16384 * (u0 + 7) + (i_k + 128)], 0, 3);"));
        // In cache, or rows of 4 KiB (the hardware prefetcher's): none.
        assert!(!default_c(512, 512, 512).contains("__builtin_prefetch"));
        assert!(!default_c(65536, 64, 1024).contains("__builtin_prefetch"));
    }

    #[test]
    fn short_rows_from_memory_fetch_the_next_tile() {
        let batched = |b: usize| {
            let kernel = parse_text("bmm", "c[[b,i,j]] += a[[b,i,k]] * w[[b,k,j]]", None).unwrap();
            let shapes: [&[usize]; 3] = [&[b, 128, 128], &[b, 128, 64], &[b, 128, 64]];
            let extents = bind(&kernel, &shapes).unwrap();
            let cfg = CpuConfig::heuristic(&kernel, &extents, 16);
            (cfg.unroll, c::generate(&kernel, &extents, &shapes, &cfg))
        };
        // 16384 batches of 128 rows of 512 bytes (1 GiB): the next tile's rows, one line
        // every few reduction points, all fetched within the loop.
        let (nu, big) = batched(16384);
        // One in the full tile's loop (and one in the edge tile's, where the rows do not
        // divide the axis).
        let edge = usize::from(128 % nu != 0);
        assert_eq!(big.matches("__builtin_prefetch").count(), 1 + edge, "{big}");
        let lines = nu * 8;
        let step = 1 << (128 / lines).ilog2();
        assert!(
            big.contains(&format!(
                "__builtin_prefetch(&t0[16384 * i_b + 128 * (u0 + {nu} + (i_k / {step}) / 8) + ((i_k / {step}) % 8 * 16)], 0, 3);"
            )),
            "{big}"
        );
        // In cache: none.
        assert!(!batched(16).1.contains("__builtin_prefetch"));
    }

    #[test]
    fn batched_blocks_from_memory_fetch_the_next_batch() {
        // 960 products of a transposed 128×64 block: each of the batch's tiles fetches its
        // share of the next batch's 512 lines.
        let kernel = parse_text("bmm", "c[[b,i,j]] += a[[b,k,i]] * w[[b,k,j]]", None).unwrap();
        let c_of = |b: usize| {
            let shapes: [&[usize]; 3] = [&[b, 128, 64], &[b, 128, 64], &[b, 64, 64]];
            let extents = bind(&kernel, &shapes).unwrap();
            let cfg = CpuConfig::heuristic(&kernel, &extents, 16);
            let src = c::generate(&kernel, &extents, &shapes, &cfg);
            (cfg, src)
        };
        let (cfg, big) = c_of(16384);
        let edge = usize::from(64 % cfg.unroll != 0);
        assert_eq!(big.matches("__builtin_prefetch").count(), 1 + edge, "{big}");
        let tiles = 64usize.div_ceil(cfg.unroll) * 64usize.div_ceil(cfg.vector);
        let per_tile = 512usize.div_ceil(tiles);
        assert!(
            big.contains("__builtin_prefetch(&t0[8192 * (i_b + 1)"),
            "{big}"
        );
        assert!(big.contains(&format!("* {per_tile} + i_k / ")), "{big}");
        assert!(!c_of(16).1.contains("__builtin_prefetch"));
    }
}
