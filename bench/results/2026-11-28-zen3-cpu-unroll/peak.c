/* hm pseudo-kernel: PFLOPS env flops per call of register-only 8-lane FMAs (12 chains) split over OMP threads */
#include <stdlib.h>
extern int omp_get_num_threads(void);
static long iters;
__attribute__((constructor)) static void init(void){ iters=(long)(atof(getenv("PFLOPS"))/(12*16)); }
void td_kernel(const void *const *args, void *out){
  #pragma omp parallel
  { long n=iters/omp_get_num_threads();
    __asm__ volatile(
      "vxorps %%ymm0,%%ymm0,%%ymm0\n vmovaps %%ymm0,%%ymm1\n vmovaps %%ymm0,%%ymm2\n vmovaps %%ymm0,%%ymm3\n vmovaps %%ymm0,%%ymm4\n vmovaps %%ymm0,%%ymm5\n"
      "vmovaps %%ymm0,%%ymm6\n vmovaps %%ymm0,%%ymm7\n vmovaps %%ymm0,%%ymm8\n vmovaps %%ymm0,%%ymm9\n vmovaps %%ymm0,%%ymm10\n vmovaps %%ymm0,%%ymm11\n vmovaps %%ymm0,%%ymm12\n vmovaps %%ymm0,%%ymm13\n"
      "1:\n"
      "vfmadd231ps %%ymm12,%%ymm13,%%ymm0\n vfmadd231ps %%ymm12,%%ymm13,%%ymm1\n vfmadd231ps %%ymm12,%%ymm13,%%ymm2\n vfmadd231ps %%ymm12,%%ymm13,%%ymm3\n"
      "vfmadd231ps %%ymm12,%%ymm13,%%ymm4\n vfmadd231ps %%ymm12,%%ymm13,%%ymm5\n vfmadd231ps %%ymm12,%%ymm13,%%ymm6\n vfmadd231ps %%ymm12,%%ymm13,%%ymm7\n"
      "vfmadd231ps %%ymm12,%%ymm13,%%ymm8\n vfmadd231ps %%ymm12,%%ymm13,%%ymm9\n vfmadd231ps %%ymm12,%%ymm13,%%ymm10\n vfmadd231ps %%ymm12,%%ymm13,%%ymm11\n"
      "dec %0\n jnz 1b\n vzeroupper\n"
      : "+r"(n) : : "xmm0","xmm1","xmm2","xmm3","xmm4","xmm5","xmm6","xmm7","xmm8","xmm9","xmm10","xmm11","xmm12","xmm13","cc");
  }
}
