/* The fault matrix: every HIP call of every scenario below, failed one at a time, on the software
 * GPU (hipsimSetFaults). For each scenario the program first runs it without faults (it must
 * succeed with the right results) and counts the calls of each HIP function, separately for its
 * work and for its clean-up (the frees); then, for every function f and every n up to its count,
 * it runs the scenario again with the n-th call of f failing, and classifies the run:
 *
 *   failed       a library call (or, inside a capture or a trace function, the program's own HIP
 *                call) returned an error: a documented status with a message; the scenario stops
 *                there as a caller would, and frees what it made;
 *   rerecord     an update reported needs_rerecord; the caller's re-record (without faults) then
 *                gives the right results;
 *   absorbed     every call succeeded and the results are right (the library tolerated it);
 *   destroy      the failed call was a destroy, unmap, release or free: the runtime kept that one
 *                object (and, for an unmap, its reservation), and the library said so;
 *   leak         a live object left on the GPU that the failed call does not explain;
 *   wrong        success with wrong memory contents, or a stale write to an old address;
 *   breach       an undocumented status, a failure without a message, a second free accepted,
 *                a free that could not release its object, or a fault that never fired.
 *
 * Leaks are counted with hipsimLiveCount (allocations, physical handles, reservations, mappings,
 * streams, events, graphs, executable graphs, modules) against the counts before the run. The
 * program exits 1 when any run is a leak, wrong or breach.
 *
 * Usage: RCB_BACKEND=hip RCB_HIP_LIBRARY=<the software GPU this program loaded> \
 *        fault_matrix NAMES [SCENARIO...]
 * NAMES is a file with the HIP functions the software GPU exports, one a line (run.sh makes it
 * with nm); SCENARIO names restrict the run. Build: see run.sh. */
#include <hip/hip_runtime_api.h>

#include "rocm_cmdbuf.h"

#include <dlfcn.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif
int hipsimSetFaults(const char *spec);
int hipsimSetQuirks(const char *spec);
void hipsimResetCallCounts(void);
uint64_t hipsimGetCallCount(const char *name);
uint64_t hipsimLiveCount(const char *kind);
#ifdef __cplusplus
}
#endif

enum { N = 256, BYTES = N * 4 };

/* ---- what a run found ---- */

enum outcome { OK, FAILED, RERECORD };

static int breaches;  /* contract breaches in the current run */
static int wrong;     /* wrong results in the current run */
static int reported;  /* a free or an update said a runtime call failed (RCB_STATUS_RUNTIME_ERROR) */

static void breach(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "  breach: ");
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    breaches++;
}

static void wrong_result(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "  wrong: ");
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    wrong++;
}

/* Checks the contract every status must keep; returns it. */
static rcb_status checked(rcb_status s, const char *call) {
    size_t len = rcb_last_error_message(NULL, 0);
    if (s < RCB_OK || s > RCB_STATUS_PANIC) breach("%s returned %d, not a documented status", call, s);
    if (s == RCB_STATUS_PANIC) breach("%s panicked", call);
    if (s != RCB_OK && len == 0) breach("%s returned %s without a message", call, rcb_status_str(s));
    if (s == RCB_STATUS_RUNTIME_ERROR) reported = 1;
    return s;
}

/* A library call of the scenario's work: on failure the scenario stops, as a caller would. */
/* Readies a sized struct (the rule at the top of rocm_cmdbuf.h): zeroed, its struct_size set. */
#define SIZED(var) (memset(&(var), 0, sizeof(var)), (var).struct_size = (uint32_t)sizeof(var))

#define TRY(call)                                                   \
    do {                                                            \
        if (checked((call), #call) != RCB_OK) return FAILED;         \
    } while (0)

/* The program's own HIP call inside a capture or a trace function: stop on failure. */
#define TRY_HIP(call)                                               \
    do {                                                            \
        if ((call) != hipSuccess) return FAILED;                     \
    } while (0)

/* A call outside the faults (set-up, checks, the caller's re-record): must succeed. */
#define MUST(call)                                                                          \
    do {                                                                                    \
        long e_ = (long)(call);                                                             \
        if (e_ != 0) {                                                                      \
            char m_[512];                                                                   \
            rcb_last_error_message(m_, sizeof m_);                                          \
            fprintf(stderr, "%s:%d: %s returned %ld (%s)\n", __FILE__, __LINE__, #call, e_, m_); \
            exit(2);                                                                        \
        }                                                                                   \
    } while (0)

/* A free: the handle must be gone afterwards whatever the status (unless the status says it
 * stayed live), and a status other than OK must be the runtime's error. Returns 1 when the
 * object stayed live. */
static int free_checked(rcb_status (*free_fn)(void *), void *h, const char *what) {
    if (h == NULL) return 0;
    rcb_status s = checked(free_fn(h), what);
    if (s == RCB_STATUS_INVALID_STATE || s == RCB_STATUS_TIMEOUT) return 1;
    if (s != RCB_OK && s != RCB_STATUS_RUNTIME_ERROR) breach("%s returned %s", what, rcb_status_str(s));
    if (free_fn(h) != RCB_STATUS_INVALID_HANDLE) breach("a second %s was not refused", what);
    return 0;
}

static rcb_status cmdbuf_free(void *h) { return rcb_cmdbuf_free((rcb_cmdbuf *)h); }

/* Every scenario's verify synchronized its stream: the promise lets the free destroy at once what
 * a launch the library could not follow (a failed event record, capture query or launch) may use,
 * which it would leak otherwise (see rcb_cmdbuf_launch). */
static void launches_done(rcb_cmdbuf *cb) {
    if (cb == NULL) return;
    rcb_status s = checked(rcb_cmdbuf_launches_done(cb), "rcb_cmdbuf_launches_done");
    if (s != RCB_OK) breach("rcb_cmdbuf_launches_done returned %s", rcb_status_str(s));
}
static rcb_status trace_cache_free(void *h) { return rcb_trace_cache_free((rcb_trace_cache *)h); }
static rcb_status pool_free(void *h) { return rcb_vmm_pool_free((rcb_vmm_pool *)h); }

/* ---- the GPU, outside the faults ---- */

static struct {
    hipModule_t module;
    hipFunction_t fill, axpy, add, copy;
    hipStream_t stream;
} gpu;

static uint64_t dev_alloc(size_t bytes) {
    void *p;
    MUST(hipMalloc(&p, bytes));
    return (uint64_t)(uintptr_t)p;
}

static void dev_free(uint64_t p) { MUST(hipFree((void *)(uintptr_t)p)); }

static void upload(uint64_t dst, const float *v) { MUST(hipMemcpy((void *)(uintptr_t)dst, v, BYTES, hipMemcpyHostToDevice)); }

static void download(float *v, uint64_t src) { MUST(hipMemcpy(v, (void *)(uintptr_t)src, BYTES, hipMemcpyDeviceToHost)); }

static void garbage(uint64_t dst) { MUST(hipMemset((void *)(uintptr_t)dst, 0xAB, BYTES)); }

static uint32_t bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* Whether the N floats at `dev` are want(i). */
static int holds(uint64_t dev, float (*want)(int, const void *), const void *ctx, const char *what) {
    float v[N];
    download(v, dev);
    for (int i = 0; i < N; i++) {
        float w = want(i, ctx);
        if (memcmp(&v[i], &w, 4) != 0) {
            wrong_result("%s[%d] = %g, want %g", what, i, v[i], w);
            return 0;
        }
    }
    return 1;
}

static int holds_garbage(uint64_t dev, const char *what) {
    uint8_t v[BYTES];
    MUST(hipMemcpy(v, (void *)(uintptr_t)dev, BYTES, hipMemcpyDeviceToHost));
    for (int i = 0; i < BYTES; i++) {
        if (v[i] != 0xAB) {
            wrong_result("%s was written at its old address (byte %d = %#x)", what, i, v[i]);
            return 0;
        }
    }
    return 1;
}

static void sync(void) { MUST(hipStreamSynchronize(gpu.stream)); }

/* ---- kernel arguments ---- */

typedef struct {
    rcb_kernel_arg a[4];
    uint64_t v[4];
    size_t n;
} args;

static void arg(args *x, uint64_t v, uint32_t size, uint32_t kind) {
    x->v[x->n] = v;
    x->a[x->n].size = size;
    x->a[x->n].kind = kind;
    x->n++;
}

/* The launch of `f` with the arguments in `x`, which must stay where it is during the call. */
static rcb_kernel_launch launch(hipFunction_t f, args *x) {
    for (size_t i = 0; i < x->n; i++) x->a[i].value = &x->v[i];
    rcb_kernel_launch l;
    memset(&l, 0, sizeof l);
    l.struct_size = sizeof l;
    l.function = (void *)f;
    l.grid[0] = l.grid[1] = l.grid[2] = 1;
    l.block[0] = 64;
    l.block[1] = l.block[2] = 1;
    l.args = x->a;
    l.num_args = x->n;
    return l;
}

/* fill(dst, value, N) and axpy(y += a x, N) as argument lists. */
static args fill_args(uint64_t dst, float value, uint32_t kind) {
    args x = {0};
    arg(&x, dst, 8, kind);
    arg(&x, bits(value), 4, RCB_ARG_VALUE);
    arg(&x, N, 8, RCB_ARG_VALUE);
    return x;
}

static args axpy_args(uint64_t y, uint64_t xp, float a, uint32_t kind) {
    args x = {0};
    arg(&x, y, 8, kind);
    arg(&x, xp, 8, kind);
    arg(&x, bits(a), 4, RCB_ARG_VALUE);
    arg(&x, N, 8, RCB_ARG_VALUE);
    return x;
}

static args add_args(uint64_t out, uint64_t xp, uint64_t y, uint32_t kind) {
    args x = {0};
    arg(&x, out, 8, kind);
    arg(&x, xp, 8, kind);
    arg(&x, y, 8, kind);
    arg(&x, N, 8, RCB_ARG_VALUE);
    return x;
}

/* An extra-style launch on a stream (capturable and flattenable): fill or axpy. */
static hipError_t launch_fill(hipStream_t s, uint64_t dst, float value) {
    struct {
        uint64_t dst;
        uint32_t value, pad;
        uint64_t n;
    } p = {dst, bits(value), 0, N};
    size_t size = sizeof p;
    void *extra[] = {HIP_LAUNCH_PARAM_BUFFER_POINTER, &p, HIP_LAUNCH_PARAM_BUFFER_SIZE, &size, HIP_LAUNCH_PARAM_END};
    return hipModuleLaunchKernel(gpu.fill, 1, 1, 1, 64, 1, 1, 0, s, NULL, extra);
}

static hipError_t launch_axpy(hipStream_t s, uint64_t y, uint64_t x, float a) {
    struct {
        uint64_t y, x;
        float a;
        uint32_t pad;
        uint64_t n;
    } p = {y, x, a, 0, N};
    size_t size = sizeof p;
    void *extra[] = {HIP_LAUNCH_PARAM_BUFFER_POINTER, &p, HIP_LAUNCH_PARAM_BUFFER_SIZE, &size, HIP_LAUNCH_PARAM_END};
    return hipModuleLaunchKernel(gpu.axpy, 1, 1, 1, 64, 1, 1, 0, s, NULL, extra);
}

/* Input data: input(i) for one set of buffers, moved(i) for the other. */
static float input(int i, const void *ctx) {
    (void)ctx;
    return (float)(i % 17) - 8.0f;
}
static float moved(int i, const void *ctx) {
    (void)ctx;
    return (float)(i % 5) * 0.5f + 1.0f;
}

/* y = 2 + 3 x, what every scenario's fill + axpy computes, for either input. */
static float y_of_input(int i, const void *ctx) {
    (void)ctx;
    return 2.0f + 3.0f * input(i, NULL);
}
static float y_of_moved(int i, const void *ctx) {
    (void)ctx;
    return 2.0f + 3.0f * moved(i, NULL);
}

static float pattern(int i, const void *ctx) {
    (void)i;
    (void)ctx;
    float f;
    uint32_t u = 0x3F800000u; /* 1.0f, set by a memset of 4-byte elements */
    memcpy(&f, &u, 4);
    return f;
}

static void upload_fn(uint64_t dst, float (*f)(int, const void *)) {
    float v[N];
    for (int i = 0; i < N; i++) v[i] = f(i, NULL);
    upload(dst, v);
}

/* ---- scenarios ---- */

typedef struct {
    const char *name;
    void (*setup)(void);
    enum outcome (*work)(void);
    int (*verify)(enum outcome); /* 1: right; runs the caller's re-record when told to */
    int (*teardown)(void);       /* the frees; 1: an object stayed live (the caller must retry) */
    void (*release)(void);       /* the scenario's own buffers */
} scenario;

/* 1. Record + finalize + launch: y = fill 2; y += 3x; out = y (memcpy); set = 1.0 (memset). */

static struct {
    uint64_t x, y, out, set;    /* the recorded addresses */
    uint64_t x2, y2, out2, set2; /* where the allocations move */
    rcb_cmdbuf *cb;
    rcb_node nodes[5];
    uint64_t budget; /* the executable graph's update budget when not 0 */
} rec;

static void rec_buffers(void) {
    rec.budget = 0;
    rec.x = dev_alloc(BYTES), rec.y = dev_alloc(BYTES), rec.out = dev_alloc(BYTES), rec.set = dev_alloc(BYTES);
    rec.x2 = dev_alloc(BYTES), rec.y2 = dev_alloc(BYTES), rec.out2 = dev_alloc(BYTES), rec.set2 = dev_alloc(BYTES);
    upload_fn(rec.x, input);
    upload_fn(rec.x2, moved);
    garbage(rec.y), garbage(rec.out), garbage(rec.set), garbage(rec.y2), garbage(rec.out2), garbage(rec.set2);
    rec.cb = NULL;
}

static enum outcome rec_record(void) {
    rcb_allocation table[4] = {{rec.x, BYTES}, {rec.y, BYTES}, {rec.out, BYTES}, {rec.set, BYTES}};
    TRY(rcb_cmdbuf_new(0, &rec.cb));
    TRY(rcb_cmdbuf_set_allocations(rec.cb, table, 4));
    args f = fill_args(rec.y, 2.0f, RCB_ARG_DEVICE_PTR), a = axpy_args(rec.y, rec.x, 3.0f, RCB_ARG_SCAN);
    rcb_kernel_launch lf = launch(gpu.fill, &f), la = launch(gpu.axpy, &a);
    TRY(rcb_cmdbuf_add_kernel(rec.cb, NULL, 0, &lf, &rec.nodes[0]));
    TRY(rcb_cmdbuf_add_kernel(rec.cb, &rec.nodes[0], 1, &la, &rec.nodes[1]));
    TRY(rcb_cmdbuf_add_memcpy_d2d(rec.cb, &rec.nodes[1], 1, rec.out, rec.y, BYTES, &rec.nodes[2]));
    TRY(rcb_cmdbuf_add_memset(rec.cb, NULL, 0, rec.set, 0x3F800000u, 4, N, &rec.nodes[3]));
    TRY(rcb_cmdbuf_add_empty(rec.cb, &rec.nodes[2], 2, &rec.nodes[4]));
    if (rec.budget != 0) TRY(rcb_cmdbuf_set_exec_update_budget(rec.cb, rec.budget));
    TRY(rcb_cmdbuf_finalize(rec.cb));
    TRY(rcb_cmdbuf_launch(rec.cb, gpu.stream));
    return OK;
}

static int rec_verify(enum outcome o) {
    sync();
    if (o == FAILED) return holds_garbage(rec.out, "out") && holds_garbage(rec.set, "set"); /* nothing ran */
    return holds(rec.out, y_of_input, NULL, "out") && holds(rec.set, pattern, NULL, "set");
}

static int rec_teardown(void) {
    launches_done(rec.cb);
    free_checked(cmdbuf_free, rec.cb, "rcb_cmdbuf_free");
    rec.cb = NULL;
    return 0;
}

static void rec_release(void) {
    uint64_t all[] = {rec.x, rec.y, rec.out, rec.set, rec.x2, rec.y2, rec.out2, rec.set2};
    for (int i = 0; i < 8; i++) dev_free(all[i]);
}

/* 2 and 3. The recorded command buffer's allocations move (the whole table given, or only the
 * moves), then it launches: the results must appear at the new addresses only. */

static void moved_setup(void) {
    rec_buffers();
    if (rec_record() != OK) {
        fprintf(stderr, "set-up: recording failed\n");
        exit(2);
    }
    sync();
    garbage(rec.out), garbage(rec.set);
}

static enum outcome update_work(void) {
    rcb_allocation table[4] = {{rec.x2, BYTES}, {rec.y2, BYTES}, {rec.out2, BYTES}, {rec.set2, BYTES}};
    rcb_update_report r;
    SIZED(r);
    TRY(rcb_cmdbuf_update_allocations(rec.cb, table, 4, &r));
    if (r.needs_rerecord) return RERECORD;
    if (r.moved_allocations != 4) wrong_result("update_allocations moved %u of 4", r.moved_allocations);
    TRY(rcb_cmdbuf_launch(rec.cb, gpu.stream));
    return OK;
}

static enum outcome move_work(void) {
    rcb_allocation_move moves[4] = {{0, rec.x2}, {1, rec.y2}, {2, rec.out2}, {3, rec.set2}};
    rcb_update_report r;
    SIZED(r);
    TRY(rcb_cmdbuf_move_allocations(rec.cb, moves, 4, &r));
    if (r.needs_rerecord) return RERECORD;
    if (r.moved_allocations != 4) wrong_result("move_allocations moved %u of 4", r.moved_allocations);
    TRY(rcb_cmdbuf_launch(rec.cb, gpu.stream));
    return OK;
}

/* The caller's answer to needs_rerecord: re-record every node at the new addresses. */
static void rec_rerecord(void) {
    rcb_allocation table[4] = {{rec.x2, BYTES}, {rec.y2, BYTES}, {rec.out2, BYTES}, {rec.set2, BYTES}};
    MUST(rcb_cmdbuf_begin_update(rec.cb));
    MUST(rcb_cmdbuf_set_allocations(rec.cb, table, 4));
    args f = fill_args(rec.y2, 2.0f, RCB_ARG_DEVICE_PTR), a = axpy_args(rec.y2, rec.x2, 3.0f, RCB_ARG_SCAN);
    rcb_kernel_launch lf = launch(gpu.fill, &f), la = launch(gpu.axpy, &a);
    MUST(rcb_cmdbuf_update_kernel(rec.cb, rec.nodes[0], &lf));
    MUST(rcb_cmdbuf_update_kernel(rec.cb, rec.nodes[1], &la));
    MUST(rcb_cmdbuf_update_memcpy_d2d(rec.cb, rec.nodes[2], rec.out2, rec.y2, BYTES));
    MUST(rcb_cmdbuf_update_memset(rec.cb, rec.nodes[3], rec.set2, 0x3F800000u, 4, N));
    MUST(rcb_cmdbuf_finalize(rec.cb));
    MUST(rcb_cmdbuf_launch(rec.cb, gpu.stream));
}

/* After needs_rerecord or a failed call the caller re-records in place: the command buffer must
 * still be whole (nothing half-done), and then compute the right results at the new addresses. */
static int moved_verify(enum outcome o) {
    if (o != OK) rec_rerecord();
    sync();
    return holds(rec.out2, y_of_moved, NULL, "moved out") && holds(rec.set2, pattern, NULL, "moved set") &&
           holds_garbage(rec.out, "out") && holds_garbage(rec.set, "set");
}

/* Ends a capture; when that fails with the stream still capturing, ends it again, as the
 * message says to. Returns 1 when the first end succeeded. */
static int end_capture(rcb_cmdbuf *cb) {
    if (checked(rcb_cmdbuf_capture_end(cb), "rcb_cmdbuf_capture_end") == RCB_OK) return 1;
    hipStreamCaptureStatus status;
    if (hipStreamIsCapturing(gpu.stream, &status) == hipSuccess && status != hipStreamCaptureStatusNone)
        checked(rcb_cmdbuf_capture_end(cb), "rcb_cmdbuf_capture_end");
    return 0;
}

/* The same update with an update budget of one byte: the update re-instantiates the executable
 * graph, and the old one is destroyed once its launches have finished. */
static void budget_setup(void) {
    rec_buffers();
    rec.budget = 1;
    if (rec_record() != OK) {
        fprintf(stderr, "set-up: recording failed\n");
        exit(2);
    }
    sync();
    garbage(rec.out), garbage(rec.set);
}

/* 4. Flatten a captured child: a nested command buffer captures fill + axpy; its graph is
 * flattened into a primary, launched, moved in place, launched again. */

static struct {
    rcb_cmdbuf *nested, *parent;
    int launched_once;
} fl;

static void flatten_setup(void) {
    rec_buffers();
    fl.nested = fl.parent = NULL;
    fl.launched_once = 0;
}

static enum outcome flatten_work(void) {
    TRY(rcb_cmdbuf_new_nested(0, &fl.nested));
    TRY(rcb_cmdbuf_capture_begin(fl.nested, gpu.stream));
    int launched = launch_fill(gpu.stream, rec.y, 2.0f) == hipSuccess && launch_axpy(gpu.stream, rec.y, rec.x, 3.0f) == hipSuccess;
    if (!end_capture(fl.nested) || !launched) return FAILED;
    void *graph;
    TRY(rcb_cmdbuf_graph(fl.nested, &graph));
    rcb_allocation table[2] = {{rec.x, BYTES}, {rec.y, BYTES}};
    TRY(rcb_cmdbuf_new(0, &fl.parent));
    TRY(rcb_cmdbuf_set_allocations(fl.parent, table, 2));
    rcb_node group;
    rcb_flatten_report report;
    SIZED(report);
    TRY(rcb_cmdbuf_add_flattened_child(fl.parent, NULL, 0, NULL, graph, &group, &report));
    TRY(rcb_cmdbuf_finalize(fl.parent));
    TRY(rcb_cmdbuf_launch(fl.parent, gpu.stream));
    fl.launched_once = 1;
    rcb_allocation_move moves[2] = {{0, rec.x2}, {1, rec.y2}};
    rcb_update_report r;
    SIZED(r);
    TRY(rcb_cmdbuf_move_allocations(fl.parent, moves, 2, &r));
    if (r.needs_rerecord) return RERECORD;
    TRY(rcb_cmdbuf_launch(fl.parent, gpu.stream));
    return OK;
}

/* Capture again at the new addresses, into a new command buffer (what the header says to do). */
static void flatten_rerecord(void) {
    rcb_cmdbuf *nested, *parent;
    void *graph;
    MUST(rcb_cmdbuf_new_nested(0, &nested));
    MUST(rcb_cmdbuf_capture_begin(nested, gpu.stream));
    MUST(launch_fill(gpu.stream, rec.y2, 2.0f));
    MUST(launch_axpy(gpu.stream, rec.y2, rec.x2, 3.0f));
    MUST(rcb_cmdbuf_capture_end(nested));
    MUST(rcb_cmdbuf_graph(nested, &graph));
    MUST(rcb_cmdbuf_new(0, &parent));
    rcb_node group;
    rcb_flatten_report report;
    SIZED(report);
    MUST(rcb_cmdbuf_add_flattened_child(parent, NULL, 0, NULL, graph, &group, &report));
    MUST(rcb_cmdbuf_finalize(parent));
    MUST(rcb_cmdbuf_launch(parent, gpu.stream));
    sync();
    MUST(rcb_cmdbuf_free(parent));
    MUST(rcb_cmdbuf_free(nested));
}

static int flatten_verify(enum outcome o) {
    if (o == RERECORD) flatten_rerecord();
    sync();
    int ok = 1;
    if (fl.launched_once) ok = holds(rec.y, y_of_input, NULL, "y");
    if (o != FAILED) ok = ok && holds(rec.y2, y_of_moved, NULL, "moved y");
    return ok;
}

static int flatten_teardown(void) {
    launches_done(fl.parent);
    free_checked(cmdbuf_free, fl.parent, "rcb_cmdbuf_free");
    free_checked(cmdbuf_free, fl.nested, "rcb_cmdbuf_free");
    fl.parent = fl.nested = NULL;
    return 0;
}

/* 5. Trace cache: traced, hit, relocated; the relocated graph cloned into a command buffer. */

static struct {
    rcb_trace_cache *tc;
    rcb_cmdbuf *cb;
    uint32_t outcomes[3];
} tr;

static int32_t trace_fill_axpy(void *user_data, void *stream) {
    const rcb_allocation *t = (const rcb_allocation *)user_data;
    if (launch_fill((hipStream_t)stream, t[1].base, 2.0f) != hipSuccess) return 1;
    return launch_axpy((hipStream_t)stream, t[1].base, t[0].base, 3.0f) != hipSuccess ? 2 : 0;
}

static void trace_setup(void) {
    rec_buffers();
    tr.tc = NULL;
    tr.cb = NULL;
}

static enum outcome trace_work(void) {
    rcb_allocation a[2] = {{rec.x, BYTES}, {rec.y, BYTES}}, b[2] = {{rec.x2, BYTES}, {rec.y2, BYTES}};
    void *graph;
    rcb_node child;
    TRY(rcb_trace_cache_new(4, &tr.tc));
    TRY(rcb_trace_cache_get_or_trace(tr.tc, gpu.stream, a, 2, trace_fill_axpy, a, &graph, &tr.outcomes[0]));
    TRY(rcb_trace_cache_get_or_trace(tr.tc, gpu.stream, a, 2, trace_fill_axpy, a, &graph, &tr.outcomes[1]));
    TRY(rcb_trace_cache_get_or_trace(tr.tc, gpu.stream, b, 2, trace_fill_axpy, b, &graph, &tr.outcomes[2]));
    TRY(rcb_cmdbuf_new(0, &tr.cb));
    TRY(rcb_cmdbuf_add_child_graph(tr.cb, NULL, 0, graph, &child));
    TRY(rcb_cmdbuf_finalize(tr.cb));
    TRY(rcb_cmdbuf_launch(tr.cb, gpu.stream));
    return OK;
}

static int trace_verify(enum outcome o) {
    sync();
    if (o != OK) return 1;
    return holds(rec.y2, y_of_moved, NULL, "y at the relocated addresses") && holds_garbage(rec.y, "y");
}

static int trace_teardown(void) {
    launches_done(tr.cb);
    free_checked(cmdbuf_free, tr.cb, "rcb_cmdbuf_free");
    free_checked(trace_cache_free, tr.tc, "rcb_trace_cache_free");
    tr.cb = NULL;
    tr.tc = NULL;
    return 0;
}

/* 6 and 7. A VMM pool (either backing): create, acquire, copy in and between buffers and out,
 * release, go round both slots, come back to slot 0 (its timeline must have been written), free. */

static struct {
    uint32_t backing;
    uint64_t in, out, out2;
    rcb_vmm_pool *pool;
    rcb_vmm_slot held[3];
    int nheld;
} pl;

static void pool_setup_backing(uint32_t backing) {
    pl.backing = backing;
    pl.in = dev_alloc(BYTES), pl.out = dev_alloc(BYTES), pl.out2 = dev_alloc(BYTES);
    upload_fn(pl.in, input);
    garbage(pl.out), garbage(pl.out2);
    pl.pool = NULL;
    pl.nheld = 0;
}

static void pool_setup_vmm(void) { pool_setup_backing(RCB_VMM_BACKING_VMM); }
static void pool_setup_device(void) { pool_setup_backing(RCB_VMM_BACKING_DEVICE); }

static enum outcome pool_acquire_held(void) {
    SIZED(pl.held[pl.nheld]);
    TRY(rcb_vmm_pool_acquire(pl.pool, &pl.held[pl.nheld]));
    pl.nheld++;
    return OK;
}

static enum outcome pool_release_last(void) {
    TRY(rcb_vmm_pool_release(pl.pool, &pl.held[pl.nheld - 1], gpu.stream));
    pl.nheld--;
    return OK;
}

#define STEP(call)                       \
    do {                                 \
        enum outcome o_ = (call);        \
        if (o_ != OK) return o_;         \
    } while (0)

static enum outcome pool_work(void) {
    uint64_t sizes[2] = {BYTES, BYTES};
    rcb_vmm_pool_config c;
    memset(&c, 0, sizeof c);
    c.struct_size = sizeof c;
    c.device = 0;
    c.backing = pl.backing;
    c.num_slots = 2;
    c.num_buffers = 2;
    c.buffer_sizes = sizes;
    c.timeout_ms = 200;
    TRY(rcb_vmm_pool_new(&c, &pl.pool));
    STEP(pool_acquire_held());
    const uint64_t *buf = pl.held[0].buffers;
    rcb_vmm_copy copies[3] = {{buf[0], pl.in, BYTES}, {buf[1], buf[0], BYTES}, {pl.out, buf[1], BYTES}};
    TRY(rcb_vmm_pool_copy(pl.pool, gpu.stream, copies, 3));
    STEP(pool_release_last());
    STEP(pool_acquire_held()); /* slot 1 */
    STEP(pool_release_last());
    STEP(pool_acquire_held()); /* slot 0 again: waits for its timeline */
    if (pl.held[0].index != 0 || pl.held[0].buffers[1] != buf[1]) wrong_result("slot 0 came back elsewhere");
    rcb_vmm_copy back = {pl.out2, pl.held[0].buffers[1], BYTES};
    TRY(rcb_vmm_pool_copy(pl.pool, gpu.stream, &back, 1));
    STEP(pool_release_last());
    return OK;
}

static int pool_verify(enum outcome o) {
    if (o != OK) return 1;
    sync();
    return holds(pl.out, input, NULL, "out") && holds(pl.out2, input, NULL, "out, from slot 0's second use");
}

/* The caller's clean-up: release what it holds, free the pool. */
static int pool_teardown(void) {
    while (pl.nheld > 0) {
        if (checked(rcb_vmm_pool_release(pl.pool, &pl.held[pl.nheld - 1], gpu.stream), "rcb_vmm_pool_release") != RCB_OK) break;
        pl.nheld--;
    }
    if (free_checked(pool_free, pl.pool, "rcb_vmm_pool_free")) return 1;
    pl.pool = NULL;
    return 0;
}

static void pool_release_buffers(void) {
    dev_free(pl.in), dev_free(pl.out), dev_free(pl.out2);
}

/* 8. Streams of the cache: acquire two, release one, acquire again (a hit), use it, release,
 * trim. */

static struct {
    void *held[3];
    uint64_t out;
} sc;

static void streams_setup(void) {
    sc.out = dev_alloc(BYTES);
    garbage(sc.out);
    memset(sc.held, 0, sizeof sc.held);
}

static enum outcome streams_work(void) {
    TRY(rcb_stream_acquire(0, 0, 0, &sc.held[0]));
    TRY(rcb_stream_acquire(0, 0, 0, &sc.held[1]));
    TRY(rcb_stream_release(sc.held[0]));
    sc.held[0] = NULL;
    TRY(rcb_stream_acquire(0, 0, 0, &sc.held[2]));
    hipStream_t s = (hipStream_t)sc.held[2];
    TRY_HIP(hipMemsetD32Async((hipDeviceptr_t)(uintptr_t)sc.out, bits(1.0f), N, s));
    TRY_HIP(hipStreamSynchronize(s));
    for (int i = 1; i < 3; i++) {
        void *h = sc.held[i];
        sc.held[i] = NULL;
        TRY(rcb_stream_release(h)); /* released whatever the status */
    }
    TRY(rcb_stream_cache_trim(0));
    return OK;
}

static int streams_verify(enum outcome o) {
    if (o != OK) return 1;
    return holds(sc.out, pattern, NULL, "out");
}

static int streams_teardown(void) {
    for (int i = 0; i < 3; i++) {
        if (sc.held[i] != NULL) checked(rcb_stream_release(sc.held[i]), "rcb_stream_release");
        sc.held[i] = NULL;
    }
    checked(rcb_stream_cache_trim(-1), "rcb_stream_cache_trim");
    return 0;
}

static void streams_release(void) { dev_free(sc.out); }

/* 9 and 10. The patched XLA's flow (tests/xla_flow): a primary recorded over ten allocations of
 * an arena (memset, kernels with device-pointer and scanned arguments, memcpy, a nested command
 * buffer cloned as a child, and in the second variant a traced command and a kernelParams
 * kernel), finalized, launched; then two allocations move (MoveAllocations); when the library
 * reports needs_rerecord the thunk re-records (BeginUpdate, SetAllocations, the commands that
 * use a moved allocation, Finalize) as XLA does; launch again. All of it under the fault. */

enum { XA = 8, XSLOTS = 16, XMOVED0 = XA + 1, XMOVED3 = XA + 5 };
/* Each slot is followed by a gap of its size: with allocations end to end, a pointer given by
 * address at one allocation's base could be the end of the one before it (rcb_allocation), and
 * the allocations here move one at a time. */
#define XSTRIDE (2 * BYTES)

static struct {
    int opaque; /* with the traced command and the kernelParams kernel */
    uint64_t arena;
    int slot_of[XA];
    rcb_cmdbuf *cb, *nested, *traced, *retraced;
    rcb_node nodes[8], nested_fill, nested_add;
    int rerecorded;
} xf;

static uint64_t xat(int a) { return xf.arena + (uint64_t)xf.slot_of[a] * XSTRIDE; }

static void xla_setup_variant(int opaque) {
    xf.opaque = opaque;
    xf.arena = dev_alloc((size_t)XSTRIDE * XSLOTS);
    MUST(hipMemset((void *)(uintptr_t)xf.arena, 0xAB, (size_t)XSTRIDE * XSLOTS));
    for (int a = 0; a < XA; a++) xf.slot_of[a] = a;
    xf.cb = xf.nested = xf.traced = xf.retraced = NULL;
    xf.rerecorded = 0;
    upload_fn(xat(0), input);
    upload_fn(xat(1), moved);
    /* Where allocation 0 moves to holds the same input (what XLA's allocator would hand over). */
    upload_fn(xf.arena + (uint64_t)XMOVED0 * XSTRIDE, input);
}

static void xla_setup_plain(void) { xla_setup_variant(0); }
static void xla_setup_opaque(void) { xla_setup_variant(1); }

/* Command c of the program (create or update). Outputs: a2 = a0 + a1 (after a memset), a3 = a2
 * (memcpy), a4 = a3 (copy kernel, scanned arguments), child: a5 = 0.5, a6 = a5 + a4; traced:
 * a7 = a6 + a0; kernelParams: a7 += 1.0 * a0 (axpy). */
static enum outcome xla_command(int c, int update, const rcb_node *deps, size_t ndeps) {
    rcb_cmdbuf *cb = xf.cb;
    rcb_node *node = &xf.nodes[c];
    switch (c) {
    case 0:
        if (update) TRY(rcb_cmdbuf_update_memset(cb, *node, xat(2), 0, 1, BYTES));
        else TRY(rcb_cmdbuf_add_memset(cb, deps, ndeps, xat(2), 0, 1, BYTES, node));
        return OK;
    case 1: {
        args a = add_args(xat(2), xat(0), xat(1), RCB_ARG_DEVICE_PTR);
        rcb_kernel_launch l = launch(gpu.add, &a);
        if (update) TRY(rcb_cmdbuf_update_kernel(cb, *node, &l));
        else TRY(rcb_cmdbuf_add_kernel(cb, deps, ndeps, &l, node));
        return OK;
    }
    case 2:
        if (update) TRY(rcb_cmdbuf_update_memcpy_d2d(cb, *node, xat(3), xat(2), BYTES));
        else TRY(rcb_cmdbuf_add_memcpy_d2d(cb, deps, ndeps, xat(3), xat(2), BYTES, node));
        return OK;
    case 3: {
        args a = {0};
        arg(&a, xat(4), 8, RCB_ARG_SCAN);
        arg(&a, xat(3), 8, RCB_ARG_SCAN);
        arg(&a, BYTES, 8, RCB_ARG_SCAN);
        rcb_kernel_launch l = launch(gpu.copy, &a);
        if (update) TRY(rcb_cmdbuf_update_kernel(cb, *node, &l));
        else TRY(rcb_cmdbuf_add_kernel(cb, deps, ndeps, &l, node));
        return OK;
    }
    case 4: { /* a control-flow command: its nested command buffer, cloned */
        args f = fill_args(xat(5), 0.5f, RCB_ARG_DEVICE_PTR), a = add_args(xat(6), xat(5), xat(4), RCB_ARG_DEVICE_PTR);
        rcb_kernel_launch lf = launch(gpu.fill, &f), la = launch(gpu.add, &a);
        if (!update) {
            TRY(rcb_cmdbuf_new_nested(0, &xf.nested));
            TRY(rcb_cmdbuf_add_kernel(xf.nested, NULL, 0, &lf, &xf.nested_fill));
            TRY(rcb_cmdbuf_add_kernel(xf.nested, &xf.nested_fill, 1, &la, &xf.nested_add));
            TRY(rcb_cmdbuf_finalize(xf.nested));
            TRY(rcb_cmdbuf_add_child(cb, deps, ndeps, xf.nested, node));
            return OK;
        }
        TRY(rcb_cmdbuf_begin_update(xf.nested));
        TRY(rcb_cmdbuf_update_kernel(xf.nested, xf.nested_fill, &lf));
        TRY(rcb_cmdbuf_update_kernel(xf.nested, xf.nested_add, &la));
        TRY(rcb_cmdbuf_finalize(xf.nested));
        TRY(rcb_cmdbuf_update_child(cb, *node, xf.nested));
        return OK;
    }
    case 5: { /* a traced command: a nested command buffer captured on the stream */
        rcb_cmdbuf **traced = update ? &xf.retraced : &xf.traced;
        uint64_t out = xat(7), x = xat(6), y = xat(0), n = N;
        void *params[] = {&out, &x, &y, &n};
        TRY(rcb_cmdbuf_new_nested(0, traced));
        TRY(rcb_cmdbuf_capture_begin(*traced, gpu.stream));
        int launched = hipModuleLaunchKernel(gpu.add, 1, 1, 1, 64, 1, 1, 0, gpu.stream, params, NULL) == hipSuccess;
        if (!end_capture(*traced) || !launched) return FAILED;
        TRY(rcb_cmdbuf_finalize(*traced));
        if (update) TRY(rcb_cmdbuf_update_child(cb, *node, *traced));
        else TRY(rcb_cmdbuf_add_child(cb, deps, ndeps, *traced, node));
        return OK;
    }
    default: { /* kernelParams: a7 += 1.0 * a0 */
        uint64_t y = xat(7), x = xat(0), n = N;
        float one = 1.0f;
        void *params[] = {&y, &x, &one, &n};
        rcb_kernel_params_launch l;
        memset(&l, 0, sizeof l);
        l.struct_size = sizeof l;
        l.function = (void *)gpu.axpy;
        l.grid[0] = l.grid[1] = l.grid[2] = 1;
        l.block[0] = 64, l.block[1] = l.block[2] = 1;
        l.kernel_params = params;
        if (update) TRY(rcb_cmdbuf_update_kernel_params(cb, *node, &l));
        else TRY(rcb_cmdbuf_add_kernel_params(cb, deps, ndeps, &l, node));
        return OK;
    }
    }
}

static int xla_commands(void) { return xf.opaque ? 7 : 5; }

/* The allocations each command uses (a bit mask), for the thunk's skip of unaffected commands. */
static unsigned xla_uses(int c) {
    static const unsigned uses[7] = {1u << 2, 1u << 0 | 1u << 1 | 1u << 2, 1u << 2 | 1u << 3, 1u << 3 | 1u << 4,
                                     1u << 4 | 1u << 5 | 1u << 6, 1u << 0 | 1u << 6 | 1u << 7, 1u << 0 | 1u << 7};
    return uses[c];
}

static void xla_table(rcb_allocation *t) {
    for (int a = 0; a < XA; a++) t[a].base = xat(a), t[a].size = BYTES;
}

static enum outcome xla_work(void) {
    rcb_allocation table[XA];
    xla_table(table);
    TRY(rcb_cmdbuf_new(0, &xf.cb));
    TRY(rcb_cmdbuf_set_allocations(xf.cb, table, XA));
    for (int c = 0; c < xla_commands(); c++) STEP(xla_command(c, 0, c ? &xf.nodes[c - 1] : NULL, c ? 1 : 0));
    TRY(rcb_cmdbuf_finalize(xf.cb));
    TRY(rcb_cmdbuf_launch(xf.cb, gpu.stream));
    /* The allocator moves allocations 0 and 3 to free slots. */
    xf.slot_of[0] = XMOVED0;
    xf.slot_of[3] = XMOVED3;
    rcb_allocation_move moves[2] = {{0, xat(0)}, {3, xat(3)}};
    rcb_update_report r;
    SIZED(r);
    TRY(rcb_cmdbuf_move_allocations(xf.cb, moves, 2, &r));
    if (r.needs_rerecord) {
        xf.rerecorded = 1;
        xla_table(table);
        TRY(rcb_cmdbuf_begin_update(xf.cb));
        TRY(rcb_cmdbuf_set_allocations(xf.cb, table, XA));
        for (int c = 0; c < xla_commands(); c++) {
            if (xla_uses(c) & (1u << 0 | 1u << 3)) STEP(xla_command(c, 1, NULL, 0));
        }
        TRY(rcb_cmdbuf_finalize(xf.cb));
    }
    TRY(rcb_cmdbuf_launch(xf.cb, gpu.stream));
    return xf.rerecorded ? RERECORD : OK;
}

static float xla_a2(int i, const void *ctx) {
    (void)ctx;
    return input(i, NULL) + moved(i, NULL);
}
static float xla_a6(int i, const void *ctx) {
    (void)ctx;
    return 0.5f + xla_a2(i, NULL);
}
static float xla_a7(int i, const void *ctx) {
    (void)ctx;
    return xla_a6(i, NULL) + input(i, NULL) + input(i, NULL);
}

static int xla_verify(enum outcome o) {
    if (o == FAILED) return 1;
    sync();
    int ok = holds(xat(2), xla_a2, NULL, "a2") && holds(xat(3), xla_a2, NULL, "a3 (moved)") &&
             holds(xat(4), xla_a2, NULL, "a4") && holds(xat(6), xla_a6, NULL, "a6");
    if (xf.opaque) ok = ok && holds(xat(7), xla_a7, NULL, "a7");
    return ok;
}

static int xla_teardown(void) {
    rcb_cmdbuf *all[4] = {xf.cb, xf.nested, xf.traced, xf.retraced};
    for (int i = 0; i < 4; i++) {
        launches_done(all[i]);
        free_checked(cmdbuf_free, all[i], "rcb_cmdbuf_free");
    }
    xf.cb = xf.nested = xf.traced = xf.retraced = NULL;
    return 0;
}

static void xla_release(void) { dev_free(xf.arena); }

/* 6. Flatten a raw graph holding event record and wait, host and memory-operation nodes:
 * fill(y = 2) -> axpy(y += 3x) -> host(count) -> record(ev) -> wait(ev) -> write(word = 7), built
 * with the HIP calls, flattened, launched, moved in place, launched again. */

/* ROCm 6.4's hipBatchMemOpNodeParams and hipStreamBatchMemOpParams (not in the 5.2 header). */
typedef struct {
    uint32_t operation, pad;
    uint64_t address, value, flags, alias, reserved;
} memop_t;
typedef struct {
    void *ctx;
    unsigned int count;
    memop_t *ops;
    unsigned int flags;
} batch_params_t;
/* Looked up by name: headers newer than 5.2 declare it with their own struct type. */
typedef hipError_t (*add_batch_fn)(hipGraphNode_t *, hipGraph_t, const hipGraphNode_t *, size_t, const batch_params_t *);

static struct {
    hipGraph_t graph;
    hipEvent_t event;
    uint64_t word;
    rcb_cmdbuf *parent;
    int launches, host_calls;
} nk;

static void count_host_call(void *user) { __atomic_add_fetch((int *)user, 1, __ATOMIC_SEQ_CST); }

static void node_kinds_setup(void) {
    rec_buffers();
    nk.graph = NULL;
    nk.parent = NULL;
    nk.launches = nk.host_calls = 0;
    MUST(hipEventCreateWithFlags(&nk.event, hipEventDisableTiming));
    nk.word = dev_alloc(8);
    MUST(hipMemset((void *)(uintptr_t)nk.word, 0, 8));
}

static enum outcome node_kinds_work(void) {
    TRY_HIP(hipGraphCreate(&nk.graph, 0));
    /* The kernels' packed arguments: fill(y, 2.0f, N) and axpy(y, x, 3.0f, N). */
    size_t fsize = 24, asize = 32;
    uint64_t fp[3] = {rec.y, bits(2.0f), N}, ap[4] = {rec.y, rec.x, bits(3.0f), N};
    void *fe[] = {HIP_LAUNCH_PARAM_BUFFER_POINTER, fp, HIP_LAUNCH_PARAM_BUFFER_SIZE, &fsize, HIP_LAUNCH_PARAM_END};
    void *ae[] = {HIP_LAUNCH_PARAM_BUFFER_POINTER, ap, HIP_LAUNCH_PARAM_BUFFER_SIZE, &asize, HIP_LAUNCH_PARAM_END};
    hipKernelNodeParams kp;
    memset(&kp, 0, sizeof kp);
    kp.blockDim.x = 64, kp.blockDim.y = kp.blockDim.z = 1;
    kp.gridDim.x = kp.gridDim.y = kp.gridDim.z = 1;
    kp.func = (void *)gpu.fill;
    kp.extra = fe;
    hipGraphNode_t n[6];
    TRY_HIP(hipGraphAddKernelNode(&n[0], nk.graph, NULL, 0, &kp));
    kp.func = (void *)gpu.axpy;
    kp.extra = ae;
    TRY_HIP(hipGraphAddKernelNode(&n[1], nk.graph, &n[0], 1, &kp));
    hipHostNodeParams hp = {count_host_call, &nk.host_calls};
    TRY_HIP(hipGraphAddHostNode(&n[2], nk.graph, &n[1], 1, &hp));
    TRY_HIP(hipGraphAddEventRecordNode(&n[3], nk.graph, &n[2], 1, nk.event));
    TRY_HIP(hipGraphAddEventWaitNode(&n[4], nk.graph, &n[3], 1, nk.event));
    memop_t write = {5, 0, nk.word, 7, 0, 0, 0};
    batch_params_t bp = {NULL, 1, &write, 0};
    add_batch_fn add_batch = (add_batch_fn)dlsym(dlopen(NULL, RTLD_NOW), "hipGraphAddBatchMemOpNode");
    if (add_batch == NULL) {
        fprintf(stderr, "the software GPU does not export hipGraphAddBatchMemOpNode\n");
        exit(2);
    }
    TRY_HIP(add_batch(&n[5], nk.graph, &n[4], 1, &bp));

    rcb_allocation table[2] = {{rec.x, BYTES}, {rec.y, BYTES}};
    TRY(rcb_cmdbuf_new(0, &nk.parent));
    TRY(rcb_cmdbuf_set_allocations(nk.parent, table, 2));
    rcb_node group;
    rcb_flatten_report report;
    SIZED(report);
    /* A failed read of a node falls back to a child node, whose moves are refused: a re-record. */
    TRY(rcb_cmdbuf_add_flattened_child(nk.parent, NULL, 0, NULL, nk.graph, &group, &report));
    TRY(rcb_cmdbuf_finalize(nk.parent));
    TRY(rcb_cmdbuf_launch(nk.parent, gpu.stream));
    nk.launches++;
    rcb_allocation_move moves[2] = {{0, rec.x2}, {1, rec.y2}};
    rcb_update_report r;
    SIZED(r);
    TRY(rcb_cmdbuf_move_allocations(nk.parent, moves, 2, &r));
    /* Host, event and memory-operation nodes pin every allocation (so does the child node a
     * failed read falls back to): the move is refused, and the next launch runs as before. */
    if (!r.needs_rerecord) wrong_result("a move was taken in place beside host, event and memory-operation nodes");
    TRY(rcb_cmdbuf_launch(nk.parent, gpu.stream));
    nk.launches++;
    return OK;
}

/* The caller's graph goes outside the faults (its destroy is the program's, not the library's);
 * a re-record flattens a graph of the same nodes at the new addresses into a new command buffer. */
static int node_kinds_verify(enum outcome o) {
    sync();
    if (nk.graph != NULL) MUST(hipGraphDestroy(nk.graph));
    nk.graph = NULL;
    int ok = 1;
    if (nk.launches > 0) {
        uint64_t word = 0;
        MUST(hipMemcpy(&word, (void *)(uintptr_t)nk.word, 8, hipMemcpyDeviceToHost));
        if (word != 7) wrong_result("the flattened memory operation wrote %llu", (unsigned long long)word);
        ok = holds(rec.y, y_of_input, NULL, "y");
    }
    if (__atomic_load_n(&nk.host_calls, __ATOMIC_SEQ_CST) != nk.launches)
        wrong_result("the host function ran %d times for %d launches", nk.host_calls, nk.launches);
    (void)o;
    /* The refused move changed nothing: the new y was never written. */
    return ok && holds_garbage(rec.y2, "y2");
}

static int node_kinds_teardown(void) {
    launches_done(nk.parent);
    free_checked(cmdbuf_free, nk.parent, "rcb_cmdbuf_free");
    nk.parent = NULL;
    return 0;
}

static void node_kinds_release(void) {
    rec_release();
    dev_free(nk.word);
    MUST(hipEventDestroy(nk.event));
}

/* 7. update_allocations moving the memcpy node's destination into a VMM mapping, under the
 * software GPU's memcpy_class quirk (CUDA's rule: the executable memcpy setter refuses another
 * kind of allocation): the library re-instantiates instead. */

/* ROCm >= 5.3 hipMemAllocationProp (the 5.2 header has another field order). */
typedef struct {
    int type, handle_type, location_type, location_id;
    void *win32;
    unsigned char compression, rdma;
    unsigned short usage;
    unsigned char reserved[4];
} prop6_t;

static struct {
    hipMemGenericAllocationHandle_t handle;
    uint64_t mapped, plain_out2;
} mc;

enum { GRANULE = 2 << 20 };

static void memcpy_class_setup(void) {
    rec_buffers();
    prop6_t prop = {1, 0, 1, 0, NULL, 0, 0, 0, {0}};
    MUST(hipMemCreate(&mc.handle, GRANULE, (const hipMemAllocationProp *)(const void *)&prop, 0));
    void *va;
    MUST(hipMemAddressReserve(&va, GRANULE, 0, NULL, 0));
    MUST(hipMemMap(va, GRANULE, 0, mc.handle, 0));
    hipMemAccessDesc access = {{hipMemLocationTypeDevice, 0}, hipMemAccessFlagsProtReadWrite};
    MUST(hipMemSetAccess(va, GRANULE, &access, 1));
    mc.mapped = (uint64_t)(uintptr_t)va;
    mc.plain_out2 = rec.out2;
    rec.out2 = mc.mapped;
    garbage(rec.out2);
    if (hipsimSetQuirks("memcpy_class") != 0) exit(2);
    if (rec_record() != OK) {
        fprintf(stderr, "set-up: recording failed\n");
        exit(2);
    }
    sync();
    garbage(rec.out), garbage(rec.set);
}

static void memcpy_class_release(void) {
    if (hipsimSetQuirks("") != 0) exit(2);
    rec.out2 = mc.plain_out2;
    rec_release();
    MUST(hipMemUnmap((void *)(uintptr_t)mc.mapped, GRANULE));
    MUST(hipMemAddressFree((void *)(uintptr_t)mc.mapped, GRANULE));
    MUST(hipMemRelease(mc.handle));
}

static const scenario SCENARIOS[] = {
    {"record+finalize+launch", rec_buffers, rec_record, rec_verify, rec_teardown, rec_release},
    {"update_allocations", moved_setup, update_work, moved_verify, rec_teardown, rec_release},
    {"move_allocations", moved_setup, move_work, moved_verify, rec_teardown, rec_release},
    {"update_allocations, re-instantiating (budget of 1 byte)", budget_setup, update_work, moved_verify, rec_teardown, rec_release},
    {"flatten a captured child", flatten_setup, flatten_work, flatten_verify, flatten_teardown, rec_release},
    {"trace cache: miss, hit, relocation", trace_setup, trace_work, trace_verify, trace_teardown, rec_release},
    {"VMM pool, VMM backing", pool_setup_vmm, pool_work, pool_verify, pool_teardown, pool_release_buffers},
    {"VMM pool, device backing", pool_setup_device, pool_work, pool_verify, pool_teardown, pool_release_buffers},
    {"stream acquire/release", streams_setup, streams_work, streams_verify, streams_teardown, streams_release},
    {"XLA flow, moves in place", xla_setup_plain, xla_work, xla_verify, xla_teardown, xla_release},
    {"XLA flow, re-record path", xla_setup_opaque, xla_work, xla_verify, xla_teardown, xla_release},
    {"flatten event, host and memory-operation nodes", node_kinds_setup, node_kinds_work, node_kinds_verify, node_kinds_teardown,
     node_kinds_release},
    {"update_allocations, a memcpy moved to another kind of memory", memcpy_class_setup, update_work, moved_verify, rec_teardown,
     memcpy_class_release},
};

/* ---- the matrix ---- */

static const char *const KINDS[] = {"alloc", "physical", "reservation", "mapping", "stream", "event", "graph", "exec", "module"};
enum { NKINDS = sizeof KINDS / sizeof KINDS[0] };

/* The object kinds a failed call of `fn` may leave behind: what it was meant to destroy. */
static int may_keep(const char *fn, const char *kind) {
    static const struct {
        const char *fn, *kind;
    } keeps[] = {{"hipGraphDestroy", "graph"},         {"hipGraphExecDestroy", "exec"},   {"hipFree", "alloc"},
                 {"hipMemRelease", "physical"},        {"hipMemAddressFree", "reservation"}, {"hipMemUnmap", "mapping"},
                 {"hipMemUnmap", "reservation"},       {"hipStreamDestroy", "stream"},    {"hipEventDestroy", "event"},
                 {"hipModuleUnload", "module"}};
    for (size_t i = 0; i < sizeof keeps / sizeof keeps[0]; i++) {
        if (strcmp(keeps[i].fn, fn) == 0 && strcmp(keeps[i].kind, kind) == 0) return 1;
    }
    return 0;
}

static int is_destroy(const char *fn) {
    for (int k = 0; k < NKINDS; k++) {
        if (may_keep(fn, KINDS[k])) return 1;
    }
    return 0;
}

static void fault(const char *spec) {
    if (hipsimSetFaults(spec) != 0) {
        fprintf(stderr, "hipsimSetFaults(\"%s\") refused\n", spec);
        exit(2);
    }
}

static char **names;
static size_t nnames;

static void read_names(const char *path) {
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        perror(path);
        exit(2);
    }
    char line[256];
    while (fgets(line, sizeof line, f) != NULL) {
        line[strcspn(line, "\r\n")] = '\0';
        if (line[0] == '\0') continue;
        names = (char **)realloc(names, (nnames + 1) * sizeof *names);
        names[nnames] = (char *)malloc(strlen(line) + 1);
        strcpy(names[nnames++], line);
    }
    fclose(f);
}

enum phase { NONE, WORK, TEARDOWN };

typedef struct {
    int injected, failed, rerecord, absorbed, destroy, leak, wrong, breach;
} row;

/* The calls of each function during one phase of an unfaulted run. */
static void count_calls(uint64_t *counts) {
    for (size_t i = 0; i < nnames; i++) counts[i] = hipsimGetCallCount(names[i]);
}

/* Runs `s` once, with the n-th call of `fn` failing in `phase` (NONE: no fault), and adds the
 * result to `r`. With `work_calls`/`teardown_calls` non-NULL, counts the calls instead. */
static void run(const scenario *s, enum phase phase, const char *fn, uint64_t n, row *r, uint64_t *work_calls,
                uint64_t *teardown_calls) {
    uint64_t live[NKINDS];
    char spec[128];
    snprintf(spec, sizeof spec, "%s:%llu", fn ? fn : "", (unsigned long long)n);
    for (int k = 0; k < NKINDS; k++) live[k] = hipsimLiveCount(KINDS[k]);
    breaches = wrong = reported = 0;
    s->setup();

    hipsimResetCallCounts();
    if (phase == WORK) fault(spec);
    enum outcome o = s->work();
    int fired = phase != WORK || hipsimGetCallCount(fn) >= n;
    fault("");
    if (work_calls) count_calls(work_calls);
    int right = s->verify(o);

    hipsimResetCallCounts();
    if (phase == TEARDOWN) fault(spec);
    int stayed = s->teardown();
    if (phase == TEARDOWN) fired = hipsimGetCallCount(fn) >= n;
    fault("");
    if (teardown_calls) count_calls(teardown_calls);
    if (stayed && s->teardown()) breach("the clean-up could not free everything even without the fault");

    s->release();
    checked(rcb_stream_cache_trim(-1), "rcb_stream_cache_trim");
    MUST(hipDeviceSynchronize());
    if (!fired) breach("the fault %s never fired", spec);

    int leaked = 0, kept = 0;
    for (int k = 0; k < NKINDS; k++) {
        uint64_t now = hipsimLiveCount(KINDS[k]);
        if (now == live[k]) continue;
        if (fn != NULL && now == live[k] + 1 && may_keep(fn, KINDS[k])) {
            kept = 1;
            continue;
        }
        fprintf(stderr, "  leak: %llu %s object(s) left\n", (unsigned long long)(now - live[k]), KINDS[k]);
        leaked = 1;
    }
    /* Without faults every scenario succeeds; the XLA flow's re-record variant by re-recording. */
    int expected = o == OK || (o == RERECORD && s->work == xla_work);
    if (phase == NONE && (!expected || !right || leaked || breaches)) {
        fprintf(stderr, "%s: the run without faults did not succeed cleanly\n", s->name);
        exit(2);
    }
    if (kept && !reported && fn != NULL && is_destroy(fn)) {
        /* The runtime kept an object; the caller must have been told (RCB_STATUS_RUNTIME_ERROR). */
        breach("%s failed, its object was kept, and no call said so", fn);
    }
    if (r == NULL) return;
    r->injected++;
    if (breaches) {
        r->breach++;
    } else if (!right || wrong) {
        r->wrong++;
    } else if (leaked) {
        r->leak++;
    } else if (kept) {
        r->destroy++;
    } else if (o == FAILED) {
        r->failed++;
    } else if (o == RERECORD) {
        r->rerecord++;
    } else {
        r->absorbed++;
    }
    if (breaches || wrong || !right || leaked) fprintf(stderr, "  in %s, fault %s (%s)\n", s->name, spec, phase == WORK ? "work" : "clean-up");
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s NAMES [SCENARIO...]\n", argv[0]);
        return 2;
    }
    read_names(argv[1]);
    rcb_runtime_info info;
    SIZED(info);
    MUST(rcb_runtime_load(&info));
    MUST(hipModuleLoadData(&gpu.module, "hipsim"));
    MUST(hipModuleGetFunction(&gpu.fill, gpu.module, "rcb_test_fill_u32"));
    MUST(hipModuleGetFunction(&gpu.axpy, gpu.module, "rcb_test_axpy_f32"));
    MUST(hipModuleGetFunction(&gpu.add, gpu.module, "rcb_test_add_f32"));
    MUST(hipModuleGetFunction(&gpu.copy, gpu.module, "rcb_test_copy_u8"));
    MUST(hipStreamCreate(&gpu.stream));

    uint64_t *work_calls = (uint64_t *)calloc(nnames, sizeof *work_calls);
    uint64_t *teardown_calls = (uint64_t *)calloc(nnames, sizeof *teardown_calls);
    row total = {0};
    uint64_t total_calls = 0;
    int bad = 0;
    printf("| scenario | HIP calls | faults injected | failed with a status | needs_rerecord | absorbed | failed destroy, reported | leaks | wrong results | contract breaches |\n");
    printf("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
    for (size_t si = 0; si < sizeof SCENARIOS / sizeof SCENARIOS[0]; si++) {
        const scenario *s = &SCENARIOS[si];
        int wanted = argc == 2;
        for (int a = 2; a < argc; a++) wanted |= strcmp(argv[a], s->name) == 0;
        if (!wanted) continue;
        if (s->work == trace_work) {
            run(s, NONE, NULL, 0, NULL, work_calls, teardown_calls);
            if (tr.outcomes[0] != RCB_TRACE_TRACED || tr.outcomes[1] != RCB_TRACE_HIT || tr.outcomes[2] != RCB_TRACE_RELOCATED) {
                fprintf(stderr, "%s: outcomes %u %u %u, not traced, hit, relocated\n", s->name, tr.outcomes[0], tr.outcomes[1], tr.outcomes[2]);
                return 2;
            }
        }
        /* Twice: the first run also pays for what the library does once per process. */
        run(s, NONE, NULL, 0, NULL, NULL, NULL);
        run(s, NONE, NULL, 0, NULL, work_calls, teardown_calls);
        if (s->work == xla_work && xf.rerecorded != xf.opaque) {
            fprintf(stderr, "%s: needs_rerecord %d without faults\n", s->name, xf.rerecorded);
            return 2;
        }
        row r = {0};
        uint64_t calls = 0;
        for (size_t f = 0; f < nnames; f++) {
            uint64_t w = work_calls[f], t = teardown_calls[f];
            calls += w + t;
            for (uint64_t n = 1; n <= w; n++) run(s, WORK, names[f], n, &r, NULL, NULL);
            for (uint64_t n = 1; n <= t; n++) run(s, TEARDOWN, names[f], n, &r, NULL, NULL);
        }
        printf("| %s | %llu | %d | %d | %d | %d | %d | %d | %d | %d |\n", s->name, (unsigned long long)calls, r.injected,
               r.failed, r.rerecord, r.absorbed, r.destroy, r.leak, r.wrong, r.breach);
        fflush(stdout);
        total_calls += calls;
        total.injected += r.injected, total.failed += r.failed, total.rerecord += r.rerecord, total.absorbed += r.absorbed;
        total.destroy += r.destroy, total.leak += r.leak, total.wrong += r.wrong, total.breach += r.breach;
        bad |= r.leak || r.wrong || r.breach;
    }
    printf("| **all** | %llu | %d | %d | %d | %d | %d | %d | %d | %d |\n", (unsigned long long)total_calls, total.injected,
           total.failed, total.rerecord, total.absorbed, total.destroy, total.leak, total.wrong, total.breach);
    return bad;
}
