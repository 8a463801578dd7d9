//! Measuring CPU schedules, isolated from the tuning process.
//!
//! A batch of candidates is compiled in parallel: one compiler process per core, each
//! building its share of the batch into one shared object (candidate `n` is the C unit
//! whose entry is renamed `td_kernel_<n>`; a share that fails to build is built again one
//! candidate at a time, so a compile error only invalidates its own candidate). Then the
//! candidates run one at a time in a child process: a small C runner (built once per
//! process, started once per measurer) that keeps the inputs loaded, `dlopen`s each object
//! it is sent, runs the candidate once (its output is checked against the expected output,
//! computed once per measurer) and then repeats it, printing each run's seconds, until one
//! of:
//! - at least 3 runs and [`CpuMeasurer::min_seconds`] of run time, or
//!   [`CpuMeasurer::max_repeats`] runs;
//! - at least 8 runs whose median is within [`CpuMeasurer::spread`] of their minimum (the
//!   time is known well enough; Droplet wants 6 samples before it trusts a comparison);
//! - a candidate whose checked call and latest run both took [`CpuMeasurer::slow_factor`]
//!   times the best median so far stops after 3 runs, or after 1 when that run took over
//!   20 ms, and one whose checked call took that long and over 50 ms is not repeated at
//!   all: the checked call is its one sample (it will not be chosen; its time, a little
//!   pessimistic, still trains the cost model).
//!
//! Two points remeasured side by side ([`tuner::Measurer::remeasure_pair`]: the search's
//! last step, the winner against the default) are one request: both are checked, then
//! their calls alternate in turns of about 5 ms until each has run [`PAIR_SECONDS`].
//!
//! Inputs named constant ([`CpuMeasurer::with_constant_inputs`]: a layer's weights) are
//! packed once per candidate that packs them ahead of calls, and the call on the packed
//! input is what is timed, as a caller passing them as an unchanged `Tensor` runs it.
//!
//! A candidate that fails to compile, crashes, hangs past the timeout or computes a wrong
//! result is an [`Outcome::Invalid`]; a crash or a hang ends the runner, and the rest of the
//! batch runs in a fresh one. The runner's inputs are read-only and every buffer lies
//! between guard pages, so a candidate that writes to an input or runs off the end of a
//! page crashes rather than corrupting the next one's data (a stray write elsewhere in the
//! runner is not caught); the output is filled with NaN before each candidate. A point
//! measured again (Droplet's remeasurements) reuses its loaded object, without compiling.
//!
//! Where the time goes is kept in [`MeasureTimings`] (`bench -v` prints it; bench/README.md
//! has a breakdown). Building a candidate (`-O3` on unrolled register tiles, about 0.3 s of
//! compiler CPU) is most of it; before the shared runner, a fresh process per candidate, its
//! inputs read from files, and up to 0.1 s of repeats for candidates that were clearly slow
//! made the run phase about 2.5 times as long as it is now (on a busy 2-core machine).
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
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};
use tuner::{Config, Measurer, Outcome};

/// The child-process runner, in C.
const RUNNER: &str = r#"/* tensor-dsl measurement runner: keeps the inputs loaded and runs the candidates it
   is sent on stdin, one per line, answering on stdout. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
typedef void (*entry_t)(const void *const *, void *);
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
static long page;
/* Buffers start this far into a page, as a large malloc's do (and as the old one-candidate
   runner's did), so that timings see the same alignment as calls on heap buffers. */
#define OFFSET 16
static long body_of(long n) { return (n + OFFSET + page - 1) / page * page; }
/* n bytes (at OFFSET into the first page) between two inaccessible guard pages. */
static unsigned char *guarded(long n) {
    long body = body_of(n);
    unsigned char *m = mmap(NULL, body + 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) return NULL;
    if (mprotect(m, page, PROT_NONE) || mprotect(m + page + body, page, PROT_NONE)) return NULL;
    return m + page + OFFSET;
}
static int cmp(const void *a, const void *b) { double x = *(const double *)a, y = *(const double *)b; return (x > y) - (x < y); }
/* (median - min) / min of the first n samples. */
static double spread_of(const double *s, int n, double *scratch) {
    memcpy(scratch, s, n * sizeof(double));
    qsort(scratch, n, sizeof(double), cmp);
    return scratch[0] > 0 ? (scratch[n / 2] - scratch[0]) / scratch[0] : 1e9;
}
/* Loads `symbol` of `object`. Where the candidate packs one of the `constant` inputs ahead
   of calls (td_prepack_input_N naming it), packs it once into *packed (untimed), sets
   a[np] to it and returns td_kernel_prepacked_N, which is what runs. NULL after printing
   an error. */
static entry_t load(const char *object, const char *symbol, unsigned long long constant, const void **a, int np, float **packed) {
    void *lib = dlopen(object, RTLD_NOW | RTLD_LOCAL);
    if (!lib) { printf("error %s\n", dlerror()); fflush(stdout); return NULL; }
    entry_t kernel = (entry_t)dlsym(lib, symbol);
    if (!kernel) { printf("error no symbol %s\n", symbol); fflush(stdout); return NULL; }
    const char *suffix = symbol + strlen("td_kernel");
    char name[256];
    snprintf(name, sizeof name, "td_prepack_input%s", suffix);
    const long *which = constant ? (const long *)dlsym(lib, name) : NULL;
    if (which && *which >= 0 && *which < 64 && (constant >> *which & 1)) {
        snprintf(name, sizeof name, "td_prepack_elems%s", suffix);
        const long *elems = (const long *)dlsym(lib, name);
        snprintf(name, sizeof name, "td_prepack%s", suffix);
        entry_t fill = (entry_t)dlsym(lib, name);
        snprintf(name, sizeof name, "td_kernel_prepacked%s", suffix);
        entry_t on_packed = (entry_t)dlsym(lib, name);
        if (elems && *elems > 0 && fill && on_packed) {
            /* 64-byte aligned, as the runtime keeps packed inputs. */
            *packed = aligned_alloc(64, (*elems * sizeof(float) + 63) / 64 * 64);
            if (!*packed) exit(96);
            fill(a, *packed);
            a[np] = *packed;
            kernel = on_packed;
        }
    }
    return kernel;
}
/* The checked call: output to NaN, one timed call, the output written to `path`. Its
   seconds, or a negative number after printing an error. */
static double checked(entry_t kernel, const void *const *a, unsigned char *out, long out_len, const char *path) {
    memset(out, 0xff, out_len); /* NaN in every float type */
    double t = now();
    kernel(a, out);
    t = now() - t;
    FILE *f = fopen(path, "wb");
    int written = f && fwrite(out, 1, out_len, f) == (size_t)out_len;
    if (f) fclose(f);
    if (!written) { printf("error cannot write the output\n"); fflush(stdout); return -1; }
    return t;
}
/* argv: nparams, then per parameter: bytes path ("-" = the output).
   stdin, one candidate per line, tab-separated:
     object symbol output_path min_seconds max_repeats spread slow_factor best_seconds constant place
   place: a number naming where the buffers lie; when it differs from the latest, every
   buffer first moves to freshly mapped pages (the old ones are released after), so that
   a remeasurement can see another placement of the data in the caches.
   constant: a bit mask of the inputs that stay unchanged between calls. Where the candidate
   packs one of those ahead of calls (symbol td_kernel_N with td_prepack_input_N naming it),
   it is packed once (td_prepack_N, untimed) and td_kernel_prepacked_N is what runs.
   stdout: "moved" when the buffers moved first, "first S" (the checked call), "t S" per timed run ("reused" after the only one when
   it is the checked call's), then "done"; or "error MESSAGE".
   Or a pair, side by side:
     pair object_a symbol_a output_a object_b symbol_b output_b seconds constant place
   both loaded and checked as above, then timed alternately in turns of about 5 ms each
   (b first in odd turns) until each has run `seconds` and at least 2 turns: stdout
   "moved" as above, then "a S" or "b S" per timed run, then "done"; or "error MESSAGE". */
int main(int argc, char **argv) {
    if (argc < 2) return 90;
    int np = atoi(argv[1]);
    if (np < 1 || argc != 2 + 2 * np) return 93;
    page = sysconf(_SC_PAGESIZE);
    const void **args = calloc(np + 1, sizeof(void *));
    long *lens = calloc(np, sizeof(long)); /* each parameter's bytes */
    if (!args || !lens) return 94;
    unsigned char *out = NULL;
    long out_len = 0;
    for (int p = 0; p < np; ++p) {
        long len = lens[p] = atol(argv[2 + 2 * p]);
        const char *path = argv[3 + 2 * p];
        unsigned char *d = guarded(len > 0 ? len : 1);
        if (!d) return 94;
        if (path[0] == '-' && path[1] == 0) { out = d; out_len = len; continue; }
        FILE *f = fopen(path, "rb");
        if (!f || fread(d, 1, len, f) != (size_t)len) return 94;
        fclose(f);
        if (mprotect(d - OFFSET, body_of(len), PROT_READ)) return 94;
        args[p] = d;
    }
    if (!out) return 95;
    unsigned long long place = 0;
    char line[16384];
    float *packed = NULL, *packed_b = NULL; /* packed constant inputs, for the latest request */
    const void **args_b = calloc(np + 1, sizeof(void *)); /* a pair's second candidate's */
    if (!args_b) return 94;
    while (fgets(line, sizeof line, stdin)) {
        free(packed);
        free(packed_b);
        packed = packed_b = NULL;
        args[np] = NULL;
        char *field[10];
        int nf = 0;
        for (char *tok = strtok(line, "\t\n"); tok && nf < 10; tok = strtok(NULL, "\t\n")) field[nf++] = tok;
        if (nf != 10) { printf("error bad request\n"); fflush(stdout); continue; }
        unsigned long long constant = strtoull(field[8], NULL, 10);
        unsigned long long want = strtoull(field[9], NULL, 10);
        if (want != place) {
            /* Every buffer to new pages: map, copy, protect, then release the old. */
            for (int p = 0; p < np; ++p) {
                int is_out = args[p] == NULL; /* the output is the one parameter not in args */
                unsigned char *old = is_out ? out : (unsigned char *)args[p];
                long len = lens[p] > 0 ? lens[p] : 1;
                unsigned char *d = guarded(len);
                if (!d) return 94;
                memcpy(d, old, len);
                if (!is_out && mprotect(d - OFFSET, body_of(len), PROT_READ)) return 94;
                munmap(old - OFFSET - page, body_of(len) + 2 * page);
                if (is_out) out = d; else args[p] = d;
            }
            place = want;
            printf("moved\n");
        }
        if (strcmp(field[0], "pair") == 0) {
            memcpy(args_b, args, (np + 1) * sizeof(void *));
            entry_t ka = load(field[1], field[2], constant, args, np, &packed);
            if (!ka) continue;
            entry_t kb = load(field[4], field[5], constant, args_b, np, &packed_b);
            if (!kb) continue;
            double fa = checked(ka, args, out, out_len, field[3]);
            if (fa < 0) continue;
            double fb = checked(kb, args_b, out, out_len, field[6]);
            if (fb < 0) continue;
            double seconds = atof(field[7]), total[2] = {0, 0};
            long per_turn[2];
            double first[2] = {fa, fb};
            for (int k = 0; k < 2; ++k) {
                double n = first[k] > 0 ? 0.005 / first[k] : 1000;
                per_turn[k] = n < 1 ? 1 : n > 1000 ? 1000 : (long)n;
            }
            entry_t ks[2] = {ka, kb};
            const void *const *as[2] = {args, args_b};
            for (long turn = 0; turn < 2 || total[0] < seconds || total[1] < seconds; ++turn) {
                for (int j = 0; j < 2; ++j) {
                    int k = turn % 2 ? 1 - j : j;
                    for (long c = 0; c < per_turn[k]; ++c) {
                        double t = now();
                        ks[k](as[k], out);
                        t = now() - t;
                        total[k] += t;
                        printf("%c %.9e\n", k ? 'b' : 'a', t);
                    }
                }
                if (turn >= 100000) break;
            }
            printf("done\n");
            fflush(stdout);
            continue;
        }
        double min_seconds = atof(field[3]), spread = atof(field[5]), slow = atof(field[6]), best = atof(field[7]);
        int max_repeats = atoi(field[4]);
        if (max_repeats < 3) max_repeats = 3;
        entry_t kernel = load(field[0], field[1], constant, args, np, &packed);
        if (!kernel) continue;
        double first = checked(kernel, args, out, out_len, field[2]);
        if (first < 0) continue;
        printf("first %.9e\n", first);
        fflush(stdout);
        double t;
        if (slow > 0 && best > 0 && first > slow * best && first > 0.05) {
            /* Far slower than the best and long: the checked call is its one sample. */
            printf("t %.9e\nreused\ndone\n", first);
            fflush(stdout);
            continue;
        }
        double *samples = malloc(2 * max_repeats * sizeof(double)), total = 0;
        if (!samples) return 96;
        for (int n = 1;; ++n) {
            t = now();
            kernel(args, out);
            t = now() - t;
            samples[n - 1] = t;
            total += t;
            printf("t %.9e\n", t);
            int is_slow = slow > 0 && best > 0 && t > slow * best && first > slow * best;
            if (is_slow && t > 0.02) break;
            if (n < 3) continue;
            if (is_slow || total >= min_seconds || n >= max_repeats) break;
            if (n >= 8 && spread > 0 && spread_of(samples, n, samples + max_repeats) <= spread) break;
        }
        free(samples);
        printf("done\n");
        fflush(stdout);
    }
    return 0;
}
"#;

/// Builds the runner once per process.
fn runner_exe() -> Result<&'static Path, String> {
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

/// A started runner: its stdin for requests, its stdout lines through a reader thread (so
/// waiting for an answer can time out), and the objects it has loaded (deleted when it ends:
/// a file deleted while loaded could have its inode reused by a later object, which `dlopen`
/// would then take for the one it already has).
struct Runner {
    child: Child,
    stdin: ChildStdin,
    /// In a mutex only so that the measurer stays `Sync`.
    lines: Mutex<Receiver<String>>,
    loaded: Vec<PathBuf>,
}

/// A runner loads at most this many objects before it is replaced by a fresh one.
const OBJECTS_PER_RUNNER: usize = 64;

impl Runner {
    fn start(args: &[std::ffi::OsString]) -> Result<Runner, String> {
        let exe = runner_exe()?;
        let mut child = Command::new(exe)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot start the runner: {e}"))?;
        let (stdin, stdout) = match (child.stdin.take(), child.stdout.take()) {
            (Some(i), Some(o)) => (i, o),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return Err("the runner has no pipes".into());
            }
        };
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Ok(Runner {
            child,
            stdin,
            lines: Mutex::new(lines),
            loaded: Vec::new(),
        })
    }

    /// Ends the runner: closes its stdin (it exits), waits up to `grace` for it to exit,
    /// then kills it. Returns how it exited and the objects it loaded.
    fn end(self, grace: Duration) -> (Option<std::process::ExitStatus>, Vec<PathBuf>) {
        let Runner {
            mut child,
            stdin,
            loaded,
            ..
        } = self;
        drop(stdin);
        let until = Instant::now() + grace;
        let status = loop {
            match child.try_wait() {
                Ok(Some(status)) => break Some(status),
                Ok(None) if Instant::now() < until => std::thread::sleep(Duration::from_millis(1)),
                _ => {
                    let _ = child.kill();
                    break child.wait().ok();
                }
            }
        };
        (status, loaded)
    }
}

/// A built candidate: its object and entry symbol, or why it did not build.
type Built = Result<(PathBuf, String), String>;

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
    /// Stop repeating a candidate after this much run time (and at least 3 runs)...
    pub min_seconds: f64,
    /// ...or this many repeats (at least 3 are always taken, unless it is slow)...
    pub max_repeats: usize,
    /// ...or when at least 8 runs have a median within this fraction of their minimum
    /// (0 turns this off)...
    pub spread: f64,
    /// ...or, for a candidate whose checked call and latest run both took more than this
    /// many times the best median so far, after 3 runs, or 1 run of over 20 ms, or none
    /// when the checked call took over 50 ms (0 turns this off; see the module docs).
    pub slow_factor: f64,
    /// A candidate still running after this long (loading, the checked call and the
    /// repeats) is killed and invalid; the next one runs in a fresh runner.
    pub timeout: Duration,
    hook: Option<SourceHook>,
    /// Bit mask of the inputs that stay unchanged between calls ([`CpuMeasurer::with_constant_inputs`]).
    constant: u64,
    /// Where the runner's buffers lie ([`Measurer::vary`] moves them).
    place: u64,
    seq: usize,
    timings: MeasureTimings,
    /// The runner, once started (and until a candidate crashes or hangs in it).
    runner: Option<Runner>,
    /// Objects of runners that ended, deleted after the batch.
    stale: Vec<PathBuf>,
    /// The best median so far.
    best: Option<f64>,
    /// Each point's object and entry, while the object is on disk (loaded by the runner).
    objects: HashMap<Config, (PathBuf, String)>,
}

/// Where a [`CpuMeasurer`]'s time went, summed over every batch since it was made, in
/// seconds (wall time unless the name says otherwise). `bench -v` prints it after a search.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MeasureTimings {
    /// Candidates measured.
    pub candidates: usize,
    /// Batches measured.
    pub batches: usize,
    /// Candidates compiled (a remeasured point whose object is still loaded is not).
    pub built: usize,
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
    /// Times the runner moved its buffers to fresh pages ([`Measurer::vary`]).
    pub moves: usize,
}

impl std::fmt::Display for MeasureTimings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let per = |s: f64| s / self.candidates.max(1) as f64;
        write!(
            f,
            "{} candidates ({} compiled) in {} batches; per candidate: build {:.3} s (codegen {:.3} s, \
             compiler {:.3} s summed over threads), run {:.3} s (kernel calls {:.3} s, \
             {:.1} repeats; check {:.3} s; process, loading and output {:.3} s); \
             preparing the task {:.2} s once",
            self.candidates,
            self.built,
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
            spread: 0.02,
            slow_factor: 3.0,
            timeout: Duration::from_secs(20),
            hook: None,
            constant: 0,
            place: 0,
            runner: None,
            stale: Vec::new(),
            best: None,
            objects: HashMap::new(),
            seq: 0,
            timings: MeasureTimings {
                prepare: started.elapsed().as_secs_f64(),
                ..MeasureTimings::default()
            },
        })
    }

    /// Says which inputs (parameter indices) stay unchanged between the caller's calls, as
    /// a layer's weights do: a candidate that packs one of them ahead of calls
    /// (`td_prepack`) is timed on it packed once, as a caller passing it as an unchanged
    /// [`crate::Tensor`] runs it, not packing it at every call. Without this (and for other
    /// inputs) every timed call packs what it packs.
    pub fn with_constant_inputs(mut self, inputs: &[usize]) -> Self {
        self.constant = inputs
            .iter()
            .filter(|&&i| i < 64)
            .fold(0u64, |m, &i| m | 1 << i);
        self
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

    /// Candidate `n`'s C unit: its entry renamed `td_kernel_<n>` (and every other name it
    /// exports suffixed alike), so that several units can share one object.
    fn source(&self, config: &Config, n: usize) -> Result<String, String> {
        let schedule = self.template.decode(config)?;
        schedule.validate(&self.kernel)?;
        let shapes: Vec<&[usize]> = self.shapes.iter().map(Vec::as_slice).collect();
        let src = c::generate(&self.kernel, &self.extents, &shapes, &schedule);
        let src = match &self.hook {
            Some(h) => h(config, src),
            None => src,
        };
        let renames: String = c::EXPORTS
            .iter()
            .map(|e| format!("#define {e} {e}_{n}\n"))
            .collect();
        Ok(format!("{renames}{src}"))
    }

    /// Builds the candidates `indices` of `batch` (numbered from `base`) into one object
    /// with one compiler process; if that fails, one object per candidate, so that an error
    /// is its own candidate's. Returns each candidate's object and entry symbol, or why it
    /// did not build, and the seconds spent generating code and compiling.
    fn build_share(
        &self,
        batch: &[Config],
        base: usize,
        indices: &[usize],
    ) -> (Vec<(usize, Built)>, f64, f64) {
        let generating = Instant::now();
        let sources: Vec<(usize, Result<String, String>)> = indices
            .iter()
            .map(|&i| (i, self.source(&batch[i], base + i)))
            .collect();
        let codegen = generating.elapsed().as_secs_f64();
        let compiling = Instant::now();
        let symbol = |i: usize| format!("{}_{}", c::ENTRY, base + i);
        let good: Vec<(usize, &str)> = sources
            .iter()
            .filter_map(|(i, s)| Some((*i, s.as_deref().ok()?)))
            .collect();
        let mut shared_error = None;
        if good.len() > 1 {
            let object = self.dir.join(format!("b{base}-{}.so", good[0].0));
            let units: Vec<&str> = good.iter().map(|(_, s)| *s).collect();
            match cpu::compile_shared_object_from(&units, &object) {
                Ok(()) => {
                    let built = sources
                        .into_iter()
                        .map(|(i, s)| (i, s.map(|_| (object.clone(), symbol(i)))))
                        .collect();
                    return (built, codegen, compiling.elapsed().as_secs_f64());
                }
                Err(e) => shared_error = Some(e),
            }
        }
        let built = sources
            .into_iter()
            .map(|(i, s)| {
                let object = self.dir.join(format!("c{}.so", base + i));
                let result = s.and_then(|src| {
                    cpu::compile_shared_object(&src, &object).map(|()| (object, symbol(i)))
                });
                (i, result)
            })
            .collect();
        if let Some(e) = shared_error {
            crate::log::warn(format_args!(
                "a batch of candidates did not build together, so one at a time: {}",
                e.lines().next().unwrap_or_default()
            ));
        }
        (built, codegen, compiling.elapsed().as_secs_f64())
    }

    /// The runner's arguments: the parameter count, then each parameter's bytes and input
    /// file (`-` for the output).
    fn runner_args(&self) -> Vec<std::ffi::OsString> {
        let mut args = vec![self.kernel.params.len().to_string().into()];
        for (p, (shape, param)) in self.shapes.iter().zip(&self.kernel.params).enumerate() {
            args.push(
                (shape.iter().product::<usize>() * param.dtype.size())
                    .to_string()
                    .into(),
            );
            args.push(match &self.inputs[p] {
                Some(path) => path.clone().into_os_string(),
                None => "-".into(),
            });
        }
        args
    }

    /// Ends the runner (if any); its objects are deleted after the batch.
    fn end_runner(&mut self, grace: Duration) -> Option<std::process::ExitStatus> {
        let runner = self.runner.take()?;
        let (status, loaded) = runner.end(grace);
        self.stale.extend(loaded);
        status
    }

    /// Sends `request` to the runner (started if there is none; one that died since the
    /// last request is replaced once), noting the `objects` it will load.
    fn send(&mut self, request: &str, objects: &[&Path]) -> Result<(), String> {
        for _ in 0..2 {
            if self.runner.is_none() {
                self.runner = Some(Runner::start(&self.runner_args())?);
            }
            if let Some(r) = self.runner.as_mut() {
                if r.stdin.write_all(request.as_bytes()).is_ok() && r.stdin.flush().is_ok() {
                    for &object in objects {
                        if !r.loaded.iter().any(|o| o == object) {
                            r.loaded.push(object.to_path_buf());
                        }
                    }
                    return Ok(());
                }
            }
            self.end_runner(Duration::ZERO);
        }
        Err("cannot send the candidate to the runner".into())
    }

    /// Reads the runner's answer to the latest request, passing each line to `line` (after
    /// noting buffer moves) until `done`. Why it failed otherwise: an error it printed, a
    /// timeout (the runner is ended) or a crash (the runner ended on its own).
    fn answer(&mut self, mut line: impl FnMut(&str)) -> Result<(), String> {
        let Some(runner) = self.runner.as_mut() else {
            return Err("no runner".into());
        };
        let deadline = Instant::now() + self.timeout;
        let failure = loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let next = match runner.lines.get_mut() {
                Ok(lines) => lines.recv_timeout(left),
                Err(_) => Err(RecvTimeoutError::Disconnected),
            };
            match next {
                Ok(l) if l == "done" => return Ok(()),
                Ok(l) if l == "moved" => self.timings.moves += 1,
                Ok(l) => match l.strip_prefix("error ") {
                    Some(m) => break Ok(m.to_string()),
                    None => line(&l),
                },
                Err(RecvTimeoutError::Timeout) => {
                    break Ok(format!(
                        "timed out after {:.1} s",
                        self.timeout.as_secs_f64()
                    ))
                }
                Err(RecvTimeoutError::Disconnected) => break Err(()),
            }
        };
        match failure {
            Ok(reason) => {
                if reason.starts_with("timed out") {
                    self.end_runner(Duration::ZERO);
                }
                Err(reason)
            }
            Err(()) => {
                // The runner ended in this candidate: a crash (or an exit) of its own.
                let status = self.end_runner(Duration::from_secs(1));
                Err(match status.and_then(|s| s.code()) {
                    Some(code) => format!("the runner exited with status {code}"),
                    None => "crashed (killed by a signal)".to_string(),
                })
            }
        }
    }

    /// Checks the output a candidate wrote to `out` (then deleted) against the expected one.
    fn check(&mut self, out: &Path) -> Result<(), String> {
        let checking = Instant::now();
        let dtype = self.kernel.params[self.kernel.output].dtype;
        let got = std::fs::read(out).map(|bytes| crate::Buffer::from_bytes(dtype, &bytes).to_f32());
        let _ = std::fs::remove_file(out);
        let checked = got.map_err(|e| format!("no output: {e}")).and_then(|got| {
            super::check_output_within(&got, &self.reference, super::tolerance(dtype))
        });
        self.timings.check += checking.elapsed().as_secs_f64();
        checked
    }

    /// A valid outcome of `samples`, noting the best median so far.
    fn valid(&mut self, samples: Vec<f64>) -> Outcome {
        if samples.is_empty() {
            return Outcome::Invalid {
                reason: "the runner printed no timings".into(),
            };
        }
        let outcome = Outcome::Valid { samples };
        if let Some(s) = outcome.seconds() {
            self.best = Some(self.best.map_or(s, |b| b.min(s)));
        }
        outcome
    }

    /// Runs one compiled candidate in the runner (started if there is none) and checks its
    /// output.
    fn run_one(&mut self, object: &Path, symbol: &str, out: &Path) -> Outcome {
        let invalid = |reason: String| Outcome::Invalid { reason };
        let request = format!(
            "{}\t{symbol}\t{}\t{:e}\t{}\t{:e}\t{:e}\t{:e}\t{}\t{}\n",
            object.display(),
            out.display(),
            self.min_seconds,
            self.max_repeats,
            self.spread,
            self.slow_factor,
            self.best.unwrap_or(0.0),
            self.constant,
            self.place,
        );
        if let Err(e) = self.send(&request, &[object]) {
            return invalid(e);
        }
        let mut first = 0.0;
        let mut samples: Vec<f64> = Vec::new();
        let answered = self.answer(|line| {
            if line == "reused" {
                // The one sample is the checked call, counted once below.
                first = 0.0;
            } else if let Some(v) = line.strip_prefix("t ") {
                samples.extend(v.trim().parse::<f64>().ok());
            } else if let Some(v) = line.strip_prefix("first ") {
                first = v.trim().parse().unwrap_or(0.0);
            }
        });
        self.timings.kernel += first + samples.iter().sum::<f64>();
        self.timings.repeats += samples.len();
        if let Err(reason) = answered.and_then(|()| self.check(out)) {
            return invalid(reason);
        }
        self.valid(samples)
    }

    /// Two built candidates side by side in the runner: each checked, then timed in
    /// alternating turns of about 5 ms until each has run [`PAIR_SECONDS`].
    fn run_pair(&mut self, a: &(PathBuf, String), b: &(PathBuf, String)) -> [Outcome; 2] {
        let n = self.seq;
        self.seq += 2;
        let (out_a, out_b) = (
            self.dir.join(format!("out{n}.bin")),
            self.dir.join(format!("out{}.bin", n + 1)),
        );
        let request = format!(
            "pair\t{}\t{}\t{}\t{}\t{}\t{}\t{:e}\t{}\t{}\n",
            a.0.display(),
            a.1,
            out_a.display(),
            b.0.display(),
            b.1,
            out_b.display(),
            PAIR_SECONDS,
            self.constant,
            self.place,
        );
        let both = |reason: String| {
            [
                Outcome::Invalid {
                    reason: reason.clone(),
                },
                Outcome::Invalid { reason },
            ]
        };
        if let Err(e) = self.send(&request, &[&a.0, &b.0]) {
            return both(e);
        }
        let (mut sa, mut sb) = (Vec::new(), Vec::new());
        let answered = self.answer(|line| {
            let (to, v) = match line.split_once(' ') {
                Some(("a", v)) => (&mut sa, v),
                Some(("b", v)) => (&mut sb, v),
                _ => return,
            };
            to.extend(v.trim().parse::<f64>().ok());
        });
        self.timings.kernel += sa.iter().chain(&sb).sum::<f64>();
        self.timings.repeats += sa.len() + sb.len();
        let checked = [self.check(&out_a), self.check(&out_b)];
        if let Err(reason) = answered {
            return both(reason);
        }
        let [ca, cb] = checked;
        [
            ca.map_or_else(|reason| Outcome::Invalid { reason }, |()| self.valid(sa)),
            cb.map_or_else(|reason| Outcome::Invalid { reason }, |()| self.valid(sb)),
        ]
    }
}

/// Seconds of calls each candidate of a side-by-side remeasurement
/// ([`Measurer::remeasure_pair`]) runs, in turns of about 5 ms.
pub const PAIR_SECONDS: f64 = 0.15;

impl Measurer for CpuMeasurer {
    /// The runner moves every buffer to freshly mapped pages before its next candidate:
    /// an unchanged kernel's time moves by up to 15% between placements of its data on
    /// this project's development machine (which pages share cache sets), enough for one
    /// placement to favour the wrong point of two.
    fn vary(&mut self) {
        self.place += 1;
    }

    /// The two points in one runner request, their calls alternating in turns of about
    /// 5 ms ([`PAIR_SECONDS`] each): on the development VM whole stretches of 50 ms and
    /// more ran at half speed, and a point measured alone in one of them lost to one that
    /// was not (`bench/results/2026-11-27-zen4-cpu-one-zmm/`). A point whose object is no
    /// longer on disk is built again first; where one does not build, each is remeasured
    /// alone.
    fn remeasure_pair(&mut self, a: &Config, b: &Config) -> [Outcome; 2] {
        self.objects.retain(|_, (object, _)| object.exists());
        let missing: Vec<Config> = [a, b]
            .into_iter()
            .filter(|c| !self.objects.contains_key(*c))
            .cloned()
            .collect();
        if !missing.is_empty() {
            let base = self.seq;
            self.seq += missing.len();
            let indices: Vec<usize> = (0..missing.len()).collect();
            let (built, _, compile) = self.build_share(&missing, base, &indices);
            self.timings.compile += compile;
            for (i, result) in built {
                if let Ok(o) = result {
                    self.timings.built += 1;
                    self.objects.insert(missing[i].clone(), o);
                }
            }
        }
        match (self.objects.get(a).cloned(), self.objects.get(b).cloned()) {
            (Some(oa), Some(ob)) => {
                let running = Instant::now();
                let outcomes = self.run_pair(&oa, &ob);
                self.timings.run += running.elapsed().as_secs_f64();
                outcomes
            }
            // One does not build: measured one at a time, which says why.
            _ => [self.remeasure(a), self.remeasure(b)],
        }
    }

    fn measure(&mut self, batch: &[Config]) -> Vec<Outcome> {
        let base = self.seq;
        self.seq += batch.len();
        if self
            .runner
            .as_ref()
            .is_some_and(|r| r.loaded.len() >= OBJECTS_PER_RUNNER)
        {
            self.end_runner(Duration::ZERO);
        }
        let building = Instant::now();
        // Build in parallel: one compiler per core, each over its share of the batch.
        // A point measured before whose object is still on disk (a remeasurement) is not
        // built again.
        self.objects.retain(|_, (object, _)| object.exists());
        let mut built: Vec<Built> = batch
            .iter()
            .map(|c| {
                self.objects
                    .get(c)
                    .cloned()
                    .ok_or_else(|| "not built".to_string())
            })
            .collect();
        let todo: Vec<usize> = (0..batch.len()).filter(|&i| built[i].is_err()).collect();
        let workers = std::thread::available_parallelism()
            .map_or(2, |n| n.get())
            .clamp(1, todo.len().max(1));
        let shares: Vec<Vec<usize>> = (0..workers)
            .map(|w| todo.iter().copied().skip(w).step_by(workers).collect())
            .filter(|share: &Vec<usize>| !share.is_empty())
            .collect();
        let mut times: Vec<(f64, f64)> = Vec::new();
        let mut new_objects = Vec::new();
        std::thread::scope(|scope| {
            let this = &*self;
            let handles: Vec<_> = shares
                .iter()
                .map(|share| scope.spawn(move || this.build_share(batch, base, share)))
                .collect();
            for h in handles {
                match h.join() {
                    Ok((results, codegen, compile)) => {
                        times.push((codegen, compile));
                        for (i, r) in results {
                            if let Ok(o) = &r {
                                new_objects.push((batch[i].clone(), o.clone()));
                            }
                            built[i] = r;
                        }
                    }
                    Err(_) => crate::log::warn("a compiler thread panicked"),
                }
            }
        });
        self.timings.built += new_objects.len();
        self.objects.extend(new_objects);
        for (codegen, compile) in times {
            self.timings.codegen += codegen;
            self.timings.compile_sum += compile;
        }
        self.timings.compile += building.elapsed().as_secs_f64();
        let running = Instant::now();
        // Run one at a time.
        let mut outcomes = Vec::with_capacity(batch.len());
        let mut objects: Vec<PathBuf> = Vec::new();
        for (i, result) in built.into_iter().enumerate() {
            outcomes.push(match result {
                Err(log) => Outcome::Invalid {
                    reason: format!(
                        "does not compile: {}",
                        log.chars().take(2000).collect::<String>()
                    ),
                },
                Ok((object, symbol)) => {
                    let out = self.dir.join(format!("out{}.bin", base + i));
                    let outcome = self.run_one(&object, &symbol, &out);
                    let _ = std::fs::remove_file(&out);
                    if !objects.contains(&object) {
                        objects.push(object);
                    }
                    outcome
                }
            });
        }
        // Objects the live runner has not loaded are no longer needed; those of ended
        // runners neither.
        for object in objects.into_iter().chain(std::mem::take(&mut self.stale)) {
            if !self
                .runner
                .as_ref()
                .is_some_and(|r| r.loaded.contains(&object))
            {
                let _ = std::fs::remove_file(object);
            }
        }
        self.objects.retain(|_, (object, _)| object.exists());
        self.timings.run += running.elapsed().as_secs_f64();
        self.timings.batches += 1;
        self.timings.candidates += batch.len();
        outcomes
    }
}

impl Drop for CpuMeasurer {
    fn drop(&mut self) {
        self.end_runner(Duration::ZERO);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
