//! The JSON report and the table printed at the end.

use serde::Serialize;
use serde_json::Value;
use std::path::Path;

use crate::timing::Timing;
use std::time::{SystemTime, UNIX_EPOCH};

/// One kernel's result. `status` is `ok`, `failed` (see `error`: a tuning, build, run or
/// output-mismatch failure) or `skipped` (see `error`: why).
#[derive(Clone, Debug, Serialize)]
pub struct KernelResult {
    pub suite: String,
    pub name: String,
    pub status: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The workload as written in `workloads.json`.
    pub shape: Value,
    /// The kernel in the language.
    pub kernel: String,
    /// Tensor shapes in parameter order.
    pub tensor_shapes: Vec<Vec<usize>>,
    pub flops: f64,
    /// Our best tuned config: median GFLOPS over the timed rounds.
    pub ours_gflops: Option<f64>,
    pub ours_seconds: Option<f64>,
    pub baseline: String,
    pub baseline_gflops: Option<f64>,
    pub baseline_seconds: Option<f64>,
    /// `ours_gflops / baseline_gflops` (> 1: we are faster).
    pub ratio: Option<f64>,
    /// The untuned heuristic default schedule, timed in the same rounds.
    pub default_gflops: Option<f64>,
    /// Convolutions: our tuned config with the weights packed inside every timed call (as
    /// on a view or slice, which has no [`tensor_dsl::Tensor::version`]); `ours_gflops`
    /// is the call on weight tensors unchanged since the last call, packed once, as the
    /// library baselines' weights are reordered once outside their timed calls.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub repacking_gflops: Option<f64>,
    /// Trials measured (valid or not).
    pub trials: usize,
    pub valid_trials: usize,
    pub tune_seconds: f64,
    /// Why tuning stopped: `Trials` (budget spent), `Time` or `Exhausted` (the strategy had
    /// nothing new to propose).
    pub stopped: Option<String>,
    pub strategy: String,
    pub seed: u64,
    pub device: String,
    pub date: String,
    /// The best config in the template's text form.
    pub best_config: Option<String>,
    /// Whether the best config is the heuristic default (tuning found nothing faster).
    pub best_is_default: Option<bool>,
    /// The best config's median GFLOPS as measured during tuning (child process).
    pub tuned_gflops: Option<f64>,
    /// Best-so-far GFLOPS after each trial (`null` before the first valid trial).
    pub history: Vec<Option<f64>>,
    /// Largest |ours − baseline| over the output.
    pub max_abs_diff: Option<f64>,
    /// Whether the heuristic default was the search's first trial.
    pub start_from_default: bool,
    /// Fraction of all CPU time the machine spent busy (others' work: we are idle then)
    /// over half a second just before the check and the timed rounds; above ~0.1 the
    /// timings are noisy.
    pub machine_busy: Option<f64>,
    /// Seconds per call in each timed round, in the order they ran.
    pub ours_rounds: Vec<f64>,
    pub baseline_rounds: Vec<f64>,
    pub default_rounds: Vec<f64>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub repacking_rounds: Vec<f64>,
    /// The machine's measured peak (`machine.peak`), CPU runs only.
    pub peak_gflops: Option<f64>,
    /// `ours_gflops / peak_gflops`.
    pub ours_share_of_peak: Option<f64>,
    /// `default_gflops / peak_gflops`.
    pub default_share_of_peak: Option<f64>,
    /// Every baseline column, `matrixmultiply` (the `baseline` fields) first, then the
    /// libraries (OpenBLAS, oneDNN, ONNX Runtime), each timed in the same rounds or skipped with a reason.
    pub baselines: Vec<BaselineResult>,
    /// The fastest baseline that ran and matched our output (the strongest comparison).
    pub best_baseline: Option<String>,
    pub best_baseline_gflops: Option<f64>,
    /// `ours_gflops / best_baseline_gflops` (> 1: we beat every baseline).
    pub ratio_best: Option<f64>,
    /// Our fastest round over the fastest round of any baseline (> 1: we are faster): beside
    /// `ratio_best`'s medians, for machines that slow every contender down for stretches of
    /// several rounds, where a median can land on either side of such a stretch.
    pub ratio_best_round: Option<f64>,
    /// GPU runs: how each contender's rounds were timed (a CUDA graph of N launches, or N
    /// launches behind a spin kernel, and why), ours / baseline / default.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timing: Option<String>,
}

/// One baseline column of one kernel.
#[derive(Clone, Debug, Serialize)]
pub struct BaselineResult {
    /// `matrixmultiply`, `OpenBLAS`, `oneDNN` or `ONNX Runtime`.
    pub library: String,
    /// What exactly runs (call, layouts, version, implementation).
    pub name: String,
    pub gflops: Option<f64>,
    pub seconds: Option<f64>,
    /// `gflops / peak_gflops`.
    pub share_of_peak: Option<f64>,
    /// Largest `|baseline − ours| / max(|ours|, 1)` over the output, checked before timing.
    pub max_rel_err: Option<f64>,
    /// Why it was not timed: library missing, set-up failed, or its output differs from ours.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skipped: Option<String>,
    /// Seconds per call in each timed round.
    pub rounds: Vec<f64>,
}

impl BaselineResult {
    /// A column that was not timed, and why.
    pub fn skipped(library: &str, name: &str, why: impl Into<String>) -> BaselineResult {
        BaselineResult {
            library: library.into(),
            name: name.into(),
            gflops: None,
            seconds: None,
            share_of_peak: None,
            max_rel_err: None,
            skipped: Some(why.into()),
            rounds: Vec::new(),
        }
    }
}

impl KernelResult {
    /// A result with everything measured left empty.
    pub fn empty(suite: &str, name: &str, shape: Value, baseline: &str) -> KernelResult {
        KernelResult {
            suite: suite.to_string(),
            name: name.to_string(),
            status: "ok".into(),
            error: None,
            shape,
            kernel: String::new(),
            tensor_shapes: Vec::new(),
            flops: 0.0,
            ours_gflops: None,
            ours_seconds: None,
            baseline: baseline.to_string(),
            baseline_gflops: None,
            baseline_seconds: None,
            ratio: None,
            default_gflops: None,
            trials: 0,
            valid_trials: 0,
            tune_seconds: 0.0,
            stopped: None,
            strategy: String::new(),
            seed: 0,
            device: "cpu".into(),
            date: now_utc(),
            best_config: None,
            best_is_default: None,
            tuned_gflops: None,
            history: Vec::new(),
            max_abs_diff: None,
            start_from_default: false,
            machine_busy: None,
            ours_rounds: Vec::new(),
            baseline_rounds: Vec::new(),
            default_rounds: Vec::new(),
            repacking_rounds: Vec::new(),
            repacking_gflops: None,
            peak_gflops: None,
            ours_share_of_peak: None,
            default_share_of_peak: None,
            timing: None,
            baselines: Vec::new(),
            best_baseline: None,
            best_baseline_gflops: None,
            ratio_best: None,
            ratio_best_round: None,
        }
    }

    /// Fills the timed fields from the side-by-side timings of (ours, the baseline, the
    /// default), in that order.
    /// Records our timings: ours, the first baseline, the default, and (convolutions) ours
    /// repacking the weights at each call.
    pub fn timed(&mut self, timings: &[Timing]) -> Result<(), String> {
        let (ours, base, default, repacking) = match timings {
            [ours, base, default] => (ours, base, default, None),
            [ours, base, default, repacking] => (ours, base, default, Some(repacking)),
            _ => return Err("timing returned the wrong number of contenders".into()),
        };
        self.baselines.insert(
            0,
            BaselineResult {
                library: if self.device == "cuda" {
                    "cuBLAS/cuDNN".into()
                } else if self.baseline == crate::stages::NAIVE {
                    "naive".into()
                } else {
                    "matrixmultiply".into()
                },
                name: self.baseline.clone(),
                gflops: Some(self.flops / base.median / 1e9),
                seconds: Some(base.median),
                share_of_peak: None,
                max_rel_err: None,
                skipped: None,
                rounds: base.rounds.clone(),
            },
        );
        let gflops = |s: f64| self.flops / s / 1e9;
        self.ours_seconds = Some(ours.median);
        self.ours_gflops = Some(gflops(ours.median));
        self.baseline_seconds = Some(base.median);
        self.baseline_gflops = Some(gflops(base.median));
        self.ratio = Some(base.median / ours.median);
        self.default_gflops = Some(gflops(default.median));
        self.ours_rounds = ours.rounds.clone();
        self.baseline_rounds = base.rounds.clone();
        self.default_rounds = default.rounds.clone();
        if let Some(r) = repacking {
            self.repacking_gflops = Some(gflops(r.median));
            self.repacking_rounds = r.rounds.clone();
        }
        Ok(())
    }

    /// [`KernelResult::timed`] for a kernel no library computes (`timings`: ours, then the
    /// default): `library`'s column is recorded as skipped, with `why`.
    pub fn timed_alone(
        &mut self,
        timings: &[Timing],
        library: &str,
        why: String,
    ) -> Result<(), String> {
        let [ours, default] = timings else {
            return Err("timing returned the wrong number of contenders".into());
        };
        let gflops = |s: f64| self.flops / s / 1e9;
        self.ours_seconds = Some(ours.median);
        self.ours_gflops = Some(gflops(ours.median));
        self.default_gflops = Some(gflops(default.median));
        self.ours_rounds = ours.rounds.clone();
        self.default_rounds = default.rounds.clone();
        self.baselines
            .insert(0, BaselineResult::skipped(library, &self.baseline, why));
        Ok(())
    }

    /// Records a library baseline's timing (checked beforehand: `max_rel_err`).
    pub fn timed_baseline(&mut self, library: &str, name: &str, max_rel_err: f64, t: &Timing) {
        self.baselines.push(BaselineResult {
            library: library.into(),
            name: name.into(),
            gflops: Some(self.flops / t.median / 1e9),
            seconds: Some(t.median),
            share_of_peak: None,
            max_rel_err: Some(max_rel_err),
            skipped: None,
            rounds: t.rounds.clone(),
        });
    }

    /// Shares of the measured peak, and the best baseline and our ratio to it.
    pub fn summarise(&mut self, peak_gflops: Option<f64>) {
        let peak = peak_gflops.filter(|p| p.is_finite() && *p > 0.0);
        self.peak_gflops = peak;
        let share = |g: Option<f64>| Some(g? / peak?);
        self.ours_share_of_peak = share(self.ours_gflops);
        self.default_share_of_peak = share(self.default_gflops);
        for b in &mut self.baselines {
            b.share_of_peak = share(b.gflops);
        }
        let best = self
            .baselines
            .iter()
            .filter_map(|b| Some((b, b.gflops.filter(|g| g.is_finite())?)))
            .max_by(|x, y| x.1.total_cmp(&y.1));
        if let Some((b, g)) = best {
            self.best_baseline = Some(b.name.clone());
            self.best_baseline_gflops = Some(g);
            self.ratio_best = self.ours_gflops.map(|o| o / g);
        }
        // Seconds per call: the fastest round is the smallest.
        let fastest = |rounds: &[f64]| {
            rounds
                .iter()
                .copied()
                .filter(|s| s.is_finite() && *s > 0.0)
                .reduce(f64::min)
        };
        let ours = fastest(&self.ours_rounds);
        let base = self
            .baselines
            .iter()
            .filter(|b| b.gflops.is_some_and(f64::is_finite))
            .filter_map(|b| fastest(&b.rounds))
            .reduce(f64::min);
        self.ratio_best_round = ours.zip(base).map(|(o, b)| b / o);
    }

    /// The GFLOPS of the columns of `library` that ran, joined with ` / ` (`-` if none).
    fn library_gflops(&self, library: &str) -> String {
        let cols: Vec<String> = self
            .baselines
            .iter()
            .filter(|b| b.library == library)
            .map(|b| num(b.gflops, 1))
            .collect();
        if cols.is_empty() {
            "-".into()
        } else {
            cols.join(" / ")
        }
    }

    /// The median time in microseconds of the first timed column of `library`.
    fn library_micros(&self, library: &str) -> Option<f64> {
        self.baselines
            .iter()
            .find(|b| b.library == library)
            .and_then(|b| b.seconds)
            .map(|s| s * 1e6)
    }

    pub fn fail(&mut self, error: impl Into<String>) {
        self.status = "failed".into();
        self.error = Some(error.into());
    }
}

/// The whole report: where and how it ran, then one entry per kernel.
#[derive(Debug, Serialize)]
pub struct Report {
    pub command: String,
    pub machine: Machine,
    pub results: Vec<KernelResult>,
}

#[derive(Debug, Serialize)]
pub struct Machine {
    pub cpu: String,
    /// ISA flags and thread count, as in tuning records.
    pub detail: String,
    pub compiler: String,
    /// `OMP_WAIT_POLICY` as the kernels saw it (`None`: unset, libgomp's default spin).
    pub omp_wait_policy: Option<String>,
    /// The GPU (name, index, architecture, SMs, memory, driver) for `--device cuda`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu: Option<String>,
    /// The measured peak FMA throughput on all cores (CPU runs; `None` if it could not be
    /// measured).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub peak: Option<crate::peak::Peak>,
}

impl Machine {
    pub fn this() -> Machine {
        let t = tensor_dsl::records::Target::this_cpu();
        let compiler = tensor_dsl::runtime::cpu::compiler()
            .map(|c| format!("{} {}", c.program, c.flags.join(" ")))
            .unwrap_or_else(|e| format!("none: {e}"));
        Machine {
            cpu: t.name,
            detail: t.detail,
            compiler,
            omp_wait_policy: std::env::var("OMP_WAIT_POLICY").ok(),
            gpu: None,
            peak: None,
        }
    }
}

/// Writes the report (pretty JSON) to `path`, replacing it.
pub fn write(path: &Path, report: &Report) -> Result<(), String> {
    let text =
        serde_json::to_string_pretty(report).map_err(|e| format!("serializing the report: {e}"))?;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    let tmp = path.with_extension("json.tmp");
    std::fs::write(&tmp, text + "\n").map_err(|e| format!("{}: {e}", tmp.display()))?;
    std::fs::rename(&tmp, path).map_err(|e| format!("{}: {e}", path.display()))
}

/// `YYYY-MM-DDTHH:MM:SSZ` now.
pub fn now_utc() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    format_utc(secs)
}

/// Formats Unix seconds as `YYYY-MM-DDTHH:MM:SSZ` (proleptic Gregorian, H. Hinnant's
/// days-to-civil).
pub fn format_utc(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

fn num(v: Option<f64>, digits: usize) -> String {
    v.filter(|x| x.is_finite())
        .map_or("-".into(), |x| format!("{x:.digits$}"))
}

/// A Markdown table of the results: GFLOPS of ours, its share of the measured peak, each
/// baseline library (oneDNN convolutions: `own layouts / with NCHW reorders`), ours over the
/// best baseline, and the untuned default.
pub fn table(results: &[KernelResult]) -> String {
    if !results.is_empty() && results.iter().all(|r| r.baseline == crate::stages::NAIVE) {
        return stages_table(results);
    }
    let mut s = String::from(
        "| suite | kernel | GFLOP | ours GFLOPS | % peak | matrixmultiply / cuBLAS | OpenBLAS | oneDNN | ONNX Runtime | ours/best | default GFLOPS | trials (valid) | tune s | busy | status |\n|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n",
    );
    for r in results {
        let status = match &r.error {
            Some(e) => format!("{}: {}", r.status, e.chars().take(80).collect::<String>()),
            None => r.status.clone(),
        };
        s.push_str(&format!(
            "| {} | {} | {:.2} | {} | {} | {} | {} | {} | {} | {} | {} | {} ({}) | {:.0} | {} | {} |\n",
            r.suite,
            r.name,
            r.flops / 1e9,
            num(r.ours_gflops, 1),
            num(r.ours_share_of_peak.map(|x| 100.0 * x), 0),
            num(r.baseline_gflops, 1),
            r.library_gflops("OpenBLAS"),
            r.library_gflops("oneDNN"),
            r.library_gflops("ONNX Runtime"),
            num(r.ratio_best, 2),
            num(r.default_gflops, 1),
            r.trials,
            r.valid_trials,
            r.tune_seconds,
            num(r.machine_busy, 2),
            status.replace('|', "/").replace('\n', " ")
        ));
    }
    s
}

/// The table of the `stages` suite: times (their FLOP counts are statement counts, not
/// arithmetic a library would count) and the ratio to ONNX Runtime.
fn stages_table(results: &[KernelResult]) -> String {
    let mut s = String::from(
        "| suite | kernel | ours µs | ONNX Runtime µs | ours/ONNX Runtime | default µs | naive µs | trials (valid) | busy | status |\n|---|---|---:|---:|---:|---:|---:|---:|---:|---|\n",
    );
    for r in results {
        let status = match &r.error {
            Some(e) => format!("{}: {}", r.status, e.chars().take(80).collect::<String>()),
            None => r.status.clone(),
        };
        let ours = r.ours_seconds.map(|s| s * 1e6);
        let ort = r.library_micros("ONNX Runtime");
        let default = r
            .default_gflops
            .and_then(|g| (g > 0.0).then(|| r.flops / g / 1e3));
        s.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} ({}) | {} | {} |\n",
            r.suite,
            r.name,
            num(ours, 1),
            num(ort, 1),
            num(ort.zip(ours).map(|(o, u)| o / u), 2),
            num(default, 1),
            num(r.library_micros("naive"), 0),
            r.trials,
            r.valid_trials,
            num(r.machine_busy, 2),
            status.replace('|', "/").replace('\n', " ")
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_best_round_ratio_takes_each_contenders_fastest_round() {
        let mut r = KernelResult::empty("s", "k", serde_json::Value::Null, "naive");
        r.flops = 1e9;
        // Ours: 1 ms, but two rounds slowed to 2 ms; the baseline 1.25 ms at best.
        r.ours_rounds = vec![1e-3, 2e-3, 2e-3, 1e-3, 2e-3];
        r.ours_gflops = Some(1e9 / 2e-3 / 1e9);
        r.baselines.push(BaselineResult {
            library: "oneDNN".into(),
            name: "conv".into(),
            gflops: Some(1e9 / 1.25e-3 / 1e9),
            seconds: Some(1.25e-3),
            share_of_peak: None,
            max_rel_err: None,
            skipped: None,
            rounds: vec![1.25e-3, 1.3e-3, 1.25e-3],
        });
        r.summarise(None);
        assert!((r.ratio_best.unwrap() - 0.625).abs() < 1e-9);
        assert!((r.ratio_best_round.unwrap() - 1.25).abs() < 1e-9);
    }

    #[test]
    fn dates() {
        assert_eq!(format_utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(format_utc(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(format_utc(1_735_689_599), "2024-12-31T23:59:59Z");
    }
}
