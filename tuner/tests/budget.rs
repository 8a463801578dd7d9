//! The tune loop's budgets: seconds (the batch is shrunk to what fits), early stop when the
//! strategy's test and the model agree, the model's out-of-sample ranking accuracy, and
//! the weighted warm start.
#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use tuner::cost_model::Forest;
use tuner::strategy::by_name;
use tuner::{tune, Budget, Config, SearchSpace, StopReason, SyntheticMeasurer};

/// Three tiles of 4096 and an unroll depth (6370 points): fastest at outer tile 2^6 and
/// unroll 8, smooth around it.
fn space() -> (SearchSpace, usize, usize) {
    let mut b = SearchSpace::builder();
    let t = b.factorization("tile", 4096, 3);
    let u = b.discrete("unroll", &[1, 2, 4, 8, 16, 32, 64]);
    (b.build().unwrap(), t, u)
}

fn time(c: &Config, t: usize, u: usize, space: &SearchSpace) -> f64 {
    let f = c.factors(t).unwrap()[0] as f64;
    let v = space.discrete_value(c, u).unwrap() as f64;
    1e-3 * (1.0 + (f.log2() - 6.0).powi(2) * 0.1 + (v.log2() - 3.0).powi(2) * 0.2)
}

#[test]
fn a_time_budget_is_kept_to_within_ten_percent() {
    let (space, t, u) = space();
    let s2 = space.clone();
    // 30 ms a measurement: a batch of 8 takes 0.24 s, so checking only between batches
    // would overrun a 1.0 s budget by up to a quarter.
    let mut m = SyntheticMeasurer::new(move |c| {
        std::thread::sleep(Duration::from_millis(30));
        Some(time(c, t, u, &s2))
    });
    let budget = Budget::new(10_000).with_seconds(1.0).with_batch(8);
    let mut strategy = by_name("random", &budget).unwrap();
    let features = |c: &Config| space.to_features(c).unwrap_or_default();
    let start = Instant::now();
    let r = tune(
        &space,
        strategy.as_mut(),
        &mut tuner::Untrained,
        &features,
        &mut m,
        &budget,
        1,
        &mut |_| {},
    );
    let took = start.elapsed().as_secs_f64();
    assert_eq!(r.stopped, StopReason::Time);
    assert!(
        (0.9..=1.1).contains(&took),
        "took {took} s for a 1 s budget"
    );
}

#[test]
fn early_stop_needs_the_strategy_and_the_model_to_agree() {
    let (space, t, u) = space();
    let s2 = space.clone();
    let features = |c: &Config| space.to_features(c).unwrap_or_default();
    let run = |early: bool| {
        let s3 = s2.clone();
        let mut m = SyntheticMeasurer::new(move |c| Some(time(c, t, u, &s3)));
        let budget = Budget::new(200).with_early_stop(early);
        let mut strategy = by_name("combined", &budget).unwrap();
        let mut model = Forest::new(3);
        tune(
            &space,
            strategy.as_mut(),
            &mut model,
            &features,
            &mut m,
            &budget,
            3,
            &mut |_| {},
        )
    };
    let full = run(false);
    let early = run(true);
    assert_eq!(early.stopped, StopReason::Converged);
    assert!(early.trials.len() < full.trials.len());
    // It stopped at the optimum.
    assert_eq!(early.best.unwrap().1, full.best.unwrap().1);
    // An untrained model never agrees: the run goes on.
    let s3 = s2.clone();
    let mut m = SyntheticMeasurer::new(move |c| Some(time(c, t, u, &s3)));
    let budget = Budget::new(200).with_early_stop(true);
    let mut strategy = by_name("combined", &budget).unwrap();
    let r = tune(
        &space,
        strategy.as_mut(),
        &mut tuner::Untrained,
        &features,
        &mut m,
        &budget,
        3,
        &mut |_| {},
    );
    assert_ne!(r.stopped, StopReason::Converged);
}

#[test]
fn the_run_reports_its_models_ranking_accuracy() {
    let (space, t, u) = space();
    let s2 = space.clone();
    let features = |c: &Config| space.to_features(c).unwrap_or_default();
    let mut m = SyntheticMeasurer::new(move |c| Some(time(c, t, u, &s2)));
    let budget = Budget::new(64);
    let mut strategy = by_name("random", &budget).unwrap();
    let mut model = Forest::new(0);
    let r = tune(
        &space,
        strategy.as_mut(),
        &mut model,
        &features,
        &mut m,
        &budget,
        0,
        &mut |_| {},
    );
    let acc = r.model_accuracy.unwrap();
    assert!(acc > 0.6, "pairwise accuracy {acc}");
    // Without a model every pair is a tie.
    let s3 = space.clone();
    let mut m = SyntheticMeasurer::new(move |c| Some(time(c, t, u, &s3)));
    let mut strategy = by_name("random", &budget).unwrap();
    let r = tune(
        &space,
        strategy.as_mut(),
        &mut tuner::Untrained,
        &features,
        &mut m,
        &budget,
        0,
        &mut |_| {},
    );
    assert_eq!(r.model_accuracy, Some(0.5));
}

#[test]
fn a_weighted_warm_start_leaves_out_weightless_points_and_ranks_from_the_prior() {
    use tuner::CostModel;
    let (space, t, u) = space();
    let points = space.enumerate(10_000).unwrap();
    let feats: Vec<Vec<f64>> = points
        .iter()
        .map(|c| space.to_features(c).unwrap())
        .collect();
    let scores: Vec<f64> = points.iter().map(|c| -time(c, t, u, &space).ln()).collect();
    let mut weights = vec![1.0; points.len()];
    weights[0] = 0.0;
    let mut f = Forest::new(0);
    f.warm_start_weighted(&feats, &scores, &weights);
    assert_eq!(f.prior_len(), points.len() - 1);
    let pred = f.predict(&feats);
    assert!(tuner::pairwise_accuracy(&pred, &scores) > 0.9);
}

/// Proposes two points once, then asks for the first to be measured twice more.
struct TwoThenRemeasure {
    proposed: bool,
    again: Vec<Config>,
}

impl tuner::SearchStrategy for TwoThenRemeasure {
    fn name(&self) -> &str {
        "two-then-remeasure"
    }

    fn propose(&mut self, ctx: &mut tuner::Context<'_>, _max: usize) -> Vec<Config> {
        if self.proposed {
            return Vec::new();
        }
        self.proposed = true;
        let mut points = ctx.space.enumerate(2).unwrap();
        points.truncate(2);
        self.again = vec![points[0].clone(), points[0].clone()];
        points
    }

    fn observe(&mut self, _ctx: &mut tuner::Context<'_>, _trials: &[tuner::Trial]) {}

    fn wants_remeasure(&mut self) -> Vec<Config> {
        self.again.pop().into_iter().collect()
    }
}

/// Times from a script, in order of measurement.
struct Scripted(std::collections::VecDeque<f64>);

impl tuner::Measurer for Scripted {
    fn measure(&mut self, batch: &[Config]) -> Vec<tuner::Outcome> {
        batch
            .iter()
            .map(|_| tuner::Outcome::Valid {
                samples: vec![self.0.pop_front().unwrap()],
            })
            .collect()
    }
}

/// The winner's curse: a point whose first measurement was lucky (1.0) but whose
/// remeasurements are slow (2.0, 2.0) is not the best over one measured at 1.2 once.
/// [`TwoThenRemeasure`] over the two points of one knob, measured by `m`, with a budget
/// of `trials` in batches of 2: the space and the result.
fn scripted_search(m: &mut Scripted, trials: usize) -> (SearchSpace, tuner::TuneResult) {
    let mut b = SearchSpace::builder();
    b.discrete("x", &[1, 2]);
    let space = b.build().unwrap();
    let mut strategy = TwoThenRemeasure {
        proposed: false,
        again: Vec::new(),
    };
    let features = |c: &Config| space.to_features(c).unwrap_or_default();
    let r = tune(
        &space,
        &mut strategy,
        &mut tuner::Untrained,
        &features,
        m,
        &Budget::new(trials).with_batch(2),
        1,
        &mut |_| {},
    );
    (space, r)
}

#[test]
fn the_best_point_is_chosen_by_the_median_of_its_measurements() {
    let mut m = Scripted([1.0, 1.2, 2.0, 2.0].into_iter().collect());
    let (space, r) = scripted_search(&mut m, 10);
    assert_eq!(r.trials.len(), 4);
    let points = space.enumerate(2).unwrap();
    let (best, seconds) = r.best.unwrap();
    assert_eq!(best, points[1]);
    assert_eq!(seconds, 1.2);
    // The first point led until its remeasurements showed it slower.
    assert_eq!(r.history, vec![Some(1.0), Some(1.0), Some(1.2), Some(1.2)]);
}

/// The confirmation after a search: the default (measured first, slow: 1.5) and the winner
/// (1.0) measured back to back three times each (default 1.1, 1.1, 1.1; winner 1.2, 1.2,
/// 1.2): the default is best by the upper median of its four measurements (1.1 against
/// 1.2), the six remeasurements are trials, and the history follows them.
#[test]
fn confirmation_measures_the_default_and_the_winner_back_to_back() {
    let mut m = Scripted(
        [1.5, 1.0, 1.1, 1.2, 1.1, 1.2, 1.1, 1.2]
            .into_iter()
            .collect(),
    );
    let (space, mut r) = scripted_search(&mut m, 2);
    let points = space.enumerate(2).unwrap();
    assert_eq!(r.best.as_ref().unwrap().0, points[1]);
    let mut seen = 0;
    tuner::confirm(&mut r, &points[0], 3, 0, &mut m, &mut |_| seen += 1);
    assert_eq!((seen, r.trials.len(), r.history.len()), (6, 8, 8));
    assert_eq!(r.best, Some((points[0].clone(), 1.1)));
    assert_eq!(tuner::judge(&r.trials), r.best);
    // Nothing to confirm when the winner is the baseline.
    let before = r.trials.len();
    tuner::confirm(&mut r, &points[0], 3, 0, &mut m, &mut |_| {});
    assert_eq!(r.trials.len(), before);
}

/// The confirmation's rounds decide between the points they measured, whatever the other
/// samples say: the default (measured first at 2.0) and a winner lucky once (0.9), then
/// three rounds in which the machine drifts (default 1.8, 1.0, 1.1) and the winner is
/// slower in each (1.9, 1.05, 1.15). By upper medians over every sample the winner leads
/// (1.15 against 1.8); side by side it lost every round, so the default is the answer, with
/// its upper median. The record index reads the same samples back the same way
/// (`tensor-dsl/tests/records.rs`).
#[test]
fn confirmation_rounds_decide_by_their_ratios() {
    let mut m = Scripted(
        [2.0, 0.9, 1.8, 1.9, 1.0, 1.05, 1.1, 1.15]
            .into_iter()
            .collect(),
    );
    let (space, mut r) = scripted_search(&mut m, 2);
    let points = space.enumerate(2).unwrap();
    assert_eq!(r.best.as_ref().unwrap().0, points[1]);
    tuner::confirm(&mut r, &points[0], 3, 0, &mut m, &mut |_| {});
    assert_eq!(r.best, Some((points[0].clone(), 1.8)));
    assert_eq!(tuner::judge(&r.trials), r.best);
    // Each round's two trials share one id, and the rounds differ.
    let rounds: Vec<u64> = r.trials[2..].iter().map(|t| t.pair.unwrap()).collect();
    assert!(rounds.chunks(2).all(|p| p[0] == p[1]));
    assert!(rounds[0] != rounds[2] && rounds[2] != rounds[4]);
    assert!(r.trials[..2].iter().all(|t| t.pair.is_none()));

    // Faster in most rounds (two of three), the winner stays.
    let mut m = Scripted(
        [2.0, 0.9, 1.2, 1.1, 1.2, 1.3, 1.2, 1.1]
            .into_iter()
            .collect(),
    );
    let (_, mut r) = scripted_search(&mut m, 2);
    tuner::confirm(&mut r, &points[0], 3, 0, &mut m, &mut |_| {});
    assert_eq!(r.best.as_ref().unwrap().0, points[1]);
}

/// [`tuner::paired_best`] on its own: a point measured alone keeps its place by upper
/// median; among points paired with the best, the one furthest ahead in its rounds takes
/// over, and from it the comparison goes on (a point is taken once).
#[test]
fn paired_best_follows_the_rounds_from_the_upper_median_best() {
    // "a" best by upper median; "b" beat "a" side by side; "c" beat "b" side by side.
    let s = [
        ("a", 1.0, None),
        ("b", 3.0, None),
        ("c", 3.0, None),
        ("a", 1.5, Some(1)),
        ("b", 1.4, Some(1)),
        ("b", 1.6, Some(2)),
        ("c", 1.5, Some(2)),
    ];
    assert_eq!(tuner::paired_best(&s), Some(("c", 3.0)));
    // Alone, a lucky point is not overturned by pairs it is not in.
    let s = [("a", 1.0, None), ("b", 1.4, Some(1)), ("c", 1.5, Some(1))];
    assert_eq!(tuner::paired_best(&s), Some(("a", 1.0)));
    assert_eq!(tuner::paired_best::<&str>(&[]), None);
}
