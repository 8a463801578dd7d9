//! `tensor-dsl inspect`: a static profile of one GPU configuration's machine code, without a
//! GPU — NVRTC, `ptxas -v` and `nvdisasm` (see `tensor_dsl::runtime::sass`): registers,
//! spills, shared memory, estimated occupancy and the hot loop's instruction mix.

use crate::args::{parse_target, problem, Target};
use crate::KernelArgs;
use std::process::ExitCode;
use tensor_dsl::runtime::sass;
use tensor_dsl::template::cuda::CudaSpace;
use tensor_dsl::template::gpu::GpuTarget;

/// Profiles the configuration `config` (`default`, or a config's text as records and
/// `emit` write it) of the kernel on `target` (`cuda:sm_XY`), in the call's CUDA space
/// (tensor cores for half-precision GEMMs on sm_80+, else SIMT).
pub fn run(args: &KernelArgs, target: &str, config: &str, json: bool) -> Result<ExitCode, String> {
    let p = problem(&args.name, &args.kernel, &args.shapes, &args.dtypes)?;
    let target: GpuTarget = match parse_target(target)? {
        Target::Cuda { sm, arch_specific } => Target::gpu(sm, arch_specific),
        Target::Cpu => return Err("inspect profiles GPU code: use --target cuda:sm_XY".into()),
    };
    let t = CudaSpace::new(&p.kernel, &p.extents, &p.shape_refs(), &target)?;
    let point = match config.trim() {
        "default" => t.default_point()?,
        text => t.space().parse(text).map_err(|e| e.to_string())?,
    };
    let schedule = t.decode(&point)?;
    let text = t.space().format(&point).map_err(|e| e.to_string())?;
    let src =
        tensor_dsl::template::cuda::generate(&p.kernel, &p.extents, &p.shape_refs(), &schedule);
    let prof = sass::profile_cuda(&src, &target)?;
    if json {
        crate::output::line(serde_json::json!({
            "config": text,
            "template": t.name(),
            "grid": src.grid,
            "block": src.block,
            "profile": prof,
            "ffma_share": prof.ffma_share(),
        }))?;
        return Ok(ExitCode::SUCCESS);
    }
    crate::output::line(format!("config      {text} ({})", t.name()))?;
    crate::output::line(format!(
        "launch      grid {:?} block {:?}",
        src.grid, src.block
    ))?;
    crate::output::line(format!("registers   {}", prof.ptxas.registers))?;
    crate::output::line(format!(
        "spills      {} bytes stored, {} bytes loaded (stack frame {} bytes)",
        prof.ptxas.spill_stores, prof.ptxas.spill_loads, prof.ptxas.stack_bytes
    ))?;
    crate::output::line(format!(
        "shared      {} bytes static, {} bytes dynamic",
        prof.ptxas.shared_bytes, prof.dynamic_shared_bytes
    ))?;
    crate::output::line(format!(
        "occupancy   {:.2} ({} threads per block, {})",
        prof.occupancy,
        prof.threads,
        target.real_arch()
    ))?;
    match &prof.hot_loop {
        None => {
            let m = &prof.kernel_mix;
            crate::output::line(format!(
                "hot loop    none (no loop does arithmetic: the reduction is unrolled whole); whole kernel: {} instructions: FFMA {} MMA {} LDS {} LDG {} STS {} BAR {} other {}",
                m.total(), m.ffma, m.mma, m.lds, m.ldg, m.sts, m.bar, m.other
            ))?;
            crate::output::line(format!("FFMA share  {:.3} (whole kernel)", m.ffma_share()))?;
        }
        Some(h) => {
            let m = &h.mix;
            crate::output::line(format!(
                "hot loop    /*{:04x}*/../*{:04x}*/: {} instructions: FFMA {} MMA {} LDS {} LDG {} STS {} BAR {} other {}",
                h.start, h.end, m.total(), m.ffma, m.mma, m.lds, m.ldg, m.sts, m.bar, m.other
            ))?;
            crate::output::line(format!("FFMA share  {:.3}", m.ffma_share()))?;
        }
    }
    Ok(ExitCode::SUCCESS)
}
