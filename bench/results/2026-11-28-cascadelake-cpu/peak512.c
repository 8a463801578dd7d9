/* hm pseudo-kernel: PFLOPS env flops per call of register-only 16-lane FMAs (12 chains) split over OMP threads */
#include <stdlib.h>
extern int omp_get_num_threads(void);
static long iters;
__attribute__((constructor)) static void init(void){ iters=(long)(atof(getenv("PFLOPS"))/(12*32)); }
void td_kernel(const void *const *args, void *out){
  #pragma omp parallel
  { long n=iters/omp_get_num_threads();
    __asm__ volatile(
      "vxorps %%zmm0,%%zmm0,%%zmm0\n vmovaps %%zmm0,%%zmm1\n vmovaps %%zmm0,%%zmm2\n vmovaps %%zmm0,%%zmm3\n vmovaps %%zmm0,%%zmm4\n vmovaps %%zmm0,%%zmm5\n"
      "vmovaps %%zmm0,%%zmm6\n vmovaps %%zmm0,%%zmm7\n vmovaps %%zmm0,%%zmm8\n vmovaps %%zmm0,%%zmm9\n vmovaps %%zmm0,%%zmm10\n vmovaps %%zmm0,%%zmm11\n vmovaps %%zmm0,%%zmm12\n vmovaps %%zmm0,%%zmm13\n"
      "1:\n"
      "vfmadd231ps %%zmm12,%%zmm13,%%zmm0\n vfmadd231ps %%zmm12,%%zmm13,%%zmm1\n vfmadd231ps %%zmm12,%%zmm13,%%zmm2\n vfmadd231ps %%zmm12,%%zmm13,%%zmm3\n"
      "vfmadd231ps %%zmm12,%%zmm13,%%zmm4\n vfmadd231ps %%zmm12,%%zmm13,%%zmm5\n vfmadd231ps %%zmm12,%%zmm13,%%zmm6\n vfmadd231ps %%zmm12,%%zmm13,%%zmm7\n"
      "vfmadd231ps %%zmm12,%%zmm13,%%zmm8\n vfmadd231ps %%zmm12,%%zmm13,%%zmm9\n vfmadd231ps %%zmm12,%%zmm13,%%zmm10\n vfmadd231ps %%zmm12,%%zmm13,%%zmm11\n"
      "dec %0\n jnz 1b\n vzeroupper\n"
      : "+r"(n) : : "xmm0","xmm1","xmm2","xmm3","xmm4","xmm5","xmm6","xmm7","xmm8","xmm9","xmm10","xmm11","xmm12","xmm13","cc");
  }
}
