//! The CPU schedule: a register tile over (up to) two output axes, a parallel outer loop.
//!
//! The generated loop nest (see [`crate::codegen::c`]) is
//!
//! ```text
//! parallel for every other output index, v0 in steps of `vector`, u0 in steps of `unroll`:
//!     (if packing) refill this thread's panel of the vector operand when v0 changed
//!     acc[unroll][vector] = 0
//!     for every reduction point (r0, r1, ...):
//!         for u < unroll, v < vector:            // v innermost: vectorized
//!             acc[u][v] += body(..., u0 + u, v0 + v, r...)
//!     out[...] = epilogue(acc[u][v])              // fused, one store per element
//! ```
//!
//! Tiles that do not divide an extent are predicated (the edge tiles run with smaller
//! trip counts), so every shape runs.
//!
//! ```
//! use tensor_dsl::{ir::parse_text, template::cpu::CpuConfig};
//! let k = parse_text("mm", "c[[i,j]] += a[[i,k]] * b[[k,j]]", None).unwrap();
//! let cfg = CpuConfig::heuristic(&k, &[512, 512, 512], 16);
//! assert_eq!((cfg.vector_axis, cfg.unroll_axis), (Some(1), Some(0)));
//! assert!(cfg.validate(&k).is_ok());
//! ```

use crate::ir::{Access, BodyKind, Kernel};
use serde::{Deserialize, Serialize};
use tuner::{Config, SearchSpace};

/// One point of the CPU schedule space.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct CpuConfig {
    /// Spatial index vectorized in the innermost loop (`None` for a rank-0 output).
    pub vector_axis: Option<usize>,
    /// Register-tile width along the vector axis.
    pub vector: usize,
    /// Second spatial index of the register tile.
    pub unroll_axis: Option<usize>,
    /// Register-tile height along the unroll axis.
    pub unroll: usize,
    /// Run the outer loops on all cores (OpenMP).
    pub parallel: bool,
    /// Copy the operand that varies along the vector axis (and not the unroll axis) into a
    /// contiguous per-thread panel, reused across the unroll axis (see [`packed_access`]).
    pub pack: bool,
    /// Loop order of the tile loops: `false` walks the unroll axis innermost (a packed panel
    /// is reused across it), `true` walks the vector axis innermost.
    #[serde(default)]
    pub unroll_outer: bool,
}

/// Row stride (in floats) of a packed panel for a vector tile of `vector`: padded past the
/// tile and never a power of two. A panel whose rows are contiguous lets GCC vectorize
/// across the reduction instead of along the tile, and power-of-two strides cause cache-set
/// conflicts; either one measured 20x slower than this (512³ matmul, AVX-512).
pub fn pack_stride(vector: usize) -> usize {
    let s = vector + 8;
    if s.is_power_of_two() {
        s + 8
    } else {
        s
    }
}

/// Largest packed panel, in bytes.
pub const MAX_PACK_BYTES: usize = 4 << 20;

/// The input access a config packs, if any: the first read in the main statement that
/// depends on the vector axis and not on the unroll axis, when the kernel reduces and the
/// panel (every reduction point × the vector tile) fits in [`MAX_PACK_BYTES`].
///
/// Packing turns strided or transposed reads into one contiguous stream and removes the
/// cache-set conflicts of power-of-two row strides (measured: a 512×1024·1024×64 matmul
/// went from 7 to ~150 GFLOPS on a 2-core AVX-512 machine).
pub fn packed_access(kernel: &Kernel, extents: &[usize], config: &CpuConfig) -> Option<Access> {
    let v = config.vector_axis?;
    if !config.pack || kernel.kind != BodyKind::Sum || kernel.reduction().is_empty() {
        return None;
    }
    let points: usize = kernel.reduction().iter().map(|&r| extents[r]).product();
    if points
        .saturating_mul(pack_stride(config.vector))
        .saturating_mul(4)
        > MAX_PACK_BYTES
    {
        return None;
    }
    let uses = |a: &Access, i: usize| a.dims.iter().any(|d| d.terms.iter().any(|&(x, _)| x == i));
    let mut found = None;
    kernel.body.visit_accesses(&mut |a| {
        if found.is_none() && uses(a, v) && !config.unroll_axis.is_some_and(|u| uses(a, u)) {
            found = Some(a.clone());
        }
    });
    found
}

/// Register-tile elements we allow: beyond this GCC spills the accumulators.
pub const MAX_TILE: usize = 256;

impl CpuConfig {
    /// A sound default: the output's innermost axis vectorized two SIMD registers wide, the
    /// next axis unrolled 4 deep, outer loops parallel when the work is large enough to pay
    /// for the threads. `lanes` is the SIMD width in `f32` (16 for AVX-512, 8 for AVX2).
    pub fn heuristic(kernel: &Kernel, extents: &[usize], lanes: usize) -> CpuConfig {
        let spatial = kernel.spatial();
        let lanes = lanes.max(1);
        let vector_axis = spatial.last().copied();
        let unroll_axis = (spatial.len() >= 2).then(|| spatial[spatial.len() - 2]);
        let vector = match vector_axis {
            None => 1,
            Some(v) => {
                let e = extents[v];
                if e >= 2 * lanes {
                    2 * lanes
                } else if e >= lanes {
                    lanes
                } else {
                    e.next_power_of_two()
                }
            }
        };
        let unroll = match unroll_axis {
            None => 1,
            Some(u) => extents[u].min(4),
        };
        let work = kernel.flops(extents);
        CpuConfig {
            vector_axis,
            vector,
            unroll_axis,
            unroll,
            parallel: work >= 65_536.0,
            pack: true,
            unroll_outer: false,
        }
    }

    /// The single-threaded, untiled schedule (for tests and baselines).
    pub fn naive(kernel: &Kernel) -> CpuConfig {
        let spatial = kernel.spatial();
        CpuConfig {
            vector_axis: spatial.last().copied(),
            vector: 1,
            unroll_axis: None,
            unroll: 1,
            parallel: false,
            pack: false,
            unroll_outer: false,
        }
    }

    /// Checks the config fits the kernel: axes are distinct spatial indices, tiles are
    /// positive and the register tile is bounded.
    pub fn validate(&self, kernel: &Kernel) -> Result<(), String> {
        let spatial = kernel.spatial();
        for (axis, what) in [(self.vector_axis, "vector"), (self.unroll_axis, "unroll")] {
            if let Some(a) = axis {
                if !spatial.contains(&a) {
                    return Err(format!("{what} axis {a} is not a spatial index"));
                }
            }
        }
        if self.vector_axis.is_some() && self.vector_axis == self.unroll_axis {
            return Err("vector and unroll axes must differ".into());
        }
        if self.vector == 0 || self.unroll == 0 {
            return Err("tile sizes must be positive".into());
        }
        if self.vector_axis.is_none() && self.vector != 1
            || self.unroll_axis.is_none() && self.unroll != 1
        {
            return Err("a tile without an axis must have size 1".into());
        }
        if self.vector * self.unroll > MAX_TILE {
            return Err(format!(
                "register tile {}x{} exceeds {MAX_TILE} accumulators",
                self.unroll, self.vector
            ));
        }
        Ok(())
    }
}

/// Tile widths the vector axis may take.
pub const VECTOR_CHOICES: [i64; 8] = [1, 2, 4, 8, 16, 32, 48, 64];
/// Tile heights the unroll axis may take.
pub const UNROLL_CHOICES: [i64; 7] = [1, 2, 3, 4, 6, 8, 12];

/// The CPU schedule space of one kernel at concrete extents: which output axes form the
/// register tile and how big it is, whether to run in parallel, whether to pack the vector
/// operand, and the tile loop order. Every point is a valid [`CpuConfig`]; edge tiles are
/// predicated, so no shape makes the space empty.
///
/// ```
/// use rand::SeedableRng;
/// use tensor_dsl::{ir::parse_text, template::cpu::CpuTemplate};
/// let k = parse_text("mm", "c[[i,j]] += a[[i,k]] * b[[k,j]]", None).unwrap();
/// let t = CpuTemplate::new(&k, &[7, 13, 5], 16).unwrap();
/// let mut rng = rand::rngs::StdRng::seed_from_u64(1);
/// let cfg = t.space().sample_uniform(&mut rng).unwrap();
/// assert!(t.decode(&cfg).unwrap().validate(&k).is_ok());
/// assert!(t.space().is_valid(&t.default_config()));
/// ```
#[derive(Clone, Debug)]
pub struct CpuTemplate {
    space: SearchSpace,
    /// Spatial index id behind each vector-axis choice (the last choice, `none`, is `None`).
    axes: Vec<Option<usize>>,
    default: Config,
    knobs: [usize; 7],
}

fn axis_choices(kernel: &Kernel) -> (Vec<String>, Vec<Option<usize>>) {
    let mut names = Vec::new();
    let mut axes = Vec::new();
    for s in kernel.spatial() {
        names.push(kernel.indices[s].name.clone());
        axes.push(Some(s));
    }
    names.push("none".into());
    axes.push(None);
    // Index names are identifiers; a name clash with "none" is resolved by position.
    for (n, name) in names.iter_mut().enumerate() {
        if n + 1 < axes.len() && name == "none" {
            *name = format!("axis{n}");
        }
    }
    (names, axes)
}

impl CpuTemplate {
    /// Builds the space; `lanes` is the SIMD width in f32 (for the default point).
    pub fn new(kernel: &Kernel, extents: &[usize], lanes: usize) -> Result<CpuTemplate, String> {
        let (names, axes) = axis_choices(kernel);
        let choices: Vec<&str> = names.iter().map(String::as_str).collect();
        let mut b = SearchSpace::builder();
        let vaxis = b.categorical("vector_axis", &choices);
        let vector = b.discrete("vector", &VECTOR_CHOICES);
        let uaxis = b.categorical("unroll_axis", &choices);
        let unroll = b.discrete("unroll", &UNROLL_CHOICES);
        let parallel = b.categorical("parallel", &["serial", "parallel"]);
        let pack = b.categorical("pack", &["none", "vector_operand"]);
        let order = b.categorical("order", &["unroll_inner", "unroll_outer"]);
        let knobs = [vaxis, vector, uaxis, unroll, parallel, pack, order];

        let ext: Vec<Option<usize>> = axes.iter().map(|a| a.map(|a| extents[a])).collect();
        let has_spatial = !kernel.spatial().is_empty();
        let (e1, e2, e3) = (ext.clone(), ext.clone(), ext);
        let value = |c: &Config, k: usize, list: &[i64]| {
            c.index(k).and_then(|i| list.get(i)).map(|&v| v as usize)
        };
        b.constraint("a spatial output has a vector axis", move |c| {
            !has_spatial
                || c.index(vaxis)
                    .is_some_and(|i| e1.get(i).is_some_and(Option::is_some))
        });
        b.constraint("vector and unroll axes differ", move |c| {
            let (v, u) = (c.index(vaxis), c.index(uaxis));
            v != u || v.is_some_and(|i| i + 1 == e2.len())
        });
        b.constraint("a missing axis has a tile of 1", move |c| {
            let none = e3.len() - 1;
            (c.index(vaxis) != Some(none) || value(c, vector, &VECTOR_CHOICES) == Some(1))
                && (c.index(uaxis) != Some(none) || value(c, unroll, &UNROLL_CHOICES) == Some(1))
        });
        let ext: Vec<Option<usize>> = axes.iter().map(|a| a.map(|a| extents[a])).collect();
        b.constraint("tiles fit their axes", move |c| {
            let fits = |axis: usize, knob: usize, list: &[i64]| {
                let e = c
                    .index(axis)
                    .and_then(|i| ext.get(i).copied().flatten())
                    .unwrap_or(1);
                value(c, knob, list).is_some_and(|t| t <= e.next_power_of_two().max(1))
            };
            fits(vaxis, vector, &VECTOR_CHOICES) && fits(uaxis, unroll, &UNROLL_CHOICES)
        });
        b.constraint("register tile is bounded", move |c| {
            let v = value(c, vector, &VECTOR_CHOICES).unwrap_or(1);
            let u = value(c, unroll, &UNROLL_CHOICES).unwrap_or(1);
            v * u <= MAX_TILE
        });
        let space = b.build().map_err(|e| e.to_string())?;
        let mut t = CpuTemplate {
            space,
            axes,
            default: Config::new(Vec::new()),
            knobs,
        };
        let heuristic = CpuConfig::heuristic(kernel, extents, lanes);
        t.default = t
            .encode(&heuristic)
            .or_else(|| t.encode(&CpuConfig::naive(kernel)))
            .ok_or_else(|| "the heuristic schedule is not in the space".to_string())?;
        Ok(t)
    }

    /// The knobs.
    pub fn space(&self) -> &SearchSpace {
        &self.space
    }

    /// The heuristic default, as a point of the space.
    pub fn default_config(&self) -> Config {
        self.default.clone()
    }

    /// The schedule a point stands for.
    pub fn decode(&self, c: &Config) -> Result<CpuConfig, String> {
        self.space.check(c).map_err(|e| e.to_string())?;
        let [vaxis, vector, uaxis, unroll, parallel, pack, order] = self.knobs;
        let axis = |k: usize| c.index(k).and_then(|i| self.axes.get(i).copied().flatten());
        let num = |k: usize| self.space.discrete_value(c, k).map_or(1, |v| v as usize);
        let choice = |k: usize| c.index(k).unwrap_or(0) == 1;
        Ok(CpuConfig {
            vector_axis: axis(vaxis),
            vector: num(vector),
            unroll_axis: axis(uaxis),
            unroll: num(unroll),
            parallel: choice(parallel),
            pack: choice(pack),
            unroll_outer: choice(order),
        })
    }

    /// The point for a schedule, if the space has it.
    pub fn encode(&self, cfg: &CpuConfig) -> Option<Config> {
        let axis = |a: Option<usize>| self.axes.iter().position(|x| *x == a);
        let idx = |list: &[i64], v: usize| list.iter().position(|&x| x == v as i64);
        let c = Config::new(vec![
            tuner::Value::Categorical(axis(cfg.vector_axis)?),
            tuner::Value::Discrete(idx(&VECTOR_CHOICES, cfg.vector)?),
            tuner::Value::Categorical(axis(cfg.unroll_axis)?),
            tuner::Value::Discrete(idx(&UNROLL_CHOICES, cfg.unroll)?),
            tuner::Value::Categorical(usize::from(cfg.parallel)),
            tuner::Value::Categorical(usize::from(cfg.pack)),
            tuner::Value::Categorical(usize::from(cfg.unroll_outer)),
        ]);
        self.space.is_valid(&c).then_some(c)
    }
}
