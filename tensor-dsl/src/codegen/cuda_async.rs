//! The device helpers of the SIMT GEMM nest's memory primitives, prepended to a CUDA source
//! that uses them ([`prelude`]): `cp.async` copies of `f32` data with zero fill, their
//! commit and wait ([`crate::lower::Stmt::AsyncCopy`], `AsyncCommit`, `AsyncWait`), split-K's
//! GPU-scope release/acquire fence (`td_fence_acq_rel`), the shared-memory address the
//! copies take ([`crate::lower::Value::SharedAddress`]) and an opaque pointer (`td_opaque`:
//! a per-thread base pointer the compiler cannot re-associate, so a table offset is added
//! to it with one `IMAD.WIDE`).
//!
//! Each helper is inline PTX under `__CUDA_ARCH__`; elsewhere (the CPU emulator,
//! `tests/cuda_emu.h`) it calls the emulator's `cp.async` queue (`td_emu_cp_async`, shared
//! with the tensor-core template), so a pipeline that reads a stage before waiting for it
//! reads stale data there too. The emulator's shared addresses are offsets into the block's
//! one shared array (whose address `td_smem` records): the nest has a single shared buffer.
//!
//! ```
//! let text = "td_cp_async16(td_sb + 64u, t0 + (i), true);\ntd_cp_async_commit();";
//! let p = tensor_dsl::codegen::cuda_async::prelude(text);
//! assert!(p.contains("cp.async.cg.shared.global [%0], [%1], 16, %2;"));
//! assert!(!p.contains("td_cp_async4("));
//! ```

/// The helpers `body` (printed CUDA) calls, in dependency order; empty when it calls none.
pub fn prelude(body: &str) -> String {
    let q = QUALIFIERS;
    let mut h = String::new();
    if body.contains("td_smem(") {
        h.push_str(&format!(
            "#ifndef __CUDA_ARCH__\n\
             static unsigned char *td_shared_base;\n\
             #endif\n\
             /* The 32-bit shared-memory address of p (the emulator: 0, recording p as the base). */\n\
             {q} unsigned td_smem(const void *p) {{\n\
             #ifdef __CUDA_ARCH__\n\
             \x20   unsigned r;\n\
             \x20   asm(\"{{ .reg .u64 a; cvta.to.shared.u64 a, %1; cvt.u32.u64 %0, a; }}\" : \"=r\"(r) : \"l\"(p));\n\
             \x20   return r;\n\
             #else\n\
             \x20   td_shared_base = (unsigned char *)p;\n\
             \x20   return 0u;\n\
             #endif\n\
             }}\n"
        ));
    }
    for bytes in [4, 16] {
        if body.contains(&format!("td_cp_async{bytes}(")) {
            h.push_str(&format!(
                "/* {bytes} bytes global -> shared, asynchronously; zeros when !ok (nothing is read). */\n"
            ));
            h.push_str(&cp_async_copy(bytes, "float", "td_emu_cp_async"));
        }
    }
    if body.contains("td_cp_async_commit(") {
        h.push_str(&cp_async_commit());
    }
    if body.contains("td_cp_async_wait<") {
        h.push_str(&format!(
            "/* Waits until at most N of this thread's copy groups are pending. */\n\
             template <int N> {q} void td_cp_async_wait() {{\n\
             #ifdef __CUDA_ARCH__\n\
             \x20   asm volatile(\"cp.async.wait_group %0;\" :: \"n\"(N) : \"memory\");\n\
             #else\n\
             \x20   td_emu_cp_async_wait(N);\n\
             #endif\n\
             }}\n"
        ));
    }
    if body.contains("td_fence_acq_rel(") {
        h.push_str(&format!(
            "/* A release and acquire fence at GPU scope (split-K's hand-over between blocks);\n \
             * lighter than __threadfence(), which is sequentially consistent. */\n\
             {q} void td_fence_acq_rel() {{\n\
             #if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 700\n\
             \x20   asm volatile(\"fence.acq_rel.gpu;\" ::: \"memory\");\n\
             #else\n\
             \x20   __threadfence();\n\
             #endif\n\
             }}\n"
        ));
    }
    if body.contains("td_opaque(") {
        h.push_str(&format!(
            "/* p, opaque to the compiler's address arithmetic. */\n\
             {q} const float *td_opaque(const float *p) {{\n\
             #ifdef __CUDA_ARCH__\n\
             \x20   asm(\"mov.b64 %0, %0;\" : \"+l\"(p));\n\
             #endif\n\
             \x20   return p;\n\
             }}\n"
        ));
    }
    h
}

/// The qualifiers of every device helper.
const QUALIFIERS: &str = "static __device__ __forceinline__";

/// `td_cp_async<bytes>(dst, src, ok)`: `bytes` bytes from global `src` (of C type `src_ty`)
/// to shared address `dst`, zeros when `!ok` (then nothing is read): `cp.async.cg` for 16
/// bytes, `.ca` for fewer; on the emulator, `emu` (its `cp.async` queue: `td_emu_cp_async`,
/// or the sm_90 header's `td_emu90_cp_async`). The SIMT nest, `mma.sync` and `wgmma`
/// templates all emit it here.
pub(crate) fn cp_async_copy(bytes: usize, src_ty: &str, emu: &str) -> String {
    let q = QUALIFIERS;
    let cache = if bytes == 16 { "cg" } else { "ca" };
    format!(
        "{q} void td_cp_async{bytes}(unsigned dst, const {src_ty} *src, bool ok) {{\n\
         #ifdef __CUDA_ARCH__\n\
         \x20   asm volatile(\"cp.async.{cache}.shared.global [%0], [%1], {bytes}, %2;\" :: \"r\"(dst), \"l\"(src), \"r\"(ok ? {bytes} : 0) : \"memory\");\n\
         #else\n\
         \x20   {emu}(td_shared_base + dst, src, {bytes}, ok ? {bytes} : 0);\n\
         #endif\n}}\n"
    )
}

/// `td_cp_async_commit()`: closes this thread's group of `cp.async` copies.
pub(crate) fn cp_async_commit() -> String {
    let q = QUALIFIERS;
    format!(
        "{q} void td_cp_async_commit() {{\n\
         #ifdef __CUDA_ARCH__\n\
         \x20   asm volatile(\"cp.async.commit_group;\" ::: \"memory\");\n\
         #else\n\
         \x20   td_emu_cp_async_commit();\n\
         #endif\n}}\n"
    )
}

/// `td_cp_async_wait<n>()`: waits until at most `n` of this thread's copy groups are
/// pending; on the emulator, `emu` (`td_emu_cp_async_wait` or `td_emu90_cp_async_wait`).
pub(crate) fn cp_async_wait(n: usize, emu: &str) -> String {
    let q = QUALIFIERS;
    format!(
        "{q} void td_cp_async_wait{n}() {{\n\
         #ifdef __CUDA_ARCH__\n\
         \x20   asm volatile(\"cp.async.wait_group {n};\" ::: \"memory\");\n\
         #else\n\
         \x20   {emu}({n});\n\
         #endif\n}}\n"
    )
}
