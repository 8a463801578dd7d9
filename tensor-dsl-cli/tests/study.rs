//! `tensor-dsl study` on small synthetic landscapes (samples of small matmuls' CPU spaces,
//! timed by a formula): it replays the strategies at each budget, computes the zero-trial
//! pick leave-one-shape-out, reports landscapes of older spaces, writes report and SVG.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::process::Command;
use tensor_dsl::ir::{bind, parse_text};
use tensor_dsl::records::{self, Record, Target, RECORD_VERSION};
use tensor_dsl::template::cpu::CpuTemplate;

/// A synthetic landscape of `mm` at `shapes`: a sample of its CPU space (the points with
/// loop tiles and no reduction blocking; the others are unrecorded, as in a sampled
/// landscape), timed by a smooth formula whose best is vector 8, unroll 2, no packing.
fn synthetic(k: &tensor_dsl::ir::Kernel, shapes: &[Vec<usize>]) -> Vec<Record> {
    let refs: Vec<&[usize]> = shapes.iter().map(Vec::as_slice).collect();
    let extents = bind(k, &refs).unwrap();
    // This CPU, as a study's landscapes are recorded on the machine that studies them.
    let target = Target::this_cpu();
    let template = CpuTemplate::new(k, &extents, tensor_dsl::runtime::cpu::simd_lanes()).unwrap();
    let space = template.space();
    let size: f64 = extents.iter().map(|&e| e as f64).product();
    space
        .enumerate(1_000_000)
        .unwrap()
        .into_iter()
        .filter_map(|c| {
            let cfg = template.decode(&c).unwrap();
            (cfg.vector_code == 0 && cfg.k_block == 0).then_some((c, cfg))
        })
        .map(|(c, cfg)| {
            let s = 1e-9
                * size
                * (1.0
                    + ((cfg.vector as f64) / 8.0).log2().abs()
                    + ((cfg.unroll as f64) / 2.0).log2().abs()
                    + f64::from(u8::from(cfg.pack)));
            Record {
                version: RECORD_VERSION,
                kernel: k.fingerprint(),
                name: "mm".into(),
                kernel_text: k.to_string(),
                shapes: shapes.to_vec(),
                dtype: records::dtype_key(k),
                target: target.clone(),
                codegen: tensor_dsl::codegen::c::CODEGEN_VERSION,
                config: space.format(&c).unwrap(),
                seconds: Some(s),
                samples: vec![s, s],
                error: None,
                gflops: None,
                strategy: "landscape".into(),
                unix_time: 0,
                pair: None,
            }
        })
        .collect()
}

fn study(files: &[&std::path::Path], extra: &[&str], out_dir: &std::path::Path) -> String {
    let mut args: Vec<String> = vec!["study".into()];
    args.extend(files.iter().map(|f| f.to_str().unwrap().to_string()));
    args.extend(extra.iter().map(|s| s.to_string()));
    args.extend(["--out".into(), out_dir.to_str().unwrap().to_string()]);
    let out = Command::new(env!("CARGO_BIN_EXE_tensor-dsl"))
        .args(&args)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

#[test]
fn study_replays_strategies_over_seeds_and_writes_report_and_svg() {
    let dir = std::env::temp_dir().join(format!("td-study-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let k = parse_text("mm", "c[[i,j]] += a[[i,k]] * b[[k,j]]", None).unwrap();
    let recs = synthetic(&k, &[vec![8, 16], vec![16, 8], vec![8, 8]]);
    let file = dir.join("mm_small.jsonl");
    records::write(&file, &recs).unwrap();
    let out_dir = dir.join("out");
    let stdout = study(
        &[&file],
        &[
            "--strategies",
            "random,opevo-droplet",
            "--seeds",
            "3",
            "--budgets",
            "12,24",
        ],
        &out_dir,
    );
    assert!(stdout.contains("| opevo-droplet |"), "{stdout}");
    assert!(
        stdout.contains("min @24 | median @24 | spread @24"),
        "{stdout}"
    );
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out_dir.join("study.json")).unwrap())
            .unwrap();
    assert_eq!(report["seeds"], 3);
    assert_eq!(report["budgets"], serde_json::json!([12, 24]));
    let l = &report["landscapes"][0];
    assert_eq!(l["points"].as_u64().unwrap() as usize, recs.len());
    // One shape only: no zero-trial pick to judge.
    assert!(l["zero_trial"].is_null(), "{l}");
    for r in l["results"].as_array().unwrap() {
        let budgets = r["budgets"].as_array().unwrap();
        assert_eq!(budgets.len(), 2);
        for (b, n) in budgets.iter().zip([12, 24]) {
            assert_eq!(b["trials"], n);
            let ratios = b["final_ratio"].as_array().unwrap();
            assert_eq!(ratios.len(), 3);
            let (min, spread) = (
                b["min_ratio"].as_f64().unwrap(),
                b["spread"].as_f64().unwrap(),
            );
            assert!(ratios.iter().all(|x| x.as_f64().unwrap() >= min), "{b}");
            assert!((0.0..=1.0).contains(&spread), "{b}");
            assert_eq!(b["mean_best_gflops"].as_array().unwrap().len(), n);
        }
        // Below 32 trials no threshold applies; the pass is the spread's.
        assert!(budgets[0]["threshold"].is_null());
        assert!(r["pass"].is_boolean());
    }
    // On a smooth landscape (its unrecorded points read as their nearest recorded ones) the
    // product's search gets there in every seed.
    let od = &l["results"][1]["budgets"][1];
    assert_eq!(od["seeds_reaching_share"], 3, "{od}");
    assert!(std::fs::read_to_string(out_dir.join("mm_small.svg"))
        .unwrap()
        .starts_with("<svg"));
    assert!(out_dir.join("study.md").exists());
    std::fs::remove_dir_all(&dir).ok();
}

/// Leave-one-shape-out: three shapes of one kernel share their best schedule; each
/// landscape's zero-trial pick, learned from the other two, is that schedule.
#[test]
fn zero_trial_pick_is_learned_from_the_other_shapes_and_read_in_the_held_out_one() {
    let dir = std::env::temp_dir().join(format!("td-study-loo-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let k = parse_text("mm", "c[[i,j]] += a[[i,k]] * b[[k,j]]", None).unwrap();
    let mut files = Vec::new();
    for (n, (m, kk, nn)) in [(8, 16, 8), (16, 16, 16), (16, 32, 8)]
        .into_iter()
        .enumerate()
    {
        let file = dir.join(format!("mm_{n}.jsonl"));
        let recs = synthetic(&k, &[vec![m, kk], vec![kk, nn], vec![m, nn]]);
        records::write(&file, &recs).unwrap();
        files.push(file);
    }
    // A lone shape of another kernel has nothing to learn from.
    let t = parse_text("mt", "c[[i,j]] += a[[k,i]] * b[[k,j]]", None).unwrap();
    let lone = dir.join("mt.jsonl");
    records::write(
        &lone,
        &synthetic(&t, &[vec![16, 8], vec![16, 8], vec![8, 8]]),
    )
    .unwrap();
    let out_dir = dir.join("out");
    let refs: Vec<&std::path::Path> = files
        .iter()
        .map(|f| f.as_path())
        .chain([lone.as_path()])
        .collect();
    let stdout = study(
        &refs,
        &[
            "--strategies",
            "random",
            "--seeds",
            "1",
            "--budgets",
            "4",
            "--unrecorded",
            "invalid",
            "--transfer",
        ],
        &out_dir,
    );
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out_dir.join("study.json")).unwrap())
            .unwrap();
    let ls = report["landscapes"].as_array().unwrap();
    assert_eq!(ls.len(), 4);
    for l in &ls[..3] {
        let z = &l["zero_trial"];
        assert_eq!(z["trained_on_shapes"], 2, "{l}");
        assert_eq!(z["exact"], true, "{z}");
        assert!(z["ratio"].as_f64().unwrap() > 0.999, "{z}");
        assert_eq!(z["pass"], true);
        // With --transfer the runs measure that pick first: the best within 4 trials.
        let run = &l["results"][0]["budgets"][0];
        assert!(run["min_ratio"].as_f64().unwrap() > 0.999, "{run}");
    }
    assert!(ls[3]["zero_trial"].is_null());
    assert_eq!(report["transfer"], true);
    // A few dozen points against a 4-trial budget: conclusive; the old-space test's are not.
    assert_eq!(report["conclusive"], true, "{}", report["too_small"]);
    assert!(stdout.contains("Zero-trial picks passing: 3/3"), "{stdout}");
    assert!(stdout.contains("(no other shape)"), "{stdout}");
    std::fs::remove_dir_all(&dir).ok();
}

/// Records of an older space (a knob renamed since) are reported, not silently dropped.
#[test]
fn records_of_an_older_space_are_reported_and_skipped() {
    let dir = std::env::temp_dir().join(format!("td-study-old-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let k = parse_text("mm", "c[[i,j]] += a[[i,k]] * b[[k,j]]", None).unwrap();
    let mut recs = synthetic(&k, &[vec![8, 8], vec![8, 8], vec![8, 8]]);
    for r in &mut recs {
        r.config = format!("old_knob=1;{}", r.config);
        r.codegen = 1;
    }
    let old = dir.join("old.jsonl");
    records::write(&old, &recs).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_tensor-dsl"))
        .args(["study", old.to_str().unwrap(), "--out"])
        .arg(dir.join("out"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("do not read in today's CPU space") && stderr.contains("skipped"),
        "{stderr}"
    );
    assert!(stderr.contains("no landscape to study"), "{stderr}");
    std::fs::remove_dir_all(&dir).ok();
}

/// The CPU default strategy is set only from data: the winner of the latest committed
/// study of today's CPU spaces (`bench/landscapes.sh`), when there is one.
#[test]
fn cpu_default_strategy_is_the_latest_committed_studys_winner() {
    let results = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../bench/results");
    let mut studies: Vec<std::path::PathBuf> = std::fs::read_dir(&results)
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            let name = p.file_name().unwrap().to_string_lossy().to_string();
            // strategies-<date>-cpu-v<N>: the spaces' version (not the `-transfer` study).
            name.starts_with("strategies-")
                && name
                    .rsplit_once("-cpu-v")
                    .is_some_and(|(_, v)| v.parse::<u32>().is_ok())
                && p.is_dir()
        })
        .map(|p| p.join("study.json"))
        .filter(|p| p.exists())
        .collect();
    studies.sort();
    let Some(latest) = studies.last() else {
        eprintln!("no committed study yet: CPU_DEFAULT_STRATEGY rests on the older replays");
        return;
    };
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(latest).unwrap()).unwrap();
    assert_eq!(
        report["best_strategy"].as_str(),
        Some(tensor_dsl::autotune::CPU_DEFAULT_STRATEGY),
        "{} names another winner: set CPU_DEFAULT_STRATEGY from it",
        latest.display()
    );
}
