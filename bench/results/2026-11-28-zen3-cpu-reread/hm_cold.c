#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
typedef void (*kfn)(const void *const *, void *);
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
static int cmp(const void*a,const void*b){double x=*(double*)a,y=*(double*)b;return x<y?-1:x>y;}
/* hm flops n0 n1 nout -- LIB... : libraries interleaved call block by call block (prepacked path), per-call percentiles.
   OFFS=o0,o1,...: f32 buffer i starts o_i bytes past a 4096-byte boundary (unset: 64-byte aligned), PACKOFF=o the same for the packed weights (page-aligned when either is set).
   a trailing 'b' on a size makes that buffer bf16 */
int main(int argc,char**argv){
  double flops=atof(argv[1]); int n=0; long sz[8]; int isb[8];
  int a=2; for(;a<argc&&strcmp(argv[a],"--");a++){sz[n]=atol(argv[a]); isb[n]=argv[a][strlen(argv[a])-1]=='b'; n++;} a++;
  int L=argc-a; void*bufs[8]; long offs[8]={0}; int placed=getenv("OFFS")!=NULL; if(placed){char*s=strdup(getenv("OFFS")); int i=0; for(char*t=strtok(s,",");t&&i<8;t=strtok(NULL,","))offs[i++]=atol(t);}
  for(int i=0;i<n;i++){long e=sz[i]; if(isb[i]){unsigned short*b=aligned_alloc(64,(e*2+63)/64*64); for(long j=0;j<e;j++){float v=(float)((j*7919)%1000)/1000.0f-0.5f; unsigned u; memcpy(&u,&v,4); b[j]=u>>16;} bufs[i]=b;} else {float*b=placed?(float*)((char*)aligned_alloc(4096,(e*4+4095)/4096*4096+4096)+offs[i]):aligned_alloc(64,(e*4+63)/64*64); for(long j=0;j<e;j++)b[j]=(float)((j*7919)%1000)/1000.0f-0.5f; bufs[i]=b;}}
  kfn f[16]; const void* args[16][8];
  for(int l=0;l<L;l++){ void*h=dlopen(argv[a+l],RTLD_NOW); if(!h){fprintf(stderr,"%s\n",dlerror());return 1;}
    f[l]=(kfn)dlsym(h,"td_kernel_prepacked"); kfn pp=(kfn)dlsym(h,"td_prepack"); const long *pe=(const long*)dlsym(h,"td_prepack_elems");
    for(int i=0;i<n-1;i++)args[l][i]=bufs[i];
    if(getenv("NOPP")) f[l]=(kfn)dlsym(h,"td_kernel"); else if(f[l]&&pp&&pe){float*w=(placed||getenv("PACKOFF"))?(float*)((char*)aligned_alloc(4096,(*pe*4+4095)/4096*4096+4096)+(getenv("PACKOFF")?atol(getenv("PACKOFF")):0)):aligned_alloc(64,(*pe*4+63)/64*64+64); pp(args[l],w); args[l][n]=w;} else f[l]=(kfn)dlsym(h,"td_kernel"); }
  int R=atoi(getenv("ROUNDS")?getenv("ROUNDS"):"40"), B=atoi(getenv("BLOCK")?getenv("BLOCK"):"10");
  double*t=malloc(sizeof(double)*L*R*B);
  for(int l=0;l<L;l++) for(int i=0;i<5;i++) f[l](args[l],bufs[n-1]);
  for(int r=0;r<R;r++) for(int l=0;l<L;l++){ for(int i=0;i<B;i++){double s=now(); f[l](args[l],bufs[n-1]); t[(l*R+r)*B+i]=now()-s;}}
  for(int l=0;l<L;l++){ double*x=t+l*R*B; int N=R*B; qsort(x,N,sizeof(double),cmp);
    printf("%-28s GFLOPS p10 %6.1f p25 %6.1f p50 %6.1f p75 %6.1f p90 %6.1f\n",argv[a+l],flops/x[N/10]/1e9,flops/x[N/4]/1e9,flops/x[N/2]/1e9,flops/x[N*3/4]/1e9,flops/x[N*9/10]/1e9);}
}
