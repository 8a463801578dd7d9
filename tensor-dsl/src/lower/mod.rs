//! The loop nest as data: a schedule ([`crate::template::cpu::CpuConfig`],
//! [`crate::template::gpu::GpuSchedule`]) is lowered once into a [`Nest`]; one printer
//! ([`crate::codegen::printer`]) turns it into C or CUDA C with a dialect, and the analytic
//! features ([`crate::features`]) read their tile sizes, trip counts, buffers and launch
//! geometry from the same nest, so code and features cannot drift apart.
//!
//! The IR is in the spirit of TVM's TIR and Halide's `Stmt`, but small:
//!
//! * [`Loop`]s with a [`LoopKind`] (serial, in order, parallel, vectorized, unrolled,
//!   thread-strided), the kernel index they walk and their most iterations; GPU block and
//!   thread indices are [`Stmt::Bind`]s, loops bound to a hardware index;
//! * [`Buffer`]s with a [`Scope`] (global, shared, register, per-thread panel) and an element
//!   type ([`DType`]), declared by [`Stmt::Alloc`];
//! * copy [`Stage`]s (synchronous now, [`CopyMode::Async`] with a pipeline depth reserved),
//!   [`Stmt::Barrier`]s, the compute statement ([`Stmt::Compute`]), the epilogue and store
//!   ([`Stmt::Store`]), guards ([`Stmt::If`]) for edge tiles, and helper [`Func`]s called
//!   with [`Stmt::Call`] (the CPU tile functions, one per tile size, the size built in), and
//!   [`Stmt::Assume`]s (the ranges of a helper's parameters).
//!
//! Scalar index arithmetic is kept as C text (it is the same in every dialect); kernel
//! expressions stay [`Expr`]s with a [`Binding`] and are printed by
//! [`crate::codegen::ExprPrinter`].
//!
//! ```
//! use tensor_dsl::{codegen::c::CDialect, codegen::printer, ir::parse_text, lower};
//! use tensor_dsl::template::cpu::CpuConfig;
//! let k = parse_text("mm", "c[[i,j]] += a[[i,k]] * b[[k,j]]", None).unwrap();
//! let shapes: [&[usize]; 3] = [&[8, 4], &[4, 16], &[8, 16]];
//! let cfg = CpuConfig::heuristic(&k, &[8, 16, 4], 8);
//! let nest = lower::cpu::lower(&k, &[8, 16, 4], &shapes, &cfg).unwrap();
//! // The register tile is a buffer of the nest ...
//! let acc = nest.buffers.iter().find(|b| b.scope == lower::Scope::Register).unwrap();
//! assert_eq!(acc.dims, vec![6, 16]);
//! // ... the loops are data ...
//! let mut vectorized = 0;
//! nest.walk(&mut |_, s, _| {
//!     if let lower::Stmt::Loop(l) = s {
//!         if let lower::LoopKind::Vectorized(w) = l.kind {
//!             vectorized = w;
//!         }
//!     }
//! });
//! assert_eq!(vectorized, 16);
//! // ... and one printer makes C of them.
//! let body = printer::print(&nest, &CDialect).unwrap();
//! assert!(body.contains("#pragma GCC unroll 16"));
//! ```

pub mod cpu;
pub mod cpu_conv;
pub mod cpu_micro;
pub mod cpu_pairs;
pub mod gpu;
pub mod gpu_simt;
pub mod tensorcore;
pub mod wgmma;

use crate::ir::{Access, DType, Expr, Kernel};

/// The type the compute statement, accumulators and epilogues work in.
pub const COMPUTE: DType = DType::F32;

/// Where a module-scope array ([`ModuleArray`]) lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MemSpace {
    /// Device memory (`__device__`), zero when the module is loaded, kept across launches:
    /// a split-K workspace and its arrival counters.
    Device,
    /// Shared memory (`__shared__` at file scope): one copy per block, like a [`Scope::Shared`]
    /// buffer, of another element type.
    Shared,
}

/// The element type of a module-scope array.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ElemKind {
    F32,
    I32,
}

/// An array declared at module scope, named in the nest's C text: a split-K workspace and
/// counters, a fused reduction's table of offsets and window masks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModuleArray {
    pub name: String,
    pub space: MemSpace,
    pub elem: ElemKind,
    pub len: usize,
    /// Alignment, bytes.
    pub align: usize,
}

impl ModuleArray {
    /// Bytes of the array.
    pub fn bytes(&self) -> usize {
        self.len.saturating_mul(4)
    }
}

/// A buffer of a [`Nest`]: its position in [`Nest::buffers`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct BufId(pub usize);

/// Where a buffer lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Scope {
    /// Memory passed in by the caller: a kernel parameter.
    Global,
    /// GPU shared memory, one copy per block.
    Shared,
    /// Registers: a local array of constant size (accumulators).
    Register,
    /// A per-thread heap panel (CPU packing), allocated once per thread; may be missing at
    /// run time (the code then reads the operand in place).
    Panel,
}

/// A buffer: a kernel parameter, a shared-memory tile, the accumulators, a packed panel.
#[derive(Clone, Debug, PartialEq)]
pub struct Buffer {
    pub name: String,
    pub scope: Scope,
    /// Element type in memory.
    pub dtype: DType,
    /// Elements per dimension as declared (empty: a scalar; global buffers: the tensor's
    /// shape).
    pub dims: Vec<usize>,
    /// The kernel parameter of a global buffer.
    pub param: Option<usize>,
    /// Alignment asked for, bytes.
    pub align: Option<usize>,
}

impl Buffer {
    /// Elements of the buffer.
    pub fn elements(&self) -> usize {
        self.dims.iter().fold(1usize, |a, &d| a.saturating_mul(d))
    }

    /// Bytes of the buffer.
    pub fn bytes(&self) -> usize {
        self.elements().saturating_mul(self.dtype.size())
    }
}

/// A C integer type of scalars and loop variables (spelled alike in every dialect).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum IntType {
    Int,
    Long,
    LongLong,
    Unsigned,
}

impl IntType {
    pub fn spelling(self) -> &'static str {
        match self {
            IntType::Int => "int",
            IntType::Long => "long",
            IntType::LongLong => "long long",
            IntType::Unsigned => "unsigned",
        }
    }
}

/// The type of a scalar [`Stmt::Let`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Ty {
    Int(IntType),
    /// An element value (spelled by the dialect's storage type).
    Elem(DType),
    /// A vector of this many lanes of the compute type (explicit SIMD code, the CPU
    /// micro-kernel of [`cpu_micro`]); a `Let` of it from a [`Value::Float`] is a splat.
    Vector(usize),
    /// A pointer to read-only elements stored as this type (a per-thread base pointer).
    Ptr(DType),
}

/// What a loop does with its iterations.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LoopKind {
    Serial,
    /// Serial, and the compiler is asked to keep it so (not to vectorize it): the reduction
    /// loops around a register tile, whose unrolled tile is what gets vectorized. GCC 12
    /// otherwise vectorizes the innermost of them once the tile is unrolled into it, as one
    /// in-order float sum per accumulator (shuffles and extracts for each of 256 sums): 6 to
    /// 11 s to compile a 512×1024·1024×64 matmul's default schedule, against 0.4 s.
    InOrder,
    /// Iterations shared among CPU threads; directly nested parallel loops (a band of
    /// [`Layout::Flat`] loops) are collapsed into one iteration space.
    Parallel,
    /// The vector tile's loop, at most `n` iterations of unit stride in the output, fully
    /// unrolled so the compiler vectorizes the unrolled body.
    Vectorized(usize),
    /// Unrolled (the factor: C unrolls by it, CUDA unrolls fully; the trip count is then
    /// constant).
    Unrolled(usize),
    /// Each thread of a team starts at its rank and steps by the team's size (the lanes of a
    /// reduction, the threads of a cooperative copy); never unrolled.
    ThreadStrided,
}

/// How a loop variable advances.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Step {
    /// `++v`.
    Inc,
    /// `v += n`.
    Add(usize),
    /// `v /= 2`, while `v > end`.
    Halve,
}

/// How a loop or guard sits in the text (a printing hint: it changes no semantics).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Layout {
    /// `for (...) {`, the body indented, `}`.
    Braced,
    /// `for (...)`, the body (one statement) indented.
    Bare,
    /// `for (...)`, the body at the same depth (a band of loops around one block).
    Flat,
}

/// A loop.
#[derive(Clone, Debug, PartialEq)]
pub struct Loop {
    pub var: String,
    pub ty: IntType,
    /// First value, as C text.
    pub start: String,
    /// Bound (`var < end`, or `var > end` when halving), as C text.
    pub end: String,
    pub step: Step,
    /// Most iterations of one execution of the loop (by one thread).
    pub trip: usize,
    pub kind: LoopKind,
    /// The kernel index (or a part of it: a tile level) the loop walks.
    pub index: Option<usize>,
    pub layout: Layout,
    pub body: Vec<Stmt>,
}

/// A hardware index of the GPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum HwIndex {
    Block,
    Thread,
}

/// How a kernel expression's index variables and accesses are spelled where it is used.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Binding {
    /// C expression of each index variable.
    pub index: Vec<String>,
    /// Accesses read from another buffer (a shared tile, a packed panel): the access and
    /// the C expression of its element.
    pub reads: Vec<(Access, String)>,
}

/// An element place: a scalar variable or an element of a buffer.
#[derive(Clone, Debug, PartialEq)]
pub enum Target {
    Var(String),
    /// `name[i0][i1]...` (just `name` without indices: a scalar buffer).
    Elem {
        buf: BufId,
        index: Vec<String>,
    },
    /// `width` consecutive elements of a buffer from `name[i0][i1]...` on, as one vector of
    /// the compute type (no alignment assumed).
    Lanes {
        buf: BufId,
        index: Vec<String>,
        width: usize,
    },
}

/// A value.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    /// C text over names in scope (index arithmetic, integer constants).
    Code(String),
    /// A literal of the compute type.
    Float(f64),
    /// A hardware index (`threadIdx.x`).
    Hw(HwIndex),
    /// The 32-bit shared-memory address of a shared buffer's first element (what
    /// [`Stmt::AsyncCopy`] takes).
    SharedAddress(BufId),
    /// The value at a place.
    Read(Target),
    /// A kernel expression (the body or an epilogue).
    Kernel { expr: Expr, binding: Binding },
    /// One element of an input access from global memory, 0 outside the tensor.
    Global { access: Access, binding: Binding },
    /// The value at `value` in the lane `lane` XOR this one (a warp shuffle).
    ShuffleXor {
        mask: String,
        value: Target,
        lane: String,
    },
}

/// `=` or `+=`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AssignOp {
    Set,
    Add,
}

/// One loop of a fused hardware index: `count` iterations of `mult` elements.
#[derive(Clone, Debug, PartialEq)]
pub struct BindPart {
    pub name: String,
    pub count: usize,
    pub mult: usize,
    /// The kernel index it tiles.
    pub index: Option<usize>,
}

/// Synchronous copies complete before the next statement; asynchronous ones (reserved:
/// no lowering makes them yet) run `depth` stages ahead.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CopyMode {
    Sync,
    Async { depth: usize },
}

/// A copy stage: the statements in `body` copy a box of an input access into `dst`.
#[derive(Clone, Debug, PartialEq)]
pub struct Stage {
    /// The input access copied.
    pub src: Access,
    pub dst: BufId,
    /// The box copied, elements per dimension as laid out in `dst` (a GPU tile: per tensor
    /// dimension; a CPU panel: reduction points × the vector tile).
    pub dims: Vec<usize>,
    /// Elements per load.
    pub width: usize,
    pub mode: CopyMode,
    pub body: Vec<Stmt>,
}

/// A statement.
#[derive(Clone, Debug, PartialEq)]
pub enum Stmt {
    /// `/* text */`.
    Comment(String),
    /// Scalar definitions in one declaration: `const int a = x, b = y;`.
    Let {
        ty: Ty,
        konst: bool,
        defs: Vec<(String, Value)>,
    },
    /// Declares (allocates) a buffer, optionally initialised (scalars).
    Alloc {
        buf: BufId,
        init: Option<Value>,
    },
    /// Releases a panel.
    Free(BufId),
    /// Loops bound to a hardware index: `src` enumerates the fused space of `parts`, the
    /// last fastest; each part becomes `const ty name = (src / stride) % count * mult`.
    Bind {
        src: Value,
        ty: IntType,
        parts: Vec<BindPart>,
    },
    Loop(Loop),
    /// A guard (edge tiles, missing panels, idle threads).
    If {
        cond: String,
        then: Vec<Stmt>,
        els: Option<Vec<Stmt>>,
        braced: bool,
    },
    /// `{ ... }`.
    Block(Vec<Stmt>),
    /// `{ ... }` holding what each CPU thread keeps for itself (a panel); `parallel`: every
    /// thread runs it (a parallel region), and parallel loops inside share out their
    /// iterations.
    Region {
        parallel: bool,
        body: Vec<Stmt>,
    },
    Stage(Stage),
    /// `width` elements from `src` at an element offset to `dst` at an element offset,
    /// zero where a `guard` condition fails.
    Move {
        dst: (BufId, String),
        src: (BufId, String),
        width: usize,
        guard: Vec<String>,
    },
    Assign {
        dst: Target,
        op: AssignOp,
        value: Value,
    },
    /// An asynchronous copy (`cp.async`) of `bytes` (4 or 16) from `src` (a pointer into
    /// global memory, C text) to the shared-memory byte address `dst` (C text, from a
    /// [`Value::SharedAddress`]); zeros instead when a `guard` condition fails (then nothing
    /// is read). It lands at a later [`Stmt::AsyncWait`].
    AsyncCopy {
        dst: String,
        src: String,
        bytes: usize,
        guard: Vec<String>,
    },
    /// Closes the group of this thread's asynchronous copies issued since the last one.
    AsyncCommit,
    /// Waits until at most this many of this thread's copy groups are pending.
    AsyncWait(usize),
    /// The compute statement: `acc += body` (`reduce`) or `acc = body`.
    Compute {
        acc: Target,
        reduce: bool,
        value: Value,
    },
    /// The epilogue on one accumulator and the store of the output element:
    /// `x = acc; x = epilogue...; dst = x`.
    Store {
        acc: Target,
        epilogue: Vec<Expr>,
        binding: Binding,
        dst: Target,
    },
    /// Every thread of the block waits for the others.
    Barrier,
    /// A call of a helper function.
    Call {
        func: String,
        args: Vec<String>,
    },
    Return,
    /// A fact (C text) the compiler may rely on here, such as the range of a helper's
    /// index parameter, which it would know had it inlined the helper; a dialect without
    /// assumptions drops it.
    Assume(String),
}

impl Stmt {
    /// The statement lists directly inside this one.
    pub fn bodies(&self) -> Vec<&[Stmt]> {
        match self {
            Stmt::Loop(l) => vec![&l.body],
            Stmt::If { then, els, .. } => {
                let mut v: Vec<&[Stmt]> = vec![then];
                if let Some(e) = els {
                    v.push(e);
                }
                v
            }
            Stmt::Block(body) | Stmt::Region { body, .. } => vec![body],
            Stmt::Stage(s) => vec![&s.body],
            _ => Vec::new(),
        }
    }
}

/// A function parameter.
#[derive(Clone, Debug, PartialEq)]
pub enum Param {
    /// A pointer to a buffer's first element.
    Buffer { buf: BufId, konst: bool },
    /// `const ty name`.
    Scalar { ty: IntType, name: String },
}

/// A function: the entry point or a helper.
#[derive(Clone, Debug, PartialEq)]
pub struct Func {
    pub name: String,
    pub params: Vec<Param>,
    pub body: Vec<Stmt>,
}

/// Launch geometry of a GPU nest.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Launch {
    pub grid: [usize; 3],
    pub block: [usize; 3],
}

/// A lowered kernel: buffers, helper functions, the entry point.
#[derive(Clone, Debug)]
pub struct Nest<'a> {
    pub kernel: &'a Kernel,
    /// Every parameter's shape.
    pub shapes: &'a [&'a [usize]],
    /// The iteration domain: each index's extent (GPU: padded to its tiles).
    pub domain: Vec<usize>,
    pub buffers: Vec<Buffer>,
    /// Helper functions, in the order they are printed (before the entry).
    pub helpers: Vec<Func>,
    pub entry: Func,
    pub launch: Option<Launch>,
    /// Arrays declared at module scope, printed before the functions.
    pub globals: Vec<ModuleArray>,
    /// An input the nest can also take in a packed form made once (CPU only).
    pub prepack: Option<Prepack>,
}

/// An input that the nest can take packed ahead of the call, so that a caller who knows
/// the input did not change (the CPU runtime, by [`crate::Tensor::version`]) packs it once
/// instead of at every call. Both functions follow the entry point's convention and are
/// printed after it.
#[derive(Clone, Debug, PartialEq)]
pub struct Prepack {
    /// The input's parameter id.
    pub input: usize,
    /// Elements of the compute type in the packed form.
    pub elems: usize,
    /// Writes the packed form of the input to the entry point's output pointer.
    pub fill: Func,
    /// The entry point on the packed form, which it reads from `args[params]` (the slot
    /// after the kernel's parameters); the input itself is not read.
    pub run: Func,
}

impl Nest<'_> {
    /// The buffer `id`.
    pub fn buffer(&self, id: BufId) -> Option<&Buffer> {
        self.buffers.get(id.0)
    }

    /// The buffers of a scope.
    pub fn scoped(&self, scope: Scope) -> impl Iterator<Item = &Buffer> + '_ {
        self.buffers.iter().filter(move |b| b.scope == scope)
    }

    /// Static shared memory per block, bytes: every shared buffer and shared module array,
    /// each rounded up to 16.
    pub fn shared_bytes(&self) -> usize {
        let arrays = self
            .globals
            .iter()
            .filter(|g| g.space == MemSpace::Shared)
            .map(ModuleArray::bytes);
        self.scoped(Scope::Shared)
            .map(Buffer::bytes)
            .chain(arrays)
            .map(|b| b.saturating_add(15) / 16 * 16)
            .fold(0, usize::saturating_add)
    }

    /// The global buffer of kernel parameter `p`.
    pub fn param_buffer(&self, p: usize) -> Option<&Buffer> {
        self.buffers
            .iter()
            .find(|b| b.scope == Scope::Global && b.param == Some(p))
    }

    /// Visits every statement of every function (helpers, then the entry) with the loops
    /// around it in its function, outermost first.
    pub fn walk<'s>(&'s self, f: &mut dyn FnMut(&'s Func, &'s Stmt, &[&'s Loop])) {
        fn go<'s>(
            func: &'s Func,
            body: &'s [Stmt],
            stack: &mut Vec<&'s Loop>,
            f: &mut dyn FnMut(&'s Func, &'s Stmt, &[&'s Loop]),
        ) {
            for s in body {
                f(func, s, stack);
                if let Stmt::Loop(l) = s {
                    stack.push(l);
                    go(func, &l.body, stack, f);
                    stack.pop();
                } else {
                    for b in s.bodies() {
                        go(func, b, stack, f);
                    }
                }
            }
        }
        for func in self.helpers.iter().chain([&self.entry]) {
            go(func, &func.body, &mut Vec::new(), f);
        }
    }

    /// The band of loops the entry point starts with: its first loop (inside a region) and
    /// the [`Layout::Flat`] loops directly nested in it (the parallel iteration space on a
    /// CPU). Empty when the entry has no loop outside a helper.
    pub fn outer_band(&self) -> Vec<&Loop> {
        fn first(body: &[Stmt]) -> Option<&Loop> {
            body.iter().find_map(|s| match s {
                Stmt::Loop(l) => Some(l),
                Stmt::Region { body, .. } => first(body),
                // A CPU entry that packs every panel first keeps the tiles' own nest in
                // its first branch (`lower::cpu`).
                Stmt::If { then, .. } => first(then),
                _ => None,
            })
        }
        let mut band = Vec::new();
        let mut next = first(&self.entry.body);
        while let Some(l) = next {
            band.push(l);
            next = match (l.layout, l.body.as_slice()) {
                (Layout::Flat, [Stmt::Loop(inner)]) => Some(inner),
                _ => None,
            };
        }
        band
    }
}

/// Checks that there is one shape per kernel parameter, of its rank.
pub(crate) fn check_shapes(kernel: &Kernel, shapes: &[&[usize]]) -> Result<(), String> {
    if shapes.len() != kernel.params.len()
        || kernel
            .params
            .iter()
            .zip(shapes)
            .any(|(p, s)| p.rank != s.len())
    {
        return Err("the shapes do not match the kernel's parameters".into());
    }
    Ok(())
}

/// The global buffer of every kernel parameter, [`BufId`] `p` for parameter `p`: `t<p>` for
/// an input, `out` for the output.
pub(crate) fn param_buffers(kernel: &Kernel, shapes: &[&[usize]]) -> Vec<Buffer> {
    kernel
        .params
        .iter()
        .zip(shapes)
        .enumerate()
        .map(|(p, (param, shape))| Buffer {
            name: if p == kernel.output {
                "out".into()
            } else {
                format!("t{p}")
            },
            scope: Scope::Global,
            dtype: param.dtype,
            dims: shape.to_vec(),
            param: Some(p),
            align: None,
        })
        .collect()
}

/// Pointer parameters: the inputs (read-only), then `extra` (read-only), then the output.
pub(crate) fn pointer_params(kernel: &Kernel, extra: Option<BufId>) -> Vec<Param> {
    let konst = |buf| Param::Buffer { buf, konst: true };
    kernel
        .inputs()
        .into_iter()
        .map(|p| konst(BufId(p)))
        .chain(extra.map(konst))
        .chain([Param::Buffer {
            buf: BufId(kernel.output),
            konst: false,
        }])
        .collect()
}

/// A band of loops, each [`Layout::Flat`] around the next, around `body`.
pub(crate) fn band(loops: Vec<Loop>, body: Vec<Stmt>) -> Vec<Stmt> {
    loops.into_iter().rev().fold(body, |inner, mut l| {
        l.body = inner;
        vec![Stmt::Loop(l)]
    })
}
