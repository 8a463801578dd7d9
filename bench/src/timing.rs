//! Side-by-side timing: contenders run in the same process, alternating, so that noise from
//! the rest of the machine hits them alike; each reports the median of all its calls.
//!
//! Contenders that leave nothing behind alternate in short turns (about
//! [`TURN_SECONDS`], a few calls) within each round; those that need a pause after their
//! calls (a library whose idle threads spin) run once per round as a block, then pause. On
//! the development VM whole stretches of 50 ms and more ran at half speed (a core lost to
//! the host): alternating in 50 ms blocks, one contender could draw most of them. The same
//! configuration then read 0.59 and 1.05 of the baseline as `ours` and as the default in
//! one run (`bench/results/2026-11-27-zen4-cpu-copy-rows/`); alternating every few
//! milliseconds spreads such stretches over every contender alike.

use std::time::Instant;

/// A contender: runs the computation once.
pub type Contender<'a> = Box<dyn FnMut() -> Result<(), String> + 'a>;

/// How many rounds and how long each.
#[derive(Clone, Copy, Debug)]
pub struct Plan {
    /// Timed rounds per contender.
    pub rounds: usize,
    /// Target time each contender spends in one round (at least one call).
    pub round_seconds: f64,
}

/// Target length of one turn of a contender that alternates finely (one call where a call
/// takes longer).
pub const TURN_SECONDS: f64 = 0.005;

/// Per-contender result: each round's median seconds per call, and the median of all its
/// calls.
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
    /// `reps` calls (at least one), appending the seconds of each to `calls`: each timed on
    /// its own (a call that lost its core to another process for a time slice is an
    /// outlier, not a tenth of a mean), or, timed on the other side, their median once
    /// per call.
    fn calls(&mut self, reps: usize, calls: &mut Vec<f64>) -> Result<(), String> {
        match self {
            Run::Call(f) => {
                for _ in 0..reps.max(1) {
                    let start = Instant::now();
                    f()?;
                    calls.push(start.elapsed().as_secs_f64());
                }
            }
            Run::Own(f) => {
                let m = f(reps.max(1))?;
                calls.extend(std::iter::repeat_n(m, reps.max(1)));
            }
        }
        Ok(())
    }

    fn once(&mut self) -> Result<f64, String> {
        let mut t = Vec::with_capacity(1);
        self.calls(1, &mut t)?;
        Ok(t[0])
    }
}

/// Times every contender: one warm-up call each (the caller has already run each once to
/// compile and check it), one call each to size its turns, then `plan.rounds` rounds.
///
/// In a round the contenders with no pause (`settle[i]` zero or absent) alternate in turns
/// of about [`TURN_SECONDS`] until each has run about `plan.round_seconds`, forwards in
/// even turns and backwards in odd ones (whoever follows a contender that leaves a cold
/// cache behind is not always the same one). Then each contender with a pause runs
/// `plan.round_seconds` of calls in one block and sleeps `settle[i]` seconds (also after
/// its sizing call): a library whose idle threads keep spinning after a call (OpenBLAS)
/// would otherwise slow the contender after it. Odd rounds start with the blocks.
pub fn side_by_side(
    contenders: &mut [Run<'_>],
    plan: Plan,
    settle: &[f64],
) -> Result<Vec<Timing>, String> {
    let n = contenders.len();
    let pause_of = |i: usize| settle.get(i).copied().filter(|s| *s > 0.0);
    let pause = |i: usize| {
        if let Some(s) = pause_of(i) {
            std::thread::sleep(std::time::Duration::from_secs_f64(s.min(10.0)));
        }
    };
    // Calls per turn (per block for those with a pause) and turns per round.
    let mut per_turn = Vec::with_capacity(n);
    let mut turns = Vec::with_capacity(n);
    for (i, f) in contenders.iter_mut().enumerate() {
        f.once()?; // warm-up
        let once = f.once()?.max(1e-9);
        let per_round = (plan.round_seconds / once).ceil().clamp(1.0, 10_000.0) as usize;
        let t = if pause_of(i).is_some() {
            per_round
        } else {
            ((TURN_SECONDS / once).ceil() as usize).clamp(1, per_round)
        };
        per_turn.push(t);
        turns.push(per_round.div_ceil(t));
        pause(i);
    }
    let fine: Vec<usize> = (0..n).filter(|&i| pause_of(i).is_none()).collect();
    let blocks: Vec<usize> = (0..n).filter(|&i| pause_of(i).is_some()).collect();
    let most_turns = fine.iter().map(|&i| turns[i]).max().unwrap_or(0);
    let mut all = vec![Vec::new(); n];
    let mut rounds = vec![Vec::with_capacity(plan.rounds); n];
    for round in 0..plan.rounds.max(1) {
        let mut this = vec![Vec::new(); n];
        let fine_turns = |contenders: &mut [Run<'_>], this: &mut [Vec<f64>]| {
            for turn in 0..most_turns {
                let forwards = turn % 2 == 0;
                for k in 0..fine.len() {
                    let i = fine[if forwards { k } else { fine.len() - 1 - k }];
                    if turn < turns[i] {
                        contenders[i].calls(per_turn[i], &mut this[i])?;
                    }
                }
            }
            Ok::<(), String>(())
        };
        if round % 2 == 0 {
            fine_turns(contenders, &mut this)?;
        }
        for &i in &blocks {
            contenders[i].calls(per_turn[i], &mut this[i])?;
            pause(i);
        }
        if round % 2 == 1 {
            fine_turns(contenders, &mut this)?;
        }
        for (i, calls) in this.into_iter().enumerate() {
            rounds[i].push(median(&calls));
            all[i].extend(calls);
        }
    }
    Ok(rounds
        .into_iter()
        .zip(all)
        .map(|(r, calls)| Timing {
            median: median(&calls),
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
        // Two sizing calls each; `b` pauses, so it runs in a block after `a`'s turns in
        // even rounds and before them in odd ones.
        assert_eq!(order.into_inner().iter().collect::<String>(), "aabbabbaab");
    }

    #[test]
    fn contenders_without_a_pause_alternate_within_a_round() {
        let order = std::cell::RefCell::new(String::new());
        let call = |c: char| {
            let order = &order;
            move || {
                order.borrow_mut().push(c);
                std::thread::sleep(std::time::Duration::from_millis(1));
                Ok(())
            }
        };
        let mut cs: Vec<Run<'_>> = vec![
            Run::Call(Box::new(call('a'))),
            Run::Call(Box::new(call('b'))),
        ];
        let t = side_by_side(
            &mut cs,
            Plan {
                rounds: 1,
                round_seconds: 0.04,
            },
            &[],
        )
        .unwrap();
        drop(cs);
        assert_eq!(t[0].rounds.len(), 1);
        let order = order.into_inner();
        // After the sizing calls, a round of ~40 ms each in turns of ~5 ms: the two take
        // turns several times.
        let switches = order.as_bytes()[4..]
            .windows(2)
            .filter(|w| w[0] != w[1])
            .count();
        assert!(switches >= 3, "{order}");
        assert!(t[0].median >= 1e-3 && t[1].median >= 1e-3);
    }
}
