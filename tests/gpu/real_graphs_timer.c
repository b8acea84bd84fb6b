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

/* The driver's exec setters of each kind, and the nodes a pass of the floor sets. */
struct floor {
    set_kernel_fn set_kernel;
    set_with_ctx_fn set_memcpy, set_memset;
    void *ctx, *exec;
    void *const *nodes;
    const int *kinds;
    size_t n;
};

/* Sends every node i its parameters p[i] through the setter of its kind (memcpy and memset
 * setters get the context) and stores the pass's time in *out_ns; the first non-zero status. */
static int floor_pass(const struct floor *f, const void *const *p, double *out_ns) {
    double t0 = now_ns();
    for (size_t i = 0; i < f->n; i++) {
        int status = f->kinds[i] == RG_KERNEL   ? f->set_kernel(f->exec, f->nodes[i], p[i])
                     : f->kinds[i] == RG_MEMCPY ? f->set_memcpy(f->exec, f->nodes[i], p[i], f->ctx)
                                                : f->set_memset(f->exec, f->nodes[i], p[i], f->ctx);
        if (status != 0) return status;
    }
    *out_ns = now_ns() - t0;
    return 0;
}

/* Pass r of `reps` sends every node i of `nodes` (kind kinds[i]) its parameters params_b[i]
 * (r even) or params_a[i] (r odd) through the setter of its kind (memcpy and memset setters get
 * `ctx`), and stores the pass's time in out_ns[r]. Returns the first non-zero status (the
 * remaining passes are not run), else 0. */
int rg_set_params(set_kernel_fn set_kernel, set_with_ctx_fn set_memcpy, set_with_ctx_fn set_memset, void *ctx,
                  void *exec, void *const *nodes, const int *kinds, const void *const *params_a,
                  const void *const *params_b, size_t n, int reps, double *out_ns, unsigned char *flush,
                  size_t flush_bytes) {
    struct floor f = {set_kernel, set_memcpy, set_memset, ctx, exec, nodes, kinds, n};
    for (int r = 0; r < reps; r++) {
        flush_caches(flush, flush_bytes, r);
        int status = floor_pass(&f, (r % 2) ? params_a : params_b, &out_ns[r]);
        if (status != 0) return status;
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

/* The update and the floor call by call, so that both meet the same state of the machine
 * (separate loops of each drift apart by more than the library's share): round r times the
 * update to `table_b` and back to `table_a` (out_update_ns[2r], [2r+1]), then the floor's pass
 * sending params_b and then params_a (out_floor_ns[2r], [2r+1]). Each round ends with the
 * library's parameters and the executable graph's on table A, as they began. Returns the first
 * non-zero status. */
int rg_interleaved(update_fn update, void *cb, const void *table_a, const void *table_b, size_t n_allocs, void *report,
                   set_kernel_fn set_kernel, set_with_ctx_fn set_memcpy, set_with_ctx_fn set_memset, void *ctx,
                   void *exec, void *const *nodes, const int *kinds, const void *const *params_a,
                   const void *const *params_b, size_t n, int rounds, double *out_update_ns, double *out_floor_ns) {
    struct floor f = {set_kernel, set_memcpy, set_memset, ctx, exec, nodes, kinds, n};
    for (int r = 0; r < rounds; r++) {
        for (int k = 0; k < 2; k++) {
            double t0 = now_ns();
            int status = update(cb, k ? table_a : table_b, n_allocs, report);
            out_update_ns[2 * r + k] = now_ns() - t0;
            if (status != 0) return status;
        }
        for (int k = 0; k < 2; k++) {
            int status = floor_pass(&f, k ? params_a : params_b, &out_floor_ns[2 * r + k]);
            if (status != 0) return status;
        }
    }
    return 0;
}
