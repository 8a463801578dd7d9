//! `tensor-dsl study`: the tuner's acceptance check, offline. Every search strategy runs
//! over several seeds on every recorded CPU landscape (records files from `tensor-dsl
//! landscape` or `bench --record-landscape`; a file may hold several problems), at each
//! trial budget (32 and 64 by default), through the product's one search
//! ([`tensor_dsl::autotune::search`]: the template's default measured among the first
//! points, the forest model on the portable transfer features) with a
//! [`tuner::ReplayMeasurer`] in place of the machine. A point the landscape did not record
//! (a sampled landscape) replays as its nearest recorded point by default, or as invalid
//! (`--unrecorded invalid`): see [`Unrecorded`].
//!
//! Runs start cold (no records of other shapes) unless `--transfer`: then each run's model
//! first learns the leave-one-out prior below, as users' tuning does with records at hand.
//!
//! Per landscape and strategy it reports, for each budget, the final ratio to the
//! landscape's best (min and median over the seeds) and the spread across seeds (max − min
//! of the final ratio, the ICS'24 run-to-run variability), plus the median trials to
//! `share` (95%) of the best within the largest budget. Per landscape it reports the
//! **zero-trial** pick computed leave-one-shape-out: the model learns from the other
//! landscapes of the same kernel (as records of other shapes, [`tensor_dsl::transfer`]),
//! picks with zero trials, and the pick is read in the held-out landscape (a pick the
//! landscape did not record is read at its nearest recorded point, by knob hops, and
//! marked so).
//!
//! Pass/fail, per landscape and strategy, against [`THRESHOLDS`]: every seed's final
//! ratio at budget 64 ≥ 0.95 and at budget 32 ≥ 0.90, and the spread at the largest
//! budget ≤ [`MAX_SPREAD`]; the zero-trial pick passes at ≥ [`ZERO_TRIAL_SHARE`]. The
//! strategy passing on the most landscapes wins (ties: the best worst ratio, largest
//! budget first, then the smallest spread, both compared on a grid of [`RANK_STEP`], then
//! the current `autotune::CPU_DEFAULT_STRATEGY`); that constant is set from this winner,
//! so the default changes only on a difference the study can see. Writes `study.json` (every run), `study.md` (the tables) and one
//! convergence SVG per landscape (mean best-so-far GFLOPS at the largest budget, one line
//! per strategy) into `--out`.
//!
//! Landscapes recorded in older spaces (a knob added or renamed since) may not read in
//! today's: such records are counted and reported, and a landscape none of whose records
//! reads is skipped with a message that says so.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use tensor_dsl::autotune::{self, TuneOptions};
use tensor_dsl::ir::{bind, parse_text, Kernel};
use tensor_dsl::records::{self, Record};
use tensor_dsl::template::cpu::CpuTemplate;
use tensor_dsl::transfer::{self, cpu_transfer_features};
use tuner::{Config, Outcome, ReplayMeasurer};

/// The least final ratio to the best-known point every seed must reach, by trial budget
/// (the largest entry at or below a budget applies; none below 32 trials).
pub const THRESHOLDS: [(usize, f64); 2] = [(32, 0.90), (64, 0.95)];
/// The largest spread (max − min of the final ratio across seeds) at the largest budget.
pub const MAX_SPREAD: f64 = 0.03;
/// A landscape with fewer valid points than this many times the largest budget cannot tell
/// strategies apart (a search measures most of it): a pass on it is inconclusive.
pub const MIN_POINTS_PER_TRIAL: usize = 2;
/// The least ratio of the zero-trial pick (leave-one-shape-out).
pub const ZERO_TRIAL_SHARE: f64 = 0.90;
/// Worst ratios and spreads are compared on a grid of this step when ranking strategies,
/// so that a difference in the third decimal (a forest's random feature sampling moves
/// results that much) does not make a winner; a tie that remains goes to the current CPU
/// default.
pub const RANK_STEP: f64 = 0.005;

/// A point's feature vector for the cost model.
type Features = Box<dyn Fn(&Config) -> Vec<f64>>;

/// One landscape: a problem's points with pooled samples.
struct Landscape {
    name: String,
    file: PathBuf,
    kernel: Kernel,
    shapes: Vec<Vec<usize>>,
    flops: f64,
    template: CpuTemplate,
    features: Features,
    points: Vec<(Config, Outcome)>,
    /// Pooled median seconds per valid config.
    pooled: HashMap<Config, f64>,
    best: f64,
    /// The records that read in today's space (training data for the other shapes' picks).
    records: Vec<Record>,
    /// Records that do not read in today's space.
    unread: usize,
}

/// The f32 SIMD lanes of a record's CPU (from its ISA flags).
fn lanes_of(r: &Record) -> usize {
    if r.target.detail.contains("avx512f") {
        16
    } else if r.target.detail.contains("avx2") {
        8
    } else {
        4
    }
}

/// The landscapes of `file`, and a note per problem that had to be skipped or read in part.
fn landscapes_of(
    file: &Path,
    used: &mut std::collections::HashSet<String>,
) -> Result<(Vec<Landscape>, Vec<String>), String> {
    let (recs, _) = records::read(file).map_err(|e| format!("{}: {e}", file.display()))?;
    let mut groups: Vec<(records::Key, Vec<Record>)> = Vec::new();
    for r in recs.into_iter().filter(|r| r.target.device == "cpu") {
        let key = r.key();
        match groups.iter_mut().find(|(k, _)| *k == key) {
            Some((_, v)) => v.push(r),
            None => groups.push((key, vec![r])),
        }
    }
    let stem = file
        .file_stem()
        .map_or("landscape".into(), |s| s.to_string_lossy().to_string());
    let many = groups.len() > 1;
    let mut out = Vec::new();
    let mut notes = Vec::new();
    for (i, (key, rs)) in groups.into_iter().enumerate() {
        let base = if many {
            format!("{stem}-{i}")
        } else {
            stem.clone()
        };
        // Files of one name in two folders (an old and a new landscape) stay apart.
        let mut name = base.clone();
        let mut n = 2;
        while !used.insert(name.clone()) {
            name = format!("{base}-{n}");
            n += 1;
        }
        let first = &rs[0];
        let kernel = parse_text(&first.name, &first.kernel_text, None)
            .map_err(|e| format!("{}: kernel `{}`: {e}", file.display(), first.kernel_text))?;
        let refs: Vec<&[usize]> = key.shapes.iter().map(Vec::as_slice).collect();
        let extents = bind(&kernel, &refs).map_err(|e| e.to_string())?;
        let lanes = lanes_of(first);
        let template = CpuTemplate::new(&kernel, &extents, lanes)?;
        let mut points = Vec::new();
        let mut read = Vec::new();
        let mut first_error = None;
        for r in &rs {
            match template.parse(&r.config) {
                Ok(c) => {
                    points.push((c, crate::landscape::outcome_of(r)));
                    read.push(r.clone());
                }
                Err(e) => {
                    first_error.get_or_insert_with(|| e.to_string());
                }
            }
        }
        let unread = rs.len() - read.len();
        if let Some(e) = &first_error {
            notes.push(format!(
                "{name}: {unread} of {} records do not read in today's CPU space (recorded \
                 by code generator {}, today's is {}; e.g. {e}){}",
                rs.len(),
                first.codegen,
                tensor_dsl::codegen::c::CODEGEN_VERSION,
                if read.is_empty() {
                    "; skipped: record it again with `tensor-dsl landscape` (bench/landscapes.sh)"
                } else {
                    "; judged on the rest"
                }
            ));
        }
        let mut samples: HashMap<Config, Vec<f64>> = HashMap::new();
        for (c, o) in &points {
            if let Outcome::Valid { samples: s } = o {
                samples.entry(c.clone()).or_default().extend(s);
            }
        }
        let pooled: HashMap<Config, f64> = samples
            .into_iter()
            .filter_map(|(c, s)| Outcome::Valid { samples: s }.seconds().map(|m| (c, m)))
            .collect();
        let best = pooled.values().copied().fold(f64::INFINITY, f64::min);
        if !best.is_finite() {
            if !read.is_empty() {
                notes.push(format!("{name}: no valid point recorded; skipped"));
            }
            continue;
        }
        let t2 = template.clone();
        let k2 = kernel.clone();
        let e2 = extents.clone();
        let features = Box::new(move |c: &Config| match t2.decode(c) {
            Ok(cfg) => cpu_transfer_features(&k2, &e2, &cfg, lanes),
            Err(_) => vec![0.0; transfer::CPU_TRANSFER_FEATURES],
        });
        out.push(Landscape {
            name,
            file: file.to_path_buf(),
            flops: kernel.flops(&extents),
            kernel,
            shapes: key.shapes.clone(),
            template,
            features,
            points,
            pooled,
            best,
            records: read,
            unread,
        });
    }
    Ok((out, notes))
}

/// How a replay answers a point the landscape did not record (a sampled landscape).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Unrecorded {
    /// As its nearest recorded point (fewest knob hops; the slower one on ties, so the
    /// stand-in never flatters a strategy): a sampled landscape read as a piecewise-constant
    /// surface, so strategies are judged on where they go, not on hitting the sample.
    Nearest,
    /// As invalid: only recorded points count (exact on full landscapes, harsh on
    /// sampled ones).
    Invalid,
}

/// The point of `l` that stands in for `c`: itself if recorded, else (with
/// [`Unrecorded::Nearest`]) its nearest recorded valid point.
fn stand_in<'a>(l: &'a Landscape, c: &'a Config, mode: Unrecorded) -> Option<&'a Config> {
    if l.pooled.contains_key(c) {
        return Some(c);
    }
    if mode == Unrecorded::Invalid {
        return None;
    }
    let space = l.template.space();
    let mut near: Option<(u64, f64, &Config)> = None;
    for (p, s) in &l.pooled {
        let Ok(h) = space.hop_distance(c, p) else {
            continue;
        };
        if near.is_none_or(|(bh, bs, _)| h < bh || (h == bh && *s > bs)) {
            near = Some((h, *s, p));
        }
    }
    near.map(|(_, _, p)| p)
}

/// A replay of `l` that answers unrecorded points per [`Unrecorded`].
struct Replay<'a> {
    l: &'a Landscape,
    mode: Unrecorded,
    inner: ReplayMeasurer,
}

impl Replay<'_> {
    fn stand_in_of(&self, c: &Config) -> Config {
        stand_in(self.l, c, self.mode).unwrap_or(c).clone()
    }
}

impl tuner::Measurer for Replay<'_> {
    fn measure(&mut self, batch: &[Config]) -> Vec<Outcome> {
        let mapped: Vec<Config> = batch.iter().map(|c| self.stand_in_of(c)).collect();
        self.inner.measure(&mapped)
    }

    fn remeasure(&mut self, config: &Config) -> Outcome {
        let c = self.stand_in_of(config);
        self.inner.remeasure(&c)
    }
}

/// What one strategy did on one landscape over the seeds at one budget.
struct Runs {
    budget: usize,
    trials_to_share: Vec<Option<usize>>,
    /// Final ratio to the landscape's best, per seed.
    ratio: Vec<f64>,
    /// Mean best-so-far GFLOPS after each trial, over the seeds (`None` until every seed
    /// has a valid point).
    curve: Vec<Option<f64>>,
}

impl Runs {
    fn median_trials(&self) -> Option<f64> {
        let mut all: Vec<f64> = self
            .trials_to_share
            .iter()
            .map(|r| r.map_or(f64::INFINITY, |x| x as f64))
            .collect();
        all.sort_by(f64::total_cmp);
        all.get(all.len() / 2).copied().filter(|m| m.is_finite())
    }
    fn hits(&self) -> usize {
        self.trials_to_share.iter().flatten().count()
    }
    fn min(&self) -> f64 {
        self.ratio.iter().copied().fold(f64::INFINITY, f64::min)
    }
    fn max(&self) -> f64 {
        self.ratio.iter().copied().fold(0.0, f64::max)
    }
    fn median(&self) -> f64 {
        let mut v = self.ratio.clone();
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2).copied().unwrap_or(0.0)
    }
    /// Max − min of the final ratio across seeds.
    fn spread(&self) -> f64 {
        (self.max() - self.min()).max(0.0)
    }
    /// The threshold this budget is held to, if any.
    fn threshold(&self) -> Option<f64> {
        threshold(self.budget)
    }
}

/// The least final ratio at `budget` ([`THRESHOLDS`]).
pub fn threshold(budget: usize) -> Option<f64> {
    THRESHOLDS
        .iter()
        .filter(|(b, _)| *b <= budget)
        .map(|(_, t)| *t)
        .next_back()
}

/// The options of one replayed run: the product's defaults with `strategy`, `trials` and
/// `seed`.
fn options(strategy: &str, trials: usize, seed: u64) -> TuneOptions {
    TuneOptions {
        strategy: strategy.to_string(),
        trials,
        seed,
        ..TuneOptions::default()
    }
}

fn replay(
    l: &Landscape,
    strategy: &str,
    budget: usize,
    seeds: u64,
    share: f64,
    mode: Unrecorded,
    prior: &transfer::Prior,
) -> Result<Runs, String> {
    let space = l.template.space();
    let mut runs = Runs {
        budget,
        trials_to_share: Vec::new(),
        ratio: Vec::new(),
        curve: Vec::new(),
    };
    let mut sums = vec![0.0; budget];
    let mut counts = vec![0usize; budget];
    for seed in 0..seeds {
        let mut measurer = Replay {
            l,
            mode,
            inner: ReplayMeasurer::new(l.points.clone()).with_resampling(seed),
        };
        let searched = autotune::search(
            space,
            Some(l.template.default_config()),
            prior,
            &options(strategy, budget, seed),
            &*l.features,
            &mut measurer,
            &mut |_| {},
        )
        .map_err(|e| e.to_string())?;
        // Judged by pooled medians, the statistic of the landscape's best.
        let mut so_far = f64::INFINITY;
        let mut reached = None;
        for (i, t) in searched.result.trials.iter().enumerate() {
            if let Some(p) = stand_in(l, &t.config, mode).and_then(|c| l.pooled.get(c)) {
                so_far = so_far.min(*p);
            }
            if reached.is_none() && l.best / so_far >= share {
                reached = Some(i + 1);
            }
            if so_far.is_finite() && i < budget {
                sums[i] += l.flops / so_far / 1e9;
                counts[i] += 1;
            }
        }
        runs.trials_to_share.push(reached);
        runs.ratio.push(if so_far.is_finite() {
            l.best / so_far
        } else {
            0.0
        });
    }
    runs.curve = sums
        .iter()
        .zip(&counts)
        .map(|(s, &n)| (n as u64 == seeds && n > 0).then(|| s / n as f64))
        .collect();
    Ok(runs)
}

/// The zero-trial pick of `l`, leave-one-shape-out: what it read, or why there is none.
#[derive(Clone, Debug, PartialEq)]
pub enum ZeroTrial {
    /// The pick's ratio to the landscape's best; `exact` when the landscape recorded the
    /// pick, else it is its nearest recorded point's (`hops` knob steps away).
    Read {
        ratio: f64,
        exact: bool,
        hops: u64,
        /// How many other shapes the model learned from.
        shapes: usize,
        pick: String,
    },
    /// No other landscape of the same kernel to learn from.
    NoOtherShapes,
}

impl ZeroTrial {
    fn cell(&self) -> String {
        match self {
            ZeroTrial::Read {
                ratio, exact, hops, ..
            } => {
                if *exact {
                    format!("{ratio:.3}")
                } else {
                    format!("~{ratio:.3} (nearest recorded, {hops} hops)")
                }
            }
            ZeroTrial::NoOtherShapes => "- (no other shape)".into(),
        }
    }
    fn pass(&self) -> Option<bool> {
        match self {
            ZeroTrial::Read { ratio, .. } => Some(*ratio >= ZERO_TRIAL_SHARE),
            ZeroTrial::NoOtherShapes => None,
        }
    }
}

/// The prior of `l` left out: the records of the other landscapes of its kernel (as
/// measured on this CPU by today's code generator: the study judges spaces, and a study's
/// landscapes come from one machine), and how many shapes they are.
fn leave_one_out(l: &Landscape, all: &[Landscape]) -> (transfer::Prior, usize) {
    let fingerprint = l.kernel.fingerprint();
    let here = tensor_dsl::tuned::this_cpu().clone();
    let mut shapes = 0;
    let mut recs = Vec::new();
    for o in all {
        if o.kernel.fingerprint() != fingerprint || o.shapes == l.shapes {
            continue;
        }
        shapes += 1;
        recs.extend(o.records.iter().cloned().map(|mut r| {
            r.target = here.clone();
            r.codegen = tensor_dsl::codegen::c::CODEGEN_VERSION;
            r
        }));
    }
    if shapes == 0 {
        return (transfer::Prior::default(), 0);
    }
    (transfer::cpu_prior(&l.kernel, &l.shapes, &recs), shapes)
}

/// Leave-one-shape-out: the records of the other landscapes of `l`'s kernel become the
/// records at hand (as measured on this CPU by today's code generator: the study judges
/// spaces, and a study's landscapes come from one machine), the product's search picks
/// with zero trials, and the pick is read in `l`.
fn zero_trial(l: &Landscape, all: &[Landscape]) -> Result<ZeroTrial, String> {
    let (prior, shapes) = leave_one_out(l, all);
    if shapes == 0 {
        return Ok(ZeroTrial::NoOtherShapes);
    }
    let space = l.template.space();
    let mut measurer = ReplayMeasurer::new(Vec::new());
    let searched = autotune::search(
        space,
        Some(l.template.default_config()),
        &prior,
        &options(autotune::CPU_DEFAULT_STRATEGY, 0, 0),
        &*l.features,
        &mut measurer,
        &mut |_| {},
    )
    .map_err(|e| e.to_string())?;
    let pick = searched.pick.unwrap_or_else(|| l.template.default_config());
    let text = space.format(&pick).unwrap_or_default();
    if let Some(s) = l.pooled.get(&pick) {
        return Ok(ZeroTrial::Read {
            ratio: l.best / s,
            exact: true,
            hops: 0,
            shapes,
            pick: text,
        });
    }
    // Its nearest recorded valid point (the slower one on ties).
    let near = stand_in(l, &pick, Unrecorded::Nearest)
        .ok_or("no recorded point is comparable with the pick")?;
    let hops = space.hop_distance(&pick, near).map_err(|e| e.to_string())?;
    let s = l.pooled.get(near).copied().unwrap_or(f64::INFINITY);
    Ok(ZeroTrial::Read {
        ratio: l.best / s,
        exact: false,
        hops,
        shapes,
        pick: text,
    })
}

/// Per strategy over all landscapes.
#[derive(Default)]
struct Overall {
    passed: usize,
    landscapes: usize,
    /// Worst final ratio per budget.
    worst: HashMap<usize, f64>,
    spread: f64,
}

/// The strategies best first: most landscapes passed; then the best worst ratios (largest
/// budget first) and the smallest spread, both on a grid of [`RANK_STEP`] (a total order,
/// unlike a tolerance); then `incumbent`; then by name.
fn rank<'a>(
    overall: &'a HashMap<String, Overall>,
    budgets: &[usize],
    incumbent: &str,
) -> Vec<(&'a String, &'a Overall)> {
    let worst = |o: &Overall| -> Vec<i64> {
        budgets
            .iter()
            .rev()
            .map(|b| step(o.worst.get(b).copied().unwrap_or(0.0)))
            .collect()
    };
    let mut ranked: Vec<(&String, &Overall)> = overall.iter().collect();
    ranked.sort_by(|a, b| {
        b.1.passed
            .cmp(&a.1.passed)
            .then_with(|| worst(b.1).cmp(&worst(a.1)))
            .then(step(a.1.spread).cmp(&step(b.1.spread)))
            .then((b.0 == incumbent).cmp(&(a.0 == incumbent)))
            .then(a.0.cmp(b.0))
    });
    ranked
}

/// `x` on the grid of [`RANK_STEP`].
fn step(x: f64) -> i64 {
    (x / RANK_STEP).round() as i64
}

/// What a study replays (the command's options).
pub struct Settings {
    /// Comma-separated strategy names, or `all`.
    pub strategies: String,
    /// Trial budgets, each replayed separately.
    pub budgets: Vec<usize>,
    pub seeds: u64,
    /// The share of the best that counts as reached (trials to 95%).
    pub share: f64,
    pub unrecorded: Unrecorded,
    /// Runs learn the leave-one-out prior first.
    pub transfer: bool,
}

/// Runs the study (see the module docs).
pub fn run(files: &[PathBuf], opts: &Settings, out: &Path) -> Result<ExitCode, String> {
    let Settings {
        strategies,
        budgets,
        seeds,
        share,
        unrecorded,
        transfer: with_transfer,
    } = opts;
    let (seeds, share, unrecorded, with_transfer) = (*seeds, *share, *unrecorded, *with_transfer);
    let names = crate::landscape::strategy_names(strategies);
    let mut budgets = budgets.to_vec();
    budgets.sort_unstable();
    budgets.dedup();
    let top = *budgets.last().ok_or("--budgets names no trial budget")?;
    std::fs::create_dir_all(out).map_err(|e| format!("{}: {e}", out.display()))?;
    let mut all = Vec::new();
    let mut notes = Vec::new();
    let mut used = std::collections::HashSet::new();
    for file in files {
        let (ls, ns) = landscapes_of(file, &mut used)?;
        all.extend(ls);
        notes.extend(ns);
    }
    for n in &notes {
        crate::output::note(format_args!("tensor-dsl: study: {n}\n"));
    }
    if all.is_empty() {
        return Err(format!(
            "no landscape to study: none of the {} file(s) holds a valid point that reads in \
             today's CPU space (see the notes above)",
            files.len()
        ));
    }
    let mut json = Vec::new();
    let budget_list: Vec<String> = budgets.iter().map(|b| b.to_string()).collect();
    let mut md = format!(
        "# Strategy study: {} trials, {seeds} seeds\n\nEach run is the product's search \
         (`autotune::search`) replayed on the landscape. Pass: every seed's final ratio to \
         the landscape's best {}; spread (max-min of the final ratio) at {top} trials <= \
         {MAX_SPREAD}; zero-trial pick (leave-one-shape-out) >= {ZERO_TRIAL_SHARE}. A point \
         a landscape did not record replays {}.\n\n",
        budget_list.join(" and "),
        THRESHOLDS
            .iter()
            .map(|(b, t)| format!(">= {t} at {b}"))
            .collect::<Vec<_>>()
            .join(", "),
        match unrecorded {
            Unrecorded::Nearest =>
                "as its nearest recorded point (fewest knob hops, the slower on ties)",
            Unrecorded::Invalid => "as invalid",
        }
    );
    md.push_str(if with_transfer {
        "Runs learn from the other landscapes of their kernel first (leave-one-shape-out \
         transfer, `--transfer`).\n\n"
    } else {
        "Runs start cold: no records of other shapes (`--transfer` replays with them).\n\n"
    });
    if !notes.is_empty() {
        md.push_str("Notes:\n\n");
        for n in &notes {
            md.push_str(&format!("- {n}\n"));
        }
        md.push('\n');
    }
    let mut overall: HashMap<String, Overall> = HashMap::new();
    let mut zero_pass = (0usize, 0usize);
    // Landscapes too small to tell strategies apart.
    let mut small: Vec<String> = Vec::new();
    for l in &all {
        let zero = zero_trial(l, &all)?;
        // With --transfer the runs start as users' tuning does with records of the
        // kernel's other shapes at hand: from the leave-one-out prior.
        let prior = if with_transfer {
            leave_one_out(l, &all).0
        } else {
            transfer::Prior::default()
        };
        if let Some(p) = zero.pass() {
            zero_pass.1 += 1;
            zero_pass.0 += usize::from(p);
        }
        if l.pooled.len() < MIN_POINTS_PER_TRIAL * top {
            small.push(l.name.clone());
        }
        md.push_str(&format!(
            "## {} ({} valid points recorded{}, {} in the space; best {:.1} GFLOPS)\n\n\
             Zero-trial pick (leave-one-shape-out): {}{}\n\n",
            l.name,
            l.pooled.len(),
            if l.unread > 0 {
                format!(", {} records unread", l.unread)
            } else {
                String::new()
            },
            l.template
                .space()
                .enumerate(1_000_000)
                .map_or("more than 10^6".to_string(), |v| v.len().to_string()),
            l.flops / l.best / 1e9,
            zero.cell(),
            match zero.pass() {
                Some(true) => " - pass",
                Some(false) => " - **fail**",
                None => "",
            }
        ));
        md.push_str("| strategy |");
        for b in &budgets {
            md.push_str(&format!(" min @{b} | median @{b} | spread @{b} |"));
        }
        md.push_str(&format!(
            " median trials to {:.0}% | seeds reaching it | pass |\n|---|",
            share * 100.0
        ));
        md.push_str(&"---|".repeat(budgets.len() * 3 + 3));
        md.push('\n');
        let mut series = Vec::new();
        let mut rows = Vec::new();
        for name in &names {
            let runs: Vec<Runs> = budgets
                .iter()
                .map(|&b| replay(l, name, b, seeds, share, unrecorded, &prior))
                .collect::<Result<_, _>>()?;
            let last = &runs[runs.len() - 1];
            let pass = runs
                .iter()
                .all(|r| r.threshold().is_none_or(|t| r.min() >= t))
                && last.spread() <= MAX_SPREAD;
            md.push_str(&format!("| {name} |"));
            for r in &runs {
                md.push_str(&format!(
                    " {:.3} | {:.3} | {:.3} |",
                    r.min(),
                    r.median(),
                    r.spread()
                ));
            }
            md.push_str(&format!(
                " {} | {}/{seeds} | {} |\n",
                last.median_trials().map_or("-".into(), |m| format!("{m}")),
                last.hits(),
                if pass { "pass" } else { "**fail**" }
            ));
            let o = overall.entry(name.clone()).or_default();
            o.landscapes += 1;
            o.passed += usize::from(pass);
            for r in &runs {
                let w = o.worst.entry(r.budget).or_insert(f64::INFINITY);
                *w = w.min(r.min());
            }
            o.spread = o.spread.max(last.spread());
            rows.push(serde_json::json!({
                "strategy": name,
                "pass": pass,
                "budgets": runs.iter().map(|r| serde_json::json!({
                    "trials": r.budget,
                    "threshold": r.threshold(),
                    "final_ratio": r.ratio,
                    "min_ratio": r.min(),
                    "median_ratio": r.median(),
                    "spread": r.spread(),
                    "trials_to_share": r.trials_to_share,
                    "median_trials_to_share": r.median_trials(),
                    "seeds_reaching_share": r.hits(),
                    "mean_best_gflops": r.curve,
                })).collect::<Vec<_>>(),
            }));
            series.push(tuner::plot::Series {
                name: name.clone(),
                history: last.curve.clone(),
            });
        }
        let svg = out.join(format!("{}.svg", l.name));
        tuner::plot::draw(
            &svg,
            &format!(
                "{}: mean best-so-far over {seeds} seeds, {top} trials",
                l.name
            ),
            &series,
        )?;
        md.push_str(&format!("\n![{0}]({0}.svg)\n\n", l.name));
        json.push(serde_json::json!({
            "landscape": l.name,
            "file": l.file.display().to_string(),
            "kernel": l.kernel.to_string(),
            "shapes": l.shapes,
            "points": l.pooled.len(),
            "unread_records": l.unread,
            "best_seconds": l.best,
            "best_gflops": l.flops / l.best / 1e9,
            "zero_trial": match &zero {
                ZeroTrial::Read { ratio, exact, hops, shapes, pick } => serde_json::json!({
                    "ratio": ratio, "exact": exact, "hops": hops,
                    "trained_on_shapes": shapes, "pick": pick, "pass": ratio >= &ZERO_TRIAL_SHARE,
                }),
                ZeroTrial::NoOtherShapes => serde_json::Value::Null,
            },
            "results": rows,
        }));
    }
    md.push_str("## Over all landscapes\n\n| strategy | landscapes passed |");
    for b in &budgets {
        md.push_str(&format!(" worst ratio @{b} |"));
    }
    md.push_str(&format!(" largest spread @{top} |\n|---|---|"));
    md.push_str(&"---|".repeat(budgets.len() + 1));
    md.push('\n');
    let ranked = rank(&overall, &budgets, autotune::CPU_DEFAULT_STRATEGY);
    for (name, o) in &ranked {
        md.push_str(&format!("| {name} | {}/{} |", o.passed, o.landscapes));
        for b in &budgets {
            md.push_str(&format!(" {:.3} |", o.worst.get(b).copied().unwrap_or(0.0)));
        }
        md.push_str(&format!(" {:.3} |\n", o.spread));
    }
    md.push_str(&format!(
        "\nZero-trial picks passing: {}/{} landscapes with other shapes of their kernel.\n",
        zero_pass.0, zero_pass.1
    ));
    let pick = ranked.first().map(|(n, _)| n.to_string());
    let all_pass = ranked
        .first()
        .is_some_and(|(_, o)| o.passed == o.landscapes)
        && zero_pass.0 == zero_pass.1;
    if let Some(p) = &pick {
        md.push_str(&format!(
            "\nMost landscapes passed (ties: the best worst ratio, largest budget first, then \
             the smallest spread, both on a grid of {RANK_STEP}, then the current default, \
             `{}`): **{p}**; the check {}.\n",
            autotune::CPU_DEFAULT_STRATEGY,
            match (all_pass, small.is_empty()) {
                (true, true) => "passes".to_string(),
                (true, false) => format!(
                    "passes, **inconclusively**: {} recorded fewer than {} valid points \
                     ({MIN_POINTS_PER_TRIAL}x the largest budget), too few to tell \
                     strategies apart",
                    small.join(", "),
                    MIN_POINTS_PER_TRIAL * top
                ),
                (false, _) => "**fails**".to_string(),
            }
        ));
    }
    let report = serde_json::json!({
        "budgets": budgets,
        "seeds": seeds,
        "share": share,
        "thresholds": THRESHOLDS,
        "max_spread": MAX_SPREAD,
        "zero_trial_share": ZERO_TRIAL_SHARE,
        "unrecorded": format!("{unrecorded:?}").to_lowercase(),
        "transfer": with_transfer,
        "notes": notes,
        "landscapes": json,
        "best_strategy": pick,
        "pass": all_pass,
        "conclusive": small.is_empty(),
        "too_small": small,
    });
    let text = serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?;
    std::fs::write(out.join("study.json"), text).map_err(|e| e.to_string())?;
    std::fs::write(out.join("study.md"), &md).map_err(|e| e.to_string())?;
    crate::output::line(format_args!(
        "{md}\nwrote {}",
        out.join("study.md").display()
    ))?;
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn overall(passed: usize, w32: f64, w64: f64, spread: f64) -> Overall {
        Overall {
            passed,
            landscapes: 7,
            worst: HashMap::from([(32, w32), (64, w64)]),
            spread,
        }
    }

    fn first(map: &HashMap<String, Overall>, incumbent: &str) -> String {
        rank(map, &[32, 64], incumbent)[0].0.clone()
    }

    #[test]
    fn third_decimal_differences_do_not_unseat_the_default() {
        // Within the grid everywhere: the incumbent wins, whatever the names' order.
        let map = HashMap::from([
            ("alpha".to_string(), overall(7, 0.9913, 0.9914, 0.000)),
            ("zeta".to_string(), overall(7, 0.9910, 0.9910, 0.001)),
        ]);
        assert_eq!(first(&map, "zeta"), "zeta");
        assert_eq!(first(&map, "alpha"), "alpha");
        // A difference the grid sees wins over the incumbent: at the largest budget first,
        // then the smaller budget, then the spread, and passes before all of them.
        let map = HashMap::from([
            ("droplet".to_string(), overall(7, 0.9912, 0.9910, 0.000)),
            ("combined".to_string(), overall(7, 0.9801, 0.9913, 0.009)),
        ]);
        assert_eq!(first(&map, "combined"), "droplet");
        let map = HashMap::from([
            ("a".to_string(), overall(7, 0.999, 0.970, 0.0)),
            ("b".to_string(), overall(7, 0.950, 0.990, 0.0)),
        ]);
        assert_eq!(first(&map, "a"), "b");
        let map = HashMap::from([
            ("a".to_string(), overall(6, 1.0, 1.0, 0.0)),
            ("b".to_string(), overall(7, 0.9, 0.95, 0.03)),
        ]);
        assert_eq!(first(&map, "a"), "b");
    }
}
