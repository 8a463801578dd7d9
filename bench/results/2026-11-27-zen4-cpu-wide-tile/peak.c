typedef float v16 __attribute__((vector_size(64)));
int omp_get_num_threads(void); int omp_get_thread_num(void);
static void run(long iters, float *out){
  v16 a[24]; v16 x = (v16){0.f} + 1.0001f, y = (v16){0.f} + 0.9999f;
  for(int i=0;i<24;i++) a[i]=(v16){0.f}+(float)i;
  for(long k=0;k<iters;k++){
    #pragma GCC unroll 24
    for(int i=0;i<24;i++){ a[i]=a[i]*x+y; }
  }
  v16 s=(v16){0.f}; for(int i=0;i<24;i++) s+=a[i]; out[0]=s[0];
}
void td_kernel(const void *const *args, void *out){
  #pragma omp parallel
  { float o[16]; run(PEAK_FLOPS / (24L*16*2) / omp_get_num_threads(), o); if (o[0]==12345.f) ((float*)out)[0]=o[0]; }
}
