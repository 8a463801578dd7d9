import json,sys,math
for f in sys.argv[1:]:
    d=json.load(open(f)); rs=d['results']
    lo=[];ld=[]
    for r in rs:
        best=max(b['gflops'] for b in r['baselines'] if b.get('gflops') and b['library']!='matrixmultiply')
        bl=[b['library'] for b in r['baselines'] if b.get('gflops')==best][0]
        o=r['ours_gflops']/best; df=r['default_gflops']/best
        lo.append(o); ld.append(df)
        print(f"{r['name']:5} ours {r['ours_gflops']:6.1f} def {r['default_gflops']:6.1f} best {best:6.1f} {bl[:12]:12} o/b {o:.3f} d/b {df:.3f} isdef {r['best_is_default']} trials {r['trials']} peak {r['peak_gflops']:.0f}  {r['best_config']}")
    g=lambda l: math.exp(sum(map(math.log,l))/len(l))
    print(f, 'geomean tuned', round(g(lo),3), 'untuned', round(g(ld),3))
