import re, sys
src, dst, P, KC, PQ, F, C, VEC = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6]), int(sys.argv[7]), int(sys.argv[8])
s = open(src).read()
nv = VEC // 8
s = s.replace("float *restrict out, const long f0, const long p0)\n{", "float *restrict out, const long f0, const long p0, const long c0, const long c1, float *restrict part)\n{", 1)
names = [f"c{k}_{j}" for k in range(P) for j in range(nv)]
decl_end = s.index(";\n", s.index("td_f32x8 c0_0 = ")) + 2
init = "    if (c0 > 0) {\n" + "".join(f"        {n} = *(td_f32x8 *)&part[{i*8}];\n" for i, n in enumerate(names)) + "    }\n"
s = s[:decl_end] + init + s[decl_end:]
s = s.replace(f"for (long i_c = 0; i_c < {C}; ++i_c)", "for (long i_c = c0; i_c < c1; ++i_c)", 1)
acc = s.index(f"    float acc[{P}][{VEC}];")
save = f"    if (c1 < {C}) {{\n" + "".join(f"        *(td_f32x8 *)&part[{i*8}] = {n};\n" for i, n in enumerate(names)) + "        return;\n    }\n"
s = s[:acc] + save + s[acc:]
run = s.index("static __attribute__((noinline)) void td_conv_run")
end = s.index("void td_kernel(const void")
tiles = -(-PQ // P)
s = s[:run] + f"""static __attribute__((noinline)) void td_conv_run(const float *restrict t0, const float *restrict t1, const float *restrict wall, float *restrict out)
{{
    #pragma omp parallel
    {{
        float *wp = (float *)td_scratch(0, sizeof(float) * {C} * {VEC});
        float part[{tiles}][{P*VEC}] __attribute__((aligned(64)));
        #pragma omp for schedule(guided)
        for (long f0 = 0; f0 < {F}; f0 += {VEC}) {{
            if (!wall) td_conv_pack(t1, wp, f0);
            const float *w = wall ? wall + f0 * {C} : wp;
            for (long c0 = 0; c0 < {C}; c0 += {KC})
                for (long p0 = 0; p0 < {PQ}; p0 += {P})
                    td_conv_tile(t0, t1, w, out, f0, p0, c0, c0 + {KC} < {C} ? c0 + {KC} : {C}, part[p0 / {P}]);
        }}
        td_release(0, wp);
    }}
}}

""" + s[end:]
open(dst, "w").write(s)
