/* Stream writes and waits on a capturing stream: captured by default (the write becomes a
 * BatchMemOp node, the wait is refused), run on the stream at once under the clr_stream_memops
 * quirk, as ROCm's clr does. */
#include "check.h"

static uint64_t poll_until(uint64_t *sig, uint64_t want) {
    double until = now_ms() + 5000;
    uint64_t v;
    while ((v = __atomic_load_n(sig, __ATOMIC_ACQUIRE)) != want && now_ms() < until) {}
    return v;
}

static size_t node_count(hipGraph_t g) {
    size_t n = 0;
    CHECK(hipGraphGetNodes(g, NULL, &n));
    return n;
}

int main(void) {
    hipStream_t s;
    CHECK(hipStreamCreateWithFlags(&s, hipStreamNonBlocking));
    uint64_t *sig;
    CHECK(hipExtMallocWithFlags((void **)&sig, 8, hipMallocSignalMemory));
    __atomic_store_n(sig, 0, __ATOMIC_RELEASE);
    hipGraph_t g;

    /* Default: the write is captured and runs when the graph does; a wait is refused. */
    CHECK(hipStreamBeginCapture(s, hipStreamCaptureModeThreadLocal));
    CHECK(hipStreamWriteValue64(s, sig, 5, 0));
    EXPECT_ERR(hipStreamWaitValue64(s, sig, 5, hipStreamWaitValueGte, ~0ull), hipErrorStreamCaptureUnsupported);
    CHECK(hipStreamEndCapture(s, &g));
    EXPECT(node_count(g) == 1 && __atomic_load_n(sig, __ATOMIC_ACQUIRE) == 0);
    hipGraphNode_t node;
    size_t one = 1;
    CHECK(hipGraphGetNodes(g, &node, &one));
    hipGraphNodeType t;
    CHECK(hipGraphNodeGetType(node, &t));
    EXPECT((int)t == NODE_BATCH_MEM_OP);
    hipGraphExec_t e;
    CHECK(hipGraphInstantiate(&e, g, NULL, NULL, 0));
    CHECK(hipGraphLaunch(e, s));
    CHECK(hipStreamSynchronize(s));
    EXPECT(__atomic_load_n(sig, __ATOMIC_ACQUIRE) == 5);
    CHECK(hipGraphExecDestroy(e));
    CHECK(hipGraphDestroy(g));

    /* clr: both run on the stream during the capture, which gets nothing of them. */
    EXPECT(hipsimSetQuirks("clr_stream_memops") == 0);
    CHECK(hipStreamBeginCapture(s, hipStreamCaptureModeThreadLocal));
    CHECK(hipStreamWriteValue64(s, sig, 7, 0));
    EXPECT(poll_until(sig, 7) == 7);
    CHECK(hipStreamWaitValue64(s, sig, 7, hipStreamWaitValueGte, ~0ull));
    CHECK(hipStreamEndCapture(s, &g));
    EXPECT(node_count(g) == 0);
    CHECK(hipGraphDestroy(g));
    CHECK(hipStreamSynchronize(s));
    /* Outside a capture nothing changes. */
    CHECK(hipStreamWriteValue64(s, sig, 9, 0));
    CHECK(hipStreamSynchronize(s));
    EXPECT(__atomic_load_n(sig, __ATOMIC_ACQUIRE) == 9);
    EXPECT(hipsimSetQuirks("") == 0);

    CHECK(hipFree(sig));
    CHECK(hipStreamDestroy(s));
    PASS();
}
