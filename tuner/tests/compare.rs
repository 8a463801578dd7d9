//! The synthetic comparison: trials to reach 95% of the optimum, per strategy, over five
//! seeds, on the GPU-like and CPU-like landscapes of `common`. Prints a table; run with
//! `cargo test -p tuner --test compare -- --ignored --nocapture`. Not a pass/fail test
//! (`strategies.rs` holds the assertions); ignored by default to keep `cargo test` fast.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::Instant;

use common::Landscape;
use tuner::cost_model::{CostModel, Forest};
use tuner::strategy::{by_name, STRATEGY_NAMES};
use tuner::{tune, Budget};

const SEEDS: u64 = 5;

/// Trials to reach 95% (`None`: not within the budget) and the best reached, as a share of
/// the optimum's throughput.
fn run(l: &Landscape, name: &str, budget: &Budget, seed: u64, noise: f64) -> (Option<usize>, f64) {
    let mut strategy = by_name(name, budget).unwrap();
    // Every strategy gets the same learned model; those that ignore it only pay its time.
    let mut forest = Forest::new(seed);
    let model: &mut dyn CostModel = &mut forest;
    let mut measurer = if noise > 0.0 {
        l.noisy_measurer(noise, seed)
    } else {
        l.measurer()
    };
    let features = l.features();
    let r = tune(
        &l.space,
        strategy.as_mut(),
        model,
        &features,
        &mut measurer,
        budget,
        seed,
        &mut |_| {},
    );
    // Judge by the true (noise-free) time of the best measured config, trial by trial.
    let mut best = f64::INFINITY;
    let mut reached = None;
    for (i, t) in r.trials.iter().enumerate() {
        if let Some(s) = (l.time)(&t.config) {
            best = best.min(s);
        }
        if reached.is_none() && best <= l.target() {
            reached = Some(i + 1);
        }
    }
    (reached, l.optimum / best)
}

fn table(l: &Landscape, trials: usize, noise: f64) {
    let budget = Budget::new(trials);
    println!(
        "\n{} — trials to 95% of the optimum within {trials} (noise {noise}); best share at {trials}",
        l.name
    );
    println!("| strategy | median | min | max | reached | median best | time |");
    println!("|---|---|---|---|---|---|---|");
    for name in STRATEGY_NAMES {
        let start = Instant::now();
        let mut hits: Vec<Option<usize>> = Vec::new();
        let mut shares = Vec::new();
        for seed in 0..SEEDS {
            let (hit, share) = run(l, name, &budget, seed, noise);
            hits.push(hit);
            shares.push(share);
        }
        // Misses sort last (as "more than the budget").
        let mut keys: Vec<usize> = hits.iter().map(|h| h.unwrap_or(usize::MAX)).collect();
        keys.sort_unstable();
        let show = |k: usize| {
            if k == usize::MAX {
                format!(">{trials}")
            } else {
                k.to_string()
            }
        };
        shares.sort_by(f64::total_cmp);
        println!(
            "| {name} | {} | {} | {} | {}/{SEEDS} | {:.3} | {:.1?} |",
            show(keys[keys.len() / 2]),
            show(keys[0]),
            show(keys[keys.len() - 1]),
            hits.iter().filter(|h| h.is_some()).count(),
            shares[shares.len() / 2],
            start.elapsed() / SEEDS as u32,
        );
    }
}

#[test]
#[ignore = "benchmark: run with --ignored --nocapture"]
fn compare_synthetic() {
    let trials: usize = std::env::var("COMPARE_TRIALS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(64);
    let noise: f64 = std::env::var("COMPARE_NOISE")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0);
    for l in [common::gpu_landscape(), common::cpu_landscape()] {
        table(&l, trials, noise);
    }
}
