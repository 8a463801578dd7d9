//! The text front end never panics: thousands of mutated kernels (deleted, inserted,
//! duplicated and swapped pieces, huge and zero numbers, stray tokens) and random shapes go
//! through parse → dtypes → bind → the CPU and GPU templates (default and a random point) →
//! validate → lower → C and CUDA generation. Every stage may say no with an error; none may
//! panic. Names printed into generated code cannot inject code.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::panic::{catch_unwind, AssertUnwindSafe};
use tensor_dsl::codegen;
use tensor_dsl::ir::{bind, parse_text, Kernel};
use tensor_dsl::template::cpu::CpuTemplate;
use tensor_dsl::template::gpu::{GpuTarget, GpuTemplate};

/// Pieces a mutation may insert.
const TOKENS: &[&str] = &[
    "[[",
    "]]",
    "[",
    "]",
    "(",
    ")",
    "+=",
    "=",
    "+",
    "-",
    "*",
    "/",
    ",",
    ";",
    " ",
    "i",
    "j",
    "k",
    "a",
    "b",
    "out",
    "2 *",
    "- 1",
    "0",
    "1",
    "4294967296",
    "18446744073709551615",
    "99999999999999999999999",
    "1e39",
    "-0.0",
    "1.5",
    "relu(",
    "max(",
    "pow(",
    "exp(",
    "sqrt",
    "a[[i]]",
    "a[[i, i]]",
    "c[[]]",
    "c[[i, j]] +=",
    "fn",
    "let",
    "//",
    "/*",
    "*/",
    "\"",
    "'",
    "\\",
    "é",
    "x𝔸",
    "r#type",
    "_",
    "{",
    "}",
    "#",
    "$",
    "@",
    "::",
    "..",
    "0 * i",
    "i * j",
    "-i",
    "i - 99999",
    "1000000 * i",
    "\0",
    "\n",
];

fn mutate(text: &str, rng: &mut StdRng) -> String {
    let mut chars: Vec<char> = text.chars().collect();
    for _ in 0..rng.gen_range(1..=4) {
        let n = chars.len();
        let at = rng.gen_range(0..=n);
        match rng.gen_range(0..5) {
            0 if n > 0 => {
                let end = (at + rng.gen_range(1..=6)).min(n);
                chars.drain(at.min(n)..end);
            }
            1 => {
                let t = TOKENS[rng.gen_range(0..TOKENS.len())];
                chars.splice(at..at, t.chars());
            }
            2 if n > 0 => {
                let start = rng.gen_range(0..n);
                let end = (start + rng.gen_range(1..=12)).min(n);
                let piece: Vec<char> = chars[start..end].to_vec();
                chars.splice(at..at, piece);
            }
            3 if n > 1 => {
                let (x, y) = (rng.gen_range(0..n), rng.gen_range(0..n));
                chars.swap(x, y);
            }
            _ => {
                // A digit becomes another number.
                if let Some(p) = (0..n)
                    .map(|d| (at + d) % n)
                    .find(|&p| chars[p].is_ascii_digit())
                {
                    let t = [
                        "0",
                        "7",
                        "65536",
                        "4294967297",
                        "340282366920938463463374607431768211456",
                    ][rng.gen_range(0..5)];
                    chars.splice(p..=p, t.chars());
                }
            }
        }
    }
    chars.into_iter().collect()
}

/// A random dimension: mostly small, sometimes 0, 1 or huge.
fn dim(rng: &mut StdRng) -> usize {
    match rng.gen_range(0..20) {
        0 => 0,
        1 => 1,
        2 => usize::MAX,
        3 => 1 << 33,
        4 => 4_294_967_297,
        _ => rng.gen_range(1..12),
    }
}

/// Everything after parsing, for one kernel and a few shapes.
fn drive(kernel: &Kernel, rng: &mut StdRng) {
    let _ = kernel.to_string();
    let _ = kernel.fingerprint();
    let _ = kernel
        .with_dtypes(["", "a=f16", "a=bf16,b=bf16", "zz=f8", "a=f32,c=f16"][rng.gen_range(0..5)]);
    let gpu = GpuTarget::h100();
    for attempt in 0..4 {
        // Shapes that bind (from random extents) or random ranks and dims.
        let shapes: Vec<Vec<usize>> = if attempt % 2 == 0 {
            let extents: Vec<usize> = kernel.indices.iter().map(|_| dim(rng).min(40)).collect();
            match common::shapes_for(kernel, &extents, |hi| (hi.max(0) as usize).min(64)) {
                Some((_, s)) => s,
                None => continue,
            }
        } else {
            kernel
                .params
                .iter()
                .map(|p| {
                    (0..p.rank + usize::from(rng.gen_bool(0.1)))
                        .map(|_| dim(rng))
                        .collect()
                })
                .collect()
        };
        let refs: Vec<&[usize]> = shapes.iter().map(Vec::as_slice).collect();
        let Ok(extents) = bind(kernel, &refs) else {
            continue;
        };
        let _ = kernel.flops(&extents);
        if extents
            .iter()
            .try_fold(1usize, |p, &e| p.checked_mul(e))
            .is_none_or(|p| p > 1 << 20)
        {
            continue; // the generators are fine, but the test must stay fast
        }
        if let Ok(t) = CpuTemplate::new(kernel, &extents, 8) {
            let mut points = vec![t.default_config()];
            if let Ok(c) = t.space().sample_uniform(rng) {
                points.push(c);
            }
            for c in points {
                let _ = t.space().format(&c);
                if let Ok(cfg) = t.decode(&c) {
                    let _ = cfg.validate(kernel);
                    let _ = codegen::c::generate(kernel, &extents, &refs, &cfg);
                }
            }
        }
        if let Ok(t) = GpuTemplate::new(kernel, &extents, &gpu) {
            let mut points: Vec<_> = t.default_config().into_iter().collect();
            if let Ok(c) = t.space().sample_uniform(rng) {
                points.push(c);
            }
            for c in points {
                if let Ok(s) = t.decode(&c) {
                    let _ = s.validate(kernel, &extents);
                    let _ = s.check_limits(kernel, &gpu);
                    let _ = codegen::cuda::generate(kernel, &extents, &refs, &s);
                }
            }
        }
    }
}

#[test]
fn mutated_kernels_and_shapes_give_errors_never_panics() {
    let cases: usize = std::env::var("TD_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(4000);
    let mut rng = StdRng::seed_from_u64(0x7d5_f022);
    let mut seeds: Vec<String> = common::KERNELS.iter().map(|s| s.to_string()).collect();
    seeds.push("c[[i, j]] += a[[i, k]] * b[[k, j]];".into());
    let previous = std::panic::take_hook();
    static WHERE: std::sync::Mutex<String> = std::sync::Mutex::new(String::new());
    std::panic::set_hook(Box::new(|info| {
        if let Some(l) = info.location() {
            *WHERE.lock().unwrap_or_else(|p| p.into_inner()) = l.to_string();
        }
    }));
    let mut panics: Vec<(String, String)> = Vec::new();
    let mut parsed = 0;
    for n in 0..cases {
        let base = &seeds[n % seeds.len()];
        let text = mutate(base, &mut rng);
        let mut case_rng = StdRng::seed_from_u64(n as u64);
        let result = catch_unwind(AssertUnwindSafe(|| {
            let name = ["fuzz", "x */ int y; /*", "", "3d", "é"][n % 5];
            match parse_text(name, &text, None) {
                Ok(k) => {
                    drive(&k, &mut case_rng);
                    true
                }
                Err(_) => false,
            }
        }));
        match result {
            Ok(ok) => parsed += usize::from(ok),
            Err(e) => {
                let msg = e
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default();
                let at = WHERE.lock().unwrap_or_else(|p| p.into_inner()).clone();
                panics.push((text, format!("{msg} at {at}")));
            }
        }
    }
    std::panic::set_hook(previous);
    assert!(
        panics.is_empty(),
        "{} of {cases} inputs panicked, e.g.:\n{}",
        panics.len(),
        panics
            .iter()
            .take(8)
            .map(|(t, m)| format!("{t:?}\n    -> {m}"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    assert!(
        parsed > cases / 20,
        "the mutations must leave some kernels valid: {parsed}"
    );
}

#[test]
fn kernel_names_cannot_inject_code() {
    let evil = "x */ int injected; /* \n#include <stdio.h>";
    let k = parse_text(evil, "c[[i, j]] += a[[i, k]] * b[[k, j]]", None).unwrap();
    let shapes: [&[usize]; 3] = [&[8, 4], &[4, 8], &[8, 8]];
    let extents = bind(&k, &shapes).unwrap();
    let cpu = CpuTemplate::new(&k, &extents, 8).unwrap();
    let c = codegen::c::generate(
        &k,
        &extents,
        &shapes,
        &cpu.decode(&cpu.default_config()).unwrap(),
    );
    let gpu = GpuTemplate::new(&k, &extents, &GpuTarget::h100()).unwrap();
    let s = gpu.decode(&gpu.default_config().unwrap()).unwrap();
    let cuda = codegen::cuda::generate(&k, &extents, &shapes, &s);
    for src in [c.as_str(), cuda.source.as_str()] {
        assert!(
            !src.contains("injected;") && !src.contains("<stdio.h>"),
            "{src}"
        );
        assert!(src.contains("x____int_injected_"), "{src}");
    }
}
