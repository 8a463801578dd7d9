//! Split-K across blocks for the tensor-core kernels ([`super::tensorcore`],
//! [`super::wgmma`]): `splits` blocks share one output tile, each reducing a contiguous run
//! of its k tiles, and the last of them to finish adds the partial sums and runs the
//! epilogue. Deterministic and without any runtime support:
//!
//! ```text
//! __device__ float    td_partial[splits][tiles][accumulators][threads];  // module globals:
//! __device__ unsigned td_arrivals[tiles];                                //   zeroed at load
//! every block: store its f32 accumulators to its split's slot; fence.acq_rel.gpu; barrier
//! thread 0:    ticket = atom.add(td_arrivals[tile], 1); the last (ticket == splits-1)
//!              resets td_arrivals[tile] to 0 for the next launch
//! the others exit; the last block: fence, acc = sum over splits 0, 1, ... (split order,
//! whatever the arrival order; per trip to L2 the partials of up to 32 values, a chunk of
//! accumulators over a group of splits: `sum_shape`), then the epilogue and the store
//! ```
//!
//! The SIMT GEMM nest ([`crate::lower::gpu_simt`]) splits the same way and takes its
//! sum's shape from [`sum_shape`].
//!
//! The partial sums live in the module, so two launches of the same module must not run
//! at once (the runtime launches on one stream). The slot is laid out accumulator-major,
//! thread-minor, so a warp's stores and loads are coalesced. PTX sits in small `__device__`
//! wrappers whose non-CUDA path is the emulator's (`tests/cuda_emu_sm90.h`).
//!
//! ```
//! use tensor_dsl::codegen::split_k::SplitK;
//! let s = SplitK { splits: 4, tiles: 64, accumulators: 64, threads: 128 };
//! assert_eq!(s.partial_bytes(), 4 * 64 * 64 * 128 * 4);
//! assert!(s.globals().contains("td_partial[2097152]"));
//! ```

use std::fmt::Write as _;

/// Most bytes of partial sums a kernel may keep in module globals: each loaded module holds
/// its own, and a tuning session keeps up to 256 modules loaded.
pub const MAX_PARTIAL_BYTES: usize = 32 << 20;

/// The geometry of a split reduction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SplitK {
    /// Blocks per output tile (> 1).
    pub splits: usize,
    /// Output tiles (batch instances included).
    pub tiles: usize,
    /// `f32` accumulators per thread.
    pub accumulators: usize,
    /// Threads per block.
    pub threads: usize,
}

/// Most partial sums a thread of the last block loads per trip to the workspace: the tail of
/// a split kernel is a chain of such trips after the whole main loop, and they sit beside the
/// thread's accumulators, within the registers the main loop already holds.
pub const SUM_IN_FLIGHT: usize = 32;

/// `(chunk, group)` of a split tile's sum: per trip to the workspace, `chunk` of the thread's
/// `accumulators` over `group` consecutive splits (the largest divisors of each with
/// `chunk · group` within [`SUM_IN_FLIGHT`], `chunk` first; at least 1 each). The sum stays
/// in split order per accumulator.
///
/// ```
/// use tensor_dsl::codegen::split_k::sum_shape;
/// assert_eq!(sum_shape(64, 8), (32, 1));
/// assert_eq!(sum_shape(16, 8), (16, 2));
/// assert_eq!(sum_shape(4, 16), (4, 8));
/// ```
pub fn sum_shape(accumulators: usize, splits: usize) -> (usize, usize) {
    let largest_divisor = |n: usize, most: usize| {
        (1..=most.max(1))
            .rev()
            .find(|&d| n.is_multiple_of(d))
            .unwrap_or(1)
    };
    let chunk = largest_divisor(accumulators.max(1), SUM_IN_FLIGHT);
    let group = largest_divisor(splits.max(1), SUM_IN_FLIGHT / chunk);
    (chunk, group)
}

impl SplitK {
    /// Bytes of the partial-sum array.
    pub fn partial_bytes(&self) -> usize {
        4 * self.splits * self.tiles * self.accumulators * self.threads
    }

    /// The module globals and the PTX wrappers the reduction uses.
    pub fn globals(&self) -> String {
        let q = "static __device__ __forceinline__";
        let mut h = String::new();
        let _ = write!(
            h,
            "/* split-K across blocks: each split's partial sums, and per tile the splits that\n \
             * have arrived (module globals start zeroed; the last arrival resets its count) */\n\
             __device__ float td_partial[{}];\n\
             __device__ unsigned td_arrivals[{}];\n\
             {q} void td_fence_gpu() {{\n\
             #ifdef __CUDA_ARCH__\n\
             \x20   asm volatile(\"fence.acq_rel.gpu;\" ::: \"memory\");\n\
             #else\n\
             \x20   td_emu90_fence_gpu();\n\
             #endif\n}}\n\
             {q} unsigned td_arrive(unsigned *count) {{\n\
             #ifdef __CUDA_ARCH__\n\
             \x20   unsigned old; asm volatile(\"atom.acq_rel.gpu.global.add.u32 %0, [%1], 1;\" : \"=r\"(old) : \"l\"(count) : \"memory\"); return old;\n\
             #else\n\
             \x20   return td_emu90_atomic_add(count, 1u);\n\
             #endif\n}}\n\
             {q} void td_reset(unsigned *count) {{\n\
             #ifdef __CUDA_ARCH__\n\
             \x20   asm volatile(\"st.relaxed.gpu.global.u32 [%0], %1;\" :: \"l\"(count), \"r\"(0u) : \"memory\");\n\
             #else\n\
             \x20   *count = 0u;\n\
             #endif\n}}\n\
             {q} float td_load_partial(const float *p) {{\n\
             #ifdef __CUDA_ARCH__\n\
             \x20   float v; asm volatile(\"ld.relaxed.gpu.global.f32 %0, [%1];\" : \"=f\"(v) : \"l\"(p) : \"memory\"); return v;\n\
             #else\n\
             \x20   return *p;\n\
             #endif\n}}\n",
            self.splits * self.tiles * self.accumulators * self.threads,
            self.tiles
        );
        h
    }

    /// The lines that decode `blockIdx.x` into `split` and `tile` and give the split's k
    /// tiles: `kt0` (its first) and `kt_n` (how many) of `k_tiles`.
    pub fn decode(&self, out: &mut String, ind: &str, k_tiles: usize) {
        let s = self.splits;
        let _ = writeln!(
            out,
            "{ind}/* split-K across blocks: block = tile * {s} + split; split s reduces k tiles [s * {k_tiles} / {s}, (s + 1) * {k_tiles} / {s}) */"
        );
        let _ = writeln!(
            out,
            "{ind}const int split = blockIdx.x % {s}, tile = blockIdx.x / {s};"
        );
        let _ = writeln!(
            out,
            "{ind}const int kt0 = split * {k_tiles} / {s}, kt_n = (split + 1) * {k_tiles} / {s} - kt0;"
        );
    }

    /// After the main loop, with the block's sums in the `acc` array (`acc` is a flat `float
    /// *` expression): every block parks its sums, the last one to arrive at the tile adds
    /// all splits' sums in split order into `acc`; the others return. Threads for which
    /// `active` is false (warp groups of a sliced K whose sums were already added) take part
    /// in the barriers only. `flag` names an `unsigned` in shared memory that nothing uses
    /// any more (it tells the block whether it arrived last).
    pub fn reduce(&self, out: &mut String, ind: &str, acc: &str, active: Option<&str>, flag: &str) {
        let (s, t, a) = (self.splits, self.threads, self.accumulators);
        let slot = a * t;
        let guard = |body: &str| match active {
            Some(c) => format!("if ({c}) {{ {body} }}"),
            None => body.to_string(),
        };
        let _ = writeln!(
            out,
            "{ind}/* split-K: park this split's sums, count the arrival; the last block of the tile adds them */"
        );
        let _ = writeln!(
            out,
            "{ind}float *const td_slot = td_partial + tile * {slot} + threadIdx.x;"
        );
        let _ = writeln!(
            out,
            "{ind}{}",
            guard(&format!(
                "\n{ind}    #pragma unroll\n{ind}    for (int x = 0; x < {a}; ++x) td_slot[split * {} + x * {t}] = ({acc})[x];\n{ind}",
                self.tiles * slot
            ))
        );
        let _ = writeln!(out, "{ind}td_fence_gpu();");
        let _ = writeln!(out, "{ind}__syncthreads();");
        let _ = writeln!(out, "{ind}unsigned &td_last = {flag};");
        let _ = writeln!(out, "{ind}if (threadIdx.x == 0) {{");
        let _ = writeln!(
            out,
            "{ind}    td_last = td_arrive(&td_arrivals[tile]) == {}u;",
            s - 1
        );
        let _ = writeln!(out, "{ind}    if (td_last) td_reset(&td_arrivals[tile]);");
        let _ = writeln!(out, "{ind}}}");
        let _ = writeln!(out, "{ind}__syncthreads();");
        let _ = writeln!(out, "{ind}if (!td_last) return;");
        let _ = writeln!(out, "{ind}td_fence_gpu();");
        // `chunk` accumulators over `group` splits per trip to L2: the group's partials are
        // all loaded (in order: the loads are volatile) before any is added.
        let (c, g) = sum_shape(a, s);
        let _ = writeln!(
            out,
            "{ind}{}",
            guard(&format!(
                "\n{ind}    #pragma unroll\n\
                 {ind}    for (int x0 = 0; x0 < {a}; x0 += {c}) {{\n\
                 {ind}        float v[{c}];\n\
                 {ind}        #pragma unroll\n\
                 {ind}        for (int x = 0; x < {c}; ++x) v[x] = 0.0f;\n\
                 {ind}        #pragma unroll 1\n\
                 {ind}        for (int sp = 0; sp < {s}; sp += {g}) {{\n\
                 {ind}            float p[{g}][{c}];\n\
                 {ind}            #pragma unroll\n\
                 {ind}            for (int z = 0; z < {g}; ++z)\n\
                 {ind}                #pragma unroll\n\
                 {ind}                for (int x = 0; x < {c}; ++x) p[z][x] = td_load_partial(td_slot + (sp + z) * {} + (x0 + x) * {t});\n\
                 {ind}            #pragma unroll\n\
                 {ind}            for (int z = 0; z < {g}; ++z)\n\
                 {ind}                #pragma unroll\n\
                 {ind}                for (int x = 0; x < {c}; ++x) v[x] += p[z][x];\n\
                 {ind}        }}\n\
                 {ind}        #pragma unroll\n\
                 {ind}        for (int x = 0; x < {c}; ++x) ({acc})[x0 + x] = v[x];\n\
                 {ind}    }}\n{ind}",
                self.tiles * slot
            ))
        );
    }
}
