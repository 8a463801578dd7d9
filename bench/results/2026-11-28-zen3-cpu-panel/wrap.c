/* wrap.c: times the prepacked entry. gcc ... -DSRC='"path/config_0000.c"' -DWALL_ARG=3 wrap.c */
#define td_kernel td_kernel_inner
#include SRC
#undef td_kernel
static float *td_wall_cache;
void td_kernel(const void *const *args, void *out)
{
    if (!td_wall_cache) {
        td_wall_cache = aligned_alloc(64, ((size_t)td_prepack_elems * 4 + 63) / 64 * 64);
        td_prepack(args, td_wall_cache);
    }
    const void *a[8] = {0};
    for (int i = 0; i < WALL_ARG; ++i) a[i] = args[i];
    a[WALL_ARG] = td_wall_cache;
    td_kernel_prepacked(a, out);
}
