/* Stream capture in all three modes. */
#include "check.h"

enum { N = 64 };

static void capture_all_ops(int mode, hipModule_t m) {
    hipFunction_t fill = get_fn(m, "rcb_test_fill_u32"), axpy = get_fn(m, "rcb_test_axpy_f32");
    hipStream_t s;
    CHECK(hipStreamCreateWithFlags(&s, hipStreamNonBlocking));
    uint32_t *a, *b;
    uint64_t *sig;
    CHECK(hipMalloc((void **)&a, N * 4));
    CHECK(hipMalloc((void **)&b, N * 4));
    CHECK(hipExtMallocWithFlags((void **)&sig, 8, hipMallocSignalMemory));
    CHECK(hipMemsetD32(a, 0, N));
    CHECK(hipMemsetD32(b, 0, N));
    /* A graph launched into the capture becomes a child node; it runs last. */
    hipGraph_t ig;
    CHECK(hipGraphCreate(&ig, 0));
    hipMemsetParams ms = {0};
    ms.dst = a; ms.elementSize = 4; ms.width = 4; ms.height = 1; ms.value = 0x5A;
    hipGraphNode_t in;
    CHECK(hipGraphAddMemsetNode(&in, ig, NULL, 0, &ms));
    hipGraphExec_t inner;
    CHECK(hipGraphInstantiate(&inner, ig, NULL, NULL, 0));

    hipStreamCaptureStatus st;
    CHECK(hipStreamIsCapturing(s, &st));
    EXPECT(st == hipStreamCaptureStatusNone);
    CHECK(hipStreamBeginCapture(s, (hipStreamCaptureMode)mode));
    EXPECT_ERR(hipStreamBeginCapture(s, (hipStreamCaptureMode)mode), hipErrorIllegalState);
    CHECK(hipStreamIsCapturing(s, &st));
    EXPECT(st == hipStreamCaptureStatusActive);
    launch_fill(fill, a, 0x3f800000u, N, s);                       /* a = 1.0f */
    axpy_args_t aa = {a, a, 1.0f, 0, N};                           /* a += a -> 2.0f */
    size_t size = 32;
    void *extra[] = {HIP_LAUNCH_PARAM_BUFFER_POINTER, &aa, HIP_LAUNCH_PARAM_BUFFER_SIZE, &size, HIP_LAUNCH_PARAM_END};
    CHECK(hipModuleLaunchKernel(axpy, 1, 1, 1, 64, 1, 1, 0, s, NULL, extra));
    aa.a = 100.0f; /* captured values are copies */
    CHECK(hipMemsetD32Async(b, 7, N, s));
    CHECK(hipMemcpyAsync(b, a, 8, hipMemcpyDeviceToDevice, s));
    CHECK(hipStreamWriteValue64(s, sig, 42 + (uint64_t)mode, 0));
    CHECK(hipGraphLaunch(inner, s));
    hipGraph_t g;
    CHECK(hipStreamEndCapture(s, &g));
    CHECK(hipStreamIsCapturing(s, &st));
    EXPECT(st == hipStreamCaptureStatusNone);

    /* Nothing ran during capture. */
    uint32_t host[N];
    CHECK(hipMemcpy(host, a, sizeof host, hipMemcpyDeviceToHost));
    expect_u32(host, N, 0);
    EXPECT(__atomic_load_n(sig, __ATOMIC_ACQUIRE) == 0);

    /* A chain in issue order. */
    hipGraphNode_t nodes[8];
    size_t count = 8;
    CHECK(hipGraphGetNodes(g, nodes, &count));
    EXPECT(count == 6);
    int want[6] = {NODE_KERNEL, NODE_KERNEL, NODE_MEMSET, NODE_MEMCPY, NODE_BATCH_MEM_OP, NODE_GRAPH};
    for (size_t i = 0; i < count; i++) {
        hipGraphNodeType t;
        CHECK(hipGraphNodeGetType(nodes[i], &t));
        EXPECT((int)t == want[i]);
        size_t nd = 2;
        hipGraphNode_t dep[2];
        CHECK(hipGraphNodeGetDependencies(nodes[i], dep, &nd));
        EXPECT(nd == (i ? 1u : 0u) && (!i || dep[0] == nodes[i - 1]));
    }
    hipKernelNodeParams kp;
    CHECK(hipGraphKernelNodeGetParams(nodes[1], &kp));
    EXPECT(kp.extra && kp.extra[0] == HIP_LAUNCH_PARAM_BUFFER_POINTER && ((axpy_args_t *)kp.extra[1])->a == 1.0f);
    CHECK(hipGraphKernelNodeGetParams(nodes[0], &kp));
    EXPECT(kp.kernelParams && *(uint32_t *)kp.kernelParams[1] == 0x3f800000u);

    hipGraphExec_t ex;
    CHECK(hipGraphInstantiate(&ex, g, NULL, NULL, 0));
    CHECK(hipGraphLaunch(ex, s));
    CHECK(hipStreamSynchronize(s));
    CHECK(hipMemcpy(host, a, sizeof host, hipMemcpyDeviceToHost));
    float two = 2.0f;
    uint32_t two_bits;
    memcpy(&two_bits, &two, 4);
    expect_u32(host + 4, N - 4, two_bits);
    expect_u32(host, 4, 0x5A); /* the inner graph ran last */
    CHECK(hipMemcpy(host, b, sizeof host, hipMemcpyDeviceToHost));
    expect_u32(host, 2, two_bits);
    expect_u32(host + 2, N - 2, 7);
    EXPECT(__atomic_load_n(sig, __ATOMIC_ACQUIRE) == 42 + (uint64_t)mode);

    CHECK(hipGraphExecDestroy(ex));
    CHECK(hipGraphDestroy(g));
    CHECK(hipGraphExecDestroy(inner));
    CHECK(hipGraphDestroy(ig));
    CHECK(hipFree(a)); CHECK(hipFree(b)); CHECK(hipFree(sig));
    CHECK(hipStreamDestroy(s));
}

/* Synchronizing a capturing stream is refused and invalidates the capture. */
static void invalidation(void) {
    hipStream_t s;
    CHECK(hipStreamCreate(&s));
    CHECK(hipStreamBeginCapture(s, hipStreamCaptureModeGlobal));
    CHECK(hipMemsetAsync(NULL, 0, 0, s));
    EXPECT_ERR(hipStreamSynchronize(s), hipErrorStreamCaptureUnsupported);
    hipStreamCaptureStatus st;
    CHECK(hipStreamIsCapturing(s, &st));
    EXPECT(st == hipStreamCaptureStatusInvalidated);
    EXPECT_ERR(hipMemsetAsync(NULL, 0, 0, s), hipErrorStreamCaptureInvalidated);
    hipGraph_t g = (hipGraph_t)(uintptr_t)1;
    EXPECT_ERR(hipStreamEndCapture(s, &g), hipErrorStreamCaptureInvalidated);
    EXPECT(g == NULL);
    CHECK(hipStreamIsCapturing(s, &st));
    EXPECT(st == hipStreamCaptureStatusNone);

    /* hipMalloc is unsafe during global capture, allowed during relaxed capture. */
    void *p;
    CHECK(hipStreamBeginCapture(s, hipStreamCaptureModeGlobal));
    EXPECT_ERR(hipMalloc(&p, 64), hipErrorStreamCaptureUnsupported);
    EXPECT_ERR(hipStreamEndCapture(s, &g), hipErrorStreamCaptureInvalidated);
    CHECK(hipStreamBeginCapture(s, hipStreamCaptureModeThreadLocal));
    EXPECT_ERR(hipMalloc(&p, 64), hipErrorStreamCaptureUnsupported);
    EXPECT_ERR(hipStreamEndCapture(s, &g), hipErrorStreamCaptureInvalidated);
    CHECK(hipStreamBeginCapture(s, hipStreamCaptureModeRelaxed));
    CHECK(hipMalloc(&p, 64));
    CHECK(hipStreamEndCapture(s, &g));
    size_t count = 1;
    CHECK(hipGraphGetNodes(g, NULL, &count));
    EXPECT(count == 0);
    CHECK(hipGraphDestroy(g));
    CHECK(hipFree(p));

    EXPECT_ERR(hipStreamBeginCapture(NULL, hipStreamCaptureModeGlobal), hipErrorStreamCaptureUnsupported);
    EXPECT_ERR(hipStreamEndCapture(s, &g), hipErrorIllegalState);
    CHECK(hipStreamBeginCapture(s, hipStreamCaptureModeRelaxed));
    CHECK(hipStreamDestroy(s)); /* discards the half-built graph */
}

/* The capture's graph and last nodes (hipStreamGetCaptureInfo_v2) and nodes added to that graph by
 * hand, made the stream's next dependencies (hipStreamUpdateCaptureDependencies), as NCCL adds an
 * event record node to its capture: fill a (kernel) -> event record node -> fill b, with an event
 * wait node added beside them and joined by "add". */
static void capture_dependencies(hipModule_t m) {
    hipFunction_t fill = get_fn(m, "rcb_test_fill_u32");
    hipStream_t s;
    CHECK(hipStreamCreate(&s));
    hipEvent_t e;
    CHECK(hipEventCreateWithFlags(&e, hipEventDisableTiming));
    uint32_t *a, *b;
    CHECK(hipMalloc((void **)&a, N * 4));
    CHECK(hipMalloc((void **)&b, N * 4));
    hipStreamCaptureStatus st;
    hipGraph_t cg = NULL;
    const hipGraphNode_t *deps = NULL;
    size_t n = 99;
    unsigned long long id = 0;
    CHECK(hipStreamGetCaptureInfo_v2(s, &st, &id, &cg, &deps, &n));
    EXPECT(st == hipStreamCaptureStatusNone && cg == NULL && n == 99);
    EXPECT_ERR(hipStreamUpdateCaptureDependencies(s, NULL, 0, hipStreamSetCaptureDependencies), hipErrorIllegalState);

    CHECK(hipStreamBeginCapture(s, hipStreamCaptureModeThreadLocal));
    CHECK(hipStreamGetCaptureInfo_v2(s, &st, &id, &cg, &deps, &n));
    EXPECT(st == hipStreamCaptureStatusActive && cg != NULL && id != 0 && n == 0);
    launch_fill(fill, a, 1, N, s);
    CHECK(hipStreamGetCaptureInfo_v2(s, &st, NULL, NULL, &deps, &n));
    EXPECT(n == 1);
    hipGraphNode_t first = deps[0], record, wait;
    CHECK(hipGraphAddEventRecordNode(&record, cg, &first, 1, e));
    CHECK(hipGraphAddEventWaitNode(&wait, cg, NULL, 0, e));
    /* Refused: another flag, a node of another graph, a null list of some nodes. */
    hipGraph_t other;
    CHECK(hipGraphCreate(&other, 0));
    hipGraphNode_t stranger;
    CHECK(hipGraphAddEmptyNode(&stranger, other, NULL, 0));
    EXPECT_ERR(hipStreamUpdateCaptureDependencies(s, &record, 1, 2), hipErrorInvalidValue);
    EXPECT_ERR(hipStreamUpdateCaptureDependencies(s, &stranger, 1, hipStreamSetCaptureDependencies), hipErrorInvalidValue);
    EXPECT_ERR(hipStreamUpdateCaptureDependencies(s, NULL, 1, hipStreamSetCaptureDependencies), hipErrorInvalidValue);
    CHECK(hipStreamUpdateCaptureDependencies(s, &record, 1, hipStreamSetCaptureDependencies));
    CHECK(hipStreamUpdateCaptureDependencies(s, &wait, 1, hipStreamAddCaptureDependencies));
    CHECK(hipStreamUpdateCaptureDependencies(s, &wait, 1, hipStreamAddCaptureDependencies)); /* once */
    CHECK(hipStreamGetCaptureInfo_v2(s, &st, NULL, NULL, &deps, &n));
    EXPECT(n == 2 && deps[0] == record && deps[1] == wait);
    launch_fill(fill, b, 2, N, s);
    hipGraph_t g;
    CHECK(hipStreamEndCapture(s, &g));
    EXPECT(g == cg);

    hipGraphNode_t nodes[4];
    size_t count = 4;
    CHECK(hipGraphGetNodes(g, nodes, &count));
    EXPECT(count == 4 && nodes[0] == first && nodes[1] == record && nodes[2] == wait);
    hipGraphNode_t d[2];
    size_t nd = 2;
    CHECK(hipGraphNodeGetDependencies(nodes[3], d, &nd));
    EXPECT(nd == 2 && d[0] == record && d[1] == wait);
    hipGraphExec_t ex;
    CHECK(hipGraphInstantiate(&ex, g, NULL, NULL, 0));
    CHECK(hipGraphLaunch(ex, s));
    CHECK(hipStreamSynchronize(s));
    uint32_t host[N];
    CHECK(hipMemcpy(host, b, sizeof host, hipMemcpyDeviceToHost));
    expect_u32(host, N, 2);
    CHECK(hipEventSynchronize(e));
    CHECK(hipGraphExecDestroy(ex));
    CHECK(hipGraphDestroy(g));
    CHECK(hipGraphDestroy(other));
    CHECK(hipEventDestroy(e));
    CHECK(hipFree(a)); CHECK(hipFree(b));
    CHECK(hipStreamDestroy(s));
}

int main(void) {
    uint64_t live_graphs = hipsimLiveCount("graph");
    hipModule_t m = load_module();
    for (int mode = 0; mode < 3; mode++) capture_all_ops(mode, m);
    invalidation();
    capture_dependencies(m);
    CHECK(hipModuleUnload(m));
    EXPECT(hipsimLiveCount("graph") == live_graphs);
    PASS();
}
