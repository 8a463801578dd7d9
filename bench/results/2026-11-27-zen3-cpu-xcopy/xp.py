import sys
src,dst,C,HW=sys.argv[1],sys.argv[2],int(sys.argv[3]),int(sys.argv[4])
T=HW//16
s=open(src).read()
a=s.index('static __attribute__((noinline)) void td_conv_tile(')
b=s.index('static __attribute__((noinline)) void td_conv_pack(')
tile=s[a:b]
t2=tile.replace('void td_conv_tile(const float *restrict t0,','void td_conv_tile_x(const float *restrict xp,')
old=f'const long xr = {HW} * i_c + {int(HW**0.5)} * i_r + i_s;'
assert old in t2, old
t2=t2.replace(old,'const long xr = 16 * i_c;')
t2=t2.replace('*(td_f32x8 *)(&t0[xs_0 + xr])','*(td_f32x8 *)(&xp[xr])').replace('*(td_f32x8 *)(&t0[xs_1 + xr])','*(td_f32x8 *)(&xp[xr + 8])')
xpack=f'''static __attribute__((noinline)) void td_conv_xpack(const float *restrict t0, float *restrict xp, const long t)
{{
    const long p0 = t % {T} * 16;
    for (long i_c = 0; i_c < {C}; ++i_c) {{
        *(td_f32x8 *)&xp[16 * i_c] = *(const td_f32x8 *)&t0[{HW} * i_c + p0];
        *(td_f32x8 *)&xp[16 * i_c + 8] = *(const td_f32x8 *)&t0[{HW} * i_c + p0 + 8];
    }}
}}

'''
s=s[:b]+t2+xpack+s[b:]
s=s.replace('#define TD_SLOTS 1','#define TD_SLOTS 2')
import re
m=re.search(r'''            #pragma omp for collapse\(2\) schedule\(guided\)
            for \(long t = 0; t < (\d+); t \+= 1\)
            for \(long f0 = 0; f0 < (\d+); f0 \+= (\d+)\)
            td_conv_tile\(t0, t1, wall \+ f0 \* (\d+), out, f0, t\);''',s)
assert m
new=f'''            float *xp = (float *)td_scratch(1, sizeof(float) * {C} * 16);
            long pk_t = -1;
            #pragma omp for collapse(2) schedule(guided)
            for (long t = 0; t < {m.group(1)}; t += 1)
            for (long f0 = 0; f0 < {m.group(2)}; f0 += {m.group(3)})
            {{
                if (t != pk_t) {{ td_conv_xpack(t0, xp, t); pk_t = t; }}
                td_conv_tile_x(xp, t1, wall + f0 * {m.group(4)}, out, f0, t);
            }}
            td_release(1, xp);'''
s=s[:m.start()]+new+s[m.end():]
open(dst,'w').write(s)
