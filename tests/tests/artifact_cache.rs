//! Compiled CPU objects are cached on disk beside the records: a second process running the
//! same kernel at the same shape does not invoke the compiler for it.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::PathBuf;
use tensor_dsl::{tensor_kernel, Device, Options, Tensor};

#[tensor_kernel]
fn axpby(x: &Tensor<f32>, y: &Tensor<f32>, z: &mut Tensor<f32>) {
    z[[i]] = x[[i]] * 3.25 + y[[i]] * -0.5;
}

/// Run as a child: one call, with the environment the parent set.
#[test]
fn child_call() {
    if std::env::var("TD_ARTIFACT_CHILD").is_err() {
        return;
    }
    let x = Tensor::from_vec(vec![37], vec![2.0f32; 37]).unwrap();
    let y = Tensor::from_vec(vec![37], vec![4.0f32; 37]).unwrap();
    let mut z = Tensor::zeros(&[37]);
    axpby::with(&Options::new().device(Device::Cpu))(&x, &y, &mut z).unwrap();
    assert!(z.as_slice().iter().all(|&v| v == 4.5));
}

#[test]
fn a_second_process_pays_no_compile() {
    let dir = std::env::temp_dir().join(format!("tensor-dsl-artifacts-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join("cc.log");
    let wrapper: PathBuf = dir.join("cc-logging");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\necho \"$@\" >> '{}'\nexec cc \"$@\"\n",
            log.display()
        ),
    )
    .unwrap();
    std::process::Command::new("chmod")
        .arg("+x")
        .arg(&wrapper)
        .status()
        .unwrap();
    let run = || {
        let status = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "child_call", "--test-threads", "1"])
            .env("TD_ARTIFACT_CHILD", "1")
            .env("TENSOR_DSL_CACHE", dir.join("cache"))
            .env("CC", &wrapper)
            .env_remove("TENSOR_DSL_NO_DISK_CACHE")
            .stdout(std::process::Stdio::null())
            .status()
            .unwrap();
        assert!(status.success());
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        // Kernel compiles (not the compiler probe, not `--version`).
        text.lines()
            .filter(|l| l.contains("-shared") && !l.contains("probe.c"))
            .count()
    };
    assert_eq!(run(), 1, "the first process compiles the kernel");
    assert_eq!(run(), 1, "the second process loads it from the disk cache");
    let objects = std::fs::read_dir(dir.join("cache/objects"))
        .unwrap()
        .count();
    assert_eq!(objects, 1);
    let _ = std::fs::remove_dir_all(&dir);
}
