# asm tile variants with K=256 loop; acc 12 regs ymm0-11; loads: nl vectors (ymm12..), bcast reg ymm15
import itertools
def body(nb, nl, unroll, pipelined, wstride, xstride):
    # nb broadcasts (from %2, 4B apart, stride wstride per k), nl vector loads (from %1, 32B apart, stride xstride per k)
    L=[]
    for u in range(unroll):
        if not pipelined:
            L += ["vmovups {}(%1),%%ymm{}".format(u*xstride+32*i, 12+i) for i in range(nl)]
            L += ["vbroadcastss {}(%2),%%ymm15".format(u*wstride)]
        for j in range(nb):
            for i in range(nl):
                L.append("vfmadd231ps %%ymm{},%%ymm15,%%ymm{}".format(12+i, j*nl+i))
                if pipelined and j==nb-1:
                    L.append("vmovups {}(%1),%%ymm{}".format((u+1)*xstride+32*i, 12+i))
            if j<nb-1: L.append("vbroadcastss {}(%2),%%ymm15".format(u*wstride+4*(j+1)))
        if pipelined: L.append("vbroadcastss {}(%2),%%ymm15".format((u+1)*wstride))
    return L
def src(nb,nl,unroll,pipelined):
    ws=4*nb; xs=32*nl
    b=body(nb,nl,unroll,pipelined,ws,xs)
    pre = (["vmovups {}(%1),%%ymm{}".format(32*i,12+i) for i in range(nl)] + ["vbroadcastss (%2),%%ymm15"]) if pipelined else []
    zero="vxorps %%ymm0,%%ymm0,%%ymm0\\n"+"".join("vmovaps %%ymm0,%%ymm{}\\n".format(i) for i in range(1,12))
    asm = zero + "\\n".join(pre) + "\\n1:\\n" + "\\n".join(b) + "\\nadd ${},%1\\n add ${},%2\\n sub ${},%0\\n jnz 1b\\n".format(xs*unroll, ws*unroll, unroll)
    asm += "".join("vmovaps %%ymm{},{}(%3)\\n".format(i,32*i) for i in range(12)) + "vzeroupper\\n"
    return r'''
#include <stdlib.h>
extern int omp_get_num_threads(void);
static long tiles;
__attribute__((constructor)) static void init(void){ tiles=(long)(atof(getenv("PFLOPS"))/(12*16*256)); }
void td_kernel(const void *const *args, void *out){
  #pragma omp parallel
  { long nt=tiles/omp_get_num_threads();
    float *w=aligned_alloc(64,4*260*16), *x=aligned_alloc(64,4*260*32);
    for(int i=0;i<260*16;i++)w[i]=1e-3f*(i%7)-0.003f; for(int i=0;i<260*32;i++)x[i]=1e-3f*(i%5)-0.002f;
    float acc[96] __attribute__((aligned(64)));
    for(long t=0;t<nt;t++){
      long k=256; const float *wp=w, *xp=x;
      __asm__ volatile("ASM" : "+r"(k), "+r"(xp), "+r"(wp) : "r"(acc) : "cc","memory","xmm0","xmm1","xmm2","xmm3","xmm4","xmm5","xmm6","xmm7","xmm8","xmm9","xmm10","xmm11","xmm12","xmm13","xmm14","xmm15");
    }
    free(w); free(x);
  }
}
'''.replace("ASM", asm)
names=[]
for nb,nl in [(6,2),(4,3)]:
    for unroll in [1,8]:
        for pip in [False,True]:
            n="uk4_%dx%d_u%d_%s"%(nb,nl,unroll,"p" if pip else "n")
            open(n+".c","w").write(src(nb,nl,unroll,pip)); names.append(n)
print(" ".join(names))
