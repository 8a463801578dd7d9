// cuda_emu_sm90.h — the emulator's Hopper (sm_90a) part and split-K across blocks, included
// after cuda_emu.h by the tensor-core emulator tests. Kept apart from cuda_emu.h so the two
// evolve without touching each other.
//
// * Split-K across blocks: gpu-scope fences and atomics. Blocks run one after another, so
//   an atomic is a plain read-modify-write and a fence does nothing.
// * wgmma (PTX ISA 8.x, "Asynchronous Warpgroup Level Matrix Multiply-Accumulate"):
//   wgmma.fence / mma_async / commit_group / wait_group for m64nNk16 with f16/bf16 inputs
//   from shared-memory matrix descriptors and f32 accumulators, as a warpgroup collective
//   (128 consecutive threads). An mma_async only queues the operation; its products are
//   computed when a wait_group retires it, reading shared memory then, so a stage
//   overwritten before the wait gives wrong sums. The descriptor (start address, leading
//   and stride dimension byte offsets, swizzle mode) is decoded per the "Matrix Descriptor
//   Format" and elements are found with the "Canonical Layouts" (K-major and MN-major, no
//   swizzle and 32/64/128-byte swizzles: 16-byte chunk bits [4, 4+b) of the shared address
//   XORed with bits [7, 7+b)); the accumulator fragment is "Figure 149" (warp w of the
//   warpgroup holds rows 16w..16w+15; d[4j+e] is row lane/4 + 8(e/2), column 8j +
//   2(lane%4) + e%2).
// * Checked: every thread of a warpgroup issues the same operations (descriptors, shape,
//   transposes) and waits together; an mma_async comes after a wgmma.fence (issued after
//   the last wait); nothing is pending when the thread exits; a cp.async (through
//   td_emu90_cp_async) never writes shared memory that a queued wgmma reads; and a wgmma
//   never reads bytes that a cp.async landed in without a later fence.proxy.async by the
//   thread that issued it, nor bytes whose cp.async is still in flight.
// * TMA (cp.async.bulk.tensor.Nd...tile.mbarrier::complete_tx::bytes) and mbarriers (init,
//   arrive.expect_tx, try_wait.parity): a tensor map is the emulator's own 128-byte
//   encoding (td_emu90_encode_tensor_map; the driver's is opaque) of what
//   cuTensorMapEncodeTiled takes. A copy is queued on its mbarrier and lands — the box read
//   from global memory, zeros outside the tensor, written as rows of the box's inner side
//   and swizzled like wgmma's layouts (16-byte chunks by address bits 7+) — when a thread
//   waits on that barrier, completing its bytes; a phase completes when every arrival and
//   every expected byte is in. Checked: a copy's destination is 128-byte aligned, no copy
//   writes what a queued wgmma reads, no wgmma reads what a copy has not landed in, and a
//   wait that could never complete fails instead of hanging.
// Errors exit with 3, like cuda_emu.h's.

#include <algorithm>
#include <map>

#ifndef __grid_constant__
#define __grid_constant__
#endif
// The kernel parameter type of a tensor map (generated code declares it only where this
// header has not).
#define TD_TENSOR_MAP_DEFINED
struct __attribute__((aligned(64))) td_tensor_map {
    unsigned long long opaque[16];
};

namespace td_emu90 {
using td_emu::fail;

struct Op {
    unsigned long long da, db;
    int n, trans_a, trans_b, bf16;
    float *d;
    // Byte ranges [lo, hi] of shared memory the operation reads.
    unsigned a_lo, a_hi, b_lo, b_hi;
};
// Per thread: queued operations and the indices in it where commit groups end (the
// footprints are those of the warpgroup's first thread's entries).
static std::vector<Op> ops[1024];
static std::vector<size_t> op_groups[1024];
static bool fenced[1024];
// Per thread: shared byte ranges written by landed cp.async copies not yet covered by a
// fence.proxy.async of that thread.
static std::vector<std::pair<unsigned, unsigned>> unfenced[1024];

// The block's shared memory as the generated code declares it (td_emu90_shared): shared
// addresses are offsets into it.
static unsigned char *base;

static unsigned shared_offset(const void *p) {
    if (!base)
        fail("shared memory used before td_emu90_shared");
    return (unsigned)((const unsigned char *)p - base);
}

static unsigned char *base_of_shared() { return base; }

// The shared address of element (row, col) of the 64xK=16 (A) or NxK=16 (B) matrix a
// descriptor describes; `mn_major` when the matrix is stored transposed (imm-trans = 1).
static unsigned element(unsigned long long desc, unsigned row, unsigned k, bool mn_major) {
    unsigned start = (unsigned)(desc & 0x3fffu) << 4;
    unsigned lbo = (unsigned)((desc >> 16) & 0x3fffu) << 4;
    unsigned sbo = (unsigned)((desc >> 32) & 0x3fffu) << 4;
    unsigned base_offset = (unsigned)((desc >> 49) & 7u);
    unsigned mode = (unsigned)(desc >> 62);
    if (base_offset != 0)
        fail("wgmma: a matrix base offset other than 0 is not emulated");
    // The swizzle width in bytes (0: none) and its XOR mask over 16-byte chunks.
    unsigned width = mode == 1 ? 128u : mode == 2 ? 64u : mode == 3 ? 32u : 0u;
    const unsigned T = 8;  // 16-bit elements per 128 bits
    unsigned addr;
    if (!mn_major) {
        // ((8,m),(T,2k)) : ((1T,SBO),(1,LBO)) unswizzled; ((8,m),(T,2k)) : ((W/2,SBO),(1,T))
        // swizzled (W/2 elements = W bytes per row of the atom).
        if (width == 0)
            addr = start + (row % 8) * 16 + (row / 8) * sbo + (k % T) * 2 + (k / T) * lbo;
        else
            addr = start + (row % 8) * width + (row / 8) * sbo + k * 2;
    } else {
        // ((T,1,m),(8,k)) : ((1,T,SBO),(1T,LBO)) unswizzled; ((T,W/16,m),(8,k)) :
        // ((1,T,LBO),(W/2,SBO)) swizzled.
        if (width == 0)
            addr = start + (row % T) * 2 + (row / T) * sbo + (k % 8) * 16 + (k / 8) * lbo;
        else
            addr = start + (row % (width / 2)) * 2 + (row / (width / 2)) * lbo +
                   (k % 8) * width + (k / 8) * sbo;
    }
    if (width != 0)
        addr ^= ((addr >> 7) & (width / 16 - 1)) << 4;
    return addr;
}

static float value(unsigned addr, int bf16) {
    unsigned short h;
    memcpy(&h, base + addr, 2);
    return td_emu::half_to_float(h, bf16 != 0);
}

static void footprint(unsigned long long desc, unsigned rows, bool mn_major, unsigned *lo,
                      unsigned *hi) {
    *lo = 0xffffffffu;
    *hi = 0;
    for (unsigned r = 0; r < rows; ++r)
        for (unsigned k = 0; k < 16; ++k) {
            unsigned e = element(desc, r, k, mn_major);
            *lo = std::min(*lo, e);
            *hi = std::max(*hi, e + 1);
        }
}

static bool overlaps(unsigned lo, unsigned hi, unsigned a, unsigned b) {
    return lo <= b && a <= hi;
}

static void check_warpgroup() {
    if (blockDim.x % 128 != 0)
        fail("a warpgroup collective in a block of a partial warpgroup");
}

// Retires this thread's oldest operations: computes its fragment of each (rows
// 16w + lane/4 and 8 below it; columns 2(lane%4) and the next of every 8).
static void retire(size_t count) {
    unsigned me = threadIdx.x, lane = me % 32, warp = me % 128 / 32;
    for (size_t i = 0; i < count; ++i) {
        const Op &o = ops[me][i];
        float a[2][16], b[64][16];
        for (unsigned h = 0; h < 2; ++h)
            for (unsigned k = 0; k < 16; ++k)
                a[h][k] = value(element(o.da, 16 * warp + lane / 4 + 8 * h, k, o.trans_a), o.bf16);
        for (unsigned c = 0; c < (unsigned)o.n / 4; ++c)
            for (unsigned k = 0; k < 16; ++k)
                b[c][k] = value(element(o.db, c / 2 * 8 + lane % 4 * 2 + c % 2, k, o.trans_b), o.bf16);
        for (int x = 0; x < o.n / 2; ++x) {
            unsigned j = x / 4, e = x % 4;
            float sum = o.d[x];
            for (unsigned k = 0; k < 16; ++k)
                sum += a[e / 2][k] * b[2 * j + e % 2][k];
            o.d[x] = sum;
        }
    }
    ops[me].erase(ops[me].begin(), ops[me].begin() + count);
}

// ---- mbarriers and TMA copies ----
struct Bulk {
    unsigned dst;
    td_tensor_map map;
    int coords[5];
};
struct Barrier {
    unsigned count, pending, phase;
    long long tx;
    std::vector<Bulk> queued;
};
// By shared offset.
static std::map<unsigned, Barrier> barriers;

static Barrier &barrier(const void *p) {
    auto it = barriers.find(shared_offset(p));
    if (it == barriers.end())
        fail("an mbarrier used before mbarrier.init");
    return it->second;
}

static void complete(Barrier &b) {
    if (b.pending == 0 && b.tx == 0) {
        ++b.phase;
        b.pending = b.count;
    }
}

static unsigned bulk_bytes(const td_tensor_map &m) {
    unsigned rank = (unsigned)(m.opaque[1] & 0xff), elem = (unsigned)(m.opaque[1] >> 8 & 0xff);
    unsigned bytes = elem;
    for (unsigned d = 0; d < rank; ++d)
        bytes *= (unsigned)m.opaque[11 + d];
    return bytes;
}

// Writes a box: element (i0, i1, ...) of the box at coords + i, row-major with i0
// fastest, then swizzled on the shared address.
static void land(const Bulk &c) {
    const td_tensor_map &m = c.map;
    const unsigned char *base = (const unsigned char *)m.opaque[0];
    unsigned rank = (unsigned)(m.opaque[1] & 0xff), elem = (unsigned)(m.opaque[1] >> 8 & 0xff);
    unsigned swizzle = (unsigned)(m.opaque[1] >> 16 & 0xffff);
    unsigned box[5] = {1, 1, 1, 1, 1}, total = 1;
    for (unsigned d = 0; d < rank; ++d) {
        box[d] = (unsigned)m.opaque[11 + d];
        total *= box[d];
    }
    for (unsigned e = 0; e < total; ++e) {
        unsigned rest = e;
        bool inside = true;
        unsigned long long at = 0;
        for (unsigned d = 0; d < rank; ++d) {
            long long x = (long long)c.coords[d] + rest % box[d];
            rest /= box[d];
            if (x < 0 || x >= (long long)m.opaque[2 + d])
                inside = false;
            else
                at += (unsigned long long)x * (d == 0 ? elem : m.opaque[7 + d - 1]);
        }
        unsigned addr = c.dst + e * elem;
        if (swizzle)
            addr ^= ((addr >> 7) & (swizzle / 16 - 1)) << 4;
        if (inside)
            memcpy(base_of_shared() + addr, base + at, elem);
        else
            memset(base_of_shared() + addr, 0, elem);
    }
}

static void check_done() {
    unsigned t = threadIdx.x;
    if (!ops[t].empty() || !op_groups[t].empty())
        fail("the thread exited with wgmma operations it never waited for");
    if (t == 0)
        for (auto &b : barriers)
            if (!b.second.queued.empty())
                fail("the block exited with TMA copies nobody waited for");
    unfenced[t].clear();
    fenced[t] = false;
}
}  // namespace td_emu90

// ---- split-K across blocks ----
static inline void td_emu90_fence_gpu() {}
static inline unsigned td_emu90_atomic_add(unsigned *p, unsigned v) {
    unsigned old = *p;
    *p = old + v;
    return old;
}

// ---- wgmma ----
// The kernel's shared memory (its start must be aligned like the 128-byte swizzle's
// 1024-byte pattern, as on the GPU where the code rounds its start up).
static void td_emu90_shared(unsigned char *base) {
    if ((size_t)base % 1024 != 0)
        td_emu::fail("the emulated shared memory is not 1024-byte aligned");
    td_emu90::base = base;
}

static void td_emu90_wgmma_fence() {
    using namespace td_emu90;
    check_warpgroup();
    fenced[threadIdx.x] = true;
}

// d (n/2 floats) += A * B: A 64x16 from `da`, B (n x 16, column c of the product is row c
// of B as stored) from `db`.
static void td_emu90_wgmma(float *d, unsigned long long da, unsigned long long db, int n,
                           int trans_a, int trans_b, int bf16) {
    using namespace td_emu90;
    check_warpgroup();
    unsigned me = threadIdx.x;
    if (!fenced[me])
        fail("wgmma.mma_async without a wgmma.fence since the last wait");
    if (n < 8 || n > 256 || n % 8 != 0)
        fail("wgmma: N is not a multiple of 8 in 8..256");
    Op o = {da, db, n, trans_a, trans_b, bf16, d, 0, 0, 0, 0};
    // The warpgroup's first thread checks for it (the wait checks the others issued the
    // same): the operands must be in shared memory already, landed and made visible to
    // the async proxy by the thread that copied them (then a barrier, which the caller
    // provides).
    if (me % 128 != 0) {
        ops[me].push_back(o);
        return;
    }
    footprint(da, 64, trans_a != 0, &o.a_lo, &o.a_hi);
    footprint(db, (unsigned)n, trans_b != 0, &o.b_lo, &o.b_hi);
    for (unsigned t = 0; t < blockDim.x; ++t) {
        for (const auto &c : td_emu::copies[t]) {
            unsigned lo = shared_offset(c.dst), hi = lo + (unsigned)c.bytes - 1;
            if (overlaps(lo, hi, o.a_lo, o.a_hi - 1) || overlaps(lo, hi, o.b_lo, o.b_hi - 1))
                fail("wgmma reads shared memory that a cp.async still in flight writes");
        }
        for (const auto &u : unfenced[t])
            if (overlaps(u.first, u.second, o.a_lo, o.a_hi - 1) ||
                overlaps(u.first, u.second, o.b_lo, o.b_hi - 1))
                fail("wgmma reads cp.async data without a fence.proxy.async after it landed");
    }
    for (const auto &b : barriers)
        for (const Bulk &c : b.second.queued) {
            unsigned lo = c.dst, hi = c.dst + bulk_bytes(c.map) - 1;
            if (overlaps(lo, hi, o.a_lo, o.a_hi - 1) || overlaps(lo, hi, o.b_lo, o.b_hi - 1))
                fail("wgmma reads shared memory a TMA copy has not landed in (no mbarrier wait)");
        }
    ops[me].push_back(o);
}

static void td_emu90_wgmma_commit() {
    using namespace td_emu90;
    check_warpgroup();
    op_groups[threadIdx.x].push_back(ops[threadIdx.x].size());
}

// Retires committed groups until at most `n` are pending. A warpgroup collective and, in
// the emulator, a block-wide rendezvous (generated code waits uniformly across the block).
static void td_emu90_wgmma_wait(int n) {
    using namespace td_emu90;
    check_warpgroup();
    unsigned me = threadIdx.x, leader = me / 128 * 128;
    __syncthreads();
    // Every thread of the warpgroup queued the same operations.
    if (ops[me].size() != ops[leader].size() || op_groups[me] != op_groups[leader])
        fail("wgmma: the threads of a warpgroup queued different operations");
    for (size_t i = 0; i < ops[me].size(); ++i) {
        const Op &a = ops[me][i], &b = ops[leader][i];
        if (a.da != b.da || a.db != b.db || a.n != b.n || a.trans_a != b.trans_a ||
            a.trans_b != b.trans_b || a.bf16 != b.bf16)
            fail("wgmma: the threads of a warpgroup issued different descriptors");
    }
    __syncthreads();
    std::vector<size_t> &g = op_groups[me];
    size_t count = 0;
    while (g.size() > (size_t)n) {
        count = g.front();
        g.erase(g.begin());
    }
    retire(count);
    for (size_t &e : g)
        e -= count;
    fenced[me] = false;
}

// fence.proxy.async.shared::cta: this thread's landed writes become visible to wgmma.
static void td_emu90_fence_proxy_async() { td_emu90::unfenced[threadIdx.x].clear(); }

// cp.async that refuses to write what a queued wgmma (of any warpgroup) reads.
static void td_emu90_cp_async(void *dst, const void *src, int bytes, int src_bytes) {
    using namespace td_emu90;
    unsigned lo = shared_offset(dst), hi = lo + (unsigned)bytes - 1;
    for (unsigned t = 0; t < blockDim.x; t += 128)
        for (const Op &o : ops[t])
            if (overlaps(lo, hi, o.a_lo, o.a_hi - 1) || overlaps(lo, hi, o.b_lo, o.b_hi - 1))
                fail("cp.async writes shared memory that a queued wgmma reads");
    td_emu_cp_async(dst, src, bytes, src_bytes);
}

// cp.async.wait_group that remembers what landed, for the proxy-fence check.
static void td_emu90_cp_async_wait(int n) {
    using namespace td_emu90;
    std::vector<td_emu::AsyncCopy> before = td_emu::copies[threadIdx.x];
    td_emu_cp_async_wait(n);
    size_t landed = before.size() - td_emu::copies[threadIdx.x].size();
    for (size_t i = 0; i < landed; ++i) {
        unsigned lo = shared_offset(before[i].dst);
        unfenced[threadIdx.x].push_back({lo, lo + (unsigned)before[i].bytes - 1});
    }
}

// A store of generated code into shared memory that wgmma may read (a 2-byte copy): like a
// landed copy, it needs a fence.proxy.async before wgmma reads it.
static void td_emu90_shared_store(unsigned short *dst, unsigned short v) {
    *dst = v;
    unsigned lo = td_emu90::shared_offset(dst);
    td_emu90::unfenced[threadIdx.x].push_back({lo, lo + 1});
}

// td_launch for kernels that use this header: also checks every thread retired its wgmma.
static unsigned long td_launch90(unsigned grid, unsigned block, std::function<void()> kernel) {
    return td_launch(grid, block, [&] {
        kernel();
        td_emu90::check_done();
    });
}

// ---- TMA and mbarriers ----
// The emulator's tensor map: [0] the global address, [1] rank | element bytes << 8 |
// swizzle bytes << 16, [2..6] extents, [7..10] byte strides of dimensions 1.., [11..15] box.
static void td_emu90_encode_tensor_map(td_tensor_map *m, const void *address, int rank,
                                       int elem, int swizzle, const unsigned long long *dims,
                                       const unsigned long long *strides, const unsigned *box) {
    memset(m, 0, sizeof *m);
    m->opaque[0] = (unsigned long long)address;
    m->opaque[1] = (unsigned long long)rank | (unsigned long long)elem << 8 |
                   (unsigned long long)swizzle << 16;
    for (int d = 0; d < rank; ++d) {
        m->opaque[2 + d] = dims[d];
        m->opaque[11 + d] = box[d];
        if (d > 0)
            m->opaque[7 + d - 1] = strides[d - 1];
    }
}

static void td_emu90_mbar_init(void *bar, unsigned count) {
    using namespace td_emu90;
    unsigned at = shared_offset(bar);
    if (at % 8 != 0)
        td_emu::fail("mbarrier.init: the barrier is not 8-byte aligned");
    Barrier b = {count, count, 0, 0, {}};
    barriers[at] = b;
}

static void td_emu90_mbar_expect(void *bar, unsigned bytes) {
    using namespace td_emu90;
    Barrier &b = barrier(bar);
    b.tx += bytes;
    if (b.pending == 0)
        td_emu::fail("mbarrier.arrive: more arrivals than the barrier's count");
    --b.pending;
    complete(b);
}

static void td_emu90_tma_load(void *dst, const td_tensor_map *map, void *bar, const int *coords,
                              int rank) {
    using namespace td_emu90;
    unsigned at = shared_offset(dst);
    if (at % 128 != 0)
        td_emu::fail("cp.async.bulk.tensor: the shared destination is not 128-byte aligned");
    if ((int)(map->opaque[1] & 0xff) != rank)
        td_emu::fail("cp.async.bulk.tensor: the instruction's rank is not the map's");
    Bulk c;
    c.dst = at;
    c.map = *map;
    for (int d = 0; d < 5; ++d)
        c.coords[d] = d < rank ? coords[d] : 0;
    unsigned hi = at + bulk_bytes(c.map) - 1;
    for (unsigned t = 0; t < blockDim.x; t += 128)
        for (const Op &o : ops[t])
            if (overlaps(at, hi, o.a_lo, o.a_hi - 1) || overlaps(at, hi, o.b_lo, o.b_hi - 1))
                td_emu::fail("a TMA copy writes shared memory that a queued wgmma reads");
    barrier(bar).queued.push_back(c);
}

// mbarrier.try_wait.parity in a loop: lands the copies queued on the barrier (they complete
// their bytes), then returns if the phase of that parity has completed; a wait nothing
// else could complete fails.
static void td_emu90_mbar_wait(void *bar, unsigned parity) {
    using namespace td_emu90;
    Barrier &b = barrier(bar);
    std::vector<Bulk> queued;
    queued.swap(b.queued);
    for (const Bulk &c : queued) {
        land(c);
        b.tx -= bulk_bytes(c.map);
        complete(b);
    }
    if ((b.phase & 1u) == (parity & 1u))
        td_emu::fail("mbarrier wait: the phase never completes (missing arrivals or bytes)");
}
