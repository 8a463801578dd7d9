//! Transfer: records of other shapes (and kernels) teach the cost model before a run
//! measures anything, and the zero-trial pick follows their pattern. The records are
//! synthesized from a landscape with a known best pattern (the mechanism is tested, not
//! speed), so nothing here compiles or measures.
#![allow(clippy::unwrap_used)]

use tensor_dsl::autotune::{tune_cpu, TuneOptions, PICK_STRATEGY};
use tensor_dsl::codegen::c::CODEGEN_VERSION;
use tensor_dsl::ir::{bind, parse_text, Kernel};
use tensor_dsl::records::{self, Record, RECORD_VERSION};
use tensor_dsl::runtime::cpu::simd_lanes;
use tensor_dsl::template::cpu::{CpuConfig, CpuTemplate};
use tensor_dsl::transfer::{cpu_prior, cpu_transfer_features, model_pick, pick};
use tuner::{CostModel, Forest};

fn matmul() -> Kernel {
    parse_text("mm", "c[[i,j]] += a[[i,k]] * b[[k,j]]", None).unwrap()
}

fn mm_shapes(m: usize, k: usize, n: usize) -> Vec<Vec<usize>> {
    vec![vec![m, k], vec![k, n], vec![m, n]]
}

/// The landscape's best pattern: one SIMD register wide on the innermost output axis,
/// unrolled 2 deep on the next, parallel, no packing, no reduction blocking. The
/// template's default (two registers wide, unrolled 4 or 8, packed) is not it.
fn pattern_cost(kernel: &Kernel, cfg: &CpuConfig) -> f64 {
    let lanes = simd_lanes() as f64;
    let spatial = kernel.spatial();
    let mut cost = 1.0;
    cost += ((cfg.vector as f64) / lanes).log2().abs();
    cost += 0.5 * ((cfg.unroll as f64) / 2.0).log2().abs();
    cost += if cfg.pack { 0.6 } else { 0.0 };
    cost += if cfg.parallel { 0.0 } else { 1.5 };
    cost += if cfg.unroll_outer { 0.3 } else { 0.0 };
    cost += if cfg.k_block > 0 { 0.4 } else { 0.0 };
    cost += if cfg.wide_simd { 0.2 } else { 0.0 };
    if cfg.vector_axis != spatial.last().copied() {
        cost += 2.0;
    }
    if spatial.len() >= 2 && cfg.unroll_axis != Some(spatial[spatial.len() - 2]) {
        cost += 0.7;
    }
    cost
}

fn is_pattern(kernel: &Kernel, cfg: &CpuConfig) -> bool {
    let spatial = kernel.spatial();
    cfg.vector == simd_lanes()
        && cfg.unroll == 2
        && !cfg.pack
        && cfg.parallel
        && !cfg.unroll_outer
        && cfg.k_block == 0
        && !cfg.wide_simd
        && cfg.vector_axis == spatial.last().copied()
        && cfg.unroll_axis == Some(spatial[spatial.len() - 2])
}

/// Records of 300 points of `kernel` at `shapes` (uniform samples and the landscape's
/// best), timed by [`pattern_cost`]: what tuning that shape would have left in the cache.
fn landscape_records(kernel: &Kernel, shapes: &[Vec<usize>]) -> Vec<Record> {
    use rand::SeedableRng;
    let refs: Vec<&[usize]> = shapes.iter().map(Vec::as_slice).collect();
    let extents = bind(kernel, &refs).unwrap();
    let template = CpuTemplate::new(kernel, &extents, simd_lanes()).unwrap();
    let space = template.space();
    let scale = kernel.flops(&extents) * 1e-10;
    let mut rng = rand::rngs::StdRng::seed_from_u64(shapes[0][0] as u64);
    let mut points: Vec<tuner::Config> = (0..300)
        .filter_map(|_| space.sample_uniform(&mut rng).ok())
        .collect();
    let best = space
        .enumerate(1_000_000)
        .unwrap()
        .into_iter()
        .filter(|c| is_pattern(kernel, &template.decode(c).unwrap()))
        .collect::<Vec<_>>();
    points.extend(best);
    points
        .into_iter()
        .map(|c| {
            let cfg = template.decode(&c).unwrap();
            let s = scale * pattern_cost(kernel, &cfg);
            Record {
                version: RECORD_VERSION,
                kernel: kernel.fingerprint(),
                name: kernel.name.clone(),
                kernel_text: kernel.to_string(),
                shapes: shapes.to_vec(),
                dtype: records::dtype_key(kernel),
                target: tensor_dsl::tuned::this_cpu().clone(),
                codegen: CODEGEN_VERSION,
                config: space.format(&c).unwrap(),
                seconds: Some(s),
                samples: vec![s],
                error: None,
                gflops: None,
                strategy: "landscape".into(),
                unix_time: 0,
                pair: None,
            }
        })
        .collect()
}

/// The pick (the model's alone with `by_model`) for `kernel` at `shapes` from `records`,
/// decoded, and the default.
fn pick_for(
    kernel: &Kernel,
    shapes: &[Vec<usize>],
    recs: &[Record],
    by_model: bool,
) -> (CpuConfig, CpuConfig) {
    let refs: Vec<&[usize]> = shapes.iter().map(Vec::as_slice).collect();
    let extents = bind(kernel, &refs).unwrap();
    let lanes = simd_lanes();
    let template = CpuTemplate::new(kernel, &extents, lanes).unwrap();
    let prior = cpu_prior(kernel, shapes, recs);
    let mut model = Forest::new(0);
    prior.teach(&mut model);
    let features = |c: &tuner::Config| {
        cpu_transfer_features(kernel, &extents, &template.decode(c).unwrap(), lanes)
    };
    let default = template.default_config();
    let p = if by_model {
        model_pick(
            template.space(),
            &default,
            &prior.candidates,
            &model,
            &features,
            0,
        )
    } else {
        pick(template.space(), Some(&default), &prior, None).unwrap()
    };
    (
        template.decode(&p).unwrap(),
        template.decode(&default).unwrap(),
    )
}

#[test]
fn the_zero_trial_pick_follows_the_pattern_of_other_shapes() {
    let k = matmul();
    let mut recs = landscape_records(&k, &mm_shapes(64, 64, 64));
    recs.extend(landscape_records(&k, &mm_shapes(128, 256, 64)));
    let target = mm_shapes(96, 192, 160);
    let (picked, default) = pick_for(&k, &target, &recs, false);
    assert!(
        !is_pattern(&k, &default),
        "the default is already the pattern"
    );
    assert!(is_pattern(&k, &picked), "picked {picked:?}");
    // The model alone, extrapolating to the new shape, comes close: at most one knob off
    // the pattern, and far better than the default on the landscape.
    let (by_model, _) = pick_for(&k, &target, &recs, true);
    assert!(
        pattern_cost(&k, &by_model) <= 1.5 && pattern_cost(&k, &default) > 2.0,
        "model picked {by_model:?} ({}), default {}",
        pattern_cost(&k, &by_model),
        pattern_cost(&k, &default)
    );

    // The prior: both shapes, weighted below the tuned shape itself, ranked right.
    let prior = cpu_prior(&k, &target, &recs);
    assert_eq!(prior.keys, 2);
    assert!(prior.weights.iter().all(|w| *w > 0.0 && *w < 1.0));
    assert!(prior.scores.iter().all(|s| *s <= 0.0));
    let mut model = Forest::new(1);
    prior.teach(&mut model);
    let acc = tuner::pairwise_accuracy(&model.predict(&prior.features), &prior.scores);
    assert!(acc > 0.9, "pairwise accuracy on the prior {acc}");
}

#[test]
fn without_records_the_pick_is_the_default() {
    let k = matmul();
    let target = mm_shapes(96, 192, 160);
    let (picked, default) = pick_for(&k, &target, &[], false);
    assert_eq!(picked, default);
}

#[test]
fn another_kernel_of_the_template_teaches_the_model_but_does_not_make_the_pick() {
    // A batched matmul's records: the roles (innermost output axis vectorized, the next
    // unrolled) carry over to a plain matmul, and the model learns them ...
    let bmm = parse_text("bmm", "c[[b,i,j]] += a[[b,i,k]] * w[[b,k,j]]", None).unwrap();
    let mut recs = landscape_records(&bmm, &[vec![2, 64, 64], vec![2, 64, 64], vec![2, 64, 64]]);
    recs.extend(landscape_records(
        &bmm,
        &[vec![4, 32, 128], vec![4, 128, 64], vec![4, 32, 64]],
    ));
    let k = matmul();
    let (by_model, default) = pick_for(&k, &mm_shapes(96, 192, 160), &recs, true);
    assert!(
        pattern_cost(&k, &by_model) <= 1.5 && pattern_cost(&k, &default) > 2.0,
        "model picked {by_model:?} ({})",
        pattern_cost(&k, &by_model)
    );
    // ... but with no measurement of this kernel the pick (the one point a zero-trial
    // run uses) stays the analytic default: a model that extrapolates from other kernels
    // once picked a schedule 100x slower than the default on a real cache.
    let (picked, default) = pick_for(&k, &mm_shapes(96, 192, 160), &recs, false);
    assert_eq!(picked, default);
}

#[test]
fn tune_cpu_with_zero_trials_returns_the_pick_unmeasured() {
    let dir = std::env::temp_dir().join(format!("td-transfer-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let k = matmul();
    let mut recs = landscape_records(&k, &mm_shapes(64, 64, 64));
    recs.extend(landscape_records(&k, &mm_shapes(128, 256, 64)));
    records::write(&dir.join("records.jsonl"), &recs).unwrap();
    let shapes = mm_shapes(96, 192, 160);
    let opts = TuneOptions {
        trials: 0,
        ..TuneOptions::default()
    };
    let out = records::with_cache_dir(Some(&dir), || {
        tune_cpu(&k, &shapes, &opts, &mut |_| panic!("nothing is measured")).unwrap()
    });
    let (best, text) = out.best.clone().unwrap();
    assert!(is_pattern(&k, &best), "picked {best:?}");
    assert_eq!(out.pick.as_deref(), Some(text.as_str()));
    assert_eq!(out.best_seconds, None);
    assert_eq!(out.prior_keys, 2);
    // Recorded as a pick, not a measurement.
    assert_eq!(out.records.len(), 1);
    let r = &out.records[0];
    assert_eq!((r.seconds, r.error.as_deref()), (None, None));
    assert_eq!(r.strategy, PICK_STRATEGY);
    assert!(
        out.summary().contains("without measuring"),
        "{}",
        out.summary()
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn measured_records_of_other_shapes_steer_the_next_run() {
    // Real records: tune two small shapes briefly, each run saving to the cache as
    // first-call tuning does.
    let dir = std::env::temp_dir().join(format!("td-transfer-real-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let k = matmul();
    let opts = TuneOptions {
        trials: 6,
        batch: 3,
        ..TuneOptions::default()
    };
    let file = dir.join("records.jsonl");
    let mut tuned = Vec::new();
    for shapes in [mm_shapes(32, 64, 48), mm_shapes(64, 32, 64)] {
        let out = records::with_cache_dir(Some(&dir), || {
            tune_cpu(&k, &shapes, &opts, &mut |_| {}).unwrap()
        });
        records::append(&file, &out.records).unwrap();
        tuned.push(out);
    }
    // The second run learned from the first: its first measurement is its pick, and the
    // default was measured too.
    let second = &tuned[1];
    assert_eq!(second.prior_keys, 1);
    assert_eq!(
        second.pick.as_deref(),
        Some(second.records[0].config.as_str())
    );
    assert!(second.default_seconds.is_some());
    assert!(second
        .model_accuracy
        .is_some_and(|a| (0.0..=1.0).contains(&a)));

    // A zero-trial run for a third shape picks a schedule those runs measured among
    // their best, without measuring.
    let shapes = mm_shapes(48, 48, 40);
    let zero = TuneOptions {
        trials: 0,
        ..opts.clone()
    };
    let out = records::with_cache_dir(Some(&dir), || {
        tune_cpu(&k, &shapes, &zero, &mut |_| panic!("nothing is measured")).unwrap()
    });
    assert_eq!(out.prior_keys, 2);
    let picked = out.pick.clone().unwrap();
    let top: Vec<String> = tuned
        .iter()
        .flat_map(|t| {
            let mut valid: Vec<&Record> =
                t.records.iter().filter(|r| r.seconds.is_some()).collect();
            valid.sort_by(|a, b| a.seconds.unwrap().total_cmp(&b.seconds.unwrap()));
            valid.into_iter().take(3).map(|r| r.config.clone())
        })
        .collect();
    assert!(
        top.contains(&picked),
        "picked {picked}, best measured {top:?}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn cuda_records_of_other_shapes_make_a_prior_and_a_pick_without_a_gpu() {
    use rand::SeedableRng;
    use tensor_dsl::template::cuda::CudaSpace;
    use tensor_dsl::template::gpu::GpuTarget;
    use tensor_dsl::transfer::{cuda_features, cuda_prior};

    let k = matmul();
    let gpu = GpuTarget::h100();
    let space_of = |shapes: &[Vec<usize>]| {
        let refs: Vec<&[usize]> = shapes.iter().map(Vec::as_slice).collect();
        let extents = bind(&k, &refs).unwrap();
        (CudaSpace::new(&k, &extents, &refs, &gpu).unwrap(), extents)
    };
    let others = [mm_shapes(256, 256, 256), mm_shapes(256, 512, 256)];
    let target = mm_shapes(512, 256, 256);
    let (tspace, textents) = space_of(&target);
    let (s0, _) = space_of(&others[0]);
    let (s1, _) = space_of(&others[1]);
    // A schedule that is a point of all three spaces: the best at both other shapes.
    let mut rng = rand::rngs::StdRng::seed_from_u64(5);
    let star = (0..2000)
        .filter_map(|_| tspace.space().sample_uniform(&mut rng).ok())
        .map(|c| tspace.space().format(&c).unwrap())
        .find(|t| {
            let ok = |s: &CudaSpace| s.space().parse(t).is_ok_and(|c| s.space().is_valid(&c));
            ok(&s0)
                && ok(&s1)
                && *t
                    != tspace
                        .space()
                        .format(&tspace.default_point().unwrap())
                        .unwrap()
        })
        .expect("a schedule valid at every shape");
    let mut recs = Vec::new();
    for (shapes, space) in [(&others[0], &s0), (&others[1], &s1)] {
        let mut texts = vec![star.clone()];
        texts.extend(
            (0..40)
                .filter_map(|_| space.space().sample_uniform(&mut rng).ok())
                .map(|c| space.space().format(&c).unwrap())
                .filter(|t| *t != star),
        );
        for (i, text) in texts.into_iter().enumerate() {
            let s = 1e-4 * (1.0 + i as f64 * 0.1);
            recs.push(Record {
                version: RECORD_VERSION,
                kernel: k.fingerprint(),
                name: "mm".into(),
                kernel_text: k.to_string(),
                shapes: shapes.clone(),
                dtype: records::dtype_key(&k),
                target: records::Target::cuda(&gpu.name, gpu.sm),
                codegen: tensor_dsl::codegen::cuda::CODEGEN_VERSION,
                config: text,
                seconds: Some(s),
                samples: vec![s],
                error: None,
                gflops: None,
                strategy: "synthetic".into(),
                unix_time: 0,
                pair: None,
            });
        }
    }
    let prior = cuda_prior(&k, &target, &gpu, &recs);
    assert_eq!(prior.keys, 2);
    let features = cuda_features(&k, &textents, &target, &tspace, &gpu);
    let width = features(&tspace.default_point().unwrap()).len();
    assert!(prior.features.iter().all(|f| f.len() == width));
    let mut model = Forest::new(0);
    prior.teach(&mut model);
    let default = tspace.default_point().unwrap();
    let p = pick(tspace.space(), Some(&default), &prior, None).unwrap();
    assert_eq!(tspace.space().format(&p).unwrap(), star);
    // The model's own pick is a valid point too.
    let m = model_pick(
        tspace.space(),
        &default,
        &prior.candidates,
        &model,
        &features,
        0,
    );
    assert!(tspace.space().is_valid(&m));
}

/// `landscape_records` with each shape's own template default recorded too, at `cost`
/// times the landscape's unit (the pattern costs 1).
fn with_default(kernel: &Kernel, shapes: &[Vec<usize>], cost: f64) -> Vec<Record> {
    let mut recs = landscape_records(kernel, shapes);
    let refs: Vec<&[usize]> = shapes.iter().map(Vec::as_slice).collect();
    let extents = bind(kernel, &refs).unwrap();
    let template = CpuTemplate::new(kernel, &extents, simd_lanes()).unwrap();
    let text = template.space().format(&template.default_config()).unwrap();
    recs.retain(|r| r.config != text);
    let mut d = recs[0].clone();
    let s = kernel.flops(&extents) * 1e-10 * cost;
    d.config = text;
    d.seconds = Some(s);
    d.samples = vec![s];
    recs.push(d);
    recs
}

#[test]
fn the_default_is_picked_where_it_did_best_on_the_other_shapes() {
    // On the other shapes each shape's own default beat every other schedule (as on
    // matmuls): a per-shape rule beats any one transferred schedule.
    let k = matmul();
    let mut recs = with_default(&k, &mm_shapes(64, 64, 64), 0.5);
    recs.extend(with_default(&k, &mm_shapes(128, 256, 64), 0.5));
    let target = mm_shapes(96, 192, 160);
    let prior = cpu_prior(&k, &target, &recs);
    assert!(
        prior.default_score.is_some_and(|d| d.abs() < 1e-9),
        "{:?}",
        prior.default_score
    );
    assert!(prior.prefers_default());
    let (picked, default) = pick_for(&k, &target, &recs, false);
    assert_eq!(picked, default);

    // Where the defaults were measured and slower (as on convolutions), the schedule
    // measured best on the other shapes is the pick.
    let mut recs = with_default(&k, &mm_shapes(64, 64, 64), 3.0);
    recs.extend(with_default(&k, &mm_shapes(128, 256, 64), 3.0));
    let prior = cpu_prior(&k, &target, &recs);
    assert!(prior.default_score.is_some_and(|d| d < -1.0));
    assert!(!prior.prefers_default());
    let (picked, _) = pick_for(&k, &target, &recs, false);
    assert!(is_pattern(&k, &picked), "picked {picked:?}");
}
