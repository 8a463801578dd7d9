/* Side by side, one process: tensor-dsl's generated C (`td_kernel` of shared objects written
 * by `tensor-dsl emit`) against oneDNN's matmul in f32 and in bf16 (bf16 operands, f32
 * output, as ours), M x K . K x N, row-major. Rounds alternate the contenders; each round
 * keeps the best of repeated calls over >= 50 ms; the median and best round are printed.
 *
 *   compare M N K OURS_F32.so OURS_BF16.so [EXTRA_BF16.so ...]
 *
 * First it measures the machine's peak on all its OpenMP threads: independent 512-bit FMAs
 * (f32) and, with AVX-512 BF16, independent `vdpbf16ps` (bf16 pairs into f32, 4 flops a
 * lane).
 *
 * Build: cc -O2 -march=native -fopenmp compare.c -o compare -ldnnl -ldl -lm
 * (Debian libdnnl-dev). */
#include <dlfcn.h>
#include <dnnl.h>
#include <immintrin.h>
#include <omp.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef void (*kfn)(const void *const *, void *);
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
#define CHECK(x) do { dnnl_status_t s_ = (x); if (s_ != dnnl_success) { fprintf(stderr, "%s: %d\n", #x, (int)s_); exit(1); } } while (0)

static unsigned short to_bf16(float f) { unsigned int u; memcpy(&u, &f, 4); return (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16); }

typedef struct { const char *name; int kind; kfn f; dnnl_primitive_t p; dnnl_memory_t a, b, c; const void *args[3]; void *out; double rounds[64]; } contender;

static dnnl_engine_t eng; static dnnl_stream_t strm;

static void onednn(contender *c, long M, long N, long K, dnnl_data_type_t dt, void *a, void *b, float *out) {
    dnnl_memory_desc_t amd, bmd, cmd; dnnl_dims_t ad = {M, K}, bd = {K, N}, cd = {M, N};
    CHECK(dnnl_memory_desc_init_by_tag(&amd, 2, ad, dt, dnnl_ab));
    CHECK(dnnl_memory_desc_init_by_tag(&bmd, 2, bd, dt, dnnl_ab));
    CHECK(dnnl_memory_desc_init_by_tag(&cmd, 2, cd, dnnl_f32, dnnl_ab));
    dnnl_matmul_desc_t d; CHECK(dnnl_matmul_desc_init(&d, &amd, &bmd, NULL, &cmd));
    dnnl_primitive_desc_t pd; CHECK(dnnl_primitive_desc_create(&pd, &d, NULL, eng, NULL));
    const char *impl = NULL; dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl);
    fprintf(stderr, "oneDNN %s matmul: %s\n", dt == dnnl_bf16 ? "bf16" : "f32", impl ? impl : "?");
    CHECK(dnnl_primitive_create(&c->p, pd));
    CHECK(dnnl_memory_create(&c->a, &amd, eng, a));
    CHECK(dnnl_memory_create(&c->b, &bmd, eng, b));
    CHECK(dnnl_memory_create(&c->c, &cmd, eng, out));
    dnnl_primitive_desc_destroy(pd);
}

static void call(contender *c) {
    if (c->kind == 0) { c->f(c->args, c->out); return; }
    dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, c->a}, {DNNL_ARG_WEIGHTS, c->b}, {DNNL_ARG_DST, c->c}};
    CHECK(dnnl_primitive_execute(c->p, strm, 3, args)); CHECK(dnnl_stream_wait(strm));
}

#define ACC 20
/* GFLOPS of independent FMAs (dot = 0) or bf16 pair dot products (dot = 1), all threads. */
static double peak(int dot) {
    long N = 20000000 / ACC * 4; float s = 0; double t = omp_get_wtime();
#pragma omp parallel reduction(+ : s)
    {
        __m512 c[ACC]; for (int i = 0; i < ACC; i++) c[i] = _mm512_set1_ps(i * 0.001f);
        __m512 a = _mm512_set1_ps(1.0001f + omp_get_thread_num()), b = _mm512_set1_ps(0.9999f);
        if (!dot) {
            for (long n = 0; n < N; n++) {
#pragma GCC unroll 32
                for (int i = 0; i < ACC; i++) c[i] = _mm512_fmadd_ps(a, b, c[i]);
            }
        } else {
#if defined(__AVX512BF16__)
            __m512bh ah = (__m512bh)_mm512_set1_epi32(0x3f803f80), bh = (__m512bh)_mm512_set1_epi32(0x3f803f81);
            for (long n = 0; n < N; n++) {
#pragma GCC unroll 32
                for (int i = 0; i < ACC; i++) c[i] = _mm512_dpbf16_ps(c[i], ah, bh);
            }
#endif
        }
        for (int i = 0; i < ACC; i++) s += c[i][0];
    }
    t = omp_get_wtime() - t;
    if (s == 12345.f) puts("");
    int threads = omp_get_max_threads();
    return (dot ? 64.0 : 32.0) * N * ACC * threads / t / 1e9;
}

static int cmp(const void *x, const void *y) { double a = *(const double *)x, b = *(const double *)y; return (a > b) - (a < b); }

int main(int argc, char **argv) {
    if (argc < 6) { fprintf(stderr, "compare M N K OURS_F32.so OURS_BF16.so [MORE_BF16.so ...]\n"); return 2; }
    long M = atol(argv[1]), N = atol(argv[2]), K = atol(argv[3]);
    double flops = 2.0 * M * N * K;
    float *af = aligned_alloc(64, M * K * 4), *bf = aligned_alloc(64, K * N * 4);
    unsigned short *ah = aligned_alloc(64, M * K * 2 + 64), *bh = aligned_alloc(64, K * N * 2 + 64);
    srand(1);
    for (long i = 0; i < M * K; i++) { af[i] = (float)rand() / RAND_MAX - 0.5f; ah[i] = to_bf16(af[i]); unsigned int u = (unsigned int)ah[i] << 16; memcpy(&af[i], &u, 4); }
    for (long i = 0; i < K * N; i++) { bf[i] = (float)rand() / RAND_MAX - 0.5f; bh[i] = to_bf16(bf[i]); unsigned int u = (unsigned int)bh[i] << 16; memcpy(&bf[i], &u, 4); }
    CHECK(dnnl_engine_create(&eng, dnnl_cpu, 0)); CHECK(dnnl_stream_create(&strm, eng, dnnl_stream_default_flags));
    int n = argc - 2; contender *cs = calloc(n, sizeof(contender));
    float **outs = calloc(n, sizeof(float *));
    for (int i = 0; i < n; i++) outs[i] = aligned_alloc(64, M * N * 4);
    for (int i = 0; i < argc - 4; i++) {
        void *h = dlopen(argv[4 + i], RTLD_NOW); if (!h) { fprintf(stderr, "%s\n", dlerror()); return 1; }
        cs[i].f = (kfn)dlsym(h, "td_kernel"); cs[i].name = argv[4 + i]; cs[i].out = outs[i];
        int bf16 = i >= 1; cs[i].args[0] = bf16 ? (void *)ah : af; cs[i].args[1] = bf16 ? (void *)bh : bf;
    }
    cs[n - 2].kind = 1; cs[n - 2].name = "oneDNN f32"; onednn(&cs[n - 2], M, N, K, dnnl_f32, af, bf, outs[n - 2]);
    cs[n - 1].kind = 1; cs[n - 1].name = "oneDNN bf16"; onednn(&cs[n - 1], M, N, K, dnnl_bf16, ah, bh, outs[n - 1]);
    /* Every contender computes the same product (the operands are exact in bf16). */
    for (int i = 0; i < n; i++) call(&cs[i]);
    for (int i = 0; i < n; i++) {
        double worst = 0; for (long e = 0; e < M * N; e++) { double d = fabs(outs[i][e] - outs[n - 2][e]) / (1.0 + fabs(outs[n - 2][e])); if (d > worst) worst = d; }
        fprintf(stderr, "%-40s max relative difference to oneDNN f32: %.2e\n", cs[i].name, worst);
    }
    double pf = 0, pb = 0;
    for (int r = 0; r < 3; r++) { double x = peak(0), y = peak(1); if (x > pf) pf = x; if (y > pb) pb = y; }
    printf("measured peak, %d threads: f32 FMA %.1f GFLOPS, bf16 dot %.1f GFLOPS%s\n", omp_get_max_threads(), pf, pb,
#if defined(__AVX512BF16__)
           ""
#else
           " (no AVX-512 BF16: not measured)"
#endif
    );
    int R = 7;
    for (int r = 0; r < R; r++)
        for (int i = 0; i < n; i++) {
            for (int w = 0; w < 3; w++) call(&cs[i]);
            double best = 1e9; double t0 = now();
            do { double s = now(); call(&cs[i]); double e = now() - s; if (e < best) best = e; } while (now() - t0 < 0.05);
            cs[i].rounds[r] = flops / best / 1e9;
        }
    printf("%ldx%ldx%ld (M x N x K), GFLOPS: median of %d rounds (best round)\n", M, N, K, R);
    for (int i = 0; i < n; i++) {
        double s[64]; memcpy(s, cs[i].rounds, sizeof(double) * R); qsort(s, R, sizeof(double), cmp);
        printf("  %-44s %7.1f (%7.1f)\n", cs[i].name, s[R / 2], s[R - 1]);
    }
    return 0;
}
