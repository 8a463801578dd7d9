"""Static SASS profile of the default GPU schedule of 40 random convolutions (NCHW or NHWC,
1x1 to 7x7, strides 1-2, with and without padding) per seed, through `tensor-dsl inspect`
(NVRTC, ptxas, nvdisasm; no GPU). Usage, from the repository root after
`cargo build --release -p tensor-dsl-cli`, with NVRTC and the CUDA binaries on the paths
(see .ci/run): python3 bench/gpu/static_sweep.py SEED
Each line: layout, shapes, window, stride, padding, template, hot-loop FFMA share, spilled
bytes, LOW when the share is under 0.85, and the default config."""
import json, subprocess, random, sys
random.seed(int(sys.argv[1]) if len(sys.argv)>1 else 7)
res=[]
for t in range(40):
    N=random.choice([1,2,4,8,16,32]); C=random.choice([3,8,16,24,32,48,64,96,128,192,256,384,512,1024]); F=random.choice([16,32,48,64,96,128,256,512,1000,2048])
    H=random.choice([7,13,14,17,28,31,35,56,64,112]); R=random.choice([1,1,3,3,3,5,7]); s=random.choice([1,1,2]); pad=random.choice([0,R//2])
    nhwc=random.random()<0.3
    P=(H+2*pad-R)//s+1
    if P<1: continue
    sp=f'{s} * p' if s>1 else 'p'; sq=f'{s} * q' if s>1 else 'q'
    off=f' - {pad}' if pad else ''
    if nhwc:
        k=f'y[[n, p, q, f]] += x[[n, {sp} + r{off}, {sq} + s{off}, c]] * w[[r, s, c, f]]'
        sh=f'x={N}x{H}x{H}x{C},w={R}x{R}x{C}x{F},y={N}x{P}x{P}x{F}'
    else:
        k=f'y[[n, f, p, q]] += x[[n, c, {sp} + r{off}, {sq} + s{off}]] * w[[f, c, r, s]]'
        sh=f'x={N}x{C}x{H}x{H},w={F}x{C}x{R}x{R},y={N}x{F}x{P}x{P}'
    r=subprocess.run(['target/release/tensor-dsl','inspect','--kernel',k,'--shapes',sh,'--json'],capture_output=True,text=True)
    if r.returncode: print('ERR',sh,r.stderr[:200]); continue
    j=json.loads(r.stdout); pt=j['profile']['ptxas']
    sp_=pt['spill_loads']+pt['spill_stores']+pt['stack_bytes']
    fs=j.get('ffma_share') or 0
    flag=('SPILL ' if sp_ else '')+('LOW' if fs<0.85 else '')
    print(f"{'nhwc' if nhwc else 'nchw'} {sh:40s} R{R} s{s} p{pad} {j['template']} ffma {fs:.3f} spill {sp_} {flag} {j['config']}")
    sys.stdout.flush()
