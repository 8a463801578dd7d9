//! Transfer learning for tuning: the cost model of a run learns from every record at hand
//! (the embedded set and the user cache) before it measures anything, and the run's first
//! point — or its only one, with zero trials — is the model's pick.
//!
//! * **Which records, how much** ([`cpu_prior`]): the records of the same kernel at other
//!   shapes on this CPU weigh most ([`SAME_KERNEL`], times a shape similarity), then other
//!   kernels (the same CPU template) on this CPU ([`OTHER_KERNEL`]), then the same kernel on
//!   other CPUs ([`OTHER_DEVICE`]), then other kernels on other CPUs. Records of the tuned
//!   key itself weigh 1.
//! * **A ranking target**: raw times of different problems are not comparable, their order
//!   is. Each record's score is `ln(best / seconds)` against the best record of its own key
//!   (0 for the best, −1 for 2.7× slower; an invalid point one below its key's worst), so
//!   the model learns which schedules rank high, and a prior of many problems is one
//!   training set (ATFormer's argument for ranking objectives).
//! * **CUDA** ([`cuda_prior`]): the same kernel at other shapes on this GPU, then on other
//!   GPUs, on the run's own features ([`cuda_features`]); other kernels are left out (their
//!   knob features do not line up).
//! * **Portable features** ([`cpu_transfer_features`]): a schedule's knob values by role
//!   (vector width, unroll depth, whether the vector axis is the innermost output axis, ...;
//!   the row template's knobs in the slots of the einsum knobs of the same role),
//!   the problem's size, and the analytic [`crate::features::cpu_features`], so points of
//!   kernels with different index sets share one feature space.
//! * **The pick** ([`pick`]): with records of the same kernel at other shapes on this CPU,
//!   the schedule they measured best (their few best schedules each, scored by the
//!   similarity-weighted mean of their normalised score over those shapes: measurements
//!   beat a model's extrapolation) — unless the template's default, a per-shape rule, did
//!   at least as well on those shapes ([`Prior::prefers_default`]), then the default;
//!   without records of the same kernel, the default (the analytic model of the machine).
//!   A run that measures measures the pick, then the model's pick ([`model_pick`]: the
//!   default, the best schedule of every problem in the prior and their neighbours, plus
//!   uniform samples, ranked by the model; without prior data every prediction ties and
//!   the default wins), then the default.
//!
//! ```
//! use tensor_dsl::transfer::{cpu_prior, cpu_transfer_features};
//! use tensor_dsl::ir::parse_text;
//! let k = parse_text("mm", "c[[i,j]] += a[[i,k]] * b[[k,j]]", None).unwrap();
//! let shapes = vec![vec![64, 64], vec![64, 64], vec![64, 64]];
//! let prior = cpu_prior(&k, &shapes, &[]); // no records: an empty prior
//! assert!(prior.is_empty());
//! let cfg = tensor_dsl::template::cpu::CpuConfig::naive(&k);
//! assert_eq!(cpu_transfer_features(&k, &[64, 64, 64], &cfg, 8).len(),
//!            tensor_dsl::transfer::CPU_TRANSFER_FEATURES);
//! ```

use crate::codegen::c::CODEGEN_VERSION;
use crate::features::{cpu_features_with_threads, gpu_features, CpuFeatures, GpuFeatures};
use crate::ir::{bind, parse_text, Kernel};
use crate::records::{Key, Record, RecordStore, Target};
use crate::template::cpu::{CpuConfig, CpuTemplate};
use crate::template::cuda::{CudaSchedule, CudaSpace};
use crate::template::gpu::GpuTarget;
use crate::template::rows::RowsCpuConfig;
use std::collections::HashMap;
use tuner::{Config, CostModel, SearchSpace};

/// Weight of a record of the same kernel at another shape on this device (before the shape
/// similarity).
pub const SAME_KERNEL: f64 = 1.0;
/// Weight of a record of another kernel of the same template on this device.
pub const OTHER_KERNEL: f64 = 0.5;
/// Weight of a record of the same kernel on another device of the same kind.
pub const OTHER_DEVICE: f64 = 0.25;
/// The most prior records a run learns from (the most similar problems first).
pub const MAX_PRIOR: usize = 1024;
/// The most records one problem contributes (its best quarter, then an even stride).
pub const MAX_PER_KEY: usize = 256;
/// The best schedules of each same-kernel problem that compete for the pick.
pub const EVIDENCE_PER_KEY: usize = 3;
/// Uniform samples added to the pick's candidates.
pub const PICK_SAMPLES: usize = 256;
/// The length of [`cpu_transfer_features`].
pub const CPU_TRANSFER_FEATURES: usize = 15 + CpuFeatures::NAMES.len();

/// What a run learns from before measuring: training points and the best schedules of the
/// problems they come from.
#[derive(Clone, Debug, Default)]
pub struct Prior {
    /// Feature vectors (the run's feature function's layout).
    pub features: Vec<Vec<f64>>,
    /// `ln(best / seconds)` within the record's key (see the module docs).
    pub scores: Vec<f64>,
    /// Similarity weights in [0, 1].
    pub weights: Vec<f64>,
    /// The best schedule of each prior key, as a point of the tuned space where it is one,
    /// most similar key first.
    pub candidates: Vec<Config>,
    /// How many keys (kernel, shapes, device) the records came from.
    pub keys: usize,
    /// The best few schedules of each same-kernel problem on this device, as points of the
    /// tuned space, with their similarity-weighted mean score over those problems (a
    /// problem that did not record a schedule counts its worst recorded score for it).
    pub evidence: Vec<(Config, f64)>,
    /// How the template's default did on the same kernel's other shapes on this device:
    /// the similarity-weighted mean of its score there (each shape's own default), over the
    /// shapes that measured it; `None` where none did. The default is a per-shape rule, and
    /// where it was the best (matmuls) it beats any one transferred schedule.
    pub default_score: Option<f64>,
}

impl Prior {
    /// No training points.
    pub fn is_empty(&self) -> bool {
        self.features.is_empty()
    }

    /// Whether the template's default did at least as well on the same kernel's other
    /// shapes as the best transferred schedule ([`default_score`](Self::default_score)
    /// against the best [`evidence`](Self::evidence) score; with no evidence, whether the
    /// default was measured at all).
    pub fn prefers_default(&self) -> bool {
        let Some(d) = self.default_score else {
            return false;
        };
        // Ties (a shape whose default was its best schedule) go to the default.
        self.evidence.iter().all(|(_, s)| d >= *s - 1e-9)
    }

    /// The schedule measured best across the same kernel's other shapes (highest
    /// [`evidence`](Self::evidence) score; the first on ties), if any.
    pub fn measured_best(&self) -> Option<&Config> {
        let mut best: Option<&(Config, f64)> = None;
        for e in &self.evidence {
            if best.is_none_or(|b| e.1 > b.1) {
                best = Some(e);
            }
        }
        best.map(|(c, _)| c)
    }

    /// Teaches `model` the prior (nothing when empty).
    pub fn teach(&self, model: &mut dyn CostModel) {
        if !self.is_empty() {
            model.learn_prior(&self.features, &self.scores, &self.weights);
        }
    }
}

/// Every record at hand: the embedded ones and the user cache's (a missing or unreadable
/// cache is an empty one).
pub fn available_records() -> Vec<Record> {
    let mut all = crate::tuned::embedded_records();
    all.extend(
        crate::records::JsonlFile::user_cache()
            .load()
            .unwrap_or_default(),
    );
    all
}

/// The f32 SIMD lanes of the CPU a record was measured on (from its ISA flags).
fn lanes_of(target: &Target) -> usize {
    if target.detail.contains("avx512f") {
        16
    } else if target.detail.contains("avx2") {
        8
    } else {
        4
    }
}

/// Shape similarity in (0, 1]: 1 for equal shapes, falling with the summed |log2 ratio| of
/// the dimensions (0.5 at 4 doublings).
fn shape_similarity(a: &[Vec<usize>], b: &[Vec<usize>]) -> f64 {
    let mut d = 0.0;
    for (x, y) in a.iter().zip(b) {
        for (&p, &q) in x.iter().zip(y) {
            d += ((p.max(1) as f64) / (q.max(1) as f64)).log2().abs();
        }
    }
    1.0 / (1.0 + d / 4.0)
}

/// The portable features of a CPU schedule (see the module docs): knob values by role,
/// the problem's size, then [`CpuFeatures`] with this machine's threads.
pub fn cpu_transfer_features(
    kernel: &Kernel,
    extents: &[usize],
    cfg: &CpuConfig,
    lanes: usize,
) -> Vec<f64> {
    let spatial = kernel.spatial();
    let log2 = |x: usize| (x.max(1) as f64).log2();
    let flag = |b: bool| if b { 1.0 } else { 0.0 };
    let extent = |a: Option<usize>| a.and_then(|a| extents.get(a).copied()).unwrap_or(1);
    let reduction: usize = kernel
        .reduction()
        .iter()
        .map(|&r| extents.get(r).copied().unwrap_or(1))
        .product();
    // The row template's knobs share the slots of the einsum knobs of the same role: its
    // stash is a reuse buffer like a packed panel, lanes across rows a loop order, a
    // separable window a split reduction.
    let row = |knob: fn(&RowsCpuConfig) -> bool| cfg.rows.as_ref().is_some_and(knob);
    let mut f = vec![
        log2(cfg.vector),
        log2(cfg.unroll),
        flag(cfg.parallel),
        flag(cfg.pack || row(|r| r.stash)),
        flag(cfg.unroll_outer || row(|r| r.across)),
        log2(cfg.k_block + usize::from(row(|r| r.separable)) + 1),
        flag(cfg.wide_simd),
        flag(cfg.vector_axis.is_some() && cfg.vector_axis == spatial.last().copied()),
        flag(cfg.unroll_axis.is_some() && cfg.unroll_axis == spatial.iter().rev().nth(1).copied()),
        flag(cfg.vector_axis.is_none()),
        flag(cfg.unroll_axis.is_none()),
        log2(extent(cfg.vector_axis)),
        log2(extent(cfg.unroll_axis)),
        log2(reduction),
        kernel.flops(extents).max(1.0).log2(),
    ];
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    f.extend(cpu_features_with_threads(kernel, extents, &[], cfg, lanes, threads).to_vec());
    f
}

/// One recorded problem (kernel, shapes, device), read in the tuned space's feature
/// layout: its weight, whether it is the same kernel on this device (its best schedules
/// are then evidence for the pick), and per recorded config its features, best valid
/// seconds (`None`: invalid) and the config as a point of the tuned space where it is one.
struct Problem {
    weight: f64,
    evidence: bool,
    rows: Vec<(Vec<f64>, Option<f64>, Option<Config>)>,
    /// The best time of the problem's own template default, if it was measured.
    default_seconds: Option<f64>,
}

/// Records by key (the pick records of zero-trial runs left out: they are not
/// measurements), for `device` and code generator `codegen`.
fn groups<'a>(records: &'a [Record], device: &str, codegen: u32) -> Vec<(Key, Vec<&'a Record>)> {
    let mut map: HashMap<Key, Vec<&Record>> = HashMap::new();
    for r in records {
        let pick = r.seconds.is_none() && r.error.is_none();
        if r.target.device == device && r.codegen == codegen && !pick {
            map.entry(r.key()).or_default().push(r);
        }
    }
    let mut out: Vec<(Key, Vec<&Record>)> = map.into_iter().collect();
    out.sort_by(|a, b| {
        a.0.shapes
            .cmp(&b.0.shapes)
            .then(a.0.kernel.cmp(&b.0.kernel))
    });
    out
}

/// Each recorded config once with its best valid time (`None`: only invalid records), in
/// the order first recorded.
fn best_per_config<'a>(rs: &[&'a Record]) -> Vec<(&'a str, Option<f64>)> {
    let mut at: HashMap<&str, usize> = HashMap::new();
    let mut best: Vec<(&str, Option<f64>)> = Vec::new();
    for r in rs {
        let s = r
            .seconds
            .filter(|s| r.error.is_none() && s.is_finite() && *s > 0.0);
        match at.get(r.config.as_str()) {
            Some(&i) => {
                best[i].1 = match (best[i].1, s) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                }
            }
            None => {
                at.insert(r.config.as_str(), best.len());
                best.push((r.config.as_str(), s));
            }
        }
    }
    best
}

/// Problems with a weight each, most similar first, cut where [`MAX_PRIOR`] records (at
/// most [`MAX_PER_KEY`] per problem) are reached, so a large cache is not read in full.
fn most_similar(mut weighted: Vec<(f64, Key, Vec<&Record>)>) -> Vec<(f64, Key, Vec<&Record>)> {
    weighted.sort_by(|a, b| b.0.total_cmp(&a.0));
    let mut total = 0;
    weighted
        .into_iter()
        .take_while(|(_, _, rs)| {
            let go = total < MAX_PRIOR;
            total += rs.len().min(MAX_PER_KEY);
            go
        })
        .collect()
}

/// The prior of `problems` (see the module docs), most similar first, at most
/// [`MAX_PRIOR`] points and [`MAX_PER_KEY`] per problem.
fn assemble(mut problems: Vec<Problem>) -> Prior {
    problems.sort_by(|a, b| b.weight.total_cmp(&a.weight));
    let mut prior = Prior::default();
    let mut same: Vec<Evidence> = Vec::new();
    let (mut default_sum, mut default_weight) = (0.0, 0.0);
    for p in problems {
        if prior.features.len() >= MAX_PRIOR {
            break;
        }
        let Some(best) = p.rows.iter().filter_map(|r| r.1).reduce(f64::min) else {
            continue;
        };
        let worst = p
            .rows
            .iter()
            .filter_map(|r| r.1)
            .map(|s| (best / s).ln())
            .fold(0.0, f64::min);
        // The problem's valid points of the tuned space, fastest first.
        let mut ranked: Vec<(Config, f64)> = p
            .rows
            .iter()
            .filter_map(|r| Some((r.2.clone()?, (best / r.1?).ln())))
            .collect();
        ranked.sort_by(|a, b| b.1.total_cmp(&a.1));
        if let Some((c, _)) = ranked.first() {
            if !prior.candidates.contains(c) {
                prior.candidates.push(c.clone());
            }
        }
        if p.evidence {
            same.push((p.weight, ranked, worst));
            if let Some(d) = p.default_seconds {
                default_sum += p.weight * (best / d).ln();
                default_weight += p.weight;
            }
        }
        let mut rows: Vec<(Vec<f64>, f64)> = p
            .rows
            .into_iter()
            .map(|(f, s, _)| (f, s.map_or(worst - 1.0, |s| (best / s).ln())))
            .collect();
        if rows.len() > MAX_PER_KEY {
            rows.sort_by(|a, b| b.1.total_cmp(&a.1));
            let top = MAX_PER_KEY / 4;
            let rest = rows.split_off(top);
            let stride = rest.len() as f64 / (MAX_PER_KEY - top) as f64;
            rows.extend(
                (0..MAX_PER_KEY - top)
                    .filter_map(|i| rest.get((i as f64 * stride) as usize).cloned()),
            );
        }
        for (f, s) in rows {
            prior.features.push(f);
            prior.scores.push(s);
            prior.weights.push(p.weight.clamp(0.0, 1.0));
        }
        prior.keys += 1;
    }
    prior.evidence = evidence(&same);
    prior.default_score = (default_weight > 0.0).then(|| default_sum / default_weight);
    prior
}

/// The CPU prior for tuning `kernel` at `shapes` on this CPU, from `records` (see the
/// module docs): CPU records of this code generator whose kernel parses and binds and whose
/// config reads in its own space. At most [`MAX_PRIOR`] records, the most similar first.
pub fn cpu_prior(kernel: &Kernel, shapes: &[Vec<usize>], records: &[Record]) -> Prior {
    let here = crate::tuned::this_cpu();
    let fingerprint = kernel.fingerprint();
    let refs: Vec<&[usize]> = shapes.iter().map(Vec::as_slice).collect();
    let Ok(extents) = bind(kernel, &refs) else {
        return Prior::default();
    };
    let Ok(template) = CpuTemplate::new(kernel, &extents, crate::runtime::cpu::simd_lanes()) else {
        return Prior::default();
    };
    let weighted = groups(records, "cpu", CODEGEN_VERSION)
        .into_iter()
        .map(|(key, rs)| {
            let same_kernel = key.kernel == fingerprint;
            let tier = match (same_kernel, key.target == *here) {
                (true, true) => SAME_KERNEL,
                (false, true) => OTHER_KERNEL,
                (true, false) => OTHER_DEVICE,
                (false, false) => OTHER_KERNEL * OTHER_DEVICE,
            };
            let weight = if same_kernel {
                tier * shape_similarity(&key.shapes, shapes)
            } else {
                tier
            };
            (weight, key, rs)
        })
        .collect();
    let mut kernels: HashMap<String, Option<Kernel>> = HashMap::new();
    let mut problems = Vec::new();
    for (weight, key, rs) in most_similar(weighted) {
        let same_kernel = key.kernel == fingerprint;
        let same_device = key.target == *here;
        let k = if same_kernel {
            Some(kernel.clone())
        } else {
            kernels
                .entry(key.kernel.clone())
                .or_insert_with(|| {
                    let r = rs.first()?;
                    parse_text(&r.name, &r.kernel_text, None).ok()
                })
                .clone()
        };
        let Some(k) = k else { continue };
        let krefs: Vec<&[usize]> = key.shapes.iter().map(Vec::as_slice).collect();
        let Ok(kext) = bind(&k, &krefs) else { continue };
        let lanes = lanes_of(&key.target);
        let Ok(ktemplate) = CpuTemplate::new(&k, &kext, lanes) else {
            continue;
        };
        let per_config = best_per_config(&rs);
        let default_text = ktemplate.space().format(&ktemplate.default_config()).ok();
        let default_seconds = per_config
            .iter()
            .find(|(text, _)| Some(*text) == default_text.as_deref())
            .and_then(|(_, s)| *s);
        let rows = per_config
            .into_iter()
            .filter_map(|(text, s)| {
                let cfg = ktemplate.decode(&ktemplate.parse(text).ok()?).ok()?;
                let point = to_space(&ktemplate, &template, &k, kernel, text);
                Some((cpu_transfer_features(&k, &kext, &cfg, lanes), s, point))
            })
            .collect();
        problems.push(Problem {
            weight,
            evidence: same_kernel && same_device,
            rows,
            default_seconds,
        });
    }
    assemble(problems)
}

/// The CUDA prior for tuning `kernel` at `shapes` on the GPU `gpu` (see the module docs):
/// records of the same kernel at other shapes on this GPU (weighted by shape similarity),
/// then on other GPUs ([`OTHER_DEVICE`]), read in their own CUDA space and featurized as
/// the tuned run does (`features`: knob features then the analytic GPU features, computed
/// for `gpu`). Other kernels are left out: their knob features do not line up. A problem
/// whose feature vectors have another length than the tuned space's (a tensor-core space
/// against a SIMT one) is left out too.
pub fn cuda_prior(
    kernel: &Kernel,
    shapes: &[Vec<usize>],
    gpu: &GpuTarget,
    records: &[Record],
) -> Prior {
    let fingerprint = kernel.fingerprint();
    let refs: Vec<&[usize]> = shapes.iter().map(Vec::as_slice).collect();
    let Ok(extents) = bind(kernel, &refs) else {
        return Prior::default();
    };
    let Ok(space) = CudaSpace::new(kernel, &extents, &refs, gpu) else {
        return Prior::default();
    };
    let width = cuda_features(kernel, &extents, shapes, &space, gpu);
    let Some(width) = space.default_point().ok().map(|d| width(&d).len()) else {
        return Prior::default();
    };
    let same_gpu = |t: &Target| t.name == gpu.name && t.detail == format!("sm_{}", gpu.sm);
    let weighted = groups(records, "cuda", crate::codegen::cuda::CODEGEN_VERSION)
        .into_iter()
        .filter(|(key, _)| key.kernel == fingerprint)
        .map(|(key, rs)| {
            let tier = if same_gpu(&key.target) {
                SAME_KERNEL
            } else {
                OTHER_DEVICE
            };
            (tier * shape_similarity(&key.shapes, shapes), key, rs)
        })
        .collect();
    let mut problems = Vec::new();
    for (weight, key, rs) in most_similar(weighted) {
        let same_device = same_gpu(&key.target);
        let krefs: Vec<&[usize]> = key.shapes.iter().map(Vec::as_slice).collect();
        let Ok(kext) = bind(kernel, &krefs) else {
            continue;
        };
        let Ok(kspace) = CudaSpace::new(kernel, &kext, &krefs, gpu) else {
            continue;
        };
        let featurize = cuda_features(kernel, &kext, &key.shapes, &kspace, gpu);
        let rows: Vec<(Vec<f64>, Option<f64>, Option<Config>)> = best_per_config(&rs)
            .into_iter()
            .filter_map(|(text, s)| {
                let c = kspace.space().parse(text).ok()?;
                let f = featurize(&c);
                let point = space
                    .space()
                    .parse(text)
                    .ok()
                    .filter(|p| space.space().is_valid(p));
                (f.len() == width).then_some((f, s, point))
            })
            .collect();
        problems.push(Problem {
            weight,
            evidence: same_device,
            rows,
            default_seconds: None,
        });
    }
    assemble(problems)
}

/// The features a CUDA tuning run gives its model: the knob features, then the analytic
/// GPU features of SIMT schedules (zeros for tensor-core ones). A schedule compiled in this
/// process (every measured candidate: the measurer assembles a CUBIN for it) has its
/// features computed with ptxas's register count ([`crate::runtime::cubin::recall`]); the
/// others with the features' estimate.
pub fn cuda_features<'a>(
    kernel: &'a Kernel,
    extents: &'a [usize],
    shapes: &'a [Vec<usize>],
    space: &'a CudaSpace,
    gpu: &'a GpuTarget,
) -> impl Fn(&Config) -> Vec<f64> + 'a {
    let arch = gpu.real_arch();
    let fingerprint = kernel.fingerprint();
    crate::autotune::combined_features(
        space.space(),
        GpuFeatures::NAMES.len(),
        move |c| match space.decode(c).ok()? {
            CudaSchedule::Simt(s) => {
                let key = crate::runtime::cubin::schedule_key(
                    &fingerprint,
                    extents,
                    &format!("{s:?}"),
                    &arch,
                );
                let ptxas = crate::runtime::cubin::recall(&key);
                Some(gpu_features(kernel, extents, shapes, &s, gpu, ptxas.as_ref()).to_vec())
            }
            CudaSchedule::TensorCore(_) | CudaSchedule::Wgmma(_) => None,
        },
    )
}

/// One same-kernel problem's part of the evidence: its weight, the scores of its valid
/// points of the tuned space (fastest first), its worst recorded score.
type Evidence = (f64, Vec<(Config, f64)>, f64);

/// The best [`EVIDENCE_PER_KEY`] schedules of every problem, each scored by the weighted mean
/// over all problems of its score there (the problem's worst score where it is missing).
fn evidence(same: &[Evidence]) -> Vec<(Config, f64)> {
    let mut out: Vec<(Config, f64)> = Vec::new();
    for (_, scores, _) in same {
        for (c, _) in scores.iter().take(EVIDENCE_PER_KEY) {
            if out.iter().any(|(o, _)| o == c) {
                continue;
            }
            let (mut sum, mut total) = (0.0, 0.0);
            for (w, s, worst) in same {
                let v = s.iter().find(|(o, _)| o == c).map_or(*worst, |(_, v)| *v);
                sum += w * v;
                total += w;
            }
            out.push((c.clone(), if total > 0.0 { sum / total } else { 0.0 }));
        }
    }
    out
}

/// A schedule of `from` (another shape or kernel) as a point of `to`'s space: the same
/// config text for the same kernel; for another kernel, the roles carried over (vector axis
/// = innermost output axis, unroll axis = the next) with the same numbers. `None` where it
/// is not a valid point.
fn to_space(
    from: &CpuTemplate,
    to: &CpuTemplate,
    from_kernel: &Kernel,
    to_kernel: &Kernel,
    text: &str,
) -> Option<Config> {
    if from_kernel.fingerprint() == to_kernel.fingerprint() {
        let c = to.parse(text).ok()?;
        return to.space().is_valid(&c).then_some(c);
    }
    let cfg = from.decode(&from.parse(text).ok()?).ok()?;
    let (fs, ts) = (from_kernel.spatial(), to_kernel.spatial());
    let role = |a: Option<usize>| -> Option<Option<usize>> {
        match a {
            None => Some(None),
            Some(a) => {
                let from_end = fs.len() - fs.iter().position(|&x| x == a)?;
                Some(Some(*ts.get(ts.len().checked_sub(from_end)?)?))
            }
        }
    };
    let moved = CpuConfig {
        vector_axis: role(cfg.vector_axis)?,
        unroll_axis: role(cfg.unroll_axis)?,
        ..cfg
    };
    to.encode(&moved)
}

/// The pick for a run (see the module docs): `default` where the default did at least as
/// well on the kernel's other shapes ([`Prior::prefers_default`]), else the prior's
/// [`measured_best`](Prior::measured_best) where it is a valid point of `space`, else
/// `default` again. Without measurements of the same kernel, a model trained on other
/// kernels is not trusted with the pick: a forest that saw one shape of a dense layer once
/// ranked a 48-wide vector over the batch axis first for a batched matmul, 100x slower than
/// the analytic default. The model's own pick ([`model_pick`]) is measured next, when the
/// run measures.
///
/// `default: None` (a pure search) falls back to `fallback`, the model's pick.
pub fn pick(
    space: &SearchSpace,
    default: Option<&Config>,
    prior: &Prior,
    fallback: Option<&Config>,
) -> Option<Config> {
    if let Some(d) = default.filter(|_| prior.prefers_default()) {
        return Some(d.clone());
    }
    prior
        .measured_best()
        .filter(|c| space.is_valid(c))
        .or(default)
        .or(fallback)
        .cloned()
}

/// The model's pick: among `default`, `candidates`, the valid neighbours of both and
/// [`PICK_SAMPLES`] uniform samples (seeded), the point `model` predicts fastest; the
/// default wins ties (an untrained model's pick is the default).
pub fn model_pick(
    space: &SearchSpace,
    default: &Config,
    candidates: &[Config],
    model: &dyn CostModel,
    features: &dyn Fn(&Config) -> Vec<f64>,
    seed: u64,
) -> Config {
    use rand::SeedableRng;
    let mut pool: Vec<Config> = vec![default.clone()];
    let push = |c: Config, pool: &mut Vec<Config>| {
        if space.is_valid(&c) && !pool.contains(&c) {
            pool.push(c);
        }
    };
    for c in std::iter::once(default).chain(candidates) {
        push(c.clone(), &mut pool);
        for n in space.neighbors(c).unwrap_or_default() {
            push(n, &mut pool);
        }
    }
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed ^ 0x7069_636b);
    for _ in 0..PICK_SAMPLES {
        if let Ok(c) = space.sample_uniform(&mut rng) {
            push(c, &mut pool);
        }
    }
    let feats: Vec<Vec<f64>> = pool.iter().map(features).collect();
    let scores = model.predict(&feats);
    let mut best = 0;
    for (i, s) in scores.iter().enumerate() {
        if *s > scores[best] {
            best = i;
        }
    }
    pool.swap_remove(best)
}
