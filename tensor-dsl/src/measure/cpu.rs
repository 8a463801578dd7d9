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
    kernel(args, out);
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
        })
    }

    /// Installs a source hook (see [`SourceHook`]).
    pub fn with_source_hook(mut self, hook: SourceHook) -> Self {
        self.hook = Some(hook);
        self
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
    fn run_one(&self, object: &Path, out: &Path) -> Outcome {
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
        let dtype = self.kernel.params[self.kernel.output].dtype;
        let got = match std::fs::read(out) {
            Ok(bytes) => crate::Buffer::from_bytes(dtype, &bytes).to_f32(),
            Err(e) => return invalid(format!("no output: {e}")),
        };
        let _ = std::fs::remove_file(out);
        if let Err(m) = super::check_output_within(&got, &self.reference, super::tolerance(dtype)) {
            return invalid(m);
        }
        let samples: Vec<f64> = stdout
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect();
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
        // Build in parallel, one compiler per core.
        let workers = std::thread::available_parallelism()
            .map_or(2, |n| n.get())
            .max(1);
        let mut built: Vec<Result<(), String>> = Vec::new();
        std::thread::scope(|scope| {
            let this = &*self;
            let handles: Vec<_> = (0..workers)
                .map(|w| {
                    let objects = &objects;
                    scope.spawn(move || {
                        (0..batch.len())
                            .filter(|i| i % workers == w)
                            .map(|i| {
                                (
                                    i,
                                    this.source(&batch[i]).and_then(|src| {
                                        cpu::compile_shared_object(&src, &objects[i])
                                    }),
                                )
                            })
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            let mut all: Vec<(usize, Result<(), String>)> = handles
                .into_iter()
                .flat_map(|h| {
                    h.join().unwrap_or_else(|_| {
                        vec![(usize::MAX, Err("compiler thread panicked".into()))]
                    })
                })
                .collect();
            all.sort_by_key(|(i, _)| *i);
            built = (0..batch.len())
                .map(|i| {
                    all.iter()
                        .find(|(j, _)| *j == i)
                        .map_or(Err("not built".to_string()), |(_, r)| r.clone())
                })
                .collect();
        });
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
        outcomes
    }
}

impl Drop for CpuMeasurer {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
