/* hipGraphMemcpyNodeGetParams of 1-D memcpy nodes by ROCm version (HIPSIM_VERSION): from 7.2
 * the parameters the node was created with, which hipGraphMemcpyNodeSetParams1D does not
 * refresh and a clone keeps; before, memory clr never wrote (modelled as zeros). Either way the
 * node copies what it was last set to. The other memcpy nodes: a 3-D node reports what it was
 * given, a node copying to or from a symbol a null destination or source (as a 1-D node), a
 * driver node (HIP_MEMCPY3D) its first 160 bytes. hipGraphDestroyNode removes a node and its
 * edges.
 * Usage: memcpy_params EXPECTED_VERSION */
#include "check.h"

#include <hip/hip_version.h>

static uint32_t first_u32(const void *device) {
    uint32_t v = 0;
    CHECK(hipMemcpy(&v, device, sizeof v, hipMemcpyDeviceToHost));
    return v;
}

static void run_graph(hipGraph_t g, hipStream_t s) {
    hipGraphExec_t e;
    CHECK(hipGraphInstantiate(&e, g, NULL, NULL, 0));
    CHECK(hipGraphLaunch(e, s));
    CHECK(hipStreamSynchronize(s));
    CHECK(hipGraphExecDestroy(e));
}

/* The memcpy nodes that are not plain 1-D copies, and hipGraphDestroyNode. */
static void other_nodes(int filled, hipStream_t s) {
    uint32_t *rows, *d, *sym;
    CHECK(hipMalloc((void **)&rows, 128)); CHECK(hipMalloc((void **)&d, 64)); CHECK(hipMalloc((void **)&sym, 64));
    CHECK(hipMemsetD32(rows, 1, 16)); CHECK(hipMemsetD32(rows + 16, 9, 16));
    CHECK(hipMemsetD32(d, 0, 16)); CHECK(hipMemsetD32(sym, 5, 16));
    hipGraph_t g;
    CHECK(hipGraphCreate(&g, 0));
    /* One row of 64 bytes from row 1 of a pitched source: a 2-D copy with one row. */
    hipMemcpy3DParms three;
    memset(&three, 0, sizeof three);
    three.srcPtr = (hipPitchedPtr){ rows, 64, 64, 2 };
    three.srcPos = (hipPos){ 0, 1, 0 };
    three.dstPtr = (hipPitchedPtr){ d, 64, 64, 1 };
    three.extent = (hipExtent){ 64, 1, 1 };
    three.kind = hipMemcpyDeviceToDevice;
    hipGraphNode_t n3, to, from, last;
    CHECK(hipGraphAddMemcpyNode(&n3, g, NULL, 0, &three));
    hipMemcpy3DParms p;
    memset(&p, 0x5a, sizeof p);
    CHECK(hipGraphMemcpyNodeGetParams(n3, &p));
    EXPECT(memcmp(&p, &three, sizeof p) == 0);
    three.srcPtr.pitch = 32; /* rows shorter than the copy's row */
    EXPECT_ERR(hipGraphAddMemcpyNode(&last, g, NULL, 0, &three), hipErrorInvalidValue);
    three.srcPtr.pitch = 64;
    /* A symbol is its device address in hipsim: sym <- d (16 bytes at offset 16), then d <- sym. */
    CHECK(hipGraphAddMemcpyNodeToSymbol(&to, g, &n3, 1, sym, d, 16, 16, hipMemcpyDeviceToDevice));
    CHECK(hipGraphMemcpyNodeGetParams(to, &p));
    if (filled) EXPECT(p.dstPtr.ptr == NULL && p.srcPtr.ptr == d && p.extent.width == 16 && p.kind == hipMemcpyDeviceToDevice);
    CHECK(hipGraphAddMemcpyNodeFromSymbol(&from, g, &to, 1, d, sym, 4, 16, hipMemcpyDeviceToDevice));
    CHECK(hipGraphMemcpyNodeGetParams(from, &p));
    if (filled) EXPECT(p.dstPtr.ptr == d && p.srcPtr.ptr == NULL && p.extent.width == 4);
    if (!filled) EXPECT(p.dstPtr.ptr == NULL && p.srcPtr.ptr == NULL && p.extent.width == 0);
#if HIP_VERSION_MAJOR >= 6
    /* A driver node: what the call reports is its HIP_MEMCPY3D's first 160 bytes. */
    HIP_MEMCPY3D drv;
    memset(&drv, 0, sizeof drv);
    drv.srcMemoryType = hipMemoryTypeDevice; drv.srcDevice = (hipDeviceptr_t)(rows + 16);
    drv.dstMemoryType = hipMemoryTypeDevice; drv.dstDevice = (hipDeviceptr_t)(sym + 8);
    drv.WidthInBytes = 32; drv.Height = 1; drv.Depth = 1;
    CHECK(hipDrvGraphAddMemcpyNode(&last, g, &from, 1, &drv, NULL));
    CHECK(hipGraphMemcpyNodeGetParams(last, &p));
    EXPECT(memcmp(&p, &drv, sizeof p) == 0);
#else
    CHECK(hipGraphAddEmptyNode(&last, g, &from, 1));
#endif
    run_graph(g, s);
    EXPECT(first_u32(d) == 9 && first_u32(sym + 4) == 9 && first_u32(sym) == 5);
    /* Destroying the middle nodes takes their edges: the graph keeps n3 and last. */
    CHECK(hipGraphDestroyNode(to));
    CHECK(hipGraphDestroyNode(from));
    EXPECT_ERR(hipGraphDestroyNode(to), hipErrorInvalidHandle);
    size_t count = 0;
    CHECK(hipGraphGetNodes(g, NULL, &count));
    EXPECT(count == 2);
    CHECK(hipGraphGetEdges(g, NULL, NULL, &count));
    EXPECT(count == 0);
    CHECK(hipGraphMemcpyNodeGetParams(n3, &p));
    EXPECT(p.srcPos.y == 1 && p.srcPtr.ptr == rows);
    CHECK(hipMemsetD32(d, 0, 16));
    run_graph(g, s);
    EXPECT(first_u32(d) == 9);
    CHECK(hipGraphDestroy(g));
    CHECK(hipFree(rows)); CHECK(hipFree(d)); CHECK(hipFree(sym));
}

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
    other_nodes(filled, s);
    CHECK(hipStreamDestroy(s));
    PASS();
}
