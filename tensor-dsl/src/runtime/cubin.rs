//! What a GPU runs: the machine code NVRTC assembled for the device's own architecture (a
//! CUBIN), or PTX for the driver to compile when that is impossible; and what a CUBIN says
//! about its kernel (registers, static shared memory, stack), read from the ELF file itself.
//!
//! **Why CUBIN.** PTX handed to the driver is compiled by the driver's own ptxas, which may
//! differ from the one CI checks (registers, spills, the hot loop's instruction mix). A
//! CUBIN built by NVRTC with `-arch=sm_XY` is exactly what `tests/sass_profile.rs` profiled,
//! and it also loads on a driver older than NVRTC (within a major version), where that
//! NVRTC's PTX would not. PTX is the fallback only where NVRTC cannot produce SASS for the
//! device (a GPU newer than NVRTC) or the driver refuses the CUBIN; the reason is logged
//! and kept in the [`Image`].
//!
//! **Registers without ptxas.** NVRTC's log carries ptxas's report when asked for it
//! (`--ptxas-options=-v`), but a CUBIN read back from the disk cache has no log: its
//! `.nv.info` section lists each function's register count (`EIATTR_REGCOUNT`) and frame
//! size, and `.nv.shared.<entry>` is its static shared memory, so [`resources`] reads them
//! in microseconds, without a GPU or a CUDA tool.
//!
//! **Register counts for the cost model.** Tuning compiles every measured candidate to a
//! CUBIN anyway; [`remember`] keeps the register count it found per (kernel, shape,
//! schedule, architecture), and the analytic GPU features ([`crate::features`]) use it
//! through [`recall`] instead of their estimate.
//!
//! ```
//! use tensor_dsl::runtime::cubin;
//! // Not an ELF file: an error, never a panic.
//! assert!(cubin::resources(b"not a cubin", None).is_err());
//! ```

use super::ptxas::PtxasReport;
use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

/// Compiled code for one kernel, ready for the driver.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Image {
    /// SASS for a real architecture (`arch` = `sm_90`), from NVRTC.
    Cubin { arch: String, bytes: Vec<u8> },
    /// PTX for a virtual architecture (`arch` = `compute_90`), compiled by the driver at load
    /// time; `reason` says why there is no CUBIN.
    Ptx {
        arch: String,
        text: String,
        reason: String,
    },
}

impl Image {
    /// `cubin sm_90` or `ptx compute_90`, for descriptions and logs.
    pub fn kind(&self) -> String {
        match self {
            Image::Cubin { arch, .. } => format!("cubin {arch}"),
            Image::Ptx { arch, .. } => format!("ptx {arch}"),
        }
    }

    /// The bytes handed to the driver (`cuModuleLoadData`): the ELF file, or the PTX text.
    pub fn bytes(&self) -> &[u8] {
        match self {
            Image::Cubin { bytes, .. } => bytes,
            Image::Ptx { text, .. } => text.as_bytes(),
        }
    }

    /// The PTX, when that is what the driver gets.
    pub fn ptx(&self) -> Option<&str> {
        match self {
            Image::Ptx { text, .. } => Some(text),
            Image::Cubin { .. } => None,
        }
    }
}

/// Shared memory the system reserves per block on sm_90 and later, bytes.
const RESERVED_SHARED: u32 = 1024;
/// `EIATTR_REGCOUNT`: registers per thread of a function (`.nv.info`).
const EIATTR_REGCOUNT: u8 = 0x2f;
/// `EIATTR_FRAME_SIZE`: a function's stack frame, bytes (`.nv.info`).
const EIATTR_FRAME_SIZE: u8 = 0x11;
/// `EIFMT_SVAL`: an attribute with a 16-bit size and that many bytes of value.
const EIFMT_SVAL: u8 = 4;
/// `EIFMT_NVAL` / `EIFMT_BVAL` / `EIFMT_HVAL`: no value, one byte, two bytes.
const EIFMT_NVAL: u8 = 1;
const EIFMT_BVAL: u8 = 2;
const EIFMT_HVAL: u8 = 3;

/// One section header of a 64-bit little-endian ELF file.
struct Section {
    name: u32,
    offset: usize,
    size: usize,
}

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

fn sections(b: &[u8]) -> Option<Vec<Section>> {
    // ELF64, little-endian (e_ident[EI_CLASS] = 2, e_ident[EI_DATA] = 1).
    if b.get(..4)? != b"\x7fELF" || *b.get(4)? != 2 || *b.get(5)? != 1 {
        return None;
    }
    let shoff = usize::try_from(u64_at(b, 0x28)?).ok()?;
    let entsize = usize::from(u16_at(b, 0x3a)?);
    let count = usize::from(u16_at(b, 0x3c)?);
    if entsize < 0x40 {
        return None;
    }
    (0..count)
        .map(|i| {
            let at = shoff.checked_add(i.checked_mul(entsize)?)?;
            Some(Section {
                name: u32_at(b, at)?,
                offset: usize::try_from(u64_at(b, at + 0x18)?).ok()?,
                size: usize::try_from(u64_at(b, at + 0x20)?).ok()?,
            })
        })
        .collect()
}

/// The NUL-terminated string at `at`.
fn c_str(b: &[u8], at: usize) -> Option<&str> {
    let rest = b.get(at..)?;
    let end = rest.iter().position(|&c| c == 0)?;
    std::str::from_utf8(&rest[..end]).ok()
}

/// What `cubin` (a CUBIN from NVRTC or ptxas) says about its kernel `entry` (or, with
/// `None`, about its one kernel): registers per thread, static shared memory and stack
/// frame, in a [`PtxasReport`] (spill counts are not in the file: 0). An error for a file
/// that is not a CUBIN or has no register count for the kernel.
pub fn resources(cubin: &[u8], entry: Option<&str>) -> Result<PtxasReport, String> {
    let bad = || "not a CUBIN (ELF64) file, or a damaged one".to_string();
    let secs = sections(cubin).ok_or_else(bad)?;
    let shstrndx = usize::from(u16_at(cubin, 0x3e).ok_or_else(bad)?);
    let names = secs.get(shstrndx).ok_or_else(bad)?;
    let name_of = |s: &Section| {
        names
            .offset
            .checked_add(s.name as usize)
            .and_then(|at| c_str(cubin, at))
            .unwrap_or("")
    };
    let body = |s: &Section| cubin.get(s.offset..s.offset.checked_add(s.size)?);
    // Symbol names by index, for the attributes that name their function by symbol.
    let strtab = secs.iter().find(|s| name_of(s) == ".strtab");
    let symtab = secs.iter().find(|s| name_of(s) == ".symtab");
    let symbol = |index: u32| -> Option<&str> {
        let (strtab, symtab) = (strtab?, symtab?);
        let at = symtab.offset.checked_add(index as usize * 24)?;
        if (index as usize + 1) * 24 > symtab.size {
            return None;
        }
        c_str(
            cubin,
            strtab.offset.checked_add(u32_at(cubin, at)? as usize)?,
        )
    };
    let mut registers: Vec<(u32, u32)> = Vec::new();
    let mut frames: Vec<(u32, u32)> = Vec::new();
    for s in secs.iter().filter(|s| name_of(s) == ".nv.info") {
        let info = body(s).ok_or_else(bad)?;
        let mut at = 0;
        while at + 2 <= info.len() {
            let (format, attribute) = (info[at], info[at + 1]);
            match format {
                EIFMT_NVAL => at += 2,
                EIFMT_BVAL | EIFMT_HVAL => at += 4,
                EIFMT_SVAL => {
                    let len = usize::from(u16_at(info, at + 2).ok_or_else(bad)?);
                    let value = info.get(at + 4..at + 4 + len).ok_or_else(bad)?;
                    if len == 8 {
                        let pair = (
                            u32_at(value, 0).ok_or_else(bad)?,
                            u32_at(value, 4).ok_or_else(bad)?,
                        );
                        match attribute {
                            EIATTR_REGCOUNT => registers.push(pair),
                            EIATTR_FRAME_SIZE => frames.push(pair),
                            _ => {}
                        }
                    }
                    at += 4 + len;
                }
                _ => return Err(bad()),
            }
        }
    }
    let pick = |list: &[(u32, u32)]| -> Option<u32> {
        match entry {
            Some(e) => list
                .iter()
                .find(|(sym, _)| symbol(*sym) == Some(e))
                .map(|p| p.1),
            None if list.len() == 1 => Some(list[0].1),
            None => None,
        }
    };
    let regs = pick(&registers).ok_or_else(|| {
        format!(
            "the CUBIN has no register count for {}",
            entry.map_or("its kernel".to_string(), |e| format!(
                "`{e}`: the source defines no `extern \"C\" __global__` function of that name"
            ))
        )
    })?;
    let entry_name = entry.map(str::to_string).or_else(|| {
        registers
            .first()
            .and_then(|(sym, _)| symbol(*sym))
            .map(str::to_string)
    });
    // From sm_90 on, ptxas puts the 1 KiB of shared memory the system reserves per block
    // (`.nv.shared.reserved.0`) inside the kernel's own section: ptxas's "bytes smem" and
    // the driver's static size are the section less that KiB.
    let reserved = if secs
        .iter()
        .any(|s| name_of(s).starts_with(".nv.shared.reserved."))
    {
        RESERVED_SHARED
    } else {
        0
    };
    let shared = entry_name
        .as_deref()
        .and_then(|e| {
            let wanted = format!(".nv.shared.{e}");
            secs.iter().find(|s| name_of(s) == wanted)
        })
        .map_or(0, |s| (s.size as u32).saturating_sub(reserved));
    Ok(PtxasReport {
        registers: regs,
        spill_stores: 0,
        spill_loads: 0,
        shared_bytes: shared,
        stack_bytes: pick(&frames).unwrap_or(0),
    })
}

/// Whether `bytes` look like a CUBIN (ELF64 little-endian with section headers).
pub fn is_cubin(bytes: &[u8]) -> bool {
    sections(bytes).is_some()
}

// ---------------------------------------------------------------------------------------------
// Register counts of compiled candidates, for the cost model's features
// ---------------------------------------------------------------------------------------------

/// Reports of compiled schedules, by [`schedule_key`]; emptied when it reaches
/// [`MEMO_ENTRIES`] (a long tuning session must not grow it without bound).
static MEMO: OnceLock<Mutex<HashMap<String, PtxasReport>>> = OnceLock::new();
/// The most reports [`remember`] keeps.
pub const MEMO_ENTRIES: usize = 4096;

/// The key of a compiled schedule: the kernel's fingerprint ([`Kernel::fingerprint`](crate::ir::Kernel::fingerprint)),
/// its extents, the schedule (its `Debug` text) and the real architecture (`sm_90`).
pub fn schedule_key(fingerprint: &str, extents: &[usize], schedule: &str, arch: &str) -> String {
    format!("{fingerprint}|{extents:?}|{schedule}|{arch}")
}

/// Remembers what compiling the schedule of `key` ([`schedule_key`]) reported.
pub fn remember(key: String, report: PtxasReport) {
    let memo = MEMO.get_or_init(Default::default);
    let mut map = memo.lock().unwrap_or_else(|p| p.into_inner());
    if map.len() >= MEMO_ENTRIES {
        map.clear();
    }
    map.insert(key, report);
}

/// What compiling the schedule of `key` reported, if it was compiled in this process.
pub fn recall(key: &str) -> Option<PtxasReport> {
    let memo = MEMO.get_or_init(Default::default);
    let map = memo.lock().unwrap_or_else(|p| p.into_inner());
    map.get(key).cloned()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A minimal ELF64 with `.shstrtab`, `.strtab`, `.symtab` (symbol 1 = `k`), `.nv.info`
    /// (REGCOUNT and FRAME_SIZE of symbol 1) and `.nv.shared.k` (NOBITS, 4096 bytes).
    fn fake_cubin(registers: u32) -> Vec<u8> {
        let shstr = b"\0.shstrtab\0.strtab\0.symtab\0.nv.info\0.nv.shared.k\0".to_vec();
        let strtab = b"\0k\0".to_vec();
        let mut symtab = vec![0u8; 48];
        symtab[24..28].copy_from_slice(&1u32.to_le_bytes());
        let mut info = Vec::new();
        for (attr, value) in [(EIATTR_REGCOUNT, registers), (EIATTR_FRAME_SIZE, 16)] {
            info.extend([EIFMT_SVAL, attr, 8, 0]);
            info.extend(1u32.to_le_bytes());
            info.extend(value.to_le_bytes());
        }
        info.extend([EIFMT_HVAL, 0x1b, 0xff, 0]);
        let mut file = vec![0u8; 0x40];
        let place = |data: &[u8], file: &mut Vec<u8>| {
            let at = file.len();
            file.extend_from_slice(data);
            (at, data.len())
        };
        let parts = [
            place(&shstr, &mut file),
            place(&strtab, &mut file),
            place(&symtab, &mut file),
            place(&info, &mut file),
        ];
        let shoff = file.len();
        // (name offset in shstr, (offset, size))
        let headers = [
            (0u32, (0usize, 0usize)),
            (1, parts[0]),
            (11, parts[1]),
            (19, parts[2]),
            (27, parts[3]),
            (36, (0, 4096)),
        ];
        for (name, (offset, size)) in headers {
            let mut h = vec![0u8; 0x40];
            h[0..4].copy_from_slice(&name.to_le_bytes());
            h[0x18..0x20].copy_from_slice(&(offset as u64).to_le_bytes());
            h[0x20..0x28].copy_from_slice(&(size as u64).to_le_bytes());
            file.extend(h);
        }
        file[0..6].copy_from_slice(b"\x7fELF\x02\x01");
        file[0x28..0x30].copy_from_slice(&(shoff as u64).to_le_bytes());
        file[0x3a..0x3c].copy_from_slice(&0x40u16.to_le_bytes());
        file[0x3c..0x3e].copy_from_slice(&6u16.to_le_bytes());
        file[0x3e..0x40].copy_from_slice(&1u16.to_le_bytes());
        file
    }

    #[test]
    fn reads_registers_frame_and_shared_memory() {
        let f = fake_cubin(40);
        let r = resources(&f, Some("k")).unwrap();
        assert_eq!((r.registers, r.stack_bytes, r.shared_bytes), (40, 16, 4096));
        assert_eq!(resources(&f, None).unwrap(), r);
        assert!(resources(&f, Some("other")).is_err());
        assert!(is_cubin(&f));
    }

    #[test]
    fn damaged_files_are_errors_not_panics() {
        let f = fake_cubin(40);
        for cut in [0, 3, 0x30, f.len() / 2, f.len() - 0x30] {
            assert!(resources(&f[..cut], Some("k")).is_err(), "cut at {cut}");
        }
        let mut flipped = f.clone();
        flipped[0x28] ^= 0xff;
        assert!(resources(&flipped, Some("k")).is_err());
        assert!(!is_cubin(b"\x7fELF"));
    }

    #[test]
    fn the_memo_gives_back_what_was_remembered() {
        let k = crate::ir::parse_text("mm", "c[[i,j]] += a[[i,k]] * b[[k,j]]", None).unwrap();
        let fp = k.fingerprint();
        let key = schedule_key(&fp, &[3, 4, 5], "S { x: 1 }", "sm_90");
        assert!(recall(&key).is_none());
        let report = PtxasReport {
            registers: 72,
            ..PtxasReport::default()
        };
        remember(key.clone(), report.clone());
        assert_eq!(recall(&key), Some(report));
        assert!(recall(&schedule_key(&fp, &[3, 4, 5], "S { x: 1 }", "sm_80")).is_none());
    }
}
