//! Cost models: predict which configurations are fast from their feature vectors.

/// A model that scores points; higher is better (e.g. predicted log-throughput).
pub trait CostModel {
    fn name(&self) -> &str;

    /// Trains on measured points: `features[i]` scored `scores[i]` (higher is better;
    /// invalid points are given the lowest score by the caller).
    fn update(&mut self, features: &[Vec<f64>], scores: &[f64]);

    /// Predicted scores, one per feature vector. An untrained model returns equal scores.
    fn predict(&self, features: &[Vec<f64>]) -> Vec<f64>;
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
