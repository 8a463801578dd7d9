//! The `tensor-dsl` binary, run as a user would.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::process::Command;

fn tensor_dsl(args: &[&str]) -> (i32, String, String) {
    // `$TENSOR_DSL_CLI_EXE`: a GPU machine runs this test binary away from the build folder.
    let exe = std::env::var_os("TENSOR_DSL_CLI_EXE")
        .unwrap_or_else(|| env!("CARGO_BIN_EXE_tensor-dsl").into());
    let out = Command::new(exe).args(args).output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn verify_cpu_random_configs_passes_and_reports_json() {
    let (code, out, err) = tensor_dsl(&[
        "verify",
        "--kernel",
        "o[[i, j]] += a[[i, j, k]] * b[[k]] * c[[j]]; o[[i, j]] = sigmoid(o[[i, j]])",
        "--shapes",
        "a=7x5x3,b=3,c=5,o=7x5",
        "--device",
        "cpu",
        "--configs",
        "random:8",
        "--seed",
        "4",
    ]);
    assert_eq!(code, 0, "{out}{err}");
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(v["configs"], 8);
    assert_eq!(v["passed"], 8);
    assert_eq!(v["failed"].as_array().unwrap().len(), 0);
}

/// `--configs config:TEXT` writes that one configuration (a record's text, e.g. the bf16
/// pairs kernel) and refuses a text the space does not have.
#[test]
fn emit_writes_a_given_config() {
    let dir = std::env::temp_dir().join(format!("tensor-dsl-cli-emit1-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    // The pairs kernel exists with 16-lane vectors only.
    let pairs = tensor_dsl::runtime::cpu::simd_lanes() == 16;
    let text = format!(
        "vector_axis=j;vector=32;unroll_axis=i;unroll=4;parallel=serial;\
         pack=vector_operand;order=unroll_inner;k_block=0;simd=compiler;kernel={}",
        if pairs { "pairs" } else { "loops" }
    );
    let args = |config: &str| {
        vec![
            "emit".to_string(),
            "--kernel".into(),
            "c[[i,j]] += a[[i,k]] * b[[k,j]]".into(),
            "--shapes".into(),
            "a=13x7,b=7x40,c=13x40".into(),
            "--dtypes".into(),
            "a=bf16,b=bf16".into(),
            "--configs".into(),
            format!("config:{config}"),
            "--out".into(),
            dir.to_str().unwrap().into(),
        ]
    };
    let run = |config: &str| {
        let a = args(config);
        tensor_dsl(&a.iter().map(String::as_str).collect::<Vec<_>>())
    };
    let (code, out, err) = run(&text);
    assert_eq!(code, 0, "{out}{err}");
    let meta: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("config_0000.json")).unwrap())
            .unwrap();
    assert_eq!(meta["config"].as_str().unwrap(), text);
    if pairs {
        let src = std::fs::read_to_string(dir.join("config_0000.c")).unwrap();
        assert!(src.contains("td_dot2("), "{src}");
    }
    let (code, _, err) = run("vector=7");
    assert_ne!(code, 0);
    assert!(err.contains("config:vector=7"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A GPU configuration's text (as `inspect` and the GPU records write it) emits that one
/// CUDA source; a text the SIMT space does not have is refused.
#[test]
fn emit_writes_a_given_cuda_config() {
    let dir = std::env::temp_dir().join(format!("tensor-dsl-cli-emit2-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let text = "bm=64;bn=32;bk=16;tm=4;tn=4;warp_m=8;unroll=2;vector=4;pipeline=0;raster=8;split=8";
    let run = |config: &str| {
        let a = [
            "emit",
            "--kernel",
            "c[[i,j]] += a[[i,k]] * b[[k,j]]",
            "--shapes",
            "a=512x1024,b=1024x64,c=512x64",
            "--target",
            "cuda:sm_90",
            "--configs",
            &format!("config:{config}"),
            "--out",
            dir.to_str().unwrap(),
        ];
        tensor_dsl(&a)
    };
    let (code, out, err) = run(text);
    assert_eq!(code, 0, "{out}{err}");
    let meta: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("config_0000.json")).unwrap())
            .unwrap();
    assert_eq!(meta["config"].as_str().unwrap(), text);
    let src = std::fs::read_to_string(dir.join("config_0000.cu")).unwrap();
    assert!(src.contains("split-K 8"), "{src}");
    let (code, _, err) = run("bm=48");
    assert_ne!(code, 0);
    assert!(err.contains("config:bm=48"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn emit_writes_one_source_and_json_per_config() {
    let dir = std::env::temp_dir().join(format!("tensor-dsl-cli-emit-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let (code, out, err) = tensor_dsl(&[
        "emit",
        "--kernel",
        "c[[i,j]] += a[[i,k]] * b[[k,j]]",
        "--shapes",
        "a=13x7,b=7x5,c=13x5",
        "--target",
        "cpu",
        "--configs",
        "random:5",
        "--seed",
        "2",
        "--out",
        dir.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{out}{err}");
    let mut files: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    files.sort();
    assert_eq!(files.len(), 10, "{files:?}");
    let meta: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("config_0000.json")).unwrap())
            .unwrap();
    assert_eq!(meta["target"], "cpu");
    assert!(std::fs::read_to_string(dir.join("config_0000.c"))
        .unwrap()
        .contains("td_kernel"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_input_is_a_clear_error() {
    for (args, want) in [
        (
            vec![
                "verify",
                "--kernel",
                "c[[i]] += a[[i * j]]",
                "--shapes",
                "a=3,c=3",
            ],
            "affine",
        ),
        (
            vec![
                "verify",
                "--kernel",
                "c[[i]] += a[[i]]",
                "--shapes",
                "a=3,c=4",
            ],
            "index `i`",
        ),
        (
            vec!["verify", "--kernel", "c[[i]] += a[[i]]", "--shapes", "a=3"],
            "no shape for tensor `c`",
        ),
        (
            vec![
                "verify",
                "--kernel",
                "c[[i]] = a[[i]]",
                "--shapes",
                "a=3,c=3",
                "--configs",
                "some",
            ],
            "random:N",
        ),
        (
            vec![
                "emit",
                "--kernel",
                "c[[i]] = a[[i]]",
                "--shapes",
                "a=3,c=3",
                "--target",
                "tpu",
                "--out",
                "/tmp/x",
            ],
            "cuda:sm_XY",
        ),
    ] {
        let (code, _, err) = tensor_dsl(&args);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {err}");
    }
}

/// A bf16-input GEMM (`--dtypes a=bf16,b=bf16,c=f32`, 1000×1000×1000) emits the
/// tensor-core kernel (`mma.sync`, no `#include`), default and random points; with NVRTC and
/// ptxas each compiles and assembles without spills.
#[test]
fn emit_bf16_gemm_uses_tensor_cores() {
    for configs in ["default", "random:3"] {
        let dir = std::env::temp_dir().join(format!(
            "tensor-dsl-cli-tc-{}-{}",
            std::process::id(),
            configs.replace(':', "")
        ));
        let _ = std::fs::remove_dir_all(&dir);
        let (code, out, err) = tensor_dsl(&[
            "emit",
            "--kernel",
            "c[[i,j]] += a[[i,k]] * b[[k,j]]",
            "--shapes",
            "a=1000x1000,b=1000x1000,c=1000x1000",
            "--dtypes",
            "a=bf16,b=bf16,c=f32",
            "--target",
            "cuda:sm_90",
            "--configs",
            configs,
            "--out",
            dir.to_str().unwrap(),
        ]);
        assert_eq!(code, 0, "{out}{err}");
        let sources: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "cu"))
            .collect();
        assert_eq!(sources.len(), if configs == "default" { 1 } else { 3 });
        for src in sources {
            let text = std::fs::read_to_string(&src).unwrap();
            assert!(!text.contains("#include"), "{}", src.display());
            assert!(text.contains("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"));
            let meta: serde_json::Value =
                serde_json::from_str(&std::fs::read_to_string(src.with_extension("json")).unwrap())
                    .unwrap();
            assert_eq!(meta["template"], "tensor_core");
            if tensor_dsl::runtime::nvrtc::available()
                && tensor_dsl::runtime::ptxas::find().is_some()
            {
                let ptx = tensor_dsl::runtime::nvrtc::compile_ptx("mm", &text, "compute_90")
                    .unwrap_or_else(|e| panic!("{}: {e}", src.display()));
                let r = tensor_dsl::runtime::ptxas::assemble(&ptx, "sm_90")
                    .unwrap_or_else(|e| panic!("{}: {e}", src.display()));
                assert_eq!((r.spill_stores, r.spill_loads), (0, 0), "{}", src.display());
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// `emit --target cuda:sm_90` writes self-contained CUDA: every file compiles with NVRTC
/// (compute_90) and assembles with ptxas (sm_90). Skips without NVRTC/ptxas unless
/// TENSOR_DSL_REQUIRE_NVRTC=1 (CI) or TENSOR_DSL_REQUIRE_GPU=1.
#[test]
fn emitted_cuda_compiles_with_nvrtc_and_ptxas() {
    let nvrtc = tensor_dsl::runtime::nvrtc::available();
    let ptxas = tensor_dsl::runtime::ptxas::find().is_some();
    let missing =
        (!(nvrtc && ptxas)).then(|| format!("NVRTC ({nvrtc}) or ptxas ({ptxas}) missing"));
    if !tensor_dsl::testing::runs(
        "emitted_cuda_compiles_with_nvrtc_and_ptxas",
        tensor_dsl::testing::Need::Compilers,
        missing.as_deref(),
    ) {
        return;
    }
    let cases = [
        ("bmm_t", "z[[b,m,n]] += x[[b,k,m]] * y[[b,k,n]]", "x=3x13x7,y=3x13x17,z=3x7x17"),
        (
            "conv",
            "y[[n,f,p,q]] += x[[n,c,2*p+r-1,2*q+s-1]] * w[[f,c,r,s]]; y[[n,f,p,q]] = relu(y[[n,f,p,q]] + b[[f]])",
            "x=2x3x17x13,w=5x3x3x3,b=5,y=2x5x9x7",
        ),
        ("chain", "o[[i]] += a[[i,j]] * b[[j,l]] * c[[l]]", "a=31x7,b=7x11,c=11,o=31"),
    ];
    for (name, kernel, shapes) in cases {
        let dir =
            std::env::temp_dir().join(format!("tensor-dsl-cli-cuda-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let (code, out, err) = tensor_dsl(&[
            "emit",
            "--kernel",
            kernel,
            "--shapes",
            shapes,
            "--target",
            "cuda:sm_90",
            "--configs",
            "random:6",
            "--seed",
            "9",
            "--out",
            dir.to_str().unwrap(),
        ]);
        assert_eq!(code, 0, "{out}{err}");
        let mut sources: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "cu"))
            .collect();
        sources.sort();
        assert_eq!(sources.len(), 6, "{name}");
        for src in sources {
            let text = std::fs::read_to_string(&src).unwrap();
            let ptx = tensor_dsl::runtime::nvrtc::compile_ptx(name, &text, "compute_90")
                .unwrap_or_else(|e| panic!("{}: {e}", src.display()));
            tensor_dsl::runtime::ptxas::assemble(&ptx, "sm_90")
                .unwrap_or_else(|e| panic!("{}: {e}", src.display()));
            let meta: serde_json::Value =
                serde_json::from_str(&std::fs::read_to_string(src.with_extension("json")).unwrap())
                    .unwrap();
            assert!(meta["block"][0].as_u64().unwrap() >= 1);
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[test]
fn tune_then_records_best_export_merge() {
    let dir = std::env::temp_dir().join(format!("tensor-dsl-cli-records-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let recs = dir.join("records.jsonl");
    let (code, out, err) = tensor_dsl(&[
        "tune",
        "--kernel",
        "c[[i,j]] += a[[i,k]] * b[[k,j]]",
        "--shapes",
        "a=24x16,b=16x40,c=24x40",
        "--trials",
        "5",
        "--seed",
        "1",
        "--records",
        recs.to_str().unwrap(),
        "--json",
        "--svg",
        dir.join("tuning.svg").to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{out}{err}");
    // Not a terminal: no progress line, no carriage returns or escape codes.
    assert!(!err.contains('\r') && !err.contains('\u{1b}'), "{err:?}");
    let svg = std::fs::read_to_string(dir.join("tuning.svg")).unwrap();
    assert!(
        svg.starts_with("<svg") && svg.contains("best-so-far GFLOPS"),
        "{svg}"
    );
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(v["trials"], 5);
    assert!(v["best_gflops"].as_f64().unwrap() > 0.0);
    assert_eq!(v["history"].as_array().unwrap().len(), 5);
    assert!(v["best_config"].as_str().unwrap().contains("vector_axis="));

    let (code, out, _) = tensor_dsl(&["records", "best", recs.to_str().unwrap()]);
    assert_eq!((code, out.lines().count()), (0, 1), "{out}");
    // `records show` summarises: one line per key, naming the kernel; `--all` lists all.
    let (code, out, _) = tensor_dsl(&["records", "show", recs.to_str().unwrap()]);
    assert_eq!((code, out.lines().count()), (0, 1), "{out}");
    assert!(
        out.starts_with("kernel [24x16, 16x40, 24x40] f32 cpu"),
        "{out}"
    );
    assert!(out.contains("5 measured") && out.contains("best "), "{out}");
    let (code, out, _) = tensor_dsl(&["records", "show", recs.to_str().unwrap(), "--all"]);
    assert_eq!((code, out.lines().count()), (0, 5), "{out}");
    let (code, out, _) = tensor_dsl(&[
        "records",
        "show",
        recs.to_str().unwrap(),
        "--json",
        "--kernel",
        "kernel",
    ]);
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(
        (v["name"].as_str(), v["measured"].as_u64()),
        (Some("kernel"), Some(5))
    );
    let (_, out, _) = tensor_dsl(&["records", "show", recs.to_str().unwrap(), "--kernel", "x"]);
    assert!(out.is_empty(), "{out}");
    let shipped = dir.join("tuned.jsonl");
    let (code, out, err) = tensor_dsl(&[
        "records",
        "export",
        recs.to_str().unwrap(),
        "--target",
        "cpu",
        "--out",
        shipped.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("\"records\":1"), "{out}");
    let merged = dir.join("merged.jsonl");
    let (code, out, _) = tensor_dsl(&[
        "records",
        "merge",
        recs.to_str().unwrap(),
        shipped.to_str().unwrap(),
        "--out",
        merged.to_str().unwrap(),
    ]);
    assert_eq!(code, 0);
    assert!(out.contains("\"records\":5"), "duplicates dropped: {out}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `tune --device cuda` tunes on the GPU and records the GPU as the target; without one it
/// fails with the detection's reason.
#[test]
fn tune_on_cuda_records_the_gpu_or_says_why_not() {
    let dir = std::env::temp_dir().join(format!("tensor-dsl-cli-cuda-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let recs = dir.join("records.jsonl");
    let (code, out, err) = tensor_dsl(&[
        "tune",
        "--device",
        "cuda",
        "--kernel",
        "c[[i,j]] += a[[i,k]] * b[[k,j]]",
        "--shapes",
        "a=96x80,b=80x112,c=96x112",
        "--trials",
        "4",
        "--records",
        recs.to_str().unwrap(),
        "--json",
    ]);
    match tensor_dsl::runtime::cuda::available() {
        Err(reason) => {
            // The checks below run; with TENSOR_DSL_REQUIRE_GPU=1 that is a failure.
            tensor_dsl::testing::gpu("tune_on_cuda_records_the_gpu_or_says_why_not");
            assert_ne!(code, 0);
            assert!(err.contains(&reason), "{err}");
            assert!(!recs.exists());
        }
        Ok(_) => {
            assert_eq!(code, 0, "{out}{err}");
            let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
            assert_eq!(v["device"], "cuda");
            assert!(v["best_gflops"].as_f64().unwrap() > 0.0);
            let text = std::fs::read_to_string(&recs).unwrap();
            assert_eq!(text.lines().count(), 4);
            for line in text.lines() {
                let r: serde_json::Value = serde_json::from_str(line).unwrap();
                assert_eq!(r["target"]["device"], "cuda");
                assert!(r["target"]["detail"].as_str().unwrap().starts_with("sm_"));
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// What is at `path`, without following a link: (is a link, is a character device, is a
/// regular file).
#[cfg(unix)]
fn kind(path: &std::path::Path) -> (bool, bool, bool) {
    use std::os::unix::fs::FileTypeExt;
    let t = std::fs::symlink_metadata(path).unwrap().file_type();
    (t.is_symlink(), t.is_char_device(), t.is_file())
}

fn tune_into(records: &std::path::Path) -> (i32, String, String) {
    tensor_dsl(&[
        "tune",
        "--kernel",
        "c[[i,j]] += a[[i,k]] * b[[k,j]]",
        "--shapes",
        "a=8x4,b=4x8,c=8x8",
        "--trials",
        "2",
        "--records",
        records.to_str().unwrap(),
        "--json",
    ])
}

/// `tune --records` writes through a symlink (the link stays, its target gets the records)
/// and saves nothing to `/dev/null`, which stays the character device it was (this matters
/// as root, where replacing it by rename would succeed).
#[cfg(unix)]
#[test]
fn tune_records_to_a_symlink_or_dev_null_leaves_each_what_it_was() {
    use std::os::unix::fs::MetadataExt;
    let dir = std::env::temp_dir().join(format!("tensor-dsl-cli-links-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let target = dir.join("real.jsonl");
    let link = dir.join("records.jsonl");
    std::os::unix::fs::symlink("real.jsonl", &link).unwrap();
    let (code, out, err) = tune_into(&link);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(
        kind(&link),
        (true, false, false),
        "the link is still a link"
    );
    assert_eq!(
        std::fs::read_to_string(&target).unwrap().lines().count(),
        2,
        "its target holds the records"
    );

    let null = std::path::Path::new("/dev/null");
    let before = std::fs::symlink_metadata(null).unwrap();
    let (code, out, err) = tune_into(null);
    assert_eq!(code, 0, "{out}{err}");
    let after = std::fs::symlink_metadata(null).unwrap();
    assert_eq!(
        kind(null),
        (false, true, false),
        "/dev/null is still a device"
    );
    assert_eq!((before.ino(), before.rdev()), (after.ino(), after.rdev()));
    assert!(std::fs::symlink_metadata("/dev/null.lock").is_err());

    // A directory (or any other non-regular file) is refused, naming it.
    let (code, _, err) = tune_into(&dir);
    assert_eq!(code, 2);
    assert!(
        err.contains("is a directory") && err.contains(dir.to_str().unwrap()),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Runs the binary with stdout a pipe whose read end is closed after `lines` lines (and
/// stderr a pipe closed at once when `close_stderr`); returns the exit code and stderr.
fn with_closed_pipe(args: &[&str], lines: usize, close_stderr: bool) -> (Option<i32>, String) {
    use std::io::{BufRead, Read};
    use std::process::Stdio;
    let mut child = Command::new(env!("CARGO_BIN_EXE_tensor-dsl"))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Dropping a handle closes this end of its pipe.
    let stderr = child.stderr.take().filter(|_| !close_stderr);
    let mut reader = std::io::BufReader::new(child.stdout.take().unwrap());
    for _ in 0..lines {
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
    }
    drop(reader);
    let mut err = String::new();
    if let Some(mut stderr) = stderr {
        stderr.read_to_string(&mut err).unwrap();
    }
    (child.wait().unwrap().code(), err)
}

/// `tensor-dsl records show | head -1` and the like: every command exits quietly (status 0,
/// no panic) when the reader of its stdout goes away.
#[test]
fn commands_exit_quietly_on_a_closed_pipe() {
    let dir = std::env::temp_dir().join(format!("tensor-dsl-cli-pipe-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    // Far more than a pipe's buffer, so the writer is still writing when the reader goes.
    let recs = dir.join("records.jsonl");
    let mut text = String::new();
    for n in 1..=3000 {
        let r = serde_json::json!({
            "version": tensor_dsl::records::RECORD_VERSION, "kernel": "k",
            "kernel_text": "c[[i]] = a[[i]];", "shapes": [[n], [n]], "dtype": "f32",
            "target": { "device": "cpu", "name": "test", "detail": "" }, "codegen": 2,
            "config": "vector=4", "seconds": 1.0, "samples": [1.0], "error": null,
            "gflops": 1.0, "strategy": "test", "unix_time": 0
        });
        text.push_str(&format!("{r}\n"));
    }
    std::fs::write(&recs, text).unwrap();
    let recs = recs.to_str().unwrap();
    let emitted = dir.join("emitted");
    let emit = [
        "emit",
        "--kernel",
        "c[[i,j]] += a[[i,k]] * b[[k,j]]",
        "--shapes",
        "a=4x4,b=4x4,c=4x4",
        "--out",
        emitted.to_str().unwrap(),
    ];
    let merged = dir.join("merged.jsonl");
    let merge = ["records", "merge", recs, "--out", merged.to_str().unwrap()];
    for (args, lines) in [
        (&["records", "show", recs][..], 1),
        (&["records", "show", recs, "--json"][..], 1),
        (&["records", "best", recs][..], 1),
        (&["records", "best", recs, "--json"][..], 0),
        (&emit[..], 0),
        (&merge[..], 0),
        (&["--help"][..], 0),
    ] {
        let (code, err) = with_closed_pipe(args, lines, false);
        assert_eq!(code, Some(0), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
    // A closed stderr does not turn an error into a panic either.
    let (code, _) = with_closed_pipe(
        &[
            "emit",
            "--kernel",
            "c[[i]] +=",
            "--shapes",
            "c=4",
            "--out",
            "x",
        ],
        0,
        true,
    );
    assert_eq!(code, Some(2));
    let _ = std::fs::remove_dir_all(&dir);
}

/// A kernel of several stages from the command line: the row template's configurations are
/// verified on the CPU, and its CUDA is emitted.
#[test]
fn softmax_from_the_command_line() {
    let softmax = "m[[i]] = max(x[[i, j]]); s[[i]] = sum(exp(x[[i, j]] - m[[i]])); \
                   y[[i, j]] = exp(x[[i, j]] - m[[i]]) / s[[i]]";
    let (code, out, err) = tensor_dsl(&[
        "verify",
        "--kernel",
        softmax,
        "--shapes",
        "x=7x1001,y=7x1001",
        "--device",
        "cpu",
        "--configs",
        "random:4",
    ]);
    assert_eq!(code, 0, "{out}{err}");
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(
        (v["configs"].as_u64(), v["passed"].as_u64()),
        (Some(4), Some(4)),
        "{v}"
    );
    let dir = std::env::temp_dir().join(format!("tensor-dsl-cli-rows-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let (code, out, err) = tensor_dsl(&[
        "emit",
        "--kernel",
        softmax,
        "--shapes",
        "x=7x1001,y=7x1001",
        "--target",
        "cuda",
        "--out",
        dir.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{out}{err}");
    let src = std::fs::read_to_string(dir.join("config_0000.cu")).unwrap();
    assert!(src.contains("__shfl_xor_sync"), "{src}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Equal infinities are equal: max pooling whose first and last windows lie wholly in the
/// padding (−∞ there) verifies, in every configuration of the spread, scalar rows included.
#[test]
fn pooling_with_windows_in_the_padding_verifies() {
    let (code, out, err) = tensor_dsl(&[
        "verify",
        "--kernel",
        "let r = 0..2; let s = 0..2; y[[p, q]] = max(x[[2 * p + r - 2, 2 * q + s - 2]])",
        "--shapes",
        "x=9x9,y=6x6",
        "--device",
        "cpu",
        "--configs",
        "random:8",
    ]);
    assert_eq!(code, 0, "{out}{err}");
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(v["failed"].as_array().map(Vec::len), Some(0), "{v}");
}
