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
