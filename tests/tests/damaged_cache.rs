//! A damaged user cache never crashes a program: every compiled object and the records file
//! are cut in half, overwritten with random bytes, given a foreign version, or swapped with
//! another kernel's object, and a fresh process still computes the right answer and exits 0
//! (a truncated shared object used to be `dlopen`ed: `SIGBUS`, exit 135).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use tensor_dsl::{tensor_kernel, Device, Options, Tensor};

#[tensor_kernel]
fn scale_add(x: &Tensor<f32>, y: &Tensor<f32>, z: &mut Tensor<f32>) {
    z[[i]] = x[[i]] * 2.0 + y[[i]];
}

#[tensor_kernel]
fn mm(a: &Tensor<f32>, b: &Tensor<f32>, c: &mut Tensor<f32>) {
    c[[i, j]] += a[[i, k]] * b[[k, j]];
}

/// Run as a child: both kernels, checked, with the environment the parent set.
#[test]
fn child_calls() {
    if std::env::var("TD_DAMAGE_CHILD").is_err() {
        return;
    }
    let opts = Options::new().device(Device::Cpu);
    let x = Tensor::from_vec(vec![53], (0..53).map(|v| v as f32).collect()).unwrap();
    let y = Tensor::from_vec(vec![53], vec![1.0f32; 53]).unwrap();
    let mut z = Tensor::zeros(&[53]);
    scale_add::with(&opts)(&x, &y, &mut z).unwrap();
    for (n, v) in z.as_slice().iter().enumerate() {
        assert_eq!(*v, 2.0 * n as f32 + 1.0);
    }
    let a = Tensor::from_vec(vec![7, 5], vec![1.0f32; 35]).unwrap();
    let b = Tensor::from_vec(vec![5, 3], vec![2.0f32; 15]).unwrap();
    let mut c = Tensor::zeros(&[7, 3]);
    mm::with(&opts)(&a, &b, &mut c).unwrap();
    assert!(c.as_slice().iter().all(|&v| v == 10.0));
}

fn run_child(cache: &Path) -> std::process::Output {
    run_child_tuning(cache, "off")
}

fn run_child_tuning(cache: &Path, tune: &str) -> std::process::Output {
    std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "child_calls",
            "--test-threads",
            "1",
            "--nocapture",
        ])
        .env("TD_DAMAGE_CHILD", "1")
        .env("TENSOR_DSL_CACHE", cache)
        .env("TENSOR_DSL_DEVICE", "cpu")
        .env_remove("TENSOR_DSL_NO_DISK_CACHE")
        .env("TENSOR_DSL_TUNE", tune)
        .env("TENSOR_DSL_TRIALS", "3")
        .env("TENSOR_DSL_STRATEGY", "random")
        .output()
        .unwrap()
}

fn objects(cache: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(cache.join("objects"))
        .map(|d| d.map(|e| e.unwrap().path()).collect())
        .unwrap_or_default();
    v.sort();
    v
}

/// Pseudo-random bytes (no `rand` state needed across runs).
fn noise(n: usize, seed: u64) -> Vec<u8> {
    let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s as u8
        })
        .collect()
}

#[test]
fn every_kind_of_damage_is_survived_and_repaired() {
    let dir = std::env::temp_dir().join(format!("tensor-dsl-damage-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let cache = dir.join("cache");
    let first = run_child(&cache);
    assert!(first.status.success(), "{first:?}");
    let objs = objects(&cache);
    assert_eq!(objs.len(), 2, "one object per kernel: {objs:?}");
    let originals: Vec<Vec<u8>> = objs.iter().map(|p| std::fs::read(p).unwrap()).collect();

    type Damage = fn(&[u8], &[u8]) -> Vec<u8>;
    let damages: [(&str, Damage); 4] = [
        ("cut in half", |own, _| own[..own.len() / 2].to_vec()),
        ("random bytes", |own, _| noise(own.len(), 7)),
        ("another kernel's object", |_, other| other.to_vec()),
        ("empty", |_, _| Vec::new()),
    ];
    for (what, damage) in damages {
        // Restore the cache, then damage every object.
        for (p, bytes) in objs.iter().zip(&originals) {
            std::fs::write(
                p,
                damage(
                    bytes,
                    &originals[(objs.iter().position(|q| q == p).unwrap() + 1) % 2],
                ),
            )
            .unwrap();
        }
        // And the records file, for good measure.
        std::fs::write(cache.join("records.jsonl"), noise(300, 3)).unwrap();
        let out = run_child(&cache);
        assert!(
            out.status.success(),
            "{what}: the program must run: {:?}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("does not match its content hash"),
            "{what}: the damage is reported: {stderr}"
        );
        // The damaged objects were replaced by good ones.
        let now: Vec<Vec<u8>> = objects(&cache)
            .iter()
            .map(|p| std::fs::read(p).unwrap())
            .collect();
        assert_eq!(now.len(), 2, "{what}");
        for bytes in &now {
            assert!(
                originals.contains(bytes),
                "{what}: recompiled objects are the same code"
            );
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

fn all_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            all_files(&p, out);
        } else {
            out.push(p);
        }
    }
}

/// A cache populated by first-call tuning (records, objects, lock files), then every file
/// in it damaged in turn by each kind of damage: the next process, tuning again, runs
/// correctly and exits 0.
#[test]
fn a_tuned_cache_damaged_everywhere_is_survived() {
    let dir = std::env::temp_dir().join(format!("tensor-dsl-damage-all-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let cache = dir.join("cache");
    let first = run_child_tuning(&cache, "first-call");
    assert!(first.status.success(), "{first:?}");
    for round in 0..4 {
        let mut paths = Vec::new();
        all_files(&cache, &mut paths);
        assert!(paths.len() >= 3, "{paths:?}");
        let objs = objects(&cache);
        for (n, p) in paths.iter().enumerate() {
            let bytes = std::fs::read(p).unwrap();
            let damaged = match (round + n) % 4 {
                0 => bytes[..bytes.len() / 2].to_vec(),
                1 => noise(bytes.len().max(16), n as u64),
                2 => String::from_utf8_lossy(&bytes)
                    .replace("\"version\":1", "\"version\":77")
                    .replace("\"codegen\":", "\"codegen\":9")
                    .into_bytes(),
                _ => objs
                    .iter()
                    .find(|o| *o != p)
                    .map(|o| std::fs::read(o).unwrap())
                    .unwrap_or_default(),
            };
            std::fs::write(p, damaged).unwrap();
        }
        let out = run_child_tuning(&cache, "first-call");
        assert!(
            out.status.success(),
            "round {round}: {:?}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
