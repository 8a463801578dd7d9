//! Snapshots of generated code, one per kernel case in `tests/kernels/` and backend. A diff
//! here is a change in generated code: review it like any other diff
//! (`cargo insta review`, or `INSTA_UPDATE=always` then `git diff`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;
use tensor_dsl::ir::{bind, parse_text};
use tensor_dsl::template::cpu::CpuConfig;

/// A case file: `kernel: <statements>` and `shapes: a=2x3 b=3 s=` (an empty shape is rank 0),
/// tensors listed in parameter order with the output last.
pub struct Case {
    pub name: String,
    pub kernel: String,
    pub params: Vec<(String, Vec<usize>)>,
}

pub fn load_cases() -> Vec<Case> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/kernels");
    let mut cases = Vec::new();
    let mut entries: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for path in entries {
        let text = std::fs::read_to_string(&path).unwrap();
        let field = |key: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(key))
                .unwrap_or_else(|| panic!("{path:?}: missing `{key}`"))
                .trim()
                .to_string()
        };
        let params = field("shapes:")
            .split_whitespace()
            .map(|p| {
                let (name, dims) = p.split_once('=').unwrap();
                let dims = if dims.is_empty() {
                    vec![]
                } else {
                    dims.split('x').map(|d| d.parse().unwrap()).collect()
                };
                (name.to_string(), dims)
            })
            .collect();
        cases.push(Case {
            name: path.file_stem().unwrap().to_string_lossy().into_owned(),
            kernel: field("kernel:"),
            params,
        });
    }
    cases
}

#[test]
fn generated_c() {
    let cases = load_cases();
    assert!(cases.len() >= 8);
    for case in cases {
        let decl: Vec<(String, bool)> = case
            .params
            .iter()
            .enumerate()
            .map(|(i, (n, _))| (n.clone(), i + 1 == case.params.len()))
            .collect();
        let kernel = parse_text(&case.name, &case.kernel, Some(&decl)).unwrap();
        let shapes: Vec<&[usize]> = case.params.iter().map(|(_, s)| s.as_slice()).collect();
        let extents = bind(&kernel, &shapes).unwrap();
        // A fixed SIMD width so snapshots do not depend on the machine.
        let config = CpuConfig::heuristic(&kernel, &extents, 8);
        let code = tensor_dsl::codegen::c::generate(&kernel, &extents, &shapes, &config);
        insta::assert_snapshot!(format!("c_{}", case.name), code);
    }
}

/// The blocked-reduction loop nest and the 512-bit request, on the matmul and the padded
/// convolution cases: blocks that do not divide the reduction (48 = 2·20 + 8, 3 = 2 + 1).
#[test]
fn generated_c_blocked() {
    for (name, k_block) in [("matmul", 20), ("conv_bias_relu", 2)] {
        let case = load_cases().into_iter().find(|c| c.name == name).unwrap();
        let decl: Vec<(String, bool)> = case
            .params
            .iter()
            .enumerate()
            .map(|(i, (n, _))| (n.clone(), i + 1 == case.params.len()))
            .collect();
        let kernel = parse_text(&case.name, &case.kernel, Some(&decl)).unwrap();
        let shapes: Vec<&[usize]> = case.params.iter().map(|(_, s)| s.as_slice()).collect();
        let extents = bind(&kernel, &shapes).unwrap();
        let config = CpuConfig {
            k_block,
            ..CpuConfig::heuristic(&kernel, &extents, 16)
        };
        assert!(config.wide_simd);
        assert!(tensor_dsl::template::cpu::blocked_reduction(&kernel, &extents, &config).is_some());
        let code = tensor_dsl::codegen::c::generate(&kernel, &extents, &shapes, &config);
        insta::assert_snapshot!(format!("c_blocked_{}", case.name), code);
    }
}
