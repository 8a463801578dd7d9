//! Property-style tests of `SearchSpace`: every operation, many seeds.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tuner::{Config, Error, Factorization, Knob, SearchSpace, Value};

const SEEDS: u64 = 200;

fn rng(seed: u64) -> StdRng {
    StdRng::seed_from_u64(seed)
}

/// A GPU-template-like space: 5-level spatial tiles, 3-level reduction tiles, a
/// permutation, an unroll list, a vector type, and constraints between knobs.
fn gpu_like() -> SearchSpace {
    let mut b = SearchSpace::builder();
    let i = b.factorization("tile_i", 48, 5);
    let j = b.add("tile_j", Factorization::new(64, 5).with_max_innermost(4));
    let k = b.factorization("tile_k", 30, 3);
    b.permutation("order", 4);
    let unroll = b.discrete("unroll", &[0, 16, 64, 512]);
    b.categorical("vec", &["f32", "f32x2", "f32x4"]);
    b.constraint("threads <= 64", move |c| {
        let (Some(fi), Some(fj)) = (c.factors(i), c.factors(j)) else {
            return false;
        };
        fi[2] * fj[2] <= 64
    });
    b.constraint("no unroll 512 with long k", move |c| {
        !(c.index(unroll) == Some(3) && c.factors(k).is_some_and(|f| f[2] > 5))
    });
    b.build().unwrap()
}

/// A small space that can be enumerated (a bound on one part, one constraint).
fn small() -> SearchSpace {
    let mut b = SearchSpace::builder();
    let t = b.add("t", Factorization::new(12, 3).with_max_innermost(4));
    b.permutation("p", 3);
    let d = b.discrete("d", &[1, 2, 4]);
    b.categorical("c", &["a", "b"]);
    b.constraint("not t0=12 with d=4", move |c| {
        !(c.factors(t).is_some_and(|f| f[0] == 12) && c.index(d) == Some(2))
    });
    b.build().unwrap()
}

/// The same knobs without bounds or constraints.
fn small_free() -> SearchSpace {
    let mut b = SearchSpace::builder();
    b.factorization("t", 12, 3);
    b.permutation("p", 3);
    b.discrete("d", &[1, 2, 4]);
    b.categorical("c", &["a", "b"]);
    b.build().unwrap()
}

fn spaces() -> Vec<SearchSpace> {
    vec![gpu_like(), small(), small_free()]
}

/// Checks what `check` checks, independently: products, permutations, indices, constraints.
fn assert_valid(space: &SearchSpace, c: &Config) {
    assert_eq!(c.len(), space.knob_count());
    for i in 0..space.knob_count() {
        match (space.knob(i).unwrap(), c.value(i).unwrap()) {
            (Knob::Factorization(k), Value::Factorization(f)) => {
                assert_eq!(f.len(), k.parts());
                assert_eq!(f.iter().product::<u64>(), k.extent(), "{f:?}");
                for (p, &x) in f.iter().enumerate() {
                    if let Some(m) = k.max_part(p) {
                        assert!(x <= m, "{f:?} breaks bound {m} on part {p}");
                    }
                }
            }
            (Knob::Permutation(k), Value::Permutation(p)) => {
                let mut sorted = p.clone();
                sorted.sort_unstable();
                assert_eq!(sorted, (0..k.items()).collect::<Vec<_>>());
            }
            (Knob::Discrete(k), Value::Discrete(x)) => assert!(*x < k.len()),
            (Knob::Categorical(k), Value::Categorical(x)) => assert!(*x < k.len()),
            (k, v) => panic!("value {v:?} for knob {k:?}"),
        }
    }
    for constraint in space.constraints() {
        assert!(
            constraint.holds(c),
            "constraint {} fails",
            constraint.name()
        );
    }
    space.check(c).unwrap();
}

fn distance(space: &SearchSpace, a: &Config, b: &Config) -> u64 {
    space.hop_distance(a, b).unwrap()
}

#[test]
fn sampled_configs_are_valid() {
    for space in spaces() {
        for seed in 0..SEEDS {
            let c = space.sample_uniform(&mut rng(seed)).unwrap();
            assert_valid(&space, &c);
        }
    }
}

#[test]
fn neighbors_are_valid_distinct_and_one_hop_away() {
    for space in spaces() {
        for seed in 0..SEEDS {
            let c = space.sample_uniform(&mut rng(seed)).unwrap();
            let neighbors = space.neighbors(&c).unwrap();
            assert!(!neighbors.is_empty());
            let unique: HashSet<_> = neighbors.iter().collect();
            assert_eq!(unique.len(), neighbors.len(), "duplicates");
            for n in &neighbors {
                assert_valid(&space, n);
                assert_eq!(distance(&space, &c, n), 1, "{n:?} from {c:?}");
            }
        }
    }
}

#[test]
fn knob_neighbors_change_only_their_knob_and_make_up_all_neighbors() {
    for space in spaces() {
        for seed in 0..50 {
            let c = space.sample_uniform(&mut rng(seed)).unwrap();
            let mut union = Vec::new();
            for knob in 0..space.knob_count() {
                for n in space.knob_neighbors(&c, knob).unwrap() {
                    for other in (0..space.knob_count()).filter(|&o| o != knob) {
                        assert_eq!(n.value(other), c.value(other));
                    }
                    assert_ne!(n.value(knob), c.value(knob));
                    union.push(n);
                }
            }
            assert_eq!(union, space.neighbors(&c).unwrap());
            assert!(matches!(
                space.knob_neighbors(&c, space.knob_count()),
                Err(Error::KnobIndex { .. })
            ));
        }
    }
}

#[test]
fn neighbors_of_each_kind_follow_the_opevo_topology() {
    let mut b = SearchSpace::builder();
    b.factorization("f", 12, 2);
    b.permutation("p", 3);
    b.discrete("d", &[0, 16, 64, 512]);
    b.categorical("c", &["x", "y", "z"]);
    let space = b.build().unwrap();
    let c = space.parse("f=[6,2];p=[0,1,2];d=16;c=y").unwrap();
    let per_knob = |k| -> BTreeSet<String> {
        space
            .knob_neighbors(&c, k)
            .unwrap()
            .iter()
            .map(|n| space.format(n).unwrap())
            .collect()
    };
    // Move a 2 or a 3 from part 0 to part 1, or the 2 from part 1 to part 0.
    assert_eq!(
        per_knob(0),
        [
            "f=[3,4];p=[0,1,2];d=16;c=y",
            "f=[2,6];p=[0,1,2];d=16;c=y",
            "f=[12,1];p=[0,1,2];d=16;c=y"
        ]
        .map(String::from)
        .into()
    );
    assert_eq!(
        per_knob(1),
        [
            "f=[6,2];p=[1,0,2];d=16;c=y",
            "f=[6,2];p=[2,1,0];d=16;c=y",
            "f=[6,2];p=[0,2,1];d=16;c=y"
        ]
        .map(String::from)
        .into()
    );
    assert_eq!(
        per_knob(2),
        ["f=[6,2];p=[0,1,2];d=0;c=y", "f=[6,2];p=[0,1,2];d=64;c=y"]
            .map(String::from)
            .into()
    );
    assert_eq!(
        per_knob(3),
        ["f=[6,2];p=[0,1,2];d=16;c=x", "f=[6,2];p=[0,1,2];d=16;c=z"]
            .map(String::from)
            .into()
    );
}

#[test]
fn n_hop_neighbors_are_exactly_the_valid_ball() {
    for space in [small(), small_free()] {
        let all = space.enumerate(10_000).unwrap();
        for seed in 0..40 {
            let c = space.sample_uniform(&mut rng(seed)).unwrap();
            for n in 0..=3 {
                let got = space.n_hop_neighbors(&c, n).unwrap();
                let unique: BTreeSet<Config> = got.iter().cloned().collect();
                assert_eq!(unique.len(), got.len(), "duplicates at n={n}");
                let expected: BTreeSet<Config> = all
                    .iter()
                    .filter(|o| (1..=u64::from(n)).contains(&distance(&space, &c, o)))
                    .cloned()
                    .collect();
                assert_eq!(unique, expected, "n={n} from {c:?}");
            }
            let one: BTreeSet<Config> = space.neighbors(&c).unwrap().into_iter().collect();
            let ball: BTreeSet<Config> =
                space.n_hop_neighbors(&c, 1).unwrap().into_iter().collect();
            assert_eq!(one, ball);
        }
    }
}

#[test]
fn n_hop_neighbors_of_a_large_space_are_valid_and_within_n() {
    let space = gpu_like();
    for seed in 0..5 {
        let c = space.sample_uniform(&mut rng(seed)).unwrap();
        let got = space.n_hop_neighbors(&c, 2).unwrap();
        let unique: HashSet<&Config> = got.iter().collect();
        assert_eq!(unique.len(), got.len());
        assert!(got.len() > space.neighbors(&c).unwrap().len());
        for n in &got {
            assert_valid(&space, n);
            assert!((1..=2).contains(&distance(&space, &c, n)));
        }
    }
}

#[test]
fn hop_distance_is_a_metric() {
    for space in spaces() {
        for seed in 0..SEEDS {
            let mut r = rng(seed);
            let a = space.sample_uniform(&mut r).unwrap();
            let b = space.sample_uniform(&mut r).unwrap();
            let c = space.sample_uniform(&mut r).unwrap();
            assert_eq!(distance(&space, &a, &a), 0);
            assert_eq!(distance(&space, &a, &b), distance(&space, &b, &a));
            assert_eq!(distance(&space, &a, &b) == 0, a == b);
            assert!(
                distance(&space, &a, &c) <= distance(&space, &a, &b) + distance(&space, &b, &c)
            );
        }
    }
}

#[test]
fn hop_distance_is_the_fewest_moves() {
    // Without bounds or constraints, the metric equals the shortest path along `neighbors`.
    let space = small_free();
    let all = space.enumerate(10_000).unwrap();
    for seed in 0..5 {
        let start = space.sample_uniform(&mut rng(seed)).unwrap();
        let mut dist: HashMap<Config, u64> = HashMap::from([(start.clone(), 0)]);
        let mut queue = VecDeque::from([start.clone()]);
        while let Some(c) = queue.pop_front() {
            let d = dist[&c];
            for n in space.neighbors(&c).unwrap() {
                dist.entry(n.clone()).or_insert_with(|| {
                    queue.push_back(n);
                    d + 1
                });
            }
        }
        assert_eq!(dist.len(), all.len());
        for c in &all {
            assert_eq!(dist[c], distance(&space, &start, c), "{c:?}");
        }
    }
}

#[test]
fn hop_distance_examples() {
    let mut b = SearchSpace::builder();
    b.factorization("f", 64, 3);
    b.permutation("p", 4);
    b.discrete("d", &[0, 16, 64, 512]);
    b.categorical("c", &["x", "y"]);
    let space = b.build().unwrap();
    let d = |a: &str, b: &str| distance(&space, &space.parse(a).unwrap(), &space.parse(b).unwrap());
    let base = "f=[4,2,8];p=[0,1,2,3];d=0;c=x";
    assert_eq!(d(base, base), 0);
    assert_eq!(d(base, "f=[8,2,4];p=[0,1,2,3];d=0;c=x"), 1);
    assert_eq!(d(base, "f=[64,1,1];p=[0,1,2,3];d=0;c=x"), 4);
    assert_eq!(d(base, "f=[4,2,8];p=[1,2,0,3];d=0;c=x"), 2); // a 3-cycle
    assert_eq!(d(base, "f=[4,2,8];p=[3,2,1,0];d=0;c=x"), 2); // two swaps
    assert_eq!(d(base, "f=[4,2,8];p=[1,2,3,0];d=0;c=x"), 3); // a 4-cycle
    assert_eq!(d(base, "f=[4,2,8];p=[0,1,2,3];d=512;c=x"), 3);
    assert_eq!(d(base, "f=[4,2,8];p=[0,1,2,3];d=0;c=y"), 1);
    assert_eq!(d(base, "f=[1,64,1];p=[1,0,2,3];d=16;c=y"), 5 + 1 + 1 + 1);

    let mut b = SearchSpace::builder();
    b.factorization("f", 360, 3); // 2^3 * 3^2 * 5
    let space = b.build().unwrap();
    let d = |a: &str, b: &str| distance(&space, &space.parse(a).unwrap(), &space.parse(b).unwrap());
    // 2: [3,0,0] -> [0,0,3] is 3 moves; 3: [0,2,0] -> [2,0,0] is 2; 5: [0,0,1] -> [0,1,0] is 1.
    assert_eq!(d("f=[8,9,5]", "f=[9,5,8]"), 6);
}

#[test]
fn text_form_round_trips() {
    for space in spaces() {
        for seed in 0..SEEDS {
            let c = space.sample_uniform(&mut rng(seed)).unwrap();
            let text = space.format(&c).unwrap();
            assert!(!text.contains(' '));
            assert_eq!(space.parse(&text).unwrap(), c, "{text}");
        }
    }
}

#[test]
fn text_form_is_stable() {
    let space = gpu_like();
    let c = Config::new(vec![
        Value::Factorization(vec![2, 1, 8, 3, 1]),
        Value::Factorization(vec![4, 2, 2, 2, 2]),
        Value::Factorization(vec![5, 3, 2]),
        Value::Permutation(vec![1, 0, 3, 2]),
        Value::Discrete(2),
        Value::Categorical(2),
    ]);
    let text =
        "tile_i=[2,1,8,3,1];tile_j=[4,2,2,2,2];tile_k=[5,3,2];order=[1,0,3,2];unroll=64;vec=f32x4";
    assert_eq!(space.format(&c).unwrap(), text);
    assert_eq!(space.parse(text).unwrap(), c);
    // Any entry order, spaces around tokens.
    let shuffled = " vec = f32x4 ; unroll=64;order=[1, 0, 3, 2];tile_k=[5,3,2];tile_j=[4,2,2,2,2];tile_i=[2,1,8,3,1]";
    assert_eq!(space.parse(shuffled).unwrap(), c);
}

#[test]
fn text_form_rejects_bad_text() {
    let space = small();
    let good = "t=[3,1,4];p=[2,0,1];d=2;c=b";
    space.parse(good).unwrap();
    let parse_errors = [
        "t=[3,1,4];p=[2,0,1];d=2",         // missing knob
        "t=[3,1,4];p=[2,0,1];d=2;c=b;c=a", // repeated knob
        "t=[3,1,4];p=[2,0,1];d=2;c=b;x=1", // unknown knob
        "t=[3,1,4];p=[2,0,1];d=2;c=b;",    // empty entry
        "t=[3,1,4];p=[2,0,1];d=3;c=b",     // not a value of the list
        "t=[3,1,4];p=[2,0,1];d=two;c=b",   // not an integer
        "t=[3,1,4];p=[2,0,1];d=2;c=z",     // unknown choice
        "t=3,1,4;p=[2,0,1];d=2;c=b",       // no brackets
        "t=[3,-1,4];p=[2,0,1];d=2;c=b",    // negative factor
        "t=[3,1,4];p=[2,0,1];d=2;c",       // no '='
        "",
    ];
    for text in parse_errors {
        assert!(
            matches!(space.parse(text), Err(Error::Parse { .. })),
            "{text}"
        );
    }
    let value_errors = [
        "t=[3,2,4];p=[2,0,1];d=2;c=b",  // product 24
        "t=[1,1,12];p=[2,0,1];d=2;c=b", // innermost bound 4
        "t=[3,4];p=[2,0,1];d=2;c=b",    // two parts
        "t=[3,1,4];p=[2,2,1];d=2;c=b",  // not a permutation
        "t=[3,1,4];p=[0,1];d=2;c=b",    // too short
    ];
    for text in value_errors {
        assert!(
            matches!(space.parse(text), Err(Error::InvalidValue { .. })),
            "{text}"
        );
    }
    assert_eq!(
        space.parse("t=[12,1,1];p=[0,1,2];d=4;c=a"),
        Err(Error::ConstraintViolated("not t0=12 with d=4".into()))
    );
}

#[test]
fn serde_round_trips() {
    let space = gpu_like();
    for seed in 0..50 {
        let c = space.sample_uniform(&mut rng(seed)).unwrap();
        let json = serde_json::to_string(&c).unwrap();
        let back: Config = serde_json::from_str(&json).unwrap();
        assert_eq!(back, c);
    }
    let c = Config::new(vec![
        Value::Factorization(vec![4, 2, 8]),
        Value::Permutation(vec![1, 0, 2]),
        Value::Discrete(2),
        Value::Categorical(0),
    ]);
    assert_eq!(
        serde_json::to_string(&c).unwrap(),
        r#"[{"factorization":[4,2,8]},{"permutation":[1,0,2]},{"discrete":2},{"categorical":0}]"#
    );
}

#[test]
fn q_random_walk_gives_valid_different_configs() {
    for space in spaces() {
        for seed in 0..SEEDS {
            let mut r = rng(seed);
            let c = space.sample_uniform(&mut r).unwrap();
            for q in [0.0, 0.5, 0.9] {
                let m = space.mutate_q_random_walk(&c, q, &mut r).unwrap();
                assert_valid(&space, &m);
                assert_ne!(m, c);
                assert!(distance(&space, &c, &m) >= 1);
            }
        }
    }
}

#[test]
fn q_random_walk_goes_further_with_larger_q() {
    let space = small_free();
    let mean = |q: f64| {
        let mut r = rng(1);
        let total: u64 = (0..2000)
            .map(|_| {
                let c = space.sample_uniform(&mut r).unwrap();
                let m = space.mutate_q_random_walk(&c, q, &mut r).unwrap();
                distance(&space, &c, &m)
            })
            .sum();
        total as f64 / 2000.0
    };
    let (m0, m5, m9) = (mean(0.0), mean(0.5), mean(0.9));
    assert!((m0 - 1.0).abs() < 1e-9, "q=0 is one step: {m0}");
    assert!(m0 < m5 && m5 < m9, "{m0} {m5} {m9}");
}

#[test]
fn q_outside_zero_one_is_an_error() {
    let space = small();
    let c = space.sample_uniform(&mut rng(0)).unwrap();
    for q in [1.0, 1.5, -0.1, f64::NAN] {
        assert!(matches!(
            space.mutate_q_random_walk(&c, q, &mut rng(0)),
            Err(Error::InvalidProbability(_))
        ));
    }
}

/// Pearson's chi-square statistic of `counts` against a uniform distribution over `cells`.
fn chi_square(counts: &BTreeMap<Config, usize>, cells: usize, draws: usize) -> f64 {
    let expected = draws as f64 / cells as f64;
    let seen: f64 = counts
        .values()
        .map(|&n| (n as f64 - expected).powi(2) / expected)
        .sum();
    let unseen = (cells - counts.len()) as f64 * expected;
    seen + unseen
}

#[test]
fn factorizations_are_sampled_uniformly() {
    for knob in [
        Factorization::new(12, 3),                       // 18 factorizations
        Factorization::new(36, 3).with_max_innermost(4), // bounded
        Factorization::new(30, 2).with_max_part(0, 10),  // several primes, bound outside
    ] {
        let mut b = SearchSpace::builder();
        b.add("f", knob);
        let space = b.build().unwrap();
        let cells = space.enumerate(1000).unwrap().len();
        assert_eq!(cells as u128, space.size());
        let draws = 1000 * cells;
        let mut counts = BTreeMap::new();
        let mut r = rng(42);
        for _ in 0..draws {
            *counts
                .entry(space.sample_uniform(&mut r).unwrap())
                .or_insert(0) += 1;
        }
        assert_eq!(counts.len(), cells, "every factorization is reached");
        // dof = cells - 1 <= 17; its 99.99% quantile is below 50.
        let chi2 = chi_square(&counts, cells, draws);
        assert!(chi2 < 50.0, "chi-square {chi2} over {cells} cells");
    }
}

#[test]
fn constrained_sampling_is_uniform_over_valid_configs() {
    let mut b = SearchSpace::builder();
    let f = b.factorization("f", 8, 2);
    let d = b.discrete("d", &[0, 1, 2]);
    b.constraint("f0 * (d+1) <= 4", move |c| {
        c.factors(f).unwrap()[0] * (c.index(d).unwrap() as u64 + 1) <= 4
    });
    let space = b.build().unwrap();
    let valid = space.enumerate(100).unwrap();
    assert_eq!(valid.len(), 3 + 2 + 1); // f0 in {1,2,4}, {1,2}, {1}
    let draws = 6000;
    let mut counts = BTreeMap::new();
    let mut r = rng(3);
    for _ in 0..draws {
        let c = space.sample_uniform(&mut r).unwrap();
        assert!(valid.contains(&c));
        *counts.entry(c).or_insert(0) += 1;
    }
    assert!(chi_square(&counts, valid.len(), draws) < 30.0);
}

#[test]
fn size_counts_points_and_matches_enumeration() {
    let count = |knob: Factorization| {
        let mut b = SearchSpace::builder();
        b.add("f", knob);
        b.build().unwrap().size()
    };
    assert_eq!(count(Factorization::new(1024, 5)), 1001); // C(14, 4)
    assert_eq!(count(Factorization::new(720_720, 5)), 70 * 15 * 625); // 2^4 3^2 5 7 11 13
    assert_eq!(count(Factorization::new(97, 3)), 3);
    assert_eq!(count(Factorization::new(1, 4)), 1);
    assert_eq!(count(Factorization::new(12, 2).with_max_innermost(3)), 3); // [4,3] [6,2] [12,1]

    let free = small_free();
    assert_eq!(free.size(), 18 * 6 * 3 * 2);
    let all = free.enumerate(10_000).unwrap();
    assert_eq!(all.len() as u128, free.size());
    let sorted: Vec<Config> = all
        .iter()
        .cloned()
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    assert_eq!(all, sorted, "ascending and distinct");
    for c in &all {
        assert_valid(&free, c);
    }

    let constrained = small();
    let valid = constrained.enumerate(10_000).unwrap();
    assert!((valid.len() as u128) < constrained.size());
    for c in &valid {
        assert_valid(&constrained, c);
    }
    assert!(matches!(
        constrained.enumerate(10),
        Err(Error::TooLarge { cap: 10, .. })
    ));
    assert!(gpu_like().size() > 1_000_000);
}

#[test]
fn large_extents_build_and_sample_quickly() {
    let start = Instant::now();
    let mut b = SearchSpace::builder();
    b.factorization("pow2", 1 << 32, 5);
    b.factorization("composite", 735_134_400, 5); // 1344 divisors
    b.factorization("prime", 4_294_967_291, 3); // largest prime below 2^32
    let space = b.build().unwrap();
    let mut r = rng(0);
    for _ in 0..100 {
        let c = space.sample_uniform(&mut r).unwrap();
        assert_valid(&space, &c);
        let m = space.mutate_q_random_walk(&c, 0.5, &mut r).unwrap();
        assert_valid(&space, &m);
    }
    assert!(start.elapsed() < Duration::from_secs(20));
}

#[test]
fn impossible_constraints_give_clean_errors() {
    let mut b = SearchSpace::builder();
    b.factorization("f", 64, 3);
    b.discrete("d", &[1, 2]);
    b.constraint("fine", |_| true);
    b.constraint("never", |_| false);
    b.max_tries(500);
    let space = b.build().unwrap();
    let start = Instant::now();
    assert_eq!(
        space.sample_uniform(&mut rng(0)),
        Err(Error::Unsatisfiable {
            tries: 500,
            constraint: "never".into()
        })
    );
    let c = Config::new(vec![
        Value::Factorization(vec![4, 4, 4]),
        Value::Discrete(0),
    ]);
    assert_eq!(
        space.mutate_q_random_walk(&c, 0.5, &mut rng(0)),
        Err(Error::NoMutation)
    );
    assert!(space.neighbors(&c).unwrap().is_empty());
    assert!(space.n_hop_neighbors(&c, 2).unwrap().is_empty());
    assert!(space.enumerate(1000).unwrap().is_empty());
    assert_eq!(
        space.check(&c),
        Err(Error::ConstraintViolated("never".into()))
    );
    assert!(start.elapsed() < Duration::from_secs(10));
}

#[test]
fn a_single_valid_point_cannot_be_mutated() {
    let mut b = SearchSpace::builder();
    let f = b.factorization("f", 4, 2);
    b.constraint("only [2,2]", move |c| c.factors(f) == Some(&[2, 2][..]));
    let space = b.build().unwrap();
    let c = space.sample_uniform(&mut rng(0)).unwrap();
    assert_eq!(c.factors(f), Some(&[2, 2][..]));
    assert_eq!(
        space.mutate_q_random_walk(&c, 0.5, &mut rng(0)),
        Err(Error::NoMutation)
    );

    // A point isolated from every other valid point is still mutated (by the fallbacks).
    let mut b = SearchSpace::builder();
    let f = b.factorization("f", 64, 2);
    b.constraint("ends", move |c| {
        matches!(c.factors(f), Some([1, 64] | [64, 1]))
    });
    let space = b.build().unwrap();
    let c = space.parse("f=[1,64]").unwrap();
    for seed in 0..20 {
        assert_eq!(
            space
                .format(&space.mutate_q_random_walk(&c, 0.5, &mut rng(seed)).unwrap())
                .unwrap(),
            "f=[64,1]"
        );
    }
}

#[test]
fn constraints_are_honoured_everywhere() {
    let space = gpu_like();
    let rejected = |c: &Config| space.constraints().iter().any(|k| !k.holds(c));
    for seed in 0..SEEDS {
        let mut r = rng(seed);
        let c = space.sample_uniform(&mut r).unwrap();
        assert!(!rejected(&c));
        assert!(!space.neighbors(&c).unwrap().iter().any(rejected));
        assert!(!rejected(
            &space.mutate_q_random_walk(&c, 0.5, &mut r).unwrap()
        ));
        if seed < 3 {
            assert!(!space.n_hop_neighbors(&c, 2).unwrap().iter().any(rejected));
        }
    }
    // The constraints do cut: some valid config has 1-hop moves that they reject.
    let free = {
        let mut b = SearchSpace::builder();
        b.factorization("tile_i", 48, 5);
        b.add("tile_j", Factorization::new(64, 5).with_max_innermost(4));
        b.factorization("tile_k", 30, 3);
        b.permutation("order", 4);
        b.discrete("unroll", &[0, 16, 64, 512]);
        b.categorical("vec", &["f32", "f32x2", "f32x4"]);
        b.build().unwrap()
    };
    let cut = (0..SEEDS).any(|seed| {
        let c = space.sample_uniform(&mut rng(seed)).unwrap();
        free.neighbors(&c).unwrap().len() > space.neighbors(&c).unwrap().len()
    });
    assert!(cut);
}

#[test]
fn builder_rejects_bad_knobs_and_constraints() {
    let invalid_knob = |knob: Knob| {
        let mut b = SearchSpace::builder();
        b.add("k", knob);
        matches!(b.build(), Err(Error::InvalidKnob { .. }))
    };
    assert!(invalid_knob(Factorization::new(0, 3).into()));
    assert!(invalid_knob(Factorization::new(8, 0).into()));
    assert!(invalid_knob(Factorization::new(8, 17).into()));
    assert!(invalid_knob(Factorization::new((1 << 32) + 1, 2).into()));
    assert!(invalid_knob(
        Factorization::new(8, 2).with_max_part(2, 4).into()
    ));
    assert!(invalid_knob(
        Factorization::new(12, 2)
            .with_max_part(0, 3)
            .with_max_part(1, 3)
            .into()
    ));
    assert!(invalid_knob(tuner::Permutation::new(0).into()));
    assert!(invalid_knob(tuner::Discrete::new(vec![]).into()));
    assert!(invalid_knob(tuner::Discrete::new(vec![1, 2, 1]).into()));
    assert!(invalid_knob(
        tuner::Categorical::new(Vec::<String>::new()).into()
    ));
    assert!(invalid_knob(tuner::Categorical::new(["a", "a"]).into()));
    assert!(invalid_knob(tuner::Categorical::new(["a;b"]).into()));
    assert!(invalid_knob(tuner::Categorical::new(["a b"]).into()));

    for name in ["", "a=b", "x;y", "[k]", "with space"] {
        let mut b = SearchSpace::builder();
        b.discrete(name, &[1]);
        assert!(
            matches!(b.build(), Err(Error::InvalidKnob { .. })),
            "{name:?}"
        );
    }
    let mut b = SearchSpace::builder();
    b.discrete("u", &[1]);
    b.discrete("u", &[2]);
    assert_eq!(b.build().unwrap_err(), Error::DuplicateKnob("u".into()));

    let mut b = SearchSpace::builder();
    b.constraint("", |_| true);
    assert!(matches!(b.build(), Err(Error::InvalidConstraint { .. })));
    let mut b = SearchSpace::builder();
    b.constraint("c", |_| true).constraint("c", |_| true);
    assert!(matches!(b.build(), Err(Error::InvalidConstraint { .. })));

    // The message says what is wrong.
    let mut b = SearchSpace::builder();
    b.add(
        "tile",
        Factorization::new(12, 2)
            .with_max_part(0, 3)
            .with_max_part(1, 3),
    );
    let message = b.build().unwrap_err().to_string();
    assert!(
        message.contains("tile") && message.contains("bounds"),
        "{message}"
    );
}

#[test]
fn check_reports_what_does_not_fit() {
    let space = small();
    let good = space.parse("t=[3,1,4];p=[2,0,1];d=2;c=b").unwrap();
    space.check(&good).unwrap();
    let short = Config::new(good.values()[..3].to_vec());
    assert_eq!(
        space.check(&short),
        Err(Error::WrongKnobCount {
            expected: 4,
            found: 3
        })
    );
    let wrong_kind = good.with_value(0, Value::Discrete(0)).unwrap();
    assert!(
        matches!(space.check(&wrong_kind), Err(Error::InvalidValue { knob, .. }) if knob == "t")
    );
    let out_of_range = good.with_value(3, Value::Categorical(2)).unwrap();
    assert!(
        matches!(space.check(&out_of_range), Err(Error::InvalidValue { knob, .. }) if knob == "c")
    );
    let overflow = good
        .with_value(0, Value::Factorization(vec![u64::MAX, 2, 1]))
        .unwrap();
    assert!(space.check(&overflow).is_err());
    // Every operation checks its input rather than misbehaving.
    assert!(space.neighbors(&wrong_kind).is_err());
    assert!(space.n_hop_neighbors(&wrong_kind, 1).is_err());
    assert!(space.hop_distance(&good, &wrong_kind).is_err());
    assert!(space
        .mutate_q_random_walk(&wrong_kind, 0.5, &mut rng(0))
        .is_err());
    assert!(space.to_features(&wrong_kind).is_err());
    assert!(space.format(&wrong_kind).is_err());
}

#[test]
fn features_describe_the_config() {
    let space = small();
    let names = space.feature_names();
    assert_eq!(
        names,
        [
            "t[0].log2",
            "t[1].log2",
            "t[2].log2",
            "p.pos[0]",
            "p.pos[1]",
            "p.pos[2]",
            "d.index",
            "c=a",
            "c=b"
        ]
    );
    let c = space.parse("t=[3,1,4];p=[2,0,1];d=4;c=b").unwrap();
    let f = space.to_features(&c).unwrap();
    assert_eq!(f.len(), names.len());
    assert!((f[0] - 3f64.log2()).abs() < 1e-12);
    assert_eq!(&f[1..], &[0.0, 2.0, 1.0, 2.0, 0.0, 2.0, 0.0, 1.0]);
    for seed in 0..SEEDS {
        let c = small().sample_uniform(&mut rng(seed)).unwrap();
        let f = space.to_features(&c).unwrap();
        assert_eq!(f.len(), names.len());
        assert!(f.iter().all(|x| x.is_finite()));
        assert!((f[0] + f[1] + f[2] - 12f64.log2()).abs() < 1e-9);
    }
}

#[test]
fn config_values_are_accessible_for_crossover() {
    let space = gpu_like();
    let mut r = rng(5);
    let a = space.sample_uniform(&mut r).unwrap();
    let b = space.sample_uniform(&mut r).unwrap();
    // Uniform crossover, kept only when valid.
    let mut children = 0;
    for _ in 0..100 {
        let values = a
            .values()
            .iter()
            .zip(b.values())
            .map(|(x, y)| {
                if r.gen_bool(0.5) {
                    x.clone()
                } else {
                    y.clone()
                }
            })
            .collect();
        let child = Config::new(values);
        if space.is_valid(&child) {
            children += 1;
        }
    }
    assert!(children > 0);
    let order = space.knob_index("order").unwrap();
    let swapped = a
        .with_value(order, Value::Permutation(vec![3, 2, 1, 0]))
        .unwrap();
    assert_eq!(swapped.permutation(order), Some(&[3, 2, 1, 0][..]));
    assert_eq!(swapped.factors(order), None);
    assert!(matches!(
        a.with_value(99, Value::Discrete(0)),
        Err(Error::KnobIndex { .. })
    ));
    let unroll = space.knob_index("unroll").unwrap();
    let vec = space.knob_index("vec").unwrap();
    let c = a
        .with_value(unroll, Value::Discrete(3))
        .unwrap()
        .with_value(vec, Value::Categorical(1))
        .unwrap();
    assert_eq!(space.discrete_value(&c, unroll), Some(512));
    assert_eq!(space.choice(&c, vec), Some("f32x2"));
    assert_eq!(space.discrete_value(&c, vec), None);
    assert_eq!(space.knob_name(vec), Some("vec"));
}

#[test]
fn a_space_without_knobs_has_one_point() {
    let space = SearchSpace::builder().build().unwrap();
    assert_eq!(space.size(), 1);
    let c = space.sample_uniform(&mut rng(0)).unwrap();
    assert!(c.is_empty());
    assert_eq!(space.format(&c).unwrap(), "");
    assert_eq!(space.parse("").unwrap(), c);
    assert_eq!(space.enumerate(1).unwrap(), vec![c.clone()]);
    assert!(space.neighbors(&c).unwrap().is_empty());
    assert_eq!(
        space.mutate_q_random_walk(&c, 0.5, &mut rng(0)),
        Err(Error::NoMutation)
    );
}
