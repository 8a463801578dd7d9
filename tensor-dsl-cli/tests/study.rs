//! `tensor-dsl study` on a small synthetic landscape (a sample of a small matmul's CPU
//! space, timed by a formula): it replays the strategies, and writes the report and SVG.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::process::Command;
use tensor_dsl::ir::{bind, parse_text};
use tensor_dsl::records::{self, Record, Target, RECORD_VERSION};
use tensor_dsl::template::cpu::CpuTemplate;

#[test]
fn study_replays_strategies_over_seeds_and_writes_report_and_svg() {
    let dir = std::env::temp_dir().join(format!("td-study-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let k = parse_text("mm", "c[[i,j]] += a[[i,k]] * b[[k,j]]", None).unwrap();
    let shapes = vec![vec![8, 16], vec![16, 8], vec![8, 8]];
    let refs: Vec<&[usize]> = shapes.iter().map(Vec::as_slice).collect();
    let extents = bind(&k, &refs).unwrap();
    let target = Target {
        device: "cpu".into(),
        name: "synthetic".into(),
        detail: "avx2,fma;threads=2".into(),
    };
    let template = CpuTemplate::new(&k, &extents, 8).unwrap();
    let space = template.space();
    // A sample of the space (the points with loop tiles and no reduction blocking); the
    // others replay as invalid, as unrecorded points of a sampled landscape do.
    let recs: Vec<Record> = space
        .enumerate(1_000_000)
        .unwrap()
        .into_iter()
        .filter_map(|c| {
            let cfg = template.decode(&c).unwrap();
            (cfg.vector_code == 0 && cfg.k_block == 0).then_some((c, cfg))
        })
        .map(|(c, cfg)| {
            let s = 1e-6
                * (1.0
                    + ((cfg.vector as f64) / 8.0).log2().abs()
                    + ((cfg.unroll as f64) / 2.0).log2().abs()
                    + f64::from(u8::from(cfg.pack)));
            Record {
                version: RECORD_VERSION,
                kernel: k.fingerprint(),
                name: "mm".into(),
                kernel_text: k.to_string(),
                shapes: shapes.clone(),
                dtype: records::dtype_key(&k),
                target: target.clone(),
                codegen: tensor_dsl::codegen::c::CODEGEN_VERSION,
                config: space.format(&c).unwrap(),
                seconds: Some(s),
                samples: vec![s, s],
                error: None,
                gflops: None,
                strategy: "landscape".into(),
                unix_time: 0,
            }
        })
        .collect();
    let file = dir.join("mm_small.jsonl");
    records::write(&file, &recs).unwrap();
    let out_dir = dir.join("out");
    let out = Command::new(env!("CARGO_BIN_EXE_tensor-dsl"))
        .args([
            "study",
            file.to_str().unwrap(),
            "--strategies",
            "random,opevo-droplet",
            "--seeds",
            "3",
            "--trials",
            "24",
            "--out",
            out_dir.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("| opevo-droplet |"), "{stdout}");
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out_dir.join("study.json")).unwrap())
            .unwrap();
    assert_eq!(report["seeds"], 3);
    let l = &report["landscapes"][0];
    assert_eq!(l["points"].as_u64().unwrap() as usize, recs.len());
    for r in l["results"].as_array().unwrap() {
        assert_eq!(r["final_share"].as_array().unwrap().len(), 3);
        assert_eq!(r["trials_to_share"].as_array().unwrap().len(), 3);
        let spread = r["spread"].as_f64().unwrap();
        assert!((0.0..=1.0).contains(&spread), "{r}");
        assert_eq!(r["mean_best_gflops"].as_array().unwrap().len(), 24);
    }
    // On a smooth landscape the model-guided default gets there in every seed.
    let od = &l["results"][1];
    assert_eq!(od["seeds_reaching_share"], 3, "{od}");
    assert!(std::fs::read_to_string(out_dir.join("mm_small.svg"))
        .unwrap()
        .starts_with("<svg"));
    assert!(out_dir.join("study.md").exists());
    std::fs::remove_dir_all(&dir).ok();
}
