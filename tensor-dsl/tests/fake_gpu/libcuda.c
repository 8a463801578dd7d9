/* A fake CUDA driver (libcuda.so) for tests/fake_gpu.rs: one "Fake H100" (sm_90) whose memory
   is host memory and whose clock is virtual, with just enough of the driver API that the
   tensor-dsl runtime, its CUDA-graph timer and the measuring child run on it.

   Kernels run by name, whatever the module holds:
     td_copy   copies grid.x * block.x floats from its first pointer to its second; 5 us
     td_fault  an illegal address: every later call returns CUDA_ERROR_ILLEGAL_ADDRESS; 1 us
     td_spin   waits its one argument's nanoseconds
     others    1 us, no effect
   Events read the virtual clock, so a launch of td_copy times at exactly 5 us.

   Environment, read at each call: FAKE_REFUSE_CUBIN=1 refuses CUBIN images
   (CUDA_ERROR_NO_BINARY_FOR_GPU), FAKE_NO_CAPTURE=1 refuses stream capture. Counters for the
   test: FAKE_LOG=path appends one line per module load ("cubin" or "ptx"). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;

enum {
    OK = 0,
    INVALID_VALUE = 1,
    INVALID_IMAGE = 200,
    NO_BINARY_FOR_GPU = 209,
    NOT_FOUND = 500,
    ILLEGAL_ADDRESS = 700,
    CAPTURE_UNSUPPORTED = 900
};

static int sticky = 0;
static double now_ms = 0.0; /* the virtual GPU clock */

static int env_on(const char *name) {
    const char *v = getenv(name);
    return v && v[0] == '1';
}

#define CHECK_STICKY() \
    do {               \
        if (sticky) return sticky; \
    } while (0)

/* ---- device and context ---- */
CUresult cuInit(unsigned flags) { (void)flags; return OK; }
CUresult cuDriverGetVersion(int *v) { *v = 13000; return OK; }
CUresult cuDeviceGetCount(int *n) { *n = 1; return OK; }
CUresult cuDeviceGet(CUdevice *d, int ordinal) { *d = ordinal; return ordinal == 0 ? OK : INVALID_VALUE; }
CUresult cuDeviceGetName(char *name, int len, CUdevice d) { (void)d; snprintf(name, len, "Fake H100"); return OK; }
CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice d) { (void)d; *bytes = (size_t)1 << 34; return OK; }
CUresult cuDeviceGetAttribute(int *v, int attr, CUdevice d) {
    (void)d;
    switch (attr) {
    case 1: *v = 1024; break;                        /* threads per block */
    case 2: case 3: *v = 1024; break;                /* block dims x, y */
    case 4: *v = 64; break;                          /* block dim z */
    case 5: *v = 2147483647; break;                  /* grid x */
    case 6: case 7: *v = 65535; break;               /* grid y, z */
    case 8: *v = 49152; break;                       /* shared per block */
    case 10: *v = 32; break;                         /* warp */
    case 12: *v = 65536; break;                      /* registers per block */
    case 16: *v = 132; break;                        /* SMs */
    case 38: *v = 50 << 20; break;                   /* L2 */
    case 39: *v = 2048; break;                       /* threads per SM */
    case 75: *v = 9; break;                          /* compute capability major */
    case 76: *v = 0; break;                          /* minor */
    case 81: *v = 233472; break;                     /* shared per SM */
    case 82: *v = 65536; break;                      /* registers per SM */
    case 97: *v = 232448; break;                     /* shared per block, opt-in */
    case 115: *v = 0; break;                         /* no memory pools: synchronous allocation */
    default: *v = 0; break;
    }
    return OK;
}
static int the_context;
CUresult cuDevicePrimaryCtxRetain(void **ctx, CUdevice d) { (void)d; *ctx = &the_context; return OK; }
CUresult cuDevicePrimaryCtxRelease_v2(CUdevice d) { (void)d; return OK; }
static void *current;
CUresult cuCtxSetCurrent(void *ctx) { current = ctx; return OK; }
CUresult cuCtxGetCurrent(void **ctx) { *ctx = current; return OK; }
CUresult cuCtxSynchronize(void) { CHECK_STICKY(); return OK; }
/* NVRTC itself opens libcuda.so.1 and asks for this: no private tables here. */
CUresult cuGetExportTable(const void **table, const void *id) { (void)id; *table = NULL; return 801; }
CUresult cuGetErrorString(CUresult e, const char **s) {
    *s = e == ILLEGAL_ADDRESS ? "an illegal memory access was encountered (fake)" : "fake error";
    return OK;
}
CUresult cuGetErrorName(CUresult e, const char **s) {
    switch (e) {
    case ILLEGAL_ADDRESS: *s = "CUDA_ERROR_ILLEGAL_ADDRESS"; break;
    case NO_BINARY_FOR_GPU: *s = "CUDA_ERROR_NO_BINARY_FOR_GPU"; break;
    case NOT_FOUND: *s = "CUDA_ERROR_NOT_FOUND"; break;
    case CAPTURE_UNSUPPORTED: *s = "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED"; break;
    default: *s = "CUDA_ERROR_FAKE"; break;
    }
    return OK;
}

/* ---- memory: host memory ---- */
CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t n) {
    CHECK_STICKY();
    void *m = calloc(1, n ? n : 1);
    if (!m) return 2;
    *p = (CUdeviceptr)(uintptr_t)m;
    return OK;
}
CUresult cuMemFree_v2(CUdeviceptr p) { free((void *)(uintptr_t)p); return OK; }
CUresult cuMemAllocAsync(CUdeviceptr *p, size_t n, void *s) { (void)s; return cuMemAlloc_v2(p, n); }
CUresult cuMemFreeAsync(CUdeviceptr p, void *s) { (void)s; return cuMemFree_v2(p); }
CUresult cuMemsetD8Async(CUdeviceptr p, unsigned char v, size_t n, void *s) {
    (void)s; CHECK_STICKY(); memset((void *)(uintptr_t)p, v, n); return OK;
}
CUresult cuMemsetD8_v2(CUdeviceptr p, unsigned char v, size_t n) { return cuMemsetD8Async(p, v, n, 0); }
CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr d, const void *h, size_t n, void *s) {
    (void)s; CHECK_STICKY(); memcpy((void *)(uintptr_t)d, h, n); return OK;
}
CUresult cuMemcpyHtoD_v2(CUdeviceptr d, const void *h, size_t n) { return cuMemcpyHtoDAsync_v2(d, h, n, 0); }
CUresult cuMemcpyDtoHAsync_v2(void *h, CUdeviceptr d, size_t n, void *s) {
    (void)s; CHECK_STICKY(); memcpy(h, (void *)(uintptr_t)d, n); return OK;
}
CUresult cuMemcpyDtoH_v2(void *h, CUdeviceptr d, size_t n) { return cuMemcpyDtoHAsync_v2(h, d, n, 0); }
CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr d, CUdeviceptr s_, size_t n, void *s) {
    (void)s; CHECK_STICKY(); memcpy((void *)(uintptr_t)d, (void *)(uintptr_t)s_, n); return OK;
}
CUresult cuMemcpyDtoD_v2(CUdeviceptr d, CUdeviceptr s, size_t n) { return cuMemcpyDtoDAsync_v2(d, s, n, 0); }

/* ---- modules and functions ---- */
typedef struct { char *image; size_t len; } Module;
typedef struct { char name[128]; } Function;

static void note(const char *what) {
    const char *path = getenv("FAKE_LOG");
    if (!path) return;
    FILE *f = fopen(path, "a");
    if (f) { fprintf(f, "%s\n", what); fclose(f); }
}

CUresult cuModuleLoadData(void **m, const void *image) {
    CHECK_STICKY();
    const char *b = image;
    int cubin = b[0] == 0x7f && b[1] == 'E' && b[2] == 'L' && b[3] == 'F';
    size_t len;
    if (cubin) {
        /* ELF64: the section headers end the file. */
        uint64_t shoff; uint16_t entsize, count;
        memcpy(&shoff, b + 0x28, 8); memcpy(&entsize, b + 0x3a, 2); memcpy(&count, b + 0x3c, 2);
        len = shoff + (size_t)entsize * count;
        if (env_on("FAKE_REFUSE_CUBIN")) return NO_BINARY_FOR_GPU;
    } else {
        len = strlen(b);
        if (!strstr(b, ".entry")) return INVALID_IMAGE;
    }
    note(cubin ? "cubin" : "ptx");
    Module *mod = malloc(sizeof *mod);
    mod->image = malloc(len);
    memcpy(mod->image, b, len);
    mod->len = len;
    *m = mod;
    return OK;
}
CUresult cuModuleUnload(void *m) { Module *mod = m; free(mod->image); free(mod); return OK; }
CUresult cuModuleGetFunction(void **f, void *m, const char *name) {
    CHECK_STICKY();
    Module *mod = m;
    size_t n = strlen(name), i;
    for (i = 0; i + n <= mod->len; ++i)
        if (memcmp(mod->image + i, name, n) == 0) break;
    if (i + n > mod->len || n >= sizeof(((Function *)0)->name)) return NOT_FOUND;
    Function *fn = calloc(1, sizeof *fn);
    memcpy(fn->name, name, n);
    *f = fn;
    return OK;
}
CUresult cuFuncGetAttribute(int *v, int attr, void *f) {
    (void)f;
    switch (attr) {
    case 0: *v = 1024; break; /* max threads per block */
    case 4: *v = 32; break;   /* registers */
    default: *v = 0; break;
    }
    return OK;
}
CUresult cuFuncSetAttribute(void *f, int attr, int v) { (void)f; (void)attr; (void)v; return OK; }

/* ---- streams, capture, graphs ---- */
typedef struct { Function *f; unsigned grid, block; uint64_t args[2]; } Node;
typedef struct { Node *nodes; int count, cap; } Graph;
typedef struct { int capturing; Graph *graph; } Stream;

CUresult cuStreamCreate(void **s, unsigned flags) { (void)flags; *s = calloc(1, sizeof(Stream)); return OK; }
CUresult cuStreamDestroy_v2(void *s) { free(s); return OK; }
CUresult cuStreamSynchronize(void *s) { (void)s; CHECK_STICKY(); return OK; }
CUresult cuStreamWaitEvent(void *s, void *e, unsigned flags) { (void)s; (void)e; (void)flags; CHECK_STICKY(); return OK; }
CUresult cuStreamBeginCapture_v2(void *s, int mode) {
    (void)mode; CHECK_STICKY();
    if (env_on("FAKE_NO_CAPTURE")) return CAPTURE_UNSUPPORTED;
    Stream *st = s;
    st->capturing = 1;
    st->graph = calloc(1, sizeof(Graph));
    return OK;
}
CUresult cuStreamEndCapture(void *s, void **g) {
    Stream *st = s;
    if (!st->capturing) return INVALID_VALUE;
    st->capturing = 0;
    *g = st->graph;
    st->graph = NULL;
    return OK;
}
CUresult cuStreamIsCapturing(void *s, int *status) { *status = ((Stream *)s)->capturing; return OK; }

static void run(Function *f, unsigned grid, unsigned block, const uint64_t *args) {
    if (strcmp(f->name, "td_copy") == 0) {
        memcpy((void *)(uintptr_t)args[1], (void *)(uintptr_t)args[0], (size_t)grid * block * sizeof(float));
        now_ms += 5e-3;
    } else if (strcmp(f->name, "td_fault") == 0) {
        sticky = ILLEGAL_ADDRESS;
        now_ms += 1e-3;
    } else if (strcmp(f->name, "td_spin") == 0) {
        now_ms += (double)args[0] * 1e-6;
    } else {
        now_ms += 1e-3;
    }
}

CUresult cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                        unsigned bz, unsigned shared, void *s, void **params, void **extra) {
    (void)gy; (void)gz; (void)by; (void)bz; (void)shared; (void)extra;
    CHECK_STICKY();
    Function *fn = f;
    uint64_t args[2] = {0, 0};
    int nargs = strcmp(fn->name, "td_spin") == 0 ? 1 : (strncmp(fn->name, "td_", 3) == 0 ? 2 : 0);
    for (int i = 0; i < nargs; ++i) memcpy(&args[i], params[i], 8);
    Stream *st = s;
    if (st && st->capturing) {
        Graph *g = st->graph;
        if (g->count == g->cap) {
            g->cap = g->cap ? 2 * g->cap : 16;
            g->nodes = realloc(g->nodes, g->cap * sizeof(Node));
        }
        Node n = {fn, gx, bx, {args[0], args[1]}};
        g->nodes[g->count++] = n;
        return OK;
    }
    run(fn, gx, bx, args);
    return OK;
}
CUresult cuGraphInstantiateWithFlags(void **exec, void *g, unsigned long long flags) {
    (void)flags; CHECK_STICKY();
    Graph *src = g, *copy = calloc(1, sizeof(Graph));
    copy->count = copy->cap = src->count;
    copy->nodes = malloc((src->count ? src->count : 1) * sizeof(Node));
    memcpy(copy->nodes, src->nodes, src->count * sizeof(Node));
    *exec = copy;
    return OK;
}
CUresult cuGraphUpload(void *exec, void *s) { (void)exec; (void)s; CHECK_STICKY(); return OK; }
CUresult cuGraphLaunch(void *exec, void *s) {
    (void)s; CHECK_STICKY();
    Graph *g = exec;
    for (int i = 0; i < g->count; ++i) run(g->nodes[i].f, g->nodes[i].grid, g->nodes[i].block, g->nodes[i].args);
    return OK;
}
static void graph_free(Graph *g) { if (g) { free(g->nodes); free(g); } }
CUresult cuGraphDestroy(void *g) { graph_free(g); return OK; }
CUresult cuGraphExecDestroy(void *e) { graph_free(e); return OK; }

/* ---- events on the virtual clock ---- */
CUresult cuEventCreate(void **e, unsigned flags) { (void)flags; *e = calloc(1, sizeof(double)); return OK; }
CUresult cuEventDestroy_v2(void *e) { free(e); return OK; }
CUresult cuEventRecord(void *e, void *s) {
    CHECK_STICKY();
    if (s && ((Stream *)s)->capturing) return CAPTURE_UNSUPPORTED;
    *(double *)e = now_ms;
    return OK;
}
CUresult cuEventSynchronize(void *e) { (void)e; CHECK_STICKY(); return OK; }
CUresult cuEventQuery(void *e) { (void)e; CHECK_STICKY(); return OK; }
CUresult cuEventElapsedTime_v2(float *ms, void *start, void *end) {
    CHECK_STICKY();
    *ms = (float)(*(double *)end - *(double *)start);
    return OK;
}
CUresult cuEventElapsedTime(float *ms, void *start, void *end) { return cuEventElapsedTime_v2(ms, start, end); }
