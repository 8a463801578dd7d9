//! Cost models: predict which configurations are fast from their feature vectors.
//!
//! [`Forest`] is the learned model (a random forest of smartcore regression trees),
//! [`Untrained`] the model that knows nothing; [`pairwise_accuracy`] is how a model is
//! judged: only the order of its predictions matters to a search.

mod forest;

pub use forest::Forest;

/// A model that scores points; higher is better (e.g. predicted log-throughput).
pub trait CostModel {
    fn name(&self) -> &str;

    /// Trains on measured points: `features[i]` scored `scores[i]` (higher is better;
    /// invalid points are given the lowest score by the caller).
    fn update(&mut self, features: &[Vec<f64>], scores: &[f64]);

    /// Predicted scores, one per feature vector. An untrained model returns equal scores.
    fn predict(&self, features: &[Vec<f64>]) -> Vec<f64>;

    /// Learns from prior data before any measurement (transfer: records of other shapes,
    /// kernels or devices), `weights[i]` in [0, 1] saying how much point `i` is like the
    /// problem being tuned; the prior is kept across [`update`](Self::update)s. Scores of
    /// different problems should be made comparable by the caller (normalised per problem).
    /// Defaults to ignoring it (a model that cannot use prior data).
    fn learn_prior(&mut self, _features: &[Vec<f64>], _scores: &[f64], _weights: &[f64]) {}
}

/// The model that knows nothing: every point scores 0.
#[derive(Clone, Debug, Default)]
pub struct Untrained;

impl CostModel for Untrained {
    fn name(&self) -> &str {
        "none"
    }
    fn update(&mut self, _features: &[Vec<f64>], _scores: &[f64]) {}
    fn predict(&self, features: &[Vec<f64>]) -> Vec<f64> {
        vec![0.0; features.len()]
    }
}

/// The ranking accuracy of predictions: over every pair of points whose true scores
/// differ, the fraction that `pred` orders the same way as `truth` (higher = better in
/// both). Pairs with equal true scores are skipped; a pair that `pred` ties counts as half
/// right, so a constant predictor scores 0.5. Extra entries of the longer slice are
/// ignored; with no comparable pair the result is 0.5.
///
/// ```
/// use tuner::cost_model::pairwise_accuracy;
/// assert_eq!(pairwise_accuracy(&[1.0, 2.0, 3.0], &[10.0, 20.0, 30.0]), 1.0);
/// assert_eq!(pairwise_accuracy(&[3.0, 2.0, 1.0], &[10.0, 20.0, 30.0]), 0.0);
/// assert_eq!(pairwise_accuracy(&[0.0, 0.0], &[1.0, 2.0]), 0.5);
/// ```
pub fn pairwise_accuracy(pred: &[f64], truth: &[f64]) -> f64 {
    let n = pred.len().min(truth.len());
    let (mut right, mut pairs) = (0.0, 0usize);
    for i in 0..n {
        for j in (i + 1)..n {
            let t = truth[i].total_cmp(&truth[j]);
            if t.is_eq() {
                continue;
            }
            pairs += 1;
            let p = pred[i].total_cmp(&pred[j]);
            if p == t {
                right += 1.0;
            } else if p.is_eq() {
                right += 0.5;
            }
        }
    }
    if pairs == 0 {
        0.5
    } else {
        right / pairs as f64
    }
}
