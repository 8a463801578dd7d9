//! Side-by-side timing: contenders run in the same process, alternating round by round, so
//! that noise from the rest of the machine hits them alike; each reports the median of its
//! rounds.

use std::time::Instant;

/// A contender: runs the computation once.
pub type Contender<'a> = Box<dyn FnMut() -> Result<(), String> + 'a>;

/// How many rounds and how long each.
#[derive(Clone, Copy, Debug)]
pub struct Plan {
    /// Timed rounds per contender (alternating).
    pub rounds: usize,
    /// Target wall time of one round; a round repeats the call this long (at least once)
    /// and keeps the median call.
    pub round_seconds: f64,
}

/// Per-contender result: each round's median seconds per call, and the median of those.
#[derive(Clone, Debug)]
pub struct Timing {
    pub median: f64,
    pub rounds: Vec<f64>,
}

pub fn median(values: &[f64]) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => 0.5 * (v[n / 2 - 1] + v[n / 2]),
    }
}

/// The median seconds of `reps` calls, each timed on its own (a call that lost its core to
/// another process for a time slice is an outlier, not a tenth of the round's mean).
fn timed(f: &mut Contender<'_>, reps: usize) -> Result<f64, String> {
    let mut calls = Vec::with_capacity(reps);
    for _ in 0..reps.max(1) {
        let start = Instant::now();
        f()?;
        calls.push(start.elapsed().as_secs_f64());
    }
    Ok(median(&calls))
}

/// A contender that times its own calls (a baseline in another process, which our clock
/// would charge for the round trip): `f(n)` makes `n` calls and returns the median seconds
/// of one.
pub type SelfTimed<'a> = Box<dyn FnMut(usize) -> Result<f64, String> + 'a>;

/// A contender timed by us ([`Contender`]) or by itself ([`SelfTimed`]).
pub enum Run<'a> {
    Call(Contender<'a>),
    Own(SelfTimed<'a>),
}

impl Run<'_> {
    /// The median seconds of `reps` calls.
    fn median_of(&mut self, reps: usize) -> Result<f64, String> {
        match self {
            Run::Call(f) => timed(f, reps),
            Run::Own(f) => f(reps.max(1)),
        }
    }
}

/// Times every contender: one warm-up call each (the caller has already run each once to
/// compile and check it), one call each to size its rounds, then `plan.rounds` rounds
/// visiting the contenders in turn, forwards in even rounds and backwards in odd ones.
///
/// After each sizing call and each round of contender `i`, sleeps `settle[i]` seconds (none
/// past the end of `settle`): a library whose idle threads keep spinning after a call
/// (OpenBLAS) would otherwise slow the contender after it.
pub fn side_by_side(
    contenders: &mut [Run<'_>],
    plan: Plan,
    settle: &[f64],
) -> Result<Vec<Timing>, String> {
    let pause = |i: usize| {
        if let Some(&s) = settle.get(i).filter(|s| **s > 0.0) {
            std::thread::sleep(std::time::Duration::from_secs_f64(s.min(10.0)));
        }
    };
    let mut reps = Vec::with_capacity(contenders.len());
    for (i, f) in contenders.iter_mut().enumerate() {
        f.median_of(1)?; // warm-up
        let once = f.median_of(1)?;
        let n = (plan.round_seconds / once.max(1e-9)).ceil();
        reps.push(n.clamp(1.0, 10_000.0) as usize);
        pause(i);
    }
    let n = contenders.len();
    let mut rounds = vec![Vec::with_capacity(plan.rounds); n];
    for round in 0..plan.rounds.max(1) {
        // Every other round visits them backwards: whoever follows a library that leaves
        // something behind (threads still spinning, a cold cache) is not always the same
        // contender.
        for i in (0..n).map(|k| if round % 2 == 0 { k } else { n - 1 - k }) {
            rounds[i].push(contenders[i].median_of(reps[i])?);
            pause(i);
        }
    }
    Ok(rounds
        .into_iter()
        .map(|r| Timing {
            median: median(&r),
            rounds: r,
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert!(median(&[]).is_nan());
    }

    #[test]
    fn alternates_and_counts_rounds() {
        let order = std::cell::RefCell::new(Vec::new());
        let mut cs: Vec<Run<'_>> = vec![
            Run::Call(Box::new(|| {
                order.borrow_mut().push('a');
                Ok(())
            })),
            Run::Call(Box::new(|| {
                order.borrow_mut().push('b');
                Ok(())
            })),
        ];
        let t = side_by_side(
            &mut cs,
            Plan {
                rounds: 3,
                round_seconds: 0.0,
            },
            &[0.0, 0.001],
        )
        .unwrap();
        drop(cs);
        assert_eq!(t.len(), 2);
        assert_eq!(t[0].rounds.len(), 3);
        // Two sizing calls each, then rounds forwards, backwards, forwards.
        assert_eq!(order.into_inner().iter().collect::<String>(), "aabbabbaab");
    }
}
