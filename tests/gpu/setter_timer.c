/* A stand-in for the GPU runtime that times its node setters: given to the library as its runtime
 * (RCB_CUDA_LIBRARY, or RCB_HIP_LIBRARY with -DSETTER_TIMER_HIP), it defines the setters an
 * update calls, each timing the real one around the call, and nothing else: it is linked against
 * the real runtime (DT_NEEDED), so every other symbol the library looks up in it is found there
 * (dlsym on a handle searches the object and then its dependencies). `rcb-bench update` reads
 * the sums through rcb_setter_timer_read and splits each update into the time inside the
 * runtime's setters and the library's own; its floor calls the same setters, through the same
 * clock reads (two a call: about 40 ns on a 2026 x86-64 host, in both).
 *
 * Build (ci/gpu.sh for CUDA; ci/setter-timer.sh for the software GPU):
 *   cc -O2 -shared -fPIC [-DSETTER_TIMER_HIP] setter_timer.c -Wl,--no-as-needed <the real
 *      runtime's .so, or a stub under its SONAME> -ldl
 * No CUDA or HIP header is needed: the setters take pointers and handles only. */
#include <dlfcn.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#ifdef SETTER_TIMER_HIP
#define RUNTIME_SONAME "libamdhip64.so.6"
#define EXEC_KERNEL "hipGraphExecKernelNodeSetParams"
#define KERNEL "hipGraphKernelNodeSetParams"
#define EXEC_MEMCPY "hipGraphExecMemcpyNodeSetParams1D"
#define EXEC_MEMSET "hipGraphExecMemsetNodeSetParams"
#define EXEC_KERNEL_FN hipGraphExecKernelNodeSetParams
#define KERNEL_FN hipGraphKernelNodeSetParams
#define EXEC_MEMCPY_FN hipGraphExecMemcpyNodeSetParams1D
#define EXEC_MEMSET_FN hipGraphExecMemsetNodeSetParams
#else
#define RUNTIME_SONAME "libcuda.so.1"
#define EXEC_KERNEL "cuGraphExecKernelNodeSetParams_v2"
#define KERNEL "cuGraphKernelNodeSetParams_v2"
#define EXEC_MEMCPY "cuGraphExecMemcpyNodeSetParams"
#define EXEC_MEMSET "cuGraphExecMemsetNodeSetParams"
#define EXEC_KERNEL_FN cuGraphExecKernelNodeSetParams_v2
#define KERNEL_FN cuGraphKernelNodeSetParams_v2
#define EXEC_MEMCPY_FN cuGraphExecMemcpyNodeSetParams
#define EXEC_MEMSET_FN cuGraphExecMemsetNodeSetParams
#endif

#define EXPORT __attribute__((visibility("default")))

static _Atomic uint64_t timed_ns, timed_calls;

static uint64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* The real runtime's `name`: the runtime is this object's dependency, so it is loaded already. A
 * runtime without it cannot have been asked for it (the library looks each setter up first), so
 * a miss is a broken build: said once, then the process stops. */
static void *real(const char *name) {
    void *runtime = dlopen(RUNTIME_SONAME, RTLD_NOW | RTLD_NOLOAD);
    void *f = runtime ? dlsym(runtime, name) : NULL;
    if (!f) {
        fprintf(stderr, "setter_timer: %s not found in %s\n", name, RUNTIME_SONAME);
        abort();
    }
    return f;
}

static void add(uint64_t start) {
    atomic_fetch_add_explicit(&timed_ns, now_ns() - start, memory_order_relaxed);
    atomic_fetch_add_explicit(&timed_calls, 1, memory_order_relaxed);
}

typedef int (*three_fn)(void *, void *, const void *);
typedef int (*two_fn)(void *, const void *);
typedef int (*four_fn)(void *, void *, const void *, void *);
typedef int (*memcpy_1d_fn)(void *, void *, void *, const void *, size_t, int);

/* Each setter: the real one looked up on its first call (the library's own lookup found this
 * one), then timed. */
#define TIMED(fn_name, sym, type, params, args)                                                     \
    EXPORT int fn_name params {                                                                     \
        static _Atomic(type) f;                                                                     \
        type g = atomic_load_explicit(&f, memory_order_relaxed);                                    \
        if (!g) {                                                                                   \
            g = (type)real(sym);                                                                    \
            atomic_store_explicit(&f, g, memory_order_relaxed);                                     \
        }                                                                                           \
        uint64_t start = now_ns();                                                                  \
        int rc = g args;                                                                            \
        add(start);                                                                                 \
        return rc;                                                                                  \
    }

TIMED(EXEC_KERNEL_FN, EXEC_KERNEL, three_fn, (void *exec, void *node, const void *p), (exec, node, p))
TIMED(KERNEL_FN, KERNEL, two_fn, (void *node, const void *p), (node, p))
#ifdef SETTER_TIMER_HIP
TIMED(EXEC_MEMCPY_FN, EXEC_MEMCPY, memcpy_1d_fn, (void *exec, void *node, void *dst, const void *src, size_t count, int kind),
      (exec, node, dst, src, count, kind))
TIMED(EXEC_MEMSET_FN, EXEC_MEMSET, three_fn, (void *exec, void *node, const void *p), (exec, node, p))
#else
TIMED(EXEC_MEMCPY_FN, EXEC_MEMCPY, four_fn, (void *exec, void *node, const void *p, void *ctx), (exec, node, p, ctx))
TIMED(EXEC_MEMSET_FN, EXEC_MEMSET, four_fn, (void *exec, void *node, const void *p, void *ctx), (exec, node, p, ctx))
#endif

/* The nanoseconds spent inside the timed setters, and their calls, since the process began. */
EXPORT void rcb_setter_timer_read(uint64_t *ns, uint64_t *calls) {
    *ns = atomic_load_explicit(&timed_ns, memory_order_relaxed);
    *calls = atomic_load_explicit(&timed_calls, memory_order_relaxed);
}
