//! Where a call's schedule comes from: the user cache (garbage lines in it are skipped, the
//! program goes on), tuning at the first call (persisted), and the default. Its own test
//! binary: it sets the process environment before the first call.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use tensor_dsl::dispatch::cpu_decision;
use tensor_dsl::ir::bind;
use tensor_dsl::records::{self, Record, RECORD_VERSION};
use tensor_dsl::template::cpu::{CpuConfig, CpuTemplate};
use tensor_dsl::tuned::{self, Source};
use tensor_dsl::{tensor_kernel, Device, Options, Tensor};

#[tensor_kernel]
fn scaled_mm(a: &Tensor<f32>, b: &Tensor<f32>, c: &mut Tensor<f32>) {
    c[[i, j]] += a[[i, k]] * b[[k, j]];
    c[[i, j]] = c[[i, j]] * 0.5;
}

fn decision(m: usize, k: usize, n: usize) -> std::sync::Arc<tensor_dsl::dispatch::CpuDecision> {
    let kernel = scaled_mm::kernel();
    let shapes: [&[usize]; 3] = [&[m, k], &[k, n], &[m, n]];
    let extents = bind(kernel, &shapes).unwrap();
    let a = vec![1.0f32; m * k];
    let b = vec![1.0f32; k * n];
    let mut out = vec![0.0f32; m * n];
    cpu_decision(
        kernel,
        &extents,
        &shapes,
        &[(&a).into(), (&b).into(), Default::default()],
        (&mut out).into(),
    )
    .unwrap()
}

#[test]
fn cache_then_first_call_tuning_then_default() {
    let dir = std::env::temp_dir().join(format!("tensor-dsl-dispatch-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    // Safe: the only test in this binary, before any other thread exists.
    std::env::set_var("TENSOR_DSL_CACHE", &dir);
    std::env::remove_var("TENSOR_DSL_TUNE");

    // A cache with garbage, a truncated line, and one valid record for 24x40x16 whose
    // config differs from the default.
    let kernel = scaled_mm::kernel();
    let extents = [24, 16, 40];
    // (This machine's lanes for both: the space has only its own vector width.)
    let lanes = tensor_dsl::runtime::cpu::simd_lanes();
    let template = CpuTemplate::new(kernel, &extents, lanes).unwrap();
    let chosen = CpuConfig {
        vector: 8,
        unroll: 2,
        pack: false,
        ..CpuConfig::heuristic(kernel, &extents, lanes)
    };
    let point = template.encode(&chosen).unwrap();
    let record = Record {
        version: RECORD_VERSION,
        kernel: kernel.fingerprint(),
        name: kernel.name.clone(),
        kernel_text: kernel.to_string(),
        shapes: vec![vec![24, 40], vec![40, 16], vec![24, 16]],
        dtype: "f32".into(),
        target: tuned::this_cpu().clone(),
        codegen: tensor_dsl::codegen::c::CODEGEN_VERSION,
        config: template.space().format(&point).unwrap(),
        seconds: Some(1e-6),
        samples: vec![1e-6],
        error: None,
        gflops: None,
        strategy: "test".into(),
        unix_time: 0,
        pair: None,
    };
    let line = serde_json::to_string(&record).unwrap();
    std::fs::write(
        records::default_records_file(),
        format!("not json at all\n{line}\n{}", &line[..line.len() / 3]),
    )
    .unwrap();

    let d = decision(24, 40, 16);
    assert_eq!((d.source, &d.schedule), (Source::Cache, &chosen));

    // The call itself runs with that config and is correct.
    let a = Tensor::from_vec(vec![24, 40], vec![1.0f32; 960]).unwrap();
    let b = Tensor::from_vec(vec![40, 16], vec![2.0f32; 640]).unwrap();
    let mut c = Tensor::zeros(&[24, 16]);
    scaled_mm::with(&Options::new().device(Device::Cpu))(&a, &b, &mut c).unwrap();
    assert!(c.as_slice().iter().all(|&v| v == 40.0));

    // Tuning at the first call, with a tiny budget: the result is used and persisted.
    std::env::set_var("TENSOR_DSL_TUNE", "first-call");
    std::env::set_var("TENSOR_DSL_TRIALS", "4");
    let d = decision(9, 31, 7);
    assert_eq!(d.source, Source::Tuned);
    let (saved, _) = records::read(&records::default_records_file()).unwrap();
    assert_eq!(saved.iter().filter(|r| r.shapes[0] == [9, 31]).count(), 4);
    assert_eq!(
        saved.iter().filter(|r| r.shapes[0] == [24, 40]).count(),
        1,
        "other records survive"
    );

    // Tuning off and nothing recorded near enough to help: nearest or default, never an error.
    std::env::set_var("TENSOR_DSL_TUNE", "off");
    let d = decision(5, 3, 2);
    assert!(
        matches!(d.source, Source::Default | Source::Nearest),
        "{:?}",
        d.source
    );

    // A bad setting is an error, not a panic.
    std::env::set_var("TENSOR_DSL_TUNE", "sometimes");
    let a = Tensor::from_vec(vec![2, 2], vec![1.0f32; 4]).unwrap();
    let mut c = Tensor::zeros(&[2, 2]);
    let e = scaled_mm::with(&Options::new().device(Device::Cpu))(&a, &a, &mut c).unwrap_err();
    assert!(e.to_string().contains("TENSOR_DSL_TUNE"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}
