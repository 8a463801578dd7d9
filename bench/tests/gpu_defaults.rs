//! Every benchmark workload's default GPU schedule — what a GPU call runs when nothing is
//! tuned, and the first point of every GPU search — compiles with the real NVRTC for an
//! H100 (`compute_90`), assembles with `ptxas -arch=sm_90`, and can launch: its block's
//! registers fit the register file (a block of T threads using R registers each needs
//! R·T ≤ 65536) and its shared memory fits the default limit. Checked without a GPU, so a
//! GPU session does not discover it. With `nvdisasm` at hand (CI), the SASS is profiled
//! too: no default spills, and every SIMT GEMM default (the matmuls, batched matmuls and
//! convolutions of the suites) spends at least 0.85 of its hot loop on FFMA.
//!
//! Without NVRTC or ptxas the test prints why and passes, unless
//! `TENSOR_DSL_REQUIRE_NVRTC=1` (CI) or `TENSOR_DSL_REQUIRE_GPU=1` (a GPU session).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::PathBuf;
use std::process::Command;
use tensor_dsl::codegen::cuda;
use tensor_dsl::runtime::{nvrtc, ptxas, sass};
use tensor_dsl::template::gpu::{GpuTarget, GpuTemplate};

/// A tensor: name, shape, whether it is the output.
type TensorDecl = (String, Vec<usize>, bool);

/// The bench's workloads as kernels (name, kernel text, tensors), through the binary
/// (`--list-kernels` prints them).
fn workloads() -> Vec<(String, String, Vec<TensorDecl>)> {
    // `$TENSOR_DSL_BENCH_EXE`: a GPU machine runs this test binary away from the build folder.
    let exe = std::env::var_os("TENSOR_DSL_BENCH_EXE")
        .unwrap_or_else(|| env!("CARGO_BIN_EXE_bench").into());
    let out = Command::new(exe)
        .args(["--suite", "all", "--list-kernels"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    v.as_array()
        .unwrap()
        .iter()
        .map(|w| {
            let tensors = w["tensors"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| {
                    (
                        t["name"].as_str().unwrap().to_string(),
                        t["shape"]
                            .as_array()
                            .unwrap()
                            .iter()
                            .map(|d| d.as_u64().unwrap() as usize)
                            .collect(),
                        t["output"].as_bool().unwrap(),
                    )
                })
                .collect();
            (
                w["name"].as_str().unwrap().to_string(),
                w["kernel"].as_str().unwrap().to_string(),
                tensors,
            )
        })
        .collect()
}

fn unavailable() -> Option<&'static str> {
    if !nvrtc::available() {
        return Some("NVRTC (libnvrtc.so.13) is not on the library path");
    }
    if ptxas::find().is_none() {
        return Some("ptxas is not on PATH (or TENSOR_DSL_PTXAS)");
    }
    None
}

#[test]
fn every_workload_default_gpu_schedule_compiles_and_fits() {
    if !tensor_dsl::testing::runs(
        "every_workload_default_gpu_schedule_compiles_and_fits",
        tensor_dsl::testing::Need::Compilers,
        unavailable(),
    ) {
        return;
    }
    let target = GpuTarget::h100();
    let profile = sass::find_nvdisasm().is_some();
    if !profile {
        if std::env::var("TENSOR_DSL_REQUIRE_NVRTC").is_ok_and(|v| v == "1") {
            panic!(
                "TENSOR_DSL_REQUIRE_NVRTC=1 but nvdisasm is not on PATH (or TENSOR_DSL_NVDISASM)"
            );
        }
        println!("nvdisasm not found: the SASS is not profiled");
    }
    let list = workloads();
    // BERT 6, OpEvo 3 + 3 + 2, ResNet-50 13, YOLO-9000 11.
    assert!(list.len() >= 38, "{} workloads", list.len());
    let mut report = Vec::new();
    let mut failures = Vec::new();
    for (name, text, tensors) in &list {
        let decl: Vec<(String, bool)> = tensors.iter().map(|(n, _, o)| (n.clone(), *o)).collect();
        let kernel = tensor_dsl::ir::parse_text(name, text, Some(&decl)).unwrap();
        let shapes: Vec<Vec<usize>> = tensors.iter().map(|(_, s, _)| s.clone()).collect();
        let p = tensor_dsl::ir::Problem::new(kernel, shapes).unwrap();
        let template = GpuTemplate::new(&p.kernel, &p.extents, &target).unwrap();
        let schedule = template.default_schedule();
        let generated = cuda::generate(&p.kernel, &p.extents, &p.shape_refs(), &schedule);
        let threads: u32 = generated.block.iter().product();
        let result = nvrtc::compile_ptx(name, &generated.source, &target.virtual_arch())
            .map_err(|e| e.to_string())
            .and_then(|ptx| {
                if profile {
                    sass::profile_ptx(&ptx, &target, threads as usize)
                        .map(|p| (p.ptxas.clone(), Some(p)))
                } else {
                    ptxas::assemble(&ptx, &target.real_arch()).map(|r| (r, None))
                }
            });
        let (r, prof) = match result {
            Ok(r) => r,
            Err(e) => {
                failures.push(format!("{name}: {e}"));
                continue;
            }
        };
        let share = prof.as_ref().map(sass::SassProfile::ffma_share);
        if let Some(p) = &prof {
            if p.spills() > 0 || p.ptxas.stack_bytes > 0 {
                failures.push(format!("{name} spills ({:?})", p.ptxas));
            }
            if schedule.simt.is_some() && p.ffma_share() < 0.85 {
                failures.push(format!(
                    "{name}: the SIMT GEMM default's hot loop is {:.3} FFMA (< 0.85)",
                    p.ffma_share()
                ));
            }
        }
        let regs = u64::from(r.registers) * u64::from(threads.div_ceil(32) * 32);
        if regs > u64::from(target.regs_per_sm) {
            failures.push(format!(
                "{name}: {} registers × {threads} threads do not fit the register file",
                r.registers
            ));
        }
        // Static (ptxas) plus dynamic (launch) shared memory.
        let shared = r.shared_bytes + generated.shared_bytes;
        if shared > target.max_shared_per_block {
            failures.push(format!("{name}: {shared} B of shared memory"));
        }
        report.push(serde_json::json!({
            "name": name, "threads": threads, "grid": generated.grid, "registers": r.registers,
            "spill_stores": r.spill_stores, "shared_bytes": shared, "ffma_share": share,
        }));
    }
    // The report goes where the GPU recipe collects artifacts, else beside the build (which
    // a test binary carried to another machine does not have).
    let dir = std::env::var_os("TENSOR_DSL_TEST_ARTIFACTS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_TARGET_TMPDIR")));
    let path = dir.join("gpu-defaults.json");
    let written = std::fs::create_dir_all(&dir)
        .and_then(|()| std::fs::write(&path, serde_json::to_string_pretty(&report).unwrap()));
    match written {
        Ok(()) => println!(
            "{} workloads; ptxas report in {}",
            list.len(),
            path.display()
        ),
        Err(e) => println!(
            "{} workloads; the ptxas report could not be written to {}: {e}",
            list.len(),
            path.display()
        ),
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
