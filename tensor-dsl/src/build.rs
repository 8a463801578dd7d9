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
    }
}

/// The kernels and shapes to tune, and how.
pub struct BuildTuner {
    jobs: Vec<(Kernel, Vec<Vec<usize>>)>,
    options: TuneOptions,
    out: Option<PathBuf>,
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
        let mut known = Index::new();
        if let Ok((rs, _)) = records::read(&out) {
            known.extend(&rs);
        }
        known.extend(tuned::cache_index().iter());

        let mut best: Vec<Record> = Vec::new();
        for (kernel, shapes) in &self.jobs {
            let refs: Vec<&[usize]> = shapes.iter().map(Vec::as_slice).collect();
            let key = tuned::cpu_key(&kernel.fingerprint(), &refs, CODEGEN_VERSION);
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
        // Rewrite the output with exactly this build's records.
        let _ = std::fs::remove_file(&out);
        if best.is_empty() {
            if let Some(dir) = out.parent() {
                std::fs::create_dir_all(dir)?;
            }
            std::fs::write(&out, "")?;
        } else {
            records::append(&out, &best)?;
        }
        Ok(out)
    }
}
