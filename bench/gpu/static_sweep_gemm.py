"""Static SASS profile of the default GPU schedule of random GEMMs (NN/TN/NT/TT layouts,
optional batch, bias/activation epilogues, extents 1-4096) through `tensor-dsl inspect`
(NVRTC, ptxas, nvdisasm; no GPU). Usage, from the repository root after
`cargo build --release -p tensor-dsl-cli`, with NVRTC and the CUDA binaries on the paths
(see .ci/run): python3 bench/gpu/static_sweep_gemm.py SEED COUNT
Each line: layout, batch, MxNxK, epilogue, template, hot-loop FFMA share, spilled bytes,
LOW when a SIMT-template point is under 0.85, the default config."""
import json,subprocess,random,sys
random.seed(int(sys.argv[1]))
dims=[1,7,16,17,24,31,32,33,48,63,64,65,96,100,127,128,200,255,256,384,500,512,768,1000,1024,1536,2048,3072,4096]
lay={'NN':('a[[i, k]]','b[[k, j]]'),'TN':('a[[k, i]]','b[[k, j]]'),'NT':('a[[i, k]]','b[[j, k]]'),'TT':('a[[k, i]]','b[[j, k]]')}
epis=['', '; c[[i, j]] = relu(c[[i, j]] + bias[[j]])', '; c[[i, j]] = gelu(c[[i, j]] + bias[[j]])', '; c[[i, j]] = sigmoid(c[[i, j]]) * 2.0', '; c[[i, j]] = tanh(c[[i, j]] + bias[[i]])']
for t in range(int(sys.argv[2])):
    M,N,K=random.choice(dims),random.choice(dims),random.choice(dims)
    if M*N*K>2**33: continue
    L=random.choice(list(lay)); A,B=lay[L]; e=random.choice(epis)
    batch=random.random()<0.25
    if batch:
        Bt=random.choice([2,3,8,12]); A=A.replace('[[','[[z, '); B=B.replace('[[','[[z, ')
        k=f'c[[z, i, j]] += {A} * {B}'+e.replace('c[[i, j]]','c[[z, i, j]]')
    else:
        k=f'c[[i, j]] += {A} * {B}'+e
    ash={'NN':(M,K),'TN':(K,M),'NT':(M,K),'TT':(K,M)}[L]; bsh={'NN':(K,N),'TN':(K,N),'NT':(N,K),'TT':(N,K)}[L]
    pre=f'{Bt}x' if batch else ''
    sh=f'a={pre}{ash[0]}x{ash[1]},b={pre}{bsh[0]}x{bsh[1]}'
    if 'bias[[j]]' in e: sh+=f',bias={N}'
    if 'bias[[i]]' in e: sh+=f',bias={M}'
    sh+=f',c={pre}{M}x{N}'
    r=subprocess.run(['target/release/tensor-dsl','inspect','--kernel',k,'--shapes',sh,'--json'],capture_output=True,text=True)
    if r.returncode: print('ERR',k,sh,r.stderr[:200]); continue
    j=json.loads(r.stdout); pt=j['profile']['ptxas']
    sp=pt.get('spill_loads',0)+pt.get('spill_stores',0)
    fs=j.get('ffma_share') or 0
    flag=('SPILL ' if sp else '')+('LOW' if fs<0.85 and j['template']=='simt' else '')
    print(f"{L} {'B' if batch else ' '} {M}x{N}x{K} e{epis.index(e)} {j['template']} ffma {fs:.3f} spill {sp} {flag} {j['config']}"); sys.stdout.flush()
