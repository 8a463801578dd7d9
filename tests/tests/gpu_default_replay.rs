//! The SIMT template's analytic GPU default, replayed on what an H100 measured: for every fp32
//! workload of `bench/results/2026-11-25-cuda-h100/simt-f32-points.json` (each point the
//! tuning runs measured there), the default point of today's template is looked up among the
//! measured points, and where it was measured its speed is compared with the best measured
//! point. A change to the default model that lands on points the GPU measured as slow fails
//! here, without a GPU; a default nobody measured is listed, not judged.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;
use tensor_dsl::ir::{bind, parse_text};
use tensor_dsl::template::cuda::CudaSpace;
use tensor_dsl::template::gpu::GpuTarget;

/// A measured default GEMM must reach this share of the best point measured for it.
const GEMM_FLOOR: f64 = 0.8;

#[test]
fn the_simt_default_lands_on_points_the_h100_measured_fast() {
    let file = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../bench/results/2026-11-25-cuda-h100/simt-f32-points.json");
    let data: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    // The runtime's view of that GPU (a 9.0 device compiles for sm_90a).
    let target = GpuTarget {
        name: data["device"].as_str().unwrap().to_string(),
        ..GpuTarget::h100_sm90a()
    };
    let (mut failures, mut measured, mut gemm_ratios) = (Vec::new(), 0, Vec::new());
    for w in data["workloads"].as_array().unwrap() {
        let name = w["name"].as_str().unwrap();
        let kernel = parse_text("k", w["kernel"].as_str().unwrap(), None).unwrap();
        let shapes: Vec<Vec<usize>> = serde_json::from_value(w["shapes"].clone()).unwrap();
        let refs: Vec<&[usize]> = shapes.iter().map(Vec::as_slice).collect();
        let extents = bind(&kernel, &refs).unwrap();
        let space = CudaSpace::new(&kernel, &extents, &refs, &target).unwrap();
        assert_eq!(
            space.name(),
            "simt",
            "{name}: an fp32 kernel takes the SIMT template"
        );
        let default = space
            .space()
            .format(&space.default_point().unwrap())
            .unwrap();
        let points = w["points"].as_array().unwrap();
        let gflops = |p: &serde_json::Value| p[1].as_f64().unwrap();
        let best = points.iter().map(gflops).fold(0.0, f64::max);
        match points
            .iter()
            .find(|p| p[0].as_str() == Some(default.as_str()))
        {
            Some(p) => {
                measured += 1;
                let ratio = gflops(p) / best;
                println!("{name:26} default {ratio:.2} of the best measured  {default}");
                let gemm = !name.contains("conv");
                if gemm {
                    gemm_ratios.push(ratio);
                    if ratio < GEMM_FLOOR {
                        failures.push(format!(
                            "{name}: the default {default} measured {ratio:.2} of the best point"
                        ));
                    }
                }
            }
            None => println!("{name:26} default not measured        {default}"),
        }
    }
    // The replay must judge something: the 2026-11-25 default of every convolution and of
    // five of the GEMMs was measured there.
    assert!(measured >= 10, "only {measured} defaults were measured");
    assert!(gemm_ratios.len() >= 3, "{gemm_ratios:?}");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// A measured default of the `mma.sync` template must reach this share of the best point
/// measured for it (its 2026-11-25 default reached 0.07–0.65 there).
const MMA_FLOOR: f64 = 0.7;

#[test]
fn the_tensor_core_defaults_land_on_points_the_h100_measured_fast() {
    let file = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../bench/results/2026-11-25-cuda-h100/tc-half-points.json");
    let data: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    let target = GpuTarget {
        name: data["device"].as_str().unwrap().to_string(),
        ..GpuTarget::h100_sm90a()
    };
    let (mut failures, mut mma_measured) = (Vec::new(), 0);
    for w in data["workloads"].as_array().unwrap() {
        let name = w["name"].as_str().unwrap();
        let dtypes = w["dtypes"].as_str().unwrap();
        let kernel = parse_text("k", w["kernel"].as_str().unwrap(), None)
            .unwrap()
            .with_dtypes(dtypes)
            .unwrap();
        let shapes: Vec<Vec<usize>> = serde_json::from_value(w["shapes"].clone()).unwrap();
        let refs: Vec<&[usize]> = shapes.iter().map(Vec::as_slice).collect();
        let extents = bind(&kernel, &refs).unwrap();
        let space = CudaSpace::new(&kernel, &extents, &refs, &target).unwrap();
        let default = space
            .space()
            .format(&space.default_point().unwrap())
            .unwrap();
        let points = w["points"].as_array().unwrap();
        let gflops = |p: &serde_json::Value| p[1].as_f64().unwrap();
        let best = points.iter().map(gflops).fold(0.0, f64::max);
        let template = space.name();
        match points
            .iter()
            .find(|p| p[0].as_str() == Some(default.as_str()))
        {
            Some(p) => {
                let ratio = gflops(p) / best;
                println!("{name:26} {template:11} default {ratio:.2} of the best  {default}");
                if template == "tensor_core" {
                    mma_measured += 1;
                    if ratio < MMA_FLOOR {
                        failures.push(format!(
                            "{name}: the default {default} measured {ratio:.2} of the best point"
                        ));
                    }
                }
            }
            None => println!("{name:26} {template:11} default not measured  {default}"),
        }
    }
    assert!(
        mma_measured >= 5,
        "only {mma_measured} mma.sync defaults were measured"
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
