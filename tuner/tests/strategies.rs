//! Search strategies, the tune loop, the learned model and the replay measurer, on
//! synthetic landscapes over realistic spaces (see `common`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::collections::HashSet;
use std::rc::Rc;

use common::{cpu_landscape, gpu_landscape, jitter, Landscape};
use rand::rngs::StdRng;
use rand::SeedableRng;
use tuner::cost_model::{pairwise_accuracy, CostModel, Forest, Untrained};
use tuner::strategy::{
    by_name, Context, Droplet, SearchStrategy, Seeded, DEFAULT_STRATEGY, STRATEGY_NAMES,
};
use tuner::{
    tune, Budget, Config, Measurer, Outcome, ReplayMeasurer, SearchSpace, StopReason,
    SyntheticMeasurer, Trial, TuneResult,
};

/// Wraps a strategy and checks its contract on every call: proposals are valid, new
/// (neither measured nor proposed before), at most `max`; remeasure requests were measured.
struct Checked {
    inner: Box<dyn SearchStrategy>,
    proposed: HashSet<Config>,
    measured: HashSet<Config>,
    remeasured: usize,
}

impl Checked {
    fn new(inner: Box<dyn SearchStrategy>) -> Self {
        Checked {
            inner,
            proposed: HashSet::new(),
            measured: HashSet::new(),
            remeasured: 0,
        }
    }
}

impl SearchStrategy for Checked {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn propose(&mut self, ctx: &mut Context<'_>, max: usize) -> Vec<Config> {
        let batch = self.inner.propose(ctx, max);
        let name = self.inner.name().to_string();
        assert!(batch.len() <= max, "{name}: {} > {max}", batch.len());
        let history: HashSet<&Config> = ctx.history.iter().map(|t| &t.config).collect();
        for c in &batch {
            ctx.space
                .check(c)
                .unwrap_or_else(|e| panic!("{name} proposed an invalid config: {e}"));
            assert!(!history.contains(c), "{name} re-proposed a measured config");
            assert!(
                self.proposed.insert(c.clone()),
                "{name} proposed a config twice"
            );
        }
        batch
    }

    fn observe(&mut self, ctx: &mut Context<'_>, trials: &[Trial]) {
        for t in trials {
            self.measured.insert(t.config.clone());
        }
        self.inner.observe(ctx, trials);
    }

    fn wants_remeasure(&mut self) -> Vec<Config> {
        let again = self.inner.wants_remeasure();
        for c in &again {
            assert!(
                self.measured.contains(c),
                "asked to remeasure an unmeasured config"
            );
        }
        self.remeasured += again.len();
        again
    }
}

/// Runs strategy `name` through `Checked`, with a forest model where it uses one.
fn run_with(
    l: &Landscape,
    name: &str,
    budget: &Budget,
    seed: u64,
    measurer: &mut dyn Measurer,
) -> TuneResult {
    let mut strategy = Checked::new(by_name(name, budget).unwrap());
    // Only these rank with the model; the others get none, which keeps the tests fast.
    let mut forest = Forest::new(seed);
    let mut none = Untrained;
    let model: &mut dyn CostModel = match name {
        "evolutionary" | "dgd" | "combined" => &mut forest,
        _ => &mut none,
    };
    let features = l.features();
    tune(
        &l.space,
        &mut strategy,
        model,
        &features,
        measurer,
        budget,
        seed,
        &mut |_| {},
    )
}

fn run(l: &Landscape, name: &str, trials: usize, seed: u64) -> TuneResult {
    run_with(l, name, &Budget::new(trials), seed, &mut l.measurer())
}

/// The landscape with a hash-chosen half of its points failing, and everything failing
/// while fewer than `warmup` measurements were made.
fn half_invalid(l: &Landscape) -> Landscape {
    let time = l.time.clone();
    Landscape {
        name: "half-invalid",
        space: l.space.clone(),
        time: Rc::new(move |c: &Config| if jitter(c) < 0.5 { None } else { time(c) }),
        optimum: l.optimum,
    }
}

#[test]
fn by_name_knows_every_strategy() {
    let budget = Budget::new(64);
    for name in STRATEGY_NAMES {
        let s = by_name(name, &budget).unwrap();
        let expected = if *name == "opevo-droplet" {
            "combined(opevo+droplet)"
        } else {
            name
        };
        assert!(s.name().starts_with(expected), "{} for {name}", s.name());
    }
    assert!(by_name("default", &budget).is_some());
    assert!(by_name(DEFAULT_STRATEGY, &budget).is_some());
    assert!(by_name("Ansor", &budget).is_some());
    assert!(by_name("simulated-annealing", &budget).is_none());
}

#[test]
fn every_strategy_is_deterministic_for_a_seed() {
    for l in [gpu_landscape(), cpu_landscape()] {
        for name in STRATEGY_NAMES {
            let a = run(&l, name, 20, 3);
            let b = run(&l, name, 20, 3);
            assert_eq!(a.trials, b.trials, "{name} on {}", l.name);
            assert_eq!(a.history, b.history);
            let c = run(&l, name, 20, 4);
            assert_ne!(
                a.trials, c.trials,
                "{name} on {}: the seed changes nothing",
                l.name
            );
        }
    }
}

#[test]
fn no_strategy_repeats_a_configuration_and_budgets_hold() {
    for l in [gpu_landscape(), cpu_landscape()] {
        for name in STRATEGY_NAMES {
            for (trials, batch) in [(30, 8), (9, 1)] {
                let budget = Budget::new(trials).with_batch(batch);
                let r = run_with(&l, name, &budget, 11, &mut l.measurer());
                assert!(
                    r.trials.len() <= trials,
                    "{name}: {} trials",
                    r.trials.len()
                );
                assert_eq!(r.history.len(), r.trials.len());
                // Noise-free: nothing asks for remeasures, so every trial is a new config.
                let distinct: HashSet<&Config> = r.trials.iter().map(|t| &t.config).collect();
                assert_eq!(distinct.len(), r.trials.len(), "{name} on {}", l.name);
                if r.stopped != StopReason::Trials {
                    assert_eq!(name, &"droplet", "{name} stopped early: {:?}", r.stopped);
                }
            }
        }
    }
}

#[test]
fn a_time_budget_stops_the_loop() {
    let l = cpu_landscape();
    let budget = Budget::new(1000).with_seconds(0.0);
    let r = run_with(&l, "random", &budget, 1, &mut l.measurer());
    assert_eq!(r.stopped, StopReason::Time);
    assert!(r.trials.is_empty() && r.best.is_none());
}

#[test]
fn invalid_regions_do_not_stop_a_run() {
    for base in [gpu_landscape(), cpu_landscape()] {
        let l = half_invalid(&base);
        for name in STRATEGY_NAMES {
            let r = run(&l, name, 40, 5);
            let invalid = r.trials.iter().filter(|t| !t.outcome.is_valid()).count();
            assert!(invalid > 0, "{name}: the landscape should bite");
            assert!(r.best.is_some(), "{name} found nothing valid");
            if name != &"droplet" {
                assert_eq!(r.stopped, StopReason::Trials, "{name} on {}", base.name);
                assert_eq!(r.trials.len(), 40);
            }
        }
    }
    // Nothing valid at all: every strategy still spends its budget, without a best.
    let l = gpu_landscape();
    for name in STRATEGY_NAMES {
        let mut nothing = SyntheticMeasurer::new(|_| None);
        let r = run_with(&l, name, &Budget::new(20), 2, &mut nothing);
        assert_eq!(r.trials.len(), 20, "{name}");
        assert!(r.best.is_none() && r.history.iter().all(Option::is_none));
    }
}

/// Trials to 95% per seed (`usize::MAX` when not reached within `trials`), sorted.
fn trials_to_95(l: &Landscape, name: &str, trials: usize, seeds: u64) -> Vec<usize> {
    let mut out: Vec<usize> = (0..seeds)
        .map(|seed| {
            run(l, name, trials, seed)
                .trials_to_reach(l.target())
                .unwrap_or(usize::MAX)
        })
        .collect();
    out.sort_unstable();
    out
}

#[test]
fn the_default_strategy_reaches_95_percent_within_64_trials() {
    for l in [gpu_landscape(), cpu_landscape()] {
        let hits = trials_to_95(&l, DEFAULT_STRATEGY, 64, 5);
        println!("{DEFAULT_STRATEGY} on {}: {hits:?}", l.name);
        assert!(hits[2] <= 64, "median over 5 seeds on {}: {hits:?}", l.name);
    }
}

#[test]
fn model_guided_strategies_beat_random_search() {
    let l = gpu_landscape();
    let best_share = |name: &str| -> f64 {
        let mut shares: Vec<f64> = (0..3)
            .map(|seed| l.optimum / run(&l, name, 64, seed).best.unwrap().1)
            .collect();
        shares.sort_by(f64::total_cmp);
        shares[1]
    };
    let random = best_share("random");
    for name in ["evolutionary", "dgd", "opevo"] {
        let share = best_share(name);
        println!("{name}: median best {share:.3} (random {random:.3})");
        assert!(share > random, "{name}: {share} vs random {random}");
        assert!(share > 0.7, "{name}: {share}");
    }
}

#[test]
fn droplet_stops_at_a_local_optimum() {
    let l = cpu_landscape();
    for seed in 0..3 {
        let mut strategy = Droplet::new();
        let features = l.features();
        let r = tune(
            &l.space,
            &mut strategy,
            &mut Untrained,
            &features,
            &mut l.measurer(),
            &Budget::new(2000),
            seed,
            &mut |_| {},
        );
        assert_eq!(r.stopped, StopReason::Exhausted);
        assert!(strategy.converged());
        let at = strategy.current().unwrap().clone();
        let here = (l.time)(&at).unwrap();
        assert_eq!(
            r.best.as_ref().unwrap().0,
            at,
            "it stops at the best it measured"
        );
        let measured: HashSet<&Config> = r.trials.iter().map(|t| &t.config).collect();
        for c in l.space.neighbors(&at).unwrap() {
            assert!(measured.contains(&c), "a neighbour was never tried");
            assert!(
                (l.time)(&c).is_none_or(|t| t >= here),
                "a better neighbour was left"
            );
        }
    }
}

/// Two basins along one knob: a shallow one around x = 2 and the deep one at x = 8. Seeded
/// with a point of each (the shallow one slightly faster, as a transfer pick next to the
/// template's default can be), Droplet descends the first, then restarts from the other
/// seed and finds the optimum; without restarts it stops in the shallow basin.
#[test]
fn droplet_restarts_from_a_seed_in_another_basin() {
    let mut b = SearchSpace::builder();
    let x = b.discrete("x", &[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
    let space = b.build().unwrap();
    let times = [1.2, 1.1, 0.99, 1.1, 1.3, 1.2, 1.0, 0.8, 0.5, 0.7, 0.9];
    let s2 = space.clone();
    let time = move |c: &Config| Some(times[s2.discrete_value(c, x).unwrap() as usize] * 1e-3);
    let features = |c: &Config| space.to_features(c).unwrap_or_default();
    let seeds = vec![space.parse("x=2").unwrap(), space.parse("x=6").unwrap()];
    let found = |restart: bool| {
        let mut droplet = Droplet::new();
        droplet.restart = restart;
        let mut strategy = Seeded::new(seeds.clone(), Box::new(droplet));
        let r = tune(
            &space,
            &mut strategy,
            &mut Untrained,
            &features,
            &mut SyntheticMeasurer::new(time.clone()),
            &Budget::new(64),
            1,
            &mut |_| {},
        );
        assert_eq!(r.stopped, StopReason::Exhausted);
        space.format(&r.best.unwrap().0).unwrap()
    };
    assert_eq!(found(false), "x=2");
    assert_eq!(found(true), "x=8");
}

#[test]
fn droplet_remeasures_close_calls_under_noise() {
    let l = cpu_landscape();
    let budget = Budget::new(300);
    let mut strategy = Checked::new(Box::new(Droplet::new()));
    let features = l.features();
    let mut measurer = l.noisy_measurer(0.02, 9);
    let r = tune(
        &l.space,
        &mut strategy,
        &mut Untrained,
        &features,
        &mut measurer,
        &budget,
        9,
        &mut |_| {},
    );
    assert!(strategy.remeasured > 0, "close calls should be remeasured");
    let distinct: HashSet<&Config> = r.trials.iter().map(|t| &t.config).collect();
    assert_eq!(r.trials.len(), distinct.len() + strategy.remeasured);
    assert_eq!(measurer.measured(), r.trials.len());
    let share = l.optimum / (l.time)(&r.best.unwrap().0).unwrap();
    assert!(share > 0.8, "{share}");
}

fn samples(l: &Landscape, n: usize, seed: u64) -> (Vec<Vec<f64>>, Vec<f64>) {
    let mut rng = StdRng::seed_from_u64(seed);
    let features = l.features();
    let (mut xs, mut ys) = (Vec::new(), Vec::new());
    while xs.len() < n {
        let c = l.space.sample_uniform(&mut rng).unwrap();
        if let Some(t) = (l.time)(&c) {
            xs.push(features(&c));
            ys.push(-t.ln());
        }
    }
    (xs, ys)
}

#[test]
fn the_forest_ranks_held_out_points() {
    for l in [gpu_landscape(), cpu_landscape()] {
        let (xs, ys) = samples(&l, 64, 1);
        let (tx, ty) = samples(&l, 300, 2);
        let mut forest = Forest::new(0);
        forest.update(&xs, &ys);
        let acc = pairwise_accuracy(&forest.predict(&tx), &ty);
        println!("{}: pairwise accuracy {acc:.3}", l.name);
        assert!(acc > 0.7, "{}: {acc}", l.name);
        // Deterministic for a seed.
        let mut again = Forest::new(0);
        again.update(&xs, &ys);
        assert_eq!(again.predict(&tx), forest.predict(&tx));
    }
}

#[test]
fn the_forest_is_neutral_on_too_little_data() {
    let l = cpu_landscape();
    let (xs, ys) = samples(&l, 3, 1);
    let mut forest = Forest::new(0);
    assert_eq!(forest.predict(&xs), vec![0.0; 3]);
    forest.update(&xs, &ys);
    let p = forest.predict(&xs);
    assert!(p.windows(2).all(|w| w[0] == w[1]), "{p:?}");
    assert!(!forest.is_trained());
    forest.update(&[], &[]);
    assert_eq!(forest.predict(&xs).len(), 3);
}

#[test]
fn a_warm_started_forest_transfers_ranking() {
    // "Another shape": the same landscape three times slower overall.
    let l = gpu_landscape();
    let (px, py) = samples(&l, 256, 5);
    let py: Vec<f64> = py.iter().map(|s| s - 3f64.ln()).collect();
    let (tx, ty) = samples(&l, 300, 6);
    let cold = Forest::new(0);
    assert_eq!(pairwise_accuracy(&cold.predict(&tx), &ty), 0.5);
    let mut warm = Forest::pretrained(&px, &py, 0);
    assert_eq!(warm.prior_len(), 256);
    let acc0 = pairwise_accuracy(&warm.predict(&tx), &ty);
    let (ox, oy) = samples(&l, 8, 7);
    warm.update(&ox, &oy);
    let acc8 = pairwise_accuracy(&warm.predict(&tx), &ty);
    let mut scratch = Forest::new(0);
    scratch.update(&ox, &oy);
    let acc_scratch = pairwise_accuracy(&scratch.predict(&tx), &ty);
    println!("warm {acc0:.3}, warm + 8 online {acc8:.3}, 8 online only {acc_scratch:.3}");
    assert!(acc0 > 0.75 && acc8 > 0.75, "{acc0} {acc8}");
    assert!(acc8 > acc_scratch);
    // Predictions come back on the online scale.
    let mean = oy.iter().sum::<f64>() / oy.len() as f64;
    let p = warm.predict(&ox);
    assert!((p.iter().sum::<f64>() / p.len() as f64 - mean).abs() < 1.0);
}

#[test]
fn tune_scores_invalid_points_lowest() {
    let t = |o: Outcome| Trial {
        config: Config::new(vec![]),
        outcome: o,
        pair: None,
    };
    let trials = [
        t(Outcome::Valid { samples: vec![1.0] }),
        t(Outcome::Invalid { reason: "x".into() }),
        t(Outcome::Valid { samples: vec![0.5] }),
    ];
    let s = tuner::tune::scores(&trials);
    assert_eq!(s[0], 0.0);
    assert!((s[2] - 2f64.ln()).abs() < 1e-12);
    assert_eq!(s[1], -1.0);
    assert_eq!(tuner::tune::scores(&trials[1..2]), vec![0.0]);
}

#[test]
fn a_replayed_landscape_is_tuned_like_the_real_one() {
    let l = cpu_landscape();
    let all = l.space.enumerate(100_000).unwrap();
    // Record 90% of the points; the rest is "not recorded".
    let (recorded, unrecorded): (Vec<&Config>, Vec<&Config>) =
        all.iter().partition(|c| jitter(c) >= 0.1);
    let records: Vec<(Config, Outcome)> = recorded
        .iter()
        .map(|&c| {
            let o = match (l.time)(c) {
                Some(t) => Outcome::Valid {
                    samples: vec![t, t * 1.01, t * 0.99],
                },
                None => Outcome::Invalid {
                    reason: "compile error".into(),
                },
            };
            (c.clone(), o)
        })
        .collect();
    let mut replay = ReplayMeasurer::new(records).with_resampling(4);
    assert_eq!(replay.len(), recorded.len());
    let missing = replay.measure(&[unrecorded[0].clone()]);
    assert_eq!(
        missing,
        vec![Outcome::Invalid {
            reason: tuner::replay::NOT_RECORDED.into()
        }]
    );
    let again = replay.remeasure(recorded[0]);
    let Outcome::Valid { samples } = again else {
        panic!("recorded point")
    };
    assert_eq!(samples.len(), 3);
    let (_, optimum) = replay.best().unwrap();
    let budget = Budget::new(64);
    let mut strategy = by_name(DEFAULT_STRATEGY, &budget).unwrap();
    let mut model = Forest::new(1);
    let features = l.features();
    let r = tune(
        &l.space,
        strategy.as_mut(),
        &mut model as &mut dyn CostModel,
        &features,
        &mut replay,
        &budget,
        1,
        &mut |_| {},
    );
    assert_eq!(r.trials.len(), 64);
    assert!(r.trials.iter().any(|t| !t.outcome.is_valid()));
    let share = optimum / r.best.unwrap().1;
    assert!(share > 0.8, "{share}");
}
