/* Timing loops for real_graphs.py, in C so that no Python runs between the calls timed (a
 * ctypes call costs about as much as one executable-graph setter). The functions timed are
 * passed in as pointers (the driver's and the library's, looked up by ctypes), so this file
 * needs no CUDA or rocm_cmdbuf header. ci/gpu.sh builds it into .gpu/libreal_graphs_timer.so.
 *
 * Each loop can flush the CPU caches before each timed call: `flush` (NULL for none) is a
 * buffer of `flush_bytes`, larger than the last-level cache, written in full first, as when an
 * update follows a step of other host work. */
#include <stddef.h>
#include <string.h>
#include <time.h>

/* What a node's parameters are set with; the driver's exec setters of each kind. */
enum { RG_KERNEL = 0, RG_MEMCPY = 1, RG_MEMSET = 2 };
typedef int (*set_kernel_fn)(void *exec, void *node, const void *params);
typedef int (*set_with_ctx_fn)(void *exec, void *node, const void *params, void *ctx);
typedef int (*update_fn)(void *cb, const void *allocs, size_t n, void *report);

static double now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

static void flush_caches(unsigned char *flush, size_t flush_bytes, int round) {
    if (flush) {
        memset(flush, round & 0xff, flush_bytes);
        __asm__ __volatile__("" ::: "memory");
    }
}

/* Pass r of `reps` sends every node i of `nodes` (kind kinds[i]) its parameters params_b[i]
 * (r even) or params_a[i] (r odd) through the setter of its kind (memcpy and memset setters get
 * `ctx`), and stores the pass's time in out_ns[r]. Returns the first non-zero status (the
 * remaining passes are not run), else 0. */
int rg_set_params(set_kernel_fn set_kernel, set_with_ctx_fn set_memcpy, set_with_ctx_fn set_memset, void *ctx,
                  void *exec, void *const *nodes, const int *kinds, const void *const *params_a,
                  const void *const *params_b, size_t n, int reps, double *out_ns, unsigned char *flush,
                  size_t flush_bytes) {
    for (int r = 0; r < reps; r++) {
        const void *const *p = (r % 2) ? params_a : params_b;
        flush_caches(flush, flush_bytes, r);
        double t0 = now_ns();
        for (size_t i = 0; i < n; i++) {
            int status = kinds[i] == RG_KERNEL   ? set_kernel(exec, nodes[i], p[i])
                         : kinds[i] == RG_MEMCPY ? set_memcpy(exec, nodes[i], p[i], ctx)
                                                 : set_memset(exec, nodes[i], p[i], ctx);
            if (status != 0) return status;
        }
        out_ns[r] = now_ns() - t0;
    }
    return 0;
}

/* Call r of `reps` gives `cb` the allocation table `table_b` (r even) or `table_a` (r odd), both
 * of `n` entries, and stores the call's time in out_ns[r]. Returns the first non-zero status. */
int rg_update(update_fn update, void *cb, const void *table_a, const void *table_b, size_t n, int reps, double *out_ns,
              void *report, unsigned char *flush, size_t flush_bytes) {
    for (int r = 0; r < reps; r++) {
        flush_caches(flush, flush_bytes, r);
        double t0 = now_ns();
        int status = update(cb, (r % 2) ? table_a : table_b, n, report);
        out_ns[r] = now_ns() - t0;
        if (status != 0) return status;
    }
    return 0;
}
