//! `--record-landscape DIR`: every measured point of every kernel, in the records format
//! (`tensor_dsl::records::Record`, JSON Lines), one file per kernel
//! (`DIR/<suite>_<name>.jsonl`), appended as the search goes. A replay measurer reads them
//! back to compare strategies offline.

use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};
use tensor_dsl::records::{self, Record, Target, RECORD_VERSION};
use tuner::{Outcome, SearchSpace, Trial};

use crate::workloads::Problem;

/// Writes one kernel's landscape.
pub struct Landscape {
    path: PathBuf,
    kernel: String,
    name: String,
    kernel_text: String,
    shapes: Vec<Vec<usize>>,
    dtype: String,
    target: Target,
    codegen: u32,
    strategy: String,
    flops: f64,
}

impl Landscape {
    /// The file for `suite`/`name` under `dir` (created on the first trial); records name
    /// `target` and the generator's `codegen` version.
    pub fn new(
        dir: &Path,
        suite: &str,
        name: &str,
        problem: &Problem,
        strategy: &str,
        target: Target,
        codegen: u32,
    ) -> Landscape {
        Landscape {
            path: dir.join(format!("{suite}_{name}.jsonl")),
            kernel: problem.kernel.fingerprint(),
            name: format!("{suite}_{name}"),
            kernel_text: problem.kernel.to_string(),
            shapes: problem.shapes.clone(),
            dtype: records::dtype_key(&problem.kernel),
            target,
            codegen,
            strategy: strategy.to_string(),
            flops: problem.flops(),
        }
    }

    /// The record of one trial.
    pub fn record(&self, space: &SearchSpace, trial: &Trial) -> Record {
        let config = space
            .format(&trial.config)
            .unwrap_or_else(|e| format!("<unformattable: {e}>"));
        let (seconds, samples, error) = match &trial.outcome {
            Outcome::Valid { samples } => (trial.outcome.seconds(), samples.clone(), None),
            Outcome::Invalid { reason } => (None, Vec::new(), Some(reason.clone())),
        };
        Record {
            version: RECORD_VERSION,
            kernel: self.kernel.clone(),
            name: self.name.clone(),
            kernel_text: self.kernel_text.clone(),
            shapes: self.shapes.clone(),
            dtype: self.dtype.clone(),
            target: self.target.clone(),
            codegen: self.codegen,
            config,
            seconds,
            samples,
            error,
            gflops: seconds.map(|s| self.flops / s / 1e9),
            strategy: self.strategy.clone(),
            unix_time: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
            pair: trial.pair,
        }
    }

    /// Appends one trial.
    pub fn append(&self, space: &SearchSpace, trial: &Trial) -> Result<(), String> {
        records::append(&self.path, &[self.record(space, trial)])
            .map_err(|e| format!("{}: {e}", self.path.display()))
    }
}
