/* Event record and wait, host, stream memory-operation and memory allocation nodes: made,
 * read back and run; capture of hipEventRecord, hipStreamWaitEvent and hipLaunchHostFunc
 * across streams as clr does it (a record makes no node, a wait joins the capture, the capture
 * ends on its own stream once joined); and the memcpy_class quirk. */
#include "check.h"

#include <dlfcn.h>

enum { N = 64 };

/* ROCm 6.4's hipBatchMemOpNodeParams and the 48-byte hipStreamBatchMemOpParams, and ROCm 6.x's
 * hipMemAllocNodeParams: none is in the 5.2 header. */
typedef struct { uint32_t operation; uint32_t pad; uint64_t address, value, flags, alias, reserved; } memop_t;
typedef struct { void *ctx; unsigned int count; memop_t *ops; unsigned int flags; } batch_params_t;
typedef struct { unsigned char pool_props[88]; const void *access; size_t access_count; size_t bytesize; void *dptr; } alloc_params_t;
_Static_assert(sizeof(memop_t) == 48 && sizeof(batch_params_t) == 32 && sizeof(alloc_params_t) == 120, "ROCm layouts");
/* Looked up by name, so that the suite builds against headers that declare them with their own
 * struct types and against those that do not declare them at all. */
typedef hipError_t (*add_batch_fn)(hipGraphNode_t *, hipGraph_t, const hipGraphNode_t *, size_t, const batch_params_t *);
typedef hipError_t (*get_batch_fn)(hipGraphNode_t, batch_params_t *);
typedef hipError_t (*add_alloc_fn)(hipGraphNode_t *, hipGraph_t, const hipGraphNode_t *, size_t, alloc_params_t *);
typedef hipError_t (*add_free_fn)(hipGraphNode_t *, hipGraph_t, const hipGraphNode_t *, size_t, void *);

static void *hip_symbol(const char *name) {
    void *f = dlsym(dlopen(NULL, RTLD_NOW), name);
    if (f == NULL) {
        fprintf(stderr, "the software GPU does not export %s\n", name);
        exit(1);
    }
    return f;
}
#define add_batch_node ((add_batch_fn)hip_symbol("hipGraphAddBatchMemOpNode"))
#define batch_node_params ((get_batch_fn)hip_symbol("hipGraphBatchMemOpNodeGetParams"))
#define add_alloc_node ((add_alloc_fn)hip_symbol("hipGraphAddMemAllocNode"))
#define add_free_node ((add_free_fn)hip_symbol("hipGraphAddMemFreeNode"))
enum { NODE_MEM_ALLOC = 10, NODE_MEM_FREE = 11, WRITE_VALUE_32 = 2, WAIT_VALUE_64 = 4, WRITE_VALUE_64 = 5 };

static int type_of(hipGraphNode_t n) {
    hipGraphNodeType t;
    CHECK(hipGraphNodeGetType(n, &t));
    return (int)t;
}

static size_t nodes_of(hipGraph_t g, hipGraphNode_t *out, size_t max) {
    size_t n = max;
    CHECK(hipGraphGetNodes(g, out, &n));
    return n;
}

static size_t deps_of(hipGraphNode_t n, hipGraphNode_t *out, size_t max) {
    size_t k = max;
    CHECK(hipGraphNodeGetDependencies(n, out, &k));
    return k;
}

/* Waits for the stream with a deadline (a failure, never a hang, if the work never finishes). */
static hipError_t finish(hipStream_t s) {
    double until = now_ms() + 5000;
    hipError_t e;
    while ((e = hipStreamQuery(s)) == hipErrorNotReady && now_ms() < until) {}
    return e;
}

static void count_up(void *user) { __atomic_add_fetch((int *)user, 1, __ATOMIC_SEQ_CST); }
static void count_other(void *user) { (void)user; }

static void event_and_host_nodes(void) {
    hipEvent_t e;
    CHECK(hipEventCreateWithFlags(&e, hipEventDisableTiming));
    hipGraph_t g;
    CHECK(hipGraphCreate(&g, 0));
    int runs = 0;
    hipHostNodeParams hp = {count_up, &runs};
    hipGraphNode_t host, rec, wait;
    CHECK(hipGraphAddHostNode(&host, g, NULL, 0, &hp));
    CHECK(hipGraphAddEventRecordNode(&rec, g, &host, 1, e));
    CHECK(hipGraphAddEventWaitNode(&wait, g, &rec, 1, e));
    EXPECT(type_of(host) == NODE_HOST && type_of(rec) == NODE_EVENT_RECORD && type_of(wait) == NODE_WAIT_EVENT);

    hipHostNodeParams back = {count_other, NULL};
    CHECK(hipGraphHostNodeGetParams(host, &back));
    EXPECT(back.fn == count_up && back.userData == &runs);
    hipEvent_t got = NULL;
    CHECK(hipGraphEventRecordNodeGetEvent(rec, &got));
    EXPECT(got == e);
    got = NULL;
    CHECK(hipGraphEventWaitNodeGetEvent(wait, &got));
    EXPECT(got == e);
    /* Each getter reads its own kind only. */
    EXPECT_ERR(hipGraphEventRecordNodeGetEvent(wait, &got), hipErrorInvalidValue);
    EXPECT_ERR(hipGraphEventWaitNodeGetEvent(rec, &got), hipErrorInvalidValue);
    EXPECT_ERR(hipGraphHostNodeGetParams(rec, &back), hipErrorInvalidValue);
    EXPECT_ERR(hipGraphEventRecordNodeGetEvent(rec, NULL), hipErrorInvalidValue);

    /* A clone keeps them; the host node runs once per launch with its user data. */
    hipGraph_t c;
    CHECK(hipGraphClone(&c, g));
    hipGraphNode_t cn[3];
    EXPECT(nodes_of(c, cn, 3) == 3);
    CHECK(hipGraphEventRecordNodeGetEvent(cn[1], &got));
    EXPECT(got == e);
    hipStream_t s;
    CHECK(hipStreamCreateWithFlags(&s, hipStreamNonBlocking));
    hipGraphExec_t x;
    CHECK(hipGraphInstantiate(&x, c, NULL, NULL, 0));
    for (int i = 0; i < 3; i++) CHECK(hipGraphLaunch(x, s));
    CHECK(finish(s));
    EXPECT(__atomic_load_n(&runs, __ATOMIC_SEQ_CST) == 3);
    CHECK(hipEventQuery(e));
    CHECK(hipGraphExecDestroy(x));
    CHECK(hipGraphDestroy(c));
    CHECK(hipGraphDestroy(g));
    CHECK(hipStreamDestroy(s));
    CHECK(hipEventDestroy(e));
}

static void mem_op_and_alloc_nodes(void) {
    uint64_t *sig;
    CHECK(hipExtMallocWithFlags((void **)&sig, 8, hipMallocSignalMemory));
    uint32_t *word;
    CHECK(hipMalloc((void **)&word, 4));
    CHECK(hipMemsetD32(word, 0, 1));
    __atomic_store_n(sig, 3, __ATOMIC_RELEASE);
    hipGraph_t g;
    CHECK(hipGraphCreate(&g, 0));
    /* wait(sig >= 3) then write(word = 7), write(sig = 11): one node, three operations. */
    memop_t ops[3] = {{WAIT_VALUE_64, 0, (uint64_t)(uintptr_t)sig, 3, 0, 0, 0},
                      {WRITE_VALUE_32, 0, (uint64_t)(uintptr_t)word, 7, 0, 0, 0},
                      {WRITE_VALUE_64, 0, (uint64_t)(uintptr_t)sig, 11, 0, 0, 0}};
    batch_params_t bp = {(void *)0x1234, 3, ops, 0};
    hipGraphNode_t mo;
    CHECK(add_batch_node(&mo, g, NULL, 0, &bp));
    EXPECT(type_of(mo) == NODE_BATCH_MEM_OP);
    memset(ops, 0, sizeof ops); /* copied at add time */
    batch_params_t back;
    memset(&back, 0, sizeof back);
    CHECK(batch_node_params(mo, &back));
    EXPECT(back.ctx == (void *)0x1234 && back.count == 3 && back.flags == 0);
    EXPECT(back.ops[1].operation == WRITE_VALUE_32 && back.ops[1].address == (uint64_t)(uintptr_t)word && back.ops[1].value == 7);
    memop_t bad = {99, 0, 0, 0, 0, 0, 0};
    batch_params_t badp = {NULL, 1, &bad, 0};
    hipGraphNode_t none;
    EXPECT_ERR(add_batch_node(&none, g, NULL, 0, &badp), hipErrorInvalidValue);

    alloc_params_t ap;
    memset(&ap, 0, sizeof ap);
    ap.bytesize = 256;
    hipGraphNode_t an, fn;
    CHECK(add_alloc_node(&an, g, &mo, 1, &ap));
    EXPECT(ap.dptr != NULL);
    CHECK(add_free_node(&fn, g, &an, 1, ap.dptr));
    EXPECT(type_of(an) == NODE_MEM_ALLOC && type_of(fn) == NODE_MEM_FREE);

    hipStream_t s;
    CHECK(hipStreamCreateWithFlags(&s, hipStreamNonBlocking));
    hipGraphExec_t x;
    CHECK(hipGraphInstantiate(&x, g, NULL, NULL, 0));
    CHECK(hipGraphLaunch(x, s));
    CHECK(finish(s));
    uint32_t host;
    CHECK(hipMemcpy(&host, word, 4, hipMemcpyDeviceToHost));
    EXPECT(host == 7 && __atomic_load_n(sig, __ATOMIC_ACQUIRE) == 11);
    CHECK(hipGraphExecDestroy(x));
    CHECK(hipGraphDestroy(g));
    CHECK(hipStreamDestroy(s));
    CHECK(hipFree(word));
    CHECK(hipFree(sig));
}

/* clr's capture rules for events and host functions, on two streams. */
static void capture_across_streams(hipModule_t m) {
    hipFunction_t fill = get_fn(m, "rcb_test_fill_u32");
    hipStream_t a, b;
    CHECK(hipStreamCreateWithFlags(&a, hipStreamNonBlocking));
    CHECK(hipStreamCreateWithFlags(&b, hipStreamNonBlocking));
    hipEvent_t fork, join;
    CHECK(hipEventCreateWithFlags(&fork, hipEventDisableTiming));
    CHECK(hipEventCreateWithFlags(&join, hipEventDisableTiming));
    uint32_t *x, *y;
    CHECK(hipMalloc((void **)&x, N * 4));
    CHECK(hipMalloc((void **)&y, N * 4));
    int runs = 0;

    /* a: fill(x) → record(fork); b waits (joins) → fill(y) → record(join); a waits → host. */
    CHECK(hipStreamBeginCapture(a, hipStreamCaptureModeThreadLocal));
    launch_fill(fill, x, 1, N, a);
    CHECK(hipEventRecord(fork, a));
    hipStreamCaptureStatus st;
    CHECK(hipStreamIsCapturing(b, &st));
    EXPECT(st == hipStreamCaptureStatusNone);
    CHECK(hipStreamWaitEvent(b, fork, 0));
    CHECK(hipStreamIsCapturing(b, &st));
    EXPECT(st == hipStreamCaptureStatusActive);
    launch_fill(fill, y, 2, N, b);
    CHECK(hipEventRecord(join, b));
    hipGraph_t g = NULL;
    EXPECT_ERR(hipStreamEndCapture(b, &g), hipErrorStreamCaptureUnmatched);
    CHECK(hipStreamWaitEvent(a, join, 0));
    CHECK(hipLaunchHostFunc(a, count_up, &runs));
    CHECK(hipStreamEndCapture(a, &g));
    CHECK(hipStreamIsCapturing(b, &st));
    EXPECT(st == hipStreamCaptureStatusNone);

    /* fill(x) → fill(y) → host: records make no node; the host node waits for both fills. */
    hipGraphNode_t n[4], d[2];
    EXPECT(nodes_of(g, n, 4) == 3);
    EXPECT(type_of(n[0]) == NODE_KERNEL && type_of(n[1]) == NODE_KERNEL && type_of(n[2]) == NODE_HOST);
    EXPECT(deps_of(n[1], d, 2) == 1 && d[0] == n[0]);
    EXPECT(deps_of(n[2], d, 2) == 2);
    EXPECT(__atomic_load_n(&runs, __ATOMIC_SEQ_CST) == 0);
    hipHostNodeParams hp;
    CHECK(hipGraphHostNodeGetParams(n[2], &hp));
    EXPECT(hp.fn == count_up && hp.userData == &runs);
    hipGraphExec_t x_exec;
    CHECK(hipGraphInstantiate(&x_exec, g, NULL, NULL, 0));
    CHECK(hipGraphLaunch(x_exec, a));
    CHECK(finish(a));
    EXPECT(__atomic_load_n(&runs, __ATOMIC_SEQ_CST) == 1);
    uint32_t host[N];
    CHECK(hipMemcpy(host, y, sizeof host, hipMemcpyDeviceToHost));
    expect_u32(host, N, 2);
    CHECK(hipGraphExecDestroy(x_exec));
    CHECK(hipGraphDestroy(g));

    /* Unjoined: b's last work does not lead back to a. */
    CHECK(hipStreamBeginCapture(a, hipStreamCaptureModeThreadLocal));
    launch_fill(fill, x, 3, N, a);
    CHECK(hipEventRecord(fork, a));
    CHECK(hipStreamWaitEvent(b, fork, 0));
    launch_fill(fill, y, 4, N, b);
    EXPECT_ERR(hipStreamEndCapture(a, &g), hipErrorStreamCaptureUnjoined);
    CHECK(hipStreamIsCapturing(b, &st));
    EXPECT(st == hipStreamCaptureStatusNone);

    /* Outside a capture's records: a non-zero flag is refused; an event last recorded, before
     * the capture, on a stream that captures now is isolation; otherwise the wait runs on the
     * stream, outside the capture. */
    CHECK(hipEventRecord(fork, b));
    CHECK(hipStreamBeginCapture(a, hipStreamCaptureModeThreadLocal));
    EXPECT_ERR(hipStreamWaitEvent(a, fork, 1), hipErrorInvalidValue);
    CHECK(hipStreamWaitEvent(a, fork, 0));
    CHECK(hipEventRecord(join, a));
    CHECK(hipStreamBeginCapture(b, hipStreamCaptureModeThreadLocal));
    EXPECT_ERR(hipStreamWaitEvent(a, fork, 0), hipErrorStreamCaptureIsolation);
    CHECK(hipStreamEndCapture(b, &g));
    EXPECT(nodes_of(g, n, 4) == 0);
    CHECK(hipGraphDestroy(g));
    CHECK(hipStreamEndCapture(a, &g));
    EXPECT(nodes_of(g, n, 4) == 0);
    CHECK(hipGraphDestroy(g));

    /* Uncaptured, hipLaunchHostFunc runs in stream order. */
    CHECK(hipLaunchHostFunc(a, count_up, &runs));
    CHECK(finish(a));
    EXPECT(__atomic_load_n(&runs, __ATOMIC_SEQ_CST) == 2);

    CHECK(hipFree(x));
    CHECK(hipFree(y));
    CHECK(hipEventDestroy(fork));
    CHECK(hipEventDestroy(join));
    CHECK(hipStreamDestroy(a));
    CHECK(hipStreamDestroy(b));
}

/* The memcpy_class quirk: the exec setter refuses new operands in another kind of memory. */
static void memcpy_class(void) {
    void *d0, *d1, *s0, *s1;
    CHECK(hipMalloc(&d0, N));
    CHECK(hipMalloc(&d1, N));
    CHECK(hipMalloc(&s0, N));
    CHECK(hipMalloc(&s1, N));
    void *signal;
    CHECK(hipExtMallocWithFlags(&signal, 8, hipMallocSignalMemory));
    hipGraph_t g;
    CHECK(hipGraphCreate(&g, 0));
    hipGraphNode_t c;
    CHECK(hipGraphAddMemcpyNode1D(&c, g, NULL, 0, d0, s0, 8, hipMemcpyDeviceToDevice));
    hipGraphExec_t x;
    CHECK(hipGraphInstantiate(&x, g, NULL, NULL, 0));
    /* clr: any memory. */
    CHECK(hipGraphExecMemcpyNodeSetParams1D(x, c, signal, s1, 8, hipMemcpyDeviceToDevice));
    CHECK(hipGraphExecMemcpyNodeSetParams1D(x, c, d0, s0, 8, hipMemcpyDeviceToDevice));
    EXPECT(hipsimSetQuirks("memcpy_class") == 0);
    CHECK(hipGraphExecMemcpyNodeSetParams1D(x, c, d1, s1, 8, hipMemcpyDeviceToDevice));
    EXPECT_ERR(hipGraphExecMemcpyNodeSetParams1D(x, c, signal, s1, 8, hipMemcpyDeviceToDevice), hipErrorInvalidValue);
    EXPECT_ERR(hipGraphExecMemcpyNodeSetParams1D(x, c, d1, signal, 8, hipMemcpyDeviceToDevice), hipErrorInvalidValue);
    /* The template setter and a new instantiation take them. */
    CHECK(hipGraphMemcpyNodeSetParams1D(c, signal, s1, 8, hipMemcpyDeviceToDevice));
    hipGraphExec_t y;
    CHECK(hipGraphInstantiate(&y, g, NULL, NULL, 0));
    /* A child node's new graph: the same rule for its memcpy nodes (g now copies into signal
     * memory, h and k between device allocations). */
    hipGraph_t parent, h, k;
    CHECK(hipGraphCreate(&parent, 0));
    CHECK(hipGraphCreate(&h, 0));
    CHECK(hipGraphCreate(&k, 0));
    hipGraphNode_t hc, kc, child;
    CHECK(hipGraphAddMemcpyNode1D(&hc, h, NULL, 0, d1, s1, 8, hipMemcpyDeviceToDevice));
    CHECK(hipGraphAddMemcpyNode1D(&kc, k, NULL, 0, d0, s0, 8, hipMemcpyDeviceToDevice));
    CHECK(hipGraphAddChildGraphNode(&child, parent, NULL, 0, h));
    hipGraphExec_t z;
    CHECK(hipGraphInstantiate(&z, parent, NULL, NULL, 0));
    CHECK(hipGraphExecChildGraphNodeSetParams(z, child, k));
    EXPECT_ERR(hipGraphExecChildGraphNodeSetParams(z, child, g), hipErrorInvalidValue);
    EXPECT(hipsimSetQuirks("") == 0);
    CHECK(hipGraphExecChildGraphNodeSetParams(z, child, g));
    CHECK(hipGraphExecDestroy(z));
    CHECK(hipGraphDestroy(parent)); CHECK(hipGraphDestroy(h)); CHECK(hipGraphDestroy(k));
    CHECK(hipGraphExecDestroy(x));
    CHECK(hipGraphExecDestroy(y));
    CHECK(hipGraphDestroy(g));
    CHECK(hipFree(d0)); CHECK(hipFree(d1)); CHECK(hipFree(s0)); CHECK(hipFree(s1)); CHECK(hipFree(signal));
}

int main(void) {
    uint64_t graphs = hipsimLiveCount("graph");
    hipModule_t m = load_module();
    event_and_host_nodes();
    mem_op_and_alloc_nodes();
    capture_across_streams(m);
    memcpy_class();
    CHECK(hipModuleUnload(m));
    EXPECT(hipsimLiveCount("graph") == graphs);
    PASS();
}
