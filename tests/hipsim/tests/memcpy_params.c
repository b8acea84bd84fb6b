/* hipGraphMemcpyNodeGetParams of 1-D memcpy nodes by ROCm version (HIPSIM_VERSION): from 7.2
 * the parameters the node was created with, which hipGraphMemcpyNodeSetParams1D does not
 * refresh and a clone keeps; before, memory clr never wrote (modelled as zeros). Either way the
 * node copies what it was last set to.
 * Usage: memcpy_params EXPECTED_VERSION */
#include "check.h"

static void expect_params(hipGraphNode_t node, const void *dst, const void *src, size_t n) {
    hipMemcpy3DParms p;
    memset(&p, 0x5a, sizeof p);
    CHECK(hipGraphMemcpyNodeGetParams(node, &p));
    EXPECT(p.srcArray == NULL && p.dstArray == NULL && p.srcPos.x == 0 && p.dstPos.x == 0);
    EXPECT(p.dstPtr.ptr == dst && p.srcPtr.ptr == src && p.extent.width == n);
    EXPECT(p.dstPtr.pitch == 0 && p.srcPtr.xsize == 0); /* clr zero-fills, then sets only these */
    if (n) EXPECT(p.extent.height == 1 && p.extent.depth == 1 && p.kind == hipMemcpyDeviceToDevice);
}

int main(int argc, char **argv) {
    EXPECT(argc == 2);
    int want = atoi(argv[1]), v = 0;
    CHECK(hipRuntimeGetVersion(&v));
    EXPECT(v == want);
    int filled = v >= 70200000;
    uint32_t *a, *b, *c;
    CHECK(hipMalloc((void **)&a, 64)); CHECK(hipMalloc((void **)&b, 64)); CHECK(hipMalloc((void **)&c, 64));
    CHECK(hipMemsetD32(a, 7, 16)); CHECK(hipMemsetD32(b, 0, 16)); CHECK(hipMemsetD32(c, 0, 16));
    hipGraph_t g;
    CHECK(hipGraphCreate(&g, 0));
    hipGraphNode_t node;
    CHECK(hipGraphAddMemcpyNode1D(&node, g, NULL, 0, b, a, 64, hipMemcpyDeviceToDevice));
    if (filled) expect_params(node, b, a, 64); else expect_params(node, NULL, NULL, 0);
    /* Set to copy into c instead: the node does, GetParams does not say so. */
    CHECK(hipGraphMemcpyNodeSetParams1D(node, c, a, 64, hipMemcpyDeviceToDevice));
    if (filled) expect_params(node, b, a, 64); else expect_params(node, NULL, NULL, 0);
    hipGraph_t clone;
    CHECK(hipGraphClone(&clone, g));
    hipGraphNode_t cloned;
    size_t one = 1;
    CHECK(hipGraphGetNodes(clone, &cloned, &one));
    if (filled) expect_params(cloned, b, a, 64); else expect_params(cloned, NULL, NULL, 0);
    /* A captured copy is a 1-D node too. */
    hipStream_t s;
    CHECK(hipStreamCreateWithFlags(&s, hipStreamNonBlocking));
    CHECK(hipStreamBeginCapture(s, hipStreamCaptureModeThreadLocal));
    CHECK(hipMemcpyAsync(c, b, 32, hipMemcpyDeviceToDevice, s));
    hipGraph_t captured;
    CHECK(hipStreamEndCapture(s, &captured));
    CHECK(hipGraphGetNodes(captured, &node, &one));
    if (filled) expect_params(node, c, b, 32); else expect_params(node, NULL, NULL, 0);

    hipGraphExec_t e;
    CHECK(hipGraphInstantiate(&e, clone, NULL, NULL, 0));
    CHECK(hipGraphLaunch(e, s));
    CHECK(hipStreamSynchronize(s));
    uint32_t host[16];
    CHECK(hipMemcpy(host, c, sizeof host, hipMemcpyDeviceToHost));
    expect_u32(host, 16, 7);
    CHECK(hipMemcpy(host, b, sizeof host, hipMemcpyDeviceToHost));
    expect_u32(host, 16, 0);
    CHECK(hipGraphExecDestroy(e));
    CHECK(hipGraphDestroy(captured));
    CHECK(hipGraphDestroy(clone));
    CHECK(hipGraphDestroy(g));
    CHECK(hipStreamDestroy(s));
    PASS();
}
