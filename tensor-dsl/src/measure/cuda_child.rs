//! GPU candidates measured in a child process, so that a faulting candidate cannot end
//! tuning.
//!
//! A kernel that reads an illegal address or fails to launch leaves its CUDA context
//! unusable until the process exits (the error is "sticky"), and a GPU kernel that hangs
//! cannot be stopped from the host. So the [`CudaMeasurer`](super::cuda::CudaMeasurer)
//! compiles in the tuning process (NVRTC, no GPU needed) and runs each candidate in a child
//! process that holds the CUDA context: a [`Supervisor`] starts it, sends it the task and
//! then one candidate at a time, and waits for each answer with a timeout. A candidate that
//! faults is answered as invalid and the child exits; one that crashes the child or hangs
//! (killed at the timeout) is invalid too; either way the next candidate starts a fresh
//! child, and tuning goes on.
//!
//! **Which program is the child.** The CPU measurer's runner is a small C program, because
//! isolation must work inside any program — first-call tuning runs in a user's binary —
//! and re-running a user's binary would run its `main`. The GPU child has to do much more
//! (load a CUBIN through the driver, upload inputs, check, time with CUDA graphs): in C that
//! is a second copy of the runtime and of the timing helper, plus a C compiler at run time.
//! Instead the child is **the current executable, re-run with `TENSOR_DSL_CUDA_CHILD=1`**, and
//! a static constructor in tensor-dsl (`.init_array`, the mechanism `include_tuned!` uses)
//! sees the variable and serves the protocol *before* `main` starts, then exits: so it works
//! in any program that links tensor-dsl — a user's binary, the `tensor-dsl` CLI, `bench`,
//! a test binary — with the same Rust code that runs in-process, and never runs the
//! program's `main` (the program's other static constructors run in the child too, as they
//! run before any `main`). If the constructor did not run in the parent (a platform without
//! `.init_array`), re-running the program would run its `main`, so the measurer measures in
//! process instead, with a warning; so it does when the child cannot use the GPU that the
//! parent can (a GPU in exclusive-process mode while the parent holds a context, a child
//! that does not start).
//!
//! **Protocol.** JSON lines on the child's stdin and stdout, each output line prefixed with
//! [`MARK`] (anything else on stdout is ignored): the child says [`Reply::Hello`]; the parent
//! sends a [`Request::Task`] (the kernel, shapes, the seed of its inputs, the file holding
//! the expected output, the tolerance); the child answers [`Reply::Ready`] (or
//! [`Reply::Unavailable`] and exits); then per [`Request::Candidate`] (the CUDA source and
//! launch geometry, the CUBIN — or PTX — hex-encoded, timing limits) one
//! [`Reply::Measured`] or [`Reply::Invalid`]. After an invalid answer that lost the context
//! the child exits. Its stderr is kept (the last 4 KiB) for the reason of a crash. The
//! inputs are not sent: the child draws them from the seed with the parent's function, and
//! only the expected output travels, as a file.
//!
//! The child's work is an [`Executor`]: [`CudaExecutor`] on the GPU (also used in process
//! when there is no child), or a fake in tests, which exercise the protocol, crashes, hangs
//! and respawning without a GPU.

use crate::codegen::cuda::CudaSource;
use crate::ir::Kernel;
use crate::runtime::cubin::Image;
use crate::Error;
use serde::{Deserialize, Serialize};
use std::ffi::OsString;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The protocol's version, checked at the child's hello.
pub const PROTOCOL: u32 = 1;
/// Every protocol line the child writes starts with this.
pub const MARK: &str = "td-cuda-child ";
/// The environment variable that makes the current executable serve as the child.
pub const CHILD_ENV: &str = "TENSOR_DSL_CUDA_CHILD";
/// How much of the child's stderr is kept for messages.
const STDERR_TAIL: usize = 4096;

// ---------------------------------------------------------------------------------------------
// Messages
// ---------------------------------------------------------------------------------------------

/// What every candidate of one measurer shares.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Task {
    pub kernel: Kernel,
    /// By parameter, the output's included.
    pub shapes: Vec<Vec<usize>>,
    /// The inputs are [`super::random_inputs`] of this seed.
    pub seed: u64,
    /// The expected output: `f32` values (of the output's element type), little-endian.
    pub expected: PathBuf,
    /// Relative tolerance of the output check ([`super::tolerance`]).
    pub tolerance: f32,
    /// Where the expected output came from (for messages).
    pub reference_source: String,
}

/// Compiled code as it travels: a CUBIN as hex, or PTX text.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum WireImage {
    Cubin {
        arch: String,
        hex: String,
    },
    Ptx {
        arch: String,
        text: String,
        reason: String,
    },
}

impl From<&Image> for WireImage {
    fn from(image: &Image) -> Self {
        match image {
            Image::Cubin { arch, bytes } => WireImage::Cubin {
                arch: arch.clone(),
                hex: bytes.iter().map(|b| format!("{b:02x}")).collect(),
            },
            Image::Ptx { arch, text, reason } => WireImage::Ptx {
                arch: arch.clone(),
                text: text.clone(),
                reason: reason.clone(),
            },
        }
    }
}

impl WireImage {
    /// The image, or why the hex does not decode.
    pub fn decode(&self) -> Result<Image, String> {
        match self {
            WireImage::Cubin { arch, hex } => {
                let digits = hex.as_bytes();
                if digits.len() % 2 != 0 {
                    return Err("odd number of hex digits".into());
                }
                let bytes = digits
                    .chunks(2)
                    .map(|pair| {
                        std::str::from_utf8(pair)
                            .ok()
                            .and_then(|p| u8::from_str_radix(p, 16).ok())
                            .ok_or_else(|| "not hex".to_string())
                    })
                    .collect::<Result<Vec<u8>, String>>()?;
                Ok(Image::Cubin {
                    arch: arch.clone(),
                    bytes,
                })
            }
            WireImage::Ptx { arch, text, reason } => Ok(Image::Ptx {
                arch: arch.clone(),
                text: text.clone(),
                reason: reason.clone(),
            }),
        }
    }
}

/// One candidate to load, check and time.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Candidate {
    pub id: u64,
    /// The generated CUDA C (kept for messages and saved sources) and its launch geometry.
    pub source: String,
    pub entry: String,
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub shared_bytes: u32,
    /// The TMA descriptors the kernel takes after its output (wgmma with `tma`).
    #[serde(default)]
    pub tensor_maps: Vec<crate::codegen::tensor_map::TensorMapSpec>,
    pub image: WireImage,
    /// The schedule, for messages.
    pub schedule: String,
    pub warmup: usize,
    pub repeats: usize,
    /// A candidate whose single launch takes longer is invalid ("too slow").
    pub max_seconds: f64,
}

impl Candidate {
    /// The generated source and geometry as the runtime takes them.
    pub fn cuda_source(&self) -> CudaSource {
        CudaSource {
            source: self.source.clone(),
            entry: self.entry.clone(),
            grid: self.grid,
            block: self.block,
            shared_bytes: self.shared_bytes,
            tensor_maps: self.tensor_maps.clone(),
        }
    }
}

/// Parent → child.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Request {
    Task(Box<Task>),
    Candidate(Box<Candidate>),
}

/// What a valid candidate measured.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Measured {
    /// Seconds per launch, one per sample.
    pub samples: Vec<f64>,
    /// Launches per sample.
    pub launches: usize,
    /// How the samples were taken (`graph`, `spin`, `events`).
    pub method: String,
    /// Why no CUDA graph was used, if none was.
    pub note: Option<String>,
}

/// Why a candidate is invalid; `context_lost` when it broke the child's CUDA context.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Failure {
    pub reason: String,
    pub context_lost: bool,
}

impl Failure {
    fn new(reason: impl Into<String>) -> Failure {
        Failure {
            reason: reason.into(),
            context_lost: false,
        }
    }
}

/// Child → parent.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Reply {
    Hello { protocol: u32, pid: u32 },
    Ready { device: String },
    Unavailable { reason: String },
    Measured { id: u64, measured: Measured },
    Invalid { id: u64, failure: Failure },
}

// ---------------------------------------------------------------------------------------------
// The child
// ---------------------------------------------------------------------------------------------

/// The child's work.
pub trait Executor {
    /// Prepares the task (the GPU, inputs, expected output): the device's description, or
    /// why it cannot run here.
    fn prepare(&mut self, task: &Task) -> Result<String, String>;
    /// Loads, checks and times one candidate.
    fn run(&mut self, candidate: &Candidate) -> Result<Measured, Failure>;
}

fn send(out: &mut dyn Write, reply: &Reply) -> std::io::Result<()> {
    let text = serde_json::to_string(reply).map_err(std::io::Error::other)?;
    writeln!(out, "{MARK}{text}")?;
    out.flush()
}

/// Serves the protocol on `input`/`output` with `executor` until the input ends, the task
/// cannot run here, or a candidate loses the context; returns the exit status (0, or 3
/// after a lost context, 2 for a protocol error).
pub fn serve(executor: &mut dyn Executor, input: &mut dyn BufRead, output: &mut dyn Write) -> i32 {
    let hello = Reply::Hello {
        protocol: PROTOCOL,
        pid: std::process::id(),
    };
    if send(output, &hello).is_err() {
        return 2;
    }
    let mut prepared = false;
    let mut line = String::new();
    loop {
        line.clear();
        match input.read_line(&mut line) {
            Ok(0) | Err(_) => return 0,
            Ok(_) => {}
        }
        let request: Request = match serde_json::from_str(line.trim()) {
            Ok(r) => r,
            Err(_) => continue,
        };
        let reply = match request {
            Request::Task(task) => match executor.prepare(&task) {
                Ok(device) => {
                    prepared = true;
                    Reply::Ready { device }
                }
                Err(reason) => {
                    let _ = send(output, &Reply::Unavailable { reason });
                    return 0;
                }
            },
            Request::Candidate(c) if !prepared => Reply::Invalid {
                id: c.id,
                failure: Failure::new("the candidate came before the task"),
            },
            Request::Candidate(c) => match executor.run(&c) {
                Ok(measured) => Reply::Measured { id: c.id, measured },
                Err(failure) => {
                    let lost = failure.context_lost;
                    let _ = send(output, &Reply::Invalid { id: c.id, failure });
                    if lost {
                        return 3;
                    }
                    continue;
                }
            },
        };
        if send(output, &reply).is_err() {
            return 2;
        }
    }
}

/// Set by the constructor below in every process it runs in.
static INTERCEPTOR_RAN: AtomicBool = AtomicBool::new(false);

/// Runs before `main` (a static constructor): in a process started as a GPU measuring child
/// (`TENSOR_DSL_CUDA_CHILD=1`), serves the protocol with a [`CudaExecutor`] on stdin and
/// stdout and exits, so the program's `main` never runs; elsewhere it only notes that it ran.
extern "C" fn intercept() {
    INTERCEPTOR_RAN.store(true, Ordering::Relaxed);
    if std::env::var_os(CHILD_ENV).is_none_or(|v| v != "1") {
        return;
    }
    std::env::remove_var(CHILD_ENV);
    let code = std::panic::catch_unwind(|| {
        let mut executor = CudaExecutor::default();
        let stdin = std::io::stdin();
        let stdout = std::io::stdout();
        serve(&mut executor, &mut stdin.lock(), &mut stdout.lock())
    })
    .unwrap_or(101);
    std::process::exit(code);
}

#[used]
#[cfg_attr(
    any(target_os = "linux", target_os = "android", target_os = "freebsd"),
    link_section = ".init_array"
)]
static INTERCEPTOR: extern "C" fn() = intercept;

/// Whether the current executable serves as a measuring child when re-run (the constructor
/// ran in this process, so it will run in the child before `main`).
pub fn interceptor_linked() -> bool {
    // Referencing the constructor keeps its object file in every program that can ask.
    std::hint::black_box(&INTERCEPTOR);
    cfg!(any(
        target_os = "linux",
        target_os = "android",
        target_os = "freebsd"
    )) && INTERCEPTOR_RAN.load(Ordering::Relaxed)
}

/// Runs candidates on the GPU of the CUDA runtime: in the child, or in process.
#[derive(Default)]
pub struct CudaExecutor {
    state: Option<Prepared>,
}

struct Prepared {
    task: Task,
    inputs: Vec<crate::runtime::cuda::DeviceBuffer>,
    output: crate::runtime::cuda::DeviceBuffer,
    expected: Vec<f32>,
}

impl Executor for CudaExecutor {
    fn prepare(&mut self, task: &Task) -> Result<String, String> {
        use crate::runtime::cuda::{self, DeviceBuffer};
        let info = cuda::available()?;
        let kernel = &task.kernel;
        if task.shapes.len() != kernel.params.len() {
            return Err("the task's shapes do not match its kernel".into());
        }
        let bytes = std::fs::read(&task.expected)
            .map_err(|e| format!("reading {}: {e}", task.expected.display()))?;
        let expected: Vec<f32> = bytes
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        let data = super::random_inputs(kernel, &task.shapes, task.seed);
        let inputs = kernel
            .inputs()
            .iter()
            .map(|&p| DeviceBuffer::from_host(&data[p]))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| e.to_string())?;
        let out_len: usize = task.shapes[kernel.output].iter().product();
        let output = DeviceBuffer::zeros_of(kernel.params[kernel.output].dtype, out_len)
            .map_err(|e| e.to_string())?;
        self.state = Some(Prepared {
            task: task.clone(),
            inputs,
            output,
            expected,
        });
        Ok(info.to_string())
    }

    fn run(&mut self, c: &Candidate) -> Result<Measured, Failure> {
        use crate::runtime::cuda::{self, DeviceBuffer};
        use crate::runtime::graph_timing::TimingPlan;
        let state = self.state.as_mut().ok_or_else(|| Failure::new("no task"))?;
        let failed = |e: Error| Failure {
            reason: e.to_string(),
            context_lost: cuda::lost().is_some(),
        };
        let kernel = &state.task.kernel;
        let shapes: Vec<&[usize]> = state.task.shapes.iter().map(Vec::as_slice).collect();
        let image = c.image.decode().map_err(Failure::new)?;
        let compiled = cuda::load_prebuilt(kernel, &shapes, c.cuda_source(), image, &c.schedule)
            .map_err(failed)?;
        let inputs: Vec<&DeviceBuffer> = state.inputs.iter().collect();
        // Poison the output: an element the kernel forgets to write fails the check.
        let dtype = state.output.dtype();
        let poison = crate::Buffer::from_f32(dtype, &vec![f32::NAN; state.output.len()]);
        state.output.copy_from_host(&poison).map_err(failed)?;
        compiled
            .launch(&inputs, &mut state.output)
            .map_err(failed)?;
        let got = state.output.to_host().map_err(|e| Failure {
            reason: format!("{e}\n{}", compiled.describe()),
            context_lost: cuda::lost().is_some(),
        })?;
        super::check_output_within(&got, &state.expected, state.task.tolerance).map_err(|m| {
            Failure::new(format!(
                "{m} (expected output from {})",
                state.task.reference_source
            ))
        })?;
        // One launch timed (a graph of one) before spending repeats on it.
        let single = TimingPlan {
            warmup: 1,
            min_sample_seconds: 0.0,
            max_launches: 1,
        };
        let once = compiled
            .timing(&inputs, &mut state.output, &single, 1)
            .map_err(failed)?;
        let first = once.samples.first().copied().unwrap_or(once.warmup_seconds);
        if first > c.max_seconds {
            return Err(Failure::new(format!(
                "too slow: {first:.4} s for one launch (limit {:.4} s)",
                c.max_seconds
            )));
        }
        let plan = TimingPlan {
            warmup: c.warmup,
            ..TimingPlan::default()
        };
        let t = compiled
            .timing(&inputs, &mut state.output, &plan, c.repeats.max(1))
            .map_err(failed)?;
        Ok(Measured {
            samples: t.samples,
            launches: t.launches,
            method: t.method.to_string(),
            note: t.note,
        })
    }
}

// ---------------------------------------------------------------------------------------------
// The parent
// ---------------------------------------------------------------------------------------------

/// How to start a child: a program, its arguments and extra environment.
#[derive(Clone, Debug)]
pub struct ChildCommand {
    pub program: PathBuf,
    pub args: Vec<OsString>,
    pub env: Vec<(OsString, OsString)>,
}

impl ChildCommand {
    /// The current executable with `TENSOR_DSL_CUDA_CHILD=1` (see the module docs), or why it
    /// cannot serve as the child.
    pub fn current_exe() -> Result<ChildCommand, String> {
        if !interceptor_linked() {
            return Err(
                "this program cannot be re-run as a measuring child (no static constructor)".into(),
            );
        }
        let program = std::env::current_exe()
            .map_err(|e| format!("cannot find the current executable: {e}"))?;
        Ok(ChildCommand {
            program,
            args: Vec::new(),
            env: vec![(CHILD_ENV.into(), "1".into())],
        })
    }
}

/// A started child: its stdin, its protocol lines (through a reader thread, so waiting can
/// time out) and the tail of its stderr.
struct Running {
    child: Child,
    stdin: ChildStdin,
    lines: Receiver<String>,
    stderr: Arc<Mutex<String>>,
}

impl Running {
    /// Closes its stdin (it exits), waits up to `grace`, then kills it; how it ended.
    fn end(mut self, grace: Duration) -> String {
        drop(self.stdin);
        let until = Instant::now() + grace;
        let status = loop {
            match self.child.try_wait() {
                Ok(Some(status)) => break Some(status),
                Ok(None) if Instant::now() < until => std::thread::sleep(Duration::from_millis(2)),
                _ => {
                    let _ = self.child.kill();
                    break self.child.wait().ok();
                }
            }
        };
        // Give the stderr reader a moment to take the last lines.
        std::thread::sleep(Duration::from_millis(20));
        let how = match status {
            Some(s) => match (s.code(), exit_signal(&s)) {
                (Some(code), _) => format!("exited with status {code}"),
                (None, Some(sig)) => format!("was killed by signal {sig}"),
                (None, None) => "ended".into(),
            },
            None => "could not be waited for".into(),
        };
        let tail = self.stderr.lock().map(|s| s.clone()).unwrap_or_default();
        let tail = tail.trim();
        if tail.is_empty() {
            how
        } else {
            format!("{how}; its stderr ended with:\n{tail}")
        }
    }
}

#[cfg(unix)]
fn exit_signal(s: &std::process::ExitStatus) -> Option<i32> {
    std::os::unix::process::ExitStatusExt::signal(s)
}

#[cfg(not(unix))]
fn exit_signal(_: &std::process::ExitStatus) -> Option<i32> {
    None
}

/// Runs candidates in a child process (see the module docs): starts it on demand, sends
/// the task and each candidate, waits with timeouts, and after a crash, a hang or a lost
/// context starts a fresh one for the next candidate.
pub struct Supervisor {
    command: ChildCommand,
    task: Task,
    running: Option<Running>,
    /// How long a child may take to start (CUDA context, inputs).
    pub start_timeout: Duration,
    /// How long one candidate may take (loading, the check, the timing) before its child is
    /// killed; at least 20 times its `max_seconds`.
    pub timeout: Duration,
    started: usize,
    device: Option<String>,
}

impl std::fmt::Debug for Supervisor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Supervisor")
            .field("program", &self.command.program)
            .field("started", &self.started)
            .field("device", &self.device)
            .finish_non_exhaustive()
    }
}

/// What happened to a candidate sent to a child.
#[derive(Clone, Debug, PartialEq)]
pub enum ChildOutcome {
    Measured(Measured),
    /// Invalid: the candidate's fault (wrong, too slow, faulted, crashed or hung).
    Invalid(String),
    /// The child could not run the task at all (no GPU there, it did not start).
    Unavailable(String),
}

impl Supervisor {
    /// A supervisor of children started with `command`, each given `task`.
    pub fn new(command: ChildCommand, task: Task) -> Supervisor {
        Supervisor {
            command,
            task,
            running: None,
            start_timeout: Duration::from_secs(120),
            timeout: Duration::from_secs(30),
            started: 0,
            device: None,
        }
    }

    /// Children started so far.
    pub fn children_started(&self) -> usize {
        self.started
    }

    /// What the last child said about its GPU.
    pub fn device(&self) -> Option<&str> {
        self.device.as_deref()
    }

    fn spawn(&mut self) -> Result<Running, String> {
        let mut cmd = Command::new(&self.command.program);
        cmd.args(&self.command.args)
            .envs(self.command.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().map_err(|e| {
            format!(
                "cannot start {} as the measuring child: {e}",
                self.command.program.display()
            )
        })?;
        self.started += 1;
        let (Some(stdin), Some(stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            let _ = child.kill();
            let _ = child.wait();
            return Err("the measuring child has no pipes".into());
        };
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                // After the mark (a test harness may print `test name ... ` before it).
                let Some(at) = line.find(MARK) else {
                    continue;
                };
                let message = &line[at + MARK.len()..];
                if tx.send(message.to_string()).is_err() {
                    break;
                }
            }
        });
        let tail = Arc::new(Mutex::new(String::new()));
        let keep = Arc::clone(&tail);
        std::thread::spawn(move || {
            let mut stderr = stderr;
            let mut buf = [0u8; 1024];
            while let Ok(n) = stderr.read(&mut buf) {
                if n == 0 {
                    break;
                }
                let Ok(mut t) = keep.lock() else { break };
                t.push_str(&String::from_utf8_lossy(&buf[..n]));
                if t.len() > 2 * STDERR_TAIL {
                    let cut = t.len() - STDERR_TAIL;
                    let cut = (cut..t.len()).find(|&i| t.is_char_boundary(i)).unwrap_or(0);
                    t.drain(..cut);
                }
            }
        });
        Ok(Running {
            child,
            stdin,
            lines,
            stderr: tail,
        })
    }

    /// The next reply of `running` within `timeout`: `Err(None)` on a timeout, `Err(Some(
    /// how it ended))` when it ended.
    fn reply(running: &mut Running, timeout: Duration) -> Result<Reply, Option<()>> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match running.lines.recv_timeout(left) {
                Ok(line) => {
                    if let Ok(reply) = serde_json::from_str::<Reply>(&line) {
                        return Ok(reply);
                    }
                }
                Err(RecvTimeoutError::Timeout) => return Err(None),
                Err(RecvTimeoutError::Disconnected) => return Err(Some(())),
            }
        }
    }

    fn write(running: &mut Running, request: &Request) -> bool {
        let Ok(text) = serde_json::to_string(request) else {
            return false;
        };
        writeln!(running.stdin, "{text}").is_ok() && running.stdin.flush().is_ok()
    }

    /// Starts a child and gives it the task, unless one is running.
    fn ensure_started(&mut self) -> Result<(), ChildOutcome> {
        if self.running.is_some() {
            return Ok(());
        }
        let mut running = self.spawn().map_err(ChildOutcome::Unavailable)?;
        let fail = |running: Running, what: &str| {
            let how = running.end(Duration::from_secs(1));
            ChildOutcome::Unavailable(format!("the measuring child {what}: it {how}"))
        };
        match Self::reply(&mut running, self.start_timeout) {
            Ok(Reply::Hello { protocol, .. }) if protocol == PROTOCOL => {}
            Ok(other) => {
                return Err(fail(
                    running,
                    &format!("did not say hello with protocol {PROTOCOL}: {other:?}"),
                ))
            }
            Err(None) => return Err(fail(running, "did not start in time")),
            Err(Some(())) => return Err(fail(running, "ended at start")),
        }
        if !Self::write(&mut running, &Request::Task(Box::new(self.task.clone()))) {
            return Err(fail(running, "did not take the task"));
        }
        match Self::reply(&mut running, self.start_timeout) {
            Ok(Reply::Ready { device }) => {
                self.device = Some(device);
                self.running = Some(running);
                Ok(())
            }
            Ok(Reply::Unavailable { reason }) => {
                let _ = running.end(Duration::from_secs(1));
                Err(ChildOutcome::Unavailable(reason))
            }
            Ok(other) => Err(fail(running, &format!("answered {other:?} to the task"))),
            Err(None) => Err(fail(running, "did not prepare the task in time")),
            Err(Some(())) => Err(fail(running, "ended while preparing the task")),
        }
    }

    /// Runs one candidate in the child (started if none is running).
    pub fn run(&mut self, candidate: &Candidate) -> ChildOutcome {
        if let Err(outcome) = self.ensure_started() {
            return outcome;
        }
        let request = Request::Candidate(Box::new(candidate.clone()));
        let sent = self
            .running
            .as_mut()
            .is_some_and(|r| Self::write(r, &request));
        if !sent {
            // It died between candidates (it should not): once more with a fresh one.
            self.end(Duration::ZERO);
            if let Err(outcome) = self.ensure_started() {
                return outcome;
            }
            let sent = self
                .running
                .as_mut()
                .is_some_and(|r| Self::write(r, &request));
            if !sent {
                let how = self.end(Duration::ZERO);
                return ChildOutcome::Invalid(format!(
                    "cannot send the candidate to the measuring child: it {how}"
                ));
            }
        }
        let timeout = self.timeout.max(Duration::from_secs_f64(
            (20.0 * candidate.max_seconds).clamp(0.0, 3600.0),
        ));
        let Some(running) = self.running.as_mut() else {
            return ChildOutcome::Invalid("no measuring child".into());
        };
        match Self::reply(running, timeout) {
            Ok(Reply::Measured { id, measured }) if id == candidate.id => {
                ChildOutcome::Measured(measured)
            }
            Ok(Reply::Invalid { id, failure }) if id == candidate.id => {
                if failure.context_lost {
                    let how = self.end(Duration::from_secs(2));
                    ChildOutcome::Invalid(format!(
                        "{} (the CUDA context was lost; the next candidate runs in a fresh \
                         child; this one {how})",
                        failure.reason
                    ))
                } else {
                    ChildOutcome::Invalid(failure.reason)
                }
            }
            Ok(other) => {
                let how = self.end(Duration::ZERO);
                ChildOutcome::Invalid(format!(
                    "the measuring child answered {other:?} to candidate {}; it {how}",
                    candidate.id
                ))
            }
            Err(None) => {
                let how = self.end(Duration::ZERO);
                ChildOutcome::Invalid(format!(
                    "timed out after {:.1} s (the next candidate runs in a fresh child): the \
                     measuring child {how}",
                    timeout.as_secs_f64()
                ))
            }
            Err(Some(())) => {
                let how = self.end(Duration::from_secs(2));
                ChildOutcome::Invalid(format!(
                    "crashed (the next candidate runs in a fresh child): the measuring child {how}"
                ))
            }
        }
    }

    /// Ends the running child, if any; how it ended.
    fn end(&mut self, grace: Duration) -> String {
        match self.running.take() {
            Some(r) => r.end(grace),
            None => "was not running".into(),
        }
    }
}

impl Drop for Supervisor {
    fn drop(&mut self) {
        self.end(Duration::from_millis(500));
    }
}

/// The CUDA measurer's way of running candidates: in a child, or in process where no child
/// can be started.
pub(crate) enum Runner {
    Child(Supervisor),
    InProcess(CudaExecutor, Option<String>),
}

impl Runner {
    /// A child of the current executable when it can serve as one, else in process (with a
    /// warning: a faulting candidate then ends the GPU for this process).
    pub(crate) fn new(task: Task) -> Runner {
        match ChildCommand::current_exe() {
            Ok(command) => Runner::Child(Supervisor::new(command, task)),
            Err(why) => {
                crate::log::warn(format_args!(
                    "GPU candidates are measured in this process: {why}; a faulting \
                     candidate ends the GPU for this process"
                ));
                Runner::in_process(task)
            }
        }
    }

    pub(crate) fn in_process(task: Task) -> Runner {
        let mut executor = CudaExecutor::default();
        let unavailable = executor.prepare(&task).err();
        Runner::InProcess(executor, unavailable)
    }

    pub(crate) fn run(&mut self, candidate: &Candidate) -> ChildOutcome {
        match self {
            Runner::Child(s) => match s.run(candidate) {
                // The GPU works here but not in the child (a GPU in exclusive-process mode
                // while this process holds a context; a child that does not start): measure
                // in process rather than not at all.
                ChildOutcome::Unavailable(reason) if crate::runtime::cuda::available().is_ok() => {
                    crate::log::warn(format_args!(
                        "GPU candidates are measured in this process: the measuring child \
                         cannot run them ({reason}); a faulting candidate ends the GPU for \
                         this process"
                    ));
                    *self = Runner::in_process(s.task.clone());
                    self.run(candidate)
                }
                other => other,
            },
            Runner::InProcess(_, Some(reason)) => ChildOutcome::Unavailable(reason.clone()),
            Runner::InProcess(executor, None) => match executor.run(candidate) {
                Ok(m) => ChildOutcome::Measured(m),
                Err(f) => ChildOutcome::Invalid(f.reason),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn images_travel_as_hex() {
        let cubin = Image::Cubin {
            arch: "sm_90".into(),
            bytes: vec![0x7f, b'E', 0, 255, 16],
        };
        let wire = WireImage::from(&cubin);
        assert_eq!(
            wire,
            WireImage::Cubin {
                arch: "sm_90".into(),
                hex: "7f4500ff10".into()
            }
        );
        assert_eq!(wire.decode().unwrap(), cubin);
        let bad = WireImage::Cubin {
            arch: "sm_90".into(),
            hex: "7g".into(),
        };
        assert!(bad.decode().is_err());
        let odd = WireImage::Cubin {
            arch: "sm_90".into(),
            hex: "7".into(),
        };
        assert!(odd.decode().is_err());
    }

    /// An executor that answers from the candidate's entry name.
    struct Scripted;

    impl Executor for Scripted {
        fn prepare(&mut self, task: &Task) -> Result<String, String> {
            if task.seed == 0 {
                Err("no GPU in this script".into())
            } else {
                Ok("scripted GPU".into())
            }
        }
        fn run(&mut self, c: &Candidate) -> Result<Measured, Failure> {
            match c.entry.as_str() {
                "fault" => Err(Failure {
                    reason: "CUDA_ERROR_ILLEGAL_ADDRESS".into(),
                    context_lost: true,
                }),
                "wrong" => Err(Failure::new("wrong result: element 0")),
                _ => Ok(Measured {
                    samples: vec![1e-6, 2e-6],
                    launches: 100,
                    method: "graph".into(),
                    note: None,
                }),
            }
        }
    }

    fn task(seed: u64) -> Task {
        Task {
            kernel: crate::ir::parse_text("k", "o[[i]] = a[[i]]", None).unwrap(),
            shapes: vec![vec![4], vec![4]],
            seed,
            expected: PathBuf::from("/nonexistent"),
            tolerance: 1e-3,
            reference_source: "a test".into(),
        }
    }

    fn candidate(id: u64, entry: &str) -> Candidate {
        Candidate {
            id,
            source: String::new(),
            entry: entry.into(),
            grid: [1, 1, 1],
            block: [32, 1, 1],
            shared_bytes: 0,
            tensor_maps: Vec::new(),
            image: WireImage::Ptx {
                arch: "compute_90".into(),
                text: String::new(),
                reason: String::new(),
            },
            schedule: String::new(),
            warmup: 1,
            repeats: 2,
            max_seconds: 1.0,
        }
    }

    fn lines(requests: &[Request]) -> String {
        requests
            .iter()
            .map(|r| serde_json::to_string(r).unwrap() + "\n")
            .collect::<String>()
            + "not json\n"
    }

    fn replies(out: &[u8]) -> Vec<Reply> {
        String::from_utf8_lossy(out)
            .lines()
            .map(|l| serde_json::from_str(l.strip_prefix(MARK).unwrap()).unwrap())
            .collect()
    }

    #[test]
    fn the_child_answers_each_candidate_and_stops_after_a_lost_context() {
        let input = lines(&[
            Request::Task(Box::new(task(1))),
            Request::Candidate(Box::new(candidate(1, "ok"))),
            Request::Candidate(Box::new(candidate(2, "wrong"))),
            Request::Candidate(Box::new(candidate(3, "fault"))),
            Request::Candidate(Box::new(candidate(4, "ok"))),
        ]);
        let mut out = Vec::new();
        let code = serve(&mut Scripted, &mut input.as_bytes(), &mut out);
        assert_eq!(code, 3, "a lost context ends the child");
        let r = replies(&out);
        assert!(matches!(
            r[0],
            Reply::Hello {
                protocol: PROTOCOL,
                ..
            }
        ));
        assert_eq!(
            r[1],
            Reply::Ready {
                device: "scripted GPU".into()
            }
        );
        assert!(matches!(&r[2], Reply::Measured { id: 1, measured } if measured.launches == 100));
        assert!(matches!(&r[3], Reply::Invalid { id: 2, failure } if !failure.context_lost));
        assert!(matches!(&r[4], Reply::Invalid { id: 3, failure } if failure.context_lost));
        assert_eq!(r.len(), 5, "nothing after the lost context");
    }

    #[test]
    fn a_task_that_cannot_run_is_unavailable_and_a_candidate_needs_a_task() {
        let input = lines(&[
            Request::Candidate(Box::new(candidate(7, "ok"))),
            Request::Task(Box::new(task(0))),
        ]);
        let mut out = Vec::new();
        assert_eq!(serve(&mut Scripted, &mut input.as_bytes(), &mut out), 0);
        let r = replies(&out);
        assert!(matches!(&r[1], Reply::Invalid { id: 7, .. }));
        assert_eq!(
            r[2],
            Reply::Unavailable {
                reason: "no GPU in this script".into()
            }
        );
    }
}
