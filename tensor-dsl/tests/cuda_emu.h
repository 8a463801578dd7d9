// cuda_emu.h — runs generated CUDA C on the CPU, for tests on machines without a GPU.
//
// The CUDA source is compiled as C++ after this header. Each block's threads are fibers
// (ucontext) on one OS thread; `__syncthreads()` switches back to a scheduler that runs
// every fiber of the block up to its next barrier, round after round, so a barrier holds
// exactly as on the GPU. Blocks run one after another, so `__shared__` (a function-local
// `static`) is one block's shared memory. Warp shuffles go through a scratch array between
// two barriers (generated code shuffles uniformly across the block).
//
// Checked on the way: every thread of a block reaches the same number of barriers (a
// thread that exits while others wait is an error), shuffle partners are in the warp, in
// the block and in the mask, and the mask names no absent thread. Errors exit with 3.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ucontext.h>

#include <functional>
#include <vector>

#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(n)
#define __align__(n) __attribute__((aligned(n)))
#define __shared__ static

struct td_uint3 {
    unsigned x, y, z;
};
static td_uint3 threadIdx, blockIdx, blockDim, gridDim;

struct __attribute__((aligned(8))) float2 {
    float x, y;
};
struct __attribute__((aligned(16))) float4 {
    float x, y, z, w;
};

namespace td_emu {
enum State { RUNNING, AT_BARRIER, DONE };
struct Fiber {
    ucontext_t ctx;
    char *stack;
    State state;
};
static const size_t STACK = 256 * 1024;
static Fiber *fibers;
static ucontext_t scheduler;
static unsigned current;
static std::function<void()> *body;
static float shuffle_slot[1024];
static unsigned long switches;

static void fail(const char *what) {
    fprintf(stderr, "cuda_emu: %s (block %u, thread %u)\n", what, blockIdx.x, threadIdx.x);
    exit(3);
}

static void check_cp_async_done();

static void entry() {
    (*body)();
    check_cp_async_done();
    fibers[current].state = DONE;
}
}  // namespace td_emu

static inline void __syncthreads() {
    using namespace td_emu;
    unsigned me = current;
    fibers[me].state = AT_BARRIER;
    swapcontext(&fibers[me].ctx, &scheduler);
}

static inline float __shfl_xor_sync(unsigned mask, float v, int lane_mask) {
    using namespace td_emu;
    unsigned me = threadIdx.x;
    unsigned other = me ^ (unsigned)lane_mask;
    if (other >= blockDim.x || other / 32 != me / 32)
        fail("shuffle partner outside the warp or the block");
    if (!((mask >> (me % 32)) & 1u) || !((mask >> (other % 32)) & 1u))
        fail("shuffle partner not in the mask");
    unsigned live = blockDim.x - me / 32 * 32;
    unsigned present = live >= 32 ? 0xffffffffu : (1u << live) - 1u;
    if (mask & ~present)
        fail("shuffle mask names threads that do not exist");
    shuffle_slot[me] = v;
    __syncthreads();
    float r = shuffle_slot[other];
    __syncthreads();
    return r;
}

// ---- Tensor-core warp collectives (PTX ISA 8.x, "Matrix Fragments for mma.m16n8k16"):
// mma.sync m16n8k16 (f16/bf16 in, f32 accumulate), ldmatrix m8n8 .x1/.x2/.x4 (.trans), and
// cp.async with commit/wait groups. Like the shuffles, each is a warp-wide rendezvous built
// on the block barrier (generated code calls them uniformly across the block): every lane
// posts its operands, a barrier, every lane computes its own fragment from its warp's
// posts, a barrier. cp.async copies are queued per thread and land only at
// cp.async.wait_group, so a pipeline that reads a stage before waiting reads stale data.
namespace td_emu {
struct WarpSlot {
    unsigned a[4], b[2];
    float c[4];
    const unsigned short *p;
};
static WarpSlot warp_slot[1024];
struct AsyncCopy {
    void *dst;
    const void *src;
    int bytes, src_bytes;
};
static std::vector<AsyncCopy> copies[1024];
static std::vector<size_t> groups[1024];

static float half_to_float(unsigned short h, bool bf16) {
    unsigned u;
    if (bf16) {
        u = (unsigned)h << 16;
    } else {
        unsigned s = (unsigned)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
        if (e == 0x1fu)
            u = s | 0x7f800000u | (m << 13);
        else if (e != 0)
            u = s | ((e + 112u) << 23) | (m << 13);
        else if (m == 0)
            u = s;
        else {
            e = 113u;
            while (!(m & 0x400u)) {
                m <<= 1;
                --e;
            }
            u = s | (e << 23) | ((m & 0x3ffu) << 13);
        }
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static void check_warp() {
    if (blockDim.x % 32 != 0)
        fail("a warp collective in a block of a partial warp");
}

static void check_cp_async_done() {
    unsigned t = current;
    if (!copies[t].empty() || !groups[t].empty())
        fail("the thread exited with cp.async copies it never waited for");
}
}  // namespace td_emu

// d += a * b for the warp: A 16x16 row-major (4 regs of 2 halves), B 16x8 column-major
// (2 regs), C/D 16x8 f32 (4 regs). groupID = lane / 4, tig = lane % 4:
//   a[i]: row groupID + 8 * (i % 2), columns tig * 2 + {0,1} + 8 * (i / 2);
//   b[i]: rows (k) tig * 2 + {0,1} + 8 * i, column groupID;
//   d[i]: row groupID + 8 * (i / 2), column tig * 2 + i % 2.
static void td_emu_mma_m16n8k16(float *d, const unsigned *a, const unsigned *b, int bf16) {
    using namespace td_emu;
    check_warp();
    unsigned me = threadIdx.x, base = me / 32 * 32, lane = me % 32;
    WarpSlot &s = warp_slot[me];
    for (int i = 0; i < 4; ++i) {
        s.a[i] = a[i];
        s.c[i] = d[i];
    }
    s.b[0] = b[0];
    s.b[1] = b[1];
    __syncthreads();
    float r[4];
    for (int i = 0; i < 4; ++i) {
        unsigned row = lane / 4 + 8 * (i / 2), col = lane % 4 * 2 + i % 2;
        float sum = s.c[i];
        for (unsigned k = 0; k < 16; ++k) {
            // A[row][k]: lane (row % 8) * 4 + (k % 8) / 2, register row / 8 + 2 * (k / 8).
            const WarpSlot &sa = warp_slot[base + row % 8 * 4 + k % 8 / 2];
            unsigned wa = sa.a[row / 8 + 2 * (k / 8)];
            unsigned short ha = (unsigned short)(k % 2 ? wa >> 16 : wa & 0xffffu);
            // B[k][col]: lane col * 4 + (k % 8) / 2, register k / 8.
            const WarpSlot &sb = warp_slot[base + col * 4 + k % 8 / 2];
            unsigned wb = sb.b[k / 8];
            unsigned short hb = (unsigned short)(k % 2 ? wb >> 16 : wb & 0xffffu);
            sum += half_to_float(ha, bf16) * half_to_float(hb, bf16);
        }
        r[i] = sum;
    }
    __syncthreads();
    for (int i = 0; i < 4; ++i)
        d[i] = r[i];
}

// ldmatrix.sync.aligned.m8n8.{x1,x2,x4}[.trans].shared.b16: lanes 8j..8j+7 give the row
// addresses of matrix j (16 bytes each, 16-byte aligned); register j of each lane gets
// row lane / 4, columns (lane % 4) * 2 + {0,1} of matrix j (with .trans: column lane / 4,
// rows (lane % 4) * 2 + {0,1}).
static void td_emu_ldmatrix(unsigned *r, const unsigned short *p, int num, int trans) {
    using namespace td_emu;
    check_warp();
    unsigned me = threadIdx.x, base = me / 32 * 32, lane = me % 32;
    if (num != 1 && num != 2 && num != 4)
        fail("ldmatrix: .num is not x1, x2 or x4");
    if (lane < (unsigned)num * 8 && ((size_t)p % 16) != 0)
        fail("ldmatrix: a row address is not 16-byte aligned");
    warp_slot[me].p = p;
    __syncthreads();
    unsigned v[4];
    for (int j = 0; j < num; ++j) {
        unsigned short h[2];
        for (unsigned e = 0; e < 2; ++e) {
            unsigned row = trans ? lane % 4 * 2 + e : lane / 4;
            unsigned col = trans ? lane / 4 : lane % 4 * 2 + e;
            h[e] = warp_slot[base + j * 8 + row].p[col];
        }
        v[j] = (unsigned)h[0] | ((unsigned)h[1] << 16);
    }
    __syncthreads();
    for (int j = 0; j < num; ++j)
        r[j] = v[j];
}

// cp.async.{ca,cg}.shared.global [dst], [src], bytes, src_bytes: queued; the first
// src_bytes come from src, the rest are zeros. Both addresses must be `bytes`-aligned.
static void td_emu_cp_async(void *dst, const void *src, int bytes, int src_bytes) {
    using namespace td_emu;
    if (bytes != 4 && bytes != 8 && bytes != 16)
        fail("cp.async: size is not 4, 8 or 16 bytes");
    if ((size_t)dst % bytes || (size_t)src % bytes)
        fail("cp.async: misaligned address");
    if (src_bytes < 0 || src_bytes > bytes)
        fail("cp.async: bad source size");
    copies[threadIdx.x].push_back({dst, src, bytes, src_bytes});
}

static void td_emu_cp_async_commit() {
    using namespace td_emu;
    groups[threadIdx.x].push_back(copies[threadIdx.x].size());
}

// Lands the thread's committed groups until at most `n` are pending.
static void td_emu_cp_async_wait(int n) {
    using namespace td_emu;
    std::vector<AsyncCopy> &c = copies[threadIdx.x];
    std::vector<size_t> &g = groups[threadIdx.x];
    size_t land = 0;
    while (g.size() > (size_t)n) {
        land = g.front();
        g.erase(g.begin());
    }
    for (size_t i = 0; i < land; ++i) {
        memset(c[i].dst, 0, c[i].bytes);
        if (c[i].src_bytes)
            memcpy(c[i].dst, c[i].src, c[i].src_bytes);
    }
    c.erase(c.begin(), c.begin() + land);
    for (size_t &e : g)
        e -= land;
}

// Runs `kernel` on a grid x block launch. Returns the number of fiber switches.
static unsigned long td_launch(unsigned grid, unsigned block, std::function<void()> kernel) {
    using namespace td_emu;
    if (block == 0 || block > 1024)
        fail("block size out of range");
    blockDim = {block, 1, 1};
    gridDim = {grid, 1, 1};
    fibers = new Fiber[block];
    for (unsigned t = 0; t < block; ++t)
        fibers[t].stack = (char *)malloc(STACK);
    body = &kernel;
    switches = 0;
    for (unsigned b = 0; b < grid; ++b) {
        blockIdx = {b, 0, 0};
        for (unsigned t = 0; t < block; ++t) {
            Fiber &f = fibers[t];
            getcontext(&f.ctx);
            f.ctx.uc_stack.ss_sp = f.stack;
            f.ctx.uc_stack.ss_size = STACK;
            f.ctx.uc_link = &scheduler;
            makecontext(&f.ctx, entry, 0);
            f.state = RUNNING;
        }
        for (;;) {
            for (unsigned t = 0; t < block; ++t) {
                if (fibers[t].state == DONE)
                    continue;
                current = t;
                threadIdx = {t, 0, 0};
                fibers[t].state = RUNNING;
                ++switches;
                swapcontext(&scheduler, &fibers[t].ctx);
            }
            unsigned done = 0;
            for (unsigned t = 0; t < block; ++t)
                done += fibers[t].state == DONE;
            if (done == block)
                break;
            if (done > 0) {
                threadIdx = {block, 0, 0};
                fail("barrier divergence: a thread exited while others wait at __syncthreads");
            }
        }
    }
    for (unsigned t = 0; t < block; ++t)
        free(fibers[t].stack);
    delete[] fibers;
    return switches;
}

// A 256-byte aligned copy of `n` floats read from `f` (cudaMalloc aligns to 256).
static float *td_read_aligned(FILE *f, size_t n) {
    size_t bytes = (n * sizeof(float) + 255) / 256 * 256;
    float *p = (float *)aligned_alloc(256, bytes ? bytes : 256);
    if (n && fread(p, sizeof(float), n, f) != n) {
        fprintf(stderr, "cuda_emu: short input file\n");
        exit(2);
    }
    return p;
}

/* `n` bytes from `f` into 256-byte aligned memory (inputs of any element type). */
static void *td_read_bytes(FILE *f, size_t n) {
    size_t bytes = (n + 255) / 256 * 256;
    void *p = aligned_alloc(256, bytes ? bytes : 256);
    if (n && fread(p, 1, n, f) != n) {
        fprintf(stderr, "cuda_emu: short input file\n");
        exit(2);
    }
    return p;
}

/* `n` bytes of all-ones: NaN as f32, f16 and bf16 alike (an output the kernel must overwrite). */
static void *td_alloc_nan_bytes(size_t n) {
    size_t bytes = (n + 255) / 256 * 256;
    void *p = aligned_alloc(256, bytes ? bytes : 256);
    memset(p, 0xff, bytes ? bytes : 256);
    return p;
}

static float *td_alloc_nan(size_t n) {
    size_t bytes = (n * sizeof(float) + 255) / 256 * 256;
    float *p = (float *)aligned_alloc(256, bytes ? bytes : 256);
    for (size_t i = 0; i < n; ++i)
        p[i] = NAN;
    return p;
}

// ---- SIMT GEMM template (split-K, fused-reduction tables) --------------------------------
// What the SIMT GEMM's split-K epilogue and module-scope arrays use. Module globals
// (`__device__` arrays) are zero-initialised statics, kept across launches like device
// memory. Blocks run one after another, so "the last block to arrive reduces" never waits
// for another block (no order can deadlock) and the fence is a no-op; fibers switch only at
// barriers, so a read-modify-write is atomic.
#define __constant__ static

struct __attribute__((aligned(16))) int4 {
    int x, y, z, w;
};

static inline void __threadfence() {}

static inline float __ldcg(const float *p) {
    return *p;
}

static inline float __ldg(const float *p) {
    return *p;
}

static inline int atomicAdd(int *p, int v) {
    int old = *p;
    *p = old + v;
    return old;
}

static inline float atomicAdd(float *p, float v) {
    float old = *p;
    *p = old + v;
    return old;
}

namespace td_emu {
static int or_slot[1024];
}

// Every thread of the block waits for the others and gets whether any passed non-zero.
static inline int __syncthreads_or(int p) {
    using namespace td_emu;
    or_slot[threadIdx.x] = p != 0;
    __syncthreads();
    int any = 0;
    for (unsigned t = 0; t < blockDim.x; ++t)
        any |= or_slot[t];
    __syncthreads();
    return any;
}
