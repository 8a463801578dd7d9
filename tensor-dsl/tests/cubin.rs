//! CUBINs from NVRTC, without a GPU: what the CUDA runtime loads is SASS that NVRTC
//! assembled for the device's architecture (`-arch=sm_90`, `nvrtcGetCUBIN`), the same code
//! CI profiles.
//!
//! - A generated kernel compiles to a CUBIN that `nvdisasm` reads; the register count in the
//!   file, in NVRTC's ptxas report and from `ptxas -v` on NVRTC's PTX agree.
//! - The image for an architecture NVRTC knows is a CUBIN; for a GPU newer than NVRTC it is
//!   PTX for the newest architecture NVRTC knows, with the reason; for a GPU older than all
//!   of them, an error.
//! - The disk cache keeps a CUBIN and the PTX of the same source as two files (the key
//!   names the kind, the architecture and the NVRTC version).
//!
//! Without NVRTC, ptxas or nvdisasm each test prints why and passes, unless
//! `TENSOR_DSL_REQUIRE_NVRTC=1` (CI) or `TENSOR_DSL_REQUIRE_GPU=1`.
#![cfg(feature = "cuda")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use tensor_dsl::codegen::cuda::{generate, CudaSource};
use tensor_dsl::ir::{bind, parse_text};
use tensor_dsl::runtime::cubin::{self, Image};
use tensor_dsl::runtime::{nvrtc, object_cache, ptxas, sass};
use tensor_dsl::template::gpu::{default_schedule, GpuTarget};
use tensor_dsl::testing::{runs, Need};

fn tools(test: &str) -> bool {
    let missing = if !nvrtc::available() {
        Some("NVRTC is not on the library path")
    } else if ptxas::find().is_none() {
        Some("ptxas is not on PATH (or TENSOR_DSL_PTXAS)")
    } else if sass::find_nvdisasm().is_none() {
        Some("nvdisasm is not on PATH (or TENSOR_DSL_NVDISASM)")
    } else {
        None
    };
    runs(test, Need::Compilers, missing)
}

/// The default H100 schedule of an awkward matrix-vector product with an epilogue,
/// generated (cheap to compile: the suite's other tests compile the big GEMM tiles).
fn matmul() -> CudaSource {
    let kernel = parse_text(
        "mv",
        "o[[i]] += a[[i, k]] * b[[k]]; o[[i]] = relu(o[[i]])",
        None,
    )
    .unwrap();
    let shapes: [&[usize]; 3] = [&[1000, 777], &[777], &[1000]];
    let extents = bind(&kernel, &shapes).unwrap();
    let schedule = default_schedule(&kernel, &extents, &GpuTarget::h100());
    generate(&kernel, &extents, &shapes, &schedule)
}

#[test]
fn nvrtc_assembles_a_generated_kernel_into_a_cubin_that_nvdisasm_reads() {
    if !tools("nvrtc_assembles_a_generated_kernel_into_a_cubin_that_nvdisasm_reads") {
        return;
    }
    let g = matmul();
    let c = nvrtc::compile_cubin("mm", &g.source, "sm_90", &g.entry).unwrap();
    assert_eq!(c.arch, "sm_90");
    assert!(cubin::is_cubin(&c.bytes));
    assert!(c.report.registers > 0, "{:?}", c.report);
    // The file says what NVRTC's ptxas said, and so does ptxas on NVRTC's PTX.
    let in_file = cubin::resources(&c.bytes, Some(&g.entry)).unwrap();
    assert_eq!(in_file.registers, c.report.registers);
    assert_eq!(in_file.shared_bytes, c.report.shared_bytes);
    let ptx = nvrtc::compile_ptx("mm", &g.source, "compute_90").unwrap();
    let separate = ptxas::assemble(&ptx, "sm_90").unwrap();
    assert_eq!(separate.registers, c.report.registers);
    let text = sass::disassemble(&c.bytes).unwrap();
    let hot = sass::hot_loop(&text).expect("a hot loop");
    assert!(hot.mix.ffma > 0, "{hot:?}");
    println!(
        "CUBIN: {} bytes, {} registers, {} B shared; hot loop {} FFMA of {}",
        c.bytes.len(),
        c.report.registers,
        c.report.shared_bytes,
        hot.mix.ffma,
        hot.mix.total()
    );
}

#[test]
fn the_image_is_a_cubin_where_nvrtc_knows_the_gpu_and_ptx_beyond() {
    if !tools("the_image_is_a_cubin_where_nvrtc_knows_the_gpu_and_ptx_beyond") {
        return;
    }
    let g = matmul();
    let archs = nvrtc::supported_archs();
    assert!(archs.contains(&90), "{archs:?}");
    println!("NVRTC {} assembles for {archs:?}", nvrtc::version_text());
    let at = |sm: u32| GpuTarget {
        sm,
        ..GpuTarget::h100()
    };
    match nvrtc::image("mm", &g.source, &g.entry, &GpuTarget::h100()).unwrap() {
        (Image::Cubin { arch, bytes }, Some(report)) => {
            assert_eq!(arch, "sm_90");
            assert_eq!(
                cubin::resources(&bytes, Some(&g.entry)).unwrap().registers,
                report.registers
            );
        }
        other => panic!("expected a CUBIN, got {other:?}"),
    }
    // The device's own architecture-specific target (an H100 at run time): `sm_90a`, which
    // `wgmma` kernels need.
    match nvrtc::image("mm", &g.source, &g.entry, &GpuTarget::h100_sm90a()).unwrap() {
        (Image::Cubin { arch, .. }, Some(_)) => assert_eq!(arch, "sm_90a"),
        other => panic!("expected a CUBIN, got {other:?}"),
    }
    // A GPU newer than this NVRTC: PTX for the newest architecture it knows.
    let newest = *archs.iter().max().unwrap();
    match nvrtc::image("mm", &g.source, &g.entry, &at(newest + 5)).unwrap() {
        (Image::Ptx { arch, text, reason }, None) => {
            assert_eq!(arch, format!("compute_{newest}"));
            assert!(text.contains(".entry"));
            assert!(reason.contains(&format!("sm_{}", newest + 5)), "{reason}");
        }
        other => panic!("expected PTX, got {other:?}"),
    }
    // Older than all of them: an error that says so.
    let e = nvrtc::image("mm", &g.source, &g.entry, &at(30)).unwrap_err();
    assert!(e.to_string().contains("sm_30"), "{e}");
}

#[test]
fn cached_cubins_are_keyed_by_what_they_hold() {
    if !tools("cached_cubins_are_keyed_by_what_they_hold") {
        return;
    }
    // A source no earlier run cached.
    let nonce = format!(
        "// {} {:?}\n",
        std::process::id(),
        std::time::SystemTime::now()
    );
    let g = matmul();
    let source = format!("{nonce}{}", g.source);
    let a = nvrtc::compile_cubin_cached("mm", &source, "sm_90", &g.entry).unwrap();
    let b = nvrtc::compile_cubin_cached("mm", &source, "sm_90", &g.entry).unwrap();
    assert!(
        std::sync::Arc::ptr_eq(&a, &b),
        "the second is the memoized one"
    );
    let ptx = nvrtc::compile_ptx_cached("mm", &source, "compute_90").unwrap();
    let Some(dir) = object_cache::objects_dir() else {
        println!("TENSOR_DSL_NO_DISK_CACHE=1: no disk cache to check");
        return;
    };
    let holding = |ext: &str, bytes: &[u8]| {
        std::fs::read_dir(&dir)
            .unwrap()
            .filter_map(Result::ok)
            .filter(|e| e.file_name().to_string_lossy().ends_with(ext))
            .filter(|e| std::fs::read(e.path()).is_ok_and(|b| b == bytes))
            .count()
    };
    // (Sources that differ only in comments compile to the same bytes: earlier runs may
    // have stored them under their own keys.)
    assert!(holding(".cubin", &a.bytes) >= 1, "the CUBIN is on disk");
    assert!(
        holding(".ptx", ptx.as_bytes()) >= 1,
        "the PTX is its own file"
    );
}
