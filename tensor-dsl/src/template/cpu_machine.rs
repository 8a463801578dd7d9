//! What the CPU schedule's analytic default ([`super::cpu::CpuConfig::heuristic_for`])
//! knows about the machine: the SIMD width, the vector register count, and the L1 data, L2
//! and L3 cache sizes, read from `/sys/devices/system/cpu/cpu0/cache/index*/` where Linux has
//! it, with common sizes as fallbacks.
//!
//! ```
//! use tensor_dsl::template::cpu_machine::CpuMachine;
//! let m = CpuMachine::with_lanes(16);
//! assert_eq!(m.vector_registers, 32); // AVX-512: 32 zmm
//! assert!(m.l1d_bytes >= 4096 && m.l2_bytes >= m.l1d_bytes);
//! assert_eq!(CpuMachine::with_lanes(8).vector_registers, 16); // AVX2: 16 ymm
//! ```

use std::path::Path;
use std::sync::OnceLock;

/// L1 data cache size assumed where the system does not say.
pub const FALLBACK_L1D_BYTES: usize = 32 << 10;
/// L2 cache size assumed where the system does not say.
pub const FALLBACK_L2_BYTES: usize = 1 << 20;
/// L3 cache size assumed where the system does not say.
pub const FALLBACK_L3_BYTES: usize = 8 << 20;

/// The machine facts the CPU schedule's default is computed from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CpuMachine {
    /// SIMD width in `f32` lanes (16 with AVX-512, 8 with AVX2, 4 otherwise).
    pub lanes: usize,
    /// Architectural vector registers (32 with AVX-512, else 16).
    pub vector_registers: usize,
    /// L1 data cache per core, bytes.
    pub l1d_bytes: usize,
    /// L2 cache per core, bytes.
    pub l2_bytes: usize,
    /// L3 cache (as the first core sees it: shared by several cores), bytes.
    pub l3_bytes: usize,
    /// A `bf16` pair dot product into `f32` lanes (AVX-512 BF16's `vdpbf16ps`: two
    /// multiply-adds per lane and instruction, on half the bytes): the default of a `bf16`
    /// matmul then packs its panel in pairs ([`super::cpu::CpuConfig::pairs`]).
    pub bf16_dot: bool,
}

/// Whether this CPU has AVX-512 BF16 (`vdpbf16ps`).
pub fn has_bf16_dot() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx512bf16")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

impl CpuMachine {
    /// This machine's caches with `lanes` SIMD lanes (the register count follows from
    /// them: AVX-512, the only ISA here with 16 lanes, has 32 vector registers); the `bf16`
    /// dot product where the CPU has it and `lanes` is AVX-512's.
    pub fn with_lanes(lanes: usize) -> CpuMachine {
        static CACHES: OnceLock<(usize, usize, usize)> = OnceLock::new();
        let &(l1d_bytes, l2_bytes, l3_bytes) = CACHES.get_or_init(|| {
            let m = CpuMachine::from_sysfs(Path::new("/sys/devices/system/cpu/cpu0/cache"), 4);
            (m.l1d_bytes, m.l2_bytes, m.l3_bytes)
        });
        CpuMachine {
            lanes: lanes.max(1),
            vector_registers: if lanes >= 16 { 32 } else { 16 },
            l1d_bytes,
            l2_bytes,
            l3_bytes,
            bf16_dot: lanes >= 16 && has_bf16_dot(),
        }
    }

    /// The machine with `lanes` lanes whose caches are described in `dir` (laid out like
    /// Linux's `/sys/devices/system/cpu/cpu0/cache`: `index*/{level,type,size}`, sizes as
    /// `32K`); a cache it does not describe gets the fallback size. No `bf16` dot product.
    pub fn from_sysfs(dir: &Path, lanes: usize) -> CpuMachine {
        let (mut l1d, mut l2, mut l3) = (None, None, None);
        if let Ok(entries) = std::fs::read_dir(dir) {
            for e in entries.flatten() {
                let read = |f: &str| std::fs::read_to_string(e.path().join(f)).unwrap_or_default();
                let (level, kind, size) = (read("level"), read("type"), read("size"));
                let Some(bytes) = parse_size(&size) else {
                    continue;
                };
                match (level.trim(), kind.trim()) {
                    ("1", "Data" | "Unified") => l1d = Some(bytes),
                    ("2", "Data" | "Unified") => l2 = Some(bytes),
                    ("3", "Data" | "Unified") => l3 = Some(bytes),
                    _ => {}
                }
            }
        }
        CpuMachine {
            lanes: lanes.max(1),
            vector_registers: if lanes >= 16 { 32 } else { 16 },
            l1d_bytes: l1d.unwrap_or(FALLBACK_L1D_BYTES),
            l2_bytes: l2.unwrap_or(FALLBACK_L2_BYTES),
            l3_bytes: l3.unwrap_or(FALLBACK_L3_BYTES),
            bf16_dot: false,
        }
    }
}

/// Bytes of a sysfs cache size such as `32K`, `1024K`, `2M` or `512`.
pub fn parse_size(text: &str) -> Option<usize> {
    let t = text.trim();
    let (digits, mult) = match t.chars().last()? {
        'K' | 'k' => (&t[..t.len() - 1], 1 << 10),
        'M' | 'm' => (&t[..t.len() - 1], 1 << 20),
        'G' | 'g' => (&t[..t.len() - 1], 1 << 30),
        _ => (t, 1),
    };
    let n: usize = digits.trim().parse().ok()?;
    (n > 0).then(|| n.saturating_mul(mult))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_as_sysfs_writes_them() {
        assert_eq!(parse_size("32K\n"), Some(32 << 10));
        assert_eq!(parse_size("1024K"), Some(1 << 20));
        assert_eq!(parse_size("2M"), Some(2 << 20));
        assert_eq!(parse_size("512"), Some(512));
        assert_eq!(parse_size(""), None);
        assert_eq!(parse_size("0K"), None);
        assert_eq!(parse_size("lots"), None);
    }

    #[test]
    fn caches_are_read_from_a_sysfs_tree_with_fallbacks() {
        let dir = std::env::temp_dir().join(format!("td-cpu-machine-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        for (n, level, kind, size) in [
            (0, "1", "Data", "48K"),
            (1, "1", "Instruction", "32K"),
            (2, "2", "Unified", "2048K"),
            (3, "3", "Unified", "32768K"),
        ] {
            let d = dir.join(format!("index{n}"));
            std::fs::create_dir_all(&d).unwrap();
            std::fs::write(d.join("level"), format!("{level}\n")).unwrap();
            std::fs::write(d.join("type"), format!("{kind}\n")).unwrap();
            std::fs::write(d.join("size"), format!("{size}\n")).unwrap();
        }
        let m = CpuMachine::from_sysfs(&dir, 16);
        assert_eq!(
            (m.l1d_bytes, m.l2_bytes, m.l3_bytes),
            (48 << 10, 2 << 20, 32 << 20)
        );
        assert_eq!(m.vector_registers, 32);
        std::fs::remove_dir_all(&dir).unwrap();
        let none = CpuMachine::from_sysfs(&dir, 8);
        assert_eq!(
            (
                none.l1d_bytes,
                none.l2_bytes,
                none.l3_bytes,
                none.vector_registers
            ),
            (FALLBACK_L1D_BYTES, FALLBACK_L2_BYTES, FALLBACK_L3_BYTES, 16)
        );
    }
}
