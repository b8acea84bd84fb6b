/* What the programs that drive the software GPU share (cmdbuf_flow.c, contracts.c,
 * hpp_wrapper.cpp, the fork tests), on top of check.h: hipsim's test hooks, the test kernels and the stream,
 * device buffers filled and checked, the kernels' packed arguments, command-buffer nodes of
 * them, and the count of live hipsim objects that a program must give back. Needs Debian's HIP
 * headers (-D__HIP_PLATFORM_AMD__); the functions are static inline, so a program includes only
 * what it uses. */
#ifndef RCB_TESTS_C_SIM_H
#define RCB_TESTS_C_SIM_H

#include <hip/hip_runtime_api.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"

/* hipsim's test hooks (tests/hipsim/README.md); in no HIP header. */
#ifdef __cplusplus
extern "C" {
#endif
uint64_t hipsimGetCallCount(const char *name);
uint64_t hipsimLiveCount(const char *kind);
int hipsimSetFaults(const char *spec);
#ifdef __cplusplus
}
#endif

/* Elements of every test buffer, and its size. */
enum { N = 64, BYTES = N * 4 };

/* The program's HIP objects, shared by every scenario: hipsim's built-in kernels and one
 * non-blocking stream. */
static struct {
    hipModule_t module;
    hipFunction_t fill, axpy, add;
    hipStream_t stream;
} gpu;

static inline void gpu_open(void) {
    HIP(hipModuleLoadData(&gpu.module, "hipsim"));
    HIP(hipModuleGetFunction(&gpu.fill, gpu.module, "rcb_test_fill_u32"));
    HIP(hipModuleGetFunction(&gpu.axpy, gpu.module, "rcb_test_axpy_f32"));
    HIP(hipModuleGetFunction(&gpu.add, gpu.module, "rcb_test_add_f32"));
    HIP(hipStreamCreateWithFlags(&gpu.stream, hipStreamNonBlocking));
}

static inline void gpu_close(void) {
    HIP(hipStreamDestroy(gpu.stream));
    HIP(hipModuleUnload(gpu.module));
}

static inline void sync_stream(void) { HIP(hipStreamSynchronize(gpu.stream)); }

/* A new buffer of N words, each `value`. */
static inline void *upload_u32(uint32_t value) {
    uint32_t host[N];
    for (int i = 0; i < N; i++) host[i] = value;
    void *p;
    HIP(hipMalloc(&p, BYTES));
    HIP(hipMemcpy(p, host, BYTES, hipMemcpyHostToDevice));
    return p;
}

static inline void *upload_f32(float value) { return upload_u32(f32_bits(value)); }

/* Which word the last failed holds_u32 found, and what it held. */
static char mismatch[160];

/* Whether all N words at `dev` are `want`; else `mismatch` says which one is not. */
static inline int holds_u32(const void *dev, uint32_t want) {
    uint32_t host[N];
    HIP(hipMemcpy(host, dev, BYTES, hipMemcpyDeviceToHost));
    for (int i = 0; i < N; i++) {
        if (host[i] != want) {
            float f;
            memcpy(&f, &host[i], 4);
            snprintf(mismatch, sizeof mismatch, "[%d] = %#x (%g as float), want %#x", i, host[i], (double)f, want);
            return 0;
        }
    }
    return 1;
}

static inline int holds_f32(const void *dev, float want) { return holds_u32(dev, f32_bits(want)); }

/* The kernels' arguments packed as they read them (natural alignment, no tail padding). */
typedef struct { uint64_t dst; uint32_t value, pad; uint64_t n; } fill_packed; /* fill_u32(dst, value, n) */
typedef struct { uint64_t y, x; float a; uint32_t pad; uint64_t n; } axpy_packed; /* axpy_f32: y += a * x */

static inline fill_packed fill_of(const void *dst, uint32_t value) {
    fill_packed a;
    memset(&a, 0, sizeof a);
    a.dst = dptr(dst);
    a.value = value;
    a.n = N;
    return a;
}

static inline axpy_packed axpy_of(const void *y, const void *x, float factor) {
    axpy_packed a;
    memset(&a, 0, sizeof a);
    a.y = dptr(y);
    a.x = dptr(x);
    a.a = factor;
    a.n = N;
    return a;
}

/* hipModuleLaunchKernel of `f` over N elements with its arguments in `extra` (one packed
 * buffer). */
static inline hipError_t launch_extra(hipFunction_t f, void *packed, size_t size, hipStream_t s) {
    void *extra[] = {HIP_LAUNCH_PARAM_BUFFER_POINTER, packed, HIP_LAUNCH_PARAM_BUFFER_SIZE, &size,
                     HIP_LAUNCH_PARAM_END};
    return hipModuleLaunchKernel(f, 1, 1, 1, N, 1, 1, 0, s, NULL, extra);
}

/* A kernel node of `f` over N elements after `deps`; the program stops when the add fails. */
static inline rcb_node add_kernel(rcb_cmdbuf *cb, const rcb_node *deps, size_t ndeps, hipFunction_t f,
                                  const rcb_kernel_arg *args, size_t nargs) {
    rcb_kernel_launch launch = {sizeof(rcb_kernel_launch), (void *)f, {1, 1, 1}, {N, 1, 1}, 0, args, nargs};
    rcb_node node = 0;
    RCB(rcb_cmdbuf_add_kernel(cb, deps, ndeps, &launch, &node));
    return node;
}

/* dst = value */
static inline rcb_node add_fill(rcb_cmdbuf *cb, const rcb_node *deps, size_t ndeps, const void *dst, uint32_t value) {
    uint64_t d = dptr(dst), n = N;
    rcb_kernel_arg args[3] = {{&d, 8, RCB_ARG_DEVICE_PTR}, {&value, 4, RCB_ARG_VALUE}, {&n, 8, RCB_ARG_VALUE}};
    return add_kernel(cb, deps, ndeps, gpu.fill, args, 3);
}

/* y += a * x */
static inline rcb_node add_axpy(rcb_cmdbuf *cb, const rcb_node *deps, size_t ndeps, const void *y, const void *x,
                                float a) {
    uint64_t py = dptr(y), px = dptr(x), n = N;
    rcb_kernel_arg args[4] = {
        {&py, 8, RCB_ARG_DEVICE_PTR}, {&px, 8, RCB_ARG_DEVICE_PTR}, {&a, 4, RCB_ARG_VALUE}, {&n, 8, RCB_ARG_VALUE}};
    return add_kernel(cb, deps, ndeps, gpu.axpy, args, 4);
}

/* out = a + b */
static inline rcb_node add_add(rcb_cmdbuf *cb, const rcb_node *deps, size_t ndeps, const void *out, const void *a,
                               const void *b) {
    uint64_t po = dptr(out), pa = dptr(a), pb = dptr(b), n = N;
    rcb_kernel_arg args[4] = {
        {&po, 8, RCB_ARG_DEVICE_PTR}, {&pa, 8, RCB_ARG_DEVICE_PTR}, {&pb, 8, RCB_ARG_DEVICE_PTR}, {&n, 8, RCB_ARG_VALUE}};
    return add_kernel(cb, deps, ndeps, gpu.add, args, 4);
}

static inline void launch_and_wait(rcb_cmdbuf *cb) {
    RCB(rcb_cmdbuf_launch(cb, gpu.stream));
    sync_stream();
}

/* hipsim's live allocations, graphs and executable graphs: a program takes them at its start and
 * checks at its end that it gave back everything it made. The library keeps one allocation for
 * the process, its update budget's 128-byte probe buffer, once the budget was measured
 * (rcb_runtime_info.update_budget_basis RCB_UPDATE_BUDGET_MEASURED): freeing it would make the
 * runtime synchronize the whole device. */
typedef struct {
    uint64_t allocs, graphs, execs;
    int budget_basis; /* rcb_runtime_info.update_budget_basis then */
} live_objects;

static inline int budget_basis_now(void) {
    rcb_runtime_info info;
    memset(&info, 0, sizeof info);
    info.struct_size = sizeof info;
    return rcb_runtime_load(&info) == RCB_OK ? info.update_budget_basis : -1;
}

static inline live_objects live_now(void) {
    live_objects l = {hipsimLiveCount("alloc"), hipsimLiveCount("graph"), hipsimLiveCount("exec"), budget_basis_now()};
    return l;
}

static inline void check_nothing_leaked(live_objects before) {
    live_objects now = live_now();
    /* The probe's buffer, when the budget was measured since `before`. */
    const uint64_t kept =
        before.budget_basis == RCB_UPDATE_BUDGET_UNSETTLED && now.budget_basis == RCB_UPDATE_BUDGET_MEASURED ? 1 : 0;
    CHECK(now.allocs == before.allocs + kept && now.graphs == before.graphs && now.execs == before.execs,
          "leaked: %llu allocations (%llu kept by the update budget's probe), %llu graphs, %llu executable graphs",
          (unsigned long long)(now.allocs - before.allocs), (unsigned long long)kept,
          (unsigned long long)(now.graphs - before.graphs), (unsigned long long)(now.execs - before.execs));
}

/* Fork `i` of a fork test: the child exits with `child(arg)`; the parent waits for it and checks
 * that it exited with 0 (`codes` says what the child's other exit statuses mean). */
static inline void fork_and_check(int i, int (*child)(int), int arg, const char *codes) {
    pid_t pid = fork();
    if (pid == 0) _exit(child(arg));
    int status = 0;
    CHECK(pid > 0 && waitpid(pid, &status, 0) == pid, "fork %d failed", i);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child %d: %s %d (%s)", i,
          WIFSIGNALED(status) ? "killed by signal" : "exit status",
          WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status), codes);
}

#endif
