//! ONNX Runtime on the CPU, the inference engine a user would run these kernels in, as a
//! baseline for every suite: `MatMul` (the right operand a constant, as a layer's weights
//! are, so ORT may prepack it), `Einsum` for batched matmuls in their own layouts, `Conv`
//! (NCHW, weights constant), and the graphs of the `stages` suite.
//!
//! It runs in a Python helper (`bench/ort/ort_helper.py`) started once per workload: it
//! builds the ONNX graph, an ORT session with as many intra-op threads as this machine has
//! cores, binds the inputs (the very arrays we run on, written to files) and a preallocated
//! output once, and then times its calls itself
//! ([`crate::baselines::Baseline::time_calls`]), in the same alternating rounds as ours.
//! Its output is checked against ours before timing. Without Python or the `onnxruntime`
//! package the column is skipped with the reason. `BENCH_PYTHON` picks the interpreter
//! (default `python3`).

use crate::workloads::Op;
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

/// The column's name (the version is added once the helper answers) and the helper's
/// description of the graph of `op`.
pub fn graph(op: &Op) -> (String, Value) {
    match op {
        Op::Matmul { .. } => (
            "ONNX Runtime MatMul (CPU)".into(),
            json!({"op": "matmul", "constant": [1]}),
        ),
        // No graph: `crate::baselines` gives this op no ONNX Runtime column.
        Op::GemmBiasRelu { .. } => (
            "ONNX Runtime (no fused GEMM epilogue graph)".into(),
            json!({"op": "gemm_bias_relu"}),
        ),
        Op::BatchMatmul { lhs, rhs, out, .. } => (
            "ONNX Runtime Einsum (CPU)".into(),
            json!({"op": "einsum", "equation": format!("{lhs},{rhs}->{out}")}),
        ),
        Op::Conv2d(cv) => (
            "ONNX Runtime Conv (CPU)".into(),
            json!({"op": "conv", "kernel": [cv.r, cv.s], "stride": cv.stride, "pad": cv.pad,
                   "constant": [1]}),
        ),
        Op::Stage(stage) => (crate::stages::ort_name(stage), stage.onnx()),
    }
}

/// The helper script, next to this crate.
fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("ort/ort_helper.py")
}

/// ONNX Runtime, in the Python helper.
pub struct Ort {
    name: String,
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    dir: PathBuf,
    out_path: PathBuf,
}

impl Ort {
    /// Starts the helper and loads the graph of `op` ([`graph`]) with `inputs` (the
    /// kernel's tensors by parameter, the output's slot ignored); an error (the column is
    /// skipped) when Python, `onnxruntime` or the graph is not available.
    pub fn for_op(op: &Op, inputs: &[&[f32]]) -> Result<Ort, String> {
        let (name, mut spec) = graph(op);
        use std::sync::atomic::{AtomicUsize, Ordering};
        static SEQ: AtomicUsize = AtomicUsize::new(0);
        let python = std::env::var("BENCH_PYTHON").unwrap_or_else(|_| "python3".into());
        let dir = std::env::temp_dir().join(format!(
            "bench-ort-{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let (_, tensors) = crate::workloads::kernel_text(op);
        let mut specs = Vec::new();
        for (n, ((_, shape, _), data)) in tensors
            .iter()
            .zip(inputs)
            .enumerate()
            .filter(|(_, ((_, _, is_output), _))| !is_output)
        {
            let path = dir.join(format!("in{n}.bin"));
            let bytes: Vec<u8> = data.iter().flat_map(|v| v.to_le_bytes()).collect();
            std::fs::write(&path, bytes).map_err(|e| format!("{}: {e}", path.display()))?;
            specs.push(json!([path, shape]));
        }
        let out_shape = tensors
            .iter()
            .find(|t| t.2)
            .map(|t| t.1.clone())
            .unwrap_or_default();
        let out_path = dir.join("out.bin");
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
        spec["inputs"] = Value::Array(specs);
        spec["output"] = json!([out_path, out_shape]);
        spec["threads"] = json!(threads);
        let mut child = Command::new(&python)
            .arg(script())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| {
                format!(
                    "cannot start `{python}` ({e}); install Python 3 and `pip install onnxruntime onnx numpy`, or point BENCH_PYTHON at such a Python"
                )
            })?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            return Err("the helper has no pipes".into());
        };
        let mut ort = Ort {
            name,
            child,
            stdin,
            stdout: BufReader::new(stdout),
            dir,
            out_path,
        };
        let hello = ort.answer()?;
        if hello != "ready" {
            return Err(hello);
        }
        let version = ort.ask(&format!("load {spec}"))?;
        ort.name = format!("{} {version}, {threads} threads", ort.name);
        Ok(ort)
    }

    fn answer(&mut self) -> Result<String, String> {
        let mut line = String::new();
        self.stdout
            .read_line(&mut line)
            .map_err(|e| format!("reading from the ONNX Runtime helper: {e}"))?;
        if line.is_empty() {
            return Err("the ONNX Runtime helper exited".into());
        }
        Ok(line.trim().to_string())
    }

    /// Sends one command; the text after `ok`, or the helper's error.
    fn ask(&mut self, command: &str) -> Result<String, String> {
        writeln!(self.stdin, "{command}")
            .and_then(|()| self.stdin.flush())
            .map_err(|e| format!("writing to the ONNX Runtime helper: {e}"))?;
        let a = self.answer()?;
        match a.strip_prefix("ok") {
            Some(rest) => Ok(rest.trim().to_string()),
            None => Err(a.strip_prefix("err ").unwrap_or(&a).to_string()),
        }
    }
}

impl crate::baselines::Baseline for Ort {
    fn name(&self) -> String {
        self.name.clone()
    }

    /// One call in the helper (the output stays there until [`fetch`](crate::baselines::Baseline::fetch)).
    fn run(&mut self, _inputs: &[&[f32]], _out: &mut [f32]) -> Result<(), String> {
        self.ask("run").map(|_| ())
    }

    fn fetch(&mut self, out: &mut [f32]) -> Result<(), String> {
        let bytes = std::fs::read(&self.out_path).map_err(|e| e.to_string())?;
        if bytes.len() != out.len() * 4 {
            return Err(format!(
                "ONNX Runtime wrote {} bytes, expected {}",
                bytes.len(),
                out.len() * 4
            ));
        }
        for (o, b) in out.iter_mut().zip(bytes.chunks_exact(4)) {
            *o = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        }
        Ok(())
    }

    fn settle(&self) -> f64 {
        // ONNX Runtime's intra-op workers spin after a call (`allow_spinning`, its default,
        // kept: it is ORT's fastest setting); the next contender must not compete with them.
        // `time_calls` waits until the helper is idle; this pause is the floor.
        crate::openblas::SETTLE_SECONDS
    }

    fn time_calls(&mut self, calls: usize) -> Option<Result<f64, String>> {
        let answer = self.ask(&format!("time {calls}")).and_then(|t| {
            t.parse::<f64>()
                .map_err(|e| format!("the helper's time `{t}`: {e}"))
        });
        wait_idle(self.child.id(), QUIET_LIMIT_SECONDS);
        Some(answer)
    }
}

impl Drop for Ort {
    fn drop(&mut self) {
        let _ = writeln!(self.stdin, "quit").and_then(|()| self.stdin.flush());
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The longest [`wait_idle`] waits.
const QUIET_LIMIT_SECONDS: f64 = 3.0;

/// Waits (up to `limit` seconds) until process `pid` uses no CPU time over two polls 30 ms
/// apart (Linux `/proc/<pid>/stat`; elsewhere, or if it cannot be read, returns at once).
/// Measured on the development VM: after a round of 2-thread ONNX Runtime calls its helper
/// went on using CPU for 0.25 s and more, and our kernel timed right after it then ran at
/// a tenth of its speed in whole rounds (a core shared with a spinning thread); a fixed
/// one-second pause removed that, this wait removes it without waiting longer than needed.
fn wait_idle(pid: u32, limit: f64) {
    let cpu = || -> Option<u64> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // Fields after the command name (which may hold spaces) start after the last ')'.
        let rest = &stat[stat.rfind(')')? + 2..];
        let f: Vec<&str> = rest.split_whitespace().collect();
        // utime and stime are fields 14 and 15 of the line, 12 and 13 after the name.
        Some(f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?)
    };
    let start = std::time::Instant::now();
    let Some(mut last) = cpu() else {
        return;
    };
    let mut quiet = 0;
    while quiet < 2 && start.elapsed().as_secs_f64() < limit {
        std::thread::sleep(std::time::Duration::from_millis(30));
        let Some(now) = cpu() else {
            return;
        };
        quiet = if now == last { quiet + 1 } else { 0 };
        last = now;
    }
}
