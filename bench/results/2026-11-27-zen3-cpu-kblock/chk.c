#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <math.h>
typedef void (*kfn)(const void *const *, void *);
/* chk n0 n1 nout A.so B.so : td_kernel of both (no prepack), max abs diff */
int main(int argc,char**argv){ long n0=atol(argv[1]),n1=atol(argv[2]),no=atol(argv[3]);
 float*a=malloc(n0*4),*b=malloc(n1*4),*o1=calloc(no,4),*o2=calloc(no,4);
 for(long i=0;i<n0;i++)a[i]=(float)((i*7919)%1000)/1000.0f-0.5f; for(long i=0;i<n1;i++)b[i]=(float)((i*104729)%1000)/1000.0f-0.5f;
 const void*args[3]={a,b,0}; float*os[2]={o1,o2};
 for(int l=0;l<2;l++){void*h=dlopen(argv[4+l],RTLD_NOW); if(!h){fprintf(stderr,"%s\n",dlerror());return 1;} kfn f=(kfn)dlsym(h,"td_kernel"); for(long i=0;i<no;i++)os[l][i]=12345.f; f(args,os[l]); f(args,os[l]);}
 double m=0; for(long i=0;i<no;i++){double d=fabs(o1[i]-o2[i]); if(d>m)m=d;} printf("max abs diff %g\n",m); return m>1e-3; }
