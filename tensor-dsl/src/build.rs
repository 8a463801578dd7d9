//! Tuning at `cargo build` time, from an application's `build.rs`.
//!
//! The kernels come from a crate that declares them, used as a build-dependency; shapes
//! are listed per tensor parameter, in the function's parameter order, as at a call:
//!
//! ```no_run
//! # mod my_kernels { pub mod matmul { pub fn kernel() -> &'static tensor_dsl::Kernel { unimplemented!() } } }
//! // build.rs
//! fn main() -> Result<(), tensor_dsl::Error> {
//!     tensor_dsl::build::tune()
//!         .kernel(my_kernels::matmul::kernel(), &[&[512, 1024], &[1024, 64], &[512, 64]])
//!         .trials(64)
//!         .run()?;
//!     Ok(())
//! }
//! // main.rs: tensor_dsl::include_tuned!();
//! ```
//!
//! The best record of each (kernel, shapes) lands in `$OUT_DIR/tensor-dsl-tuned.jsonl`,
//! which `include_tuned!()` embeds. A (kernel, shapes) already tuned for this machine and
//! code generator — in that file from an earlier build, or in the user cache — is not
//! tuned again, and the script asks cargo to re-run only when `build.rs` or the kernel
//! crate changes. `TENSOR_DSL_BUILD_TUNE=off` skips tuning (only records already at hand
//! are written); `TENSOR_DSL_BUILD_TRIALS=N` overrides the trial budget.
//!
//! With [`BuildTuner::gpu`], the build machine's GPU (if it has one) is tuned for too. GPU
//! records for these kernels and shapes that are already in the output — tuned on another
//! machine and shipped, or from an earlier build — are kept, so building on a machine
//! without that GPU does not lose them.

use crate::autotune::{tune_cpu, TuneOptions};
use crate::codegen::c::CODEGEN_VERSION;
use crate::ir::Kernel;
use crate::records::{self, Index, Record};
use crate::{tuned, Error};
use std::path::PathBuf;

/// File name of the build script's output in `OUT_DIR`.
pub const OUTPUT_FILE: &str = "tensor-dsl-tuned.jsonl";

/// Starts a build-time tuning job.
pub fn tune() -> BuildTuner {
    BuildTuner {
        jobs: Vec::new(),
        options: TuneOptions::default(),
        out: None,
        gpu: false,
    }
}

/// The kernels and shapes to tune, and how.
pub struct BuildTuner {
    jobs: Vec<(Kernel, Vec<Vec<usize>>)>,
    options: TuneOptions,
    out: Option<PathBuf>,
    gpu: bool,
}

impl BuildTuner {
    /// Tunes `kernel` at these shapes (one per tensor parameter, in parameter order).
    pub fn kernel(mut self, kernel: &Kernel, shapes: &[&[usize]]) -> Self {
        self.jobs
            .push((kernel.clone(), shapes.iter().map(|s| s.to_vec()).collect()));
        self
    }

    /// Measurements per (kernel, shapes); default 64.
    pub fn trials(mut self, trials: usize) -> Self {
        self.options.trials = trials;
        self
    }

    /// Wall-clock limit per (kernel, shapes), in seconds.
    pub fn seconds(mut self, seconds: f64) -> Self {
        self.options.seconds = Some(seconds);
        self
    }

    /// The search strategy (default: the tuner's default).
    pub fn strategy(mut self, name: &str) -> Self {
        self.options.strategy = name.to_string();
        self
    }

    /// Also tune for this machine's GPU when it has one (default off: a GPU build machine is
    /// rare, and tuning takes the GPU for a while).
    pub fn gpu(mut self, on: bool) -> Self {
        self.gpu = on;
        self
    }

    /// Writes to this file instead of `$OUT_DIR/tensor-dsl-tuned.jsonl`.
    pub fn out_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.out = Some(path.into());
        self
    }

    /// Tunes what is not tuned yet and writes the best record of every job. Returns the
    /// output file.
    pub fn run(mut self) -> Result<PathBuf, Error> {
        let out = match self.out.take() {
            Some(p) => p,
            None => {
                let dir = std::env::var_os("OUT_DIR").ok_or_else(|| Error::InvalidSetting {
                    name: "OUT_DIR".into(),
                    value: String::new(),
                    expected:
                        "set by cargo: call build::tune() from a build script, or give .out_file()"
                            .into(),
                })?;
                PathBuf::from(dir).join(OUTPUT_FILE)
            }
        };
        println!("cargo:rerun-if-changed=build.rs");
        println!("cargo:rerun-if-env-changed=TENSOR_DSL_BUILD_TUNE");
        println!("cargo:rerun-if-env-changed=TENSOR_DSL_BUILD_TRIALS");
        if let Some(n) = std::env::var("TENSOR_DSL_BUILD_TRIALS")
            .ok()
            .and_then(|v| v.parse().ok())
        {
            self.options.trials = n;
        }
        let tune_allowed = std::env::var("TENSOR_DSL_BUILD_TUNE").map_or(true, |v| v != "off");

        // What we already have: the previous output and the user cache.
        let previous: Vec<Record> = records::read(&out).map(|(rs, _)| rs).unwrap_or_default();
        let mut known = Index::new();
        known.extend(&previous);
        known.extend(tuned::cache_index().iter());

        let mut best: Vec<Record> = Vec::new();
        for (kernel, shapes) in &self.jobs {
            let refs: Vec<&[usize]> = shapes.iter().map(Vec::as_slice).collect();
            let key = tuned::cpu_key(kernel, &refs, CODEGEN_VERSION);
            if let Some(r) = known.best(&key) {
                best.push(r.clone());
                continue;
            }
            if !tune_allowed {
                println!(
                    "cargo:warning=tensor-dsl: `{}` {shapes:?} is not tuned (TENSOR_DSL_BUILD_TUNE=off); it will use its default schedule",
                    kernel.name
                );
                continue;
            }
            let result = tune_cpu(kernel, shapes, &self.options, &mut |_| {})?;
            // Keep every measurement in the user cache too, so other builds reuse them.
            if let Err(e) = records::append(&records::default_records_file(), &result.records) {
                println!("cargo:warning=tensor-dsl: could not update the user cache: {e}");
            }
            let mut index = Index::new();
            index.extend(&result.records);
            match index.best(&key) {
                Some(r) => {
                    println!(
                        "cargo:warning=tensor-dsl: tuned `{}` {shapes:?}: {:.2} GFLOPS after {} trials",
                        kernel.name,
                        r.gflops.unwrap_or(0.0),
                        result.records.len()
                    );
                    best.push(r.clone());
                }
                None => println!(
                    "cargo:warning=tensor-dsl: no valid configuration found for `{}` {shapes:?}",
                    kernel.name
                ),
            }
        }
        best.extend(self.gpu_records(&known, &previous, tune_allowed)?);
        // Rewrite the output with exactly this build's records.
        records::write(&out, &best)?;
        Ok(out)
    }

    /// The GPU records of every job: this machine's GPU's (at hand, or tuned now with
    /// [`BuildTuner::gpu`]), and every other GPU's from the previous output.
    fn gpu_records(
        &self,
        known: &Index,
        previous: &[Record],
        tune_allowed: bool,
    ) -> Result<Vec<Record>, Error> {
        let codegen = crate::codegen::cuda::CODEGEN_VERSION;
        let mut out: Vec<Record> = Vec::new();
        for (kernel, shapes) in &self.jobs {
            let fingerprint = kernel.fingerprint();
            if self.gpu {
                if let Some(r) = self.tune_gpu(kernel, shapes, known, tune_allowed)? {
                    out.push(r);
                }
            }
            for r in previous {
                let same_job = r.kernel == fingerprint && r.shapes == *shapes;
                if r.target.device == "cuda"
                    && same_job
                    && r.codegen == codegen
                    && !out.iter().any(|o| o.key() == r.key())
                {
                    out.push(r.clone());
                }
            }
        }
        Ok(out)
    }

    /// This GPU's best record for one job: at hand, or tuned now.
    #[cfg(feature = "cuda")]
    fn tune_gpu(
        &self,
        kernel: &Kernel,
        shapes: &[Vec<usize>],
        known: &Index,
        tune_allowed: bool,
    ) -> Result<Option<Record>, Error> {
        let info = match crate::runtime::cuda::available() {
            Ok(info) => info,
            Err(reason) => {
                println!(
                    "cargo:warning=tensor-dsl: not tuning `{}` for a GPU: {reason}",
                    kernel.name
                );
                return Ok(None);
            }
        };
        let refs: Vec<&[usize]> = shapes.iter().map(Vec::as_slice).collect();
        let key = tuned::cuda_key(
            kernel,
            &refs,
            records::Target::cuda(&info.name, info.sm()),
            crate::codegen::cuda::CODEGEN_VERSION,
        );
        if let Some(r) = known.best(&key) {
            return Ok(Some(r.clone()));
        }
        if !tune_allowed {
            return Ok(None);
        }
        let result = crate::autotune::tune_cuda(kernel, shapes, &self.options, &mut |_| {})?;
        if let Err(e) = records::append(&records::default_records_file(), &result.records) {
            println!("cargo:warning=tensor-dsl: could not update the user cache: {e}");
        }
        let mut index = Index::new();
        index.extend(&result.records);
        let best = index.best(&key).cloned();
        if let Some(r) = &best {
            println!(
                "cargo:warning=tensor-dsl: tuned `{}` {shapes:?} on {}: {:.2} GFLOPS after {} trials",
                kernel.name,
                info.name,
                r.gflops.unwrap_or(0.0),
                result.records.len()
            );
        }
        Ok(best)
    }

    #[cfg(not(feature = "cuda"))]
    fn tune_gpu(
        &self,
        kernel: &Kernel,
        _: &[Vec<usize>],
        _: &Index,
        _: bool,
    ) -> Result<Option<Record>, Error> {
        println!(
            "cargo:warning=tensor-dsl: not tuning `{}` for a GPU: {}",
            kernel.name,
            crate::runtime::NO_CUDA_FEATURE
        );
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::parse_text;
    use crate::records::{Target, RECORD_VERSION};

    fn record(kernel: &Kernel, shapes: &[Vec<usize>], target: Target, codegen: u32) -> Record {
        Record {
            version: RECORD_VERSION,
            kernel: kernel.fingerprint(),
            name: kernel.name.clone(),
            kernel_text: kernel.to_string(),
            shapes: shapes.to_vec(),
            dtype: "f32".into(),
            target,
            codegen,
            config: "shipped".into(),
            seconds: Some(1e-3),
            samples: vec![1e-3],
            error: None,
            gflops: Some(1.0),
            strategy: "test".into(),
            unix_time: 0,
            pair: None,
        }
    }

    /// A build on a machine without the GPU keeps the GPU records already in the output
    /// (shipped from a GPU machine), and drops ones for jobs no longer listed.
    #[test]
    fn gpu_records_in_the_output_survive_a_build_without_that_gpu() {
        let k = parse_text("mm", "c[[i,j]] += a[[i,k]] * b[[k,j]]", None).unwrap();
        let shapes = vec![vec![8, 4], vec![4, 6], vec![8, 6]];
        let gone = vec![vec![2, 2], vec![2, 2], vec![2, 2]];
        let refs: Vec<&[usize]> = shapes.iter().map(Vec::as_slice).collect();
        let mut cpu = record(&k, &shapes, tuned::this_cpu().clone(), CODEGEN_VERSION);
        cpu.config = "cpu".into();
        let gpu = record(
            &k,
            &shapes,
            Target::cuda("Some GPU", 90),
            crate::codegen::cuda::CODEGEN_VERSION,
        );
        let stale = record(
            &k,
            &gone,
            Target::cuda("Some GPU", 90),
            crate::codegen::cuda::CODEGEN_VERSION,
        );
        let dir = std::env::temp_dir().join(format!("td-build-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let out = dir.join(OUTPUT_FILE);
        records::append(&out, &[cpu.clone(), gpu.clone(), stale]).unwrap();
        // The CPU record is at hand, so nothing is tuned.
        let written = tune()
            .kernel(&k, &refs)
            .gpu(false)
            .out_file(&out)
            .run()
            .unwrap();
        let (rs, _) = records::read(&written).unwrap();
        assert_eq!(rs.len(), 2, "{rs:?}");
        assert!(rs.contains(&cpu) && rs.contains(&gpu));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
