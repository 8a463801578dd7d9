//! First-call tuning happens once per key: eight processes making the first call of one new
//! shape together all succeed, and the records hold one tuning's trials, not eight. And
//! `TENSOR_DSL_TUNE=background` answers the first call with the default at once, then
//! switches to the tuned schedule.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;
use std::time::{Duration, Instant};
use tensor_dsl::dispatch::cpu_decision;
use tensor_dsl::ir::bind;
use tensor_dsl::records::read;
use tensor_dsl::tuned::Source;
use tensor_dsl::{tensor_kernel, Device, Options, Tensor};

#[tensor_kernel]
fn mm(a: &Tensor<f32>, b: &Tensor<f32>, c: &mut Tensor<f32>) {
    c[[i, j]] += a[[i, k]] * b[[k, j]];
}

const TRIALS: usize = 5;

fn call(m: usize, k: usize, n: usize) -> Tensor<f32> {
    let a = Tensor::from_vec(vec![m, k], vec![1.0f32; m * k]).unwrap();
    let b = Tensor::from_vec(vec![k, n], vec![0.5f32; k * n]).unwrap();
    let mut c = Tensor::zeros(&[m, n]);
    mm::with(&Options::new().device(Device::Cpu))(&a, &b, &mut c).unwrap();
    assert!(c.as_slice().iter().all(|&v| v == 0.5 * k as f32));
    c
}

/// Run as a child: the first call of a new shape, tuned as the parent's environment says.
#[test]
fn child_first_call() {
    if std::env::var("TD_TUNE_ONCE_CHILD").is_err() {
        return;
    }
    call(24, 40, 36);
}

/// Run as a child: a background-tuned first call, then later calls switch to the result.
#[test]
fn child_background() {
    if std::env::var("TD_TUNE_BACKGROUND_CHILD").is_err() {
        return;
    }
    let (m, k, n) = (20, 44, 28);
    let start = Instant::now();
    call(m, k, n);
    let kernel = mm::kernel();
    let shapes: [&[usize]; 3] = [&[m, k], &[k, n], &[m, n]];
    let extents = bind(kernel, &shapes).unwrap();
    let a = vec![1.0f32; m * k];
    let b = vec![0.5f32; k * n];
    let mut c = vec![0.0f32; m * n];
    let data = [(&a[..]).into(), (&b[..]).into(), Default::default()];
    let first = cpu_decision(kernel, &extents, &shapes, &data, (&mut c[..]).into()).unwrap();
    assert_eq!(
        first.source,
        Source::Default,
        "the first call does not wait"
    );
    loop {
        let d = cpu_decision(kernel, &extents, &shapes, &data, (&mut c[..]).into()).unwrap();
        if d.source == Source::Tuned {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(240),
            "background tuning never finished"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    call(m, k, n);
}

fn child(test: &str, flag: &str, cache: &Path, policy: &str) -> std::process::Command {
    let mut cmd = std::process::Command::new(std::env::current_exe().unwrap());
    cmd.args(["--exact", test, "--test-threads", "1", "--nocapture"])
        .env(flag, "1")
        .env("TENSOR_DSL_CACHE", cache)
        .env("TENSOR_DSL_TUNE", policy)
        .env("TENSOR_DSL_TRIALS", TRIALS.to_string())
        .env("TENSOR_DSL_TUNE_SECONDS", "200")
        .env("TENSOR_DSL_STRATEGY", "random")
        .env_remove("TENSOR_DSL_DEVICE")
        .env_remove("TENSOR_DSL_LOG")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
    cmd
}

#[test]
fn eight_processes_tune_one_new_shape_once() {
    let dir = std::env::temp_dir().join(format!("tensor-dsl-tune-once-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let cache = dir.join("cache");
    let children: Vec<_> = (0..8)
        .map(|_| {
            child(
                "child_first_call",
                "TD_TUNE_ONCE_CHILD",
                &cache,
                "first-call",
            )
            .spawn()
            .unwrap()
        })
        .collect();
    for c in children {
        let out = c.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "{:?}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let (records, skipped) = read(&cache.join("records.jsonl")).unwrap();
    assert_eq!(skipped, 0);
    assert!(
        !records.is_empty() && records.len() <= TRIALS,
        "one tuning's trials ({TRIALS} at most), not one per process: {}",
        records.len()
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn background_tuning_does_not_block_and_switches_later_calls() {
    let dir = std::env::temp_dir().join(format!("tensor-dsl-tune-bg-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let cache = dir.join("cache");
    let out = child(
        "child_background",
        "TD_TUNE_BACKGROUND_CHILD",
        &cache,
        "background",
    )
    .output()
    .unwrap();
    assert!(
        out.status.success(),
        "{:?}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let (records, _) = read(&cache.join("records.jsonl")).unwrap();
    assert!(
        !records.is_empty() && records.len() <= TRIALS,
        "{}",
        records.len()
    );
    let _ = std::fs::remove_dir_all(&dir);
}
