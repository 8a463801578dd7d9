//! `tensor-dsl emit`: generated source + config JSON, one pair of files per configuration.

use crate::args::{parse_selection, parse_target, problem, Selection, Target};
use crate::KernelArgs;
use rand::{rngs::StdRng, SeedableRng};
use std::collections::HashSet;
use std::path::Path;
use std::process::ExitCode;
use tensor_dsl::codegen;
use tensor_dsl::template::cpu::CpuTemplate;
use tuner::{Config, SearchSpace};

/// The selected points: the default, or N distinct uniform samples (fewer when the space
/// has fewer valid points).
pub fn pick(
    space: &SearchSpace,
    default: &Config,
    selection: Selection,
    seed: u64,
) -> Result<Vec<Config>, String> {
    match selection {
        Selection::Default => Ok(vec![default.clone()]),
        Selection::Random(n) => {
            let mut rng = StdRng::seed_from_u64(seed);
            let mut seen = HashSet::new();
            let mut out = Vec::new();
            let mut tries = 0;
            while out.len() < n && tries < n * 50 + 100 {
                tries += 1;
                let c = space.sample_uniform(&mut rng).map_err(|e| e.to_string())?;
                if seen.insert(c.clone()) {
                    out.push(c);
                }
            }
            Ok(out)
        }
    }
}

pub fn run(
    args: &KernelArgs,
    target: &str,
    configs: &str,
    seed: u64,
    out: &Path,
) -> Result<ExitCode, String> {
    let p = problem(&args.name, &args.kernel, &args.shapes, &args.dtypes)?;
    let target = parse_target(target)?;
    // `config:TEXT`: one configuration as records and `emit` write it (einsum kernels).
    let text = configs.trim().strip_prefix("config:").map(str::trim);
    let selection = match text {
        Some(_) => Selection::Default,
        None => parse_selection(configs)?,
    };
    if text.is_some() && p.kernel.is_staged() {
        return Err("--configs config:TEXT is for kernels of one statement".into());
    }
    std::fs::create_dir_all(out).map_err(|e| format!("{}: {e}", out.display()))?;
    let shapes = p.shape_refs();
    let mut written = 0;
    if p.kernel.is_staged() {
        written = crate::rows::emit(&p, &target, selection, out)?;
    } else {
        match target {
            Target::Cpu => {
                let t = CpuTemplate::new(
                    &p.kernel,
                    &p.extents,
                    tensor_dsl::runtime::cpu::simd_lanes(),
                )?;
                let points = match text {
                    Some(text) => vec![t.parse(text).map_err(|e| format!("config:{text}: {e}"))?],
                    None => pick(t.space(), &t.default_config(), selection, seed)?,
                };
                for (n, c) in points.iter().enumerate() {
                    let schedule = t.decode(c)?;
                    let src = codegen::c::generate(&p.kernel, &p.extents, &shapes, &schedule);
                    let meta = serde_json::json!({
                        "kernel": p.kernel.to_string(),
                        "fingerprint": p.kernel.fingerprint(),
                        "dtypes": p.kernel.dtypes_text(),
                        "shapes": p.shapes,
                        "target": "cpu",
                        "config": t.space().format(c).map_err(|e| e.to_string())?,
                        "schedule": schedule,
                    });
                    write_pair(out, n, "c", &src, &meta)?;
                    written += 1;
                }
            }
            Target::Cuda { sm, arch_specific } => {
                let gpu = Target::gpu(sm, arch_specific);
                written = crate::verify::emit_cuda(&p, &gpu, selection, text, seed, out)?;
            }
        }
    }
    crate::output::line(
        serde_json::json!({ "dir": out.display().to_string(), "configs": written }),
    )?;
    Ok(ExitCode::SUCCESS)
}

pub fn write_pair(
    out: &Path,
    n: usize,
    ext: &str,
    src: &str,
    meta: &serde_json::Value,
) -> Result<(), String> {
    let stem = out.join(format!("config_{n:04}"));
    std::fs::write(stem.with_extension(ext), src).map_err(|e| e.to_string())?;
    let json = serde_json::to_string_pretty(meta).map_err(|e| e.to_string())?;
    std::fs::write(stem.with_extension("json"), json + "\n").map_err(|e| e.to_string())
}
