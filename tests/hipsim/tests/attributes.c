/* Kernel-node launch attributes as clr keeps them: the attribute set last is the one read and
 * copied, hipGraphKernelNodeCopyAttributes takes the source first, and a clone keeps them. */
#include "check.h"

/* Declared from ROCm 5.5 on (the 5.2 header used here lacks it); HIP's order: source first. */
hipError_t hipGraphKernelNodeCopyAttributes(hipGraphNode_t hSrc, hipGraphNode_t hDst);

enum { ATTR_WINDOW = 1, ATTR_COOPERATIVE = 2, ATTR_PRIORITY = 8 };

/* hipKernelNodeAttrValue grew to 64 bytes in ROCm 7; a buffer that large fits every version. */
typedef union { hipKernelNodeAttrValue v; char pad[64]; } attr_t;

static hipGraphNode_t kernel_node(hipGraph_t g, hipFunction_t fill, void *dst) {
    uint32_t v = 1;
    uint64_t n = 4;
    void *args[] = {&dst, &v, &n};
    hipKernelNodeParams p = {0};
    p.func = fill; p.gridDim = (dim3){1, 1, 1}; p.blockDim = (dim3){64, 1, 1}; p.kernelParams = args;
    hipGraphNode_t node;
    CHECK(hipGraphAddKernelNode(&node, g, NULL, 0, &p));
    return node;
}

static int cooperative_of(hipGraphNode_t node) {
    attr_t a;
    memset(&a, 0x7f, sizeof a);
    CHECK(hipGraphKernelNodeGetAttribute(node, (hipKernelNodeAttrID)ATTR_COOPERATIVE, &a.v));
    return a.v.cooperative;
}

int main(void) {
    hipModule_t m = load_module();
    hipFunction_t fill = get_fn(m, "rcb_test_fill_u32");
    uint32_t *buf;
    CHECK(hipMalloc((void **)&buf, 64));
    hipGraph_t g;
    CHECK(hipGraphCreate(&g, 0));
    hipGraphNode_t src = kernel_node(g, fill, buf), dst = kernel_node(g, fill, buf), plain = kernel_node(g, fill, buf);
    hipGraphNode_t empty;
    CHECK(hipGraphAddEmptyNode(&empty, g, NULL, 0));

    attr_t a;
    memset(&a, 0, sizeof a);
    a.v.cooperative = 1;
    CHECK(hipGraphKernelNodeSetAttribute(src, (hipKernelNodeAttrID)ATTR_COOPERATIVE, &a.v));
    EXPECT(cooperative_of(src) == 1);
    EXPECT(cooperative_of(dst) == 0); /* nothing set: every attribute reads as zero */
    /* Only the attribute set last can be read. */
    EXPECT_ERR(hipGraphKernelNodeGetAttribute(src, (hipKernelNodeAttrID)ATTR_WINDOW, &a.v), hipErrorInvalidValue);
    /* clr's priority range check refuses every value. */
    memset(&a, 0, sizeof a);
    EXPECT_ERR(hipGraphKernelNodeSetAttribute(dst, (hipKernelNodeAttrID)ATTR_PRIORITY, &a.v), hipErrorInvalidValue);
    EXPECT_ERR(hipGraphKernelNodeSetAttribute(empty, (hipKernelNodeAttrID)ATTR_COOPERATIVE, &a.v), hipErrorInvalidValue);
    EXPECT_ERR(hipGraphKernelNodeSetAttribute(dst, (hipKernelNodeAttrID)5, &a.v), hipErrorInvalidValue);
    /* A window: a hit ratio outside [0, 1] and a persisting miss property are refused. */
    a.v.accessPolicyWindow.base_ptr = buf; a.v.accessPolicyWindow.num_bytes = 64;
    a.v.accessPolicyWindow.hitRatio = 1.5f;
    EXPECT_ERR(hipGraphKernelNodeSetAttribute(plain, (hipKernelNodeAttrID)ATTR_WINDOW, &a.v), hipErrorInvalidValue);
    a.v.accessPolicyWindow.hitRatio = 0.5f; a.v.accessPolicyWindow.missProp = hipAccessPropertyPersisting;
    EXPECT_ERR(hipGraphKernelNodeSetAttribute(plain, (hipKernelNodeAttrID)ATTR_WINDOW, &a.v), hipErrorInvalidValue);

    /* CUDA's order (destination first) reads the attribute-less node as the source: clr fails
     * with hipErrorInvalidContext and changes nothing. */
    EXPECT_ERR(hipGraphKernelNodeCopyAttributes(dst, src), hipErrorInvalidContext);
    EXPECT(cooperative_of(src) == 1 && cooperative_of(dst) == 0);
    /* HIP's order copies it. */
    CHECK(hipGraphKernelNodeCopyAttributes(src, dst));
    EXPECT(cooperative_of(dst) == 1);
    /* Two nodes without attributes: nothing to do. */
    hipGraphNode_t other = kernel_node(g, fill, buf);
    CHECK(hipGraphKernelNodeCopyAttributes(plain, other));
    EXPECT_ERR(hipGraphKernelNodeCopyAttributes(NULL, dst), hipErrorInvalidValue);
    EXPECT_ERR(hipGraphKernelNodeCopyAttributes(src, empty), hipErrorInvalidValue);

    /* A clone keeps them. */
    hipGraph_t clone;
    CHECK(hipGraphClone(&clone, g));
    hipGraphNode_t nodes[8];
    size_t count = 8;
    CHECK(hipGraphGetNodes(clone, nodes, &count));
    EXPECT(count == 5 && cooperative_of(nodes[0]) == 1 && cooperative_of(nodes[2]) == 0);

    CHECK(hipGraphDestroy(clone));
    CHECK(hipGraphDestroy(g));
    CHECK(hipFree(buf));
    PASS();
}
