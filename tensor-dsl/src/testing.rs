//! Skip or fail: how a test that needs a GPU, or the CUDA compilers, decides what to do
//! where they are missing — in one place, for every test crate of the workspace.
//!
//! Without what it needs, a test prints why and passes (developer machines and CI have no
//! GPU), unless the environment requires it:
//! - `TENSOR_DSL_REQUIRE_GPU=1` — a GPU session (`bench/gpu/run.sh` sets it): every test that
//!   needs a GPU, or NVRTC and ptxas, **fails** instead of skipping, so a GPU run cannot pass
//!   by skipping;
//! - `TENSOR_DSL_REQUIRE_NVRTC=1` — CI (`.ci/run` sets it): tests that need NVRTC, ptxas or
//!   nvdisasm fail without them.
//!
//! ```
//! // In a test: run the GPU part only where there is a GPU.
//! if tensor_dsl::testing::gpu("my_test") {
//!     // ... launch kernels ...
//! }
//! ```

/// The variable that turns skipped GPU tests into failures.
pub const REQUIRE_GPU: &str = "TENSOR_DSL_REQUIRE_GPU";
/// The variable that turns skipped compiler tests (NVRTC, ptxas, nvdisasm) into failures.
pub const REQUIRE_NVRTC: &str = "TENSOR_DSL_REQUIRE_NVRTC";

/// What a test needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Need {
    /// A usable GPU (CUDA driver, device, NVRTC): required by `TENSOR_DSL_REQUIRE_GPU=1`.
    Gpu,
    /// The CUDA compilers (NVRTC, ptxas, nvdisasm), no GPU: required by
    /// `TENSOR_DSL_REQUIRE_NVRTC=1` or `TENSOR_DSL_REQUIRE_GPU=1`.
    Compilers,
}

fn set(var: &str) -> bool {
    std::env::var(var).is_ok_and(|v| v.trim() == "1")
}

/// Whether the environment requires `need` (see the module docs).
pub fn required(need: Need) -> bool {
    match need {
        Need::Gpu => set(REQUIRE_GPU),
        Need::Compilers => set(REQUIRE_NVRTC) || set(REQUIRE_GPU),
    }
}

/// `true` when `missing` is `None` (the test runs); otherwise prints
/// `skipping <test>: <why>` and returns `false`, or — where the environment requires `need` —
/// panics with the reason.
///
/// # Panics
///
/// When `missing` is `Some` and [`required`]`(need)`: this is a test helper, and the panic
/// is the test's failure.
#[allow(clippy::panic)]
pub fn runs(test: &str, need: Need, missing: Option<&str>) -> bool {
    let Some(why) = missing else {
        return true;
    };
    if required(need) {
        let var = match need {
            Need::Gpu => REQUIRE_GPU,
            Need::Compilers if set(REQUIRE_GPU) => REQUIRE_GPU,
            Need::Compilers => REQUIRE_NVRTC,
        };
        panic!("{test}: {var}=1 but {why}");
    }
    println!("skipping {test}: {why}");
    false
}

/// [`runs`] for a test that needs a usable GPU ([`crate::Device::Cuda`]'s availability).
pub fn gpu(test: &str) -> bool {
    let missing = crate::Device::Cuda.availability().err();
    runs(test, Need::Gpu, missing.as_deref())
}

/// The GPU the CUDA runtime uses, where [`gpu`] says the test runs.
#[cfg(feature = "cuda")]
pub fn gpu_info(test: &str) -> Option<&'static crate::runtime::cuda::DeviceInfo> {
    let found = crate::runtime::cuda::available();
    runs(test, Need::Gpu, found.as_ref().err().map(String::as_str))
        .then(|| found.ok())
        .flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_missing_runs_and_missing_skips_unless_required() {
        assert!(runs("t", Need::Gpu, None));
        if !required(Need::Gpu) {
            assert!(!runs("t", Need::Gpu, Some("no GPU here")));
        }
        if !required(Need::Compilers) {
            assert!(!runs("t", Need::Compilers, Some("no NVRTC here")));
        }
    }
}
