//! Tuning at a call (`TENSOR_DSL_TUNE=first-call` or `background`), once per key.
//!
//! `first-call`: the caller takes the key's turn ([`crate::tune_once`]); whoever waited for
//! it reads the records again and uses the record the tuner before it saved, so two threads
//! or eight processes making the same first call tune once. A caller that would wait past
//! the tuning budget (plus a grace) runs without the tuned schedule.
//!
//! `background`: the call runs the default schedule at once; a background thread takes the
//! turn, tunes within the budget, saves the records and replaces the memoized decision, so
//! later calls in this process use the tuned schedule (later processes find the record).

use super::{save_tuned, shapes_text, with_progress, Backend, Decision};
use crate::autotune::TuneOptions;
use crate::ir::Kernel;
use crate::options::TunePolicy;
use crate::records::{self, Key};
use crate::tuned::{self, Source};
use crate::{tune_once, Error};
use std::io::IsTerminal;
use std::time::{Duration, Instant};

/// How long beyond its own budget a caller waits for another's tuning.
const GRACE: Duration = Duration::from_secs(10);

/// The latest time a caller waits for the turn: the tuning budget plus [`GRACE`].
fn deadline(opts: &TuneOptions) -> Instant {
    let budget = opts
        .seconds
        .filter(|s| s.is_finite() && *s >= 0.0)
        .map_or(Duration::from_secs(3600), |s| {
            Duration::from_secs_f64(s.min(1e6))
        });
    Instant::now() + budget + GRACE
}

/// Tuning under `policy` for this call: `Some` decision to use, or `None` to go on with the
/// rest of the decision order.
pub(super) fn tune_at_call<B: Backend>(
    backend: &B,
    kernel: &Kernel,
    extents: &[usize],
    shapes: &[&[usize]],
    key: &Key,
    policy: TunePolicy,
    opts: &TuneOptions,
) -> Result<Option<Decision<B::Schedule>>, Error> {
    match policy {
        TunePolicy::Off => Ok(None),
        TunePolicy::FirstCall => {
            let owned: Vec<Vec<usize>> = shapes.iter().map(|s| s.to_vec()).collect();
            let text = tune_once::key_text(key);
            let Some(turn) = tune_once::take(&records::cache_dir(), &text, deadline(opts)) else {
                crate::log::warn(format_args!(
                    "{} {} is still being tuned elsewhere after the budget; running without its tuned schedule",
                    kernel.name,
                    shapes_text(shapes)
                ));
                return Ok(None);
            };
            if let Some(d) = saved_meanwhile(backend, kernel, extents, key) {
                return Ok(Some(d));
            }
            let found = tune_and_save(backend, kernel, &owned, opts, true)?;
            drop(turn);
            Ok(found)
        }
        TunePolicy::Background => {
            start_background(backend, kernel, extents, shapes, key, opts);
            Ok(Some(Decision {
                schedule: backend.default_schedule(kernel, extents),
                source: Source::Default,
            }))
        }
    }
}

/// The record another thread or process saved for `key` while this one waited, if any.
fn saved_meanwhile<B: Backend>(
    backend: &B,
    kernel: &Kernel,
    extents: &[usize],
    key: &Key,
) -> Option<Decision<B::Schedule>> {
    tuned::forget_cache();
    let (record, source) = tuned::lookup(key)?;
    let schedule = backend.schedule_of(kernel, extents, &record)?;
    Some(Decision { schedule, source })
}

/// Tunes now, saves the records to the user cache, and returns the best schedule.
fn tune_and_save<B: Backend>(
    backend: &B,
    kernel: &Kernel,
    shapes: &[Vec<usize>],
    opts: &TuneOptions,
    progress_bar: bool,
) -> Result<Option<Decision<B::Schedule>>, Error> {
    let result = if progress_bar {
        with_progress(kernel, opts, |progress| {
            backend.tune(kernel, shapes, opts, progress)
        })?
    } else {
        backend.tune(kernel, shapes, opts, &mut |_| {})?
    };
    save_tuned(&result.records);
    let refs: Vec<&[usize]> = shapes.iter().map(Vec::as_slice).collect();
    crate::log::tuned(
        &kernel.name,
        &shapes_text(&refs),
        B::NAME,
        &result.summary(),
        progress_bar && std::io::stderr().is_terminal(),
    );
    Ok(result.best.map(|(schedule, _)| Decision {
        schedule,
        source: Source::Tuned,
    }))
}

/// Tunes on a background thread (see the module docs); errors go to stderr as warnings.
fn start_background<B: Backend>(
    backend: &B,
    kernel: &Kernel,
    extents: &[usize],
    shapes: &[&[usize]],
    key: &Key,
    opts: &TuneOptions,
) {
    let backend = backend.clone();
    let kernel = kernel.clone();
    let extents = extents.to_vec();
    let shapes: Vec<Vec<usize>> = shapes.iter().map(|s| s.to_vec()).collect();
    let key = key.clone();
    let opts = opts.clone();
    // The thread works in the call's cache folder.
    let dir = records::cache_dir();
    let spawned = std::thread::Builder::new()
        .name("tensor-dsl-tune".into())
        .spawn(move || {
            records::with_cache_dir(Some(&dir), || {
                let text = tune_once::key_text(&key);
                let Some(turn) = tune_once::take(&records::cache_dir(), &text, deadline(&opts))
                else {
                    return;
                };
                let decision = match saved_meanwhile(&backend, &kernel, &extents, &key) {
                    Some(d) => Some(d),
                    None => match tune_and_save(&backend, &kernel, &shapes, &opts, false) {
                        Ok(d) => d,
                        Err(e) => {
                            crate::log::warn(format_args!(
                                "background tuning of {} failed: {e}",
                                kernel.name
                            ));
                            None
                        }
                    },
                };
                drop(turn);
                if let Some(d) = decision {
                    backend
                        .memo()
                        .replace(&kernel.fingerprint(), &shapes, B::NAME, d);
                }
            })
        });
    if let Err(e) = spawned {
        crate::log::warn(format_args!("cannot start background tuning: {e}"));
    }
}
