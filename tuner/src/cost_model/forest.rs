//! The learned cost model: a random forest of smartcore regression trees.

use smartcore::ensemble::random_forest_regressor::{
    RandomForestRegressor, RandomForestRegressorParameters,
};
use smartcore::linalg::basic::matrix::DenseMatrix;

use super::CostModel;

type Tree = RandomForestRegressor<f64, f64, DenseMatrix<f64>, Vec<f64>>;

/// Copies of an online point in the bootstrap when there is prior data (a prior point of
/// weight 1 gets `2 · prior_weight` times as many).
const PRIOR_COPIES: usize = 4;

/// A random forest regressor on feature vectors, retrained from scratch on every
/// [`update`](CostModel::update) (the tune loop passes all data each time).
///
/// * **Trees**: `trees` (32) regression trees, tree `i` fitted by smartcore on a bootstrap
///   sample drawn with seed `seed + i` and trying `ceil(feature_share · p)` of the `p`
///   features at each split (one smartcore forest of one tree each, because a smartcore
///   forest reuses one seed for every tree's feature choice). Deterministic for a seed.
/// * **Targets**: scores are standardised (z-scores) before fitting; predictions are
///   mapped back to the scale of the last update's scores, so they can be compared with
///   measured scores (DGD's threshold does).
/// * **Small data**: with fewer than `min_samples` (4) points, or scores that are all equal,
///   no tree is fitted and every prediction is the mean score (equal scores: "untrained").
/// * **Large data**: above `max_train` (2048) points, the best quarter of the cap is kept
///   and the rest of the cap is an even stride over the others.
/// * **Warm start** ([`Forest::pretrained`], [`Forest::warm_start`]): records of other
///   shapes or devices are kept as extra training samples, standardised on their own (a
///   different kernel is faster or slower overall; only its ranking transfers). They are
///   down-weighted: each online point enters the bootstrap `round(1 / prior_weight)` times
///   (`prior_weight` = 0.5, so an online point weighs twice a prior one), and at most
///   `max_train` prior points are kept. With prior data and no online data the model
///   predicts z-scores from the prior alone.
/// * **Weighted prior** ([`Forest::warm_start_weighted`]): each prior point carries a
///   weight in [0, 1] (its similarity to the tuned problem); it enters the bootstrap
///   `round(weight · 2 · prior_weight · PRIOR_COPIES)` times against `PRIOR_COPIES` (4) for an
///   online point, so a weight-1 prior point counts as in [`Forest::warm_start`] and one
///   below 1/8 is left out.
#[derive(Debug)]
pub struct Forest {
    /// Number of trees.
    pub trees: usize,
    /// Maximum depth of a tree (`None`: grow until `min_samples_leaf`).
    pub max_depth: Option<u16>,
    /// Minimum number of samples in a leaf.
    pub min_samples_leaf: usize,
    /// Share of the features tried at each split.
    pub feature_share: f64,
    /// Cap on the online training points (and separately on the prior points).
    pub max_train: usize,
    /// Weight of a prior point relative to an online one, in (0, 1].
    pub prior_weight: f64,
    /// Fewer online points than this (and no prior) give equal predictions.
    pub min_samples: usize,
    seed: u64,
    /// Prior points: features, standardised score, copies in the bootstrap.
    prior: Vec<(Vec<f64>, f64, usize)>,
    fitted: Vec<Tree>,
    width: usize,
    /// Mean and standard deviation of the last online scores (0 and 1 with none).
    scale: (f64, f64),
    constant: f64,
}

impl Forest {
    /// An untrained forest with the default parameters and seed `seed`.
    pub fn new(seed: u64) -> Self {
        Forest {
            trees: 32,
            max_depth: None,
            min_samples_leaf: 1,
            feature_share: 0.5,
            max_train: 2048,
            prior_weight: 0.5,
            min_samples: 4,
            seed,
            prior: Vec::new(),
            fitted: Vec::new(),
            width: 0,
            scale: (0.0, 1.0),
            constant: 0.0,
        }
    }

    /// A forest trained on records of other kernels or devices (see the type's docs).
    pub fn pretrained(features: &[Vec<f64>], scores: &[f64], seed: u64) -> Self {
        let mut f = Forest::new(seed);
        f.warm_start(features, scores);
        f
    }

    /// Adds prior data (other shapes or devices) that is kept across updates as
    /// down-weighted extra samples, and refits on it alone. Later calls add more prior data.
    pub fn warm_start(&mut self, features: &[Vec<f64>], scores: &[f64]) {
        self.warm_start_weighted(features, scores, &vec![1.0; scores.len()]);
    }

    /// [`warm_start`](Self::warm_start) with a weight in [0, 1] per point (see the type's
    /// docs): records of a closer problem (the same kernel at another shape) weigh more
    /// than those of a farther one (another kernel, another device). A missing weight is 1.
    /// The scores are standardised together, so a caller that wants several problems to be
    /// comparable normalises each problem's scores first (e.g. `ln(best / seconds)`).
    pub fn warm_start_weighted(&mut self, features: &[Vec<f64>], scores: &[f64], weights: &[f64]) {
        let width = self.prior.first().map(|(f, _, _)| f.len());
        let rows = clean(features, scores, width);
        let Some((mean, sd)) = stats(rows.iter().map(|(_, s, _)| *s)) else {
            return;
        };
        let sd = if sd > 0.0 { sd } else { 1.0 };
        let per_weight = 2.0 * self.prior_weight.clamp(1e-3, 1.0) * PRIOR_COPIES as f64;
        for (f, s, i) in rows {
            let w = weights.get(i).copied().unwrap_or(1.0).clamp(0.0, 1.0);
            let copies = (w * per_weight).round() as usize;
            if copies > 0 {
                self.prior.push((f.clone(), (s - mean) / sd, copies));
            }
        }
        if self.prior.len() > self.max_train {
            self.prior = cap(std::mem::take(&mut self.prior), self.max_train);
        }
        self.scale = (0.0, 1.0);
        self.fit(Vec::new());
    }

    /// The number of prior (warm-start) samples kept.
    pub fn prior_len(&self) -> usize {
        self.prior.len()
    }

    /// Whether trees are fitted (predictions differ between points).
    pub fn is_trained(&self) -> bool {
        !self.fitted.is_empty()
    }

    /// Fits on the prior plus `online` (already standardised).
    fn fit(&mut self, online: Vec<(Vec<f64>, f64)>) {
        self.fitted.clear();
        let repeat = if self.prior.is_empty() {
            1
        } else {
            PRIOR_COPIES
        };
        let mut x: Vec<Vec<f64>> = Vec::new();
        let mut y: Vec<f64> = Vec::new();
        for (f, s) in &online {
            for _ in 0..repeat {
                x.push(f.clone());
                y.push(*s);
            }
        }
        for (f, s, copies) in &self.prior {
            for _ in 0..*copies {
                x.push(f.clone());
                y.push(*s);
            }
        }
        let Some(width) = x.first().map(Vec::len) else {
            return;
        };
        if width == 0 || x.len() < 2 || y.iter().all(|&v| v == y[0]) {
            return;
        }
        let Ok(matrix) = DenseMatrix::from_2d_vec(&x) else {
            return;
        };
        let m =
            ((width as f64 * self.feature_share.clamp(0.0, 1.0)).ceil() as usize).clamp(1, width);
        for i in 0..self.trees.max(1) {
            let mut params = RandomForestRegressorParameters::default()
                .with_n_trees(1)
                .with_m(m)
                .with_min_samples_leaf(self.min_samples_leaf.max(1))
                .with_seed(self.seed.wrapping_add(i as u64));
            if let Some(depth) = self.max_depth {
                params = params.with_max_depth(depth);
            }
            if let Ok(tree) = Tree::fit(&matrix, &y, params) {
                self.fitted.push(tree);
            }
        }
        self.width = width;
    }
}

impl CostModel for Forest {
    fn name(&self) -> &str {
        "forest"
    }

    fn update(&mut self, features: &[Vec<f64>], scores: &[f64]) {
        let width = self.prior.first().map(|(f, _, _)| f.len());
        let mut rows: Vec<(Vec<f64>, f64)> = clean(features, scores, width)
            .into_iter()
            .map(|(f, s, _)| (f.clone(), s))
            .collect();
        if rows.len() > self.max_train {
            rows = cap(rows, self.max_train);
        }
        let Some((mean, sd)) = stats(rows.iter().map(|(_, s)| *s)) else {
            self.scale = (0.0, 1.0);
            self.constant = 0.0;
            self.fit(Vec::new());
            return;
        };
        self.constant = mean;
        let enough = rows.len() >= self.min_samples && sd > 0.0;
        if !enough {
            // Too little to learn from: equal predictions (or the prior alone).
            self.scale = (0.0, 1.0);
            self.fitted.clear();
            if !self.prior.is_empty() {
                self.fit(Vec::new());
            }
            return;
        }
        self.scale = (mean, sd);
        let online = rows
            .into_iter()
            .map(|(f, s)| (f, (s - mean) / sd))
            .collect();
        self.fit(online);
    }

    fn learn_prior(&mut self, features: &[Vec<f64>], scores: &[f64], weights: &[f64]) {
        self.warm_start_weighted(features, scores, weights);
    }

    fn predict(&self, features: &[Vec<f64>]) -> Vec<f64> {
        if self.fitted.is_empty() || features.is_empty() {
            return vec![self.constant; features.len()];
        }
        let rows: Vec<Vec<f64>> = features
            .iter()
            .map(|f| {
                let mut r: Vec<f64> = f
                    .iter()
                    .map(|&v| if v.is_finite() { v } else { 0.0 })
                    .collect();
                r.resize(self.width, 0.0);
                r
            })
            .collect();
        let Ok(matrix) = DenseMatrix::from_2d_vec(&rows) else {
            return vec![self.constant; features.len()];
        };
        let mut sum = vec![0.0; features.len()];
        let mut count = 0.0;
        for tree in &self.fitted {
            if let Ok(p) = tree.predict(&matrix) {
                for (s, v) in sum.iter_mut().zip(p) {
                    *s += v;
                }
                count += 1.0;
            }
        }
        if count == 0.0 {
            return vec![self.constant; features.len()];
        }
        let (mean, sd) = self.scale;
        sum.into_iter().map(|z| mean + sd * z / count).collect()
    }
}

/// The rows with finite scores and finite features of the expected width (the first row's
/// when none is given), with their index.
fn clean<'a>(
    features: &'a [Vec<f64>],
    scores: &[f64],
    width: Option<usize>,
) -> Vec<(&'a Vec<f64>, f64, usize)> {
    let width = width.or_else(|| features.first().map(Vec::len));
    features
        .iter()
        .zip(scores)
        .enumerate()
        .filter(|(_, (f, s))| {
            s.is_finite() && Some(f.len()) == width && f.iter().all(|v| v.is_finite())
        })
        .map(|(i, (f, s))| (f, *s, i))
        .collect()
}

/// Mean and (population) standard deviation; `None` when empty.
fn stats(values: impl Iterator<Item = f64> + Clone) -> Option<(f64, f64)> {
    let n = values.clone().count();
    if n == 0 {
        return None;
    }
    let mean = values.clone().sum::<f64>() / n as f64;
    let var = values.map(|v| (v - mean) * (v - mean)).sum::<f64>() / n as f64;
    Some((mean, var.sqrt()))
}

/// A training row whose score is [`Row::score`].
trait Row: Clone {
    fn score(&self) -> f64;
}

impl Row for (Vec<f64>, f64) {
    fn score(&self) -> f64 {
        self.1
    }
}

impl Row for (Vec<f64>, f64, usize) {
    fn score(&self) -> f64 {
        self.1
    }
}

/// At most `cap` rows: the best quarter of the cap, then an even stride over the rest.
fn cap<R: Row>(mut rows: Vec<R>, cap: usize) -> Vec<R> {
    if rows.len() <= cap {
        return rows;
    }
    rows.sort_by(|a, b| b.score().total_cmp(&a.score()));
    let top = cap / 4;
    let rest = rows.split_off(top);
    let want = cap - top;
    let stride = rest.len() as f64 / want.max(1) as f64;
    let mut out = rows;
    for i in 0..want {
        let j = (i as f64 * stride) as usize;
        if let Some(r) = rest.get(j) {
            out.push(r.clone());
        }
    }
    out
}
