//! `emit` and `verify` for kernels of several stages, which run on the row template
//! (`tensor_dsl::template::rows`) rather than the einsum templates.

use crate::args::{Problem, Selection, Target};
use crate::verify::compare;
use std::path::Path;
use tensor_dsl::codegen::rows as gen;
use tensor_dsl::runtime::cpu::CpuError;
use tensor_dsl::template::rows::{RowPlan, RowsCpuConfig, RowsGpuConfig};
use tensor_dsl::{Buffer, Data};

/// The heuristic configuration first, then (for `random:N`) up to N more of the space.
fn selected<T: PartialEq + Copy>(default: T, all: Vec<T>, selection: Selection) -> Vec<T> {
    let mut out = vec![default];
    if let Selection::Random(n) = selection {
        out.extend(
            all.into_iter()
                .filter(|c| *c != default)
                .take(n.saturating_sub(1)),
        );
    }
    out
}

/// Writes the row template's C or CUDA for the selected configurations.
pub fn emit(
    p: &Problem,
    target: &Target,
    selection: Selection,
    out: &Path,
) -> Result<usize, String> {
    let plan = RowPlan::new(&p.kernel, &p.extents)?;
    let shapes = p.shape_refs();
    let meta = |config: serde_json::Value, target: String| {
        serde_json::json!({
            "kernel": p.kernel.to_string(),
            "fingerprint": p.kernel.fingerprint(),
            "dtypes": p.kernel.dtypes_text(),
            "shapes": p.shapes,
            "target": target,
            "template": "rows",
            "config": config,
        })
    };
    let mut n = 0;
    match target {
        Target::Cpu => {
            for c in selected(
                RowsCpuConfig::heuristic(&plan),
                RowsCpuConfig::all(),
                selection,
            ) {
                let src = gen::generate_c(&p.kernel, &p.extents, &shapes, &c)?;
                let m = meta(
                    serde_json::to_value(c).map_err(|e| e.to_string())?,
                    "cpu".into(),
                );
                crate::emit::write_pair(out, n, "c", &src, &m)?;
                n += 1;
            }
        }
        Target::Cuda { sm, arch_specific } => {
            for c in selected(
                RowsGpuConfig::heuristic(&plan),
                RowsGpuConfig::all(),
                selection,
            ) {
                let src = gen::generate_cuda(&p.kernel, &p.extents, &shapes, &c)?;
                let mut m = meta(
                    serde_json::to_value(c).map_err(|e| e.to_string())?,
                    format!("cuda:{}", Target::gpu(*sm, *arch_specific).real_arch()),
                );
                m["entry"] = src.entry.clone().into();
                m["grid"] = serde_json::json!(src.grid);
                m["block"] = serde_json::json!(src.block);
                crate::emit::write_pair(out, n, "cu", &src.source, &m)?;
                n += 1;
            }
        }
    }
    Ok(n)
}

/// Runs the selected CPU configurations and compares each with the reference: (configs
/// run, failures as JSON).
pub fn verify_cpu(
    p: &Problem,
    selection: Selection,
    data: &[Data<'_>],
    want: &[f32],
) -> Result<(usize, Vec<serde_json::Value>), String> {
    let plan = RowPlan::new(&p.kernel, &p.extents)?;
    let out_dtype = p.kernel.params[p.kernel.output].dtype;
    let configs = selected(
        RowsCpuConfig::heuristic(&plan),
        RowsCpuConfig::all(),
        selection,
    );
    let mut failed = Vec::new();
    for c in &configs {
        let mut got = Buffer::from_f32(out_dtype, &vec![f32::NAN; want.len()]);
        let error = match tensor_dsl::runtime::rows::run_cpu_with(
            &p.kernel,
            &p.extents,
            &p.shape_refs(),
            data,
            got.view_mut(),
            c,
        ) {
            Ok(()) => compare(&got.to_f32(), want, out_dtype),
            Err(CpuError::Other(e)) => Some(e.to_string()),
            Err(CpuError::NoCompiler(e)) => Some(e),
        };
        if let Some(error) = error {
            failed.push(serde_json::json!({ "config": c, "error": error }));
        }
    }
    Ok((configs.len(), failed))
}
