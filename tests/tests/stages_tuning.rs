//! Kernels of several stages take the CPU backend's decision order like einsum kernels: a
//! record in the user cache (a point of the row template's space) is used, first-call
//! tuning searches the row space and persists what it measured. Its own test binary: it
//! sets the process environment before the first call.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use tensor_dsl::dispatch::cpu_decision;
use tensor_dsl::ir::bind;
use tensor_dsl::records::{self, Record, RECORD_VERSION};
use tensor_dsl::template::cpu::CpuTemplate;
use tensor_dsl::template::rows::RowsCpuConfig;
use tensor_dsl::tuned::{self, Source};
use tensor_dsl::{tensor_kernel, Device, Options, Tensor};

#[tensor_kernel]
fn softmax(x: &Tensor<f32>, y: &mut Tensor<f32>) {
    m[[i]] = max(x[[i, j]]);
    s[[i]] = sum(exp(x[[i, j]] - m[[i]]));
    y[[i, j]] = exp(x[[i, j]] - m[[i]]) / s[[i]];
}

fn decision(rows: usize, cols: usize) -> std::sync::Arc<tensor_dsl::dispatch::CpuDecision> {
    let kernel = softmax::kernel();
    let shapes: [&[usize]; 2] = [&[rows, cols], &[rows, cols]];
    let extents = bind(kernel, &shapes).unwrap();
    let x = vec![0.5f32; rows * cols];
    let mut out = vec![0.0f32; rows * cols];
    cpu_decision(
        kernel,
        &extents,
        &shapes,
        &[(&x).into(), Default::default()],
        (&mut out).into(),
    )
    .unwrap()
}

fn naive(x: &[f32], cols: usize) -> Vec<f32> {
    x.chunks(cols)
        .flat_map(|r| {
            let m = r.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let s: f32 = r.iter().map(|v| (v - m).exp()).sum();
            r.iter().map(move |v| (v - m).exp() / s).collect::<Vec<_>>()
        })
        .collect()
}

#[test]
fn cache_then_first_call_tuning_of_a_row_kernel() {
    if tensor_dsl::runtime::cpu::compiler().is_err() {
        println!("skipped: no C compiler");
        return;
    }
    let dir = std::env::temp_dir().join(format!("tensor-dsl-stages-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    // Safe: the only test in this binary, before any other thread exists.
    std::env::set_var("TENSOR_DSL_CACHE", &dir);
    std::env::remove_var("TENSOR_DSL_TUNE");

    // A record for 6x50 whose configuration is not the default: serial, scalar, no stash.
    let kernel = softmax::kernel();
    let extents = [6, 50];
    let template =
        CpuTemplate::new(kernel, &extents, tensor_dsl::runtime::cpu::simd_lanes()).unwrap();
    let chosen = RowsCpuConfig {
        parallel: false,
        vector: 1,
        wide: false,
        stash: false,
        across: false,
        stream: false,
        separable: false,
    }
    .to_cpu_config();
    assert_ne!(chosen, template.decode(&template.default_config()).unwrap());
    let point = template.encode(&chosen).unwrap();
    let record = Record {
        version: RECORD_VERSION,
        kernel: kernel.fingerprint(),
        name: kernel.name.clone(),
        kernel_text: kernel.to_string(),
        shapes: vec![vec![6, 50], vec![6, 50]],
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
    std::fs::write(
        records::default_records_file(),
        format!("{}\n", serde_json::to_string(&record).unwrap()),
    )
    .unwrap();
    let d = decision(6, 50);
    assert_eq!((d.source, &d.schedule), (Source::Cache, &chosen));

    // The call runs with it and is right.
    let data: Vec<f32> = (0..300)
        .map(|v| ((v * 37) % 101) as f32 * 0.05 - 2.0)
        .collect();
    let x = Tensor::from_vec(vec![6, 50], data.clone()).unwrap();
    let mut y = Tensor::zeros(&[6, 50]);
    softmax::with(&Options::new().device(Device::Cpu))(&x, &mut y).unwrap();
    for (g, w) in y.as_slice().iter().zip(naive(&data, 50)) {
        assert!((g - w).abs() <= 1e-6 + 1e-5 * w.abs(), "{g} vs {w}");
    }

    // First-call tuning searches the row space and persists every measured point.
    std::env::set_var("TENSOR_DSL_TUNE", "first-call");
    std::env::set_var("TENSOR_DSL_TRIALS", "3");
    let d = decision(9, 70);
    assert_eq!(d.source, Source::Tuned);
    let (saved, _) = records::read(&records::default_records_file()).unwrap();
    let tuned: Vec<&Record> = saved.iter().filter(|r| r.shapes[0] == [9, 70]).collect();
    assert_eq!(tuned.len(), 3);
    assert!(
        tuned
            .iter()
            .all(|r| r.error.is_none() && r.config.contains("stash=")),
        "{tuned:?}"
    );
    std::env::remove_var("TENSOR_DSL_TUNE");
    let _ = std::fs::remove_dir_all(&dir);
}
