# unr.py IN.c OUT.c N : in explicit-vector tile functions, the first in-order reduction loop -> GCC unroll N
import sys,re
s=open(sys.argv[1]).read(); n=sys.argv[3]
out=[];pos=0
for m in re.finditer(r'static __attribute__\(\(noinline\)\) void (td_\w+)\(', s):
    pass
funcs=[(m.start(),m.group(1)) for m in re.finditer(r'void (td_\w+)\(', s)]
res=s
cnt=0
for start,name in reversed(funcs):
    end=res.find('\n}\n',start)
    body=res[start:end]
    if 'td_f32x8 c0_0' not in body: continue
    i=body.find('TD_IN_ORDER\n')
    if i<0: continue
    body=body[:i]+'_Pragma("GCC unroll %s")\n'%n+body[i+len('TD_IN_ORDER\n'):]
    res=res[:start]+body+res[end:]; cnt+=1
open(sys.argv[2],'w').write(res); print('patched',cnt,'functions',file=sys.stderr)
