//! Sanity properties of the analytic cost-model features, and (when recorded landscapes are
//! at hand: `TENSOR_DSL_LANDSCAPES=DIR` with `*.jsonl` from `tensor-dsl landscape`) whether
//! they help a learned model rank configurations.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use rand::{rngs::StdRng, SeedableRng};
use tensor_dsl::features::{
    cpu_features, cpu_features_with_threads, gpu_features, CpuFeatures, GpuFeatures,
};
use tensor_dsl::ir::{bind, parse_text, Kernel};
use tensor_dsl::runtime::ptxas::PtxasReport;
use tensor_dsl::template::cpu::{CpuConfig, CpuTemplate};
use tensor_dsl::template::gpu::{default_schedule, AxisSplit, GpuSchedule, GpuTarget, GpuTemplate};
use tuner::{CostModel, Forest};

/// (source, shapes per parameter): rank-0, conv, bmm, matmul, elementwise.
fn kernels() -> Vec<(Kernel, Vec<Vec<usize>>)> {
    [
        ("s[[]] += a[[i]] * b[[i]]", vec![vec![100_000], vec![100_000], vec![]]),
        (
            "y[[n, f, p, q]] += x[[n, c, 2 * p + r - 1, 2 * q + s - 1]] * w[[f, c, r, s]]; y[[n, f, p, q]] = relu(y[[n, f, p, q]] + bias[[f]])",
            vec![vec![2, 16, 33, 33], vec![32, 16, 3, 3], vec![32], vec![2, 32, 16, 16]],
        ),
        (
            "c[[b, i, j]] += x[[b, i, k]] * y[[b, k, j]]",
            vec![vec![4, 96, 80], vec![4, 80, 100], vec![4, 96, 100]],
        ),
        (
            "c[[i, j]] += a[[i, k]] * b[[k, j]]",
            vec![vec![1000, 1000], vec![1000, 1000], vec![1000, 1000]],
        ),
        ("o[[i, j]] = a[[i, j]] * 2.0", vec![vec![300, 7], vec![300, 7]]),
    ]
    .into_iter()
    .map(|(src, shapes)| (parse_text("k", src, None).unwrap(), shapes))
    .collect()
}

fn extents_of(k: &Kernel, shapes: &[Vec<usize>]) -> Vec<usize> {
    let refs: Vec<&[usize]> = shapes.iter().map(Vec::as_slice).collect();
    bind(k, &refs).unwrap()
}

fn check_gpu(f: &GpuFeatures, what: &str) {
    let v = f.to_vec();
    assert_eq!(v.len(), GpuFeatures::NAMES.len());
    assert!(v.iter().all(|x| x.is_finite()), "{what}: {f:?}");
    assert!(f.occupancy > 0.0 && f.occupancy <= 1.0, "{what}: {f:?}");
    assert!(
        f.wave_efficiency > 0.0 && f.wave_efficiency <= 1.0,
        "{what}: {f:?}"
    );
    assert!(
        f.ilp >= 1.0 && f.wlp >= 1.0 && f.register_reuse > 0.0,
        "{what}: {f:?}"
    );
}

#[test]
fn gpu_features_are_finite_and_bounded_on_sampled_schedules() {
    let target = GpuTarget::h100();
    let mut rng = StdRng::seed_from_u64(7);
    for (k, shapes) in kernels() {
        let e = extents_of(&k, &shapes);
        check_gpu(
            &gpu_features(
                &k,
                &e,
                &shapes,
                &default_schedule(&k, &e, &target),
                &target,
                None,
            ),
            &format!("{k} default"),
        );
        let t = GpuTemplate::new(&k, &e, &target).unwrap();
        for n in 0..20 {
            let s = t
                .decode(&t.space().sample_uniform(&mut rng).unwrap())
                .unwrap();
            check_gpu(
                &gpu_features(&k, &e, &shapes, &s, &target, None),
                &format!("{k} #{n}"),
            );
            let r = PtxasReport {
                registers: 255,
                ..PtxasReport::default()
            };
            check_gpu(
                &gpu_features(&k, &e, &shapes, &s, &target, Some(&r)),
                &format!("{k} #{n} ptxas"),
            );
        }
    }
}

fn mm_schedule(k: &Kernel, e: &[usize], thread: usize, reg: usize) -> GpuSchedule {
    // An Ansor-form schedule (a matmul's default is the SIMT GEMM one).
    let mut s = tensor_dsl::template::gpu::ansor_default_schedule(k, e, &GpuTarget::h100());
    for a in 0..2 {
        s.axes[a] = AxisSplit {
            padded: 1024,
            factors: vec![1024 / (thread * reg), 1, thread, 1, reg],
        };
    }
    s
}

#[test]
fn bigger_register_tiles_reuse_more() {
    let k = parse_text("mm", "c[[i,j]] += a[[i,k]] * b[[k,j]]", None).unwrap();
    let e = [1024, 1024, 1024];
    let t = GpuTarget::h100();
    let reuse = |reg| {
        let s = mm_schedule(&k, &e, 16, reg);
        assert!(s.validate(&k, &e).is_ok());
        gpu_features(&k, &e, &[], &s, &t, None)
    };
    let (r1, r2, r4) = (reuse(1), reuse(2), reuse(4));
    assert!(r1.register_reuse < r2.register_reuse && r2.register_reuse < r4.register_reuse);
    assert!((r4.register_reuse - 2.0).abs() < 1e-9, "{r4:?}");
    assert!(r1.ilp < r4.ilp);
    // Bigger tiles cut the shared-memory traffic per flop.
    assert!(r1.oi_shared < r4.oi_shared, "{r1:?} {r4:?}");
}

#[test]
fn more_registers_from_ptxas_lower_the_occupancy() {
    let k = parse_text("mm", "c[[i,j]] += a[[i,k]] * b[[k,j]]", None).unwrap();
    let e = [1024, 1024, 1024];
    let t = GpuTarget::h100();
    let s = mm_schedule(&k, &e, 16, 1);
    let est = gpu_features(&k, &e, &[], &s, &t, None);
    let heavy = PtxasReport {
        registers: (est.registers as u32) * 3,
        ..PtxasReport::default()
    };
    let measured = gpu_features(&k, &e, &[], &s, &t, Some(&heavy));
    assert!(measured.occupancy < est.occupancy, "{est:?} {measured:?}");
    assert!(measured.blocks_per_sm < est.blocks_per_sm);
}

#[test]
fn two_blocks_on_132_sms_waste_the_wave() {
    let k = parse_text("ew", "o[[i]] = a[[i]] * 2.0", None).unwrap();
    let e = [512];
    let t = GpuTarget::h100();
    let mut s = default_schedule(&k, &e, &t);
    s.axes[0] = AxisSplit {
        padded: 512,
        factors: vec![2, 1, 256, 1, 1],
    };
    assert!(s.validate(&k, &e).is_ok());
    let f = gpu_features(&k, &e, &[], &s, &t, None);
    assert!(f.wave_efficiency > 0.0 && f.wave_efficiency < 0.05, "{f:?}");
    // One block per SM on every SM fills the wave exactly.
    let e = [132 * 256];
    s.axes[0] = AxisSplit {
        padded: padded_or(132 * 256),
        factors: vec![132, 1, 256, 1, 1],
    };
    let f = gpu_features(&k, &e, &[], &s, &t, None);
    assert!(f.wave_efficiency > 0.0 && f.wave_efficiency <= 1.0, "{f:?}");
}

fn padded_or(e: usize) -> usize {
    tensor_dsl::template::gpu::padded_extent(e)
}

#[test]
fn cpu_vector_utilisation_is_one_exactly_when_the_tile_divides() {
    let k = parse_text("mm", "c[[i,j]] += a[[i,k]] * b[[k,j]]", None).unwrap();
    let cfg = CpuConfig {
        vector_axis: Some(1),
        vector: 16,
        unroll_axis: Some(0),
        unroll: 4,
        parallel: true,
        pack: true,
        unroll_outer: false,
        k_block: 0,
        wide_simd: true,
        conv: None,
        rows: None,
        // Explicit vector code changes the packed tile's text, not the tile the features
        // read (the loop tile without the panel comes first).
        vector_code: 16,
        pairs: false,
    };
    let f = cpu_features(&k, &[64, 64, 64], &[], &cfg, 16);
    assert_eq!(f.vector_utilisation, 1.0);
    assert_eq!(f.vector_lanes, 1.0);
    assert_eq!(f.packed, 1.0);
    let g = cpu_features(&k, &[64, 60, 64], &[], &cfg, 16);
    assert!(
        g.vector_utilisation < 1.0 && g.vector_utilisation > 0.0,
        "{g:?}"
    );
    // 16 x 4 outer iterations on 3 threads: 64 mod 3 = 1 busy in the last round.
    let h = cpu_features_with_threads(&k, &[64, 64, 64], &[], &cfg, 16, 3);
    assert!((h.last_round_fill - 1.0 / 3.0).abs() < 1e-12, "{h:?}");
    // Without the 512-bit request GCC uses 8-lane vectors: the same tile is two of them.
    let narrow = CpuConfig {
        wide_simd: false,
        ..cfg.clone()
    };
    let n = cpu_features(&k, &[64, 64, 64], &[], &narrow, 16);
    assert_eq!(n.vector_lanes, 2.0);
    assert!(n.register_pressure > f.register_pressure);
    // A blocked reduction packs one block: a smaller panel and working set.
    let blocked = CpuConfig {
        k_block: 16,
        ..cfg.clone()
    };
    let b = cpu_features(&k, &[64, 64, 64], &[], &blocked, 16);
    assert!(
        b.log2_pack_bytes < f.log2_pack_bytes && b.log2_l1_ratio < f.log2_l1_ratio,
        "{b:?}"
    );
    // A bigger register tile is more register pressure.
    let big = CpuConfig { unroll: 12, ..cfg };
    assert!(cpu_features(&k, &[64, 64, 64], &[], &big, 16).register_pressure > f.register_pressure);
}

#[test]
fn cpu_features_are_finite_on_sampled_configs() {
    let mut rng = StdRng::seed_from_u64(11);
    for (k, shapes) in kernels() {
        let e = extents_of(&k, &shapes);
        for lanes in [8, 16] {
            let t = CpuTemplate::new(&k, &e, lanes).unwrap();
            for n in 0..30 {
                let c = t.space().sample_uniform(&mut rng).unwrap();
                let cfg = t.decode(&c).unwrap();
                let f = cpu_features(&k, &e, &shapes, &cfg, lanes);
                let v = f.to_vec();
                assert_eq!(v.len(), CpuFeatures::NAMES.len());
                assert!(v.iter().all(|x| x.is_finite()), "{k} #{n}: {f:?}");
                assert!((0.0..=1.0).contains(&f.vector_utilisation), "{f:?}");
                assert!(f.last_round_fill > 0.0 && f.last_round_fill <= 1.0, "{f:?}");
            }
        }
    }
}

/// 5-fold cross-validated ranking accuracy of a forest on `features`: every point is
/// predicted by a model trained on the other folds (points interleaved by position).
fn cv_accuracy(features: &[Vec<f64>], scores: &[f64]) -> f64 {
    const FOLDS: usize = 5;
    let mut preds = vec![0.0; features.len()];
    for fold in 0..FOLDS {
        let (mut fx, mut fy) = (Vec::new(), Vec::new());
        for j in (0..features.len()).filter(|j| j % FOLDS != fold) {
            fx.push(features[j].clone());
            fy.push(scores[j]);
        }
        let mut m = Forest::new(1);
        m.update(&fx, &fy);
        let test: Vec<usize> = (0..features.len()).filter(|j| j % FOLDS == fold).collect();
        let rows: Vec<Vec<f64>> = test.iter().map(|&j| features[j].clone()).collect();
        for (&j, p) in test.iter().zip(m.predict(&rows)) {
            preds[j] = p;
        }
    }
    tuner::pairwise_accuracy(&preds, scores)
}

#[test]
fn analytic_features_on_a_recorded_landscape() {
    let Some(dir) =
        std::env::var_os("TENSOR_DSL_LANDSCAPES").and_then(|d| std::fs::read_dir(d).ok())
    else {
        eprintln!("TENSOR_DSL_LANDSCAPES not set: skipped");
        return;
    };
    for entry in dir.flatten() {
        let path = entry.path();
        if path.extension().is_none_or(|x| x != "jsonl") {
            continue;
        }
        let Ok((records, _)) = tensor_dsl::records::read(&path) else {
            continue;
        };
        let Some(first) = records.first() else {
            continue;
        };
        let Ok(k) = parse_text("k", &first.kernel_text, None) else {
            continue;
        };
        let e = extents_of(&k, &first.shapes);
        let lanes = if first.target.detail.contains("avx512f") {
            16
        } else {
            8
        };
        let t = CpuTemplate::new(&k, &e, lanes).unwrap();
        let (mut knob, mut both, mut scores) = (Vec::new(), Vec::new(), Vec::new());
        for r in records.iter().filter(|r| r.shapes == first.shapes) {
            let Ok(c) = t.parse(&r.config) else {
                continue;
            };
            let Ok(cfg) = t.decode(&c) else { continue };
            let kf = t.space().to_features(&c).unwrap();
            let mut bf = kf.clone();
            bf.extend(cpu_features(&k, &e, &r.shapes, &cfg, lanes).to_vec());
            knob.push(kf);
            both.push(bf);
            scores.push(r.gflops.map_or(f64::NAN, |g| g.max(1e-9).ln()));
        }
        // Invalid points score below every valid one.
        let floor = scores
            .iter()
            .copied()
            .filter(|s| s.is_finite())
            .fold(f64::INFINITY, f64::min);
        for s in &mut scores {
            if !s.is_finite() {
                *s = if floor.is_finite() { floor - 1.0 } else { 0.0 };
            }
        }
        if scores.len() < 20 {
            eprintln!(
                "{}: {} usable records, skipped",
                path.display(),
                scores.len()
            );
            continue;
        }
        println!(
            "{}: {} records, 5-fold pairwise accuracy knob {:.3}, knob+analytic {:.3}",
            path.display(),
            scores.len(),
            cv_accuracy(&knob, &scores),
            cv_accuracy(&both, &scores)
        );
    }
}
