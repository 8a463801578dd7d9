//! The search's last step (`tuner::confirm` in `autotune::search`): the winner and the
//! default measured side by side, within the trial budget and the time budget.
#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};
use tensor_dsl::autotune::{search, TuneOptions, CONFIRM_ROUNDS, SETTLE_ROUNDS};
use tensor_dsl::transfer::Prior;
use tuner::{Config, SearchSpace, SyntheticMeasurer};

/// One knob `x` of 12 values: the space and the knob.
fn twelve() -> (SearchSpace, usize) {
    let mut b = SearchSpace::builder();
    let k = b.discrete("x", &(1..=12).collect::<Vec<i64>>());
    (b.build().unwrap(), k)
}

/// [`twelve`], fastest at the last; each measurement sleeps `ms`.
fn setup(ms: u64) -> (SearchSpace, SyntheticMeasurer) {
    let (space, k) = twelve();
    let s2 = space.clone();
    let m = SyntheticMeasurer::new(move |c: &Config| {
        std::thread::sleep(Duration::from_millis(ms));
        Some(1e-3 / s2.discrete_value(c, k).unwrap() as f64)
    });
    (space, m)
}

/// A random search of `trials` (and `seconds`) over `space` from its first point, measured
/// by `m`: the result and its default.
fn random_search_on(
    space: &SearchSpace,
    m: &mut dyn tuner::Measurer,
    trials: usize,
    seconds: Option<f64>,
) -> (tuner::TuneResult, Config) {
    let features = |c: &Config| space.to_features(c).unwrap_or_default();
    let default = space.enumerate(12).unwrap().remove(0);
    let opts = TuneOptions {
        strategy: "random".into(),
        trials,
        seconds,
        batch: 4,
        seed: 1,
        ..TuneOptions::default()
    };
    let r = search(
        space,
        Some(default.clone()),
        &Prior::default(),
        &opts,
        &features,
        m,
        &mut |_| {},
    )
    .unwrap();
    (r.result, default)
}

/// A random search of `trials` (and `seconds`) over the space of [`setup`] from its
/// first point, with measurements of `ms` each: the result and its default.
fn random_search(trials: usize, seconds: Option<f64>, ms: u64) -> (tuner::TuneResult, Config) {
    let (space, mut m) = setup(ms);
    random_search_on(&space, &mut m, trials, seconds)
}

#[test]
fn the_winner_and_the_default_are_remeasured_within_the_trial_budget() {
    // 12 points, 10 trials: the search spends them all, nothing is left to confirm.
    assert_eq!(random_search(10, None, 0).0.trials.len(), 10);
    // With room left (the random search ends after the 12 points), three rounds of two.
    let (r, default) = random_search(30, None, 0);
    assert_eq!(r.trials.len(), 12 + 2 * CONFIRM_ROUNDS);
    let best = r.best.clone().unwrap().0;
    let last: Vec<&Config> = r.trials[12..].iter().map(|t| &t.config).collect();
    assert!(last.chunks(2).all(|p| p == [&default, &best]), "{last:?}");
}

#[test]
fn the_confirmation_keeps_the_time_budget() {
    // 70 ms a measurement, a 1 s budget and a random search over 12 points: the search
    // ends after about 0.85 s; three rounds would take 0.42 s more, one fits.
    let start = Instant::now();
    let (r, _) = random_search(100, Some(1.0), 70);
    let took = start.elapsed().as_secs_f64();
    assert!(
        took <= 1.1,
        "took {took} s for a 1 s budget ({} trials)",
        r.trials.len()
    );
    assert!((12..12 + 2 * CONFIRM_ROUNDS).contains(&r.trials.len()));
}

/// The `lucky` highest points measure fast the first time (12 fastest) and slow ever
/// after (a lucky moment); point `x` otherwise takes 1 ms / x.
struct Lucky {
    space: SearchSpace,
    knob: usize,
    lucky: i64,
    seen: std::collections::HashMap<i64, usize>,
}

impl tuner::Measurer for Lucky {
    fn measure(&mut self, batch: &[Config]) -> Vec<tuner::Outcome> {
        batch
            .iter()
            .map(|c| {
                let x = self.space.discrete_value(c, self.knob).unwrap();
                let n = self.seen.entry(x).or_default();
                *n += 1;
                let lucky = x > 12 - self.lucky;
                let s = match (lucky, *n) {
                    (true, 1) => (13 - x) as f64 * 1e-5,
                    (true, _) => 2e-3,
                    _ => 1e-3 / x as f64,
                };
                tuner::Outcome::Valid { samples: vec![s] }
            })
            .collect()
    }
}

/// A random search of 30 trials over [`twelve`] measured by [`Lucky`] with `lucky` lucky
/// points: the points compared with the default after the search, in order, and the
/// best one.
fn confirm_lucky(lucky: i64) -> (Vec<i64>, i64) {
    let (space, knob) = twelve();
    let mut m = Lucky {
        space: space.clone(),
        knob,
        lucky,
        seen: Default::default(),
    };
    let (r, default) = random_search_on(&space, &mut m, 30, None);
    let x = |c: &Config| space.discrete_value(c, knob).unwrap();
    assert!(r.trials[12..].chunks(2).all(|p| p[0].config == default));
    let compared = r.trials[12..].chunks(2).map(|p| x(&p[1].config)).collect();
    (compared, x(&r.best.unwrap().0))
}

#[test]
fn each_round_of_the_confirmation_takes_the_point_that_then_leads() {
    // The lucky 12 is compared first, then the lucky 11, then the honest 10, which stays.
    assert_eq!(confirm_lucky(2), (vec![12, 11, 10], 10));
}

#[test]
fn the_confirmation_goes_on_while_the_leader_was_never_compared() {
    // Five lucky points: after the three set rounds the lucky 9 leads, measured once;
    // two more rounds take it and the lucky 8 down, and the honest 7 wins its round.
    assert_eq!(confirm_lucky(5), (vec![12, 11, 10, 9, 8, 7], 7));
    // More lucky points than rounds: it ends at the last settling round.
    let (compared, _) = confirm_lucky(10);
    assert_eq!(compared.len(), CONFIRM_ROUNDS + SETTLE_ROUNDS);
}
