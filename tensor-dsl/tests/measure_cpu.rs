//! The CPU measurer: good candidates are timed, bad ones (planted: a crash, a hang, a wrong
//! result, a compile error) are invalid, and none of them stops the batch.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use rand::{rngs::StdRng, SeedableRng};
use std::collections::HashSet;
use std::time::Duration;
use tensor_dsl::ir::parse_text;
use tensor_dsl::measure::cpu::CpuMeasurer;
use tensor_dsl::template::cpu::CpuTemplate;
use tuner::{Measurer, Outcome};

const ENTRY: &str = "void td_kernel(const void *const *args, void *out)\n{";

#[test]
fn bad_candidates_are_invalid_and_do_not_stop_the_batch() {
    let k = parse_text(
        "mm",
        "c[[i,j]] += a[[i,k]] * b[[k,j]]; c[[i,j]] = relu(c[[i,j]])",
        None,
    )
    .unwrap();
    let shapes = vec![vec![33, 20], vec![20, 17], vec![33, 17]];
    let template = CpuTemplate::new(&k, &[33, 17, 20], 16).unwrap();
    let mut rng = StdRng::seed_from_u64(5);
    let mut batch = vec![template.default_config()];
    let mut seen: HashSet<_> = batch.iter().cloned().collect();
    while batch.len() < 8 {
        let c = template.space().sample_uniform(&mut rng).unwrap();
        if seen.insert(c.clone()) {
            batch.push(c);
        }
    }
    let planted: Vec<(tuner::Config, &str, &str)> = vec![
        (batch[1].clone(), "__builtin_trap();", "crashed"),
        (
            batch[2].clone(),
            "volatile int spin = 1; while (spin) {}",
            "timed out",
        ),
        (
            batch[3].clone(),
            "((float *)out)[0] = 12345.0f; return;",
            "wrong result",
        ),
        (batch[4].clone(), "this is not C;", "does not compile"),
    ];
    let hooks = planted.clone();
    let mut m = CpuMeasurer::new(&k, &shapes, template)
        .unwrap()
        .with_source_hook(Box::new(move |config, src| {
            match hooks.iter().find(|(c, _, _)| c == config) {
                Some((_, code, _)) => src.replacen(ENTRY, &format!("{ENTRY}\n    {code}"), 1),
                None => src,
            }
        }));
    m.timeout = Duration::from_secs(3);
    m.min_seconds = 0.01;
    // Every good candidate gets its 3 runs (none is cut short for being slow).
    m.slow_factor = 0.0;
    let outcomes = m.measure(&batch);
    assert_eq!(outcomes.len(), batch.len());
    for (config, outcome) in batch.iter().zip(&outcomes) {
        match planted.iter().find(|(c, _, _)| c == config) {
            Some((_, _, want)) => match outcome {
                Outcome::Invalid { reason } => assert!(reason.contains(want), "{want}: {reason}"),
                Outcome::Valid { .. } => panic!("planted `{want}` measured as valid"),
            },
            None => match outcome {
                Outcome::Valid { samples } => {
                    assert!(
                        samples.len() >= 3 && samples.iter().all(|&s| s > 0.0),
                        "{samples:?}"
                    )
                }
                Outcome::Invalid { reason } => panic!("good candidate invalid: {reason}"),
            },
        }
    }
    // The measurer keeps working after the bad batch.
    let again = m.measure(&batch[..1]);
    assert!(again[0].is_valid(), "{:?}", again[0]);
}

/// A small matmul task, its template and `n` distinct points (the default first).
fn task(
    n: usize,
    seed: u64,
) -> (
    tensor_dsl::Kernel,
    Vec<Vec<usize>>,
    CpuTemplate,
    Vec<tuner::Config>,
) {
    let k = parse_text("mm", "c[[i,j]] += a[[i,k]] * b[[k,j]]", None).unwrap();
    let shapes = vec![vec![24, 19], vec![19, 31], vec![24, 31]];
    let template = CpuTemplate::new(&k, &[24, 31, 19], 16).unwrap();
    let mut rng = StdRng::seed_from_u64(seed);
    let mut batch = vec![template.default_config()];
    let mut seen: HashSet<_> = batch.iter().cloned().collect();
    while batch.len() < n {
        let c = template.space().sample_uniform(&mut rng).unwrap();
        if seen.insert(c.clone()) {
            batch.push(c);
        }
    }
    (k, shapes, template, batch)
}

/// [`task`]'s batch measured once (briefly), every point valid: the measurer and the batch.
fn measured_task(n: usize, seed: u64) -> (CpuMeasurer, Vec<tuner::Config>) {
    let (k, shapes, template, batch) = task(n, seed);
    let mut m = CpuMeasurer::new(&k, &shapes, template).unwrap();
    m.min_seconds = 0.005;
    let first = m.measure(&batch);
    assert!(first.iter().all(Outcome::is_valid), "{first:?}");
    (m, batch)
}

/// Candidates built together into one object and run in one runner: a crash, a hang and a
/// wrong result (no compile error, so every share of the batch is one object) invalidate
/// only their own candidate; every other one, before and after each of them, is timed.
#[test]
fn a_bad_candidate_inside_a_shared_object_only_invalidates_itself() {
    let (k, shapes, template, batch) = task(10, 7);
    let planted: Vec<(tuner::Config, &str, &str)> = vec![
        (batch[2].clone(), "__builtin_trap();", "crashed"),
        (
            batch[3].clone(),
            "((float *)out)[5] = -7.0f; return;",
            "wrong result",
        ),
        (
            batch[6].clone(),
            "volatile int spin = 1; while (spin) {}",
            "timed out",
        ),
        (
            batch[7].clone(),
            "*(volatile float *)args[0] = 1.0f;",
            "crashed",
        ),
    ];
    let hooks = planted.clone();
    let mut m = CpuMeasurer::new(&k, &shapes, template)
        .unwrap()
        .with_source_hook(Box::new(move |config, src| {
            match hooks.iter().find(|(c, _, _)| c == config) {
                Some((_, code, _)) => src.replacen(ENTRY, &format!("{ENTRY}\n    {code}"), 1),
                None => src,
            }
        }));
    m.timeout = Duration::from_secs(3);
    m.min_seconds = 0.01;
    let outcomes = m.measure(&batch);
    assert_eq!(outcomes.len(), batch.len());
    for (n, (config, outcome)) in batch.iter().zip(&outcomes).enumerate() {
        match (planted.iter().find(|(c, _, _)| c == config), outcome) {
            (Some((_, _, want)), Outcome::Invalid { reason }) => {
                assert!(reason.contains(want), "candidate {n}, {want}: {reason}")
            }
            (Some((_, _, want)), Outcome::Valid { .. }) => {
                panic!("candidate {n}: planted `{want}` measured as valid")
            }
            (None, Outcome::Valid { samples }) => assert!(!samples.is_empty()),
            (None, Outcome::Invalid { reason }) => panic!("good candidate {n} invalid: {reason}"),
        }
    }
}

/// Measuring points together in one batch (shared objects, one runner) or one batch each
/// gives the same verdicts: all valid, each checked against the same expected output.
#[test]
fn batching_does_not_change_results() {
    let (k, shapes, template, batch) = task(6, 11);
    let mut together = CpuMeasurer::new(&k, &shapes, template.clone()).unwrap();
    together.min_seconds = 0.005;
    let mut alone = CpuMeasurer::new(&k, &shapes, template).unwrap();
    alone.min_seconds = 0.005;
    let a = together.measure(&batch);
    let b: Vec<Outcome> = batch
        .iter()
        .map(|c| alone.measure(std::slice::from_ref(c)).remove(0))
        .collect();
    for (n, (x, y)) in a.iter().zip(&b).enumerate() {
        assert!(x.is_valid() && y.is_valid(), "candidate {n}: {x:?} / {y:?}");
    }
    assert_eq!(together.timings().batches, 1);
    assert_eq!(alone.timings().batches, batch.len());
    assert_eq!(together.timings().candidates, alone.timings().candidates);
}

/// Repeats are capped by confidence: with any spread accepted a fast candidate stops after
/// 8 runs, and a candidate far slower than the best so far is not repeated (one sample).
#[test]
fn repeats_stop_when_the_time_is_known_or_the_candidate_is_slow() {
    let (k, shapes, template, batch) = task(2, 3);
    let slow = batch[1].clone();
    let mut m = CpuMeasurer::new(&k, &shapes, template)
        .unwrap()
        .with_source_hook(Box::new(move |config, src| {
            if *config == slow {
                let code =
                    "volatile long spin = 0; for (long q = 0; q < 100000000; ++q) spin += q;";
                src.replacen(ENTRY, &format!("{ENTRY}\n    {code}"), 1)
            } else {
                src
            }
        }));
    m.spread = 1e9;
    m.min_seconds = 10.0;
    let fast = m.measure(&batch[..1]);
    match &fast[0] {
        Outcome::Valid { samples } => assert_eq!(samples.len(), 8, "{samples:?}"),
        o => panic!("{o:?}"),
    }
    let slow = m.measure(&batch[1..]);
    match &slow[0] {
        Outcome::Valid { samples } => assert_eq!(samples.len(), 1, "{samples:?}"),
        o => panic!("{o:?}"),
    }
}

/// A remeasurement (Droplet asks for them) runs the object already built, in the same
/// runner, instead of compiling the point again.
#[test]
fn a_remeasured_point_is_not_compiled_again() {
    let (mut m, batch) = measured_task(3, 5);
    assert_eq!(m.timings().built, 3);
    let again = m.remeasure(&batch[1]);
    assert!(again.is_valid(), "{again:?}");
    assert_eq!(m.timings().built, 3);
    assert_eq!(m.timings().candidates, 4);
}

/// Constant inputs are timed packed ahead: with the weights of a convolution named
/// constant, the candidates run `td_kernel_prepacked` on weights `td_prepack` packed once
/// (the entry that packs them at every call is planted to write a wrong result, so only
/// the prepacked call can pass the check); without, they run that entry and are invalid,
/// as they are with only the input no candidate packs (`x`) named constant.
#[test]
fn constant_inputs_are_timed_packed_ahead() {
    let k = parse_text(
        "conv",
        "y[[n, f, p, q]] += x[[n, c, p + r - 1, q + s - 1]] * w[[f, c, r, s]]",
        None,
    )
    .unwrap();
    let shapes = vec![vec![1, 5, 6, 7], vec![20, 5, 3, 3], vec![1, 20, 6, 7]];
    let template = CpuTemplate::new(&k, &[1, 20, 6, 7, 5, 3, 3], 16).unwrap();
    let mut rng = StdRng::seed_from_u64(3);
    let mut batch = vec![template.default_config()];
    while batch.len() < 4 {
        let c = template.space().sample_uniform(&mut rng).unwrap();
        if !batch.contains(&c) {
            batch.push(c);
        }
    }
    let wrong = "((float *)out)[0] = 12345.0f; return;";
    let measurer = |constant: &[usize]| {
        let mut m = CpuMeasurer::new(&k, &shapes, template.clone())
            .unwrap()
            .with_constant_inputs(constant)
            .with_source_hook(Box::new(move |_, src| {
                src.replacen(ENTRY, &format!("{ENTRY}\n    {wrong}"), 1)
            }));
        m.min_seconds = 0.01;
        m
    };
    for o in measurer(&[1]).measure(&batch) {
        assert!(o.is_valid(), "{o:?}");
    }
    for o in measurer(&[]).measure(&batch) {
        assert!(!o.is_valid(), "{o:?}");
    }
    // The data input named constant: no candidate packs it, each runs its usual entry.
    for o in measurer(&[0]).measure(&batch) {
        assert!(!o.is_valid(), "{o:?}");
    }
}

/// `vary` moves the runner's buffers to fresh pages before the next candidate: the inputs
/// arrive intact (every remeasurement is checked against the expected output), in the same
/// runner (nothing is compiled again).
#[test]
fn remeasurements_after_vary_run_on_moved_buffers() {
    let (mut m, batch) = measured_task(2, 7);
    for round in 0..3 {
        m.vary();
        for c in &batch {
            let again = m.remeasure(c);
            assert!(again.is_valid(), "round {round}: {again:?}");
        }
    }
    assert_eq!(m.timings().built, 2);
    assert_eq!(m.timings().moves, 3);
}

/// Two points remeasured side by side (what the search's last step does with the winner and
/// the default): both checked and timed, each for `PAIR_SECONDS` of calls, in the runner
/// that already has them loaded, after a move of the buffers too.
#[test]
fn a_pair_is_remeasured_side_by_side_without_compiling_again() {
    let (mut m, batch) = measured_task(2, 9);
    m.vary();
    let [a, b] = m.remeasure_pair(&batch[0], &batch[1]);
    for o in [&a, &b] {
        match o {
            Outcome::Valid { samples } => {
                let total: f64 = samples.iter().sum();
                assert!(samples.len() >= 2, "{o:?}");
                assert!(
                    total >= 0.9 * tensor_dsl::measure::cpu::PAIR_SECONDS,
                    "{total}"
                );
            }
            Outcome::Invalid { .. } => panic!("{o:?}"),
        }
    }
    assert_eq!(m.timings().built, 2);
    assert_eq!(m.timings().moves, 1);
}

/// In a pair, a wrong result invalidates only its own point; a point whose object was
/// deleted is built again first.
#[test]
fn a_pair_checks_both_outputs() {
    let (k, shapes, template, batch) = task(2, 11);
    let bad = batch[1].clone();
    let mut m = CpuMeasurer::new(&k, &shapes, template)
        .unwrap()
        .with_source_hook(Box::new(move |config, src| {
            if *config == bad {
                src.replacen(
                    ENTRY,
                    &format!("{ENTRY}\n    ((float *)out)[0] = 12345.0f; return;"),
                    1,
                )
            } else {
                src
            }
        }));
    m.min_seconds = 0.005;
    let [a, b] = m.remeasure_pair(&batch[0], &batch[1]);
    assert!(a.is_valid(), "{a:?}");
    assert!(!b.is_valid(), "{b:?}");
    assert_eq!(m.timings().built, 2);
}
