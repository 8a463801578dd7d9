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

#define __global__
#define __device__
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

static void entry() {
    (*body)();
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
