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

/// How a record names its kernel: its name when it has one, else its text.
fn kernel_label(r: &Record) -> String {
    if r.name.is_empty() {
        r.kernel_text.trim_end_matches(';').to_string()
    } else {
        r.name.clone()
    }
}

fn shapes_text(r: &Record) -> String {
    let shapes: Vec<String> = r
        .shapes
        .iter()
        .map(|s| s.iter().map(usize::to_string).collect::<Vec<_>>().join("x"))
        .collect();
    format!("[{}]", shapes.join(", "))
}

fn line(r: &Record) -> String {
    format!(
        "{} {} {} {} {} | {} | {}",
        kernel_label(r),
        shapes_text(r),
        r.dtype,
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

/// Whether `filter` (a kernel name, or a fingerprint or its prefix) selects `r`.
fn selects(r: &Record, filter: Option<&str>) -> bool {
    filter.is_none_or(|k| r.name == k || (!k.is_empty() && r.kernel.starts_with(k)))
}

/// The records of one key, for the summary.
struct Group<'a> {
    records: Vec<&'a Record>,
}

impl Group<'_> {
    /// The record dispatch would use: the [`Index`](tensor_dsl::records::Index)'s choice
    /// (a remeasured config judged by its median).
    fn best(&self) -> Option<&Record> {
        let mut index = tensor_dsl::records::Index::new();
        index.extend(self.records.iter().copied());
        let chosen = index.best(&self.records.first()?.key())?;
        self.records
            .iter()
            .copied()
            .find(|r| r.config == chosen.config && r.seconds == chosen.seconds)
    }

    fn valid(&self) -> usize {
        self.records
            .iter()
            .filter(|r| r.error.is_none() && r.seconds.is_some())
            .count()
    }
}

/// One group per record key, in the order of (kernel, shapes, dtype, target, codegen).
fn groups(recs: &[Record]) -> Vec<Group<'_>> {
    let mut map: std::collections::BTreeMap<_, Group<'_>> = std::collections::BTreeMap::new();
    for r in recs {
        let key = (
            kernel_label(r),
            r.kernel.clone(),
            r.shapes.clone(),
            r.dtype.clone(),
            r.target.device.clone(),
            r.target.name.clone(),
            r.target.detail.clone(),
            r.codegen,
        );
        map.entry(key)
            .or_insert_with(|| Group {
                records: Vec::new(),
            })
            .records
            .push(r);
    }
    map.into_values().collect()
}

fn summary_line(g: &Group<'_>) -> Option<String> {
    let first = g.records.first()?;
    let best = match g.best() {
        Some(b) => format!(
            "best {:.2} GFLOPS ({:.3} ms) | {}",
            b.gflops.unwrap_or(0.0),
            b.seconds.unwrap_or(0.0) * 1e3,
            b.config
        ),
        None => "no valid measurement".to_string(),
    };
    Some(format!(
        "{} {} {} {} {}: {} measured, {} valid, {}",
        kernel_label(first),
        shapes_text(first),
        first.dtype,
        first.target.device,
        first.target.name,
        g.records.len(),
        g.valid(),
        best
    ))
}

fn summary_json(g: &Group<'_>) -> Option<serde_json::Value> {
    let first = g.records.first()?;
    Some(serde_json::json!({
        "name": first.name,
        "kernel": first.kernel,
        "kernel_text": first.kernel_text,
        "shapes": first.shapes,
        "dtype": first.dtype,
        "target": first.target,
        "codegen": first.codegen,
        "measured": g.records.len(),
        "valid": g.valid(),
        "best": g.best(),
    }))
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

/// `records show`: one line per key (kernel, shapes, dtype, target, code generator) with
/// how many points were measured and the best, or with `all`, every measurement.
pub fn show(
    files: &[PathBuf],
    kernel: Option<&str>,
    json: bool,
    all: bool,
) -> Result<ExitCode, String> {
    let recs: Vec<Record> = load(files)?
        .into_iter()
        .filter(|r| selects(r, kernel))
        .collect();
    if all {
        for r in &recs {
            if json {
                crate::output::line(serde_json::to_string(r).map_err(|e| e.to_string())?)?;
            } else {
                crate::output::line(line(r))?;
            }
        }
        return Ok(ExitCode::SUCCESS);
    }
    for g in groups(&recs) {
        let text = if json {
            summary_json(&g).map(|v| v.to_string())
        } else {
            summary_line(&g)
        };
        if let Some(t) = text {
            crate::output::line(t)?;
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
