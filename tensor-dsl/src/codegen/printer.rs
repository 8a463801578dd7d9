//! The one printer of lowered loop nests ([`crate::lower::Nest`]). It walks the nest and
//! writes C; a [`Dialect`] supplies only what differs between targets: element types,
//! function heads, pragmas, hardware indices, barriers, shuffles, shared memory and panels.
//! The C dialect is [`super::c::CDialect`], the CUDA one [`super::cuda::CudaDialect`].
//!
//! ```
//! use tensor_dsl::codegen::{c::CDialect, printer};
//! use tensor_dsl::{ir::parse_text, lower, template::cpu::CpuConfig};
//! let k = parse_text("mm", "c[[i,j]] += a[[i,k]] * b[[k,j]]", None).unwrap();
//! let shapes: [&[usize]; 3] = [&[64, 48], &[48, 40], &[64, 40]];
//! let cfg = CpuConfig { parallel: true, ..CpuConfig::heuristic(&k, &[64, 40, 48], 8) };
//! let nest = lower::cpu::lower(&k, &[64, 40, 48], &shapes, &cfg).unwrap();
//! let text = printer::print(&nest, &CDialect).unwrap();
//! assert!(text.contains("#pragma omp for collapse(2) schedule(guided)"));
//! // The CUDA dialect has no parallel region: a CPU nest does not print as CUDA.
//! assert!(printer::print(&nest, &tensor_dsl::codegen::cuda::CudaDialect).is_err());
//! ```

use super::{float_lit, ExprPrinter};
use crate::ir::DType;
use crate::lower::{
    AssignOp, BindPart, Binding, Buffer, CopyMode, Func, HwIndex, Layout, Loop, LoopKind,
    ModuleArray, Nest, Param, Stage, Step, Stmt, Target, Ty, Value,
};

/// Lines of text at an indentation depth (four spaces a level).
#[derive(Default)]
pub struct Lines {
    pub text: String,
}

impl Lines {
    /// Appends `line` at `depth`.
    pub fn line(&mut self, depth: usize, line: &str) {
        for _ in 0..depth {
            self.text.push_str("    ");
        }
        self.text.push_str(line);
        self.text.push('\n');
    }
}

/// What the printer asks about the loop it is about to print a pragma for.
#[derive(Clone, Copy, Debug)]
pub struct LoopContext {
    /// Loops in the collapsed band this loop heads (1 for a lone loop).
    pub collapse: usize,
    /// Whether the loop is inside a parallel [`Stmt::Region`].
    pub in_region: bool,
    /// The loop's most iterations ([`Loop::trip`]).
    pub trip: usize,
}

fn unsupported<T>(what: &str) -> Result<T, String> {
    Err(format!("{what} cannot be printed in this dialect"))
}

/// What differs between the C and CUDA spellings of a nest. Methods with a default are
/// the ones a dialect may not support (the default refuses).
pub trait Dialect {
    /// The spelling of an element type: every buffer, parameter and value type is printed
    /// through here (the C spelling unless a dialect differs).
    fn storage_type(&self, dtype: DType) -> &'static str {
        super::storage_type(dtype)
    }

    /// The pointer qualifier `restrict` of this dialect.
    fn restrict(&self) -> &'static str;

    /// Qualifiers before a helper function's return type.
    fn helper_qualifiers(&self) -> &'static str;

    /// The entry function's head through its opening brace, and whatever binds its
    /// buffers (at depth 1). `params` are the parameters as printed by [`Dialect::param`].
    fn entry_head(
        &self,
        nest: &Nest,
        func: &Func,
        params: &[String],
        out: &mut Lines,
    ) -> Result<(), String>;

    /// The pragma before a loop, if any.
    fn loop_pragma(&self, kind: LoopKind, cx: LoopContext) -> Result<Option<String>, String>;

    /// An assumption ([`Stmt::Assume`]) as a statement, or nothing: by default it is dropped.
    fn assume(&self, _cond: &str) -> Result<Option<String>, String> {
        Ok(None)
    }

    /// The pragma opening a parallel region.
    fn parallel_region(&self) -> Result<&'static str, String> {
        unsupported("a parallel region")
    }

    /// A hardware index.
    fn hw_index(&self, hw: HwIndex) -> Result<&'static str, String> {
        unsupported(&format!("hardware index {hw:?}"))
    }

    /// A barrier among the threads of a block.
    fn barrier(&self) -> Result<&'static str, String> {
        unsupported("a barrier")
    }

    /// `value` of lane `lane ^ this lane`.
    fn shuffle_xor(&self, mask: &str, value: &str, lane: &str) -> Result<String, String> {
        let _ = (mask, value, lane);
        unsupported("a warp shuffle")
    }

    /// The declaration of a shared-memory buffer.
    fn alloc_shared(&self, buf: &Buffer) -> Result<String, String> {
        unsupported(&format!("shared buffer `{}`", buf.name))
    }

    /// The attribute (with a trailing space) that aligns a register array to `bytes`, for
    /// vector accesses of it.
    fn align(&self, bytes: usize) -> Result<String, String> {
        unsupported(&format!("a register array aligned to {bytes} bytes"))
    }

    /// The declaration of a module-scope array.
    fn module_array(&self, array: &ModuleArray) -> Result<String, String> {
        unsupported(&format!("module array `{}`", array.name))
    }

    /// The 32-bit shared-memory address of shared buffer `name`'s first element.
    fn shared_address(&self, name: &str) -> Result<String, String> {
        unsupported(&format!("the shared address of `{name}`"))
    }

    /// An asynchronous copy of `bytes` from the element at `src` (a pointer expression) to
    /// shared address `dst`, zero-filling when `ok` (if any) is false.
    fn async_copy(
        &self,
        dst: &str,
        src: &str,
        bytes: usize,
        ok: Option<&str>,
    ) -> Result<String, String> {
        let _ = (dst, src, ok);
        unsupported(&format!("an asynchronous copy of {bytes} bytes"))
    }

    /// Closes this thread's group of asynchronous copies.
    fn async_commit(&self) -> Result<String, String> {
        unsupported("an asynchronous copy group")
    }

    /// Waits until at most `n` groups of asynchronous copies are pending.
    fn async_wait(&self, n: usize) -> Result<String, String> {
        unsupported(&format!("a wait for asynchronous copies ({n})"))
    }

    /// The allocation of a per-thread panel (a null pointer when out of memory); `slot`
    /// numbers the nest's panels from 0 (their order in the nest's buffers).
    fn alloc_panel(&self, buf: &Buffer, slot: usize) -> Result<String, String> {
        let _ = slot;
        unsupported(&format!("panel `{}`", buf.name))
    }

    /// The release of a per-thread panel.
    fn free_panel(&self, buf: &Buffer, slot: usize) -> Result<String, String> {
        let _ = slot;
        unsupported(&format!("panel `{}`", buf.name))
    }

    /// A vector of `width` elements.
    fn vector_type(&self, dtype: DType, width: usize) -> Result<String, String> {
        unsupported(&format!("a vector of {width} {dtype:?}"))
    }

    /// The object of type `ty` at pointer expression `ptr`.
    fn deref_as(&self, ty: &str, ptr: &str) -> String {
        format!("*({ty} *)({ptr})")
    }

    /// A parameter's declaration.
    fn param(&self, nest: &Nest, p: &Param) -> Result<String, String> {
        match p {
            Param::Buffer { buf, konst } => {
                let b = buffer(nest, *buf)?;
                Ok(format!(
                    "{}{} *{} {}",
                    if *konst { "const " } else { "" },
                    self.storage_type(b.dtype),
                    self.restrict(),
                    b.name
                ))
            }
            Param::Scalar { ty, name } => Ok(format!("const {} {name}", ty.spelling())),
        }
    }
}

/// The position of panel `b` among the nest's panels.
fn panel_slot(nest: &Nest, b: &Buffer) -> usize {
    nest.scoped(crate::lower::Scope::Panel)
        .position(|p| p.name == b.name)
        .unwrap_or(0)
}

fn buffer<'n>(nest: &'n Nest, id: crate::lower::BufId) -> Result<&'n Buffer, String> {
    nest.buffer(id)
        .ok_or_else(|| format!("the nest has no buffer {}", id.0))
}

/// Prints `nest` with `dialect`: the module-scope arrays (then a blank line), the helper
/// functions (each followed by a blank line), then the entry point.
pub fn print(nest: &Nest, dialect: &dyn Dialect) -> Result<String, String> {
    let p = Printer { nest, d: dialect };
    let mut out = Lines::default();
    for a in &nest.globals {
        out.line(0, &dialect.module_array(a)?);
    }
    if !nest.globals.is_empty() {
        out.line(0, "");
    }
    for f in &nest.helpers {
        let params = p.params(f)?;
        out.line(
            0,
            &format!(
                "{}void {}({})",
                dialect.helper_qualifiers(),
                f.name,
                params.join(", ")
            ),
        );
        out.line(0, "{");
        p.stmts(&mut out, 1, &f.body, false)?;
        out.line(0, "}");
        out.line(0, "");
    }
    let entries =
        std::iter::once(&nest.entry).chain(nest.prepack.iter().flat_map(|pp| [&pp.fill, &pp.run]));
    for (n, f) in entries.enumerate() {
        if n > 0 {
            out.line(0, "");
        }
        let params = p.params(f)?;
        dialect.entry_head(nest, f, &params, &mut out)?;
        p.stmts(&mut out, 1, &f.body, false)?;
        out.line(0, "}");
    }
    Ok(out.text)
}

struct Printer<'a> {
    nest: &'a Nest<'a>,
    d: &'a dyn Dialect,
}

impl Printer<'_> {
    fn params(&self, f: &Func) -> Result<Vec<String>, String> {
        f.params
            .iter()
            .map(|p| self.d.param(self.nest, p))
            .collect()
    }

    fn target(&self, t: &Target) -> Result<String, String> {
        match t {
            Target::Var(v) => Ok(v.clone()),
            Target::Elem { buf, index } => Ok(self.elem(*buf, index)?),
            Target::Lanes { buf, index, width } => {
                let vt = self.d.vector_type(crate::lower::COMPUTE, *width)?;
                Ok(self
                    .d
                    .deref_as(&vt, &format!("&{}", self.elem(*buf, index)?)))
            }
        }
    }

    /// `name[i0][i1]...`.
    fn elem(&self, buf: crate::lower::BufId, index: &[String]) -> Result<String, String> {
        let mut s = buffer(self.nest, buf)?.name.clone();
        for i in index {
            s.push('[');
            s.push_str(i);
            s.push(']');
        }
        Ok(s)
    }

    fn exprs(&self, binding: &Binding) -> Result<ExprPrinter<'_>, String> {
        let k = self.nest.kernel;
        let tensor = (0..k.params.len())
            .map(|p| {
                self.nest
                    .param_buffer(p)
                    .map_or_else(|| format!("t{p}"), |b| b.name.clone())
            })
            .collect();
        Ok(ExprPrinter {
            kernel: k,
            shapes: self.nest.shapes,
            extents: &self.nest.domain,
            index: binding.index.clone(),
            tensor,
            output: "x".into(),
            packed: None,
        })
    }

    fn value(&self, v: &Value) -> Result<String, String> {
        match v {
            Value::Code(c) => Ok(c.clone()),
            Value::Float(f) => Ok(float_lit(*f)),
            Value::Hw(h) => self.d.hw_index(*h).map(String::from),
            Value::SharedAddress(b) => self.d.shared_address(&buffer(self.nest, *b)?.name),
            Value::Read(t) => self.target(t),
            Value::Kernel { expr, binding } => {
                let p = self.exprs(binding)?;
                Ok(p.expr_with(expr, &|a| {
                    binding
                        .reads
                        .iter()
                        .find(|(r, _)| r == a)
                        .map(|(_, s)| s.clone())
                }))
            }
            Value::Global { access, binding } => Ok(self.exprs(binding)?.global(access)),
            Value::ShuffleXor { mask, value, lane } => {
                self.d.shuffle_xor(mask, &self.target(value)?, lane)
            }
        }
    }

    fn ty(&self, t: Ty) -> Result<String, String> {
        match t {
            Ty::Int(i) => Ok(i.spelling().into()),
            Ty::Elem(d) => Ok(self.d.storage_type(d).into()),
            Ty::Vector(n) => self.d.vector_type(crate::lower::COMPUTE, n),
            Ty::Ptr(d) => Ok(format!("{} *", self.d.storage_type(d))),
        }
    }

    fn stmts(
        &self,
        out: &mut Lines,
        depth: usize,
        body: &[Stmt],
        in_region: bool,
    ) -> Result<(), String> {
        for s in body {
            self.stmt(out, depth, s, in_region)?;
        }
        Ok(())
    }

    fn stmt(&self, out: &mut Lines, d: usize, s: &Stmt, in_region: bool) -> Result<(), String> {
        match s {
            Stmt::Comment(c) => out.line(d, &format!("/* {c} */")),
            Stmt::Let { ty, konst, defs } => {
                let spelled = self.ty(*ty)?;
                let defs = defs
                    .iter()
                    .map(|(n, v)| match (ty, v) {
                        // A vector from a scalar literal: every lane set to it (lanes
                        // an initialiser leaves out are zero).
                        (Ty::Vector(_), Value::Float(f)) if *f == 0.0 => {
                            Ok(format!("{n} = ({spelled}){{{}}}", float_lit(0.0)))
                        }
                        (Ty::Vector(lanes), Value::Float(f)) => Ok(format!(
                            "{n} = ({spelled}){{{}}}",
                            vec![float_lit(*f); *lanes].join(", ")
                        )),
                        _ => Ok(format!("{n} = {}", self.value(v)?)),
                    })
                    .collect::<Result<Vec<_>, String>>()?;
                out.line(
                    d,
                    &format!(
                        "{}{spelled} {};",
                        if *konst { "const " } else { "" },
                        defs.join(", ")
                    ),
                );
            }
            Stmt::Alloc { buf, init } => {
                let b = buffer(self.nest, *buf)?;
                let line = match b.scope {
                    crate::lower::Scope::Register => {
                        let dims: String = b.dims.iter().map(|n| format!("[{n}]")).collect();
                        let init = match init {
                            Some(v) => format!(" = {}", self.value(v)?),
                            None => String::new(),
                        };
                        let align = b.align.map_or(Ok(String::new()), |a| self.d.align(a))?;
                        format!(
                            "{align}{} {}{dims}{init};",
                            self.d.storage_type(b.dtype),
                            b.name
                        )
                    }
                    crate::lower::Scope::Shared => self.d.alloc_shared(b)?,
                    crate::lower::Scope::Panel => {
                        self.d.alloc_panel(b, panel_slot(self.nest, b))?
                    }
                    crate::lower::Scope::Global => {
                        return Err(format!("global buffer `{}` cannot be allocated", b.name))
                    }
                };
                out.line(d, &line);
            }
            Stmt::Free(buf) => {
                let b = buffer(self.nest, *buf)?;
                out.line(d, &self.d.free_panel(b, panel_slot(self.nest, b))?)
            }
            Stmt::Bind { src, ty, parts } => self.bind(out, d, &self.value(src)?, *ty, parts),
            Stmt::Loop(l) => self.lp(out, d, l, in_region, false)?,
            Stmt::If {
                cond,
                then,
                els,
                braced,
            } => {
                if *braced {
                    out.line(d, &format!("if ({cond}) {{"));
                    self.stmts(out, d + 1, then, in_region)?;
                    if let Some(e) = els {
                        out.line(d, "} else {");
                        self.stmts(out, d + 1, e, in_region)?;
                    }
                    out.line(d, "}");
                } else {
                    // An `else` holding only another unbraced `if` prints as `else if`.
                    let (mut cond, mut then, mut els, mut head) = (cond, then, els, "if");
                    loop {
                        out.line(d, &format!("{head} ({cond})"));
                        self.stmts(out, d + 1, then, in_region)?;
                        match els.as_deref() {
                            Some(
                                [Stmt::If {
                                    cond: c,
                                    then: t,
                                    els: e,
                                    braced: false,
                                }],
                            ) => (cond, then, els, head) = (c, t, e, "else if"),
                            Some(e) => {
                                out.line(d, "else");
                                self.stmts(out, d + 1, e, in_region)?;
                                break;
                            }
                            None => break,
                        }
                    }
                }
            }
            Stmt::Block(body) => {
                out.line(d, "{");
                self.stmts(out, d + 1, body, in_region)?;
                out.line(d, "}");
            }
            Stmt::Region { parallel, body } => {
                if *parallel {
                    out.line(d, self.d.parallel_region()?);
                }
                out.line(d, "{");
                self.stmts(out, d + 1, body, *parallel)?;
                out.line(d, "}");
            }
            Stmt::Stage(st) => self.stage(out, d, st, in_region)?,
            Stmt::Move {
                dst,
                src,
                width,
                guard,
            } => self.mv(out, d, dst, src, *width, guard)?,
            Stmt::Assign { dst, op, value } => {
                let op = match op {
                    AssignOp::Set => "=",
                    AssignOp::Add => "+=",
                };
                out.line(
                    d,
                    &format!("{} {op} {};", self.target(dst)?, self.value(value)?),
                );
            }
            Stmt::Compute { acc, reduce, value } => out.line(
                d,
                &format!(
                    "{} {} {};",
                    self.target(acc)?,
                    if *reduce { "+=" } else { "=" },
                    self.value(value)?
                ),
            ),
            Stmt::Store {
                acc,
                epilogue,
                binding,
                dst,
            } => {
                let ty = self.d.storage_type(crate::lower::COMPUTE);
                out.line(d, &format!("{ty} x = {};", self.target(acc)?));
                for e in epilogue {
                    let v = self.value(&Value::Kernel {
                        expr: e.clone(),
                        binding: binding.clone(),
                    })?;
                    out.line(d, &format!("x = {v};"));
                }
                let dtype = match dst {
                    Target::Elem { buf, .. } => buffer(self.nest, *buf)?.dtype,
                    Target::Var(_) | Target::Lanes { .. } => crate::lower::COMPUTE,
                };
                out.line(
                    d,
                    &format!(
                        "{} = {};",
                        self.target(dst)?,
                        super::store_from_f32(dtype, "x")
                    ),
                );
            }
            Stmt::AsyncCopy {
                dst,
                src,
                bytes,
                guard,
            } => {
                let ok = (!guard.is_empty()).then(|| guard.join(" && "));
                let line = self.d.async_copy(dst, src, *bytes, ok.as_deref())?;
                out.line(d, &line);
            }
            Stmt::AsyncCommit => out.line(d, &self.d.async_commit()?),
            Stmt::AsyncWait(n) => out.line(d, &self.d.async_wait(*n)?),
            Stmt::Barrier => out.line(d, self.d.barrier()?),
            Stmt::Call { func, args } => out.line(d, &format!("{func}({});", args.join(", "))),
            Stmt::Return => out.line(d, "return;"),
            Stmt::Assume(cond) => {
                if let Some(line) = self.d.assume(cond)? {
                    out.line(d, &line);
                }
            }
        }
        Ok(())
    }

    /// `const ty name = ...;` for each part bound to `src` (parts of one iteration skipped).
    fn bind(
        &self,
        out: &mut Lines,
        d: usize,
        src: &str,
        ty: crate::lower::IntType,
        parts: &[BindPart],
    ) {
        let mut stride = 1;
        let mut lines = Vec::new();
        for (n, part) in parts.iter().enumerate().rev() {
            if part.count > 1 {
                let mut e = src.to_string();
                if stride > 1 {
                    e = format!("{e} / {stride}");
                }
                let outermost = parts[..n].iter().all(|p| p.count == 1);
                if !outermost {
                    e = format!("{e} % {}", part.count);
                }
                if part.mult > 1 {
                    e = if e == src {
                        format!("{e} * {}", part.mult)
                    } else {
                        format!("({e}) * {}", part.mult)
                    };
                }
                lines.push(format!("const {} {} = {e};", ty.spelling(), part.name));
                stride *= part.count;
            }
        }
        for l in lines.iter().rev() {
            out.line(d, l);
        }
    }

    /// A loop; `in_band`: an inner loop of a collapsed band (its pragma is the head's).
    fn lp(
        &self,
        out: &mut Lines,
        d: usize,
        l: &Loop,
        in_region: bool,
        in_band: bool,
    ) -> Result<(), String> {
        if !in_band {
            let mut collapse = 1;
            let mut cur = l;
            while let (Layout::Flat, [Stmt::Loop(inner)]) = (cur.layout, cur.body.as_slice()) {
                if inner.kind != l.kind {
                    break;
                }
                collapse += 1;
                cur = inner;
            }
            let cx = LoopContext {
                collapse,
                in_region,
                trip: l.trip,
            };
            if let Some(p) = self.d.loop_pragma(l.kind, cx)? {
                out.line(d, &p);
            }
        }
        let v = &l.var;
        let (cond, step) = match l.step {
            Step::Inc => (format!("{v} < {}", l.end), format!("++{v}")),
            Step::Add(n) => (format!("{v} < {}", l.end), format!("{v} += {n}")),
            Step::Halve => (format!("{v} > {}", l.end), format!("{v} /= 2")),
        };
        let head = format!(
            "for ({} {v} = {}; {cond}; {step})",
            l.ty.spelling(),
            l.start
        );
        // Inner loops of a parallel band share the head's pragma.
        let band = l.kind == LoopKind::Parallel && l.layout == Layout::Flat;
        match l.layout {
            Layout::Braced => {
                out.line(d, &format!("{head} {{"));
                self.stmts(out, d + 1, &l.body, in_region)?;
                out.line(d, "}");
            }
            Layout::Bare => {
                out.line(d, &head);
                self.stmts(out, d + 1, &l.body, in_region)?;
            }
            Layout::Flat => {
                out.line(d, &head);
                for s in &l.body {
                    match s {
                        Stmt::Loop(inner) if band && inner.kind == l.kind => {
                            self.lp(out, d, inner, in_region, true)?
                        }
                        s => self.stmt(out, d, s, in_region)?,
                    }
                }
            }
        }
        Ok(())
    }

    fn stage(&self, out: &mut Lines, d: usize, st: &Stage, in_region: bool) -> Result<(), String> {
        match st.mode {
            CopyMode::Sync => self.stmts(out, d, &st.body, in_region),
            CopyMode::Async { depth } => Err(format!(
                "asynchronous copies ({depth} stages) are not printed yet"
            )),
        }
    }

    fn mv(
        &self,
        out: &mut Lines,
        d: usize,
        dst: &(crate::lower::BufId, String),
        src: &(crate::lower::BufId, String),
        width: usize,
        guard: &[String],
    ) -> Result<(), String> {
        let (db, sb) = (buffer(self.nest, dst.0)?, buffer(self.nest, src.0)?);
        let zero = float_lit(0.0);
        if width <= 1 {
            let load = format!("{}[{}]", sb.name, src.1);
            // A copy into a buffer of the compute type widens half-precision data.
            let load = if sb.dtype != db.dtype && db.dtype == crate::lower::COMPUTE {
                super::load_as_f32(sb.dtype, &load)
            } else {
                load
            };
            let value = if guard.is_empty() {
                load
            } else {
                format!("{} ? {load} : {zero}", guard.join(" && "))
            };
            out.line(d, &format!("{}[{}] = {value};", db.name, dst.1));
            return Ok(());
        }
        let vt = self.d.vector_type(sb.dtype, width)?;
        let zeros = vec![zero.as_str(); width].join(", ");
        out.line(d, &format!("{vt} v = {{{zeros}}};"));
        let load = format!(
            "v = {};",
            self.d
                .deref_as(&format!("const {vt}"), &format!("{} + {}", sb.name, src.1))
        );
        if guard.is_empty() {
            out.line(d, &load);
        } else {
            out.line(d, &format!("if ({})", guard.join(" && ")));
            out.line(d + 1, &load);
        }
        out.line(
            d,
            &format!(
                "{} = v;",
                self.d.deref_as(&vt, &format!("{} + {}", db.name, dst.1))
            ),
        );
        Ok(())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::codegen::cuda::CudaDialect;
    use crate::ir::parse_text;
    use crate::lower::{self, CopyMode};
    use crate::template::gpu::{ansor_default_schedule, GpuTarget};

    fn set_async(body: &mut [Stmt]) -> usize {
        let mut n = 0;
        for s in body {
            match s {
                Stmt::Stage(st) => {
                    st.mode = CopyMode::Async { depth: 2 };
                    n += 1;
                }
                Stmt::Loop(l) => n += set_async(&mut l.body),
                _ => {}
            }
        }
        n
    }

    /// Asynchronous copies have room in the IR but no printing yet: a nest with one is an
    /// error, never wrong code.
    #[test]
    fn async_copies_are_refused_until_printed() {
        let k = parse_text("mm", "c[[i,j]] += a[[i,k]] * b[[k,j]]", None).unwrap();
        let shapes: [&[usize]; 3] = [&[64, 48], &[48, 40], &[64, 40]];
        let e = [64, 40, 48];
        let s = ansor_default_schedule(&k, &e, &GpuTarget::h100());
        let mut nest = lower::gpu::lower(&k, &e, &shapes, &s).unwrap();
        assert!(print(&nest, &CudaDialect).is_ok());
        assert_eq!(set_async(&mut nest.entry.body), 2);
        let err = print(&nest, &CudaDialect).unwrap_err();
        assert!(err.contains("asynchronous"), "{err}");
    }
}
