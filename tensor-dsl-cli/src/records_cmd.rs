//! `tensor-dsl records show|best|merge|export`: inspect records and prepare them for
//! shipping (`include_tuned!("tuned/cpu.jsonl")`).

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use tensor_dsl::records::{self, Index, Record};

fn load(files: &[PathBuf]) -> Result<Vec<Record>, String> {
    let files: Vec<PathBuf> = if files.is_empty() {
        vec![records::default_records_file()]
    } else {
        files.to_vec()
    };
    let mut all = Vec::new();
    for f in &files {
        let (rs, _) = records::read(f).map_err(|e| format!("{}: {e}", f.display()))?;
        all.extend(rs);
    }
    Ok(all)
}

fn line(r: &Record) -> String {
    let shapes: Vec<String> = r
        .shapes
        .iter()
        .map(|s| s.iter().map(usize::to_string).collect::<Vec<_>>().join("x"))
        .collect();
    format!(
        "{} [{}] {} {} | {} | {}",
        r.kernel,
        shapes.join(", "),
        r.target.device,
        r.target.name,
        match (r.gflops, &r.error) {
            (Some(g), None) => format!("{g:.2} GFLOPS"),
            (_, Some(e)) => format!("invalid: {}", e.lines().next().unwrap_or("")),
            (None, None) => "no time".into(),
        },
        r.config
    )
}

fn matches_target(r: &Record, target: Option<&str>) -> bool {
    match target {
        None => true,
        Some(t) => {
            let t = t.to_ascii_lowercase();
            r.target.device.to_ascii_lowercase() == t
                || r.target.name.to_ascii_lowercase().contains(&t)
                || r.target.detail.to_ascii_lowercase().contains(&t)
        }
    }
}

pub fn show(files: &[PathBuf], kernel: Option<&str>, json: bool) -> Result<ExitCode, String> {
    for r in load(files)?
        .iter()
        .filter(|r| kernel.is_none_or(|k| r.kernel == k))
    {
        if json {
            crate::output::line(serde_json::to_string(r).map_err(|e| e.to_string())?)?;
        } else {
            crate::output::line(line(r))?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

pub fn best(files: &[PathBuf], json: bool) -> Result<ExitCode, String> {
    let mut index = Index::new();
    index.extend(&load(files)?);
    let mut best: Vec<&Record> = index.iter().collect();
    best.sort_by(|a, b| (&a.kernel, &a.shapes).cmp(&(&b.kernel, &b.shapes)));
    for r in best {
        if json {
            crate::output::line(serde_json::to_string(r).map_err(|e| e.to_string())?)?;
        } else {
            crate::output::line(line(r))?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Every valid record of the inputs into `out` (duplicates dropped).
pub fn merge(inputs: &[PathBuf], out: &Path) -> Result<ExitCode, String> {
    let mut seen = std::collections::HashSet::new();
    let mut recs = Vec::new();
    for r in load(inputs)? {
        let key = serde_json::to_string(&r).map_err(|e| e.to_string())?;
        if seen.insert(key) {
            recs.push(r);
        }
    }
    records::write(out, &recs).map_err(|e| e.to_string())?;
    crate::output::line(
        serde_json::json!({ "records": recs.len(), "out": out.display().to_string() }),
    )?;
    Ok(ExitCode::SUCCESS)
}

/// The best record per key for one target, ready to ship and embed.
pub fn export(inputs: &[PathBuf], target: Option<&str>, out: &Path) -> Result<ExitCode, String> {
    let recs: Vec<Record> = load(inputs)?
        .into_iter()
        .filter(|r| matches_target(r, target))
        .collect();
    let mut index = Index::new();
    index.extend(&recs);
    let mut best: Vec<Record> = index.iter().cloned().collect();
    best.sort_by(|a, b| (&a.kernel, &a.shapes).cmp(&(&b.kernel, &b.shapes)));
    records::write(out, &best).map_err(|e| e.to_string())?;
    crate::output::line(
        serde_json::json!({ "records": best.len(), "out": out.display().to_string() }),
    )?;
    Ok(ExitCode::SUCCESS)
}
