// hm wrapper: oneDNN conv in its own layouts (no reorders), shapes from env CV="N,C,H,W,F,R,S,stride,pad"
#include <oneapi/dnnl/dnnl.hpp>
#include <cstdlib>
#include <cstdio>
using namespace dnnl;
static engine *eng; static stream *strm; static convolution_forward *prim; static memory *src,*wei,*dst;
static void init(){
  int N,C,H,W,F,R,S,st,pd; sscanf(getenv("CV"),"%d,%d,%d,%d,%d,%d,%d,%d,%d",&N,&C,&H,&W,&F,&R,&S,&st,&pd);
  int P=(H+2*pd-R)/st+1,Q=(W+2*pd-S)/st+1;
  eng=new engine(engine::kind::cpu,0); strm=new stream(*eng);
  memory::desc s({N,C,H,W},memory::data_type::f32,memory::format_tag::any),w({F,C,R,S},memory::data_type::f32,memory::format_tag::any),d({N,F,P,Q},memory::data_type::f32,memory::format_tag::any);
  convolution_forward::desc cd(prop_kind::forward_inference,algorithm::convolution_direct,s,w,d,{st,st},{pd,pd},{pd,pd});
  convolution_forward::primitive_desc pdsc(cd,*eng);
  fprintf(stderr,"dnnl impl: %s\n",pdsc.impl_info_str());
  prim=new convolution_forward(pdsc); src=new memory(pdsc.src_desc(),*eng); wei=new memory(pdsc.weights_desc(),*eng); dst=new memory(pdsc.dst_desc(),*eng);
  float *p=(float*)src->get_data_handle(); for(size_t i=0;i<pdsc.src_desc().get_size()/4;i++)p[i]=1e-3f*(i%7);
  p=(float*)wei->get_data_handle(); for(size_t i=0;i<pdsc.weights_desc().get_size()/4;i++)p[i]=1e-3f*(i%5);
}
extern "C" void td_kernel(const void *const *args, void *out){
  if(!prim) init();
  prim->execute(*strm,{{DNNL_ARG_SRC,*src},{DNNL_ARG_WEIGHTS,*wei},{DNNL_ARG_DST,*dst}}); strm->wait();
}
