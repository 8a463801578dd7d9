//! Measuring CPU schedules, isolated from the tuning process.
//!
//! Candidates are compiled in parallel (one compiler process per core), then run one at a
//! time in a child process: a small C runner (built once per process) that `dlopen`s the
//! candidate, runs it once (its output is checked against the reference), then repeats it
//! until a minimum time and prints each run's seconds. A candidate that fails to compile,
//! crashes, hangs past the timeout or computes a wrong result is an
//! [`Outcome::Invalid`]; the search goes on.
//!
//! ```no_run
//! use tensor_dsl::{ir::parse_text, measure::cpu::CpuMeasurer, template::cpu::CpuTemplate};
//! use tuner::Measurer;
//! let k = parse_text("mm", "c[[i,j]] += a[[i,k]] * b[[k,j]]", None).unwrap();
//! let shapes = vec![vec![64, 64], vec![64, 64], vec![64, 64]];
//! let t = CpuTemplate::new(&k, &[64, 64, 64], 16).unwrap();
//! let mut m = CpuMeasurer::new(&k, &shapes, t.clone()).unwrap();
//! let outcomes = m.measure(&[t.default_config()]);
//! println!("{:?}", outcomes[0].seconds());
//! ```

use crate::codegen::c;
use crate::ir::{bind, Kernel};
use crate::runtime::cpu;
use crate::template::cpu::CpuTemplate;
use crate::Error;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};
use tuner::{Config, Measurer, Outcome};

/// The child-process runner, in C.
const RUNNER: &str = r#"/* tensor-dsl measurement runner: runs one candidate in its own process. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
typedef void (*entry_t)(const void *const *, void *);
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
static void *load(const char *path, long n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *d = malloc(n + 64);
    if (d && fread(d, 1, n, f) != (size_t)n) { free(d); d = NULL; }
    fclose(f);
    return d;
}
/* argv: object output min_seconds max_repeats nparams, then per parameter: bytes path ("-" = output) */
int main(int argc, char **argv) {
    if (argc < 6) return 90;
    void *lib = dlopen(argv[1], RTLD_NOW);
    if (!lib) { fprintf(stderr, "%s\n", dlerror()); return 91; }
    entry_t kernel = (entry_t)dlsym(lib, "td_kernel");
    if (!kernel) return 92;
    double min_seconds = atof(argv[3]);
    int max_repeats = atoi(argv[4]), np = atoi(argv[5]);
    if (argc != 6 + 2 * np) return 93;
    const void **args = calloc(np, sizeof(void *));
    void *out = NULL;
    long out_len = 0;
    for (int p = 0; p < np; ++p) {
        long len = atol(argv[6 + 2 * p]);
        const char *path = argv[7 + 2 * p];
        if (path[0] == '-' && path[1] == 0) { out = calloc(len + 64, 1); out_len = len; }
        else if (!(args[p] = load(path, len))) return 94;
    }
    if (!out) return 95;
    double first = now();
    kernel(args, out);
    printf("first %.9e\n", now() - first);
    FILE *f = fopen(argv[2], "wb");
    if (!f || fwrite(out, 1, out_len, f) != (size_t)out_len) return 96;
    fclose(f);
    double total = 0;
    for (int reps = 0; reps < 3 || (total < min_seconds && reps < max_repeats); ++reps) {
        double t = now();
        kernel(args, out);
        t = now() - t;
        total += t;
        printf("%.9e\n", t);
    }
    return 0;
}
"#;

/// Builds the runner once per process.
fn runner() -> Result<&'static Path, String> {
    static RUNNER_PATH: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    RUNNER_PATH
        .get_or_init(|| {
            let cc = cpu::compiler()?;
            let dir = cpu::work_dir().map_err(|e| e.to_string())?;
            let src = dir.join("td_runner.c");
            let exe = dir.join("td_runner");
            std::fs::write(&src, RUNNER).map_err(|e| e.to_string())?;
            let out = Command::new(&cc.program)
                .args(["-O2", "-o"])
                .arg(&exe)
                .arg(&src)
                .arg("-ldl")
                .output()
                .map_err(|e| e.to_string())?;
            if !out.status.success() {
                return Err(format!(
                    "building the measurement runner failed: {}",
                    String::from_utf8_lossy(&out.stderr)
                ));
            }
            Ok(exe)
        })
        .as_ref()
        .map(PathBuf::as_path)
        .map_err(Clone::clone)
}

/// A hook that rewrites a candidate's source before it is compiled (fault injection in
/// tests: plant a crash, a hang or a wrong result).
pub type SourceHook = Box<dyn Fn(&Config, String) -> String + Send + Sync>;

/// Measures points of a [`CpuTemplate`] for one kernel at one shape.
pub struct CpuMeasurer {
    kernel: Kernel,
    shapes: Vec<Vec<usize>>,
    extents: Vec<usize>,
    template: CpuTemplate,
    dir: PathBuf,
    /// Input files by parameter id (`None` for the output).
    inputs: Vec<Option<PathBuf>>,
    reference: Vec<f32>,
    /// Stop repeating a candidate after this much run time...
    pub min_seconds: f64,
    /// ...or this many repeats (at least 3 are always taken).
    pub max_repeats: usize,
    /// A child still running after this long is killed and the candidate is invalid.
    pub timeout: Duration,
    hook: Option<SourceHook>,
    seq: usize,
    timings: MeasureTimings,
}

/// Where a [`CpuMeasurer`]'s time went, summed over every batch since it was made, in
/// seconds (wall time unless the name says otherwise). `bench -v` prints it after a search.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MeasureTimings {
    /// Candidates measured.
    pub candidates: usize,
    /// Batches measured.
    pub batches: usize,
    /// Preparing the task: inputs and the expected output (once, in `new`).
    pub prepare: f64,
    /// Generating C, summed over the compiler threads.
    pub codegen: f64,
    /// The build phase: code generation and compiler processes, in parallel.
    pub compile: f64,
    /// Compiler processes, summed over candidates (more than `compile` when in parallel).
    pub compile_sum: f64,
    /// The run phase: runner processes from start to exit, output checks included.
    pub run: f64,
    /// Inside the runners: every call of a candidate (the checked one and the timed repeats).
    pub kernel: f64,
    /// Reading outputs back and checking them against the expected output.
    pub check: f64,
    /// Timed repeats taken.
    pub repeats: usize,
}

impl std::fmt::Display for MeasureTimings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let per = |s: f64| s / self.candidates.max(1) as f64;
        write!(
            f,
            "{} candidates in {} batches; per candidate: build {:.3} s (codegen {:.3} s, \
             compiler {:.3} s summed over threads), run {:.3} s (kernel calls {:.3} s, \
             {:.1} repeats; check {:.3} s; process, loading and output {:.3} s); \
             preparing the task {:.2} s once",
            self.candidates,
            self.batches,
            per(self.compile),
            per(self.codegen),
            per(self.compile_sum),
            per(self.run),
            per(self.kernel),
            self.repeats as f64 / self.candidates.max(1) as f64,
            per(self.check),
            per(self.run - self.kernel - self.check),
            self.prepare,
        )
    }
}

impl CpuMeasurer {
    /// Prepares a task: writes random inputs to disk and computes the expected output once
    /// (with the reference interpreter for small problems, with the default schedule —
    /// which the test suite checks against the interpreter — above 2e8 flops).
    pub fn new(
        kernel: &Kernel,
        shapes: &[Vec<usize>],
        template: CpuTemplate,
    ) -> Result<CpuMeasurer, Error> {
        let started = Instant::now();
        let refs: Vec<&[usize]> = shapes.iter().map(Vec::as_slice).collect();
        let extents = bind(kernel, &refs)?;
        let dir = cpu::work_dir()?;
        let data = super::task_inputs(kernel, shapes);
        let mut inputs = Vec::new();
        for (p, (param, values)) in kernel.params.iter().zip(&data).enumerate() {
            if param.is_output {
                inputs.push(None);
                continue;
            }
            let path = dir.join(format!("t{p}.bin"));
            std::fs::write(&path, values.view().bytes())?;
            inputs.push(Some(path));
        }
        let data_refs: Vec<crate::Data<'_>> = data.iter().map(crate::Buffer::view).collect();
        let (reference, _) = super::expected_output(kernel, &extents, &refs, &data_refs, || {
            template.decode(&template.default_config())
        })?
        .map_err(|reason| Error::DeviceUnavailable {
            device: "cpu".into(),
            reason,
        })?;
        Ok(CpuMeasurer {
            kernel: kernel.clone(),
            shapes: shapes.to_vec(),
            extents,
            template,
            dir,
            inputs,
            reference,
            min_seconds: 0.1,
            max_repeats: 50,
            timeout: Duration::from_secs(20),
            hook: None,
            seq: 0,
            timings: MeasureTimings {
                prepare: started.elapsed().as_secs_f64(),
                ..MeasureTimings::default()
            },
        })
    }

    /// Installs a source hook (see [`SourceHook`]).
    pub fn with_source_hook(mut self, hook: SourceHook) -> Self {
        self.hook = Some(hook);
        self
    }

    /// Where the time went so far (see [`MeasureTimings`]).
    pub fn timings(&self) -> &MeasureTimings {
        &self.timings
    }

    /// The template whose points this measures.
    pub fn template(&self) -> &CpuTemplate {
        &self.template
    }

    /// The kernel's flop count at this shape.
    pub fn flops(&self) -> f64 {
        self.kernel.flops(&self.extents)
    }

    fn source(&self, config: &Config) -> Result<String, String> {
        let schedule = self.template.decode(config)?;
        schedule.validate(&self.kernel)?;
        let shapes: Vec<&[usize]> = self.shapes.iter().map(Vec::as_slice).collect();
        let src = c::generate(&self.kernel, &self.extents, &shapes, &schedule);
        Ok(match &self.hook {
            Some(h) => h(config, src),
            None => src,
        })
    }

    /// Runs one compiled candidate in the runner and checks its output.
    fn run_one(&mut self, object: &Path, out: &Path) -> Outcome {
        let invalid = |reason: String| Outcome::Invalid { reason };
        let runner = match runner() {
            Ok(r) => r,
            Err(e) => return invalid(e),
        };
        let mut cmd = Command::new(runner);
        cmd.arg(object)
            .arg(out)
            .arg(self.min_seconds.to_string())
            .arg(self.max_repeats.to_string())
            .arg(self.kernel.params.len().to_string());
        for (p, (shape, param)) in self.shapes.iter().zip(&self.kernel.params).enumerate() {
            cmd.arg((shape.iter().product::<usize>() * param.dtype.size()).to_string());
            match &self.inputs[p] {
                Some(path) => cmd.arg(path),
                None => cmd.arg("-"),
            };
        }
        let mut child = match cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn() {
            Ok(c) => c,
            Err(e) => return invalid(format!("cannot start the runner: {e}")),
        };
        let start = Instant::now();
        let status = loop {
            match child.try_wait() {
                Ok(Some(status)) => break status,
                Ok(None) if start.elapsed() > self.timeout => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return invalid(format!(
                        "timed out after {:.1} s",
                        self.timeout.as_secs_f64()
                    ));
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(1)),
                Err(e) => return invalid(format!("waiting for the runner: {e}")),
            }
        };
        let mut stdout = String::new();
        let mut stderr = String::new();
        if let Some(mut s) = child.stdout.take() {
            let _ = s.read_to_string(&mut stdout);
        }
        if let Some(mut s) = child.stderr.take() {
            let _ = s.read_to_string(&mut stderr);
        }
        if !status.success() {
            return invalid(match status.code() {
                Some(code) => format!("runner exited with status {code}: {}", stderr.trim()),
                None => "crashed (killed by a signal)".to_string(),
            });
        }
        let checking = Instant::now();
        let dtype = self.kernel.params[self.kernel.output].dtype;
        let got = match std::fs::read(out) {
            Ok(bytes) => crate::Buffer::from_bytes(dtype, &bytes).to_f32(),
            Err(e) => return invalid(format!("no output: {e}")),
        };
        let _ = std::fs::remove_file(out);
        let checked = super::check_output_within(&got, &self.reference, super::tolerance(dtype));
        self.timings.check += checking.elapsed().as_secs_f64();
        if let Err(m) = checked {
            return invalid(m);
        }
        let samples: Vec<f64> = stdout
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect();
        self.timings.kernel += samples.iter().sum::<f64>()
            + stdout
                .lines()
                .filter_map(|l| l.strip_prefix("first ")?.trim().parse::<f64>().ok())
                .sum::<f64>();
        self.timings.repeats += samples.len();
        if samples.is_empty() {
            return invalid("the runner printed no timings".into());
        }
        Outcome::Valid { samples }
    }
}

impl Measurer for CpuMeasurer {
    fn measure(&mut self, batch: &[Config]) -> Vec<Outcome> {
        let base = self.seq;
        self.seq += batch.len();
        let objects: Vec<PathBuf> = (0..batch.len())
            .map(|i| self.dir.join(format!("cand{}.so", base + i)))
            .collect();
        let building = Instant::now();
        // Build in parallel, one compiler per core.
        let workers = std::thread::available_parallelism()
            .map_or(2, |n| n.get())
            .max(1);
        let mut built: Vec<Result<(), String>> = Vec::new();
        let mut times: Vec<(f64, f64)> = Vec::new();
        std::thread::scope(|scope| {
            let this = &*self;
            let handles: Vec<_> = (0..workers)
                .map(|w| {
                    let objects = &objects;
                    scope.spawn(move || {
                        (0..batch.len())
                            .filter(|i| i % workers == w)
                            .map(|i| {
                                let t0 = Instant::now();
                                let src = this.source(&batch[i]);
                                let t1 = Instant::now();
                                let built = src.and_then(|src| {
                                    cpu::compile_shared_object(&src, &objects[i])
                                });
                                let codegen = (t1 - t0).as_secs_f64();
                                (i, built, codegen, t1.elapsed().as_secs_f64())
                            })
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            let mut all: Vec<(usize, Result<(), String>, f64, f64)> = handles
                .into_iter()
                .flat_map(|h| {
                    h.join().unwrap_or_else(|_| {
                        vec![(usize::MAX, Err("compiler thread panicked".into()), 0.0, 0.0)]
                    })
                })
                .collect();
            all.sort_by_key(|(i, ..)| *i);
            built = (0..batch.len())
                .map(|i| {
                    all.iter()
                        .find(|(j, ..)| *j == i)
                        .map_or(Err("not built".to_string()), |(_, r, ..)| r.clone())
                })
                .collect();
            times = all.iter().map(|(_, _, g, c)| (*g, *c)).collect();
        });
        for (codegen, compile) in times {
            self.timings.codegen += codegen;
            self.timings.compile_sum += compile;
        }
        self.timings.compile += building.elapsed().as_secs_f64();
        let running = Instant::now();
        // Run one at a time.
        let mut outcomes = Vec::with_capacity(batch.len());
        for (i, result) in built.into_iter().enumerate() {
            outcomes.push(match result {
                Err(log) => Outcome::Invalid {
                    reason: format!(
                        "does not compile: {}",
                        log.chars().take(2000).collect::<String>()
                    ),
                },
                Ok(()) => {
                    let out = self.dir.join(format!("out{}.bin", base + i));
                    self.run_one(&objects[i], &out)
                }
            });
            let _ = std::fs::remove_file(&objects[i]);
        }
        self.timings.run += running.elapsed().as_secs_f64();
        self.timings.batches += 1;
        self.timings.candidates += batch.len();
        outcomes
    }
}

impl Drop for CpuMeasurer {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
