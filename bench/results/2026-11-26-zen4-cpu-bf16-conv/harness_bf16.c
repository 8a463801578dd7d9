#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
typedef void (*kfn)(const void *const *, void *);
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
/* h3 LIB flops N0[b] N1[b] NOUT : td_kernel_prepacked after td_prepack (else td_kernel); a
   trailing 'b' makes that buffer bf16 (values exact in bf16). */
int main(int argc,char**argv){
  void*h=dlopen(argv[1],RTLD_NOW); if(!h){fprintf(stderr,"%s\n",dlerror());return 1;}
  kfn f=(kfn)dlsym(h,"td_kernel_prepacked"); kfn pp=(kfn)dlsym(h,"td_prepack");
  const long *pe=(const long*)dlsym(h,"td_prepack_elems");
  if(getenv("NOPREPACK")) f=0;
  double flops=atof(argv[2]);
  int n=argc-3; void*bufs[8];
  for(int i=0;i<n;i++){long e=atol(argv[3+i]); int b=strchr(argv[3+i],'b')!=0;
    if(b){unsigned short*p=aligned_alloc(64,(e*2+63)/64*64); for(long j=0;j<e;j++){float v=(float)((j*7919)%1000)/1000.0f-0.5f; unsigned u; memcpy(&u,&v,4); p[j]=u>>16;} bufs[i]=p;}
    else {float*p=aligned_alloc(64,(e*4+63)/64*64); for(long j=0;j<e;j++)p[j]=(float)((j*7919)%1000)/1000.0f-0.5f; bufs[i]=p;}}
  const void* args[8]={0}; for(int i=0;i<n-1;i++)args[i]=bufs[i];
  if(f&&pp&&pe){ float*w=aligned_alloc(64,(*pe*4+63)/64*64); pp(args,w); args[n]=w; }
  else f=(kfn)dlsym(h,"td_kernel");
  for(int w=0;w<5;w++) f(args,bufs[n-1]);
  double best=1e9;
  for(int r=0;r<15;r++){ int reps=0; double t0=now(),t; do{f(args,bufs[n-1]);reps++;t=now();}while(t-t0<0.05); double s=(t-t0)/reps; if(s<best)best=s;}
  printf("%.1f GFLOPS\n",flops/best/1e9); return 0;}
