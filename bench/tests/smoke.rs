//! Runs the `bench` binary on the hidden `smoke` suite (a 64³ matmul, a strided padded
//! convolution, a transposed batched matmul) with a tiny budget, and checks the report.

#![allow(clippy::unwrap_used)]

use serde_json::Value;
use std::path::PathBuf;
use std::process::Command;

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("bench-smoke-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The bench binary: `$TENSOR_DSL_BENCH_EXE` (a GPU machine runs this test binary away from
/// the build folder, see bench/gpu/), else the one cargo built.
fn bench() -> Command {
    Command::new(
        std::env::var_os("TENSOR_DSL_BENCH_EXE")
            .unwrap_or_else(|| env!("CARGO_BIN_EXE_bench").into()),
    )
}

fn has_cc() -> bool {
    Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()))
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

#[test]
fn smoke_suite_reports_every_field() {
    if !has_cc() {
        eprintln!("skipped: no C compiler for the CPU backend");
        return;
    }
    let dir = scratch("full");
    let (json, svg, land) = (dir.join("r.json"), dir.join("r.svg"), dir.join("land"));
    let out = bench()
        .args([
            "--suite", "smoke", "--device", "cpu", "--trials", "2", "--batch", "2",
        ])
        .args(["--strategy", "random", "--seed", "3", "--rounds", "3"])
        .args(["--round-seconds", "0.002"])
        .arg("--json")
        .arg(&json)
        .arg("--plot")
        .arg(&svg)
        .arg("--record-landscape")
        .arg(&land)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "bench failed:\n{stderr}");
    let report: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert!(report["machine"]["cpu"].is_string());
    let results = report["results"].as_array().unwrap();
    let names: Vec<&str> = results
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["mm64", "conv_s2p1", "bmm_t"]);
    for r in results {
        assert_eq!(r["status"], "ok", "{r}");
        for key in [
            "name",
            "shape",
            "flops",
            "ours_gflops",
            "baseline",
            "baseline_gflops",
            "ratio",
            "trials",
            "valid_trials",
            "tune_seconds",
            "strategy",
            "device",
            "date",
            "best_config",
            "history",
        ] {
            assert!(!r[key].is_null(), "{key} missing in {r}");
        }
        let ratio = r["ratio"].as_f64().unwrap();
        assert!(ratio.is_finite() && ratio > 0.0, "{r}");
        let (ours, base) = (
            r["ours_gflops"].as_f64().unwrap(),
            r["baseline_gflops"].as_f64().unwrap(),
        );
        assert!((ours / base - ratio).abs() <= 1e-9 * ratio, "{r}");
        assert_eq!(r["trials"], 2);
        assert_eq!(r["strategy"], "random");
        assert_eq!(r["device"], "cpu");
        assert_eq!(r["history"].as_array().unwrap().len(), 2);
        assert_eq!(r["ours_rounds"].as_array().unwrap().len(), 3);
        // Every baseline column: matrixmultiply first, then each library timed (and checked
        // against our output) or skipped with a reason; the best one and our ratio to it.
        let cols = r["baselines"].as_array().unwrap();
        assert_eq!(cols[0]["library"], "matrixmultiply", "{r}");
        assert!(cols.len() >= 3, "{r}");
        for c in cols {
            let timed = c["gflops"].as_f64().is_some();
            assert_eq!(timed, c["skipped"].is_null(), "{c}");
            if timed && c["library"] != "matrixmultiply" {
                assert!(c["max_rel_err"].as_f64().unwrap() <= 1e-3, "{c}");
                assert_eq!(c["rounds"].as_array().unwrap().len(), 3, "{c}");
            }
        }
        let best = r["best_baseline_gflops"].as_f64().unwrap();
        let fastest = cols
            .iter()
            .filter_map(|c| c["gflops"].as_f64())
            .fold(0.0, f64::max);
        assert_eq!(best, fastest, "{r}");
        assert!((ours / best - r["ratio_best"].as_f64().unwrap()).abs() <= 1e-9 * ours / best);
        if let Some(peak) = report["machine"]["peak"]["gflops"].as_f64() {
            let share = r["ours_share_of_peak"].as_f64().unwrap();
            assert!((share - ours / peak).abs() <= 1e-9 * share, "{r}");
        }
        // Every measured point is in the landscape, in the records format.
        let file = land.join(format!("smoke_{}.jsonl", r["name"].as_str().unwrap()));
        let (records, skipped) = tensor_dsl::records::read(&file).unwrap();
        assert_eq!((records.len(), skipped), (2, 0), "{}", file.display());
        assert!(records.iter().all(|x| x.strategy == "random"));
    }
    let svg = std::fs::read_to_string(&svg).unwrap();
    assert!(svg.starts_with("<svg") && svg.contains("bmm_t"));
    let _ = std::fs::remove_dir_all(&dir);
}

/// Without OpenBLAS, oneDNN and ONNX Runtime the library columns are skipped with a reason, one line each
/// on stderr, and the run still succeeds.
#[test]
fn missing_libraries_are_skipped_columns() {
    if !has_cc() {
        eprintln!("skipped: no C compiler for the CPU backend");
        return;
    }
    let dir = scratch("nolibs");
    let json = dir.join("r.json");
    let out = bench()
        .env("BENCH_OPENBLAS", dir.join("no-libopenblas.so"))
        .env("BENCH_ONEDNN", dir.join("no-libdnnl.so"))
        .env("BENCH_PYTHON", dir.join("no-python"))
        .args([
            "--suite",
            "smoke",
            "--filter",
            "mm64,conv_s2p1",
            "--trials",
            "1",
        ])
        .args([
            "--batch",
            "1",
            "--rounds",
            "1",
            "--round-seconds",
            "0.001",
            "--no-peak",
        ])
        .arg("--json")
        .arg(&json)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(
        stderr.matches("OpenBLAS baseline skipped").count(),
        1,
        "{stderr}"
    );
    assert_eq!(
        stderr.matches("oneDNN baseline skipped").count(),
        1,
        "{stderr}"
    );
    assert_eq!(
        stderr.matches("ONNX Runtime baseline skipped").count(),
        1,
        "{stderr}"
    );
    let report: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert!(report["machine"]["peak"].is_null());
    for r in report["results"].as_array().unwrap() {
        assert_eq!(r["status"], "ok", "{r}");
        let cols = r["baselines"].as_array().unwrap();
        assert_eq!(cols[0]["library"], "matrixmultiply");
        for c in &cols[1..] {
            assert!(c["gflops"].is_null(), "{c}");
            assert!(c["skipped"].as_str().unwrap().contains("install"), "{c}");
        }
        assert_eq!(r["best_baseline"], cols[0]["name"]);
        assert!(r["ours_share_of_peak"].is_null());
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn max_gflop_skips_with_a_reason_and_filter_picks() {
    let dir = scratch("skip");
    let json = dir.join("r.json");
    let out = bench()
        .args(["--suite", "opevo_conv2d,smoke", "--filter", "C1,mm64"])
        .args(["--max-gflop", "0", "--trials", "1"])
        .arg("--json")
        .arg(&json)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let results = report["results"].as_array().unwrap();
    assert_eq!(results.len(), 2);
    for r in results {
        assert_eq!(r["status"], "skipped");
        assert!(r["error"].as_str().unwrap().contains("--max-gflop"));
        assert!(r["ratio"].is_null());
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// With a GPU (and cuBLAS/cuDNN on the library path) the smoke suite runs on it against the
/// cuBLAS/cuDNN baselines; without one `--device cuda` exits with status 2 and says why.
#[test]
fn cuda_runs_the_smoke_suite_or_says_why_not() {
    let dir = scratch("cuda");
    let (json, land) = (dir.join("r.json"), dir.join("land"));
    let out = bench()
        .args([
            "--suite", "smoke", "--device", "cuda", "--trials", "4", "--batch", "4",
        ])
        .args(["--seed", "1", "--rounds", "3", "--round-seconds", "0.002"])
        .arg("--json")
        .arg(&json)
        .arg("--record-landscape")
        .arg(&land)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    if let Err(reason) = tensor_dsl::runtime::cuda::available() {
        // The checks below run; with TENSOR_DSL_REQUIRE_GPU=1 that is a failure.
        tensor_dsl::testing::gpu("cuda_runs_the_smoke_suite_or_says_why_not");
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains("needs a GPU"), "{stderr}");
        assert!(
            stderr.contains(&reason),
            "the reason should be passed on: {stderr}"
        );
        assert!(!json.exists(), "no report without a GPU");
        let _ = std::fs::remove_dir_all(&dir);
        return;
    }
    assert!(
        out.status.success(),
        "bench --device cuda failed:\n{stderr}"
    );
    let report: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert!(report["machine"]["gpu"].is_string());
    for r in report["results"].as_array().unwrap() {
        assert_eq!(r["device"], "cuda");
        assert_eq!(r["status"], "ok", "{r}");
        assert!(r["ratio"].as_f64().unwrap() > 0.0);
        let baseline = r["baseline"].as_str().unwrap();
        assert!(
            baseline.contains("cuBLAS") || baseline.contains("cuDNN"),
            "{baseline}"
        );
        let landscape = land.join(format!("smoke_{}.jsonl", r["name"].as_str().unwrap()));
        let text = std::fs::read_to_string(&landscape).unwrap();
        let lines = text.lines().count();
        assert!(
            (1..=4).contains(&lines),
            "{}: {lines} lines",
            landscape.display()
        );
        assert!(text.contains("\"device\":\"cuda\""));
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_names_fail() {
    let out = bench()
        .args(["--suite", "smoke", "--device", "tpu"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("cuda"));
    let out = bench().args(["--suite", "nope"]).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("bert_matmul"));
    let out = bench()
        .args(["--suite", "smoke", "--strategy", "nope"])
        .output()
        .unwrap();
    assert!(!out.status.success());
}
