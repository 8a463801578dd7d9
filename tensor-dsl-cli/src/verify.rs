//! `tensor-dsl verify`: build and run configurations, compare with the reference.

use crate::args::{parse_selection, problem, Problem, Selection};
use crate::emit::pick;
use crate::KernelArgs;
use std::path::Path;
use std::process::ExitCode;
use tensor_dsl::ir::DType;
use tensor_dsl::runtime::cpu;
use tensor_dsl::template::cpu::CpuTemplate;
use tensor_dsl::template::cuda::CudaSpace;
use tensor_dsl::template::gpu::GpuTarget;
use tensor_dsl::{Buffer, Data};

/// Random inputs (by parameter id; the output's slot empty) and the reference output (as
/// `f32` values of the output's element type).
pub fn inputs_and_reference(p: &Problem, seed: u64) -> (Vec<Buffer>, Vec<f32>) {
    let data = tensor_dsl::measure::random_inputs(&p.kernel, &p.shapes, seed);
    let refs: Vec<Data<'_>> = data.iter().map(Buffer::view).collect();
    let mut want = Buffer::zeros(
        p.kernel.params[p.kernel.output].dtype,
        p.shapes[p.kernel.output].iter().product(),
    );
    tensor_dsl::reference::run(
        &p.kernel,
        &p.extents,
        &p.shape_refs(),
        &refs,
        want.view_mut(),
    );
    (data, want.to_f32())
}

/// The first element that differs by more than 1e-4 relative (two units in the last place
/// for a half-precision output, `dtype`), as a message.
pub fn compare(got: &[f32], want: &[f32], dtype: DType) -> Option<String> {
    let tol = match dtype {
        DType::F32 => 1e-4,
        other => tensor_dsl::measure::tolerance(other),
    };
    got.iter().zip(want).enumerate().find_map(|(n, (&g, &w))| {
        (!tensor_dsl::measure::matches(g, w, tol))
            .then(|| format!("element {n}: got {g}, reference {w}"))
    })
}

pub fn run(args: &KernelArgs, device: &str, configs: &str, seed: u64) -> Result<ExitCode, String> {
    let p = problem(&args.name, &args.kernel, &args.shapes, &args.dtypes)?;
    let selection = parse_selection(configs)?;
    let (data, want) = inputs_and_reference(&p, seed);
    let refs: Vec<Data<'_>> = data.iter().map(Buffer::view).collect();
    let shapes = p.shape_refs();
    let out_dtype = p.kernel.params[p.kernel.output].dtype;
    let mut failed = Vec::new();
    let total;
    match device {
        "cpu" if p.kernel.is_staged() => {
            cpu::compiler().map_err(|e| format!("the CPU device needs a C compiler: {e}"))?;
            let (n, f) = crate::rows::verify_cpu(&p, selection, &refs, &want)?;
            total = n;
            failed = f;
        }
        "cuda" if p.kernel.is_staged() => {
            return Err(
                "verifying a kernel of several stages on CUDA is not supported yet; \
                        `emit --target cuda` writes its code"
                    .into(),
            );
        }
        "cpu" => {
            cpu::compiler().map_err(|e| format!("the CPU device needs a C compiler: {e}"))?;
            let t = CpuTemplate::new(&p.kernel, &p.extents, cpu::simd_lanes())?;
            let points = pick(t.space(), &t.default_config(), selection, seed)?;
            total = points.len();
            for c in &points {
                let text = t.space().format(c).map_err(|e| e.to_string())?;
                let schedule = t.decode(c)?;
                let mut got = Buffer::from_f32(out_dtype, &vec![f32::NAN; want.len()]);
                let error = match cpu::run_with(
                    &p.kernel,
                    &p.extents,
                    &shapes,
                    &refs,
                    got.view_mut(),
                    &schedule,
                ) {
                    Ok(()) => compare(&got.to_f32(), &want, out_dtype),
                    Err(cpu::CpuError::Other(e)) => Some(e.to_string()),
                    Err(cpu::CpuError::NoCompiler(e)) => Some(e),
                };
                if let Some(error) = error {
                    failed.push(serde_json::json!({ "config": text, "error": error }));
                }
            }
        }
        "cuda" => {
            let (n, f) = verify_cuda(&p, selection, seed, &refs, &want)?;
            total = n;
            failed = f;
        }
        other => return Err(format!("--device `{other}`: expected cpu or cuda")),
    }
    let passed = total - failed.len();
    crate::output::line(
        serde_json::json!({ "configs": total, "passed": passed, "failed": failed }),
    )?;
    Ok(if failed.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// Writes CUDA sources (and config JSON with the launch geometry) for the selected GPU
/// configurations of the call's CUDA space (tensor cores for half-precision GEMMs on sm_80+,
/// else SIMT), or for the one configuration `text` names; returns how many.
pub fn emit_cuda(
    p: &Problem,
    target: &GpuTarget,
    selection: Selection,
    text: Option<&str>,
    seed: u64,
    out: &Path,
) -> Result<usize, String> {
    let shapes = p.shape_refs();
    let t = CudaSpace::new(&p.kernel, &p.extents, &shapes, target)?;
    let points = match text {
        Some(text) => vec![t
            .space()
            .parse(text)
            .map_err(|e| format!("config:{text}: {e}"))?],
        None => pick(t.space(), &t.default_point()?, selection, seed)?,
    };
    for (n, c) in points.iter().enumerate() {
        let schedule = t.decode(c)?;
        let src = tensor_dsl::template::cuda::generate(&p.kernel, &p.extents, &shapes, &schedule);
        let meta = serde_json::json!({
            "kernel": p.kernel.to_string(),
            "fingerprint": p.kernel.fingerprint(),
            "dtypes": p.kernel.dtypes_text(),
            "shapes": p.shapes,
            "target": format!("cuda:{}", target.real_arch()),
            "nvrtc_arch": target.virtual_arch(),
            "ptxas_arch": target.real_arch(),
            "template": t.name(),
            "config": t.space().format(c).map_err(|e| e.to_string())?,
            "schedule": schedule,
            "entry": src.entry,
            "grid": src.grid,
            "block": src.block,
            "shared_bytes": src.shared_bytes,
            // TMA kernels: the CUtensorMap parameters after the output (input, extents,
            // byte strides, box, swizzle), as the runtime encodes them.
            "tensor_maps": src.tensor_maps,
        });
        crate::emit::write_pair(out, n, "cu", &src.source, &meta)?;
    }
    Ok(points.len())
}

/// Runs the selected GPU configurations on the GPU and compares each with the reference.
fn verify_cuda(
    p: &Problem,
    selection: Selection,
    seed: u64,
    data: &[Data<'_>],
    want: &[f32],
) -> Result<(usize, Vec<serde_json::Value>), String> {
    let out_dtype = p.kernel.params[p.kernel.output].dtype;
    let info = tensor_dsl::runtime::cuda::available()
        .map_err(|r| format!("the CUDA device is not available: {r}"))?;
    let shapes = p.shape_refs();
    let t = CudaSpace::new(&p.kernel, &p.extents, &shapes, &info.target())?;
    let points = pick(t.space(), &t.default_point()?, selection, seed)?;
    let mut failed = Vec::new();
    for c in &points {
        let text = t.space().format(c).map_err(|e| e.to_string())?;
        let schedule = t.decode(c)?;
        let mut got = Buffer::from_f32(out_dtype, &vec![f32::NAN; want.len()]);
        let error = match tensor_dsl::runtime::cuda::run_schedule(
            &p.kernel,
            &p.extents,
            &shapes,
            data,
            got.view_mut(),
            &schedule,
        ) {
            Ok(()) => compare(&got.to_f32(), want, out_dtype),
            Err(e) => Some(e.to_string()),
        };
        if let Some(error) = error {
            failed.push(serde_json::json!({ "config": text, "error": error }));
        }
    }
    Ok((points.len(), failed))
}
