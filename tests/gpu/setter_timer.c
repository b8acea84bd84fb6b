/* A stand-in for the GPU runtime that times its node setters: given to the library as its runtime
 * (RCB_CUDA_LIBRARY, or RCB_HIP_LIBRARY when built with -DSETTER_TIMER_HIP), it defines every node
 * setter the library calls (kernel, memcpy, memset and child-graph nodes, of templates and of
 * executable graphs), each timing the real one around the call, and nothing else: it is linked
 * against the real runtime (DT_NEEDED), so every other symbol the library looks up in it is found
 * there (dlsym on a handle searches the object and then its dependencies). `rcb-bench update`
 * reads the sums through rcb_setter_timer_read and splits each update into the time inside the
 * runtime's setters and the rest.
 *
 * What the stand-in costs lands on both sides: one clock read inside the timed window, and the
 * other clock read, the sums and the extra call outside it, in the caller's time. The floor pays
 * the same per setter, so `rcb-bench` shows the floor's own rest beside the update's.
 *
 * The sums are the calling thread's (thread-local: no locked instruction per call), which is the
 * thread that timed the call around them.
 *
 * RCB_SETTER_TIMER_SKIP=1 makes the kernel-node setters (of templates and of executable graphs)
 * return success without calling the runtime: counted, with no time and no clock read. A call of
 * the library's update is then its own work, its runtime wrapper and one empty call per kernel
 * node: what `rcb-bench update-loop` times as the library's work alone (with those calls). Nothing
 * reaches the graphs, so rcb-bench runs only `update-loop` against a stand-in that skips, and
 * real_graphs.py none of its timings (both ask rcb_setter_timer_skipping); 0 or unset skips
 * nothing, and any other value stops the process with a message.
 *
 * Build (ci/gpu.sh for CUDA; ci/setter-timer.sh for the software GPU):
 *   cc -O2 -shared -fPIC [-DSETTER_TIMER_HIP] setter_timer.c -Wl,--no-as-needed <the real
 *      runtime's .so, or a stub under its SONAME> -ldl
 * No CUDA or HIP header is needed: the setters take pointers, handles and sizes only. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define EXPORT __attribute__((visibility("default")))

/* CUDA_ERROR_NOT_FOUND and hipErrorNotFound: what a setter the real runtime lacks returns, so
 * that the library reports it as the runtime's error. */
#define NOT_FOUND 500

static _Thread_local uint64_t timed_ns, timed_calls;

static uint64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* The real runtime's `name`: the next definition after this object's, in its dependency. */
static void *real(const char *name) {
    void *f = dlsym(RTLD_NEXT, name);
    if (!f) {
        fprintf(stderr, "setter_timer: the runtime this stand-in depends on has no %s\n", name);
    }
    return f;
}

/* Whether RCB_SETTER_TIMER_SKIP=1 (read once). */
static int skip_kernels(void) {
    static _Atomic int skip = -1;
    int s = atomic_load_explicit(&skip, memory_order_relaxed);
    if (s < 0) {
        const char *v = getenv("RCB_SETTER_TIMER_SKIP");
        if (!v || !strcmp(v, "0")) {
            s = 0;
        } else if (!strcmp(v, "1")) {
            s = 1;
        } else {
            fprintf(stderr, "setter_timer: RCB_SETTER_TIMER_SKIP must be 0 or 1, not \"%s\"\n", v);
            abort();
        }
        atomic_store_explicit(&skip, s, memory_order_relaxed);
    }
    return s;
}

/* Each setter: the real one looked up on its first call (the library's own lookup found this
 * one), then timed; a kernel-node setter (`kernel` 1) returns at once when skipping. */
#define TIMED(fn_name, kernel, params, args)                                                        \
    EXPORT int fn_name params {                                                                     \
        if (kernel && skip_kernels()) {                                                             \
            timed_calls += 1;                                                                       \
            return 0;                                                                               \
        }                                                                                           \
        typedef int(*real_fn) params;                                                               \
        static _Atomic(real_fn) f;                                                                  \
        real_fn g = atomic_load_explicit(&f, memory_order_relaxed);                                 \
        if (!g) {                                                                                   \
            g = (real_fn)real(#fn_name);                                                            \
            if (!g) {                                                                               \
                return NOT_FOUND;                                                                   \
            }                                                                                       \
            atomic_store_explicit(&f, g, memory_order_relaxed);                                     \
        }                                                                                           \
        uint64_t start = now_ns();                                                                  \
        int rc = g args;                                                                            \
        timed_ns += now_ns() - start;                                                               \
        timed_calls += 1;                                                                           \
        return rc;                                                                                  \
    }

#ifdef SETTER_TIMER_HIP
TIMED(hipGraphKernelNodeSetParams, 1, (void *node, const void *p), (node, p))
TIMED(hipGraphExecKernelNodeSetParams, 1, (void *exec, void *node, const void *p), (exec, node, p))
TIMED(hipGraphMemcpyNodeSetParams1D, 0, (void *node, void *dst, const void *src, size_t count, int kind),
      (node, dst, src, count, kind))
TIMED(hipGraphExecMemcpyNodeSetParams1D, 0, (void *exec, void *node, void *dst, const void *src, size_t count, int kind),
      (exec, node, dst, src, count, kind))
TIMED(hipGraphMemsetNodeSetParams, 0, (void *node, const void *p), (node, p))
TIMED(hipGraphExecMemsetNodeSetParams, 0, (void *exec, void *node, const void *p), (exec, node, p))
TIMED(hipGraphExecChildGraphNodeSetParams, 0, (void *exec, void *node, void *child), (exec, node, child))
#else
TIMED(cuGraphKernelNodeSetParams_v2, 1, (void *node, const void *p), (node, p))
TIMED(cuGraphExecKernelNodeSetParams_v2, 1, (void *exec, void *node, const void *p), (exec, node, p))
TIMED(cuGraphMemcpyNodeSetParams, 0, (void *node, const void *p), (node, p))
TIMED(cuGraphExecMemcpyNodeSetParams, 0, (void *exec, void *node, const void *p, void *ctx), (exec, node, p, ctx))
TIMED(cuGraphMemsetNodeSetParams, 0, (void *node, const void *p), (node, p))
TIMED(cuGraphExecMemsetNodeSetParams, 0, (void *exec, void *node, const void *p, void *ctx), (exec, node, p, ctx))
TIMED(cuGraphExecChildGraphNodeSetParams, 0, (void *exec, void *node, void *child), (exec, node, child))
#endif

/* The nanoseconds the calling thread spent inside the timed setters, and their calls, since it
 * began. */
EXPORT void rcb_setter_timer_read(uint64_t *ns, uint64_t *calls) {
    *ns = timed_ns;
    *calls = timed_calls;
}

/* Whether the kernel-node setters skip the runtime (RCB_SETTER_TIMER_SKIP=1). */
EXPORT int rcb_setter_timer_skipping(void) {
    return skip_kernels();
}
