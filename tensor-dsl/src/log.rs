//! What tensor-dsl tells you: events through the [`tracing`] crate, and plain stderr lines
//! for programs that install no subscriber.
//!
//! Every event has a target under `tensor_dsl`:
//!
//! | target | level | when |
//! |---|---|---|
//! | `tensor_dsl::dispatch` | `INFO` | a kernel's schedule is decided for a shape (fields `kernel`, `shapes`, `device`, `source`) |
//! | `tensor_dsl::compile` | `DEBUG` | generated code was compiled (`kernel`, `compiler`, `seconds`) |
//! | `tensor_dsl::tune` | `INFO` | tuning ended (`kernel`, `shapes`, `device`, `summary`) |
//! | `tensor_dsl::tune` | `DEBUG` | where a CPU search's time went (`kernel`, `seconds`, `breakdown`) |
//! | `tensor_dsl` | `WARN` | something was skipped or fell back (no OpenMP, unreadable records, ...) |
//!
//! With a subscriber installed (`tracing_subscriber::fmt().init()` or your application's),
//! it decides what is shown and nothing else is printed. Without one, warnings go to stderr,
//! and `TENSOR_DSL_LOG` names which of the others do too: a comma-separated list of
//! `dispatch`, `compile`, `tune`, `all` or `off` (default: none; the end of tuning is also
//! printed when stderr is a terminal).
//!
//! ```no_run
//! // In an application: show tensor-dsl's decisions and compile times.
//! tracing_subscriber::fmt()
//!     .with_env_filter("tensor_dsl=debug")
//!     .init();
//! ```

use std::fmt::Display;
use std::sync::OnceLock;

/// What `TENSOR_DSL_LOG` may name (comma-separated).
pub const LOG_VALUES: [&str; 5] = ["dispatch", "compile", "tune", "all", "off"];

/// Which kinds of lines `TENSOR_DSL_LOG` asks for on stderr.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LogSetting {
    pub dispatch: bool,
    pub compile: bool,
    pub tune: bool,
}

/// `TENSOR_DSL_LOG` read now; an [`crate::Error::InvalidSetting`] naming the accepted values
/// when it holds anything else.
pub fn log_setting() -> Result<LogSetting, crate::Error> {
    let Ok(v) = std::env::var("TENSOR_DSL_LOG") else {
        return Ok(LogSetting::default());
    };
    let mut s = LogSetting::default();
    for part in v.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        match part {
            "dispatch" => s.dispatch = true,
            "compile" => s.compile = true,
            "tune" => s.tune = true,
            "all" => {
                s = LogSetting {
                    dispatch: true,
                    compile: true,
                    tune: true,
                }
            }
            "off" => {}
            bad => {
                return Err(crate::Error::InvalidSetting {
                    name: "TENSOR_DSL_LOG".into(),
                    value: bad.into(),
                    expected: format!("a comma-separated list of {}", LOG_VALUES.join(", ")),
                })
            }
        }
    }
    Ok(s)
}

/// `TENSOR_DSL_LOG`, read once per process (an invalid value is reported as an error by the
/// first decision, which reads [`log_setting`]).
pub fn setting() -> LogSetting {
    static S: OnceLock<LogSetting> = OnceLock::new();
    *S.get_or_init(|| log_setting().unwrap_or_default())
}

/// Whether plain stderr lines should stand in for events: no subscriber was installed.
fn plain() -> bool {
    !tracing::dispatcher::has_been_set()
}

/// A warning: an event, or without a subscriber a `tensor-dsl: warning: ...` line.
pub fn warn(message: impl Display) {
    if plain() {
        eprintln!("tensor-dsl: warning: {message}");
    } else {
        tracing::warn!(target: "tensor_dsl", "{message}");
    }
}

/// A schedule was decided.
pub fn dispatch(kernel: &str, shapes: &str, device: &str, source: impl Display) {
    if plain() {
        if setting().dispatch {
            eprintln!("tensor-dsl: {kernel} {shapes} {device} schedule from {source}");
        }
    } else {
        tracing::info!(
            target: "tensor_dsl::dispatch",
            kernel,
            shapes,
            device,
            source = %source,
            "schedule decided"
        );
    }
}

/// Generated code was compiled.
pub fn compiled(kernel: &str, compiler: &str, seconds: f64) {
    if plain() {
        if setting().compile {
            eprintln!("tensor-dsl: compiled {kernel} with {compiler} in {seconds:.2} s");
        }
    } else {
        tracing::debug!(
            target: "tensor_dsl::compile",
            kernel,
            compiler,
            seconds,
            "compiled"
        );
    }
}

/// Tuning ended; `to_terminal` prints the line without a subscriber even when
/// `TENSOR_DSL_LOG` does not ask for it (a person is watching).
pub fn tuned(kernel: &str, shapes: &str, device: &str, summary: &str, to_terminal: bool) {
    if plain() {
        if setting().tune || setting().dispatch || to_terminal {
            eprintln!("tensor-dsl: tuned {kernel} {shapes} on {device}: {summary}");
        }
    } else {
        tracing::info!(
            target: "tensor_dsl::tune",
            kernel,
            shapes,
            device,
            summary,
            "tuned"
        );
    }
}

/// Where a search's time went (`seconds` in all; `breakdown` is the measurer's account,
/// e.g. [`crate::measure::cpu::MeasureTimings`]).
pub fn tune_time(kernel: &str, seconds: f64, breakdown: impl Display) {
    if plain() {
        if setting().tune {
            eprintln!("tensor-dsl: tuning {kernel} took {seconds:.1} s: {breakdown}");
        }
    } else {
        tracing::debug!(
            target: "tensor_dsl::tune",
            kernel,
            seconds,
            breakdown = %breakdown,
            "tuning time"
        );
    }
}
