//! A static profile of a GPU kernel's machine code (SASS), without a GPU: PTX is assembled
//! by `ptxas -v` into a cubin (registers, spills, shared memory), the cubin is
//! disassembled by `nvdisasm`, and the hot loop — the innermost loop (a backward branch
//! and the code it jumps back over) holding the most FFMAs — is counted by instruction
//! class. A fast SIMT SGEMM spends 0.85–0.92 of its hot loop's instructions on FFMA.
//!
//! `nvdisasm` is `$TENSOR_DSL_NVDISASM`, else on `PATH`, else `$CUDA_HOME/bin/nvdisasm`
//! (PyPI `nvidia-cuda-nvdisasm`; 13.2 reads sm_90 cubins).
//!
//! ```
//! use tensor_dsl::runtime::sass;
//! let sass = "\
//!         /*0000*/                   MOV R1, c[0x0][0x28] ;
//! .L_x_0:
//!         /*0010*/                   LDS.128 R4, [R2] ;
//!         /*0020*/                   FFMA R8, R4, R5, R8 ;
//!         /*0030*/                   FFMA R9, R6, R7, R9 ;
//!         /*0040*/              @!P0 BRA `(.L_x_0) ;
//!         /*0050*/                   EXIT ;
//! ";
//! let hot = sass::hot_loop(sass).unwrap();
//! assert_eq!((hot.mix.ffma, hot.mix.lds, hot.mix.other, hot.mix.total()), (2, 1, 1, 4));
//! assert_eq!(hot.mix.ffma_share(), 0.5);
//! ```

use super::ptxas::PtxasReport;
use crate::template::gpu::GpuTarget;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::process::Command;

/// Instructions of a stretch of SASS by class.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct InstructionMix {
    /// `FFMA` (fused multiply-add, f32).
    pub ffma: usize,
    /// Tensor-core MMAs (`HMMA`, `HGMMA`).
    #[serde(default)]
    pub mma: usize,
    /// Shared-memory loads (`LDS`, `LDSM`).
    pub lds: usize,
    /// Global loads (`LDG`, `LDGSTS`, `UTMALDG`: TMA).
    pub ldg: usize,
    /// Shared-memory stores (`STS`).
    pub sts: usize,
    /// Barriers (`BAR`).
    pub bar: usize,
    /// Everything else (integer and address arithmetic, branches, conversions, ...).
    pub other: usize,
}

impl InstructionMix {
    /// All instructions counted.
    pub fn total(&self) -> usize {
        self.ffma + self.mma + self.lds + self.ldg + self.sts + self.bar + self.other
    }

    /// FFMA / all instructions (0 when empty).
    pub fn ffma_share(&self) -> f64 {
        if self.total() == 0 {
            0.0
        } else {
            self.ffma as f64 / self.total() as f64
        }
    }

    fn add(&mut self, opcode: &str) {
        let base = opcode.split('.').next().unwrap_or(opcode);
        match base {
            "FFMA" => self.ffma += 1,
            "HMMA" | "HGMMA" => self.mma += 1,
            "LDS" | "LDSM" => self.lds += 1,
            "LDG" | "LDGSTS" | "UTMALDG" => self.ldg += 1,
            "STS" => self.sts += 1,
            "BAR" => self.bar += 1,
            _ => self.other += 1,
        }
    }
}

/// The hot loop of a kernel's SASS.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HotLoop {
    /// Offset of the loop's first instruction (the branch target).
    pub start: usize,
    /// Offset of the backward branch closing it.
    pub end: usize,
    /// Its instructions by class (the closing branch included).
    pub mix: InstructionMix,
}

/// Everything [`profile_ptx`] finds out about one kernel.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SassProfile {
    /// What `ptxas -v` reported (registers, spills, shared memory).
    pub ptxas: PtxasReport,
    /// Threads per block the occupancy estimate assumes.
    pub threads: usize,
    /// Dynamic shared memory per block the occupancy estimate adds to ptxas's static
    /// shared memory, bytes.
    #[serde(default)]
    pub dynamic_shared_bytes: u32,
    /// Resident warps per SM / the most an SM holds (see [`occupancy`]).
    pub occupancy: f64,
    /// Instructions of the whole kernel by class.
    pub kernel_mix: InstructionMix,
    /// The hot loop, if the kernel has a loop.
    pub hot_loop: Option<HotLoop>,
}

impl SassProfile {
    /// The hot loop's FFMA share.
    ///
    /// A kernel without a loop (a reduction short enough to be unrolled whole) is its own
    /// hot loop: the share is the whole kernel's.
    pub fn ffma_share(&self) -> f64 {
        self.hot_loop
            .as_ref()
            .map_or(self.kernel_mix.ffma_share(), |h| h.mix.ffma_share())
    }

    /// Spilled bytes (stores + loads).
    pub fn spills(&self) -> u32 {
        self.ptxas.spill_stores + self.ptxas.spill_loads
    }
}

/// `$TENSOR_DSL_NVDISASM`, else `nvdisasm` on `PATH`, else `$CUDA_HOME/bin/nvdisasm`.
pub fn find_nvdisasm() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("TENSOR_DSL_NVDISASM") {
        return Some(PathBuf::from(p));
    }
    let on_path = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join("nvdisasm"))
            .find(|p| p.is_file())
    });
    on_path.or_else(|| {
        ["CUDA_HOME", "CUDA_PATH"]
            .iter()
            .filter_map(std::env::var_os)
            .map(|h| PathBuf::from(h).join("bin/nvdisasm"))
            .find(|p| p.is_file())
    })
}

/// The SASS text of a cubin (`nvdisasm -c`).
pub fn disassemble(cubin: &[u8]) -> Result<String, String> {
    let nvdisasm = find_nvdisasm().ok_or(
        "nvdisasm not found: set TENSOR_DSL_NVDISASM or put it on PATH (PyPI nvidia-cuda-nvdisasm)",
    )?;
    let input = super::ptxas::scratch("cubin")?;
    std::fs::write(&input, cubin).map_err(|e| e.to_string())?;
    let result = Command::new(&nvdisasm).arg("-c").arg(&input).output();
    let _ = std::fs::remove_file(&input);
    let out = result.map_err(|e| format!("cannot run {}: {e}", nvdisasm.display()))?;
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// One SASS instruction: its offset, opcode (with modifiers) and the label it branches to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Instruction {
    pub offset: usize,
    pub opcode: String,
    pub target: Option<String>,
    /// Whether a predicate guards it (`@P0 ...`).
    pub predicated: bool,
}

/// The instructions of `nvdisasm -c` text and the offset of every label.
pub fn parse(sass: &str) -> (Vec<Instruction>, Vec<(String, usize)>) {
    let mut instructions: Vec<Instruction> = Vec::new();
    let mut labels: Vec<(String, usize)> = Vec::new();
    let mut pending: Vec<String> = Vec::new();
    for line in sass.lines() {
        let t = line.trim();
        if let Some(rest) = t.strip_prefix("/*") {
            let Some((hex, text)) = rest.split_once("*/") else {
                continue;
            };
            let Ok(offset) = usize::from_str_radix(hex.trim(), 16) else {
                continue;
            };
            for l in pending.drain(..) {
                labels.push((l, offset));
            }
            let text = text.trim().trim_end_matches(';').trim();
            let mut words = text.split_whitespace();
            let mut opcode = words.next().unwrap_or("");
            let predicated = opcode.starts_with('@');
            if predicated {
                opcode = words.next().unwrap_or("");
            }
            let target = text
                .split_once("`(")
                .and_then(|(_, r)| r.split_once(')').map(|(l, _)| l.trim().to_string()));
            instructions.push(Instruction {
                offset,
                opcode: opcode.to_string(),
                target,
                predicated,
            });
        } else if let Some(label) = t.strip_suffix(':') {
            if label.starts_with('.') && !label.contains(' ') {
                pending.push(label.to_string());
            }
        }
    }
    (instructions, labels)
}

/// The loops of a function's SASS: (index of the first instruction, index of the backward
/// branch), in order of the branch. A backward branch over an unconditional `EXIT` is not a
/// loop: it is out-of-line code placed after the function's end jumping back into it (the
/// retry path of an mbarrier wait, say).
pub fn loops(instructions: &[Instruction], labels: &[(String, usize)]) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    for (b, ins) in instructions.iter().enumerate() {
        let base = ins.opcode.split('.').next().unwrap_or("");
        if !matches!(base, "BRA" | "JMP" | "BRX") {
            continue;
        }
        let Some(target) = &ins.target else { continue };
        let Some(&(_, off)) = labels.iter().find(|(l, _)| l == target) else {
            continue;
        };
        if off > ins.offset {
            continue;
        }
        // A branch to itself is the trap ptxas puts after the last `EXIT`, not a loop.
        if let Some(start) = instructions.iter().position(|i| i.offset == off) {
            let exits = instructions[start..b]
                .iter()
                .any(|i| !i.predicated && i.opcode.split('.').next() == Some("EXIT"));
            if start < b && !exits {
                out.push((start, b));
            }
        }
    }
    out
}

fn mix_of(instructions: &[Instruction]) -> InstructionMix {
    let mut m = InstructionMix::default();
    for i in instructions {
        m.add(&i.opcode);
    }
    m
}

/// The hot loop of `nvdisasm -c` text: among the loops that do arithmetic (FFMA or
/// tensor-core MMA) and hold no other such loop, the one with the most of it (then the
/// longest). A loop that only copies (an implicit-GEMM gather inside the reduction loop)
/// does not hide the loop around it. `None` when no loop does arithmetic: the reduction
/// was unrolled whole, and the whole kernel is the hot path.
pub fn hot_loop(sass: &str) -> Option<HotLoop> {
    let (ins, labels) = parse(sass);
    let math = |&(s, e): &(usize, usize)| {
        let m = mix_of(&ins[s..=e]);
        (m.ffma + m.mma > 0).then_some((s, e, m))
    };
    let loops: Vec<(usize, usize, InstructionMix)> =
        loops(&ins, &labels).iter().filter_map(math).collect();
    loops
        .iter()
        .filter(|&&(s, e, _)| {
            !loops
                .iter()
                .any(|&(s2, e2, _)| (s2, e2) != (s, e) && s <= s2 && e2 <= e)
        })
        .map(|&(s, e, mix)| HotLoop {
            start: ins[s].offset,
            end: ins[e].offset,
            mix,
        })
        .max_by_key(|h| (h.mix.ffma + h.mix.mma, h.mix.total()))
}

/// Estimated occupancy: resident warps per SM over the most an SM holds, from the threads
/// per block, registers per thread (allocated per warp in units of 256) and static shared
/// memory per block, with at most 32 blocks per SM.
pub fn occupancy(registers: u32, shared_bytes: u32, threads: usize, target: &GpuTarget) -> f64 {
    let warp = target.warp_size.max(1) as usize;
    let warps = threads.div_ceil(warp).max(1);
    let max_warps = (target.max_threads_per_sm as usize / warp).max(1);
    let by_threads = max_warps / warps;
    let regs_per_warp = (registers.max(1) as usize * warp).div_ceil(256) * 256;
    let by_regs = target.regs_per_sm as usize / (regs_per_warp * warps);
    let by_shared = if shared_bytes == 0 {
        usize::MAX
    } else {
        target.shared_per_sm as usize / shared_bytes as usize
    };
    let blocks = by_threads.min(by_regs).min(by_shared).min(32);
    (blocks * warps) as f64 / max_warps as f64
}

/// Assembles `ptx` for `target`, disassembles it and profiles it (see the module docs).
/// `threads` is the block size the occupancy estimate assumes.
pub fn profile_ptx(ptx: &str, target: &GpuTarget, threads: usize) -> Result<SassProfile, String> {
    profile_ptx_with(ptx, target, threads, 0)
}

/// [`profile_ptx`] for a kernel launched with `dynamic_shared` bytes of dynamic shared
/// memory (counted in the occupancy estimate).
pub fn profile_ptx_with(
    ptx: &str,
    target: &GpuTarget,
    threads: usize,
    dynamic_shared: u32,
) -> Result<SassProfile, String> {
    let (cubin, report) = super::ptxas::assemble_cubin(ptx, &target.real_arch())?;
    let text = disassemble(&cubin)?;
    let (ins, _) = parse(&text);
    Ok(SassProfile {
        occupancy: occupancy(
            report.registers,
            report.shared_bytes + dynamic_shared,
            threads,
            target,
        ),
        ptxas: report,
        threads,
        dynamic_shared_bytes: dynamic_shared,
        kernel_mix: mix_of(&ins),
        hot_loop: hot_loop(&text),
    })
}

/// Compiles generated CUDA C with NVRTC and profiles it with [`profile_ptx`].
#[cfg(feature = "cuda")]
pub fn profile_cuda(
    source: &crate::codegen::cuda::CudaSource,
    target: &GpuTarget,
) -> Result<SassProfile, String> {
    let ptx = super::nvrtc::compile_ptx("td_profile", &source.source, &target.virtual_arch())
        .map_err(|e| e.to_string())?;
    let threads = source.block.iter().map(|&b| b as usize).product();
    profile_ptx_with(&ptx, target, threads, source.shared_bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_innermost_loop_with_the_most_ffma_is_hot() {
        let sass = "\
.L_x_0:
        /*0000*/                   IADD3 R1, R1, 0x1, RZ ;
.L_x_1:
        /*0010*/                   FFMA R2, R3, R4, R2 ;
        /*0020*/               @P0 BRA `(.L_x_1) ;
.L_x_2:
        /*0030*/                   FFMA R2, R3, R4, R2 ;
        /*0040*/                   FFMA R2, R3, R4, R2 ;
        /*0050*/                   BAR.SYNC.DEFER_BLOCKING 0x0 ;
        /*0060*/               @P1 BRA `(.L_x_2) ;
        /*0070*/               @P2 BRA `(.L_x_0) ;
        /*0080*/                   EXIT ;
.L_x_3:
        /*0090*/                   BRA `(.L_x_3);
";
        let h = hot_loop(sass).unwrap();
        assert_eq!((h.start, h.end), (0x30, 0x60));
        assert_eq!((h.mix.ffma, h.mix.bar, h.mix.other), (2, 1, 1));
    }

    #[test]
    fn the_exit_trap_and_loops_without_arithmetic_are_not_hot() {
        // A reduction unrolled whole: the only loops are a copy loop and the trap.
        let sass = "\
        /*0000*/                   FFMA R2, R3, R4, R2 ;
        /*0010*/                   HMMA.16816.F32.BF16 R4, R8, R12, R4 ;
.L_x_0:
        /*0020*/                   STG.E [R2.64], R4 ;
        /*0030*/               @P0 BRA `(.L_x_0) ;
        /*0040*/                   EXIT ;
.L_x_1:
        /*0050*/                   BRA `(.L_x_1);
";
        let (ins, labels) = parse(sass);
        assert_eq!(loops(&ins, &labels), vec![(2, 3)]);
        assert!(hot_loop(sass).is_none());
    }

    #[test]
    fn a_copy_loop_inside_the_reduction_loop_does_not_hide_it() {
        let sass = "\
.L_x_0:
        /*0000*/                   HMMA.16816.F32.BF16 R4, R8, R12, R4 ;
.L_x_1:
        /*0010*/                   LDGSTS.E [R2], [R4.64] ;
        /*0020*/               @P0 BRA `(.L_x_1) ;
        /*0030*/                   HMMA.16816.F32.BF16 R4, R8, R12, R4 ;
        /*0040*/               @P1 BRA `(.L_x_0) ;
        /*0050*/                   EXIT ;
";
        let h = hot_loop(sass).unwrap();
        assert_eq!((h.start, h.end, h.mix.mma), (0x0, 0x40, 2));
    }

    #[test]
    fn out_of_line_code_jumping_back_is_not_a_loop() {
        // An mbarrier wait's retry path after the function's end, jumping back into the
        // main loop's body: the main loop is the hot one, not the span of the jump.
        let sass = "\
.L_x_0:
        /*0000*/                   BAR.SYNC.DEFER_BLOCKING 0x0 ;
        /*0010*/                   SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [R4+URZ], R5 ;
        /*0020*/              @!P0 BRA `(.L_x_2) ;
.L_x_1:
        /*0030*/                   HGMMA.64x64x16.F32.BF16 R24, gdesc[UR16].tnspB, R24 ;
        /*0040*/               @P1 BRA `(.L_x_0) ;
        /*0050*/                   STG.E [R2.64], R24 ;
        /*0060*/                   EXIT ;
.L_x_2:
        /*0070*/                   SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [R4+URZ], R5 ;
        /*0080*/              @!P0 BRA `(.L_x_2) ;
        /*0090*/                   BRA `(.L_x_1) ;
";
        let h = hot_loop(sass).unwrap();
        assert_eq!((h.start, h.end, h.mix.mma, h.mix.bar), (0x0, 0x40, 1, 1));
    }

    #[test]
    fn occupancy_is_bounded_by_registers_threads_and_shared_memory() {
        let t = GpuTarget::h100();
        assert_eq!(occupancy(32, 0, 256, &t), 1.0);
        assert_eq!(occupancy(128, 0, 256, &t), 0.25);
        assert_eq!(occupancy(32, 100 * 1024, 256, &t), 0.25);
    }
}
