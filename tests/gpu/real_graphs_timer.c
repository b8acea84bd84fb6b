/* Timing loops for real_graphs.py, in C so that no Python runs between the calls timed (a
 * ctypes call costs about as much as one executable-graph setter). The functions timed are
 * passed in as pointers (the driver's and the library's, looked up by ctypes), so this file
 * needs no CUDA or rocm_cmdbuf header. ci/gpu.sh builds it into .gpu/libreal_graphs_timer.so. */
#include <stddef.h>
#include <time.h>

typedef int (*set_params_fn)(void *exec, void *node, const void *params);
typedef int (*update_fn)(void *cb, const void *allocs, size_t n, void *report);

static double now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

/* Pass r of `reps` sends every node i of `nodes` its parameters from `params_b` (r even) or
 * `params_a` (r odd), records of `stride` bytes, and stores the pass's time in out_ns[r].
 * Returns the first non-zero status of `set` (the remaining passes are not run), else 0. */
int rg_set_params(set_params_fn set, void *exec, void *const *nodes, const char *params_a, const char *params_b,
                  size_t stride, size_t n, int reps, double *out_ns) {
    for (int r = 0; r < reps; r++) {
        const char *p = (r % 2) ? params_a : params_b;
        double t0 = now_ns();
        for (size_t i = 0; i < n; i++) {
            int status = set(exec, nodes[i], p + i * stride);
            if (status != 0) return status;
        }
        out_ns[r] = now_ns() - t0;
    }
    return 0;
}

/* Call r of `reps` gives `cb` the allocation table `table_b` (r even) or `table_a` (r odd), both
 * of `n` entries, and stores the call's time in out_ns[r]. Returns the first non-zero status. */
int rg_update(update_fn update, void *cb, const void *table_a, const void *table_b, size_t n, int reps, double *out_ns,
              void *report) {
    for (int r = 0; r < reps; r++) {
        double t0 = now_ns();
        int status = update(cb, (r % 2) ? table_a : table_b, n, report);
        out_ns[r] = now_ns() - t0;
        if (status != 0) return status;
    }
    return 0;
}
