//! Backends: what runs a kernel, and the one order in which a call's schedule is decided.
//!
//! A [`Backend`] knows its schedule type, its default schedule, how a record becomes a
//! schedule, how to tune now, how to run a schedule on a call's buffers and how to time two
//! schedules on them. [`decide`] is the decision order every backend shares — records
//! (embedded, then the user cache), tuning now if the policy allows, the nearest tuned shape
//! if measured no slower on the call's own buffers, the default — memoized per (kernel,
//! shapes, backend). A new backend is one file implementing the trait plus its line in
//! [`crate::dispatch::call`].
//!
//! ```
//! use tensor_dsl::backend::{cpu::CpuBackend, Backend};
//! use tensor_dsl::ir::parse_text;
//! let k = parse_text("mm", "c[[i,j]] += a[[i,k]] * b[[k,j]]", None).unwrap();
//! let default = CpuBackend.default_schedule(&k, &[64, 64, 64]);
//! assert!(default.validate(&k).is_ok());
//! ```

pub mod cpu;
#[cfg(feature = "cuda")]
pub mod cuda;
mod first_call;
pub mod reference;

use crate::autotune::{TuneOptions, TuneOutcome};
use crate::ir::Kernel;
use crate::options::{Options, TunePolicy};
use crate::records::{self, Key, Record, RecordStore};
use crate::tuned::{self, Memo, Source};
use crate::Error;
use std::fmt;
use std::io::IsTerminal;
use std::sync::Arc;

/// The schedule chosen for a (kernel, shapes) on a backend, and where it came from.
#[derive(Clone, Debug, PartialEq)]
pub struct Decision<S> {
    pub schedule: S,
    pub source: Source,
}

/// A device that runs generated code with schedules of its own template.
pub trait Backend: Sync + Send + Clone + 'static {
    /// A point of the backend's template, decoded.
    type Schedule: Clone + PartialEq + fmt::Debug + Send + Sync + 'static;
    /// A call's buffers as this backend runs on them (host slices, GPU buffers).
    type Buffers<'a>;

    /// The device's name in messages and memo keys (`cpu`, `cuda`).
    const NAME: &'static str;

    /// Decisions made so far in this process.
    fn memo(&self) -> &'static Memo<Decision<Self::Schedule>>;

    /// The schedule used when nothing better is known (a sound, fast default).
    fn default_schedule(&self, kernel: &Kernel, extents: &[usize]) -> Self::Schedule;

    /// Whether this call has a schedule space here (records and tuning apply); when not,
    /// the default is used.
    fn has_space(&self, kernel: &Kernel, extents: &[usize]) -> bool;

    /// The key of this call's records (fingerprint, shapes, element types, target, codegen).
    fn key(&self, kernel: &Kernel, shapes: &[&[usize]]) -> Result<Key, Error>;

    /// The schedule a record stands for, if it is a valid point of this call's template.
    fn schedule_of(
        &self,
        kernel: &Kernel,
        extents: &[usize],
        record: &Record,
    ) -> Option<Self::Schedule>;

    /// Whether tuning can run here now (e.g. the CPU needs a C compiler).
    fn can_tune(&self) -> bool;

    /// The call's inputs that stay unchanged between calls (on the CPU: those passed as
    /// tensors with a version), which tuning then times packed ahead
    /// ([`TuneOptions::constant_inputs`]). None by default.
    fn constant_inputs(&self, buffers: &Self::Buffers<'_>) -> Vec<usize> {
        let _ = buffers;
        Vec::new()
    }

    /// Tunes the call's shapes now; `progress` gets the number of trials done.
    fn tune(
        &self,
        kernel: &Kernel,
        shapes: &[Vec<usize>],
        opts: &TuneOptions,
        progress: &mut dyn FnMut(usize),
    ) -> Result<TuneOutcome<Self::Schedule>, Error>;

    /// Runs `schedule` on the call's buffers.
    fn run(
        &self,
        kernel: &Kernel,
        extents: &[usize],
        shapes: &[&[usize]],
        buffers: &mut Self::Buffers<'_>,
        schedule: &Self::Schedule,
    ) -> Result<(), Error>;

    /// Times `candidate` and `default` on the call's buffers, alternating, and says whether
    /// the candidate is not slower.
    fn not_slower(
        &self,
        kernel: &Kernel,
        extents: &[usize],
        shapes: &[&[usize]],
        buffers: &mut Self::Buffers<'_>,
        candidate: &Self::Schedule,
        default: &Self::Schedule,
    ) -> Result<bool, Error>;
}

/// Decides the schedule of this call on `backend` (once per kernel and shapes), in the
/// documented order: embedded records, the user cache, tuning now
/// (`TENSOR_DSL_TUNE=first-call` or [`Options::tune`], with the budget of `call_opts`; once
/// per key across threads and processes; `background` runs the default and tunes on a
/// thread, see `first_call`), the
/// nearest tuned shape (if timed on the call's buffers to be no slower), the default.
pub fn decide<B: Backend>(
    backend: &B,
    kernel: &Kernel,
    extents: &[usize],
    shapes: &[&[usize]],
    buffers: &mut B::Buffers<'_>,
    call_opts: &Options,
) -> Result<Arc<Decision<B::Schedule>>, Error> {
    let fingerprint = kernel.fingerprint();
    backend
        .memo()
        .get_or_try(&fingerprint, shapes, B::NAME, || {
            let decision = decide_now(backend, kernel, extents, shapes, buffers, call_opts)?;
            crate::log::dispatch(&kernel.name, &shapes_text(shapes), B::NAME, decision.source);
            Ok(decision)
        })
}

fn decide_now<B: Backend>(
    backend: &B,
    kernel: &Kernel,
    extents: &[usize],
    shapes: &[&[usize]],
    buffers: &mut B::Buffers<'_>,
    call_opts: &Options,
) -> Result<Decision<B::Schedule>, Error> {
    // Settings are checked at every decision, so a mistyped value is an error, not ignored.
    crate::log::log_setting()?;
    let (policy, opts) = call_opts.tune_settings()?;
    let default = backend.default_schedule(kernel, extents);
    if !backend.has_space(kernel, extents) {
        return Ok(Decision {
            schedule: default,
            source: Source::Default,
        });
    }
    let key = backend.key(kernel, shapes)?;
    if let Some((record, source)) = tuned::lookup(&key) {
        if let Some(schedule) = backend.schedule_of(kernel, extents, &record) {
            return Ok(Decision { schedule, source });
        }
    }
    if policy != TunePolicy::Off && backend.can_tune() {
        let opts = TuneOptions {
            constant_inputs: backend.constant_inputs(buffers),
            ..opts
        };
        let tuned =
            first_call::tune_at_call(backend, kernel, extents, shapes, &key, policy, &opts)?;
        if let Some(decision) = tuned {
            return Ok(decision);
        }
    }
    // The nearest tuned shape's schedule, only if it is valid here and measured on the
    // call's data to be no slower than the default.
    if let Some(record) = tuned::nearest(&key) {
        if let Some(schedule) = backend.schedule_of(kernel, extents, &record) {
            if schedule != default
                && backend.not_slower(kernel, extents, shapes, buffers, &schedule, &default)?
            {
                return Ok(Decision {
                    schedule,
                    source: Source::Nearest,
                });
            }
        }
    }
    Ok(Decision {
        schedule: default,
        source: Source::Default,
    })
}

/// Runs first-call tuning with a progress bar on stderr when it is a terminal; `tune` gets
/// the callback that reports the trials done.
fn with_progress<T>(
    kernel: &Kernel,
    opts: &TuneOptions,
    tune: impl FnOnce(&mut dyn FnMut(usize)) -> Result<T, Error>,
) -> Result<T, Error> {
    let bar = std::io::stderr().is_terminal().then(|| {
        let pb = indicatif::ProgressBar::new(opts.trials as u64);
        pb.set_style(
            indicatif::ProgressStyle::with_template(
                "tensor-dsl: tuning {msg} [{bar:30}] {pos}/{len} trials, {elapsed}",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        pb.set_message(kernel.name.clone());
        pb
    });
    let result = tune(&mut |n| {
        if let Some(pb) = &bar {
            pb.set_position(n as u64);
        }
    });
    if let Some(pb) = bar {
        // A time budget may stop short of the trials: the bar ends at what was done.
        pb.set_length(pb.position());
        pb.finish_and_clear();
    }
    result
}

/// Saves first-call tuning's records to the user cache (a failure is a warning: the call
/// still uses what it found) and makes the next lookup read them.
fn save_tuned(found: &[Record]) {
    if let Err(e) = records::JsonlFile::user_cache().commit(found) {
        crate::log::warn(format_args!("could not save tuning records: {e}"));
    }
    tuned::forget_cache();
}

/// `[512x1024, 1024x64, scalar]`, for log lines.
fn shapes_text(shapes: &[&[usize]]) -> String {
    let dims: Vec<String> = shapes
        .iter()
        .map(|s| {
            if s.is_empty() {
                "scalar".to_string()
            } else {
                s.iter().map(usize::to_string).collect::<Vec<_>>().join("x")
            }
        })
        .collect();
    format!("[{}]", dims.join(", "))
}

/// The decision, then the run, on one backend.
pub fn run<B: Backend>(
    backend: &B,
    kernel: &Kernel,
    extents: &[usize],
    shapes: &[&[usize]],
    buffers: &mut B::Buffers<'_>,
    call_opts: &Options,
) -> Result<Arc<Decision<B::Schedule>>, Error> {
    let decision = decide(backend, kernel, extents, shapes, buffers, call_opts)?;
    backend.run(kernel, extents, shapes, buffers, &decision.schedule)?;
    Ok(decision)
}
